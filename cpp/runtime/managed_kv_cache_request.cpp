// ManagedKVCacheRequest: backend selection and forwarding. Contract: include/ctxcache/runtime/
// managed_kv_cache_request.h.
#include "ctxcache/runtime/managed_kv_cache_request.h"

#include <string>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"

namespace ctxcache::runtime {

namespace {
using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{"ManagedKVCacheRequest"};
}  // namespace

std::optional<ManagedKVCacheRequest> ManagedKVCacheRequest::begin(
    ContextCacheCoordinator* contextCache, BoundedSwaKVPageManager* swaPageManager, GenerationRequest const& request,
    DecodingInferenceContext const& context, bool speculativeRequest, DecodingKvHeadroom const& headroom,
    DecodingTokenStateContract tokenStateContract, ContextCacheCommitPolicy commitPolicy,
    std::vector<int32_t> const& mediaTokenIds, StreamHandle stream) {
    if ((contextCache == nullptr) == (swaPageManager == nullptr))
        contract("begin", "exactly one backend (context cache or bounded SWA) must be given");
    if (swaPageManager) {
        if (speculativeRequest) contract("begin", "the bounded-SWA backend serves non-speculative requests only");
        if (tokenStateContract != DecodingTokenStateContract::kCommittedPlusLookahead)
            contract("begin", "the bounded-SWA backend needs the committed+lookahead token-state contract");
        if (headroom.baseExtraTokens != 1 || headroom.draftExtraTokens != 0)
            contract("begin", "the bounded-SWA backend needs headroom {1, 0}, got {" + str(headroom.baseExtraTokens) +
                                  ", " + str(headroom.draftExtraTokens) + "}");
        size_t const batch = static_cast<size_t>(context.activeBatchSize);
        if (context.activeBatchSize <= 0 || request.sequences.size() != batch || context.residentRefs.size() != batch)
            contract("begin", "the bounded-SWA backend needs one raw input and one resident ref per active sequence (" +
                                  str(static_cast<int64_t>(request.sequences.size())) + " inputs, " +
                                  str(static_cast<int64_t>(context.residentRefs.size())) + " refs, batch " +
                                  str(context.activeBatchSize) + ")");
        BoundedSwaKVPageManager::BeginRequestResult r = swaPageManager->beginRequest(context.residentRefs, stream);
        if (r.status != SwaKVCacheStatus::kOk) return std::nullopt;
        SwaBackend swa;
        swa.manager = swaPageManager;
        swa.handle = std::move(*r.request);
        return ManagedKVCacheRequest(std::move(swa));
    }
    std::optional<ContextCacheRequest> r =
        ContextCacheRequest::begin(*contextCache, request, context, speculativeRequest, headroom, mediaTokenIds,
                                   tokenStateContract, commitPolicy, stream);
    if (!r) return std::nullopt;
    return ManagedKVCacheRequest(std::move(*r));
}

ContextCacheRequest& ManagedKVCacheRequest::requireContext(char const* op) {
    if (ContextCacheRequest* c = context()) return *c;
    contract(op, "this request has no context-reuse backend");
}

ContextCacheRequest const& ManagedKVCacheRequest::requireContext(char const* op) const {
    if (ContextCacheRequest const* c = context()) return *c;
    contract(op, "this request has no context-reuse backend");
}

BoundedSwaKVPageManager::RequestHandle* ManagedKVCacheRequest::swaRequest() noexcept {
    SwaBackend* s = swa();
    return s ? &s->handle : nullptr;
}

bool ManagedKVCacheRequest::swaCheck(SwaKVCacheStatus status) {
    SwaBackend& s = *swa();
    if (status == SwaKVCacheStatus::kOk) return true;
    s.lastError = s.manager->lastFailure();
    return false;
}

// Every row's history is its KV endpoint (after the pending step, when one is prepared and prepareStep is false)
// plus the lookahead token.
void ManagedKVCacheRequest::checkSwaContext(char const* op, DecodingInferenceContext const& context, bool prepareStep) {
    SwaBackend& s = *swa();
    if (!s.handle.valid()) return;  // quarantined: the manager answers kPoisoned
    int32_t const batch = s.handle.batchSize();
    if (context.activeBatchSize != batch || context.tokenIds.size() != static_cast<size_t>(batch))
        contract(op, "the context holds " + str(context.activeBatchSize) + " rows (" +
                         str(static_cast<int64_t>(context.tokenIds.size())) + " histories), the request " + str(batch));
    if (prepareStep && context.status.size() != static_cast<size_t>(batch))
        contract(op, "the context has no status per row");
    for (int32_t i = 0; i < batch; ++i) {
        SwaKVCacheState const& w = s.manager->state(s.handle, i);
        int32_t const endpoint =
            prepareStep ? w.exactResidentTokenCount : w.pendingEndpoint.value_or(w.exactResidentTokenCount);
        int64_t const history = static_cast<int64_t>(context.tokenIds[static_cast<size_t>(i)].size);
        if (history != static_cast<int64_t>(endpoint) + 1)
            contract(op, "row " + str(i) + " has " + str(history) + " tokens; its KV endpoint is " + str(endpoint) +
                             " (committed+lookahead: an advance writes exactly the tokens it adds, none skipped)");
    }
}

std::vector<int32_t> const* ManagedKVCacheRequest::prefillStarts() const noexcept {
    ContextCacheRequest const* c = context();
    return c ? c->prefillStarts() : nullptr;
}

int32_t ManagedKVCacheRequest::reuseTokenLength(int32_t slot) const {
    return requireContext("reuseTokenLength").reuseTokenLength(slot);
}

bool ManagedKVCacheRequest::publishHybridMtpEndpoint(int32_t slot, int32_t residentStateLength,
                                                     TensorView const& baseHiddenStates, int32_t boundaryHiddenRow) {
    return requireContext("publishHybridMtpEndpoint")
        .publishHybridMtpEndpoint(slot, residentStateLength, baseHiddenStates, boundaryHiddenRow);
}

bool ManagedKVCacheRequest::restoreHybridMtpBoundaryHidden(int32_t slot, TensorView& baseHiddenStates,
                                                           int32_t destinationRow) {
    return requireContext("restoreHybridMtpBoundaryHidden")
        .restoreHybridMtpBoundaryHidden(slot, baseHiddenStates, destinationRow);
}

bool ManagedKVCacheRequest::preparePrefill() {
    ContextCacheRequest* c = context();
    return c ? c->preparePrefill() : true;
}

bool ManagedKVCacheRequest::prepareSwaPrefill(std::vector<int32_t> const& effectiveInputLengths) {
    SwaBackend* s = swa();
    if (!s) return true;  // a no-op on the context-reuse backend
    if (s->prefillPending) {
        // The next chunk: the previous one completes first (its retirements after a synchronisation).
        if (!swaCheck(s->manager->completePrefill(s->handle))) return false;
        s->prefillPending = false;
    }
    if (!swaCheck(s->manager->preparePrefill(s->handle, effectiveInputLengths))) return false;
    s->prefillPending = true;
    return true;
}

bool ManagedKVCacheRequest::enqueuePrefillCaptures() {
    ContextCacheRequest* c = context();
    return c ? c->enqueuePrefillCaptures() : true;
}

bool ManagedKVCacheRequest::completePrefill(DecodingInferenceContext const& context,
                                            std::vector<int32_t> const& commonStateLengths) {
    SwaBackend* s = swa();
    if (!s) return requireContext("completePrefill").completePrefill(context, commonStateLengths);
    if (!s->prefillPending) contract("completePrefill", "no prefill chunk was prepared (prepareSwaPrefill)");
    checkSwaContext("completePrefill", context, false);
    s->prefillPending = false;
    return swaCheck(s->manager->completePrefill(s->handle));
}

bool ManagedKVCacheRequest::prepareDecodeStep(DecodingInferenceContext const& context,
                                              DecodingKvHeadroom const& headroom) {
    SwaBackend* s = swa();
    if (!s) return requireContext("prepareDecodeStep").prepareDecodeStep(context, headroom);
    if (headroom.baseExtraTokens != 1 || headroom.draftExtraTokens != 0)
        contract("prepareDecodeStep", "the bounded-SWA backend needs headroom {1, 0}");
    checkSwaContext("prepareDecodeStep", context, true);
    std::vector<int32_t> endpoints;
    if (s->handle.valid()) {
        int32_t const batch = s->handle.batchSize();
        endpoints.reserve(static_cast<size_t>(batch));
        for (int32_t i = 0; i < batch; ++i) {
            int32_t const e = s->manager->state(s->handle, i).exactResidentTokenCount;
            endpoints.push_back(context.status[static_cast<size_t>(i)] == SequenceStatus::kRunning ? e + 1 : e);
        }
    }
    return swaCheck(s->manager->prepareDecodeStep(s->handle, endpoints));
}

bool ManagedKVCacheRequest::completeDecodeStep(DecodingInferenceContext const& context,
                                               std::vector<int32_t> const& commonStateLengths) {
    SwaBackend* s = swa();
    if (!s) return requireContext("completeDecodeStep").completeDecodeStep(context, commonStateLengths);
    checkSwaContext("completeDecodeStep", context, false);
    return swaCheck(s->manager->completeDecodeStep(s->handle));
}

bool ManagedKVCacheRequest::beginBatchCompaction(std::vector<int32_t> const& oldToNew, int32_t newBatchSize,
                                                 TensorView& deviceBatchMapping) {
    SwaBackend* s = swa();
    if (!s)
        return requireContext("beginBatchCompaction").beginBatchCompaction(oldToNew, newBatchSize, deviceBatchMapping);
    if (!swaCheck(s->manager->beginBatchCompaction(s->handle, oldToNew, newBatchSize, deviceBatchMapping)))
        return false;
    s->pendingMap = oldToNew;
    return true;
}

bool ManagedKVCacheRequest::completeBatchCompaction(std::vector<int32_t> const& keepMapping) {
    SwaBackend* s = swa();
    if (!s) return requireContext("completeBatchCompaction").completeBatchCompaction(keepMapping);
    if (s->handle.valid() && keepMapping != s->pendingMap)
        contract("completeBatchCompaction", "keepMapping is not the map given to beginBatchCompaction");
    s->pendingMap.clear();
    return swaCheck(s->manager->compactBatch(s->handle));
}

bool ManagedKVCacheRequest::finish() {
    SwaBackend* s = swa();
    if (!s) return context()->finish();
    s->prefillPending = false;
    return swaCheck(s->manager->finish(s->handle));
}

ContextCacheRequest::AdmitSequenceStatus ManagedKVCacheRequest::admitSequence(
    std::vector<int32_t> const& tokenIds, std::string const& loraWeightsName, DecodingKvHeadroom const& headroom,
    int32_t& prefillStart, ResidentRef resident, StreamHandle stream, std::vector<int32_t> const& mediaTokenIds,
    std::vector<MediaItem> const& media, RetentionSpec const* retention) {
    ContextCacheRequest* c = context();
    if (!c) return ContextCacheRequest::AdmitSequenceStatus::kFailed;  // backstop: SWA has no live admission
    return c->admitSequence(tokenIds, loraWeightsName, headroom, prefillStart, resident, stream, mediaTokenIds, media,
                            retention);
}

bool ManagedKVCacheRequest::finalizeSequenceAdmission(int32_t slot, int32_t const& lookaheadToken,
                                                      int32_t fullInputLength) {
    ContextCacheRequest* c = context();
    if (!c) return false;
    return c->finalizeSequenceAdmission(slot, lookaheadToken, fullInputLength);
}

bool ManagedKVCacheRequest::retractSequenceAdmission() noexcept {
    ContextCacheRequest* c = context();
    return c ? c->retractSequenceAdmission() : true;
}

std::string const& ManagedKVCacheRequest::lastError() const noexcept {
    if (ContextCacheRequest const* c = context()) return c->lastError();
    return std::get<SwaBackend>(backend_).lastError;
}

}  // namespace ctxcache::runtime
