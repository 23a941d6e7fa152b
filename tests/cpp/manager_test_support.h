// Small helpers shared by the manager-level suites: synthetic block hashes and whole-state snapshots used to
// prove that a failed call changed nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxcache/context_cache_manager.h"

namespace ctxcache::testing {

// A distinct synthetic block hash per (lane, index): the manager never looks inside hashes.
inline BlockHash blockHash(uint64_t lane, uint64_t index) { return BlockHash{0xC0FFEE00ull + lane, index}; }

// hashes[i] = blockHash(lane, i) for i in [0, count).
inline std::vector<BlockHash> chain(uint64_t lane, int count) {
    std::vector<BlockHash> out;
    for (int i = 0; i < count; ++i) out.push_back(blockHash(lane, static_cast<uint64_t>(i)));
    return out;
}

// `prefix` followed by `count` hashes of another lane: a request sharing `prefix` then diverging.
inline std::vector<BlockHash> extend(std::vector<BlockHash> prefix, uint64_t lane, int count) {
    for (int i = 0; i < count; ++i) prefix.push_back(blockHash(lane, static_cast<uint64_t>(prefix.size())));
    return prefix;
}

// Everything observable about refcounts, pools and records, for "nothing changed" assertions.
struct StateSnapshot {
    std::vector<int32_t> free;
    std::vector<int32_t> active;
    std::vector<int32_t> cache;
    std::vector<RecordId> lru;
    size_t baseIndexSize = 0;
    size_t draftIndexEntries = 0;

    friend bool operator==(StateSnapshot const& a, StateSnapshot const& b) {
        return a.free == b.free && a.active == b.active && a.cache == b.cache && a.lru == b.lru &&
               a.baseIndexSize == b.baseIndexSize && a.draftIndexEntries == b.draftIndexEntries;
    }
};

inline StateSnapshot snapshot(ContextCacheManager const& m) {
    StateSnapshot s;
    for (int t = 0; t < kResourceTypeCount; ++t) {
        auto const type = static_cast<ResourceType>(t);
        s.free.push_back(m.pools().freeCount(type));
        for (int32_t i = 0; i < m.pools().capacity(type); ++i) {
            s.active.push_back(m.pools().activeRefCount({type, i}));
            s.cache.push_back(m.pools().cacheRefCount({type, i}));
        }
    }
    s.lru = m.records().lruToMru();
    s.baseIndexSize = m.baseIndex().size();
    s.draftIndexEntries = m.draftIndex().entryCount();
    return s;
}

inline bool poolsFull(ContextCacheManager const& m) {
    for (int t = 0; t < kResourceTypeCount; ++t) {
        auto const type = static_cast<ResourceType>(t);
        if (m.pools().freeCount(type) != m.pools().capacity(type)) return false;
    }
    return true;
}

inline void evictAll(ContextCacheManager& m) {
    for (RecordId id : m.records().lruToMru()) m.evictRecord(id);
}

}  // namespace ctxcache::testing
