// cuda/cuda_backend.cu (the CUDA backend's glue: tables, staging, launches, counters) compiled as C++ against
// the CPU stand-in of cuda_shim/, over the emulated kernels of device_kernels_emulated.cpp. Renamed so that it
// links beside the real backend: createEmulatedCudaBackend() builds it on any machine.
#include "ctxcache/device/layout.h"
#include "cuda_runtime_api.h"

#define kernels emulated_kernels
#define createCudaBackend createEmulatedCudaBackend
#define cudaBackendAvailable emulatedCudaBackendAvailable
#define CudaBackend EmulatedCudaBackend
#include "cuda_backend.cu"
#undef CudaBackend
#undef cudaBackendAvailable
#undef createCudaBackend
#undef kernels

namespace ctxcache::device {
bool emulatedCudaBackendAvailable(std::string* reason) {
    if (reason) reason->clear();
    return true;
}
}  // namespace ctxcache::device
