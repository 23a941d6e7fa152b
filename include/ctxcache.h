/* ctxcache C ABI: a context cache (KV-cache reuse) for LLM inference runtimes.
 *
 * Conventions
 *   - Every symbol is ctxc_<object>_<verb>; types ctxc_<name>_t; constants CTXC_<NAME> (integer literals or
 *     enums only, so that the header is also the cffi cdef).
 *   - Handles are opaque and checked: a NULL, stale (destroyed), double-released, foreign (another manager's
 *     lease) or wrongly typed handle returns CTXC_E_INVALID_HANDLE, never a crash. Handles may be destroyed in
 *     any order: a child (a lease, a request) whose parent (its manager, coordinator or SWA manager) was destroyed
 *     first is detected and reported the same way, whatever it went through before (quarantine, shutdown, the
 *     parent reused for other children); device objects keep what they were built over alive instead.
 *   - Every fallible call returns ctxc_status_t (CTXC_OK == 0). On failure nothing changed (but see
 *     CTXC_E_DEVICE), and ctxc_last_error() (thread-local, never NULL) says which call, which argument and why.
 *   - Capacity shortage is an answer, not an error: an acquire reports CTXC_ACQUIRE_INSUFFICIENT_CAPACITY in its
 *     result, grow and reserve set *out_ok = 0.
 *   - Argument order: the object first, then inputs, then outputs. Every output parameter (out_*: a handle, a
 *     struct, a scalar, or a two-call buffer out_x, out_capacity, out_count) comes last, creates included:
 *     ctxc_<object>_create(<parents...>, options, out_object).
 *   - Every create takes an options struct. Every struct that may grow begins with uint32_t struct_size: options
 *     and request structs (inputs) are filled by their _init() call; output structs are filled by the caller with
 *     sizeof (or zero-initialised and struct_size set), and the library writes them only when struct_size is at
 *     least its own sizeof (else CTXC_E_INVALID_ARGUMENT, nothing written). A new field goes at the end of its
 *     struct. The small value structs used in arrays or embedded (ctxc_hash128_t, ctxc_resource_demand_t,
 *     ctxc_media_span_key_t, ctxc_block_key_extras_t, ctxc_hybrid_candidate_t, ctxc_hybrid_snapshot_reservation_t,
 *     ctxc_hybrid_checkpoint_key_t, ctxc_kv_layer_shape_t, ctxc_resident_ref_t, ctxc_kv_headroom_t,
 *     ctxc_media_item_t, ctxc_sequence_request_t, ctxc_tensor_view_t, and ctxc_reuse_plan_t, the last member of
 *     ctxc_acquire_result_t whose struct_size covers it) are frozen: their size is static_asserted in the
 *     library and a change to them is a new type.
 *   - The calls in the "introspection" sections, named ctxc_debug_*, read internal state for tests and checkers
 *     (reference counts, free lists, records, indexes, the device copy of a page table). A runtime needs none of
 *     them; they may cost O(state) and may change with CTXC_ABI_VERSION like any other call.
 *   - Variable-size outputs are pointer + count views owned by the library, valid until the next mutating call
 *     on the same manager (or lease), or caller buffers with the two-call pattern (out_capacity, *out_count:
 *     CTXC_E_BUFFER_TOO_SMALL still sets *out_count to the size needed).
 *   - Hashes are ctxc_hash128_t {hi, lo}: an array of n of them is the same memory as an (n, 2) uint64 array.
 *
 * Errors: which status for which failure (the one statement of it; the code and the tests follow it)
 *   CTXC_E_INVALID_ARGUMENT  an argument malformed in itself, whatever the state: a required pointer NULL, a NULL
 *                            array or byte buffer with a non-zero count, a negative count or length, a value that
 *                            is not one of its CTXC_* constants, a 0/1 flag with another value, a struct_size
 *                            smaller than the struct's.
 *   CTXC_E_CONTRACT          an argument inconsistent with the state of the objects it names: an id, index, slot,
 *                            page, layer, record or byte range outside what the object holds (every out-of-range
 *                            read or write, on every object), an invalid geometry, a wrong lease kind, a changed
 *                            prefix, objects from different backends.
 *   CTXC_E_INVALID_HANDLE    a NULL, stale, double-released, foreign, orphaned or wrongly typed handle.
 *   CTXC_E_DEVICE            the CUDA runtime failed (the CUDA error is in ctxc_last_error()); device memory the
 *                            call touched is unspecified, the objects can still be destroyed.
 *   CTXC_E_NO_MEMORY         a host allocation failed (the message names what and, where known, the bytes it needed).
 *   CTXC_E_UNSUPPORTED       the build or the machine lacks what was asked for (CUDA), with the reason.
 *   CTXC_E_BUFFER_TOO_SMALL  a two-call output buffer is short (*out_count says how much is needed).
 *   CTXC_E_INVARIANT         a check_invariants call found the state inconsistent (a ctxcache bug).
 *   CTXC_E_LEASES_OUTSTANDING  ctxc_manager_destroy orphaned live leases, or ctxc_coordinator_destroy orphaned
 *                            live requests (the manager or coordinator is destroyed anyway).
 *   CTXC_E_REQUEST_FAILED    a runtime request step could not be served (capacity, page-table overflow, another
 *                            request active, a deployment without that reuse): an answer about this request, not a
 *                            malformed call; ctxc_last_error() holds the request's own last error.
 *   CTXC_E_POISONED          a device synchronisation failed: the coordinator refuses new work until
 *                            ctxc_coordinator_shutdown() synchronises its quarantined requests successfully.
 *   CTXC_E_CONCURRENT_USE    the call overlapped another call into the same handle family (below) on another
 *                            thread, or re-entered one from a callback: the single-writer contract was broken.
 *                            Refused before the family's state is read or changed; ctxc_last_error() names both
 *                            calls (the one in progress and the one refused).
 *   CTXC_E_INTERRUPTED       a long-running call stopped early because the caller asked it to
 *                            (ctxc_sim_engine_interrupt); the object is consistent and may be used again.
 *   CTXC_E_INTERNAL          anything else: a ctxcache bug.
 *
 * Threading: the handles of one family follow a single-writer contract: the caller serializes every call that
 * touches them (including read-only queries, and destroys). The families: a manager, its leases and its KV events;
 * a device backend and everything built on it (device objects, the coordinators and bounded-SWA managers built
 * over them, and their requests); a coordinator without device objects and its requests; a sim engine; a sim
 * results object. A breach is detected, not undefined: a call that starts while another call is inside its family
 * returns CTXC_E_CONCURRENT_USE (it does not wait; nothing changed). Different families may be used from different
 * threads at once. Hashers are immutable and shareable; a KV event publisher may be used from any thread.
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

#define CTXC_ABI_VERSION 2

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
    CTXC_E_INTERNAL = 9,
    CTXC_E_DEVICE = 10,             /* the CUDA runtime failed; device memory touched by the call is unspecified */
    CTXC_E_REQUEST_FAILED = 11, /* a runtime request step could not be served (capacity, ...): see the table above */
    CTXC_E_POISONED = 12, /* a device synchronisation failed; the coordinator needs a successful shutdown */
    CTXC_E_CONCURRENT_USE = 13, /* another call was inside the same handle family: see Threading above */
    CTXC_E_INTERRUPTED = 14, /* the caller asked a long call to stop (ctxc_sim_engine_interrupt); nothing returned */
    CTXC_STATUS_COUNT /* not a status: one past the last code (a new code goes before it) */
} ctxc_status_t;

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
    int32_t algorithm; /* CTXC_HASH_SHA256 (default) or CTXC_HASH_FNV1A128 */
    const uint8_t *key; /* optional secret for SHA-256 (NULL or key_length 0: unkeyed); copied */
    size_t key_length;
} ctxc_hasher_options_t;

typedef struct ctxc_media_span_key {
    ctxc_hash128_t content_digest;
    ctxc_hash128_t placement_digest;
    int32_t offset_within_block;
    int32_t item_order;
    uint32_t modality; /* 0..255 */
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
CTXC_API ctxc_status_t ctxc_hasher_create(const ctxc_hasher_options_t *options, ctxc_hasher_t **out_hasher);
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
} ctxc_manager_metrics_t;

/* A stored record, as views valid until the next mutating call on the manager. */
typedef struct ctxc_record_view {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t id;
    ctxc_hash128_t terminal_hash; /* the exact-prefix digest for a hybrid checkpoint */
    int32_t full_block_count;
    int32_t exact_checkpoint_length; /* -1 = not a hybrid checkpoint */
    int32_t recurrent_snapshot_slot; /* -1 = none */
    int32_t partial_kv_snapshot_slot; /* -1 = none */
    const ctxc_hash128_t *logical_block_hashes;
    size_t logical_block_count;
    const int32_t *base_page_path;
    size_t base_page_count;
    const int32_t *draft_page_path;
    size_t draft_page_count;
    int32_t hybrid_mtp_checkpoint; /* 1 = a Hybrid+MTP checkpoint (full blocks floor((length - 1) / page_size)) */
    int32_t reserved2;
} ctxc_record_view_t;

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
CTXC_API ctxc_status_t ctxc_manager_record_count(const ctxc_manager_t *manager, size_t *out_count);
/* Entries (block hashes) in the base block index. */
CTXC_API ctxc_status_t ctxc_manager_base_index_size(const ctxc_manager_t *manager, size_t *out_size);
CTXC_API ctxc_status_t ctxc_manager_live_lease_count(const ctxc_manager_t *manager, size_t *out_count);
/* Heap bytes of every index and record: the cache's metadata cost. */
CTXC_API ctxc_status_t ctxc_manager_metadata_bytes(const ctxc_manager_t *manager, size_t *out_bytes);
/* CTXC_OK, or CTXC_E_INVARIANT with the first violation in ctxc_last_error(). O(ids allocated so far + records). */
CTXC_API ctxc_status_t ctxc_manager_check_invariants(const ctxc_manager_t *manager);

/* The same publications with the prompt's tokens, which a manager with KV events on needs (BlockStored carries
 * them; see ctxc_kv_events_enable): `tokens` holds at least (published blocks) * page_size token ids, block i's
 * first (else CTXC_E_CONTRACT and nothing changed). Without events the tokens are read for nothing. */
CTXC_API ctxc_status_t ctxc_manager_publish_with_tokens(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                        const ctxc_hash128_t *hashes, size_t count,
                                                        int32_t resident_state_length, const int32_t *tokens,
                                                        size_t token_count, ctxc_publish_result_t *out_result);
CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_with_tokens(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                               const ctxc_hash128_t *hashes, size_t count,
                                                               const ctxc_hybrid_checkpoint_key_t *checkpoint,
                                                               const ctxc_hybrid_snapshot_reservation_t *snapshots,
                                                               const int32_t *tokens, size_t token_count,
                                                               ctxc_publish_result_t *out_result);
CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_mtp_with_tokens(ctxc_manager_t *manager, ctxc_lease_t *lease,
                                                                   const ctxc_hash128_t *hashes, size_t count,
                                                                   const ctxc_hybrid_checkpoint_key_t *checkpoint,
                                                                   const ctxc_hybrid_snapshot_reservation_t *snapshots,
                                                                   const int32_t *tokens, size_t token_count,
                                                                   ctxc_publish_result_t *out_result);
/* Evict every record (a prefix-cache reset). Live leases keep what they pin; nothing is findable any more. With
 * KV events on, one AllBlocksCleared event instead of the removals. */
CTXC_API ctxc_status_t ctxc_manager_clear(ctxc_manager_t *manager);

/* ---- KV events (docs/EVENTS.md) ------------------------------------------------------------------------------
 * A manager can report the changes of its base block index in vLLM's KV event vocabulary, so that cluster routers
 * (NVIDIA Dynamo, llm-d) learn which replica holds a prefix: BlockStored when a publication makes blocks canonical
 * (one event per run of new blocks, root-first, with the parent and the tokens), BlockRemoved when eviction erases
 * them (leaf-first), AllBlocksCleared when events are enabled and on ctxc_manager_clear. Block hashes are the low
 * 64 bits (`lo`) of the 128-bit block hashes. The events are drained (ctxc_kv_events_drain) for runtimes that ship
 * them their own way, or sent by a ZMQ publisher attached to the manager, one batch per manager call.
 *
 * `cache` names the manager: a ctxc_manager_t *, or the manager inside a ctxc_coordinator_t * or a
 * ctxc_sim_engine_t * (anything else: CTXC_E_INVALID_HANDLE). Every call follows that object's single-writer
 * contract. */
enum { CTXC_KV_EVENT_BLOCK_STORED = 0, CTXC_KV_EVENT_BLOCK_REMOVED = 1, CTXC_KV_EVENT_ALL_BLOCKS_CLEARED = 2 };

typedef struct ctxc_kv_event {
    int32_t type; /* CTXC_KV_EVENT_* */
    int32_t has_parent; /* BlockStored: 1 when parent_block_hash names the block before the first listed one */
    uint64_t parent_block_hash;
    const uint64_t *block_hashes; /* root-first for BlockStored, leaf-first for BlockRemoved */
    size_t block_hash_count;
    const int32_t *token_ids; /* BlockStored: block_size tokens per listed block */
    size_t token_count;
} ctxc_kv_event_t;

typedef struct ctxc_kv_event_publisher ctxc_kv_event_publisher_t;

typedef struct ctxc_kv_event_publisher_options {
    uint32_t struct_size;
    int32_t data_parallel_rank; /* -1 (default): none, nil on the wire; r >= 0 also adds r to a tcp port */
    const char *endpoint; /* PUB endpoint (default: tcp port 5557 on every interface, vLLM's default); one with
                             a "*" or "::" host, or ipc or inproc, binds; any other connects (vLLM's rule) */
    const char *replay_endpoint; /* NULL or "" (default): no replay; else a ROUTER that binds there */
    const char *topic; /* default ""; llm-d expects "kv@<pod>@<model>" */
    const char *medium; /* default "GPU" */
    uint64_t buffer_steps; /* batches kept for replay (default 10000) */
    uint64_t max_queued_batches; /* batches waiting to be sent; beyond, the oldest is dropped (default 10000) */
    int32_t send_high_water_mark; /* ZMQ_SNDHWM (default 100000) */
    int32_t array_encoding; /* 1: events as positional arrays (vLLM < 0.24 consumers); 0 (default): tagged maps */
    int32_t has_first_sequence; /* 1: the first batch gets first_sequence; 0 (default): microseconds since the
                                   Unix epoch, so that a restarted publisher continues above its old numbers */
    int32_t reserved;
    uint64_t first_sequence;
} ctxc_kv_event_publisher_options_t;

typedef struct ctxc_kv_event_publisher_stats {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t accepted_batches; /* batches handed over by a manager (each got a sequence number) */
    uint64_t sent_batches;
    uint64_t dropped_batches; /* dropped from the full queue, refused by ZMQ, or received after destroy */
    uint64_t queued_batches;
    uint64_t next_sequence;
    uint64_t replay_requests;
} ctxc_kv_event_publisher_stats_t;

/* Turn the event stream on; the first event is AllBlocksCleared. CTXC_E_CONTRACT when it is already on or when
 * the manager already holds cached blocks (enable it before the first publication). Undrained events beyond
 * max_pending_events (0: 1048576) at the end of a call are dropped (counted as lost) and replaced by one
 * AllBlocksCleared: a consumer then under-reports this cache, never over-reports it. */
CTXC_API ctxc_status_t ctxc_kv_events_enable(void *cache, size_t max_pending_events);
/* Turn it off: pending events are dropped and a publisher is detached. Idempotent. */
CTXC_API ctxc_status_t ctxc_kv_events_disable(void *cache);
/* Take the pending events: *out_events (*out_count of them) and the arrays they point into stay valid until the
 * next drain on this cache or its destruction. *out_block_size (optional) = the page size. With a publisher
 * attached, nothing is pending. */
CTXC_API ctxc_status_t ctxc_kv_events_drain(void *cache, const ctxc_kv_event_t **out_events, size_t *out_count,
                                            int32_t *out_block_size);
/* Each optional: whether events are on, how many wait for a drain, how many were lost to the pending limit. */
CTXC_API ctxc_status_t ctxc_kv_events_status(const void *cache, int32_t *out_enabled, size_t *out_pending,
                                             uint64_t *out_lost);
/* Send each later call's events through `publisher` (NULL detaches: events wait for a drain again); pending
 * events go to it now. Events must be on (CTXC_E_CONTRACT). The cache keeps the publisher alive while attached;
 * after ctxc_kv_event_publisher_destroy it only counts what it drops. */
CTXC_API ctxc_status_t ctxc_kv_events_attach_publisher(void *cache, ctxc_kv_event_publisher_t *publisher);

/* 1 when this library was built with the ZMQ publisher (libzmq, msgpack-cxx), else 0. */
CTXC_API int32_t ctxc_kv_event_publisher_available(void);
CTXC_API void ctxc_kv_event_publisher_options_init(ctxc_kv_event_publisher_options_t *options);
/* Bind or connect the sockets and start the sender thread. CTXC_E_UNSUPPORTED without the publisher in this
 * build; CTXC_E_CONTRACT when ZMQ refuses an endpoint (in use, malformed) or a rank cannot offset it. A manager
 * call never waits for the network: batches go through a bounded queue to the sender thread. */
CTXC_API ctxc_status_t ctxc_kv_event_publisher_create(const ctxc_kv_event_publisher_options_t *options,
                                                      ctxc_kv_event_publisher_t **out_publisher);
/* Send what is queued (ZMQ lingers at most a second), stop, close the sockets. NULL is a no-op. */
CTXC_API ctxc_status_t ctxc_kv_event_publisher_destroy(ctxc_kv_event_publisher_t *publisher);
CTXC_API ctxc_status_t ctxc_kv_event_publisher_stats(const ctxc_kv_event_publisher_t *publisher,
                                                     ctxc_kv_event_publisher_stats_t *out_stats);
/* Wait up to timeout_ms for the queue to empty; *out_empty (optional) = 1 when it did. */
CTXC_API ctxc_status_t ctxc_kv_event_publisher_flush(ctxc_kv_event_publisher_t *publisher, int32_t timeout_ms,
                                                     int32_t *out_empty);
/* The msgpack payload the publisher sends for these events (a 3-frame message's last frame), for tests and for
 * shipping events another way: two-call pattern into out_bytes. CTXC_E_UNSUPPORTED without the publisher. */
CTXC_API ctxc_status_t ctxc_kv_events_encode(const ctxc_kv_event_t *events, size_t count, int32_t block_size,
                                             double timestamp, int32_t data_parallel_rank, const char *medium,
                                             int32_t array_encoding, uint8_t *out_bytes, size_t out_capacity,
                                             size_t *out_size);

/* ---- manager introspection (tests and checkers; see Conventions) ---------------------------------------- */

/* Reference counts of one id: index in [0, capacity) of its pool (else CTXC_E_CONTRACT). */
CTXC_API ctxc_status_t ctxc_debug_manager_ref_counts(const ctxc_manager_t *manager, int32_t resource_type,
                                                     int32_t index, int32_t *out_active, int32_t *out_cache);
/* Free ids of one pool in allocation order (oldest first). Two-call pattern. */
CTXC_API ctxc_status_t ctxc_debug_manager_free_list(const ctxc_manager_t *manager, int32_t resource_type,
                                                    int32_t *out_ids, size_t out_capacity, size_t *out_count);
/* Record ids, least recently used first. Two-call pattern. */
CTXC_API ctxc_status_t ctxc_debug_manager_records_lru(const ctxc_manager_t *manager, uint64_t *out_ids,
                                                      size_t out_capacity, size_t *out_count);
/* One stored record (CTXC_E_CONTRACT if there is none with that id). */
CTXC_API ctxc_status_t ctxc_debug_manager_record(const ctxc_manager_t *manager, uint64_t record,
                                                 ctxc_record_view_t *out_view);
/* The canonical page of a block hash, or -1. */
CTXC_API ctxc_status_t ctxc_debug_manager_base_index_lookup(const ctxc_manager_t *manager, const ctxc_hash128_t *hash,
                                                            int32_t *out_page);
/* The EAGLE draft path index: the longest n <= min(max_block_count, count) such that ONE paired record's
 * boundary n ends at hashes[n-1] (most recent record first). *out_record = 0 and *out_path_block_count = 0 when
 * there is none. Read-only. */
CTXC_API ctxc_status_t ctxc_debug_manager_draft_index_lookup(const ctxc_manager_t *manager,
                                                             const ctxc_hash128_t *hashes, size_t count,
                                                             int32_t max_block_count, uint64_t *out_record,
                                                             int32_t *out_path_block_count);
/* Entries (record boundaries) in the draft path index. */
CTXC_API ctxc_status_t ctxc_debug_manager_draft_index_size(const ctxc_manager_t *manager, size_t *out_entries);

/* ---- leases ---------------------------------------------------------------------------------------------- */

typedef struct ctxc_lease_info {
    uint32_t struct_size;
    int32_t state; /* CTXC_LEASE_* */
    int32_t mode; /* CTXC_MODE_* */
    int32_t hybrid_has_attention;
    int32_t recurrent_snapshot_slot; /* restored (hit) slot, -1 = none */
    int32_t partial_kv_snapshot_slot; /* -1 = none */
    int32_t reserved_snapshot_count; /* producer reservations still owned */
    int32_t reserved;
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

/* ---- device layer ---------------------------------------------------------------------------------------- */

/* Device storage and every data movement on it: KV page pools, page tables, KV lengths, resident recurrent state,
 * snapshot slabs, batch compaction, paged-to-dense gather and chunked FNV-1a hashing. Every object lives on a
 * backend: CPU (always available; "device memory" is host memory; the reference) or CUDA (when the library was
 * built with it and a device is visible). Both give identical bytes. Bytes move between host buffers and objects
 * with the *_write / *_read calls; an engine that runs its own kernels on them reads their addresses and layouts
 * as ctxc_device_view_t (the *_view calls, and the DLPack export below). Every storage object allocates all its
 * device memory at creation and reports its exact footprint, or is built over memory the caller already owns
 * (the external_* option fields: never freed, zeroed or written at creation, so its bytes are the object's
 * initial contents; a NULL pointer, a misalignment or too few bytes is CTXC_E_INVALID_ARGUMENT, nothing
 * created); no operation allocates device memory. Every stream-ordered call runs on the backend's stream, which
 * may be the caller's (ctxc_device_backend_set_stream).
 *
 * Errors (the table at the top applies): an invalid geometry, an out-of-range id, slot, page or byte range, an
 * overlapping or reordering compaction map and a dtype the operation cannot take are CTXC_E_CONTRACT (nothing
 * changed); a failing CUDA call is CTXC_E_DEVICE; asking for CUDA where it is unavailable is CTXC_E_UNSUPPORTED.
 * Lifetimes: an object keeps what it was built from alive (its backend, the pools and state of a snapshot
 * storage), so handles may be destroyed in any order. Objects used together must share one backend.
 * Threading: a backend and everything built on it are one family of the single-writer contract (an overlapping
 * call is CTXC_E_CONCURRENT_USE). */

enum { CTXC_BACKEND_AUTO = 0, CTXC_BACKEND_CPU = 1, CTXC_BACKEND_CUDA = 2 };
enum { CTXC_DTYPE_FP16 = 0, CTXC_DTYPE_BF16 = 1, CTXC_DTYPE_FP8_E4M3 = 2, CTXC_DTYPE_FP32 = 3 };
enum {
    CTXC_STATE_RECURRENT = 0,
    CTXC_STATE_CONV = 1,
    CTXC_STATE_BOUNDARY_HIDDEN = 2,
    CTXC_STATE_PARTIAL_KV = 3, /* snapshot storage: one base attention layer's partial K then V */
    CTXC_STATE_DRAFT_PARTIAL_KV = 4 /* snapshot storage: one draft attention layer's partial K then V */
};
enum { CTXC_PAGE_TABLE_DENSE = 0, CTXC_PAGE_TABLE_SPARSE_WINDOW = 1 };
enum { CTXC_DEFAULT_HASH_CHUNKS = 2048 };

typedef struct ctxc_device_backend ctxc_device_backend_t;
typedef struct ctxc_device_buffer ctxc_device_buffer_t;
typedef struct ctxc_kv_pool ctxc_kv_pool_t;
typedef struct ctxc_kv_page_table ctxc_kv_page_table_t;
typedef struct ctxc_kv_lengths ctxc_kv_lengths_t;
typedef struct ctxc_resident_state ctxc_resident_state_t;
typedef struct ctxc_snapshot_storage ctxc_snapshot_storage_t;

typedef struct ctxc_device_backend_options {
    uint32_t struct_size;
    int32_t kind; /* CTXC_BACKEND_* (default AUTO: CUDA when usable, else CPU) */
    int32_t device; /* CUDA device ordinal (default 0) */
    uint32_t max_hash_chunks; /* capacity of ctxc_device_hash_chunked (default 65536) */
    size_t max_table_bytes; /* per-operation descriptor table, in [4096, 1 GiB] (default 1 MiB) */
    void *stream; /* CUDA: the cudaStream_t to run on; NULL = a stream of the backend's own */
} ctxc_device_backend_options_t;

/* Element types of a device view: the CTXC_DTYPE_* values, plus the integer types of page tables, KV lengths and
 * raw bytes (never a storage dtype). */
enum {
    CTXC_ELEMENT_FP16 = 0,
    CTXC_ELEMENT_BF16 = 1,
    CTXC_ELEMENT_FP8_E4M3 = 2,
    CTXC_ELEMENT_FP32 = 3,
    CTXC_ELEMENT_INT32 = 4,
    CTXC_ELEMENT_UINT8 = 5,
    CTXC_ELEMENT_UINT16 = 6
};

/* Where an object's device memory is and how it is laid out: a dense, C-contiguous (row-major) array of `ndim`
 * dimensions. data is a device pointer as void * (CUDA: memory of the backend's device, usable by the caller's
 * kernels on any stream ordered after the backend's stream; CPU backend: host memory). It stays valid while the
 * object lives, whatever else is called (no operation reallocates); bytes = product(shape) * element size.
 * An output struct: set struct_size = sizeof before the call. */
typedef struct ctxc_device_view {
    uint32_t struct_size;
    int32_t element;              /* CTXC_ELEMENT_* */
    void *data;                   /* NULL only when bytes == 0 */
    size_t bytes;
    int32_t backend;              /* CTXC_BACKEND_CPU or CTXC_BACKEND_CUDA: where data lives */
    int32_t device;               /* CUDA device ordinal (0 on the CPU backend) */
    int32_t ndim;                 /* entries of shape in use (1..5) */
    int32_t external;             /* 1: memory the caller gave at creation (external_data), 0: the library's */
    int64_t shape[5];
} ctxc_device_view_t;

typedef struct ctxc_launch_counters {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t kernels; /* kernel launches (the CPU backend counts one per operation) */
    uint64_t transfers; /* copies and memsets, descriptor-table uploads included */
} ctxc_launch_counters_t;

typedef struct ctxc_kv_layer_shape {
    int32_t kv_heads;
    int32_t head_dim;
} ctxc_kv_layer_shape_t;

/* One pool of paged KV: per layer [2, num_pages, page_size, kv_heads, head_dim] (K half, then V half). */
typedef struct ctxc_kv_pool_options {
    uint32_t struct_size;
    int32_t num_pages; /* K pages; the V page of K page p is flat page p + num_pages */
    int32_t page_size; /* tokens per page (default 128) */
    int32_t dtype; /* CTXC_DTYPE_* (default FP16) */
    const ctxc_kv_layer_shape_t *layers; /* one per attention layer; copied */
    size_t layer_count;
    /* Build the pool over caller memory (device memory of the backend's device, or host memory on CPU), 256-byte
     * aligned and at least ctxc_kv_pool_required_bytes: not owned, never freed, zeroed or written at creation.
     * NULL (default) = allocate. A struct_size that ends before them (a caller built before they existed) means
     * NULL; see ctxc_kv_pool_create. */
    void *external_data;
    size_t external_bytes;
} ctxc_kv_pool_options_t;

/* Live per-slot state: per recurrent layer a recurrent row [heads, head_dim, state_size] and a conv row
 * [conv_dim, conv_kernel]; optionally an fp16 boundary hidden row [hidden_size]. */
typedef struct ctxc_resident_state_options {
    uint32_t struct_size;
    int32_t max_batch;
    int32_t num_layers; /* recurrent layers (0: hidden rows only) */
    int32_t recurrent_heads;
    int32_t recurrent_head_dim;
    int32_t state_size;
    int32_t recurrent_dtype; /* default FP32 */
    int32_t conv_dim; /* conv_dim and conv_kernel both 0: no conv state */
    int32_t conv_kernel;
    int32_t conv_dtype;           /* default FP16 */
    int32_t hidden_size;          /* 0 = no boundary hidden row */
    void *external_data;          /* as in ctxc_kv_pool_options_t; >= ctxc_resident_state_required_bytes */
    size_t external_bytes;
} ctxc_resident_state_options_t;

typedef struct ctxc_snapshot_storage_options {
    uint32_t struct_size;
    int32_t boundary_hidden; /* 0/1: recurrent slots also hold the boundary hidden row */
    size_t recurrent_budget_bytes;
    size_t partial_kv_budget_bytes;
    /* Caller memory for each slab (as in ctxc_kv_pool_options_t, 256-byte aligned), at least slots * bytes per
     * slot of that kind (slots = budget / bytes per slot; the layout after creation says both). NULL = allocate. */
    void *external_recurrent_data;
    size_t external_recurrent_bytes;
    void *external_partial_kv_data;
    size_t external_partial_kv_bytes;
} ctxc_snapshot_storage_options_t;

typedef struct ctxc_snapshot_layout {
    uint32_t struct_size;
    uint32_t reserved;
    size_t recurrent_bytes_per_slot; /* layers * (recurrent + conv row) [+ hidden row] */
    size_t partial_kv_bytes_per_slot; /* sum over base and draft layers of 2 * page bytes */
    int32_t recurrent_slots; /* recurrent_budget_bytes / recurrent_bytes_per_slot */
    int32_t partial_kv_slots;
    size_t footprint_bytes; /* exactly slots * bytes per slot, both kinds */
    int32_t max_descriptors; /* descriptors of the largest transfer (all in one launch) */
    int32_t reserved2;
} ctxc_snapshot_layout_t;

/* One checkpoint transfer; a part whose slot is -1 is skipped (ctxc_snapshot_transfer_init sets all to -1). */
typedef struct ctxc_snapshot_transfer {
    uint32_t struct_size;
    int32_t batch_slot; /* resident slot of the recurrent part */
    int32_t recurrent_slot;
    int32_t partial_kv_slot;
    int32_t base_page; /* K page id in the base pool */
    int32_t draft_page; /* K page id in the draft pool (iff the storage has one) */
    int32_t valid_tokens; /* 0 < valid_tokens < page_size; == page_size allowed with a draft pool (Hybrid+MTP) */
    int32_t reserved;
} ctxc_snapshot_transfer_t;

typedef struct ctxc_device_buffer_options {
    uint32_t struct_size;
    uint32_t reserved;
    size_t bytes;                 /* size of the zero-filled buffer (default 0) */
    void *external_data;          /* a window of `bytes` on caller memory (256-byte aligned, external_bytes >=
                                   * bytes), not owned, not zeroed; NULL (default) = allocate */
    size_t external_bytes;
} ctxc_device_buffer_options_t;

/* A [max_batch, 2, max_pages_per_seq] int32 page table (K ids, then V ids = K + num_pages; -1 unused). */
typedef struct ctxc_kv_page_table_options {
    uint32_t struct_size;
    int32_t max_batch;
    int32_t max_pages_per_seq;
    int32_t num_pages;            /* K pages of the pool the table indexes */
    int32_t mode;                 /* CTXC_PAGE_TABLE_* (default DENSE) */
    /* The device view over caller memory: 4-byte aligned, >= max_batch * 2 * max_pages_per_seq * 4 bytes. Nothing
     * is written there at creation: every row starts dirty, and the first upload writes the whole table. */
    void *external_data;
    size_t external_bytes;
} ctxc_kv_page_table_options_t;

typedef struct ctxc_kv_lengths_options {
    uint32_t struct_size;
    int32_t max_batch;
    void *external_data;          /* caller memory: 4-byte aligned, >= 4 * max_batch bytes; not written at creation */
    size_t external_bytes;
} ctxc_kv_lengths_options_t;

typedef struct ctxc_kv_gather_request {
    uint32_t struct_size;
    int32_t layer;
    int32_t batch; /* slots [0, batch) of the table */
    int32_t seq_len; /* tokens per output row */
    int32_t out_dtype; /* the pool's dtype, or FP16/BF16/FP32 from an FP8 pool (dequantised) */
    float k_scale; /* FP8 dequantisation scales (default 1) */
    float v_scale;
} ctxc_kv_gather_request_t;

CTXC_API void ctxc_device_backend_options_init(ctxc_device_backend_options_t *options);
/* CTXC_E_UNSUPPORTED (with the reason) when kind is CUDA and CUDA is not built in or sees no device. */
CTXC_API ctxc_status_t ctxc_device_backend_create(const ctxc_device_backend_options_t *options,
                                                  ctxc_device_backend_t **out_backend);
/* NULL is a no-op. Objects built on the backend keep it alive until they are destroyed too. */
CTXC_API ctxc_status_t ctxc_device_backend_destroy(ctxc_device_backend_t *backend);
/* CTXC_BACKEND_CPU or CTXC_BACKEND_CUDA. */
CTXC_API ctxc_status_t ctxc_device_backend_kind(const ctxc_device_backend_t *backend, int32_t *out_kind);
CTXC_API ctxc_status_t ctxc_device_backend_synchronize(ctxc_device_backend_t *backend);
CTXC_API ctxc_status_t ctxc_device_backend_counters(const ctxc_device_backend_t *backend,
                                                    ctxc_launch_counters_t *out_counters);
/* Device bytes currently allocated on the backend by every object built on it (external memory not counted). */
CTXC_API ctxc_status_t ctxc_device_backend_allocated_bytes(const ctxc_device_backend_t *backend, size_t *out_bytes);
/* Run every later stream-ordered call of this backend (and of everything built on it) on `stream`: CUDA, a
 * cudaStream_t of the backend's device, NULL = the backend's own stream again; the work issued before the switch
 * completes before this returns. The backend never destroys a caller's stream: switch back (NULL) before
 * destroying it. The CPU backend accepts any value and ignores it (its calls complete before they return). */
CTXC_API ctxc_status_t ctxc_device_backend_set_stream(ctxc_device_backend_t *backend, void *stream);
/* The stream in use: CUDA, the cudaStream_t (the backend's own unless set); CPU, the last value set (NULL). */
CTXC_API ctxc_status_t ctxc_device_backend_stream(const ctxc_device_backend_t *backend, void **out_stream);

/* A plain zero-filled device buffer (inputs and outputs of the generic operations). */
CTXC_API void ctxc_device_buffer_options_init(ctxc_device_buffer_options_t *options);
CTXC_API ctxc_status_t ctxc_device_buffer_create(ctxc_device_backend_t *backend,
                                                 const ctxc_device_buffer_options_t *options,
                                                 ctxc_device_buffer_t **out_buffer);
CTXC_API ctxc_status_t ctxc_device_buffer_destroy(ctxc_device_buffer_t *buffer);
CTXC_API ctxc_status_t ctxc_device_buffer_size(const ctxc_device_buffer_t *buffer, size_t *out_bytes);
/* [offset, offset + size) must lie inside the buffer. */
CTXC_API ctxc_status_t ctxc_device_buffer_write(ctxc_device_buffer_t *buffer, size_t offset, const void *src,
                                                size_t size);
CTXC_API ctxc_status_t ctxc_device_buffer_read(const ctxc_device_buffer_t *buffer, size_t offset, void *dst,
                                               size_t size);
/* The buffer: UINT8 [bytes]. */
CTXC_API ctxc_status_t ctxc_device_buffer_view(const ctxc_device_buffer_t *buffer, ctxc_device_view_t *out_view);

CTXC_API void ctxc_kv_pool_options_init(ctxc_kv_pool_options_t *options);
CTXC_API ctxc_status_t ctxc_kv_pool_create(ctxc_device_backend_t *backend, const ctxc_kv_pool_options_t *options,
                                           ctxc_kv_pool_t **out_pool);
CTXC_API ctxc_status_t ctxc_kv_pool_destroy(ctxc_kv_pool_t *pool);
/* Bytes of one K (or V) page of a layer: page_size * kv_heads * head_dim * sizeof(dtype). */
CTXC_API ctxc_status_t ctxc_kv_pool_page_bytes(const ctxc_kv_pool_t *pool, int32_t layer, size_t *out_bytes);
CTXC_API ctxc_status_t ctxc_kv_pool_footprint_bytes(const ctxc_kv_pool_t *pool, size_t *out_bytes);
/* The footprint a pool of these options would have: what external_data must hold (the external fields are
 * ignored). The same geometry errors as ctxc_kv_pool_create. */
CTXC_API ctxc_status_t ctxc_kv_pool_required_bytes(const ctxc_kv_pool_options_t *options, size_t *out_bytes);
/* One layer: the pool's dtype, [2, num_pages, page_size, kv_heads, head_dim] (K half, then V half: K page p at
 * data + p * page bytes, its V page at data + (p + num_pages) * page bytes). Layers start 256-byte aligned. */
CTXC_API ctxc_status_t ctxc_kv_pool_layer_view(const ctxc_kv_pool_t *pool, int32_t layer, ctxc_device_view_t *out_view);
/* The whole pool: UINT8 [footprint] (layer l at its layer view's data). */
CTXC_API ctxc_status_t ctxc_kv_pool_memory_view(const ctxc_kv_pool_t *pool, ctxc_device_view_t *out_view);
/* page_count consecutive flat pages from first_flat_page (in [0, 2 * num_pages)); size = page_count * page bytes. */
CTXC_API ctxc_status_t ctxc_kv_pool_write_pages(ctxc_kv_pool_t *pool, int32_t layer, int32_t first_flat_page,
                                                int32_t page_count, const void *src, size_t size);
CTXC_API ctxc_status_t ctxc_kv_pool_read_pages(const ctxc_kv_pool_t *pool, int32_t layer, int32_t first_flat_page,
                                               int32_t page_count, void *dst, size_t size);

/* A page table of at most INT32_MAX entries (see ctxc_kv_page_table_options_t). The host table is the truth;
 * ctxc_kv_page_table_upload copies the rows changed since the last upload. */
CTXC_API void ctxc_kv_page_table_options_init(ctxc_kv_page_table_options_t *options);
CTXC_API ctxc_status_t ctxc_kv_page_table_create(ctxc_device_backend_t *backend,
                                                 const ctxc_kv_page_table_options_t *options,
                                                 ctxc_kv_page_table_t **out_table);
CTXC_API ctxc_status_t ctxc_kv_page_table_destroy(ctxc_kv_page_table_t *table);
/* Slot reads K pages k_pages[0..count) then -1. -1 entries (holes) only in sparse-window mode. */
CTXC_API ctxc_status_t ctxc_kv_page_table_set_row(ctxc_kv_page_table_t *table, int32_t slot, const int32_t *k_pages,
                                                  size_t count);
CTXC_API ctxc_status_t ctxc_kv_page_table_clear_row(ctxc_kv_page_table_t *table, int32_t slot);
CTXC_API ctxc_status_t ctxc_kv_page_table_set_identity(ctxc_kv_page_table_t *table);
/* Dense mode: only appending after the live prefix, replacing a live entry, or clearing the last one. */
CTXC_API ctxc_status_t ctxc_kv_page_table_set_entry(ctxc_kv_page_table_t *table, int32_t slot, int32_t logical_page,
                                                    int32_t k_page);
CTXC_API ctxc_status_t ctxc_kv_page_table_clear_entry(ctxc_kv_page_table_t *table, int32_t slot, int32_t logical_page);
/* Row b moves to old_to_new[b] (-1 retires it); each destination < new_batch exactly once. */
CTXC_API ctxc_status_t ctxc_kv_page_table_compact_rows(ctxc_kv_page_table_t *table, const int32_t *old_to_new,
                                                       int32_t old_batch, int32_t new_batch);
/* CTXC_OK, or CTXC_E_INVARIANT with the first violation in ctxc_last_error(). */
CTXC_API ctxc_status_t ctxc_kv_page_table_check_invariants(const ctxc_kv_page_table_t *table);
/* *out_copies (optional): the number of row-range copies issued (0 when nothing changed). */
CTXC_API ctxc_status_t ctxc_kv_page_table_upload(ctxc_kv_page_table_t *table, int32_t *out_copies);
/* The whole host table: max_batch * 2 * max_pages_per_seq entries. Two-call. */
CTXC_API ctxc_status_t ctxc_kv_page_table_read_host(const ctxc_kv_page_table_t *table, int32_t *out_entries,
                                                    size_t out_capacity, size_t *out_count);
/* The device copy the kernels read: INT32 [max_batch, 2, max_pages_per_seq]. It is current only after
 * ctxc_kv_page_table_upload (the host table is the truth; an edit reaches the device at the next upload, which
 * overwrites whatever was written to those rows through this pointer). */
CTXC_API ctxc_status_t ctxc_kv_page_table_device_view(const ctxc_kv_page_table_t *table, ctxc_device_view_t *out_view);

/* ---- page table introspection (tests and checkers; see Conventions) ------------------------------------- */

/* 1 when host rows changed since the last upload. */
CTXC_API ctxc_status_t ctxc_debug_kv_page_table_is_dirty(const ctxc_kv_page_table_t *table, int32_t *out_dirty);
/* The device copy read back (what the kernels see): max_batch * 2 * max_pages_per_seq entries. Two-call. */
CTXC_API ctxc_status_t ctxc_debug_kv_page_table_read_device(const ctxc_kv_page_table_t *table, int32_t *out_entries,
                                                            size_t out_capacity, size_t *out_count);

/* Device int32 KV lengths of the active sequences (at most max_batch). */
CTXC_API void ctxc_kv_lengths_options_init(ctxc_kv_lengths_options_t *options);
CTXC_API ctxc_status_t ctxc_kv_lengths_create(ctxc_device_backend_t *backend, const ctxc_kv_lengths_options_t *options,
                                              ctxc_kv_lengths_t **out_lengths);
CTXC_API ctxc_status_t ctxc_kv_lengths_destroy(ctxc_kv_lengths_t *lengths);
/* Starts a batch of `count` sequences with these lengths (each >= 0). */
CTXC_API ctxc_status_t ctxc_kv_lengths_set(ctxc_kv_lengths_t *lengths, const int32_t *values, size_t count);
CTXC_API ctxc_status_t ctxc_kv_lengths_add(ctxc_kv_lengths_t *lengths, int32_t increment);
/* Element-wise: increments must cover the same active batch. */
CTXC_API ctxc_status_t ctxc_kv_lengths_add_lengths(ctxc_kv_lengths_t *lengths, const ctxc_kv_lengths_t *increments);
/* Dense, order-preserving map of the active batch; the active batch becomes new_batch. */
CTXC_API ctxc_status_t ctxc_kv_lengths_compact(ctxc_kv_lengths_t *lengths, const int32_t *old_to_new, int32_t old_batch,
                                               int32_t new_batch);
/* The active lengths. Two-call pattern. */
CTXC_API ctxc_status_t ctxc_kv_lengths_read(const ctxc_kv_lengths_t *lengths, int32_t *out_values, size_t out_capacity,
                                            size_t *out_count);
/* The device vector: INT32 [max_batch]; entries at and beyond the active batch are unspecified. */
CTXC_API ctxc_status_t ctxc_kv_lengths_device_view(const ctxc_kv_lengths_t *lengths, ctxc_device_view_t *out_view);
/* The number of active sequences (the count of the last set, changed by compact). */
CTXC_API ctxc_status_t ctxc_kv_lengths_active_batch(const ctxc_kv_lengths_t *lengths, int32_t *out_active_batch);

CTXC_API void ctxc_resident_state_options_init(ctxc_resident_state_options_t *options);
CTXC_API ctxc_status_t ctxc_resident_state_create(ctxc_device_backend_t *backend,
                                                  const ctxc_resident_state_options_t *options,
                                                  ctxc_resident_state_t **out_state);
CTXC_API ctxc_status_t ctxc_resident_state_destroy(ctxc_resident_state_t *state);
/* Bytes of one row of part CTXC_STATE_RECURRENT, _CONV or _BOUNDARY_HIDDEN (0 if the state holds none). */
CTXC_API ctxc_status_t ctxc_resident_state_row_bytes(const ctxc_resident_state_t *state, int32_t part,
                                                     size_t *out_bytes);
CTXC_API ctxc_status_t ctxc_resident_state_footprint_bytes(const ctxc_resident_state_t *state, size_t *out_bytes);
/* The footprint a state of these options would have on this backend (what external_data must hold). */
CTXC_API ctxc_status_t ctxc_resident_state_required_bytes(const ctxc_device_backend_t *backend,
                                                          const ctxc_resident_state_options_t *options,
                                                          size_t *out_bytes);
/* One slab: part CTXC_STATE_RECURRENT or _CONV of a layer, or _BOUNDARY_HIDDEN (layer 0): its dtype, [max_batch,
 * row elements] (recurrent: heads * head_dim * state_size; conv: conv_dim * conv_kernel; hidden: hidden_size,
 * FP16). Slabs start 256-byte aligned. */
CTXC_API ctxc_status_t ctxc_resident_state_view(const ctxc_resident_state_t *state, int32_t part, int32_t layer,
                                                ctxc_device_view_t *out_view);
/* The whole state: UINT8 [footprint]. */
CTXC_API ctxc_status_t ctxc_resident_state_memory_view(const ctxc_resident_state_t *state,
                                                       ctxc_device_view_t *out_view);
/* One row (size = row bytes); the boundary hidden part has layer 0 only. */
CTXC_API ctxc_status_t ctxc_resident_state_write_row(ctxc_resident_state_t *state, int32_t part, int32_t layer,
                                                     int32_t slot, const void *src, size_t size);
CTXC_API ctxc_status_t ctxc_resident_state_read_row(const ctxc_resident_state_t *state, int32_t part, int32_t layer,
                                                    int32_t slot, void *dst, size_t size);
/* Zero the recurrent and conv rows of a slot in every layer: one launch. */
CTXC_API ctxc_status_t ctxc_resident_state_zero_slot(ctxc_resident_state_t *state, int32_t slot);
/* Compact rows [0, old_batch) of every layer by a dense, order-preserving map: one launch. */
CTXC_API ctxc_status_t ctxc_resident_state_compact(ctxc_resident_state_t *state, const int32_t *old_to_new,
                                                   int32_t old_batch, int32_t new_batch);

CTXC_API void ctxc_snapshot_storage_options_init(ctxc_snapshot_storage_options_t *options);
CTXC_API void ctxc_snapshot_transfer_init(ctxc_snapshot_transfer_t *transfer);
/* state, base_pool, draft_pool: each optional (NULL); a draft pool needs a base pool and must be another pool. */
CTXC_API ctxc_status_t ctxc_snapshot_storage_create(ctxc_device_backend_t *backend, ctxc_resident_state_t *state,
                                                    ctxc_kv_pool_t *base_pool, ctxc_kv_pool_t *draft_pool,
                                                    const ctxc_snapshot_storage_options_t *options,
                                                    ctxc_snapshot_storage_t **out_storage);
CTXC_API ctxc_status_t ctxc_snapshot_storage_destroy(ctxc_snapshot_storage_t *storage);
CTXC_API ctxc_status_t ctxc_snapshot_storage_layout(const ctxc_snapshot_storage_t *storage,
                                                    ctxc_snapshot_layout_t *out_layout);
/* Live -> snapshot and snapshot -> live, every part in ONE launch. */
CTXC_API ctxc_status_t ctxc_snapshot_storage_capture(ctxc_snapshot_storage_t *storage,
                                                     const ctxc_snapshot_transfer_t *transfer);
CTXC_API ctxc_status_t ctxc_snapshot_storage_restore(ctxc_snapshot_storage_t *storage,
                                                     const ctxc_snapshot_transfer_t *transfer);
/* One region of a slot: part CTXC_STATE_* and its layer (0 for the hidden row). */
CTXC_API ctxc_status_t ctxc_snapshot_storage_region_bytes(const ctxc_snapshot_storage_t *storage, int32_t part,
                                                          int32_t layer, size_t *out_bytes);
CTXC_API ctxc_status_t ctxc_snapshot_storage_write_region(ctxc_snapshot_storage_t *storage, int32_t part, int32_t layer,
                                                          int32_t slot, const void *src, size_t size);
CTXC_API ctxc_status_t ctxc_snapshot_storage_read_region(const ctxc_snapshot_storage_t *storage, int32_t part,
                                                         int32_t layer, int32_t slot, void *dst, size_t size);
/* One slab: part CTXC_STATE_RECURRENT (the recurrent slots) or CTXC_STATE_PARTIAL_KV (the partial-KV slots):
 * UINT8 [slots, bytes per slot], slots packed without padding (the layout's region offsets within a slot). A
 * slab without slots has data NULL and shape [0, bytes per slot]. */
CTXC_API ctxc_status_t ctxc_snapshot_storage_view(const ctxc_snapshot_storage_t *storage, int32_t part,
                                                  ctxc_device_view_t *out_view);

/* In-place dim-0 compaction of `rows` rows of row_bytes bytes at buffer offset `offset` (any element size) by a
 * dense, order-preserving map of old_batch <= rows entries. */
CTXC_API ctxc_status_t ctxc_device_compact_rows(ctxc_device_buffer_t *buffer, size_t offset, size_t row_bytes,
                                                int32_t rows, const int32_t *old_to_new, int32_t old_batch,
                                                int32_t new_batch);
/* Rebase `count` int32 execution-row indices at buffer offset `offset` (row = sequence * rows_per_sequence + k)
 * after that compaction: retired sequences' rows and out-of-range values become -1. */
CTXC_API ctxc_status_t ctxc_device_rebase_execution_rows(ctxc_device_buffer_t *buffer, size_t offset, size_t count,
                                                         const int32_t *old_to_new, int32_t old_batch,
                                                         int32_t new_batch, int32_t rows_per_sequence);
CTXC_API void ctxc_kv_gather_request_init(ctxc_kv_gather_request_t *request);
/* Bytes of each of the K and V outputs: batch * seq_len * kv_heads * head_dim * sizeof(out_dtype). */
CTXC_API ctxc_status_t ctxc_kv_gather_output_bytes(const ctxc_kv_pool_t *pool, const ctxc_kv_gather_request_t *request,
                                                   size_t *out_bytes);
/* Dense K and V [batch, seq_len, kv_heads, head_dim] of one layer through the (uploaded) page table; unmapped
 * pages and tokens at or beyond lengths[b] (lengths may be NULL) are zero. One launch. */
CTXC_API ctxc_status_t ctxc_kv_gather(const ctxc_kv_pool_t *pool, const ctxc_kv_page_table_t *table,
                                      const ctxc_kv_lengths_t *lengths, const ctxc_kv_gather_request_t *request,
                                      ctxc_device_buffer_t *k_out, ctxc_device_buffer_t *v_out);
/* Chunked 128-bit FNV-1a (the 0.11 opaque-identity scheme; num_chunks CTXC_DEFAULT_HASH_CHUNKS for it) of
 * [offset, offset + size) of a device buffer: chunks hashed on the backend, reduced on the host. */
CTXC_API ctxc_status_t ctxc_device_hash_chunked(const ctxc_device_buffer_t *buffer, size_t offset, size_t size,
                                                uint32_t num_chunks, ctxc_hash128_t *out_hash);
/* The same digest computed entirely on the host. */
CTXC_API ctxc_status_t ctxc_hash_chunked_host(const void *bytes, size_t size, uint32_t num_chunks,
                                              ctxc_hash128_t *out_hash);

/* ---- dense KV in and out of pages over the caller's memory (scatter and gather) ---------------------------- */

/* An engine computes K and V densely (a prefill chunk, a decode step) and keeps them in a pool's pages; its
 * attention reads them back densely. These calls move them through the page table in one launch per layer, K and V
 * together, in either dense layout, over memory the caller owns (CUDA: device memory of the pool's backend's device;
 * CPU backend: host memory, e.g. a numpy array or a torch CPU tensor, without a copy). The caller's pointers must
 * hold exactly the bytes the request describes (`bytes` each) and be aligned to the element size.
 * Errors: as in the device layer; a write through an unmapped page-table entry, a dirty table, a byte count that
 * does not match the request and an unknown layout are CTXC_E_CONTRACT (nothing written). */

enum {
    CTXC_KV_LAYOUT_TOKEN_MAJOR = 0, /* [batch, seq_len, kv_heads, head_dim] */
    CTXC_KV_LAYOUT_HEAD_MAJOR = 1 /* [batch, kv_heads, seq_len, head_dim]: what attention code reads */
};

typedef struct ctxc_kv_scatter_request {
    uint32_t struct_size;
    int32_t layer;
    int32_t batch; /* slots [0, batch) of the table */
    int32_t seq_len; /* tokens per input row */
    int32_t first_position; /* position of input token 0 in every sequence */
    int32_t layout; /* CTXC_KV_LAYOUT_* (default TOKEN_MAJOR) */
} ctxc_kv_scatter_request_t;

CTXC_API void ctxc_kv_scatter_request_init(ctxc_kv_scatter_request_t *request);
/* Bytes of each of the K and V inputs: batch * seq_len * kv_heads * head_dim * sizeof(pool dtype). */
CTXC_API ctxc_status_t ctxc_kv_scatter_input_bytes(const ctxc_kv_pool_t *pool, const ctxc_kv_scatter_request_t *request,
                                                   size_t *out_bytes);
/* Token t of sequence b of k and v (the pool's dtype, `bytes` each) is written at position first_position + t of
 * slot b, through the (uploaded) page table; every page-table entry written through must be mapped. One launch. */
CTXC_API ctxc_status_t ctxc_kv_scatter(ctxc_kv_pool_t *pool, const ctxc_kv_page_table_t *table,
                                       const ctxc_kv_scatter_request_t *request, const void *k, const void *v,
                                       size_t bytes);
/* ctxc_kv_gather into caller memory (`bytes` each, exactly ctxc_kv_gather_output_bytes) in layout CTXC_KV_LAYOUT_*. */
CTXC_API ctxc_status_t ctxc_kv_gather_into(const ctxc_kv_pool_t *pool, const ctxc_kv_page_table_t *table,
                                           const ctxc_kv_lengths_t *lengths, const ctxc_kv_gather_request_t *request,
                                           int32_t layout, void *k_out, void *v_out, size_t bytes);

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
 * A request may run on the bounded-SWA backend instead (ctxc_kv_request_begin_swa, in the section below).
 * Errors (the table at the top applies): a broken contract (a step out of order, a context that does not match
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

/* Frozen: one sequence of a generation request. */
typedef struct ctxc_sequence_request {
    const int32_t *token_ids;
    size_t token_count;
    const char *lora_name; /* bytes, not NUL-terminated; length 0 = the base model */
    size_t lora_name_length;
    const ctxc_media_item_t *media;
    size_t media_count;
    int32_t lookup_policy; /* CTXC_INHERIT_LOOKUP_POLICY (the request's) or CTXC_LOOKUP_* */
    int32_t reserved;
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
/* Re-synchronise the quarantined requests and free them: CTXC_OK clears the poison; CTXC_E_POISONED when a
 * synchronisation still fails; CTXC_E_REQUEST_FAILED (poison cleared) when requests are still live. */
CTXC_API ctxc_status_t ctxc_coordinator_shutdown(ctxc_coordinator_t *coordinator);
/* CTXC_OK, or CTXC_E_INVARIANT with the first violation (the manager's, then the coordinator's). */
CTXC_API ctxc_status_t ctxc_coordinator_check_invariants(const ctxc_coordinator_t *coordinator);

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

/* ---- DLPack export ------------------------------------------------------------------------------------------ */

/* A DLPack tensor describing a view taken from `owner` (the device object handle the view came from: buffer, KV
 * pool, page table, KV lengths, resident state or snapshot storage), returned as *out_managed: versioned = 1, a
 * DLManagedTensorVersioned (DLPack 1.0, writable: the payload of a "dltensor_versioned" PyCapsule); versioned = 0,
 * the unversioned DLManagedTensor (DLPack 0.8: a "dltensor" capsule, which numpy >= 2 imports read-only). The
 * view must lie inside the owner's memory (else CTXC_E_CONTRACT); its element may be reinterpreted as another of
 * the same size (e.g. BF16 as UINT16). Element types map to DLPack as FP16 -> float16, BF16 -> bfloat16, FP32 ->
 * float32, INT32 -> int32, UINT16 -> uint16, and FP8_E4M3 and UINT8 -> uint8 (FP8 as its bit patterns: every
 * consumer can import it; reinterpret it as float8_e4m3fn there). Device: kDLCPU (1) on the CPU backend, kDLCUDA
 * (2) with the ordinal on CUDA. Strides NULL (compact row-major).
 * The tensor holds its own reference to the owner's memory (and its backend): destroying the handle while a
 * consumer still uses the tensor is safe, the memory goes when the consumer calls the tensor's deleter (which
 * may then free device memory: safe from any thread). Nothing is written or synchronized. */
CTXC_API ctxc_status_t ctxc_device_view_to_dlpack(const ctxc_device_view_t *view, const void *owner, int32_t versioned,
                                                  void **out_managed);
/* Calls the deleter of a tensor from ctxc_device_view_to_dlpack that no consumer took (a capsule destroyed
 * unconsumed); `versioned` as it was made. NULL is a no-op. */
CTXC_API void ctxc_dlpack_release(void *managed, int32_t versioned);
/* For Python bindings: a PyCapsule destructor (void (*)(PyObject *)) for a "dltensor" or "dltensor_versioned"
 * capsule of such a tensor: releases it when no consumer took it (a consumer renames the capsule), keeping any
 * pending Python exception (a consumer that failed destroys the capsule with its exception set). It uses the
 * CPython functions the process exports, looked up at run time; outside Python it does nothing. */
CTXC_API void ctxc_dlpack_capsule_destructor(void *capsule);

/* ---- Bounded sliding-window paging ----------------------------------------------------------------------- */

/* A model whose attention reads only its last W positions, with reuse off, keeps only its window
 * (BoundedSwaKVPageManager, docs/RUNTIME.md): each sequence of a request takes a fixed private reservation of
 * 2 * (ceil(W / page_size) + 1) + 1 pages of the pool, and its retained logical pages
 * [floor(max(0, e - W) / page_size), ceil(e / page_size)) for KV endpoint e are bound in a sparse-window page table
 * (CTXC_PAGE_TABLE_SPARSE_WINDOW; columns are logical page indices). New pages are bound and uploaded by prepare_*;
 * a page that left the window stays mapped until complete_* (after a synchronisation). One request at a time.
 * Errors: CTXC_E_CONTRACT on a broken contract (nothing changed); CTXC_E_REQUEST_FAILED when the free list cannot
 * cover every sequence (nothing held) or a request is live; CTXC_E_POISONED after a failed synchronisation until
 * ctxc_swa_manager_shutdown succeeds. Single writer. */
typedef struct ctxc_swa_manager ctxc_swa_manager_t;
typedef struct ctxc_swa_request ctxc_swa_request_t;

typedef struct ctxc_swa_manager_options {
    uint32_t struct_size;
    int32_t max_batch;            /* 8: sequences per request (<= the table's and the lengths' max batch) */
    int32_t window_size_tokens;   /* W > 0 (ceil(W / page_size) + 1 <= the table's pages per sequence) */
    ctxc_synchronize_fn synchronize; /* NULL: synchronise the pool's backend */
    void *synchronize_user;
} ctxc_swa_manager_options_t;

/* One sequence's window. */
typedef struct ctxc_swa_state {
    uint32_t struct_size;
    ctxc_resident_ref_t resident;
    int32_t exact_resident_token_count;  /* the KV endpoint completed so far */
    int32_t retained_logical_page_begin;
    int32_t retained_logical_page_end;
    int32_t bound_pages;                 /* the retained range's pages */
    int32_t pending_retire_pages;        /* left the window, still mapped until complete_* */
    int32_t reserved_pages;              /* the unbound rest of the reservation */
    int32_t pending_endpoint;            /* -1 when no step is pending */
    int32_t peak_bound_pages;
} ctxc_swa_state_t;

CTXC_API void ctxc_swa_manager_options_init(ctxc_swa_manager_options_t *options);
/* lengths may be NULL (otherwise compacted with the batch). The manager keeps the pool, table and lengths alive. */
CTXC_API ctxc_status_t ctxc_swa_manager_create(ctxc_kv_pool_t *pool, ctxc_kv_page_table_t *table,
                                               ctxc_kv_lengths_t *lengths, const ctxc_swa_manager_options_t *options,
                                               ctxc_swa_manager_t **out_manager);
/* A live request is released first (synchronised) and orphaned (CTXC_E_LEASES_OUTSTANDING): it must still be
 * destroyed. Every other request still undestroyed (finished, quarantined, or resolved by a shutdown; either kind)
 * is orphaned too: every later use is CTXC_E_INVALID_HANDLE, and destroying it is CTXC_OK. */
CTXC_API ctxc_status_t ctxc_swa_manager_destroy(ctxc_swa_manager_t *manager);
CTXC_API ctxc_status_t ctxc_swa_manager_free_page_count(const ctxc_swa_manager_t *manager, int32_t *out_pages);
CTXC_API ctxc_status_t ctxc_swa_manager_private_pages_per_sequence(const ctxc_swa_manager_t *manager,
                                                                   int32_t *out_pages);
/* Re-synchronise quarantined requests and free them: CTXC_OK clears the poison. */
CTXC_API ctxc_status_t ctxc_swa_manager_shutdown(ctxc_swa_manager_t *manager);
CTXC_API ctxc_status_t ctxc_swa_manager_check_invariants(const ctxc_swa_manager_t *manager);
/* Admit `count` sequences over their resident refs (row i = residents[i]); stream may be NULL. */
CTXC_API ctxc_status_t ctxc_swa_manager_begin_request(ctxc_swa_manager_t *manager, const ctxc_resident_ref_t *residents,
                                                      size_t count, void *stream, ctxc_swa_request_t **out_request);
/* One prefill chunk: row i's KV endpoint moves to lengths[i] (>= its current one). */
CTXC_API ctxc_status_t ctxc_swa_request_prepare_prefill(ctxc_swa_request_t *request, const int32_t *lengths,
                                                        size_t count);
CTXC_API ctxc_status_t ctxc_swa_request_complete_prefill(ctxc_swa_request_t *request);
/* endpoints[i]: row i's current endpoint (it holds) or one more. */
CTXC_API ctxc_status_t ctxc_swa_request_prepare_decode_step(ctxc_swa_request_t *request, const int32_t *endpoints,
                                                            size_t count);
CTXC_API ctxc_status_t ctxc_swa_request_complete_decode_step(ctxc_swa_request_t *request);
/* An order-preserving dense map (-1 retires a row), copied to device_mapping (int32 device memory of at least
 * `count` entries, or NULL). */
CTXC_API ctxc_status_t ctxc_swa_request_begin_batch_compaction(ctxc_swa_request_t *request, const int32_t *old_to_new,
                                                               size_t count, int32_t new_batch_size,
                                                               void *device_mapping);
CTXC_API ctxc_status_t ctxc_swa_request_compact_batch(ctxc_swa_request_t *request);
CTXC_API ctxc_status_t ctxc_swa_request_state(const ctxc_swa_request_t *request, int32_t row,
                                              ctxc_swa_state_t *out_state);
CTXC_API ctxc_status_t ctxc_swa_request_batch_size(const ctxc_swa_request_t *request, int32_t *out_batch);
/* Synchronise pending work and release the request's pages (a no-op once finished). */
CTXC_API ctxc_status_t ctxc_swa_request_finish(ctxc_swa_request_t *request);
/* Finishes first when still live (errors of that finish are not reported); NULL is a no-op. */
CTXC_API ctxc_status_t ctxc_swa_request_destroy(ctxc_swa_request_t *request);

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
CTXC_API ctxc_status_t ctxc_kv_request_begin_swa(ctxc_swa_manager_t *manager, const ctxc_sequence_request_t *sequences,
                                                 size_t sequence_count, const ctxc_decoding_context_t *context,
                                                 const ctxc_kv_request_options_t *options,
                                                 ctxc_kv_request_t **out_request);
/* One prefill chunk on the SWA backend: row i's KV endpoint moves to lengths[i]; a second call first completes the
 * previous chunk (its completion point), ctxc_kv_request_complete_prefill completes the last. A no-op (CTXC_OK) on
 * the context-reuse backend. */
CTXC_API ctxc_status_t ctxc_kv_request_prepare_swa_prefill(ctxc_kv_request_t *request, const int32_t *lengths,
                                                           size_t count);
/* Row `row`'s window on the SWA backend; CTXC_E_CONTRACT on the context-reuse backend. */
CTXC_API ctxc_status_t ctxc_kv_request_swa_state(const ctxc_kv_request_t *request, int32_t row,
                                                 ctxc_swa_state_t *out_state);

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
/* Evict every record, then *out_full = 1 when every pool is full again (else 0, and ctxc_last_error() says which
 * pool is not). */
CTXC_API ctxc_status_t ctxc_sim_engine_drain(ctxc_sim_engine_t *engine, int32_t *out_full);

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

#endif /* CTXCACHE_H */
