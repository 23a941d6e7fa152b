// What the GPU suites (label `gpu`, and the emulation suite that builds the same files with
// CTXCACHE_TEST_EMULATED_CUDA) share, written once:
// - CTXCACHE_SKIP_WITHOUT_CUDA(), in a fixture's SetUp or a test body: skips the test, with the device probe's
//   reason, when no CUDA device is usable, and fails it instead when CTXCACHE_REQUIRE_GPU=1 (tools/gpu_check asks
//   for the device). It returns from the enclosing void function either way, as GTEST_SKIP and FAIL do. In the
//   emulation suite the (emulated) device is always there and it does nothing.
// - createEmulatedCudaBackend (emulation suite only): the CUDA backend over the CPU stand-in of tests/cpp/emulation.
// - CpuAndCudaBackends: a fixture with a CPU backend (the oracle) and a CUDA one (emulated in the emulation suite).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "ctxcache/device/cuda_probe.h"
#include "ctxcache/device/device_backend.h"

#if defined(CTXCACHE_TEST_EMULATED_CUDA)
#define CTXCACHE_SKIP_WITHOUT_CUDA() \
    do {                             \
    } while (0)
#else
#define CTXCACHE_SKIP_WITHOUT_CUDA()                                                             \
    do {                                                                                         \
        char const* ctxcacheNoCudaReason = "";                                                   \
        if (::ctxcache::device::cudaDeviceCount(&ctxcacheNoCudaReason) <= 0) {                   \
            char const* ctxcacheRequireGpu = std::getenv("CTXCACHE_REQUIRE_GPU");                \
            if (ctxcacheRequireGpu && std::string(ctxcacheRequireGpu) == "1")                    \
                FAIL() << "CTXCACHE_REQUIRE_GPU=1 but no CUDA device: " << ctxcacheNoCudaReason; \
            GTEST_SKIP() << "no CUDA device: " << ctxcacheNoCudaReason;                          \
        }                                                                                        \
    } while (0)
#endif

#if defined(CTXCACHE_TEST_EMULATED_CUDA)
namespace ctxcache::device {
std::unique_ptr<DeviceBackend> createEmulatedCudaBackend(BackendOptions const& options);
}
#endif

class CpuAndCudaBackends : public ::testing::Test {
protected:
    void SetUp() override {
        CTXCACHE_SKIP_WITHOUT_CUDA();
        cpu = ::ctxcache::device::createCpuBackend();
        cuda = makeCuda();
    }

    ::ctxcache::device::DeviceBackend& backend(int i) { return i == 0 ? *cpu : *cuda; }

    // Another CUDA backend (emulated in the emulation suite).
    static std::unique_ptr<::ctxcache::device::DeviceBackend> makeCuda(
        ::ctxcache::device::BackendOptions const& options = {}) {
#if defined(CTXCACHE_TEST_EMULATED_CUDA)
        return ::ctxcache::device::createEmulatedCudaBackend(options);
#else
        return ::ctxcache::device::createCudaBackend(options);
#endif
    }

    std::unique_ptr<::ctxcache::device::DeviceBackend> cpu;
    std::unique_ptr<::ctxcache::device::DeviceBackend> cuda;
};
