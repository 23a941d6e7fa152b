// Host buffers and the batched pool <-> host slot copies on the CPU backend: the page-first slot layout with
// hand-computed bytes for every dtype and per-layer shapes, headers and the rest of each slot untouched, subsets in
// scrambled order, one launch per call, and every bad input refused with nothing changed.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ctxcache/device/device_error.h"
#include "ctxcache/device/host_buffer.h"
#include "ctxcache/device/kv_host_copy.h"
#include "support/device_test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using namespace ctxcache::test;

namespace {

// numPages K pages of 4 tokens; layer 0: 2 heads x 8 dims, layer 1: 1 head x 4 dims, layer 2: 3 heads x 2 dims.
KvPoolGeometry geometry(DType dtype, int32_t numPages = 3) {
    return KvPoolGeometry{numPages, 4, dtype, {{2, 8}, {1, 4}, {3, 2}}};
}

// Layer l holds pattern(layerBytes, 100 + l): flat page f of it is bytes [f * pageBytes, (f + 1) * pageBytes).
void fillPool(KvPagePool& pool) {
    for (int32_t l = 0; l < pool.numLayers(); ++l) {
        Bytes const data = pattern(pool.layerBytes(l), 100 + static_cast<uint32_t>(l));
        pool.writePages(l, 0, 2 * pool.numPages(), data.data(), data.size());
    }
}

// Flat page f of layer l as fillPool wrote it.
Bytes patternPage(KvPagePool const& pool, int32_t l, int32_t flatPage) {
    Bytes const data = pattern(pool.layerBytes(l), 100 + static_cast<uint32_t>(l));
    size_t const page = pool.pageBytes(l);
    return Bytes(data.begin() + static_cast<long>(flatPage * page),
                 data.begin() + static_cast<long>((flatPage + 1) * page));
}

Bytes readLayer(KvPagePool const& pool, int32_t l) {
    Bytes out(pool.layerBytes(l));
    pool.readPages(l, 0, 2 * pool.numPages(), out.data(), out.size());
    return out;
}

Bytes readPool(KvPagePool const& pool) {
    Bytes out;
    for (int32_t l = 0; l < pool.numLayers(); ++l) {
        Bytes const layer = readLayer(pool, l);
        out.insert(out.end(), layer.begin(), layer.end());
    }
    return out;
}

Bytes hostBytes(HostBuffer const& host) { return Bytes(host.bytes(), host.bytes() + host.size()); }

}  // namespace

TEST(HostBuffer, IsPageAlignedZeroedAndCountedApartFromDeviceBytes) {
    auto backend = createCpuBackend();
    DeviceBuffer device(*backend, 1000);
    {
        HostBuffer host(*backend, 10000);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(host.data()) % kHostAlignment, 0u);
        EXPECT_EQ(host.size(), 10000u);
        EXPECT_TRUE(host.owning());
        EXPECT_EQ(host.deviceData(), host.data());  // the CPU backend addresses host memory as it is
        EXPECT_EQ(hostBytes(host), Bytes(10000, 0));
        EXPECT_EQ(backend->allocatedHostBytes(), 10000u);
        EXPECT_EQ(backend->allocatedBytes(), 1000u);
        HostBuffer moved = std::move(host);
        EXPECT_EQ(host.data(), nullptr);
        EXPECT_EQ(moved.size(), 10000u);
        EXPECT_EQ(backend->allocatedHostBytes(), 10000u);
    }
    EXPECT_EQ(backend->allocatedHostBytes(), 0u);
    EXPECT_EQ(backend->allocatedBytes(), 1000u);
    HostBuffer empty(*backend, 0);
    EXPECT_EQ(empty.data(), nullptr);
}

TEST(HostBuffer, ExternalMemoryIsAWindowNeverOwnedOrWritten) {
    auto backend = createCpuBackend();
    Bytes engine(5000, 0x77);
    {
        HostBuffer host = HostBuffer::external(*backend, ExternalMemory{engine.data(), engine.size()}, "tier");
        EXPECT_FALSE(host.owning());
        EXPECT_EQ(host.data(), engine.data());
        EXPECT_EQ(host.size(), engine.size());
        EXPECT_EQ(backend->allocatedHostBytes(), 0u);
    }
    EXPECT_EQ(engine, Bytes(5000, 0x77));  // not zeroed at construction, not freed at destruction
    try {
        HostBuffer::external(*backend, ExternalMemory{nullptr, 64}, "tier");
        ADD_FAILURE() << "NULL external host memory accepted";
    } catch (ExternalMemoryError const& e) {
        EXPECT_NE(std::string(e.what()).find("tier: external host memory is NULL"), std::string::npos) << e.what();
    }
    EXPECT_EQ(HostBuffer::external(*backend, ExternalMemory{}, "tier").size(), 0u);
}

TEST(HostBuffer, AnImpossibleAllocationIsOutOfMemoryNamingTheBytes) {
    auto backend = createCpuBackend();
    try {
        HostBuffer host(*backend, SIZE_MAX - 16);
        ADD_FAILURE() << "allocated SIZE_MAX bytes";
    } catch (OutOfMemoryError const& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(SIZE_MAX - 16)), std::string::npos) << e.what();
    }
    EXPECT_EQ(backend->allocatedHostBytes(), 0u);
}

TEST(KvHostCopy, PayloadIsKThenVOfEveryLayer) {
    auto backend = createCpuBackend();
    KvPagePool pool(*backend, geometry(DType::kFp16));
    // Page bytes: 4 * 2 * 8 * 2 = 128, 4 * 1 * 4 * 2 = 32, 4 * 3 * 2 * 2 = 48.
    EXPECT_EQ(hostSlotPayloadBytes(pool), 2u * 128 + 2u * 32 + 2u * 48);
    KvPagePool fp32(*backend, geometry(DType::kFp32));
    EXPECT_EQ(hostSlotPayloadBytes(fp32), 2u * 256 + 2u * 64 + 2u * 96);
}

namespace {

// For every dtype: pages {2, 0} into slots {3, 1} leave the hand-computed payload after each slot's header and
// nothing else changed; back from the host in another order into a cleared pool, only the named pages change.
// `geometryOf` gives a pool of 3 pages.
void expectRoundTripLayout(KvPoolGeometry (*geometryOf)(DType)) {
    for (DType dtype : {DType::kFp16, DType::kBf16, DType::kFp32, DType::kFp8E4m3}) {
        SCOPED_TRACE(dtypeName(dtype));
        auto backend = createCpuBackend();
        KvPagePool pool(*backend, geometryOf(dtype));
        fillPool(pool);
        size_t const payload = hostSlotPayloadBytes(pool);
        size_t const header = 24;
        size_t const slotBytes = header + payload + 8;  // 8 trailing bytes the copies never touch
        HostBuffer host(*backend, 4 * slotBytes);
        std::memset(host.data(), 0xEE, host.size());
        HostSlotLayout const layout{&host, slotBytes, header, 4};

        int32_t const pages[] = {2, 0};
        int32_t const slots[] = {3, 1};
        LaunchCounters const before = backend->counters();
        copyPagesToHost(pool, pages, slots, layout, 2);
        EXPECT_EQ(backend->counters().kernels, before.kernels + 1);  // one launch for 2 pages x 3 layers x K, V

        Bytes expected(host.size(), 0xEE);
        for (int i = 0; i < 2; ++i) {
            size_t at = static_cast<size_t>(slots[i]) * slotBytes + header;
            for (int32_t l = 0; l < pool.numLayers(); ++l) {
                for (int32_t flat : {pages[i], pages[i] + pool.numPages()}) {  // K page, then its V page
                    Bytes const page = patternPage(pool, l, flat);
                    std::copy(page.begin(), page.end(), expected.begin() + static_cast<long>(at));
                    at += page.size();
                }
            }
            EXPECT_EQ(at, static_cast<size_t>(slots[i]) * slotBytes + header + payload);
        }
        EXPECT_EQ(hostBytes(host), expected);

        KvPagePool cleared(*backend, geometryOf(dtype));
        int32_t const back[] = {1, 2};
        int32_t const from[] = {3, 1};  // slot 3 (page 2's bytes) into page 1, slot 1 (page 0's) into page 2
        copyPagesFromHost(cleared, back, from, layout, 2);
        for (int32_t l = 0; l < pool.numLayers(); ++l) {
            Bytes want(pool.layerBytes(l), 0);
            size_t const pageBytes = pool.pageBytes(l);
            auto put = [&](int32_t dstFlat, int32_t srcFlat) {
                Bytes const page = patternPage(pool, l, srcFlat);
                std::copy(page.begin(), page.end(), want.begin() + static_cast<long>(dstFlat * pageBytes));
            };
            put(1, 2);
            put(1 + 3, 2 + 3);
            put(2, 0);
            put(2 + 3, 0 + 3);
            EXPECT_EQ(readLayer(cleared, l), want) << "layer " << l;
        }
        EXPECT_EQ(hostBytes(host), expected);  // a copy from the host leaves it as it was
    }
}

// 3 pages of 5 tokens whose runs (one page of one layer's K or V) are 4 KiB and longer, of lengths no multiple of
// 16 (in fp8), which the CPU backend writes with streaming stores (cpp/device/streaming_copy.h): a run that starts
// off a 16-byte boundary (a slot's 24-byte header; an fp8 page of 5,000 bytes) and one whose length leaves a tail
// after its interleaved lines, beside a layer of short runs, copied plainly.
KvPoolGeometry longRunGeometry(DType dtype) { return KvPoolGeometry{3, 5, dtype, {{1, 1000}, {3, 300}, {2, 8}}}; }

}  // namespace

TEST(KvHostCopy, RoundTripWritesTheSlotLayoutForEveryDtype) {
    expectRoundTripLayout([](DType dtype) { return geometry(dtype); });
}

TEST(KvHostCopy, RoundTripOfRunsOfAtLeast4KiBAtOddOffsetsIsByteExact) {
    auto backend = createCpuBackend();
    KvPagePool fp8(*backend, longRunGeometry(DType::kFp8E4m3));
    ASSERT_EQ(fp8.pageBytes(0), 5000u);  // page 1 starts 8 bytes past a 16-byte boundary
    ASSERT_EQ(fp8.pageBytes(1), 4500u);  // 4,500 = 17 * 256 + 148: a tail after the interleaved lines
    expectRoundTripLayout(longRunGeometry);
}

TEST(KvHostCopy, ASubsetInScrambledOrderMovesOnlyItsPages) {
    auto backend = createCpuBackend();
    KvPagePool pool(*backend, geometry(DType::kBf16, 8));
    fillPool(pool);
    Bytes const original = readPool(pool);
    size_t const slotBytes = hostSlotPayloadBytes(pool);  // no header: payload at offset 0
    HostBuffer host(*backend, 6 * slotBytes);
    HostSlotLayout const layout{&host, slotBytes, 0, 6};
    int32_t const pages[] = {5, 2, 7};
    int32_t const slots[] = {0, 4, 2};
    copyPagesToHost(pool, pages, slots, layout, 3);
    // Slots 1, 3 and 5 stay zero.
    for (int32_t s : {1, 3, 5})
        EXPECT_EQ(Bytes(host.bytes() + s * slotBytes, host.bytes() + (s + 1) * slotBytes), Bytes(slotBytes, 0));

    // Rotate: page 5's bytes to page 7, page 2's to page 5, page 7's to page 2.
    int32_t const to[] = {7, 5, 2};
    copyPagesFromHost(pool, to, slots, layout, 3);
    for (int32_t l = 0; l < pool.numLayers(); ++l) {
        Bytes const layer = readLayer(pool, l);
        for (int32_t page = 0; page < 8; ++page) {
            int32_t const source = page == 7 ? 5 : page == 5 ? 2 : page == 2 ? 7 : page;
            for (int32_t half = 0; half < 2; ++half) {
                size_t const pb = pool.pageBytes(l);
                Bytes const got(layer.begin() + static_cast<long>((page + half * 8) * pb),
                                layer.begin() + static_cast<long>((page + half * 8 + 1) * pb));
                EXPECT_EQ(got, patternPage(pool, l, source + half * 8)) << "layer " << l << " page " << page;
            }
        }
    }
    // To the host, one page may go to two slots; from the host, one slot may fill two pages.
    int32_t const twicePages[] = {1, 1};
    int32_t const twoSlots[] = {1, 3};
    copyPagesToHost(pool, twicePages, twoSlots, layout, 2);
    EXPECT_EQ(Bytes(host.bytes() + slotBytes, host.bytes() + 2 * slotBytes),
              Bytes(host.bytes() + 3 * slotBytes, host.bytes() + 4 * slotBytes));
    int32_t const twoPages[] = {0, 6};
    int32_t const oneSlot[] = {1, 1};
    copyPagesFromHost(pool, twoPages, oneSlot, layout, 2);
    EXPECT_EQ(readPool(pool).size(), original.size());
}

TEST(KvHostCopy, EveryBadInputIsRefusedWithNothingChanged) {
    auto backend = createCpuBackend();
    KvPagePool pool(*backend, geometry(DType::kFp16));
    fillPool(pool);
    size_t const payload = hostSlotPayloadBytes(pool);
    size_t const slotBytes = 16 + payload;
    HostBuffer host(*backend, 4 * slotBytes);
    std::memset(host.data(), 0x3C, host.size());
    HostSlotLayout const layout{&host, slotBytes, 16, 4};
    Bytes const poolBefore = readPool(pool);
    Bytes const hostBefore = hostBytes(host);
    LaunchCounters const before = backend->counters();

    int32_t const one[] = {0};
    int32_t const badPage[] = {3};
    int32_t const negative[] = {-1};
    int32_t const badSlot[] = {4};
    int32_t const pair[] = {0, 1};
    int32_t const samePage[] = {1, 1};
    int32_t const sameSlot[] = {2, 2};
    auto toHost = [&](int32_t const* pages, int32_t const* slots, HostSlotLayout const& l, int32_t count) {
        return [&, pages, slots, count] { copyPagesToHost(pool, pages, slots, l, count); };
    };
    auto fromHost = [&](int32_t const* pages, int32_t const* slots, HostSlotLayout const& l, int32_t count) {
        return [&, pages, slots, count] { copyPagesFromHost(pool, pages, slots, l, count); };
    };
    expectContractError(toHost(badPage, one, layout, 1), "copyPagesToHost: pages[0] = 3 is outside [0, 3)");
    expectContractError(fromHost(negative, one, layout, 1), "copyPagesFromHost: pages[0] = -1 is outside [0, 3)");
    expectContractError(toHost(one, badSlot, layout, 1), "hostSlots[0] = 4 is outside [0, 4)");
    expectContractError(fromHost(one, negative, layout, 1), "hostSlots[0] = -1 is outside [0, 4)");
    expectContractError(toHost(one, one, layout, -1), "count is negative");
    expectContractError(toHost(nullptr, one, layout, 1), "pages or hostSlots is null");
    expectContractError(fromHost(one, nullptr, layout, 1), "pages or hostSlots is null");
    expectContractError(toHost(pair, sameSlot, layout, 2), "host slot 2 is a destination twice (in hostSlots)");
    expectContractError(fromHost(samePage, pair, layout, 2), "page 1 is a destination twice (in pages)");

    HostSlotLayout noHost = layout;
    noHost.host = nullptr;
    expectContractError(toHost(one, one, noHost, 1), "layout.host is null");
    HostBuffer emptyHost;
    HostSlotLayout empty = layout;
    empty.host = &emptyHost;
    expectContractError(toHost(one, one, empty, 1), "another backend");
    HostBuffer emptyWindow = HostBuffer::external(*backend, ExternalMemory{}, "test");
    empty.host = &emptyWindow;
    expectContractError(fromHost(one, one, empty, 1), "the host base is null");
    auto other = createCpuBackend();
    HostBuffer foreign(*other, host.size());
    HostSlotLayout foreignLayout = layout;
    foreignLayout.host = &foreign;
    expectContractError(toHost(one, one, foreignLayout, 1), "layout.host belongs to another backend");
    HostSlotLayout small = layout;
    small.slotBytes = 15 + payload;
    small.slotCount = 1;
    expectContractError(toHost(one, one, small, 1),
                        "layout.slotBytes " + std::to_string(15 + payload) + " is less than payloadOffset 16");
    HostSlotLayout tooMany = layout;
    tooMany.slotCount = 5;
    expectContractError(fromHost(one, one, tooMany, 1), "5 slots of");
    HostSlotLayout negativeSlots = layout;
    negativeSlots.slotCount = -1;
    expectContractError(toHost(one, one, negativeSlots, 1), "layout.slotCount is negative");
    HostBuffer overPool = HostBuffer::external(*backend, ExternalMemory{pool.data(), pool.footprintBytes()}, "test");
    HostSlotLayout aliasing{&overPool, payload, 0, static_cast<int32_t>(pool.footprintBytes() / payload)};
    expectContractError(toHost(one, one, aliasing, 1), "overlap the pool");

    EXPECT_EQ(readPool(pool), poolBefore);
    EXPECT_EQ(hostBytes(host), hostBefore);
    EXPECT_EQ(backend->counters().kernels, before.kernels);

    // Nothing to copy: validated, nothing launched.
    copyPagesToHost(pool, nullptr, nullptr, layout, 0);
    expectContractError(toHost(nullptr, nullptr, noHost, 0), "layout.host is null");
    EXPECT_EQ(backend->counters().kernels, before.kernels);
}

TEST(KvHostCopy, ACallLargerThanTheDescriptorTableIsRefused) {
    BackendOptions options;
    options.maxTableBytes = 4096;
    auto backend = createCpuBackend(options);
    KvPagePool pool(*backend, KvPoolGeometry{600, 1, DType::kFp16, {{1, 8}}});
    size_t const slotBytes = hostSlotPayloadBytes(pool);
    HostBuffer host(*backend, 600 * slotBytes);
    std::vector<int32_t> ids(600);
    for (int32_t i = 0; i < 600; ++i) ids[static_cast<size_t>(i)] = i;
    HostSlotLayout const layout{&host, slotBytes, 0, 600};
    // 32 bytes of one layer + 16 + 8 per page: 500 pages fit 4096 bytes, 600 do not.
    expectContractError([&] { copyPagesToHost(pool, ids.data(), ids.data(), layout, 600); },
                        "descriptor table needs 4848 bytes");
    copyPagesToHost(pool, ids.data(), ids.data(), layout, 500);
    EXPECT_EQ(backend->counters().kernels, 1u);
}

TEST(KvHostCopy, TheBackendFrontRefusesLayersOutsideTheSlot) {
    auto backend = createCpuBackend();
    Bytes pool(1024), host(1024);
    HostPageLayer layers[2] = {{pool.data(), 64, 0, 0}, {pool.data() + 512, 64, 100, 0}};
    int32_t const page[] = {0};
    HostPageCopyRequest r;
    r.layers = layers;
    r.numLayers = 2;
    r.numPages = 2;
    r.pages = page;
    r.slots = page;
    r.count = 1;
    r.host = host.data();
    r.slotBytes = 256;
    r.slotCount = 1;
    expectContractError([&] { backend->copyHostPages(r); },
                        "layer 1 starts at slot byte 100, inside the layer before it");
    layers[1].slotOffset = 200;
    expectContractError([&] { backend->copyHostPages(r); }, "layer 1's K and V pages (2 x 64 bytes at 200) do not fit");
    layers[1].slotOffset = 128;
    layers[0].pageBytes = 0;
    expectContractError([&] { backend->copyHostPages(r); }, "layer 0 has empty pages");
    layers[0].pageBytes = 64;
    r.direction = static_cast<HostCopyDirection>(2);
    expectContractError([&] { backend->copyHostPages(r); }, "unknown direction 2");
    r.direction = HostCopyDirection::kToHost;
    backend->copyHostPages(r);
    EXPECT_EQ(Bytes(host.begin(), host.begin() + 256), Bytes(256, 0));
}
