// EvictionPlanner: picks whole-record victims, least recent first, without mutating anything.
//
// Simulation: walking the LRU (the optional protected record, the hit being acquired, moved to the very end),
// each victim drops one cache reference per listed resource; a resource counts as reclaimed when its simulated
// cache count reaches zero while no lease pins it. The plan is the shortest LRU prefix after which
// free + reclaimed >= demand holds for all four types together, or infeasible with no victims.
//
// Cost:       O(1) when the pools already satisfy the demand or when even evicting every record could not
//             (ResourcePools::reclaimableCount is exact); otherwise proportional to the resources of the victims
//             returned, never to the number of records kept.
// Threading:  reads its arguments only.
#pragma once

#include <optional>
#include <vector>

#include "ctxcache/cache_record_store.h"
#include "ctxcache/resource_pools.h"
#include "ctxcache/types.h"

namespace ctxcache {

struct EvictionPlan {
    bool feasible = false;
    std::vector<RecordId> victims;
    ResourceDemand reclaimed;
};

class EvictionPlanner {
public:
    static EvictionPlan plan(ResourceDemand const& demand, ResourcePools const& pools, CacheRecordStore const& records,
                             std::optional<RecordId> mruRecord = std::nullopt);
};

}  // namespace ctxcache
