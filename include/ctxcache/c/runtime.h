/* ctxcache C ABI: the runtime: a coordinator drives a manager over the device objects an engine's kernels read,
 * and a request (the ManagedKVCacheRequest facade) turns the engine's decoding context into
 * coordinator steps (the lifecycle is below), on a coordinator or on the bounded-SWA backend (swa.h).
 * A coordinator, its requests and its device objects are their backend's single-writer family. */
#ifndef CTXCACHE_C_RUNTIME_H
#define CTXCACHE_C_RUNTIME_H

#include "ctxcache/c/device.h"
#include "ctxcache/c/manager.h"
#include "ctxcache/c/retention.h"
#include "ctxcache/c/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime: coordinator and requests ------------------------------------------------------------------- */

/* The runtime layer drives a manager the way an engine's request lifecycle needs it, over the device objects the
 * engine's kernels read (include/ctxcache/runtime/): a coordinator owns a context-cache manager and binds
 * page-table rows, device KV lengths and snapshots for one request at a time; a request (the
 * ManagedKVCacheRequest facade) turns the engine's decoding context into coordinator steps. Lifecycle, every step
 * on one request in this order (a step out of order is CTXC_E_CONTRACT and changes nothing):
 *   ctxc_kv_request_begin -> prepare_prefill -> [engine prefill] -> enqueue_prefill_captures -> complete_prefill
 *   -> { prepare_decode_step -> [engine step] -> complete_decode_step
 *      | admit_sequence -> [seat the joiner] -> finalize_sequence_admission / retract_sequence_admission
 *      | begin_batch_compaction -> [engine compacts] -> complete_batch_compaction }* -> finish -> destroy
 *
 * A request may run on the bounded-SWA backend instead (ctxc_kv_request_begin_swa, at the end of this file; the
 * manager is swa.h's).
 * Errors (the table in ctxcache.h applies): a broken contract (a step out of order, a context that does not match
 * the batch, a stale resident epoch, a slot held twice, advances that break the token-state contract, a map that
 * reorders survivors, a deployment the profile cannot serve) is CTXC_E_CONTRACT and changes nothing; a step the
 * coordinator could not serve is CTXC_E_REQUEST_FAILED (the request is then finishing: only finish remains);
 * a failed synchronisation quarantines the request (its leases stay pinned) and is CTXC_E_POISONED, as is every
 * begin until ctxc_coordinator_shutdown succeeds.
 * Lifetimes: a coordinator keeps the device objects it was built over alive (their handles may be destroyed in any
 * order). Destroying a coordinator with live requests synchronises and releases them and orphans their handles
 * (every later use is CTXC_E_INVALID_HANDLE; ctxc_kv_request_destroy frees them) and returns
 * CTXC_E_LEASES_OUTSTANDING: the coordinator is destroyed either way. Its other undestroyed requests (finished or
 * quarantined) are orphaned the same way, without that status. Destroying a request before finish abandons
 * it (nothing is published; pending device work is synchronised first, and a failed synchronisation quarantines).
 * Streams: void* (a cudaStream_t on CUDA, NULL on the CPU backend).
 * Threading: a coordinator, its requests and its device objects follow one single-writer contract (they are the
 * device backend's family: an overlapping call is CTXC_E_CONCURRENT_USE); the synchronizer is called on the
 * calling thread, from inside coordinator and request calls (destroy included), and must not call back into that
 * family (CTXC_E_CONCURRENT_USE). */

enum { CTXC_MODEL_ATTENTION_ONLY = 0, CTXC_MODEL_PURE_RECURRENT = 1, CTXC_MODEL_HYBRID = 2 };
enum { CTXC_TOKEN_STATE_COMMITTED_PLUS_LOOKAHEAD = 0, CTXC_TOKEN_STATE_FULLY_COMMITTED = 1 };
enum { CTXC_COMMIT_INCLUDING_GENERATED_TOKENS = 0, CTXC_COMMIT_PREFILL_STATE_ONLY = 1 };
enum { CTXC_SEQUENCE_RUNNING = 0, CTXC_SEQUENCE_FINISHED = 1, CTXC_SEQUENCE_CANCELLED = 2, CTXC_SEQUENCE_FAILED = 3 };
enum { CTXC_ADMIT_ADMITTED = 0, CTXC_ADMIT_NO_CAPACITY = 1, CTXC_ADMIT_FAILED = 2 };
enum { CTXC_MEDIA_IMAGE = 0, CTXC_MEDIA_AUDIO = 1, CTXC_MEDIA_VIDEO = 2 };
/* Element types of a tensor view: the first four equal CTXC_DTYPE_*. */
enum {
    CTXC_SCALAR_FP16 = 0,
    CTXC_SCALAR_BF16 = 1,
    CTXC_SCALAR_FP8_E4M3 = 2,
    CTXC_SCALAR_FP32 = 3,
    CTXC_SCALAR_INT32 = 4,
    CTXC_SCALAR_INT64 = 5,
    CTXC_SCALAR_UINT8 = 6
};
/* ctxc_sequence_request_t::lookup_policy: no per-sequence override (the request's policy applies). */
enum { CTXC_INHERIT_LOOKUP_POLICY = -1 };

typedef struct ctxc_coordinator ctxc_coordinator_t;
typedef struct ctxc_kv_request ctxc_kv_request_t;

/* Returns 0 when the work enqueued on `stream` completed, nonzero when it failed (the device may still be using
 * what it was given: the coordinator quarantines). */
typedef int (*ctxc_synchronize_fn)(void *user, void *stream);

/* Frozen: a fixed resident slot (page-table row, recurrent-state row) and its epoch. Epoch 0 is invalid; a slot's
 * epoch must grow every time it is handed out again. */
typedef struct ctxc_resident_ref {
    int32_t slot;
    int32_t reserved;
    uint64_t epoch;
} ctxc_resident_ref_t;

/* Frozen: KV positions one decoder execution may address beyond its materialized endpoint (default {1, 0}). */
typedef struct ctxc_kv_headroom {
    int32_t base_extra_tokens;
    int32_t draft_extra_tokens;
} ctxc_kv_headroom_t;

/* Frozen: one media item of a prompt: its bytes (its identity in block keys) and the token positions it occupies,
 * [first_token, first_token + token_count). */
typedef struct ctxc_media_item {
    const uint8_t *bytes;
    size_t byte_count;
    int32_t first_token;
    int32_t token_count;
    int32_t modality; /* CTXC_MEDIA_* */
    int32_t reserved;
} ctxc_media_item_t;

/* Frozen (its size is part of CTXC_ABI_VERSION: retention came with version 4): one sequence of a generation
 * request. */
typedef struct ctxc_sequence_request {
    const int32_t *token_ids;
    size_t token_count;
    const char *lora_name; /* bytes, not NUL-terminated; length 0 = the base model */
    size_t lora_name_length;
    const ctxc_media_item_t *media;
    size_t media_count;
    int32_t lookup_policy; /* CTXC_INHERIT_LOOKUP_POLICY (the request's) or CTXC_LOOKUP_* */
    int32_t reserved;
    /* NULL: the default (plain LRU). Else what every publication of the sequence carries (retention.h; read during
     * the call, the coordinator keeps a copy): its ranges over the prompt, and decode_priority for the tokens
     * generated in decode (prompt_token_count is set to the prompt's length by the coordinator). A bad spec is
     * CTXC_E_CONTRACT (a malformed struct CTXC_E_INVALID_ARGUMENT) with nothing admitted. The bounded-SWA backend
     * publishes nothing, so there it has no effect. */
    const ctxc_retention_spec_t *retention;
} ctxc_sequence_request_t;

/* Frozen: a non-owning view of device (or host) bytes. device: -1 = host memory, else a CUDA ordinal. */
typedef struct ctxc_tensor_view {
    void *data;
    const int64_t *shape;
    size_t rank;
    int32_t dtype; /* CTXC_SCALAR_* */
    int32_t device;
} ctxc_tensor_view_t;

/* The device objects a coordinator drives, all on one backend; NULL where the profile does not use them:
 * attention needs the base pool, page table and lengths; a speculative profile that owns paged spec state the draft
 * triple; a hybrid or pure recurrent profile the resident state and snapshot storage. */
typedef struct ctxc_coordinator_resources {
    uint32_t struct_size;
    uint32_t reserved;
    ctxc_kv_pool_t *base_pool;
    ctxc_kv_page_table_t *base_page_table;
    ctxc_kv_lengths_t *base_lengths;
    ctxc_kv_pool_t *draft_pool;
    ctxc_kv_page_table_t *draft_page_table;
    ctxc_kv_lengths_t *draft_lengths;
    ctxc_resident_state_t *resident_state;
    ctxc_snapshot_storage_t *snapshots;
} ctxc_coordinator_resources_t;

typedef struct ctxc_coordinator_options {
    uint32_t struct_size;
    int32_t max_records; /* >= 0 (default 1024) */
    int32_t max_batch; /* sequences one request may hold, > 0, <= every table's and lengths' (default 8) */
    int32_t page_size; /* 0 = the base pool's (default; a pure recurrent model needs one) */
    int32_t hash_algorithm; /* CTXC_HASH_* (default SHA256) */
    int32_t model_state_kind; /* CTXC_MODEL_* (default ATTENTION_ONLY) */
    const uint8_t *hash_key; /* optional secret of the keyed SHA-256 chain; copied */
    size_t hash_key_length;
    int32_t has_spec; /* 0/1: a speculative deployment (default 0) */
    int32_t owns_paged_spec_state; /* 0/1: the drafter has its own KV pool, EAGLE (default 1) */
    int32_t future_dependency_tokens; /* >= 0: draft state at p depends on token p + this (default 1) */
    int32_t eviction_policy; /* CTXC_EVICTION_* (default CTXC_EVICTION_RECORD_LRU) */
    ctxc_synchronize_fn synchronize; /* NULL = synchronise the backend */
    void *synchronize_user;
    /* >= 0: a host-memory tier of this many pages beside the base pool (0: none; docs/TIERS.md): blocks the device
     * evicts (write-back) or publishes (write-through) are copied to pinned host memory the coordinator allocates,
     * and a vanilla attention sequence's hit is extended by the blocks it holds (its prefill start moves past
     * them); with EAGLE (a draft pool, no checkpoints, future_dependency_tokens <= the page size) the slots hold
     * draft pages too and a speculative sequence's hit is extended with both. Options from
     * ctxc_coordinator_options_init (or zeroed) have none. */
    int32_t host_tier_pages;
    int32_t host_write_policy; /* CTXC_HOST_WRITE_BACK (default) or CTXC_HOST_WRITE_THROUGH */
    /* NULL, or a byte store shared with other replicas under the host tier (c/store.h; needs host_tier_pages > 0):
     * blocks written to the tier are put there, and a hit the host cannot extend further is asked of it. Read
     * at creation (the coordinator holds the store). Since CTXC_ABI_VERSION 5. */
    const ctxc_store_link_options_t *host_store;
} ctxc_coordinator_options_t;

/* Every field of the runtime's ContextCacheMetrics: cumulative counters, then occupancy now. */
typedef struct ctxc_context_cache_metrics {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t admitted_sequences;
    uint64_t hit_sequences; /* matched token length > 0 */
    uint64_t media_aware_sequences;
    uint64_t lookup_bypass_sequences; /* bypass asked for, or forced cold */
    uint64_t forced_cold_sequences;
    uint64_t standard_plans;
    uint64_t no_reusable_prefix_plans;
    uint64_t full_input_rewind_plans;
    uint64_t matched_tokens;
    uint64_t reused_tokens;
    uint64_t publication_attempts;
    uint64_t committed_publications;
    uint64_t existing_publications;
    uint64_t published_endpoints;
    uint64_t hybrid_restores;
    uint64_t hybrid_snapshot_pressure_skips;
    uint64_t hybrid_capture_synchronizations;
    uint64_t spec_full_page_replays;
    uint64_t spec_pair_publications;
    uint64_t planning_nanoseconds;
    uint64_t media_boundary_trims;
    uint64_t current_records;
    int32_t base_kv_pages_free;
    int32_t base_kv_pages_capacity;
    int32_t draft_kv_pages_free;
    int32_t draft_kv_pages_capacity;
    int32_t recurrent_snapshots_free;
    int32_t recurrent_snapshots_capacity;
    int32_t partial_kv_snapshots_free;
    int32_t partial_kv_snapshots_capacity;
    uint64_t evicted_records;
    uint64_t reclaimed_base_kv_pages;
    uint64_t reclaimed_draft_kv_pages;
    uint64_t reclaimed_recurrent_snapshots;
    uint64_t reclaimed_partial_kv_snapshots;
    /* The host tier (all 0 without one): prompt tokens loaded from it, its blocks now, and its counters. */
    uint64_t host_loaded_tokens;
    uint64_t host_resident_blocks;
    uint64_t host_written_blocks;
    uint64_t host_dropped_blocks;
    uint64_t host_failed_loads;
    uint64_t host_failed_writes;
    uint64_t host_bytes_to_host;
    uint64_t host_bytes_to_device;
    /* The byte store under the host tier (all 0 without one; since CTXC_ABI_VERSION 5): prompt tokens loaded
     * from it (host_loaded_tokens counts the host's own), blocks put, puts dropped (full, or the breaker open) and
     * failed, blocks asked, loads failed and objects rejected (a miss each), batches an extension stopped waiting
     * for, batches the open breaker kept back, and the time extensions waited. */
    uint64_t store_loaded_tokens;
    uint64_t store_put_blocks;
    uint64_t store_dropped_puts;
    uint64_t store_failed_puts;
    uint64_t store_asked_blocks;
    uint64_t store_fetched_blocks; /* objects got and validated into host slots (waited for or not) */
    uint64_t store_failed_loads;
    uint64_t store_rejected_loads;
    uint64_t store_late_batches;
    uint64_t store_breaker_refusals;
    uint64_t store_wait_micros;
} ctxc_context_cache_metrics_t;

typedef struct ctxc_coordinator_info {
    uint32_t struct_size;
    int32_t page_size;
    int32_t poisoned; /* 0/1 */
    int32_t active_requests;
    size_t quarantined_requests;
    int32_t supports_live_sequence_admission; /* 0/1: attention-only, non-speculative */
    int32_t reserved;
} ctxc_coordinator_info_t;

/* The engine's live batch, indexed by batch row 0 .. active_batch_size - 1 (every array has that many entries). */
typedef struct ctxc_decoding_context {
    uint32_t struct_size;
    int32_t active_batch_size;
    const int32_t *const *token_ids; /* per row: the full history (prompt + generated + lookahead token) */
    const int32_t *token_counts; /* per row: entries of token_ids[row] */
    const int32_t *raw_input_lengths; /* per row: prompt length */
    const int32_t *generated_lengths; /* per row: tokens generated so far (the lookahead token counts) */
    const int32_t *status; /* per row: CTXC_SEQUENCE_* */
    const ctxc_resident_ref_t *resident_refs; /* per row; read by begin only (NULL elsewhere is fine) */
} ctxc_decoding_context_t;

typedef struct ctxc_kv_request_options {
    uint32_t struct_size;
    int32_t lookup_policy; /* batch-wide CTXC_LOOKUP_* (default USE_CACHE) */
    int32_t speculative; /* 0/1 (default 0) */
    int32_t token_state_contract; /* CTXC_TOKEN_STATE_* (default COMMITTED_PLUS_LOOKAHEAD) */
    int32_t commit_policy; /* CTXC_COMMIT_* (default INCLUDING_GENERATED_TOKENS) */
    ctxc_kv_headroom_t headroom; /* default {1, 0} */
    int32_t reserved;
    const int32_t *media_token_ids; /* optional: the placeholder ids media items must cover */
    size_t media_token_id_count;
    void *stream; /* orders every step of the request */
} ctxc_kv_request_options_t;

typedef struct ctxc_kv_request_info {
    uint32_t struct_size;
    int32_t batch_size;
    int32_t has_context_reuse; /* 0/1 */
    int32_t speculative; /* 0/1 */
    int32_t has_pending_joiner; /* 0/1 */
    int32_t live; /* 0/1: bound to an unfinished, unquarantined request */
} ctxc_kv_request_info_t;

/* One batch row (or the pending joiner, at row batch_size). Page lists are views valid until the next call on the
 * request. */
typedef struct ctxc_kv_sequence_info {
    uint32_t struct_size;
    uint32_t reserved;
    ctxc_resident_ref_t resident;
    int32_t input_length;
    int32_t token_count; /* history: prompt + accepted tokens */
    int32_t committed_length;
    int32_t common_length;
    int32_t matched_length;
    int32_t reuse_length; /* the prefill start */
    int32_t plan_kind; /* CTXC_PLAN_* */
    int32_t bypass; /* 0/1 */
    int32_t forced_cold; /* 0/1 */
    int32_t published_full_block_count;
    const int32_t *base_pages;
    size_t base_page_count;
    const int32_t *draft_pages;
    size_t draft_page_count;
} ctxc_kv_sequence_info_t;

CTXC_API void ctxc_coordinator_resources_init(ctxc_coordinator_resources_t *resources);
CTXC_API void ctxc_coordinator_options_init(ctxc_coordinator_options_t *options);
/* A coordinator over the device objects in `resources` (each a live handle or NULL). CTXC_E_CONTRACT when the
 * profile cannot be served by them (a missing or extra object, geometry that does not match, objects of different
 * backends, zero snapshot slots for checkpoint reuse, a speculative hybrid or recurrent profile). */
CTXC_API ctxc_status_t ctxc_coordinator_create(const ctxc_coordinator_resources_t *resources,
                                               const ctxc_coordinator_options_t *options,
                                               ctxc_coordinator_t **out_coordinator);
/* NULL is a no-op. See Lifetimes above for live requests (CTXC_E_LEASES_OUTSTANDING). */
CTXC_API ctxc_status_t ctxc_coordinator_destroy(ctxc_coordinator_t *coordinator);
CTXC_API ctxc_status_t ctxc_coordinator_metrics(const ctxc_coordinator_t *coordinator,
                                                ctxc_context_cache_metrics_t *out_metrics);
CTXC_API ctxc_status_t ctxc_coordinator_info(const ctxc_coordinator_t *coordinator, ctxc_coordinator_info_t *out_info);
/* The host tier's memory (its slots, host_tier_pages of them): *out_data and *out_bytes, NULL and 0 without a tier.
 * A byte store that moves bytes without a copy registers this range with its transport before serving (Mooncake
 * Store's register_buffer). Valid until the coordinator is destroyed. Since CTXC_ABI_VERSION 5. */
/* Applies the host tier's finished byte-store batches (puts done, objects arrived: their counters move, their
 * blocks become host blocks), as every request's acquire does first: for a runtime with idle time between requests.
 * *out_applied: batches applied now; *out_in_flight (NULL allowed): batches still at the store. 0 and 0 without a
 * store. Since CTXC_ABI_VERSION 5. */
CTXC_API ctxc_status_t ctxc_coordinator_poll_store(ctxc_coordinator_t *coordinator, size_t *out_applied,
                                                   size_t *out_in_flight);
CTXC_API ctxc_status_t ctxc_coordinator_host_tier_memory(const ctxc_coordinator_t *coordinator, void **out_data,
                                                         size_t *out_bytes);
/* Re-synchronise the quarantined requests and free them: CTXC_OK clears the poison; CTXC_E_POISONED when a
 * synchronisation still fails; CTXC_E_REQUEST_FAILED (poison cleared) when requests are still live. */
CTXC_API ctxc_status_t ctxc_coordinator_shutdown(ctxc_coordinator_t *coordinator);
/* CTXC_OK, or CTXC_E_INVARIANT with the first violation (the manager's, then the coordinator's). */
CTXC_API ctxc_status_t ctxc_coordinator_check_invariants(const ctxc_coordinator_t *coordinator);
/* A prefix-cache reset: every record evicted, so no later request reuses what was cached before (with KV events
 * on: one AllBlocksCleared). CTXC_E_CONTRACT (nothing changed) while requests are active or quarantined. */
CTXC_API ctxc_status_t ctxc_coordinator_clear(ctxc_coordinator_t *coordinator);
/* Drives the retention clock of the coordinator's manager (as ctxc_manager_set_retention_time: nanoseconds, any
 * origin, never backwards: CTXC_E_CONTRACT, nothing changed) instead of the steady clock. */
CTXC_API ctxc_status_t ctxc_coordinator_set_retention_time(ctxc_coordinator_t *coordinator, int64_t now_ns);
/* The retention outcomes of the coordinator's manager (as ctxc_manager_retention_metrics). */
CTXC_API ctxc_status_t ctxc_coordinator_retention_metrics(const ctxc_coordinator_t *coordinator,
                                                          ctxc_retention_metrics_t *out_metrics);

CTXC_API void ctxc_decoding_context_init(ctxc_decoding_context_t *context);
CTXC_API void ctxc_kv_request_options_init(ctxc_kv_request_options_t *options);
/* Admit a batch of `sequence_count` sequences (context: the same batch, with one resident ref per row): one lease
 * per sequence, forced-cold retry when a cache hit does not fit. CTXC_E_REQUEST_FAILED (nothing held) on capacity,
 * page-table overflow or another active request; CTXC_E_POISONED while quarantined work is unresolved. Media
 * spans outside the prompt, overlapping, or over a token that is not one of media_token_ids are CTXC_E_CONTRACT. */
CTXC_API ctxc_status_t ctxc_kv_request_begin(ctxc_coordinator_t *coordinator, const ctxc_sequence_request_t *sequences,
                                             size_t sequence_count, const ctxc_decoding_context_t *context,
                                             const ctxc_kv_request_options_t *options, ctxc_kv_request_t **out_request);
/* NULL is a no-op; an unfinished request is abandoned (see Lifetimes). */
CTXC_API ctxc_status_t ctxc_kv_request_destroy(ctxc_kv_request_t *request);
CTXC_API ctxc_status_t ctxc_kv_request_info(const ctxc_kv_request_t *request, ctxc_kv_request_info_t *out_info);
/* The reuse length (prefill start) of every batch row: a view valid until the next call on the request. */
CTXC_API ctxc_status_t ctxc_kv_request_prefill_starts(const ctxc_kv_request_t *request, const int32_t **out_starts,
                                                      size_t *out_count);
CTXC_API ctxc_status_t ctxc_kv_request_reuse_token_length(const ctxc_kv_request_t *request, int32_t row,
                                                          int32_t *out_length);
CTXC_API ctxc_status_t ctxc_kv_request_sequence_info(const ctxc_kv_request_t *request, int32_t row,
                                                     ctxc_kv_sequence_info_t *out_info);
/* The request's own last failure ("" when none): a view valid until the next call on the request. */
CTXC_API ctxc_status_t ctxc_kv_request_last_error(const ctxc_kv_request_t *request, const char **out_message);
/* Bind page-table rows, restore (or zero) recurrent state and partial-KV snapshots, set device KV lengths to the
 * reuse lengths. */
CTXC_API ctxc_status_t ctxc_kv_request_prepare_prefill(ctxc_kv_request_t *request);
/* Hybrid: enqueue the prefill-end checkpoint captures (after the engine's prefill kernels); else a no-op. */
CTXC_API ctxc_status_t ctxc_kv_request_enqueue_prefill_captures(ctxc_kv_request_t *request);
/* After the engine's prefill: apply the prefill advances (committed = raw input length; the lookahead token under
 * COMMITTED_PLUS_LOOKAHEAD) and publish prefill-end state. common_state_lengths: NULL/0, or one per row (required
 * by a speculative request). */
CTXC_API ctxc_status_t ctxc_kv_request_complete_prefill(ctxc_kv_request_t *request,
                                                        const ctxc_decoding_context_t *context,
                                                        const int32_t *common_state_lengths, size_t common_count);
/* Grow every running row to cover committed + headroom (NULL = {1, 0}). CTXC_E_REQUEST_FAILED (the request is
 * finishing) when the pool or page table cannot. */
CTXC_API ctxc_status_t ctxc_kv_request_prepare_decode_step(ctxc_kv_request_t *request,
                                                           const ctxc_decoding_context_t *context,
                                                           const ctxc_kv_headroom_t *headroom);
/* Apply one step: the tokens each row gained since prepare_decode_step are accepted; rows that gained none hold
 * (cancelled, failed, or finished earlier); rows newly CTXC_SEQUENCE_FINISHED publish decode-end state under
 * INCLUDING_GENERATED_TOKENS. */
CTXC_API ctxc_status_t ctxc_kv_request_complete_decode_step(ctxc_kv_request_t *request,
                                                            const ctxc_decoding_context_t *context,
                                                            const int32_t *common_state_lengths, size_t common_count);
/* Validate an order-preserving dense map of the batch (-1 retires a row; survivors keep their order and fill
 * [0, new_batch)) and copy it to out_device_batch_mapping (int32, on the coordinator's backend: device memory on
 * CUDA, host memory on the CPU backend; NULL with capacity 0 skips the copy; else capacity >= the batch). */
CTXC_API ctxc_status_t ctxc_kv_request_begin_batch_compaction(ctxc_kv_request_t *request, const int32_t *old_to_new,
                                                              size_t old_batch, int32_t new_batch,
                                                              int32_t *out_device_batch_mapping,
                                                              size_t mapping_capacity);
/* Apply the pending compaction; keep_mapping must be the map given to begin_batch_compaction. */
CTXC_API ctxc_status_t ctxc_kv_request_complete_batch_compaction(ctxc_kv_request_t *request,
                                                                 const int32_t *keep_mapping, size_t count);
/* Synchronise pending work, publish what is due and release the request's leases. A finished request is a no-op. */
CTXC_API ctxc_status_t ctxc_kv_request_finish(ctxc_kv_request_t *request);
/* In-flight admission of a joiner (attention-only, non-speculative deployments; between decode steps). The
 * sequence's lookup_policy must be CTXC_INHERIT_LOOKUP_POLICY. *out_status: CTXC_ADMIT_ADMITTED (with
 * *out_prefill_start) or CTXC_ADMIT_NO_CAPACITY (transient, nothing held) with CTXC_OK; CTXC_ADMIT_FAILED with
 * CTXC_E_REQUEST_FAILED or CTXC_E_POISONED. headroom NULL = {1, 0}. */
CTXC_API ctxc_status_t ctxc_kv_request_admit_sequence(ctxc_kv_request_t *request,
                                                      const ctxc_sequence_request_t *sequence,
                                                      const ctxc_resident_ref_t *resident,
                                                      const ctxc_kv_headroom_t *headroom,
                                                      const int32_t *media_token_ids, size_t media_token_id_count,
                                                      int32_t *out_status, int32_t *out_prefill_start);
/* The seated joiner (row == the batch size before admission) becomes a member: its prefill advance is applied
 * (lookahead_token under COMMITTED_PLUS_LOOKAHEAD; full_input_length == its prompt length). */
CTXC_API ctxc_status_t ctxc_kv_request_finalize_sequence_admission(ctxc_kv_request_t *request, int32_t row,
                                                                   int32_t lookahead_token, int32_t full_input_length);
/* Undo an admitted, not yet finalized joiner. *out_retracted = 0 when there was none. */
CTXC_API ctxc_status_t ctxc_kv_request_retract_sequence_admission(ctxc_kv_request_t *request, int32_t *out_retracted);
/* Hybrid+MTP (a CTXC_MODEL_HYBRID coordinator with has_spec = 1 and owns_paged_spec_state = 1: an MTP head with
 * its own draft pool, snapshot storage over the base and draft pools with boundary_hidden = 1; speculative,
 * text-only requests of one sequence under CTXC_COMMIT_PREFILL_STATE_ONLY). A checkpoint at exact length E
 * holds the recurrent state after E tokens, base KV [0, E), draft KV [0, E - 1) (the draft at E - 1 reads token
 * E, private to whoever reuses it) and the base hidden row of position E - 1.
 * publish_hybrid_mtp_endpoint: during prefill (after prepare_prefill, before complete_prefill), with the device
 * state at E = resident_state_length: copies row boundary_hidden_row of base_hidden_states (fp16 [rows,
 * hidden_size], memory of the coordinator's backend) into the slot's resident state, captures recurrent state,
 * hidden row and the base + draft page floor((E - 1) / page_size) in one launch, synchronises once and publishes
 * floor((E - 1) / page_size) paired blocks (CTXC_OK without publishing for a bypassed row or under snapshot
 * pressure). A later request that hits it starts prefill at E (base lengths E, draft lengths E - 1);
 * restore_hybrid_mtp_boundary_hidden then copies the restored row into base_hidden_states at destination_row.
 * `row` is the batch row. CTXC_E_CONTRACT on another deployment, a bad row, length, phase or tensor;
 * CTXC_E_POISONED after a failed synchronisation (the request is quarantined). */
CTXC_API ctxc_status_t ctxc_kv_request_publish_hybrid_mtp_endpoint(ctxc_kv_request_t *request, int32_t row,
                                                                   int32_t resident_state_length,
                                                                   const ctxc_tensor_view_t *base_hidden_states,
                                                                   int32_t boundary_hidden_row);
CTXC_API ctxc_status_t ctxc_kv_request_restore_hybrid_mtp_boundary_hidden(ctxc_kv_request_t *request, int32_t row,
                                                                          const ctxc_tensor_view_t *base_hidden_states,
                                                                          int32_t destination_row);

/* ---- the request facade on the bounded-SWA backend (its manager and windows: swa.h) ---------------------- */

/* ctxc_swa_manager_t and ctxc_swa_state_t (swa.h) by their struct tags, so that this part does not need swa.h
 * (which needs this one). */
struct ctxc_swa_manager;
struct ctxc_swa_state;

/* The request facade (ctxc_kv_request_t) on the bounded-SWA backend, the seed's ManagedKVCacheRequest::begin with
 * the swaPageManager pointer: the same lifecycle as on a coordinator, with one prefill chunk per
 * ctxc_kv_request_prepare_swa_prefill. Preconditions (else CTXC_E_CONTRACT, nothing held): options->speculative 0,
 * CTXC_TOKEN_STATE_COMMITTED_PLUS_LOOKAHEAD, headroom {1, 0}, one sequence and one resident ref per active row
 * (lookup and commit policies and media are not read: nothing is reused or published). Every step checks the
 * context against the windows: a row's history is its KV endpoint plus the lookahead token, and a decode step
 * advances a running row by exactly one. The context-only members answer the documented backstops:
 * prefill_starts (NULL, 0), prepare_prefill and enqueue_prefill_captures CTXC_OK (no-ops), admit_sequence
 * CTXC_ADMIT_FAILED with CTXC_E_REQUEST_FAILED, finalize_sequence_admission CTXC_E_REQUEST_FAILED,
 * retract_sequence_admission *out_retracted = 1, and reuse_token_length, sequence_info and the Hybrid+MTP members
 * CTXC_E_CONTRACT. ctxc_kv_request_info answers has_context_reuse 0. CTXC_E_REQUEST_FAILED (nothing held) when the
 * reservations do not fit or a request is live; CTXC_E_POISONED as the manager's. The request remembers its
 * manager: once the manager is destroyed every use is CTXC_E_INVALID_HANDLE (ctxc_kv_request_destroy frees it). */
CTXC_API ctxc_status_t ctxc_kv_request_begin_swa(struct ctxc_swa_manager *manager,
                                                 const ctxc_sequence_request_t *sequences, size_t sequence_count,
                                                 const ctxc_decoding_context_t *context,
                                                 const ctxc_kv_request_options_t *options,
                                                 ctxc_kv_request_t **out_request);
/* One prefill chunk on the SWA backend: row i's KV endpoint moves to lengths[i]; a second call first completes the
 * previous chunk (its completion point), ctxc_kv_request_complete_prefill completes the last. A no-op (CTXC_OK) on
 * the context-reuse backend. */
CTXC_API ctxc_status_t ctxc_kv_request_prepare_swa_prefill(ctxc_kv_request_t *request, const int32_t *lengths,
                                                           size_t count);
/* Row `row`'s window on the SWA backend; CTXC_E_CONTRACT on the context-reuse backend. */
CTXC_API ctxc_status_t ctxc_kv_request_swa_state(const ctxc_kv_request_t *request, int32_t row,
                                                 struct ctxc_swa_state *out_state);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_RUNTIME_H */
