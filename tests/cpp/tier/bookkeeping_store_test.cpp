// The bookkeeping store (issue 27): puts write only what the store lacks and keep what it holds as it was, a full
// store drops its least recently used blocks, gets return the longest held run and refresh it, a random sequence
// agrees with a naive LRU model, refusals change nothing, and several threads may share one store.
#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>
#include <thread>
#include <vector>

#include "ctxcache/errors.h"
#include "ctxcache/tier/bookkeeping_store.h"
#include "support/test_support.h"

namespace ctxcache::tier {
namespace {

using test::H;
using test::Hs;

size_t put(BookkeepingStore& s, std::vector<BlockHash> const& h) { return s.put(h.data(), h.size()); }
size_t get(BookkeepingStore& s, std::vector<BlockHash> const& h) { return s.get(h.data(), h.size()); }
size_t probe(BookkeepingStore const& s, std::vector<BlockHash> const& h) { return s.probe(h.data(), h.size()); }

TEST(BookkeepingStore, RefusesANonPositiveCapacityAndNullHashes) {
    EXPECT_THROW(BookkeepingStore(0), ContractError);
    EXPECT_THROW(BookkeepingStore(-2), ContractError);
    BookkeepingStore store(4);
    EXPECT_THROW(store.put(nullptr, 1), ContractError);
    EXPECT_THROW(store.get(nullptr, 1), ContractError);
    EXPECT_THROW(store.probe(nullptr, 1), ContractError);
    EXPECT_EQ(store.metrics().putCalls, 0u);
    EXPECT_EQ(store.metrics().getCalls, 0u);
    store.checkInvariants();
}

TEST(BookkeepingStore, PutsWhatItLacksAndKeepsWhatItHolds) {
    BookkeepingStore store(8);
    EXPECT_EQ(put(store, Hs({1, 2, 3})), 3u);
    EXPECT_EQ(put(store, Hs({2, 3, 4})), 1u);  // 2 and 3 held: skipped
    BookkeepingStoreMetrics const m = store.metrics();
    EXPECT_EQ(m.putCalls, 2u);
    EXPECT_EQ(m.writtenBlocks, 4u);
    EXPECT_EQ(m.skippedPuts, 2u);
    EXPECT_EQ(m.refusedPuts, 0u);
    EXPECT_EQ(m.residentBlocks, 4u);
    EXPECT_EQ(probe(store, Hs({1, 2, 3, 4, 5})), 4u);
    EXPECT_EQ(probe(store, Hs({2, 1})), 2u);
    EXPECT_EQ(probe(store, Hs({5, 1})), 0u);  // a run starts at the first block
    store.checkInvariants();
}

TEST(BookkeepingStore, AFullStoreDropsItsLeastRecentlyUsedBlocks) {
    BookkeepingStore store(3);
    put(store, Hs({1, 2, 3}));  // LRU order 1, 2, 3
    EXPECT_EQ(get(store, Hs({1})), 1u);  // 1 is the most recent now: 2, 3, 1
    EXPECT_EQ(put(store, Hs({4})), 1u);  // drops 2
    EXPECT_EQ(probe(store, Hs({2})), 0u);
    EXPECT_EQ(probe(store, Hs({3})), 1u);
    EXPECT_EQ(probe(store, Hs({1, 4})), 2u);
    EXPECT_EQ(put(store, Hs({3})), 0u);  // held: skipped, and NOT refreshed (a store keeps the first put)
    EXPECT_EQ(put(store, Hs({5})), 1u);  // so 3 goes next
    EXPECT_EQ(probe(store, Hs({3})), 0u);
    BookkeepingStoreMetrics const m = store.metrics();
    EXPECT_EQ(m.droppedBlocks, 2u);
    EXPECT_EQ(m.residentBlocks, 3u);
    store.checkInvariants();
}

TEST(BookkeepingStore, GetReturnsTheLongestHeldRunAndCountsIt) {
    BookkeepingStore store(8);
    put(store, Hs({1, 2, 4}));
    EXPECT_EQ(get(store, Hs({1, 2, 3, 4})), 2u);  // stops at 3
    EXPECT_EQ(get(store, Hs({3, 4})), 0u);
    EXPECT_EQ(get(store, {}), 0u);
    BookkeepingStoreMetrics const m = store.metrics();
    EXPECT_EQ(m.getCalls, 3u);
    EXPECT_EQ(m.hitCalls, 1u);
    EXPECT_EQ(m.hitBlocks, 2u);
}

TEST(BookkeepingStore, ABatchLargerThanTheStoreKeepsItsFirstBlocksAndRefusesTheRest) {
    BookkeepingStore store(2);
    put(store, Hs({9}));
    EXPECT_EQ(put(store, Hs({9, 1, 2, 3})), 2u);  // 9 held (then dropped for room), 1 and 2 written, 3 refused
    BookkeepingStoreMetrics const m = store.metrics();
    EXPECT_EQ(m.writtenBlocks, 3u);
    EXPECT_EQ(m.skippedPuts, 1u);
    EXPECT_EQ(m.refusedPuts, 1u);
    EXPECT_EQ(probe(store, Hs({1, 2})), 2u);
    store.checkInvariants();
}

TEST(BookkeepingStore, ClearDropsEverything) {
    BookkeepingStore store(4);
    put(store, Hs({1, 2}));
    store.clear();
    EXPECT_EQ(probe(store, Hs({1})), 0u);
    EXPECT_EQ(store.metrics().residentBlocks, 0u);
    store.checkInvariants();
}

TEST(BookkeepingStore, AgreesWithANaiveLruModelOnRandomPutsAndGets) {
    constexpr int32_t kCapacity = 64;
    BookkeepingStore store(kCapacity);
    std::list<uint64_t> lru;  // least recent first
    auto holds = [&](uint64_t k) { return std::find(lru.begin(), lru.end(), k) != lru.end(); };
    std::mt19937 rng(7);
    uint64_t written = 0, skipped = 0, dropped = 0, hitBlocks = 0;
    for (int step = 0; step < 20000; ++step) {
        size_t const n = 1 + rng() % 12;
        std::vector<uint64_t> keys(n);
        for (uint64_t& k : keys) k = 1 + rng() % 160;
        std::vector<BlockHash> hashes;
        for (uint64_t k : keys) hashes.push_back(H(k));
        if (rng() % 2) {
            size_t expect = 0;
            for (uint64_t k : keys) {
                if (holds(k)) {
                    ++skipped;
                    continue;
                }
                if (lru.size() == static_cast<size_t>(kCapacity)) {
                    lru.pop_front();
                    ++dropped;
                }
                lru.push_back(k);
                ++expect;
            }
            written += expect;
            ASSERT_EQ(put(store, hashes), expect) << "step " << step;
        } else {
            size_t expect = 0;
            while (expect < n && holds(keys[expect])) ++expect;
            for (size_t i = 0; i < expect; ++i) {
                lru.remove(keys[i]);
                lru.push_back(keys[i]);
            }
            hitBlocks += expect;
            ASSERT_EQ(get(store, hashes), expect) << "step " << step;
        }
        if (step % 500 == 0) store.checkInvariants();
    }
    BookkeepingStoreMetrics const m = store.metrics();
    EXPECT_EQ(m.writtenBlocks, written);
    EXPECT_EQ(m.skippedPuts, skipped);
    EXPECT_EQ(m.droppedBlocks, dropped);
    EXPECT_EQ(m.hitBlocks, hitBlocks);
    EXPECT_EQ(m.residentBlocks, lru.size());
    for (uint64_t k : lru) EXPECT_EQ(probe(store, {H(k)}), 1u);
    store.checkInvariants();
}

TEST(BookkeepingStore, ThreadsSharingOneStoreKeepItConsistent) {
    BookkeepingStore store(256);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&store, t] {
            std::mt19937 rng(static_cast<unsigned>(t));
            for (int i = 0; i < 5000; ++i) {
                std::vector<BlockHash> hashes;
                for (int k = 0; k < 8; ++k) hashes.push_back(H(1 + rng() % 1000));
                if (i % 2) store.put(hashes.data(), hashes.size());
                else store.get(hashes.data(), hashes.size());
            }
        });
    }
    for (std::thread& t : threads) t.join();
    BookkeepingStoreMetrics const m = store.metrics();
    EXPECT_EQ(m.putCalls, 10000u);
    EXPECT_EQ(m.getCalls, 10000u);
    EXPECT_EQ(m.writtenBlocks + m.skippedPuts + m.refusedPuts, 80000u);
    EXPECT_EQ(m.residentBlocks, 256u);
    store.checkInvariants();
}

}  // namespace
}  // namespace ctxcache::tier
