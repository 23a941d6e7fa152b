// BaseBlockIndex: the canonical hash -> base page table (8-byte {tag, page} slots, confirmed against the reverse
// array) and its page -> hash reverse array. Both are sized at construction for the eager part of the pool
// (kEagerMetadataIds pages) and grow geometrically beyond it, before insert() changes anything; erasePage()
// shifts the probe run back over the hole. Full contract (design, invariants, errors,
// cost, threading): include/ctxcache/base_block_index.h.

#include "ctxcache/base_block_index.h"

#include <algorithm>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {

namespace {
// How many chain hashes ahead a walk starts loading home slots: enough misses in flight to cover the latency.
constexpr size_t kPrefetchDistance = 8;
}  // namespace

BaseBlockIndex::BaseBlockIndex(int32_t pageCapacity) : pageCapacity_(pageCapacity) {
    if (pageCapacity < 0) throw ContractError("BaseBlockIndex: pageCapacity must be non-negative");
    size_t const eager = static_cast<size_t>(std::min(pageCapacity, kEagerMetadataIds));
    size_t slots = 16;
    while (slots / 2 < eager) slots *= 2;
    try {
        slots_.assign(slots, Slot{});
        reverse_.resize(eager);
        mapped_.resize(eager, false);
    } catch (std::bad_alloc const&) {
        throw OutOfMemoryError(describeAllocationFailure("BaseBlockIndex: a table of " + std::to_string(slots) +
                                                             " slots and a reverse map of " + std::to_string(eager) +
                                                             " pages (capacity " + std::to_string(pageCapacity) + ")",
                                                         slots * sizeof(Slot) + eager * sizeof(BlockHash) + eager / 8));
    }
    mask_ = slots - 1;
    covered_ = eager;
}

void BaseBlockIndex::growReverse(PageId page) {
    size_t const size =
        std::min(static_cast<size_t>(pageCapacity_), std::max(static_cast<size_t>(page) + 1, 2 * reverse_.size()));
    Array<BlockHash> reverse;
    std::vector<bool> mapped;
    try {
        reverse.reserve(size);
        mapped.reserve(size);
    } catch (std::bad_alloc const&) {
        throw OutOfMemoryError(describeAllocationFailure("BaseBlockIndex: a reverse map of " + std::to_string(size) +
                                                             " pages (capacity " + std::to_string(pageCapacity_) + ")",
                                                         size * sizeof(BlockHash) + size / 8));
    }
    reverse.assign(reverse_.begin(), reverse_.end());  // within the reserved storage: nothing below allocates
    reverse.resize(size);
    mapped.assign(mapped_.begin(), mapped_.end());
    mapped.resize(size, false);
    reverse_.swap(reverse);
    mapped_.swap(mapped);
    covered_ = size;
}

void BaseBlockIndex::growTable() {
    size_t const slots = 2 * slots_.size();
    Array<Slot> table;
    try {
        table.assign(slots, Slot{});
    } catch (std::bad_alloc const&) {
        throw OutOfMemoryError(describeAllocationFailure("BaseBlockIndex: a table of " + std::to_string(slots) +
                                                             " slots for " + std::to_string(size_ + 1) + " mappings",
                                                         slots * sizeof(Slot)));
    }
    size_t const mask = slots - 1;
    for (Slot const& s : slots_) {  // a slot's home comes from its tag alone; the new table has no duplicate
        if (s.page < 0) continue;
        size_t i = static_cast<size_t>(s.tag) & mask;
        while (table[i].page >= 0) i = (i + 1) & mask;
        table[i] = s;
    }
    slots_.swap(table);
    mask_ = mask;
}

void BaseBlockIndex::failPage(PageId page, char const* operation) const {
    throw ContractError(std::string("BaseBlockIndex::") + operation + ": page " + std::to_string(page) +
                        " is out of range [0, " + std::to_string(pageCapacity()) + ")");
}

size_t BaseBlockIndex::probe(BlockHash const& hash, uint32_t tag) const noexcept {
    for (size_t i = homeOf(tag);; i = (i + 1) & mask_) {
        Slot const& s = slots_[i];
        if (s.page < 0 || (s.tag == tag && reverse_[static_cast<size_t>(s.page)] == hash)) return i;
    }
}

BaseBlockIndex::Slot const* BaseBlockIndex::findSlot(BlockHash const& hash) const noexcept {
    Slot const& s = slots_[probe(hash, tagOf(hash))];
    return s.page >= 0 ? &s : nullptr;
}

void BaseBlockIndex::eraseSlot(size_t i) noexcept {
    // Backward shift: pull later members of the run into the hole unless that would put them before their home.
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
        Slot const next = slots_[j];
        if (next.page < 0) break;
        size_t const home = homeOf(next.tag);
        if (((j - home) & mask_) >= ((j - i) & mask_)) {
            slots_[i] = next;
            i = j;
        }
    }
    slots_[i] = Slot{};
    --size_;
}

BaseLookupResult BaseBlockIndex::lookupPrefix(std::vector<BlockHash> const& hashes) const {
    BaseLookupResult result;
    size_t const matched = lookupPrefixInto(hashes.data(), hashes.size(), result.pageIds);
    result.matchedHashes.assign(hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(matched));
    return result;
}

size_t BaseBlockIndex::lookupPrefixInto(BlockHash const* hashes, size_t count, std::vector<PageId>& pages) const {
    size_t matched = 0;
    for (size_t i = 0; i < std::min(count, kPrefetchDistance); ++i) prefetch(hashes[i]);
    for (; matched < count; ++matched) {
        if (matched + kPrefetchDistance < count) prefetch(hashes[matched + kPrefetchDistance]);
        Slot const* slot = findSlot(hashes[matched]);
        if (!slot) break;
        pages.push_back(slot->page);
    }
    return matched;
}

std::optional<PageId> BaseBlockIndex::lookup(BlockHash const& hash) const {
    if (Slot const* slot = findSlot(hash)) return slot->page;
    return std::nullopt;
}

std::optional<BlockHash> BaseBlockIndex::hashOfPage(PageId page) const {
    if (!isMapped(page)) return std::nullopt;
    return reverse_[static_cast<size_t>(page)];
}

BaseInsertResult BaseBlockIndex::insert(BlockHash hash, PageId proposedPage) {
    if (std::optional<BaseInsertResult> const r = tryInsert(hash, proposedPage)) return *r;
    throw ContractError("BaseBlockIndex::insert: page " + std::to_string(proposedPage) +
                        " is already the canonical page of another hash (" +
                        toHex(reverse_[static_cast<size_t>(proposedPage)]) + ")");
}

std::optional<BaseInsertResult> BaseBlockIndex::tryInsert(BlockHash hash, PageId proposedPage) {
    checkPage(proposedPage, "insert");
    uint32_t const tag = tagOf(hash);
    size_t i = probe(hash, tag);
    if (slots_[i].page >= 0) return BaseInsertResult{slots_[i].page, false};
    if (isMapped(proposedPage)) return std::nullopt;
    // Growth first (all-or-nothing), then the writes, which cannot fail. Within the eager part neither grows:
    // at most one mapping per page, and the table holds 2 slots per page.
    if (static_cast<size_t>(proposedPage) >= covered_) growReverse(proposedPage);
    if (2 * (size_ + 1) > slots_.size()) {
        growTable();
        i = probe(hash, tag);
    }
    slots_[i] = Slot{tag, proposedPage};
    ++size_;
    reverse_[static_cast<size_t>(proposedPage)] = hash;
    mapped_[static_cast<size_t>(proposedPage)] = true;
    return BaseInsertResult{proposedPage, true};
}

void BaseBlockIndex::erasePage(PageId page) {
    checkPage(page, "erasePage");
    if (!isMapped(page)) return;
    if (Slot const* slot = findSlot(reverse_[static_cast<size_t>(page)]); slot && slot->page == page)
        eraseSlot(static_cast<size_t>(slot - slots_.data()));
    mapped_[static_cast<size_t>(page)] = false;
}

void BaseBlockIndex::checkInvariants() const {
    if (2 * size_ > slots_.size())
        throw InvariantError("BaseBlockIndex: " + std::to_string(size_) + " mappings in " +
                             std::to_string(slots_.size()) + " slots (load above 1/2)");
    if (reverse_.size() != covered_ || mapped_.size() != covered_ || covered_ > static_cast<size_t>(pageCapacity_))
        throw InvariantError("BaseBlockIndex: reverse map of " + std::to_string(reverse_.size()) + " and " +
                             std::to_string(mapped_.size()) + " pages for a capacity of " +
                             std::to_string(pageCapacity_));
    // One pass around the table, starting after an empty slot (load <= 1/2 guarantees one): a used slot is
    // reachable from its home iff its home lies within the run that began after the last empty slot.
    size_t lastEmpty = 0;
    while (slots_[lastEmpty].page >= 0) ++lastEmpty;
    size_t used = 0;
    size_t emptyBefore = lastEmpty;
    for (size_t step = 1; step <= slots_.size(); ++step) {
        size_t const i = (lastEmpty + step) & mask_;
        Slot const& s = slots_[i];
        if (s.page < 0) {
            emptyBefore = i;
            continue;
        }
        ++used;
        auto fail = [&](std::string const& what) {
            throw InvariantError("BaseBlockIndex: slot " + std::to_string(i) + " (page " + std::to_string(s.page) +
                                 ") " + what);
        };
        if (!isMapped(s.page)) fail("names a page that is not mapped");
        if (s.tag != tagOf(reverse_[static_cast<size_t>(s.page)])) fail("has a tag that is not its hash's");
        if (((i - homeOf(s.tag)) & mask_) >= ((i - emptyBefore) & mask_))
            fail("is cut off from its home slot " + std::to_string(homeOf(s.tag)));
    }
    if (used != size_)
        throw InvariantError("BaseBlockIndex: " + std::to_string(used) + " used slots but a size of " +
                             std::to_string(size_));
    size_t mappedPages = 0;
    for (size_t page = 0; page < mapped_.size(); ++page) {
        if (!mapped_[page]) continue;
        ++mappedPages;
        Slot const* forward = findSlot(reverse_[page]);
        if (!forward || forward->page != static_cast<PageId>(page))
            throw InvariantError("BaseBlockIndex: reverse entry of page " + std::to_string(page) +
                                 " has no matching forward entry");
    }
    if (mappedPages != size_)
        throw InvariantError("BaseBlockIndex: " + std::to_string(size_) + " forward entries but " +
                             std::to_string(mappedPages) + " reverse entries");
}

size_t BaseBlockIndex::memoryBytes() const noexcept {
    return slots_.capacity() * sizeof(Slot) + reverse_.capacity() * sizeof(BlockHash) + mapped_.capacity() / 8;
}

}  // namespace ctxcache
