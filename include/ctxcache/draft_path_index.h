// DraftPathIndex: coherent EAGLE draft paths. For every boundary n = 1..len of every draft-paired record it
// holds the entry {record, pathBlockCount = n} under the block hash at n - 1. Draft pages are never
// canonicalized across records, so a match always names ONE record and the consumer binds that record's own
// draft path (no stitching).
//
// Layout:     one open-addressing table (linear probing, backward-shift deletion) of 24-byte boundary slots
//             {hash, n, head}, one per distinct (hash, n); the entries under a boundary form a singly linked
//             list, most recently inserted first, whose links live in the records: every indexed record owns one
//             array of uint32 links, link[n - 1] = the next record (by dense record slot) in boundary n's list.
//             An entry therefore costs 4 bytes and a distinct boundary 24 / load factor; the record slot is a
//             list node's whole identity because every entry of boundary n sits at position n - 1 of its record.
// Invariants: an entry {record, n} exists exactly while record's link[n - 1] is present, and then it is on the
//             list of exactly one boundary (hashes[n - 1], n); a boundary slot exists exactly while its list is
//             non-empty; a record slot exists exactly while its record has an entry. A record has at most one
//             entry per boundary n.
// Errors:     insert of a record without a complete draft path, or of a boundary the record already has:
//             ContractError, nothing changed; an allocation failure midway undoes the partial insert (strong
//             guarantee).
// Cost:       insert O(path length) probes; erase O(path length x entries per boundary) (the walk to the record's
//             link); lookupLongest O(1) per probed boundary, one probe in the common case; contains O(entries
//             under the boundary); memoryBytes O(1) (kept up to date by every change; checkInvariants recounts
//             it and every list in O(slots + entries)).
// Threading:  single writer, no internal locks; const members may run concurrently with each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/cache_record.h"

namespace ctxcache {

struct DraftPathMatch {
    RecordId record = kNoRecord;
    int32_t pathBlockCount = 0;

    friend bool operator==(DraftPathMatch const& a, DraftPathMatch const& b) noexcept {
        return a.record == b.record && a.pathBlockCount == b.pathBlockCount;
    }
};

class DraftPathIndex {
public:
    // Indexes boundaries 1..hashes.size of `record`, hashes being its logical block hashes; draftPathLength is
    // the length of its draft page path, which must equal hashes.size and be positive.
    void insert(RecordId record, BlockHashSpan hashes, size_t draftPathLength);
    void insert(CacheRecord const& record) {
        insert(record.id, record.logicalBlockHashes, record.draftPagePath.size());
    }
    // Longest n <= maxBlockCount (and <= hashes.size()) whose boundary hashes[n-1] has an entry with
    // pathBlockCount == n; among several, the most recently inserted.
    std::optional<DraftPathMatch> lookupLongest(BlockHashSpan hashes, int32_t maxBlockCount) const;
    bool contains(BlockHash const& terminalHash, DraftPathMatch const& match) const;
    // Removes exactly `record`'s entries {record, i + 1} under hashes[i]; entries not present are skipped.
    void erase(RecordId record, BlockHashSpan hashes) { eraseBoundaries(record, 0, hashes.data, hashes.size); }
    // The same for a stored record; a record without a draft path is a no-op.
    void erase(CacheRecord const& record) {
        if (record.hasDraftPath()) erase(record.id, record.logicalBlockHashes);
    }
    // Removes record's entries {record, firstBlock + i + 1} under hashes[i], i < count: the boundaries a trim
    // gives up (firstBlock = the blocks kept). Entries not present are skipped. O(count x entries per boundary).
    void eraseBoundaries(RecordId record, int32_t firstBlock, BlockHash const* hashes, size_t count);

    size_t entryCount() const noexcept { return entries_; }
    // f(hash, match) once per entry; under one boundary the most recently inserted first.
    template <class F>
    void forEach(F&& f) const {
        for (Boundary const& b : boundaries_) {
            if (b.pathBlockCount == 0) continue;
            size_t const link = static_cast<size_t>(b.pathBlockCount - 1);
            for (uint32_t slot = b.head; slot != kEnd; slot = records_[slot].links[link])
                f(BlockHash{b.hashHi, b.hashLo}, DraftPathMatch{records_[slot].id, b.pathBlockCount});
        }
    }
    size_t memoryBytes() const noexcept;
    // Throws InvariantError when an entry count, a list, a record slot or the memory accounting disagrees.
    void checkInvariants() const;

private:
    static constexpr uint32_t kAbsent = 0xFFFFFFFFu;  // a record's link: no entry at this boundary
    static constexpr uint32_t kEnd = 0xFFFFFFFEu;     // a record's link or a head: the end of a list

    // One distinct (hash, n); pathBlockCount == 0 marks an empty slot.
    struct Boundary {
        uint64_t hashHi = 0;
        uint64_t hashLo = 0;
        int32_t pathBlockCount = 0;
        uint32_t head = kEnd;  // record slot of the most recently inserted entry
    };
    static_assert(sizeof(Boundary) == 24, "a boundary slot is 24 bytes: the index's per-block cost");

    struct RecordLinks {
        RecordId id = kNoRecord;
        std::vector<uint32_t> links;  // links[n - 1]: next record slot in boundary n's list, kEnd, or kAbsent
        uint32_t entries = 0;         // links present; 0: a free slot
        uint32_t nextFree = kEnd;     // free slots only: the next free slot
    };

    // Starts loading the home slot of (hash, pathBlockCount); a hint only (any values, no state change).
    void prefetchBoundary(BlockHash const& hash, int32_t pathBlockCount) const noexcept;
    Boundary const* findBoundary(BlockHash const& hash, int32_t pathBlockCount) const noexcept;
    Boundary* findBoundary(BlockHash const& hash, int32_t pathBlockCount) noexcept;
    // The boundary, added with an empty list if absent. Growth may throw, before anything changed.
    Boundary& findOrAddBoundary(BlockHash const& hash, int32_t pathBlockCount);
    void removeBoundary(Boundary& boundary) noexcept;
    void rehash(size_t capacity);
    size_t home(uint64_t hi, uint64_t lo, int32_t pathBlockCount) const noexcept;
    // Unlinks `slot` from the list of `boundary` (whose pathBlockCount is n); false when it is not on it.
    bool unlink(Boundary& boundary, uint32_t slot) noexcept;
    uint32_t addRecordSlot(RecordId record, size_t length);  // strong guarantee
    void releaseRecordSlot(uint32_t slot) noexcept;

    std::vector<Boundary> boundaries_;  // capacity a power of two (or 0), at most 3/4 used
    size_t boundaryCount_ = 0;
    size_t mask_ = 0;
    std::vector<RecordLinks> records_;  // record slots, live and free
    std::unordered_map<RecordId, uint32_t> slotOf_;  // live record slots
    uint32_t freeSlot_ = kEnd;                       // head of the free record slots
    size_t entries_ = 0;
    size_t linkCapacity_ = 0;  // sum of the capacities of the live records' link arrays: memoryBytes() without a walk
};

}  // namespace ctxcache
