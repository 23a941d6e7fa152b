/* ctxcache C ABI: block hashing: ctxc_hash128_t, hashers (SHA-256, keyed or not, and FNV-1a 128), the chained
 * hashes of a prompt's full blocks and its exact-prefix digest, with the non-token identity of a block
 * (LoRA adapter, media spans, digests). A hasher is immutable and may be shared between threads. */
#ifndef CTXCACHE_C_HASH_H
#define CTXCACHE_C_HASH_H

#include "ctxcache/c/library.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CTXC_HASH_SHA256 = 0, CTXC_HASH_FNV1A128 = 1 };

typedef struct ctxc_hasher ctxc_hasher_t;

/* Hashes are ctxc_hash128_t {hi, lo}: an array of n of them is the same memory as an (n, 2) uint64 array. */
typedef struct ctxc_hash128 {
    uint64_t hi;
    uint64_t lo;
} ctxc_hash128_t;

/* ---- block hashing --------------------------------------------------------------------------------------- */

typedef struct ctxc_hasher_options {
    uint32_t struct_size;
    int32_t algorithm; /* CTXC_HASH_SHA256 (default) or CTXC_HASH_FNV1A128 */
    const uint8_t *key; /* optional secret for SHA-256 (NULL or key_length 0: unkeyed); copied */
    size_t key_length;
} ctxc_hasher_options_t;

typedef struct ctxc_media_span_key {
    ctxc_hash128_t content_digest;
    ctxc_hash128_t placement_digest;
    int32_t offset_within_block;
    int32_t item_order;
    uint32_t modality; /* 0..255 */
} ctxc_media_span_key_t;

/* Non-token identity of a block (LoRA adapter, media spans, position / custom-embedding / isolation digests).
 * A has_* field is 0 or 1. */
typedef struct ctxc_block_key_extras {
    const ctxc_media_span_key_t *media;
    size_t media_count;
    uint32_t has_adapter;
    uint32_t has_position_digest;
    uint32_t has_custom_embedding_digest;
    uint32_t has_isolation_digest;
    ctxc_hash128_t adapter_id;
    uint64_t adapter_generation;
    ctxc_hash128_t position_digest;
    ctxc_hash128_t custom_embedding_digest;
    ctxc_hash128_t isolation_digest;
} ctxc_block_key_extras_t;

CTXC_API void ctxc_hasher_options_init(ctxc_hasher_options_t *options);
/* A hasher for an algorithm and optional key. Release with ctxc_hasher_destroy. */
CTXC_API ctxc_status_t ctxc_hasher_create(const ctxc_hasher_options_t *options, ctxc_hasher_t **out_hasher);
/* NULL is accepted (no-op). */
CTXC_API ctxc_status_t ctxc_hasher_destroy(ctxc_hasher_t *hasher);

/* Chained hashes of the floor(token_count / page_size) full blocks of `tokens` (a partial tail is ignored).
 * hasher: NULL = unkeyed SHA-256. extras: NULL/0, one entry (applies to every block) or one per full block.
 * per_position_media_hashes: NULL or token_count entries; a non-zero entry replaces that token's id.
 * Two-call pattern on out_hashes / out_capacity / *out_count. The hashes are written straight into out_hashes:
 * after an error status its contents are unspecified (*out_count is set as the two-call pattern says). */
CTXC_API ctxc_status_t ctxc_hash_full_blocks(const ctxc_hasher_t *hasher, const int32_t *tokens, size_t token_count,
                                             int32_t page_size, const ctxc_block_key_extras_t *extras,
                                             size_t extras_count, const ctxc_hash128_t *per_position_media_hashes,
                                             ctxc_hash128_t *out_hashes, size_t out_capacity, size_t *out_count);
/* Digest of an exact prefix (ceil(token_count / page_size) blocks, the last may be partial; empty = chain root).
 * extras: NULL/0, one entry, or one per touched block. */
CTXC_API ctxc_status_t ctxc_hash_exact_prefix(const ctxc_hasher_t *hasher, const int32_t *tokens, size_t token_count,
                                              int32_t page_size, const ctxc_block_key_extras_t *extras,
                                              size_t extras_count, const ctxc_hash128_t *per_position_media_hashes,
                                              ctxc_hash128_t *out_digest);
/* One block under `parent` (NULL parent = the chain root). extras may be NULL. */
CTXC_API ctxc_status_t ctxc_hash_block(const ctxc_hasher_t *hasher, const ctxc_hash128_t *parent, const int32_t *tokens,
                                       size_t token_count, const ctxc_block_key_extras_t *extras,
                                       const ctxc_hash128_t *per_position_media_hashes, ctxc_hash128_t *out_hash);
/* Identity of opaque bytes (a LoRA name, a media item). */
CTXC_API ctxc_status_t ctxc_hash_opaque_identity(const ctxc_hasher_t *hasher, const void *bytes, size_t size,
                                                 ctxc_hash128_t *out_hash);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_HASH_H */
