// What several C ABI suites share, through the shared library's C header only: the refusal assertion (status ==
// want, and ctxc_last_error() is "<function>: ..." containing `needle`), a CPU backend, and a byte pattern that
// differs per seed. Header-only; needs GoogleTest (the fuzz targets use device_creates.h instead).
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ctxcache.h"

inline ::testing::AssertionResult refused(ctxc_status_t got, ctxc_status_t want, char const* function,
                                          char const* needle) {
    std::string const message = ctxc_last_error();
    if (got != want)
        return ::testing::AssertionFailure() << "status " << ctxc_status_string(got) << ", expected "
                                             << ctxc_status_string(want) << " (" << message << ")";
    std::string const prefix = std::string(function) + ": ";
    if (message.compare(0, prefix.size(), prefix) != 0)
        return ::testing::AssertionFailure() << "last error \"" << message << "\" is not from " << function;
    if (message.find(needle) == std::string::npos)
        return ::testing::AssertionFailure()
               << "last error \"" << message << "\" does not mention \"" << needle << "\"";
    return ::testing::AssertionSuccess();
}

// maxTableBytes: the backend's descriptor table (0: its default).
inline ctxc_device_backend_t* cpuBackend(size_t maxTableBytes = 0) {
    ctxc_device_backend_options_t o;
    ctxc_device_backend_options_init(&o);
    o.kind = CTXC_BACKEND_CPU;
    if (maxTableBytes) o.max_table_bytes = maxTableBytes;
    ctxc_device_backend_t* b = nullptr;
    EXPECT_EQ(ctxc_device_backend_create(&o, &b), CTXC_OK) << ctxc_last_error();
    return b;
}

inline std::vector<uint8_t> pattern(size_t n, unsigned seed) {
    std::vector<uint8_t> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed * 37u + i * 11u + 1u);
    return out;
}
