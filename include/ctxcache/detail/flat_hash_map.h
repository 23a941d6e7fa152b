// FlatHashMap: an open-addressing hash map (linear probing, backward-shift deletion, no tombstones) for the
// core's hot indexes. Keys and values live inline in one array, so a lookup costs one cache miss where
// std::unordered_map costs two (bucket, then node) and 40+ bytes more per entry.
//
// Invariants: capacity is a power of two; size <= capacity * 3/4; every key sits in the probe run that starts
//             at its home slot with no empty slot in between (backward-shift deletion keeps this true).
// Cost:       find/insert/erase O(1) expected; growth doubles and rehashes. Pointers returned by find() are
//             invalidated by any insert or erase.
// Threading:  none; the owner serializes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ctxcache/detail/huge_page_allocator.h"
#include "ctxcache/detail/prefetch.h"

namespace ctxcache::detail {

inline uint64_t mixHash(uint64_t h) noexcept {  // murmur3 fmix64: spreads synthetic (small) keys
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

template <class Key, class Value, class Hasher>
class FlatHashMap {
public:
    FlatHashMap() = default;

    size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    size_t memoryBytes() const noexcept { return slots_.capacity() * sizeof(Slot); }

    void reserve(size_t count) {
        size_t capacity = 16;
        while (capacity * 3 / 4 < count) capacity *= 2;
        if (capacity > slots_.size()) rehash(capacity);
    }

    Value* find(Key const& key) noexcept {
        if (size_ == 0) return nullptr;
        for (size_t i = home(key);; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (!s.used) return nullptr;
            if (s.key == key) return &s.value;
        }
    }
    Value const* find(Key const& key) const noexcept { return const_cast<FlatHashMap*>(this)->find(key); }
    bool contains(Key const& key) const noexcept { return find(key) != nullptr; }
    // A hint that `key` is about to be looked up, inserted or erased: starts loading its home slot.
    void prefetch(Key const& key) const noexcept {
        if (!slots_.empty()) prefetchForRead(&slots_[home(key)]);
    }

    // Inserts (key, value) unless key is present. Returns the stored value and whether it was inserted.
    std::pair<Value*, bool> tryEmplace(Key const& key, Value const& value) {
        if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.empty() ? 16 : slots_.size() * 2);
        for (size_t i = home(key);; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (!s.used) {
                s.key = key;
                s.value = value;
                s.used = true;
                ++size_;
                return {&s.value, true};
            }
            if (s.key == key) return {&s.value, false};
        }
    }

    bool erase(Key const& key) noexcept {
        if (size_ == 0) return false;
        size_t i = home(key);
        for (;; i = (i + 1) & mask_) {
            if (!slots_[i].used) return false;
            if (slots_[i].key == key) break;
        }
        // Backward shift: pull later members of the run into the hole unless that would put them before home.
        for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
            Slot& next = slots_[j];
            if (!next.used) break;
            size_t const h = home(next.key);
            if (((j - h) & mask_) >= ((j - i) & mask_)) {
                slots_[i] = std::move(next);
                i = j;
            }
        }
        slots_[i].used = false;
        --size_;
        return true;
    }

    void clear() noexcept {
        for (Slot& s : slots_) s.used = false;
        size_ = 0;
    }

    template <class F>
    void forEach(F&& f) const {
        for (Slot const& s : slots_)
            if (s.used) f(s.key, s.value);
    }

private:
    struct Slot {
        Key key{};
        Value value{};
        bool used = false;
    };

    size_t home(Key const& key) const noexcept { return static_cast<size_t>(mixHash(Hasher{}(key))) & mask_; }

    void rehash(size_t capacity) {
        Slots grown(capacity, Slot{});  // the only allocation: a failure leaves the map untouched
        Slots old;
        old.swap(slots_);
        slots_.swap(grown);
        mask_ = capacity - 1;
        size_ = 0;
        for (Slot& s : old)
            if (s.used) tryEmplace(s.key, s.value);
    }

    using Slots = std::vector<Slot, HugePageAllocator<Slot>>;  // large ones on huge pages

    Slots slots_;
    size_t size_ = 0;
    size_t mask_ = 0;
};

}  // namespace ctxcache::detail
