// libFuzzer target for the device layer's C ABI on the CPU backend: the input bytes are decoded into a sequence of
// ctxc_device_* / ctxc_kv_* / ctxc_resident_state_* / ctxc_snapshot_storage_* calls over at most two backends and
// a few objects of each kind, with random (often invalid) geometry and dtypes, out-of-range pages, slots, offsets
// and lengths, reordering / duplicating / gapped compaction maps, NULL arrays with non-zero counts, and NULL,
// stale, made-up and wrongly typed handles.
//
// The target keeps a model (device_fuzz_model.h: the reference state and computations; this file decodes the
// operations, makes the calls and predicts their effects) of everything a caller can observe through the ABI
// (every buffer's and pool's bytes, each page table host and device side with its dirty rows, KV lengths,
// resident-state rows, snapshot regions) and after every call checks, aborting on a violation:
//   - the status is a known ctxc_status_t and never CTXC_E_INTERNAL, _INVARIANT or _DEVICE (this is the CPU
//     backend); a failure's ctxc_last_error() starts with the function's name;
//   - success or failure agrees with the model (valid arguments succeed, invalid ones fail; an invalid handle is
//     CTXC_E_INVALID_HANDLE);
//   - a failed call changed nothing observable; a successful one changed exactly what the model predicts, byte
//     for byte (page rows and uploads, compaction, execution-row rebasing, same-dtype gathers, dense K/V
//     scatters in both layouts, snapshot capture
//     and restore, chunked hashes against an independent FNV-1a);
//   - every live page table passes ctxc_kv_page_table_check_invariants();
//   - every live backend's allocated bytes equal the footprints of the objects alive on it (no operation
//     allocates device memory, nothing leaks).
// Creations that the library must accept but that would allocate more than kMaxLegitBytes are skipped (they would
// only measure the machine's memory); creations it must refuse are always made, whatever size they ask for, so a
// refusal that allocates first trips libFuzzer's -malloc_limit_mb (tools/fuzz sets it for this target).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "../cpp/capi/device_creates.h"
#include "ctxcache.h"
#include "device_fuzz_model.h"

namespace {

using namespace device_fuzz;  // NOLINT(google-build-using-namespace): the model is this driver's vocabulary

constexpr size_t kMaxLegitBytes = 256 * 1024;
constexpr int kMaxSteps = 48;

std::string g_op;  // the call in progress, for failure messages

// With DEVICE_FUZZ_STATS set, how often each call succeeded and failed is printed at exit (is the model reaching
// the successful paths, not only the refusals?).
std::map<std::string, std::array<uint64_t, 2>>& callCounts() {
    static auto* counts = new std::map<std::string, std::array<uint64_t, 2>>;  // outlives the atexit printer
    return *counts;
}

void printCallCounts() {
    for (auto const& [fn, c] : callCounts())
        std::fprintf(stderr, "%-40s ok %10llu  failed %10llu\n", fn.c_str(), static_cast<unsigned long long>(c[0]),
                     static_cast<unsigned long long>(c[1]));
}

[[noreturn]] void fail(std::string const& what) {
    std::fprintf(stderr, "device_fuzz: %s: %s (last error: %s)\n", g_op.c_str(), what.c_str(), ctxc_last_error());
    std::abort();
}

// A handle argument: `slot` >= 0 when it is the live object in that slot, else it is invalid.
struct Arg {
    void* ptr = nullptr;
    int slot = -1;
    bool valid() const { return slot >= 0; }
};

void checkStatus(char const* fn, ctxc_status_t s) {
    if (s < CTXC_OK || s >= CTXC_STATUS_COUNT) fail("unknown status code " + std::to_string(static_cast<int>(s)));
    if (s == CTXC_E_INTERNAL || s == CTXC_E_INVARIANT || s == CTXC_E_DEVICE || s == CTXC_E_CONCURRENT_USE)
        fail(std::string(fn) + " returned " + ctxc_status_string(s));  // one thread: never concurrent
    if (s != CTXC_OK && s != CTXC_E_BUFFER_TOO_SMALL) {
        std::string const prefix = std::string(fn) + ": ";
        if (std::strncmp(ctxc_last_error(), prefix.c_str(), prefix.size()) != 0 ||
            std::strlen(ctxc_last_error()) <= prefix.size())
            fail(std::string("the error message does not name ") + fn);
    }
}

class Session : Model {
public:
    explicit Session(FuzzedDataProvider& in) : in_(in) {}

    void run() {
        for (int step = 0; step < kMaxSteps && in_.remaining_bytes() > 0; ++step) {
            one();
            afterStep();
        }
        g_op = "teardown";
        teardown();
    }

private:
    // ---- value generators -------------------------------------------------------------------------------------

    int32_t dim(int32_t lo, int32_t hi) {  // mostly in [lo, hi], sometimes a boundary value
        switch (in_.ConsumeIntegralInRange<int>(0, 31)) {
            case 0: return 0;
            case 1: return -1;
            case 2: return std::numeric_limits<int32_t>::min();
            case 3: return std::numeric_limits<int32_t>::max();
            case 4: return 1 << 20;
            default: return in_.ConsumeIntegralInRange<int32_t>(lo, hi);
        }
    }

    int32_t index(int32_t n) {  // an index into [0, n), just outside it, or far outside
        switch (in_.ConsumeIntegralInRange<int>(0, 23)) {
            case 0: return -1;
            case 1: return n;
            case 2: return std::numeric_limits<int32_t>::min();
            case 3: return std::numeric_limits<int32_t>::max();
            case 4: return n < std::numeric_limits<int32_t>::max() ? n + 1 : n;
            default: return n > 0 ? in_.ConsumeIntegralInRange<int32_t>(0, n - 1) : 0;
        }
    }

    size_t offsetIn(size_t n) {  // a byte offset or size within [0, n], or outside
        switch (in_.ConsumeIntegralInRange<int>(0, 19)) {
            case 0: return SIZE_MAX;
            case 1: return n + 1;
            case 2: return SIZE_MAX - 3;
            case 3: return size_t{1} << 62;
            default: return in_.ConsumeIntegralInRange<size_t>(0, n);
        }
    }

    int32_t dtype() {
        switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
            case 0: return -1;
            case 1: return 4;
            default: return in_.ConsumeIntegralInRange<int32_t>(0, 3);
        }
    }

    int32_t part() { return in_.ConsumeIntegralInRange<int32_t>(-1, 5); }

    Bytes pattern(size_t n) {
        uint8_t const seed = in_.ConsumeIntegral<uint8_t>();
        Bytes out(n);
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed * 37u + i * 11u + (i >> 8));
        return out;
    }

    // A compaction map of oldBatch entries (mostly valid by `dense`'s rule, sometimes reordered, duplicated,
    // gapped or out of range) and the new batch it claims.
    std::vector<int32_t> compactionMap(int32_t oldBatch, int32_t& newBatch) {
        std::vector<int32_t> map(static_cast<size_t>(std::max(oldBatch, 0)), -1);
        int32_t next = 0;
        for (int32_t& to : map)
            if (in_.ConsumeBool()) to = next++;
        newBatch = next;
        switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
            case 0:  // reorder two survivors
                if (next >= 2) {
                    int32_t a = -1, b = -1;
                    for (size_t i = 0; i < map.size(); ++i)
                        if (map[i] == 0) a = static_cast<int32_t>(i);
                        else if (map[i] == 1) b = static_cast<int32_t>(i);
                    std::swap(map[static_cast<size_t>(a)], map[static_cast<size_t>(b)]);
                }
                break;
            case 1:  // duplicate a destination
                if (!map.empty()) map[in_.ConsumeIntegralInRange<size_t>(0, map.size() - 1)] = 0;
                break;
            case 2: {  // an out-of-range entry
                static constexpr int32_t kBad[] = {-2, std::numeric_limits<int32_t>::min(),
                                                   std::numeric_limits<int32_t>::max(), 64};
                if (!map.empty())
                    map[in_.ConsumeIntegralInRange<size_t>(0, map.size() - 1)] =
                        in_.ConsumeBool() ? oldBatch : kBad[in_.ConsumeIntegralInRange<size_t>(0, std::size(kBad) - 1)];
                break;
            } break;
            case 3: newBatch = in_.ConsumeIntegralInRange<int32_t>(-1, std::clamp(oldBatch, 0, 1 << 20) + 1); break;
            default: break;
        }
        return map;
    }

    // ---- handle arguments ----------------------------------------------------------------------------------

    void* madeUp() {
        uint64_t bits = in_.ConsumeIntegral<uint64_t>();
        std::vector<void*> const live = liveHandles();
        for (bool clash = true; clash;) {
            clash = false;
            for (void* h : live)
                if (reinterpret_cast<uintptr_t>(h) == bits) clash = true;
            if (clash) bits ^= uint64_t{1} << 33;
        }
        return reinterpret_cast<void*>(static_cast<uintptr_t>(bits));
    }

    // A live handle of another type than `self`'s slots, or a made-up one when there is none.
    template <class Slots>
    void* otherType(Slots const& self) {
        std::vector<void*> candidates;
        auto add = [&](auto const& slots) {
            if (static_cast<void const*>(&slots) == static_cast<void const*>(&self)) return;
            for (auto const& s : slots)
                if (s.live) candidates.push_back(s.h);
        };
        add(backends_), add(buffers_), add(pools_), add(tables_), add(lengths_), add(states_), add(storages_);
        if (candidates.empty()) return madeUp();
        return candidates[in_.ConsumeIntegralInRange<size_t>(0, candidates.size() - 1)];
    }

    // Mostly a live object of the right type (when there is one), else NULL, made-up, another type's or any slot's
    // handle (stale, or NULL if never created).
    template <class Slots>
    Arg arg(Slots const& slots) {
        std::vector<size_t> live;
        for (size_t i = 0; i < slots.size(); ++i)
            if (slots[i].live) live.push_back(i);
        switch (in_.ConsumeIntegralInRange<int>(0, 19)) {
            case 0: return Arg{nullptr, -1};
            case 1: return Arg{madeUp(), -1};
            case 2: return Arg{otherType(slots), -1};
            case 3: {
                size_t const i = in_.ConsumeIntegralInRange<size_t>(0, slots.size() - 1);
                return Arg{slots[i].h, slots[i].live ? static_cast<int>(i) : -1};
            }
            default: {
                if (live.empty()) {
                    size_t const i = in_.ConsumeIntegralInRange<size_t>(0, slots.size() - 1);
                    return Arg{slots[i].h, -1};  // stale, or NULL if never created
                }
                size_t const i = live[in_.ConsumeIntegralInRange<size_t>(0, live.size() - 1)];
                return Arg{slots[i].h, static_cast<int>(i)};
            }
        }
    }

    // A part this object holds (mostly), or any value.
    int32_t partOf(std::vector<int32_t> const& held) {
        if (held.empty() || in_.ConsumeIntegralInRange<int>(0, 3) == 0) return part();
        return held[in_.ConsumeIntegralInRange<size_t>(0, held.size() - 1)];
    }

    // An optional handle: NULL (none) often, else any argument.
    template <class Slots>
    Arg optionalArg(Slots const& slots) {
        if (in_.ConsumeIntegralInRange<int>(0, 2) == 0) return Arg{nullptr, -1};
        return arg(slots);
    }

    template <class Slots>
    std::optional<size_t> freeSlot(Slots const& slots) {
        size_t const i = in_.ConsumeIntegralInRange<size_t>(0, slots.size() - 1);
        if (slots[i].live) return std::nullopt;
        return i;
    }

    // ---- observation ------------------------------------------------------------------------------------------

    void must(ctxc_status_t s, char const* what) {
        if (s != CTXC_OK) fail(std::string("observing: ") + what + " failed with " + ctxc_status_string(s));
    }

    Obs observe() {
        Obs o;
        for (size_t i = 0; i < kBuffers; ++i) {
            if (!buffers_[i].live) continue;
            auto* h = static_cast<ctxc_device_buffer_t*>(buffers_[i].h);
            size_t size = 0;
            must(ctxc_device_buffer_size(h, &size), "ctxc_device_buffer_size");
            if (size != buffers_[i].size) fail("buffer size changed");
            Bytes b(size);
            must(ctxc_device_buffer_read(h, 0, b.data(), size), "ctxc_device_buffer_read");
            o.buffers[i] = std::move(b);
        }
        for (size_t i = 0; i < kPools; ++i) {
            if (!pools_[i].live) continue;
            PoolGeometry const& g = pools_[i].g;
            std::vector<Bytes> layers;
            for (size_t l = 0; l < g.layers.size(); ++l) {
                Bytes b(g.layerBytes(l));
                must(ctxc_kv_pool_read_pages(static_cast<ctxc_kv_pool_t*>(pools_[i].h), static_cast<int32_t>(l), 0,
                                             2 * g.numPages, b.data(), b.size()),
                     "ctxc_kv_pool_read_pages");
                layers.push_back(std::move(b));
            }
            o.pools[i] = std::move(layers);
        }
        for (size_t i = 0; i < kTables; ++i) {
            if (!tables_[i].live) continue;
            auto* h = static_cast<ctxc_kv_page_table_t*>(tables_[i].h);
            TableObs t;
            size_t const n = tables_[i].entries();
            t.host.resize(n);
            t.device.resize(n);
            size_t count = 0;
            must(ctxc_kv_page_table_read_host(h, t.host.data(), n, &count), "ctxc_kv_page_table_read_host");
            must(ctxc_debug_kv_page_table_read_device(h, t.device.data(), n, &count),
                 "ctxc_debug_kv_page_table_read_device");
            must(ctxc_debug_kv_page_table_is_dirty(h, &t.dirty), "ctxc_debug_kv_page_table_is_dirty");
            o.tables[i] = std::move(t);
        }
        for (size_t i = 0; i < kLengths; ++i) {
            if (!lengths_[i].live) continue;
            auto* h = static_cast<ctxc_kv_lengths_t*>(lengths_[i].h);
            std::vector<int32_t> v(static_cast<size_t>(lengths_[i].maxBatch));
            size_t count = 0;
            must(ctxc_kv_lengths_read(h, v.data(), v.size(), &count), "ctxc_kv_lengths_read");
            v.resize(count);
            o.lengths[i] = std::move(v);
        }
        for (size_t i = 0; i < kStates; ++i) {
            if (!states_[i].live) continue;
            std::map<Key, Bytes> rows;
            for (Key const& k : stateKeys(states_[i].g)) {
                Bytes b(states_[i].g.rowBytes(k[0]));
                must(ctxc_resident_state_read_row(static_cast<ctxc_resident_state_t*>(states_[i].h), k[0], k[1], k[2],
                                                  b.data(), b.size()),
                     "ctxc_resident_state_read_row");
                rows.emplace(k, std::move(b));
            }
            o.states[i] = std::move(rows);
        }
        for (size_t i = 0; i < kStorages; ++i) {
            if (!storages_[i].live) continue;
            std::map<Key, Bytes> regions;
            for (Key const& k : storageKeys(storages_[i])) {
                Bytes b(storages_[i].regionBytes(k[0], k[1]));
                must(ctxc_snapshot_storage_read_region(static_cast<ctxc_snapshot_storage_t*>(storages_[i].h), k[0],
                                                       k[1], k[2], b.data(), b.size()),
                     "ctxc_snapshot_storage_read_region");
                regions.emplace(k, std::move(b));
            }
            o.storages[i] = std::move(regions);
        }
        return o;
    }

    // Runs one call: `body` makes it (and registers what it created or destroyed on success), `update` turns the
    // observation before into the one the model expects after a success. A failure must change nothing.
    template <class Body, class Update>
    ctxc_status_t call(char const* fn, std::optional<bool> predicted, Body&& body, Update&& update,
                       bool invalidHandle = false) {
        g_op = fn;
        Obs const before = observe();
        ctxc_status_t const s = body();
        checkStatus(fn, s);
        bool const ok = s == CTXC_OK;
        ++callCounts()[fn][ok ? 0 : 1];
        if (invalidHandle && s != CTXC_E_INVALID_HANDLE)
            fail(std::string("an invalid handle gave ") + ctxc_status_string(s) + ", not CTXC_E_INVALID_HANDLE");
        if (predicted && *predicted != ok)
            fail(ok ? "succeeded where the model says it must fail"
                    : std::string("failed where the model says it must succeed: ") + ctxc_last_error());
        Obs const after = observe();
        if (!ok) {
            std::string const d = before.diff(after);
            if (!d.empty()) fail("a failed call changed " + d);
            return s;
        }
        Obs expected = before;
        update(expected, after);
        std::string const d = expected.diff(after);
        if (!d.empty()) fail("a successful call left " + d + " different from the model");
        return s;
    }

    static void nothing(Obs&, Obs const&) {}

    // ---- checks after every step and at the end -------------------------------------------------------------

    void afterStep() {
        g_op = "after step";
        for (auto const& t : tables_) {
            if (!t.live) continue;
            ctxc_status_t const s = ctxc_kv_page_table_check_invariants(static_cast<ctxc_kv_page_table_t*>(t.h));
            if (s != CTXC_OK) fail(std::string("page table invariants: ") + ctxc_status_string(s));
        }
        for (auto const& b : backends_) {
            if (!b.live) continue;
            size_t bytes = 0;
            must(ctxc_device_backend_allocated_bytes(static_cast<ctxc_device_backend_t*>(b.h), &bytes),
                 "ctxc_device_backend_allocated_bytes");
            if (bytes != expectedAllocated(b.id))
                fail("backend allocated " + std::to_string(bytes) + " bytes, the live objects hold " +
                     std::to_string(expectedAllocated(b.id)));
        }
    }

    void teardown() {
        auto destroyAll = [&](auto& slots, auto destroy) {
            for (auto& s : slots)
                if (s.live) {
                    ctxc_status_t const st = destroy(s.h);
                    if (st != CTXC_OK) fail(std::string("destroying a live handle: ") + ctxc_status_string(st));
                    s.live = false;
                }
        };
        destroyAll(storages_,
                   [](void* h) { return ctxc_snapshot_storage_destroy(static_cast<ctxc_snapshot_storage_t*>(h)); });
        destroyAll(states_,
                   [](void* h) { return ctxc_resident_state_destroy(static_cast<ctxc_resident_state_t*>(h)); });
        destroyAll(pools_, [](void* h) { return ctxc_kv_pool_destroy(static_cast<ctxc_kv_pool_t*>(h)); });
        destroyAll(tables_, [](void* h) { return ctxc_kv_page_table_destroy(static_cast<ctxc_kv_page_table_t*>(h)); });
        destroyAll(lengths_, [](void* h) { return ctxc_kv_lengths_destroy(static_cast<ctxc_kv_lengths_t*>(h)); });
        destroyAll(buffers_, [](void* h) { return ctxc_device_buffer_destroy(static_cast<ctxc_device_buffer_t*>(h)); });
        for (auto& b : backends_) {
            if (!b.live) continue;
            size_t bytes = 1;
            must(ctxc_device_backend_allocated_bytes(static_cast<ctxc_device_backend_t*>(b.h), &bytes),
                 "ctxc_device_backend_allocated_bytes");
            if (bytes != 0) fail("device bytes leaked: " + std::to_string(bytes) + " still allocated after teardown");
        }
        destroyAll(backends_,
                   [](void* h) { return ctxc_device_backend_destroy(static_cast<ctxc_device_backend_t*>(h)); });
    }

    // ---- operations ---------------------------------------------------------------------------------------------

    void one() {
        switch (in_.ConsumeIntegralInRange<int>(0, 31)) {
            case 0: createBackend(); break;
            case 1: destroyBackend(); break;
            case 2: queryBackend(); break;
            case 3: createBuffer(); break;
            case 4: writeBuffer(); break;
            case 5: readBuffer(); break;
            case 6: createPool(); break;
            case 7: writePool(); break;
            case 8: readPool(); break;
            case 9: createTable(); break;
            case 10: setRow(); break;
            case 11: setOrClearEntry(); break;
            case 12: clearRowOrIdentity(); break;
            case 13: compactTable(); break;
            case 14: uploadOrReadTable(); break;
            case 15: createLengths(); break;
            case 16: setOrAddLengths(); break;
            case 17: compactOrReadLengths(); break;
            case 18: createState(); break;
            case 19: writeOrReadRow(); break;
            case 20: zeroOrCompactState(); break;
            case 21: createStorage(); break;
            case 22: transfer(); break;
            case 23: regions(); break;
            case 24: compactRows(); break;
            case 25: rebaseRows(); break;
            case 26: gather(); break;
            case 27: hash(); break;
            case 28: destroyObject(); break;
            case 29: createPool(); break;
            case 30: scatter(); break;
            default: createBuffer(); break;
        }
    }

    void createBackend() {
        std::optional<size_t> i = freeSlot(backends_);
        if (!i) return;
        ctxc_device_backend_options_t o;
        ctxc_device_backend_options_init(&o);
        bool const shortStruct = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        if (shortStruct) o.struct_size = 4;
        int const k = in_.ConsumeIntegralInRange<int>(0, 9);
        o.kind = k == 0 ? CTXC_BACKEND_AUTO : k == 1 ? CTXC_BACKEND_CUDA : k == 2 ? -1 : k == 3 ? 3 : CTXC_BACKEND_CPU;
        o.device = in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? -1 : 0;
        static constexpr size_t kTableBytes[] = {
            size_t{1} << 20, 4096, 8192, 65536, 4095, 0, SIZE_MAX, size_t{1} << 31, size_t{1} << 40,
            size_t{1} << 20, 4096};
        o.max_table_bytes = kTableBytes[in_.ConsumeIntegralInRange<size_t>(0, std::size(kTableBytes) - 1)];
        static constexpr uint32_t kChunks[] = {65536, 1, 7, 2048, 0, UINT32_MAX, 65536};
        o.max_hash_chunks = kChunks[in_.ConsumeIntegralInRange<size_t>(0, std::size(kChunks) - 1)];
        bool const nullOptions = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        bool const valid = !nullOptions && !shortStruct &&
                           (o.kind == CTXC_BACKEND_CPU || o.kind == CTXC_BACKEND_AUTO) && o.device >= 0 &&
                           o.max_table_bytes >= 4096 && o.max_table_bytes <= kMaxTableBytes && o.max_hash_chunks > 0;
        if (valid && o.max_table_bytes > (size_t{1} << 20)) return;  // a legal but large host staging table
        call("ctxc_device_backend_create", valid, [&] {
            ctxc_device_backend_t* b = nullptr;
            ctxc_status_t const s = ctxc_device_backend_create(nullOptions ? nullptr : &o, &b);
            if (s != CTXC_OK && b) fail("a failed create returned a handle");
            if (s == CTXC_OK) {
                int32_t kind = -1;
                must(ctxc_device_backend_kind(b, &kind), "ctxc_device_backend_kind");
                if (kind != CTXC_BACKEND_CPU) fail("this build has no CUDA, yet the backend is not the CPU");
                BackendSlot& slot = backends_[*i];
                slot.h = b;
                slot.live = true;
                slot.id = slot.backend = ++nextId_;
                slot.maxTable = o.max_table_bytes;
                slot.maxChunks = o.max_hash_chunks;
                backendInfo_[slot.id] = slot;
            }
            return s;
        }, nothing);
    }

    void destroyBackend() {
        Arg const a = arg(backends_);
        call("ctxc_device_backend_destroy", a.valid() || !a.ptr, [&] {
            ctxc_status_t const s = ctxc_device_backend_destroy(static_cast<ctxc_device_backend_t*>(a.ptr));
            if (s == CTXC_OK && a.valid()) backends_[static_cast<size_t>(a.slot)].live = false;
            return s;
        }, nothing, !a.valid() && a.ptr);
    }

    void queryBackend() {
        Arg const a = arg(backends_);
        auto* b = static_cast<ctxc_device_backend_t*>(a.ptr);
        bool const nullOut = in_.ConsumeIntegralInRange<int>(0, 7) == 0;
        switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
            case 0: {
                int32_t kind = 0;
                call("ctxc_device_backend_kind", a.valid() && !nullOut,
                     [&] { return ctxc_device_backend_kind(b, nullOut ? nullptr : &kind); }, nothing);
                break;
            }
            case 1:
                call("ctxc_device_backend_synchronize", a.valid(), [&] { return ctxc_device_backend_synchronize(b); },
                     nothing, !a.valid());
                break;
            case 2: {
                ctxc_launch_counters_t c{sizeof(ctxc_launch_counters_t)};
                call("ctxc_device_backend_counters", a.valid() && !nullOut,
                     [&] { return ctxc_device_backend_counters(b, nullOut ? nullptr : &c); }, nothing);
                break;
            }
            default: {
                size_t bytes = 0;
                call("ctxc_device_backend_allocated_bytes", a.valid() && !nullOut,
                     [&] { return ctxc_device_backend_allocated_bytes(b, nullOut ? nullptr : &bytes); }, nothing);
                break;
            }
        }
    }

    void createBuffer() {
        std::optional<size_t> i = freeSlot(buffers_);
        if (!i) return;
        Arg const b = arg(backends_);
        size_t bytes = in_.ConsumeIntegralInRange<size_t>(0, 512);
        switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
            case 0: bytes = 0; break;
            case 1: bytes = SIZE_MAX; break;
            case 2: bytes = size_t{1} << 62; break;
            case 3: bytes = in_.ConsumeIntegralInRange<size_t>(0, 4096); break;
            case 4: bytes = 8192; break;
            default: break;
        }
        bool const nullOut = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        if (b.valid() && !nullOut && bytes > kMaxLegitBytes) return;  // would only test the machine's memory
        call("ctxc_device_buffer_create", b.valid() && !nullOut, [&] {
            ctxc_device_buffer_t* out = nullptr;
            ctxc_status_t const s =
                ::createBuffer(static_cast<ctxc_device_backend_t*>(b.ptr), bytes, nullOut ? nullptr : &out);
            if (s == CTXC_OK) {
                BufferSlot& slot = buffers_[*i];
                slot.h = out;
                slot.live = true;
                slot.backend = backends_[static_cast<size_t>(b.slot)].id;
                slot.size = bytes;
            } else if (out) {
                fail("a failed create returned a handle");
            }
            return s;
        }, [&](Obs& e, Obs const&) { e.buffers[*i] = Bytes(bytes, 0); }, !nullOut && !b.valid());
    }

    void writeBuffer() {
        Arg const a = arg(buffers_);
        size_t const size = a.valid() ? buffers_[static_cast<size_t>(a.slot)].size : 64;
        size_t const offset = offsetIn(size);
        size_t n = offsetIn(size);
        bool const nullSrc = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        Bytes data = pattern(n <= size ? n : 16);
        bool const fits = offset <= size && n <= size - offset;
        call("ctxc_device_buffer_write", a.valid() && fits && (!nullSrc || n == 0), [&] {
            return ctxc_device_buffer_write(static_cast<ctxc_device_buffer_t*>(a.ptr), offset,
                                            nullSrc ? nullptr : data.data(), n);
        }, [&](Obs& e, Obs const&) {
            std::copy(data.begin(), data.begin() + n, e.buffers[a.slot]->begin() + offset);
        }, !a.valid());
    }

    void readBuffer() {
        Arg const a = arg(buffers_);
        size_t const size = a.valid() ? buffers_[static_cast<size_t>(a.slot)].size : 64;
        size_t const offset = offsetIn(size);
        size_t const n = offsetIn(size);
        bool const nullDst = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        bool const fits = offset <= size && n <= size - offset;
        Bytes out(fits ? n : 16);
        call("ctxc_device_buffer_read", a.valid() && fits && (!nullDst || n == 0), [&] {
            ctxc_status_t const s = ctxc_device_buffer_read(static_cast<ctxc_device_buffer_t*>(a.ptr), offset,
                                                            nullDst ? nullptr : out.data(), n);
            if (s == CTXC_OK && n > 0) {
                Bytes const all = *observe().buffers[a.slot];
                if (!std::equal(out.begin(), out.end(), all.begin() + offset))
                    fail("read bytes differ from the buffer");
            }
            return s;
        }, nothing, !a.valid());
    }

    void createPool() {
        std::optional<size_t> i = freeSlot(pools_);
        if (!i) return;
        Arg const b = arg(backends_);
        ctxc_kv_pool_options_t o;
        ctxc_kv_pool_options_init(&o);
        bool const shortStruct = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        if (shortStruct) o.struct_size = 8;
        PoolGeometry g;
        g.numPages = dim(1, 8);
        g.pageSize = dim(1, 8);
        g.dtype = dtype();
        size_t const layerCount = in_.ConsumeIntegralInRange<size_t>(0, 3);
        std::vector<ctxc_kv_layer_shape_t> shapes;
        for (size_t l = 0; l < layerCount; ++l) {
            shapes.push_back({dim(1, 4), dim(1, 8)});
            g.layers.emplace_back(shapes.back().kv_heads, shapes.back().head_dim);
        }
        bool const nullLayers = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        o.num_pages = g.numPages;
        o.page_size = g.pageSize;
        o.dtype = g.dtype;
        o.layers = nullLayers || shapes.empty() ? nullptr : shapes.data();
        o.layer_count = shapes.size();
        bool valid = b.valid() && !shortStruct && (!nullLayers || shapes.empty()) && validDType(g.dtype) &&
                     g.numPages > 0 && g.pageSize > 0 && !g.layers.empty() &&
                     g.numPages <= std::numeric_limits<int32_t>::max() / 2;
        for (auto const& [heads, hd] : g.layers) {
            long double const bytes = 2.0L * g.numPages * g.pageSize * heads * hd * 4;
            if (heads <= 0 || hd <= 0 || bytes > static_cast<long double>(std::numeric_limits<int64_t>::max() / 4))
                valid = false;
        }
        if (valid && g.footprint() > kMaxLegitBytes) return;
        uint64_t const uid = ++nextId_;
        call("ctxc_kv_pool_create", valid, [&] {
            ctxc_kv_pool_t* out = nullptr;
            ctxc_status_t const s = ctxc_kv_pool_create(static_cast<ctxc_device_backend_t*>(b.ptr), &o, &out);
            if (s == CTXC_OK) {
                size_t footprint = 0, pageBytes = 0;
                must(ctxc_kv_pool_footprint_bytes(out, &footprint), "ctxc_kv_pool_footprint_bytes");
                if (footprint != g.footprint())
                    fail("pool footprint " + std::to_string(footprint) + " != " + std::to_string(g.footprint()));
                for (size_t l = 0; l < g.layers.size(); ++l) {
                    must(ctxc_kv_pool_page_bytes(out, static_cast<int32_t>(l), &pageBytes), "ctxc_kv_pool_page_bytes");
                    if (pageBytes != g.pageBytes(l)) fail("page bytes differ from the geometry");
                }
                PoolSlot& slot = pools_[*i];
                slot.h = out;
                slot.live = true;
                slot.backend = backends_[static_cast<size_t>(b.slot)].id;
                slot.uid = uid;
                slot.g = g;
                holdables_[uid] = Holdable{slot.backend, g.footprint(), true, 0};
            } else if (out) {
                fail("a failed create returned a handle");
            }
            return s;
        }, [&](Obs& e, Obs const&) {
            std::vector<Bytes> layers;
            for (size_t l = 0; l < g.layers.size(); ++l) layers.emplace_back(g.layerBytes(l), 0);
            e.pools[*i] = std::move(layers);
        }, !b.valid());
    }

    void writePool() {
        Arg const a = arg(pools_);
        PoolGeometry const g = a.valid() ? pools_[static_cast<size_t>(a.slot)].g : PoolGeometry{4, 4, 0, {{1, 1}}};
        int32_t const layer = index(static_cast<int32_t>(g.layers.size()));
        int32_t const first = index(2 * g.numPages);
        int32_t const count =
            in_.ConsumeIntegralInRange<int>(0, 7) == 0 ? dim(0, 4) : in_.ConsumeIntegralInRange<int32_t>(0, 3);
        bool const layerOk = layer >= 0 && layer < static_cast<int32_t>(g.layers.size());
        size_t const pageBytes = layerOk ? g.pageBytes(static_cast<size_t>(layer)) : 8;
        bool const rangeOk =
            first >= 0 && count >= 0 && static_cast<int64_t>(first) + count <= 2 * static_cast<int64_t>(g.numPages);
        size_t size = rangeOk ? static_cast<size_t>(count) * pageBytes : 16;
        switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
            case 0: size += 1; break;
            case 1: size = size ? size - 1 : 0; break;
            case 2: size = SIZE_MAX; break;
            default: break;
        }
        bool const nullSrc = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        bool const sizeOk = rangeOk && size == static_cast<size_t>(count) * pageBytes;
        Bytes data = pattern(sizeOk ? size : 16);
        call("ctxc_kv_pool_write_pages", a.valid() && layerOk && sizeOk && (!nullSrc || size == 0), [&] {
            return ctxc_kv_pool_write_pages(static_cast<ctxc_kv_pool_t*>(a.ptr), layer, first, count,
                                            nullSrc ? nullptr : data.data(), size);
        }, [&](Obs& e, Obs const&) {
            Bytes& bytes = (*e.pools[a.slot])[static_cast<size_t>(layer)];
            std::copy(data.begin(), data.begin() + size, bytes.begin() + static_cast<size_t>(first) * pageBytes);
        }, !a.valid());
    }

    void readPool() {
        Arg const a = arg(pools_);
        PoolGeometry const g = a.valid() ? pools_[static_cast<size_t>(a.slot)].g : PoolGeometry{4, 4, 0, {{1, 1}}};
        int32_t const layer = index(static_cast<int32_t>(g.layers.size()));
        bool const layerOk = layer >= 0 && layer < static_cast<int32_t>(g.layers.size());
        if (in_.ConsumeBool()) {
            size_t bytes = 0;
            bool const nullOut = in_.ConsumeIntegralInRange<int>(0, 7) == 0;
            call("ctxc_kv_pool_page_bytes", a.valid() && layerOk && !nullOut, [&] {
                ctxc_status_t const s =
                    ctxc_kv_pool_page_bytes(static_cast<ctxc_kv_pool_t*>(a.ptr), layer, nullOut ? nullptr : &bytes);
                if (s == CTXC_OK && bytes != g.pageBytes(static_cast<size_t>(layer))) fail("page bytes differ");
                return s;
            }, nothing);
            call("ctxc_kv_pool_footprint_bytes", a.valid(), [&] {
                ctxc_status_t const s = ctxc_kv_pool_footprint_bytes(static_cast<ctxc_kv_pool_t*>(a.ptr), &bytes);
                if (s == CTXC_OK && bytes != g.footprint()) fail("footprint differs");
                return s;
            }, nothing, !a.valid());
            return;
        }
        int32_t const first = index(2 * g.numPages);
        int32_t const count = in_.ConsumeIntegralInRange<int32_t>(-1, 3);
        size_t const pageBytes = layerOk ? g.pageBytes(static_cast<size_t>(layer)) : 8;
        bool const rangeOk =
            first >= 0 && count >= 0 && static_cast<int64_t>(first) + count <= 2 * static_cast<int64_t>(g.numPages);
        size_t size = rangeOk ? static_cast<size_t>(count) * pageBytes : 16;
        if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) size = size ? size - 1 : 1;
        bool const sizeOk = rangeOk && size == static_cast<size_t>(count) * pageBytes;
        Bytes out(sizeOk ? size : 16);
        call("ctxc_kv_pool_read_pages", a.valid() && layerOk && sizeOk, [&] {
            ctxc_status_t const s =
                ctxc_kv_pool_read_pages(static_cast<ctxc_kv_pool_t*>(a.ptr), layer, first, count, out.data(), size);
            if (s == CTXC_OK) {
                Bytes const all = (*observe().pools[a.slot])[static_cast<size_t>(layer)];
                if (!std::equal(out.begin(), out.begin() + size, all.begin() + static_cast<size_t>(first) * pageBytes))
                    fail("read pages differ from the pool");
            }
            return s;
        }, nothing, !a.valid());
    }

    // ---- page tables ----

    void createTable() {
        std::optional<size_t> i = freeSlot(tables_);
        if (!i) return;
        Arg const b = arg(backends_);
        int32_t const maxBatch = dim(1, 6), mpps = dim(1, 6);
        int32_t numPages = dim(1, 16);
        for (auto const& pool : pools_)
            if (pool.live && in_.ConsumeBool()) numPages = pool.g.numPages;  // a table that addresses this pool
        int32_t const mode = in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? in_.ConsumeIntegralInRange<int32_t>(-1, 2)
                                                                        : in_.ConsumeIntegralInRange<int32_t>(0, 1);
        bool const positive = maxBatch > 0 && mpps > 0 && numPages > 0;
        long double const entries = positive ? 2.0L * maxBatch * mpps : 0;
        bool const valid = b.valid() && (mode == 0 || mode == 1) && positive &&
                           numPages <= std::numeric_limits<int32_t>::max() / 2 &&
                           entries <= static_cast<long double>(std::numeric_limits<int32_t>::max());
        if (valid && entries * 4 > kMaxLegitBytes) return;
        call("ctxc_kv_page_table_create", valid, [&] {
            ctxc_kv_page_table_t* out = nullptr;
            ctxc_status_t const s =
                createPageTable(static_cast<ctxc_device_backend_t*>(b.ptr), maxBatch, mpps, numPages, mode, &out);
            if (s == CTXC_OK) {
                TableSlot& t = tables_[*i];
                t.h = out;
                t.live = true;
                t.backend = backends_[static_cast<size_t>(b.slot)].id;
                t.maxBatch = maxBatch;
                t.mpps = mpps;
                t.numPages = numPages;
                t.mode = mode;
                t.dirtyRows.assign(static_cast<size_t>(maxBatch), 0);
            } else if (out) {
                fail("a failed create returned a handle");
            }
            return s;
        }, [&](Obs& e, Obs const&) {
            size_t const n = tables_[*i].entries();
            e.tables[*i] = TableObs{std::vector<int32_t>(n, -1), std::vector<int32_t>(n, -1), 0};
        }, !b.valid());
    }

    void setRow() {
        Arg const a = arg(tables_);
        TableSlot const t = a.valid() ? tables_[static_cast<size_t>(a.slot)] : TableSlot{};
        int32_t const slot = index(t.maxBatch);
        size_t const count = in_.ConsumeIntegralInRange<size_t>(0, static_cast<size_t>(std::max(t.mpps, 0)) + 1);
        std::vector<int32_t> pages;
        for (size_t p = 0; p < count; ++p)
            pages.push_back(in_.ConsumeIntegralInRange<int>(0, 5) == 0 ? -1 : index(t.numPages));
        bool const nullPages = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        bool valid = a.valid() && (!nullPages || count == 0) && slot >= 0 && slot < t.maxBatch &&
                     count <= static_cast<size_t>(t.mpps);
        for (int32_t p : pages)
            if (!((p >= 0 && p < t.numPages) || (p == -1 && t.mode == CTXC_PAGE_TABLE_SPARSE_WINDOW))) valid = false;
        call("ctxc_kv_page_table_set_row", valid, [&] {
            return ctxc_kv_page_table_set_row(static_cast<ctxc_kv_page_table_t*>(a.ptr), slot,
                                              nullPages || pages.empty() ? nullptr : pages.data(), count);
        }, [&](Obs& e, Obs const&) { writeModelRow(static_cast<size_t>(a.slot), e, slot, pages); }, !a.valid());
    }

    void setOrClearEntry() {
        Arg const a = arg(tables_);
        TableSlot const t = a.valid() ? tables_[static_cast<size_t>(a.slot)] : TableSlot{};
        int32_t const slot = index(t.maxBatch);
        int32_t const logical = index(t.mpps);
        bool const rangeOk = a.valid() && slot >= 0 && slot < t.maxBatch && logical >= 0 && logical < t.mpps;
        int32_t live = 0;
        if (rangeOk) {
            std::vector<int32_t> const row = modelRow(observe(), static_cast<size_t>(a.slot), slot);
            while (live < t.mpps && row[static_cast<size_t>(live)] != -1) ++live;
        }
        bool const dense = t.mode == CTXC_PAGE_TABLE_DENSE;
        if (in_.ConsumeBool()) {
            int32_t const page = index(t.numPages);
            bool const valid = rangeOk && page >= 0 && page < t.numPages && (!dense || logical <= live);
            call("ctxc_kv_page_table_set_entry", valid, [&] {
                return ctxc_kv_page_table_set_entry(static_cast<ctxc_kv_page_table_t*>(a.ptr), slot, logical, page);
            }, [&](Obs& e, Obs const&) {
                std::vector<int32_t> row = modelRow(e, static_cast<size_t>(a.slot), slot);
                row[static_cast<size_t>(logical)] = page;
                writeModelRow(static_cast<size_t>(a.slot), e, slot, row);
            }, !a.valid());
        } else {
            bool const valid = rangeOk && (!dense || logical >= live - 1);
            call("ctxc_kv_page_table_clear_entry", valid, [&] {
                return ctxc_kv_page_table_clear_entry(static_cast<ctxc_kv_page_table_t*>(a.ptr), slot, logical);
            }, [&](Obs& e, Obs const&) {
                std::vector<int32_t> row = modelRow(e, static_cast<size_t>(a.slot), slot);
                row[static_cast<size_t>(logical)] = -1;
                writeModelRow(static_cast<size_t>(a.slot), e, slot, row);
            }, !a.valid());
        }
    }

    void clearRowOrIdentity() {
        Arg const a = arg(tables_);
        TableSlot const t = a.valid() ? tables_[static_cast<size_t>(a.slot)] : TableSlot{};
        if (in_.ConsumeBool()) {
            int32_t const slot = index(t.maxBatch);
            call("ctxc_kv_page_table_clear_row", a.valid() && slot >= 0 && slot < t.maxBatch, [&] {
                return ctxc_kv_page_table_clear_row(static_cast<ctxc_kv_page_table_t*>(a.ptr), slot);
            }, [&](Obs& e, Obs const&) { writeModelRow(static_cast<size_t>(a.slot), e, slot, {}); }, !a.valid());
        } else {
            bool const fits = static_cast<int64_t>(t.maxBatch) * t.mpps <= t.numPages;
            call("ctxc_kv_page_table_set_identity", a.valid() && fits, [&] {
                return ctxc_kv_page_table_set_identity(static_cast<ctxc_kv_page_table_t*>(a.ptr));
            }, [&](Obs& e, Obs const&) {
                for (int32_t b = 0; b < t.maxBatch; ++b) {
                    std::vector<int32_t> row;
                    for (int32_t p = 0; p < t.mpps; ++p) row.push_back(b * t.mpps + p);
                    writeModelRow(static_cast<size_t>(a.slot), e, b, row);
                }
            }, !a.valid());
        }
    }

    void compactTable() {
        Arg const a = arg(tables_);
        TableSlot const t = a.valid() ? tables_[static_cast<size_t>(a.slot)] : TableSlot{};
        int32_t const oldBatch = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                                     ? dim(0, 4)
                                     : in_.ConsumeIntegralInRange<int32_t>(0, t.maxBatch + 1);
        int32_t newBatch = 0;
        std::vector<int32_t> map = compactionMap(std::min(oldBatch, 64), newBatch);
        if (in_.ConsumeIntegralInRange<int>(0, 3) == 0 && map.size() >= 2) {  // a permutation: legal for page tables
            std::swap(map.front(), map.back());
        }
        bool const nullMap = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        bool const arrayOk =
            oldBatch >= 0 && (!nullMap || oldBatch == 0) && static_cast<size_t>(oldBatch) == map.size();
        if (oldBatch > 64 && !nullMap) return;  // the map array must hold oldBatch entries
        bool const valid = a.valid() && arrayOk && oldBatch <= t.maxBatch && newBatch >= 0 && newBatch <= oldBatch &&
                           ontoPrefix(map, newBatch);
        call("ctxc_kv_page_table_compact_rows", valid, [&] {
            return ctxc_kv_page_table_compact_rows(static_cast<ctxc_kv_page_table_t*>(a.ptr),
                                                   nullMap || map.empty() ? nullptr : map.data(), oldBatch, newBatch);
        }, [&](Obs& e, Obs const&) {
            size_t const ti = static_cast<size_t>(a.slot);
            std::vector<std::vector<int32_t>> rows;
            for (int32_t b = 0; b < t.maxBatch; ++b) rows.push_back(modelRow(e, ti, b));
            std::vector<int32_t> source(static_cast<size_t>(newBatch), -1);
            for (size_t b = 0; b < map.size(); ++b)
                if (map[b] >= 0) source[static_cast<size_t>(map[b])] = static_cast<int32_t>(b);
            TableSlot& ts = tables_[ti];
            for (int32_t b = 0; b < t.maxBatch; ++b) {
                std::vector<int32_t> const next = b < newBatch
                                                      ? rows[static_cast<size_t>(source[static_cast<size_t>(b)])]
                                                      : std::vector<int32_t>(static_cast<size_t>(t.mpps), -1);
                if (next == rows[static_cast<size_t>(b)]) continue;  // only changed rows become dirty
                writeModelRow(ti, e, b, next);
            }
            int32_t dirty = 0;
            for (uint8_t d : ts.dirtyRows) dirty |= d;
            e.tables[ti]->dirty = dirty;
        }, !a.valid());
    }

    // Upload: copies exactly the coalesced dirty row runs to the device side.
    void upload(Arg const& a) {
        TableSlot const t = a.valid() ? tables_[static_cast<size_t>(a.slot)] : TableSlot{};
        bool const nullOut = in_.ConsumeIntegralInRange<int>(0, 3) == 0;
        int32_t copies = -1;
        int32_t runs = 0;
        for (size_t b = 0; b < t.dirtyRows.size(); ++b)
            if (t.dirtyRows[b] && (b == 0 || !t.dirtyRows[b - 1])) ++runs;
        call("ctxc_kv_page_table_upload", a.valid(), [&] {
            ctxc_status_t const s =
                ctxc_kv_page_table_upload(static_cast<ctxc_kv_page_table_t*>(a.ptr), nullOut ? nullptr : &copies);
            if (s == CTXC_OK && !nullOut && copies != runs)
                fail("upload made " + std::to_string(copies) + " copies for " + std::to_string(runs) + " dirty runs");
            return s;
        }, [&](Obs& e, Obs const&) {
            TableSlot& ts = tables_[static_cast<size_t>(a.slot)];
            TableObs& o = *e.tables[static_cast<size_t>(a.slot)];
            size_t const row = 2 * static_cast<size_t>(ts.mpps);
            for (size_t b = 0; b < ts.dirtyRows.size(); ++b)
                if (ts.dirtyRows[b])
                    std::copy(o.host.begin() + b * row, o.host.begin() + (b + 1) * row, o.device.begin() + b * row);
            std::fill(ts.dirtyRows.begin(), ts.dirtyRows.end(), 0);
            o.dirty = 0;
        }, !a.valid());
    }

    void uploadOrReadTable() {
        Arg const a = arg(tables_);
        TableSlot const t = a.valid() ? tables_[static_cast<size_t>(a.slot)] : TableSlot{};
        auto* h = static_cast<ctxc_kv_page_table_t*>(a.ptr);
        switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
            case 0: upload(a); break;
            case 1:
            case 2: {
                bool const device = in_.ConsumeBool();
                size_t const n = t.entries();
                size_t capacity = n;
                switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
                    case 0: capacity = 0; break;
                    case 1: capacity = n ? n - 1 : 0; break;
                    case 2: capacity = n + 3; break;
                    default: break;
                }
                bool const nullEntries = in_.ConsumeIntegralInRange<int>(0, 5) == 0;
                bool const nullCount = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
                std::vector<int32_t> out(capacity + 1, 77);
                size_t count = 0;
                char const* fn = device ? "ctxc_debug_kv_page_table_read_device" : "ctxc_kv_page_table_read_host";
                call(fn, a.valid() && !nullCount && capacity >= n && !nullEntries, [&] {
                    auto read = device ? ctxc_debug_kv_page_table_read_device : ctxc_kv_page_table_read_host;
                    ctxc_status_t const s =
                        read(h, nullEntries ? nullptr : out.data(), capacity, nullCount ? nullptr : &count);
                    if ((s == CTXC_OK || s == CTXC_E_BUFFER_TOO_SMALL) && count != n)
                        fail("read reports a wrong entry count");
                    if (s == CTXC_OK) {
                        TableObs const o = *observe().tables[static_cast<size_t>(a.slot)];
                        std::vector<int32_t> const& want = device ? o.device : o.host;
                        if (!std::equal(want.begin(), want.end(), out.begin())) fail("read entries differ");
                    }
                    return s;
                }, nothing, !a.valid() && !nullCount);
                break;
            }
            default: {
                int32_t dirty = -1;
                call("ctxc_debug_kv_page_table_is_dirty", a.valid(),
                     [&] { return ctxc_debug_kv_page_table_is_dirty(h, &dirty); }, nothing, !a.valid());
                call("ctxc_kv_page_table_check_invariants", a.valid(),
                     [&] { return ctxc_kv_page_table_check_invariants(h); }, nothing, !a.valid());
                break;
            }
        }
    }

    // ---- KV lengths ----

    void createLengths() {
        std::optional<size_t> i = freeSlot(lengths_);
        if (!i) return;
        Arg const b = arg(backends_);
        int32_t const maxBatch = dim(1, 8);
        size_t const maxTable = b.valid() ? backends_[static_cast<size_t>(b.slot)].maxTable : 0;
        bool const valid = b.valid() && maxBatch > 0 && static_cast<size_t>(maxBatch) * 8 + 24 + 16 <= maxTable;
        if (valid && static_cast<size_t>(maxBatch) * 4 > kMaxLegitBytes) return;
        call("ctxc_kv_lengths_create", valid, [&] {
            ctxc_kv_lengths_t* out = nullptr;
            ctxc_status_t const s = ::createLengths(static_cast<ctxc_device_backend_t*>(b.ptr), maxBatch, &out);
            if (s == CTXC_OK) {
                LengthsSlot& l = lengths_[*i];
                l.h = out;
                l.live = true;
                l.backend = backends_[static_cast<size_t>(b.slot)].id;
                l.maxBatch = maxBatch;
            } else if (out) {
                fail("a failed create returned a handle");
            }
            return s;
        }, [&](Obs& e, Obs const&) { e.lengths[*i] = std::vector<int32_t>{}; }, !b.valid());
    }

    void setOrAddLengths() {
        Arg const a = arg(lengths_);
        LengthsSlot const l = a.valid() ? lengths_[static_cast<size_t>(a.slot)] : LengthsSlot{};
        auto* h = static_cast<ctxc_kv_lengths_t*>(a.ptr);
        switch (in_.ConsumeIntegralInRange<int>(0, 2)) {
            case 0: {
                size_t const count =
                    in_.ConsumeIntegralInRange<size_t>(0, static_cast<size_t>(std::max(l.maxBatch, 0)) + 1);
                std::vector<int32_t> values;
                for (size_t k = 0; k < count; ++k)
                    values.push_back(in_.ConsumeIntegralInRange<int>(0, 9) == 0
                                         ? dim(0, 100)
                                         : in_.ConsumeIntegralInRange<int32_t>(0, 40));
                bool const nullValues = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
                bool valid = a.valid() && (!nullValues || count == 0) && count <= static_cast<size_t>(l.maxBatch);
                for (int32_t v : values)
                    if (v < 0) valid = false;
                call("ctxc_kv_lengths_set", valid, [&] {
                    return ctxc_kv_lengths_set(h, nullValues || values.empty() ? nullptr : values.data(), count);
                }, [&](Obs& e, Obs const&) { e.lengths[a.slot] = values; }, !a.valid());
                break;
            }
            case 1: {
                int32_t const inc = in_.ConsumeIntegralInRange<int>(0, 7) == 0
                                        ? dim(-3, 3)
                                        : in_.ConsumeIntegralInRange<int32_t>(-2, 5);
                call("ctxc_kv_lengths_add", a.valid(), [&] { return ctxc_kv_lengths_add(h, inc); },
                     [&](Obs& e, Obs const&) {
                    for (int32_t& v : *e.lengths[a.slot]) v = wrapAdd(v, inc);
                }, !a.valid());
                break;
            }
            default: {
                Arg const b = arg(lengths_);
                bool valid = a.valid() && b.valid();
                if (valid) {
                    Obs const now = observe();
                    valid = lengths_[static_cast<size_t>(b.slot)].backend == l.backend &&
                            now.lengths[a.slot]->size() == now.lengths[b.slot]->size() && a.slot != b.slot;
                }
                call("ctxc_kv_lengths_add_lengths", valid, [&] {
                    return ctxc_kv_lengths_add_lengths(h, static_cast<ctxc_kv_lengths_t*>(b.ptr));
                }, [&](Obs& e, Obs const&) {
                    std::vector<int32_t>& v = *e.lengths[a.slot];
                    std::vector<int32_t> const& inc = *e.lengths[b.slot];
                    for (size_t k = 0; k < v.size(); ++k) v[k] = wrapAdd(v[k], inc[k]);
                }, !a.valid() || !b.valid());
                break;
            }
        }
    }

    void compactOrReadLengths() {
        Arg const a = arg(lengths_);
        LengthsSlot const l = a.valid() ? lengths_[static_cast<size_t>(a.slot)] : LengthsSlot{};
        auto* h = static_cast<ctxc_kv_lengths_t*>(a.ptr);
        size_t const active = a.valid() ? observe().lengths[a.slot]->size() : 0;
        if (in_.ConsumeBool()) {
            int32_t const oldBatch = in_.ConsumeIntegralInRange<int>(0, 5) == 0
                                         ? in_.ConsumeIntegralInRange<int32_t>(-1, l.maxBatch + 1)
                                         : static_cast<int32_t>(active);
            int32_t newBatch = 0;
            std::vector<int32_t> const map = compactionMap(oldBatch, newBatch);
            bool const nullMap = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
            bool const valid = a.valid() && oldBatch >= 0 && (!nullMap || oldBatch == 0) &&
                               static_cast<size_t>(oldBatch) == active && denseOrderPreserving(map, newBatch);
            call("ctxc_kv_lengths_compact", valid, [&] {
                return ctxc_kv_lengths_compact(h, nullMap || map.empty() ? nullptr : map.data(), oldBatch, newBatch);
            }, [&](Obs& e, Obs const&) {
                std::vector<int32_t> const old = *e.lengths[a.slot];
                std::vector<int32_t> next;
                for (size_t k = 0; k < map.size(); ++k)
                    if (map[k] >= 0) next.push_back(old[k]);
                e.lengths[a.slot] = next;
            }, !a.valid());
            return;
        }
        size_t capacity = active;
        switch (in_.ConsumeIntegralInRange<int>(0, 4)) {
            case 0: capacity = 0; break;
            case 1: capacity = active ? active - 1 : 0; break;
            case 2: capacity = active + 2; break;
            default: break;
        }
        bool const nullValues = in_.ConsumeIntegralInRange<int>(0, 5) == 0;
        bool const nullCount = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        std::vector<int32_t> out(capacity + 1, 77);
        size_t count = 0;
        call("ctxc_kv_lengths_read", a.valid() && !nullCount && (active == 0 || (capacity >= active && !nullValues)),
             [&] {
            ctxc_status_t const s =
                ctxc_kv_lengths_read(h, nullValues ? nullptr : out.data(), capacity, nullCount ? nullptr : &count);
            if ((s == CTXC_OK || s == CTXC_E_BUFFER_TOO_SMALL) && count != active) fail("read reports a wrong count");
            if (s == CTXC_OK) {
                std::vector<int32_t> const want = *observe().lengths[a.slot];
                if (!std::equal(want.begin(), want.end(), out.begin())) fail("read lengths differ");
            }
            return s;
        }, nothing, !a.valid() && !nullCount);
    }

    // ---- resident state ----

    void createState() {
        std::optional<size_t> i = freeSlot(states_);
        if (!i) return;
        Arg const b = arg(backends_);
        ctxc_resident_state_options_t o;
        ctxc_resident_state_options_init(&o);
        bool const shortStruct = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        if (shortStruct) o.struct_size = 12;
        o.max_batch = dim(1, 4);
        o.num_layers = in_.ConsumeBool() ? 0 : dim(1, 3);
        o.recurrent_heads = dim(1, 2);
        o.recurrent_head_dim = dim(1, 4);
        o.state_size = dim(1, 3);
        o.recurrent_dtype = dtype();
        bool const conv = in_.ConsumeBool();
        o.conv_dim = conv ? dim(1, 3) : (in_.ConsumeIntegralInRange<int>(0, 7) == 0 ? 2 : 0);
        o.conv_kernel = conv ? dim(1, 3) : 0;
        o.conv_dtype = dtype();
        o.hidden_size = in_.ConsumeBool() ? 0 : dim(1, 8);
        bool const nullOptions = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        size_t const maxTable = b.valid() ? backends_[static_cast<size_t>(b.slot)].maxTable : 0;
        bool valid = b.valid() && !nullOptions && !shortStruct && validDType(o.recurrent_dtype) &&
                     validDType(o.conv_dtype) && o.max_batch > 0 && o.num_layers >= 0 && o.hidden_size >= 0 &&
                     (o.num_layers > 0 || o.hidden_size > 0);
        if (valid && o.num_layers > 0) {
            long double const row = 1.0L * o.recurrent_heads * o.recurrent_head_dim * o.state_size * 4 +
                                    1.0L * o.conv_dim * o.conv_kernel * 4;
            valid = o.recurrent_heads > 0 && o.recurrent_head_dim > 0 && o.state_size > 0 && o.conv_dim >= 0 &&
                    o.conv_kernel >= 0 && (o.conv_dim == 0) == (o.conv_kernel == 0) &&
                    row * o.max_batch * o.num_layers <= 1e18L;
        }
        StateGeometry g;
        if (valid) {
            g.maxBatch = o.max_batch;
            g.numLayers = o.num_layers;
            if (o.num_layers > 0) {
                g.recRow = static_cast<size_t>(o.recurrent_heads) * static_cast<size_t>(o.recurrent_head_dim) *
                           static_cast<size_t>(o.state_size) * dtypeSize(o.recurrent_dtype);
                g.convRow =
                    static_cast<size_t>(o.conv_dim) * static_cast<size_t>(o.conv_kernel) * dtypeSize(o.conv_dtype);
            }
            g.hidRow = static_cast<size_t>(o.hidden_size) * 2;
            size_t const slabs = static_cast<size_t>(o.num_layers) * (g.convRow ? 2 : 1) + (g.hidRow ? 1 : 0);
            valid = 2 * static_cast<size_t>(o.num_layers) <= maxTable / 32 &&
                    slabs * 24 + 16 + static_cast<size_t>(o.max_batch) * 8 <= maxTable;
            if (valid && g.footprint() > kMaxLegitBytes) return;
        }
        uint64_t const uid = ++nextId_;
        call("ctxc_resident_state_create", valid, [&] {
            ctxc_resident_state_t* out = nullptr;
            ctxc_status_t const s = ctxc_resident_state_create(static_cast<ctxc_device_backend_t*>(b.ptr),
                                                               nullOptions ? nullptr : &o, &out);
            if (s == CTXC_OK) {
                size_t footprint = 0;
                must(ctxc_resident_state_footprint_bytes(out, &footprint), "ctxc_resident_state_footprint_bytes");
                if (footprint != g.footprint()) fail("state footprint differs from the geometry");
                for (int32_t p = kRec; p <= kHidden; ++p) {
                    size_t rb = 0;
                    must(ctxc_resident_state_row_bytes(out, p, &rb), "ctxc_resident_state_row_bytes");
                    if (rb != g.rowBytes(p)) fail("row bytes differ from the geometry");
                }
                StateSlot& st = states_[*i];
                st.h = out;
                st.live = true;
                st.backend = backends_[static_cast<size_t>(b.slot)].id;
                st.uid = uid;
                st.g = g;
                holdables_[uid] = Holdable{st.backend, g.footprint(), true, 0};
            } else if (out) {
                fail("a failed create returned a handle");
            }
            return s;
        }, [&](Obs& e, Obs const&) {
            std::map<Key, Bytes> rows;
            for (Key const& k : stateKeys(g)) rows.emplace(k, Bytes(g.rowBytes(k[0]), 0));
            e.states[*i] = std::move(rows);
        }, !b.valid());
    }

    void writeOrReadRow() {
        Arg const a = arg(states_);
        StateGeometry const g = a.valid() ? states_[static_cast<size_t>(a.slot)].g : StateGeometry{2, 1, 4, 0, 0};
        auto* h = static_cast<ctxc_resident_state_t*>(a.ptr);
        std::vector<int32_t> held;
        for (int32_t q = kRec; q <= kHidden; ++q)
            if (g.rowBytes(q)) held.push_back(q);
        int32_t const p = partOf(held);
        bool const partOk = p >= kRec && p <= kHidden && g.rowBytes(p) > 0;
        int32_t const layers = p == kHidden ? 1 : g.numLayers;
        int32_t const layer = index(layers);
        int32_t const slot = index(g.maxBatch);
        size_t size = partOk ? g.rowBytes(p) : 8;
        if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) size = in_.ConsumeBool() ? size + 1 : 0;
        bool const valid = a.valid() && partOk && layer >= 0 && layer < layers && slot >= 0 && slot < g.maxBatch &&
                           size == g.rowBytes(p);
        switch (in_.ConsumeIntegralInRange<int>(0, 2)) {
            case 0: {
                bool const nullSrc = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
                Bytes const data = pattern(size);
                call("ctxc_resident_state_write_row", valid && !nullSrc, [&] {
                    return ctxc_resident_state_write_row(h, p, layer, slot, nullSrc ? nullptr : data.data(), size);
                }, [&](Obs& e, Obs const&) { (*e.states[a.slot])[{p, layer, slot}] = data; }, !a.valid());
                break;
            }
            case 1: {
                Bytes out(size);
                call("ctxc_resident_state_read_row", valid, [&] {
                    ctxc_status_t const s = ctxc_resident_state_read_row(h, p, layer, slot, out.data(), size);
                    if (s == CTXC_OK && out != observe().states[a.slot]->at({p, layer, slot})) fail("read row differs");
                    return s;
                }, nothing, !a.valid());
                break;
            }
            default: {
                size_t bytes = 0;
                call("ctxc_resident_state_row_bytes", a.valid() && p >= kRec && p <= kHidden, [&] {
                    ctxc_status_t const s = ctxc_resident_state_row_bytes(h, p, &bytes);
                    if (s == CTXC_OK && bytes != g.rowBytes(p)) fail("row bytes differ");
                    return s;
                }, nothing, !a.valid());
                break;
            }
        }
    }

    void zeroOrCompactState() {
        Arg const a = arg(states_);
        StateGeometry const g = a.valid() ? states_[static_cast<size_t>(a.slot)].g : StateGeometry{2, 1, 4, 0, 0};
        auto* h = static_cast<ctxc_resident_state_t*>(a.ptr);
        if (in_.ConsumeBool()) {
            int32_t const slot = index(g.maxBatch);
            call("ctxc_resident_state_zero_slot", a.valid() && slot >= 0 && slot < g.maxBatch,
                 [&] { return ctxc_resident_state_zero_slot(h, slot); }, [&](Obs& e, Obs const&) {
                for (auto& [k, row] : *e.states[a.slot])
                    if ((k[0] == kRec || k[0] == kConv) && k[2] == slot) std::fill(row.begin(), row.end(), 0);
            }, !a.valid());
            return;
        }
        int32_t const oldBatch = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                                     ? dim(0, 4)
                                     : in_.ConsumeIntegralInRange<int32_t>(-1, g.maxBatch + 1);
        if (oldBatch > 64) return;
        int32_t newBatch = 0;
        std::vector<int32_t> const map = compactionMap(oldBatch, newBatch);
        bool const nullMap = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        bool const valid = a.valid() && oldBatch >= 0 && (!nullMap || oldBatch == 0) && oldBatch <= g.maxBatch &&
                           denseOrderPreserving(map, newBatch);
        call("ctxc_resident_state_compact", valid, [&] {
            return ctxc_resident_state_compact(h, nullMap || map.empty() ? nullptr : map.data(), oldBatch, newBatch);
        }, [&](Obs& e, Obs const&) {
            std::map<Key, Bytes>& rows = *e.states[a.slot];
            std::map<Key, Bytes> const old = rows;
            for (size_t from = 0; from < map.size(); ++from) {
                if (map[from] < 0) continue;
                for (auto& [k, row] : rows)
                    if (k[2] == map[from]) row = old.at({k[0], k[1], static_cast<int32_t>(from)});
            }
        }, !a.valid());
    }

    // ---- snapshot storage ----

    void createStorage() {
        std::optional<size_t> i = freeSlot(storages_);
        if (!i) return;
        Arg const b = arg(backends_);
        Arg const state = optionalArg(states_);
        Arg const base = optionalArg(pools_);
        Arg const draft = in_.ConsumeBool() ? Arg{} : optionalArg(pools_);
        ctxc_snapshot_storage_options_t o;
        ctxc_snapshot_storage_options_init(&o);
        bool const shortStruct = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        if (shortStruct) o.struct_size = 4;
        o.boundary_hidden = in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? in_.ConsumeIntegralInRange<int32_t>(-1, 2)
                                                                       : in_.ConsumeIntegralInRange<int32_t>(0, 1);
        static constexpr size_t kBudgets[] = {0, 64, 100, 256, 1024, 4096, SIZE_MAX, 512};
        o.recurrent_budget_bytes = kBudgets[in_.ConsumeIntegralInRange<size_t>(0, std::size(kBudgets) - 1)];
        o.partial_kv_budget_bytes = kBudgets[in_.ConsumeIntegralInRange<size_t>(0, std::size(kBudgets) - 1)];
        bool const handlesOk =
            b.valid() && (!state.ptr || state.valid()) && (!base.ptr || base.valid()) && (!draft.ptr || draft.valid());
        StorageSlot st;
        bool valid = handlesOk && !shortStruct && (o.boundary_hidden == 0 || o.boundary_hidden == 1);
        if (valid) {
            st.backend = backends_[static_cast<size_t>(b.slot)].id;
            if (state.ptr)
                st.state = states_[static_cast<size_t>(state.slot)].g,
                st.stateUid = states_[static_cast<size_t>(state.slot)].uid;
            if (base.ptr)
                st.base = pools_[static_cast<size_t>(base.slot)].g,
                st.baseUid = pools_[static_cast<size_t>(base.slot)].uid;
            if (draft.ptr)
                st.draft = pools_[static_cast<size_t>(draft.slot)].g,
                st.draftUid = pools_[static_cast<size_t>(draft.slot)].uid;
            st.boundary = o.boundary_hidden == 1;
            bool const sameBackend = (!state.ptr || states_[static_cast<size_t>(state.slot)].backend == st.backend) &&
                                     (!base.ptr || pools_[static_cast<size_t>(base.slot)].backend == st.backend) &&
                                     (!draft.ptr || pools_[static_cast<size_t>(draft.slot)].backend == st.backend);
            valid = sameBackend && (!draft.ptr || base.ptr) && (!draft.ptr || draft.slot != base.slot) &&
                    (!st.boundary || (state.ptr && st.state.hidRow > 0));
            st.rbps = state.ptr ? static_cast<size_t>(st.state.numLayers) * (st.state.recRow + st.state.convRow) +
                                      (st.boundary ? st.state.hidRow : 0)
                                : 0;
            for (size_t l = 0; l < st.base.layers.size(); ++l) st.pbps += 2 * st.base.pageBytes(l);
            for (size_t l = 0; l < st.draft.layers.size(); ++l) st.pbps += 2 * st.draft.pageBytes(l);
            auto slots = [](size_t budget, size_t bps) {
                return bps == 0
                           ? 0
                           : static_cast<int32_t>(std::min<size_t>(budget / bps, std::numeric_limits<int32_t>::max()));
            };
            st.rslots = slots(o.recurrent_budget_bytes, st.rbps);
            st.pslots = slots(o.partial_kv_budget_bytes, st.pbps);
            size_t const descriptors =
                2 * static_cast<size_t>(st.state.numLayers) + 1 + 2 * (st.base.layers.size() + st.draft.layers.size());
            valid = valid && descriptors <= backends_[static_cast<size_t>(b.slot)].maxTable / 32;
            if (valid && (st.footprint() > kMaxLegitBytes || st.rslots + st.pslots > 32)) return;
        }
        bool const nullOptions = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        call("ctxc_snapshot_storage_create", valid && !nullOptions, [&] {
            ctxc_snapshot_storage_t* out = nullptr;
            ctxc_status_t const s = ctxc_snapshot_storage_create(
                static_cast<ctxc_device_backend_t*>(b.ptr), static_cast<ctxc_resident_state_t*>(state.ptr),
                static_cast<ctxc_kv_pool_t*>(base.ptr), static_cast<ctxc_kv_pool_t*>(draft.ptr),
                nullOptions ? nullptr : &o, &out);
            if (s == CTXC_OK) {
                ctxc_snapshot_layout_t layout{sizeof(ctxc_snapshot_layout_t)};
                must(ctxc_snapshot_storage_layout(out, &layout), "ctxc_snapshot_storage_layout");
                if (layout.recurrent_bytes_per_slot != st.rbps || layout.partial_kv_bytes_per_slot != st.pbps ||
                    layout.recurrent_slots != st.rslots || layout.partial_kv_slots != st.pslots ||
                    layout.footprint_bytes != st.footprint())
                    fail("snapshot layout differs from the model");
                st.h = out;
                st.live = true;
                storages_[*i] = st;
                for (uint64_t uid : {st.stateUid, st.baseUid, st.draftUid})
                    if (uid) ++holdables_.at(uid).holders;
            } else if (out) {
                fail("a failed create returned a handle");
            }
            return s;
        }, [&](Obs& e, Obs const&) {
            std::map<Key, Bytes> regions;
            for (Key const& k : storageKeys(st)) regions.emplace(k, Bytes(st.regionBytes(k[0], k[1]), 0));
            e.storages[*i] = std::move(regions);
        });
    }

    void transfer() {
        Arg const a = arg(storages_);
        StorageSlot const st = a.valid() ? storages_[static_cast<size_t>(a.slot)] : StorageSlot{};
        bool const capture = in_.ConsumeBool();
        ctxc_snapshot_transfer_t t;
        ctxc_snapshot_transfer_init(&t);
        bool const recurrent =
            st.rslots > 0 ? in_.ConsumeIntegralInRange<int>(0, 3) != 0 : in_.ConsumeIntegralInRange<int>(0, 3) == 0;
        bool const partial =
            st.pslots > 0 ? in_.ConsumeIntegralInRange<int>(0, 3) != 0 : in_.ConsumeIntegralInRange<int>(0, 3) == 0;
        if (recurrent) {
            t.recurrent_slot = index(st.rslots);
            t.batch_slot = index(st.state.maxBatch);
        }
        if (partial) {
            t.partial_kv_slot = index(st.pslots);
            t.base_page = index(st.base.numPages);
            if (st.draftUid ? in_.ConsumeIntegralInRange<int>(0, 15) != 0 : in_.ConsumeIntegralInRange<int>(0, 15) == 0)
                t.draft_page = index(st.draft.numPages);
            int32_t const pageSize = st.draftUid ? std::min(st.base.pageSize, st.draft.pageSize) : st.base.pageSize;
            int const pick = in_.ConsumeIntegralInRange<int>(0, 7);
            t.valid_tokens = pick == 0   ? index(pageSize + 1)
                             : pick == 1 ? pageSize  // a whole page: allowed only with a draft pool
                                         : in_.ConsumeIntegralInRange<int32_t>(1, std::max(pageSize - 1, 1));
        }
        bool const nullTransfer = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        bool const hasRec = t.recurrent_slot != -1, hasPartial = t.partial_kv_slot != -1;
        int32_t const minPage = st.draftUid ? std::min(st.base.pageSize, st.draft.pageSize) : st.base.pageSize;
        bool valid = a.valid() && !nullTransfer && (hasRec || hasPartial);
        if (hasRec)
            valid = valid && st.stateUid && st.rslots > 0 && t.recurrent_slot >= 0 && t.recurrent_slot < st.rslots &&
                    t.batch_slot >= 0 && t.batch_slot < st.state.maxBatch;
        if (hasPartial)
            valid = valid && st.baseUid && st.pslots > 0 && t.partial_kv_slot >= 0 && t.partial_kv_slot < st.pslots &&
                    t.base_page >= 0 && t.base_page < st.base.numPages &&
                    (st.draftUid ? t.draft_page >= 0 && t.draft_page < st.draft.numPages : t.draft_page == -1) &&
                    // A whole page only with a draft pool (Hybrid+MTP: a page-aligned checkpoint keeps its last base
                    // page, whose draft half lags a token; snapshot_storage.cpp's fullPageAllowed).
                    t.valid_tokens > 0 && (st.draftUid ? t.valid_tokens <= minPage : t.valid_tokens < minPage);
        char const* fn = capture ? "ctxc_snapshot_storage_capture" : "ctxc_snapshot_storage_restore";
        call(fn, valid, [&] {
            auto* h = static_cast<ctxc_snapshot_storage_t*>(a.ptr);
            ctxc_snapshot_transfer_t const* tp = nullTransfer ? nullptr : &t;
            return capture ? ctxc_snapshot_storage_capture(h, tp) : ctxc_snapshot_storage_restore(h, tp);
        }, [&](Obs& e, Obs const& after) {
            std::map<Key, Bytes>& regions = *e.storages[a.slot];
            int const stateSlot = slotOfUid(states_, st.stateUid);
            int const baseSlot = slotOfUid(pools_, st.baseUid);
            int const draftSlot = slotOfUid(pools_, st.draftUid);
            bool lenient = false;  // a source the fuzzer can no longer observe (its handle was destroyed)
            if (hasRec) {
                std::vector<std::pair<Key, Key>> rows;  // (state row, region)
                for (int32_t l = 0; l < st.state.numLayers; ++l) {
                    if (st.state.recRow) rows.push_back({{kRec, l, t.batch_slot}, {kRec, l, t.recurrent_slot}});
                    if (st.state.convRow) rows.push_back({{kConv, l, t.batch_slot}, {kConv, l, t.recurrent_slot}});
                }
                if (st.boundary) rows.push_back({{kHidden, 0, t.batch_slot}, {kHidden, 0, t.recurrent_slot}});
                for (auto const& [row, region] : rows) {
                    if (capture) {
                        if (stateSlot < 0) lenient = true;
                        else regions[region] = e.states[static_cast<size_t>(stateSlot)]->at(row);
                    } else if (stateSlot >= 0) {
                        (*e.states[static_cast<size_t>(stateSlot)])[row] = regions.at(region);
                    }
                }
            }
            if (hasPartial) {
                auto movePool = [&](PoolGeometry const& g, int poolSlot, int32_t part, int32_t page) {
                    for (size_t l = 0; l < g.layers.size(); ++l) {
                        Bytes& region = regions[{part, static_cast<int32_t>(l), t.partial_kv_slot}];
                        size_t const n = static_cast<size_t>(t.valid_tokens) * g.tokenBytes(l);
                        size_t const pageBytes = g.pageBytes(l);
                        for (int half = 0; half < 2; ++half) {
                            size_t const poolOffset = static_cast<size_t>(page + half * g.numPages) * pageBytes;
                            size_t const regionOffset = static_cast<size_t>(half) * pageBytes;
                            if (capture) {
                                if (poolSlot < 0) {
                                    lenient = true;
                                    continue;
                                }
                                Bytes const& layer = (*e.pools[static_cast<size_t>(poolSlot)])[l];
                                std::copy(layer.begin() + poolOffset, layer.begin() + poolOffset + n,
                                          region.begin() + regionOffset);
                            } else if (poolSlot >= 0) {
                                Bytes& layer = (*e.pools[static_cast<size_t>(poolSlot)])[l];
                                std::copy(region.begin() + regionOffset, region.begin() + regionOffset + n,
                                          layer.begin() + poolOffset);
                            }
                        }
                    }
                };
                movePool(st.base, baseSlot, kPartial, t.base_page);
                if (st.draftUid) movePool(st.draft, draftSlot, kDraftPartial, t.draft_page);
            }
            if (lenient) e.storages[a.slot] = after.storages[a.slot];
        }, !a.valid() && !nullTransfer);
    }

    void regions() {
        Arg const a = arg(storages_);
        StorageSlot const st = a.valid() ? storages_[static_cast<size_t>(a.slot)] : StorageSlot{};
        auto* h = static_cast<ctxc_snapshot_storage_t*>(a.ptr);
        std::vector<int32_t> held;
        if (st.rslots && st.state.recRow) held.push_back(kRec);
        if (st.rslots && st.state.convRow) held.push_back(kConv);
        if (st.rslots && st.boundary) held.push_back(kHidden);
        if (st.pslots && !st.base.layers.empty()) held.push_back(kPartial);
        if (st.pslots && !st.draft.layers.empty()) held.push_back(kDraftPartial);
        int32_t const p = partOf(held);
        int32_t layers = 0;
        if (p == kRec || p == kConv) layers = st.stateUid ? st.state.numLayers : 0;
        else if (p == kHidden) layers = st.boundary ? 1 : 0;
        else if (p == kPartial) layers = static_cast<int32_t>(st.base.layers.size());
        else if (p == kDraftPartial) layers = static_cast<int32_t>(st.draft.layers.size());
        int32_t const layer = index(std::max(layers, 1));
        bool const layerOk = p >= kRec && p <= kDraftPartial && layer >= 0 && layer < layers;
        size_t const bytes = layerOk ? st.regionBytes(p, layer) : 0;
        bool const recurrentPart = p == kRec || p == kConv || p == kHidden;
        int32_t const slots = recurrentPart ? st.rslots : st.pslots;
        int32_t const slot = index(slots);
        size_t size = layerOk ? bytes : 8;
        if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) size = in_.ConsumeBool() ? size + 1 : 0;
        bool const valid = a.valid() && layerOk && bytes > 0 && slot >= 0 && slot < slots && size == bytes;
        switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
            case 0: {
                bool const nullSrc = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
                Bytes const data = pattern(size);
                call("ctxc_snapshot_storage_write_region", valid && !nullSrc, [&] {
                    return ctxc_snapshot_storage_write_region(h, p, layer, slot, nullSrc ? nullptr : data.data(), size);
                }, [&](Obs& e, Obs const&) { (*e.storages[a.slot])[{p, layer, slot}] = data; }, !a.valid());
                break;
            }
            case 1: {
                Bytes out(size);
                call("ctxc_snapshot_storage_read_region", valid, [&] {
                    ctxc_status_t const s = ctxc_snapshot_storage_read_region(h, p, layer, slot, out.data(), size);
                    if (s == CTXC_OK && out != observe().storages[a.slot]->at({p, layer, slot}))
                        fail("read region differs");
                    return s;
                }, nothing, !a.valid());
                break;
            }
            case 2: {
                size_t got = 0;
                call("ctxc_snapshot_storage_region_bytes", a.valid() && layerOk, [&] {
                    ctxc_status_t const s = ctxc_snapshot_storage_region_bytes(h, p, layer, &got);
                    if (s == CTXC_OK && got != bytes) fail("region bytes differ");
                    return s;
                }, nothing, !a.valid());
                break;
            }
            default: {
                ctxc_snapshot_layout_t layout{sizeof(ctxc_snapshot_layout_t)};
                call("ctxc_snapshot_storage_layout", a.valid(), [&] {
                    ctxc_status_t const s = ctxc_snapshot_storage_layout(h, &layout);
                    if (s == CTXC_OK && (layout.recurrent_slots != st.rslots || layout.partial_kv_slots != st.pslots))
                        fail("layout differs");
                    return s;
                }, nothing, !a.valid());
                break;
            }
        }
    }

    // ---- generic operations ----

    void compactRows() {
        Arg const a = arg(buffers_);
        size_t const size = a.valid() ? buffers_[static_cast<size_t>(a.slot)].size : 64;
        static constexpr size_t kRowBytes[] = {1, 2, 3, 4, 8, 12, 0, SIZE_MAX, 5};
        size_t const rowBytes = kRowBytes[in_.ConsumeIntegralInRange<size_t>(0, std::size(kRowBytes) - 1)];
        int32_t const rows =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? dim(0, 8) : in_.ConsumeIntegralInRange<int32_t>(0, 8);
        size_t const offset =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? offsetIn(size) : in_.ConsumeIntegralInRange<size_t>(0, 16);
        int32_t const oldBatch = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                                     ? in_.ConsumeIntegralInRange<int32_t>(-1, 10)
                                     : in_.ConsumeIntegralInRange<int32_t>(0, std::clamp(rows, 0, 16));
        int32_t newBatch = 0;
        std::vector<int32_t> const map = compactionMap(oldBatch, newBatch);
        bool const nullMap = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        bool valid = a.valid() && rows >= 0 && oldBatch >= 0 && (!nullMap || oldBatch == 0) && rowBytes != 0 &&
                     static_cast<size_t>(rows) <= SIZE_MAX / rowBytes;
        size_t const span = valid ? static_cast<size_t>(rows) * rowBytes : 0;
        valid =
            valid && offset <= size && span <= size - offset && oldBatch <= rows && denseOrderPreserving(map, newBatch);
        // Rows == 0 of an empty buffer: the library refuses the (no-op) compaction of a NULL tensor; either is fine.
        std::optional<bool> predicted = valid;
        if (valid && size == 0) predicted.reset();
        call("ctxc_device_compact_rows", predicted, [&] {
            return ctxc_device_compact_rows(static_cast<ctxc_device_buffer_t*>(a.ptr), offset, rowBytes, rows,
                                            nullMap || map.empty() ? nullptr : map.data(), oldBatch, newBatch);
        }, [&](Obs& e, Obs const&) {
            Bytes& b = *e.buffers[a.slot];
            for (size_t from = 0; from < map.size(); ++from)
                if (map[from] >= 0 && static_cast<size_t>(map[from]) != from)
                    std::copy(b.begin() + offset + from * rowBytes, b.begin() + offset + (from + 1) * rowBytes,
                              b.begin() + offset + static_cast<size_t>(map[from]) * rowBytes);
        }, !a.valid());
    }

    void rebaseRows() {
        Arg const a = arg(buffers_);
        BufferSlot const buffer = a.valid() ? buffers_[static_cast<size_t>(a.slot)] : BufferSlot{};
        size_t const size = a.valid() ? buffer.size : 64;
        size_t const offset =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? offsetIn(size) : 4 * in_.ConsumeIntegralInRange<size_t>(0, 4);
        size_t const count =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? offsetIn(size) : in_.ConsumeIntegralInRange<size_t>(0, 16);
        int32_t const oldBatch =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? dim(0, 4) : in_.ConsumeIntegralInRange<int32_t>(0, 6);
        if (oldBatch > 64) return;
        int32_t newBatch = 0;
        std::vector<int32_t> const map = compactionMap(oldBatch, newBatch);
        int32_t const rps =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? dim(1, 3) : in_.ConsumeIntegralInRange<int32_t>(1, 3);
        bool const nullMap = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        BackendSlot const* backend = backendById(buffer.backend);
        size_t const maxTable = backend ? backend->maxTable : 0;
        bool const valid = a.valid() && oldBatch >= 0 && (!nullMap || oldBatch == 0) && count <= SIZE_MAX / 4 &&
                           offset <= size && count * 4 <= size - offset && offset % 4 == 0 &&
                           denseOrderPreserving(map, newBatch) && rps > 0 &&
                           static_cast<int64_t>(oldBatch) * rps <= std::numeric_limits<int32_t>::max() &&
                           static_cast<size_t>(oldBatch) * 4 <= maxTable;
        call("ctxc_device_rebase_execution_rows", valid, [&] {
            return ctxc_device_rebase_execution_rows(static_cast<ctxc_device_buffer_t*>(a.ptr), offset, count,
                                                     nullMap || map.empty() ? nullptr : map.data(), oldBatch, newBatch,
                                                     rps);
        }, [&](Obs& e, Obs const&) {
            Bytes& b = *e.buffers[a.slot];
            int64_t const limit = static_cast<int64_t>(oldBatch) * rps;
            for (size_t k = 0; k < count; ++k) {
                int32_t v;
                std::memcpy(&v, b.data() + offset + 4 * k, 4);
                if (v < 0 || v >= limit) v = -1;
                else {
                    int32_t const target = map[static_cast<size_t>(v / rps)];
                    v = target < 0 ? -1 : target * rps + v % rps;
                }
                std::memcpy(b.data() + offset + 4 * k, &v, 4);
            }
        }, !a.valid());
    }

    void gather() {
        Arg const pool = arg(pools_);
        Arg const table = arg(tables_);
        Arg const lengths = optionalArg(lengths_);
        Arg const k = arg(buffers_);
        Arg const v = in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? k : arg(buffers_);
        PoolGeometry const g =
            pool.valid() ? pools_[static_cast<size_t>(pool.slot)].g : PoolGeometry{4, 4, 0, {{1, 1}}};
        if (table.valid() && in_.ConsumeBool()) upload(table);  // gathers read the uploaded table
        TableSlot const t = table.valid() ? tables_[static_cast<size_t>(table.slot)] : TableSlot{};
        ctxc_kv_gather_request_t r;
        ctxc_kv_gather_request_init(&r);
        bool const shortStruct = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        if (shortStruct) r.struct_size = 4;
        r.layer = index(static_cast<int32_t>(g.layers.size()));
        r.batch = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                      ? dim(0, 4)
                      : in_.ConsumeIntegralInRange<int32_t>(0, std::min(std::max(t.maxBatch, 1), 4));
        int64_t tableTokens = std::min<int64_t>(static_cast<int64_t>(t.mpps) * g.pageSize, 32);
        bool const layerInRange = r.layer >= 0 && r.layer < static_cast<int32_t>(g.layers.size());
        if (k.valid() && v.valid() && layerInRange && r.batch > 0 && in_.ConsumeBool()) {  // mostly fit the outputs
            size_t const outSize =
                std::min(buffers_[static_cast<size_t>(k.slot)].size, buffers_[static_cast<size_t>(v.slot)].size);
            size_t const perToken =
                g.tokenBytes(static_cast<size_t>(r.layer)) / dtypeSize(g.dtype) * dtypeSize(CTXC_DTYPE_FP32);
            tableTokens =
                std::min<int64_t>(tableTokens, static_cast<int64_t>(outSize / perToken / static_cast<size_t>(r.batch)));
        }
        r.seq_len = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                        ? dim(0, 8)
                        : in_.ConsumeIntegralInRange<int32_t>(0, static_cast<int32_t>(tableTokens) + 1);
        r.out_dtype = in_.ConsumeIntegralInRange<int>(0, 3) == 0 ? dtype() : g.dtype;
        if (g.dtype == CTXC_DTYPE_FP8_E4M3 && in_.ConsumeBool())
            r.out_dtype = in_.ConsumeIntegralInRange<int32_t>(0, 3);
        static constexpr float kScales[] = {1.0f, 2.0f, 0.0f, -1.5f, 1e30f, 1e-30f, INFINITY, NAN};
        r.k_scale = kScales[in_.ConsumeIntegralInRange<size_t>(0, std::size(kScales) - 1)];
        r.v_scale = kScales[in_.ConsumeIntegralInRange<size_t>(0, std::size(kScales) - 1)];
        bool const nullRequest = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        ctxc_kv_gather_request_t const* req = nullRequest ? nullptr : &r;

        bool const layerOk = r.layer >= 0 && r.layer < static_cast<int32_t>(g.layers.size());
        bool const requestOk = !nullRequest && !shortStruct && validDType(r.out_dtype);
        // Output bytes, computed without overflow.
        long double const needed = layerOk && r.batch >= 0 && r.seq_len >= 0
                                       ? 1.0L * r.batch * r.seq_len * g.layers[static_cast<size_t>(r.layer)].first *
                                             g.layers[static_cast<size_t>(r.layer)].second * dtypeSize(r.out_dtype)
                                       : 0;
        bool const neededFits = needed <= static_cast<long double>(SIZE_MAX / 2);
        size_t outBytes = 0;
        call("ctxc_kv_gather_output_bytes",
             pool.valid() && requestOk && layerOk && r.batch >= 0 && r.seq_len >= 0 && neededFits, [&] {
            ctxc_status_t const s = ctxc_kv_gather_output_bytes(static_cast<ctxc_kv_pool_t*>(pool.ptr), req, &outBytes);
            if (s == CTXC_OK && static_cast<long double>(outBytes) != needed)
                fail("gather output bytes differ from the geometry");
            return s;
        }, nothing, !pool.valid());

        bool const handlesOk =
            pool.valid() && table.valid() && (!lengths.ptr || lengths.valid()) && k.valid() && v.valid();
        bool valid = handlesOk && k.slot != v.slot && requestOk;
        Obs const now = observe();
        if (valid) {
            uint64_t const b = pools_[static_cast<size_t>(pool.slot)].backend;
            size_t const activeLengths = lengths.ptr ? now.lengths[lengths.slot]->size() : 0;
            size_t const outSize =
                std::min(buffers_[static_cast<size_t>(k.slot)].size, buffers_[static_cast<size_t>(v.slot)].size);
            bool const dtypeOk =
                r.out_dtype == g.dtype || (g.dtype == CTXC_DTYPE_FP8_E4M3 && r.out_dtype != CTXC_DTYPE_FP8_E4M3);
            valid = buffers_[static_cast<size_t>(k.slot)].backend == b &&
                    buffers_[static_cast<size_t>(v.slot)].backend == b && t.backend == b &&
                    (!lengths.ptr || lengths_[static_cast<size_t>(lengths.slot)].backend == b) &&
                    t.numPages == g.numPages && !now.tables[table.slot]->dirty && r.batch >= 0 &&
                    r.batch <= t.maxBatch && (!lengths.ptr || static_cast<size_t>(r.batch) <= activeLengths) &&
                    r.seq_len >= 0 && layerOk && neededFits && static_cast<long double>(outSize) >= needed && dtypeOk &&
                    r.batch <= 65535 && static_cast<int64_t>(r.seq_len) <= static_cast<int64_t>(t.mpps) * g.pageSize;
        }
        call("ctxc_kv_gather", valid, [&] {
            return ctxc_kv_gather(static_cast<ctxc_kv_pool_t*>(pool.ptr), static_cast<ctxc_kv_page_table_t*>(table.ptr),
                                  static_cast<ctxc_kv_lengths_t*>(lengths.ptr), req,
                                  static_cast<ctxc_device_buffer_t*>(k.ptr), static_cast<ctxc_device_buffer_t*>(v.ptr));
        }, [&](Obs& e, Obs const& after) {
            size_t const n = static_cast<size_t>(needed);
            if (r.out_dtype !=
                g.dtype) {  // fp8 dequantisation: not modelled, but nothing beyond the outputs may change
                std::copy(after.buffers[k.slot]->begin(), after.buffers[k.slot]->begin() + n,
                          e.buffers[k.slot]->begin());
                std::copy(after.buffers[v.slot]->begin(), after.buffers[v.slot]->begin() + n,
                          e.buffers[v.slot]->begin());
                return;
            }
            size_t const layer = static_cast<size_t>(r.layer);
            size_t const tokenBytes = g.tokenBytes(layer);
            Bytes const& poolBytes = (*e.pools[pool.slot])[layer];
            std::vector<int32_t> const& device = e.tables[table.slot]->device;
            std::vector<int32_t> const* lens = lengths.ptr ? &*e.lengths[lengths.slot] : nullptr;
            for (int half = 0; half < 2; ++half) {
                Bytes& out = *e.buffers[half == 0 ? k.slot : v.slot];
                for (int32_t b = 0; b < r.batch; ++b)
                    for (int32_t tok = 0; tok < r.seq_len; ++tok) {
                        size_t const dst =
                            (static_cast<size_t>(b) * static_cast<size_t>(r.seq_len) + static_cast<size_t>(tok)) *
                            tokenBytes;
                        int32_t page = device[(static_cast<size_t>(b) * 2 + static_cast<size_t>(half)) *
                                                  static_cast<size_t>(t.mpps) +
                                              static_cast<size_t>(tok / g.pageSize)];
                        if (lens && tok >= (*lens)[static_cast<size_t>(b)]) page = -1;
                        if (page < 0 || page >= 2 * g.numPages) {
                            std::fill(out.begin() + dst, out.begin() + dst + tokenBytes, 0);
                            continue;
                        }
                        size_t const src = (static_cast<size_t>(page) * static_cast<size_t>(g.pageSize) +
                                            static_cast<size_t>(tok % g.pageSize)) *
                                           tokenBytes;
                        std::copy(poolBytes.begin() + src, poolBytes.begin() + src + tokenBytes, out.begin() + dst);
                    }
            }
        }, !handlesOk);
    }

    // ctxc_kv_scatter from host arrays (the CPU backend's memory): every page-table entry the write touches must be
    // mapped in the host table, which must be uploaded; the model writes each (token, head) row where the layout
    // and the table put it.
    void scatter() {
        Arg const pool = arg(pools_);
        Arg const table = arg(tables_);
        PoolGeometry const g =
            pool.valid() ? pools_[static_cast<size_t>(pool.slot)].g : PoolGeometry{4, 4, 0, {{1, 1}}};
        if (table.valid() && in_.ConsumeBool()) upload(table);
        TableSlot const t = table.valid() ? tables_[static_cast<size_t>(table.slot)] : TableSlot{};
        ctxc_kv_scatter_request_t r;
        ctxc_kv_scatter_request_init(&r);
        bool const shortStruct = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        if (shortStruct) r.struct_size = 4;
        r.layer = index(static_cast<int32_t>(g.layers.size()));
        r.batch = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                      ? dim(0, 4)
                      : in_.ConsumeIntegralInRange<int32_t>(0, std::min(std::max(t.maxBatch, 1), 4));
        int32_t tableTokens = static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(t.mpps) * g.pageSize, 32));
        if (table.valid() && r.batch > 0 && r.batch <= t.maxBatch && in_.ConsumeIntegralInRange<int>(0, 3) != 0) {
            // Mostly stay inside what every row maps, so that the successful path is reached too.
            Obs const current = observe();
            std::vector<int32_t> const& host = current.tables[table.slot]->host;
            int32_t mapped = t.mpps;
            for (int32_t row = 0; row < r.batch; ++row) {
                int32_t n = 0;
                while (n < t.mpps) {
                    int32_t const page =
                        host[static_cast<size_t>(row) * 2 * static_cast<size_t>(t.mpps) + static_cast<size_t>(n)];
                    if (page < 0 || page >= g.numPages) break;
                    ++n;
                }
                mapped = std::min(mapped, n);
            }
            tableTokens = static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(mapped) * g.pageSize, 32));
        }
        r.first_position = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                               ? dim(0, 8)
                               : in_.ConsumeIntegralInRange<int32_t>(0, std::max(tableTokens, 0));
        r.seq_len = in_.ConsumeIntegralInRange<int>(0, 9) == 0
                        ? dim(0, 8)
                        : in_.ConsumeIntegralInRange<int32_t>(
                              0, static_cast<int32_t>(
                                     std::clamp<int64_t>(int64_t{tableTokens} - r.first_position + 1, 1, INT32_MAX)));
        r.layout = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? in_.ConsumeIntegral<int32_t>()
                                                               : in_.ConsumeIntegralInRange<int32_t>(0, 1);
        bool const nullRequest = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        ctxc_kv_scatter_request_t const* req = nullRequest ? nullptr : &r;
        bool const layerOk = r.layer >= 0 && r.layer < static_cast<int32_t>(g.layers.size());
        bool const layoutOk = r.layout == CTXC_KV_LAYOUT_TOKEN_MAJOR || r.layout == CTXC_KV_LAYOUT_HEAD_MAJOR;
        bool const requestOk = !nullRequest && !shortStruct && layoutOk;
        long double const needed =
            layerOk && r.batch >= 0 && r.seq_len >= 0
                ? 1.0L * r.batch * r.seq_len * static_cast<long double>(g.tokenBytes(static_cast<size_t>(r.layer)))
                : 0;
        bool const neededFits = needed <= static_cast<long double>(SIZE_MAX / 2);
        size_t inputBytes = 0;
        call("ctxc_kv_scatter_input_bytes",
             pool.valid() && requestOk && layerOk && r.batch >= 0 && r.seq_len >= 0 && neededFits, [&] {
            ctxc_status_t const s =
                ctxc_kv_scatter_input_bytes(static_cast<ctxc_kv_pool_t*>(pool.ptr), req, &inputBytes);
            if (s == CTXC_OK && static_cast<long double>(inputBytes) != needed)
                fail("scatter input bytes differ from the geometry");
            return s;
        }, nothing, !pool.valid());

        // Host inputs of the needed size (when small enough to allocate), sometimes of another size, misaligned or
        // NULL.
        size_t bytes = needed <= kMaxLegitBytes ? static_cast<size_t>(needed) : 0;
        switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
            case 0: bytes += 1; break;
            case 1: bytes = bytes > 0 ? bytes - 1 : 0; break;
            default: break;
        }
        size_t const element = dtypeSize(g.dtype);
        bool const misaligned = element > 1 && in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        bool const nullK = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        uint8_t const seed = in_.ConsumeIntegral<uint8_t>();
        std::vector<uint32_t> kStore(bytes / 4 + 2), vStore(bytes / 4 + 2);  // 4-byte aligned
        auto* k = reinterpret_cast<uint8_t*>(kStore.data()) + (misaligned ? 1 : 0);
        auto* v = reinterpret_cast<uint8_t*>(vStore.data());
        for (size_t i = 0; i < bytes; ++i) {
            k[i] = static_cast<uint8_t>(seed + 3 * i);
            v[i] = static_cast<uint8_t>(seed + 7 * i + 1);
        }

        bool const handlesOk = pool.valid() && table.valid();
        bool valid = handlesOk && requestOk;
        Obs const now = observe();
        if (valid) {
            uint64_t const b = pools_[static_cast<size_t>(pool.slot)].backend;
            valid = t.backend == b && t.numPages == g.numPages && !now.tables[table.slot]->dirty && layerOk &&
                    r.batch >= 0 && r.batch <= t.maxBatch && r.batch <= 65535 && r.seq_len >= 0 &&
                    r.first_position >= 0 &&
                    static_cast<int64_t>(r.first_position) + r.seq_len <= static_cast<int64_t>(t.mpps) * g.pageSize &&
                    neededFits && static_cast<long double>(bytes) == needed && (bytes == 0 || (!nullK && !misaligned));
            if (valid && r.seq_len > 0) {
                std::vector<int32_t> const& host = now.tables[table.slot]->host;
                for (int32_t row = 0; row < r.batch && valid; ++row)
                    for (int32_t p = r.first_position / g.pageSize;
                         p <= (r.first_position + r.seq_len - 1) / g.pageSize; ++p) {
                        int32_t const page =
                            host[static_cast<size_t>(row) * 2 * static_cast<size_t>(t.mpps) + static_cast<size_t>(p)];
                        if (page < 0 || page >= g.numPages) valid = false;
                    }
            }
        }
        call("ctxc_kv_scatter", valid, [&] {
            return ctxc_kv_scatter(static_cast<ctxc_kv_pool_t*>(pool.ptr),
                                   static_cast<ctxc_kv_page_table_t*>(table.ptr), req, nullK ? nullptr : k, v, bytes);
        }, [&](Obs& e, Obs const&) {
            size_t const layer = static_cast<size_t>(r.layer);
            size_t const heads = static_cast<size_t>(g.layers[layer].first);
            size_t const rowBytes = g.tokenBytes(layer) / heads;
            size_t const seq = static_cast<size_t>(r.seq_len);
            Bytes& poolBytes = (*e.pools[pool.slot])[layer];
            std::vector<int32_t> const& host = e.tables[table.slot]->host;
            for (int half = 0; half < 2; ++half) {
                uint8_t const* in = half == 0 ? k : v;
                for (size_t b = 0; b < static_cast<size_t>(r.batch); ++b)
                    for (size_t tok = 0; tok < seq; ++tok) {
                        size_t const position = static_cast<size_t>(r.first_position) + tok;
                        size_t const page =
                            static_cast<size_t>(host[(b * 2 + static_cast<size_t>(half)) * static_cast<size_t>(t.mpps) +
                                                     position / static_cast<size_t>(g.pageSize)]);
                        size_t const dst =
                            (page * static_cast<size_t>(g.pageSize) + position % static_cast<size_t>(g.pageSize)) *
                            g.tokenBytes(layer);
                        for (size_t h = 0; h < heads; ++h) {
                            size_t const src = r.layout == CTXC_KV_LAYOUT_TOKEN_MAJOR
                                                   ? ((b * seq + tok) * heads + h) * rowBytes
                                                   : ((b * heads + h) * seq + tok) * rowBytes;
                            std::copy(in + src, in + src + rowBytes, poolBytes.begin() + dst + h * rowBytes);
                        }
                    }
            }
        }, !handlesOk);
    }

    void hash() {
        Arg const a = arg(buffers_);
        BufferSlot const buffer = a.valid() ? buffers_[static_cast<size_t>(a.slot)] : BufferSlot{};
        size_t const size = a.valid() ? buffer.size : 64;
        size_t const offset =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? offsetIn(size) : in_.ConsumeIntegralInRange<size_t>(0, size);
        size_t const n =
            in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? offsetIn(size) : in_.ConsumeIntegralInRange<size_t>(0, size);
        BackendSlot const* backend = backendById(buffer.backend);
        uint32_t const maxChunks = backend ? backend->maxChunks : 65536;
        uint32_t chunks = in_.ConsumeIntegralInRange<uint32_t>(1, 16);
        switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
            case 0: chunks = 0; break;
            case 1: chunks = CTXC_DEFAULT_HASH_CHUNKS; break;
            case 2: chunks = maxChunks; break;
            case 3: chunks = maxChunks == UINT32_MAX ? maxChunks : maxChunks + 1; break;
            case 4: chunks = UINT32_MAX; break;
            default: break;
        }
        if (chunks <= maxChunks && chunks > 65536) return;  // legal but a large partials buffer
        bool const nullOut = in_.ConsumeIntegralInRange<int>(0, 31) == 0;
        bool const fits = offset <= size && n <= size - offset;
        ctxc_hash128_t out{};
        call("ctxc_device_hash_chunked", a.valid() && !nullOut && fits && chunks > 0 && chunks <= maxChunks, [&] {
            ctxc_status_t const s = ctxc_device_hash_chunked(static_cast<ctxc_device_buffer_t*>(a.ptr), offset, n,
                                                             chunks, nullOut ? nullptr : &out);
            if (s == CTXC_OK) {
                Bytes const bytes = *observe().buffers[a.slot];
                ctxc_hash128_t const want = chunkedDigest(bytes.data() + offset, n, chunks);
                if (out.hi != want.hi || out.lo != want.lo) fail("device chunked hash differs from the reference");
                ctxc_hash128_t host{};
                g_op = "ctxc_hash_chunked_host";
                ctxc_status_t const hs = ctxc_hash_chunked_host(n ? bytes.data() + offset : nullptr, n, chunks, &host);
                checkStatus("ctxc_hash_chunked_host", hs);
                if (hs != CTXC_OK || host.hi != want.hi || host.lo != want.lo)
                    fail("host chunked hash differs from the reference");
            }
            return s;
        }, nothing, !nullOut && !a.valid());
        if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) {  // the host path's own argument checks
            uint8_t const byte = 0;
            uint32_t const hostChunks = in_.ConsumeBool() ? 0 : 3;
            bool const nullBytes = in_.ConsumeBool();
            call("ctxc_hash_chunked_host", hostChunks > 0 && !nullBytes,
                 [&] { return ctxc_hash_chunked_host(nullBytes ? nullptr : &byte, 1, hostChunks, &out); }, nothing);
        }
    }

    void destroyObject() {
        switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
            case 0: {
                Arg const a = arg(buffers_);
                destroy("ctxc_device_buffer_destroy", a, [&] {
                    return ctxc_device_buffer_destroy(static_cast<ctxc_device_buffer_t*>(a.ptr));
                }, [&](Obs& e) {
                    e.buffers[a.slot].reset();
                    buffers_[static_cast<size_t>(a.slot)].live = false;
                });
                break;
            }
            case 1: {
                Arg const a = arg(pools_);
                destroy("ctxc_kv_pool_destroy", a,
                        [&] { return ctxc_kv_pool_destroy(static_cast<ctxc_kv_pool_t*>(a.ptr)); }, [&](Obs& e) {
                    e.pools[a.slot].reset();
                    pools_[static_cast<size_t>(a.slot)].live = false;
                    holdables_.at(pools_[static_cast<size_t>(a.slot)].uid).handleLive = false;
                });
                break;
            }
            case 2: {
                Arg const a = arg(tables_);
                destroy("ctxc_kv_page_table_destroy", a, [&] {
                    return ctxc_kv_page_table_destroy(static_cast<ctxc_kv_page_table_t*>(a.ptr));
                }, [&](Obs& e) {
                    e.tables[a.slot].reset();
                    tables_[static_cast<size_t>(a.slot)].live = false;
                });
                break;
            }
            case 3: {
                Arg const a = arg(lengths_);
                destroy("ctxc_kv_lengths_destroy", a,
                        [&] { return ctxc_kv_lengths_destroy(static_cast<ctxc_kv_lengths_t*>(a.ptr)); }, [&](Obs& e) {
                    e.lengths[a.slot].reset();
                    lengths_[static_cast<size_t>(a.slot)].live = false;
                });
                break;
            }
            case 4: {
                Arg const a = arg(states_);
                destroy("ctxc_resident_state_destroy", a, [&] {
                    return ctxc_resident_state_destroy(static_cast<ctxc_resident_state_t*>(a.ptr));
                }, [&](Obs& e) {
                    e.states[a.slot].reset();
                    states_[static_cast<size_t>(a.slot)].live = false;
                    holdables_.at(states_[static_cast<size_t>(a.slot)].uid).handleLive = false;
                });
                break;
            }
            default: {
                Arg const a = arg(storages_);
                destroy("ctxc_snapshot_storage_destroy", a, [&] {
                    return ctxc_snapshot_storage_destroy(static_cast<ctxc_snapshot_storage_t*>(a.ptr));
                }, [&](Obs& e) {
                    e.storages[a.slot].reset();
                    StorageSlot& st = storages_[static_cast<size_t>(a.slot)];
                    st.live = false;
                    for (uint64_t uid : {st.stateUid, st.baseUid, st.draftUid})
                        if (uid) --holdables_.at(uid).holders;
                });
                break;
            }
        }
    }

    // Destroy: NULL is a no-op, a live handle goes away, anything else is CTXC_E_INVALID_HANDLE. The slot records
    // change only on success, inside `update` (which therefore runs once, after the call).
    template <class Body, class Forget>
    void destroy(char const* fn, Arg const& a, Body&& body, Forget&& forget) {
        g_op = fn;
        Obs const before = observe();
        ctxc_status_t const s = body();
        checkStatus(fn, s);
        if (a.valid() || !a.ptr) {
            if (s != CTXC_OK) fail("destroying a live or NULL handle failed");
        } else if (s != CTXC_E_INVALID_HANDLE) {
            fail("destroying an invalid handle did not answer CTXC_E_INVALID_HANDLE");
        }
        Obs expected = before;
        if (s == CTXC_OK && a.valid()) forget(expected);
        std::string const d = expected.diff(observe());
        if (!d.empty()) fail("destroy left " + d + " different from the model");
    }

    FuzzedDataProvider& in_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    if (std::getenv("DEVICE_FUZZ_STATS")) std::atexit(printCallCounts);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(uint8_t const* data, size_t size) {
    FuzzedDataProvider in(data, size);
    Session(in).run();
    return 0;
}
