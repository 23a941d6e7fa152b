// C ABI of include/ctxcache/c/dense_kv.h: dense K/V scatter into pages and gather out of them, into device
// buffers (ctxc_kv_gather) or over the caller's memory (no device buffer handle), in either dense layout. The checks
// that need the objects are the device layer's (kv_scatter.h, kv_gather.h); this file adds the pointer checks only
// the ABI can make (null, alignment, exact byte count).
#include "ctxcache/c/dense_kv.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "api_support.h"
#include "ctxcache/device/kv_gather.h"
#include "ctxcache/device/kv_scatter.h"
#include "device_handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;
using namespace ctxcache::device;

namespace {

DenseKvLayout requireLayout(int32_t layout, char const* name) {
    if (!isValidKvLayout(layout))
        invalidArgument(std::string(name) + " " + std::to_string(layout) + " is not a CTXC_KV_LAYOUT_* value");
    return static_cast<DenseKvLayout>(layout);
}

KvScatterRequest toScatterRequest(ctxc_kv_scatter_request_t const* request) {
    ctxc_kv_scatter_request_t const& r = requireSized(request, "request");
    KvScatterRequest out;
    out.layer = r.layer;
    out.batch = r.batch;
    out.seqLen = r.seq_len;
    out.firstPosition = r.first_position;
    out.layout = requireLayout(r.layout, "request->layout");
    return out;
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

// Dense caller memory of `bytes` bytes of elements of `elementSize`: non-null unless empty, element-aligned.
void requireDense(void const* pointer, size_t bytes, size_t elementSize, char const* name) {
    if (bytes == 0) return;
    if (!pointer) invalidArgument(std::string(name) + " is NULL but " + std::to_string(bytes) + " bytes are expected");
    if (reinterpret_cast<uintptr_t>(pointer) % elementSize != 0)
        invalidArgument(std::string(name) + " is not aligned to its " + std::to_string(elementSize) + "-byte elements");
}

}  // namespace

extern "C" {

CTXC_API void ctxc_kv_scatter_request_init(ctxc_kv_scatter_request_t* request) {
    if (!initSized(request)) return;
    request->layout = CTXC_KV_LAYOUT_TOKEN_MAJOR;
}

CTXC_API ctxc_status_t ctxc_kv_scatter_input_bytes(const ctxc_kv_pool_t* pool, const ctxc_kv_scatter_request_t* request,
                                                   size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes", [&] {
        return scatterInputBytes(*requireObject(kvPools(), pool, "pool").pool, toScatterRequest(request));
    });
}

CTXC_API ctxc_status_t ctxc_kv_scatter(ctxc_kv_pool_t* pool, const ctxc_kv_page_table_t* table,
                                       const ctxc_kv_scatter_request_t* request, const void* k, const void* v,
                                       size_t bytes) {
    return guard(__func__, [&] {
        KvPagePool& p = *requireObject(kvPools(), pool, "pool").pool;
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        KvScatterRequest const r = toScatterRequest(request);
        size_t const element = dtypeSize(p.dtype());
        requireDense(k, bytes, element, "k");
        requireDense(v, bytes, element, "v");
        scatterPagedKv(p, t, r, k, v, bytes);
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

CTXC_API ctxc_status_t ctxc_kv_gather_into(const ctxc_kv_pool_t* pool, const ctxc_kv_page_table_t* table,
                                           const ctxc_kv_lengths_t* lengths, const ctxc_kv_gather_request_t* request,
                                           int32_t layout, void* k_out, void* v_out, size_t bytes) {
    return guard(__func__, [&] {
        KvPagePool const& p = *requireObject(kvPools(), pool, "pool").pool;
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        KvLengths const* l = lengths ? requireObject(kvLengths(), lengths, "lengths").lengths.get() : nullptr;
        KvGatherRequest r = toGatherRequest(request);
        r.layout = requireLayout(layout, "layout");
        size_t const needed = gatherOutputBytes(p, r);
        if (bytes != needed)
            throw ContractError("gatherPagedKv: the outputs hold " + std::to_string(bytes) + " bytes each, " +
                                std::to_string(needed) + " expected");
        size_t const element = dtypeSize(r.outDtype);
        requireDense(k_out, bytes, element, "k_out");
        requireDense(v_out, bytes, element, "v_out");
        if (bytes > 0 && k_out == v_out) invalidArgument("k_out and v_out are the same memory");
        if (bytes > 0) {
            p.backend().checkExternal(k_out, bytes, "gatherPagedKv: k_out");
            p.backend().checkExternal(v_out, bytes, "gatherPagedKv: v_out");
        }
        gatherPagedKv(p, t, l, r, k_out, v_out, bytes);
    });
}

}  // extern "C"
