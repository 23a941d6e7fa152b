// HostTierIndex: the bookkeeping of a host-memory KV tier: which block hash each host slot holds, which slots are
// being written, which are pinned by a load, and the least-recently-used order that decides what the tier drops
// when it needs room. Slots only; the bytes (and the copies that fill them) belong to the tier above (host_tier.h).
//
// A slot is free, writing (reserved for a block whose copy is in flight: indexed, so the block is not written
// twice, but invisible to lookups and never dropped) or resident (its block may be loaded). A resident slot is
// pinned while loads read it (a count); pinned slots are never dropped.
//
// Invariants: the hash -> slot map holds exactly the writing and resident slots, each under its slot's hash; the
//             LRU list holds exactly the resident slots with no pin, least recent first; the free list holds
//             exactly the free slots below the high-water mark (slots at and above it were never used); counts
//             (resident, writing, pinned) match the slots' states.
// Errors:     a negative capacity (0 is an index that holds nothing: every write is refused), a slot out of range
//             or in the wrong state for the call (completing a slot that is not writing, unpinning one that is not
//             pinned): ContractError, nothing changed (batch calls check every slot first). Metadata that cannot be
//             allocated: OutOfMemoryError, nothing changed.
// Cost:       lookup O(1) expected per block; pin, unpin, write, complete, abort, drop O(1) per slot; room is
//             made one least-recent slot at a time, O(1) each. A write's batch is pipelined: the index entries of
//             the blocks a few ahead and the slots and index entries of the victims a few ahead (the LRU list's
//             next ones) are prefetched, so a tier far larger than the CPU's caches does not wait on each. Memory:
//             32 bytes per slot and 16 to 32 of index (detail/slot_hash_index.h: 8-byte buckets at most half
//             full): for the first min(capacity, kEagerMetadataIds) slots at construction, as the manager's own
//             metadata (types.h; the slot array's pages written once, so filling it faults nothing, and the index
//             at its final size, so it never rehashes while it fills), then grown geometrically with use up to the
//             capacity: a tier of any capacity costs at most that much before it holds anything.
// Threading:  single writer, no internal locks (the manager's contract; the tier lives beside one manager).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/detail/huge_page_allocator.h"
#include "ctxcache/detail/slot_hash_index.h"

namespace ctxcache::tier {

// Values are part of the C ABI (ctxc_host_slot_state_t).
enum class HostSlotState : uint8_t { kFree = 0, kWriting = 1, kResident = 2 };

struct HostTierIndexCounters {
    uint64_t droppedBlocks = 0;  // resident blocks dropped to make room (the tier's evictions)
    uint64_t invalidatedBlocks = 0;  // resident blocks dropped by the caller (a failed load, clear())
};

class HostTierIndex {
public:
    static constexpr int32_t kNoSlot = -1;

    explicit HostTierIndex(int32_t capacitySlots);

    int32_t capacity() const noexcept { return capacity_; }
    size_t residentCount() const noexcept { return resident_; }
    size_t writingCount() const noexcept { return writing_; }
    size_t pinnedCount() const noexcept { return pinned_; }  // resident slots with at least one pin
    HostTierIndexCounters const& counters() const noexcept { return counters_; }
    // Slots ever used: every slot index this tier has handed out is below it (metadata grows with it).
    size_t usedSlots() const noexcept { return slots_.size(); }

    // The slot holding `hash` (resident or writing), or kNoSlot.
    int32_t find(BlockHash const& hash) const noexcept;
    HostSlotState state(int32_t slot) const;  // ContractError when out of range
    std::optional<BlockHash> hashOfSlot(int32_t slot) const;  // none for a free slot
    int32_t pins(int32_t slot) const;
    // Whether `slot` holds `hash` now (resident or writing); false for a slot out of range. O(1), no probe.
    bool holds(int32_t slot, BlockHash const& hash) const noexcept {
        return slot >= 0 && static_cast<size_t>(slot) < slots_.size() && at(slot).state != HostSlotState::kFree &&
               at(slot).hash == hash;
    }

    // The longest run hashes[0..n) of resident blocks; appends their slots to `slots` when given. No side effects.
    size_t residentRun(BlockHash const* hashes, size_t count, std::vector<int32_t>* slots = nullptr) const;
    // Pins the longest resident run of hashes[0..count) (each slot once more) and appends its slots; returns its
    // length. A pinned slot leaves the LRU list; strong guarantee (the slots vector's growth may throw first).
    size_t pinRun(BlockHash const* hashes, size_t count, std::vector<int32_t>& slots);
    // One pin fewer on each slot; a slot left without pins becomes the most recent. Every slot must be pinned
    // (checked first: ContractError, nothing changed); a slot listed twice loses two pins.
    void unpin(int32_t const* slots, size_t count);

    // Reserves a slot for each hash that is neither resident nor being written, in order, making room by dropping
    // the least recent unpinned resident blocks; stops at the first hash for which no slot can be had (every
    // slot pinned or writing). slots[i] is the reserved slot of hashes[i] or kNoSlot (skipped: already held, or
    // after the stop); returns the number reserved. Dropped blocks are appended to `dropped` (and the slots they
    // held to `droppedSlots`) when given. An allocation failure midway gives the slots reserved so far back (the
    // blocks dropped stay dropped) and throws.
    // held (when given): held[i] is the slot already holding hashes[i] (resident or writing), else kNoSlot.
    size_t reserveWrites(BlockHash const* hashes, size_t count, std::vector<int32_t>& slots,
                         std::vector<BlockHash>* dropped = nullptr, std::vector<int32_t>* droppedSlots = nullptr,
                         std::vector<int32_t>* held = nullptr);
    // Writing -> resident (most recent, in order): the blocks' copies completed. Every slot must be writing.
    void completeWrites(int32_t const* slots, size_t count);
    // Writing -> free, the hash unindexed: the copies failed or were abandoned. Every slot must be writing.
    void abortWrites(int32_t const* slots, size_t count);
    // A resident unpinned slot becomes the most recent (touch) or the least recent (demote: dropped next); other
    // slots are left as they are. O(1).
    void touch(int32_t slot);
    void demote(int32_t slot);
    // Drops a resident, unpinned block (a slot whose bytes can no longer be trusted). Returns whether one was.
    bool invalidate(BlockHash const& hash);
    // Drops every resident unpinned block; writing and pinned slots stay. Appends the dropped hashes when given.
    void clear(std::vector<BlockHash>* dropped = nullptr, std::vector<int32_t>* droppedSlots = nullptr);

    size_t memoryBytes() const noexcept;
    // Throws InvariantError describing the first violation found. O(slots ever used).
    void checkInvariants() const;

private:
    struct Slot {
        BlockHash hash{};
        int32_t prev = kNoSlot;  // LRU neighbours (resident, unpinned), or the free list's next in `next`
        int32_t next = kNoSlot;
        int32_t pins = 0;
        HostSlotState state = HostSlotState::kFree;
    };

    void checkSlot(int32_t slot, char const* operation) const;
    int32_t find(BlockHash const& hash, uint32_t fingerprint) const noexcept;  // the fingerprint already mixed
    Slot& at(int32_t slot) noexcept { return slots_[static_cast<size_t>(slot)]; }
    Slot const& at(int32_t slot) const noexcept { return slots_[static_cast<size_t>(slot)]; }
    void lruPushBack(int32_t slot) noexcept;
    void lruPushFront(int32_t slot) noexcept;
    void lruUnlink(int32_t slot) noexcept;
    // A free slot (the free list's, a never-used one, or the least recent resident one, dropped): kNoSlot when
    // none can be had. May grow slots_ (OutOfMemoryError before anything changed).
    int32_t takeSlot(std::vector<BlockHash>* dropped, std::vector<int32_t>* droppedSlots);
    void freeSlot(int32_t slot) noexcept;
    void markWriting(int32_t const* slots, size_t count, HostSlotState mark, char const* operation);

    int32_t capacity_ = 0;
    std::vector<Slot, detail::HugePageAllocator<Slot>> slots_;  // slots ever used: [0, slots_.size())
    detail::SlotHashIndex bySlotHash_;  // hash -> slot (writing or resident); the hashes live in slots_
    std::vector<uint32_t> fingerprints_;  // reserveWrites' scratch: each hash's, computed once per batch
    int32_t lruHead_ = kNoSlot;  // least recent
    int32_t lruTail_ = kNoSlot;
    int32_t freeHead_ = kNoSlot;
    size_t resident_ = 0;
    size_t writing_ = 0;
    size_t pinned_ = 0;
    HostTierIndexCounters counters_;
};

}  // namespace ctxcache::tier
