// DraftPathIndex: boundary heads in an array indexed by canonical base page (other depths of a page in an overflow
// map), doubly linked entry lists through per-record link arrays (unlinking is O(1), verified against the page). insert
// checks for duplicates and grows the head array before it changes anything, and undoes a partial insert if the
// overflow map's growth fails; memoryBytes is kept up to date incrementally. Full contract (layout, invariants, errors,
// cost, threading): include/ctxcache/draft_path_index.h.

#include "ctxcache/draft_path_index.h"

#include <algorithm>
#include <limits>
#include <new>
#include <string>

#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/detail/prefetch.h"
#include "ctxcache/errors.h"

namespace ctxcache {

namespace {
// One node of slotOf_: its payload, the next pointer and the allocator's 16-byte header.
constexpr size_t kSlotNodeBytes = sizeof(std::pair<RecordId const, uint32_t>) + sizeof(void*) + 16;
// The allocator's header on each live record's link array.
constexpr size_t kHeapBlockHeaderBytes = 16;
// How many boundaries ahead insert and erase start loading page heads: enough misses in flight to cover the latency.
constexpr size_t kPrefetchDistance = 8;
}  // namespace

void DraftPathIndex::prefetchHead(PageId page) const noexcept {
    if (static_cast<size_t>(page) < heads_.size()) detail::prefetchForRead(&heads_[static_cast<size_t>(page)]);
}

uint32_t const* DraftPathIndex::findHead(PageId page, int32_t pathBlockCount) const noexcept {
    if (page < 0 || static_cast<size_t>(page) >= heads_.size()) return nullptr;
    PageHead const& h = heads_[static_cast<size_t>(page)];
    if (h.pathBlockCount == pathBlockCount) return &h.head;
    return overflow_.empty() ? nullptr : overflow_.find(overflowKey(page, pathBlockCount));
}

uint32_t* DraftPathIndex::findHead(PageId page, int32_t pathBlockCount) noexcept {
    return const_cast<uint32_t*>(static_cast<DraftPathIndex const*>(this)->findHead(page, pathBlockCount));
}

uint32_t& DraftPathIndex::findOrAddHead(PageId page, int32_t pathBlockCount) {
    PageHead& h = heads_[static_cast<size_t>(page)];
    if (h.pathBlockCount == pathBlockCount) return h.head;
    if (!overflow_.empty())
        if (uint32_t* head = overflow_.find(overflowKey(page, pathBlockCount))) return *head;
    if (h.pathBlockCount == 0) {  // (page, n) is nowhere: the free primary takes it
        h.pathBlockCount = pathBlockCount;
        h.head = kEnd;
        return h.head;
    }
    return *overflow_.tryEmplace(overflowKey(page, pathBlockCount), kEnd).first;  // may throw: nothing changed
}

void DraftPathIndex::removeBoundary(PageId page, int32_t pathBlockCount) noexcept {
    PageHead& h = heads_[static_cast<size_t>(page)];
    if (h.pathBlockCount == pathBlockCount) h = PageHead{};
    else overflow_.erase(overflowKey(page, pathBlockCount));
}

uint32_t DraftPathIndex::addRecordSlot(RecordId record, size_t length) {
    std::vector<Link> links(length);
    bool const reuse = freeSlot_ != kEnd;
    uint32_t slot = freeSlot_;
    if (!reuse) {
        if (records_.size() >= kEnd) throw ContractError("DraftPathIndex::insert: too many indexed records");
        slot = static_cast<uint32_t>(records_.size());
        if (records_.size() == records_.capacity()) records_.reserve(std::max<size_t>(8, records_.size() * 2));
    }
    slotOf_.emplace(record, slot);  // the last step that may throw
    if (reuse) freeSlot_ = records_[slot].nextFree;
    else records_.emplace_back();  // capacity reserved: cannot throw
    RecordLinks& r = records_[slot];
    r.id = record;
    r.links = std::move(links);
    r.entries = 0;
    r.nextFree = kEnd;
    linkCapacity_ += r.links.capacity();
    return slot;
}

void DraftPathIndex::releaseRecordSlot(uint32_t slot) noexcept {
    RecordLinks& r = records_[slot];
    slotOf_.erase(r.id);
    linkCapacity_ -= r.links.capacity();
    std::vector<Link>().swap(r.links);
    r.id = kNoRecord;
    r.entries = 0;
    r.nextFree = freeSlot_;
    freeSlot_ = slot;
}

void DraftPathIndex::insert(RecordId record, PagePathSpan pages, size_t draftPathLength) {
    size_t const length = pages.size;
    if (draftPathLength == 0 || draftPathLength != length)
        throw ContractError("DraftPathIndex::insert: record " + std::to_string(record) +
                            " needs a draft path as long as its logical path");
    if (length > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw ContractError("DraftPathIndex::insert: record " + std::to_string(record) + " has " +
                            std::to_string(length) + " blocks, more than a boundary count can name");
    auto const [smallest, largestAt] = std::minmax_element(pages.data, pages.data + length);  // one pass
    PageId const largest = *largestAt;
    if (*smallest < 0)
        throw ContractError("DraftPathIndex::insert: record " + std::to_string(record) + " has a negative page");
    auto const existing = slotOf_.find(record);
    size_t keptLinks = 0;  // the size of an already indexed record's link array, restored on failure
    if (existing != slotOf_.end()) {
        std::vector<Link> const& links = records_[existing->second].links;
        keptLinks = links.size();
        for (size_t i = 0; i < std::min(length, keptLinks); ++i)
            if (links[i].present())
                throw ContractError("DraftPathIndex::insert: record " + std::to_string(record) + " boundary " +
                                    std::to_string(i + 1) + " is already indexed");
    }
    if (static_cast<size_t>(largest) >= heads_.size()) {  // before anything changed: a failure leaves it all
        heads_.resize(std::max({static_cast<size_t>(largest) + 1, pageCapacity_, heads_.size() * 2}));
    }
    uint32_t slot = 0;
    if (existing == slotOf_.end()) {
        slot = addRecordSlot(record, length);
    } else {
        slot = existing->second;
        std::vector<Link>& links = records_[slot].links;
        size_t const before = links.capacity();
        if (links.size() < length) links.resize(length);  // strong guarantee of its own
        linkCapacity_ += links.capacity() - before;
    }
    // records_ does not reallocate below: the link array stays put.
    Link* const links = records_[slot].links.data();
    size_t inserted = 0;
    for (size_t i = 0; i < std::min(length, kPrefetchDistance); ++i) prefetchHead(pages[i]);
    try {
        for (; inserted < length; ++inserted) {
            if (inserted + kPrefetchDistance < length) prefetchHead(pages[inserted + kPrefetchDistance]);
            PageId const page = pages[inserted];
            uint32_t& head = findOrAddHead(page, static_cast<int32_t>(inserted + 1));
            if (head != kEnd) records_[head].links[inserted].prev = slot;  // the old head follows it
            links[inserted].setNext(head, page);
            links[inserted].prev = kHead;
            head = slot;
        }
    } catch (...) {
        for (size_t i = 0; i < inserted; ++i) {  // the record was pushed at the head of each of its lists
            int32_t const n = static_cast<int32_t>(i + 1);
            uint32_t* head = findHead(pages[i], n);
            *head = links[i].nextOn(pages[i]);
            links[i] = Link{};
            if (*head == kEnd) removeBoundary(pages[i], n);
            else records_[*head].links[i].prev = kHead;
        }
        if (existing == slotOf_.end()) releaseRecordSlot(slot);
        else records_[slot].links.resize(keptLinks);  // its capacity stays (and stays accounted)
        throw;
    }
    records_[slot].entries += static_cast<uint32_t>(length);
    entries_ += length;
}

std::optional<DraftPathMatch> DraftPathIndex::lookupLongest(PagePathSpan pages, int32_t maxBlockCount) const {
    int32_t const limit = static_cast<int32_t>(std::min<int64_t>(maxBlockCount, static_cast<int64_t>(pages.size)));
    for (int32_t count = limit; count >= 1; --count)
        if (uint32_t const* head = findHead(pages[static_cast<size_t>(count - 1)], count))
            return DraftPathMatch{records_[*head].id, count};
    return std::nullopt;
}

bool DraftPathIndex::contains(PageId terminalPage, DraftPathMatch const& match) const {
    if (match.pathBlockCount < 1) return false;
    auto const found = slotOf_.find(match.record);
    if (found == slotOf_.end()) return false;
    size_t const link = static_cast<size_t>(match.pathBlockCount - 1);
    std::vector<Link> const& links = records_[found->second].links;
    if (link >= links.size() || !links[link].present()) return false;
    return isUnder(terminalPage, match.pathBlockCount, found->second);
}

bool DraftPathIndex::isUnder(PageId page, int32_t pathBlockCount, uint32_t slot) const noexcept {
    size_t const link = static_cast<size_t>(pathBlockCount - 1);
    uint32_t const prev = records_[slot].links[link].prev;
    if (prev == kHead) {  // another boundary at this depth never lists this slot's entry: its head is not slot
        uint32_t const* head = findHead(page, pathBlockCount);
        return head != nullptr && *head == slot;
    }
    return records_[prev].links[link].nextOn(page) == slot;  // the predecessor's next decodes to slot only here
}

bool DraftPathIndex::unlink(PageId page, int32_t pathBlockCount, uint32_t slot) noexcept {
    size_t const link = static_cast<size_t>(pathBlockCount - 1);
    Link& own = records_[slot].links[link];
    ++eraseLinkVisits_;
    if (!own.present()) return false;
    ++eraseLinkVisits_;  // the predecessor's link or the head
    if (!isUnder(page, pathBlockCount, slot)) return false;
    uint32_t const next = own.nextOn(page);
    if (own.prev == kHead) {
        uint32_t* const head = findHead(page, pathBlockCount);
        *head = next;
        if (next == kEnd) removeBoundary(page, pathBlockCount);
    } else {
        records_[own.prev].links[link].setNext(next, page);
    }
    if (next != kEnd) {
        ++eraseLinkVisits_;
        records_[next].links[link].prev = own.prev;
    }
    own = Link{};
    return true;
}

void DraftPathIndex::eraseBoundaries(RecordId record, int32_t firstBlock, PageId const* pages, size_t count) {
    auto const found = slotOf_.find(record);
    if (found == slotOf_.end()) return;
    uint32_t const slot = found->second;
    RecordLinks& r = records_[slot];
    for (size_t i = 0; i < std::min(count, kPrefetchDistance); ++i) prefetchHead(pages[i]);
    for (size_t i = 0; i < count; ++i) {
        if (i + kPrefetchDistance < count) prefetchHead(pages[i + kPrefetchDistance]);
        int64_t const n = int64_t{firstBlock} + static_cast<int64_t>(i) + 1;  // pages[i] is boundary n
        if (n < 1 || static_cast<uint64_t>(n) > r.links.size() || !r.links[static_cast<size_t>(n - 1)].present())
            continue;
        if (!unlink(pages[i], static_cast<int32_t>(n), slot)) continue;  // the record's boundary n is elsewhere
        --r.entries;
        --entries_;
    }
    if (r.entries == 0) {
        releaseRecordSlot(slot);
        return;
    }
    while (!r.links.back().present()) r.links.pop_back();  // a trimmed tail gives its links back
    if (r.links.size() * 2 <= r.links.capacity()) {
        try {
            size_t const before = r.links.capacity();
            std::vector<Link>(r.links).swap(r.links);
            linkCapacity_ -= before - r.links.capacity();
        } catch (std::bad_alloc const&) {  // keeping the larger array is as correct
        }
    }
}

size_t DraftPathIndex::memoryBytes() const noexcept {
    return heads_.capacity() * sizeof(PageHead) + overflow_.memoryBytes() + records_.capacity() * sizeof(RecordLinks) +
           linkCapacity_ * sizeof(Link) + slotOf_.size() * (kHeapBlockHeaderBytes + kSlotNodeBytes) +
           slotOf_.bucket_count() * sizeof(void*);
}

void DraftPathIndex::checkInvariants() const {
    auto fail = [](std::string const& what) { throw InvariantError("DraftPathIndex: " + what); };
    std::vector<uint32_t> listed(records_.size(), 0);
    size_t entries = 0;
    auto checkList = [&](PageId page, int32_t n, uint32_t head) {
        std::string const where = "boundary (page " + std::to_string(page) + ", " + std::to_string(n) + ")";
        if (n < 1) fail(where + " has a block count below 1");
        if (head == kEnd) fail(where + " has an empty list");
        size_t const link = static_cast<size_t>(n - 1);
        uint32_t prev = kHead;
        for (uint32_t slot = head; slot != kEnd; slot = records_[slot].links[link].nextOn(page)) {
            if (slot >= records_.size() || records_[slot].entries == 0)
                fail(where + " lists record slot " + std::to_string(slot) + ", which is not live");
            if (link >= records_[slot].links.size() || !records_[slot].links[link].present())
                fail("record slot " + std::to_string(slot) + " is listed at " + where + " without a link there");
            if (records_[slot].links[link].prev != prev)
                fail("record slot " + std::to_string(slot) + " at " + where + " has a wrong back link");
            if (++entries > entries_ || ++listed[slot] > records_[slot].entries)
                fail("a list is longer than the entries counted (a cycle or a doubly listed record)");
            prev = slot;
        }
    };
    for (size_t page = 0; page < heads_.size(); ++page) {
        PageHead const& h = heads_[page];
        if (h.pathBlockCount == 0) {
            if (h.head != kEnd) fail("page " + std::to_string(page) + " has no boundary but a list");
            continue;
        }
        checkList(static_cast<PageId>(page), h.pathBlockCount, h.head);
    }
    overflow_.forEach([&](uint64_t key, uint32_t head) {
        PageId const page = pageOf(key);
        if (page < 0 || static_cast<size_t>(page) >= heads_.size())
            fail("the overflow map holds page " + std::to_string(page) + ", beyond the head array");
        if (heads_[static_cast<size_t>(page)].pathBlockCount == depthOf(key))
            fail("boundary (page " + std::to_string(page) + ", " + std::to_string(depthOf(key)) +
                 ") is held twice: as the page's primary and in the overflow map");
        checkList(page, depthOf(key), head);
    });
    if (entries != entries_) fail(std::to_string(entries) + " entries listed but counted " + std::to_string(entries_));
    size_t live = 0, free = 0, capacity = 0;
    for (size_t slot = 0; slot < records_.size(); ++slot) {
        RecordLinks const& r = records_[slot];
        if (r.entries == 0) continue;  // free
        ++live;
        capacity += r.links.capacity();
        size_t const present = static_cast<size_t>(
            std::count_if(r.links.begin(), r.links.end(), [](Link const& l) { return l.present(); }));
        if (present != r.entries || listed[slot] != r.entries)
            fail("record " + std::to_string(r.id) + " counts " + std::to_string(r.entries) + " entries, has " +
                 std::to_string(present) + " links and is listed " + std::to_string(listed[slot]) + " times");
        auto const found = slotOf_.find(r.id);
        if (found == slotOf_.end() || found->second != slot)
            fail("record " + std::to_string(r.id) + " is not mapped to its slot " + std::to_string(slot));
    }
    for (uint32_t slot = freeSlot_; slot != kEnd; slot = records_[slot].nextFree) {
        if (slot >= records_.size() || records_[slot].entries != 0 || ++free > records_.size())
            fail("the free record slots are not a list of free slots");
    }
    if (live != slotOf_.size() || live + free != records_.size())
        fail(std::to_string(live) + " live and " + std::to_string(free) + " free record slots of " +
             std::to_string(records_.size()) + ", " + std::to_string(slotOf_.size()) + " mapped");
    if (capacity != linkCapacity_)
        fail("link storage is " + std::to_string(capacity) + " links but accounted " + std::to_string(linkCapacity_));
}

}  // namespace ctxcache
