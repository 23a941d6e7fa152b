// The reference engine's C ABI: create/destroy, serve into a results object (requests with their retention and
// arrival times), stats, invariants, drain, the retention clock.
// Contract of every function: include/ctxcache/c/sim.h.
#include "ctxcache/c/sim.h"

#include <memory>
#include <string>
#include <vector>

#include "api_support.h"
#include "ctxcache.h"
#include "ctxcache/device/device_error.h"
#include "ctxcache/sim/reference_engine.h"
#include "handle_table.h"
#include "handles.h"
#include "retention_support.h"
#include "runtime_conversions.h"
#include "store_link_options.h"

namespace ctxcache::capi {
namespace {

// An engine, and each results object, is a family of its own (capi/call_family.h): one call at a time on it.
struct SimEngineObject {
    std::shared_ptr<CallFamily> family = newFamily("sim engine");
    std::unique_ptr<sim::ReferenceEngine> engine;
    KvEventsDrain kvEvents;
};

struct SimResultsObject {
    std::shared_ptr<CallFamily> family = newFamily("sim results object");
    std::vector<sim::EngineOutput> outputs;
};

auto& simEngines() { return handleTable<SimEngineObject, 0xD1>(); }
auto& simResults() { return handleTable<SimResultsObject, 0xD2>(); }

}  // namespace

KvEventTarget simEngineKvEvents(void const* handle) {
    SimEngineObject* object = simEngines().find(handle);
    if (!object) return {};
    return {&object->engine->coordinator().manager(), &object->kvEvents};
}

namespace {

sim::ReferenceEngine& requireEngine(void const* handle) {
    SimEngineObject* object = simEngines().find(handle);
    if (!object) invalidHandle("engine is not a live ctxc_sim_engine_t");
    return *object->engine;
}

SimResultsObject& requireResults(void const* handle) {
    SimResultsObject* object = simResults().find(handle);
    if (!object) invalidHandle("results is not a live ctxc_sim_results_t");
    return *object;
}

sim::EngineOutput const& requireOutput(void const* handle, size_t index) {
    SimResultsObject& r = requireResults(handle);
    if (index >= r.outputs.size())
        invalidArgument("index " + std::to_string(index) + " is outside the " + std::to_string(r.outputs.size()) +
                        " results");
    return r.outputs[index];
}

std::vector<sim::EngineRequest> toRequests(ctxc_sim_request_t const* requests, size_t count) {
    requireArray(requests, count, "requests");
    std::vector<sim::EngineRequest> out(count);
    for (size_t i = 0; i < count; ++i) {
        ctxc_sim_request_t const& r = requests[i];
        std::string const where = "requests[" + std::to_string(i) + "]";
        requireArray(r.tokens, r.token_count, (where + ".tokens").c_str());
        sim::EngineRequest& e = out[i];
        e.tokens.assign(r.tokens, r.tokens + r.token_count);
        e.maxNewTokens = r.max_new_tokens;
        e.cancelAfter = r.cancel_after >= 1 ? r.cancel_after : -1;
        e.failAfter = r.fail_after >= 1 ? r.fail_after : -1;
        if (r.seating_failures < 0) invalidArgument(where + ".seating_failures is negative");
        e.seatingFailures = r.seating_failures;
        if (r.lora) e.lora = r.lora;
        e.media = mediaItemsOf(r.media, r.media_count, where);
        if (r.retention) e.retention = toRetentionSpec(*r.retention, (where + ".retention").c_str());
        if (r.arrival_ns) e.arrivalNs = *r.arrival_ns;
    }
    return out;
}

}  // namespace
}  // namespace ctxcache::capi

using namespace ctxcache;
using namespace ctxcache::capi;

CTXC_API void ctxc_sim_engine_options_init(ctxc_sim_engine_options_t* options) {
    if (!initSized(options)) return;
    sim::ReferenceEngineConfig const d;
    options->deployment = CTXC_SIM_DEPLOYMENT_ATTENTION;
    options->page_size = d.pageSize;
    options->base_pages = d.basePages;
    options->max_records = d.maxRecords;
    options->max_batch = d.maxBatch;
    options->max_pages_per_sequence = d.maxPagesPerSequence;
    options->snapshot_slots = d.snapshotSlots;
    options->backend = CTXC_BACKEND_CPU;
    options->seed = d.seed;
    options->layers = d.layers;
    options->kv_heads = d.kvHeads;
    options->head_dim = d.headDim;
    options->kv_dtype = CTXC_DTYPE_FP16;
    options->recurrent_layers = d.recurrentLayers;
    options->vocab_size = d.vocabSize;
    options->reuse = 1;
    options->commit_policy = CTXC_COMMIT_INCLUDING_GENERATED_TOKENS;
    options->hash_algorithm = CTXC_HASH_SHA256;
    options->fault_seed = d.faultSeed;
    options->sync_failure_rate = 0.0;
    options->sliding_window = d.slidingWindow;
    options->speculative = CTXC_SIM_SPECULATIVE_NONE;
    options->host_write_policy = CTXC_HOST_WRITE_BACK;
}

CTXC_API ctxc_status_t ctxc_sim_engine_create(const ctxc_sim_engine_options_t* options,
                                              ctxc_sim_engine_t** out_engine) {
    return guard(__func__, [&] {
        requireOut(out_engine, "out_engine") = nullptr;
        ctxc_sim_engine_options_t const& o = requireSized(options, "options");
        if (o.deployment < CTXC_SIM_DEPLOYMENT_ATTENTION || o.deployment > CTXC_SIM_DEPLOYMENT_EAGLE)
            invalidArgument("options->deployment " + std::to_string(o.deployment) + " is not a CTXC_SIM_DEPLOYMENT_*");
        if (o.backend < CTXC_BACKEND_AUTO || o.backend > CTXC_BACKEND_CUDA)
            invalidArgument("options->backend " + std::to_string(o.backend) + " is not a CTXC_BACKEND_*");
        if (!device::isValidDType(o.kv_dtype))
            invalidArgument("options->kv_dtype " + std::to_string(o.kv_dtype) + " is not a CTXC_DTYPE_*");
        if (o.commit_policy != CTXC_COMMIT_INCLUDING_GENERATED_TOKENS &&
            o.commit_policy != CTXC_COMMIT_PREFILL_STATE_ONLY)
            invalidArgument("options->commit_policy " + std::to_string(o.commit_policy) + " is not a CTXC_COMMIT_*");
        if (o.hash_algorithm != CTXC_HASH_SHA256 && o.hash_algorithm != CTXC_HASH_FNV1A128)
            invalidArgument("options->hash_algorithm " + std::to_string(o.hash_algorithm) + " is not a CTXC_HASH_*");
        if (o.speculative != CTXC_SIM_SPECULATIVE_NONE && o.speculative != CTXC_SIM_SPECULATIVE_MTP)
            invalidArgument("options->speculative " + std::to_string(o.speculative) +
                            " is not a CTXC_SIM_SPECULATIVE_*");
        bool const reuse = requireBool(o.reuse, "options->reuse");
        sim::ReferenceEngineConfig c;
        c.deployment = static_cast<sim::DeploymentKind>(o.deployment);
        c.pageSize = o.page_size;
        c.basePages = o.base_pages;
        c.maxRecords = o.max_records;
        c.evictionPolicy = evictionPolicyOf(o.eviction_policy, "options->eviction_policy");
        c.maxBatch = o.max_batch;
        c.maxPagesPerSequence = o.max_pages_per_sequence;
        c.snapshotSlots = o.snapshot_slots;
        c.backend = static_cast<device::BackendKind>(o.backend);
        c.seed = o.seed;
        c.layers = o.layers;
        c.kvHeads = o.kv_heads;
        c.headDim = o.head_dim;
        c.kvDtype = static_cast<device::DType>(o.kv_dtype);
        c.recurrentLayers = o.recurrent_layers;
        c.vocabSize = o.vocab_size;
        c.reuse = reuse;
        c.commitPolicy = static_cast<runtime::ContextCacheCommitPolicy>(o.commit_policy);
        c.hashAlgorithm = static_cast<HashAlgorithm>(o.hash_algorithm);
        c.faultSeed = o.fault_seed;
        c.syncFailureRate = o.sync_failure_rate;
        c.slidingWindow = o.sliding_window;
        c.speculative = static_cast<sim::SpeculativeKind>(o.speculative);
        requireNonNegative(o.host_tier_pages, "options->host_tier_pages");
        c.hostTierPages = o.host_tier_pages;
        c.hostWritePolicy = hostWritePolicyAs<tier::HostWritePolicy>(o.host_write_policy, "options->host_write_policy");
        if (o.host_store) {
            c.hostStore = storeLinkOptionsOf(o.host_store, "options->host_store", &c.storeModel);
            if (o.host_tier_pages == 0) invalidArgument("options->host_store needs options->host_tier_pages > 0");
        }
        auto object = std::make_unique<SimEngineObject>();
        try {
            object->engine = std::make_unique<sim::ReferenceEngine>(c);
        } catch (device::BackendUnavailableError const& e) {
            throw ApiError(CTXC_E_UNSUPPORTED, e.what());
        }
        *out_engine = static_cast<ctxc_sim_engine_t*>(simEngines().add(std::move(object)));
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_destroy(ctxc_sim_engine_t* engine) {
    return guard(__func__, [&] {
        if (!engine) return CTXC_OK;
        if (!simEngines().remove(engine)) invalidHandle("engine is not a live ctxc_sim_engine_t");
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_serve(ctxc_sim_engine_t* engine, const ctxc_sim_request_t* requests,
                                             size_t count, int32_t cold, ctxc_sim_results_t** out_results) {
    return guard(__func__, [&] {
        requireOut(out_results, "out_results") = nullptr;
        sim::ReferenceEngine& e = requireEngine(engine);
        bool const coldRun = requireBool(cold, "cold");
        std::vector<sim::EngineRequest> const reqs = toRequests(requests, count);
        auto results = std::make_unique<SimResultsObject>();
        try {
            results->outputs = coldRun ? e.coldReference(reqs) : e.serve(reqs);
        } catch (InterruptedError const& x) {
            throw ApiError(CTXC_E_INTERRUPTED, x.what());
        }
        *out_results = static_cast<ctxc_sim_results_t*>(simResults().add(std::move(results)));
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_interrupt(ctxc_sim_engine_t* engine, int32_t requested) {
    return guard(__func__, [&] {
        bool const on = requireBool(requested, "requested");
        // Meant to run beside the engine's serve on another thread: it reaches the engine without entering its
        // call family (which the serve holds) and touches only the interrupt flag, an atomic.
        if (!simEngines().touchWithoutEntering(engine, [on](SimEngineObject& o) { o.engine->requestInterrupt(on); }))
            invalidHandle("engine is not a live ctxc_sim_engine_t");
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_stats(const ctxc_sim_engine_t* engine, ctxc_sim_engine_stats_t* out_stats) {
    return guard(__func__, [&] {
        sim::ReferenceEngine& e = requireEngine(engine);
        ctxc_sim_engine_stats_t& out = requireSized(out_stats, "out_stats");
        sim::EngineStats const& s = e.stats();
        out.batches = s.batches;
        out.joiners = s.joiners;
        out.joiner_no_capacity = s.joinerNoCapacity;
        out.compactions = s.compactions;
        out.decode_steps = s.decodeSteps;
        out.sync_calls = s.syncCalls;
        out.sync_failures = s.syncFailures;
        out.restarts = s.restarts;
        out.capacity_retries = s.capacityRetries;
        out.retractions = s.retractions;
        out.preemptions = s.preemptions;
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_peak_pages_per_sequence(const ctxc_sim_engine_t* engine, int32_t* out_pages) {
    return guard(__func__, [&] {
        int32_t& out = requireOut(out_pages, "out_pages");
        out = requireEngine(engine).peakPagesPerSequence();
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_poll_store(ctxc_sim_engine_t* engine, size_t* out_applied,
                                                  size_t* out_in_flight) {
    return guard(__func__, [&] {
        size_t& applied = requireOut(out_applied, "out_applied");
        sim::ReferenceEngine& e = requireEngine(engine);
        runtime::ContextCacheCoordinator* c = e.swaManager() ? nullptr : &e.coordinator();
        applied = c ? c->pollStore() : 0;
        if (out_in_flight) *out_in_flight = c ? c->storeBatchesInFlight() : 0;
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_host_tier_memory(const ctxc_sim_engine_t* engine, void** out_data,
                                                        size_t* out_bytes) {
    return guard(__func__, [&] {
        void*& data = requireOut(out_data, "out_data");
        size_t& bytes = requireOut(out_bytes, "out_bytes");
        sim::ReferenceEngine& e = requireEngine(engine);
        device::HostBuffer const* memory = e.swaManager() ? nullptr : e.coordinator().hostTierMemory();
        data = memory ? memory->data() : nullptr;
        bytes = memory ? memory->size() : 0;
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_metrics(const ctxc_sim_engine_t* engine,
                                               ctxc_context_cache_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        sim::ReferenceEngine& e = requireEngine(engine);
        fillMetrics(e.metrics(), requireSized(out_metrics, "out_metrics"));
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_check_invariants(const ctxc_sim_engine_t* engine) {
    return guard(__func__, [&] { requireEngine(engine).checkInvariants(); });
}

CTXC_API ctxc_status_t ctxc_sim_engine_drain(ctxc_sim_engine_t* engine, int32_t* out_full) {
    return guard(__func__, [&] {
        int32_t& full = requireOut(out_full, "out_full");
        std::string why;
        full = requireEngine(engine).drainAndCheckPoolsFull(&why) ? 1 : 0;
        if (!full) setLastError("ctxc_sim_engine_drain", why.c_str());
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_retention_metrics(const ctxc_sim_engine_t* engine,
                                                         ctxc_retention_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        ctxc_retention_metrics_t& out = requireSized(out_metrics, "out_metrics");
        fillRetentionMetrics(requireEngine(engine).coordinator().manager().retentionMetrics(), out);
    });
}

CTXC_API ctxc_status_t ctxc_sim_engine_set_retention_time(ctxc_sim_engine_t* engine, int64_t now_ns) {
    return guard(__func__, [&] { requireEngine(engine).setRetentionTime(now_ns); });
}

CTXC_API ctxc_status_t ctxc_sim_results_count(const ctxc_sim_results_t* results, size_t* out_count) {
    return getInto(__func__, out_count, "out_count", [&] { return requireResults(results).outputs.size(); });
}

CTXC_API ctxc_status_t ctxc_sim_results_output(const ctxc_sim_results_t* results, size_t index,
                                               ctxc_sim_output_t* out_output) {
    return guard(__func__, [&] {
        sim::EngineOutput const& o = requireOutput(results, index);
        ctxc_sim_output_t& out = requireSized(out_output, "out_output");
        out.prefill_start = o.prefillStart;
        out.generated_count = static_cast<int32_t>(o.generated.size());
        out.cancelled = o.cancelled ? 1 : 0;
        out.joined = o.joined ? 1 : 0;
        out.failed = o.failed ? 1 : 0;
        out.attempts = o.attempts;
        for (size_t i = 0; i < 32; ++i) out.state_digest[i] = o.stateDigest[i];
    });
}

CTXC_API ctxc_status_t ctxc_sim_results_generated(const ctxc_sim_results_t* results, size_t index,
                                                  const int32_t** out_tokens, size_t* out_count) {
    return guard(__func__, [&] {
        int32_t const*& tokens = requireOut(out_tokens, "out_tokens");
        size_t& count = requireOut(out_count, "out_count");
        sim::EngineOutput const& o = requireOutput(results, index);
        tokens = o.generated.data();
        count = o.generated.size();
    });
}

CTXC_API ctxc_status_t ctxc_sim_results_destroy(ctxc_sim_results_t* results) {
    return guard(__func__, [&] {
        if (!results) return CTXC_OK;
        if (!simResults().remove(results)) invalidHandle("results is not a live ctxc_sim_results_t");
        return CTXC_OK;
    });
}
