// The object behind a ctxc_swa_manager_t (tag 0xCD) and the C view of one sequence's window, shared by the SWA
// manager's own functions (swa_api.cpp) and the request facade's SWA backend (runtime_api.cpp).
//
// A SwaManagerObject shares ownership of the device objects it was built over (declared first, released last), so
// their handles may be destroyed in any order. Requests on it (ctxc_swa_request_t and a ctxc_kv_request_t begun
// with ctxc_kv_request_begin_swa) remember its handle and look it up on every call: a handle is generation-checked,
// so once the manager is destroyed those requests answer CTXC_E_INVALID_HANDLE instead of reaching it.
// Threading: the handle table is locked; the manager follows its single-writer contract: it and its requests are
// in the family of its pool's backend (capi/call_family.h), so overlapping calls are refused.
#pragma once

#include <memory>
#include <vector>

#include "call_family.h"
#include "ctxcache.h"
#include "ctxcache/runtime/bounded_swa_kv_page_manager.h"
#include "handle_table.h"

namespace ctxcache::capi {

struct SwaManagerObject {
    std::shared_ptr<CallFamily> family;  // its pool's backend's
    std::vector<std::shared_ptr<void>> keep;
    std::unique_ptr<runtime::BoundedSwaKVPageManager> manager;

    SwaManagerObject() = default;
    SwaManagerObject(SwaManagerObject const&) = delete;
    SwaManagerObject& operator=(SwaManagerObject const&) = delete;
    ~SwaManagerObject() {
        manager.reset();
        while (!keep.empty()) keep.pop_back();
    }
};

inline auto& swaManagers() { return handleTable<SwaManagerObject, 0xCD>(); }

inline runtime::BoundedSwaKVPageManager& requireSwaManager(void const* handle) {
    return *requireObject(swaManagers(), handle, "manager").manager;
}

inline void fillSwaState(runtime::SwaKVCacheState const& s, ctxc_swa_state_t& out) {
    out.resident.slot = s.resident.slot;
    out.resident.reserved = 0;
    out.resident.epoch = s.resident.epoch;
    out.exact_resident_token_count = s.exactResidentTokenCount;
    out.retained_logical_page_begin = s.retainedLogicalPageBegin;
    out.retained_logical_page_end = s.retainedLogicalPageEnd;
    out.bound_pages = static_cast<int32_t>(s.pageBindings.size());
    out.pending_retire_pages = static_cast<int32_t>(s.pendingRetireBindings.size());
    out.reserved_pages = static_cast<int32_t>(s.reservedPages.size());
    out.pending_endpoint = s.pendingEndpoint.value_or(-1);
    out.peak_bound_pages = s.peakBoundPages;
}

}  // namespace ctxcache::capi
