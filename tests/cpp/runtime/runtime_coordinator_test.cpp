// ContextCacheCoordinator and ContextCacheRequest on the CPU backend: admission, rows, lengths, publication
// points and policies, joiners, compaction, quarantine. Page size 4 so that every case reads at a glance; the
// byte-exact end-to-end proofs live with the reference engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <numeric>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/errors.h"
#include "ctxcache/runtime/context_cache_coordinator.h"
#include "ctxcache/runtime/context_cache_request.h"
#include "ctxcache/runtime/managed_kv_cache_request.h"
#include "support/device_test_support.h"

namespace ctxcache::runtime {
namespace {

using device::BackendKind;
using device::DType;
using device::KvLengths;
using device::KvPagePool;
using device::KvPageTable;
using device::KvPoolGeometry;
using device::ResidentState;
using device::ResidentStateGeometry;
using device::SnapshotBudgets;
using device::SnapshotStorage;
using Status = ContextCacheCoordinatorStatus;
using Handle = ContextCacheCoordinator::RequestHandle;

constexpr int32_t P = 4;

std::vector<int32_t> iota(int32_t n, int32_t start = 100) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), start);
    return v;
}

// A deployment rig: backend, pools, tables, lengths (and state/snapshots for checkpoint kinds), one coordinator.
struct Rig {
    explicit Rig(ContextCacheModelStateKind kind = ContextCacheModelStateKind::kAttentionOnly, bool eagle = false,
                 int32_t pages = 16, int32_t maxRecords = 64, int32_t maxPagesPerSeq = 8, int32_t snapshotSlots = 4) {
        backend = device::createCpuBackend();
        profile.baseStateKind = kind;
        if (eagle) profile.specReuseContract = SpecReuseContract{true, 1};
        ContextCachePhysicalResources r;
        if (kind != ContextCacheModelStateKind::kPureRecurrent) {
            base = std::make_unique<KvPagePool>(*backend, KvPoolGeometry{pages, P, DType::kFp32, {{1, 2}}});
            baseTable = std::make_unique<KvPageTable>(*backend, 4, maxPagesPerSeq, pages);
            baseLengths = std::make_unique<KvLengths>(*backend, 4);
            r.basePool = base.get();
            r.basePageTable = baseTable.get();
            r.baseLengths = baseLengths.get();
        }
        if (eagle) {
            draft = std::make_unique<KvPagePool>(*backend, KvPoolGeometry{pages, P, DType::kFp32, {{1, 2}}});
            draftTable = std::make_unique<KvPageTable>(*backend, 4, maxPagesPerSeq, pages);
            draftLengths = std::make_unique<KvLengths>(*backend, 4);
            r.draftPool = draft.get();
            r.draftPageTable = draftTable.get();
            r.draftLengths = draftLengths.get();
        }
        if (kind != ContextCacheModelStateKind::kAttentionOnly) {
            ResidentStateGeometry g;
            g.maxBatch = 4;
            g.numLayers = 1;
            g.recurrentHeads = 1;
            g.recurrentHeadDim = 2;
            g.stateSize = 2;
            g.recurrentDtype = DType::kFp32;
            g.convDim = 2;
            g.convKernel = 2;
            g.convDtype = DType::kFp32;
            state = std::make_unique<ResidentState>(*backend, g);
            SnapshotBudgets budgets;
            budgets.recurrentBytes =
                static_cast<size_t>(snapshotSlots) * SnapshotStorage::recurrentBytesPerSlot(g, false);
            if (base)
                budgets.partialKvBytes = static_cast<size_t>(snapshotSlots) *
                                         SnapshotStorage::partialKvBytesPerSlot(&base->geometry(), nullptr);
            snapshots = std::make_unique<SnapshotStorage>(*backend, state.get(), base.get(), nullptr, budgets);
            r.residentState = state.get();
            r.snapshots = snapshots.get();
        }
        ContextCacheConfig config;
        config.maxRecords = maxRecords;
        config.maxBatch = 4;
        config.pageSize = kind == ContextCacheModelStateKind::kPureRecurrent ? P : 0;
        coordinator = std::make_unique<ContextCacheCoordinator>(config, profile, r, [this](StreamHandle) {
            ++syncs;
            return !failSync;
        });
    }

    // The admission views its tokens: the rig keeps every prompt alive (a deque never moves its elements).
    ContextCacheSequenceAdmission seq(std::vector<int32_t> tokens, int32_t slot) {
        prompts_.push_back(std::move(tokens));
        ContextCacheSequenceAdmission a;
        a.tokenIds = prompts_.back();
        a.resident = ResidentRef{slot, ++epoch};
        return a;
    }
    std::deque<std::vector<int32_t>> prompts_;

    // Begin one batch; expects kOk.
    Handle begin(std::vector<std::vector<int32_t>> prompts, bool speculative = false,
                 ContextCacheCommitPolicy commit = ContextCacheCommitPolicy::kIncludingGeneratedTokens,
                 ContextCacheLookupPolicy lookup = ContextCacheLookupPolicy::kUseCache) {
        ContextCacheBatchAdmission a;
        for (size_t i = 0; i < prompts.size(); ++i) a.sequences.push_back(seq(prompts[i], static_cast<int32_t>(i)));
        a.speculativeRequest = speculative;
        a.commitPolicy = commit;
        a.lookupPolicy = lookup;
        auto r = coordinator->beginRequest(a, DecodingKvHeadroom{1, speculative ? 1 : 0});
        EXPECT_EQ(r.status, Status::kOk) << r.failure;
        return std::move(*r.request);
    }

    // Prefill the whole batch: prepare, (captures), finalize with a lookahead token per row.
    void prefill(Handle& h, int32_t lookahead = 7) {
        ASSERT_EQ(coordinator->preparePrefill(h), Status::kOk);
        ASSERT_EQ(coordinator->enqueuePrefillCaptures(h), Status::kOk);
        std::vector<ContextCacheSequenceAdvance> adv(static_cast<size_t>(h.batchSize()));
        std::vector<int32_t> common;
        for (int32_t i = 0; i < h.batchSize(); ++i) {
            adv[static_cast<size_t>(i)] = {&lookahead, 1, h.sequence(i).inputLength};
            common.push_back(h.sequence(i).inputLength);
        }
        ASSERT_EQ(coordinator->finalizePrefillPublication(h, adv, h.speculative() ? &common : nullptr), Status::kOk);
    }

    // One decode step accepting token `t` on every row; rows in `finished` are publishable.
    Status step(Handle& h, int32_t const& t, std::vector<int32_t> finished = {}) {
        Status s = coordinator->prepareDecodeStep(h, DecodingKvHeadroom{1, h.speculative() ? 1 : 0});
        if (s != Status::kOk) return s;
        std::vector<ContextCacheSequenceAdvance> adv;
        std::vector<int32_t> common;
        for (int32_t i = 0; i < h.batchSize(); ++i) {
            int32_t const c = h.sequence(i).committedLength + 1;
            adv.push_back({&t, 1, c});
            common.push_back(c);
        }
        return coordinator->completeDecodeStep(h, adv, finished, h.speculative() ? &common : nullptr);
    }

    std::vector<int32_t> row(int32_t slot, int32_t count) const {
        int32_t const* r = baseTable->hostRow(slot);
        return std::vector<int32_t>(r, r + count);
    }
    int32_t freeBase() const { return coordinator->metrics().baseKvPages.free; }

    std::unique_ptr<device::DeviceBackend> backend;
    ContextCacheDeploymentProfile profile;
    std::unique_ptr<KvPagePool> base, draft;
    std::unique_ptr<KvPageTable> baseTable, draftTable;
    std::unique_ptr<KvLengths> baseLengths, draftLengths;
    std::unique_ptr<ResidentState> state;
    std::unique_ptr<SnapshotStorage> snapshots;
    std::unique_ptr<ContextCacheCoordinator> coordinator;
    uint64_t epoch = 0;
    int syncs = 0;
    bool failSync = false;
};

// An admission views the caller's tokens; the coordinator copies them once, at beginRequest, into the sequence's
// own history. So the caller may overwrite and free its buffer right after beginRequest: the publication is of
// the prompt as it was admitted, and a later request with that prompt hits all of it.
TEST(ContextCacheCoordinator, AdmissionTokensAreCopiedOnceAtBegin) {
    Rig rig;
    std::vector<int32_t> const prompt = iota(10);
    auto buffer = std::make_unique<std::vector<int32_t>>(prompt);
    ContextCacheBatchAdmission a;
    ContextCacheSequenceAdmission s;
    s.tokenIds = *buffer;
    s.resident = ResidentRef{0, ++rig.epoch};
    a.sequences.push_back(s);
    auto r = rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 0});
    ASSERT_EQ(r.status, Status::kOk) << r.failure;
    Handle h = std::move(*r.request);
    std::fill(buffer->begin(), buffer->end(), 4242);  // the caller reuses its buffer...
    buffer.reset();                                    // ...and frees it
    rig.prefill(h);
    EXPECT_EQ(h.sequence(0).publishedFullBlockCount, 2);
    EXPECT_EQ(rig.coordinator->finish(h), Status::kOk);

    Handle again = rig.begin({prompt});
    EXPECT_EQ(again.prefillStarts(), std::vector<int32_t>{8});  // both full blocks of the admitted prompt
    EXPECT_EQ(rig.coordinator->finish(again), Status::kOk);
    Handle clobbered = rig.begin({std::vector<int32_t>(10, 4242)});
    EXPECT_EQ(clobbered.prefillStarts(), std::vector<int32_t>{0});  // the overwritten tokens were never published
    EXPECT_EQ(rig.coordinator->finish(clobbered), Status::kOk);
    rig.coordinator->checkInvariants();
}

// A coordinator's reset: refused while a request is active (nothing changed); afterwards an earlier prompt is
// served cold.
TEST(ContextCacheCoordinator, ClearIsRefusedWhileARequestIsActiveAndThenForgetsEverything) {
    Rig rig;
    std::vector<int32_t> const prompt = iota(10);
    Handle first = rig.begin({prompt});
    rig.prefill(first);
    EXPECT_EQ(rig.coordinator->finish(first), Status::kOk);
    Handle active = rig.begin({prompt});
    EXPECT_EQ(active.prefillStarts(), std::vector<int32_t>{8});
    size_t const records = rig.coordinator->manager().records().size();
    EXPECT_THROW(rig.coordinator->clear(), ContractError);
    EXPECT_EQ(rig.coordinator->manager().records().size(), records);
    EXPECT_EQ(rig.coordinator->finish(active), Status::kOk);
    rig.coordinator->clear();
    EXPECT_EQ(rig.coordinator->manager().records().size(), 0u);
    EXPECT_EQ(rig.coordinator->manager().baseIndex().size(), 0u);
    Handle cold = rig.begin({prompt});
    EXPECT_EQ(cold.prefillStarts(), std::vector<int32_t>{0});
    EXPECT_EQ(rig.coordinator->finish(cold), Status::kOk);
    rig.coordinator->checkInvariants();
}

// A null token array with a length is a broken contract, refused before anything changes.
TEST(ContextCacheCoordinator, AdmissionWithNullTokensIsRefused) {
    Rig rig;
    ContextCacheBatchAdmission a;
    ContextCacheSequenceAdmission s;
    s.tokenIds = TokenSpan(nullptr, 4);
    s.resident = ResidentRef{0, ++rig.epoch};
    a.sequences.push_back(s);
    int32_t const freeBefore = rig.freeBase();
    EXPECT_THROW(rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 0}), ContractError);
    EXPECT_EQ(rig.freeBase(), freeBefore);
    EXPECT_EQ(rig.coordinator->metrics().admittedSequences, 0u);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, PublishesColdPrefixAndReusesLongestFullBlock) {
    Rig rig;
    std::vector<int32_t> a = iota(10);
    Handle h = rig.begin({a});
    EXPECT_EQ(h.prefillStarts(), std::vector<int32_t>{0});
    rig.prefill(h);
    // Rows bound to the resident slot with exactly the lease's pages; device length reset to the reuse length.
    ContextCacheSequenceInfo info = h.sequence(0);
    EXPECT_EQ(info.basePages.size(), 3u);  // ceil((10 + 1) / 4)
    EXPECT_EQ(rig.row(0, 3), info.basePages);
    EXPECT_EQ(rig.baseTable->hostRow(0)[3], -1);
    EXPECT_EQ(rig.baseLengths->read(), std::vector<int32_t>{0});
    EXPECT_EQ(info.publishedFullBlockCount, 2);
    EXPECT_EQ(rig.coordinator->finish(h), Status::kOk);
    rig.coordinator->checkInvariants();

    std::vector<int32_t> b(a.begin(), a.begin() + 9);
    b.push_back(999);
    Handle h2 = rig.begin({b});
    EXPECT_EQ(h2.prefillStarts(), std::vector<int32_t>{8});
    EXPECT_EQ(h2.sequence(0).basePages[0], info.basePages[0]);
    EXPECT_EQ(h2.sequence(0).basePages[1], info.basePages[1]);
    ASSERT_EQ(rig.coordinator->preparePrefill(h2), Status::kOk);
    EXPECT_EQ(rig.baseLengths->read(), std::vector<int32_t>{8});
    ContextCacheMetrics m = rig.coordinator->metrics();
    EXPECT_EQ(m.admittedSequences, 2u);
    EXPECT_EQ(m.hitSequences, 1u);
    EXPECT_EQ(m.reusedTokens, 8u);
    EXPECT_EQ(m.standardPlans, 1u);
    EXPECT_EQ(m.noReusablePrefixPlans, 1u);
    EXPECT_EQ(m.committedPublications, 1u);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, ExactFullInputHitReportsMatchButRewindsExecution) {
    Rig rig;
    Handle h = rig.begin({iota(8)});
    rig.prefill(h);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    Handle h2 = rig.begin({iota(8)});
    ContextCacheSequenceInfo info = h2.sequence(0);
    EXPECT_EQ(info.matchedLength, 8);
    EXPECT_EQ(info.reuseLength, 4);
    EXPECT_EQ(info.planKind, ReusePlanKind::kFullInputRewind);
    EXPECT_EQ(rig.coordinator->metrics().fullInputRewindPlans, 1u);
}

TEST(ContextCacheCoordinator, BypassUsesManagedPagesWithoutPublishing) {
    Rig rig;
    Handle h = rig.begin({iota(9)}, false, ContextCacheCommitPolicy::kIncludingGeneratedTokens,
                         ContextCacheLookupPolicy::kBypass);
    rig.prefill(h);
    EXPECT_TRUE(h.sequence(0).bypass);
    EXPECT_EQ(rig.coordinator->metrics().publicationAttempts, 0u);
    EXPECT_EQ(rig.coordinator->metrics().lookupBypassSequences, 1u);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    EXPECT_EQ(rig.coordinator->metrics().currentRecords, 0u);
    EXPECT_EQ(rig.freeBase(), 16);
}

TEST(ContextCacheCoordinator, DecodeEndPublishesGeneratedTokensOfFinishedRowsOnly) {
    Rig rig;
    Handle h = rig.begin({iota(6), iota(6, 500)});
    rig.prefill(h, 7);
    int32_t t = 8;
    ASSERT_EQ(rig.step(h, t), Status::kOk);                         // committed 7
    t = 9;
    ASSERT_EQ(rig.step(h, t, {0}), Status::kOk);                    // committed 8, row 0 finished
    ContextCacheSequenceInfo r0 = h.sequence(0), r1 = h.sequence(1);
    EXPECT_EQ(r0.committedLength, 8);
    EXPECT_EQ(r0.publishedFullBlockCount, 2);  // decode end: 8 tokens = 2 blocks
    EXPECT_EQ(r1.publishedFullBlockCount, 1);  // prefill end only
    // A finished row may only hold afterwards.
    std::vector<ContextCacheSequenceAdvance> adv{{&t, 1, 9}, {&t, 1, 9}};
    ASSERT_EQ(rig.coordinator->prepareDecodeStep(h, {1, 0}), Status::kOk);
    EXPECT_THROW(rig.coordinator->completeDecodeStep(h, adv, {}), ContractError);
    std::vector<ContextCacheSequenceAdvance> hold{{nullptr, 0, ContextCacheSequenceAdvance::kHoldCommittedStateLength},
                                                  {&t, 1, 9}};
    EXPECT_THROW(rig.coordinator->completeDecodeStep(h, hold, {0}), ContractError);  // published already
    // Row 1 finishes one step after its last token (it holds): it still publishes at its committed length.
    ASSERT_EQ(rig.coordinator->completeDecodeStep(h, hold, {}), Status::kOk);
    ASSERT_EQ(rig.coordinator->prepareDecodeStep(h, {1, 0}), Status::kOk);
    std::vector<ContextCacheSequenceAdvance> both{{nullptr, 0, ContextCacheSequenceAdvance::kHoldCommittedStateLength},
                                                  {nullptr, 0, ContextCacheSequenceAdvance::kHoldCommittedStateLength}};
    ASSERT_EQ(rig.coordinator->completeDecodeStep(h, both, {1}), Status::kOk);
    EXPECT_EQ(h.sequence(1).publishedFullBlockCount, 2);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    // Turn 2 of row 0's conversation reuses its generated tokens.
    std::vector<int32_t> turn2 = iota(6);
    turn2.insert(turn2.end(), {7, 8, 9, 42});
    Handle h2 = rig.begin({turn2});
    EXPECT_EQ(h2.prefillStarts(), std::vector<int32_t>{8});
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, PrefillOnlyPolicyDoesNotAttemptDecodePublication) {
    Rig rig;
    Handle h = rig.begin({iota(6)}, false, ContextCacheCommitPolicy::kPrefillStateOnly);
    rig.prefill(h);
    uint64_t const attempts = rig.coordinator->metrics().publicationAttempts;
    int32_t t = 1;
    ASSERT_EQ(rig.step(h, t), Status::kOk);
    ASSERT_EQ(rig.step(h, t, {0}), Status::kOk);
    EXPECT_EQ(rig.coordinator->metrics().publicationAttempts, attempts);
    EXPECT_EQ(h.sequence(0).publishedFullBlockCount, 1);
}

TEST(ContextCacheCoordinator, CancelledRowsHoldAndAreNotPublishable) {
    Rig rig;
    Handle h = rig.begin({iota(6), iota(6, 300)});
    rig.prefill(h);
    int32_t t = 3;
    ASSERT_EQ(rig.coordinator->prepareDecodeStep(h, {1, 0}), Status::kOk);
    std::vector<ContextCacheSequenceAdvance> adv{{&t, 1, 7},
                                                 {nullptr, 0, ContextCacheSequenceAdvance::kHoldCommittedStateLength}};
    EXPECT_THROW(rig.coordinator->completeDecodeStep(h, adv, {1, 1}), ContractError);  // listed twice
    ASSERT_EQ(rig.coordinator->completeDecodeStep(h, adv, {}), Status::kOk);  // the caller lists no cancelled row
    EXPECT_EQ(h.sequence(1).committedLength, 6);
    EXPECT_EQ(h.sequence(0).committedLength, 7);
}

TEST(ContextCacheCoordinator, RejectsMalformedBatchProgressBeforeMutation) {
    Rig rig;
    Handle h = rig.begin({iota(6), iota(6, 300)});
    int32_t t = 5;
    ASSERT_EQ(rig.coordinator->preparePrefill(h), Status::kOk);
    ASSERT_EQ(rig.coordinator->enqueuePrefillCaptures(h), Status::kOk);
    // Wrong committed length on row 1: nothing of row 0 is applied either.
    std::vector<ContextCacheSequenceAdvance> bad{{&t, 1, 6}, {&t, 1, 5}};
    EXPECT_THROW(rig.coordinator->finalizePrefillPublication(h, bad), ContractError);
    EXPECT_EQ(h.sequence(0).tokenCount, 6);
    EXPECT_EQ(rig.coordinator->metrics().publicationAttempts, 0u);
    std::vector<ContextCacheSequenceAdvance> twoTokens{{&t, 2, 6}, {&t, 1, 6}};
    EXPECT_THROW(rig.coordinator->finalizePrefillPublication(h, twoTokens), ContractError);
    std::vector<ContextCacheSequenceAdvance> good{{&t, 1, 6}, {&t, 1, 6}};
    ASSERT_EQ(rig.coordinator->finalizePrefillPublication(h, good), Status::kOk);
    // Decode: skipping a committed position, or a step before prepare, or out of order.
    ASSERT_EQ(rig.coordinator->prepareDecodeStep(h, {1, 0}), Status::kOk);
    std::vector<ContextCacheSequenceAdvance> skip{{&t, 1, 8}, {&t, 1, 7}};
    EXPECT_THROW(rig.coordinator->completeDecodeStep(h, skip, {}), ContractError);
    EXPECT_THROW(rig.coordinator->preparePrefill(h), ContractError);
    EXPECT_EQ(h.sequence(0).committedLength, 6);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, AdmissionValidatesResidentRefsBeforeHoldingAnything) {
    Rig rig;
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(iota(5), 0));
    a.sequences.push_back(rig.seq(iota(5), 0));
    EXPECT_THROW(rig.coordinator->beginRequest(a, {1, 0}), ContractError);  // duplicate slot
    a.sequences[1].resident = {9, 99};
    EXPECT_THROW(rig.coordinator->beginRequest(a, {1, 0}), ContractError);  // slot out of range
    a.sequences[1].resident = {1, 0};
    EXPECT_THROW(rig.coordinator->beginRequest(a, {1, 0}), ContractError);  // epoch 0
    a.sequences.pop_back();
    Handle h = std::move(*rig.coordinator->beginRequest(a, {1, 0}).request);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    EXPECT_THROW(rig.coordinator->beginRequest(a, {1, 0}), ContractError);  // stale epoch: slot 0 was given it
    EXPECT_EQ(rig.freeBase(), 16);
    EXPECT_EQ(rig.coordinator->activeRequestCount(), 0);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, OversizedAdmissionDoesNotLeaveRequestTokenHeld) {
    Rig rig;  // 8 pages per sequence = 32 tokens
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(iota(32), 0));  // 32 + 1 headroom needs 9 pages
    auto r = rig.coordinator->beginRequest(a, {1, 0});
    EXPECT_EQ(r.status, Status::kRequestFailed);
    EXPECT_FALSE(r.request.has_value());
    EXPECT_NE(r.failure.find("page table"), std::string::npos);
    EXPECT_EQ(rig.coordinator->activeRequestCount(), 0);
    EXPECT_EQ(rig.freeBase(), 16);
    Handle h = rig.begin({iota(31)});
    EXPECT_TRUE(h.valid());
}

TEST(ContextCacheCoordinator, HitThatNeedsItsOwnRecordEvictedStillReuses) {
    // EAGLE, 4 pages per pool. A publishes a 2-block pair record; B's spec hit pins the first page pair and
    // needs 3 private pages: only 2 are free, so the hit record itself is evicted (its unpinned page comes
    // back) and the hit still stands. A pinned page is not reclaimable, but the hit needs one page fewer: the
    // margin equals a cold plan's, which is why the forced-cold retry is a safety net that rarely fires here.
    Rig rig(ContextCacheModelStateKind::kAttentionOnly, true, /*pages=*/4);
    Handle h = rig.begin({iota(9)}, true);
    rig.prefill(h);
    int32_t t = 1;
    ASSERT_EQ(rig.step(h, t), Status::kOk);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    ASSERT_EQ(rig.coordinator->metrics().currentRecords, 1u);
    Handle h2 = rig.begin({iota(15)}, true);
    ContextCacheSequenceInfo info = h2.sequence(0);
    EXPECT_FALSE(info.forcedCold);
    EXPECT_EQ(info.reuseLength, 4);
    EXPECT_EQ(info.basePages.size(), 4u);
    ContextCacheMetrics m = rig.coordinator->metrics();
    EXPECT_EQ(m.forcedColdSequences, 0u);
    EXPECT_EQ(m.evictedRecords, 1u);
    EXPECT_EQ(m.currentRecords, 0u);
    EXPECT_EQ(m.baseKvPages.free, 0);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, CompactionClearsRetiredRowsAndKeepsSurvivorsBound) {
    Rig rig;
    Handle h = rig.begin({iota(5), iota(5, 200), iota(5, 300)});
    rig.prefill(h);
    std::vector<int32_t> survivorPages = h.sequence(2).basePages;
    int32_t t = 1;
    ASSERT_EQ(rig.step(h, t), Status::kOk);
    TensorView none;
    EXPECT_THROW(rig.coordinator->beginBatchCompaction(h, {1, 0, -1}, 2, none), ContractError);  // reorders
    EXPECT_THROW(rig.coordinator->beginBatchCompaction(h, {0, -1, 0}, 2, none), ContractError);  // not dense
    std::vector<int32_t> mapping(3, 77);
    TensorView dev{mapping.data(), ScalarType::kInt32, {3}, -1};
    ASSERT_EQ(rig.coordinator->beginBatchCompaction(h, {0, -1, 1}, 2, dev), Status::kOk);
    EXPECT_EQ(mapping, (std::vector<int32_t>{0, -1, 1}));
    // No step and no joiner while the compaction is pending.
    EXPECT_THROW(rig.coordinator->prepareDecodeStep(h, {1, 0}), ContractError);
    ASSERT_EQ(rig.coordinator->compactBatch(h), Status::kOk);
    EXPECT_EQ(h.batchSize(), 2);
    EXPECT_EQ(h.sequence(1).resident.slot, 2);  // rows stay bound to resident slots
    EXPECT_EQ(rig.row(2, static_cast<int32_t>(survivorPages.size())), survivorPages);
    EXPECT_EQ(rig.baseTable->hostRow(1)[0], -1);
    EXPECT_EQ(rig.baseLengths->activeBatch(), 2);
    rig.coordinator->checkInvariants();
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, FailedDrainQuarantinesOwnershipUntilShutdownSucceeds) {
    Rig rig;
    Handle h = rig.begin({iota(6)});
    rig.prefill(h);
    int32_t const freeWhileLive = rig.freeBase();
    rig.failSync = true;
    EXPECT_EQ(rig.coordinator->finish(h), Status::kPoisoned);
    EXPECT_TRUE(rig.coordinator->poisoned());
    EXPECT_EQ(rig.coordinator->quarantinedRequestCount(), 1u);
    EXPECT_EQ(rig.freeBase(), freeWhileLive);  // nothing freed while the device may still use it
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(iota(3), 1));
    EXPECT_EQ(rig.coordinator->beginRequest(a, {1, 0}).status, Status::kPoisoned);
    EXPECT_EQ(rig.coordinator->shutdown(), Status::kPoisoned);  // still failing
    rig.failSync = false;
    EXPECT_EQ(rig.coordinator->shutdown(), Status::kOk);
    EXPECT_FALSE(rig.coordinator->poisoned());
    EXPECT_EQ(rig.coordinator->quarantinedRequestCount(), 0u);
    EXPECT_EQ(rig.freeBase(), 16 - 1);  // only the published record's page stays
    rig.coordinator->checkInvariants();
    EXPECT_EQ(rig.coordinator->beginRequest(a, {1, 0}).status, Status::kOk);
}

// A handle quarantined in place (its compaction's synchronisation failed) still names the coordinator; after
// shutdown the coordinator serves another request, then is destroyed first. Both handles are detached: neither
// reaches the destroyed coordinator (valid() false, destruction touches nothing; ASan checks).
TEST(ContextCacheCoordinator, EveryHandleNamingTheCoordinatorIsDetachedWhenItGoes) {
    Rig rig;
    Handle quarantined = rig.begin({iota(5), iota(5, 200)});
    rig.prefill(quarantined);
    TensorView none;
    ASSERT_EQ(rig.coordinator->beginBatchCompaction(quarantined, {0, -1}, 1, none), Status::kOk);
    rig.failSync = true;
    ASSERT_EQ(rig.coordinator->compactBatch(quarantined), Status::kPoisoned);
    rig.failSync = false;
    EXPECT_FALSE(quarantined.valid());
    ASSERT_EQ(rig.coordinator->shutdown(), Status::kOk);
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(iota(6, 300), 2));
    auto r = rig.coordinator->beginRequest(a, {1, 0});
    ASSERT_EQ(r.status, Status::kOk) << r.failure;
    Handle live = std::move(*r.request);
    EXPECT_TRUE(live.valid());
    Handle moved = std::move(quarantined);  // the state moves with the handle
    rig.coordinator.reset();
    EXPECT_FALSE(live.valid());
    EXPECT_FALSE(moved.valid());
    EXPECT_EQ(moved.batchSize(), 0);
}

TEST(ContextCacheCoordinator, AbandonedRequestSynchronisesAndReleases) {
    Rig rig;
    {
        Handle h = rig.begin({iota(6)});
        ASSERT_EQ(rig.coordinator->preparePrefill(h), Status::kOk);
    }
    EXPECT_EQ(rig.syncs, 1);
    EXPECT_EQ(rig.coordinator->activeRequestCount(), 0);
    EXPECT_EQ(rig.freeBase(), 16);
    EXPECT_EQ(rig.coordinator->metrics().publicationAttempts, 0u);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, JoinerIsAdmittedSeatedAndPublishedOrRetracted) {
    Rig rig;
    Handle h = rig.begin({iota(9)});
    rig.prefill(h);
    ASSERT_TRUE(rig.coordinator->supportsLiveSequenceAdmission());
    // A joiner sharing the first two blocks.
    std::vector<int32_t> j = iota(9);
    j[8] = 5;
    auto r = rig.coordinator->admitSequence(h, rig.seq(j, 2), {1, 0});
    ASSERT_EQ(r.status, ContextCacheCoordinator::AdmitSequenceStatus::kAdmitted) << r.failure;
    EXPECT_EQ(r.prefillStart, 8);
    EXPECT_EQ(rig.baseLengths->read(), (std::vector<int32_t>{0, 8}));
    EXPECT_THROW(rig.coordinator->admitSequence(h, rig.seq(iota(3), 3), {1, 0}), ContractError);  // one pending
    EXPECT_THROW(rig.coordinator->prepareDecodeStep(h, {1, 0}), ContractError);  // not seated yet
    int32_t t = 11;
    EXPECT_THROW(rig.coordinator->finalizeSequenceAdmission(h, 0, {&t, 1, 9}), ContractError);  // wrong row
    ASSERT_EQ(rig.coordinator->finalizeSequenceAdmission(h, 1, {&t, 1, 9}), Status::kOk);
    EXPECT_EQ(h.batchSize(), 2);
    EXPECT_EQ(h.prefillStarts(), (std::vector<int32_t>{0, 8}));
    // A second joiner retracted before it is seated: row cleared, lease released.
    int32_t const freeBefore = rig.freeBase();
    auto r2 = rig.coordinator->admitSequence(h, rig.seq(iota(5, 600), 3), {1, 0});
    ASSERT_EQ(r2.status, ContextCacheCoordinator::AdmitSequenceStatus::kAdmitted);
    EXPECT_TRUE(rig.coordinator->retractSequenceAdmission(h));
    EXPECT_FALSE(rig.coordinator->retractSequenceAdmission(h));
    EXPECT_EQ(rig.freeBase(), freeBefore);
    EXPECT_EQ(rig.baseTable->hostRow(3)[0], -1);
    EXPECT_EQ(rig.baseLengths->activeBatch(), 2);
    rig.coordinator->checkInvariants();
    // No admission while a compaction is pending.
    TensorView none;
    ASSERT_EQ(rig.coordinator->beginBatchCompaction(h, {0, 1}, 2, none), Status::kOk);
    EXPECT_THROW(rig.coordinator->admitSequence(h, rig.seq(iota(3), 3), {1, 0}), ContractError);
}

TEST(ContextCacheCoordinator, JoinerUnderPoolPressureGetsNoCapacity) {
    Rig rig(ContextCacheModelStateKind::kAttentionOnly, false, /*pages=*/4);
    Handle h = rig.begin({iota(10)});  // 3 pages
    rig.prefill(h);
    auto r = rig.coordinator->admitSequence(h, rig.seq(iota(10, 700), 1), {1, 0});
    EXPECT_EQ(r.status, ContextCacheCoordinator::AdmitSequenceStatus::kNoCapacity);
    EXPECT_EQ(h.batchSize(), 1);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, HybridPrefillCheckpointRestoresRecurrentAndPartialKv) {
    Rig rig(ContextCacheModelStateKind::kHybrid);
    Handle h = rig.begin({iota(6)});
    ASSERT_EQ(rig.coordinator->preparePrefill(h), Status::kOk);
    // The "engine" leaves a recognisable recurrent row and partial page before the capture.
    size_t const rowBytes = rig.state->rowBytes(device::StatePart::kRecurrent);
    test::Bytes recurrent = test::pattern(rowBytes, 3);
    rig.state->writeRow(device::StatePart::kRecurrent, 0, 0, recurrent.data(), recurrent.size());
    int32_t const partialPage = h.sequence(0).basePages[1];
    test::Bytes kv = test::pattern(rig.base->pageBytes(0), 9);
    rig.base->writePages(0, partialPage, 1, kv.data(), kv.size());
    ASSERT_EQ(rig.coordinator->enqueuePrefillCaptures(h), Status::kOk);
    int32_t t = 1;
    ASSERT_EQ(rig.coordinator->finalizePrefillPublication(h, {{&t, 1, 6}}), Status::kOk);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    EXPECT_EQ(rig.coordinator->metrics().committedPublications, 1u);

    std::vector<int32_t> b = iota(6);
    b.push_back(55);
    b.push_back(56);
    Handle h2 = rig.begin({b});
    EXPECT_EQ(h2.prefillStarts(), std::vector<int32_t>{6});  // mid-page
    ASSERT_EQ(rig.coordinator->preparePrefill(h2), Status::kOk);
    EXPECT_EQ(rig.coordinator->metrics().hybridRestores, 1u);
    test::Bytes restored(rowBytes);
    rig.state->readRow(device::StatePart::kRecurrent, 0, 0, restored.data(), restored.size());
    EXPECT_EQ(restored, recurrent);
    // The first private page holds the 2 valid tokens of the snapshot (K half).
    int32_t const firstPrivate = h2.sequence(0).basePages[1];
    EXPECT_NE(firstPrivate, partialPage);
    test::Bytes page(rig.base->pageBytes(0));
    rig.base->readPages(0, firstPrivate, 1, page.data(), page.size());
    size_t const valid = 2 * rig.base->tokenBytes(0);
    EXPECT_EQ(test::Bytes(page.begin(), page.begin() + static_cast<long>(valid)),
              test::Bytes(kv.begin(), kv.begin() + static_cast<long>(valid)));
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, PureRecurrentCheckpointNeedsNoKvPage) {
    Rig rig(ContextCacheModelStateKind::kPureRecurrent);
    Handle h = rig.begin({iota(5)});
    rig.prefill(h);
    int32_t t = 2;
    ASSERT_EQ(rig.step(h, t, {0}), Status::kOk);  // decode-end capture at 6: one extra sync
    EXPECT_EQ(rig.coordinator->metrics().hybridCaptureSynchronizations, 1u);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    std::vector<int32_t> b = iota(5);
    b.insert(b.end(), {7, 2, 40});
    Handle h2 = rig.begin({b});
    EXPECT_EQ(h2.prefillStarts(), std::vector<int32_t>{6});
    EXPECT_TRUE(h2.sequence(0).basePages.empty());
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, SnapshotPressureSkipsCaptureAndCountsIt) {
    Rig rig(ContextCacheModelStateKind::kHybrid, false, 16, 64, 8, /*snapshotSlots=*/1);
    Handle h = rig.begin({iota(6), iota(6, 300)});
    rig.prefill(h);
    ContextCacheMetrics m = rig.coordinator->metrics();
    EXPECT_EQ(m.hybridSnapshotPressureSkips, 1u);
    EXPECT_EQ(m.committedPublications, 1u);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, EagleFrozenPrefillEndpointPublishesAfterFirstRound) {
    Rig rig(ContextCacheModelStateKind::kAttentionOnly, true);
    Handle h = rig.begin({iota(9)}, true);
    rig.prefill(h);
    EXPECT_EQ(rig.coordinator->metrics().publicationAttempts, 0u);  // frozen
    TensorView none;
    int32_t t = 1;
    ASSERT_EQ(rig.step(h, t), Status::kOk);
    EXPECT_EQ(rig.coordinator->metrics().specPairPublications, 1u);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    // The next speculative request replays the boundary page: reuse 1 block of the 2 paired.
    Handle h2 = rig.begin({iota(10)}, true);
    EXPECT_EQ(h2.prefillStarts(), std::vector<int32_t>{4});
    EXPECT_EQ(rig.coordinator->metrics().specFullPageReplays, 1u);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, EagleCompactionTerminalizesFrozenEndpoint) {
    Rig rig(ContextCacheModelStateKind::kAttentionOnly, true);
    Handle h = rig.begin({iota(9)}, true);
    rig.prefill(h);
    TensorView none;
    ASSERT_EQ(rig.coordinator->beginBatchCompaction(h, {-1}, 0, none), Status::kOk);
    EXPECT_EQ(rig.coordinator->metrics().specPairPublications, 1u);
    ASSERT_EQ(rig.coordinator->compactBatch(h), Status::kOk);
    EXPECT_EQ(rig.coordinator->finish(h), Status::kOk);
    rig.coordinator->checkInvariants();
}

TEST(ContextCacheCoordinator, ProfileTheResourcesCannotServeIsRefused) {
    auto backend = device::createCpuBackend();
    KvPagePool pool(*backend, KvPoolGeometry{8, P, DType::kFp32, {{1, 2}}});
    KvPageTable table(*backend, 4, 4, 8);
    KvLengths lengths(*backend, 4);
    ContextCacheConfig config;
    ContextCacheDeploymentProfile profile;
    ContextCachePhysicalResources r{&pool, &table, &lengths};
    config.maxBatch = 8;  // beyond the table's 4 rows
    EXPECT_THROW(ContextCacheCoordinator(config, profile, r), ContractError);
    config.maxBatch = 4;
    profile.specReuseContract = SpecReuseContract{true, 1};  // EAGLE without a draft pool
    EXPECT_THROW(ContextCacheCoordinator(config, profile, r), ContractError);
    profile.specReuseContract.reset();
    profile.baseStateKind = ContextCacheModelStateKind::kHybrid;  // no snapshots
    EXPECT_THROW(ContextCacheCoordinator(config, profile, r), ContractError);
    profile.baseStateKind = ContextCacheModelStateKind::kAttentionOnly;
    KvPageTable wrong(*backend, 4, 4, 9);
    r.basePageTable = &wrong;
    EXPECT_THROW(ContextCacheCoordinator(config, profile, r), ContractError);
}

TEST(ContextCacheRequest, ColdPublishThenWarmLookupPreservesLoraIdentity) {
    Rig rig;
    auto serve = [&](std::string lora, int32_t slot) {
        GenerationRequest req;
        req.sequences.push_back({iota(9), lora, {}, std::nullopt});
        DecodingInferenceContext ctx;
        ctx.activeBatchSize = 1;
        ctx.residentRefs = {ResidentRef{slot, ++rig.epoch}};
        auto r = ContextCacheRequest::begin(*rig.coordinator, req, ctx, false, {1, 0});
        EXPECT_TRUE(r.has_value());
        int32_t const start = r->reuseTokenLength(0);
        EXPECT_TRUE(r->preparePrefill());
        EXPECT_TRUE(r->enqueuePrefillCaptures());
        std::vector<int32_t> history = iota(9);
        history.push_back(1);
        ctx.tokenIds = {history};
        ctx.rawInputLengths = {9};
        ctx.generatedLengths = {1};
        ctx.status = {SequenceStatus::kRunning};
        EXPECT_TRUE(r->completePrefill(ctx, {}));
        EXPECT_TRUE(r->finish());
        return start;
    };
    EXPECT_EQ(serve("adapter-a", 0), 0);
    EXPECT_EQ(serve("adapter-b", 1), 0);  // same tokens, another adapter: no reuse
    EXPECT_EQ(serve("adapter-a", 2), 8);
    EXPECT_EQ(serve("", 3), 0);
}

TEST(ContextCacheRequest, MediaBytesAreIdentityAndBoundaryIsNotSplit) {
    Rig rig;
    auto serve = [&](std::vector<uint8_t> pixels, int32_t slot) {
        GenerationRequest req;
        SequenceRequest s;
        s.tokenIds = iota(13);
        for (int32_t p = 5; p < 11; ++p) s.tokenIds[static_cast<size_t>(p)] = -5;  // placeholders 5..10
        s.media.push_back(MediaItem{pixels, 5, 6, 0});
        req.sequences.push_back(s);
        DecodingInferenceContext ctx;
        ctx.activeBatchSize = 1;
        ctx.residentRefs = {ResidentRef{slot, ++rig.epoch}};
        auto r = ContextCacheRequest::begin(*rig.coordinator, req, ctx, false, {1, 0}, {-5});
        EXPECT_TRUE(r.has_value());
        int32_t const start = r->reuseTokenLength(0);
        EXPECT_TRUE(r->preparePrefill());
        EXPECT_TRUE(r->enqueuePrefillCaptures());
        std::vector<int32_t> history = s.tokenIds;
        history.push_back(1);
        ctx.tokenIds = {history};
        ctx.rawInputLengths = {13};
        ctx.generatedLengths = {1};
        ctx.status = {SequenceStatus::kRunning};
        EXPECT_TRUE(r->completePrefill(ctx, {}));
        EXPECT_TRUE(r->finish());
        return start;
    };
    EXPECT_EQ(serve({1, 2, 3}, 0), 0);
    EXPECT_EQ(serve({1, 2, 4}, 1), 4);  // other pixels: only the text block before the image is shared
    // Same pixels: 3 blocks match, but a boundary at 12 would not split... 12 is past the image (ends at 11):
    // the whole image is reused.
    EXPECT_EQ(serve({1, 2, 3}, 2), 12);
    EXPECT_EQ(rig.coordinator->metrics().mediaAwareSequences, 3u);
    // A span over a non-placeholder token is refused.
    GenerationRequest bad;
    bad.sequences.push_back({iota(8), "", {MediaItem{{1}, 0, 2, 0}}, std::nullopt});
    DecodingInferenceContext ctx;
    ctx.activeBatchSize = 1;
    ctx.residentRefs = {ResidentRef{3, ++rig.epoch}};
    EXPECT_THROW(ContextCacheRequest::begin(*rig.coordinator, bad, ctx, false, {1, 0}, {-5}), ContractError);
}

TEST(ContextCacheCoordinator, MediaBoundaryTrimmingRecomputesASplitItem) {
    Rig rig;
    // Prompt A: image over 6..9 then text; published 3 blocks (12 tokens).
    auto prompt = [](int32_t tail) {
        std::vector<int32_t> t = iota(14);
        t[13] = tail;
        return t;
    };
    std::vector<Hash128> media(14, Hash128{});
    for (int p = 6; p < 10; ++p) media[static_cast<size_t>(p)] = Hash128{1, 2};
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(prompt(1), 0));
    a.sequences[0].perPositionMediaHash = media;
    Handle h = std::move(*rig.coordinator->beginRequest(a, {1, 0}).request);
    rig.prefill(h);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    // Prompt B shares blocks 0..1 only (8 tokens): the boundary at 8 splits the image 6..9 -> trimmed to 4.
    ContextCacheBatchAdmission b;
    std::vector<int32_t> tb = prompt(1);
    tb[9] = 12345;
    b.sequences.push_back(rig.seq(tb, 1));
    b.sequences[0].perPositionMediaHash = media;
    b.sequences[0].perPositionMediaHash[9] = Hash128{3, 4};
    auto r = rig.coordinator->beginRequest(b, {1, 0});
    ASSERT_EQ(r.status, Status::kOk);
    EXPECT_EQ(r.prefillStarts, std::vector<int32_t>{4});
    EXPECT_EQ(rig.coordinator->metrics().mediaBoundaryTrims, 1u);
    rig.coordinator->checkInvariants();
}

TEST(ManagedKVCacheRequest, SelectsExactlyOneBackend) {
    Rig rig;
    GenerationRequest req;
    req.sequences.push_back({iota(5), "", {}, std::nullopt});
    DecodingInferenceContext ctx;
    ctx.activeBatchSize = 1;
    ctx.residentRefs = {ResidentRef{0, 1}};
    EXPECT_THROW(ManagedKVCacheRequest::begin(nullptr, nullptr, req, ctx, false, {1, 0},
                                              DecodingTokenStateContract::kCommittedPlusLookahead,
                                              ContextCacheCommitPolicy::kIncludingGeneratedTokens),
                 ContractError);
    auto m = ManagedKVCacheRequest::begin(rig.coordinator.get(), nullptr, req, ctx, false, {1, 0},
                                          DecodingTokenStateContract::kCommittedPlusLookahead,
                                          ContextCacheCommitPolicy::kIncludingGeneratedTokens);
    ASSERT_TRUE(m.has_value());
    EXPECT_TRUE(m->hasContextReuse());
    EXPECT_EQ(*m->prefillStarts(), std::vector<int32_t>{0});
    EXPECT_TRUE(m->prepareSwaPrefill({5}));  // a no-op on the context backend
    TensorView hidden;
    EXPECT_THROW(m->publishHybridMtpEndpoint(0, 5, hidden, 0), ContractError);  // not a Hybrid+MTP deployment
    EXPECT_THROW(m->reuseTokenLength(3), ContractError);
    EXPECT_TRUE(m->finish());
}

}  // namespace
}  // namespace ctxcache::runtime

namespace ctxcache::runtime {
namespace {

TEST(ContextCacheCoordinator, StepsRunOnTheRequestsStream) {
    Rig rig;
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(iota(6), 0));
    void* const stream = reinterpret_cast<void*>(0x5EA1);
    auto r = rig.coordinator->beginRequest(a, {1, 0}, stream);
    ASSERT_EQ(r.status, Status::kOk);
    EXPECT_EQ(rig.backend->stream(), nullptr);
    ASSERT_EQ(rig.coordinator->preparePrefill(*r.request), Status::kOk);
    EXPECT_EQ(rig.backend->stream(), stream);
    rig.backend->setStream(nullptr);  // someone else moved the backend: the next step moves it back
    ASSERT_EQ(rig.coordinator->enqueuePrefillCaptures(*r.request), Status::kOk);
    EXPECT_EQ(rig.backend->stream(), stream);
    ASSERT_EQ(rig.coordinator->finish(*r.request), Status::kOk);
}

// ---- retention (issue 29): a sequence's spec travels with every publication of it -------------------------------

namespace {

RetentionSpec keepPrefix(int32_t tokens, int32_t priority, int64_t durationNs = kNoRetentionDuration) {
    RetentionSpec spec;
    spec.ranges.push_back({0, tokens, priority, durationNs});
    return spec;
}

// Every record's block ranges, sorted (the store's order is the manager's business).
std::vector<RetentionBlockRanges> allRetention(ContextCacheManager const& m) {
    std::vector<RetentionBlockRanges> out;
    for (RecordId id : m.records().lruToMru()) out.push_back(m.recordRetention(id));
    std::sort(out.begin(), out.end(), [](RetentionBlockRanges const& a, RetentionBlockRanges const& b) {
        if (a.size() != b.size()) return a.size() < b.size();
        return !a.empty() && a.front().endBlock < b.front().endBlock;
    });
    return out;
}

// Serves `prompt` (with `spec`, or the default) through prefill and finish; returns its prefill start.
int32_t serveOnce(Rig& rig, std::vector<int32_t> prompt, RetentionSpec const* spec) {
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(std::move(prompt), 0));
    a.sequences[0].retention = spec;
    auto r = rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 0});
    EXPECT_EQ(r.status, Status::kOk) << r.failure;
    if (r.status != Status::kOk) return -1;
    Handle h = std::move(*r.request);
    int32_t const start = h.prefillStarts()[0];
    rig.prefill(h);
    EXPECT_EQ(rig.coordinator->finish(h), Status::kOk);
    return start;
}

}  // namespace

// Prefill end publishes the prompt's blocks with the sequence's ranges; decode end publishes prompt + generated
// tokens, the generated ones (at or past the prompt length, which the coordinator sets whatever the caller said)
// at the decode priority.
TEST(ContextCacheCoordinator, RetentionTravelsWithPrefillAndDecodePublications) {
    Rig rig;
    RetentionSpec spec = keepPrefix(8, 90);
    spec.decodePriority = 10;
    spec.promptTokenCount = 3;  // ignored: the prompt is 10 tokens
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(iota(10), 0));
    a.sequences[0].retention = &spec;
    auto r = rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 0});
    ASSERT_EQ(r.status, Status::kOk) << r.failure;
    Handle h = std::move(*r.request);
    spec.ranges[0].priority = 0;  // the coordinator kept its own copy at admission
    rig.prefill(h);
    ContextCacheManager const& m = rig.coordinator->manager();
    ASSERT_EQ(m.records().size(), 1u);
    EXPECT_EQ(allRetention(m), (std::vector<RetentionBlockRanges>{{{0, 2, 90, kRetentionNever}}}));
    EXPECT_EQ(m.recordPriority(m.records().lruToMru()[0]), 90);
    int32_t t = 8;
    ASSERT_EQ(rig.step(h, t), Status::kOk);       // committed 11
    ASSERT_EQ(rig.step(h, t, {0}), Status::kOk);  // committed 12: decode end publishes 3 blocks
    EXPECT_EQ(h.sequence(0).publishedFullBlockCount, 3);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    // Block 2 holds prompt tokens 8, 9 (no range) and generated tokens 10, 11 (the decode range): 10.
    EXPECT_EQ(allRetention(m),
              (std::vector<RetentionBlockRanges>{{{0, 2, 90, kRetentionNever}},
                                                 {{0, 2, 90, kRetentionNever}, {2, 3, 10, kRetentionNever}}}));
    rig.coordinator->checkInvariants();
}

// The headline scenario on the coordinator: a priority-90 system prompt survives a flood of default requests that
// evicts older ones; under plain LRU (the same requests without a spec) it is the first to go.
TEST(ContextCacheCoordinator, RetainedSystemPromptSurvivesAFloodThatEvictsItUnderLru) {
    std::vector<int32_t> const system = iota(8, 1000);
    auto withSuffix = [&](std::vector<int32_t> suffix) {
        std::vector<int32_t> p = system;
        p.insert(p.end(), suffix.begin(), suffix.end());
        return p;
    };
    RetentionSpec const retained = keepPrefix(8, 90);
    for (bool retain : {true, false}) {
        SCOPED_TRACE(retain ? "priority 90" : "plain LRU");
        Rig rig;  // 16 pages of 4 tokens
        EXPECT_EQ(serveOnce(rig, withSuffix({1, 2}), retain ? &retained : nullptr), 0);
        // Each flood request holds 3 pages while served and leaves a 2-page record: the 7th and 8th each evict one.
        for (int32_t i = 0; i < 8; ++i) EXPECT_EQ(serveOnce(rig, iota(10, 2000 + 100 * i), nullptr), 0);
        ContextCacheManager const& m = rig.coordinator->manager();
        EXPECT_EQ(m.metrics().evictedRecords, 2u);
        EXPECT_EQ(m.retentionMetrics().evictedRecordsByPriority[kDefaultRetentionPriority], 2u);
        EXPECT_EQ(serveOnce(rig, withSuffix({7, 7}), nullptr), retain ? 8 : 0);
        rig.coordinator->checkInvariants();
    }
}

// The retention clock is the manager's, driven through the coordinator: a range's duration counts from its
// publication, and the record's rank falls back to the default when it ends. Never backwards.
TEST(ContextCacheCoordinator, RetentionClockDrivesExpiry) {
    Rig rig;
    rig.coordinator->setRetentionTime(1000);
    RetentionSpec const spec = keepPrefix(8, 90, 500);
    EXPECT_EQ(serveOnce(rig, iota(10), &spec), 0);
    ContextCacheManager const& m = rig.coordinator->manager();
    ASSERT_EQ(m.records().size(), 1u);
    RecordId const id = m.records().lruToMru()[0];
    EXPECT_EQ(m.recordRetention(id), (RetentionBlockRanges{{0, 2, 90, 1500}}));
    rig.coordinator->setRetentionTime(1499);
    EXPECT_EQ(m.recordPriority(id), 90);
    rig.coordinator->setRetentionTime(1500);
    EXPECT_EQ(m.recordPriority(id), kDefaultRetentionPriority);
    EXPECT_THROW(rig.coordinator->setRetentionTime(1400), ContractError);
    EXPECT_EQ(m.retentionTime(), 1500);
    rig.coordinator->checkInvariants();
}

// A bad spec is a ContractError at admission (a founder's or a joiner's), before anything is held.
TEST(ContextCacheCoordinator, BadRetentionSpecIsRefusedBeforeAnythingIsHeld) {
    Rig rig;
    RetentionSpec bad = keepPrefix(8, 101);
    ContextCacheBatchAdmission a;
    a.sequences.push_back(rig.seq(iota(10), 0));
    a.sequences[0].retention = &bad;
    EXPECT_THROW(rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 0}), ContractError);
    bad.ranges[0] = {4, 4, 50, kNoRetentionDuration};  // an end not after its start
    EXPECT_THROW(rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 0}), ContractError);
    bad.ranges[0] = {0, 8, 50, -5};  // a negative duration
    EXPECT_THROW(rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 0}), ContractError);
    EXPECT_EQ(rig.freeBase(), 16);
    EXPECT_EQ(rig.coordinator->metrics().admittedSequences, 0u);
    EXPECT_EQ(rig.coordinator->activeRequestCount(), 0);

    Handle h = rig.begin({iota(9)});
    rig.prefill(h);
    int32_t const freeBefore = rig.freeBase();
    ContextCacheSequenceAdmission joiner = rig.seq(iota(5, 600), 2);
    bad.decodePriority = -1;
    bad.ranges.clear();
    joiner.retention = &bad;
    EXPECT_THROW(rig.coordinator->admitSequence(h, joiner, {1, 0}), ContractError);
    EXPECT_FALSE(h.hasPendingJoiner());
    EXPECT_EQ(rig.freeBase(), freeBefore);
    EXPECT_EQ(rig.coordinator->metrics().admittedSequences, 1u);
    rig.coordinator->checkInvariants();
}

// ContextCacheRequest carries SequenceRequest::retention to the coordinator (founders and joiners).
TEST(ContextCacheRequest, SequenceRequestRetentionReachesTheRecords) {
    Rig rig;
    GenerationRequest g;
    SequenceRequest s;
    s.tokenIds = iota(9);
    s.retention = keepPrefix(4, 77);
    g.sequences.push_back(s);
    DecodingInferenceContext ctx;
    ctx.activeBatchSize = 1;
    ctx.residentRefs = {ResidentRef{0, ++rig.epoch}};
    std::optional<ContextCacheRequest> req = ContextCacheRequest::begin(*rig.coordinator, g, ctx, false, {1, 0});
    ASSERT_TRUE(req);
    std::vector<int32_t> history = iota(9);
    history.push_back(7);
    ctx.tokenIds = {history};
    ctx.rawInputLengths = {9};
    ctx.generatedLengths = {1};
    ctx.status = {SequenceStatus::kRunning};
    ASSERT_TRUE(req->preparePrefill());
    ASSERT_TRUE(req->enqueuePrefillCaptures());
    ASSERT_TRUE(req->completePrefill(ctx, {9}));
    RetentionSpec const joinerSpec = keepPrefix(8, 12);
    int32_t start = -1;
    ASSERT_EQ(
        req->admitSequence(iota(9, 300), "", {1, 0}, start, ResidentRef{1, ++rig.epoch}, nullptr, {}, {}, &joinerSpec),
        ContextCacheRequest::AdmitSequenceStatus::kAdmitted);
    ASSERT_TRUE(req->finalizeSequenceAdmission(1, 7, 9));
    ContextCacheManager const& m = rig.coordinator->manager();
    EXPECT_EQ(allRetention(m),
              (std::vector<RetentionBlockRanges>{{{0, 1, 77, kRetentionNever}}, {{0, 2, 12, kRetentionNever}}}));
    ASSERT_TRUE(req->finish());
    rig.coordinator->checkInvariants();
}

}  // namespace
}  // namespace ctxcache::runtime
