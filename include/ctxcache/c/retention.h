/* ctxcache C ABI: retention, which prefixes a runtime wants kept and for how long (the C form of
 * include/ctxcache/retention.h, shaped as TensorRT-LLM's KvCacheRetentionConfig), the manager's retention clock and
 * its hard pins. A spec travels with a publication: set on a lease (ctxc_lease_set_retention) it applies to that
 * lease's later publications; on a runtime sequence (runtime.h) to the coordinator's publications of it. Priorities
 * are 0..100 (default CTXC_RETENTION_DEFAULT_PRIORITY); eviction takes the lowest rank first, LRU within a rank.
 * These calls are in their manager's single-writer family. */
#ifndef CTXCACHE_C_RETENTION_H
#define CTXCACHE_C_RETENTION_H

#include "ctxcache/c/lease.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CTXC_RETENTION_DEFAULT_PRIORITY = 35,
    CTXC_RETENTION_MAX_PRIORITY = 100,
    CTXC_RETENTION_OPEN_END = -1,
    CTXC_RETENTION_NO_DURATION = -1 /* a duration_ns: none */
};

/* Tokens [token_start, token_end) (token_end CTXC_RETENTION_OPEN_END: to the end of the prompt) at `priority`
 * for duration_ns from the publication (CTXC_RETENTION_NO_DURATION: for as long as the record lives). */
typedef struct ctxc_retention_range {
    int32_t token_start;
    int32_t token_end;
    int32_t priority;
    int32_t reserved; /* 0 */
    int64_t duration_ns;
} ctxc_retention_range_t;

typedef struct ctxc_retention_spec {
    uint32_t struct_size;
    int32_t decode_priority; /* tokens at or past prompt_token_count (generated in decode) */
    const ctxc_retention_range_t *ranges; /* range_count entries (at most 64), read during the call */
    size_t range_count;
    int64_t decode_duration_ns; /* CTXC_RETENTION_NO_DURATION for none */
    int32_t prompt_token_count; /* -1: the whole publication is prompt */
    int32_t reserved; /* 0 */
} ctxc_retention_spec_t;

/* Fills a spec with the defaults: no range, decode at the default priority with no duration, prompt_token_count
 * -1, struct_size set. */
CTXC_API void ctxc_retention_spec_init(ctxc_retention_spec_t *spec);

/* The lease's later publications carry `spec` (copied; NULL: back to the default). A bad spec (a priority outside
 * 0..100, a negative start, an end not after its start, a negative duration other than
 * CTXC_RETENTION_NO_DURATION, more than 64 ranges) is CTXC_E_CONTRACT with nothing changed. */
CTXC_API ctxc_status_t ctxc_lease_set_retention(ctxc_lease_t *lease, const ctxc_retention_spec_t *spec);

/* Drives the manager's retention clock (nanoseconds, any origin, never backwards: CTXC_E_CONTRACT) from now on,
 * instead of the steady clock, and applies the expiries it reaches. */
CTXC_API ctxc_status_t ctxc_manager_set_retention_time(ctxc_manager_t *manager, int64_t now_ns);
/* A record's eviction rank now (0..100). Unknown id: CTXC_E_CONTRACT. */
CTXC_API ctxc_status_t ctxc_manager_record_priority(const ctxc_manager_t *manager, uint64_t record_id,
                                                    int32_t *out_priority);
/* Pins: a pinned record is never evicted until unpinned (explicitly or after duration_ns,
 * CTXC_RETENTION_NO_DURATION for none) and holds its pages like a lease. The budget is the fraction of each pool
 * that pinned records may hold (0, the default, refuses every pin; [0, 1]); a pin past it is CTXC_E_CONTRACT, with
 * the pool and the numbers in ctxc_last_error, and nothing changed. */
CTXC_API ctxc_status_t ctxc_manager_set_pin_budget(ctxc_manager_t *manager, double fraction);
CTXC_API ctxc_status_t ctxc_manager_pin_record(ctxc_manager_t *manager, uint64_t record_id, int64_t duration_ns);
CTXC_API ctxc_status_t ctxc_manager_unpin_record(ctxc_manager_t *manager, uint64_t record_id);

typedef struct ctxc_retention_metrics {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t evicted_records_by_priority[101]; /* each record's rank when it was evicted */
    uint64_t trimmed_records_by_priority[101]; /* the rank under which lru-trim cut a record's tail */
    uint64_t retention_expiries; /* records whose rank fell when a range's duration ended */
    uint64_t pin_expiries;
    uint64_t pins_refused;
    uint64_t pinned_records; /* now */
    uint64_t pinned_base_pages; /* now: distinct base pages pinned records hold */
} ctxc_retention_metrics_t;

CTXC_API ctxc_status_t ctxc_manager_retention_metrics(const ctxc_manager_t *manager,
                                                      ctxc_retention_metrics_t *out_metrics);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_RETENTION_H */
