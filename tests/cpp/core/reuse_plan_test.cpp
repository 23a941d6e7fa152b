// Vanilla reuse planning (reference c.6): longest indexed prefix, full-input rewind, private tail, bypass; and the
// empty input, which every planner (vanilla, hybrid, spec) answers with the reference's default kStandard plan.
#include "ctxcache/reuse_plan.h"

#include <gtest/gtest.h>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::H;
using test::Hs;

constexpr int32_t kPage = 4;

BaseBlockIndex indexWith(std::vector<std::pair<uint64_t, PageId>> const& mappings) {
    BaseBlockIndex index(16);
    for (auto const& [n, page] : mappings) index.insert(H(n), page);
    return index;
}

void expectNoSpecOrHybridBindings(ReusePlan const& plan) {
    EXPECT_EQ(plan.mode, ReusePlanMode::kVanilla);
    EXPECT_EQ(plan.specReplayMode, SpecReplayMode::kNone);
    EXPECT_FALSE(plan.draftRecord.has_value());
    EXPECT_TRUE(plan.draftPageBindings.empty());
    EXPECT_FALSE(plan.specReplayDependency.has_value());
    EXPECT_FALSE(plan.hybridCheckpoint.has_value());
    EXPECT_FALSE(plan.hybridRecord.has_value());
    EXPECT_FALSE(plan.recurrentSnapshotBinding.has_value());
    EXPECT_FALSE(plan.partialKvSnapshotBinding.has_value());
    EXPECT_FALSE(plan.hybridHasAttention);
}

TEST(VanillaReusePlan, MissAllocatesEveryInputPage) {
    BaseBlockIndex const index = indexWith({{7, 0}});
    ReusePlan const plan = makeVanillaReusePlan(Hs({1, 2}), 10, kPage, index);
    EXPECT_EQ(plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(plan.matchedTokenLength, 0);
    EXPECT_EQ(plan.reuseTokenLength, 0);
    EXPECT_TRUE(plan.basePageBindings.empty());
    EXPECT_TRUE(plan.matchedBlockHashes.empty());
    EXPECT_EQ(plan.demand, (ResourceDemand{3, 0, 0, 0}));  // ceil(10 / 4)
    expectNoSpecOrHybridBindings(plan);
}

TEST(VanillaReusePlan, FullBlocksReuseAndPartialTailGetsPrivatePage) {
    BaseBlockIndex const index = indexWith({{1, 5}, {2, 7}});
    ReusePlan const plan = makeVanillaReusePlan(Hs({1, 2}), 10, kPage, index);
    EXPECT_EQ(plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(plan.matchedTokenLength, 8);
    EXPECT_EQ(plan.reuseTokenLength, 8);
    EXPECT_EQ(plan.basePageBindings, (std::vector<PageId>{5, 7}));
    EXPECT_EQ(plan.matchedBlockHashes, Hs({1, 2}));
    EXPECT_EQ(plan.demand, (ResourceDemand{1, 0, 0, 0}));  // the 2-token tail
    expectNoSpecOrHybridBindings(plan);
}

TEST(VanillaReusePlan, MatchStopsBeforeAnIndexHole) {
    BaseBlockIndex const index = indexWith({{1, 5}, {3, 6}});  // block 2 is missing
    ReusePlan const plan = makeVanillaReusePlan(Hs({1, 2, 3}), 13, kPage, index);
    EXPECT_EQ(plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(plan.matchedTokenLength, 4);
    EXPECT_EQ(plan.reuseTokenLength, 4);
    EXPECT_EQ(plan.basePageBindings, (std::vector<PageId>{5}));
    EXPECT_EQ(plan.matchedBlockHashes, Hs({1}));
    EXPECT_EQ(plan.demand, (ResourceDemand{3, 0, 0, 0}));  // ceil(13 / 4) - 1
}

TEST(VanillaReusePlan, ExactBlockAlignedInputRewindsOneFullPage) {
    BaseBlockIndex const index = indexWith({{1, 5}, {2, 7}});
    ReusePlan const plan = makeVanillaReusePlan(Hs({1, 2}), 8, kPage, index);
    EXPECT_EQ(plan.kind, ReusePlanKind::kFullInputRewind);
    EXPECT_EQ(plan.matchedTokenLength, 8);  // what the cache holds
    EXPECT_EQ(plan.reuseTokenLength, 4);    // the last page is recomputed so its last token has logits
    EXPECT_EQ(plan.basePageBindings, (std::vector<PageId>{5}));
    EXPECT_EQ(plan.matchedBlockHashes, Hs({1}));
    EXPECT_EQ(plan.demand, (ResourceDemand{1, 0, 0, 0}));

    ReusePlan const single = makeVanillaReusePlan(Hs({1}), 4, kPage, index);  // one cached page: nothing is reused
    EXPECT_EQ(single.kind, ReusePlanKind::kFullInputRewind);
    EXPECT_EQ(single.matchedTokenLength, 4);
    EXPECT_EQ(single.reuseTokenLength, 0);
    EXPECT_TRUE(single.basePageBindings.empty());
    EXPECT_TRUE(single.matchedBlockHashes.empty());
    EXPECT_EQ(single.demand, (ResourceDemand{1, 0, 0, 0}));
}

TEST(VanillaReusePlan, AlignedInputWithAnUncachedBlockDoesNotRewind) {
    BaseBlockIndex const index = indexWith({{1, 5}});
    ReusePlan const partly = makeVanillaReusePlan(Hs({1, 2}), 8, kPage, index);
    EXPECT_EQ(partly.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(partly.reuseTokenLength, 4);
    EXPECT_EQ(partly.basePageBindings, (std::vector<PageId>{5}));
    EXPECT_EQ(partly.demand, (ResourceDemand{1, 0, 0, 0}));
    // The caller passed fewer hashes than the input has full blocks: the last page is not known to be cached.
    BaseBlockIndex const both = indexWith({{1, 5}, {2, 7}});
    ReusePlan const fewer = makeVanillaReusePlan(Hs({1}), 8, kPage, both);
    EXPECT_EQ(fewer.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(fewer.matchedTokenLength, 4);
    EXPECT_EQ(fewer.reuseTokenLength, 4);
    EXPECT_EQ(fewer.demand, (ResourceDemand{1, 0, 0, 0}));
}

TEST(VanillaReusePlan, BypassPlanIgnoresTheIndex) {
    BaseBlockIndex const index = indexWith({{1, 5}, {2, 7}});
    ReusePlan const plan = makeVanillaReusePlan(Hs({1, 2}), 9, kPage, index, ContextCacheLookupPolicy::kBypass);
    EXPECT_EQ(plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(plan.matchedTokenLength, 0);
    EXPECT_EQ(plan.reuseTokenLength, 0);
    EXPECT_TRUE(plan.basePageBindings.empty());
    EXPECT_TRUE(plan.matchedBlockHashes.empty());
    EXPECT_EQ(plan.demand, (ResourceDemand{3, 0, 0, 0}));
    expectNoSpecOrHybridBindings(plan);
}

TEST(VanillaReusePlan, EmptyInputPlansNothing) {
    BaseBlockIndex const index = indexWith({{1, 5}});
    ReusePlan const plan = makeVanillaReusePlan({}, 0, kPage, index);
    EXPECT_EQ(plan.kind, ReusePlanKind::kStandard);  // c.6: n == 0 -> the reference's empty (default) plan
    EXPECT_EQ(plan.reuseTokenLength, 0);
    EXPECT_EQ(plan.demand, (ResourceDemand{}));
    ReusePlan const shortInput = makeVanillaReusePlan({}, 3, kPage, index);  // no full block: one private page
    EXPECT_EQ(shortInput.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(shortInput.demand, (ResourceDemand{1, 0, 0, 0}));
}

// c.6: an empty input is planned before the lookup policy is looked at, in every mode: kind kStandard (the
// reference's default), nothing matched or reused, nothing to allocate, no bindings; hybrid candidates are not
// even examined, so none can be out of range.
TEST(ReusePlan, EmptyInputIsAStandardPlanWithNothingToDoInEveryMode) {
    ContextCacheManager m(kPage, {8, 8, 2, 2}, 8);
    AcquireResult a = m.acquireSpec(Hs({1, 2}), 9);
    ASSERT_TRUE(a.lease);
    m.publish(*a.lease, {Hs({1, 2}), 8});  // something to find, were anything looked up
    a.lease->release();
    std::string const before = test::describe(m);
    std::vector<HybridCheckpointCandidate> const candidates{{0, H(7)}, {-1, H(8)}, {4, H(9)}};
    for (ContextCacheLookupPolicy policy : {ContextCacheLookupPolicy::kUseCache, ContextCacheLookupPolicy::kBypass}) {
        SCOPED_TRACE(static_cast<int>(policy));
        std::vector<ReusePlan> plans;
        plans.push_back(makeVanillaReusePlan({}, 0, kPage, m.baseIndex(), policy));
        plans.push_back(makeHybridReusePlan(candidates, {}, 0, kPage, true, m.records(), policy));
        plans.push_back(makeHybridReusePlan(candidates, {}, 0, kPage, false, m.records(), policy));
        plans.push_back(makeSpecReusePlan({}, 0, kPage, m.baseIndex(), m.draftIndex(), m.records(), policy));
        std::vector<ReusePlanMode> const modes{ReusePlanMode::kVanilla, ReusePlanMode::kHybrid, ReusePlanMode::kHybrid,
                                               ReusePlanMode::kSpec};
        for (size_t i = 0; i < plans.size(); ++i) {
            ReusePlan const& plan = plans[i];
            EXPECT_EQ(plan.mode, modes[i]);
            EXPECT_EQ(plan.kind, ReusePlanKind::kStandard);
            EXPECT_EQ(plan.matchedTokenLength, 0);
            EXPECT_EQ(plan.reuseTokenLength, 0);
            EXPECT_EQ(plan.demand, ResourceDemand{});
            EXPECT_TRUE(plan.basePageBindings.empty());
            EXPECT_TRUE(plan.draftPageBindings.empty());
            EXPECT_TRUE(plan.matchedBlockHashes.empty());
            EXPECT_FALSE(plan.draftRecord || plan.hybridRecord || plan.hybridCheckpoint);
            EXPECT_FALSE(plan.recurrentSnapshotBinding || plan.partialKvSnapshotBinding);
            EXPECT_FALSE(plan.specReplayDependency);
            EXPECT_EQ(plan.specReplayMode, SpecReplayMode::kNone);
        }
        EXPECT_TRUE(plans[1].hybridHasAttention);
        EXPECT_FALSE(plans[2].hybridHasAttention);
    }
    EXPECT_EQ(test::describe(m), before);
}

TEST(VanillaReusePlan, TooManyHashesOrBadSizesThrowContractError) {
    BaseBlockIndex const index = indexWith({{1, 5}});
    EXPECT_THROW(makeVanillaReusePlan(Hs({1, 2}), 7, kPage, index), ContractError);  // 7 tokens: 1 full block
    EXPECT_THROW(makeVanillaReusePlan(Hs({1}), 3, kPage, index), ContractError);
    EXPECT_THROW(makeVanillaReusePlan({}, -1, kPage, index), ContractError);
    EXPECT_THROW(makeVanillaReusePlan({}, 4, 0, index), ContractError);
    EXPECT_NO_THROW(makeVanillaReusePlan(Hs({1, 2}), 8, kPage, index));
}

TEST(VanillaReusePlan, PlanningDoesNotChangePoolRefsOrRecordRecency) {
    ContextCacheManager manager(kPage, {6, 0, 0, 0}, 8);
    for (uint64_t first : {1, 3}) {
        AcquireResult a = manager.acquireVanilla(Hs({first, first + 1}), 8);
        ASSERT_TRUE(a.lease);
        manager.publish(*a.lease, {Hs({first, first + 1}), 8});
    }
    AcquireResult running = manager.acquireVanilla(Hs({1}), 6);  // pins page 0
    ASSERT_TRUE(running.lease);
    std::string const before = test::describe(manager);
    ReusePlan const plan = makeVanillaReusePlan(Hs({1, 2}), 9, kPage, manager.baseIndex());
    EXPECT_EQ(plan.basePageBindings, (std::vector<PageId>{0, 1}));
    ReusePlan const other = makeVanillaReusePlan(Hs({3, 4}), 8, kPage, manager.baseIndex());
    EXPECT_EQ(other.basePageBindings, (std::vector<PageId>{2}));
    EXPECT_EQ(test::describe(manager), before);  // refcounts, free lists, LRU order: all as they were
    EXPECT_EQ(manager.records().lruToMru(), (std::vector<RecordId>{1, 2}));
    EXPECT_NO_THROW(manager.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
