// The reference model's CUDA kernels against its CPU loops (the oracle), byte for byte: the same calls on both
// backends, every written byte, sampled token and fold compared. Label `gpu`: skipped with the probe's reason when
// no CUDA device is usable (CTXCACHE_REQUIRE_GPU=1 makes that a failure). The same file is built with
// CTXCACHE_TEST_EMULATED_CUDA into the emulation suite (label `cpu`), where the CUDA backend is emulated and
// emulation/sim_kernels_emulated.cpp has installed the sim kernels compiled as C++.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "support/sim_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::sim;
using namespace ctxcache::test;

namespace {

class SimCudaVsCpu : public CpuAndCudaBackends {};

// What one scripted run of a hybrid model with a draft produced: every byte, the sampled tokens and folds, and
// the launches it took.
struct Outcome {
    Bytes bytes;
    std::vector<int32_t> tokens;
    std::vector<uint32_t> folds;
    uint64_t launches = 0;
};

// A prefill of three sequences (salts, media, different slots and lengths, one empty), a decode step of two, the
// recurrent fold and the draft alongside, and samples after each.
Outcome scriptedRun(DeviceBackend& b, SimRigOptions const& o) {
    SimRig rig(b, o);
    std::vector<int32_t> const t0 = history(20), t1 = history(20, 1), t2 = history(20, 2);
    std::vector<uint32_t> media(20, 0);
    media[3] = 0xFEEDu;
    media[4] = 0xBEEFu;
    Outcome out;
    uint64_t const before = b.counters().kernels;
    std::vector<SimSequence> prefill = {rig.sequence(0, 0, 11, t0, 0x1234u, &media), rig.sequence(1, 0, 5, t1),
                                        rig.sequence(2, 0, 0, t2), rig.sequence(3, 0, 7, t2, 9)};
    if (!o.base) prefill.pop_back();  // slot 3 has no page-table row in the rig; the state has 4 slots
    if (o.base) rig.attention({prefill[0], prefill[1], prefill[2]});
    if (o.state) rig.recurrent(prefill);
    if (o.draft)
        rig.draftStep({rig.sequence(0, 0, 10, t0, 0x1234u, nullptr, 1), rig.sequence(1, 0, 4, t1, 0, nullptr, 1)});
    std::vector<SimSampleRequest> requests = {{0, 11, o.draft ? 9 : -1, 0}, {1, 5, o.draft ? 3 : -1, 0}};
    auto sampled = rig.sample(requests);
    out.tokens = sampled.first;
    out.folds = sampled.second;
    std::vector<SimSequence> const decode = {rig.sequence(0, 11, 12, t0, 0x1234u, &media), rig.sequence(1, 5, 9, t1)};
    if (o.base) rig.attention(decode);
    if (o.state) rig.recurrent(decode);
    if (o.draft)
        rig.draftStep({rig.sequence(0, 10, 11, t0, 0x1234u, nullptr, 1), rig.sequence(1, 4, 8, t1, 0, nullptr, 1)});
    requests = {{0, 12, o.draft ? 10 : -1, 0}, {1, 9, o.draft ? 7 : -1, 0}, {2, o.base ? 1 : 0, -1, 0}};
    if (o.base) {  // slot 2 is empty: give it one token so that an attention model can sample it
        rig.attention({rig.sequence(2, 0, 1, t2)});
    }
    sampled = rig.sample(requests);
    out.tokens.insert(out.tokens.end(), sampled.first.begin(), sampled.first.end());
    out.folds.insert(out.folds.end(), sampled.second.begin(), sampled.second.end());
    if (o.base) {  // windowed samples (a sliding-window model): inside the history, and wider than it
        sampled = rig.sample({{0, 12, -1, 5}, {1, 9, -1, 100}});
        out.tokens.insert(out.tokens.end(), sampled.first.begin(), sampled.first.end());
        out.folds.insert(out.folds.end(), sampled.second.begin(), sampled.second.end());
    }
    out.bytes = rig.allBytes();
    out.launches = b.counters().kernels - before;
    return out;
}

}  // namespace

TEST_F(SimCudaVsCpu, HybridModelWithDraftIsByteIdenticalForEveryPoolDtype) {
    for (DType dtype : {DType::kFp16, DType::kBf16, DType::kFp32, DType::kFp8E4m3}) {
        SimRigOptions o;
        o.baseDtype = dtype;
        o.draftDtype = dtype == DType::kFp8E4m3 ? DType::kFp32 : DType::kFp8E4m3;
        o.draft = true;
        o.state = true;
        o.seed = 11 + static_cast<uint32_t>(dtype);
        o.baseLayers = {{2, 4}, {1, 3}, {5, 40}};  // 200 elements: two blocks' worth of chains per sequence
        Outcome const a = scriptedRun(backend(0), o), b = scriptedRun(backend(1), o);
        EXPECT_EQ(b.bytes, a.bytes) << dtypeName(dtype);
        EXPECT_EQ(b.tokens, a.tokens) << dtypeName(dtype);
        EXPECT_EQ(b.folds, a.folds) << dtypeName(dtype);
        EXPECT_EQ(b.launches, a.launches) << dtypeName(dtype);
        EXPECT_EQ(a.launches, 10u)
            << "4 ops, then 3 ops, one extra attention, a sample and a windowed sample: one launch each";
    }
}

TEST_F(SimCudaVsCpu, AttentionOnlyAndPureRecurrentModelsAreByteIdentical) {
    SimRigOptions attentionOnly;
    attentionOnly.baseDtype = DType::kBf16;
    SimRigOptions recurrentOnly;
    recurrentOnly.base = false;
    recurrentOnly.state = true;
    for (SimRigOptions const& o : {attentionOnly, recurrentOnly}) {
        Outcome const a = scriptedRun(backend(0), o), b = scriptedRun(backend(1), o);
        EXPECT_EQ(b.bytes, a.bytes) << (o.base ? "attention only" : "recurrent only");
        EXPECT_EQ(b.tokens, a.tokens);
        EXPECT_EQ(b.folds, a.folds);
    }
}

#if !defined(CTXCACHE_TEST_EMULATED_CUDA)  // one host thread per emulated GPU thread: real devices only
TEST_F(SimCudaVsCpu, ALayerWiderThanTheGridStridesAndStaysIdentical) {
    // 33 layers x 8192 elements x K/V = 540672 chains per sequence, more than the 4096 x 128 threads of a launch.
    SimRigOptions o;
    o.baseLayers = std::vector<KvLayerShape>(33, KvLayerShape{64, 128});
    o.draft = true;
    o.draftLayers = {{8, 128}, {1, 8200}};  // 8200 > 8192: the draft wraps base elements
    Outcome const a = scriptedRun(backend(0), o), b = scriptedRun(backend(1), o);
    EXPECT_EQ(b.bytes, a.bytes);
    EXPECT_EQ(b.tokens, a.tokens);
    EXPECT_EQ(b.folds, a.folds);
}
#endif
