// Bounded sliding-window paging's C ABI as a C runtime sees it (only "ctxcache.h" and the shared library): a window
// that decodes across page and window boundaries, compaction, admission refused, a failed synchronisation
// (poisoned until shutdown), bad inputs refused with their status and nothing changed, and lifetimes (device
// handles destroyed first, the manager destroyed under a live request); and the request facade (ctxc_kv_request_t)
// on this backend: its lifecycle, preconditions, backstops and lifetimes.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cpu_kv_device.h"
#include "ctxcache.h"
#include "decoding_batch.h"
#include "device_creates.h"

namespace {

struct Sync {
    bool fail = false;
};

int synchronizeWith(void* user, void*) { return static_cast<Sync*>(user)->fail ? 1 : 0; }

// A CPU backend, a 20-page pool of 4-token pages, a sparse-window 4 x 16 table, lengths for 4, and a manager with a
// window of 8 (reservation 2 * (2 + 1) + 1 = 7 pages per sequence).
class Swa : public ::testing::Test, protected CpuKvDevice {
protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(createDevice(20, 16, CTXC_PAGE_TABLE_SPARSE_WINDOW));
        ASSERT_EQ(createSwaManager(synchronizeWith, &sync, &manager), CTXC_OK) << ctxc_last_error();
    }
    void TearDown() override {
        EXPECT_EQ(ctxc_kv_request_destroy(kv), CTXC_OK);
        EXPECT_EQ(ctxc_swa_request_destroy(request), CTXC_OK);
        if (manager) EXPECT_EQ(ctxc_swa_manager_check_invariants(manager), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(ctxc_swa_manager_destroy(manager), CTXC_OK) << ctxc_last_error();
        destroyDevice(false);
    }
    int32_t freePages() {
        int32_t n = -1;
        EXPECT_EQ(ctxc_swa_manager_free_page_count(manager, &n), CTXC_OK);
        return n;
    }
    ctxc_swa_state_t state(int32_t row) {
        ctxc_swa_state_t s{};
        s.struct_size = sizeof s;
        EXPECT_EQ(ctxc_swa_request_state(request, row, &s), CTXC_OK) << ctxc_last_error();
        return s;
    }
    // The logical pages slot `slot` has mapped (K row).
    std::vector<int32_t> mapped(int32_t slot) {
        std::vector<int32_t> entries(4 * 2 * 16);
        size_t count = 0;
        EXPECT_EQ(ctxc_kv_page_table_read_host(table, entries.data(), entries.size(), &count), CTXC_OK)
            << ctxc_last_error();
        std::vector<int32_t> out;
        for (int32_t j = 0; j < 16; ++j)
            if (entries[static_cast<size_t>(slot * 32 + j)] >= 0) out.push_back(j);
        return out;
    }
    ctxc_status_t begin(std::vector<ctxc_resident_ref_t> const& refs) {
        return ctxc_swa_manager_begin_request(manager, refs.data(), refs.size(), nullptr, &request);
    }

    Sync sync;
    ctxc_swa_manager_t* manager = nullptr;
    ctxc_swa_request_t* request = nullptr;
    ctxc_kv_request_t* kv = nullptr;  // the facade, when a test begins one
};

// The facade over the same manager: an engine's batch (history = KV endpoint + the lookahead token).
class SwaFacade : public Swa {
protected:
    ctxc_status_t beginFacade(ctxc_kv_request_options_t const* options = nullptr) {
        ctxc_kv_request_options_t o;
        ctxc_kv_request_options_init(&o);
        sequences.clear();
        for (auto const& t : batch.tokens) sequences.push_back(sequenceOf(t));
        return ctxc_kv_request_begin_swa(manager, sequences.data(), sequences.size(), batch(), options ? options : &o,
                                         &kv);
    }
    ctxc_swa_state_t window(int32_t row) {
        ctxc_swa_state_t s{};
        s.struct_size = sizeof s;
        EXPECT_EQ(ctxc_kv_request_swa_state(kv, row, &s), CTXC_OK) << ctxc_last_error();
        return s;
    }
    void sampleAll(int32_t token) {
        for (size_t i = 0; i < batch.tokens.size(); ++i) batch.sample(i, token);
    }

    Batch batch;
    std::vector<ctxc_sequence_request_t> sequences;
};

TEST_F(Swa, AWindowDecodesAcrossPagesAndRetiresAfterCompletion) {
    int32_t reservation = 0;
    ASSERT_EQ(ctxc_swa_manager_private_pages_per_sequence(manager, &reservation), CTXC_OK);
    EXPECT_EQ(reservation, 7);
    ASSERT_EQ(begin({{0, 0, 1}, {1, 0, 1}}), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(freePages(), 20 - 14);
    int32_t const prompt[2] = {11, 3};
    ASSERT_EQ(ctxc_swa_request_prepare_prefill(request, prompt, 2), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_swa_request_complete_prefill(request), CTXC_OK);
    EXPECT_EQ(mapped(0), (std::vector<int32_t>{0, 1, 2}));
    int32_t step[2] = {12, 4};
    ASSERT_EQ(ctxc_swa_request_prepare_decode_step(request, step, 2), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(state(0).pending_retire_pages, 1);
    EXPECT_EQ(state(0).pending_endpoint, 12);
    EXPECT_EQ(mapped(0), (std::vector<int32_t>{0, 1, 2}));  // page 0 left the window; the step may still read it
    ASSERT_EQ(ctxc_swa_request_complete_decode_step(request), CTXC_OK);
    EXPECT_EQ(mapped(0), (std::vector<int32_t>{1, 2}));
    ctxc_swa_state_t const s = state(0);
    EXPECT_EQ(s.exact_resident_token_count, 12);
    EXPECT_EQ(s.retained_logical_page_begin, 1);
    EXPECT_EQ(s.retained_logical_page_end, 3);
    EXPECT_EQ(s.bound_pages + s.reserved_pages, 7);
    EXPECT_EQ(s.pending_endpoint, -1);
    int32_t const map[2] = {-1, 0};
    ASSERT_EQ(ctxc_swa_request_begin_batch_compaction(request, map, 2, 1, nullptr), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_swa_request_compact_batch(request), CTXC_OK);
    int32_t batch = 0;
    ASSERT_EQ(ctxc_swa_request_batch_size(request, &batch), CTXC_OK);
    EXPECT_EQ(batch, 1);
    EXPECT_TRUE(mapped(0).empty());
    EXPECT_EQ(state(0).resident.slot, 1);
    EXPECT_EQ(freePages(), 20 - 7);
    ASSERT_EQ(ctxc_swa_request_finish(request), CTXC_OK);
    EXPECT_EQ(freePages(), 20);
}

TEST_F(Swa, RefusalsAndBadInputsChangeNothing) {
    EXPECT_EQ(begin({{0, 0, 1}, {1, 0, 1}, {2, 0, 1}, {3, 0, 1}, {}}), CTXC_E_CONTRACT);  // 5 > max batch
    EXPECT_EQ(begin({{0, 0, 1}, {1, 0, 1}, {2, 0, 1}}), CTXC_E_REQUEST_FAILED);  // 3 x 7 pages > 20
    EXPECT_NE(std::string(ctxc_last_error()).find("private pages"), std::string::npos);
    EXPECT_EQ(request, nullptr);
    EXPECT_EQ(freePages(), 20);
    EXPECT_EQ(begin({{0, 0, 0}}), CTXC_E_CONTRACT);  // epoch 0
    ASSERT_EQ(begin({{0, 0, 2}}), CTXC_OK);
    int32_t const four = 4;
    ASSERT_EQ(ctxc_swa_request_prepare_prefill(request, &four, 1), CTXC_OK);
    ASSERT_EQ(ctxc_swa_request_complete_prefill(request), CTXC_OK);
    int32_t const skip = 6;
    EXPECT_EQ(ctxc_swa_request_prepare_decode_step(request, &skip, 1), CTXC_E_CONTRACT);
    EXPECT_NE(std::string(ctxc_last_error()).find("skip"), std::string::npos);
    EXPECT_EQ(ctxc_swa_request_prepare_decode_step(request, nullptr, 1), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_swa_request_complete_decode_step(request), CTXC_E_CONTRACT);  // nothing prepared
    EXPECT_EQ(state(0).exact_resident_token_count, 4);
    EXPECT_EQ(mapped(0), std::vector<int32_t>{0});
    ctxc_swa_state_t bad{};
    EXPECT_EQ(ctxc_swa_request_state(request, 0, &bad), CTXC_E_INVALID_ARGUMENT);  // struct_size 0
    ASSERT_EQ(ctxc_swa_request_finish(request), CTXC_OK);
    ASSERT_EQ(ctxc_swa_request_destroy(request), CTXC_OK);
    request = nullptr;
    EXPECT_EQ(begin({{0, 0, 2}}), CTXC_E_CONTRACT);  // a stale epoch
}

TEST_F(Swa, AFailedSynchronisationPoisonsUntilShutdown) {
    ASSERT_EQ(begin({{0, 0, 1}}), CTXC_OK);
    int32_t const nine = 9;
    ASSERT_EQ(ctxc_swa_request_prepare_prefill(request, &nine, 1), CTXC_OK);
    sync.fail = true;
    EXPECT_EQ(ctxc_swa_request_complete_prefill(request), CTXC_E_POISONED);
    EXPECT_EQ(freePages(), 20 - 7);  // quarantined: the device may still read its pages
    ctxc_swa_request_t* second = nullptr;
    ctxc_resident_ref_t const other{1, 0, 1};
    EXPECT_EQ(ctxc_swa_manager_begin_request(manager, &other, 1, nullptr, &second), CTXC_E_POISONED);
    EXPECT_EQ(ctxc_swa_manager_shutdown(manager), CTXC_E_POISONED);
    sync.fail = false;
    EXPECT_EQ(ctxc_swa_manager_shutdown(manager), CTXC_OK);
    EXPECT_EQ(freePages(), 20);
    EXPECT_TRUE(mapped(0).empty());
}

TEST_F(Swa, LifetimesInAnyOrder) {
    ASSERT_EQ(begin({{0, 0, 1}}), CTXC_OK);
    int32_t const five = 5;
    ASSERT_EQ(ctxc_swa_request_prepare_prefill(request, &five, 1), CTXC_OK);
    // The device handles go first: the manager keeps what it was built over.
    ASSERT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_destroy(table), CTXC_OK);
    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    lengths = nullptr;
    table = nullptr;
    pool = nullptr;
    ASSERT_EQ(ctxc_swa_request_complete_prefill(request), CTXC_OK);
    // The manager destroyed under a live request: the request is orphaned and still destroyable.
    EXPECT_EQ(ctxc_swa_manager_destroy(manager), CTXC_E_LEASES_OUTSTANDING);
    manager = nullptr;
    EXPECT_EQ(ctxc_swa_request_finish(request), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_swa_request_destroy(request), CTXC_OK);
    request = nullptr;
}

TEST_F(SwaFacade, ServesChunkedPrefillAndDecodeThroughTheWindow) {
    batch.add(std::vector<int32_t>(11, 7), 0, 1);
    batch.add({1, 2, 3}, 1, 1);
    ASSERT_EQ(beginFacade(), CTXC_OK) << ctxc_last_error();
    ctxc_kv_request_info_t info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(ctxc_kv_request_info(kv, &info), CTXC_OK);
    EXPECT_EQ(info.batch_size, 2);
    EXPECT_EQ(info.has_context_reuse, 0);
    EXPECT_EQ(info.live, 1);
    EXPECT_EQ(freePages(), 20 - 14);
    int32_t const* starts = reinterpret_cast<int32_t const*>(&info);
    size_t count = 9;
    ASSERT_EQ(ctxc_kv_request_prefill_starts(kv, &starts, &count), CTXC_OK);
    EXPECT_EQ(starts, nullptr);
    EXPECT_EQ(count, 0u);
    ASSERT_EQ(ctxc_kv_request_prepare_prefill(kv), CTXC_OK);  // no-ops on this backend
    ASSERT_EQ(ctxc_kv_request_enqueue_prefill_captures(kv), CTXC_OK);
    int32_t const chunk1[2] = {6, 3};
    int32_t const chunk2[2] = {11, 3};
    ASSERT_EQ(ctxc_kv_request_prepare_swa_prefill(kv, chunk1, 2), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(window(0).pending_endpoint, 6);
    ASSERT_EQ(ctxc_kv_request_prepare_swa_prefill(kv, chunk2, 2), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(window(0).exact_resident_token_count, 6);  // the first chunk completed when the second was prepared
    EXPECT_EQ(window(0).pending_endpoint, 11);
    EXPECT_EQ(mapped(0), (std::vector<int32_t>{0, 1, 2}));
    sampleAll(9);  // the lookahead token
    ASSERT_EQ(ctxc_kv_request_complete_prefill(kv, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(window(0).exact_resident_token_count, 11);
    EXPECT_EQ(window(1).exact_resident_token_count, 3);

    ASSERT_EQ(ctxc_kv_request_prepare_decode_step(kv, batch(), nullptr), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(window(0).pending_endpoint, 12);
    EXPECT_EQ(window(1).pending_endpoint, 4);
    EXPECT_EQ(window(0).pending_retire_pages, 1);
    EXPECT_EQ(mapped(0), (std::vector<int32_t>{0, 1, 2}));  // page 0 left the window; the step may still read it
    sampleAll(10);
    ASSERT_EQ(ctxc_kv_request_complete_decode_step(kv, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(mapped(0), (std::vector<int32_t>{1, 2}));
    ctxc_swa_state_t const w = window(0);
    EXPECT_EQ(w.exact_resident_token_count, 12);
    EXPECT_EQ(w.retained_logical_page_begin, 1);
    EXPECT_EQ(w.retained_logical_page_end, 3);
    EXPECT_EQ(w.bound_pages + w.reserved_pages, 7);

    // A row that finished holds while the other advances.
    batch.status[1] = CTXC_SEQUENCE_FINISHED;
    ASSERT_EQ(ctxc_kv_request_prepare_decode_step(kv, batch(), nullptr), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(window(0).pending_endpoint, 13);
    EXPECT_EQ(window(1).pending_endpoint, -1);
    batch.sample(0, 11);
    ASSERT_EQ(ctxc_kv_request_complete_decode_step(kv, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(window(0).exact_resident_token_count, 13);
    EXPECT_EQ(window(1).exact_resident_token_count, 4);

    int32_t const map[2] = {0, -1};
    ASSERT_EQ(ctxc_kv_request_begin_batch_compaction(kv, map, 2, 1, nullptr, 0), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_complete_batch_compaction(kv, map, 2), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(ctxc_kv_request_info(kv, &info), CTXC_OK);
    EXPECT_EQ(info.batch_size, 1);
    EXPECT_EQ(freePages(), 20 - 7);
    EXPECT_TRUE(mapped(1).empty());
    ASSERT_EQ(ctxc_kv_request_finish(kv), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(freePages(), 20);
    ASSERT_EQ(ctxc_kv_request_info(kv, &info), CTXC_OK);
    EXPECT_EQ(info.live, 0);
}

TEST_F(SwaFacade, ContextOnlyMembersAnswerTheBackstopsAndChangeNothing) {
    batch.add({1, 2, 3, 4, 5}, 0, 1);
    ASSERT_EQ(beginFacade(), CTXC_OK) << ctxc_last_error();
    int32_t const five = 5;
    ASSERT_EQ(ctxc_kv_request_prepare_swa_prefill(kv, &five, 1), CTXC_OK);
    batch.sample(0, 6);
    ASSERT_EQ(ctxc_kv_request_complete_prefill(kv, batch(), nullptr, 0), CTXC_OK) << ctxc_last_error();
    int32_t length = -1;
    EXPECT_EQ(ctxc_kv_request_reuse_token_length(kv, 0, &length), CTXC_E_CONTRACT);
    ctxc_kv_sequence_info_t info{};
    info.struct_size = sizeof info;
    EXPECT_EQ(ctxc_kv_request_sequence_info(kv, 0, &info), CTXC_E_CONTRACT);
    EXPECT_NE(std::string(ctxc_last_error()).find("bounded-SWA"), std::string::npos);
    std::vector<int32_t> const joiner{1, 2};
    ctxc_sequence_request_t const s = sequenceOf(joiner);
    ctxc_resident_ref_t const ref{1, 0, 1};
    int32_t status = -1;
    int32_t start = -1;
    EXPECT_EQ(ctxc_kv_request_admit_sequence(kv, &s, &ref, nullptr, nullptr, 0, &status, &start),
              CTXC_E_REQUEST_FAILED);
    EXPECT_EQ(status, CTXC_ADMIT_FAILED);
    EXPECT_NE(std::string(ctxc_last_error()).find("live-slot admission"), std::string::npos);
    EXPECT_EQ(ctxc_kv_request_finalize_sequence_admission(kv, 1, 3, 2), CTXC_E_REQUEST_FAILED);
    int32_t retracted = 0;
    EXPECT_EQ(ctxc_kv_request_retract_sequence_admission(kv, &retracted), CTXC_OK);
    EXPECT_EQ(retracted, 1);
    float hidden[4] = {};
    int64_t const shape[2] = {2, 2};
    ctxc_tensor_view_t view{};
    view.data = hidden;
    view.shape = shape;
    view.rank = 2;
    view.dtype = CTXC_SCALAR_FP32;
    view.device = -1;
    EXPECT_EQ(ctxc_kv_request_publish_hybrid_mtp_endpoint(kv, 0, 5, &view, 0), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_kv_request_restore_hybrid_mtp_boundary_hidden(kv, 0, &view, 0), CTXC_E_CONTRACT);
    // A context whose history skips a token is refused before anything moves.
    batch.sample(0, 7);
    EXPECT_EQ(ctxc_kv_request_prepare_decode_step(kv, batch(), nullptr), CTXC_E_CONTRACT);
    EXPECT_NE(std::string(ctxc_last_error()).find("KV endpoint is 5"), std::string::npos);
    ctxc_kv_headroom_t const wide{2, 0};
    batch.tokens[0].pop_back();
    --batch.generated[0];
    EXPECT_EQ(ctxc_kv_request_prepare_decode_step(kv, batch(), &wide), CTXC_E_CONTRACT);
    ctxc_swa_state_t const w = window(0);
    EXPECT_EQ(w.exact_resident_token_count, 5);
    EXPECT_EQ(w.pending_endpoint, -1);
    EXPECT_EQ(freePages(), 20 - 7);
    ASSERT_EQ(ctxc_kv_request_prepare_decode_step(kv, batch(), nullptr), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(window(0).pending_endpoint, 6);
    ASSERT_EQ(ctxc_kv_request_finish(kv), CTXC_OK);
    EXPECT_EQ(freePages(), 20);
}

TEST_F(SwaFacade, PreconditionsAreContractErrorsAndCapacityFailsHoldingNothing) {
    batch.add({1, 2, 3}, 0, 1);
    ctxc_kv_request_options_t o;
    ctxc_kv_request_options_init(&o);
    o.speculative = 1;
    EXPECT_EQ(beginFacade(&o), CTXC_E_CONTRACT);
    EXPECT_NE(std::string(ctxc_last_error()).find("non-speculative"), std::string::npos);
    ctxc_kv_request_options_init(&o);
    o.token_state_contract = CTXC_TOKEN_STATE_FULLY_COMMITTED;
    EXPECT_EQ(beginFacade(&o), CTXC_E_CONTRACT);
    ctxc_kv_request_options_init(&o);
    o.headroom = ctxc_kv_headroom_t{2, 0};
    EXPECT_EQ(beginFacade(&o), CTXC_E_CONTRACT);
    ctxc_kv_request_options_init(&o);
    std::vector<int32_t> const extra{4, 5};
    ctxc_sequence_request_t const two[2] = {sequenceOf(batch.tokens[0]), sequenceOf(extra)};
    EXPECT_EQ(ctxc_kv_request_begin_swa(manager, two, 2, batch(), &o, &kv), CTXC_E_CONTRACT);  // 2 inputs, 1 row
    EXPECT_EQ(ctxc_kv_request_begin_swa(manager, two, 1, batch(), nullptr, &kv), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_kv_request_begin_swa(nullptr, two, 1, batch(), &o, &kv), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(kv, nullptr);
    batch.add({1}, 1, 1);
    batch.add({1}, 2, 1);
    EXPECT_EQ(beginFacade(), CTXC_E_REQUEST_FAILED);  // 3 x 7 pages > 20
    EXPECT_NE(std::string(ctxc_last_error()).find("private pages"), std::string::npos);
    EXPECT_EQ(kv, nullptr);
    EXPECT_EQ(freePages(), 20);
    // One request at a time, whichever way it was begun.
    ASSERT_EQ(begin({{3, 0, 1}}), CTXC_OK);
    batch = Batch{};
    batch.add({1, 2}, 0, 1);
    EXPECT_EQ(beginFacade(), CTXC_E_REQUEST_FAILED);
    EXPECT_EQ(kv, nullptr);
}

TEST_F(SwaFacade, APoisonedManagerAndADestroyedManagerAreReported) {
    batch.add({1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 1);
    ASSERT_EQ(beginFacade(), CTXC_OK);
    int32_t const nine = 9;
    ASSERT_EQ(ctxc_kv_request_prepare_swa_prefill(kv, &nine, 1), CTXC_OK);
    batch.sample(0, 1);
    sync.fail = true;
    EXPECT_EQ(ctxc_kv_request_complete_prefill(kv, batch(), nullptr, 0), CTXC_E_POISONED);
    ctxc_kv_request_t* second = nullptr;
    batch.tokens[0].pop_back();
    --batch.generated[0];
    batch.refs[0].epoch = 2;  // a slot is readmitted at a newer epoch
    ctxc_sequence_request_t const prompt = sequenceOf(batch.tokens[0]);
    EXPECT_EQ(ctxc_kv_request_begin_swa(manager, &prompt, 1, batch(), nullptr, &second),
              CTXC_E_INVALID_ARGUMENT);  // options NULL
    ctxc_kv_request_options_t o;
    ctxc_kv_request_options_init(&o);
    EXPECT_EQ(ctxc_kv_request_begin_swa(manager, &prompt, 1, batch(), &o, &second), CTXC_E_POISONED);
    EXPECT_EQ(freePages(), 20 - 7);  // quarantined: the device may still read its pages
    sync.fail = false;
    ASSERT_EQ(ctxc_swa_manager_shutdown(manager), CTXC_OK);
    EXPECT_EQ(freePages(), 20);
    ASSERT_EQ(ctxc_kv_request_destroy(kv), CTXC_OK);
    kv = nullptr;

    ASSERT_EQ(beginFacade(), CTXC_OK) << ctxc_last_error();  // the refused begin did not take epoch 2
    ASSERT_EQ(ctxc_kv_request_prepare_swa_prefill(kv, &nine, 1), CTXC_OK);
    EXPECT_EQ(ctxc_swa_manager_destroy(manager), CTXC_E_LEASES_OUTSTANDING);
    manager = nullptr;
    EXPECT_EQ(ctxc_kv_request_finish(kv), CTXC_E_INVALID_HANDLE);
    ctxc_swa_state_t w{};
    w.struct_size = sizeof w;
    EXPECT_EQ(ctxc_kv_request_swa_state(kv, 0, &w), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_kv_request_destroy(kv), CTXC_OK);
    kv = nullptr;
}

TEST(SwaSizes, TheLibraryKnowsTheSwaStructs) {
    EXPECT_EQ(ctxc_sizeof("ctxc_swa_manager_options_t"), sizeof(ctxc_swa_manager_options_t));
    EXPECT_EQ(ctxc_sizeof("ctxc_swa_state_t"), sizeof(ctxc_swa_state_t));
}

}  // namespace
