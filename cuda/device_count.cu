// The CUDA build path's first translation unit: how many CUDA devices this process can use.
// No driver (or no device) is an answer, not an error: ctxc_cuda_device_count() reports it as a negative
// cudaError_t so that tests can skip with the reason.
#include <cuda_runtime_api.h>

#include "ctxcache/device/cuda_probe.h"

namespace ctxcache::device {

int cudaDeviceCount(char const** reason) noexcept {
    int count = 0;
    cudaError_t const status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        if (reason) *reason = cudaGetErrorString(status);
        cudaGetLastError();  // clear the sticky error so later probes start clean
        return -static_cast<int>(status);
    }
    if (reason) *reason = count > 0 ? "ok" : "no CUDA device";
    return count;
}

bool cudaCompiled() noexcept { return true; }

}  // namespace ctxcache::device
