// Dense-to-paged scatter: cross-object checks against the host page table, then the backend's single launch.
#include "ctxcache/device/kv_scatter.h"

#include <limits>
#include <string>

#include "ctxcache/errors.h"
#include "paged_kv_launch.h"

namespace ctxcache::device {

namespace {
[[noreturn]] void fail(std::string const& why) { throw ContractError("scatterPagedKv: " + why); }
}  // namespace

size_t scatterInputBytes(KvPagePool const& pool, KvScatterRequest const& r) {
    if (r.layer < 0 || r.layer >= static_cast<int32_t>(pool.geometry().layers.size()))
        fail("layer " + std::to_string(r.layer) + " is out of range");
    if (r.batch < 0 || r.seqLen < 0) fail("batch and seqLen must be >= 0");
    size_t const tokenBytes = pool.tokenBytes(r.layer);
    size_t const tokens = static_cast<size_t>(r.batch) * static_cast<size_t>(r.seqLen);
    if (tokenBytes != 0 && tokens > std::numeric_limits<size_t>::max() / tokenBytes)
        fail("batch * seqLen tokens overflow size_t");
    return tokens * tokenBytes;
}

void scatterPagedKv(KvPagePool& pool, KvPageTable const& table, KvScatterRequest const& r, void const* kIn,
                    void const* vIn, size_t inBytes) {
    DeviceBackend& backend = pool.backend();
    if (&table.backend() != &backend) fail("the pool and table must share one backend");
    detail::checkTableForPool(pool, table, r.batch, "scatterPagedKv: ");
    if (r.firstPosition < 0) fail("firstPosition must be >= 0");
    if (!isValidKvLayout(static_cast<int32_t>(r.layout)))
        fail("unknown dense KV layout " + std::to_string(static_cast<int32_t>(r.layout)));
    size_t const needed = scatterInputBytes(pool, r);
    if (inBytes != needed)
        fail("the inputs hold " + std::to_string(inBytes) + " bytes each, " + std::to_string(needed) + " expected");
    int64_t const end = static_cast<int64_t>(r.firstPosition) + r.seqLen;
    if (end > static_cast<int64_t>(table.maxPagesPerSeq()) * pool.pageSize())
        fail("positions [" + std::to_string(r.firstPosition) + ", " + std::to_string(end) +
             ") need more pages than the table's " + std::to_string(table.maxPagesPerSeq()) + " per sequence");
    if (r.seqLen > 0) {
        int32_t const firstPage = r.firstPosition / pool.pageSize();
        int32_t const lastPage = static_cast<int32_t>((end - 1) / pool.pageSize());
        for (int32_t b = 0; b < r.batch; ++b) {
            int32_t const* row = table.hostRow(b);
            for (int32_t p = firstPage; p <= lastPage; ++p)
                if (row[p] < 0 || row[p] >= pool.numPages())
                    fail("slot " + std::to_string(b) + " has no page mapped at logical page " + std::to_string(p) +
                         " (position " + std::to_string(static_cast<int64_t>(p) * pool.pageSize()) + ")");
        }
    }
    if (inBytes > 0) {
        backend.checkExternal(kIn, inBytes, "scatterPagedKv: the K input");
        backend.checkExternal(vIn, inBytes, "scatterPagedKv: the V input");
    }
    PagedKvScatter s{};
    detail::fillPagedKvLaunch(s, pool, table, r);
    s.kIn = kIn;
    s.vIn = vIn;
    s.firstPosition = r.firstPosition;
    s.dtype = static_cast<int32_t>(pool.dtype());
    s.layout = static_cast<int32_t>(r.layout);
    backend.scatterPagedKv(s);
}

}  // namespace ctxcache::device
