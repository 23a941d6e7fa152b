// Block hashing: the tagged stream, both compressors, chaining and the non-token identity (reference c.1).
//
// Known-answer constants marked "independent" were computed outside the library by a ~100-line Python script
// (python3 + hashlib) that builds the tagged byte stream from the layout documented in
// include/ctxcache/block_hash.h and reference section c.1 (tags Parent=1 .. MediaToken=19, little-endian
// integers, Hash128 as hi then lo; FNV-1a 128 with offset basis 0x6C62272E07BB0142_62B821756295C58D and prime
// 2^88 + 2^8 + 0x3B; SHA-256 truncated to 16 bytes read big-endian hi then lo; keyed SHA-256 =
// SHA256(SHA256(key) || 32 zero bytes || stream)). Its FNV implementation reproduces the published FNV-1a 128
// vectors for "" and "a" before any of its other outputs were used.
#include "ctxcache/block_hash.h"

#include <gtest/gtest.h>
#include <openssl/sha.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ctxcache/errors.h"

namespace ctxcache {
namespace {

std::vector<int32_t> const kTokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
constexpr char kKey[] = "tenant-secret";

BlockHasher const& fnvHasher() {
    static BlockHasher const h(HashAlgorithm::kFnv1a128);
    return h;
}
BlockHasher const& shaHasher() {
    static BlockHasher const h(HashAlgorithm::kSha256);
    return h;
}
BlockHasher const& keyedHasher() {
    static BlockHasher const h(HashAlgorithm::kSha256, kKey);
    return h;
}

Hash128 fnvOf(char const* s) { return fnv1a128(s, std::strlen(s)); }

// ---- known answers -----------------------------------------------------------------------------------------

TEST(BlockHash, Fnv1a128MatchesPublishedTestVectors) {
    // Landon Curt Noll's FNV-1a 128-bit test vectors.
    EXPECT_EQ(toHex(fnvOf("")), "6c62272e07bb014262b821756295c58d");
    EXPECT_EQ(toHex(fnvOf("a")), "d228cb696f1a8caf78912b704e4a8964");
    EXPECT_EQ(toHex(fnvOf("foobar")), "343e1662793c64bf6f0d3597ba446f18");
    // Independent: the Python reference gives the same "foobar" digest.
    EXPECT_EQ(fnvOf("foobar"), (Hash128{0x343E1662793C64BFull, 0x6F0D3597BA446F18ull}));
}

TEST(BlockHash, Fnv1a128ContinuesFromAGivenState) {
    EXPECT_EQ(fnv1a128("bar", 3, fnvOf("foo")), fnvOf("foobar"));
    EXPECT_EQ(fnv1a128(nullptr, 0), fnvOf(""));
}

TEST(BlockHash, HashBlockMatchesIndependentDigests) {
    // Independent: block [1, 2, 3, 4] under kChainRoot, no extras.
    EXPECT_EQ(fnvHasher().hashBlock(kChainRoot, kTokens.data(), 4),
              (Hash128{0x0EC7DEB0E398286Aull, 0x0914822596977088ull}));
    EXPECT_EQ(shaHasher().hashBlock(kChainRoot, kTokens.data(), 4),
              (Hash128{0x738960C1CCF2292Bull, 0x129F7E5CDE16E4C8ull}));
    EXPECT_EQ(keyedHasher().hashBlock(kChainRoot, kTokens.data(), 4),
              (Hash128{0x71835607D1A9C67Eull, 0xA08F0E8481B9D49Eull}));
}

TEST(BlockHash, HashFullBlocksMatchesIndependentChain) {
    // Independent: 10 tokens at page size 4 -> two chained blocks, the 2-token tail ignored.
    EXPECT_EQ(fnvHasher().hashFullBlocks(kTokens.data(), kTokens.size(), 4),
              (std::vector<BlockHash>{{0x0EC7DEB0E398286Aull, 0x0914822596977088ull},
                                      {0x138B5471E601C078ull, 0xD746E03E97673FA0ull}}));
    EXPECT_EQ(shaHasher().hashFullBlocks(kTokens.data(), kTokens.size(), 4),
              (std::vector<BlockHash>{{0x738960C1CCF2292Bull, 0x129F7E5CDE16E4C8ull},
                                      {0x0DFD70ED3A5EAEC3ull, 0xBF099462C3D5BE1Full}}));
    EXPECT_EQ(keyedHasher().hashFullBlocks(kTokens.data(), kTokens.size(), 4),
              (std::vector<BlockHash>{{0x71835607D1A9C67Eull, 0xA08F0E8481B9D49Eull},
                                      {0x9E5AA38EFF62C886ull, 0x270D46834A08597Dull}}));
}

TEST(BlockHash, HashExactPrefixMatchesIndependentDigest) {
    // Independent: 6 tokens at page size 4 -> block [1..4], then the partial block [5, 6].
    EXPECT_EQ(fnvHasher().hashExactPrefix(kTokens.data(), 6, 4),
              (Hash128{0x62CB4E00F107C7A4ull, 0x492AE26A752936BFull}));
    EXPECT_EQ(shaHasher().hashExactPrefix(kTokens.data(), 6, 4),
              (Hash128{0x343884F7C7537BD8ull, 0xC32E6B2A62A3CD78ull}));
    EXPECT_EQ(keyedHasher().hashExactPrefix(kTokens.data(), 6, 4),
              (Hash128{0x2E91B0EBE392F0B7ull, 0x72883E6E3DA6341Cull}));
}

TEST(BlockHash, OpaqueIdentityMatchesIndependentDigest) {
    // Independent: Tag OpaqueIdentity, u64 length 6, "lora-a".
    EXPECT_EQ(fnvHasher().hashOpaqueIdentity("lora-a"), (Hash128{0x367756F871294E27ull, 0x7986551ABC983595ull}));
    EXPECT_EQ(shaHasher().hashOpaqueIdentity("lora-a"), (Hash128{0x2DEA43D4395643BAull, 0xAF254B7536F62F7Cull}));
    EXPECT_EQ(keyedHasher().hashOpaqueIdentity("lora-a"), (Hash128{0x51E77A2E2FBB8D8Bull, 0xF3894EB60368D5CCull}));
}

BlockKeyExtras everyExtra() {
    BlockKeyExtras e;
    e.media.push_back(MediaSpanKey{{0x1111, 0x2222}, {0x3333, 0x4444}, 1, 0, 1});
    e.adapter = AdapterKey{{0xAAAA, 0xBBBB}, 7};
    e.positionDigest = Hash128{0x5, 0x6};
    e.customEmbeddingDigest = Hash128{0x7, 0x8};
    e.isolationDigest = Hash128{0x9, 0xA};
    return e;
}

TEST(BlockHash, EveryExtrasFieldIsSerializedAsDocumented) {
    // Independent: block [1, 2, 3, 4] with one media span, an adapter (generation 7), position, custom-embedding
    // and isolation digests, and a per-position media hash {0x1111, 0x2222} at position 1.
    std::vector<Hash128> const media{{0, 0}, {0x1111, 0x2222}, {0, 0}, {0, 0}};
    EXPECT_EQ(fnvHasher().hashBlock(kChainRoot, kTokens.data(), 4, everyExtra(), media.data()),
              (Hash128{0x98FC8C2005DA732Full, 0xB6CD0770464DFCDAull}));
    EXPECT_EQ(shaHasher().hashBlock(kChainRoot, kTokens.data(), 4, everyExtra(), media.data()),
              (Hash128{0xA39336A787602990ull, 0xEC81FBC2F0198B60ull}));
}

TEST(BlockHash, NegativeTokenIdsSerializeAsTwosComplementU32) {
    // Independent: tokens [-1, INT32_MAX] under parent {1, 2}.
    std::vector<int32_t> const tokens{-1, 0x7FFFFFFF};
    EXPECT_EQ(fnvHasher().hashBlock(Hash128{1, 2}, tokens.data(), 2),
              (Hash128{0xB81BD5779F3C00D2ull, 0x95434199677BF1FCull}));
    EXPECT_EQ(shaHasher().hashBlock(Hash128{1, 2}, tokens.data(), 2),
              (Hash128{0x698C1824071541A8ull, 0x65B8DFE4BBFAFE87ull}));
}

// ---- properties ------------------------------------------------------------------------------------------

TEST(BlockHash, EqualInputsProduceEqualHash) {
    std::vector<int32_t> const copy(kTokens);
    for (HashAlgorithm algorithm : {HashAlgorithm::kFnv1a128, HashAlgorithm::kSha256}) {
        BlockHasher const a(algorithm), b(algorithm);
        EXPECT_EQ(a.hashFullBlocks(kTokens.data(), 10, 4), b.hashFullBlocks(copy.data(), 10, 4));
        EXPECT_EQ(a.hashBlock(kChainRoot, kTokens.data(), 4, everyExtra()),
                  b.hashBlock(kChainRoot, copy.data(), 4, everyExtra()));
        EXPECT_EQ(a.hashOpaqueIdentity("adapter"), b.hashOpaqueIdentity(std::string("adapter")));
    }
    // The free functions use the default hasher: unkeyed SHA-256.
    EXPECT_EQ(BlockHasher::defaultHasher().algorithm(), HashAlgorithm::kSha256);
    EXPECT_FALSE(BlockHasher::defaultHasher().keyed());
    EXPECT_EQ(hashFullBlocks(kTokens.data(), 10, 4), shaHasher().hashFullBlocks(kTokens.data(), 10, 4));
    EXPECT_EQ(hashBlock(kChainRoot, kTokens.data(), 4), shaHasher().hashBlock(kChainRoot, kTokens.data(), 4));
    EXPECT_EQ(hashOpaqueIdentity("x"), shaHasher().hashOpaqueIdentity("x"));
    EXPECT_EQ(hashFullBlocks(kTokens.data(), 10, 4, {}, nullptr, fnvHasher()),
              fnvHasher().hashFullBlocks(kTokens.data(), 10, 4));
}

TEST(BlockHash, OpaqueIdentityHashBindsExactBytes) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        Hash128 const a = h->hashOpaqueIdentity("lora-a");
        EXPECT_NE(a, h->hashOpaqueIdentity("lora-b"));
        EXPECT_NE(a, h->hashOpaqueIdentity("lora-"));
        EXPECT_NE(a, h->hashOpaqueIdentity(std::string("lora-a\0", 7)));  // a trailing NUL is a byte too
        EXPECT_NE(h->hashOpaqueIdentity(""), h->hashOpaqueIdentity(std::string(1, '\0')));
        // The length prefix separates the identity from a bare FNV of the same bytes.
        if (h == &fnvHasher()) EXPECT_NE(a, fnvOf("lora-a"));
    }
}

TEST(BlockHash, ParentHashChangesEveryDescendant) {
    std::vector<int32_t> tokens(12);
    for (int i = 0; i < 12; ++i) tokens[static_cast<size_t>(i)] = 100 + i;
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        std::vector<BlockHash> const base = h->hashFullBlocks(tokens.data(), 12, 4);
        ASSERT_EQ(base.size(), 3u);
        std::vector<int32_t> first(tokens);
        first[0] = 999;  // block 0 changes: every block changes
        std::vector<BlockHash> const a = h->hashFullBlocks(first.data(), 12, 4);
        for (size_t i = 0; i < 3; ++i) EXPECT_NE(a[i], base[i]) << "block " << i;
        std::vector<int32_t> middle(tokens);
        middle[5] = 999;  // block 1 changes: block 0 keeps its hash, 1 and 2 change
        std::vector<BlockHash> const b = h->hashFullBlocks(middle.data(), 12, 4);
        EXPECT_EQ(b[0], base[0]);
        EXPECT_NE(b[1], base[1]);
        EXPECT_NE(b[2], base[2]);
        // Chaining is exactly hashBlock over the previous hash.
        EXPECT_EQ(base[1], h->hashBlock(base[0], tokens.data() + 4, 4));
        EXPECT_NE(h->hashBlock(Hash128{1, 2}, tokens.data(), 4), h->hashBlock(Hash128{1, 3}, tokens.data(), 4));
    }
}

TEST(BlockHash, AdapterGenerationChangesHash) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        BlockKeyExtras gen0, gen1, otherId;
        gen0.adapter = AdapterKey{h->hashOpaqueIdentity("lora"), 0};
        gen1.adapter = AdapterKey{h->hashOpaqueIdentity("lora"), 1};
        otherId.adapter = AdapterKey{h->hashOpaqueIdentity("lora2"), 0};
        BlockHash const none = h->hashBlock(kChainRoot, kTokens.data(), 4);
        BlockHash const a = h->hashBlock(kChainRoot, kTokens.data(), 4, gen0);
        EXPECT_NE(a, none);
        EXPECT_NE(a, h->hashBlock(kChainRoot, kTokens.data(), 4, gen1));
        EXPECT_NE(a, h->hashBlock(kChainRoot, kTokens.data(), 4, otherId));
        EXPECT_EQ(a, h->hashBlock(kChainRoot, kTokens.data(), 4, gen0));
    }
}

TEST(BlockHash, MediaPlacementChangesHash) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        MediaSpanKey const span{{0x1, 0x2}, {0x3, 0x4}, 0, 0, 0};
        auto with = [&](MediaSpanKey const& s) {
            BlockKeyExtras e;
            e.media.push_back(s);
            return h->hashBlock(kChainRoot, kTokens.data(), 4, e);
        };
        BlockHash const base = with(span);
        EXPECT_NE(base, h->hashBlock(kChainRoot, kTokens.data(), 4));
        MediaSpanKey s = span;
        s.placementDigest = {0x3, 0x5};
        EXPECT_NE(with(s), base);
        s = span;
        s.contentDigest = {0x1, 0x3};
        EXPECT_NE(with(s), base);
        s = span;
        s.offsetWithinBlock = 1;
        EXPECT_NE(with(s), base);
        s = span;
        s.itemOrder = 1;
        EXPECT_NE(with(s), base);
        s = span;
        s.modality = 1;
        EXPECT_NE(with(s), base);
        EXPECT_EQ(with(span), base);
        // Two spans are not one.
        BlockKeyExtras two;
        two.media = {span, span};
        EXPECT_NE(h->hashBlock(kChainRoot, kTokens.data(), 4, two), base);
    }
}

TEST(BlockHash, PositionEmbeddingAndIsolationChangeHash) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        Hash128 const d{0x77, 0x88};
        BlockKeyExtras position, custom, isolation, isolation2;
        position.positionDigest = d;
        custom.customEmbeddingDigest = d;
        isolation.isolationDigest = d;
        isolation2.isolationDigest = Hash128{0x77, 0x89};
        BlockHash const none = h->hashBlock(kChainRoot, kTokens.data(), 4);
        BlockHash const p = h->hashBlock(kChainRoot, kTokens.data(), 4, position);
        BlockHash const c = h->hashBlock(kChainRoot, kTokens.data(), 4, custom);
        BlockHash const i = h->hashBlock(kChainRoot, kTokens.data(), 4, isolation);
        // Present vs absent, and the same digest in another field, are all different identities.
        EXPECT_NE(p, none);
        EXPECT_NE(c, none);
        EXPECT_NE(i, none);
        EXPECT_NE(p, c);
        EXPECT_NE(p, i);
        EXPECT_NE(c, i);
        EXPECT_NE(i, h->hashBlock(kChainRoot, kTokens.data(), 4, isolation2));
    }
}

TEST(BlockHash, FullBlockChainIgnoresPartialTail) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        std::vector<BlockHash> const ten = h->hashFullBlocks(kTokens.data(), 10, 4);
        EXPECT_EQ(ten.size(), 2u);
        EXPECT_EQ(ten, h->hashFullBlocks(kTokens.data(), 8, 4));
        EXPECT_EQ(ten, h->hashFullBlocks(kTokens.data(), 11, 4));
        std::vector<int32_t> tail(kTokens);
        tail[9] = 12345;
        EXPECT_EQ(ten, h->hashFullBlocks(tail.data(), 10, 4));
        EXPECT_TRUE(h->hashFullBlocks(kTokens.data(), 3, 4).empty());
        EXPECT_TRUE(h->hashFullBlocks(nullptr, 0, 4).empty());
        // The Into variant appends to what the caller already holds.
        std::vector<BlockHash> out{Hash128{9, 9}};
        h->hashFullBlocksInto(kTokens.data(), 10, 4, {}, nullptr, out);
        EXPECT_EQ(out, (std::vector<BlockHash>{Hash128{9, 9}, ten[0], ten[1]}));
    }
}

TEST(BlockHash, ExactPrefixDigestIncludesPartialTail) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        std::vector<BlockHash> const full = h->hashFullBlocks(kTokens.data(), 10, 4);
        BlockHash const nine = h->hashExactPrefix(kTokens.data(), 9, 4);
        BlockHash const ten = h->hashExactPrefix(kTokens.data(), 10, 4);
        EXPECT_NE(nine, ten);
        EXPECT_NE(ten, full[1]);
        EXPECT_EQ(ten, h->hashBlock(full[1], kTokens.data() + 8, 2));
        std::vector<int32_t> tail(kTokens);
        tail[9] = 12345;
        EXPECT_NE(h->hashExactPrefix(tail.data(), 10, 4), ten);
        // A page-aligned exact prefix is the last full-block hash; the empty prefix is the chain root.
        EXPECT_EQ(h->hashExactPrefix(kTokens.data(), 8, 4), full[1]);
        EXPECT_EQ(h->hashExactPrefix(kTokens.data(), 4, 4), full[0]);
        EXPECT_EQ(h->hashExactPrefix(kTokens.data(), 0, 4), kChainRoot);
        EXPECT_EQ(h->hashExactPrefix(nullptr, 0, 4), kChainRoot);
    }
    EXPECT_EQ(hashExactPrefix(kTokens.data(), 8, 4), shaHasher().hashFullBlocks(kTokens.data(), 8, 4).back());
}

TEST(BlockHash, PerPositionMediaHashReplacesTokenId) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        std::vector<int32_t> a{1, 2, 3, 4}, b{1, 77, 3, 4};
        std::vector<Hash128> media{{0, 0}, {0xAB, 0xCD}, {0, 0}, {0, 0}};
        // The placeholder token id at a media position does not matter, the media hash does.
        EXPECT_EQ(h->hashBlock(kChainRoot, a.data(), 4, {}, media.data()),
                  h->hashBlock(kChainRoot, b.data(), 4, {}, media.data()));
        EXPECT_NE(h->hashBlock(kChainRoot, a.data(), 4, {}, media.data()), h->hashBlock(kChainRoot, a.data(), 4));
        std::vector<Hash128> other{{0, 0}, {0xAB, 0xCE}, {0, 0}, {0, 0}};
        EXPECT_NE(h->hashBlock(kChainRoot, a.data(), 4, {}, media.data()),
                  h->hashBlock(kChainRoot, a.data(), 4, {}, other.data()));
        // All-zero media hashes are "no media": the same as passing none.
        std::vector<Hash128> zeros(4);
        EXPECT_EQ(h->hashBlock(kChainRoot, a.data(), 4, {}, zeros.data()), h->hashBlock(kChainRoot, a.data(), 4));
        // hashFullBlocks takes the per-position array over the whole input, block by block.
        std::vector<Hash128> perPosition(10);
        perPosition[5] = Hash128{0xAB, 0xCD};
        std::vector<BlockHash> const chain = h->hashFullBlocks(kTokens.data(), 10, 4, {}, perPosition.data());
        std::vector<BlockHash> const plain = h->hashFullBlocks(kTokens.data(), 10, 4);
        EXPECT_EQ(chain[0], plain[0]);
        EXPECT_NE(chain[1], plain[1]);
        EXPECT_EQ(chain[1], h->hashBlock(plain[0], kTokens.data() + 4, 4, {}, perPosition.data() + 4));
    }
}

TEST(BlockHash, SingleExtrasEntryIsBroadcastToEveryBlock) {
    for (BlockHasher const* h : {&fnvHasher(), &shaHasher()}) {
        BlockKeyExtras e;
        e.isolationDigest = Hash128{1, 1};
        std::vector<BlockHash> const one = h->hashFullBlocks(kTokens.data(), 10, 4, {e});
        EXPECT_EQ(one, h->hashFullBlocks(kTokens.data(), 10, 4, {e, e}));
        std::vector<BlockHash> const mixed = h->hashFullBlocks(kTokens.data(), 10, 4, {e, BlockKeyExtras{}});
        EXPECT_EQ(mixed[0], one[0]);
        EXPECT_NE(mixed[1], one[1]);
        EXPECT_NE(one[0], h->hashFullBlocks(kTokens.data(), 10, 4)[0]);
        // Exact prefix: one entry per touched block (ceil), or one broadcast entry.
        EXPECT_EQ(h->hashExactPrefix(kTokens.data(), 10, 4, {e}), h->hashExactPrefix(kTokens.data(), 10, 4, {e, e, e}));
    }
}

TEST(BlockHash, ExtrasCountMustBeZeroOneOrOnePerBlock) {
    BlockKeyExtras e;
    EXPECT_THROW(shaHasher().hashFullBlocks(kTokens.data(), 10, 4, {e, e, e}), ContractError);  // 2 full blocks
    EXPECT_THROW(shaHasher().hashExactPrefix(kTokens.data(), 10, 4, {e, e}), ContractError);    // 3 touched blocks
    EXPECT_THROW(shaHasher().hashFullBlocks(kTokens.data(), 10, 0), ContractError);
    EXPECT_THROW(shaHasher().hashExactPrefix(kTokens.data(), 10, -4), ContractError);
    EXPECT_THROW(shaHasher().hashFullBlocks(nullptr, 4, 4), ContractError);
    EXPECT_THROW(shaHasher().hashBlock(kChainRoot, nullptr, 1), ContractError);
}

TEST(BlockHash, KeyedSha256DiffersFromUnkeyedAndPerKey) {
    BlockHasher const other(HashAlgorithm::kSha256, "another-tenant");
    BlockHasher const same(HashAlgorithm::kSha256, kKey);
    EXPECT_TRUE(keyedHasher().keyed());
    EXPECT_FALSE(shaHasher().keyed());
    BlockHash const k = keyedHasher().hashBlock(kChainRoot, kTokens.data(), 4);
    EXPECT_NE(k, shaHasher().hashBlock(kChainRoot, kTokens.data(), 4));
    EXPECT_NE(k, other.hashBlock(kChainRoot, kTokens.data(), 4));
    EXPECT_EQ(k, same.hashBlock(kChainRoot, kTokens.data(), 4));
    EXPECT_NE(keyedHasher().hashOpaqueIdentity("x"), other.hashOpaqueIdentity("x"));
}

TEST(BlockHash, FnvAndShaDiffer) {
    EXPECT_NE(fnvHasher().hashBlock(kChainRoot, kTokens.data(), 4),
              shaHasher().hashBlock(kChainRoot, kTokens.data(), 4));
    EXPECT_NE(fnvHasher().hashOpaqueIdentity("x"), shaHasher().hashOpaqueIdentity("x"));
    EXPECT_EQ(fnvHasher().algorithm(), HashAlgorithm::kFnv1a128);
    EXPECT_FALSE(fnvHasher().keyed());
}

TEST(BlockHash, FnvTakesNoKey) {
    EXPECT_THROW(BlockHasher(HashAlgorithm::kFnv1a128, "key"), ContractError);
    EXPECT_THROW(BlockHasher(static_cast<HashAlgorithm>(7)), ContractError);
    EXPECT_NO_THROW(BlockHasher(HashAlgorithm::kFnv1a128, ""));
}

// ---- the uniform-chain fast path -------------------------------------------------------------------------------
// hashFullBlocks and hashExactPrefix take a fast path when there are no per-position media hashes and every block
// has the same extras (none, or one broadcast entry: the template in block_hash.cpp); hashBlock always serializes
// field by field. Both must give the same bytes, for every page size (the padding moves with the token count),
// hasher, extras, chain length and starting state of the thread's buffer.

struct HasherCase {
    char const* name;
    BlockHasher hasher;
    std::string key;  // for the independent digest below
};

std::vector<HasherCase> const& hasherCases() {
    static std::vector<HasherCase> const cases{
        {"fnv1a128", BlockHasher(HashAlgorithm::kFnv1a128), ""},
        {"sha256", BlockHasher(HashAlgorithm::kSha256), ""},
        {"sha256 keyed", BlockHasher(HashAlgorithm::kSha256, kKey), kKey},
        {"sha256 long key", BlockHasher(HashAlgorithm::kSha256, std::string(200, 'k')), std::string(200, 'k')},
    };
    return cases;
}

std::vector<int32_t> randomTokens(std::mt19937& rng, size_t count) {
    std::uniform_int_distribution<int32_t> any(INT32_MIN, INT32_MAX);
    std::vector<int32_t> tokens(count);
    for (int32_t& t : tokens) t = any(rng);
    return tokens;
}

// A plain block's stream built here from the documented layout, and its digest through OpenSSL's one-shot SHA256
// (keyed: SHA256(SHA256(key) || 0^32 || stream)) or fnv1a128: shares no code with either path of the library.
Hash128 independentPlainDigest(HasherCase const& c, Hash128 parent, int32_t const* tokens, size_t count) {
    std::vector<unsigned char> bytes;
    auto u64 = [&](uint64_t v) {
        for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<unsigned char>(v >> (8 * i)));
    };
    bytes.push_back(1);  // Parent
    u64(parent.hi);
    u64(parent.lo);
    bytes.push_back(2);  // Tokens
    u64(count);
    for (size_t i = 0; i < count; ++i)
        for (int b = 0; b < 4; ++b)
            bytes.push_back(static_cast<unsigned char>(static_cast<uint32_t>(tokens[i]) >> (8 * b)));
    for (unsigned char const b : {3, 0, 0, 0, 0, 0, 0, 0, 0, 10, 16, 13, 16, 14, 16, 15, 16}) bytes.push_back(b);
    if (c.hasher.algorithm() == HashAlgorithm::kFnv1a128) return fnv1a128(bytes.data(), bytes.size());
    std::vector<unsigned char> message;
    if (!c.key.empty()) {
        message.resize(64, 0);
        SHA256(reinterpret_cast<unsigned char const*>(c.key.data()), c.key.size(), message.data());
    }
    message.insert(message.end(), bytes.begin(), bytes.end());
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(message.data(), message.size(), md);
    Hash128 h;
    for (int i = 0; i < 8; ++i) {
        h.hi = (h.hi << 8) | md[i];
        h.lo = (h.lo << 8) | md[8 + i];
    }
    return h;
}

// The chain through hashBlock, the field-by-field path.
std::vector<BlockHash> chainByHashBlock(BlockHasher const& h, std::vector<int32_t> const& tokens, size_t page,
                                        BlockKeyExtras const& extras = {}, Hash128 const* media = nullptr) {
    std::vector<BlockHash> out;
    BlockHash parent = kChainRoot;
    for (size_t b = 0; b < tokens.size() / page; ++b) {
        parent = h.hashBlock(parent, tokens.data() + b * page, page, extras, media ? media + b * page : nullptr);
        out.push_back(parent);
    }
    return out;
}

TEST(BlockHash, ChainsMatchTheFieldByFieldPathAtEveryPageSize) {
    std::mt19937 rng(1234);
    for (HasherCase const& c : hasherCases()) {
        for (size_t page = 1; page <= 130; ++page) {
            size_t const blocks = 1 + page % 4;  // 1..4 blocks, and a partial tail of page / 2 tokens
            std::vector<int32_t> const tokens = randomTokens(rng, blocks * page + page / 2);
            std::vector<BlockHash> const fast =
                c.hasher.hashFullBlocks(tokens.data(), tokens.size(), static_cast<int32_t>(page));
            ASSERT_EQ(fast.size(), blocks) << c.name << " page " << page;
            ASSERT_EQ(fast, chainByHashBlock(c.hasher, tokens, page)) << c.name << " page " << page;
            // The exact prefix: the fast chain over the full blocks, then the tail field by field.
            BlockHash const tail =
                page / 2 > 0 ? c.hasher.hashBlock(fast.back(), tokens.data() + blocks * page, page / 2) : fast.back();
            ASSERT_EQ(c.hasher.hashExactPrefix(tokens.data(), tokens.size(), static_cast<int32_t>(page)), tail)
                << c.name << " page " << page;
            ASSERT_EQ(c.hasher.hashExactPrefix(tokens.data(), blocks * page, static_cast<int32_t>(page)), fast.back())
                << c.name << " page " << page;
            // One request-wide identity broadcast to every block: the template carries the extras.
            BlockKeyExtras isolated;
            isolated.isolationDigest = Hash128{0x1234, 0x5678};
            for (BlockKeyExtras const& e : {isolated, everyExtra()}) {
                std::vector<BlockHash> const withExtras =
                    c.hasher.hashFullBlocks(tokens.data(), tokens.size(), static_cast<int32_t>(page), {e});
                ASSERT_EQ(withExtras, chainByHashBlock(c.hasher, tokens, page, e)) << c.name << " page " << page;
                BlockHash const extrasTail =
                    page / 2 > 0 ? c.hasher.hashBlock(withExtras.back(), tokens.data() + blocks * page, page / 2, e)
                                 : withExtras.back();
                ASSERT_EQ(c.hasher.hashExactPrefix(tokens.data(), tokens.size(), static_cast<int32_t>(page), {e}),
                          extrasTail)
                    << c.name << " page " << page;
            }
        }
    }
}

TEST(BlockHash, PlainChainsMatchAnIndependentDigest) {
    std::mt19937 rng(99);
    for (HasherCase const& c : hasherCases()) {
        for (size_t page : {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 130, 256}) {
            std::vector<int32_t> const tokens = randomTokens(rng, 3 * page);
            std::vector<BlockHash> const fast =
                c.hasher.hashFullBlocks(tokens.data(), tokens.size(), static_cast<int32_t>(page));
            ASSERT_EQ(fast.size(), 3u);
            BlockHash parent = kChainRoot;
            for (size_t b = 0; b < 3; ++b) {
                parent = independentPlainDigest(c, parent, tokens.data() + b * page, page);
                EXPECT_EQ(fast[b], parent) << c.name << " page " << page << " block " << b;
            }
        }
    }
}

TEST(BlockHash, LongPlainChainsMatchTheFieldByFieldPath) {
    std::mt19937 rng(7);
    for (HasherCase const& c : hasherCases()) {
        for (size_t page : {16, 32, 64, 128, 12}) {
            for (size_t blocks : {0, 1, 2, 3, 50, 257}) {
                std::vector<int32_t> const tokens = randomTokens(rng, blocks * page);
                std::vector<BlockHash> out{Hash128{5, 6}};  // appends after what the caller holds
                c.hasher.hashFullBlocksInto(tokens.data(), tokens.size(), static_cast<int32_t>(page), {}, nullptr, out);
                std::vector<BlockHash> expected{Hash128{5, 6}};
                std::vector<BlockHash> const chain = chainByHashBlock(c.hasher, tokens, page);
                expected.insert(expected.end(), chain.begin(), chain.end());
                ASSERT_EQ(out, expected) << c.name << " page " << page << " blocks " << blocks;
            }
        }
    }
}

TEST(BlockHash, ExtrasOrMediaAnywhereInTheChainGiveTheFieldByFieldDigests) {
    std::mt19937 rng(5);
    std::vector<BlockKeyExtras> oneField(6);
    oneField[0].media.push_back(MediaSpanKey{{1, 2}, {3, 4}, 0, 0, 0});
    oneField[1].adapter = AdapterKey{{5, 6}, 0};
    oneField[2].positionDigest = Hash128{7, 8};
    oneField[3].customEmbeddingDigest = Hash128{9, 10};
    oneField[4].isolationDigest = Hash128{11, 12};
    oneField[5] = everyExtra();
    for (HasherCase const& c : hasherCases()) {
        for (size_t page : {1, 4, 16, 33}) {
            std::vector<int32_t> const tokens = randomTokens(rng, 3 * page);
            int32_t const p = static_cast<int32_t>(page);
            std::vector<BlockHash> const plain = c.hasher.hashFullBlocks(tokens.data(), tokens.size(), p);
            for (BlockKeyExtras const& e : oneField) {
                // Broadcast to every block: every hash differs from the plain chain's.
                std::vector<BlockHash> const all = c.hasher.hashFullBlocks(tokens.data(), tokens.size(), p, {e});
                ASSERT_EQ(all, chainByHashBlock(c.hasher, tokens, page, e)) << c.name << " page " << page;
                for (size_t b = 0; b < 3; ++b) EXPECT_NE(all[b], plain[b]);
                EXPECT_EQ(c.hasher.hashExactPrefix(tokens.data(), tokens.size(), p, {e}), all.back());
                // Only the last block has extras: the blocks before it keep their plain hashes.
                std::vector<BlockHash> const last =
                    c.hasher.hashFullBlocks(tokens.data(), tokens.size(), p, {{}, {}, e});
                EXPECT_EQ(last[0], plain[0]);
                EXPECT_EQ(last[1], plain[1]);
                EXPECT_EQ(last[2], c.hasher.hashBlock(plain[1], tokens.data() + 2 * page, page, e));
                EXPECT_NE(last[2], plain[2]);
                EXPECT_EQ(c.hasher.hashExactPrefix(tokens.data(), tokens.size(), p, {{}, {}, e}), last[2]);
            }
            // Per-block extras that are all empty are a plain chain.
            EXPECT_EQ(c.hasher.hashFullBlocks(tokens.data(), tokens.size(), p, {{}, {}, {}}), plain);
            // One media position in the middle block: that block and the next change.
            std::vector<Hash128> media(tokens.size());
            media[page + page / 2] = Hash128{0xAB, 0xCD};
            std::vector<BlockHash> const withMedia =
                c.hasher.hashFullBlocks(tokens.data(), tokens.size(), p, {}, media.data());
            ASSERT_EQ(withMedia, chainByHashBlock(c.hasher, tokens, page, {}, media.data()));
            EXPECT_EQ(withMedia[0], plain[0]);
            EXPECT_NE(withMedia[1], plain[1]);
            EXPECT_NE(withMedia[2], plain[2]);
            EXPECT_EQ(c.hasher.hashExactPrefix(tokens.data(), tokens.size(), p, {}, media.data()), withMedia[2]);
            // All-zero media hashes are no media.
            std::vector<Hash128> const zeros(tokens.size());
            EXPECT_EQ(c.hasher.hashFullBlocks(tokens.data(), tokens.size(), p, {}, zeros.data()), plain);
        }
    }
}

TEST(BlockHash, HashingIntoTheCallersArrayGivesTheVectorsHashes) {
    std::mt19937 rng(9);
    for (HasherCase const& c : hasherCases()) {
        for (size_t page : {1, 4, 16, 33}) {
            std::vector<int32_t> const tokens = randomTokens(rng, 5 * page + page / 2);  // a partial tail
            int32_t const p = static_cast<int32_t>(page);
            std::vector<Hash128> media(tokens.size());
            media[page + 1] = Hash128{3, 4};
            struct Case {
                std::vector<BlockKeyExtras> extras;
                Hash128 const* media;
            };
            for (Case const& k : {Case{{}, nullptr}, Case{{everyExtra()}, nullptr},
                                  Case{{{}, {}, everyExtra(), {}, {}}, nullptr}, Case{{}, media.data()}}) {
                std::vector<BlockHash> const expected =
                    c.hasher.hashFullBlocks(tokens.data(), tokens.size(), p, k.extras, k.media);
                ASSERT_EQ(expected.size(), 5U);
                std::vector<BlockHash> out(7, BlockHash{0xEE, 0xEE});  // room to spare: the rest stays
                EXPECT_EQ(c.hasher.hashFullBlocksTo(tokens.data(), tokens.size(), p, k.extras, k.media, out.data(),
                                                    out.size()),
                          5U);
                EXPECT_EQ(std::vector<BlockHash>(out.begin(), out.begin() + 5), expected) << c.name << " page " << page;
                EXPECT_EQ(out[5], (BlockHash{0xEE, 0xEE}));
                // Too small an array: refused before anything is written.
                std::vector<BlockHash> small(4, BlockHash{0xEE, 0xEE});
                EXPECT_THROW((void)c.hasher.hashFullBlocksTo(tokens.data(), tokens.size(), p, k.extras, k.media,
                                                             small.data(), small.size()),
                             ContractError);
                EXPECT_EQ(small, std::vector<BlockHash>(4, (BlockHash{0xEE, 0xEE})));
                EXPECT_THROW(
                    (void)c.hasher.hashFullBlocksTo(tokens.data(), tokens.size(), p, k.extras, k.media, nullptr, 5),
                    ContractError);
            }
        }
        // No full block: nothing to write, a null array is fine.
        EXPECT_EQ(c.hasher.hashFullBlocksTo(kTokens.data(), 3, 4, {}, nullptr, nullptr, 0), 0U);
    }
}

TEST(BlockHash, ThreadsHashConcurrentlyWithTheirOwnBuffers) {
    // Each thread's template lives in its own buffer: two threads that start together and hash different page
    // sizes (different templates) at the same time agree with one thread.
    std::mt19937 rng(11);
    std::vector<int32_t> const tokens = randomTokens(rng, 64 * 40);
    BlockHasher const& h = hasherCases()[2].hasher;
    std::vector<int32_t> const pages{16, 7, 64, 130};
    std::vector<std::vector<BlockHash>> expected;
    for (int32_t page : pages) expected.push_back(h.hashFullBlocks(tokens.data(), tokens.size(), page));
    std::atomic<int> ready{0};
    std::vector<int> mismatches(2, 0);
    auto work = [&](size_t id) {
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        for (size_t round = 0; round < 400; ++round) {
            size_t const i = (round + 2 * id) % pages.size();
            if (h.hashFullBlocks(tokens.data(), tokens.size(), pages[i]) != expected[i]) ++mismatches[id];
        }
    };
    std::thread a(work, 0), b(work, 1);
    a.join();
    b.join();
    EXPECT_EQ(mismatches, (std::vector<int>{0, 0}));
}

TEST(BlockHash, ToHexWritesHiThenLo) {
    EXPECT_EQ(toHex(Hash128{0x0123456789ABCDEFull, 0x00000000000000FFull}), "0123456789abcdef00000000000000ff");
    EXPECT_EQ(toHex(kChainRoot), "9e3779b97f4a7c15c2b2ae3d27d4eb4f");
}

}  // namespace
}  // namespace ctxcache
