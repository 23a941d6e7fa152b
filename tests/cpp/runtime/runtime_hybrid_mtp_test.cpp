// Hybrid+MTP through the coordinator on the CPU backend (page size 4): the endpoint publication captures the
// recurrent state, the boundary hidden row and the base + draft partial page in one launch and one
// synchronisation; a request that extends the prompt restores every part byte for byte, starts at the documented
// length with draft lengths one behind, and gets the hidden row back; the private boundary token; page-aligned
// checkpoints; eviction of paired state; the deployment rules of Appendix C; a failed synchronisation.
#include <gtest/gtest.h>

#include <cstring>
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

using device::DType;
using device::KvLengths;
using device::KvPagePool;
using device::KvPageTable;
using device::KvPoolGeometry;
using device::ResidentState;
using device::ResidentStateGeometry;
using device::SnapshotBudgets;
using device::SnapshotStorage;
using device::StatePart;
using test::Bytes;
using test::pattern;
using Status = ContextCacheCoordinatorStatus;
using Handle = ContextCacheCoordinator::RequestHandle;

constexpr int32_t P = 4;
constexpr int32_t kHidden = 3;  // fp16: 6 bytes per row

std::vector<int32_t> iota(int32_t n, int32_t start = 100) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), start);
    return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, std::vector<int32_t> const& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

struct Options {
    bool ownDraftPool = true;        // false: a shared-KV drafter (refused on hybrid)
    bool snapshotsOverDraft = true;  // false: snapshot storage without the draft pool (refused)
    bool boundaryHidden = true;      // false: snapshot storage without the hidden row (refused)
    int32_t pages = 16;
    int32_t maxRecords = 64;
    int32_t snapshotSlots = 4;
};

// A Hybrid+MTP deployment: base and draft pools (fp32, one layer of 1 x 2), a resident state with a hidden row,
// snapshot storage over both pools with the boundary row.
struct MtpRig {
    explicit MtpRig(Options const& o = {}) {
        backend = device::createCpuBackend();
        profile.baseStateKind = ContextCacheModelStateKind::kHybrid;
        profile.specReuseContract = SpecReuseContract{o.ownDraftPool, 1};
        base = std::make_unique<KvPagePool>(*backend, KvPoolGeometry{o.pages, P, DType::kFp32, {{1, 2}}});
        baseTable = std::make_unique<KvPageTable>(*backend, 4, 8, o.pages);
        baseLengths = std::make_unique<KvLengths>(*backend, 4);
        draft = std::make_unique<KvPagePool>(*backend, KvPoolGeometry{o.pages, P, DType::kFp32, {{1, 2}}});
        draftTable = std::make_unique<KvPageTable>(*backend, 4, 8, o.pages);
        draftLengths = std::make_unique<KvLengths>(*backend, 4);
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
        g.hiddenSize = kHidden;
        state = std::make_unique<ResidentState>(*backend, g);
        KvPagePool const* snapshotDraft = o.snapshotsOverDraft ? draft.get() : nullptr;
        SnapshotBudgets budgets;
        budgets.boundaryHidden = o.boundaryHidden;
        budgets.recurrentBytes =
            static_cast<size_t>(o.snapshotSlots) * SnapshotStorage::recurrentBytesPerSlot(g, o.boundaryHidden);
        budgets.partialKvBytes =
            static_cast<size_t>(o.snapshotSlots) *
            SnapshotStorage::partialKvBytesPerSlot(&base->geometry(), snapshotDraft ? &draft->geometry() : nullptr);
        snapshots = std::make_unique<SnapshotStorage>(*backend, state.get(), base.get(), snapshotDraft, budgets);
        ContextCachePhysicalResources r;
        r.basePool = base.get();
        r.basePageTable = baseTable.get();
        r.baseLengths = baseLengths.get();
        if (o.ownDraftPool) {
            r.draftPool = draft.get();
            r.draftPageTable = draftTable.get();
            r.draftLengths = draftLengths.get();
        }
        r.residentState = state.get();
        r.snapshots = snapshots.get();
        ContextCacheConfig config;
        config.maxRecords = o.maxRecords;
        config.maxBatch = 4;
        coordinator = std::make_unique<ContextCacheCoordinator>(config, profile, r, [this](StreamHandle) {
            ++syncs;
            return !failSync;
        });
    }

    ContextCacheBatchAdmission admission(std::vector<std::vector<int32_t>> const& prompts) {
        ContextCacheBatchAdmission a;
        for (size_t i = 0; i < prompts.size(); ++i) {
            ContextCacheSequenceAdmission s;
            s.tokenIds = prompts[i];
            s.resident = ResidentRef{static_cast<int32_t>(i), ++epoch};
            a.sequences.push_back(s);
        }
        a.speculativeRequest = true;
        a.commitPolicy = ContextCacheCommitPolicy::kPrefillStateOnly;
        return a;
    }

    Handle begin(std::vector<int32_t> const& prompt) {
        auto r = coordinator->beginRequest(admission({prompt}), DecodingKvHeadroom{1, 1});
        EXPECT_EQ(r.status, Status::kOk) << r.failure;
        return std::move(*r.request);
    }

    // The engine's state at the endpoint of `h` (row 0, slot 0): recognisable recurrent and conv rows, K and V of
    // base and draft page `page` of its lease, and the hidden tensor [3, kHidden] whose row 1 is the boundary.
    struct EngineState {
        Bytes recurrent, conv, baseK, baseV, draftK, draftV;
        std::vector<uint16_t> hidden;
    };
    EngineState writeEngineState(Handle& h, size_t page, uint8_t seed) {
        EngineState e;
        e.recurrent = pattern(state->rowBytes(StatePart::kRecurrent), seed);
        e.conv = pattern(state->rowBytes(StatePart::kConv), seed + 1);
        state->writeRow(StatePart::kRecurrent, 0, 0, e.recurrent.data(), e.recurrent.size());
        state->writeRow(StatePart::kConv, 0, 0, e.conv.data(), e.conv.size());
        size_t const bytes = base->pageBytes(0);
        e.baseK = pattern(bytes, seed + 2);
        e.baseV = pattern(bytes, seed + 3);
        e.draftK = pattern(bytes, seed + 4);
        e.draftV = pattern(bytes, seed + 5);
        ContextCacheSequenceInfo const s = h.sequence(0);
        base->writePages(0, s.basePages[page], 1, e.baseK.data(), bytes);
        base->writePages(0, s.basePages[page] + base->numPages(), 1, e.baseV.data(), bytes);
        draft->writePages(0, s.draftPages[page], 1, e.draftK.data(), bytes);
        draft->writePages(0, s.draftPages[page] + draft->numPages(), 1, e.draftV.data(), bytes);
        e.hidden.resize(3 * kHidden);
        for (size_t i = 0; i < e.hidden.size(); ++i) e.hidden[i] = static_cast<uint16_t>(0x3C00 + seed * 16 + i);
        return e;
    }

    static TensorView hiddenView(std::vector<uint16_t>& rows) {
        TensorView v;
        v.data = rows.data();
        v.dtype = ScalarType::kFp16;
        v.shape = {static_cast<int64_t>(rows.size() / kHidden), kHidden};
        return v;
    }

    // Prepare, publish the endpoint at E from the engine state written on page floor((E - 1) / P), finish the
    // prefill (lookahead 7) and the request.
    EngineState publish(std::vector<int32_t> const& prompt, int32_t E, uint8_t seed) {
        Handle h = begin(prompt);
        EXPECT_EQ(coordinator->preparePrefill(h), Status::kOk);
        EngineState e = writeEngineState(h, static_cast<size_t>((E - 1) / P), seed);
        TensorView hidden = hiddenView(e.hidden);
        EXPECT_EQ(coordinator->publishHybridMtpEndpoint(h, 0, E, hidden, 1), Status::kOk) << coordinator->lastFailure();
        EXPECT_EQ(coordinator->enqueuePrefillCaptures(h), Status::kOk);
        int32_t const t = 7;
        int32_t const n = static_cast<int32_t>(prompt.size());
        std::vector<int32_t> common{n};
        EXPECT_EQ(coordinator->finalizePrefillPublication(h, {{&t, 1, n}}, &common), Status::kOk);
        EXPECT_EQ(coordinator->finish(h), Status::kOk);
        coordinator->checkInvariants();
        return e;
    }

    Bytes readPage(KvPagePool const& pool, int32_t page) const {
        Bytes out(pool.pageBytes(0));
        pool.readPages(0, page, 1, out.data(), out.size());
        return out;
    }

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

Bytes prefix(Bytes const& b, size_t n) { return Bytes(b.begin(), b.begin() + static_cast<long>(n)); }

// Checks what a request that hit a checkpoint at E (fb = floor((E - 1) / P)) finds after preparePrefill.
void expectRestored(MtpRig& rig, Handle& h, MtpRig::EngineState const& e, int32_t E) {
    int32_t const fb = (E - 1) / P;
    int32_t const valid = E - fb * P;
    Bytes row(rig.state->rowBytes(StatePart::kRecurrent));
    rig.state->readRow(StatePart::kRecurrent, 0, 0, row.data(), row.size());
    EXPECT_EQ(row, e.recurrent);
    Bytes conv(rig.state->rowBytes(StatePart::kConv));
    rig.state->readRow(StatePart::kConv, 0, 0, conv.data(), conv.size());
    EXPECT_EQ(conv, e.conv);
    std::vector<uint16_t> hiddenRow(kHidden);
    rig.state->readRow(StatePart::kBoundaryHidden, 0, 0, hiddenRow.data(), hiddenRow.size() * 2);
    EXPECT_EQ(hiddenRow, std::vector<uint16_t>(e.hidden.begin() + kHidden, e.hidden.begin() + 2 * kHidden));
    // The paired page fb: the first `valid` tokens of K and V, in both pools, on the request's own private pages.
    ContextCacheSequenceInfo const s = h.sequence(0);
    size_t const bytes = static_cast<size_t>(valid) * rig.base->tokenBytes(0);
    int32_t const basePage = s.basePages[static_cast<size_t>(fb)];
    int32_t const draftPage = s.draftPages[static_cast<size_t>(fb)];
    EXPECT_EQ(prefix(rig.readPage(*rig.base, basePage), bytes), prefix(e.baseK, bytes));
    EXPECT_EQ(prefix(rig.readPage(*rig.base, basePage + rig.base->numPages()), bytes), prefix(e.baseV, bytes));
    EXPECT_EQ(prefix(rig.readPage(*rig.draft, draftPage), bytes), prefix(e.draftK, bytes));
    EXPECT_EQ(prefix(rig.readPage(*rig.draft, draftPage + rig.draft->numPages()), bytes), prefix(e.draftV, bytes));
    EXPECT_EQ(rig.baseLengths->read(), std::vector<int32_t>{E});
    EXPECT_EQ(rig.draftLengths->read(), std::vector<int32_t>{E - 1});
}

TEST(HybridMtp, AnExtendedPromptRestoresStateBothPartialPagesAndTheHiddenRow) {
    MtpRig rig;
    std::vector<int32_t> const prompt = iota(10);
    int const syncsBefore = rig.syncs;
    MtpRig::EngineState const e = rig.publish(prompt, 10, 3);
    ContextCacheMetrics m = rig.coordinator->metrics();
    EXPECT_EQ(m.committedPublications, 1u);
    EXPECT_EQ(m.hybridCaptureSynchronizations, 1u);
    EXPECT_GE(rig.syncs - syncsBefore, 1);
    EXPECT_EQ(m.currentRecords, 1u);
    // fb = floor(9 / 4) = 2 paired pages kept by the record, one recurrent and one partial slot.
    EXPECT_EQ(m.baseKvPages.capacity - m.baseKvPages.free, 2);
    EXPECT_EQ(m.draftKvPages.capacity - m.draftKvPages.free, 2);
    EXPECT_EQ(m.recurrentSnapshots.capacity - m.recurrentSnapshots.free, 1);
    EXPECT_EQ(m.partialKvSnapshots.capacity - m.partialKvSnapshots.free, 1);

    Handle h = rig.begin(concat(prompt, {55, 56, 57}));
    EXPECT_EQ(h.prefillStarts(), std::vector<int32_t>{10});  // mid-page: page 2 holds tokens 8 and 9
    ASSERT_EQ(rig.coordinator->preparePrefill(h), Status::kOk);
    expectRestored(rig, h, e, 10);
    std::vector<uint16_t> rows(2 * kHidden, 0);
    TensorView out = MtpRig::hiddenView(rows);
    ASSERT_EQ(rig.coordinator->restoreHybridMtpBoundaryHidden(h, 0, out, 1), Status::kOk);
    EXPECT_EQ(std::vector<uint16_t>(rows.begin() + kHidden, rows.end()),
              std::vector<uint16_t>(e.hidden.begin() + kHidden, e.hidden.begin() + 2 * kHidden));
    EXPECT_EQ(std::vector<uint16_t>(rows.begin(), rows.begin() + kHidden), std::vector<uint16_t>(kHidden, 0));
    ASSERT_EQ(rig.coordinator->enqueuePrefillCaptures(h), Status::kOk);
    int32_t const t = 9;
    std::vector<int32_t> common{13};
    ASSERT_EQ(rig.coordinator->finalizePrefillPublication(h, {{&t, 1, 13}}, &common), Status::kOk);
    // Decode grows both pools (headroom {1, 1}): committed 13 + 1 -> 4 base pages and 4 draft pages.
    ASSERT_EQ(rig.coordinator->prepareDecodeStep(h, DecodingKvHeadroom{1, 1}), Status::kOk);
    EXPECT_EQ(h.sequence(0).basePages.size(), 4u);
    EXPECT_EQ(h.sequence(0).draftPages.size(), 4u);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    EXPECT_EQ(rig.coordinator->metrics().hybridRestores, 1u);
    rig.coordinator->checkInvariants();
}

TEST(HybridMtp, APageAlignedCheckpointKeepsItsWholeLastBasePageInTheSnapshot) {
    MtpRig rig;
    std::vector<int32_t> const prompt = iota(8);
    MtpRig::EngineState const e = rig.publish(prompt, 8, 5);
    // fb = floor(7 / 4) = 1: page 1 is complete in base, one token short in the draft, so it is snapshotted.
    ContextCacheMetrics m = rig.coordinator->metrics();
    EXPECT_EQ(m.baseKvPages.capacity - m.baseKvPages.free, 1);
    Handle h = rig.begin(concat(prompt, {1, 2}));
    EXPECT_EQ(h.prefillStarts(), std::vector<int32_t>{8});
    ASSERT_EQ(rig.coordinator->preparePrefill(h), Status::kOk);
    expectRestored(rig, h, e, 8);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    rig.coordinator->checkInvariants();
}

TEST(HybridMtp, TheBoundaryTokenStaysPrivate) {
    MtpRig rig;
    std::vector<int32_t> const prompt = iota(10);
    rig.publish(prompt, 10, 7);
    // The same 10 tokens again: the checkpoint at 10 would leave nothing to compute (and the draft at 9 needs
    // token 10), so it does not hit; nor does a prompt that differs at token 9.
    Handle same = rig.begin(prompt);
    EXPECT_EQ(same.prefillStarts(), std::vector<int32_t>{0});
    ASSERT_EQ(rig.coordinator->finish(same), Status::kOk);
    std::vector<int32_t> other = iota(9);
    other.insert(other.end(), {1, 2, 3});
    Handle differs = rig.begin(other);
    EXPECT_EQ(differs.prefillStarts(), std::vector<int32_t>{0});
    ASSERT_EQ(rig.coordinator->finish(differs), Status::kOk);
    // One more token than the checkpoint hits it.
    Handle next = rig.begin(concat(prompt, {4}));
    EXPECT_EQ(next.prefillStarts(), std::vector<int32_t>{10});
    ASSERT_EQ(rig.coordinator->finish(next), Status::kOk);
    rig.coordinator->checkInvariants();
}

TEST(HybridMtp, EvictionReturnsPairedPagesAndBothSlots) {
    Options o;
    o.maxRecords = 1;
    MtpRig rig(o);
    rig.publish(iota(10), 10, 1);
    rig.publish(iota(10, 500), 10, 2);  // the record limit evicts the first
    ContextCacheMetrics m = rig.coordinator->metrics();
    EXPECT_EQ(m.evictedRecords, 1u);
    EXPECT_EQ(m.currentRecords, 1u);
    EXPECT_EQ(m.baseKvPages.capacity - m.baseKvPages.free, 2);
    EXPECT_EQ(m.draftKvPages.capacity - m.draftKvPages.free, 2);
    EXPECT_EQ(m.recurrentSnapshots.capacity - m.recurrentSnapshots.free, 1);
    EXPECT_EQ(m.partialKvSnapshots.capacity - m.partialKvSnapshots.free, 1);
    Handle h = rig.begin(concat(iota(10), {1}));
    EXPECT_EQ(h.prefillStarts(), std::vector<int32_t>{0});
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    Handle h2 = rig.begin(concat(iota(10, 500), {1}));
    EXPECT_EQ(h2.prefillStarts(), std::vector<int32_t>{10});
    ASSERT_EQ(rig.coordinator->finish(h2), Status::kOk);
    rig.coordinator->checkInvariants();
}

TEST(HybridMtp, AFailedCaptureSynchronisationQuarantinesUntilShutdown) {
    MtpRig rig;
    Handle h = rig.begin(iota(10));
    ASSERT_EQ(rig.coordinator->preparePrefill(h), Status::kOk);
    MtpRig::EngineState e = rig.writeEngineState(h, 2, 1);
    TensorView hidden = MtpRig::hiddenView(e.hidden);
    rig.failSync = true;
    EXPECT_EQ(rig.coordinator->publishHybridMtpEndpoint(h, 0, 10, hidden, 1), Status::kPoisoned);
    EXPECT_TRUE(rig.coordinator->poisoned());
    EXPECT_EQ(rig.coordinator->metrics().currentRecords, 0u);
    EXPECT_EQ(rig.coordinator->shutdown(), Status::kPoisoned);
    rig.failSync = false;
    EXPECT_EQ(rig.coordinator->shutdown(), Status::kOk);
    ContextCacheMetrics m = rig.coordinator->metrics();
    EXPECT_EQ(m.baseKvPages.free, m.baseKvPages.capacity);
    EXPECT_EQ(m.recurrentSnapshots.free, m.recurrentSnapshots.capacity);
    rig.coordinator->checkInvariants();
}

TEST(HybridMtp, BadEndpointArgumentsAreContractErrorsThatPublishNothing) {
    MtpRig rig;
    Handle h = rig.begin(iota(10));
    std::vector<uint16_t> rows(2 * kHidden, 0);
    TensorView hidden = MtpRig::hiddenView(rows);
    EXPECT_THROW(rig.coordinator->publishHybridMtpEndpoint(h, 0, 10, hidden, 0), ContractError);  // before prepare
    ASSERT_EQ(rig.coordinator->preparePrefill(h), Status::kOk);
    EXPECT_THROW(rig.coordinator->publishHybridMtpEndpoint(h, 0, 11, hidden, 0), ContractError);  // > input
    EXPECT_THROW(rig.coordinator->publishHybridMtpEndpoint(h, 0, 0, hidden, 0), ContractError);
    EXPECT_THROW(rig.coordinator->publishHybridMtpEndpoint(h, 1, 10, hidden, 0), ContractError);  // row
    EXPECT_THROW(rig.coordinator->publishHybridMtpEndpoint(h, 0, 10, hidden, 2), ContractError);  // hidden row
    TensorView wrong = hidden;
    wrong.shape = {1, 2 * kHidden};
    EXPECT_THROW(rig.coordinator->publishHybridMtpEndpoint(h, 0, 10, wrong, 0), ContractError);
    wrong = hidden;
    wrong.dtype = ScalarType::kFp32;
    EXPECT_THROW(rig.coordinator->publishHybridMtpEndpoint(h, 0, 10, wrong, 0), ContractError);
    // A cold request restored nothing.
    EXPECT_THROW(rig.coordinator->restoreHybridMtpBoundaryHidden(h, 0, hidden, 0), ContractError);
    EXPECT_EQ(rig.coordinator->metrics().publicationAttempts, 0u);
    ContextCacheMetrics const m = rig.coordinator->metrics();
    EXPECT_EQ(m.recurrentSnapshots.free, m.recurrentSnapshots.capacity);
    ASSERT_EQ(rig.coordinator->finish(h), Status::kOk);
    rig.coordinator->checkInvariants();
}

TEST(HybridMtp, RequestsOutsideAppendixCAreRefused) {
    MtpRig rig;
    auto refused = [&](ContextCacheBatchAdmission const& a, char const* why) {
        try {
            rig.coordinator->beginRequest(a, DecodingKvHeadroom{1, 1});
            ADD_FAILURE() << "accepted: " << why;
        } catch (ContractError const& e) {
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
    };
    ContextCacheBatchAdmission a = rig.admission({iota(6)});
    a.speculativeRequest = false;
    refused(a, "speculative requests only");
    a = rig.admission({iota(6), iota(6, 300)});
    refused(a, "batch of one");
    a = rig.admission({iota(6)});
    a.commitPolicy = ContextCacheCommitPolicy::kIncludingGeneratedTokens;
    refused(a, "prefill-state-only");
    a = rig.admission({iota(6)});
    a.sequences[0].perPositionMediaHash.assign(6, Hash128{1, 2});
    refused(a, "text-only");
    EXPECT_EQ(rig.coordinator->activeRequestCount(), 0);
}

TEST(HybridMtp, DeploymentsOutsideAppendixCAreRefused) {
    auto refused = [](Options const& o, char const* why) {
        try {
            MtpRig rig(o);
            ADD_FAILURE() << "accepted: " << why;
        } catch (ContractError const& e) {
            EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
        }
    };
    Options o;
    o.ownDraftPool = false;
    refused(o, "must be Hybrid+MTP");
    o = Options{};
    o.snapshotsOverDraft = false;
    refused(o, "snapshot storage built over its draft pool");
    o = Options{};
    o.boundaryHidden = false;
    refused(o, "boundary hidden row");
}

TEST(HybridMtp, TheFacadeMembersForwardAndRaiseWithoutAContextBackend) {
    MtpRig rig;
    GenerationRequest req;
    req.sequences.push_back({iota(10), "", {}, std::nullopt});
    DecodingInferenceContext ctx;
    ctx.activeBatchSize = 1;
    ctx.residentRefs = {ResidentRef{0, ++rig.epoch}};
    auto m = ManagedKVCacheRequest::begin(rig.coordinator.get(), nullptr, req, ctx, true, {1, 1},
                                          DecodingTokenStateContract::kCommittedPlusLookahead,
                                          ContextCacheCommitPolicy::kPrefillStateOnly);
    ASSERT_TRUE(m.has_value()) << rig.coordinator->lastFailure();
    ASSERT_TRUE(m->preparePrefill());
    std::vector<uint16_t> rows(2 * kHidden, 0x3C00);
    TensorView hidden = MtpRig::hiddenView(rows);
    ASSERT_TRUE(m->publishHybridMtpEndpoint(0, 10, hidden, 1)) << m->lastError();
    EXPECT_EQ(rig.coordinator->metrics().committedPublications, 1u);
    EXPECT_TRUE(m->finish());
}

}  // namespace
}  // namespace ctxcache::runtime
