/* ctxcache C ABI: introspection for tests and checkers (ctxc_debug_*): a manager's reference counts, free lists,
 * records and indexes, and a page table's dirty flag and device copy. A runtime needs none of them;
 * they may cost O(state) and change with CTXC_ABI_VERSION like any other call. Each call is in the
 * single-writer family of the object it reads. */
#ifndef CTXCACHE_C_DEBUG_H
#define CTXCACHE_C_DEBUG_H

#include "ctxcache/c/device.h"
#include "ctxcache/c/manager.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- manager introspection (tests and checkers; see Conventions in ctxcache.h) ------------------------- */

/* A stored record, as views valid until the next mutating call on the manager. */
typedef struct ctxc_record_view {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t id;
    ctxc_hash128_t terminal_hash; /* the exact-prefix digest for a hybrid checkpoint */
    int32_t full_block_count;
    int32_t exact_checkpoint_length; /* -1 = not a hybrid checkpoint */
    int32_t recurrent_snapshot_slot; /* -1 = none */
    int32_t partial_kv_snapshot_slot; /* -1 = none */
    const ctxc_hash128_t *logical_block_hashes;
    size_t logical_block_count;
    const int32_t *base_page_path;
    size_t base_page_count;
    const int32_t *draft_page_path;
    size_t draft_page_count;
    int32_t hybrid_mtp_checkpoint; /* 1 = a Hybrid+MTP checkpoint (full blocks floor((length - 1) / page_size)) */
    int32_t reserved2;
} ctxc_record_view_t;

/* Reference counts of one id: index in [0, capacity) of its pool (else CTXC_E_CONTRACT). */
CTXC_API ctxc_status_t ctxc_debug_manager_ref_counts(const ctxc_manager_t *manager, int32_t resource_type,
                                                     int32_t index, int32_t *out_active, int32_t *out_cache);
/* Free ids of one pool in allocation order (oldest first). Two-call pattern. */
CTXC_API ctxc_status_t ctxc_debug_manager_free_list(const ctxc_manager_t *manager, int32_t resource_type,
                                                    int32_t *out_ids, size_t out_capacity, size_t *out_count);
/* Record ids, least recently used first. Two-call pattern. */
CTXC_API ctxc_status_t ctxc_debug_manager_records_lru(const ctxc_manager_t *manager, uint64_t *out_ids,
                                                      size_t out_capacity, size_t *out_count);
/* One stored record (CTXC_E_CONTRACT if there is none with that id). */
CTXC_API ctxc_status_t ctxc_debug_manager_record(const ctxc_manager_t *manager, uint64_t record,
                                                 ctxc_record_view_t *out_view);
/* The canonical page of a block hash, or -1. */
CTXC_API ctxc_status_t ctxc_debug_manager_base_index_lookup(const ctxc_manager_t *manager, const ctxc_hash128_t *hash,
                                                            int32_t *out_page);
/* The EAGLE draft path index: the longest n <= min(max_block_count, count) such that ONE paired record's
 * boundary n ends at hashes[n-1] (most recent record first). *out_record = 0 and *out_path_block_count = 0 when
 * there is none. Read-only. */
CTXC_API ctxc_status_t ctxc_debug_manager_draft_index_lookup(const ctxc_manager_t *manager,
                                                             const ctxc_hash128_t *hashes, size_t count,
                                                             int32_t max_block_count, uint64_t *out_record,
                                                             int32_t *out_path_block_count);
/* Entries (record boundaries) in the draft path index. */
CTXC_API ctxc_status_t ctxc_debug_manager_draft_index_size(const ctxc_manager_t *manager, size_t *out_entries);

/* ---- page table introspection (tests and checkers) ------------------------------------- */

/* 1 when host rows changed since the last upload. */
CTXC_API ctxc_status_t ctxc_debug_kv_page_table_is_dirty(const ctxc_kv_page_table_t *table, int32_t *out_dirty);
/* The device copy read back (what the kernels see): max_batch * 2 * max_pages_per_seq entries. Two-call. */
CTXC_API ctxc_status_t ctxc_debug_kv_page_table_read_device(const ctxc_kv_page_table_t *table, int32_t *out_entries,
                                                            size_t out_capacity, size_t *out_count);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_DEBUG_H */
