// cuda/sim_kernels.cu and cuda/sim_cuda.cu (the reference model's kernels and their launcher table) compiled as
// C++ against the CPU stand-in of cuda_shim/, renamed so that they link beside the real ones of a CUDA build, and
// installed as the table every SimModel on a CUDA backend uses in this binary, whose CUDA backends are all
// emulated (createEmulatedCudaBackend).
#include "ctxcache/sim/sim_math.h"
#include "cuda_runtime_api.h"

#define kernels emulated_kernels
#define builtinCudaSimLaunchers emulatedCudaSimLaunchers
#include "sim_cuda.cu"
#include "sim_kernels.cu"
#undef builtinCudaSimLaunchers
#undef kernels

namespace {

struct InstallEmulatedSimKernels {
    InstallEmulatedSimKernels() {
        ctxcache::sim::detail::replaceCudaSimLaunchers(ctxcache::sim::detail::emulatedCudaSimLaunchers());
    }
} const installEmulatedSimKernels;

}  // namespace
