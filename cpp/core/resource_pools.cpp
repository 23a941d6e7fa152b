// ResourcePools: per type, a slot array of {active, cache} refcounts and a FIFO free ring (allocation takes the
// head, a freed id goes to the tail), plus the reclaimable count kept on every refcount transition. The pools'
// storage is allocated in the constructor; every operation is O(1) per id, and multi-type allocation is
// all-or-nothing. Full contract (invariants, errors, threading): include/ctxcache/resource_pools.h.

#include "ctxcache/resource_pools.h"

#include <string>

#include "ctxcache/errors.h"

namespace ctxcache {
namespace {

std::string describe(ResourceId const& id) { return std::string(toString(id.type)) + " " + std::to_string(id.index); }

}  // namespace

ResourcePools::ResourcePools(ResourceDemand capacities) {
    if (!capacities.isNonNegative()) throw ContractError("ResourcePools: capacities must be non-negative");
    for (ResourceType type : kAllResourceTypes) {
        Pool& pool = pools_[index(type)];
        pool.capacity = capacities.get(type);
        pool.slots.assign(static_cast<size_t>(pool.capacity), Slot{});
        pool.freeRing.resize(static_cast<size_t>(pool.capacity));
        for (int32_t i = 0; i < pool.capacity; ++i) pool.freeRing[static_cast<size_t>(i)] = i;
        pool.freeHead = 0;
        pool.freeCount = pool.capacity;
    }
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
                             ResourceType type) {
    for (int32_t i = 0; i < count; ++i) {
        int32_t const id = pool.freeRing[static_cast<size_t>(pool.freeHead)];
        pool.freeHead = pool.freeHead + 1 == pool.capacity ? 0 : pool.freeHead + 1;
        Slot& s = pool.slots[static_cast<size_t>(id)];
        s.active = 1;
        if (ids) ids->push_back(id);
        if (resources) resources->push_back(ResourceId{type, id});
    }
    pool.freeCount -= count;
}

bool ResourcePools::allocateInto(ResourceDemand const& demand, std::vector<ResourceId>& resources) {
    if (!demand.isNonNegative()) throw ContractError("ResourcePools::allocateInto: demand must be non-negative");
    if (!canAllocate(demand)) return false;
    // Reserve first so that push_back cannot throw half way (all-or-nothing even under bad_alloc).
    int64_t total = 0;
    for (ResourceType type : kAllResourceTypes) total += demand.get(type);
    resources.reserve(resources.size() + static_cast<size_t>(total));
    for (ResourceType type : kAllResourceTypes)
        takeFree(pools_[index(type)], demand.get(type), nullptr, &resources, type);
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
    if (count > pool.freeCount) return false;
    ids.reserve(ids.size() + static_cast<size_t>(count));
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
    Pool const& pool = pools_[index(type)];
    std::vector<int32_t> ids;
    ids.reserve(static_cast<size_t>(pool.freeCount));
    for (int32_t i = 0; i < pool.freeCount; ++i)
        ids.push_back(pool.freeRing[static_cast<size_t>((pool.freeHead + i) % pool.capacity)]);
    return ids;
}

void ResourcePools::checkInvariants() const {
    for (ResourceType type : kAllResourceTypes) {
        Pool const& pool = pools_[index(type)];
        std::string const what = std::string("ResourcePools (") + toString(type) + "): ";
        if (pool.freeCount < 0 || pool.freeCount > pool.capacity)
            throw InvariantError(what + "free count " + std::to_string(pool.freeCount) + " outside [0, capacity]");
        std::vector<char> onFreeList(static_cast<size_t>(pool.capacity), 0);
        for (int32_t id : freeList(type)) {
            if (id < 0 || id >= pool.capacity)
                throw InvariantError(what + "free list holds invalid id " + std::to_string(id));
            if (onFreeList[static_cast<size_t>(id)]++)
                throw InvariantError(what + "id " + std::to_string(id) + " is on the free list twice");
        }
        int32_t reclaimable = 0;
        for (int32_t id = 0; id < pool.capacity; ++id) {
            Slot const& s = pool.slots[static_cast<size_t>(id)];
            if (s.active < 0 || s.cache < 0)
                throw InvariantError(what + "id " + std::to_string(id) + " has a negative refcount");
            bool const free = s.active == 0 && s.cache == 0;
            if (free != static_cast<bool>(onFreeList[static_cast<size_t>(id)]))
                throw InvariantError(
                    what + "id " + std::to_string(id) +
                    (free ? " is unreferenced but not on the free list" : " is referenced but on the free list"));
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
        bytes += pool.slots.capacity() * sizeof(Slot) + pool.freeRing.capacity() * sizeof(int32_t);
    return bytes;
}

}  // namespace ctxcache
