// Batch compaction, execution-row rebasing and device KV lengths on the CPU backend, with exact expectations.
#include <gtest/gtest.h>

#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/kv_lengths.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

TEST(BatchCompaction, PlanKeepsOnlyTheRowsThatMove) {
    std::vector<RowMove> moves;
    int32_t const map[] = {0, -1, 1, -1, 2};
    planCompaction("test", map, 5, 3, moves);
    ASSERT_EQ(moves.size(), 2u);
    EXPECT_EQ(moves[0].from, 2);
    EXPECT_EQ(moves[0].to, 1);
    EXPECT_EQ(moves[1].from, 4);
    EXPECT_EQ(moves[1].to, 2);
    int32_t const identity[] = {0, 1, -1};
    planCompaction("test", identity, 3, 2, moves);
    EXPECT_TRUE(moves.empty());
}

TEST(BatchCompaction, OverlappingReorderingAndIncompleteMapsAreRefused) {
    std::vector<RowMove> moves;
    int32_t const overlapping[] = {0, 0};
    expectContractError([&] { planCompaction("op", overlapping, 2, 1, moves); }, "overlapping");
    int32_t const reordering[] = {1, 0};
    expectContractError([&] { planCompaction("op", reordering, 2, 2, moves); }, "reorders");
    int32_t const gap[] = {0, 2, -1};
    expectContractError([&] { planCompaction("op", gap, 3, 3, moves); }, "reorders or leaves a gap");
    int32_t const outside[] = {0, 5};
    expectContractError([&] { planCompaction("op", outside, 2, 2, moves); }, "outside");
    int32_t const few[] = {0, -1};
    expectContractError([&] { planCompaction("op", few, 2, 2, moves); }, "1 rows survive");
    expectContractError([&] { planCompaction("op", few, 2, 3, moves); }, "exceeds oldBatch");
}

TEST(BatchCompaction, CompactsInPlaceForAnyElementSize) {
    auto backend = createCpuBackend();
    for (size_t rowBytes : {size_t{1}, size_t{2}, size_t{4}, size_t{12}, size_t{48}, size_t{37}}) {
        DeviceBuffer buffer(*backend, 6 * rowBytes);
        Bytes const data = pattern(6 * rowBytes, static_cast<uint32_t>(rowBytes));
        buffer.write(0, data.data(), data.size());
        int32_t const map[] = {-1, 0, -1, 1, 2, -1};
        compactBatch(*backend, buffer.data(), rowBytes, 6, map, 6, 3);
        Bytes expected = data;  // rows 1, 3, 4 -> 0, 1, 2; rows 3.. keep what they held
        std::copy(data.begin() + static_cast<long>(1 * rowBytes), data.begin() + static_cast<long>(2 * rowBytes),
                  expected.begin());
        std::copy(data.begin() + static_cast<long>(3 * rowBytes), data.begin() + static_cast<long>(5 * rowBytes),
                  expected.begin() + static_cast<long>(rowBytes));
        EXPECT_EQ(readBuffer(buffer), expected) << "rowBytes " << rowBytes;
    }
    DeviceBuffer small(*backend, 8);
    int32_t const map[] = {-1, 0, 1};
    expectContractError([&] { compactBatch(*backend, small.data(), 4, 2, map, 3, 2); }, "exceeds the tensor");
}

TEST(BatchCompaction, RebasesExecutionRowIndices) {
    auto backend = createCpuBackend();
    // 4 sequences x 3 rows; sequences 0 and 2 retire, 1 -> 0, 3 -> 1.
    std::vector<int32_t> const indices = {0, 3, 5, 7, 9, 11, -1, 12, 4};
    DeviceBuffer buffer(*backend, indices.size() * 4);
    buffer.write(0, indices.data(), indices.size() * 4);
    int32_t const map[] = {-1, 0, -1, 1};
    rebaseExecutionRowIndices(*backend, static_cast<int32_t*>(buffer.data()), static_cast<int64_t>(indices.size()), map,
                              4, 2, 3);
    EXPECT_EQ(asVector<int32_t>(readBuffer(buffer)), (std::vector<int32_t>{-1, 0, 2, -1, 3, 5, -1, -1, 1}));
    int32_t const bad[] = {1, 0, -1, -1};
    expectContractError([&] {
        rebaseExecutionRowIndices(*backend, static_cast<int32_t*>(buffer.data()), 1, bad, 4, 2, 3);
    }, "reorders");
    expectContractError([&] {
        rebaseExecutionRowIndices(*backend, static_cast<int32_t*>(buffer.data()), 1, map, 4, 2, 0);
    }, "rowsPerSequence");
}

TEST(KvLengths, SetAddCompactAndRead) {
    auto backend = createCpuBackend();
    KvLengths lengths(*backend, 8);
    int32_t const reuse[] = {128, 0, 64, 5};
    lengths.set(reuse, 4);
    EXPECT_EQ(lengths.activeBatch(), 4);
    lengths.add(1);
    EXPECT_EQ(lengths.read(), (std::vector<int32_t>{129, 1, 65, 6}));
    KvLengths accepted(*backend, 8);
    int32_t const tokens[] = {3, 0, 2, 1};
    accepted.set(tokens, 4);
    lengths.add(accepted);
    EXPECT_EQ(lengths.read(), (std::vector<int32_t>{132, 1, 67, 7}));
    int32_t const map[] = {0, -1, 1, -1};
    uint64_t const kernels = backend->counters().kernels;
    lengths.compact(map, 4, 2);
    EXPECT_EQ(backend->counters().kernels, kernels + 1);
    EXPECT_EQ(lengths.activeBatch(), 2);
    EXPECT_EQ(lengths.read(), (std::vector<int32_t>{132, 67}));
}

TEST(KvLengths, InvalidCallsAreRefused) {
    auto backend = createCpuBackend();
    KvLengths lengths(*backend, 2);
    int32_t const three[] = {1, 2, 3};
    expectContractError([&] { lengths.set(three, 3); }, "count 3");
    int32_t const negative[] = {-1};
    expectContractError([&] { lengths.set(negative, 1); }, "negative");
    lengths.set(three, 2);
    KvLengths other(*backend, 2);
    other.set(three, 1);
    expectContractError([&] { lengths.add(other); }, "cover 1");
    int32_t const map[] = {0};
    expectContractError([&] { lengths.compact(map, 1, 1); }, "active batch is 2");
    expectContractError([&] { KvLengths(*backend, 0); }, "maxBatch");
    EXPECT_EQ(lengths.read(), (std::vector<int32_t>{1, 2}));
}
