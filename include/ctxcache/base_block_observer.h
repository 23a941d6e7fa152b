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
//             are valid only during the call. For an EAGLE record (a draft page per base block), each run comes
//             with its record's draft pages (DraftRun), which still hold their bytes during the call too.
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

// The draft side of a run of an EAGLE record's blocks. Draft page i holds the draft KV of block i's positions; the
// draft KV at the block's last position reads the first token of block i + 1, so draft page i is determined by the
// blocks up to i + 1 (block i + 1's hash names it), not by block i's. The run's parent (the callback's parent
// hash) comes with its base page and the record's draft page of it, which the run's first block determines.
struct DraftRun {
    PageId const* pages = nullptr;  // pages[i]: the record's draft page of the run's block i; null: no draft path
    PageId parentBase = -1;         // the block before the run: its canonical base page (-1: root or unknown)
    PageId parentDraft = -1;        // ... and the record's draft page of it (-1: none)
};

class BaseBlockObserver {
public:
    virtual ~BaseBlockObserver() = default;
    // One call per run of consecutive blocks of one path (a publication's newly canonical blocks, an evicted
    // record's or trimmed tail's removed blocks), in path order: pages[i] is (was) the canonical page of hashes[i].
    // root: the run starts the path; else parent is the block before it when the manager still knows it (null:
    // unknown). tokens (stored only): the run's tokens, pageSize each, or null when the publication carried none.
    // Each call comes after the manager's own KV events for the same blocks are in its stream. `draft`: the
    // record's draft pages beside the run (DraftRun; empty for a record without a draft path).
    virtual void blocksStored(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                              BlockHash const* parent, int32_t const* tokens, DraftRun const& draft) noexcept = 0;
    virtual void blocksRemoved(BlockHash const* hashes, PageId const* pages, size_t count, bool root,
                               BlockHash const* parent, DraftRun const& draft) noexcept = 0;
};

}  // namespace ctxcache
