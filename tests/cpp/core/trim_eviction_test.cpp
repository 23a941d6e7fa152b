// EvictionPolicy::kRecordLruTrim: the planner trims the last record it reaches from the tail instead of evicting
// it whole (only the blocks the demand needs), the manager applies the trim (shorter key, paths, draft index,
// base mappings), and the default policy is untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "ctxcache/eviction_planner.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::basePage;
using test::cacheRefs;
using test::describe;
using test::draftPage;
using test::freeBase;
using test::Hs;
using test::produce;
using test::recurrentSlot;

constexpr EvictionPolicy kTrim = EvictionPolicy::kRecordLruTrim;
constexpr int32_t kPage = 4;

using CacheState = test::PlannerState;

// ---- planner ------------------------------------------------------------------------------------------------

TEST(TrimEvictionPlanner, TrimsOnlyTheTailBlocksTheDemandNeeds) {
    CacheState s({4, 0, 0, 0});
    RecordId const r = s.add(Hs({1, 2, 3, 4}), {0, 1, 2, 3});
    s.finishProducers();
    std::string const before = s.describe();
    for (int32_t demand = 1; demand <= 3; ++demand) {
        EvictionPlan const plan = EvictionPlanner::plan({demand, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
        EXPECT_TRUE(plan.feasible);
        EXPECT_TRUE(plan.victims.empty());
        ASSERT_TRUE(plan.trim.has_value()) << demand;
        EXPECT_EQ(plan.trim->record, r);
        EXPECT_EQ(plan.trim->keepBlocks, 4 - demand);
        EXPECT_EQ(plan.reclaimed, (ResourceDemand{demand, 0, 0, 0}));
    }
    // All four pages: no block would be left, so the record is a victim.
    EvictionPlan const whole = EvictionPlanner::plan({4, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
    EXPECT_EQ(whole.victims, (std::vector<RecordId>{r}));
    EXPECT_FALSE(whole.trim.has_value());
    // The default policy evicts the whole record for one page.
    EvictionPlan const lru = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records);
    EXPECT_EQ(lru.victims, (std::vector<RecordId>{r}));
    EXPECT_FALSE(lru.trim.has_value());
    EXPECT_EQ(lru.reclaimed, (ResourceDemand{4, 0, 0, 0}));
    EXPECT_EQ(s.describe(), before);  // planning is read-only
}

TEST(TrimEvictionPlanner, EarlierRecordsAreEvictedWholeAndOnlyTheLastIsTrimmed) {
    CacheState s({7, 0, 0, 0});
    RecordId const r1 = s.add(Hs({1, 2}), {0, 1});
    RecordId const r2 = s.add(Hs({5, 6, 7, 8, 9}), {2, 3, 4, 5, 6});
    s.finishProducers();
    EvictionPlan const plan = EvictionPlanner::plan({4, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1}));  // a 2-block record: trimming it frees 1, not enough
    ASSERT_TRUE(plan.trim.has_value());
    EXPECT_EQ(plan.trim->record, r2);
    EXPECT_EQ(plan.trim->keepBlocks, 3);
    EXPECT_EQ(plan.reclaimed.baseKvPages, 4);
}

TEST(TrimEvictionPlanner, SharedAndPinnedTailPagesFreeNothingSoTheTrimGoesDeeper) {
    // r1 = [1 2 3 4 5] on pages 0..4; r2 = [1 2] shares pages 0 and 1 and is the most recent. Page 4 is pinned.
    CacheState s({5, 0, 0, 0});
    RecordId const r1 = s.add(Hs({1, 2, 3, 4, 5}), {0, 1, 2, 3, 4});
    RecordId const r2 = s.add(Hs({1, 2}), {0, 1});
    s.finishProducers({basePage(4)});
    EvictionPlan plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
    ASSERT_TRUE(plan.trim.has_value());
    EXPECT_TRUE(plan.victims.empty());
    EXPECT_EQ(plan.trim->record, r1);
    EXPECT_EQ(plan.trim->keepBlocks, 3);  // block 5 (pinned page 4) frees nothing; block 4 (page 3) does
    EXPECT_EQ(plan.reclaimed.baseKvPages, 1);
    // Two pages would trim r1 to [1 2], r2's key: r1 goes whole instead (its pages 0 and 1 stay with r2).
    plan = EvictionPlanner::plan({2, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1}));
    EXPECT_FALSE(plan.trim.has_value());
    EXPECT_EQ(plan.reclaimed.baseKvPages, 2);
    // Four pages (every reclaimable one): both go, r2 block by block and then whole.
    plan = EvictionPlanner::plan({4, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
    EXPECT_TRUE(plan.feasible);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1, r2}));
    EXPECT_FALSE(plan.trim.has_value());
    EXPECT_EQ(plan.reclaimed.baseKvPages, 4);
    EXPECT_FALSE(EvictionPlanner::plan({5, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim).feasible);
}

TEST(TrimEvictionPlanner, ATrimOntoAnotherRecordsKeyEvictsWholeUnlessThatRecordIsAVictim) {
    {
        // r1 = [1 2] (LRU), r2 = [1 2 3]: trimming r2 to 2 blocks would collide with r1, a victim: allowed.
        CacheState s({3, 0, 0, 0});
        RecordId const r1 = s.add(Hs({1, 2}), {0, 1});
        RecordId const r2 = s.add(Hs({1, 2, 3}), {0, 1, 2});
        s.finishProducers();
        EvictionPlan const plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
        EXPECT_EQ(plan.victims, (std::vector<RecordId>{r1}));
        ASSERT_TRUE(plan.trim.has_value());
        EXPECT_EQ(plan.trim->record, r2);
        EXPECT_EQ(plan.trim->keepBlocks, 2);
    }
    {
        // r2 = [1 2 3] (LRU), r1 = [1 2] stays (MRU): trimming r2 onto r1's key is refused, r2 goes whole.
        CacheState s({3, 0, 0, 0});
        RecordId const r2 = s.add(Hs({1, 2, 3}), {0, 1, 2});
        s.add(Hs({1, 2}), {0, 1});
        s.finishProducers();
        EvictionPlan const plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
        EXPECT_EQ(plan.victims, (std::vector<RecordId>{r2}));
        EXPECT_FALSE(plan.trim.has_value());
        EXPECT_EQ(plan.reclaimed.baseKvPages, 1);
    }
}

TEST(TrimEvictionPlanner, PairedRecordsGiveUpBaseAndDraftTogetherAndCheckpointsGoWhole) {
    CacheState s({3, 3, 1, 0});
    RecordId const cp = [&] {
        CacheRecord r;
        r.key = CacheRecordKey{Hs({77})[0], 0};
        r.recurrentSnapshotSlot = 0;
        r.exactCheckpointLength = 3;
        s.pools.addCacheRef(recurrentSlot(0));
        return s.records.insert(std::move(r)).id;
    }();
    RecordId const paired = s.add(Hs({1, 2, 3}), {0, 1, 2}, {0, 1, 2});
    s.finishProducers();
    // Draft pages only: the checkpoint (LRU) frees none, so it goes whole; the paired record gives up one block.
    EvictionPlan const plan = EvictionPlanner::plan({0, 1, 0, 0}, s.pools, s.records, std::nullopt, kTrim);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{cp}));
    ASSERT_TRUE(plan.trim.has_value());
    EXPECT_EQ(plan.trim->record, paired);
    EXPECT_EQ(plan.trim->keepBlocks, 2);
    EXPECT_EQ(plan.reclaimed, (ResourceDemand{1, 1, 1, 0}));
}

TEST(TrimEvictionPlanner, TheProtectedRecordIsStillConsideredLast) {
    CacheState s({6, 0, 0, 0});
    RecordId const r1 = s.add(Hs({1, 2, 3}), {0, 1, 2});
    RecordId const r2 = s.add(Hs({4, 5, 6}), {3, 4, 5});
    s.finishProducers();
    EvictionPlan plan = EvictionPlanner::plan({1, 0, 0, 0}, s.pools, s.records, r1, kTrim);
    ASSERT_TRUE(plan.trim.has_value());
    EXPECT_EQ(plan.trim->record, r2);
    plan = EvictionPlanner::plan({4, 0, 0, 0}, s.pools, s.records, r1, kTrim);
    EXPECT_EQ(plan.victims, (std::vector<RecordId>{r2}));
    ASSERT_TRUE(plan.trim.has_value());
    EXPECT_EQ(plan.trim->record, r1);
    EXPECT_EQ(plan.trim->keepBlocks, 2);
}

TEST(TrimEvictionPlanner, TrimPointIsOneStepOfThePlanOnTheStateAsItIs) {
    CacheState s({8, 0, 0, 0});
    RecordId const shared = s.add(Hs({1, 2}), {0, 1});
    RecordId const r = s.add(Hs({1, 2, 3, 4, 5, 6}), {0, 1, 2, 3, 4, 5});
    s.finishProducers();
    std::string const before = s.describe();
    StoredRecord const& record = s.records.get(r);
    // Two free pages: a demand of 2 + k needs k of r's unshared tail blocks (pages 5, 4, 3).
    for (int32_t k = 1; k <= 3; ++k) {
        ResourceDemand const demand{2 + k, 0, 0, 0};
        std::optional<int32_t> const keep = EvictionPlanner::trimPoint(demand, s.pools, s.records, record);
        ASSERT_TRUE(keep.has_value()) << k;
        EXPECT_EQ(*keep, 6 - k);
        // The plan's own step, with r first in its walk, agrees.
        EvictionPlan const plan = EvictionPlanner::plan(demand, s.pools, s.records, shared, kTrim);
        ASSERT_TRUE(plan.trim.has_value());
        EXPECT_EQ(plan.trim->keepBlocks, *keep);
    }
    // Pages 0 and 1 are shared with the other record: dropping blocks [1, 6) frees 4 pages at most, so 7 cannot be
    // met by a trim (r is evicted whole), nor 11 (more than r has blocks: the walk stops after one).
    EXPECT_FALSE(EvictionPlanner::trimPoint({7, 0, 0, 0}, s.pools, s.records, record).has_value());
    EXPECT_FALSE(EvictionPlanner::trimPoint({11, 0, 0, 0}, s.pools, s.records, record).has_value());
    // A trim onto another record's key is refused: keeping 2 blocks (4 cut) would end where `shared` ends.
    EXPECT_FALSE(EvictionPlanner::trimPoint({6, 0, 0, 0}, s.pools, s.records, record).has_value());
    // A snapshot demand no trim can meet, and a bad demand.
    EXPECT_FALSE(EvictionPlanner::trimPoint({3, 0, 1, 0}, s.pools, s.records, record).has_value());
    EXPECT_THROW(EvictionPlanner::trimPoint({-1, 0, 0, 0}, s.pools, s.records, record), ContractError);
    EXPECT_EQ(s.describe(), before);  // read-only
}

// ---- manager ------------------------------------------------------------------------------------------------

TEST(TrimEviction, ManagerTrimsTheLruRecordAndItsShorterPrefixStillHits) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8, kTrim);
    EXPECT_EQ(m.evictionPolicy(), kTrim);
    RecordId const r = produce(m, Hs({1, 2, 3, 4}), 16);  // pages 0..3
    ASSERT_EQ(freeBase(m), 0);
    AcquireResult other = m.acquireVanilla(Hs({9}), 4);  // one page: block 4 of r goes
    ASSERT_TRUE(other.lease.has_value());
    EXPECT_EQ(other.lease->basePages(), (std::vector<PageId>{3}));
    ASSERT_TRUE(m.records().contains(r));
    CacheRecord const trimmed = m.records().materialize(r);
    EXPECT_EQ(trimmed.key, (CacheRecordKey{Hs({3})[0], 3}));
    EXPECT_EQ(trimmed.logicalBlockHashes, Hs({1, 2, 3}));
    EXPECT_EQ(trimmed.basePagePath, (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(m.records().find({Hs({3})[0], 3}), r);
    EXPECT_FALSE(m.records().find({Hs({4})[0], 4}).has_value());
    EXPECT_FALSE(m.baseIndex().lookup(Hs({4})[0]).has_value());
    EXPECT_EQ(m.metrics().trimmedRecords, 1u);
    EXPECT_EQ(m.metrics().trimmedBlocks, 1u);
    EXPECT_EQ(m.metrics().evictedRecords, 0u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 1u);
    EXPECT_NO_THROW(m.checkInvariants());
    other.lease->release();
    // A prompt through block 3 reuses the three blocks that stayed (one private page: the one just freed).
    AcquireResult again = m.acquireVanilla(Hs({1, 2, 3}), 13);
    ASSERT_TRUE(again.lease.has_value());
    EXPECT_EQ(again.plan.reuseTokenLength, 12);
    EXPECT_EQ(again.lease->basePages(), (std::vector<PageId>{0, 1, 2, 3}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(TrimEviction, DefaultPolicyStillEvictsTheWholeRecord) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    EXPECT_EQ(m.evictionPolicy(), EvictionPolicy::kRecordLru);
    RecordId const r = produce(m, Hs({1, 2, 3, 4}), 16);
    AcquireResult other = m.acquireVanilla(Hs({9}), 4);
    ASSERT_TRUE(other.lease.has_value());
    EXPECT_FALSE(m.records().contains(r));
    EXPECT_EQ(freeBase(m), 3);
    EXPECT_EQ(m.metrics().trimmedRecords, 0u);
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
}

TEST(TrimEviction, SpecTrimDropsTheDraftBoundariesWithTheBlocks) {
    ContextCacheManager m(kPage, {6, 6, 0, 0}, 8, kTrim);
    std::vector<BlockHash> const hashes = Hs({1, 2, 3, 4});
    AcquireResult a = m.acquireSpec(hashes, 16);
    ASSERT_TRUE(a.lease.has_value());
    RecordId const r = *m.publish(*a.lease, {hashes, 16}).record;
    a.lease->release();
    std::vector<PageId> const pages = m.records().get(r).basePagePath;  // the draft index's keys
    EXPECT_EQ(m.draftIndex().entryCount(), 4u);
    AcquireResult other = m.acquireSpec(Hs({9, 10, 11}), 12);  // 3 pages each: 2 free + block 4 of the record
    ASSERT_TRUE(other.lease.has_value());
    CacheRecord const trimmed = m.records().materialize(r);
    EXPECT_EQ(trimmed.draftPagePath.size(), 3u);
    EXPECT_EQ(m.draftIndex().entryCount(), 3u);
    EXPECT_FALSE(m.draftIndex().contains(pages[3], {r, 4}));
    EXPECT_TRUE(m.draftIndex().contains(pages[2], {r, 3}));
    EXPECT_NO_THROW(m.checkInvariants());
    other.lease->release();
    // The paired path now ends at block 3: reuse = 3 blocks matched - one replayed page.
    AcquireResult again = m.acquireSpec(hashes, 17);
    ASSERT_TRUE(again.lease.has_value());
    EXPECT_EQ(again.plan.reuseTokenLength, 8);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(TrimEviction, StoreTrimRejectsBadArgumentsAndChangesNothing) {
    CacheRecordStore records(8);
    CacheRecord r;
    r.key = CacheRecordKey{Hs({3})[0], 3};
    r.logicalBlockHashes = Hs({1, 2, 3});
    r.basePagePath = {0, 1, 2};
    RecordId const id = records.insert(r).id;
    CacheRecord s;
    s.key = CacheRecordKey{Hs({2})[0], 2};
    s.logicalBlockHashes = Hs({1, 2});
    s.basePagePath = {0, 1};
    records.insert(s);
    std::string const before = test::describe(records);
    EXPECT_THROW(records.trimTail(id, 0), ContractError);
    EXPECT_THROW(records.trimTail(id, 3), ContractError);
    EXPECT_THROW(records.trimTail(id, 2), ContractError);  // {H2, 2} is the other record's key
    EXPECT_THROW(records.trimTail(RecordId{99}, 1), ContractError);
    EXPECT_EQ(test::describe(records), before);
    records.trimTail(id, 1);
    EXPECT_EQ(records.get(id).key, (CacheRecordKey{Hs({1})[0], 1}));
    EXPECT_NO_THROW(records.checkInvariants());
}

TEST(TrimEviction, ConstructorRejectsAnUnknownPolicy) {
    EXPECT_THROW(ContextCacheManager(kPage, {4, 0, 0, 0}, 8, static_cast<EvictionPolicy>(7)), ContractError);
    EXPECT_STREQ(toString(EvictionPolicy::kRecordLru), "lru");
    EXPECT_STREQ(toString(EvictionPolicy::kRecordLruTrim), "lru-trim");
}

// ---- the manager evicts as it goes: exactly what the planner plans ----------------------------------------

// The manager no longer plans and then applies: it evicts (or trims) least recent records one at a time until the
// pools can allocate. Before every grow of a randomized workload (prefix-sharing prompts, a hash repeated within a
// prompt, leases held across steps so that pinned pages free nothing) the planner's plan is taken on the manager's
// own state, and the grow must remove exactly its victims, apply exactly its trim, or change nothing when it is
// infeasible.
void checkEvictionMatchesThePlan(EvictionPolicy policy, bool spec, uint32_t seed) {
    std::mt19937 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    int32_t const pages = 40;
    ContextCacheManager m(kPage, {pages, spec ? pages : 0, 0, 0}, 24, policy);
    std::vector<std::vector<BlockHash>> prompts;
    std::vector<CacheRequestLease> held;
    size_t grows = 0, victims = 0, trims = 0, infeasible = 0;
    for (int step = 0; step < 400; ++step) {
        std::vector<BlockHash> hashes;
        if (!prompts.empty() && pick(0, 2) > 0) {  // extend a prefix of an earlier prompt
            std::vector<BlockHash> const& from =
                prompts[static_cast<size_t>(pick(0, static_cast<int>(prompts.size()) - 1))];
            hashes.assign(from.begin(), from.begin() + pick(1, std::min(8, static_cast<int>(from.size()))));
        }
        for (int extra = pick(0, 6); extra > 0; --extra) hashes.push_back(Hs({static_cast<uint64_t>(pick(1, 400))})[0]);
        if (!hashes.empty() && pick(0, 9) == 0) hashes.push_back(hashes.front());  // a repeated hash: a page twice
        if (hashes.empty()) continue;
        prompts.push_back(hashes);
        int32_t const tokens = static_cast<int32_t>(hashes.size()) * kPage + pick(0, kPage - 1);
        AcquireResult a = spec ? m.acquireSpec(hashes, tokens + 1) : m.acquireVanilla(hashes, tokens);
        if (!a.lease) continue;
        int32_t const more = pick(0, 3) == 0 ? pick(20, 40) : pick(0, 10);  // sometimes more than can be freed
        ResourceDemand demand{more, spec ? more : 0, 0, 0};
        EvictionPlan const expected = EvictionPlanner::plan(demand, m.pools(), m.records(), std::nullopt, policy);
        std::vector<RecordId> const before = m.records().lruToMru();
        ContextCacheManagerMetrics const metrics = m.metrics();
        std::string const state = test::describe(m.pools()) + test::describe(m.records());
        bool const grown = spec ? m.growSpecPages(*a.lease, more, more) : m.growBasePages(*a.lease, more);
        ++grows;
        ASSERT_EQ(grown, expected.feasible) << "seed " << seed << " step " << step;
        if (!grown) {
            ++infeasible;
            ASSERT_EQ(test::describe(m.pools()) + test::describe(m.records()), state)
                << "an infeasible grow changed state";
        } else {
            for (RecordId id : before) {
                bool const victim =
                    std::find(expected.victims.begin(), expected.victims.end(), id) != expected.victims.end();
                ASSERT_EQ(m.records().contains(id), !victim) << "seed " << seed << " step " << step << " record " << id;
            }
            ASSERT_EQ(m.metrics().evictedRecords - metrics.evictedRecords, expected.victims.size());
            ASSERT_EQ(m.metrics().trimmedRecords - metrics.trimmedRecords, expected.trim ? 1u : 0u);
            if (expected.trim)
                ASSERT_EQ(m.records().get(expected.trim->record).key.fullBlockCount, expected.trim->keepBlocks);
            victims += expected.victims.size();
            trims += expected.trim ? 1 : 0;
        }
        if (pick(0, 3) > 0) m.publish(*a.lease, {hashes, tokens});
        if (pick(0, 4) == 0) held.push_back(std::move(*a.lease));  // pins its pages for a while
        if (held.size() > 2 || (!held.empty() && pick(0, 3) == 0)) held.erase(held.begin());
        ASSERT_NO_THROW(m.checkInvariants());
    }
    // The workload reached every branch: evictions, trims (under the trim policy) and infeasible grows.
    SCOPED_TRACE("policy " + std::string(toString(policy)) + (spec ? " spec" : " vanilla") + " seed " +
                 std::to_string(seed));
    EXPECT_GT(grows, 100u);
    EXPECT_GT(victims, 10u);
    EXPECT_GT(infeasible, 0u);
    if (policy == kTrim) EXPECT_GT(trims, 10u);
}

TEST(TrimEviction, TheManagerEvictsExactlyWhatThePlannerPlans) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
        checkEvictionMatchesThePlan(EvictionPolicy::kRecordLru, false, seed);
        checkEvictionMatchesThePlan(kTrim, false, seed);
        checkEvictionMatchesThePlan(EvictionPolicy::kRecordLru, true, seed);
        checkEvictionMatchesThePlan(kTrim, true, seed);
    }
}

}  // namespace
}  // namespace ctxcache
