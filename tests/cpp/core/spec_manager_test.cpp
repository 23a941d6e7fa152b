// EAGLE speculative reuse: paired base + draft records, coherent draft paths, one full page replayed.
#include <gtest/gtest.h>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::chain;
using test::describe;
using test::extend;

constexpr int32_t kPage = 4;
constexpr ResourceType kBase = ResourceType::kBaseKvPage;
constexpr ResourceType kDraft = ResourceType::kDraftKvPage;

ResourceDemand specCapacities(int32_t base, int32_t draft) { return ResourceDemand{base, draft, 0, 0}; }

// A spec request over `hashes` (n tokens) that publishes every full block and releases.
PublishResult serveSpec(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t n) {
    AcquireResult r = m.acquireSpec(hashes, n);
    EXPECT_EQ(r.status, AcquireStatus::kAcquired);
    PublishResult p = m.publish(*r.lease, {hashes, n});
    r.lease->release();
    return p;
}

TEST(SpecPlanning, SpecPlanningIgnoresBaseOnlyHits) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    AcquireResult vanilla = m.acquireVanilla(h, 12);
    m.publish(*vanilla.lease, {h, 12});  // a base-only record
    vanilla.lease->release();

    ReusePlan const plan = makeSpecReusePlan(h, 14, kPage, m.baseIndex(), m.draftIndex(), m.records());
    EXPECT_EQ(plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(plan.matchedTokenLength, 0);
    EXPECT_TRUE(plan.basePageBindings.empty());
    EXPECT_FALSE(plan.draftRecord);
    EXPECT_EQ(plan.demand, (ResourceDemand{4, 4, 0, 0}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecPlanning, SpecPlanningUsesOneCoherentPathAndOneFullPageReplay) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    PublishResult const first = serveSpec(m, h, 12);  // pages 0,1,2 in both pools
    ASSERT_EQ(first.status, PublishStatus::kPublished);

    auto const longer = extend(h, 2, 1);  // 4 full blocks, the first 3 shared
    auto const before = describe(m);
    ReusePlan const plan = makeSpecReusePlan(longer, 18, kPage, m.baseIndex(), m.draftIndex(), m.records());
    EXPECT_EQ(describe(m), before);  // planning is side-effect free
    EXPECT_EQ(plan.mode, ReusePlanMode::kSpec);
    EXPECT_EQ(plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(plan.specReplayMode, SpecReplayMode::kFullPage);
    EXPECT_EQ(plan.matchedTokenLength, 12);
    EXPECT_EQ(plan.reuseTokenLength, 8);  // block 3 is replayed: its last draft slot depends on block 4
    EXPECT_EQ(plan.basePageBindings, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(plan.draftPageBindings, (std::vector<PageId>{0, 1}));
    ASSERT_TRUE(plan.specReplayDependency);
    EXPECT_EQ(plan.specReplayDependency->pathBlockCount, 3);
    EXPECT_EQ(plan.specReplayDependency->terminalHash, h[2]);
    ASSERT_TRUE(plan.draftRecord);
    EXPECT_EQ(*plan.draftRecord, *first.record);
    EXPECT_EQ(plan.demand, (ResourceDemand{3, 3, 0, 0}));  // ceil(18/4) = 5 pages, 2 bound
}

TEST(SpecPlanning, SpecPlanningExactInputRewindsOneFullPage) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    serveSpec(m, h, 12);
    ReusePlan const plan = makeSpecReusePlan(h, 12, kPage, m.baseIndex(), m.draftIndex(), m.records());
    EXPECT_EQ(plan.kind, ReusePlanKind::kFullInputRewind);
    EXPECT_EQ(plan.matchedTokenLength, 12);
    EXPECT_EQ(plan.reuseTokenLength, 8);
    EXPECT_EQ(plan.demand, (ResourceDemand{1, 1, 0, 0}));
}

TEST(SpecPlanning, SinglePairedBlockLeavesNothingToReuse) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 1);
    serveSpec(m, h, 4);
    ReusePlan const plan = makeSpecReusePlan(extend(h, 2, 1), 9, kPage, m.baseIndex(), m.draftIndex(), m.records());
    EXPECT_EQ(plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(plan.matchedTokenLength, 4);
    EXPECT_EQ(plan.reuseTokenLength, 0);
    EXPECT_FALSE(plan.draftRecord);
    EXPECT_FALSE(plan.specReplayDependency);
    EXPECT_EQ(plan.demand, (ResourceDemand{3, 3, 0, 0}));
}

TEST(SpecPlanning, BypassPlansEveryPageInBothPools) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    serveSpec(m, h, 12);
    ReusePlan const plan =
        makeSpecReusePlan(h, 13, kPage, m.baseIndex(), m.draftIndex(), m.records(), ContextCacheLookupPolicy::kBypass);
    EXPECT_EQ(plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(plan.demand, (ResourceDemand{4, 4, 0, 0}));
}

TEST(SpecManager, SpecAcquirePublishesPairedStateAndReplaysOneFullPage) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    PublishResult const first = serveSpec(m, h, 12);
    ASSERT_TRUE(first.record);
    CacheRecord const record = m.records().materialize(*first.record);
    EXPECT_EQ(record.basePagePath, (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(record.draftPagePath, (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(m.draftIndex().entryCount(), 3u);

    auto const longer = extend(h, 2, 1);
    AcquireResult r = m.acquireSpec(longer, 18);
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    // Two shared pages per pool, then private pages (the replayed boundary page is private).
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1, 3, 4, 5}));
    EXPECT_EQ(r.lease->draftPages(), (std::vector<PageId>{0, 1, 3, 4, 5}));
    EXPECT_EQ(m.pools().activeRefCount({kDraft, 0}), 1);
    EXPECT_EQ(m.pools().activeRefCount({kDraft, 2}), 0);  // the replayed page is not pinned
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecFullPageReplayPublishesProjectedBaseWithoutRebinding) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    serveSpec(m, h, 12);
    auto const longer = extend(h, 2, 1);
    AcquireResult r = m.acquireSpec(longer, 18);
    std::vector<PageId> const leaseBase = r.lease->basePages();
    PublishResult const p = m.publish(*r.lease, {longer, 16});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    EXPECT_EQ(p.publishedBaseFullBlockCount, 4);
    // Block 2 keeps the first committer's canonical base page 2, not the replaying lease's page 3.
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1, 2, 4}));
    EXPECT_EQ(r.lease->basePages(), leaseBase);  // the lease is not rebound
    // Draft pages are never canonicalized: the record owns the replaying producer's own draft pages.
    EXPECT_EQ(m.records().get(*p.record).draftPagePath, (std::vector<PageId>{0, 1, 3, 4}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecFullPageReplayRejectsChangedShiftedTokenDependency) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    serveSpec(m, h, 12);
    auto const longer = extend(h, 2, 1);
    AcquireResult r = m.acquireSpec(longer, 18);
    auto changed = longer;
    changed[2] = test::blockHash(77, 2);  // the replayed boundary block no longer matches what was paired
    auto const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {changed, 16}), ContractError);
    // Publishing fewer blocks than the dependency's boundary is also refused.
    EXPECT_THROW(m.publish(*r.lease, {longer, 8}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecPublicationUsesCommonMaterializedBoundary) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 4);
    AcquireResult r = m.acquireSpec(h, 17);
    // Base and draft are both materialized only through token 9: two full blocks are published.
    PublishResult const p = m.publish(*r.lease, {h, 9});
    EXPECT_EQ(p.publishedBaseFullBlockCount, 2);
    CacheRecord const record = m.records().materialize(*p.record);
    EXPECT_EQ(record.key.fullBlockCount, 2);
    EXPECT_EQ(record.key.terminalHash, h[1]);
    EXPECT_EQ(record.draftPagePath.size(), 2u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, VanillaPublicationPreservesPairedRecordForLaterSpecReuse) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    PublishResult const paired = serveSpec(m, h, 12);
    AcquireResult vanilla = m.acquireVanilla(h, 13);
    // A vanilla request on an EAGLE deployment may reuse the base side of the paired record.
    EXPECT_EQ(vanilla.plan.reuseTokenLength, 12);
    PublishResult const again = m.publish(*vanilla.lease, {h, 13});
    EXPECT_EQ(again.status, PublishStatus::kExistingRecord);
    EXPECT_EQ(again.record, paired.record);
    vanilla.lease->release();
    EXPECT_TRUE(m.records().get(*paired.record).hasDraftPath());
    AcquireResult spec = m.acquireSpec(extend(h, 2, 1), 17);
    ASSERT_TRUE(spec.plan.draftRecord);
    EXPECT_EQ(*spec.plan.draftRecord, *paired.record);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecDraftUpgradeUsesCanonicalProjectedBasePath) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    AcquireResult vanilla = m.acquireVanilla(h, 12);
    PublishResult const baseOnly = m.publish(*vanilla.lease, {h, 12});  // base pages 0,1,2
    vanilla.lease->release();

    AcquireResult spec = m.acquireSpec(h, 12);  // base-only record ignored: cold in both pools
    ASSERT_EQ(spec.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(spec.lease->basePages(), (std::vector<PageId>{3, 4, 5}));
    EXPECT_EQ(spec.lease->draftPages(), (std::vector<PageId>{0, 1, 2}));
    PublishResult const upgraded = m.publish(*spec.lease, {h, 12});
    EXPECT_EQ(upgraded.status, PublishStatus::kPublished);
    EXPECT_EQ(upgraded.record, baseOnly.record);  // the same record gained a draft path
    EXPECT_EQ(upgraded.canonicalBasePages, (std::vector<PageId>{0, 1, 2}));
    CacheRecord const record = m.records().materialize(*baseOnly.record);
    EXPECT_EQ(record.basePagePath, (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(record.draftPagePath, (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(m.pools().cacheRefCount({kDraft, 1}), 1);
    EXPECT_EQ(m.draftIndex().entryCount(), 3u);
    spec.lease->release();
    EXPECT_EQ(m.pools().freeCount(kBase), 13);  // the spec lease's private base pages were duplicates
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, EvictingUpgradedSpecRecordReleasesDraftIndexAndReferences) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    AcquireResult vanilla = m.acquireVanilla(h, 12);
    PublishResult const record = m.publish(*vanilla.lease, {h, 12});
    vanilla.lease->release();
    AcquireResult spec = m.acquireSpec(h, 12);
    m.publish(*spec.lease, {h, 12});
    spec.lease->release();

    m.evictRecord(*record.record);
    EXPECT_EQ(m.draftIndex().entryCount(), 0u);
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_EQ(m.metrics().reclaimedDraftKvPages, 3u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 3u);
    EXPECT_TRUE(test::poolsFull(m));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecEvictionRemovesBothIndices) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 2);
    PublishResult const p = serveSpec(m, h, 8);
    EXPECT_EQ(m.baseIndex().size(), 2u);
    EXPECT_EQ(m.draftIndex().entryCount(), 2u);
    EXPECT_EQ(m.draftIndex().lookupLongest(p.canonicalBasePages, 2), (DraftPathMatch{*p.record, 2}));
    m.evictRecord(*p.record);
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_EQ(m.draftIndex().entryCount(), 0u);
    EXPECT_FALSE(m.draftIndex().lookupLongest(p.canonicalBasePages, 2));
    EXPECT_TRUE(test::poolsFull(m));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecGrowthIsAtomicAcrossBaseAndDraftPools) {
    ContextCacheManager m(kPage, specCapacities(8, 4), 8);
    AcquireResult r = m.acquireSpec(chain(1, 2), 9);  // 3 pages in each pool
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    auto const before = describe(m);
    std::vector<PageId> const base = r.lease->basePages();
    EXPECT_FALSE(m.growSpecPages(*r.lease, 2, 2));  // base has 5 free, draft only 1
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(r.lease->basePages(), base);
    EXPECT_TRUE(m.growSpecPages(*r.lease, 2, 1));
    EXPECT_EQ(r.lease->basePages().size(), 5u);
    EXPECT_EQ(r.lease->draftPages().size(), 4u);
    EXPECT_TRUE(m.growSpecPages(*r.lease, 0, 0));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecHitIsTreatedAsMruDuringPressureEviction) {
    ContextCacheManager m(kPage, specCapacities(8, 8), 8);
    auto const older = chain(1, 3);
    auto const newer = chain(2, 3);
    PublishResult const hit = serveSpec(m, older, 12);      // pages 0..2: the LRU record
    PublishResult const other = serveSpec(m, newer, 12);    // pages 3..5: the MRU record
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*hit.record, *other.record}));

    // Hitting the LRU record with 2 bound pages and 5 private pages needed (2 free): someone must go.
    AcquireResult r = m.acquireSpec(extend(older, 3, 4), 28);
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    EXPECT_TRUE(m.records().contains(*hit.record));     // the hit was planned as most recent ...
    EXPECT_FALSE(m.records().contains(*other.record));  // ... so the other record was the victim
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*hit.record}));
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, InfeasibleSpecAcquirePreservesLruAndTypedReferences) {
    ContextCacheManager m(kPage, specCapacities(8, 4), 8);
    auto const h = chain(1, 3);
    serveSpec(m, h, 12);
    AcquireResult holder = m.acquireSpec(chain(2, 1), 4);  // pins one more page per pool
    auto const before = describe(m);
    AcquireResult r = m.acquireSpec(extend(h, 3, 6), 40);  // needs 8 draft pages: impossible
    EXPECT_EQ(r.status, AcquireStatus::kInsufficientCapacity);
    EXPECT_FALSE(r.lease);
    EXPECT_EQ(r.plan.reuseTokenLength, 8);  // the plan is still reported
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(m.metrics().evictedRecords, 0u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, LeaseKindsAreEnforced) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 2, 2}, 8);
    AcquireResult spec = m.acquireSpec(chain(1, 1), 5);
    AcquireResult vanilla = m.acquireVanilla(chain(2, 1), 5);
    auto const before = describe(m);
    EXPECT_THROW(m.growBasePages(*spec.lease, 1), ContractError);
    EXPECT_THROW(m.growSpecPages(*vanilla.lease, 1, 1), ContractError);
    EXPECT_THROW(m.reserveHybridSnapshots(*spec.lease, false), ContractError);
    EXPECT_THROW(m.growSpecPages(*spec.lease, -1, 0), ContractError);
    EXPECT_THROW(m.growSpecPages(*spec.lease, 0, -1), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(SpecManager, SpecPublicationNeedsDraftPagesThroughTheBoundary) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 4);
    AcquireResult r = m.acquireSpec(chain(1, 2), 8);  // 2 pages per pool
    ASSERT_TRUE(m.growSpecPages(*r.lease, 2, 0));     // base grows to 4, draft stays at 2
    auto const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {h, 16}), ContractError);  // 4 blocks but only 2 draft pages
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(m.publish(*r.lease, {h, 8}).publishedBaseFullBlockCount, 2);
    EXPECT_NO_THROW(m.checkInvariants());
}

// Issue 24 item 4: on a multi-turn conversation workload under eviction, spec was 25 times slower than vanilla
// because evicting a record walked every shared boundary's list in the draft index (the LRU victim, an early turn,
// sits at the far end of each). The work per draft entry removed must stay bounded however many records share its
// boundaries: counted, not timed.
TEST(SpecEviction, EvictionWorkPerDraftEntryDoesNotGrowWithTheTurnsSharingIt) {
    ContextCacheManager m(kPage, specCapacities(400, 400), 1000);
    std::vector<BlockHash> const system = chain(1, 6);
    constexpr int kConversations = 16, kTurns = 16;
    std::vector<std::vector<BlockHash>> history(kConversations, system);
    size_t inserted = 0;
    for (int t = 0; t < kTurns; ++t) {
        for (int c = 0; c < kConversations; ++c) {
            std::vector<BlockHash>& h = history[static_cast<size_t>(c)];
            h = extend(h, 100 + static_cast<uint64_t>(c), 2);  // the answer and the next question
            PublishResult const p = serveSpec(m, h, static_cast<int32_t>(h.size()) * kPage + 1);
            if (p.status == PublishStatus::kPublished) inserted += static_cast<size_t>(p.publishedBaseFullBlockCount);
        }
    }
    EXPECT_NO_THROW(m.checkInvariants());
    ASSERT_GT(m.metrics().evictedRecords, 50);
    size_t const removed = inserted - m.draftIndex().entryCount();
    ASSERT_GT(removed, 1000u);
    EXPECT_LE(m.draftIndex().eraseLinkVisits(), 3 * removed);  // the list walk read about 16 per entry here
}

// A spec publication supersedes the record its lease hit only when it dominates it (docs/ENGINES.md).
TEST(SpecSupersede, ADominatedHitGoesAndItsUnbindableDraftPageIsFreed) {
    ContextCacheManager m(kPage, specCapacities(16, 16), 8);
    auto const h = chain(1, 3);
    PublishResult const first = serveSpec(m, h, 12);  // base and draft pages 0, 1, 2
    PublishResult const second = serveSpec(m, extend(h, 2, 2), 20);
    EXPECT_EQ(second.supersededRecord, first.record);
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*second.record}));
    EXPECT_EQ(m.records().get(*second.record).draftPagePath, (std::vector<PageId>{0, 1, 3, 4, 5}));
    EXPECT_TRUE(m.pools().isFree({kDraft, 2}));  // the first record's last draft page: nothing could bind it
    EXPECT_EQ(m.draftIndex().entryCount(), 5u);
    EXPECT_EQ(m.metrics().supersededRecords, 1u);
    EXPECT_EQ(m.metrics().evictedRecords, 0u);
    EXPECT_NO_THROW(m.checkInvariants());
    // The successor serves every boundary the first record did, with the same draft pages.
    AcquireResult again = m.acquireSpec(h, 13);
    EXPECT_EQ(again.plan.draftRecord, second.record);
    EXPECT_EQ(again.plan.draftPageBindings, (std::vector<PageId>{0, 1}));
}

TEST(SpecSupersede, APinnedHitOrOneWithRetentionRangesStays) {
    RetentionSpec const high{{{0, kRetentionOpenEnd, 90, kNoRetentionDuration}}};
    for (bool pin : {true, false}) {
        ContextCacheManager m(kPage, specCapacities(16, 16), 8);
        auto const h = chain(1, 3);
        AcquireResult cold = m.acquireSpec(h, 12);
        PublishRequest request{h, 12};
        if (!pin) request.retention = &high;
        PublishResult const first = m.publish(*cold.lease, request);
        cold.lease->release();
        if (pin) {
            m.setPinBudget(0.5);
            m.pinRecord(*first.record);
        }
        PublishResult const second = serveSpec(m, extend(h, 2, 2), 20);
        EXPECT_FALSE(second.supersededRecord);
        EXPECT_TRUE(m.records().contains(*first.record));
        EXPECT_FALSE(m.pools().isFree({kDraft, 2}));
        EXPECT_EQ(m.metrics().supersededRecords, 0u);
        EXPECT_NO_THROW(m.checkInvariants());
    }
}

TEST(SpecSupersede, AShorterDivergingOrVanillaPublicationKeepsTheHit) {
    ContextCacheManager m(kPage, specCapacities(24, 24), 16);
    auto const h = chain(1, 5);
    PublishResult const first = serveSpec(m, h, 20);
    // Shorter: hits three blocks of it and publishes three.
    PublishResult const shorter = serveSpec(m, chain(1, 3), 12);
    EXPECT_FALSE(shorter.supersededRecord);
    // Diverging: it hits the first record at boundary 4 (the only one that long), then has blocks of its own:
    // longer, but not an extension of the record it hit.
    auto const diverged = extend(chain(1, 4), 7, 2);
    AcquireResult hit = m.acquireSpec(diverged, 24);
    ASSERT_EQ(hit.plan.draftRecord, first.record);
    PublishResult const other = m.publish(*hit.lease, {diverged, 24});
    hit.lease->release();
    EXPECT_FALSE(other.supersededRecord);
    // A vanilla lease hits base pages, not a record: it supersedes nothing.
    AcquireResult vanilla = m.acquireVanilla(extend(h, 9, 1), 24);
    PublishResult const longer = m.publish(*vanilla.lease, {extend(h, 9, 1), 24});
    vanilla.lease->release();
    EXPECT_FALSE(longer.supersededRecord);
    for (PublishResult const* p : {&first, &shorter, &other, &longer}) EXPECT_TRUE(m.records().contains(*p->record));
    EXPECT_EQ(m.metrics().supersededRecords, 0u);
    EXPECT_NO_THROW(m.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
