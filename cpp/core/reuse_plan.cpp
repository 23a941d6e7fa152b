// Reuse planners (reference c.6): vanilla, hybrid/pure-recurrent, Hybrid+MTP and EAGLE spec plans as pure
// functions of the indexes: they read, never add references, touch recency or allocate ids. Validation (pageSize,
// n, hash count) comes first; an empty input is kStandard with nothing to do, bypass and misses are cold
// kNoReusablePrefix plans, and hybrid candidates outside (0, n) are skipped. Full contract and cost:
// include/ctxcache/reuse_plan.h.

#include "ctxcache/reuse_plan.h"

#include <algorithm>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {
namespace {

int32_t ceilDiv(int32_t a, int32_t b) { return static_cast<int32_t>((static_cast<int64_t>(a) + b - 1) / b); }

void validateCommon(char const* planner, BlockHashSpan hashes, int32_t n, int32_t pageSize) {
    validateReusePlanInput(planner, hashes, n, pageSize);
}

// Nothing reused: every input page private. An empty input (n == 0) has nothing to reuse or allocate and is
// kStandard, the reference's default kind, in every mode; a non-empty one is kNoReusablePrefix.
ReusePlan coldPlan(ReusePlanMode mode, int32_t n, int32_t pageSize, bool basePages, bool draftPages) {
    ReusePlan plan;
    plan.mode = mode;
    plan.kind = n == 0 ? ReusePlanKind::kStandard : ReusePlanKind::kNoReusablePrefix;
    int32_t const total = ceilDiv(n, pageSize);
    plan.demand.baseKvPages = basePages ? total : 0;
    plan.demand.draftKvPages = draftPages ? total : 0;
    return plan;
}

// Hybrid candidates longest first (stable: equal lengths keep the caller's order).
std::vector<HybridCheckpointCandidate const*> longestFirst(std::vector<HybridCheckpointCandidate> const& candidates) {
    std::vector<HybridCheckpointCandidate const*> ordered;
    ordered.reserve(candidates.size());
    for (HybridCheckpointCandidate const& c : candidates) ordered.push_back(&c);
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](auto const* a, auto const* b) { return a->exactLength > b->exactLength; });
    return ordered;
}

// The record has exactly `blocks` logical blocks and they are hashes[0, blocks) (hashes holds at least that many).
bool logicalPrefixEquals(CacheRecordStore const& records, StoredRecord const& record, BlockHashSpan hashes,
                         size_t blocks) {
    if (static_cast<size_t>(record.key.fullBlockCount) != blocks) return false;
    for (size_t i = 0; i < blocks; ++i)
        if (records.logicalHash(record, i) != hashes[i]) return false;
    return true;
}

}  // namespace

void validateReusePlanInput(char const* planner, BlockHashSpan hashes, int32_t n, int32_t pageSize) {
    if (pageSize <= 0) throw ContractError(std::string(planner) + ": pageSize must be positive");
    if (n < 0) throw ContractError(std::string(planner) + ": inputTokenCount is negative (" + std::to_string(n) + ")");
    if (hashes.size > static_cast<size_t>(n / pageSize))
        throw ContractError(std::string(planner) + ": " + std::to_string(hashes.size) + " full-block hashes for " +
                            std::to_string(n) + " tokens (at most " + std::to_string(n / pageSize) + " at page size " +
                            std::to_string(pageSize) + ")");
    if (hashes.size > 0 && !hashes.data) throw ContractError(std::string(planner) + ": fullBlockHashes is null");
}

VanillaPrefixMatch matchVanillaPrefix(BlockHashSpan hashes, int32_t n, int32_t pageSize, BaseBlockIndex const& index,
                                      std::vector<PageId>& pages) {
    VanillaPrefixMatch match;
    if (n == 0) {
        match.kind = ReusePlanKind::kStandard;
        return match;
    }
    int32_t const total = ceilDiv(n, pageSize);
    match.matchedBlocks = static_cast<int32_t>(index.lookupPrefixInto(hashes.data, hashes.size, pages));
    match.boundBlocks = match.matchedBlocks;
    if (n % pageSize == 0 && match.matchedBlocks == total) {
        match.boundBlocks = match.matchedBlocks - 1;  // recompute the last page so the last token's logits exist
        pages.pop_back();
        match.kind = ReusePlanKind::kFullInputRewind;
    } else if (match.matchedBlocks > 0) {
        match.kind = ReusePlanKind::kStandard;
    }
    return match;
}

char const* toString(ReusePlanKind kind) noexcept {
    switch (kind) {
        case ReusePlanKind::kStandard: return "standard";
        case ReusePlanKind::kNoReusablePrefix: return "no reusable prefix";
        case ReusePlanKind::kFullInputRewind: return "full-input rewind";
    }
    return "unknown";
}

char const* toString(ReusePlanMode mode) noexcept {
    switch (mode) {
        case ReusePlanMode::kVanilla: return "vanilla";
        case ReusePlanMode::kHybrid: return "hybrid";
        case ReusePlanMode::kSpec: return "spec";
        case ReusePlanMode::kHybridMtp: return "hybrid-mtp";
    }
    return "unknown";
}

ReusePlan makeVanillaReusePlan(BlockHashSpan hashes, int32_t n, int32_t pageSize, BaseBlockIndex const& index,
                               ContextCacheLookupPolicy lookupPolicy) {
    validateCommon("makeVanillaReusePlan", hashes, n, pageSize);
    ReusePlan plan = coldPlan(ReusePlanMode::kVanilla, n, pageSize, true, false);
    if (n == 0 || lookupPolicy == ContextCacheLookupPolicy::kBypass) return plan;

    int32_t const total = ceilDiv(n, pageSize);
    VanillaPrefixMatch const match = matchVanillaPrefix(hashes, n, pageSize, index, plan.basePageBindings);
    int32_t const matched = match.matchedBlocks;
    int32_t const bound = match.boundBlocks;
    plan.kind = match.kind;
    plan.matchedTokenLength = matched * pageSize;
    plan.reuseTokenLength = bound * pageSize;
    plan.matchedBlockHashes.assign(hashes.begin(), hashes.begin() + bound);
    plan.demand.baseKvPages = total - bound;
    return plan;
}

ReusePlan makeHybridReusePlan(std::vector<HybridCheckpointCandidate> const& candidates, BlockHashSpan hashes, int32_t n,
                              int32_t pageSize, bool hasAttention, CacheRecordStore const& records,
                              ContextCacheLookupPolicy lookupPolicy) {
    validateCommon("makeHybridReusePlan", hashes, n, pageSize);
    ReusePlan plan = coldPlan(ReusePlanMode::kHybrid, n, pageSize, hasAttention, false);
    plan.hybridHasAttention = hasAttention;
    if (n == 0 || lookupPolicy == ContextCacheLookupPolicy::kBypass) return plan;

    for (HybridCheckpointCandidate const* c : longestFirst(candidates)) {
        // A checkpoint must leave at least one token to compute; any other length is no candidate at all.
        if (c->exactLength <= 0 || c->exactLength >= n) continue;
        HybridCheckpointKey const key{c->exactPrefixDigest, c->exactLength};
        std::optional<RecordId> id = records.findHybrid(key);
        if (!id) continue;
        StoredRecord const& record = records.get(*id);
        size_t const fullBlocks = static_cast<size_t>(c->exactLength / pageSize);
        bool const midPage = c->exactLength % pageSize != 0;
        if (fullBlocks > hashes.size || !logicalPrefixEquals(records, record, hashes, fullBlocks)) continue;
        if (!record.recurrentSnapshotSlot) continue;
        if (record.partialKvSnapshotSlot.has_value() != (hasAttention && midPage)) continue;
        if (record.basePagePath.size() != (hasAttention ? fullBlocks : 0)) continue;

        plan.kind = ReusePlanKind::kStandard;
        plan.matchedTokenLength = plan.reuseTokenLength = c->exactLength;
        plan.matchedBlockHashes.assign(hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(fullBlocks));
        if (hasAttention) plan.basePageBindings = record.basePagePath;
        plan.hybridCheckpoint = key;
        plan.hybridRecord = *id;
        plan.recurrentSnapshotBinding = record.recurrentSnapshotSlot;
        plan.partialKvSnapshotBinding = record.partialKvSnapshotSlot;
        if (hasAttention) plan.demand.baseKvPages = ceilDiv(n, pageSize) - static_cast<int32_t>(fullBlocks);
        return plan;
    }
    return plan;
}

ReusePlan makeHybridMtpReusePlan(std::vector<HybridCheckpointCandidate> const& candidates, BlockHashSpan hashes,
                                 int32_t n, int32_t pageSize, CacheRecordStore const& records,
                                 ContextCacheLookupPolicy lookupPolicy) {
    validateCommon("makeHybridMtpReusePlan", hashes, n, pageSize);
    ReusePlan plan = coldPlan(ReusePlanMode::kHybridMtp, n, pageSize, true, true);
    plan.hybridHasAttention = true;
    if (n == 0 || lookupPolicy == ContextCacheLookupPolicy::kBypass) return plan;

    for (HybridCheckpointCandidate const* c : longestFirst(candidates)) {
        // E >= 1, and E < n: token E is the reuser's own (it produces the draft KV at E-1).
        if (c->exactLength < 1 || c->exactLength >= n) continue;
        HybridCheckpointKey const key{c->exactPrefixDigest, c->exactLength};
        std::optional<RecordId> id = records.findHybridMtp(key);
        if (!id) continue;
        StoredRecord const& record = records.get(*id);
        size_t const fullBlocks = static_cast<size_t>((c->exactLength - 1) / pageSize);  // boundary token private
        if (!record.isHybridMtp()) continue;
        if (fullBlocks > hashes.size || !logicalPrefixEquals(records, record, hashes, fullBlocks)) continue;
        if (!record.recurrentSnapshotSlot || !record.partialKvSnapshotSlot) continue;
        // Both pools complete through the same boundary: a base-only or draft-only path is no checkpoint.
        if (record.basePagePath.size() != fullBlocks || record.draftPagePath.size() != fullBlocks) continue;

        int32_t const bound = static_cast<int32_t>(fullBlocks);
        plan.kind = ReusePlanKind::kStandard;
        plan.matchedTokenLength = plan.reuseTokenLength = c->exactLength;
        plan.matchedBlockHashes.assign(hashes.begin(), hashes.begin() + bound);
        plan.basePageBindings = record.basePagePath;
        plan.draftPageBindings = record.draftPagePath;
        plan.hybridCheckpoint = key;
        plan.hybridRecord = *id;
        plan.recurrentSnapshotBinding = record.recurrentSnapshotSlot;
        plan.partialKvSnapshotBinding = record.partialKvSnapshotSlot;
        plan.demand.baseKvPages = plan.demand.draftKvPages = ceilDiv(n, pageSize) - bound;
        return plan;
    }
    return plan;
}

ReusePlan makeSpecReusePlan(BlockHashSpan hashes, int32_t n, int32_t pageSize, BaseBlockIndex const& baseIndex,
                            DraftPathIndex const& draftIndex, CacheRecordStore const& records,
                            ContextCacheLookupPolicy lookupPolicy) {
    validateCommon("makeSpecReusePlan", hashes, n, pageSize);
    ReusePlan plan = coldPlan(ReusePlanMode::kSpec, n, pageSize, true, true);
    if (n == 0 || lookupPolicy == ContextCacheLookupPolicy::kBypass) return plan;

    std::vector<PageId> basePages;
    int32_t const baseMatched = static_cast<int32_t>(baseIndex.lookupPrefixInto(hashes.data, hashes.size, basePages));
    std::optional<DraftPathMatch> match = draftIndex.lookupLongest(basePages, baseMatched);
    if (!match) return plan;  // base-only hits cannot be used: their draft KV cannot be reconstructed
    StoredRecord const& record = records.get(match->record);
    int32_t const paired = match->pathBlockCount;
    // The record's logical hashes must be hashes[0, paired). Its base pages are canonical (the store derives its
    // hashes from them) and basePages[i] is the canonical page of hashes[i] (paired <= baseMatched), so under
    // the index's hash <-> page bijection comparing the pages is comparing the hashes, without reading them.
    if (record.draftPagePath.size() < static_cast<size_t>(paired) ||
        record.basePagePath.size() < static_cast<size_t>(paired) ||
        !std::equal(basePages.begin(), basePages.begin() + paired, record.basePagePath.begin()))
        return plan;  // incoherent path (only possible with colliding hashes): treat as a miss

    int32_t const total = ceilDiv(n, pageSize);
    int32_t const bound = paired - 1;  // the boundary page is always replayed
    plan.specReplayMode = SpecReplayMode::kFullPage;
    plan.matchedTokenLength = paired * pageSize;
    plan.reuseTokenLength = bound * pageSize;
    if (paired > 1) plan.specReplayDependency = SpecReplayDependency{hashes[static_cast<size_t>(paired - 1)], paired};
    plan.basePageBindings.assign(basePages.begin(), basePages.begin() + bound);
    plan.draftPageBindings.assign(record.draftPagePath.begin(), record.draftPagePath.begin() + bound);
    plan.matchedBlockHashes.assign(hashes.begin(), hashes.begin() + bound);
    if (n % pageSize == 0 && paired == total) plan.kind = ReusePlanKind::kFullInputRewind;
    else plan.kind = bound > 0 ? ReusePlanKind::kStandard : ReusePlanKind::kNoReusablePrefix;
    if (bound > 0) plan.draftRecord = match->record;
    plan.demand.baseKvPages = plan.demand.draftKvPages = total - bound;
    return plan;
}

}  // namespace ctxcache
