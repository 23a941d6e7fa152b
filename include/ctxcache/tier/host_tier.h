// HostTier: a host-memory tier beside one ContextCacheManager, so that a block the device evicted comes back as a
// copy instead of a recomputation (issue 26). It observes the manager's canonical base index (BaseBlockObserver):
// with write-back (the default), every block eviction removes from the device is written to the tier; with
// write-through, every block a publication makes canonical is. An acquire's device hit is then extended by the
// tier: the blocks after the device's longest chain that the tier holds, in order, are loaded into the lease's own
// fresh pages and the prefill starts after them; at publication those pages become canonical like any computed
// page.
//
// Two modes. Bookkeeping (no storage): no bytes; writes complete when they are made and extendHit's loads when
// they are taken (a bookkeeping-only replay sizes a tier on a trace). Bytes (a HostTierStorage): every slot holds
// one page of every layer of the base pool (device/kv_host_copy.h's page-first payload) after a header naming its
// block (hash, the pool's layout digest, tokens); writes copy the pages to their slots and wait for the copies
// before the blocks become visible; loadHit copies the run's slots into the lease's pages and waits, after checking
// each slot's header (a slot that does not name its block ends the run: a shorter hit, never wrong bytes); a copy
// or synchronisation that fails loses the writes (nothing becomes visible) or the whole load (no block loaded).
// Base-KV blocks of attention models only: draft pages and recurrent checkpoints stay on the device (an EAGLE
// lease needs its draft path, a hybrid one its checkpoint, and neither is in the tier), so speculative and hybrid
// acquires are not extended.
//
// Invariants: the index's (host_tier_index.h); a block is in the tier at most once (a block already held is not
//             written again); a resident slot's header names its block and its payload holds the bytes its page had
//             when the block was written; an extension never covers the prompt's last token (the prefill must
//             produce its logits: the rule of the device's full-input rewind) and never starts before the device
//             hit's end.
// A shared store (BookkeepingStore, issue 27) may sit under the tier in the bookkeeping mode: blocks a publication
// makes canonical are put there too (whatever the host's write policy: another replica can use a block as soon as
// it is computed), and an extension continues from the host's run with the store's (and back); a tier of 0 pages
// passes blocks to the store only.
//
// Errors:     a negative capacity (0 without a store), an unknown write policy, a manager that already has an
//             observer, a store with storage (bytes and a store: not in this version), storage whose memory
//             cannot hold capacityPages slots of the pool, negative or inconsistent extension
//             arguments, extendHit with storage (loads must copy: loadHit) or loadHit without: ContractError,
//             nothing changed. A failed device copy is not an error: it costs reuse (counted).
// Cost:       an extension O(blocks looked up) (+ one batched copy and one synchronisation with storage); a write
//             O(1) per block (an index insert, perhaps dropping the least recent block; + one batched copy and one
//             synchronisation per publication or evicted record with storage). Memory: the index's.
// Threading:  single writer: the manager's thread, as the manager (the tier is called inside its calls).
//             Destroy the tier before its manager (the destructor detaches it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ctxcache/base_block_observer.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/host_buffer.h"
#include "ctxcache/device/kv_host_copy.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/tier/bookkeeping_store.h"
#include "ctxcache/tier/host_tier_index.h"

namespace ctxcache::tier {

// Values are part of the C ABI (CTXC_HOST_WRITE_*).
enum class HostWritePolicy : uint8_t {
    kWriteThrough = 0,  // at publication: every newly canonical block
    kWriteBack = 1,     // at eviction: every block the device drops
};

struct HostTierConfig {
    int32_t capacityPages = 0;  // > 0; or 0 with a store: the blocks go to the store only
    HostWritePolicy writePolicy = HostWritePolicy::kWriteBack;
    // A store shared with other replicas' tiers (bookkeeping mode only, this version): every block a publication
    // makes canonical is put there (blocks it lacks), and an extension goes on from the host's run with the
    // store's. Shared ownership: the store lives while a tier or its creator holds it.
    std::shared_ptr<BookkeepingStore> store;
};

// What one extension loaded, by tier.
struct TierHit {
    int32_t hostBlocks = 0;
    int32_t storeBlocks = 0;
    int32_t total() const noexcept { return hostBlocks + storeBlocks; }
};

// Where a tier's bytes live (HostTier's bytes mode). All on one backend; they must outlive the tier.
struct HostTierStorage {
    device::KvPagePool* pool = nullptr;      // the base pool whose pages the tier copies (the manager's page ids)
    device::HostBuffer const* memory = nullptr;  // >= capacityPages * HostTier::slotBytes(*pool) bytes
    // Waits for the copies enqueued on the pool's backend; false when they failed. Empty: backend.synchronize().
    std::function<bool()> synchronize;
};

// The header at the start of every slot (bytes mode): which block the payload holds.
struct HostSlotHeader {
    static constexpr uint64_t kMagic = 0x31524549545f5843ull;  // "CX_TIER1"
    uint64_t magic = 0;
    uint64_t layoutDigest = 0;  // HostTier::layoutDigest of the pool the payload came from
    uint64_t hashHi = 0;
    uint64_t hashLo = 0;
    int64_t tokens = 0;  // the page's tokens (the pool's page size)
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
    uint64_t failedWrites = 0;    // blocks whose copy to the tier failed (not written)
    uint64_t storeLoadedBlocks = 0;   // blocks an extension took from the store (after the host's)
    uint64_t storeHitRequests = 0;    // extensions that took at least one block from the store
    uint64_t bytesToHost = 0;     // bytes copied device -> host (payloads)
    uint64_t bytesToDevice = 0;   // bytes copied host -> device (payloads)
};

class HostTier final : public BaseBlockObserver {
public:
    static constexpr size_t kHeaderBytes = 256;  // a slot's header area (the payload starts 256-byte aligned)

    // Attaches to `manager` as its base block observer (ContractError when it has one). Without storage.pool: the
    // bookkeeping mode; with it, the bytes mode (storage.memory must hold capacityPages slots).
    HostTier(ContextCacheManager& manager, HostTierConfig const& config, HostTierStorage storage = {});
    // One slot of `pool`: the header area, then the payload, rounded up to 256 bytes.
    static size_t slotBytes(device::KvPagePool const& pool);
    // A digest of the pool's page layout (page size, dtype, every layer's heads and head dim): a slot written from
    // one layout is never loaded into another.
    static uint64_t layoutDigest(device::KvPagePool const& pool);
    bool holdsBytes() const noexcept { return storage_.pool != nullptr; }
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
    // With a store, where the host's run ends the store's run goes on, then the host's again, and so on: the run
    // is as long as the two tiers together make it, the host asked first at each turn.
    int32_t extendHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks) {
        return extendHitByTier(hashes, inputTokenCount, deviceBlocks).total();
    }
    TierHit extendHitByTier(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks);
    // The same run's length, changing nothing (no load, no recency, no metrics): what extendHit would load now.
    int32_t probeHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks) const;
    BookkeepingStore* store() const noexcept { return config_.store.get(); }
    // The bytes mode's extension: the same run, copied from its slots into leasePages[deviceBlocks ..] (the lease's
    // own fresh pages: leasePageCount must cover the run), and waited for. Returns the blocks loaded: the run up to
    // the first slot whose header does not name its block; 0 when a copy failed.
    int32_t loadHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks, PageId const* leasePages,
                    size_t leasePageCount);
    // Drops every block the tier holds.
    void clear();

    void checkInvariants() const { index_.checkInvariants(); }
    size_t memoryBytes() const noexcept { return sizeof(*this) + index_.memoryBytes() + scratch_.capacity() * 4; }

    void blocksStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root, BlockHash const* parent,
                      int32_t const* tokens) noexcept override;
    void blocksRemoved(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                       BlockHash const* parent) noexcept override;

private:
    // A run of a path's blocks (pages[i] holds hashes[i]; what precedes it: root / parent), with their tokens when
    // known (blockTokens[i]: pageSize tokens, or null) for the KV events. `onDevice`: the blocks stay canonical on
    // the device (write-through), so a router knows each of them whether or not the tier reports it.
    void write(BlockHash const* hashes, PageId const* pages, size_t count, bool root, BlockHash const* parent,
               bool onDevice) noexcept;
    // KV events (medium host) for what the tier now holds and dropped, when the manager's stream is on.
    void reportStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root, BlockHash const* parent,
                      bool onDevice);
    void reportDropped(std::vector<BlockHash> const& hashes, std::vector<int32_t> const& slots) noexcept;
    int32_t const* tokensOfPage(PageId page) const noexcept;
    void rememberTokens(PageId const* pages, size_t count, int32_t const* tokens) noexcept;
    void forgetTokens(PageId const* pages, size_t count) noexcept;
    // How many blocks after the device hit an extension may look at (the prompt's last token stays for the
    // prefill), after checking the arguments (ContractError naming `operation`).
    size_t extensionRoom(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks,
                         char const* operation) const;
    void recordLoad(size_t loaded) noexcept;  // demotes scratch_'s first `loaded` slots, counts the hit
    void finishLoad(size_t loaded) noexcept;  // unpins scratch_'s slots, then recordLoad
    bool synchronize() noexcept;
    HostSlotHeader* header(int32_t slot) const noexcept;
    device::HostSlotLayout layout() const noexcept;

    ContextCacheManager* manager_;
    HostTierConfig config_;
    HostTierIndex index_;
    HostTierMetrics metrics_;
    HostTierStorage storage_;
    size_t slotBytes_ = 0;
    size_t payloadBytes_ = 0;
    uint64_t layoutDigest_ = 0;
    std::vector<int32_t> scratch_;  // slots of the running write or load (capacity kept)
    std::vector<int32_t> heldScratch_;  // the running write's blocks the tier already held (their slots)
    std::vector<int32_t> copySlots_, copyPages_;  // the running copy's pairs (capacity kept)
    // KV events (only while the manager's stream is on): each device page's tokens since its block was published
    // (a write-back needs them when the device drops the block), whether each slot's block was reported, and the
    // running call's scratch.
    std::vector<int32_t> pageTokens_;
    std::vector<uint8_t> pageKnown_;
    std::vector<uint8_t> reported_;
    std::vector<BlockHash> droppedHashes_, eventHashes_;
    std::vector<int32_t> droppedSlots_, eventTokens_;
};

}  // namespace ctxcache::tier
