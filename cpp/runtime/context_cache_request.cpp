// ContextCacheRequest: runtime context -> coordinator advances, admissions from prompts, per-row mirrors.
// Contract: include/ctxcache/runtime/context_cache_request.h.
#include "ctxcache/runtime/context_cache_request.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"

namespace ctxcache::runtime {

namespace {

using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{"ContextCacheRequest"};

}  // namespace

ContextCacheSequenceAdmission ContextCacheRequest::makeAdmission(ContextCacheCoordinator const& coordinator,
                                                                 SequenceRequest const& sequence, ResidentRef resident,
                                                                 std::vector<int32_t> const& mediaTokenIds) {
    ContextCacheSequenceAdmission a = admissionOf(coordinator, sequence.tokenIds, sequence.loraName, sequence.media,
                                                  sequence.lookupPolicy, resident, mediaTokenIds);
    a.retention = &sequence.retention;  // a view, like the tokens: the coordinator keeps its own copy
    return a;
}

ContextCacheSequenceAdmission ContextCacheRequest::admissionOf(
    ContextCacheCoordinator const& coordinator, std::vector<int32_t> const& tokenIds, std::string const& loraName,
    std::vector<MediaItem> const& media, std::optional<ContextCacheLookupPolicy> lookupPolicy, ResidentRef resident,
    std::vector<int32_t> const& mediaTokenIds) {
    char const* op = "makeAdmission";
    ContextCacheSequenceAdmission a;
    a.tokenIds = tokenIds;  // a view: the coordinator makes the prompt's one copy
    a.resident = resident;
    a.lookupPolicy = lookupPolicy;
    BlockHasher const& hasher = coordinator.hasher();
    if (!loraName.empty()) a.keyExtras.adapter = AdapterKey{hasher.hashOpaqueIdentity(loraName), 0};
    if (media.empty()) {
        if (!loraName.empty())
            a.eventIdentity = std::make_shared<KvEventIdentity const>(loraName, std::vector<KvEventIdentity::Media>{});
        return a;
    }
    std::vector<KvEventIdentity::Media> named;  // for the KV events: each item's identifier and span
    named.reserve(media.size());
    int64_t const n = static_cast<int64_t>(tokenIds.size());
    a.perPositionMediaHash.assign(tokenIds.size(), Hash128{});
    for (size_t k = 0; k < media.size(); ++k) {
        MediaItem const& item = media[k];
        std::string const where = "media[" + str(static_cast<int64_t>(k)) + "]";
        if (item.tokenCount <= 0) contract(op, where + " covers no tokens");
        if (item.firstToken < 0 || static_cast<int64_t>(item.firstToken) + item.tokenCount > n)
            contract(op, where + " span [" + str(item.firstToken) + ", " +
                             str(static_cast<int64_t>(item.firstToken) + item.tokenCount) + ") is outside the " +
                             str(n) + "-token prompt");
        // Identity: modality + bytes (the same placeholder tokens with other pixels must not share KV).
        std::string identity(1, static_cast<char>(item.modality));
        identity.append(reinterpret_cast<char const*>(item.bytes.data()), item.bytes.size());
        Hash128 h = hasher.hashOpaqueIdentity(identity);
        if (h == Hash128{}) h.lo = 1;  // zero means "text token"
        for (int32_t p = item.firstToken; p < item.firstToken + item.tokenCount; ++p) {
            Hash128& slot = a.perPositionMediaHash[static_cast<size_t>(p)];
            if (slot != Hash128{}) contract(op, where + " overlaps another media item at token " + str(p));
            if (!mediaTokenIds.empty() && std::find(mediaTokenIds.begin(), mediaTokenIds.end(),
                                                    tokenIds[static_cast<size_t>(p)]) == mediaTokenIds.end())
                contract(op, where + " covers token " + str(p) + " (id " + str(tokenIds[static_cast<size_t>(p)]) +
                                 ") which is not a media placeholder id");
            slot = h;
        }
        named.push_back({mediaEventIdentifier(h), item.firstToken, item.tokenCount});
    }
    std::sort(named.begin(), named.end(), [](KvEventIdentity::Media const& x, KvEventIdentity::Media const& y) {
        return x.firstToken < y.firstToken;
    });
    a.eventIdentity = std::make_shared<KvEventIdentity const>(loraName, std::move(named));
    return a;
}

std::optional<ContextCacheRequest> ContextCacheRequest::begin(
    ContextCacheCoordinator& coordinator, GenerationRequest const& request, DecodingInferenceContext const& context,
    bool speculativeRequest, DecodingKvHeadroom const& headroom, std::vector<int32_t> const& mediaTokenIds,
    DecodingTokenStateContract tokenStateContract, ContextCacheCommitPolicy commitPolicy, StreamHandle stream) {
    char const* op = "begin";
    size_t const batch = request.sequences.size();
    if (context.activeBatchSize != static_cast<int32_t>(batch))
        contract(op, "the context's active batch " + str(context.activeBatchSize) + " differs from the request's " +
                         str(static_cast<int64_t>(batch)) + " sequences");
    if (context.residentRefs.size() != batch)
        contract(op, "the context has " + str(static_cast<int64_t>(context.residentRefs.size())) +
                         " resident refs for " + str(static_cast<int64_t>(batch)) + " sequences");
    ContextCacheBatchAdmission admission;
    admission.speculativeRequest = speculativeRequest;
    admission.tokenStateContract = tokenStateContract;
    admission.lookupPolicy = request.lookupPolicy;
    admission.commitPolicy = commitPolicy;
    admission.sequences.reserve(batch);
    for (size_t i = 0; i < batch; ++i)
        admission.sequences.push_back(
            makeAdmission(coordinator, request.sequences[i], context.residentRefs[i], mediaTokenIds));
    ContextCacheCoordinator::BeginRequestResult r = coordinator.beginRequest(admission, headroom, stream);
    if (r.status != ContextCacheCoordinatorStatus::kOk) return std::nullopt;
    ContextCacheRequest out(coordinator, std::move(*r.request), tokenStateContract);
    out.prefillStarts_ = std::move(r.prefillStarts);
    out.completed_.assign(batch, 0);
    return out;
}

ContextCacheRequest::ContextCacheRequest(ContextCacheCoordinator& coordinator,
                                         ContextCacheCoordinator::RequestHandle handle,
                                         DecodingTokenStateContract contract)
    : coordinator_(&coordinator), handle_(std::move(handle)), contract_(contract) {}

bool ContextCacheRequest::check(ContextCacheCoordinatorStatus status, char const* op) {
    if (status == ContextCacheCoordinatorStatus::kOk) return true;
    lastError_ = std::string("Context-cache ") + op + " failed (" +
                 (status == ContextCacheCoordinatorStatus::kPoisoned ? "coordinator poisoned" : "request failure") +
                 "): " + coordinator_->lastFailure();
    return false;
}

void ContextCacheRequest::checkContext(char const* op, DecodingInferenceContext const& c) const {
    size_t const batch = static_cast<size_t>(handle_.batchSize());
    if (c.activeBatchSize != static_cast<int32_t>(batch))
        contract(op, "the context's active batch " + str(c.activeBatchSize) + " differs from the request's " +
                         str(static_cast<int64_t>(batch)));
    if (c.tokenIds.size() < batch || c.rawInputLengths.size() < batch || c.generatedLengths.size() < batch ||
        c.status.size() < batch)
        contract(op, "the context's per-row vectors do not cover the batch of " + str(static_cast<int64_t>(batch)));
}

int32_t ContextCacheRequest::reuseTokenLength(int32_t slot) const {
    if (slot < 0 || static_cast<size_t>(slot) >= prefillStarts_.size())
        contract("reuseTokenLength", "row " + str(slot) + " is out of range");
    return prefillStarts_[static_cast<size_t>(slot)];
}

bool ContextCacheRequest::preparePrefill() { return check(coordinator_->preparePrefill(handle_), "preparePrefill"); }

bool ContextCacheRequest::enqueuePrefillCaptures() {
    return check(coordinator_->enqueuePrefillCaptures(handle_), "enqueuePrefillCaptures");
}

bool ContextCacheRequest::completePrefill(DecodingInferenceContext const& context,
                                          std::vector<int32_t> const& commonStateLengths) {
    char const* op = "completePrefill";
    checkContext(op, context);
    size_t const batch = static_cast<size_t>(handle_.batchSize());
    std::vector<ContextCacheSequenceAdvance> advances(batch);
    for (size_t i = 0; i < batch; ++i) {
        if (contract_ == DecodingTokenStateContract::kCommittedPlusLookahead) {
            if (context.tokenIds[i].empty()) contract(op, "row " + str(static_cast<int64_t>(i)) + " has no tokens");
            advances[i].acceptedTokenIds = &context.tokenIds[i].back();
            advances[i].acceptedTokenCount = 1;
        }
        advances[i].committedStateLength = context.rawInputLengths[i];
    }
    bool const ok = check(coordinator_->finalizePrefillPublication(
                              handle_, advances, commonStateLengths.empty() ? nullptr : &commonStateLengths),
                          op);
    stepTokenCounts_.assign(batch, 0);
    return ok;
}

bool ContextCacheRequest::prepareDecodeStep(DecodingInferenceContext const& context,
                                            DecodingKvHeadroom const& headroom) {
    char const* op = "prepareDecodeStep";
    checkContext(op, context);
    ContextCacheCoordinatorStatus const status = coordinator_->prepareDecodeStep(handle_, headroom);
    size_t const batch = static_cast<size_t>(handle_.batchSize());
    stepTokenCounts_.resize(batch);
    for (size_t i = 0; i < batch; ++i) stepTokenCounts_[i] = static_cast<int32_t>(context.tokenIds[i].size);
    return check(status, op);
}

bool ContextCacheRequest::completeDecodeStep(DecodingInferenceContext const& context,
                                             std::vector<int32_t> const& commonStateLengths) {
    char const* op = "completeDecodeStep";
    checkContext(op, context);
    size_t const batch = static_cast<size_t>(handle_.batchSize());
    if (stepTokenCounts_.size() != batch) contract(op, "prepareDecodeStep was not called for this batch");
    int32_t const lookahead = contract_ == DecodingTokenStateContract::kCommittedPlusLookahead ? 1 : 0;
    std::vector<ContextCacheSequenceAdvance> advances(batch);
    std::vector<int32_t> publishable;
    for (size_t i = 0; i < batch; ++i) {
        int32_t const accepted = static_cast<int32_t>(context.tokenIds[i].size) - stepTokenCounts_[i];
        if (accepted < 0) contract(op, "row " + str(static_cast<int64_t>(i)) + " lost tokens since prepareDecodeStep");
        if (accepted == 0) {
            advances[i].committedStateLength = ContextCacheSequenceAdvance::kHoldCommittedStateLength;
        } else {
            advances[i].acceptedTokenIds = context.tokenIds[i].data + stepTokenCounts_[i];
            advances[i].acceptedTokenCount = accepted;
            advances[i].committedStateLength = context.rawInputLengths[i] + context.generatedLengths[i] - lookahead;
        }
        if (context.status[i] == SequenceStatus::kFinished && !completed_[i])
            publishable.push_back(static_cast<int32_t>(i));
    }
    bool const ok = check(coordinator_->completeDecodeStep(handle_, advances, publishable,
                                                           commonStateLengths.empty() ? nullptr : &commonStateLengths),
                          op);
    if (ok)
        for (int32_t row : publishable) completed_[static_cast<size_t>(row)] = 1;
    return ok;
}

bool ContextCacheRequest::beginBatchCompaction(std::vector<int32_t> const& oldToNew, int32_t newBatchSize,
                                               TensorView& deviceBatchMapping) {
    bool const ok = check(coordinator_->beginBatchCompaction(handle_, oldToNew, newBatchSize, deviceBatchMapping),
                          "beginBatchCompaction");
    if (ok) pendingMap_ = oldToNew;
    return ok;
}

bool ContextCacheRequest::completeBatchCompaction(std::vector<int32_t> const& keepMapping) {
    char const* op = "completeBatchCompaction";
    if (pendingMap_.empty()) contract(op, "no compaction is pending");
    if (keepMapping != pendingMap_) contract(op, "keepMapping differs from the map given to beginBatchCompaction");
    if (!check(coordinator_->compactBatch(handle_), op)) return false;
    std::vector<int32_t> starts;
    std::vector<uint8_t> completed;
    std::vector<int32_t> counts;
    for (size_t i = 0; i < pendingMap_.size(); ++i) {
        if (pendingMap_[i] < 0) continue;
        starts.push_back(prefillStarts_[i]);
        completed.push_back(completed_[i]);
        if (i < stepTokenCounts_.size()) counts.push_back(stepTokenCounts_[i]);
    }
    prefillStarts_ = std::move(starts);
    completed_ = std::move(completed);
    stepTokenCounts_ = std::move(counts);
    pendingMap_.clear();
    return true;
}

bool ContextCacheRequest::finish() { return check(coordinator_->finish(handle_), "finish"); }

ContextCacheRequest::AdmitSequenceStatus ContextCacheRequest::admitSequence(
    std::vector<int32_t> const& tokenIds, std::string const& loraWeightsName, DecodingKvHeadroom const& headroom,
    int32_t& prefillStart, ResidentRef resident, StreamHandle stream, std::vector<int32_t> const& mediaTokenIds,
    std::vector<MediaItem> const& media, RetentionSpec const* retention) {
    (void)stream;  // the request's stream (begin) orders every step
    ContextCacheSequenceAdmission admission =
        admissionOf(*coordinator_, tokenIds, loraWeightsName, media, std::nullopt, resident, mediaTokenIds);
    admission.retention = retention;
    ContextCacheCoordinator::AdmitSequenceResult r = coordinator_->admitSequence(handle_, admission, headroom);
    if (r.status == AdmitSequenceStatus::kAdmitted) prefillStart = r.prefillStart;
    else lastError_ = "Context-cache admitSequence failed: " + r.failure;
    return r.status;
}

bool ContextCacheRequest::finalizeSequenceAdmission(int32_t slot, int32_t const& lookaheadToken,
                                                    int32_t fullInputLength) {
    ContextCacheSequenceAdvance advance;
    if (contract_ == DecodingTokenStateContract::kCommittedPlusLookahead) {
        advance.acceptedTokenIds = &lookaheadToken;
        advance.acceptedTokenCount = 1;
    }
    advance.committedStateLength = fullInputLength;
    if (!check(coordinator_->finalizeSequenceAdmission(handle_, slot, advance), "finalizeSequenceAdmission"))
        return false;
    prefillStarts_.push_back(handle_.prefillStarts().back());
    completed_.push_back(0);
    stepTokenCounts_.resize(prefillStarts_.size(), 0);
    return true;
}

bool ContextCacheRequest::retractSequenceAdmission() noexcept {
    return coordinator_->retractSequenceAdmission(handle_);
}

bool ContextCacheRequest::publishHybridMtpEndpoint(int32_t slot, int32_t residentStateLength,
                                                   TensorView const& baseHiddenStates, int32_t boundaryHiddenRow) {
    return check(
        coordinator_->publishHybridMtpEndpoint(handle_, slot, residentStateLength, baseHiddenStates, boundaryHiddenRow),
        "publishHybridMtpEndpoint");
}

bool ContextCacheRequest::restoreHybridMtpBoundaryHidden(int32_t slot, TensorView& baseHiddenStates,
                                                         int32_t destinationRow) {
    return check(coordinator_->restoreHybridMtpBoundaryHidden(handle_, slot, baseHiddenStates, destinationRow),
                 "restoreHybridMtpBoundaryHidden");
}

}  // namespace ctxcache::runtime
