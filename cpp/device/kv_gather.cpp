// Paged-to-dense gather: cross-object checks, then the backend's single launch.
#include "ctxcache/device/kv_gather.h"

#include <limits>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {
[[noreturn]] void fail(std::string const& why) { throw ContractError("gatherPagedKv: " + why); }
}  // namespace

size_t gatherOutputBytes(KvPagePool const& pool, KvGatherRequest const& r) {
    if (!isValidDType(static_cast<int32_t>(r.outDtype))) fail("unknown output dtype");
    if (r.batch < 0 || r.seqLen < 0) fail("batch and seqLen must be >= 0");
    size_t const tokenBytes = (pool.tokenBytes(r.layer) / dtypeSize(pool.dtype())) * dtypeSize(r.outDtype);
    size_t const tokens = static_cast<size_t>(r.batch) * static_cast<size_t>(r.seqLen);  // < 2^62
    if (tokenBytes != 0 && tokens > std::numeric_limits<size_t>::max() / tokenBytes)
        fail("batch " + std::to_string(r.batch) + " * seqLen " + std::to_string(r.seqLen) + " tokens of " +
             std::to_string(tokenBytes) + " bytes overflow size_t");
    return tokens * tokenBytes;
}

void gatherPagedKv(KvPagePool const& pool, KvPageTable const& table, KvLengths const* lengths, KvGatherRequest const& r,
                   void* kOut, void* vOut, size_t outBytes) {
    DeviceBackend& backend = pool.backend();
    if (&table.backend() != &backend || (lengths && &lengths->backend() != &backend))
        fail("the pool, table and lengths must share one backend");
    if (table.numPages() != pool.numPages())
        fail("the table addresses " + std::to_string(table.numPages()) + " pages, the pool has " +
             std::to_string(pool.numPages()));
    if (table.dirty()) fail("the page table has changes not uploaded yet (call upload() first)");
    if (r.batch > table.maxBatch())
        fail("batch " + std::to_string(r.batch) + " exceeds the table's " + std::to_string(table.maxBatch()) +
             " slots");
    if (lengths && r.batch > lengths->activeBatch())
        fail("batch " + std::to_string(r.batch) + " exceeds the " + std::to_string(lengths->activeBatch()) +
             " active lengths");
    size_t const needed = gatherOutputBytes(pool, r);
    if (outBytes < needed)
        fail("the outputs hold " + std::to_string(outBytes) + " bytes, " + std::to_string(needed) + " needed");
    KvLayerShape const& shape = pool.geometry().layers[static_cast<size_t>(r.layer)];
    PagedKvGather g{};
    g.pool = pool.layerData(r.layer);
    g.pageTable = table.deviceView();
    g.kvLengths = lengths ? lengths->data() : nullptr;
    g.kOut = kOut;
    g.vOut = vOut;
    g.numPages = pool.numPages();
    g.pageSize = pool.pageSize();
    g.kvHeads = shape.kvHeads;
    g.headDim = shape.headDim;
    g.maxPagesPerSeq = table.maxPagesPerSeq();
    g.batch = r.batch;
    g.seqLen = r.seqLen;
    g.poolDtype = static_cast<int32_t>(pool.dtype());
    g.outDtype = static_cast<int32_t>(r.outDtype);
    g.kScale = r.kScale;
    g.vScale = r.vScale;
    g.layout = static_cast<int32_t>(r.layout);
    backend.gatherPagedKv(g);
}

}  // namespace ctxcache::device
