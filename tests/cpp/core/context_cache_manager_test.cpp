// ContextCacheManager (vanilla scope, plus a few EAGLE cases): acquire -> publish -> release, canonical pages,
// eviction, growth, record limit, contract errors and lease lifetime (reference c.7, f).
#include "ctxcache/context_cache_manager.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::activeRefs;
using test::basePage;
using test::cacheRefs;
using test::describe;
using test::draftPage;
using test::freeBase;
using test::H;
using test::Hs;
using test::produce;

constexpr int32_t kPage = 4;
std::vector<BlockHash> const kNoHashes;

std::vector<int32_t> freeList(ContextCacheManager const& m) { return m.pools().freeList(ResourceType::kBaseKvPage); }

// `call` throws a ContractError that mentions `mentions`: the intended check fired, not some later failure.
template <class F>
::testing::AssertionResult throwsContractError(F&& call, char const* mentions) {
    try {
        call();
    } catch (ContractError const& e) {
        if (std::string(e.what()).find(mentions) != std::string::npos) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure()
               << "ContractError \"" << e.what() << "\" does not mention \"" << mentions << '"';
    } catch (std::exception const& e) {
        return ::testing::AssertionFailure() << "threw another exception: " << e.what();
    }
    return ::testing::AssertionFailure() << "did not throw";
}

// ---- acquire ----------------------------------------------------------------------------------------------

TEST(ContextCacheManager, AcquirePinsHitsBeforeEvictionAndAllocatesPrivatePages) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    ASSERT_EQ(produce(m, Hs({1, 2}), 8), 1u);  // record 1 owns pages 0, 1; pages 2, 3 free
    ASSERT_EQ(freeList(m), (std::vector<int32_t>{2, 3}));

    // 16 tokens sharing block 1: page 0 is a hit, 3 private pages are needed but only 2 are free. Evicting
    // record 1 returns page 1 only, because the hit on page 0 is pinned before the eviction is planned.
    AcquireResult r = m.acquireVanilla(Hs({1, 3}), 16);
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    ASSERT_TRUE(r.lease.has_value());
    EXPECT_EQ(r.plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(r.plan.matchedTokenLength, 4);
    EXPECT_EQ(r.plan.reuseTokenLength, 4);
    EXPECT_EQ(r.plan.basePageBindings, (std::vector<PageId>{0}));
    EXPECT_EQ(r.plan.demand, (ResourceDemand{3, 0, 0, 0}));
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 2, 3, 1}));
    EXPECT_EQ(r.lease->matchedBlockHashes(), Hs({1}));
    EXPECT_EQ(r.lease->mode(), ReusePlanMode::kVanilla);
    EXPECT_TRUE(r.lease->draftPages().empty());
    EXPECT_EQ(r.lease->manager(), &m);

    EXPECT_EQ(m.records().size(), 0u);
    EXPECT_EQ(activeRefs(m, basePage(0)), 1);
    EXPECT_EQ(cacheRefs(m, basePage(0)), 0);
    EXPECT_FALSE(m.baseIndex().lookup(H(1)).has_value());  // the mapping went with the last cache ref
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);
    EXPECT_EQ(freeBase(m), 0);
    EXPECT_EQ(m.liveLeaseCount(), 1u);
    EXPECT_NO_THROW(m.checkInvariants());

    // The pinned page lost its mapping, not its content: republishing makes it canonical again.
    PublishResult const p = m.publish(*r.lease, {Hs({1, 3}), 8});
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 2}));
    EXPECT_EQ(m.baseIndex().lookup(H(1)), std::optional<PageId>(0));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, BypassAcquireBuildsAForcedColdPlan) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    produce(m, Hs({1, 2}), 8);  // pages 0, 1
    produce(m, Hs({3}), 4);     // page 2
    std::string const indexBefore = describe(m.baseIndex());
    AcquireResult r = m.acquireVanilla(Hs({1, 2}), 9, ContextCacheLookupPolicy::kBypass);
    ASSERT_TRUE(r.lease.has_value());
    EXPECT_EQ(r.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(r.plan.matchedTokenLength, 0);
    EXPECT_EQ(r.plan.reuseTokenLength, 0);
    EXPECT_TRUE(r.plan.basePageBindings.empty());
    EXPECT_EQ(r.plan.demand, (ResourceDemand{3, 0, 0, 0}));
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{3, 4, 5}));  // fresh pages, not the cached 0 and 1
    EXPECT_TRUE(r.lease->matchedBlockHashes().empty());
    EXPECT_EQ(activeRefs(m, basePage(0)), 0);
    EXPECT_EQ(activeRefs(m, basePage(1)), 0);
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{1, 2}));
    EXPECT_EQ(describe(m.baseIndex()), indexBefore);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, InfeasibleAcquireRollsBackPinsWithoutEviction) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    produce(m, Hs({1, 2}), 8);                             // record 1: pages 0, 1
    AcquireResult running = m.acquireVanilla(Hs({8}), 8);  // a miss holding pages 2, 3
    ASSERT_EQ(running.lease->basePages(), (std::vector<PageId>{2, 3}));
    std::string const before = describe(m);

    // Hit on pages 0 and 1 plus one private page: nothing is free, and the only record holds the pinned hit.
    AcquireResult r = m.acquireVanilla(Hs({1, 2, 3}), 12);
    EXPECT_EQ(r.status, AcquireStatus::kInsufficientCapacity);
    EXPECT_FALSE(r.lease.has_value());
    EXPECT_EQ(r.plan.kind, ReusePlanKind::kStandard);  // the plan is still reported
    EXPECT_EQ(r.plan.matchedTokenLength, 8);
    EXPECT_EQ(r.plan.basePageBindings, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(r.plan.demand, (ResourceDemand{1, 0, 0, 0}));
    EXPECT_EQ(describe(m), before);  // pins dropped, record 1 not evicted, metrics untouched
    EXPECT_EQ(m.metrics().evictedRecords, 0u);
    EXPECT_NO_THROW(m.checkInvariants());

    running.lease->release();
    AcquireResult retry = m.acquireVanilla(Hs({1, 2, 3}), 12);
    ASSERT_TRUE(retry.lease.has_value());
    EXPECT_EQ(retry.lease->basePages(), (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(m.records().size(), 1u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, EvictionMetricsCountOnlyResourcesReturnedToFreeLists) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    RecordId const r1 = produce(m, Hs({1, 2}), 8);  // pages 0, 1
    AcquireResult hit = m.acquireVanilla(Hs({1}), 5);
    ASSERT_EQ(hit.lease->basePages(), (std::vector<PageId>{0, 2}));
    m.evictRecord(r1);
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);  // page 1; page 0 is still pinned by the hit
    EXPECT_EQ(m.metrics().reclaimedDraftKvPages, 0u);
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{3, 1}));
    EXPECT_FALSE(m.baseIndex().lookup(H(1)).has_value());
    EXPECT_EQ(activeRefs(m, basePage(0)), 1);
    EXPECT_NO_THROW(m.checkInvariants());

    hit.lease->release();  // page 0 is freed by the lease, not by an eviction: metrics do not move
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{3, 1, 0, 2}));
    EXPECT_THROW(m.evictRecord(r1), ContractError);
    EXPECT_THROW(m.evictRecord(kNoRecord), ContractError);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, EmptyInputAcquiresALeaseWithoutPages) {
    ContextCacheManager m(kPage, {2, 0, 0, 0}, 8);
    AcquireResult r = m.acquireVanilla(kNoHashes, 0);
    ASSERT_TRUE(r.lease.has_value());
    EXPECT_EQ(r.plan.kind, ReusePlanKind::kStandard);  // c.6: the reference's empty (default) plan
    EXPECT_TRUE(r.lease->valid());
    EXPECT_TRUE(r.lease->basePages().empty());
    EXPECT_EQ(r.plan.demand, (ResourceDemand{}));
    EXPECT_TRUE(m.growBasePages(*r.lease, 1));
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, AcquireContractErrorsCreateNoLease) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    produce(m, Hs({1}), 4);
    std::string const before = describe(m);
    EXPECT_THROW(m.acquireVanilla(Hs({1, 2}), 7), ContractError);  // 2 hashes for 1 full block
    EXPECT_THROW(m.acquireVanilla(kNoHashes, -1), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(m.liveLeaseCount(), 0u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, ConstructorRejectsInvalidConfiguration) {
    EXPECT_THROW(ContextCacheManager(0, {4, 0, 0, 0}, 8), ContractError);
    EXPECT_THROW(ContextCacheManager(-4, {4, 0, 0, 0}, 8), ContractError);
    EXPECT_THROW(ContextCacheManager(4, {4, -1, 0, 0}, 8), ContractError);
    EXPECT_THROW(ContextCacheManager(4, {4, 0, 0, 0}, -1), ContractError);
    ContextCacheManager m(7, {0, 0, 0, 0}, 0);  // any positive page size; empty pools are valid
    EXPECT_EQ(m.pageSize(), 7);
    EXPECT_NO_THROW(m.checkInvariants());
}

// ---- lease lifetime ---------------------------------------------------------------------------------------

TEST(ContextCacheManager, LeaseDestructorReleasesEveryUnpublishedResource) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    {
        AcquireResult r = m.acquireVanilla(Hs({1}), 6);
        ASSERT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1}));
        ASSERT_TRUE(m.growBasePages(*r.lease, 1));
        m.publish(*r.lease, {Hs({1}), 4});  // only page 0 becomes cached
        EXPECT_EQ(activeRefs(m, basePage(2)), 1);
    }
    EXPECT_EQ(m.liveLeaseCount(), 0u);
    EXPECT_EQ(activeRefs(m, basePage(0)), 0);
    EXPECT_EQ(cacheRefs(m, basePage(0)), 1);
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{3, 4, 5, 1, 2}));
    {
        AcquireResult unpublished = m.acquireVanilla(Hs({5, 6}), 11);
        EXPECT_EQ(unpublished.lease->basePages(), (std::vector<PageId>{3, 4, 5}));
    }
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(m.records().size(), 1u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, LeaseMoveTransfersOwnership) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    CacheRequestLease a = std::move(*m.acquireVanilla(kNoHashes, 8).lease);
    ASSERT_EQ(a.basePages(), (std::vector<PageId>{0, 1}));
    CacheRequestLease b(std::move(a));
    EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
    EXPECT_TRUE(a.basePages().empty());
    EXPECT_EQ(a.manager(), nullptr);
    EXPECT_TRUE(b.valid());
    EXPECT_EQ(b.basePages(), (std::vector<PageId>{0, 1}));
    EXPECT_EQ(m.liveLeaseCount(), 1u);
    EXPECT_EQ(activeRefs(m, basePage(0)), 1);

    CacheRequestLease c = std::move(*m.acquireVanilla(kNoHashes, 4).lease);
    ASSERT_EQ(c.basePages(), (std::vector<PageId>{2}));
    c = std::move(b);  // c's own page 2 is released first
    EXPECT_EQ(c.basePages(), (std::vector<PageId>{0, 1}));
    EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(m.pools().isFree(basePage(2)));
    EXPECT_EQ(m.liveLeaseCount(), 1u);
    EXPECT_NO_THROW(m.checkInvariants());

    a.release();  // moved-from: no-op
    c.release();
    EXPECT_FALSE(c.valid());
    c.release();  // twice: no-op
    EXPECT_EQ(freeBase(m), 4);
    EXPECT_EQ(m.liveLeaseCount(), 0u);
    CacheRequestLease empty;
    EXPECT_FALSE(empty.valid());
    empty.release();
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, ManagerDestroyedWhileLeaseAliveDetachesTheLease) {
    auto m = std::make_unique<ContextCacheManager>(kPage, ResourceDemand{4, 0, 0, 0}, 8);
    CacheRequestLease kept = std::move(*m->acquireVanilla(kNoHashes, 8).lease);
    CacheRequestLease second = std::move(*m->acquireVanilla(kNoHashes, 4).lease);
    ASSERT_TRUE(kept.valid());
    EXPECT_EQ(m->liveLeaseCount(), 2u);
    EXPECT_NO_THROW(m->checkInvariants());
    m.reset();
    EXPECT_FALSE(kept.valid());
    EXPECT_EQ(kept.manager(), nullptr);
    EXPECT_FALSE(second.valid());
    kept.release();  // a safe no-op: it must not reach the destroyed manager
    CacheRequestLease moved(std::move(second));
    EXPECT_FALSE(moved.valid());
    // `moved` and `kept` are destroyed at scope exit without touching freed memory (run under ASan to see).
}

// ---- publish ----------------------------------------------------------------------------------------------

TEST(ContextCacheManager, PublishAddsCacheRefsBeforeDroppingActivity) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    AcquireResult r = m.acquireVanilla(Hs({1, 2}), 9);
    ASSERT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1, 2}));
    PublishResult const p = m.publish(*r.lease, {Hs({1, 2}), 9});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    EXPECT_EQ(p.record, std::optional<RecordId>(1));
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(p.publishedBaseFullBlockCount, 2);
    // While the producer still runs, its published pages carry both references.
    for (PageId page : {0, 1}) {
        EXPECT_EQ(activeRefs(m, basePage(page)), 1);
        EXPECT_EQ(cacheRefs(m, basePage(page)), 1);
    }
    EXPECT_EQ(activeRefs(m, basePage(2)), 1);
    EXPECT_EQ(cacheRefs(m, basePage(2)), 0);
    EXPECT_EQ(m.baseIndex().lookup(H(2)), std::optional<PageId>(1));
    CacheRecord const rec = m.records().materialize(1);
    EXPECT_EQ(rec.key, (CacheRecordKey{H(2), 2}));
    EXPECT_EQ(rec.logicalBlockHashes, Hs({1, 2}));
    EXPECT_NO_THROW(m.checkInvariants());

    r.lease->release();
    EXPECT_EQ(activeRefs(m, basePage(0)), 0);
    EXPECT_EQ(cacheRefs(m, basePage(0)), 1);
    EXPECT_FALSE(m.pools().isFree(basePage(1)));
    EXPECT_EQ(m.pools().reclaimableCount(ResourceType::kBaseKvPage), 2);
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{3, 2}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, PublicationIsBoundedByResidentStateLength) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    AcquireResult r = m.acquireVanilla(Hs({1, 2}), 9);
    PublishResult const one = m.publish(*r.lease, {Hs({1, 2}), 7});  // only block 1 is resident
    EXPECT_EQ(one.publishedBaseFullBlockCount, 1);
    EXPECT_EQ(one.canonicalBasePages, (std::vector<PageId>{0}));
    EXPECT_EQ(m.records().get(*one.record).key, (CacheRecordKey{H(1), 1}));
    PublishResult const two = m.publish(*r.lease, {Hs({1, 2}), 9});
    EXPECT_EQ(two.status, PublishStatus::kPublished);
    EXPECT_EQ(two.canonicalBasePages, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(cacheRefs(m, basePage(0)), 2);  // one per record listing it
    EXPECT_EQ(cacheRefs(m, basePage(1)), 1);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, LaterPublicationUsesCanonicalPageChosenByEarlierProducer) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    // Two cold producers of the same first blocks run concurrently.
    AcquireResult a = m.acquireVanilla(Hs({1, 2}), 8);
    AcquireResult b = m.acquireVanilla(Hs({1, 2, 3}), 12);
    ASSERT_EQ(a.lease->basePages(), (std::vector<PageId>{0, 1}));
    ASSERT_EQ(b.lease->basePages(), (std::vector<PageId>{2, 3, 4}));
    m.publish(*a.lease, {Hs({1, 2}), 8});
    PublishResult const p = m.publish(*b.lease, {Hs({1, 2, 3}), 12});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    EXPECT_EQ(p.record, std::optional<RecordId>(2));
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1, 4}));  // A's pages for blocks 1-2, B's for 3
    EXPECT_EQ(m.records().get(2).basePagePath, (std::vector<PageId>{0, 1, 4}));
    EXPECT_EQ(cacheRefs(m, basePage(0)), 2);
    EXPECT_EQ(cacheRefs(m, basePage(1)), 2);
    EXPECT_EQ(cacheRefs(m, basePage(4)), 1);
    EXPECT_EQ(cacheRefs(m, basePage(2)), 0);  // B's duplicates never become cache state
    EXPECT_EQ(cacheRefs(m, basePage(3)), 0);
    EXPECT_EQ(m.baseIndex().size(), 3u);
    EXPECT_FALSE(m.baseIndex().hashOfPage(2).has_value());
    EXPECT_NO_THROW(m.checkInvariants());

    a.lease->release();
    b.lease->release();
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{5, 6, 7, 2, 3}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, PublicationProjectsCanonicalOverlapWithoutRebindingLease) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    AcquireResult a = m.acquireVanilla(Hs({1, 2}), 8);
    AcquireResult b = m.acquireVanilla(Hs({1, 2, 3}), 12);
    m.publish(*a.lease, {Hs({1, 2}), 8});
    m.publish(*b.lease, {Hs({1, 2, 3}), 12});
    // B keeps executing on its own pages: the canonical pages are not an active-row update.
    EXPECT_EQ(b.lease->basePages(), (std::vector<PageId>{2, 3, 4}));
    EXPECT_EQ(activeRefs(m, basePage(2)), 1);
    EXPECT_EQ(activeRefs(m, basePage(0)), 1);  // A's pin only
    ASSERT_TRUE(m.growBasePages(*b.lease, 1));
    EXPECT_EQ(b.lease->basePages(), (std::vector<PageId>{2, 3, 4, 5}));
    PublishResult const later = m.publish(*b.lease, {Hs({1, 2, 3, 4}), 16});
    EXPECT_EQ(later.canonicalBasePages, (std::vector<PageId>{0, 1, 4, 5}));
    EXPECT_EQ(cacheRefs(m, basePage(2)), 0);
    EXPECT_EQ(cacheRefs(m, basePage(3)), 0);
    b.lease->release();
    EXPECT_TRUE(m.pools().isFree(basePage(2)));
    EXPECT_TRUE(m.pools().isFree(basePage(3)));
    EXPECT_EQ(m.records().get(3).basePagePath, (std::vector<PageId>{0, 1, 4, 5}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, MatchedPagesWhoseRecordWasEvictedArePublishedAgainOrYieldToALaterProducer) {
    // A lease pins the hit pages of record 1; the record is evicted under it, so those pages leave the index.
    // Publishing then re-maps them (nobody else did), or, when another producer mapped the same hashes
    // meanwhile, takes that producer's canonical pages (first committer wins) and keeps its own private.
    for (bool const otherProducer : {false, true}) {
        SCOPED_TRACE(otherProducer ? "another producer in between" : "no other producer");
        ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
        AcquireResult first = m.acquireVanilla(Hs({1, 2}), 8);
        m.publish(*first.lease, {Hs({1, 2}), 8});
        first.lease->release();
        AcquireResult a = m.acquireVanilla(Hs({1, 2, 3}), 12);
        ASSERT_EQ(a.lease->basePages(), (std::vector<PageId>{0, 1, 2}));  // pages 0, 1 are hits
        m.evictRecord(1);
        EXPECT_FALSE(m.baseIndex().isMapped(0));
        EXPECT_FALSE(m.baseIndex().isMapped(1));
        if (otherProducer) {
            AcquireResult b = m.acquireVanilla(Hs({1, 2}), 8);  // a miss now: fresh pages
            ASSERT_EQ(b.lease->basePages(), (std::vector<PageId>{3, 4}));
            m.publish(*b.lease, {Hs({1, 2}), 8});
            b.lease->release();
        }
        PublishResult const p = m.publish(*a.lease, {Hs({1, 2, 3}), 12});
        std::vector<PageId> const expected =
            otherProducer ? std::vector<PageId>{3, 4, 2} : std::vector<PageId>{0, 1, 2};
        EXPECT_EQ(p.canonicalBasePages, expected);
        EXPECT_EQ(m.baseIndex().lookup(H(1)), std::optional<PageId>(expected[0]));
        EXPECT_EQ(m.baseIndex().lookup(H(2)), std::optional<PageId>(expected[1]));
        EXPECT_EQ(m.baseIndex().lookup(H(3)), std::optional<PageId>(2));
        EXPECT_EQ(m.baseIndex().size(), 3u);
        EXPECT_NO_THROW(m.checkInvariants());
        a.lease->release();
        // The lease's own copies of blocks 1-2 are private when another producer won: back on the free list.
        EXPECT_EQ(m.pools().isFree(basePage(0)), otherProducer);
        EXPECT_EQ(m.pools().isFree(basePage(1)), otherProducer);
        EXPECT_EQ(m.pools().freeCount(ResourceType::kBaseKvPage), 5);  // pages 2, 3, 4 or 0, 1, 2 cached
        EXPECT_NO_THROW(m.checkInvariants());
    }
}

TEST(ContextCacheManager, MatchedPageMappedToAnotherHashRefusesThePublication) {
    // Issue 24 (the model-based test's divergence, shrunk): a cold producer P publishes H1 H2 H3 on its pages
    // 0 1 2; Q hits H1 at page 0; the record is evicted (P and Q still pin page 0); P publishes again with its
    // first hash changed to H9 (a cold lease's hashes are checked against nothing, so page 0 becomes canonical for
    // H9). Q's true chain H1 H2 then finds H1 indexed nowhere and its page 0 canonical for another hash: refused,
    // nothing changed (the model's answer, and BaseBlockIndex::insert's). Before the fix the library took the
    // matched page on its mapped bit alone and stored a record holding page 0 for H1, which the index maps to H9.
    // With another producer having published H1 since, Q takes that producer's page (first committer wins).
    for (bool const otherProducer : {false, true}) {
        SCOPED_TRACE(otherProducer ? "H1 republished elsewhere" : "H1 indexed nowhere");
        ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
        AcquireResult p = m.acquireVanilla(kNoHashes, 12);
        ASSERT_EQ(p.lease->basePages(), (std::vector<PageId>{0, 1, 2}));
        ASSERT_EQ(m.publish(*p.lease, {Hs({1, 2, 3}), 12}).record, std::optional<RecordId>(1));
        AcquireResult q = m.acquireVanilla(Hs({1, 2}), 8);  // a full-input rewind: H1 bound, block 2 private
        ASSERT_EQ(q.lease->basePages(), (std::vector<PageId>{0, 3}));
        ASSERT_EQ(q.lease->matchedBlockHashes(), Hs({1}));
        m.evictRecord(1);
        PublishResult const lie = m.publish(*p.lease, {Hs({9, 2, 3}), 12});
        ASSERT_EQ(lie.canonicalBasePages, (std::vector<PageId>{0, 1, 2}));
        ASSERT_EQ(m.baseIndex().hashOfPage(0), std::optional<BlockHash>(H(9)));
        if (otherProducer) {
            AcquireResult b = m.acquireVanilla(Hs({1}), 4);  // a miss: a fresh page
            ASSERT_EQ(b.lease->basePages(), (std::vector<PageId>{4}));
            m.publish(*b.lease, {Hs({1}), 4});
        }
        std::string const before = describe(m);
        if (!otherProducer) {
            EXPECT_TRUE(throwsContractError([&] { m.publish(*q.lease, {Hs({1, 2}), 8}); },
                                            "page 0 is already the canonical page of another hash"));
            EXPECT_EQ(describe(m), before);
            EXPECT_FALSE(m.baseIndex().lookup(H(1)).has_value());
            EXPECT_EQ(m.baseIndex().lookup(H(9)), std::optional<PageId>(0));
            EXPECT_EQ(m.records().size(), 1u);
            EXPECT_NO_THROW(m.checkInvariants());
            // Once the lying record is gone, page 0 is free to be canonical for what Q holds.
            m.evictRecord(lie.record.value());
            PublishResult const ok = m.publish(*q.lease, {Hs({1, 2}), 8});
            EXPECT_EQ(ok.status, PublishStatus::kPublished);
            EXPECT_EQ(ok.canonicalBasePages, (std::vector<PageId>{0, 3}));
        } else {
            PublishResult const ok = m.publish(*q.lease, {Hs({1, 2}), 8});
            EXPECT_EQ(ok.status, PublishStatus::kPublished);
            EXPECT_EQ(ok.canonicalBasePages, (std::vector<PageId>{4, 1}));  // H1 at B's page, H2 at P's
            EXPECT_EQ(m.baseIndex().hashOfPage(0), std::optional<BlockHash>(H(9)));
        }
        EXPECT_EQ(m.baseIndex().lookup(H(1)), std::optional<PageId>(otherProducer ? 4 : 0));
        EXPECT_NO_THROW(m.checkInvariants());
    }
}

TEST(ContextCacheManager, PublicationRollbackRestoresRefsAfterBaseMappingConflict) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    {
        // One lease publishes two different hash lists over the same private pages.
        AcquireResult l = m.acquireVanilla(kNoHashes, 8);
        m.publish(*l.lease, {Hs({1, 2}), 8});  // pages 0, 1 now canonical for H1, H2
        std::string const before = describe(m);
        EXPECT_THROW(m.publish(*l.lease, {Hs({3, 4}), 8}), ContractError);
        EXPECT_EQ(describe(m), before);
        EXPECT_FALSE(m.baseIndex().lookup(H(3)).has_value());
        EXPECT_NO_THROW(m.checkInvariants());
    }
    // The conflict comes after a fresh mapping was already made inside the same publication.
    produce(m, Hs({11}), 4);  // page 2 is canonical for H11
    AcquireResult l = m.acquireVanilla(kNoHashes, 12);
    ASSERT_EQ(l.lease->basePages(), (std::vector<PageId>{3, 4, 5}));
    PublishResult const first = m.publish(*l.lease, {Hs({11, 12}), 8});
    ASSERT_EQ(first.canonicalBasePages, (std::vector<PageId>{2, 4}));  // page 3 stays an unmapped duplicate
    std::string const before = describe(m);
    // H15 would map page 3 (fresh), then H16 needs page 4, which is H12's: the whole publication rolls back.
    EXPECT_THROW(m.publish(*l.lease, {Hs({15, 16, 17}), 12}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_FALSE(m.baseIndex().lookup(H(15)).has_value());
    EXPECT_FALSE(m.baseIndex().hashOfPage(3).has_value());
    EXPECT_EQ(cacheRefs(m, basePage(3)), 0);
    EXPECT_NO_THROW(m.checkInvariants());
    // The lease is still usable for a consistent publication.
    PublishResult const ok = m.publish(*l.lease, {Hs({11, 12, 13}), 12});
    EXPECT_EQ(ok.canonicalBasePages, (std::vector<PageId>{2, 4, 5}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, ExactDuplicatePublicationMovesExistingRecordToMru) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    produce(m, Hs({1}), 4);  // record 1: page 0
    produce(m, Hs({2}), 4);  // record 2: page 1
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{1, 2}));
    AcquireResult c = m.acquireVanilla(Hs({1}), 6);
    ASSERT_EQ(c.lease->basePages(), (std::vector<PageId>{0, 2}));
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{1, 2}));  // the hit itself touched nothing
    PublishResult const p = m.publish(*c.lease, {Hs({1}), 6});
    EXPECT_EQ(p.status, PublishStatus::kExistingRecord);
    EXPECT_EQ(p.record, std::optional<RecordId>(1));
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0}));
    EXPECT_EQ(p.publishedBaseFullBlockCount, 1);
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{2, 1}));
    EXPECT_EQ(m.records().size(), 2u);
    EXPECT_EQ(m.records().nextId(), 3u);
    EXPECT_EQ(cacheRefs(m, basePage(0)), 1);  // no second listing
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, ExistingRecordPublicationDoesNotRebindActiveLease) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    AcquireResult a = m.acquireVanilla(Hs({1}), 4);
    AcquireResult b = m.acquireVanilla(Hs({1}), 4);  // concurrent cold producer of the same block
    ASSERT_EQ(b.lease->basePages(), (std::vector<PageId>{1}));
    m.publish(*a.lease, {Hs({1}), 4});
    PublishResult const p = m.publish(*b.lease, {Hs({1}), 4});
    EXPECT_EQ(p.status, PublishStatus::kExistingRecord);
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0}));
    EXPECT_EQ(b.lease->basePages(), (std::vector<PageId>{1}));
    EXPECT_EQ(activeRefs(m, basePage(1)), 1);
    EXPECT_EQ(cacheRefs(m, basePage(1)), 0);
    EXPECT_EQ(activeRefs(m, basePage(0)), 1);  // A only
    b.lease->release();
    EXPECT_TRUE(m.pools().isFree(basePage(1)));
    EXPECT_EQ(m.baseIndex().lookup(H(1)), std::optional<PageId>(0));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, FullInputRewindRepublishesTheExistingRecord) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    produce(m, Hs({1, 2}), 8);  // pages 0, 1
    AcquireResult r = m.acquireVanilla(Hs({1, 2}), 8);
    ASSERT_EQ(r.plan.kind, ReusePlanKind::kFullInputRewind);
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 2}));  // the last page is recomputed privately
    EXPECT_EQ(r.lease->matchedBlockHashes(), Hs({1}));
    EXPECT_EQ(activeRefs(m, basePage(1)), 0);
    PublishResult const p = m.publish(*r.lease, {Hs({1, 2}), 8});
    EXPECT_EQ(p.status, PublishStatus::kExistingRecord);
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(cacheRefs(m, basePage(2)), 0);
    r.lease->release();
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{3, 2}));
    EXPECT_NO_THROW(m.checkInvariants());
}

// ---- publish contract errors: each throws ContractError and leaves everything as it was -------------------

TEST(ContextCacheManager, PublishOfZeroResidentBlocksThrows) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    AcquireResult r = m.acquireVanilla(kNoHashes, 8);
    std::string const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {kNoHashes, 8}), ContractError);
    EXPECT_THROW(m.publish(*r.lease, {Hs({1}), 3}), ContractError);  // hashes, but no resident full block
    EXPECT_THROW(m.publish(*r.lease, {Hs({1}), 0}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, PublishOfHashesNotExtendingTheAcquiredPrefixThrows) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    produce(m, Hs({1, 2}), 8);
    AcquireResult r = m.acquireVanilla(Hs({1, 2, 3}), 12);
    ASSERT_EQ(r.lease->matchedBlockHashes(), Hs({1, 2}));
    std::string const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {Hs({9, 2, 3}), 12}), ContractError);
    EXPECT_THROW(m.publish(*r.lease, {Hs({1, 9, 3}), 12}), ContractError);
    EXPECT_THROW(m.publish(*r.lease, {Hs({1, 9}), 8}), ContractError);
    EXPECT_EQ(describe(m), before);
    PublishResult const ok = m.publish(*r.lease, {Hs({1, 2, 3}), 12});
    EXPECT_EQ(ok.canonicalBasePages, (std::vector<PageId>{0, 1, 2}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, PublishOfMoreBlocksThanLeasePagesThrows) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    AcquireResult r = m.acquireVanilla(kNoHashes, 4);  // one page
    std::string const before = describe(m);
    EXPECT_TRUE(throwsContractError([&] { m.publish(*r.lease, {Hs({1, 2}), 8}); }, "base pages"));
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(m.publish(*r.lease, {Hs({1, 2}), 4}).publishedBaseFullBlockCount, 1);  // resident bound: fine
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, PublishWithNegativeResidentLengthThrows) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    AcquireResult r = m.acquireVanilla(kNoHashes, 8);
    std::string const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {Hs({1, 2}), -8}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, LeaseOfAnotherManagerIsRejected) {
    ContextCacheManager m1(kPage, {4, 0, 0, 0}, 8);
    ContextCacheManager m2(kPage, {4, 0, 0, 0}, 8);
    AcquireResult r = m1.acquireVanilla(kNoHashes, 8);
    std::string const before1 = describe(m1), before2 = describe(m2);
    EXPECT_THROW(m2.publish(*r.lease, {Hs({1, 2}), 8}), ContractError);
    EXPECT_THROW(m2.growBasePages(*r.lease, 1), ContractError);
    EXPECT_EQ(describe(m1), before1);
    EXPECT_EQ(describe(m2), before2);
    EXPECT_NO_THROW(m1.checkInvariants());
    EXPECT_NO_THROW(m2.checkInvariants());
}

TEST(ContextCacheManager, ReleasedOrMovedFromLeaseIsRejected) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    AcquireResult released = m.acquireVanilla(kNoHashes, 4);
    released.lease->release();
    AcquireResult source = m.acquireVanilla(kNoHashes, 4);
    CacheRequestLease target(std::move(*source.lease));
    std::string const before = describe(m);
    EXPECT_THROW(m.publish(*released.lease, {Hs({1}), 4}), ContractError);
    EXPECT_THROW(m.growBasePages(*released.lease, 1), ContractError);
    EXPECT_THROW(m.publish(*source.lease, {Hs({1}), 4}), ContractError);
    EXPECT_THROW(m.growBasePages(*source.lease, 1), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(m.publish(target, {Hs({1}), 4}).status, PublishStatus::kPublished);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, StandardPublicationRejectsHybridLease) {
    ContextCacheManager m(kPage, {4, 0, 1, 1}, 8);
    AcquireResult r = m.acquireHybrid({}, kNoHashes, 8, true);
    ASSERT_TRUE(r.lease.has_value());
    ASSERT_EQ(r.lease->mode(), ReusePlanMode::kHybrid);
    std::string const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {Hs({1, 2}), 8}), ContractError);
    EXPECT_THROW(m.growSpecPages(*r.lease, 1, 1), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

// ---- eviction, recency, record limit ----------------------------------------------------------------------

TEST(ContextCacheManager, EvictingOneBranchPreservesSharedAncestorPages) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    RecordId const r1 = produce(m, Hs({1, 2}), 8);  // pages 0, 1
    RecordId const r2 = produce(m, Hs({1, 3}), 8);  // hit on page 0, own page 2
    ASSERT_EQ(m.records().get(r2).basePagePath, (std::vector<PageId>{0, 2}));
    ASSERT_EQ(cacheRefs(m, basePage(0)), 2);
    m.evictRecord(r1);
    EXPECT_EQ(cacheRefs(m, basePage(0)), 1);
    EXPECT_TRUE(m.pools().isFree(basePage(1)));
    EXPECT_EQ(m.baseIndex().lookup(H(1)), std::optional<PageId>(0));
    EXPECT_FALSE(m.baseIndex().lookup(H(2)).has_value());
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);
    AcquireResult next = m.acquireVanilla(Hs({1, 3, 4}), 13);
    EXPECT_EQ(next.plan.reuseTokenLength, 8);
    EXPECT_EQ(next.lease->basePages(), (std::vector<PageId>{0, 2, 3, 4}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, BlockHitDoesNotTouchOwningRecordRecency) {
    ContextCacheManager m(kPage, {5, 0, 0, 0}, 8);
    produce(m, Hs({1, 2}), 8);  // record 1: pages 0, 1
    produce(m, Hs({5}), 4);     // record 2: page 2
    {
        AcquireResult hit = m.acquireVanilla(Hs({1, 2}), 9);
        ASSERT_EQ(hit.lease->basePages(), (std::vector<PageId>{0, 1, 3}));
        EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{1, 2}));
    }
    // Pressure after the hit: record 1 is still the least recent, so it is the victim, not record 2.
    AcquireResult cold = m.acquireVanilla(kNoHashes, 12);  // 3 pages: 2 free + record 1's two
    ASSERT_TRUE(cold.lease.has_value());
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{2}));
    EXPECT_EQ(cold.lease->basePages(), (std::vector<PageId>{4, 3, 0}));
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 2u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, CapacityEvictionTakesTheShortestLruPrefix) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    produce(m, Hs({1}), 4);  // record 1: page 0
    produce(m, Hs({2}), 4);  // record 2: page 1
    produce(m, Hs({3}), 4);  // record 3: page 2
    produce(m, Hs({2}), 4);  // exact duplicate: record 2 becomes MRU
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{1, 3, 2}));
    AcquireResult r = m.acquireVanilla(kNoHashes, 12);  // 3 pages: 1 free + 2 evicted
    ASSERT_TRUE(r.lease.has_value());
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{2}));
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{3, 0, 2}));
    EXPECT_EQ(m.metrics().evictedRecords, 2u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, RecordLimitEvictsTheLruRecord) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 2);
    produce(m, Hs({1}), 4);  // record 1: page 0
    produce(m, Hs({2}), 4);  // record 2: page 1
    EXPECT_EQ(produce(m, Hs({1}), 5), 1u);  // duplicate: record 1 becomes MRU (its private page 2 is freed)
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{2, 1}));
    AcquireResult r = m.acquireVanilla(Hs({3}), 4);
    ASSERT_EQ(r.lease->basePages(), (std::vector<PageId>{3}));
    PublishResult const p = m.publish(*r.lease, {Hs({3}), 4});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    EXPECT_EQ(p.record, std::optional<RecordId>(3));
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{1, 3}));
    EXPECT_FALSE(m.baseIndex().lookup(H(2)).has_value());
    EXPECT_TRUE(m.pools().isFree(basePage(1)));
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, RecordLimitVictimKeepsPagesTheNewRecordShares) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 1);
    RecordId const r1 = produce(m, Hs({1}), 4);  // page 0
    AcquireResult r = m.acquireVanilla(Hs({1, 2}), 8);
    ASSERT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1}));
    PublishResult const p = m.publish(*r.lease, {Hs({1, 2}), 8});
    EXPECT_EQ(p.record, std::optional<RecordId>(2));
    EXPECT_FALSE(m.records().contains(r1));
    EXPECT_EQ(cacheRefs(m, basePage(0)), 1);
    EXPECT_EQ(m.baseIndex().lookup(H(1)), std::optional<PageId>(0));
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 0u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, MaxRecordsZeroKeepsNothing) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 0);
    AcquireResult r = m.acquireVanilla(Hs({1, 2}), 8);
    PublishResult const p = m.publish(*r.lease, {Hs({1, 2}), 8});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    EXPECT_FALSE(p.record.has_value());
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(p.publishedBaseFullBlockCount, 2);
    EXPECT_EQ(m.records().size(), 0u);
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_EQ(cacheRefs(m, basePage(0)), 0);
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 0u);  // still pinned by the producer
    EXPECT_NO_THROW(m.checkInvariants());
    r.lease->release();
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{2, 3, 0, 1}));
    AcquireResult again = m.acquireVanilla(Hs({1, 2}), 8);
    EXPECT_EQ(again.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_NO_THROW(m.checkInvariants());
}

// ---- growth -----------------------------------------------------------------------------------------------

TEST(ContextCacheManager, DynamicGrowthAtomicallyAddsRequestedPages) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    produce(m, Hs({1}), 4);  // record 1: page 0 (reclaimable)
    AcquireResult r = m.acquireVanilla(kNoHashes, 4);
    ASSERT_EQ(r.lease->basePages(), (std::vector<PageId>{1}));

    std::string before = describe(m);
    EXPECT_FALSE(m.growBasePages(*r.lease, 4));  // 2 free + 1 reclaimable < 4: nothing evicted, nothing taken
    EXPECT_EQ(describe(m), before);

    EXPECT_TRUE(m.growBasePages(*r.lease, 2));
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{1, 2, 3}));
    EXPECT_EQ(m.records().size(), 1u);
    EXPECT_TRUE(m.growBasePages(*r.lease, 1));  // evicts record 1 for its page
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{1, 2, 3, 0}));
    EXPECT_EQ(m.records().size(), 0u);
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);

    before = describe(m);
    EXPECT_FALSE(m.growBasePages(*r.lease, 1));
    EXPECT_TRUE(m.growBasePages(*r.lease, 0));
    EXPECT_THROW(m.growBasePages(*r.lease, -1), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

// ---- whole lifecycle --------------------------------------------------------------------------------------

TEST(ContextCacheManager, EveryPoolReturnsToFullCapacityAfterLeasesAndRecordsGo) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 4);
    produce(m, Hs({1, 2}), 9);
    produce(m, Hs({1, 3}), 8);
    produce(m, Hs({1, 2, 4}), 14);
    AcquireResult held = m.acquireVanilla(Hs({1, 2}), 10);
    ASSERT_TRUE(m.growBasePages(*held.lease, 1));
    m.publish(*held.lease, {Hs({1, 2, 5}), 12});
    EXPECT_NO_THROW(m.checkInvariants());
    while (std::optional<RecordId> lru = m.records().leastRecent()) {
        m.evictRecord(*lru);
        EXPECT_NO_THROW(m.checkInvariants());
    }
    held.lease->release();
    EXPECT_EQ(freeBase(m), 8);
    std::vector<int32_t> free = freeList(m);
    std::sort(free.begin(), free.end());
    EXPECT_EQ(free, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_EQ(m.pools().reclaimableCount(ResourceType::kBaseKvPage), 0);
    EXPECT_EQ(m.liveLeaseCount(), 0u);
    EXPECT_EQ(m.metrics().evictedRecords, 4u);
    EXPECT_NO_THROW(m.checkInvariants());
}

// Seeded random traffic over a two-token alphabet (so prompts share prefixes and collide on whole blocks)
// against small pools and a record limit: the whole-state invariant must hold after every single step, a
// refused call must change nothing, and at the end every pool must be whole again. Run under each policy.
void randomizedLifecycle(EvictionPolicy policy) {
    BlockHasher const hasher(HashAlgorithm::kFnv1a128);
    ContextCacheManager m(kPage, {12, 0, 0, 0}, 5, policy);
    std::mt19937 rng(20240601);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    struct Running {
        CacheRequestLease lease;
        std::vector<int32_t> tokens;  // what the request has materialized: always <= pages * page size
    };
    std::vector<Running> running;
    auto hashesOf = [&](std::vector<int32_t> const& tokens) {
        return hasher.hashFullBlocks(tokens.data(), tokens.size(), kPage);
    };
    int acquired = 0, refused = 0, published = 0, contractErrors = 0;
    for (int step = 0; step < 3000; ++step) {
        int const op = uniform(0, 9);
        if (op <= 3 || running.empty()) {
            std::vector<int32_t> prompt(static_cast<size_t>(uniform(0, 14)));
            for (int32_t& t : prompt) t = uniform(1, 2);
            auto const policy =
                uniform(0, 9) == 0 ? ContextCacheLookupPolicy::kBypass : ContextCacheLookupPolicy::kUseCache;
            std::string const before = describe(m);
            AcquireResult r = m.acquireVanilla(hashesOf(prompt), static_cast<int32_t>(prompt.size()), policy);
            if (r.status == AcquireStatus::kAcquired) {
                ++acquired;
                ASSERT_EQ(r.lease->basePages().size(), (prompt.size() + kPage - 1) / kPage);
                ASSERT_EQ(r.plan.reuseTokenLength % kPage, 0);
                running.push_back({std::move(*r.lease), prompt});
            } else {
                ++refused;
                ASSERT_EQ(describe(m), before) << "step " << step;
            }
        } else {
            size_t const pick = static_cast<size_t>(uniform(0, static_cast<int>(running.size()) - 1));
            Running& req = running[pick];
            if (op <= 5) {  // publish what is resident (sometimes a shorter prefix)
                std::vector<int32_t> const& t = req.tokens;
                int32_t const resident =
                    uniform(0, 3) == 0 ? uniform(0, static_cast<int>(t.size())) : static_cast<int32_t>(t.size());
                std::string const before = describe(m);
                try {
                    PublishResult const p = m.publish(req.lease, {hashesOf(t), resident});
                    ++published;
                    ASSERT_EQ(p.publishedBaseFullBlockCount, resident / kPage);
                    ASSERT_EQ(p.canonicalBasePages.size(), static_cast<size_t>(resident / kPage));
                } catch (ContractError const&) {
                    ++contractErrors;
                    ASSERT_LT(resident, kPage) << "only an empty publication may be refused here";
                    ASSERT_EQ(describe(m), before) << "step " << step;
                }
            } else if (op == 6) {  // decode into a new page
                std::string const before = describe(m);
                if (m.growBasePages(req.lease, 1)) {
                    while (req.tokens.size() < req.lease.basePages().size() * kPage)
                        req.tokens.push_back(uniform(1, 2));
                } else {
                    ASSERT_EQ(describe(m), before) << "step " << step;
                }
            } else if (op <= 8) {  // finish
                running.erase(running.begin() + static_cast<std::ptrdiff_t>(pick));
            } else if (std::optional<RecordId> victim = m.records().leastRecent()) {
                m.evictRecord(uniform(0, 1) ? *victim : m.records().lruToMru().back());
            }
        }
        ASSERT_NO_THROW(m.checkInvariants()) << "step " << step;
        ASSERT_LE(m.records().size(), 5u);
    }
    EXPECT_GT(acquired, 500);
    EXPECT_GT(refused, 0);
    EXPECT_GT(published, 300);
    EXPECT_GT(m.metrics().evictedRecords, 50u);
    if (policy == EvictionPolicy::kRecordLruTrim) EXPECT_GT(m.metrics().trimmedRecords, 50u);
    else EXPECT_EQ(m.metrics().trimmedRecords, 0u);
    running.clear();
    while (std::optional<RecordId> lru = m.records().leastRecent()) m.evictRecord(*lru);
    EXPECT_EQ(freeBase(m), 12);
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_GT(contractErrors, 0);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, RandomizedLifecycleKeepsEveryInvariant) { randomizedLifecycle(EvictionPolicy::kRecordLru); }

TEST(ContextCacheManager, RandomizedLifecycleKeepsEveryInvariantWhenTrimming) {
    randomizedLifecycle(EvictionPolicy::kRecordLruTrim);
}

// ---- a few EAGLE cases --------------------------------------------------------------------------------------

TEST(ContextCacheManager, SpecPlanningIgnoresBaseOnlyHits) {
    ContextCacheManager m(kPage, {8, 8, 0, 0}, 8);
    produce(m, Hs({1, 2}), 8);  // base-only record: pages 0, 1
    AcquireResult r = m.acquireSpec(Hs({1, 2}), 9);
    ASSERT_TRUE(r.lease.has_value());
    EXPECT_EQ(r.plan.mode, ReusePlanMode::kSpec);
    EXPECT_EQ(r.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(r.plan.demand, (ResourceDemand{3, 3, 0, 0}));
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{2, 3, 4}));
    EXPECT_EQ(r.lease->draftPages(), (std::vector<PageId>{0, 1, 2}));
    EXPECT_THROW(m.growBasePages(*r.lease, 1), ContractError);  // spec leases grow both pools together
    // Publishing the same endpoint upgrades the base-only record with this producer's draft path.
    PublishResult const p = m.publish(*r.lease, {Hs({1, 2}), 9});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    EXPECT_EQ(p.record, std::optional<RecordId>(1));
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(m.records().get(1).draftPagePath, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(m.draftIndex().entryCount(), 2u);
    EXPECT_EQ(cacheRefs(m, draftPage(0)), 1);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ContextCacheManager, SpecAcquirePublishesPairedStateAndReplaysOneFullPage) {
    ContextCacheManager m(kPage, {8, 8, 0, 0}, 8);
    {
        AcquireResult producer = m.acquireSpec(kNoHashes, 12);
        ASSERT_EQ(producer.lease->basePages(), (std::vector<PageId>{0, 1, 2}));
        ASSERT_EQ(producer.lease->draftPages(), (std::vector<PageId>{0, 1, 2}));
        m.publish(*producer.lease, {Hs({1, 2, 3}), 12});
    }
    produce(m, Hs({9}), 4);  // another record, more recent than the paired one
    AcquireResult r = m.acquireSpec(Hs({1, 2, 3, 4}), 17);
    ASSERT_TRUE(r.lease.has_value());
    EXPECT_EQ(r.plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(r.plan.specReplayMode, SpecReplayMode::kFullPage);
    EXPECT_EQ(r.plan.matchedTokenLength, 12);
    EXPECT_EQ(r.plan.reuseTokenLength, 8);  // block 3 is replayed: its last draft slot needs block 4's token
    EXPECT_EQ(r.plan.draftRecord, std::optional<RecordId>(1));
    ASSERT_TRUE(r.plan.specReplayDependency.has_value());
    EXPECT_EQ(r.plan.specReplayDependency->terminalHash, H(3));
    EXPECT_EQ(r.plan.specReplayDependency->pathBlockCount, 3);
    EXPECT_EQ(r.plan.demand, (ResourceDemand{3, 3, 0, 0}));
    EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1, 4, 5, 6}));
    EXPECT_EQ(r.lease->draftPages(), (std::vector<PageId>{0, 1, 3, 4, 5}));
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{2, 1}));  // a spec hit is touched

    std::string const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {Hs({1, 2, 8, 4}), 16}), ContractError);  // the replayed block changed
    EXPECT_THROW(m.publish(*r.lease, {Hs({1, 2}), 8}), ContractError);          // stops before the boundary
    EXPECT_EQ(describe(m), before);
    PublishResult const p = m.publish(*r.lease, {Hs({1, 2, 3, 4}), 16});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1, 2, 5}));
    EXPECT_EQ(m.records().get(*p.record).draftPagePath, (std::vector<PageId>{0, 1, 3, 4}));
    // The new record dominates the hit: record 1's base path is a prefix of its own, and so is record 1's draft
    // path less its last page (page 2, which no hit can bind). Record 1 is superseded, not evicted: its draft
    // boundaries leave the index and page 2 goes back to the free list.
    EXPECT_EQ(p.supersededRecord, std::optional<RecordId>(1));
    EXPECT_FALSE(m.records().contains(1));
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{2, *p.record}));
    EXPECT_EQ(m.draftIndex().entryCount(), 4u);
    EXPECT_EQ(cacheRefs(m, draftPage(2)), 0);
    EXPECT_TRUE(m.pools().isFree(draftPage(2)));
    EXPECT_EQ(cacheRefs(m, draftPage(0)), 1);
    EXPECT_EQ(cacheRefs(m, basePage(2)), 1);
    EXPECT_EQ(m.metrics().evictedRecords, 0u);
    EXPECT_NO_THROW(m.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
