// SlotHashIndex: an open-addressing index from a 128-bit block hash to an int32 slot, for an owner that already
// keeps each slot's hash in its own slot array (the host tier's). A bucket is 8 bytes: 32 bits of the mixed hash
// (its fingerprint, whose low bits are the home bucket) and the slot. So a probe reads eight buckets per cache
// line, a key is compared (through the owner's slot) only when its fingerprint matches, a backward-shift erase and
// a rehash move fingerprints without recomputing a hash, and an erase names its slot, so it never compares a key.
// The general FlatHashMap (flat_hash_map.h) stores the 128-bit key beside its value: 24 bytes a bucket, three
// times the lines per probe, which is what a tier of a million slots pays on every write.
//
// Invariants: every bucket is empty (slot kEmpty) or holds a slot under the fingerprint of that slot's hash, in
//             the probe run starting at the fingerprint's home; no slot is held twice; load at most 1/2.
// Errors:     a rehash that cannot allocate throws std::bad_alloc before anything changed; nothing else throws.
// Cost:       find, insert, erase O(1) expected (linear probing at most half full: a run is short, and at 8 bytes
//             a bucket the slack costs less than the 24-byte map's at 3/4); the hash is mixed once per call;
//             memory 8 bytes a bucket, buckets a power of two at least twice the entries (16 to 32 bytes each).
// Threading:  none; the owner's single writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/detail/flat_hash_map.h"
#include "ctxcache/detail/huge_page_allocator.h"
#include "ctxcache/detail/prefetch.h"

namespace ctxcache::detail {

class SlotHashIndex {
public:
    static constexpr int32_t kEmpty = -1;

    size_t size() const noexcept { return size_; }
    size_t memoryBytes() const noexcept { return buckets_.capacity() * sizeof(Bucket); }

    static uint32_t fingerprint(Hash128 const& hash) noexcept {
        return static_cast<uint32_t>(mixHash(Hash128Hasher{}(hash)));
    }

    // Room for `count` entries without a rehash later (std::bad_alloc, nothing changed, when it cannot grow).
    void reserve(size_t count) {
        size_t buckets = 16;
        while (buckets / 2 < count) buckets *= 2;
        if (buckets > buckets_.size()) rehash(buckets);
    }

    // The slot holding `hash`, or kEmpty. hashOf(slot) gives the hash the owner keeps for a slot; it is asked
    // only for slots whose fingerprint matches.
    template <class HashOf>
    int32_t find(Hash128 const& hash, HashOf const& hashOf) const noexcept {
        return find(hash, fingerprint(hash), hashOf);
    }
    // The same with the hash's fingerprint already computed (a batch computes them in one pass).
    template <class HashOf>
    int32_t find(Hash128 const& hash, uint32_t fp, HashOf const& hashOf) const noexcept {
        if (size_ == 0) return kEmpty;
        for (size_t i = fp & mask_;; i = (i + 1) & mask_) {
            Bucket const& b = buckets_[i];
            if (b.slot == kEmpty) return kEmpty;
            if (b.fp == fp && hashOf(b.slot) == hash) return b.slot;
        }
    }

    // A hint that `hash` is about to be found, inserted or erased: starts loading its home bucket.
    void prefetch(Hash128 const& hash) const noexcept { prefetch(fingerprint(hash)); }
    void prefetch(uint32_t fp) const noexcept {
        if (!buckets_.empty()) prefetchForRead(&buckets_[fp & mask_]);
    }

    // Adds slot under `hash`, which must not be indexed. Grows first when full (std::bad_alloc, nothing changed).
    void insert(Hash128 const& hash, int32_t slot) { insert(fingerprint(hash), slot); }
    void insert(uint32_t fp, int32_t slot) {
        if ((size_ + 1) * 2 > buckets_.size()) rehash(buckets_.empty() ? 16 : buckets_.size() * 2);
        place(fp, slot);
        ++size_;
    }

    // Removes `slot`, indexed under `hash`. Returns whether it was there.
    bool erase(Hash128 const& hash, int32_t slot) noexcept {
        if (size_ == 0) return false;
        uint32_t const fp = fingerprint(hash);
        size_t i = fp & mask_;
        for (;; i = (i + 1) & mask_) {
            if (buckets_[i].slot == kEmpty) return false;
            if (buckets_[i].slot == slot) break;
        }
        // Backward shift: pull later members of the run into the hole unless that would put them before home.
        for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
            Bucket const next = buckets_[j];
            if (next.slot == kEmpty) break;
            if (((j - (next.fp & mask_)) & mask_) >= ((j - i) & mask_)) {
                buckets_[i] = next;
                i = j;
            }
        }
        buckets_[i].slot = kEmpty;
        --size_;
        return true;
    }

    void clear() noexcept {
        for (Bucket& b : buckets_) b.slot = kEmpty;
        size_ = 0;
    }

    // f(fingerprint, slot) for every entry, in bucket order.
    template <class F>
    void forEach(F&& f) const {
        for (Bucket const& b : buckets_)
            if (b.slot != kEmpty) f(b.fp, b.slot);
    }

private:
    struct Bucket {
        uint32_t fp = 0;
        int32_t slot = kEmpty;
    };

    void place(uint32_t fp, int32_t slot) noexcept {
        size_t i = fp & mask_;
        while (buckets_[i].slot != kEmpty) i = (i + 1) & mask_;
        buckets_[i] = Bucket{fp, slot};
    }

    void rehash(size_t buckets) {
        std::vector<Bucket, HugePageAllocator<Bucket>> grown(
            buckets);  // the only allocation: a failure leaves the index untouched
        grown.swap(buckets_);
        mask_ = buckets - 1;
        for (Bucket const& b : grown)
            if (b.slot != kEmpty) place(b.fp, b.slot);
    }

    std::vector<Bucket, HugePageAllocator<Bucket>> buckets_;  // large, probed at random
    size_t size_ = 0;
    size_t mask_ = 0;
};

}  // namespace ctxcache::detail
