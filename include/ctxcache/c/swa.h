/* ctxcache C ABI: bounded sliding-window paging (BoundedSwaKVPageManager): a manager that keeps only each
 * sequence's last W positions in a sparse-window page table, and its requests. In the family of
 * its pool's backend (device.h). */
#ifndef CTXCACHE_C_SWA_H
#define CTXCACHE_C_SWA_H

#include "ctxcache/c/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* The request facade (ctxc_kv_request_t) over a SWA manager, ctxc_kv_request_begin_swa,
 * ctxc_kv_request_prepare_swa_prefill and ctxc_kv_request_swa_state, is declared with the other request calls
 * at the end of runtime.h. */

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_SWA_H */
