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
// Base-KV blocks of attention models; with EAGLE (storage with a draft pool), every slot also has room for a draft
// page: the slot of block j holds the record's draft page of block j - 1, which block j's hash determines (the
// draft KV at block j - 1's last position reads block j's first token; DraftRun), when the writer knew it. A
// speculative load (loadHit with the lease's draft pages) of a run of k slots from the device hit's end loads k - 1
// blocks, base pages from slots 0..k-2 and draft pages from slots 1..k-1, so its last slot stands where the device
// replays its boundary block (the spec rule: a hit at boundary n binds n - 1 draft pages). A write of an EAGLE run
// also writes the block before it (still on the device; base page only) when the tier lacks it, so that a device
// hit ending there can go on through the tier; a held slot without its draft page gets it from a later write.
// The bookkeeping mode beside a manager with draft pages models the same: one flag per slot stands for the header's
// `draft`, and extendSpecHit is the speculative load's rule without the copies (it leaves the recency loadHit
// leaves), so a bookkeeping replay predicts the bytes mode's loads exactly.
// Recurrent checkpoints (hybrid) stay on the device: hybrid acquires are not extended.
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
// A byte store (StoreLink, store_link.h) may sit under the tier in the bytes mode: every block written to a host
// slot is put there from its slot (pinned until the put completes), and an extension whose host run ends early asks
// the store for the next blocks, loads the objects it holds into fresh host slots (each checked, store_object.h:
// a rejected object is a miss, counted), and goes on through them. Store I/O runs on the tier's two StoreWorker
// threads (puts on one, existence and gets on the other: an ask never queues behind puts); their completions are
// applied by the writer at the tier's next call (pollStore, or any write or load). In a slot, the store object's
// 64-byte header sits right before the payload (at kStoreHeaderOffset), so an object is put from, and got into,
// one contiguous range of its slot.
//
// Errors:     a negative capacity (0 without a store), an unknown write policy, a manager that already has an
//             observer, a bookkeeping store with storage or a byte store without it (or both stores, or a byte
//             store without a key prefix or with a non-positive deadline), storage whose memory
//             cannot hold capacityPages slots of the pool, negative or inconsistent extension
//             arguments, extendHit with storage (loads must copy: loadHit) or loadHit without: ContractError,
//             nothing changed. A failed device copy is not an error: it costs reuse (counted).
// Cost:       an extension O(blocks looked up) (+ one batched copy and one synchronisation with storage); a write
//             O(1) per block (an index insert, perhaps dropping the least recent block; + one batched copy and one
//             synchronisation per publication or evicted record with storage). Memory: the index's.
// Threading:  single writer: the manager's thread, as the manager (the tier is called inside its calls); with a
//             byte store, one worker thread of the tier's own calls the store. Destroy the tier before its manager
//             (the destructor detaches it, flushes the queued store batches for at most one put deadline, then
//             stops the worker: bounded by the running batch's deadline).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ctxcache/base_block_observer.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/host_buffer.h"
#include "ctxcache/device/kv_host_copy.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/tier/bookkeeping_store.h"
#include "ctxcache/tier/host_tier_index.h"
#include "ctxcache/tier/store_link.h"
#include "ctxcache/tier/store_object.h"
#include "ctxcache/tier/store_worker.h"

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
    // A byte store under the tier (bytes mode only; storeLink.store null: none). Not with `store`.
    StoreLinkOptions storeLink;
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
    device::HostBuffer const* memory = nullptr;  // >= capacityPages * HostTier::slotBytes(*pool, draftPool)
    // Waits for the copies enqueued on the pool's backend; false when they failed. Empty: backend.synchronize().
    std::function<bool()> synchronize;
    device::KvPagePool* draftPool = nullptr;  // EAGLE: the draft pool (slots hold a draft page too); null: none
};

// The header at the start of every slot (bytes mode): which block the payload holds.
struct HostSlotHeader {
    static constexpr uint64_t kMagic = 0x31524549545f5843ull;  // "CX_TIER1"
    uint64_t magic = 0;
    uint64_t layoutDigest = 0;  // HostTier::layoutDigest of the pool the payload came from
    uint64_t hashHi = 0;
    uint64_t hashLo = 0;
    int64_t tokens = 0;  // the page's tokens (the pool's page size)
    // EAGLE: 1 when the slot's draft area holds the draft page of the block before this one (written whole).
    int64_t draft = 0;
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
    // Where a slot's store object begins: its StoreObjectHeader, then the payload (store_object.h).
    static constexpr size_t kStoreHeaderOffset = kHeaderBytes - sizeof(StoreObjectHeader);

    // Attaches to `manager` as its base block observer (ContractError when it has one). Without storage.pool: the
    // bookkeeping mode; with it, the bytes mode (storage.memory must hold capacityPages slots).
    HostTier(ContextCacheManager& manager, HostTierConfig const& config, HostTierStorage storage = {});
    // One slot of `pool`: the header area, then the payload (then the draft pool's page payload, with one),
    // rounded up to 256 bytes.
    static size_t slotBytes(device::KvPagePool const& pool, device::KvPagePool const* draftPool = nullptr);
    // A digest of the pool's page layout (page size, dtype, every layer's heads and head dim): a slot written from
    // one layout is never loaded into another.
    static uint64_t layoutDigest(device::KvPagePool const& pool);
    bool holdsBytes() const noexcept { return storage_.pool != nullptr; }
    bool holdsDrafts() const noexcept { return storage_.draftPool != nullptr; }
    // Whether the tier keeps, for each slot, whether it holds its draft page (an EAGLE deployment): with bytes, a
    // draft pool; in the bookkeeping mode, a manager with draft pages (each slot's flag stands for its draft area).
    bool modelsDrafts() const noexcept { return holdsDrafts() || bookkeepingDrafts_; }
    ~HostTier() override;
    HostTier(HostTier const&) = delete;
    HostTier& operator=(HostTier const&) = delete;

    HostTierConfig const& config() const noexcept { return config_; }
    HostTierIndex const& index() const noexcept { return index_; }
    HostTierMetrics const& metrics() const noexcept { return metrics_; }
    bool hasByteStore() const noexcept { return loadWorker_ != nullptr; }
    StoreLinkMetrics const& storeLinkMetrics() const noexcept { return storeMetrics_; }
    StoreWorkerCounters storeWorkerCounters() const;  // zeros without a byte store
    // Applies the byte store's finished batches (puts done, objects arrived); returns how many were applied. Every
    // write and load does this first; a runtime with idle time may call it between requests.
    size_t pollStore();
    // Batches sent to the byte store whose completions are not applied yet.
    size_t storeBatchesInFlight() const noexcept { return pendingStore_.size(); }

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
    // The bookkeeping mode's speculative extension (EAGLE: modelsDrafts()): a run of k slots from hashes
    // [deviceBlocks] whose every slot after the first holds its draft page loads k - 1 blocks (base pages from
    // slots 0..k-2, draft pages from slots 1..k-1), as loadHit's speculative load; the run may reach the prompt's
    // last full block. The store is not asked (it models base pages only). Returns the blocks loaded.
    int32_t extendSpecHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks);
    // The same run's length, changing nothing (no load, no recency, no metrics): what extendHit would load now.
    int32_t probeHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks) const;
    BookkeepingStore* store() const noexcept { return config_.store.get(); }
    // The bytes mode's extension: the same run, copied from its slots into leasePages[deviceBlocks ..] (the lease's
    // own fresh pages: leasePageCount must cover the run), and waited for. Returns the blocks loaded: the run up to
    // the first slot whose header does not name its block; 0 when a copy failed.
    // Speculative (leaseDraftPages non-null; a tier with a draft pool): a run of k slots whose every slot after the
    // first holds its draft page loads k - 1 blocks, base and draft pages (leaseDraftPages[deviceBlocks ..]); its
    // last slot (only its draft area is read) may be the prompt's last full block. The byte store is not asked
    // (its objects carry base pages only).
    int32_t loadHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks, PageId const* leasePages,
                    size_t leasePageCount, PageId const* leaseDraftPages = nullptr, size_t leaseDraftPageCount = 0);
    // Drops every block the tier holds.
    void clear();

    void checkInvariants() const { index_.checkInvariants(); }
    size_t memoryBytes() const noexcept {
        return sizeof(*this) + index_.memoryBytes() + scratch_.capacity() * 4 + slotDraft_.capacity();
    }

    void blocksStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root, BlockHash const* parent,
                      int32_t const* tokens, DraftRun const& draft) noexcept override;
    void blocksRemoved(BlockHash const* hashes, PageId const* pages, size_t count, bool root, BlockHash const* parent,
                       DraftRun const& draft) noexcept override;

private:
    // A run of a path's blocks (pages[i] holds hashes[i]; what precedes it: root / parent), with their tokens when
    // known (blockTokens[i]: pageSize tokens, or null) for the KV events. `onDevice`: the blocks stay canonical on
    // the device (write-through), so a router knows each of them whether or not the tier reports it.
    // `draft`: an EAGLE record's draft pages beside the run (with a draft pool: written with the blocks, and the
    // run's parent first when the tier lacks it).
    void write(BlockHash const* hashes, PageId const* pages, size_t count, bool root, BlockHash const* parent,
               bool onDevice, DraftRun const& draft) noexcept;
    // KV events (medium host) for what the tier now holds and dropped, when the manager's stream is on. The run's
    // slots are scratch_[offset ..] (a write that added the run's parent first reports the run only).
    void reportStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root, BlockHash const* parent,
                      bool onDevice, size_t offset);
    void reportDropped(std::vector<BlockHash> const& hashes, std::vector<int32_t> const& slots) noexcept;
    int32_t const* tokensOfPage(PageId page) const noexcept;
    void rememberTokens(PageId const* pages, size_t count, int32_t const* tokens) noexcept;
    void forgetTokens(PageId const* pages, size_t count) noexcept;
    // How many blocks after the device hit an extension may look at (the prompt's last token stays for the
    // prefill), after checking the arguments (ContractError naming `operation`). Speculative: how many slots (the
    // run's last slot gives only its draft area, so the slots may reach the prompt's last full block, never a hash
    // past the prompt's full blocks; the blocks loaded stay before it).
    size_t extensionRoom(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks, char const* operation,
                         bool speculative = false) const;
    void recordLoad(size_t loaded) noexcept;  // demotes scratch_'s first `loaded` slots, counts the hit
    // Unpins scratch_'s slots, then recordLoad; `fromStore` of the loaded blocks came from the byte store.
    void finishLoad(size_t loaded, size_t fromStore = 0) noexcept;
    bool synchronize() noexcept;
    HostSlotHeader* header(int32_t slot) const noexcept;
    device::HostSlotLayout layout() const noexcept;
    device::HostSlotLayout draftLayout() const noexcept;  // the draft payload's place in the slots

    // The byte store's traffic (cpp/tier/host_tier_store.cpp).
    struct PendingStoreBatch {
        StoreOp op = StoreOp::kExist;
        std::vector<BlockHash> hashes;
        std::vector<int32_t> slots;  // kPut: the pinned slots; kGet: the reserved (writing) ones
        bool waited = false;         // an extension waits for it (its arrivals count toward that extension)
    };
    struct BlockHashHasher {
        size_t operator()(BlockHash const& h) const noexcept { return static_cast<size_t>(h.hi ^ (h.lo * 31)); }
    };
    unsigned char* slotAddress(int32_t slot) const noexcept;
    // Puts the blocks hashes[i] just written to slots[i] (kNoSlot: skipped) that the store is not known to hold.
    void putToStore(BlockHash const* hashes, int32_t const* slots, size_t count) noexcept;
    // Asks the store for the leading run of hashes[0..count) not held here nor negatively cached (an existence
    // batch; its answer starts the get), by the ask rule; returns its ticket, or 0 when nothing was asked.
    uint64_t askStore(BlockHash const* hashes, size_t count, StoreDeadline deadline) noexcept;
    // Applies one finished batch; returns the ticket of a get it started (an existence answer's), else 0.
    uint64_t applyStore(StoreCompletion&& done) noexcept;
    // kWait: waits for the ask `ticket` and the get it starts, no later than `until`.
    void waitForStore(uint64_t ticket, StoreClock::time_point until) noexcept;
    bool negativelyCached(BlockHash const& hash, StoreClock::time_point now) noexcept;
    void rememberFailed(BlockHash const& hash, StoreClock::time_point now) noexcept;
    void rememberHeld(BlockHash const& hash) noexcept;

    ContextCacheManager* manager_;
    HostTierConfig config_;
    HostTierIndex index_;
    HostTierMetrics metrics_;
    HostTierStorage storage_;
    size_t slotBytes_ = 0;
    size_t payloadBytes_ = 0;       // the base pool's payload (what the byte store's objects carry)
    size_t draftPayloadBytes_ = 0;  // the draft pool's, after it in every slot (0: no draft pool)
    uint64_t layoutDigest_ = 0;
    std::vector<int32_t> scratch_;  // slots of the running write or load (capacity kept)
    std::vector<int32_t> heldScratch_;  // the running write's blocks the tier already held (their slots)
    std::vector<int32_t> copySlots_, copyPages_;  // the running copy's pairs (capacity kept)
    std::vector<int32_t> draftSlots_, draftPages_;  // ... and its draft pages' (EAGLE)
    // An EAGLE write's entries (the run, perhaps after its parent): hashes, base pages, and the draft page of the
    // block before each (-1: unknown).
    std::vector<BlockHash> entryHashes_;
    std::vector<PageId> entryPages_, entryDraft_;
    // KV events (only while the manager's stream is on): each device page's tokens since its block was published
    // (a write-back needs them when the device drops the block), whether each slot's block was reported, and the
    // running call's scratch.
    std::vector<int32_t> pageTokens_;
    std::vector<uint8_t> pageKnown_;
    std::vector<uint8_t> reported_;
    // The bookkeeping mode of an EAGLE deployment: slotDraft_[slot] = 1 when the slot's block was written (or
    // later rewritten) with the draft page of the block before it (the bytes mode keeps this in the header).
    bool bookkeepingDrafts_ = false;
    std::vector<uint8_t> slotDraft_;
    std::vector<BlockHash> droppedHashes_, eventHashes_;
    std::vector<int32_t> droppedSlots_, eventTokens_;
    // The byte store: batches in flight by ticket, the negative cache (key -> until when it is not asked), the keys
    // the store is known to hold (not put again), the counters, and the worker (last: stopped first).
    std::unordered_map<uint64_t, PendingStoreBatch> pendingStore_;
    std::unordered_map<BlockHash, StoreClock::time_point, BlockHashHasher> negative_;
    std::unordered_set<BlockHash, BlockHashHasher> knownHeld_;
    StoreLinkMetrics storeMetrics_;
    std::vector<BlockHash> arrived_;  // the blocks the waited-for get validated (kWait's extension counts them)
    // Two workers, so that a request's ask never queues behind put batches (a slow or stalled store's puts would
    // otherwise cost every ask its whole deadline): puts on putWorker_ (even tickets), existence and gets on
    // loadWorker_ (odd tickets); each has its own breaker.
    std::unique_ptr<StoreWorker> putWorker_, loadWorker_;
    StoreWorker& workerOf(uint64_t ticket) const noexcept { return ticket % 2 == 0 ? *putWorker_ : *loadWorker_; }
};

}  // namespace ctxcache::tier
