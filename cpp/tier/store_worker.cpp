// StoreWorker: one thread takes queued batches in order and calls the store outside the lock; completions wait in
// a queue the writer drains (poll) or picks from (wait); the breaker is updated as each batch completes.
// Full contract: include/ctxcache/tier/store_worker.h.

#include "ctxcache/tier/store_worker.h"

#include <algorithm>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::tier {

namespace {

void validate(StoreBatch const& b) {
    size_t const n = b.keys.size();
    bool ok = true;
    switch (b.op) {
        case StoreOp::kExist: break;
        case StoreOp::kPut: ok = b.data.size() == n && b.sizes.size() == n; break;
        case StoreOp::kGet: ok = b.buffers.size() == n && b.capacities.size() == n; break;
        default: throw ContractError("StoreWorker::submit: unknown operation");
    }
    if (!ok)
        throw ContractError("StoreWorker::submit: a batch of " + std::to_string(n) +
                            " keys needs one data pointer and size (put) or buffer and capacity (get) per key");
}

bool failedOutright(std::vector<int64_t> const& results) {
    if (results.empty()) return false;
    return std::all_of(results.begin(), results.end(),
                       [](int64_t r) { return r == kStoreUnavailable || r == kStoreFailed || r == kStoreTimedOut; });
}

}  // namespace

StoreWorker::StoreWorker(KvStore& store, StoreWorkerOptions options)
    : store_(store),
      options_(options),
      nextTicket_(options.firstTicket ? options.firstTicket : 1),  // 0 is "no ticket"
      thread_([this] { run(); }) {}

StoreWorker::~StoreWorker() {
    {
        std::lock_guard<std::mutex> const lock(mutex_);
        stopping_ = true;
        counters_.abandoned += queue_.size();
        queue_.clear();  // never sent: their buffers are the caller's again once this returns
    }
    work_.notify_all();
    thread_.join();  // the running batch, if any, ends by its deadline
}

StoreWorker::Submit StoreWorker::submit(StoreBatch batch, uint64_t* ticket) {
    validate(batch);
    {
        std::lock_guard<std::mutex> const lock(mutex_);
        if (consecutiveFailures_ >= options_.breakerFailures) {
            if (StoreClock::now() < openUntil_ || halfOpenInFlight_) {
                ++counters_.refusedByBreaker;
                return Submit::kOpen;
            }
            halfOpenInFlight_ = true;  // half-open: this batch decides
        }
        uint64_t const t = nextTicket_;
        nextTicket_ += options_.ticketStride ? options_.ticketStride : 1;
        if (ticket) *ticket = t;
        queue_.push_back(Queued{t, std::move(batch)});
        ++counters_.submitted;
    }
    work_.notify_one();
    return Submit::kQueued;
}

void StoreWorker::run() {
    for (;;) {
        Queued job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (queue_.empty()) return;  // stopping, nothing left
            job = std::move(queue_.front());
            queue_.pop_front();
            running_ = true;
        }
        StoreBatch& b = job.batch;
        std::vector<int64_t> results(b.keys.size(), kStoreFailed);
        try {
            size_t const n = b.keys.size();
            switch (b.op) {
                case StoreOp::kExist: store_.exist(b.keys.data(), n, b.deadline, results.data()); break;
                case StoreOp::kPut:
                    store_.put(b.keys.data(), b.data.data(), b.sizes.data(), n, b.deadline, results.data());
                    break;
                case StoreOp::kGet:
                    store_.get(b.keys.data(), b.buffers.data(), b.capacities.data(), n, b.deadline, results.data());
                    // A size beyond its buffer is a store that wrote past it, or that lies: never a byte to trust.
                    for (size_t i = 0; i < n; ++i)
                        if (results[i] > 0 && static_cast<uint64_t>(results[i]) > b.capacities[i])
                            results[i] = kStoreTooSmall;
                    break;
            }
        } catch (...) {
            std::fill(results.begin(), results.end(), int64_t{kStoreFailed});  // a throwing backend fails its batch
        }
        {
            std::lock_guard<std::mutex> const lock(mutex_);
            finished_.push_back(
                StoreCompletion{job.ticket, std::move(job.batch), std::move(results), StoreClock::now()});
            record(finished_.back());
            running_ = false;
        }
        done_.notify_all();
    }
}

void StoreWorker::record(StoreCompletion const& c) {
    ++counters_.completed;
    bool const wasHalfOpen = halfOpenInFlight_;
    halfOpenInFlight_ = false;
    if (!failedOutright(c.results)) {
        consecutiveFailures_ = 0;
        return;
    }
    ++consecutiveFailures_;
    if (consecutiveFailures_ == options_.breakerFailures ||
        (wasHalfOpen && consecutiveFailures_ > options_.breakerFailures)) {
        openUntil_ = c.finishedAt + options_.breakerCooldown;
        ++counters_.breakerOpenings;
    }
}

std::vector<StoreCompletion> StoreWorker::poll() {
    std::lock_guard<std::mutex> const lock(mutex_);
    std::vector<StoreCompletion> out(std::make_move_iterator(finished_.begin()),
                                     std::make_move_iterator(finished_.end()));
    finished_.clear();
    return out;
}

std::optional<StoreCompletion> StoreWorker::wait(uint64_t ticket, StoreClock::time_point until) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto find = [&] {
        return std::find_if(finished_.begin(), finished_.end(),
                            [&](StoreCompletion const& c) { return c.ticket == ticket; });
    };
    if (!done_.wait_until(lock, until, [&] { return find() != finished_.end(); })) return std::nullopt;
    auto it = find();
    StoreCompletion out = std::move(*it);
    finished_.erase(it);
    return out;
}

bool StoreWorker::drain(StoreClock::time_point until) {
    std::unique_lock<std::mutex> lock(mutex_);
    return done_.wait_until(lock, until, [&] { return queue_.empty() && !running_; });
}

bool StoreWorker::breakerOpen() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    return consecutiveFailures_ >= options_.breakerFailures && StoreClock::now() < openUntil_;
}

StoreWorkerCounters StoreWorker::counters() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    return counters_;
}

}  // namespace ctxcache::tier
