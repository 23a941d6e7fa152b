// The CUDA kernels of cuda/device_kernels.cu, compiled as C++ and run on CPU threads (cuda_shim/), against the
// CPU backend (the oracle), byte for byte. This is no substitute for the `gpu` suite: it cannot see the memory
// model, occupancy or the CUDA runtime. It does run the kernels' own index math, alignment paths, block/thread
// decomposition, fp8 lookup table and barrier, and the in-place compaction with every thread of a block running
// concurrently, on every machine.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/device_backend.h"

#define kernels emulated_kernels  // device_kernels_emulated.cpp's name for the emulated kernels
#include "device_kernels.cuh"
#undef kernels

using namespace ctxcache;
using namespace ctxcache::device;

namespace {

using Bytes = std::vector<unsigned char>;

Bytes randomBytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    Bytes out(n);
    for (auto& b : out) b = static_cast<unsigned char>(rng());
    return out;
}

// Host memory with a chosen misalignment from a 256-byte boundary.
struct Arena {
    explicit Arena(size_t bytes, size_t offset = 0) : storage(bytes + 512), offset_(offset) {}
    unsigned char* data() {
        auto const base = reinterpret_cast<uintptr_t>(storage.data());
        return storage.data() + ((256 - base % 256) % 256) + offset_;
    }
    Bytes storage;
    size_t offset_;
};

// Runs an op on the CPU backend over a copy of `initial` placed at the same misalignment, returns the result.
template <class Op>
Bytes oracle(Bytes const& initial, size_t offset, Op&& op) {
    auto cpu = createCpuBackend();
    DeviceBuffer buffer(*cpu, initial.size() + offset);
    buffer.write(offset, initial.data(), initial.size());
    op(*cpu, buffer.bytes() + offset);
    Bytes out(initial.size());
    buffer.read(offset, out.data(), out.size());
    return out;
}

}  // namespace

TEST(KernelEmulation, CopySpansMatchesTheOracleForEveryAlignmentPath) {
    size_t const size = 4 * kSpanChunkBytes + 4096;
    Bytes const source = randomBytes(size, 1);
    struct Spec {
        size_t dst;
        long src;
        size_t bytes;
    };
    std::vector<Spec> const specs = {{0, 16, 100},
                                     {128, 132, 77},
                                     {300, 301, 33},
                                     {400, -1, 50},
                                     {1024, 2048, kSpanChunkBytes + 5},
                                     {kSpanChunkBytes + 4000, -1, 20000}};
    // Both run on one arena: [0, size) source, [size, 2 size) destination prefilled with 0xAB.
    Bytes initial(2 * size, 0xAB);
    std::copy(source.begin(), source.end(), initial.begin());
    auto spansOver = [&](unsigned char* base) {
        std::vector<SpanCopy> spans;
        uint64_t chunk = 0;
        for (Spec const& s : specs) {
            spans.push_back(SpanCopy{base + size + s.dst, s.src < 0 ? nullptr : base + s.src, s.bytes, chunk});
            chunk += (s.bytes + kSpanChunkBytes - 1) / kSpanChunkBytes;
        }
        return std::make_pair(spans, chunk);
    };
    Bytes const expected = oracle(initial, 0, [&](DeviceBackend& b, unsigned char* base) {
        auto spans = spansOver(base).first;
        b.copySpans(spans.data(), static_cast<int32_t>(spans.size()));
    });
    Arena arena(initial.size());
    std::memcpy(arena.data(), initial.data(), initial.size());
    auto [spans, chunks] = spansOver(arena.data());
    emulated_kernels::launchCopySpans(spans.data(), static_cast<int32_t>(spans.size()), chunks, 2,
                                      nullptr);  // 2 blocks stride
    EXPECT_EQ(Bytes(arena.data(), arena.data() + initial.size()), expected);
}

TEST(KernelEmulation, InPlaceCompactionMatchesWithConcurrentThreads) {
    std::mt19937 rng(4);
    for (size_t rowBytes : {size_t{4}, size_t{12}, size_t{37}, size_t{4096 + 48}}) {
        for (size_t offset : {size_t{0}, size_t{4}, size_t{3}}) {
            int32_t const rows = 11;
            std::vector<int32_t> map(rows);
            int32_t next = 0;
            for (int32_t& m : map) m = rng() % 3 == 0 ? -1 : next++;
            std::vector<RowMove> moves;
            planCompaction("test", map.data(), rows, next, moves);
            Bytes const initial = randomBytes(rows * rowBytes, static_cast<uint32_t>(rowBytes + offset));
            Bytes const expected = oracle(initial, offset, [&](DeviceBackend& b, unsigned char* base) {
                compactBatch(b, base, rowBytes, rows, map.data(), rows, next);
            });
            Arena arena(initial.size(), offset);
            std::memcpy(arena.data(), initial.data(), initial.size());
            CompactTensor const tensor{arena.data(), rowBytes, static_cast<uint64_t>(rows)};
            uint64_t const columns = rowBytes / emulated_kernels::compactUnitBytes(arena.data(), rowBytes);
            emulated_kernels::launchCompactRows(&tensor, 1, moves.data(), static_cast<int32_t>(moves.size()), columns,
                                                2, nullptr);
            EXPECT_EQ(Bytes(arena.data(), arena.data() + initial.size()), expected)
                << "rowBytes " << rowBytes << " offset " << offset;
        }
    }
}

TEST(KernelEmulation, RebaseAndLengthKernelsMatch) {
    std::vector<int32_t> values;
    for (int32_t v = -3; v < 50; ++v) values.push_back(v);
    int32_t const map[] = {-1, 0, 1, -1, 2};
    for (size_t offset : {size_t{0}, size_t{4}, size_t{8}, size_t{12}}) {
        Bytes initial(values.size() * 4);
        std::memcpy(initial.data(), values.data(), initial.size());
        Bytes const expected = oracle(initial, offset, [&](DeviceBackend& b, unsigned char* base) {
            b.rebaseExecutionRows(reinterpret_cast<int32_t*>(base), static_cast<int64_t>(values.size()), map, 5, 9);
        });
        Arena arena(initial.size(), offset);
        std::memcpy(arena.data(), initial.data(), initial.size());
        emulated_kernels::launchRebaseRows(reinterpret_cast<int32_t*>(arena.data()),
                                           static_cast<int64_t>(values.size()), map, 5, 9, 2, nullptr);
        EXPECT_EQ(Bytes(arena.data(), arena.data() + initial.size()), expected) << "offset " << offset;
    }
    std::vector<int32_t> lengths = {1, 2, 3, 2147483647}, increments = {5, 6, 7, 1};
    std::vector<int32_t> cpuLengths = lengths;
    auto cpu = createCpuBackend();
    DeviceBuffer l(*cpu, 16), inc(*cpu, 16);
    l.write(0, lengths.data(), 16);
    inc.write(0, increments.data(), 16);
    cpu->addToLengths(static_cast<int32_t*>(l.data()), 4, 3, static_cast<int32_t const*>(inc.data()));
    l.read(0, cpuLengths.data(), 16);
    emulated_kernels::launchAddToLengths(lengths.data(), 4, 3, increments.data(), nullptr);
    EXPECT_EQ(lengths, cpuLengths);
}

TEST(KernelEmulation, GatherMatchesForSplitsDequantisationZeroFillAndBothLayouts) {
    struct Case {
        DType pool;
        DType out;
        int32_t heads;
        int32_t headDim;
    };
    // tokensPerBlock = kSpanChunkBytes / token bytes: 8 x 128 fp32 tokens are 4 KiB -> 4 tokens per block, 4 splits a
    // page.
    std::vector<Case> const cases = {{DType::kFp16, DType::kFp16, 2, 8},      {DType::kBf16, DType::kBf16, 1, 3},
                                     {DType::kFp8E4m3, DType::kFp16, 2, 8},   {DType::kFp8E4m3, DType::kBf16, 1, 5},
                                     {DType::kFp8E4m3, DType::kFp32, 8, 128}, {DType::kFp32, DType::kFp32, 8, 128}};
    for (DenseKvLayout const layout : {DenseKvLayout::kTokenMajor, DenseKvLayout::kHeadMajor})
        for (Case const& c : cases) {
            int32_t const numPages = 5, pageSize = 16, maxPages = 3, batch = 2, seqLen = 40;
            size_t const inSize = dtypeSize(c.pool), outSize = dtypeSize(c.out);
            size_t const poolBytes = 2 * size_t(numPages) * pageSize * c.heads * c.headDim * inSize;
            Bytes const pool = randomBytes(poolBytes, 7);
            std::vector<int32_t> const table = {3, 0,  4,  8, 5,  9,     // slot 0: K pages 3, 0, 4 (V = K + 5)
                                                1, -1, -1, 6, -1, -1};  // slot 1: K page 1, then unmapped
            std::vector<int32_t> const lengths = {37, 40};
            size_t const outBytes = size_t(batch) * seqLen * c.heads * c.headDim * outSize;
            PagedKvGather g{};
            g.numPages = numPages;
            g.pageSize = pageSize;
            g.kvHeads = c.heads;
            g.headDim = c.headDim;
            g.maxPagesPerSeq = maxPages;
            g.batch = batch;
            g.seqLen = seqLen;
            g.poolDtype = static_cast<int32_t>(c.pool);
            g.outDtype = static_cast<int32_t>(c.out);
            g.kScale = 0.37f;
            g.vScale = 3.5f;
            g.layout = static_cast<int32_t>(layout);

            auto cpu = createCpuBackend();
            DeviceBuffer p(*cpu, poolBytes), t(*cpu, table.size() * 4), l(*cpu, 8), k(*cpu, outBytes),
                v(*cpu, outBytes);
            p.write(0, pool.data(), poolBytes);
            t.write(0, table.data(), table.size() * 4);
            l.write(0, lengths.data(), 8);
            PagedKvGather oracleParams = g;
            oracleParams.pool = p.data();
            oracleParams.pageTable = static_cast<int32_t const*>(t.data());
            oracleParams.kvLengths = static_cast<int32_t const*>(l.data());
            oracleParams.kOut = k.data();
            oracleParams.vOut = v.data();
            cpu->gatherPagedKv(oracleParams);
            Bytes expectedK(outBytes), expectedV(outBytes);
            k.read(0, expectedK.data(), outBytes);
            v.read(0, expectedV.data(), outBytes);

            Arena poolArena(poolBytes), kArena(outBytes), vArena(outBytes);
            std::memcpy(poolArena.data(), pool.data(), poolBytes);
            std::memset(kArena.data(), 0xCD, outBytes);
            std::memset(vArena.data(), 0xCD, outBytes);
            g.pool = poolArena.data();
            g.pageTable = table.data();
            g.kvLengths = lengths.data();
            g.kOut = kArena.data();
            g.vOut = vArena.data();
            emulated_kernels::launchGatherPagedKv(g, nullptr);
            EXPECT_EQ(Bytes(kArena.data(), kArena.data() + outBytes), expectedK)
                << dtypeName(c.pool) << " -> " << dtypeName(c.out) << " layout " << static_cast<int>(layout);
            EXPECT_EQ(Bytes(vArena.data(), vArena.data() + outBytes), expectedV)
                << dtypeName(c.pool) << " -> " << dtypeName(c.out) << " layout " << static_cast<int>(layout);
        }
}

TEST(KernelEmulation, ScatterMatchesTheOracleForBothLayoutsSplitsAndAnOffset) {
    struct Case {
        DType dtype;
        int32_t heads;
        int32_t headDim;
        int32_t firstPosition;
    };
    // 8 x 128 fp32 tokens are 4 KiB: 4 tokens per block, so a sequence spans several blocks; an odd byte count
    // (bf16 1 x 3) takes the unaligned copy path.
    std::vector<Case> const cases = {
        {DType::kFp16, 2, 8, 0}, {DType::kBf16, 1, 3, 5}, {DType::kFp8E4m3, 2, 8, 13}, {DType::kFp32, 8, 128, 7}};
    for (DenseKvLayout const layout : {DenseKvLayout::kTokenMajor, DenseKvLayout::kHeadMajor})
        for (Case const& c : cases) {
            int32_t const numPages = 5, pageSize = 16, maxPages = 3, batch = 2, seqLen = 27;
            size_t const size = dtypeSize(c.dtype);
            size_t const poolBytes = 2 * size_t(numPages) * pageSize * c.heads * c.headDim * size;
            size_t const inBytes = size_t(batch) * seqLen * c.heads * c.headDim * size;
            Bytes const pool = randomBytes(poolBytes, 11);
            Bytes const kIn = randomBytes(inBytes, 12), vIn = randomBytes(inBytes, 13);
            std::vector<int32_t> const table = {3, 0, 4, 8, 5, 9,    // slot 0: K pages 3, 0, 4 (V = K + 5)
                                                1, 2, 0, 6, 7, 5};  // slot 1: K pages 1, 2, 0 (0 shared with slot 0)
            PagedKvScatter s{};
            s.numPages = numPages;
            s.pageSize = pageSize;
            s.kvHeads = c.heads;
            s.headDim = c.headDim;
            s.maxPagesPerSeq = maxPages;
            s.batch = 1;  // slot 0 only when its pages are shared: a real engine never writes one page from two slots
            s.seqLen = seqLen;
            s.firstPosition = c.firstPosition;
            s.dtype = static_cast<int32_t>(c.dtype);
            s.layout = static_cast<int32_t>(layout);
            for (int32_t rows : {1, 2}) {
                std::vector<int32_t> rowTable = table;
                if (rows == 2) rowTable[8] = -1, rowTable[11] = -1;  // slot 1 stops before page 0
                if (rows == 2 && c.firstPosition + seqLen > 2 * pageSize) continue;
                s.batch = rows;
                auto cpu = createCpuBackend();
                DeviceBuffer p(*cpu, poolBytes), t(*cpu, rowTable.size() * 4), k(*cpu, inBytes), v(*cpu, inBytes);
                p.write(0, pool.data(), poolBytes);
                t.write(0, rowTable.data(), rowTable.size() * 4);
                k.write(0, kIn.data(), inBytes);
                v.write(0, vIn.data(), inBytes);
                PagedKvScatter oracleParams = s;
                oracleParams.pool = p.data();
                oracleParams.pageTable = static_cast<int32_t const*>(t.data());
                oracleParams.kIn = k.data();
                oracleParams.vIn = v.data();
                cpu->scatterPagedKv(oracleParams);
                Bytes expected(poolBytes);
                p.read(0, expected.data(), poolBytes);
                EXPECT_NE(expected, pool);

                Arena poolArena(poolBytes), kArena(inBytes), vArena(inBytes);
                std::memcpy(poolArena.data(), pool.data(), poolBytes);
                std::memcpy(kArena.data(), kIn.data(), inBytes);
                std::memcpy(vArena.data(), vIn.data(), inBytes);
                s.pool = poolArena.data();
                s.pageTable = rowTable.data();
                s.kIn = kArena.data();
                s.vIn = vArena.data();
                emulated_kernels::launchScatterPagedKv(s, nullptr);
                EXPECT_EQ(Bytes(poolArena.data(), poolArena.data() + poolBytes), expected)
                    << dtypeName(c.dtype) << " layout " << static_cast<int>(layout) << " rows " << rows;
            }
        }
}

TEST(KernelEmulation, HashChunksMatchTheHostChunking) {
    for (size_t size : {size_t{0}, size_t{5}, size_t{100}, size_t{4099}}) {
        for (size_t offset : {size_t{0}, size_t{5}}) {
            Bytes const data = randomBytes(size, static_cast<uint32_t>(size));
            for (uint32_t chunks : {1u, 33u, 130u}) {
                auto cpu = createCpuBackend();
                DeviceBuffer buffer(*cpu, size + 16);
                buffer.write(offset, data.data(), size);
                std::vector<Hash128> expected(chunks);
                cpu->hashChunks(buffer.bytes() + offset, size, chunks, expected.data());
                Arena arena(size + 16, offset);
                if (size > 0) std::memcpy(arena.data(), data.data(), size);
                std::vector<unsigned long long> partials(2 * chunks);
                emulated_kernels::launchHashChunks(arena.data(), size, chunks, partials.data(), nullptr);
                for (uint32_t i = 0; i < chunks; ++i) {
                    EXPECT_EQ(partials[2 * i], expected[i].hi) << size << " bytes, chunk " << i << " of " << chunks;
                    EXPECT_EQ(partials[2 * i + 1], expected[i].lo);
                }
            }
        }
    }
}

// The host page copy kernel, striding 3 blocks over chunks of layers whose pages are 16-byte multiples, odd sizes
// and several chunks long, with the host slots at every co-alignment with the pool: both directions against the CPU
// twin over the same arena ([pool layers | host slots]).
TEST(KernelEmulation, HostPageCopiesMatchTheCpuTwinInBothDirections) {
    uint64_t const pageBytes[] = {kSpanChunkBytes + 48, 37, 256};
    int32_t const numPages = 3;
    uint64_t poolBytes = 0;
    for (uint64_t pb : pageBytes) poolBytes += 2 * numPages * pb;
    uint64_t const header = 12, payload = 2 * (pageBytes[0] + pageBytes[1] + pageBytes[2]);
    uint64_t const slotBytes = header + payload + 4;
    int32_t const slotCount = 3;
    for (size_t hostShift : {size_t{0}, size_t{4}, size_t{5}}) {
        size_t const hostAt = poolBytes + hostShift;  // the slots' misalignment relative to the pool
        Bytes const initial = randomBytes(hostAt + slotCount * slotBytes, static_cast<uint32_t>(hostShift + 9));
        int32_t const pages[] = {2, 0};
        int32_t const slots[] = {0, 2};
        for (HostCopyDirection direction : {HostCopyDirection::kToHost, HostCopyDirection::kFromHost}) {
            auto layersOver = [&](unsigned char* base) {
                std::vector<HostPageLayer> layers;
                uint64_t at = 0, slotOffset = header, chunk = 0;
                for (uint64_t pb : pageBytes) {
                    layers.push_back(HostPageLayer{base + at, pb, slotOffset, chunk});
                    at += 2 * numPages * pb;
                    slotOffset += 2 * pb;
                    chunk += 2 * ((pb + kSpanChunkBytes - 1) / kSpanChunkBytes);
                }
                return std::make_pair(layers, chunk);
            };
            Bytes const expected = oracle(initial, 0, [&](DeviceBackend& b, unsigned char* base) {
                auto layers = layersOver(base).first;
                HostPageCopyRequest r;
                r.direction = direction;
                r.layers = layers.data();
                r.numLayers = 3;
                r.numPages = numPages;
                r.pages = pages;
                r.slots = slots;
                r.count = 2;
                r.host = base + hostAt;
                r.slotBytes = slotBytes;
                r.slotCount = slotCount;
                b.copyHostPages(r);
            });
            Arena arena(initial.size());
            std::memcpy(arena.data(), initial.data(), initial.size());
            auto [layers, chunksPerPage] = layersOver(arena.data());
            HostPagePair const pairs[] = {{pages[0], slots[0]}, {pages[1], slots[1]}};
            HostPageCopy copy{};
            copy.layers = layers.data();
            copy.pairs = pairs;
            copy.host = arena.data() + hostAt;
            copy.slotBytes = slotBytes;
            copy.chunksPerPage = chunksPerPage;
            copy.numLayers = 3;
            copy.count = 2;
            copy.numPages = numPages;
            copy.slotCount = slotCount;
            copy.direction = static_cast<int32_t>(direction);
            emulated_kernels::launchCopyHostPages(copy, 2 * chunksPerPage, 3, nullptr);
            EXPECT_EQ(Bytes(arena.data(), arena.data() + initial.size()), expected)
                << "shift " << hostShift << " direction " << static_cast<int32_t>(direction);
            EXPECT_NE(expected, initial);
        }
    }
}
