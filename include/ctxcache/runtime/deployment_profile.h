// ContextCacheDeploymentProfile: what a deployment's model keeps per sequence, and so which reuse it can serve
// (reference (b) "Deployment", c.10, Appendix C). Validated once, when a coordinator is built over it.
//
//   attention only   paged KV; reuse of full blocks (vanilla) or of an EAGLE draft path (spec)
//   pure recurrent   recurrent snapshots only, no pages
//   hybrid           attention + recurrent: exact checkpoints (recurrent + partial-KV snapshot + base pages)
// A spec contract marks a speculative deployment: ownsPagedSpecState = the draft model has its own KV pool
// (EAGLE on attention only; an MTP head on a hybrid model: Hybrid+MTP); without it the drafter shares the target
// KV (MTP-style, no draft pool; attention only).
// Threading: plain values.
#pragma once

#include <cstdint>
#include <optional>

namespace ctxcache::runtime {

// Values are part of the C ABI (CTXC_MODEL_*).
enum class ContextCacheModelStateKind : uint8_t { kAttentionOnly = 0, kPureRecurrent = 1, kHybrid = 2 };

struct SpecReuseContract {
    bool ownsPagedSpecState = true;      // EAGLE: a draft KV pool of its own
    int32_t futureDependencyTokens = 1;  // draft state at p depends on token p + this
};

struct ContextCacheDeploymentProfile {
    ContextCacheModelStateKind baseStateKind = ContextCacheModelStateKind::kAttentionOnly;
    std::optional<SpecReuseContract> specReuseContract;

    bool hasAttention() const noexcept { return baseStateKind != ContextCacheModelStateKind::kPureRecurrent; }
    bool isHybrid() const noexcept { return baseStateKind == ContextCacheModelStateKind::kHybrid; }
    bool isPureRecurrent() const noexcept { return baseStateKind == ContextCacheModelStateKind::kPureRecurrent; }
    bool usesCheckpointReuse() const noexcept { return isHybrid() || isPureRecurrent(); }
    bool isSpeculative() const noexcept { return specReuseContract.has_value(); }
    bool ownsPagedSpecState() const noexcept { return specReuseContract && specReuseContract->ownsPagedSpecState; }
    // Hybrid + an MTP head with its own draft pool (the kHybridMtp plan).
    bool isHybridMtp() const noexcept { return isHybrid() && ownsPagedSpecState(); }
};

char const* toString(ContextCacheModelStateKind kind) noexcept;

}  // namespace ctxcache::runtime
