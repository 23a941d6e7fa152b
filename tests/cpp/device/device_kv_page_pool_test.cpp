// KvPagePool on the CPU backend: geometry validation, sizes, and page transfers with exact bytes.
#include <gtest/gtest.h>

#include "ctxcache/device/kv_page_pool.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

namespace {
KvPoolGeometry geometry(DType dtype = DType::kFp16) {
    // 3 K pages of 4 tokens; layer 0: 2 heads x 8 dims, layer 1: 1 head x 4 dims.
    return KvPoolGeometry{3, 4, dtype, {{2, 8}, {1, 4}}};
}
}  // namespace

TEST(KvPagePool, SizesFollowTheGeometryAndTheFootprintIsExact) {
    auto backend = createCpuBackend();
    KvPagePool pool(*backend, geometry());
    EXPECT_EQ(pool.tokenBytes(0), 2u * 8 * 2);
    EXPECT_EQ(pool.pageBytes(0), 4u * 32);            // 128
    EXPECT_EQ(pool.layerBytes(0), 2u * 3 * 128);      // 768 (K half then V half)
    EXPECT_EQ(pool.pageBytes(1), 4u * 4 * 2);         // 32
    EXPECT_EQ(pool.layerBytes(1), 2u * 3 * 32);       // 192
    EXPECT_EQ(pool.footprintBytes(), 768u + 256u);    // layer 1 starts at 768; 192 rounds up to 256
    EXPECT_EQ(backend->allocatedBytes(), pool.footprintBytes());
    EXPECT_EQ(static_cast<unsigned char*>(pool.layerData(1)) - static_cast<unsigned char*>(pool.layerData(0)), 768);
    // V page of K page 1 is flat page 1 + 3.
    EXPECT_EQ(static_cast<unsigned char*>(pool.pageData(0, 4)) - static_cast<unsigned char*>(pool.layerData(0)),
              4 * 128);
    KvPagePool fp8(*backend, geometry(DType::kFp8E4m3));
    EXPECT_EQ(fp8.pageBytes(0), 4u * 16);
}

TEST(KvPagePool, InvalidGeometryIsAContractError) {
    auto backend = createCpuBackend();
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{0, 4, DType::kFp16, {{1, 1}}}); }, "numPages");
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{1, 0, DType::kFp16, {{1, 1}}}); }, "pageSize");
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{1, 4, DType::kFp16, {}}); }, "at least one layer");
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{1, 4, DType::kFp16, {{1, 0}}}); }, "layer 0");
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{1, 4, static_cast<DType>(7), {{1, 1}}}); }, "dtype");
    EXPECT_EQ(backend->allocatedBytes(), 0u);
}

TEST(KvPagePool, PagesRoundTripAndOutOfRangeIdsAreRefused) {
    auto backend = createCpuBackend();
    KvPagePool pool(*backend, geometry());
    Bytes const twoPages = pattern(2 * 32, 5);
    pool.writePages(1, 2, 2, twoPages.data(), twoPages.size());  // K page 2 and V page of K page 0 (flat 3)
    Bytes back(2 * 32);
    pool.readPages(1, 2, 2, back.data(), back.size());
    EXPECT_EQ(back, twoPages);
    Bytes layer(pool.layerBytes(1));
    pool.readPages(1, 0, 6, layer.data(), layer.size());
    Bytes expected(192, 0);
    std::copy(twoPages.begin(), twoPages.end(), expected.begin() + 64);
    EXPECT_EQ(layer, expected);
    expectContractError([&] { pool.writePages(1, 5, 2, twoPages.data(), twoPages.size()); }, "outside");
    expectContractError([&] { pool.writePages(2, 0, 1, twoPages.data(), 32); }, "layer 2");
    expectContractError([&] { pool.writePages(1, 0, 1, twoPages.data(), 31); }, "31 bytes");
    expectContractError([&] { pool.pageData(0, 6); }, "flat page 6");
}
