// KvStore: what a store that holds bytes offers the host tier (issue 27): batch existence, batch put from host
// buffers and batch get into host buffers, each with a deadline and a result per key. Backends: Mooncake Store
// (through Python), a runtime's own store (a C callback table), and MemoryKvStore (memory_kv_store.h), an
// in-memory store with injectable faults for tests.
//
// Semantics every backend keeps (Mooncake's, docs/TIERS.md): a put of a key the store holds keeps the first value
// and reports success; a get into a destination smaller than the object fails that key (kTooSmall), into a larger
// one writes the object and returns its size; a key that fails leaves its destination untouched as far as the
// caller can rely on (a loader checks every object's header, store_object.h, before it trusts a byte); results
// are per key, so one bad key never fails its batch.
// Deadlines: a call returns by its deadline (plus the backend's own granularity); keys it could not serve by then
// get kTimedOut. A backend that cannot bound a call (a client library that blocks) is called from a worker, never
// from the manager's thread (the tier's contract).
// Threading: a backend may be called from one thread at a time (the tier's worker); MemoryKvStore allows more.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ctxcache::tier {

using StoreClock = std::chrono::steady_clock;
using StoreDeadline = StoreClock::time_point;

// A key's result: >= 0 success (get: the object's size in bytes; exist: 1 held, 0 not held; put: 0), or one of
// these (Mooncake's codes where it has one).
enum StoreResult : int64_t {
    kStoreOk = 0,
    kStoreFull = -200,       // no room: the put is dropped
    kStoreTooSmall = -600,   // a get's destination is smaller than the object
    kStoreNotFound = -704,   // no such object (never put, evicted, or lost with its segment)
    kStoreUnavailable = -800,  // the holder or the store cannot be reached
    kStoreFailed = -900,     // any other failure of the call
    kStoreTimedOut = -1000,  // the deadline passed before this key was served
};
char const* storeResultName(int64_t result) noexcept;

class KvStore {
public:
    virtual ~KvStore() = default;
    // results[i] = 1 when keys[i] is held, 0 when not, or an error.
    virtual void exist(std::string const* keys, size_t count, StoreDeadline deadline, int64_t* results) = 0;
    // Stores data[i][0, sizes[i]) under keys[i]; results[i] = kStoreOk (also when the key was held) or an error.
    virtual void put(std::string const* keys, void const* const* data, size_t const* sizes, size_t count,
                     StoreDeadline deadline, int64_t* results) = 0;
    // Reads keys[i] into buffers[i][0, capacities[i]); results[i] = the object's size, or an error.
    virtual void get(std::string const* keys, void* const* buffers, size_t const* capacities, size_t count,
                     StoreDeadline deadline, int64_t* results) = 0;
};

}  // namespace ctxcache::tier
