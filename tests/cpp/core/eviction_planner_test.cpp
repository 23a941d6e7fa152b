// EvictionPlanner: read-only, record-granular LRU victim selection (reference c.5).
#include "ctxcache/eviction_planner.h"

#include <gtest/gtest.h>

#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::basePage;
using test::draftPage;
using test::Hs;
using test::recurrentSlot;

using CacheState = test::PlannerState;

TEST(EvictionPlanner, FreeCapacityReturnsEmptyFeasiblePlan) {
    CacheState s({4, 0, 0, 0});
    s.add(Hs({1, 2}), {0, 1});
    s.finishProducers();  // pages 2 and 3 are free, 0 and 1 cached
    ASSERT_EQ(s.pools.freeCount(ResourceType::kBaseKvPage), 2);
    for (ResourceDemand demand : {ResourceDemand{2, 0, 0, 0}, ResourceDemand{0, 0, 0, 0}}) {
        EvictionPlan const plan = EvictionPlanner::plan(demand, s.pools, s.records);
        EXPECT_TRUE(plan.feasible);
        EXPECT_TRUE(plan.victims.empty());
        EXPECT_EQ(plan.reclaimed, (ResourceDemand{}));
    }
    EXPECT_NO_THROW(s.pools.checkInvariants());
    EXPECT_NO_THROW(s.records.checkInvariants());
}

TEST(EvictionPlanner, SelectsRecordsFromLruToMru) {
    CacheState s({6, 0, 0, 0});
    RecordId const r1 = s.add(Hs({1, 2}), {0, 1});
    RecordId const r2 = s.add(Hs({3, 4}), {2, 3});
    RecordId const r3 = s.add(Hs({5, 6}), {4, 5});
    s.finishProducers();

    EvictionPlan plan = EvictionPlanner::plan({2, 0, 0, 0}, s.pools, s.records);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{2, 0, 0, 0}));

    plan = EvictionPlanner::plan({3, 0, 0, 0}, s.pools, s.records);  // the shortest prefix that covers 3
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1, r2}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{4, 0, 0, 0}));

    s.records.touch(r1);  // LRU is now r2, r3, r1
    plan = EvictionPlanner::plan({3, 0, 0, 0}, s.pools, s.records);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r2, r3}));
    plan = EvictionPlanner::plan({6, 0, 0, 0}, s.pools, s.records);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r2, r3, r1}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{6, 0, 0, 0}));
    plan = EvictionPlanner::plan({7, 0, 0, 0}, s.pools, s.records);
    EXPECT_FALSE(plan.feasible);
    EXPECT_TRUE(plan.victims.empty());
    EXPECT_NO_THROW(s.pools.checkInvariants());
    EXPECT_NO_THROW(s.records.checkInvariants());
}

TEST(EvictionPlanner, SharedAncestorRequiresMultipleVictims) {
    // Two branches share the ancestor page 0: evicting the first frees only its own leaf.
    CacheState s({3, 0, 0, 0});
    RecordId const r1 = s.add(Hs({1, 2}), {0, 1});
    RecordId const r2 = s.add(Hs({1, 3}), {0, 2});
    s.finishProducers();
    ASSERT_EQ(s.pools.cacheRefCount(basePage(0)), 2);

    EvictionPlan plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{1, 0, 0, 0}));

    plan = EvictionPlanner::plan({2, 0, 0, 0}, s.pools, s.records);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1, r2}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{3, 0, 0, 0}));
    EXPECT_EQ(s.pools.cacheRefCount(basePage(0)), 2);  // planning simulated, it did not drop anything
    EXPECT_NO_THROW(s.pools.checkInvariants());
}

TEST(EvictionPlanner, ActiveReferencePreventsReclaim) {
    CacheState s({4, 0, 0, 0});
    RecordId const r1 = s.add(Hs({1, 2}), {0, 1});
    RecordId const r2 = s.add(Hs({3, 4}), {2, 3});
    s.finishProducers({basePage(0)});  // a running request still pins page 0
    EXPECT_EQ(s.pools.reclaimableCount(ResourceType::kBaseKvPage), 3);

    EvictionPlan plan = EvictionPlanner::plan({2, 0, 0, 0}, s.pools, s.records);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1, r2}));  // r1 alone returns only page 1
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{3, 0, 0, 0}));
    plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{1, 0, 0, 0}));
    plan = EvictionPlanner::plan({4, 0, 0, 0}, s.pools, s.records);
    EXPECT_FALSE(plan.feasible);
    EXPECT_TRUE(plan.victims.empty());
    EXPECT_NO_THROW(s.pools.checkInvariants());
}

TEST(EvictionPlanner, InfeasiblePlanReturnsNoVictimsAndMutatesNothing) {
    CacheState s({3, 2, 0, 0});
    s.add(Hs({1}), {0}, {0});
    s.add(Hs({2}), {1});
    s.finishProducers({draftPage(1)});
    std::string const before = s.describe();
    for (ResourceDemand demand : {ResourceDemand{4, 0, 0, 0}, ResourceDemand{0, 2, 0, 0}, ResourceDemand{1, 1, 1, 0},
                                  ResourceDemand{0, 0, 0, 1}}) {
        EvictionPlan const plan = EvictionPlanner::plan(demand, s.pools, s.records);
        EXPECT_FALSE(plan.feasible);
        EXPECT_TRUE(plan.victims.empty());
        EXPECT_EQ(plan.reclaimed, (ResourceDemand{}));
    }
    EXPECT_EQ(s.describe(), before);
    EXPECT_THROW(EvictionPlanner::plan({-1, 0, 0, 0}, s.pools, s.records), ContractError);
    EXPECT_NO_THROW(s.pools.checkInvariants());
    EXPECT_NO_THROW(s.records.checkInvariants());
}

TEST(EvictionPlanner, DemandAcrossTypesMustBeSatisfiedTogether) {
    CacheState s({4, 2, 0, 0});
    RecordId const baseOnly = s.add(Hs({1, 2}), {0, 1});
    RecordId const paired = s.add(Hs({3, 4}), {2, 3}, {0, 1});
    s.finishProducers();

    // The base-only record covers the base demand but no draft page: the walk must continue.
    EvictionPlan plan = EvictionPlanner::plan({2, 1, 0, 0}, s.pools, s.records);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{baseOnly, paired}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{4, 2, 0, 0}));
    plan = EvictionPlanner::plan({2, 0, 0, 0}, s.pools, s.records);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{baseOnly}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{2, 0, 0, 0}));
    plan = EvictionPlanner::plan({0, 2, 0, 0}, s.pools, s.records);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{baseOnly, paired}));
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{4, 2, 0, 0}));
    EXPECT_NO_THROW(s.pools.checkInvariants());
}

TEST(EvictionPlanner, SnapshotSlotsAreReclaimedWithTheirCheckpoint) {
    CacheState s({1, 0, 2, 0});
    s.add(Hs({1}), {0});
    RecordId const c1 = s.addCheckpoint(test::H(70), 3, 0);
    RecordId const c2 = s.addCheckpoint(test::H(71), 5, 1);
    s.finishProducers();
    EvictionPlan const plan = EvictionPlanner::plan({0, 0, 2, 0}, s.pools, s.records);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{1, c1, c2}));  // strict LRU, even the useless vanilla record
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{1, 0, 2, 0}));
    EXPECT_EQ(s.pools.reclaimableCount(ResourceType::kRecurrentSnapshot), 2);  // simulated only
    EXPECT_NO_THROW(s.pools.checkInvariants());
    EXPECT_NO_THROW(s.records.checkInvariants());
}

TEST(EvictionPlanner, ProtectedRecordIsConsideredLast) {
    CacheState s({3, 0, 0, 0});
    RecordId const r1 = s.add(Hs({1}), {0});
    RecordId const r2 = s.add(Hs({2}), {1});
    RecordId const r3 = s.add(Hs({3}), {2});
    s.finishProducers();
    EvictionPlan plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records, r1);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r2}));
    plan = EvictionPlanner::plan({3, 0, 0, 0}, s.pools, s.records, r1);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r2, r3, r1}));
    plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records, RecordId{99});  // unknown: ignored
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1}));
    EXPECT_EQ(s.records.lruToMru(), (std::vector<RecordId>{r1, r2, r3}));  // planning touched nothing
    EXPECT_NO_THROW(s.pools.checkInvariants());
    EXPECT_NO_THROW(s.records.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
