/* ctxcache C ABI: a context cache (KV-cache reuse) for LLM inference runtimes.
 *
 * Conventions
 *   - Every symbol is ctxc_<object>_<verb>; types ctxc_<name>_t; constants CTXC_<NAME> (integer literals or
 *     enums only, so that the header is also the cffi cdef).
 *   - Handles are opaque and checked: a NULL, stale (destroyed), double-released, foreign (another manager's
 *     lease) or wrongly typed handle returns CTXC_E_INVALID_HANDLE, never a crash. A lease whose manager was
 *     destroyed first is detected and reported the same way.
 *   - Every fallible call returns ctxc_status_t (CTXC_OK == 0). On failure nothing changed, and
 *     ctxc_last_error() (thread-local, never NULL) says which call, which argument and why.
 *   - Capacity shortage is an answer, not an error: an acquire reports CTXC_ACQUIRE_INSUFFICIENT_CAPACITY in its
 *     result, grow and reserve set *out_ok = 0.
 *   - Options structs begin with struct_size; fill them with the matching _init() call.
 *   - Variable-size outputs are pointer + count views owned by the library, valid until the next mutating call
 *     on the same manager (or lease), or caller buffers with the two-call pattern (out_capacity, *out_count:
 *     CTXC_E_BUFFER_TOO_SMALL still sets *out_count to the size needed).
 *   - Hashes are ctxc_hash128_t {hi, lo}: an array of n of them is the same memory as an (n, 2) uint64 array.
 *
 * Threading: a manager and its leases follow a single-writer contract: the caller serializes every call that
 * touches them. Different managers may be used from different threads. Hashers are immutable and shareable.
 */
#ifndef CTXCACHE_H
#define CTXCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CTXCACHE_BUILDING_LIBRARY)
#define CTXC_API __attribute__((visibility("default")))
#else
#define CTXC_API
#endif

#define CTXC_ABI_VERSION 1

typedef enum ctxc_status {
    CTXC_OK = 0,
    CTXC_E_INVALID_ARGUMENT = 1,    /* an argument is malformed in itself: NULL, negative, wrong size, unknown enum */
    CTXC_E_CONTRACT = 2,            /* arguments inconsistent with the state: wrong lease kind, changed prefix, ... */
    CTXC_E_INVALID_HANDLE = 3,      /* NULL, stale, double-released, foreign or orphaned handle */
    CTXC_E_NO_MEMORY = 4,
    CTXC_E_INVARIANT = 5,           /* ctxc_manager_check_invariants found the state inconsistent (a ctxcache bug) */
    CTXC_E_LEASES_OUTSTANDING = 6,  /* a manager was destroyed while leases were alive (they are now orphaned) */
    CTXC_E_BUFFER_TOO_SMALL = 7,
    CTXC_E_UNSUPPORTED = 8,
    CTXC_E_INTERNAL = 9
} ctxc_status_t;

enum {
    CTXC_RESOURCE_BASE_KV_PAGE = 0,
    CTXC_RESOURCE_DRAFT_KV_PAGE = 1,
    CTXC_RESOURCE_RECURRENT_SNAPSHOT = 2,
    CTXC_RESOURCE_PARTIAL_KV_SNAPSHOT = 3
};
enum { CTXC_LOOKUP_USE_CACHE = 0, CTXC_LOOKUP_BYPASS = 1 };
enum { CTXC_PLAN_STANDARD = 0, CTXC_PLAN_NO_REUSABLE_PREFIX = 1, CTXC_PLAN_FULL_INPUT_REWIND = 2 };
enum { CTXC_MODE_VANILLA = 0, CTXC_MODE_HYBRID = 1, CTXC_MODE_SPEC = 2 };
enum { CTXC_SPEC_REPLAY_NONE = 0, CTXC_SPEC_REPLAY_FULL_PAGE = 1 };
enum { CTXC_ACQUIRE_ACQUIRED = 0, CTXC_ACQUIRE_INSUFFICIENT_CAPACITY = 1 };
enum { CTXC_PUBLISH_PUBLISHED = 0, CTXC_PUBLISH_EXISTING_RECORD = 1 };
enum { CTXC_HASH_SHA256 = 0, CTXC_HASH_FNV1A128 = 1 };
enum { CTXC_LEASE_LIVE = 0, CTXC_LEASE_RELEASED = 1, CTXC_LEASE_ORPHANED = 2 };

typedef struct ctxc_manager ctxc_manager_t;
typedef struct ctxc_lease ctxc_lease_t;
typedef struct ctxc_hasher ctxc_hasher_t;

typedef struct ctxc_hash128 {
    uint64_t hi;
    uint64_t lo;
} ctxc_hash128_t;

typedef struct ctxc_resource_demand {
    int32_t base_kv_pages;
    int32_t draft_kv_pages;
    int32_t recurrent_snapshot_slots;
    int32_t partial_kv_snapshot_slots;
} ctxc_resource_demand_t;

/* ---- library ------------------------------------------------------------------------------------------- */

/* CTXC_ABI_VERSION of the library that was loaded; a binding checks it against its header. */
CTXC_API int32_t ctxc_abi_version(void);
/* The most recent failure on this thread: "<function>: <argument>: <why>". Never NULL ("" before any failure). */
CTXC_API const char *ctxc_last_error(void);
/* A static name for a status code ("CTXC_E_CONTRACT"); never NULL. */
CTXC_API const char *ctxc_status_string(ctxc_status_t status);
/* Size in bytes of a public struct by its type name ("ctxc_publish_result_t"), 0 if unknown: lets a binding that
 * declares the structs itself (cffi ABI mode) verify its layout. */
CTXC_API size_t ctxc_sizeof(const char *type_name);
/* 1 if this library was built with the CUDA backend, else 0. */
CTXC_API int32_t ctxc_cuda_compiled(void);
/* CUDA devices this process can use: > 0 devices, 0 none, < 0 the negated cudaError_t of the probe (-35: no
 * driver) or -1 when built without CUDA. ctxc_last_error() then holds the reason. Never fails. */
CTXC_API int32_t ctxc_cuda_device_count(void);

/* ---- block hashing --------------------------------------------------------------------------------------- */

typedef struct ctxc_hasher_options {
    uint32_t struct_size;
    int32_t algorithm;      /* CTXC_HASH_SHA256 (default) or CTXC_HASH_FNV1A128 */
    const uint8_t *key;     /* optional secret for SHA-256 (NULL or key_length 0: unkeyed); copied */
    size_t key_length;
} ctxc_hasher_options_t;

typedef struct ctxc_media_span_key {
    ctxc_hash128_t content_digest;
    ctxc_hash128_t placement_digest;
    int32_t offset_within_block;
    int32_t item_order;
    uint32_t modality;      /* 0..255 */
} ctxc_media_span_key_t;

/* Non-token identity of a block (LoRA adapter, media spans, position / custom-embedding / isolation digests).
 * A has_* field is 0 or 1. */
typedef struct ctxc_block_key_extras {
    const ctxc_media_span_key_t *media;
    size_t media_count;
    uint32_t has_adapter;
    uint32_t has_position_digest;
    uint32_t has_custom_embedding_digest;
    uint32_t has_isolation_digest;
    ctxc_hash128_t adapter_id;
    uint64_t adapter_generation;
    ctxc_hash128_t position_digest;
    ctxc_hash128_t custom_embedding_digest;
    ctxc_hash128_t isolation_digest;
} ctxc_block_key_extras_t;

CTXC_API void ctxc_hasher_options_init(ctxc_hasher_options_t *options);
/* A hasher for an algorithm and optional key. Release with ctxc_hasher_destroy. */
CTXC_API ctxc_status_t ctxc_hasher_create(ctxc_hasher_t **out_hasher, const ctxc_hasher_options_t *options);
/* NULL is accepted (no-op). */
CTXC_API ctxc_status_t ctxc_hasher_destroy(ctxc_hasher_t *hasher);

/* Chained hashes of the floor(token_count / page_size) full blocks of `tokens` (a partial tail is ignored).
 * hasher: NULL = unkeyed SHA-256. extras: NULL/0, one entry (applies to every block) or one per full block.
 * per_position_media_hashes: NULL or token_count entries; a non-zero entry replaces that token's id.
 * Two-call pattern on out_hashes / out_capacity / *out_count. */
CTXC_API ctxc_status_t ctxc_hash_full_blocks(const ctxc_hasher_t *hasher, const int32_t *tokens, size_t token_count,
                                             int32_t page_size, const ctxc_block_key_extras_t *extras,
                                             size_t extras_count, const ctxc_hash128_t *per_position_media_hashes,
                                             ctxc_hash128_t *out_hashes, size_t out_capacity, size_t *out_count);
/* Digest of an exact prefix (ceil(token_count / page_size) blocks, the last may be partial; empty = chain root).
 * extras: NULL/0, one entry, or one per touched block. */
CTXC_API ctxc_status_t ctxc_hash_exact_prefix(const ctxc_hasher_t *hasher, const int32_t *tokens, size_t token_count,
                                              int32_t page_size, const ctxc_block_key_extras_t *extras,
                                              size_t extras_count, const ctxc_hash128_t *per_position_media_hashes,
                                              ctxc_hash128_t *out_digest);
/* One block under `parent` (NULL parent = the chain root). extras may be NULL. */
CTXC_API ctxc_status_t ctxc_hash_block(const ctxc_hasher_t *hasher, const ctxc_hash128_t *parent, const int32_t *tokens,
                                       size_t token_count, const ctxc_block_key_extras_t *extras,
                                       const ctxc_hash128_t *per_position_media_hashes, ctxc_hash128_t *out_hash);
/* Identity of opaque bytes (a LoRA name, a media item). */
CTXC_API ctxc_status_t ctxc_hash_opaque_identity(const ctxc_hasher_t *hasher, const void *bytes, size_t size,
                                                 ctxc_hash128_t *out_hash);

/* ---- manager --------------------------------------------------------------------------------------------- */

typedef struct ctxc_manager_options {
    uint32_t struct_size;
    int32_t page_size;                  /* tokens per page/block, > 0 (default 128) */
    ctxc_resource_demand_t capacities;  /* pool sizes, >= 0 each */
    int32_t max_records;                /* >= 0; 0 keeps no record at all (default 1024) */
} ctxc_manager_options_t;

typedef struct ctxc_reuse_plan {
    int32_t mode;                       /* CTXC_MODE_* */
    int32_t kind;                       /* CTXC_PLAN_* */
    int32_t spec_replay_mode;           /* CTXC_SPEC_REPLAY_* */
    int32_t matched_token_length;       /* what the cache holds of this prompt, before rewind or replay */
    int32_t reuse_token_length;         /* where the request's prefill starts */
    int32_t bound_base_page_count;      /* the lease's first pages that are shared */
    int32_t bound_draft_page_count;
    int32_t hybrid_has_attention;
    ctxc_resource_demand_t demand;      /* what had to be allocated privately */
    uint64_t draft_record;              /* 0 = none */
    uint64_t hybrid_record;             /* 0 = none */
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
    int32_t status;                     /* CTXC_ACQUIRE_* */
    ctxc_reuse_plan_t plan;
} ctxc_acquire_result_t;

typedef struct ctxc_hybrid_candidate {
    int32_t exact_length;
    int32_t reserved;
    ctxc_hash128_t exact_prefix_digest;
} ctxc_hybrid_candidate_t;

typedef struct ctxc_hybrid_snapshot_reservation {
    int32_t recurrent_snapshot_slot;
    int32_t partial_kv_snapshot_slot;   /* -1 = none */
} ctxc_hybrid_snapshot_reservation_t;

typedef struct ctxc_hybrid_checkpoint_key {
    ctxc_hash128_t exact_prefix_digest;
    int32_t exact_length;
    int32_t reserved;
} ctxc_hybrid_checkpoint_key_t;

typedef struct ctxc_publish_result {
    uint32_t struct_size;
    int32_t status;                           /* CTXC_PUBLISH_* */
    uint64_t record;                          /* 0 = none (evicted at once under max_records 0) */
    int32_t published_base_full_block_count;
    int32_t reserved;
    const int32_t *canonical_base_pages;      /* view, valid until the next mutating call on this manager */
    size_t canonical_base_page_count;
} ctxc_publish_result_t;

typedef struct ctxc_manager_metrics {
    uint64_t evicted_records;
    uint64_t reclaimed_base_kv_pages;
    uint64_t reclaimed_draft_kv_pages;
    uint64_t reclaimed_recurrent_snapshots;
    uint64_t reclaimed_partial_kv_snapshots;
} ctxc_manager_metrics_t;

/* A stored record, as views valid until the next mutating call on the manager. */
typedef struct ctxc_record_view {
    uint64_t id;
    ctxc_hash128_t terminal_hash;             /* the exact-prefix digest for a hybrid checkpoint */
    int32_t full_block_count;
    int32_t exact_checkpoint_length;          /* -1 = not a hybrid checkpoint */
    int32_t recurrent_snapshot_slot;          /* -1 = none */
    int32_t partial_kv_snapshot_slot;         /* -1 = none */
    const ctxc_hash128_t *logical_block_hashes;
    size_t logical_block_count;
    const int32_t *base_page_path;
    size_t base_page_count;
    const int32_t *draft_page_path;
    size_t draft_page_count;
} ctxc_record_view_t;

CTXC_API void ctxc_manager_options_init(ctxc_manager_options_t *options);
CTXC_API ctxc_status_t ctxc_manager_create(ctxc_manager_t **out_manager, const ctxc_manager_options_t *options);
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
 * among `candidates` (lengths in (0, input_token_count)) whose record matches `hashes`. */
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
/* Stored hybrid checkpoint lengths below input_token_count, longest first. Two-call pattern. */
CTXC_API ctxc_status_t ctxc_manager_hybrid_candidate_lengths(const ctxc_manager_t *manager, int32_t input_token_count,
                                                             int32_t *out_lengths, size_t out_capacity,
                                                             size_t *out_count);

/* Append `count` private base pages to a vanilla or hybrid lease. *out_ok = 1, or 0 when capacity is short
 * (then nothing changed). */
CTXC_API ctxc_status_t ctxc_manager_grow_base_pages(ctxc_manager_t *manager, ctxc_lease_t *lease, int32_t count,
                                                    int32_t *out_ok);
/* Append base and draft pages to a spec lease, atomically across both pools. */
CTXC_API ctxc_status_t ctxc_manager_grow_spec_pages(ctxc_manager_t *manager, ctxc_lease_t *lease, int32_t base_count,
                                                    int32_t draft_count, int32_t *out_ok);
/* Reserve producer snapshot slots on a hybrid lease (partial only with attention). *out_ok = 0 under retention
 * pressure (nothing changed; the caller skips the capture). */
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
/* Evict one record now. */
CTXC_API ctxc_status_t ctxc_manager_evict_record(ctxc_manager_t *manager, uint64_t record);

CTXC_API ctxc_status_t ctxc_manager_metrics(const ctxc_manager_t *manager, ctxc_manager_metrics_t *out_metrics);
CTXC_API ctxc_status_t ctxc_manager_page_size(const ctxc_manager_t *manager, int32_t *out_page_size);
CTXC_API ctxc_status_t ctxc_manager_pool_counts(const ctxc_manager_t *manager, int32_t resource_type, int32_t *out_free,
                                                int32_t *out_capacity);
CTXC_API ctxc_status_t ctxc_manager_ref_counts(const ctxc_manager_t *manager, int32_t resource_type, int32_t index,
                                               int32_t *out_active, int32_t *out_cache);
/* Free ids of one pool in allocation order (oldest first). Two-call pattern. */
CTXC_API ctxc_status_t ctxc_manager_free_list(const ctxc_manager_t *manager, int32_t resource_type, int32_t *out_ids,
                                              size_t out_capacity, size_t *out_count);
CTXC_API ctxc_status_t ctxc_manager_record_count(const ctxc_manager_t *manager, size_t *out_count);
/* Record ids, least recently used first. Two-call pattern. */
CTXC_API ctxc_status_t ctxc_manager_records_lru(const ctxc_manager_t *manager, uint64_t *out_ids, size_t out_capacity,
                                                size_t *out_count);
CTXC_API ctxc_status_t ctxc_manager_record(const ctxc_manager_t *manager, uint64_t record, ctxc_record_view_t *out_view);
/* The canonical page of a block hash, or -1. */
CTXC_API ctxc_status_t ctxc_manager_base_index_lookup(const ctxc_manager_t *manager, const ctxc_hash128_t *hash,
                                                      int32_t *out_page);
CTXC_API ctxc_status_t ctxc_manager_base_index_size(const ctxc_manager_t *manager, size_t *out_size);
/* The EAGLE draft path index: the longest n <= min(max_block_count, count) such that ONE paired record's
 * boundary n ends at hashes[n-1] (most recent record first). *out_record = 0 and *out_path_block_count = 0 when
 * there is none. Read-only. */
CTXC_API ctxc_status_t ctxc_manager_draft_index_lookup(const ctxc_manager_t *manager, const ctxc_hash128_t *hashes,
                                                       size_t count, int32_t max_block_count, uint64_t *out_record,
                                                       int32_t *out_path_block_count);
/* Entries (record boundaries) in the draft path index. */
CTXC_API ctxc_status_t ctxc_manager_draft_index_size(const ctxc_manager_t *manager, size_t *out_entries);
CTXC_API ctxc_status_t ctxc_manager_live_lease_count(const ctxc_manager_t *manager, size_t *out_count);
/* Heap bytes of every index and record: the cache's metadata cost. */
CTXC_API ctxc_status_t ctxc_manager_metadata_bytes(const ctxc_manager_t *manager, size_t *out_bytes);
/* CTXC_OK, or CTXC_E_INVARIANT with the first violation in ctxc_last_error(). O(capacity + records). */
CTXC_API ctxc_status_t ctxc_manager_check_invariants(const ctxc_manager_t *manager);

/* ---- leases ---------------------------------------------------------------------------------------------- */

typedef struct ctxc_lease_info {
    int32_t state;                      /* CTXC_LEASE_* */
    int32_t mode;                       /* CTXC_MODE_* */
    int32_t hybrid_has_attention;
    int32_t recurrent_snapshot_slot;    /* restored (hit) slot, -1 = none */
    int32_t partial_kv_snapshot_slot;   /* -1 = none */
    int32_t reserved_snapshot_count;    /* producer reservations still owned */
    size_t base_page_count;
    size_t draft_page_count;
} ctxc_lease_info_t;

/* Ordered base-model K-page ids (shared prefix, then private pages): a view valid until the next call that
 * changes this lease (grow, release, destroy) or its manager's destruction. */
CTXC_API ctxc_status_t ctxc_lease_base_pages(const ctxc_lease_t *lease, const int32_t **out_pages, size_t *out_count);
CTXC_API ctxc_status_t ctxc_lease_draft_pages(const ctxc_lease_t *lease, const int32_t **out_pages, size_t *out_count);
/* Works on live, released and orphaned leases (state says which); fails only on an invalid handle. */
CTXC_API ctxc_status_t ctxc_lease_info(const ctxc_lease_t *lease, ctxc_lease_info_t *out_info);
/* Drop every active reference the lease holds; the handle stays until ctxc_lease_destroy. A second release is
 * CTXC_E_INVALID_HANDLE. */
CTXC_API ctxc_status_t ctxc_lease_release(ctxc_lease_t *lease);
/* Release (if still live) and free the handle. NULL is a no-op; a stale handle is CTXC_E_INVALID_HANDLE. */
CTXC_API ctxc_status_t ctxc_lease_destroy(ctxc_lease_t *lease);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_H */
