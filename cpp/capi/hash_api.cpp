// C ABI of include/ctxcache/c/hash.h: block hashing.
#include "ctxcache/c/hash.h"

#include <string_view>

#include "api_support.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

std::vector<BlockKeyExtras> toExtras(ctxc_block_key_extras_t const* extras, size_t count) {
    requireArray(extras, count, "extras");
    std::vector<BlockKeyExtras> result(count);
    for (size_t i = 0; i < count; ++i) {
        ctxc_block_key_extras_t const& e = extras[i];
        BlockKeyExtras& out = result[i];
        requireArray(e.media, e.media_count, "extras[].media");
        for (size_t m = 0; m < e.media_count; ++m) {
            ctxc_media_span_key_t const& span = e.media[m];
            if (span.modality > 255) invalidArgument("extras[].media[].modality must be in [0, 255]");
            out.media.push_back(MediaSpanKey{toHash(span.content_digest), toHash(span.placement_digest),
                                             span.offset_within_block, span.item_order,
                                             static_cast<uint8_t>(span.modality)});
        }
        if (requireBool(static_cast<int32_t>(e.has_adapter), "extras[].has_adapter"))
            out.adapter = AdapterKey{toHash(e.adapter_id), e.adapter_generation};
        if (requireBool(static_cast<int32_t>(e.has_position_digest), "extras[].has_position_digest"))
            out.positionDigest = toHash(e.position_digest);
        if (requireBool(static_cast<int32_t>(e.has_custom_embedding_digest), "extras[].has_custom_embedding_digest"))
            out.customEmbeddingDigest = toHash(e.custom_embedding_digest);
        if (requireBool(static_cast<int32_t>(e.has_isolation_digest), "extras[].has_isolation_digest"))
            out.isolationDigest = toHash(e.isolation_digest);
    }
    return result;
}

void requirePageSize(int32_t pageSize) {
    if (pageSize <= 0) invalidArgument("page_size must be positive (got " + std::to_string(pageSize) + ")");
}

Hash128 const* mediaHashes(ctxc_hash128_t const* media) { return reinterpret_cast<Hash128 const*>(media); }

// extras_count is 0, 1 (every block) or one per block: a malformed argument, not a state conflict.
void requireExtrasCount(size_t extrasCount, size_t blocks) {
    if (extrasCount > 1 && extrasCount != blocks)
        invalidArgument("extras_count is " + std::to_string(extrasCount) + " for " + std::to_string(blocks) +
                        " blocks (expected 0, 1 or one per block)");
}

}  // namespace

extern "C" {

CTXC_API void ctxc_hasher_options_init(ctxc_hasher_options_t* options) {
    if (!initSized(options)) return;
    options->algorithm = CTXC_HASH_SHA256;
}

CTXC_API ctxc_status_t ctxc_hasher_create(const ctxc_hasher_options_t* options, ctxc_hasher_t** out_hasher) {
    return guard(__func__, [&] {
        requireOut(out_hasher, "out_hasher") = nullptr;
        ctxc_hasher_options_t const& o = requireSized(options, "options");
        if (o.algorithm != CTXC_HASH_SHA256 && o.algorithm != CTXC_HASH_FNV1A128)
            invalidArgument("options->algorithm " + std::to_string(o.algorithm) + " is not a CTXC_HASH_* value");
        if (!o.key && o.key_length > 0)
            invalidArgument("options->key is NULL but key_length is " + std::to_string(o.key_length));
        if (o.algorithm == CTXC_HASH_FNV1A128 && o.key_length > 0)
            invalidArgument("options->key: fnv1a128 takes no key");
        std::string_view key(reinterpret_cast<char const*>(o.key), o.key ? o.key_length : 0);
        auto object = std::make_unique<HasherObject>(BlockHasher(static_cast<HashAlgorithm>(o.algorithm), key));
        *out_hasher = static_cast<ctxc_hasher_t*>(hashers().add(std::move(object)));
    });
}

CTXC_API ctxc_status_t ctxc_hasher_destroy(ctxc_hasher_t* hasher) {
    return guard(__func__, [&] {
        if (!hasher) return CTXC_OK;
        if (!hashers().remove(hasher)) invalidHandle("hasher is not a live ctxc_hasher_t");
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_hash_full_blocks(const ctxc_hasher_t* hasher, const int32_t* tokens, size_t token_count,
                                             int32_t page_size, const ctxc_block_key_extras_t* extras,
                                             size_t extras_count, const ctxc_hash128_t* per_position_media_hashes,
                                             ctxc_hash128_t* out_hashes, size_t out_capacity, size_t* out_count) {
    return guard(__func__, [&] {
        BlockHasher const& h = requireHasher(hasher);
        requireArray(tokens, token_count, "tokens");
        requirePageSize(page_size);
        size_t& count = requireOut(out_count, "out_count");
        size_t const blocks = token_count / static_cast<size_t>(page_size);
        count = blocks;
        if (out_capacity < blocks) {
            if (!out_hashes && out_capacity == 0) return CTXC_E_BUFFER_TOO_SMALL;
            throw ApiError(CTXC_E_BUFFER_TOO_SMALL, "out_hashes holds " + std::to_string(out_capacity) + " hashes, " +
                                                        std::to_string(blocks) + " needed");
        }
        if (blocks > 0 && !out_hashes) invalidArgument("out_hashes is NULL");
        requireExtrasCount(extras_count, blocks);
        std::vector<BlockKeyExtras> const e = toExtras(extras, extras_count);
        // Straight into the caller's array (the layout is BlockHash's: handles.h): no vector to fill and copy.
        h.hashFullBlocksTo(tokens, token_count, page_size, e, mediaHashes(per_position_media_hashes),
                           reinterpret_cast<BlockHash*>(out_hashes), out_capacity);
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_hash_exact_prefix(const ctxc_hasher_t* hasher, const int32_t* tokens, size_t token_count,
                                              int32_t page_size, const ctxc_block_key_extras_t* extras,
                                              size_t extras_count, const ctxc_hash128_t* per_position_media_hashes,
                                              ctxc_hash128_t* out_digest) {
    return guard(__func__, [&] {
        BlockHasher const& h = requireHasher(hasher);
        requireArray(tokens, token_count, "tokens");
        requirePageSize(page_size);
        ctxc_hash128_t& out = requireOut(out_digest, "out_digest");
        requireExtrasCount(extras_count,
                           (token_count + static_cast<size_t>(page_size) - 1) / static_cast<size_t>(page_size));
        out = fromHash(h.hashExactPrefix(tokens, token_count, page_size, toExtras(extras, extras_count),
                                         mediaHashes(per_position_media_hashes)));
    });
}

CTXC_API ctxc_status_t ctxc_hash_block(const ctxc_hasher_t* hasher, const ctxc_hash128_t* parent, const int32_t* tokens,
                                       size_t token_count, const ctxc_block_key_extras_t* extras,
                                       const ctxc_hash128_t* per_position_media_hashes, ctxc_hash128_t* out_hash) {
    return guard(__func__, [&] {
        BlockHasher const& h = requireHasher(hasher);
        requireArray(tokens, token_count, "tokens");
        ctxc_hash128_t& out = requireOut(out_hash, "out_hash");
        std::vector<BlockKeyExtras> const e = toExtras(extras, extras ? 1 : 0);
        out = fromHash(h.hashBlock(parent ? toHash(*parent) : kChainRoot, tokens, token_count,
                                   e.empty() ? BlockKeyExtras{} : e.front(), mediaHashes(per_position_media_hashes)));
    });
}

CTXC_API ctxc_status_t ctxc_hash_opaque_identity(const ctxc_hasher_t* hasher, const void* bytes, size_t size,
                                                 ctxc_hash128_t* out_hash) {
    return guard(__func__, [&] {
        BlockHasher const& h = requireHasher(hasher);
        requireBytes(bytes, size, "bytes");
        requireOut(out_hash, "out_hash") =
            fromHash(h.hashOpaqueIdentity(std::string_view(static_cast<char const*>(bytes), bytes ? size : 0)));
    });
}

}  // extern "C"
