// ReferenceEngine::serveBatch: one wave of serve(), as BatchServer, a class private to the engine with one method
// per phase. seatFounders takes the next founders off the queue; begin seats them through the facade (or
// requeues them and halves the next wave); prefill runs the facade's prefill calls around the kernels; each
// decodeStep grows every row (preempting the newest until growth fits), decodes, completes the step and retires
// finished rows; admitJoiners seats queued requests in free rows at the step boundary; finishWave finishes the
// request and sizes the next wave. A phase that answers false met a fault: fault() finishes the request (the
// coordinator quarantines what the device may still use), recovers, and requeues every unfinished row.
// Contract (scheduling, waves, preemption, faults): include/ctxcache/sim/reference_engine.h.
// Threading: serve()'s caller's (the engine is single-caller); a BatchServer lives for one serveBatch call.
#include "ctxcache/sim/reference_engine.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"
#include "ctxcache/runtime/bounded_swa_kv_page_manager.h"
#include "ctxcache/runtime/context_cache_coordinator.h"
#include "ctxcache/runtime/managed_kv_cache_request.h"
#include "reference_engine_internal.h"

namespace ctxcache::sim {

using runtime::DecodingInferenceContext;
using runtime::DecodingKvHeadroom;
using runtime::ManagedKVCacheRequest;
using runtime::ResidentRef;
using runtime::SequenceStatus;

namespace {

using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{"ReferenceEngine"};

}  // namespace

// One serveBatch call (the phases above). A method answering false asks run() for fault().
class ReferenceEngine::BatchServer {
public:
    BatchServer(ReferenceEngine& engine, std::vector<size_t>& queue, std::vector<EngineRequest> const& requests,
                std::vector<EngineOutput>& outputs, std::vector<uint8_t>& done)
        : engine_(engine),
          config_(engine.config_),
          storage_(*engine.storage_),
          queue_(queue),
          requests_(requests),
          outputs_(outputs),
          done_(done),
          speculative_(config_.deployment == DeploymentKind::kEagle || engine.mtp()),
          headroom_{1, speculative_ ? 1 : 0} {}

    bool run() {
        seatFounders();
        if (!begin()) return false;
        if (!prefill()) return fault();
        for (auto& r : rows_)
            if (r->generated >= r->maxNewTokens) r->status = SequenceStatus::kFinished;
        if (!retire()) return fault();
        bool const joins = engine_.coordinator_ && engine_.coordinator_->supportsLiveSequenceAdmission();
        while (!rows_.empty()) {
            if (!decodeStep()) return fault();
            if (joins && !admitJoiners()) return fault();
        }
        finishWave();
        return true;
    }

private:
    // Founders: the next founderCap_ requests (maxBatch, halved after a batch that could not be seated).
    void seatFounders() {
        // Hybrid+MTP serves batches of one (Appendix C).
        founders_ = std::min(queue_.size(), static_cast<size_t>(engine_.mtp() ? 1 : engine_.founderCap_));
        for (size_t k = 0; k < founders_; ++k) {
            size_t const index = queue_.back();
            queue_.pop_back();
            EngineRequest const& r = requests_[index];
            engine_.arrive(r);
            std::unique_ptr<Row> row = engine_.newRow(index, r, engine_.takeResident());
            runtime::SequenceRequest sr;
            sr.tokenIds = r.tokens;
            sr.loraName = r.lora;
            sr.media = r.media;
            sr.retention = r.retention;
            if (!config_.reuse) sr.lookupPolicy = ContextCacheLookupPolicy::kBypass;
            generation_.sequences.push_back(std::move(sr));
            context_.residentRefs.push_back(row->resident);
            rows_.push_back(std::move(row));
        }
        context_.activeBatchSize = static_cast<int32_t>(rows_.size());
        ++engine_.stats_.batches;
    }

    // Begins the request; false (the founders requeued, their slots released) when it could not be seated.
    bool begin() {
        std::optional<ManagedKVCacheRequest> seated = ManagedKVCacheRequest::begin(
            engine_.coordinator_.get(), engine_.swa_.get(), generation_, context_, speculative_, headroom_,
            runtime::DecodingTokenStateContract::kCommittedPlusLookahead, config_.commitPolicy);
        if (seated) {
            request_.emplace(std::move(*seated));  // the request is move-constructible, not assignable
            return true;
        }
        releaseAll();
        requeue();
        if (engine_.backendPoisoned()) {
            engine_.recover();
            return false;
        }
        if (rows_.size() == 1)
            contract("request " + str(static_cast<int64_t>(rows_[0]->request)) +
                     " does not fit the cache: " + engine_.backendFailure());
        // The founders could not be seated together: the next wave tries half as many (each wave seats at
        // least one, which validate() proved fits alone, so the queue always shrinks).
        ++engine_.stats_.capacityRetries;
        engine_.founderCap_ = std::max<int32_t>(1, static_cast<int32_t>(rows_.size() / 2));
        return false;
    }

    bool prefill() {
        ManagedKVCacheRequest& m = *request_;
        if (std::vector<int32_t> const* starts = m.prefillStarts())
            for (size_t i = 0; i < rows_.size(); ++i) rows_[i]->prefillStart = (*starts)[i];
        if (!m.preparePrefill()) return false;
        if (storage_.baseLengths && !engine_.swa_) {
            std::vector<int32_t> const lengths = storage_.baseLengths->read();
            for (size_t i = 0; i < rows_.size(); ++i)
                if (lengths[i] != rows_[i]->prefillStart)
                    throw InvariantError("ReferenceEngine: device KV length " + str(lengths[i]) + " of row " +
                                         str(static_cast<int64_t>(i)) + " is not its prefill start " +
                                         str(rows_[i]->prefillStart));
        }
        std::vector<Row*> live;
        for (auto& r : rows_) live.push_back(r.get());
        if (engine_.mtp()) {
            // The boundary row of a hit comes from the checkpoint: the base word at start - 1 is not recomputed.
            Row& r = *rows_[0];
            r.hidden.assign(static_cast<size_t>(r.inputLength) * kMtpHiddenSize, 0);
            if (r.prefillStart > 0) {
                runtime::TensorView boundary = engine_.boundaryView();
                if (!m.restoreHybridMtpBoundaryHidden(0, boundary, 0)) return false;
                storage_.boundary.read(0, r.hidden.data() + static_cast<size_t>(r.prefillStart - 1) * kMtpHiddenSize,
                                       kMtpHiddenSize * sizeof(uint16_t));
            }
        }
        if (engine_.swa_) {
            if (!engine_.prefillWindowed(m, live)) return false;
        } else {
            engine_.prefillRows(live);
        }
        if (engine_.mtp()) {
            // Mid-prefill: the hidden rows, the draft up to the boundary, then the checkpoint at E = n.
            Row& r = *rows_[0];
            engine_.computeHidden(r, r.prefillStart, r.inputLength);
            engine_.mtpDraft(r, std::max(0, r.prefillStart - 1), r.inputLength - 1);
            storage_.boundary.write(0, r.hidden.data() + static_cast<size_t>(r.inputLength - 1) * kMtpHiddenSize,
                                    kMtpHiddenSize * sizeof(uint16_t));
            if (!m.publishHybridMtpEndpoint(0, r.inputLength, engine_.boundaryView(), 0)) return false;
        }
        if (!m.enqueuePrefillCaptures()) return false;
        engine_.finishPrefill(live);
        engine_.setLengths(rows_);
        fillContext();
        return m.completePrefill(context_, commonLengths());
    }

    // One decode step: cancellations, growth (preempting the newest rows until it fits), the kernels, the
    // step's completion and the retirement of finished rows.
    bool decodeStep() {
        if (engine_.interruptSource_->load(std::memory_order_relaxed)) {
            (void)request_->finish();
            request_.reset();
            releaseAll();
            if (engine_.backendPoisoned()) engine_.recover();
            engine_.checkInterrupt();
        }
        // Cancellations arrive before the step: those rows hold.
        for (auto& r : rows_)
            if (r->cancelAfter >= 1 && r->generated >= r->cancelAfter && r->status == SequenceStatus::kRunning)
                r->status = SequenceStatus::kCancelled;
            else if (r->failAfter >= 1 && r->generated >= r->failAfter && r->status == SequenceStatus::kRunning)
                r->status = SequenceStatus::kFailed;
        // Growth for this step must fit: preempt the newest rows until it does (the coordinator's own test).
        if (engine_.coordinator_) {
            runtime::ContextCacheRequest* cr = request_->contextRequest();
            while (rows_.size() > 1 && cr && !engine_.coordinator_->canPrepareDecodeStep(cr->handle(), headroom_))
                if (!preemptNewest()) return false;
        }
        fillContext();
        if (!request_->prepareDecodeStep(context_, headroom_)) {
            if (engine_.backendPoisoned()) return false;
            // Growth failed although canPrepareDecodeStep allowed it, or a lone row cannot grow: a bug, never a
            // retry loop.
            std::string const why = engine_.backendFailure();
            (void)request_->finish();
            request_.reset();
            releaseAll();
            throw InvariantError("ReferenceEngine: a decode step of " + str(static_cast<int64_t>(rows_.size())) +
                                 " rows could not grow: " + why);
        }
        std::vector<Row*> live;
        for (auto& r : rows_)
            if (r->status == SequenceStatus::kRunning) live.push_back(r.get());
        engine_.decodeRows(live);
        engine_.setLengths(rows_);
        for (Row* r : live)
            if (r->generated >= r->maxNewTokens) r->status = SequenceStatus::kFinished;
        fillContext();
        if (!request_->completeDecodeStep(context_, commonLengths())) return false;
        ++engine_.stats_.decodeSteps;
        return retire();
    }

    // Joiners take the free rows at this step boundary (attention-only, non-speculative deployments).
    bool admitJoiners() {
        while (!joinsPaused_ && !queue_.empty() && rows_.size() < static_cast<size_t>(config_.maxBatch) &&
               !rows_.empty()) {
            size_t const index = queue_.back();
            EngineRequest const& req = requests_[index];
            ResidentRef const resident = engine_.takeResident();
            int32_t start = 0;
            if (config_.reuse) engine_.arrive(req);
            runtime::ContextCacheRequest::AdmitSequenceStatus const status =
                config_.reuse ? request_->admitSequence(req.tokens, req.lora, headroom_, start, resident, nullptr, {},
                                                        req.media, &req.retention)
                              : runtime::ContextCacheRequest::AdmitSequenceStatus::kFailed;
            if (status != runtime::ContextCacheRequest::AdmitSequenceStatus::kAdmitted) {
                engine_.releaseResident(resident);
                if (status == runtime::ContextCacheRequest::AdmitSequenceStatus::kNoCapacity)
                    ++engine_.stats_.joinerNoCapacity;
                return !engine_.backendPoisoned();
            }
            queue_.pop_back();
            std::unique_ptr<Row> row = engine_.newRow(index, req, resident);
            row->prefillStart = start;
            row->joined = true;
            Row* joiner = row.get();
            int32_t const seat = static_cast<int32_t>(rows_.size());
            rows_.push_back(std::move(row));
            engine_.prefillRows({joiner});
            if (engine_.seatingFailuresLeft_[index] > 0) {
                // Seating failed after the joiner's prefill wrote its private pages: retract. Nothing it wrote
                // was published, and its pages go back to the pool; it stays queued for a later boundary.
                --engine_.seatingFailuresLeft_[index];
                rows_.pop_back();
                if (!request_->retractSequenceAdmission()) return false;
                engine_.releaseResident(resident);
                queue_.push_back(index);
                ++engine_.stats_.retractions;
                return true;
            }
            storage_.baseLengths->setEntry(seat, joiner->inputLength);
            engine_.finishPrefill({joiner});
            ++engine_.stats_.joiners;
            if (!request_->finalizeSequenceAdmission(seat, joiner->history.back(), joiner->inputLength)) return false;
            if (joiner->generated >= joiner->maxNewTokens) joiner->status = SequenceStatus::kFinished;
            if (!retire()) return false;
        }
        return true;
    }

    void finishWave() {
        if (!request_->finish()) {
            request_.reset();
            engine_.recover();
        }
        // The next wave (additive increase, multiplicative decrease): one founder more after a wave that needed
        // no preemption, half after one that did. Doubling back instead made every other wave fail to seat, and a
        // failed seating evicts the records its partial acquires made room with.
        if (!preempted_) engine_.founderCap_ = std::min(config_.maxBatch, engine_.founderCap_ + 1);
        else
            engine_.founderCap_ =
                std::max<int32_t>(1, std::min(engine_.founderCap_, static_cast<int32_t>(founders_)) / 2);
    }

    // Retire finished and cancelled rows: record their outputs, then compact them away.
    bool retire() {
        std::vector<int32_t> map(rows_.size(), -1);
        int32_t next = 0;
        bool any = false;
        for (size_t i = 0; i < rows_.size(); ++i) {
            Row& r = *rows_[i];
            if (r.status == SequenceStatus::kRunning) {
                map[i] = next++;
                continue;
            }
            any = true;
            EngineOutput& o = outputs_[r.request];
            o.prefillStart = engine_.firstReuse_[r.request] >= 0 ? engine_.firstReuse_[r.request] : r.prefillStart;
            o.generated.assign(r.history.begin() + r.inputLength, r.history.end());
            o.stateDigest = engine_.digest(r);
            o.cancelled = r.status == SequenceStatus::kCancelled;
            o.failed = r.status == SequenceStatus::kFailed;
            o.joined = r.joined;
            ++o.attempts;
            done_[r.request] = 1;
        }
        if (!any) return true;
        joinsPaused_ = false;  // a retired row gave its pages back
        runtime::TensorView mapping = mappingView();
        ++engine_.stats_.compactions;
        bool ok = request_->beginBatchCompaction(map, next, mapping) && request_->completeBatchCompaction(map);
        // Retired rows are done whatever happened to the compaction; when it failed their slots are quarantined
        // with the request, and fault() recovers (shutdown) before any slot is handed out again.
        std::vector<std::unique_ptr<Row>> survivors;
        for (size_t i = 0; i < rows_.size(); ++i) {
            if (map[i] >= 0) survivors.push_back(std::move(rows_[i]));
            else engine_.releaseResident(rows_[i]->resident);
        }
        rows_ = std::move(survivors);
        return ok;
    }

    // Preemption (recompute, as vLLM's): the newest row leaves the batch unpublished (its prompt stays published
    // from prefill end) and goes back to the front of the queue, to be served again from scratch (a hit on its
    // own prompt, then the same tokens: the model is deterministic per sequence). The oldest row is never
    // preempted, and alone it fits (validate()), so every batch finishes and the queue always shrinks.
    bool preemptNewest() {
        std::vector<int32_t> map(rows_.size());
        for (size_t i = 0; i < rows_.size(); ++i) map[i] = static_cast<int32_t>(i);
        map.back() = -1;
        runtime::TensorView mapping = mappingView();
        ++engine_.stats_.compactions;
        ++engine_.stats_.preemptions;
        bool const ok = request_->beginBatchCompaction(map, static_cast<int32_t>(rows_.size() - 1), mapping) &&
                        request_->completeBatchCompaction(map);
        engine_.releaseResident(rows_.back()->resident);
        int32_t& first = engine_.firstReuse_[rows_.back()->request];
        if (first < 0) first = rows_.back()->prefillStart;  // what the cache gave it, not its own recompute
        queue_.push_back(rows_.back()->request);
        rows_.pop_back();
        joinsPaused_ = true;
        preempted_ = true;
        return ok;
    }

    // A fault anywhere: finish (the coordinator quarantines what the device may still use), recover, and serve
    // the unfinished requests again from scratch.
    bool fault() {
        (void)request_->finish();
        request_.reset();
        engine_.recover();
        for (auto& r : rows_) {
            engine_.releaseResident(r->resident);
            ++engine_.stats_.restarts;
        }
        requeue();
        return false;
    }

    void requeue() {
        for (size_t k = rows_.size(); k-- > 0;) queue_.push_back(rows_[k]->request);
    }
    void releaseAll() {
        for (auto& r : rows_) engine_.releaseResident(r->resident);
    }

    void fillContext() {
        context_.activeBatchSize = static_cast<int32_t>(rows_.size());
        context_.tokenIds.clear();
        context_.rawInputLengths.clear();
        context_.generatedLengths.clear();
        context_.status.clear();
        context_.residentRefs.clear();
        for (auto& r : rows_) {
            context_.tokenIds.push_back(r->history);
            context_.rawInputLengths.push_back(r->inputLength);
            context_.generatedLengths.push_back(r->generated);
            context_.status.push_back(r->status);
            context_.residentRefs.push_back(r->resident);
        }
    }
    std::vector<int32_t> commonLengths() const {
        std::vector<int32_t> common;
        if (speculative_)
            for (auto& r : rows_) common.push_back(r->committed());
        return common;
    }
    runtime::TensorView mappingView() const {
        return runtime::TensorView{storage_.mapping.data(),
                                   runtime::ScalarType::kInt32,
                                   {static_cast<int64_t>(rows_.size())},
                                   engine_.backend_->kind() == device::BackendKind::kCuda ? 0 : -1};
    }

    ReferenceEngine& engine_;
    ReferenceEngineConfig const& config_;
    Storage& storage_;
    std::vector<size_t>& queue_;
    std::vector<EngineRequest> const& requests_;
    std::vector<EngineOutput>& outputs_;
    std::vector<uint8_t>& done_;
    bool const speculative_;
    DecodingKvHeadroom const headroom_;
    // Declared in the original locals' order, so they go in its reverse: the request first, then the rows.
    std::vector<std::unique_ptr<Row>> rows_;
    size_t founders_ = 0;
    runtime::GenerationRequest generation_;
    DecodingInferenceContext context_;
    std::optional<ManagedKVCacheRequest> request_;
    bool joinsPaused_ = false;  // after a preemption, until a row retires
    bool preempted_ = false;
};

bool ReferenceEngine::serveBatch(std::vector<size_t>& queue, std::vector<EngineRequest> const& requests,
                                 std::vector<EngineOutput>& outputs, std::vector<uint8_t>& done) {
    return BatchServer(*this, queue, requests, outputs, done).run();
}

}  // namespace ctxcache::sim
