// StoreObject: how one KV block travels through a store shared by replicas (issue 27): the key it is stored
// under, and the object's header, checked at every load.
//
// Keys name the layout as well as the block, because a store keeps the first value put under a key (Mooncake
// does): two deployments that differ in anything that changes the bytes (model, dtype, page size, layers, heads,
// head dim, parallel rank, hash algorithm, whether the hash was keyed) must never share a key. The shape follows
// vLLM's Mooncake connector (model@tp_rank:N@...@<block hash>):
//     <model>@tp_rank:<t>@pp_rank:<p>@kv:<dtype>:p<page>:l<layers>:<layout digest, 16 hex>@<hash algorithm>@<hi><lo>
// the hash as 32 lowercase hex digits. Replicas that share a store and a hash key share keys.
//
// An object is a 64-byte header, then the payload (one page of every layer, the host tier's page-first slot
// payload). The header: a magic number and version, the layout digest, the block hash, the page's tokens, the
// payload's length and a 64-bit checksum of it. A load checks all of it before it trusts a byte: an object that is
// short, foreign (another magic or version), of another layout, of another block, of another length or whose
// payload does not match its checksum is a miss (the verdict says which, to be counted), never wrong bytes.
//
// Invariants: keys are a pure function of (layout, hash); a header written by encodeStoreObjectHeader for a payload
//             passes checkStoreObject with that payload and the same expectation, and any single changed byte of
//             the payload, or of the header's fields, fails it.
// Errors:     a model name that is empty, longer than 256 bytes or contains '@' or a control character, a
//             non-positive page size or layer count: ContractError from storeKeyPrefix. Checks never throw.
// Cost:       the checksum reads the payload once (8 bytes per step, four independent lanes: about 11 GB/s on the
//             development machine, above any store's speed); the rest is O(1).
// Threading:  pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ctxcache/block_hash.h"

namespace ctxcache::tier {

struct StoreLayout {
    std::string model;         // the model's identity (a name and revision); no '@'
    std::string dtype;         // the KV dtype's name ("fp16", "bf16", ...)
    int32_t pageSize = 0;      // tokens per page
    int32_t layers = 0;        // attention layers in a page's payload
    uint64_t layoutDigest = 0;  // HostTier::layoutDigest of the pool (page size, dtype, every layer's heads, dim)
    int32_t tpRank = 0;
    int32_t ppRank = 0;
    std::string hashAlgorithm;  // "sha256" or "fnv1a128"
    bool keyedHash = false;     // whether the block hashes were computed with a secret key
};

// The key's layout part, ending with '@' (computed once per deployment); a block's key is prefix + hex(hash).
std::string storeKeyPrefix(StoreLayout const& layout);
std::string storeKey(std::string_view prefix, BlockHash const& hash);

struct StoreObjectHeader {
    static constexpr uint64_t kMagic = 0x314a424f58544378ull;  // "xCTXOBJ1"
    static constexpr uint32_t kVersion = 1;
    uint64_t magic = kMagic;
    uint32_t version = kVersion;
    uint32_t headerBytes = 64;
    uint64_t layoutDigest = 0;
    uint64_t hashHi = 0;
    uint64_t hashLo = 0;
    int64_t tokens = 0;        // the page's tokens (the page size)
    uint64_t payloadBytes = 0;
    uint64_t checksum = 0;     // storeChecksum of the payload
};
static_assert(sizeof(StoreObjectHeader) == 64, "a store object's header is 64 bytes");

// A 64-bit checksum of bytes (not cryptographic: it catches corruption and truncation, not an adversary; the keys'
// hashes and the layout digest keep other deployments' objects apart).
uint64_t storeChecksum(void const* data, size_t size) noexcept;

// The header of a block's object whose payload is payload[0, payloadBytes).
StoreObjectHeader encodeStoreObjectHeader(uint64_t layoutDigest, BlockHash const& hash, int64_t tokens,
                                          void const* payload, size_t payloadBytes) noexcept;

enum class StoreObjectVerdict : uint8_t {
    kValid = 0,
    kShort,          // fewer bytes than a header, or than the header's payload
    kForeign,        // another magic number or version
    kOtherLayout,    // another layout digest or page size
    kOtherBlock,     // another block hash
    kWrongLength,    // a payload length other than the layout's
    kCorrupt,        // the payload does not match its checksum
};
char const* toString(StoreObjectVerdict verdict) noexcept;

struct StoreObjectExpectation {
    uint64_t layoutDigest = 0;
    BlockHash hash{};
    int64_t tokens = 0;
    size_t payloadBytes = 0;
};

// Checks object[0, size) (a header, then its payload) against what the loader asked for.
StoreObjectVerdict checkStoreObject(void const* object, size_t size, StoreObjectExpectation const& expect) noexcept;

}  // namespace ctxcache::tier
