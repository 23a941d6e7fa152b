// The coordinator and the device objects it shares with the engine: a snapshot storage must be built over the very
// resident state and base pool the coordinator drives (it restores into its own state and reads its own pool's
// pages, while the coordinator zeroes and compacts the state it was given); a page table starts with empty rows;
// and a coordinator destroyed under a live request leaves the tables (which outlive it) without stale rows.
#include <gtest/gtest.h>

#include <memory>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/errors.h"
#include "ctxcache/runtime/context_cache_coordinator.h"

namespace ctxcache::runtime {
namespace {

struct HybridWorld {
    std::unique_ptr<device::DeviceBackend> backend = device::createBackend(device::BackendKind::kCpu);
    device::KvPagePool pool{*backend, device::KvPoolGeometry{8, 4, device::DType::kFp16, {{1, 2}}}};
    device::KvPagePool otherPool{*backend, device::KvPoolGeometry{8, 4, device::DType::kFp16, {{1, 2}}}};
    device::KvPageTable table{*backend, 2, 4, 8};
    device::KvLengths lengths{*backend, 2};
    device::ResidentState state{*backend, geometry()};
    device::ResidentState otherState{*backend, geometry()};

    static device::ResidentStateGeometry geometry() {
        device::ResidentStateGeometry g;
        g.maxBatch = 2;
        g.numLayers = 1;
        g.recurrentHeads = 1;
        g.recurrentHeadDim = 2;
        g.stateSize = 2;
        return g;
    }

    device::SnapshotStorage storage(device::ResidentState const* s, device::KvPagePool const* p) {
        return device::SnapshotStorage(*backend, s, p, nullptr, device::SnapshotBudgets{1024, 1024, false});
    }

    ContextCachePhysicalResources resources(device::SnapshotStorage* snapshots) {
        ContextCachePhysicalResources r;
        r.basePool = &pool;
        r.basePageTable = &table;
        r.baseLengths = &lengths;
        r.residentState = &state;
        r.snapshots = snapshots;
        return r;
    }
};

ContextCacheConfig config() {
    ContextCacheConfig c;
    c.maxBatch = 2;
    return c;
}

ContextCacheDeploymentProfile hybrid() {
    ContextCacheDeploymentProfile p;
    p.baseStateKind = ContextCacheModelStateKind::kHybrid;
    return p;
}

TEST(RuntimeResources, HybridCoordinatorAcceptsASnapshotStorageOverItsOwnStateAndPool) {
    HybridWorld w;
    device::SnapshotStorage own = w.storage(&w.state, &w.pool);
    ContextCacheCoordinator coordinator(config(), hybrid(), w.resources(&own));
    coordinator.checkInvariants();
}

TEST(RuntimeResources, SnapshotStorageOverAnotherResidentStateIsRefused) {
    HybridWorld w;
    device::SnapshotStorage foreign = w.storage(&w.otherState, &w.pool);
    EXPECT_THROW(ContextCacheCoordinator(config(), hybrid(), w.resources(&foreign)), ContractError);
}

TEST(RuntimeResources, SnapshotStorageOverAnotherBasePoolIsRefused) {
    HybridWorld w;
    device::SnapshotStorage foreign = w.storage(&w.state, &w.otherPool);
    EXPECT_THROW(ContextCacheCoordinator(config(), hybrid(), w.resources(&foreign)), ContractError);
}

TEST(RuntimeResources, PureRecurrentSnapshotStorageMustHoldNoPartialKv) {
    HybridWorld w;
    device::SnapshotStorage withPool = w.storage(&w.state, &w.pool);
    ContextCacheConfig c = config();
    c.pageSize = 4;
    ContextCacheDeploymentProfile recurrent;
    recurrent.baseStateKind = ContextCacheModelStateKind::kPureRecurrent;
    ContextCachePhysicalResources r;
    r.residentState = &w.state;
    r.snapshots = &withPool;
    EXPECT_THROW(ContextCacheCoordinator(c, recurrent, r), ContractError);
    device::SnapshotStorage stateOnly = w.storage(&w.state, nullptr);
    r.snapshots = &stateOnly;
    ContextCacheCoordinator coordinator(c, recurrent, r);
    coordinator.checkInvariants();
}

ContextCacheBatchAdmission oneSequence(int32_t slot, uint64_t epoch) {
    ContextCacheBatchAdmission a;
    static std::vector<int32_t> const kPrompt{1, 2, 3, 4, 5, 6};  // the admission views it
    ContextCacheSequenceAdmission s;
    s.tokenIds = kPrompt;
    s.resident = ResidentRef{slot, epoch};
    a.sequences.push_back(s);
    return a;
}

TEST(RuntimeResources, CoordinatorDestroyedUnderALiveRequestClearsItsRows) {
    HybridWorld w;
    ContextCachePhysicalResources r;
    r.basePool = &w.pool;
    r.basePageTable = &w.table;
    r.baseLengths = &w.lengths;
    ContextCacheCoordinator::RequestHandle orphan;
    {
        ContextCacheCoordinator first(config(), ContextCacheDeploymentProfile{}, r);
        auto begun = first.beginRequest(oneSequence(1, 1), DecodingKvHeadroom{});
        ASSERT_EQ(begun.status, ContextCacheCoordinatorStatus::kOk);
        orphan = std::move(*begun.request);
        ASSERT_EQ(first.preparePrefill(orphan), ContextCacheCoordinatorStatus::kOk);
        EXPECT_NE(w.table.hostRow(1)[0], -1);
    }
    EXPECT_FALSE(orphan.valid());  // detached
    EXPECT_EQ(w.table.hostRow(1)[0], -1) << "the destroyed coordinator left its row bound";
    EXPECT_FALSE(w.table.dirty());
    ContextCacheCoordinator second(config(), ContextCacheDeploymentProfile{}, r);
    second.checkInvariants();
}

TEST(RuntimeResources, PageTableWithABoundRowIsRefused) {
    HybridWorld w;
    int32_t const pages[] = {3};
    w.table.setRow(1, pages, 1);
    ContextCachePhysicalResources r;
    r.basePool = &w.pool;
    r.basePageTable = &w.table;
    r.baseLengths = &w.lengths;
    EXPECT_THROW(ContextCacheCoordinator(config(), ContextCacheDeploymentProfile{}, r), ContractError);
}

}  // namespace
}  // namespace ctxcache::runtime
