/* ctxcache C ABI: dense K and V in and out of a pool's pages through a page table (scatter and gather), into
 * device buffers or over the caller's own memory, in either dense layout. In the family of the
 * pool's backend (device.h). */
#ifndef CTXCACHE_C_DENSE_KV_H
#define CTXCACHE_C_DENSE_KV_H

#include "ctxcache/c/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dense KV in and out of pages over the caller's memory (scatter and gather) ---------------------------- */

/* An engine computes K and V densely (a prefill chunk, a decode step) and keeps them in a pool's pages; its
 * attention reads them back densely. These calls move them through the page table in one launch per layer, K and V
 * together, in either dense layout, over memory the caller owns (CUDA: device memory of the pool's backend's device;
 * CPU backend: host memory, e.g. a numpy array or a torch CPU tensor, without a copy). The caller's pointers must
 * hold exactly the bytes the request describes (`bytes` each) and be aligned to the element size.
 * Errors: as in the device layer; a write through an unmapped page-table entry, a dirty table, a byte count that
 * does not match the request and an unknown layout are CTXC_E_CONTRACT (nothing written). */

enum {
    CTXC_KV_LAYOUT_TOKEN_MAJOR = 0, /* [batch, seq_len, kv_heads, head_dim] */
    CTXC_KV_LAYOUT_HEAD_MAJOR = 1 /* [batch, kv_heads, seq_len, head_dim]: what attention code reads */
};

typedef struct ctxc_kv_scatter_request {
    uint32_t struct_size;
    int32_t layer;
    int32_t batch; /* slots [0, batch) of the table */
    int32_t seq_len; /* tokens per input row */
    int32_t first_position; /* position of input token 0 in every sequence */
    int32_t layout; /* CTXC_KV_LAYOUT_* (default TOKEN_MAJOR) */
} ctxc_kv_scatter_request_t;

CTXC_API void ctxc_kv_scatter_request_init(ctxc_kv_scatter_request_t *request);
/* Bytes of each of the K and V inputs: batch * seq_len * kv_heads * head_dim * sizeof(pool dtype). */
CTXC_API ctxc_status_t ctxc_kv_scatter_input_bytes(const ctxc_kv_pool_t *pool, const ctxc_kv_scatter_request_t *request,
                                                   size_t *out_bytes);
/* Token t of sequence b of k and v (the pool's dtype, `bytes` each) is written at position first_position + t of
 * slot b, through the (uploaded) page table; every page-table entry written through must be mapped. One launch. */
CTXC_API ctxc_status_t ctxc_kv_scatter(ctxc_kv_pool_t *pool, const ctxc_kv_page_table_t *table,
                                       const ctxc_kv_scatter_request_t *request, const void *k, const void *v,
                                       size_t bytes);

typedef struct ctxc_kv_gather_request {
    uint32_t struct_size;
    int32_t layer;
    int32_t batch; /* slots [0, batch) of the table */
    int32_t seq_len; /* tokens per output row */
    int32_t out_dtype; /* the pool's dtype, or FP16/BF16/FP32 from an FP8 pool (dequantised) */
    float k_scale; /* FP8 dequantisation scales (default 1) */
    float v_scale;
} ctxc_kv_gather_request_t;

CTXC_API void ctxc_kv_gather_request_init(ctxc_kv_gather_request_t *request);
/* Bytes of each of the K and V outputs: batch * seq_len * kv_heads * head_dim * sizeof(out_dtype). */
CTXC_API ctxc_status_t ctxc_kv_gather_output_bytes(const ctxc_kv_pool_t *pool, const ctxc_kv_gather_request_t *request,
                                                   size_t *out_bytes);
/* Dense K and V [batch, seq_len, kv_heads, head_dim] of one layer through the (uploaded) page table; unmapped
 * pages and tokens at or beyond lengths[b] (lengths may be NULL) are zero. One launch. */
CTXC_API ctxc_status_t ctxc_kv_gather(const ctxc_kv_pool_t *pool, const ctxc_kv_page_table_t *table,
                                      const ctxc_kv_lengths_t *lengths, const ctxc_kv_gather_request_t *request,
                                      ctxc_device_buffer_t *k_out, ctxc_device_buffer_t *v_out);
/* ctxc_kv_gather into caller memory (`bytes` each, exactly ctxc_kv_gather_output_bytes) in layout CTXC_KV_LAYOUT_*. */
CTXC_API ctxc_status_t ctxc_kv_gather_into(const ctxc_kv_pool_t *pool, const ctxc_kv_page_table_t *table,
                                           const ctxc_kv_lengths_t *lengths, const ctxc_kv_gather_request_t *request,
                                           int32_t layout, void *k_out, void *v_out, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_DENSE_KV_H */
