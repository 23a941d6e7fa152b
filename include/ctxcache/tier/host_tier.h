// HostTier: a host-memory tier beside one ContextCacheManager, so that a block the device evicted comes back as a
// copy instead of a recomputation (issue 26). It observes the manager's canonical base index (BaseBlockObserver):
// with write-through, every block a publication makes canonical is written to the tier; with write-back, every
// block eviction removes from the device is. An acquire's device hit is then extended by the tier: the blocks
// after the device's longest chain that the tier holds, in order, are loaded into the lease's own fresh pages and
// the prefill starts after them; at publication those pages become canonical like any computed page.
//
// This version keeps the tier's bookkeeping only (no bytes: bookkeeping-only replays size a tier on a trace);
// writes complete when they are made and loads when they are taken. Base-KV blocks of attention models only:
// draft pages and recurrent checkpoints stay on the device (an EAGLE lease needs its draft path, a hybrid one its
// checkpoint, and neither is in the tier), so speculative and hybrid acquires are not extended.
//
// Invariants: the index's (host_tier_index.h); a block is in the tier at most once (a block already held is not
//             written again); an extension never covers the prompt's last token (the prefill must produce its
//             logits: the rule of the device's full-input rewind) and never starts before the device hit's end.
// Errors:     a non-positive capacity, an unknown write policy, a manager that already has an observer,
//             negative or inconsistent extension arguments: ContractError, nothing changed.
// Cost:       an extension O(blocks looked up); a write O(1) per block (an index insert, perhaps dropping the
//             least recent block). Memory: the index's.
// Threading:  single writer: the manager's thread, as the manager (the tier is called inside its calls).
//             Destroy the tier before its manager (the destructor detaches it).
#pragma once

#include <cstdint>
#include <vector>

#include "ctxcache/base_block_observer.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/tier/host_tier_index.h"

namespace ctxcache::tier {

// Values are part of the C ABI (CTXC_HOST_WRITE_*).
enum class HostWritePolicy : uint8_t {
    kWriteThrough = 0,  // at publication: every newly canonical block
    kWriteBack = 1,     // at eviction: every block the device drops
};

struct HostTierConfig {
    int32_t capacityPages = 0;
    HostWritePolicy writePolicy = HostWritePolicy::kWriteBack;
};

struct HostTierMetrics {
    uint64_t extendCalls = 0;     // extensions asked for
    uint64_t hitRequests = 0;     // extensions that loaded at least one block
    uint64_t loadedBlocks = 0;    // blocks loaded from the tier
    uint64_t writtenBlocks = 0;   // blocks written to the tier
    uint64_t skippedWrites = 0;   // blocks offered that the tier already held (not written again)
    uint64_t refusedWrites = 0;   // blocks offered that found no slot (every slot pinned or being written)
    uint64_t droppedBlocks = 0;   // blocks the tier dropped to make room (its evictions)
    uint64_t failedLoads = 0;     // blocks whose load failed (the hit ended before them)
};

class HostTier final : public BaseBlockObserver {
public:
    // Attaches to `manager` as its base block observer (ContractError when it has one).
    HostTier(ContextCacheManager& manager, HostTierConfig const& config);
    ~HostTier() override;
    HostTier(HostTier const&) = delete;
    HostTier& operator=(HostTier const&) = delete;

    HostTierConfig const& config() const noexcept { return config_; }
    HostTierIndex const& index() const noexcept { return index_; }
    HostTierMetrics const& metrics() const noexcept { return metrics_; }

    // The blocks the tier adds to a device hit of `deviceBlocks` blocks of a prompt of inputTokenCount tokens
    // whose full blocks hash to `hashes`: the longest run hashes[deviceBlocks..] held by the tier, capped so that
    // the prefill keeps the prompt's last token. Bookkeeping: the load happens now (the blocks become the most
    // recent); returns the number of blocks loaded (0 when the tier holds none).
    int32_t extendHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks);
    // Drops every block the tier holds.
    void clear();

    void checkInvariants() const { index_.checkInvariants(); }
    size_t memoryBytes() const noexcept { return sizeof(*this) + index_.memoryBytes() + scratch_.capacity() * 4; }

    void blocksStored(BlockHash const* hashes, PageId const* pages, size_t count) noexcept override;
    void blocksRemoved(BlockHash const* hashes, PageId const* pages, size_t count) noexcept override;

private:
    void write(BlockHash const* hashes, size_t count) noexcept;

    ContextCacheManager* manager_;
    HostTierConfig config_;
    HostTierIndex index_;
    HostTierMetrics metrics_;
    std::vector<int32_t> scratch_;  // slots of the running write or load (capacity kept)
};

}  // namespace ctxcache::tier
