// CacheRequestLease: a move-only handle on its heap State (cpp/core/lease_state.h). Accessors read that state
// (empty values once released or moved from); release() and the destructor hand the state to the manager,
// which drops every reference it holds (noexcept). Contract and threading: include/ctxcache/cache_request_lease.h.

#include "ctxcache/cache_request_lease.h"

#include "ctxcache/context_cache_manager.h"
#include "lease_state.h"

namespace ctxcache {
namespace {
std::vector<PageId> const kNoPages;
std::vector<BlockHash> const kNoHashes;
std::vector<ResourceId> const kNoResources;
}  // namespace

CacheRequestLease::CacheRequestLease(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}

CacheRequestLease::CacheRequestLease() noexcept = default;

CacheRequestLease::CacheRequestLease(CacheRequestLease&& other) noexcept : state_(std::move(other.state_)) {}

CacheRequestLease::~CacheRequestLease() noexcept { release(); }

CacheRequestLease& CacheRequestLease::operator=(CacheRequestLease&& other) noexcept {
    if (this != &other) {
        release();
        state_ = std::move(other.state_);
    }
    return *this;
}

void CacheRequestLease::release() noexcept {
    if (!state_) return;
    if (state_->manager) state_->manager->releaseLease(*state_);
    state_.reset();
}

bool CacheRequestLease::valid() const noexcept { return state_ && state_->manager; }
std::vector<PageId> const& CacheRequestLease::basePages() const noexcept {
    return state_ ? state_->basePages : kNoPages;
}
std::vector<PageId> const& CacheRequestLease::draftPages() const noexcept {
    return state_ ? state_->draftPages : kNoPages;
}
std::optional<int32_t> CacheRequestLease::recurrentSnapshotSlot() const noexcept {
    return state_ ? state_->recurrentBinding : std::nullopt;
}
std::optional<int32_t> CacheRequestLease::partialKvSnapshotSlot() const noexcept {
    return state_ ? state_->partialBinding : std::nullopt;
}
ReusePlanMode CacheRequestLease::mode() const noexcept { return state_ ? state_->mode : ReusePlanMode::kVanilla; }
bool CacheRequestLease::hybridHasAttention() const noexcept { return state_ && state_->hybridHasAttention; }
std::vector<BlockHash> const& CacheRequestLease::matchedBlockHashes() const noexcept {
    return state_ ? state_->matchedHashes : kNoHashes;
}
std::optional<SpecReplayDependency> CacheRequestLease::specReplayDependency() const noexcept {
    return state_ ? state_->specReplayDependency : std::nullopt;
}
std::vector<ResourceId> const& CacheRequestLease::reservedSnapshots() const noexcept {
    return state_ ? state_->reservedSnapshots : kNoResources;
}
ContextCacheManager const* CacheRequestLease::manager() const noexcept { return state_ ? state_->manager : nullptr; }

}  // namespace ctxcache
