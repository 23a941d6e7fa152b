// EvictionPlanner: simulates dropping the victims' cache references without touching the pools (a local map
// counts resources listed more than once) and returns the shortest feasible LRU prefix, the protected record
// last. Exits early when the pools already suffice or when even every reclaimable resource could not.
// Read-only; contract and cost: include/ctxcache/eviction_planner.h.

#include "ctxcache/eviction_planner.h"

#include <unordered_map>

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
        int32_t const real = pools_.cacheRefCount(id);
        if (real <= 0) throw InvariantError("EvictionPlanner: a record lists a resource without a cache reference");
        int32_t remaining;
        if (real == 1) {
            remaining = 0;  // this listing is the only one anywhere
        } else {
            auto [it, inserted] = counts_.try_emplace(id, real);
            remaining = --it->second;
            if (remaining < 0)
                throw InvariantError("EvictionPlanner: records list a resource more often than its cache count");
        }
        return remaining == 0 && pools_.activeRefCount(id) == 0;
    }

private:
    ResourcePools const& pools_;
    std::unordered_map<ResourceId, int32_t> counts_;
};

void simulateVictim(CacheRecord const& record, SimulatedCacheCounts& counts, ResourceDemand& reclaimed) {
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

}  // namespace

EvictionPlan EvictionPlanner::plan(ResourceDemand const& demand, ResourcePools const& pools,
                                   CacheRecordStore const& records, std::optional<RecordId> mruRecord) {
    if (!demand.isNonNegative()) throw ContractError("EvictionPlanner::plan: demand must be non-negative");
    EvictionPlan result;
    if (pools.canAllocate(demand)) {
        result.feasible = true;
        return result;
    }
    // Evicting every record frees exactly the reclaimable resources: if even that is short, stop here.
    for (ResourceType type : kAllResourceTypes)
        if (pools.freeCount(type) + pools.reclaimableCount(type) < demand.get(type)) return result;

    if (mruRecord && !records.contains(*mruRecord)) mruRecord.reset();
    SimulatedCacheCounts counts(pools);
    for (RecordId id : records.lru()) {
        if (mruRecord && id == *mruRecord) continue;
        simulateVictim(records.get(id), counts, result.reclaimed);
        result.victims.push_back(id);
        if (satisfied(demand, pools, result.reclaimed)) {
            result.feasible = true;
            return result;
        }
    }
    if (mruRecord) {
        simulateVictim(records.get(*mruRecord), counts, result.reclaimed);
        result.victims.push_back(*mruRecord);
        if (satisfied(demand, pools, result.reclaimed)) {
            result.feasible = true;
            return result;
        }
    }
    // Unreachable while the reclaimable counters are exact; never return a partial plan.
    throw InvariantError("EvictionPlanner: evicting every record fell short of the reclaimable count");
}

}  // namespace ctxcache
