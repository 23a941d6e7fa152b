// Hybrid (attention + recurrent) and pure-recurrent checkpoint reuse: exact-length keys, recurrent and partial-KV
// snapshot slots, producer reservations.
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
constexpr ResourceType kRecurrent = ResourceType::kRecurrentSnapshot;
constexpr ResourceType kPartial = ResourceType::kPartialKvSnapshot;

// Exact-prefix digests are computed by the caller; any distinct values work for the manager.
BlockHash digest(uint64_t lane, int32_t length) { return BlockHash{0xD16E57ull + lane, static_cast<uint64_t>(length)}; }

struct Published {
    PublishResult result;
    HybridSnapshotReservation reservation;
};

// The producer side of one hybrid request: reserve, (capture), publish the checkpoint at `length`, retire.
Published checkpoint(ContextCacheManager& m, CacheRequestLease& lease, std::vector<BlockHash> const& hashes,
                     int32_t length, BlockHash exactDigest) {
    bool const partial = lease.hybridHasAttention() && length % kPage != 0;
    std::optional<HybridSnapshotReservation> reservation = m.reserveHybridSnapshots(lease, partial);
    EXPECT_TRUE(reservation);
    std::vector<BlockHash> const full(hashes.begin(), hashes.begin() + length / kPage);
    PublishResult result = m.publishHybrid(lease, {full, {exactDigest, length}, *reservation});
    m.retireHybridSnapshotReservation(lease, *reservation);
    return {result, *reservation};
}

TEST(HybridManager, HybridCheckpointPublishesAndAcquiresAllStateAtomically) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    auto const a = chain(1, 2);
    AcquireResult cold = m.acquireHybrid({}, a, 10, true);
    ASSERT_EQ(cold.status, AcquireStatus::kAcquired);
    EXPECT_EQ(cold.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(cold.lease->basePages(), (std::vector<PageId>{0, 1, 2}));
    Published const p = checkpoint(m, *cold.lease, a, 10, digest(1, 10));
    EXPECT_EQ(p.result.status, PublishStatus::kPublished);
    EXPECT_EQ(p.result.canonicalBasePages, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(p.result.publishedBaseFullBlockCount, 2);
    EXPECT_EQ(p.reservation.recurrentSnapshotSlot, 0);
    EXPECT_EQ(p.reservation.partialKvSnapshotSlot, std::optional<int32_t>(0));
    cold.lease->release();
    CacheRecord const record = m.records().materialize(*p.result.record);
    EXPECT_EQ(record.key.terminalHash, digest(1, 10));
    EXPECT_EQ(record.key.fullBlockCount, 2);
    EXPECT_EQ(record.exactCheckpointLength, std::optional<int32_t>(10));
    EXPECT_EQ(m.pools().freeCount(kBase), 14);  // the partial tail page was private
    EXPECT_EQ(m.pools().cacheRefCount({kRecurrent, 0}), 1);
    EXPECT_EQ(m.pools().activeRefCount({kRecurrent, 0}), 0);
    EXPECT_EQ(m.hybridCandidateLengths(14), (std::vector<int32_t>{10}));
    EXPECT_TRUE(m.hybridCandidateLengths(10).empty());  // a checkpoint must leave a token to compute

    // A longer prompt with the same first 10 tokens: everything restores at once, mid-page.
    auto const b = extend(a, 2, 1);
    AcquireResult warm = m.acquireHybrid({{10, digest(1, 10)}}, b, 14, true);
    ASSERT_EQ(warm.status, AcquireStatus::kAcquired);
    EXPECT_EQ(warm.plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(warm.plan.matchedTokenLength, 10);
    EXPECT_EQ(warm.plan.reuseTokenLength, 10);
    EXPECT_EQ(warm.plan.hybridRecord, p.result.record);
    EXPECT_EQ(warm.plan.demand, (ResourceDemand{2, 0, 0, 0}));
    EXPECT_EQ(warm.lease->basePages(), (std::vector<PageId>{0, 1, 3, 4}));  // page 2 was freed last (FIFO)
    EXPECT_EQ(warm.lease->recurrentSnapshotSlot(), std::optional<int32_t>(0));
    EXPECT_EQ(warm.lease->partialKvSnapshotSlot(), std::optional<int32_t>(0));
    EXPECT_EQ(m.pools().activeRefCount({kRecurrent, 0}), 1);
    EXPECT_EQ(m.pools().activeRefCount({kPartial, 0}), 1);
    EXPECT_NO_THROW(m.checkInvariants());

    m.releaseRestoredHybridSnapshots(*warm.lease);
    EXPECT_FALSE(warm.lease->recurrentSnapshotSlot());
    EXPECT_EQ(m.pools().activeRefCount({kRecurrent, 0}), 0);
    m.releaseRestoredHybridSnapshots(*warm.lease);  // idempotent
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, PureRecurrentCheckpointNeedsNoBaseOrPartialPage) {
    ContextCacheManager m(kPage, ResourceDemand{0, 0, 2, 0}, 8);
    auto const a = chain(1, 2);
    AcquireResult cold = m.acquireHybrid({}, a, 10, false);
    ASSERT_EQ(cold.status, AcquireStatus::kAcquired);
    EXPECT_TRUE(cold.lease->basePages().empty());
    EXPECT_EQ(cold.plan.demand, ResourceDemand{});
    Published const p = checkpoint(m, *cold.lease, a, 10, digest(1, 10));
    EXPECT_FALSE(p.reservation.partialKvSnapshotSlot);
    EXPECT_TRUE(p.result.canonicalBasePages.empty());
    EXPECT_EQ(p.result.publishedBaseFullBlockCount, 0);
    cold.lease->release();
    CacheRecord const record = m.records().materialize(*p.result.record);
    EXPECT_TRUE(record.basePagePath.empty());
    EXPECT_EQ(record.logicalBlockHashes, a);

    AcquireResult warm = m.acquireHybrid({{10, digest(1, 10)}}, extend(a, 2, 1), 14, false);
    EXPECT_EQ(warm.plan.reuseTokenLength, 10);
    EXPECT_TRUE(warm.lease->basePages().empty());
    EXPECT_EQ(warm.lease->recurrentSnapshotSlot(), std::optional<int32_t>(0));
    EXPECT_FALSE(warm.lease->partialKvSnapshotSlot());
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, HybridPlanningRequiresOneCompleteExactCheckpoint) {
    CacheRecordStore store(8);
    auto const a = chain(1, 2);
    auto hybridRecord = [&](int32_t length, std::vector<PageId> base, std::optional<int32_t> partial,
                            std::vector<BlockHash> hashes) {
        CacheRecord r;
        r.key = {digest(1, length), static_cast<int32_t>(hashes.size())};
        r.logicalBlockHashes = std::move(hashes);
        r.basePagePath = std::move(base);
        r.recurrentSnapshotSlot = length;  // any distinct slot
        r.partialKvSnapshotSlot = partial;
        r.exactCheckpointLength = length;
        return store.insert(r).id;
    };
    hybridRecord(10, {0, 1}, std::nullopt, a);       // mid-page without its partial-KV snapshot: incomplete
    RecordId const eight = hybridRecord(8, {0, 1}, std::nullopt, a);  // page aligned: complete
    hybridRecord(6, {5}, 3, {blockHash(9, 0)});      // complete, but for other tokens
    std::vector<HybridCheckpointCandidate> const candidates{{6, digest(1, 6)}, {10, digest(1, 10)}, {8, digest(1, 8)}};

    ReusePlan const plan = makeHybridReusePlan(candidates, extend(a, 2, 1), 14, kPage, true, store);
    EXPECT_EQ(plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(plan.reuseTokenLength, 8);  // the longest COMPLETE checkpoint, not the longest
    EXPECT_EQ(plan.hybridRecord, std::optional<RecordId>(eight));
    EXPECT_EQ(plan.basePageBindings, (std::vector<PageId>{0, 1}));
    EXPECT_FALSE(plan.partialKvSnapshotBinding);
    EXPECT_EQ(plan.demand.baseKvPages, 2);

    // Without attention a checkpoint with base pages is not a pure-recurrent checkpoint: total miss.
    ReusePlan const noAttention = makeHybridReusePlan(candidates, extend(a, 2, 1), 14, kPage, false, store);
    EXPECT_EQ(noAttention.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(noAttention.demand, ResourceDemand{});
    // Bypass never looks.
    ReusePlan const bypass =
        makeHybridReusePlan(candidates, extend(a, 2, 1), 14, kPage, true, store, ContextCacheLookupPolicy::kBypass);
    EXPECT_EQ(bypass.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(bypass.demand.baseKvPages, 4);

    // A checkpoint as long as the input leaves no token to compute: skipped (c.6), even though its record is
    // complete and matches; the plan is cold, not an error.
    ReusePlan const exactInput = makeHybridReusePlan({{8, digest(1, 8)}}, a, 8, kPage, true, store);
    EXPECT_EQ(exactInput.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(exactInput.reuseTokenLength, 0);
    EXPECT_FALSE(exactInput.hybridRecord);
    EXPECT_EQ(exactInput.demand, (ResourceDemand{2, 0, 0, 0}));
    // ... and beside a shorter complete one it does not hide it.
    ReusePlan const shorter = makeHybridReusePlan(
        {{8, digest(1, 8)}, {10, digest(1, 10)}, {0, digest(1, 0)}, {-4, digest(1, 4)}, {9, digest(1, 9)}}, a, 9, kPage,
        true, store);
    EXPECT_EQ(shorter.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(shorter.reuseTokenLength, 8);
    EXPECT_EQ(shorter.hybridRecord, std::optional<RecordId>(eight));
}

TEST(HybridManager, HybridPublicationProjectsCanonicalOverlapAndRetainsDescendant) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    auto const a = chain(1, 2);
    AcquireResult first = m.acquireHybrid({}, a, 10, true);
    Published const parent = checkpoint(m, *first.lease, a, 10, digest(1, 10));
    first.lease->release();

    auto const b = extend(a, 2, 1);
    AcquireResult second = m.acquireHybrid({{10, digest(1, 10)}}, b, 14, true);
    m.releaseRestoredHybridSnapshots(*second.lease);
    Published const child = checkpoint(m, *second.lease, b, 14, digest(2, 14));
    // Blocks 0,1 project onto the parent's canonical pages; block 2 is the producer's own page.
    EXPECT_EQ(child.result.canonicalBasePages, (std::vector<PageId>{0, 1, 3}));
    EXPECT_EQ(child.reservation.recurrentSnapshotSlot, 1);
    second.lease->release();
    EXPECT_EQ(m.pools().cacheRefCount({kBase, 0}), 2);

    m.evictRecord(*parent.result.record);  // the descendant keeps the shared ancestors
    EXPECT_EQ(m.pools().cacheRefCount({kBase, 0}), 1);
    EXPECT_EQ(m.baseIndex().lookup(a[0]), std::optional<PageId>(0));
    EXPECT_TRUE(m.pools().isFree({kRecurrent, 0}));
    EXPECT_TRUE(m.pools().isFree({kPartial, 0}));
    EXPECT_EQ(m.metrics().reclaimedRecurrentSnapshots, 1u);
    EXPECT_EQ(m.metrics().reclaimedPartialKvSnapshots, 1u);
    EXPECT_EQ(m.metrics().reclaimedBaseKvPages, 0u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, ExistingCheckpointIsTouchedAndTheProducersSlotsAreFreedOnRetire) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    auto const a = chain(1, 2);
    AcquireResult first = m.acquireHybrid({}, a, 10, true);
    Published const p1 = checkpoint(m, *first.lease, a, 10, digest(1, 10));
    first.lease->release();
    AcquireResult other = m.acquireHybrid({}, chain(2, 1), 5, true);
    Published const p2 = checkpoint(m, *other.lease, chain(2, 1), 5, digest(2, 5));
    other.lease->release();
    ASSERT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*p1.result.record, *p2.result.record}));

    AcquireResult again = m.acquireHybrid({}, a, 10, true, ContextCacheLookupPolicy::kBypass);
    Published const dup = checkpoint(m, *again.lease, a, 10, digest(1, 10));
    EXPECT_EQ(dup.result.status, PublishStatus::kExistingRecord);
    EXPECT_EQ(dup.result.record, p1.result.record);
    EXPECT_EQ(m.records().lruToMru(), (std::vector<RecordId>{*p2.result.record, *p1.result.record}));
    // The duplicate producer's slots had no record: retiring freed them.
    EXPECT_TRUE(m.pools().isFree({kRecurrent, dup.reservation.recurrentSnapshotSlot}));
    EXPECT_TRUE(m.pools().isFree({kPartial, *dup.reservation.partialKvSnapshotSlot}));
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, SnapshotPressureReturnsNulloptAndEvictsOnlyWhenThatHelps) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 1, 1}, 8);
    auto const a = chain(1, 2);
    AcquireResult first = m.acquireHybrid({}, a, 10, true);
    Published const p = checkpoint(m, *first.lease, a, 10, digest(1, 10));
    first.lease->release();

    // The only snapshot slots belong to a record that a live hit pins: no reservation possible.
    AcquireResult hit = m.acquireHybrid({{10, digest(1, 10)}}, extend(a, 2, 1), 14, true);
    auto const before = describe(m);
    EXPECT_FALSE(m.reserveHybridSnapshots(*hit.lease, true));
    EXPECT_EQ(describe(m), before);
    // Once the restore is done the pins go, and reserving evicts the record to reuse its slots.
    m.releaseRestoredHybridSnapshots(*hit.lease);
    std::optional<HybridSnapshotReservation> r = m.reserveHybridSnapshots(*hit.lease, true);
    ASSERT_TRUE(r);
    EXPECT_FALSE(m.records().contains(*p.result.record));
    EXPECT_EQ(r->recurrentSnapshotSlot, 0);
    EXPECT_EQ(m.metrics().evictedRecords, 1u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, StandardPublicationRejectsHybridLease) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    AcquireResult r = m.acquireHybrid({}, chain(1, 2), 10, true);
    auto const before = describe(m);
    EXPECT_THROW(m.publish(*r.lease, {chain(1, 2), 10}), ContractError);
    EXPECT_THROW(m.growSpecPages(*r.lease, 1, 0), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_TRUE(m.growBasePages(*r.lease, 1));  // hybrid leases grow base pages
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, HybridOperationsRejectOtherLeaseKinds) {
    ContextCacheManager m(kPage, ResourceDemand{16, 4, 4, 4}, 8);
    AcquireResult vanilla = m.acquireVanilla(chain(1, 2), 10);
    AcquireResult spec = m.acquireSpec(chain(2, 2), 10);
    auto const before = describe(m);
    EXPECT_THROW(m.reserveHybridSnapshots(*vanilla.lease, false), ContractError);
    EXPECT_THROW(m.releaseRestoredHybridSnapshots(*spec.lease), ContractError);
    EXPECT_THROW(m.retireHybridSnapshotReservation(*vanilla.lease, {0, std::nullopt}), ContractError);
    EXPECT_THROW(m.publishHybrid(*vanilla.lease, {chain(1, 2), {digest(1, 10), 10}, {0, 0}}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, SnapshotsNotOwnedByTheLeaseAreRejected) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    AcquireResult owner = m.acquireHybrid({}, chain(1, 2), 10, true);
    AcquireResult thief = m.acquireHybrid({}, chain(2, 2), 10, true);
    std::optional<HybridSnapshotReservation> reservation = m.reserveHybridSnapshots(*owner.lease, true);
    ASSERT_TRUE(reservation);
    auto const before = describe(m);
    EXPECT_THROW(m.retireHybridSnapshotReservation(*thief.lease, *reservation), ContractError);
    EXPECT_THROW(m.publishHybrid(*thief.lease, {chain(2, 2), {digest(2, 10), 10}, *reservation}), ContractError);
    EXPECT_EQ(describe(m), before);
    // A reservation the lease owns only half of.
    std::optional<HybridSnapshotReservation> own = m.reserveHybridSnapshots(*thief.lease, true);
    auto const afterReserve = describe(m);
    EXPECT_THROW(m.retireHybridSnapshotReservation(*thief.lease,
                                                   {own->recurrentSnapshotSlot, reservation->partialKvSnapshotSlot}),
                 ContractError);
    EXPECT_EQ(describe(m), afterReserve);
    m.retireHybridSnapshotReservation(*thief.lease, *own);
    EXPECT_THROW(m.retireHybridSnapshotReservation(*thief.lease, *own), ContractError);  // already retired
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, PartialSnapshotRulesFollowAttentionAndAlignment) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    AcquireResult noAttention = m.acquireHybrid({}, chain(1, 2), 10, false);
    AcquireResult attention = m.acquireHybrid({}, chain(2, 2), 10, true);
    auto before = describe(m);
    EXPECT_THROW(m.reserveHybridSnapshots(*noAttention.lease, true), ContractError);  // partial without attention
    EXPECT_EQ(describe(m), before);

    std::optional<HybridSnapshotReservation> recurrentOnly = m.reserveHybridSnapshots(*noAttention.lease, false);
    std::optional<HybridSnapshotReservation> both = m.reserveHybridSnapshots(*attention.lease, true);
    std::optional<HybridSnapshotReservation> aligned = m.reserveHybridSnapshots(*attention.lease, false);
    before = describe(m);
    // Mid-page on an attention model needs the partial slot ...
    EXPECT_THROW(m.publishHybrid(*attention.lease, {chain(2, 2), {digest(2, 10), 10}, *aligned}), ContractError);
    // ... a page-aligned checkpoint takes none ...
    EXPECT_THROW(m.publishHybrid(*attention.lease, {chain(2, 2), {digest(2, 8), 8}, *both}), ContractError);
    // ... and a lease without attention never does.
    EXPECT_THROW(
        m.publishHybrid(
            *noAttention.lease,
            {chain(1, 2), {digest(1, 10), 10}, {recurrentOnly->recurrentSnapshotSlot, both->partialKvSnapshotSlot}}),
        ContractError);
    // Hash counts must be exactly floor(length / page), the length positive.
    EXPECT_THROW(m.publishHybrid(*attention.lease, {chain(2, 1), {digest(2, 10), 10}, *both}), ContractError);
    EXPECT_THROW(m.publishHybrid(*attention.lease, {{}, {digest(2, 0), 0}, *aligned}), ContractError);
    // Hashes must still describe the acquired prefix (here: a hit that bound two blocks).
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

// c.6: a candidate of length <= 0 or >= n is skipped, never a ContractError, so a bad candidate cannot throw away
// a valid shorter hit; under bypass no candidate is looked at, nothing is reused and nothing throws.
TEST(HybridManager, OutOfRangeCandidatesAreSkippedBesideAValidShorterHit) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    auto const a = chain(1, 2);
    auto const b = extend(a, 2, 1);  // 14 tokens: a's 10, then 4 more
    AcquireResult first = m.acquireHybrid({}, a, 10, true);
    Published const ten = checkpoint(m, *first.lease, a, 10, digest(1, 10));
    first.lease->release();
    AcquireResult second = m.acquireHybrid({}, b, 14, true);
    Published const whole = checkpoint(m, *second.lease, b, 14, digest(1, 14));  // a record as long as the input
    second.lease->release();
    ASSERT_TRUE(ten.result.record && whole.result.record);
    std::vector<HybridCheckpointCandidate> const candidates{
        {14, digest(1, 14)}, {0, digest(1, 0)}, {-3, digest(1, 3)}, {15, digest(1, 15)}, {10, digest(1, 10)}};

    AcquireResult hit = m.acquireHybrid(candidates, b, 14, true);
    ASSERT_EQ(hit.status, AcquireStatus::kAcquired);
    EXPECT_EQ(hit.plan.kind, ReusePlanKind::kStandard);
    EXPECT_EQ(hit.plan.reuseTokenLength, 10);
    EXPECT_EQ(hit.plan.hybridRecord, ten.result.record);
    EXPECT_EQ(m.records().lruToMru().back(), *ten.result.record);  // the hit, not the skipped record, is touched
    hit.lease->release();

    // Only bad candidates: a cold plan, not an error.
    AcquireResult cold = m.acquireHybrid({{0, digest(1, 0)}, {14, digest(1, 14)}}, b, 14, true);
    ASSERT_EQ(cold.status, AcquireStatus::kAcquired);
    EXPECT_EQ(cold.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(cold.plan.reuseTokenLength, 0);
    EXPECT_FALSE(cold.plan.hybridRecord);
    cold.lease->release();

    // Bypass: nothing reused, nothing thrown, no record touched.
    auto const lru = m.records().lruToMru();
    AcquireResult bypass = m.acquireHybrid(candidates, b, 14, true, ContextCacheLookupPolicy::kBypass);
    ASSERT_EQ(bypass.status, AcquireStatus::kAcquired);
    EXPECT_EQ(bypass.plan.kind, ReusePlanKind::kNoReusablePrefix);
    EXPECT_EQ(bypass.plan.reuseTokenLength, 0);
    EXPECT_FALSE(bypass.plan.hybridRecord);
    EXPECT_EQ(bypass.plan.demand, (ResourceDemand{4, 0, 0, 0}));
    EXPECT_FALSE(bypass.lease->recurrentSnapshotSlot());
    EXPECT_EQ(m.records().lruToMru(), lru);
    bypass.lease->release();

    EXPECT_THROW(m.hybridCandidateLengths(-1), ContractError);  // a negative input length is still a contract error
    EXPECT_EQ(m.liveLeaseCount(), 0u);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(HybridManager, HybridPublicationMustExtendTheRestoredPrefix) {
    ContextCacheManager m(kPage, ResourceDemand{16, 0, 4, 4}, 8);
    auto const a = chain(1, 2);
    AcquireResult first = m.acquireHybrid({}, a, 10, true);
    checkpoint(m, *first.lease, a, 10, digest(1, 10));
    first.lease->release();
    AcquireResult warm = m.acquireHybrid({{10, digest(1, 10)}}, extend(a, 2, 1), 14, true);
    std::optional<HybridSnapshotReservation> r = m.reserveHybridSnapshots(*warm.lease, true);
    auto const before = describe(m);
    auto wrong = extend(a, 2, 1);
    wrong[1] = blockHash(55, 1);
    EXPECT_THROW(m.publishHybrid(*warm.lease, {wrong, {digest(3, 14), 14}, *r}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_NO_THROW(m.checkInvariants());
}

}  // namespace
}  // namespace ctxcache

namespace ctxcache {
namespace {

TEST(HybridManager, CandidateLengthsForAPromptFollowItsOwnBlockChain) {
    ContextCacheManager m(kPage, ResourceDemand{32, 0, 8, 8}, 16);
    auto publish = [&](std::vector<BlockHash> const& hashes, int32_t length, uint64_t lane) {
        std::vector<BlockHash> const prompt(hashes.begin(), hashes.begin() + length / kPage);
        AcquireResult r = m.acquireHybrid({}, prompt, length, true, ContextCacheLookupPolicy::kBypass);
        checkpoint(m, *r.lease, hashes, length, digest(lane, length));
    };
    auto const a = chain(1, 4);
    auto const b = chain(2, 4);
    publish(a, 6, 1);   // 1 full block of a, then 2 tokens
    publish(a, 9, 1);   // 2 full blocks of a
    publish(a, 12, 1);  // 3 full blocks of a, page aligned
    publish(b, 10, 2);  // 2 full blocks of b
    publish(b, 3, 2);   // no full block: anchored at the chain root
    EXPECT_EQ(m.hybridCandidateLengths(13), (std::vector<int32_t>{12, 10, 9, 6, 3}));
    // A prompt following a for 4 blocks: only a's checkpoints and the rootless one hang off its chain.
    EXPECT_EQ(m.hybridCandidateLengths(16, a), (std::vector<int32_t>{12, 9, 6, 3}));
    EXPECT_EQ(m.hybridCandidateLengths(12, a), (std::vector<int32_t>{9, 6, 3}));  // below n only
    EXPECT_EQ(m.hybridCandidateLengths(16, extend(chain(1, 2), 3, 2)), (std::vector<int32_t>{9, 6, 3}));
    EXPECT_EQ(m.hybridCandidateLengths(16, b), (std::vector<int32_t>{10, 3}));
    EXPECT_EQ(m.hybridCandidateLengths(16, std::vector<BlockHash>{}), (std::vector<int32_t>{3}));
    // Eviction removes a checkpoint from both views.
    m.evictRecord(m.records().lruToMru().front());
    EXPECT_EQ(m.hybridCandidateLengths(16, a), (std::vector<int32_t>{12, 9, 3}));
    EXPECT_THROW(m.hybridCandidateLengths(-1, a), ContractError);
    EXPECT_NO_THROW(m.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
