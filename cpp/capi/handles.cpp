// The C ABI's handle tables (managers, leases, hashers: one process-wide table per kind, each with its tag) and
// the checked lookups that turn a handle into its object or throw ApiError(CTXC_E_INVALID_HANDLE); a NULL hasher
// means the default hasher. RecordViewHashes: the materialized hashes behind record views. See handles.h.

#include "handles.h"

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

BlockHash const* RecordViewHashes::hashes(CacheRecordStore const& records, RecordId id) {
    StoredRecord const& record = records.get(id);
    if (!records.derivesHashes(record)) return record.keptBlockHashes.data();
    size_t const blocks = static_cast<size_t>(record.key.fullBlockCount);
    if (byRecord_.size() > 2 * records.size() + 64) {
        // Only evicted records' entries go: their views ended with the call that evicted them.
        for (auto it = byRecord_.begin(); it != byRecord_.end();)
            it = records.contains(it->first) ? std::next(it) : byRecord_.erase(it);
    }
    auto [it, inserted] = byRecord_.try_emplace(id);
    // A live record only ever shrinks, keeping its prefix: a cached materialization stays right (and in place).
    if (inserted || it->second.size() < blocks) {
        try {
            std::vector<BlockHash> hashes;  // the hashes alone (materialize would copy the paths too)
            records.appendLogicalHashes(record, 0, blocks, hashes);
            it->second = std::move(hashes);
        } catch (...) {
            if (inserted) byRecord_.erase(it);
            throw;
        }
    }
    return it->second.data();
}

BlockHasher const& requireHasher(void const* handle) {
    if (!handle) return BlockHasher::defaultHasher();
    HasherObject* h = hashers().find(handle);
    if (!h) invalidHandle("hasher is not a live ctxc_hasher_t");
    return h->hasher;
}

}  // namespace ctxcache::capi
