// BaseBlockObserver: what a layer above the manager (a host-memory tier) learns about the canonical base block
// index as it changes, during the manager's own calls: which blocks a publication made canonical, and which blocks
// eviction is about to return to the free pool. The manager holds at most one observer, not owned
// (ContextCacheManager::setBaseBlockObserver).
//
// Invariants: blocksStored lists blocks in the order of their publication's path, each newly mapped by that
//             publication (a block already canonical is not listed again), after the record holding them has
//             committed; blocksRemoved lists the blocks of one evicted record (or trimmed tail) whose index entries
//             eviction erased, in path order, before any of their pages can be allocated again: the pages still
//             hold those blocks' bytes until a later allocation hands them out. clear() reports nothing (a reset
//             is not an eviction). Spans are valid only during the call.
// Errors:     both callbacks are noexcept: an observer that cannot follow (out of memory) drops what it could not
//             take, which costs reuse, never the manager's state.
// Threading:  called on the manager's thread (its single writer), inside the manager's call; an observer must not
//             call back into the manager.
#pragma once

#include <cstddef>

#include "ctxcache/block_hash.h"
#include "ctxcache/types.h"

namespace ctxcache {

class BaseBlockObserver {
public:
    virtual ~BaseBlockObserver() = default;
    // pages[i] is the canonical page of hashes[i].
    virtual void blocksStored(BlockHash const* hashes, PageId const* pages, size_t count) noexcept = 0;
    virtual void blocksRemoved(BlockHash const* hashes, PageId const* pages, size_t count) noexcept = 0;
};

}  // namespace ctxcache
