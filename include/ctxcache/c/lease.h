/* ctxcache C ABI: leases, the pages and snapshot slots a manager's acquire hands a request (manager.h): their
 * page lists, state, release and destruction. A lease is in its manager's single-writer family. */
#ifndef CTXCACHE_C_LEASE_H
#define CTXCACHE_C_LEASE_H

#include "ctxcache/c/manager.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CTXC_LEASE_LIVE = 0, CTXC_LEASE_RELEASED = 1, CTXC_LEASE_ORPHANED = 2 };
/* What a vanilla lease's later publication does with the record its earlier one made: a new (nested) record each
 * time (the default), or one record that grows: the lease's own record is replaced by the longer one (superseded:
 * no eviction, no metrics, no BlockRemoved; docs/ENGINES.md, "Driving the manager from your own scheduler"). */
enum { CTXC_PUBLICATION_GROWTH_NEW_RECORD = 0, CTXC_PUBLICATION_GROWTH_EXTEND_LEASE_RECORD = 1 };

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
/* The lease's later publications (ctxc_manager_publish*) grow as `growth` says (CTXC_PUBLICATION_GROWTH_*, else
 * CTXC_E_INVALID_ARGUMENT). EXTEND_LEASE_RECORD needs a vanilla lease (CTXC_E_CONTRACT, nothing changed). */
CTXC_API ctxc_status_t ctxc_lease_set_publication_growth(ctxc_lease_t *lease, int32_t growth);
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

#endif /* CTXCACHE_C_LEASE_H */
