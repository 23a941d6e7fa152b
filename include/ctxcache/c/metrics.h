/* ctxcache C ABI: metrics in the Prometheus text exposition format, for operators to scrape. One documented
 * table of names (docs/METRICS.md) following Prometheus conventions: counters end in _total, sizes are in bytes,
 * pool contents are counted in ids (pages, snapshot slots). A read-only call in the single-writer family of the
 * object it reads: an exporter thread must not call it beside that object's calls (take snapshots on the thread
 * that drives the cache and serve the last one). */
#ifndef CTXCACHE_C_METRICS_H
#define CTXCACHE_C_METRICS_H

#include "ctxcache/c/library.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The metrics of `object` as Prometheus text (version 0.0.4: # HELP and # TYPE lines, then samples), UTF-8, not
 * NUL-terminated: a cache (ctxc_manager_t, or the manager inside a ctxc_coordinator_t or ctxc_sim_engine_t: its
 * prefix-cache lookups and hits in tokens, acquires, evictions and reclaimed ids, pool occupancy per tier and
 * resource, records, leases, metadata bytes, its KV event stream) or a ctxc_kv_event_publisher_t (batches
 * accepted, sent, dropped and queued, replay requests, subscriptions). Two-call pattern: *out_size = the text's
 * length; CTXC_E_BUFFER_TOO_SMALL when out_capacity is less (out_text may then be NULL with out_capacity 0).
 * CTXC_E_INVALID_HANDLE for anything else. */
CTXC_API ctxc_status_t ctxc_metrics_text(const void *object, char *out_text, size_t out_capacity, size_t *out_size);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_METRICS_H */
