// C ABI: resident recurrent state, snapshot storage, and the generic device operations (compaction, execution-
// row rebasing, paged gather, chunked hashing).
#include <algorithm>

#include "api_support.h"
#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/chunked_hash.h"
#include "ctxcache/device/kv_gather.h"
#include "device_handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;
using namespace ctxcache::device;

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

KvGatherRequest toGatherRequest(ctxc_kv_gather_request_t const* request) {
    ctxc_kv_gather_request_t const& r = requireSized(request, "request");
    KvGatherRequest out;
    out.layer = r.layer;
    out.batch = r.batch;
    out.seqLen = r.seq_len;
    out.outDtype = requireDType(r.out_dtype, "request->out_dtype");
    out.kScale = r.k_scale;
    out.vScale = r.v_scale;
    return out;
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

}  // namespace

extern "C" {

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

CTXC_API void ctxc_kv_gather_request_init(ctxc_kv_gather_request_t* request) {
    if (!initSized(request)) return;
    request->out_dtype = CTXC_DTYPE_FP16;
    request->k_scale = 1.0f;
    request->v_scale = 1.0f;
}

CTXC_API ctxc_status_t ctxc_kv_gather_output_bytes(const ctxc_kv_pool_t* pool, const ctxc_kv_gather_request_t* request,
                                                   size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes", [&] {
        return gatherOutputBytes(*requireObject(kvPools(), pool, "pool").pool, toGatherRequest(request));
    });
}

CTXC_API ctxc_status_t ctxc_kv_gather(const ctxc_kv_pool_t* pool, const ctxc_kv_page_table_t* table,
                                      const ctxc_kv_lengths_t* lengths, const ctxc_kv_gather_request_t* request,
                                      ctxc_device_buffer_t* k_out, ctxc_device_buffer_t* v_out) {
    return guard(__func__, [&] {
        KvPagePool const& p = *requireObject(kvPools(), pool, "pool").pool;
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        KvLengths const* l = lengths ? requireObject(kvLengths(), lengths, "lengths").lengths.get() : nullptr;
        BufferObject& k = requireObject(deviceBuffers(), k_out, "k_out");
        BufferObject& v = requireObject(deviceBuffers(), v_out, "v_out");
        if (k_out == v_out) invalidArgument("k_out and v_out are the same buffer");
        if (k.backend.get() != &p.backend() || v.backend.get() != &p.backend())
            throw ContractError("the output buffers live on another backend than the pool");
        KvGatherRequest const r = toGatherRequest(request);
        gatherPagedKv(p, t, l, r, k.buffer->data(), v.buffer->data(), std::min(k.buffer->size(), v.buffer->size()));
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
