// Helpers shared by the C++ suites: recognisable block hashes, typed resource ids, and a full textual
// description of a manager's state so that "a failed call changed nothing" is one string comparison (and a
// readable diff when it is not).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "ctxcache/context_cache_manager.h"
#include "support/address_space_limit.h"

#if defined(__SANITIZE_ADDRESS__)
#define CTXC_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CTXC_UNDER_ASAN 1
#endif
#endif

namespace ctxcache::test {

// Distinct block hashes for tests that exercise indexes and ownership, not hashing. H(n) != H(m) for n != m.
inline BlockHash H(uint64_t n) { return BlockHash{0xB10C000000000000ull | n, 0x5EED000000000000ull ^ (n * 7919)}; }
inline std::vector<BlockHash> Hs(std::initializer_list<uint64_t> ns) {
    std::vector<BlockHash> out;
    for (uint64_t n : ns) out.push_back(H(n));
    return out;
}

// A distinct synthetic block hash per (lane, index): the manager never looks inside hashes.
inline BlockHash blockHash(uint64_t lane, uint64_t index) { return BlockHash{0xC0FFEE00ull + lane, index}; }

// hashes[i] = blockHash(lane, i) for i in [0, count).
inline std::vector<BlockHash> chain(uint64_t lane, int count) {
    std::vector<BlockHash> out;
    for (int i = 0; i < count; ++i) out.push_back(blockHash(lane, static_cast<uint64_t>(i)));
    return out;
}

// A vanilla record over `hashes` and `pages` (its key: the last hash and the block count), not yet stored.
inline CacheRecord vanillaRecord(std::vector<BlockHash> hashes, std::vector<PageId> pages) {
    CacheRecord r;
    r.key = CacheRecordKey{hashes.back(), static_cast<int32_t>(hashes.size())};
    r.logicalBlockHashes = std::move(hashes);
    r.basePagePath = std::move(pages);
    return r;
}

// `prefix` followed by `count` hashes of another lane: a request sharing `prefix` then diverging.
inline std::vector<BlockHash> extend(std::vector<BlockHash> prefix, uint64_t lane, int count) {
    for (int i = 0; i < count; ++i) prefix.push_back(blockHash(lane, static_cast<uint64_t>(prefix.size())));
    return prefix;
}

inline bool poolsFull(ContextCacheManager const& m) {
    for (ResourceType type : kAllResourceTypes)
        if (m.pools().freeCount(type) != m.pools().capacity(type)) return false;
    return true;
}

inline void evictAll(ContextCacheManager& m) {
    for (RecordId id : m.records().lruToMru()) m.evictRecord(id);
}

inline ResourceId basePage(int32_t i) { return {ResourceType::kBaseKvPage, i}; }
inline ResourceId draftPage(int32_t i) { return {ResourceType::kDraftKvPage, i}; }
inline ResourceId recurrentSlot(int32_t i) { return {ResourceType::kRecurrentSnapshot, i}; }
inline ResourceId partialSlot(int32_t i) { return {ResourceType::kPartialKvSnapshot, i}; }

inline std::string describe(Hash128 const& h) { return toHex(h); }

template <class T>
std::string describeList(std::vector<T> const& values) {
    std::ostringstream out;
    out << '{';
    for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
    out << '}';
    return out.str();
}

inline std::string describe(ResourcePools const& pools) {
    std::ostringstream out;
    for (ResourceType type : kAllResourceTypes) {
        out << toString(type) << ": free " << describeList(pools.freeList(type)) << " reclaimable "
            << pools.reclaimableCount(type) << " refs";
        for (int32_t i = 0; i < pools.capacity(type); ++i)
            out << ' ' << i << '=' << pools.activeRefCount({type, i}) << '/' << pools.cacheRefCount({type, i});
        out << '\n';
    }
    return out.str();
}

inline std::string describe(CacheRecord const& r) {
    std::ostringstream out;
    out << "record " << r.id << " key " << toHex(r.key.terminalHash) << '/' << r.key.fullBlockCount << " logical {";
    for (BlockHash const& h : r.logicalBlockHashes) out << toHex(h) << ' ';
    out << "} base " << describeList(r.basePagePath) << " draft " << describeList(r.draftPagePath) << " recurrent "
        << r.recurrentSnapshotSlot.value_or(-1) << " partial " << r.partialKvSnapshotSlot.value_or(-1) << " exact "
        << r.exactCheckpointLength.value_or(-1) << (r.hybridMtpCheckpoint ? " mtp" : "");
    return out.str();
}

inline std::string describe(CacheRecordStore const& records) {
    std::ostringstream out;
    out << "next id " << records.nextId() << " lru " << describeList(records.lruToMru()) << '\n';
    std::vector<std::string> lines;
    records.forEach([&](StoredRecord const& r) { lines.push_back(describe(records.materialize(r))); });
    std::sort(lines.begin(), lines.end());
    for (std::string const& line : lines) out << line << '\n';
    return out.str();
}

inline std::string describe(BaseBlockIndex const& index) {
    std::vector<std::pair<PageId, std::string>> entries;
    index.forEach([&](BlockHash const& h, PageId page) { entries.emplace_back(page, toHex(h)); });
    std::sort(entries.begin(), entries.end());
    std::ostringstream out;
    out << "base index " << entries.size() << ':';
    for (auto const& [page, hash] : entries) out << ' ' << page << "<-" << hash;
    out << '\n';
    return out.str();
}

// Everything observable about a manager: pools (free lists in order, every refcount), records (ids, keys,
// paths, LRU order, next id), both indexes, metrics and the live lease count.
inline std::string describe(ContextCacheManager const& m) {
    std::ostringstream out;
    out << describe(m.pools()) << describe(m.records()) << describe(m.baseIndex());
    std::vector<std::tuple<PageId, RecordId, int32_t>> draft;
    m.draftIndex().forEach(
        [&](PageId page, DraftPathMatch const& d) { draft.emplace_back(page, d.record, d.pathBlockCount); });
    std::sort(draft.begin(), draft.end());
    out << "draft index " << draft.size() << ':';
    for (auto const& [h, r, n] : draft) out << ' ' << h << "->" << r << '/' << n;
    ContextCacheManagerMetrics const& mm = m.metrics();
    out << "\nmetrics " << mm.evictedRecords << ' ' << mm.reclaimedBaseKvPages << ' ' << mm.reclaimedDraftKvPages << ' '
        << mm.reclaimedRecurrentSnapshots << ' ' << mm.reclaimedPartialKvSnapshots << "\nleases " << m.liveLeaseCount()
        << '\n';
    return out.str();
}

inline int32_t activeRefs(ContextCacheManager const& m, ResourceId id) { return m.pools().activeRefCount(id); }
inline int32_t cacheRefs(ContextCacheManager const& m, ResourceId id) { return m.pools().cacheRefCount(id); }
inline int32_t freeBase(ContextCacheManager const& m) { return m.pools().freeCount(ResourceType::kBaseKvPage); }

// EvictionPlanner tests: pools and records wired the way the manager wires them: every listed resource holds one cache
// reference per listing, and producers' active references are dropped unless a test pins a resource on purpose.
struct PlannerState {
    ResourcePools pools;
    CacheRecordStore records{16};

    explicit PlannerState(ResourceDemand capacities) : pools(capacities) {
        ResourceDemand all = capacities;
        EXPECT_TRUE(pools.allocate(all).has_value());  // ids 0..n-1 of every pool, in order, each active 1
    }

    RecordId add(std::vector<BlockHash> hashes, std::vector<PageId> base, std::vector<PageId> draft = {}) {
        CacheRecord r;
        r.key = CacheRecordKey{hashes.back(), static_cast<int32_t>(hashes.size())};
        r.logicalBlockHashes = std::move(hashes);
        r.basePagePath = std::move(base);
        r.draftPagePath = std::move(draft);
        for (ResourceId const& id : r.resources()) pools.addCacheRef(id);
        return records.insert(std::move(r)).id;
    }
    RecordId addCheckpoint(BlockHash digest, int32_t length, int32_t recurrent) {
        CacheRecord r;
        r.key = CacheRecordKey{digest, 0};
        r.recurrentSnapshotSlot = recurrent;
        r.exactCheckpointLength = length;
        pools.addCacheRef({ResourceType::kRecurrentSnapshot, recurrent});
        return records.insert(std::move(r)).id;
    }
    // Drop the producers' active refs on every id of every pool except `pinned`.
    void finishProducers(std::vector<ResourceId> const& pinned = {}) {
        for (ResourceType type : kAllResourceTypes)
            for (int32_t i = 0; i < pools.capacity(type); ++i) {
                ResourceId const id{type, i};
                if (std::find(pinned.begin(), pinned.end(), id) == pinned.end()) pools.releaseActiveRef(id);
            }
    }
    std::string describe() const { return test::describe(pools) + test::describe(records); }
};

// Runs one vanilla request to completion: acquire (with lookup), publish every given block, release.
inline RecordId produce(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t tokens) {
    AcquireResult a = m.acquireVanilla(hashes, tokens);
    if (!a.lease) return kNoRecord;
    PublishResult const r = m.publish(*a.lease, {hashes, tokens});
    return r.record.value_or(kNoRecord);
}

}  // namespace ctxcache::test
