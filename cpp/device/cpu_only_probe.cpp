// CUDA probe of a CPU-only build (CTXCACHE_WITH_CUDA=0); the CUDA build uses cuda/device_count.cu instead.
#include "ctxcache/device/cuda_probe.h"

#if !CTXCACHE_WITH_CUDA
namespace ctxcache::device {

int cudaDeviceCount(char const** reason) noexcept {
    if (reason) *reason = "ctxcache was built without CUDA";
    return -1;
}

bool cudaCompiled() noexcept { return false; }

}  // namespace ctxcache::device
#endif
