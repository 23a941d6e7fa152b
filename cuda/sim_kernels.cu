// The reference model's kernels. Each runs the same sim_math.h work items as the CPU loops of
// cpp/sim/sim_kernels_cpu.cpp, only spread over threads, so the two produce identical bytes: attention, draft and
// recurrent give every (sequence, layer, K/V, element) or (sequence, state word) chain to one thread, which walks
// the positions in order; SimModel's validation guarantees that no two chains of a launch touch the same word.
// Sampling reduces a mod-2^32 sum, which is order-free.
//
// Threading: each kernel owns the words its sequences name; concurrent launches on other streams touching the
// same pages are the caller's race.
#include "sim_kernels.cuh"

#include <cuda_runtime.h>

#include <cstdint>

// Every launch goes through this macro so that tests/cpp/emulation can run these very kernels on CPU threads.
#ifndef CTXC_LAUNCH
#define CTXC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif

namespace ctxcache::sim::kernels {

namespace {

constexpr int64_t kMaxBlocksX = 4096;  // grid-stride beyond: a block's threads then own several chains each

// Blocks along x for `work` items per sequence (at least one, so that every launch is one kernel).
unsigned blocksFor(int64_t work) {
    int64_t const blocks = (work + kSimThreads - 1) / kSimThreads;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < kMaxBlocksX ? blocks : kMaxBlocksX));
}

__device__ __forceinline__ int64_t firstItem() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t itemStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Work item w of a pool's layers -> (layer, half, element); consecutive threads take consecutive elements.
__device__ __forceinline__ void kvItem(SimKvView const& kv, int64_t w, int32_t& layer, int32_t& half,
                                       int32_t& element) {
    layer = simItemOfWork(kv.layers, kv.numLayers, w);
    int32_t const elements = kv.layers[layer].elements;
    int64_t const r = w - kv.layers[layer].firstWork;
    half = r >= elements ? 1 : 0;
    element = static_cast<int32_t>(r - static_cast<int64_t>(half) * elements);
}

// grid (x: chains, y: sequence).
__global__ void __launch_bounds__(kSimThreads) simAttentionKernel(SimAttentionLaunch launch) {
    SimSequence const s = launch.sequences[blockIdx.y];
    if (s.begin >= s.end) return;
    for (int64_t w = firstItem(); w < launch.kv.totalWork; w += itemStride()) {
        int32_t layer, half, element;
        kvItem(launch.kv, w, layer, half, element);
        simAttentionItem(launch.kv, s, layer, half, element, launch.seed);
    }
}

__global__ void __launch_bounds__(kSimThreads) simRecurrentKernel(SimRecurrentLaunch launch) {
    SimSequence const s = launch.sequences[blockIdx.y];
    if (s.begin >= s.end) return;
    for (int64_t w = firstItem(); w < launch.totalWork; w += itemStride()) {
        SimStateSegment const& g = launch.segments[simItemOfWork(launch.segments, launch.segmentCount, w)];
        simRecurrentItem(g, s, static_cast<int32_t>(w - g.firstWork), launch.seed);
    }
}

__global__ void __launch_bounds__(kSimThreads) simDraftKernel(SimDraftLaunch launch) {
    SimSequence const s = launch.sequences[blockIdx.y];
    if (s.begin >= s.end) return;
    for (int64_t w = firstItem(); w < launch.draft.totalWork; w += itemStride()) {
        int32_t layer, half, element;
        kvItem(launch.draft, w, layer, half, element);
        simDraftItem(launch, s, layer, half, element);
    }
}

// One block per request: every thread sums the terms of a strided share of the words, then a tree reduction in
// shared memory (blockDim.x is kSimThreads, a power of two).
__global__ void __launch_bounds__(kSimThreads) simSampleKernel(SimSampleLaunch launch) {
    __shared__ uint32_t partial[kSimThreads];
    SimSampleRequest const r = launch.requests[blockIdx.x];
    uint32_t sum = 0;
    for (int64_t w = threadIdx.x; w < launch.totalWork; w += blockDim.x) sum += simSampleTerm(launch, r, w);
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        uint32_t const fold = simSampleFold(launch.seed, partial[0]);
        launch.tokens[blockIdx.x] = simSampleToken(fold, launch.vocabSize);
        if (launch.folds) launch.folds[blockIdx.x] = fold;
    }
}

}  // namespace

void launchSimAttention(SimAttentionLaunch const& launch, cudaStream_t stream) {
    dim3 const grid(blocksFor(launch.kv.totalWork), static_cast<unsigned>(launch.count));
    CTXC_LAUNCH(simAttentionKernel, grid, kSimThreads, stream)(launch);
}

void launchSimRecurrent(SimRecurrentLaunch const& launch, cudaStream_t stream) {
    dim3 const grid(blocksFor(launch.totalWork), static_cast<unsigned>(launch.count));
    CTXC_LAUNCH(simRecurrentKernel, grid, kSimThreads, stream)(launch);
}

void launchSimDraft(SimDraftLaunch const& launch, cudaStream_t stream) {
    dim3 const grid(blocksFor(launch.draft.totalWork), static_cast<unsigned>(launch.count));
    CTXC_LAUNCH(simDraftKernel, grid, kSimThreads, stream)(launch);
}

void launchSimSample(SimSampleLaunch const& launch, cudaStream_t stream) {
    CTXC_LAUNCH(simSampleKernel, static_cast<unsigned>(launch.count), kSimThreads, stream)(launch);
}

}  // namespace ctxcache::sim::kernels
