// ContextCacheCoordinator, admission: validating a batch (or one in-flight joiner) before anything is held,
// hashing each prompt, gathering hybrid checkpoint candidates, acquiring one lease per sequence with the
// forced-cold retry and media-boundary trimming, then claiming resident slots and counting the admission; a
// joiner's admission, finalization and retraction. A failed admission holds nothing (the sequence states'
// destructors release what was taken). Contract: include/ctxcache/runtime/context_cache_coordinator.h
// (beginRequest, admitSequence, finalizeSequenceAdmission, retractSequenceAdmission).
// Threading: the coordinator's single-writer contract; nothing here waits for the device.
#include <chrono>
#include <string>
#include <utility>

#include "coordinator_internal.h"
#include "ctxcache/runtime/context_cache_coordinator.h"

namespace ctxcache::runtime {

namespace {

// Validates one sequence admission (throws ContractError, its retention spec included); returns the effective
// lookup policy.
ContextCacheLookupPolicy validateSequence(char const* op, ContextCacheSequenceAdmission const& a, size_t index,
                                          int32_t maxBatch, ContextCacheLookupPolicy batchPolicy) {
    std::string const where = "sequences[" + str(static_cast<int64_t>(index)) + "]";
    if (a.tokenIds.empty()) contract(op, where + " has no tokens");
    if (!a.tokenIds.data) contract(op, where + " tokenIds is null");
    if (a.tokenIds.size > static_cast<size_t>(INT32_MAX / 2)) contract(op, where + " is too long");
    if (a.resident.slot < 0 || a.resident.slot >= maxBatch)
        contract(op, where + " resident slot " + str(a.resident.slot) + " is outside [0, " + str(maxBatch) + ")");
    if (a.resident.epoch == 0) contract(op, where + " resident epoch 0 is invalid");
    if (!a.perPositionMediaHash.empty() && a.perPositionMediaHash.size() != a.tokenIds.size)
        contract(op, where + " perPositionMediaHash has " + str(static_cast<int64_t>(a.perPositionMediaHash.size())) +
                         " entries for " + str(static_cast<int64_t>(a.tokenIds.size)) + " tokens");
    if (a.eventIdentity) {
        KvEventKeys const keys = a.eventIdentity->keys();
        if (keys.mediaCount > 0) {
            KvEventMedia const& last = keys.media[keys.mediaCount - 1];
            if (last.firstToken + last.tokenCount > static_cast<int64_t>(a.tokenIds.size))
                contract(op, where + " eventIdentity names a media item ending at " +
                                 str(last.firstToken + last.tokenCount) + ", beyond the " +
                                 str(static_cast<int64_t>(a.tokenIds.size)) + "-token prompt");
        }
    }
    if (a.retention) {
        if (a.retention->promptTokenCount >= -1) {
            validateRetentionSpec(op, *a.retention);
        } else {  // promptTokenCount is the coordinator's to set: only the rest is checked
            RetentionSpec spec = *a.retention;
            spec.promptTokenCount = -1;
            validateRetentionSpec(op, spec);
        }
    }
    ContextCacheLookupPolicy const policy = a.lookupPolicy.value_or(batchPolicy);
    if (policy != ContextCacheLookupPolicy::kUseCache && policy != ContextCacheLookupPolicy::kBypass)
        contract(op, where + " has an unknown lookup policy");
    return policy;
}

void validateResident(char const* op, std::vector<uint64_t> const& live, std::vector<uint64_t> const& last,
                      ResidentRef r, std::string const& where) {
    size_t const slot = static_cast<size_t>(r.slot);
    if (live[slot] != 0)
        contract(op, where + " resident slot " + str(r.slot) + " is held by a live sequence (epoch " +
                         std::to_string(live[slot]) + ")");
    if (r.epoch <= last[slot])
        contract(op, where + " resident epoch " + std::to_string(r.epoch) + " of slot " + str(r.slot) +
                         " is stale (last admitted epoch " + std::to_string(last[slot]) + ")");
}

}  // namespace

ContextCacheCoordinator::BeginRequestResult ContextCacheCoordinator::beginRequest(
    ContextCacheBatchAdmission const& admission, DecodingKvHeadroom const& headroom, StreamHandle stream) {
    char const* op = "beginRequest";
    BeginRequestResult result;
    // 1. Validate everything before anything is held.
    if (admission.sequences.empty()) contract(op, "a request needs at least one sequence");
    if (admission.sequences.size() > static_cast<size_t>(config_.maxBatch))
        contract(op, str(static_cast<int64_t>(admission.sequences.size())) + " sequences exceed maxBatch " +
                         str(config_.maxBatch));
    if (admission.tokenStateContract > DecodingTokenStateContract::kFullyCommitted)
        contract(op, "unknown token-state contract");
    if (admission.commitPolicy > ContextCacheCommitPolicy::kPrefillStateOnly) contract(op, "unknown commit policy");
    if (admission.lookupPolicy > ContextCacheLookupPolicy::kBypass) contract(op, "unknown lookup policy");
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) contract(op, "headroom is negative");
    if (admission.speculativeRequest && !profile_.isSpeculative())
        contract(op, "a speculative request on a deployment without a spec contract");
    if (profile_.isHybridMtp()) {
        // Appendix C: Hybrid+MTP reuse serves text-only batches of one under the prefill-state-only commit policy
        // (the MTP draft KV lags the base by the last accepted span, so no decode-end state is publishable).
        if (!admission.speculativeRequest) contract(op, "a Hybrid+MTP deployment serves speculative requests only");
        if (admission.sequences.size() != 1)
            contract(op, "Hybrid+MTP reuse serves a batch of one sequence, got " +
                             str(static_cast<int64_t>(admission.sequences.size())));
        if (admission.commitPolicy != ContextCacheCommitPolicy::kPrefillStateOnly)
            contract(op, "Hybrid+MTP reuse needs the prefill-state-only commit policy");
        if (!admission.sequences[0].perPositionMediaHash.empty())
            contract(op, "Hybrid+MTP reuse serves text-only requests (the sequence carries media)");
    }
    std::vector<ContextCacheLookupPolicy> policies;
    policies.reserve(admission.sequences.size());
    bool anyMedia = false;
    for (size_t i = 0; i < admission.sequences.size(); ++i) {
        ContextCacheSequenceAdmission const& a = admission.sequences[i];
        policies.push_back(validateSequence(op, a, i, config_.maxBatch, admission.lookupPolicy));
        validateResident(op, residentEpochs_, lastEpochs_, a.resident,
                         "sequences[" + str(static_cast<int64_t>(i)) + "]");
        for (size_t j = 0; j < i; ++j)
            if (admission.sequences[j].resident.slot == a.resident.slot)
                contract(op, "sequences[" + str(static_cast<int64_t>(j)) + "] and [" + str(static_cast<int64_t>(i)) +
                                 "] share resident slot " + str(a.resident.slot));
        anyMedia = anyMedia || !a.perPositionMediaHash.empty();
    }
    if (poisoned_) {
        result.status = Status::kPoisoned;
        result.failure = lastFailure_ = "beginRequest: the coordinator is poisoned until shutdown() succeeds";
        return result;
    }
    if (activeRequests_ > 0) {
        result.status = Status::kRequestFailed;
        result.failure = lastFailure_ =
            "beginRequest: another request is active (one request at a time; in-flight "
            "joiners use admitSequence)";
        return result;
    }

    auto state = std::make_unique<RequestState>();
    state->speculative = admission.speculativeRequest;
    state->pagedSpec = admission.speculativeRequest && profile_.ownsPagedSpecState();
    state->contract = admission.tokenStateContract;
    state->commit = admission.commitPolicy;
    state->stream = stream;
    // Speculative decoding with media is bypassed batch-wide (Appendix C).
    bool const forceBypass = admission.speculativeRequest && anyMedia;

    // 2. One lease per sequence; any failure releases what was taken (the states' destructors).
    for (size_t i = 0; i < admission.sequences.size(); ++i) {
        ContextCacheLookupPolicy const policy = forceBypass ? ContextCacheLookupPolicy::kBypass : policies[i];
        SequenceState seq;
        std::string failure;
        bool capacity = false;
        if (!acquireSequence(admission.sequences[i], policy, headroom, state->pagedSpec, seq, failure, capacity)) {
            result.status = Status::kRequestFailed;
            result.failure = lastFailure_ =
                std::string("beginRequest: sequences[") + str(static_cast<int64_t>(i)) + "]: " + failure;
            return result;
        }
        state->sequences.push_back(std::move(seq));
    }

    // 3. Commit: claim resident slots, count, link.
    for (SequenceState& seq : state->sequences) {
        residentEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
        lastEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
        state->prefillStarts.push_back(seq.reuse);
        countAdmission(seq);
    }
    state->owner = this;
    state->next = liveList_;
    if (liveList_) liveList_->prev = state.get();
    liveList_ = state.get();
    ++activeRequests_;
    result.prefillStarts = state->prefillStarts;
    result.request.emplace(RequestHandle(std::move(state)));
    return result;
}

bool ContextCacheCoordinator::acquireSequence(ContextCacheSequenceAdmission const& a, ContextCacheLookupPolicy policy,
                                              DecodingKvHeadroom const& headroom, bool pagedSpec, SequenceState& seq,
                                              std::string& failure, bool& capacity) {
    auto const started = std::chrono::steady_clock::now();
    int32_t const n = static_cast<int32_t>(a.tokenIds.size);
    seq.resident = a.resident;
    seq.tokens.assign(a.tokenIds.data, a.tokenIds.data + a.tokenIds.size);  // the prompt's one copy: its history
    seq.media = a.perPositionMediaHash;
    bool hasMedia = false;
    for (Hash128 const& h : seq.media) hasMedia = hasMedia || h != Hash128{};
    if (!hasMedia) seq.media.clear();
    seq.extras = a.keyExtras;
    seq.eventIdentity = a.eventIdentity;
    seq.inputLength = n;
    if (a.retention) {
        // The one copy (validated by validateSequence); every publication of the sequence points at it.
        RetentionSpec spec = *a.retention;
        spec.promptTokenCount = n;
        if (!spec.isDefault()) seq.retention = std::move(spec);
    }
    capacity = false;

    // Page-table coverage of the first step: n + headroom.
    PageCoverage coverage;
    if (profile_.hasAttention()) {
        coverage.basePages = ceilDiv(static_cast<int64_t>(n) + headroom.baseExtraTokens, pageSize_);
        if (coverage.basePages > resources_.basePageTable->maxPagesPerSeq()) {
            failure = "needs " + str(coverage.basePages) + " pages for " + str(n) +
                      " tokens + headroom, the page table "
                      "holds " +
                      str(resources_.basePageTable->maxPagesPerSeq()) + " per sequence";
            return false;
        }
    }
    if (pagedSpec) {
        coverage.draftPages = ceilDiv(static_cast<int64_t>(n) + headroom.draftExtraTokens, pageSize_);
        if (coverage.draftPages > resources_.draftPageTable->maxPagesPerSeq()) {
            failure = "needs " + str(coverage.draftPages) + " draft pages, the draft page table holds " +
                      str(resources_.draftPageTable->maxPagesPerSeq()) + " per sequence";
            return false;
        }
    }

    extendHashes(seq, hasher_, pageSize_, n);
    auto acquire = [&](ContextCacheLookupPolicy p, size_t hashCount) {
        if (profile_.usesCheckpointReuse()) {
            std::vector<HybridCheckpointCandidate> candidates;
            if (p == ContextCacheLookupPolicy::kUseCache) {
                for (int32_t length : manager_.hybridCandidateLengths(n, seq.hashes))
                    candidates.push_back({length, exactDigest(seq, hasher_, pageSize_, length)});
            }
            if (profile_.isHybridMtp())
                return manager_.acquireHybridMtp(candidates, {seq.hashes.data(), hashCount}, n, p, coverage);
            return manager_.acquireHybrid(candidates, {seq.hashes.data(), hashCount}, n, profile_.hasAttention(), p,
                                          coverage);
        }
        if (pagedSpec) return manager_.acquireSpec({seq.hashes.data(), hashCount}, n, p, coverage);
        return manager_.acquireVanilla({seq.hashes.data(), hashCount}, n, p, coverage);
    };
    AcquireResult r = acquire(policy, seq.hashes.size());
    if (r.status == AcquireStatus::kInsufficientCapacity && policy == ContextCacheLookupPolicy::kUseCache &&
        (r.plan.reuseTokenLength > 0 || r.plan.kind == ReusePlanKind::kFullInputRewind)) {
        // Forced cold retry: the hit's pins cost capacity a cold plan does not need.
        r = acquire(ContextCacheLookupPolicy::kBypass, seq.hashes.size());
        seq.forcedCold = true;
    }
    // Media-boundary trimming (vanilla): a reuse boundary inside a media run would resume prefill mid-item, so
    // reuse stops at the last page boundary before the run and the whole item is recomputed.
    if (r.status == AcquireStatus::kAcquired && !seq.media.empty() && !profile_.usesCheckpointReuse() && !pagedSpec) {
        auto splits = [&](int32_t reuse) {
            return reuse > 0 && reuse < n && seq.media[static_cast<size_t>(reuse - 1)] != Hash128{} &&
                   seq.media[static_cast<size_t>(reuse)] != Hash128{};
        };
        while (r.status == AcquireStatus::kAcquired && splits(r.plan.reuseTokenLength)) {
            size_t const keep = static_cast<size_t>(r.plan.reuseTokenLength / pageSize_) -
                                (r.plan.reuseTokenLength % pageSize_ == 0 ? 1 : 0);
            r.lease->release();
            r = acquire(seq.forcedCold ? ContextCacheLookupPolicy::kBypass : policy, keep);
            ++counters_.mediaBoundaryTrims;
        }
    }
    counters_.planningNanoseconds += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
    if (r.status != AcquireStatus::kAcquired) {
        capacity = true;
        failure = "insufficient capacity for " + str(n) + " tokens";
        return false;
    }
    seq.lease = std::move(*r.lease);
    seq.bypass = policy == ContextCacheLookupPolicy::kBypass || seq.forcedCold;
    seq.matched = r.plan.matchedTokenLength;
    seq.reuse = r.plan.reuseTokenLength;
    seq.kind = r.plan.kind;
    seq.hadReplay = r.plan.specReplayMode == SpecReplayMode::kFullPage;
    seq.mediaAware = hasMedia;
    // The host tier extends a vanilla attention hit, or an EAGLE one with the draft pages it holds beside the base
    // pages: the blocks after the hit that the tier holds are copied into the lease's own pages now, and the
    // prefill starts after them.
    if (hostTier_ && !seq.bypass && !hasMedia && (!pagedSpec || hostTier_->holdsDrafts()) &&
        !profile_.usesCheckpointReuse() && seq.reuse % pageSize_ == 0) {
        std::vector<PageId> const& pages = seq.lease.basePages();
        std::vector<PageId> const& drafts = seq.lease.draftPages();
        uint64_t const storeBefore = hostTier_->metrics().storeLoadedBlocks;
        int32_t const loaded =
            hostTier_->loadHit({seq.hashes.data(), seq.hashes.size()}, n, seq.reuse / pageSize_, pages.data(),
                               pages.size(), pagedSpec ? drafts.data() : nullptr, pagedSpec ? drafts.size() : 0);
        seq.reuse += loaded * pageSize_;
        uint64_t const fromStore = hostTier_->metrics().storeLoadedBlocks - storeBefore;
        uint64_t const page = static_cast<uint64_t>(pageSize_);
        counters_.hostLoadedTokens += (static_cast<uint64_t>(loaded) - fromStore) * page;
        counters_.storeLoadedTokens += fromStore * page;
    }
    return true;
}

void ContextCacheCoordinator::countAdmission(SequenceState const& seq) {
    ++counters_.admittedSequences;
    if (seq.matched > 0) ++counters_.hitSequences;
    if (seq.mediaAware) ++counters_.mediaAwareSequences;
    if (seq.bypass) ++counters_.lookupBypassSequences;
    if (seq.forcedCold) ++counters_.forcedColdSequences;
    switch (seq.kind) {
        case ReusePlanKind::kStandard: ++counters_.standardPlans; break;
        case ReusePlanKind::kNoReusablePrefix: ++counters_.noReusablePrefixPlans; break;
        case ReusePlanKind::kFullInputRewind: ++counters_.fullInputRewindPlans; break;
    }
    counters_.matchedTokens += static_cast<uint64_t>(seq.matched);
    counters_.reusedTokens += static_cast<uint64_t>(seq.reuse);
    if (seq.hadReplay) ++counters_.specFullPageReplays;
}

// ---- in-flight admission ----------------------------------------------------------------------------------

ContextCacheCoordinator::AdmitSequenceResult ContextCacheCoordinator::admitSequence(
    RequestHandle& request, ContextCacheSequenceAdmission const& admission, DecodingKvHeadroom const& headroom) {
    char const* op = "admitSequence";
    AdmitSequenceResult result;
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined || poisoned_) {
        result.failure = lastFailure_ = "admitSequence: the coordinator is poisoned";
        return result;
    }
    if (!supportsLiveSequenceAdmission()) {
        result.failure = lastFailure_ = std::string(
                                            "admitSequence: live admission needs an attention-only, "
                                            "non-speculative deployment (this one is ") +
                                        toString(profile_.baseStateKind) +
                                        (profile_.isSpeculative() ? ", speculative)" : ")");
        return result;
    }
    if (s.speculative) contract(op, "a speculative request does not take joiners");
    requirePhase(op, s, {Phase::kExecuting});
    if (s.joiner) contract(op, "a joiner is already pending");
    if (static_cast<int32_t>(s.sequences.size()) >= config_.maxBatch)
        contract(op, "the batch is full (" + str(config_.maxBatch) + ")");
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) contract(op, "headroom is negative");
    ContextCacheLookupPolicy policy =
        validateSequence(op, admission, 0, config_.maxBatch, ContextCacheLookupPolicy::kUseCache);
    validateResident(op, residentEpochs_, lastEpochs_, admission.resident, "the joiner");
    if (resources_.baseLengths->activeBatch() != static_cast<int32_t>(s.sequences.size()))
        contract(op, "the device lengths cover " + str(resources_.baseLengths->activeBatch()) +
                         " rows, the batch has " + str(static_cast<int64_t>(s.sequences.size())));
    SequenceState seq;
    std::string failure;
    bool capacity = false;
    if (!acquireSequence(admission, policy, headroom, false, seq, failure, capacity)) {
        result.status = capacity ? AdmitSequenceStatus::kNoCapacity : AdmitSequenceStatus::kFailed;
        result.failure = lastFailure_ = "admitSequence: " + failure;
        return result;
    }
    try {
        bindRows(seq);
        uploadTables();
        resources_.baseLengths->setEntry(static_cast<int32_t>(s.sequences.size()), seq.reuse);
    } catch (std::exception const& e) {
        clearRows(seq.resident.slot);
        try {
            uploadTables();
        } catch (...) {
            poisoned_ = true;
        }
        result.failure = lastFailure_ = std::string("admitSequence: binding the row failed: ") + e.what();
        return result;
    }
    residentEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
    lastEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
    countAdmission(seq);
    result.status = AdmitSequenceStatus::kAdmitted;
    result.prefillStart = seq.reuse;
    s.joiner = std::move(seq);
    s.devicePending = true;
    return result;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::finalizeSequenceAdmission(
    RequestHandle& request, int32_t row, ContextCacheSequenceAdvance const& advance) {
    char const* op = "finalizeSequenceAdmission";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kExecuting});
    if (!s.joiner) contract(op, "no joiner is pending");
    if (row != static_cast<int32_t>(s.sequences.size()))
        contract(op,
                 "the joiner is seated at row " + str(static_cast<int64_t>(s.sequences.size())) + ", not " + str(row));
    checkPrefillAdvance(op, s.contract, *s.joiner, advance, "the joiner's advance");
    SequenceState& seq = *s.joiner;
    appendTokens(seq, advance.acceptedTokenIds, advance.acceptedTokenCount);
    seq.committed = seq.common = advance.committedStateLength;
    publishBase(seq, seq.committed);
    s.prefillStarts.push_back(seq.reuse);
    s.sequences.push_back(std::move(seq));
    s.joiner.reset();
    return Status::kOk;
}

bool ContextCacheCoordinator::retractSequenceAdmission(RequestHandle& request) noexcept {
    RequestState* s = request.state_.get();
    if (!s || s->owner != this || !s->joiner) return false;
    try {
        clearRows(s->joiner->resident.slot);
        uploadTables();
        resources_.baseLengths->truncate(static_cast<int32_t>(s->sequences.size()));
    } catch (...) {
        poisoned_ = true;
        lastFailure_ = "retractSequenceAdmission: clearing the joiner's row failed";
        return false;
    }
    residentEpochs_[static_cast<size_t>(s->joiner->resident.slot)] = 0;
    s->joiner.reset();
    return true;
}

}  // namespace ctxcache::runtime
