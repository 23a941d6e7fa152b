// The in-memory store with injectable faults (issue 27's test store): the semantics every KvStore keeps (the first
// value of a key stays, a small destination fails, a large one gets the object and its size), results per key,
// a full store, an unavailable one, failing calls, latency bounded by the deadline, and objects made corrupt,
// short, foreign or stale, each of which a loader's check (store_object.h) names instead of trusting.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ctxcache/errors.h"
#include "ctxcache/tier/memory_kv_store.h"
#include "ctxcache/tier/store_object.h"

namespace ctxcache::tier {
namespace {

using namespace std::chrono_literals;

StoreDeadline soon() { return StoreClock::now() + 2s; }

// One key at a time, through the batch calls.
int64_t put1(KvStore& s, std::string const& key, std::vector<unsigned char> const& bytes,
             StoreDeadline deadline = soon()) {
    void const* data = bytes.data();
    size_t const size = bytes.size();
    int64_t result = 1;
    s.put(&key, &data, &size, 1, deadline, &result);
    return result;
}

int64_t get1(KvStore& s, std::string const& key, std::vector<unsigned char>& into, StoreDeadline deadline = soon()) {
    void* buffer = into.data();
    size_t const capacity = into.size();
    int64_t result = 1;
    s.get(&key, &buffer, &capacity, 1, deadline, &result);
    return result;
}

std::vector<unsigned char> bytes(size_t n, unsigned char seed) {
    std::vector<unsigned char> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(seed + i * 13);
    return out;
}

TEST(MemoryKvStore, KeepsTheFirstValueAndAnswersEachKey) {
    MemoryKvStore s;
    EXPECT_EQ(put1(s, "a", bytes(100, 1)), kStoreOk);
    EXPECT_EQ(put1(s, "a", bytes(50, 9)), kStoreOk);  // held: kept as it was, reported as success
    std::vector<unsigned char> into(200, 0xEE);
    EXPECT_EQ(get1(s, "a", into), 100);  // a larger destination gets the object and its size
    EXPECT_TRUE(std::equal(into.begin(), into.begin() + 100, bytes(100, 1).begin()));
    EXPECT_EQ(into[100], 0xEE);
    std::vector<unsigned char> small(99);
    EXPECT_EQ(get1(s, "a", small), kStoreTooSmall);
    EXPECT_EQ(get1(s, "b", into), kStoreNotFound);
    std::string const keys[3] = {"a", "b", "a"};
    int64_t results[3] = {9, 9, 9};
    s.exist(keys, 3, soon(), results);
    EXPECT_EQ(results[0], 1);
    EXPECT_EQ(results[1], 0);
    EXPECT_EQ(results[2], 1);
    MemoryKvStoreCounters const c = s.counters();
    EXPECT_EQ(c.storedObjects, 1u);
    EXPECT_EQ(c.keptFirstValues, 1u);
    EXPECT_EQ(c.hits, 1u);
    EXPECT_EQ(c.misses, 2u);
    EXPECT_EQ(s.bytesHeld(), 100u);
    EXPECT_THROW(s.exist(nullptr, 1, soon(), results), ContractError);
}

TEST(MemoryKvStore, AFullStoreDropsThePutsThatDoNotFit) {
    MemoryKvStore s(250);
    std::string const keys[3] = {"x", "y", "z"};
    std::vector<unsigned char> const b = bytes(100, 3);
    void const* data[3] = {b.data(), b.data(), b.data()};
    size_t const sizes[3] = {100, 100, 100};
    int64_t results[3];
    s.put(keys, data, sizes, 3, soon(), results);
    EXPECT_EQ(results[0], kStoreOk);
    EXPECT_EQ(results[1], kStoreOk);
    EXPECT_EQ(results[2], kStoreFull);  // one bad key never fails its batch
    EXPECT_EQ(s.objects(), 2u);
    EXPECT_STREQ(storeResultName(results[2]), "full");
}

TEST(MemoryKvStore, AnUnavailableOrFailingStoreFailsEveryKeyOfTheCall) {
    MemoryKvStore s;
    put1(s, "a", bytes(10, 1));
    std::vector<unsigned char> into(10);
    s.setAvailable(false);
    EXPECT_EQ(get1(s, "a", into), kStoreUnavailable);
    EXPECT_EQ(put1(s, "b", bytes(10, 2)), kStoreUnavailable);
    s.setAvailable(true);
    s.failNextCalls(2);
    EXPECT_EQ(get1(s, "a", into), kStoreFailed);
    EXPECT_EQ(get1(s, "a", into), kStoreFailed);
    EXPECT_EQ(get1(s, "a", into), 10);  // the third call is served
    s.clear();  // a restarted master: every object gone
    EXPECT_EQ(get1(s, "a", into), kStoreNotFound);
    EXPECT_EQ(s.bytesHeld(), 0u);
    EXPECT_EQ(s.counters().failedKeys, 4u);
}

TEST(MemoryKvStore, ASlowStoreReturnsByTheDeadlineWithEveryKeyTimedOut) {
    MemoryKvStore s;
    put1(s, "a", bytes(10, 1));
    s.setLatency(2s);
    std::vector<unsigned char> into(10);
    StoreClock::time_point const t0 = StoreClock::now();
    EXPECT_EQ(get1(s, "a", into, t0 + 30ms), kStoreTimedOut);
    auto const waited = StoreClock::now() - t0;
    EXPECT_GE(waited, 30ms);
    EXPECT_LT(waited, 1s);  // not the 2 s of latency (a loaded CI machine may oversleep a timer by a little)
    s.setLatency(1ms);
    EXPECT_EQ(get1(s, "a", into, StoreClock::now() + 1s), 10);  // within its deadline: served
    EXPECT_EQ(get1(s, "a", into, StoreClock::now() - 1ms), kStoreTimedOut);  // already past
}

TEST(MemoryKvStore, BadObjectsAreNamedByTheLoadersCheckNeverTrusted) {
    MemoryKvStore s;
    std::vector<unsigned char> const payload = bytes(512, 5);
    BlockHash const hash{0xAA, 0xBB};
    StoreObjectExpectation const want{0x1A70, hash, 16, payload.size()};
    auto object = [&](uint64_t digest, BlockHash h, std::vector<unsigned char> const& p) {
        StoreObjectHeader const header = encodeStoreObjectHeader(digest, h, 16, p.data(), p.size());
        std::vector<unsigned char> out(sizeof header + p.size());
        std::memcpy(out.data(), &header, sizeof header);
        std::memcpy(out.data() + sizeof header, p.data(), p.size());
        return out;
    };
    std::string const key = "model@tp_rank:0@...@00aa00bb";
    ASSERT_EQ(put1(s, key, object(want.layoutDigest, hash, payload)), kStoreOk);
    std::vector<unsigned char> into(sizeof(StoreObjectHeader) + payload.size() + 64);
    auto load = [&]() {
        int64_t const got = get1(s, key, into);
        if (got < 0) return StoreObjectVerdict::kShort;
        return checkStoreObject(into.data(), static_cast<size_t>(got), want);
    };
    EXPECT_EQ(load(), StoreObjectVerdict::kValid);
    ASSERT_TRUE(s.corrupt(key, sizeof(StoreObjectHeader) + 100));
    EXPECT_EQ(load(), StoreObjectVerdict::kCorrupt);
    s.overwrite(key, object(want.layoutDigest, hash, payload));
    ASSERT_TRUE(s.truncate(key, sizeof(StoreObjectHeader) + 10));
    EXPECT_EQ(load(), StoreObjectVerdict::kShort);
    s.overwrite(key, object(want.layoutDigest ^ 1, hash, payload));  // another deployment's layout
    EXPECT_EQ(load(), StoreObjectVerdict::kOtherLayout);
    s.overwrite(key, object(want.layoutDigest, BlockHash{0xAA, 0xBC}, payload));  // a stale or colliding key
    EXPECT_EQ(load(), StoreObjectVerdict::kOtherBlock);
    s.overwrite(key, std::vector<unsigned char>(sizeof(StoreObjectHeader) + 512, 0x42));  // not ours at all
    EXPECT_EQ(load(), StoreObjectVerdict::kForeign);
    EXPECT_TRUE(s.erase(key));
    EXPECT_FALSE(s.erase(key));
    EXPECT_EQ(s.bytesHeld(), 0u);
}

}  // namespace
}  // namespace ctxcache::tier
