// Store keys and objects (issue 27): a key names the layout as well as the block (every field that changes the
// bytes changes the key), and a load's check finds every way an object can be wrong: short, foreign, another
// layout, another block, another length, any single changed byte of the payload.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "ctxcache/errors.h"
#include "ctxcache/tier/store_object.h"

namespace ctxcache::tier {
namespace {

StoreLayout layout() {
    StoreLayout l;
    l.model = "meta-llama/Llama-3.1-8B-Instruct";
    l.dtype = "bf16";
    l.pageSize = 16;
    l.layers = 32;
    l.layoutDigest = 0x0123456789ABCDEFull;
    l.tpRank = 1;
    l.ppRank = 0;
    l.hashAlgorithm = "sha256";
    l.keyedHash = true;
    return l;
}

TEST(StoreKey, NamesTheLayoutAndTheBlockInTheMooncakeConnectorsShape) {
    std::string const prefix = storeKeyPrefix(layout());
    EXPECT_EQ(prefix,
              "meta-llama/Llama-3.1-8B-Instruct@tp_rank:1@pp_rank:0@kv:bf16:p16:l32:0123456789abcdef@"
              "sha256-keyed@");
    EXPECT_EQ(storeKey(prefix, BlockHash{0xAB, 0x1200000000000034ull}), prefix + "00000000000000ab1200000000000034");
}

TEST(StoreKey, EveryLayoutFieldChangesTheKey) {
    BlockHash const h{7, 9};
    std::set<std::string> keys;
    auto add = [&](StoreLayout const& l) { keys.insert(storeKey(storeKeyPrefix(l), h)); };
    add(layout());
    StoreLayout l = layout();
    l.model += "-v2";
    add(l);
    l = layout();
    l.dtype = "fp16";
    add(l);
    l = layout();
    l.pageSize = 32;
    add(l);
    l = layout();
    l.layers = 16;
    add(l);
    l = layout();
    l.layoutDigest ^= 1;
    add(l);
    l = layout();
    l.tpRank = 0;
    add(l);
    l = layout();
    l.ppRank = 2;
    add(l);
    l = layout();
    l.hashAlgorithm = "fnv1a128";
    add(l);
    l = layout();
    l.keyedHash = false;
    add(l);
    EXPECT_EQ(keys.size(), 10u);
}

TEST(StoreKey, RefusesNamesThatWouldBreakTheKeysShape) {
    StoreLayout l = layout();
    l.model = "a@b";
    EXPECT_THROW(storeKeyPrefix(l), ContractError);
    l.model = "";
    EXPECT_THROW(storeKeyPrefix(l), ContractError);
    l.model = std::string("x\ny");
    EXPECT_THROW(storeKeyPrefix(l), ContractError);
    l = layout();
    l.dtype = "";
    EXPECT_THROW(storeKeyPrefix(l), ContractError);
    l = layout();
    l.pageSize = 0;
    EXPECT_THROW(storeKeyPrefix(l), ContractError);
    l = layout();
    l.tpRank = -1;
    EXPECT_THROW(storeKeyPrefix(l), ContractError);
}

// An object: header then payload.
std::vector<unsigned char> object(std::vector<unsigned char> const& payload, uint64_t digest, BlockHash hash,
                                  int64_t tokens = 16) {
    StoreObjectHeader const h = encodeStoreObjectHeader(digest, hash, tokens, payload.data(), payload.size());
    std::vector<unsigned char> out(sizeof h + payload.size());
    std::memcpy(out.data(), &h, sizeof h);
    std::memcpy(out.data() + sizeof h, payload.data(), payload.size());
    return out;
}

TEST(StoreObject, AValidObjectPassesAndEveryWrongOneIsNamed) {
    std::vector<unsigned char> payload(4096 + 13);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<unsigned char>(i * 31 + 7);
    BlockHash const hash{0x11, 0x22};
    StoreObjectExpectation const want{0xD16E57, hash, 16, payload.size()};
    std::vector<unsigned char> const good = object(payload, want.layoutDigest, hash);
    EXPECT_EQ(checkStoreObject(good.data(), good.size(), want), StoreObjectVerdict::kValid);
    EXPECT_EQ(std::memcmp(good.data(), "xCTXOBJ1", 8), 0);
    // A larger destination is fine (a store may return more room than the object).
    std::vector<unsigned char> roomy = good;
    roomy.resize(roomy.size() + 100, 0xEE);
    EXPECT_EQ(checkStoreObject(roomy.data(), roomy.size(), want), StoreObjectVerdict::kValid);

    EXPECT_EQ(checkStoreObject(nullptr, 0, want), StoreObjectVerdict::kShort);
    EXPECT_EQ(checkStoreObject(good.data(), 63, want), StoreObjectVerdict::kShort);
    EXPECT_EQ(checkStoreObject(good.data(), good.size() - 1, want), StoreObjectVerdict::kShort);
    std::vector<unsigned char> bad = good;
    bad[0] ^= 1;
    EXPECT_EQ(checkStoreObject(bad.data(), bad.size(), want), StoreObjectVerdict::kForeign);
    StoreObjectExpectation other = want;
    other.layoutDigest ^= 1;
    EXPECT_EQ(checkStoreObject(good.data(), good.size(), other), StoreObjectVerdict::kOtherLayout);
    other = want;
    other.tokens = 32;
    EXPECT_EQ(checkStoreObject(good.data(), good.size(), other), StoreObjectVerdict::kOtherLayout);
    other = want;
    other.hash.lo ^= 4;
    EXPECT_EQ(checkStoreObject(good.data(), good.size(), other), StoreObjectVerdict::kOtherBlock);
    other = want;
    other.payloadBytes -= 1;
    EXPECT_EQ(checkStoreObject(good.data(), good.size(), other), StoreObjectVerdict::kWrongLength);
    // Any single changed payload byte (every position, one bit each) is corrupt.
    for (size_t i = sizeof(StoreObjectHeader); i < good.size(); ++i) {
        bad = good;
        bad[i] ^= static_cast<unsigned char>(1u << (i % 8));
        ASSERT_EQ(checkStoreObject(bad.data(), bad.size(), want), StoreObjectVerdict::kCorrupt) << i;
    }
    // And a changed checksum field.
    bad = good;
    bad[offsetof(StoreObjectHeader, checksum)] ^= 0x80;
    EXPECT_EQ(checkStoreObject(bad.data(), bad.size(), want), StoreObjectVerdict::kCorrupt);
    EXPECT_STREQ(toString(StoreObjectVerdict::kCorrupt), "corrupt");
}

TEST(StoreObject, TheChecksumDependsOnTheLengthAndEveryByte) {
    std::vector<unsigned char> zeros(100, 0);
    std::set<uint64_t> sums;
    for (size_t n = 0; n <= zeros.size(); ++n) sums.insert(storeChecksum(zeros.data(), n));
    EXPECT_EQ(sums.size(), zeros.size() + 1);  // all-zero inputs of different lengths differ
    std::vector<unsigned char> a(1000, 0x5A);
    uint64_t const base = storeChecksum(a.data(), a.size());
    for (size_t i = 0; i < a.size(); i += 37) {
        std::vector<unsigned char> b = a;
        b[i] = 0x5B;
        EXPECT_NE(storeChecksum(b.data(), b.size()), base) << i;
    }
}

}  // namespace
}  // namespace ctxcache::tier
