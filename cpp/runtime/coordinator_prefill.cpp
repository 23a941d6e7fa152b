// ContextCacheCoordinator, prefill and publication: binding page-table rows, restoring (or zeroing) recurrent
// state and partial-KV snapshots, setting the device KV lengths to the reuse lengths, staging hybrid checkpoint
// captures, and publishing at prefill end (base blocks, staged checkpoints, EAGLE endpoints frozen until the
// first completed round); the Hybrid+MTP endpoint (capture, one synchronisation, paired publication) and the
// boundary hidden row's restore. publishBase and publishStaged also serve decode-end publication. Every
// publication carries the sequence's retention (SequenceState::retention, set at admission).
// Contract: include/ctxcache/runtime/context_cache_coordinator.h (preparePrefill, enqueuePrefillCaptures,
// finalizePrefillPublication, publishHybridMtpEndpoint, restoreHybridMtpBoundaryHidden).
// Threading: the coordinator's single-writer contract; publishHybridMtpEndpoint synchronises the request's
// stream once, every other call only enqueues device work.
#include <algorithm>
#include <string>

#include "coordinator_internal.h"
#include "ctxcache/runtime/context_cache_coordinator.h"

namespace ctxcache::runtime {

// ---- prefill ----------------------------------------------------------------------------------------------

void ContextCacheCoordinator::bindRows(SequenceState const& seq) {
    int32_t const slot = seq.resident.slot;
    if (profile_.hasAttention()) {
        auto const& pages = seq.lease.basePages();
        resources_.basePageTable->setRow(slot, pages.data(), static_cast<int32_t>(pages.size()));
    }
    if (profile_.ownsPagedSpecState()) {
        auto const& pages = seq.lease.draftPages();
        resources_.draftPageTable->setRow(slot, pages.data(), static_cast<int32_t>(pages.size()));
    }
}

void ContextCacheCoordinator::clearRows(int32_t slot) {
    if (profile_.hasAttention()) resources_.basePageTable->clearRow(slot);
    if (profile_.ownsPagedSpecState()) resources_.draftPageTable->clearRow(slot);
}

void ContextCacheCoordinator::uploadTables() {
    if (profile_.hasAttention()) resources_.basePageTable->upload();
    if (profile_.ownsPagedSpecState()) resources_.draftPageTable->upload();
}

void ContextCacheCoordinator::restoreOrZero(SequenceState const& seq) {
    int32_t const slot = seq.resident.slot;
    std::optional<int32_t> const recurrent = seq.lease.recurrentSnapshotSlot();
    if (!recurrent) {
        resources_.residentState->zeroSlot(slot);
        return;
    }
    device::SnapshotTransfer t;
    t.batchSlot = slot;
    t.recurrentSlot = *recurrent;
    if (std::optional<int32_t> partial = seq.lease.partialKvSnapshotSlot()) {
        t.partialKvSlot = *partial;
        if (seq.lease.mode() == ReusePlanMode::kHybridMtp) {
            // The paired page fb = floor((E - 1) / P): base tokens [fb P, E), the draft's one fewer (restored too;
            // the engine recomputes the draft at E - 1 before anything reads it).
            size_t const fb = static_cast<size_t>((seq.reuse - 1) / pageSize_);
            t.basePage = seq.lease.basePages()[fb];
            t.draftPage = seq.lease.draftPages()[fb];
            t.validTokens = seq.reuse - static_cast<int32_t>(fb) * pageSize_;
        } else {
            t.basePage = seq.lease.basePages()[static_cast<size_t>(seq.reuse / pageSize_)];
            t.validTokens = seq.reuse % pageSize_;
        }
    }
    resources_.snapshots->restore(t);
    ++counters_.hybridRestores;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::preparePrefill(RequestHandle& request) {
    char const* op = "preparePrefill";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kAdmitted});
    for (SequenceState const& seq : s.sequences) bindRows(seq);
    uploadTables();
    if (profile_.usesCheckpointReuse())
        for (SequenceState const& seq : s.sequences) restoreOrZero(seq);
    std::vector<int32_t> lengths;
    lengths.reserve(s.sequences.size());
    for (SequenceState const& seq : s.sequences) lengths.push_back(seq.reuse);
    if (profile_.hasAttention()) resources_.baseLengths->set(lengths.data(), static_cast<int32_t>(lengths.size()));
    if (profile_.ownsPagedSpecState()) {
        // Hybrid+MTP: the draft KV of a checkpoint at E ends at E - 1 (its boundary position is recomputed).
        if (profile_.isHybridMtp())
            for (int32_t& length : lengths) length = std::max(0, length - 1);
        resources_.draftLengths->set(lengths.data(), static_cast<int32_t>(lengths.size()));
    }
    s.devicePending = true;
    s.phase = Phase::kPrefillPrepared;
    return Status::kOk;
}

bool ContextCacheCoordinator::stageCapture(SequenceState& seq, int32_t length) {
    bool const partial = profile_.hasAttention() && length % pageSize_ != 0;
    std::optional<HybridSnapshotReservation> reservation = manager_.reserveHybridSnapshots(seq.lease, partial);
    if (!reservation) {
        ++counters_.hybridSnapshotPressureSkips;
        return false;
    }
    device::SnapshotTransfer t;
    t.batchSlot = seq.resident.slot;
    t.recurrentSlot = reservation->recurrentSnapshotSlot;
    if (reservation->partialKvSnapshotSlot) {
        t.partialKvSlot = *reservation->partialKvSnapshotSlot;
        t.basePage = seq.lease.basePages()[static_cast<size_t>(length / pageSize_)];
        t.validTokens = length % pageSize_;
    }
    try {
        resources_.snapshots->capture(t);
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, *reservation);
        throw;
    }
    seq.staged = StagedCheckpoint{*reservation, length, exactDigest(seq, hasher_, pageSize_, length)};
    return true;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::enqueuePrefillCaptures(RequestHandle& request) {
    char const* op = "enqueuePrefillCaptures";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kPrefillPrepared});
    // Hybrid+MTP captures only at its endpoint (publishHybridMtpEndpoint).
    if (profile_.usesCheckpointReuse() && !profile_.isHybridMtp()) {
        for (SequenceState& seq : s.sequences)
            if (!seq.bypass) stageCapture(seq, seq.inputLength);
        s.devicePending = true;
    }
    s.phase = Phase::kPrefillCaptured;
    return Status::kOk;
}

// Validates a prefill advance (throws) for a sequence whose committed length must become its input length.
void checkPrefillAdvance(char const* op, DecodingTokenStateContract contract_, SequenceState const& seq,
                         ContextCacheSequenceAdvance const& a, std::string const& where) {
    if (contract_ == DecodingTokenStateContract::kCommittedPlusLookahead) {
        if (a.acceptedTokenCount != 1 || !a.acceptedTokenIds)
            contract(op, where +
                             " must carry exactly one sampled lookahead token (committed+lookahead contract), got " +
                             str(a.acceptedTokenCount));
    } else if (a.acceptedTokenCount != 0) {
        contract(op,
                 where + " must carry no token under the fully-committed contract, got " + str(a.acceptedTokenCount));
    }
    if (a.committedStateLength != seq.inputLength)
        contract(op, where + " committed length " + str(a.committedStateLength) + " must equal the input length " +
                         str(seq.inputLength));
}

void ContextCacheCoordinator::publishBase(SequenceState& seq, int32_t length) {
    int32_t const blocks = length / pageSize_;
    if (seq.bypass || blocks <= seq.published || blocks == 0) return;
    extendHashes(seq, hasher_, pageSize_, length);
    ++counters_.publicationAttempts;
    PublishResult const r = manager_.publish(
        seq.lease,
        {{seq.hashes.data(), static_cast<size_t>(blocks)}, length, seq.tokens, seq.eventKeys(), seq.retentionSpec()});
    if (r.status == PublishStatus::kPublished) ++counters_.committedPublications;
    else ++counters_.existingPublications;
    ++counters_.publishedEndpoints;
    if (seq.lease.mode() == ReusePlanMode::kSpec) ++counters_.specPairPublications;
    seq.published = blocks;
}

void ContextCacheCoordinator::publishStaged(SequenceState& seq) {
    if (!seq.staged) return;
    StagedCheckpoint const staged = *seq.staged;
    seq.staged.reset();
    extendHashes(seq, hasher_, pageSize_, staged.length);
    size_t const blocks = static_cast<size_t>(staged.length / pageSize_);
    ++counters_.publicationAttempts;
    try {
        PublishResult const r = manager_.publishHybrid(seq.lease, {{seq.hashes.data(), blocks},
                                                                   {staged.digest, staged.length},
                                                                   staged.reservation,
                                                                   seq.tokens,
                                                                   seq.eventKeys(),
                                                                   seq.retentionSpec()});
        if (r.status == PublishStatus::kPublished) ++counters_.committedPublications;
        else ++counters_.existingPublications;
        ++counters_.publishedEndpoints;
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
        throw;
    }
    manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
}

void ContextCacheCoordinator::publishPrefillEnd(RequestState& s, SequenceState& seq) {
    if (profile_.usesCheckpointReuse()) {
        manager_.releaseRestoredHybridSnapshots(seq.lease);
        publishStaged(seq);
    } else if (seq.lease.mode() == ReusePlanMode::kSpec) {
        if (!seq.bypass) seq.frozenEndpoint = seq.committed;
    } else {
        publishBase(seq, seq.committed);
    }
    (void)s;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::finalizePrefillPublication(
    RequestHandle& request, std::vector<ContextCacheSequenceAdvance> const& advances,
    std::vector<int32_t> const* commonStateLengths) {
    char const* op = "finalizePrefillPublication";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kPrefillPrepared, Phase::kPrefillCaptured});
    if (advances.size() != s.sequences.size())
        contract(op, str(static_cast<int64_t>(advances.size())) + " advances for a batch of " +
                         str(static_cast<int64_t>(s.sequences.size())));
    if (s.pagedSpec && !commonStateLengths)
        contract(op, "a speculative request needs the common materialized state lengths");
    if (commonStateLengths && commonStateLengths->size() != s.sequences.size())
        contract(op, "commonStateLengths has " + str(static_cast<int64_t>(commonStateLengths->size())) + " entries");
    for (size_t i = 0; i < advances.size(); ++i) {
        std::string const where = "advances[" + str(static_cast<int64_t>(i)) + "]";
        checkPrefillAdvance(op, s.contract, s.sequences[i], advances[i], where);
        if (commonStateLengths) {
            int32_t const common = (*commonStateLengths)[i];
            if (s.pagedSpec ? common != advances[i].committedStateLength
                            : (common < 0 || common > advances[i].committedStateLength))
                contract(op, "commonStateLengths[" + str(static_cast<int64_t>(i)) + "] = " + str(common) +
                                 " must equal the committed length " + str(advances[i].committedStateLength));
        }
    }
    if (s.phase == Phase::kPrefillPrepared && profile_.usesCheckpointReuse())
        contract(op, "a checkpoint deployment must enqueue its prefill captures first");
    for (size_t i = 0; i < advances.size(); ++i) {
        SequenceState& seq = s.sequences[i];
        appendTokens(seq, advances[i].acceptedTokenIds, advances[i].acceptedTokenCount);
        seq.committed = advances[i].committedStateLength;
        seq.common = commonStateLengths ? (*commonStateLengths)[i] : seq.committed;
    }
    for (SequenceState& seq : s.sequences) publishPrefillEnd(s, seq);
    s.phase = Phase::kExecuting;
    return Status::kOk;
}

// ---- Hybrid+MTP endpoint ---------------------------------------------------------------------------------

namespace {

// The preamble of the two Hybrid+MTP endpoint calls, once the request is live and not quarantined: the deployment
// has Hybrid+MTP reuse, the request is in prefill and `row` is one of its sequences (ContractError otherwise).
SequenceState& hybridMtpRow(char const* op, ContextCacheDeploymentProfile const& profile,
                            ContextCacheCoordinator::RequestState& s, int32_t row) {
    if (!profile.isHybridMtp())
        contract(op, "the deployment has no Hybrid+MTP reuse (a hybrid profile with an MTP head)");
    requirePhase(op, s, {Phase::kPrefillPrepared, Phase::kPrefillCaptured});
    if (row < 0 || static_cast<size_t>(row) >= s.sequences.size()) contract(op, "row " + str(row) + " is out of range");
    return s.sequences[static_cast<size_t>(row)];
}

}  // namespace

// The address of row `row` of an fp16 [rows, hiddenSize] tensor on the coordinator's backend (throws).
char* ContextCacheCoordinator::hiddenRowOf(char const* op, TensorView const& tensor, int32_t row) const {
    int32_t const hidden = resources_.residentState->geometry().hiddenSize;
    if (!tensor.data) contract(op, "baseHiddenStates has no data");
    if (tensor.dtype != ScalarType::kFp16) contract(op, "baseHiddenStates must be fp16 (the boundary row's type)");
    if (tensor.shape.size() != 2 || tensor.shape[1] != hidden)
        contract(op, "baseHiddenStates must be [rows, " + str(hidden) + "] (the model's hidden size)");
    if (row < 0 || row >= tensor.shape[0])
        contract(op, "hidden row " + str(row) + " is outside [0, " + str(tensor.shape[0]) + ")");
    bool const onDevice = resources_.residentState->backend().kind() == device::BackendKind::kCuda;
    if (onDevice != (tensor.device >= 0))
        contract(op, std::string("baseHiddenStates must be ") + (onDevice ? "device" : "host") +
                         " memory (the coordinator's backend)");
    return static_cast<char*>(tensor.data) + static_cast<size_t>(row) * static_cast<size_t>(hidden) * 2;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::publishHybridMtpEndpoint(RequestHandle& request, int32_t row,
                                                                                int32_t residentStateLength,
                                                                                TensorView const& baseHiddenStates,
                                                                                int32_t boundaryHiddenRow) {
    char const* op = "publishHybridMtpEndpoint";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    SequenceState& seq = hybridMtpRow(op, profile_, s, row);
    int32_t const E = residentStateLength;
    if (E < 1 || E > seq.inputLength || E < seq.reuse)
        contract(op, "residentStateLength " + str(E) + " must lie in [max(1, prefill start " + str(seq.reuse) +
                         "), input length " + str(seq.inputLength) + "]");
    char* const source = hiddenRowOf(op, baseHiddenStates, boundaryHiddenRow);
    if (seq.bypass) return Status::kOk;  // nothing is published for a bypassed sequence
    device::ResidentState& state = *resources_.residentState;
    std::optional<HybridSnapshotReservation> reservation = manager_.reserveHybridSnapshots(seq.lease, true);
    if (!reservation) {
        ++counters_.hybridSnapshotPressureSkips;
        return Status::kOk;
    }
    int32_t const fb = (E - 1) / pageSize_;
    device::SnapshotTransfer t;
    t.batchSlot = seq.resident.slot;
    t.recurrentSlot = reservation->recurrentSnapshotSlot;
    t.partialKvSlot = reservation->partialKvSnapshotSlot.value_or(-1);
    t.basePage = seq.lease.basePages()[static_cast<size_t>(fb)];
    t.draftPage = seq.lease.draftPages()[static_cast<size_t>(fb)];
    t.validTokens = E - fb * pageSize_;
    try {
        state.backend().copy(state.row(device::StatePart::kBoundaryHidden, 0, seq.resident.slot), source,
                             state.rowBytes(device::StatePart::kBoundaryHidden));
        resources_.snapshots->capture(t);
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, *reservation);
        throw;
    }
    extendHashes(seq, hasher_, pageSize_, E);
    seq.staged = StagedCheckpoint{*reservation, E, exactDigest(seq, hasher_, pageSize_, E)};
    s.devicePending = true;
    ++counters_.hybridCaptureSynchronizations;
    if (!synchronize(s)) return quarantineLive(request, std::string(op) + ": the capture synchronisation failed");
    StagedCheckpoint const staged = *seq.staged;
    seq.staged.reset();
    ++counters_.publicationAttempts;
    try {
        PublishResult const r = manager_.publishHybridMtp(seq.lease, {{seq.hashes.data(), static_cast<size_t>(fb)},
                                                                      {staged.digest, staged.length},
                                                                      staged.reservation,
                                                                      seq.tokens,
                                                                      seq.eventKeys(),
                                                                      seq.retentionSpec()});
        if (r.status == PublishStatus::kPublished) ++counters_.committedPublications;
        else ++counters_.existingPublications;
        ++counters_.publishedEndpoints;
        ++counters_.specPairPublications;
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
        throw;
    }
    manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
    return Status::kOk;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::restoreHybridMtpBoundaryHidden(RequestHandle& request,
                                                                                      int32_t row,
                                                                                      TensorView& baseHiddenStates,
                                                                                      int32_t destinationRow) {
    char const* op = "restoreHybridMtpBoundaryHidden";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    SequenceState const& seq = hybridMtpRow(op, profile_, s, row);
    if (seq.reuse == 0) contract(op, "row " + str(row) + " restored no checkpoint (its prefill starts at 0)");
    char* const destination = hiddenRowOf(op, baseHiddenStates, destinationRow);
    device::ResidentState& state = *resources_.residentState;
    state.backend().copy(destination, state.row(device::StatePart::kBoundaryHidden, 0, seq.resident.slot),
                         state.rowBytes(device::StatePart::kBoundaryHidden));
    s.devicePending = true;
    return Status::kOk;
}

}  // namespace ctxcache::runtime
