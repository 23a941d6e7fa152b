// RetentionTable: the manager's per-record retention state. The block ranges of every record published with a
// non-default spec (retention.h; a record without an entry is at the default priority forever), the hard pins
// (record -> pin expiry, and how many pinned records hold each resource, so the pin budget counts distinct ids), and
// one expiry schedule for both: a min-heap of (time, record) entries, each pushed when a range or pin begins,
// checked against the live state when it is popped (an entry for an evicted, trimmed or re-pinned record is
// stale and dropped then: lazy deletion, so nothing is searched when a record goes).
//
// Invariants: a record has an entry exactly when its ranges are non-empty; every live range or pin expiry after the
//             last applied time has a heap entry at or before it; pinnedIds counts, for each resource, the pinned
//             records that list it (absent at zero), and pinnedCount(type) is the number of ids with a count.
// Errors:     none of its own: the manager validates before it calls (an unknown record here is a no-op).
// Cost:       set/merge/clip/erase O(ranges); pin/unpin O(resources of the record); the schedule O(log entries)
//             per push and pop, one push per range or pin begun (at most kMaxRetentionRanges + 1 per publication).
// Threading:  the manager's single writer.
#pragma once

#include <cstdint>
#include <queue>
#include <unordered_map>
#include <vector>

#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/retention.h"
#include "ctxcache/types.h"

namespace ctxcache {

class RetentionTable {
public:
    // The record's ranges, or null (the default).
    RetentionBlockRanges const* find(RecordId id) const noexcept {
        auto it = ranges_.find(id);
        return it == ranges_.end() ? nullptr : &it->second;
    }
    // Replaces the record's ranges (empty: erases them) and schedules their expiries after nowNs.
    void set(RecordId id, RetentionBlockRanges ranges, int64_t nowNs);
    // Adds a later publication's ranges (mergeRetentionBlockRanges) and schedules them.
    void merge(RecordId id, RetentionBlockRanges const& more, int64_t nowNs);
    void clip(RecordId id, int32_t keepBlocks);  // a trim kept blocks [0, keepBlocks)
    void erase(RecordId id) noexcept { ranges_.erase(id); }
    size_t recordsWithRanges() const noexcept { return ranges_.size(); }

    // Pins. pin() records the expiry (kRetentionNever for none) and, for a record not pinned before, counts its
    // resources; unpin() uncounts them. Neither touches the pools: the manager adds and drops the holds.
    bool isPinned(RecordId id) const noexcept { return pins_.find(id) != pins_.end(); }
    template <class Resources>
    void pin(RecordId id, Resources const& resources, int64_t expiresAtNs);
    template <class Resources>
    void unpin(RecordId id, Resources const& resources);
    // How many of `resources` no pinned record holds yet, per type (what a new pin adds to the budget's count).
    template <class Resources>
    ResourceDemand unpinnedAmong(Resources const& resources) const;
    int32_t pinnedCount(ResourceType type) const noexcept { return pinnedDistinct_.get(type); }
    size_t pinnedRecords() const noexcept { return pins_.size(); }
    int32_t pinHolders(ResourceId const& id) const noexcept;
    template <class F>
    void forEachPin(F&& f) const {
        for (auto const& [id, expiry] : pins_) f(id, expiry);
    }

    // Moves every finite expiry (ranges, pins, the schedule) by deltaNs, saturating short of kRetentionNever: the
    // clock changed origin (the manager's switch from the steady clock to a driven one) and each expiry keeps the
    // time it had left. O(entries log entries).
    void rebase(int64_t deltaNs);

    // The earliest scheduled time (kRetentionNever when nothing is scheduled).
    int64_t nextDue() const noexcept { return due_.empty() ? kRetentionNever : due_.top().atNs; }
    // Pops every entry due at or before nowNs and calls onRanges(id) for a record whose ranges may have changed
    // rank, onPin(id) for a pin that ended (the caller unpins). Stale entries are dropped without a call.
    template <class OnRanges, class OnPin>
    void popDue(int64_t nowNs, OnRanges&& onRanges, OnPin&& onPin);

    size_t memoryBytes() const noexcept;

private:
    struct Due {
        int64_t atNs;
        RecordId id;
        bool pin;
        friend bool operator>(Due const& a, Due const& b) noexcept { return a.atNs > b.atNs; }
    };
    void schedule(RecordId id, RetentionBlockRanges const& ranges, int64_t nowNs);
    void count(ResourceId const& id, int delta);

    std::unordered_map<RecordId, RetentionBlockRanges> ranges_;
    std::unordered_map<RecordId, int64_t> pins_;
    detail::FlatHashMap<ResourceId, int32_t, std::hash<ResourceId>> pinHolders_;
    ResourceDemand pinnedDistinct_;
    std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;
};

template <class Resources>
void RetentionTable::pin(RecordId id, Resources const& resources, int64_t expiresAtNs) {
    auto [it, inserted] = pins_.emplace(id, expiresAtNs);
    if (!inserted) it->second = expiresAtNs;
    else
        for (ResourceId const& rid : resources) count(rid, +1);
    if (expiresAtNs != kRetentionNever) due_.push({expiresAtNs, id, true});
}

template <class Resources>
void RetentionTable::unpin(RecordId id, Resources const& resources) {
    if (pins_.erase(id) == 0) return;
    for (ResourceId const& rid : resources) count(rid, -1);
}

template <class Resources>
ResourceDemand RetentionTable::unpinnedAmong(Resources const& resources) const {
    ResourceDemand fresh;
    detail::FlatHashMap<ResourceId, int32_t, std::hash<ResourceId>> seen;  // a record lists an id at most once
    for (ResourceId const& rid : resources)
        if (pinHolders(rid) == 0 && seen.tryEmplace(rid, 1).second) ++fresh.at(rid.type);
    return fresh;
}

template <class OnRanges, class OnPin>
void RetentionTable::popDue(int64_t nowNs, OnRanges&& onRanges, OnPin&& onPin) {
    while (!due_.empty() && due_.top().atNs <= nowNs) {
        Due const d = due_.top();
        due_.pop();
        if (d.pin) {
            auto it = pins_.find(d.id);
            if (it != pins_.end() && it->second == d.atNs) onPin(d.id);
        } else if (ranges_.find(d.id) != ranges_.end()) {
            onRanges(d.id);
        }
    }
}

}  // namespace ctxcache
