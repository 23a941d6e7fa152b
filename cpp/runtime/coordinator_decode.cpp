// ContextCacheCoordinator, decode and compaction: growing every running row to committed + headroom (and the
// read-only test of whether that growth fits), applying a step's advances with decode-end publication, flushing
// EAGLE frozen endpoints, and the two-step batch compaction (validate and copy the map; then clear, compact,
// synchronise and release the retired rows). Contract: include/ctxcache/runtime/context_cache_coordinator.h
// (prepareDecodeStep, canPrepareDecodeStep, completeDecodeStep, beginBatchCompaction, compactBatch).
// Threading: the coordinator's single-writer contract; completeDecodeStep (a hybrid capture), beginBatchCompaction
// (frozen endpoints) and compactBatch synchronise the request's stream.
#include <algorithm>
#include <string>
#include <utility>

#include "coordinator_internal.h"
#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/runtime/context_cache_coordinator.h"

namespace ctxcache::runtime {

// ---- decode -----------------------------------------------------------------------------------------------

ContextCacheCoordinatorStatus ContextCacheCoordinator::failRequest(RequestState& s, std::string why) {
    s.phase = Phase::kFinishing;
    lastFailure_ = std::move(why);
    return Status::kRequestFailed;
}

// The pages that cover `seq` to committed + headroom still needs (base, and draft for a paired lease), and whether
// that coverage fits the page table. One definition for coverRow and canPrepareDecodeStep.
ResourceDemand ContextCacheCoordinator::coverDemand(SequenceState const& seq, DecodingKvHeadroom const& headroom,
                                                    bool& fitsTable) const {
    fitsTable = true;
    ResourceDemand demand;
    if (!profile_.hasAttention()) return demand;
    int32_t const base = ceilDiv(static_cast<int64_t>(seq.committed) + headroom.baseExtraTokens, pageSize_);
    bool const paired = seq.lease.mode() == ReusePlanMode::kSpec || seq.lease.mode() == ReusePlanMode::kHybridMtp;
    int32_t const draft =
        paired ? ceilDiv(static_cast<int64_t>(seq.committed) + headroom.draftExtraTokens, pageSize_) : 0;
    int32_t const haveBase = static_cast<int32_t>(seq.lease.basePages().size());
    int32_t const haveDraft = static_cast<int32_t>(seq.lease.draftPages().size());
    if (base <= haveBase && draft <= haveDraft) return demand;
    if (base > resources_.basePageTable->maxPagesPerSeq() ||
        (draft > 0 && draft > resources_.draftPageTable->maxPagesPerSeq()))
        fitsTable = false;
    demand.baseKvPages = std::max(0, base - haveBase);
    demand.draftKvPages = paired ? std::max(0, draft - haveDraft) : 0;
    return demand;
}

bool ContextCacheCoordinator::coverRow(SequenceState& seq, DecodingKvHeadroom const& headroom, std::string& why) {
    bool fitsTable = true;
    ResourceDemand const demand = coverDemand(seq, headroom, fitsTable);
    if (demand.isZero()) return true;
    int32_t const base = static_cast<int32_t>(seq.lease.basePages().size()) + demand.baseKvPages;
    if (!fitsTable) {
        why = "resident slot " + str(seq.resident.slot) + " needs " + str(base) + " pages, beyond the page table";
        return false;
    }
    bool const paired = seq.lease.mode() == ReusePlanMode::kSpec || seq.lease.mode() == ReusePlanMode::kHybridMtp;
    bool grown = paired ? manager_.growSpecPages(seq.lease, demand.baseKvPages, demand.draftKvPages)
                        : manager_.growBasePages(seq.lease, demand.baseKvPages);
    if (!grown) {
        why = "insufficient capacity to grow resident slot " + str(seq.resident.slot) + " to " + str(base) + " pages";
        return false;
    }
    bindRows(seq);
    return true;
}

bool ContextCacheCoordinator::canPrepareDecodeStep(RequestHandle const& request,
                                                   DecodingKvHeadroom const& headroom) const {
    RequestState const* s = request.state_.get();
    if (!s || s->owner != this || s->phase != Phase::kExecuting || s->joiner) return false;
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) return false;
    ResourceDemand total;
    for (SequenceState const& seq : s->sequences) {
        if (seq.completed) continue;
        bool fitsTable = true;
        ResourceDemand const d = coverDemand(seq, headroom, fitsTable);
        if (!fitsTable) return false;
        total.baseKvPages += d.baseKvPages;
        total.draftKvPages += d.draftKvPages;
    }
    return total.isZero() || manager_.pools().canAllocateOnceReclaimed(total);
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::prepareDecodeStep(RequestHandle& request,
                                                                         DecodingKvHeadroom const& headroom) {
    char const* op = "prepareDecodeStep";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    if (s.phase == Phase::kFinishing) {
        lastFailure_ = "prepareDecodeStep: the request is finishing";
        return Status::kRequestFailed;
    }
    requirePhase(op, s, {Phase::kExecuting});
    if (s.joiner) contract(op, "a joiner is admitted but not yet finalized or retracted");
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) contract(op, "headroom is negative");
    std::string why;
    for (SequenceState& seq : s.sequences) {
        if (seq.completed) continue;
        if (!coverRow(seq, headroom, why)) {
            uploadTables();
            return failRequest(s, "prepareDecodeStep: " + why);
        }
    }
    uploadTables();
    s.devicePending = true;
    return Status::kOk;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::completeDecodeStep(
    RequestHandle& request, std::vector<ContextCacheSequenceAdvance> const& advances,
    std::vector<int32_t> const& publishableRows, std::vector<int32_t> const* commonStateLengths) {
    char const* op = "completeDecodeStep";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kExecuting, Phase::kFinishing});
    if (s.joiner) contract(op, "a joiner is admitted but not yet finalized or retracted");
    size_t const batch = s.sequences.size();
    if (advances.size() != batch)
        contract(op, str(static_cast<int64_t>(advances.size())) + " advances for a batch of " +
                         str(static_cast<int64_t>(batch)));
    if (s.pagedSpec && !commonStateLengths) contract(op, "a speculative request needs the common state lengths");
    if (commonStateLengths && commonStateLengths->size() != batch)
        contract(op, "commonStateLengths has " + str(static_cast<int64_t>(commonStateLengths->size())) + " entries");
    int32_t const lookahead = s.contract == DecodingTokenStateContract::kCommittedPlusLookahead ? 1 : 0;
    std::vector<uint8_t> held(batch, 0);
    for (size_t i = 0; i < batch; ++i) {
        SequenceState const& seq = s.sequences[i];
        ContextCacheSequenceAdvance const& a = advances[i];
        std::string const where = "advances[" + str(static_cast<int64_t>(i)) + "]";
        if (a.acceptedTokenCount == 0 &&
            a.committedStateLength == ContextCacheSequenceAdvance::kHoldCommittedStateLength) {
            held[i] = 1;
            continue;
        }
        if (seq.completed) contract(op, where + ": the row already completed; it may only hold");
        if (a.acceptedTokenCount < 1 || !a.acceptedTokenIds)
            contract(op, where + " must accept at least one token (or hold with 0 tokens and the hold sentinel)");
        if (!s.speculative && a.acceptedTokenCount != 1)
            contract(op,
                     where + " accepts " + str(a.acceptedTokenCount) + " tokens; a non-speculative step accepts one");
        int64_t const expected = static_cast<int64_t>(seq.committed) + a.acceptedTokenCount;
        if (a.committedStateLength != expected)
            contract(op, where + " committed length " + str(a.committedStateLength) +
                             " breaks the token-state contract "
                             "(expected " +
                             str(expected) + ")");
        int64_t const history = static_cast<int64_t>(seq.tokens.size()) + a.acceptedTokenCount;
        if (history - lookahead != a.committedStateLength)
            contract(op, where + " leaves a history of " + str(history) + " tokens for committed length " +
                             str(a.committedStateLength));
        if (commonStateLengths) {
            int32_t const common = (*commonStateLengths)[i];
            if (common < seq.common || common > a.committedStateLength)
                contract(op, "commonStateLengths[" + str(static_cast<int64_t>(i)) + "] = " + str(common) +
                                 " must lie in [" + str(seq.common) + ", " + str(a.committedStateLength) + "]");
        }
    }
    std::vector<uint8_t> publish(batch, 0);
    for (int32_t row : publishableRows) {
        if (row < 0 || static_cast<size_t>(row) >= batch)
            contract(op, "publishable row " + str(row) + " is out of range");
        if (publish[static_cast<size_t>(row)]) contract(op, "publishable row " + str(row) + " is listed twice");
        // A held row may be listed: a row that finished in an earlier step publishes at its committed length (the
        // caller lists only normally finished rows, never cancelled or failed ones).
        if (s.sequences[static_cast<size_t>(row)].completed)
            contract(op, "publishable row " + str(row) + " was already published at decode end");
        publish[static_cast<size_t>(row)] = 1;
    }

    // Apply.
    for (size_t i = 0; i < batch; ++i) {
        if (held[i]) continue;
        SequenceState& seq = s.sequences[i];
        appendTokens(seq, advances[i].acceptedTokenIds, advances[i].acceptedTokenCount);
        seq.committed = advances[i].committedStateLength;
        seq.common = commonStateLengths ? (*commonStateLengths)[i] : seq.committed;
    }
    // The first completed round proves the draft initialisation finished: publish the frozen prefill endpoints.
    for (SequenceState& seq : s.sequences) flushFrozen(seq);

    bool const decodeEnd = s.commit == ContextCacheCommitPolicy::kIncludingGeneratedTokens;
    if (decodeEnd && profile_.usesCheckpointReuse()) {
        bool staged = false;
        for (size_t i = 0; i < batch; ++i)
            if (publish[i] && !s.sequences[i].bypass)
                staged = stageCapture(s.sequences[i], s.sequences[i].committed) || staged;
        if (staged) {
            ++counters_.hybridCaptureSynchronizations;
            if (!synchronize(s))
                return quarantineLive(request, "completeDecodeStep: the capture synchronisation failed");
            for (size_t i = 0; i < batch; ++i)
                if (publish[i]) publishStaged(s.sequences[i]);
        }
    } else if (decodeEnd) {
        for (size_t i = 0; i < batch; ++i) {
            if (!publish[i]) continue;
            SequenceState& seq = s.sequences[i];
            publishBase(seq, seq.lease.mode() == ReusePlanMode::kSpec ? seq.common : seq.committed);
        }
    }
    for (size_t i = 0; i < batch; ++i)
        if (publish[i]) s.sequences[i].completed = true;
    return Status::kOk;
}

void ContextCacheCoordinator::flushFrozen(SequenceState& seq) {
    if (!seq.frozenEndpoint) return;
    int32_t const endpoint = *seq.frozenEndpoint;
    seq.frozenEndpoint.reset();
    publishBase(seq, endpoint);
}

// Publish EAGLE frozen endpoints after a synchronisation proves the draft initialisation complete.
ContextCacheCoordinatorStatus ContextCacheCoordinator::terminalize(RequestHandle& request, RequestState& s,
                                                                   char const* op) {
    bool frozen = false;
    for (SequenceState const& seq : s.sequences) frozen = frozen || seq.frozenEndpoint.has_value();
    if (!frozen) return Status::kOk;
    if (!synchronize(s)) return quarantineLive(request, std::string(op) + ": the synchronisation failed");
    for (SequenceState& seq : s.sequences) flushFrozen(seq);
    return Status::kOk;
}

// ---- compaction -------------------------------------------------------------------------------------------

ContextCacheCoordinatorStatus ContextCacheCoordinator::beginBatchCompaction(RequestHandle& request,
                                                                            std::vector<int32_t> const& oldToNew,
                                                                            int32_t newBatchSize,
                                                                            TensorView& deviceBatchMapping) {
    char const* op = "beginBatchCompaction";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kExecuting, Phase::kFinishing});
    if (s.joiner) contract(op, "a joiner is admitted but not yet finalized or retracted");
    int32_t const batch = static_cast<int32_t>(s.sequences.size());
    if (static_cast<int32_t>(oldToNew.size()) != batch)
        contract(op,
                 "the map has " + str(static_cast<int64_t>(oldToNew.size())) + " entries for a batch of " + str(batch));
    std::vector<device::RowMove> moves;
    device::planCompaction("ContextCacheCoordinator::beginBatchCompaction", oldToNew.data(), batch, newBatchSize,
                           moves);
    for (SequenceState const& seq : s.sequences)
        if (seq.staged) contract(op, "a hybrid capture is staged and not yet published");
    if (deviceBatchMapping.data) {
        if (deviceBatchMapping.dtype != ScalarType::kInt32) contract(op, "deviceBatchMapping must be int32");
        if (deviceBatchMapping.elementCount() < batch)
            contract(op, "deviceBatchMapping holds " + str(deviceBatchMapping.elementCount()) + " entries, needs " +
                             str(batch));
    }
    Status const t = terminalize(request, s, op);
    if (t != Status::kOk) return t;
    if (deviceBatchMapping.data && batch > 0) {
        device::DeviceBackend& backend =
            profile_.hasAttention() ? resources_.basePool->backend() : resources_.residentState->backend();
        backend.upload(deviceBatchMapping.data, oldToNew.data(), static_cast<size_t>(batch) * sizeof(int32_t));
        s.devicePending = true;
    }
    s.pendingMap = oldToNew;
    s.pendingNewBatch = newBatchSize;
    s.phase = Phase::kCompactionPending;
    return Status::kOk;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::compactBatch(RequestHandle& request) {
    char const* op = "compactBatch";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kCompactionPending});
    int32_t const oldBatch = static_cast<int32_t>(s.sequences.size());
    for (int32_t i = 0; i < oldBatch; ++i)
        if (s.pendingMap[static_cast<size_t>(i)] < 0) {
            int32_t const slot = s.sequences[static_cast<size_t>(i)].resident.slot;
            clearRows(slot);
            if (profile_.usesCheckpointReuse()) resources_.residentState->zeroSlot(slot);
        }
    uploadTables();
    if (profile_.hasAttention()) resources_.baseLengths->compact(s.pendingMap.data(), oldBatch, s.pendingNewBatch);
    if (profile_.ownsPagedSpecState())
        resources_.draftLengths->compact(s.pendingMap.data(), oldBatch, s.pendingNewBatch);
    s.devicePending = true;
    if (!synchronize(s)) return quarantineLive(request, "compactBatch: the synchronisation failed");
    std::vector<SequenceState> survivors;
    std::vector<int32_t> starts;
    survivors.reserve(static_cast<size_t>(s.pendingNewBatch));
    for (int32_t i = 0; i < oldBatch; ++i) {
        SequenceState& seq = s.sequences[static_cast<size_t>(i)];
        if (s.pendingMap[static_cast<size_t>(i)] < 0) {
            residentEpochs_[static_cast<size_t>(seq.resident.slot)] = 0;
            continue;  // the lease releases when `seq` goes below
        }
        starts.push_back(s.prefillStarts[static_cast<size_t>(i)]);
        survivors.push_back(std::move(seq));
    }
    s.sequences = std::move(survivors);
    s.prefillStarts = std::move(starts);
    s.pendingMap.clear();
    s.phase = s.sequences.empty() ? Phase::kFinishing : Phase::kExecuting;
    return Status::kOk;
}

}  // namespace ctxcache::runtime
