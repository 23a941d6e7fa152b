// Whether this build has the CUDA backend and how many devices it sees. Implemented in cuda/device_count.cu
// when nvcc built the library, else by cpu_only_probe.cpp. Never throws.
#pragma once

namespace ctxcache::device {

// > 0: devices usable; 0: CUDA works but sees no device; < 0: -cudaError_t (e.g. -35, no driver) or -1 when
// the library was built without CUDA. *reason (optional) gets a static description.
int cudaDeviceCount(char const** reason) noexcept;
bool cudaCompiled() noexcept;

}  // namespace ctxcache::device
