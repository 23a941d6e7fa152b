// The device fuzzer's model (tests/fuzz/device_fuzz.cpp is its driver): the reference state the fuzzer keeps of
// every object it created through the device C ABI, and the reference computations it checks the library against.
//   - the geometry of each kind of object (pool, page table, KV lengths, resident state, snapshot storage), with
//     the footprints and row / region sizes the library must allocate and expose;
//   - what is observable through the ABI per slot (Obs: buffer and pool bytes, page tables host and device side,
//     KV lengths, resident rows, snapshot regions), compared part by part;
//   - an independent 128-bit FNV-1a with the documented chunked-hash scheme, and the two compaction-map rules;
//   - Model: the slots of every object alive (and stale) in one input, with the queries and updates of that state
//     the driver's operations share (live handles, expected allocated bytes per backend, snapshot keys, model
//     page-table rows).
// No ABI call is made here and nothing is decoded from the fuzzer's input: the driver does both.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ctxcache.h"

namespace device_fuzz {

using Bytes = std::vector<uint8_t>;
using Key = std::array<int32_t, 3>;  // (part, layer, slot) of a resident row or a snapshot region

constexpr size_t kMaxTableBytes = size_t{1} << 30;  // the largest descriptor table a backend accepts
constexpr size_t kBackends = 2, kBuffers = 3, kPools = 3, kTables = 2, kLengths = 2, kStates = 2, kStorages = 2;
constexpr int32_t kRec = CTXC_STATE_RECURRENT, kConv = CTXC_STATE_CONV, kHidden = CTXC_STATE_BOUNDARY_HIDDEN,
                  kPartial = CTXC_STATE_PARTIAL_KV, kDraftPartial = CTXC_STATE_DRAFT_PARTIAL_KV;

inline size_t dtypeSize(int32_t d) { return d == CTXC_DTYPE_FP32 ? 4 : d == CTXC_DTYPE_FP8_E4M3 ? 1 : 2; }
inline bool validDType(int32_t d) { return d >= CTXC_DTYPE_FP16 && d <= CTXC_DTYPE_FP32; }
inline size_t alignUp(size_t v) { return (v + 255) / 256 * 256; }

// ---- an independent 128-bit FNV-1a and the documented chunked scheme ------------------------------------------

using u128 = unsigned __int128;
u128 const kFnvBasis = (static_cast<u128>(0x6C62272E07BB0142ull) << 64) | 0x62B821756295C58Dull;
u128 const kFnvPrime = (static_cast<u128>(1) << 88) | 0x13B;

inline u128 fnv(uint8_t const* p, size_t n, u128 s = kFnvBasis) {
    for (size_t i = 0; i < n; ++i) s = (s ^ p[i]) * kFnvPrime;
    return s;
}

inline u128 fnvU64(uint64_t v, u128 s) {
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    return fnv(b, 8, s);
}

inline ctxc_hash128_t chunkedDigest(uint8_t const* data, uint64_t size, uint32_t chunks) {
    uint64_t const cs = (size + chunks - 1) / chunks;
    uint8_t const tag = 18;
    u128 s = fnvU64(size, fnv(&tag, 1));
    for (uint32_t i = 0; i < chunks; ++i) {
        uint64_t const begin = std::min<uint64_t>(static_cast<uint64_t>(i) * cs, size);
        uint64_t const end = std::min<uint64_t>(begin + cs, size);
        u128 const partial = fnv(data + begin, static_cast<size_t>(end - begin));
        s = fnvU64(static_cast<uint64_t>(partial), fnvU64(static_cast<uint64_t>(partial >> 64), s));
    }
    return ctxc_hash128_t{static_cast<uint64_t>(s >> 64), static_cast<uint64_t>(s)};
}

// ---- compaction-map rules -------------------------------------------------------------------------------------

// Device compaction (buffers, KV lengths, resident state): survivors keep their order and fill [0, newBatch).
inline bool denseOrderPreserving(std::vector<int32_t> const& map, int32_t newBatch) {
    if (newBatch < 0 || newBatch > static_cast<int32_t>(map.size())) return false;
    int32_t next = 0;
    for (int32_t to : map) {
        if (to == -1) continue;
        if (to != next) return false;
        ++next;
    }
    return next == newBatch;
}

// Page-table rows: any order, each destination in [0, newBatch) exactly once.
inline bool ontoPrefix(std::vector<int32_t> const& map, int32_t newBatch) {
    if (newBatch < 0 || newBatch > static_cast<int32_t>(map.size())) return false;
    std::vector<bool> seen(static_cast<size_t>(newBatch), false);
    int32_t count = 0;
    for (int32_t to : map) {
        if (to == -1) continue;
        if (to < 0 || to >= newBatch || seen[static_cast<size_t>(to)]) return false;
        seen[static_cast<size_t>(to)] = true;
        ++count;
    }
    return count == newBatch;
}

// ---- what the fuzzer knows about each object ------------------------------------------------------------------

struct Slot {
    void* h = nullptr;  // kept after destruction: a stale handle to pass later
    bool live = false;
    uint64_t backend = 0;  // id of the backend the object lives on
};

struct BackendSlot : Slot {
    uint64_t id = 0;  // == backend
    size_t maxTable = 0;
    uint32_t maxChunks = 0;
};

struct BufferSlot : Slot {
    size_t size = 0;
};

struct PoolGeometry {
    int32_t numPages = 0, pageSize = 0, dtype = 0;
    std::vector<std::pair<int32_t, int32_t>> layers;  // (kv_heads, head_dim)
    size_t tokenBytes(size_t l) const {
        return static_cast<size_t>(layers[l].first) * static_cast<size_t>(layers[l].second) * dtypeSize(dtype);
    }
    size_t pageBytes(size_t l) const { return static_cast<size_t>(pageSize) * tokenBytes(l); }
    size_t layerBytes(size_t l) const { return 2 * static_cast<size_t>(numPages) * pageBytes(l); }
    size_t footprint() const {
        size_t offset = 0;
        for (size_t l = 0; l < layers.size(); ++l) offset = alignUp(offset + layerBytes(l));
        return offset;
    }
};

struct PoolSlot : Slot {
    uint64_t uid = 0;
    PoolGeometry g;
};

struct TableSlot : Slot {
    int32_t maxBatch = 0, mpps = 0, numPages = 0, mode = 0;
    std::vector<uint8_t> dirtyRows;
    size_t entries() const { return static_cast<size_t>(maxBatch) * 2 * static_cast<size_t>(mpps); }
};

struct LengthsSlot : Slot {
    int32_t maxBatch = 0;
};

struct StateGeometry {
    int32_t maxBatch = 0, numLayers = 0;
    size_t recRow = 0, convRow = 0, hidRow = 0;
    size_t rowBytes(int32_t part) const {
        return part == kRec ? recRow : part == kConv ? convRow : part == kHidden ? hidRow : 0;
    }
    size_t footprint() const {
        size_t offset = 0;
        size_t const batch = static_cast<size_t>(maxBatch);
        for (int32_t l = 0; l < numLayers; ++l) {
            offset = alignUp(offset + batch * recRow);
            offset = alignUp(offset + batch * convRow);
        }
        return alignUp(offset + batch * hidRow);
    }
};

struct StateSlot : Slot {
    uint64_t uid = 0;
    StateGeometry g;
};

struct StorageSlot : Slot {
    uint64_t stateUid = 0, baseUid = 0, draftUid = 0;  // 0 = none
    StateGeometry state;
    PoolGeometry base, draft;
    bool boundary = false;
    int32_t rslots = 0, pslots = 0;
    size_t rbps = 0, pbps = 0;
    size_t footprint() const { return static_cast<size_t>(rslots) * rbps + static_cast<size_t>(pslots) * pbps; }
    size_t regionBytes(int32_t part, int32_t layer) const {
        if (part == kPartial) return 2 * base.pageBytes(static_cast<size_t>(layer));
        if (part == kDraftPartial) return 2 * draft.pageBytes(static_cast<size_t>(layer));
        return state.rowBytes(part);
    }
};

// Pools and resident states may outlive their handles inside a snapshot storage.
struct Holdable {
    uint64_t backend = 0;
    size_t bytes = 0;
    bool handleLive = true;
    int holders = 0;
};

struct TableObs {
    std::vector<int32_t> host, device;
    int32_t dirty = 0;
    bool operator==(TableObs const& o) const {
        return std::tie(host, device, dirty) == std::tie(o.host, o.device, o.dirty);
    }
    bool operator!=(TableObs const& o) const { return !(*this == o); }
};

// Everything observable through the ABI, per slot (nullopt = no live handle there).
struct Obs {
    std::array<std::optional<Bytes>, kBuffers> buffers;
    std::array<std::optional<std::vector<Bytes>>, kPools> pools;  // per layer
    std::array<std::optional<TableObs>, kTables> tables;
    std::array<std::optional<std::vector<int32_t>>, kLengths> lengths;
    std::array<std::optional<std::map<Key, Bytes>>, kStates> states;
    std::array<std::optional<std::map<Key, Bytes>>, kStorages> storages;

    // "" when equal, else the first part that differs.
    std::string diff(Obs const& o) const {
        for (size_t i = 0; i < kBuffers; ++i)
            if (buffers[i] != o.buffers[i]) return "buffer " + std::to_string(i);
        for (size_t i = 0; i < kPools; ++i)
            if (pools[i] != o.pools[i]) return "pool " + std::to_string(i);
        for (size_t i = 0; i < kTables; ++i)
            if (tables[i] != o.tables[i]) return "page table " + std::to_string(i);
        for (size_t i = 0; i < kLengths; ++i)
            if (lengths[i] != o.lengths[i]) return "KV lengths " + std::to_string(i);
        for (size_t i = 0; i < kStates; ++i)
            if (states[i] != o.states[i]) return "resident state " + std::to_string(i);
        for (size_t i = 0; i < kStorages; ++i)
            if (storages[i] != o.storages[i]) return "snapshot storage " + std::to_string(i);
        return "";
    }
};

// The reference state: what the fuzzer knows of every object it created in this input, slot by slot, and the
// queries and updates of that state that need no input byte and no ABI call. The driver (Session) decodes each
// operation, makes the call and moves this state as the call's contract says.
class Model {
protected:
    std::vector<void*> liveHandles() const {
        std::vector<void*> out;
        auto add = [&](auto const& slots) {
            for (auto const& s : slots)
                if (s.live) out.push_back(s.h);
        };
        add(backends_), add(buffers_), add(pools_), add(tables_), add(lengths_), add(states_), add(storages_);
        return out;
    }

    BackendSlot const* backendById(uint64_t id) const {
        auto it = backendInfo_.find(id);
        return it == backendInfo_.end() ? nullptr : &it->second;
    }

    std::vector<Key> stateKeys(StateGeometry const& g) const {
        std::vector<Key> keys;
        for (int32_t s = 0; s < g.maxBatch; ++s) {
            for (int32_t l = 0; l < g.numLayers; ++l) {
                if (g.recRow) keys.push_back({kRec, l, s});
                if (g.convRow) keys.push_back({kConv, l, s});
            }
            if (g.hidRow) keys.push_back({kHidden, 0, s});
        }
        return keys;
    }

    std::vector<Key> storageKeys(StorageSlot const& st) const {
        std::vector<Key> keys;
        for (int32_t s = 0; s < st.rslots; ++s) {
            for (int32_t l = 0; l < st.state.numLayers; ++l) {
                if (st.state.recRow) keys.push_back({kRec, l, s});
                if (st.state.convRow) keys.push_back({kConv, l, s});
            }
            if (st.boundary) keys.push_back({kHidden, 0, s});
        }
        for (int32_t s = 0; s < st.pslots; ++s) {
            for (size_t l = 0; l < st.base.layers.size(); ++l) keys.push_back({kPartial, static_cast<int32_t>(l), s});
            for (size_t l = 0; l < st.draft.layers.size(); ++l)
                keys.push_back({kDraftPartial, static_cast<int32_t>(l), s});
        }
        return keys;
    }

    size_t expectedAllocated(uint64_t backend) const {
        size_t total = 0;
        for (auto const& b : buffers_)
            if (b.live && b.backend == backend) total += b.size;
        for (auto const& t : tables_)
            if (t.live && t.backend == backend) total += t.entries() * sizeof(int32_t);
        for (auto const& l : lengths_)
            if (l.live && l.backend == backend) total += static_cast<size_t>(l.maxBatch) * sizeof(int32_t);
        for (auto const& s : storages_)
            if (s.live && s.backend == backend) total += s.footprint();
        for (auto const& [uid, h] : holdables_)
            if (h.backend == backend && (h.handleLive || h.holders > 0)) total += h.bytes;
        return total;
    }

    // Writes K ids k[0..mpps) into a slot's model row (V = K + numPages) and marks it dirty.
    void writeModelRow(size_t table, Obs& e, int32_t slot, std::vector<int32_t> const& k) {
        TableSlot& t = tables_[table];
        TableObs& o = *e.tables[table];
        for (int32_t p = 0; p < t.mpps; ++p) {
            int32_t const page = p < static_cast<int32_t>(k.size()) ? k[static_cast<size_t>(p)] : -1;
            o.host[static_cast<size_t>((slot * 2) * t.mpps + p)] = page;
            o.host[static_cast<size_t>((slot * 2 + 1) * t.mpps + p)] = page < 0 ? -1 : page + t.numPages;
        }
        t.dirtyRows[static_cast<size_t>(slot)] = 1;
        o.dirty = 1;
    }

    std::vector<int32_t> modelRow(Obs const& e, size_t table, int32_t slot) const {
        TableSlot const& t = tables_[table];
        auto const& host = e.tables[table]->host;
        auto const begin = host.begin() + static_cast<ptrdiff_t>(slot) * 2 * t.mpps;
        return std::vector<int32_t>(begin, begin + t.mpps);
    }

    static int32_t wrapAdd(int32_t a, int32_t b) {
        return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
    }

    template <class Slots>
    int slotOfUid(Slots const& slots, uint64_t uid) const {
        for (size_t k = 0; k < slots.size(); ++k)
            if (uid && slots[k].live && slots[k].uid == uid) return static_cast<int>(k);
        return -1;
    }

    uint64_t nextId_ = 0;
    std::array<BackendSlot, kBackends> backends_{};
    std::map<uint64_t, BackendSlot> backendInfo_;  // every backend ever created in this input, by id
    std::array<BufferSlot, kBuffers> buffers_{};
    std::array<PoolSlot, kPools> pools_{};
    std::array<TableSlot, kTables> tables_{};
    std::array<LengthsSlot, kLengths> lengths_{};
    std::array<StateSlot, kStates> states_{};
    std::array<StorageSlot, kStorages> storages_{};
    std::map<uint64_t, Holdable> holdables_;
};

}  // namespace device_fuzz
