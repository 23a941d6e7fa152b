// SimModel on the CPU backend (the oracle): the properties the reference engine relies on. Writing [0, n) at once
// equals writing it in pieces; a token, salt or media word at p changes the bytes at p and after, never before;
// the math reads through the page table, not physical addresses; the draft reads token p + 1; the sample reads
// exactly the stored words it names; bad calls throw ContractError and change no byte; each op is one launch.
#include <gtest/gtest.h>

#include "support/sim_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::sim;
using namespace ctxcache::test;

namespace {

class SimModelTest : public ::testing::TestWithParam<DType> {
protected:
    std::unique_ptr<DeviceBackend> backend = createCpuBackend();
    SimRigOptions options(bool draft = false, bool state = false) const {
        SimRigOptions o;
        o.baseDtype = GetParam();
        o.draft = draft;
        o.state = state;
        return o;
    }
};

std::string dtypeLabel(::testing::TestParamInfo<DType> const& info) { return dtypeName(info.param); }

}  // namespace

INSTANTIATE_TEST_SUITE_P(PoolDtypes, SimModelTest, ::testing::Values(DType::kFp16, DType::kFp32, DType::kFp8E4m3),
                         dtypeLabel);

TEST_P(SimModelTest, AttentionInPiecesEqualsAttentionInOneCall) {
    std::vector<int32_t> const tokens = history(21);
    SimRig whole(*backend, options());
    whole.attention({whole.sequence(0, 0, 21, tokens), whole.sequence(1, 0, 13, history(13, 1))});
    for (int32_t split : {0, 1, 3, 4, 5, 8, 20, 21}) {
        SimRig pieces(*backend, options());
        pieces.attention({pieces.sequence(0, 0, split, tokens), pieces.sequence(1, 0, 7, history(13, 1))});
        pieces.attention({pieces.sequence(0, split, 21, tokens), pieces.sequence(1, 7, 13, history(13, 1))});
        EXPECT_EQ(pieces.allBytes(), whole.allBytes()) << "split at " << split;
    }
    // Every word was written: no zero rows left at any written position.
    EXPECT_NE(whole.baseRow(0, 20), Bytes(whole.baseRow(0, 20).size(), 0));
}

TEST_P(SimModelTest, ATokenChangesItsPositionAndEveryLaterOneButNoEarlierOne) {
    std::vector<int32_t> const tokens = history(14);
    std::vector<int32_t> changed = tokens;
    changed[6] += 1;
    SimRig a(*backend, options()), b(*backend, options());
    a.attention({a.sequence(0, 0, 14, tokens)});
    b.attention({b.sequence(0, 0, 14, changed)});
    for (int32_t p = 0; p < 14; ++p) {
        if (p < 6) EXPECT_EQ(a.baseRow(0, p), b.baseRow(0, p)) << "position " << p;
        else EXPECT_NE(a.baseRow(0, p), b.baseRow(0, p)) << "position " << p;
    }
}

TEST_P(SimModelTest, TheMathReadsThroughThePageTableNotPhysicalPages) {
    std::vector<int32_t> const tokens = history(11);
    SimRig direct(*backend, options());
    direct.attention({direct.sequence(0, 0, 11, tokens)});

    // Write [0, 6), copy logical page 1 (physical 2) to physical page 15 byte for byte, point the row at 15, and
    // continue: position 6 reads position 5 from page 15.
    SimRig moved(*backend, options());
    moved.attention({moved.sequence(0, 0, 6, tokens)});
    for (int32_t layer = 0; layer < moved.base->numLayers(); ++layer)
        for (int32_t half = 0; half < 2; ++half) {
            Bytes page(moved.base->pageBytes(layer));
            moved.base->readPages(layer, 2 + half * 16, 1, page.data(), page.size());
            moved.base->writePages(layer, 15 + half * 16, 1, page.data(), page.size());
            Bytes const junk(page.size(), 0xEE);
            moved.base->writePages(layer, 2 + half * 16, 1, junk.data(), junk.size());
        }
    moved.baseTable->setEntry(0, 1, 15);
    moved.baseTable->upload();
    moved.attention({moved.sequence(0, 6, 11, tokens)});
    for (int32_t p = 0; p < 11; ++p) EXPECT_EQ(moved.baseRow(0, p), direct.baseRow(0, p)) << "position " << p;
}

TEST_P(SimModelTest, SaltAndMediaChangeTheBytesFromWhereTheyApply) {
    std::vector<int32_t> const tokens = history(9);
    std::vector<uint32_t> text(9, 0), image(9, 0);
    image[4] = 0xABCD1234u;
    SimRig plain(*backend, options()), lora(*backend, options()), media(*backend, options()),
        zeros(*backend, options());
    plain.attention({plain.sequence(0, 0, 9, tokens)});
    lora.attention({lora.sequence(0, 0, 9, tokens, 0x5A17u)});
    media.attention({media.sequence(0, 0, 9, tokens, 0, &image)});
    zeros.attention({zeros.sequence(0, 0, 9, tokens, 0, &text)});
    EXPECT_EQ(zeros.allBytes(), plain.allBytes()) << "media word 0 is a text token";
    for (int32_t p = 0; p < 9; ++p) {
        EXPECT_NE(lora.baseRow(0, p), plain.baseRow(0, p)) << "position " << p;
        if (p < 4) EXPECT_EQ(media.baseRow(0, p), plain.baseRow(0, p)) << "position " << p;
        else EXPECT_NE(media.baseRow(0, p), plain.baseRow(0, p)) << "position " << p;
    }
}

TEST_P(SimModelTest, DifferentSeedsGiveDifferentModels) {
    SimRigOptions other = options();
    other.seed = 8;
    SimRig a(*backend, options()), b(*backend, other);
    a.attention({a.sequence(0, 0, 5, history(5))});
    b.attention({b.sequence(0, 0, 5, history(5))});
    EXPECT_NE(a.baseRow(0, 0), b.baseRow(0, 0));
}

TEST_P(SimModelTest, RecurrentFoldInPiecesEqualsOneCallAndFollowsEveryToken) {
    std::vector<int32_t> const tokens = history(10);
    SimRig whole(*backend, options(false, true));
    whole.recurrent({whole.sequence(1, 0, 10, tokens), whole.sequence(3, 0, 4, history(4, 2))});
    SimRig pieces(*backend, options(false, true));
    pieces.recurrent({pieces.sequence(1, 0, 3, tokens), pieces.sequence(3, 0, 4, history(4, 2))});
    pieces.recurrent({pieces.sequence(1, 3, 3, tokens)});
    pieces.recurrent({pieces.sequence(1, 3, 10, tokens)});
    EXPECT_EQ(pieces.stateBytes(), whole.stateBytes());
    EXPECT_EQ(pieces.allBytes(), whole.allBytes()) << "the fold writes no KV";

    std::vector<int32_t> changed = tokens;
    changed[9] = 5;
    SimRig other(*backend, options(false, true));
    other.recurrent({other.sequence(1, 0, 10, changed), other.sequence(3, 0, 4, history(4, 2))});
    for (int32_t layer = 0; layer < 2; ++layer)
        for (StatePart part : {StatePart::kRecurrent, StatePart::kConv}) {
            Bytes a(whole.state->rowBytes(part)), b(a.size()), untouched(a.size()), c(a.size());
            whole.state->readRow(part, layer, 1, a.data(), a.size());
            other.state->readRow(part, layer, 1, b.data(), b.size());
            EXPECT_NE(a, b) << "layer " << layer;
            whole.state->readRow(part, layer, 3, c.data(), c.size());
            other.state->readRow(part, layer, 3, untouched.data(), untouched.size());
            EXPECT_EQ(c, untouched) << "slot 3 saw the same tokens";
        }
}

TEST_P(SimModelTest, DraftReadsTheNextTokenAndTheBaseKvAndSplitsLikeAttention) {
    std::vector<int32_t> const tokens = history(12);
    auto run = [&](SimRig& rig, std::vector<int32_t> const& t, std::vector<int32_t> const& splits) {
        rig.attention({rig.sequence(0, 0, 11, t)});
        int32_t begin = 0;
        for (int32_t end : splits) {
            rig.draftStep({rig.sequence(0, begin, end, t, 0, nullptr, 1)});
            begin = end;
        }
    };
    SimRig whole(*backend, options(true)), pieces(*backend, options(true));
    run(whole, tokens, {11});
    run(pieces, tokens, {2, 4, 9, 9, 11});
    EXPECT_EQ(pieces.allBytes(), whole.allBytes());

    // Token 7 is the base's input at position 7 and the draft's next token at position 6.
    std::vector<int32_t> changed = tokens;
    changed[7] += 3;
    SimRig other(*backend, options(true));
    run(other, changed, {11});
    for (int32_t p = 0; p < 11; ++p) {
        if (p < 6) EXPECT_EQ(other.draftRow(0, p), whole.draftRow(0, p)) << "position " << p;
        else EXPECT_NE(other.draftRow(0, p), whole.draftRow(0, p)) << "position " << p;
        if (p < 7) EXPECT_EQ(other.baseRow(0, p), whole.baseRow(0, p)) << "position " << p;
    }

    // Only token 11 (read by the draft at 10, never by the base range [0, 11)) differs: only draft position 10.
    std::vector<int32_t> last = tokens;
    last[11] += 1;
    SimRig tail(*backend, options(true));
    run(tail, last, {11});
    EXPECT_EQ(SimRig::poolBytes(*tail.base), SimRig::poolBytes(*whole.base));
    for (int32_t p = 0; p < 11; ++p) {
        if (p < 10) EXPECT_EQ(tail.draftRow(0, p), whole.draftRow(0, p)) << "position " << p;
        else EXPECT_NE(tail.draftRow(0, p), whole.draftRow(0, p));
    }
}

// An MTP head reads its hidden rows instead of the base pool: a row changes its position and every later one,
// splitting equals one call, and a base word the draft no longer reads changes nothing.
TEST_P(SimModelTest, AnMtpDraftReadsItsHiddenRowsInsteadOfTheBase) {
    std::vector<int32_t> const tokens = history(12);
    constexpr int32_t kHidden = 3;
    auto rowsOf = [](int32_t changedRow) {
        std::vector<uint16_t> rows(11 * kHidden);
        for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint16_t>(0x3C00 + 7 * i);
        if (changedRow >= 0) rows[static_cast<size_t>(changedRow * kHidden + 1)] ^= 0x0100;
        return rows;
    };
    auto run = [&](SimRig& rig, std::vector<uint16_t> const& rows, std::vector<int32_t> const& splits) {
        rig.attention({rig.sequence(0, 0, 11, tokens)});
        uint16_t const* hidden = rig.onDevice(rows);
        int32_t begin = 0;
        for (int32_t end : splits) {
            SimSequence s = rig.sequence(0, begin, end, tokens, 0, nullptr, 1);
            s.hiddenRow = begin;
            rig.model->draft(&s, 1, hidden, kHidden, 11);
            begin = end;
        }
    };
    SimRig whole(*backend, options(true)), pieces(*backend, options(true)), changed(*backend, options(true));
    run(whole, rowsOf(-1), {11});
    run(pieces, rowsOf(-1), {3, 7, 11});
    EXPECT_EQ(pieces.allBytes(), whole.allBytes());
    run(changed, rowsOf(6), {11});
    for (int32_t p = 0; p < 11; ++p) {
        if (p < 6) EXPECT_EQ(changed.draftRow(0, p), whole.draftRow(0, p)) << "position " << p;
        else EXPECT_NE(changed.draftRow(0, p), whole.draftRow(0, p)) << "position " << p;
    }
    // The EAGLE draft of the same positions reads the base pool and so differs from the MTP head's.
    SimRig eagle(*backend, options(true));
    eagle.attention({eagle.sequence(0, 0, 11, tokens)});
    eagle.draftStep({eagle.sequence(0, 0, 11, tokens, 0, nullptr, 1)});
    EXPECT_NE(eagle.draftRow(0, 3), whole.draftRow(0, 3));
    // Rows beyond what was passed are refused before anything is written.
    SimSequence s = whole.sequence(0, 4, 11, tokens, 0, nullptr, 1);
    s.hiddenRow = 5;
    Bytes const before = whole.allBytes();
    expectContractError([&] { whole.model->draft(&s, 1, whole.onDevice(rowsOf(-1)), kHidden, 11); },
                        "hidden rows [5, +7)");
    EXPECT_EQ(whole.allBytes(), before);
}

TEST_P(SimModelTest, SampleFollowsEveryWordItReadsAndNothingElse) {
    SimRig rig(*backend, options(true, true));
    std::vector<int32_t> const tokens = history(10);
    rig.attention({rig.sequence(2, 0, 9, tokens)});
    rig.recurrent({rig.sequence(2, 0, 9, tokens)});
    rig.draftStep({rig.sequence(2, 0, 6, tokens, 0, nullptr, 1)});
    SimSampleRequest const plain{2, 9, -1, 0}, withDraft{2, 9, 5, 0};
    auto const [tokens0, folds0] = rig.sample({plain, withDraft});
    EXPECT_GE(tokens0[0], 0);
    EXPECT_LT(tokens0[0], 32000);
    EXPECT_EQ(static_cast<uint32_t>(tokens0[0]), folds0[0] % 32000u);
    EXPECT_NE(folds0[1], folds0[0]) << "the draft words count";
    EXPECT_EQ(rig.sample({plain}).second[0], folds0[0]) << "deterministic";

    // Flip one byte of a word and restore it, for: base layer 2 V at position 8 (read), base layer 0 K at 7 (not
    // read), draft K at 5 (read by withDraft only), recurrent layer 1 word 11 and conv layer 0 word 0 of slot 2.
    auto flipped = [&](auto&& flip) {
        flip(1);
        auto const r = rig.sample({plain, withDraft}).second;
        flip(-1);
        return r;
    };
    auto poke = [&](KvPagePool& pool, int32_t layer, int32_t flatPage, size_t offset) {
        return [&pool, layer, flatPage, offset](int delta) {
            Bytes page(pool.pageBytes(layer));
            pool.readPages(layer, flatPage, 1, page.data(), page.size());
            page[offset] = static_cast<unsigned char>(page[offset] + delta);
            pool.writePages(layer, flatPage, 1, page.data(), page.size());
        };
    };
    // Slot 2 row {11, 12, 14, 15}: position 8 is page 14, token 0; position 7 is page 12, token 3.
    size_t const word = dtypeSize(GetParam());
    auto const v8 = flipped(poke(*rig.base, 2, 14 + 16, 14 * word));  // layer 2: 15 elements; element 14
    EXPECT_NE(v8[0], folds0[0]);
    EXPECT_NE(v8[1], folds0[1]);
    auto const k7 = flipped(poke(*rig.base, 0, 12, 3 * 8 * word));
    EXPECT_EQ(k7, folds0);
    // Draft slot 2 row {5, 7}: position 5 is page 7, token 1.
    auto const d5 = flipped(poke(*rig.draft, 0, 7, 10 * 2));
    EXPECT_EQ(d5[0], folds0[0]);
    EXPECT_NE(d5[1], folds0[1]);
    for (StatePart part : {StatePart::kRecurrent, StatePart::kConv}) {
        int32_t const layer = part == StatePart::kRecurrent ? 1 : 0;
        auto const s = flipped([&](int delta) {
            Bytes row(rig.state->rowBytes(part));
            rig.state->readRow(part, layer, 2, row.data(), row.size());
            row[row.size() - 1] = static_cast<unsigned char>(row[row.size() - 1] + delta);
            rig.state->writeRow(part, layer, 2, row.data(), row.size());
        });
        EXPECT_NE(s[0], folds0[0]);
        EXPECT_NE(s[1], folds0[1]);
    }
    EXPECT_EQ(rig.sample({plain, withDraft}).second, folds0) << "every flip was restored";
}

// A windowed sample (a sliding-window model) reads every base word of the last `window` positions and none before.
TEST_P(SimModelTest, WindowedSampleReadsExactlyTheWindow) {
    SimRig rig(*backend, options());
    rig.attention({rig.sequence(2, 0, 9, history(10))});
    SimSampleRequest const plain{2, 9, -1, 0}, window4{2, 9, -1, 4}, whole{2, 9, -1, 9}, wider{2, 9, -1, 100};
    std::vector<uint32_t> const folds = rig.sample({plain, window4, whole, wider}).second;
    EXPECT_NE(folds[1], folds[0]);
    EXPECT_NE(folds[2], folds[1]);
    EXPECT_EQ(folds[3], folds[2]) << "a window past position 0 reads from 0";
    auto flip = [&](int32_t flatPage, size_t offset, int delta) {
        Bytes page(rig.base->pageBytes(0));
        rig.base->readPages(0, flatPage, 1, page.data(), page.size());
        page[offset] = static_cast<unsigned char>(page[offset] + delta);
        rig.base->writePages(0, flatPage, 1, page.data(), page.size());
    };
    // Slot 2 row {11, 12, 14, 15}: positions 4 and 5 are tokens 0 and 1 of page 12 (layer 0: 8 elements).
    size_t const word = dtypeSize(GetParam());
    flip(12, 0, 1);  // position 4: outside a window of 4 at length 9
    EXPECT_EQ(rig.sample({window4}).second[0], folds[1]);
    EXPECT_NE(rig.sample({whole}).second[0], folds[2]);
    flip(12, 0, -1);
    flip(12, 8 * word, 1);  // position 5: inside
    EXPECT_NE(rig.sample({window4}).second[0], folds[1]);
    flip(12, 8 * word, -1);
    EXPECT_EQ(rig.sample({plain, window4, whole, wider}).second, folds) << "every flip was restored";
    expectContractError([&] { rig.sample({{2, 9, -1, -1}}); }, "window");
}

TEST_P(SimModelTest, EachOpIsOneLaunchAndAnEmptyBatchNone) {
    SimRig rig(*backend, options(true, true));
    std::vector<int32_t> const tokens = history(6);
    std::vector<SimSequence> const batch = {rig.sequence(0, 0, 5, tokens), rig.sequence(1, 0, 0, tokens),
                                            rig.sequence(2, 0, 3, tokens)};
    std::vector<SimSequence> const drafts = {rig.sequence(0, 0, 5, tokens, 0, nullptr, 1)};
    uint64_t const before = backend->counters().kernels;
    rig.attention(batch);
    EXPECT_EQ(backend->counters().kernels, before + 1);
    rig.recurrent(batch);
    EXPECT_EQ(backend->counters().kernels, before + 2);
    rig.draftStep(drafts);
    EXPECT_EQ(backend->counters().kernels, before + 3);
    rig.sample({{0, 5, 4, 0}, {2, 3, -1, 0}});
    EXPECT_EQ(backend->counters().kernels, before + 4) << "two requests, one launch";
    rig.attention({});
    rig.model->sample(nullptr, 0, nullptr);
    EXPECT_EQ(backend->counters().kernels, before + 4);
}

TEST(SimModel, PureRecurrentAndAttentionOnlyModelsSampleFromWhatTheyHave) {
    auto backend = createCpuBackend();
    SimRigOptions recurrentOnly;
    recurrentOnly.base = false;
    recurrentOnly.state = true;
    SimRig rig(*backend, recurrentOnly);
    rig.recurrent({rig.sequence(0, 0, 5, history(5)), rig.sequence(1, 0, 5, history(5, 1))});
    auto const folds = rig.sample({{0, 0, -1, 0}, {1, 0, -1, 0}, {2, 0, -1, 0}}).second;
    EXPECT_NE(folds[0], folds[1]);
    EXPECT_NE(folds[0], folds[2]);
    expectContractError([&] { rig.attention({rig.sequence(0, 0, 1, history(1))}); }, "no base pool");
    expectContractError([&] { rig.sample({{0, 0, 3, 0}}); }, "no draft pool");

    SimRig attentionOnly(*backend);
    expectContractError([&] { attentionOnly.recurrent({attentionOnly.sequence(0, 0, 1, history(1))}); },
                        "no recurrent layers");
    expectContractError([&] { attentionOnly.sample({{0, 0, -1, 0}}); }, "length is 0");
}

TEST(SimModel, BadCallsThrowAndChangeNoByte) {
    auto backend = createCpuBackend();
    SimRigOptions o;
    o.draft = true;
    o.state = true;
    SimRig rig(*backend, o);
    std::vector<int32_t> const tokens = history(30);
    rig.attention({rig.sequence(0, 0, 3, tokens), rig.sequence(1, 0, 9, tokens)});
    rig.recurrent({rig.sequence(0, 0, 3, tokens)});
    Bytes const before = rig.allBytes();
    uint64_t const launches = backend->counters().kernels;
    auto seq = [&](int32_t slot, int32_t begin, int32_t end, int32_t extra = 0) {
        return rig.sequence(slot, begin, end, tokens, 0, nullptr, extra);
    };
    SimSequence const good = seq(0, 3, 5);

    // Slot 2 maps pages 0..3 (positions [0, 16)): position 16 is unmapped (-1).
    expectContractError([&] { rig.attention({good, seq(2, 14, 17)}); }, "not a mapped page");
    SimSequence backwards = good;
    backwards.begin = 6;
    expectContractError([&] { rig.attention({backwards}); }, "not 0 <= begin <= end");
    SimSequence negative = good;
    negative.begin = -1;
    expectContractError([&] { rig.attention({negative}); }, "not 0 <= begin <= end");
    SimSequence farSlot = good;
    farSlot.slot = 4;
    expectContractError([&] { rig.attention({farSlot}); }, "outside the base page table");
    expectContractError([&] { rig.recurrent({farSlot}); }, "outside the state");
    SimSequence shortTokens = good;
    shortTokens.tokenCount = 1;
    expectContractError([&] { rig.attention({shortTokens}); }, "1 tokens");
    expectContractError([&] { rig.draftStep({seq(0, 3, 5)}); }, "the draft reads token end");
    SimSequence beyond = good;
    beyond.end = 25;
    beyond.tokenCount = 30;
    expectContractError([&] { rig.attention({beyond}); }, "exceeds the base page table's 24 positions");
    expectContractError([&] { rig.attention({good, seq(0, 5, 6)}); }, "which sequence 0 of the same launch writes");
    expectContractError([&] { rig.attention({seq(0, 4, 5), seq(0, 6, 7)}); }, "writes too");
    expectContractError([&] { rig.recurrent({good, seq(0, 5, 6)}); }, "one launch folds a slot once");
    // The draft needs the base pages of its range: slot 2 maps base positions [0, 16), its draft [0, 8).
    expectContractError([&] { rig.draftStep({seq(2, 7, 9, 1)}); }, "draft page table entry");
    std::vector<SimSequence> tooMany(9, good);
    expectContractError([&] { rig.attention(tooMany); }, "exceed the model's maxSequences 8");
    expectContractError([&] { rig.sample({{0, 0, -1, 0}}); }, "length is 0");
    expectContractError([&] { rig.sample({{3, 1, -1, 0}}); }, "not a mapped page");
    expectContractError([&] { rig.sample({{0, 3, 12, 0}}); }, "draft page table entry");

    // A dirty table: the device copy is stale, so nothing runs until upload().
    std::vector<int32_t> const row = {5, 2, 9, 0, 13, 7};
    rig.baseTable->setRow(0, row.data(), 6);
    expectContractError([&] { rig.attention({good}); }, "not uploaded");
    expectContractError([&] { rig.sample({{0, 3, -1, 0}}); }, "not uploaded");
    rig.baseTable->upload();

    EXPECT_EQ(rig.allBytes(), before);
    EXPECT_EQ(backend->counters().kernels, launches);
    rig.attention({good});
    EXPECT_NE(rig.allBytes(), before) << "the same call, valid, writes";
}

TEST(SimModel, ConstructionRefusesInconsistentStorage) {
    auto backend = createCpuBackend();
    auto other = createCpuBackend();
    KvPagePool pool(*backend, KvPoolGeometry{8, 4, DType::kFp16, {{1, 4}}});
    KvPageTable table(*backend, 2, 4, 8), wrongSize(*backend, 2, 4, 9), foreign(*other, 2, 4, 8);
    auto make = [&](SimModelStorage const& s, SimModelConfig c = {}) { SimModel m(*backend, c, s); };
    expectContractError([&] { make({}); }, "nothing to model");
    expectContractError([&] { make({&pool, nullptr, nullptr, nullptr, nullptr}); }, "go together");
    expectContractError([&] { make({&pool, &wrongSize, nullptr, nullptr, nullptr}); }, "addresses 9 pages");
    expectContractError([&] { make({&pool, &foreign, nullptr, nullptr, nullptr}); }, "another backend");
    expectContractError([&] { make({nullptr, nullptr, &pool, &table, nullptr}); }, "needs a base pool");
    expectContractError([&] { make({&pool, &table, nullptr, nullptr, nullptr}, {0, 0, 8}); }, "vocabSize");
    expectContractError([&] { make({&pool, &table, nullptr, nullptr, nullptr}, {0, 10, 0}); }, "maxSequences");
    make({&pool, &table, nullptr, nullptr, nullptr});
}
