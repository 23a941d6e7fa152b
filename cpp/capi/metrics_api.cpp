// C ABI of include/ctxcache/c/metrics.h: a cache's or a publisher's metrics as Prometheus text. The names, types and
// help lines are written here once; docs/METRICS.md is their table, and tests/python/test_metrics.py checks that
// the two agree. Threading: the object's single-writer family (the handle lookup enters it).
#include "ctxcache/c/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "api_support.h"
#include "ctxcache.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/events/kv_event_publisher.h"
#include "ctxcache/tier/host_tier.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

// The Prometheus text exposition format (0.0.4): one # HELP and one # TYPE line per family, then its samples.
class PrometheusText {
public:
    void family(char const* name, char const* type, char const* help) {
        text_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    }
    void sample(char const* name, uint64_t value, std::string const& labels = {}) {
        char digits[32];
        std::snprintf(digits, sizeof digits, "%" PRIu64, value);
        text_ += name;
        if (!labels.empty()) text_ += "{" + labels + "}";
        text_ += " ";
        text_ += digits;
        text_ += "\n";
    }
    // A family of one unlabelled sample.
    void single(char const* name, char const* type, char const* help, uint64_t value) {
        family(name, type, help);
        sample(name, value);
    }
    std::string const& text() const noexcept { return text_; }

private:
    std::string text_;
};

char const* resourceLabel(ResourceType type) {
    switch (type) {
        case ResourceType::kBaseKvPage: return "base_kv_page";
        case ResourceType::kDraftKvPage: return "draft_kv_page";
        case ResourceType::kRecurrentSnapshot: return "recurrent_snapshot";
        case ResourceType::kPartialKvSnapshot: return "partial_kv_snapshot";
    }
    return "unknown";
}

// Retention (include/ctxcache/retention.h): evictions and trims by the record's rank, for the priorities that
// occurred (the default's sample always), the clock's expiries and the pins.
void retentionMetrics(PrometheusText& out, RetentionMetrics const& r) {
    auto byPriority = [&](char const* name, char const* help, uint64_t const(&counts)[kRetentionPriorityCount]) {
        out.family(name, "counter", help);
        for (int32_t p = 0; p < kRetentionPriorityCount; ++p)
            if (counts[p] != 0 || p == kDefaultRetentionPriority)
                out.sample(name, counts[p], "priority=\"" + std::to_string(p) + "\"");
    };
    byPriority("ctxcache_evicted_records_by_priority_total",
               "Records evicted whole, by their retention rank then (0..100, 35 the default).",
               r.evictedRecordsByPriority);
    byPriority("ctxcache_trimmed_records_by_priority_total", "Trims applied, by the rank they cut under.",
               r.trimmedRecordsByPriority);
    out.single("ctxcache_retention_expiries_total", "counter",
               "Records whose retention rank changed because a range's duration ended.", r.retentionExpiries);
    out.single("ctxcache_pin_expiries_total", "counter", "Pins released because their duration ended.", r.pinExpiries);
    out.single("ctxcache_pins_refused_total", "counter", "Pins the pin budget refused.", r.pinsRefused);
    out.single("ctxcache_pinned_records", "gauge", "Records pinned now.", r.pinnedRecords);
    out.single("ctxcache_pinned_base_pages", "gauge", "Distinct base KV pages pinned records hold now.",
               r.pinnedBasePages);
}

void cacheMetrics(PrometheusText& out, ContextCacheManager const& m) {
    ContextCacheManagerMetrics const& c = m.metrics();
    out.single("ctxcache_prefix_cache_queries_total", "counter",
               "Prompt tokens of the acquires that succeeded reading the cache (vLLM's prefix_cache_queries).",
               c.prefixCacheQueries);
    out.single("ctxcache_prefix_cache_hits_total", "counter",
               "Tokens those acquires skip, their reuse length (vLLM's prefix_cache_hits).", c.prefixCacheHits);
    out.single("ctxcache_evicted_records_total", "counter", "Records evicted whole (capacity, record limit, clear).",
               c.evictedRecords);
    out.single("ctxcache_superseded_records_total", "counter",
               "Records a longer publication replaced (growth, a spec lease's dominated hit); not evictions.",
               c.supersededRecords);
    out.single("ctxcache_trimmed_records_total", "counter", "Trims applied under the lru-trim policy.",
               c.trimmedRecords);
    out.single("ctxcache_trimmed_blocks_total", "counter", "Blocks those trims took off their records.",
               c.trimmedBlocks);
    out.family("ctxcache_reclaimed_total", "counter",
               "Ids returned to a free list by eviction, by resource (pages, snapshot slots).");
    uint64_t const reclaimed[kResourceTypeCount] = {c.reclaimedBaseKvPages, c.reclaimedDraftKvPages,
                                                    c.reclaimedRecurrentSnapshots, c.reclaimedPartialKvSnapshots};
    for (ResourceType type : kAllResourceTypes)
        out.sample("ctxcache_reclaimed_total", reclaimed[static_cast<int>(type)],
                   std::string("resource=\"") + resourceLabel(type) + "\"");

    ResourcePools const& pools = m.pools();
    struct Gauge {
        char const* name;
        char const* help;
        int32_t (ResourcePools::*read)(ResourceType) const noexcept;
    };
    Gauge const gauges[] = {
        {"ctxcache_pool_capacity", "Ids in each pool, by tier and resource.", &ResourcePools::capacity},
        {"ctxcache_pool_free", "Ids on each pool's free list, by tier and resource.", &ResourcePools::freeCount},
        {"ctxcache_pool_reclaimable", "Ids eviction could free now (cached, held by no lease), by tier and resource.",
         &ResourcePools::reclaimableCount},
    };
    // The host tier (tier/host_tier.h), when one observes this manager: its slots as a pool of base KV pages.
    auto const* host = dynamic_cast<tier::HostTier const*>(m.baseBlockObserver());
    uint64_t hostPool[3] = {0, 0, 0};  // capacity, free, reclaimable (held and not being loaded)
    if (host) {
        tier::HostTierIndex const& index = host->index();
        hostPool[0] = static_cast<uint64_t>(host->config().capacityPages);
        hostPool[1] = hostPool[0] - index.residentCount() - index.writingCount();
        hostPool[2] = index.residentCount() - index.pinnedCount();
    }
    int gauge = 0;
    for (Gauge const& g : gauges) {
        out.family(g.name, "gauge", g.help);
        for (ResourceType type : kAllResourceTypes)
            out.sample(g.name, static_cast<uint64_t>(std::max(0, (pools.*g.read)(type))),
                       std::string("tier=\"device\",resource=\"") + resourceLabel(type) + "\"");
        if (host) out.sample(g.name, hostPool[gauge], "tier=\"host\",resource=\"base_kv_page\"");
        ++gauge;
    }
    if (host) {
        tier::HostTierMetrics const& h = host->metrics();
        out.single("ctxcache_host_tier_loaded_blocks_total", "counter",
                   "Blocks loaded from the host tier into a request's pages instead of computed.", h.loadedBlocks);
        out.single("ctxcache_host_tier_written_blocks_total", "counter",
                   "Blocks written to the host tier (evicted with write-back, published with write-through).",
                   h.writtenBlocks);
        out.single("ctxcache_host_tier_dropped_blocks_total", "counter",
                   "Blocks the host tier dropped to make room (its evictions).", h.droppedBlocks);
        out.single("ctxcache_host_tier_failed_loads_total", "counter",
                   "Blocks a load could not bring back (a failed copy, a slot that changed).", h.failedLoads);
        out.single("ctxcache_host_tier_failed_writes_total", "counter",
                   "Blocks whose copy to the host tier failed (not written).", h.failedWrites);
        out.family("ctxcache_host_tier_bytes_total", "counter", "Payload bytes copied, by direction.");
        out.sample("ctxcache_host_tier_bytes_total", h.bytesToHost, "direction=\"to_host\"");
        out.sample("ctxcache_host_tier_bytes_total", h.bytesToDevice, "direction=\"to_device\"");
        if (host->store())  // this manager's share of a store others share too (the store's own counters are global)
            out.single("ctxcache_host_tier_store_loaded_blocks_total", "counter",
                       "Blocks this manager's extensions took from the store its tier shares with other replicas.",
                       h.storeLoadedBlocks);
    }
    out.single("ctxcache_records", "gauge", "Records stored (published prefixes and checkpoints).", m.records().size());
    out.single("ctxcache_live_leases", "gauge", "Leases alive (requests holding pages).", m.liveLeaseCount());
    out.single("ctxcache_metadata_bytes", "gauge", "Heap bytes of the indexes and records.", m.metadataBytes());
    out.single("ctxcache_kv_events_enabled", "gauge", "1 when the KV event stream is on.", m.kvEventsEnabled() ? 1 : 0);
    out.single("ctxcache_kv_events_pending", "gauge", "KV events waiting for a drain.", m.pendingKvEventCount());
    out.single("ctxcache_kv_events_lost_total", "counter",
               "KV events dropped beyond the pending limit (replaced by one AllBlocksCleared).", m.lostKvEvents());
    retentionMetrics(out, m.retentionMetrics());
}

void publisherMetrics(PrometheusText& out, KvEventPublisher const& p) {
    KvEventPublisherStats const s = p.stats();
    out.family("ctxcache_kv_event_batches_total", "counter",
               "KV event batches by outcome: accepted from the cache, handed to ZMQ (sent), dropped.");
    out.sample("ctxcache_kv_event_batches_total", s.acceptedBatches, "outcome=\"accepted\"");
    out.sample("ctxcache_kv_event_batches_total", s.sentBatches, "outcome=\"sent\"");
    out.sample("ctxcache_kv_event_batches_total", s.droppedBatches, "outcome=\"dropped\"");
    out.single("ctxcache_kv_event_batches_queued", "gauge", "KV event batches waiting for the sender thread.",
               s.queuedBatches);
    out.single("ctxcache_kv_event_replay_requests_total", "counter", "Replay requests answered.", s.replayRequests);
    out.single("ctxcache_kv_event_subscriptions_total", "counter", "Subscriptions seen by the publisher's socket.",
               s.subscriptions);
}

}  // namespace

extern "C" {

CTXC_API ctxc_status_t ctxc_metrics_text(const void* object, char* out_text, size_t out_capacity, size_t* out_size) {
    return guard(__func__, [&]() -> ctxc_status_t {
        requireOut(out_size, "out_size") = 0;
        PrometheusText out;
        if (KvEventPublisher* p = findPublisher(object)) publisherMetrics(out, *p);
        else cacheMetrics(out, *requireCache(object).manager);
        return copyOut(out.text(), out_text, out_capacity, out_size, "out_text", "bytes", "out_size");
    });
}

}  // extern "C"
