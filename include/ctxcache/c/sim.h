/* ctxcache C ABI: the reference engine (simulation): a deterministic stand-in for an inference engine that serves
 * requests through the runtime (runtime.h) and writes real KV and recurrent state, and its results.
 * An engine, and each results object, is a single-writer family of its own. */
#ifndef CTXCACHE_C_SIM_H
#define CTXCACHE_C_SIM_H

#include "ctxcache/c/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The reference engine (simulation) --------------------------------------------------------------------- */

/* A deterministic stand-in for an inference engine that serves requests through the runtime (the
 * ManagedKVCacheRequest facade over a context-cache coordinator) and writes real KV, draft KV and recurrent state
 * through the page tables and resident slots the runtime manages. A request served with reuse must produce exactly
 * the generated tokens and state digest of a cold run (reuse off): ctxc_sim_engine_serve with cold = 1 serves on a
 * fresh engine of the same configuration with reuse off. Single writer; not thread-safe. */
typedef struct ctxc_sim_engine ctxc_sim_engine_t;
typedef struct ctxc_sim_results ctxc_sim_results_t;

enum {
    CTXC_SIM_DEPLOYMENT_ATTENTION = 0, /* attention only, vanilla reuse, in-flight joiners */
    CTXC_SIM_DEPLOYMENT_HYBRID = 1,    /* attention + recurrent: exact checkpoints */
    CTXC_SIM_DEPLOYMENT_RECURRENT = 2, /* recurrent state only */
    CTXC_SIM_DEPLOYMENT_EAGLE = 3      /* attention + an EAGLE draft with its own KV pool */
};
enum {
    CTXC_SIM_SPECULATIVE_NONE = 0,
    CTXC_SIM_SPECULATIVE_MTP = 1 /* hybrid + an MTP head: its draft at p reads the base hidden row of p */
};

typedef struct ctxc_sim_engine_options {
    uint32_t struct_size;
    int32_t deployment;             /* CTXC_SIM_DEPLOYMENT_* */
    int32_t page_size;              /* 16 */
    int32_t base_pages;             /* 256: base pool pages (and draft pool pages for EAGLE); > 0, or >= 0 for
                                       CTXC_SIM_DEPLOYMENT_RECURRENT (no attention layer, so no KV page) */
    int32_t max_records;            /* 1024 */
    int32_t max_batch;              /* 8 */
    int32_t max_pages_per_sequence; /* 64 */
    int32_t snapshot_slots;         /* 64: recurrent and partial-KV snapshot slots (checkpoint deployments) */
    int32_t backend;                /* CTXC_BACKEND_CPU (default), CTXC_BACKEND_CUDA or CTXC_BACKEND_AUTO */
    uint32_t seed;
    int32_t layers;                 /* 2 */
    int32_t kv_heads;               /* 2 */
    int32_t head_dim;               /* 8 */
    int32_t kv_dtype;               /* CTXC_DTYPE_FP16 */
    int32_t recurrent_layers;       /* 2 */
    int32_t vocab_size;             /* 32000 */
    int32_t reuse;                  /* 1; 0 = every request bypasses lookup and publication */
    int32_t commit_policy;          /* CTXC_COMMIT_* */
    int32_t hash_algorithm;         /* CTXC_HASH_SHA256 */
    uint32_t fault_seed;            /* 1 */
    double sync_failure_rate;       /* 0: probability that one device synchronisation fails (fault injection) */
    int32_t sliding_window;         /* 0; W > 0: a sliding-window model (attention deployment, reuse = 0) that reads
                                       only its last W positions, served through the bounded-SWA backend
                                       (BoundedSwaKVPageManager); cold = 1 then keeps the full history */
    int32_t speculative; /* CTXC_SIM_SPECULATIVE_NONE; _MTP with CTXC_SIM_DEPLOYMENT_HYBRID: an MTP head with
                            its own draft pool (Hybrid+MTP; needs CTXC_COMMIT_PREFILL_STATE_ONLY; requests
                            are served one at a time) */
    int32_t eviction_policy; /* CTXC_EVICTION_RECORD_LRU (default) or CTXC_EVICTION_RECORD_LRU_TRIM */
    int32_t host_tier_pages; /* >= 0: a host-memory tier of this many pages (attention or EAGLE; 0: none) */
    int32_t host_write_policy; /* CTXC_HOST_WRITE_BACK (default) or CTXC_HOST_WRITE_THROUGH */
    /* NULL, or a byte store under the host tier (as ctxc_coordinator_options_t::host_store; needs
     * host_tier_pages > 0; a cold run never uses it). Since CTXC_ABI_VERSION 5. */
    const ctxc_store_link_options_t *host_store;
} ctxc_sim_engine_options_t;

typedef struct ctxc_sim_request {
    const int32_t *tokens;
    size_t token_count;
    int32_t max_new_tokens; /* >= 1 (the token sampled at prefill end is the first) */
    int32_t cancel_after; /* >= 1: cancelled once it generated this many tokens; <= 0: never */
    const char *lora; /* NULL or "" = the base model */
    const ctxc_media_item_t *media; /* the runtime's media items */
    size_t media_count;
    int32_t fail_after; /* >= 1: fails (an engine error) once it generated this many tokens; <= 0: never */
    int32_t seating_failures; /* as an in-flight joiner, its first this many seatings fail and are retracted */
    /* NULL: the default; else what its publications carry (as ctxc_sequence_request_t::retention; a bad spec is
     * CTXC_E_CONTRACT before anything is served). Since CTXC_ABI_VERSION 4. */
    const ctxc_retention_spec_t *retention;
    /* NULL: leaves the retention clock alone; else the engine drives it to *arrival_ns (nanoseconds) as the
     * request is seated, never backwards (a request seated again after a preemption or fault, or one arriving
     * earlier than the clock, leaves it where it is). Since CTXC_ABI_VERSION 4. */
    const int64_t *arrival_ns;
} ctxc_sim_request_t;

typedef struct ctxc_sim_output {
    uint32_t struct_size;
    int32_t prefill_start; /* where its prefill began: the reuse length (a preempted request: its first admission's) */
    int32_t generated_count;
    int32_t cancelled;
    int32_t joined; /* admitted in flight into a running batch */
    int32_t failed; /* failed by fail_after (never published at decode end) */
    int32_t attempts; /* > 1 when a synchronisation fault made it start over */
    uint8_t state_digest[32]; /* SHA-256 of its final KV, draft KV and recurrent bytes in logical order */
} ctxc_sim_output_t;

typedef struct ctxc_sim_engine_stats {
    uint32_t struct_size;
    uint64_t batches, joiners, joiner_no_capacity, compactions, decode_steps, sync_calls, sync_failures, restarts,
        capacity_retries, retractions;
    uint64_t preemptions; /* rows preempted (served again from scratch) because a decode step could not grow */
} ctxc_sim_engine_stats_t;

CTXC_API void ctxc_sim_engine_options_init(ctxc_sim_engine_options_t *options);
/* CTXC_E_CONTRACT on a configuration the engine cannot build (e.g. a zero page size); CTXC_E_UNSUPPORTED when
 * the backend asked for is unavailable. */
CTXC_API ctxc_status_t ctxc_sim_engine_create(const ctxc_sim_engine_options_t *options, ctxc_sim_engine_t **out_engine);
CTXC_API ctxc_status_t ctxc_sim_engine_destroy(ctxc_sim_engine_t *engine);
/* Serve `count` requests in order (cold = 1: on a fresh engine of this configuration with reuse off). On CTXC_OK,
 * *out_results is a new results object (ctxc_sim_results_destroy). A malformed request (empty prompt, max_new_tokens
 * < 1, a prompt that can never fit, a media span outside it) is CTXC_E_CONTRACT before anything is served. */
CTXC_API ctxc_status_t ctxc_sim_engine_serve(ctxc_sim_engine_t *engine, const ctxc_sim_request_t *requests,
                                             size_t count, int32_t cold, ctxc_sim_results_t **out_results);
/* requested = 1: the ctxc_sim_engine_serve running on `engine` (or the next one) stops at its next batch or decode
 * step with CTXC_E_INTERRUPTED, no results, and the engine consistent (no live request; what finished stays
 * published); that consumes the request. requested = 0 withdraws a request not yet consumed. The one call that may
 * run on another thread concurrently with a call on the same engine (an atomic store): e.g. from a signal
 * watcher, so a serve of any size ends within a decode step of Ctrl-C. The engine must stay alive meanwhile. */
CTXC_API ctxc_status_t ctxc_sim_engine_interrupt(ctxc_sim_engine_t *engine, int32_t requested);
CTXC_API ctxc_status_t ctxc_sim_engine_stats(const ctxc_sim_engine_t *engine, ctxc_sim_engine_stats_t *out_stats);
/* The metrics of the engine's coordinator (as ctxc_coordinator_metrics). */
CTXC_API ctxc_status_t ctxc_sim_engine_metrics(const ctxc_sim_engine_t *engine,
                                               ctxc_context_cache_metrics_t *out_metrics);
/* The coordinator's and manager's invariants, and that no request is live: CTXC_E_INVARIANT naming the first
 * violation. */
CTXC_API ctxc_status_t ctxc_sim_engine_check_invariants(const ctxc_sim_engine_t *engine);
/* With sliding_window > 0: the most pages one sequence had mapped at once (at most the private reservation,
 * 2 * (ceil(W / page_size) + 1) + 1); 0 for an engine without a window. */
CTXC_API ctxc_status_t ctxc_sim_engine_peak_pages_per_sequence(const ctxc_sim_engine_t *engine, int32_t *out_pages);
/* As ctxc_coordinator_poll_store on the engine's coordinator (0 and 0 without one). */
CTXC_API ctxc_status_t ctxc_sim_engine_poll_store(ctxc_sim_engine_t *engine, size_t *out_applied,
                                                  size_t *out_in_flight);
/* The host tier's memory (as ctxc_coordinator_host_tier_memory): NULL and 0 without a tier (or a coordinator). */
CTXC_API ctxc_status_t ctxc_sim_engine_host_tier_memory(const ctxc_sim_engine_t *engine, void **out_data,
                                                        size_t *out_bytes);
/* Evict every record, then *out_full = 1 when every pool is full again (else 0, and ctxc_last_error() says which
 * pool is not). */
CTXC_API ctxc_status_t ctxc_sim_engine_drain(ctxc_sim_engine_t *engine, int32_t *out_full);
/* Drives the retention clock of the engine's coordinator (as ctxc_coordinator_set_retention_time: never backwards,
 * CTXC_E_CONTRACT; CTXC_E_CONTRACT too for a sliding-window engine, which has no coordinator). */
CTXC_API ctxc_status_t ctxc_sim_engine_set_retention_time(ctxc_sim_engine_t *engine, int64_t now_ns);
/* The retention outcomes of the engine's coordinator's manager (as ctxc_manager_retention_metrics;
 * CTXC_E_CONTRACT for a sliding-window engine). */
CTXC_API ctxc_status_t ctxc_sim_engine_retention_metrics(const ctxc_sim_engine_t *engine,
                                                         ctxc_retention_metrics_t *out_metrics);

CTXC_API ctxc_status_t ctxc_sim_results_count(const ctxc_sim_results_t *results, size_t *out_count);
CTXC_API ctxc_status_t ctxc_sim_results_output(const ctxc_sim_results_t *results, size_t index,
                                               ctxc_sim_output_t *out_output);
/* The generated tokens of request `index`: a view valid until the results are destroyed. */
CTXC_API ctxc_status_t ctxc_sim_results_generated(const ctxc_sim_results_t *results, size_t index,
                                                  const int32_t **out_tokens, size_t *out_count);
CTXC_API ctxc_status_t ctxc_sim_results_destroy(ctxc_sim_results_t *results);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_SIM_H */
