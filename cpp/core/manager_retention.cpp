// ContextCacheManager's retention: the clock, ranking records by their specs (retention.h), applying expiries and
// the hard pins with their budget. The eviction walk that reads the ranks is in context_cache_manager.cpp.
// Contract: include/ctxcache/context_cache_manager.h. Threading: the manager's single writer.
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"

namespace ctxcache {
namespace {

using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{""};

}  // namespace

int64_t ContextCacheManager::nowNs() const noexcept {
    if (clockDriven_) return drivenNowNs_;
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int64_t ContextCacheManager::retentionTime() const noexcept { return nowNs(); }

int32_t ContextCacheManager::rankOf(StoredRecord const& record, int64_t now) const noexcept {
    RetentionBlockRanges const* ranges = retention_.find(record.id);
    if (!ranges) return kDefaultRetentionPriority;
    int32_t const blocks = record.key.fullBlockCount;
    if (evictionPolicy_ == EvictionPolicy::kRecordLruTrim && !record.isHybrid() && blocks >= 1)
        return blockRetentionPriority(*ranges, blocks - 1, now);  // trims cut the tail: it ranks the record
    return maxRetentionPriority(*ranges, blocks, now);             // kept or evicted whole: its best block
}

int64_t ContextCacheManager::advanceRetentionClock() {
    int64_t const now = std::max(nowNs(), rankedAtNs_);
    if (retention_.nextDue() <= now) applyExpiries(now);
    rankedAtNs_ = now;
    return now;
}

void ContextCacheManager::applyExpiriesIfDue() {
    if (retention_.nextDue() == kRetentionNever) return;  // nothing scheduled: no clock read
    advanceRetentionClock();
}

void ContextCacheManager::applyExpiries(int64_t now) {
    retention_.popDue(now, [&](RecordId id) {
        if (!records_.contains(id)) return;
        int32_t const rank = rankOf(records_.get(id), now);
        if (rank == records_.priority(id)) return;
        records_.setPriority(id, rank);
        ++retentionMetrics_.retentionExpiries;
    }, [&](RecordId id) {
        dropPin(id);
        ++retentionMetrics_.pinExpiries;
    });
}

void ContextCacheManager::setRetentionTime(int64_t nowNsValue) {
    EventCall const call(*this);
    if (clockDriven_ && nowNsValue < drivenNowNs_)
        contract("setRetentionTime", "time " + str(nowNsValue) + " ns is before the last one set (" +
                                         str(drivenNowNs_) + " ns): the clock never runs backwards");
    if (!clockDriven_) {
        // The steady clock's readings are another origin: every expiry recorded on it keeps the time it had left
        // (without this, a range that had expired, its rank already applied, would be live again on a driven
        // clock that starts lower: the capi fuzzer's reproducer in tests/fuzz/corpus).
        int64_t const steadyNow = std::max(nowNs(), rankedAtNs_);
        int64_t delta = 0;
        if (__builtin_sub_overflow(nowNsValue, steadyNow, &delta))
            delta = nowNsValue < steadyNow ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
        retention_.rebase(delta);
        rankedAtNs_ = nowNsValue;
    }
    clockDriven_ = true;
    drivenNowNs_ = nowNsValue;
    advanceRetentionClock();
}

void ContextCacheManager::retain(RecordId id, RetentionSpec const* spec, bool existing) {
    if (!spec || spec->isDefault() || !records_.contains(id)) return;
    int64_t const now = advanceRetentionClock();
    StoredRecord const& record = records_.get(id);
    RetentionBlockRanges ranges = retentionBlockRanges(*spec, pageSize_, record.key.fullBlockCount, now);
    if (existing) retention_.merge(id, ranges, now);
    else retention_.set(id, std::move(ranges), now);
    records_.setPriority(id, rankOf(record, now));
}

int32_t ContextCacheManager::recordPriority(RecordId id) const {
    if (!records_.contains(id)) contract("recordPriority", "no record " + str(static_cast<int64_t>(id)));
    return records_.priority(id);
}

RetentionBlockRanges ContextCacheManager::recordRetention(RecordId id) const {
    if (!records_.contains(id)) contract("recordRetention", "no record " + str(static_cast<int64_t>(id)));
    RetentionBlockRanges const* ranges = retention_.find(id);
    return ranges ? *ranges : RetentionBlockRanges{};
}

// ---- pins ----------------------------------------------------------------------------------------------------

void ContextCacheManager::setPinBudget(double fraction) {
    if (!(fraction >= 0.0 && fraction <= 1.0))
        contract("setPinBudget", "fraction must be in [0, 1] (got " + std::to_string(fraction) + ")");
    for (ResourceType type : kAllResourceTypes) {
        int32_t const allowed = static_cast<int32_t>(std::floor(fraction * pools_.capacity(type)));
        if (retention_.pinnedCount(type) > allowed)
            contract("setPinBudget", std::string("pinned records hold ") + str(retention_.pinnedCount(type)) + " " +
                                         toString(type) + " ids, more than the " + str(allowed) + " a budget of " +
                                         std::to_string(fraction) + " allows: unpin first");
    }
    pinBudget_ = fraction;
}

bool ContextCacheManager::isPinned(RecordId id) const {
    if (!records_.contains(id)) contract("isPinned", "no record " + str(static_cast<int64_t>(id)));
    return retention_.isPinned(id);
}

void ContextCacheManager::pinRecord(RecordId id, int64_t durationNs) {
    EventCall const call(*this);
    char const* const op = "pinRecord";
    if (!records_.contains(id)) contract(op, "no record " + str(static_cast<int64_t>(id)));
    if (durationNs < 0 && durationNs != kNoRetentionDuration)
        contract(op, "duration " + str(durationNs) + " ns is negative (-1 for none)");
    std::vector<ResourceId> const resources = records_.get(id).resources();
    // A new pin is refused before the clock is read, so that a refusal changes nothing (reading the clock applies
    // the expiries it reaches). The expiries can only drop pins, so a pin that fits before them fits after.
    if (!retention_.isPinned(id)) {
        auto refuse = [&](std::string const& why) {
            ++retentionMetrics_.pinsRefused;
            contract(op, "record " + str(static_cast<int64_t>(id)) + " cannot be pinned: " + why);
        };
        if (maxRecords_ == 0 || retention_.pinnedRecords() + 1 >= static_cast<size_t>(maxRecords_))
            refuse("pinned records would leave no record slot to evict (" +
                   str(static_cast<int64_t>(retention_.pinnedRecords())) + " pinned, maxRecords " + str(maxRecords_) +
                   ")");
        ResourceDemand const fresh = retention_.unpinnedAmong(resources);
        for (ResourceType type : kAllResourceTypes) {
            if (fresh.get(type) == 0) continue;
            int32_t const allowed = static_cast<int32_t>(std::floor(pinBudget_ * pools_.capacity(type)));
            int64_t const needed = static_cast<int64_t>(retention_.pinnedCount(type)) + fresh.get(type);
            if (needed > allowed)
                refuse(std::string("pins would hold ") + str(needed) + " " + toString(type) + " ids, the budget (" +
                       std::to_string(pinBudget_) + " of " + str(pools_.capacity(type)) + ") allows " + str(allowed));
        }
    }
    int64_t const now = advanceRetentionClock();
    int64_t const expiry = retentionExpiry(now, durationNs);
    if (retention_.isPinned(id)) {
        retention_.pin(id, resources, expiry);  // only the duration changes
        return;
    }
    // Not pinned (now): a new pin, or one whose own expiry the clock just reached (it fit the budget until then).
    // Holds first (each a lease-like active ref), then the table and the listing: nothing after the holds throws
    // but an allocation, which undoes them.
    size_t held = 0;
    try {
        for (ResourceId const& rid : resources) {
            pools_.addActiveRef(rid);
            ++held;
        }
        retention_.pin(id, resources, expiry);
    } catch (...) {
        for (size_t i = 0; i < held; ++i) pools_.releaseActiveRef(resources[i]);
        throw;
    }
    records_.unlist(id);
    retentionMetrics_.pinnedRecords = retention_.pinnedRecords();
    retentionMetrics_.pinnedBasePages = static_cast<uint64_t>(retention_.pinnedCount(ResourceType::kBaseKvPage));
}

void ContextCacheManager::unpinRecord(RecordId id) {
    EventCall const call(*this);
    if (!records_.contains(id)) contract("unpinRecord", "no record " + str(static_cast<int64_t>(id)));
    if (!retention_.isPinned(id)) contract("unpinRecord", "record " + str(static_cast<int64_t>(id)) + " is not pinned");
    dropPin(id);
}

void ContextCacheManager::dropPin(RecordId id) {
    if (!records_.contains(id) || !retention_.isPinned(id)) return;
    std::vector<ResourceId> const resources = records_.get(id).resources();
    retention_.unpin(id, resources);
    for (ResourceId const& rid : resources) pools_.releaseActiveRef(rid);
    records_.relist(id);
    retentionMetrics_.pinnedRecords = retention_.pinnedRecords();
    retentionMetrics_.pinnedBasePages = static_cast<uint64_t>(retention_.pinnedCount(ResourceType::kBaseKvPage));
}

}  // namespace ctxcache
