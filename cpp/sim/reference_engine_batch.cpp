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
        : e_(engine),
          c_(engine.config_),
          st_(*engine.storage_),
          queue_(queue),
          requests_(requests),
          outputs_(outputs),
          done_(done),
          speculative_(c_.deployment == DeploymentKind::kEagle || engine.mtp()),
          headroom_{1, speculative_ ? 1 : 0} {}

    bool run() {
        seatFounders();
        if (!begin()) return false;
        if (!prefill()) return fault();
        for (auto& r : rows_)
            if (r->generated >= r->maxNewTokens) r->status = SequenceStatus::kFinished;
        if (!retire()) return fault();
        bool const joins = e_.coordinator_ && e_.coordinator_->supportsLiveSequenceAdmission();
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
        founders_ = std::min(queue_.size(), static_cast<size_t>(e_.mtp() ? 1 : e_.founderCap_));
        for (size_t k = 0; k < founders_; ++k) {
            size_t const index = queue_.back();
            queue_.pop_back();
            EngineRequest const& r = requests_[index];
            std::unique_ptr<Row> row = e_.newRow(index, r, e_.takeResident());
            runtime::SequenceRequest sr;
            sr.tokenIds = r.tokens;
            sr.loraName = r.lora;
            sr.media = r.media;
            if (!c_.reuse) sr.lookupPolicy = ContextCacheLookupPolicy::kBypass;
            gr_.sequences.push_back(std::move(sr));
            ctx_.residentRefs.push_back(row->resident);
            rows_.push_back(std::move(row));
        }
        ctx_.activeBatchSize = static_cast<int32_t>(rows_.size());
        ++e_.stats_.batches;
    }

    // Begins the request; false (the founders requeued, their slots released) when it could not be seated.
    bool begin() {
        std::optional<ManagedKVCacheRequest> seated =
            ManagedKVCacheRequest::begin(e_.coordinator_.get(), e_.swa_.get(), gr_, ctx_, speculative_, headroom_,
                                         runtime::DecodingTokenStateContract::kCommittedPlusLookahead, c_.commitPolicy);
        if (seated) {
            m_.emplace(std::move(*seated));  // the request is move-constructible, not assignable
            return true;
        }
        releaseAll();
        requeue();
        if (e_.backendPoisoned()) {
            e_.recover();
            return false;
        }
        if (rows_.size() == 1)
            contract("request " + str(static_cast<int64_t>(rows_[0]->request)) +
                     " does not fit the cache: " + e_.backendFailure());
        // The founders could not be seated together: the next wave tries half as many (each wave seats at
        // least one, which validate() proved fits alone, so the queue always shrinks).
        ++e_.stats_.capacityRetries;
        e_.founderCap_ = std::max<int32_t>(1, static_cast<int32_t>(rows_.size() / 2));
        return false;
    }

    bool prefill() {
        ManagedKVCacheRequest& m = *m_;
        if (std::vector<int32_t> const* starts = m.prefillStarts())
            for (size_t i = 0; i < rows_.size(); ++i) rows_[i]->prefillStart = (*starts)[i];
        if (!m.preparePrefill()) return false;
        if (st_.baseLengths && !e_.swa_) {
            std::vector<int32_t> const lengths = st_.baseLengths->read();
            for (size_t i = 0; i < rows_.size(); ++i)
                if (lengths[i] != rows_[i]->prefillStart)
                    throw InvariantError("ReferenceEngine: device KV length " + str(lengths[i]) + " of row " +
                                         str(static_cast<int64_t>(i)) + " is not its prefill start " +
                                         str(rows_[i]->prefillStart));
        }
        std::vector<Row*> live;
        for (auto& r : rows_) live.push_back(r.get());
        if (e_.mtp()) {
            // The boundary row of a hit comes from the checkpoint: the base word at start - 1 is not recomputed.
            Row& r = *rows_[0];
            r.hidden.assign(static_cast<size_t>(r.inputLength) * kMtpHiddenSize, 0);
            if (r.prefillStart > 0) {
                runtime::TensorView boundary = e_.boundaryView();
                if (!m.restoreHybridMtpBoundaryHidden(0, boundary, 0)) return false;
                st_.boundary.read(0, r.hidden.data() + static_cast<size_t>(r.prefillStart - 1) * kMtpHiddenSize,
                                  kMtpHiddenSize * sizeof(uint16_t));
            }
        }
        if (e_.swa_) {
            if (!e_.prefillWindowed(m, live)) return false;
        } else {
            e_.prefillRows(live);
        }
        if (e_.mtp()) {
            // Mid-prefill: the hidden rows, the draft up to the boundary, then the checkpoint at E = n.
            Row& r = *rows_[0];
            e_.computeHidden(r, r.prefillStart, r.inputLength);
            e_.mtpDraft(r, std::max(0, r.prefillStart - 1), r.inputLength - 1);
            st_.boundary.write(0, r.hidden.data() + static_cast<size_t>(r.inputLength - 1) * kMtpHiddenSize,
                               kMtpHiddenSize * sizeof(uint16_t));
            if (!m.publishHybridMtpEndpoint(0, r.inputLength, e_.boundaryView(), 0)) return false;
        }
        if (!m.enqueuePrefillCaptures()) return false;
        e_.finishPrefill(live);
        e_.setLengths(rows_);
        fillContext();
        return m.completePrefill(ctx_, commonLengths());
    }

    // One decode step: cancellations, growth (preempting the newest rows until it fits), the kernels, the
    // step's completion and the retirement of finished rows.
    bool decodeStep() {
        if (e_.interruptSource_->load(std::memory_order_relaxed)) {
            (void)m_->finish();
            m_.reset();
            releaseAll();
            if (e_.backendPoisoned()) e_.recover();
            e_.checkInterrupt();
        }
        // Cancellations arrive before the step: those rows hold.
        for (auto& r : rows_)
            if (r->cancelAfter >= 1 && r->generated >= r->cancelAfter && r->status == SequenceStatus::kRunning)
                r->status = SequenceStatus::kCancelled;
            else if (r->failAfter >= 1 && r->generated >= r->failAfter && r->status == SequenceStatus::kRunning)
                r->status = SequenceStatus::kFailed;
        // Growth for this step must fit: preempt the newest rows until it does (the coordinator's own test).
        if (e_.coordinator_) {
            runtime::ContextCacheRequest* cr = m_->contextRequest();
            while (rows_.size() > 1 && cr && !e_.coordinator_->canPrepareDecodeStep(cr->handle(), headroom_))
                if (!preemptNewest()) return false;
        }
        fillContext();
        if (!m_->prepareDecodeStep(ctx_, headroom_)) {
            if (e_.backendPoisoned()) return false;
            // Growth failed although canPrepareDecodeStep allowed it, or a lone row cannot grow: a bug, never a
            // retry loop.
            std::string const why = e_.backendFailure();
            (void)m_->finish();
            m_.reset();
            releaseAll();
            throw InvariantError("ReferenceEngine: a decode step of " + str(static_cast<int64_t>(rows_.size())) +
                                 " rows could not grow: " + why);
        }
        std::vector<Row*> live;
        for (auto& r : rows_)
            if (r->status == SequenceStatus::kRunning) live.push_back(r.get());
        e_.decodeRows(live);
        e_.setLengths(rows_);
        for (Row* r : live)
            if (r->generated >= r->maxNewTokens) r->status = SequenceStatus::kFinished;
        fillContext();
        if (!m_->completeDecodeStep(ctx_, commonLengths())) return false;
        ++e_.stats_.decodeSteps;
        return retire();
    }

    // Joiners take the free rows at this step boundary (attention-only, non-speculative deployments).
    bool admitJoiners() {
        while (!joinsPaused_ && !queue_.empty() && rows_.size() < static_cast<size_t>(c_.maxBatch) && !rows_.empty()) {
            size_t const index = queue_.back();
            EngineRequest const& req = requests_[index];
            ResidentRef const resident = e_.takeResident();
            int32_t start = 0;
            runtime::ContextCacheRequest::AdmitSequenceStatus const status =
                c_.reuse ? m_->admitSequence(req.tokens, req.lora, headroom_, start, resident, nullptr, {}, req.media)
                         : runtime::ContextCacheRequest::AdmitSequenceStatus::kFailed;
            if (status != runtime::ContextCacheRequest::AdmitSequenceStatus::kAdmitted) {
                e_.releaseResident(resident);
                if (status == runtime::ContextCacheRequest::AdmitSequenceStatus::kNoCapacity)
                    ++e_.stats_.joinerNoCapacity;
                return !e_.backendPoisoned();
            }
            queue_.pop_back();
            std::unique_ptr<Row> row = e_.newRow(index, req, resident);
            row->prefillStart = start;
            row->joined = true;
            Row* joiner = row.get();
            int32_t const seat = static_cast<int32_t>(rows_.size());
            rows_.push_back(std::move(row));
            e_.prefillRows({joiner});
            if (e_.seatingFailuresLeft_[index] > 0) {
                // Seating failed after the joiner's prefill wrote its private pages: retract. Nothing it wrote
                // was published, and its pages go back to the pool; it stays queued for a later boundary.
                --e_.seatingFailuresLeft_[index];
                rows_.pop_back();
                if (!m_->retractSequenceAdmission()) return false;
                e_.releaseResident(resident);
                queue_.push_back(index);
                ++e_.stats_.retractions;
                return true;
            }
            st_.baseLengths->setEntry(seat, joiner->inputLength);
            e_.finishPrefill({joiner});
            ++e_.stats_.joiners;
            if (!m_->finalizeSequenceAdmission(seat, joiner->history.back(), joiner->inputLength)) return false;
            if (joiner->generated >= joiner->maxNewTokens) joiner->status = SequenceStatus::kFinished;
            if (!retire()) return false;
        }
        return true;
    }

    void finishWave() {
        if (!m_->finish()) {
            m_.reset();
            e_.recover();
        }
        // The next wave (additive increase, multiplicative decrease): one founder more after a wave that needed
        // no preemption, half after one that did. Doubling back instead made every other wave fail to seat, and a
        // failed seating evicts the records its partial acquires made room with.
        if (!preempted_) e_.founderCap_ = std::min(c_.maxBatch, e_.founderCap_ + 1);
        else e_.founderCap_ = std::max<int32_t>(1, std::min(e_.founderCap_, static_cast<int32_t>(founders_)) / 2);
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
            o.prefillStart = e_.firstReuse_[r.request] >= 0 ? e_.firstReuse_[r.request] : r.prefillStart;
            o.generated.assign(r.history.begin() + r.inputLength, r.history.end());
            o.stateDigest = e_.digest(r);
            o.cancelled = r.status == SequenceStatus::kCancelled;
            o.failed = r.status == SequenceStatus::kFailed;
            o.joined = r.joined;
            ++o.attempts;
            done_[r.request] = 1;
        }
        if (!any) return true;
        joinsPaused_ = false;  // a retired row gave its pages back
        runtime::TensorView mapping = mappingView();
        ++e_.stats_.compactions;
        bool ok = m_->beginBatchCompaction(map, next, mapping) && m_->completeBatchCompaction(map);
        // Retired rows are done whatever happened to the compaction; when it failed their slots are quarantined
        // with the request, and fault() recovers (shutdown) before any slot is handed out again.
        std::vector<std::unique_ptr<Row>> survivors;
        for (size_t i = 0; i < rows_.size(); ++i) {
            if (map[i] >= 0) survivors.push_back(std::move(rows_[i]));
            else e_.releaseResident(rows_[i]->resident);
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
        ++e_.stats_.compactions;
        ++e_.stats_.preemptions;
        bool const ok = m_->beginBatchCompaction(map, static_cast<int32_t>(rows_.size() - 1), mapping) &&
                        m_->completeBatchCompaction(map);
        e_.releaseResident(rows_.back()->resident);
        int32_t& first = e_.firstReuse_[rows_.back()->request];
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
        (void)m_->finish();
        m_.reset();
        e_.recover();
        for (auto& r : rows_) {
            e_.releaseResident(r->resident);
            ++e_.stats_.restarts;
        }
        requeue();
        return false;
    }

    void requeue() {
        for (size_t k = rows_.size(); k-- > 0;) queue_.push_back(rows_[k]->request);
    }
    void releaseAll() {
        for (auto& r : rows_) e_.releaseResident(r->resident);
    }

    void fillContext() {
        ctx_.activeBatchSize = static_cast<int32_t>(rows_.size());
        ctx_.tokenIds.clear();
        ctx_.rawInputLengths.clear();
        ctx_.generatedLengths.clear();
        ctx_.status.clear();
        ctx_.residentRefs.clear();
        for (auto& r : rows_) {
            ctx_.tokenIds.push_back(r->history);
            ctx_.rawInputLengths.push_back(r->inputLength);
            ctx_.generatedLengths.push_back(r->generated);
            ctx_.status.push_back(r->status);
            ctx_.residentRefs.push_back(r->resident);
        }
    }
    std::vector<int32_t> commonLengths() const {
        std::vector<int32_t> common;
        if (speculative_)
            for (auto& r : rows_) common.push_back(r->committed());
        return common;
    }
    runtime::TensorView mappingView() const {
        return runtime::TensorView{st_.mapping.data(),
                                   runtime::ScalarType::kInt32,
                                   {static_cast<int64_t>(rows_.size())},
                                   e_.backend_->kind() == device::BackendKind::kCuda ? 0 : -1};
    }

    ReferenceEngine& e_;
    ReferenceEngineConfig const& c_;
    Storage& st_;
    std::vector<size_t>& queue_;
    std::vector<EngineRequest> const& requests_;
    std::vector<EngineOutput>& outputs_;
    std::vector<uint8_t>& done_;
    bool const speculative_;
    DecodingKvHeadroom const headroom_;
    // Declared in the original locals' order, so they go in its reverse: the request first, then the rows.
    std::vector<std::unique_ptr<Row>> rows_;
    size_t founders_ = 0;
    runtime::GenerationRequest gr_;
    DecodingInferenceContext ctx_;
    std::optional<ManagedKVCacheRequest> m_;
    bool joinsPaused_ = false;  // after a preemption, until a row retires
    bool preempted_ = false;
};

bool ReferenceEngine::serveBatch(std::vector<size_t>& queue, std::vector<EngineRequest> const& requests,
                                 std::vector<EngineOutput>& outputs, std::vector<uint8_t>& done) {
    return BatchServer(*this, queue, requests, outputs, done).run();
}

}  // namespace ctxcache::sim
