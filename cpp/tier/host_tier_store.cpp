// HostTier's byte store traffic (StoreLink, include/ctxcache/tier/store_link.h): puts from pinned host slots, an
// existence batch then a get batch into reserved host slots, and the completions applied by the writer (each
// object checked before its block becomes a host block). Full contract: include/ctxcache/tier/host_tier.h.

#include <algorithm>
#include <cstring>

#include "ctxcache/errors.h"
#include "ctxcache/tier/host_tier.h"

namespace ctxcache::tier {

unsigned char* HostTier::slotAddress(int32_t slot) const noexcept {
    return storage_.memory->bytes() + static_cast<size_t>(slot) * slotBytes_;
}

StoreWorkerCounters HostTier::storeWorkerCounters() const {
    if (!putWorker_) return StoreWorkerCounters{};
    StoreWorkerCounters both = putWorker_->counters();
    both += loadWorker_->counters();
    return both;
}

bool HostTier::negativelyCached(BlockHash const& hash, StoreClock::time_point now) noexcept {
    auto it = negative_.find(hash);
    if (it == negative_.end()) return false;
    if (now < it->second) return true;
    negative_.erase(it);
    return false;
}

void HostTier::rememberFailed(BlockHash const& hash, StoreClock::time_point now) noexcept {
    try {
        if (negative_.size() >= config_.storeLink.knownKeysLimit) negative_.clear();
        negative_[hash] = now + config_.storeLink.negativeTtl;
        knownHeld_.erase(hash);
    } catch (...) {
        // Out of memory: the key may be asked again (one more failed get), never a wrong byte.
    }
}

void HostTier::rememberHeld(BlockHash const& hash) noexcept {
    try {
        if (knownHeld_.size() >= config_.storeLink.knownKeysLimit) knownHeld_.clear();
        knownHeld_.insert(hash);
        negative_.erase(hash);
    } catch (...) {
        // Out of memory: the block may be put again (the store keeps its first value).
    }
}

size_t HostTier::pollStore() {
    if (!putWorker_) return 0;
    size_t applied = 0;
    for (StoreWorker* w : {putWorker_.get(), loadWorker_.get()}) {
        std::vector<StoreCompletion> done = w->poll();
        for (StoreCompletion& c : done) (void)applyStore(std::move(c));
        applied += done.size();
    }
    return applied;
}

void HostTier::putToStore(BlockHash const* hashes, int32_t const* slots, size_t count) noexcept {
    if (!putWorker_ || count == 0) return;
    PendingStoreBatch pending;
    pending.op = StoreOp::kPut;
    try {
        StoreBatch batch;
        batch.op = StoreOp::kPut;
        for (size_t i = 0; i < count; ++i) {
            if (slots[i] == HostTierIndex::kNoSlot) continue;
            if (knownHeld_.count(hashes[i])) {
                ++storeMetrics_.skippedPuts;
                continue;
            }
            pending.hashes.push_back(hashes[i]);
        }
        if (pending.hashes.empty()) return;
        size_t const n = pending.hashes.size();
        batch.keys.reserve(n);
        batch.data.reserve(n);
        batch.sizes.reserve(n);
        pending.slots.reserve(n);
        // The slots stay pinned (never dropped, never rewritten) until the store has read them. The blocks were
        // just completed, so each is resident: pinRun pins exactly its slot.
        size_t const objectBytes = sizeof(StoreObjectHeader) + payloadBytes_;
        for (BlockHash const& hash : pending.hashes) {
            if (index_.pinRun(&hash, 1, pending.slots) == 0)
                throw ContractError("HostTier: a put's block is not resident");
            unsigned char* object = slotAddress(pending.slots.back()) + kStoreHeaderOffset;
            StoreObjectHeader const h =
                encodeStoreObjectHeader(layoutDigest_, hash, manager_->pageSize(), object + sizeof(h), payloadBytes_);
            std::memcpy(object, &h, sizeof(h));
            batch.keys.push_back(storeKey(config_.storeLink.keyPrefix, hash));
            batch.data.push_back(object);
            batch.sizes.push_back(objectBytes);
        }
        batch.deadline = StoreClock::now() + config_.storeLink.putDeadline;
        uint64_t ticket = 0;
        if (putWorker_->submit(std::move(batch), &ticket) == StoreWorker::Submit::kOpen) {
            ++storeMetrics_.breakerRefusals;
            storeMetrics_.droppedPuts += pending.slots.size();
            index_.unpin(pending.slots.data(), pending.slots.size());
            return;
        }
        pendingStore_.emplace(ticket, std::move(pending));
    } catch (...) {
        // Out of memory: the puts are not sent (another replica recomputes those blocks); the pins go back.
        storeMetrics_.failedPuts += pending.hashes.size();
        try {
            index_.unpin(pending.slots.data(), pending.slots.size());  // exactly the slots pinned so far
        } catch (...) {
        }
    }
}

uint64_t HostTier::askStore(BlockHash const* hashes, size_t count, StoreDeadline deadline) noexcept {
    if (!loadWorker_ || count == 0) return 0;
    StoreClock::time_point const now = StoreClock::now();
    // The leading run that is neither held here (resident or being written: an earlier get fills it) nor
    // negatively cached.
    size_t k = 0;
    while (k < count && index_.find(hashes[k]) == HostTierIndex::kNoSlot && !negativelyCached(hashes[k], now)) ++k;
    if (k < count && index_.find(hashes[k]) == HostTierIndex::kNoSlot) ++storeMetrics_.negativeSkips;
    if (k < static_cast<size_t>(config_.storeLink.minAskBlocks)) return 0;
    try {
        PendingStoreBatch pending;
        pending.op = StoreOp::kExist;
        pending.hashes.assign(hashes, hashes + k);
        StoreBatch batch;
        batch.op = StoreOp::kExist;
        batch.keys.reserve(k);
        for (size_t i = 0; i < k; ++i) batch.keys.push_back(storeKey(config_.storeLink.keyPrefix, hashes[i]));
        batch.deadline = deadline;
        uint64_t ticket = 0;
        if (loadWorker_->submit(std::move(batch), &ticket) == StoreWorker::Submit::kOpen) {
            ++storeMetrics_.breakerRefusals;
            return 0;
        }
        storeMetrics_.askedBlocks += k;
        pending.waited = config_.storeLink.policy == StoreLoadPolicy::kWait;
        pendingStore_.emplace(ticket, std::move(pending));
        return ticket;
    } catch (...) {
        return 0;  // out of memory: not asked (a miss)
    }
}

uint64_t HostTier::applyStore(StoreCompletion&& done) noexcept {
    auto it = pendingStore_.find(done.ticket);
    if (it == pendingStore_.end()) return 0;
    PendingStoreBatch p = std::move(it->second);
    pendingStore_.erase(it);
    StoreClock::time_point const now = StoreClock::now();
    std::vector<int64_t> const& r = done.results;
    try {
        switch (p.op) {
            case StoreOp::kPut: {
                for (size_t i = 0; i < p.hashes.size(); ++i) {
                    if (r[i] >= 0) {
                        ++storeMetrics_.putBlocks;
                        rememberHeld(p.hashes[i]);
                    } else if (r[i] == kStoreFull) {
                        ++storeMetrics_.droppedPuts;
                    } else {
                        ++storeMetrics_.failedPuts;
                    }
                }
                index_.unpin(p.slots.data(), p.slots.size());
                return 0;
            }
            case StoreOp::kExist: {
                // The leading run the store holds is got into fresh host slots (reserved: invisible until each
                // object is checked); a block the host came to hold meanwhile is skipped.
                size_t k = 0;
                while (k < p.hashes.size() && r[k] == 1) ++k;
                storeMetrics_.heldBlocks += k;
                if (k == 0) return 0;
                uint64_t const droppedBefore = index_.counters().droppedBlocks;
                droppedHashes_.clear();
                droppedSlots_.clear();
                std::vector<int32_t> reserved;
                index_.reserveWrites(p.hashes.data(), k, reserved, &droppedHashes_, &droppedSlots_);
                metrics_.droppedBlocks += index_.counters().droppedBlocks - droppedBefore;
                reportDropped(droppedHashes_, droppedSlots_);
                PendingStoreBatch get;
                get.op = StoreOp::kGet;
                get.waited = p.waited;
                StoreBatch batch;
                batch.op = StoreOp::kGet;
                size_t const objectBytes = sizeof(StoreObjectHeader) + payloadBytes_;
                try {
                    for (size_t i = 0; i < k; ++i) {
                        if (reserved[i] == HostTierIndex::kNoSlot) continue;
                        get.hashes.push_back(p.hashes[i]);
                        get.slots.push_back(reserved[i]);
                        batch.keys.push_back(storeKey(config_.storeLink.keyPrefix, p.hashes[i]));
                        batch.buffers.push_back(slotAddress(reserved[i]) + kStoreHeaderOffset);
                        batch.capacities.push_back(objectBytes);
                    }
                } catch (...) {
                    std::vector<int32_t> all;
                    for (int32_t s : reserved)
                        if (s != HostTierIndex::kNoSlot) all.push_back(s);
                    index_.abortWrites(all.data(), all.size());
                    throw;
                }
                if (get.slots.empty()) return 0;
                batch.deadline = now + config_.storeLink.loadDeadline;
                uint64_t ticket = 0;
                if (loadWorker_->submit(std::move(batch), &ticket) == StoreWorker::Submit::kOpen) {
                    ++storeMetrics_.breakerRefusals;
                    index_.abortWrites(get.slots.data(), get.slots.size());
                    return 0;
                }
                pendingStore_.emplace(ticket, std::move(get));
                return ticket;
            }
            case StoreOp::kGet: {
                StoreObjectExpectation expect{layoutDigest_, {}, manager_->pageSize(), payloadBytes_};
                std::vector<int32_t> good, bad;
                good.reserve(p.slots.size());
                bad.reserve(p.slots.size());
                for (size_t i = 0; i < p.slots.size(); ++i) {
                    int32_t const slot = p.slots[i];
                    unsigned char* object = slotAddress(slot) + kStoreHeaderOffset;
                    if (r[i] < 0) {
                        ++storeMetrics_.failedLoads;
                        rememberFailed(p.hashes[i], now);
                        bad.push_back(slot);
                        continue;
                    }
                    expect.hash = p.hashes[i];
                    StoreObjectVerdict const v = checkStoreObject(object, static_cast<size_t>(r[i]), expect);
                    if (v != StoreObjectVerdict::kValid) {
                        ++storeMetrics_.rejectedLoads;
                        switch (v) {
                            case StoreObjectVerdict::kShort: ++storeMetrics_.rejectedShort; break;
                            case StoreObjectVerdict::kForeign: ++storeMetrics_.rejectedForeign; break;
                            case StoreObjectVerdict::kOtherLayout: ++storeMetrics_.rejectedOtherLayout; break;
                            case StoreObjectVerdict::kOtherBlock: ++storeMetrics_.rejectedOtherBlock; break;
                            case StoreObjectVerdict::kWrongLength: ++storeMetrics_.rejectedWrongLength; break;
                            default: ++storeMetrics_.rejectedCorrupt; break;
                        }
                        rememberFailed(p.hashes[i], now);
                        bad.push_back(slot);
                        continue;
                    }
                    *header(slot) = HostSlotHeader{HostSlotHeader::kMagic, layoutDigest_, p.hashes[i].hi,
                                                   p.hashes[i].lo, manager_->pageSize()};
                    ++storeMetrics_.loadedBlocks;
                    rememberHeld(p.hashes[i]);
                    good.push_back(slot);
                    if (p.waited) arrived_.push_back(p.hashes[i]);
                }
                for (int32_t slot : bad) *header(slot) = HostSlotHeader{};
                index_.abortWrites(bad.data(), bad.size());
                // Leaf first, as a write: the chain's first block ends the most recent.
                std::reverse(good.begin(), good.end());
                index_.completeWrites(good.data(), good.size());
                return 0;
            }
        }
    } catch (...) {
        // Out of memory applying a completion: its slots go back (a miss, never a block that was not checked).
        try {
            if (p.op == StoreOp::kPut) {
                index_.unpin(p.slots.data(), p.slots.size());
            } else if (p.op == StoreOp::kGet) {
                std::vector<int32_t> writing;
                for (int32_t s : p.slots)
                    if (s >= 0 && index_.state(s) == HostSlotState::kWriting) writing.push_back(s);
                index_.abortWrites(writing.data(), writing.size());
            }
        } catch (...) {
        }
    }
    return 0;
}

void HostTier::waitForStore(uint64_t ticket, StoreClock::time_point until) noexcept {
    StoreClock::time_point const start = StoreClock::now();
    while (ticket != 0) {
        std::optional<StoreCompletion> done = workerOf(ticket).wait(ticket, until);
        if (!done) {
            ++storeMetrics_.lateBatches;  // applied by a later call's poll
            break;
        }
        ticket = applyStore(std::move(*done));
    }
    storeMetrics_.waitMicros +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(StoreClock::now() - start).count());
}

}  // namespace ctxcache::tier
