// C ABI: retention specs on leases, the manager's retention clock, pins and retention metrics
// (include/ctxcache/c/retention.h). Every call is in its manager's single-writer family.
#include "ctxcache/c/retention.h"

#include <cmath>
#include <string>

#include "handles.h"
#include "retention_support.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace ctxcache::capi {

RetentionSpec toRetentionSpec(ctxc_retention_spec_t const& c, char const* name) {
    requireStructSize(&c, name);
    requireArray(c.ranges, c.range_count, (std::string(name) + "->ranges").c_str());
    if (c.range_count > kMaxRetentionRanges)
        invalidArgument(std::string(name) + "->range_count is " + std::to_string(c.range_count) + " (at most " +
                        std::to_string(kMaxRetentionRanges) + ")");
    RetentionSpec spec;
    spec.ranges.reserve(c.range_count);
    for (size_t i = 0; i < c.range_count; ++i) {
        ctxc_retention_range_t const& r = c.ranges[i];
        spec.ranges.push_back({r.token_start, r.token_end, r.priority, r.duration_ns});
    }
    spec.decodePriority = c.decode_priority;
    spec.decodeDurationNs = c.decode_duration_ns;
    spec.promptTokenCount = c.prompt_token_count;
    validateRetentionSpec(name, spec);
    return spec;
}

void fillRetentionMetrics(RetentionMetrics const& m, ctxc_retention_metrics_t& out) {
    static_assert(sizeof out.evicted_records_by_priority / sizeof out.evicted_records_by_priority[0] ==
                  kRetentionPriorityCount);
    for (int32_t p = 0; p < kRetentionPriorityCount; ++p) {
        out.evicted_records_by_priority[p] = m.evictedRecordsByPriority[p];
        out.trimmed_records_by_priority[p] = m.trimmedRecordsByPriority[p];
    }
    out.retention_expiries = m.retentionExpiries;
    out.pin_expiries = m.pinExpiries;
    out.pins_refused = m.pinsRefused;
    out.pinned_records = m.pinnedRecords;
    out.pinned_base_pages = m.pinnedBasePages;
}

}  // namespace ctxcache::capi

CTXC_API void ctxc_retention_spec_init(ctxc_retention_spec_t* spec) {
    if (!initSized(spec)) return;
    spec->decode_priority = kDefaultRetentionPriority;
    spec->decode_duration_ns = kNoRetentionDuration;
    spec->prompt_token_count = -1;
}

CTXC_API ctxc_status_t ctxc_lease_set_retention(ctxc_lease_t* lease, const ctxc_retention_spec_t* spec) {
    return guard(__func__, [&] {
        LeaseObject& l = requireLiveLease(lease, nullptr);
        if (!spec) {
            l.retention.reset();
            return;
        }
        RetentionSpec converted = toRetentionSpec(*spec, "spec");
        if (converted.isDefault()) l.retention.reset();
        else l.retention = std::move(converted);
    });
}

CTXC_API ctxc_status_t ctxc_manager_set_retention_time(ctxc_manager_t* manager, int64_t now_ns) {
    return guard(__func__, [&] { requireManager(manager).manager->setRetentionTime(now_ns); });
}

CTXC_API ctxc_status_t ctxc_manager_record_priority(const ctxc_manager_t* manager, uint64_t record_id,
                                                    int32_t* out_priority) {
    return getInto(__func__, out_priority, "out_priority",
                   [&] { return requireManager(manager).manager->recordPriority(record_id); });
}

CTXC_API ctxc_status_t ctxc_manager_set_pin_budget(ctxc_manager_t* manager, double fraction) {
    return guard(__func__, [&] {
        if (!(fraction >= 0.0 && fraction <= 1.0))  // NaN too
            invalidArgument("fraction must be in [0, 1] (got " + std::to_string(fraction) + ")");
        requireManager(manager).manager->setPinBudget(fraction);
    });
}

CTXC_API ctxc_status_t ctxc_manager_pin_record(ctxc_manager_t* manager, uint64_t record_id, int64_t duration_ns) {
    return guard(__func__, [&] { requireManager(manager).manager->pinRecord(record_id, duration_ns); });
}

CTXC_API ctxc_status_t ctxc_manager_unpin_record(ctxc_manager_t* manager, uint64_t record_id) {
    return guard(__func__, [&] { requireManager(manager).manager->unpinRecord(record_id); });
}

CTXC_API ctxc_status_t ctxc_manager_retention_metrics(const ctxc_manager_t* manager,
                                                      ctxc_retention_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        fillRetentionMetrics(requireManager(manager).manager->retentionMetrics(),
                             requireSized(out_metrics, "out_metrics"));
    });
}
