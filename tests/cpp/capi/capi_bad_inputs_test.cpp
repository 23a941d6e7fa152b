// The bad-input catalogue at the C ABI, as a C runtime sees it: this file links only the shared library and
// includes only "ctxcache.h". One test per bad input the reliability issue names (the manager cases that
// capi_tests.cpp already covers are listed at the end, with the few it lacked), each asserting the exact status,
// that ctxc_last_error() names the failing function and the offending argument, that nothing observable changed
// (every pool, page table, length, resident row, snapshot region and buffer byte), and that nothing leaked (the
// backend's allocated bytes go back to zero once the objects are destroyed; manager pools back to capacity).
// The last section holds the regressions device_fuzz found.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "capi_test_support.h"
#include "ctxcache.h"
#include "device_creates.h"
#include "support/address_space_limit.h"

namespace {

ctxc_kv_pool_t* makePool(ctxc_device_backend_t* b, int32_t numPages, int32_t pageSize,
                         std::vector<ctxc_kv_layer_shape_t> const& layers, int32_t dtype = CTXC_DTYPE_FP16) {
    ctxc_kv_pool_options_t o;
    ctxc_kv_pool_options_init(&o);
    o.num_pages = numPages;
    o.page_size = pageSize;
    o.dtype = dtype;
    o.layers = layers.data();
    o.layer_count = layers.size();
    ctxc_kv_pool_t* pool = nullptr;
    EXPECT_EQ(ctxc_kv_pool_create(b, &o, &pool), CTXC_OK) << ctxc_last_error();
    return pool;
}

size_t sizeOf(ctxc_status_t (*query)(const ctxc_device_backend_t*, size_t*), ctxc_device_backend_t const* b) {
    size_t n = 0;
    EXPECT_EQ(query(b, &n), CTXC_OK);
    return n;
}

// A CPU backend with one object of each kind, every byte patterned, so that "nothing changed" means something:
//   pool     4 pages of 4 tokens, layers (1 head x 2) and (2 x 2), fp16;
//   table    3 slots x 3 pages over 4 pages, dense: slot 0 -> [1, 2], slot 1 -> [3]; uploaded;
//   lengths  at most 4, active [5, 3, 7];
//   state    3 slots, 1 recurrent layer (1 x 2 x 2 fp32), conv 2 x 2 fp16, hidden 4;
//   storage  that state and pool, 2 recurrent slots (with the hidden row) and 2 partial-KV slots;
//   buffer   64 bytes.
class Device : public ::testing::Test {
protected:
    void SetUp() override {
        backend = cpuBackend();
        pool = makePool(backend, 4, 4, {{1, 2}, {2, 2}});
        for (int32_t layer = 0; layer < 2; ++layer) {
            size_t pageBytes = 0;
            ASSERT_EQ(ctxc_kv_pool_page_bytes(pool, layer, &pageBytes), CTXC_OK);
            std::vector<uint8_t> const bytes = pattern(8 * pageBytes, static_cast<unsigned>(layer) + 1);
            ASSERT_EQ(ctxc_kv_pool_write_pages(pool, layer, 0, 8, bytes.data(), bytes.size()), CTXC_OK);
        }
        ASSERT_EQ(createPageTable(backend, 3, 3, 4, CTXC_PAGE_TABLE_DENSE, &table), CTXC_OK);
        int32_t const row0[] = {1, 2}, row1[] = {3};
        ASSERT_EQ(ctxc_kv_page_table_set_row(table, 0, row0, 2), CTXC_OK);
        ASSERT_EQ(ctxc_kv_page_table_set_row(table, 1, row1, 1), CTXC_OK);
        ASSERT_EQ(ctxc_kv_page_table_upload(table, nullptr), CTXC_OK);
        ASSERT_EQ(createLengths(backend, 4, &lengths), CTXC_OK);
        int32_t const active[] = {5, 3, 7};
        ASSERT_EQ(ctxc_kv_lengths_set(lengths, active, 3), CTXC_OK);

        ctxc_resident_state_options_t so;
        ctxc_resident_state_options_init(&so);
        so.max_batch = 3;
        so.num_layers = 1;
        so.recurrent_heads = 1;
        so.recurrent_head_dim = 2;
        so.state_size = 2;
        so.conv_dim = 2;
        so.conv_kernel = 2;
        so.hidden_size = 4;
        ASSERT_EQ(ctxc_resident_state_create(backend, &so, &state), CTXC_OK);
        for (int32_t part : {CTXC_STATE_RECURRENT, CTXC_STATE_CONV, CTXC_STATE_BOUNDARY_HIDDEN})
            for (int32_t slot = 0; slot < 3; ++slot) {
                size_t bytes = 0;
                ASSERT_EQ(ctxc_resident_state_row_bytes(state, part, &bytes), CTXC_OK);
                std::vector<uint8_t> const row = pattern(bytes, static_cast<unsigned>(10 * part + slot));
                ASSERT_EQ(ctxc_resident_state_write_row(state, part, 0, slot, row.data(), row.size()), CTXC_OK);
            }
        ctxc_snapshot_storage_options_t sto;
        ctxc_snapshot_storage_options_init(&sto);
        sto.boundary_hidden = 1;
        sto.recurrent_budget_bytes = 2 * (16 + 8 + 8);
        sto.partial_kv_budget_bytes = 2 * (2 * 16 + 2 * 32);
        ASSERT_EQ(ctxc_snapshot_storage_create(backend, state, pool, nullptr, &sto, &storage), CTXC_OK);
        ctxc_snapshot_layout_t layout{sizeof(ctxc_snapshot_layout_t)};
        ASSERT_EQ(ctxc_snapshot_storage_layout(storage, &layout), CTXC_OK);
        ASSERT_EQ(layout.recurrent_slots, 2);
        ASSERT_EQ(layout.partial_kv_slots, 2);
        ctxc_snapshot_transfer_t t;
        ctxc_snapshot_transfer_init(&t);
        t.batch_slot = 2;
        t.recurrent_slot = 1;
        t.partial_kv_slot = 0;
        t.base_page = 3;
        t.valid_tokens = 3;
        ASSERT_EQ(ctxc_snapshot_storage_capture(storage, &t), CTXC_OK);

        ASSERT_EQ(createBuffer(backend, 64, &buffer), CTXC_OK);
        std::vector<uint8_t> const bytes = pattern(64, 9);
        ASSERT_EQ(ctxc_device_buffer_write(buffer, 0, bytes.data(), bytes.size()), CTXC_OK);
        footprint = allocated();
        before = observe();
    }

    void TearDown() override {
        EXPECT_EQ(observe(), before) << "a refused call changed something";
        EXPECT_EQ(allocated(), footprint) << "a refused call allocated or freed device memory";
        for (ctxc_status_t s :
             {ctxc_snapshot_storage_destroy(storage), ctxc_resident_state_destroy(state), ctxc_kv_pool_destroy(pool),
              ctxc_kv_page_table_destroy(table), ctxc_kv_lengths_destroy(lengths), ctxc_device_buffer_destroy(buffer)})
            EXPECT_EQ(s, CTXC_OK);
        EXPECT_EQ(allocated(), 0u) << "device memory leaked";
        EXPECT_EQ(ctxc_device_backend_destroy(backend), CTXC_OK);
    }

    size_t allocated() const { return sizeOf(ctxc_device_backend_allocated_bytes, backend); }

    // Everything observable about the objects, as one comparable string of bytes.
    std::string observe() const {
        std::string out;
        auto add = [&](void const* p, size_t n) { out.append(static_cast<char const*>(p), n).push_back('|'); };
        for (int32_t layer = 0; layer < 2; ++layer) {
            size_t pageBytes = 0;
            EXPECT_EQ(ctxc_kv_pool_page_bytes(pool, layer, &pageBytes), CTXC_OK);
            std::vector<uint8_t> bytes(8 * pageBytes);
            EXPECT_EQ(ctxc_kv_pool_read_pages(pool, layer, 0, 8, bytes.data(), bytes.size()), CTXC_OK);
            add(bytes.data(), bytes.size());
        }
        std::vector<int32_t> entries(18);
        size_t count = 0;
        EXPECT_EQ(ctxc_kv_page_table_read_host(table, entries.data(), entries.size(), &count), CTXC_OK);
        add(entries.data(), 4 * count);
        EXPECT_EQ(ctxc_debug_kv_page_table_read_device(table, entries.data(), entries.size(), &count), CTXC_OK);
        add(entries.data(), 4 * count);
        int32_t dirty = -1;
        EXPECT_EQ(ctxc_debug_kv_page_table_is_dirty(table, &dirty), CTXC_OK);
        add(&dirty, sizeof dirty);
        std::vector<int32_t> values(4);
        EXPECT_EQ(ctxc_kv_lengths_read(lengths, values.data(), values.size(), &count), CTXC_OK);
        add(values.data(), 4 * count);
        for (int32_t part : {CTXC_STATE_RECURRENT, CTXC_STATE_CONV, CTXC_STATE_BOUNDARY_HIDDEN})
            for (int32_t slot = 0; slot < 3; ++slot) {
                size_t bytes = 0;
                EXPECT_EQ(ctxc_resident_state_row_bytes(state, part, &bytes), CTXC_OK);
                std::vector<uint8_t> row(bytes);
                EXPECT_EQ(ctxc_resident_state_read_row(state, part, 0, slot, row.data(), row.size()), CTXC_OK);
                add(row.data(), row.size());
            }
        struct Region {
            int32_t part, layer, slots;
        };
        for (Region r : {Region{CTXC_STATE_RECURRENT, 0, 2}, Region{CTXC_STATE_CONV, 0, 2},
                         Region{CTXC_STATE_BOUNDARY_HIDDEN, 0, 2}, Region{CTXC_STATE_PARTIAL_KV, 0, 2},
                         Region{CTXC_STATE_PARTIAL_KV, 1, 2}})
            for (int32_t slot = 0; slot < r.slots; ++slot) {
                size_t bytes = 0;
                EXPECT_EQ(ctxc_snapshot_storage_region_bytes(storage, r.part, r.layer, &bytes), CTXC_OK);
                std::vector<uint8_t> region(bytes);
                EXPECT_EQ(ctxc_snapshot_storage_read_region(storage, r.part, r.layer, slot, region.data(), bytes),
                          CTXC_OK);
                add(region.data(), region.size());
            }
        std::vector<uint8_t> bytes(64);
        EXPECT_EQ(ctxc_device_buffer_read(buffer, 0, bytes.data(), bytes.size()), CTXC_OK);
        add(bytes.data(), bytes.size());
        return out;
    }

    ctxc_device_backend_t* backend = nullptr;
    ctxc_kv_pool_t* pool = nullptr;
    ctxc_kv_page_table_t* table = nullptr;
    ctxc_kv_lengths_t* lengths = nullptr;
    ctxc_resident_state_t* state = nullptr;
    ctxc_snapshot_storage_t* storage = nullptr;
    ctxc_device_buffer_t* buffer = nullptr;
    size_t footprint = 0;
    std::string before;
};

ctxc_kv_gather_request_t gatherRequest(int32_t layer, int32_t batch, int32_t seqLen) {
    ctxc_kv_gather_request_t r;
    ctxc_kv_gather_request_init(&r);
    r.layer = layer;
    r.batch = batch;
    r.seq_len = seqLen;
    return r;
}

}  // namespace

// ---- handles ----------------------------------------------------------------------------------------------------

TEST_F(Device, NullHandlesAreInvalidHandles) {
    int32_t kind = 0;
    EXPECT_TRUE(refused(ctxc_device_backend_kind(nullptr, &kind), CTXC_E_INVALID_HANDLE, "ctxc_device_backend_kind",
                        "backend is NULL"));
    ctxc_kv_pool_options_t po;
    ctxc_kv_pool_options_init(&po);
    ctxc_kv_pool_t* newPool = pool;
    EXPECT_TRUE(refused(ctxc_kv_pool_create(nullptr, &po, &newPool), CTXC_E_INVALID_HANDLE, "ctxc_kv_pool_create",
                        "backend is NULL"));
    EXPECT_EQ(newPool, nullptr);
    uint8_t byte = 0;
    EXPECT_TRUE(refused(ctxc_device_buffer_write(nullptr, 0, &byte, 1), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_buffer_write", "buffer is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_pool_write_pages(nullptr, 0, 0, 0, nullptr, 0), CTXC_E_INVALID_HANDLE,
                        "ctxc_kv_pool_write_pages", "pool is NULL"));
    int32_t const page = 0;
    EXPECT_TRUE(refused(ctxc_kv_page_table_set_row(nullptr, 0, &page, 1), CTXC_E_INVALID_HANDLE,
                        "ctxc_kv_page_table_set_row", "table is NULL"));
    EXPECT_TRUE(
        refused(ctxc_kv_lengths_add(nullptr, 1), CTXC_E_INVALID_HANDLE, "ctxc_kv_lengths_add", "lengths is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_add_lengths(lengths, nullptr), CTXC_E_INVALID_HANDLE,
                        "ctxc_kv_lengths_add_lengths", "increments is NULL"));
    EXPECT_TRUE(refused(ctxc_resident_state_zero_slot(nullptr, 0), CTXC_E_INVALID_HANDLE,
                        "ctxc_resident_state_zero_slot", "state is NULL"));
    ctxc_snapshot_transfer_t t;
    ctxc_snapshot_transfer_init(&t);
    EXPECT_TRUE(refused(ctxc_snapshot_storage_restore(nullptr, &t), CTXC_E_INVALID_HANDLE,
                        "ctxc_snapshot_storage_restore", "storage is NULL"));
    int32_t const map[] = {0};
    EXPECT_TRUE(refused(ctxc_device_compact_rows(nullptr, 0, 4, 1, map, 1, 1), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_compact_rows", "buffer is NULL"));
    ctxc_kv_gather_request_t const r = gatherRequest(0, 1, 4);
    EXPECT_TRUE(refused(ctxc_kv_gather(pool, nullptr, nullptr, &r, buffer, buffer), CTXC_E_INVALID_HANDLE,
                        "ctxc_kv_gather", "table is NULL"));
    // Destroying NULL is the documented no-op.
    EXPECT_EQ(ctxc_kv_pool_destroy(nullptr), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(nullptr), CTXC_OK);
}

TEST_F(Device, DanglingHandlesAreInvalidHandlesAndNeverAliasANewObject) {
    ctxc_kv_pool_t* gonePool = makePool(backend, 2, 2, {{1, 1}});
    ctxc_kv_page_table_t* goneTable = nullptr;
    ASSERT_EQ(createPageTable(backend, 1, 1, 2, CTXC_PAGE_TABLE_DENSE, &goneTable), CTXC_OK);
    ctxc_kv_lengths_t* goneLengths = nullptr;
    ASSERT_EQ(createLengths(backend, 2, &goneLengths), CTXC_OK);
    ctxc_device_buffer_t* goneBuffer = nullptr;
    ASSERT_EQ(createBuffer(backend, 8, &goneBuffer), CTXC_OK);
    ctxc_device_backend_t* goneBackend = cpuBackend();
    ASSERT_EQ(ctxc_kv_pool_destroy(gonePool), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_destroy(goneTable), CTXC_OK);
    ASSERT_EQ(ctxc_kv_lengths_destroy(goneLengths), CTXC_OK);
    ASSERT_EQ(ctxc_device_buffer_destroy(goneBuffer), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_destroy(goneBackend), CTXC_OK);

    ctxc_kv_pool_t* fresh = makePool(backend, 2, 2, {{1, 1}});  // may reuse the slot, with a new generation
    EXPECT_NE(fresh, gonePool);
    size_t bytes = 0;
    EXPECT_TRUE(refused(ctxc_kv_pool_page_bytes(gonePool, 0, &bytes), CTXC_E_INVALID_HANDLE, "ctxc_kv_pool_page_bytes",
                        "pool is not a live handle"));
    EXPECT_EQ(ctxc_kv_pool_page_bytes(fresh, 0, &bytes), CTXC_OK);
    EXPECT_EQ(bytes, 4u);
    EXPECT_TRUE(refused(ctxc_kv_page_table_clear_row(goneTable, 0), CTXC_E_INVALID_HANDLE,
                        "ctxc_kv_page_table_clear_row", "table is not a live handle"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_add(goneLengths, 1), CTXC_E_INVALID_HANDLE, "ctxc_kv_lengths_add",
                        "lengths is not a live handle"));
    uint8_t byte = 0;
    EXPECT_TRUE(refused(ctxc_device_buffer_read(goneBuffer, 0, &byte, 1), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_buffer_read", "buffer is not a live handle"));
    ctxc_device_buffer_t* none = buffer;
    EXPECT_TRUE(refused(createBuffer(goneBackend, 8, &none), CTXC_E_INVALID_HANDLE, "ctxc_device_buffer_create",
                        "backend is not a live handle"));
    EXPECT_EQ(none, nullptr);
    ctxc_kv_gather_request_t const r = gatherRequest(0, 1, 4);
    EXPECT_TRUE(refused(ctxc_kv_gather(gonePool, table, nullptr, &r, buffer, buffer), CTXC_E_INVALID_HANDLE,
                        "ctxc_kv_gather", "pool is not a live handle"));
    EXPECT_EQ(ctxc_kv_pool_destroy(fresh), CTXC_OK);
}

TEST_F(Device, DoubleDestroyIsAnInvalidHandle) {
    ctxc_kv_pool_t* p = makePool(backend, 2, 2, {{1, 1}});
    ctxc_device_buffer_t* b = nullptr;
    ASSERT_EQ(createBuffer(backend, 8, &b), CTXC_OK);
    ctxc_kv_page_table_t* t = nullptr;
    ASSERT_EQ(createPageTable(backend, 1, 1, 2, CTXC_PAGE_TABLE_DENSE, &t), CTXC_OK);
    ctxc_device_backend_t* other = cpuBackend();
    EXPECT_EQ(ctxc_kv_pool_destroy(p), CTXC_OK);
    EXPECT_EQ(ctxc_device_buffer_destroy(b), CTXC_OK);
    EXPECT_EQ(ctxc_kv_page_table_destroy(t), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(other), CTXC_OK);
    EXPECT_TRUE(
        refused(ctxc_kv_pool_destroy(p), CTXC_E_INVALID_HANDLE, "ctxc_kv_pool_destroy", "pool is not a live handle"));
    EXPECT_TRUE(refused(ctxc_device_buffer_destroy(b), CTXC_E_INVALID_HANDLE, "ctxc_device_buffer_destroy",
                        "buffer is not a live handle"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_destroy(t), CTXC_E_INVALID_HANDLE, "ctxc_kv_page_table_destroy",
                        "table is not a live handle"));
    EXPECT_TRUE(refused(ctxc_device_backend_destroy(other), CTXC_E_INVALID_HANDLE, "ctxc_device_backend_destroy",
                        "backend is not a live handle"));
}

TEST_F(Device, WronglyTypedHandlesAreInvalidHandles) {
    // Every handle carries its type: a pool is not a table, a table is not a backend, a manager is not a pool.
    EXPECT_TRUE(refused(ctxc_kv_page_table_clear_row(reinterpret_cast<ctxc_kv_page_table_t*>(pool), 0),
                        CTXC_E_INVALID_HANDLE, "ctxc_kv_page_table_clear_row",
                        "table is not a live handle of its type"));
    int32_t kind = 0;
    EXPECT_TRUE(refused(ctxc_device_backend_kind(reinterpret_cast<ctxc_device_backend_t*>(table), &kind),
                        CTXC_E_INVALID_HANDLE, "ctxc_device_backend_kind", "backend is not a live handle"));
    ctxc_manager_options_t mo;
    ctxc_manager_options_init(&mo);
    mo.page_size = 4;
    mo.capacities = {2, 0, 0, 0};
    ctxc_manager_t* m = nullptr;
    ASSERT_EQ(ctxc_manager_create(&mo, &m), CTXC_OK);
    size_t bytes = 0;
    EXPECT_TRUE(refused(ctxc_kv_pool_footprint_bytes(reinterpret_cast<ctxc_kv_pool_t*>(m), &bytes),
                        CTXC_E_INVALID_HANDLE, "ctxc_kv_pool_footprint_bytes", "pool is not a live handle"));
    int32_t pageSize = 0;
    EXPECT_TRUE(refused(ctxc_manager_page_size(reinterpret_cast<ctxc_manager_t*>(pool), &pageSize),
                        CTXC_E_INVALID_HANDLE, "ctxc_manager_page_size", "manager"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_add_lengths(lengths, reinterpret_cast<ctxc_kv_lengths_t*>(buffer)),
                        CTXC_E_INVALID_HANDLE, "ctxc_kv_lengths_add_lengths", "increments is not a live handle"));
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

TEST_F(Device, ObjectsOutliveTheirBackendHandle) {
    // The device analogue of "a lease used after its manager died": an object keeps its backend alive, so using
    // it after the backend handle is gone is valid; only the backend handle itself is dead.
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_pool_t* p = makePool(b, 2, 2, {{1, 1}});
    ASSERT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
    std::vector<uint8_t> const page = pattern(4, 3);
    EXPECT_EQ(ctxc_kv_pool_write_pages(p, 0, 1, 1, page.data(), page.size()), CTXC_OK);
    std::vector<uint8_t> back(4);
    EXPECT_EQ(ctxc_kv_pool_read_pages(p, 0, 1, 1, back.data(), back.size()), CTXC_OK);
    EXPECT_EQ(back, page);
    size_t bytes = 0;
    EXPECT_TRUE(refused(ctxc_device_backend_allocated_bytes(b, &bytes), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_backend_allocated_bytes", "backend is not a live handle"));
    EXPECT_EQ(ctxc_kv_pool_destroy(p), CTXC_OK);  // the last owner: the backend goes with it (LSan checks)
}

// ---- counts -------------------------------------------------------------------------------------------------------

TEST_F(Device, NegativeCountsAreRefused) {
    std::vector<uint8_t> const bytes(32);
    EXPECT_TRUE(refused(ctxc_kv_pool_write_pages(pool, 0, 0, -1, bytes.data(), 0), CTXC_E_CONTRACT,
                        "ctxc_kv_pool_write_pages", "pages [0, +-1)"));
    int32_t const map[] = {0, 1};
    EXPECT_TRUE(refused(ctxc_kv_page_table_compact_rows(table, map, -1, 0), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_page_table_compact_rows", "old_batch is negative"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_compact(lengths, map, -2, 0), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_lengths_compact", "old_batch is negative"));
    EXPECT_TRUE(refused(ctxc_resident_state_compact(state, map, -1, 0), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_resident_state_compact", "old_batch is negative"));
    EXPECT_TRUE(refused(ctxc_device_compact_rows(buffer, 0, 4, -1, map, 0, 0), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_compact_rows", "rows is negative"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_compact_rows(table, map, 2, -1), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_compact_rows", "newBatch -1"));
    int32_t const negative[] = {4, -1};
    EXPECT_TRUE(refused(ctxc_kv_lengths_set(lengths, negative, 2), CTXC_E_CONTRACT, "ctxc_kv_lengths_set",
                        "lengths[1] is negative (-1)"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_set_entry(table, 0, -1, 2), CTXC_E_CONTRACT, "ctxc_kv_page_table_set_entry",
                        "logical page -1"));
    EXPECT_TRUE(refused(ctxc_device_rebase_execution_rows(buffer, 0, 4, map, 2, 2, -3), CTXC_E_CONTRACT,
                        "ctxc_device_rebase_execution_rows", "rowsPerSequence must be positive (got -3)"));
    ctxc_kv_gather_request_t const r = gatherRequest(0, -1, 4);
    size_t out = 0;
    EXPECT_TRUE(refused(ctxc_kv_gather_output_bytes(pool, &r, &out), CTXC_E_CONTRACT, "ctxc_kv_gather_output_bytes",
                        "batch and seqLen must be >= 0"));
}

TEST_F(Device, HugeCountsAreRefused) {
    int32_t const pages[] = {0, 1, 2, 3};
    EXPECT_TRUE(refused(ctxc_kv_page_table_set_row(table, 0, pages, SIZE_MAX), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_page_table_set_row", "k_pages count 18446744073709551615 exceeds INT32_MAX"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_set_row(table, 0, pages, 4), CTXC_E_CONTRACT, "ctxc_kv_page_table_set_row",
                        "count 4 is outside [0, 3]"));
    int32_t const five[] = {1, 1, 1, 1, 1};
    EXPECT_TRUE(refused(ctxc_kv_lengths_set(lengths, five, 5), CTXC_E_CONTRACT, "ctxc_kv_lengths_set",
                        "count 5 is outside [0, 4]"));
    std::vector<uint8_t> bytes(64);
    EXPECT_TRUE(refused(ctxc_kv_pool_write_pages(pool, 0, 0, INT32_MAX, bytes.data(), bytes.size()), CTXC_E_CONTRACT,
                        "ctxc_kv_pool_write_pages", "pages [0, +2147483647) are outside [0, 8)"));
    EXPECT_TRUE(refused(ctxc_device_buffer_read(buffer, 8, bytes.data(), SIZE_MAX), CTXC_E_CONTRACT,
                        "ctxc_device_buffer_read", "is outside the buffer's 64 bytes"));
    int32_t const map[] = {0};
    EXPECT_TRUE(refused(ctxc_device_compact_rows(buffer, 0, SIZE_MAX, INT32_MAX, map, 1, 1), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_compact_rows", "rows * row_bytes overflows"));
    EXPECT_TRUE(refused(ctxc_device_rebase_execution_rows(buffer, 0, SIZE_MAX, map, 1, 1, 1), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_rebase_execution_rows", "count overflows"));
    ctxc_hash128_t h;
    EXPECT_TRUE(refused(ctxc_device_hash_chunked(buffer, SIZE_MAX, 1, 1, &h), CTXC_E_CONTRACT,
                        "ctxc_device_hash_chunked", "outside the buffer's 64 bytes"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_compact_rows(table, map, INT32_MAX, 0), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_compact_rows", "oldBatch 2147483647 is outside [0, 3]"));
    ctxc_kv_gather_request_t const r = gatherRequest(0, 3, INT32_MAX);
    ctxc_device_buffer_t* k = nullptr;
    ASSERT_EQ(createBuffer(backend, 64, &k), CTXC_OK);
    EXPECT_TRUE(refused(ctxc_kv_gather(pool, table, nullptr, &r, k, buffer), CTXC_E_CONTRACT, "ctxc_kv_gather",
                        "outputs hold 64 bytes"));
    EXPECT_EQ(ctxc_device_buffer_destroy(k), CTXC_OK);
}

// ---- dense K/V over caller memory -----------------------------------------------------------------------------

TEST_F(Device, DenseKvScatterAndGatherIntoRefuseBadPointersSizesAndUnmappedPagesWritingNothing) {
    auto layer0 = [&] {
        std::vector<uint8_t> bytes(8 * 16);
        EXPECT_EQ(ctxc_kv_pool_read_pages(pool, 0, 0, 8, bytes.data(), bytes.size()), CTXC_OK);
        return bytes;
    };
    std::vector<uint8_t> const original = layer0();
    ctxc_kv_scatter_request_t r;
    ctxc_kv_scatter_request_init(&r);
    EXPECT_EQ(r.layout, CTXC_KV_LAYOUT_TOKEN_MAJOR);
    r.batch = 1;
    r.seq_len = 3;  // layer 0: 1 head x 2 dims of fp16, 4 bytes a token
    size_t bytes = 0;
    ASSERT_EQ(ctxc_kv_scatter_input_bytes(pool, &r, &bytes), CTXC_OK);
    ASSERT_EQ(bytes, 12u);
    alignas(16) uint8_t k[32] = {}, v[32] = {};
    for (int i = 0; i < 32; ++i) k[i] = static_cast<uint8_t>(i + 100), v[i] = static_cast<uint8_t>(i + 200);
    EXPECT_TRUE(refused(ctxc_kv_scatter(nullptr, table, &r, k, v, 12), CTXC_E_INVALID_HANDLE, "ctxc_kv_scatter",
                        "pool is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_scatter(pool, table, &r, nullptr, v, 12), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_scatter",
                        "k is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_scatter(pool, table, &r, k + 1, v, 12), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_scatter",
                        "k is not aligned to its 2-byte elements"));
    EXPECT_TRUE(refused(ctxc_kv_scatter(pool, table, &r, k, v, 8), CTXC_E_CONTRACT, "ctxc_kv_scatter",
                        "the inputs hold 8 bytes each, 12 expected"));
    r.first_position = 6;  // positions 6-8: slot 0 maps only logical pages 0 and 1
    EXPECT_TRUE(refused(ctxc_kv_scatter(pool, table, &r, k, v, 12), CTXC_E_CONTRACT, "ctxc_kv_scatter",
                        "slot 0 has no page mapped at logical page 2"));
    r.first_position = 0;
    r.layout = 5;
    EXPECT_TRUE(refused(ctxc_kv_scatter(pool, table, &r, k, v, 12), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_scatter",
                        "request->layout 5 is not a CTXC_KV_LAYOUT_* value"));
    r.layout = CTXC_KV_LAYOUT_HEAD_MAJOR;
    r.struct_size = 4;
    EXPECT_TRUE(
        refused(ctxc_kv_scatter(pool, table, &r, k, v, 12), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_scatter", "struct_size"));
    EXPECT_EQ(layer0(), original);  // no refused call wrote a byte

    r.struct_size = sizeof r;
    r.first_position = 3;  // positions 3-5: the last token of K page 1, then the first two of K page 2
    ASSERT_EQ(ctxc_kv_scatter(pool, table, &r, k, v, 12), CTXC_OK);
    std::vector<uint8_t> const after = layer0();
    EXPECT_TRUE(std::equal(k, k + 4, after.begin() + 1 * 16 + 12));      // K page 1, token 3
    EXPECT_TRUE(std::equal(k + 4, k + 12, after.begin() + 2 * 16));      // K page 2, tokens 0-1
    EXPECT_TRUE(std::equal(v + 4, v + 12, after.begin() + 6 * 16));      // its V page (2 + 4)

    ctxc_kv_gather_request_t g;
    ctxc_kv_gather_request_init(&g);
    g.batch = 1;
    g.seq_len = 6;
    alignas(16) uint8_t ko[24], vo[24];
    EXPECT_TRUE(refused(ctxc_kv_gather_into(pool, table, nullptr, &g, CTXC_KV_LAYOUT_HEAD_MAJOR, ko, vo, 20),
                        CTXC_E_CONTRACT, "ctxc_kv_gather_into", "the outputs hold 20 bytes each, 24 expected"));
    EXPECT_TRUE(refused(ctxc_kv_gather_into(pool, table, nullptr, &g, CTXC_KV_LAYOUT_HEAD_MAJOR, ko, ko, 24),
                        CTXC_E_INVALID_ARGUMENT, "ctxc_kv_gather_into", "the same memory"));
    EXPECT_TRUE(refused(ctxc_kv_gather_into(pool, table, nullptr, &g, 2, ko, vo, 24), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_gather_into", "layout 2"));
    ASSERT_EQ(ctxc_kv_gather_into(pool, table, nullptr, &g, CTXC_KV_LAYOUT_HEAD_MAJOR, ko, vo, 24), CTXC_OK);
    EXPECT_TRUE(std::equal(k, k + 12, ko + 12));  // positions 3-5 are what was scattered (one head: same layout)
    EXPECT_TRUE(std::equal(v, v + 12, vo + 12));
    EXPECT_TRUE(
        std::equal(original.begin() + 16, original.begin() + 16 + 12, ko));  // positions 0-2: K page 1 as it was
    // The fixture checks that nothing changed: put the pages the successful scatter wrote back.
    ASSERT_EQ(ctxc_kv_pool_write_pages(pool, 0, 0, 8, original.data(), original.size()), CTXC_OK);
}

// ---- compaction maps ------------------------------------------------------------------------------------------

TEST_F(Device, CompactionMapThatReordersIsRefused) {
    int32_t const swap[] = {1, 0, -1};  // survivors must keep their order
    EXPECT_TRUE(refused(ctxc_device_compact_rows(buffer, 0, 8, 4, swap, 3, 2), CTXC_E_CONTRACT,
                        "ctxc_device_compact_rows", "oldToNew[0] = 1 reorders"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_compact(lengths, swap, 3, 2), CTXC_E_CONTRACT, "ctxc_kv_lengths_compact",
                        "oldToNew[0] = 1 reorders"));
    EXPECT_TRUE(refused(ctxc_resident_state_compact(state, swap, 3, 2), CTXC_E_CONTRACT, "ctxc_resident_state_compact",
                        "oldToNew[0] = 1 reorders"));
    EXPECT_TRUE(refused(ctxc_device_rebase_execution_rows(buffer, 0, 4, swap, 3, 2, 1), CTXC_E_CONTRACT,
                        "ctxc_device_rebase_execution_rows", "oldToNew[0] = 1 reorders"));
    int32_t const gap[] = {0, -1, 2};  // survivors fill [0, newBatch)
    EXPECT_TRUE(refused(ctxc_device_compact_rows(buffer, 0, 8, 4, gap, 3, 3), CTXC_E_CONTRACT,
                        "ctxc_device_compact_rows", "oldToNew[2] = 2 reorders or leaves a gap"));
}

TEST_F(Device, PageTableRowsMayBePermutedButNotDuplicated) {
    // Rows of the host table move without moving KV, so any order is legal there (the contrast to the above).
    int32_t const swap[] = {1, 0, -1};
    ASSERT_EQ(ctxc_kv_page_table_compact_rows(table, swap, 3, 2), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_kv_page_table_check_invariants(table), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_compact_rows(table, swap, 3, 2), CTXC_OK);  // and back
    ASSERT_EQ(ctxc_kv_page_table_upload(table, nullptr), CTXC_OK);
    int32_t const twice[] = {0, 0, -1};
    EXPECT_TRUE(refused(ctxc_kv_page_table_compact_rows(table, twice, 3, 1), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_compact_rows",
                        "overlapping map: oldToNew[1] = 0 repeats the destination of row 0"));
}

TEST_F(Device, CompactionMapThatDuplicatesIsRefused) {
    int32_t const twice[] = {0, 0, -1};
    EXPECT_TRUE(refused(ctxc_device_compact_rows(buffer, 0, 8, 4, twice, 3, 1), CTXC_E_CONTRACT,
                        "ctxc_device_compact_rows", "overlapping map: oldToNew[1] = 0"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_compact(lengths, twice, 3, 1), CTXC_E_CONTRACT, "ctxc_kv_lengths_compact",
                        "overlapping map: oldToNew[1] = 0"));
    EXPECT_TRUE(refused(ctxc_resident_state_compact(state, twice, 3, 1), CTXC_E_CONTRACT, "ctxc_resident_state_compact",
                        "overlapping map: oldToNew[1] = 0"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_compact_rows(table, twice, 3, 1), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_compact_rows", "oldToNew[1] = 0 repeats"));
    int32_t const outside[] = {0, 5, -1};
    EXPECT_TRUE(refused(ctxc_kv_lengths_compact(lengths, outside, 3, 2), CTXC_E_CONTRACT, "ctxc_kv_lengths_compact",
                        "oldToNew[1] = 5 is outside [-1, 2)"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_compact(lengths, nullptr, 3, 2), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_lengths_compact", "old_to_new is NULL"));
}

// ---- page ids ------------------------------------------------------------------------------------------------------

TEST_F(Device, PageIdsOutOfRangeAreRefused) {
    int32_t const beyond[] = {1, 4};  // the pool and table have pages [0, 4)
    EXPECT_TRUE(refused(ctxc_kv_page_table_set_row(table, 2, beyond, 2), CTXC_E_CONTRACT, "ctxc_kv_page_table_set_row",
                        "page id 4 is outside [0, 4)"));
    int32_t const hole[] = {-1};  // a hole is not a page in dense mode
    EXPECT_TRUE(refused(ctxc_kv_page_table_set_row(table, 2, hole, 1), CTXC_E_CONTRACT, "ctxc_kv_page_table_set_row",
                        "page id -1"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_set_entry(table, 1, 1, INT32_MIN), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_set_entry", "page id -2147483648"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_clear_row(table, 3), CTXC_E_CONTRACT, "ctxc_kv_page_table_clear_row",
                        "slot 3 is outside [0, 3)"));
    std::vector<uint8_t> page(16);
    EXPECT_TRUE(refused(ctxc_kv_pool_write_pages(pool, 0, 8, 1, page.data(), page.size()), CTXC_E_CONTRACT,
                        "ctxc_kv_pool_write_pages", "pages [8, +1) are outside [0, 8)"));
    EXPECT_TRUE(refused(ctxc_kv_pool_read_pages(pool, 0, -1, 1, page.data(), page.size()), CTXC_E_CONTRACT,
                        "ctxc_kv_pool_read_pages", "pages [-1, +1)"));
    ctxc_snapshot_transfer_t t;
    ctxc_snapshot_transfer_init(&t);
    t.partial_kv_slot = 1;
    t.base_page = 4;
    t.valid_tokens = 2;
    EXPECT_TRUE(refused(ctxc_snapshot_storage_restore(storage, &t), CTXC_E_CONTRACT, "ctxc_snapshot_storage_restore",
                        "base page 4 is outside [0, 4)"));
    t.base_page = 0;
    t.partial_kv_slot = 2;
    EXPECT_TRUE(refused(ctxc_snapshot_storage_capture(storage, &t), CTXC_E_CONTRACT, "ctxc_snapshot_storage_capture",
                        "partial-KV slot 2 is outside [0, 2)"));
}

// ---- zero capacities --------------------------------------------------------------------------------------------

TEST_F(Device, ZeroCapacitiesAreRefused) {
    ctxc_kv_pool_t* p = pool;
    ctxc_kv_pool_options_t po;
    ctxc_kv_pool_options_init(&po);
    ctxc_kv_layer_shape_t const shape{1, 2};
    po.num_pages = 0;
    po.page_size = 4;
    po.layers = &shape;
    po.layer_count = 1;
    EXPECT_TRUE(refused(ctxc_kv_pool_create(backend, &po, &p), CTXC_E_CONTRACT, "ctxc_kv_pool_create",
                        "numPages must be positive (got 0)"));
    EXPECT_EQ(p, nullptr);
    po.num_pages = 4;
    po.page_size = 0;
    EXPECT_TRUE(refused(ctxc_kv_pool_create(backend, &po, &p), CTXC_E_CONTRACT, "ctxc_kv_pool_create",
                        "pageSize must be positive (got 0)"));
    po.page_size = 4;
    po.layer_count = 0;
    EXPECT_TRUE(
        refused(ctxc_kv_pool_create(backend, &po, &p), CTXC_E_CONTRACT, "ctxc_kv_pool_create", "at least one layer"));
    ctxc_kv_layer_shape_t const noHeads{0, 2};
    po.layers = &noHeads;
    po.layer_count = 1;
    EXPECT_TRUE(refused(ctxc_kv_pool_create(backend, &po, &p), CTXC_E_CONTRACT, "ctxc_kv_pool_create",
                        "layer 0 needs positive kvHeads and headDim (got 0, 2)"));
    ctxc_kv_page_table_t* t = table;
    EXPECT_TRUE(refused(createPageTable(backend, 0, 3, 4, CTXC_PAGE_TABLE_DENSE, &t), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_create",
                        "maxBatch, maxPagesPerSeq and numPages must be positive (got 0, 3, 4)"));
    EXPECT_TRUE(refused(createPageTable(backend, 3, 3, 0, CTXC_PAGE_TABLE_DENSE, &t), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_create", "(got 3, 3, 0)"));
    EXPECT_EQ(t, nullptr);
    ctxc_kv_lengths_t* l = lengths;
    EXPECT_TRUE(refused(createLengths(backend, 0, &l), CTXC_E_CONTRACT, "ctxc_kv_lengths_create",
                        "maxBatch must be positive (got 0)"));
    ctxc_resident_state_options_t so;
    ctxc_resident_state_options_init(&so);
    so.max_batch = 0;
    so.hidden_size = 4;
    ctxc_resident_state_t* s = state;
    EXPECT_TRUE(refused(ctxc_resident_state_create(backend, &so, &s), CTXC_E_CONTRACT, "ctxc_resident_state_create",
                        "maxBatch must be positive (got 0)"));
    so.max_batch = 2;
    so.hidden_size = 0;
    EXPECT_TRUE(refused(ctxc_resident_state_create(backend, &so, &s), CTXC_E_CONTRACT, "ctxc_resident_state_create",
                        "nothing to store"));
    ctxc_device_backend_options_t bo;
    ctxc_device_backend_options_init(&bo);
    bo.kind = CTXC_BACKEND_CPU;
    bo.max_hash_chunks = 0;
    ctxc_device_backend_t* b = backend;
    EXPECT_TRUE(refused(ctxc_device_backend_create(&bo, &b), CTXC_E_CONTRACT, "ctxc_device_backend_create",
                        "maxHashChunks must be positive"));
    bo.max_hash_chunks = 16;
    bo.max_table_bytes = 0;
    EXPECT_TRUE(refused(ctxc_device_backend_create(&bo, &b), CTXC_E_CONTRACT, "ctxc_device_backend_create",
                        "maxTableBytes must be in [4096, 1073741824] (got 0)"));
    EXPECT_EQ(b, nullptr);

    // Zero budgets are a legal storage with no slots; transfers into it are refused.
    ctxc_snapshot_storage_options_t sto;
    ctxc_snapshot_storage_options_init(&sto);
    ctxc_snapshot_storage_t* empty = nullptr;
    ASSERT_EQ(ctxc_snapshot_storage_create(backend, state, pool, nullptr, &sto, &empty), CTXC_OK);
    ctxc_snapshot_transfer_t tr;
    ctxc_snapshot_transfer_init(&tr);
    tr.batch_slot = 0;
    tr.recurrent_slot = 0;
    EXPECT_TRUE(refused(ctxc_snapshot_storage_capture(empty, &tr), CTXC_E_CONTRACT, "ctxc_snapshot_storage_capture",
                        "this storage has no recurrent slots"));
    EXPECT_EQ(ctxc_snapshot_storage_destroy(empty), CTXC_OK);
    // A zero-byte buffer is legal too; any byte of it is out of range.
    ctxc_device_buffer_t* zero = nullptr;
    ASSERT_EQ(createBuffer(backend, 0, &zero), CTXC_OK);
    uint8_t byte = 0;
    EXPECT_TRUE(refused(ctxc_device_buffer_write(zero, 0, &byte, 1), CTXC_E_CONTRACT, "ctxc_device_buffer_write",
                        "outside the buffer's 0 bytes"));
    EXPECT_EQ(ctxc_device_buffer_destroy(zero), CTXC_OK);
}

TEST(CApiBadInputs, ZeroCapacityManagerAnswersInsufficientCapacity) {
    ctxc_manager_options_t o;
    ctxc_manager_options_init(&o);
    o.page_size = 4;
    o.capacities = {0, 0, 0, 0};
    ctxc_manager_t* m = nullptr;
    ASSERT_EQ(ctxc_manager_create(&o, &m), CTXC_OK);  // zero capacities are legal: every acquire is an answer
    ctxc_hash128_t const hashes[] = {{1, 2}};
    ctxc_acquire_result_t r;
    std::memset(&r, 0xAB, sizeof r);
    r.struct_size = sizeof r;
    ctxc_lease_t* lease = reinterpret_cast<ctxc_lease_t*>(uintptr_t{0x1});
    ASSERT_EQ(ctxc_manager_acquire_vanilla(m, hashes, 1, 5, CTXC_LOOKUP_USE_CACHE, &r, &lease), CTXC_OK);
    EXPECT_EQ(r.status, CTXC_ACQUIRE_INSUFFICIENT_CAPACITY);
    EXPECT_EQ(lease, nullptr);
    int32_t free = -1, capacity = -1;
    for (int32_t type = 0; type < 4; ++type) {
        ASSERT_EQ(ctxc_manager_pool_counts(m, type, &free, &capacity), CTXC_OK);
        EXPECT_EQ(free, 0);
        EXPECT_EQ(capacity, 0);
    }
    int32_t active = 0, cache = 0;
    EXPECT_TRUE(refused(ctxc_debug_manager_ref_counts(m, CTXC_RESOURCE_BASE_KV_PAGE, 0, &active, &cache),
                        CTXC_E_CONTRACT, "ctxc_debug_manager_ref_counts", "index 0 is out of range [0, 0)"));
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
    o.page_size = 0;
    m = reinterpret_cast<ctxc_manager_t*>(uintptr_t{0x1});
    EXPECT_TRUE(refused(ctxc_manager_create(&o, &m), CTXC_E_INVALID_ARGUMENT, "ctxc_manager_create", "page_size"));
    EXPECT_EQ(m, nullptr);
}

// ---- geometry that does not match a pool ------------------------------------------------------------------------

TEST_F(Device, GeometryThatDoesNotMatchAPoolIsRefused) {
    ctxc_device_buffer_t* k = nullptr;
    ASSERT_EQ(createBuffer(backend, 256, &k), CTXC_OK);
    ctxc_kv_page_table_t* five = nullptr;  // addresses 5 pages: not this 4-page pool
    ASSERT_EQ(createPageTable(backend, 3, 3, 5, CTXC_PAGE_TABLE_DENSE, &five), CTXC_OK);
    ctxc_kv_gather_request_t r = gatherRequest(0, 1, 4);
    EXPECT_TRUE(refused(ctxc_kv_gather(pool, five, nullptr, &r, k, buffer), CTXC_E_CONTRACT, "ctxc_kv_gather",
                        "the table addresses 5 pages, the pool has 4"));
    r.layer = 2;
    EXPECT_TRUE(refused(ctxc_kv_gather(pool, table, nullptr, &r, k, buffer), CTXC_E_CONTRACT, "ctxc_kv_gather",
                        "layer 2 is outside [0, 2)"));
    r.layer = 0;
    r.out_dtype = CTXC_DTYPE_FP32;  // an fp16 pool gathers only into fp16
    EXPECT_TRUE(refused(ctxc_kv_gather(pool, table, nullptr, &r, k, buffer), CTXC_E_CONTRACT, "ctxc_kv_gather",
                        "wrong dtype: a fp16 pool gathers only into fp16"));
    r.out_dtype = CTXC_DTYPE_FP16;
    r.seq_len = 13;  // 3 pages of 4 tokens per sequence
    EXPECT_TRUE(refused(ctxc_kv_gather(pool, table, nullptr, &r, k, buffer), CTXC_E_CONTRACT, "ctxc_kv_gather",
                        "seqLen 13 needs more pages than the table's 3 per sequence"));
    r.seq_len = 4;
    r.batch = 4;
    EXPECT_TRUE(refused(ctxc_kv_gather(pool, table, lengths, &r, k, buffer), CTXC_E_CONTRACT, "ctxc_kv_gather",
                        "batch 4 exceeds the table's 3 slots"));
    std::vector<uint8_t> bytes(17);  // one page of layer 0 is 16 bytes
    EXPECT_TRUE(refused(ctxc_kv_pool_write_pages(pool, 0, 0, 1, bytes.data(), bytes.size()), CTXC_E_CONTRACT,
                        "ctxc_kv_pool_write_pages", "17 bytes given for 1 pages of 16 bytes"));
    EXPECT_TRUE(refused(ctxc_resident_state_write_row(state, CTXC_STATE_RECURRENT, 0, 0, bytes.data(), 17),
                        CTXC_E_CONTRACT, "ctxc_resident_state_write_row", "17 bytes given for a row of 16"));
    EXPECT_TRUE(refused(ctxc_resident_state_write_row(state, CTXC_STATE_RECURRENT, 1, 0, bytes.data(), 16),
                        CTXC_E_CONTRACT, "ctxc_resident_state_write_row", "layer 1 is outside [0, 1)"));
    ctxc_snapshot_transfer_t t;
    ctxc_snapshot_transfer_init(&t);
    t.partial_kv_slot = 0;
    t.base_page = 1;
    t.valid_tokens = 4;  // a full page is not a partial page
    EXPECT_TRUE(refused(ctxc_snapshot_storage_restore(storage, &t), CTXC_E_CONTRACT, "ctxc_snapshot_storage_restore",
                        "validTokens 4 is outside (0, 4)"));
    t.valid_tokens = 2;
    t.draft_page = 0;
    EXPECT_TRUE(refused(ctxc_snapshot_storage_restore(storage, &t), CTXC_E_CONTRACT, "ctxc_snapshot_storage_restore",
                        "a draft page was given but this storage has no draft pool"));

    // Objects of another backend do not mix.
    ctxc_device_backend_t* other = cpuBackend();
    ctxc_kv_pool_t* foreignPool = makePool(other, 4, 4, {{1, 2}});
    ctxc_snapshot_storage_options_t sto;
    ctxc_snapshot_storage_options_init(&sto);
    sto.partial_kv_budget_bytes = 1024;
    ctxc_snapshot_storage_t* s = storage;
    EXPECT_TRUE(refused(ctxc_snapshot_storage_create(backend, nullptr, foreignPool, nullptr, &sto, &s), CTXC_E_CONTRACT,
                        "ctxc_snapshot_storage_create", "must live on the storage's backend"));
    EXPECT_EQ(s, nullptr);
    EXPECT_TRUE(refused(ctxc_kv_gather(foreignPool, table, nullptr, &r, k, buffer), CTXC_E_CONTRACT, "ctxc_kv_gather",
                        "the output buffers live on another backend than the pool"));
    ctxc_kv_lengths_t* foreignLengths = nullptr;
    ASSERT_EQ(createLengths(other, 4, &foreignLengths), CTXC_OK);
    int32_t const three[] = {1, 1, 1};
    ASSERT_EQ(ctxc_kv_lengths_set(foreignLengths, three, 3), CTXC_OK);
    EXPECT_TRUE(refused(ctxc_kv_lengths_add_lengths(lengths, foreignLengths), CTXC_E_CONTRACT,
                        "ctxc_kv_lengths_add_lengths", "the increments live on another backend"));
    EXPECT_EQ(ctxc_kv_lengths_destroy(foreignLengths), CTXC_OK);
    EXPECT_EQ(ctxc_kv_pool_destroy(foreignPool), CTXC_OK);
    EXPECT_EQ(sizeOf(ctxc_device_backend_allocated_bytes, other), 0u);
    EXPECT_EQ(ctxc_device_backend_destroy(other), CTXC_OK);
    EXPECT_EQ(ctxc_kv_page_table_destroy(five), CTXC_OK);
    EXPECT_EQ(ctxc_device_buffer_destroy(k), CTXC_OK);
}

// ---- memory an engine can use: views, external memory, streams, DLPack ------------------------------------------

TEST_F(Device, ViewGettersRefuseNullHandlesNullOutputsShortStructsAndBadIndexes) {
    ctxc_device_view_t v{};
    v.struct_size = sizeof v;
    EXPECT_TRUE(refused(ctxc_kv_pool_layer_view(nullptr, 0, &v), CTXC_E_INVALID_HANDLE, "ctxc_kv_pool_layer_view",
                        "pool is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_pool_layer_view(pool, 0, nullptr), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_pool_layer_view",
                        "out_view is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_pool_layer_view(pool, 2, &v), CTXC_E_CONTRACT, "ctxc_kv_pool_layer_view",
                        "layer 2 is outside [0, 2)"));
    EXPECT_TRUE(refused(ctxc_kv_pool_layer_view(pool, -1, &v), CTXC_E_CONTRACT, "ctxc_kv_pool_layer_view", "layer -1"));
    EXPECT_TRUE(refused(ctxc_kv_pool_memory_view(reinterpret_cast<ctxc_kv_pool_t*>(table), &v), CTXC_E_INVALID_HANDLE,
                        "ctxc_kv_pool_memory_view", "pool"));
    EXPECT_TRUE(refused(ctxc_kv_page_table_device_view(table, nullptr), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_page_table_device_view", "out_view is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_device_view(nullptr, &v), CTXC_E_INVALID_HANDLE, "ctxc_kv_lengths_device_view",
                        "lengths is NULL"));
    EXPECT_TRUE(refused(ctxc_kv_lengths_active_batch(lengths, nullptr), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_lengths_active_batch", "out_active_batch is NULL"));
    EXPECT_TRUE(refused(ctxc_resident_state_view(state, 7, 0, &v), CTXC_E_INVALID_ARGUMENT, "ctxc_resident_state_view",
                        "part 7"));
    EXPECT_TRUE(refused(ctxc_resident_state_view(state, CTXC_STATE_RECURRENT, 1, &v), CTXC_E_CONTRACT,
                        "ctxc_resident_state_view", "layer 1"));
    EXPECT_TRUE(refused(ctxc_resident_state_view(state, CTXC_STATE_PARTIAL_KV, 0, &v), CTXC_E_CONTRACT,
                        "ctxc_resident_state_view", "not a resident-state part"));
    EXPECT_TRUE(refused(ctxc_resident_state_memory_view(state, nullptr), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_resident_state_memory_view", "out_view is NULL"));
    EXPECT_TRUE(refused(ctxc_snapshot_storage_view(storage, CTXC_STATE_CONV, &v), CTXC_E_CONTRACT,
                        "ctxc_snapshot_storage_view", "names no slab"));
    EXPECT_TRUE(refused(ctxc_device_buffer_view(buffer, nullptr), CTXC_E_INVALID_ARGUMENT, "ctxc_device_buffer_view",
                        "out_view is NULL"));
    // A short struct_size: refused before a byte of the output is written.
    ctxc_device_view_t shorter;
    std::memset(&shorter, 0xAB, sizeof shorter);
    shorter.struct_size = sizeof shorter - 1;
    ctxc_device_view_t const untouched = shorter;
    for (ctxc_status_t s :
         {ctxc_kv_pool_layer_view(pool, 0, &shorter), ctxc_kv_pool_memory_view(pool, &shorter),
          ctxc_kv_page_table_device_view(table, &shorter), ctxc_kv_lengths_device_view(lengths, &shorter),
          ctxc_resident_state_view(state, CTXC_STATE_CONV, 0, &shorter),
          ctxc_resident_state_memory_view(state, &shorter),
          ctxc_snapshot_storage_view(storage, CTXC_STATE_RECURRENT, &shorter),
          ctxc_device_buffer_view(buffer, &shorter)}) {
        EXPECT_EQ(s, CTXC_E_INVALID_ARGUMENT);
        EXPECT_NE(std::string(ctxc_last_error()).find("struct_size"), std::string::npos) << ctxc_last_error();
    }
    EXPECT_EQ(std::memcmp(&shorter, &untouched, sizeof shorter), 0);
}

TEST_F(Device, ExternalMemoryThatCannotHoldTheObjectIsRefusedAndNothingIsCreated) {
    alignas(256) static uint8_t memory[1024 + 256];
    std::memset(memory, 0x5A, sizeof memory);
    std::vector<ctxc_kv_layer_shape_t> const layers = {{1, 2}};
    ctxc_kv_pool_options_t o;
    ctxc_kv_pool_options_init(&o);
    o.num_pages = 4;
    o.page_size = 4;
    o.layers = layers.data();
    o.layer_count = 1;
    size_t required = 0;
    ASSERT_EQ(ctxc_kv_pool_required_bytes(&o, &required), CTXC_OK);
    ASSERT_EQ(required, 256u);
    ctxc_kv_pool_t* newPool = pool;
    o.external_data = nullptr;
    o.external_bytes = 256;
    EXPECT_TRUE(
        refused(ctxc_kv_pool_create(backend, &o, &newPool), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_pool_create", "is NULL"));
    EXPECT_EQ(newPool, nullptr);
    o.external_data = memory + 16;
    EXPECT_TRUE(refused(ctxc_kv_pool_create(backend, &o, &newPool), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_pool_create",
                        "256-byte aligned"));
    o.external_data = memory;
    o.external_bytes = 255;
    EXPECT_TRUE(refused(ctxc_kv_pool_create(backend, &o, &newPool), CTXC_E_INVALID_ARGUMENT, "ctxc_kv_pool_create",
                        "holds 255 bytes, the object needs 256"));
    o.num_pages = 0;  // a bad geometry is still the geometry's error
    o.external_bytes = 256;
    EXPECT_TRUE(
        refused(ctxc_kv_pool_create(backend, &o, &newPool), CTXC_E_CONTRACT, "ctxc_kv_pool_create", "numPages"));
    EXPECT_TRUE(refused(ctxc_kv_pool_required_bytes(&o, nullptr), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_pool_required_bytes", "out_bytes is NULL"));

    ctxc_kv_page_table_options_t to;
    ctxc_kv_page_table_options_init(&to);
    to.max_batch = 2;
    to.max_pages_per_seq = 2;
    to.num_pages = 4;
    to.external_data = memory + 2;
    to.external_bytes = 64;
    ctxc_kv_page_table_t* newTable = table;
    EXPECT_TRUE(refused(ctxc_kv_page_table_create(backend, &to, &newTable), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_page_table_create", "4-byte aligned"));
    EXPECT_EQ(newTable, nullptr);
    ctxc_kv_lengths_options_t lo;
    ctxc_kv_lengths_options_init(&lo);
    lo.max_batch = 4;
    lo.external_data = memory;
    lo.external_bytes = 15;
    ctxc_kv_lengths_t* newLengths = lengths;
    EXPECT_TRUE(refused(ctxc_kv_lengths_create(backend, &lo, &newLengths), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_kv_lengths_create", "holds 15 bytes"));
    EXPECT_EQ(newLengths, nullptr);
    ctxc_resident_state_options_t so;
    ctxc_resident_state_options_init(&so);
    so.max_batch = 2;
    so.hidden_size = 4;
    so.external_data = memory;
    so.external_bytes = 8;
    ctxc_resident_state_t* newState = state;
    EXPECT_TRUE(refused(ctxc_resident_state_create(backend, &so, &newState), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_resident_state_create", "the object needs 256"));
    EXPECT_EQ(newState, nullptr);
    EXPECT_TRUE(refused(ctxc_resident_state_required_bytes(nullptr, &so, &required), CTXC_E_INVALID_HANDLE,
                        "ctxc_resident_state_required_bytes", "backend is NULL"));
    ctxc_snapshot_storage_options_t sto;
    ctxc_snapshot_storage_options_init(&sto);
    sto.recurrent_budget_bytes = 64;
    sto.external_recurrent_data = memory;
    sto.external_recurrent_bytes = 47;  // 2 slots of 24 bytes need 48
    sto.partial_kv_budget_bytes = 96;
    ctxc_snapshot_storage_t* newStorage = storage;
    EXPECT_TRUE(refused(ctxc_snapshot_storage_create(backend, state, pool, nullptr, &sto, &newStorage),
                        CTXC_E_INVALID_ARGUMENT, "ctxc_snapshot_storage_create", "recurrent slab"));
    EXPECT_EQ(newStorage, nullptr);
    ctxc_device_buffer_options_t bo;
    ctxc_device_buffer_options_init(&bo);
    bo.bytes = 64;
    bo.external_data = memory;
    bo.external_bytes = 32;
    ctxc_device_buffer_t* newBuffer = buffer;
    EXPECT_TRUE(refused(ctxc_device_buffer_create(backend, &bo, &newBuffer), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_buffer_create", "holds 32 bytes"));
    EXPECT_EQ(newBuffer, nullptr);
    for (uint8_t byte : memory) ASSERT_EQ(byte, 0x5A) << "a refused create touched the caller's memory";
}

TEST_F(Device, StreamCallsRefuseNullHandlesAndOutputs) {
    EXPECT_TRUE(refused(ctxc_device_backend_set_stream(nullptr, nullptr), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_backend_set_stream", "backend is NULL"));
    void* stream = nullptr;
    EXPECT_TRUE(refused(ctxc_device_backend_stream(nullptr, &stream), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_backend_stream", "backend is NULL"));
    EXPECT_TRUE(refused(ctxc_device_backend_stream(backend, nullptr), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_backend_stream", "out_stream is NULL"));
    EXPECT_TRUE(refused(ctxc_device_backend_set_stream(reinterpret_cast<ctxc_device_backend_t*>(pool), nullptr),
                        CTXC_E_INVALID_HANDLE, "ctxc_device_backend_set_stream", "backend"));
}

TEST_F(Device, DlpackExportRefusesViewsItCannotVouchFor) {
    ctxc_device_view_t v{};
    v.struct_size = sizeof v;
    ASSERT_EQ(ctxc_kv_pool_layer_view(pool, 1, &v), CTXC_OK);
    void* managed = reinterpret_cast<void*>(0x1);
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(nullptr, pool, 0, &managed), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_view_to_dlpack", "view is NULL"));
    EXPECT_EQ(managed, nullptr);
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&v, pool, 0, nullptr), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_view_to_dlpack", "out_managed is NULL"));
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&v, nullptr, 0, &managed), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_view_to_dlpack", "owner is NULL"));
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&v, backend, 0, &managed), CTXC_E_INVALID_HANDLE,
                        "ctxc_device_view_to_dlpack", "not a live handle of a device object"));
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&v, pool, 2, &managed), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_view_to_dlpack", "versioned must be 0 or 1"));
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&v, table, 0, &managed), CTXC_E_CONTRACT,
                        "ctxc_device_view_to_dlpack", "outside the owner's memory"));
    ctxc_device_view_t bad = v;
    bad.element = CTXC_ELEMENT_FP32;  // twice the element size: the bytes no longer match the shape
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&bad, pool, 0, &managed), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_view_to_dlpack", "is not product(shape)"));
    bad = v;
    bad.element = 99;
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&bad, pool, 0, &managed), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_view_to_dlpack", "element 99"));
    bad = v;
    bad.ndim = 6;
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&bad, pool, 0, &managed), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_view_to_dlpack", "ndim 6"));
    bad = v;
    bad.shape[0] = 3;  // one more half than the layer has
    bad.bytes = v.bytes / 2 * 3;
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&bad, pool, 0, &managed), CTXC_E_CONTRACT,
                        "ctxc_device_view_to_dlpack", "outside the owner's memory"));
    bad = v;
    bad.struct_size = 4;
    EXPECT_TRUE(refused(ctxc_device_view_to_dlpack(&bad, pool, 0, &managed), CTXC_E_INVALID_ARGUMENT,
                        "ctxc_device_view_to_dlpack", "struct_size"));
    EXPECT_EQ(managed, nullptr);
}

// ---- regressions found by tests/fuzz/device_fuzz.cpp ------------------------------------------------------------
// Each was a refused call that escaped as CTXC_E_INTERNAL, tried to allocate before it refused (so the answer was
// CTXC_E_NO_MEMORY, or a multi-gigabyte allocation and then a refusal), or an accepted call that must be refused.

TEST(DeviceFuzzRegressions, HugeDescriptorTableIsAContractError) {
    ctxc_device_backend_options_t o;
    ctxc_device_backend_options_init(&o);
    o.kind = CTXC_BACKEND_CPU;
    ctxc_device_backend_t* b = nullptr;
    for (size_t bytes : {SIZE_MAX, size_t{1} << 40, (size_t{1} << 30) + 1}) {  // was CTXC_E_INTERNAL / a 1 TiB reserve
        o.max_table_bytes = bytes;
        EXPECT_TRUE(refused(ctxc_device_backend_create(&o, &b), CTXC_E_CONTRACT, "ctxc_device_backend_create",
                            "maxTableBytes must be in [4096, 1073741824]"));
        EXPECT_EQ(b, nullptr);
    }
}

TEST(DeviceFuzzRegressions, PageTableOfMoreThanInt32MaxEntriesIsAContractError) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_page_table_t* t = nullptr;
    // INT32_MAX x INT32_MAX escaped as std::length_error (CTXC_E_INTERNAL); INT32_MAX x 1 tried 16 GiB.
    EXPECT_TRUE(refused(createPageTable(b, INT32_MAX, INT32_MAX, 4, CTXC_PAGE_TABLE_DENSE, &t), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_create", "entries exceeds INT32_MAX"));
    EXPECT_TRUE(refused(createPageTable(b, INT32_MAX, 1, 4, CTXC_PAGE_TABLE_DENSE, &t), CTXC_E_CONTRACT,
                        "ctxc_kv_page_table_create", "maxBatch * 2 * maxPagesPerSeq = 4294967294 entries"));
    EXPECT_EQ(t, nullptr);
    EXPECT_EQ(sizeOf(ctxc_device_backend_allocated_bytes, b), 0u);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceFuzzRegressions, GeometriesTooLargeForTheDescriptorTableAreRefusedBeforeAllocating) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_lengths_t* l = nullptr;  // allocated (and zeroed) 8 GiB before refusing
    EXPECT_TRUE(refused(createLengths(b, INT32_MAX, &l), CTXC_E_CONTRACT, "ctxc_kv_lengths_create",
                        "maxBatch 2147483647 is too large for the backend's descriptor table"));
    ctxc_resident_state_options_t o;
    ctxc_resident_state_options_init(&o);
    o.max_batch = 1;
    o.num_layers = INT32_MAX / 2;  // 512 GiB of 256-byte aligned slabs were allocated before the table check
    o.recurrent_heads = o.recurrent_head_dim = o.state_size = 1;
    ctxc_resident_state_t* s = nullptr;
    EXPECT_TRUE(refused(ctxc_resident_state_create(b, &o, &s), CTXC_E_CONTRACT, "ctxc_resident_state_create",
                        "1073741823 layers of 1 rows need a larger descriptor table"));
    EXPECT_EQ(sizeOf(ctxc_device_backend_allocated_bytes, b), 0u);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceFuzzRegressions, ChunkCountBeyondTheBackendIsRefusedBeforeSizingPartials) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_device_buffer_t* buffer = nullptr;
    ASSERT_EQ(createBuffer(b, 16, &buffer), CTXC_OK);
    ctxc_hash128_t h{};
    // A 64 GiB host vector of partials was sized (CTXC_E_NO_MEMORY, or the OOM killer) before the check.
    EXPECT_TRUE(refused(ctxc_device_hash_chunked(buffer, 0, 16, UINT32_MAX, &h), CTXC_E_CONTRACT,
                        "ctxc_device_hash_chunked", "numChunks must be in [1, 65536] (got 4294967295)"));
    EXPECT_EQ(ctxc_device_buffer_destroy(buffer), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceFuzzRegressions, GatherOutputBytesThatOverflowAreRefused) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_pool_t* pool = makePool(b, 1, 1, {{1024, 1024}});
    ctxc_kv_gather_request_t r = gatherRequest(0, INT32_MAX, INT32_MAX);
    r.out_dtype = CTXC_DTYPE_FP16;
    size_t bytes = 1;  // was CTXC_OK with the size wrapped to 0
    EXPECT_TRUE(refused(ctxc_kv_gather_output_bytes(pool, &r, &bytes), CTXC_E_CONTRACT, "ctxc_kv_gather_output_bytes",
                        "overflow size_t"));
    EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceFuzzRegressions, OnePoolCannotBeBothBaseAndDraftOfASnapshotStorage) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_pool_t* pool = makePool(b, 2, 4, {{1, 2}});
    ctxc_snapshot_storage_options_t o;
    ctxc_snapshot_storage_options_init(&o);
    o.partial_kv_budget_bytes = 1024;
    ctxc_snapshot_storage_t* s = nullptr;
    // Was accepted: a restore with base_page == draft_page then wrote one page from two regions in one launch.
    EXPECT_TRUE(refused(ctxc_snapshot_storage_create(b, nullptr, pool, pool, &o, &s), CTXC_E_CONTRACT,
                        "ctxc_snapshot_storage_create", "the draft pool must be another pool than the base pool"));
    EXPECT_EQ(s, nullptr);
    EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

// ---- manager cases --------------------------------------------------------------------------------------------
// capi_tests.cpp already covers, for the manager: NULL, made-up and wrongly typed handles
// (NullMadeUpAndWronglyTypedHandlesAreInvalid), dangling handles (StaleHandleNeverAliasesANewerObject), double
// release (DoubleReleasedLeaseIsInvalidButStillDestroyable), a lease used after its manager died
// (DestroyingAManagerWithALiveLeaseOrphansIt), another manager's lease (ForeignLeaseIsRejected), negative counts
// and malformed arguments (MalformedArgumentsAreRejectedBeforeAnyChange), and hashes that no longer describe the
// acquired prefix / more hashes than the prompt's blocks (ContractViolationsChangeNothing). Huge counts were missing:

TEST(CApiBadInputs, HugeCountsAreRefusedOrAnsweredByTheManager) {
    ctxc_manager_options_t o;
    ctxc_manager_options_init(&o);
    o.page_size = 4;
    o.capacities = {4, 0, 0, 0};
    ctxc_manager_t* m = nullptr;
    ASSERT_EQ(ctxc_manager_create(&o, &m), CTXC_OK);
    ctxc_hash128_t const hashes[] = {{1, 2}};
    ctxc_acquire_result_t r;
    std::memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    ctxc_lease_t* lease = nullptr;
    EXPECT_TRUE(refused(ctxc_manager_acquire_vanilla(m, hashes, SIZE_MAX, 4, CTXC_LOOKUP_USE_CACHE, &r, &lease),
                        CTXC_E_INVALID_ARGUMENT, "ctxc_manager_acquire_vanilla", "exceeds INT32_MAX"));
    EXPECT_TRUE(refused(ctxc_manager_acquire_vanilla(m, hashes, 1, 3, CTXC_LOOKUP_USE_CACHE, &r, &lease),
                        CTXC_E_CONTRACT, "ctxc_manager_acquire_vanilla", "1 full-block hashes for 3 tokens"));
    ASSERT_EQ(ctxc_manager_acquire_vanilla(m, hashes, 1, 4, CTXC_LOOKUP_USE_CACHE, &r, &lease), CTXC_OK);
    ASSERT_NE(lease, nullptr);
    int32_t ok = -1;
    EXPECT_EQ(ctxc_manager_grow_base_pages(m, lease, INT32_MAX, &ok), CTXC_OK);  // a capacity answer, not an error
    EXPECT_EQ(ok, 0);
    int32_t free = -1, capacity = -1;
    ASSERT_EQ(ctxc_manager_pool_counts(m, CTXC_RESOURCE_BASE_KV_PAGE, &free, &capacity), CTXC_OK);
    EXPECT_EQ(free, 3);
    EXPECT_TRUE(refused(ctxc_debug_manager_ref_counts(m, CTXC_RESOURCE_BASE_KV_PAGE, INT32_MAX, &free, &capacity),
                        CTXC_E_CONTRACT, "ctxc_debug_manager_ref_counts", "index 2147483647 is out of range [0, 4)"));
    EXPECT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    ASSERT_EQ(ctxc_manager_pool_counts(m, CTXC_RESOURCE_BASE_KV_PAGE, &free, &capacity), CTXC_OK);
    EXPECT_EQ(free, capacity);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

// ---- capacities up to INT32_MAX (issue 24, item 3) ----------------------------------------------------------

#if defined(__SANITIZE_ADDRESS__)
#define CAPI_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CAPI_UNDER_ASAN 1
#endif
#endif

namespace {

ctxc_manager_options_t hugeManagerOptions() {
    ctxc_manager_options_t o;
    ctxc_manager_options_init(&o);
    o.page_size = 4;
    o.capacities = {INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX};
    return o;
}

}  // namespace

TEST(CApiBadInputs, AManagerWhoseMetadataCannotBeAllocatedIsNoMemoryNamingTheBytes) {
#ifdef CAPI_UNDER_ASAN
    GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix";
#else
    // 8 MiB of headroom: less than the first 2^20 ids' metadata of one pool (12 MiB).
    ctxcache::test::expectTrueWithinAddressSpace(size_t{8} << 20, [] {
        ctxc_manager_options_t const o = hugeManagerOptions();
        ctxc_manager_t* m = nullptr;
        ::testing::AssertionResult const r = refused(ctxc_manager_create(&o, &m), CTXC_E_NO_MEMORY,
                                                     "ctxc_manager_create", "cannot allocate 12582912 bytes");
        if (!r) std::fprintf(stderr, "%s\n", r.message());
        return static_cast<bool>(r) && m == nullptr;
    });
#endif
}

TEST(CApiBadInputs, AManagerOfInt32MaxPagesServesInMemoryProportionalToItsUse) {
#ifdef CAPI_UNDER_ASAN
    GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix";
#else
    // 384 MiB of headroom: the old manager needed 12 bytes per id of the pools and 48 per base page up front,
    // about 150 GiB here.
    ctxcache::test::expectTrueWithinAddressSpace(size_t{384} << 20, [] {
        ctxc_manager_options_t const o = hugeManagerOptions();
        ctxc_manager_t* m = nullptr;
        if (ctxc_manager_create(&o, &m) != CTXC_OK) return std::fprintf(stderr, "%s\n", ctxc_last_error()), false;
        std::vector<ctxc_hash128_t> hashes;
        for (uint64_t i = 0; i < 100; ++i) hashes.push_back({0xAB00 + i, i * 7919});
        bool ok = true;
        for (int round = 0; round < 2 && ok; ++round) {
            ctxc_acquire_result_t r;
            std::memset(&r, 0, sizeof r);
            r.struct_size = sizeof r;
            ctxc_lease_t* lease = nullptr;
            ok = ctxc_manager_acquire_vanilla(m, hashes.data(), hashes.size(), 400, CTXC_LOOKUP_USE_CACHE, &r,
                                              &lease) == CTXC_OK &&
                 r.plan.reuse_token_length == (round == 0 ? 0 : 396);
            int32_t const* pages = nullptr;
            size_t count = 0;
            ok = ok && ctxc_lease_base_pages(lease, &pages, &count) == CTXC_OK && count == 100 && pages[0] == 0 &&
                 pages[98] == 98 && pages[99] == (round == 0 ? 99 : 100);
            ctxc_publish_result_t p;
            std::memset(&p, 0, sizeof p);
            p.struct_size = sizeof p;
            if (round == 0)
                ok = ok && ctxc_manager_publish(m, lease, hashes.data(), hashes.size(), 400, &p) == CTXC_OK &&
                     p.status == CTXC_PUBLISH_PUBLISHED;
            ok = ctxc_lease_destroy(lease) == CTXC_OK && ok;
        }
        int32_t free = -1, capacity = -1;
        ok = ok && ctxc_manager_pool_counts(m, CTXC_RESOURCE_BASE_KV_PAGE, &free, &capacity) == CTXC_OK &&
             capacity == INT32_MAX && free == INT32_MAX - 100;
        size_t freeIds = 0;  // the size query of the free list: no copy of INT32_MAX ids is built for it
        ok = ok &&
             ctxc_debug_manager_free_list(m, CTXC_RESOURCE_BASE_KV_PAGE, nullptr, 0, &freeIds) ==
                 CTXC_E_BUFFER_TOO_SMALL &&
             freeIds == static_cast<size_t>(INT32_MAX - 100);
        ok = ok && ctxc_manager_check_invariants(m) == CTXC_OK;
        if (!ok) std::fprintf(stderr, "%s\n", ctxc_last_error());
        return ctxc_manager_destroy(m) == CTXC_OK && ok;
    });
#endif
}
