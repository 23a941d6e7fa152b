// ManagedKVCacheRequest: one runtime request facade over orthogonal execution-paging and context-reuse clients
// (the seed page managed_kv_cache_request_api.txt, reference c.13). The support matrix selects exactly one
// backend per request: context reuse with full KV storage (ContextCacheRequest over a coordinator) or bounded
// sliding-window paging when reuse is off (BoundedSwaKVPageManager). Every member forwards to the active
// backend; context-only members on the SWA backend answer the documented backstops.
//
// SWA backend: begin() needs a non-speculative request, the committed+lookahead contract, headroom {1, 0} and one
//   prompt and one resident ref per active sequence; it admits the context's resident refs. prepareSwaPrefill
//   prepares one prefill chunk (a second call first completes the previous chunk: that is its completion point);
//   completePrefill completes the last. Every step checks the context against the window: each row's history is
//   its KV endpoint plus the lookahead token, and a decode step advances a running row by exactly one token.
//   Context-only members answer the backstops: prefillStarts() null, preparePrefill and enqueuePrefillCaptures
//   true, admitSequence kFailed, finalizeSequenceAdmission false, retractSequenceAdmission true;
//   reuseTokenLength and the hybrid-MTP members throw ContractError.
// Errors: begin() with zero or two backends, or SWA preconditions that do not hold, is a ContractError; a
//         backend refusal (capacity, poisoned) is nullopt, the reason in the backend's lastFailure(). Members
//         return false on a backend failure (lastError() says why).
// Threading: single writer (the backend's contract). Move-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ctxcache/runtime/bounded_swa_kv_page_manager.h"
#include "ctxcache/runtime/context_cache_request.h"

namespace ctxcache::runtime {

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

    bool hasContextReuse() const noexcept { return std::holds_alternative<ContextCacheRequest>(backend_); }
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
                                                           std::vector<MediaItem> const& media = {},
                                                           RetentionSpec const* retention = nullptr);
    bool finalizeSequenceAdmission(int32_t slot, int32_t const& lookaheadToken, int32_t fullInputLength);
    bool retractSequenceAdmission() noexcept;

    std::string const& lastError() const noexcept;
    ContextCacheRequest* contextRequest() noexcept { return std::get_if<ContextCacheRequest>(&backend_); }
    // The SWA backend's request handle (null on the context-reuse backend).
    BoundedSwaKVPageManager::RequestHandle* swaRequest() noexcept;

private:
    struct SwaBackend {
        BoundedSwaKVPageManager* manager = nullptr;
        BoundedSwaKVPageManager::RequestHandle handle;
        bool prefillPending = false;  // a chunk is prepared and not yet completed
        std::vector<int32_t> pendingMap;
        std::string lastError;
    };

    explicit ManagedKVCacheRequest(ContextCacheRequest request) : backend_(std::move(request)) {}
    explicit ManagedKVCacheRequest(SwaBackend swa) : backend_(std::move(swa)) {}
    ContextCacheRequest* context() noexcept { return std::get_if<ContextCacheRequest>(&backend_); }
    ContextCacheRequest const* context() const noexcept { return std::get_if<ContextCacheRequest>(&backend_); }
    SwaBackend* swa() noexcept { return std::get_if<SwaBackend>(&backend_); }
    ContextCacheRequest& requireContext(char const* op);
    ContextCacheRequest const& requireContext(char const* op) const;
    bool swaCheck(SwaKVCacheStatus status);
    void checkSwaContext(char const* op, DecodingInferenceContext const& context, bool prepareStep);

    std::variant<ContextCacheRequest, SwaBackend> backend_;
};

}  // namespace ctxcache::runtime
