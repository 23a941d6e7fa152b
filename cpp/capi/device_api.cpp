// C ABI: device backends, buffers, KV pools, page tables and KV lengths, and the device views of them.
#include <vector>

#include "api_support.h"
#include "ctxcache/device/device_error.h"
#include "device_handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;
using namespace ctxcache::device;

namespace ctxcache::capi {

DType requireDType(int32_t value, char const* name) {
    if (!isValidDType(value))
        invalidArgument(std::string(name) + " " + std::to_string(value) + " is not a CTXC_DTYPE_* value");
    return static_cast<DType>(value);
}

StatePart requirePart(int32_t value, char const* name) {
    if (value < CTXC_STATE_RECURRENT || value > CTXC_STATE_DRAFT_PARTIAL_KV)
        invalidArgument(std::string(name) + " " + std::to_string(value) + " is not a CTXC_STATE_* value");
    return static_cast<StatePart>(value);
}

KvPoolGeometry poolGeometry(ctxc_kv_pool_options_t const& o) {
    requireArray(o.layers, o.layer_count, "options->layers");
    KvPoolGeometry geometry;
    geometry.numPages = o.num_pages;
    geometry.pageSize = o.page_size;
    geometry.dtype = requireDType(o.dtype, "options->dtype");
    for (size_t i = 0; i < o.layer_count; ++i)
        geometry.layers.push_back(KvLayerShape{o.layers[i].kv_heads, o.layers[i].head_dim});
    return geometry;
}

size_t elementSize(int32_t element) {
    switch (element) {
        case CTXC_ELEMENT_FP16:
        case CTXC_ELEMENT_BF16:
        case CTXC_ELEMENT_UINT16: return 2;
        case CTXC_ELEMENT_FP8_E4M3:
        case CTXC_ELEMENT_UINT8: return 1;
        case CTXC_ELEMENT_FP32:
        case CTXC_ELEMENT_INT32: return 4;
        default: invalidArgument("element " + std::to_string(element) + " is not a CTXC_ELEMENT_* value");
    }
}

void fillView(ctxc_device_view_t* out, DeviceBackend const& b, int32_t element, void const* data,
              std::initializer_list<int64_t> shape, bool external) {
    ctxc_device_view_t& v = requireSized(out, "out_view");
    uint32_t const size = v.struct_size;
    v = ctxc_device_view_t{};
    v.struct_size = size;
    v.element = element;
    v.backend = static_cast<int32_t>(b.kind());
    v.device = b.kind() == BackendKind::kCuda ? b.options().device : 0;
    v.ndim = static_cast<int32_t>(shape.size());
    v.external = external ? 1 : 0;
    size_t bytes = elementSize(element);
    int32_t i = 0;
    for (int64_t extent : shape) {
        v.shape[i++] = extent;
        bytes *= static_cast<size_t>(extent);
    }
    v.bytes = bytes;
    v.data = bytes > 0 ? const_cast<void*>(data) : nullptr;
}

}  // namespace ctxcache::capi

static_assert(int{CTXC_ELEMENT_FP16} == int{CTXC_DTYPE_FP16} && int{CTXC_ELEMENT_BF16} == int{CTXC_DTYPE_BF16} &&
                  int{CTXC_ELEMENT_FP8_E4M3} == int{CTXC_DTYPE_FP8_E4M3} &&
                  int{CTXC_ELEMENT_FP32} == int{CTXC_DTYPE_FP32},
              "a storage dtype is its own view element");

extern "C" {

// ---- backends -------------------------------------------------------------------------------------------------

CTXC_API void ctxc_device_backend_options_init(ctxc_device_backend_options_t* options) {
    if (!options) return;
    *options = ctxc_device_backend_options_t{};
    BackendOptions const defaults;
    options->struct_size = sizeof(ctxc_device_backend_options_t);
    options->kind = CTXC_BACKEND_AUTO;
    options->device = defaults.device;
    options->max_hash_chunks = defaults.maxHashChunks;
    options->max_table_bytes = defaults.maxTableBytes;
    options->stream = nullptr;
}

CTXC_API ctxc_status_t ctxc_device_backend_create(const ctxc_device_backend_options_t* options,
                                                  ctxc_device_backend_t** out_backend) {
    return guard(__func__, [&] {
        requireOut(out_backend, "out_backend") = nullptr;
        ctxc_device_backend_options_t const& o = requireSized(options, "options");
        if (o.kind < CTXC_BACKEND_AUTO || o.kind > CTXC_BACKEND_CUDA)
            invalidArgument("options->kind " + std::to_string(o.kind) + " is not a CTXC_BACKEND_* value");
        BackendOptions bo;
        bo.device = o.device;
        bo.maxHashChunks = o.max_hash_chunks;
        bo.maxTableBytes = o.max_table_bytes;
        bo.stream = o.stream;
        std::unique_ptr<DeviceBackend> backend;
        try {
            backend = createBackend(static_cast<BackendKind>(o.kind), bo);
        } catch (BackendUnavailableError const& e) {
            throw ApiError(CTXC_E_UNSUPPORTED, e.what());
        }
        auto object = std::make_unique<BackendObject>();
        object->backend = std::move(backend);
        *out_backend = static_cast<ctxc_device_backend_t*>(deviceBackends().add(std::move(object)));
    });
}

CTXC_API ctxc_status_t ctxc_device_backend_destroy(ctxc_device_backend_t* backend) {
    return guard(__func__, [&] { destroyObject(deviceBackends(), backend, "backend"); });
}

CTXC_API ctxc_status_t ctxc_device_backend_kind(const ctxc_device_backend_t* backend, int32_t* out_kind) {
    return getInto(__func__, out_kind, "out_kind", [&] { return static_cast<int32_t>(backendOf(backend)->kind()); });
}

CTXC_API ctxc_status_t ctxc_device_backend_synchronize(ctxc_device_backend_t* backend) {
    return guard(__func__, [&] { backendOf(backend)->synchronize(); });
}

CTXC_API ctxc_status_t ctxc_device_backend_counters(const ctxc_device_backend_t* backend,
                                                    ctxc_launch_counters_t* out_counters) {
    return guard(__func__, [&] {
        ctxc_launch_counters_t& out = requireSized(out_counters, "out_counters");
        LaunchCounters const c = backendOf(backend)->counters();
        out.kernels = c.kernels;
        out.transfers = c.transfers;
    });
}

CTXC_API ctxc_status_t ctxc_device_backend_allocated_bytes(const ctxc_device_backend_t* backend, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes", [&] { return backendOf(backend)->allocatedBytes(); });
}

CTXC_API ctxc_status_t ctxc_device_backend_set_stream(ctxc_device_backend_t* backend, void* stream) {
    return guard(__func__, [&] { backendOf(backend)->setStream(stream); });
}

CTXC_API ctxc_status_t ctxc_device_backend_stream(const ctxc_device_backend_t* backend, void** out_stream) {
    return getInto(__func__, out_stream, "out_stream", [&] { return backendOf(backend)->stream(); });
}

// ---- buffers --------------------------------------------------------------------------------------------------

CTXC_API void ctxc_device_buffer_options_init(ctxc_device_buffer_options_t* options) {
    if (!initSized(options)) return;
}

CTXC_API ctxc_status_t ctxc_device_buffer_create(ctxc_device_backend_t* backend,
                                                 const ctxc_device_buffer_options_t* options,
                                                 ctxc_device_buffer_t** out_buffer) {
    return guard(__func__, [&] {
        createOnBackend(deviceBuffers(), backend, options, out_buffer, "out_buffer",
                        [](DeviceBackend& b, ctxc_device_buffer_options_t const& o) {
            auto object = std::make_unique<BufferObject>();
            object->buffer = std::make_shared<DeviceBuffer>(
                DeviceBuffer::make(b, externalMemory(o.external_data, o.external_bytes), o.bytes, kExternalAlignment,
                                   "ctxc_device_buffer_create"));
            return object;
        });
    });
}

CTXC_API ctxc_status_t ctxc_device_buffer_destroy(ctxc_device_buffer_t* buffer) {
    return guard(__func__, [&] { destroyObject(deviceBuffers(), buffer, "buffer"); });
}

CTXC_API ctxc_status_t ctxc_device_buffer_size(const ctxc_device_buffer_t* buffer, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes",
                   [&] { return requireObject(deviceBuffers(), buffer, "buffer").buffer->size(); });
}

CTXC_API ctxc_status_t ctxc_device_buffer_write(ctxc_device_buffer_t* buffer, size_t offset, const void* src,
                                                size_t size) {
    return guard(__func__, [&] {
        BufferObject& b = requireObject(deviceBuffers(), buffer, "buffer");
        requireBytes(src, size, "src");
        b.buffer->write(offset, src, size);
    });
}

CTXC_API ctxc_status_t ctxc_device_buffer_read(const ctxc_device_buffer_t* buffer, size_t offset, void* dst,
                                               size_t size) {
    return guard(__func__, [&] {
        BufferObject& b = requireObject(deviceBuffers(), buffer, "buffer");
        requireBytes(dst, size, "dst");
        b.buffer->read(offset, dst, size);
    });
}

CTXC_API ctxc_status_t ctxc_device_buffer_view(const ctxc_device_buffer_t* buffer, ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        BufferObject const& b = requireObject(deviceBuffers(), buffer, "buffer");
        fillView(out_view, *b.backend, CTXC_ELEMENT_UINT8, b.buffer->data(), {static_cast<int64_t>(b.buffer->size())},
                 !b.buffer->owning());
    });
}

// ---- KV pools -------------------------------------------------------------------------------------------------

CTXC_API void ctxc_kv_pool_options_init(ctxc_kv_pool_options_t* options) {
    if (!initSized(options)) return;
    options->page_size = 128;
    options->dtype = CTXC_DTYPE_FP16;
}

CTXC_API ctxc_status_t ctxc_kv_pool_create(ctxc_device_backend_t* backend, const ctxc_kv_pool_options_t* options,
                                           ctxc_kv_pool_t** out_pool) {
    return guard(__func__, [&] {
        createOnBackend(kvPools(), backend, options, out_pool, "out_pool",
                        [](DeviceBackend& b, ctxc_kv_pool_options_t const& o) {
            auto object = std::make_unique<KvPoolObject>();
            object->pool =
                std::make_shared<KvPagePool>(b, poolGeometry(o), externalMemory(o.external_data, o.external_bytes));
            return object;
        });
    });
}

CTXC_API ctxc_status_t ctxc_kv_pool_destroy(ctxc_kv_pool_t* pool) {
    return guard(__func__, [&] { destroyObject(kvPools(), pool, "pool"); });
}

CTXC_API ctxc_status_t ctxc_kv_pool_page_bytes(const ctxc_kv_pool_t* pool, int32_t layer, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes",
                   [&] { return requireObject(kvPools(), pool, "pool").pool->pageBytes(layer); });
}

CTXC_API ctxc_status_t ctxc_kv_pool_footprint_bytes(const ctxc_kv_pool_t* pool, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes",
                   [&] { return requireObject(kvPools(), pool, "pool").pool->footprintBytes(); });
}

CTXC_API ctxc_status_t ctxc_kv_pool_required_bytes(const ctxc_kv_pool_options_t* options, size_t* out_bytes) {
    return guard(__func__, [&] {
        size_t& out = requireOut(out_bytes, "out_bytes");
        out = KvPagePool::requiredBytes(poolGeometry(readOptions(options, "options")));
    });
}

CTXC_API ctxc_status_t ctxc_kv_pool_layer_view(const ctxc_kv_pool_t* pool, int32_t layer,
                                               ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        KvPagePool const& p = *requireObject(kvPools(), pool, "pool").pool;
        requireSized(out_view, "out_view");
        void const* data = p.layerData(layer);  // checks the layer
        KvLayerShape const& l = p.geometry().layers[static_cast<size_t>(layer)];
        fillView(out_view, p.backend(), static_cast<int32_t>(p.dtype()), data,
                 {2, p.numPages(), p.pageSize(), l.kvHeads, l.headDim}, p.external());
    });
}

CTXC_API ctxc_status_t ctxc_kv_pool_memory_view(const ctxc_kv_pool_t* pool, ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        KvPagePool const& p = *requireObject(kvPools(), pool, "pool").pool;
        fillView(out_view, p.backend(), CTXC_ELEMENT_UINT8, p.data(), {static_cast<int64_t>(p.footprintBytes())},
                 p.external());
    });
}

CTXC_API ctxc_status_t ctxc_kv_pool_write_pages(ctxc_kv_pool_t* pool, int32_t layer, int32_t first_flat_page,
                                                int32_t page_count, const void* src, size_t size) {
    return guard(__func__, [&] {
        KvPoolObject& p = requireObject(kvPools(), pool, "pool");
        requireBytes(src, size, "src");
        p.pool->writePages(layer, first_flat_page, page_count, src, size);
    });
}

CTXC_API ctxc_status_t ctxc_kv_pool_read_pages(const ctxc_kv_pool_t* pool, int32_t layer, int32_t first_flat_page,
                                               int32_t page_count, void* dst, size_t size) {
    return guard(__func__, [&] {
        KvPoolObject& p = requireObject(kvPools(), pool, "pool");
        requireBytes(dst, size, "dst");
        p.pool->readPages(layer, first_flat_page, page_count, dst, size);
    });
}

// ---- page tables ----------------------------------------------------------------------------------------------

CTXC_API void ctxc_kv_page_table_options_init(ctxc_kv_page_table_options_t* options) {
    if (!initSized(options)) return;
    options->mode = CTXC_PAGE_TABLE_DENSE;
}

CTXC_API ctxc_status_t ctxc_kv_page_table_create(ctxc_device_backend_t* backend,
                                                 const ctxc_kv_page_table_options_t* options,
                                                 ctxc_kv_page_table_t** out_table) {
    return guard(__func__, [&] {
        createOnBackend(pageTables(), backend, options, out_table, "out_table",
                        [](DeviceBackend& b, ctxc_kv_page_table_options_t const& o) {
            if (o.mode != CTXC_PAGE_TABLE_DENSE && o.mode != CTXC_PAGE_TABLE_SPARSE_WINDOW)
                invalidArgument("options->mode " + std::to_string(o.mode) + " is not a CTXC_PAGE_TABLE_* value");
            auto object = std::make_unique<PageTableObject>();
            object->table = std::make_shared<KvPageTable>(b, o.max_batch, o.max_pages_per_seq, o.num_pages,
                                                          static_cast<KvPageTable::Mode>(o.mode),
                                                          externalMemory(o.external_data, o.external_bytes));
            return object;
        });
    });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_destroy(ctxc_kv_page_table_t* table) {
    return guard(__func__, [&] { destroyObject(pageTables(), table, "table"); });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_set_row(ctxc_kv_page_table_t* table, int32_t slot, const int32_t* k_pages,
                                                  size_t count) {
    return guard(__func__, [&] {
        KvPageTable& t = *requireObject(pageTables(), table, "table").table;
        requireArray(k_pages, count, "k_pages");
        t.setRow(slot, k_pages, static_cast<int32_t>(count));
    });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_clear_row(ctxc_kv_page_table_t* table, int32_t slot) {
    return guard(__func__, [&] { requireObject(pageTables(), table, "table").table->clearRow(slot); });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_set_identity(ctxc_kv_page_table_t* table) {
    return guard(__func__, [&] { requireObject(pageTables(), table, "table").table->setIdentity(); });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_set_entry(ctxc_kv_page_table_t* table, int32_t slot, int32_t logical_page,
                                                    int32_t k_page) {
    return guard(__func__,
                 [&] { requireObject(pageTables(), table, "table").table->setEntry(slot, logical_page, k_page); });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_clear_entry(ctxc_kv_page_table_t* table, int32_t slot, int32_t logical_page) {
    return guard(__func__, [&] { requireObject(pageTables(), table, "table").table->clearEntry(slot, logical_page); });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_compact_rows(ctxc_kv_page_table_t* table, const int32_t* old_to_new,
                                                       int32_t old_batch, int32_t new_batch) {
    return guard(__func__, [&] {
        KvPageTable& t = *requireObject(pageTables(), table, "table").table;
        requireMap(old_to_new, old_batch);
        t.compactRows(old_to_new, old_batch, new_batch);
    });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_check_invariants(const ctxc_kv_page_table_t* table) {
    return guard(__func__, [&] {
        std::string why;
        if (!requireObject(pageTables(), table, "table").table->checkInvariants(&why))
            throw ApiError(CTXC_E_INVARIANT, why);
    });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_upload(ctxc_kv_page_table_t* table, int32_t* out_copies) {
    return guard(__func__, [&] {
        int32_t const copies = requireObject(pageTables(), table, "table").table->upload();
        if (out_copies) *out_copies = copies;
    });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_device_view(const ctxc_kv_page_table_t* table, ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        fillView(out_view, t.backend(), CTXC_ELEMENT_INT32, t.deviceView(), {t.maxBatch(), 2, t.maxPagesPerSeq()},
                 t.external());
    });
}

CTXC_API ctxc_status_t ctxc_debug_kv_page_table_is_dirty(const ctxc_kv_page_table_t* table, int32_t* out_dirty) {
    return getInto(__func__, out_dirty, "out_dirty",
                   [&] { return requireObject(pageTables(), table, "table").table->dirty() ? 1 : 0; });
}

CTXC_API ctxc_status_t ctxc_kv_page_table_read_host(const ctxc_kv_page_table_t* table, int32_t* out_entries,
                                                    size_t out_capacity, size_t* out_count) {
    return guard(__func__, [&] {
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        std::vector<int32_t> const entries(t.hostData(), t.hostData() + t.entryCount());
        return copyOut(entries, out_entries, out_capacity, out_count, "out_entries");
    });
}

CTXC_API ctxc_status_t ctxc_debug_kv_page_table_read_device(const ctxc_kv_page_table_t* table, int32_t* out_entries,
                                                            size_t out_capacity, size_t* out_count) {
    return guard(__func__, [&] {
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        std::vector<int32_t> entries(t.entryCount());
        if (out_capacity >= entries.size() && out_entries)
            t.backend().download(entries.data(), t.deviceView(), entries.size() * sizeof(int32_t));
        return copyOut(entries, out_entries, out_capacity, out_count, "out_entries");
    });
}

// ---- KV lengths -----------------------------------------------------------------------------------------------

CTXC_API void ctxc_kv_lengths_options_init(ctxc_kv_lengths_options_t* options) {
    if (!initSized(options)) return;
}

CTXC_API ctxc_status_t ctxc_kv_lengths_create(ctxc_device_backend_t* backend, const ctxc_kv_lengths_options_t* options,
                                              ctxc_kv_lengths_t** out_lengths) {
    return guard(__func__, [&] {
        createOnBackend(kvLengths(), backend, options, out_lengths, "out_lengths",
                        [](DeviceBackend& b, ctxc_kv_lengths_options_t const& o) {
            auto object = std::make_unique<KvLengthsObject>();
            object->lengths =
                std::make_shared<KvLengths>(b, o.max_batch, externalMemory(o.external_data, o.external_bytes));
            return object;
        });
    });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_destroy(ctxc_kv_lengths_t* lengths) {
    return guard(__func__, [&] { destroyObject(kvLengths(), lengths, "lengths"); });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_set(ctxc_kv_lengths_t* lengths, const int32_t* values, size_t count) {
    return guard(__func__, [&] {
        KvLengths& l = *requireObject(kvLengths(), lengths, "lengths").lengths;
        requireArray(values, count, "values");
        l.set(values, static_cast<int32_t>(count));
    });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_add(ctxc_kv_lengths_t* lengths, int32_t increment) {
    return guard(__func__, [&] { requireObject(kvLengths(), lengths, "lengths").lengths->add(increment); });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_add_lengths(ctxc_kv_lengths_t* lengths, const ctxc_kv_lengths_t* increments) {
    return guard(__func__, [&] {
        KvLengths& l = *requireObject(kvLengths(), lengths, "lengths").lengths;
        KvLengths const& inc = *requireObject(kvLengths(), increments, "increments").lengths;
        l.add(inc);
    });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_compact(ctxc_kv_lengths_t* lengths, const int32_t* old_to_new, int32_t old_batch,
                                               int32_t new_batch) {
    return guard(__func__, [&] {
        KvLengths& l = *requireObject(kvLengths(), lengths, "lengths").lengths;
        requireMap(old_to_new, old_batch);
        l.compact(old_to_new, old_batch, new_batch);
    });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_device_view(const ctxc_kv_lengths_t* lengths, ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        KvLengths const& l = *requireObject(kvLengths(), lengths, "lengths").lengths;
        fillView(out_view, l.backend(), CTXC_ELEMENT_INT32, l.data(), {l.maxBatch()}, l.external());
    });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_active_batch(const ctxc_kv_lengths_t* lengths, int32_t* out_active_batch) {
    return getInto(__func__, out_active_batch, "out_active_batch",
                   [&] { return requireObject(kvLengths(), lengths, "lengths").lengths->activeBatch(); });
}

CTXC_API ctxc_status_t ctxc_kv_lengths_read(const ctxc_kv_lengths_t* lengths, int32_t* out_values, size_t out_capacity,
                                            size_t* out_count) {
    return guard(__func__, [&] {
        KvLengths const& l = *requireObject(kvLengths(), lengths, "lengths").lengths;
        std::vector<int32_t> values;
        if (out_capacity >= static_cast<size_t>(l.activeBatch()) && out_values) values = l.read();
        else values.resize(static_cast<size_t>(l.activeBatch()));
        return copyOut(values, out_values, out_capacity, out_count, "out_values");
    });
}

}  // extern "C"
