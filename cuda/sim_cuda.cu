// The CUDA build's table of sim launchers (cpp/sim/sim_launchers.h): each makes the backend's device current,
// enqueues its kernel (sim_kernels.cu) on the backend's stream and turns a launch failure into DeviceError.
#include <cuda_runtime.h>

#include <string>

#include "ctxcache/device/device_error.h"
#include "sim_kernels.cuh"
#include "sim_launchers.h"

namespace ctxcache::sim::detail {

namespace {

void check(cudaError_t status, char const* what) {
    if (status != cudaSuccess) {
        cudaGetLastError();  // clear a non-sticky error so the next call starts clean
        throw device::DeviceError(std::string("CUDA ") + what + ": " + cudaGetErrorName(status) + " (" +
                                  cudaGetErrorString(status) + ")");
    }
}

template <class Launch, void (*Enqueue)(Launch const&, cudaStream_t)>
void launchOn(Launch const& launch, int device, void* stream) {
    check(cudaSetDevice(device), "cudaSetDevice");
    Enqueue(launch, static_cast<cudaStream_t>(stream));
    check(cudaGetLastError(), "sim kernel launch");
}

constexpr CudaSimLaunchers kLaunchers{
    launchOn<SimAttentionLaunch, kernels::launchSimAttention>,
    launchOn<SimRecurrentLaunch, kernels::launchSimRecurrent>,
    launchOn<SimDraftLaunch, kernels::launchSimDraft>,
    launchOn<SimSampleLaunch, kernels::launchSimSample>,
};

}  // namespace

CudaSimLaunchers const* builtinCudaSimLaunchers() noexcept { return &kLaunchers; }

}  // namespace ctxcache::sim::detail
