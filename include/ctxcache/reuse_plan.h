// Reuse planning: what part of a prompt's state can come from the cache, which ids to bind, and what must still
// be allocated privately. Planners are pure functions of the indexes: no refs, no recency, no allocation of ids.
//
//   Vanilla  longest indexed base prefix (M blocks); a page-aligned input entirely cached rewinds one page
//            (kFullInputRewind) so the last token's logits are produced; a partial tail is always private.
//   Hybrid   the longest exact checkpoint whose record is complete (recurrent slot; partial-KV slot iff attention
//            and a mid-page length; floor(len/P) base pages with attention, none without) and whose logical
//            hashes equal the input's; reuse may end mid-page.
//   Spec     EAGLE: only a coherent draft path of ONE paired record counts (base-only hits are ignored); the
//            boundary page is always replayed (kFullPage) because its last draft slot depends on the next
//            block's first token, and a dependency {hash of block Pp, Pp} is recorded for publication.
//   HybridMtp a hybrid model drafting with a multi-token-prediction head. A checkpoint at exact length E >= 1
//            holds the recurrent state after E tokens, base KV [0, E) and draft KV [0, E-1): the draft KV at E-1
//            depends on token E, which belongs to whoever reuses the checkpoint (the boundary token stays
//            private). fb = floor((E-1)/P) pages are complete in BOTH pools and are bound; base [fb*P, E) and
//            the draft tokens of page fb live in the partial-KV slot, which every MTP checkpoint has (also when E
//            or E-1 is page-aligned). The longest candidate E < n whose record is an MTP checkpoint (a plain
//            hybrid record never hits here, nor an MTP record a hybrid plan) with the input's first fb hashes,
//            recurrent + partial slots and base AND draft paths of exactly fb pages wins: reuse = matched = E,
//            demand.base = demand.draft = ceil(n/P) - fb. A miss or bypass is cold in both pools.
//
// Common: totalInputPages = ceil(n/P); the hash list may not exceed floor(n/P) entries; `demand` covers only
// the pages still to allocate. An empty input (n == 0) plans nothing in every mode: kind kStandard, reuse 0,
// demand 0. A cold plan (bypass, or no usable hit) is kNoReusablePrefix with every input page in `demand`.
// Hybrid candidates of length <= 0 or >= n are skipped (never an error), so they cannot hide a valid shorter hit.
// Errors: negative n, too many hashes, pageSize <= 0: ContractError.
// Cost:   O(matched blocks + 1) index probes (hybrid: + candidates x checkpoint blocks).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ctxcache/base_block_index.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/cache_record.h"
#include "ctxcache/cache_record_store.h"
#include "ctxcache/draft_path_index.h"
#include "ctxcache/types.h"

namespace ctxcache {

enum class ContextCacheLookupPolicy : uint8_t { kUseCache = 0, kBypass = 1 };
enum class ReusePlanKind : uint8_t { kStandard = 0, kNoReusablePrefix = 1, kFullInputRewind = 2 };
// Values are the C ABI's CTXC_MODE_*; kHybridMtp is appended (the reference puts it before kSpec, but kSpec = 2
// was already ABI).
enum class ReusePlanMode : uint8_t { kVanilla = 0, kHybrid = 1, kSpec = 2, kHybridMtp = 3 };
enum class SpecReplayMode : uint8_t { kNone = 0, kFullPage = 1 };

struct HybridCheckpointCandidate {
    int32_t exactLength = 0;
    BlockHash exactPrefixDigest;
};

struct SpecReplayDependency {
    BlockHash terminalHash;
    int32_t pathBlockCount = 0;
};

struct ReusePlan {
    ReusePlanMode mode = ReusePlanMode::kVanilla;
    int32_t matchedTokenLength = 0;  // what the cache holds of this prompt (before any rewind or replay)
    int32_t reuseTokenLength = 0;    // what the request skips: its prefill starts here
    std::vector<BlockHash> matchedBlockHashes;  // hashes of the bound base pages, in order
    std::vector<PageId> basePageBindings;
    std::optional<RecordId> draftRecord;
    std::vector<PageId> draftPageBindings;
    std::optional<SpecReplayDependency> specReplayDependency;
    bool hybridHasAttention = false;  // always true for kHybridMtp (an MTP head drafts from attention KV)
    std::optional<HybridCheckpointKey> hybridCheckpoint;
    std::optional<RecordId> hybridRecord;
    std::optional<int32_t> recurrentSnapshotBinding;
    std::optional<int32_t> partialKvSnapshotBinding;
    ResourceDemand demand;
    ReusePlanKind kind = ReusePlanKind::kNoReusablePrefix;
    SpecReplayMode specReplayMode = SpecReplayMode::kNone;
};

ReusePlan makeVanillaReusePlan(BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount, int32_t pageSize,
                               BaseBlockIndex const& index,
                               ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache);

// The checks every planner starts with (n >= 0, pageSize > 0, at most floor(n / pageSize) hashes): ContractError
// naming `caller`.
void validateReusePlanInput(char const* caller, BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount,
                            int32_t pageSize);

// The vanilla rule alone, what makeVanillaReusePlan's lookup decides (ContextCacheManager::probeVanilla shares it,
// so a probe and the plan of the acquire after it cannot disagree): the longest indexed prefix (matchedBlocks),
// the pages bound (boundBlocks: one less when a page-aligned input is entirely cached, kFullInputRewind), those
// pages appended to `pages`. The caller has validated the input (validateReusePlanInput); n == 0 matches nothing
// (kStandard). Reads the index only. O(matched blocks + 1).
struct VanillaPrefixMatch {
    ReusePlanKind kind = ReusePlanKind::kNoReusablePrefix;
    int32_t matchedBlocks = 0;
    int32_t boundBlocks = 0;
};
VanillaPrefixMatch matchVanillaPrefix(BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount, int32_t pageSize,
                                      BaseBlockIndex const& index, std::vector<PageId>& pages);

ReusePlan makeHybridReusePlan(std::vector<HybridCheckpointCandidate> const& candidates,
                              BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount, int32_t pageSize,
                              bool hasAttention, CacheRecordStore const& records,
                              ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache);

ReusePlan makeHybridMtpReusePlan(std::vector<HybridCheckpointCandidate> const& candidates,
                                 BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount, int32_t pageSize,
                                 CacheRecordStore const& records,
                                 ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache);

ReusePlan makeSpecReusePlan(BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount, int32_t pageSize,
                            BaseBlockIndex const& baseIndex, DraftPathIndex const& draftIndex,
                            CacheRecordStore const& records,
                            ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache);

char const* toString(ReusePlanKind kind) noexcept;
char const* toString(ReusePlanMode mode) noexcept;

}  // namespace ctxcache
