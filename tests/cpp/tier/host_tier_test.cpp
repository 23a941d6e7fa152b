// The host tier's bookkeeping (issue 26): HostTierIndex's slots, states, pins and LRU against a naive model, every
// refusal leaving the state as it was; the manager's BaseBlockObserver (blocks stored at publication, removed at
// eviction, nothing at clear()); and HostTier on a manager: write-through and write-back, an extension after the
// device hit that never covers the last token, blocks never written twice, and the tier's LRU dropping leaves
// before roots. Invariants are checked after every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <map>
#include <random>
#include <stdexcept>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/host_buffer.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/errors.h"
#include "ctxcache/tier/bookkeeping_store.h"
#include "ctxcache/tier/host_tier.h"
#include "ctxcache/tier/host_tier_index.h"
#include "support/test_support.h"
#include "support/tier_test_support.h"

namespace ctxcache::tier {
namespace {

using test::H;
using test::Hs;

std::vector<int32_t> reserve(HostTierIndex& index, std::vector<BlockHash> const& hashes) {
    std::vector<int32_t> slots;
    index.reserveWrites(hashes.data(), hashes.size(), slots);
    return slots;
}

void writeNow(HostTierIndex& index, std::vector<BlockHash> const& hashes) {
    std::vector<int32_t> slots = reserve(index, hashes);
    slots.erase(std::remove(slots.begin(), slots.end(), HostTierIndex::kNoSlot), slots.end());
    index.completeWrites(slots.data(), slots.size());
    index.checkInvariants();
}

size_t run(HostTierIndex const& index, std::vector<BlockHash> const& hashes) {
    return index.residentRun(hashes.data(), hashes.size());
}

TEST(HostTierIndex, RefusesANegativeCapacityAndAZeroCapacityHoldsNothing) {
    EXPECT_THROW(HostTierIndex(-1), ContractError);
    EXPECT_THROW(HostTierIndex(-3), ContractError);
    HostTierIndex empty(0);  // a tier that only passes blocks on (to a store)
    std::vector<int32_t> slots;
    std::vector<BlockHash> const ab = Hs({1, 2});
    EXPECT_EQ(empty.reserveWrites(ab.data(), ab.size(), slots), 0u);
    EXPECT_EQ(slots, (std::vector<int32_t>(2, HostTierIndex::kNoSlot)));
    EXPECT_EQ(run(empty, ab), 0u);
    EXPECT_EQ(empty.usedSlots(), 0u);
    empty.checkInvariants();
}

TEST(HostTierIndex, WritingBlocksAreHeldButInvisibleUntilTheirCopyCompletes) {
    HostTierIndex index(4);
    std::vector<BlockHash> const abc = Hs({1, 2, 3});
    std::vector<int32_t> slots = reserve(index, abc);
    EXPECT_EQ(slots, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(index.writingCount(), 3u);
    EXPECT_EQ(run(index, abc), 0u);                                         // not visible yet
    EXPECT_EQ(reserve(index, abc), (std::vector<int32_t>(3, HostTierIndex::kNoSlot)));  // not written twice
    index.completeWrites(slots.data(), 2);                                  // blocks 1 and 2 arrived
    index.checkInvariants();
    EXPECT_EQ(run(index, abc), 2u);
    index.abortWrites(slots.data() + 2, 1);  // block 3's copy failed
    index.checkInvariants();
    EXPECT_EQ(index.find(H(3)), HostTierIndex::kNoSlot);
    EXPECT_EQ(index.state(2), HostSlotState::kFree);
    EXPECT_EQ(reserve(index, Hs({3})), (std::vector<int32_t>{2}));  // the freed slot is taken again
}

TEST(HostTierIndex, DropsTheLeastRecentUnpinnedBlockForRoom) {
    HostTierIndex index(3);
    writeNow(index, Hs({1, 2, 3}));  // LRU: 1 2 3
    std::vector<int32_t> pinned;
    ASSERT_EQ(index.pinRun(Hs({1}).data(), 1, pinned), 1u);  // 1 is being loaded
    std::vector<BlockHash> dropped;
    std::vector<int32_t> slots;
    ASSERT_EQ(index.reserveWrites(Hs({4}).data(), 1, slots, &dropped), 1u);
    EXPECT_EQ(dropped, Hs({2}));  // 1 is pinned: 2 is the least recent unpinned block
    EXPECT_EQ(index.counters().droppedBlocks, 1u);
    index.completeWrites(slots.data(), 1);
    index.unpin(pinned.data(), pinned.size());  // 1 becomes the most recent: LRU 3 4 1
    index.checkInvariants();
    dropped.clear();
    ASSERT_EQ(index.reserveWrites(Hs({5, 6}).data(), 2, slots, &dropped), 2u);
    EXPECT_EQ(dropped, Hs({3, 4}));
    index.checkInvariants();
    // Every slot pinned or writing: nothing can be had; the write stops, the state is unchanged.
    pinned.clear();
    ASSERT_EQ(index.pinRun(Hs({1}).data(), 1, pinned), 1u);
    std::vector<int32_t> more;
    EXPECT_EQ(index.reserveWrites(Hs({7}).data(), 1, more), 0u);
    EXPECT_EQ(more, (std::vector<int32_t>{HostTierIndex::kNoSlot}));
    EXPECT_EQ(index.writingCount(), 2u);
    EXPECT_EQ(index.residentCount(), 1u);
}

TEST(HostTierIndex, TouchAndDemoteMoveOnlyResidentUnpinnedBlocks) {
    HostTierIndex index(3);
    writeNow(index, Hs({1, 2, 3}));  // LRU: 1 2 3
    index.touch(index.find(H(1)));   // 2 3 1
    index.demote(index.find(H(3)));  // 3 2 1
    std::vector<int32_t> pinned;
    index.pinRun(Hs({2}).data(), 1, pinned);
    index.touch(pinned[0]);  // pinned: off the list, unchanged
    index.demote(pinned[0]);
    index.checkInvariants();
    std::vector<BlockHash> dropped;
    std::vector<int32_t> slots;
    ASSERT_EQ(index.reserveWrites(Hs({4, 5}).data(), 2, slots, &dropped), 2u);
    EXPECT_EQ(dropped, Hs({3, 1}));  // 2 is pinned
    index.touch(slots[0]);  // writing: unchanged
    EXPECT_EQ(index.state(slots[0]), HostSlotState::kWriting);
    EXPECT_THROW(index.touch(7), ContractError);
    index.checkInvariants();
}

TEST(HostTierIndex, RefusalsChangeNothing) {
    HostTierIndex index(4);
    writeNow(index, Hs({1, 2}));
    std::vector<int32_t> writing = reserve(index, Hs({3}));
    std::vector<int32_t> pinned;
    index.pinRun(Hs({1}).data(), 1, pinned);
    int32_t const one = pinned[0];
    int32_t const two = index.find(H(2));
    // Unpinning a slot more often than it is pinned, or an unpinned slot: nothing unpinned.
    std::vector<int32_t> const twice{one, one};
    EXPECT_THROW(index.unpin(twice.data(), 2), ContractError);
    EXPECT_EQ(index.pins(one), 1);
    std::vector<int32_t> const mixed{one, two};
    EXPECT_THROW(index.unpin(mixed.data(), 2), ContractError);
    EXPECT_EQ(index.pins(one), 1);
    std::vector<int32_t> const outOfRange{99};
    EXPECT_THROW(index.unpin(outOfRange.data(), 1), ContractError);
    // Completing or aborting a slot that is not writing, or one listed twice: nothing changed.
    std::vector<int32_t> const notWriting{writing[0], two};
    EXPECT_THROW(index.completeWrites(notWriting.data(), 2), ContractError);
    EXPECT_EQ(index.state(writing[0]), HostSlotState::kWriting);
    std::vector<int32_t> const dup{writing[0], writing[0]};
    EXPECT_THROW(index.abortWrites(dup.data(), 2), ContractError);
    EXPECT_EQ(index.state(writing[0]), HostSlotState::kWriting);
    EXPECT_THROW(index.state(-1), ContractError);
    EXPECT_THROW(index.residentRun(nullptr, 2), ContractError);
    index.checkInvariants();
    EXPECT_EQ(index.residentCount(), 2u);
    EXPECT_EQ(index.writingCount(), 1u);
    EXPECT_EQ(index.pinnedCount(), 1u);
}

TEST(HostTierIndex, InvalidateAndClearDropOnlyUnpinnedResidentBlocks) {
    HostTierIndex index(8);
    writeNow(index, Hs({1, 2, 3}));
    std::vector<int32_t> writing = reserve(index, Hs({4}));
    std::vector<int32_t> pinned;
    index.pinRun(Hs({1}).data(), 1, pinned);
    EXPECT_FALSE(index.invalidate(H(1)));  // pinned
    EXPECT_FALSE(index.invalidate(H(4)));  // writing
    EXPECT_TRUE(index.invalidate(H(2)));
    EXPECT_FALSE(index.invalidate(H(2)));
    std::vector<BlockHash> dropped;
    index.clear(&dropped);
    EXPECT_EQ(dropped, Hs({3}));
    index.checkInvariants();
    EXPECT_EQ(index.residentCount(), 1u);  // 1, pinned
    EXPECT_EQ(index.writingCount(), 1u);
    EXPECT_EQ(index.counters().invalidatedBlocks, 2u);
}

// A naive model: resident blocks in LRU order (a deque), writing blocks, pins per block.
TEST(HostTierIndex, AgreesWithANaiveModelOverRandomOperations) {
    std::mt19937 rng(26);
    constexpr int32_t kCapacity = 6;
    HostTierIndex index(kCapacity);
    std::deque<uint64_t> lru;  // resident and unpinned, least recent first
    std::map<uint64_t, int> pins;  // resident blocks with pins
    std::map<uint64_t, int32_t> writing;
    auto used = [&] { return lru.size() + pins.size() + writing.size(); };
    for (int step = 0; step < 20000; ++step) {
        int const op = static_cast<int>(rng() % 5);
        uint64_t const block = rng() % 12;
        if (op == 0) {  // reserve one
            std::vector<int32_t> slots;
            std::vector<BlockHash> dropped;
            size_t const n = index.reserveWrites(Hs({block}).data(), 1, slots, &dropped);
            bool const held =
                std::find(lru.begin(), lru.end(), block) != lru.end() || pins.count(block) || writing.count(block);
            if (held) {
                EXPECT_EQ(n, 0u);
                EXPECT_TRUE(dropped.empty());
            } else if (used() < static_cast<size_t>(kCapacity)) {
                ASSERT_EQ(n, 1u);
                EXPECT_TRUE(dropped.empty());
                writing[block] = slots[0];
            } else if (!lru.empty()) {
                ASSERT_EQ(n, 1u);
                ASSERT_EQ(dropped, Hs({lru.front()}));
                lru.pop_front();
                writing[block] = slots[0];
            } else {
                EXPECT_EQ(n, 0u);
            }
        } else if (op == 1 && !writing.empty()) {  // complete or abort one
            auto it = writing.begin();
            std::advance(it, static_cast<long>(rng() % writing.size()));
            int32_t const slot = it->second;
            if (rng() % 4 == 0) {
                index.abortWrites(&slot, 1);
            } else {
                index.completeWrites(&slot, 1);
                lru.push_back(it->first);
            }
            writing.erase(it);
        } else if (op == 2) {  // pin the run [block, block + 1]
            std::vector<int32_t> slots;
            size_t const n = index.pinRun(Hs({block, block + 1}).data(), 2, slots);
            size_t expect = 0;
            for (uint64_t b : {block, block + 1}) {
                bool const resident = std::find(lru.begin(), lru.end(), b) != lru.end() || pins.count(b);
                if (!resident) break;
                ++expect;
            }
            ASSERT_EQ(n, expect);
            for (size_t i = 0; i < n; ++i) {
                uint64_t const b = block + i;
                auto at = std::find(lru.begin(), lru.end(), b);
                if (at != lru.end()) lru.erase(at);
                ++pins[b];
            }
        } else if (op == 3 && !pins.empty()) {  // unpin one
            auto it = pins.begin();
            std::advance(it, static_cast<long>(rng() % pins.size()));
            int32_t const slot = index.find(H(it->first));
            index.unpin(&slot, 1);
            if (--it->second == 0) {
                lru.push_back(it->first);
                pins.erase(it);
            }
        } else if (op == 4) {
            bool const dropped = index.invalidate(H(block));
            auto at = std::find(lru.begin(), lru.end(), block);
            EXPECT_EQ(dropped, at != lru.end());
            if (at != lru.end()) lru.erase(at);
        }
        index.checkInvariants();
        ASSERT_EQ(index.residentCount(), lru.size() + pins.size()) << "step " << step;
        ASSERT_EQ(index.writingCount(), writing.size());
        ASSERT_EQ(index.pinnedCount(), pins.size());
    }
}

// ---- the manager's observer -------------------------------------------------------------------------------------

using test::kPage;
using test::publishPrompt;
using test::BytesFixture;

struct Recorder final : BaseBlockObserver {
    std::vector<std::pair<BlockHash, PageId>> stored, removed;
    // Per call: its root flag and parent (none: a zero hash).
    std::vector<std::pair<bool, BlockHash>> storedRuns, removedRuns;
    std::vector<int32_t> tokens;
    void blocksStored(BlockHash const* h, PageId const* p, size_t n, bool root, BlockHash const* parent,
                      int32_t const* t, DraftRun const&) noexcept override {
        for (size_t i = 0; i < n; ++i) stored.emplace_back(h[i], p[i]);
        storedRuns.emplace_back(root, parent ? *parent : BlockHash{});
        if (t) tokens.insert(tokens.end(), t, t + n * kPage);
    }
    void blocksRemoved(BlockHash const* h, PageId const* p, size_t n, bool root, BlockHash const* parent,
                       DraftRun const&) noexcept override {
        for (size_t i = 0; i < n; ++i) removed.emplace_back(h[i], p[i]);
        removedRuns.emplace_back(root, parent ? *parent : BlockHash{});
    }
};

// Acquires `hashes` (a prompt of hashes.size() * kPage + extra tokens) and publishes them; returns the pages.
// A trimmed tail (lru-trim) is not a path's root: its run names the kept part's last block as its parent, so a
// tier's events chain it to a block a router knows.
TEST(BaseBlockObserver, ATrimmedTailNamesTheKeptPartAsItsParent) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8, EvictionPolicy::kRecordLruTrim);
    Recorder rec;
    m.setBaseBlockObserver(&rec);
    std::vector<PageId> const pages = publishPrompt(m, Hs({1, 2, 3}));  // 3 of the 6 pages stay cached
    AcquireResult r = m.acquireVanilla(Hs({}), 5 * kPage);  // needs 5: the record's tail of 2 blocks goes
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    EXPECT_EQ(m.metrics().trimmedRecords, 1u);
    ASSERT_EQ(rec.removed.size(), 2u);
    EXPECT_EQ(rec.removed[0], std::make_pair(H(2), pages[1]));
    EXPECT_EQ(rec.removed[1], std::make_pair(H(3), pages[2]));
    ASSERT_EQ(rec.removedRuns.size(), 1u);
    EXPECT_EQ(rec.removedRuns[0], std::make_pair(false, H(1)));
    m.setBaseBlockObserver(nullptr);
}

TEST(BaseBlockObserver, HearsNewlyCanonicalBlocksAndEvictionsButNotAReset) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    Recorder rec;
    m.setBaseBlockObserver(&rec);
    Recorder other;
    EXPECT_THROW(m.setBaseBlockObserver(&other), ContractError);  // one at a time
    std::vector<PageId> const first = publishPrompt(m, Hs({1, 2}));
    ASSERT_EQ(rec.stored.size(), 2u);
    EXPECT_EQ(rec.stored[0], std::make_pair(H(1), first[0]));
    EXPECT_EQ(rec.stored[1], std::make_pair(H(2), first[1]));
    publishPrompt(m, Hs({1, 2, 3}));  // blocks 1 and 2 are already canonical: only 3 is new
    ASSERT_EQ(rec.stored.size(), 3u);
    EXPECT_EQ(rec.stored[2].first, H(3));
    // One call per run: {1, 2} from the root, {3} after block 2.
    ASSERT_EQ(rec.storedRuns.size(), 2u);
    EXPECT_EQ(rec.storedRuns[0], std::make_pair(true, BlockHash{}));
    EXPECT_EQ(rec.storedRuns[1], std::make_pair(false, H(2)));
    EXPECT_TRUE(rec.tokens.empty());  // the publications carried no tokens
    EXPECT_TRUE(rec.removed.empty());
    // 6 pages, 3 cached: a cold prompt of 5 blocks (+1 token: 6 pages) evicts both records; the removed blocks come
    // with the pages that held them, in path order.
    publishPrompt(m, Hs({7, 8, 9, 10, 11}));
    ASSERT_EQ(rec.removed.size(), 3u);
    auto const byLo = [](BlockHash const& x, BlockHash const& y) { return x.lo < y.lo; };
    std::vector<BlockHash> removedHashes;
    for (auto const& [h, p] : rec.removed) removedHashes.push_back(h);
    std::sort(removedHashes.begin(), removedHashes.end(), byLo);
    std::vector<BlockHash> expect = Hs({1, 2, 3});
    std::sort(expect.begin(), expect.end(), byLo);
    EXPECT_EQ(removedHashes, expect);
    m.checkInvariants();
    size_t const removedBefore = rec.removed.size();
    m.clear();  // a reset is not an eviction
    EXPECT_EQ(rec.removed.size(), removedBefore);
    m.setBaseBlockObserver(nullptr);
    publishPrompt(m, Hs({20}));
    EXPECT_EQ(rec.stored.size(), 3u + 5u);  // detached: the last publication is not heard
}

// ---- HostTier on a manager --------------------------------------------------------------------------------------

TEST(HostTier, WriteBackKeepsEvictedBlocksAndExtendsTheDeviceHit) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    HostTier tier(m, {16, HostWritePolicy::kWriteBack});
    EXPECT_THROW(HostTier(m, {16, HostWritePolicy::kWriteBack}), ContractError);  // the manager has its tier
    std::vector<BlockHash> const a = Hs({1, 2, 3});
    publishPrompt(m, a);
    EXPECT_EQ(tier.index().residentCount(), 0u);  // write-back: nothing until the device drops them
    publishPrompt(m, Hs({7, 8, 9, 10, 11}));      // evicts a's record
    EXPECT_EQ(tier.index().residentCount(), 3u);
    EXPECT_EQ(tier.metrics().writtenBlocks, 3u);
    tier.checkInvariants();
    // The device holds none of a now; the tier supplies all three blocks of a 13-token prompt...
    EXPECT_EQ(m.probeVanilla(a, 13).matchedTokenLength, 0);
    EXPECT_EQ(tier.extendHit(a, 13, 0), 3);
    // ...but never the last token: a 12-token prompt (page-aligned) keeps its last block for the prefill.
    EXPECT_EQ(tier.extendHit(a, 12, 0), 2);
    // After a device hit of one block the tier adds the rest; a device hit of all of them leaves nothing.
    EXPECT_EQ(tier.extendHit(a, 13, 1), 2);
    EXPECT_EQ(tier.extendHit(a, 13, 3), 0);
    EXPECT_EQ(tier.extendHit(Hs({1, 5, 3}), 13, 0), 1);  // the run ends at the first block the tier lacks
    EXPECT_EQ(tier.metrics().extendCalls, 5u);
    EXPECT_EQ(tier.metrics().loadedBlocks, 3u + 2u + 2u + 1u);
    EXPECT_EQ(tier.metrics().hitRequests, 4u);
    EXPECT_THROW(tier.extendHit(a, 13, 4), ContractError);  // more device blocks than the prompt has
    EXPECT_THROW(tier.extendHit(a, -1, 0), ContractError);
    tier.checkInvariants();
}

TEST(HostTier, WriteThroughWritesAtPublicationAndNeverTwice) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    HostTier tier(m, {16, HostWritePolicy::kWriteThrough});
    publishPrompt(m, Hs({1, 2, 3}));
    EXPECT_EQ(tier.index().residentCount(), 3u);
    publishPrompt(m, Hs({7, 8, 9, 10, 11}));  // evicts 1..3 from the device: the tier already has them
    EXPECT_EQ(tier.metrics().writtenBlocks, 8u);
    EXPECT_EQ(tier.extendHit(Hs({1, 2, 3}), 13, 0), 3);
    // The device recomputes 1..3 from the tier's copy and publishes them again: the tier does not write them again.
    publishPrompt(m, Hs({1, 2, 3}));
    EXPECT_EQ(tier.metrics().writtenBlocks, 8u);
    EXPECT_EQ(tier.metrics().skippedWrites, 3u);  // newly canonical on the device, already in the tier
    tier.checkInvariants();
}

TEST(HostTier, ItsLruDropsLeavesBeforeRootsAndCountsIt) {
    ContextCacheManager m(kPage, {64, 0, 0, 0}, 64);
    HostTier tier(m, {4, HostWritePolicy::kWriteThrough});
    publishPrompt(m, Hs({1, 2, 3}));  // written leaf first: 3 is the least recent, 1 the most
    publishPrompt(m, Hs({5, 6}));     // needs one slot beyond the four: block 3 goes
    EXPECT_EQ(tier.metrics().droppedBlocks, 1u);
    EXPECT_EQ(tier.index().find(H(3)), HostTierIndex::kNoSlot);
    EXPECT_EQ(tier.extendHit(Hs({1, 2, 3}), 13, 0), 2);
    tier.clear();
    EXPECT_EQ(tier.index().residentCount(), 0u);
    tier.checkInvariants();
}

TEST(HostTier, DetachesFromItsManagerWhenDestroyed) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    {
        HostTier tier(m, {4, HostWritePolicy::kWriteThrough});
        EXPECT_EQ(m.baseBlockObserver(), &tier);
    }
    EXPECT_EQ(m.baseBlockObserver(), nullptr);
    publishPrompt(m, Hs({1}));  // nothing observes: no dangling call
    HostTier again(m, {4, HostWritePolicy::kWriteBack});
    EXPECT_THROW(HostTier(m, {0, HostWritePolicy::kWriteBack}), ContractError);
    EXPECT_THROW(HostTier(m, {4, static_cast<HostWritePolicy>(7)}), ContractError);
}

// ---- a store shared by replicas (issue 27, bookkeeping) ---------------------------------------------------------

HostTierConfig withStore(int32_t pages, std::shared_ptr<BookkeepingStore> store,
                         HostWritePolicy policy = HostWritePolicy::kWriteBack) {
    HostTierConfig config;
    config.capacityPages = pages;
    config.writePolicy = policy;
    config.store = std::move(store);
    return config;
}

TEST(HostTierStore, AReplicaReusesWhatAnotherPublishedThroughTheStore) {
    auto store = std::make_shared<BookkeepingStore>(64);
    ContextCacheManager a(kPage, {16, 0, 0, 0}, 8), b(kPage, {16, 0, 0, 0}, 8);
    HostTier ta(a, withStore(0, store)), tb(b, withStore(0, store));  // no host slots: blocks go to the store only
    std::vector<BlockHash> const prompt = Hs({1, 2, 3, 4});
    publishPrompt(a, prompt);  // put at publication, whatever the host's write policy
    EXPECT_EQ(store->metrics().writtenBlocks, 4u);
    EXPECT_EQ(ta.index().residentCount(), 0u);
    EXPECT_EQ(ta.metrics().refusedWrites, 0u);  // a tier of 0 pages does not try
    // Replica b has none of it on its device: the store supplies the run (never the last token).
    EXPECT_EQ(b.probeVanilla(prompt, 4 * kPage + 1).matchedTokenLength, 0);
    EXPECT_EQ(tb.probeHit(prompt, 4 * kPage + 1, 0), 4);
    TierHit const hit = tb.extendHitByTier(prompt, 4 * kPage + 1, 0);
    EXPECT_EQ(hit.hostBlocks, 0);
    EXPECT_EQ(hit.storeBlocks, 4);
    EXPECT_EQ(tb.extendHit(prompt, 4 * kPage, 1), 2);  // page-aligned: the last block stays for the prefill
    EXPECT_EQ(tb.metrics().storeLoadedBlocks, 6u);
    EXPECT_EQ(tb.metrics().storeHitRequests, 2u);
    EXPECT_EQ(tb.metrics().hitRequests, 2u);
    EXPECT_EQ(tb.metrics().loadedBlocks, 0u);  // the host's own
    EXPECT_EQ(store->metrics().hitBlocks, 6u);
    // b publishes the prompt it loaded: the store already holds it (skipped, kept as it was).
    publishPrompt(b, prompt);
    EXPECT_EQ(store->metrics().writtenBlocks, 4u);
    EXPECT_EQ(store->metrics().skippedPuts, 4u);
    store->checkInvariants();
    ta.checkInvariants();
    tb.checkInvariants();
}

TEST(HostTierStore, TheRunGoesFromTheHostToTheStoreAndBack) {
    auto store = std::make_shared<BookkeepingStore>(64);
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    HostTier tier(m, withStore(16, store));
    std::vector<BlockHash> const other = Hs({2, 4});
    store->put(other.data(), other.size());  // as if another replica had published them
    publishPrompt(m, Hs({1}));
    publishPrompt(m, Hs({9, 8, 7, 6, 5}));  // evicts {1} into the host (write-back)
    ASSERT_EQ(tier.index().residentCount(), 1u);
    publishPrompt(m, Hs({30, 31, 32, 33, 34}));  // evicts 9..5 into the host too
    // 1 from the host, 2 from the store, 3 from nowhere: the run is 1, 2.
    TierHit const hit = tier.extendHitByTier(Hs({1, 2, 3, 4}), 4 * kPage + 1, 0);
    EXPECT_EQ(hit.hostBlocks, 1);
    EXPECT_EQ(hit.storeBlocks, 1);
    // The store's run goes as far as the store holds blocks (it has what this replica published: 9 too).
    EXPECT_EQ(tier.extendHitByTier(Hs({1, 2, 9, 77}), 4 * kPage + 1, 0).storeBlocks, 2);
    // With only {2, 4} in the store: host 1, store 2, host 9, store 4, host 8, and 77 nowhere.
    store->clear();
    store->put(other.data(), other.size());
    EXPECT_EQ(tier.probeHit(Hs({1, 2, 9, 4, 8, 77}), 6 * kPage + 1, 0), 5);
    TierHit const mixed = tier.extendHitByTier(Hs({1, 2, 9, 4, 8, 77}), 6 * kPage + 1, 0);
    EXPECT_EQ(mixed.hostBlocks, 3);
    EXPECT_EQ(mixed.storeBlocks, 2);
    tier.checkInvariants();
    store->checkInvariants();
}

TEST(HostTierStore, RefusesAStoreWithBytesAndZeroPagesWithoutAStore) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    EXPECT_THROW(HostTier(m, withStore(0, nullptr)), ContractError);
    EXPECT_THROW(HostTier(m, withStore(-1, std::make_shared<BookkeepingStore>(4))), ContractError);
    EXPECT_EQ(m.baseBlockObserver(), nullptr);  // nothing attached by a refusal
    std::unique_ptr<device::DeviceBackend> backend = device::createCpuBackend();
    device::KvPagePool pool{*backend, device::KvPoolGeometry{6, kPage, device::DType::kFp16, {{1, 4}}}};
    device::HostBuffer memory(*backend, HostTier::slotBytes(pool) * 4);
    EXPECT_THROW(HostTier(m, withStore(4, std::make_shared<BookkeepingStore>(4)), HostTierStorage{&pool, &memory, {}}),
                 ContractError);
    EXPECT_EQ(m.baseBlockObserver(), nullptr);
}

TEST(HostTierStore, TheStoreOutlivesItsCreatorWhileATierUsesIt) {
    ContextCacheManager a(kPage, {16, 0, 0, 0}, 8), b(kPage, {16, 0, 0, 0}, 8);
    auto store = std::make_shared<BookkeepingStore>(8);
    HostTier ta(a, withStore(0, store)), tb(b, withStore(0, store));
    std::weak_ptr<BookkeepingStore> const watch = store;
    store.reset();  // the creator lets go: the tiers keep it
    publishPrompt(a, Hs({1, 2}));
    EXPECT_EQ(tb.extendHit(Hs({1, 2}), 2 * kPage + 1, 0), 2);
    EXPECT_FALSE(watch.expired());
}

// ---- the bytes mode ---------------------------------------------------------------------------------------------

TEST(HostTierBytes, EvictedPagesComeBackByteForByteAndAChangedSlotEndsTheHit) {
    BytesFixture f;
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    size_t const slot = HostTier::slotBytes(f.pool);
    EXPECT_EQ(slot % 256, 0u);
    device::HostBuffer memory(*f.backend, 8 * slot);
    HostTier tier(m, {8, HostWritePolicy::kWriteBack}, HostTierStorage{&f.pool, &memory, {}});
    EXPECT_TRUE(tier.holdsBytes());
    std::vector<BlockHash> const a = Hs({1, 2, 3});
    std::vector<PageId> const aPages = publishPrompt(m, a);  // the pages hold their filled bytes
    publishPrompt(m, Hs({7, 8, 9, 10, 11}));                   // evicts a: copied to the tier
    EXPECT_EQ(tier.metrics().writtenBlocks, 3u);
    EXPECT_EQ(tier.metrics().bytesToHost, 3 * device::hostSlotPayloadBytes(f.pool));
    // Scribble over every page of the pool: what comes back comes from the tier.
    for (int32_t l = 0; l < f.pool.numLayers(); ++l) {
        std::vector<uint8_t> zeros(f.pool.layerBytes(l), 0xEE);
        f.pool.writePages(l, 0, 12, zeros.data(), zeros.size());
    }
    AcquireResult r = m.acquireVanilla(a, 13);
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    EXPECT_EQ(r.plan.reuseTokenLength, 0);
    std::vector<PageId> const& lease = r.lease->basePages();
    EXPECT_THROW(tier.extendHit(a, 13, 0), ContractError);  // a tier with bytes loads by copying
    EXPECT_EQ(tier.loadHit(a, 13, 0, lease.data(), lease.size()), 3);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(f.page(lease[i]), f.filled(aPages[i])) << "block " << i;
    EXPECT_EQ(tier.metrics().bytesToDevice, 3 * device::hostSlotPayloadBytes(f.pool));
    // A slot whose header no longer names its block (it changed under us) ends the hit before it.
    int32_t const second = tier.index().find(H(2));
    ASSERT_NE(second, HostTierIndex::kNoSlot);
    reinterpret_cast<HostSlotHeader*>(memory.bytes() + static_cast<size_t>(second) * slot)->hashLo ^= 1;
    EXPECT_EQ(tier.loadHit(a, 13, 0, lease.data(), lease.size()), 1);
    EXPECT_EQ(tier.metrics().failedLoads, 2u);
    EXPECT_EQ(tier.index().find(H(2)), HostTierIndex::kNoSlot);  // dropped: its bytes are not trusted
    EXPECT_THROW(tier.loadHit(a, 13, 0, lease.data(), 0), ContractError);  // the lease lacks pages for the run
    r.lease.reset();
    tier.checkInvariants();
    m.checkInvariants();
}

// EAGLE (slots with room for a draft page): the slot of block j holds the draft page of block j - 1, which block
// j's hash determines; an evicted run's parent (still on the device) is written first, base page only; a slot held
// without its draft page gets it from a later write; a speculative load of k slots loads k - 1 blocks, base pages
// from the first k - 1 slots and draft pages from the last k - 1.
TEST(HostTierBytes, EagleSlotsHoldTheDraftPageOfTheBlockBeforeAndASpecLoadStopsOneShort) {
    BytesFixture f;
    device::KvPagePool draft{*f.backend, device::KvPoolGeometry{6, kPage, device::DType::kFp16, {{1, 8}}}};
    std::vector<uint8_t> draftBytes(draft.layerBytes(0));
    for (size_t i = 0; i < draftBytes.size(); ++i) draftBytes[i] = static_cast<uint8_t>(i * 13 + 5);
    draft.writePages(0, 0, 12, draftBytes.data(), draftBytes.size());
    auto draftPage = [&](PageId p) {  // K then V of the draft pool's one layer
        std::vector<uint8_t> out;
        for (int32_t kv = 0; kv < 2; ++kv) {
            std::vector<uint8_t> b(draft.pageBytes(0));
            draft.readPages(0, p + kv * 6, 1, b.data(), b.size());
            out.insert(out.end(), b.begin(), b.end());
        }
        return out;
    };
    auto filledDraft = [&](PageId q) {
        std::vector<uint8_t> out;
        size_t const pb = draft.pageBytes(0);
        for (int32_t kv = 0; kv < 2; ++kv) {
            auto first = draftBytes.begin() + static_cast<std::ptrdiff_t>((q + kv * 6) * pb);
            out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(pb));
        }
        return out;
    };
    size_t const slot = HostTier::slotBytes(f.pool, &draft);
    EXPECT_EQ(slot, (HostTier::kHeaderBytes + device::hostSlotPayloadBytes(f.pool) +
                     device::hostSlotPayloadBytes(draft) + 255) /
                        256 * 256);
    device::HostBuffer memory(*f.backend, 8 * slot);
    ContextCacheManager m(kPage, {6, 6, 0, 0}, 8);
    HostTier tier(m, {8, HostWritePolicy::kWriteBack}, HostTierStorage{&f.pool, &memory, {}, &draft});
    EXPECT_TRUE(tier.holdsDrafts());
    auto publishSpec = [&](std::vector<BlockHash> const& hashes) {
        int32_t const tokens = static_cast<int32_t>(hashes.size()) * kPage + 1;
        AcquireResult r = m.acquireSpec(hashes, tokens);
        EXPECT_EQ(r.status, AcquireStatus::kAcquired);
        EXPECT_EQ(m.publish(*r.lease, PublishRequest{hashes, tokens}).status, PublishStatus::kPublished);
        return std::vector<PageId>(r.lease->draftPages().begin(), r.lease->draftPages().begin() + 3);
    };
    auto evictWithAColdPrompt = [&](int32_t pages) {  // a cold speculative prompt that needs `pages` of each pool
        AcquireResult r = m.acquireSpec(Hs({}), pages * kPage);
        ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    };
    std::vector<PageId> const aDraft = publishSpec(Hs({1, 2, 3}));  // A: drafts d0 d1 d2
    std::vector<PageId> const bDraft = publishSpec(Hs({1, 2, 7}));  // B: hits A at boundary 2, binds d0
    EXPECT_EQ(bDraft[0], aDraft[0]);
    // Evict A: only block 3 leaves the device (1 and 2 are B's too). Its slot takes A's draft page of block 2, and
    // block 2 (the run's parent) is written first, base page only.
    evictWithAColdPrompt(2);
    EXPECT_EQ(tier.metrics().writtenBlocks, 2u);
    int32_t const slot2 = tier.index().find(H(2));
    int32_t const slot3 = tier.index().find(H(3));
    ASSERT_NE(slot2, HostTierIndex::kNoSlot);
    ASSERT_NE(slot3, HostTierIndex::kNoSlot);
    auto headerOf = [&](int32_t s) {
        return *reinterpret_cast<HostSlotHeader const*>(memory.bytes() + static_cast<size_t>(s) * slot);
    };
    EXPECT_EQ(headerOf(slot2).draft, 0);
    EXPECT_EQ(headerOf(slot3).draft, 1);
    EXPECT_EQ(tier.metrics().bytesToHost,
              2 * device::hostSlotPayloadBytes(f.pool) + device::hostSlotPayloadBytes(draft));
    // Evict B: blocks 1, 2, 7 leave. Block 2 is held without its draft page: it gets B's (the d0 B bound).
    evictWithAColdPrompt(5);
    EXPECT_EQ(headerOf(slot2).draft, 1);
    EXPECT_EQ(tier.index().residentCount(), 4u);  // 1, 2, 3, 7
    // Scribble over both pools: what comes back comes from the tier.
    for (int32_t l = 0; l < f.pool.numLayers(); ++l) {
        std::vector<uint8_t> junk(f.pool.layerBytes(l), 0xEE);
        f.pool.writePages(l, 0, 12, junk.data(), junk.size());
    }
    std::vector<uint8_t> junk(draft.layerBytes(0), 0xEE);
    draft.writePages(0, 0, 12, junk.data(), junk.size());
    std::vector<BlockHash> const prompt = Hs({1, 2, 3, 4});
    AcquireResult r = m.acquireSpec(prompt, 17);
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    EXPECT_EQ(r.plan.reuseTokenLength, 0);
    std::vector<PageId> const base = r.lease->basePages();  // copies: used after the lease is released
    std::vector<PageId> const drafts = r.lease->draftPages();
    // Slots 1, 2, 3 (4 is not held): blocks 1 and 2 load, with the draft pages of blocks 1 and 2 from slots 2, 3.
    EXPECT_THROW(tier.loadHit(prompt, 17, 0, base.data(), base.size(), drafts.data(), 0), ContractError);
    EXPECT_EQ(tier.loadHit(prompt, 17, 0, base.data(), base.size(), drafts.data(), drafts.size()), 2);
    EXPECT_EQ(draftPage(drafts[0]), filledDraft(aDraft[0]));
    EXPECT_EQ(draftPage(drafts[1]), filledDraft(aDraft[1]));
    EXPECT_EQ(tier.metrics().bytesToDevice,
              2 * (device::hostSlotPayloadBytes(f.pool) + device::hostSlotPayloadBytes(draft)));
    // A prompt that goes on with block 7 after 2: block 2's draft page is B's, so the run 1, 2, 7 loads 1 and 2.
    EXPECT_EQ(tier.loadHit(Hs({1, 2, 7}), 13, 0, base.data(), base.size(), drafts.data(), drafts.size()), 2);
    // Hashes past the prompt's full blocks are not slots of it: {1, 2, 3} over 8 tokens loads block 1 only.
    EXPECT_EQ(tier.loadHit(Hs({1, 2, 3}), 8, 0, base.data(), base.size(), drafts.data(), drafts.size()), 1);
    // One slot alone loads nothing; a base-only load still takes it.
    EXPECT_EQ(tier.loadHit(Hs({1, 9}), 9, 0, base.data(), base.size(), drafts.data(), drafts.size()), 0);
    EXPECT_EQ(tier.loadHit(Hs({1, 9}), 9, 0, base.data(), base.size()), 1);
    r.lease.reset();
    tier.checkInvariants();
    m.checkInvariants();
    // Draft pages given to a tier without a draft pool: refused.
    ContextCacheManager other(kPage, {6, 0, 0, 0}, 8);
    device::HostBuffer plain(*f.backend, 8 * HostTier::slotBytes(f.pool));
    HostTier baseOnly(other, {8, HostWritePolicy::kWriteBack}, HostTierStorage{&f.pool, &plain, {}});
    EXPECT_THROW(baseOnly.loadHit(prompt, 17, 0, base.data(), base.size(), drafts.data(), drafts.size()),
                 ContractError);
}

// The bookkeeping mode's EAGLE model predicts the bytes mode: two EAGLE managers, one whose tier holds the bytes
// (a base and a draft pool), one whose tier keeps bookkeeping only, serve the same random speculative requests
// (shared prefixes, so runs are written with their parents and held slots gain draft pages). Every load agrees
// block for block, under both write policies, and so do the tiers' counters.
TEST(HostTierBytes, TheBookkeepingModeLoadsWhatTheBytesModeLoadsForEagle) {
    constexpr int32_t kPages = 24, kSlots = 40;
    std::unique_ptr<device::DeviceBackend> backend = device::createCpuBackend();
    device::KvPagePool base{*backend, device::KvPoolGeometry{kPages, kPage, device::DType::kFp16, {{1, 4}}}};
    device::KvPagePool draft{*backend, device::KvPoolGeometry{kPages, kPage, device::DType::kFp16, {{1, 4}}}};
    device::HostBuffer memory(*backend, kSlots * HostTier::slotBytes(base, &draft));
    for (HostWritePolicy policy : {HostWritePolicy::kWriteBack, HostWritePolicy::kWriteThrough}) {
        ContextCacheManager withBytes(kPage, {kPages, kPages, 0, 0}, 64);
        ContextCacheManager bookkept(kPage, {kPages, kPages, 0, 0}, 64);
        HostTier bytesTier(withBytes, {kSlots, policy}, HostTierStorage{&base, &memory, {}, &draft});
        HostTier model(bookkept, {kSlots, policy});
        ASSERT_TRUE(model.modelsDrafts());
        ASSERT_FALSE(model.holdsBytes());
        std::map<std::pair<uint64_t, int>, BlockHash> chain;  // (parent, block id) -> hash: a prefix's own hashes
        std::mt19937 rng(policy == HostWritePolicy::kWriteBack ? 5 : 6);
        int64_t loaded = 0, shortened = 0;
        for (int step = 0; step < 800; ++step) {
            std::vector<int> ids;
            int const prefix = static_cast<int>(rng() % 3);
            for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i) ids.push_back(prefix * 10 + i);
            for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i)
                ids.push_back(50 + static_cast<int>(rng() % 3));
            if (ids.empty()) continue;
            std::vector<BlockHash> hashes;
            uint64_t parent = 0;
            for (int id : ids) {
                auto [it, added] = chain.try_emplace({parent, id}, BlockHash{0, chain.size() + 1});
                hashes.push_back(it->second);
                parent = it->second.lo;
            }
            int32_t const tokens = static_cast<int32_t>(hashes.size()) * kPage + static_cast<int32_t>(rng() % 3);
            AcquireResult a = withBytes.acquireSpec(hashes, tokens);
            AcquireResult b = bookkept.acquireSpec(hashes, tokens);
            ASSERT_EQ(a.status, b.status) << "step " << step;
            if (!a.lease) continue;
            ASSERT_EQ(a.plan.reuseTokenLength, b.plan.reuseTokenLength) << "step " << step;
            int32_t const device = a.plan.reuseTokenLength / kPage;
            std::vector<PageId> const pages = a.lease->basePages(), drafts = a.lease->draftPages();
            int32_t const fromBytes =
                bytesTier.loadHit(hashes, tokens, device, pages.data(), pages.size(), drafts.data(), drafts.size());
            int32_t const fromModel = model.extendSpecHit(hashes, tokens, device);
            ASSERT_EQ(fromBytes, fromModel) << "step " << step;
            loaded += fromModel;
            // A run the tier holds further than it loads: a slot without its draft page (or the prompt's end).
            shortened += model.index().residentRun(hashes.data() + device, hashes.size() - device) >
                         static_cast<size_t>(fromModel) + 1;
            ASSERT_EQ(withBytes.publish(*a.lease, PublishRequest{hashes, tokens}).status,
                      bookkept.publish(*b.lease, PublishRequest{hashes, tokens}).status);
            a.lease.reset();
            b.lease.reset();
            bytesTier.checkInvariants();
            model.checkInvariants();
        }
        HostTierMetrics const& x = bytesTier.metrics();
        HostTierMetrics const& y = model.metrics();
        EXPECT_EQ(x.loadedBlocks, y.loadedBlocks);
        EXPECT_EQ(x.hitRequests, y.hitRequests);
        EXPECT_EQ(x.writtenBlocks, y.writtenBlocks);
        EXPECT_EQ(x.skippedWrites, y.skippedWrites);
        EXPECT_EQ(x.droppedBlocks, y.droppedBlocks);
        EXPECT_EQ(x.failedLoads, 0u);
        EXPECT_EQ(static_cast<int64_t>(y.loadedBlocks), loaded);
        EXPECT_GT(loaded, 100);     // the tier serves many speculative hits...
        EXPECT_GT(y.droppedBlocks, 0u);  // ...while dropping blocks for room...
        // ...and, written through at publication, some slots lack the draft page of the block before them (their
        // writer did not know it), so some runs stop one short of what the tier holds.
        if (policy == HostWritePolicy::kWriteThrough) EXPECT_GT(shortened, 0);
    }
    // The speculative extension needs a bookkeeping tier of an EAGLE manager.
    ContextCacheManager plain(kPage, {kPages, 0, 0, 0}, 8);
    HostTier baseOnly(plain, {8, HostWritePolicy::kWriteBack});
    EXPECT_FALSE(baseOnly.modelsDrafts());
    EXPECT_THROW(baseOnly.extendSpecHit(Hs({1, 2}), 9, 0), ContractError);
    ContextCacheManager eagle(kPage, {kPages, kPages, 0, 0}, 8);
    HostTier withBytes(eagle, {kSlots, HostWritePolicy::kWriteBack}, HostTierStorage{&base, &memory, {}, &draft});
    EXPECT_THROW(withBytes.extendSpecHit(Hs({1, 2}), 9, 0), ContractError);  // bytes: loadHit copies them
    EXPECT_EQ(baseOnly.metrics().extendCalls, 0u);
}

TEST(HostTierBytes, AFailedCopyLosesTheBlocksNeverTheState) {
    BytesFixture f;
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    device::HostBuffer memory(*f.backend, 8 * HostTier::slotBytes(f.pool));
    bool fail = true;
    HostTier tier(m, {8, HostWritePolicy::kWriteThrough}, HostTierStorage{&f.pool, &memory, [&] { return !fail; }});
    std::vector<BlockHash> const a = Hs({1, 2, 3});
    publishPrompt(m, a);  // the write-through copy's synchronisation fails: nothing is written
    EXPECT_EQ(tier.metrics().failedWrites, 3u);
    EXPECT_EQ(tier.index().residentCount(), 0u);
    EXPECT_EQ(tier.index().writingCount(), 0u);
    fail = false;
    publishPrompt(m, Hs({5}));
    EXPECT_EQ(tier.index().residentCount(), 1u);
    fail = true;
    AcquireResult r = m.acquireVanilla(Hs({5, 6}), 9);
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    std::vector<PageId> const& lease = r.lease->basePages();
    EXPECT_EQ(tier.loadHit(Hs({5, 6}), 9, 1, lease.data(), lease.size()), 0);  // the device already has 5
    r.lease.reset();
    // Too little memory for the slots, or memory of another backend: refused.
    device::HostBuffer small(*f.backend, 100);
    ContextCacheManager other(kPage, {6, 0, 0, 0}, 8);
    EXPECT_THROW(HostTier(other, {8, HostWritePolicy::kWriteBack}, HostTierStorage{&f.pool, &small, {}}),
                 ContractError);
    auto otherBackend = device::createCpuBackend();
    device::HostBuffer foreign(*otherBackend, 8 * HostTier::slotBytes(f.pool));
    EXPECT_THROW(HostTier(other, {8, HostWritePolicy::kWriteBack}, HostTierStorage{&f.pool, &foreign, {}}),
                 ContractError);
    EXPECT_EQ(other.baseBlockObserver(), nullptr);
    tier.checkInvariants();
}

}  // namespace
}  // namespace ctxcache::tier

namespace ctxcache::tier {
namespace {

std::vector<int32_t> tokensFrom(int32_t first, int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
    return t;
}

void publishWithTokens(ContextCacheManager& m, std::vector<BlockHash> const& hashes,
                       std::vector<int32_t> const& tokens) {
    int32_t const n = static_cast<int32_t>(tokens.size());
    AcquireResult r = m.acquireVanilla(hashes, n);
    ASSERT_EQ(r.status, AcquireStatus::kAcquired);
    PublishRequest request{hashes, n};
    request.tokenIds = tokens;
    ASSERT_EQ(m.publish(*r.lease, request).status, PublishStatus::kPublished);
}

std::vector<uint64_t> hashesOf(KvEventLog const& log, KvEvent const& e) {
    return {log.hashes().begin() + static_cast<std::ptrdiff_t>(e.firstHash),
            log.hashes().begin() + static_cast<std::ptrdiff_t>(e.firstHash + e.hashCount)};
}

TEST(HostTierEvents, TheTiersBlocksAreReportedAsHostMediumAfterTheDevicesOwnEvents) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    m.enableKvEvents();
    HostTier tier(m, {4, HostWritePolicy::kWriteBack});
    KvEventLog log;
    m.drainKvEvents(log);  // AllBlocksCleared
    std::vector<int32_t> const a = tokensFrom(100, 13);
    publishWithTokens(m, Hs({1, 2, 3}), a);
    publishWithTokens(m, Hs({7, 8, 9, 10, 11}), tokensFrom(500, 21));  // evicts a: written back
    m.drainKvEvents(log);
    std::vector<KvEvent> const& events = log.events();
    // GPU stored a, GPU removed a (leaf-first), CPU stored a (root-first, a's tokens), GPU stored b.
    ASSERT_EQ(events.size(), 4u);
    EXPECT_EQ(events[0].type, KvEventType::kBlockStored);
    EXPECT_EQ(events[0].medium, KvEventMedium::kDevice);
    EXPECT_EQ(events[1].type, KvEventType::kBlockRemoved);
    EXPECT_EQ(events[1].medium, KvEventMedium::kDevice);
    KvEvent const& host = events[2];
    EXPECT_EQ(host.type, KvEventType::kBlockStored);
    EXPECT_EQ(host.medium, KvEventMedium::kHost);
    EXPECT_FALSE(host.hasParent);
    EXPECT_EQ(hashesOf(log, host),
              (std::vector<uint64_t>{kvEventBlockHash(H(1)), kvEventBlockHash(H(2)), kvEventBlockHash(H(3))}));
    ASSERT_EQ(host.tokenCount, 12u);
    EXPECT_EQ(std::vector<int32_t>(log.tokens().begin() + static_cast<std::ptrdiff_t>(host.firstToken),
                                   log.tokens().begin() + static_cast<std::ptrdiff_t>(host.firstToken + 12)),
              std::vector<int32_t>(a.begin(), a.begin() + 12));
    EXPECT_EQ(events[3].medium, KvEventMedium::kDevice);
    // A prompt sharing a's first block: evicting b writes b's five blocks; the 4-slot tier drops a's (leaf first)
    // and reports each drop.
    publishWithTokens(m, Hs({1, 20}), tokensFrom(100, 9));
    m.drainKvEvents(log);
    size_t hostRemoved = 0, hostStored = 0;
    for (KvEvent const& e : log.events()) {
        if (e.medium != KvEventMedium::kHost) continue;
        if (e.type == KvEventType::kBlockRemoved) hostRemoved += e.hashCount;
        if (e.type == KvEventType::kBlockStored) hostStored += e.hashCount;
    }
    EXPECT_EQ(tier.metrics().droppedBlocks, hostRemoved);
    EXPECT_GT(hostRemoved, 0u);
    EXPECT_EQ(hostStored, tier.metrics().writtenBlocks - 3);
    tier.checkInvariants();
    // Events off: the tier reports nothing, and a publication without tokens gives it nothing to report.
    m.disableKvEvents();
    publishWithTokens(m, Hs({30}), tokensFrom(900, 5));
    EXPECT_EQ(m.pendingKvEventCount(), 0u);
}

TEST(HostTierEvents, ATierOfAnyCapacityReportsWithoutAllocatingForItsCapacity) {
#ifdef CTXC_UNDER_ASAN
    GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix";
#else
    // Found by the capi fuzzer (tests/fuzz/corpus/host-tier-events-huge-capacity): with events on, the first
    // write sized a flag per slot of the capacity, 2 GiB for a tier of 2^31 - 1 pages. The flags grow with the
    // slots used: in 256 MiB of headroom the write-back is reported and nothing is refused.
    test::expectCompletesWithinAddressSpace(size_t{256} << 20, [] {
        ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
        m.enableKvEvents();
        HostTier tier(m, {INT32_MAX, HostWritePolicy::kWriteBack});
        publishWithTokens(m, Hs({1, 2, 3}), tokensFrom(100, 13));
        publishWithTokens(m, Hs({7, 8, 9, 10, 11}), tokensFrom(500, 21));  // evicts the first: written back
        KvEventLog log;
        m.drainKvEvents(log);
        size_t hostStored = 0;
        for (KvEvent const& e : log.events())
            if (e.medium == KvEventMedium::kHost && e.type == KvEventType::kBlockStored) hostStored += e.hashCount;
        if (tier.metrics().writtenBlocks != 3 || tier.metrics().refusedWrites != 0 || hostStored != 3)
            throw std::runtime_error("the write-back was refused or not reported");
        tier.checkInvariants();
    });
#endif
}

}  // namespace
}  // namespace ctxcache::tier
