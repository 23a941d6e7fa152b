// Hybrid+MTP checkpoint reuse (issue 12, item 1): the boundary token stays private, so a checkpoint at exact
// length E binds fb = floor((E-1)/P) base AND draft pages plus the recurrent and (always) the partial-KV slot;
// plain hybrid and MTP checkpoints never stand in for each other; the paired state is published, limited and
// evicted like every other record resource.
#include <gtest/gtest.h>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::blockHash;
using test::chain;
using test::describe;
using test::extend;

constexpr int32_t kPage = 4;
constexpr ResourceType kBase = ResourceType::kBaseKvPage;
constexpr ResourceType kDraft = ResourceType::kDraftKvPage;
constexpr ResourceType kRecurrent = ResourceType::kRecurrentSnapshot;
constexpr ResourceType kPartial = ResourceType::kPartialKvSnapshot;

BlockHash digest(uint64_t lane, int32_t length) {
    return BlockHash{0x3D16E57ull + lane, static_cast<uint64_t>(length)};
}

int32_t mtpBlocks(int32_t length) { return (length - 1) / kPage; }

std::vector<BlockHash> firstBlocks(std::vector<BlockHash> const& hashes, int32_t count) {
    return {hashes.begin(), hashes.begin() + count};
}

struct Published {
    PublishResult result;
    HybridSnapshotReservation reservation;
};

// The producer side of one Hybrid+MTP request: reserve both slots, (capture), publish at `length`, retire.
Published publishMtp(ContextCacheManager& m, CacheRequestLease& lease, std::vector<BlockHash> const& hashes,
                     int32_t length, BlockHash exactDigest) {
    std::optional<HybridSnapshotReservation> reservation = m.reserveHybridSnapshots(lease, true);
    EXPECT_TRUE(reservation);
    EXPECT_TRUE(reservation->partialKvSnapshotSlot);
    PublishResult result =
        m.publishHybridMtp(lease, {firstBlocks(hashes, mtpBlocks(length)), {exactDigest, length}, *reservation});
    m.retireHybridSnapshotReservation(lease, *reservation);
    return {result, *reservation};
}

// A cold request of exactly `length` tokens of `hashes` that publishes its checkpoint and ends.
Published coldCheckpoint(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t length,
                         BlockHash exactDigest) {
    AcquireResult cold =
        m.acquireHybridMtp({}, firstBlocks(hashes, length / kPage), length, ContextCacheLookupPolicy::kBypass);
    EXPECT_EQ(cold.status, AcquireStatus::kAcquired);
    Published p = publishMtp(m, *cold.lease, hashes, length, exactDigest);
    cold.lease->release();
    return p;
}

// E on and off a page boundary (P = 4): fb = floor((E-1)/4) pages are bound in both pools, reuse is E, and a
// 16-token prompt allocates 4 - fb private pages in each pool.
TEST(HybridMtpManager, PlanBindsFloorOfLengthMinusOnePagesOnAndOffAPageBoundary) {
    struct Case {
        int32_t length;
        int32_t fullBlocks;
    };
    for (Case const c : {Case{1, 0}, Case{4, 0}, Case{5, 1}, Case{8, 1}, Case{9, 2}, Case{10, 2}, Case{12, 2}}) {
        SCOPED_TRACE("E = " + std::to_string(c.length));
        ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
        auto const a = chain(1, 4);
        AcquireResult cold = m.acquireHybridMtp({}, firstBlocks(a, c.length / kPage), c.length);
        ASSERT_EQ(cold.status, AcquireStatus::kAcquired);
        int32_t const coldPages = (c.length + kPage - 1) / kPage;
        EXPECT_EQ(cold.plan.mode, ReusePlanMode::kHybridMtp);
        EXPECT_EQ(cold.plan.kind, ReusePlanKind::kNoReusablePrefix);
        EXPECT_EQ(cold.plan.demand, (ResourceDemand{coldPages, coldPages, 0, 0}));
        EXPECT_EQ(cold.lease->mode(), ReusePlanMode::kHybridMtp);
        EXPECT_EQ(cold.lease->draftPages().size(), static_cast<size_t>(coldPages));
        Published const p = publishMtp(m, *cold.lease, a, c.length, digest(1, c.length));
        ASSERT_EQ(p.result.status, PublishStatus::kPublished);
        ASSERT_TRUE(p.result.record);
        EXPECT_EQ(p.result.publishedBaseFullBlockCount, c.fullBlocks);
        CacheRecord const record = m.records().materialize(*p.result.record);
        std::vector<PageId> const firstPages(cold.lease->basePages().begin(),
                                             cold.lease->basePages().begin() + c.fullBlocks);
        std::vector<PageId> const firstDraft(cold.lease->draftPages().begin(),
                                             cold.lease->draftPages().begin() + c.fullBlocks);
        cold.lease->release();
        EXPECT_TRUE(record.isHybridMtp());
        EXPECT_EQ(record.key.fullBlockCount, c.fullBlocks);
        EXPECT_EQ(record.logicalBlockHashes, firstBlocks(a, c.fullBlocks));
        EXPECT_EQ(record.basePagePath, firstPages);
        EXPECT_EQ(record.draftPagePath, firstDraft);
        EXPECT_EQ(record.recurrentSnapshotSlot, std::optional<int32_t>(0));
        EXPECT_EQ(record.partialKvSnapshotSlot, std::optional<int32_t>(0));  // also when E or E-1 is aligned
        EXPECT_EQ(record.exactCheckpointLength, std::optional<int32_t>(c.length));
        EXPECT_EQ(m.pools().freeCount(kBase), 16 - c.fullBlocks);
        EXPECT_EQ(m.pools().freeCount(kDraft), 16 - c.fullBlocks);
        EXPECT_EQ(m.draftIndex().entryCount(), 0u);  // never an EAGLE path
        EXPECT_NO_THROW(m.checkInvariants());

        AcquireResult warm = m.acquireHybridMtp({{c.length, digest(1, c.length)}}, a, 16);
        ASSERT_EQ(warm.status, AcquireStatus::kAcquired);
        EXPECT_EQ(warm.plan.kind, ReusePlanKind::kStandard);
        EXPECT_EQ(warm.plan.matchedTokenLength, c.length);
        EXPECT_EQ(warm.plan.reuseTokenLength, c.length);
        EXPECT_EQ(warm.plan.matchedBlockHashes, firstBlocks(a, c.fullBlocks));
        EXPECT_EQ(warm.plan.basePageBindings, firstPages);
        EXPECT_EQ(warm.plan.draftPageBindings, firstDraft);
        EXPECT_EQ(warm.plan.hybridRecord, p.result.record);
        EXPECT_FALSE(warm.plan.draftRecord);
        EXPECT_EQ(warm.plan.hybridCheckpoint, (std::optional<HybridCheckpointKey>({digest(1, c.length), c.length})));
        EXPECT_EQ(warm.plan.recurrentSnapshotBinding, std::optional<int32_t>(0));
        EXPECT_EQ(warm.plan.partialKvSnapshotBinding, std::optional<int32_t>(0));
        EXPECT_EQ(warm.plan.demand, (ResourceDemand{4 - c.fullBlocks, 4 - c.fullBlocks, 0, 0}));
        EXPECT_EQ(warm.lease->basePages().size(), 4u);
        EXPECT_EQ(warm.lease->draftPages().size(), 4u);
        EXPECT_EQ(
            std::vector<PageId>(warm.lease->draftPages().begin(), warm.lease->draftPages().begin() + c.fullBlocks),
            firstDraft);
        EXPECT_EQ(warm.lease->matchedBlockHashes(), firstBlocks(a, c.fullBlocks));
        EXPECT_EQ(warm.lease->recurrentSnapshotSlot(), std::optional<int32_t>(0));
        EXPECT_EQ(warm.lease->partialKvSnapshotSlot(), std::optional<int32_t>(0));
        EXPECT_EQ(m.pools().activeRefCount({kRecurrent, 0}), 1);
        EXPECT_EQ(m.pools().activeRefCount({kPartial, 0}), 1);
        EXPECT_NO_THROW(m.checkInvariants());
        m.releaseRestoredHybridSnapshots(*warm.lease);
        EXPECT_EQ(m.pools().activeRefCount({kPartial, 0}), 0);
        EXPECT_NO_THROW(m.checkInvariants());
    }
}

TEST(HybridMtpManager, ExactPagesOfAHitOneTokenPastAPageBoundary) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
    auto const a = chain(1, 4);
    AcquireResult cold = m.acquireHybridMtp({}, firstBlocks(a, 2), 9);
    EXPECT_EQ(cold.lease->basePages(), (std::vector<PageId>{0, 1, 2}));
    EXPECT_EQ(cold.lease->draftPages(), (std::vector<PageId>{0, 1, 2}));
    Published const p = publishMtp(m, *cold.lease, a, 9, digest(1, 9));
    EXPECT_EQ(p.result.canonicalBasePages, (std::vector<PageId>{0, 1}));
    cold.lease->release();
    EXPECT_EQ(m.records().get(*p.result.record).draftPagePath, (std::vector<PageId>{0, 1}));

    AcquireResult warm = m.acquireHybridMtp({{9, digest(1, 9)}}, a, 16);
    EXPECT_EQ(warm.lease->basePages(), (std::vector<PageId>{0, 1, 3, 4}));  // page 2 was freed last (FIFO)
    EXPECT_EQ(warm.lease->draftPages(), (std::vector<PageId>{0, 1, 3, 4}));
    EXPECT_EQ(m.pools().activeRefCount({kDraft, 0}), 1);
    EXPECT_EQ(m.pools().cacheRefCount({kDraft, 0}), 1);
    EXPECT_NO_THROW(m.checkInvariants());
}

// Token E belongs to the reuser (it produces the draft KV at E-1): a prompt of exactly E tokens cannot hit the
// checkpoint at E; one more token can.
TEST(HybridMtpManager, TheBoundaryTokenStaysPrivate) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
    auto const a = chain(1, 3);
    Published const p = coldCheckpoint(m, a, 8, digest(1, 8));
    std::vector<HybridCheckpointCandidate> const candidates{{8, digest(1, 8)}};

    AcquireResult same = m.acquireHybridMtp(candidates, firstBlocks(a, 2), 8);
    EXPECT_EQ(same.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(same.plan.reuseTokenLength, 0);
    EXPECT_FALSE(same.plan.hybridRecord);
    EXPECT_EQ(same.plan.demand, (ResourceDemand{2, 2, 0, 0}));
    same.lease->release();

    AcquireResult longer = m.acquireHybridMtp(candidates, firstBlocks(a, 2), 9);
    EXPECT_EQ(longer.plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(longer.plan.reuseTokenLength, 8);
    EXPECT_EQ(longer.plan.hybridRecord, p.result.record);
    EXPECT_EQ(longer.plan.basePageBindings.size(), 1u);  // a plain hybrid checkpoint at 8 would bind 2
    EXPECT_EQ(longer.plan.draftPageBindings.size(), 1u);
    EXPECT_EQ(longer.plan.demand, (ResourceDemand{2, 2, 0, 0}));
    longer.lease->release();
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, PlainHybridAndMtpCheckpointsNeverHitEachOther) {
    ContextCacheManager m(kPage, ResourceDemand{32, 16, 4, 4}, 8);
    auto const a = chain(1, 3);
    HybridCheckpointKey const key{digest(1, 10), 10};
    std::vector<HybridCheckpointCandidate> const candidates{{10, digest(1, 10)}};

    // A plain hybrid checkpoint at 10 under the digest an MTP checkpoint at 10 would have.
    AcquireResult plainLease = m.acquireHybrid({}, firstBlocks(a, 2), 10, true);
    std::optional<HybridSnapshotReservation> plainSlots = m.reserveHybridSnapshots(*plainLease.lease, true);
    PublishResult const plain = m.publishHybrid(*plainLease.lease, {firstBlocks(a, 2), key, *plainSlots});
    m.retireHybridSnapshotReservation(*plainLease.lease, *plainSlots);
    plainLease.lease->release();
    ASSERT_TRUE(plain.record);

    // ... does not hit an MTP plan (and is not touched by it).
    AcquireResult mtpMiss = m.acquireHybridMtp(candidates, a, 14);
    EXPECT_EQ(mtpMiss.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_FALSE(mtpMiss.plan.hybridRecord);
    EXPECT_EQ(mtpMiss.plan.demand, (ResourceDemand{4, 4, 0, 0}));
    EXPECT_EQ(makeHybridMtpReusePlan(candidates, a, 14, kPage, m.records()).kind, ReusePlanKind::kNoReusablePrefix);
    // An MTP checkpoint of the same key is a separate record (the plain one is not an existing record for it).
    Published const mtp = publishMtp(m, *mtpMiss.lease, a, 10, digest(1, 10));
    mtpMiss.lease->release();
    EXPECT_EQ(mtp.result.status, PublishStatus::kPublished);
    ASSERT_TRUE(mtp.result.record);
    EXPECT_NE(*mtp.result.record, *plain.record);
    EXPECT_EQ(m.records().size(), 2u);
    EXPECT_EQ(m.records().findHybrid(key), plain.record);
    EXPECT_EQ(m.records().findHybridMtp(key), mtp.result.record);
    EXPECT_EQ(m.hybridCandidateLengths(14, a), (std::vector<int32_t>{10}));
    EXPECT_NO_THROW(m.checkInvariants());

    // Each plan finds its own kind.
    AcquireResult plainHit = m.acquireHybrid(candidates, a, 14, true);
    EXPECT_EQ(plainHit.plan.hybridRecord, plain.record);
    EXPECT_EQ(plainHit.plan.basePageBindings.size(), 2u);
    EXPECT_TRUE(plainHit.plan.draftPageBindings.empty());
    plainHit.lease->release();
    AcquireResult mtpHit = m.acquireHybridMtp(candidates, a, 14);
    EXPECT_EQ(mtpHit.plan.hybridRecord, mtp.result.record);
    EXPECT_EQ(mtpHit.plan.basePageBindings.size(), 2u);
    EXPECT_EQ(mtpHit.plan.draftPageBindings.size(), 2u);
    mtpHit.lease->release();

    // With only the MTP checkpoint left, a plain hybrid plan misses.
    m.evictRecord(*plain.record);
    AcquireResult plainMiss = m.acquireHybrid(candidates, a, 14, true);
    EXPECT_EQ(plainMiss.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_FALSE(plainMiss.plan.hybridRecord);
    plainMiss.lease->release();
    EXPECT_NO_THROW(m.checkInvariants());
}

// Through the API a Hybrid+MTP publication always retains equally long paths; a store built by hand shows the
// planner's own checks: the exact full-block count floor((E-1)/P), and CacheRecord::validate refusing base-only,
// draft-only, partial-less or unmarked paired checkpoints.
TEST(HybridMtpManager, PlanningAndValidationRequireBothPathsOfTheBoundaryLength) {
    auto const a = chain(1, 3);
    auto mtpRecord = [&](int32_t length, int32_t blocks, std::vector<PageId> base, std::vector<PageId> draft,
                         std::optional<int32_t> partial) {
        CacheRecord r;
        r.key = {digest(1, length), blocks};
        r.logicalBlockHashes = firstBlocks(a, blocks);
        r.basePagePath = std::move(base);
        r.draftPagePath = std::move(draft);
        r.recurrentSnapshotSlot = length;
        r.partialKvSnapshotSlot = partial;
        r.exactCheckpointLength = length;
        r.hybridMtpCheckpoint = true;
        return r;
    };
    EXPECT_NO_THROW(mtpRecord(9, 2, {0, 1}, {0, 1}, 0).validate());
    EXPECT_NO_THROW(mtpRecord(1, 0, {}, {}, 0).validate());
    EXPECT_THROW(mtpRecord(9, 2, {0, 1}, {}, 0).validate(), ContractError);  // base only
    EXPECT_THROW(mtpRecord(9, 2, {}, {0, 1}, 0).validate(), ContractError);  // draft only
    EXPECT_THROW(mtpRecord(9, 2, {0, 1}, {0}, 0).validate(), ContractError);
    EXPECT_THROW(mtpRecord(9, 2, {0, 1}, {0, 1}, std::nullopt).validate(), ContractError);  // no partial slot
    EXPECT_THROW(mtpRecord(2, 2, {0, 1}, {0, 1}, 0).validate(), ContractError);  // blocks reach the boundary
    CacheRecord unmarked = mtpRecord(9, 2, {0, 1}, {0, 1}, 0);
    unmarked.hybridMtpCheckpoint = false;
    EXPECT_THROW(unmarked.validate(), ContractError);  // a plain hybrid checkpoint with a draft path
    CacheRecord notHybrid = mtpRecord(9, 2, {0, 1}, {0, 1}, 0);
    notHybrid.exactCheckpointLength.reset();
    EXPECT_THROW(notHybrid.validate(), ContractError);

    CacheRecordStore store(8);
    CacheRecordStore const& view = store;
    // At E = 8 a plain hybrid record would have 2 blocks; an MTP checkpoint has floor(7/4) = 1.
    store.insert(mtpRecord(8, 2, {0, 1}, {0, 1}, 0));
    RecordId const nine = store.insert(mtpRecord(9, 2, {2, 3}, {2, 3}, 1)).id;
    ReusePlan const wrongCount = makeHybridMtpReusePlan({{8, digest(1, 8)}}, a, 12, kPage, view);
    EXPECT_EQ(wrongCount.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(wrongCount.demand, (ResourceDemand{3, 3, 0, 0}));
    ReusePlan const hit = makeHybridMtpReusePlan({{8, digest(1, 8)}, {9, digest(1, 9)}}, a, 12, kPage, view);
    EXPECT_EQ(hit.hybridRecord, std::optional<RecordId>(nine));
    EXPECT_EQ(hit.basePageBindings, (std::vector<PageId>{2, 3}));
    EXPECT_EQ(hit.draftPageBindings, (std::vector<PageId>{2, 3}));
    EXPECT_EQ(hit.demand, (ResourceDemand{1, 1, 0, 0}));
    // The input's hashes must match the checkpoint's fb blocks.
    ReusePlan const otherTokens =
        makeHybridMtpReusePlan({{9, digest(1, 9)}}, extend(firstBlocks(a, 1), 7, 2), 12, kPage, view);
    EXPECT_EQ(otherTokens.kind, ReusePlanKind::kNoReusablePrefix);
    // Bypass and an empty input.
    EXPECT_EQ(makeHybridMtpReusePlan({{9, digest(1, 9)}}, a, 12, kPage, view, ContextCacheLookupPolicy::kBypass).demand,
              (ResourceDemand{3, 3, 0, 0}));
    ReusePlan const empty = makeHybridMtpReusePlan({{9, digest(1, 9)}}, {}, 0, kPage, view);
    EXPECT_EQ(empty.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(empty.demand, ResourceDemand{});
    // Lengths outside [1, n) are skipped, never an error.
    ReusePlan const skipped = makeHybridMtpReusePlan(
        {{0, digest(1, 0)}, {-2, digest(1, 2)}, {12, digest(1, 12)}, {9, digest(1, 9)}}, a, 12, kPage, view);
    EXPECT_EQ(skipped.hybridRecord, std::optional<RecordId>(nine));
    EXPECT_THROW(makeHybridMtpReusePlan({}, a, 11, kPage, view), ContractError);  // 3 hashes for 11 tokens
}

TEST(HybridMtpManager, MtpCheckpointIsNotAnEaglePath) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
    auto const a = chain(1, 3);
    coldCheckpoint(m, a, 9, digest(1, 9));
    EXPECT_EQ(m.draftIndex().entryCount(), 0u);
    // An EAGLE request over the same tokens finds the canonical base pages but no draft path: cold.
    AcquireResult spec = m.acquireSpec(a, 13);
    EXPECT_EQ(spec.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_FALSE(spec.plan.draftRecord);
    spec.lease->release();
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, CoverageRaisesBaseAndDraftDemandAlike) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
    auto const a = chain(1, 3);
    AcquireResult cold = m.acquireHybridMtp({}, firstBlocks(a, 1), 5, ContextCacheLookupPolicy::kUseCache, {4, 3});
    EXPECT_EQ(cold.plan.demand, (ResourceDemand{4, 3, 0, 0}));
    EXPECT_EQ(cold.lease->basePages().size(), 4u);
    EXPECT_EQ(cold.lease->draftPages().size(), 3u);
    Published const p = publishMtp(m, *cold.lease, a, 5, digest(1, 5));
    cold.lease->release();
    ASSERT_TRUE(p.result.record);

    // A hit binding 1 page in each pool: coverage counts the bound pages too.
    AcquireResult warm =
        m.acquireHybridMtp({{5, digest(1, 5)}}, a, 12, ContextCacheLookupPolicy::kUseCache, PageCoverage{5, 2});
    EXPECT_EQ(warm.plan.reuseTokenLength, 5);
    EXPECT_EQ(warm.plan.demand, (ResourceDemand{4, 2, 0, 0}));  // base 1 + 4 = 5; draft 1 + 2 = 3 >= 2
    EXPECT_EQ(warm.lease->basePages().size(), 5u);
    EXPECT_EQ(warm.lease->draftPages().size(), 3u);
    EXPECT_THROW(m.acquireHybridMtp({}, a, 12, ContextCacheLookupPolicy::kUseCache, PageCoverage{-1, 0}),
                 ContractError);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, MtpLeasesGrowBothPoolsAndOwnBothSnapshotSlots) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
    AcquireResult r = m.acquireHybridMtp({}, chain(1, 2), 10);
    auto before = describe(m);
    EXPECT_THROW(m.growBasePages(*r.lease, 1), ContractError);
    EXPECT_THROW(m.reserveHybridSnapshots(*r.lease, false), ContractError);  // every MTP checkpoint has a partial
    EXPECT_THROW(m.publish(*r.lease, {chain(1, 2), 10}), ContractError);
    std::optional<HybridSnapshotReservation> slots = m.reserveHybridSnapshots(*r.lease, true);
    ASSERT_TRUE(slots);
    before = describe(m);
    EXPECT_THROW(m.publishHybrid(*r.lease, {chain(1, 2), {digest(1, 10), 10}, *slots}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_TRUE(m.growSpecPages(*r.lease, 1, 2));
    EXPECT_EQ(r.lease->basePages().size(), 4u);
    EXPECT_EQ(r.lease->draftPages().size(), 5u);
    EXPECT_EQ(r.lease->reservedSnapshots().size(), 2u);
    m.retireHybridSnapshotReservation(*r.lease, *slots);
    EXPECT_TRUE(r.lease->reservedSnapshots().empty());
    EXPECT_TRUE(m.pools().isFree({kRecurrent, slots->recurrentSnapshotSlot}));
    EXPECT_TRUE(m.pools().isFree({kPartial, *slots->partialKvSnapshotSlot}));
    m.releaseRestoredHybridSnapshots(*r.lease);  // nothing restored: a no-op, not an error
    EXPECT_NO_THROW(m.checkInvariants());

    // The other lease kinds keep their own rules.
    AcquireResult spec = m.acquireSpec(chain(2, 2), 10);
    AcquireResult hybrid = m.acquireHybrid({}, chain(3, 2), 10, true);
    std::optional<HybridSnapshotReservation> hybridSlots = m.reserveHybridSnapshots(*hybrid.lease, true);
    before = describe(m);
    EXPECT_THROW(m.growSpecPages(*hybrid.lease, 1, 1), ContractError);
    EXPECT_THROW(m.publishHybridMtp(*hybrid.lease, {chain(3, 2), {digest(3, 10), 10}, *hybridSlots}), ContractError);
    EXPECT_THROW(m.publishHybridMtp(*spec.lease, {chain(2, 2), {digest(2, 10), 10}, *hybridSlots}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, PublicationValidationErrorsChangeNothing) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 6, 6}, 8);
    auto const a = chain(1, 3);
    coldCheckpoint(m, a, 6, digest(1, 6));  // fb = 1, so a hit binds block 0
    AcquireResult warm = m.acquireHybridMtp({{6, digest(1, 6)}}, a, 12);
    ASSERT_EQ(warm.plan.reuseTokenLength, 6);
    AcquireResult other = m.acquireHybridMtp({}, chain(2, 1), 5);
    std::optional<HybridSnapshotReservation> slots = m.reserveHybridSnapshots(*warm.lease, true);
    std::optional<HybridSnapshotReservation> otherSlots = m.reserveHybridSnapshots(*other.lease, true);
    ASSERT_TRUE(slots && otherSlots);
    auto const before = describe(m);
    HybridCheckpointKey const at9{digest(1, 9), 9};
    std::vector<BlockHash> const two = firstBlocks(a, 2);
    // exactLength must be >= 1.
    EXPECT_THROW(m.publishHybridMtp(*warm.lease, {{}, {digest(1, 0), 0}, *slots}), ContractError);
    // E = 8 has floor(7/4) = 1 full block, not 2 (the plain hybrid count).
    EXPECT_THROW(m.publishHybridMtp(*warm.lease, {two, {digest(1, 8), 8}, *slots}), ContractError);
    EXPECT_THROW(m.publishHybridMtp(*warm.lease, {firstBlocks(a, 1), at9, *slots}), ContractError);
    // Both slots, and both owned by this lease.
    EXPECT_THROW(m.publishHybridMtp(*warm.lease, {two, at9, {slots->recurrentSnapshotSlot, std::nullopt}}),
                 ContractError);
    EXPECT_THROW(m.publishHybridMtp(*warm.lease, {two, at9, *otherSlots}), ContractError);
    EXPECT_THROW(
        m.publishHybridMtp(*warm.lease, {two, at9, {slots->recurrentSnapshotSlot, otherSlots->partialKvSnapshotSlot}}),
        ContractError);
    // The hashes must still describe the restored prefix.
    std::vector<BlockHash> wrong = two;
    wrong[0] = blockHash(55, 0);
    EXPECT_THROW(m.publishHybridMtp(*warm.lease, {wrong, at9, *slots}), ContractError);
    // More full blocks than the lease holds pages: 3 blocks at E = 13, `other` holds 2 pages in each pool.
    EXPECT_THROW(m.publishHybridMtp(*other.lease, {chain(2, 3), {digest(2, 13), 13}, *otherSlots}), ContractError);
    EXPECT_EQ(describe(m), before);

    // A lease whose base pool grew past its draft pool cannot publish the longer base path.
    ASSERT_TRUE(m.growSpecPages(*other.lease, 1, 0));
    auto const grown = describe(m);
    EXPECT_EQ(other.lease->basePages().size(), 3u);
    EXPECT_EQ(other.lease->draftPages().size(), 2u);
    EXPECT_THROW(m.publishHybridMtp(*other.lease, {chain(2, 3), {digest(2, 13), 13}, *otherSlots}), ContractError);
    EXPECT_EQ(describe(m), grown);

    // And the valid publication still goes through afterwards.
    PublishResult const ok = m.publishHybridMtp(*warm.lease, {two, at9, *slots});
    EXPECT_EQ(ok.status, PublishStatus::kPublished);
    EXPECT_EQ(ok.publishedBaseFullBlockCount, 2);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, DuplicatePublicationTouchesTheExistingCheckpoint) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
    auto const a = chain(1, 3);
    Published const first = coldCheckpoint(m, a, 10, digest(1, 10));
    Published const second = coldCheckpoint(m, chain(2, 1), 5, digest(2, 5));
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*first.result.record, *second.result.record}));
    auto const firstRecord = describe(m.records().materialize(*first.result.record));

    AcquireResult again = m.acquireHybridMtp({}, a, 12, ContextCacheLookupPolicy::kBypass);
    std::vector<PageId> const producerDraft = again.lease->draftPages();
    Published const dup = publishMtp(m, *again.lease, a, 10, digest(1, 10));
    EXPECT_EQ(dup.result.status, PublishStatus::kExistingRecord);
    EXPECT_EQ(dup.result.record, first.result.record);
    EXPECT_EQ(dup.result.publishedBaseFullBlockCount, 2);
    EXPECT_EQ(dup.result.canonicalBasePages, m.records().get(*first.result.record).basePagePath);
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*second.result.record, *first.result.record}));
    EXPECT_EQ(describe(m.records().materialize(*first.result.record)), firstRecord);  // unchanged, only touched
    // The duplicate producer's slots and draft pages were never cached: retire and release free them.
    EXPECT_TRUE(m.pools().isFree({kRecurrent, dup.reservation.recurrentSnapshotSlot}));
    EXPECT_TRUE(m.pools().isFree({kPartial, *dup.reservation.partialKvSnapshotSlot}));
    again.lease->release();
    for (PageId page : producerDraft) EXPECT_TRUE(m.pools().isFree({kDraft, page}));
    EXPECT_EQ(m.records().size(), 2u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, RecordLimitEvictsTheLeastRecentCheckpointWithItsPairedState) {
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 2);
    Published const p1 = coldCheckpoint(m, chain(1, 3), 9, digest(1, 9));
    EXPECT_NO_THROW(m.checkInvariants());
    Published const p2 = coldCheckpoint(m, chain(2, 3), 9, digest(2, 9));
    EXPECT_NO_THROW(m.checkInvariants());
    CacheRecord const victim = m.records().materialize(*p1.result.record);
    EXPECT_EQ(m.pools().freeCount(kDraft), 12);
    Published const p3 = coldCheckpoint(m, chain(3, 3), 9, digest(3, 9));
    EXPECT_NO_THROW(m.checkInvariants());
    EXPECT_FALSE(m.records().contains(*p1.result.record));
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*p2.result.record, *p3.result.record}));
    for (PageId page : victim.basePagePath) EXPECT_TRUE(m.pools().isFree({kBase, page}));
    for (PageId page : victim.draftPagePath) EXPECT_TRUE(m.pools().isFree({kDraft, page}));
    EXPECT_TRUE(m.pools().isFree({kRecurrent, *victim.recurrentSnapshotSlot}));
    EXPECT_TRUE(m.pools().isFree({kPartial, *victim.partialKvSnapshotSlot}));
    EXPECT_EQ(m.pools().freeCount(kDraft), 12);
    EXPECT_EQ(m.pools().freeCount(kRecurrent), 2);
    EXPECT_EQ(m.pools().freeCount(kPartial), 2);
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 2u);
    EXPECT_EQ(m.metrics().reclaimedDraftKvPages, 2u);
    EXPECT_EQ(m.metrics().reclaimedRecurrentSnapshots, 1u);
    EXPECT_EQ(m.metrics().reclaimedPartialKvSnapshots, 1u);
    EXPECT_EQ(m.hybridCandidateLengths(13, chain(1, 3)), std::vector<int32_t>{});

    // maxRecords == 0 keeps nothing: the publication is evicted at once and its state freed.
    ContextCacheManager none(kPage, ResourceDemand{16, 16, 4, 4}, 0);
    Published const gone = coldCheckpoint(none, chain(1, 3), 9, digest(1, 9));
    EXPECT_EQ(gone.result.status, PublishStatus::kPublished);
    EXPECT_FALSE(gone.result.record);
    EXPECT_TRUE(test::poolsFull(none));
    EXPECT_NO_THROW(none.checkInvariants());
}

TEST(HybridMtpManager, CapacityEvictionReturnsDraftPagesAndBothSlots) {
    ContextCacheManager m(kPage, ResourceDemand{4, 4, 1, 1}, 8);
    Published const p = coldCheckpoint(m, chain(1, 3), 9, digest(1, 9));  // caches 2 + 2 pages and both slots
    EXPECT_EQ(m.pools().freeCount(kBase), 2);
    EXPECT_EQ(m.pools().freeCount(kDraft), 2);
    EXPECT_NO_THROW(m.checkInvariants());

    // A prompt of 4 pages in each pool needs the record's pages back.
    AcquireResult big = m.acquireHybridMtp({}, chain(2, 4), 16);
    ASSERT_EQ(big.status, AcquireStatus::kAcquired);
    EXPECT_FALSE(m.records().contains(*p.result.record));
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_EQ(m.metrics().reclaimedDraftKvPages, 2u);
    EXPECT_EQ(m.metrics().reclaimedRecurrentSnapshots, 1u);
    EXPECT_EQ(m.metrics().reclaimedPartialKvSnapshots, 1u);
    EXPECT_EQ(m.pools().freeCount(kRecurrent), 1);
    EXPECT_EQ(m.pools().freeCount(kPartial), 1);
    EXPECT_EQ(m.pools().freeCount(kDraft), 0);
    EXPECT_NO_THROW(m.checkInvariants());
    // Not enough for a second one while the first is live: capacity is an answer, and nothing changed.
    auto const before = describe(m);
    AcquireResult refused = m.acquireHybridMtp({}, chain(3, 1), 5);
    EXPECT_EQ(refused.status, AcquireStatus::kInsufficientCapacity);
    EXPECT_FALSE(refused.lease);
    EXPECT_EQ(describe(m), before);
    big.lease->release();
    EXPECT_TRUE(test::poolsFull(m));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, TheHitCheckpointIsProtectedFromEvictionAndTouched) {
    ContextCacheManager m(kPage, ResourceDemand{6, 6, 2, 2}, 8);
    Published const older = coldCheckpoint(m, chain(1, 3), 9, digest(1, 9));   // 2 + 2 pages cached
    Published const newer = coldCheckpoint(m, chain(2, 3), 9, digest(2, 9));   // 2 + 2 pages cached
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*older.result.record, *newer.result.record}));
    // Hitting the older (LRU) checkpoint with a prompt that needs 2 more private pages per pool than are free:
    // the newer record is evicted, not the hit.
    AcquireResult hit = m.acquireHybridMtp({{9, digest(1, 9)}}, chain(1, 4), 20);
    ASSERT_EQ(hit.status, AcquireStatus::kAcquired);
    EXPECT_EQ(hit.plan.hybridRecord, older.result.record);
    EXPECT_EQ(hit.plan.demand, (ResourceDemand{3, 3, 0, 0}));
    EXPECT_TRUE(m.records().contains(*older.result.record));
    EXPECT_FALSE(m.records().contains(*newer.result.record));
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*older.result.record}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridMtpManager, CandidateLengthsFindMtpCheckpointsByTheirOwnFullBlockCount) {
    ContextCacheManager m(kPage, ResourceDemand{32, 32, 8, 8}, 16);
    auto const a = chain(1, 4);
    coldCheckpoint(m, a, 1, digest(1, 1));    // fb 0: the chain root
    coldCheckpoint(m, a, 8, digest(1, 8));    // fb 1: hangs off block 0
    coldCheckpoint(m, a, 9, digest(1, 9));    // fb 2: hangs off block 1
    coldCheckpoint(m, a, 13, digest(1, 13));  // fb 3: hangs off block 2
    EXPECT_EQ(m.hybridCandidateLengths(16, a), (std::vector<int32_t>{13, 9, 8, 1}));
    EXPECT_EQ(m.hybridCandidateLengths(9, firstBlocks(a, 2)), (std::vector<int32_t>{8, 1}));
    // A prompt that shares only block 0 reaches the checkpoints hanging off the root and block 0.
    EXPECT_EQ(m.hybridCandidateLengths(16, extend(firstBlocks(a, 1), 5, 3)), (std::vector<int32_t>{8, 1}));
    // And every one of them hits when its digest is offered.
    AcquireResult hit = m.acquireHybridMtp({{13, digest(1, 13)}}, a, 16);
    EXPECT_EQ(hit.plan.reuseTokenLength, 13);
    EXPECT_EQ(hit.plan.basePageBindings.size(), 3u);
    hit.lease->release();
    EXPECT_NO_THROW(m.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
