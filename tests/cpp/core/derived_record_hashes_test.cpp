// Records keep logical hashes only where they cannot be derived: a record with a base path reads block i's hash
// from the base index's page -> hash entry of its canonical page. These tests prove that what is read back equals
// what was published, for every record kind, across shared prefixes, evictions and trims, and that the store's
// invariant check catches a derivable hash the index no longer agrees with.
#include <gtest/gtest.h>

#include "ctxcache/base_block_index.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::chain;
using test::describe;
using test::H;
using test::Hs;
using test::vanillaRecord;

constexpr int32_t kPage = 4;

CacheRecord pureRecurrentRecord(BlockHash digest, int32_t length, std::vector<BlockHash> hashes, int32_t slot) {
    CacheRecord r;
    r.key = CacheRecordKey{digest, static_cast<int32_t>(hashes.size())};
    r.logicalBlockHashes = std::move(hashes);
    r.recurrentSnapshotSlot = slot;
    r.exactCheckpointLength = length;
    return r;
}

// What the store reads back for `id`, block by block and materialized, equals `published`; a record keeps its
// hashes exactly when it has no base path.
void expectPublishedHashes(ContextCacheManager const& m, RecordId id, std::vector<BlockHash> const& published) {
    SCOPED_TRACE("record " + std::to_string(id));
    ASSERT_TRUE(m.records().contains(id));
    StoredRecord const& stored = m.records().get(id);
    ASSERT_EQ(stored.key.fullBlockCount, static_cast<int32_t>(published.size()));
    EXPECT_EQ(stored.keptBlockHashes.empty(), !stored.basePagePath.empty() || published.empty());
    for (size_t i = 0; i < published.size(); ++i) EXPECT_EQ(m.records().logicalHash(stored, i), published[i]) << i;
    EXPECT_EQ(m.records().materialize(id).logicalBlockHashes, published);
    EXPECT_THROW(m.records().logicalHash(stored, published.size()), ContractError);
    // The bulk read (the eviction's and the trim's) appends exactly the same hashes for every range.
    for (size_t from = 0; from <= published.size(); ++from) {
        std::vector<BlockHash> bulk{H(77)};  // appended after what is there
        m.records().appendLogicalHashes(stored, from, published.size(), bulk);
        ASSERT_EQ(bulk.size(), 1 + published.size() - from) << from;
        EXPECT_EQ(bulk.front(), H(77));
        for (size_t i = from; i < published.size(); ++i)
            EXPECT_EQ(bulk[1 + i - from], published[i]) << from << " " << i;
    }
    std::vector<BlockHash> refused;
    EXPECT_THROW(m.records().appendLogicalHashes(stored, 0, published.size() + 1, refused), ContractError);
    if (!published.empty())
        EXPECT_THROW(m.records().appendLogicalHashes(stored, published.size(), published.size() - 1, refused),
                     ContractError);
    EXPECT_TRUE(refused.empty());
}

std::vector<BlockHash> firstBlocks(std::vector<BlockHash> const& hashes, size_t n) {
    return {hashes.begin(), hashes.begin() + static_cast<std::ptrdiff_t>(n)};
}

// ---- the store over a base index it does not own --------------------------------------------------------------

TEST(DerivedRecordHashes, StoreDerivesHashesFromBasePagesAndKeepsThoseOfPureRecurrentCheckpoints) {
    BaseBlockIndex index(8);
    for (PageId page : {5, 6, 7}) index.insert(H(static_cast<uint64_t>(page) - 4), page);  // H(1..3) -> pages 5..7
    CacheRecordStore store(8, &index);
    CacheRecordStore plain(8);  // no hash source: keeps everything
    RecordId const v = store.insert(vanillaRecord(Hs({1, 2, 3}), {5, 6, 7})).id;
    plain.insert(vanillaRecord(Hs({1, 2, 3}), {5, 6, 7}));
    RecordId const pr = store.insert(pureRecurrentRecord(H(90), 9, Hs({1, 2}), 0)).id;

    EXPECT_TRUE(store.get(v).keptBlockHashes.empty());
    EXPECT_TRUE(store.derivesHashes(store.get(v)));
    EXPECT_EQ(store.materialize(v).logicalBlockHashes, Hs({1, 2, 3}));
    EXPECT_EQ(store.logicalHash(store.get(v), 1), H(2));
    EXPECT_EQ(store.get(pr).keptBlockHashes, Hs({1, 2}));
    EXPECT_FALSE(store.derivesHashes(store.get(pr)));
    EXPECT_EQ(store.materialize(pr).logicalBlockHashes, Hs({1, 2}));
    EXPECT_EQ(plain.get(1).keptBlockHashes, Hs({1, 2, 3}));
    // The pure-recurrent checkpoint is anchored at its last full block, read from its kept hashes.
    EXPECT_EQ(store.hybridCandidateLengths(10, Hs({1, 2, 4})), (std::vector<int32_t>{9}));
    EXPECT_NO_THROW(store.checkInvariants());

    // The vanilla record's three hashes (16 bytes each) are the whole difference from the plain store, less the
    // pure-recurrent record the plain store does not have.
    CacheRecordStore plainWithBoth(8);
    plainWithBoth.insert(vanillaRecord(Hs({1, 2, 3}), {5, 6, 7}));
    plainWithBoth.insert(pureRecurrentRecord(H(90), 9, Hs({1, 2}), 0));
    EXPECT_EQ(plainWithBoth.memoryBytes() - store.memoryBytes(), 3 * sizeof(BlockHash));
}

TEST(DerivedRecordHashes, StoreInsertRefusesARecordWhosePagesAreNotCanonicalForItsHashes) {
    BaseBlockIndex index(8);
    index.insert(H(1), 0);
    index.insert(H(2), 1);
    CacheRecordStore store(8, &index);
    EXPECT_THROW(store.insert(vanillaRecord(Hs({1, 3}), {0, 1})), ContractError);  // page 1 holds H(2)
    EXPECT_THROW(store.insert(vanillaRecord(Hs({1, 2, 3}), {0, 1, 2})), ContractError);  // page 2 is not mapped
    EXPECT_EQ(store.size(), 0u);
    EXPECT_EQ(store.nextId(), 1u);
    EXPECT_TRUE(store.insert(vanillaRecord(Hs({1, 2}), {0, 1})).inserted);
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(DerivedRecordHashes, StoreInvariantCheckCatchesADerivedHashTheIndexNoLongerAgreesWith) {
    BaseBlockIndex index(8);
    for (PageId page : {0, 1, 2}) index.insert(H(static_cast<uint64_t>(page) + 1), page);
    CacheRecordStore store(8, &index);
    RecordId const id = store.insert(vanillaRecord(Hs({1, 2, 3}), {0, 1, 2})).id;
    ASSERT_NO_THROW(store.checkInvariants());

    index.erasePage(1);  // a page the record holds loses its mapping
    EXPECT_THROW(store.checkInvariants(), InvariantError);
    EXPECT_THROW(store.logicalHash(store.get(id), 1), InvariantError);
    EXPECT_THROW(store.materialize(id), InvariantError);
    index.insert(H(2), 1);
    EXPECT_NO_THROW(store.checkInvariants());

    index.erasePage(2);  // the last page now maps another hash: the key no longer ends at the derived hash
    index.insert(H(42), 2);
    EXPECT_THROW(store.checkInvariants(), InvariantError);
}

TEST(DerivedRecordHashes, StoreInvariantCheckCatchesAnInnerPageMappedToAnotherHash) {
    // Issue 24: a record holding a page for a hash the index no longer maps to it, its key and last block still
    // consistent (the state the model-based test found). The derived hashes alone cannot tell; the digest of the
    // published hashes can.
    BaseBlockIndex index(8);
    for (PageId page : {0, 1, 2}) index.insert(H(static_cast<uint64_t>(page) + 1), page);
    CacheRecordStore store(8, &index);
    RecordId const id = store.insert(vanillaRecord(Hs({1, 2, 3}), {0, 1, 2})).id;
    EXPECT_EQ(store.get(id).publishedHashDigest, CacheRecordStore::hashDigest(Hs({1, 2, 3})));
    ASSERT_NO_THROW(store.checkInvariants());
    for (PageId const page : {0, 1}) {
        SCOPED_TRACE("page " + std::to_string(page));
        index.erasePage(page);
        index.insert(H(40 + static_cast<uint64_t>(page)), page);  // mapped again, to another hash
        EXPECT_THROW(store.checkInvariants(), InvariantError);
        index.erasePage(page);
        index.insert(H(static_cast<uint64_t>(page) + 1), page);
        EXPECT_NO_THROW(store.checkInvariants());
    }
    // Swapping two blocks' hashes keeps the set of hashes: the digest counts positions.
    index.erasePage(0);
    index.erasePage(1);
    index.insert(H(2), 0);
    index.insert(H(1), 1);
    EXPECT_THROW(store.checkInvariants(), InvariantError);
}

TEST(DerivedRecordHashes, StoreTrimKeepsTheDigestOfTheKeptBlocks) {
    BaseBlockIndex index(8);
    for (PageId page : {0, 1, 2, 3}) index.insert(H(static_cast<uint64_t>(page) + 1), page);
    CacheRecordStore store(8, &index);
    RecordId const id = store.insert(vanillaRecord(Hs({1, 2, 3, 4}), {0, 1, 2, 3})).id;
    store.trimTail(id, 3);
    EXPECT_EQ(store.get(id).publishedHashDigest, CacheRecordStore::hashDigest(Hs({1, 2, 3})));
    store.trimTail(id, 1);
    EXPECT_EQ(store.get(id).publishedHashDigest, CacheRecordStore::hashDigest(Hs({1})));
    EXPECT_NO_THROW(store.checkInvariants());
    CacheRecordStore plain(8);  // kept hashes: the same digest
    RecordId const kept = plain.insert(vanillaRecord(Hs({1, 2, 3, 4}), {0, 1, 2, 3})).id;
    plain.trimTail(kept, 2);
    EXPECT_EQ(plain.get(kept).publishedHashDigest, CacheRecordStore::hashDigest(Hs({1, 2})));
    EXPECT_NO_THROW(plain.checkInvariants());
}

TEST(DerivedRecordHashes, StoreTrimDerivesTheShorterKeyFromThePages) {
    BaseBlockIndex index(8);
    for (PageId page : {0, 1, 2, 3}) index.insert(H(static_cast<uint64_t>(page) + 1), page);
    CacheRecordStore store(8, &index);
    RecordId const id = store.insert(vanillaRecord(Hs({1, 2, 3, 4}), {0, 1, 2, 3})).id;
    CacheRecordStore::TrimmedTail const tail = store.trimTail(id, 2);
    EXPECT_EQ(tail.firstBlock, 2);
    EXPECT_EQ(tail.basePages, (std::vector<PageId>{2, 3}));
    EXPECT_EQ(store.get(id).key, (CacheRecordKey{H(2), 2}));
    EXPECT_EQ(store.materialize(id).logicalBlockHashes, Hs({1, 2}));
    EXPECT_TRUE(store.get(id).keptBlockHashes.empty());
    EXPECT_NO_THROW(store.checkInvariants());
}

// ---- the manager: every record kind -----------------------------------------------------------------------------

struct Published {
    RecordId record = kNoRecord;
    std::vector<BlockHash> hashes;  // the full blocks the record was published with
};

// A prompt of `tokens` acquired (EAGLE-paired when `paired`), published and released.
Published publishPrompt(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t tokens, bool paired) {
    AcquireResult a = paired ? m.acquireSpec(hashes, tokens) : m.acquireVanilla(hashes, tokens);
    EXPECT_TRUE(a.lease);
    PublishResult const r = m.publish(*a.lease, {hashes, tokens});
    a.lease->release();
    return {r.record.value_or(kNoRecord), firstBlocks(hashes, static_cast<size_t>(tokens / kPage))};
}

Published vanilla(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t tokens) {
    return publishPrompt(m, hashes, tokens, false);
}

Published spec(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t tokens) {
    return publishPrompt(m, hashes, tokens, true);
}

// A hybrid checkpoint at `length` (with or without attention), published by a cold lease.
Published hybrid(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t length, bool attention,
                 BlockHash digest) {
    int32_t const tokens = length + 1;
    AcquireResult a = m.acquireHybrid({}, firstBlocks(hashes, static_cast<size_t>(tokens / kPage)), tokens, attention,
                                      ContextCacheLookupPolicy::kBypass);
    EXPECT_TRUE(a.lease);
    bool const partial = attention && length % kPage != 0;
    std::optional<HybridSnapshotReservation> slots = m.reserveHybridSnapshots(*a.lease, partial);
    EXPECT_TRUE(slots);
    std::vector<BlockHash> const full = firstBlocks(hashes, static_cast<size_t>(length / kPage));
    PublishResult const r = m.publishHybrid(*a.lease, {full, {digest, length}, *slots});
    m.retireHybridSnapshotReservation(*a.lease, *slots);
    a.lease->release();
    return {r.record.value_or(kNoRecord), full};
}

Published hybridMtp(ContextCacheManager& m, std::vector<BlockHash> const& hashes, int32_t length, BlockHash digest) {
    int32_t const tokens = length + 1;
    AcquireResult a = m.acquireHybridMtp({}, firstBlocks(hashes, static_cast<size_t>(tokens / kPage)), tokens,
                                         ContextCacheLookupPolicy::kBypass);
    EXPECT_TRUE(a.lease);
    std::optional<HybridSnapshotReservation> slots = m.reserveHybridSnapshots(*a.lease, true);
    EXPECT_TRUE(slots);
    std::vector<BlockHash> const full = firstBlocks(hashes, static_cast<size_t>((length - 1) / kPage));
    PublishResult const r = m.publishHybridMtp(*a.lease, {full, {digest, length}, *slots});
    m.retireHybridSnapshotReservation(*a.lease, *slots);
    a.lease->release();
    return {r.record.value_or(kNoRecord), full};
}

BlockHash digest(uint64_t lane, int32_t length) { return BlockHash{0xD16E57ull + lane, static_cast<uint64_t>(length)}; }

TEST(DerivedRecordHashes, EveryRecordKindReadsBackItsPublishedHashes) {
    ContextCacheManager m(kPage, ResourceDemand{64, 32, 8, 8}, 32);
    // Multi-turn vanilla: the second turn's record shares the first turn's three canonical pages.
    Published const turn1 = vanilla(m, chain(1, 3), 12);
    Published const turn2 = vanilla(m, chain(1, 5), 22);
    Published const eagle = spec(m, chain(2, 4), 17);
    Published const withAttention = hybrid(m, chain(3, 3), 10, true, digest(3, 10));
    Published const pageAligned = hybrid(m, chain(4, 3), 8, true, digest(4, 8));
    Published const pureRecurrent = hybrid(m, chain(5, 3), 9, false, digest(5, 9));
    Published const shortRecurrent = hybrid(m, chain(6, 1), 3, false, digest(6, 3));  // no full block at all
    Published const mtp = hybridMtp(m, chain(7, 3), 10, digest(7, 10));
    ASSERT_NO_THROW(m.checkInvariants());

    EXPECT_EQ(m.records().get(turn2.record).basePagePath[2], m.records().get(turn1.record).basePagePath[2]);
    for (Published const* p :
         {&turn1, &turn2, &eagle, &withAttention, &pageAligned, &pureRecurrent, &shortRecurrent, &mtp})
        expectPublishedHashes(m, p->record, p->hashes);
    EXPECT_EQ(m.records().get(pureRecurrent.record).keptBlockHashes, pureRecurrent.hashes);
    EXPECT_TRUE(m.records().get(mtp.record).keptBlockHashes.empty());
    // The EAGLE record's boundaries are indexed under its canonical base pages, the pages of its derived hashes.
    std::vector<PageId> const eaglePages = m.records().get(eagle.record).basePagePath;
    ASSERT_EQ(eaglePages.size(), eagle.hashes.size());
    for (size_t i = 0; i < eagle.hashes.size(); ++i) {
        EXPECT_EQ(m.baseIndex().lookup(eagle.hashes[i]), eaglePages[i]);
        EXPECT_TRUE(m.draftIndex().contains(eaglePages[i], {eagle.record, static_cast<int32_t>(i + 1)}));
    }
}

TEST(DerivedRecordHashes, AnEvictionLeavesTheHashesOfRecordsThatSharedItsPages) {
    ContextCacheManager m(kPage, ResourceDemand{8, 8, 0, 0}, 8);
    // turn2 hits turn1 and publishes a shorter prefix of its chain: its three canonical pages are turn1's. (The
    // other way round, the longer record would dominate the shorter one it hit and supersede it.)
    Published const turn1 = spec(m, chain(1, 5), 21);
    Published const turn2 = spec(m, chain(1, 3), 12);
    ASSERT_TRUE(m.records().contains(turn1.record));
    m.evictRecord(turn1.record);
    ASSERT_NO_THROW(m.checkInvariants());
    expectPublishedHashes(m, turn2.record, turn2.hashes);
    m.evictRecord(turn2.record);
    // The freed pages go to another chain: its record derives its own hashes from them.
    Published const other = vanilla(m, chain(9, 6), 24);
    ASSERT_NO_THROW(m.checkInvariants());
    expectPublishedHashes(m, other.record, other.hashes);
    EXPECT_EQ(m.draftIndex().entryCount(), 0u);
}

TEST(DerivedRecordHashes, CapacityEvictionOfPairedRecordsErasesTheirDerivedBoundaries) {
    ContextCacheManager m(kPage, ResourceDemand{6, 6, 0, 0}, 8);
    Published const first = spec(m, chain(1, 3), 12);
    std::vector<PageId> const firstPages = m.records().get(first.record).basePagePath;
    ASSERT_EQ(m.draftIndex().entryCount(), 3u);
    Published const second = spec(m, chain(2, 4), 16);  // needs 4 pages: the first record goes
    EXPECT_FALSE(m.records().contains(first.record));
    EXPECT_EQ(m.draftIndex().entryCount(), 4u);
    for (size_t i = 0; i < first.hashes.size(); ++i)
        EXPECT_FALSE(m.draftIndex().contains(firstPages[i], {first.record, static_cast<int32_t>(i + 1)}));
    expectPublishedHashes(m, second.record, second.hashes);
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(DerivedRecordHashes, TrimmedRecordsReadBackTheirKeptPrefix) {
    ContextCacheManager m(kPage, ResourceDemand{8, 8, 0, 0}, 8, EvictionPolicy::kRecordLruTrim);
    Published const base = vanilla(m, chain(1, 4), 16);  // pages 0..3
    Published const paired = spec(m, chain(2, 4), 16);   // base 4..7, draft 0..3
    // No base page is free: two of them come off the LRU (vanilla) record's tail.
    AcquireResult other = m.acquireSpec(chain(3, 2), 8);
    ASSERT_TRUE(other.lease);
    ASSERT_NO_THROW(m.checkInvariants());
    ASSERT_TRUE(m.records().contains(base.record));
    EXPECT_EQ(m.metrics().trimmedRecords, 1u);
    expectPublishedHashes(m, base.record, firstBlocks(base.hashes, 2));
    expectPublishedHashes(m, paired.record, paired.hashes);
    // Three of each (2 draft pages free): the trimmed vanilla record goes whole, then the paired record gives up
    // its last block in both pools.
    AcquireResult more = m.acquireSpec(chain(4, 3), 12);
    ASSERT_TRUE(more.lease);
    ASSERT_NO_THROW(m.checkInvariants());
    EXPECT_FALSE(m.records().contains(base.record));
    ASSERT_TRUE(m.records().contains(paired.record));
    EXPECT_EQ(m.metrics().trimmedRecords, 2u);
    expectPublishedHashes(m, paired.record, firstBlocks(paired.hashes, 3));
    EXPECT_EQ(m.draftIndex().entryCount(), 3u);
    other.lease->release();
    more.lease->release();
    EXPECT_NO_THROW(m.checkInvariants());
}

TEST(DerivedRecordHashes, DescribeShowsTheSameStateAsBeforeACheckOnlyCall) {
    // Reading hashes (derivation, materialization, the invariant check) changes nothing.
    ContextCacheManager m(kPage, ResourceDemand{16, 16, 4, 4}, 8);
    Published const v = vanilla(m, chain(1, 3), 13);
    Published const h = hybrid(m, chain(2, 2), 9, true, digest(2, 9));
    std::string const before = describe(m);
    m.checkInvariants();
    (void)m.records().materialize(v.record);
    (void)m.records().logicalHash(m.records().get(h.record), 1);
    EXPECT_EQ(describe(m), before);
}

}  // namespace
}  // namespace ctxcache
