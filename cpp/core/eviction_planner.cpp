// EvictionPlanner: simulates dropping the victims' cache references without touching the pools (a local map
// counts resources listed more than once) and returns the shortest feasible LRU prefix, the protected record
// last; under kRecordLruTrim the last record of that prefix may be trimmed instead of evicted. Exits early when the
// pools already suffice or when even every reclaimable resource could not. Read-only; contract and cost:
// include/ctxcache/eviction_planner.h.

#include "ctxcache/eviction_planner.h"

#include <algorithm>

#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/errors.h"

namespace ctxcache {
namespace {

bool satisfied(ResourceDemand const& demand, ResourcePools const& pools, ResourceDemand const& reclaimed) {
    for (ResourceType type : kAllResourceTypes)
        if (pools.freeCount(type) + reclaimed.get(type) < demand.get(type)) return false;
    return true;
}

// Cache counts of resources listed more than once among the victims so far (single listings need no entry).
class SimulatedCacheCounts {
public:
    explicit SimulatedCacheCounts(ResourcePools const& pools) : pools_(pools) {}

    // Drops one simulated cache reference; true when the resource would return to its free list.
    bool dropOne(ResourceId const& id) {
        ResourcePools::RefCounts const real = pools_.refCounts(id);
        if (real.cache <= 0)
            throw InvariantError("EvictionPlanner: a record lists a resource without a cache reference");
        if (real.cache == 1) return real.active == 0;  // this listing is the only one anywhere
        int32_t* const count = counts_.tryEmplace(id, real.cache).first;
        int32_t const remaining = --*count;
        if (remaining < 0)
            throw InvariantError("EvictionPlanner: records list a resource more often than its cache count");
        return remaining == 0 && real.active == 0;
    }

private:
    ResourcePools const& pools_;
    detail::FlatHashMap<ResourceId, int32_t, std::hash<ResourceId>> counts_;  // flat: no allocation per entry
};

// Drops the record's block i: its base page and, when paired, its draft page.
inline void simulateBlock(StoredRecord const& record, size_t i, bool paired, SimulatedCacheCounts& counts,
                          ResourceDemand& reclaimed) {
    if (counts.dropOne({ResourceType::kBaseKvPage, record.basePagePath[i]})) ++reclaimed.baseKvPages;
    if (paired && counts.dropOne({ResourceType::kDraftKvPage, record.draftPagePath[i]})) ++reclaimed.draftKvPages;
}

// Drops the record's blocks [from, to).
void simulateBlocks(StoredRecord const& record, size_t from, size_t to, SimulatedCacheCounts& counts,
                    ResourceDemand& reclaimed) {
    bool const paired = record.hasDraftPath();
    for (size_t i = from; i < to; ++i) simulateBlock(record, i, paired, counts, reclaimed);
}

void simulateVictim(StoredRecord const& record, SimulatedCacheCounts& counts, ResourceDemand& reclaimed) {
    for (PageId page : record.basePagePath)
        if (counts.dropOne({ResourceType::kBaseKvPage, page})) ++reclaimed.baseKvPages;
    for (PageId page : record.draftPagePath)
        if (counts.dropOne({ResourceType::kDraftKvPage, page})) ++reclaimed.draftKvPages;
    if (record.recurrentSnapshotSlot &&
        counts.dropOne({ResourceType::kRecurrentSnapshot, *record.recurrentSnapshotSlot}))
        ++reclaimed.recurrentSnapshotSlots;
    if (record.partialKvSnapshotSlot &&
        counts.dropOne({ResourceType::kPartialKvSnapshot, *record.partialKvSnapshotSlot}))
        ++reclaimed.partialKvSnapshotSlots;
}

// kRecordLruTrim: drops the record's blocks from the tail until the demand is met. Returns the blocks to keep
// (>= 1) when a trim suffices and its shorter key is free; otherwise nullopt (the record is then a victim). A plan
// (countVictim) then drops the rest too, as the whole eviction will, for the records after it; a single step
// stops as soon as the blocks left could not meet the demand.
std::optional<int32_t> simulateTrimOrEvict(ResourceDemand const& demand, ResourcePools const& pools,
                                           CacheRecordStore const& records, StoredRecord const& record,
                                           std::vector<RecordId> const& victims, SimulatedCacheCounts& counts,
                                           ResourceDemand& reclaimed, bool countVictim, size_t minKeep = 1) {
    size_t const n = record.basePagePath.size();
    if (record.isHybrid() || n < 2) {
        simulateVictim(record, counts, reclaimed);
        return std::nullopt;
    }
    // Dropping blocks changes only the base and draft counts: the other types' part of satisfied() is fixed for
    // the walk, and the base and draft parts are two comparisons against what is still missing.
    auto missing = [&](ResourceType type) { return demand.get(type) - pools.freeCount(type); };  // may be < 0
    bool const othersMet = reclaimed.recurrentSnapshotSlots >= missing(ResourceType::kRecurrentSnapshot) &&
                           reclaimed.partialKvSnapshotSlots >= missing(ResourceType::kPartialKvSnapshot);
    int32_t const baseMissing = missing(ResourceType::kBaseKvPage);
    int32_t const draftMissing = missing(ResourceType::kDraftKvPage);
    bool const paired = record.hasDraftPath();
    size_t keptFrom = n;  // blocks [keptFrom, n) are dropped
    for (size_t keep = n - 1; keep >= minKeep; --keep) {
        simulateBlock(record, keep, paired, counts, reclaimed);
        keptFrom = keep;
        if (!othersMet || reclaimed.baseKvPages < baseMissing || reclaimed.draftKvPages < draftMissing) {
            int64_t const left = static_cast<int64_t>(keep - minKeep);  // blocks [minKeep, keep) may still go
            if (!countVictim && (!othersMet || reclaimed.baseKvPages + left < baseMissing ||
                                 reclaimed.draftKvPages + (paired ? left : 0) < draftMissing))
                return std::nullopt;
            continue;
        }
        CacheRecordKey const shorter{records.logicalHash(record, keep - 1), static_cast<int32_t>(keep)};
        std::optional<RecordId> const holder = records.find(shorter);
        // Free, or held by a victim of this plan (evicted before the trim is applied): trim.
        if (!holder || std::find(victims.begin(), victims.end(), *holder) != victims.end())
            return static_cast<int32_t>(keep);
        break;  // another record that stays already ends there: evict this one whole
    }
    if (countVictim) simulateBlocks(record, 0, keptFrom, counts, reclaimed);  // no snapshot slot: not hybrid
    return std::nullopt;
}

}  // namespace

std::optional<int32_t> EvictionPlanner::trimPoint(ResourceDemand const& demand, ResourcePools const& pools,
                                                  CacheRecordStore const& records, StoredRecord const& record,
                                                  int32_t minKeep) {
    if (!demand.isNonNegative()) throw ContractError("EvictionPlanner::trimPoint: demand must be non-negative");
    if (minKeep < 1) throw ContractError("EvictionPlanner::trimPoint: minKeep must be at least 1");
    size_t const n = record.basePagePath.size();
    if (record.isHybrid() || n < 2 || static_cast<size_t>(minKeep) >= n) return std::nullopt;
    SimulatedCacheCounts counts(pools);
    ResourceDemand reclaimed;
    return simulateTrimOrEvict(demand, pools, records, record, {}, counts, reclaimed, false,
                               static_cast<size_t>(minKeep));
}

char const* toString(EvictionPolicy policy) noexcept {
    switch (policy) {
        case EvictionPolicy::kRecordLru: return "lru";
        case EvictionPolicy::kRecordLruTrim: return "lru-trim";
    }
    return "unknown";
}

EvictionPlan EvictionPlanner::plan(ResourceDemand const& demand, ResourcePools const& pools,
                                   CacheRecordStore const& records, std::optional<RecordId> mruRecord,
                                   EvictionPolicy policy) {
    if (!demand.isNonNegative()) throw ContractError("EvictionPlanner::plan: demand must be non-negative");
    EvictionPlan result;
    if (pools.canAllocate(demand)) {
        result.feasible = true;
        return result;
    }
    // Evicting every record frees exactly the reclaimable resources: if even that is short, stop here.
    if (!pools.canAllocateOnceReclaimed(demand)) return result;

    if (mruRecord && !records.contains(*mruRecord)) mruRecord.reset();
    SimulatedCacheCounts counts(pools);
    // One LRU step: the record is trimmed (the plan is complete) or becomes a victim. True when feasible.
    auto step = [&](RecordId id) {
        StoredRecord const& record = records.get(id);
        if (policy == EvictionPolicy::kRecordLruTrim) {
            if (std::optional<int32_t> keep = simulateTrimOrEvict(demand, pools, records, record, result.victims,
                                                                  counts, result.reclaimed, true)) {
                result.trim = RecordTrim{id, *keep};
                return result.feasible = true;
            }
        } else {
            simulateVictim(record, counts, result.reclaimed);
        }
        result.victims.push_back(id);
        return result.feasible = satisfied(demand, pools, result.reclaimed);
    };
    RecordId const last = mruRecord.value_or(kNoRecord);  // kNoRecord is never a stored id
    for (RecordId id : records.lru()) {
        if (id == last) continue;
        if (step(id)) return result;
    }
    if (last != kNoRecord && step(last)) return result;
    // Unreachable while the reclaimable counters are exact; never return a partial plan.
    throw InvariantError("EvictionPlanner: evicting every record fell short of the reclaimable count");
}

}  // namespace ctxcache
