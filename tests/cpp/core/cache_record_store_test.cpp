// CacheRecordStore: records, their exact and hybrid key indexes, and the record LRU (reference c.4).
#include "ctxcache/cache_record_store.h"

#include <gtest/gtest.h>

#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::basePage;
using test::H;
using test::Hs;
using test::vanillaRecord;

CacheRecord hybridRecord(BlockHash digest, int32_t exactLength, std::vector<BlockHash> hashes,
                         std::vector<PageId> pages, int32_t recurrent, std::optional<int32_t> partial) {
    CacheRecord r;
    r.key = CacheRecordKey{digest, static_cast<int32_t>(hashes.size())};
    r.logicalBlockHashes = std::move(hashes);
    r.basePagePath = std::move(pages);
    r.recurrentSnapshotSlot = recurrent;
    r.partialKvSnapshotSlot = partial;
    r.exactCheckpointLength = exactLength;
    return r;
}

TEST(CacheRecordStore, RecordOwnsItsCompleteBasePath) {
    CacheRecordStore store(8);
    RecordInsertResult const r = store.insert(vanillaRecord(Hs({1, 2, 3}), {5, 6, 7}));
    EXPECT_TRUE(r.inserted);
    EXPECT_EQ(r.id, 1u);
    StoredRecord const& stored = store.get(r.id);
    EXPECT_EQ(stored.id, 1u);
    EXPECT_EQ(stored.basePagePath, (std::vector<PageId>{5, 6, 7}));
    EXPECT_EQ(stored.keptBlockHashes, Hs({1, 2, 3}));  // no hash source: the store keeps every hash
    EXPECT_EQ(store.materialize(r.id).logicalBlockHashes, Hs({1, 2, 3}));
    EXPECT_EQ(stored.key, (CacheRecordKey{H(3), 3}));
    EXPECT_EQ(stored.resources(), (std::vector<ResourceId>{basePage(5), basePage(6), basePage(7)}));
    EXPECT_FALSE(stored.hybridKey().has_value());
    EXPECT_EQ(store.find({H(3), 3}), std::optional<RecordId>(1));
    EXPECT_FALSE(store.find({H(3), 2}).has_value());  // the key is the exact endpoint: hash AND block count
    // A path shorter than the logical blocks is not a record.
    EXPECT_THROW(store.insert(vanillaRecord(Hs({1, 2}), {5})), ContractError);
    EXPECT_EQ(store.size(), 1u);
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, ExactDuplicateReturnsExistingRecord) {
    CacheRecordStore store(8);
    store.insert(vanillaRecord(Hs({1, 2}), {0, 1}));
    store.insert(vanillaRecord(Hs({3}), {2}));
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{1, 2}));
    RecordInsertResult const dup = store.insert(vanillaRecord(Hs({1, 2}), {4, 5}));
    EXPECT_FALSE(dup.inserted);
    EXPECT_EQ(dup.id, 1u);
    EXPECT_EQ(store.get(1).basePagePath, (std::vector<PageId>{0, 1}));  // the existing record is kept as it was
    EXPECT_EQ(store.size(), 2u);
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{2, 1}));  // and promoted
    EXPECT_EQ(store.nextId(), 3u);                                // no id was consumed
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, InsertAndExplicitTouchMoveOnlyThatRecordToMru) {
    CacheRecordStore store(8);
    for (uint64_t i = 1; i <= 3; ++i) store.insert(vanillaRecord(Hs({i}), {static_cast<PageId>(i)}));
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{1, 2, 3}));
    EXPECT_EQ(store.leastRecent(), std::optional<RecordId>(1));
    store.touch(1);
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{2, 3, 1}));
    store.touch(3);
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{2, 1, 3}));
    store.touch(3);  // already MRU
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{2, 1, 3}));
    store.insert(vanillaRecord(Hs({4}), {4}));
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{2, 1, 3, 4}));
    EXPECT_EQ(store.leastRecent(), std::optional<RecordId>(2));
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, EraseRemovesExactKeyAndLruEntry) {
    CacheRecordStore store(8);
    // Two records whose terminal hash is the same but whose block counts differ: distinct exact keys.
    store.insert(vanillaRecord(Hs({1, 2}), {0, 1}));
    store.insert(vanillaRecord(Hs({2}), {3}));
    store.insert(vanillaRecord(Hs({5}), {4}));
    StoredRecord const erased = store.erase(1);
    EXPECT_EQ(erased.id, 1u);
    EXPECT_EQ(erased.basePagePath, (std::vector<PageId>{0, 1}));
    EXPECT_FALSE(store.contains(1));
    EXPECT_FALSE(store.find({H(2), 2}).has_value());
    EXPECT_EQ(store.find({H(2), 1}), std::optional<RecordId>(2));
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{2, 3}));
    EXPECT_EQ(store.size(), 2u);
    EXPECT_THROW(store.erase(1), ContractError);
    EXPECT_EQ(store.size(), 2u);
    store.erase(3);
    store.erase(2);
    EXPECT_TRUE(store.lruToMru().empty());
    EXPECT_FALSE(store.leastRecent().has_value());
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, IdsStartAtOneAndIncrease) {
    CacheRecordStore store(0);  // the store does not enforce maxRecords: the manager does
    EXPECT_EQ(store.maxRecords(), 0);
    EXPECT_EQ(store.nextId(), 1u);
    EXPECT_EQ(store.insert(vanillaRecord(Hs({1}), {0})).id, 1u);
    store.erase(1);
    EXPECT_EQ(store.insert(vanillaRecord(Hs({1}), {0})).id, 2u);  // never reused
    EXPECT_EQ(store.insert(vanillaRecord(Hs({2}), {1})).id, 3u);
    EXPECT_EQ(store.nextId(), 4u);
    EXPECT_THROW(CacheRecordStore(-1), ContractError);
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, InvalidRecordsAreRejected) {
    CacheRecordStore store(8);
    std::vector<CacheRecord> bad;
    {
        CacheRecord r = vanillaRecord(Hs({1}), {0});
        r.key.fullBlockCount = -1;
        bad.push_back(r);
    }
    {
        CacheRecord r = vanillaRecord(Hs({1, 2}), {0, 1});
        r.key.fullBlockCount = 3;  // three blocks, two hashes
        bad.push_back(r);
    }
    {
        CacheRecord r;  // no block and no hybrid identity
        r.key = CacheRecordKey{H(1), 0};
        bad.push_back(r);
    }
    {
        CacheRecord r = vanillaRecord(Hs({1, 2}), {0, 1});
        r.key.terminalHash = H(1);  // not the last logical hash
        bad.push_back(r);
    }
    {
        CacheRecord r = vanillaRecord(Hs({1}), {0});
        r.recurrentSnapshotSlot = 0;  // snapshot without a hybrid length
        bad.push_back(r);
    }
    bad.push_back(vanillaRecord(Hs({1, 2}), {}));       // a vanilla record needs its base path
    bad.push_back(vanillaRecord(Hs({1, 2}), {0, 1, 2}));  // longer than the logical path
    {
        CacheRecord r = vanillaRecord(Hs({1, 2}), {0, 1});
        r.draftPagePath = {3};  // draft shorter than base
        bad.push_back(r);
    }
    bad.push_back(vanillaRecord(Hs({1}), {-2}));
    {
        CacheRecord r = vanillaRecord(Hs({1}), {0});
        r.draftPagePath = {-1};
        bad.push_back(r);
    }
    bad.push_back(hybridRecord(H(9), 0, {}, {}, 0, std::nullopt));              // exact length must be > 0
    bad.push_back(hybridRecord(H(9), -3, {}, {}, 0, std::nullopt));
    bad.push_back(hybridRecord(H(9), 6, Hs({1}), {0}, -1, std::nullopt));      // negative recurrent slot
    bad.push_back(hybridRecord(H(9), 6, Hs({1}), {0}, 0, -1));                 // negative partial slot
    {
        CacheRecord r = hybridRecord(H(9), 6, Hs({1}), {0}, 0, std::nullopt);
        r.recurrentSnapshotSlot.reset();  // a checkpoint without its recurrent state
        bad.push_back(r);
    }
    for (size_t i = 0; i < bad.size(); ++i) {
        EXPECT_THROW(bad[i].validate(), ContractError) << "case " << i;
        EXPECT_THROW(store.insert(bad[i]), ContractError) << "case " << i;
    }
    EXPECT_EQ(store.size(), 0u);
    EXPECT_EQ(store.nextId(), 1u);
    EXPECT_TRUE(store.lruToMru().empty());
    // Pure recurrent (no pages) and hybrid-with-pages checkpoints are valid.
    EXPECT_NO_THROW(hybridRecord(H(9), 3, {}, {}, 0, std::nullopt).validate());
    EXPECT_NO_THROW(hybridRecord(H(9), 6, Hs({1}), {0}, 0, 0).validate());
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, UnknownIdThrows) {
    CacheRecordStore store(8);
    store.insert(vanillaRecord(Hs({1}), {0}));
    std::string const before = test::describe(store);
    EXPECT_THROW(store.get(99), ContractError);
    EXPECT_THROW(store.touch(99), ContractError);
    EXPECT_THROW(store.erase(99), ContractError);
    EXPECT_THROW(store.setDraftState(99, {0}), ContractError);
    EXPECT_THROW(store.get(kNoRecord), ContractError);
    EXPECT_FALSE(store.contains(99));
    EXPECT_EQ(test::describe(store), before);
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, HybridIndexUsesExactDigestAndLength) {
    CacheRecordStore store(8);
    RecordId const id = store.insert(hybridRecord(H(50), 6, Hs({1}), {3}, 0, 0)).id;
    EXPECT_EQ(store.findHybrid({H(50), 6}), std::optional<RecordId>(id));
    EXPECT_FALSE(store.findHybrid({H(50), 7}).has_value());
    EXPECT_FALSE(store.findHybrid({H(51), 6}).has_value());
    // A hybrid record lives in the hybrid index only.
    EXPECT_FALSE(store.find({H(50), 1}).has_value());
    EXPECT_EQ(store.get(id).hybridKey(), std::optional<HybridCheckpointKey>(HybridCheckpointKey{H(50), 6}));
    EXPECT_EQ(store.get(id).resources(),
              (std::vector<ResourceId>{basePage(3), test::recurrentSlot(0), test::partialSlot(0)}));
    // A vanilla record whose terminal hash happens to equal the digest does not collide with it.
    RecordId const vanilla = store.insert(vanillaRecord(Hs({50}), {4})).id;
    EXPECT_EQ(store.find({H(50), 1}), std::optional<RecordId>(vanilla));
    // Same checkpoint again: the existing record, promoted.
    RecordInsertResult const dup = store.insert(hybridRecord(H(50), 6, Hs({1}), {7}, 2, 2));
    EXPECT_FALSE(dup.inserted);
    EXPECT_EQ(dup.id, id);
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{vanilla, id}));
    EXPECT_EQ(store.get(id).recurrentSnapshotSlot, std::optional<int32_t>(0));
    store.erase(id);
    EXPECT_FALSE(store.findHybrid({H(50), 6}).has_value());
    EXPECT_EQ(store.find({H(50), 1}), std::optional<RecordId>(vanilla));
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, HybridCandidateLengthsAreDistinctLongestFirstAndBelowInput) {
    CacheRecordStore store(8);
    RecordId const six = store.insert(hybridRecord(H(60), 6, Hs({1}), {}, 0, std::nullopt)).id;
    store.insert(hybridRecord(H(100), 10, Hs({1, 2}), {}, 1, std::nullopt));
    RecordId const sixAgain = store.insert(hybridRecord(H(61), 6, Hs({7}), {}, 2, std::nullopt)).id;
    store.insert(hybridRecord(H(30), 3, {}, {}, 3, std::nullopt));
    store.insert(vanillaRecord(Hs({1, 2, 3}), {0, 1, 2}));  // not a checkpoint: no candidate length
    EXPECT_EQ(store.hybridCandidateLengths(10), (std::vector<int32_t>{6, 3}));
    EXPECT_EQ(store.hybridCandidateLengths(11), (std::vector<int32_t>{10, 6, 3}));
    EXPECT_EQ(store.hybridCandidateLengths(7), (std::vector<int32_t>{6, 3}));
    EXPECT_TRUE(store.hybridCandidateLengths(3).empty());
    EXPECT_TRUE(store.hybridCandidateLengths(0).empty());
    store.erase(six);
    EXPECT_EQ(store.hybridCandidateLengths(11), (std::vector<int32_t>{10, 6, 3}));  // the other 6 remains
    store.erase(sixAgain);
    EXPECT_EQ(store.hybridCandidateLengths(11), (std::vector<int32_t>{10, 3}));
    EXPECT_NO_THROW(store.checkInvariants());
}

TEST(CacheRecordStore, AddingDraftStatePreservesBaseIdentityAndPromotesRecord) {
    CacheRecordStore store(8);
    store.insert(vanillaRecord(Hs({1, 2}), {0, 1}));
    store.insert(vanillaRecord(Hs({3}), {2}));
    EXPECT_THROW(store.setDraftState(1, {5}), ContractError);  // must be as long as the base path
    EXPECT_FALSE(store.get(1).hasDraftPath());
    store.setDraftState(1, {5, 6});
    StoredRecord const& r = store.get(1);
    EXPECT_EQ(r.draftPagePath, (std::vector<PageId>{5, 6}));
    EXPECT_EQ(r.basePagePath, (std::vector<PageId>{0, 1}));
    EXPECT_EQ(r.key, (CacheRecordKey{H(2), 2}));
    EXPECT_EQ(store.lruToMru(), (std::vector<RecordId>{2, 1}));
    EXPECT_THROW(store.setDraftState(1, {7, 8}), ContractError);  // already paired
    EXPECT_EQ(store.get(1).draftPagePath, (std::vector<PageId>{5, 6}));
    EXPECT_NO_THROW(store.checkInvariants());
}

struct IdentityHasher {
    size_t operator()(uint64_t k) const noexcept { return static_cast<size_t>(k); }
};

TEST(FlatHashMap, AGrowthThatCannotAllocateLeavesTheMapAsItWas) {
#ifdef CTXC_UNDER_ASAN
    GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix";
#else
    // The store's key indexes are FlatHashMaps. Filled to 3/4 of 2^20 slots (16 MiB), the next insert needs a
    // 32 MiB table; with 24 MiB of headroom it throws bad_alloc, and every entry must still be found, none
    // added (the map used to drop its slots before allocating the new ones). Exit 0 only if both hold.
    test::expectCompletesWithinAddressSpace(size_t{24} << 20, [] {
        detail::FlatHashMap<uint64_t, int32_t, IdentityHasher> map;
        map.reserve(size_t{3} << 18);  // exactly 2^20 slots
        uint64_t const full = uint64_t{3} << 18;
        for (uint64_t k = 0; k < full; ++k) map.tryEmplace(k * 7919, static_cast<int32_t>(k));
        size_t const bytes = map.memoryBytes();
        bool threw = false;
        try {
            map.tryEmplace(uint64_t{1} << 40, -1);
        } catch (std::bad_alloc const&) {
            threw = true;
        }
        bool intact = threw && map.size() == full && map.memoryBytes() == bytes && !map.contains(uint64_t{1} << 40);
        for (uint64_t k = 0; intact && k < full; ++k) {
            int32_t const* v = map.find(k * 7919);
            intact = v && *v == static_cast<int32_t>(k);
        }
        if (!intact || !map.erase(0) || map.contains(0)) throw std::runtime_error("not intact");
    });
#endif
}

}  // namespace
}  // namespace ctxcache
