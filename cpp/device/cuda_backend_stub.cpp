// createCudaBackend of a CPU-only build (CTXCACHE_WITH_CUDA=0); the CUDA build defines it in cuda/cuda_backend.cu.
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/device_error.h"

#if !CTXCACHE_WITH_CUDA
namespace ctxcache::device {

std::unique_ptr<DeviceBackend> createCudaBackend(BackendOptions const&) {
    throw BackendUnavailableError("createCudaBackend: ctxcache was built without CUDA");
}

}  // namespace ctxcache::device
#endif
