// The runtime's C ABI (coordinator and requests) as a C runtime sees it: this file links only the shared library and
// includes only "ctxcache.h". A vanilla lifecycle on the CPU backend (begin -> prefill -> decode -> finish, then a
// request that reuses it), in-flight admission and compaction, a synchronisation the callback fails (poisoned
// until shutdown), lifetimes (device handles destroyed first, a coordinator destroyed under a live request), and
// the bad inputs: each refused with its exact status and a message naming the call, leaving everything observable
// unchanged (metrics, info, page table, lengths) and the invariants intact.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "capi_test_support.h"
#include "cpu_kv_device.h"
#include "ctxcache.h"
#include "decoding_batch.h"
#include "device_creates.h"

namespace {

std::vector<int32_t> iota(int32_t first, int32_t count) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < count; ++i) out.push_back(first + i);
    return out;
}

struct Sync {
    bool fail = false;
    int calls = 0;
};

int synchronizeWith(void* user, void*) {
    Sync& s = *static_cast<Sync*>(user);
    ++s.calls;
    return s.fail ? 1 : 0;
}

// A CPU backend with a 16-page pool of 4-token pages (one layer), a 4 x 8 dense page table, lengths for 4, and a
// vanilla coordinator over them whose synchronizer the test controls.
class Runtime : public ::testing::Test, protected CpuKvDevice {
protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(createDevice(16, 8, CTXC_PAGE_TABLE_DENSE));
        coordinator = make(CTXC_MODEL_ATTENTION_ONLY);
        ASSERT_NE(coordinator, nullptr);
    }
    void TearDown() override {
        EXPECT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
        if (coordinator) EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(ctxc_coordinator_destroy(coordinator), CTXC_OK) << ctxc_last_error();
        destroyDevice(true);
    }

    ctxc_coordinator_resources_t resources() const { return baseResources(); }
    ctxc_coordinator_options_t options(int32_t kind) { return coordinatorOptions(kind, synchronizeWith, &sync); }
    ctxc_coordinator_t* make(int32_t kind) {
        ctxc_coordinator_resources_t const r = resources();
        ctxc_coordinator_options_t const o = options(kind);
        ctxc_coordinator_t* c = nullptr;
        EXPECT_EQ(ctxc_coordinator_create(&r, &o, &c), CTXC_OK) << ctxc_last_error();
        return c;
    }

    // Every sequence carries `retention` (NULL: the default).
    ctxc_status_t begin(Batch& batch, ctxc_kv_request_t** out, ctxc_kv_request_options_t const* opts = nullptr,
                        ctxc_retention_spec_t const* retention = nullptr) {
        std::vector<ctxc_sequence_request_t> seqs;
        for (auto const& t : batch.tokens) {
            seqs.push_back(sequenceOf(t));
            seqs.back().retention = retention;
        }
        ctxc_kv_request_options_t o;
        ctxc_kv_request_options_init(&o);
        return ctxc_kv_request_begin(coordinator, seqs.data(), seqs.size(), batch(), opts ? opts : &o, out);
    }

    // begin + prepare_prefill + complete_prefill (each row samples 100 + row).
    void prefill(Batch& batch) {
        ASSERT_EQ(begin(batch, &request), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(ctxc_kv_request_prepare_prefill(request), CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(ctxc_kv_request_enqueue_prefill_captures(request), CTXC_OK) << ctxc_last_error();
        for (size_t i = 0; i < batch.tokens.size(); ++i) batch.sample(i, 100 + static_cast<int32_t>(i));
        ASSERT_EQ(ctxc_kv_request_complete_prefill(request, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    }
    // One decode step in which every running row samples a token.
    void step(Batch& batch, int32_t token) {
        ASSERT_EQ(ctxc_kv_request_prepare_decode_step(request, batch(), nullptr), CTXC_OK) << ctxc_last_error();
        for (size_t i = 0; i < batch.tokens.size(); ++i)
            if (batch.status[i] == CTXC_SEQUENCE_RUNNING) batch.sample(i, token);
        ASSERT_EQ(ctxc_kv_request_complete_decode_step(request, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    }

    ctxc_context_cache_metrics_t metrics() {
        ctxc_context_cache_metrics_t m;
        std::memset(&m, 0xAB, sizeof m);
        m.struct_size = sizeof m;
        EXPECT_EQ(ctxc_coordinator_metrics(coordinator, &m), CTXC_OK) << ctxc_last_error();
        return m;
    }
    ctxc_coordinator_info_t info() {
        ctxc_coordinator_info_t i;
        std::memset(&i, 0xAB, sizeof i);
        i.struct_size = sizeof i;
        EXPECT_EQ(ctxc_coordinator_info(coordinator, &i), CTXC_OK) << ctxc_last_error();
        return i;
    }
    std::vector<int32_t> basePages(int32_t row) {
        ctxc_kv_sequence_info_t s{};
        s.struct_size = sizeof s;
        EXPECT_EQ(ctxc_kv_request_sequence_info(request, row, &s), CTXC_OK) << ctxc_last_error();
        return std::vector<int32_t>(s.base_pages, s.base_pages + s.base_page_count);
    }
    std::vector<int32_t> prefillStarts() {
        int32_t const* starts = nullptr;
        size_t count = 0;
        EXPECT_EQ(ctxc_kv_request_prefill_starts(request, &starts, &count), CTXC_OK) << ctxc_last_error();
        return std::vector<int32_t>(starts, starts + count);
    }

    // Everything observable: the counters (not the planning time), the coordinator's and the request's state,
    // every sequence, the host page table and the device lengths.
    std::string observe() {
        ctxc_context_cache_metrics_t m = metrics();
        m.planning_nanoseconds = 0;
        std::string out(reinterpret_cast<char const*>(&m), sizeof m);
        ctxc_coordinator_info_t const i = info();
        out += std::to_string(i.poisoned) + "/" + std::to_string(i.active_requests) + "/" +
               std::to_string(i.quarantined_requests) + "|";
        if (request) {
            ctxc_kv_request_info_t r{};
            r.struct_size = sizeof r;
            EXPECT_EQ(ctxc_kv_request_info(request, &r), CTXC_OK);
            out += std::to_string(r.batch_size) + "/" + std::to_string(r.live) + "/" +
                   std::to_string(r.has_pending_joiner) + "|";
            for (int32_t row = 0; row <= r.batch_size; ++row) {
                ctxc_kv_sequence_info_t s{};
                s.struct_size = sizeof s;
                if (ctxc_kv_request_sequence_info(request, row, &s) != CTXC_OK) continue;
                out += std::to_string(s.committed_length) + "," + std::to_string(s.token_count) + "," +
                       std::to_string(s.published_full_block_count) + "," + std::to_string(s.base_page_count) + ";";
            }
            for (int32_t v : prefillStarts()) out += std::to_string(v) + ",";
        }
        std::vector<int32_t> host(4 * 2 * 8);
        size_t count = 0;
        EXPECT_EQ(ctxc_kv_page_table_read_host(table, host.data(), host.size(), &count), CTXC_OK);
        for (int32_t v : host) out += std::to_string(v) + ",";
        std::vector<int32_t> lens(4);
        EXPECT_EQ(ctxc_kv_lengths_read(lengths, lens.data(), lens.size(), &count), CTXC_OK);
        out += "|" + std::to_string(count) + ":";
        for (size_t k = 0; k < count; ++k) out += std::to_string(lens[k]) + ",";
        return out;
    }

    Sync sync;
    ctxc_coordinator_t* coordinator = nullptr;
    ctxc_kv_request_t* request = nullptr;
};

// Refused with `status` by `function`, mentioning `needle`, and nothing observable changed.
#define EXPECT_REFUSED(call, status, function, needle)                                           \
    do {                                                                                         \
        std::string const before_ = observe();                                                   \
        EXPECT_TRUE(refused((call), (status), (function), (needle)));                            \
        EXPECT_EQ(observe(), before_) << "a refused call changed the state";                     \
        EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error(); \
    } while (0)

// ---- the lifecycle ----------------------------------------------------------------------------------------

TEST_F(Runtime, VanillaLifecycleThenASecondRequestReusesIt) {
    ctxc_coordinator_info_t const i = info();
    EXPECT_EQ(i.page_size, 4);
    EXPECT_EQ(i.supports_live_sequence_admission, 1);
    Batch first;
    first.add(iota(1, 10), 0, 1);
    prefill(first);
    EXPECT_EQ(prefillStarts(), std::vector<int32_t>{0});
    ctxc_kv_request_info_t ri{};
    ri.struct_size = sizeof ri;
    ASSERT_EQ(ctxc_kv_request_info(request, &ri), CTXC_OK);
    EXPECT_EQ(ri.batch_size, 1);
    EXPECT_EQ(ri.has_context_reuse, 1);
    EXPECT_EQ(ri.live, 1);
    step(first, 200);
    first.status[0] = CTXC_SEQUENCE_FINISHED;
    ASSERT_EQ(ctxc_kv_request_prepare_decode_step(request, first(), nullptr), CTXC_OK);
    first.sample(0, 201);
    ASSERT_EQ(ctxc_kv_request_complete_decode_step(request, first(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    ctxc_kv_sequence_info_t s{};
    s.struct_size = sizeof s;
    ASSERT_EQ(ctxc_kv_request_sequence_info(request, 0, &s), CTXC_OK);
    EXPECT_EQ(s.input_length, 10);
    EXPECT_EQ(s.committed_length, 12);  // 10 prompt tokens + 2 accepted (the third sampled one is the lookahead)
    EXPECT_EQ(s.published_full_block_count, 3);
    EXPECT_EQ(s.plan_kind, CTXC_PLAN_NO_REUSABLE_PREFIX);
    std::vector<int32_t> const pages = basePages(0);
    ASSERT_GE(pages.size(), 3u);
    ASSERT_EQ(ctxc_kv_request_finish(request), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
    request = nullptr;

    ctxc_context_cache_metrics_t m = metrics();
    EXPECT_EQ(m.admitted_sequences, 1u);
    EXPECT_EQ(m.hit_sequences, 0u);
    EXPECT_EQ(m.no_reusable_prefix_plans, 1u);
    EXPECT_EQ(m.publication_attempts, 2u);  // prefill end (2 blocks) and decode end (3 blocks)
    EXPECT_EQ(m.committed_publications, 2u);
    EXPECT_EQ(m.base_kv_pages_capacity, 16);
    EXPECT_EQ(m.base_kv_pages_free, 13);  // the records keep the 3 published blocks
    EXPECT_GE(m.current_records, 1u);

    // The second prompt extends the first history: its 3 full blocks are reused from the same pages.
    Batch second;
    std::vector<int32_t> prompt = first.tokens[0];
    prompt.resize(12);
    prompt.push_back(7);
    prompt.push_back(8);
    second.add(prompt, 0, 2);
    prefill(second);
    EXPECT_EQ(prefillStarts(), std::vector<int32_t>{12});
    int32_t reuse = -1;
    ASSERT_EQ(ctxc_kv_request_reuse_token_length(request, 0, &reuse), CTXC_OK);
    EXPECT_EQ(reuse, 12);
    std::vector<int32_t> const reused = basePages(0);
    ASSERT_GE(reused.size(), 3u);
    EXPECT_EQ(std::vector<int32_t>(reused.begin(), reused.begin() + 3),
              std::vector<int32_t>(pages.begin(), pages.begin() + 3));
    m = metrics();
    EXPECT_EQ(m.admitted_sequences, 2u);
    EXPECT_EQ(m.hit_sequences, 1u);
    EXPECT_EQ(m.standard_plans, 1u);
    EXPECT_EQ(m.matched_tokens, 12u);
    EXPECT_EQ(m.reused_tokens, 12u);
    // The device lengths start at the reuse length.
    std::vector<int32_t> lens(4);
    size_t count = 0;
    ASSERT_EQ(ctxc_kv_lengths_read(lengths, lens.data(), lens.size(), &count), CTXC_OK);
    ASSERT_EQ(count, 1u);
    EXPECT_EQ(lens[0], 12);
    ASSERT_EQ(ctxc_kv_request_finish(request), CTXC_OK);
    EXPECT_EQ(ctxc_kv_request_finish(request), CTXC_OK);  // a finished request: no-op
    EXPECT_EQ(info().active_requests, 0);
}

TEST_F(Runtime, JoinerIsAdmittedFinalizedAndCompactedAway) {
    Batch batch;
    batch.add(iota(1, 6), 0, 1);
    prefill(batch);
    step(batch, 50);
    std::vector<int32_t> const joiner = iota(30, 5);
    ctxc_sequence_request_t const js = sequenceOf(joiner);
    ctxc_resident_ref_t const ref{1, 0, 1};
    int32_t status = -1, start = -1;
    ASSERT_EQ(ctxc_kv_request_admit_sequence(request, &js, &ref, nullptr, nullptr, 0, &status, &start), CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(status, CTXC_ADMIT_ADMITTED);
    EXPECT_EQ(start, 0);
    ctxc_kv_request_info_t ri{};
    ri.struct_size = sizeof ri;
    ASSERT_EQ(ctxc_kv_request_info(request, &ri), CTXC_OK);
    EXPECT_EQ(ri.has_pending_joiner, 1);
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_finalize_sequence_admission(request, 1, 77, 5), CTXC_OK) << ctxc_last_error();
    batch.add(joiner, 1, 1);
    batch.sample(1, 77);
    EXPECT_EQ(prefillStarts(), (std::vector<int32_t>{0, 0}));
    step(batch, 51);
    // Row 0 is cancelled and compacted away; row 1 moves to row 0.
    batch.status[0] = CTXC_SEQUENCE_CANCELLED;
    int32_t const map[] = {-1, 0};
    std::vector<int32_t> device(2, -7);
    ASSERT_EQ(ctxc_kv_request_begin_batch_compaction(request, map, 2, 1, device.data(), device.size()), CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(device, (std::vector<int32_t>{-1, 0}));
    ASSERT_EQ(ctxc_kv_request_complete_batch_compaction(request, map, 2), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_info(request, &ri), CTXC_OK);
    EXPECT_EQ(ri.batch_size, 1);
    ctxc_kv_sequence_info_t s{};
    s.struct_size = sizeof s;
    ASSERT_EQ(ctxc_kv_request_sequence_info(request, 0, &s), CTXC_OK);
    EXPECT_EQ(s.resident.slot, 1);
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_finish(request), CTXC_OK);
}

TEST_F(Runtime, RetractedJoinerLeavesNothingBehind) {
    Batch batch;
    batch.add(iota(1, 6), 0, 1);
    prefill(batch);
    std::string const before = observe();
    std::vector<int32_t> const joiner = iota(30, 5);
    ctxc_sequence_request_t const js = sequenceOf(joiner);
    ctxc_resident_ref_t const ref{2, 0, 4};
    int32_t status = -1, start = -1, retracted = -1;
    ASSERT_EQ(ctxc_kv_request_admit_sequence(request, &js, &ref, nullptr, nullptr, 0, &status, &start), CTXC_OK);
    ASSERT_EQ(status, CTXC_ADMIT_ADMITTED);
    ASSERT_EQ(ctxc_kv_request_retract_sequence_admission(request, &retracted), CTXC_OK);
    EXPECT_EQ(retracted, 1);
    ASSERT_EQ(ctxc_kv_request_retract_sequence_admission(request, &retracted), CTXC_OK);
    EXPECT_EQ(retracted, 0);
    ctxc_context_cache_metrics_t const m = metrics();
    EXPECT_EQ(m.admitted_sequences, 2u);  // the admission was counted; its pages came back
    EXPECT_EQ(m.base_kv_pages_free + 2, m.base_kv_pages_capacity);
    (void)before;
}

TEST_F(Runtime, JoinerWithoutCapacityIsAnAnswerNotAnError) {
    Batch batch;
    batch.add(iota(1, 6), 0, 1);
    prefill(batch);
    std::vector<int32_t> const joiner = iota(30, 28);  // 8 pages: the pool has 14 free but the row holds 8 at most
    ctxc_sequence_request_t const js = sequenceOf(joiner);
    ctxc_resident_ref_t const ref{1, 0, 1};
    int32_t status = -1, start = -1;
    // 28 tokens + 1 headroom need 8 pages (fits the row); two such joiners would not fit the pool: take pages first.
    ctxc_kv_headroom_t const h{1, 0};
    ASSERT_EQ(ctxc_kv_request_admit_sequence(request, &js, &ref, &h, nullptr, 0, &status, &start), CTXC_OK);
    ASSERT_EQ(status, CTXC_ADMIT_ADMITTED);
    ASSERT_EQ(ctxc_kv_request_finalize_sequence_admission(request, 1, 9, 28), CTXC_OK) << ctxc_last_error();
    std::vector<int32_t> const third = iota(70, 28);
    ctxc_sequence_request_t const ts = sequenceOf(third);
    ctxc_resident_ref_t const ref2{2, 0, 1};
    std::string const before = observe();
    ASSERT_EQ(ctxc_kv_request_admit_sequence(request, &ts, &ref2, &h, nullptr, 0, &status, &start), CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(status, CTXC_ADMIT_NO_CAPACITY);
    ctxc_context_cache_metrics_t m = metrics();
    EXPECT_EQ(m.admitted_sequences, 2u);
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK);
    (void)before;
}

TEST_F(Runtime, CapacityShortageIsARequestFailureThatHoldsNothing) {
    Batch batch;
    batch.add(iota(1, 40), 0, 1);  // 41 positions need 11 pages: the page table row holds 8
    EXPECT_REFUSED(begin(batch, &request), CTXC_E_REQUEST_FAILED, "ctxc_kv_request_begin", "page table holds 8");
    EXPECT_EQ(request, nullptr);
    // Another active request: one request at a time.
    Batch a;
    a.add(iota(1, 4), 0, 1);
    ASSERT_EQ(begin(a, &request), CTXC_OK);
    Batch b;
    b.add(iota(1, 4), 1, 1);
    ctxc_kv_request_t* other = reinterpret_cast<ctxc_kv_request_t*>(1);
    EXPECT_REFUSED(begin(b, &other), CTXC_E_REQUEST_FAILED, "ctxc_kv_request_begin", "another request is active");
    EXPECT_EQ(other, nullptr);
}

// ---- synchronisation failure ------------------------------------------------------------------------------

TEST_F(Runtime, FailedSynchronisationPoisonsUntilShutdown) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    prefill(batch);
    sync.fail = true;
    int const calls = sync.calls;
    EXPECT_TRUE(refused(ctxc_kv_request_finish(request), CTXC_E_POISONED, "ctxc_kv_request_finish", "poisoned"));
    EXPECT_GT(sync.calls, calls);
    ctxc_coordinator_info_t i = info();
    EXPECT_EQ(i.poisoned, 1);
    EXPECT_EQ(i.quarantined_requests, 1u);
    EXPECT_EQ(i.active_requests, 0);
    EXPECT_LT(metrics().base_kv_pages_free, 16);  // the quarantined leases stay pinned
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
    request = nullptr;

    Batch next;
    next.add(iota(1, 8), 1, 1);
    EXPECT_REFUSED(begin(next, &request), CTXC_E_POISONED, "ctxc_kv_request_begin", "poisoned until shutdown");
    EXPECT_TRUE(
        refused(ctxc_coordinator_shutdown(coordinator), CTXC_E_POISONED, "ctxc_coordinator_shutdown", "still fails"));
    EXPECT_EQ(info().poisoned, 1);
    sync.fail = false;
    ASSERT_EQ(ctxc_coordinator_shutdown(coordinator), CTXC_OK) << ctxc_last_error();
    i = info();
    EXPECT_EQ(i.poisoned, 0);
    EXPECT_EQ(i.quarantined_requests, 0u);
    EXPECT_EQ(metrics().base_kv_pages_free, 14);  // freed, but for the 2 blocks published at prefill end
    ASSERT_EQ(begin(next, &request), CTXC_OK) << ctxc_last_error();
}

TEST_F(Runtime, ShutdownWithALiveRequestSaysSo) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    prefill(batch);
    EXPECT_TRUE(refused(ctxc_coordinator_shutdown(coordinator), CTXC_E_REQUEST_FAILED, "ctxc_coordinator_shutdown",
                        "still active"));
}

// ---- lifetimes --------------------------------------------------------------------------------------------

TEST_F(Runtime, CoordinatorKeepsItsDeviceObjectsAlive) {
    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_destroy(table), CTXC_OK);
    ASSERT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    pool = nullptr;
    table = nullptr;
    lengths = nullptr;
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    ASSERT_EQ(begin(batch, &request), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_prepare_prefill(request), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    size_t bytes = 0;
    ASSERT_EQ(ctxc_device_backend_allocated_bytes(backend, &bytes), CTXC_OK);
    EXPECT_GT(bytes, 0u);
    ASSERT_EQ(ctxc_kv_request_finish(request), CTXC_OK);
    ASSERT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
    request = nullptr;
    ASSERT_EQ(ctxc_coordinator_destroy(coordinator), CTXC_OK);
    coordinator = nullptr;
    ASSERT_EQ(ctxc_device_backend_allocated_bytes(backend, &bytes), CTXC_OK);
    EXPECT_EQ(bytes, 0u);
}

TEST_F(Runtime, BackendHandleDestroyedBeforeTheCoordinatorIsSafe) {
    // Every handle may be destroyed in any order: the coordinator keeps the backend and the objects on it, and
    // releases the objects before the backend.
    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_destroy(table), CTXC_OK);
    ASSERT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_destroy(backend), CTXC_OK);
    pool = nullptr;
    table = nullptr;
    lengths = nullptr;
    backend = nullptr;
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    prefill(batch);
    ASSERT_EQ(ctxc_kv_request_finish(request), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
    request = nullptr;
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_coordinator_destroy(coordinator), CTXC_OK);
    coordinator = nullptr;
}

TEST_F(Runtime, DestroyingACoordinatorUnderALiveRequestOrphansIt) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    prefill(batch);
    EXPECT_TRUE(refused(ctxc_coordinator_destroy(coordinator), CTXC_E_LEASES_OUTSTANDING, "ctxc_coordinator_destroy",
                        "1 live request"));
    coordinator = nullptr;
    EXPECT_TRUE(refused(ctxc_kv_request_finish(request), CTXC_E_INVALID_HANDLE, "ctxc_kv_request_finish",
                        "outlived its coordinator"));
    EXPECT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
    request = nullptr;
}

TEST_F(Runtime, AbandonedRequestReleasesEverything) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    prefill(batch);
    ASSERT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
    request = nullptr;
    ctxc_coordinator_info_t const i = info();
    EXPECT_EQ(i.active_requests, 0);
    EXPECT_EQ(i.poisoned, 0);
    EXPECT_EQ(metrics().base_kv_pages_free + 2, 16);  // prefill-end publication of 2 blocks stays cached
}

// ---- bad inputs -------------------------------------------------------------------------------------------

TEST_F(Runtime, NullStaleAndWronglyTypedHandlesAreInvalid) {
    ctxc_context_cache_metrics_t m{};
    m.struct_size = sizeof m;
    EXPECT_TRUE(refused(ctxc_coordinator_metrics(nullptr, &m), CTXC_E_INVALID_HANDLE, "ctxc_coordinator_metrics",
                        "coordinator is NULL"));
    EXPECT_REFUSED(ctxc_kv_request_prepare_prefill(nullptr), CTXC_E_INVALID_HANDLE, "ctxc_kv_request_prepare_prefill",
                   "request is NULL");
    EXPECT_REFUSED(ctxc_coordinator_shutdown(reinterpret_cast<ctxc_coordinator_t*>(pool)), CTXC_E_INVALID_HANDLE,
                   "ctxc_coordinator_shutdown", "not a live handle");
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    ctxc_kv_request_t* stale = nullptr;
    ASSERT_EQ(begin(batch, &stale), CTXC_OK);
    ASSERT_EQ(ctxc_kv_request_destroy(stale), CTXC_OK);
    EXPECT_REFUSED(ctxc_kv_request_prepare_prefill(stale), CTXC_E_INVALID_HANDLE, "ctxc_kv_request_prepare_prefill",
                   "not a live handle");
    EXPECT_REFUSED(ctxc_kv_request_destroy(stale), CTXC_E_INVALID_HANDLE, "ctxc_kv_request_destroy", "not a live");
    ctxc_coordinator_resources_t r = resources();
    r.base_pool = reinterpret_cast<ctxc_kv_pool_t*>(table);
    ctxc_coordinator_options_t const o = options(CTXC_MODEL_ATTENTION_ONLY);
    ctxc_coordinator_t* c = reinterpret_cast<ctxc_coordinator_t*>(1);
    EXPECT_REFUSED(ctxc_coordinator_create(&r, &o, &c), CTXC_E_INVALID_HANDLE, "ctxc_coordinator_create",
                   "resources->base_pool");
    EXPECT_EQ(c, nullptr);
}

TEST_F(Runtime, ShortStructSizesAreRefusedUntouched) {
    ctxc_coordinator_resources_t const r = resources();
    ctxc_coordinator_options_t o = options(CTXC_MODEL_ATTENTION_ONLY);
    o.struct_size = 8;
    ctxc_coordinator_t* c = nullptr;
    EXPECT_REFUSED(ctxc_coordinator_create(&r, &o, &c), CTXC_E_INVALID_ARGUMENT, "ctxc_coordinator_create",
                   "options->struct_size");
    ctxc_context_cache_metrics_t m;
    std::memset(&m, 0x5A, sizeof m);
    m.struct_size = sizeof m - 8;
    EXPECT_REFUSED(ctxc_coordinator_metrics(coordinator, &m), CTXC_E_INVALID_ARGUMENT, "ctxc_coordinator_metrics",
                   "out_metrics->struct_size");
    EXPECT_EQ(m.admitted_sequences, 0x5A5A5A5A5A5A5A5Aull);
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    ctxc_kv_request_options_t ro;
    ctxc_kv_request_options_init(&ro);
    ro.struct_size = 4;
    EXPECT_REFUSED(begin(batch, &request, &ro), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_request_begin",
                   "options->struct_size");
    ASSERT_EQ(begin(batch, &request), CTXC_OK);
    batch.c.struct_size = 4;
    EXPECT_REFUSED(ctxc_kv_request_complete_prefill(request, &batch.c, nullptr, 0), CTXC_E_INVALID_ARGUMENT,
                   "ctxc_kv_request_complete_prefill", "context->struct_size");
}

TEST_F(Runtime, MalformedArgumentsAreInvalidArguments) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    ctxc_kv_request_options_t ro;
    ctxc_kv_request_options_init(&ro);
    ro.token_state_contract = 7;
    EXPECT_REFUSED(begin(batch, &request, &ro), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_request_begin",
                   "options->token_state_contract 7 is not a CTXC_TOKEN_STATE_* value");
    ctxc_kv_request_options_init(&ro);
    ro.headroom.base_extra_tokens = -1;
    EXPECT_REFUSED(begin(batch, &request, &ro), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_request_begin",
                   "options->headroom->base_extra_tokens is negative");
    batch.status[0] = 9;
    EXPECT_REFUSED(begin(batch, &request), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_request_begin", "context->status[0] 9");
    batch.status[0] = CTXC_SEQUENCE_RUNNING;
    std::vector<ctxc_sequence_request_t> seqs{sequenceOf(batch.tokens[0])};
    seqs[0].token_ids = nullptr;
    ctxc_kv_request_options_init(&ro);
    EXPECT_REFUSED(ctxc_kv_request_begin(coordinator, seqs.data(), 1, batch(), &ro, &request), CTXC_E_INVALID_ARGUMENT,
                   "ctxc_kv_request_begin", "sequences[0].token_ids is NULL");
    ctxc_media_item_t media{nullptr, 0, 0, 2, 5, 0};
    seqs[0] = sequenceOf(batch.tokens[0]);
    seqs[0].media = &media;
    seqs[0].media_count = 1;
    EXPECT_REFUSED(ctxc_kv_request_begin(coordinator, seqs.data(), 1, batch(), &ro, &request), CTXC_E_INVALID_ARGUMENT,
                   "ctxc_kv_request_begin", "sequences[0].media[0].modality 5 is not a CTXC_MEDIA_* value");
    EXPECT_EQ(request, nullptr);
}

TEST_F(Runtime, StaleResidentEpochIsAContractError) {
    Batch batch;
    batch.add(iota(1, 8), 0, 5);
    ASSERT_EQ(begin(batch, &request), CTXC_OK);
    ASSERT_EQ(ctxc_kv_request_finish(request), CTXC_OK);
    ASSERT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
    request = nullptr;
    EXPECT_REFUSED(begin(batch, &request), CTXC_E_CONTRACT, "ctxc_kv_request_begin",
                   "resident epoch 5 of slot 0 is stale");
    batch.refs[0].epoch = 0;
    EXPECT_REFUSED(begin(batch, &request), CTXC_E_CONTRACT, "ctxc_kv_request_begin", "resident epoch 0 is invalid");
    EXPECT_EQ(request, nullptr);
}

TEST_F(Runtime, DuplicateResidentSlotsAreAContractError) {
    Batch batch;
    batch.add(iota(1, 8), 1, 1);
    batch.add(iota(20, 8), 1, 2);
    EXPECT_REFUSED(begin(batch, &request), CTXC_E_CONTRACT, "ctxc_kv_request_begin", "share resident slot 1");
    batch.refs[1].slot = 9;
    EXPECT_REFUSED(begin(batch, &request), CTXC_E_CONTRACT, "ctxc_kv_request_begin",
                   "resident slot 9 is outside [0, 4)");
    EXPECT_EQ(request, nullptr);
}

TEST_F(Runtime, StepsOutOfOrderAreContractErrors) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    ASSERT_EQ(begin(batch, &request), CTXC_OK);
    batch.sample(0, 100);
    EXPECT_REFUSED(ctxc_kv_request_complete_prefill(request, batch(), nullptr, 0), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_prefill", "not allowed while the request is admitted");
    EXPECT_REFUSED(ctxc_kv_request_prepare_decode_step(request, batch(), nullptr), CTXC_E_CONTRACT,
                   "ctxc_kv_request_prepare_decode_step", "not allowed while the request is admitted");
    int32_t const map[] = {0};
    EXPECT_REFUSED(ctxc_kv_request_complete_batch_compaction(request, map, 1), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_batch_compaction", "no compaction is pending");
    ASSERT_EQ(ctxc_kv_request_prepare_prefill(request), CTXC_OK);
    EXPECT_REFUSED(ctxc_kv_request_prepare_prefill(request), CTXC_E_CONTRACT, "ctxc_kv_request_prepare_prefill",
                   "not allowed while the request is prefill prepared");
    ASSERT_EQ(ctxc_kv_request_complete_prefill(request, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    EXPECT_REFUSED(ctxc_kv_request_complete_prefill(request, batch(), nullptr, 0), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_prefill", "not allowed while the request is executing");
    int32_t row = -1;
    EXPECT_REFUSED(ctxc_kv_request_reuse_token_length(request, 1, &row), CTXC_E_CONTRACT,
                   "ctxc_kv_request_reuse_token_length", "row 1 is out of range");
    ASSERT_EQ(ctxc_kv_request_finish(request), CTXC_OK);
    EXPECT_REFUSED(ctxc_kv_request_prepare_prefill(request), CTXC_E_CONTRACT, "ctxc_kv_request_prepare_prefill",
                   "empty request handle");
}

TEST_F(Runtime, ContextThatDoesNotMatchTheBatchIsAContractError) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    Batch two;
    two.add(iota(1, 8), 0, 1);
    two.add(iota(1, 8), 1, 1);
    std::vector<ctxc_sequence_request_t> seqs{sequenceOf(batch.tokens[0])};
    ctxc_kv_request_options_t ro;
    ctxc_kv_request_options_init(&ro);
    EXPECT_REFUSED(ctxc_kv_request_begin(coordinator, seqs.data(), 1, two(), &ro, &request), CTXC_E_CONTRACT,
                   "ctxc_kv_request_begin", "active batch 2 differs from the request's 1");
    ASSERT_EQ(begin(batch, &request), CTXC_OK);
    ASSERT_EQ(ctxc_kv_request_prepare_prefill(request), CTXC_OK);
    two.sample(0, 1);
    two.sample(1, 1);
    EXPECT_REFUSED(ctxc_kv_request_complete_prefill(request, two(), nullptr, 0), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_prefill", "active batch 2 differs");
}

TEST_F(Runtime, AdvancesThatBreakTheTokenStateContractAreRefused) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    ASSERT_EQ(begin(batch, &request), CTXC_OK);
    ASSERT_EQ(ctxc_kv_request_prepare_prefill(request), CTXC_OK);
    batch.sample(0, 100);
    batch.raw[0] = 7;  // the prompt was 8 tokens
    EXPECT_REFUSED(ctxc_kv_request_complete_prefill(request, batch(), nullptr, 0), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_prefill", "committed length 7 must equal the input length 8");
    batch.raw[0] = 8;
    ASSERT_EQ(ctxc_kv_request_complete_prefill(request, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_prepare_decode_step(request, batch(), nullptr), CTXC_OK);
    batch.sample(0, 101);
    batch.generated[0] = 5;  // two tokens generated, not five
    EXPECT_REFUSED(ctxc_kv_request_complete_decode_step(request, batch(), nullptr, 0), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_decode_step", "breaks the token-state contract");
    batch.generated[0] = 2;
    batch.sample(0, 102);
    EXPECT_REFUSED(ctxc_kv_request_complete_decode_step(request, batch(), nullptr, 0), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_decode_step", "a non-speculative step accepts one");
}

TEST_F(Runtime, CompactionMapThatReordersSurvivorsIsRefused) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    batch.add(iota(20, 8), 1, 1);
    prefill(batch);
    int32_t const swap[] = {1, 0};
    std::vector<int32_t> device(2, -7);
    EXPECT_REFUSED(ctxc_kv_request_begin_batch_compaction(request, swap, 2, 2, device.data(), device.size()),
                   CTXC_E_CONTRACT, "ctxc_kv_request_begin_batch_compaction", "reorders");
    EXPECT_EQ(device, (std::vector<int32_t>{-7, -7}));
    int32_t const ok[] = {0, -1};
    EXPECT_REFUSED(ctxc_kv_request_begin_batch_compaction(request, ok, 2, 1, device.data(), 1), CTXC_E_CONTRACT,
                   "ctxc_kv_request_begin_batch_compaction", "deviceBatchMapping holds 1 entries, needs 2");
    EXPECT_REFUSED(ctxc_kv_request_begin_batch_compaction(request, ok, 2, 1, nullptr, 2), CTXC_E_INVALID_ARGUMENT,
                   "ctxc_kv_request_begin_batch_compaction", "out_device_batch_mapping is NULL");
    ASSERT_EQ(ctxc_kv_request_begin_batch_compaction(request, ok, 2, 1, nullptr, 0), CTXC_OK) << ctxc_last_error();
    int32_t const other[] = {-1, 0};
    EXPECT_REFUSED(ctxc_kv_request_complete_batch_compaction(request, other, 2), CTXC_E_CONTRACT,
                   "ctxc_kv_request_complete_batch_compaction", "keepMapping differs");
}

TEST_F(Runtime, AdmissionWhileCompactionIsPendingIsRefused) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    batch.add(iota(20, 8), 1, 1);
    prefill(batch);
    int32_t const map[] = {0, -1};
    ASSERT_EQ(ctxc_kv_request_begin_batch_compaction(request, map, 2, 1, nullptr, 0), CTXC_OK);
    std::vector<int32_t> const joiner = iota(40, 5);
    ctxc_sequence_request_t const js = sequenceOf(joiner);
    ctxc_resident_ref_t const ref{2, 0, 1};
    int32_t status = -1, start = -1;
    EXPECT_REFUSED(ctxc_kv_request_admit_sequence(request, &js, &ref, nullptr, nullptr, 0, &status, &start),
                   CTXC_E_CONTRACT, "ctxc_kv_request_admit_sequence",
                   "not allowed while the request is compaction pending");
    EXPECT_EQ(status, CTXC_ADMIT_FAILED);
    ctxc_sequence_request_t bypass = js;
    bypass.lookup_policy = CTXC_LOOKUP_BYPASS;
    EXPECT_REFUSED(ctxc_kv_request_admit_sequence(request, &bypass, &ref, nullptr, nullptr, 0, &status, &start),
                   CTXC_E_INVALID_ARGUMENT, "ctxc_kv_request_admit_sequence", "must be CTXC_INHERIT_LOOKUP_POLICY");
    ASSERT_EQ(ctxc_kv_request_complete_batch_compaction(request, map, 2), CTXC_OK) << ctxc_last_error();
}

TEST_F(Runtime, DeploymentsTheProfileCannotServeAreRefused) {
    ctxc_coordinator_resources_t r = resources();
    ctxc_coordinator_options_t o = options(CTXC_MODEL_HYBRID);
    ctxc_coordinator_t* c = reinterpret_cast<ctxc_coordinator_t*>(1);
    EXPECT_REFUSED(ctxc_coordinator_create(&r, &o, &c), CTXC_E_CONTRACT, "ctxc_coordinator_create",
                   "checkpoint reuse needs resident state and snapshot storage");
    EXPECT_EQ(c, nullptr);
    o = options(CTXC_MODEL_ATTENTION_ONLY);
    o.has_spec = 1;
    EXPECT_REFUSED(ctxc_coordinator_create(&r, &o, &c), CTXC_E_CONTRACT, "ctxc_coordinator_create",
                   "needs a draft pool, page table and KV lengths");
    o = options(CTXC_MODEL_ATTENTION_ONLY);
    o.max_batch = 5;  // the table and lengths hold 4
    EXPECT_REFUSED(ctxc_coordinator_create(&r, &o, &c), CTXC_E_CONTRACT, "ctxc_coordinator_create",
                   "must cover maxBatch 5");
    o = options(CTXC_MODEL_PURE_RECURRENT);
    EXPECT_REFUSED(ctxc_coordinator_create(&r, &o, &c), CTXC_E_CONTRACT, "ctxc_coordinator_create",
                   "a pure recurrent deployment has no base pool");
    o = options(3);
    EXPECT_REFUSED(ctxc_coordinator_create(&r, &o, &c), CTXC_E_INVALID_ARGUMENT, "ctxc_coordinator_create",
                   "options->model_state_kind 3 is not a CTXC_MODEL_* value");
    // A speculative request on a deployment without a spec contract.
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    ctxc_kv_request_options_t ro;
    ctxc_kv_request_options_init(&ro);
    ro.speculative = 1;
    EXPECT_REFUSED(begin(batch, &request, &ro), CTXC_E_CONTRACT, "ctxc_kv_request_begin",
                   "a speculative request on a deployment without a spec contract");
}

TEST_F(Runtime, HybridMtpEndpointsOnAnotherDeploymentAreContractErrors) {
    Batch batch;
    batch.add(iota(1, 8), 0, 1);
    prefill(batch);
    int64_t const shape[] = {1, 4};
    std::vector<uint16_t> hidden(4);
    ctxc_tensor_view_t const view{hidden.data(), shape, 2, CTXC_SCALAR_FP16, -1};
    EXPECT_REFUSED(ctxc_kv_request_publish_hybrid_mtp_endpoint(request, 0, 8, &view, 0), CTXC_E_CONTRACT,
                   "ctxc_kv_request_publish_hybrid_mtp_endpoint", "no Hybrid+MTP reuse");
    EXPECT_REFUSED(ctxc_kv_request_restore_hybrid_mtp_boundary_hidden(request, 0, nullptr, 0), CTXC_E_INVALID_ARGUMENT,
                   "ctxc_kv_request_restore_hybrid_mtp_boundary_hidden", "base_hidden_states is NULL");
}

// ---- retention (issue 29) -----------------------------------------------------------------------------------

namespace {

ctxc_retention_range_t rangeOf(int32_t start, int32_t end, int32_t priority, int64_t duration = -1) {
    ctxc_retention_range_t r{};
    r.token_start = start;
    r.token_end = end;
    r.priority = priority;
    r.duration_ns = duration;
    return r;
}

}  // namespace

// A bad spec on a sequence (a priority out of 0..100, an end not after its start, a negative duration) is
// CTXC_E_CONTRACT with nothing admitted; a malformed struct (short struct_size, NULL ranges with a count) is
// CTXC_E_INVALID_ARGUMENT. The same at a joiner's admission.
TEST_F(Runtime, BadRetentionSpecsAreRefusedWithNothingChanged) {
    Batch batch;
    batch.add(iota(1, 10), 0, 1);
    ctxc_retention_range_t range = rangeOf(0, 8, 101);
    ctxc_retention_spec_t spec;
    ctxc_retention_spec_init(&spec);
    spec.ranges = &range;
    spec.range_count = 1;
    EXPECT_REFUSED(begin(batch, &request, nullptr, &spec), CTXC_E_CONTRACT, "ctxc_kv_request_begin",
                   "priority 101 is outside 0..100");
    EXPECT_EQ(request, nullptr);
    range = rangeOf(4, 4, 50);
    EXPECT_REFUSED(begin(batch, &request, nullptr, &spec), CTXC_E_CONTRACT, "ctxc_kv_request_begin",
                   "not after its start");
    range = rangeOf(0, 8, 50, -7);
    EXPECT_REFUSED(begin(batch, &request, nullptr, &spec), CTXC_E_CONTRACT, "ctxc_kv_request_begin", "negative");
    range = rangeOf(0, 8, 50);
    spec.decode_priority = -1;
    EXPECT_REFUSED(begin(batch, &request, nullptr, &spec), CTXC_E_CONTRACT, "ctxc_kv_request_begin", "decode");
    spec.decode_priority = 35;
    spec.ranges = nullptr;
    EXPECT_REFUSED(begin(batch, &request, nullptr, &spec), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_request_begin",
                   "sequences[0].retention->ranges");
    spec.ranges = &range;
    spec.struct_size = 4;
    EXPECT_REFUSED(begin(batch, &request, nullptr, &spec), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_request_begin",
                   "sequences[0].retention");
    EXPECT_EQ(metrics().admitted_sequences, 0u);
    EXPECT_EQ(metrics().base_kv_pages_free, 16);

    spec.struct_size = sizeof spec;
    prefill(batch);
    range = rangeOf(0, 8, 200);
    std::vector<int32_t> const joiner = iota(50, 6);
    ctxc_sequence_request_t s = sequenceOf(joiner);
    s.retention = &spec;
    ctxc_resident_ref_t const ref{1, 0, 1};
    int32_t status = -1, start = -1;
    EXPECT_REFUSED(ctxc_kv_request_admit_sequence(request, &s, &ref, nullptr, nullptr, 0, &status, &start),
                   CTXC_E_CONTRACT, "ctxc_kv_request_admit_sequence", "priority 200");
    EXPECT_EQ(status, CTXC_ADMIT_FAILED);
}

// A good spec reaches the records: a priority-90 prefix survives a flood of default requests that evicts two
// records, which under plain LRU (the same requests without a spec) takes the prefix first. The retention metrics
// of the coordinator's manager count the evictions by priority; the clock is driven through the coordinator.
TEST_F(Runtime, RetainedPrefixSurvivesAFloodThatPlainLruEvicts) {
    ctxc_retention_range_t const range = rangeOf(0, 8, 90);
    ctxc_retention_spec_t spec;
    ctxc_retention_spec_init(&spec);
    spec.ranges = &range;
    spec.range_count = 1;
    uint64_t epoch = 0;
    auto serve = [&](std::vector<int32_t> prompt, ctxc_retention_spec_t const* retention) {
        Batch b;
        b.add(std::move(prompt), 0, ++epoch);
        EXPECT_EQ(begin(b, &request, nullptr, retention), CTXC_OK) << ctxc_last_error();
        int32_t const start = prefillStarts().at(0);
        EXPECT_EQ(ctxc_kv_request_prepare_prefill(request), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(ctxc_kv_request_enqueue_prefill_captures(request), CTXC_OK);
        b.sample(0, 100);
        EXPECT_EQ(ctxc_kv_request_complete_prefill(request, b(), nullptr, 0), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(ctxc_kv_request_finish(request), CTXC_OK);
        EXPECT_EQ(ctxc_kv_request_destroy(request), CTXC_OK);
        request = nullptr;
        return start;
    };
    std::vector<int32_t> prefix = iota(1000, 8);
    auto withSuffix = [&](int32_t a, int32_t b) {
        std::vector<int32_t> p = prefix;
        p.push_back(a);
        p.push_back(b);
        return p;
    };
    for (bool retain : {true, false}) {
        SCOPED_TRACE(retain ? "priority 90" : "plain LRU");
        if (!retain) {  // a fresh coordinator over the same (now empty) device objects
            ASSERT_EQ(ctxc_coordinator_destroy(coordinator), CTXC_OK);
            coordinator = make(CTXC_MODEL_ATTENTION_ONLY);
            epoch = 100;
        }
        ASSERT_EQ(ctxc_coordinator_set_retention_time(coordinator, 1000), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(serve(withSuffix(1, 2), retain ? &spec : nullptr), 0);
        for (int32_t i = 0; i < 8; ++i) EXPECT_EQ(serve(iota(2000 + 100 * i, 10), nullptr), 0);
        ctxc_retention_metrics_t rm;
        std::memset(&rm, 0xAB, sizeof rm);
        rm.struct_size = sizeof rm;
        ASSERT_EQ(ctxc_coordinator_retention_metrics(coordinator, &rm), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(rm.evicted_records_by_priority[35], 2u);
        EXPECT_EQ(rm.evicted_records_by_priority[90], 0u);
        EXPECT_EQ(rm.retention_expiries, 0u);
        EXPECT_EQ(metrics().evicted_records, 2u);
        EXPECT_EQ(serve(withSuffix(7, 7), nullptr), retain ? 8 : 0);
    }
    EXPECT_REFUSED(ctxc_coordinator_set_retention_time(coordinator, 999), CTXC_E_CONTRACT,
                   "ctxc_coordinator_set_retention_time", "backwards");
    EXPECT_TRUE(refused(ctxc_coordinator_set_retention_time(nullptr, 5), CTXC_E_INVALID_HANDLE,
                        "ctxc_coordinator_set_retention_time", "coordinator is NULL"));
    ctxc_retention_metrics_t rm{};
    rm.struct_size = 8;
    EXPECT_TRUE(refused(ctxc_coordinator_retention_metrics(coordinator, &rm), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_coordinator_retention_metrics", "out_metrics->struct_size"));
}

TEST(CApiRuntime, StatusStringsAndSizesOfTheRuntimeStructs) {
    EXPECT_STREQ(ctxc_status_string(CTXC_E_REQUEST_FAILED), "CTXC_E_REQUEST_FAILED");
    EXPECT_STREQ(ctxc_status_string(CTXC_E_POISONED), "CTXC_E_POISONED");
#define CTXC_EXPECT_SIZEOF(type) EXPECT_EQ(ctxc_sizeof(#type), sizeof(type)) << #type
    CTXC_EXPECT_SIZEOF(ctxc_resident_ref_t);
    CTXC_EXPECT_SIZEOF(ctxc_kv_headroom_t);
    CTXC_EXPECT_SIZEOF(ctxc_media_item_t);
    CTXC_EXPECT_SIZEOF(ctxc_sequence_request_t);
    CTXC_EXPECT_SIZEOF(ctxc_tensor_view_t);
    CTXC_EXPECT_SIZEOF(ctxc_coordinator_resources_t);
    CTXC_EXPECT_SIZEOF(ctxc_coordinator_options_t);
    CTXC_EXPECT_SIZEOF(ctxc_context_cache_metrics_t);
    CTXC_EXPECT_SIZEOF(ctxc_coordinator_info_t);
    CTXC_EXPECT_SIZEOF(ctxc_decoding_context_t);
    CTXC_EXPECT_SIZEOF(ctxc_kv_request_options_t);
    CTXC_EXPECT_SIZEOF(ctxc_kv_request_info_t);
    CTXC_EXPECT_SIZEOF(ctxc_kv_sequence_info_t);
#undef CTXC_EXPECT_SIZEOF
    ctxc_coordinator_options_t o;
    std::memset(&o, 0xFF, sizeof o);
    ctxc_coordinator_options_init(&o);
    EXPECT_EQ(o.max_records, 1024);
    EXPECT_EQ(o.max_batch, 8);
    EXPECT_EQ(o.page_size, 0);
    EXPECT_EQ(o.hash_algorithm, CTXC_HASH_SHA256);
    EXPECT_EQ(o.has_spec, 0);
    EXPECT_EQ(o.owns_paged_spec_state, 1);
    EXPECT_EQ(o.future_dependency_tokens, 1);
    EXPECT_EQ(o.synchronize, nullptr);
    ctxc_kv_request_options_t ro;
    std::memset(&ro, 0xFF, sizeof ro);
    ctxc_kv_request_options_init(&ro);
    EXPECT_EQ(ro.headroom.base_extra_tokens, 1);
    EXPECT_EQ(ro.headroom.draft_extra_tokens, 0);
    EXPECT_EQ(ro.stream, nullptr);
    ctxc_coordinator_options_init(nullptr);  // tolerated
    ctxc_kv_request_options_init(nullptr);
    ctxc_decoding_context_init(nullptr);
    ctxc_coordinator_resources_init(nullptr);
}

}  // namespace
