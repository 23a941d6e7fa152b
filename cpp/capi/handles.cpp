// The C ABI's handle tables (managers, leases, hashers: one process-wide table per kind, each with its tag) and
// the checked lookups that turn a handle into its object or throw ApiError(CTXC_E_INVALID_HANDLE); a NULL hasher
// means the default hasher. See handles.h.

#include "capi/handles.h"

namespace ctxcache::capi {

ManagerObject& requireManager(void const* handle) { return requireObject(managers(), handle, "manager"); }

LeaseObject& requireLease(void const* handle) { return requireObject(leases(), handle, "lease"); }

LeaseObject& requireLiveLease(void const* handle, void const* managerHandle) {
    LeaseObject& l = requireLease(handle);
    if (l.state == CTXC_LEASE_RELEASED) invalidHandle("lease was already released");
    if (l.state == CTXC_LEASE_ORPHANED) invalidHandle("lease outlived its manager (the manager was destroyed first)");
    if (managerHandle && l.managerHandle != managerHandle) invalidHandle("lease belongs to another manager");
    return l;
}

BlockHasher const& requireHasher(void const* handle) {
    if (!handle) return BlockHasher::defaultHasher();
    HasherObject* h = hashers().find(handle);
    if (!h) invalidHandle("hasher is not a live ctxc_hasher_t");
    return h->hasher;
}

}  // namespace ctxcache::capi
