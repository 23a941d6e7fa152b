// KV events: what a cluster router must learn about a manager's base block index, in vLLM's event vocabulary
// (docs/EVENTS.md). A KvEventLog is a flat, append-only list of events; the manager fills one during each call
// and hands it to its KvEventSink at the end of the call, or keeps it for a drain.
//
//   BlockStored      a publication made these blocks canonical (first committer): one event per run of
//                    consecutive newly mapped blocks of one publication, root-first; `parent` is the block before
//                    the run (none for the first block of a prompt); tokens are the run's blockSize tokens each.
//   BlockRemoved     eviction erased these blocks' canonical index entries (leaf-first within a record).
//   AllBlocksCleared every entry is gone: events were just enabled on an empty index, or the manager was cleared.
//
// Block hashes on the wire are the low 64 bits of the 128-bit block hash (Hash128::lo). For the SHA-256 chain,
// lo is digest bytes 8..15 read big-endian: the last 8 bytes of the 16 kept, which is what vLLM's integer mode
// takes from its own digest (int.from_bytes(digest, "big") & (2**64 - 1)).
//
// Invariants: every event's hash range and token range lie inside the log's arrays; a stored event's token count
//             is blockSize times its hash count.
// Cost:       appends are amortised O(hashes + tokens); clear() keeps the capacity (no allocation in steady state).
// Threading:  plain value; no shared state. A sink is called on the manager's thread (its single writer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxcache/block_hash.h"

namespace ctxcache {

// Values are part of the C ABI (ctxc_kv_event_type_t).
enum class KvEventType : uint8_t { kBlockStored = 0, kBlockRemoved = 1, kAllBlocksCleared = 2 };

// The 64-bit block identity a router sees (see the file comment).
inline constexpr uint64_t kvEventBlockHash(Hash128 const& hash) noexcept { return hash.lo; }

struct KvEvent {
    KvEventType type = KvEventType::kAllBlocksCleared;
    bool hasParent = false;
    uint64_t parentBlockHash = 0;
    size_t firstHash = 0;  // into KvEventLog::hashes()
    size_t hashCount = 0;
    size_t firstToken = 0;  // into KvEventLog::tokens() (BlockStored only)
    size_t tokenCount = 0;
};

class KvEventLog {
public:
    // blockHashes are the full 128-bit hashes; the log keeps kvEventBlockHash of each.
    void appendStored(BlockHash const* blockHashes, size_t count, bool hasParent, uint64_t parentBlockHash,
                      int32_t const* tokens, size_t tokenCount);
    // Opens a BlockRemoved event with room for `capacity` hashes; addRemoved appends up to that many hashes
    // root-first without allocating (one event per evicted or trimmed record).
    void beginRemoved(size_t capacity = 0);
    void addRemoved(uint64_t blockHash) noexcept {
        hashes_.push_back(blockHash);
        ++events_.back().hashCount;
    }
    // Closes it: its hashes become leaf-first (a consumer never sees a block go before its descendants); an
    // event that received no hash is dropped.
    void endRemoved() noexcept;
    void appendCleared();
    // Any event from its wire values (hashes already 64-bit), e.g. one a caller of the C ABI hands back to encode.
    void appendEvent(KvEventType type, bool hasParent, uint64_t parentBlockHash, uint64_t const* blockHashes,
                     size_t count, int32_t const* tokens, size_t tokenCount);
    // Moves other's events behind this log's (offsets rebased).
    void append(KvEventLog const& other);

    void clear() noexcept {
        events_.clear();
        hashes_.clear();
        tokens_.clear();
    }
    bool empty() const noexcept { return events_.empty(); }
    size_t size() const noexcept { return events_.size(); }
    std::vector<KvEvent> const& events() const noexcept { return events_; }
    std::vector<uint64_t> const& hashes() const noexcept { return hashes_; }
    std::vector<int32_t> const& tokens() const noexcept { return tokens_; }

    // The page size of the manager that wrote the events (a BlockStored's block_size).
    int32_t blockSize = 0;

private:
    // The header of an event whose count hashes and tokenCount tokens go at the current ends of the arrays.
    KvEvent header(KvEventType type, bool hasParent, uint64_t parentBlockHash, size_t count,
                   size_t tokenCount) const noexcept;
    // Room for one more event and that many hashes and tokens: after it, appending them cannot throw.
    void reserveFor(size_t count, size_t tokenCount);

    std::vector<KvEvent> events_;
    std::vector<uint64_t> hashes_;
    std::vector<int32_t> tokens_;
};

// Where a manager sends each call's events. consume() runs on the manager's thread at the end of the call, must
// be quick (it is on the cache's critical path) and never throw; it may swap the log's contents out. Whatever it
// leaves in the log is discarded.
class KvEventSink {
public:
    virtual ~KvEventSink() = default;
    virtual void consume(KvEventLog& events) noexcept = 0;
};

// The prompt tokens behind a publication's blocks (block i holds tokens [i * pageSize, (i + 1) * pageSize)). A
// manager with events enabled needs them to publish; otherwise they are ignored.
struct BlockTokenSpan {
    int32_t const* data = nullptr;
    size_t size = 0;

    BlockTokenSpan() = default;
    BlockTokenSpan(int32_t const* tokens, size_t count) : data(tokens), size(count) {}
    BlockTokenSpan(std::vector<int32_t> const& tokens) : data(tokens.data()), size(tokens.size()) {}  // NOLINT
};

}  // namespace ctxcache
