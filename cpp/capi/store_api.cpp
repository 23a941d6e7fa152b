// C ABI of include/ctxcache/c/store.h: a bookkeeping store, shared (shared_ptr) by its handle and the host tiers
// that use it (host_tier_api.cpp), so that destroying the handle first leaves the tiers a live store.
#include "ctxcache/c/store.h"

#include <memory>
#include <string>

#include "api_support.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

tier::BookkeepingStore& requireStore(void const* handle) { return *requireObject(stores(), handle, "store").store; }

}  // namespace

extern "C" {

CTXC_API void ctxc_bookkeeping_store_options_init(ctxc_bookkeeping_store_options_t* options) { initSized(options); }

CTXC_API ctxc_status_t ctxc_bookkeeping_store_create(const ctxc_bookkeeping_store_options_t* options,
                                                     ctxc_bookkeeping_store_t** out_store) {
    return guard(__func__, [&] {
        requireOut(out_store, "out_store") = nullptr;
        ctxc_bookkeeping_store_options_t const& o = requireSized(options, "options");
        if (o.capacity_pages <= 0)
            invalidArgument("options->capacity_pages must be positive (got " + std::to_string(o.capacity_pages) + ")");
        auto object = std::make_unique<StoreObject>();
        object->store = std::make_shared<tier::BookkeepingStore>(o.capacity_pages);
        *out_store = addObject<ctxc_bookkeeping_store_t>(stores(), std::move(object));
    });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_destroy(ctxc_bookkeeping_store_t* store) {
    return guard(__func__, [&] { destroyObject(stores(), store, "store"); });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_probe(const ctxc_bookkeeping_store_t* store, const ctxc_hash128_t* hashes,
                                                    size_t count, size_t* out_blocks) {
    return guard(__func__, [&] {
        requireOut(out_blocks, "out_blocks") = 0;
        tier::BookkeepingStore const& s = requireStore(store);
        BlockHashSpan const span = inputHashes(hashes, count);
        *out_blocks = s.probe(span.data, span.size);
    });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_metrics(const ctxc_bookkeeping_store_t* store,
                                                      ctxc_bookkeeping_store_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        ctxc_bookkeeping_store_metrics_t& o = requireSized(out_metrics, "out_metrics");
        tier::BookkeepingStore const& s = requireStore(store);
        tier::BookkeepingStoreMetrics const m = s.metrics();
        o.capacity_pages = m.capacityPages;
        o.resident_blocks = m.residentBlocks;
        o.put_calls = m.putCalls;
        o.written_blocks = m.writtenBlocks;
        o.skipped_puts = m.skippedPuts;
        o.refused_puts = m.refusedPuts;
        o.dropped_blocks = m.droppedBlocks;
        o.get_calls = m.getCalls;
        o.hit_calls = m.hitCalls;
        o.hit_blocks = m.hitBlocks;
        o.metadata_bytes = s.memoryBytes();
    });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_check_invariants(const ctxc_bookkeeping_store_t* store) {
    return guard(__func__, [&] { requireStore(store).checkInvariants(); });
}

}  // extern "C"
