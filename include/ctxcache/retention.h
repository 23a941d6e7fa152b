// Retention: what a runtime says about which prefixes matter and for how long, shaped as TensorRT-LLM's
// KvCacheRetentionConfig. A RetentionSpec travels with a publication: token ranges [tokenStart, tokenEnd) (end open
// for "to the end of the prompt") each with a priority 0..100 and an optional duration, plus a priority (and
// duration) for tokens generated in decode (at or past promptTokenCount). Everything else is at the default
// priority, 35, forever; an empty spec reproduces plain LRU exactly.
//
// A block (tokens [b*P, (b+1)*P)) takes the highest priority among the ranges that overlap it and have not expired;
// none: the default. A duration counts from the publication (the manager's retention clock) and, when it ends,
// that range no longer counts (so the block falls back to the default, or to another range still running).
// RetentionBlockRanges is a record's spec in block units (the few ranges it was given, clipped to its blocks),
// what the manager keeps per record with a non-default spec. The eviction rank of a record is the highest effective
// priority of its blocks under record LRU (a record is kept or evicted whole) and its last block's under
// lru-trim (whose cuts take the tail first); the manager keeps records in priority buckets, LRU within each
// (context_cache_manager.h).
//
// Invariants: ranges are kept clipped to [0, blockCount) and non-empty; priorities are 0..100; an expiry is an
//             absolute time in the clock's nanoseconds, kRetentionNever for none.
// Errors:     a spec with a priority out of 0..100, a negative token start, an end not after its start, a negative
//             duration or more than kMaxRetentionRanges ranges: ContractError from validateRetentionSpec.
// Cost:       every query O(ranges^2) (a spec has a few); nothing is per block.
// Threading:  plain values; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace ctxcache {

inline constexpr int32_t kMinRetentionPriority = 0;
inline constexpr int32_t kMaxRetentionPriority = 100;
inline constexpr int32_t kDefaultRetentionPriority = 35;
inline constexpr int32_t kRetentionPriorityCount = kMaxRetentionPriority + 1;
inline constexpr int32_t kRetentionOpenEnd = -1;          // RetentionRange::tokenEnd: to the end of the prompt
inline constexpr int64_t kNoRetentionDuration = -1;       // a range that never expires
inline constexpr int64_t kRetentionNever = std::numeric_limits<int64_t>::max();  // an expiry that never comes
inline constexpr size_t kMaxRetentionRanges = 64;

struct RetentionRange {
    int32_t tokenStart = 0;
    int32_t tokenEnd = kRetentionOpenEnd;  // exclusive; kRetentionOpenEnd: to the end
    int32_t priority = kDefaultRetentionPriority;
    int64_t durationNs = kNoRetentionDuration;  // >= 0, or kNoRetentionDuration
};

struct RetentionSpec {
    std::vector<RetentionRange> ranges;
    int32_t decodePriority = kDefaultRetentionPriority;
    int64_t decodeDurationNs = kNoRetentionDuration;
    // Tokens at or past this position were generated in decode and take decodePriority; -1: the whole
    // publication is prompt.
    int32_t promptTokenCount = -1;

    // True when the spec says nothing beyond the default: every range (if any) at the default priority for good
    // (such a range cannot change any block's priority: covered or not, a block is at the default), and decode at
    // the default with no duration. Such a spec is stored as nothing, so it costs what no spec costs.
    bool isDefault() const noexcept {
        for (RetentionRange const& r : ranges)
            if (r.priority != kDefaultRetentionPriority || r.durationNs != kNoRetentionDuration) return false;
        return promptTokenCount < 0 ||
               (decodePriority == kDefaultRetentionPriority && decodeDurationNs == kNoRetentionDuration);
    }
};

// Throws ContractError naming `operation` and the first bad field.
void validateRetentionSpec(char const* operation, RetentionSpec const& spec);

// One range of a record in block units: blocks [firstBlock, endBlock) at `priority` until `expiresAtNs`.
struct RetentionBlockRange {
    int32_t firstBlock = 0;
    int32_t endBlock = 0;
    int32_t priority = kDefaultRetentionPriority;
    int64_t expiresAtNs = kRetentionNever;

    friend bool operator==(RetentionBlockRange const& a, RetentionBlockRange const& b) noexcept {
        return a.firstBlock == b.firstBlock && a.endBlock == b.endBlock && a.priority == b.priority &&
               a.expiresAtNs == b.expiresAtNs;
    }
};
using RetentionBlockRanges = std::vector<RetentionBlockRange>;

// The spec (validated) for a record of blockCount blocks of pageSize tokens published at nowNs: its ranges and the
// decode range in block units, clipped, empty ones dropped. Empty for a default spec.
RetentionBlockRanges retentionBlockRanges(RetentionSpec const& spec, int32_t pageSize, int32_t blockCount,
                                          int64_t nowNs);
// The expiry of a duration (>= 0, or kNoRetentionDuration: kRetentionNever) begun at nowNs (any int64): saturates at
// kRetentionNever, never overflows.
int64_t retentionExpiry(int64_t nowNs, int64_t durationNs) noexcept;
// The effective priority of block `block` at nowNs.
int32_t blockRetentionPriority(RetentionBlockRanges const& ranges, int32_t block, int64_t nowNs) noexcept;
// The highest effective priority over blocks [0, blockCount) at nowNs (the default for no ranges).
int32_t maxRetentionPriority(RetentionBlockRanges const& ranges, int32_t blockCount, int64_t nowNs) noexcept;
// The first block of the record's tail whose blocks all have an effective priority <= priority: blocks
// [result, blockCount) may be cut at that priority (blockCount when even the last block is above it).
int32_t retentionTailStart(RetentionBlockRanges const& ranges, int32_t blockCount, int32_t priority,
                           int64_t nowNs) noexcept;
// The earliest expiry after nowNs among the ranges (kRetentionNever for none).
int64_t nextRetentionExpiry(RetentionBlockRanges const& ranges, int64_t nowNs) noexcept;
// Clips the ranges to blocks [0, keepBlocks) (a trim), dropping those left empty.
void clipRetentionBlockRanges(RetentionBlockRanges& ranges, int32_t keepBlocks);
// Adds `more` (a later publication of the same record) to `ranges`: a range equal in blocks and priority keeps the
// later expiry; ranges that have expired by nowNs are dropped (they no longer count).
void mergeRetentionBlockRanges(RetentionBlockRanges& ranges, RetentionBlockRanges const& more, int64_t nowNs);
// The ranges of `older` that no range of `newer` dominates (covers at least its blocks, at a priority at least as
// high, expiring no earlier): what a record superseded by a longer one (PublicationGrowth) still adds to its
// successor's ranges, so a lease that republishes with one spec does not pile up ranges. O(older x newer).
RetentionBlockRanges undominatedRetentionBlockRanges(RetentionBlockRanges const& older,
                                                     RetentionBlockRanges const& newer);

}  // namespace ctxcache
