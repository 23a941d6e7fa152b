// BookkeepingStore: a KV store shared by several replicas, modelled by its bookkeeping alone (issue 27, the
// bookkeeping-only mode): which blocks a store of N pages holds and the least-recently-used order in which it drops
// them. The host tiers of several managers (one per replica) share one, so a fleet can be sized on a trace: a block
// one replica published is found by the others. No bytes and no I/O: a put is complete when it returns, a hit is
// loaded when it is taken. (The store that moves bytes, with deadlines and a worker, is the next part of issue 27.)
//
// Semantics follow a real store (docs/TIERS.md): a put of a block the store holds keeps it as it is (counted as
// skipped, not refreshed: a second put of a key keeps the first value); a put into a full store drops the least
// recently used blocks; a get returns the longest run of the blocks asked for that the store holds and makes them
// the most recent.
//
// Invariants: the index's (host_tier_index.h), with no slot ever writing or pinned between calls; the metrics'
//             resident count is the index's.
// Errors:     a non-positive capacity, a null array with a positive count: ContractError, nothing changed. Metadata
//             that cannot be allocated: OutOfMemoryError from put, nothing written after the failing block.
// Cost:       put and get O(1) expected per block (an index probe; a put may drop one block per block written);
//             metadata grows with the blocks held (host_tier_index.h), so a store of any capacity constructs in
//             O(1).
// Threading:  thread-safe: one mutex around every call, so replicas whose managers live on different threads may
//             share one store (each call is short and never calls out while holding it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/tier/host_tier_index.h"

namespace ctxcache::tier {

struct BookkeepingStoreMetrics {
    int32_t capacityPages = 0;
    uint64_t residentBlocks = 0;  // blocks the store holds now
    uint64_t putCalls = 0;
    uint64_t writtenBlocks = 0;   // blocks put that the store lacked (written)
    uint64_t skippedPuts = 0;     // blocks put that the store already held (kept as they were)
    uint64_t refusedPuts = 0;     // blocks put that found no room (a batch larger than the store)
    uint64_t droppedBlocks = 0;   // blocks dropped to make room (the store's evictions)
    uint64_t getCalls = 0;
    uint64_t hitCalls = 0;        // gets that returned at least one block
    uint64_t hitBlocks = 0;       // blocks returned by gets
};

class BookkeepingStore {
public:
    explicit BookkeepingStore(int32_t capacityPages);
    BookkeepingStore(BookkeepingStore const&) = delete;
    BookkeepingStore& operator=(BookkeepingStore const&) = delete;

    int32_t capacity() const noexcept { return capacity_; }
    // Puts hashes[0..count): each block the store lacks is written (the batch's first block ends the least
    // recent of it, its last the most recent), dropping the least recent blocks for room; returns the number
    // written.
    size_t put(BlockHash const* hashes, size_t count);
    // The longest run hashes[0..k) the store holds (k <= count); the run's blocks become the most recent.
    size_t get(BlockHash const* hashes, size_t count);
    // The same run's length, changing nothing.
    size_t probe(BlockHash const* hashes, size_t count) const;
    // Drops every block.
    void clear();

    BookkeepingStoreMetrics metrics() const;
    size_t memoryBytes() const;
    void checkInvariants() const;

private:
    int32_t capacity_;
    mutable std::mutex mutex_;
    HostTierIndex index_;
    BookkeepingStoreMetrics metrics_;
    std::vector<int32_t> slots_, held_;  // scratch of the running put or get (capacity kept)
};

}  // namespace ctxcache::tier
