// EvictionPlanner: picks victims, least recent first, without mutating anything.
//
// Simulation: walking the LRU (the optional protected record, the hit being acquired, moved to the very end),
// each victim drops one cache reference per listed resource; a resource counts as reclaimed when its simulated
// cache count reaches zero while no lease pins it. The plan is the shortest LRU prefix after which
// free + reclaimed >= demand holds for all four types together, or infeasible with no victims.
//
// Policies (EvictionPolicy, chosen when the manager is built):
//   kRecordLru       the reference's: every victim is evicted whole.
//   kRecordLruTrim   the same walk, but each non-hybrid record first gives up its blocks from the tail, one at
//                    a time (base page and, when paired, draft page of the same block); when the demand is met
//                    after dropping blocks [k, n) with k >= 1, that record is trimmed to its first k blocks
//                    instead of evicted (plan.trim). It keeps its LRU position, so the next shortage continues
//                    with it. A trim whose shorter key (hash of block k-1, k) already names another record that
//                    stays (not a victim of the same plan) goes on to evict the record whole. Hybrid checkpoints are
//                    always evicted whole (their state is for one exact length). This is the block-granular LRU of
//                    vLLM's free queue (a request's tail blocks go first) at record granularity: a record's prefix
//                    outlives its unshared tail.
//
// The manager applies the same walk one record at a time (trimPoint is its kRecordLruTrim step): once earlier
// victims are really evicted, each step needs only its own record's simulation. The walk is the store's order,
// which puts lower retention priorities first (retention.h); with retention ranges under kRecordLruTrim the
// manager's step also keeps a record's higher-priority head (trimPoint's minKeep) and may cut a low tail and
// re-rank the record before going on, which plan() does not simulate: plan() is exact for records without ranges.
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

// Whole-record LRU (the reference's, the default) or record LRU that trims tails first (see the file comment).
enum class EvictionPolicy : int32_t { kRecordLru = 0, kRecordLruTrim = 1 };

// A record cut down to its first keepBlocks blocks (1 <= keepBlocks < its fullBlockCount).
struct RecordTrim {
    RecordId record = kNoRecord;
    int32_t keepBlocks = 0;
};

struct EvictionPlan {
    bool feasible = false;
    std::vector<RecordId> victims;   // evicted whole, in LRU order
    std::optional<RecordTrim> trim;  // applied after the victims; never one of them
    ResourceDemand reclaimed;
};

class EvictionPlanner {
public:
    static EvictionPlan plan(ResourceDemand const& demand, ResourcePools const& pools, CacheRecordStore const& records,
                             std::optional<RecordId> mruRecord = std::nullopt,
                             EvictionPolicy policy = EvictionPolicy::kRecordLru);
    // One kRecordLruTrim step of that walk on the pools as they are now, every earlier victim already applied
    // (what a caller evicting as it goes needs): the blocks `record` keeps (>= 1) when trimming its tail meets the
    // demand and its shorter key is free; nullopt when it must be evicted whole. O(blocks dropped): the walk stops
    // as soon as the blocks left could not meet the demand (after one block when even all but the first could not).
    // minKeep (>= 1) bounds the cut: blocks [0, minKeep) stay (the manager's retention keeps a higher-priority head).
    static std::optional<int32_t> trimPoint(ResourceDemand const& demand, ResourcePools const& pools,
                                            CacheRecordStore const& records, StoredRecord const& record,
                                            int32_t minKeep = 1);
};

char const* toString(EvictionPolicy policy) noexcept;

}  // namespace ctxcache
