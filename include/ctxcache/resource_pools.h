// ResourcePools: fixed-capacity id pools for the four resource types (base KV pages, draft KV pages,
// recurrent snapshots, partial-KV snapshots). Ids only; the bytes live in the device layer.
//
// Invariants: an id is on its pool's free list  <=>  activeRefs == 0 && cacheRefs == 0.
//             Free lists are FIFO: allocation takes the oldest free id, release appends, so a freed id is
//             reused last. The free list starts as every id in ascending order, so it is always the ids never
//             handed out (ascending, from issuedCount(t) on, kept implicitly as that counter) followed by the
//             freed ids in the order they were freed (a ring). A new id starts with activeRefs = 1,
//             cacheRefs = 0.
//             Allocation across types is all-or-nothing.
//             reclaimableCount(t) = ids of type t with activeRefs == 0 && cacheRefs > 0, i.e. exactly what
//             evicting every record would return to the free list (kept incrementally for the planner).
// Errors:     a ref added to a free id, a ref dropped below zero or past INT32_MAX, an id out of range:
//             ContractError, nothing changed. Metadata that cannot be allocated: OutOfMemoryError (a
//             std::bad_alloc naming the bytes), nothing changed.
// Cost:       every operation O(1) per id. Memory: 12 bytes per id, allocated at construction for the first
//             min(capacity, kEagerMetadataIds) ids (so such a pool never allocates afterwards) and beyond that
//             grown geometrically as ids are first handed out (amortised O(1) per id): O(ids ever handed out),
//             never O(capacity): a pool of any capacity up to INT32_MAX constructs in at most 12 MiB.
// Threading:  single writer, no internal locks (the manager's contract).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "ctxcache/detail/huge_page_allocator.h"
#include "ctxcache/types.h"

namespace ctxcache {

class ResourcePools {
public:
    explicit ResourcePools(ResourceDemand capacities);

    // All-or-nothing: every type of `demand` or nothing. nullopt when any pool is short.
    std::optional<std::vector<ResourceId>> allocate(ResourceDemand const& demand);
    // Appends to `resources` in the order base, draft, recurrent, partial; false (nothing appended) when short.
    bool allocateInto(ResourceDemand const& demand, std::vector<ResourceId>& resources);
    // Appends `count` ids of one type; false (nothing appended) when short.
    bool allocateIds(ResourceType type, int32_t count, std::vector<int32_t>& ids);

    struct RefCounts {
        int32_t active = 0;
        int32_t cache = 0;
    };

    // The refcount operations are inline (they run once per page on every request's path); their error paths
    // are out of line.
    void addActiveRef(ResourceId const& id) {
        Slot& s = slot(id, "addActiveRef");
        if (s.active == 0 && s.cache == 0) failRef(id, "addActiveRef", "is free");
        if (s.active == std::numeric_limits<int32_t>::max()) failRef(id, "addActiveRef", "active refcount overflow");
        if (s.active++ == 0) --pools_[index(id.type)].reclaimable;
    }
    void releaseActiveRef(ResourceId const& id) {
        Slot& s = slot(id, "releaseActiveRef");
        if (s.active == 0) failRef(id, "releaseActiveRef", "has no active reference");
        if (--s.active == 0) {
            Pool& pool = pools_[index(id.type)];
            if (s.cache == 0) pushFree(pool, id.index);
            else ++pool.reclaimable;
        }
    }
    void addCacheRef(ResourceId const& id) {
        Slot& s = slot(id, "addCacheRef");
        if (s.active == 0 && s.cache == 0) failRef(id, "addCacheRef", "is free");
        if (s.cache == std::numeric_limits<int32_t>::max()) failRef(id, "addCacheRef", "cache refcount overflow");
        ++s.cache;
        // active > 0 here unless the id already had cache refs: reclaimable does not change either way.
    }
    // Asks for an id's refcounts ahead of its refcount operation (a loop over a page path issues it a few pages
    // ahead, so the slots' cache misses overlap). Ids without metadata are ignored. No effect on the state.
    void prefetch(ResourceType type, int32_t index) const noexcept {
        Pool const& pool = pools_[static_cast<int>(type)];
        if (static_cast<uint32_t>(index) < static_cast<uint32_t>(pool.covered))
            __builtin_prefetch(pool.slots.data() + index, 1);
    }
    // The same refcount operation on every id of a path of one type, the slots asked for kPrefetchAhead ids early.
    static constexpr size_t kPrefetchAhead = 8;
    template <class Op>
    void forEachPrefetched(ResourceType type, PageId const* ids, size_t count, Op&& op) {
        for (size_t i = 0; i < std::min(count, kPrefetchAhead); ++i) prefetch(type, ids[i]);
        for (size_t i = 0; i < count; ++i) {
            if (i + kPrefetchAhead < count) prefetch(type, ids[i + kPrefetchAhead]);
            op(ResourceId{type, ids[i]});
        }
    }
    // Returns the counts it leaves (both zero: the id went back to its free list).
    RefCounts releaseCacheRef(ResourceId const& id) {
        Slot& s = slot(id, "releaseCacheRef");
        if (s.cache == 0) failRef(id, "releaseCacheRef", "has no cache reference");
        if (--s.cache == 0 && s.active == 0) {
            Pool& pool = pools_[index(id.type)];
            --pool.reclaimable;
            pushFree(pool, id.index);
        }
        return s;
    }

    RefCounts refCounts(ResourceId const& id) const { return slot(id, "refCounts"); }
    int32_t activeRefCount(ResourceId const& id) const { return slot(id, "activeRefCount").active; }
    int32_t cacheRefCount(ResourceId const& id) const { return slot(id, "cacheRefCount").cache; }
    bool isFree(ResourceId const& id) const {
        Slot const& s = slot(id, "isFree");
        return s.active == 0 && s.cache == 0;
    }

    int32_t freeCount(ResourceType type) const noexcept { return pools_[index(type)].freeCount; }
    // Ids of one type handed out at least once: [0, issuedCount) (the ids with metadata); every id from it up to
    // the capacity is free and was never used.
    int32_t issuedCount(ResourceType type) const noexcept { return pools_[index(type)].issued; }
    int32_t capacity(ResourceType type) const noexcept { return pools_[index(type)].capacity; }
    int32_t reclaimableCount(ResourceType type) const noexcept { return pools_[index(type)].reclaimable; }
    // What an acquire (or grow) could obtain of one type right now: the free ids plus the reclaimable ones, which
    // eviction would free. Ids pinned records or leases hold (active refs) are not counted. An acquire's hit pins
    // its shared pages first, so a hit on reclaimable pages lowers what is left for its private pages. O(1).
    int32_t acquirableCount(ResourceType type) const noexcept {
        Pool const& pool = pools_[index(type)];
        return pool.freeCount + pool.reclaimable;  // <= capacity: no overflow
    }
    ResourceDemand capacities() const noexcept;
    bool canAllocate(ResourceDemand const& demand) const noexcept;
    // Whether `demand` fits in the free ids plus the reclaimable ones: what evicting every record would free, so
    // what eviction can make room for (exact: the reclaimable counts are). False for a negative demand.
    bool canAllocateOnceReclaimed(ResourceDemand const& demand) const noexcept;
    bool validId(ResourceId const& id) const noexcept {
        return id.index >= 0 && id.index < pools_[index(id.type)].capacity;
    }

    // Free ids of one type in allocation order (oldest first). O(free ids); for tests.
    std::vector<int32_t> freeList(ResourceType type) const;
    // The first min(count, freeCount) of them into out[0..): returns how many it wrote. O(what it writes).
    size_t freeListInto(ResourceType type, int32_t* out, size_t count) const noexcept;
    // Throws InvariantError unless the free lists hold exactly the ids with both counts zero, once each, and
    // the reclaimable counters match the slots.
    void checkInvariants() const;
    // Bytes of heap this object owns.
    size_t memoryBytes() const noexcept;

private:
    using Slot = RefCounts;
    struct Pool {
        int32_t capacity = 0;
        int32_t issued = 0;      // ids [0, issued) were handed out; [issued, capacity) never were (all free)
        int32_t freedHead = 0;   // index in `freedRing` of the oldest freed id
        int32_t freedCount = 0;  // freed ids, after the never-issued ones in allocation order
        int32_t freeCount = 0;   // capacity - issued + freedCount, kept (canAllocate reads it on every call)
        int32_t covered = 0;     // ids with metadata: slots.size() == freedRing.size(), kept for the checks
        int32_t reclaimable = 0;
        std::vector<Slot, detail::HugePageAllocator<Slot>>
            slots;  // size >= issued; the entries from `issued` on are zero
        std::vector<int32_t, detail::HugePageAllocator<int32_t>>
            freedRing;  // circular FIFO, as long as `slots` (freedCount <= issued)
    };

    static int index(ResourceType type) noexcept { return static_cast<int>(type); }
    Slot& slot(ResourceId const& id, char const* operation) {
        Pool& pool = pools_[index(id.type)];
        if (static_cast<uint32_t>(id.index) < static_cast<uint32_t>(pool.covered))
            return pool.slots[static_cast<size_t>(id.index)];
        return unissuedSlot(id, operation);
    }
    // An id without metadata: out of range (ContractError), or never issued: then its counts are zero, and every
    // refcount operation on it fails on the returned zero slot before it writes anything.
    Slot& unissuedSlot(ResourceId const& id, char const* operation);
    Slot const& slot(ResourceId const& id, char const* operation) const {
        return const_cast<ResourcePools*>(this)->slot(id, operation);
    }
    [[noreturn]] void failOutOfRange(ResourceId const& id, char const* operation) const;
    [[noreturn]] static void failRef(ResourceId const& id, char const* operation, char const* what);
    // Makes room for `count` more ids to be handed out (the never-issued ones among them get metadata): grows
    // `slots` and `freedRing` geometrically up to the capacity. Strong guarantee (OutOfMemoryError). Inline: on
    // the allocation path of every request, where it almost always finds the room there already.
    static void reserveIssue(Pool& pool, int32_t count, ResourceType type) {
        if (static_cast<int64_t>(pool.issued) + count > pool.covered) growForIssue(pool, count, type);
    }
    static void growForIssue(Pool& pool, int32_t count, ResourceType type);
    static void grow(Pool& pool, size_t size, ResourceType type);
    // Takes `count` ids (count <= freeCount, room reserved by reserveIssue): the never-issued first, then the
    // oldest freed. Cannot fail.
    static void takeFree(Pool& pool, int32_t count, std::vector<int32_t>* ids, std::vector<ResourceId>* resources,
                         ResourceType type) noexcept;
    static void pushFree(Pool& pool, int32_t id) noexcept {
        int64_t tail = static_cast<int64_t>(pool.freedHead) + pool.freedCount;  // < 2 * covered
        if (tail >= pool.covered) tail -= pool.covered;
        pool.freedRing[static_cast<size_t>(tail)] = id;
        ++pool.freedCount;
        ++pool.freeCount;
    }

    std::array<Pool, kResourceTypeCount> pools_;
    Slot unissued_{};  // what unissuedSlot returns: never written (every operation that could fails first)
};

}  // namespace ctxcache
