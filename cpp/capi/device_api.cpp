// C ABI of include/ctxcache/c/device.h: device backends, buffers, host buffers, KV pools (and their host copies), page
// tables, KV lengths, resident recurrent state, snapshot storage, the generic device operations (compaction,
// execution-row rebasing, chunked hashing) and the device views of them. Dense K/V gather and scatter are
// dense_kv_api.cpp's; the page table's introspection is debug_api.cpp's.
#include "ctxcache/c/device.h"

#include <cstring>
#include <vector>

#include "api_support.h"
#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/chunked_hash.h"
#include "ctxcache/device/device_error.h"
#include "ctxcache/device/kv_host_copy.h"
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

namespace {

SnapshotTransfer toTransfer(ctxc_snapshot_transfer_t const* transfer) {
    ctxc_snapshot_transfer_t const& t = requireSized(transfer, "transfer");
    SnapshotTransfer out;
    out.batchSlot = t.batch_slot;
    out.recurrentSlot = t.recurrent_slot;
    out.partialKvSlot = t.partial_kv_slot;
    out.basePage = t.base_page;
    out.draftPage = t.draft_page;
    out.validTokens = t.valid_tokens;
    return out;
}

ResidentStateGeometry stateGeometry(ctxc_resident_state_options_t const& o) {
    ResidentStateGeometry g;
    g.maxBatch = o.max_batch;
    g.numLayers = o.num_layers;
    g.recurrentHeads = o.recurrent_heads;
    g.recurrentHeadDim = o.recurrent_head_dim;
    g.stateSize = o.state_size;
    g.recurrentDtype = requireDType(o.recurrent_dtype, "options->recurrent_dtype");
    g.convDim = o.conv_dim;
    g.convKernel = o.conv_kernel;
    g.convDtype = requireDType(o.conv_dtype, "options->conv_dtype");
    g.hiddenSize = o.hidden_size;
    return g;
}

// The [offset, offset + bytes) window of a buffer, or CTXC_E_CONTRACT (out of range, like every read) when it
// does not fit.
unsigned char* window(BufferObject& b, size_t offset, size_t bytes, char const* name) {
    size_t const size = b.buffer->size();
    if (offset > size || bytes > size - offset)
        throw ContractError(std::string(name) + ": [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                            ") is outside the buffer's " + std::to_string(size) + " bytes");
    return b.buffer->bytes() + offset;
}

// The host slot layout of a call: the host buffer's object (of the pool's backend) and the checked struct.
HostSlotLayout slotLayout(HostBufferObject const& host, ctxc_host_slot_layout_t const* layout) {
    ctxc_host_slot_layout_t const& l = requireSized(layout, "layout");
    requireNonNegative(l.slot_count, "layout->slot_count");
    return HostSlotLayout{host.buffer.get(), l.slot_bytes, l.payload_offset, l.slot_count};
}

template <class Pool>
void copyPages(Pool* pool, int32_t const* pages, int32_t const* hostSlots, size_t count, ctxc_host_buffer_t const* host,
               ctxc_host_slot_layout_t const* layout, bool toHost) {
    KvPoolObject& p = requireObject(kvPools(), pool, "pool");
    HostBufferObject& h = requireObject(hostBuffers(), host, "host");
    requireArray(pages, count, "pages");
    requireArray(hostSlots, count, "host_slots");
    HostSlotLayout const l = slotLayout(h, layout);
    if (h.backend != p.backend) throw ContractError("host: the host buffer and the pool must share one backend");
    if (toHost) copyPagesToHost(*p.pool, pages, hostSlots, l, static_cast<int32_t>(count));
    else copyPagesFromHost(*p.pool, pages, hostSlots, l, static_cast<int32_t>(count));
}

// [offset, offset + bytes) of a host buffer, or CTXC_E_CONTRACT when it does not fit.
unsigned char* hostWindow(HostBufferObject const& h, size_t offset, size_t bytes, char const* name) {
    size_t const size = h.buffer->size();
    if (offset > size || bytes > size - offset)
        throw ContractError(std::string(name) + ": [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                            ") is outside the host buffer's " + std::to_string(size) + " bytes");
    return h.buffer->bytes() + offset;
}

}  // namespace

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

CTXC_API ctxc_status_t ctxc_device_backend_allocated_host_bytes(const ctxc_device_backend_t* backend,
                                                                size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes", [&] { return backendOf(backend)->allocatedHostBytes(); });
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

// ---- host buffers ---------------------------------------------------------------------------------------------

CTXC_API void ctxc_host_buffer_options_init(ctxc_host_buffer_options_t* options) {
    if (!initSized(options)) return;
}

CTXC_API ctxc_status_t ctxc_host_buffer_create(ctxc_device_backend_t* backend,
                                               const ctxc_host_buffer_options_t* options,
                                               ctxc_host_buffer_t** out_buffer) {
    return guard(__func__, [&] {
        createOnBackend(hostBuffers(), backend, options, out_buffer, "out_buffer",
                        [](DeviceBackend& b, ctxc_host_buffer_options_t const& o) {
            auto object = std::make_unique<HostBufferObject>();
            if (o.external_data || o.external_bytes) {
                if (o.external_bytes < o.bytes)
                    invalidArgument("options->external_bytes " + std::to_string(o.external_bytes) +
                                    " is less than options->bytes " + std::to_string(o.bytes));
                object->buffer = std::make_shared<HostBuffer>(
                    HostBuffer::external(b, ExternalMemory{o.external_data, o.bytes}, "ctxc_host_buffer_create"));
            } else {
                object->buffer = std::make_shared<HostBuffer>(b, o.bytes);
            }
            return object;
        });
    });
}

CTXC_API ctxc_status_t ctxc_host_buffer_destroy(ctxc_host_buffer_t* buffer) {
    return guard(__func__, [&] { destroyObject(hostBuffers(), buffer, "buffer"); });
}

CTXC_API ctxc_status_t ctxc_host_buffer_size(const ctxc_host_buffer_t* buffer, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes",
                   [&] { return requireObject(hostBuffers(), buffer, "buffer").buffer->size(); });
}

CTXC_API ctxc_status_t ctxc_host_buffer_data(const ctxc_host_buffer_t* buffer, void** out_data) {
    return getInto(__func__, out_data, "out_data",
                   [&] { return requireObject(hostBuffers(), buffer, "buffer").buffer->data(); });
}

CTXC_API ctxc_status_t ctxc_host_buffer_write(ctxc_host_buffer_t* buffer, size_t offset, const void* src, size_t size) {
    return guard(__func__, [&] {
        HostBufferObject& h = requireObject(hostBuffers(), buffer, "buffer");
        requireBytes(src, size, "src");
        unsigned char* dst = hostWindow(h, offset, size, "ctxc_host_buffer_write");
        h.backend->synchronize();  // no copy still reads or writes these bytes
        if (size > 0) std::memcpy(dst, src, size);
    });
}

CTXC_API ctxc_status_t ctxc_host_buffer_read(const ctxc_host_buffer_t* buffer, size_t offset, void* dst, size_t size) {
    return guard(__func__, [&] {
        HostBufferObject& h = requireObject(hostBuffers(), buffer, "buffer");
        requireBytes(dst, size, "dst");
        unsigned char const* src = hostWindow(h, offset, size, "ctxc_host_buffer_read");
        h.backend->synchronize();  // every copy into these bytes has landed
        if (size > 0) std::memcpy(dst, src, size);
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

CTXC_API ctxc_status_t ctxc_kv_pool_host_payload_bytes(const ctxc_kv_pool_t* pool, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes",
                   [&] { return hostSlotPayloadBytes(*requireObject(kvPools(), pool, "pool").pool); });
}

CTXC_API void ctxc_host_slot_layout_init(ctxc_host_slot_layout_t* layout) {
    if (!initSized(layout)) return;
}

CTXC_API ctxc_status_t ctxc_kv_pool_copy_pages_to_host(const ctxc_kv_pool_t* pool, const int32_t* pages,
                                                       const int32_t* host_slots, size_t count,
                                                       ctxc_host_buffer_t* host,
                                                       const ctxc_host_slot_layout_t* layout) {
    return guard(__func__, [&] { copyPages(pool, pages, host_slots, count, host, layout, true); });
}

CTXC_API ctxc_status_t ctxc_kv_pool_copy_pages_from_host(ctxc_kv_pool_t* pool, const int32_t* pages,
                                                         const int32_t* host_slots, size_t count,
                                                         const ctxc_host_buffer_t* host,
                                                         const ctxc_host_slot_layout_t* layout) {
    return guard(__func__, [&] { copyPages(pool, pages, host_slots, count, host, layout, false); });
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

CTXC_API ctxc_status_t ctxc_kv_page_table_read_host(const ctxc_kv_page_table_t* table, int32_t* out_entries,
                                                    size_t out_capacity, size_t* out_count) {
    return guard(__func__, [&] {
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        std::vector<int32_t> const entries(t.hostData(), t.hostData() + t.entryCount());
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

// ---- resident state -------------------------------------------------------------------------------------------

CTXC_API void ctxc_resident_state_options_init(ctxc_resident_state_options_t* options) {
    if (!initSized(options)) return;
    options->recurrent_dtype = CTXC_DTYPE_FP32;
    options->conv_dtype = CTXC_DTYPE_FP16;
}

CTXC_API ctxc_status_t ctxc_resident_state_create(ctxc_device_backend_t* backend,
                                                  const ctxc_resident_state_options_t* options,
                                                  ctxc_resident_state_t** out_state) {
    return guard(__func__, [&] {
        createOnBackend(residentStates(), backend, options, out_state, "out_state",
                        [](DeviceBackend& b, ctxc_resident_state_options_t const& o) {
            auto object = std::make_unique<ResidentStateObject>();
            object->state =
                std::make_shared<ResidentState>(b, stateGeometry(o), externalMemory(o.external_data, o.external_bytes));
            return object;
        });
    });
}

CTXC_API ctxc_status_t ctxc_resident_state_destroy(ctxc_resident_state_t* state) {
    return guard(__func__, [&] { destroyObject(residentStates(), state, "state"); });
}

CTXC_API ctxc_status_t ctxc_resident_state_row_bytes(const ctxc_resident_state_t* state, int32_t part,
                                                     size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes", [&] {
        return requireObject(residentStates(), state, "state").state->rowBytes(requirePart(part, "part"));
    });
}

CTXC_API ctxc_status_t ctxc_resident_state_footprint_bytes(const ctxc_resident_state_t* state, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes",
                   [&] { return requireObject(residentStates(), state, "state").state->footprintBytes(); });
}

CTXC_API ctxc_status_t ctxc_resident_state_required_bytes(const ctxc_device_backend_t* backend,
                                                          const ctxc_resident_state_options_t* options,
                                                          size_t* out_bytes) {
    return guard(__func__, [&] {
        size_t& out = requireOut(out_bytes, "out_bytes");
        DeviceBackend const& b = *backendOf(backend);
        out = ResidentState::requiredBytes(b, stateGeometry(readOptions(options, "options")));
    });
}

CTXC_API ctxc_status_t ctxc_resident_state_view(const ctxc_resident_state_t* state, int32_t part, int32_t layer,
                                                ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        ResidentState const& s = *requireObject(residentStates(), state, "state").state;
        StatePart const p = requirePart(part, "part");
        requireSized(out_view, "out_view");
        CompactTensor const slab = s.slab(p, layer);  // checks the part and the layer
        int32_t const element = p == StatePart::kRecurrent ? static_cast<int32_t>(s.geometry().recurrentDtype)
                                : p == StatePart::kConv    ? static_cast<int32_t>(s.geometry().convDtype)
                                                           : CTXC_ELEMENT_FP16;
        fillView(out_view, s.backend(), element, slab.base,
                 {s.maxBatch(), static_cast<int64_t>(slab.rowBytes / elementSize(element))}, s.external());
    });
}

CTXC_API ctxc_status_t ctxc_resident_state_memory_view(const ctxc_resident_state_t* state,
                                                       ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        ResidentState const& s = *requireObject(residentStates(), state, "state").state;
        fillView(out_view, s.backend(), CTXC_ELEMENT_UINT8, s.data(), {static_cast<int64_t>(s.footprintBytes())},
                 s.external());
    });
}

CTXC_API ctxc_status_t ctxc_resident_state_write_row(ctxc_resident_state_t* state, int32_t part, int32_t layer,
                                                     int32_t slot, const void* src, size_t size) {
    return guard(__func__, [&] {
        ResidentState& s = *requireObject(residentStates(), state, "state").state;
        requireBytes(src, size, "src");
        s.writeRow(requirePart(part, "part"), layer, slot, src, size);
    });
}

CTXC_API ctxc_status_t ctxc_resident_state_read_row(const ctxc_resident_state_t* state, int32_t part, int32_t layer,
                                                    int32_t slot, void* dst, size_t size) {
    return guard(__func__, [&] {
        ResidentState const& s = *requireObject(residentStates(), state, "state").state;
        requireBytes(dst, size, "dst");
        s.readRow(requirePart(part, "part"), layer, slot, dst, size);
    });
}

CTXC_API ctxc_status_t ctxc_resident_state_zero_slot(ctxc_resident_state_t* state, int32_t slot) {
    return guard(__func__, [&] { requireObject(residentStates(), state, "state").state->zeroSlot(slot); });
}

CTXC_API ctxc_status_t ctxc_resident_state_compact(ctxc_resident_state_t* state, const int32_t* old_to_new,
                                                   int32_t old_batch, int32_t new_batch) {
    return guard(__func__, [&] {
        ResidentState& s = *requireObject(residentStates(), state, "state").state;
        requireMap(old_to_new, old_batch);
        s.compact(old_to_new, old_batch, new_batch);
    });
}

// ---- snapshot storage -----------------------------------------------------------------------------------------

CTXC_API void ctxc_snapshot_storage_options_init(ctxc_snapshot_storage_options_t* options) {
    if (!initSized(options)) return;
}

CTXC_API void ctxc_snapshot_transfer_init(ctxc_snapshot_transfer_t* transfer) {
    if (!transfer) return;
    *transfer = ctxc_snapshot_transfer_t{sizeof(ctxc_snapshot_transfer_t), -1, -1, -1, -1, -1, 0, 0};
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_create(ctxc_device_backend_t* backend, ctxc_resident_state_t* state,
                                                    ctxc_kv_pool_t* base_pool, ctxc_kv_pool_t* draft_pool,
                                                    const ctxc_snapshot_storage_options_t* options,
                                                    ctxc_snapshot_storage_t** out_storage) {
    return guard(__func__, [&] {
        createOnBackend(snapshotStorages(), backend, options, out_storage, "out_storage",
                        [&](DeviceBackend& b, ctxc_snapshot_storage_options_t const& o) {
            auto object = std::make_unique<SnapshotStorageObject>();
            if (state) object->state = requireObject(residentStates(), state, "state").state;
            if (base_pool) object->base = requireObject(kvPools(), base_pool, "base_pool").pool;
            if (draft_pool) object->draft = requireObject(kvPools(), draft_pool, "draft_pool").pool;
            SnapshotBudgets budgets;
            budgets.recurrentBytes = o.recurrent_budget_bytes;
            budgets.partialKvBytes = o.partial_kv_budget_bytes;
            budgets.boundaryHidden = requireBool(o.boundary_hidden, "options->boundary_hidden");
            budgets.recurrentMemory = externalMemory(o.external_recurrent_data, o.external_recurrent_bytes);
            budgets.partialKvMemory = externalMemory(o.external_partial_kv_data, o.external_partial_kv_bytes);
            object->storage = std::make_shared<SnapshotStorage>(b, object->state.get(), object->base.get(),
                                                                object->draft.get(), budgets);
            return object;
        });
    });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_destroy(ctxc_snapshot_storage_t* storage) {
    return guard(__func__, [&] { destroyObject(snapshotStorages(), storage, "storage"); });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_layout(const ctxc_snapshot_storage_t* storage,
                                                    ctxc_snapshot_layout_t* out_layout) {
    return guard(__func__, [&] {
        ctxc_snapshot_layout_t& out = requireSized(out_layout, "out_layout");
        SnapshotStorage const& s = *requireObject(snapshotStorages(), storage, "storage").storage;
        out.recurrent_bytes_per_slot = s.recurrentBytesPerSlot();
        out.partial_kv_bytes_per_slot = s.partialKvBytesPerSlot();
        out.recurrent_slots = s.recurrentSlots();
        out.partial_kv_slots = s.partialKvSlots();
        out.footprint_bytes = s.footprintBytes();
        out.max_descriptors = s.maxDescriptors();
    });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_capture(ctxc_snapshot_storage_t* storage,
                                                     const ctxc_snapshot_transfer_t* transfer) {
    return guard(__func__, [&] {
        SnapshotStorage& s = *requireObject(snapshotStorages(), storage, "storage").storage;
        s.capture(toTransfer(transfer));
    });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_restore(ctxc_snapshot_storage_t* storage,
                                                     const ctxc_snapshot_transfer_t* transfer) {
    return guard(__func__, [&] {
        SnapshotStorage& s = *requireObject(snapshotStorages(), storage, "storage").storage;
        s.restore(toTransfer(transfer));
    });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_region_bytes(const ctxc_snapshot_storage_t* storage, int32_t part,
                                                          int32_t layer, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes", [&] {
        return requireObject(snapshotStorages(), storage, "storage")
            .storage->regionBytes(requirePart(part, "part"), layer);
    });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_write_region(ctxc_snapshot_storage_t* storage, int32_t part, int32_t layer,
                                                          int32_t slot, const void* src, size_t size) {
    return guard(__func__, [&] {
        SnapshotStorage& s = *requireObject(snapshotStorages(), storage, "storage").storage;
        requireBytes(src, size, "src");
        s.writeRegion(requirePart(part, "part"), layer, slot, src, size);
    });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_read_region(const ctxc_snapshot_storage_t* storage, int32_t part,
                                                         int32_t layer, int32_t slot, void* dst, size_t size) {
    return guard(__func__, [&] {
        SnapshotStorage const& s = *requireObject(snapshotStorages(), storage, "storage").storage;
        requireBytes(dst, size, "dst");
        s.readRegion(requirePart(part, "part"), layer, slot, dst, size);
    });
}

CTXC_API ctxc_status_t ctxc_snapshot_storage_view(const ctxc_snapshot_storage_t* storage, int32_t part,
                                                  ctxc_device_view_t* out_view) {
    return guard(__func__, [&] {
        SnapshotStorageObject const& o = requireObject(snapshotStorages(), storage, "storage");
        SnapshotStorage const& s = *o.storage;
        StatePart const p = requirePart(part, "part");
        if (p != StatePart::kRecurrent && p != StatePart::kPartialKv)
            throw ContractError("part " + std::to_string(part) +
                                " names no slab: CTXC_STATE_RECURRENT or CTXC_STATE_PARTIAL_KV");
        bool const recurrent = p == StatePart::kRecurrent;
        fillView(out_view, *o.backend, CTXC_ELEMENT_UINT8, recurrent ? s.recurrentData() : s.partialKvData(),
                 {recurrent ? s.recurrentSlots() : s.partialKvSlots(),
                  static_cast<int64_t>(recurrent ? s.recurrentBytesPerSlot() : s.partialKvBytesPerSlot())},
                 recurrent ? s.recurrentExternal() : s.partialKvExternal());
    });
}

// ---- generic operations ---------------------------------------------------------------------------------------

CTXC_API ctxc_status_t ctxc_device_compact_rows(ctxc_device_buffer_t* buffer, size_t offset, size_t row_bytes,
                                                int32_t rows, const int32_t* old_to_new, int32_t old_batch,
                                                int32_t new_batch) {
    return guard(__func__, [&] {
        BufferObject& b = requireObject(deviceBuffers(), buffer, "buffer");
        requireNonNegative(rows, "rows");
        requireMap(old_to_new, old_batch);
        if (row_bytes == 0) invalidArgument("row_bytes is 0");
        if (static_cast<size_t>(rows) > SIZE_MAX / row_bytes) invalidArgument("rows * row_bytes overflows");
        unsigned char* base = window(b, offset, static_cast<size_t>(rows) * row_bytes, "rows");
        compactBatch(*b.backend, base, row_bytes, rows, old_to_new, old_batch, new_batch);
    });
}

CTXC_API ctxc_status_t ctxc_device_rebase_execution_rows(ctxc_device_buffer_t* buffer, size_t offset, size_t count,
                                                         const int32_t* old_to_new, int32_t old_batch,
                                                         int32_t new_batch, int32_t rows_per_sequence) {
    return guard(__func__, [&] {
        BufferObject& b = requireObject(deviceBuffers(), buffer, "buffer");
        requireMap(old_to_new, old_batch);
        if (count > SIZE_MAX / sizeof(int32_t)) invalidArgument("count overflows");
        unsigned char* base = window(b, offset, count * sizeof(int32_t), "indices");
        if (reinterpret_cast<uintptr_t>(base) % alignof(int32_t) != 0) invalidArgument("offset is not 4-byte aligned");
        rebaseExecutionRowIndices(*b.backend, reinterpret_cast<int32_t*>(base), static_cast<int64_t>(count), old_to_new,
                                  old_batch, new_batch, rows_per_sequence);
    });
}

CTXC_API ctxc_status_t ctxc_device_hash_chunked(const ctxc_device_buffer_t* buffer, size_t offset, size_t size,
                                                uint32_t num_chunks, ctxc_hash128_t* out_hash) {
    return guard(__func__, [&] {
        ctxc_hash128_t& out = requireOut(out_hash, "out_hash");
        BufferObject& b = requireObject(deviceBuffers(), buffer, "buffer");
        unsigned char* base = window(b, offset, size, "bytes");
        if (num_chunks == 0) invalidArgument("num_chunks must be positive");
        thread_local std::vector<Hash128> partials;
        out = fromHash(chunkedFnv1a128(*b.backend, base, size, num_chunks, &partials));
    });
}

CTXC_API ctxc_status_t ctxc_hash_chunked_host(const void* bytes, size_t size, uint32_t num_chunks,
                                              ctxc_hash128_t* out_hash) {
    return guard(__func__, [&] {
        ctxc_hash128_t& out = requireOut(out_hash, "out_hash");
        requireBytes(bytes, size, "bytes");
        if (num_chunks == 0) invalidArgument("num_chunks must be positive");
        out = fromHash(chunkedFnv1a128Host(bytes, size, num_chunks));
    });
}

}  // extern "C"
