// Paged-to-dense gather (with fp8 dequantisation and zero fill) and chunked FNV-1a on the CPU backend.
#include <gtest/gtest.h>

#include "ctxcache/device/chunked_hash.h"
#include "ctxcache/device/kv_gather.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

namespace {

// One layer, 3 K pages of 2 tokens, 1 head x 2 dims: a token is 2 elements, a page 4 elements.
struct Paged {
    std::unique_ptr<DeviceBackend> backend = createCpuBackend();
    KvPagePool pool;
    KvPageTable table;
    KvLengths lengths;
    explicit Paged(DType dtype)
        : pool(*backend, KvPoolGeometry{3, 2, dtype, {{1, 2}}}), table(*backend, 2, 3, 3), lengths(*backend, 2) {}
};

}  // namespace

TEST(KvGather, GathersThroughThePageTableAndZeroFillsUnmappedPagesAndTokensPastTheLength) {
    Paged p(DType::kFp16);
    // Element values: flat page f, token t, dim d -> 100 * f + 10 * t + d (as uint16 bit patterns).
    std::vector<uint16_t> layer(6 * 4);
    for (int f = 0; f < 6; ++f)
        for (int t = 0; t < 2; ++t)
            for (int d = 0; d < 2; ++d)
                layer[static_cast<size_t>(f * 4 + t * 2 + d)] = static_cast<uint16_t>(100 * f + 10 * t + d);
    p.pool.writePages(0, 0, 6, layer.data(), layer.size() * 2);
    int32_t const seq0[] = {2, 0};  // tokens 0-1 from page 2, tokens 2-3 from page 0
    int32_t const seq1[] = {1};     // page 1, then unmapped
    p.table.setRow(0, seq0, 2);
    p.table.setRow(1, seq1, 1);
    p.table.upload();
    int32_t const lens[] = {3, 5};  // sequence 0 stops after token 2
    p.lengths.set(lens, 2);
    KvGatherRequest r;
    r.batch = 2;
    r.seqLen = 5;  // 3 logical pages
    size_t const bytes = gatherOutputBytes(p.pool, r);
    EXPECT_EQ(bytes, 2u * 5 * 2 * 2);
    DeviceBuffer k(*p.backend, bytes), v(*p.backend, bytes);
    uint64_t const kernels = p.backend->counters().kernels;
    gatherPagedKv(p.pool, p.table, &p.lengths, r, k.data(), v.data(), bytes);
    EXPECT_EQ(p.backend->counters().kernels, kernels + 1);
    std::vector<uint16_t> const expectedK = {
        200, 201, 210, 211, 0, 1, 0, 0, 0, 0,    // seq 0: page 2 (t0, t1), page 0 (t2; t3 past length), t4 unmapped
        100, 101, 110, 111, 0, 0, 0, 0, 0, 0};   // seq 1: page 1, then unmapped pages
    std::vector<uint16_t> const expectedV = {500, 501, 510, 511, 300, 301, 0, 0, 0, 0,
                                             400, 401, 410, 411, 0,   0,   0, 0, 0, 0};
    EXPECT_EQ(asVector<uint16_t>(readBuffer(k)), expectedK);
    EXPECT_EQ(asVector<uint16_t>(readBuffer(v)), expectedV);
    // Without lengths every mapped token counts.
    gatherPagedKv(p.pool, p.table, nullptr, r, k.data(), v.data(), bytes);
    EXPECT_EQ(asVector<uint16_t>(readBuffer(k))[6], 10);
}

TEST(KvGather, DequantisesFp8WithPerHalfScales) {
    Paged p(DType::kFp8E4m3);
    // K page 0: 1.0 (0x38), 1.5 (0x3C), -2 (0xC0), 448 (0x7E); V page (flat 3): 0.5 (0x30) x 4.
    Bytes const kPage = {0x38, 0x3C, 0xC0, 0x7E}, vPage = {0x30, 0x30, 0x30, 0x30};
    p.pool.writePages(0, 0, 1, kPage.data(), 4);
    p.pool.writePages(0, 3, 1, vPage.data(), 4);
    int32_t const pages[] = {0};
    p.table.setRow(0, pages, 1);
    p.table.upload();
    KvGatherRequest r;
    r.batch = 1;
    r.seqLen = 2;
    r.kScale = 2.0f;
    r.vScale = 4.0f;
    for (DType out : {DType::kFp16, DType::kBf16, DType::kFp32}) {
        r.outDtype = out;
        size_t const bytes = gatherOutputBytes(p.pool, r);
        DeviceBuffer k(*p.backend, bytes), v(*p.backend, bytes);
        gatherPagedKv(p.pool, p.table, nullptr, r, k.data(), v.data(), bytes);
        if (out == DType::kFp16) {
            EXPECT_EQ(asVector<uint16_t>(readBuffer(k)),
                      (std::vector<uint16_t>{0x4000, 0x4200, 0xC400, 0x6300}));  // 2, 3, -4, 896
            EXPECT_EQ(asVector<uint16_t>(readBuffer(v)), (std::vector<uint16_t>{0x4000, 0x4000, 0x4000, 0x4000}));
        } else if (out == DType::kBf16) {
            EXPECT_EQ(asVector<uint16_t>(readBuffer(k)), (std::vector<uint16_t>{0x4000, 0x4040, 0xC080, 0x4460}));
        } else {
            EXPECT_EQ(asVector<float>(readBuffer(k)), (std::vector<float>{2.0f, 3.0f, -4.0f, 896.0f}));
        }
    }
}

TEST(KvGather, InconsistentInputsAreRefused) {
    Paged p(DType::kBf16);
    KvGatherRequest r;
    r.batch = 1;
    r.seqLen = 7;  // needs 4 pages, the table has 3 per sequence
    r.outDtype = DType::kBf16;
    DeviceBuffer k(*p.backend, 1024), v(*p.backend, 1024);
    expectContractError([&] { gatherPagedKv(p.pool, p.table, nullptr, r, k.data(), v.data(), 1024); }, "more pages");
    r.seqLen = 2;
    r.outDtype = DType::kFp32;
    expectContractError([&] { gatherPagedKv(p.pool, p.table, nullptr, r, k.data(), v.data(), 1024); }, "wrong dtype");
    r.outDtype = DType::kBf16;
    expectContractError([&] { gatherPagedKv(p.pool, p.table, nullptr, r, k.data(), v.data(), 4); }, "8 needed");
    int32_t const pages[] = {1};
    p.table.setRow(0, pages, 1);
    expectContractError([&] { gatherPagedKv(p.pool, p.table, nullptr, r, k.data(), v.data(), 1024); }, "upload");
    p.table.upload();
    r.batch = 2;
    expectContractError([&] { gatherPagedKv(p.pool, p.table, &p.lengths, r, k.data(), v.data(), 1024); },
                        "active lengths");
    KvPageTable wrong(*p.backend, 2, 3, 4);
    r.batch = 1;
    expectContractError([&] { gatherPagedKv(p.pool, wrong, nullptr, r, k.data(), v.data(), 1024); },
                        "addresses 4 pages");
}

TEST(ChunkedHash, FollowsTheDocumentedChunkingAndReduction) {
    Bytes const data = {'a', 'b', 'c', 'd', 'e'};
    // 2 chunks of ceil(5/2) = 3 bytes: "abc", "de".
    Hash128 const c0 = fnv1a128("abc", 3), c1 = fnv1a128("de", 2);
    Bytes stream = {18, 5, 0, 0, 0, 0, 0, 0, 0};
    for (Hash128 h : {c0, c1})
        for (uint64_t word : {h.hi, h.lo})
            for (int i = 0; i < 8; ++i) stream.push_back(static_cast<unsigned char>(word >> (8 * i)));
    Hash128 const expected = fnv1a128(stream.data(), stream.size());
    EXPECT_EQ(chunkedFnv1a128Host(data.data(), data.size(), 2), expected);
    // Fewer bytes than chunks: trailing chunks are empty and keep the offset basis.
    Hash128 const basis = fnv1a128(nullptr, 0);
    Hash128 const partials[4] = {fnv1a128("a", 1), fnv1a128("b", 1), basis, basis};
    EXPECT_EQ(chunkedFnv1a128Host("ab", 2, 4), combineChunkPartials(partials, 4, 2));
    EXPECT_NE(chunkedFnv1a128Host(data.data(), 5), chunkedFnv1a128Host(data.data(), 4));
    expectContractError([&] { chunkedFnv1a128Host(data.data(), 5, 0); }, "numChunks");
}

TEST(ChunkedHash, DevicePathIsBitIdenticalToTheHostPath) {
    auto backend = createCpuBackend();
    for (size_t size : {size_t{0}, size_t{1}, size_t{2047}, size_t{4096}, size_t{1 << 20}, size_t{(1 << 20) + 13}}) {
        Bytes const data = randomBytes(size, static_cast<uint32_t>(size));
        DeviceBuffer buffer(*backend, size + 16);
        buffer.write(3, data.data(), size);  // an odd offset: chunks start unaligned
        for (uint32_t chunks : {1u, 7u, kDefaultHashChunks}) {
            EXPECT_EQ(chunkedFnv1a128(*backend, buffer.bytes() + 3, size, chunks),
                      chunkedFnv1a128Host(data.data(), size, chunks))
                << size << " bytes, " << chunks << " chunks";
        }
    }
}
