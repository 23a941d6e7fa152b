// A CPU stand-in for the few CUDA runtime names cuda/device_kernels.cu uses, so that the REAL kernels compile as
// C++ and run on host threads (tests/cpp/emulation). Not a CUDA implementation: one block runs at a time, its
// threads are std::threads, __shared__ is a function-local static, __syncthreads a barrier of the block.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

inline thread_local dim3 threadIdx_;
inline thread_local dim3 blockIdx_;
inline dim3 blockDim_;
inline dim3 gridDim_;
inline uint64_t launches = 0;

class Barrier {
public:
    void reset(unsigned count) {
        count_ = count;
        waiting_ = 0;
    }
    void wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        unsigned const generation = generation_;
        if (++waiting_ == count_) {
            waiting_ = 0;
            ++generation_;
            cv_.notify_all();
        } else {
            cv_.wait(lock, [&] { return generation != generation_; });
        }
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    unsigned count_ = 0, waiting_ = 0, generation_ = 0;
};
inline Barrier barrier;

// Runs every block in turn, each with blockDim.x concurrent threads (1-D blocks only, as the kernels use).
template <class Kernel, class... Args>
void run(dim3 grid, dim3 block, Kernel kernel, Args... args) {
    ++launches;
    gridDim_ = grid;
    blockDim_ = block;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                barrier.reset(block.x);
                std::vector<std::thread> threads;
                threads.reserve(block.x);
                for (unsigned t = 0; t < block.x; ++t)
                    threads.emplace_back([=] {
                        threadIdx_ = dim3(t);
                        blockIdx_ = dim3(x, y, z);
                        kernel(args...);
                    });
                for (auto& thread : threads) thread.join();
            }
}

template <class Kernel>
auto launcher(dim3 grid, dim3 block, Kernel kernel) {
    return [=](auto... args) { run(grid, block, kernel, args...); };
}

}  // namespace emu

// ---- runtime API stand-ins: host memory, everything synchronous (kernels run to completion at launch) ----

enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInvalidValue = 1 };
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
    void* devicePointer;
    void* hostPointer;
};
struct cudaDeviceProp {
    char name[256];
    int major;
    int minor;
    int multiProcessorCount;
    size_t totalGlobalMem;
};
inline constexpr unsigned cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaEventDisableTiming = 2;
inline constexpr unsigned cudaHostAllocDefault = 0;
inline constexpr unsigned cudaHostAllocPortable = 1;
inline constexpr unsigned cudaHostAllocMapped = 2;

inline char const* cudaGetErrorName(cudaError_t) { return "cudaErrorEmulated"; }
inline char const* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int) {
    *value = 1;
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
    *p = cudaDeviceProp{};
    std::snprintf(p->name, sizeof p->name, "emulated");
    p->major = 9;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
    static uintptr_t next = 0x5;  // a distinct (never dereferenced) stream each time
    *s = reinterpret_cast<cudaStream_t>(next++);
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
    *e = reinterpret_cast<cudaEvent_t>(0x7);
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = ::operator new(bytes, std::align_val_t{256});
    std::memset(*p, 0x5A, bytes);  // garbage, as cudaMalloc gives: the backend must zero it itself
    return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
    ::operator delete(p, std::align_val_t{256});
    return cudaSuccess;
}
// Pinned host memory: garbage like cudaMalloc's, page-aligned like the driver's, and remembered so that
// cudaPointerGetAttributes calls it host memory mapped at its own address (UVA).
namespace emu {
inline std::mutex hostMutex;
inline std::map<uintptr_t, size_t> hostAllocations;  // begin -> bytes
}  // namespace emu
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
    *p = ::operator new(bytes, std::align_val_t{4096});
    std::memset(*p, 0x5A, bytes);
    std::lock_guard<std::mutex> lock(emu::hostMutex);
    emu::hostAllocations[reinterpret_cast<uintptr_t>(*p)] = bytes;
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
    {
        std::lock_guard<std::mutex> lock(emu::hostMutex);
        emu::hostAllocations.erase(reinterpret_cast<uintptr_t>(p));
    }
    ::operator delete(p, std::align_val_t{4096});
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
    std::memset(p, value, bytes);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, void const* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}
// A pointer inside a cudaHostAlloc block is mapped pinned host memory (device pointer = host pointer, as under
// UVA); every other pointer is "device memory of device 0" (the stand-in's device memory is host memory), so
// external memory is accepted as on a real device.
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, void const* p) {
    *a = cudaPointerAttributes{};
    a->type = cudaMemoryTypeDevice;
    auto const address = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(emu::hostMutex);
    auto it = emu::hostAllocations.upper_bound(address);
    if (it != emu::hostAllocations.begin() && address < (--it)->first + it->second) {
        a->type = cudaMemoryTypeHost;
        a->hostPointer = const_cast<void*>(p);
        a->devicePointer = const_cast<void*>(p);
    }
    return cudaSuccess;
}

#define threadIdx ::emu::threadIdx_
#define blockIdx ::emu::blockIdx_
#define blockDim ::emu::blockDim_
#define gridDim ::emu::gridDim_
#define __syncthreads() ::emu::barrier.wait()
#define CTXC_LAUNCH(kernel, grid, block, stream) ::emu::launcher(dim3(grid), dim3(block), kernel)
