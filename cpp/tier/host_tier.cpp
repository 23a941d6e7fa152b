// HostTier (bookkeeping): the manager's observer writes blocks into the index (reserve, then complete at once),
// extendHit pins the run after the device hit and releases it at once. Full contract:
// include/ctxcache/tier/host_tier.h.

#include "ctxcache/tier/host_tier.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::tier {

namespace {
HostTierConfig validated(HostTierConfig const& config) {
    if (config.capacityPages <= 0)
        throw ContractError("HostTier: capacityPages must be positive (got " + std::to_string(config.capacityPages) +
                            ")");
    if (config.writePolicy != HostWritePolicy::kWriteThrough && config.writePolicy != HostWritePolicy::kWriteBack)
        throw ContractError("HostTier: unknown write policy " + std::to_string(static_cast<int>(config.writePolicy)));
    return config;
}
}  // namespace

HostTier::HostTier(ContextCacheManager& manager, HostTierConfig const& config)
    : manager_(&manager), config_(validated(config)), index_(config.capacityPages) {
    if (manager.baseBlockObserver() != nullptr)
        throw ContractError("HostTier: the manager already has a base block observer (another tier?)");
    manager.setBaseBlockObserver(this);
}

HostTier::~HostTier() {
    if (manager_->baseBlockObserver() == this) manager_->setBaseBlockObserver(nullptr);
}

int32_t HostTier::extendHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks) {
    if (hashes.size > 0 && !hashes.data) throw ContractError("HostTier::extendHit: hashes is null");
    if (inputTokenCount < 0 || deviceBlocks < 0)
        throw ContractError("HostTier::extendHit: negative inputTokenCount (" + std::to_string(inputTokenCount) +
                            ") or deviceBlocks (" + std::to_string(deviceBlocks) + ")");
    if (static_cast<size_t>(deviceBlocks) > hashes.size)
        throw ContractError("HostTier::extendHit: deviceBlocks (" + std::to_string(deviceBlocks) +
                            ") is more than the prompt's " + std::to_string(hashes.size) + " full blocks");
    ++metrics_.extendCalls;
    int64_t const page = manager_->pageSize();
    // Blocks whose end stays below the last token: (deviceBlocks + n) * page <= inputTokenCount - 1.
    int64_t const keepLast = inputTokenCount > 0 ? (int64_t{inputTokenCount} - 1) / page : 0;
    int64_t const room = std::min<int64_t>(keepLast, static_cast<int64_t>(hashes.size)) - deviceBlocks;
    if (room <= 0) return 0;
    scratch_.clear();
    size_t const n = index_.pinRun(hashes.data + deviceBlocks, static_cast<size_t>(room), scratch_);
    if (n == 0) return 0;
    index_.unpin(scratch_.data(), scratch_.size());  // bookkeeping: the load is done
    // The loaded blocks are on the device now (their pages are published with the request's prompt): the tier's
    // copies are duplicates, the first to go when it needs room (leaf first), until the device drops the blocks
    // again and a write-back makes them the most recent. Together, device and tier hold about as many distinct
    // blocks as one cache of their summed capacity.
    for (int32_t slot : scratch_) index_.demote(slot);
    ++metrics_.hitRequests;
    metrics_.loadedBlocks += n;
    return static_cast<int32_t>(n);
}

void HostTier::clear() { index_.clear(); }

void HostTier::write(BlockHash const* hashes, size_t count) noexcept {
    try {
        uint64_t const droppedBefore = index_.counters().droppedBlocks;
        size_t const reserved = index_.reserveWrites(hashes, count, scratch_);
        metrics_.droppedBlocks += index_.counters().droppedBlocks - droppedBefore;
        // Leaf first, so that a chain's root ends the most recent and is dropped last (a block is of no use without
        // the blocks before it). A block the tier already holds is not copied again; it becomes the most recent
        // as a written one would (write-back: the device just dropped it, so the tier's copy is the only one).
        size_t held = 0;
        for (size_t i = count; i-- > 0;) {
            if (scratch_[i] != HostTierIndex::kNoSlot) {
                index_.completeWrites(&scratch_[i], 1);  // bookkeeping: the copy is done
            } else if (int32_t const slot = index_.find(hashes[i]); slot != HostTierIndex::kNoSlot) {
                ++held;
                index_.touch(slot);
            }
        }
        metrics_.writtenBlocks += reserved;
        metrics_.skippedWrites += held;
        metrics_.refusedWrites += count - reserved - held;
    } catch (...) {
        // Out of memory for the index: the blocks are not written (reuse lost, nothing inconsistent: the index's
        // calls are all-or-nothing).
        metrics_.refusedWrites += count;
    }
}

void HostTier::blocksStored(BlockHash const* hashes, PageId const*, size_t count) noexcept {
    if (config_.writePolicy == HostWritePolicy::kWriteThrough) write(hashes, count);
}

void HostTier::blocksRemoved(BlockHash const* hashes, PageId const*, size_t count) noexcept {
    if (config_.writePolicy == HostWritePolicy::kWriteBack) write(hashes, count);
}

}  // namespace ctxcache::tier
