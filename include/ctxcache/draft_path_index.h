// DraftPathIndex: coherent EAGLE draft paths. For every boundary i of every draft-paired record it maps the
// block hash at i to {record, pathBlockCount = i + 1}. Draft pages are never canonicalized across records, so
// a match always names ONE record and the consumer binds that record's own draft path (no stitching).
//
// Invariants: an entry {record, n} exists under hashes[n-1] for n = 1..len exactly while `record` is stored
//             with a draft path; repeated hashes inside one path are distinct boundaries (distinct n).
// Errors:     insert of a record without a complete draft path, or of an entry already present:
//             ContractError, nothing changed (strong guarantee).
// Cost:       insert/erase O(path length x entries per hash); lookupLongest O(maxBlockCount x entries per hash)
//             in the worst case, O(1) per probed boundary for chained hashes; memoryBytes O(1) (kept up to date
//             by insert and erase; checkInvariants recounts it in O(entries)).
// Threading:  single writer, no internal locks.
#pragma once

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
    void insert(CacheRecord const& record);
    // Longest n <= maxBlockCount (and <= hashes.size()) whose boundary hashes[n-1] has an entry with
    // pathBlockCount == n; among several, the most recently inserted.
    std::optional<DraftPathMatch> lookupLongest(BlockHashSpan hashes, int32_t maxBlockCount) const;
    bool contains(BlockHash const& terminalHash, DraftPathMatch const& match) const;
    // Removes exactly `record`'s entries; a record without a draft path is a no-op.
    void erase(CacheRecord const& record);
    // Removes record's entries {record, firstBlock + i + 1} under hashes[i], i < count: the boundaries a trim
    // gives up (firstBlock = the blocks kept). Entries not present are skipped. O(count x entries per hash).
    void eraseBoundaries(RecordId record, int32_t firstBlock, BlockHash const* hashes, size_t count);

    size_t entryCount() const noexcept { return entries_; }
    template <class F>
    void forEach(F&& f) const {
        for (auto const& [hash, matches] : byHash_)
            for (DraftPathMatch const& m : matches) f(hash, m);
    }
    size_t memoryBytes() const noexcept;
    // Throws InvariantError when the entry count or the memory accounting disagrees with the map.
    void checkInvariants() const;

private:
    std::unordered_map<BlockHash, std::vector<DraftPathMatch>, Hash128Hasher> byHash_;
    size_t entries_ = 0;
    size_t matchCapacity_ = 0;  // sum of the capacities of byHash_'s vectors: memoryBytes() without a walk
};

}  // namespace ctxcache
