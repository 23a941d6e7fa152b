// StoreWorker: runs a KvStore's calls (kv_store.h) on a thread of its own, so that the manager's single writer never
// waits on a store it does not bound (issue 27: a Mooncake client blocks 90 s without a master, stalls seconds after
// a restart). The writer submits a batch (exist, put or get) and goes on; the worker calls the store with the
// batch's deadline; the writer takes the finished batches at its next call (poll), or waits for one of them no
// longer than a deadline of its own (wait). A circuit breaker stops submitting to a store that keeps failing and
// tries again after a cool-down.
//
// Buffers: a put's data and a get's destinations belong to the caller until the batch's completion is taken (by
// poll or wait), even after a wait gave up on it: the store may still write into them (the tier keeps those host
// slots pinned until then).
// Breaker: after `breakerFailures` consecutive batches in which every key failed (unavailable, failed or timed
// out; not a miss or a full store), submit refuses new batches (kOpen) for `breakerCooldown`; then one batch is let
// through (half-open): its success closes the breaker, its failure opens it again.
// Invariants: every submitted batch completes exactly once (its results filled, one per key) and is handed out
//             exactly once, in submission order by poll; a wait hands out only the batch it names; a get's result
//             never exceeds its key's capacity (a store that answers more gets kStoreTooSmall for that key).
// Errors:     a batch with null arrays for its keys: ContractError from submit, nothing queued.
// Cost:       submit and poll O(1) plus the keys moved (one lock each); the store's calls on the worker thread.
// Threading:  submit, poll and wait from one thread (the manager's writer); the worker thread calls the store only.
//             The destructor stops taking batches, lets the running one finish (bounded by its deadline) and
//             completes the queued ones as kStoreFailed without calling the store.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ctxcache/tier/kv_store.h"

namespace ctxcache::tier {

enum class StoreOp : uint8_t { kExist = 0, kPut = 1, kGet = 2 };

struct StoreBatch {
    StoreOp op = StoreOp::kExist;
    std::vector<std::string> keys;
    std::vector<void const*> data;    // kPut: one per key
    std::vector<size_t> sizes;        // kPut: one per key
    std::vector<void*> buffers;       // kGet: one per key
    std::vector<size_t> capacities;   // kGet: one per key
    StoreDeadline deadline{};
};

struct StoreCompletion {
    uint64_t ticket = 0;
    StoreBatch batch;                 // as submitted (its buffers now hold what a get read)
    std::vector<int64_t> results;     // one per key (kv_store.h)
    StoreClock::time_point finishedAt{};
};

struct StoreWorkerOptions {
    int breakerFailures = 3;
    std::chrono::milliseconds breakerCooldown{1000};
    // Tickets are firstTicket, firstTicket + ticketStride, ...: workers that share one owner's ticket space take
    // disjoint ones (the host tier's put worker the even tickets, its load worker the odd ones).
    uint64_t firstTicket = 1;
    uint64_t ticketStride = 1;
};

struct StoreWorkerCounters {
    uint64_t submitted = 0, completed = 0, refusedByBreaker = 0, breakerOpenings = 0, abandoned = 0;
    StoreWorkerCounters& operator+=(StoreWorkerCounters const& o) noexcept {
        submitted += o.submitted;
        completed += o.completed;
        refusedByBreaker += o.refusedByBreaker;
        breakerOpenings += o.breakerOpenings;
        abandoned += o.abandoned;
        return *this;
    }
};

class StoreWorker {
public:
    enum class Submit : uint8_t { kQueued = 0, kOpen = 1 };

    explicit StoreWorker(KvStore& store, StoreWorkerOptions options = {});
    ~StoreWorker();
    StoreWorker(StoreWorker const&) = delete;
    StoreWorker& operator=(StoreWorker const&) = delete;

    // Queues the batch (its ticket in *ticket), or refuses it while the breaker is open.
    Submit submit(StoreBatch batch, uint64_t* ticket);
    // The finished batches, in submission order (those a wait already handed out excepted).
    std::vector<StoreCompletion> poll();
    // The batch `ticket` once it finished, waiting no later than `until`; none when it has not by then (it goes on;
    // poll hands it out later).
    std::optional<StoreCompletion> wait(uint64_t ticket, StoreClock::time_point until);

    // Waits until every queued batch has run (or `until`); returns whether they all did. Completions stay for
    // poll. (A tier going away flushes its puts this way, bounded.)
    bool drain(StoreClock::time_point until);

    bool breakerOpen() const;
    StoreWorkerCounters counters() const;

private:
    struct Queued {
        uint64_t ticket;
        StoreBatch batch;
    };
    void run();
    void record(StoreCompletion const& c);  // the breaker's bookkeeping (under the lock)

    KvStore& store_;
    StoreWorkerOptions const options_;
    mutable std::mutex mutex_;
    std::condition_variable work_, done_;
    std::deque<Queued> queue_;
    std::deque<StoreCompletion> finished_;
    uint64_t nextTicket_;
    bool stopping_ = false;
    bool running_ = false;  // the worker is calling the store
    int consecutiveFailures_ = 0;
    bool halfOpenInFlight_ = false;
    StoreClock::time_point openUntil_{};
    StoreWorkerCounters counters_;
    std::thread thread_;  // last: started once everything above exists
};

}  // namespace ctxcache::tier
