// ManagedKVCacheRequest: backend selection and forwarding. Contract: include/ctxcache/runtime/
// managed_kv_cache_request.h.
#include "ctxcache/runtime/managed_kv_cache_request.h"

#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::runtime {

namespace {
[[noreturn]] void contract(char const* op, std::string const& why) {
    throw ContractError(std::string("ManagedKVCacheRequest::") + op + ": " + why);
}
}  // namespace

std::optional<ManagedKVCacheRequest> ManagedKVCacheRequest::begin(
    ContextCacheCoordinator* contextCache, BoundedSwaKVPageManager* swaPageManager, GenerationRequest const& request,
    DecodingInferenceContext const& context, bool speculativeRequest, DecodingKvHeadroom const& headroom,
    DecodingTokenStateContract tokenStateContract, ContextCacheCommitPolicy commitPolicy,
    std::vector<int32_t> const& mediaTokenIds, StreamHandle stream) {
    if ((contextCache == nullptr) == (swaPageManager == nullptr))
        contract("begin", "exactly one backend (context cache or bounded SWA) must be given");
    if (swaPageManager)
        contract("begin", "the bounded-SWA backend is not part of this build yet (BoundedSwaKVPageManager)");
    std::optional<ContextCacheRequest> r =
        ContextCacheRequest::begin(*contextCache, request, context, speculativeRequest, headroom, mediaTokenIds,
                                   tokenStateContract, commitPolicy, stream);
    if (!r) return std::nullopt;
    return ManagedKVCacheRequest(std::move(*r));
}

ContextCacheRequest& ManagedKVCacheRequest::requireContext(char const* op) {
    if (!context_) contract(op, "this request has no context-reuse backend");
    return *context_;
}

ContextCacheRequest const& ManagedKVCacheRequest::requireContext(char const* op) const {
    if (!context_) contract(op, "this request has no context-reuse backend");
    return *context_;
}

std::vector<int32_t> const* ManagedKVCacheRequest::prefillStarts() const noexcept {
    return context_ ? context_->prefillStarts() : nullptr;
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

bool ManagedKVCacheRequest::preparePrefill() { return context_ ? context_->preparePrefill() : true; }

bool ManagedKVCacheRequest::prepareSwaPrefill(std::vector<int32_t> const&) {
    return true;  // a no-op on the context-reuse backend
}

bool ManagedKVCacheRequest::enqueuePrefillCaptures() { return context_ ? context_->enqueuePrefillCaptures() : true; }

bool ManagedKVCacheRequest::completePrefill(DecodingInferenceContext const& context,
                                            std::vector<int32_t> const& commonStateLengths) {
    return requireContext("completePrefill").completePrefill(context, commonStateLengths);
}

bool ManagedKVCacheRequest::prepareDecodeStep(DecodingInferenceContext const& context,
                                              DecodingKvHeadroom const& headroom) {
    return requireContext("prepareDecodeStep").prepareDecodeStep(context, headroom);
}

bool ManagedKVCacheRequest::completeDecodeStep(DecodingInferenceContext const& context,
                                               std::vector<int32_t> const& commonStateLengths) {
    return requireContext("completeDecodeStep").completeDecodeStep(context, commonStateLengths);
}

bool ManagedKVCacheRequest::beginBatchCompaction(std::vector<int32_t> const& oldToNew, int32_t newBatchSize,
                                                 TensorView& deviceBatchMapping) {
    return requireContext("beginBatchCompaction").beginBatchCompaction(oldToNew, newBatchSize, deviceBatchMapping);
}

bool ManagedKVCacheRequest::completeBatchCompaction(std::vector<int32_t> const& keepMapping) {
    return requireContext("completeBatchCompaction").completeBatchCompaction(keepMapping);
}

bool ManagedKVCacheRequest::finish() { return context_ ? context_->finish() : true; }

ContextCacheRequest::AdmitSequenceStatus ManagedKVCacheRequest::admitSequence(
    std::vector<int32_t> const& tokenIds, std::string const& loraWeightsName, DecodingKvHeadroom const& headroom,
    int32_t& prefillStart, ResidentRef resident, StreamHandle stream, std::vector<int32_t> const& mediaTokenIds,
    std::vector<MediaItem> const& media) {
    if (!context_) return ContextCacheRequest::AdmitSequenceStatus::kFailed;
    return context_->admitSequence(tokenIds, loraWeightsName, headroom, prefillStart, resident, stream, mediaTokenIds,
                                   media);
}

bool ManagedKVCacheRequest::finalizeSequenceAdmission(int32_t slot, int32_t const& lookaheadToken,
                                                      int32_t fullInputLength) {
    if (!context_) return false;
    return context_->finalizeSequenceAdmission(slot, lookaheadToken, fullInputLength);
}

bool ManagedKVCacheRequest::retractSequenceAdmission() noexcept {
    return context_ ? context_->retractSequenceAdmission() : true;
}

std::string const& ManagedKVCacheRequest::lastError() const noexcept {
    static std::string const none;
    return context_ ? context_->lastError() : none;
}

}  // namespace ctxcache::runtime
