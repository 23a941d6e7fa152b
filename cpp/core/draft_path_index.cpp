// DraftPathIndex: boundary slots in one open-addressing table, entry lists linked through per-record link arrays.
// insert checks for duplicates before it changes anything and undoes a partial insert if the table's growth
// fails; memoryBytes is kept up to date incrementally. Full contract (layout, invariants, errors, cost,
// threading): include/ctxcache/draft_path_index.h.

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
constexpr size_t kMinBoundaryCapacity = 16;
// How many boundaries ahead insert and erase start loading home slots: enough misses in flight to cover the latency.
constexpr size_t kPrefetchDistance = 8;
}  // namespace

size_t DraftPathIndex::home(uint64_t hi, uint64_t lo, int32_t pathBlockCount) const noexcept {
    uint64_t const h = hi ^ (lo * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(pathBlockCount) << 40);
    return static_cast<size_t>(detail::mixHash(h)) & mask_;
}

void DraftPathIndex::prefetchBoundary(BlockHash const& hash, int32_t pathBlockCount) const noexcept {
    if (!boundaries_.empty()) detail::prefetchForRead(&boundaries_[home(hash.hi, hash.lo, pathBlockCount)]);
}

DraftPathIndex::Boundary const* DraftPathIndex::findBoundary(BlockHash const& hash,
                                                             int32_t pathBlockCount) const noexcept {
    if (boundaryCount_ == 0) return nullptr;
    for (size_t i = home(hash.hi, hash.lo, pathBlockCount);; i = (i + 1) & mask_) {
        Boundary const& b = boundaries_[i];
        if (b.pathBlockCount == 0) return nullptr;
        if (b.pathBlockCount == pathBlockCount && b.hashLo == hash.lo && b.hashHi == hash.hi) return &b;
    }
}

DraftPathIndex::Boundary* DraftPathIndex::findBoundary(BlockHash const& hash, int32_t pathBlockCount) noexcept {
    return const_cast<Boundary*>(static_cast<DraftPathIndex const*>(this)->findBoundary(hash, pathBlockCount));
}

DraftPathIndex::Boundary& DraftPathIndex::findOrAddBoundary(BlockHash const& hash, int32_t pathBlockCount) {
    if ((boundaryCount_ + 1) * 4 > boundaries_.size() * 3)
        rehash(boundaries_.empty() ? kMinBoundaryCapacity : boundaries_.size() * 2);
    for (size_t i = home(hash.hi, hash.lo, pathBlockCount);; i = (i + 1) & mask_) {
        Boundary& b = boundaries_[i];
        if (b.pathBlockCount == 0) {
            b = Boundary{hash.hi, hash.lo, pathBlockCount, kEnd};
            ++boundaryCount_;
            return b;
        }
        if (b.pathBlockCount == pathBlockCount && b.hashLo == hash.lo && b.hashHi == hash.hi) return b;
    }
}

void DraftPathIndex::removeBoundary(Boundary& boundary) noexcept {
    size_t i = static_cast<size_t>(&boundary - boundaries_.data());
    // Backward shift: pull later members of the run into the hole unless that would put them before home.
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
        Boundary const& next = boundaries_[j];
        if (next.pathBlockCount == 0) break;
        size_t const h = home(next.hashHi, next.hashLo, next.pathBlockCount);
        if (((j - h) & mask_) >= ((j - i) & mask_)) {
            boundaries_[i] = next;
            i = j;
        }
    }
    boundaries_[i] = Boundary{};
    --boundaryCount_;
}

void DraftPathIndex::rehash(size_t capacity) {
    std::vector<Boundary> grown(capacity);  // the only allocation: if it throws, nothing changed
    grown.swap(boundaries_);
    mask_ = capacity - 1;
    for (Boundary const& b : grown) {
        if (b.pathBlockCount == 0) continue;
        size_t i = home(b.hashHi, b.hashLo, b.pathBlockCount);
        while (boundaries_[i].pathBlockCount != 0) i = (i + 1) & mask_;
        boundaries_[i] = b;
    }
}

uint32_t DraftPathIndex::addRecordSlot(RecordId record, size_t length) {
    std::vector<uint32_t> links(length, kAbsent);
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
    std::vector<uint32_t>().swap(r.links);
    r.id = kNoRecord;
    r.entries = 0;
    r.nextFree = freeSlot_;
    freeSlot_ = slot;
}

void DraftPathIndex::insert(RecordId record, BlockHashSpan hashes, size_t draftPathLength) {
    size_t const length = hashes.size;
    if (draftPathLength == 0 || draftPathLength != length)
        throw ContractError("DraftPathIndex::insert: record " + std::to_string(record) +
                            " needs a draft path as long as its logical path");
    if (length > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw ContractError("DraftPathIndex::insert: record " + std::to_string(record) + " has " +
                            std::to_string(length) + " blocks, more than a boundary count can name");
    auto const existing = slotOf_.find(record);
    size_t keptLinks = 0;  // the size of an already indexed record's link array, restored on failure
    if (existing != slotOf_.end()) {
        std::vector<uint32_t> const& links = records_[existing->second].links;
        keptLinks = links.size();
        for (size_t i = 0; i < std::min(length, keptLinks); ++i)
            if (links[i] != kAbsent)
                throw ContractError("DraftPathIndex::insert: record " + std::to_string(record) + " boundary " +
                                    std::to_string(i + 1) + " is already indexed");
    }
    uint32_t slot = 0;
    if (existing == slotOf_.end()) {
        slot = addRecordSlot(record, length);
    } else {
        slot = existing->second;
        std::vector<uint32_t>& links = records_[slot].links;
        size_t const before = links.capacity();
        if (links.size() < length) links.resize(length, kAbsent);  // strong guarantee of its own
        linkCapacity_ += links.capacity() - before;
    }
    // records_ does not reallocate below: the link array stays put.
    uint32_t* const links = records_[slot].links.data();
    size_t inserted = 0;
    // Home slots load ahead of the probes (a growth midway only makes the hints already issued stale).
    for (size_t i = 0; i < std::min(length, kPrefetchDistance); ++i)
        prefetchBoundary(hashes[i], static_cast<int32_t>(i + 1));
    try {
        for (; inserted < length; ++inserted) {
            if (inserted + kPrefetchDistance < length)
                prefetchBoundary(hashes[inserted + kPrefetchDistance],
                                 static_cast<int32_t>(inserted + kPrefetchDistance + 1));
            Boundary& b = findOrAddBoundary(hashes[inserted], static_cast<int32_t>(inserted + 1));
            links[inserted] = b.head;
            b.head = slot;
        }
    } catch (...) {
        for (size_t i = 0; i < inserted; ++i) {
            Boundary* b = findBoundary(hashes[i], static_cast<int32_t>(i + 1));
            b->head = links[i];  // the record was pushed at the head of each of its lists
            links[i] = kAbsent;
            if (b->head == kEnd) removeBoundary(*b);
        }
        if (existing == slotOf_.end()) releaseRecordSlot(slot);
        else records_[slot].links.resize(keptLinks);  // its capacity stays (and stays accounted)
        throw;
    }
    records_[slot].entries += static_cast<uint32_t>(length);
    entries_ += length;
}

std::optional<DraftPathMatch> DraftPathIndex::lookupLongest(BlockHashSpan hashes, int32_t maxBlockCount) const {
    int32_t const limit = static_cast<int32_t>(std::min<int64_t>(maxBlockCount, static_cast<int64_t>(hashes.size)));
    for (int32_t count = limit; count >= 1; --count)
        if (Boundary const* b = findBoundary(hashes[static_cast<size_t>(count - 1)], count))
            return DraftPathMatch{records_[b->head].id, count};
    return std::nullopt;
}

bool DraftPathIndex::contains(BlockHash const& terminalHash, DraftPathMatch const& match) const {
    if (match.pathBlockCount < 1) return false;
    auto const found = slotOf_.find(match.record);
    if (found == slotOf_.end()) return false;
    size_t const link = static_cast<size_t>(match.pathBlockCount - 1);
    std::vector<uint32_t> const& links = records_[found->second].links;
    if (link >= links.size() || links[link] == kAbsent) return false;
    Boundary const* b = findBoundary(terminalHash, match.pathBlockCount);
    if (b == nullptr) return false;
    for (uint32_t slot = b->head; slot != kEnd; slot = records_[slot].links[link])
        if (slot == found->second) return true;
    return false;
}

bool DraftPathIndex::unlink(Boundary& boundary, uint32_t slot) noexcept {
    size_t const link = static_cast<size_t>(boundary.pathBlockCount - 1);
    uint32_t* at = &boundary.head;
    while (*at != slot) {
        if (*at == kEnd) return false;
        at = &records_[*at].links[link];
    }
    uint32_t& own = records_[slot].links[link];
    *at = own;
    own = kAbsent;
    if (boundary.head == kEnd) removeBoundary(boundary);
    return true;
}

void DraftPathIndex::eraseBoundaries(RecordId record, int32_t firstBlock, BlockHash const* hashes, size_t count) {
    auto const found = slotOf_.find(record);
    if (found == slotOf_.end()) return;
    uint32_t const slot = found->second;
    RecordLinks& r = records_[slot];
    // hashes[i] is boundary n = firstBlock + i + 1 (in 64 bits: a hint for an out-of-range n only wastes itself).
    auto boundaryOf = [&](size_t i) { return int64_t{firstBlock} + static_cast<int64_t>(i) + 1; };
    auto prefetchAt = [&](size_t i) { prefetchBoundary(hashes[i], static_cast<int32_t>(boundaryOf(i))); };
    for (size_t i = 0; i < std::min(count, kPrefetchDistance); ++i) prefetchAt(i);
    for (size_t i = 0; i < count; ++i) {
        if (i + kPrefetchDistance < count) prefetchAt(i + kPrefetchDistance);
        int64_t const n = boundaryOf(i);
        if (n < 1 || static_cast<uint64_t>(n) > r.links.size() || r.links[static_cast<size_t>(n - 1)] == kAbsent)
            continue;
        Boundary* b = findBoundary(hashes[i], static_cast<int32_t>(n));
        if (b == nullptr || !unlink(*b, slot)) continue;  // the record's boundary n lives under another hash
        --r.entries;
        --entries_;
    }
    if (r.entries == 0) {
        releaseRecordSlot(slot);
        return;
    }
    while (r.links.back() == kAbsent) r.links.pop_back();  // a trimmed tail gives its links back
    if (r.links.size() * 2 <= r.links.capacity()) {
        try {
            size_t const before = r.links.capacity();
            std::vector<uint32_t>(r.links).swap(r.links);
            linkCapacity_ -= before - r.links.capacity();
        } catch (std::bad_alloc const&) {  // keeping the larger array is as correct
        }
    }
}

size_t DraftPathIndex::memoryBytes() const noexcept {
    return boundaries_.capacity() * sizeof(Boundary) + records_.capacity() * sizeof(RecordLinks) +
           linkCapacity_ * sizeof(uint32_t) + slotOf_.size() * (kHeapBlockHeaderBytes + kSlotNodeBytes) +
           slotOf_.bucket_count() * sizeof(void*);
}

void DraftPathIndex::checkInvariants() const {
    auto fail = [](std::string const& what) { throw InvariantError("DraftPathIndex: " + what); };
    std::vector<uint32_t> listed(records_.size(), 0);
    size_t boundaries = 0, entries = 0;
    for (size_t i = 0; i < boundaries_.size(); ++i) {
        Boundary const& b = boundaries_[i];
        if (b.pathBlockCount == 0) continue;
        ++boundaries;
        if (b.pathBlockCount < 0) fail("boundary slot " + std::to_string(i) + " has a negative block count");
        if (findBoundary(BlockHash{b.hashHi, b.hashLo}, b.pathBlockCount) != &b)
            fail("boundary slot " + std::to_string(i) + " is not reachable from its home slot");
        if (b.head == kEnd) fail("boundary slot " + std::to_string(i) + " has an empty list");
        size_t const link = static_cast<size_t>(b.pathBlockCount - 1);
        for (uint32_t slot = b.head; slot != kEnd; slot = records_[slot].links[link]) {
            if (slot >= records_.size() || records_[slot].entries == 0)
                fail("boundary slot " + std::to_string(i) + " lists record slot " + std::to_string(slot) +
                     ", which is not live");
            if (link >= records_[slot].links.size() || records_[slot].links[link] == kAbsent)
                fail("record slot " + std::to_string(slot) + " is listed at boundary " +
                     std::to_string(b.pathBlockCount) + " without a link there");
            if (++entries > entries_ || ++listed[slot] > records_[slot].entries)
                fail("a list is longer than the entries counted (a cycle or a doubly listed record)");
        }
    }
    if (boundaries != boundaryCount_)
        fail(std::to_string(boundaries) + " boundary slots used but counted " + std::to_string(boundaryCount_));
    if (entries != entries_) fail(std::to_string(entries) + " entries listed but counted " + std::to_string(entries_));
    size_t live = 0, free = 0, capacity = 0;
    for (size_t slot = 0; slot < records_.size(); ++slot) {
        RecordLinks const& r = records_[slot];
        if (r.entries == 0) continue;  // free
        ++live;
        capacity += r.links.capacity();
        size_t const present =
            static_cast<size_t>(std::count_if(r.links.begin(), r.links.end(), [](uint32_t l) { return l != kAbsent; }));
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
