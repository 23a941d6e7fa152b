// DraftPathIndex: one coherent record path per lookup, bounded by the caller's block count; repeated hashes as
// distinct boundaries; insert refuses incomplete paths and duplicates; exact erase; incremental memory accounting
// (reference c.3).

#include <gtest/gtest.h>

#include "ctxcache/draft_path_index.h"
#include "ctxcache/errors.h"
#include "test_support.h"

namespace ctxcache {
namespace {

using test::blockHash;
using test::chain;

CacheRecord pairedRecord(RecordId id, std::vector<BlockHash> hashes, PageId firstPage) {
    CacheRecord r;
    r.id = id;
    r.key = {hashes.back(), static_cast<int32_t>(hashes.size())};
    r.logicalBlockHashes = hashes;
    for (size_t i = 0; i < hashes.size(); ++i) {
        r.basePagePath.push_back(firstPage + static_cast<PageId>(i));
        r.draftPagePath.push_back(firstPage + static_cast<PageId>(i));
    }
    return r;
}

TEST(DraftPathIndex, DraftLookupSelectsOneCoherentRecordPath) {
    DraftPathIndex index;
    std::vector<BlockHash> const shared = chain(1, 2);
    index.insert(pairedRecord(1, chain(1, 4), 0));  // 4 paired blocks
    index.insert(pairedRecord(2, test::extend(shared, 2, 1), 10));  // shares 2 blocks, then diverges

    // An input following record 1 for 3 blocks: the longest boundary is record 1's third.
    auto match = index.lookupLongest(chain(1, 3), 3);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{1, 3}));
    // An input following record 2's branch: one coherent path of record 2, never stitched from both.
    match = index.lookupLongest(test::extend(shared, 2, 1), 3);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{2, 3}));
    // Within the shared prefix the most recently inserted record wins.
    match = index.lookupLongest(shared, 2);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{2, 2}));
}

TEST(DraftPathIndex, LookupIsBoundedByMaxBlockCount) {
    DraftPathIndex index;
    index.insert(pairedRecord(7, chain(3, 5), 0));
    auto match = index.lookupLongest(chain(3, 5), 2);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{7, 2}));
    EXPECT_FALSE(index.lookupLongest(chain(3, 5), 0));
    EXPECT_FALSE(index.lookupLongest(chain(4, 5), 5));
}

TEST(DraftPathIndex, DraftIndexKeepsRepeatedHashesAsDistinctBoundaries) {
    DraftPathIndex index;
    BlockHash const h = blockHash(9, 0);
    index.insert(pairedRecord(3, {h, h, h}, 0));
    EXPECT_EQ(index.entryCount(), 3u);
    EXPECT_TRUE(index.contains(h, {3, 1}));
    EXPECT_TRUE(index.contains(h, {3, 2}));
    EXPECT_TRUE(index.contains(h, {3, 3}));
    auto match = index.lookupLongest(std::vector<BlockHash>{h, h}, 2);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{3, 2}));
    index.erase(pairedRecord(3, {h, h, h}, 0));
    EXPECT_EQ(index.entryCount(), 0u);
    EXPECT_FALSE(index.lookupLongest(std::vector<BlockHash>{h}, 1));
}

TEST(DraftPathIndex, InsertRejectsRecordsWithoutACompleteDraftPathAndDuplicates) {
    DraftPathIndex index;
    CacheRecord baseOnly = pairedRecord(1, chain(1, 2), 0);
    baseOnly.draftPagePath.clear();
    EXPECT_THROW(index.insert(baseOnly), ContractError);
    CacheRecord shortDraft = pairedRecord(1, chain(1, 2), 0);
    shortDraft.draftPagePath.pop_back();
    EXPECT_THROW(index.insert(shortDraft), ContractError);
    EXPECT_EQ(index.entryCount(), 0u);

    index.insert(pairedRecord(1, chain(1, 2), 0));
    EXPECT_THROW(index.insert(pairedRecord(1, chain(1, 2), 0)), ContractError);
    EXPECT_EQ(index.entryCount(), 2u);  // the failed insert left nothing behind
}

TEST(DraftPathIndex, EraseRemovesExactlyThatRecordAndBaseOnlyEraseIsANoOp) {
    DraftPathIndex index;
    index.insert(pairedRecord(1, chain(1, 3), 0));
    index.insert(pairedRecord(2, chain(1, 3), 10));
    CacheRecord baseOnly = pairedRecord(5, chain(1, 3), 20);
    baseOnly.draftPagePath.clear();
    index.erase(baseOnly);
    EXPECT_EQ(index.entryCount(), 6u);
    index.erase(pairedRecord(2, chain(1, 3), 10));
    EXPECT_EQ(index.entryCount(), 3u);
    auto match = index.lookupLongest(chain(1, 3), 3);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{1, 3}));
}

TEST(DraftPathIndex, MemoryBytesIsAccountedIncrementally) {
    DraftPathIndex index;
    size_t const empty = index.memoryBytes();
    index.checkInvariants();
    for (RecordId id = 1; id <= 8; ++id) {  // shared prefixes: several entries under one hash, vectors grow
        index.insert(pairedRecord(id, test::extend(chain(1, 3), 100 + static_cast<uint64_t>(id), 4), 0));
        index.checkInvariants();
    }
    EXPECT_GT(index.memoryBytes(), empty);
    for (RecordId id = 1; id <= 8; ++id) {
        index.erase(pairedRecord(id, test::extend(chain(1, 3), 100 + static_cast<uint64_t>(id), 4), 0));
        index.checkInvariants();
    }
    EXPECT_EQ(index.entryCount(), 0u);
    index.insert(pairedRecord(9, chain(1, 2), 0));
    index.checkInvariants();
}

}  // namespace
}  // namespace ctxcache
