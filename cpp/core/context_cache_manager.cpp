// ContextCacheManager: acquire (plan, pin the hit, check the room, then evict + allocate or roll back),
// grow and snapshot reservation, publication (validate everything first, then canonical base projection and a
// single commit that rolls back on any failure), and eviction with its metrics. Beside it: manager_kv_events.cpp
// (the KV event stream) and manager_invariants.cpp (checkInvariants, metadataBytes). Invariants, atomicity,
// recency, errors, cost and threading (single writer, no internal locks): include/ctxcache/context_cache_manager.h.

#include "ctxcache/context_cache_manager.h"

#include <algorithm>
#include <string>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"
#include "lease_state.h"

namespace ctxcache {
namespace {

using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{""};

char const* leaseKind(ReusePlanMode mode) {
    switch (mode) {
        case ReusePlanMode::kVanilla: return "a vanilla lease";
        case ReusePlanMode::kHybrid: return "a hybrid lease";
        case ReusePlanMode::kSpec: return "a spec lease";
        case ReusePlanMode::kHybridMtp: return "a Hybrid+MTP lease";
    }
    return "a lease";
}

bool ownsReservation(std::vector<ResourceId> const& reserved, ResourceId id) {
    return std::find(reserved.begin(), reserved.end(), id) != reserved.end();
}

// The first min(count, matched) publication hashes must be the ones the lease acquired: otherwise the lease's
// physical pages would not hold the blocks being published.
void checkMatchedPrefix(char const* operation, BlockHashSpan hashes, size_t count,
                        std::vector<BlockHash> const& matched) {
    size_t const n = std::min(count, matched.size());
    for (size_t i = 0; i < n; ++i)
        if (hashes[i] != matched[i])
            contract(operation, "fullBlockHashes[" + str(static_cast<int64_t>(i)) +
                                    "] no longer describes the acquired prefix (" + toHex(hashes[i]) +
                                    " != " + toHex(matched[i]) + ")");
}

}  // namespace

ResourceDemand ContextCacheManager::validatedCapacities(int32_t pageSize, ResourceDemand capacities,
                                                        int32_t maxRecords) {
    if (pageSize <= 0) contract("ContextCacheManager", "pageSize must be positive (" + str(pageSize) + ")");
    if (!capacities.isNonNegative()) contract("ContextCacheManager", "capacities must be non-negative");
    if (maxRecords < 0) contract("ContextCacheManager", "maxRecords must be non-negative (" + str(maxRecords) + ")");
    return capacities;
}

EvictionPolicy ContextCacheManager::validatedPolicy(EvictionPolicy policy) {
    if (policy != EvictionPolicy::kRecordLru && policy != EvictionPolicy::kRecordLruTrim)
        contract("ContextCacheManager", "unknown eviction policy " + str(static_cast<int32_t>(policy)));
    return policy;
}

ContextCacheManager::ContextCacheManager(int32_t pageSize, ResourceDemand capacities, int32_t maxRecords,
                                         EvictionPolicy evictionPolicy)
    : pageSize_(pageSize),
      maxRecords_(maxRecords),
      evictionPolicy_(validatedPolicy(evictionPolicy)),
      pools_(validatedCapacities(pageSize, capacities, maxRecords)),
      baseIndex_(capacities.baseKvPages),
      draftIndex_(static_cast<size_t>(std::max(0, capacities.baseKvPages))),
      records_(maxRecords, &baseIndex_) {}

ContextCacheManager::~ContextCacheManager() {
    // Leases must be released first; any that were not are detached so they never reach freed memory.
    for (LeaseState* s = leaseList_; s;) {
        LeaseState* next = s->next;
        s->manager = nullptr;
        s->prev = s->next = nullptr;
        s = next;
    }
}

// ---- leases ----------------------------------------------------------------------------------------------

CacheRequestLease ContextCacheManager::newLease(ReusePlanMode mode) {
    auto state = std::make_unique<LeaseState>();
    state->manager = this;
    state->mode = mode;
    state->next = leaseList_;
    if (leaseList_) leaseList_->prev = state.get();
    leaseList_ = state.get();
    ++liveLeases_;
    return CacheRequestLease(std::move(state));
}

ContextCacheManager::LeaseState& ContextCacheManager::checkLease(CacheRequestLease& lease,
                                                                 char const* operation) const {
    if (!lease.state_) contract(operation, "lease is empty (released or moved from)");
    if (!lease.state_->manager) contract(operation, "lease outlived its manager");
    if (lease.state_->manager != this) contract(operation, "lease belongs to another manager");
    return *lease.state_;
}

void ContextCacheManager::releaseLease(LeaseState& s) noexcept {
    // noexcept: a refcount underflow here means corrupted metadata, and std::terminate is the right answer.
    auto const release = [this](ResourceId const& id) { pools_.releaseActiveRef(id); };
    pools_.forEachPrefetched(ResourceType::kBaseKvPage, s.basePages.data(), s.basePages.size(), release);
    pools_.forEachPrefetched(ResourceType::kDraftKvPage, s.draftPages.data(), s.draftPages.size(), release);
    if (s.recurrentBinding) pools_.releaseActiveRef({ResourceType::kRecurrentSnapshot, *s.recurrentBinding});
    if (s.partialBinding) pools_.releaseActiveRef({ResourceType::kPartialKvSnapshot, *s.partialBinding});
    for (ResourceId const& id : s.reservedSnapshots) pools_.releaseActiveRef(id);
    s.basePages.clear();
    s.draftPages.clear();
    s.recurrentBinding.reset();
    s.partialBinding.reset();
    s.reservedSnapshots.clear();
    if (s.prev) s.prev->next = s.next;
    else leaseList_ = s.next;
    if (s.next) s.next->prev = s.prev;
    s.prev = s.next = nullptr;
    s.manager = nullptr;
    --liveLeases_;
}

// ---- eviction -------------------------------------------------------------------------------------------

void ContextCacheManager::makeRoom(ResourceDemand const& demand, std::optional<RecordId> protectedRecord) {
    if (pools_.canAllocate(demand)) return;
    applyExpiriesIfDue();
    if (protectedRecord && (!records_.contains(*protectedRecord) || !records_.isListed(*protectedRecord)))
        protectedRecord.reset();  // gone, or pinned (never a victim)
    RecordId const last = protectedRecord.value_or(kNoRecord);  // kNoRecord is never a stored id
    // One step of EvictionPlanner::plan's walk, applied: true once the pools can allocate. The walk reads the
    // store's eviction order (priority buckets, LRU within each). Under kRecordLruTrim a record ranks by its last
    // block, and a step may cut only its tail at or below that rank: when that tail is not enough, it is cut, the
    // record re-ranks by its new last block (a later bucket) and the walk goes on.
    auto step = [&](RecordId id) {
        if (evictionPolicy_ == EvictionPolicy::kRecordLruTrim) {
            StoredRecord const& record = records_.get(id);
            int32_t const blocks = static_cast<int32_t>(record.basePagePath.size());
            int32_t minKeep = 1;
            if (RetentionBlockRanges const* ranges = retention_.find(id); ranges && !record.isHybrid())
                minKeep = std::max(1, retentionTailStart(*ranges, blocks, records_.priority(id), rankedAtNs_));
            if (std::optional<int32_t> keep = EvictionPlanner::trimPoint(demand, pools_, records_, record, minKeep)) {
                trimRecord(RecordTrim{id, *keep});
                return true;
            }
            if (minKeep > 1 && minKeep < blocks &&
                !records_.find({records_.logicalHash(record, static_cast<size_t>(minKeep - 1)), minKeep})) {
                trimRecord(RecordTrim{id, minKeep});
                return pools_.canAllocate(demand);
            }
        }
        evictOne(id);
        return pools_.canAllocate(demand);
    };
    bool done = false;
    while (!done) {
        auto const& lru = records_.lru();
        auto victim = std::find_if(lru.begin(), lru.end(), [&](RecordId id) { return id != last; });
        if (victim == lru.end()) break;
        done = step(*victim);
    }
    while (!done && last != kNoRecord && records_.contains(last)) done = step(last);
    // Unreachable while the reclaimable counts are exact (canAllocateOnceReclaimed promised the room).
    if (!done || !pools_.canAllocate(demand))
        throw InvariantError("ContextCacheManager: evicting every record fell short of the reclaimable count");
}

void ContextCacheManager::evictRecord(RecordId id) {
    EventCall const call(*this);
    if (!records_.contains(id)) contract("evictRecord", "no record " + str(static_cast<int64_t>(id)));
    evictOne(id);
}

void ContextCacheManager::clear() {
    if (liveLeases_ > 0)
        contract("clear", str(static_cast<int64_t>(liveLeases_)) +
                              " lease(s) are live: release them first (their publications would refill the cache "
                              "the reset empties)");
    EventCall const call(*this);
    suppressRemovals_ = true;
    try {
        std::vector<RecordId> pinned;
        retention_.forEachPin([&](RecordId id, int64_t) { pinned.push_back(id); });
        for (RecordId id : pinned) dropPin(id);
        while (std::optional<RecordId> victim = records_.leastRecent()) evictOne(*victim);
    } catch (...) {
        suppressRemovals_ = false;
        throw;
    }
    suppressRemovals_ = false;
    if (!eventsEnabled_) return;
    try {
        events_.appendCleared();
    } catch (...) {
        eventFailed();
    }
}

void ContextCacheManager::evictOne(RecordId id) {
    // An EAGLE record's draft boundaries are keyed by its canonical base pages, which it still holds here.
    dropPin(id);  // an explicit eviction of a pinned record ends its pin
    ++retentionMetrics_.evictedRecordsByPriority[records_.priority(id)];
    retention_.erase(id);
    StoredRecord const record = records_.erase(id);
    if (record.hasEagleDraftPath()) draftIndex_.erase(id, record.basePagePath);
    beginRemovals(record.basePagePath.size());  // the BlockRemoved event releaseBasePages fills and closes
    releaseBasePages(record.basePagePath, 0,
                     ObservedPath{-1, -1, record.hasEagleDraftPath() ? &record.draftPagePath : nullptr});
    pools_.forEachPrefetched(ResourceType::kDraftKvPage, record.draftPagePath.data(), record.draftPagePath.size(),
                             [this](ResourceId const& rid) {
        ResourcePools::RefCounts const left = pools_.releaseCacheRef(rid);
        if (left.cache == 0 && left.active == 0) ++metrics_.reclaimedDraftKvPages;
    });
    if (record.recurrentSnapshotSlot) {
        ResourceId const rid{ResourceType::kRecurrentSnapshot, *record.recurrentSnapshotSlot};
        pools_.releaseCacheRef(rid);
        if (pools_.isFree(rid)) ++metrics_.reclaimedRecurrentSnapshots;
    }
    if (record.partialKvSnapshotSlot) {
        ResourceId const rid{ResourceType::kPartialKvSnapshot, *record.partialKvSnapshotSlot};
        pools_.releaseCacheRef(rid);
        if (pools_.isFree(rid)) ++metrics_.reclaimedPartialKvSnapshots;
    }
    ++metrics_.evictedRecords;
}

void ContextCacheManager::setBaseBlockObserver(BaseBlockObserver* observer) {
    if (observer && observer_ && observer != observer_)
        throw ContractError("setBaseBlockObserver: the manager already has an observer; detach it (null) first");
    observer_ = observer;
}

void ContextCacheManager::notifyStored(std::vector<BlockHash> const& hashes, std::vector<PageId> const& pages,
                                       BlockTokenSpan tokens, ObservedPath const& path) noexcept {
    // One call per run of consecutive staged blocks, with the block before it (canonical: the run's parent).
    size_t const page = static_cast<size_t>(pageSize_);
    for (size_t run = 0; run < stagedStores_.size();) {
        size_t end = run + 1;
        while (end < stagedStores_.size() && stagedStores_[end] == stagedStores_[end - 1] + 1) ++end;
        size_t const first = stagedStores_[run];
        size_t const count = end - run;
        if (first + count <= hashes.size() && first + count <= pages.size()) {
            bool const withTokens = tokens.data != nullptr && (first + count) * page <= tokens.size;
            observer_->blocksStored(hashes.data() + first, pages.data() + first, count, first == 0,
                                    first > 0 ? &hashes[first - 1] : nullptr,
                                    withTokens ? tokens.data + first * page : nullptr,
                                    draftRunOf(pages, path, first, count, first > 0));
        }
        run = end;
    }
}

DraftRun ContextCacheManager::draftRunOf(std::vector<PageId> const& pages, ObservedPath const& path, size_t first,
                                         size_t count, bool parentKnown) noexcept {
    DraftRun draft;
    if (!path.draft || path.draft->size() != pages.size() || first + count > pages.size()) return draft;
    draft.pages = path.draft->data() + first;
    if (parentKnown) {
        draft.parentBase = first == 0 ? path.parentBase : pages[first - 1];
        draft.parentDraft = first == 0 ? path.parentDraft : (*path.draft)[first - 1];
    }
    return draft;
}

void ContextCacheManager::notifyRemoved(std::vector<PageId> const& pages, ObservedPath const& path) noexcept {
    // One call per run of consecutive path blocks; a run's parent is the block before it, still canonical (for a
    // trimmed tail's first block: the kept part's last, path.parentBase).
    for (size_t run = 0; run < observedHashes_.size();) {
        size_t end = run + 1;
        while (end < observedHashes_.size() && observedPositions_[end] == observedPositions_[end - 1] + 1) ++end;
        size_t const first = observedPositions_[run];
        size_t const count = end - run;
        PageId const parentPage = first == 0 ? path.parentBase : first - 1 < pages.size() ? pages[first - 1] : -1;
        std::optional<BlockHash> parent;
        if (parentPage >= 0) parent = baseIndex_.hashOfPage(parentPage);
        observer_->blocksRemoved(observedHashes_.data() + run, observedPages_.data() + run, count,
                                 first == 0 && path.parentBase < 0, parent ? &*parent : nullptr,
                                 draftRunOf(pages, path, first, count, parent.has_value()));
        run = end;
    }
    observedHashes_.clear();
    observedPages_.clear();
    observedPositions_.clear();
}

void ContextCacheManager::reportTierStored(BlockHash const* hashes, size_t count, BlockHash const* parent,
                                           int32_t const* tokens) noexcept {
    if (!eventsEnabled_ || count == 0 || !hashes || !tokens) return;
    EventCall const call(*this);
    try {
        events_.appendStored(hashes, count, parent != nullptr, parent ? kvEventBlockHash(*parent) : 0, tokens,
                             count * static_cast<size_t>(pageSize_), {}, 0, KvEventMedium::kHost);
    } catch (...) {
        eventFailed();
    }
}

void ContextCacheManager::reportTierRemoved(BlockHash const* hashes, size_t count) noexcept {
    if (!eventsEnabled_ || count == 0 || !hashes) return;
    EventCall const call(*this);
    try {
        events_.beginRemoved(count, KvEventMedium::kHost);
    } catch (...) {
        eventFailed();
        return;
    }
    for (size_t i = 0; i < count; ++i) events_.addRemoved(kvEventBlockHash(hashes[i]));
    events_.endRemoved();
}

void ContextCacheManager::releaseBasePages(std::vector<PageId> const& pages, size_t from, ObservedPath const& path) {
    observingRemovals_ = false;
    if (observer_ && !suppressRemovals_ && pages.size() > from) {
        try {  // an observer that cannot be told loses these removals (reuse, never state)
            observedHashes_.reserve(pages.size() - from);
            observedPages_.reserve(pages.size() - from);
            observedPositions_.reserve(pages.size() - from);
            observingRemovals_ = true;
        } catch (...) {
        }
    }
    // Pipelined: a page's reverse entry is requested 2d pages ahead, the home slot of its hash d pages ahead, so
    // the forward-table miss of erasePage overlaps the work on earlier pages.
    constexpr size_t kAhead = 8;
    for (size_t i = from; i < std::min(pages.size(), from + 2 * kAhead); ++i) baseIndex_.prefetchReverse(pages[i]);
    for (size_t i = from; i < std::min(pages.size(), from + kAhead); ++i) baseIndex_.prefetchErase(pages[i]);
    for (size_t i = from; i < std::min(pages.size(), from + kAhead); ++i)
        pools_.prefetch(ResourceType::kBaseKvPage, pages[i]);
    for (size_t i = from; i < pages.size(); ++i) {
        if (i + 2 * kAhead < pages.size()) baseIndex_.prefetchReverse(pages[i + 2 * kAhead]);
        if (i + kAhead < pages.size()) {
            baseIndex_.prefetchErase(pages[i + kAhead]);
            pools_.prefetch(ResourceType::kBaseKvPage, pages[i + kAhead]);
        }
        ResourcePools::RefCounts const left = pools_.releaseCacheRef({ResourceType::kBaseKvPage, pages[i]});
        if (left.cache == 0) {
            if (reportingRemovals_ || observingRemovals_) {
                if (std::optional<BlockHash> const hash = baseIndex_.hashOfPage(pages[i])) {
                    // capacities reserved by beginRemovals and above: cannot throw
                    if (reportingRemovals_) events_.addRemoved(kvEventBlockHash(*hash));
                    if (observingRemovals_) {
                        observedHashes_.push_back(*hash);
                        observedPages_.push_back(pages[i]);
                        observedPositions_.push_back(i);
                    }
                }
            }
            baseIndex_.erasePage(pages[i]);
            if (left.active == 0) ++metrics_.reclaimedBaseKvPages;
        }
    }
    // The manager's BlockRemoved first (a tier's events about the same blocks follow it in the stream).
    if (reportingRemovals_) events_.endRemoved();
    reportingRemovals_ = false;
    if (observingRemovals_) {
        observingRemovals_ = false;
        notifyRemoved(pages, path);
    }
}

bool ContextCacheManager::beginRemovals(size_t maxBlocks) noexcept {
    reportingRemovals_ = false;
    if (!eventsEnabled_ || suppressRemovals_ || eventsBroken_ || maxBlocks == 0) return false;
    try {
        events_.beginRemoved(maxBlocks);
    } catch (...) {
        eventFailed();
        return false;
    }
    reportingRemovals_ = true;
    return true;
}

void ContextCacheManager::trimRecord(RecordTrim const& trim) {
    // The store validates and cuts first (throwing with nothing changed); nothing after it allocates or throws
    // on a consistent state. O(blocks cut).
    bool const paired = records_.get(trim.record).hasDraftPath();
    int32_t const rank = records_.priority(trim.record);
    CacheRecordStore::TrimmedTail const tail = records_.trimTail(trim.record, trim.keepBlocks);
    ++retentionMetrics_.trimmedRecordsByPriority[rank];
    if (retention_.find(trim.record)) {  // the cut ranges go; the record re-ranks by what is left
        retention_.clip(trim.record, trim.keepBlocks);
        records_.setPriority(trim.record, rankOf(records_.get(trim.record), rankedAtNs_));
    }
    if (paired) draftIndex_.eraseBoundaries(trim.record, tail.firstBlock, tail.basePages.data(), tail.basePages.size());
    ObservedPath path;  // the kept part's last block precedes the tail (its draft page too, for an EAGLE record)
    if (StoredRecord const& kept = records_.get(trim.record); tail.firstBlock > 0) {
        size_t const last = static_cast<size_t>(tail.firstBlock - 1);
        if (last < kept.basePagePath.size()) path.parentBase = kept.basePagePath[last];
        if (kept.hasEagleDraftPath() && last < kept.draftPagePath.size() &&
            tail.draftPages.size() == tail.basePages.size()) {
            path.parentDraft = kept.draftPagePath[last];
            path.draft = &tail.draftPages;
        }
    }
    beginRemovals(tail.basePages.size());  // the BlockRemoved event releaseBasePages fills and closes
    releaseBasePages(tail.basePages, 0, path);
    for (PageId page : tail.draftPages) {
        ResourceId const rid{ResourceType::kDraftKvPage, page};
        pools_.releaseCacheRef(rid);
        if (pools_.isFree(rid)) ++metrics_.reclaimedDraftKvPages;
    }
    ++metrics_.trimmedRecords;
    metrics_.trimmedBlocks += tail.basePages.size();
}

// ---- acquire ----------------------------------------------------------------------------------------------

AcquireResult ContextCacheManager::acquireVanilla(BlockHashSpan hashes, int32_t inputTokenCount,
                                                  ContextCacheLookupPolicy lookupPolicy, PageCoverage coverage) {
    return acquire(makeVanillaReusePlan(hashes, inputTokenCount, pageSize_, baseIndex_, lookupPolicy), coverage,
                   inputTokenCount, lookupPolicy);
}

AcquireResult ContextCacheManager::acquireHybrid(std::vector<HybridCheckpointCandidate> const& candidates,
                                                 BlockHashSpan hashes, int32_t inputTokenCount, bool hasAttention,
                                                 ContextCacheLookupPolicy lookupPolicy, PageCoverage coverage) {
    return acquire(
        makeHybridReusePlan(candidates, hashes, inputTokenCount, pageSize_, hasAttention, records_, lookupPolicy),
        coverage, inputTokenCount, lookupPolicy);
}

AcquireResult ContextCacheManager::acquireSpec(BlockHashSpan hashes, int32_t inputTokenCount,
                                               ContextCacheLookupPolicy lookupPolicy, PageCoverage coverage) {
    return acquire(
        makeSpecReusePlan(hashes, inputTokenCount, pageSize_, baseIndex_, draftIndex_, records_, lookupPolicy),
        coverage, inputTokenCount, lookupPolicy);
}

AcquireResult ContextCacheManager::acquireHybridMtp(std::vector<HybridCheckpointCandidate> const& candidates,
                                                    BlockHashSpan hashes, int32_t inputTokenCount,
                                                    ContextCacheLookupPolicy lookupPolicy, PageCoverage coverage) {
    return acquire(makeHybridMtpReusePlan(candidates, hashes, inputTokenCount, pageSize_, records_, lookupPolicy),
                   coverage, inputTokenCount, lookupPolicy);
}

ReuseProbe ContextCacheManager::probeVanilla(BlockHashSpan hashes, int32_t inputTokenCount) const {
    // acquireVanilla's own checks and rule (matchVanillaPrefix), and nothing else: const, no clock, no events.
    validateReusePlanInput("probeVanilla", hashes, inputTokenCount, pageSize_);
    ReuseProbe probe;
    VanillaPrefixMatch const match = matchVanillaPrefix(hashes, inputTokenCount, pageSize_, baseIndex_, probe.pages);
    probe.kind = match.kind;
    probe.matchedTokenLength = match.matchedBlocks * pageSize_;
    probe.reuseTokenLength = match.boundBlocks * pageSize_;
    return probe;
}

std::vector<int32_t> ContextCacheManager::hybridCandidateLengths(int32_t inputTokenCount) const {
    if (inputTokenCount < 0)
        contract("hybridCandidateLengths", "inputTokenCount is negative (" + str(inputTokenCount) + ")");
    return records_.hybridCandidateLengths(inputTokenCount);
}

std::vector<int32_t> ContextCacheManager::hybridCandidateLengths(int32_t inputTokenCount,
                                                                 BlockHashSpan inputFullBlockHashes) const {
    if (inputTokenCount < 0)
        contract("hybridCandidateLengths", "inputTokenCount is negative (" + str(inputTokenCount) + ")");
    if (inputFullBlockHashes.size > 0 && !inputFullBlockHashes.data)
        contract("hybridCandidateLengths", "hashes is null");
    return records_.hybridCandidateLengths(inputTokenCount, inputFullBlockHashes);
}

AcquireResult ContextCacheManager::acquire(ReusePlan plan, PageCoverage coverage, int32_t inputTokenCount,
                                           ContextCacheLookupPolicy lookupPolicy) {
    EventCall const call(*this);
    if (coverage.basePages < 0 || coverage.draftPages < 0)
        contract("acquire",
                 "page coverage is negative (" + str(coverage.basePages) + ", " + str(coverage.draftPages) + ")");
    // Raise private demand so that the lease holds at least the coverage (only in the pools this plan uses).
    bool const usesBase = plan.mode != ReusePlanMode::kHybrid || plan.hybridHasAttention;
    if (usesBase) {
        int32_t const have = static_cast<int32_t>(plan.basePageBindings.size()) + plan.demand.baseKvPages;
        plan.demand.baseKvPages += std::max(0, coverage.basePages - have);
    }
    if (isDraftLease(plan.mode)) {
        int32_t const have = static_cast<int32_t>(plan.draftPageBindings.size()) + plan.demand.draftKvPages;
        plan.demand.draftKvPages += std::max(0, coverage.draftPages - have);
    }
    CacheRequestLease lease = newLease(plan.mode);
    LeaseState& s = *lease.state_;
    s.hybridHasAttention = plan.hybridHasAttention;
    s.matchedHashes = plan.matchedBlockHashes;
    s.specReplayDependency = plan.specReplayDependency;
    if (plan.mode == ReusePlanMode::kSpec && plan.draftRecord) s.specHitRecord = *plan.draftRecord;
    // Reserve first: after this, recording a pin cannot throw, so the lease always knows what it holds.
    s.basePages.reserve(plan.basePageBindings.size());
    s.draftPages.reserve(plan.draftPageBindings.size());

    // 1. Pin the hit before eviction so that planning cannot count it as reclaimable.
    pools_.forEachPrefetched(ResourceType::kBaseKvPage, plan.basePageBindings.data(), plan.basePageBindings.size(),
                             [&](ResourceId const& id) {
        pools_.addActiveRef(id);
        s.basePages.push_back(id.index);
    });
    pools_.forEachPrefetched(ResourceType::kDraftKvPage, plan.draftPageBindings.data(), plan.draftPageBindings.size(),
                             [&](ResourceId const& id) {
        pools_.addActiveRef(id);
        s.draftPages.push_back(id.index);
    });
    if (plan.recurrentSnapshotBinding) {
        pools_.addActiveRef({ResourceType::kRecurrentSnapshot, *plan.recurrentSnapshotBinding});
        s.recurrentBinding = plan.recurrentSnapshotBinding;
    }
    if (plan.partialKvSnapshotBinding) {
        pools_.addActiveRef({ResourceType::kPartialKvSnapshot, *plan.partialKvSnapshotBinding});
        s.partialBinding = plan.partialKvSnapshotBinding;
    }

    // 2. Check the room (the pinned hit no longer counts as reclaimable); 3. none: the lease's destructor drops
    // the pins and nothing was evicted.
    std::optional<RecordId> const hitRecord = plan.draftRecord ? plan.draftRecord : plan.hybridRecord;
    if (!pools_.canAllocateOnceReclaimed(plan.demand))
        return AcquireResult{std::nullopt, AcquireStatus::kInsufficientCapacity, std::move(plan)};

    // 4. Evict (the hit record treated as most recent), allocate (cannot fail now: storage is reserved, and the
    // demand is bounded by the pools now that it is known to be feasible) and touch the hit record.
    s.basePages.reserve(s.basePages.size() + static_cast<size_t>(plan.demand.baseKvPages));
    s.draftPages.reserve(s.draftPages.size() + static_cast<size_t>(plan.demand.draftKvPages));
    makeRoom(plan.demand, hitRecord);
    pools_.allocateIds(ResourceType::kBaseKvPage, plan.demand.baseKvPages, s.basePages);
    pools_.allocateIds(ResourceType::kDraftKvPage, plan.demand.draftKvPages, s.draftPages);
    if (hitRecord && records_.contains(*hitRecord)) records_.touch(*hitRecord);
    if (lookupPolicy == ContextCacheLookupPolicy::kUseCache) {
        metrics_.prefixCacheQueries += static_cast<uint64_t>(inputTokenCount);
        metrics_.prefixCacheHits += static_cast<uint64_t>(plan.reuseTokenLength);
    }
    return AcquireResult{std::move(lease), AcquireStatus::kAcquired, std::move(plan)};
}

// ---- grow / reserve -----------------------------------------------------------------------------------------

bool ContextCacheManager::growBasePages(CacheRequestLease& lease, int32_t count) {
    EventCall const call(*this);
    LeaseState& s = checkLease(lease, "growBasePages");
    if (isDraftLease(s.mode))
        contract("growBasePages", std::string(leaseKind(s.mode)) + " grows both pools with growSpecPages");
    if (count < 0) contract("growBasePages", "count is negative (" + str(count) + ")");
    if (count == 0) return true;
    ResourceDemand demand;
    demand.baseKvPages = count;
    if (!pools_.canAllocateOnceReclaimed(demand)) return false;
    s.basePages.reserve(s.basePages.size() + static_cast<size_t>(count));
    makeRoom(demand, std::nullopt);
    pools_.allocateIds(ResourceType::kBaseKvPage, count, s.basePages);
    return true;
}

bool ContextCacheManager::growSpecPages(CacheRequestLease& lease, int32_t baseCount, int32_t draftCount) {
    EventCall const call(*this);
    LeaseState& s = checkLease(lease, "growSpecPages");
    if (!isDraftLease(s.mode))
        contract("growSpecPages", std::string("needs a spec or Hybrid+MTP lease, got ") + leaseKind(s.mode));
    if (baseCount < 0) contract("growSpecPages", "baseCount is negative (" + str(baseCount) + ")");
    if (draftCount < 0) contract("growSpecPages", "draftCount is negative (" + str(draftCount) + ")");
    ResourceDemand demand;
    demand.baseKvPages = baseCount;
    demand.draftKvPages = draftCount;
    if (demand.isZero()) return true;
    if (!pools_.canAllocateOnceReclaimed(demand)) return false;
    s.basePages.reserve(s.basePages.size() + static_cast<size_t>(baseCount));
    s.draftPages.reserve(s.draftPages.size() + static_cast<size_t>(draftCount));
    makeRoom(demand, std::nullopt);
    pools_.allocateIds(ResourceType::kBaseKvPage, baseCount, s.basePages);
    pools_.allocateIds(ResourceType::kDraftKvPage, draftCount, s.draftPages);
    return true;
}

std::optional<HybridSnapshotReservation> ContextCacheManager::reserveHybridSnapshots(CacheRequestLease& lease,
                                                                                     bool needsPartialKvSnapshot) {
    EventCall const call(*this);
    LeaseState& s = checkLease(lease, "reserveHybridSnapshots");
    if (!isCheckpointLease(s.mode))
        contract("reserveHybridSnapshots", std::string("needs a hybrid lease, got ") + leaseKind(s.mode));
    if (s.mode == ReusePlanMode::kHybridMtp && !needsPartialKvSnapshot)
        contract("reserveHybridSnapshots",
                 "a Hybrid+MTP checkpoint always has a partial-KV snapshot: needsPartialKvSnapshot must be true");
    if (needsPartialKvSnapshot && !s.hybridHasAttention)
        contract("reserveHybridSnapshots", "needsPartialKvSnapshot on a lease without attention");
    ResourceDemand demand;
    demand.recurrentSnapshotSlots = 1;
    demand.partialKvSnapshotSlots = needsPartialKvSnapshot ? 1 : 0;
    if (!pools_.canAllocateOnceReclaimed(demand)) return std::nullopt;
    s.reservedSnapshots.reserve(s.reservedSnapshots.size() + 2);
    makeRoom(demand, std::nullopt);
    std::vector<ResourceId> slots;
    slots.reserve(2);
    pools_.allocateInto(demand, slots);
    HybridSnapshotReservation reservation;
    for (ResourceId const& id : slots) {
        s.reservedSnapshots.push_back(id);
        if (id.type == ResourceType::kRecurrentSnapshot) reservation.recurrentSnapshotSlot = id.index;
        else reservation.partialKvSnapshotSlot = id.index;
    }
    return reservation;
}

void ContextCacheManager::releaseRestoredHybridSnapshots(CacheRequestLease& lease) {
    LeaseState& s = checkLease(lease, "releaseRestoredHybridSnapshots");
    if (!isCheckpointLease(s.mode))
        contract("releaseRestoredHybridSnapshots", std::string("needs a hybrid lease, got ") + leaseKind(s.mode));
    if (s.recurrentBinding) pools_.releaseActiveRef({ResourceType::kRecurrentSnapshot, *s.recurrentBinding});
    if (s.partialBinding) pools_.releaseActiveRef({ResourceType::kPartialKvSnapshot, *s.partialBinding});
    s.recurrentBinding.reset();
    s.partialBinding.reset();
}

void ContextCacheManager::retireHybridSnapshotReservation(CacheRequestLease& lease,
                                                          HybridSnapshotReservation const& reservation) {
    char const* const op = "retireHybridSnapshotReservation";
    LeaseState& s = checkLease(lease, op);
    if (!isCheckpointLease(s.mode)) contract(op, std::string("needs a hybrid lease, got ") + leaseKind(s.mode));
    ResourceId const recurrent{ResourceType::kRecurrentSnapshot, reservation.recurrentSnapshotSlot};
    if (!ownsReservation(s.reservedSnapshots, recurrent))
        contract(
            op, "recurrent snapshot slot " + str(reservation.recurrentSnapshotSlot) + " is not reserved by this lease");
    std::optional<ResourceId> partial;
    if (reservation.partialKvSnapshotSlot) {
        partial = ResourceId{ResourceType::kPartialKvSnapshot, *reservation.partialKvSnapshotSlot};
        if (!ownsReservation(s.reservedSnapshots, *partial))
            contract(op, "partial-KV snapshot slot " + str(*reservation.partialKvSnapshotSlot) +
                             " is not reserved by this lease");
    }
    auto drop = [&](ResourceId const& id) {
        s.reservedSnapshots.erase(std::find(s.reservedSnapshots.begin(), s.reservedSnapshots.end(), id));
        pools_.releaseActiveRef(id);
    };
    drop(recurrent);
    if (partial) drop(*partial);
}

// ---- publish ------------------------------------------------------------------------------------------------

std::vector<PageId> ContextCacheManager::projectCanonicalBasePath(char const* operation, BlockHashSpan hashes,
                                                                  size_t count,
                                                                  std::vector<PageId> const& producerPages,
                                                                  size_t matchedBlocks,
                                                                  std::vector<PageId>& newlyMapped) {
    // First committer wins: an indexed hash keeps its page; otherwise the producer's page becomes canonical
    // (a hash repeated within this publication finds the mapping its first occurrence just made), unless that
    // page is already canonical for another hash: the publication is refused (the header's "Canonical
    // projection").
    // A matched block whose pinned page is still the canonical page of hashes[i] needs no probe: the bijection
    // says index[hashes[i]] is that page. The test reads the page's reverse entry, not just its mapped bit: a
    // pinned page can have been mapped again to ANOTHER hash after its records were evicted, by the lease that
    // produced it publishing a different hash for it (a cold lease's hashes are not checked). Such a block, and
    // an unmapped one, goes through the index like any other block.
    matchedBlocks = std::min({matchedBlocks, count, producerPages.size()});
    std::vector<PageId> canonical;
    canonical.reserve(count);
    newlyMapped.reserve(count);
    stagedStores_.clear();
    if (eventsEnabled_ || observer_) stagedStores_.reserve(count);
    auto undo = [&]() noexcept {
        for (PageId page : newlyMapped) baseIndex_.erasePage(page);
        newlyMapped.clear();
        stagedStores_.clear();
    };
    try {
        // Matched blocks read their page's reverse entry; the others probe the index from the hash's home slot.
        constexpr size_t kPrefetchDistance = 8;
        for (size_t i = 0; i < std::min(count, kPrefetchDistance); ++i) {
            if (i < matchedBlocks) baseIndex_.prefetchReverse(producerPages[i]);
            else baseIndex_.prefetch(hashes[i]);
        }
        for (size_t i = 0; i < count; ++i) {
            if (size_t const ahead = i + kPrefetchDistance; ahead < count) {
                if (ahead < matchedBlocks) baseIndex_.prefetchReverse(producerPages[ahead]);
                else baseIndex_.prefetch(hashes[ahead]);
            }
            if (i < matchedBlocks && baseIndex_.isMappedTo(producerPages[i], hashes[i])) {
                canonical.push_back(producerPages[i]);
                continue;
            }
            std::optional<BaseInsertResult> const r = baseIndex_.tryInsert(hashes[i], producerPages[i]);
            if (!r) {
                std::string const other = toHex(*baseIndex_.hashOfPage(producerPages[i]));
                contract(operation, "fullBlockHashes[" + str(static_cast<int64_t>(i)) + "] (" + toHex(hashes[i]) +
                                        ") is not indexed and its page " + str(producerPages[i]) +
                                        " is already the canonical page of another hash (" + other +
                                        "): a publication of that page named a different block; nothing published");
            }
            canonical.push_back(r->canonicalPage);
            if (r->inserted) {
                newlyMapped.push_back(producerPages[i]);
                if (eventsEnabled_ || observer_) stagedStores_.push_back(i);  // reserved: cannot throw
            }
        }
    } catch (...) {
        undo();
        throw;
    }
    return canonical;
}

PublishResult ContextCacheManager::commitRecord(CacheRecord record, std::vector<PageId> const& newlyMapped,
                                                int32_t publishedBlocks, BlockTokenSpan tokens, KvEventKeys const& keys,
                                                RetentionSpec const* retention, std::optional<RecordId> superseded) {
    // `record` is the full form (every logical hash): the store keeps it compact, and the draft index and the
    // BlockStored events read the hashes from here.
    // The record-limit victim is chosen before the commit: the LRU head as it stands now. A superseded record
    // leaves in its place, so the count does not grow and no victim is needed.
    std::optional<RecordId> limitVictim;
    if (maxRecords_ > 0 && !superseded && records_.size() >= static_cast<size_t>(maxRecords_)) {
        applyExpiriesIfDue();
        limitVictim = records_.leastRecent();  // the lowest priority's least recent (pinned records are unlisted)
    }

    size_t refsAdded = 0;
    RecordId id = kNoRecord;
    try {
        // forEachResource's order (base, draft, snapshots), the page paths with their slots prefetched.
        auto const add = [&](ResourceId const& rid) {
            pools_.addCacheRef(rid);
            ++refsAdded;
        };
        pools_.forEachPrefetched(ResourceType::kBaseKvPage, record.basePagePath.data(), record.basePagePath.size(),
                                 add);
        pools_.forEachPrefetched(ResourceType::kDraftKvPage, record.draftPagePath.data(), record.draftPagePath.size(),
                                 add);
        if (record.recurrentSnapshotSlot) add({ResourceType::kRecurrentSnapshot, *record.recurrentSnapshotSlot});
        if (record.partialKvSnapshotSlot) add({ResourceType::kPartialKvSnapshot, *record.partialKvSnapshotSlot});
        RecordInsertResult const inserted = records_.insert(record);
        if (!inserted.inserted) throw InvariantError("ContextCacheManager: publication raced an identical record");
        id = inserted.id;
        record.id = id;
        if (record.hasEagleDraftPath()) draftIndex_.insert(id, record.basePagePath, record.draftPagePath.size());
    } catch (...) {
        if (id != kNoRecord) records_.erase(id);
        record.forEachResource([&](ResourceId const& rid) {
            if (refsAdded == 0) return;
            pools_.releaseCacheRef(rid);
            --refsAdded;
        });
        for (PageId page : newlyMapped) baseIndex_.erasePage(page);
        stagedStores_.clear();
        throw;
    }

    // The manager's BlockStored first, then its observer (a tier's events about the same blocks follow it).
    if (eventsEnabled_) emitStored(record.logicalBlockHashes, tokens, keys);  // before the record-limit removals
    if (observer_)
        notifyStored(record.logicalBlockHashes, record.basePagePath, tokens,
                     ObservedPath{-1, -1, record.hasEagleDraftPath() ? &record.draftPagePath : nullptr});
    stagedStores_.clear();
    retain(id, retention, false);
    PublishResult result{PublishStatus::kPublished, id, records_.get(id).basePagePath, publishedBlocks};
    if (superseded) {
        supersede(*superseded, id);
        result.supersededRecord = superseded;
    }
    if (maxRecords_ == 0) evictOne(id);
    else if (limitVictim) evictOne(*limitVictim);
    if (!records_.contains(id)) result.record.reset();
    return result;
}

PublishResult ContextCacheManager::publish(CacheRequestLease& lease, PublishRequest const& request) {
    EventCall const call(*this);
    char const* const op = "publish";
    BlockHashSpan const hashes = request.fullBlockHashes;
    int32_t const residentStateLength = request.residentStateLength;
    BlockTokenSpan const tokens = request.tokenIds;
    LeaseState& s = checkLease(lease, op);
    if (s.mode == ReusePlanMode::kHybrid) contract(op, "a hybrid lease publishes with publishHybrid");
    if (s.mode == ReusePlanMode::kHybridMtp) contract(op, "a Hybrid+MTP lease publishes with publishHybridMtp");
    bool const spec = s.mode == ReusePlanMode::kSpec;
    bool const grow = request.growth == PublicationGrowth::kExtendLeaseRecord;
    if (!grow && request.growth != PublicationGrowth::kNewRecord)
        contract(op, "unknown publication growth " + str(static_cast<int32_t>(request.growth)));
    if (grow && spec) contract(op, "growth (kExtendLeaseRecord) is for vanilla leases, got a spec lease");
    if (residentStateLength < 0) contract(op, "residentStateLength is negative (" + str(residentStateLength) + ")");
    if (!hashes.empty() && !hashes.data) contract(op, "fullBlockHashes is null");
    size_t const count = std::min(hashes.size, static_cast<size_t>(residentStateLength / pageSize_));
    if (count == 0)
        contract(op, "a publication needs at least one resident full block (" + str(static_cast<int64_t>(hashes.size)) +
                         " hashes, residentStateLength " + str(residentStateLength) + ")");
    if (count > s.basePages.size())
        contract(op, str(static_cast<int64_t>(count)) + " blocks but the lease holds " +
                         str(static_cast<int64_t>(s.basePages.size())) + " base pages");
    if (spec && count > s.draftPages.size())
        contract(op, str(static_cast<int64_t>(count)) + " blocks but the lease holds " +
                         str(static_cast<int64_t>(s.draftPages.size())) + " draft pages");
    checkMatchedPrefix(op, hashes, count, s.matchedHashes);
    checkEventTokens(op, tokens, request.eventKeys, count);
    if (request.retention) validateRetentionSpec(op, *request.retention);
    if (s.specReplayDependency) {
        SpecReplayDependency const& dep = *s.specReplayDependency;
        if (count < static_cast<size_t>(dep.pathBlockCount))
            contract(op, "the replayed boundary block " + str(dep.pathBlockCount) + " is not in the " +
                             str(static_cast<int64_t>(count)) + " published blocks");
        if (hashes[static_cast<size_t>(dep.pathBlockCount - 1)] != dep.terminalHash)
            contract(op, "the replayed boundary block " + str(dep.pathBlockCount) +
                             " changed: the retained draft KV depended on the original next block");
    }

    int32_t const published = static_cast<int32_t>(count);
    CacheRecordKey const key{hashes[count - 1], published};
    // Everything is validated: from here a growing publication may supersede the lease's own record.
    std::optional<RecordId> superseded = grow ? extendableLeaseRecord(s, hashes, count) : std::nullopt;
    if (std::optional<RecordId> existing = records_.find(key)) {
        StoredRecord const& record = records_.get(*existing);
        // A pinned record is frozen: it holds exactly what it held when pinned (its pin's holds and the budget
        // count those resources), so a spec lease's publication of its key does not upgrade it with a draft path.
        if (!spec || record.hasDraftPath() || retention_.isPinned(*existing)) {
            records_.touch(*existing);
            retain(*existing, request.retention, true);
            PublishResult result{PublishStatus::kExistingRecord, *existing, record.basePagePath, published};
            if (superseded && extendsBasePath(*superseded, record.basePagePath)) {
                supersede(*superseded, *existing);  // the existing record holds R's path: R goes, the count falls
                result.supersededRecord = superseded;
                s.ownRecord = kNoRecord;  // a record the lease met is never its own
            }
            return result;
        }
        // Draft upgrade: a base-only record gains this producer's draft path (and becomes MRU). Index first
        // (strong guarantee), then refs (undone on failure), then the record itself (cannot fail).
        // The full form (its hashes derived from the canonical pages) feeds the draft index.
        CacheRecord upgraded = records_.materialize(record);
        upgraded.draftPagePath.assign(s.draftPages.begin(), s.draftPages.begin() + published);
        draftIndex_.insert(upgraded);
        size_t refsAdded = 0;
        try {
            for (; refsAdded < upgraded.draftPagePath.size(); ++refsAdded)
                pools_.addCacheRef({ResourceType::kDraftKvPage, upgraded.draftPagePath[refsAdded]});
        } catch (...) {
            for (size_t i = 0; i < refsAdded; ++i)
                pools_.releaseCacheRef({ResourceType::kDraftKvPage, upgraded.draftPagePath[i]});
            draftIndex_.erase(upgraded);
            throw;
        }
        records_.setDraftState(*existing, std::move(upgraded.draftPagePath));
        retain(*existing, request.retention, true);
        return PublishResult{PublishStatus::kPublished, *existing, records_.get(*existing).basePagePath, published};
    }

    std::vector<PageId> newlyMapped;
    CacheRecord record;
    record.key = key;
    record.logicalBlockHashes.assign(hashes.begin(), hashes.begin() + published);
    record.basePagePath = projectCanonicalBasePath(op, hashes, count, s.basePages, s.matchedHashes.size(), newlyMapped);
    if (spec) record.draftPagePath.assign(s.draftPages.begin(), s.draftPages.begin() + published);
    // R's pages are the canonical pages of its hashes, so a prefix path projects onto them (checked, not assumed:
    // removing R must never unmap or free a page).
    if (superseded && !extendsBasePath(*superseded, record.basePagePath)) superseded.reset();
    if (spec) superseded = dominatedSpecHit(s, record.basePagePath, record.draftPagePath);
    PublishResult result = commitRecord(std::move(record), newlyMapped, published, tokens, request.eventKeys,
                                        request.retention, superseded);
    if (!spec) s.ownRecord = result.record.value_or(kNoRecord);
    return result;
}

std::optional<RecordId> ContextCacheManager::extendableLeaseRecord(LeaseState const& s, BlockHashSpan hashes,
                                                                   size_t count) const {
    RecordId const id = s.ownRecord;
    if (id == kNoRecord || !records_.contains(id) || retention_.isPinned(id)) return std::nullopt;
    StoredRecord const& r = records_.get(id);
    size_t const blocks = static_cast<size_t>(r.key.fullBlockCount);
    if (r.isHybrid() || r.hasDraftPath() || blocks == 0 || blocks >= count || r.basePagePath.size() != blocks)
        return std::nullopt;
    if (r.key.terminalHash != hashes[blocks - 1]) return std::nullopt;  // diverged: not a prefix of this path
    return id;
}

std::optional<RecordId> ContextCacheManager::dominatedSpecHit(LeaseState const& s, std::vector<PageId> const& basePath,
                                                              std::vector<PageId> const& draftPath) const {
    RecordId const id = s.specHitRecord;
    if (id == kNoRecord || !records_.contains(id) || retention_.isPinned(id) || retention_.find(id))
        return std::nullopt;
    StoredRecord const& r = records_.get(id);
    if (!r.hasEagleDraftPath() || !extendsBasePath(id, basePath)) return std::nullopt;
    size_t const bindable = r.draftPagePath.size() - 1;
    if (bindable > draftPath.size() ||
        !std::equal(r.draftPagePath.begin(), r.draftPagePath.begin() + static_cast<std::ptrdiff_t>(bindable),
                    draftPath.begin()))
        return std::nullopt;
    return id;
}

bool ContextCacheManager::extendsBasePath(RecordId old, std::vector<PageId> const& successorPath) const {
    std::vector<PageId> const& path = records_.get(old).basePagePath;
    return path.size() < successorPath.size() && std::equal(path.begin(), path.end(), successorPath.begin());
}

void ContextCacheManager::supersede(RecordId old, RecordId successor) {
    // Retention first (it may allocate; nothing is removed yet): R's ranges the successor's do not dominate join
    // them as an existing-record publication's would, and the successor re-ranks.
    if (RetentionBlockRanges const* ranges = retention_.find(old)) {
        RetentionBlockRanges const* mine = retention_.find(successor);
        RetentionBlockRanges const inherited =
            mine ? undominatedRetentionBlockRanges(*ranges, *mine) : RetentionBlockRanges(*ranges);
        if (!inherited.empty()) {
            int64_t const now = advanceRetentionClock();
            retention_.merge(successor, inherited, now);
            records_.setPriority(successor, rankOf(records_.get(successor), now));
        }
    }
    // Then the record: its pages keep the successor's cache references, so none is unmapped, freed or reported.
    retention_.erase(old);
    StoredRecord const gone = records_.erase(old);
    ++metrics_.supersededRecords;
    if (gone.hasEagleDraftPath()) draftIndex_.erase(old, gone.basePagePath);
    pools_.forEachPrefetched(ResourceType::kBaseKvPage, gone.basePagePath.data(), gone.basePagePath.size(),
                             [this](ResourceId const& rid) { pools_.releaseCacheRef(rid); });
    pools_.forEachPrefetched(ResourceType::kDraftKvPage, gone.draftPagePath.data(), gone.draftPagePath.size(),
                             [this](ResourceId const& rid) { pools_.releaseCacheRef(rid); });
}

PublishResult ContextCacheManager::publishHybrid(CacheRequestLease& lease, HybridPublishRequest const& request) {
    EventCall const call(*this);
    char const* const op = "publishHybrid";
    BlockHashSpan const hashes = request.fullBlockHashes;
    HybridCheckpointKey const& checkpoint = request.checkpoint;
    HybridSnapshotReservation const& snapshots = request.snapshots;
    BlockTokenSpan const tokens = request.tokenIds;
    LeaseState& s = checkLease(lease, op);
    if (s.mode != ReusePlanMode::kHybrid) contract(op, std::string("needs a hybrid lease, got ") + leaseKind(s.mode));
    int32_t const length = checkpoint.exactLength;
    if (length <= 0) contract(op, "checkpoint.exactLength must be positive (" + str(length) + ")");
    size_t const fullBlocks = static_cast<size_t>(length / pageSize_);
    bool const midPage = length % pageSize_ != 0;
    if (!hashes.empty() && !hashes.data) contract(op, "fullBlockHashes is null");
    if (hashes.size != fullBlocks)
        contract(op, str(static_cast<int64_t>(hashes.size)) + " hashes for an exact length of " + str(length) +
                         " (expected " + str(static_cast<int64_t>(fullBlocks)) + ")");
    bool const wantsPartial = s.hybridHasAttention && midPage;
    if (snapshots.partialKvSnapshotSlot.has_value() != wantsPartial)
        contract(op, wantsPartial
                         ? "a mid-page checkpoint on an attention model needs a partial-KV snapshot slot"
                         : (s.hybridHasAttention ? "a page-aligned checkpoint takes no partial-KV snapshot slot"
                                                 : "a lease without attention takes no partial-KV snapshot slot"));
    if (s.hybridHasAttention && fullBlocks > s.basePages.size())
        contract(op, str(static_cast<int64_t>(fullBlocks)) + " full blocks but the lease holds " +
                         str(static_cast<int64_t>(s.basePages.size())) + " base pages");
    if (!ownsReservation(s.reservedSnapshots, {ResourceType::kRecurrentSnapshot, snapshots.recurrentSnapshotSlot}))
        contract(op,
                 "recurrent snapshot slot " + str(snapshots.recurrentSnapshotSlot) + " is not reserved by this lease");
    if (snapshots.partialKvSnapshotSlot &&
        !ownsReservation(s.reservedSnapshots, {ResourceType::kPartialKvSnapshot, *snapshots.partialKvSnapshotSlot}))
        contract(
            op, "partial-KV snapshot slot " + str(*snapshots.partialKvSnapshotSlot) + " is not reserved by this lease");
    checkMatchedPrefix(op, hashes, fullBlocks, s.matchedHashes);
    if (s.hybridHasAttention) checkEventTokens(op, tokens, request.eventKeys, fullBlocks);
    if (request.retention) validateRetentionSpec(op, *request.retention);

    int32_t const publishedBlocks = s.hybridHasAttention ? static_cast<int32_t>(fullBlocks) : 0;
    if (std::optional<RecordId> existing = records_.findHybrid(checkpoint)) {
        records_.touch(*existing);
        retain(*existing, request.retention, true);
        return PublishResult{PublishStatus::kExistingRecord, *existing, records_.get(*existing).basePagePath,
                             publishedBlocks};
    }
    std::vector<PageId> newlyMapped;
    CacheRecord record;
    record.key = CacheRecordKey{checkpoint.exactPrefixDigest, static_cast<int32_t>(fullBlocks)};
    record.logicalBlockHashes.assign(hashes.begin(), hashes.end());
    if (s.hybridHasAttention)
        record.basePagePath =
            projectCanonicalBasePath(op, hashes, fullBlocks, s.basePages, s.matchedHashes.size(), newlyMapped);
    record.recurrentSnapshotSlot = snapshots.recurrentSnapshotSlot;
    record.partialKvSnapshotSlot = snapshots.partialKvSnapshotSlot;
    record.exactCheckpointLength = length;
    return commitRecord(std::move(record), newlyMapped, publishedBlocks, tokens, request.eventKeys, request.retention);
}

PublishResult ContextCacheManager::publishHybridMtp(CacheRequestLease& lease, HybridPublishRequest const& request) {
    EventCall const call(*this);
    char const* const op = "publishHybridMtp";
    BlockHashSpan const hashes = request.fullBlockHashes;
    HybridCheckpointKey const& checkpoint = request.checkpoint;
    HybridSnapshotReservation const& snapshots = request.snapshots;
    BlockTokenSpan const tokens = request.tokenIds;
    LeaseState& s = checkLease(lease, op);
    if (s.mode != ReusePlanMode::kHybridMtp)
        contract(op, std::string("needs a Hybrid+MTP lease, got ") + leaseKind(s.mode));
    int32_t const length = checkpoint.exactLength;
    if (length < 1) contract(op, "checkpoint.exactLength must be at least 1 (" + str(length) + ")");
    // The boundary token stays private: the draft KV at E-1 depends on token E, so only the pages complete in
    // both pools through E-1 are full blocks; the rest is in the partial-KV slot.
    size_t const fullBlocks = static_cast<size_t>((length - 1) / pageSize_);
    if (!hashes.empty() && !hashes.data) contract(op, "fullBlockHashes is null");
    if (hashes.size != fullBlocks)
        contract(op, str(static_cast<int64_t>(hashes.size)) + " hashes for an exact length of " + str(length) +
                         " (expected floor((" + str(length) + " - 1) / " + str(pageSize_) +
                         ") = " + str(static_cast<int64_t>(fullBlocks)) + ")");
    if (fullBlocks > s.basePages.size())
        contract(op, str(static_cast<int64_t>(fullBlocks)) + " full blocks but the lease holds " +
                         str(static_cast<int64_t>(s.basePages.size())) + " base pages");
    if (fullBlocks > s.draftPages.size())
        contract(op, str(static_cast<int64_t>(fullBlocks)) + " full blocks but the lease holds " +
                         str(static_cast<int64_t>(s.draftPages.size())) + " draft pages");
    if (!snapshots.partialKvSnapshotSlot)
        contract(op,
                 "a Hybrid+MTP checkpoint needs a partial-KV snapshot slot (it holds the base tail and the "
                 "draft page of the boundary)");
    if (!ownsReservation(s.reservedSnapshots, {ResourceType::kRecurrentSnapshot, snapshots.recurrentSnapshotSlot}))
        contract(op,
                 "recurrent snapshot slot " + str(snapshots.recurrentSnapshotSlot) + " is not reserved by this lease");
    if (!ownsReservation(s.reservedSnapshots, {ResourceType::kPartialKvSnapshot, *snapshots.partialKvSnapshotSlot}))
        contract(
            op, "partial-KV snapshot slot " + str(*snapshots.partialKvSnapshotSlot) + " is not reserved by this lease");
    checkMatchedPrefix(op, hashes, fullBlocks, s.matchedHashes);
    checkEventTokens(op, tokens, request.eventKeys, fullBlocks);
    if (request.retention) validateRetentionSpec(op, *request.retention);

    int32_t const publishedBlocks = static_cast<int32_t>(fullBlocks);
    if (std::optional<RecordId> existing = records_.findHybridMtp(checkpoint)) {
        records_.touch(*existing);
        retain(*existing, request.retention, true);
        return PublishResult{PublishStatus::kExistingRecord, *existing, records_.get(*existing).basePagePath,
                             publishedBlocks};
    }
    std::vector<PageId> newlyMapped;
    CacheRecord record;
    record.key = CacheRecordKey{checkpoint.exactPrefixDigest, publishedBlocks};
    record.logicalBlockHashes.assign(hashes.begin(), hashes.end());
    record.draftPagePath.assign(s.draftPages.begin(), s.draftPages.begin() + publishedBlocks);
    record.basePagePath = projectCanonicalBasePath(op, hashes, fullBlocks, s.basePages, s.matchedHashes.size(),
                                                   newlyMapped);  // last: maps
    record.recurrentSnapshotSlot = snapshots.recurrentSnapshotSlot;
    record.partialKvSnapshotSlot = snapshots.partialKvSnapshotSlot;
    record.exactCheckpointLength = length;
    record.hybridMtpCheckpoint = true;
    return commitRecord(std::move(record), newlyMapped, publishedBlocks, tokens, request.eventKeys, request.retention);
}

}  // namespace ctxcache
