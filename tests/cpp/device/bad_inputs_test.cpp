// The bad-input catalogue in C++: every bad input the reliability issue names that the C++ API can express
// (handles and numpy arrays cannot be: C++ has objects and typed containers), each refused with a
// ctxcache::ContractError whose message names the argument, changing nothing (manager snapshot, page-table rows,
// pool, state and snapshot bytes), and leaking nothing (pools back to capacity, backend bytes back to zero).
// The last section holds the regressions tests/fuzz/device_fuzz.cpp found, as the C++ API sees them.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <memory>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/chunked_hash.h"
#include "ctxcache/device/kv_gather.h"
#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/device/snapshot_storage.h"
#include "support/device_test_support.h"
#include "support/test_support.h"

using namespace ctxcache;
using namespace ctxcache::device;
using ctxcache::test::Bytes;
using ctxcache::test::expectContractError;
using ctxcache::test::pattern;
using ctxcache::test::chain;
using ctxcache::test::expectCompletesWithinAddressSpace;
using ctxcache::test::poolsFull;
using ctxcache::test::describe;

namespace {

constexpr int32_t kPage = 4;

// A manager with one record [A0, A1] and a live consumer lease on it plus one private page.
struct Served {
    ContextCacheManager m{kPage, {8, 0, 0, 0}, 8};
    std::vector<BlockHash> hashes = chain(1, 2);
    CacheRequestLease lease;

    Served() {
        AcquireResult producer = m.acquireVanilla(hashes, 8);
        m.publish(*producer.lease, {hashes, 8});
        producer.lease->release();
        std::vector<BlockHash> longer = hashes;
        longer.push_back(ctxcache::test::blockHash(1, 2));
        lease = std::move(*m.acquireVanilla(longer, 12).lease);
    }

    void drainAndCheck() {
        lease.release();
        ctxcache::test::evictAll(m);
        EXPECT_TRUE(poolsFull(m));
        EXPECT_NO_THROW(m.checkInvariants());
    }
};

Bytes poolBytes(KvPagePool const& pool) {
    Bytes out;
    for (int32_t layer = 0; layer < pool.numLayers(); ++layer) {
        Bytes b(pool.layerBytes(layer));
        pool.readPages(layer, 0, 2 * pool.numPages(), b.data(), b.size());
        out.insert(out.end(), b.begin(), b.end());
    }
    return out;
}

std::vector<int32_t> hostTable(KvPageTable const& t) {
    return std::vector<int32_t>(t.hostData(), t.hostData() + t.entryCount());
}

// A CPU backend with a patterned pool, a table, lengths and a resident state.
struct DeviceWorld {
    std::unique_ptr<DeviceBackend> backend = createCpuBackend();
    KvPagePool pool{*backend, KvPoolGeometry{4, 4, DType::kFp16, {{1, 2}}}};
    KvPageTable table{*backend, 3, 3, 4};
    KvLengths lengths{*backend, 4};
    ResidentState state{*backend, ResidentStateGeometry{3, 1, 1, 2, 2, DType::kFp32, 2, 2, DType::kFp16, 0}};

    DeviceWorld() {
        Bytes const bytes = pattern(pool.layerBytes(0), 7);
        pool.writePages(0, 0, 8, bytes.data(), bytes.size());
        int32_t const row[] = {1, 2};
        table.setRow(0, row, 2);
        table.upload();
        int32_t const active[] = {5, 3, 7};
        lengths.set(active, 3);
        for (int32_t slot = 0; slot < 3; ++slot) {
            Bytes const r = pattern(state.rowBytes(StatePart::kRecurrent), static_cast<uint32_t>(slot));
            state.writeRow(StatePart::kRecurrent, 0, slot, r.data(), r.size());
        }
    }

    // Everything observable, as bytes.
    Bytes observe() const {
        Bytes out = poolBytes(pool);
        auto add = [&](void const* p, size_t n) {
            out.insert(out.end(), static_cast<uint8_t const*>(p), static_cast<uint8_t const*>(p) + n);
        };
        std::vector<int32_t> const host = hostTable(table);
        add(host.data(), 4 * host.size());
        std::vector<int32_t> device(table.entryCount());
        backend->download(device.data(), table.deviceView(), 4 * device.size());
        add(device.data(), 4 * device.size());
        out.push_back(table.dirty() ? 1 : 0);
        std::vector<int32_t> const l = lengths.read();
        add(l.data(), 4 * l.size());
        for (int32_t slot = 0; slot < 3; ++slot)
            for (StatePart part : {StatePart::kRecurrent, StatePart::kConv}) {
                Bytes r(state.rowBytes(part));
                state.readRow(part, 0, slot, r.data(), r.size());
                out.insert(out.end(), r.begin(), r.end());
            }
        return out;
    }
};

}  // namespace

// ---- handles: the C++ forms of dangling, double-released, orphaned and foreign leases ----------------------------

TEST(BadInputs, ReleasedLeaseIsRefusedLikeADoubleRelease) {
    Served s;
    AcquireResult other = s.m.acquireVanilla({}, 4);
    other.lease->release();
    other.lease->release();  // a second release is a no-op in C++ (the C ABI answers CTXC_E_INVALID_HANDLE)
    auto const before = describe(s.m);
    expectContractError([&] { s.m.growBasePages(*other.lease, 1); },
                        "growBasePages: lease is empty (released or moved from)");
    expectContractError([&] { s.m.publish(*other.lease, {s.hashes, 8}); }, "lease is empty");
    EXPECT_EQ(describe(s.m), before);
    s.drainAndCheck();
}

TEST(BadInputs, LeaseUsedAfterItsManagerDiedIsRefused) {
    auto dead = std::make_unique<ContextCacheManager>(kPage, ResourceDemand{4, 0, 0, 0}, 8);
    CacheRequestLease orphan = std::move(*dead->acquireVanilla({}, 4).lease);
    dead.reset();
    EXPECT_FALSE(orphan.valid());
    Served s;
    auto const before = describe(s.m);
    expectContractError([&] { s.m.growBasePages(orphan, 1); }, "lease outlived its manager");
    expectContractError([&] { s.m.publish(orphan, {s.hashes, 8}); }, "lease outlived its manager");
    EXPECT_EQ(describe(s.m), before);
    orphan.release();  // a no-op that must not touch the destroyed manager (ASan would see it)
    s.drainAndCheck();
}

TEST(BadInputs, LeaseOfAnotherManagerIsRefused) {
    Served a, b;
    auto const beforeA = describe(a.m), beforeB = describe(b.m);
    expectContractError([&] { b.m.publish(a.lease, {a.hashes, 8}); }, "lease belongs to another manager");
    expectContractError([&] { b.m.growBasePages(a.lease, 1); }, "lease belongs to another manager");
    EXPECT_EQ(describe(a.m), beforeA);
    EXPECT_EQ(describe(b.m), beforeB);
    a.drainAndCheck();
    b.drainAndCheck();
}

// ---- counts and hashes ------------------------------------------------------------------------------------------

TEST(BadInputs, NegativeCountsAreRefused) {
    Served s;
    auto const before = describe(s.m);
    expectContractError([&] { s.m.growBasePages(s.lease, -1); }, "count is negative (-1)");
    expectContractError([&] { s.m.acquireVanilla({}, -4); }, "-4");
    expectContractError([&] { s.m.publish(s.lease, {s.hashes, -8}); }, "residentStateLength");
    EXPECT_EQ(describe(s.m), before);
    s.drainAndCheck();

    DeviceWorld w;
    Bytes const start = w.observe();
    Bytes page(16);
    expectContractError([&] { w.pool.writePages(0, 0, -1, page.data(), 0); }, "pages [0, +-1)");
    int32_t const negative[] = {3, -2};
    expectContractError([&] { w.lengths.set(negative, 2); }, "lengths[1] is negative (-2)");
    int32_t const map[] = {0, 1, 2};
    expectContractError([&] { w.table.compactRows(map, -1, 0); }, "oldBatch -1");
    expectContractError([&] { w.state.compact(map, 3, -1); }, "negative batch size");
    EXPECT_EQ(w.observe(), start);
}

TEST(BadInputs, HugeCountsAreRefusedOrAnswered) {
    Served s;
    auto const before = describe(s.m);
    EXPECT_FALSE(s.m.growBasePages(s.lease, std::numeric_limits<int32_t>::max()));  // a capacity answer
    EXPECT_EQ(describe(s.m), before);
    s.drainAndCheck();

    DeviceWorld w;
    Bytes const start = w.observe();
    int32_t const pages[] = {0, 1, 2, 3};
    expectContractError([&] { w.table.setRow(0, pages, 4); }, "count 4 is outside [0, 3]");
    Bytes page(16);
    expectContractError([&] { w.pool.writePages(0, 1, std::numeric_limits<int32_t>::max(), page.data(), page.size()); },
                        "pages [1, +2147483647) are outside [0, 8)");
    int32_t const five[] = {1, 1, 1, 1, 1};
    expectContractError([&] { w.lengths.set(five, 5); }, "count 5 is outside [0, 4]");
    int32_t const map[] = {0};
    expectContractError([&] { w.state.compact(map, std::numeric_limits<int32_t>::max(), 1); },
                        "oldBatch 2147483647 exceeds maxBatch 3");
    EXPECT_EQ(w.observe(), start);
}

TEST(BadInputs, HashesOfTheWrongLengthAreRefused) {
    Served s;
    auto const before = describe(s.m);
    expectContractError([&] { s.m.acquireVanilla(chain(2, 3), 11); }, "3 full-block hashes for 11 tokens");
    expectContractError([&] { s.m.acquireVanilla(s.hashes, 0); }, "2 full-block hashes for 0 tokens");
    expectContractError([&] { s.m.publish(s.lease, {chain(1, 4), 16}); }, "4 blocks but the lease holds 3 base pages");
    EXPECT_EQ(describe(s.m), before);
    s.drainAndCheck();
}

TEST(BadInputs, PublishOfHashesThatNoLongerDescribeTheAcquiredPrefixIsRefused) {
    Served s;
    auto const before = describe(s.m);
    std::vector<BlockHash> changed = s.hashes;
    changed[1].lo ^= 1;
    expectContractError([&] { s.m.publish(s.lease, {changed, 8}); },
                        "fullBlockHashes[1] no longer describes the acquired prefix");
    EXPECT_EQ(describe(s.m), before);
    EXPECT_EQ(s.m.publish(s.lease, {s.hashes, 8}).status, PublishStatus::kExistingRecord);  // still good afterwards
    s.drainAndCheck();
}

// ---- compaction maps ----------------------------------------------------------------------------------------

TEST(BadInputs, CompactionMapThatReordersIsRefused) {
    DeviceWorld w;
    Bytes const start = w.observe();
    int32_t const swap[] = {1, 0, -1};
    expectContractError([&] { w.lengths.compact(swap, 3, 2); }, "oldToNew[0] = 1 reorders");
    expectContractError([&] { w.state.compact(swap, 3, 2); }, "oldToNew[0] = 1 reorders");
    DeviceBuffer rows(*w.backend, 32);
    Bytes const bytes = pattern(32, 3);
    rows.write(0, bytes.data(), bytes.size());
    expectContractError([&] { compactBatch(*w.backend, rows.data(), 8, 4, swap, 3, 2); }, "oldToNew[0] = 1 reorders");
    EXPECT_EQ(ctxcache::test::readBuffer(rows), bytes);
    EXPECT_EQ(w.observe(), start);
}

TEST(BadInputs, CompactionMapThatDuplicatesIsRefused) {
    DeviceWorld w;
    Bytes const start = w.observe();
    int32_t const twice[] = {0, 0, -1};
    expectContractError([&] { w.lengths.compact(twice, 3, 1); }, "overlapping map: oldToNew[1] = 0");
    expectContractError([&] { w.state.compact(twice, 3, 1); }, "overlapping map: oldToNew[1] = 0");
    expectContractError([&] { w.table.compactRows(twice, 3, 1); },
                        "overlapping map: oldToNew[1] = 0 repeats the destination of row 0");
    EXPECT_EQ(w.observe(), start);
}

// ---- page ids and capacities -------------------------------------------------------------------------------

TEST(BadInputs, PageIdsOutOfRangeAreRefused) {
    Served s;
    auto const before = describe(s.m);
    expectContractError([&] { (void)s.m.pools().activeRefCount({ResourceType::kBaseKvPage, 8}); },
                        "out of range [0, 8)");
    EXPECT_EQ(describe(s.m), before);
    s.drainAndCheck();

    DeviceWorld w;
    Bytes const start = w.observe();
    int32_t const beyond[] = {0, 4};
    expectContractError([&] { w.table.setRow(1, beyond, 2); }, "page id 4 is outside [0, 4)");
    expectContractError([&] { w.table.setEntry(0, 2, -7); }, "page id -7");
    Bytes page(16);
    expectContractError([&] { w.pool.readPages(0, 8, 1, page.data(), page.size()); },
                        "pages [8, +1) are outside [0, 8)");
    EXPECT_EQ(w.observe(), start);
}

TEST(BadInputs, ZeroCapacitiesAreRefused) {
    auto backend = createCpuBackend();
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{0, 4, DType::kFp16, {{1, 1}}}); },
                        "numPages must be positive (got 0)");
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{4, 0, DType::kFp16, {{1, 1}}}); },
                        "pageSize must be positive (got 0)");
    expectContractError([&] { KvPagePool(*backend, KvPoolGeometry{4, 4, DType::kFp16, {}}); }, "at least one layer");
    expectContractError([&] { KvPageTable(*backend, 0, 3, 4); }, "must be positive (got 0, 3, 4)");
    expectContractError([&] { KvLengths(*backend, 0); }, "maxBatch must be positive (got 0)");
    expectContractError([&] {
        ResidentState(*backend, ResidentStateGeometry{0, 0, 0, 0, 0, DType::kFp32, 0, 0, DType::kFp16, 4});
    }, "maxBatch must be positive (got 0)");
    BackendOptions zeroChunks;
    zeroChunks.maxHashChunks = 0;
    expectContractError([&] { createCpuBackend(zeroChunks); }, "maxHashChunks must be positive");
    EXPECT_EQ(backend->allocatedBytes(), 0u);  // nothing refused allocated anything
    // A manager with zero capacities is legal; every acquire is a capacity answer.
    ContextCacheManager m(kPage, {0, 0, 0, 0}, 8);
    AcquireResult r = m.acquireVanilla(chain(1, 1), 5);
    EXPECT_EQ(r.status, AcquireStatus::kInsufficientCapacity);
    EXPECT_FALSE(r.lease.has_value());
    EXPECT_TRUE(poolsFull(m));
    EXPECT_THROW(ContextCacheManager(0, {4, 0, 0, 0}, 8), ContractError);
}

TEST(BadInputs, DeviceGeometryThatDoesNotMatchAPoolIsRefused) {
    DeviceWorld w;
    Bytes const start = w.observe();
    KvPageTable five(*w.backend, 3, 3, 5);
    DeviceBuffer k(*w.backend, 256), v(*w.backend, 256);
    KvGatherRequest r;
    r.batch = 1;
    r.seqLen = 4;
    expectContractError([&] { gatherPagedKv(w.pool, five, nullptr, r, k.data(), v.data(), 256); },
                        "the table addresses 5 pages, the pool has 4");
    r.layer = 1;
    expectContractError([&] { gatherPagedKv(w.pool, w.table, nullptr, r, k.data(), v.data(), 256); },
                        "layer 1 is outside [0, 1)");
    Bytes bytes(17);
    expectContractError([&] { w.pool.writePages(0, 0, 1, bytes.data(), bytes.size()); },
                        "17 bytes given for 1 pages of 16 bytes");
    auto other = createCpuBackend();
    KvPagePool foreign(*other, KvPoolGeometry{4, 4, DType::kFp16, {{1, 2}}});
    SnapshotBudgets budgets;
    budgets.partialKvBytes = 1024;
    expectContractError([&] { SnapshotStorage(*w.backend, nullptr, &foreign, nullptr, budgets); },
                        "the state and pools must live on the storage's backend");
    SnapshotStorage storage(*w.backend, &w.state, &w.pool, nullptr, budgets);
    SnapshotTransfer t;
    t.partialKvSlot = 0;
    t.basePage = 1;
    t.validTokens = 4;
    expectContractError([&] { storage.restore(t); }, "validTokens 4 is outside (0, 4)");
    EXPECT_EQ(w.observe(), start);
}

// ---- regressions found by device_fuzz ------------------------------------------------------------------------

TEST(DeviceFuzzRegressions, DescriptorTablesAreBounded) {
    BackendOptions huge;
    huge.maxTableBytes = std::numeric_limits<size_t>::max();  // escaped as std::length_error from a reserve
    expectContractError([&] { createCpuBackend(huge); }, "maxTableBytes must be in [4096, 1073741824]");
    huge.maxTableBytes = kMaxTableBytes + 1;
    expectContractError([&] { createCpuBackend(huge); }, "maxTableBytes");
}

TEST(DeviceFuzzRegressions, PageTableEntriesAreBounded) {
    auto backend = createCpuBackend();
    int32_t const max = std::numeric_limits<int32_t>::max();
    expectContractError([&] { KvPageTable(*backend, max, max, 4); },
                        "entries exceeds INT32_MAX");  // was std::length_error
    expectContractError([&] { KvPageTable(*backend, max, 1, 4); }, "4294967294 entries");
    EXPECT_EQ(backend->allocatedBytes(), 0u);
}

TEST(DeviceFuzzRegressions, RefusedGeometriesAllocateNothingFirst) {
#ifdef CTXC_UNDER_ASAN
    GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix";
#else
    // 64 MiB of headroom: the old code allocated 8 GiB (KvLengths) or 512 GiB (ResidentState) before refusing.
    auto refusesWithContractError = [](std::function<void()> const& make) {
        return [make] {
            try {
                make();
            } catch (ContractError const&) {
                return;
            }
            throw std::runtime_error("not refused");
        };
    };
    expectCompletesWithinAddressSpace(size_t{64} << 20, refusesWithContractError([] {
        auto backend = createCpuBackend();
        KvLengths(*backend, std::numeric_limits<int32_t>::max());
    }));
    expectCompletesWithinAddressSpace(size_t{64} << 20, refusesWithContractError([] {
        auto backend = createCpuBackend();
        ResidentState(*backend, ResidentStateGeometry{1, std::numeric_limits<int32_t>::max() / 2, 1, 1, 1, DType::kFp32,
                                                      0, 0, DType::kFp16, 0});
    }));
    expectCompletesWithinAddressSpace(size_t{64} << 20, refusesWithContractError([] {
        auto backend = createCpuBackend();  // 65536 chunks at most: a 64 GiB partials vector was sized first
        DeviceBuffer buffer(*backend, 16);
        std::vector<Hash128> partials;
        chunkedFnv1a128(*backend, buffer.data(), 16, std::numeric_limits<uint32_t>::max(), &partials);
    }));
#endif
}

TEST(DeviceFuzzRegressions, HostChunkedHashNeedsNoMemoryPerChunk) {
#ifdef CTXC_UNDER_ASAN
    GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix";
#else
    // 2^22 chunks: the old host path sized a 64 MiB partials vector; it now folds each partial in at once.
    Bytes const data = pattern(1000, 5);
    uint32_t const chunks = 1u << 22;
    expectCompletesWithinAddressSpace(size_t{16} << 20,
                                      [&] { (void)chunkedFnv1a128Host(data.data(), data.size(), chunks); });
    // And the digest is still the documented reduction (checked in-process, with an explicit partials vector).
    auto backend = createCpuBackend(BackendOptions{size_t{1} << 20, chunks});
    DeviceBuffer buffer(*backend, data.size());
    buffer.write(0, data.data(), data.size());
    EXPECT_EQ(chunkedFnv1a128(*backend, buffer.data(), data.size(), chunks),
              chunkedFnv1a128Host(data.data(), data.size(), chunks));
#endif
}

TEST(DeviceFuzzRegressions, GatherOutputBytesThatOverflowAreRefused) {
    auto backend = createCpuBackend();
    KvPagePool pool(*backend, KvPoolGeometry{1, 1, DType::kFp16, {{1024, 1024}}});
    KvGatherRequest r;
    r.batch = std::numeric_limits<int32_t>::max();
    r.seqLen = std::numeric_limits<int32_t>::max();
    expectContractError([&] { (void)gatherOutputBytes(pool, r); }, "overflow size_t");  // wrapped to 0 before
}

TEST(DeviceFuzzRegressions, SnapshotStorageNeedsTwoDistinctPoolsForBaseAndDraft) {
    auto backend = createCpuBackend();
    KvPagePool pool(*backend, KvPoolGeometry{2, 4, DType::kFp16, {{1, 2}}});
    SnapshotBudgets budgets;
    budgets.partialKvBytes = 1024;
    expectContractError([&] { SnapshotStorage(*backend, nullptr, &pool, &pool, budgets); },
                        "the draft pool must be another pool than the base pool");
}
