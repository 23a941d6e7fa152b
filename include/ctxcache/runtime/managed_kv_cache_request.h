// ManagedKVCacheRequest: one runtime request facade over orthogonal execution-paging and context-reuse clients
// (the seed page managed_kv_cache_request_api.txt, reference c.13). The support matrix selects exactly one
// backend per request: context reuse with full KV storage (ContextCacheRequest over a coordinator) or bounded
// sliding-window paging when reuse is off (BoundedSwaKVPageManager). Every member forwards to the active
// backend; context-only members on the SWA backend answer the documented backstops.
//
// Errors: begin() with zero or two backends, or SWA preconditions that do not hold, is a ContractError; a
//         coordinator refusal is nullopt. Members return false on a backend failure (lastError() says why).
// Threading: single writer (the backend's contract). Move-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctxcache/runtime/context_cache_request.h"

namespace ctxcache::runtime {

class BoundedSwaKVPageManager;  // the bounded sliding-window backend (its own issue)

class ManagedKVCacheRequest {
public:
    static std::optional<ManagedKVCacheRequest> begin(
        ContextCacheCoordinator* contextCache, BoundedSwaKVPageManager* swaPageManager,
        GenerationRequest const& request, DecodingInferenceContext const& context, bool speculativeRequest,
        DecodingKvHeadroom const& headroom, DecodingTokenStateContract tokenStateContract,
        ContextCacheCommitPolicy commitPolicy, std::vector<int32_t> const& mediaTokenIds = {},
        StreamHandle stream = nullptr);

    ManagedKVCacheRequest(ManagedKVCacheRequest&&) noexcept = default;
    ManagedKVCacheRequest& operator=(ManagedKVCacheRequest&&) = delete;
    ManagedKVCacheRequest(ManagedKVCacheRequest const&) = delete;
    ManagedKVCacheRequest& operator=(ManagedKVCacheRequest const&) = delete;
    ~ManagedKVCacheRequest() = default;

    bool hasContextReuse() const noexcept { return context_.has_value(); }
    std::vector<int32_t> const* prefillStarts() const noexcept;
    int32_t reuseTokenLength(int32_t slot) const;
    bool publishHybridMtpEndpoint(int32_t slot, int32_t residentStateLength, TensorView const& baseHiddenStates,
                                  int32_t boundaryHiddenRow);
    bool restoreHybridMtpBoundaryHidden(int32_t slot, TensorView& baseHiddenStates, int32_t destinationRow);

    bool preparePrefill();
    bool prepareSwaPrefill(std::vector<int32_t> const& effectiveInputLengths);
    bool enqueuePrefillCaptures();
    bool completePrefill(DecodingInferenceContext const& context, std::vector<int32_t> const& commonStateLengths);
    bool prepareDecodeStep(DecodingInferenceContext const& context, DecodingKvHeadroom const& headroom);
    bool completeDecodeStep(DecodingInferenceContext const& context, std::vector<int32_t> const& commonStateLengths);
    bool beginBatchCompaction(std::vector<int32_t> const& oldToNew, int32_t newBatchSize,
                              TensorView& deviceBatchMapping);
    bool completeBatchCompaction(std::vector<int32_t> const& keepMapping);
    bool finish();

    // In-flight admission, context-reuse backend only.
    ContextCacheRequest::AdmitSequenceStatus admitSequence(std::vector<int32_t> const& tokenIds,
                                                           std::string const& loraWeightsName,
                                                           DecodingKvHeadroom const& headroom, int32_t& prefillStart,
                                                           ResidentRef resident, StreamHandle stream,
                                                           std::vector<int32_t> const& mediaTokenIds = {},
                                                           std::vector<MediaItem> const& media = {});
    bool finalizeSequenceAdmission(int32_t slot, int32_t const& lookaheadToken, int32_t fullInputLength);
    bool retractSequenceAdmission() noexcept;

    std::string const& lastError() const noexcept;
    ContextCacheRequest* contextRequest() noexcept { return context_ ? &*context_ : nullptr; }

private:
    explicit ManagedKVCacheRequest(ContextCacheRequest request) : context_(std::move(request)) {}
    ContextCacheRequest& requireContext(char const* op);
    ContextCacheRequest const& requireContext(char const* op) const;

    std::optional<ContextCacheRequest> context_;
};

}  // namespace ctxcache::runtime
