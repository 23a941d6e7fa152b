// BaseBlockIndex: the canonical base-KV page of every published block hash. Not an owner: no refcounts, no
// recency; the manager keeps a mapping only while its page holds at least one cache reference.
//
// Design: the hash of a mapped page lives once, in the page -> hash reverse array. The forward direction is an
// open-addressing table (linear probing, backward-shift deletion, no tombstones) of 8-byte slots {32-bit tag of
// the hash, page}: a probe compares tags and confirms a tag match against reverse[page], so a full 128-bit
// comparison decides every hit and a slot is a third of one holding the hash. The home slot is the tag's low bits,
// so deletion (and growth) re-derives homes from the slots alone. The load stays <= 1/2 (a probe run is short and
// an insert's miss rarely leaves its home cache line). The table and the reverse map are sized at construction
// for min(pageCapacity, kEagerMetadataIds) pages (a mapping per page at most): for a pool of up to that many
// pages insert never allocates and never rehashes. Beyond it they grow geometrically with use: the reverse map
// to cover the largest page inserted, the table doubling (one rehash) when a mapping would pass load 1/2, so
// memory follows the mappings and pages actually used, not the capacity.
//
// Invariants: forward (hash -> page) and reverse (page -> hash) are one bijection over the mapped entries; every
//             used slot sits in the probe run from its home with no empty slot in between; a slot's tag is
//             the tag of reverse[its page].
//             First committer wins: insert() of a present hash returns the existing page and changes nothing;
//             a mapped page is never re-mapped to another hash (only erasePage frees it for one).
// Errors:     a negative or out-of-range page, or (insert) a page already mapped to another hash: ContractError,
//             nothing changed. tryInsert reports that conflict instead of throwing. Growth that cannot be
//             allocated: OutOfMemoryError naming the bytes, nothing changed.
// Cost:       lookup/insert/erasePage O(1) expected (one probe run; a hit reads one reverse entry; an insert
//             that grows is amortised O(1)); lookupPrefix O(matched blocks + 1). Memory: 8 bytes per table slot
//             (between 2 and 4 slots per mapping, or per page of the eager part) plus 16 bytes and 1 bit per page
//             up to the largest page inserted (at least the eager part) for the reverse map.
// Threading:  single writer, no internal locks.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/detail/huge_page_allocator.h"
#include "ctxcache/detail/prefetch.h"
#include "ctxcache/types.h"

namespace ctxcache {

struct BaseLookupResult {
    std::vector<PageId> pageIds;
    std::vector<BlockHash> matchedHashes;
};

struct BaseInsertResult {
    PageId canonicalPage = kUnusedPageEntry;
    bool inserted = false;
};

class BaseBlockIndex {
public:
    // pageCapacity: the base pool's capacity; pages are ids in [0, pageCapacity).
    explicit BaseBlockIndex(int32_t pageCapacity);

    // Longest indexed prefix of `hashes`: stops at the first missing hash. No side effects.
    BaseLookupResult lookupPrefix(std::vector<BlockHash> const& hashes) const;
    // Same, appending pages only; returns the number matched.
    size_t lookupPrefixInto(BlockHash const* hashes, size_t count, std::vector<PageId>& pages) const;
    std::optional<PageId> lookup(BlockHash const& hash) const;
    // Whether `page` is some hash's canonical page (false for an out-of-range page). O(1), reads one bit.
    bool isMapped(PageId page) const noexcept {
        size_t const i = static_cast<uint32_t>(page);
        return i < covered_ && mapped_[i];
    }
    // Whether `page` is the canonical page of `hash` (false for an out-of-range page). O(1): the mapped bit and one
    // reverse entry, no probe (the forward table agrees by the bijection).
    bool isMappedTo(PageId page, BlockHash const& hash) const noexcept {
        return isMapped(page) && reverse_[static_cast<size_t>(page)] == hash;
    }
    // The hash `page` is mapped from, if any.
    std::optional<BlockHash> hashOfPage(PageId page) const;

    // First committer wins: a present hash returns its page (inserted = false); else proposedPage becomes its
    // canonical page. A proposedPage already mapped to another hash: ContractError, nothing changed.
    BaseInsertResult insert(BlockHash hash, PageId proposedPage);
    // insert without the throw for that conflict: nullopt when `hash` is absent and proposedPage is already the
    // canonical page of another hash (nothing changed). An out-of-range page still throws ContractError.
    std::optional<BaseInsertResult> tryInsert(BlockHash hash, PageId proposedPage);
    // A hint that `hash` is about to be looked up or inserted: starts loading its home slot. No effect on state.
    void prefetch(BlockHash const& hash) const noexcept { detail::prefetchForRead(&slots_[homeOf(tagOf(hash))]); }
    // Hints for erasing `page` soon (an eviction walks pages in order): prefetchReverse starts loading its reverse
    // entry; prefetchErase, issued once that entry has arrived, starts loading the home slot of the hash it holds.
    // An out-of-range page reads entry 0 instead, and an unmapped page's stale entry only wastes the hint.
    void prefetchReverse(PageId page) const noexcept { detail::prefetchForRead(reverse_.data() + clampedPage(page)); }
    void prefetchErase(PageId page) const noexcept {
        static constexpr BlockHash kNone{};
        prefetch(reverse_.empty() ? kNone : reverse_[clampedPage(page)]);
    }
    // Removes page's mapping (reverse entry, and forward entry if it still points at page). Absent: no-op.
    void erasePage(PageId page);

    size_t size() const noexcept { return size_; }
    int32_t pageCapacity() const noexcept { return pageCapacity_; }
    // Throws InvariantError unless forward and reverse agree.
    void checkInvariants() const;
    size_t memoryBytes() const noexcept;

    // f(hash, page) for every mapping, in table order.
    template <class F>
    void forEach(F&& f) const {
        for (Slot const& s : slots_)
            if (s.page >= 0) f(reverse_[static_cast<size_t>(s.page)], s.page);
    }

private:
    struct Slot {
        uint32_t tag = 0;
        PageId page = kUnusedPageEntry;  // negative: empty
    };
    static_assert(sizeof(Slot) == 8, "a forward slot is a tag and a page");

    size_t clampedPage(PageId page) const noexcept {
        size_t const i = static_cast<uint32_t>(page);
        return i < covered_ ? i : 0;
    }
    static uint32_t tagOf(BlockHash const& hash) noexcept {
        return static_cast<uint32_t>(detail::mixHash(Hash128Hasher{}(hash)) >> 32);
    }
    size_t homeOf(uint32_t tag) const noexcept { return static_cast<size_t>(tag) & mask_; }
    // The index of hash's slot, or of the empty slot that ends its probe run (where an insert puts it).
    size_t probe(BlockHash const& hash, uint32_t tag) const noexcept;
    // The slot holding hash, or nullptr.
    Slot const* findSlot(BlockHash const& hash) const noexcept;
    void eraseSlot(size_t index) noexcept;
    // Growth, each all-or-nothing: the reverse map to cover `page`, the table to twice its slots.
    void growReverse(PageId page);
    void growTable();
    void checkPage(PageId page, char const* operation) const {
        if (page < 0 || page >= pageCapacity()) failPage(page, operation);
    }
    [[noreturn]] void failPage(PageId page, char const* operation) const;

    template <class T>
    using Array = std::vector<T, detail::HugePageAllocator<T>>;  // large and randomly accessed

    Array<Slot> slots_;  // power-of-two size, > 2 * size_
    size_t mask_ = 0;
    size_t size_ = 0;
    int32_t pageCapacity_ = 0;
    size_t covered_ = 0;  // pages with metadata: the size of reverse_ and of mapped_ (the rest are unmapped)
    Array<BlockHash> reverse_;
    std::vector<bool> mapped_;
};

}  // namespace ctxcache
