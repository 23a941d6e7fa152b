// HostTier: the manager's observer writes blocks into the index (reserve; with storage, write the headers, copy the
// pages to their slots and wait; then complete, or abort when the copy failed); an extension pins the run after the
// device hit (with storage: checks each slot's header, copies the slots into the lease's pages and waits), then
// unpins it and demotes the loaded blocks. Full contract: include/ctxcache/tier/host_tier.h.

#include "ctxcache/tier/host_tier.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::tier {

namespace {

HostTierConfig validated(HostTierConfig const& config) {
    if (config.capacityPages < 0 || (config.capacityPages == 0 && !config.store))
        throw ContractError("HostTier: capacityPages must be positive (0 only with a store; got " +
                            std::to_string(config.capacityPages) + ")");
    if (config.writePolicy != HostWritePolicy::kWriteThrough && config.writePolicy != HostWritePolicy::kWriteBack)
        throw ContractError("HostTier: unknown write policy " + std::to_string(static_cast<int>(config.writePolicy)));
    return config;
}

uint64_t fnv(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ull;
    }
    return h;
}

}  // namespace

size_t HostTier::slotBytes(device::KvPagePool const& pool, device::KvPagePool const* draftPool) {
    size_t const bytes =
        kHeaderBytes + device::hostSlotPayloadBytes(pool) + (draftPool ? device::hostSlotPayloadBytes(*draftPool) : 0);
    return (bytes + 255) / 256 * 256;
}

uint64_t HostTier::layoutDigest(device::KvPagePool const& pool) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, static_cast<uint64_t>(pool.pageSize()));
    h = fnv(h, static_cast<uint64_t>(pool.dtype()));
    h = fnv(h, static_cast<uint64_t>(pool.numLayers()));
    for (device::KvLayerShape const& l : pool.geometry().layers) {
        h = fnv(h, static_cast<uint64_t>(l.kvHeads));
        h = fnv(h, static_cast<uint64_t>(l.headDim));
    }
    return h;
}

HostTier::HostTier(ContextCacheManager& manager, HostTierConfig const& config, HostTierStorage storage)
    : manager_(&manager), config_(validated(config)), index_(config.capacityPages), storage_(std::move(storage)) {
    if (storage_.draftPool && !storage_.pool) throw ContractError("HostTier: a draft pool needs the base pool");
    if (storage_.pool && config_.store)
        throw ContractError("HostTier: a store is modelled in the bookkeeping mode only (no storage with a store)");
    if (storage_.pool) {
        device::KvPagePool const& pool = *storage_.pool;
        if (pool.pageSize() != manager.pageSize())
            throw ContractError("HostTier: the pool's page size (" + std::to_string(pool.pageSize()) +
                                ") is not the manager's (" + std::to_string(manager.pageSize()) + ")");
        if (storage_.draftPool && (storage_.draftPool->pageSize() != pool.pageSize() ||
                                   &storage_.draftPool->backend() != &pool.backend() || storage_.draftPool == &pool))
            throw ContractError(
                "HostTier: the draft pool must be another pool of the base pool's page size and backend");
        slotBytes_ = slotBytes(pool, storage_.draftPool);
        payloadBytes_ = device::hostSlotPayloadBytes(pool);
        draftPayloadBytes_ = storage_.draftPool ? device::hostSlotPayloadBytes(*storage_.draftPool) : 0;
        layoutDigest_ = layoutDigest(pool);
        size_t const needed = slotBytes_ * static_cast<size_t>(config_.capacityPages);
        if (!storage_.memory || storage_.memory->size() < needed)
            throw ContractError("HostTier: the storage's memory must hold " + std::to_string(config_.capacityPages) +
                                " slots of " + std::to_string(slotBytes_) + " bytes (" + std::to_string(needed) +
                                " bytes; it has " + std::to_string(storage_.memory ? storage_.memory->size() : 0) +
                                ")");
        if (storage_.memory->backend() != &pool.backend())
            throw ContractError("HostTier: the storage's memory belongs to another backend than its pool");
    }
    if (manager.baseBlockObserver() != nullptr)
        throw ContractError("HostTier: the manager already has a base block observer (another tier?)");
    bookkeepingDrafts_ = !storage_.pool && manager.pools().capacity(ResourceType::kDraftKvPage) > 0;
    if (StoreLinkOptions const& link = config_.storeLink; link.store) {
        if (!storage_.pool) throw ContractError("HostTier: a byte store needs the bytes mode (storage with a pool)");
        if (config_.store) throw ContractError("HostTier: a byte store and a bookkeeping store cannot both be given");
        if (link.keyPrefix.empty()) throw ContractError("HostTier: a byte store needs a key prefix (storeKeyPrefix)");
        if (link.loadDeadline.count() < 0 || link.putDeadline.count() <= 0 || link.negativeTtl.count() < 0 ||
            link.minAskBlocks < 1 || link.knownKeysLimit == 0 ||
            (link.policy != StoreLoadPolicy::kWait && link.policy != StoreLoadPolicy::kBestEffort))
            throw ContractError(
                "HostTier: a byte store's deadlines must be >= 0 (put: > 0), minAskBlocks >= 1, "
                "knownKeysLimit > 0 and the policy known");
        StoreWorkerOptions puts = link.worker, loads = link.worker;
        puts.firstTicket = 2;
        loads.firstTicket = 1;
        puts.ticketStride = loads.ticketStride = 2;
        putWorker_ = std::make_unique<StoreWorker>(*link.store, puts);
        loadWorker_ = std::make_unique<StoreWorker>(*link.store, loads);
    }
    manager.setBaseBlockObserver(this);
}

HostTier::~HostTier() {
    if (manager_->baseBlockObserver() == this) manager_->setBaseBlockObserver(nullptr);
    // The puts still queued are flushed, for at most one put deadline (another replica may reuse them); then the
    // worker stops (the running batch may still read or write the slots: bounded by its deadline).
    if (putWorker_) (void)putWorker_->drain(StoreClock::now() + config_.storeLink.putDeadline);
    loadWorker_.reset();
    putWorker_.reset();
}

device::HostSlotLayout HostTier::layout() const noexcept {
    return device::HostSlotLayout{storage_.memory, slotBytes_, kHeaderBytes, config_.capacityPages};
}

device::HostSlotLayout HostTier::draftLayout() const noexcept {
    return device::HostSlotLayout{storage_.memory, slotBytes_, kHeaderBytes + payloadBytes_, config_.capacityPages};
}

HostSlotHeader* HostTier::header(int32_t slot) const noexcept {
    return reinterpret_cast<HostSlotHeader*>(storage_.memory->bytes() + static_cast<size_t>(slot) * slotBytes_);
}

bool HostTier::synchronize() noexcept {
    try {
        if (storage_.synchronize) return storage_.synchronize();
        storage_.pool->backend().synchronize();
        return true;
    } catch (...) {
        return false;
    }
}

size_t HostTier::extensionRoom(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks,
                               char const* operation, bool speculative) const {
    if (hashes.size > 0 && !hashes.data)
        throw ContractError(std::string("HostTier::") + operation + ": hashes is null");
    if (inputTokenCount < 0 || deviceBlocks < 0)
        throw ContractError(std::string("HostTier::") + operation + ": negative inputTokenCount (" +
                            std::to_string(inputTokenCount) + ") or deviceBlocks (" + std::to_string(deviceBlocks) +
                            ")");
    if (static_cast<size_t>(deviceBlocks) > hashes.size)
        throw ContractError(std::string("HostTier::") + operation + ": deviceBlocks (" + std::to_string(deviceBlocks) +
                            ") is more than the prompt's " + std::to_string(hashes.size) + " full blocks");
    int64_t const page = manager_->pageSize();
    // Blocks whose end stays below the last token: (deviceBlocks + n) * page <= inputTokenCount - 1; speculative:
    // slots up to the last full block, (deviceBlocks + n) * page <= inputTokenCount.
    int64_t const last = speculative ? int64_t{inputTokenCount} / page
                                     : (inputTokenCount > 0 ? (int64_t{inputTokenCount} - 1) / page : 0);
    int64_t const room = std::min<int64_t>(last, static_cast<int64_t>(hashes.size)) - deviceBlocks;
    return room > 0 ? static_cast<size_t>(room) : 0;
}

void HostTier::recordLoad(size_t loaded) noexcept {
    // The loaded blocks are on the device now (their pages are published with the request's prompt): the tier's
    // copies are duplicates, the first to go when it needs room (leaf first), until the device drops the blocks
    // again and a write-back makes them the most recent. Together, device and tier hold about as many distinct
    // blocks as one cache of their summed capacity.
    for (size_t i = 0; i < loaded; ++i) index_.demote(scratch_[i]);
    if (loaded > 0) {
        ++metrics_.hitRequests;
        metrics_.loadedBlocks += loaded;
    }
}

void HostTier::finishLoad(size_t loaded, size_t fromStore) noexcept {
    try {
        index_.unpin(scratch_.data(), scratch_.size());  // every slot was pinned by loadHit's pinRun: cannot fail
    } catch (...) {
    }
    recordLoad(loaded);
    if (fromStore > 0) {  // those blocks came through the host from the store: counted as the store's
        metrics_.loadedBlocks -= fromStore;
        metrics_.storeLoadedBlocks += fromStore;
        ++metrics_.storeHitRequests;
    }
}

int32_t HostTier::probeHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks) const {
    size_t const room = extensionRoom(hashes, inputTokenCount, deviceBlocks, "probeHit");
    BlockHash const* const from = hashes.data + deviceBlocks;
    size_t n = index_.residentRun(from, room);
    while (config_.store && n < room) {  // the store's run from where the host's ends, then the host's again
        size_t const fromStore = config_.store->probe(from + n, room - n);
        if (fromStore == 0) break;
        n += fromStore;
        n += index_.residentRun(from + n, room - n);
    }
    return static_cast<int32_t>(n);
}

TierHit HostTier::extendHitByTier(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks) {
    if (holdsBytes())
        throw ContractError("HostTier::extendHit: this tier holds bytes; a load must copy them (loadHit)");
    size_t const room = extensionRoom(hashes, inputTokenCount, deviceBlocks, "extendHit");
    ++metrics_.extendCalls;
    scratch_.clear();
    // Bookkeeping: the load is done as it is taken, so the run needs no pins. Where the host's run ends the store's
    // goes on, then the host's again (the store's blocks are loaded into the lease's pages like the host's and not
    // kept in the host: the device holds them now, and a write-back gives them to the host when it drops them).
    BlockHash const* const from = hashes.data + deviceBlocks;
    size_t n = index_.residentRun(from, room, &scratch_);
    size_t fromStore = 0;
    while (config_.store && n < room) {
        size_t const got = config_.store->get(from + n, room - n);
        if (got == 0) break;
        n += got;
        fromStore += got;
        n += index_.residentRun(from + n, room - n, &scratch_);
    }
    recordLoad(scratch_.size());
    if (fromStore > 0) {
        ++metrics_.storeHitRequests;
        metrics_.storeLoadedBlocks += fromStore;
        if (scratch_.empty()) ++metrics_.hitRequests;
    }
    return TierHit{static_cast<int32_t>(scratch_.size()), static_cast<int32_t>(fromStore)};
}

int32_t HostTier::extendSpecHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks) {
    if (holdsBytes())
        throw ContractError("HostTier::extendSpecHit: this tier holds bytes; a load must copy them (loadHit)");
    if (!bookkeepingDrafts_)
        throw ContractError("HostTier::extendSpecHit: the manager has no draft pages (an EAGLE deployment's has)");
    size_t const room = extensionRoom(hashes, inputTokenCount, deviceBlocks, "extendSpecHit", true);
    ++metrics_.extendCalls;
    scratch_.clear();
    size_t const n = index_.residentRun(hashes.data + deviceBlocks, room, &scratch_);
    size_t k = n > 0 ? 1 : 0;
    while (k < n && slotDraft_[static_cast<size_t>(scratch_[k])] == 1) ++k;
    size_t const loaded = k > 0 ? k - 1 : 0;
    // The recency loadHit leaves: each slot of the run was read (pinned, then unpinned: the most recent, in order),
    // then the base slots [0, loaded), now on the device, are demoted.
    for (size_t i = loaded; i < n; ++i) index_.touch(scratch_[i]);
    recordLoad(loaded);
    return static_cast<int32_t>(loaded);
}

int32_t HostTier::loadHit(BlockHashSpan hashes, int32_t inputTokenCount, int32_t deviceBlocks, PageId const* leasePages,
                          size_t leasePageCount, PageId const* leaseDraftPages, size_t leaseDraftPageCount) {
    if (!holdsBytes()) throw ContractError("HostTier::loadHit: this tier keeps no bytes (extendHit)");
    if (leasePageCount > 0 && !leasePages) throw ContractError("HostTier::loadHit: leasePages is null");
    bool const spec = leaseDraftPages != nullptr;
    if (spec && !holdsDrafts())
        throw ContractError("HostTier::loadHit: draft pages given, but this tier holds no draft pages (no draft pool)");
    size_t const room = extensionRoom(hashes, inputTokenCount, deviceBlocks, "loadHit", spec);
    ++metrics_.extendCalls;
    pollStore();
    scratch_.clear();
    BlockHash const* const from = hashes.data + deviceBlocks;
    size_t n = room > 0 ? index_.pinRun(from, room, scratch_) : 0;
    // Where the host's run ends, the byte store's may go on (kWait: waited for until the deadline; the blocks it
    // validated are host blocks now, and the run goes on through them and any host blocks after them).
    size_t hostFirst = n, fromStore = 0;
    if (loadWorker_ && n < room && !spec) {
        StoreDeadline const until = StoreClock::now() + config_.storeLink.loadDeadline;
        uint64_t const ticket = askStore(from + n, room - n, until);
        if (ticket != 0 && config_.storeLink.policy == StoreLoadPolicy::kWait) {
            arrived_.clear();
            waitForStore(ticket, until);
            size_t const more = index_.pinRun(from + n, room - n, scratch_);
            while (fromStore < more && fromStore < arrived_.size() && arrived_[fromStore] == from[n + fromStore])
                ++fromStore;
            n += more;
        }
    }
    if (n == 0) return 0;
    size_t const first = static_cast<size_t>(deviceBlocks);
    if (leasePageCount < first + n || (spec && leaseDraftPageCount < first + n - 1)) {
        finishLoad(0);
        throw ContractError("HostTier::loadHit: the lease has " + std::to_string(leasePageCount) + " pages (" +
                            std::to_string(spec ? leaseDraftPageCount : 0) + " draft); the hit needs " +
                            std::to_string(first + n));
    }
    // A slot whose header does not name its block (it changed under us) ends the run there and is dropped; for a
    // speculative load, so does a slot after the first without its draft page, which is kept (its bytes are good).
    size_t good = 0;
    bool bad = false;
    for (; good < n; ++good) {
        HostSlotHeader const& h = *header(scratch_[good]);
        BlockHash const& want = hashes.data[first + good];
        if (h.magic != HostSlotHeader::kMagic || h.layoutDigest != layoutDigest_ || h.hashHi != want.hi ||
            h.hashLo != want.lo || h.tokens != manager_->pageSize()) {
            bad = true;
            break;
        }
        if (spec && good > 0 && h.draft != 1) break;
    }
    if (bad) metrics_.failedLoads += n - good;
    // The slot that failed its check is dropped once unpinned (its bytes are not trusted); the blocks after it
    // stay, unloaded.
    auto dropBad = [&]() noexcept {
        if (!bad) return;
        BlockHash const badHash = hashes.data[first + good];
        int32_t const slot = index_.find(badHash);
        if (slot == HostTierIndex::kNoSlot || !index_.invalidate(badHash)) return;
        try {
            droppedHashes_.assign(1, badHash);
            droppedSlots_.assign(1, slot);
        } catch (...) {
            return;
        }
        reportDropped(droppedHashes_, droppedSlots_);
    };
    // Speculative: base pages from slots [0, loaded), draft pages from slots [1, loaded] (slot i + 1's draft area
    // holds block i's draft page).
    size_t const loaded = spec ? (good > 0 ? good - 1 : 0) : good;
    if (loaded == 0) {
        finishLoad(0);
        dropBad();
        return 0;
    }
    bool ok = false;
    try {
        device::copyPagesFromHost(*storage_.pool, leasePages + first, scratch_.data(), layout(),
                                  static_cast<int32_t>(loaded));
        if (spec)
            device::copyPagesFromHost(*storage_.draftPool, leaseDraftPages + first, scratch_.data() + 1, draftLayout(),
                                      static_cast<int32_t>(loaded));
        ok = synchronize();
    } catch (...) {
        ok = false;
    }
    if (!ok) {
        metrics_.failedLoads += loaded;
        finishLoad(0);
        return 0;
    }
    metrics_.bytesToDevice += loaded * (payloadBytes_ + (spec ? draftPayloadBytes_ : 0));
    finishLoad(loaded, loaded > hostFirst ? std::min(loaded - hostFirst, fromStore) : 0);
    dropBad();
    return static_cast<int32_t>(loaded);
}

void HostTier::clear() {
    droppedHashes_.clear();
    droppedSlots_.clear();
    index_.clear(&droppedHashes_, &droppedSlots_);
    reportDropped(droppedHashes_, droppedSlots_);
}

int32_t const* HostTier::tokensOfPage(PageId page) const noexcept {
    size_t const p = static_cast<size_t>(page);
    if (page < 0 || p >= pageKnown_.size() || !pageKnown_[p]) return nullptr;
    return pageTokens_.data() + p * static_cast<size_t>(manager_->pageSize());
}

void HostTier::rememberTokens(PageId const* pages, size_t count, int32_t const* tokens) noexcept {
    size_t const page = static_cast<size_t>(manager_->pageSize());
    try {
        for (size_t i = 0; i < count; ++i) {
            if (pages[i] < 0) continue;
            size_t const p = static_cast<size_t>(pages[i]);
            if (p >= pageKnown_.size()) {
                size_t const grown = std::max(p + 1, pageKnown_.size() * 2);
                pageTokens_.resize(grown * page);
                pageKnown_.resize(grown, 0);
            }
            std::copy(tokens + i * page, tokens + (i + 1) * page,
                      pageTokens_.begin() + static_cast<std::ptrdiff_t>(p * page));
            pageKnown_[p] = 1;
        }
    } catch (...) {
        // Out of memory: those blocks' events are not reported (a router under-counts the tier, never over-counts).
    }
}

void HostTier::forgetTokens(PageId const* pages, size_t count) noexcept {
    for (size_t i = 0; i < count; ++i)
        if (pages[i] >= 0 && static_cast<size_t>(pages[i]) < pageKnown_.size())
            pageKnown_[static_cast<size_t>(pages[i])] = 0;
}

void HostTier::reportDropped(std::vector<BlockHash> const& hashes, std::vector<int32_t> const& slots) noexcept {
    eventHashes_.clear();
    for (size_t i = 0; i < hashes.size() && i < slots.size(); ++i) {
        size_t const slot = static_cast<size_t>(slots[i]);
        if (slot >= reported_.size() || !reported_[slot]) continue;
        reported_[slot] = 0;
        try {
            eventHashes_.push_back(hashes[i]);
        } catch (...) {
        }
    }
    if (!eventHashes_.empty()) manager_->reportTierRemoved(eventHashes_.data(), eventHashes_.size());
    eventHashes_.clear();
}

void HostTier::write(BlockHash const* runHashes, PageId const* runPages, size_t runCount, bool root,
                     BlockHash const* parent, bool onDevice, DraftRun const& draft) noexcept {
    try {
        pollStore();
        // EAGLE: each entry's slot takes the draft page of the block before it (entryDraft_[i]; -1: unknown), and
        // the run's parent goes first (base page only) when the tier lacks it, so that a device hit that ends there
        // can go on through the run.
        bool const drafts = modelsDrafts() && draft.pages != nullptr;
        size_t offset = 0;
        BlockHash const* hashes = runHashes;
        PageId const* pages = runPages;
        size_t count = runCount;
        if (drafts) {
            bool const withParent =
                parent != nullptr && draft.parentBase >= 0 && index_.find(*parent) == HostTierIndex::kNoSlot;
            offset = withParent ? 1 : 0;
            entryHashes_.clear();
            entryPages_.clear();
            entryDraft_.clear();
            if (withParent) {
                entryHashes_.push_back(*parent);
                entryPages_.push_back(draft.parentBase);
                entryDraft_.push_back(-1);
            }
            for (size_t i = 0; i < runCount; ++i) {
                entryHashes_.push_back(runHashes[i]);
                entryPages_.push_back(runPages[i]);
                entryDraft_.push_back(i > 0 ? draft.pages[i - 1] : parent ? draft.parentDraft : -1);
            }
            hashes = entryHashes_.data();
            pages = entryPages_.data();
            count = entryHashes_.size();
        }
        if (bookkeepingDrafts_) {  // room for the flags of the slots this write may take (before any is taken)
            size_t const slots = std::min(index_.usedSlots() + count, static_cast<size_t>(config_.capacityPages));
            if (slotDraft_.size() < slots) slotDraft_.resize(slots, 0);
        }
        uint64_t const droppedBefore = index_.counters().droppedBlocks;
        droppedHashes_.clear();
        droppedSlots_.clear();
        size_t const reserved =
            index_.reserveWrites(hashes, count, scratch_, &droppedHashes_, &droppedSlots_, &heldScratch_);
        metrics_.droppedBlocks += index_.counters().droppedBlocks - droppedBefore;
        reportDropped(droppedHashes_, droppedSlots_);
        size_t draftsWritten = 0;
        // A resident slot the tier holds without its draft page gets it now (its draft area is outside what a
        // store put reads, and no load is in flight across calls); its flag is set once the copy completes.
        size_t upgrades = 0;
        draftSlots_.clear();
        draftPages_.clear();
        if (drafts && holdsBytes()) {
            for (size_t i = 0; i < count; ++i) {
                int32_t const slot = heldScratch_[i];
                if (scratch_[i] != HostTierIndex::kNoSlot || entryDraft_[i] < 0 || !index_.holds(slot, hashes[i]) ||
                    index_.state(slot) != HostSlotState::kResident || header(slot)->draft == 1)
                    continue;
                draftSlots_.push_back(slot);
                draftPages_.push_back(entryDraft_[i]);
            }
            upgrades = draftSlots_.size();
        }
        if (bookkeepingDrafts_) {  // no bytes: a slot's flag stands for its draft area (the write is done now)
            for (size_t i = 0; i < count; ++i) {
                bool const withDraft = drafts && entryDraft_[i] >= 0;
                if (int32_t const slot = scratch_[i]; slot != HostTierIndex::kNoSlot)
                    slotDraft_[static_cast<size_t>(slot)] = withDraft ? 1 : 0;
                else if (int32_t const held = heldScratch_[i]; withDraft && index_.holds(held, hashes[i]))
                    slotDraft_[static_cast<size_t>(held)] = 1;  // a held slot gains its draft page
            }
        }
        if (holdsBytes() && reserved + upgrades > 0) {
            copySlots_.clear();
            copyPages_.clear();
            for (size_t i = 0; i < count; ++i) {
                if (scratch_[i] == HostTierIndex::kNoSlot) continue;
                HostSlotHeader h{HostSlotHeader::kMagic, layoutDigest_, hashes[i].hi, hashes[i].lo,
                                 manager_->pageSize()};
                if (drafts && entryDraft_[i] >= 0) {
                    h.draft = 1;
                    draftSlots_.push_back(scratch_[i]);
                    draftPages_.push_back(entryDraft_[i]);
                }
                *header(scratch_[i]) = h;
                copySlots_.push_back(scratch_[i]);
                copyPages_.push_back(pages[i]);
            }
            draftsWritten = draftSlots_.size();
            bool ok = false;
            try {
                if (!copySlots_.empty())
                    device::copyPagesToHost(*storage_.pool, copyPages_.data(), copySlots_.data(), layout(),
                                            static_cast<int32_t>(copySlots_.size()));
                if (!draftSlots_.empty())
                    device::copyPagesToHost(*storage_.draftPool, draftPages_.data(), draftSlots_.data(), draftLayout(),
                                            static_cast<int32_t>(draftSlots_.size()));
                ok = synchronize();
            } catch (...) {
                ok = false;
            }
            if (!ok) {  // nothing becomes visible: the slots go back, the blocks are not in the tier
                for (int32_t slot : copySlots_) *header(slot) = HostSlotHeader{};
                index_.abortWrites(copySlots_.data(), copySlots_.size());
                metrics_.failedWrites += reserved;
                return;
            }
            metrics_.bytesToHost += reserved * payloadBytes_ + draftsWritten * draftPayloadBytes_;
            for (size_t u = 0; u < upgrades; ++u) header(draftSlots_[u])->draft = 1;
        }
        // Leaf first, so that a chain's root ends the most recent and is dropped last (a block is of no use without
        // the blocks before it). A block the tier already holds is not copied again; it becomes the most recent
        // as a written one would (write-back: the device just dropped it, so the tier's copy is the only one).
        size_t held = 0;
        for (size_t i = count; i-- > 0;) {
            if (scratch_[i] != HostTierIndex::kNoSlot) {
                index_.completeWrites(&scratch_[i], 1);
            } else if (int32_t const slot = heldScratch_[i]; index_.holds(slot, hashes[i])) {
                ++held;  // (a held block this write's own reservations dropped is not held any more)
                index_.touch(slot);
            }
        }
        if (putWorker_ && reserved > 0) putToStore(hashes, scratch_.data(), count);
        metrics_.writtenBlocks += reserved;
        metrics_.skippedWrites += held;
        metrics_.refusedWrites += count - reserved - held;
        // The run only (a parent added first is on the device: a router knows it; it is not reported as the
        // tier's, so its drop is not either).
        if (manager_->kvEventsEnabled()) reportStored(runHashes, runPages, runCount, root, parent, onDevice, offset);
    } catch (...) {
        // Out of memory for the index or the events' scratch: the blocks not written (or not reported) cost reuse
        // (or a router's view of the tier), never a state the index does not check.
        metrics_.refusedWrites += runCount;
    }
}

void HostTier::reportStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                            BlockHash const* parent, bool onDevice, size_t offset) {
    // Runs of blocks just written whose tokens are known and whose predecessor a router knows (the path's root, a
    // block on the device, or one this tier reported): one BlockStored (medium host) per run, root-first.
    // One flag per slot ever used (grown with the index, never the capacity up front: a tier of 2^31 pages with
    // events on must not allocate 2 GiB for its first write; the capi fuzzer's reproducer in tests/fuzz/corpus).
    if (reported_.size() < index_.usedSlots()) reported_.resize(index_.usedSlots(), 0);
    size_t const page = static_cast<size_t>(manager_->pageSize());
    bool known = root || parent != nullptr;  // whether a router knows the block before j
    size_t runStart = 0;
    eventHashes_.clear();
    eventTokens_.clear();
    auto flush = [&] {
        if (eventHashes_.empty()) return;
        BlockHash const* before = runStart > 0 ? &hashes[runStart - 1] : (root ? nullptr : parent);
        manager_->reportTierStored(eventHashes_.data(), eventHashes_.size(), before, eventTokens_.data());
        eventHashes_.clear();
        eventTokens_.clear();
    };
    for (size_t j = 0; j < count; ++j) {
        int32_t const slot = scratch_[offset + j];
        int32_t const* tokens = tokensOfPage(pages[j]);
        if (slot != HostTierIndex::kNoSlot && tokens && known) {
            if (eventHashes_.empty()) runStart = j;
            eventHashes_.push_back(hashes[j]);
            eventTokens_.insert(eventTokens_.end(), tokens, tokens + page);
            reported_[static_cast<size_t>(slot)] = 1;
            continue;
        }
        flush();
        int32_t const held = slot == HostTierIndex::kNoSlot && index_.holds(heldScratch_[offset + j], hashes[j])
                                 ? heldScratch_[offset + j]
                                 : HostTierIndex::kNoSlot;
        known = onDevice || (held != HostTierIndex::kNoSlot && reported_[static_cast<size_t>(held)]);
    }
    flush();
}

void HostTier::blocksStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                            BlockHash const* parent, int32_t const* tokens, DraftRun const& draft) noexcept {
    bool const hostSlots = config_.capacityPages > 0;
    if (tokens && hostSlots && manager_->kvEventsEnabled()) rememberTokens(pages, count, tokens);
    if (hostSlots && config_.writePolicy == HostWritePolicy::kWriteThrough)
        write(hashes, pages, count, root, parent, true, draft);
    if (config_.store) {
        try {
            config_.store->put(hashes, count);
        } catch (...) {
            // Out of memory in the store: those blocks are not shared (reuse, never state).
        }
    }
}

void HostTier::blocksRemoved(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                             BlockHash const* parent, DraftRun const& draft) noexcept {
    if (config_.capacityPages > 0 && config_.writePolicy == HostWritePolicy::kWriteBack)
        write(hashes, pages, count, root, parent, false, draft);
    forgetTokens(pages, count);
}

}  // namespace ctxcache::tier
