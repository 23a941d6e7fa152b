// Launchers of the reference model's kernels (sim_kernels.cu). CUDA-only: included by cuda/*.cu, never by cpp/.
// Each enqueues exactly one kernel on `stream` and leaves error checking to the caller (sim_cuda.cu). The launch
// structs' pointers are device memory.
#pragma once

#include <cuda_runtime_api.h>

#include "ctxcache/sim/sim_math.h"

namespace ctxcache::sim::kernels {

inline constexpr int kSimThreads = 128;  // a power of two: the sample kernel's reduction halves it

void launchSimAttention(SimAttentionLaunch const& launch, cudaStream_t stream);
void launchSimRecurrent(SimRecurrentLaunch const& launch, cudaStream_t stream);
void launchSimDraft(SimDraftLaunch const& launch, cudaStream_t stream);
void launchSimSample(SimSampleLaunch const& launch, cudaStream_t stream);

}  // namespace ctxcache::sim::kernels
