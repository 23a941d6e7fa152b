// The sim kernels' CUDA launchers of a CPU-only build (CTXCACHE_WITH_CUDA=0): none. The CUDA build defines
// builtinCudaSimLaunchers in cuda/sim_cuda.cu.
#include "sim_launchers.h"

#if !CTXCACHE_WITH_CUDA
namespace ctxcache::sim::detail {

CudaSimLaunchers const* builtinCudaSimLaunchers() noexcept { return nullptr; }

}  // namespace ctxcache::sim::detail
#endif
