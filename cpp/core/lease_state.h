// The state behind a CacheRequestLease. It lives on the heap, owned by the lease (so a move is a pointer move),
// and is linked into its manager's intrusive list of live leases (so the manager can verify refcounts and
// detach leases that outlive it); and the two questions the manager's files ask of a lease's mode.
#pragma once

#include <optional>
#include <vector>

#include "ctxcache/cache_request_lease.h"

namespace ctxcache {

struct CacheRequestLease::State {
    ContextCacheManager* manager = nullptr;
    State* prev = nullptr;
    State* next = nullptr;

    ReusePlanMode mode = ReusePlanMode::kVanilla;
    bool hybridHasAttention = false;
    std::vector<BlockHash> matchedHashes;
    std::optional<SpecReplayDependency> specReplayDependency;
    // One active ref per entry of each of these:
    std::vector<PageId> basePages;
    std::vector<PageId> draftPages;
    std::optional<int32_t> recurrentBinding;
    std::optional<int32_t> partialBinding;
    std::vector<ResourceId> reservedSnapshots;
    // A vanilla lease's own record: the one its last publication created or grew (PublicationGrowth), or
    // kNoRecord. Only an id: it may have been evicted, trimmed or superseded since, so every use re-validates it
    // (RecordIds are never reused, so a live id is still that record).
    RecordId ownRecord = kNoRecord;
    // A spec lease's hit: the EAGLE record whose draft path it bound (the plan's draftRecord), or kNoRecord. Its
    // next publication supersedes it when the new record dominates it (dominatedSpecHit); only an id, re-validated
    // at use like ownRecord.
    RecordId specHitRecord = kNoRecord;
};

// Leases that own snapshot reservations and restored snapshot bindings.
inline bool isCheckpointLease(ReusePlanMode mode) {
    return mode == ReusePlanMode::kHybrid || mode == ReusePlanMode::kHybridMtp;
}
// Leases that hold draft pages.
inline bool isDraftLease(ReusePlanMode mode) {
    return mode == ReusePlanMode::kSpec || mode == ReusePlanMode::kHybridMtp;
}

}  // namespace ctxcache
