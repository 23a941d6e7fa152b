// Memory an engine can use, at the C ABI (links only the shared library, includes only "ctxcache.h"): every device
// object's view addresses exactly the bytes the API reads and writes; objects built over the engine's own memory
// use it in place (never zeroing it, never freeing it); the caller's stream is taken; DLPack tensors keep their
// memory alive past the handle. All on the CPU backend, where a device pointer is a host pointer the test can read.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi_test_support.h"
#include "ctxcache.h"
#include "device_creates.h"

namespace {

size_t allocated(ctxc_device_backend_t const* b) {
    size_t n = 0;
    EXPECT_EQ(ctxc_device_backend_allocated_bytes(b, &n), CTXC_OK);
    return n;
}

ctxc_device_view_t emptyView() {
    ctxc_device_view_t v{};
    v.struct_size = sizeof v;
    return v;
}

// The engine's own memory: 256-byte aligned, filled with a pattern, freed by the engine (the test) alone.
struct EngineMemory {
    explicit EngineMemory(size_t n, unsigned seed = 5)
        : bytes(n), data(std::aligned_alloc(256, (n + 255) / 256 * 256)) {
        std::vector<uint8_t> const p = pattern(n, seed);
        std::memcpy(data, p.data(), n);
    }
    ~EngineMemory() { std::free(data); }
    EngineMemory(EngineMemory const&) = delete;
    EngineMemory& operator=(EngineMemory const&) = delete;
    std::vector<uint8_t> copy() const {
        auto const* p = static_cast<uint8_t const*>(data);
        return std::vector<uint8_t>(p, p + bytes);
    }
    size_t bytes;
    void* data;
};

ctxc_kv_pool_options_t poolOptions(std::vector<ctxc_kv_layer_shape_t> const& layers, int32_t dtype) {
    ctxc_kv_pool_options_t o;
    ctxc_kv_pool_options_init(&o);
    o.num_pages = 4;
    o.page_size = 4;
    o.dtype = dtype;
    o.layers = layers.data();
    o.layer_count = layers.size();
    return o;
}

ctxc_resident_state_options_t stateOptions() {
    ctxc_resident_state_options_t so;
    ctxc_resident_state_options_init(&so);
    so.max_batch = 3;
    so.num_layers = 2;
    so.recurrent_heads = 1;
    so.recurrent_head_dim = 2;
    so.state_size = 2;
    so.conv_dim = 2;
    so.conv_kernel = 3;
    so.hidden_size = 4;
    return so;
}

// DLPack 0.8 and 1.0, as the public specification defines them (a consumer's view of what the library returns).
struct DLDevice {
    int32_t device_type;
    int32_t device_id;
};
struct DLDataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};
struct DLTensor {
    void* data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;
    int64_t* strides;
    uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor*);
};
struct DLManagedTensorVersioned {
    uint32_t major, minor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensorVersioned*);
    uint64_t flags;
    DLTensor dl_tensor;
};

}  // namespace

TEST(DeviceMemory, PoolLayerViewAddressesThePagesTheApiWrites) {
    ctxc_device_backend_t* b = cpuBackend();
    std::vector<ctxc_kv_layer_shape_t> const layers = {{1, 2}, {2, 3}};
    ctxc_kv_pool_options_t o = poolOptions(layers, CTXC_DTYPE_FP16);
    ctxc_kv_pool_t* pool = nullptr;
    ASSERT_EQ(ctxc_kv_pool_create(b, &o, &pool), CTXC_OK) << ctxc_last_error();
    ctxc_device_view_t whole = emptyView();
    ASSERT_EQ(ctxc_kv_pool_memory_view(pool, &whole), CTXC_OK);
    size_t footprint = 0;
    ASSERT_EQ(ctxc_kv_pool_footprint_bytes(pool, &footprint), CTXC_OK);
    EXPECT_EQ(whole.element, CTXC_ELEMENT_UINT8);
    EXPECT_EQ(whole.bytes, footprint);
    EXPECT_EQ(whole.external, 0);
    size_t required = 0;
    ASSERT_EQ(ctxc_kv_pool_required_bytes(&o, &required), CTXC_OK);
    EXPECT_EQ(required, footprint);
    for (int32_t layer = 0; layer < 2; ++layer) {
        size_t pageBytes = 0;
        ASSERT_EQ(ctxc_kv_pool_page_bytes(pool, layer, &pageBytes), CTXC_OK);
        std::vector<uint8_t> const bytes = pattern(8 * pageBytes, static_cast<unsigned>(layer) + 3);
        ASSERT_EQ(ctxc_kv_pool_write_pages(pool, layer, 0, 8, bytes.data(), bytes.size()), CTXC_OK);
        ctxc_device_view_t v = emptyView();
        ASSERT_EQ(ctxc_kv_pool_layer_view(pool, layer, &v), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(v.element, CTXC_ELEMENT_FP16);
        EXPECT_EQ(v.backend, CTXC_BACKEND_CPU);
        EXPECT_EQ(v.device, 0);
        ASSERT_EQ(v.ndim, 5);
        int64_t const shape[5] = {2, 4, 4, layers[layer].kv_heads, layers[layer].head_dim};
        for (int i = 0; i < 5; ++i) EXPECT_EQ(v.shape[i], shape[i]);
        EXPECT_EQ(v.bytes, 8 * pageBytes);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 256, 0u);
        EXPECT_GE(static_cast<uint8_t*>(v.data), static_cast<uint8_t*>(whole.data));
        EXPECT_LE(static_cast<uint8_t*>(v.data) + v.bytes, static_cast<uint8_t*>(whole.data) + whole.bytes);
        EXPECT_EQ(std::memcmp(v.data, bytes.data(), bytes.size()), 0) << "layer " << layer;
        // The V page of K page 1 is flat page 1 + num_pages: written through the pointer, read through the API.
        static_cast<uint8_t*>(v.data)[5 * pageBytes] = 0xEE;
        std::vector<uint8_t> page(pageBytes);
        ASSERT_EQ(ctxc_kv_pool_read_pages(pool, layer, 5, 1, page.data(), page.size()), CTXC_OK);
        EXPECT_EQ(page[0], 0xEE);
    }
    EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceMemory, TableLengthsStateSnapshotAndBufferViewsAddressTheirBytes) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_page_table_t* table = nullptr;
    ASSERT_EQ(createPageTable(b, 3, 2, 8, CTXC_PAGE_TABLE_DENSE, &table), CTXC_OK);
    int32_t const row[] = {4, 6};
    ASSERT_EQ(ctxc_kv_page_table_set_row(table, 1, row, 2), CTXC_OK);
    ctxc_device_view_t tv = emptyView();
    ASSERT_EQ(ctxc_kv_page_table_device_view(table, &tv), CTXC_OK);
    EXPECT_EQ(tv.element, CTXC_ELEMENT_INT32);
    ASSERT_EQ(tv.ndim, 3);
    EXPECT_EQ(tv.shape[0], 3);
    EXPECT_EQ(tv.shape[1], 2);
    EXPECT_EQ(tv.shape[2], 2);
    auto const* entries = static_cast<int32_t const*>(tv.data);
    EXPECT_EQ(entries[4], -1) << "the device view is current only after upload";
    ASSERT_EQ(ctxc_kv_page_table_upload(table, nullptr), CTXC_OK);
    EXPECT_EQ(std::vector<int32_t>(entries + 4, entries + 8), (std::vector<int32_t>{4, 6, 12, 14}));

    ctxc_kv_lengths_t* lengths = nullptr;
    ASSERT_EQ(createLengths(b, 4, &lengths), CTXC_OK);
    int32_t const values[] = {5, 9};
    ASSERT_EQ(ctxc_kv_lengths_set(lengths, values, 2), CTXC_OK);
    ctxc_device_view_t lv = emptyView();
    ASSERT_EQ(ctxc_kv_lengths_device_view(lengths, &lv), CTXC_OK);
    EXPECT_EQ(lv.ndim, 1);
    EXPECT_EQ(lv.shape[0], 4);
    EXPECT_EQ(lv.bytes, 16u);
    static_cast<int32_t*>(lv.data)[1] = 42;  // the engine's kernel writes a length
    std::vector<int32_t> read(4);
    size_t count = 0;
    ASSERT_EQ(ctxc_kv_lengths_read(lengths, read.data(), read.size(), &count), CTXC_OK);
    EXPECT_EQ(std::vector<int32_t>(read.begin(), read.begin() + static_cast<long>(count)),
              (std::vector<int32_t>{5, 42}));
    int32_t active = -1;
    ASSERT_EQ(ctxc_kv_lengths_active_batch(lengths, &active), CTXC_OK);
    EXPECT_EQ(active, 2);

    ctxc_resident_state_options_t so = stateOptions();
    ctxc_resident_state_t* state = nullptr;
    ASSERT_EQ(ctxc_resident_state_create(b, &so, &state), CTXC_OK);
    struct Slab {
        int32_t part, layer, element;
        int64_t rowElements;
    };
    for (Slab s : {Slab{CTXC_STATE_RECURRENT, 1, CTXC_ELEMENT_FP32, 4}, Slab{CTXC_STATE_CONV, 0, CTXC_ELEMENT_FP16, 6},
                   Slab{CTXC_STATE_BOUNDARY_HIDDEN, 0, CTXC_ELEMENT_FP16, 4}}) {
        size_t rowBytes = 0;
        ASSERT_EQ(ctxc_resident_state_row_bytes(state, s.part, &rowBytes), CTXC_OK);
        std::vector<uint8_t> const bytes = pattern(rowBytes, static_cast<unsigned>(s.part) + 7);
        ASSERT_EQ(ctxc_resident_state_write_row(state, s.part, s.layer, 2, bytes.data(), bytes.size()), CTXC_OK);
        ctxc_device_view_t v = emptyView();
        ASSERT_EQ(ctxc_resident_state_view(state, s.part, s.layer, &v), CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(v.element, s.element);
        ASSERT_EQ(v.ndim, 2);
        EXPECT_EQ(v.shape[0], 3);
        EXPECT_EQ(v.shape[1], s.rowElements);
        EXPECT_EQ(v.bytes, 3 * rowBytes);
        EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(v.data) + 2 * rowBytes, bytes.data(), rowBytes), 0);
    }

    ctxc_snapshot_storage_options_t sto;
    ctxc_snapshot_storage_options_init(&sto);
    sto.recurrent_budget_bytes = 1000;
    ctxc_snapshot_storage_t* storage = nullptr;
    ASSERT_EQ(ctxc_snapshot_storage_create(b, state, nullptr, nullptr, &sto, &storage), CTXC_OK);
    ctxc_snapshot_layout_t layout{sizeof(ctxc_snapshot_layout_t)};
    ASSERT_EQ(ctxc_snapshot_storage_layout(storage, &layout), CTXC_OK);
    ctxc_device_view_t rv = emptyView();
    ASSERT_EQ(ctxc_snapshot_storage_view(storage, CTXC_STATE_RECURRENT, &rv), CTXC_OK);
    EXPECT_EQ(rv.shape[0], layout.recurrent_slots);
    EXPECT_EQ(static_cast<size_t>(rv.shape[1]), layout.recurrent_bytes_per_slot);
    size_t convBytes = 0;
    ASSERT_EQ(ctxc_snapshot_storage_region_bytes(storage, CTXC_STATE_CONV, 0, &convBytes), CTXC_OK);
    std::vector<uint8_t> const conv = pattern(convBytes, 21);
    ASSERT_EQ(ctxc_snapshot_storage_write_region(storage, CTXC_STATE_CONV, 0, 1, conv.data(), conv.size()), CTXC_OK);
    // Slot 1, layer 0: its recurrent row (16 bytes), then its conv row.
    EXPECT_EQ(
        std::memcmp(static_cast<uint8_t*>(rv.data) + layout.recurrent_bytes_per_slot + 16, conv.data(), convBytes), 0);
    ctxc_device_view_t pv = emptyView();
    ASSERT_EQ(ctxc_snapshot_storage_view(storage, CTXC_STATE_PARTIAL_KV, &pv), CTXC_OK);
    EXPECT_EQ(pv.data, nullptr);
    EXPECT_EQ(pv.bytes, 0u);
    EXPECT_EQ(pv.shape[0], 0);

    ctxc_device_buffer_t* buffer = nullptr;
    ASSERT_EQ(createBuffer(b, 40, &buffer), CTXC_OK);
    std::vector<uint8_t> const bytes = pattern(40, 2);
    ASSERT_EQ(ctxc_device_buffer_write(buffer, 0, bytes.data(), bytes.size()), CTXC_OK);
    ctxc_device_view_t bv = emptyView();
    ASSERT_EQ(ctxc_device_buffer_view(buffer, &bv), CTXC_OK);
    EXPECT_EQ(bv.bytes, 40u);
    EXPECT_EQ(std::memcmp(bv.data, bytes.data(), 40), 0);

    for (ctxc_status_t s :
         {ctxc_snapshot_storage_destroy(storage), ctxc_resident_state_destroy(state), ctxc_kv_page_table_destroy(table),
          ctxc_kv_lengths_destroy(lengths), ctxc_device_buffer_destroy(buffer)})
        EXPECT_EQ(s, CTXC_OK);
    EXPECT_EQ(allocated(b), 0u);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceMemory, APoolOverEngineMemoryUsesItInPlaceAndNeverZeroesOrFreesIt) {
    ctxc_device_backend_t* b = cpuBackend();
    std::vector<ctxc_kv_layer_shape_t> const layers = {{1, 2}, {2, 2}};
    ctxc_kv_pool_options_t o = poolOptions(layers, CTXC_DTYPE_FP32);
    size_t required = 0;
    ASSERT_EQ(ctxc_kv_pool_required_bytes(&o, &required), CTXC_OK);
    EngineMemory engine(required + 64);
    std::vector<uint8_t> const initial = engine.copy();
    o.external_data = engine.data;
    o.external_bytes = engine.bytes;
    ctxc_kv_pool_t* pool = nullptr;
    ASSERT_EQ(ctxc_kv_pool_create(b, &o, &pool), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(engine.copy(), initial) << "creating a pool over engine memory changed it";
    EXPECT_EQ(allocated(b), 0u) << "external memory is not the backend's";
    ctxc_device_view_t v = emptyView();
    ASSERT_EQ(ctxc_kv_pool_layer_view(pool, 0, &v), CTXC_OK);
    EXPECT_EQ(v.data, engine.data);
    EXPECT_EQ(v.external, 1);
    size_t footprint = 0;
    ASSERT_EQ(ctxc_kv_pool_footprint_bytes(pool, &footprint), CTXC_OK);
    EXPECT_EQ(footprint, required);

    // The engine's bytes are the pool's: read through the API.
    size_t pageBytes = 0;
    ASSERT_EQ(ctxc_kv_pool_page_bytes(pool, 0, &pageBytes), CTXC_OK);
    std::vector<uint8_t> page(pageBytes);
    ASSERT_EQ(ctxc_kv_pool_read_pages(pool, 0, 2, 1, page.data(), page.size()), CTXC_OK);
    EXPECT_EQ(std::memcmp(page.data(), initial.data() + 2 * pageBytes, pageBytes), 0);
    // And the API's writes land in the engine's memory.
    std::vector<uint8_t> const written = pattern(pageBytes, 99);
    ASSERT_EQ(ctxc_kv_pool_write_pages(pool, 0, 6, 1, written.data(), written.size()), CTXC_OK);
    EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(engine.data) + 6 * pageBytes, written.data(), pageBytes), 0);

    std::vector<uint8_t> const last = engine.copy();
    EXPECT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(engine.copy(), last) << "destroying the pool touched engine memory";
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceMemory, EveryObjectCanBeBuiltOverEngineMemory) {
    ctxc_device_backend_t* b = cpuBackend();

    // Page table: nothing written at creation; every row dirty; the first upload writes the whole table.
    EngineMemory tableMemory(3 * 2 * 2 * 4);
    ctxc_kv_page_table_options_t to;
    ctxc_kv_page_table_options_init(&to);
    to.max_batch = 3;
    to.max_pages_per_seq = 2;
    to.num_pages = 8;
    to.external_data = tableMemory.data;
    to.external_bytes = tableMemory.bytes;
    std::vector<uint8_t> const tableBefore = tableMemory.copy();
    ctxc_kv_page_table_t* table = nullptr;
    ASSERT_EQ(ctxc_kv_page_table_create(b, &to, &table), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(tableMemory.copy(), tableBefore);
    int32_t dirty = 0;
    ASSERT_EQ(ctxc_debug_kv_page_table_is_dirty(table, &dirty), CTXC_OK);
    EXPECT_EQ(dirty, 1);
    int32_t const row[] = {3};
    ASSERT_EQ(ctxc_kv_page_table_set_row(table, 2, row, 1), CTXC_OK);
    ASSERT_EQ(ctxc_kv_page_table_upload(table, nullptr), CTXC_OK);
    auto const* entries = static_cast<int32_t const*>(tableMemory.data);
    EXPECT_EQ(std::vector<int32_t>(entries, entries + 12),
              (std::vector<int32_t>{-1, -1, -1, -1, -1, -1, -1, -1, 3, -1, 11, -1}));

    // KV lengths: the engine's kernel writes a length, the API reads it, and the other way round.
    EngineMemory lengthsMemory(16);
    ctxc_kv_lengths_options_t lo;
    ctxc_kv_lengths_options_init(&lo);
    lo.max_batch = 4;
    lo.external_data = lengthsMemory.data;
    lo.external_bytes = lengthsMemory.bytes;
    ctxc_kv_lengths_t* lengths = nullptr;
    ASSERT_EQ(ctxc_kv_lengths_create(b, &lo, &lengths), CTXC_OK) << ctxc_last_error();
    int32_t const values[] = {1, 2, 3};
    ASSERT_EQ(ctxc_kv_lengths_set(lengths, values, 3), CTXC_OK);
    ASSERT_EQ(ctxc_kv_lengths_add(lengths, 10), CTXC_OK);
    auto* lens = static_cast<int32_t*>(lengthsMemory.data);
    EXPECT_EQ(std::vector<int32_t>(lens, lens + 3), (std::vector<int32_t>{11, 12, 13}));
    lens[0] = 100;
    std::vector<int32_t> read(4);
    size_t count = 0;
    ASSERT_EQ(ctxc_kv_lengths_read(lengths, read.data(), read.size(), &count), CTXC_OK);
    EXPECT_EQ(read[0], 100);

    // Resident state and snapshot slabs: rows captured from the engine's state land in the engine's slab.
    ctxc_resident_state_options_t so = stateOptions();
    size_t stateBytes = 0;
    ASSERT_EQ(ctxc_resident_state_required_bytes(b, &so, &stateBytes), CTXC_OK);
    EngineMemory stateMemory(stateBytes, 8);
    so.external_data = stateMemory.data;
    so.external_bytes = stateMemory.bytes;
    ctxc_resident_state_t* state = nullptr;
    ASSERT_EQ(ctxc_resident_state_create(b, &so, &state), CTXC_OK) << ctxc_last_error();
    ctxc_device_view_t sv = emptyView();
    ASSERT_EQ(ctxc_resident_state_view(state, CTXC_STATE_RECURRENT, 0, &sv), CTXC_OK);
    EXPECT_EQ(sv.data, stateMemory.data);
    std::vector<uint8_t> recurrentRow(16);
    ASSERT_EQ(ctxc_resident_state_read_row(state, CTXC_STATE_RECURRENT, 0, 1, recurrentRow.data(), 16), CTXC_OK);
    EXPECT_EQ(std::memcmp(recurrentRow.data(), static_cast<uint8_t*>(stateMemory.data) + 16, 16), 0);

    ctxc_snapshot_storage_options_t sto;
    ctxc_snapshot_storage_options_init(&sto);
    sto.recurrent_budget_bytes = 2 * (2 * (16 + 12));
    EngineMemory slabMemory(sto.recurrent_budget_bytes, 9);
    sto.external_recurrent_data = slabMemory.data;
    sto.external_recurrent_bytes = slabMemory.bytes;
    ctxc_snapshot_storage_t* storage = nullptr;
    ASSERT_EQ(ctxc_snapshot_storage_create(b, state, nullptr, nullptr, &sto, &storage), CTXC_OK) << ctxc_last_error();
    ctxc_snapshot_transfer_t t;
    ctxc_snapshot_transfer_init(&t);
    t.batch_slot = 1;
    t.recurrent_slot = 1;
    ASSERT_EQ(ctxc_snapshot_storage_capture(storage, &t), CTXC_OK);
    EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(slabMemory.data) + 56, recurrentRow.data(), 16), 0);
    ctxc_device_view_t rv = emptyView();
    ASSERT_EQ(ctxc_snapshot_storage_view(storage, CTXC_STATE_RECURRENT, &rv), CTXC_OK);
    EXPECT_EQ(rv.data, slabMemory.data);
    EXPECT_EQ(rv.external, 1);

    // A buffer: a window of `bytes` on the engine's memory.
    EngineMemory bufferMemory(64, 4);
    ctxc_device_buffer_options_t bo;
    ctxc_device_buffer_options_init(&bo);
    bo.bytes = 32;
    bo.external_data = bufferMemory.data;
    bo.external_bytes = bufferMemory.bytes;
    ctxc_device_buffer_t* buffer = nullptr;
    ASSERT_EQ(ctxc_device_buffer_create(b, &bo, &buffer), CTXC_OK) << ctxc_last_error();
    std::vector<uint8_t> head(32);
    ASSERT_EQ(ctxc_device_buffer_read(buffer, 0, head.data(), 32), CTXC_OK);
    EXPECT_EQ(std::memcmp(head.data(), bufferMemory.data, 32), 0);

    EXPECT_EQ(allocated(b), 0u);
    std::vector<uint8_t> const stateAfter = stateMemory.copy();
    for (ctxc_status_t s :
         {ctxc_snapshot_storage_destroy(storage), ctxc_resident_state_destroy(state), ctxc_kv_page_table_destroy(table),
          ctxc_kv_lengths_destroy(lengths), ctxc_device_buffer_destroy(buffer)})
        EXPECT_EQ(s, CTXC_OK);
    EXPECT_EQ(stateMemory.copy(), stateAfter);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceMemory, AnOptionsStructOfTheFirstReleasedSizeStillAllocates) {
    ctxc_device_backend_t* b = cpuBackend();
    ctxc_kv_lengths_options_t lo;
    ctxc_kv_lengths_options_init(&lo);
    lo.max_batch = 4;
    lo.external_data = reinterpret_cast<void*>(0x1);  // beyond the caller's struct: never read
    lo.struct_size = 8;                               // a caller built before the external fields
    ctxc_kv_lengths_t* lengths = nullptr;
    ASSERT_EQ(ctxc_kv_lengths_create(b, &lo, &lengths), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(allocated(b), 16u);
    lo.struct_size = 12;  // neither the first released size nor the current one
    ctxc_kv_lengths_t* other = nullptr;
    EXPECT_EQ(ctxc_kv_lengths_create(b, &lo, &other), CTXC_E_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ctxc_last_error()).find("struct_size"), std::string::npos);
    EXPECT_EQ(other, nullptr);
    EXPECT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceMemory, TheCpuBackendTakesAndReportsAnyStream) {
    ctxc_device_backend_t* b = cpuBackend();
    void* stream = reinterpret_cast<void*>(0x5);
    ASSERT_EQ(ctxc_device_backend_stream(b, &stream), CTXC_OK);
    EXPECT_EQ(stream, nullptr);
    ASSERT_EQ(ctxc_device_backend_set_stream(b, reinterpret_cast<void*>(0x1234)), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_stream(b, &stream), CTXC_OK);
    EXPECT_EQ(stream, reinterpret_cast<void*>(0x1234));
    ctxc_kv_lengths_t* lengths = nullptr;  // operations still run (and complete on return)
    ASSERT_EQ(createLengths(b, 2, &lengths), CTXC_OK);
    int32_t const values[] = {1, 2};
    ASSERT_EQ(ctxc_kv_lengths_set(lengths, values, 2), CTXC_OK);
    ASSERT_EQ(ctxc_kv_lengths_add(lengths, 1), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_synchronize(b), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_set_stream(b, nullptr), CTXC_OK);
    ASSERT_EQ(ctxc_device_backend_stream(b, &stream), CTXC_OK);
    EXPECT_EQ(stream, nullptr);
    EXPECT_EQ(ctxc_kv_lengths_destroy(lengths), CTXC_OK);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}

TEST(DeviceMemory, ADlpackTensorDescribesTheViewAndKeepsItsMemoryPastTheHandle) {
    ctxc_device_backend_t* b = cpuBackend();
    std::vector<ctxc_kv_layer_shape_t> const layers = {{2, 4}};
    ctxc_kv_pool_options_t o = poolOptions(layers, CTXC_DTYPE_BF16);
    ctxc_kv_pool_t* pool = nullptr;
    ASSERT_EQ(ctxc_kv_pool_create(b, &o, &pool), CTXC_OK);
    size_t pageBytes = 0;
    ASSERT_EQ(ctxc_kv_pool_page_bytes(pool, 0, &pageBytes), CTXC_OK);
    std::vector<uint8_t> const bytes = pattern(8 * pageBytes, 3);
    ASSERT_EQ(ctxc_kv_pool_write_pages(pool, 0, 0, 8, bytes.data(), bytes.size()), CTXC_OK);
    size_t const footprint = allocated(b);
    ctxc_device_view_t v = emptyView();
    ASSERT_EQ(ctxc_kv_pool_layer_view(pool, 0, &v), CTXC_OK);

    void* legacy = nullptr;
    ASSERT_EQ(ctxc_device_view_to_dlpack(&v, pool, 0, &legacy), CTXC_OK) << ctxc_last_error();
    auto* m = static_cast<DLManagedTensor*>(legacy);
    EXPECT_EQ(m->dl_tensor.data, v.data);
    EXPECT_EQ(m->dl_tensor.device.device_type, 1);  // kDLCPU
    EXPECT_EQ(m->dl_tensor.ndim, 5);
    EXPECT_EQ(m->dl_tensor.dtype.code, 4);  // kDLBfloat
    EXPECT_EQ(m->dl_tensor.dtype.bits, 16);
    EXPECT_EQ(m->dl_tensor.dtype.lanes, 1);
    EXPECT_EQ(m->dl_tensor.shape[4], 4);
    EXPECT_EQ(m->dl_tensor.strides, nullptr);

    ctxc_device_view_t bits = v;
    bits.element = CTXC_ELEMENT_UINT16;  // same size: a reinterpretation
    void* versioned = nullptr;
    ASSERT_EQ(ctxc_device_view_to_dlpack(&bits, pool, 1, &versioned), CTXC_OK) << ctxc_last_error();
    auto* mv = static_cast<DLManagedTensorVersioned*>(versioned);
    EXPECT_EQ(mv->major, 1u);
    EXPECT_EQ(mv->flags, 0u);
    EXPECT_EQ(mv->dl_tensor.dtype.code, 1);  // kDLUInt

    ASSERT_EQ(ctxc_kv_pool_destroy(pool), CTXC_OK);
    EXPECT_EQ(allocated(b), footprint) << "an exported tensor keeps the pool's memory";
    EXPECT_EQ(std::memcmp(m->dl_tensor.data, bytes.data(), bytes.size()), 0);
    m->deleter(m);  // what a consumer does
    EXPECT_EQ(allocated(b), footprint);
    ctxc_dlpack_release(versioned, 1);  // what a capsule nobody consumed does
    EXPECT_EQ(allocated(b), 0u);
    ctxc_dlpack_release(nullptr, 0);
    EXPECT_EQ(ctxc_device_backend_destroy(b), CTXC_OK);
}
