// ctxcache core vocabulary: page and record ids, the four resource types, typed resource ids and demands.
//
// Invariants: a PageId names one K/V page pair in ONE typed pool (base and draft pools have independent id
//             spaces); RecordId 0 means "no record" and live ids start at 1 and only increase.
// Threading:  plain values; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace ctxcache {

using PageId = int32_t;
using RecordId = uint64_t;

inline constexpr PageId kUnusedPageEntry = -1;
inline constexpr RecordId kNoRecord = 0;

// Per-id metadata (ResourcePools' refcounts and free ring, BaseBlockIndex's table and reverse map,
// DraftPathIndex's heads) is allocated at construction for the first min(capacity, kEagerMetadataIds) ids of a
// pool, so a pool of up to this many ids never allocates on its hot paths; beyond it, the storage grows
// geometrically as ids are first handed out, so a pool of any capacity costs what its used ids cost.
inline constexpr int32_t kEagerMetadataIds = 1 << 20;

// Values 0..3 are the pool index; they are part of the C ABI (ctxc_resource_type_t).
enum class ResourceType : uint8_t { kBaseKvPage = 0, kDraftKvPage = 1, kRecurrentSnapshot = 2, kPartialKvSnapshot = 3 };
inline constexpr int kResourceTypeCount = 4;
inline constexpr ResourceType kAllResourceTypes[kResourceTypeCount] = {
    ResourceType::kBaseKvPage, ResourceType::kDraftKvPage, ResourceType::kRecurrentSnapshot,
    ResourceType::kPartialKvSnapshot};

char const* toString(ResourceType type) noexcept;

struct ResourceId {
    ResourceType type = ResourceType::kBaseKvPage;
    int32_t index = 0;

    friend bool operator==(ResourceId const& a, ResourceId const& b) noexcept {
        return a.type == b.type && a.index == b.index;
    }
    friend bool operator!=(ResourceId const& a, ResourceId const& b) noexcept { return !(a == b); }
};

// Used both as pool capacities and as the demand of one operation.
struct ResourceDemand {
    int32_t baseKvPages = 0;
    int32_t draftKvPages = 0;
    int32_t recurrentSnapshotSlots = 0;
    int32_t partialKvSnapshotSlots = 0;

    int32_t get(ResourceType type) const noexcept {
        switch (type) {
            case ResourceType::kBaseKvPage: return baseKvPages;
            case ResourceType::kDraftKvPage: return draftKvPages;
            case ResourceType::kRecurrentSnapshot: return recurrentSnapshotSlots;
            case ResourceType::kPartialKvSnapshot: return partialKvSnapshotSlots;
        }
        return 0;
    }
    int32_t& at(ResourceType type) noexcept {
        switch (type) {
            case ResourceType::kDraftKvPage: return draftKvPages;
            case ResourceType::kRecurrentSnapshot: return recurrentSnapshotSlots;
            case ResourceType::kPartialKvSnapshot: return partialKvSnapshotSlots;
            case ResourceType::kBaseKvPage: break;
        }
        return baseKvPages;
    }
    bool isNonNegative() const noexcept {
        return baseKvPages >= 0 && draftKvPages >= 0 && recurrentSnapshotSlots >= 0 && partialKvSnapshotSlots >= 0;
    }
    bool isZero() const noexcept {
        return baseKvPages == 0 && draftKvPages == 0 && recurrentSnapshotSlots == 0 && partialKvSnapshotSlots == 0;
    }
    friend bool operator==(ResourceDemand const& a, ResourceDemand const& b) noexcept {
        return a.baseKvPages == b.baseKvPages && a.draftKvPages == b.draftKvPages &&
               a.recurrentSnapshotSlots == b.recurrentSnapshotSlots &&
               a.partialKvSnapshotSlots == b.partialKvSnapshotSlots;
    }
    friend bool operator!=(ResourceDemand const& a, ResourceDemand const& b) noexcept { return !(a == b); }
};

}  // namespace ctxcache

template <>
struct std::hash<ctxcache::ResourceId> {
    size_t operator()(ctxcache::ResourceId const& id) const noexcept {
        return std::hash<int32_t>{}(id.index) ^ (std::hash<int>{}(static_cast<int>(id.type)) << 1);
    }
};
