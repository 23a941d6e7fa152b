// DeviceBackend on the CPU: selection, memory, the validating front, and the generic ops with exact bytes.
#include <gtest/gtest.h>

#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/device_error.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

TEST(DeviceBackend, AutoFallsBackToCpuAndCudaSaysWhyItIsUnavailable) {
    std::string reason;
    if (cudaBackendAvailable(&reason)) GTEST_SKIP() << "a CUDA device is present";
    EXPECT_FALSE(reason.empty());
    auto backend = createBackend(BackendKind::kAuto);
    EXPECT_EQ(backend->kind(), BackendKind::kCpu);
    EXPECT_STREQ(backend->name(), "cpu");
    EXPECT_THROW(createBackend(BackendKind::kCuda), BackendUnavailableError);
}

TEST(DeviceBackend, AllocationsAreZeroedAlignedAndAccounted) {
    auto backend = createCpuBackend();
    {
        DeviceBuffer a(*backend, 1000);
        DeviceBuffer b(*backend, 24);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 256, 0u);
        EXPECT_EQ(readBuffer(a), Bytes(1000, 0));
        EXPECT_EQ(backend->allocatedBytes(), 1024u);
        DeviceBuffer moved = std::move(b);
        EXPECT_EQ(b.data(), nullptr);
        EXPECT_EQ(backend->allocatedBytes(), 1024u);
    }
    EXPECT_EQ(backend->allocatedBytes(), 0u);
    expectContractError([] {
        BackendOptions o;
        o.maxTableBytes = 100;
        createCpuBackend(o);
    }, "maxTableBytes");
}

TEST(DeviceBackend, BufferTransfersAreBoundsChecked) {
    auto backend = createCpuBackend();
    DeviceBuffer buffer(*backend, 16);
    Bytes const data = pattern(4, 1);
    buffer.write(12, data.data(), 4);
    EXPECT_EQ(readBuffer(buffer, 12, 4), data);
    expectContractError([&] { buffer.write(13, data.data(), 4); }, "outside the buffer");
    Bytes out(8);
    expectContractError([&] { buffer.read(9, out.data(), 8); }, "outside the buffer");
}

TEST(DeviceBackend, CopySpansCopiesAndZeroesEverySpanInOneLaunch) {
    auto backend = createCpuBackend();
    DeviceBuffer src(*backend, 64), dst(*backend, 64);
    Bytes const s = pattern(64, 3);
    src.write(0, s.data(), s.size());
    Bytes ones(64, 0xFF);
    dst.write(0, ones.data(), ones.size());
    SpanCopy const spans[] = {
        {dst.bytes() + 0, src.bytes() + 10, 5, 0},  // copy 5 bytes from 10
        {dst.bytes() + 8, nullptr, 4, 0},           // zero 4 bytes
        {dst.bytes() + 20, src.bytes() + 40, 0, 0}, // empty: ignored
        {dst.bytes() + 30, src.bytes() + 0, 3, 0},
    };
    uint64_t const before = backend->counters().kernels;
    backend->copySpans(spans, 4);
    EXPECT_EQ(backend->counters().kernels, before + 1);
    Bytes expected(64, 0xFF);
    for (int i = 0; i < 5; ++i) expected[i] = s[10 + i];
    for (int i = 8; i < 12; ++i) expected[i] = 0;
    for (int i = 0; i < 3; ++i) expected[30 + i] = s[i];
    EXPECT_EQ(readBuffer(dst), expected);
}

TEST(DeviceBackend, CopySpansRejectsBadSpansBeforeTouchingAnything) {
    BackendOptions options;
    options.maxTableBytes = 4096;  // 128 spans
    auto backend = createCpuBackend(options);
    DeviceBuffer buffer(*backend, 64);
    Bytes const before = readBuffer(buffer);
    SpanCopy overlap[] = {{buffer.bytes(), nullptr, 8, 0}, {buffer.bytes() + 4, buffer.bytes(), 8, 0}};
    expectContractError([&] { backend->copySpans(overlap, 2); }, "overlap");
    SpanCopy null[] = {{buffer.bytes(), nullptr, 8, 0}, {nullptr, buffer.bytes(), 8, 0}};
    expectContractError([&] { backend->copySpans(null, 2); }, "null destination");
    std::vector<SpanCopy> many(129, SpanCopy{buffer.bytes(), nullptr, 1, 0});
    expectContractError([&] { backend->copySpans(many.data(), 129); }, "maxTableBytes");
    EXPECT_EQ(readBuffer(buffer), before);
    EXPECT_EQ(backend->counters().kernels, 0u);
}

TEST(DeviceBackend, CompactRowsRejectsMovesThatAreNotOrderPreserving) {
    auto backend = createCpuBackend();
    DeviceBuffer buffer(*backend, 40);
    CompactTensor const tensor{buffer.data(), 8, 5};
    RowMove const upward[] = {{1, 2}};
    expectContractError([&] { backend->compactRows(&tensor, 1, upward, 1); }, "lower index");
    RowMove const crossed[] = {{2, 1}, {3, 0}};
    expectContractError([&] { backend->compactRows(&tensor, 1, crossed, 2); }, "order-preserving");
    RowMove const outside[] = {{5, 0}};
    expectContractError([&] { backend->compactRows(&tensor, 1, outside, 1); }, "outside tensor");
}

TEST(DeviceBackend, HashChunksRejectsAChunkCountBeyondItsPartialsBuffer) {
    BackendOptions options;
    options.maxHashChunks = 4;
    auto backend = createCpuBackend(options);
    DeviceBuffer buffer(*backend, 16);
    std::vector<Hash128> partials(5);
    expectContractError([&] { backend->hashChunks(buffer.data(), 16, 5, partials.data()); }, "numChunks");
    expectContractError([&] { backend->hashChunks(buffer.data(), 16, 0, partials.data()); }, "numChunks");
}

TEST(DeviceBackend, GatherRejectsDtypeChangesOtherThanFp8Dequantisation) {
    auto backend = createCpuBackend();
    PagedKvGather g{};
    g.numPages = g.pageSize = g.kvHeads = g.headDim = g.maxPagesPerSeq = 1;
    g.poolDtype = static_cast<int32_t>(DType::kFp16);
    g.outDtype = static_cast<int32_t>(DType::kFp32);
    expectContractError([&] { backend->gatherPagedKv(g); }, "wrong dtype");
    g.poolDtype = static_cast<int32_t>(DType::kBf16);
    g.outDtype = static_cast<int32_t>(DType::kFp8E4m3);
    expectContractError([&] { backend->gatherPagedKv(g); }, "wrong dtype");
    g.poolDtype = 9;
    expectContractError([&] { backend->gatherPagedKv(g); }, "unknown dtype");
}
