// BaseBlockIndex: first-committer-wins canonical pages, prefix lookup, exact reverse erase (reference c.3).
#include "ctxcache/base_block_index.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>
#include <unordered_map>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::H;
using test::Hs;

TEST(BaseBlockIndex, FirstCommitterOwnsCanonicalPage) {
    BaseBlockIndex index(8);
    BaseInsertResult const first = index.insert(H(1), 3);
    EXPECT_EQ(first.canonicalPage, 3);
    EXPECT_TRUE(first.inserted);
    BaseInsertResult const second = index.insert(H(1), 5);
    EXPECT_EQ(second.canonicalPage, 3);
    EXPECT_FALSE(second.inserted);
    EXPECT_EQ(index.lookup(H(1)), std::optional<PageId>(3));
    EXPECT_EQ(index.hashOfPage(3), std::optional<BlockHash>(H(1)));
    EXPECT_FALSE(index.hashOfPage(5).has_value());
    EXPECT_EQ(index.size(), 1u);
    EXPECT_EQ(index.pageCapacity(), 8);
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, LookupStopsAtFirstMissingBlock) {
    BaseBlockIndex index(8);
    index.insert(H(1), 0);
    index.insert(H(2), 1);
    index.insert(H(4), 3);  // after the hole at H(3): never reached by a prefix walk
    BaseLookupResult const r = index.lookupPrefix(Hs({1, 2, 3, 4}));
    EXPECT_EQ(r.pageIds, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(r.matchedHashes, Hs({1, 2}));
    BaseLookupResult const miss = index.lookupPrefix(Hs({3, 1, 2}));
    EXPECT_TRUE(miss.pageIds.empty());
    EXPECT_TRUE(miss.matchedHashes.empty());
    EXPECT_TRUE(index.lookupPrefix({}).pageIds.empty());

    std::vector<BlockHash> const all = Hs({1, 2, 3, 4});
    std::vector<PageId> pages{7};
    EXPECT_EQ(index.lookupPrefixInto(all.data(), all.size(), pages), 2u);
    EXPECT_EQ(pages, (std::vector<PageId>{7, 0, 1}));
    EXPECT_EQ(index.lookup(H(4)), std::optional<PageId>(3));
    EXPECT_FALSE(index.lookup(H(3)).has_value());
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, LookupHasNoReferenceOrRecencySideEffects) {
    // Two published records in a manager; looking their blocks up through the index changes no refcount, no
    // free list and no LRU position.
    ContextCacheManager manager(4, {4, 0, 0, 0}, 8);
    for (uint64_t first : {1, 3}) {
        AcquireResult a = manager.acquireVanilla(Hs({first, first + 1}), 8);
        ASSERT_TRUE(a.lease);
        manager.publish(*a.lease, {Hs({first, first + 1}), 8});
    }
    std::string const before = test::describe(manager);
    for (int i = 0; i < 3; ++i) {
        BaseLookupResult const r = manager.baseIndex().lookupPrefix(Hs({1, 2}));
        EXPECT_EQ(r.pageIds, (std::vector<PageId>{0, 1}));
        EXPECT_EQ(manager.baseIndex().lookup(H(3)), std::optional<PageId>(2));
    }
    EXPECT_EQ(test::describe(manager), before);
    EXPECT_EQ(manager.records().lruToMru(), (std::vector<RecordId>{1, 2}));
    EXPECT_NO_THROW(manager.checkInvariants());
}

TEST(BaseBlockIndex, FirstCommitterWinsAndReverseEraseIsExact) {
    BaseBlockIndex index(8);
    index.insert(H(1), 2);
    EXPECT_FALSE(index.insert(H(1), 4).inserted);  // page 4 is a private duplicate, never mapped
    index.erasePage(4);                            // so erasing it must not touch H(1)'s mapping
    EXPECT_EQ(index.lookup(H(1)), std::optional<PageId>(2));
    EXPECT_EQ(index.size(), 1u);
    index.erasePage(2);  // the canonical page goes: the forward entry goes with it
    EXPECT_FALSE(index.lookup(H(1)).has_value());
    EXPECT_FALSE(index.hashOfPage(2).has_value());
    EXPECT_EQ(index.size(), 0u);
    // A later producer becomes the new first committer.
    BaseInsertResult const again = index.insert(H(1), 4);
    EXPECT_TRUE(again.inserted);
    EXPECT_EQ(again.canonicalPage, 4);
    EXPECT_EQ(index.hashOfPage(4), std::optional<BlockHash>(H(1)));
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, InsertOfAPageMappedToAnotherHashThrowsAndChangesNothing) {
    BaseBlockIndex index(8);
    index.insert(H(1), 2);
    index.insert(H(2), 3);
    std::string const before = test::describe(index);
    EXPECT_THROW(index.insert(H(9), 2), ContractError);
    EXPECT_EQ(test::describe(index), before);
    EXPECT_FALSE(index.lookup(H(9)).has_value());
    EXPECT_EQ(index.hashOfPage(2), std::optional<BlockHash>(H(1)));
    // The same page under its own hash is not a conflict: it is the existing mapping.
    EXPECT_EQ(index.insert(H(1), 2).canonicalPage, 2);
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, TryInsertReportsTheConflictInsertThrowsAndIsMappedToReadsTheReverseEntry) {
    BaseBlockIndex index(8);
    index.insert(H(1), 2);
    std::string const before = test::describe(index);
    EXPECT_FALSE(index.tryInsert(H(9), 2).has_value());  // page 2 is H1's: reported, nothing changed
    EXPECT_EQ(test::describe(index), before);
    std::optional<BaseInsertResult> const existing = index.tryInsert(H(1), 5);  // present: its page, no change
    ASSERT_TRUE(existing.has_value());
    EXPECT_EQ(existing->canonicalPage, 2);
    EXPECT_FALSE(existing->inserted);
    std::optional<BaseInsertResult> const fresh = index.tryInsert(H(9), 5);
    ASSERT_TRUE(fresh.has_value());
    EXPECT_EQ(fresh->canonicalPage, 5);
    EXPECT_TRUE(fresh->inserted);
    EXPECT_THROW(index.tryInsert(H(3), 8), ContractError);  // out of range still throws
    EXPECT_TRUE(index.isMappedTo(2, H(1)));
    EXPECT_FALSE(index.isMappedTo(2, H(9)));  // mapped, to another hash
    EXPECT_FALSE(index.isMappedTo(3, H(1)));  // unmapped
    EXPECT_FALSE(index.isMappedTo(-1, H(1)));
    EXPECT_FALSE(index.isMappedTo(8, H(1)));
    index.erasePage(2);
    EXPECT_FALSE(index.isMappedTo(2, H(1)));  // a stale reverse entry is not a mapping
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, ErasePageOfAbsentPageIsNoOp) {
    BaseBlockIndex index(4);
    index.insert(H(1), 0);
    std::string const before = test::describe(index);
    index.erasePage(1);
    index.erasePage(3);
    EXPECT_EQ(test::describe(index), before);
    index.erasePage(0);
    index.erasePage(0);  // twice: the second is a no-op
    EXPECT_EQ(index.size(), 0u);
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, OutOfRangePageThrows) {
    BaseBlockIndex index(4);
    EXPECT_THROW(index.insert(H(1), -1), ContractError);
    EXPECT_THROW(index.insert(H(1), 4), ContractError);
    EXPECT_THROW(index.erasePage(-1), ContractError);
    EXPECT_THROW(index.erasePage(4), ContractError);
    EXPECT_FALSE(index.hashOfPage(-1).has_value());
    EXPECT_FALSE(index.hashOfPage(4).has_value());
    EXPECT_EQ(index.size(), 0u);
    EXPECT_FALSE(index.lookup(H(1)).has_value());
    EXPECT_THROW(BaseBlockIndex(-1), ContractError);
    EXPECT_NO_THROW(index.checkInvariants());
}

// The index's slot tag and home, as its header describes them: tag = high 32 bits of mixHash(Hash128Hasher(h)),
// home = tag mod table size. Written out here so that the tests can build colliding keys on purpose.
uint32_t tagOf(BlockHash const& h) { return static_cast<uint32_t>(detail::mixHash(Hash128Hasher{}(h)) >> 32); }

// Keys whose home slots coincide in a table of 2048 slots (the table of a 1024-page index: 2 slots per page,
// rounded up to a power of two). With lo = 0 the table hash of {hi, 0} is hi itself.
std::vector<BlockHash> keysHomedAt(uint32_t home, size_t count, uint64_t& cursor) {
    std::vector<BlockHash> keys;
    while (keys.size() < count) {
        ++cursor;
        if ((tagOf(BlockHash{cursor, 0}) & 2047u) == home) keys.push_back(BlockHash{cursor, 0});
    }
    return keys;
}

TEST(BaseBlockIndex, TableIsSizedForThePoolAndNeverGrows) {
    // 1024 pages -> 2048 slots of 8 bytes, plus 16 bytes and a bit per page: fixed from construction on.
    BaseBlockIndex index(1024);
    size_t const expected = 2048 * 8 + 1024 * 16 + 1024 / 8;
    EXPECT_EQ(index.memoryBytes(), expected);
    for (PageId page = 0; page < 1024; ++page) ASSERT_TRUE(index.insert(H(1000 + page), page).inserted);
    EXPECT_EQ(index.size(), 1024u);
    EXPECT_EQ(index.memoryBytes(), expected);
    for (PageId page = 0; page < 1024; ++page) ASSERT_EQ(index.lookup(H(1000 + page)), std::optional<PageId>(page));
    EXPECT_NO_THROW(index.checkInvariants());
    // The smallest table (16 slots) holds a full 8-page pool at load 1/2; a 9-page pool gets 32 slots.
    BaseBlockIndex small(8);
    EXPECT_GE(small.memoryBytes(), 16u * 8 + 8 * 16);
    EXPECT_LE(small.memoryBytes(), 16u * 8 + 8 * 16 + 8);  // the page bits round up to a word
    for (PageId page = 0; page < 8; ++page) ASSERT_TRUE(small.insert(H(50 + page), page).inserted);
    for (PageId page = 0; page < 8; ++page) ASSERT_EQ(small.lookup(H(50 + page)), std::optional<PageId>(page));
    EXPECT_NO_THROW(small.checkInvariants());
    EXPECT_GE(BaseBlockIndex(9).memoryBytes(), 32u * 8 + 9 * 16);
}

TEST(BaseBlockIndex, EqualTagsAreToldApartByTheFullHash) {
    // Two distinct hashes with the same 32-bit tag (so the same home): found by brute force among 2^18 keys
    // (about 8 such pairs are expected). Each must find its own page, miss after the other's erase, and a third
    // key with the tag but never inserted must miss.
    std::unordered_map<uint32_t, uint64_t> seen;
    std::vector<std::pair<uint64_t, uint64_t>> pairs;
    for (uint64_t hi = 1; hi <= (1u << 18) && pairs.size() < 2; ++hi) {
        auto [it, inserted] = seen.emplace(tagOf(BlockHash{hi, 7}), hi);
        if (!inserted) pairs.emplace_back(it->second, hi);
    }
    ASSERT_EQ(pairs.size(), 2u);
    BlockHash const a{pairs[0].first, 7}, b{pairs[0].second, 7};
    ASSERT_EQ(tagOf(a), tagOf(b));
    ASSERT_NE(a, b);
    BaseBlockIndex index(8);
    EXPECT_TRUE(index.insert(a, 2).inserted);
    EXPECT_FALSE(index.lookup(b).has_value());  // same tag, same home, other hash: a miss
    BaseInsertResult const second = index.insert(b, 5);
    EXPECT_TRUE(second.inserted);
    EXPECT_EQ(second.canonicalPage, 5);
    EXPECT_EQ(index.lookup(a), std::optional<PageId>(2));
    EXPECT_EQ(index.lookup(b), std::optional<PageId>(5));
    EXPECT_FALSE(index.insert(a, 6).inserted);  // still first-committer-wins under the shared tag
    EXPECT_NO_THROW(index.checkInvariants());
    index.erasePage(2);
    EXPECT_FALSE(index.lookup(a).has_value());
    EXPECT_EQ(index.lookup(b), std::optional<PageId>(5));
    EXPECT_EQ(index.hashOfPage(5), std::optional<BlockHash>(b));
    EXPECT_NO_THROW(index.checkInvariants());
    index.erasePage(5);
    EXPECT_EQ(index.size(), 0u);
    EXPECT_FALSE(index.lookup(b).has_value());
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, ManyInsertsAndErasesKeepLookupsExact) {
    // Three long colliding probe runs, one homed at the last slot so that it wraps around the table end into the
    // runs homed at slots 0 and 1, plus hundreds of ordinary keys: backward-shift deletion must keep every
    // remaining key reachable after each erase.
    constexpr int32_t kPages = 1024;
    BaseBlockIndex index(kPages);
    ASSERT_EQ(Hash128Hasher{}(BlockHash{12345, 0}), 12345u);
    uint64_t cursor = 0;
    std::vector<BlockHash> keys;
    for (uint32_t home : {2047u, 0u, 1u}) {
        std::vector<BlockHash> run = keysHomedAt(home, 40, cursor);
        keys.insert(keys.end(), run.begin(), run.end());
    }
    for (uint64_t i = 0; i < 400; ++i) keys.push_back(BlockHash{0xABCDEF0000000000ull + i * 0x9E3779B9ull, i + 1});
    ASSERT_EQ(keys.size(), 520u);

    std::map<PageId, BlockHash> oracle;  // page -> hash
    std::mt19937 rng(7);
    std::vector<size_t> order(keys.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
        PageId const page = static_cast<PageId>(i);
        ASSERT_TRUE(index.insert(keys[i], page).inserted);
        oracle[page] = keys[i];
    }
    auto verify = [&] {
        ASSERT_EQ(index.size(), oracle.size());
        for (size_t i = 0; i < keys.size(); ++i) {
            PageId const page = static_cast<PageId>(i);
            bool const present = oracle.count(page) > 0;
            std::optional<PageId> const found = index.lookup(keys[i]);
            ASSERT_EQ(found.has_value(), present) << "key " << i;
            if (present) ASSERT_EQ(*found, page) << "key " << i;
        }
        ASSERT_NO_THROW(index.checkInvariants());
    };
    verify();

    // Erase in another random order; halfway through, re-insert a third of the erased keys on new pages.
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<size_t> erased;
    for (size_t step = 0; step < order.size(); ++step) {
        size_t const i = order[step];
        index.erasePage(static_cast<PageId>(i));
        oracle.erase(static_cast<PageId>(i));
        erased.push_back(i);
        if (step % 37 == 0) verify();
        if (step == order.size() / 2) {
            for (size_t k = 0; k < erased.size(); k += 3) {
                PageId const page = static_cast<PageId>(520 + k / 3);
                ASSERT_TRUE(index.insert(keys[erased[k]], page).inserted);
                EXPECT_EQ(index.lookup(keys[erased[k]]), std::optional<PageId>(page));
            }
            for (size_t k = 0; k < erased.size(); k += 3) {
                index.erasePage(static_cast<PageId>(520 + k / 3));
                EXPECT_FALSE(index.lookup(keys[erased[k]]).has_value());
            }
            verify();
        }
    }
    verify();
    EXPECT_EQ(index.size(), 0u);
    for (BlockHash const& k : keys) EXPECT_FALSE(index.lookup(k).has_value());
    EXPECT_NO_THROW(index.checkInvariants());
}

TEST(BaseBlockIndex, EraseHintsAcceptAnyPageAndChangeNothing) {
    // The eviction walk issues hints for pages ahead of it, mapped or not, and the hints clamp instead of
    // checking: any page id, on an empty or a zero-capacity index, must neither fault nor change the state.
    BaseBlockIndex empty(0);
    for (PageId page : {-1, 0, 1, std::numeric_limits<PageId>::max(), std::numeric_limits<PageId>::min()}) {
        empty.prefetchReverse(page);
        empty.prefetchErase(page);
    }
    EXPECT_EQ(empty.size(), 0u);
    BaseBlockIndex index(4);
    ASSERT_TRUE(index.insert(H(1), 2).inserted);
    for (PageId page : {-7, 0, 2, 3, 4, 1 << 30}) {
        index.prefetchReverse(page);
        index.prefetchErase(page);
        index.prefetch(H(static_cast<uint64_t>(page) + 9));
    }
    EXPECT_EQ(index.size(), 1u);
    EXPECT_EQ(index.lookup(H(1)), std::optional<PageId>(2));
    EXPECT_NO_THROW(index.checkInvariants());
}

}  // namespace
}  // namespace ctxcache
