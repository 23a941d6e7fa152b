// How SimModel reaches its two implementations: the CPU loops (sim_kernels_cpu.cpp, the oracle) and, on a CUDA
// backend, a table of launchers (cuda/sim_cuda.cu) that enqueue one kernel each on a stream. cpp/ never includes
// a CUDA header, so the table is plain function pointers taking the stream as void*.
//
// The table in use is the build's own (null in a CPU-only build) unless a test harness replaced it:
// tests/cpp/emulation installs the same kernels compiled as C++ over a CPU stand-in of the CUDA runtime, so that a
// SimModel on the emulated CUDA backend runs them.
// Threading: the replacement is process-global and meant to be set once, before any SimModel is constructed.
#pragma once

#include "ctxcache/sim/sim_math.h"

namespace ctxcache::sim::detail {

void cpuSimAttention(SimAttentionLaunch const& launch);
void cpuSimRecurrent(SimRecurrentLaunch const& launch);
void cpuSimDraft(SimDraftLaunch const& launch);
void cpuSimSample(SimSampleLaunch const& launch);

// Each launches one kernel on `stream` (a cudaStream_t) of device `device` and throws DeviceError when the launch
// failed. The launch structs' pointers are device memory.
struct CudaSimLaunchers {
    void (*attention)(SimAttentionLaunch const& launch, int device, void* stream);
    void (*recurrent)(SimRecurrentLaunch const& launch, int device, void* stream);
    void (*draft)(SimDraftLaunch const& launch, int device, void* stream);
    void (*sample)(SimSampleLaunch const& launch, int device, void* stream);
};

// cuda/sim_cuda.cu's table in a CUDA build; null in a CPU-only build (cpp/sim/sim_cuda_stub.cpp).
CudaSimLaunchers const* builtinCudaSimLaunchers() noexcept;
// The table SimModel uses on a CUDA backend: the replacement if one is set, else the builtin one.
CudaSimLaunchers const* cudaSimLaunchers() noexcept;
// Replace the table (null restores the builtin one). For test harnesses only.
void replaceCudaSimLaunchers(CudaSimLaunchers const* launchers) noexcept;

}  // namespace ctxcache::sim::detail
