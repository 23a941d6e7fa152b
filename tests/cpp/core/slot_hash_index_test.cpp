// SlotHashIndex: the host tier's hash -> slot index, against a std::unordered_map model under random inserts and
// erases, with keys whose 32-bit fingerprints collide (so a probe must confirm through the owner's hashes) and
// with structured keys (small integers) that must still spread.
#include "ctxcache/detail/slot_hash_index.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace ctxcache {
namespace {

using detail::SlotHashIndex;

struct Owner {  // the slot array the index points into
    std::vector<Hash128> hashes;
    Hash128 const& operator()(int32_t slot) const { return hashes.at(static_cast<size_t>(slot)); }
};

// Two distinct hashes with the same fingerprint (a birthday search over 2^17 random keys finds one).
std::pair<Hash128, Hash128> fingerprintTwins() {
    std::mt19937_64 rng(7);
    std::unordered_map<uint32_t, Hash128> seen;
    for (;;) {
        Hash128 const h{rng(), rng()};
        auto [it, inserted] = seen.try_emplace(SlotHashIndex::fingerprint(h), h);
        if (!inserted && it->second != h) return {it->second, h};
    }
}

TEST(SlotHashIndex, KeysWhoseFingerprintsCollideAreToldApartByTheOwnersHashes) {
    auto const [a, b] = fingerprintTwins();
    ASSERT_EQ(SlotHashIndex::fingerprint(a), SlotHashIndex::fingerprint(b));
    Owner owner{{a, b}};
    SlotHashIndex index;
    index.insert(a, 0);
    EXPECT_EQ(index.find(a, owner), 0);
    EXPECT_EQ(index.find(b, owner), SlotHashIndex::kEmpty);  // same fingerprint, other hash: not found
    index.insert(b, 1);
    EXPECT_EQ(index.find(a, owner), 0);
    EXPECT_EQ(index.find(b, owner), 1);
    // An erase names its slot: removing a's entry leaves b's, though both sit under one fingerprint.
    EXPECT_TRUE(index.erase(a, 0));
    EXPECT_FALSE(index.erase(a, 0));
    EXPECT_EQ(index.find(a, owner), SlotHashIndex::kEmpty);
    EXPECT_EQ(index.find(b, owner), 1);
    EXPECT_EQ(index.size(), 1u);
}

TEST(SlotHashIndex, AgreesWithAMapUnderRandomInsertsAndErasesThroughGrowth) {
    std::mt19937_64 rng(11);
    Owner owner;
    std::unordered_map<Hash128, int32_t> model;
    std::vector<int32_t> live;  // slots indexed now
    std::vector<int32_t> freeSlots;
    SlotHashIndex index;
    for (int step = 0; step < 60000; ++step) {
        bool const add = live.empty() || rng() % 100 < 60;
        if (add) {
            // Structured keys (small integers, as tests and synthetic workloads use) half of the time.
            Hash128 const h = rng() % 2 ? Hash128{rng(), rng()} : Hash128{0, static_cast<uint64_t>(step)};
            if (model.count(h)) continue;
            int32_t slot;
            if (!freeSlots.empty()) {
                slot = freeSlots.back();
                freeSlots.pop_back();
                owner.hashes[static_cast<size_t>(slot)] = h;
            } else {
                slot = static_cast<int32_t>(owner.hashes.size());
                owner.hashes.push_back(h);
            }
            index.insert(h, slot);
            model[h] = slot;
            live.push_back(slot);
        } else {
            size_t const k = rng() % live.size();
            int32_t const slot = live[k];
            Hash128 const h = owner.hashes[static_cast<size_t>(slot)];
            ASSERT_TRUE(index.erase(h, slot));
            model.erase(h);
            live[k] = live.back();
            live.pop_back();
            freeSlots.push_back(slot);
        }
        if (step % 997 == 0) {
            ASSERT_EQ(index.size(), model.size());
            for (auto const& [h, slot] : model) ASSERT_EQ(index.find(h, owner), slot);
            for (int32_t slot : freeSlots) {  // a freed slot's last hash is gone
                Hash128 const gone = owner.hashes[static_cast<size_t>(slot)];
                ASSERT_EQ(index.find(gone, owner), SlotHashIndex::kEmpty);
            }
            size_t entries = 0;
            index.forEach([&](uint32_t fp, int32_t slot) {
                ++entries;
                EXPECT_EQ(fp, SlotHashIndex::fingerprint(owner.hashes[static_cast<size_t>(slot)]));
            });
            ASSERT_EQ(entries, model.size());
        }
    }
    // At most half full: 8 bytes a bucket, at least two buckets an entry.
    EXPECT_LE(index.size() * 2 * 8, index.memoryBytes());
    index.clear();
    EXPECT_EQ(index.size(), 0u);
    for (auto const& [h, slot] : model) EXPECT_EQ(index.find(h, owner), SlotHashIndex::kEmpty);
}

TEST(SlotHashIndex, ReserveMakesRoomSoThatInsertsDoNotGrowTheTable) {
    SlotHashIndex index;
    index.reserve(1000);
    size_t const bytes = index.memoryBytes();
    EXPECT_GE(bytes, 2000u * 8);
    Owner owner;
    for (int32_t i = 0; i < 1000; ++i) {
        owner.hashes.push_back(Hash128{static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull, static_cast<uint64_t>(i)});
        index.insert(owner.hashes.back(), i);
    }
    EXPECT_EQ(index.memoryBytes(), bytes);
    for (int32_t i = 0; i < 1000; ++i) EXPECT_EQ(index.find(owner.hashes[static_cast<size_t>(i)], owner), i);
}

}  // namespace
}  // namespace ctxcache
