// BaseBlockObserver: what a layer above the manager (a host-memory tier) learns about the canonical base block
// index as it changes, during the manager's own calls: which blocks a publication made canonical, and which blocks
// eviction is about to return to the free pool. The manager holds at most one observer, not owned
// (ContextCacheManager::setBaseBlockObserver).
//
// Invariants: blocksStored lists blocks in the order of their publication's path, each newly mapped by that
//             publication (a block already canonical is not listed again), after the record holding them has
//             committed; blocksRemoved lists the blocks of one evicted record (or trimmed tail) whose index entries
//             eviction erased, in path order, before any of their pages can be allocated again: the pages still
//             hold those blocks' bytes until a later allocation hands them out. Both come in runs of consecutive
//             path blocks, each with what precedes it. clear() reports nothing (a reset is not an eviction). Spans
//             are valid only during the call.
// Errors:     both callbacks are noexcept: an observer that cannot follow (out of memory) drops what it could not
//             take, which costs reuse, never the manager's state.
// Threading:  called on the manager's thread (its single writer), inside the manager's call; an observer must not
//             call back into the manager.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ctxcache/block_hash.h"
#include "ctxcache/types.h"

namespace ctxcache {

class BaseBlockObserver {
public:
    virtual ~BaseBlockObserver() = default;
    // One call per run of consecutive blocks of one path (a publication's newly canonical blocks, an evicted
    // record's or trimmed tail's removed blocks), in path order: pages[i] is (was) the canonical page of hashes[i].
    // root: the run starts the path; else parent is the block before it when the manager still knows it (null:
    // unknown). tokens (stored only): the run's tokens, pageSize each, or null when the publication carried none.
    // Each call comes after the manager's own KV events for the same blocks are in its stream.
    virtual void blocksStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                              BlockHash const* parent, int32_t const* tokens) noexcept = 0;
    virtual void blocksRemoved(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                               BlockHash const* parent) noexcept = 0;
};

}  // namespace ctxcache
