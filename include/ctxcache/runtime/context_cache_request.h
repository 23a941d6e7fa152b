// ContextCacheRequest: the runtime adapter between an engine's request lifecycle and the coordinator (reference
// c.12, 0.11): it builds one admission per prompt (LoRA adapter key, per-position media hashes, resident ref),
// turns the engine's DecodingInferenceContext into coordinator advances (committed length, accepted tokens,
// publishable rows), and keeps the per-row mirrors (prefill starts, token counts) in step with compaction.
//
// Errors: a broken contract (a context that does not match the batch, a step out of order, bad media spans)
//         throws ContractError and changes nothing; a coordinator failure (capacity, poisoned) returns false and
//         lastError() says why.
// Threading: the coordinator's single-writer contract. Move-only; destroying it before finish() abandons the
//            request (the coordinator synchronises first).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctxcache/runtime/context_cache_coordinator.h"
#include "ctxcache/runtime/runtime_types.h"

namespace ctxcache::runtime {

class ContextCacheRequest {
public:
    using AdmitSequenceStatus = ContextCacheCoordinator::AdmitSequenceStatus;

    // nullopt when the coordinator refused the batch (capacity, page-table overflow, poisoned); the reason is
    // in coordinator.lastFailure(). mediaTokenIds (optional): the placeholder ids media items must cover.
    static std::optional<ContextCacheRequest> begin(
        ContextCacheCoordinator& coordinator, GenerationRequest const& request, DecodingInferenceContext const& context,
        bool speculativeRequest, DecodingKvHeadroom const& headroom, std::vector<int32_t> const& mediaTokenIds = {},
        DecodingTokenStateContract tokenStateContract = DecodingTokenStateContract::kCommittedPlusLookahead,
        ContextCacheCommitPolicy commitPolicy = ContextCacheCommitPolicy::kIncludingGeneratedTokens,
        StreamHandle stream = nullptr);

    ContextCacheRequest(ContextCacheRequest&&) noexcept = default;
    ContextCacheRequest& operator=(ContextCacheRequest&&) = delete;
    ContextCacheRequest(ContextCacheRequest const&) = delete;
    ContextCacheRequest& operator=(ContextCacheRequest const&) = delete;
    ~ContextCacheRequest() = default;

    std::vector<int32_t> const* prefillStarts() const noexcept { return &prefillStarts_; }
    // The reuse length (prefill start) of batch row `slot`; ContractError when out of range.
    int32_t reuseTokenLength(int32_t slot) const;

    bool preparePrefill();
    bool enqueuePrefillCaptures();
    bool completePrefill(DecodingInferenceContext const& context, std::vector<int32_t> const& commonStateLengths);
    bool prepareDecodeStep(DecodingInferenceContext const& context, DecodingKvHeadroom const& headroom);
    bool completeDecodeStep(DecodingInferenceContext const& context, std::vector<int32_t> const& commonStateLengths);
    bool beginBatchCompaction(std::vector<int32_t> const& oldToNew, int32_t newBatchSize,
                              TensorView& deviceBatchMapping);
    // keepMapping must be the map given to beginBatchCompaction.
    bool completeBatchCompaction(std::vector<int32_t> const& keepMapping);
    bool finish();

    AdmitSequenceStatus admitSequence(std::vector<int32_t> const& tokenIds, std::string const& loraWeightsName,
                                      DecodingKvHeadroom const& headroom, int32_t& prefillStart, ResidentRef resident,
                                      StreamHandle stream, std::vector<int32_t> const& mediaTokenIds = {},
                                      std::vector<MediaItem> const& media = {},
                                      RetentionSpec const* retention = nullptr);
    bool finalizeSequenceAdmission(int32_t slot, int32_t const& lookaheadToken, int32_t fullInputLength);
    bool retractSequenceAdmission() noexcept;

    // Hybrid+MTP endpoints (ContextCacheCoordinator::publishHybridMtpEndpoint / restoreHybridMtpBoundaryHidden;
    // slot = batch row): ContractError on another deployment or bad arguments, false on a failed synchronisation.
    bool publishHybridMtpEndpoint(int32_t slot, int32_t residentStateLength, TensorView const& baseHiddenStates,
                                  int32_t boundaryHiddenRow);
    bool restoreHybridMtpBoundaryHidden(int32_t slot, TensorView& baseHiddenStates, int32_t destinationRow);

    std::string const& lastError() const noexcept { return lastError_; }
    ContextCacheCoordinator& coordinator() const noexcept { return *coordinator_; }
    ContextCacheCoordinator::RequestHandle& handle() noexcept { return handle_; }
    ContextCacheCoordinator::RequestHandle const& handle() const noexcept { return handle_; }

    // One admission from a prompt (LoRA adapter key and per-position media hashes under the coordinator's
    // hasher). It views sequence.tokenIds and sequence.retention (no copy), so `sequence` must outlive it.
    // ContractError on a media span outside the prompt, overlapping spans, or a span over a token that is not one of
    // mediaTokenIds (when given).
    static ContextCacheSequenceAdmission makeAdmission(ContextCacheCoordinator const& coordinator,
                                                       SequenceRequest const& sequence, ResidentRef resident,
                                                       std::vector<int32_t> const& mediaTokenIds);

private:
    static ContextCacheSequenceAdmission admissionOf(ContextCacheCoordinator const& coordinator,
                                                     std::vector<int32_t> const& tokenIds, std::string const& loraName,
                                                     std::vector<MediaItem> const& media,
                                                     std::optional<ContextCacheLookupPolicy> lookupPolicy,
                                                     ResidentRef resident, std::vector<int32_t> const& mediaTokenIds);
    ContextCacheRequest(ContextCacheCoordinator& coordinator, ContextCacheCoordinator::RequestHandle handle,
                        DecodingTokenStateContract contract);
    bool check(ContextCacheCoordinatorStatus status, char const* op);
    void checkContext(char const* op, DecodingInferenceContext const& context) const;

    ContextCacheCoordinator* coordinator_;
    ContextCacheCoordinator::RequestHandle handle_;
    DecodingTokenStateContract contract_;
    std::vector<int32_t> prefillStarts_;
    std::vector<int32_t> stepTokenCounts_;  // history length per row when the step was prepared
    std::vector<uint8_t> completed_;        // rows whose decode-end publication happened
    std::vector<int32_t> pendingMap_;
    std::string lastError_;
};

}  // namespace ctxcache::runtime
