/* ctxcache C ABI: the device layer: backends (CPU and CUDA), buffers, host buffers, KV page pools and their
 * batched copies to and from host slots, page tables, KV lengths, resident recurrent state, snapshot storage, batch
 * compaction and chunked hashing, and the device views of them. A backend and everything built on it are one
 * single-writer family. */
#ifndef CTXCACHE_C_DEVICE_H
#define CTXCACHE_C_DEVICE_H

#include "ctxcache/c/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device layer ---------------------------------------------------------------------------------------- */

/* Device storage and every data movement on it: KV page pools, page tables, KV lengths, resident recurrent state,
 * snapshot slabs, batch compaction and chunked FNV-1a hashing (paged-to-dense gather and scatter: dense_kv.h). Every
 * object lives on a backend: CPU (always available; "device memory" is host memory; the reference) or CUDA (when the
 * library was built with it and a device is visible). Both give identical bytes. Bytes move between host buffers and
 * objects with the *_write / *_read calls; an engine that runs its own kernels on them reads their addresses and
 * layouts as ctxc_device_view_t (the *_view calls, and the DLPack export of dlpack.h). Every storage object allocates
 * all its device memory at creation and reports its exact footprint, or is built over memory the caller already owns
 * (the external_* option fields: never freed, zeroed or written at creation, so its bytes are the object's
 * initial contents; a NULL pointer, a misalignment or too few bytes is CTXC_E_INVALID_ARGUMENT, nothing
 * created); no operation allocates device memory. Every stream-ordered call runs on the backend's stream, which
 * may be the caller's (ctxc_device_backend_set_stream). A host tier keeps KV in host buffers (pinned and mapped on
 * CUDA): ctxc_kv_pool_copy_pages_to_host and _from_host move whole pages, every layer's K and V, between a pool and
 * the buffer's slots in one launch.
 *
 * Errors (the table in ctxcache.h applies): an invalid geometry, an out-of-range id, slot, page or byte range, an
 * overlapping or reordering compaction map and a dtype the operation cannot take are CTXC_E_CONTRACT (nothing
 * changed); a failing CUDA call is CTXC_E_DEVICE; asking for CUDA where it is unavailable is CTXC_E_UNSUPPORTED.
 * Lifetimes: an object keeps what it was built from alive (its backend, the pools and state of a snapshot
 * storage), so handles may be destroyed in any order. Objects used together must share one backend.
 * Threading: a backend and everything built on it are one family of the single-writer contract (an overlapping
 * call is CTXC_E_CONCURRENT_USE). */

enum { CTXC_BACKEND_AUTO = 0, CTXC_BACKEND_CPU = 1, CTXC_BACKEND_CUDA = 2 };
enum { CTXC_DTYPE_FP16 = 0, CTXC_DTYPE_BF16 = 1, CTXC_DTYPE_FP8_E4M3 = 2, CTXC_DTYPE_FP32 = 3 };
enum {
    CTXC_STATE_RECURRENT = 0,
    CTXC_STATE_CONV = 1,
    CTXC_STATE_BOUNDARY_HIDDEN = 2,
    CTXC_STATE_PARTIAL_KV = 3, /* snapshot storage: one base attention layer's partial K then V */
    CTXC_STATE_DRAFT_PARTIAL_KV = 4 /* snapshot storage: one draft attention layer's partial K then V */
};
enum { CTXC_PAGE_TABLE_DENSE = 0, CTXC_PAGE_TABLE_SPARSE_WINDOW = 1 };
enum { CTXC_DEFAULT_HASH_CHUNKS = 2048 };

typedef struct ctxc_device_backend ctxc_device_backend_t;
typedef struct ctxc_device_buffer ctxc_device_buffer_t;
typedef struct ctxc_host_buffer ctxc_host_buffer_t;
typedef struct ctxc_kv_pool ctxc_kv_pool_t;
typedef struct ctxc_kv_page_table ctxc_kv_page_table_t;
typedef struct ctxc_kv_lengths ctxc_kv_lengths_t;
typedef struct ctxc_resident_state ctxc_resident_state_t;
typedef struct ctxc_snapshot_storage ctxc_snapshot_storage_t;

typedef struct ctxc_device_backend_options {
    uint32_t struct_size;
    int32_t kind; /* CTXC_BACKEND_* (default AUTO: CUDA when usable, else CPU) */
    int32_t device; /* CUDA device ordinal (default 0) */
    uint32_t max_hash_chunks; /* capacity of ctxc_device_hash_chunked (default 65536) */
    size_t max_table_bytes; /* per-operation descriptor table, in [4096, 1 GiB] (default 1 MiB) */
    void *stream; /* CUDA: the cudaStream_t to run on; NULL = a stream of the backend's own */
} ctxc_device_backend_options_t;

/* Element types of a device view: the CTXC_DTYPE_* values, plus the integer types of page tables, KV lengths and
 * raw bytes (never a storage dtype). */
enum {
    CTXC_ELEMENT_FP16 = 0,
    CTXC_ELEMENT_BF16 = 1,
    CTXC_ELEMENT_FP8_E4M3 = 2,
    CTXC_ELEMENT_FP32 = 3,
    CTXC_ELEMENT_INT32 = 4,
    CTXC_ELEMENT_UINT8 = 5,
    CTXC_ELEMENT_UINT16 = 6
};

/* Where an object's device memory is and how it is laid out: a dense, C-contiguous (row-major) array of `ndim`
 * dimensions. data is a device pointer as void * (CUDA: memory of the backend's device, usable by the caller's
 * kernels on any stream ordered after the backend's stream; CPU backend: host memory). It stays valid while the
 * object lives, whatever else is called (no operation reallocates); bytes = product(shape) * element size.
 * An output struct: set struct_size = sizeof before the call. */
typedef struct ctxc_device_view {
    uint32_t struct_size;
    int32_t element;              /* CTXC_ELEMENT_* */
    void *data;                   /* NULL only when bytes == 0 */
    size_t bytes;
    int32_t backend;              /* CTXC_BACKEND_CPU or CTXC_BACKEND_CUDA: where data lives */
    int32_t device;               /* CUDA device ordinal (0 on the CPU backend) */
    int32_t ndim;                 /* entries of shape in use (1..5) */
    int32_t external;             /* 1: memory the caller gave at creation (external_data), 0: the library's */
    int64_t shape[5];
} ctxc_device_view_t;

typedef struct ctxc_launch_counters {
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t kernels; /* kernel launches (the CPU backend counts one per operation) */
    uint64_t transfers; /* copies and memsets, descriptor-table uploads included */
} ctxc_launch_counters_t;

typedef struct ctxc_kv_layer_shape {
    int32_t kv_heads;
    int32_t head_dim;
} ctxc_kv_layer_shape_t;

/* One pool of paged KV: per layer [2, num_pages, page_size, kv_heads, head_dim] (K half, then V half). */
typedef struct ctxc_kv_pool_options {
    uint32_t struct_size;
    int32_t num_pages; /* K pages; the V page of K page p is flat page p + num_pages */
    int32_t page_size; /* tokens per page (default 128) */
    int32_t dtype; /* CTXC_DTYPE_* (default FP16) */
    const ctxc_kv_layer_shape_t *layers; /* one per attention layer; copied */
    size_t layer_count;
    /* Build the pool over caller memory (device memory of the backend's device, or host memory on CPU), 256-byte
     * aligned and at least ctxc_kv_pool_required_bytes: not owned, never freed, zeroed or written at creation.
     * NULL (default) = allocate. A struct_size that ends before them (a caller built before they existed) means
     * NULL; see ctxc_kv_pool_create. */
    void *external_data;
    size_t external_bytes;
} ctxc_kv_pool_options_t;

/* Live per-slot state: per recurrent layer a recurrent row [heads, head_dim, state_size] and a conv row
 * [conv_dim, conv_kernel]; optionally an fp16 boundary hidden row [hidden_size]. */
typedef struct ctxc_resident_state_options {
    uint32_t struct_size;
    int32_t max_batch;
    int32_t num_layers; /* recurrent layers (0: hidden rows only) */
    int32_t recurrent_heads;
    int32_t recurrent_head_dim;
    int32_t state_size;
    int32_t recurrent_dtype; /* default FP32 */
    int32_t conv_dim; /* conv_dim and conv_kernel both 0: no conv state */
    int32_t conv_kernel;
    int32_t conv_dtype;           /* default FP16 */
    int32_t hidden_size;          /* 0 = no boundary hidden row */
    void *external_data;          /* as in ctxc_kv_pool_options_t; >= ctxc_resident_state_required_bytes */
    size_t external_bytes;
} ctxc_resident_state_options_t;

typedef struct ctxc_snapshot_storage_options {
    uint32_t struct_size;
    int32_t boundary_hidden; /* 0/1: recurrent slots also hold the boundary hidden row */
    size_t recurrent_budget_bytes;
    size_t partial_kv_budget_bytes;
    /* Caller memory for each slab (as in ctxc_kv_pool_options_t, 256-byte aligned), at least slots * bytes per
     * slot of that kind (slots = budget / bytes per slot; the layout after creation says both). NULL = allocate. */
    void *external_recurrent_data;
    size_t external_recurrent_bytes;
    void *external_partial_kv_data;
    size_t external_partial_kv_bytes;
} ctxc_snapshot_storage_options_t;

typedef struct ctxc_snapshot_layout {
    uint32_t struct_size;
    uint32_t reserved;
    size_t recurrent_bytes_per_slot; /* layers * (recurrent + conv row) [+ hidden row] */
    size_t partial_kv_bytes_per_slot; /* sum over base and draft layers of 2 * page bytes */
    int32_t recurrent_slots; /* recurrent_budget_bytes / recurrent_bytes_per_slot */
    int32_t partial_kv_slots;
    size_t footprint_bytes; /* exactly slots * bytes per slot, both kinds */
    int32_t max_descriptors; /* descriptors of the largest transfer (all in one launch) */
    int32_t reserved2;
} ctxc_snapshot_layout_t;

/* One checkpoint transfer; a part whose slot is -1 is skipped (ctxc_snapshot_transfer_init sets all to -1). */
typedef struct ctxc_snapshot_transfer {
    uint32_t struct_size;
    int32_t batch_slot; /* resident slot of the recurrent part */
    int32_t recurrent_slot;
    int32_t partial_kv_slot;
    int32_t base_page; /* K page id in the base pool */
    int32_t draft_page; /* K page id in the draft pool (iff the storage has one) */
    int32_t valid_tokens; /* 0 < valid_tokens < page_size; == page_size allowed with a draft pool (Hybrid+MTP) */
    int32_t reserved;
} ctxc_snapshot_transfer_t;

typedef struct ctxc_device_buffer_options {
    uint32_t struct_size;
    uint32_t reserved;
    size_t bytes;                 /* size of the zero-filled buffer (default 0) */
    void *external_data;          /* a window of `bytes` on caller memory (256-byte aligned, external_bytes >=
                                   * bytes), not owned, not zeroed; NULL (default) = allocate */
    size_t external_bytes;
} ctxc_device_buffer_options_t;

/* Host memory for a host tier's KV slots: zero-filled and 4096-byte aligned, pinned, portable and mapped on CUDA
 * (cudaHostAlloc), so the backend's copies address it directly; plain memory on the CPU backend. */
typedef struct ctxc_host_buffer_options {
    uint32_t struct_size;
    uint32_t reserved;
    size_t bytes;                 /* size of the zero-filled buffer (default 0) */
    /* A window of `bytes` on host memory the engine owns (external_bytes >= bytes): not owned, never freed, zeroed
     * or written at creation. CUDA: it must be pinned and mapped (cudaHostAlloc(cudaHostAllocMapped) or
     * cudaHostRegister(..., cudaHostRegisterMapped)), else CTXC_E_INVALID_ARGUMENT. NULL (default) = allocate. */
    void *external_data;
    size_t external_bytes;
} ctxc_host_buffer_options_t;

/* Host slots of a host buffer ("page-first"): slot s starts at the buffer's data + s * slot_bytes; its first
 * payload_offset bytes are the caller's header (never touched by the copies), then for each layer l in order the
 * K page bytes of layer l followed by its V page bytes (ctxc_kv_pool_page_bytes each): ctxc_kv_pool_host_payload_bytes
 * in all. slot_bytes >= payload_offset + payload bytes; slot_count * slot_bytes <= the buffer's size. */
typedef struct ctxc_host_slot_layout {
    uint32_t struct_size;
    int32_t slot_count;
    size_t slot_bytes;
    size_t payload_offset;
} ctxc_host_slot_layout_t;

/* A [max_batch, 2, max_pages_per_seq] int32 page table (K ids, then V ids = K + num_pages; -1 unused). */
typedef struct ctxc_kv_page_table_options {
    uint32_t struct_size;
    int32_t max_batch;
    int32_t max_pages_per_seq;
    int32_t num_pages;            /* K pages of the pool the table indexes */
    int32_t mode;                 /* CTXC_PAGE_TABLE_* (default DENSE) */
    /* The device view over caller memory: 4-byte aligned, >= max_batch * 2 * max_pages_per_seq * 4 bytes. Nothing
     * is written there at creation: every row starts dirty, and the first upload writes the whole table. */
    void *external_data;
    size_t external_bytes;
} ctxc_kv_page_table_options_t;

typedef struct ctxc_kv_lengths_options {
    uint32_t struct_size;
    int32_t max_batch;
    void *external_data;          /* caller memory: 4-byte aligned, >= 4 * max_batch bytes; not written at creation */
    size_t external_bytes;
} ctxc_kv_lengths_options_t;

CTXC_API void ctxc_device_backend_options_init(ctxc_device_backend_options_t *options);
/* CTXC_E_UNSUPPORTED (with the reason) when kind is CUDA and CUDA is not built in or sees no device. */
CTXC_API ctxc_status_t ctxc_device_backend_create(const ctxc_device_backend_options_t *options,
                                                  ctxc_device_backend_t **out_backend);
/* NULL is a no-op. Objects built on the backend keep it alive until they are destroyed too. */
CTXC_API ctxc_status_t ctxc_device_backend_destroy(ctxc_device_backend_t *backend);
/* CTXC_BACKEND_CPU or CTXC_BACKEND_CUDA. */
CTXC_API ctxc_status_t ctxc_device_backend_kind(const ctxc_device_backend_t *backend, int32_t *out_kind);
CTXC_API ctxc_status_t ctxc_device_backend_synchronize(ctxc_device_backend_t *backend);
CTXC_API ctxc_status_t ctxc_device_backend_counters(const ctxc_device_backend_t *backend,
                                                    ctxc_launch_counters_t *out_counters);
/* Device bytes currently allocated on the backend by every object built on it (external memory not counted). */
CTXC_API ctxc_status_t ctxc_device_backend_allocated_bytes(const ctxc_device_backend_t *backend, size_t *out_bytes);
/* Run every later stream-ordered call of this backend (and of everything built on it) on `stream`: CUDA, a
 * cudaStream_t of the backend's device, NULL = the backend's own stream again; the work issued before the switch
 * completes before this returns. The backend never destroys a caller's stream: switch back (NULL) before
 * destroying it. The CPU backend accepts any value and ignores it (its calls complete before they return). */
CTXC_API ctxc_status_t ctxc_device_backend_set_stream(ctxc_device_backend_t *backend, void *stream);
/* The stream in use: CUDA, the cudaStream_t (the backend's own unless set); CPU, the last value set (NULL). */
CTXC_API ctxc_status_t ctxc_device_backend_stream(const ctxc_device_backend_t *backend, void **out_stream);

/* Host bytes allocated on the backend by its host buffers (external memory not counted), apart from device bytes. */
CTXC_API ctxc_status_t ctxc_device_backend_allocated_host_bytes(const ctxc_device_backend_t *backend,
                                                                size_t *out_bytes);

/* A plain zero-filled device buffer (inputs and outputs of the generic operations). */
CTXC_API void ctxc_device_buffer_options_init(ctxc_device_buffer_options_t *options);
CTXC_API ctxc_status_t ctxc_device_buffer_create(ctxc_device_backend_t *backend,
                                                 const ctxc_device_buffer_options_t *options,
                                                 ctxc_device_buffer_t **out_buffer);
CTXC_API ctxc_status_t ctxc_device_buffer_destroy(ctxc_device_buffer_t *buffer);
CTXC_API ctxc_status_t ctxc_device_buffer_size(const ctxc_device_buffer_t *buffer, size_t *out_bytes);
/* [offset, offset + size) must lie inside the buffer. */
CTXC_API ctxc_status_t ctxc_device_buffer_write(ctxc_device_buffer_t *buffer, size_t offset, const void *src,
                                                size_t size);
CTXC_API ctxc_status_t ctxc_device_buffer_read(const ctxc_device_buffer_t *buffer, size_t offset, void *dst,
                                               size_t size);
/* The buffer: UINT8 [bytes]. */
CTXC_API ctxc_status_t ctxc_device_buffer_view(const ctxc_device_buffer_t *buffer, ctxc_device_view_t *out_view);

/* Host buffers (ctxc_host_buffer_options_t). CTXC_E_NO_MEMORY (naming the bytes) when the memory cannot be had. */
CTXC_API void ctxc_host_buffer_options_init(ctxc_host_buffer_options_t *options);
CTXC_API ctxc_status_t ctxc_host_buffer_create(ctxc_device_backend_t *backend,
                                               const ctxc_host_buffer_options_t *options,
                                               ctxc_host_buffer_t **out_buffer);
CTXC_API ctxc_status_t ctxc_host_buffer_destroy(ctxc_host_buffer_t *buffer);
CTXC_API ctxc_status_t ctxc_host_buffer_size(const ctxc_host_buffer_t *buffer, size_t *out_bytes);
/* The host address of the buffer (NULL when empty): the caller may read and write it between copies, after
 * ctxc_device_backend_synchronize (the copies are asynchronous on CUDA). */
CTXC_API ctxc_status_t ctxc_host_buffer_data(const ctxc_host_buffer_t *buffer, void **out_data);
/* Copies [offset, offset + size) of the buffer in or out, after synchronising the backend (so they see every copy
 * issued before them); the range must lie inside the buffer. */
CTXC_API ctxc_status_t ctxc_host_buffer_write(ctxc_host_buffer_t *buffer, size_t offset, const void *src, size_t size);
CTXC_API ctxc_status_t ctxc_host_buffer_read(const ctxc_host_buffer_t *buffer, size_t offset, void *dst, size_t size);

CTXC_API void ctxc_kv_pool_options_init(ctxc_kv_pool_options_t *options);
CTXC_API ctxc_status_t ctxc_kv_pool_create(ctxc_device_backend_t *backend, const ctxc_kv_pool_options_t *options,
                                           ctxc_kv_pool_t **out_pool);
CTXC_API ctxc_status_t ctxc_kv_pool_destroy(ctxc_kv_pool_t *pool);
/* Bytes of one K (or V) page of a layer: page_size * kv_heads * head_dim * sizeof(dtype). */
CTXC_API ctxc_status_t ctxc_kv_pool_page_bytes(const ctxc_kv_pool_t *pool, int32_t layer, size_t *out_bytes);
CTXC_API ctxc_status_t ctxc_kv_pool_footprint_bytes(const ctxc_kv_pool_t *pool, size_t *out_bytes);
/* The footprint a pool of these options would have: what external_data must hold (the external fields are
 * ignored). The same geometry errors as ctxc_kv_pool_create. */
CTXC_API ctxc_status_t ctxc_kv_pool_required_bytes(const ctxc_kv_pool_options_t *options, size_t *out_bytes);
/* One layer: the pool's dtype, [2, num_pages, page_size, kv_heads, head_dim] (K half, then V half: K page p at
 * data + p * page bytes, its V page at data + (p + num_pages) * page bytes). Layers start 256-byte aligned. */
CTXC_API ctxc_status_t ctxc_kv_pool_layer_view(const ctxc_kv_pool_t *pool, int32_t layer, ctxc_device_view_t *out_view);
/* The whole pool: UINT8 [footprint] (layer l at its layer view's data). */
CTXC_API ctxc_status_t ctxc_kv_pool_memory_view(const ctxc_kv_pool_t *pool, ctxc_device_view_t *out_view);
/* page_count consecutive flat pages from first_flat_page (in [0, 2 * num_pages)); size = page_count * page bytes. */
CTXC_API ctxc_status_t ctxc_kv_pool_write_pages(ctxc_kv_pool_t *pool, int32_t layer, int32_t first_flat_page,
                                                int32_t page_count, const void *src, size_t size);
CTXC_API ctxc_status_t ctxc_kv_pool_read_pages(const ctxc_kv_pool_t *pool, int32_t layer, int32_t first_flat_page,
                                               int32_t page_count, void *dst, size_t size);

/* The payload of one host slot (ctxc_host_slot_layout_t): sum over layers of 2 * page bytes. */
CTXC_API ctxc_status_t ctxc_kv_pool_host_payload_bytes(const ctxc_kv_pool_t *pool, size_t *out_bytes);
CTXC_API void ctxc_host_slot_layout_init(ctxc_host_slot_layout_t *layout);
/* Page pages[i] (every layer, K and V) into slot host_slots[i] of `host`, i < count, in ONE launch on the backend's
 * stream (asynchronous on CUDA: synchronise before reading the slots). Page ids in [0, num_pages), slots in
 * [0, layout->slot_count), no slot twice, a host buffer of the pool's backend, a layout that fits it: else
 * CTXC_E_CONTRACT (a NULL array with count > 0: CTXC_E_INVALID_ARGUMENT), nothing enqueued. */
CTXC_API ctxc_status_t ctxc_kv_pool_copy_pages_to_host(const ctxc_kv_pool_t *pool, const int32_t *pages,
                                                       const int32_t *host_slots, size_t count,
                                                       ctxc_host_buffer_t *host, const ctxc_host_slot_layout_t *layout);
/* Slot host_slots[i] of `host` into page pages[i], i < count: the same checks, with no page twice. */
CTXC_API ctxc_status_t ctxc_kv_pool_copy_pages_from_host(ctxc_kv_pool_t *pool, const int32_t *pages,
                                                         const int32_t *host_slots, size_t count,
                                                         const ctxc_host_buffer_t *host,
                                                         const ctxc_host_slot_layout_t *layout);

/* A page table of at most INT32_MAX entries (see ctxc_kv_page_table_options_t). The host table is the truth;
 * ctxc_kv_page_table_upload copies the rows changed since the last upload. */
CTXC_API void ctxc_kv_page_table_options_init(ctxc_kv_page_table_options_t *options);
CTXC_API ctxc_status_t ctxc_kv_page_table_create(ctxc_device_backend_t *backend,
                                                 const ctxc_kv_page_table_options_t *options,
                                                 ctxc_kv_page_table_t **out_table);
CTXC_API ctxc_status_t ctxc_kv_page_table_destroy(ctxc_kv_page_table_t *table);
/* Slot reads K pages k_pages[0..count) then -1. -1 entries (holes) only in sparse-window mode. */
CTXC_API ctxc_status_t ctxc_kv_page_table_set_row(ctxc_kv_page_table_t *table, int32_t slot, const int32_t *k_pages,
                                                  size_t count);
CTXC_API ctxc_status_t ctxc_kv_page_table_clear_row(ctxc_kv_page_table_t *table, int32_t slot);
CTXC_API ctxc_status_t ctxc_kv_page_table_set_identity(ctxc_kv_page_table_t *table);
/* Dense mode: only appending after the live prefix, replacing a live entry, or clearing the last one. */
CTXC_API ctxc_status_t ctxc_kv_page_table_set_entry(ctxc_kv_page_table_t *table, int32_t slot, int32_t logical_page,
                                                    int32_t k_page);
CTXC_API ctxc_status_t ctxc_kv_page_table_clear_entry(ctxc_kv_page_table_t *table, int32_t slot, int32_t logical_page);
/* Row b moves to old_to_new[b] (-1 retires it); each destination < new_batch exactly once. */
CTXC_API ctxc_status_t ctxc_kv_page_table_compact_rows(ctxc_kv_page_table_t *table, const int32_t *old_to_new,
                                                       int32_t old_batch, int32_t new_batch);
/* CTXC_OK, or CTXC_E_INVARIANT with the first violation in ctxc_last_error(). */
CTXC_API ctxc_status_t ctxc_kv_page_table_check_invariants(const ctxc_kv_page_table_t *table);
/* *out_copies (optional): the number of row-range copies issued (0 when nothing changed). */
CTXC_API ctxc_status_t ctxc_kv_page_table_upload(ctxc_kv_page_table_t *table, int32_t *out_copies);
/* The whole host table: max_batch * 2 * max_pages_per_seq entries. Two-call. */
CTXC_API ctxc_status_t ctxc_kv_page_table_read_host(const ctxc_kv_page_table_t *table, int32_t *out_entries,
                                                    size_t out_capacity, size_t *out_count);
/* The device copy the kernels read: INT32 [max_batch, 2, max_pages_per_seq]. It is current only after
 * ctxc_kv_page_table_upload (the host table is the truth; an edit reaches the device at the next upload, which
 * overwrites whatever was written to those rows through this pointer). */
CTXC_API ctxc_status_t ctxc_kv_page_table_device_view(const ctxc_kv_page_table_t *table, ctxc_device_view_t *out_view);

/* Device int32 KV lengths of the active sequences (at most max_batch). */
CTXC_API void ctxc_kv_lengths_options_init(ctxc_kv_lengths_options_t *options);
CTXC_API ctxc_status_t ctxc_kv_lengths_create(ctxc_device_backend_t *backend, const ctxc_kv_lengths_options_t *options,
                                              ctxc_kv_lengths_t **out_lengths);
CTXC_API ctxc_status_t ctxc_kv_lengths_destroy(ctxc_kv_lengths_t *lengths);
/* Starts a batch of `count` sequences with these lengths (each >= 0). */
CTXC_API ctxc_status_t ctxc_kv_lengths_set(ctxc_kv_lengths_t *lengths, const int32_t *values, size_t count);
CTXC_API ctxc_status_t ctxc_kv_lengths_add(ctxc_kv_lengths_t *lengths, int32_t increment);
/* Element-wise: increments must cover the same active batch. */
CTXC_API ctxc_status_t ctxc_kv_lengths_add_lengths(ctxc_kv_lengths_t *lengths, const ctxc_kv_lengths_t *increments);
/* Dense, order-preserving map of the active batch; the active batch becomes new_batch. */
CTXC_API ctxc_status_t ctxc_kv_lengths_compact(ctxc_kv_lengths_t *lengths, const int32_t *old_to_new, int32_t old_batch,
                                               int32_t new_batch);
/* The active lengths. Two-call pattern. */
CTXC_API ctxc_status_t ctxc_kv_lengths_read(const ctxc_kv_lengths_t *lengths, int32_t *out_values, size_t out_capacity,
                                            size_t *out_count);
/* The device vector: INT32 [max_batch]; entries at and beyond the active batch are unspecified. */
CTXC_API ctxc_status_t ctxc_kv_lengths_device_view(const ctxc_kv_lengths_t *lengths, ctxc_device_view_t *out_view);
/* The number of active sequences (the count of the last set, changed by compact). */
CTXC_API ctxc_status_t ctxc_kv_lengths_active_batch(const ctxc_kv_lengths_t *lengths, int32_t *out_active_batch);

CTXC_API void ctxc_resident_state_options_init(ctxc_resident_state_options_t *options);
CTXC_API ctxc_status_t ctxc_resident_state_create(ctxc_device_backend_t *backend,
                                                  const ctxc_resident_state_options_t *options,
                                                  ctxc_resident_state_t **out_state);
CTXC_API ctxc_status_t ctxc_resident_state_destroy(ctxc_resident_state_t *state);
/* Bytes of one row of part CTXC_STATE_RECURRENT, _CONV or _BOUNDARY_HIDDEN (0 if the state holds none). */
CTXC_API ctxc_status_t ctxc_resident_state_row_bytes(const ctxc_resident_state_t *state, int32_t part,
                                                     size_t *out_bytes);
CTXC_API ctxc_status_t ctxc_resident_state_footprint_bytes(const ctxc_resident_state_t *state, size_t *out_bytes);
/* The footprint a state of these options would have on this backend (what external_data must hold). */
CTXC_API ctxc_status_t ctxc_resident_state_required_bytes(const ctxc_device_backend_t *backend,
                                                          const ctxc_resident_state_options_t *options,
                                                          size_t *out_bytes);
/* One slab: part CTXC_STATE_RECURRENT or _CONV of a layer, or _BOUNDARY_HIDDEN (layer 0): its dtype, [max_batch,
 * row elements] (recurrent: heads * head_dim * state_size; conv: conv_dim * conv_kernel; hidden: hidden_size,
 * FP16). Slabs start 256-byte aligned. */
CTXC_API ctxc_status_t ctxc_resident_state_view(const ctxc_resident_state_t *state, int32_t part, int32_t layer,
                                                ctxc_device_view_t *out_view);
/* The whole state: UINT8 [footprint]. */
CTXC_API ctxc_status_t ctxc_resident_state_memory_view(const ctxc_resident_state_t *state,
                                                       ctxc_device_view_t *out_view);
/* One row (size = row bytes); the boundary hidden part has layer 0 only. */
CTXC_API ctxc_status_t ctxc_resident_state_write_row(ctxc_resident_state_t *state, int32_t part, int32_t layer,
                                                     int32_t slot, const void *src, size_t size);
CTXC_API ctxc_status_t ctxc_resident_state_read_row(const ctxc_resident_state_t *state, int32_t part, int32_t layer,
                                                    int32_t slot, void *dst, size_t size);
/* Zero the recurrent and conv rows of a slot in every layer: one launch. */
CTXC_API ctxc_status_t ctxc_resident_state_zero_slot(ctxc_resident_state_t *state, int32_t slot);
/* Compact rows [0, old_batch) of every layer by a dense, order-preserving map: one launch. */
CTXC_API ctxc_status_t ctxc_resident_state_compact(ctxc_resident_state_t *state, const int32_t *old_to_new,
                                                   int32_t old_batch, int32_t new_batch);

CTXC_API void ctxc_snapshot_storage_options_init(ctxc_snapshot_storage_options_t *options);
CTXC_API void ctxc_snapshot_transfer_init(ctxc_snapshot_transfer_t *transfer);
/* state, base_pool, draft_pool: each optional (NULL); a draft pool needs a base pool and must be another pool. */
CTXC_API ctxc_status_t ctxc_snapshot_storage_create(ctxc_device_backend_t *backend, ctxc_resident_state_t *state,
                                                    ctxc_kv_pool_t *base_pool, ctxc_kv_pool_t *draft_pool,
                                                    const ctxc_snapshot_storage_options_t *options,
                                                    ctxc_snapshot_storage_t **out_storage);
CTXC_API ctxc_status_t ctxc_snapshot_storage_destroy(ctxc_snapshot_storage_t *storage);
CTXC_API ctxc_status_t ctxc_snapshot_storage_layout(const ctxc_snapshot_storage_t *storage,
                                                    ctxc_snapshot_layout_t *out_layout);
/* Live -> snapshot and snapshot -> live, every part in ONE launch. */
CTXC_API ctxc_status_t ctxc_snapshot_storage_capture(ctxc_snapshot_storage_t *storage,
                                                     const ctxc_snapshot_transfer_t *transfer);
CTXC_API ctxc_status_t ctxc_snapshot_storage_restore(ctxc_snapshot_storage_t *storage,
                                                     const ctxc_snapshot_transfer_t *transfer);
/* One region of a slot: part CTXC_STATE_* and its layer (0 for the hidden row). */
CTXC_API ctxc_status_t ctxc_snapshot_storage_region_bytes(const ctxc_snapshot_storage_t *storage, int32_t part,
                                                          int32_t layer, size_t *out_bytes);
CTXC_API ctxc_status_t ctxc_snapshot_storage_write_region(ctxc_snapshot_storage_t *storage, int32_t part, int32_t layer,
                                                          int32_t slot, const void *src, size_t size);
CTXC_API ctxc_status_t ctxc_snapshot_storage_read_region(const ctxc_snapshot_storage_t *storage, int32_t part,
                                                         int32_t layer, int32_t slot, void *dst, size_t size);
/* One slab: part CTXC_STATE_RECURRENT (the recurrent slots) or CTXC_STATE_PARTIAL_KV (the partial-KV slots):
 * UINT8 [slots, bytes per slot], slots packed without padding (the layout's region offsets within a slot). A
 * slab without slots has data NULL and shape [0, bytes per slot]. */
CTXC_API ctxc_status_t ctxc_snapshot_storage_view(const ctxc_snapshot_storage_t *storage, int32_t part,
                                                  ctxc_device_view_t *out_view);

/* In-place dim-0 compaction of `rows` rows of row_bytes bytes at buffer offset `offset` (any element size) by a
 * dense, order-preserving map of old_batch <= rows entries. */
CTXC_API ctxc_status_t ctxc_device_compact_rows(ctxc_device_buffer_t *buffer, size_t offset, size_t row_bytes,
                                                int32_t rows, const int32_t *old_to_new, int32_t old_batch,
                                                int32_t new_batch);
/* Rebase `count` int32 execution-row indices at buffer offset `offset` (row = sequence * rows_per_sequence + k)
 * after that compaction: retired sequences' rows and out-of-range values become -1. */
CTXC_API ctxc_status_t ctxc_device_rebase_execution_rows(ctxc_device_buffer_t *buffer, size_t offset, size_t count,
                                                         const int32_t *old_to_new, int32_t old_batch,
                                                         int32_t new_batch, int32_t rows_per_sequence);
/* Chunked 128-bit FNV-1a (the 0.11 opaque-identity scheme; num_chunks CTXC_DEFAULT_HASH_CHUNKS for it) of
 * [offset, offset + size) of a device buffer: chunks hashed on the backend, reduced on the host. */
CTXC_API ctxc_status_t ctxc_device_hash_chunked(const ctxc_device_buffer_t *buffer, size_t offset, size_t size,
                                                uint32_t num_chunks, ctxc_hash128_t *out_hash);
/* The same digest computed entirely on the host. */
CTXC_API ctxc_status_t ctxc_hash_chunked_host(const void *bytes, size_t size, uint32_t num_chunks,
                                              ctxc_hash128_t *out_hash);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_DEVICE_H */
