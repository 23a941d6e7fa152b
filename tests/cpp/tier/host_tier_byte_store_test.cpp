// A host tier over a byte store (issue 27, StoreLink): two replicas, each its own pool, manager and host tier, one
// shared MemoryKvStore. What one replica publishes is put from its host slots; the other, cold, loads it byte for
// byte through its own host slots. Every object the store hands back that is not exactly what was put (corrupt,
// short, foreign, of another layout, of another block, of another length, too large) is a miss, counted by
// verdict, and its key is not asked again until the negative cache lets it; a slow, unavailable or full store costs
// reuse within the deadline, never wrong bytes; the breaker stops asking a store that keeps failing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/host_buffer.h"
#include "ctxcache/errors.h"
#include "ctxcache/tier/host_tier.h"
#include "ctxcache/tier/memory_kv_store.h"
#include "ctxcache/tier/store_object.h"
#include "support/test_support.h"
#include "support/tier_test_support.h"

namespace ctxcache::tier {
namespace {

using namespace std::chrono_literals;
using test::BytesFixture;
using test::H;
using test::Hs;
using test::kPage;
using test::publishPrompt;

constexpr char kPrefix[] = "test-model@tp_rank:0@pp_rank:0@kv:fp16:p4:l2:0000000000000000@sha256@";

StoreLinkOptions link(std::shared_ptr<MemoryKvStore> store, StoreLoadPolicy policy = StoreLoadPolicy::kWait) {
    StoreLinkOptions o;
    o.store = std::move(store);
    o.keyPrefix = kPrefix;
    o.policy = policy;
    o.loadDeadline = 500ms;
    o.minAskBlocks = 1;
    o.worker.breakerCooldown = 200ms;
    return o;
}

std::string key(BlockHash const& h) { return storeKey(kPrefix, h); }

// One replica: a pool whose pages hold their filled bytes, a manager of 6 pages, a host tier of 8 slots over a store.
struct Replica {
    BytesFixture f;
    ContextCacheManager m{kPage, {6, 0, 0, 0}, 8};
    device::HostBuffer memory{*f.backend, 8 * HostTier::slotBytes(f.pool)};
    HostTier tier;
    Replica(StoreLinkOptions const& options, HostWritePolicy policy = HostWritePolicy::kWriteThrough)
        : tier(m, config(options, policy), HostTierStorage{&f.pool, &memory, {}}) {}
    static HostTierConfig config(StoreLinkOptions const& options, HostWritePolicy policy) {
        HostTierConfig c;
        c.capacityPages = 8;
        c.writePolicy = policy;
        c.storeLink = options;
        return c;
    }
    // Applies the store's completions until none is in flight (bounded: 5 s).
    void settle() {
        for (int i = 0; i < 500 && (tier.pollStore(), tier.storeBatchesInFlight() > 0); ++i)
            std::this_thread::sleep_for(10ms);
        ASSERT_EQ(tier.storeBatchesInFlight(), 0u);
    }
    void scribble() {  // every page of the pool overwritten: what a load brings comes from the tier
        for (int32_t l = 0; l < f.pool.numLayers(); ++l) {
            std::vector<uint8_t> junk(f.pool.layerBytes(l), 0xEE);
            f.pool.writePages(l, 0, 12, junk.data(), junk.size());
        }
    }
    // Acquires `hashes` (+1 token) cold and loads what the tier can; returns the blocks loaded and their pages.
    int32_t load(std::vector<BlockHash> const& hashes, std::vector<PageId>* pages = nullptr) {
        int32_t const tokens = static_cast<int32_t>(hashes.size()) * kPage + 1;
        AcquireResult r = m.acquireVanilla(hashes, tokens);
        EXPECT_EQ(r.status, AcquireStatus::kAcquired);
        if (!r.lease) return -1;
        int32_t const device = r.plan.reuseTokenLength / kPage;
        std::vector<PageId> const& lease = r.lease->basePages();
        int32_t const loaded = tier.loadHit(hashes, tokens, device, lease.data(), lease.size());
        if (pages) pages->assign(lease.begin(), lease.end());
        tier.checkInvariants();
        m.checkInvariants();
        return loaded;
    }
};

TEST(HostTierByteStore, AReplicaLoadsWhatAnotherPublishedByteForByte) {
    auto store = std::make_shared<MemoryKvStore>();
    Replica a(link(store));
    std::vector<BlockHash> const chain = Hs({1, 2, 3});
    std::vector<PageId> const aPages = publishPrompt(a.m, chain);  // write-through: host slots, then the store
    a.settle();
    EXPECT_EQ(store->objects(), 3u);
    EXPECT_EQ(a.tier.storeLinkMetrics().putBlocks, 3u);
    EXPECT_EQ(a.tier.index().pinnedCount(), 0u);  // the put's pins went back with its completion
    publishPrompt(a.m, Hs({1, 2, 3, 4}));          // 1..3 are known to be held: only 4 is put
    a.settle();
    EXPECT_EQ(a.tier.storeLinkMetrics().putBlocks, 4u);
    EXPECT_EQ(store->counters().putKeys, 4u);

    Replica b(link(store));
    b.scribble();
    std::vector<PageId> pages;
    EXPECT_EQ(b.load(chain, &pages), 3);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(b.f.page(pages[i]), a.f.filled(aPages[i])) << "block " << i;
    HostTierMetrics const& m = b.tier.metrics();
    EXPECT_EQ(m.storeLoadedBlocks, 3u);
    EXPECT_EQ(m.loadedBlocks, 0u);  // none was the host's own
    EXPECT_EQ(m.storeHitRequests, 1u);
    EXPECT_EQ(b.tier.storeLinkMetrics().askedBlocks, 3u);
    EXPECT_EQ(b.tier.storeLinkMetrics().loadedBlocks, 3u);
    EXPECT_EQ(b.tier.index().residentCount(), 3u);  // the objects are B's host blocks now
    EXPECT_EQ(b.tier.index().pinnedCount(), 0u);
    // B asks again: the host holds them, the store is not asked.
    EXPECT_EQ(b.load(chain), 3);
    EXPECT_EQ(b.tier.storeLinkMetrics().askedBlocks, 3u);
    EXPECT_EQ(b.tier.metrics().loadedBlocks, 3u);
    // B's puts skip what it got from the store (known held).
    b.settle();
    EXPECT_EQ(store->counters().putKeys, 4u);
}

TEST(HostTierByteStore, TheRunGoesFromTheHostToTheStoreAndBack) {
    auto store = std::make_shared<MemoryKvStore>();
    Replica a(link(store));
    publishPrompt(a.m, Hs({1, 2, 3, 4}));
    a.settle();
    ASSERT_TRUE(store->erase(key(H(1))));  // the store lacks block 1, which B's host will hold
    Replica b(link(store));
    publishPrompt(b.m, Hs({1}));                    // written through to B's host tier
    publishPrompt(b.m, Hs({20, 21, 22, 23, 24}));  // evicts block 1 from B's device
    ASSERT_NE(b.tier.index().find(H(1)), HostTierIndex::kNoSlot);
    b.settle();  // B's own puts done: their slots unpinned (a slot being put is never dropped for room)
    EXPECT_EQ(b.load(Hs({1, 2, 3, 4})), 4);  // 1 from the host, 2..4 from the store
    EXPECT_EQ(b.tier.metrics().loadedBlocks, 1u);
    EXPECT_EQ(b.tier.metrics().storeLoadedBlocks, 3u);
}

// Rewrites the object under `k` with f(object).
template <class F>
void tamper(MemoryKvStore& store, std::string const& k, size_t objectBytes, F f) {
    std::vector<unsigned char> object(objectBytes);
    void* buffer = object.data();
    int64_t result = 0;
    store.get(&k, &buffer, &objectBytes, 1, StoreClock::now() + 1s, &result);
    ASSERT_EQ(result, static_cast<int64_t>(objectBytes));
    f(object);
    store.overwrite(k, std::move(object));
}

TEST(HostTierByteStore, EveryObjectThatIsNotWhatWasPutIsAMissCountedByVerdict) {
    auto store = std::make_shared<MemoryKvStore>();
    StoreLinkOptions options = link(store);
    options.negativeTtl = 100ms;
    Replica a(options);
    size_t const payload = device::hostSlotPayloadBytes(a.f.pool);
    size_t const objectBytes = sizeof(StoreObjectHeader) + payload;
    Replica b(options);
    b.scribble();
    auto header = [](std::vector<unsigned char>& o) { return reinterpret_cast<StoreObjectHeader*>(o.data()); };
    struct Fault {
        char const* name;
        std::function<void(std::vector<unsigned char>&)> apply;
        uint64_t StoreLinkMetrics::* counter;
    };
    std::vector<Fault> const faults = {
        {"corrupt", [&](auto& o) { o[sizeof(StoreObjectHeader) + 10] ^= 0x40; }, &StoreLinkMetrics::rejectedCorrupt},
        {"short", [&](auto& o) { o.resize(sizeof(StoreObjectHeader) + payload / 2); },
         &StoreLinkMetrics::rejectedShort},
        {"foreign", [&](auto& o) { header(o)->magic ^= 1; }, &StoreLinkMetrics::rejectedForeign},
        {"other layout", [&](auto& o) { header(o)->layoutDigest ^= 1; }, &StoreLinkMetrics::rejectedOtherLayout},
        {"other block", [&](auto& o) { header(o)->hashLo ^= 1; }, &StoreLinkMetrics::rejectedOtherBlock},
        {"wrong length",
         [&](auto& o) {
        StoreObjectHeader const h = *header(o);
        o.resize(o.size() - 8);
        StoreObjectHeader const shorter = encodeStoreObjectHeader(h.layoutDigest, BlockHash{h.hashHi, h.hashLo},
                                                                  h.tokens, o.data() + sizeof(h), payload - 8);
        std::memcpy(o.data(), &shorter, sizeof(shorter));
    }, &StoreLinkMetrics::rejectedWrongLength},
        {"too large", [&](auto& o) { o.resize(o.size() + 256); }, &StoreLinkMetrics::failedLoads},
    };
    uint64_t block = 100;
    for (Fault const& fault : faults) {
        SCOPED_TRACE(fault.name);
        std::vector<BlockHash> const chain = Hs({block, block + 1});
        block += 10;
        publishPrompt(a.m, chain);
        a.settle();
        tamper(*store, key(chain[0]), objectBytes, fault.apply);
        StoreLinkMetrics const before = b.tier.storeLinkMetrics();
        EXPECT_EQ(b.load(chain), 0);  // the first block is refused: nothing loaded
        StoreLinkMetrics const after = b.tier.storeLinkMetrics();
        EXPECT_EQ(after.*fault.counter, before.*fault.counter + 1);
        if (fault.counter != &StoreLinkMetrics::failedLoads) EXPECT_EQ(after.rejectedLoads, before.rejectedLoads + 1);
        EXPECT_EQ(b.tier.index().find(chain[0]), HostTierIndex::kNoSlot);  // never a host block
        // The second block was valid: it is a host block now, of no use without the first.
        EXPECT_NE(b.tier.index().find(chain[1]), HostTierIndex::kNoSlot);
        // Asked again at once: the negative cache cuts the ask (nothing asked); after its TTL the key is asked.
        EXPECT_EQ(b.load(chain), 0);
        EXPECT_EQ(b.tier.storeLinkMetrics().askedBlocks, after.askedBlocks);
        EXPECT_EQ(b.tier.storeLinkMetrics().negativeSkips, after.negativeSkips + 1);
        std::this_thread::sleep_for(120ms);
        EXPECT_EQ(b.load(chain), 0);
        EXPECT_EQ(b.tier.storeLinkMetrics().askedBlocks, after.askedBlocks + 1);
    }
    EXPECT_EQ(b.tier.storeLinkMetrics().loadedBlocks, faults.size());  // the second blocks only
    EXPECT_EQ(b.tier.metrics().storeLoadedBlocks, 0u);
}

TEST(HostTierByteStore, ASlowStoreCostsReuseWithinTheDeadlineAndFillsTheHostLater) {
    auto store = std::make_shared<MemoryKvStore>();
    Replica a(link(store));
    publishPrompt(a.m, Hs({1, 2, 3}));
    a.settle();
    StoreLinkOptions options = link(store);
    options.loadDeadline = 30ms;
    Replica b(options);
    store->setLatency(300ms);  // each call sleeps up to its deadline: the ask times out
    auto const start = StoreClock::now();
    EXPECT_EQ(b.load(Hs({1, 2, 3})), 0);
    auto const waited = StoreClock::now() - start;
    EXPECT_LT(waited, 30ms + 50ms);
    EXPECT_GE(waited, 25ms);
    store->setLatency(0ms);
    b.settle();  // the timed-out ask's answer (kStoreTimedOut) is applied: nothing got
    EXPECT_EQ(b.tier.index().residentCount(), 0u);

    // Best effort: the extension never waits; the answers fill the host tier for the next request.
    StoreLinkOptions best = link(store, StoreLoadPolicy::kBestEffort);
    Replica c(best);
    store->setLatency(20ms);
    auto const t0 = StoreClock::now();
    EXPECT_EQ(c.load(Hs({1, 2, 3})), 0);
    EXPECT_LT(StoreClock::now() - t0, 50ms);  // (no wait: only the lease and the ask)
    c.settle();  // the existence answer starts the get; its objects become host blocks
    EXPECT_EQ(c.tier.index().residentCount(), 3u);
    EXPECT_EQ(c.load(Hs({1, 2, 3})), 3);
    EXPECT_EQ(c.tier.metrics().loadedBlocks, 3u);  // the host's by then
}

TEST(HostTierByteStore, AnUnavailableStoreOpensTheBreakerAndAFullOneDropsPuts) {
    auto store = std::make_shared<MemoryKvStore>();
    Replica a(link(store));
    publishPrompt(a.m, Hs({1, 2, 3}));
    a.settle();
    Replica b(link(store));
    store->setAvailable(false);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b.load(Hs({1, 2, 3})), 0);  // three failed asks: the breaker opens
    EXPECT_EQ(b.tier.storeWorkerCounters().breakerOpenings, 1u);
    StoreLinkMetrics const open = b.tier.storeLinkMetrics();
    EXPECT_EQ(b.load(Hs({1, 2, 3})), 0);  // not asked
    EXPECT_EQ(b.tier.storeLinkMetrics().breakerRefusals, open.breakerRefusals + 1);
    EXPECT_EQ(b.tier.storeLinkMetrics().askedBlocks, open.askedBlocks);
    store->setAvailable(true);
    std::this_thread::sleep_for(250ms);  // the cool-down: the next ask is let through and closes the breaker
    EXPECT_EQ(b.load(Hs({1, 2, 3})), 3);
    EXPECT_EQ(b.tier.metrics().storeLoadedBlocks, 3u);

    // A full store refuses puts (-200): dropped, counted; the slots' pins go back.
    auto tiny = std::make_shared<MemoryKvStore>(1);
    Replica c(link(tiny));
    publishPrompt(c.m, Hs({7, 8}));
    c.settle();
    EXPECT_EQ(c.tier.storeLinkMetrics().droppedPuts, 2u);
    EXPECT_EQ(c.tier.storeLinkMetrics().putBlocks, 0u);
    EXPECT_EQ(c.tier.index().pinnedCount(), 0u);
    // A failing store: the puts fail, counted.
    auto failing = std::make_shared<MemoryKvStore>();
    failing->failNextCalls(1);
    Replica d(link(failing));
    publishPrompt(d.m, Hs({9}));
    d.settle();
    EXPECT_EQ(d.tier.storeLinkMetrics().failedPuts, 1u);
}

TEST(HostTierByteStore, DestroyingTheTierMidBatchReturnsByTheBatchsDeadline) {
    auto store = std::make_shared<MemoryKvStore>();
    StoreLinkOptions options = link(store);
    options.putDeadline = 100ms;
    store->setLatency(10s);
    auto const start = StoreClock::now();
    {
        Replica a(options);
        publishPrompt(a.m, Hs({1, 2}));  // a put batch is running, sleeping until its deadline
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_LT(StoreClock::now() - start, 100ms + 200ms);
}

TEST(HostTierByteStore, RefusesWhatItCannotHonour) {
    auto store = std::make_shared<MemoryKvStore>();
    BytesFixture f;
    device::HostBuffer memory(*f.backend, 8 * HostTier::slotBytes(f.pool));
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    HostTierConfig c;
    c.capacityPages = 8;
    c.storeLink = link(store);
    EXPECT_THROW(HostTier(m, c), ContractError);  // a byte store needs bytes
    HostTierConfig both = c;
    both.store = std::make_shared<BookkeepingStore>(8);
    EXPECT_THROW(HostTier(m, both, HostTierStorage{&f.pool, &memory, {}}), ContractError);
    HostTierConfig noPrefix = c;
    noPrefix.storeLink.keyPrefix.clear();
    EXPECT_THROW(HostTier(m, noPrefix, HostTierStorage{&f.pool, &memory, {}}), ContractError);
    HostTierConfig badDeadline = c;
    badDeadline.storeLink.putDeadline = 0ms;
    EXPECT_THROW(HostTier(m, badDeadline, HostTierStorage{&f.pool, &memory, {}}), ContractError);
    HostTierConfig badAsk = c;
    badAsk.storeLink.minAskBlocks = 0;
    EXPECT_THROW(HostTier(m, badAsk, HostTierStorage{&f.pool, &memory, {}}), ContractError);
    EXPECT_EQ(m.baseBlockObserver(), nullptr);  // every refusal left the manager as it was
    HostTier ok(m, c, HostTierStorage{&f.pool, &memory, {}});
    EXPECT_TRUE(ok.hasByteStore());
}

TEST(HostTierByteStore, TheAskRuleSkipsShortRuns) {
    auto store = std::make_shared<MemoryKvStore>();
    Replica a(link(store));
    publishPrompt(a.m, Hs({1, 2, 3}));
    a.settle();
    StoreLinkOptions options = link(store);
    options.minAskBlocks = 4;
    Replica b(options);
    EXPECT_EQ(b.load(Hs({1, 2, 3})), 0);  // 3 blocks left: below the rule, not asked
    EXPECT_EQ(b.tier.storeLinkMetrics().askedBlocks, 0u);
    EXPECT_EQ(store->counters().existCalls, 0u);
}

// A store whose puts take `putDelay` (a slow write path, a store evicting to make room); existence and gets are
// the in-memory store's, at once.
class SlowPutStore final : public KvStore {
public:
    explicit SlowPutStore(std::chrono::milliseconds putDelay) : putDelay_(putDelay) {}
    void exist(std::string const* keys, size_t count, StoreDeadline deadline, int64_t* results) override {
        inner.exist(keys, count, deadline, results);
    }
    void put(std::string const* keys, void const* const* data, size_t const* sizes, size_t count,
             StoreDeadline deadline, int64_t* results) override {
        std::this_thread::sleep_for(putDelay_);
        inner.put(keys, data, sizes, count, deadline, results);
    }
    void get(std::string const* keys, void* const* buffers, size_t const* capacities, size_t count,
             StoreDeadline deadline, int64_t* results) override {
        inner.get(keys, buffers, capacities, count, deadline, results);
    }
    MemoryKvStore inner;

private:
    std::chrono::milliseconds const putDelay_;
};

TEST(HostTierByteStore, AnAskNeverQueuesBehindSlowPuts) {
    auto store = std::make_shared<SlowPutStore>(400ms);
    StoreLinkOptions o;
    o.store = store;
    o.keyPrefix = kPrefix;
    o.loadDeadline = 100ms;
    o.minAskBlocks = 1;
    Replica a(o);
    publishPrompt(a.m, Hs({1, 2, 3}));
    a.settle();  // A's blocks are in the store (after its slow put)
    ASSERT_EQ(store->inner.objects(), 3u);
    Replica b(o);
    publishPrompt(b.m, Hs({7, 8}));   // B's own blocks: a put batch that takes 400 ms is running now
    publishPrompt(b.m, Hs({9}));      // ... and another queued behind it
    auto const t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(b.load(Hs({1, 2, 3})), 3);  // the ask and the get run beside the puts, within the 100 ms deadline
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 300ms);
    EXPECT_EQ(b.tier.storeLinkMetrics().lateBatches, 0u);
    EXPECT_EQ(b.tier.storeLinkMetrics().loadedBlocks, 3u);
    b.settle();
    EXPECT_EQ(b.tier.storeLinkMetrics().putBlocks, 3u);  // B's puts completed too
    EXPECT_EQ(store->inner.objects(), 6u);
}

}  // namespace
}  // namespace ctxcache::tier
