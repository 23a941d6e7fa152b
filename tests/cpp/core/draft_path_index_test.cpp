// DraftPathIndex: one coherent record path per lookup, bounded by the caller's block count; repeated hashes as
// distinct boundaries; insert refuses incomplete paths and duplicates; exact erase; incremental memory accounting
// (reference c.3). The flat layout: many records under one boundary, unlinking from the middle of a list, the most
// recent first after erases, record slots reused through the free list, 8 bytes per shared entry, a page at several
// depths (the overflow map: its primary vacated and retaken, trims and erases), the head array sized on first use,
// unresolved pages in a lookup, the strong guarantee under a failed allocation, erase reading a bounded number of
// links per entry however many records share its boundaries (the conversation shape), and a randomized comparison
// against a plain model. Hashes stand for their canonical pages through pageOf, as the base index gives them.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <new>
#include <random>
#include <set>
#include <tuple>

#include "ctxcache/draft_path_index.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::blockHash;
using test::chain;

// The base index's part in these tests: every distinct hash has one canonical page, given on first sight, as the
// manager's records hold the canonical page of each of their hashes.
PageId pageOf(BlockHash const& hash) {
    static std::map<std::pair<uint64_t, uint64_t>, PageId> canonical;
    return canonical.try_emplace({hash.hi, hash.lo}, static_cast<PageId>(canonical.size())).first->second;
}

std::vector<PageId> pagesOf(std::vector<BlockHash> const& hashes) {
    std::vector<PageId> pages;
    for (BlockHash const& h : hashes) pages.push_back(pageOf(h));
    return pages;
}

CacheRecord pairedRecord(RecordId id, std::vector<BlockHash> hashes, PageId firstDraftPage) {
    CacheRecord r;
    r.id = id;
    r.key = {hashes.back(), static_cast<int32_t>(hashes.size())};
    r.logicalBlockHashes = hashes;
    r.basePagePath = pagesOf(hashes);
    for (size_t i = 0; i < hashes.size(); ++i) r.draftPagePath.push_back(firstDraftPage + static_cast<PageId>(i));
    return r;
}

// Every entry as "page/n->record", in forEach order: most recent first under one boundary.
std::vector<std::string> entries(DraftPathIndex const& index) {
    std::vector<std::string> out;
    index.forEach([&](PageId page, DraftPathMatch const& m) {
        out.push_back(std::to_string(page) + "/" + std::to_string(m.pathBlockCount) + "->" + std::to_string(m.record));
    });
    return out;
}

// The records listed under one boundary, in forEach order.
std::vector<RecordId> listed(DraftPathIndex const& index, BlockHash const& hash, int32_t n) {
    std::vector<RecordId> out;
    index.forEach([&](PageId page, DraftPathMatch const& m) {
        if (page == pageOf(hash) && m.pathBlockCount == n) out.push_back(m.record);
    });
    return out;
}

TEST(DraftPathIndex, DraftLookupSelectsOneCoherentRecordPath) {
    DraftPathIndex index;
    std::vector<BlockHash> const shared = chain(1, 2);
    index.insert(pairedRecord(1, chain(1, 4), 0));  // 4 paired blocks
    index.insert(pairedRecord(2, test::extend(shared, 2, 1), 10));  // shares 2 blocks, then diverges

    // An input following record 1 for 3 blocks: the longest boundary is record 1's third.
    auto match = index.lookupLongest(pagesOf(chain(1, 3)), 3);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{1, 3}));
    // An input following record 2's branch: one coherent path of record 2, never stitched from both.
    match = index.lookupLongest(pagesOf(test::extend(shared, 2, 1)), 3);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{2, 3}));
    // Within the shared prefix the most recently inserted record wins.
    match = index.lookupLongest(pagesOf(shared), 2);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{2, 2}));
}

TEST(DraftPathIndex, LookupIsBoundedByMaxBlockCount) {
    DraftPathIndex index;
    index.insert(pairedRecord(7, chain(3, 5), 0));
    auto match = index.lookupLongest(pagesOf(chain(3, 5)), 2);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{7, 2}));
    EXPECT_FALSE(index.lookupLongest(pagesOf(chain(3, 5)), 0));
    EXPECT_FALSE(index.lookupLongest(pagesOf(chain(4, 5)), 5));
}

TEST(DraftPathIndex, DraftIndexKeepsRepeatedHashesAsDistinctBoundaries) {
    DraftPathIndex index;
    BlockHash const h = blockHash(9, 0);
    index.insert(pairedRecord(3, {h, h, h}, 0));
    EXPECT_EQ(index.entryCount(), 3u);
    EXPECT_TRUE(index.contains(pageOf(h), {3, 1}));
    EXPECT_TRUE(index.contains(pageOf(h), {3, 2}));
    EXPECT_TRUE(index.contains(pageOf(h), {3, 3}));
    auto match = index.lookupLongest(pagesOf(std::vector<BlockHash>{h, h}), 2);
    ASSERT_TRUE(match);
    EXPECT_EQ(*match, (DraftPathMatch{3, 2}));
    index.erase(pairedRecord(3, {h, h, h}, 0));
    EXPECT_EQ(index.entryCount(), 0u);
    EXPECT_FALSE(index.lookupLongest(pagesOf(std::vector<BlockHash>{h}), 1));
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
    auto match = index.lookupLongest(pagesOf(chain(1, 3)), 3);
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

TEST(DraftPathIndex, SpanEntryPointsNeedNoStoredRecord) {
    DraftPathIndex index;
    std::vector<BlockHash> const path = chain(2, 3);
    index.insert(4, pagesOf(path), 3);
    EXPECT_EQ(index.entryCount(), 3u);
    EXPECT_EQ(index.lookupLongest(pagesOf(path), 3), (DraftPathMatch{4, 3}));
    EXPECT_THROW(index.insert(5, pagesOf(path), 2), ContractError);  // draft path shorter than the logical path
    EXPECT_THROW(index.insert(5, PagePathSpan(), 0), ContractError);
    index.erase(4, PagePathSpan(pagesOf(path).data(), 2));  // the first two boundaries only
    EXPECT_EQ(index.entryCount(), 1u);
    EXPECT_FALSE(index.lookupLongest(pagesOf(path), 2));
    EXPECT_EQ(index.lookupLongest(pagesOf(path), 3), (DraftPathMatch{4, 3}));
    index.erase(4, pagesOf(path));
    EXPECT_EQ(index.entryCount(), 0u);
    index.checkInvariants();
}

TEST(DraftPathIndex, ManyRecordsUnderOneBoundaryListTheMostRecentFirst) {
    DraftPathIndex index;
    std::vector<BlockHash> const shared = chain(1, 3);
    for (RecordId id = 1; id <= 12; ++id)  // a common prefix, then one block of the record's own
        index.insert(pairedRecord(id, test::extend(shared, 100 + id, 1), 0));
    index.checkInvariants();
    EXPECT_EQ(index.entryCount(), 48u);
    for (int32_t n = 1; n <= 3; ++n) {
        EXPECT_EQ(listed(index, shared[static_cast<size_t>(n - 1)], n),
                  (std::vector<RecordId>{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}));
        EXPECT_EQ(index.lookupLongest(pagesOf(shared), n), (DraftPathMatch{12, n}));
    }
    for (RecordId id = 1; id <= 12; ++id) {  // each record's own boundary names it alone
        std::vector<BlockHash> const own = test::extend(shared, 100 + id, 1);
        EXPECT_EQ(index.lookupLongest(pagesOf(own), 4), (DraftPathMatch{id, 4}));
        EXPECT_EQ(listed(index, own[3], 4), (std::vector<RecordId>{id}));
        EXPECT_TRUE(index.contains(pageOf(shared[0]), {id, 1}));
        EXPECT_FALSE(index.contains(pageOf(shared[0]), {id, 2}));  // the record's boundary 2 is under shared[1]
    }
    EXPECT_FALSE(index.contains(pageOf(shared[0]), {13, 1}));
    EXPECT_FALSE(index.contains(pageOf(shared[0]), {1, 0}));
}

TEST(DraftPathIndex, EraseFromTheMiddleOfAListKeepsTheOthersInOrder) {
    DraftPathIndex index;
    std::vector<BlockHash> const path = chain(1, 4);
    for (RecordId id = 1; id <= 5; ++id) index.insert(pairedRecord(id, path, 0));
    index.erase(pairedRecord(3, path, 0));  // the middle of every list
    index.checkInvariants();
    EXPECT_EQ(listed(index, path[3], 4), (std::vector<RecordId>{5, 4, 2, 1}));
    EXPECT_EQ(index.lookupLongest(pagesOf(path), 4), (DraftPathMatch{5, 4}));
    index.erase(pairedRecord(5, path, 0));  // the head
    EXPECT_EQ(index.lookupLongest(pagesOf(path), 4), (DraftPathMatch{4, 4}));
    index.erase(pairedRecord(1, path, 0));  // the tail
    EXPECT_EQ(listed(index, path[0], 1), (std::vector<RecordId>{4, 2}));
    index.insert(pairedRecord(3, path, 0));  // back in: the most recent again
    EXPECT_EQ(listed(index, path[2], 3), (std::vector<RecordId>{3, 4, 2}));
    EXPECT_EQ(index.lookupLongest(pagesOf(path), 2), (DraftPathMatch{3, 2}));
    // A trim of record 4 (it keeps 2 blocks) leaves it first among what remains of boundaries 1 and 2 only.
    index.eraseBoundaries(4, 2, pagesOf(path).data() + 2, 2);
    EXPECT_EQ(listed(index, path[3], 4), (std::vector<RecordId>{3, 2}));
    EXPECT_EQ(listed(index, path[1], 2), (std::vector<RecordId>{3, 4, 2}));
    index.erase(pairedRecord(3, path, 0));
    EXPECT_EQ(index.lookupLongest(pagesOf(path), 4), (DraftPathMatch{2, 4}));
    EXPECT_EQ(index.lookupLongest(pagesOf(path), 2), (DraftPathMatch{4, 2}));
    EXPECT_EQ(index.entryCount(), 6u);
    index.checkInvariants();
    // An erase naming hashes the record is not under, or boundaries it lacks, changes nothing.
    index.eraseBoundaries(2, 0, pagesOf(chain(9, 4)).data(), 4);
    index.eraseBoundaries(4, 2, pagesOf(path).data() + 2, 2);
    index.eraseBoundaries(77, 0, pagesOf(path).data(), 4);
    EXPECT_EQ(index.entryCount(), 6u);
    index.checkInvariants();
}

TEST(DraftPathIndex, ARecordHasOneEntryPerBoundary) {
    DraftPathIndex index;
    index.insert(pairedRecord(1, chain(1, 3), 0));
    index.eraseBoundaries(1, 0, pagesOf(chain(1, 3)).data(), 2);  // boundaries 1 and 2 go, 3 stays
    // Boundary 3 is still indexed (under chain(1,3)[2]): a path naming another hash there is a duplicate.
    EXPECT_THROW(index.insert(pairedRecord(1, chain(5, 3), 0)), ContractError);
    EXPECT_EQ(index.entryCount(), 1u);
    // Boundaries 1 and 2 are free again: the record may index them under any hashes.
    index.insert(1, pagesOf(chain(5, 2)), 2);
    EXPECT_EQ(index.entryCount(), 3u);
    EXPECT_EQ(index.lookupLongest(pagesOf(chain(5, 2)), 2), (DraftPathMatch{1, 2}));
    EXPECT_EQ(index.lookupLongest(pagesOf(chain(1, 3)), 3), (DraftPathMatch{1, 3}));
    EXPECT_FALSE(index.lookupLongest(pagesOf(chain(1, 2)), 2));
    index.checkInvariants();
}

TEST(DraftPathIndex, RecordSlotsAreReusedThroughTheFreeList) {
    DraftPathIndex index;
    auto path = [](RecordId id) { return test::extend(chain(1, 2), 10 + id, 2); };
    for (RecordId id = 1; id <= 8; ++id) index.insert(pairedRecord(id, path(id), 0));
    size_t const full = index.memoryBytes();
    for (RecordId id = 1; id <= 8; ++id) index.erase(pairedRecord(id, path(id), 0));
    EXPECT_LT(index.memoryBytes(), full);  // the link arrays went back
    index.checkInvariants();
    for (RecordId id = 21; id <= 28; ++id) index.insert(pairedRecord(id, path(id - 20), 0));
    EXPECT_EQ(index.memoryBytes(), full);  // same shape, same bytes: eight slots reused, none added
    EXPECT_EQ(index.lookupLongest(pagesOf(path(1)), 4), (DraftPathMatch{21, 4}));
    EXPECT_EQ(index.lookupLongest(pagesOf(chain(1, 2)), 2), (DraftPathMatch{28, 2}));
    index.checkInvariants();
}

TEST(DraftPathIndex, AnEntryUnderASharedBoundaryCostsEightBytes) {
    DraftPathIndex index;
    index.insert(pairedRecord(1, chain(1, 6), 0));
    index.insert(pairedRecord(2, chain(2, 1), 0));
    size_t const b0 = index.memoryBytes();
    index.insert(pairedRecord(3, chain(1, 3), 0));  // 3 entries under existing boundaries
    size_t const b1 = index.memoryBytes();
    index.insert(pairedRecord(4, chain(1, 6), 0));  // 6 entries under existing boundaries
    size_t const b2 = index.memoryBytes();
    // Each record adds its per-record overhead once and 8 bytes per entry (next and prev); no boundary slot is added.
    EXPECT_EQ((b2 - b1) - (b1 - b0), 3 * 2 * sizeof(uint32_t));
    index.erase(pairedRecord(4, chain(1, 6), 0));
    EXPECT_EQ(index.memoryBytes(), b1);
    index.checkInvariants();
}

// The shape of a multi-turn conversation workload (issue 24 item 4): every turn's record extends the previous
// turn's path, all conversations share a system prompt, and eviction removes the least recent records, which sit at
// the far end of every shared boundary's list (most recent first). Unlinking must read a bounded number of links per
// entry removed, however many records share its boundaries; walking each list to the record's link made this
// quadratic (spec 25 times slower than vanilla under eviction).
TEST(DraftPathIndex, EraseCostPerEntryDoesNotGrowWithTheRecordsSharingItsBoundaries) {
    auto run = [](int conversations, int turns) {
        DraftPathIndex index;
        std::vector<BlockHash> const system = chain(1, 8);
        std::vector<std::vector<BlockHash>> history(static_cast<size_t>(conversations), system);
        std::vector<std::pair<RecordId, std::vector<BlockHash>>> inserted;  // in insertion (LRU) order
        RecordId next = 1;
        for (int t = 0; t < turns; ++t) {
            for (int c = 0; c < conversations; ++c) {
                std::vector<BlockHash>& h = history[static_cast<size_t>(c)];
                h = test::extend(h, 1000 + static_cast<uint64_t>(c), 2);  // the question and the answer
                index.insert(next, pagesOf(h), h.size());
                inserted.emplace_back(next++, h);
            }
        }
        size_t const entries = index.entryCount();
        uint64_t const before = index.eraseLinkVisits();
        // Half the records least recent first (the LRU victims), one trimmed instead, then the rest most recent first.
        size_t const half = inserted.size() / 2;
        for (size_t i = 0; i < half; ++i) index.erase(inserted[i].first, pagesOf(inserted[i].second));
        std::vector<PageId> const trimmed = pagesOf(inserted[half].second);
        index.eraseBoundaries(inserted[half].first, 3, trimmed.data() + 3, trimmed.size() - 3);
        for (size_t i = inserted.size(); i-- > half;) {
            std::vector<PageId> const pages = pagesOf(inserted[i].second);
            index.erase(inserted[i].first, i == half ? std::vector<PageId>(pages.begin(), pages.begin() + 3) : pages);
        }
        EXPECT_EQ(index.entryCount(), 0u);
        index.checkInvariants();
        return static_cast<double>(index.eraseLinkVisits() - before) / static_cast<double>(entries);
    };
    double const small = run(2, 4);
    double const large = run(24, 24);  // 576 records; 576 entries under each system-prompt boundary
    // Unlinking reads the entry's own link and at most its two neighbours' (or the boundary's head).
    EXPECT_LE(small, 3.0);
    EXPECT_LE(large, 3.0);
}

TEST(DraftPathIndex, APageAtSeveralDepthsHasOneBoundaryPerDepth) {
    // Pages named directly: a fabricated path repeats page 5 at depths 1 and 3; another record has it at depth 2.
    DraftPathIndex index;
    index.insert(1, std::vector<PageId>{5, 6, 5}, 3);  // (5,1) the page's primary, (5,3) overflow
    index.insert(2, std::vector<PageId>{7, 5}, 2);     // (5,2) overflow
    index.checkInvariants();
    EXPECT_EQ(index.entryCount(), 5u);
    std::vector<std::string> all = entries(index);  // the primaries by page, then the overflow map in its order
    std::sort(all.begin() + 3, all.end());
    EXPECT_EQ(all, (std::vector<std::string>{"5/1->1", "6/2->1", "7/1->2", "5/2->2", "5/3->1"}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{5, 6, 5}, 3), (DraftPathMatch{1, 3}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{9, 9, 5}, 3), (DraftPathMatch{1, 3}));  // boundary 3 alone
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{7, 5}, 2), (DraftPathMatch{2, 2}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{5, 5, 5}, 3), (DraftPathMatch{1, 3}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{5, 5}, 2), (DraftPathMatch{2, 2}));
    EXPECT_FALSE(index.lookupLongest(std::vector<PageId>{6}, 1));  // page 6 only at depth 2
    EXPECT_TRUE(index.contains(5, {1, 3}));
    EXPECT_FALSE(index.contains(5, {2, 1}));

    // Record 1 goes: page 5's primary is vacated while its depth-2 boundary stays in the overflow map.
    index.erase(1, std::vector<PageId>{5, 6, 5});
    index.checkInvariants();
    EXPECT_EQ(entries(index), (std::vector<std::string>{"7/1->2", "5/2->2"}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{7, 5}, 2), (DraftPathMatch{2, 2}));
    EXPECT_FALSE(index.lookupLongest(std::vector<PageId>{5}, 1));
    // Record 3 has page 5 at depths 1 and 2: depth 1 retakes the free primary, depth 2 joins the overflow list.
    index.insert(3, std::vector<PageId>{5, 5}, 2);
    index.checkInvariants();
    EXPECT_EQ(entries(index), (std::vector<std::string>{"5/1->3", "7/1->2", "5/2->3", "5/2->2"}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{5, 5}, 2), (DraftPathMatch{3, 2}));
    // A trim of record 3 to one block unlinks it from the overflow list only.
    PageId const five = 5;
    index.eraseBoundaries(3, 1, &five, 1);
    index.checkInvariants();
    EXPECT_EQ(entries(index), (std::vector<std::string>{"5/1->3", "7/1->2", "5/2->2"}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{5, 5}, 2), (DraftPathMatch{2, 2}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{5, 5}, 1), (DraftPathMatch{3, 1}));
    // The last entry of an overflow boundary drops it; a duplicate boundary is refused wherever it is held.
    EXPECT_THROW(index.insert(2, std::vector<PageId>{7, 5}, 2), ContractError);
    index.erase(2, std::vector<PageId>{7, 5});
    index.checkInvariants();
    EXPECT_EQ(entries(index), (std::vector<std::string>{"5/1->3"}));
    index.erase(3, std::vector<PageId>{5});
    EXPECT_EQ(index.entryCount(), 0u);
    EXPECT_TRUE(entries(index).empty());
    index.checkInvariants();
}

TEST(DraftPathIndex, TheHeadArrayIsSizedWhenTheFirstRecordIsIndexed) {
    DraftPathIndex sized(1000), unsized;
    EXPECT_EQ(sized.memoryBytes(), unsized.memoryBytes());  // an index that never holds a record costs no array
    sized.insert(1, std::vector<PageId>{3}, 1);
    unsized.insert(1, std::vector<PageId>{3}, 1);
    EXPECT_GE(sized.memoryBytes(), unsized.memoryBytes() + 996 * 8);  // 1000 heads against 4
    // A page beyond the capacity still indexes: the array grows.
    sized.insert(2, std::vector<PageId>{3, 5000}, 2);
    EXPECT_EQ(sized.lookupLongest(std::vector<PageId>{3, 5000}, 2), (DraftPathMatch{2, 2}));
    EXPECT_GE(sized.memoryBytes(), size_t{5001} * 8);
    sized.checkInvariants();
    // A negative page is refused with nothing changed.
    size_t const bytes = sized.memoryBytes();
    EXPECT_THROW(sized.insert(3, std::vector<PageId>{3, -2}, 2), ContractError);
    EXPECT_EQ(sized.entryCount(), 3u);
    EXPECT_EQ(sized.memoryBytes(), bytes);
    EXPECT_FALSE(sized.contains(3, {3, 1}));
    sized.checkInvariants();
}

TEST(DraftPathIndex, AnUnresolvedPageInALookupHasNoBoundary) {
    DraftPathIndex index;
    index.insert(1, std::vector<PageId>{4, 6, 8}, 3);
    // A query block without a canonical page (negative) matches nothing there; shorter boundaries still do.
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{4, 6, kUnusedPageEntry}, 3), (DraftPathMatch{1, 2}));
    EXPECT_EQ(index.lookupLongest(std::vector<PageId>{kUnusedPageEntry, 6, 8}, 3), (DraftPathMatch{1, 3}));
    EXPECT_FALSE(index.lookupLongest(std::vector<PageId>{kUnusedPageEntry}, 1));
    EXPECT_FALSE(index.contains(kUnusedPageEntry, {1, 1}));
    EXPECT_FALSE(index.lookupLongest(std::vector<PageId>{1 << 30}, 1));  // beyond the array: no boundary
}

TEST(DraftPathIndex, AFailedAllocationUndoesAPartialInsert) {
#ifdef CTXC_UNDER_ASAN
    GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix";
#else
    // Record 4 holds 2^20 pages, each its page's primary boundary; record 3 holds the same pages one block deeper,
    // so all its boundaries but the first go to the overflow map, whose growth from a 16 MiB to a 32 MiB table
    // cannot fit in 48 MiB of headroom (the head array, record 4's links and the smaller tables fit). Exit 0 only
    // when insert threw bad_alloc midway and every entry is as it was before.
    constexpr size_t kBig = size_t{1} << 20;
    std::vector<PageId> big, deeper{4000};
    for (size_t i = 0; i < kBig; ++i) big.push_back(4096 + static_cast<PageId>(i));
    deeper.insert(deeper.end(), big.begin(), big.end());
    std::vector<PageId> const small = pagesOf(chain(1, 3)), shared = pagesOf(chain(1, 2));
    std::vector<PageId> const branch = pagesOf(test::extend(chain(1, 2), 3, 2));
    std::vector<PageId> const unrelated = pagesOf(chain(9, 1));
    // What forEach lists, in order, as a count and a position-weighted checksum (a million strings would not fit).
    auto digest = [](DraftPathIndex const& index) {
        std::pair<uint64_t, uint64_t> d{0, 0};
        index.forEach([&](PageId page, DraftPathMatch const& m) {
            ++d.first;
            d.second = d.second * 1000003u + static_cast<uint64_t>(page) * 65537u +
                       static_cast<uint64_t>(m.pathBlockCount) * 257u + m.record;
        });
        return d;
    };
    test::expectCompletesWithinAddressSpace(size_t{48} << 20, [&] {
        DraftPathIndex index;
        index.insert(1, small, 3);
        index.insert(2, branch, 4);
        index.eraseBoundaries(2, 3, unrelated.data(), 1);  // a no-op naming a page it is not under
        index.insert(4, big, big.size());
        std::pair<uint64_t, uint64_t> const before = digest(index);
        bool threw = false;
        try {
            index.insert(2, deeper, deeper.size());  // record 2 already has boundaries 1..4 -> duplicate, not this
        } catch (ContractError const&) {
        }
        try {
            index.insert(3, deeper, deeper.size());
        } catch (std::bad_alloc const&) {
            threw = true;
        }
        index.checkInvariants();
        std::vector<RecordId> sharedList;
        index.forEach([&](PageId page, DraftPathMatch const& m) {
            if (page == shared[0] && m.pathBlockCount == 1) sharedList.push_back(m.record);
        });
        if (!threw || digest(index) != before || sharedList != std::vector<RecordId>{2, 1} ||
            index.entryCount() != 7 + kBig || index.contains(deeper[0], {3, 1}) ||
            index.contains(deeper[kBig], {3, static_cast<int32_t>(kBig + 1)}) ||
            !(index.lookupLongest(big, static_cast<int32_t>(kBig)) == DraftPathMatch{4, static_cast<int32_t>(kBig)}) ||
            !(index.lookupLongest(small, 3) == DraftPathMatch{1, 3}))
            throw std::runtime_error("not undone");
        index.insert(3, small, 3);  // the record slot went back: record 3 indexes afresh
        index.checkInvariants();
    });
#endif
}

// A plain model of the contract: every entry with its insertion sequence number.
struct ModelEntry {
    BlockHash hash;
    int32_t n;
    RecordId record;
    uint64_t seq;
};

TEST(DraftPathIndex, MatchesAPlainModelUnderRandomOperations) {
    std::mt19937_64 rng(1234);
    DraftPathIndex index;
    std::vector<ModelEntry> model;
    std::map<RecordId, std::vector<BlockHash>> paths;  // records with entries, their full paths
    uint64_t seq = 0;
    auto randomPath = [&] {  // three trunks, diverging at random: shared boundaries, repeated hashes
        std::vector<BlockHash> p = chain(rng() % 3, 1 + static_cast<int>(rng() % 5));
        if (rng() % 2) p = test::extend(p, 10 + rng() % 4, 1 + static_cast<int>(rng() % 3));
        if (rng() % 8 == 0) p.push_back(p.front());
        return p;
    };
    auto modelCount = [&] { return model.size(); };
    for (int step = 0; step < 3000; ++step) {
        uint64_t const op = rng() % 10;
        RecordId const id = rng() % 16;  // 0 (kNoRecord) included: the index gives it no meaning
        if (op < 4 && !paths.count(id)) {
            std::vector<BlockHash> const p = randomPath();
            index.insert(id, pagesOf(p), p.size());
            ++seq;
            for (size_t i = 0; i < p.size(); ++i) model.push_back({p[i], static_cast<int32_t>(i + 1), id, seq});
            paths[id] = p;
        } else if (op < 5 && paths.count(id)) {
            EXPECT_THROW(index.insert(id, pagesOf(paths[id]), paths[id].size()), ContractError);
        } else if (op < 7 && paths.count(id)) {
            index.erase(id, pagesOf(paths[id]));
            model.erase(std::remove_if(model.begin(), model.end(), [&](ModelEntry const& e) { return e.record == id; }),
                        model.end());
            paths.erase(id);
        } else if (op < 8 && paths.count(id)) {  // trim: keep `kept` blocks
            std::vector<BlockHash>& p = paths[id];
            int32_t const kept = static_cast<int32_t>(rng() % p.size());
            index.eraseBoundaries(id, kept, pagesOf(p).data() + kept, p.size() - static_cast<size_t>(kept));
            model.erase(std::remove_if(model.begin(), model.end(),
                                       [&](ModelEntry const& e) { return e.record == id && e.n > kept; }),
                        model.end());
            p.resize(static_cast<size_t>(kept));
            if (p.empty()) paths.erase(id);
        }
        ASSERT_EQ(index.entryCount(), modelCount());
        // Queries: every record's path and a random one, at every bound.
        std::vector<BlockHash> query = rng() % 2 || paths.empty()
                                           ? randomPath()
                                           : std::next(paths.begin(), static_cast<long>(rng() % paths.size()))->second;
        for (int32_t bound = 0; bound <= static_cast<int32_t>(query.size()); ++bound) {
            std::optional<DraftPathMatch> expected;
            for (int32_t n = bound; n >= 1 && !expected; --n) {
                uint64_t best = 0;
                for (ModelEntry const& e : model)
                    if (e.n == n && e.hash == query[static_cast<size_t>(n - 1)] && e.seq > best) {
                        best = e.seq;
                        expected = DraftPathMatch{e.record, n};
                    }
            }
            ASSERT_EQ(index.lookupLongest(pagesOf(query), bound), expected) << "step " << step << " bound " << bound;
        }
        for (int32_t n = 1; n <= static_cast<int32_t>(query.size()); ++n) {
            RecordId const r = rng() % 17;
            bool const present = std::any_of(model.begin(), model.end(), [&](ModelEntry const& e) {
                return e.record == r && e.n == n && e.hash == query[static_cast<size_t>(n - 1)];
            });
            ASSERT_EQ(index.contains(pageOf(query[static_cast<size_t>(n - 1)]), {r, n}), present);
        }
        if (step % 50 == 0) {
            std::vector<std::string> expectedEntries;  // forEach: per boundary, most recent first
            std::vector<ModelEntry> sorted = model;
            std::sort(sorted.begin(), sorted.end(), [](ModelEntry const& a, ModelEntry const& b) {
                return std::make_tuple(a.hash.hi, a.hash.lo, a.n, ~a.seq) <
                       std::make_tuple(b.hash.hi, b.hash.lo, b.n, ~b.seq);
            });
            for (ModelEntry const& e : sorted)
                expectedEntries.push_back(std::to_string(pageOf(e.hash)) + "/" + std::to_string(e.n) + "->" +
                                          std::to_string(e.record));
            std::vector<std::string> actual = entries(index);
            std::vector<std::string> actualGrouped;  // regroup forEach's output by boundary, keeping list order
            std::map<std::string, std::vector<std::string>> byBoundary;
            for (std::string const& e : actual) byBoundary[e.substr(0, e.find("->"))].push_back(e);
            for (ModelEntry const& e : sorted) {
                std::string const key = std::to_string(pageOf(e.hash)) + "/" + std::to_string(e.n);
                if (byBoundary.count(key)) {
                    for (std::string const& x : byBoundary[key]) actualGrouped.push_back(x);
                    byBoundary.erase(key);
                }
            }
            ASSERT_EQ(actualGrouped, expectedEntries) << "step " << step;
            ASSERT_EQ(actual.size(), expectedEntries.size());
        }
        index.checkInvariants();
    }
    for (auto const& [id, p] : paths) index.erase(id, pagesOf(p));
    EXPECT_EQ(index.entryCount(), 0u);
    index.checkInvariants();
}

}  // namespace
}  // namespace ctxcache
