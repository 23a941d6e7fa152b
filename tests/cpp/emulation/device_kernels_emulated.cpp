// cuda/device_kernels.cu compiled as C++ against the CPU stand-in of cuda_shim/ (see cuda_runtime_api.h). Its
// namespace is renamed so that a CUDA build can link the emulated and the real kernels into one test binary.
#include "ctxcache/device/layout.h"
#include "cuda_runtime_api.h"

#define kernels emulated_kernels
#include "device_kernels.cu"
#undef kernels
