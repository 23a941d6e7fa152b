// The manager calls a scheduler-driven adapter (vLLM's KVCacheManager, issue 28) needs beyond the reference's:
// probeVanilla (a lookup that changes nothing and equals the plan of the acquire after it), acquirableCount (free +
// reclaimable: exactly what an acquire can obtain) and PublicationGrowth::kExtendLeaseRecord (a lease's longer
// publication supersedes its own record instead of nesting another). Every case checks invariants after each step
// and asserts the numbers: records, pages, refcounts, metrics, events.
#include <gtest/gtest.h>

#include <random>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::activeRefs;
using test::basePage;
using test::cacheRefs;
using test::chain;
using test::describe;
using test::extend;
using test::H;
using test::Hs;
using test::produce;

constexpr int32_t kPage = 4;

std::vector<PageId> firstPages(CacheRequestLease const& lease, size_t n) {
    return {lease.basePages().begin(), lease.basePages().begin() + static_cast<std::ptrdiff_t>(n)};
}

// Everything a probe must leave as it was: the whole state (LRU order included), metrics, retention metrics and
// pending events.
std::string snapshot(ContextCacheManager const& m) {
    ContextCacheManagerMetrics const& mm = m.metrics();
    RetentionMetrics const& rm = m.retentionMetrics();
    uint64_t evicted = 0;
    for (uint64_t n : rm.evictedRecordsByPriority) evicted += n;
    return describe(m) + " queries " + std::to_string(mm.prefixCacheQueries) + " hits " +
           std::to_string(mm.prefixCacheHits) + " trims " + std::to_string(mm.trimmedRecords) + " evictedByPriority " +
           std::to_string(evicted) + " events " + std::to_string(m.pendingKvEventCount());
}

PublishRequest growing(std::vector<BlockHash> const& hashes, int32_t resident) {
    PublishRequest r{hashes, resident};
    r.growth = PublicationGrowth::kExtendLeaseRecord;
    return r;
}

// ---- probeVanilla ---------------------------------------------------------------------------------------------

TEST(ProbeVanilla, ReportsTheAcquiresPlanAndChangesNothing) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    m.enableKvEvents();
    std::vector<BlockHash> const prompt = Hs({1, 2, 3});
    std::vector<int32_t> const tokens(12, 5);
    {
        AcquireResult producer = m.acquireVanilla(prompt, 12);
        PublishRequest request{prompt, 12};
        request.tokenIds = tokens;
        ASSERT_TRUE(m.publish(*producer.lease, request).record);  // pages 0, 1, 2
    }
    KvEventLog drained;
    m.drainKvEvents(drained);

    // 14 tokens over the 3 cached blocks: 12 reused, pages 0..2.
    std::vector<BlockHash> const longer = Hs({1, 2, 3});
    std::string const before = snapshot(m);
    ReuseProbe const p = m.probeVanilla(longer, 14);
    EXPECT_EQ(snapshot(m), before);
    EXPECT_EQ(p.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(p.matchedTokenLength, 12);
    EXPECT_EQ(p.reuseTokenLength, 12);
    EXPECT_EQ(p.pages, (std::vector<PageId>{0, 1, 2}));

    // Page-aligned and fully cached: the acquire rewinds one page, so does the probe.
    ReuseProbe const rewound = m.probeVanilla(prompt, 12);
    EXPECT_EQ(rewound.kind, ReusePlanKind::kFullInputRewind);
    EXPECT_EQ(rewound.matchedTokenLength, 12);
    EXPECT_EQ(rewound.reuseTokenLength, 8);
    EXPECT_EQ(rewound.pages, (std::vector<PageId>{0, 1}));

    // A miss, a partial hit and the empty input.
    EXPECT_EQ(m.probeVanilla(Hs({9}), 5).kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_TRUE(m.probeVanilla(Hs({9}), 5).pages.empty());
    ReuseProbe const partial = m.probeVanilla(Hs({1, 2, 7}), 12);
    EXPECT_EQ(partial.reuseTokenLength, 8);
    EXPECT_EQ(partial.pages, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(m.probeVanilla({}, 0).kind, ReusePlanKind::kStandard);
    EXPECT_EQ(snapshot(m), before);  // no touch: the LRU, metrics and events are as they were

    AcquireResult a = m.acquireVanilla(prompt, 12);
    ASSERT_TRUE(a.lease);
    EXPECT_EQ(a.plan.kind, rewound.kind);
    EXPECT_EQ(a.plan.matchedTokenLength, rewound.matchedTokenLength);
    EXPECT_EQ(a.plan.reuseTokenLength, rewound.reuseTokenLength);
    EXPECT_EQ(firstPages(*a.lease, 2), rewound.pages);
    EXPECT_EQ(m.metrics().prefixCacheQueries, 12u + 12u);  // the producer's acquire and this one, not the probes
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(ProbeVanilla, ValidatesLikeTheAcquire) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    produce(m, Hs({1, 2}), 8);
    std::string const before = snapshot(m);
    EXPECT_THROW(m.probeVanilla(Hs({1, 2, 3}), 11), ContractError);  // 3 hashes for 11 tokens (at most 2)
    EXPECT_THROW(m.acquireVanilla(Hs({1, 2, 3}), 11), ContractError);
    EXPECT_THROW(m.probeVanilla(Hs({1}), -1), ContractError);
    EXPECT_THROW(m.probeVanilla(BlockHashSpan{nullptr, 1}, 4), ContractError);
    EXPECT_EQ(snapshot(m), before);
}

// For many states (records nested and diverging, evictions, live leases pinning pages, trims), a probe equals the
// plan of the acquire that follows it and the probe itself changes nothing.
TEST(ProbeVanilla, EqualsTheFollowingAcquireInManyStates) {
    for (EvictionPolicy policy : {EvictionPolicy::kRecordLru, EvictionPolicy::kRecordLruTrim}) {
        ContextCacheManager m(kPage, {24, 0, 0, 0}, 6, policy);
        std::mt19937 rng(1234);
        std::vector<CacheRequestLease> live;
        int compared = 0;
        for (int step = 0; step < 400; ++step) {
            // Prompts from 3 lanes, sharing a lane prefix of up to 5 blocks, then a tail that is often unique.
            uint64_t const lane = rng() % 3;
            int const shared = static_cast<int>(rng() % 6);
            std::vector<BlockHash> hashes = chain(lane, shared);
            if (rng() % 2) hashes = extend(hashes, 10 + static_cast<uint64_t>(step), static_cast<int>(rng() % 3));
            int32_t const tokens = static_cast<int32_t>(hashes.size()) * kPage + static_cast<int32_t>(rng() % kPage);

            std::string const before = snapshot(m);
            ReuseProbe const probe = m.probeVanilla(hashes, tokens);
            ASSERT_EQ(snapshot(m), before) << "step " << step;

            AcquireResult a = m.acquireVanilla(hashes, tokens);
            ASSERT_EQ(a.plan.kind, probe.kind) << "step " << step;
            ASSERT_EQ(a.plan.matchedTokenLength, probe.matchedTokenLength) << "step " << step;
            ASSERT_EQ(a.plan.reuseTokenLength, probe.reuseTokenLength) << "step " << step;
            ASSERT_EQ(a.plan.basePageBindings, probe.pages) << "step " << step;
            if (a.lease) {
                ASSERT_EQ(firstPages(*a.lease, probe.pages.size()), probe.pages) << "step " << step;
                ++compared;
                if (!hashes.empty() && rng() % 4 != 0) m.publish(*a.lease, {hashes, tokens});
                if (rng() % 3 == 0) live.push_back(std::move(*a.lease));  // keeps pinning its pages a while
            }
            if (live.size() > 2 || (!live.empty() && rng() % 4 == 0)) live.erase(live.begin());
            ASSERT_NO_THROW(m.checkInvariants()) << "step " << step;
        }
        EXPECT_GT(compared, 300);
        EXPECT_GT(m.metrics().evictedRecords + m.metrics().trimmedRecords, 10u);  // the states included eviction
    }
}

// ---- acquirableCount ---------------------------------------------------------------------------------------------

TEST(AcquirableCount, IsExactlyWhatAColdAcquireCanObtain) {
    ContextCacheManager m(kPage, {12, 0, 0, 0}, 8);
    RecordId const a = produce(m, Hs({1, 2}), 8);     // pages 0, 1 cached
    RecordId const b = produce(m, Hs({3, 4, 5}), 12);  // pages 2, 3, 4 cached
    ASSERT_NE(a, kNoRecord);
    ASSERT_NE(b, kNoRecord);
    AcquireResult held = m.acquireVanilla(Hs({6, 7}), 8, ContextCacheLookupPolicy::kBypass);  // pages 5, 6 live
    ASSERT_TRUE(held.lease);
    ResourcePools const& pools = m.pools();
    EXPECT_EQ(pools.freeCount(ResourceType::kBaseKvPage), 5);
    EXPECT_EQ(pools.reclaimableCount(ResourceType::kBaseKvPage), 5);
    EXPECT_EQ(pools.acquirableCount(ResourceType::kBaseKvPage), 10);
    EXPECT_EQ(pools.acquirableCount(ResourceType::kDraftKvPage), 0);

    // One page more than acquirable: refused, nothing evicted.
    std::string const before = describe(m);
    EXPECT_EQ(m.acquireVanilla({}, 11 * kPage, ContextCacheLookupPolicy::kBypass).status,
              AcquireStatus::kInsufficientCapacity);
    EXPECT_EQ(describe(m), before);

    // A pinned record holds its pages like a lease: they stop counting.
    m.setPinBudget(0.5);
    m.pinRecord(b);
    EXPECT_EQ(pools.acquirableCount(ResourceType::kBaseKvPage), 7);
    EXPECT_EQ(m.acquireVanilla({}, 8 * kPage, ContextCacheLookupPolicy::kBypass).status,
              AcquireStatus::kInsufficientCapacity);
    {
        AcquireResult exact = m.acquireVanilla({}, 7 * kPage, ContextCacheLookupPolicy::kBypass);
        ASSERT_EQ(exact.status, AcquireStatus::kAcquired);  // evicts a, takes every free page
        EXPECT_EQ(exact.lease->basePages().size(), 7u);
        EXPECT_EQ(pools.acquirableCount(ResourceType::kBaseKvPage), 0);
        EXPECT_FALSE(m.records().contains(a));
        EXPECT_NO_THROW(m.checkInvariants());
    }
    EXPECT_EQ(pools.acquirableCount(ResourceType::kBaseKvPage), 7);
    m.unpinRecord(b);
    EXPECT_EQ(pools.acquirableCount(ResourceType::kBaseKvPage), 10);
    EXPECT_NO_THROW(m.checkInvariants());
}

// ---- PublicationGrowth ---------------------------------------------------------------------------------------------

// A chunked prefill publishing 1, 3, then 5 blocks: one record with growth, three nested ones without.
TEST(PublicationGrowth, AGrowingLeaseKeepsOneRecord) {
    std::vector<BlockHash> const prompt = Hs({1, 2, 3, 4, 5});
    for (bool grow : {true, false}) {
        ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
        AcquireResult a = m.acquireVanilla(prompt, 22);  // 6 pages: 0..5, cold
        ASSERT_TRUE(a.lease);
        std::vector<RecordId> ids;
        for (int32_t blocks : {1, 3, 5}) {
            PublishRequest request{prompt, blocks * kPage};
            if (grow) request.growth = PublicationGrowth::kExtendLeaseRecord;
            PublishResult const r = m.publish(*a.lease, request);
            ASSERT_EQ(r.status, PublishStatus::kPublished);
            ASSERT_TRUE(r.record);
            EXPECT_EQ(r.canonicalBasePages, firstPages(*a.lease, static_cast<size_t>(blocks)));
            EXPECT_EQ(r.supersededRecord, grow && !ids.empty() ? std::optional<RecordId>(ids.back()) : std::nullopt);
            ids.push_back(*r.record);
            ASSERT_NO_THROW(m.checkInvariants());
        }
        if (grow) {
            ASSERT_EQ(m.records().size(), 1u);
            EXPECT_FALSE(m.records().contains(ids[0]));
            EXPECT_FALSE(m.records().contains(ids[1]));
            StoredRecord const& r = m.records().get(ids[2]);
            EXPECT_EQ(r.key.fullBlockCount, 5);
            EXPECT_EQ(r.basePagePath, (std::vector<PageId>{0, 1, 2, 3, 4}));
            for (PageId p = 0; p < 5; ++p) EXPECT_EQ(cacheRefs(m, basePage(p)), 1) << "page " << p;
        } else {
            ASSERT_EQ(m.records().size(), 3u);
            std::vector<int32_t> const refs{3, 2, 2, 1, 1};
            for (PageId p = 0; p < 5; ++p) EXPECT_EQ(cacheRefs(m, basePage(p)), refs[static_cast<size_t>(p)]);
        }
        for (PageId p = 0; p < 6; ++p) EXPECT_EQ(activeRefs(m, basePage(p)), 1);
        EXPECT_EQ(m.baseIndex().size(), 5u);
        EXPECT_EQ(m.metrics().evictedRecords, 0u);  // supersession is no eviction
        EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 0u);
        for (uint64_t n : m.retentionMetrics().evictedRecordsByPriority) EXPECT_EQ(n, 0u);

        a.lease->release();
        EXPECT_EQ(m.pools().freeCount(ResourceType::kBaseKvPage), 3);  // the unpublished page 5, 6, 7
        EXPECT_EQ(m.probeVanilla(prompt, 22).reuseTokenLength, 20);
        EXPECT_NO_THROW(m.checkInvariants());
    }
}

// At the record limit, a growing publication takes its own record's place: the other record stays. Without growth
// the new record evicts the least recent one.
TEST(PublicationGrowth, DoesNotEvictAnotherRecordAtTheLimit) {
    for (bool grow : {true, false}) {
        ContextCacheManager m(kPage, {8, 0, 0, 0}, 2);
        RecordId const other = produce(m, Hs({9}), 4);
        std::vector<BlockHash> const prompt = Hs({1, 2, 3});
        AcquireResult a = m.acquireVanilla(prompt, 12);
        ASSERT_TRUE(a.lease);
        PublishResult const first = m.publish(*a.lease, {prompt, 4});
        ASSERT_EQ(m.records().size(), 2u);
        PublishRequest request{prompt, 12};
        if (grow) request.growth = PublicationGrowth::kExtendLeaseRecord;
        PublishResult const second = m.publish(*a.lease, request);
        ASSERT_TRUE(second.record);
        EXPECT_EQ(m.records().size(), 2u);
        EXPECT_EQ(m.records().contains(other), grow);
        EXPECT_EQ(m.records().contains(*first.record), !grow);
        EXPECT_EQ(m.metrics().evictedRecords, grow ? 0u : 1u);
        EXPECT_NO_THROW(m.checkInvariants());
    }
}

TEST(PublicationGrowth, AnEvictedOrPinnedOwnRecordIsNotSuperseded) {
    std::vector<BlockHash> const prompt = Hs({1, 2, 3});
    {  // R evicted between the publications: a new record, nothing superseded
        ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
        AcquireResult a = m.acquireVanilla(prompt, 12);
        PublishResult const first = m.publish(*a.lease, growing(prompt, 4));
        m.evictRecord(*first.record);
        PublishResult const second = m.publish(*a.lease, growing(prompt, 12));
        EXPECT_EQ(second.status, PublishStatus::kPublished);
        EXPECT_FALSE(second.supersededRecord);
        EXPECT_EQ(m.records().size(), 1u);
        EXPECT_EQ(m.metrics().evictedRecords, 1u);  // the explicit eviction only
        EXPECT_NO_THROW(m.checkInvariants());
    }
    {  // R pinned: a new record beside it, R untouched
        ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
        m.setPinBudget(0.5);
        AcquireResult a = m.acquireVanilla(prompt, 12);
        PublishResult const first = m.publish(*a.lease, growing(prompt, 4));
        m.pinRecord(*first.record);
        PublishResult const second = m.publish(*a.lease, growing(prompt, 12));
        EXPECT_FALSE(second.supersededRecord);
        EXPECT_EQ(m.records().size(), 2u);
        EXPECT_TRUE(m.isPinned(*first.record));
        EXPECT_EQ(cacheRefs(m, basePage(0)), 2);
        EXPECT_NO_THROW(m.checkInvariants());
        // The new record is the lease's own now: a later growth extends it, the pinned one stays.
        a.lease->release();
    }
    {  // growth off for the first publication: its record is still the lease's own
        ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
        AcquireResult a = m.acquireVanilla(prompt, 12);
        PublishResult const first = m.publish(*a.lease, {prompt, 4});
        PublishResult const second = m.publish(*a.lease, growing(prompt, 12));
        EXPECT_EQ(second.supersededRecord, first.record);
        EXPECT_EQ(m.records().size(), 1u);
        EXPECT_NO_THROW(m.checkInvariants());
    }
}

// Another lease hits the lease's record meanwhile: the supersession leaves its pins alone, and its own publication
// (canonical pages through the successor) is unaffected.
TEST(PublicationGrowth, ASecondLeaseOnTheRecordKeepsWorking) {
    ContextCacheManager m(kPage, {12, 0, 0, 0}, 8);
    std::vector<BlockHash> const prompt = Hs({1, 2, 3, 4});
    AcquireResult a = m.acquireVanilla(prompt, 17);  // pages 0..4
    PublishResult const first = m.publish(*a.lease, growing(prompt, 8));  // R: pages 0, 1

    std::vector<BlockHash> const other = Hs({1, 2, 7});
    AcquireResult b = m.acquireVanilla(other, 13);  // hits pages 0, 1; private 5, 6
    ASSERT_TRUE(b.lease);
    EXPECT_EQ(b.plan.reuseTokenLength, 8);
    EXPECT_EQ(b.lease->basePages(), (std::vector<PageId>{0, 1, 5, 6}));

    PublishResult const second = m.publish(*a.lease, growing(prompt, 16));
    EXPECT_EQ(second.supersededRecord, first.record);
    EXPECT_EQ(activeRefs(m, basePage(0)), 2);  // both leases still pin the shared pages
    EXPECT_EQ(cacheRefs(m, basePage(0)), 1);
    EXPECT_NO_THROW(m.checkInvariants());

    PublishResult const theirs = m.publish(*b.lease, {other, 12});
    EXPECT_EQ(theirs.status, PublishStatus::kPublished);
    EXPECT_FALSE(theirs.supersededRecord);
    EXPECT_EQ(theirs.canonicalBasePages, (std::vector<PageId>{0, 1, 5}));
    EXPECT_EQ(m.records().size(), 2u);
    EXPECT_EQ(cacheRefs(m, basePage(0)), 2);
    EXPECT_NO_THROW(m.checkInvariants());
    a.lease->release();
    b.lease->release();
    test::evictAll(m);
    EXPECT_TRUE(test::poolsFull(m));
    EXPECT_NO_THROW(m.checkInvariants());
}

// An exact record for the N blocks already exists (another lease published it first): kExistingRecord, and the
// lease's shorter record, a prefix of it, is superseded too.
TEST(PublicationGrowth, AnExistingExactRecordSupersedesTheLeasesRecord) {
    ContextCacheManager m(kPage, {12, 0, 0, 0}, 8);
    std::vector<BlockHash> const prompt = Hs({1, 2, 3});
    AcquireResult a = m.acquireVanilla(prompt, 13);
    PublishResult const mine = m.publish(*a.lease, growing(prompt, 4));   // R: page 0
    AcquireResult b = m.acquireVanilla(prompt, 13);                       // hits page 0
    PublishResult const theirs = m.publish(*b.lease, {prompt, 12});      // E: 0, then b's pages
    PublishResult const again = m.publish(*a.lease, growing(prompt, 12));
    EXPECT_EQ(again.status, PublishStatus::kExistingRecord);
    EXPECT_EQ(again.record, theirs.record);
    EXPECT_EQ(again.supersededRecord, mine.record);
    EXPECT_EQ(m.records().size(), 1u);
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*theirs.record}));
    EXPECT_EQ(m.metrics().evictedRecords, 0u);
    EXPECT_NO_THROW(m.checkInvariants());
    // E is not a's own: publishing it again meets it and supersedes nothing.
    PublishResult const last = m.publish(*a.lease, growing(prompt, 12));
    EXPECT_EQ(last.status, PublishStatus::kExistingRecord);
    EXPECT_FALSE(last.supersededRecord);
    EXPECT_EQ(m.records().size(), 1u);
}

TEST(PublicationGrowth, EventsReportOnlyTheNewlyMappedBlocks) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    m.enableKvEvents();
    std::vector<BlockHash> const prompt = Hs({1, 2, 3});
    std::vector<int32_t> tokens(12);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(100 + i);
    AcquireResult a = m.acquireVanilla(prompt, 12);
    KvEventLog log;
    m.drainKvEvents(log);  // AllBlocksCleared
    PublishRequest first = growing(prompt, 4);
    first.tokenIds = tokens;
    m.publish(*a.lease, first);
    PublishRequest second = growing(prompt, 12);
    second.tokenIds = tokens;
    PublishResult const r = m.publish(*a.lease, second);
    ASSERT_TRUE(r.supersededRecord);
    m.drainKvEvents(log);
    ASSERT_EQ(log.size(), 2u);
    std::vector<uint64_t> stored;
    for (KvEvent const& e : log.events()) {
        EXPECT_EQ(e.type, KvEventType::kBlockStored);
        for (size_t i = 0; i < e.hashCount; ++i) stored.push_back(log.hashes()[e.firstHash + i]);
    }
    EXPECT_EQ(stored, (std::vector<uint64_t>{kvEventBlockHash(H(1)), kvEventBlockHash(H(2)), kvEventBlockHash(H(3))}));
    EXPECT_TRUE(log.events()[1].hasParent);
    EXPECT_EQ(log.events()[1].parentBlockHash, kvEventBlockHash(H(1)));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(PublicationGrowth, IsRefusedOnASpecLeaseWithNothingChanged) {
    ContextCacheManager m(kPage, {8, 8, 0, 0}, 8);
    std::vector<BlockHash> const prompt = Hs({1, 2});
    AcquireResult a = m.acquireSpec(prompt, 9);
    ASSERT_TRUE(a.lease);
    m.publish(*a.lease, {prompt, 4});
    std::string const before = describe(m);
    EXPECT_THROW(m.publish(*a.lease, growing(prompt, 8)), ContractError);
    EXPECT_EQ(describe(m), before);
    PublishRequest bad{prompt, 8};
    bad.growth = static_cast<PublicationGrowth>(7);
    EXPECT_THROW(m.publish(*a.lease, bad), ContractError);
    EXPECT_EQ(describe(m), before);
}

// Retention: the successor carries the publication's spec; R's ranges that it dominates do not pile up, stronger
// ones stay.
TEST(PublicationGrowth, RetentionRangesJoinTheSuccessorWithoutPilingUp) {
    ContextCacheManager m(kPage, {12, 0, 0, 0}, 8);
    m.setRetentionTime(0);
    RetentionSpec spec;
    spec.ranges = {{0, kRetentionOpenEnd, 80, kNoRetentionDuration}};
    std::vector<BlockHash> const prompt = Hs({1, 2, 3, 4, 5});
    AcquireResult a = m.acquireVanilla(prompt, 20);
    PublishRequest request = growing(prompt, 4);
    request.retention = &spec;
    RecordId id = kNoRecord;
    for (int32_t blocks = 1; blocks <= 5; ++blocks) {
        request.residentStateLength = blocks * kPage;
        id = *m.publish(*a.lease, request).record;
        EXPECT_EQ(m.recordRetention(id).size(), 1u) << blocks << " blocks";
        EXPECT_EQ(m.recordPriority(id), 80);
    }
    EXPECT_EQ(m.records().size(), 1u);
    EXPECT_EQ(m.recordRetention(id)[0].endBlock, 5);

    // A stronger range on the superseded record survives a weaker later publication; a default one adds nothing.
    std::vector<BlockHash> const second = Hs({7, 8, 9});
    AcquireResult b = m.acquireVanilla(second, 12);
    RetentionSpec strong;
    strong.ranges = {{0, 4, 95, kNoRetentionDuration}};
    PublishRequest one = growing(second, 4);
    one.retention = &strong;
    m.publish(*b.lease, one);
    PublishResult const grown = m.publish(*b.lease, growing(second, 12));
    ASSERT_TRUE(grown.supersededRecord);
    EXPECT_EQ(m.recordRetention(*grown.record).size(), 1u);
    EXPECT_EQ(m.recordPriority(*grown.record), 95);
    EXPECT_NO_THROW(m.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
