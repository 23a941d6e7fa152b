// The objects behind the C ABI's handles and the checked lookups every entry point starts with.
//
// A ManagerObject owns its ContextCacheManager and knows the handles of its live leases, so that destroying it
// orphans them (their later use is CTXC_E_INVALID_HANDLE) instead of leaving them to touch freed memory.
// A LeaseObject remembers its manager's handle: a lease passed to another manager is refused as foreign.
// A record view's logical hashes: the store derives most of them from base pages (it keeps no copy), so the
// ManagerObject keeps the materialized hashes a view points into, per record id (RecordViewHashes).
// A manager and its leases share one CallFamily (capi/call_family.h): one call at a time among them.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "api_support.h"
#include "ctxcache.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/kv_events.h"
#include "ctxcache/tier/bookkeeping_store.h"
#include "ctxcache/tier/host_tier.h"
#include "handle_table.h"

namespace ctxcache {
class KvEventPublisher;
}

namespace ctxcache::capi {

// The last drain of a cache's KV events: the C views point into `drained`.
struct KvEventsDrain {
    KvEventLog drained;
    std::vector<ctxc_kv_event_t> views;
    std::vector<ctxc_kv_event_extra_key_t> keyViews;  // every event's extra keys, in the log's order
    std::vector<uint8_t> media;  // every event's CTXC_KV_MEDIUM_*
};

// The manager behind a `cache` argument of the ctxc_kv_events_* calls, and where its drains live.
struct KvEventTarget {
    ContextCacheManager* manager = nullptr;
    KvEventsDrain* drain = nullptr;
};
// Each returns an empty target when the handle is not one of its kind (runtime_api.cpp, sim_api.cpp).
KvEventTarget coordinatorKvEvents(void const* handle);
KvEventTarget simEngineKvEvents(void const* handle);
// A manager, coordinator or sim engine handle (its manager; invalid handle otherwise), and a publisher handle or
// null (kv_events_api.cpp).
KvEventTarget requireCache(void const* handle);
KvEventPublisher* findPublisher(void const* handle);

// Materialized logical hashes behind ctxc_debug_manager_record views. An entry stays while its record exists: a
// record's hashes never change while it lives (ids are never reused; a trim only shortens it and keeps the
// prefix), so a view stays valid until the record is evicted or trimmed (both mutating calls), and several views
// may be held at once. Entries of evicted records are dropped at a later view call (amortized O(1)).
class RecordViewHashes {
public:
    // The first `record.key.fullBlockCount` hashes of `id` (pointer into storage owned here or by the store).
    BlockHash const* hashes(CacheRecordStore const& records, RecordId id);

private:
    std::unordered_map<RecordId, std::vector<BlockHash>> byRecord_;
};

struct ManagerObject {
    std::shared_ptr<CallFamily> family = newFamily("manager (a manager, its leases and its KV events)");
    std::unique_ptr<ContextCacheManager> manager;
    RecordViewHashes recordViewHashes;  // backs ctxc_record_view_t::logical_block_hashes
    KvEventsDrain kvEvents;
    std::unordered_set<void const*> leases;  // handles of this manager's leases not yet destroyed
    std::unique_ptr<tier::HostTier> hostTier;  // after `manager`: destroyed (detached) first
};

struct LeaseObject {
    std::shared_ptr<CallFamily> family;  // its manager's
    CacheRequestLease lease;
    void const* managerHandle = nullptr;
    int32_t state = CTXC_LEASE_LIVE;
    std::vector<int32_t> publishedPages;  // backs ctxc_publish_result_t::canonical_base_pages of its last publish
    std::optional<RetentionSpec> retention;  // ctxc_lease_set_retention: its publications carry it
    PublicationGrowth growth = PublicationGrowth::kNewRecord;  // ctxc_lease_set_publication_growth
};

struct HasherObject {
    explicit HasherObject(BlockHasher h) : hasher(std::move(h)) {}
    BlockHasher hasher;
};

// A bookkeeping store (c/store.h): shared with the host tiers that use it, which keep it alive after its handle
// is destroyed. Its own calls form a family; the tiers reach it under their managers' families (it locks inside).
struct StoreObject {
    std::shared_ptr<CallFamily> family = newFamily("bookkeeping store (its own calls)");
    std::shared_ptr<tier::BookkeepingStore> store;
};

inline auto& managers() { return handleTable<ManagerObject, 0xC1>(); }
inline auto& leases() { return handleTable<LeaseObject, 0xC2>(); }
inline auto& hashers() { return handleTable<HasherObject, 0xC3>(); }
inline auto& stores() { return handleTable<StoreObject, 0xD4>(); }

// A byte store (c/store.h): shared with the host tiers that use it (through their coordinators' configs), which
// keep it alive after its handle is destroyed.
struct KvStoreObject {
    std::shared_ptr<CallFamily> family = newFamily("kv store (its own calls)");
    std::shared_ptr<tier::KvStore> store;
};
inline auto& kvStores() { return handleTable<KvStoreObject, 0xD5>(); }

ManagerObject& requireManager(void const* handle);

// The caller's hash array, read in place: ctxc_hash128_t and BlockHash are the same two little-endian u64.
static_assert(sizeof(ctxc_hash128_t) == sizeof(BlockHash) && alignof(ctxc_hash128_t) == alignof(BlockHash) &&
                  offsetof(ctxc_hash128_t, hi) == offsetof(BlockHash, hi) &&
                  offsetof(ctxc_hash128_t, lo) == offsetof(BlockHash, lo),
              "ctxc_hash128_t and BlockHash share one layout");
inline BlockHashSpan inputHashes(ctxc_hash128_t const* hashes, size_t count) {
    requireArray(hashes, count, "hashes");
    return {reinterpret_cast<BlockHash const*>(hashes), count};
}

// A live lease of `managerHandle` (or of any manager when managerHandle is null).
LeaseObject& requireLiveLease(void const* handle, void const* managerHandle);
LeaseObject& requireLease(void const* handle);
BlockHasher const& requireHasher(void const* handle);  // NULL = the default hasher

}  // namespace ctxcache::capi
