// Dense-to-paged K/V scatter and the head-major gather on the CPU backend: exact bytes, the round trip through
// the page table, and every refusal leaving the pool untouched.
#include <gtest/gtest.h>

#include "ctxcache/device/kv_gather.h"
#include "ctxcache/device/kv_scatter.h"
#include "ctxcache/errors.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

namespace {

// One layer, 4 K pages of 2 tokens, 2 heads x 2 dims: a token is 4 elements, a page 8.
struct Paged {
    std::unique_ptr<DeviceBackend> backend = createCpuBackend();
    KvPagePool pool;
    KvPageTable table;
    Paged() : pool(*backend, KvPoolGeometry{4, 2, DType::kFp16, {{2, 2}}}), table(*backend, 2, 3, 4) {}
    std::vector<uint16_t> layer() const {
        std::vector<uint16_t> out(8 * 8);
        pool.readPages(0, 0, 8, out.data(), out.size() * 2);
        return out;
    }
};

// Value of (sequence b, token t, head h, dim d), distinct for K and V.
uint16_t value(int half, int b, int t, int h, int d) {
    return static_cast<uint16_t>(1000 * (half + 1) + 100 * b + 10 * t + 2 * h + d);
}

std::vector<uint16_t> dense(int half, int batch, int seqLen, DenseKvLayout layout) {
    std::vector<uint16_t> out(static_cast<size_t>(batch) * seqLen * 4);
    for (int b = 0; b < batch; ++b)
        for (int t = 0; t < seqLen; ++t)
            for (int h = 0; h < 2; ++h)
                for (int d = 0; d < 2; ++d)
                    out[static_cast<size_t>(denseKvIndexIn(static_cast<int32_t>(layout), b, t, h, d, seqLen, 2, 2))] =
                        value(half, b, t, h, d);
    return out;
}

}  // namespace

TEST(KvScatter, WritesEachTokenAtItsPositionThroughThePageTableInBothLayouts) {
    for (DenseKvLayout const layout : {DenseKvLayout::kTokenMajor, DenseKvLayout::kHeadMajor}) {
        Paged p;
        int32_t const seq0[] = {2, 0};  // positions 0-1 on page 2, 2-3 on page 0
        int32_t const seq1[] = {3, 1};
        p.table.setRow(0, seq0, 2);
        p.table.setRow(1, seq1, 2);
        p.table.upload();
        KvScatterRequest r;
        r.batch = 2;
        r.seqLen = 2;
        r.firstPosition = 1;  // tokens land at positions 1 and 2: the end of one page, the start of the next
        r.layout = layout;
        size_t const bytes = scatterInputBytes(p.pool, r);
        ASSERT_EQ(bytes, 2u * 2 * 4 * 2);
        std::vector<uint16_t> const k = dense(0, 2, 2, layout), v = dense(1, 2, 2, layout);
        uint64_t const kernels = p.backend->counters().kernels;
        scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), bytes);
        EXPECT_EQ(p.backend->counters().kernels, kernels + 1);  // K and V of both sequences in one launch
        std::vector<uint16_t> const layer = p.layer();
        auto at = [&](int flatPage, int token, int h, int d) {
            return layer[static_cast<size_t>(flatPage * 8 + token * 4 + h * 2 + d)];
        };
        for (int h = 0; h < 2; ++h) {
            for (int d = 0; d < 2; ++d) {
                EXPECT_EQ(at(2, 1, h, d), value(0, 0, 0, h, d));      // seq 0 token 0 -> position 1: page 2, slot 1
                EXPECT_EQ(at(0, 0, h, d), value(0, 0, 1, h, d));      // seq 0 token 1 -> position 2: page 0, slot 0
                EXPECT_EQ(at(2 + 4, 1, h, d), value(1, 0, 0, h, d));  // its V page is K + numPages
                EXPECT_EQ(at(3, 1, h, d), value(0, 1, 0, h, d));
                EXPECT_EQ(at(1 + 4, 0, h, d), value(1, 1, 1, h, d));
                EXPECT_EQ(at(2, 0, h, d), 0);  // position 0 was not written
                EXPECT_EQ(at(0, 1, h, d), 0);  // nor position 3
            }
        }
        // The gather of positions [0, 3) in the same layout reads the tokens back where the scatter put them.
        KvGatherRequest g;
        g.batch = 2;
        g.seqLen = 3;
        g.layout = layout;
        size_t const outBytes = gatherOutputBytes(p.pool, g);
        std::vector<uint16_t> kOut(outBytes / 2), vOut(outBytes / 2);
        DeviceBuffer kb(*p.backend, outBytes), vb(*p.backend, outBytes);
        gatherPagedKv(p.pool, p.table, nullptr, g, kb.data(), vb.data(), outBytes);
        kOut = asVector<uint16_t>(readBuffer(kb));
        for (int b = 0; b < 2; ++b)
            for (int t = 1; t < 3; ++t)
                for (int h = 0; h < 2; ++h)
                    for (int d = 0; d < 2; ++d)
                        EXPECT_EQ(kOut[static_cast<size_t>(
                                      denseKvIndexIn(static_cast<int32_t>(layout), b, t, h, d, 3, 2, 2))],
                                  value(0, b, t - 1, h, d));
    }
}

TEST(KvGather, HeadMajorIsTheTransposeOfTokenMajor) {
    Paged p;
    std::vector<uint16_t> layer(8 * 8);
    for (size_t i = 0; i < layer.size(); ++i) layer[i] = static_cast<uint16_t>(i + 1);
    p.pool.writePages(0, 0, 8, layer.data(), layer.size() * 2);
    int32_t const seq[] = {1, 3, 0};
    p.table.setRow(0, seq, 3);
    p.table.upload();
    KvGatherRequest r;
    r.batch = 1;
    r.seqLen = 5;
    size_t const bytes = gatherOutputBytes(p.pool, r);
    DeviceBuffer k1(*p.backend, bytes), v1(*p.backend, bytes), k2(*p.backend, bytes), v2(*p.backend, bytes);
    gatherPagedKv(p.pool, p.table, nullptr, r, k1.data(), v1.data(), bytes);
    r.layout = DenseKvLayout::kHeadMajor;
    gatherPagedKv(p.pool, p.table, nullptr, r, k2.data(), v2.data(), bytes);
    std::vector<uint16_t> const tokenMajor = asVector<uint16_t>(readBuffer(v1));
    std::vector<uint16_t> const headMajor = asVector<uint16_t>(readBuffer(v2));
    for (int t = 0; t < 5; ++t)
        for (int h = 0; h < 2; ++h)
            for (int d = 0; d < 2; ++d)
                EXPECT_EQ(headMajor[static_cast<size_t>((h * 5 + t) * 2 + d)],
                          tokenMajor[static_cast<size_t>((t * 2 + h) * 2 + d)]);
    EXPECT_EQ(tokenMajor[0], layer[(1 + 4) * 8]);  // V of K page 1, token 0, head 0, dim 0
}

TEST(KvScatter, RefusesUnmappedEntriesDirtyTablesAndWrongSizesWithoutWriting) {
    Paged p;
    int32_t const seq0[] = {2};
    p.table.setRow(0, seq0, 1);
    p.table.upload();
    std::vector<uint16_t> const k(3 * 4, 7), v(3 * 4, 9);
    KvScatterRequest r;
    r.batch = 1;
    r.seqLen = 3;  // positions 0-2: logical page 1 is unmapped
    EXPECT_THROW(scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), k.size() * 2), ContractError);
    r.seqLen = 2;
    EXPECT_THROW(scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), k.size() * 2),
                 ContractError);  // 24 != 16 bytes
    r.firstPosition = 5;  // past the table's 3 pages of 2 tokens
    EXPECT_THROW(scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), 16), ContractError);
    r.firstPosition = 0;
    r.batch = 3;  // more slots than the table has
    EXPECT_THROW(scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), 48), ContractError);
    r.batch = 1;
    r.layout = static_cast<DenseKvLayout>(7);
    EXPECT_THROW(scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), 16), ContractError);
    r.layout = DenseKvLayout::kTokenMajor;
    int32_t const seq1[] = {3};
    p.table.setRow(1, seq1, 1);  // dirty
    EXPECT_THROW(scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), 16), ContractError);
    EXPECT_EQ(p.layer(), std::vector<uint16_t>(64, 0));  // nothing was written by any refused call
    p.table.upload();
    scatterPagedKv(p.pool, p.table, r, k.data(), v.data(), 16);
    EXPECT_EQ(p.layer()[2 * 8], 7);
    EXPECT_EQ(p.layer()[(2 + 4) * 8], 9);
}
