// KV events: what a cluster router must learn about a manager's base block index, in vLLM's event vocabulary
// (docs/EVENTS.md). A KvEventLog is a flat, append-only list of events; the manager fills one during each call
// and hands it to its KvEventSink at the end of the call, or keeps it for a drain.
//
//   BlockStored      a publication made these blocks canonical (first committer): one event per run of
//                    consecutive newly mapped blocks of one publication, root-first; `parent` is the block before
//                    the run (none for the first block of a prompt); tokens are the run's blockSize tokens each.
//                    With the publication's identity (KvEventKeys): the LoRA adapter's name, and per block vLLM's
//                    extra keys: the adapter's name (when there is one), then one (identifier, offset) per media
//                    item overlapping the block, offset = the item's first token minus the block's first token
//                    (negative when the item began in an earlier block).
//   BlockRemoved     eviction erased these blocks' canonical index entries (leaf-first within a record).
//   AllBlocksCleared every entry is gone: events were just enabled on an empty index, or the manager was cleared.
//
// Block hashes on the wire are the low 64 bits of the 128-bit block hash (Hash128::lo). For the SHA-256 chain,
// lo is digest bytes 8..15 read big-endian: the last 8 bytes of the 16 kept, which is what vLLM's integer mode
// takes from its own digest (int.from_bytes(digest, "big") & (2**64 - 1)).
//
// Invariants: every event's hash, token, text and extra-key ranges lie inside the log's arrays; a stored event's
//             token count is blockSize times its hash count; its extra keys are in block order, each naming one of
//             its blocks and text inside the log's text.
// Cost:       appends are amortised O(hashes + tokens + keys); clear() keeps the capacity (no allocation in steady
//             state).
// Threading:  plain value; no shared state. A sink is called on the manager's thread (its single writer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ctxcache/block_hash.h"

namespace ctxcache {

// Values are part of the C ABI (ctxc_kv_event_type_t).
enum class KvEventType : uint8_t { kBlockStored = 0, kBlockRemoved = 1, kAllBlocksCleared = 2 };
// Where an event's blocks live (vLLM's "medium"): the device pool (the manager's own events; a publisher writes its
// configured medium, "GPU" by default) or a host tier beside it ("CPU"). Values are part of the C ABI
// (CTXC_KV_MEDIUM_*).
enum class KvEventMedium : uint8_t { kDevice = 0, kHost = 1 };

// The 64-bit block identity a router sees (see the file comment).
inline constexpr uint64_t kvEventBlockHash(Hash128 const& hash) noexcept { return hash.lo; }

// One media item of a prompt as the events name it (vLLM's mm identifier and placeholder range).
struct KvEventMedia {
    std::string_view identifier;  // ctxcache's own: 64 hex digits (mediaEventIdentifier); routers parse that shape
    int64_t firstToken = 0;       // prompt position of its first placeholder token
    int64_t tokenCount = 0;       // > 0
};

// What a publication's events say about its blocks beyond their tokens, as views of the caller's data: the LoRA
// adapter (BlockStored's lora_name) and the prompt's media items, sorted by firstToken and not overlapping. Read
// only while events are on; checked then (ContractError, nothing changed).
struct KvEventKeys {
    std::string_view loraName;  // empty: the base model
    KvEventMedia const* media = nullptr;
    size_t mediaCount = 0;

    KvEventKeys() = default;
    KvEventKeys(std::string_view lora, KvEventMedia const* items = nullptr, size_t itemCount = 0)  // NOLINT
        : loraName(lora), media(items), mediaCount(itemCount) {}
};

// An owned KvEventKeys: a request's identity, built once (at admission) and read by each of its publications.
// Immutable, neither copied nor moved (the views point into it): hold it by pointer.
class KvEventIdentity {
public:
    struct Media {
        std::string identifier;
        int64_t firstToken = 0;
        int64_t tokenCount = 0;
    };
    KvEventIdentity(std::string loraName, std::vector<Media> media);
    KvEventIdentity(KvEventIdentity const&) = delete;
    KvEventIdentity& operator=(KvEventIdentity const&) = delete;

    KvEventKeys keys() const noexcept { return {loraName_, views_.data(), views_.size()}; }

private:
    std::string loraName_;
    std::vector<Media> media_;
    std::vector<KvEventMedia> views_;
};

// The identifier ctxcache's events give a media item whose 128-bit identity (the block hash's media key) is
// `identity`: 64 lowercase hex digits (SHA-256 of its 16 bytes), the shape of vLLM's own identifiers, which
// Dynamo's router requires (it hashes the first 16 digits into its block keys).
std::string mediaEventIdentifier(Hash128 const& identity);

// Values are part of the C ABI (ctxc_kv_event_extra_key_t::kind).
enum class KvEventExtraKeyKind : uint8_t { kLoraName = 0, kMedia = 1 };

// One of a stored block's extra keys (vLLM's untagged form): the adapter's name, or (media identifier, offset).
struct KvEventExtraKey {
    uint32_t block = 0;  // which of the event's blocks, 0 = the first listed
    KvEventExtraKeyKind kind = KvEventExtraKeyKind::kLoraName;
    size_t firstChar = 0;  // the text (name or identifier), into KvEventLog::text()
    size_t charCount = 0;
    int64_t offset = 0;  // kMedia: the item's first token minus the block's first token
};

// An extra key from its wire values (a caller of the C ABI's encode).
struct KvEventExtraKeyValue {
    uint32_t block = 0;
    KvEventExtraKeyKind kind = KvEventExtraKeyKind::kLoraName;
    std::string_view text;
    int64_t offset = 0;
};

struct KvEvent {
    KvEventType type = KvEventType::kAllBlocksCleared;
    KvEventMedium medium = KvEventMedium::kDevice;
    bool hasParent = false;
    uint64_t parentBlockHash = 0;
    size_t firstHash = 0;  // into KvEventLog::hashes()
    size_t hashCount = 0;
    size_t firstToken = 0;  // into KvEventLog::tokens() (BlockStored only)
    size_t tokenCount = 0;
    size_t firstLoraChar = 0;  // BlockStored: the adapter's name, into KvEventLog::text(); empty = base model
    size_t loraCharCount = 0;
    size_t firstExtraKey = 0;  // BlockStored: into KvEventLog::extraKeys(); none = no block has extra keys
    size_t extraKeyCount = 0;
};

class KvEventLog {
public:
    // blockHashes are the full 128-bit hashes; the log keeps kvEventBlockHash of each. `keys` (checked by the
    // caller: checkKvEventKeys) gives each block its extra keys; the first block starts at prompt position
    // firstPosition and each holds blockSize tokens.
    void appendStored(BlockHash const* blockHashes, size_t count, bool hasParent, uint64_t parentBlockHash,
                      int32_t const* tokens, size_t tokenCount, KvEventKeys const& keys = {}, int64_t firstPosition = 0,
                      KvEventMedium medium = KvEventMedium::kDevice);
    // Opens a BlockRemoved event with room for `capacity` hashes; addRemoved appends up to that many hashes
    // root-first without allocating (one event per evicted or trimmed record).
    void beginRemoved(size_t capacity = 0, KvEventMedium medium = KvEventMedium::kDevice);
    void addRemoved(uint64_t blockHash) noexcept {
        hashes_.push_back(blockHash);
        ++events_.back().hashCount;
    }
    // Closes it: its hashes become leaf-first (a consumer never sees a block go before its descendants); an
    // event that received no hash is dropped.
    void endRemoved() noexcept;
    void appendCleared();
    // Any event from its wire values (hashes already 64-bit), e.g. one a caller of the C ABI hands back to encode.
    // extraKeys: in block order, each block < count (checked by the caller).
    void appendEvent(KvEventType type, bool hasParent, uint64_t parentBlockHash, uint64_t const* blockHashes,
                     size_t count, int32_t const* tokens, size_t tokenCount, std::string_view loraName = {},
                     KvEventExtraKeyValue const* extraKeys = nullptr, size_t extraKeyCount = 0,
                     KvEventMedium medium = KvEventMedium::kDevice);
    // Moves other's events behind this log's (offsets rebased).
    void append(KvEventLog const& other);

    void clear() noexcept {
        events_.clear();
        hashes_.clear();
        tokens_.clear();
        text_.clear();
        extraKeys_.clear();
    }
    bool empty() const noexcept { return events_.empty(); }
    size_t size() const noexcept { return events_.size(); }
    std::vector<KvEvent> const& events() const noexcept { return events_; }
    std::vector<uint64_t> const& hashes() const noexcept { return hashes_; }
    std::vector<int32_t> const& tokens() const noexcept { return tokens_; }
    std::string const& text() const noexcept { return text_; }
    std::vector<KvEventExtraKey> const& extraKeys() const noexcept { return extraKeys_; }
    std::string_view loraName(KvEvent const& e) const noexcept {
        return {text_.data() + e.firstLoraChar, e.loraCharCount};
    }
    std::string_view text(KvEventExtraKey const& k) const noexcept { return {text_.data() + k.firstChar, k.charCount}; }

    // The page size of the manager that wrote the events (a BlockStored's block_size).
    int32_t blockSize = 0;

private:
    // The header of an event whose count hashes and tokenCount tokens go at the current ends of the arrays.
    KvEvent header(KvEventType type, bool hasParent, uint64_t parentBlockHash, size_t count,
                   size_t tokenCount) const noexcept;
    // Room for one more event and that many hashes, tokens, characters and extra keys: after it, appending them
    // cannot throw.
    void reserveFor(size_t count, size_t tokenCount, size_t chars = 0, size_t keys = 0);

    std::vector<KvEvent> events_;
    std::vector<uint64_t> hashes_;
    std::vector<int32_t> tokens_;
    std::string text_;  // LoRA names and media identifiers
    std::vector<KvEventExtraKey> extraKeys_;
};

// The ContractError a publication's keys deserve, if any (operation names the call): a media item without an
// identifier, with a negative position or no tokens, or out of order or overlapping the one before.
void checkKvEventKeys(char const* operation, KvEventKeys const& keys);

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
