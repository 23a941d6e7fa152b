// The manager's KV event stream (include/ctxcache/kv_events.h): exactly the stores, removals and clears that the
// base index's changes imply, after a scripted sequence of publications, duplicates, evictions and a clear.
#include "ctxcache/kv_events.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/errors.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::describe;
using test::H;
using test::Hs;

constexpr int32_t kPage = 4;

// One decoded event, easy to compare.
struct Event {
    KvEventType type = KvEventType::kAllBlocksCleared;
    std::optional<uint64_t> parent;
    std::vector<uint64_t> hashes;
    std::vector<int32_t> tokens;

    friend bool operator==(Event const& a, Event const& b) {
        return a.type == b.type && a.parent == b.parent && a.hashes == b.hashes && a.tokens == b.tokens;
    }
};

std::ostream& operator<<(std::ostream& out, Event const& e) {
    char const* names[] = {"Stored", "Removed", "Cleared"};
    out << names[static_cast<int>(e.type)] << "(parent=";
    if (e.parent) out << *e.parent;
    else out << "nil";
    out << " hashes=" << test::describeList(e.hashes) << " tokens=" << test::describeList(e.tokens) << ')';
    return out;
}

std::vector<Event> decode(KvEventLog const& log) {
    std::vector<Event> out;
    for (KvEvent const& e : log.events()) {
        Event d;
        d.type = e.type;
        if (e.hasParent) d.parent = e.parentBlockHash;
        d.hashes.assign(log.hashes().begin() + static_cast<std::ptrdiff_t>(e.firstHash),
                        log.hashes().begin() + static_cast<std::ptrdiff_t>(e.firstHash + e.hashCount));
        d.tokens.assign(log.tokens().begin() + static_cast<std::ptrdiff_t>(e.firstToken),
                        log.tokens().begin() + static_cast<std::ptrdiff_t>(e.firstToken + e.tokenCount));
        out.push_back(std::move(d));
    }
    return out;
}

std::vector<Event> drain(ContextCacheManager& m) {
    KvEventLog log;
    m.drainKvEvents(log);
    EXPECT_EQ(log.blockSize, kPage);
    return decode(log);
}

Event stored(std::optional<uint64_t> parent, std::vector<BlockHash> const& hashes, std::vector<int32_t> tokens) {
    Event e{KvEventType::kBlockStored, parent, {}, std::move(tokens)};
    for (BlockHash const& h : hashes) e.hashes.push_back(h.lo);
    return e;
}
Event removed(std::vector<BlockHash> const& hashes) {
    Event e{KvEventType::kBlockRemoved, std::nullopt, {}, {}};
    for (BlockHash const& h : hashes) e.hashes.push_back(h.lo);
    return e;
}
Event const kCleared{KvEventType::kAllBlocksCleared, std::nullopt, {}, {}};

std::vector<int32_t> iota(int32_t first, int32_t count) {
    std::vector<int32_t> out(static_cast<size_t>(count));
    std::iota(out.begin(), out.end(), first);
    return out;
}

// acquire + publish every given block with its tokens; the lease is returned (still live) for the caller.
CacheRequestLease publishWith(ContextCacheManager& m, std::vector<BlockHash> const& hashes,
                              std::vector<int32_t> const& tokens) {
    int32_t const n = static_cast<int32_t>(tokens.size());
    AcquireResult a = m.acquireVanilla(hashes, n);
    EXPECT_TRUE(a.lease.has_value());
    m.publish(*a.lease, {hashes, n, tokens});
    return std::move(*a.lease);
}

TEST(KvEvents, BlockHashIsTheLow64BitsOfTheBlockHash) {
    EXPECT_EQ(kvEventBlockHash(BlockHash{0x1111222233334444ull, 0x5555666677778888ull}), 0x5555666677778888ull);
}

TEST(KvEvents, ScriptedSequenceReportsExactlyTheIndexChanges) {
    ContextCacheManager m(kPage, {6, 0, 0, 0}, 8);
    m.enableKvEvents();
    EXPECT_EQ(drain(m), std::vector<Event>{kCleared});

    // A: 3 full blocks (12 tokens) plus a partial tail that is never published.
    std::vector<BlockHash> const a = Hs({1, 2, 3});
    std::vector<int32_t> const aTokens = iota(100, 14);
    publishWith(m, a, aTokens).release();
    EXPECT_EQ(drain(m), std::vector<Event>{stored(std::nullopt, a, iota(100, 12))});

    // The same prompt again: a hit and an existing record, nothing new.
    publishWith(m, a, aTokens).release();
    EXPECT_EQ(drain(m), std::vector<Event>{});

    // B shares A's first two blocks: only its third block is stored, chained to A's second.
    std::vector<BlockHash> const b = {H(1), H(2), H(13)};
    std::vector<int32_t> bTokens = iota(100, 8);
    for (int32_t t : iota(500, 4)) bTokens.push_back(t);
    publishWith(m, b, bTokens).release();
    EXPECT_EQ(drain(m), std::vector<Event>{stored(H(2).lo, {H(13)}, iota(500, 4))});
    m.checkInvariants();

    // Evicting A frees only its third block: the first two are still B's.
    RecordId const recordA = m.records().lruToMru().front();
    m.evictRecord(recordA);
    EXPECT_EQ(drain(m), std::vector<Event>{removed({H(3)})});

    // C needs every page: capacity eviction of B removes its three blocks, leaf first; then C's 6 are stored.
    std::vector<BlockHash> const c = Hs({21, 22, 23, 24, 25, 26});
    publishWith(m, c, iota(900, 24)).release();
    EXPECT_EQ(drain(m), (std::vector<Event>{removed({H(13), H(2), H(1)}), stored(std::nullopt, c, iota(900, 24))}));

    // clear(): one AllBlocksCleared, no removals, nothing left.
    m.clear();
    EXPECT_EQ(drain(m), std::vector<Event>{kCleared});
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_EQ(m.records().size(), 0u);
    m.checkInvariants();
}

TEST(KvEvents, APinnedPageLeavesTheIndexAndIsReportedRemoved) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    m.enableKvEvents();
    CacheRequestLease lease = publishWith(m, Hs({1, 2}), iota(0, 8));  // still pins both pages
    drain(m);
    m.evictRecord(m.records().lruToMru().front());
    // A lookup can no longer find the blocks (the lease keeps the bytes): for a router they are gone.
    EXPECT_EQ(drain(m), std::vector<Event>{removed({H(2), H(1)})});
    EXPECT_EQ(m.baseIndex().size(), 0u);
    lease.release();
    EXPECT_EQ(drain(m), std::vector<Event>{});
    m.checkInvariants();
}

TEST(KvEvents, RecordLimitZeroStoresThenRemovesInOneCall) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 0);
    m.enableKvEvents();
    drain(m);
    publishWith(m, Hs({1}), iota(0, 4)).release();
    EXPECT_EQ(drain(m), (std::vector<Event>{stored(std::nullopt, Hs({1}), iota(0, 4)), removed({H(1)})}));
}

TEST(KvEvents, PublicationWithoutTokensIsAContractErrorThatChangesNothing) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    m.enableKvEvents();
    drain(m);
    AcquireResult a = m.acquireVanilla(Hs({1, 2}), 8);
    std::string const before = describe(m);
    std::vector<int32_t> const tooFew = iota(0, 7);
    EXPECT_THROW(m.publish(*a.lease, {Hs({1, 2}), 8, tooFew}), ContractError);
    EXPECT_THROW(m.publish(*a.lease, PublishRequest{Hs({1, 2}), 8, {}}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(drain(m), std::vector<Event>{});
    // Without events the tokens are not needed.
    ContextCacheManager quiet(kPage, {4, 0, 0, 0}, 8);
    AcquireResult q = quiet.acquireVanilla(Hs({1, 2}), 8);
    EXPECT_EQ(quiet.publish(*q.lease, PublishRequest{Hs({1, 2}), 8, {}}).status, PublishStatus::kPublished);
}

// A reset while a lease is live is refused and changes nothing (the lease's publication would refill the cache
// the reset claims to empty); once it is released, clear() empties the index: an earlier prompt misses, the pages
// are free, and the stream says AllBlocksCleared.
TEST(KvEvents, ClearIsRefusedWhileALeaseIsLiveAndThenEmptiesTheIndex) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    m.enableKvEvents();
    std::vector<BlockHash> const a = Hs({1, 2});
    publishWith(m, a, iota(0, 8)).release();
    CacheRequestLease live = publishWith(m, Hs({7}), iota(70, 4));
    (void)drain(m);
    std::string const before = test::describe(m);
    try {
        m.clear();
        FAIL() << "clear() with a live lease was accepted";
    } catch (ContractError const& e) {
        EXPECT_NE(std::string(e.what()).find("1 lease(s) are live"), std::string::npos) << e.what();
    }
    EXPECT_EQ(test::describe(m), before);
    EXPECT_EQ(drain(m), std::vector<Event>{});
    live.release();
    m.clear();
    EXPECT_EQ(drain(m), std::vector<Event>{kCleared});
    EXPECT_EQ(m.baseIndex().size(), 0u);
    EXPECT_EQ(m.pools().freeCount(ResourceType::kBaseKvPage), 8);
    AcquireResult again = m.acquireVanilla(a, 8);
    ASSERT_TRUE(again.lease);
    EXPECT_EQ(again.plan.reuseTokenLength, 0);
    m.checkInvariants();
}

TEST(KvEvents, EnablingNeedsAnEmptyIndexAndOnlyOnce) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    publishWith(m, Hs({1}), iota(0, 4)).release();
    EXPECT_THROW(m.enableKvEvents(), ContractError);
    EXPECT_FALSE(m.kvEventsEnabled());
    m.clear();
    m.enableKvEvents();
    EXPECT_THROW(m.enableKvEvents(), ContractError);
    EXPECT_THROW(m.enableKvEvents(0), ContractError);
    m.disableKvEvents();
    EXPECT_EQ(m.pendingKvEventCount(), 0u);
    EXPECT_THROW(m.setKvEventSink(nullptr), ContractError);
}

TEST(KvEvents, SpecDraftUpgradeAddsNoBlocks) {
    ContextCacheManager m(kPage, {6, 6, 0, 0}, 8);
    m.enableKvEvents();
    drain(m);
    std::vector<int32_t> const tokens = iota(0, 9);
    {  // a base-only record first (vanilla), then a spec producer upgrades it with its draft path
        publishWith(m, Hs({1, 2}), tokens).release();
        EXPECT_EQ(drain(m), std::vector<Event>{stored(std::nullopt, Hs({1, 2}), iota(0, 8))});
    }
    AcquireResult s = m.acquireSpec(Hs({1, 2}), 9);
    ASSERT_TRUE(s.lease);
    ASSERT_GE(s.lease->draftPages().size(), 2u);
    m.publish(*s.lease, {Hs({1, 2}), 8, tokens});
    EXPECT_EQ(drain(m), std::vector<Event>{});
    EXPECT_TRUE(m.records().get(m.records().lruToMru().back()).hasDraftPath());
    m.checkInvariants();
}

TEST(KvEvents, ATrimmedTailIsRemovedAndTheKeptPrefixIsNot) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8, EvictionPolicy::kRecordLruTrim);
    m.enableKvEvents();
    drain(m);
    publishWith(m, Hs({1, 2, 3, 4}), iota(0, 16)).release();  // every page
    drain(m);
    AcquireResult other = m.acquireVanilla(Hs({9}), 4);  // one page: the record loses its last block only
    ASSERT_TRUE(other.lease);
    EXPECT_EQ(m.metrics().trimmedBlocks, 1u);
    EXPECT_EQ(drain(m), std::vector<Event>{removed({H(4)})});
    other.lease->release();
    AcquireResult more = m.acquireVanilla(Hs({8}), 12);  // three pages: one free, two more trimmed leaf-first
    ASSERT_TRUE(more.lease);
    EXPECT_EQ(drain(m), std::vector<Event>{removed({H(3), H(2)})});
    EXPECT_EQ(m.baseIndex().size(), 1u);
    m.checkInvariants();
}

struct RecordingSink : KvEventSink {
    std::vector<std::vector<Event>> batches;
    void consume(KvEventLog& events) noexcept override { batches.push_back(decode(events)); }
};

TEST(KvEvents, ASinkReceivesOneBatchPerCall) {
    ContextCacheManager m(kPage, {2, 0, 0, 0}, 8);
    m.enableKvEvents();
    auto sink = std::make_shared<RecordingSink>();
    m.setKvEventSink(sink);  // the pending AllBlocksCleared goes out at once
    ASSERT_EQ(sink->batches.size(), 1u);
    EXPECT_EQ(sink->batches[0], std::vector<Event>{kCleared});

    AcquireResult a = m.acquireVanilla(Hs({1, 2}), 8);  // no index change: no batch
    EXPECT_EQ(sink->batches.size(), 1u);
    std::vector<int32_t> const tokens = iota(0, 8);
    m.publish(*a.lease, {Hs({1, 2}), 8, tokens});
    a.lease->release();
    ASSERT_EQ(sink->batches.size(), 2u);
    EXPECT_EQ(sink->batches[1], std::vector<Event>{stored(std::nullopt, Hs({1, 2}), tokens)});

    AcquireResult b = m.acquireVanilla(Hs({3}), 4);  // evicts the record inside the acquire: one batch
    ASSERT_TRUE(b.lease);
    ASSERT_EQ(sink->batches.size(), 3u);
    EXPECT_EQ(sink->batches[2], std::vector<Event>{removed({H(2), H(1)})});
    EXPECT_EQ(m.pendingKvEventCount(), 0u);

    m.setKvEventSink(nullptr);  // back to draining
    std::vector<int32_t> const more = iota(40, 4);
    m.publish(*b.lease, {Hs({3}), 4, more});
    EXPECT_EQ(sink->batches.size(), 3u);
    EXPECT_EQ(drain(m), std::vector<Event>{stored(std::nullopt, Hs({3}), more)});
}

TEST(KvEvents, TooManyPendingEventsBecomeOneClear) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    m.enableKvEvents(2);
    publishWith(m, Hs({1}), iota(0, 4)).release();  // Cleared + Stored: 2 pending, at the limit
    EXPECT_EQ(m.pendingKvEventCount(), 2u);
    EXPECT_EQ(m.lostKvEvents(), 0u);
    publishWith(m, Hs({2}), iota(4, 4)).release();  // a third: all three dropped, one Cleared instead
    EXPECT_EQ(m.lostKvEvents(), 3u);
    EXPECT_EQ(drain(m), std::vector<Event>{kCleared});
}

TEST(KvEvents, DisabledEventsCostNothingAndDrainEmpty) {
    ContextCacheManager m(kPage, {4, 0, 0, 0}, 8);
    publishWith(m, Hs({1}), iota(0, 4)).release();
    EXPECT_EQ(m.pendingKvEventCount(), 0u);
    EXPECT_EQ(drain(m), std::vector<Event>{});
}

}  // namespace
}  // namespace ctxcache

namespace ctxcache {
namespace {

// Each stored event's extra keys as "block:kind:text:offset" (kind L = LoRA name, M = media).
std::vector<std::string> extraKeys(KvEventLog const& log, KvEvent const& e) {
    std::vector<std::string> out;
    for (size_t k = e.firstExtraKey; k < e.firstExtraKey + e.extraKeyCount; ++k) {
        KvEventExtraKey const& x = log.extraKeys()[k];
        out.push_back(std::to_string(x.block) + (x.kind == KvEventExtraKeyKind::kMedia ? ":M:" : ":L:") +
                      std::string(log.text(x)) + ":" + std::to_string(x.offset));
    }
    return out;
}

// Items over [1, 3), [3, 12) and [14, 15) of four 4-token blocks starting at position 0: block 0 holds the first
// two, blocks 1 and 2 the long one (offsets -1, -5: it began earlier), block 3 the last. The adapter's name comes
// first in every block.
TEST(KvEventKeys, EachBlockGetsTheAdapterThenTheItemsThatOverlapIt) {
    KvEventLog log;
    log.blockSize = 4;
    std::vector<BlockHash> const hashes = Hs({1, 2, 3, 4});
    std::vector<int32_t> const tokens = iota(0, 16);
    KvEventMedia const media[] = {{"one", 1, 2}, {"long", 3, 9}, {"last", 14, 1}};
    log.appendStored(hashes.data(), 4, false, 0, tokens.data(), 16, KvEventKeys{"lora", media, 3}, 0);
    ASSERT_EQ(log.size(), 1u);
    KvEvent const& e = log.events()[0];
    EXPECT_EQ(log.loraName(e), "lora");
    EXPECT_EQ(extraKeys(log, e),
              (std::vector<std::string>{"0:L:lora:0", "0:M:one:1", "0:M:long:3", "1:L:lora:0", "1:M:long:-1",
                                        "2:L:lora:0", "2:M:long:-5", "3:L:lora:0", "3:M:last:2"}));
    // The same identity for a run that starts at block 2 (position 8): offsets from its own blocks.
    KvEventLog later;
    later.blockSize = 4;
    later.appendStored(hashes.data() + 2, 2, true, 2, tokens.data() + 8, 8, KvEventKeys{"", media, 3}, 8);
    EXPECT_EQ(later.loraName(later.events()[0]), "");
    EXPECT_EQ(extraKeys(later, later.events()[0]), (std::vector<std::string>{"0:M:long:-5", "1:M:last:2"}));
    // Appending a log rebases the text and the keys.
    log.append(later);
    EXPECT_EQ(extraKeys(log, log.events()[1]), (std::vector<std::string>{"0:M:long:-5", "1:M:last:2"}));
    EXPECT_EQ(extraKeys(log, log.events()[0]).size(), 9u);
    // No identity: no text, no keys.
    KvEventLog plain;
    plain.blockSize = 4;
    plain.appendStored(hashes.data(), 1, false, 0, tokens.data(), 4, KvEventKeys{"", media + 2, 1}, 0);
    EXPECT_EQ(plain.events()[0].extraKeyCount, 0u);
    EXPECT_TRUE(plain.text().empty());
}

TEST(KvEventKeys, MediaIdentifiersAreSha256OfTheIdentityIn64HexDigits) {
    std::string const id = mediaEventIdentifier(Hash128{0, 0});
    // SHA-256 of sixteen zero bytes.
    EXPECT_EQ(id, "374708fff7719dd5979ec875d56cd2286f6d3cf7ec317a3b25632aab28ec37bb");
    EXPECT_NE(mediaEventIdentifier(Hash128{0, 1}), id);
    EXPECT_NE(mediaEventIdentifier(Hash128{1, 0}), mediaEventIdentifier(Hash128{0, 1}));
}

TEST(KvEventKeys, APublicationCarriesItsKeysAndMalformedOnesChangeNothing) {
    ContextCacheManager m(kPage, {8, 0, 0, 0}, 8);
    m.enableKvEvents();
    drain(m);
    std::vector<BlockHash> const hashes = Hs({1, 2});
    std::vector<int32_t> const tokens = iota(0, 8);
    AcquireResult a = m.acquireVanilla(hashes, 8);
    std::string const before = describe(m);
    KvEventMedia const unordered[] = {{"b", 4, 2}, {"a", 0, 2}};
    KvEventMedia const overlapping[] = {{"a", 0, 3}, {"b", 2, 2}};
    KvEventMedia const empty[] = {{"a", 0, 0}};
    KvEventMedia const nameless[] = {{"", 0, 1}};
    KvEventMedia const negative[] = {{"a", -1, 2}};
    for (KvEventMedia const* bad : {unordered, overlapping}) {
        EXPECT_THROW(m.publish(*a.lease, {hashes, 8, tokens, KvEventKeys{"x", bad, 2}}), ContractError);
    }
    for (KvEventMedia const* bad : {empty, nameless, negative}) {
        EXPECT_THROW(m.publish(*a.lease, {hashes, 8, tokens, KvEventKeys{"x", bad, 1}}), ContractError);
    }
    EXPECT_THROW(m.publish(*a.lease, {hashes, 8, tokens, KvEventKeys{"x", nullptr, 1}}), ContractError);
    EXPECT_EQ(describe(m), before);
    EXPECT_EQ(drain(m), std::vector<Event>{});

    KvEventMedia const image{"img", 2, 4};
    m.publish(*a.lease, {hashes, 8, tokens, KvEventKeys{"adapter", &image, 1}});
    KvEventLog log;
    m.drainKvEvents(log);
    ASSERT_EQ(log.size(), 1u);
    EXPECT_EQ(log.loraName(log.events()[0]), "adapter");
    EXPECT_EQ(extraKeys(log, log.events()[0]),
              (std::vector<std::string>{"0:L:adapter:0", "0:M:img:2", "1:L:adapter:0", "1:M:img:-2"}));
    a.lease->release();
}

}  // namespace
}  // namespace ctxcache
