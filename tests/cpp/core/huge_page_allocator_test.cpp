// HugePageAllocator: a large array lands on 2 MiB boundaries in a mapping the kernel was asked to back with huge
// pages (its VmFlags in /proc/self/smaps say "hg"), a small one is an ordinary allocation, contents survive a
// vector's growth across the threshold, and CTXCACHE_HUGE_PAGES=0 (and only "0") turns it off.
#include "ctxcache/detail/huge_page_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ctxcache {
namespace {

using detail::HugePageAllocator;
using detail::kHugePageBytes;

// The VmFlags of the mapping holding `p` in /proc/self/smaps, or "" when it cannot be read.
std::string vmFlagsOf(void const* p) {
    std::ifstream smaps("/proc/self/smaps");
    auto const address = reinterpret_cast<uintptr_t>(p);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long long lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
            inside = lo <= address && address < hi;
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0) return line + " ";
    }
    return "";
}

TEST(HugePageAllocator, ALargeArrayIsAlignedToHugePagesAndAdvisedAsSuch) {
    if (!detail::hugePagesWanted()) GTEST_SKIP() << "CTXCACHE_HUGE_PAGES=0 in this test's environment";
    std::vector<uint64_t, HugePageAllocator<uint64_t>> table(3 * kHugePageBytes / sizeof(uint64_t), 7);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(table.data()) % kHugePageBytes, 0U);
    std::string const flags = vmFlagsOf(table.data());
#if defined(__linux__)
    ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the array";
    EXPECT_NE(flags.find(" hg "), std::string::npos) << flags;
#endif
    for (size_t i = 0; i < table.size(); i += 4096) ASSERT_EQ(table[i], 7U);
}

TEST(HugePageAllocator, ASmallArrayIsAnOrdinaryAllocation) {
    std::vector<uint64_t, HugePageAllocator<uint64_t>> small(1000, 3);
    std::string const flags = vmFlagsOf(small.data());
    EXPECT_EQ(flags.find(" hg "), std::string::npos) << flags;
    EXPECT_EQ(small[999], 3U);
}

TEST(HugePageAllocator, ContentsSurviveGrowthAcrossTheThreshold) {
    std::vector<uint32_t, HugePageAllocator<uint32_t>> v;
    for (uint32_t i = 0; i < 3 * kHugePageBytes / sizeof(uint32_t); ++i) v.push_back(i * 2654435761U);
    for (uint32_t i = 0; i < v.size(); i += 997) ASSERT_EQ(v[i], i * 2654435761U);
    v.resize(10);  // shrink_to_fit moves it back below the threshold: the other deallocate path
    v.shrink_to_fit();
    EXPECT_EQ(v[9], 9 * 2654435761U);
}

TEST(HugePageAllocator, AnAbsurdSizeIsBadAllocNotACrash) {
    HugePageAllocator<uint64_t> a;
    EXPECT_THROW((void)a.allocate(static_cast<size_t>(-1) / 4), std::bad_alloc);
}

TEST(HugePageAllocator, OnlyZeroTurnsItOff) {
    EXPECT_TRUE(detail::hugePagesWantedBy(nullptr));
    EXPECT_TRUE(detail::hugePagesWantedBy(""));
    EXPECT_TRUE(detail::hugePagesWantedBy("1"));
    EXPECT_TRUE(detail::hugePagesWantedBy("00"));
    EXPECT_FALSE(detail::hugePagesWantedBy("0"));
}

}  // namespace
}  // namespace ctxcache
