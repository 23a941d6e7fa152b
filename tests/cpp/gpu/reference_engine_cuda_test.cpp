// The reference engine on the CUDA backend (label `gpu`): the same serving scenarios as the CPU suite, with
// reuse, must produce exactly the tokens and state digests of a cold run on the CPU backend (the oracle) and of
// a cold run on CUDA. Skipped with the probe's reason when no CUDA device is usable (CTXCACHE_REQUIRE_GPU=1
// makes that a failure). The emulation suite builds this file too and serves on the emulated CUDA backend (the
// real kernels and CUDA backend compiled against a CPU stand-in of the CUDA runtime).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/sim/reference_engine.h"
#include "gpu_test_support.h"

namespace ctxcache::sim {
namespace {

std::vector<int32_t> iota(int32_t n, int32_t start) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), start);
    return v;
}

class ReferenceEngineCuda : public ::testing::TestWithParam<DeploymentKind> {};

TEST_P(ReferenceEngineCuda, WarmOnCudaEqualsColdOnCpu) {
    CTXCACHE_SKIP_WITHOUT_CUDA();
    ReferenceEngineConfig c;
    c.deployment = GetParam();
    c.pageSize = 16;
    c.basePages = 128;
    c.maxBatch = 4;
    c.maxPagesPerSequence = 32;
    c.maxRecords = 32;
    c.snapshotSlots = 32;
    c.backend = device::BackendKind::kCuda;
#if defined(CTXCACHE_TEST_EMULATED_CUDA)
    std::unique_ptr<device::DeviceBackend> emulated = device::createEmulatedCudaBackend(device::BackendOptions{});
    c.sharedBackend = emulated.get();
#endif
    ReferenceEngine cuda(c);
    c.sharedBackend = nullptr;
    c.backend = device::BackendKind::kCpu;
    ReferenceEngine cpu(c);
    std::vector<int32_t> const system = iota(37, 1);
    std::vector<int32_t> followUp;  // the next turn of the previous round's last conversation (same adapter)
    std::string followUpLora;
    for (int round = 0; round < 3; ++round) {
        std::vector<EngineRequest> reqs;
        if (!followUp.empty()) {
            EngineRequest r;
            r.tokens = followUp;
            r.lora = followUpLora;
            r.maxNewTokens = 3;
            reqs.push_back(r);
        }
        for (int i = 0; i < 6; ++i) {
            EngineRequest r;
            r.tokens = system;
            std::vector<int32_t> const tail = iota(1 + (i * 7 + round) % 29, 1000 * (i + 1) + round);
            r.tokens.insert(r.tokens.end(), tail.begin(), tail.end());
            r.maxNewTokens = 1 + (i + round) % 7;
            if (i % 5 == 0) r.lora = "adapter";
            reqs.push_back(r);
        }
        std::vector<EngineOutput> const warm = cuda.serve(reqs);
        followUp = reqs.back().tokens;
        followUp.insert(followUp.end(), warm.back().generated.begin(), warm.back().generated.end());
        followUp.push_back(7 + round);
        followUpLora = reqs.back().lora;
        std::vector<EngineOutput> const oracle = cpu.coldReference(reqs);
        for (size_t i = 0; i < reqs.size(); ++i) {
            EXPECT_EQ(warm[i].generated, oracle[i].generated) << toString(GetParam()) << " request " << i;
            EXPECT_EQ(warm[i].stateDigest, oracle[i].stateDigest) << toString(GetParam()) << " request " << i;
        }
        cuda.checkInvariants();
    }
    EXPECT_GT(cuda.metrics().hitSequences, 0u);
    std::string why;
    EXPECT_TRUE(cuda.drainAndCheckPoolsFull(&why)) << why;
}

// A sliding-window model served through the bounded-SWA backend on CUDA equals the full-history run on the CPU
// (chunked prefills, page and window crossings, compaction of rows finishing at different steps).
TEST(ReferenceEngineCudaWindow, WindowedOnCudaEqualsFullHistoryOnCpu) {
    CTXCACHE_SKIP_WITHOUT_CUDA();
    for (int32_t window : {16, 10}) {
        ReferenceEngineConfig c;
        c.pageSize = 4;
        c.basePages = 128;
        c.maxBatch = 4;
        c.maxPagesPerSequence = 64;
        c.reuse = false;
        c.slidingWindow = window;
        c.backend = device::BackendKind::kCuda;
#if defined(CTXCACHE_TEST_EMULATED_CUDA)
        std::unique_ptr<device::DeviceBackend> emulated = device::createEmulatedCudaBackend(device::BackendOptions{});
        c.sharedBackend = emulated.get();
#endif
        ReferenceEngine cuda(c);
        c.sharedBackend = nullptr;
        c.backend = device::BackendKind::kCpu;
        ReferenceEngine cpu(c);
        std::vector<EngineRequest> reqs;
        for (int32_t len : {3, window, window + 5, 2 * window + 1, 40}) {
            EngineRequest r;
            r.tokens = iota(len, 100 * len);
            r.maxNewTokens = 5 + (len * 3) % 37;
            reqs.push_back(r);
        }
        std::vector<EngineOutput> const warm = cuda.serve(reqs);
        std::vector<EngineOutput> const oracle = cpu.coldReference(reqs);
        for (size_t i = 0; i < reqs.size(); ++i) {
            EXPECT_EQ(warm[i].generated, oracle[i].generated) << "window " << window << " request " << i;
            EXPECT_EQ(warm[i].stateDigest, oracle[i].stateDigest) << "window " << window << " request " << i;
        }
        cuda.checkInvariants();
        EXPECT_LE(cuda.peakPagesPerSequence(), cuda.swaManager()->privatePagesPerSequence());
        std::string why;
        EXPECT_TRUE(cuda.drainAndCheckPoolsFull(&why)) << why;
    }
}

// Hybrid+MTP on CUDA (the draft kernel over hidden rows, the paired whole-page snapshot, the hidden-row copies)
// equals the cold CPU run: conversations whose next turns restore mid-page, page-aligned and one-past-a-page
// checkpoints.
TEST(ReferenceEngineCudaMtp, HybridMtpOnCudaEqualsColdOnCpu) {
    CTXCACHE_SKIP_WITHOUT_CUDA();
    ReferenceEngineConfig c;
    c.deployment = DeploymentKind::kHybrid;
    c.speculative = SpeculativeKind::kMtp;
    c.commitPolicy = runtime::ContextCacheCommitPolicy::kPrefillStateOnly;
    c.pageSize = 16;
    c.basePages = 128;
    c.maxBatch = 4;
    c.maxPagesPerSequence = 32;
    c.snapshotSlots = 8;
    c.backend = device::BackendKind::kCuda;
#if defined(CTXCACHE_TEST_EMULATED_CUDA)
    std::unique_ptr<device::DeviceBackend> emulated = device::createEmulatedCudaBackend(device::BackendOptions{});
    c.sharedBackend = emulated.get();
#endif
    ReferenceEngine cuda(c);
    c.sharedBackend = nullptr;
    c.backend = device::BackendKind::kCpu;
    ReferenceEngine cpu(c);
    std::vector<std::vector<int32_t>> conversations = {iota(37, 1), iota(32, 500), iota(33, 900)};
    std::vector<int32_t> previous(conversations.size(), 0);
    for (int turn = 0; turn < 3; ++turn) {
        std::vector<EngineRequest> reqs;
        for (auto const& prompt : conversations) {
            EngineRequest r;
            r.tokens = prompt;
            r.maxNewTokens = 2 + turn;
            reqs.push_back(r);
        }
        std::vector<EngineOutput> const warm = cuda.serve(reqs);
        std::vector<EngineOutput> const oracle = cpu.coldReference(reqs);
        for (size_t i = 0; i < reqs.size(); ++i) {
            EXPECT_EQ(warm[i].generated, oracle[i].generated) << "turn " << turn << " request " << i;
            EXPECT_EQ(warm[i].stateDigest, oracle[i].stateDigest) << "turn " << turn << " request " << i;
            // The previous turn published its prompt: this one starts there.
            if (turn > 0) EXPECT_EQ(warm[i].prefillStart, previous[i]) << "turn " << turn << " request " << i;
        }
        for (size_t i = 0; i < reqs.size(); ++i) {
            previous[i] = static_cast<int32_t>(conversations[i].size());
            conversations[i].insert(conversations[i].end(), warm[i].generated.begin(), warm[i].generated.end());
            std::vector<int32_t> const next = iota(3 + 5 * static_cast<int32_t>(i), 7000 + 100 * turn);
            conversations[i].insert(conversations[i].end(), next.begin(), next.end());
        }
        cuda.checkInvariants();
    }
    EXPECT_EQ(cuda.metrics().hybridRestores, 6u);
    std::string why;
    EXPECT_TRUE(cuda.drainAndCheckPoolsFull(&why)) << why;
}

INSTANTIATE_TEST_SUITE_P(AllDeployments, ReferenceEngineCuda,
                         ::testing::Values(DeploymentKind::kAttention, DeploymentKind::kHybrid,
                                           DeploymentKind::kRecurrent, DeploymentKind::kEagle),
                         [](auto const& info) { return std::string(toString(info.param)); });

}  // namespace
}  // namespace ctxcache::sim
