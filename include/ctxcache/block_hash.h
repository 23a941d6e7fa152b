// Block hashing: the chained 128-bit identity of a complete token block and its whole prefix.
//
// Two algorithms share one tagged byte stream (reference c.1): every integer little-endian, a Hash128 as hi then
// lo, one tag byte before each field. The stream of one block is
//   Parent parent | Tokens u64(count) {u32 token | MediaToken hash128}* | Media u64(n) {MediaEntry ...}* |
//   Adapter (Absent | Present AdapterId id AdapterGeneration u64) | PositionDigest (Absent | Present hash) |
//   CustomEmbeddingDigest (..) | IsolationDigest (..)
// and it is compressed by either
//   kFnv1a128  128-bit FNV-1a (offset basis 0x6C62272E07BB0142_62B821756295C58D, prime 2^88 + 2^8 + 0x3B),
//              result hi/lo = upper/lower 64 bits of the state. Fast, not collision resistant.
//   kSha256    SHA-256 (OpenSSL libcrypto) truncated to its first 16 bytes, read as big-endian hi then lo.
//              With a secret key K the digest is SHA-256(SHA-256(K) || 0^32 || stream): the 64-byte key block
//              is absorbed once per hasher, so keying costs nothing per block; the truncated output defeats
//              length extension, so crafted collisions between tenants need the key. The default.
//
// Chaining: block 0's parent is kChainRoot; hashFullBlocks ignores a partial tail; hashExactPrefix also hashes
// the partial tail, and an empty prefix digests to kChainRoot.
//
// Cost:      one pass over the block's bytes; no heap allocation per block beyond the output vector. A chain with
//            no per-position media hashes and one extras for every block (the common case) stores only each
//            block's parent and tokens into a prepared stream: at page 16 two SHA-256 compressions per block.
// Threading: a BlockHasher is immutable after construction and may be shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ctxcache {

struct Hash128 {
    uint64_t hi = 0;
    uint64_t lo = 0;

    friend constexpr bool operator==(Hash128 const& a, Hash128 const& b) noexcept {
        return a.hi == b.hi && a.lo == b.lo;
    }
    friend constexpr bool operator!=(Hash128 const& a, Hash128 const& b) noexcept { return !(a == b); }
};
using BlockHash = Hash128;

// Parent of block 0 and the digest of an empty prefix.
inline constexpr Hash128 kChainRoot{0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full};

struct AdapterKey {
    Hash128 id;
    uint64_t generation = 0;
};

struct MediaSpanKey {
    Hash128 contentDigest;
    Hash128 placementDigest;
    int32_t offsetWithinBlock = 0;
    int32_t itemOrder = 0;
    uint8_t modality = 0;
};

// Non-token identity of a block: the same tokens under another LoRA adapter, media item, position scheme,
// custom embedding or isolation domain must not share KV.
struct BlockKeyExtras {
    std::vector<MediaSpanKey> media;
    std::optional<AdapterKey> adapter;
    std::optional<Hash128> positionDigest;
    std::optional<Hash128> customEmbeddingDigest;
    std::optional<Hash128> isolationDigest;
};

// A non-owning view of consecutive block hashes: what the planners and the manager read. A std::vector converts
// implicitly; C callers pass their arrays without a copy.
struct BlockHashSpan {
    BlockHash const* data = nullptr;
    size_t size = 0;

    BlockHashSpan() = default;
    BlockHashSpan(BlockHash const* hashes, size_t count) : data(hashes), size(count) {}
    BlockHashSpan(std::vector<BlockHash> const& hashes) : data(hashes.data()), size(hashes.size()) {}  // NOLINT

    BlockHash const* begin() const noexcept { return data; }
    BlockHash const* end() const noexcept { return data + size; }
    BlockHash const& operator[](size_t i) const noexcept { return data[i]; }
    bool empty() const noexcept { return size == 0; }
};

enum class HashAlgorithm : uint8_t { kSha256 = 0, kFnv1a128 = 1 };

class BlockHasher {
public:
    // key: optional secret for kSha256 (empty = unkeyed); a key with kFnv1a128 is a ContractError.
    explicit BlockHasher(HashAlgorithm algorithm = HashAlgorithm::kSha256, std::string_view key = {});

    HashAlgorithm algorithm() const noexcept { return algorithm_; }
    bool keyed() const noexcept { return keyed_; }

    // The identity of `count` tokens whose prefix is `parent`. perPositionMediaHash (count entries, or null):
    // a non-zero entry replaces that position's token id by the media item's content hash.
    BlockHash hashBlock(BlockHash parent, int32_t const* tokens, size_t count, BlockKeyExtras const& extras = {},
                        Hash128 const* perPositionMediaHash = nullptr) const;

    // Chained hashes of the floor(tokenCount / pageSize) complete blocks. extrasPerBlock: empty, one entry
    // (applied to every block, the runtime's request-wide identity) or one per full block.
    std::vector<BlockHash> hashFullBlocks(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                                          std::vector<BlockKeyExtras> const& extrasPerBlock = {},
                                          Hash128 const* perPositionMediaHash = nullptr) const;
    // Same, appending into `out` (reused storage: no allocation once it has capacity).
    void hashFullBlocksInto(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                            std::vector<BlockKeyExtras> const& extrasPerBlock, Hash128 const* perPositionMediaHash,
                            std::vector<BlockHash>& out) const;
    // Same, into the caller's array of `capacity` hashes (at least floor(tokenCount / pageSize); ContractError
    // otherwise, nothing written). A request's hashes go straight to their destination (a C caller's buffer, a
    // numpy array): no intermediate vector to write and copy. Returns the number written. On an error (bad
    // arguments, out of memory) a prefix of `out` may have been written; its contents are then unspecified.
    size_t hashFullBlocksTo(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                            std::vector<BlockKeyExtras> const& extrasPerBlock, Hash128 const* perPositionMediaHash,
                            BlockHash* out, size_t capacity) const;

    // Digest of an exact prefix: chained over ceil(tokenCount / pageSize) blocks, the last one may be partial.
    // extrasPerBlock: empty, one entry, or one per touched block (ceil).
    BlockHash hashExactPrefix(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                              std::vector<BlockKeyExtras> const& extrasPerBlock = {},
                              Hash128 const* perPositionMediaHash = nullptr) const;

    // Identity of opaque bytes (a LoRA name, a media item's content): Tag OpaqueIdentity, u64 length, bytes.
    Hash128 hashOpaqueIdentity(std::string_view bytes) const;

    // The default hasher: unkeyed SHA-256.
    static BlockHasher const& defaultHasher();

private:
    Hash128 digest(unsigned char const* bytes, size_t size) const;
    // Chains `blocks` blocks of `page` tokens, all with `extras` and no media, from `parent` (the same digests as
    // the generic path, faster); appends the hashes to *out, or writes them to raw[0..blocks), unless both are
    // null; returns the last (parent if none).
    BlockHash hashUniformChain(int32_t const* tokens, size_t blocks, size_t page, BlockKeyExtras const& extras,
                               BlockHash parent, std::vector<BlockHash>* out, BlockHash* raw = nullptr) const;
    // The field-by-field chain from the root (per-block extras, media): out[0..blocks), which the caller sized.
    void hashGeneralChain(int32_t const* tokens, size_t blocks, size_t page,
                          std::vector<BlockKeyExtras> const& extrasPerBlock, Hash128 const* perPositionMediaHash,
                          BlockHash* out) const;

    HashAlgorithm algorithm_;
    bool keyed_ = false;
    alignas(8) unsigned char shaState_[128] = {};  // SHA256_CTX after absorbing the key block
};

// The reference's free functions, over a hasher (the default one unless given).
BlockHash hashBlock(BlockHash parent, int32_t const* tokens, size_t count, BlockKeyExtras const& extras = {},
                    Hash128 const* perPositionMediaHash = nullptr,
                    BlockHasher const& hasher = BlockHasher::defaultHasher());
std::vector<BlockHash> hashFullBlocks(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                                      std::vector<BlockKeyExtras> const& extrasPerBlock = {},
                                      Hash128 const* perPositionMediaHash = nullptr,
                                      BlockHasher const& hasher = BlockHasher::defaultHasher());
BlockHash hashExactPrefix(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                          std::vector<BlockKeyExtras> const& extrasPerBlock = {},
                          BlockHasher const& hasher = BlockHasher::defaultHasher());
Hash128 hashOpaqueIdentity(std::string_view bytes, BlockHasher const& hasher = BlockHasher::defaultHasher());

// Plain 128-bit FNV-1a of raw bytes from the offset basis (no tags): the compressor of kFnv1a128, exposed for
// known-answer tests and for the device layer's chunked media hashing.
Hash128 fnv1a128(void const* bytes, size_t size, Hash128 state = Hash128{0x6C62272E07BB0142ull, 0x62B821756295C58Dull});

std::string toHex(Hash128 const& hash);

// Hash-table hash of a Hash128 (the values are already uniformly distributed): hi ^ (lo * golden ratio).
struct Hash128Hasher {
    size_t operator()(Hash128 const& h) const noexcept {
        return static_cast<size_t>(h.hi ^ (h.lo * 0x9E3779B97F4A7C15ull));
    }
};

}  // namespace ctxcache

template <>
struct std::hash<ctxcache::Hash128> : ctxcache::Hash128Hasher {};
