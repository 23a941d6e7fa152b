/* ctxcache C ABI: a host-memory tier beside a manager (docs/TIERS.md), so that a block the device evicted comes
 * back as a copy instead of a recomputation. A manager has at most one tier, attached to it and destroyed with it
 * (or detached); the tier's calls take the manager's handle and belong to the manager's single-writer family.
 * This version keeps the tier's bookkeeping (which blocks it holds, its LRU): a bookkeeping-only replay sizes a
 * tier on a trace. Base-KV blocks, and for an EAGLE deployment (a manager with draft pages) whether each slot also
 * holds its draft page: ctxc_manager_host_tier_extend_spec_hit extends speculative hits. Hybrid acquires are not
 * extended (checkpoints stay on the device). The coordinator's tier holds the bytes (runtime.h, host_tier_pages). */
#ifndef CTXCACHE_C_HOST_TIER_H
#define CTXCACHE_C_HOST_TIER_H

#include "ctxcache/c/hash.h"
#include "ctxcache/c/library.h"
#include "ctxcache/c/manager.h"
#include "ctxcache/c/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* When blocks are written to the tier: every block a publication makes canonical (write-through), or every block
 * the device's eviction drops (write-back, the default: the tier then holds what the device no longer does). */
enum { CTXC_HOST_WRITE_THROUGH = 0, CTXC_HOST_WRITE_BACK = 1 };

typedef struct ctxc_host_tier_options {
    uint32_t struct_size;
    int32_t capacity_pages; /* > 0: host slots, one page of every attention layer each (0 only with a store) */
    int32_t write_policy;   /* CTXC_HOST_WRITE_* (default CTXC_HOST_WRITE_BACK) */
    /* NULL, or a store shared with other managers' tiers (ctxcache/c/store.h): every block a publication makes
     * canonical is put there, and an extension goes on from the host's blocks with the store's. */
    ctxc_bookkeeping_store_t *store;
} ctxc_host_tier_options_t;

typedef struct ctxc_host_tier_metrics {
    uint32_t struct_size;
    int32_t capacity_pages;
    uint64_t resident_blocks;  /* blocks the tier holds now */
    uint64_t writing_blocks;   /* blocks whose copy to the tier is in flight */
    uint64_t pinned_blocks;    /* held blocks being loaded */
    uint64_t extend_calls;     /* extensions asked for */
    uint64_t hit_requests;     /* extensions that loaded at least one block */
    uint64_t loaded_blocks;    /* blocks loaded from the tier */
    uint64_t written_blocks;   /* blocks written to the tier */
    uint64_t skipped_writes;   /* blocks offered that the tier already held (not written again) */
    uint64_t refused_writes;   /* blocks offered that found no slot */
    uint64_t dropped_blocks;   /* blocks the tier dropped to make room */
    uint64_t failed_loads;     /* blocks whose load failed */
    uint64_t metadata_bytes;
    uint64_t store_loaded_blocks; /* blocks extensions took from the store (loaded_blocks counts the host's) */
    uint64_t store_hit_requests;  /* extensions that took at least one block from the store */
} ctxc_host_tier_metrics_t;

CTXC_API void ctxc_host_tier_options_init(ctxc_host_tier_options_t *options);
/* Attaches a tier to `manager`. CTXC_E_INVALID_ARGUMENT for a negative capacity (or 0 without a store) or an
 * unknown policy, CTXC_E_INVALID_HANDLE for a store that is not live; CTXC_E_CONTRACT when the manager already has
 * a tier. */
CTXC_API ctxc_status_t ctxc_manager_attach_host_tier(ctxc_manager_t *manager, const ctxc_host_tier_options_t *options);
/* Detaches and destroys the manager's tier (what it held is gone). No tier: CTXC_OK, nothing done. */
CTXC_API ctxc_status_t ctxc_manager_detach_host_tier(ctxc_manager_t *manager);
/* The blocks the tier adds to a device hit of `device_blocks` blocks of a prompt of input_token_count tokens whose
 * full blocks hash to hashes[0..count): the longest run from hashes[device_blocks] the tier holds, never covering
 * the prompt's last token. Bookkeeping: the load is done when this returns. *out_loaded_blocks = the run's
 * length. CTXC_E_CONTRACT without a tier. */
CTXC_API ctxc_status_t ctxc_manager_host_tier_extend_hit(ctxc_manager_t *manager, const ctxc_hash128_t *hashes,
                                                         size_t count, int32_t input_token_count, int32_t device_blocks,
                                                         int32_t *out_loaded_blocks);
/* The same extension, its blocks split by where they came from: the host's (*out_host_blocks) and the store's
 * (*out_store_blocks): the host's run first, then the store's from where it ends, then the host's again, ... */
CTXC_API ctxc_status_t ctxc_manager_host_tier_extend_hit_by_tier(ctxc_manager_t *manager, const ctxc_hash128_t *hashes,
                                                                 size_t count, int32_t input_token_count,
                                                                 int32_t device_blocks, int32_t *out_host_blocks,
                                                                 int32_t *out_store_blocks);
/* The speculative extension of an EAGLE deployment's tier (a manager with draft pages): the device hit of a
 * speculative acquire binds `device_blocks` blocks and replays the next; a run of k slots from hashes[device_blocks]
 * whose every slot after the first holds its draft page (the draft page of the block before it) loads k - 1
 * blocks, base pages from slots 0..k-2 and draft pages from slots 1..k-1, and the prefill replays the block of the
 * last slot. The run may reach the prompt's last full block. The store is not asked (it models base pages only).
 * Bookkeeping: the load is done when this returns. *out_loaded_blocks = the blocks loaded. CTXC_E_CONTRACT without
 * a tier or with a manager that has no draft pages. */
CTXC_API ctxc_status_t ctxc_manager_host_tier_extend_spec_hit(ctxc_manager_t *manager, const ctxc_hash128_t *hashes,
                                                              size_t count, int32_t input_token_count,
                                                              int32_t device_blocks, int32_t *out_loaded_blocks);
/* What ctxc_manager_host_tier_extend_hit would answer now, changing nothing (no load, no recency, no metrics). */
CTXC_API ctxc_status_t ctxc_manager_host_tier_probe_hit(const ctxc_manager_t *manager, const ctxc_hash128_t *hashes,
                                                        size_t count, int32_t input_token_count, int32_t device_blocks,
                                                        int32_t *out_loaded_blocks);
/* Drops every block the tier holds (a manager's reset does not). */
CTXC_API ctxc_status_t ctxc_manager_host_tier_clear(ctxc_manager_t *manager);
/* *out_attached = 1 when the manager has a tier; then *out_metrics is filled (out_metrics may be NULL). */
CTXC_API ctxc_status_t ctxc_manager_host_tier_metrics(const ctxc_manager_t *manager, int32_t *out_attached,
                                                      ctxc_host_tier_metrics_t *out_metrics);
CTXC_API ctxc_status_t ctxc_manager_host_tier_check_invariants(const ctxc_manager_t *manager);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_HOST_TIER_H */
