/* ctxcache C ABI: the context-cache manager: its options, the acquires for each deployment (vanilla, hybrid,
 * speculative, Hybrid+MTP), growth, snapshot reservations, publication, eviction and its metrics.
 * A manager, its leases (lease.h) and its KV events (kv_events.h) are one single-writer family. */
#ifndef CTXCACHE_C_MANAGER_H
#define CTXCACHE_C_MANAGER_H

#include "ctxcache/c/hash.h"
#include "ctxcache/c/kv_events.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CTXC_RESOURCE_BASE_KV_PAGE = 0,
    CTXC_RESOURCE_DRAFT_KV_PAGE = 1,
    CTXC_RESOURCE_RECURRENT_SNAPSHOT = 2,
    CTXC_RESOURCE_PARTIAL_KV_SNAPSHOT = 3
};
enum { CTXC_LOOKUP_USE_CACHE = 0, CTXC_LOOKUP_BYPASS = 1 };
enum { CTXC_PLAN_STANDARD = 0, CTXC_PLAN_NO_REUSABLE_PREFIX = 1, CTXC_PLAN_FULL_INPUT_REWIND = 2 };
enum { CTXC_MODE_VANILLA = 0, CTXC_MODE_HYBRID = 1, CTXC_MODE_SPEC = 2, CTXC_MODE_HYBRID_MTP = 3 };
/* Capacity eviction (ctxc_manager_options_t.eviction_policy): whole records, least recent first (the
 * reference's, the default), or the same walk where the last record reached gives up only the tail blocks the
 * demand needs and keeps its shorter prefix (hybrid checkpoints always go whole). */
enum { CTXC_EVICTION_RECORD_LRU = 0, CTXC_EVICTION_RECORD_LRU_TRIM = 1 };
enum { CTXC_SPEC_REPLAY_NONE = 0, CTXC_SPEC_REPLAY_FULL_PAGE = 1 };
enum { CTXC_ACQUIRE_ACQUIRED = 0, CTXC_ACQUIRE_INSUFFICIENT_CAPACITY = 1 };
enum { CTXC_PUBLISH_PUBLISHED = 0, CTXC_PUBLISH_EXISTING_RECORD = 1 };

typedef struct ctxc_manager ctxc_manager_t;
typedef struct ctxc_lease ctxc_lease_t;

typedef struct ctxc_resource_demand {
    int32_t base_kv_pages;
    int32_t draft_kv_pages;
    int32_t recurrent_snapshot_slots;
    int32_t partial_kv_snapshot_slots;
} ctxc_resource_demand_t;

/* ---- manager --------------------------------------------------------------------------------------------- */

typedef struct ctxc_manager_options {
    uint32_t struct_size;
    int32_t page_size; /* tokens per page/block, > 0 (default 128) */
    ctxc_resource_demand_t capacities; /* pool sizes, >= 0 each */
    int32_t max_records; /* >= 0; 0 keeps no record at all (default 1024) */
    int32_t eviction_policy; /* CTXC_EVICTION_* (default CTXC_EVICTION_RECORD_LRU) */
} ctxc_manager_options_t;

/* Frozen: only ever the last member of ctxc_acquire_result_t, whose struct_size covers it. */
typedef struct ctxc_reuse_plan {
    int32_t mode; /* CTXC_MODE_* */
    int32_t kind; /* CTXC_PLAN_* */
    int32_t spec_replay_mode; /* CTXC_SPEC_REPLAY_* */
    int32_t matched_token_length; /* what the cache holds of this prompt, before rewind or replay */
    int32_t reuse_token_length; /* where the request's prefill starts */
    int32_t bound_base_page_count; /* the lease's first pages that are shared */
    int32_t bound_draft_page_count;
    int32_t hybrid_has_attention;
    ctxc_resource_demand_t demand; /* what had to be allocated privately */
    uint64_t draft_record; /* 0 = none */
    uint64_t hybrid_record; /* 0 = none */
    int32_t recurrent_snapshot_binding; /* -1 = none */
    int32_t partial_kv_snapshot_binding;
    int32_t has_spec_replay_dependency;
    int32_t spec_replay_dependency_block_count;
    ctxc_hash128_t spec_replay_dependency_hash;
    int32_t has_hybrid_checkpoint;
    int32_t hybrid_checkpoint_length;
    ctxc_hash128_t hybrid_checkpoint_digest;
} ctxc_reuse_plan_t;

typedef struct ctxc_acquire_result {
    uint32_t struct_size;
    int32_t status; /* CTXC_ACQUIRE_* */
    ctxc_reuse_plan_t plan;
} ctxc_acquire_result_t;

typedef struct ctxc_hybrid_candidate {
    int32_t exact_length;
    int32_t reserved;
    ctxc_hash128_t exact_prefix_digest;
} ctxc_hybrid_candidate_t;

typedef struct ctxc_hybrid_snapshot_reservation {
    int32_t recurrent_snapshot_slot;
    int32_t partial_kv_snapshot_slot; /* -1 = none */
} ctxc_hybrid_snapshot_reservation_t;

typedef struct ctxc_hybrid_checkpoint_key {
    ctxc_hash128_t exact_prefix_digest;
    int32_t exact_length;
    int32_t reserved;
} ctxc_hybrid_checkpoint_key_t;

typedef struct ctxc_publish_result {
    uint32_t struct_size;
    int32_t status; /* CTXC_PUBLISH_* */
    uint64_t record; /* 0 = none (evicted at once under max_records 0) */
    int32_t published_base_full_block_count;
    int32_t reserved;
    const int32_t *canonical_base_pages; /* view (held by the lease), valid until the next mutating call on this
                                          * lease or its manager */
    size_t canonical_base_page_count;
} ctxc_publish_result_t;

typedef struct ctxc_manager_metrics {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t evicted_records;
    uint64_t reclaimed_base_kv_pages;
    uint64_t reclaimed_draft_kv_pages;
    uint64_t reclaimed_recurrent_snapshots;
    uint64_t reclaimed_partial_kv_snapshots;
    uint64_t trimmed_records; /* CTXC_EVICTION_RECORD_LRU_TRIM: trims applied */
    uint64_t trimmed_blocks; /* blocks those trims took off their records */
    uint64_t prefix_cache_queries; /* prompt tokens of the acquires that succeeded with CTXC_LOOKUP_USE_CACHE */
    uint64_t prefix_cache_hits;    /* the tokens those acquires skip (reuse_token_length): hits / queries */
    uint64_t superseded_records;   /* records a longer publication replaced (growth, a spec lease's dominated
                                    * hit): not evictions */
} ctxc_manager_metrics_t;

/* What ctxc_manager_acquire_vanilla with CTXC_LOOKUP_USE_CACHE would reuse right now (ctxc_manager_probe_vanilla):
 * the kind, lengths and bound page count its plan would report. */
typedef struct ctxc_reuse_probe {
    uint32_t struct_size;
    int32_t kind; /* CTXC_PLAN_* */
    int32_t matched_token_length; /* what the cache holds of this prompt, before the full-input rewind */
    int32_t reuse_token_length; /* where the acquire's prefill would start */
    size_t page_count; /* reuse_token_length / page_size: the canonical pages it would bind */
} ctxc_reuse_probe_t;

CTXC_API void ctxc_manager_options_init(ctxc_manager_options_t *options);
CTXC_API ctxc_status_t ctxc_manager_create(const ctxc_manager_options_t *options, ctxc_manager_t **out_manager);
/* Destroys the manager (NULL is a no-op). If leases are still alive they are orphaned (every later use reports
 * CTXC_E_INVALID_HANDLE; ctxc_lease_destroy frees them) and CTXC_E_LEASES_OUTSTANDING is returned: the manager
 * is destroyed either way. */
CTXC_API ctxc_status_t ctxc_manager_destroy(ctxc_manager_t *manager);

/* Acquire a lease for a prompt on a vanilla (attention-only) deployment.
 * hashes: `count` chained full-block hashes of the prompt, count <= input_token_count / page_size.
 * On CTXC_OK with out_result->status == CTXC_ACQUIRE_ACQUIRED, *out_lease is a new lease the caller destroys with
 * ctxc_lease_destroy; with CTXC_ACQUIRE_INSUFFICIENT_CAPACITY, *out_lease is NULL and nothing changed (no eviction
 * happened). Never blocks. */
CTXC_API ctxc_status_t ctxc_manager_acquire_vanilla(ctxc_manager_t *manager, const ctxc_hash128_t *hashes, size_t count,
                                                    int32_t input_token_count, int32_t lookup_policy,
                                                    ctxc_acquire_result_t *out_result, ctxc_lease_t **out_lease);
/* Acquire on a hybrid (attention + recurrent) or pure-recurrent deployment: the longest complete exact checkpoint
 * among `candidates` whose record matches `hashes`; a candidate whose length is not in (0, input_token_count) is
 * skipped, never an error. */
CTXC_API ctxc_status_t ctxc_manager_acquire_hybrid(ctxc_manager_t *manager, const ctxc_hybrid_candidate_t *candidates,
                                                   size_t candidate_count, const ctxc_hash128_t *hashes, size_t count,
                                                   int32_t input_token_count, int32_t has_attention,
                                                   int32_t lookup_policy, ctxc_acquire_result_t *out_result,
                                                   ctxc_lease_t **out_lease);
/* Acquire for greedy, non-hybrid EAGLE: base and draft pages from one coherent paired record, boundary page
 * replayed. */
CTXC_API ctxc_status_t ctxc_manager_acquire_spec(ctxc_manager_t *manager, const ctxc_hash128_t *hashes, size_t count,
                                                 int32_t input_token_count, int32_t lookup_policy,
                                                 ctxc_acquire_result_t *out_result, ctxc_lease_t **out_lease);
/* Acquire for a hybrid (attention + recurrent) model drafting with a multi-token-prediction head: the longest
 * complete Hybrid+MTP checkpoint among `candidates` whose record matches `hashes`. A checkpoint of exact length E
 * keeps its boundary token private: it binds floor((E - 1) / page_size) base AND draft pages, the recurrent slot
 * and the partial-KV slot (always present), and reuse starts at E. Candidates are as for
 * ctxc_manager_acquire_hybrid (length not in [1, input_token_count) skipped); plain hybrid checkpoints never hit
 * here. A miss or CTXC_LOOKUP_BYPASS allocates every input page privately in both pools. */
CTXC_API ctxc_status_t ctxc_manager_acquire_hybrid_mtp(ctxc_manager_t *manager,
                                                       const ctxc_hybrid_candidate_t *candidates,
                                                       size_t candidate_count, const ctxc_hash128_t *hashes,
                                                       size_t count, int32_t input_token_count, int32_t lookup_policy,
                                                       ctxc_acquire_result_t *out_result, ctxc_lease_t **out_lease);
/* A lookup without side effects: what ctxc_manager_acquire_vanilla(hashes, count, input_token_count,
 * CTXC_LOOKUP_USE_CACHE) would reuse if called now, by the same rule (a page-aligned input entirely cached reuses
 * one page less), so it equals the plan of an acquire that follows with nothing in between. Changes nothing (no
 * recency, metrics, events, pins or clock read). *out_probe is filled and its page_count canonical pages (in block
 * order, page_count <= count: a buffer of `count` entries always suffices) go to out_pages; when out_capacity is
 * smaller, CTXC_E_BUFFER_TOO_SMALL with *out_probe filled and no page written (out_pages NULL with capacity 0 is
 * the size query). Arguments as for the acquire (CTXC_E_CONTRACT for too many hashes). O(blocks matched + 1). */
CTXC_API ctxc_status_t ctxc_manager_probe_vanilla(const ctxc_manager_t *manager, const ctxc_hash128_t *hashes,
                                                  size_t count, int32_t input_token_count, int32_t *out_pages,
                                                  size_t out_capacity, ctxc_reuse_probe_t *out_probe);
/* Stored hybrid checkpoint lengths (plain and Hybrid+MTP) below input_token_count, longest first. Two-call
 * pattern. */
CTXC_API ctxc_status_t ctxc_manager_hybrid_candidate_lengths(const ctxc_manager_t *manager, int32_t input_token_count,
                                                             int32_t *out_lengths, size_t out_capacity,
                                                             size_t *out_count);
/* The same, narrowed to checkpoints whose last full block is one of the prompt's own `count` full-block hashes
 * (or that have no full block): the only ones an acquire can accept, found in O(count). Two-call pattern. */
CTXC_API ctxc_status_t ctxc_manager_hybrid_candidate_lengths_for(const ctxc_manager_t *manager,
                                                                 int32_t input_token_count,
                                                                 const ctxc_hash128_t *hashes, size_t count,
                                                                 int32_t *out_lengths, size_t out_capacity,
                                                                 size_t *out_count);

/* Append `count` private base pages to a vanilla or hybrid lease. *out_ok = 1, or 0 when capacity is short
 * (then nothing changed). */
CTXC_API ctxc_status_t ctxc_manager_grow_base_pages(ctxc_manager_t *manager, ctxc_lease_t *lease, int32_t count,
                                                    int32_t *out_ok);
/* Append base and draft pages to a spec or Hybrid+MTP lease, atomically across both pools. */
CTXC_API ctxc_status_t ctxc_manager_grow_spec_pages(ctxc_manager_t *manager, ctxc_lease_t *lease, int32_t base_count,
                                                    int32_t draft_count, int32_t *out_ok);
/* Reserve producer snapshot slots on a hybrid lease (partial only with attention) or a Hybrid+MTP lease (both
 * slots: needs_partial_kv_snapshot must be 1, else CTXC_E_CONTRACT). *out_ok = 0 under retention pressure
 * (nothing changed; the caller skips the capture). */
CTXC_API ctxc_status_t ctxc_manager_reserve_hybrid_snapshots(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                             int32_t needs_partial_kv_snapshot,
                                                             ctxc_hybrid_snapshot_reservation_t *out_reservation,
                                                             int32_t *out_ok);
/* Drop the pins on the restored (hit) snapshot slots once the restore copy is complete. Idempotent. */
CTXC_API ctxc_status_t ctxc_manager_release_restored_hybrid_snapshots(ctxc_manager_t *manager, ctxc_lease_t *lease);
/* Drop the lease's ownership of a reservation once capture is terminal and publication committed or skipped. */
CTXC_API ctxc_status_t ctxc_manager_retire_hybrid_snapshot_reservation(
    ctxc_manager_t *manager, ctxc_lease_t *lease, const ctxc_hybrid_snapshot_reservation_t *reservation);

/* Publish the first min(count, resident_state_length / page_size) blocks of a vanilla or spec lease. The hashes
 * must extend the prefix the lease acquired (else CTXC_E_CONTRACT and nothing changed). */
CTXC_API ctxc_status_t ctxc_manager_publish(ctxc_manager_t *manager, ctxc_lease_t *lease, const ctxc_hash128_t *hashes,
                                            size_t count, int32_t resident_state_length,
                                            ctxc_publish_result_t *out_result);
/* Publish one captured exact hybrid checkpoint: hashes are its floor(exact_length / page_size) full blocks. */
CTXC_API ctxc_status_t ctxc_manager_publish_hybrid(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                   const ctxc_hash128_t *hashes, size_t count,
                                                   const ctxc_hybrid_checkpoint_key_t *checkpoint,
                                                   const ctxc_hybrid_snapshot_reservation_t *snapshots,
                                                   ctxc_publish_result_t *out_result);
/* Publish one captured Hybrid+MTP checkpoint of exact length E >= 1 from a Hybrid+MTP lease: hashes are its
 * floor((E - 1) / page_size) full blocks, `snapshots` holds both slots reserved by this lease. The record keeps
 * the canonical base path, the lease's first floor((E - 1) / page_size) draft pages and both slots. An existing
 * Hybrid+MTP checkpoint with that key is touched (CTXC_PUBLISH_EXISTING_RECORD). Any inconsistency is
 * CTXC_E_CONTRACT and nothing changed. */
CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_mtp(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                       const ctxc_hash128_t *hashes, size_t count,
                                                       const ctxc_hybrid_checkpoint_key_t *checkpoint,
                                                       const ctxc_hybrid_snapshot_reservation_t *snapshots,
                                                       ctxc_publish_result_t *out_result);
/* Evict one record now. */
CTXC_API ctxc_status_t ctxc_manager_evict_record(ctxc_manager_t *manager, uint64_t record);

CTXC_API ctxc_status_t ctxc_manager_metrics(const ctxc_manager_t *manager, ctxc_manager_metrics_t *out_metrics);
CTXC_API ctxc_status_t ctxc_manager_page_size(const ctxc_manager_t *manager, int32_t *out_page_size);
CTXC_API ctxc_status_t ctxc_manager_pool_counts(const ctxc_manager_t *manager, int32_t resource_type, int32_t *out_free,
                                                int32_t *out_capacity);
/* The ids of one CTXC_RESOURCE_* an acquire or grow could obtain right now: the free ones plus those eviction
 * would free (cached by unpinned records, held by no lease). Pinned records and leases hold theirs (not counted);
 * an acquire's hit pins its shared pages first, which then no longer count. */
CTXC_API ctxc_status_t ctxc_manager_acquirable_count(const ctxc_manager_t *manager, int32_t resource_type,
                                                     int32_t *out_count);
CTXC_API ctxc_status_t ctxc_manager_record_count(const ctxc_manager_t *manager, size_t *out_count);
/* Entries (block hashes) in the base block index. */
CTXC_API ctxc_status_t ctxc_manager_base_index_size(const ctxc_manager_t *manager, size_t *out_size);
CTXC_API ctxc_status_t ctxc_manager_live_lease_count(const ctxc_manager_t *manager, size_t *out_count);
/* Heap bytes of every index and record: the cache's metadata cost. */
CTXC_API ctxc_status_t ctxc_manager_metadata_bytes(const ctxc_manager_t *manager, size_t *out_bytes);
/* CTXC_OK, or CTXC_E_INVARIANT with the first violation in ctxc_last_error(). O(ids allocated so far + records). */
CTXC_API ctxc_status_t ctxc_manager_check_invariants(const ctxc_manager_t *manager);

/* The same publications with what a manager with KV events on needs (see ctxc_kv_events_enable): the prompt's
 * tokens, which BlockStored carries (`tokens` holds at least (published blocks) * page_size token ids, block i's
 * first, else CTXC_E_CONTRACT and nothing changed), and optionally the request's identity (`event_keys`, NULL =
 * the base model without media: lora_name and extra_keys). Without events both are read for nothing. */
CTXC_API ctxc_status_t ctxc_manager_publish_with_tokens(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                        const ctxc_hash128_t *hashes, size_t count,
                                                        int32_t resident_state_length, const int32_t *tokens,
                                                        size_t token_count, const ctxc_kv_event_keys_t *event_keys,
                                                        ctxc_publish_result_t *out_result);
CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_with_tokens(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                               const ctxc_hash128_t *hashes, size_t count,
                                                               const ctxc_hybrid_checkpoint_key_t *checkpoint,
                                                               const ctxc_hybrid_snapshot_reservation_t *snapshots,
                                                               const int32_t *tokens, size_t token_count,
                                                               const ctxc_kv_event_keys_t *event_keys,
                                                               ctxc_publish_result_t *out_result);
CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_mtp_with_tokens(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                                   const ctxc_hash128_t *hashes, size_t count,
                                                                   const ctxc_hybrid_checkpoint_key_t *checkpoint,
                                                                   const ctxc_hybrid_snapshot_reservation_t *snapshots,
                                                                   const int32_t *tokens, size_t token_count,
                                                                   const ctxc_kv_event_keys_t *event_keys,
                                                                   ctxc_publish_result_t *out_result);
/* A prefix-cache reset: evict every record, so no lookup finds anything afterwards (with KV events on, one
 * AllBlocksCleared event instead of the removals). CTXC_E_CONTRACT (nothing changed) while leases are live: their
 * publications would refill the cache the reset empties (vLLM's reset_prefix_cache refuses the same way). */
CTXC_API ctxc_status_t ctxc_manager_clear(ctxc_manager_t *manager);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_MANAGER_H */
