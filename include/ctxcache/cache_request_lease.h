// CacheRequestLease: move-only ownership of one request's active references and page bindings.
//
// A lease holds one active reference per entry of basePages() and draftPages() (shared prefix first, then
// private pages), per restored hybrid snapshot binding, and per producer snapshot reservation. Releasing or
// destroying it drops every one of them; publication separately adds cache ownership for reusable state.
//
// Invariants: valid() <=> bound to a live manager. Moving transfers the whole state and leaves the source
//             invalid. If the manager is destroyed first (a contract violation), the lease is detached: it
//             becomes invalid and its release() does nothing; it never touches freed memory.
// Threading:  a lease is part of its manager's single-writer state; serialize all access with the manager's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/reuse_plan.h"
#include "ctxcache/types.h"

namespace ctxcache {

class ContextCacheManager;

class CacheRequestLease {
public:
    CacheRequestLease() noexcept;
    ~CacheRequestLease() noexcept;
    CacheRequestLease(CacheRequestLease&& other) noexcept;
    CacheRequestLease& operator=(CacheRequestLease&& other) noexcept;
    CacheRequestLease(CacheRequestLease const&) = delete;
    CacheRequestLease& operator=(CacheRequestLease const&) = delete;

    // Ordered base-model logical K-page ids; the adapter expands them to a kernel [K, V] row.
    std::vector<PageId> const& basePages() const noexcept;
    // Ordered draft K-page ids (EAGLE spec or Hybrid+MTP lease); empty for a vanilla or hybrid lease.
    std::vector<PageId> const& draftPages() const noexcept;
    // Hit snapshot slots to restore from (until releaseRestoredHybridSnapshots).
    std::optional<int32_t> recurrentSnapshotSlot() const noexcept;
    std::optional<int32_t> partialKvSnapshotSlot() const noexcept;
    bool valid() const noexcept;
    void release() noexcept;

    // Beyond the seed: what the lease was acquired for.
    ReusePlanMode mode() const noexcept;
    bool hybridHasAttention() const noexcept;
    std::vector<BlockHash> const& matchedBlockHashes() const noexcept;
    std::optional<SpecReplayDependency> specReplayDependency() const noexcept;
    // Producer snapshot reservations still owned (recurrent and partial-KV slots).
    std::vector<ResourceId> const& reservedSnapshots() const noexcept;
    ContextCacheManager const* manager() const noexcept;

    struct State;  // defined in cpp/core/lease_state.h; owned here, linked into the manager's live list

private:
    friend class ContextCacheManager;
    explicit CacheRequestLease(std::unique_ptr<State> state) noexcept;

    std::unique_ptr<State> state_;
};

}  // namespace ctxcache
