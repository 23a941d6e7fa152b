// Bounded sliding-window paging's C ABI: the manager over a pool, a sparse-window table and optional lengths, and
// its one request at a time. Contract of every function: include/ctxcache/c/swa.h.
#include "ctxcache/c/swa.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api_support.h"
#include "ctxcache.h"
#include "ctxcache/runtime/bounded_swa_kv_page_manager.h"
#include "device_handles.h"
#include "handle_table.h"
#include "swa_handles.h"

namespace ctxcache::capi {
namespace {

using runtime::BoundedSwaKVPageManager;
using runtime::SwaKVCacheStatus;

struct SwaRequestObject {
    std::shared_ptr<CallFamily> family;  // its manager's
    void const* managerHandle = nullptr;
    BoundedSwaKVPageManager::RequestHandle handle;
};

auto& swaRequests() { return handleTable<SwaRequestObject, 0xCE>(); }

BoundedSwaKVPageManager& requireManager(void const* handle) { return requireSwaManager(handle); }

// The request and its live manager (CTXC_E_INVALID_HANDLE when the manager was destroyed first).
std::pair<SwaRequestObject*, BoundedSwaKVPageManager*> requireRequest(void const* handle) {
    SwaRequestObject& r = requireObject(swaRequests(), handle, "request");
    SwaManagerObject* m = swaManagers().find(r.managerHandle);
    if (!m) invalidHandle("request outlived its manager (the manager was destroyed first)");
    return {&r, m->manager.get()};
}

std::vector<int32_t> values(int32_t const* data, size_t count, char const* name) {
    requireBytes(data, count, name);
    return count ? std::vector<int32_t>(data, data + count) : std::vector<int32_t>{};
}

void answer(BoundedSwaKVPageManager const& m, SwaKVCacheStatus status) {
    switch (status) {
        case SwaKVCacheStatus::kOk: return;
        case SwaKVCacheStatus::kPoisoned: throw ApiError(CTXC_E_POISONED, m.lastFailure());
        case SwaKVCacheStatus::kRequestFailed: break;
    }
    throw ApiError(CTXC_E_REQUEST_FAILED, m.lastFailure());
}

}  // namespace
}  // namespace ctxcache::capi

using namespace ctxcache;
using namespace ctxcache::capi;

extern "C" {

CTXC_API void ctxc_swa_manager_options_init(ctxc_swa_manager_options_t* options) {
    if (!initSized(options)) return;
    runtime::BoundedSwaConfig const d;
    options->max_batch = d.maxBatch;
    options->window_size_tokens = d.windowSizeTokens;
}

CTXC_API ctxc_status_t ctxc_swa_manager_create(ctxc_kv_pool_t* pool, ctxc_kv_page_table_t* table,
                                               ctxc_kv_lengths_t* lengths, const ctxc_swa_manager_options_t* options,
                                               ctxc_swa_manager_t** out_manager) {
    return guard(__func__, [&] {
        requireOut(out_manager, "out_manager") = nullptr;
        ctxc_swa_manager_options_t const& o = requireSized(options, "options");
        auto object = std::make_unique<SwaManagerObject>();
        KvPoolObject& p = requireObject(kvPools(), pool, "pool");
        PageTableObject& t = requireObject(pageTables(), table, "table");
        object->family = p.family;
        object->keep = {p.backend, p.pool, t.backend, t.table};
        device::KvLengths* l = nullptr;
        if (lengths) {
            KvLengthsObject& lo = requireObject(kvLengths(), lengths, "lengths");
            object->keep.push_back(lo.backend);
            object->keep.push_back(lo.lengths);
            l = lo.lengths.get();
        }
        BoundedSwaKVPageManager::StreamSynchronizer synchronizer;
        if (o.synchronize) {
            ctxc_synchronize_fn const fn = o.synchronize;
            void* const user = o.synchronize_user;
            synchronizer = [fn, user](runtime::StreamHandle stream) { return fn(user, stream) == 0; };
        }
        object->manager = std::make_unique<BoundedSwaKVPageManager>(
            runtime::BoundedSwaConfig{o.max_batch, o.window_size_tokens}, *p.pool, *t.table, l, synchronizer);
        *out_manager = addObject<ctxc_swa_manager_t>(swaManagers(), std::move(object));
    });
}

CTXC_API ctxc_status_t ctxc_swa_manager_destroy(ctxc_swa_manager_t* manager) {
    return guard(__func__, [&] {
        if (!manager) return CTXC_OK;
        std::unique_ptr<SwaManagerObject> m = swaManagers().remove(manager);
        if (!m) invalidHandle("manager is not a live ctxc_swa_manager_t (destroyed, or another type)");
        bool const live = m->manager->hasLiveRequest();
        m.reset();  // synchronises and releases what a live request holds and detaches its handle
        if (live)
            throw ApiError(CTXC_E_LEASES_OUTSTANDING,
                           "destroyed with a live request; it is orphaned and must still be destroyed");
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_swa_manager_free_page_count(const ctxc_swa_manager_t* manager, int32_t* out_pages) {
    return guard(__func__, [&] {
        int32_t& out = requireOut(out_pages, "out_pages");
        out = requireManager(manager).freePageCount();
    });
}

CTXC_API ctxc_status_t ctxc_swa_manager_private_pages_per_sequence(const ctxc_swa_manager_t* manager,
                                                                   int32_t* out_pages) {
    return guard(__func__, [&] {
        int32_t& out = requireOut(out_pages, "out_pages");
        out = requireManager(manager).privatePagesPerSequence();
    });
}

CTXC_API ctxc_status_t ctxc_swa_manager_shutdown(ctxc_swa_manager_t* manager) {
    return guard(__func__, [&] {
        BoundedSwaKVPageManager& m = requireManager(manager);
        answer(m, m.shutdown());
    });
}

CTXC_API ctxc_status_t ctxc_swa_manager_check_invariants(const ctxc_swa_manager_t* manager) {
    return guard(__func__, [&] { requireManager(manager).checkInvariants(); });
}

CTXC_API ctxc_status_t ctxc_swa_manager_begin_request(ctxc_swa_manager_t* manager, const ctxc_resident_ref_t* residents,
                                                      size_t count, void* stream, ctxc_swa_request_t** out_request) {
    return guard(__func__, [&] {
        requireOut(out_request, "out_request") = nullptr;
        SwaManagerObject& mo = requireObject(swaManagers(), manager, "manager");
        BoundedSwaKVPageManager& m = *mo.manager;
        requireBytes(residents, count, "residents");
        std::vector<runtime::ResidentRef> refs;
        for (size_t i = 0; i < count; ++i) refs.push_back({residents[i].slot, residents[i].epoch});
        BoundedSwaKVPageManager::BeginRequestResult r = m.beginRequest(refs, stream);
        answer(m, r.status);
        auto object = std::make_unique<SwaRequestObject>();
        object->family = mo.family;
        object->managerHandle = manager;
        object->handle = std::move(*r.request);
        *out_request = addObject<ctxc_swa_request_t>(swaRequests(), std::move(object));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_prepare_prefill(ctxc_swa_request_t* request, const int32_t* lengths,
                                                        size_t count) {
    return guard(__func__, [&] {
        auto [r, m] = requireRequest(request);
        answer(*m, m->preparePrefill(r->handle, values(lengths, count, "lengths")));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_complete_prefill(ctxc_swa_request_t* request) {
    return guard(__func__, [&] {
        auto [r, m] = requireRequest(request);
        answer(*m, m->completePrefill(r->handle));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_prepare_decode_step(ctxc_swa_request_t* request, const int32_t* endpoints,
                                                            size_t count) {
    return guard(__func__, [&] {
        auto [r, m] = requireRequest(request);
        answer(*m, m->prepareDecodeStep(r->handle, values(endpoints, count, "endpoints")));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_complete_decode_step(ctxc_swa_request_t* request) {
    return guard(__func__, [&] {
        auto [r, m] = requireRequest(request);
        answer(*m, m->completeDecodeStep(r->handle));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_begin_batch_compaction(ctxc_swa_request_t* request, const int32_t* old_to_new,
                                                               size_t count, int32_t new_batch_size,
                                                               void* device_mapping) {
    return guard(__func__, [&] {
        auto [r, m] = requireRequest(request);
        runtime::TensorView mapping{device_mapping, runtime::ScalarType::kInt32, {static_cast<int64_t>(count)}, -1};
        answer(*m,
               m->beginBatchCompaction(r->handle, values(old_to_new, count, "old_to_new"), new_batch_size, mapping));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_compact_batch(ctxc_swa_request_t* request) {
    return guard(__func__, [&] {
        auto [r, m] = requireRequest(request);
        answer(*m, m->compactBatch(r->handle));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_state(const ctxc_swa_request_t* request, int32_t row,
                                              ctxc_swa_state_t* out_state) {
    return guard(__func__, [&] {
        ctxc_swa_state_t& out = requireSized(out_state, "out_state");
        auto [r, m] = requireRequest(request);
        fillSwaState(m->state(r->handle, row), out);
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_batch_size(const ctxc_swa_request_t* request, int32_t* out_batch) {
    return guard(__func__, [&] {
        int32_t& out = requireOut(out_batch, "out_batch");
        out = requireRequest(request).first->handle.batchSize();
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_finish(ctxc_swa_request_t* request) {
    return guard(__func__, [&] {
        auto [r, m] = requireRequest(request);
        answer(*m, m->finish(r->handle));
    });
}

CTXC_API ctxc_status_t ctxc_swa_request_destroy(ctxc_swa_request_t* request) {
    return guard(__func__, [&] {
        if (!request) return CTXC_OK;
        std::unique_ptr<SwaRequestObject> r = swaRequests().remove(request);
        if (!r) invalidHandle("request is not a live ctxc_swa_request_t (destroyed, or another type)");
        r.reset();  // a live handle finishes (synchronises) itself; one whose manager is gone was detached
        return CTXC_OK;
    });
}

}  // extern "C"
