// MemoryKvStore: a map of key -> bytes behind one mutex, and the injected faults checked at the start of each call.
// Full contract: include/ctxcache/tier/memory_kv_store.h.

#include "ctxcache/tier/memory_kv_store.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "ctxcache/errors.h"

namespace ctxcache::tier {

namespace {

void requireArrays(bool ok, char const* operation) {
    if (!ok) throw ContractError(std::string("MemoryKvStore::") + operation + ": a null array with keys to serve");
}

}  // namespace

MemoryKvStore::MemoryKvStore(size_t capacityBytes) : capacity_(capacityBytes) {}

bool MemoryKvStore::admit(StoreDeadline deadline, int64_t& why) {
    int64_t const latency = latencyNs_.load();
    if (latency > 0) {
        StoreDeadline const ready = StoreClock::now() + std::chrono::nanoseconds(latency);
        std::this_thread::sleep_until(std::min(ready, deadline));
        if (ready > deadline) {
            why = kStoreTimedOut;
            return false;
        }
    }
    if (StoreClock::now() > deadline) {
        why = kStoreTimedOut;
        return false;
    }
    if (!available_.load()) {
        why = kStoreUnavailable;
        return false;
    }
    int calls = failCalls_.load();
    while (calls > 0 && !failCalls_.compare_exchange_weak(calls, calls - 1)) {
    }
    if (calls > 0) {
        why = kStoreFailed;
        return false;
    }
    return true;
}

void MemoryKvStore::exist(std::string const* keys, size_t count, StoreDeadline deadline, int64_t* results) {
    requireArrays(count == 0 || (keys && results), "exist");
    int64_t why = kStoreOk;
    bool const ok = admit(deadline, why);
    std::lock_guard<std::mutex> const lock(mutex_);
    ++counters_.existCalls;
    for (size_t i = 0; i < count; ++i) results[i] = ok ? (objects_.count(keys[i]) ? 1 : 0) : why;
    if (!ok) counters_.failedKeys += count;
}

void MemoryKvStore::put(std::string const* keys, void const* const* data, size_t const* sizes, size_t count,
                        StoreDeadline deadline, int64_t* results) {
    requireArrays(count == 0 || (keys && data && sizes && results), "put");
    int64_t why = kStoreOk;
    bool const ok = admit(deadline, why);
    std::lock_guard<std::mutex> const lock(mutex_);
    ++counters_.putCalls;
    counters_.putKeys += count;
    for (size_t i = 0; i < count; ++i) {
        if (!ok) {
            results[i] = why;
            ++counters_.failedKeys;
            continue;
        }
        if (objects_.count(keys[i])) {  // the first value stays
            results[i] = kStoreOk;
            ++counters_.keptFirstValues;
            continue;
        }
        if ((capacity_ > 0 && bytes_ + sizes[i] > capacity_) || (sizes[i] > 0 && !data[i])) {
            results[i] = kStoreFull;
            ++counters_.fullPuts;
            continue;
        }
        auto const* p = static_cast<unsigned char const*>(data[i]);
        objects_.emplace(keys[i], std::vector<unsigned char>(p, p + sizes[i]));
        bytes_ += sizes[i];
        results[i] = kStoreOk;
        ++counters_.storedObjects;
    }
}

void MemoryKvStore::get(std::string const* keys, void* const* buffers, size_t const* capacities, size_t count,
                        StoreDeadline deadline, int64_t* results) {
    requireArrays(count == 0 || (keys && buffers && capacities && results), "get");
    int64_t why = kStoreOk;
    bool const ok = admit(deadline, why);
    std::lock_guard<std::mutex> const lock(mutex_);
    ++counters_.getCalls;
    counters_.getKeys += count;
    for (size_t i = 0; i < count; ++i) {
        if (!ok) {
            results[i] = why;
            ++counters_.failedKeys;
            continue;
        }
        auto it = objects_.find(keys[i]);
        if (it == objects_.end()) {
            results[i] = kStoreNotFound;
            ++counters_.misses;
            continue;
        }
        std::vector<unsigned char> const& object = it->second;
        if (object.size() > capacities[i] || (!object.empty() && !buffers[i])) {
            results[i] = kStoreTooSmall;
            ++counters_.misses;
            continue;
        }
        if (!object.empty()) std::memcpy(buffers[i], object.data(), object.size());
        results[i] = static_cast<int64_t>(object.size());
        ++counters_.hits;
    }
}

bool MemoryKvStore::corrupt(std::string const& key, size_t offset) {
    std::lock_guard<std::mutex> const lock(mutex_);
    auto it = objects_.find(key);
    if (it == objects_.end() || offset >= it->second.size()) return false;
    it->second[offset] ^= 0xFF;
    return true;
}

bool MemoryKvStore::truncate(std::string const& key, size_t size) {
    std::lock_guard<std::mutex> const lock(mutex_);
    auto it = objects_.find(key);
    if (it == objects_.end() || size > it->second.size()) return false;
    bytes_ -= it->second.size() - size;
    it->second.resize(size);
    return true;
}

void MemoryKvStore::overwrite(std::string const& key, std::vector<unsigned char> bytes) {
    std::lock_guard<std::mutex> const lock(mutex_);
    auto it = objects_.find(key);
    if (it != objects_.end()) bytes_ -= it->second.size();
    bytes_ += bytes.size();
    objects_[key] = std::move(bytes);
}

bool MemoryKvStore::erase(std::string const& key) {
    std::lock_guard<std::mutex> const lock(mutex_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return false;
    bytes_ -= it->second.size();
    objects_.erase(it);
    return true;
}

void MemoryKvStore::clear() {
    std::lock_guard<std::mutex> const lock(mutex_);
    objects_.clear();
    bytes_ = 0;
}

size_t MemoryKvStore::objects() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    return objects_.size();
}

size_t MemoryKvStore::bytesHeld() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    return bytes_;
}

MemoryKvStoreCounters MemoryKvStore::counters() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    return counters_;
}

}  // namespace ctxcache::tier
