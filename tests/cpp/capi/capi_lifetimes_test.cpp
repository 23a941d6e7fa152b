// Destruction in any order at the C ABI, as a C runtime sees it (only "ctxcache.h" and the shared library): for every
// pair of C objects where one refers to another, both orders, and for the runtime's requests the orders that go
// through quarantine, shutdown and reuse of the parent. Each case asserts the statuses, that later calls on the
// survivor answer CTXC_E_INVALID_HANDLE (or work, where the survivor legitimately outlives its parent: device
// objects and the SWA manager keep what they were built over), and nothing leaks; built with
// -DCTXCACHE_SANITIZE=ON, AddressSanitizer proves that no order reads freed memory. Pairs: a bounded-SWA manager and
// its requests (ctxc_swa_request_t and a ctxc_kv_request_t begun with ctxc_kv_request_begin_swa), a coordinator and
// its requests, a backend and each object built on it (buffer, pool, table, lengths, state, snapshot storage, a
// DLPack export), a snapshot storage and the state and pool it reads, a manager and its leases, a KV event
// publisher and the cache it is attached to (a manager, a coordinator).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "capi_test_support.h"
#include "cpu_kv_device.h"
#include "ctxcache.h"
#include "decoding_batch.h"
#include "device_creates.h"

namespace {

::testing::AssertionResult says(ctxc_status_t got, ctxc_status_t want, char const* needle) {
    std::string const message = ctxc_last_error();
    if (got != want)
        return ::testing::AssertionFailure() << "status " << ctxc_status_string(got) << ", expected "
                                             << ctxc_status_string(want) << " (" << message << ")";
    if (message.find(needle) == std::string::npos)
        return ::testing::AssertionFailure() << "last error \"" << message << "\" lacks \"" << needle << "\"";
    return ::testing::AssertionSuccess();
}

struct Sync {
    bool fail = false;
};

int synchronizeWith(void* user, void*) { return static_cast<Sync*>(user)->fail ? 1 : 0; }

size_t allocated(ctxc_device_backend_t const* b) {
    size_t bytes = 1;
    EXPECT_EQ(ctxc_device_backend_allocated_bytes(b, &bytes), CTXC_OK);
    return bytes;
}

// ---- bounded-SWA manager and its requests ---------------------------------------------------------------------

// How a request on the SWA manager was begun: its own ctxc_swa_request_t, or the facade's ctxc_kv_request_t.
enum class Kind { kSwa, kFacade };

char const* nameOf(Kind k) { return k == Kind::kSwa ? "swa" : "facade"; }

// One request on the manager, of either kind, with the steps the cases need.
struct SwaRequest {
    Kind kind = Kind::kSwa;
    ctxc_swa_request_t* swa = nullptr;
    ctxc_kv_request_t* kv = nullptr;
    Batch batch;  // the facade's engine batch
    std::vector<ctxc_sequence_request_t> sequences;

    ctxc_status_t begin(ctxc_swa_manager_t* m, int32_t slot, uint64_t epoch) {
        if (kind == Kind::kSwa) {
            ctxc_resident_ref_t const ref{slot, 0, epoch};
            return ctxc_swa_manager_begin_request(m, &ref, 1, nullptr, &swa);
        }
        batch = Batch{};
        batch.add({1, 2, 3, 4, 5, 6, 7, 8, 9}, slot, epoch);
        sequences = {sequenceOf(batch.tokens[0])};
        ctxc_kv_request_options_t o;
        ctxc_kv_request_options_init(&o);
        return ctxc_kv_request_begin_swa(m, sequences.data(), sequences.size(), batch(), &o, &kv);
    }
    ctxc_status_t preparePrefill() {
        int32_t const nine = 9;
        return kind == Kind::kSwa ? ctxc_swa_request_prepare_prefill(swa, &nine, 1)
                                  : ctxc_kv_request_prepare_swa_prefill(kv, &nine, 1);
    }
    ctxc_status_t completePrefill() {
        if (kind == Kind::kSwa) return ctxc_swa_request_complete_prefill(swa);
        if (batch.tokens[0].size() == 9) batch.sample(0, 10);  // the lookahead token
        return ctxc_kv_request_complete_prefill(kv, batch(), nullptr, 0);
    }
    ctxc_status_t finish() { return kind == Kind::kSwa ? ctxc_swa_request_finish(swa) : ctxc_kv_request_finish(kv); }
    // The window of row 0 (struct_size checked by the library).
    ctxc_status_t window(ctxc_swa_state_t& s) {
        s = ctxc_swa_state_t{};
        s.struct_size = sizeof s;
        return kind == Kind::kSwa ? ctxc_swa_request_state(swa, 0, &s) : ctxc_kv_request_swa_state(kv, 0, &s);
    }
    ctxc_status_t destroy() {
        ctxc_status_t const st = kind == Kind::kSwa ? ctxc_swa_request_destroy(swa) : ctxc_kv_request_destroy(kv);
        if (st == CTXC_OK) swa = nullptr, kv = nullptr;
        return st;
    }
    ctxc_status_t destroyAgain(ctxc_swa_request_t* oldSwa, ctxc_kv_request_t* oldKv) const {
        return kind == Kind::kSwa ? ctxc_swa_request_destroy(oldSwa) : ctxc_kv_request_destroy(oldKv);
    }
    // Every call a request answers once its manager is gone: CTXC_E_INVALID_HANDLE naming the manager.
    void expectOrphaned() {
        ctxc_swa_state_t s;
        EXPECT_TRUE(says(window(s), CTXC_E_INVALID_HANDLE, "manager"));
        EXPECT_TRUE(says(finish(), CTXC_E_INVALID_HANDLE, "manager"));
        EXPECT_TRUE(says(preparePrefill(), CTXC_E_INVALID_HANDLE, "manager"));
        if (kind == Kind::kSwa) {
            int32_t batchSize = -1;
            EXPECT_TRUE(says(ctxc_swa_request_batch_size(swa, &batchSize), CTXC_E_INVALID_HANDLE, "manager"));
        } else {
            ctxc_kv_request_info_t info{};
            info.struct_size = sizeof info;
            EXPECT_TRUE(says(ctxc_kv_request_info(kv, &info), CTXC_E_INVALID_HANDLE, "manager"));
        }
    }
    // Destroy (CTXC_OK), then the stale handle is CTXC_E_INVALID_HANDLE.
    void destroyAndCheckStale() {
        ctxc_swa_request_t* const s = swa;
        ctxc_kv_request_t* const k = kv;
        ASSERT_EQ(destroy(), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(destroyAgain(s, k), CTXC_E_INVALID_HANDLE);
    }
};

// A CPU backend, a 20-page pool of 4-token pages, a sparse-window 4 x 16 table, lengths for 4 and a manager with
// a window of 8 tokens: 7 private pages per sequence. The test parameter: the kinds of the first and the second
// request (a and b).
class SwaLifetimes : public ::testing::TestWithParam<std::tuple<Kind, Kind>>, protected CpuKvDevice {
protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(createDevice(20, 16, CTXC_PAGE_TABLE_SPARSE_WINDOW));
        ASSERT_EQ(createSwaManager(synchronizeWith, &sync, &manager), CTXC_OK) << ctxc_last_error();
        a.kind = std::get<0>(GetParam());
        b.kind = std::get<1>(GetParam());
    }
    void TearDown() override {
        EXPECT_EQ(a.destroy(), CTXC_OK);
        EXPECT_EQ(b.destroy(), CTXC_OK);
        if (manager) {
            EXPECT_EQ(ctxc_swa_manager_check_invariants(manager), CTXC_OK) << ctxc_last_error();
        }
        EXPECT_EQ(ctxc_swa_manager_destroy(manager), CTXC_OK) << ctxc_last_error();
        destroyDevice(true);
    }
    int32_t freePages() {
        int32_t n = -1;
        EXPECT_EQ(ctxc_swa_manager_free_page_count(manager, &n), CTXC_OK) << ctxc_last_error();
        return n;
    }
    // Request r quarantined: its prefill's completion point fails to synchronise.
    void quarantine(SwaRequest& r) {
        ASSERT_EQ(r.preparePrefill(), CTXC_OK) << ctxc_last_error();
        sync.fail = true;
        ASSERT_EQ(r.completePrefill(), CTXC_E_POISONED) << ctxc_last_error();
        sync.fail = false;
        EXPECT_EQ(freePages(), 20 - 7);  // the device may still read its pages
    }
    // a quarantined, the quarantine resolved by shutdown, the manager reused for b (slot 1), b's prefill done.
    void quarantineShutdownReuse() {
        ASSERT_EQ(a.begin(manager, 0, 1), CTXC_OK) << ctxc_last_error();
        quarantine(a);
        ASSERT_EQ(ctxc_swa_manager_shutdown(manager), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(freePages(), 20);
        ASSERT_EQ(b.begin(manager, 1, 1), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(b.preparePrefill(), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(b.completePrefill(), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(freePages(), 20 - 7);
    }
    void destroyManager(ctxc_status_t expected) {
        ctxc_swa_manager_t* const m = manager;
        if (expected == CTXC_OK) EXPECT_EQ(ctxc_swa_manager_destroy(m), CTXC_OK) << ctxc_last_error();
        else EXPECT_TRUE(says(ctxc_swa_manager_destroy(m), expected, "live request"));
        manager = nullptr;
        int32_t n = -1;
        EXPECT_EQ(ctxc_swa_manager_free_page_count(m, &n), CTXC_E_INVALID_HANDLE);  // gone either way
        EXPECT_EQ(ctxc_swa_manager_destroy(m), CTXC_E_INVALID_HANDLE);
    }

    Sync sync;
    ctxc_swa_manager_t* manager = nullptr;
    SwaRequest a, b;
};

TEST_P(SwaLifetimes, RequestFirstThenManager) {
    ASSERT_EQ(a.begin(manager, 0, 1), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(a.preparePrefill(), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(freePages(), 20 - 7);
    a.destroyAndCheckStale();  // abandoned unfinished: synchronised and released
    EXPECT_EQ(freePages(), 20);
    destroyManager(CTXC_OK);
}

TEST_P(SwaLifetimes, ManagerFirstUnderALiveRequestOrphansIt) {
    ASSERT_EQ(a.begin(manager, 0, 1), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(a.preparePrefill(), CTXC_OK) << ctxc_last_error();
    destroyManager(CTXC_E_LEASES_OUTSTANDING);
    a.expectOrphaned();
    a.destroyAndCheckStale();
}

TEST_P(SwaLifetimes, ManagerFirstAfterTheRequestFinished) {
    ASSERT_EQ(a.begin(manager, 0, 1), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(a.finish(), CTXC_OK) << ctxc_last_error();
    destroyManager(CTXC_OK);
    a.expectOrphaned();
    a.destroyAndCheckStale();
}

TEST_P(SwaLifetimes, QuarantinedRequestOutlivesItsManager) {
    ASSERT_EQ(a.begin(manager, 0, 1), CTXC_OK) << ctxc_last_error();
    quarantine(a);
    destroyManager(CTXC_OK);  // no live request: the quarantined one is synchronised and released with it
    a.expectOrphaned();
    a.destroyAndCheckStale();
}

TEST_P(SwaLifetimes, QuarantinedRequestThenShutdownThenManagerFirst) {
    ASSERT_EQ(a.begin(manager, 0, 1), CTXC_OK) << ctxc_last_error();
    quarantine(a);
    ASSERT_EQ(ctxc_swa_manager_shutdown(manager), CTXC_OK) << ctxc_last_error();
    destroyManager(CTXC_OK);
    a.expectOrphaned();
    a.destroyAndCheckStale();
}

// The fuzzer's heap-use-after-free: a request quarantined, the manager shut down and reused for another request,
// the manager destroyed, then the first request destroyed (it still named the manager).
TEST_P(SwaLifetimes, QuarantinedRequestOutlivesAManagerReusedAfterShutdown) {
    quarantineShutdownReuse();
    destroyManager(CTXC_E_LEASES_OUTSTANDING);  // b is live
    a.expectOrphaned();
    b.expectOrphaned();
    a.destroyAndCheckStale();
    b.destroyAndCheckStale();
}

TEST_P(SwaLifetimes, BothRequestsOutliveAManagerReusedAfterShutdownOnceTheSecondFinished) {
    quarantineShutdownReuse();
    ASSERT_EQ(b.finish(), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(freePages(), 20);
    destroyManager(CTXC_OK);
    b.destroyAndCheckStale();  // the newer first this time
    a.expectOrphaned();
    a.destroyAndCheckStale();
}

TEST_P(SwaLifetimes, TheQuarantinedRequestDestroyedWhileTheReusedManagerServesAnother) {
    quarantineShutdownReuse();
    a.destroyAndCheckStale();  // touches nothing of b's
    EXPECT_EQ(freePages(), 20 - 7);
    ctxc_swa_state_t s;
    ASSERT_EQ(b.window(s), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(s.resident.slot, 1);
    EXPECT_EQ(s.exact_resident_token_count, 9);
    ASSERT_EQ(b.finish(), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(freePages(), 20);
    b.destroyAndCheckStale();
    destroyManager(CTXC_OK);
}

TEST_P(SwaLifetimes, TheQuarantinedRequestFinishedAfterShutdownAndReuse) {
    quarantineShutdownReuse();
    // The resolved request is not the live one: finishing it releases nothing of b's.
    EXPECT_EQ(a.finish(), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(freePages(), 20 - 7);
    destroyManager(CTXC_E_LEASES_OUTSTANDING);
    a.expectOrphaned();
    b.expectOrphaned();
    b.destroyAndCheckStale();
    a.destroyAndCheckStale();
}

TEST_P(SwaLifetimes, DeviceHandlesAndBackendFirstThenTheManagerStillServes) {
    ASSERT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_destroy(table), CTXC_OK);
    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_destroy(backend), CTXC_OK);
    lengths = nullptr;
    table = nullptr;
    pool = nullptr;
    backend = nullptr;
    ASSERT_EQ(a.begin(manager, 0, 1), CTXC_OK) << ctxc_last_error();
    quarantine(a);
    ASSERT_EQ(ctxc_swa_manager_shutdown(manager), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(b.begin(manager, 1, 1), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(b.preparePrefill(), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(b.completePrefill(), CTXC_OK) << ctxc_last_error();
    destroyManager(CTXC_E_LEASES_OUTSTANDING);  // the last owner of the device objects
    a.destroyAndCheckStale();
    b.destroyAndCheckStale();
}

INSTANTIATE_TEST_SUITE_P(Kinds, SwaLifetimes,
                         ::testing::Combine(::testing::Values(Kind::kSwa, Kind::kFacade),
                                            ::testing::Values(Kind::kSwa, Kind::kFacade)),
                         [](auto const& info) {
                             return std::string(nameOf(std::get<0>(info.param))) + "_then_" +
                                    nameOf(std::get<1>(info.param));
                         });

// ---- coordinator and its requests -----------------------------------------------------------------------------

// A CPU backend, a 16-page pool of 4-token pages, a dense 4 x 8 table, lengths for 4, and a vanilla coordinator.
class CoordinatorLifetimes : public ::testing::Test, protected CpuKvDevice {
protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(createDevice(16, 8, CTXC_PAGE_TABLE_DENSE));
        ctxc_coordinator_resources_t const r = baseResources();
        ctxc_coordinator_options_t o;
        ctxc_coordinator_options_init(&o);
        o.max_batch = 4;
        o.max_records = 8;
        o.page_size = 4;
        o.synchronize = synchronizeWith;
        o.synchronize_user = &sync;
        ASSERT_EQ(ctxc_coordinator_create(&r, &o, &coordinator), CTXC_OK) << ctxc_last_error();
    }
    void TearDown() override {
        EXPECT_EQ(ctxc_kv_request_destroy(a), CTXC_OK);
        EXPECT_EQ(ctxc_kv_request_destroy(b), CTXC_OK);
        if (coordinator) {
            EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
        }
        EXPECT_EQ(ctxc_coordinator_destroy(coordinator), CTXC_OK) << ctxc_last_error();
        destroyDevice(true);
    }
    // begin + prefill of a batch (each row samples 100 + row).
    void prefill(Batch& batch, ctxc_kv_request_t** out) {
        std::vector<ctxc_sequence_request_t> seqs;
        for (auto const& t : batch.tokens) seqs.push_back(sequenceOf(t));
        ctxc_kv_request_options_t o;
        ctxc_kv_request_options_init(&o);
        ASSERT_EQ(ctxc_kv_request_begin(coordinator, seqs.data(), seqs.size(), batch(), &o, out), CTXC_OK)
            << ctxc_last_error();
        ASSERT_EQ(ctxc_kv_request_prepare_prefill(*out), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(ctxc_kv_request_enqueue_prefill_captures(*out), CTXC_OK) << ctxc_last_error();
        for (size_t i = 0; i < batch.tokens.size(); ++i) batch.sample(i, 100 + static_cast<int32_t>(i));
        ASSERT_EQ(ctxc_kv_request_complete_prefill(*out, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    }
    // Request a (two rows, slots 0 and 1) quarantined in place: its compaction's synchronisation fails, so the
    // handle keeps a quarantined state that still names the coordinator.
    void quarantineA() {
        batchA.add({1, 2, 3, 4, 5, 6, 7, 8}, 0, 1);
        batchA.add({11, 12, 13, 14}, 1, 1);
        prefill(batchA, &a);
        batchA.status[1] = CTXC_SEQUENCE_CANCELLED;
        int32_t const map[] = {0, -1};
        std::vector<int32_t> device(2, -7);
        ASSERT_EQ(ctxc_kv_request_begin_batch_compaction(a, map, 2, 1, device.data(), device.size()), CTXC_OK)
            << ctxc_last_error();
        sync.fail = true;
        ASSERT_EQ(ctxc_kv_request_complete_batch_compaction(a, map, 2), CTXC_E_POISONED) << ctxc_last_error();
        sync.fail = false;
        ctxc_coordinator_info_t const i = info();
        EXPECT_EQ(i.poisoned, 1);
        EXPECT_EQ(i.quarantined_requests, 1u);
        EXPECT_EQ(i.active_requests, 0);
    }
    // a quarantined, shutdown, the coordinator reused for b (slot 2).
    void quarantineShutdownReuse() {
        quarantineA();
        ASSERT_EQ(ctxc_coordinator_shutdown(coordinator), CTXC_OK) << ctxc_last_error();
        batchB.add({21, 22, 23, 24, 25}, 2, 1);
        prefill(batchB, &b);
        EXPECT_EQ(info().active_requests, 1);
    }
    ctxc_coordinator_info_t info() {
        ctxc_coordinator_info_t i{};
        i.struct_size = sizeof i;
        EXPECT_EQ(ctxc_coordinator_info(coordinator, &i), CTXC_OK) << ctxc_last_error();
        return i;
    }
    void destroyCoordinator(ctxc_status_t expected) {
        ctxc_coordinator_t* const c = coordinator;
        if (expected == CTXC_OK) EXPECT_EQ(ctxc_coordinator_destroy(c), CTXC_OK) << ctxc_last_error();
        else EXPECT_TRUE(says(ctxc_coordinator_destroy(c), expected, "live request"));
        coordinator = nullptr;
        ctxc_coordinator_info_t i{};
        i.struct_size = sizeof i;
        EXPECT_EQ(ctxc_coordinator_info(c, &i), CTXC_E_INVALID_HANDLE);
        EXPECT_EQ(ctxc_coordinator_destroy(c), CTXC_E_INVALID_HANDLE);
    }
    static void expectOrphaned(ctxc_kv_request_t* r, Batch& batch) {
        ctxc_kv_request_info_t i{};
        i.struct_size = sizeof i;
        EXPECT_TRUE(says(ctxc_kv_request_info(r, &i), CTXC_E_INVALID_HANDLE, "outlived its coordinator"));
        EXPECT_TRUE(says(ctxc_kv_request_finish(r), CTXC_E_INVALID_HANDLE, "outlived its coordinator"));
        EXPECT_TRUE(says(ctxc_kv_request_prepare_decode_step(r, batch(), nullptr), CTXC_E_INVALID_HANDLE,
                         "outlived its coordinator"));
    }
    static void destroyAndCheckStale(ctxc_kv_request_t*& r) {
        ASSERT_EQ(ctxc_kv_request_destroy(r), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(ctxc_kv_request_destroy(r), CTXC_E_INVALID_HANDLE);
        r = nullptr;
    }

    Sync sync;
    ctxc_coordinator_t* coordinator = nullptr;
    ctxc_kv_request_t* a = nullptr;
    ctxc_kv_request_t* b = nullptr;
    Batch batchA, batchB;
};

TEST_F(CoordinatorLifetimes, RequestFirstThenCoordinator) {
    batchA.add({1, 2, 3, 4, 5, 6, 7, 8}, 0, 1);
    prefill(batchA, &a);
    destroyAndCheckStale(a);  // abandoned: released
    EXPECT_EQ(info().active_requests, 0);
    destroyCoordinator(CTXC_OK);
}

TEST_F(CoordinatorLifetimes, CoordinatorFirstUnderALiveRequestOrphansIt) {
    batchA.add({1, 2, 3, 4, 5, 6, 7, 8}, 0, 1);
    prefill(batchA, &a);
    destroyCoordinator(CTXC_E_LEASES_OUTSTANDING);
    expectOrphaned(a, batchA);
    destroyAndCheckStale(a);
}

TEST_F(CoordinatorLifetimes, CoordinatorFirstAfterTheRequestFinished) {
    batchA.add({1, 2, 3, 4, 5, 6, 7, 8}, 0, 1);
    prefill(batchA, &a);
    ASSERT_EQ(ctxc_kv_request_finish(a), CTXC_OK) << ctxc_last_error();
    destroyCoordinator(CTXC_OK);
    expectOrphaned(a, batchA);
    destroyAndCheckStale(a);
}

TEST_F(CoordinatorLifetimes, QuarantinedRequestOutlivesItsCoordinator) {
    quarantineA();
    destroyCoordinator(CTXC_OK);  // a quarantined request is not live
    expectOrphaned(a, batchA);
    destroyAndCheckStale(a);
}

TEST_F(CoordinatorLifetimes, QuarantinedRequestOutlivesACoordinatorReusedAfterShutdown) {
    quarantineShutdownReuse();
    destroyCoordinator(CTXC_E_LEASES_OUTSTANDING);  // b is live
    expectOrphaned(a, batchA);
    expectOrphaned(b, batchB);
    destroyAndCheckStale(a);
    destroyAndCheckStale(b);
}

TEST_F(CoordinatorLifetimes, TheQuarantinedRequestDestroyedWhileTheReusedCoordinatorServesAnother) {
    quarantineShutdownReuse();
    destroyAndCheckStale(a);  // touches nothing of b's
    EXPECT_EQ(info().active_requests, 1);
    ASSERT_EQ(ctxc_kv_request_prepare_decode_step(b, batchB(), nullptr), CTXC_OK) << ctxc_last_error();
    batchB.sample(0, 7);
    ASSERT_EQ(ctxc_kv_request_complete_decode_step(b, batchB(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_finish(b), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(info().active_requests, 0);
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    destroyAndCheckStale(b);
    destroyCoordinator(CTXC_OK);
}

TEST_F(CoordinatorLifetimes, TheQuarantinedRequestFinishedThenBothOutliveTheCoordinator) {
    quarantineShutdownReuse();
    // A quarantined request's finish fails (the coordinator is no longer poisoned after the shutdown).
    EXPECT_EQ(ctxc_kv_request_finish(a), CTXC_E_REQUEST_FAILED);
    ASSERT_EQ(ctxc_kv_request_finish(b), CTXC_OK) << ctxc_last_error();
    destroyCoordinator(CTXC_OK);
    expectOrphaned(b, batchB);
    destroyAndCheckStale(b);
    destroyAndCheckStale(a);
}

TEST_F(CoordinatorLifetimes, DeviceHandlesAndBackendFirstThenTheCoordinatorStillServes) {
    ASSERT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_destroy(table), CTXC_OK);
    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_destroy(backend), CTXC_OK);
    lengths = nullptr;
    table = nullptr;
    pool = nullptr;
    backend = nullptr;
    quarantineShutdownReuse();
    destroyCoordinator(CTXC_E_LEASES_OUTSTANDING);  // the last owner of the device objects
    destroyAndCheckStale(b);
    destroyAndCheckStale(a);
}

// ---- a backend and the objects built on it ---------------------------------------------------------------------

// One kind of device object: how to create it on a backend, a call that exercises it (and returns its status),
// and its destroy.
struct DeviceObject {
    char const* name;
    std::function<ctxc_status_t(ctxc_device_backend_t*, void**)> create;
    std::function<ctxc_status_t(void*)> use;
    std::function<ctxc_status_t(void*)> destroy;
};

ctxc_resident_state_options_t stateOptions() {
    ctxc_resident_state_options_t so;
    ctxc_resident_state_options_init(&so);
    so.max_batch = 2;
    so.num_layers = 1;
    so.recurrent_heads = 1;
    so.recurrent_head_dim = 2;
    so.state_size = 2;
    so.hidden_size = 4;
    return so;
}

std::vector<DeviceObject> deviceObjects() {
    std::vector<DeviceObject> out;
    out.push_back({"buffer", [](ctxc_device_backend_t* b, void** o) {
        return createBuffer(b, 64, reinterpret_cast<ctxc_device_buffer_t**>(o));
    }, [](void* o) {
        auto* buffer = static_cast<ctxc_device_buffer_t*>(o);
        uint32_t const written = 0xC0FFEE;
        uint32_t read = 0;
        ctxc_status_t st = ctxc_device_buffer_write(buffer, 8, &written, sizeof written);
        if (st != CTXC_OK) return st;
        st = ctxc_device_buffer_read(buffer, 8, &read, sizeof read);
        return st == CTXC_OK && read != written ? CTXC_E_INTERNAL : st;
    }, [](void* o) { return ctxc_device_buffer_destroy(static_cast<ctxc_device_buffer_t*>(o)); }});
    out.push_back({"pool", [](ctxc_device_backend_t* b, void** o) {
        return createKvPool(b, 4, reinterpret_cast<ctxc_kv_pool_t**>(o));
    }, [](void* o) {
        size_t bytes = 0;
        return ctxc_kv_pool_footprint_bytes(static_cast<ctxc_kv_pool_t*>(o), &bytes);
    }, [](void* o) { return ctxc_kv_pool_destroy(static_cast<ctxc_kv_pool_t*>(o)); }});
    out.push_back({"table", [](ctxc_device_backend_t* b, void** o) {
        return createPageTable(b, 2, 4, 8, CTXC_PAGE_TABLE_DENSE, reinterpret_cast<ctxc_kv_page_table_t**>(o));
    }, [](void* o) {
        auto* t = static_cast<ctxc_kv_page_table_t*>(o);
        ctxc_status_t const st = ctxc_kv_page_table_set_entry(t, 1, 0, 5);
        if (st != CTXC_OK) return st;
        int32_t copies = -1;
        return ctxc_kv_page_table_upload(t, &copies);
    }, [](void* o) { return ctxc_kv_page_table_destroy(static_cast<ctxc_kv_page_table_t*>(o)); }});
    out.push_back({"lengths", [](ctxc_device_backend_t* b, void** o) {
        return createLengths(b, 4, reinterpret_cast<ctxc_kv_lengths_t**>(o));
    }, [](void* o) {
        auto* l = static_cast<ctxc_kv_lengths_t*>(o);
        int32_t const values[2] = {3, 9};
        ctxc_status_t const st = ctxc_kv_lengths_set(l, values, 2);
        if (st != CTXC_OK) return st;
        int32_t read[4] = {};
        size_t count = 0;
        ctxc_status_t const r = ctxc_kv_lengths_read(l, read, 4, &count);
        return r == CTXC_OK && (count != 2 || read[1] != 9) ? CTXC_E_INTERNAL : r;
    }, [](void* o) { return ctxc_kv_lengths_destroy(static_cast<ctxc_kv_lengths_t*>(o)); }});
    out.push_back({"resident state", [](ctxc_device_backend_t* b, void** o) {
        ctxc_resident_state_options_t const so = stateOptions();
        return ctxc_resident_state_create(b, &so, reinterpret_cast<ctxc_resident_state_t**>(o));
    }, [](void* o) { return ctxc_resident_state_zero_slot(static_cast<ctxc_resident_state_t*>(o), 1); }, [](void* o) {
        return ctxc_resident_state_destroy(static_cast<ctxc_resident_state_t*>(o));
    }});
    out.push_back({"snapshot storage", [](ctxc_device_backend_t* b, void** o) {
        ctxc_snapshot_storage_options_t sto;
        ctxc_snapshot_storage_options_init(&sto);
        sto.recurrent_budget_bytes = 0;
        return ctxc_snapshot_storage_create(b, nullptr, nullptr, nullptr, &sto,
                                            reinterpret_cast<ctxc_snapshot_storage_t**>(o));
    }, [](void* o) {
        ctxc_snapshot_layout_t l{};
        l.struct_size = sizeof l;
        return ctxc_snapshot_storage_layout(static_cast<ctxc_snapshot_storage_t*>(o), &l);
    }, [](void* o) { return ctxc_snapshot_storage_destroy(static_cast<ctxc_snapshot_storage_t*>(o)); }});
    return out;
}

TEST(DeviceLifetimes, EachObjectFirstThenTheBackend) {
    for (DeviceObject const& d : deviceObjects()) {
        SCOPED_TRACE(d.name);
        ctxc_device_backend_t* b = cpuBackend();
        void* o = nullptr;
        ASSERT_EQ(d.create(b, &o), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(d.use(o), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(d.destroy(o), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(d.use(o), CTXC_E_INVALID_HANDLE);
        EXPECT_EQ(d.destroy(o), CTXC_E_INVALID_HANDLE);
        EXPECT_EQ(allocated(b), 0u);
        ASSERT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
    }
}

TEST(DeviceLifetimes, TheBackendFirstThenEachObjectStillWorks) {
    for (DeviceObject const& d : deviceObjects()) {
        SCOPED_TRACE(d.name);
        ctxc_device_backend_t* b = cpuBackend();
        void* o = nullptr;
        ASSERT_EQ(d.create(b, &o), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
        size_t bytes = 0;
        EXPECT_EQ(ctxc_device_backend_allocated_bytes(b, &bytes), CTXC_E_INVALID_HANDLE);
        EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_E_INVALID_HANDLE);
        void* other = nullptr;
        EXPECT_EQ(d.create(b, &other), CTXC_E_INVALID_HANDLE);  // nothing more is built on it
        EXPECT_EQ(other, nullptr);
        EXPECT_EQ(d.use(o), CTXC_OK) << ctxc_last_error();  // the object keeps its backend
        ASSERT_EQ(d.destroy(o), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(d.use(o), CTXC_E_INVALID_HANDLE);
    }
}

TEST(DeviceLifetimes, SnapshotStorageOutlivesItsStatePoolsAndBackend) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_resident_state_options_t const so = stateOptions();
    ctxc_resident_state_t* state = nullptr;
    ASSERT_EQ(ctxc_resident_state_create(b, &so, &state), CTXC_OK) << ctxc_last_error();
    ctxc_kv_pool_t* base = nullptr;
    ctxc_kv_pool_t* draft = nullptr;
    ASSERT_EQ(createKvPool(b, 4, &base), CTXC_OK);
    ASSERT_EQ(createKvPool(b, 4, &draft), CTXC_OK);
    ctxc_snapshot_storage_options_t sto;
    ctxc_snapshot_storage_options_init(&sto);
    sto.recurrent_budget_bytes = 4096;
    sto.partial_kv_budget_bytes = 4096;
    ctxc_snapshot_storage_t* storage = nullptr;
    ASSERT_EQ(ctxc_snapshot_storage_create(b, state, base, draft, &sto, &storage), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_resident_state_destroy(state), CTXC_OK);
    ASSERT_EQ(ctxc_kv_pool_destroy(draft), CTXC_OK);
    ASSERT_EQ(ctxc_kv_pool_destroy(base), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
    ctxc_snapshot_layout_t layout{};
    layout.struct_size = sizeof layout;
    ASSERT_EQ(ctxc_snapshot_storage_layout(storage, &layout), CTXC_OK) << ctxc_last_error();
    ASSERT_GT(layout.recurrent_slots, 0);
    ASSERT_GT(layout.partial_kv_slots, 0);
    // A capture reads the state and both pools, which the storage kept alive.
    ctxc_snapshot_transfer_t t;
    ctxc_snapshot_transfer_init(&t);
    t.batch_slot = 1;
    t.recurrent_slot = 0;
    t.partial_kv_slot = 0;
    t.base_page = 2;
    t.draft_page = 3;
    t.valid_tokens = 2;
    EXPECT_EQ(ctxc_snapshot_storage_capture(storage, &t), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_snapshot_storage_destroy(storage), CTXC_OK);
    EXPECT_EQ(ctxc_snapshot_storage_layout(storage, &layout), CTXC_E_INVALID_HANDLE);
}

TEST(DeviceLifetimes, ADlpackExportOutlivesItsPoolAndBackend) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_pool_t* pool = nullptr;
    ASSERT_EQ(createKvPool(b, 4, &pool), CTXC_OK);
    ctxc_device_view_t v{};
    v.struct_size = sizeof v;
    ASSERT_EQ(ctxc_kv_pool_layer_view(pool, 0, &v), CTXC_OK) << ctxc_last_error();
    void* managed = nullptr;
    ASSERT_EQ(ctxc_device_view_to_dlpack(&v, pool, 1, &managed), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
    std::memset(v.data, 0x5A, v.bytes);  // the consumer still owns the memory (ASan: not freed)
    EXPECT_EQ(static_cast<unsigned char const*>(v.data)[v.bytes - 1], 0x5A);
    ctxc_dlpack_release(managed, 1);  // the last reference: the pool's memory and its backend go now
    void* again = nullptr;
    EXPECT_EQ(ctxc_device_view_to_dlpack(&v, pool, 1, &again), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(again, nullptr);
}

// ---- a manager and its leases ----------------------------------------------------------------------------------

ctxc_manager_t* makeManager() {
    ctxc_manager_options_t options;
    ctxc_manager_options_init(&options);
    options.page_size = 4;
    options.capacities = {8, 0, 0, 0};
    options.max_records = 8;
    ctxc_manager_t* m = nullptr;
    EXPECT_EQ(ctxc_manager_create(&options, &m), CTXC_OK) << ctxc_last_error();
    return m;
}

ctxc_lease_t* acquire(ctxc_manager_t* m, std::vector<ctxc_hash128_t> const& hashes, int32_t tokens) {
    ctxc_acquire_result_t r{};
    r.struct_size = sizeof r;
    ctxc_lease_t* lease = nullptr;
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), hashes.size(), tokens, CTXC_LOOKUP_USE_CACHE, &r, &lease),
              CTXC_OK)
        << ctxc_last_error();
    return lease;
}

size_t liveLeases(ctxc_manager_t const* m) {
    size_t n = 99;
    EXPECT_EQ(ctxc_manager_live_lease_count(m, &n), CTXC_OK) << ctxc_last_error();
    return n;
}

int32_t leaseState(ctxc_lease_t const* lease) {
    ctxc_lease_info_t info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(ctxc_lease_info(lease, &info), CTXC_OK) << ctxc_last_error();
    return info.state;
}

ctxc_hash128_t H(uint64_t n) { return ctxc_hash128_t{0x11FE000000000000ull | n, 0x7111E5ull ^ n}; }

TEST(LeaseLifetimes, LeasesFirstThenTheManager) {
    ctxc_manager_t* m = makeManager();
    std::vector<ctxc_hash128_t> const hashes{H(1), H(2)};
    ctxc_lease_t* live = acquire(m, hashes, 8);
    ctxc_lease_t* released = acquire(m, {}, 4);
    ASSERT_EQ(ctxc_lease_release(released), CTXC_OK);
    EXPECT_EQ(liveLeases(m), 1u);
    ASSERT_EQ(ctxc_lease_destroy(live), CTXC_OK);  // destroying a live lease releases it
    EXPECT_EQ(liveLeases(m), 0u);
    ASSERT_EQ(ctxc_lease_destroy(released), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(live), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK) << ctxc_last_error();
}

TEST(LeaseLifetimes, TheManagerFirstOrphansEveryLeaseAndANewManagerIsNotConfused) {
    ctxc_manager_t* m = makeManager();
    ctxc_lease_t* live = acquire(m, {H(1)}, 4);
    ctxc_lease_t* released = acquire(m, {}, 4);
    ASSERT_EQ(ctxc_lease_release(released), CTXC_OK);
    EXPECT_TRUE(says(ctxc_manager_destroy(m), CTXC_E_LEASES_OUTSTANDING, "1 live lease"));
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_E_INVALID_HANDLE);
    ctxc_manager_t* next = makeManager();  // may reuse the slot; the generation differs
    ctxc_lease_t* fresh = acquire(next, {}, 4);
    for (ctxc_lease_t* orphan : {live, released}) {
        EXPECT_EQ(leaseState(orphan), CTXC_LEASE_ORPHANED);
        int32_t const* pages = nullptr;
        size_t count = 0;
        EXPECT_TRUE(says(ctxc_lease_base_pages(orphan, &pages, &count), CTXC_E_INVALID_HANDLE, "outlived"));
        EXPECT_TRUE(says(ctxc_lease_release(orphan), CTXC_E_INVALID_HANDLE, "outlived"));
        int32_t grown = -1;
        EXPECT_EQ(ctxc_manager_grow_base_pages(next, orphan, 1, &grown), CTXC_E_INVALID_HANDLE);
    }
    ASSERT_EQ(ctxc_lease_destroy(live), CTXC_OK);
    ASSERT_EQ(ctxc_lease_destroy(released), CTXC_OK);
    EXPECT_EQ(liveLeases(next), 1u);  // the orphans' destruction touched nothing of the new manager
    EXPECT_EQ(leaseState(fresh), CTXC_LEASE_LIVE);
    ASSERT_EQ(ctxc_lease_destroy(fresh), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(next), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_manager_destroy(next), CTXC_OK) << ctxc_last_error();
}

// ---- a KV event publisher and the cache it is attached to ------------------------------------------------------

// A publisher on an in-process endpoint, or null (and the test skipped) when the library was built without it.
ctxc_kv_event_publisher_t* makePublisher(char const* tag) {
    std::string const endpoint = "inproc://ctxcache-lifetimes-" + std::string(tag) + "-" + std::to_string(getpid());
    ctxc_kv_event_publisher_options_t o;
    ctxc_kv_event_publisher_options_init(&o);
    o.endpoint = endpoint.c_str();
    ctxc_kv_event_publisher_t* p = nullptr;
    EXPECT_EQ(ctxc_kv_event_publisher_create(&o, &p), CTXC_OK) << ctxc_last_error();
    return p;
}

uint64_t acceptedBatches(ctxc_kv_event_publisher_t const* p) {
    ctxc_kv_event_publisher_stats_t s{};
    s.struct_size = sizeof s;
    EXPECT_EQ(ctxc_kv_event_publisher_stats(p, &s), CTXC_OK) << ctxc_last_error();
    return s.accepted_batches;
}

// One publication on m (2 blocks), with its tokens: the event stream gets a BlockStored.
void publishOnce(ctxc_manager_t* m, uint64_t seed) {
    std::vector<ctxc_hash128_t> const hashes{H(seed), H(seed + 1)};
    std::vector<int32_t> tokens(8);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(seed * 10 + i);
    ctxc_lease_t* lease = acquire(m, hashes, 8);
    ctxc_publish_result_t r{};
    r.struct_size = sizeof r;
    EXPECT_EQ(
        ctxc_manager_publish_with_tokens(m, lease, hashes.data(), 2, 8, tokens.data(), tokens.size(), nullptr, &r),
        CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
}

class PublisherLifetimes : public ::testing::Test {
protected:
    void SetUp() override {
        if (!ctxc_kv_event_publisher_available())
            GTEST_SKIP() << "this library was built without the ZMQ KV event publisher";
        manager = makeManager();
        ASSERT_EQ(ctxc_kv_events_enable(manager, 0), CTXC_OK) << ctxc_last_error();
        publisher = makePublisher(::testing::UnitTest::GetInstance()->current_test_info()->name());
        ASSERT_NE(publisher, nullptr);
        ASSERT_EQ(ctxc_kv_events_attach_publisher(manager, publisher), CTXC_OK) << ctxc_last_error();
        publishOnce(manager, 1);
    }
    void TearDown() override {
        EXPECT_EQ(ctxc_kv_event_publisher_destroy(publisher), CTXC_OK);
        EXPECT_EQ(ctxc_manager_destroy(manager), CTXC_OK);
    }
    ctxc_manager_t* manager = nullptr;
    ctxc_kv_event_publisher_t* publisher = nullptr;
};

TEST_F(PublisherLifetimes, ThePublisherFirstThenTheManagerKeepsWorking) {
    EXPECT_GE(acceptedBatches(publisher), 1u);
    ASSERT_EQ(ctxc_kv_event_publisher_destroy(publisher), CTXC_OK);
    ctxc_kv_event_publisher_stats_t s{};
    s.struct_size = sizeof s;
    EXPECT_EQ(ctxc_kv_event_publisher_stats(publisher, &s), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_kv_events_attach_publisher(manager, publisher), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_kv_event_publisher_destroy(publisher), CTXC_E_INVALID_HANDLE);
    publisher = nullptr;
    publishOnce(manager, 5);  // the manager still holds the closed publisher: its events are counted as dropped
    int32_t enabled = -1;
    size_t pending = 99;
    ASSERT_EQ(ctxc_kv_events_status(manager, &enabled, &pending, nullptr), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(enabled, 1);
    EXPECT_EQ(pending, 0u);  // with a publisher attached nothing is pending
    ASSERT_EQ(ctxc_kv_events_disable(manager), CTXC_OK);  // detaches the closed publisher: its last reference
    EXPECT_EQ(ctxc_manager_check_invariants(manager), CTXC_OK) << ctxc_last_error();
}

TEST_F(PublisherLifetimes, TheManagerFirstThenThePublisherKeepsWorking) {
    ASSERT_EQ(ctxc_manager_destroy(manager), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_kv_events_status(manager, nullptr, nullptr, nullptr), CTXC_E_INVALID_HANDLE);
    manager = nullptr;
    EXPECT_GE(acceptedBatches(publisher), 1u);
    int32_t empty = -1;
    EXPECT_EQ(ctxc_kv_event_publisher_flush(publisher, 1000, &empty), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(empty, 1);
    ctxc_manager_t* next = makeManager();  // another cache may take the publisher over
    ASSERT_EQ(ctxc_kv_events_enable(next, 0), CTXC_OK);
    ASSERT_EQ(ctxc_kv_events_attach_publisher(next, publisher), CTXC_OK) << ctxc_last_error();
    uint64_t const before = acceptedBatches(publisher);
    publishOnce(next, 7);
    EXPECT_GT(acceptedBatches(publisher), before);
    EXPECT_EQ(ctxc_manager_destroy(next), CTXC_OK);
}

TEST_F(PublisherLifetimes, ACoordinatorAsTheCacheDestroyedFirst) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_pool_t* pool = nullptr;
    ctxc_kv_page_table_t* table = nullptr;
    ctxc_kv_lengths_t* lengths = nullptr;
    ASSERT_EQ(createKvPool(b, 8, &pool), CTXC_OK);
    ASSERT_EQ(createPageTable(b, 2, 4, 8, CTXC_PAGE_TABLE_DENSE, &table), CTXC_OK);
    ASSERT_EQ(createLengths(b, 2, &lengths), CTXC_OK);
    ctxc_coordinator_resources_t r;
    ctxc_coordinator_resources_init(&r);
    r.base_pool = pool;
    r.base_page_table = table;
    r.base_lengths = lengths;
    ctxc_coordinator_options_t o;
    ctxc_coordinator_options_init(&o);
    o.max_batch = 2;
    o.max_records = 4;
    o.page_size = 4;
    ctxc_coordinator_t* c = nullptr;
    ASSERT_EQ(ctxc_coordinator_create(&r, &o, &c), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_destroy(table), CTXC_OK);
    ASSERT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
    ASSERT_EQ(ctxc_kv_events_enable(c, 0), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_events_attach_publisher(c, publisher), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_coordinator_destroy(c), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_kv_events_status(c, nullptr, nullptr, nullptr), CTXC_E_INVALID_HANDLE);
    EXPECT_GE(acceptedBatches(publisher), 1u);  // the publisher outlives every cache it served
}

// The late-joiner options at the C ABI: defaults 0, negative values refused with the field's name, the hold seen
// in the stats, the subscriber wait answering within its timeout, and a stale handle an error.
TEST(PublisherWait, OptionsStatsAndTheSubscriberWait) {
    if (!ctxc_kv_event_publisher_available()) GTEST_SKIP() << "built without the ZMQ KV event publisher";
    std::string const endpoint = "inproc://ctxcache-wait-" + std::to_string(getpid());
    ctxc_kv_event_publisher_options_t o;
    ctxc_kv_event_publisher_options_init(&o);
    EXPECT_EQ(o.wait_for_subscriber_ms, 0);
    EXPECT_EQ(o.linger_ms, 0);
    o.endpoint = endpoint.c_str();
    ctxc_kv_event_publisher_t* p = nullptr;
    o.wait_for_subscriber_ms = -1;
    EXPECT_EQ(ctxc_kv_event_publisher_create(&o, &p), CTXC_E_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ctxc_last_error()).find("wait_for_subscriber_ms"), std::string::npos) << ctxc_last_error();
    o.wait_for_subscriber_ms = 0;
    o.linger_ms = -1;
    EXPECT_EQ(ctxc_kv_event_publisher_create(&o, &p), CTXC_E_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ctxc_last_error()).find("linger_ms"), std::string::npos) << ctxc_last_error();
    EXPECT_EQ(p, nullptr);
    o.linger_ms = 0;
    o.wait_for_subscriber_ms = 60000;
    ASSERT_EQ(ctxc_kv_event_publisher_create(&o, &p), CTXC_OK) << ctxc_last_error();
    ctxc_manager_t* m = makeManager();
    ASSERT_EQ(ctxc_kv_events_enable(m, 0), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_events_attach_publisher(m, p), CTXC_OK) << ctxc_last_error();
    publishOnce(m, 5);
    ctxc_kv_event_publisher_stats_t s{};
    s.struct_size = sizeof s;
    ASSERT_EQ(ctxc_kv_event_publisher_stats(p, &s), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(s.holding, 1);
    EXPECT_EQ(s.sent_batches, 0u);
    EXPECT_EQ(s.subscriptions, 0u);
    EXPECT_EQ(s.queued_batches, s.accepted_batches);
    int32_t subscribed = -1;
    EXPECT_EQ(ctxc_kv_event_publisher_wait_for_subscriber(p, -1, &subscribed), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(subscribed, -1);
    auto const started = std::chrono::steady_clock::now();
    EXPECT_EQ(ctxc_kv_event_publisher_wait_for_subscriber(p, 50, &subscribed), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(subscribed, 0);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 2.0);
    EXPECT_EQ(ctxc_kv_event_publisher_wait_for_subscriber(p, 0, nullptr), CTXC_OK);  // the out is optional
    ASSERT_EQ(ctxc_kv_event_publisher_destroy(p), CTXC_OK);  // ends the hold at once: nothing blocks
    EXPECT_EQ(ctxc_kv_event_publisher_wait_for_subscriber(p, 0, &subscribed), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK) << ctxc_last_error();
}

}  // namespace
