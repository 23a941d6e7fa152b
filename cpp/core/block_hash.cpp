// Block hashing: serializes a block's tagged byte stream (reference c.1) into a reusable thread_local buffer and
// compresses it with FNV-1a 128 or truncated, optionally keyed, SHA-256 (OpenSSL's SHA256_CTX, padded in place so
// one SHA256_Update does all the work). Little-endian hosts only (static_assert). A BlockHasher is immutable after
// construction, so it may be shared between threads; the buffer is per thread. Stream format, chaining and cost:
// include/ctxcache/block_hash.h.
//
// Uniform chains (no media hashes, and one non-token identity for every block: none, as in the common text
// request, or one request-wide BlockKeyExtras) take a fast path with the same bytes: there a block's stream differs
// from its neighbour's only in the parent (bytes 1..16) and the tokens (bytes 26..26+4n), so writeBlock serializes
// block 0 once into a padded template, two copies of it alternate, and each block then stores its parent and copies
// its tokens. The tokens of block b+1 are copied
// before block b is compressed, and the parent goes in as two 16-byte stores that cover the compressor's first two
// 16-byte loads exactly, so those loads are forwarded from the store buffer instead of waiting for it to drain:
// what remains on the chain's critical path is OpenSSL's compressions (two per block at page 16). Without SSE2 the
// parent is stored as two u64s (same bytes, slower).

#include "ctxcache/block_hash.h"

#define OPENSSL_SUPPRESS_DEPRECATED  // SHA256_Init/Update/Final: the state is a POD we can copy per block
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ctxcache/errors.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the tagged stream copies token arrays as little-endian u32");

namespace ctxcache {
namespace {

static_assert(sizeof(SHA256_CTX) <= 128, "shaState_ holds a SHA256_CTX");

enum Tag : unsigned char {
    kTagParent = 1,
    kTagTokens = 2,
    kTagMedia = 3,
    kTagMediaEntry = 4,
    kTagMediaContentDigest = 5,
    kTagMediaPlacementDigest = 6,
    kTagMediaOffset = 7,
    kTagMediaItemOrder = 8,
    kTagMediaModality = 9,
    kTagAdapter = 10,
    kTagAdapterId = 11,
    kTagAdapterGeneration = 12,
    kTagPositionDigest = 13,
    kTagCustomEmbeddingDigest = 14,
    kTagIsolationDigest = 15,
    kTagAbsent = 16,
    kTagPresent = 17,
    kTagOpaqueIdentity = 18,
    kTagMediaToken = 19,
};

constexpr Hash128 kFnvOffsetBasis{0x6C62272E07BB0142ull, 0x62B821756295C58Dull};

// Serializes the tagged stream into a reusable per-thread buffer. The caller passes an upper bound of the
// stream's size; the buffer is grown once to that bound plus kDigestSlack (it never shrinks), and fields are
// stored through a cursor, so a block costs no per-field size checks, reallocation or zero-fill.
constexpr size_t kDigestSlack = 72;  // room after the stream for SHA-256 padding (0x80, zeros, 64-bit length)

class StreamWriter {
public:
    StreamWriter(std::vector<unsigned char>& buffer, size_t bound) {
        if (buffer.size() < bound + kDigestSlack) buffer.resize(bound + kDigestSlack);
        begin_ = cursor_ = buffer.data();
    }

    void byte(unsigned char b) { *cursor_++ = b; }
    void u32(uint32_t v) { raw(&v, 4); }
    void u64(uint64_t v) { raw(&v, 8); }
    void i32(int32_t v) { raw(&v, 4); }
    void hash(Hash128 const& h) {
        u64(h.hi);
        u64(h.lo);
    }
    void raw(void const* data, size_t size) {
        if (size == 0) return;
        std::memcpy(cursor_, data, size);
        cursor_ += size;
    }
    void optionalHash(unsigned char tag, std::optional<Hash128> const& h) {
        byte(tag);
        if (h) {
            byte(kTagPresent);
            hash(*h);
        } else {
            byte(kTagAbsent);
        }
    }
    // The stream, followed by kDigestSlack writable bytes (digest() pads there).
    unsigned char* data() const { return begin_; }
    size_t size() const { return static_cast<size_t>(cursor_ - begin_); }

private:
    unsigned char* begin_;
    unsigned char* cursor_;
};

std::vector<unsigned char>& threadBuffer() {
    thread_local std::vector<unsigned char> buffer;
    return buffer;
}

bool isZero(Hash128 const& h) { return h.hi == 0 && h.lo == 0; }

// Upper bound of writeBlock's output (exact for the fixed part; every token counted at its largest encoding).
size_t blockStreamBound(size_t count, BlockKeyExtras const& extras, Hash128 const* media) {
    constexpr size_t kHash = 1 + 16;                    // tag + Hash128
    constexpr size_t kMediaEntry = 1 + 2 * kHash + 2 * (1 + 4) + 2;
    constexpr size_t kAdapter = 1 + 1 + kHash + 1 + 8;  // tag, present, id, generation
    size_t const tokenBytes = media ? count * (1 + 16) : count * sizeof(int32_t);
    return kHash + 1 + 8 + tokenBytes + 1 + 8 + extras.media.size() * kMediaEntry + kAdapter + 3 * (1 + kHash);
}

void writeBlock(StreamWriter& w, BlockHash parent, int32_t const* tokens, size_t count, BlockKeyExtras const& extras,
                Hash128 const* media) {
    w.byte(kTagParent);
    w.hash(parent);
    w.byte(kTagTokens);
    w.u64(count);
    if (!media) {
        w.raw(tokens, count * sizeof(int32_t));
    } else {
        for (size_t i = 0; i < count; ++i) {
            if (isZero(media[i])) {
                w.u32(static_cast<uint32_t>(tokens[i]));
            } else {
                w.byte(kTagMediaToken);
                w.hash(media[i]);
            }
        }
    }
    w.byte(kTagMedia);
    w.u64(extras.media.size());
    for (MediaSpanKey const& m : extras.media) {
        w.byte(kTagMediaEntry);
        w.byte(kTagMediaContentDigest);
        w.hash(m.contentDigest);
        w.byte(kTagMediaPlacementDigest);
        w.hash(m.placementDigest);
        w.byte(kTagMediaOffset);
        w.i32(m.offsetWithinBlock);
        w.byte(kTagMediaItemOrder);
        w.i32(m.itemOrder);
        w.byte(kTagMediaModality);
        w.byte(m.modality);
    }
    w.byte(kTagAdapter);
    if (extras.adapter) {
        w.byte(kTagPresent);
        w.byte(kTagAdapterId);
        w.hash(extras.adapter->id);
        w.byte(kTagAdapterGeneration);
        w.u64(extras.adapter->generation);
    } else {
        w.byte(kTagAbsent);
    }
    w.optionalHash(kTagPositionDigest, extras.positionDigest);
    w.optionalHash(kTagCustomEmbeddingDigest, extras.customEmbeddingDigest);
    w.optionalHash(kTagIsolationDigest, extras.isolationDigest);
}

BlockKeyExtras const kNoExtras{};

BlockKeyExtras const& extrasFor(std::vector<BlockKeyExtras> const& extras, size_t block) {
    if (extras.empty()) return kNoExtras;
    return extras.size() == 1 ? extras.front() : extras[block];
}

void checkExtrasCount(char const* operation, std::vector<BlockKeyExtras> const& extras, size_t blocks) {
    if (extras.size() > 1 && extras.size() != blocks)
        throw ContractError(std::string(operation) + ": extrasPerBlock has " + std::to_string(extras.size()) +
                            " entries for " + std::to_string(blocks) + " blocks (expected 0, 1 or one per block)");
}

void checkTokens(char const* operation, int32_t const* tokens, size_t count, int32_t pageSize) {
    if (pageSize <= 0)
        throw ContractError(std::string(operation) + ": pageSize must be positive (" + std::to_string(pageSize) + ")");
    if (count > 0 && !tokens) throw ContractError(std::string(operation) + ": tokens is null");
}

bool isPlain(BlockKeyExtras const& extras) {
    static_assert(sizeof(BlockKeyExtras) == 128, "a new BlockKeyExtras field must make isPlain false when set");
    return extras.media.empty() && !extras.adapter && !extras.positionDigest && !extras.customEmbeddingDigest &&
           !extras.isolationDigest;
}

// The fast path's condition: no per-position media hashes and one non-token identity for every block (no extras,
// one broadcast entry, or one empty entry per block). Returns that identity, or null for the generic path.
BlockKeyExtras const* uniformExtras(std::vector<BlockKeyExtras> const& extrasPerBlock,
                                    Hash128 const* perPositionMediaHash) {
    if (perPositionMediaHash) return nullptr;
    if (extrasPerBlock.size() == 1) return &extrasPerBlock.front();
    return std::all_of(extrasPerBlock.begin(), extrasPerBlock.end(), isPlain) ? &kNoExtras : nullptr;
}

// Pads `size` stream bytes in place for SHA-256 (0x80, zeros, the big-endian bit length of key block + stream)
// and returns the padded size, a multiple of 64. The buffer has kDigestSlack writable bytes after the stream.
size_t padSha256(unsigned char* buffer, size_t size, bool keyed) {
    size_t const padded = (size + 1 + 8 + 63) & ~size_t{63};
    buffer[size] = 0x80;
    std::memset(buffer + size + 1, 0, padded - 8 - (size + 1));
    uint64_t const bits = (static_cast<uint64_t>(size) + (keyed ? 64u : 0u)) * 8u;
    for (int i = 0; i < 8; ++i)
        buffer[padded - 1 - static_cast<size_t>(i)] = static_cast<unsigned char>(bits >> (8 * i));
    return padded;
}

// Where writeBlock puts the tokens when there are no media hashes: after the Parent tag, the parent, the Tokens tag
// and the u64 count (the extras follow the tokens).
constexpr size_t kTokensOffset = 1 + 16 + 1 + 8;

// A chain link (the parent of the next block) as the bytes of a Hash128: hi then lo, each little-endian. With SSE2
// it lives in a register and is stored as whole 16-byte words (see the top of this file); without, as two u64s.
#if defined(__SSE2__)
using Link = __m128i;

Link toLink(Hash128 const& h) { return _mm_set_epi64x(static_cast<long long>(h.lo), static_cast<long long>(h.hi)); }

void storeLink(Hash128* out, Link link) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out), link); }

// Writes Parent tag + parent over stream bytes 0..16 as two 16-byte stores (bytes 17..31 are stored unchanged).
void writeParent(unsigned char* stream, Link parent) {
    __m128i const head = _mm_or_si128(_mm_slli_si128(parent, 1), _mm_cvtsi32_si128(kTagParent));
    __m128i const keepFrom1 = _mm_set_epi32(-1, -1, -1, static_cast<int>(0xFFFFFF00u));
    __m128i const next = _mm_loadu_si128(reinterpret_cast<__m128i const*>(stream + 16));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(stream), head);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(stream + 16),
                     _mm_or_si128(_mm_and_si128(next, keepFrom1), _mm_srli_si128(parent, 15)));
}

// The truncated SHA-256 digest: hi = h[0]:h[1], lo = h[2]:h[3].
Link shaLink(SHA256_CTX const& ctx) {
    return _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<__m128i const*>(ctx.h)), _MM_SHUFFLE(2, 3, 0, 1));
}
#else
using Link = Hash128;

Link toLink(Hash128 const& h) { return h; }

void storeLink(Hash128* out, Link link) { *out = link; }

void writeParent(unsigned char* stream, Link parent) {
    std::memcpy(stream + 1, &parent.hi, 8);
    std::memcpy(stream + 9, &parent.lo, 8);
}

Link shaLink(SHA256_CTX const& ctx) {
    return Hash128{(static_cast<uint64_t>(ctx.h[0]) << 32) | ctx.h[1],
                   (static_cast<uint64_t>(ctx.h[2]) << 32) | ctx.h[3]};
}
#endif

Hash128 fromLink(Link link) {
    Hash128 h;
    storeLink(&h, link);
    return h;
}

}  // namespace

Hash128 fnv1a128(void const* bytes, size_t size, Hash128 state) {
    __extension__ typedef unsigned __int128 u128;
    u128 s = (static_cast<u128>(state.hi) << 64) | state.lo;
    auto const* p = static_cast<unsigned char const*>(bytes);
    for (size_t i = 0; i < size; ++i) {
        s ^= p[i];
        s = (s << 88) + s * 0x13B;  // s * (2^88 + 2^8 + 0x3B) mod 2^128
    }
    return Hash128{static_cast<uint64_t>(s >> 64), static_cast<uint64_t>(s)};
}

std::string toHex(Hash128 const& hash) {
    static char const digits[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 0; i < 16; ++i) {
        out[static_cast<size_t>(15 - i)] = digits[(hash.hi >> (4 * i)) & 0xF];
        out[static_cast<size_t>(31 - i)] = digits[(hash.lo >> (4 * i)) & 0xF];
    }
    return out;
}

BlockHasher::BlockHasher(HashAlgorithm algorithm, std::string_view key) : algorithm_(algorithm) {
    if (algorithm != HashAlgorithm::kSha256 && algorithm != HashAlgorithm::kFnv1a128)
        throw ContractError("BlockHasher: unknown algorithm " + std::to_string(static_cast<int>(algorithm)));
    if (algorithm == HashAlgorithm::kFnv1a128) {
        if (!key.empty()) throw ContractError("BlockHasher: fnv1a128 takes no key (use sha256 for a keyed hash)");
        return;
    }
    SHA256_CTX ctx;
    SHA256_Init(&ctx);
    if (!key.empty()) {
        keyed_ = true;
        unsigned char block[64] = {};
        SHA256(reinterpret_cast<unsigned char const*>(key.data()), key.size(), block);  // K0 = SHA-256(K) || 0^32
        SHA256_Update(&ctx, block, sizeof block);
        OPENSSL_cleanse(block, sizeof block);
    }
    std::memcpy(shaState_, &ctx, sizeof ctx);
    OPENSSL_cleanse(&ctx, sizeof ctx);
}

// `bytes` is always a StreamWriter's buffer: `size` stream bytes followed by kDigestSlack writable bytes. SHA-256
// pads there in place so that one SHA256_Update of whole blocks, starting at a block boundary (the key block is
// exactly one block), compresses everything; the digest is then the state words h[0..3], big-endian, with no
// SHA256_Final (its byte conversion and cleanse).
Hash128 BlockHasher::digest(unsigned char const* bytes, size_t size) const {
    if (algorithm_ == HashAlgorithm::kFnv1a128) return fnv1a128(bytes, size, kFnvOffsetBasis);
    unsigned char* const buffer = const_cast<unsigned char*>(bytes);  // see above: the writer's own buffer
    size_t const padded = padSha256(buffer, size, keyed_);
    SHA256_CTX ctx;
    std::memcpy(&ctx, shaState_, sizeof ctx);
    SHA256_Update(&ctx, buffer, padded);
    return fromLink(shaLink(ctx));
}

// The uniform-chain fast path (see the top of this file). The template is writeBlock's own output for block 0, so
// tags, count and extras are the generic path's bytes by construction; only parent and tokens change per block.
BlockHash BlockHasher::hashUniformChain(int32_t const* tokens, size_t blocks, size_t page, BlockKeyExtras const& extras,
                                        BlockHash parent, std::vector<BlockHash>* out, BlockHash* raw) const {
    if (blocks == 0) return parent;
    std::vector<unsigned char>& buffer = threadBuffer();
    StreamWriter w(buffer, blockStreamBound(page, extras, nullptr));
    writeBlock(w, parent, tokens, page, extras, nullptr);
    size_t const size = w.size();
    size_t const slot = padSha256(w.data(), size, keyed_);  // FNV reads only the stream: the padding is unused
    if (buffer.size() < 2 * slot) buffer.resize(2 * slot);   // keeps the template
    unsigned char* const slots[2] = {buffer.data(), buffer.data() + slot};
    std::memcpy(slots[1], slots[0], slot);
    BlockHash* hashes = raw;  // grown last: nothing below allocates, so a throw leaves `out` unchanged
    if (!hashes && out) {
        out->resize(out->size() + blocks);
        hashes = out->data() + out->size() - blocks;
    }

    Link link = toLink(parent);
    auto const chain = [&](auto const& compress, auto tokenBytes) {
        for (size_t b = 0; b < blocks; ++b) {
            unsigned char* const stream = slots[b & 1];
            if (b + 1 < blocks)  // before this block's compression, so the stores drain while it runs
                std::memcpy(slots[(b + 1) & 1] + kTokensOffset, tokens + (b + 1) * page, tokenBytes);
            writeParent(stream, link);
            link = compress(stream);
            if (hashes) storeLink(hashes + b, link);
        }
    };
    if (algorithm_ == HashAlgorithm::kFnv1a128) {
        chain([size](unsigned char const* stream) { return toLink(fnv1a128(stream, size, kFnvOffsetBasis)); },
              page * sizeof(int32_t));
        return fromLink(link);
    }
    SHA256_CTX ctx;
    std::memcpy(&ctx, shaState_, sizeof ctx);
    SHA_LONG midstate[8];
    std::memcpy(midstate, ctx.h, sizeof midstate);
    // Whole blocks into an empty buffer: SHA256_Update goes straight to the block function.
    auto const compress = [&](unsigned char const* stream) {
        std::memcpy(ctx.h, midstate, sizeof midstate);
        SHA256_Update(&ctx, stream, slot);
        return shaLink(ctx);
    };
    // The common page sizes copy their tokens with a fixed-size (inlined) memcpy: ~3% at page 16.
    switch (page) {
        case 16: chain(compress, std::integral_constant<size_t, 16 * sizeof(int32_t)>{}); break;
        case 32: chain(compress, std::integral_constant<size_t, 32 * sizeof(int32_t)>{}); break;
        case 64: chain(compress, std::integral_constant<size_t, 64 * sizeof(int32_t)>{}); break;
        case 128: chain(compress, std::integral_constant<size_t, 128 * sizeof(int32_t)>{}); break;
        default: chain(compress, page * sizeof(int32_t)); break;
    }
    return fromLink(link);
}

BlockHash BlockHasher::hashBlock(BlockHash parent, int32_t const* tokens, size_t count, BlockKeyExtras const& extras,
                                 Hash128 const* perPositionMediaHash) const {
    if (count > 0 && !tokens) throw ContractError("hashBlock: tokens is null");
    StreamWriter w(threadBuffer(), blockStreamBound(count, extras, perPositionMediaHash));
    writeBlock(w, parent, tokens, count, extras, perPositionMediaHash);
    return digest(w.data(), w.size());
}

void BlockHasher::hashFullBlocksInto(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                                     std::vector<BlockKeyExtras> const& extrasPerBlock,
                                     Hash128 const* perPositionMediaHash, std::vector<BlockHash>& out) const {
    checkTokens("hashFullBlocks", tokens, tokenCount, pageSize);
    size_t const page = static_cast<size_t>(pageSize);
    size_t const blocks = tokenCount / page;
    checkExtrasCount("hashFullBlocks", extrasPerBlock, blocks);
    if (BlockKeyExtras const* extras = uniformExtras(extrasPerBlock, perPositionMediaHash)) {
        hashUniformChain(tokens, blocks, page, *extras, kChainRoot, &out);
        return;
    }
    size_t const before = out.size();
    out.resize(before + blocks);
    try {
        hashGeneralChain(tokens, blocks, page, extrasPerBlock, perPositionMediaHash, out.data() + before);
    } catch (...) {
        out.resize(before);  // nothing appended
        throw;
    }
}

void BlockHasher::hashGeneralChain(int32_t const* tokens, size_t blocks, size_t page,
                                   std::vector<BlockKeyExtras> const& extrasPerBlock,
                                   Hash128 const* perPositionMediaHash, BlockHash* out) const {
    BlockHash parent = kChainRoot;
    for (size_t b = 0; b < blocks; ++b) {
        BlockKeyExtras const& extras = extrasFor(extrasPerBlock, b);
        Hash128 const* media = perPositionMediaHash ? perPositionMediaHash + b * page : nullptr;
        StreamWriter w(threadBuffer(), blockStreamBound(page, extras, media));
        writeBlock(w, parent, tokens + b * page, page, extras, media);
        parent = digest(w.data(), w.size());
        out[b] = parent;
    }
}

size_t BlockHasher::hashFullBlocksTo(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                                     std::vector<BlockKeyExtras> const& extrasPerBlock,
                                     Hash128 const* perPositionMediaHash, BlockHash* out, size_t capacity) const {
    checkTokens("hashFullBlocks", tokens, tokenCount, pageSize);
    size_t const page = static_cast<size_t>(pageSize);
    size_t const blocks = tokenCount / page;
    checkExtrasCount("hashFullBlocks", extrasPerBlock, blocks);
    if (capacity < blocks || (blocks > 0 && !out))
        throw ContractError("hashFullBlocks: the output holds " + std::to_string(out ? capacity : 0) + " hashes, " +
                            std::to_string(blocks) + " needed");
    if (BlockKeyExtras const* extras = uniformExtras(extrasPerBlock, perPositionMediaHash)) {
        hashUniformChain(tokens, blocks, page, *extras, kChainRoot, nullptr, out);
        return blocks;
    }
    hashGeneralChain(tokens, blocks, page, extrasPerBlock, perPositionMediaHash, out);
    return blocks;
}

std::vector<BlockHash> BlockHasher::hashFullBlocks(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                                                   std::vector<BlockKeyExtras> const& extrasPerBlock,
                                                   Hash128 const* perPositionMediaHash) const {
    std::vector<BlockHash> out;
    hashFullBlocksInto(tokens, tokenCount, pageSize, extrasPerBlock, perPositionMediaHash, out);
    return out;
}

BlockHash BlockHasher::hashExactPrefix(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                                       std::vector<BlockKeyExtras> const& extrasPerBlock,
                                       Hash128 const* perPositionMediaHash) const {
    checkTokens("hashExactPrefix", tokens, tokenCount, pageSize);
    size_t const page = static_cast<size_t>(pageSize);
    size_t const blocks = (tokenCount + page - 1) / page;
    checkExtrasCount("hashExactPrefix", extrasPerBlock, blocks);
    BlockHash parent = kChainRoot;
    size_t b = 0;
    if (BlockKeyExtras const* extras = uniformExtras(extrasPerBlock, perPositionMediaHash)) {
        b = tokenCount / page;  // the full blocks; a partial tail takes the generic path below
        parent = hashUniformChain(tokens, b, page, *extras, parent, nullptr);
    }
    for (; b < blocks; ++b) {
        size_t const begin = b * page;
        size_t const count = std::min(page, tokenCount - begin);
        BlockKeyExtras const& extras = extrasFor(extrasPerBlock, b);
        Hash128 const* media = perPositionMediaHash ? perPositionMediaHash + begin : nullptr;
        StreamWriter w(threadBuffer(), blockStreamBound(count, extras, media));
        writeBlock(w, parent, tokens + begin, count, extras, media);
        parent = digest(w.data(), w.size());
    }
    return parent;
}

Hash128 BlockHasher::hashOpaqueIdentity(std::string_view bytes) const {
    StreamWriter w(threadBuffer(), 1 + 8 + bytes.size());
    w.byte(kTagOpaqueIdentity);
    w.u64(bytes.size());
    w.raw(bytes.data(), bytes.size());
    return digest(w.data(), w.size());
}

BlockHasher const& BlockHasher::defaultHasher() {
    static BlockHasher const hasher(HashAlgorithm::kSha256);
    return hasher;
}

BlockHash hashBlock(BlockHash parent, int32_t const* tokens, size_t count, BlockKeyExtras const& extras,
                    Hash128 const* perPositionMediaHash, BlockHasher const& hasher) {
    return hasher.hashBlock(parent, tokens, count, extras, perPositionMediaHash);
}

std::vector<BlockHash> hashFullBlocks(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                                      std::vector<BlockKeyExtras> const& extrasPerBlock,
                                      Hash128 const* perPositionMediaHash, BlockHasher const& hasher) {
    return hasher.hashFullBlocks(tokens, tokenCount, pageSize, extrasPerBlock, perPositionMediaHash);
}

BlockHash hashExactPrefix(int32_t const* tokens, size_t tokenCount, int32_t pageSize,
                          std::vector<BlockKeyExtras> const& extrasPerBlock, BlockHasher const& hasher) {
    return hasher.hashExactPrefix(tokens, tokenCount, pageSize, extrasPerBlock);
}

Hash128 hashOpaqueIdentity(std::string_view bytes, BlockHasher const& hasher) {
    return hasher.hashOpaqueIdentity(bytes);
}

}  // namespace ctxcache
