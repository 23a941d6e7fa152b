// HostTierIndex: slots in one vector grown with use, a flat hash map from block hash to slot, an intrusive LRU list
// of the resident unpinned slots and a free list threaded through the free slots. Batch calls validate every slot
// before changing any. Full contract: include/ctxcache/tier/host_tier_index.h.

#include "ctxcache/tier/host_tier_index.h"

#include <algorithm>
#include <new>
#include <string>

#include "ctxcache/detail/prefetch.h"
#include "ctxcache/errors.h"
#include "ctxcache/types.h"

namespace ctxcache::tier {

namespace {
std::string str(int64_t v) { return std::to_string(v); }
[[maybe_unused]] char const* stateName(HostSlotState s) {
    switch (s) {
        case HostSlotState::kFree: return "free";
        case HostSlotState::kWriting: return "writing";
        case HostSlotState::kResident: return "resident";
    }
    return "?";
}
}  // namespace

HostTierIndex::HostTierIndex(int32_t capacitySlots) : capacity_(capacitySlots) {
    if (capacitySlots < 0)
        throw ContractError("HostTierIndex: capacity must not be negative (got " + str(capacitySlots) + " slots)");
    // The first min(capacity, kEagerMetadataIds) slots' metadata now, as the manager's own (types.h): the slot
    // array written once (so its pages are in memory: the writes that fill it fault nothing) and left empty, and
    // the index at its final size (no rehash while it fills). Beyond that, both grow geometrically with use.
    size_t const eager = static_cast<size_t>(std::min(capacitySlots, ctxcache::kEagerMetadataIds));
    try {
        slots_.resize(eager);
        slots_.clear();
        bySlotHash_.reserve(eager);
    } catch (std::bad_alloc const&) {
        throw OutOfMemoryError(describeAllocationFailure(
            "HostTierIndex: metadata for " + str(static_cast<int64_t>(eager)) + " slots", eager * (sizeof(Slot) + 32)));
    }
}

void HostTierIndex::checkSlot(int32_t slot, char const* operation) const {
    if (slot < 0 || static_cast<size_t>(slot) >= slots_.size())
        throw ContractError(std::string("HostTierIndex::") + operation + ": slot " + str(slot) +
                            " is out of range (slots in use: " + str(static_cast<int64_t>(slots_.size())) + ")");
}

int32_t HostTierIndex::find(BlockHash const& hash) const noexcept {
    return find(hash, detail::SlotHashIndex::fingerprint(hash));
}

int32_t HostTierIndex::find(BlockHash const& hash, uint32_t fingerprint) const noexcept {
    return bySlotHash_.find(hash, fingerprint, [this](int32_t slot) -> BlockHash const& { return at(slot).hash; });
}

HostSlotState HostTierIndex::state(int32_t slot) const {
    checkSlot(slot, "state");
    return at(slot).state;
}

std::optional<BlockHash> HostTierIndex::hashOfSlot(int32_t slot) const {
    checkSlot(slot, "hashOfSlot");
    if (at(slot).state == HostSlotState::kFree) return std::nullopt;
    return at(slot).hash;
}

int32_t HostTierIndex::pins(int32_t slot) const {
    checkSlot(slot, "pins");
    return at(slot).pins;
}

size_t HostTierIndex::residentRun(BlockHash const* hashes, size_t count, std::vector<int32_t>* slots) const {
    if (count > 0 && !hashes) throw ContractError("HostTierIndex::residentRun: hashes is null");
    size_t n = 0;
    constexpr size_t kAhead = 8;
    for (size_t i = 0; i < std::min(count, kAhead); ++i) bySlotHash_.prefetch(hashes[i]);
    for (; n < count; ++n) {
        if (n + kAhead < count) bySlotHash_.prefetch(hashes[n + kAhead]);
        int32_t const slot = find(hashes[n]);
        if (slot == kNoSlot || at(slot).state != HostSlotState::kResident) break;
        if (slots) slots->push_back(slot);
    }
    return n;
}

void HostTierIndex::lruPushBack(int32_t slot) noexcept {
    Slot& s = at(slot);
    s.prev = lruTail_;
    s.next = kNoSlot;
    if (lruTail_ != kNoSlot) at(lruTail_).next = slot;
    else lruHead_ = slot;
    lruTail_ = slot;
}

void HostTierIndex::lruPushFront(int32_t slot) noexcept {
    Slot& s = at(slot);
    s.prev = kNoSlot;
    s.next = lruHead_;
    if (lruHead_ != kNoSlot) at(lruHead_).prev = slot;
    else lruTail_ = slot;
    lruHead_ = slot;
}

void HostTierIndex::touch(int32_t slot) {
    checkSlot(slot, "touch");
    if (at(slot).state != HostSlotState::kResident || at(slot).pins > 0 || slot == lruTail_) return;
    lruUnlink(slot);
    lruPushBack(slot);
}

void HostTierIndex::demote(int32_t slot) {
    checkSlot(slot, "demote");
    if (at(slot).state != HostSlotState::kResident || at(slot).pins > 0 || slot == lruHead_) return;
    lruUnlink(slot);
    lruPushFront(slot);
}

void HostTierIndex::lruUnlink(int32_t slot) noexcept {
    Slot& s = at(slot);
    if (s.prev != kNoSlot) at(s.prev).next = s.next;
    else lruHead_ = s.next;
    if (s.next != kNoSlot) at(s.next).prev = s.prev;
    else lruTail_ = s.prev;
    s.prev = s.next = kNoSlot;
}

size_t HostTierIndex::pinRun(BlockHash const* hashes, size_t count, std::vector<int32_t>& slots) {
    size_t const before = slots.size();
    size_t const n = residentRun(hashes, count, nullptr);
    slots.reserve(before + n);  // the only step that may throw
    for (size_t i = 0; i < n; ++i) {
        int32_t const slot = find(hashes[i]);
        Slot& s = at(slot);
        if (s.pins == 0) {
            lruUnlink(slot);
            ++pinned_;
        }
        ++s.pins;
        slots.push_back(slot);
    }
    return n;
}

void HostTierIndex::unpin(int32_t const* slots, size_t count) {
    if (count > 0 && !slots) throw ContractError("HostTierIndex::unpin: slots is null");
    // One pass takes the pins (a slot listed k times loses k), undone if one is missing; a second moves the
    // slots left without pins to the LRU list.
    for (size_t i = 0; i < count; ++i) {
        bool const ok = slots[i] >= 0 && static_cast<size_t>(slots[i]) < slots_.size() && at(slots[i]).pins > 0;
        if (!ok) {
            for (size_t j = 0; j < i; ++j) ++at(slots[j]).pins;
            checkSlot(slots[i], "unpin");
            throw ContractError("HostTierIndex::unpin: slot " + str(slots[i]) +
                                " is not pinned (or not as often as it is listed); nothing unpinned");
        }
        --at(slots[i]).pins;
    }
    for (size_t i = 0; i < count; ++i) {
        int32_t const slot = slots[i];
        bool const listed = slot == lruHead_ || at(slot).prev != kNoSlot;
        if (at(slot).pins == 0 && !listed) {
            --pinned_;
            lruPushBack(slot);
        }
    }
}

int32_t HostTierIndex::takeSlot(std::vector<BlockHash>* dropped, std::vector<int32_t>* droppedSlots) {
    if (freeHead_ != kNoSlot) {
        int32_t const slot = freeHead_;
        freeHead_ = at(slot).next;
        at(slot).next = kNoSlot;
        return slot;
    }
    if (slots_.size() < static_cast<size_t>(capacity_)) {
        if (slots_.size() == slots_.capacity()) {
            size_t const grown =
                std::min(static_cast<size_t>(capacity_), std::max<size_t>(1024, slots_.capacity() * 2));
            try {
                slots_.reserve(grown);
            } catch (std::bad_alloc const&) {
                throw OutOfMemoryError(describeAllocationFailure(
                    "HostTierIndex: metadata for " + str(static_cast<int64_t>(grown)) + " slots",
                    grown * sizeof(Slot)));
            }
        }
        slots_.emplace_back();
        return static_cast<int32_t>(slots_.size() - 1);
    }
    if (lruHead_ == kNoSlot) return kNoSlot;  // every used slot is pinned or writing
    int32_t const victim = lruHead_;
    if (dropped) dropped->push_back(at(victim).hash);  // before any change: may throw
    if (droppedSlots) {
        try {
            droppedSlots->push_back(victim);
        } catch (...) {
            if (dropped) dropped->pop_back();
            throw;
        }
    }
    lruUnlink(victim);
    bySlotHash_.erase(at(victim).hash, victim);
    at(victim) = Slot{};
    --resident_;
    ++counters_.droppedBlocks;
    return victim;
}

void HostTierIndex::freeSlot(int32_t slot) noexcept {
    Slot& s = at(slot);
    s = Slot{};
    s.next = freeHead_;
    freeHead_ = slot;
}

size_t HostTierIndex::reserveWrites(BlockHash const* hashes, size_t count, std::vector<int32_t>& slots,
                                    std::vector<BlockHash>* dropped, std::vector<int32_t>* droppedSlots,
                                    std::vector<int32_t>* held) {
    if (count > 0 && !hashes) throw ContractError("HostTierIndex::reserveWrites: hashes is null");
    slots.assign(count, kNoSlot);
    if (held) held->assign(count, kNoSlot);
    // The map's room first (a rehash that fails changes nothing), then one slot per new block.
    size_t const room = std::min(bySlotHash_.size() + count, static_cast<size_t>(capacity_));
    try {
        bySlotHash_.reserve(room);
        fingerprints_.resize(count);  // scratch, its room kept between calls
    } catch (std::bad_alloc const&) {
        throw OutOfMemoryError(describeAllocationFailure(
            "HostTierIndex: the index for " + str(static_cast<int64_t>(room)) + " blocks", room * 4 * sizeof(int64_t)));
    }
    size_t reserved = 0;
    // A write is a few probes into a large map and a large slot array, so the batch is pipelined: the map's home
    // slots of the blocks kAhead ahead, and the victims to come (they leave the LRU list from its head, in order):
    // a cursor kVictimAhead victims ahead prefetches each one's slot, and a second one half as far ahead (whose
    // slot has arrived by then) its map entry, so that dropping a victim waits for neither. The cursors are hints:
    // a list that changes under them costs a useless prefetch, never a wrong answer (any slot index is in range).
    constexpr size_t kAhead = 8;
    constexpr size_t kVictimAhead = 16;
    for (size_t i = 0; i < count; ++i) fingerprints_[i] = detail::SlotHashIndex::fingerprint(hashes[i]);
    for (size_t i = 0; i < std::min(count, kAhead); ++i) bySlotHash_.prefetch(fingerprints_[i]);
    int32_t farVictim = lruHead_;  // slot prefetched
    int32_t nearVictim = lruHead_;  // slot arrived, map entry prefetched
    bool const evicting = slots_.size() == static_cast<size_t>(capacity_) && freeHead_ == kNoSlot;
    if (evicting && farVictim != kNoSlot) {
        // The first victims one after another (a few dependent loads once per batch), then one step per block.
        for (size_t k = 0; k < std::min(count, kVictimAhead) && at(farVictim).next != kNoSlot; ++k) {
            farVictim = at(farVictim).next;
            detail::prefetchForRead(&at(farVictim));
            if (k % 2 == 1) {
                nearVictim = at(nearVictim).next;
                bySlotHash_.prefetch(at(nearVictim).hash);
            }
        }
    }
    auto advanceVictims = [&] {
        if (farVictim == kNoSlot || nearVictim == kNoSlot) return;
        if (int32_t const next = at(farVictim).next; next != kNoSlot) {
            farVictim = next;
            detail::prefetchForRead(&at(farVictim));
        }
        if (int32_t const next = at(nearVictim).next; next != kNoSlot) {
            nearVictim = next;
            bySlotHash_.prefetch(at(nearVictim).hash);
        }
    };
    try {
        for (size_t i = 0; i < count; ++i) {
            if (i + kAhead < count) bySlotHash_.prefetch(fingerprints_[i + kAhead]);
            int32_t const existing = find(hashes[i], fingerprints_[i]);
            if (existing != kNoSlot) {  // resident, or being written
                if (held) (*held)[i] = existing;
                continue;
            }
            if (evicting) advanceVictims();
            int32_t const slot = takeSlot(dropped, droppedSlots);
            if (slot == kNoSlot) break;
            Slot& s = at(slot);
            s.hash = hashes[i];
            s.state = HostSlotState::kWriting;
            s.pins = 0;
            s.prev = s.next = kNoSlot;
            bySlotHash_.insert(fingerprints_[i], slot);  // room reserved above: cannot grow
            ++writing_;
            slots[i] = slot;
            ++reserved;
        }
    } catch (...) {  // the slots reserved so far go back; nothing else is undone (drops are drops)
        for (size_t k = 0; k < count; ++k)
            if (slots[k] != kNoSlot) {
                bySlotHash_.erase(hashes[k], slots[k]);
                freeSlot(slots[k]);
                --writing_;
                slots[k] = kNoSlot;
            }
        throw;
    }
    return reserved;
}

// Marks every slot (writing -> `mark`) after checking it, undoing the marks when one is not writing (or is listed
// twice: its first mark makes the second fail). ContractError naming `operation`, nothing changed.
void HostTierIndex::markWriting(int32_t const* slots, size_t count, HostSlotState mark, char const* operation) {
    if (count > 0 && !slots) throw ContractError(std::string("HostTierIndex::") + operation + ": slots is null");
    for (size_t i = 0; i < count; ++i) {
        bool const ok = slots[i] >= 0 && static_cast<size_t>(slots[i]) < slots_.size() &&
                        at(slots[i]).state == HostSlotState::kWriting;
        if (!ok) {
            for (size_t j = 0; j < i; ++j) at(slots[j]).state = HostSlotState::kWriting;
            checkSlot(slots[i], operation);
            throw ContractError(std::string("HostTierIndex::") + operation + ": slot " + str(slots[i]) +
                                " is not writing (or is listed twice); nothing changed");
        }
        at(slots[i]).state = mark;
    }
}

void HostTierIndex::completeWrites(int32_t const* slots, size_t count) {
    markWriting(slots, count, HostSlotState::kResident, "completeWrites");
    for (size_t i = 0; i < count; ++i) lruPushBack(slots[i]);
    writing_ -= count;
    resident_ += count;
}

void HostTierIndex::abortWrites(int32_t const* slots, size_t count) {
    markWriting(slots, count, HostSlotState::kFree, "abortWrites");
    for (size_t i = 0; i < count; ++i) {
        bySlotHash_.erase(at(slots[i]).hash, slots[i]);
        freeSlot(slots[i]);
    }
    writing_ -= count;
}

bool HostTierIndex::invalidate(BlockHash const& hash) {
    int32_t const slot = find(hash);
    if (slot == kNoSlot || at(slot).state != HostSlotState::kResident || at(slot).pins > 0) return false;
    lruUnlink(slot);
    bySlotHash_.erase(hash, slot);
    freeSlot(slot);
    --resident_;
    ++counters_.invalidatedBlocks;
    return true;
}

void HostTierIndex::clear(std::vector<BlockHash>* dropped, std::vector<int32_t>* droppedSlots) {
    if (dropped) dropped->reserve(dropped->size() + resident_ - pinned_);
    if (droppedSlots) droppedSlots->reserve(droppedSlots->size() + resident_ - pinned_);
    while (lruHead_ != kNoSlot) {
        int32_t const slot = lruHead_;
        if (dropped) dropped->push_back(at(slot).hash);
        if (droppedSlots) droppedSlots->push_back(slot);
        lruUnlink(slot);
        bySlotHash_.erase(at(slot).hash, slot);
        freeSlot(slot);
        --resident_;
        ++counters_.invalidatedBlocks;
    }
}

size_t HostTierIndex::memoryBytes() const noexcept {
    return sizeof(*this) + slots_.capacity() * sizeof(Slot) + bySlotHash_.memoryBytes() +
           fingerprints_.capacity() * sizeof(uint32_t);
}

void HostTierIndex::checkInvariants() const {
    auto fail = [](std::string const& what) { throw InvariantError("HostTierIndex: " + what); };
    if (slots_.size() > static_cast<size_t>(capacity_)) fail("more slots used than the capacity");
    size_t resident = 0, writing = 0, pinned = 0, free = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
        Slot const& s = slots_[i];
        int32_t const slot = static_cast<int32_t>(i);
        switch (s.state) {
            case HostSlotState::kFree:
                ++free;
                if (s.pins != 0) fail("free slot " + str(slot) + " is pinned");
                break;
            case HostSlotState::kWriting:
                ++writing;
                if (s.pins != 0) fail("writing slot " + str(slot) + " is pinned");
                break;
            case HostSlotState::kResident:
                ++resident;
                if (s.pins < 0) fail("slot " + str(slot) + " has a negative pin count");
                if (s.pins > 0) ++pinned;
                break;
        }
        if (s.state != HostSlotState::kFree && find(s.hash) != slot)
            fail("slot " + str(slot) + " is " + stateName(s.state) + " but its hash does not map to it");
    }
    if (resident != resident_ || writing != writing_ || pinned != pinned_)
        fail("counts disagree with the slots (resident " + str(static_cast<int64_t>(resident)) + " vs " +
             str(static_cast<int64_t>(resident_)) + ", writing " + str(static_cast<int64_t>(writing)) + " vs " +
             str(static_cast<int64_t>(writing_)) + ", pinned " + str(static_cast<int64_t>(pinned)) + " vs " +
             str(static_cast<int64_t>(pinned_)) + ")");
    if (bySlotHash_.size() != resident + writing) fail("the hash map holds other entries than the used slots");
    size_t lru = 0;
    int32_t prev = kNoSlot;
    for (int32_t slot = lruHead_; slot != kNoSlot; slot = at(slot).next) {
        if (slot < 0 || static_cast<size_t>(slot) >= slots_.size() || ++lru > slots_.size())
            fail("the LRU list is broken");
        Slot const& s = at(slot);
        if (s.state != HostSlotState::kResident || s.pins != 0)
            fail("slot " + str(slot) + " is on the LRU list but not resident and unpinned");
        if (s.prev != prev) fail("slot " + str(slot) + "'s LRU back link is wrong");
        prev = slot;
    }
    if (prev != lruTail_) fail("the LRU tail is wrong");
    if (lru != resident - pinned) fail("the LRU list does not hold every resident unpinned slot");
    size_t freeListed = 0;
    for (int32_t slot = freeHead_; slot != kNoSlot; slot = at(slot).next) {
        if (slot < 0 || static_cast<size_t>(slot) >= slots_.size() || ++freeListed > slots_.size())
            fail("the free list is broken");
        if (at(slot).state != HostSlotState::kFree) fail("slot " + str(slot) + " is on the free list but used");
    }
    if (freeListed != free) fail("the free list does not hold every free slot");
}

}  // namespace ctxcache::tier
