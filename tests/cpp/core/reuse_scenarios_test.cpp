// End-to-end manager scenarios, one per deployment kind: a cold request publishes; a second request with a longer
// shared prefix reuses exactly the documented amount; eviction under pressure frees exactly the unpinned
// resources; once every lease is released and every record evicted, every pool is back to full capacity.
#include <gtest/gtest.h>

#include "ctxcache/context_cache_manager.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::chain;
using test::extend;

constexpr int32_t kPage = 4;
constexpr ResourceType kBase = ResourceType::kBaseKvPage;
constexpr ResourceType kDraft = ResourceType::kDraftKvPage;

BlockHash digest(int32_t length) { return BlockHash{0xE7AC7ull, static_cast<uint64_t>(length)}; }

std::vector<BlockHash> prefix(std::vector<BlockHash> const& hashes, int32_t blocks) {
    return {hashes.begin(), hashes.begin() + blocks};
}

void expectDrainsToFullPools(ContextCacheManager& m) {
    test::evictAll(m);
    EXPECT_EQ(m.records().size(), 0u);
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_EQ(m.draftIndex().entryCount(), 0u);
    EXPECT_TRUE(test::poolsFull(m));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ReuseScenario, Vanilla) {
    ContextCacheManager m(kPage, ResourceDemand{12, 0, 0, 0}, 8);
    auto const a = chain(1, 3);
    {  // cold: 14 tokens, 3 full blocks published, the partial tail stays private
        AcquireResult r = m.acquireVanilla(a, 14);
        EXPECT_EQ(r.plan.kind, ReusePlanKind::kNoReusablePrefix);
        EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1, 2, 3}));
        EXPECT_EQ(m.publish(*r.lease, {a, 14}).canonicalBasePages, (std::vector<PageId>{0, 1, 2}));
    }
    EXPECT_EQ(m.pools().freeCount(kBase), 9);
    auto const b = extend(a, 2, 2);
    {  // warm: 22 tokens sharing 3 blocks reuse exactly 12 tokens
        AcquireResult r = m.acquireVanilla(b, 22);
        EXPECT_EQ(r.plan.kind, ReusePlanKind::kStandard);
        EXPECT_EQ(r.plan.reuseTokenLength, 12);
        EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1, 2, 4, 5, 6}));
        EXPECT_EQ(m.publish(*r.lease, {b, 22}).canonicalBasePages, (std::vector<PageId>{0, 1, 2, 4, 5}));
    }
    EXPECT_EQ(m.pools().freeCount(kBase), 7);
    {  // pressure: 48 tokens hitting 4 blocks need 8 more pages; 7 are free
        AcquireResult r = m.acquireVanilla(extend(prefix(b, 4), 3, 8), 48);
        ASSERT_EQ(r.status, AcquireStatus::kAcquired);
        EXPECT_EQ(r.plan.reuseTokenLength, 16);
        // Both records go (LRU first); of their pages only page 5 was not pinned by this lease.
        EXPECT_EQ(m.metrics().evictedRecords, 2u);
        EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);
        EXPECT_EQ(m.pools().freeCount(kBase), 0);
        EXPECT_EQ(m.pools().activeRefCount({kBase, 0}), 1);
        EXPECT_EQ(m.pools().cacheRefCount({kBase, 0}), 0);
        EXPECT_EQ(m.baseIndex().size(), 0u);
        EXPECT_NO_THROW(m.checkInvariants());
    }
    expectDrainsToFullPools(m);
}

void hybridScenario(bool attention) {
    ResourceDemand const capacities{attention ? 12 : 0, 0, 2, attention ? 2 : 0};
    ContextCacheManager m(kPage, capacities, 8);
    auto const tokens14 = extend(chain(1, 2), 2, 1);
    auto publishCheckpoint = [&](CacheRequestLease& lease, int32_t length) {
        std::optional<HybridSnapshotReservation> r = m.reserveHybridSnapshots(lease, attention && length % kPage != 0);
        EXPECT_TRUE(r);
        PublishResult p = m.publishHybrid(lease, {prefix(tokens14, length / kPage), {digest(length), length}, *r});
        m.retireHybridSnapshotReservation(lease, *r);
        return p;
    };
    auto candidates = [&](int32_t n) {
        std::vector<HybridCheckpointCandidate> c;
        for (int32_t length : m.hybridCandidateLengths(n)) c.push_back({length, digest(length)});
        return c;
    };
    {  // cold 10 tokens, checkpoint at 10 (mid-page)
        AcquireResult r = m.acquireHybrid(candidates(10), prefix(tokens14, 2), 10, attention);
        EXPECT_EQ(r.plan.kind, ReusePlanKind::kNoReusablePrefix);
        EXPECT_EQ(r.lease->basePages().size(), attention ? 3u : 0u);
        publishCheckpoint(*r.lease, 10);
    }
    {  // warm 14 tokens: restores exactly 10 tokens (mid-page), then checkpoints at 14
        AcquireResult r = m.acquireHybrid(candidates(14), tokens14, 14, attention);
        EXPECT_EQ(r.plan.kind, ReusePlanKind::kStandard);
        EXPECT_EQ(r.plan.reuseTokenLength, 10);
        EXPECT_EQ(r.lease->recurrentSnapshotSlot(), std::optional<int32_t>(0));
        EXPECT_EQ(r.lease->partialKvSnapshotSlot(), attention ? std::optional<int32_t>(0) : std::nullopt);
        if (attention) {
            EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1, 3, 4}));
        }
        m.releaseRestoredHybridSnapshots(*r.lease);
        publishCheckpoint(*r.lease, 14);
    }
    {  // pressure: a request hitting the 14-token checkpoint needs fresh snapshot slots; none are free
        AcquireResult r = m.acquireHybrid(candidates(18), extend(tokens14, 3, 1), 18, attention);
        EXPECT_EQ(r.plan.reuseTokenLength, 14);
        m.releaseRestoredHybridSnapshots(*r.lease);
        std::optional<HybridSnapshotReservation> s = m.reserveHybridSnapshots(*r.lease, attention);
        ASSERT_TRUE(s);
        // Only the LRU record (the 10-token checkpoint) went: its snapshots were free to take, its base
        // pages are shared with the surviving checkpoint and stay.
        EXPECT_EQ(m.metrics().evictedRecords, 1u);
        EXPECT_EQ(m.metrics().reclaimedRecurrentSnapshots, 1u);
        EXPECT_EQ(m.metrics().reclaimedPartialKvSnapshots, attention ? 1u : 0u);
        EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 0u);
        EXPECT_EQ(m.records().size(), 1u);
        EXPECT_NO_THROW(m.checkInvariants());
    }
    expectDrainsToFullPools(m);
}

TEST(ReuseScenario, HybridWithAttention) { hybridScenario(true); }
TEST(ReuseScenario, HybridWithoutAttention) { hybridScenario(false); }

TEST(ReuseScenario, Spec) {
    ContextCacheManager m(kPage, ResourceDemand{12, 12, 0, 0}, 8);
    auto const a = chain(1, 3);
    {  // cold 12 tokens: a paired record of 3 blocks
        AcquireResult r = m.acquireSpec(a, 12);
        EXPECT_EQ(r.plan.kind, ReusePlanKind::kNoReusablePrefix);
        m.publish(*r.lease, {a, 12});
    }
    auto const b = extend(a, 2, 2);
    {  // warm 20 tokens: 3 paired blocks match, the boundary page is replayed: reuse exactly 8
        AcquireResult r = m.acquireSpec(b, 20);
        EXPECT_EQ(r.plan.kind, ReusePlanKind::kStandard);
        EXPECT_EQ(r.plan.matchedTokenLength, 12);
        EXPECT_EQ(r.plan.reuseTokenLength, 8);
        EXPECT_EQ(r.plan.specReplayMode, SpecReplayMode::kFullPage);
        EXPECT_EQ(r.lease->basePages(), (std::vector<PageId>{0, 1, 3, 4, 5}));
        EXPECT_EQ(r.lease->draftPages(), (std::vector<PageId>{0, 1, 3, 4, 5}));
        PublishResult p = m.publish(*r.lease, {b, 20});
        EXPECT_EQ(p.canonicalBasePages, (std::vector<PageId>{0, 1, 2, 4, 5}));
        // The new record holds every page the older one could ever bind: the older one is superseded, and its
        // last draft page (2: a hit binds one draft page less than it matches) is freed.
        EXPECT_EQ(p.supersededRecord, std::optional<RecordId>(1));
    }
    EXPECT_EQ(m.records().size(), 1u);
    EXPECT_EQ(m.pools().freeCount(kBase), 7);   // base page 3 was the replay's private duplicate
    EXPECT_EQ(m.pools().freeCount(kDraft), 7);  // draft pages are never canonicalized; page 2 went with record 1
    {  // hitting the newer record (5 paired blocks, 4 bound) needs 7 pages per pool: free already, no eviction
        AcquireResult r = m.acquireSpec(extend(b, 3, 6), 44);
        ASSERT_EQ(r.status, AcquireStatus::kAcquired);
        EXPECT_EQ(r.plan.reuseTokenLength, 16);
        EXPECT_EQ(m.metrics().evictedRecords, 0u);
        EXPECT_EQ(m.metrics().reclaimedDraftKvPages, 0u);
        EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 0u);
        EXPECT_EQ(m.records().size(), 1u);
        EXPECT_NO_THROW(m.checkInvariants());
    }
    expectDrainsToFullPools(m);
}

}  // namespace
}  // namespace ctxcache
