// Paged-to-dense gather: cross-object checks, then the backend's single launch.
#include "ctxcache/device/kv_gather.h"

#include <limits>
#include <string>

#include "ctxcache/errors.h"
#include "paged_kv_launch.h"

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
    detail::checkTableForPool(pool, table, r.batch, "gatherPagedKv: ");
    if (lengths && r.batch > lengths->activeBatch())
        fail("batch " + std::to_string(r.batch) + " exceeds the " + std::to_string(lengths->activeBatch()) +
             " active lengths");
    size_t const needed = gatherOutputBytes(pool, r);
    if (outBytes < needed)
        fail("the outputs hold " + std::to_string(outBytes) + " bytes, " + std::to_string(needed) + " needed");
    PagedKvGather g{};
    detail::fillPagedKvLaunch(g, pool, table, r);
    g.kvLengths = lengths ? lengths->data() : nullptr;
    g.kOut = kOut;
    g.vOut = vOut;
    g.poolDtype = static_cast<int32_t>(pool.dtype());
    g.outDtype = static_cast<int32_t>(r.outDtype);
    g.kScale = r.kScale;
    g.vScale = r.vScale;
    g.layout = static_cast<int32_t>(r.layout);
    backend.gatherPagedKv(g);
}

}  // namespace ctxcache::device
