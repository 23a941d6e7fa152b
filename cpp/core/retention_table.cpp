// RetentionTable: per-record ranges, pins and their expiry schedule. Contract: include/ctxcache/retention_table.h.
#include "ctxcache/retention_table.h"

#include <limits>
#include <utility>

namespace ctxcache {

void RetentionTable::schedule(RecordId id, RetentionBlockRanges const& ranges, int64_t nowNs) {
    for (RetentionBlockRange const& r : ranges)
        if (r.expiresAtNs != kRetentionNever && r.expiresAtNs > nowNs) due_.push({r.expiresAtNs, id, false});
}

namespace {

int64_t shifted(int64_t atNs, int64_t deltaNs) noexcept {
    if (atNs == kRetentionNever) return atNs;
    int64_t out = 0;
    if (__builtin_add_overflow(atNs, deltaNs, &out))
        return deltaNs > 0 ? kRetentionNever - 1 : std::numeric_limits<int64_t>::min();
    return out == kRetentionNever ? kRetentionNever - 1 : out;
}

}  // namespace

void RetentionTable::rebase(int64_t deltaNs) {
    if (deltaNs == 0) return;
    for (auto& [id, ranges] : ranges_)
        for (RetentionBlockRange& r : ranges) r.expiresAtNs = shifted(r.expiresAtNs, deltaNs);
    for (auto& [id, expiry] : pins_) expiry = shifted(expiry, deltaNs);
    std::vector<Due> entries;
    entries.reserve(due_.size());
    while (!due_.empty()) {
        entries.push_back(due_.top());
        due_.pop();
    }
    for (Due& d : entries) {
        d.atNs = shifted(d.atNs, deltaNs);
        due_.push(d);  // capacity kept by the pops: cannot allocate
    }
}

void RetentionTable::set(RecordId id, RetentionBlockRanges ranges, int64_t nowNs) {
    if (ranges.empty()) {
        ranges_.erase(id);
        return;
    }
    schedule(id, ranges, nowNs);
    ranges_[id] = std::move(ranges);
}

void RetentionTable::merge(RecordId id, RetentionBlockRanges const& more, int64_t nowNs) {
    if (more.empty()) return;
    RetentionBlockRanges& ranges = ranges_[id];
    mergeRetentionBlockRanges(ranges, more, nowNs);
    schedule(id, more, nowNs);
    if (ranges.empty()) ranges_.erase(id);
}

void RetentionTable::clip(RecordId id, int32_t keepBlocks) {
    auto it = ranges_.find(id);
    if (it == ranges_.end()) return;
    clipRetentionBlockRanges(it->second, keepBlocks);
    if (it->second.empty()) ranges_.erase(it);
}

int32_t RetentionTable::pinHolders(ResourceId const& id) const noexcept {
    int32_t const* n = pinHolders_.find(id);
    return n ? *n : 0;
}

void RetentionTable::count(ResourceId const& id, int delta) {
    auto [n, inserted] = pinHolders_.tryEmplace(id, 0);
    if (inserted) ++pinnedDistinct_.at(id.type);
    *n += delta;
    if (*n == 0) {
        pinHolders_.erase(id);
        --pinnedDistinct_.at(id.type);
    }
}

size_t RetentionTable::memoryBytes() const noexcept {
    constexpr size_t kNode = 64;  // an unordered_map node with its bucket, roughly
    size_t bytes = pinHolders_.memoryBytes() + due_.size() * sizeof(Due) + pins_.size() * kNode;
    for (auto const& [id, ranges] : ranges_) bytes += kNode + ranges.capacity() * sizeof(RetentionBlockRange);
    return bytes;
}

}  // namespace ctxcache
