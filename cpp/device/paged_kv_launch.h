// What the paged-KV gather (kv_gather.cpp) and scatter (kv_scatter.cpp) share: the checks of the page table
// against the pool and the request's batch, and the fields their launch descriptors (PagedKvGather,
// PagedKvScatter in ctxcache/device/layout.h) fill alike. Internal to cpp/device; none of it is API.
// Threading: none of its own; the callers run on the pool's backend under its contract.
#pragma once

#include <cstdint>
#include <string>

#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/errors.h"

namespace ctxcache::device::detail {

// The table addresses the pool's pages, is uploaded, and has a slot for each of batch's rows; otherwise a
// ContractError whose message starts with function (e.g. "gatherPagedKv: ").
inline void checkTableForPool(KvPagePool const& pool, KvPageTable const& table, int32_t batch, char const* function) {
    if (table.numPages() != pool.numPages())
        throw ContractError(std::string(function) + "the table addresses " + std::to_string(table.numPages()) +
                            " pages, the pool has " + std::to_string(pool.numPages()));
    if (table.dirty())
        throw ContractError(std::string(function) +
                            "the page table has changes not uploaded yet (call upload() first)");
    if (batch > table.maxBatch())
        throw ContractError(std::string(function) + "batch " + std::to_string(batch) + " exceeds the table's " +
                            std::to_string(table.maxBatch()) + " slots");
}

// The fields every paged-KV launch descriptor has, filled from the pool, the table and the request (a
// KvGatherRequest or KvScatterRequest: layer, batch, seqLen): the layer's pool memory, the table's device view and
// the geometry. The caller fills the rest (its buffers, dtypes, layout).
template <class Descriptor, class Request>
void fillPagedKvLaunch(Descriptor& d, KvPagePool const& pool, KvPageTable const& table, Request const& r) {
    KvLayerShape const& shape = pool.geometry().layers[static_cast<size_t>(r.layer)];
    d.pool = pool.layerData(r.layer);
    d.pageTable = table.deviceView();
    d.numPages = pool.numPages();
    d.pageSize = pool.pageSize();
    d.kvHeads = shape.kvHeads;
    d.headDim = shape.headDim;
    d.maxPagesPerSeq = table.maxPagesPerSeq();
    d.batch = r.batch;
    d.seqLen = r.seqLen;
}

}  // namespace ctxcache::device::detail
