// Refusals under a small address space, checked in a fresh process: the test binary started again for the one
// test (GoogleTest's "threadsafe" death-test style: the test runs again up to the call, then only the body, under
// RLIMIT_AS set to what the process uses plus the headroom). Not a fork: a fork inherits the heap's free memory,
// which RLIMIT_AS does not count, so what the body could allocate would depend on the tests that ran before it in
// the same process (run as one process, the suites once let three expected refusals succeed or name another
// allocation). Not under AddressSanitizer, whose shadow memory needs terabytes of address space: callers skip.
// Only the C++ standard library, POSIX and GoogleTest: the C ABI's suites include it too.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

namespace ctxcache::test {

// In this process: limits the address space to what it uses plus `headroom` bytes, then runs `body`. The exit
// code: 0 when it returned true, 1 when false, 3 when the limit could not be set.
inline int runWithinAddressSpace(size_t headroom, std::function<bool()> const& body) {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
        std::fclose(f);
    }
    rlim_t const limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + headroom;
    rlimit const rl{limit, limit};
    if (pages == 0 || setrlimit(RLIMIT_AS, &rl) != 0) return 3;
    return body() ? 0 : 1;
}

// Expects `body` to return true in a fresh process whose address space may grow by only `headroom` bytes.
inline void expectTrueWithinAddressSpace(size_t headroom, std::function<bool()> const& body) {
    std::string const style = GTEST_FLAG_GET(death_test_style);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(std::_Exit(runWithinAddressSpace(headroom, body)), ::testing::ExitedWithCode(0), "");
    GTEST_FLAG_SET(death_test_style, style);
}

// The same for a body that completes (returns) or fails (throws). Refusals that allocate first fail there with
// std::bad_alloc.
inline void expectCompletesWithinAddressSpace(size_t headroom, std::function<void()> const& body) {
    expectTrueWithinAddressSpace(headroom, [&] {
        try {
            body();
        } catch (...) {
            return false;
        }
        return true;
    });
}

}  // namespace ctxcache::test
