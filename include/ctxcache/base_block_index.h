// BaseBlockIndex: the canonical base-KV page of every published block hash. Not an owner: no refcounts, no
// recency; the manager keeps a mapping only while its page holds at least one cache reference.
//
// Invariants: forward (hash -> page) and reverse (page -> hash) are one bijection over the mapped entries.
//             First committer wins: insert() of a present hash returns the existing page and changes nothing.
// Errors:     a negative or out-of-range page, or a page already mapped to another hash: ContractError, nothing
//             changed.
// Cost:       lookup/insert/erasePage O(1) expected (one flat-table probe run + one array slot);
//             lookupPrefix O(matched blocks + 1). Memory: one 24-byte table slot per mapping (load <= 3/4) plus
//             17 bytes per page of capacity for the reverse map.
// Threading:  single writer, no internal locks.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/detail/flat_hash_map.h"
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
    // The hash `page` is mapped from, if any.
    std::optional<BlockHash> hashOfPage(PageId page) const;

    BaseInsertResult insert(BlockHash hash, PageId proposedPage);
    // Cache hints (no effect on contents): the forward slot of `hash`; the reverse entry of `page`; and, for a
    // page whose reverse entry is already cached, the forward slot of the hash it is mapped from (erasePage's
    // second miss). Out-of-range pages are ignored.
    void prefetch(BlockHash const& hash) const noexcept { forward_.prefetch(hash); }
    void prefetchPage(PageId page) const noexcept {
        if (page >= 0 && page < pageCapacity()) __builtin_prefetch(&reverse_[static_cast<size_t>(page)]);
    }
    void prefetchForwardOfPage(PageId page) const noexcept {
        if (page >= 0 && page < pageCapacity()) forward_.prefetch(reverse_[static_cast<size_t>(page)]);
    }
    // Removes page's mapping (reverse entry, and forward entry if it still points at page). Absent: no-op.
    void erasePage(PageId page);

    size_t size() const noexcept { return forward_.size(); }
    int32_t pageCapacity() const noexcept { return static_cast<int32_t>(reverse_.size()); }
    // Throws InvariantError unless forward and reverse agree.
    void checkInvariants() const;
    size_t memoryBytes() const noexcept;

    template <class F>
    void forEach(F&& f) const {
        forward_.forEach(f);
    }

private:
    void checkPage(PageId page, char const* operation) const;

    detail::FlatHashMap<BlockHash, PageId, Hash128Hasher> forward_;
    std::vector<BlockHash> reverse_;
    std::vector<bool> mapped_;
};

}  // namespace ctxcache
