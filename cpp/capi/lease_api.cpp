// C ABI of include/ctxcache/c/lease.h: leases.
#include "ctxcache/c/lease.h"

#include <string>

#include "api_support.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

// Forget a lease handle in its manager's set (if that manager still exists).
void unlinkFromManager(LeaseObject const& lease, void const* leaseHandle) {
    if (ManagerObject* m = managers().find(lease.managerHandle)) m->leases.erase(leaseHandle);
}

// A live lease's page list as a pointer + count view.
void pagesView(ctxc_lease_t const* lease, int32_t const** outPages, size_t* outCount,
               std::vector<PageId> const& (CacheRequestLease::*pages)() const) {
    int32_t const*& p = requireOut(outPages, "out_pages");
    size_t& count = requireOut(outCount, "out_count");
    std::vector<PageId> const& v = (requireLiveLease(lease, nullptr).lease.*pages)();
    p = v.data();
    count = v.size();
}

}  // namespace

extern "C" {

CTXC_API ctxc_status_t ctxc_lease_base_pages(const ctxc_lease_t* lease, const int32_t** out_pages, size_t* out_count) {
    return guard(__func__, [&] { pagesView(lease, out_pages, out_count, &CacheRequestLease::basePages); });
}

CTXC_API ctxc_status_t ctxc_lease_draft_pages(const ctxc_lease_t* lease, const int32_t** out_pages, size_t* out_count) {
    return guard(__func__, [&] { pagesView(lease, out_pages, out_count, &CacheRequestLease::draftPages); });
}

CTXC_API ctxc_status_t ctxc_lease_set_publication_growth(ctxc_lease_t* lease, int32_t growth) {
    return guard(__func__, [&] {
        LeaseObject& l = requireLiveLease(lease, nullptr);
        if (growth != CTXC_PUBLICATION_GROWTH_NEW_RECORD && growth != CTXC_PUBLICATION_GROWTH_EXTEND_LEASE_RECORD)
            invalidArgument("growth " + std::to_string(growth) + " is not a CTXC_PUBLICATION_GROWTH_* value");
        if (growth == CTXC_PUBLICATION_GROWTH_EXTEND_LEASE_RECORD && l.lease.mode() != ReusePlanMode::kVanilla)
            throw ContractError(std::string("a lease's publications grow one record only on a vanilla lease, got a ") +
                                toString(l.lease.mode()) + " lease");
        l.growth = static_cast<PublicationGrowth>(growth);
    });
}

CTXC_API ctxc_status_t ctxc_lease_info(const ctxc_lease_t* lease, ctxc_lease_info_t* out_info) {
    return guard(__func__, [&] {
        ctxc_lease_info_t& out = requireSized(out_info, "out_info");
        LeaseObject& l = requireLease(lease);
        out.state = l.state;
        out.mode = static_cast<int32_t>(l.lease.mode());
        out.hybrid_has_attention = l.lease.hybridHasAttention() ? 1 : 0;
        out.recurrent_snapshot_slot = l.lease.recurrentSnapshotSlot().value_or(-1);
        out.partial_kv_snapshot_slot = l.lease.partialKvSnapshotSlot().value_or(-1);
        out.reserved_snapshot_count = static_cast<int32_t>(l.lease.reservedSnapshots().size());
        out.base_page_count = l.lease.basePages().size();
        out.draft_page_count = l.lease.draftPages().size();
    });
}

CTXC_API ctxc_status_t ctxc_lease_release(ctxc_lease_t* lease) {
    return guard(__func__, [&] {
        LeaseObject& l = requireLiveLease(lease, nullptr);
        l.lease.release();
        l.state = CTXC_LEASE_RELEASED;
    });
}

CTXC_API ctxc_status_t ctxc_lease_destroy(ctxc_lease_t* lease) {
    return guard(__func__, [&] {
        if (!lease) return CTXC_OK;
        std::unique_ptr<LeaseObject> l = leases().remove(lease);
        if (!l) invalidHandle("lease is not a live ctxc_lease_t (destroyed, or not a lease handle)");
        if (l->state != CTXC_LEASE_ORPHANED) unlinkFromManager(*l, lease);
        return CTXC_OK;  // ~CacheRequestLease releases a live lease; an orphaned one was detached by its manager
    });
}

}  // extern "C"
