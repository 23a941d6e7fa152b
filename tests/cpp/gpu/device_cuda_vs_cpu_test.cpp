// The CUDA backend against the CPU oracle, byte for byte: every op runs on both backends from identical inputs
// and the outputs must be identical. Label `gpu`: each test is skipped with the probe's reason when no CUDA
// device is usable, and fails instead when CTXCACHE_REQUIRE_GPU=1 (tools/gpu_check). The same file is also built
// with CTXCACHE_TEST_EMULATED_CUDA into the emulation suite (label `cpu`), where the backend is the CUDA backend's
// own code over the CPU stand-in of tests/cpp/emulation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/chunked_hash.h"
#include "ctxcache/device/device_error.h"
#include "ctxcache/device/host_buffer.h"
#include "ctxcache/device/kv_gather.h"
#include "ctxcache/device/kv_host_copy.h"
#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_scatter.h"
#include "ctxcache/device/snapshot_storage.h"
#include "gpu_test_support.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

namespace {

class CudaVsCpu : public CpuAndCudaBackends {};

Bytes readPool(KvPagePool const& pool, int32_t layer) {
    Bytes out(pool.layerBytes(layer));
    pool.readPages(layer, 0, 2 * pool.numPages(), out.data(), out.size());
    return out;
}

void fillPool(KvPagePool& pool, uint32_t seed) {
    for (int32_t layer = 0; layer < pool.numLayers(); ++layer) {
        Bytes const data = randomBytes(pool.layerBytes(layer), seed + static_cast<uint32_t>(layer));
        pool.writePages(layer, 0, 2 * pool.numPages(), data.data(), data.size());
    }
}

void fillState(ResidentState& state, uint32_t seed) {
    for (int32_t slot = 0; slot < state.maxBatch(); ++slot) {
        for (int32_t layer = 0; layer < state.numLayers(); ++layer)
            for (StatePart part : {StatePart::kRecurrent, StatePart::kConv}) {
                Bytes const row = randomBytes(state.rowBytes(part), seed++);
                state.writeRow(part, layer, slot, row.data(), row.size());
            }
        if (state.rowBytes(StatePart::kBoundaryHidden) > 0) {
            Bytes const row = randomBytes(state.rowBytes(StatePart::kBoundaryHidden), seed++);
            state.writeRow(StatePart::kBoundaryHidden, 0, slot, row.data(), row.size());
        }
    }
}

Bytes readState(ResidentState const& state) {
    Bytes out;
    for (int32_t slot = 0; slot < state.maxBatch(); ++slot) {
        for (int32_t layer = 0; layer < state.numLayers(); ++layer)
            for (StatePart part : {StatePart::kRecurrent, StatePart::kConv}) {
                Bytes row(state.rowBytes(part));
                state.readRow(part, layer, slot, row.data(), row.size());
                out.insert(out.end(), row.begin(), row.end());
            }
        if (state.rowBytes(StatePart::kBoundaryHidden) > 0) {
            Bytes row(state.rowBytes(StatePart::kBoundaryHidden));
            state.readRow(StatePart::kBoundaryHidden, 0, slot, row.data(), row.size());
            out.insert(out.end(), row.begin(), row.end());
        }
    }
    return out;
}

ResidentStateGeometry hybridState(int32_t layers) {
    ResidentStateGeometry g;
    g.maxBatch = 4;
    g.numLayers = layers;
    g.recurrentHeads = 4;
    g.recurrentHeadDim = 16;
    g.stateSize = 8;
    g.recurrentDtype = DType::kFp32;
    g.convDim = 33;  // odd: rows not 16-byte multiples
    g.convKernel = 4;
    g.convDtype = DType::kBf16;
    g.hiddenSize = 96;
    return g;
}

}  // namespace

TEST_F(CudaVsCpu, CopySpansMatchesForEveryAlignmentAndSize) {
    size_t const size = 3 * kSpanChunkBytes + 4096;
    Bytes const source = randomBytes(size, 1);
    // (dst offset, src offset or -1 for zero-fill, bytes): co-aligned, word-aligned, byte-aligned, multi-chunk.
    struct Spec {
        size_t dst;
        long src;
        size_t bytes;
    };
    std::vector<Spec> const specs = {{0, 16, 100},
                                     {128, 132, 77},
                                     {300, 301, 33},
                                     {400, -1, 50},
                                     {1024, 2048, 2 * kSpanChunkBytes + 5},
                                     {2 * kSpanChunkBytes + 2000, -1, kSpanChunkBytes + 3},
                                     {450, 0, 0}};
    Bytes results[2];
    for (int i = 0; i < 2; ++i) {
        DeviceBuffer src(backend(i), size), dst(backend(i), size);
        src.write(0, source.data(), size);
        Bytes const ones(size, 0xAB);
        dst.write(0, ones.data(), size);
        std::vector<SpanCopy> spans;
        for (Spec const& s : specs)
            spans.push_back(SpanCopy{dst.bytes() + s.dst, s.src < 0 ? nullptr : src.bytes() + s.src, s.bytes, 0});
        backend(i).copySpans(spans.data(), static_cast<int32_t>(spans.size()));
        results[i] = readBuffer(dst);
    }
    EXPECT_EQ(results[1], results[0]);
}

TEST_F(CudaVsCpu, HybridSnapshotCaptureAndRestoreAreOneLaunchAndByteIdentical) {
    Bytes snapshots[2], live[2], pools[2], draftPools[2];
    for (int i = 0; i < 2; ++i) {
        DeviceBackend& b = backend(i);
        ResidentState state(b, hybridState(48));
        KvPagePool base(b, KvPoolGeometry{6, 16, DType::kFp16, std::vector<KvLayerShape>(16, KvLayerShape{2, 24})});
        KvPagePool draft(b, KvPoolGeometry{4, 16, DType::kFp8E4m3, {{1, 40}}});
        fillState(state, 10);
        fillPool(base, 20);
        fillPool(draft, 30);
        SnapshotStorage storage(b, &state, &base, &draft, SnapshotBudgets{size_t{1} << 22, size_t{1} << 22, true});
        SnapshotTransfer t;
        t.batchSlot = 2;
        t.recurrentSlot = 3;
        t.partialKvSlot = 1;
        t.basePage = 4;
        t.draftPage = 1;
        t.validTokens = 11;
        LaunchCounters const before = b.counters();
        storage.capture(t);
        LaunchCounters const after = b.counters();
        EXPECT_EQ(after.kernels, before.kernels + 1) << b.name();
        if (b.kind() == BackendKind::kCuda) EXPECT_EQ(after.transfers, before.transfers + 1) << "one table upload";
        t.batchSlot = 0;
        t.basePage = 1;
        t.draftPage = 3;
        storage.restore(t);
        EXPECT_EQ(b.counters().kernels, after.kernels + 1) << b.name();
        for (int32_t layer = 0; layer < 48; ++layer)
            for (StatePart part : {StatePart::kRecurrent, StatePart::kConv}) {
                Bytes region(storage.regionBytes(part, layer));
                storage.readRegion(part, layer, 3, region.data(), region.size());
                snapshots[i].insert(snapshots[i].end(), region.begin(), region.end());
            }
        for (int32_t layer = 0; layer < 16; ++layer) {
            Bytes region(storage.regionBytes(StatePart::kPartialKv, layer));
            storage.readRegion(StatePart::kPartialKv, layer, 1, region.data(), region.size());
            snapshots[i].insert(snapshots[i].end(), region.begin(), region.end());
        }
        live[i] = readState(state);
        for (int32_t layer = 0; layer < 16; ++layer) {
            Bytes const p = readPool(base, layer);
            pools[i].insert(pools[i].end(), p.begin(), p.end());
        }
        draftPools[i] = readPool(draft, 0);
        state.zeroSlot(1);
        Bytes const zeroed = readState(state);
        live[i].insert(live[i].end(), zeroed.begin(), zeroed.end());
    }
    EXPECT_EQ(snapshots[1], snapshots[0]);
    EXPECT_EQ(live[1], live[0]);
    EXPECT_EQ(pools[1], pools[0]);
    EXPECT_EQ(draftPools[1], draftPools[0]);
}

TEST_F(CudaVsCpu, BatchCompactionMatchesForAnyRowSizeAndAlignment) {
    std::mt19937 rng(5);
    for (size_t rowBytes :
         {size_t{1}, size_t{2}, size_t{4}, size_t{12}, size_t{37}, size_t{4096}, size_t{65536 + 48}}) {
        for (size_t offset : {size_t{0}, size_t{4}, size_t{3}}) {
            int32_t const oldBatch = 9;
            std::vector<int32_t> map(oldBatch);
            int32_t next = 0;
            for (int32_t& m : map) m = (rng() % 3 == 0) ? -1 : next++;
            Bytes const data = randomBytes(oldBatch * rowBytes + offset, static_cast<uint32_t>(rowBytes + offset));
            Bytes results[2];
            for (int i = 0; i < 2; ++i) {
                DeviceBuffer buffer(backend(i), data.size());
                buffer.write(0, data.data(), data.size());
                compactBatch(backend(i), buffer.bytes() + offset, rowBytes, oldBatch, map.data(), oldBatch, next);
                results[i] = readBuffer(buffer);
            }
            EXPECT_EQ(results[1], results[0]) << "rowBytes " << rowBytes << " offset " << offset;
        }
    }
}

TEST_F(CudaVsCpu, ResidentStateCompactionRebasingAndLengthsMatch) {
    int32_t const map[] = {-1, 0, 1, -1};
    Bytes states[2];
    std::vector<int32_t> indices[2], lengths[2];
    std::vector<int32_t> const rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -5, 12, 100};
    for (int i = 0; i < 2; ++i) {
        DeviceBackend& b = backend(i);
        ResidentState state(b, hybridState(5));
        fillState(state, 40);
        state.compact(map, 4, 2);
        states[i] = readState(state);
        DeviceBuffer buffer(b, rows.size() * 4);
        buffer.write(0, rows.data(), rows.size() * 4);
        rebaseExecutionRowIndices(b, static_cast<int32_t*>(buffer.data()), static_cast<int64_t>(rows.size()), map, 4, 2,
                                  3);
        indices[i] = asVector<int32_t>(readBuffer(buffer));
        KvLengths kv(b, 4), inc(b, 4);
        int32_t const start[] = {10, 20, 30, 40}, step[] = {1, 2, 3, 4};
        kv.set(start, 4);
        inc.set(step, 4);
        kv.add(inc);
        kv.add(7);
        kv.compact(map, 4, 2);
        lengths[i] = kv.read();
    }
    EXPECT_EQ(states[1], states[0]);
    EXPECT_EQ(indices[1], indices[0]);
    EXPECT_EQ(lengths[1], lengths[0]);
    EXPECT_EQ(lengths[0], (std::vector<int32_t>{29, 40}));
}

TEST_F(CudaVsCpu, PagedGatherMatchesForEveryDtypeWithDequantisationAndZeroFill) {
    struct Case {
        DType pool;
        DType out;
        int32_t headDim;
    };
    std::vector<Case> const cases = {{DType::kFp16, DType::kFp16, 64},    {DType::kBf16, DType::kBf16, 3},
                                     {DType::kFp32, DType::kFp32, 8},     {DType::kFp8E4m3, DType::kFp8E4m3, 5},
                                     {DType::kFp8E4m3, DType::kFp16, 64}, {DType::kFp8E4m3, DType::kBf16, 7},
                                     {DType::kFp8E4m3, DType::kFp32, 16}};
    for (Case const& c : cases) {
        Bytes results[2];
        for (int i = 0; i < 2; ++i) {
            DeviceBackend& b = backend(i);
            KvPagePool pool(b, KvPoolGeometry{12, 16, c.pool, {{2, c.headDim}}});
            fillPool(pool, 50);  // fp8 random bytes include NaN encodings
            KvPageTable table(b, 3, 5, 12, KvPageTable::Mode::kSparseWindow);
            std::vector<int32_t> const r0 = {3, 7, 0, 11, 2}, r1 = {5, -1, 9}, r2 = {1};
            table.setRow(0, r0.data(), 5);
            table.setRow(1, r1.data(), 3);
            table.setRow(2, r2.data(), 1);
            table.upload();
            KvLengths lengths(b, 3);
            int32_t const lens[] = {70, 40, 100};
            lengths.set(lens, 3);
            KvGatherRequest r;
            r.batch = 3;
            r.seqLen = 77;
            r.outDtype = c.out;
            r.kScale = 0.37f;
            r.vScale = 3.5f;
            size_t const bytes = gatherOutputBytes(pool, r);
            DeviceBuffer k(b, bytes), v(b, bytes);
            gatherPagedKv(pool, table, &lengths, r, k.data(), v.data(), bytes);
            results[i] = readBuffer(k);
            Bytes const vb = readBuffer(v);
            results[i].insert(results[i].end(), vb.begin(), vb.end());
        }
        EXPECT_EQ(results[1], results[0])
            << dtypeName(c.pool) << " -> " << dtypeName(c.out) << " headDim " << c.headDim;
    }
}

TEST_F(CudaVsCpu, ScatterAndHeadMajorGatherMatchInBothLayouts) {
    struct Case {
        DType dtype;
        int32_t heads;
        int32_t headDim;
    };
    std::vector<Case> const cases = {
        {DType::kFp16, 2, 64}, {DType::kBf16, 3, 3}, {DType::kFp32, 2, 8}, {DType::kFp8E4m3, 1, 5}};
    for (DenseKvLayout const layout : {DenseKvLayout::kTokenMajor, DenseKvLayout::kHeadMajor}) {
        for (Case const& c : cases) {
            Bytes results[2];
            for (int i = 0; i < 2; ++i) {
                DeviceBackend& b = backend(i);
                KvPagePool pool(b, KvPoolGeometry{12, 16, c.dtype, {{c.heads, c.headDim}}});
                fillPool(pool, 60);
                KvPageTable table(b, 2, 5, 12);
                std::vector<int32_t> const r0 = {3, 7, 0, 11}, r1 = {5, 9, 1};
                table.setRow(0, r0.data(), r0.size());
                table.setRow(1, r1.data(), r1.size());
                table.upload();
                KvScatterRequest s;
                s.batch = 2;
                s.seqLen = 29;
                s.firstPosition = 13;  // positions 13..41: the end of page 0 to the middle of page 2
                s.layout = layout;
                size_t const inBytes = scatterInputBytes(pool, s);
                Bytes const kIn = randomBytes(inBytes, 61), vIn = randomBytes(inBytes, 62);
                DeviceBuffer k(b, inBytes), v(b, inBytes);
                k.write(0, kIn.data(), inBytes);
                v.write(0, vIn.data(), inBytes);
                scatterPagedKv(pool, table, s, k.data(), v.data(), inBytes);
                KvGatherRequest g;
                g.batch = 2;
                g.seqLen = 48;
                g.outDtype = c.dtype;
                g.layout = layout;
                size_t const outBytes = gatherOutputBytes(pool, g);
                DeviceBuffer ko(b, outBytes), vo(b, outBytes);
                gatherPagedKv(pool, table, nullptr, g, ko.data(), vo.data(), outBytes);
                results[i] = readBuffer(ko);
                Bytes const vb = readBuffer(vo);
                results[i].insert(results[i].end(), vb.begin(), vb.end());
                Bytes pages(pool.layerBytes(0));
                pool.readPages(0, 0, 2 * pool.numPages(), pages.data(), pages.size());
                results[i].insert(results[i].end(), pages.begin(), pages.end());
            }
            EXPECT_EQ(results[1], results[0]) << dtypeName(c.dtype) << " layout " << static_cast<int>(layout);
        }
    }
}

TEST_F(CudaVsCpu, ChunkedHashIsBitIdenticalToTheHost) {
#if defined(CTXCACHE_TEST_EMULATED_CUDA)  // one host thread per emulated GPU thread: keep the grids small
    std::vector<size_t> const sizes = {0, 5, 2048, 100003};
    std::vector<uint32_t> const chunkCounts = {1u, 33u, kDefaultHashChunks};
#else
    std::vector<size_t> const sizes = {0, 5, 2048, 100003, (1 << 22) + 7};
    std::vector<uint32_t> const chunkCounts = {1u, 33u, kDefaultHashChunks, 65536u};
#endif
    for (size_t size : sizes) {
        Bytes const data = randomBytes(size + 8, static_cast<uint32_t>(size));
        DeviceBuffer buffer(*cuda, size + 8);
        buffer.write(0, data.data(), data.size());
        for (size_t offset : {size_t{0}, size_t{5}}) {
            for (uint32_t chunks : chunkCounts) {
                Hash128 const host = chunkedFnv1a128Host(data.data() + offset, size, chunks);
                EXPECT_EQ(chunkedFnv1a128(*cuda, buffer.bytes() + offset, size, chunks), host)
                    << size << " bytes at offset " << offset << ", " << chunks << " chunks";
            }
        }
    }
}

TEST_F(CudaVsCpu, PageTableUploadsMatchTheHostTruth) {
    KvPageTable table(*cuda, 8, 6, 64, KvPageTable::Mode::kSparseWindow);
    std::mt19937 rng(9);
    for (int round = 0; round < 20; ++round) {
        int32_t const slot = static_cast<int32_t>(rng() % 8);
        std::vector<int32_t> pages(rng() % 7);
        for (int32_t& p : pages) p = static_cast<int32_t>(rng() % 65) - 1;
        table.setRow(slot, pages.data(), static_cast<int32_t>(pages.size()));
        if (round % 3 == 0) table.upload();
    }
    table.upload();
    std::vector<int32_t> device(table.entryCount());
    cuda->download(device.data(), table.deviceView(), device.size() * 4);
    EXPECT_EQ(device, std::vector<int32_t>(table.hostData(), table.hostData() + table.entryCount()));
}

// An engine's stream: a backend built on it, or switched to it, runs its ops there, and never destroys it (the
// stream here belongs to another backend, which must keep working after the borrower is gone).
TEST_F(CudaVsCpu, OpsRunOnTheCallersStreamWhichIsNeverDestroyed) {
    std::unique_ptr<DeviceBackend> owner = makeCuda();
    void* const callers = owner->stream();
    ASSERT_NE(callers, nullptr);
    {
        BackendOptions options;
        options.stream = callers;
        std::unique_ptr<DeviceBackend> borrower = makeCuda(options);
        EXPECT_EQ(borrower->stream(), callers);
        KvLengths lengths(*borrower, 4);
        int32_t const values[] = {1, 2, 3};
        lengths.set(values, 3);
        lengths.add(10);
        EXPECT_EQ(lengths.read(), (std::vector<int32_t>{11, 12, 13}));
        borrower->setStream(nullptr);  // its own stream, created now
        EXPECT_NE(borrower->stream(), callers);
        EXPECT_NE(borrower->stream(), nullptr);
        lengths.add(1);
        borrower->setStream(callers);
        EXPECT_EQ(borrower->stream(), callers);
        lengths.add(1);
        EXPECT_EQ(lengths.read(), (std::vector<int32_t>{13, 14, 15}));
    }
    KvLengths mine(*owner, 2);  // the caller's stream outlived the borrower
    int32_t const values[] = {4, 5};
    mine.set(values, 2);
    mine.add(1);
    EXPECT_EQ(mine.read(), (std::vector<int32_t>{5, 6}));
    void* const own = cuda->stream();
    cuda->setStream(callers);
    EXPECT_EQ(cuda->stream(), callers);
    cuda->setStream(nullptr);
    EXPECT_EQ(cuda->stream(), own);
}

// A pool over memory the engine allocated on the device holds the same bytes as the CPU pool, in place.
TEST_F(CudaVsCpu, APoolOverEngineDeviceMemoryMatchesAndUsesItInPlace) {
    KvPoolGeometry g;
    g.numPages = 6;
    g.pageSize = 16;
    g.dtype = DType::kBf16;
    g.layers = {{2, 24}, {1, 40}};
    DeviceBuffer engine(*cuda, KvPagePool::requiredBytes(g) + 512);  // the engine's allocation
    Bytes const initial = randomBytes(engine.size(), 7);
    engine.write(0, initial.data(), initial.size());
    size_t const allocatedBefore = cuda->allocatedBytes();
    std::vector<Bytes> results;
    {
        KvPagePool pool(*cuda, g, ExternalMemory{engine.data(), engine.size()});
        EXPECT_EQ(cuda->allocatedBytes(), allocatedBefore);
        EXPECT_EQ(pool.layerData(0), engine.data());
        EXPECT_TRUE(pool.external());
        Bytes head(pool.pageBytes(0));
        pool.readPages(0, 0, 1, head.data(), head.size());
        EXPECT_EQ(head, Bytes(initial.begin(), initial.begin() + static_cast<long>(head.size())));
        KvPagePool reference(*cpu, g);
        fillPool(pool, 3);
        fillPool(reference, 3);
        for (int32_t layer = 0; layer < 2; ++layer) EXPECT_EQ(readPool(pool, layer), readPool(reference, layer));
        results.push_back(readPool(pool, 1));
    }
    Bytes tail(results[0].size());  // the pool is gone; its bytes stay in the engine's memory
    size_t const layer1 = (KvPagePool::requiredBytes(g) - results[0].size()) / 256 * 256;
    engine.read(layer1, tail.data(), tail.size());
    EXPECT_EQ(tail, results[0]);
#if !defined(CTXCACHE_TEST_EMULATED_CUDA)
    Bytes host(KvPagePool::requiredBytes(g) + 256);  // host memory is not device memory
    void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(host.data()) + 255) / 256 * 256);
    EXPECT_THROW(KvPagePool(*cuda, g, ExternalMemory{aligned, KvPagePool::requiredBytes(g)}), ExternalMemoryError);
#endif
}

// Pool pages <-> pinned host slots: CUDA's one launch (plus one table upload) writes exactly the CPU twin's bytes,
// headers and untouched slots included, for layers whose pages are not 16-byte multiples, span several 16 KiB
// chunks, and sit at offsets of every co-alignment within the slot.
TEST_F(CudaVsCpu, HostPageCopiesMatchTheCpuTwinByteForByte) {
    KvPoolGeometry g;
    g.numPages = 7;
    g.pageSize = 16;
    g.dtype = DType::kFp16;
    g.layers = {{8, 128}, {3, 5}, {1, 12}, {2, 64}};  // pages of 32768, 480, 384 and 4096 bytes
    size_t const header = 40;                         // payload 8-byte but not 16-byte aligned in the slot
    Bytes hosts[2], pools[2];
    for (int i = 0; i < 2; ++i) {
        DeviceBackend& b = backend(i);
        KvPagePool pool(b, g);
        fillPool(pool, 50);
        size_t const slotBytes = header + hostSlotPayloadBytes(pool) + 24;
        HostBuffer host(b, 5 * slotBytes);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(host.data()) % kHostAlignment, 0u);
        EXPECT_EQ(b.allocatedHostBytes(), host.size());
        Bytes const initial = randomBytes(host.size(), 60);
        std::memcpy(host.data(), initial.data(), initial.size());
        HostSlotLayout const layout{&host, slotBytes, header, 5};
        int32_t const pages[] = {6, 0, 3};
        int32_t const slots[] = {2, 4, 0};
        LaunchCounters const before = b.counters();
        copyPagesToHost(pool, pages, slots, layout, 3);
        b.synchronize();
        EXPECT_EQ(b.counters().kernels, before.kernels + 1);
        if (i == 1) EXPECT_EQ(b.counters().transfers, before.transfers + 1);  // the descriptor table
        hosts[i] = Bytes(host.bytes(), host.bytes() + host.size());
        // Back: slot 2 (page 6) into page 1, slot 0 (page 3) into page 6, slot 1 (random bytes) into page 4.
        int32_t const back[] = {1, 6, 4};
        int32_t const from[] = {2, 0, 1};
        copyPagesFromHost(pool, back, from, layout, 3);
        b.synchronize();
        for (int32_t layer = 0; layer < pool.numLayers(); ++layer) {
            Bytes const bytes = readPool(pool, layer);
            pools[i].insert(pools[i].end(), bytes.begin(), bytes.end());
        }
    }
    EXPECT_EQ(hosts[1], hosts[0]);
    EXPECT_EQ(pools[1], pools[0]);
}

// Engine host memory: pinned and mapped memory (here another backend's HostBuffer) is accepted and copied into in
// place; ordinary pageable memory is refused on CUDA before anything is enqueued.
TEST_F(CudaVsCpu, HostSlotsOverEnginePinnedMemoryAreUsedInPlace) {
    KvPagePool pool(*cuda, KvPoolGeometry{4, 8, DType::kBf16, {{2, 16}}});
    fillPool(pool, 9);
    size_t const slotBytes = hostSlotPayloadBytes(pool);
    std::unique_ptr<DeviceBackend> engineSide = makeCuda();
    HostBuffer engine(*engineSide, 2 * slotBytes);
    size_t const allocatedBefore = cuda->allocatedHostBytes();
    HostBuffer window = HostBuffer::external(*cuda, ExternalMemory{engine.data(), engine.size()}, "engine slots");
    EXPECT_FALSE(window.owning());
    EXPECT_EQ(cuda->allocatedHostBytes(), allocatedBefore);
    int32_t const page[] = {3};
    int32_t const slot[] = {1};
    copyPagesToHost(pool, page, slot, HostSlotLayout{&window, slotBytes, 0, 2}, 1);
    cuda->synchronize();
    Bytes const layer = readPool(pool, 0);
    size_t const pageBytes = pool.pageBytes(0);
    Bytes expected(layer.begin() + static_cast<long>(3 * pageBytes), layer.begin() + static_cast<long>(4 * pageBytes));
    expected.insert(expected.end(), layer.begin() + static_cast<long>(7 * pageBytes),
                    layer.begin() + static_cast<long>(8 * pageBytes));
    EXPECT_EQ(Bytes(engine.bytes() + slotBytes, engine.bytes() + 2 * slotBytes), expected);
    EXPECT_EQ(Bytes(engine.bytes(), engine.bytes() + slotBytes), Bytes(slotBytes, 0));
    Bytes pageable(slotBytes);
    EXPECT_THROW(HostBuffer::external(*cuda, ExternalMemory{pageable.data(), pageable.size()}, "pageable"),
                 ExternalMemoryError);
}
