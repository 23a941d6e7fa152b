// DraftPathIndex: coherent EAGLE draft paths. For every boundary n = 1..len of every draft-paired record it
// holds the entry {record, pathBlockCount = n} under (page, n), page being the record's canonical base page at
// block n - 1. Draft pages are never canonicalized across records, so a match always names ONE record and the
// consumer binds that record's own draft path (no stitching).
// Why pages, not hashes: a record's base pages are canonical (the base index maps its hash at block i to its
// page at block i, and keeps that mapping while any record holds the page), so (hash, n) and (page, n) name the
// same boundary, and a page id indexes an array where a hash needs a probed table.
//
// Layout:     boundary heads in one array indexed by page: {head, n}, the page's primary boundary (n = 0: none);
//             a page's boundaries at other depths (a hash repeated at several depths, only with fabricated or
//             colliding hashes) live in an overflow map keyed by (page, n). The entries under a boundary form a
//             doubly linked list, most recently inserted first, whose links live in the records: every indexed
//             record owns one array of links, link[n - 1] = {next, prev} in boundary n's list (by dense record
//             slot). prev is the previous entry's slot, kHead for the list's first entry, kAbsent where the record
//             has no entry; next is stored XORed with the boundary's page: every walk starts at a head and knows
//             the page, and an unlink verifies in O(1) that the caller's page is the entry's (the previous link
//             decodes to the entry only with the right page; the head is looked up under it). An entry costs 8
//             bytes; a page 8 bytes of head array (allocated when the first record is indexed, for min(page
//             capacity, kEagerMetadataIds) pages, then grown geometrically to cover the largest page indexed, up to
//             the page capacity named at construction).
// Invariants: an entry {record, n} exists exactly while record's link[n - 1] is present (prev != kAbsent), and
//             then it is on the list of exactly one boundary (pages[n - 1], n), its prev naming its predecessor
//             there (kHead: it is the head); a boundary exists exactly while its list is non-empty; each (page, n)
//             is held in one place only: the page's primary head or the overflow map, never both; a record slot
//             exists exactly while its record has an entry. A record has at most one entry per boundary n.
// Errors:     insert of a record without a complete draft path, of a negative page, or of a boundary the record
//             already has: ContractError, nothing changed; an allocation failure midway (the overflow map's
//             growth) undoes the partial insert (strong guarantee; the head array may stay grown).
// Cost:       insert O(path length), one array access per boundary; erase and eraseBoundaries O(entries removed),
//             at most three links read per entry (its own, its predecessor's or the head, its successor's),
//             however many records share the boundary (eraseLinkVisits counts them); lookupLongest O(1) per probed
//             boundary; contains O(1); memoryBytes O(1) (kept up to date by every change; checkInvariants recounts
//             it and every list in O(pages + overflow + entries)).
// Threading:  single writer, no internal locks; const members may run concurrently with each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ctxcache/cache_record.h"
#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/detail/huge_page_allocator.h"
#include "ctxcache/types.h"

namespace ctxcache {

struct DraftPathMatch {
    RecordId record = kNoRecord;
    int32_t pathBlockCount = 0;

    friend bool operator==(DraftPathMatch const& a, DraftPathMatch const& b) noexcept {
        return a.record == b.record && a.pathBlockCount == b.pathBlockCount;
    }
};

// A non-owning view of a page path (a record's canonical base pages, a lookup's resolved pages). A std::vector
// converts implicitly.
struct PagePathSpan {
    PageId const* data = nullptr;
    size_t size = 0;

    PagePathSpan() = default;
    PagePathSpan(PageId const* pages, size_t count) : data(pages), size(count) {}
    PagePathSpan(std::vector<PageId> const& pages) : data(pages.data()), size(pages.size()) {}  // NOLINT

    PageId operator[](size_t i) const noexcept { return data[i]; }
};

class DraftPathIndex {
public:
    // pageCapacity: the base pool's size; the head array (8 bytes a page) takes its eager part when the first
    // record is indexed and grows with the largest page indexed, so an index that never holds a record costs
    // nothing and a huge pool costs what its indexed pages cost. Larger pages still index (the array grows).
    explicit DraftPathIndex(size_t pageCapacity = 0) noexcept : pageCapacity_(pageCapacity) {}

    // Indexes boundaries 1..pages.size of `record`, pages being its canonical base pages (block i's page at
    // i); draftPathLength is the length of its draft page path, which must equal pages.size and be positive.
    void insert(RecordId record, PagePathSpan pages, size_t draftPathLength);
    void insert(CacheRecord const& record) { insert(record.id, record.basePagePath, record.draftPagePath.size()); }
    // Longest n <= maxBlockCount (and <= pages.size) whose boundary (pages[n-1], n) has an entry; among several,
    // the most recently inserted. pages[i] is the canonical page of the query's block i, or negative where the
    // block has none (no boundary there).
    std::optional<DraftPathMatch> lookupLongest(PagePathSpan pages, int32_t maxBlockCount) const;
    bool contains(PageId terminalPage, DraftPathMatch const& match) const;
    // Removes exactly `record`'s entries {record, i + 1} under pages[i]; entries not present (or under another
    // page) are skipped.
    void erase(RecordId record, PagePathSpan pages) { eraseBoundaries(record, 0, pages.data, pages.size); }
    // The same for a stored record; a record without a draft path is a no-op.
    void erase(CacheRecord const& record) {
        if (record.hasDraftPath()) erase(record.id, record.basePagePath);
    }
    // Removes record's entries {record, firstBlock + i + 1} under pages[i], i < count: the boundaries a trim
    // gives up (firstBlock = the blocks kept). Entries not present (or under another page) are skipped.
    // O(count).
    void eraseBoundaries(RecordId record, int32_t firstBlock, PageId const* pages, size_t count);

    size_t entryCount() const noexcept { return entries_; }
    // Record links read by erase and eraseBoundaries since construction (at most three per entry removed): the
    // work of unlinking, for tests that check it never grows with the entries sharing a boundary.
    uint64_t eraseLinkVisits() const noexcept { return eraseLinkVisits_; }
    // f(page, match) once per entry; under one boundary the most recently inserted first.
    template <class F>
    void forEach(F&& f) const {
        auto list = [&](PageId page, int32_t n, uint32_t head) {
            size_t const link = static_cast<size_t>(n - 1);
            for (uint32_t slot = head; slot != kEnd; slot = records_[slot].links[link].nextOn(page))
                f(page, DraftPathMatch{records_[slot].id, n});
        };
        for (size_t page = 0; page < heads_.size(); ++page)
            if (heads_[page].pathBlockCount != 0)
                list(static_cast<PageId>(page), heads_[page].pathBlockCount, heads_[page].head);
        overflow_.forEach([&](uint64_t key, uint32_t head) { list(pageOf(key), depthOf(key), head); });
    }
    size_t memoryBytes() const noexcept;
    // Throws InvariantError when an entry count, a list, a record slot or the memory accounting disagrees.
    void checkInvariants() const;

private:
    static constexpr uint32_t kAbsent = 0xFFFFFFFFu;  // a link's prev: no entry at this boundary
    static constexpr uint32_t kEnd = 0xFFFFFFFEu;     // a link's next or a head: the end of a list
    static constexpr uint32_t kHead = 0xFFFFFFFDu;    // a link's prev: the entry heads its list

    // A page's primary boundary (page, pathBlockCount); pathBlockCount == 0: none.
    struct PageHead {
        uint32_t head = kEnd;  // record slot of the most recently inserted entry
        int32_t pathBlockCount = 0;
    };
    static_assert(sizeof(PageHead) == 8, "a page's head is 8 bytes: the index's per-page cost");
    struct KeyHash {
        uint64_t operator()(uint64_t key) const noexcept { return key; }
    };
    static uint64_t overflowKey(PageId page, int32_t n) noexcept {
        return (static_cast<uint64_t>(static_cast<uint32_t>(page)) << 32) | static_cast<uint32_t>(n);
    }
    static PageId pageOf(uint64_t key) noexcept { return static_cast<PageId>(key >> 32); }
    static int32_t depthOf(uint64_t key) noexcept { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

    // One entry's place in its boundary's list (see Layout).
    struct Link {
        uint32_t next = kEnd;  // the next slot (or kEnd) XOR the boundary's page
        uint32_t prev = kAbsent;

        bool present() const noexcept { return prev != kAbsent; }
        uint32_t nextOn(PageId page) const noexcept { return next ^ static_cast<uint32_t>(page); }
        void setNext(uint32_t slot, PageId page) noexcept { next = slot ^ static_cast<uint32_t>(page); }
    };
    static_assert(sizeof(Link) == 8, "an entry is 8 bytes: the index's per-entry cost");

    struct RecordLinks {
        RecordId id = kNoRecord;
        std::vector<Link> links;  // links[n - 1]: the record's entry in boundary n's list (absent: prev = kAbsent)
        uint32_t entries = 0;         // links present; 0: a free slot
        uint32_t nextFree = kEnd;     // free slots only: the next free slot
    };

    // Starts loading page's head; a hint only (any page, no state change).
    void prefetchHead(PageId page) const noexcept;
    // The head of boundary (page, n), or null when it has no entry.
    uint32_t const* findHead(PageId page, int32_t pathBlockCount) const noexcept;
    uint32_t* findHead(PageId page, int32_t pathBlockCount) noexcept;
    // The head of boundary (page, n), added with an empty list if absent (page < heads_.size()). The overflow
    // map's growth may throw, before anything changed.
    uint32_t& findOrAddHead(PageId page, int32_t pathBlockCount);
    // Drops boundary (page, n), whose list has just become empty.
    void removeBoundary(PageId page, int32_t pathBlockCount) noexcept;
    // Unlinks `slot`'s entry at depth n from the list of (page, n) in O(1); false (nothing changed) when it has no
    // entry there or its entry is under another page.
    bool unlink(PageId page, int32_t pathBlockCount, uint32_t slot) noexcept;
    // Whether `slot`'s present entry at depth n is under `page`: O(1) (see Layout).
    bool isUnder(PageId page, int32_t pathBlockCount, uint32_t slot) const noexcept;
    uint32_t addRecordSlot(RecordId record, size_t length);  // strong guarantee
    void releaseRecordSlot(uint32_t slot) noexcept;

    size_t pageCapacity_ = 0;
    std::vector<PageHead, detail::HugePageAllocator<PageHead>> heads_;  // by page; empty until a record is indexed
    detail::FlatHashMap<uint64_t, uint32_t, KeyHash> overflow_;  // (page, n) -> head, n not the page's primary
    std::vector<RecordLinks> records_;  // record slots, live and free
    std::unordered_map<RecordId, uint32_t> slotOf_;  // live record slots
    uint32_t freeSlot_ = kEnd;  // head of the free record slots
    size_t entries_ = 0;
    uint64_t eraseLinkVisits_ = 0;
    size_t linkCapacity_ = 0;  // sum of the capacities of the live records' link arrays: memoryBytes() without a walk
};

}  // namespace ctxcache
