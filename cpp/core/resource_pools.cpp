// ResourcePools: per type, a slot array of {active, cache} refcounts, a counter of the ids ever handed out (the
// never-issued ids are the head of the FIFO free list, implicitly) and a FIFO ring of the freed ids, plus the
// reclaimable count kept on every refcount transition. The slot array and the ring cover the issued ids: sized
// for min(capacity, kEagerMetadataIds) at construction, grown geometrically (all-or-nothing, before any id is
// taken) beyond that. Every operation is O(1) per id, and multi-type allocation is all-or-nothing. Full contract
// (invariants, errors, threading): include/ctxcache/resource_pools.h.

#include "ctxcache/resource_pools.h"

#include <algorithm>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {
namespace {

std::string describe(ResourceId const& id) { return std::string(toString(id.type)) + " " + std::to_string(id.index); }

constexpr size_t kBytesPerId = sizeof(ResourcePools::RefCounts) + sizeof(int32_t);

}  // namespace

ResourcePools::ResourcePools(ResourceDemand capacities) {
    if (!capacities.isNonNegative()) throw ContractError("ResourcePools: capacities must be non-negative");
    for (ResourceType type : kAllResourceTypes) {
        Pool& pool = pools_[index(type)];
        pool.capacity = capacities.get(type);
        pool.freeCount = pool.capacity;
        grow(pool, static_cast<size_t>(std::min(pool.capacity, kEagerMetadataIds)), type);
    }
}

void ResourcePools::grow(Pool& pool, size_t size, ResourceType type) {
    std::vector<Slot, detail::HugePageAllocator<Slot>> slots;
    std::vector<int32_t, detail::HugePageAllocator<int32_t>> ring;
    try {
        slots.reserve(size);
        ring.resize(size);
    } catch (std::bad_alloc const&) {
        throw OutOfMemoryError(describeAllocationFailure(std::string("ResourcePools: metadata for ") +
                                                             std::to_string(size) + " ids of the " + toString(type) +
                                                             " pool (capacity " + std::to_string(pool.capacity) + ")",
                                                         size * kBytesPerId));
    }
    // Nothing below allocates: the old contents move over, the freed ids linearised from the ring's head.
    slots.assign(pool.slots.begin(), pool.slots.end());
    slots.resize(size);
    size_t const oldRing = pool.freedRing.size();
    for (size_t i = 0; i < static_cast<size_t>(pool.freedCount); ++i) {
        size_t const from = static_cast<size_t>(pool.freedHead) + i;
        ring[i] = pool.freedRing[from < oldRing ? from : from - oldRing];
    }
    pool.slots.swap(slots);
    pool.freedRing.swap(ring);
    pool.freedHead = 0;
    pool.covered = static_cast<int32_t>(size);
}

void ResourcePools::growForIssue(Pool& pool, int32_t count, ResourceType type) {
    int64_t const fresh = std::min<int64_t>(count, pool.capacity - pool.issued);
    size_t const needed = static_cast<size_t>(pool.issued + fresh);
    if (needed <= pool.slots.size()) return;
    grow(pool, std::min(static_cast<size_t>(pool.capacity), std::max(needed, 2 * pool.slots.size())), type);
}

ResourcePools::Slot& ResourcePools::unissuedSlot(ResourceId const& id, char const* operation) {
    if (!validId(id)) failOutOfRange(id, operation);
    return unissued_;
}

ResourceDemand ResourcePools::capacities() const noexcept {
    ResourceDemand result;
    for (ResourceType type : kAllResourceTypes) result.at(type) = capacity(type);
    return result;
}

bool ResourcePools::canAllocate(ResourceDemand const& demand) const noexcept {
    if (!demand.isNonNegative()) return false;
    for (ResourceType type : kAllResourceTypes)
        if (demand.get(type) > freeCount(type)) return false;
    return true;
}

bool ResourcePools::canAllocateOnceReclaimed(ResourceDemand const& demand) const noexcept {
    if (!demand.isNonNegative()) return false;
    for (ResourceType type : kAllResourceTypes)
        if (demand.get(type) > freeCount(type) + reclaimableCount(type)) return false;
    return true;
}

void ResourcePools::takeFree(Pool& pool, int32_t count, std::vector<int32_t>* ids, std::vector<ResourceId>* resources,
                             ResourceType type) noexcept {
    auto take = [&](int32_t id) {
        pool.slots[static_cast<size_t>(id)].active = 1;
        if (ids) ids->push_back(id);  // room reserved by the caller: cannot throw
        if (resources) resources->push_back(ResourceId{type, id});
    };
    int32_t const fresh = std::min(count, pool.capacity - pool.issued);
    for (int32_t i = 0; i < fresh; ++i) take(pool.issued++);
    for (int32_t i = fresh; i < count; ++i) {
        take(pool.freedRing[static_cast<size_t>(pool.freedHead)]);
        pool.freedHead = pool.freedHead + 1 == pool.covered ? 0 : pool.freedHead + 1;
    }
    pool.freedCount -= count - fresh;
    pool.freeCount -= count;
}

bool ResourcePools::allocateInto(ResourceDemand const& demand, std::vector<ResourceId>& resources) {
    if (!demand.isNonNegative()) throw ContractError("ResourcePools::allocateInto: demand must be non-negative");
    if (!canAllocate(demand)) return false;
    // Reserve first so that push_back cannot throw half way (all-or-nothing even under bad_alloc).
    int64_t total = 0;
    for (ResourceType type : kAllResourceTypes) total += demand.get(type);
    resources.reserve(resources.size() + static_cast<size_t>(total));
    for (ResourceType type : kAllResourceTypes) reserveIssue(pools_[index(type)], demand.get(type), type);
    for (ResourceType type : kAllResourceTypes)
        if (int32_t const count = demand.get(type); count > 0)
            takeFree(pools_[index(type)], count, nullptr, &resources, type);
    return true;
}

std::optional<std::vector<ResourceId>> ResourcePools::allocate(ResourceDemand const& demand) {
    std::vector<ResourceId> resources;
    if (!allocateInto(demand, resources)) return std::nullopt;
    return resources;
}

bool ResourcePools::allocateIds(ResourceType type, int32_t count, std::vector<int32_t>& ids) {
    if (count < 0) throw ContractError("ResourcePools::allocateIds: count must be non-negative");
    Pool& pool = pools_[index(type)];
    if (count > freeCount(type)) return false;
    ids.reserve(ids.size() + static_cast<size_t>(count));
    reserveIssue(pool, count, type);
    takeFree(pool, count, &ids, nullptr, type);
    return true;
}

void ResourcePools::failOutOfRange(ResourceId const& id, char const* operation) const {
    throw ContractError(std::string("ResourcePools::") + operation + ": " + describe(id) + " is out of range [0, " +
                        std::to_string(capacity(id.type)) + ")");
}

void ResourcePools::failRef(ResourceId const& id, char const* operation, char const* what) {
    throw ContractError(std::string("ResourcePools::") + operation + ": " + describe(id) + " " + what);
}

std::vector<int32_t> ResourcePools::freeList(ResourceType type) const {
    std::vector<int32_t> ids(static_cast<size_t>(freeCount(type)));
    ids.resize(freeListInto(type, ids.data(), ids.size()));
    return ids;
}

size_t ResourcePools::freeListInto(ResourceType type, int32_t* out, size_t count) const noexcept {
    Pool const& pool = pools_[index(type)];
    size_t written = 0;
    for (int32_t id = pool.issued; id < pool.capacity && written < count; ++id) out[written++] = id;
    size_t const ring = pool.freedRing.size();
    for (size_t i = 0; i < static_cast<size_t>(pool.freedCount) && written < count; ++i) {
        size_t const at = static_cast<size_t>(pool.freedHead) + i;
        out[written++] = pool.freedRing[at < ring ? at : at - ring];
    }
    return written;
}

void ResourcePools::checkInvariants() const {
    for (ResourceType type : kAllResourceTypes) {
        Pool const& pool = pools_[index(type)];
        std::string const what = std::string("ResourcePools (") + toString(type) + "): ";
        if (pool.issued < 0 || pool.issued > pool.capacity)
            throw InvariantError(what + "issued count " + std::to_string(pool.issued) + " outside [0, capacity]");
        if (pool.slots.size() < static_cast<size_t>(pool.issued) || pool.freedRing.size() != pool.slots.size())
            throw InvariantError(what + "metadata for " + std::to_string(pool.slots.size()) + " ids (ring " +
                                 std::to_string(pool.freedRing.size()) + ") but " + std::to_string(pool.issued) +
                                 " issued");
        if (pool.freedCount < 0 || pool.freedCount > pool.issued)
            throw InvariantError(what + "freed count " + std::to_string(pool.freedCount) + " outside [0, issued]");
        if (pool.freeCount != pool.capacity - pool.issued + pool.freedCount)
            throw InvariantError(what + "free count " + std::to_string(pool.freeCount) +
                                 " != " + std::to_string(pool.capacity - pool.issued) + " never issued + " +
                                 std::to_string(pool.freedCount) + " freed");
        if (static_cast<size_t>(pool.covered) != pool.slots.size())
            throw InvariantError(what + "covered count " + std::to_string(pool.covered) +
                                 " != " + std::to_string(pool.slots.size()) + " slots");
        if (pool.freedCount > 0 && (pool.freedHead < 0 || static_cast<size_t>(pool.freedHead) >= pool.freedRing.size()))
            throw InvariantError(what + "freed ring head " + std::to_string(pool.freedHead) + " out of range");
        // The never-issued ids are free by construction; the issued ones are free exactly when freed.
        std::vector<char> onFreeList(static_cast<size_t>(pool.issued), 0);
        size_t const ring = pool.freedRing.size();
        for (size_t i = 0; i < static_cast<size_t>(pool.freedCount); ++i) {
            size_t const at = static_cast<size_t>(pool.freedHead) + i;
            int32_t const id = pool.freedRing[at < ring ? at : at - ring];
            if (id < 0 || id >= pool.issued)
                throw InvariantError(what + "free list holds invalid id " + std::to_string(id));
            if (onFreeList[static_cast<size_t>(id)]++)
                throw InvariantError(what + "id " + std::to_string(id) + " is on the free list twice");
        }
        int32_t reclaimable = 0;
        for (size_t id = 0; id < pool.slots.size(); ++id) {
            Slot const& s = pool.slots[id];
            std::string const name = what + "id " + std::to_string(id);
            if (id >= static_cast<size_t>(pool.issued)) {
                if (s.active != 0 || s.cache != 0) throw InvariantError(name + " was never issued but has refcounts");
                continue;
            }
            if (s.active < 0 || s.cache < 0) throw InvariantError(name + " has a negative refcount");
            bool const free = s.active == 0 && s.cache == 0;
            if (free != static_cast<bool>(onFreeList[id]))
                throw InvariantError(name + (free ? " is unreferenced but not on the free list"
                                                  : " is referenced but on the free list"));
            if (s.active == 0 && s.cache > 0) ++reclaimable;
        }
        if (reclaimable != pool.reclaimable)
            throw InvariantError(what + "reclaimable counter " + std::to_string(pool.reclaimable) +
                                 " != " + std::to_string(reclaimable));
    }
}

size_t ResourcePools::memoryBytes() const noexcept {
    size_t bytes = 0;
    for (Pool const& pool : pools_)
        bytes += pool.slots.capacity() * sizeof(Slot) + pool.freedRing.capacity() * sizeof(int32_t);
    return bytes;
}

}  // namespace ctxcache
