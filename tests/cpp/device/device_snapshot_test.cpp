// ResidentState and SnapshotStorage on the CPU backend: exact slot sizes from budgets, one-launch capture and
// restore with hand-computed bytes, zeroing, and typed errors for bad slots, pages and lengths.
#include <gtest/gtest.h>

#include "ctxcache/device/snapshot_storage.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

namespace {

// 2 recurrent layers: recurrent row 2*2*3 fp32 = 48 bytes, conv row 3*2 fp16 = 12 bytes; hidden 5 fp16 = 10.
ResidentStateGeometry stateGeometry(int32_t maxBatch = 3) {
    ResidentStateGeometry g;
    g.maxBatch = maxBatch;
    g.numLayers = 2;
    g.recurrentHeads = 2;
    g.recurrentHeadDim = 2;
    g.stateSize = 3;
    g.recurrentDtype = DType::kFp32;
    g.convDim = 3;
    g.convKernel = 2;
    g.convDtype = DType::kFp16;
    g.hiddenSize = 5;
    return g;
}

// Base: 4 pages of 4 tokens, one layer of 1 head x 2 dims fp16 (token 4 bytes, page 16). Draft: 2 pages of 4
// tokens, one layer of 2 heads x 1 dim fp32 (token 8 bytes, page 32).
KvPoolGeometry baseGeometry() { return KvPoolGeometry{4, 4, DType::kFp16, {{1, 2}}}; }
KvPoolGeometry draftGeometry() { return KvPoolGeometry{2, 4, DType::kFp32, {{2, 1}}}; }

struct Hybrid {
    std::unique_ptr<DeviceBackend> backend = createCpuBackend();
    ResidentState state{*backend, stateGeometry()};
    KvPagePool base{*backend, baseGeometry()};
    KvPagePool draft{*backend, draftGeometry()};
};

}  // namespace

TEST(SnapshotStorage, BytesPerSlotAndSlotCountsComeFromTheBudgets) {
    EXPECT_EQ(SnapshotStorage::recurrentBytesPerSlot(stateGeometry(), false), 2u * (48 + 12));
    EXPECT_EQ(SnapshotStorage::recurrentBytesPerSlot(stateGeometry(), true), 2u * (48 + 12) + 10);
    KvPoolGeometry const base = baseGeometry(), draft = draftGeometry();
    EXPECT_EQ(SnapshotStorage::partialKvBytesPerSlot(&base, nullptr), 2u * 16);
    EXPECT_EQ(SnapshotStorage::partialKvBytesPerSlot(&base, &draft), 2u * 16 + 2 * 32);

    Hybrid h;
    SnapshotStorage storage(*h.backend, &h.state, &h.base, &h.draft, SnapshotBudgets{1000, 300, true});
    EXPECT_EQ(storage.recurrentBytesPerSlot(), 130u);
    EXPECT_EQ(storage.partialKvBytesPerSlot(), 96u);
    EXPECT_EQ(storage.recurrentSlots(), 7);   // 1000 / 130
    EXPECT_EQ(storage.partialKvSlots(), 3);   // 300 / 96
    EXPECT_EQ(storage.footprintBytes(), 7u * 130 + 3u * 96);
    EXPECT_EQ(storage.maxDescriptors(), 2 * 2 + 1 + 2 + 2);
    SnapshotStorage none(*h.backend, nullptr, nullptr, nullptr, SnapshotBudgets{1000, 1000, false});
    EXPECT_EQ(none.recurrentSlots(), 0);
    EXPECT_EQ(none.footprintBytes(), 0u);
}

TEST(SnapshotStorage, ResidentStateLayoutAndFootprint) {
    Hybrid h;
    EXPECT_EQ(h.state.rowBytes(StatePart::kRecurrent), 48u);
    EXPECT_EQ(h.state.rowBytes(StatePart::kConv), 12u);
    EXPECT_EQ(h.state.rowBytes(StatePart::kBoundaryHidden), 10u);
    // slabs of 3 rows: 144 -> 256, 36 -> 256, per layer; hidden 30 -> 256
    EXPECT_EQ(h.state.footprintBytes(), 5u * 256);
    expectContractError([&] { h.state.rowBytes(StatePart::kPartialKv); }, "not a resident-state part");
    expectContractError([&] { h.state.row(StatePart::kRecurrent, 2, 0); }, "layer 2");
    expectContractError([&] { h.state.row(StatePart::kConv, 0, 3); }, "slot 3");
    ResidentStateGeometry bad = stateGeometry();
    bad.stateSize = 0;
    expectContractError([&] { ResidentState(*h.backend, bad); }, "stateSize");
}

TEST(SnapshotStorage, CaptureAndRestoreMoveEveryPartInOneLaunch) {
    Hybrid h;
    SnapshotStorage storage(*h.backend, &h.state, &h.base, &h.draft, SnapshotBudgets{1000, 300, true});
    // Live state of batch slot 1 and KV pages: base K page 2 / V page 6, draft K page 1 / V page 3.
    Bytes const rec0 = pattern(48, 1), conv0 = pattern(12, 2), rec1 = pattern(48, 3), conv1 = pattern(12, 4),
                hidden = pattern(10, 5);
    h.state.writeRow(StatePart::kRecurrent, 0, 1, rec0.data(), 48);
    h.state.writeRow(StatePart::kConv, 0, 1, conv0.data(), 12);
    h.state.writeRow(StatePart::kRecurrent, 1, 1, rec1.data(), 48);
    h.state.writeRow(StatePart::kConv, 1, 1, conv1.data(), 12);
    h.state.writeRow(StatePart::kBoundaryHidden, 0, 1, hidden.data(), 10);
    Bytes const baseK = pattern(16, 6), baseV = pattern(16, 7), draftK = pattern(32, 8), draftV = pattern(32, 9);
    h.base.writePages(0, 2, 1, baseK.data(), 16);
    h.base.writePages(0, 6, 1, baseV.data(), 16);
    h.draft.writePages(0, 1, 1, draftK.data(), 32);
    h.draft.writePages(0, 3, 1, draftV.data(), 32);

    SnapshotTransfer t;
    t.batchSlot = 1;
    t.recurrentSlot = 4;
    t.partialKvSlot = 2;
    t.basePage = 2;
    t.draftPage = 1;
    t.validTokens = 3;
    uint64_t const kernels = h.backend->counters().kernels;
    storage.capture(t);
    EXPECT_EQ(h.backend->counters().kernels, kernels + 1);

    Bytes slot(130);
    std::copy(rec0.begin(), rec0.end(), slot.begin());
    std::copy(conv0.begin(), conv0.end(), slot.begin() + 48);
    std::copy(rec1.begin(), rec1.end(), slot.begin() + 60);
    std::copy(conv1.begin(), conv1.end(), slot.begin() + 108);
    std::copy(hidden.begin(), hidden.end(), slot.begin() + 120);
    Bytes snapshot(130);
    for (auto [part, layer, offset, size] : {std::tuple{StatePart::kRecurrent, 0, 0, 48},
                                             {StatePart::kConv, 0, 48, 12},
                                             {StatePart::kRecurrent, 1, 60, 48},
                                             {StatePart::kConv, 1, 108, 12},
                                             {StatePart::kBoundaryHidden, 0, 120, 10}})
        storage.readRegion(part, layer, 4, snapshot.data() + offset, static_cast<size_t>(size));
    EXPECT_EQ(snapshot, slot);

    // Partial KV: the first 3 tokens (12 bytes base, 24 bytes draft) of the K page, then of the V page at
    // pageBytes into the region; the rest of the region stays zero.
    Bytes expectedBase(32, 0), expectedDraft(64, 0);
    std::copy(baseK.begin(), baseK.begin() + 12, expectedBase.begin());
    std::copy(baseV.begin(), baseV.begin() + 12, expectedBase.begin() + 16);
    std::copy(draftK.begin(), draftK.begin() + 24, expectedDraft.begin());
    std::copy(draftV.begin(), draftV.begin() + 24, expectedDraft.begin() + 32);
    Bytes region(32), draftRegion(64);
    storage.readRegion(StatePart::kPartialKv, 0, 2, region.data(), 32);
    storage.readRegion(StatePart::kDraftPartialKv, 0, 2, draftRegion.data(), 64);
    EXPECT_EQ(region, expectedBase);
    EXPECT_EQ(draftRegion, expectedDraft);

    // Restore into batch slot 0 and base page 0 / draft page 0 (prefilled with 0xEE): only the first 3 tokens
    // of each K and V page change.
    SnapshotTransfer r = t;
    r.batchSlot = 0;
    r.basePage = 0;
    r.draftPage = 0;
    Bytes const fill16(16, 0xEE), fill32(32, 0xEE);
    for (int32_t p : {0, 4}) h.base.writePages(0, p, 1, fill16.data(), 16);
    for (int32_t p : {0, 2}) h.draft.writePages(0, p, 1, fill32.data(), 32);
    storage.restore(r);
    EXPECT_EQ(h.backend->counters().kernels, kernels + 2);
    Bytes row(48);
    h.state.readRow(StatePart::kRecurrent, 1, 0, row.data(), 48);
    EXPECT_EQ(row, rec1);
    Bytes hiddenBack(10);
    h.state.readRow(StatePart::kBoundaryHidden, 0, 0, hiddenBack.data(), 10);
    EXPECT_EQ(hiddenBack, hidden);
    Bytes page(16);
    h.base.readPages(0, 4, 1, page.data(), 16);
    Bytes expectedV(16, 0xEE);
    std::copy(baseV.begin(), baseV.begin() + 12, expectedV.begin());
    EXPECT_EQ(page, expectedV);
    Bytes draftPage(32);
    h.draft.readPages(0, 0, 1, draftPage.data(), 32);
    Bytes expectedDraftK(32, 0xEE);
    std::copy(draftK.begin(), draftK.begin() + 24, expectedDraftK.begin());
    EXPECT_EQ(draftPage, expectedDraftK);
}

// Hybrid+MTP: a checkpoint at a page-aligned length keeps its whole last base page (and the lagging draft page) in
// the partial slot; without a draft pool a whole page stays refused.
TEST(SnapshotStorage, AWholePagePairMovesWithADraftPoolOnly) {
    Hybrid h;
    SnapshotStorage storage(*h.backend, &h.state, &h.base, &h.draft, SnapshotBudgets{1000, 300, true});
    Bytes const baseK = pattern(16, 11), baseV = pattern(16, 12), draftK = pattern(32, 13), draftV = pattern(32, 14);
    h.base.writePages(0, 1, 1, baseK.data(), 16);
    h.base.writePages(0, 5, 1, baseV.data(), 16);
    h.draft.writePages(0, 0, 1, draftK.data(), 32);
    h.draft.writePages(0, 2, 1, draftV.data(), 32);
    SnapshotTransfer t;
    t.partialKvSlot = 1;
    t.basePage = 1;
    t.draftPage = 0;
    t.validTokens = 4;
    storage.capture(t);
    SnapshotTransfer r = t;
    r.basePage = 3;
    r.draftPage = 1;
    storage.restore(r);
    Bytes page(16), draftPage(32);
    h.base.readPages(0, 3, 1, page.data(), 16);
    EXPECT_EQ(page, baseK);
    h.base.readPages(0, 7, 1, page.data(), 16);
    EXPECT_EQ(page, baseV);
    h.draft.readPages(0, 1, 1, draftPage.data(), 32);
    EXPECT_EQ(draftPage, draftK);
    h.draft.readPages(0, 3, 1, draftPage.data(), 32);
    EXPECT_EQ(draftPage, draftV);

    SnapshotStorage plain(*h.backend, &h.state, &h.base, nullptr, SnapshotBudgets{1000, 300, false});
    SnapshotTransfer p;
    p.partialKvSlot = 0;
    p.basePage = 1;
    p.validTokens = 4;
    expectContractError([&] { plain.capture(p); }, "validTokens 4 is outside (0, 4)");
}

TEST(SnapshotStorage, A64LayerHybridModelCapturesAndRestoresInOneLaunch) {
    auto backend = createCpuBackend();
    ResidentStateGeometry g = stateGeometry(4);
    g.numLayers = 48;  // 48 recurrent + 16 attention layers
    ResidentState state(*backend, g);
    KvPagePool pool(*backend, KvPoolGeometry{8, 16, DType::kFp16, std::vector<KvLayerShape>(16, KvLayerShape{2, 8})});
    SnapshotStorage storage(*backend, &state, &pool, nullptr, SnapshotBudgets{1 << 20, 1 << 20, true});
    for (int32_t layer = 0; layer < 48; ++layer) {
        Bytes const r = pattern(48, static_cast<uint32_t>(layer));
        state.writeRow(StatePart::kRecurrent, layer, 2, r.data(), r.size());
    }
    SnapshotTransfer t;
    t.batchSlot = 2;
    t.recurrentSlot = 1;
    t.partialKvSlot = 0;
    t.basePage = 5;
    t.validTokens = 9;
    LaunchCounters const before = backend->counters();
    storage.capture(t);
    t.batchSlot = 3;
    storage.restore(t);
    EXPECT_EQ(backend->counters().kernels, before.kernels + 2);
    for (int32_t layer = 0; layer < 48; ++layer) {
        Bytes back(48);
        state.readRow(StatePart::kRecurrent, layer, 3, back.data(), 48);
        EXPECT_EQ(back, pattern(48, static_cast<uint32_t>(layer))) << "layer " << layer;
    }
}

TEST(SnapshotStorage, InvalidTransfersAreContractErrorsAndMoveNothing) {
    Hybrid h;
    SnapshotStorage storage(*h.backend, &h.state, &h.base, &h.draft, SnapshotBudgets{260, 96, false});
    SnapshotTransfer t;
    expectContractError([&] { storage.capture(t); }, "neither");
    t.recurrentSlot = 2;  // only 2 slots (260 / 120)
    t.batchSlot = 0;
    expectContractError([&] { storage.capture(t); }, "recurrent slot 2");
    t.recurrentSlot = 0;
    t.batchSlot = 3;
    expectContractError([&] { storage.capture(t); }, "batch slot 3");
    SnapshotTransfer p;
    p.partialKvSlot = 0;
    p.basePage = 4;
    p.draftPage = 0;
    p.validTokens = 1;
    expectContractError([&] { storage.restore(p); }, "base page 4");
    p.basePage = 0;
    p.draftPage = -1;
    expectContractError([&] { storage.restore(p); }, "draft page -1");
    p.draftPage = 0;
    p.validTokens = 5;  // beyond the page (a whole page is allowed here: this storage has a draft pool)
    expectContractError([&] { storage.restore(p); }, "validTokens 5 is outside (0, 4]");
    p.validTokens = 0;
    expectContractError([&] { storage.restore(p); }, "validTokens 0");
    expectContractError([&] { storage.region(StatePart::kBoundaryHidden, 0, 0); }, "layer 0");
    EXPECT_EQ(h.backend->counters().kernels, 0u);
    expectContractError([&] { SnapshotStorage(*h.backend, nullptr, nullptr, &h.draft, SnapshotBudgets{}); },
                        "draft pool needs");
    auto other = createCpuBackend();
    expectContractError([&] { SnapshotStorage(*other, &h.state, nullptr, nullptr, SnapshotBudgets{}); }, "backend");
}

TEST(SnapshotStorage, ZeroSlotClearsRecurrentAndConvRowsOfEveryLayerInOneLaunch) {
    Hybrid h;
    Bytes const ones48(48, 1), ones12(12, 1), ones10(10, 1);
    for (int32_t slot = 0; slot < 3; ++slot)
        for (int32_t layer = 0; layer < 2; ++layer) {
            h.state.writeRow(StatePart::kRecurrent, layer, slot, ones48.data(), 48);
            h.state.writeRow(StatePart::kConv, layer, slot, ones12.data(), 12);
        }
    h.state.writeRow(StatePart::kBoundaryHidden, 0, 1, ones10.data(), 10);
    uint64_t const kernels = h.backend->counters().kernels;
    h.state.zeroSlot(1);
    EXPECT_EQ(h.backend->counters().kernels, kernels + 1);
    for (int32_t slot = 0; slot < 3; ++slot)
        for (int32_t layer = 0; layer < 2; ++layer) {
            Bytes r(48), c(12);
            h.state.readRow(StatePart::kRecurrent, layer, slot, r.data(), 48);
            h.state.readRow(StatePart::kConv, layer, slot, c.data(), 12);
            EXPECT_EQ(r, Bytes(48, slot == 1 ? 0 : 1));
            EXPECT_EQ(c, Bytes(12, slot == 1 ? 0 : 1));
        }
    Bytes hidden(10);
    h.state.readRow(StatePart::kBoundaryHidden, 0, 1, hidden.data(), 10);
    EXPECT_EQ(hidden, ones10);  // the hidden row is not recurrent state
    expectContractError([&] { h.state.zeroSlot(3); }, "slot 3");
}

TEST(SnapshotStorage, ResidentStateCompactionMovesEverySlabInOneLaunch) {
    Hybrid h;
    for (int32_t slot = 0; slot < 3; ++slot) {
        for (int32_t layer = 0; layer < 2; ++layer) {
            Bytes const r = pattern(48, static_cast<uint32_t>(10 * slot + layer));
            Bytes const c = pattern(12, static_cast<uint32_t>(100 + 10 * slot + layer));
            h.state.writeRow(StatePart::kRecurrent, layer, slot, r.data(), 48);
            h.state.writeRow(StatePart::kConv, layer, slot, c.data(), 12);
        }
        Bytes const hid = pattern(10, static_cast<uint32_t>(200 + slot));
        h.state.writeRow(StatePart::kBoundaryHidden, 0, slot, hid.data(), 10);
    }
    int32_t const map[] = {-1, 0, 1};
    uint64_t const kernels = h.backend->counters().kernels;
    h.state.compact(map, 3, 2);
    EXPECT_EQ(h.backend->counters().kernels, kernels + 1);
    for (int32_t slot = 0; slot < 2; ++slot) {
        int32_t const from = slot + 1;
        for (int32_t layer = 0; layer < 2; ++layer) {
            Bytes r(48), c(12);
            h.state.readRow(StatePart::kRecurrent, layer, slot, r.data(), 48);
            h.state.readRow(StatePart::kConv, layer, slot, c.data(), 12);
            EXPECT_EQ(r, pattern(48, static_cast<uint32_t>(10 * from + layer)));
            EXPECT_EQ(c, pattern(12, static_cast<uint32_t>(100 + 10 * from + layer)));
        }
        Bytes hid(10);
        h.state.readRow(StatePart::kBoundaryHidden, 0, slot, hid.data(), 10);
        EXPECT_EQ(hid, pattern(10, static_cast<uint32_t>(200 + from)));
    }
    int32_t const reorder[] = {1, 0};
    expectContractError([&] { h.state.compact(reorder, 2, 2); }, "reorders");
}
