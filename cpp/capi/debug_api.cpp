// C ABI of include/ctxcache/c/debug.h: introspection for tests and checkers (ctxc_debug_*): a manager's reference
// counts, free lists, records and indexes, and a page table's dirty flag and device copy. Each call reads through
// the same checked handle lookups (and so the same call families) as the object's own calls in manager_api.cpp and
// device_api.cpp; none changes state.
#include "ctxcache/c/debug.h"

#include <optional>
#include <string>
#include <vector>

#include "api_support.h"
#include "device_handles.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;
using namespace ctxcache::device;

extern "C" {

// ---- manager ---------------------------------------------------------------------------------------------------

CTXC_API ctxc_status_t ctxc_debug_manager_ref_counts(const ctxc_manager_t* manager, int32_t resource_type,
                                                     int32_t index, int32_t* out_active, int32_t* out_cache) {
    return guard(__func__, [&] {
        ResourcePools const& pools = requireManager(manager).manager->pools();
        ResourceId const id{resourceType(resource_type, "resource_type"), index};
        requireNonNegative(index, "index");
        // An id beyond this manager's pool is inconsistent with its state, like any other out-of-range id.
        if (!pools.validId(id))
            throw ContractError("index " + std::to_string(index) + " is out of range [0, " +
                                std::to_string(pools.capacity(id.type)) + ")");
        if (out_active) *out_active = pools.activeRefCount(id);
        if (out_cache) *out_cache = pools.cacheRefCount(id);
    });
}

CTXC_API ctxc_status_t ctxc_debug_manager_free_list(const ctxc_manager_t* manager, int32_t resource_type,
                                                    int32_t* out_ids, size_t out_capacity, size_t* out_count) {
    return guard(__func__, [&] {
        ResourcePools const& pools = requireManager(manager).manager->pools();
        ResourceType const type = resourceType(resource_type, "resource_type");
        // Written in place (a pool of any capacity: no copy of its free list is built).
        size_t const count = static_cast<size_t>(pools.freeCount(type));
        requireOut(out_count, "out_count") = count;
        if (count == 0) return CTXC_OK;
        if (out_capacity < count) {
            if (out_ids == nullptr && out_capacity == 0) return CTXC_E_BUFFER_TOO_SMALL;  // the size query
            throw ApiError(CTXC_E_BUFFER_TOO_SMALL, "out_ids holds " + std::to_string(out_capacity) + " entries, " +
                                                        std::to_string(count) + " needed");
        }
        if (!out_ids) invalidArgument("out_ids is NULL");
        pools.freeListInto(type, out_ids, count);
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_debug_manager_records_lru(const ctxc_manager_t* manager, uint64_t* out_ids,
                                                      size_t out_capacity, size_t* out_count) {
    return guard(__func__, [&] {
        return copyOut(requireManager(manager).manager->records().lruToMru(), out_ids, out_capacity, out_count,
                       "out_ids");
    });
}

CTXC_API ctxc_status_t ctxc_debug_manager_record(const ctxc_manager_t* manager, uint64_t record,
                                                 ctxc_record_view_t* out_view) {
    return guard(__func__, [&] {
        ctxc_record_view_t& out = requireSized(out_view, "out_view");
        ManagerObject& m = requireManager(manager);
        CacheRecordStore const& records = m.manager->records();
        if (!records.contains(record)) throw ContractError("record " + std::to_string(record) + " does not exist");
        StoredRecord const& r = records.get(record);
        out.id = r.id;
        out.terminal_hash = fromHash(r.key.terminalHash);
        out.full_block_count = r.key.fullBlockCount;
        out.exact_checkpoint_length = r.exactCheckpointLength.value_or(-1);
        out.recurrent_snapshot_slot = r.recurrentSnapshotSlot.value_or(-1);
        out.partial_kv_snapshot_slot = r.partialKvSnapshotSlot.value_or(-1);
        out.logical_block_hashes = reinterpret_cast<ctxc_hash128_t const*>(m.recordViewHashes.hashes(records, r.id));
        out.logical_block_count = static_cast<size_t>(r.key.fullBlockCount);
        out.base_page_path = r.basePagePath.data();
        out.base_page_count = r.basePagePath.size();
        out.draft_page_path = r.draftPagePath.data();
        out.draft_page_count = r.draftPagePath.size();
        out.hybrid_mtp_checkpoint = r.isHybridMtp() ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_debug_manager_base_index_lookup(const ctxc_manager_t* manager, const ctxc_hash128_t* hash,
                                                            int32_t* out_page) {
    return guard(__func__, [&] {
        int32_t& out = requireOut(out_page, "out_page");
        ManagerObject& m = requireManager(manager);
        if (!hash) invalidArgument("hash is NULL");
        out = m.manager->baseIndex().lookup(toHash(*hash)).value_or(-1);
    });
}

CTXC_API ctxc_status_t ctxc_debug_manager_draft_index_lookup(const ctxc_manager_t* manager,
                                                             const ctxc_hash128_t* hashes, size_t count,
                                                             int32_t max_block_count, uint64_t* out_record,
                                                             int32_t* out_path_block_count) {
    return guard(__func__, [&] {
        uint64_t& record = requireOut(out_record, "out_record");
        int32_t& blocks = requireOut(out_path_block_count, "out_path_block_count");
        record = kNoRecord;
        blocks = 0;
        ManagerObject& m = requireManager(manager);
        requireNonNegative(max_block_count, "max_block_count");
        // The index is keyed by canonical base page: each hash resolves through the base index on its own (an
        // unmapped hash has no boundary), so the answer is the one a hash-keyed index would give.
        BlockHashSpan const input = inputHashes(hashes, count);
        std::vector<PageId> pages(count, kUnusedPageEntry);
        for (size_t i = 0; i < count; ++i)
            if (std::optional<PageId> const page = m.manager->baseIndex().lookup(input[i])) pages[i] = *page;
        std::optional<DraftPathMatch> match = m.manager->draftIndex().lookupLongest(pages, max_block_count);
        if (match) {
            record = match->record;
            blocks = match->pathBlockCount;
        }
    });
}

CTXC_API ctxc_status_t ctxc_debug_manager_draft_index_size(const ctxc_manager_t* manager, size_t* out_entries) {
    return getInto(__func__, out_entries, "out_entries",
                   [&] { return requireManager(manager).manager->draftIndex().entryCount(); });
}

// ---- page tables -----------------------------------------------------------------------------------------------

CTXC_API ctxc_status_t ctxc_debug_kv_page_table_is_dirty(const ctxc_kv_page_table_t* table, int32_t* out_dirty) {
    return getInto(__func__, out_dirty, "out_dirty",
                   [&] { return requireObject(pageTables(), table, "table").table->dirty() ? 1 : 0; });
}

CTXC_API ctxc_status_t ctxc_debug_kv_page_table_read_device(const ctxc_kv_page_table_t* table, int32_t* out_entries,
                                                            size_t out_capacity, size_t* out_count) {
    return guard(__func__, [&] {
        KvPageTable const& t = *requireObject(pageTables(), table, "table").table;
        std::vector<int32_t> entries(t.entryCount());
        if (out_capacity >= entries.size() && out_entries)
            t.backend().download(entries.data(), t.deviceView(), entries.size() * sizeof(int32_t));
        return copyOut(entries, out_entries, out_capacity, out_count, "out_entries");
    });
}

}  // extern "C"
