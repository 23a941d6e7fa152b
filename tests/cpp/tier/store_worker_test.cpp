// The store worker (issue 27): batches run on the worker's thread and come back in order; a wait gives up at its
// deadline and the batch still arrives later; a store that keeps failing opens the breaker, which refuses batches
// until its cool-down, lets one through, and closes on its success; destruction never waits past the running
// batch's deadline; a get whose store claims more bytes than its buffer holds fails that key.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "ctxcache/errors.h"
#include "ctxcache/tier/memory_kv_store.h"
#include "ctxcache/tier/store_worker.h"

namespace ctxcache::tier {
namespace {

using namespace std::chrono_literals;

StoreBatch putBatch(std::vector<std::string> keys, std::vector<unsigned char> const& bytes,
                    StoreDeadline deadline = StoreClock::now() + 2s) {
    StoreBatch b;
    b.op = StoreOp::kPut;
    b.keys = std::move(keys);
    b.data.assign(b.keys.size(), bytes.data());
    b.sizes.assign(b.keys.size(), bytes.size());
    b.deadline = deadline;
    return b;
}

StoreBatch getBatch(std::vector<std::string> keys, std::vector<std::vector<unsigned char>>& into,
                    StoreDeadline deadline = StoreClock::now() + 2s) {
    StoreBatch b;
    b.op = StoreOp::kGet;
    b.keys = std::move(keys);
    into.assign(b.keys.size(), std::vector<unsigned char>(64, 0));
    for (auto& v : into) {
        b.buffers.push_back(v.data());
        b.capacities.push_back(v.size());
    }
    b.deadline = deadline;
    return b;
}

TEST(StoreWorker, BatchesRunOffTheCallersThreadAndComeBackInOrder) {
    MemoryKvStore store;
    StoreWorker worker(store);
    std::vector<unsigned char> const bytes(40, 0x7A);
    uint64_t t1 = 0, t2 = 0;
    ASSERT_EQ(worker.submit(putBatch({"a", "b"}, bytes), &t1), StoreWorker::Submit::kQueued);
    std::vector<std::vector<unsigned char>> into;
    ASSERT_EQ(worker.submit(getBatch({"a", "zz", "b"}, into), &t2), StoreWorker::Submit::kQueued);
    EXPECT_LT(t1, t2);
    std::optional<StoreCompletion> const last = worker.wait(t2, StoreClock::now() + 2s);
    ASSERT_TRUE(last);
    EXPECT_EQ(last->results, (std::vector<int64_t>{40, kStoreNotFound, 40}));
    EXPECT_EQ(into[0][39], 0x7A);
    EXPECT_EQ(into[1][0], 0);  // a missing key's destination is untouched
    std::vector<StoreCompletion> const rest = worker.poll();  // the put, not handed out by the wait
    ASSERT_EQ(rest.size(), 1u);
    EXPECT_EQ(rest[0].ticket, t1);
    EXPECT_EQ(rest[0].results, (std::vector<int64_t>{kStoreOk, kStoreOk}));
    EXPECT_TRUE(worker.poll().empty());  // each completion is handed out once
    StoreWorkerCounters const c = worker.counters();
    EXPECT_EQ(c.submitted, 2u);
    EXPECT_EQ(c.completed, 2u);
}

// A runtime's store that claims more bytes than a buffer holds (it wrote past it, or it lies): that key fails.
class OverclaimingStore final : public KvStore {
public:
    void exist(std::string const*, size_t count, StoreDeadline, int64_t* results) override {
        std::fill(results, results + count, 1);
    }
    void put(std::string const*, void const* const*, size_t const*, size_t count, StoreDeadline,
             int64_t* results) override {
        std::fill(results, results + count, kStoreOk);
    }
    void get(std::string const*, void* const*, size_t const* capacities, size_t count, StoreDeadline,
             int64_t* results) override {
        for (size_t i = 0; i < count; ++i) results[i] = static_cast<int64_t>(capacities[i]) + (i % 2 ? 1 : 0);
    }
};

TEST(StoreWorker, AGetClaimingMoreThanItsBufferHoldsFailsThatKey) {
    OverclaimingStore store;
    StoreWorker worker(store);
    std::vector<std::vector<unsigned char>> into;
    uint64_t t = 0;
    ASSERT_EQ(worker.submit(getBatch({"a", "b", "c"}, into), &t), StoreWorker::Submit::kQueued);
    std::optional<StoreCompletion> const done = worker.wait(t, StoreClock::now() + 2s);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->results, (std::vector<int64_t>{64, kStoreTooSmall, 64}));
}

TEST(StoreWorker, AWaitGivesUpAtItsDeadlineAndTheBatchArrivesLater) {
    MemoryKvStore store;
    store.setLatency(300ms);
    StoreWorker worker(store);
    std::vector<unsigned char> const bytes(8, 1);
    uint64_t t = 0;
    ASSERT_EQ(worker.submit(putBatch({"k"}, bytes), &t), StoreWorker::Submit::kQueued);
    StoreClock::time_point const t0 = StoreClock::now();
    EXPECT_FALSE(worker.wait(t, t0 + 30ms));  // the writer goes on: a miss, not a stall
    EXPECT_LT(StoreClock::now() - t0, 250ms);
    std::optional<StoreCompletion> const late = worker.wait(t, StoreClock::now() + 3s);
    ASSERT_TRUE(late);
    EXPECT_EQ(late->results, (std::vector<int64_t>{kStoreOk}));
    EXPECT_EQ(store.objects(), 1u);
}

TEST(StoreWorker, ABreakerStopsAskingAStoreThatKeepsFailingAndTriesAgainLater) {
    MemoryKvStore store;
    store.setAvailable(false);
    StoreWorker worker(store, StoreWorkerOptions{3, 100ms});
    std::vector<unsigned char> const bytes(8, 1);
    for (int i = 0; i < 3; ++i) {
        uint64_t t = 0;
        ASSERT_EQ(worker.submit(putBatch({"k" + std::to_string(i)}, bytes), &t), StoreWorker::Submit::kQueued);
        ASSERT_TRUE(worker.wait(t, StoreClock::now() + 2s));
    }
    EXPECT_TRUE(worker.breakerOpen());
    uint64_t t = 0;
    EXPECT_EQ(worker.submit(putBatch({"x"}, bytes), &t), StoreWorker::Submit::kOpen);
    EXPECT_EQ(worker.counters().refusedByBreaker, 1u);
    EXPECT_EQ(worker.counters().breakerOpenings, 1u);
    std::this_thread::sleep_for(120ms);  // the cool-down passes: one batch goes through (half-open)
    ASSERT_EQ(worker.submit(putBatch({"h1"}, bytes), &t), StoreWorker::Submit::kQueued);
    uint64_t other = 0;
    EXPECT_EQ(worker.submit(putBatch({"h2"}, bytes), &other), StoreWorker::Submit::kOpen);  // only one
    ASSERT_TRUE(worker.wait(t, StoreClock::now() + 2s));  // still unavailable: open again
    EXPECT_TRUE(worker.breakerOpen());
    EXPECT_EQ(worker.counters().breakerOpenings, 2u);
    store.setAvailable(true);  // the store comes back
    std::this_thread::sleep_for(120ms);
    ASSERT_EQ(worker.submit(putBatch({"h3"}, bytes), &t), StoreWorker::Submit::kQueued);
    std::optional<StoreCompletion> const ok = worker.wait(t, StoreClock::now() + 2s);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->results, (std::vector<int64_t>{kStoreOk}));
    EXPECT_FALSE(worker.breakerOpen());
    EXPECT_EQ(worker.submit(putBatch({"h4"}, bytes), &t), StoreWorker::Submit::kQueued);  // closed
    // Misses and a full store are answers, not failures: they never open it.
    MemoryKvStore tiny(4);
    StoreWorker answers(tiny, StoreWorkerOptions{1, 1s});
    ASSERT_EQ(answers.submit(putBatch({"big"}, bytes), &t), StoreWorker::Submit::kQueued);
    ASSERT_TRUE(answers.wait(t, StoreClock::now() + 2s));
    std::vector<std::vector<unsigned char>> into;
    ASSERT_EQ(answers.submit(getBatch({"none"}, into), &t), StoreWorker::Submit::kQueued);
    ASSERT_TRUE(answers.wait(t, StoreClock::now() + 2s));
    EXPECT_FALSE(answers.breakerOpen());
}

TEST(StoreWorker, DestructionWaitsNoLongerThanTheRunningBatchsDeadline) {
    MemoryKvStore store;
    store.setLatency(10s);  // a store that would block for 10 s
    std::vector<unsigned char> const bytes(8, 1);
    StoreClock::time_point const t0 = StoreClock::now();
    {
        StoreWorker worker(store);
        uint64_t t = 0;
        worker.submit(putBatch({"running"}, bytes, StoreClock::now() + 100ms), &t);
        std::this_thread::sleep_for(20ms);  // the worker is inside the store's call now
        for (int i = 0; i < 3; ++i)
            worker.submit(putBatch({"k" + std::to_string(i)}, bytes, StoreClock::now() + 5s), &t);
    }
    auto const took = StoreClock::now() - t0;
    EXPECT_GE(took, 90ms);  // the running batch ran to its deadline...
    EXPECT_LT(took, 2s);    // ...and the queued ones were abandoned, not sent
    EXPECT_EQ(store.objects(), 0u);
}

TEST(StoreWorker, RefusesAMalformedBatch) {
    MemoryKvStore store;
    StoreWorker worker(store);
    StoreBatch b;
    b.op = StoreOp::kPut;
    b.keys = {"a", "b"};
    b.data = {nullptr};
    b.sizes = {0, 0};
    uint64_t t = 0;
    EXPECT_THROW(worker.submit(b, &t), ContractError);
    EXPECT_EQ(worker.counters().submitted, 0u);
}

}  // namespace
}  // namespace ctxcache::tier
