// MemoryKvStore: a KvStore (kv_store.h) in this process's memory, with the faults a real store has, injectable,
// for tests of everything above the store: a store that is unavailable (a dead master or holder), slow (latency
// against the deadline), failing (the next calls fail), full (a byte capacity), emptied (a restarted master), and
// objects that are corrupt, short, foreign or stale (overwritten in place, as no real store would let a client do).
//
// Semantics: KvStore's (a put of a held key keeps the first value; a get into a smaller destination is
// kStoreTooSmall, into a larger one returns the object's size).
// Invariants: the bytes held are the sum of the objects' sizes; puts never take them above the capacity (an
//             injected overwrite may).
// Errors:     null arrays with a positive count: ContractError. Faults are results, never exceptions.
// Cost:       O(bytes moved) per call, plus the injected latency (slept outside the lock, never past the
//             deadline).
// Threading:  thread-safe (one mutex); the injected latency lets calls overlap.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ctxcache/tier/kv_store.h"

namespace ctxcache::tier {

struct MemoryKvStoreCounters {
    uint64_t existCalls = 0, putCalls = 0, getCalls = 0;
    uint64_t putKeys = 0, storedObjects = 0, keptFirstValues = 0, fullPuts = 0;
    uint64_t getKeys = 0, hits = 0, misses = 0;
    uint64_t failedKeys = 0;  // unavailable, failed or timed out
};

class MemoryKvStore final : public KvStore {
public:
    explicit MemoryKvStore(size_t capacityBytes = 0);  // 0: no limit

    void exist(std::string const* keys, size_t count, StoreDeadline deadline, int64_t* results) override;
    void put(std::string const* keys, void const* const* data, size_t const* sizes, size_t count,
             StoreDeadline deadline, int64_t* results) override;
    void get(std::string const* keys, void* const* buffers, size_t const* capacities, size_t count,
             StoreDeadline deadline, int64_t* results) override;

    // Faults.
    void setAvailable(bool available) noexcept { available_ = available; }  // false: every key kStoreUnavailable
    void setLatency(std::chrono::nanoseconds latency) noexcept { latencyNs_ = latency.count(); }
    void failNextCalls(int calls) noexcept { failCalls_ = calls; }  // every key of those calls: kStoreFailed
    bool corrupt(std::string const& key, size_t offset);        // flips the bits of one byte; false: no such byte
    bool truncate(std::string const& key, size_t size);         // keeps the first `size` bytes
    void overwrite(std::string const& key, std::vector<unsigned char> bytes);  // another object under the key
    bool erase(std::string const& key);                         // lost (an evicted object, a dead segment)
    void clear();                                               // every object gone (a restarted master)

    size_t objects() const;
    size_t bytesHeld() const;
    MemoryKvStoreCounters counters() const;

private:
    // Sleeps the injected latency, at most until the deadline; then whether the call may proceed (false: every key
    // gets `why`, set here: unavailable, failed or timed out).
    bool admit(StoreDeadline deadline, int64_t& why);

    size_t const capacity_;
    std::atomic<bool> available_{true};
    std::atomic<int64_t> latencyNs_{0};
    std::atomic<int> failCalls_{0};
    mutable std::mutex mutex_;
    std::unordered_map<std::string, std::vector<unsigned char>> objects_;
    size_t bytes_ = 0;
    MemoryKvStoreCounters counters_;
};

}  // namespace ctxcache::tier
