// The C ABI exactly as a C runtime sees it: this file links only the shared library and includes only
// "ctxcache.h". Handles, status codes, the thread-local error, two-call outputs and views, and the promise that
// a failed call changes nothing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ctxcache.h"

#ifndef CTXCACHE_TEST_EXPECT_CUDA
#error "tests/cpp/CMakeLists.txt defines CTXCACHE_TEST_EXPECT_CUDA (1 when the library is built with CUDA)"
#endif

namespace {

ctxc_hash128_t H(uint64_t n) { return ctxc_hash128_t{0xB10C000000000000ull | n, 0x5EED000000000000ull ^ n}; }

bool sameHash(ctxc_hash128_t a, ctxc_hash128_t b) { return a.hi == b.hi && a.lo == b.lo; }

// ctxc_last_error() starts with the failing function's name and says something after it.
::testing::AssertionResult lastErrorFrom(char const* function) {
    std::string const message = ctxc_last_error();
    std::string const prefix = std::string(function) + ": ";
    if (message.compare(0, prefix.size(), prefix) == 0 && message.size() > prefix.size())
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "last error \"" << message << "\" is not from " << function;
}

ctxc_manager_t* makeManager(int32_t pageSize, ctxc_resource_demand_t capacities, int32_t maxRecords = 8) {
    ctxc_manager_options_t options;
    ctxc_manager_options_init(&options);
    options.page_size = pageSize;
    options.capacities = capacities;
    options.max_records = maxRecords;
    ctxc_manager_t* m = nullptr;
    EXPECT_EQ(ctxc_manager_create(&options, &m), CTXC_OK) << ctxc_last_error();
    return m;
}

ctxc_acquire_result_t acquireResult() {
    ctxc_acquire_result_t r;
    std::memset(&r, 0xAB, sizeof r);  // garbage: the library must fill every field it reports
    r.struct_size = sizeof r;
    return r;
}

ctxc_publish_result_t publishResult() {
    ctxc_publish_result_t r;
    std::memset(&r, 0xAB, sizeof r);
    r.struct_size = sizeof r;
    return r;
}

ctxc_lease_t* acquire(ctxc_manager_t* m, std::vector<ctxc_hash128_t> const& hashes, int32_t tokens,
                      ctxc_acquire_result_t* result = nullptr) {
    ctxc_acquire_result_t local = acquireResult();
    ctxc_acquire_result_t* r = result ? result : &local;
    ctxc_lease_t* lease = nullptr;
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), hashes.size(), tokens, CTXC_LOOKUP_USE_CACHE, r, &lease),
              CTXC_OK)
        << ctxc_last_error();
    return lease;
}

std::vector<int32_t> leasePages(ctxc_lease_t const* lease) {
    int32_t const* pages = nullptr;
    size_t count = 0;
    EXPECT_EQ(ctxc_lease_base_pages(lease, &pages, &count), CTXC_OK) << ctxc_last_error();
    return std::vector<int32_t>(pages, pages + count);
}

std::vector<int32_t> freeList(ctxc_manager_t const* m, int32_t type = CTXC_RESOURCE_BASE_KV_PAGE) {
    size_t count = 0;
    ctxc_status_t const query = ctxc_debug_manager_free_list(m, type, nullptr, 0, &count);
    EXPECT_TRUE(query == CTXC_OK || query == CTXC_E_BUFFER_TOO_SMALL);
    std::vector<int32_t> ids(count);
    EXPECT_EQ(ctxc_debug_manager_free_list(m, type, ids.data(), ids.size(), &count), CTXC_OK);
    return ids;
}

std::pair<int32_t, int32_t> refs(ctxc_manager_t const* m, int32_t page) {
    int32_t active = -1, cache = -1;
    EXPECT_EQ(ctxc_debug_manager_ref_counts(m, CTXC_RESOURCE_BASE_KV_PAGE, page, &active, &cache), CTXC_OK);
    return {active, cache};
}

// Everything a C caller can observe about a manager, for "nothing changed" assertions.
std::string observe(ctxc_manager_t const* m) {
    std::string out;
    for (int32_t type = 0; type < 4; ++type) {
        int32_t free = -1, capacity = -1;
        EXPECT_EQ(ctxc_manager_pool_counts(m, type, &free, &capacity), CTXC_OK);
        out += "pool " + std::to_string(type) + " " + std::to_string(free) + "/" + std::to_string(capacity) + " free {";
        for (int32_t id : freeList(m, type)) out += std::to_string(id) + ",";
        out += "} refs";
        for (int32_t i = 0; i < capacity; ++i) {
            int32_t a = -1, c = -1;
            EXPECT_EQ(ctxc_debug_manager_ref_counts(m, type, i, &a, &c), CTXC_OK);
            out += " " + std::to_string(a) + "/" + std::to_string(c);
        }
        out += "\n";
    }
    size_t records = 0, index = 0, leases = 0, lruCount = 0;
    EXPECT_EQ(ctxc_manager_record_count(m, &records), CTXC_OK);
    EXPECT_EQ(ctxc_manager_base_index_size(m, &index), CTXC_OK);
    EXPECT_EQ(ctxc_manager_live_lease_count(m, &leases), CTXC_OK);
    std::vector<uint64_t> lru(records);
    EXPECT_EQ(ctxc_debug_manager_records_lru(m, lru.data(), lru.size(), &lruCount), CTXC_OK);
    out += "records " + std::to_string(records) + " lru {";
    for (uint64_t id : lru) out += std::to_string(id) + ",";
    ctxc_manager_metrics_t metrics{sizeof(ctxc_manager_metrics_t)};
    EXPECT_EQ(ctxc_manager_metrics(m, &metrics), CTXC_OK);
    out += "} index " + std::to_string(index) + " leases " + std::to_string(leases) + " evicted " +
           std::to_string(metrics.evicted_records) + " reclaimed " + std::to_string(metrics.reclaimed_base_kv_pages);
    return out;
}

TEST(CApi, ReportsItsAbiVersion) { EXPECT_EQ(ctxc_abi_version(), CTXC_ABI_VERSION); }

// ---- manager lifetime -------------------------------------------------------------------------------------

TEST(CApi, CreatesAndDestroysAManager) {
    ctxc_manager_options_t options;
    std::memset(&options, 0xFF, sizeof options);
    ctxc_manager_options_init(&options);
    EXPECT_EQ(options.struct_size, sizeof(ctxc_manager_options_t));
    EXPECT_EQ(options.page_size, 128);
    EXPECT_EQ(options.max_records, 1024);
    EXPECT_EQ(options.capacities.base_kv_pages, 0);
    EXPECT_EQ(options.capacities.partial_kv_snapshot_slots, 0);
    ctxc_manager_options_init(nullptr);  // tolerated

    ctxc_manager_t* m = makeManager(4, {8, 2, 1, 1});
    ASSERT_NE(m, nullptr);
    int32_t pageSize = 0;
    EXPECT_EQ(ctxc_manager_page_size(m, &pageSize), CTXC_OK);
    EXPECT_EQ(pageSize, 4);
    int32_t const capacities[4] = {8, 2, 1, 1};
    for (int32_t type = 0; type < 4; ++type) {
        int32_t free = -1, capacity = -1;
        EXPECT_EQ(ctxc_manager_pool_counts(m, type, &free, &capacity), CTXC_OK);
        EXPECT_EQ(free, capacities[type]);
        EXPECT_EQ(capacity, capacities[type]);
    }
    size_t count = 99;
    EXPECT_EQ(ctxc_manager_live_lease_count(m, &count), CTXC_OK);
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(ctxc_manager_record_count(m, &count), CTXC_OK);
    EXPECT_EQ(count, 0u);
    size_t bytes = 0;
    EXPECT_EQ(ctxc_manager_metadata_bytes(m, &bytes), CTXC_OK);
    EXPECT_GT(bytes, 0u);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(nullptr), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_E_INVALID_HANDLE);  // stale now
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_destroy"));
}

TEST(CApi, ManagerOptionsAreValidated) {
    ctxc_manager_options_t options;
    ctxc_manager_options_init(&options);
    options.page_size = 4;
    options.capacities = {4, 0, 0, 0};
    ctxc_manager_t* const sentinel = reinterpret_cast<ctxc_manager_t*>(uintptr_t{0x1});
    ctxc_manager_t* m = sentinel;

    auto rejects = [&](ctxc_manager_options_t const& o, char const* mentions) {
        m = sentinel;
        EXPECT_EQ(ctxc_manager_create(&o, &m), CTXC_E_INVALID_ARGUMENT) << mentions;
        EXPECT_EQ(m, nullptr) << mentions;
        EXPECT_TRUE(lastErrorFrom("ctxc_manager_create"));
        EXPECT_NE(std::string(ctxc_last_error()).find(mentions), std::string::npos) << ctxc_last_error();
    };
    ctxc_manager_options_t o = options;
    o.struct_size = sizeof(ctxc_manager_options_t) - 1;
    rejects(o, "struct_size");
    o.struct_size = 0;
    rejects(o, "struct_size");
    o = options;
    o.page_size = 0;
    rejects(o, "page_size");
    o = options;
    o.capacities.draft_kv_pages = -1;
    rejects(o, "draft_kv_pages");
    o = options;
    o.max_records = -1;
    rejects(o, "max_records");
    EXPECT_EQ(ctxc_manager_create(nullptr, &m), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_create(&options, nullptr), CTXC_E_INVALID_ARGUMENT);

    ASSERT_EQ(ctxc_manager_create(&options, &m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

// ---- the main path ----------------------------------------------------------------------------------------

TEST(CApi, AcquirePublishReleaseRoundTrip) {
    ctxc_hasher_options_t hopts;
    ctxc_hasher_options_init(&hopts);
    hopts.algorithm = CTXC_HASH_FNV1A128;
    ctxc_hasher_t* hasher = nullptr;
    ASSERT_EQ(ctxc_hasher_create(&hopts, &hasher), CTXC_OK);
    int32_t const tokens[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    std::vector<ctxc_hash128_t> hashes(2);
    size_t count = 0;
    ASSERT_EQ(ctxc_hash_full_blocks(hasher, tokens, 10, 4, nullptr, 0, nullptr, hashes.data(), 2, &count), CTXC_OK);
    ASSERT_EQ(count, 2u);
    // The same independent FNV digests as block_hash_test.cpp (Python reference of the tagged stream).
    EXPECT_TRUE(sameHash(hashes[0], {0x0EC7DEB0E398286Aull, 0x0914822596977088ull}));
    EXPECT_TRUE(sameHash(hashes[1], {0x138B5471E601C078ull, 0xD746E03E97673FA0ull}));

    ctxc_manager_t* m = makeManager(4, {8, 0, 0, 0});
    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* producer = acquire(m, hashes, 10, &r);
    ASSERT_NE(producer, nullptr);
    EXPECT_EQ(r.status, CTXC_ACQUIRE_ACQUIRED);
    EXPECT_EQ(r.plan.mode, CTXC_MODE_VANILLA);
    EXPECT_EQ(r.plan.kind, CTXC_PLAN_NO_REUSABLE_PREFIX);
    EXPECT_EQ(r.plan.spec_replay_mode, CTXC_SPEC_REPLAY_NONE);
    EXPECT_EQ(r.plan.matched_token_length, 0);
    EXPECT_EQ(r.plan.reuse_token_length, 0);
    EXPECT_EQ(r.plan.bound_base_page_count, 0);
    EXPECT_EQ(r.plan.bound_draft_page_count, 0);
    EXPECT_EQ(r.plan.demand.base_kv_pages, 3);
    EXPECT_EQ(r.plan.demand.draft_kv_pages, 0);
    EXPECT_EQ(r.plan.draft_record, 0u);
    EXPECT_EQ(r.plan.hybrid_record, 0u);
    EXPECT_EQ(r.plan.recurrent_snapshot_binding, -1);
    EXPECT_EQ(r.plan.partial_kv_snapshot_binding, -1);
    EXPECT_EQ(r.plan.has_spec_replay_dependency, 0);
    EXPECT_EQ(r.plan.has_hybrid_checkpoint, 0);
    EXPECT_EQ(leasePages(producer), (std::vector<int32_t>{0, 1, 2}));

    ctxc_lease_info_t info{sizeof(ctxc_lease_info_t)};
    ASSERT_EQ(ctxc_lease_info(producer, &info), CTXC_OK);
    EXPECT_EQ(info.state, CTXC_LEASE_LIVE);
    EXPECT_EQ(info.mode, CTXC_MODE_VANILLA);
    EXPECT_EQ(info.base_page_count, 3u);
    EXPECT_EQ(info.draft_page_count, 0u);
    EXPECT_EQ(info.recurrent_snapshot_slot, -1);
    EXPECT_EQ(info.partial_kv_snapshot_slot, -1);
    EXPECT_EQ(info.reserved_snapshot_count, 0);

    ctxc_publish_result_t p = publishResult();
    ASSERT_EQ(ctxc_manager_publish(m, producer, hashes.data(), hashes.size(), 10, &p), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(p.status, CTXC_PUBLISH_PUBLISHED);
    EXPECT_EQ(p.record, 1u);
    EXPECT_EQ(p.published_base_full_block_count, 2);
    ASSERT_EQ(p.canonical_base_page_count, 2u);
    EXPECT_EQ(std::vector<int32_t>(p.canonical_base_pages, p.canonical_base_pages + 2), (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(refs(m, 0), std::make_pair(1, 1));
    EXPECT_EQ(refs(m, 2), std::make_pair(1, 0));

    EXPECT_EQ(ctxc_lease_release(producer), CTXC_OK);
    ASSERT_EQ(ctxc_lease_info(producer, &info), CTXC_OK);
    EXPECT_EQ(info.state, CTXC_LEASE_RELEASED);
    EXPECT_EQ(info.base_page_count, 0u);
    EXPECT_EQ(refs(m, 0), std::make_pair(0, 1));
    EXPECT_EQ(refs(m, 2), std::make_pair(0, 0));
    EXPECT_EQ(freeList(m), (std::vector<int32_t>{3, 4, 5, 6, 7, 2}));

    ctxc_record_view_t view{sizeof(ctxc_record_view_t)};
    ASSERT_EQ(ctxc_debug_manager_record(m, 1, &view), CTXC_OK);
    EXPECT_EQ(view.id, 1u);
    EXPECT_TRUE(sameHash(view.terminal_hash, hashes[1]));
    EXPECT_EQ(view.full_block_count, 2);
    EXPECT_EQ(view.exact_checkpoint_length, -1);
    EXPECT_EQ(view.recurrent_snapshot_slot, -1);
    EXPECT_EQ(view.partial_kv_snapshot_slot, -1);
    ASSERT_EQ(view.logical_block_count, 2u);
    EXPECT_TRUE(sameHash(view.logical_block_hashes[0], hashes[0]));
    EXPECT_TRUE(sameHash(view.logical_block_hashes[1], hashes[1]));
    ASSERT_EQ(view.base_page_count, 2u);
    EXPECT_EQ(view.base_page_path[0], 0);
    EXPECT_EQ(view.base_page_path[1], 1);
    EXPECT_EQ(view.draft_page_count, 0u);
    int32_t page = -2;
    EXPECT_EQ(ctxc_debug_manager_base_index_lookup(m, &hashes[1], &page), CTXC_OK);
    EXPECT_EQ(page, 1);
    ctxc_hash128_t const unknown = H(77);
    EXPECT_EQ(ctxc_debug_manager_base_index_lookup(m, &unknown, &page), CTXC_OK);
    EXPECT_EQ(page, -1);

    // A second request with the same prompt reuses both full blocks and gets a private tail page.
    r = acquireResult();
    ctxc_lease_t* consumer = acquire(m, hashes, 10, &r);
    ASSERT_NE(consumer, nullptr);
    EXPECT_EQ(r.plan.kind, CTXC_PLAN_STANDARD);
    EXPECT_EQ(r.plan.matched_token_length, 8);
    EXPECT_EQ(r.plan.reuse_token_length, 8);
    EXPECT_EQ(r.plan.bound_base_page_count, 2);
    EXPECT_EQ(r.plan.demand.base_kv_pages, 1);
    EXPECT_EQ(leasePages(consumer), (std::vector<int32_t>{0, 1, 3}));
    size_t leases = 0;
    EXPECT_EQ(ctxc_manager_live_lease_count(m, &leases), CTXC_OK);
    EXPECT_EQ(leases, 1u);

    EXPECT_EQ(ctxc_lease_destroy(consumer), CTXC_OK);  // releases a live lease
    EXPECT_EQ(ctxc_lease_destroy(producer), CTXC_OK);
    EXPECT_EQ(ctxc_manager_live_lease_count(m, &leases), CTXC_OK);
    EXPECT_EQ(leases, 0u);
    EXPECT_EQ(refs(m, 0), std::make_pair(0, 1));
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);

    ctxc_manager_metrics_t metrics{sizeof(ctxc_manager_metrics_t)};
    EXPECT_EQ(ctxc_manager_evict_record(m, 1), CTXC_OK);
    ASSERT_EQ(ctxc_manager_metrics(m, &metrics), CTXC_OK);
    EXPECT_EQ(metrics.evicted_records, 1u);
    EXPECT_EQ(metrics.reclaimed_base_kv_pages, 2u);
    int32_t free = 0;
    EXPECT_EQ(ctxc_manager_pool_counts(m, CTXC_RESOURCE_BASE_KV_PAGE, &free, nullptr), CTXC_OK);
    EXPECT_EQ(free, 8);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
    EXPECT_EQ(ctxc_hasher_destroy(hasher), CTXC_OK);
}

// Publishes `hashes` (all full blocks of `tokens`) through a fresh vanilla lease and destroys the lease.
uint64_t publishAll(ctxc_manager_t* m, std::vector<ctxc_hash128_t> const& hashes, int32_t tokens) {
    ctxc_lease_t* lease = acquire(m, hashes, tokens);
    EXPECT_NE(lease, nullptr);
    ctxc_publish_result_t p = publishResult();
    EXPECT_EQ(ctxc_manager_publish(m, lease, hashes.data(), hashes.size(), tokens, &p), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    return p.record;
}

::testing::AssertionResult viewShows(ctxc_record_view_t const& view, std::vector<ctxc_hash128_t> const& hashes) {
    if (view.logical_block_count != hashes.size() || view.full_block_count != static_cast<int32_t>(hashes.size()))
        return ::testing::AssertionFailure() << "record " << view.id << " shows " << view.logical_block_count
                                             << " hashes, expected " << hashes.size();
    for (size_t i = 0; i < hashes.size(); ++i)
        if (!sameHash(view.logical_block_hashes[i], hashes[i]))
            return ::testing::AssertionFailure() << "record " << view.id << " hash " << i << " differs";
    return ::testing::AssertionSuccess();
}

// The store derives most logical hashes from base pages; the views still show each record's published hashes,
// several at once, and a trimmed record its kept prefix.
TEST(CApi, RecordViewsHeldTogetherShowThePublishedHashes) {
    ctxc_manager_options_t options;
    ctxc_manager_options_init(&options);
    options.page_size = 4;
    options.capacities = {8, 0, 0, 0};
    options.max_records = 8;
    options.eviction_policy = CTXC_EVICTION_RECORD_LRU_TRIM;
    ctxc_manager_t* m = nullptr;
    ASSERT_EQ(ctxc_manager_create(&options, &m), CTXC_OK) << ctxc_last_error();
    std::vector<ctxc_hash128_t> const turn1{H(1), H(2), H(3)};
    std::vector<ctxc_hash128_t> const turn2{H(1), H(2), H(3), H(4), H(5)};  // shares turn1's three pages
    std::vector<ctxc_hash128_t> const other{H(7)};
    uint64_t const r1 = publishAll(m, turn1, 12);
    uint64_t const r2 = publishAll(m, turn2, 20);
    uint64_t const r3 = publishAll(m, other, 4);
    ASSERT_EQ(freeList(m).size(), 2u);

    ctxc_record_view_t v1{sizeof(ctxc_record_view_t)}, v2{sizeof(ctxc_record_view_t)}, v3{sizeof(ctxc_record_view_t)},
        v2again{sizeof(ctxc_record_view_t)};
    ASSERT_EQ(ctxc_debug_manager_record(m, r1, &v1), CTXC_OK);
    ASSERT_EQ(ctxc_debug_manager_record(m, r2, &v2), CTXC_OK);
    ASSERT_EQ(ctxc_debug_manager_record(m, r3, &v3), CTXC_OK);
    ASSERT_EQ(ctxc_debug_manager_record(m, r2, &v2again), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);  // not a mutating call: the views stay valid
    EXPECT_TRUE(viewShows(v1, turn1));
    EXPECT_TRUE(viewShows(v2, turn2));
    EXPECT_TRUE(viewShows(v3, other));
    EXPECT_TRUE(viewShows(v2again, turn2));
    EXPECT_EQ(std::vector<int32_t>(v2.base_page_path, v2.base_page_path + 3),
              std::vector<int32_t>(v1.base_page_path, v1.base_page_path + 3));

    // Three pages for two free: turn1 frees nothing (its pages are turn2's too) and goes whole; turn2 gives up its
    // private last block.
    ctxc_lease_t* lease = acquire(m, {}, 12);
    ASSERT_NE(lease, nullptr);
    size_t count = 0;
    ASSERT_EQ(ctxc_manager_record_count(m, &count), CTXC_OK);
    EXPECT_EQ(count, 2u);
    ctxc_record_view_t trimmed{sizeof(ctxc_record_view_t)}, still{sizeof(ctxc_record_view_t)};
    ASSERT_EQ(ctxc_debug_manager_record(m, r2, &trimmed), CTXC_OK);
    ASSERT_EQ(ctxc_debug_manager_record(m, r3, &still), CTXC_OK);
    EXPECT_TRUE(viewShows(trimmed, {H(1), H(2), H(3), H(4)}));
    EXPECT_TRUE(viewShows(still, other));
    EXPECT_EQ(ctxc_debug_manager_record(m, r1, &v1), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApi, LeaseBasePagesViewFollowsGrowth) {
    ctxc_manager_t* m = makeManager(4, {3, 0, 0, 0});
    ctxc_lease_t* lease = acquire(m, {}, 4);
    ASSERT_NE(lease, nullptr);
    EXPECT_EQ(leasePages(lease), (std::vector<int32_t>{0}));
    int32_t ok = -1;
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, lease, 2, &ok), CTXC_OK);
    EXPECT_EQ(ok, 1);
    EXPECT_EQ(leasePages(lease), (std::vector<int32_t>{0, 1, 2}));
    std::string const before = observe(m);
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, lease, 1, &ok), CTXC_OK);  // shortage is an answer
    EXPECT_EQ(ok, 0);
    EXPECT_EQ(observe(m), before);
    EXPECT_EQ(leasePages(lease), (std::vector<int32_t>{0, 1, 2}));
    int32_t const* pages = nullptr;
    size_t count = 0;
    EXPECT_EQ(ctxc_lease_draft_pages(lease, &pages, &count), CTXC_OK);
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApi, InsufficientCapacityIsAnAnswerWithoutALease) {
    ctxc_manager_t* m = makeManager(4, {1, 0, 0, 0});
    ctxc_lease_t* held = acquire(m, {}, 4);
    ASSERT_NE(held, nullptr);
    std::string const before = observe(m);
    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* lease = reinterpret_cast<ctxc_lease_t*>(uintptr_t{0x1});
    std::vector<ctxc_hash128_t> const hashes{H(1)};
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), 1, 5, CTXC_LOOKUP_USE_CACHE, &r, &lease), CTXC_OK);
    EXPECT_EQ(r.status, CTXC_ACQUIRE_INSUFFICIENT_CAPACITY);
    EXPECT_EQ(r.plan.demand.base_kv_pages, 2);
    EXPECT_EQ(lease, nullptr);
    EXPECT_EQ(observe(m), before);
    EXPECT_EQ(ctxc_lease_destroy(held), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApi, TwoCallPatternReportsTheSizeNeeded) {
    ctxc_manager_t* m = makeManager(4, {4, 0, 0, 0});
    size_t count = 0;
    EXPECT_EQ(ctxc_debug_manager_free_list(m, CTXC_RESOURCE_BASE_KV_PAGE, nullptr, 0, &count), CTXC_E_BUFFER_TOO_SMALL);
    EXPECT_EQ(count, 4u);
    int32_t ids[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    count = 0;
    EXPECT_EQ(ctxc_debug_manager_free_list(m, CTXC_RESOURCE_BASE_KV_PAGE, ids, 2, &count), CTXC_E_BUFFER_TOO_SMALL);
    EXPECT_EQ(count, 4u);
    EXPECT_TRUE(lastErrorFrom("ctxc_debug_manager_free_list"));
    EXPECT_EQ(ids[0], -7);  // nothing copied into a short buffer
    EXPECT_EQ(ctxc_debug_manager_free_list(m, CTXC_RESOURCE_BASE_KV_PAGE, ids, 4, &count), CTXC_OK);
    EXPECT_EQ(count, 4u);
    EXPECT_EQ(std::vector<int32_t>(ids, ids + 4), (std::vector<int32_t>{0, 1, 2, 3}));
    EXPECT_EQ(ctxc_debug_manager_free_list(m, CTXC_RESOURCE_BASE_KV_PAGE, ids, 8, &count), CTXC_OK);
    EXPECT_EQ(count, 4u);
    EXPECT_EQ(ids[4], -7);
    // Empty outputs need no buffer at all.
    EXPECT_EQ(ctxc_debug_manager_free_list(m, CTXC_RESOURCE_DRAFT_KV_PAGE, nullptr, 0, &count), CTXC_OK);
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(ctxc_debug_manager_records_lru(m, nullptr, 0, &count), CTXC_OK);
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(ctxc_manager_hybrid_candidate_lengths(m, 100, nullptr, 0, &count), CTXC_OK);
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(ctxc_debug_manager_free_list(m, CTXC_RESOURCE_BASE_KV_PAGE, ids, 4, nullptr), CTXC_E_INVALID_ARGUMENT);

    int32_t const tokens[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    ctxc_hash128_t out[2];
    count = 0;
    EXPECT_EQ(ctxc_hash_full_blocks(nullptr, tokens, 10, 4, nullptr, 0, nullptr, nullptr, 0, &count),
              CTXC_E_BUFFER_TOO_SMALL);
    EXPECT_EQ(count, 2u);
    EXPECT_EQ(ctxc_hash_full_blocks(nullptr, tokens, 10, 4, nullptr, 0, nullptr, out, 1, &count),
              CTXC_E_BUFFER_TOO_SMALL);
    EXPECT_EQ(count, 2u);
    EXPECT_EQ(ctxc_hash_full_blocks(nullptr, tokens, 10, 4, nullptr, 0, nullptr, out, 2, &count), CTXC_OK);
    // Independent SHA-256 digest of block [1..4] (see block_hash_test.cpp).
    EXPECT_TRUE(sameHash(out[0], {0x738960C1CCF2292Bull, 0x129F7E5CDE16E4C8ull}));
    EXPECT_EQ(ctxc_hash_full_blocks(nullptr, tokens, 3, 4, nullptr, 0, nullptr, nullptr, 0, &count), CTXC_OK);
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

// ---- handles ----------------------------------------------------------------------------------------------

TEST(CApi, NullMadeUpAndWronglyTypedHandlesAreInvalid) {
    int32_t pageSize = 0;
    EXPECT_EQ(ctxc_manager_page_size(nullptr, &pageSize), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_page_size"));
    EXPECT_EQ(ctxc_manager_check_invariants(nullptr), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_check_invariants"));

    // Made-up values, including ones whose low byte looks like each handle type's tag.
    for (uintptr_t bits : {uintptr_t{0x1234}, uintptr_t{0xDEADBEEFC1}, uintptr_t{0x00000001000000C1},
                           uintptr_t{0x7FFFFFFF00FFFFC1}, ~uintptr_t{0}}) {
        auto* fake = reinterpret_cast<ctxc_manager_t*>(bits);
        EXPECT_EQ(ctxc_manager_page_size(fake, &pageSize), CTXC_E_INVALID_HANDLE) << std::hex << bits;
        EXPECT_EQ(ctxc_manager_destroy(fake), CTXC_E_INVALID_HANDLE) << std::hex << bits;
        auto* fakeLease = reinterpret_cast<ctxc_lease_t*>(bits ^ 0xC1 ^ 0xC2);
        ctxc_lease_info_t info{sizeof(ctxc_lease_info_t)};
        EXPECT_EQ(ctxc_lease_info(fakeLease, &info), CTXC_E_INVALID_HANDLE) << std::hex << bits;
        EXPECT_EQ(ctxc_lease_destroy(fakeLease), CTXC_E_INVALID_HANDLE) << std::hex << bits;
        EXPECT_TRUE(lastErrorFrom("ctxc_lease_destroy"));
        ctxc_hash128_t h;
        auto* fakeHasher = reinterpret_cast<ctxc_hasher_t const*>(bits ^ 0xC1 ^ 0xC3);
        EXPECT_EQ(ctxc_hash_opaque_identity(fakeHasher, "x", 1, &h), CTXC_E_INVALID_HANDLE) << std::hex << bits;
    }

    // A real lease passed as a manager and a real manager passed as a lease.
    ctxc_manager_t* m = makeManager(4, {2, 0, 0, 0});
    ctxc_lease_t* lease = acquire(m, {}, 4);
    ASSERT_NE(lease, nullptr);
    EXPECT_EQ(ctxc_manager_page_size(reinterpret_cast<ctxc_manager_t*>(lease), &pageSize), CTXC_E_INVALID_HANDLE);
    ctxc_lease_info_t info{sizeof(ctxc_lease_info_t)};
    EXPECT_EQ(ctxc_lease_info(reinterpret_cast<ctxc_lease_t*>(m), &info), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_lease_release(nullptr), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_lease_release"));
    EXPECT_EQ(ctxc_lease_destroy(nullptr), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApi, StaleHandleNeverAliasesANewerObject) {
    ctxc_manager_t* old = makeManager(4, {2, 0, 0, 0});
    ASSERT_EQ(ctxc_manager_destroy(old), CTXC_OK);
    ctxc_manager_t* fresh = makeManager(8, {2, 0, 0, 0});  // may reuse the same slot, with a new generation
    ASSERT_NE(fresh, old);
    int32_t pageSize = 0;
    EXPECT_EQ(ctxc_manager_page_size(old, &pageSize), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_page_size"));
    EXPECT_EQ(ctxc_manager_page_size(fresh, &pageSize), CTXC_OK);
    EXPECT_EQ(pageSize, 8);

    ctxc_lease_t* first = acquire(fresh, {}, 8);
    ASSERT_EQ(ctxc_lease_destroy(first), CTXC_OK);
    ctxc_lease_t* second = acquire(fresh, {}, 8);
    ASSERT_NE(second, first);
    EXPECT_EQ(ctxc_lease_release(first), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_lease_destroy(first), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(leasePages(second), (std::vector<int32_t>{1}));  // FIFO: the freed page 0 is reused last
    EXPECT_EQ(ctxc_lease_destroy(second), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(fresh), CTXC_OK);
}

TEST(CApi, DoubleReleasedLeaseIsInvalidButStillDestroyable) {
    ctxc_manager_t* m = makeManager(4, {4, 0, 0, 0});
    ctxc_lease_t* lease = acquire(m, {}, 8);
    ASSERT_NE(lease, nullptr);
    EXPECT_EQ(ctxc_lease_release(lease), CTXC_OK);
    std::string const before = observe(m);
    EXPECT_EQ(ctxc_lease_release(lease), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_lease_release"));
    int32_t const* pages = nullptr;
    size_t count = 0;
    EXPECT_EQ(ctxc_lease_base_pages(lease, &pages, &count), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_lease_base_pages"));
    std::vector<ctxc_hash128_t> const hashes{H(1)};
    ctxc_publish_result_t p = publishResult();
    EXPECT_EQ(ctxc_manager_publish(m, lease, hashes.data(), 1, 4, &p), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_publish"));
    int32_t ok = -1;
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, lease, 1, &ok), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ok, 0);
    EXPECT_EQ(observe(m), before);
    ctxc_lease_info_t info{sizeof(ctxc_lease_info_t)};
    ASSERT_EQ(ctxc_lease_info(lease, &info), CTXC_OK);  // info works on a released lease
    EXPECT_EQ(info.state, CTXC_LEASE_RELEASED);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_lease_info(lease, &info), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApi, ForeignLeaseIsRejected) {
    ctxc_manager_t* a = makeManager(4, {4, 0, 0, 0});
    ctxc_manager_t* b = makeManager(4, {4, 0, 0, 0});
    ctxc_lease_t* lease = acquire(a, {}, 8);
    ASSERT_NE(lease, nullptr);
    std::string const beforeA = observe(a), beforeB = observe(b);
    std::vector<ctxc_hash128_t> const hashes{H(1), H(2)};
    ctxc_publish_result_t p = publishResult();
    EXPECT_EQ(ctxc_manager_publish(b, lease, hashes.data(), 2, 8, &p), CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_publish"));
    EXPECT_NE(std::string(ctxc_last_error()).find("another manager"), std::string::npos) << ctxc_last_error();
    int32_t ok = -1;
    EXPECT_EQ(ctxc_manager_grow_base_pages(b, lease, 1, &ok), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(observe(a), beforeA);
    EXPECT_EQ(observe(b), beforeB);
    EXPECT_EQ(ctxc_manager_publish(a, lease, hashes.data(), 2, 8, &p), CTXC_OK);
    EXPECT_EQ(p.record, 1u);
    EXPECT_EQ(ctxc_manager_check_invariants(a), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(b), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(a), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(b), CTXC_OK);
}

TEST(CApi, DestroyingAManagerWithALiveLeaseOrphansIt) {
    ctxc_manager_t* m = makeManager(4, {4, 0, 0, 0});
    ctxc_lease_t* live = acquire(m, {}, 4);
    ctxc_lease_t* released = acquire(m, {}, 4);
    ctxc_lease_t* destroyed = acquire(m, {}, 4);
    ASSERT_EQ(ctxc_lease_release(released), CTXC_OK);
    ASSERT_EQ(ctxc_lease_destroy(destroyed), CTXC_OK);

    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_E_LEASES_OUTSTANDING);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_destroy"));
    EXPECT_NE(std::string(ctxc_last_error()).find("1 live lease"), std::string::npos) << ctxc_last_error();
    int32_t pageSize = 0;
    EXPECT_EQ(ctxc_manager_page_size(m, &pageSize), CTXC_E_INVALID_HANDLE);  // destroyed either way

    ctxc_lease_info_t info{sizeof(ctxc_lease_info_t)};
    ASSERT_EQ(ctxc_lease_info(live, &info), CTXC_OK);
    EXPECT_EQ(info.state, CTXC_LEASE_ORPHANED);
    int32_t const* pages = nullptr;
    size_t count = 0;
    EXPECT_EQ(ctxc_lease_base_pages(live, &pages, &count), CTXC_E_INVALID_HANDLE);
    EXPECT_NE(std::string(ctxc_last_error()).find("outlived its manager"), std::string::npos) << ctxc_last_error();
    EXPECT_EQ(ctxc_lease_release(live), CTXC_E_INVALID_HANDLE);
    ctxc_manager_t* other = makeManager(4, {4, 0, 0, 0});
    std::vector<ctxc_hash128_t> const hashes{H(1)};
    ctxc_publish_result_t p = publishResult();
    EXPECT_EQ(ctxc_manager_publish(other, live, hashes.data(), 1, 4, &p), CTXC_E_INVALID_HANDLE);
    int32_t ok = -1;
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, live, 1, &ok), CTXC_E_INVALID_HANDLE);

    EXPECT_EQ(ctxc_lease_destroy(live), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(released), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(live), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_manager_check_invariants(other), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(other), CTXC_OK);
}

// ---- contract violations and malformed arguments change nothing -------------------------------------------

TEST(CApi, ContractViolationsChangeNothing) {
    ctxc_manager_t* m = makeManager(4, {8, 0, 0, 0});
    std::vector<ctxc_hash128_t> const prompt{H(1), H(2)};
    ctxc_lease_t* producer = acquire(m, prompt, 8);
    ctxc_publish_result_t p = publishResult();
    ASSERT_EQ(ctxc_manager_publish(m, producer, prompt.data(), 2, 8, &p), CTXC_OK);
    ASSERT_EQ(ctxc_lease_destroy(producer), CTXC_OK);
    std::vector<ctxc_hash128_t> const longer{H(1), H(2), H(3)};
    ctxc_lease_t* lease = acquire(m, longer, 12);  // hit on H1, H2
    ASSERT_NE(lease, nullptr);
    std::string const before = observe(m);

    std::vector<ctxc_hash128_t> const changed{H(1), H(9), H(3)};
    EXPECT_EQ(ctxc_manager_publish(m, lease, changed.data(), 3, 12, &p), CTXC_E_CONTRACT);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_publish"));
    EXPECT_NE(std::string(ctxc_last_error()).find("acquired prefix"), std::string::npos) << ctxc_last_error();
    EXPECT_EQ(observe(m), before);

    EXPECT_EQ(ctxc_manager_publish(m, lease, longer.data(), 3, 3, &p), CTXC_E_CONTRACT);  // no resident block
    EXPECT_EQ(ctxc_manager_publish(m, lease, longer.data(), 0, 12, &p), CTXC_E_CONTRACT);
    EXPECT_EQ(observe(m), before);

    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* none = reinterpret_cast<ctxc_lease_t*>(uintptr_t{0x1});
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, longer.data(), 3, 8, CTXC_LOOKUP_USE_CACHE, &r, &none), CTXC_E_CONTRACT);
    EXPECT_EQ(none, nullptr);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_acquire_vanilla"));
    EXPECT_EQ(observe(m), before);

    int32_t ok = -1;
    EXPECT_EQ(ctxc_manager_grow_spec_pages(m, lease, 1, 1, &ok), CTXC_E_CONTRACT);  // not a spec lease
    EXPECT_EQ(ok, 0);
    ctxc_hybrid_snapshot_reservation_t reservation;
    EXPECT_EQ(ctxc_manager_reserve_hybrid_snapshots(m, lease, 0, &reservation, &ok), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_manager_evict_record(m, 99), CTXC_E_CONTRACT);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_evict_record"));
    EXPECT_EQ(observe(m), before);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);

    EXPECT_EQ(ctxc_manager_publish(m, lease, longer.data(), 3, 12, &p), CTXC_OK);  // the lease is still good
    EXPECT_EQ(p.record, 2u);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApi, MalformedArgumentsAreRejectedBeforeAnyChange) {
    ctxc_manager_t* m = makeManager(4, {4, 0, 0, 0});
    ctxc_lease_t* lease = acquire(m, {}, 4);
    std::string const before = observe(m);
    std::vector<ctxc_hash128_t> const hashes{H(1)};
    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* out = nullptr;
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), 1, 4, 7, &r, &out), CTXC_E_INVALID_ARGUMENT);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_acquire_vanilla"));
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), 1, -4, CTXC_LOOKUP_USE_CACHE, &r, &out),
              CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, nullptr, 1, 4, CTXC_LOOKUP_USE_CACHE, &r, &out), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), 1, 4, CTXC_LOOKUP_USE_CACHE, nullptr, &out),
              CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), 1, 4, CTXC_LOOKUP_USE_CACHE, &r, nullptr),
              CTXC_E_INVALID_ARGUMENT);
    ctxc_acquire_result_t small = acquireResult();
    small.struct_size = 4;
    EXPECT_EQ(ctxc_manager_acquire_vanilla(m, hashes.data(), 1, 4, CTXC_LOOKUP_USE_CACHE, &small, &out),
              CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(out, nullptr);

    ctxc_publish_result_t p = publishResult();
    EXPECT_EQ(ctxc_manager_publish(m, lease, hashes.data(), 1, -4, &p), CTXC_E_INVALID_ARGUMENT);
    p.struct_size = 0;
    EXPECT_EQ(ctxc_manager_publish(m, lease, hashes.data(), 1, 4, &p), CTXC_E_INVALID_ARGUMENT);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_publish"));
    int32_t ok = -1;
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, lease, -1, &ok), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, lease, 1, nullptr), CTXC_E_INVALID_ARGUMENT);
    int32_t free = 0;
    EXPECT_EQ(ctxc_manager_pool_counts(m, 4, &free, nullptr), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_pool_counts(m, -1, &free, nullptr), CTXC_E_INVALID_ARGUMENT);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_pool_counts"));
    EXPECT_EQ(observe(m), before);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

// An output struct that may grow starts with struct_size; a caller built against an older, smaller struct is
// refused with INVALID_ARGUMENT before the library writes a byte of it.
template <class Out, class Call>
void refusesShortStructSize(Call&& call, char const* function) {
    Out out;
    std::memset(&out, 0xAB, sizeof out);
    out.struct_size = sizeof(Out) - 1;
    Out const before = out;
    EXPECT_EQ(call(&out), CTXC_E_INVALID_ARGUMENT) << function;
    EXPECT_TRUE(lastErrorFrom(function));
    EXPECT_NE(std::string(ctxc_last_error()).find("struct_size"), std::string::npos) << ctxc_last_error();
    EXPECT_EQ(std::memcmp(&out, &before, sizeof out), 0) << function << " wrote into a refused struct";
    out.struct_size = sizeof(Out);
    EXPECT_EQ(call(&out), CTXC_OK) << function << ": " << ctxc_last_error();
}

TEST(CApi, EveryGrowableOutputStructRefusesAShortStructSizeUntouched) {
    ctxc_manager_t* m = makeManager(4, {4, 0, 0, 0});
    std::vector<ctxc_hash128_t> const hashes = {H(1)};
    ctxc_lease_t* lease = acquire(m, hashes, 5);
    ASSERT_NE(lease, nullptr);
    refusesShortStructSize<ctxc_manager_metrics_t>([&](auto* out) { return ctxc_manager_metrics(m, out); },
                                                   "ctxc_manager_metrics");
    refusesShortStructSize<ctxc_lease_info_t>([&](auto* out) { return ctxc_lease_info(lease, out); },
                                              "ctxc_lease_info");
    refusesShortStructSize<ctxc_publish_result_t>([&](auto* out) {
        return ctxc_manager_publish(m, lease, hashes.data(), hashes.size(), 5, out);
    }, "ctxc_manager_publish");
    uint64_t record = 0;
    size_t count = 0;
    ASSERT_EQ(ctxc_debug_manager_records_lru(m, &record, 1, &count), CTXC_OK);
    ASSERT_EQ(count, 1u);
    refusesShortStructSize<ctxc_record_view_t>([&](auto* out) { return ctxc_debug_manager_record(m, record, out); },
                                               "ctxc_debug_manager_record");
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    refusesShortStructSize<ctxc_acquire_result_t>([&](auto* out) {
        ctxc_lease_t* again = nullptr;
        ctxc_status_t const status =
            ctxc_manager_acquire_vanilla(m, hashes.data(), hashes.size(), 5, CTXC_LOOKUP_USE_CACHE, out, &again);
        if (again) EXPECT_EQ(ctxc_lease_destroy(again), CTXC_OK);
        return status;
    }, "ctxc_manager_acquire_vanilla");
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);

    ctxc_device_backend_options_t options;
    ctxc_device_backend_options_init(&options);
    options.kind = CTXC_BACKEND_CPU;
    ctxc_device_backend_t* backend = nullptr;
    ASSERT_EQ(ctxc_device_backend_create(&options, &backend), CTXC_OK) << ctxc_last_error();
    refusesShortStructSize<ctxc_launch_counters_t>(
        [&](auto* out) { return ctxc_device_backend_counters(backend, out); }, "ctxc_device_backend_counters");
    EXPECT_EQ(ctxc_device_backend_destroy(backend), CTXC_OK);
}

TEST(CApi, LastErrorIsThreadLocal) {
    EXPECT_EQ(ctxc_manager_check_invariants(nullptr), CTXC_E_INVALID_HANDLE);
    ASSERT_TRUE(lastErrorFrom("ctxc_manager_check_invariants"));
    std::string seen = "unset";
    std::thread([&] { seen = ctxc_last_error(); }).join();
    EXPECT_EQ(seen, "");  // never NULL, empty before any failure on that thread
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_check_invariants"));
}

// ---- hashing through the ABI --------------------------------------------------------------------------------

TEST(CApi, HashingMatchesIndependentDigests) {
    // Constants computed independently in Python from the documented tagged stream (see block_hash_test.cpp).
    int32_t const tokens[6] = {1, 2, 3, 4, 5, 6};
    ctxc_hasher_options_t o;
    ctxc_hasher_options_init(&o);
    EXPECT_EQ(o.struct_size, sizeof(ctxc_hasher_options_t));
    EXPECT_EQ(o.algorithm, CTXC_HASH_SHA256);
    o.algorithm = CTXC_HASH_FNV1A128;
    ctxc_hasher_t* fnv = nullptr;
    ASSERT_EQ(ctxc_hasher_create(&o, &fnv), CTXC_OK);
    ctxc_hasher_options_init(&o);
    o.key = reinterpret_cast<uint8_t const*>("tenant-secret");
    o.key_length = 13;
    ctxc_hasher_t* keyed = nullptr;
    ASSERT_EQ(ctxc_hasher_create(&o, &keyed), CTXC_OK);

    ctxc_hash128_t h;
    ASSERT_EQ(ctxc_hash_block(fnv, nullptr, tokens, 4, nullptr, nullptr, &h), CTXC_OK);  // NULL parent = root
    EXPECT_TRUE(sameHash(h, {0x0EC7DEB0E398286Aull, 0x0914822596977088ull}));
    ASSERT_EQ(ctxc_hash_block(nullptr, nullptr, tokens, 4, nullptr, nullptr, &h), CTXC_OK);  // default: SHA-256
    EXPECT_TRUE(sameHash(h, {0x738960C1CCF2292Bull, 0x129F7E5CDE16E4C8ull}));
    ASSERT_EQ(ctxc_hash_block(keyed, nullptr, tokens, 4, nullptr, nullptr, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0x71835607D1A9C67Eull, 0xA08F0E8481B9D49Eull}));
    ASSERT_EQ(ctxc_hash_exact_prefix(fnv, tokens, 6, 4, nullptr, 0, nullptr, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0x62CB4E00F107C7A4ull, 0x492AE26A752936BFull}));
    ASSERT_EQ(ctxc_hash_exact_prefix(keyed, tokens, 6, 4, nullptr, 0, nullptr, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0x2E91B0EBE392F0B7ull, 0x72883E6E3DA6341Cull}));
    ASSERT_EQ(ctxc_hash_exact_prefix(fnv, tokens, 0, 4, nullptr, 0, nullptr, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full}));  // empty prefix = chain root
    ASSERT_EQ(ctxc_hash_opaque_identity(fnv, "lora-a", 6, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0x367756F871294E27ull, 0x7986551ABC983595ull}));
    ASSERT_EQ(ctxc_hash_opaque_identity(nullptr, "lora-a", 6, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0x2DEA43D4395643BAull, 0xAF254B7536F62F7Cull}));

    // Every extras field crosses the ABI: one media span, adapter generation 7, three digests, and a
    // per-position media hash at position 1.
    ctxc_media_span_key_t span{};
    span.content_digest = {0x1111, 0x2222};
    span.placement_digest = {0x3333, 0x4444};
    span.offset_within_block = 1;
    span.item_order = 0;
    span.modality = 1;
    ctxc_block_key_extras_t extras{};
    extras.media = &span;
    extras.media_count = 1;
    extras.has_adapter = 1;
    extras.adapter_id = {0xAAAA, 0xBBBB};
    extras.adapter_generation = 7;
    extras.has_position_digest = 1;
    extras.position_digest = {0x5, 0x6};
    extras.has_custom_embedding_digest = 1;
    extras.custom_embedding_digest = {0x7, 0x8};
    extras.has_isolation_digest = 1;
    extras.isolation_digest = {0x9, 0xA};
    ctxc_hash128_t const media[4] = {{0, 0}, {0x1111, 0x2222}, {0, 0}, {0, 0}};
    ASSERT_EQ(ctxc_hash_block(fnv, nullptr, tokens, 4, &extras, media, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0x98FC8C2005DA732Full, 0xB6CD0770464DFCDAull}));
    ASSERT_EQ(ctxc_hash_block(nullptr, nullptr, tokens, 4, &extras, media, &h), CTXC_OK);
    EXPECT_TRUE(sameHash(h, {0xA39336A787602990ull, 0xEC81FBC2F0198B60ull}));

    EXPECT_EQ(ctxc_hasher_destroy(fnv), CTXC_OK);
    EXPECT_EQ(ctxc_hasher_destroy(keyed), CTXC_OK);
    EXPECT_EQ(ctxc_hash_block(fnv, nullptr, tokens, 4, nullptr, nullptr, &h), CTXC_E_INVALID_HANDLE);  // stale
    EXPECT_EQ(ctxc_hasher_destroy(fnv), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_hasher_destroy(nullptr), CTXC_OK);
}

TEST(CApi, HasherAndExtrasArgumentsAreValidated) {
    ctxc_hasher_options_t o;
    ctxc_hasher_options_init(&o);
    ctxc_hasher_t* h = reinterpret_cast<ctxc_hasher_t*>(uintptr_t{0x1});
    o.algorithm = CTXC_HASH_FNV1A128;
    o.key = reinterpret_cast<uint8_t const*>("k");
    o.key_length = 1;
    EXPECT_EQ(ctxc_hasher_create(&o, &h), CTXC_E_INVALID_ARGUMENT);  // FNV takes no key
    EXPECT_EQ(h, nullptr);
    EXPECT_TRUE(lastErrorFrom("ctxc_hasher_create"));
    ctxc_hasher_options_init(&o);
    o.algorithm = 5;
    EXPECT_EQ(ctxc_hasher_create(&o, &h), CTXC_E_INVALID_ARGUMENT);
    ctxc_hasher_options_init(&o);
    o.key_length = 3;  // NULL key with a length
    EXPECT_EQ(ctxc_hasher_create(&o, &h), CTXC_E_INVALID_ARGUMENT);
    ctxc_hasher_options_init(&o);
    o.struct_size = 8;
    EXPECT_EQ(ctxc_hasher_create(&o, &h), CTXC_E_INVALID_ARGUMENT);

    int32_t const tokens[4] = {1, 2, 3, 4};
    ctxc_hash128_t out;
    ctxc_block_key_extras_t extras{};
    extras.has_adapter = 2;  // a has_* field is 0 or 1
    EXPECT_EQ(ctxc_hash_block(nullptr, nullptr, tokens, 4, &extras, nullptr, &out), CTXC_E_INVALID_ARGUMENT);
    EXPECT_TRUE(lastErrorFrom("ctxc_hash_block"));
    ctxc_media_span_key_t span{};
    span.modality = 256;
    extras = ctxc_block_key_extras_t{};
    extras.media = &span;
    extras.media_count = 1;
    EXPECT_EQ(ctxc_hash_block(nullptr, nullptr, tokens, 4, &extras, nullptr, &out), CTXC_E_INVALID_ARGUMENT);
    extras.media = nullptr;  // NULL media with a count
    EXPECT_EQ(ctxc_hash_block(nullptr, nullptr, tokens, 4, &extras, nullptr, &out), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_hash_block(nullptr, nullptr, nullptr, 4, nullptr, nullptr, &out), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_hash_block(nullptr, nullptr, tokens, 4, nullptr, nullptr, nullptr), CTXC_E_INVALID_ARGUMENT);
    size_t count = 0;
    EXPECT_EQ(ctxc_hash_full_blocks(nullptr, tokens, 4, 0, nullptr, 0, nullptr, &out, 1, &count),
              CTXC_E_INVALID_ARGUMENT);
    // An empty token list is a valid block (NULL with count 0), and an empty opaque identity too.
    EXPECT_EQ(ctxc_hash_block(nullptr, nullptr, nullptr, 0, nullptr, nullptr, &out), CTXC_OK);
    EXPECT_EQ(ctxc_hash_opaque_identity(nullptr, nullptr, 0, &out), CTXC_OK);
    EXPECT_EQ(ctxc_hash_opaque_identity(nullptr, nullptr, 3, &out), CTXC_E_INVALID_ARGUMENT);
}

// ---- library-wide -----------------------------------------------------------------------------------------

TEST(CApi, SizeofMatchesEveryPublicStruct) {
#define CTXC_EXPECT_SIZEOF(type) EXPECT_EQ(ctxc_sizeof(#type), sizeof(type)) << #type
    CTXC_EXPECT_SIZEOF(ctxc_hash128_t);
    CTXC_EXPECT_SIZEOF(ctxc_resource_demand_t);
    CTXC_EXPECT_SIZEOF(ctxc_hasher_options_t);
    CTXC_EXPECT_SIZEOF(ctxc_media_span_key_t);
    CTXC_EXPECT_SIZEOF(ctxc_block_key_extras_t);
    CTXC_EXPECT_SIZEOF(ctxc_manager_options_t);
    CTXC_EXPECT_SIZEOF(ctxc_reuse_plan_t);
    CTXC_EXPECT_SIZEOF(ctxc_acquire_result_t);
    CTXC_EXPECT_SIZEOF(ctxc_hybrid_candidate_t);
    CTXC_EXPECT_SIZEOF(ctxc_hybrid_snapshot_reservation_t);
    CTXC_EXPECT_SIZEOF(ctxc_hybrid_checkpoint_key_t);
    CTXC_EXPECT_SIZEOF(ctxc_publish_result_t);
    CTXC_EXPECT_SIZEOF(ctxc_manager_metrics_t);
    CTXC_EXPECT_SIZEOF(ctxc_record_view_t);
    CTXC_EXPECT_SIZEOF(ctxc_lease_info_t);
#undef CTXC_EXPECT_SIZEOF
    EXPECT_EQ(ctxc_sizeof("ctxc_no_such_t"), 0u);
    EXPECT_EQ(ctxc_sizeof(""), 0u);
    EXPECT_EQ(ctxc_sizeof(nullptr), 0u);
    EXPECT_EQ(sizeof(ctxc_hash128_t), 16u);  // an array of n hashes is an (n, 2) uint64 array
}

TEST(CApi, StatusStringsNameEveryCode) {
    // Every code up to the sentinel, so that a new code cannot be skipped: a distinct "CTXC_..." name each.
    std::set<std::string> names;
    for (int code = CTXC_OK; code < CTXC_STATUS_COUNT; ++code) {
        char const* name = ctxc_status_string(static_cast<ctxc_status_t>(code));
        ASSERT_NE(name, nullptr) << code;
        EXPECT_EQ(std::string(name).rfind(code == CTXC_OK ? "CTXC_OK" : "CTXC_E_", 0), 0u) << code << " " << name;
        EXPECT_TRUE(names.insert(name).second) << code << " repeats " << name;
    }
    EXPECT_STREQ(ctxc_status_string(CTXC_E_DEVICE), "CTXC_E_DEVICE");
    EXPECT_STREQ(ctxc_status_string(CTXC_STATUS_COUNT), "CTXC_UNKNOWN_STATUS");
    ASSERT_NE(ctxc_status_string(static_cast<ctxc_status_t>(99)), nullptr);
    EXPECT_STREQ(ctxc_status_string(static_cast<ctxc_status_t>(99)), "CTXC_UNKNOWN_STATUS");
}

TEST(CApi, CudaProbeAnswersWithoutCrashing) {
    EXPECT_EQ(ctxc_cuda_compiled(), CTXCACHE_TEST_EXPECT_CUDA);
    int32_t const count = ctxc_cuda_device_count();
    if (ctxc_cuda_compiled() == 0) EXPECT_EQ(count, -1);
    // Without an NVIDIA device node no CUDA device can be usable; with one, the answer may be anything >= -999.
    if (access("/dev/nvidiactl", F_OK) != 0) EXPECT_LE(count, 0);
    if (count <= 0) EXPECT_TRUE(lastErrorFrom("ctxc_cuda_device_count"));
    EXPECT_EQ(ctxc_cuda_device_count(), count);  // a second probe gives the same answer
}

// ---- Hybrid+MTP checkpoints --------------------------------------------------------------------------------

ctxc_lease_t* acquireMtp(ctxc_manager_t* m, std::vector<ctxc_hybrid_candidate_t> const& candidates,
                         std::vector<ctxc_hash128_t> const& hashes, int32_t tokens, ctxc_acquire_result_t* result) {
    ctxc_lease_t* lease = nullptr;
    EXPECT_EQ(ctxc_manager_acquire_hybrid_mtp(m, candidates.data(), candidates.size(), hashes.data(), hashes.size(),
                                              tokens, CTXC_LOOKUP_USE_CACHE, result, &lease),
              CTXC_OK)
        << ctxc_last_error();
    return lease;
}

std::vector<int32_t> leaseDraftPages(ctxc_lease_t const* lease) {
    int32_t const* pages = nullptr;
    size_t count = 0;
    EXPECT_EQ(ctxc_lease_draft_pages(lease, &pages, &count), CTXC_OK) << ctxc_last_error();
    return std::vector<int32_t>(pages, pages + count);
}

ctxc_hash128_t mtpDigest(int32_t length) { return ctxc_hash128_t{0x3D16E57ull, static_cast<uint64_t>(length)}; }

// A checkpoint at E = 9 (page 4) keeps 2 full blocks in both pools; a 16-token prompt reuses 9 tokens, binds 2
// base and 2 draft pages and the two slots; the record view says it is an MTP checkpoint.
TEST(CApi, HybridMtpCheckpointRoundTrip) {
    ctxc_manager_t* m = makeManager(4, {16, 16, 4, 4});
    std::vector<ctxc_hash128_t> const prompt{H(1), H(2), H(3), H(4)};
    std::vector<ctxc_hash128_t> const first(prompt.begin(), prompt.begin() + 2);
    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* producer = acquireMtp(m, {}, first, 9, &r);
    ASSERT_NE(producer, nullptr);
    EXPECT_EQ(r.plan.mode, CTXC_MODE_HYBRID_MTP);
    EXPECT_EQ(r.plan.kind, CTXC_PLAN_NO_REUSABLE_PREFIX);
    EXPECT_EQ(r.plan.demand.base_kv_pages, 3);
    EXPECT_EQ(r.plan.demand.draft_kv_pages, 3);
    EXPECT_EQ(r.plan.hybrid_has_attention, 1);
    ctxc_lease_info_t info{sizeof(ctxc_lease_info_t)};
    ASSERT_EQ(ctxc_lease_info(producer, &info), CTXC_OK);
    EXPECT_EQ(info.mode, CTXC_MODE_HYBRID_MTP);
    EXPECT_EQ(info.base_page_count, 3u);
    EXPECT_EQ(info.draft_page_count, 3u);
    EXPECT_EQ(leaseDraftPages(producer), (std::vector<int32_t>{0, 1, 2}));

    int32_t ok = -1;
    ctxc_hybrid_snapshot_reservation_t slots{-5, -5};
    EXPECT_EQ(ctxc_manager_reserve_hybrid_snapshots(m, producer, 0, &slots, &ok), CTXC_E_CONTRACT);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_reserve_hybrid_snapshots"));
    ASSERT_EQ(ctxc_manager_reserve_hybrid_snapshots(m, producer, 1, &slots, &ok), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ok, 1);
    EXPECT_EQ(slots.recurrent_snapshot_slot, 0);
    EXPECT_EQ(slots.partial_kv_snapshot_slot, 0);
    ctxc_hybrid_checkpoint_key_t const key{mtpDigest(9), 9, 0};
    ctxc_publish_result_t p = publishResult();
    ASSERT_EQ(ctxc_manager_publish_hybrid_mtp(m, producer, first.data(), 2, &key, &slots, &p), CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(p.status, CTXC_PUBLISH_PUBLISHED);
    EXPECT_EQ(p.record, 1u);
    EXPECT_EQ(p.published_base_full_block_count, 2);
    ASSERT_EQ(p.canonical_base_page_count, 2u);
    EXPECT_EQ(std::vector<int32_t>(p.canonical_base_pages, p.canonical_base_pages + 2), (std::vector<int32_t>{0, 1}));
    // The duplicate: touched, existing record.
    ASSERT_EQ(ctxc_manager_publish_hybrid_mtp(m, producer, first.data(), 2, &key, &slots, &p), CTXC_OK);
    EXPECT_EQ(p.status, CTXC_PUBLISH_EXISTING_RECORD);
    EXPECT_EQ(p.record, 1u);
    ASSERT_EQ(ctxc_manager_retire_hybrid_snapshot_reservation(m, producer, &slots), CTXC_OK);
    ASSERT_EQ(ctxc_lease_destroy(producer), CTXC_OK);

    ctxc_record_view_t view{sizeof(ctxc_record_view_t)};
    ASSERT_EQ(ctxc_debug_manager_record(m, 1, &view), CTXC_OK);
    EXPECT_EQ(view.hybrid_mtp_checkpoint, 1);
    EXPECT_EQ(view.exact_checkpoint_length, 9);
    EXPECT_EQ(view.full_block_count, 2);
    EXPECT_EQ(view.partial_kv_snapshot_slot, 0);
    ASSERT_EQ(view.draft_page_count, 2u);
    EXPECT_EQ(std::vector<int32_t>(view.draft_page_path, view.draft_page_path + 2), (std::vector<int32_t>{0, 1}));
    size_t entries = 99;
    EXPECT_EQ(ctxc_debug_manager_draft_index_size(m, &entries), CTXC_OK);
    EXPECT_EQ(entries, 0u);  // found through its checkpoint key only
    std::vector<int32_t> lengths(4);
    size_t count = 0;
    ASSERT_EQ(ctxc_manager_hybrid_candidate_lengths_for(m, 16, prompt.data(), 4, lengths.data(), 4, &count), CTXC_OK);
    EXPECT_EQ(count, 1u);
    EXPECT_EQ(lengths[0], 9);

    // A plain hybrid acquire does not see it; the MTP acquire does.
    std::vector<ctxc_hybrid_candidate_t> const candidates{{9, 0, mtpDigest(9)}};
    r = acquireResult();
    ctxc_lease_t* plain = nullptr;
    ASSERT_EQ(ctxc_manager_acquire_hybrid(m, candidates.data(), 1, prompt.data(), 4, 16, 1, CTXC_LOOKUP_USE_CACHE, &r,
                                          &plain),
              CTXC_OK);
    EXPECT_EQ(r.plan.kind, CTXC_PLAN_NO_REUSABLE_PREFIX);
    EXPECT_EQ(r.plan.hybrid_record, 0u);
    ASSERT_EQ(ctxc_lease_destroy(plain), CTXC_OK);
    r = acquireResult();
    ctxc_lease_t* consumer = acquireMtp(m, candidates, prompt, 16, &r);
    ASSERT_NE(consumer, nullptr);
    EXPECT_EQ(r.plan.mode, CTXC_MODE_HYBRID_MTP);
    EXPECT_EQ(r.plan.kind, CTXC_PLAN_STANDARD);
    EXPECT_EQ(r.plan.matched_token_length, 9);
    EXPECT_EQ(r.plan.reuse_token_length, 9);
    EXPECT_EQ(r.plan.bound_base_page_count, 2);
    EXPECT_EQ(r.plan.bound_draft_page_count, 2);
    EXPECT_EQ(r.plan.demand.base_kv_pages, 2);
    EXPECT_EQ(r.plan.demand.draft_kv_pages, 2);
    EXPECT_EQ(r.plan.hybrid_record, 1u);
    EXPECT_EQ(r.plan.draft_record, 0u);
    EXPECT_EQ(r.plan.recurrent_snapshot_binding, 0);
    EXPECT_EQ(r.plan.partial_kv_snapshot_binding, 0);
    EXPECT_EQ(r.plan.has_hybrid_checkpoint, 1);
    EXPECT_EQ(r.plan.hybrid_checkpoint_length, 9);
    EXPECT_TRUE(sameHash(r.plan.hybrid_checkpoint_digest, mtpDigest(9)));
    EXPECT_EQ(leasePages(consumer), (std::vector<int32_t>{0, 1, 7, 8}));  // 2..6 went back after the plain lease
    EXPECT_EQ(leaseDraftPages(consumer), (std::vector<int32_t>{0, 1, 3, 4}));
    ASSERT_EQ(ctxc_lease_info(consumer, &info), CTXC_OK);
    EXPECT_EQ(info.draft_page_count, 4u);
    EXPECT_EQ(info.recurrent_snapshot_slot, 0);
    EXPECT_EQ(info.partial_kv_snapshot_slot, 0);
    ASSERT_EQ(ctxc_manager_grow_spec_pages(m, consumer, 1, 1, &ok), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ok, 1);
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, consumer, 1, &ok), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_manager_release_restored_hybrid_snapshots(m, consumer), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(consumer), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);

    // Eviction returns the draft pages and both slots.
    ASSERT_EQ(ctxc_manager_evict_record(m, 1), CTXC_OK);
    ctxc_manager_metrics_t metrics{sizeof(ctxc_manager_metrics_t)};
    ASSERT_EQ(ctxc_manager_metrics(m, &metrics), CTXC_OK);
    EXPECT_EQ(metrics.reclaimed_base_kv_pages, 2u);
    EXPECT_EQ(metrics.reclaimed_draft_kv_pages, 2u);
    EXPECT_EQ(metrics.reclaimed_recurrent_snapshots, 1u);
    EXPECT_EQ(metrics.reclaimed_partial_kv_snapshots, 1u);
    for (int32_t type = 0; type < 4; ++type) {
        int32_t free = -1, capacity = -2;
        EXPECT_EQ(ctxc_manager_pool_counts(m, type, &free, &capacity), CTXC_OK);
        EXPECT_EQ(free, capacity) << type;
    }
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApi, HybridMtpBadCallsChangeNothing) {
    ctxc_manager_t* m = makeManager(4, {16, 16, 4, 4});
    std::vector<ctxc_hash128_t> const prompt{H(1), H(2), H(3)};
    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* lease = acquireMtp(m, {}, prompt, 12, &r);
    ctxc_lease_t* vanilla = acquire(m, prompt, 12);
    ctxc_hybrid_snapshot_reservation_t slots{-1, -1};
    int32_t ok = 0;
    ASSERT_EQ(ctxc_manager_reserve_hybrid_snapshots(m, lease, 1, &slots, &ok), CTXC_OK);
    std::string const before = observe(m);
    std::vector<ctxc_hash128_t> const two(prompt.begin(), prompt.begin() + 2);
    ctxc_publish_result_t p = publishResult();
    ctxc_hybrid_checkpoint_key_t const at8{mtpDigest(8), 8, 0};
    ctxc_hybrid_checkpoint_key_t const at9{mtpDigest(9), 9, 0};
    // Contract: E = 8 has floor(7/4) = 1 full block; a reservation without its partial slot; the wrong lease kind.
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, two.data(), 2, &at8, &slots, &p), CTXC_E_CONTRACT);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_publish_hybrid_mtp"));
    ctxc_hybrid_snapshot_reservation_t const noPartial{slots.recurrent_snapshot_slot, -1};
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, two.data(), 2, &at9, &noPartial, &p), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, vanilla, two.data(), 2, &at9, &slots, &p), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_manager_publish_hybrid(m, lease, two.data(), 2, &at8, &slots, &p), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_manager_publish(m, lease, two.data(), 2, 8, &p), CTXC_E_CONTRACT);
    // Malformed: NULL checkpoint or snapshots, a partial slot below -1, a short struct, a bad policy.
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, two.data(), 2, nullptr, &slots, &p), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, two.data(), 2, &at9, nullptr, &p), CTXC_E_INVALID_ARGUMENT);
    ctxc_hybrid_snapshot_reservation_t const badPartial{slots.recurrent_snapshot_slot, -2};
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, two.data(), 2, &at9, &badPartial, &p), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, nullptr, 2, &at9, &slots, &p), CTXC_E_INVALID_ARGUMENT);
    ctxc_publish_result_t small = publishResult();
    small.struct_size = 4;
    EXPECT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, two.data(), 2, &at9, &slots, &small), CTXC_E_INVALID_ARGUMENT);
    ctxc_lease_t* out = reinterpret_cast<ctxc_lease_t*>(uintptr_t{0x1});
    std::vector<ctxc_hybrid_candidate_t> const candidates{{9, 0, mtpDigest(9)}};
    r = acquireResult();
    EXPECT_EQ(ctxc_manager_acquire_hybrid_mtp(m, candidates.data(), 1, prompt.data(), 3, 12, 7, &r, &out),
              CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(out, nullptr);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_acquire_hybrid_mtp"));
    EXPECT_EQ(ctxc_manager_acquire_hybrid_mtp(m, nullptr, 1, prompt.data(), 3, 12, CTXC_LOOKUP_USE_CACHE, &r, &out),
              CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(
        ctxc_manager_acquire_hybrid_mtp(m, candidates.data(), 1, prompt.data(), 3, -1, CTXC_LOOKUP_USE_CACHE, &r, &out),
        CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(
        ctxc_manager_acquire_hybrid_mtp(m, candidates.data(), 1, prompt.data(), 3, 11, CTXC_LOOKUP_USE_CACHE, &r, &out),
        CTXC_E_CONTRACT);  // 3 full blocks cannot come from 11 tokens
    EXPECT_EQ(observe(m), before);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);

    ASSERT_EQ(ctxc_manager_publish_hybrid_mtp(m, lease, two.data(), 2, &at9, &slots, &p), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(p.status, CTXC_PUBLISH_PUBLISHED);
    EXPECT_EQ(ctxc_lease_destroy(vanilla), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

}  // namespace

// ---- retention (include/ctxcache/c/retention.h) ----------------------------------------------------------

namespace {

int32_t recordPriority(ctxc_manager_t const* m, uint64_t record) {
    int32_t priority = -1;
    EXPECT_EQ(ctxc_manager_record_priority(m, record, &priority), CTXC_OK) << ctxc_last_error();
    return priority;
}

uint64_t serveRetained(ctxc_manager_t* m, std::vector<ctxc_hash128_t> const& hashes,
                       ctxc_retention_spec_t const* spec) {
    ctxc_lease_t* lease = acquire(m, hashes, static_cast<int32_t>(hashes.size()) * 4);
    EXPECT_NE(lease, nullptr);
    if (!lease) return 0;
    EXPECT_EQ(ctxc_lease_set_retention(lease, spec), CTXC_OK) << ctxc_last_error();
    ctxc_publish_result_t p = publishResult();
    EXPECT_EQ(ctxc_manager_publish(m, lease, hashes.data(), hashes.size(), static_cast<int32_t>(hashes.size()) * 4, &p),
              CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    return p.record;
}

}  // namespace

TEST(CApiRetention, ALeasesSpecRanksItsRecordAndEvictionTakesTheLowestPriorityFirst) {
    ctxc_manager_t* m = makeManager(4, {6, 0, 0, 0}, 8);
    ASSERT_EQ(ctxc_manager_set_retention_time(m, 0), CTXC_OK);
    ctxc_retention_range_t const range{0, CTXC_RETENTION_OPEN_END, 90, 0, 10'000'000'000};  // 90 for 10 s
    ctxc_retention_spec_t spec;
    ctxc_retention_spec_init(&spec);
    EXPECT_EQ(spec.decode_priority, CTXC_RETENTION_DEFAULT_PRIORITY);
    EXPECT_EQ(spec.prompt_token_count, -1);
    spec.ranges = &range;
    spec.range_count = 1;
    uint64_t const kept = serveRetained(m, {H(1), H(2)}, &spec);
    uint64_t const plain = serveRetained(m, {H(11), H(12)}, nullptr);
    EXPECT_EQ(recordPriority(m, kept), 90);
    EXPECT_EQ(recordPriority(m, plain), CTXC_RETENTION_DEFAULT_PRIORITY);
    // Two more pages: the default record goes although it is the more recent.
    serveRetained(m, {H(21), H(22), H(23), H(24)}, nullptr);
    size_t count = 0;
    uint64_t lru[4] = {};
    ASSERT_EQ(ctxc_debug_manager_records_lru(m, lru, 4, &count), CTXC_OK);
    ASSERT_EQ(count, 2u);
    EXPECT_EQ(lru[1], kept);  // the priority-90 bucket comes last
    ctxc_retention_metrics_t metrics{sizeof(ctxc_retention_metrics_t)};
    ASSERT_EQ(ctxc_manager_retention_metrics(m, &metrics), CTXC_OK);
    EXPECT_EQ(metrics.evicted_records_by_priority[CTXC_RETENTION_DEFAULT_PRIORITY], 1u);
    EXPECT_EQ(metrics.evicted_records_by_priority[90], 0u);
    // The duration ends: the record falls to the default priority.
    ASSERT_EQ(ctxc_manager_set_retention_time(m, 10'000'000'000), CTXC_OK);
    EXPECT_EQ(recordPriority(m, kept), CTXC_RETENTION_DEFAULT_PRIORITY);
    ASSERT_EQ(ctxc_manager_retention_metrics(m, &metrics), CTXC_OK);
    EXPECT_EQ(metrics.retention_expiries, 1u);
    EXPECT_EQ(ctxc_manager_set_retention_time(m, 5), CTXC_E_CONTRACT);  // never backwards
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_set_retention_time"));
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApiRetention, BadSpecsAndPinsPastTheBudgetAreRefusedWithNothingChanged) {
    ctxc_manager_t* m = makeManager(4, {8, 0, 0, 0}, 8);
    ctxc_lease_t* lease = acquire(m, {H(1), H(2)}, 8);
    ASSERT_NE(lease, nullptr);
    std::string const before = observe(m);
    ctxc_retention_spec_t spec;
    ctxc_retention_spec_init(&spec);
    ctxc_retention_range_t range{0, 4, 101, 0, CTXC_RETENTION_NO_DURATION};
    spec.ranges = &range;
    spec.range_count = 1;
    EXPECT_EQ(ctxc_lease_set_retention(lease, &spec), CTXC_E_CONTRACT);
    EXPECT_NE(std::string(ctxc_last_error()).find("priority 101"), std::string::npos) << ctxc_last_error();
    range = {8, 4, 50, 0, CTXC_RETENTION_NO_DURATION};
    EXPECT_EQ(ctxc_lease_set_retention(lease, &spec), CTXC_E_CONTRACT);
    range = {0, 4, 50, 0, -7};
    EXPECT_EQ(ctxc_lease_set_retention(lease, &spec), CTXC_E_CONTRACT);
    spec.ranges = nullptr;
    EXPECT_EQ(ctxc_lease_set_retention(lease, &spec), CTXC_E_INVALID_ARGUMENT);
    spec.range_count = 0;
    spec.struct_size = 4;
    EXPECT_EQ(ctxc_lease_set_retention(lease, &spec), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_lease_set_retention(nullptr, nullptr), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(observe(m), before);
    ctxc_publish_result_t p = publishResult();
    std::vector<ctxc_hash128_t> const hashes{H(1), H(2)};
    ASSERT_EQ(ctxc_manager_publish(m, lease, hashes.data(), 2, 8, &p), CTXC_OK);
    EXPECT_EQ(recordPriority(m, p.record), CTXC_RETENTION_DEFAULT_PRIORITY);  // the refused specs never applied
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);

    EXPECT_EQ(ctxc_manager_pin_record(m, p.record, CTXC_RETENTION_NO_DURATION), CTXC_E_CONTRACT);  // budget 0
    EXPECT_EQ(ctxc_manager_set_pin_budget(m, 1.5), CTXC_E_INVALID_ARGUMENT);
    ASSERT_EQ(ctxc_manager_set_pin_budget(m, 0.25), CTXC_OK);  // 2 of 8 pages
    ASSERT_EQ(ctxc_manager_pin_record(m, p.record, CTXC_RETENTION_NO_DURATION), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(refs(m, 0), std::make_pair(1, 1));  // the pin holds like a lease
    uint64_t const other = serveRetained(m, {H(5)}, nullptr);
    EXPECT_EQ(ctxc_manager_pin_record(m, other, CTXC_RETENTION_NO_DURATION), CTXC_E_CONTRACT);
    EXPECT_NE(std::string(ctxc_last_error()).find("allows 2"), std::string::npos) << ctxc_last_error();
    EXPECT_EQ(ctxc_manager_pin_record(m, 99, CTXC_RETENTION_NO_DURATION), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_manager_unpin_record(m, other), CTXC_E_CONTRACT);
    ASSERT_EQ(ctxc_manager_unpin_record(m, p.record), CTXC_OK);
    EXPECT_EQ(refs(m, 0), std::make_pair(0, 1));
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

// ---- for a scheduler-driven adapter (vLLM): probe, acquirable count, growing publication -------------------------

namespace {

uint64_t recordCount(ctxc_manager_t const* m) {
    size_t count = 0;
    EXPECT_EQ(ctxc_manager_record_count(m, &count), CTXC_OK);
    return count;
}

}  // namespace

TEST(CApiAdapter, AProbeEqualsTheFollowingAcquireAndChangesNothing) {
    ctxc_manager_t* m = makeManager(4, {8, 0, 0, 0}, 8);
    std::vector<ctxc_hash128_t> const prompt{H(1), H(2), H(3)};
    ASSERT_NE(publishAll(m, prompt, 12), 0u);

    std::string const before = observe(m);
    ctxc_manager_metrics_t metrics{sizeof(ctxc_manager_metrics_t)};
    ASSERT_EQ(ctxc_manager_metrics(m, &metrics), CTXC_OK);
    ctxc_reuse_probe_t probe{sizeof(ctxc_reuse_probe_t)};
    std::vector<int32_t> pages(3, -7);
    ASSERT_EQ(ctxc_manager_probe_vanilla(m, prompt.data(), 3, 12, pages.data(), pages.size(), &probe), CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(probe.kind, CTXC_PLAN_FULL_INPUT_REWIND);
    EXPECT_EQ(probe.matched_token_length, 12);
    EXPECT_EQ(probe.reuse_token_length, 8);
    ASSERT_EQ(probe.page_count, 2u);
    EXPECT_EQ(pages, (std::vector<int32_t>{0, 1, -7}));
    EXPECT_EQ(observe(m), before);
    ctxc_manager_metrics_t after{sizeof(ctxc_manager_metrics_t)};
    ASSERT_EQ(ctxc_manager_metrics(m, &after), CTXC_OK);
    EXPECT_EQ(after.prefix_cache_queries, metrics.prefix_cache_queries);

    // The size query, and a short buffer: the probe is filled, no page written.
    ctxc_reuse_probe_t sized{sizeof(ctxc_reuse_probe_t)};
    EXPECT_EQ(ctxc_manager_probe_vanilla(m, prompt.data(), 3, 13, nullptr, 0, &sized), CTXC_E_BUFFER_TOO_SMALL);
    EXPECT_EQ(sized.page_count, 3u);
    EXPECT_EQ(sized.reuse_token_length, 12);
    int32_t one = -7;
    EXPECT_EQ(ctxc_manager_probe_vanilla(m, prompt.data(), 3, 13, &one, 1, &sized), CTXC_E_BUFFER_TOO_SMALL);
    EXPECT_EQ(one, -7);
    // Bad arguments: as for the acquire.
    EXPECT_EQ(ctxc_manager_probe_vanilla(m, prompt.data(), 3, 11, pages.data(), 3, &probe), CTXC_E_CONTRACT);
    EXPECT_EQ(ctxc_manager_probe_vanilla(m, nullptr, 3, 12, pages.data(), 3, &probe), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_probe_vanilla(m, prompt.data(), 3, -1, pages.data(), 3, &probe), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_probe_vanilla(m, prompt.data(), 3, 12, pages.data(), 3, nullptr), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_probe_vanilla(nullptr, prompt.data(), 3, 12, pages.data(), 3, &probe),
              CTXC_E_INVALID_HANDLE);
    EXPECT_TRUE(lastErrorFrom("ctxc_manager_probe_vanilla"));
    EXPECT_EQ(observe(m), before);

    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* lease = acquire(m, prompt, 12, &r);
    ASSERT_NE(lease, nullptr);
    EXPECT_EQ(r.plan.kind, probe.kind);
    EXPECT_EQ(r.plan.reuse_token_length, probe.reuse_token_length);
    EXPECT_EQ(r.plan.matched_token_length, probe.matched_token_length);
    std::vector<int32_t> const leased = leasePages(lease);
    EXPECT_EQ(std::vector<int32_t>(leased.begin(), leased.begin() + 2), (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApiAdapter, AcquirableCountIsFreePlusReclaimable) {
    ctxc_manager_t* m = makeManager(4, {10, 0, 0, 0}, 8);
    std::vector<ctxc_hash128_t> const cached{H(1), H(2), H(3)};
    ASSERT_NE(publishAll(m, cached, 12), 0u);
    ctxc_lease_t* live = acquire(m, {}, 8);  // 2 pages held
    ASSERT_NE(live, nullptr);
    int32_t acquirable = -1;
    ASSERT_EQ(ctxc_manager_acquirable_count(m, CTXC_RESOURCE_BASE_KV_PAGE, &acquirable), CTXC_OK);
    EXPECT_EQ(acquirable, 8);  // 5 free + 3 cached
    std::string const before = observe(m);
    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* lease = nullptr;
    ASSERT_EQ(ctxc_manager_acquire_vanilla(m, nullptr, 0, 9 * 4, CTXC_LOOKUP_BYPASS, &r, &lease), CTXC_OK);
    EXPECT_EQ(r.status, CTXC_ACQUIRE_INSUFFICIENT_CAPACITY);
    EXPECT_EQ(observe(m), before);
    ASSERT_EQ(ctxc_manager_acquire_vanilla(m, nullptr, 0, 8 * 4, CTXC_LOOKUP_BYPASS, &r, &lease), CTXC_OK);
    EXPECT_EQ(r.status, CTXC_ACQUIRE_ACQUIRED);
    ASSERT_EQ(ctxc_manager_acquirable_count(m, CTXC_RESOURCE_BASE_KV_PAGE, &acquirable), CTXC_OK);
    EXPECT_EQ(acquirable, 0);
    EXPECT_EQ(ctxc_manager_acquirable_count(m, 4, &acquirable), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_acquirable_count(m, CTXC_RESOURCE_BASE_KV_PAGE, nullptr), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    EXPECT_EQ(ctxc_lease_destroy(live), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApiAdapter, ALeaseWithGrowthKeepsOneRecord) {
    for (int32_t growth : {CTXC_PUBLICATION_GROWTH_EXTEND_LEASE_RECORD, CTXC_PUBLICATION_GROWTH_NEW_RECORD}) {
        ctxc_manager_t* m = makeManager(4, {8, 0, 0, 0}, 8);
        std::vector<ctxc_hash128_t> const prompt{H(1), H(2), H(3), H(4), H(5)};
        ctxc_lease_t* lease = acquire(m, prompt, 20);
        ASSERT_NE(lease, nullptr);
        ASSERT_EQ(ctxc_lease_set_publication_growth(lease, growth), CTXC_OK) << ctxc_last_error();
        for (int32_t blocks : {1, 3, 5}) {
            ctxc_publish_result_t p = publishResult();
            ASSERT_EQ(ctxc_manager_publish(m, lease, prompt.data(), prompt.size(), blocks * 4, &p), CTXC_OK)
                << ctxc_last_error();
            EXPECT_EQ(p.status, CTXC_PUBLISH_PUBLISHED);
            EXPECT_EQ(p.canonical_base_page_count, static_cast<size_t>(blocks));
        }
        bool const grows = growth == CTXC_PUBLICATION_GROWTH_EXTEND_LEASE_RECORD;
        EXPECT_EQ(recordCount(m), grows ? 1u : 3u);
        EXPECT_EQ(refs(m, 0), std::make_pair(1, grows ? 1 : 3));
        ctxc_manager_metrics_t metrics{sizeof(ctxc_manager_metrics_t)};
        ASSERT_EQ(ctxc_manager_metrics(m, &metrics), CTXC_OK);
        EXPECT_EQ(metrics.evicted_records, 0u);
        EXPECT_EQ(metrics.superseded_records, grows ? 2u : 0u);
        EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
        EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
    }
}

TEST(CApiAdapter, ASpecPublicationSupersedesTheHitItDominatesWithoutAnEviction) {
    ctxc_manager_t* m = makeManager(4, {8, 8, 0, 0}, 8);
    std::vector<ctxc_hash128_t> const prompt{H(1), H(2), H(3), H(4), H(5)};
    for (int32_t blocks : {3, 5}) {
        ctxc_acquire_result_t r = acquireResult();
        ctxc_lease_t* spec = nullptr;
        ASSERT_EQ(ctxc_manager_acquire_spec(m, prompt.data(), static_cast<size_t>(blocks), blocks * 4,
                                            CTXC_LOOKUP_USE_CACHE, &r, &spec),
                  CTXC_OK);
        EXPECT_EQ(r.plan.reuse_token_length, blocks == 3 ? 0 : 8);  // three blocks match, the third is replayed
        ctxc_publish_result_t p = publishResult();
        ASSERT_EQ(ctxc_manager_publish(m, spec, prompt.data(), static_cast<size_t>(blocks), blocks * 4, &p), CTXC_OK);
        EXPECT_EQ(ctxc_lease_destroy(spec), CTXC_OK);
    }
    // The five-block record holds every page the three-block one could ever bind (a hit binds one draft page
    // less than it matches): that one is superseded, and its last draft page goes back to the free list.
    EXPECT_EQ(recordCount(m), 1u);
    ctxc_manager_metrics_t metrics{sizeof(ctxc_manager_metrics_t)};
    ASSERT_EQ(ctxc_manager_metrics(m, &metrics), CTXC_OK);
    EXPECT_EQ(metrics.superseded_records, 1u);
    EXPECT_EQ(metrics.evicted_records, 0u);
    EXPECT_EQ(metrics.reclaimed_draft_kv_pages, 0u);
    int32_t free = 0;
    EXPECT_EQ(ctxc_manager_pool_counts(m, CTXC_RESOURCE_DRAFT_KV_PAGE, &free, nullptr), CTXC_OK);
    EXPECT_EQ(free, 3);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST(CApiAdapter, GrowthIsForVanillaLeasesAndKnownValues) {
    ctxc_manager_t* m = makeManager(4, {8, 8, 0, 0}, 8);
    std::vector<ctxc_hash128_t> const prompt{H(1), H(2)};
    ctxc_acquire_result_t r = acquireResult();
    ctxc_lease_t* spec = nullptr;
    ASSERT_EQ(ctxc_manager_acquire_spec(m, prompt.data(), 2, 9, CTXC_LOOKUP_USE_CACHE, &r, &spec), CTXC_OK);
    EXPECT_EQ(ctxc_lease_set_publication_growth(spec, CTXC_PUBLICATION_GROWTH_EXTEND_LEASE_RECORD), CTXC_E_CONTRACT);
    EXPECT_TRUE(lastErrorFrom("ctxc_lease_set_publication_growth"));
    EXPECT_EQ(ctxc_lease_set_publication_growth(spec, CTXC_PUBLICATION_GROWTH_NEW_RECORD), CTXC_OK);
    EXPECT_EQ(ctxc_lease_set_publication_growth(spec, 2), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_lease_set_publication_growth(nullptr, 0), CTXC_E_INVALID_HANDLE);
    // The refused setting never applied: the spec lease publishes nested records as before.
    ctxc_publish_result_t p = publishResult();
    ASSERT_EQ(ctxc_manager_publish(m, spec, prompt.data(), 2, 4, &p), CTXC_OK);
    ASSERT_EQ(ctxc_manager_publish(m, spec, prompt.data(), 2, 8, &p), CTXC_OK);
    EXPECT_EQ(recordCount(m), 2u);
    EXPECT_EQ(ctxc_lease_destroy(spec), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}
