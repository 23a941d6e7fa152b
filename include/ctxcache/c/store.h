/* ctxcache C ABI: a KV store shared by several managers (replicas), modelled by its bookkeeping (docs/TIERS.md):
 * which blocks a store of N pages holds and the least-recently-used order in which it drops them, so that a fleet
 * can be sized on a trace. Managers reach it through their host tier (ctxc_host_tier_options_t::store): every
 * block a publication makes canonical is put there, and an extension goes on from the host's blocks with the
 * store's. No bytes and no I/O in this version.
 * Threading: a store is safe to share between managers on different threads (one lock inside); its own calls
 * (metrics, probe, check, destroy) form one single-writer family. Destroying the handle while tiers use the store
 * is allowed: the tiers keep it until they are detached or destroyed. */
#ifndef CTXCACHE_C_STORE_H
#define CTXCACHE_C_STORE_H

#include "ctxcache/c/hash.h"
#include "ctxcache/c/library.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctxc_bookkeeping_store ctxc_bookkeeping_store_t;

typedef struct ctxc_bookkeeping_store_options {
    uint32_t struct_size;
    int32_t capacity_pages; /* > 0: the store's pages (one block each) */
} ctxc_bookkeeping_store_options_t;

typedef struct ctxc_bookkeeping_store_metrics {
    uint32_t struct_size;
    int32_t capacity_pages;
    uint64_t resident_blocks; /* blocks the store holds now */
    uint64_t put_calls;
    uint64_t written_blocks;  /* blocks put that the store lacked */
    uint64_t skipped_puts;    /* blocks put that it already held (kept as they were) */
    uint64_t refused_puts;    /* blocks put that found no room (a batch larger than the store) */
    uint64_t dropped_blocks;  /* blocks dropped to make room */
    uint64_t get_calls;
    uint64_t hit_calls;       /* gets that returned at least one block */
    uint64_t hit_blocks;      /* blocks returned by gets */
    uint64_t metadata_bytes;
} ctxc_bookkeeping_store_metrics_t;

CTXC_API void ctxc_bookkeeping_store_options_init(ctxc_bookkeeping_store_options_t *options);
/* CTXC_E_INVALID_ARGUMENT for a non-positive capacity. */
CTXC_API ctxc_status_t ctxc_bookkeeping_store_create(const ctxc_bookkeeping_store_options_t *options,
                                                     ctxc_bookkeeping_store_t **out_store);
/* NULL is a no-op. Tiers that use the store keep it until they go. */
CTXC_API ctxc_status_t ctxc_bookkeeping_store_destroy(ctxc_bookkeeping_store_t *store);
/* The longest run hashes[0..k) the store holds, changing nothing. */
CTXC_API ctxc_status_t ctxc_bookkeeping_store_probe(const ctxc_bookkeeping_store_t *store, const ctxc_hash128_t *hashes,
                                                    size_t count, size_t *out_blocks);
CTXC_API ctxc_status_t ctxc_bookkeeping_store_metrics(const ctxc_bookkeeping_store_t *store,
                                                      ctxc_bookkeeping_store_metrics_t *out_metrics);
CTXC_API ctxc_status_t ctxc_bookkeeping_store_check_invariants(const ctxc_bookkeeping_store_t *store);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_STORE_H */
