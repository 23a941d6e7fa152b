// BaseBlockIndex: the canonical hash -> base page map (a flat hash table) and its page -> hash reverse array.
// insert() is first-committer-wins and changes nothing before its one allocation; erasePage() removes the forward
// entry only if it still names that page. Full contract (invariants, errors, cost, threading):
// include/ctxcache/base_block_index.h.

#include "ctxcache/base_block_index.h"

#include <algorithm>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {

BaseBlockIndex::BaseBlockIndex(int32_t pageCapacity) {
    if (pageCapacity < 0) throw ContractError("BaseBlockIndex: pageCapacity must be non-negative");
    reverse_.resize(static_cast<size_t>(pageCapacity));
    mapped_.resize(static_cast<size_t>(pageCapacity), false);
}

void BaseBlockIndex::checkPage(PageId page, char const* operation) const {
    if (page < 0 || page >= pageCapacity())
        throw ContractError(std::string("BaseBlockIndex::") + operation + ": page " + std::to_string(page) +
                            " is out of range [0, " + std::to_string(pageCapacity()) + ")");
}

BaseLookupResult BaseBlockIndex::lookupPrefix(std::vector<BlockHash> const& hashes) const {
    BaseLookupResult result;
    size_t const matched = lookupPrefixInto(hashes.data(), hashes.size(), result.pageIds);
    result.matchedHashes.assign(hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(matched));
    return result;
}

size_t BaseBlockIndex::lookupPrefixInto(BlockHash const* hashes, size_t count, std::vector<PageId>& pages) const {
    // The chain is known up front: keep kPrefetchDistance probes in flight. Past the first miss at most that
    // many slots were loaded in vain.
    size_t const ahead = std::min(count, detail::kPrefetchDistance);
    for (size_t i = 0; i < ahead; ++i) forward_.prefetch(hashes[i]);
    size_t matched = 0;
    for (; matched < count; ++matched) {
        if (matched + detail::kPrefetchDistance < count) forward_.prefetch(hashes[matched + detail::kPrefetchDistance]);
        PageId const* page = forward_.find(hashes[matched]);
        if (!page) break;
        pages.push_back(*page);
    }
    return matched;
}

std::optional<PageId> BaseBlockIndex::lookup(BlockHash const& hash) const {
    if (PageId const* page = forward_.find(hash)) return *page;
    return std::nullopt;
}

std::optional<BlockHash> BaseBlockIndex::hashOfPage(PageId page) const {
    if (page < 0 || page >= pageCapacity() || !mapped_[static_cast<size_t>(page)]) return std::nullopt;
    return reverse_[static_cast<size_t>(page)];
}

BaseInsertResult BaseBlockIndex::insert(BlockHash hash, PageId proposedPage) {
    checkPage(proposedPage, "insert");
    if (PageId const* existing = forward_.find(hash)) return {*existing, false};
    if (mapped_[static_cast<size_t>(proposedPage)])
        throw ContractError("BaseBlockIndex::insert: page " + std::to_string(proposedPage) +
                            " is already the canonical page of another hash (" +
                            toHex(reverse_[static_cast<size_t>(proposedPage)]) + ")");
    forward_.tryEmplace(hash, proposedPage);  // the only allocation; nothing was changed before it
    reverse_[static_cast<size_t>(proposedPage)] = hash;
    mapped_[static_cast<size_t>(proposedPage)] = true;
    return {proposedPage, true};
}

void BaseBlockIndex::erasePage(PageId page) {
    checkPage(page, "erasePage");
    if (!mapped_[static_cast<size_t>(page)]) return;
    BlockHash const hash = reverse_[static_cast<size_t>(page)];
    PageId const* forward = forward_.find(hash);
    if (forward && *forward == page) forward_.erase(hash);
    mapped_[static_cast<size_t>(page)] = false;
}

void BaseBlockIndex::checkInvariants() const {
    size_t mappedPages = 0;
    for (size_t page = 0; page < mapped_.size(); ++page) {
        if (!mapped_[page]) continue;
        ++mappedPages;
        PageId const* forward = forward_.find(reverse_[page]);
        if (!forward || *forward != static_cast<PageId>(page))
            throw InvariantError("BaseBlockIndex: reverse entry of page " + std::to_string(page) +
                                 " has no matching forward entry");
    }
    if (mappedPages != forward_.size())
        throw InvariantError("BaseBlockIndex: " + std::to_string(forward_.size()) + " forward entries but " +
                             std::to_string(mappedPages) + " reverse entries");
}

size_t BaseBlockIndex::memoryBytes() const noexcept {
    return forward_.memoryBytes() + reverse_.capacity() * sizeof(BlockHash) + mapped_.capacity() / 8;
}

}  // namespace ctxcache
