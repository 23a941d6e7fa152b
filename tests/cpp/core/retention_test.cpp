// Retention (issue 29): specs in block units, eviction by priority then recency (record LRU ranks a record by its
// best block, lru-trim by its last block and cuts a low tail before a high head), durations on a driven clock,
// hard pins within a budget, and an explicit default spec that changes nothing. Exact pages and records throughout.
#include <gtest/gtest.h>

#include <thread>

#include <chrono>

#include <limits>
#include <list>
#include <random>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "ctxcache/retention.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::chain;
using test::extend;

constexpr int32_t kPage = 4;
constexpr int64_t kSecond = 1'000'000'000;

RetentionSpec rangeSpec(int32_t start, int32_t end, int32_t priority, int64_t duration = kNoRetentionDuration) {
    RetentionSpec spec;
    spec.ranges.push_back({start, end, priority, duration});
    return spec;
}

// One request to completion with a spec: acquire, publish every block, release. Returns the record (or none).
RecordId serve(ContextCacheManager& m, std::vector<BlockHash> const& hashes, RetentionSpec const* spec = nullptr) {
    int32_t const tokens = static_cast<int32_t>(hashes.size()) * kPage;
    AcquireResult a = m.acquireVanilla(hashes, tokens);
    if (!a.lease) return kNoRecord;
    PublishRequest request{hashes, tokens};
    request.retention = spec;
    PublishResult const r = m.publish(*a.lease, request);
    return r.record.value_or(kNoRecord);
}

std::vector<PageId> pagesOf(ContextCacheManager const& m, RecordId id) { return m.records().get(id).basePagePath; }

// ---- the spec in block units ----------------------------------------------------------------------------------

TEST(RetentionSpec, TokenRangesBecomeTheBlocksTheyOverlap) {
    RetentionSpec spec;
    spec.ranges = {{0, 6, 90, kNoRetentionDuration}, {9, kRetentionOpenEnd, 10, 5 * kSecond}};
    spec.promptTokenCount = 14;
    spec.decodePriority = 60;
    // 5 blocks of 4: prompt tokens [0, 14), decode [14, 20).
    RetentionBlockRanges const r = retentionBlockRanges(spec, kPage, 5, 100);
    ASSERT_EQ(r.size(), 3u);
    EXPECT_EQ(r[0], (RetentionBlockRange{0, 2, 90, kRetentionNever}));  // tokens [0, 6): blocks 0, 1
    EXPECT_EQ(r[1], (RetentionBlockRange{2, 4, 10, 100 + 5 * kSecond}));  // [9, 14): blocks 2, 3
    EXPECT_EQ(r[2], (RetentionBlockRange{3, 5, 60, kRetentionNever}));    // decode [14, 20): blocks 3, 4
    EXPECT_EQ(blockRetentionPriority(r, 0, 100), 90);
    EXPECT_EQ(blockRetentionPriority(r, 2, 100), 10);
    EXPECT_EQ(blockRetentionPriority(r, 3, 100), 60);  // the highest of the two that overlap it
    EXPECT_EQ(maxRetentionPriority(r, 5, 100), 90);
    EXPECT_EQ(retentionTailStart(r, 5, 60, 100), 2);   // blocks 2..4 are at or below 60
    EXPECT_EQ(retentionTailStart(r, 5, 35, 100), 5);   // the last block (60) is above 35
    EXPECT_EQ(nextRetentionExpiry(r, 100), 100 + 5 * kSecond);
    // After the duration, block 2 falls back to the default.
    EXPECT_EQ(blockRetentionPriority(r, 2, 100 + 5 * kSecond), kDefaultRetentionPriority);
    EXPECT_EQ(nextRetentionExpiry(r, 100 + 5 * kSecond), kRetentionNever);
}

TEST(RetentionSpec, ExpiriesSaturateInsteadOfOverflowing) {
    EXPECT_EQ(retentionExpiry(5, 10), 15);
    EXPECT_EQ(retentionExpiry(-5'000'000'000, 1), -4'999'999'999);
    EXPECT_EQ(retentionExpiry(kRetentionNever - 3, 10), kRetentionNever);
    EXPECT_EQ(retentionExpiry(-1'000'000'000, kRetentionNever), kRetentionNever - 1'000'000'000);  // the fuzzer's
    EXPECT_EQ(retentionExpiry(std::numeric_limits<int64_t>::min(), kRetentionNever), -1);
    EXPECT_EQ(retentionExpiry(7, kNoRetentionDuration), kRetentionNever);
}

TEST(RetentionSpec, ASpecThatCannotChangeARankIsTheDefault) {
    EXPECT_TRUE(RetentionSpec{}.isDefault());
    EXPECT_TRUE(rangeSpec(0, 8, kDefaultRetentionPriority).isDefault());  // stored as nothing
    EXPECT_FALSE(rangeSpec(0, 8, kDefaultRetentionPriority, kSecond).isDefault());
    EXPECT_FALSE(rangeSpec(0, 8, 36).isDefault());
    RetentionSpec decode;
    decode.promptTokenCount = 4;
    EXPECT_TRUE(decode.isDefault());
    decode.decodePriority = 0;
    EXPECT_FALSE(decode.isDefault());
    EXPECT_TRUE(retentionBlockRanges(rangeSpec(0, 8, kDefaultRetentionPriority), kPage, 4, 0).empty());
}

TEST(RetentionSpec, BadSpecsAreRefusedNamingTheField) {
    auto refused = [](RetentionSpec const& spec, char const* needle) {
        try {
            validateRetentionSpec("publish", spec);
        } catch (ContractError const& e) {
            return std::string(e.what()).find(needle) != std::string::npos;
        }
        return false;
    };
    EXPECT_TRUE(refused(rangeSpec(0, 4, 101), "priority 101"));
    EXPECT_TRUE(refused(rangeSpec(0, 4, -1), "priority -1"));
    EXPECT_TRUE(refused(rangeSpec(-2, 4, 50), "negative token"));
    EXPECT_TRUE(refused(rangeSpec(4, 4, 50), "not after its start"));
    EXPECT_TRUE(refused(rangeSpec(0, 4, 50, -5), "negative"));
    RetentionSpec many;
    many.ranges.assign(kMaxRetentionRanges + 1, RetentionRange{});
    EXPECT_TRUE(refused(many, "65 ranges"));
    EXPECT_NO_THROW(validateRetentionSpec("publish", rangeSpec(0, kRetentionOpenEnd, 0, 0)));
}

// ---- eviction by priority ------------------------------------------------------------------------------------

TEST(RetentionEviction, APriority90SystemPromptSurvivesAFloodThatEvictsEverythingElse) {
    ContextCacheManager m(kPage, {16, 0, 0, 0}, 64);
    std::vector<BlockHash> const system = chain(1, 2);  // two blocks of system prompt
    RetentionSpec const keep = rangeSpec(0, 2 * kPage, 90);
    RecordId const s = serve(m, extend(system, 2, 1), &keep);
    EXPECT_EQ(m.recordPriority(s), 90);  // record LRU ranks a record by its best block
    EXPECT_EQ(pagesOf(m, s), (std::vector<PageId>{0, 1, 2}));
    std::vector<RecordId> flood;
    for (int i = 0; i < 20; ++i) {
        flood.push_back(serve(m, chain(100 + static_cast<uint64_t>(i), 3)));
        ASSERT_NE(flood.back(), kNoRecord);
        m.checkInvariants();
    }
    // 16 pages: the system prompt's record (3) and the last four of the flood (12); every other one is gone.
    EXPECT_TRUE(m.records().contains(s));
    EXPECT_EQ(pagesOf(m, s), (std::vector<PageId>{0, 1, 2}));
    for (size_t i = 0; i < flood.size(); ++i) EXPECT_EQ(m.records().contains(flood[i]), i >= 16) << i;
    EXPECT_EQ(m.retentionMetrics().evictedRecordsByPriority[35], 16u);
    EXPECT_EQ(m.retentionMetrics().evictedRecordsByPriority[90], 0u);
    // The next conversation on that system prompt reuses both of its blocks.
    AcquireResult a = m.acquireVanilla(extend(system, 3, 1), 3 * kPage);
    ASSERT_TRUE(a.lease);
    EXPECT_EQ(a.plan.reuseTokenLength, 2 * kPage);
    EXPECT_EQ(std::vector<PageId>(a.lease->basePages().begin(), a.lease->basePages().begin() + 2),
              (std::vector<PageId>{0, 1}));
}

// Found by the capi fuzzer (tests/fuzz/corpus/retention-clock-switch): a range of 7 ns set on the steady clock
// expired and its rank was applied; a driven clock that starts far lower made it live again, so the record sat in
// the default bucket while its ranges ranked it 81 (the invariant check failed). A switch keeps each expiry's time
// left instead: an expired range stays expired, a running one runs on.
TEST(RetentionClock, SwitchingToADrivenClockKeepsTheTimeEachExpiryHadLeft) {
    ContextCacheManager m(kPage, {32, 0, 0, 0}, 64);
    RetentionSpec const brief = rangeSpec(0, 2 * kPage, 81, 7);           // 7 ns on the steady clock
    RetentionSpec const lasting = rangeSpec(0, 2 * kPage, 60, 3600 * kSecond);  // an hour
    RecordId const short_ = serve(m, extend(chain(1, 2), 2, 1), &brief);
    RecordId const long_ = serve(m, extend(chain(50, 2), 51, 1), &lasting);
    ASSERT_NE(short_, long_);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    serve(m, chain(90, 1));  // a call after the 7 ns: the brief range's expiry is applied
    EXPECT_EQ(m.recordPriority(short_), kDefaultRetentionPriority);
    EXPECT_EQ(m.recordPriority(long_), 60);
    m.setRetentionTime(2 * kSecond);  // far below the steady clock's readings
    m.checkInvariants();
    EXPECT_EQ(m.recordPriority(short_), kDefaultRetentionPriority);  // still expired
    EXPECT_EQ(m.recordPriority(long_), 60);
    m.setRetentionTime(2 * kSecond + 3500 * kSecond);  // under an hour since the publication: still running
    EXPECT_EQ(m.recordPriority(long_), 60);
    m.setRetentionTime(2 * kSecond + 3601 * kSecond);  // the hour is over
    EXPECT_EQ(m.recordPriority(long_), kDefaultRetentionPriority);
    m.checkInvariants();
}

// Found by the capi fuzzer: a pin refused for the budget had first read the clock, which applied a due expiry, so a
// refused call changed the eviction order. A refusal is now decided before the clock is read.
TEST(RetentionClock, ARefusedPinAppliesNoExpiry) {
    ContextCacheManager m(kPage, {32, 0, 0, 0}, 64);
    RetentionSpec const brief = rangeSpec(0, 2 * kPage, 90, 1);  // 1 ns on the steady clock
    RecordId const a = serve(m, extend(chain(1, 2), 2, 1), &brief);
    RecordId const b = serve(m, extend(chain(7, 2), 8, 1));
    std::this_thread::sleep_for(std::chrono::microseconds(50));  // a's range is due; no call has read the clock
    EXPECT_EQ(m.recordPriority(a), 90);
    std::list<RecordId> const order = m.records().lru();
    EXPECT_THROW(m.pinRecord(a), ContractError);  // the default budget (0) refuses every pin
    EXPECT_EQ(m.recordPriority(a), 90);           // nothing applied
    EXPECT_EQ(m.records().lru(), order);
    EXPECT_EQ(m.retentionMetrics().pinsRefused, 1u);
    m.setPinBudget(1.0);
    m.pinRecord(b);  // a pin that is made reads the clock: a's expiry is applied now
    EXPECT_EQ(m.recordPriority(a), kDefaultRetentionPriority);
    EXPECT_TRUE(m.isPinned(b));
    m.checkInvariants();
}

TEST(RetentionEviction, AtItsDurationsEndTheSystemPromptIsEvictedInLruOrder) {
    ContextCacheManager m(kPage, {16, 0, 0, 0}, 64);
    m.setRetentionTime(0);
    RetentionSpec const keep = rangeSpec(0, 2 * kPage, 90, 10 * kSecond);
    std::vector<BlockHash> const prompt = extend(chain(1, 2), 2, 1);
    RecordId const s = serve(m, prompt, &keep);
    m.setRetentionTime(1 * kSecond);
    RecordId const a = serve(m, chain(101, 3));
    m.setRetentionTime(2 * kSecond);
    RecordId const b = serve(m, chain(102, 3));
    m.setRetentionTime(3 * kSecond);
    EXPECT_EQ(serve(m, prompt, &keep), s);  // the same prompt again: the record is touched (now after b)
    m.setRetentionTime(4 * kSecond);
    RecordId const c = serve(m, chain(103, 3));
    RecordId const d = serve(m, chain(104, 3));
    EXPECT_EQ(m.recordPriority(s), 90);
    // Its duration ends (it counts from the first publication; the second one's range ends at 13 s).
    m.setRetentionTime(13 * kSecond);
    EXPECT_EQ(m.recordPriority(s), kDefaultRetentionPriority);
    EXPECT_EQ(m.retentionMetrics().retentionExpiries, 1u);
    m.checkInvariants();
    // Now it goes in LRU order among the others: a, b, s, c, d.
    std::vector<RecordId> const order{a, b, s, c, d};
    for (size_t i = 0; i < order.size(); ++i) {
        ASSERT_NE(serve(m, chain(200 + i, 3)), kNoRecord);
        for (size_t j = 0; j < order.size(); ++j) EXPECT_EQ(m.records().contains(order[j]), j > i) << i << " " << j;
        m.checkInvariants();
    }
}

TEST(RetentionEviction, LruTrimCutsAPriority0TailBeforeAPriority90Head) {
    ContextCacheManager m(kPage, {12, 0, 0, 0}, 64, EvictionPolicy::kRecordLruTrim);
    RetentionSpec spec;
    spec.ranges = {{0, 2 * kPage, 90, kNoRetentionDuration}, {2 * kPage, kRetentionOpenEnd, 0, kNoRetentionDuration}};
    RecordId const r = serve(m, chain(1, 4), &spec);  // pages 0..3: head 0, 1 at 90, tail 2, 3 at 0
    EXPECT_EQ(m.recordPriority(r), 0);  // lru-trim ranks a record by its last block
    RecordId const x = serve(m, chain(2, 4));  // pages 4..7, at the default
    RecordId const y = serve(m, chain(3, 4));  // pages 8..11: everything is full
    EXPECT_EQ(m.pools().freeCount(ResourceType::kBaseKvPage), 0);
    // Two pages: the priority-0 tail goes, although r is the least recent and x is older than y.
    ASSERT_NE(serve(m, chain(4, 2)), kNoRecord);
    EXPECT_EQ(pagesOf(m, r), (std::vector<PageId>{0, 1}));
    EXPECT_EQ(m.recordPriority(r), 90);  // what is left is the head
    EXPECT_TRUE(m.records().contains(x));
    EXPECT_TRUE(m.records().contains(y));
    EXPECT_EQ(m.retentionMetrics().trimmedRecordsByPriority[0], 1u);
    m.checkInvariants();
    // More pressure takes the default records' tails (lru-trim as before) and never the head.
    ASSERT_NE(serve(m, chain(5, 4)), kNoRecord);
    ASSERT_NE(serve(m, chain(6, 4)), kNoRecord);
    EXPECT_EQ(pagesOf(m, r), (std::vector<PageId>{0, 1}));
    EXPECT_EQ(m.recordRetention(r), (RetentionBlockRanges{{0, 2, 90, kRetentionNever}}));
    m.checkInvariants();
}

TEST(RetentionEviction, ALowTailIsCutWhenNotEnoughAndTheWalkGoesOn) {
    // The priority-0 tail frees one page; the demand needs three: the tail goes, r re-ranks to 90, and the
    // default record x goes whole (its tail is all it has at 35).
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 64, EvictionPolicy::kRecordLruTrim);
    RetentionSpec spec;
    spec.ranges = {{0, 3 * kPage, 90, kNoRetentionDuration}, {3 * kPage, kRetentionOpenEnd, 0, kNoRetentionDuration}};
    RecordId const r = serve(m, chain(1, 4), &spec);
    RecordId const x = serve(m, chain(2, 4));
    ASSERT_NE(serve(m, chain(3, 3)), kNoRecord);
    EXPECT_EQ(pagesOf(m, r), (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(m.recordPriority(r), 90);
    EXPECT_EQ(pagesOf(m, x), (std::vector<PageId>{4, 5}));  // x trimmed to two blocks (three pages needed in all)
    m.checkInvariants();
}

// ---- pins ------------------------------------------------------------------------------------------------------

TEST(RetentionPins, TheBudgetRefusesThePinThatWouldExceedItAndAdmissionNeverFailsBelowIt) {
    ContextCacheManager m(kPage, {16, 0, 0, 0}, 64);
    RecordId const p = serve(m, chain(1, 3));  // pages 0..2
    RecordId const q = serve(m, chain(2, 2));  // pages 3, 4
    EXPECT_THROW(m.pinRecord(p), ContractError);  // the default budget is 0
    m.setPinBudget(0.25);                         // 4 of 16 pages
    m.pinRecord(p);
    EXPECT_TRUE(m.isPinned(p));
    try {
        m.pinRecord(q);
        FAIL() << "a pin past the budget was accepted";
    } catch (ContractError const& e) {
        EXPECT_NE(std::string(e.what()).find("would hold 5 base KV page ids"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(m.isPinned(q));
    EXPECT_EQ(m.retentionMetrics().pinsRefused, 2u);
    EXPECT_EQ(m.retentionMetrics().pinnedBasePages, 3u);
    m.checkInvariants();
    // A prompt sharing p's first two blocks and extending it: the pin counts its pages once.
    RecordId const p2 = serve(m, extend(chain(1, 2), 9, 1));
    m.pinRecord(p2);  // pages 0, 1 (already pinned) and one more: 4 distinct
    EXPECT_EQ(m.retentionMetrics().pinnedBasePages, 4u);
    // Admission of everything the budget leaves: 12 pages, although the pool is full of other records.
    for (int i = 0; i < 3; ++i) ASSERT_NE(serve(m, chain(50 + static_cast<uint64_t>(i), 4)), kNoRecord);
    AcquireResult big = m.acquireVanilla(chain(60, 12), 12 * kPage);
    ASSERT_TRUE(big.lease);
    EXPECT_EQ(pagesOf(m, p), (std::vector<PageId>{0, 1, 2}));
    EXPECT_FALSE(m.records().contains(q));
    m.checkInvariants();
    big.lease->release();
    // Unpinning makes p evictable again.
    m.unpinRecord(p);
    m.unpinRecord(p2);
    EXPECT_THROW(m.unpinRecord(p), ContractError);
    AcquireResult all = m.acquireVanilla(chain(61, 16), 16 * kPage);
    ASSERT_TRUE(all.lease);
    EXPECT_FALSE(m.records().contains(p));
    m.checkInvariants();
}

TEST(RetentionPins, APinEndsWithItsDurationAndAnExplicitEvictionEndsIt) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 64);
    m.setPinBudget(0.5);
    m.setRetentionTime(0);
    RecordId const p = serve(m, chain(1, 2));
    m.pinRecord(p, 5 * kSecond);
    RecordId const old = serve(m, chain(2, 2));
    ASSERT_NE(serve(m, chain(3, 5)), kNoRecord);  // evicts `old`, never p
    EXPECT_TRUE(m.records().contains(p));
    EXPECT_FALSE(m.records().contains(old));
    m.setRetentionTime(5 * kSecond);
    EXPECT_FALSE(m.isPinned(p));
    EXPECT_EQ(m.retentionMetrics().pinExpiries, 1u);
    m.checkInvariants();
    ASSERT_NE(serve(m, chain(4, 4)), kNoRecord);  // p is the least recent again: it goes first
    EXPECT_FALSE(m.records().contains(p));
    RecordId const q = serve(m, chain(5, 2));
    m.pinRecord(q);
    m.evictRecord(q);
    EXPECT_EQ(m.retentionMetrics().pinnedRecords, 0u);
    m.checkInvariants();
    EXPECT_THROW(m.setRetentionTime(4 * kSecond), ContractError);  // never backwards
}

TEST(RetentionPins, PinsLeaveARecordSlotToEvictAndClearEndsThem) {
    ContextCacheManager m(kPage, {16, 0, 0, 0}, 2);
    m.setPinBudget(1.0);
    RecordId const p = serve(m, chain(1, 1));
    m.pinRecord(p);
    RecordId const q = serve(m, chain(2, 1));
    EXPECT_THROW(m.pinRecord(q), ContractError);  // two pinned records would fill maxRecords
    RecordId const r = serve(m, chain(3, 1));      // the record limit evicts q, not the pinned p
    EXPECT_TRUE(m.records().contains(p));
    EXPECT_FALSE(m.records().contains(q));
    EXPECT_TRUE(m.records().contains(r));
    m.clear();
    EXPECT_EQ(m.records().size(), 0u);
    EXPECT_EQ(m.pools().freeCount(ResourceType::kBaseKvPage), 16);
    m.checkInvariants();
}

// ---- the default spec changes nothing ------------------------------------------------------------------------

TEST(RetentionEviction, AnExplicitDefaultSpecMakesEveryEvictionDecisionPlainLruMakes) {
    for (EvictionPolicy policy : {EvictionPolicy::kRecordLru, EvictionPolicy::kRecordLruTrim}) {
        ContextCacheManager plain(kPage, {40, 0, 0, 0}, 24, policy);
        ContextCacheManager explicitDefault(kPage, {40, 0, 0, 0}, 24, policy);
        // Stored on every record (a duration), yet ranked as the default for the whole run.
        RetentionSpec const spec = rangeSpec(0, kRetentionOpenEnd, kDefaultRetentionPriority, 1'000'000 * kSecond);
        std::mt19937 rng(7);
        for (int step = 0; step < 400; ++step) {
            // Prompts over a few shared prefixes of varying length: hits, extensions, trims and evictions.
            uint64_t const lane = rng() % 12;
            int const shared = static_cast<int>(rng() % 4);
            int const own = 1 + static_cast<int>(rng() % 6);
            std::vector<BlockHash> const hashes = extend(chain(lane % 4, shared), 1000 + lane * 100 + rng() % 3, own);
            RecordId const a = serve(plain, hashes);
            RecordId const b = serve(explicitDefault, hashes, &spec);
            ASSERT_EQ(a, b) << "step " << step;
            ASSERT_EQ(plain.records().lruToMru(), explicitDefault.records().lruToMru()) << "step " << step;
            ASSERT_EQ(plain.metrics().evictedRecords, explicitDefault.metrics().evictedRecords);
            ASSERT_EQ(plain.metrics().trimmedBlocks, explicitDefault.metrics().trimmedBlocks);
        }
        plain.records().forEach([&](StoredRecord const& r) {
            EXPECT_EQ(r.basePagePath, explicitDefault.records().get(r.id).basePagePath);
        });
        EXPECT_GT(plain.metrics().evictedRecords, 50u);
        explicitDefault.checkInvariants();
    }
}

}  // namespace
}  // namespace ctxcache
