// Retention specs in block units: validation, the conversion of token ranges to block ranges, and the queries the
// manager ranks records by. Contract and cost: include/ctxcache/retention.h.
#include "ctxcache/retention.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {
namespace {

void refuse(char const* operation, std::string const& what) {
    throw ContractError(std::string(operation) + ": retention " + what);
}

bool badPriority(int32_t priority) { return priority < kMinRetentionPriority || priority > kMaxRetentionPriority; }
bool badDuration(int64_t duration) { return duration < 0 && duration != kNoRetentionDuration; }

// The checks' messages are built only when one fails: a valid spec allocates nothing here.
void checkPriority(char const* operation, char const* where, size_t index, int32_t priority) {
    if (badPriority(priority))
        refuse(operation, where + (index == SIZE_MAX ? "" : " " + std::to_string(index)) + " priority " +
                              std::to_string(priority) + " is outside 0..100");
}

void checkDuration(char const* operation, char const* where, size_t index, int64_t duration) {
    if (badDuration(duration))
        refuse(operation, where + (index == SIZE_MAX ? "" : " " + std::to_string(index)) + " duration " +
                              std::to_string(duration) + " ns is negative");
}

int32_t blockOf(int64_t token, int32_t pageSize) noexcept { return static_cast<int32_t>(token / pageSize); }

// Blocks [first, end) that tokens [tokenStart, tokenEnd) overlap, clipped to [0, blockCount).
void addRange(RetentionBlockRanges& out, int64_t tokenStart, int64_t tokenEnd, int32_t pageSize, int32_t blockCount,
              int32_t priority, int64_t expiresAt) {
    if (tokenEnd <= tokenStart) return;
    int32_t const first = blockOf(tokenStart, pageSize);
    int32_t const end = std::min<int64_t>(blockCount, (tokenEnd + pageSize - 1) / pageSize);
    if (first >= end) return;
    out.push_back({first, static_cast<int32_t>(end), priority, expiresAt});
}

// Calls f(first, end, priority) for each run of blocks whose set of live ranges is constant, in block order.
template <class F>
void forEachRun(RetentionBlockRanges const& ranges, int32_t blockCount, int64_t nowNs, F&& f) {
    // Boundaries: 0, blockCount, and every live range's ends. A spec has at most kMaxRetentionRanges + 1 ranges.
    int32_t cuts[2 * (kMaxRetentionRanges + 1) + 2];
    size_t n = 0;
    cuts[n++] = 0;
    cuts[n++] = blockCount;
    for (RetentionBlockRange const& r : ranges) {
        if (r.expiresAtNs <= nowNs || n + 2 > sizeof cuts / sizeof cuts[0]) continue;
        cuts[n++] = std::min(r.firstBlock, blockCount);
        cuts[n++] = std::min(r.endBlock, blockCount);
    }
    std::sort(cuts, cuts + n);
    n = static_cast<size_t>(std::unique(cuts, cuts + n) - cuts);
    for (size_t i = 0; i + 1 < n; ++i) {
        int32_t const first = cuts[i], end = cuts[i + 1];
        if (first >= end) continue;
        f(first, end, blockRetentionPriority(ranges, first, nowNs));
    }
}

}  // namespace

void validateRetentionSpec(char const* operation, RetentionSpec const& spec) {
    if (spec.ranges.size() > kMaxRetentionRanges)
        refuse(operation, "has " + std::to_string(spec.ranges.size()) + " ranges (at most " +
                              std::to_string(kMaxRetentionRanges) + ")");
    for (size_t i = 0; i < spec.ranges.size(); ++i) {
        RetentionRange const& r = spec.ranges[i];
        if (r.tokenStart < 0)
            refuse(operation,
                   "range " + std::to_string(i) + " starts at a negative token (" + std::to_string(r.tokenStart) + ")");
        if (r.tokenEnd != kRetentionOpenEnd && r.tokenEnd <= r.tokenStart)
            refuse(operation, "range " + std::to_string(i) + " ends at token " + std::to_string(r.tokenEnd) +
                                  ", not after its start " + std::to_string(r.tokenStart) + " (-1 for an open end)");
        checkPriority(operation, "range", i, r.priority);
        checkDuration(operation, "range", i, r.durationNs);
    }
    checkPriority(operation, "decode", SIZE_MAX, spec.decodePriority);
    checkDuration(operation, "decode", SIZE_MAX, spec.decodeDurationNs);
    if (spec.promptTokenCount < -1)
        refuse(operation, "promptTokenCount " + std::to_string(spec.promptTokenCount) + " is below -1");
}

RetentionBlockRanges retentionBlockRanges(RetentionSpec const& spec, int32_t pageSize, int32_t blockCount,
                                          int64_t nowNs) {
    RetentionBlockRanges out;
    if (spec.isDefault() || blockCount <= 0 || pageSize <= 0) return out;
    int64_t const total = static_cast<int64_t>(blockCount) * pageSize;
    int64_t const prompt = spec.promptTokenCount < 0 ? total : std::min<int64_t>(spec.promptTokenCount, total);
    out.reserve(spec.ranges.size() + 1);
    for (RetentionRange const& r : spec.ranges) {
        int64_t const end = r.tokenEnd == kRetentionOpenEnd ? prompt : std::min<int64_t>(r.tokenEnd, total);
        addRange(out, r.tokenStart, end, pageSize, blockCount, r.priority, retentionExpiry(nowNs, r.durationNs));
    }
    if (spec.promptTokenCount >= 0 &&
        (spec.decodePriority != kDefaultRetentionPriority || spec.decodeDurationNs != kNoRetentionDuration))
        addRange(out, prompt, total, pageSize, blockCount, spec.decodePriority,
                 retentionExpiry(nowNs, spec.decodeDurationNs));
    return out;
}

int64_t retentionExpiry(int64_t nowNs, int64_t durationNs) noexcept {
    if (durationNs < 0) return kRetentionNever;                          // kNoRetentionDuration
    if (nowNs > kRetentionNever - durationNs) return kRetentionNever;    // saturates (durationNs >= 0: no overflow)
    return nowNs + durationNs;
}

int32_t blockRetentionPriority(RetentionBlockRanges const& ranges, int32_t block, int64_t nowNs) noexcept {
    int32_t best = -1;
    for (RetentionBlockRange const& r : ranges)
        if (block >= r.firstBlock && block < r.endBlock && r.expiresAtNs > nowNs) best = std::max(best, r.priority);
    return best < 0 ? kDefaultRetentionPriority : best;
}

int32_t maxRetentionPriority(RetentionBlockRanges const& ranges, int32_t blockCount, int64_t nowNs) noexcept {
    if (ranges.empty()) return kDefaultRetentionPriority;
    int32_t best = -1;
    forEachRun(ranges, blockCount, nowNs, [&](int32_t, int32_t, int32_t priority) { best = std::max(best, priority); });
    return best < 0 ? kDefaultRetentionPriority : best;
}

int32_t retentionTailStart(RetentionBlockRanges const& ranges, int32_t blockCount, int32_t priority,
                           int64_t nowNs) noexcept {
    if (ranges.empty()) return kDefaultRetentionPriority <= priority ? 0 : blockCount;
    // The runs in block order; the tail is the longest suffix of runs at or below `priority`.
    int32_t start = blockCount;
    forEachRun(ranges, blockCount, nowNs, [&](int32_t first, int32_t, int32_t p) {
        if (p > priority) start = blockCount;  // a later run above it ends any tail begun before
        else if (start == blockCount) start = first;
    });
    return start;
}

int64_t nextRetentionExpiry(RetentionBlockRanges const& ranges, int64_t nowNs) noexcept {
    int64_t next = kRetentionNever;
    for (RetentionBlockRange const& r : ranges)
        if (r.expiresAtNs > nowNs) next = std::min(next, r.expiresAtNs);
    return next;
}

void clipRetentionBlockRanges(RetentionBlockRanges& ranges, int32_t keepBlocks) {
    for (RetentionBlockRange& r : ranges) r.endBlock = std::min(r.endBlock, keepBlocks);
    ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                                [](RetentionBlockRange const& r) { return r.firstBlock >= r.endBlock; }),
                 ranges.end());
}

void mergeRetentionBlockRanges(RetentionBlockRanges& ranges, RetentionBlockRanges const& more, int64_t nowNs) {
    ranges.erase(std::remove_if(ranges.begin(), ranges.end(),
                                [&](RetentionBlockRange const& r) { return r.expiresAtNs <= nowNs; }),
                 ranges.end());
    for (RetentionBlockRange const& m : more) {
        if (m.expiresAtNs <= nowNs) continue;
        auto same = std::find_if(ranges.begin(), ranges.end(), [&](RetentionBlockRange const& r) {
            return r.firstBlock == m.firstBlock && r.endBlock == m.endBlock && r.priority == m.priority;
        });
        if (same != ranges.end()) same->expiresAtNs = std::max(same->expiresAtNs, m.expiresAtNs);
        else if (ranges.size() <= kMaxRetentionRanges) ranges.push_back(m);
    }
}

RetentionBlockRanges undominatedRetentionBlockRanges(RetentionBlockRanges const& older,
                                                     RetentionBlockRanges const& newer) {
    RetentionBlockRanges out;
    for (RetentionBlockRange const& r : older) {
        bool const dominated = std::any_of(newer.begin(), newer.end(), [&](RetentionBlockRange const& n) {
            return n.firstBlock <= r.firstBlock && n.endBlock >= r.endBlock && n.priority >= r.priority &&
                   n.expiresAtNs >= r.expiresAtNs;
        });
        if (!dominated) out.push_back(r);
    }
    return out;
}

}  // namespace ctxcache
