/* ctxcache C ABI: KV stores shared by several replicas (docs/TIERS.md, issue 27).
 *
 * A byte store (ctxc_kv_store_t) holds KV blocks' bytes under keys that name the layout and the block; it sits
 * under a coordinator's host tier (ctxc_coordinator_options_t::host_store, ctxc_sim_engine_options_t::host_store):
 * blocks written to the tier are put there, and a hit the host cannot extend further is asked of it. A runtime
 * plugs its own store through a callback table (Mooncake Store, Redis, ...); ctxc_memory_kv_store_create is an
 * in-process store for tests. The callbacks run on the tier's own worker threads, never on the caller's: at most
 * one put and one exist or get at a time per tier, on two threads (several tiers sharing one store call it from
 * more threads at once, so callbacks must be thread-safe); each answers one
 * result per key (CTXC_KV_STORE_*), and returns by deadline_ns (CLOCK_MONOTONIC nanoseconds) where it can. A key that
 * fails leaves its destination as the caller may ignore it: every object is checked (magic, layout, block, length,
 * checksum) before a byte of it is trusted, and a rejected object is a miss.
 * Threading: a store's handle is one single-writer family; tiers hold the store (shared), so destroying the handle
 * while tiers use it is allowed; the callbacks' `release` runs once, when the last holder lets go.
 *
 * A bookkeeping store models a shared store's bookkeeping:
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
typedef struct ctxc_kv_store ctxc_kv_store_t;

/* A key's result: >= 0 success (exist: 1 held, 0 not; put: 0, also for a key already held, whose first value the
 * store keeps; get: the object's size in bytes), else one of these (Mooncake Store's codes). */
enum {
    CTXC_KV_STORE_FULL = -200,        /* no room: the put is dropped */
    CTXC_KV_STORE_TOO_SMALL = -600,   /* a get's destination is smaller than the object */
    CTXC_KV_STORE_NOT_FOUND = -704,
    CTXC_KV_STORE_UNAVAILABLE = -800, /* the store or the object's holder cannot be reached */
    CTXC_KV_STORE_FAILED = -900,
    CTXC_KV_STORE_TIMED_OUT = -1000
};

/* A runtime's own store. keys[i] are NUL-terminated; every callback fills results[0..count). */
typedef struct ctxc_kv_store_callbacks {
    uint32_t struct_size;
    void *user;
    void (*exist)(void *user, const char *const *keys, size_t count, int64_t deadline_ns, int64_t *results);
    void (*put)(void *user, const char *const *keys, const void *const *data, const size_t *sizes, size_t count,
                int64_t deadline_ns, int64_t *results);
    void (*get)(void *user, const char *const *keys, void *const *buffers, const size_t *capacities, size_t count,
                int64_t deadline_ns, int64_t *results);
    void (*release)(void *user); /* NULL, or called once when no tier and no handle holds the store any more */
} ctxc_kv_store_callbacks_t;

/* How a host tier uses a byte store (tier/store_link.h). */
enum { CTXC_STORE_LOAD_WAIT = 0, CTXC_STORE_LOAD_BEST_EFFORT = 1 };

typedef struct ctxc_store_link_options {
    uint32_t struct_size;
    ctxc_kv_store_t *store;      /* the store (a live handle) */
    const char *model;           /* the model identity the keys name (no '@'); NULL: "ctxcache" */
    int32_t policy;              /* CTXC_STORE_LOAD_* (default WAIT) */
    int32_t min_ask_blocks;      /* >= 1: the store is asked only when at least this many blocks are left (4) */
    int64_t load_deadline_us;    /* >= 0: the longest an extension waits for the store (WAIT; 50,000) */
    int64_t put_deadline_us;     /* > 0: a put batch's deadline on the worker (2,000,000) */
    int64_t negative_ttl_ms;     /* >= 0: a key that failed is not asked again for this long (15,000) */
} ctxc_store_link_options_t;

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

/* A store over the runtime's callbacks (exist, put and get required). The table is copied. */
CTXC_API ctxc_status_t ctxc_kv_store_create(const ctxc_kv_store_callbacks_t *callbacks, ctxc_kv_store_t **out_store);
/* An in-process store of capacity_bytes (0: no limit), for tests: Mooncake's semantics, no faults. */
CTXC_API ctxc_status_t ctxc_memory_kv_store_create(uint64_t capacity_bytes, ctxc_kv_store_t **out_store);
/* NULL is a no-op. Tiers that use the store keep it until they go. */
CTXC_API ctxc_status_t ctxc_kv_store_destroy(ctxc_kv_store_t *store);
CTXC_API void ctxc_store_link_options_init(ctxc_store_link_options_t *options);

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
