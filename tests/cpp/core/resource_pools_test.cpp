// ResourcePools: typed id pools with two refcounts (reference c.2, f).
#include "ctxcache/resource_pools.h"

#include <gtest/gtest.h>

#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::basePage;
using test::draftPage;
using test::partialSlot;
using test::recurrentSlot;

constexpr ResourceType kBase = ResourceType::kBaseKvPage;
constexpr ResourceType kDraft = ResourceType::kDraftKvPage;
constexpr ResourceType kRecurrent = ResourceType::kRecurrentSnapshot;
constexpr ResourceType kPartial = ResourceType::kPartialKvSnapshot;

TEST(ResourcePools, NewAllocationStartsWithOneActiveReference) {
    ResourcePools pools({4, 0, 0, 0});
    std::optional<std::vector<ResourceId>> ids = pools.allocate({2, 0, 0, 0});
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(*ids, (std::vector<ResourceId>{basePage(0), basePage(1)}));
    for (ResourceId const& id : *ids) {
        EXPECT_EQ(pools.activeRefCount(id), 1);
        EXPECT_EQ(pools.cacheRefCount(id), 0);
        EXPECT_FALSE(pools.isFree(id));
    }
    EXPECT_EQ(pools.freeCount(kBase), 2);
    EXPECT_EQ(pools.capacity(kBase), 4);
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{2, 3}));
    EXPECT_EQ(pools.reclaimableCount(kBase), 0);
    EXPECT_TRUE(pools.isFree(basePage(2)));
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, ResourceBecomesFreeOnlyAfterBothReferencesReachZero) {
    ResourcePools pools({4, 0, 0, 0});
    ASSERT_TRUE(pools.allocate({2, 0, 0, 0}));

    // Page 0: cache ref first, then the active ref goes; free only when the cache ref goes too.
    pools.addCacheRef(basePage(0));
    pools.releaseActiveRef(basePage(0));
    EXPECT_FALSE(pools.isFree(basePage(0)));
    EXPECT_EQ(pools.activeRefCount(basePage(0)), 0);
    EXPECT_EQ(pools.cacheRefCount(basePage(0)), 1);
    EXPECT_EQ(pools.refCounts(basePage(0)).active, 0);
    EXPECT_EQ(pools.refCounts(basePage(0)).cache, 1);
    EXPECT_EQ(pools.freeCount(kBase), 2);
    EXPECT_NO_THROW(pools.checkInvariants());
    ResourcePools::RefCounts const left = pools.releaseCacheRef(basePage(0));  // what it leaves: nothing
    EXPECT_EQ(left.active, 0);
    EXPECT_EQ(left.cache, 0);
    EXPECT_TRUE(pools.isFree(basePage(0)));
    EXPECT_EQ(pools.freeCount(kBase), 3);
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{2, 3, 0}));

    // Page 1: the other order: cache ref dropped while still active, then the active ref.
    pools.addCacheRef(basePage(1));
    ResourcePools::RefCounts const pinned = pools.releaseCacheRef(basePage(1));  // still active
    EXPECT_EQ(pinned.active, 1);
    EXPECT_EQ(pinned.cache, 0);
    EXPECT_FALSE(pools.isFree(basePage(1)));
    EXPECT_EQ(pools.freeCount(kBase), 3);
    pools.releaseActiveRef(basePage(1));
    EXPECT_TRUE(pools.isFree(basePage(1)));
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{2, 3, 0, 1}));
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, MultiPoolAllocationIsAllOrNothing) {
    ResourcePools pools({3, 2, 1, 1});
    std::optional<std::vector<ResourceId>> first = pools.allocate({1, 1, 1, 1});
    ASSERT_TRUE(first.has_value());
    // allocateInto's order is base, draft, recurrent, partial.
    EXPECT_EQ(*first, (std::vector<ResourceId>{basePage(0), draftPage(0), recurrentSlot(0), partialSlot(0)}));

    // Base and draft could be served, the recurrent pool is empty: nothing at all is taken.
    EXPECT_FALSE(pools.canAllocate({2, 1, 1, 0}));
    EXPECT_FALSE(pools.allocate({2, 1, 1, 0}).has_value());
    std::vector<ResourceId> out{basePage(2)};
    EXPECT_FALSE(pools.allocateInto({1, 1, 1, 0}, out));
    EXPECT_EQ(out, (std::vector<ResourceId>{basePage(2)}));
    std::vector<int32_t> ids{42};
    EXPECT_FALSE(pools.allocateIds(kBase, 3, ids));
    EXPECT_EQ(ids, (std::vector<int32_t>{42}));

    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(pools.freeList(kDraft), (std::vector<int32_t>{1}));
    EXPECT_EQ(pools.freeCount(kRecurrent), 0);
    EXPECT_EQ(pools.freeCount(kPartial), 0);

    // What fits is served, appended after the caller's entries.
    EXPECT_TRUE(pools.allocateInto({2, 1, 0, 0}, out));
    EXPECT_EQ(out, (std::vector<ResourceId>{basePage(2), basePage(1), basePage(2), draftPage(1)}));
    EXPECT_TRUE(pools.allocateIds(kBase, 0, ids));
    EXPECT_EQ(ids, (std::vector<int32_t>{42}));
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, BaseAndDraftIdsArePoolLocal) {
    ResourcePools pools({2, 2, 0, 0});
    std::optional<std::vector<ResourceId>> ids = pools.allocate({2, 2, 0, 0});
    ASSERT_TRUE(ids.has_value());
    EXPECT_EQ(*ids, (std::vector<ResourceId>{basePage(0), basePage(1), draftPage(0), draftPage(1)}));

    pools.addCacheRef(draftPage(0));
    pools.releaseActiveRef(basePage(0));  // base 0 is free; draft 0 is untouched
    EXPECT_TRUE(pools.isFree(basePage(0)));
    EXPECT_EQ(pools.activeRefCount(draftPage(0)), 1);
    EXPECT_EQ(pools.cacheRefCount(draftPage(0)), 1);
    EXPECT_EQ(pools.cacheRefCount(basePage(0)), 0);
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{0}));
    EXPECT_TRUE(pools.freeList(kDraft).empty());
    EXPECT_EQ(pools.capacities(), (ResourceDemand{2, 2, 0, 0}));
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, ReferenceUnderflowThrows) {
    ResourcePools pools({2, 0, 0, 0});
    ASSERT_TRUE(pools.allocate({1, 0, 0, 0}));
    EXPECT_THROW(pools.releaseCacheRef(basePage(0)), ContractError);
    EXPECT_EQ(pools.activeRefCount(basePage(0)), 1);
    EXPECT_EQ(pools.cacheRefCount(basePage(0)), 0);
    pools.releaseActiveRef(basePage(0));
    EXPECT_THROW(pools.releaseActiveRef(basePage(0)), ContractError);
    EXPECT_THROW(pools.releaseCacheRef(basePage(0)), ContractError);
    EXPECT_EQ(pools.freeCount(kBase), 2);
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{1, 0}));
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, FreedIdIsReusedLast) {
    ResourcePools pools({4, 0, 0, 0});
    std::vector<int32_t> ids;
    ASSERT_TRUE(pools.allocateIds(kBase, 1, ids));
    EXPECT_EQ(ids, (std::vector<int32_t>{0}));
    pools.releaseActiveRef(basePage(0));
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{1, 2, 3, 0}));

    ids.clear();
    ASSERT_TRUE(pools.allocateIds(kBase, 3, ids));
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3}));  // the oldest free ids first, not the one just freed
    pools.releaseActiveRef(basePage(2));
    pools.releaseActiveRef(basePage(1));
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{0, 2, 1}));  // FIFO across the ring's wrap-around
    ids.clear();
    ASSERT_TRUE(pools.allocateIds(kBase, 3, ids));
    EXPECT_EQ(ids, (std::vector<int32_t>{0, 2, 1}));
    EXPECT_EQ(pools.freeCount(kBase), 0);
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, AddingAReferenceToAFreeIdThrowsAndChangesNothing) {
    ResourcePools pools({3, 0, 0, 0});
    ASSERT_TRUE(pools.allocate({1, 0, 0, 0}));
    std::string const before = test::describe(pools);
    EXPECT_THROW(pools.addActiveRef(basePage(1)), ContractError);
    EXPECT_THROW(pools.addCacheRef(basePage(2)), ContractError);
    EXPECT_EQ(test::describe(pools), before);
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, OutOfRangeIdThrows) {
    ResourcePools pools({2, 1, 0, 0});
    for (ResourceId id : {basePage(-1), basePage(2), draftPage(1), recurrentSlot(0), partialSlot(0)}) {
        EXPECT_FALSE(pools.validId(id));
        EXPECT_THROW(pools.addActiveRef(id), ContractError);
        EXPECT_THROW(pools.releaseActiveRef(id), ContractError);
        EXPECT_THROW(pools.addCacheRef(id), ContractError);
        EXPECT_THROW(pools.releaseCacheRef(id), ContractError);
        EXPECT_THROW(pools.activeRefCount(id), ContractError);
        EXPECT_THROW(pools.cacheRefCount(id), ContractError);
        EXPECT_THROW(pools.refCounts(id), ContractError);
        EXPECT_THROW(pools.isFree(id), ContractError);
    }
    EXPECT_TRUE(pools.validId(basePage(1)));
    EXPECT_EQ(pools.freeCount(kBase), 2);
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, NegativeCapacityOrDemandThrows) {
    EXPECT_THROW(ResourcePools({-1, 0, 0, 0}), ContractError);
    EXPECT_THROW(ResourcePools({0, 0, 0, -1}), ContractError);
    ResourcePools pools({2, 0, 0, 0});
    std::vector<ResourceId> out;
    std::vector<int32_t> ids;
    EXPECT_THROW(pools.allocate({-1, 0, 0, 0}), ContractError);
    EXPECT_THROW(pools.allocateInto({1, -1, 0, 0}, out), ContractError);
    EXPECT_THROW(pools.allocateIds(kBase, -1, ids), ContractError);
    EXPECT_FALSE(pools.canAllocate({1, 0, -1, 0}));
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(pools.freeCount(kBase), 2);
    EXPECT_NO_THROW(pools.checkInvariants());
}

TEST(ResourcePools, ReclaimableCountTracksUnpinnedCachedIds) {
    ResourcePools pools({3, 0, 1, 0});
    ASSERT_TRUE(pools.allocate({3, 0, 1, 0}));
    pools.addCacheRef(basePage(0));
    pools.addCacheRef(basePage(1));
    EXPECT_EQ(pools.reclaimableCount(kBase), 0);  // cached but still pinned
    pools.releaseActiveRef(basePage(0));
    EXPECT_EQ(pools.reclaimableCount(kBase), 1);
    pools.releaseActiveRef(basePage(1));
    EXPECT_EQ(pools.reclaimableCount(kBase), 2);
    pools.addActiveRef(basePage(0));  // pinned again by a hit
    EXPECT_EQ(pools.reclaimableCount(kBase), 1);
    pools.addCacheRef(basePage(1));  // a second record: still one reclaimable id
    EXPECT_EQ(pools.reclaimableCount(kBase), 1);
    pools.releaseCacheRef(basePage(1));
    EXPECT_EQ(pools.reclaimableCount(kBase), 1);
    pools.releaseCacheRef(basePage(1));  // freed
    EXPECT_EQ(pools.reclaimableCount(kBase), 0);
    EXPECT_TRUE(pools.isFree(basePage(1)));
    pools.releaseActiveRef(basePage(2));  // never cached: straight to the free list
    EXPECT_EQ(pools.reclaimableCount(kBase), 0);

    pools.addCacheRef(recurrentSlot(0));
    pools.releaseActiveRef(recurrentSlot(0));
    EXPECT_EQ(pools.reclaimableCount(kRecurrent), 1);
    EXPECT_EQ(pools.reclaimableCount(kBase), 0);
    EXPECT_EQ(pools.freeList(kBase), (std::vector<int32_t>{1, 2}));
    EXPECT_NO_THROW(pools.checkInvariants());

    // Room once every record is evicted: 2 free base ids (page 0 is pinned), 0 free + 1 reclaimable recurrent.
    EXPECT_TRUE(pools.canAllocateOnceReclaimed({2, 0, 1, 0}));
    EXPECT_FALSE(pools.canAllocate({2, 0, 1, 0}));
    EXPECT_FALSE(pools.canAllocateOnceReclaimed({3, 0, 0, 0}));
    EXPECT_FALSE(pools.canAllocateOnceReclaimed({0, 0, 2, 0}));
    EXPECT_FALSE(pools.canAllocateOnceReclaimed({0, 1, 0, 0}));
    EXPECT_FALSE(pools.canAllocateOnceReclaimed({-1, 0, 0, 0}));
}

TEST(ResourcePools, ZeroDemandSucceedsOnEmptyPools) {
    ResourcePools pools({0, 0, 0, 0});
    std::optional<std::vector<ResourceId>> ids = pools.allocate({0, 0, 0, 0});
    ASSERT_TRUE(ids.has_value());
    EXPECT_TRUE(ids->empty());
    EXPECT_FALSE(pools.allocate({1, 0, 0, 0}).has_value());
    EXPECT_TRUE(pools.freeList(kBase).empty());
    EXPECT_NO_THROW(pools.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
