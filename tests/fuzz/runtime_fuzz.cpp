// libFuzzer target for the runtime's C ABI: the input bytes drive an engine that runs requests through a
// coordinator on the CPU backend (a 10-page pool of 4-token pages, a 4 x 6 page table, lengths for 4): begin,
// prefill, decode steps with finished and cancelled rows, joiners, compaction, finish, destroy, shutdown, resets
// (clear, refused under live requests), a synchronizer that fails on demand, coordinators destroyed under live
// requests, and mistakes: steps out of order, contexts that do not match, stale or duplicate resident refs, reordering
// maps, NULL, stale, made-up and wrongly typed handles, short struct sizes. Requests also run on the facade's
// bounded-SWA backend (a second 10-page pool, a sparse-window 4 x 16 table, a window the input picks): prefill chunks,
// window state, backstops, the manager destroyed under a live request; and the Hybrid+MTP members are called with
// arbitrary rows, lengths and tensors. A coordinator with a host tier may have a byte store under it (c/store.h):
// the in-process one, or a runtime's callbacks over a map that misbehave as the input chooses (flipped bytes, short
// or overlong answers, keys it says it holds but cannot get, refused or failed calls, nonsense result codes, 1 ms
// stalls past short deadlines); its handle is destroyed early or at the end, the store is polled and its memory
// range read, the coordinator is destroyed with batches in flight, and a replica (the same options on the same
// store, started empty) may take its place. A coordinator may be an EAGLE deployment (a draft pool, table and lengths
// beside the base ones; speculative requests), whose host tier's slots hold draft pages too.
//
// After every call the target checks, and aborts on violation:
//   - the status is a known ctxc_status_t, and never CTXC_E_INTERNAL, CTXC_E_INVARIANT or CTXC_E_DEVICE;
//   - a live coordinator and a live bounded-SWA manager pass their check_invariants();
//   - a call refused as malformed or inconsistent (CTXC_E_INVALID_ARGUMENT, _CONTRACT, _INVALID_HANDLE) changed
//     nothing the coordinator reports (its metrics but the planning time, and its info) nor the SWA manager's
//     free page count;
// and at the end of each input, once everything is destroyed, that the backend holds no device memory and that every
// callback store was released exactly once.
// ASan/UBSan/LSan catch memory errors and leaks.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../cpp/capi/decoding_batch.h"
#include "ctxcache.h"

namespace {

[[noreturn]] void fail(char const* what, ctxc_status_t status) {
    std::fprintf(stderr, "runtime_fuzz: %s (status %d %s, last error: %s)\n", what, static_cast<int>(status),
                 ctxc_status_string(status), ctxc_last_error());
    std::abort();
}

bool syncFails = false;
bool const trace = std::getenv("CTXCACHE_FUZZ_TRACE") != nullptr;  // replaying a crash: print every call
int synchronize(void*, void*) { return syncFails ? 1 : 0; }

// The objects of every FaultStore of one input: what one coordinator put, the next one (a replica started empty)
// finds there.
struct SharedObjects {
    std::mutex mutex;
    std::map<std::string, std::vector<unsigned char>> objects;
};

// A runtime's byte store over the shared map, called on the tiers' worker threads: honest, or misbehaving in one
// way the input picks when it is made (the worker threads never read the input). kHeldButMissing says it holds
// every key, then answers a get it cannot serve with NOT_FOUND or with a buffer of bytes it never had.
struct FaultStore {
    enum Mode { kHonest, kFlipByte, kShort, kOverlong, kHeldButMissing, kFailAll, kFull, kNonsense, kStall, kModes };
    FaultStore(SharedObjects& shared, int m) : mode(m), mutex(shared.mutex), objects(shared.objects) {}
    int const mode;
    std::mutex& mutex;
    std::map<std::string, std::vector<unsigned char>>& objects;
    std::atomic<int> released{0};

    static void exist(void* user, char const* const* keys, size_t count, int64_t, int64_t* results) {
        auto& s = *static_cast<FaultStore*>(user);
        s.stall();
        std::lock_guard<std::mutex> const lock(s.mutex);
        for (size_t i = 0; i < count; ++i) {
            if (s.mode == kFailAll) results[i] = CTXC_KV_STORE_UNAVAILABLE;
            else if (s.mode == kNonsense) results[i] = static_cast<int64_t>(i) * 7 - 3;
            else if (s.mode == kHeldButMissing) results[i] = 1;
            else results[i] = s.objects.count(keys[i]) ? 1 : 0;
        }
    }
    static void put(void* user, char const* const* keys, void const* const* data, size_t const* sizes, size_t count,
                    int64_t, int64_t* results) {
        auto& s = *static_cast<FaultStore*>(user);
        s.stall();
        std::lock_guard<std::mutex> const lock(s.mutex);
        for (size_t i = 0; i < count; ++i) {
            if (s.mode == kFailAll) {
                results[i] = CTXC_KV_STORE_FAILED;
                continue;
            }
            if (s.mode == kFull) {
                results[i] = CTXC_KV_STORE_FULL;
                continue;
            }
            if (s.mode == kNonsense) {
                results[i] = 12345;
                continue;
            }  // and it keeps nothing
            auto const* bytes = static_cast<unsigned char const*>(data[i]);
            s.objects.emplace(keys[i], std::vector<unsigned char>(bytes, bytes + sizes[i]));  // the first value stays
            results[i] = 0;  // stored
        }
    }
    static void get(void* user, char const* const* keys, void* const* buffers, size_t const* capacities, size_t count,
                    int64_t, int64_t* results) {
        auto& s = *static_cast<FaultStore*>(user);
        s.stall();
        std::lock_guard<std::mutex> const lock(s.mutex);
        for (size_t i = 0; i < count; ++i) {
            auto it = s.objects.find(keys[i]);
            if (s.mode == kFailAll) {
                results[i] = CTXC_KV_STORE_TIMED_OUT;
                continue;
            }
            if (s.mode == kNonsense) {
                results[i] = static_cast<int64_t>(capacities[i]) + 1;
                continue;
            }
            if (s.mode == kHeldButMissing && it == s.objects.end() && i % 2 == 1) {  // bytes it never had
                std::memset(buffers[i], static_cast<int>(0x5A ^ i), capacities[i]);
                results[i] = static_cast<int64_t>(capacities[i]);
                continue;
            }
            if (it == s.objects.end()) {
                results[i] = CTXC_KV_STORE_NOT_FOUND;
                continue;
            }
            std::vector<unsigned char> const& o = it->second;
            if (o.size() > capacities[i]) {
                results[i] = CTXC_KV_STORE_TOO_SMALL;
                continue;
            }
            std::memcpy(buffers[i], o.data(), o.size());
            auto* out = static_cast<unsigned char*>(buffers[i]);
            results[i] = static_cast<int64_t>(o.size());
            if (s.mode == kFlipByte && !o.empty()) out[o.size() - 1 - (i % o.size())] ^= 0x20;
            if (s.mode == kShort) results[i] = static_cast<int64_t>(o.size() / 2);
            if (s.mode == kOverlong) results[i] = static_cast<int64_t>(capacities[i]) + 64;
        }
    }
    static void release(void* user) { ++static_cast<FaultStore*>(user)->released; }

    void stall() const {
        if (mode == kStall) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
};

// The engine's view of one request: its batch (per-row histories and the rest of a decoding context, the C ABI
// suites' Batch) and what the fuzzer tracks beside it.
struct Engine : Batch {
    ctxc_kv_request_t* handle = nullptr;
    bool swa = false;  // begun on the bounded-SWA backend
    bool speculative = false;  // begun as a speculative request: its steps pass the common state lengths
    std::vector<int32_t> pendingMap;
    bool joinerPending = false;
    std::vector<int32_t> joinerTokens;
    ctxc_resident_ref_t joinerRef{};

    ctxc_decoding_context_t const* context() { return (*this)(); }
};

class Session {
public:
    explicit Session(FuzzedDataProvider& in) : in_(in) {}

    void run() {
        syncFails = false;
        ctxc_device_backend_options_t bo;
        ctxc_device_backend_options_init(&bo);
        bo.kind = CTXC_BACKEND_CPU;
        if (ctxc_device_backend_create(&bo, &backend_) != CTXC_OK) fail("backend", CTXC_E_INTERNAL);
        ctxc_kv_layer_shape_t const layer{1, 2};
        ctxc_kv_pool_options_t po;
        ctxc_kv_pool_options_init(&po);
        po.num_pages = 10;
        po.page_size = 4;
        po.layers = &layer;
        po.layer_count = 1;
        expectOk(ctxc_kv_pool_create(backend_, &po, &pool_), "pool");
        ctxc_kv_page_table_options_t to;
        ctxc_kv_page_table_options_init(&to);
        to.max_batch = 4;
        to.max_pages_per_seq = 6;
        to.num_pages = 10;
        expectOk(ctxc_kv_page_table_create(backend_, &to, &table_), "table");
        ctxc_kv_lengths_options_t lo;
        ctxc_kv_lengths_options_init(&lo);
        lo.max_batch = 4;
        expectOk(ctxc_kv_lengths_create(backend_, &lo, &lengths_), "lengths");
        expectOk(ctxc_kv_pool_create(backend_, &po, &draftPool_), "draft pool");
        expectOk(ctxc_kv_page_table_create(backend_, &to, &draftTable_), "draft table");
        expectOk(ctxc_kv_lengths_create(backend_, &lo, &draftLengths_), "draft lengths");
        createCoordinator();
        po.num_pages = 10;
        expectOk(ctxc_kv_pool_create(backend_, &po, &swaPool_), "swa pool");
        to.max_pages_per_seq = 16;
        to.mode = CTXC_PAGE_TABLE_SPARSE_WINDOW;
        expectOk(ctxc_kv_page_table_create(backend_, &to, &swaTable_), "swa table");
        expectOk(ctxc_kv_lengths_create(backend_, &lo, &swaLengths_), "swa lengths");
        createSwaManager();
        for (int step = 0; step < 48 && in_.remaining_bytes() > 0; ++step) {
            one();
            if (coordinator_) {
                ctxc_status_t const s = ctxc_coordinator_check_invariants(coordinator_);
                if (s != CTXC_OK) fail("invariants broken", s);
            }
            if (swa_) {
                ctxc_status_t const s = ctxc_swa_manager_check_invariants(swa_);
                if (s != CTXC_OK) fail("SWA invariants broken", s);
            }
        }
        teardown();
    }

private:
    static void expectOk(ctxc_status_t s, char const* what) {
        if (s != CTXC_OK) fail(what, s);
    }

    void checkStatus(ctxc_status_t s) {
        if (s < CTXC_OK || s >= CTXC_STATUS_COUNT) fail("unknown status code", s);
        if (s == CTXC_E_INTERNAL || s == CTXC_E_INVARIANT || s == CTXC_E_DEVICE)
            fail("internal error, invariant violation or device failure", s);
        if (s == CTXC_E_CONCURRENT_USE) fail("one thread refused as concurrent (a family flag left held)", s);
        if (s != CTXC_OK && ctxc_last_error()[0] == '\0') fail("a failure without a message", s);
    }

    std::string observe() {
        std::string out;
        if (swa_) {
            int32_t free = -1;
            expectOk(ctxc_swa_manager_free_page_count(swa_, &free), "swa free pages");
            out.append(reinterpret_cast<char const*>(&free), sizeof free);
        }
        if (!coordinator_) return out;
        ctxc_context_cache_metrics_t m{};
        m.struct_size = sizeof m;
        expectOk(ctxc_coordinator_metrics(coordinator_, &m), "metrics");
        m.planning_nanoseconds = 0;
        ctxc_coordinator_info_t i{};
        i.struct_size = sizeof i;
        expectOk(ctxc_coordinator_info(coordinator_, &i), "info");
        out.append(reinterpret_cast<char const*>(&m), sizeof m);
        out.append(reinterpret_cast<char const*>(&i), sizeof i);
        return out;
    }

    // A call that may fail; a refusal must change nothing. Returns its status.
    template <class F>
    ctxc_status_t call(F&& f) {
        std::string const before = observe();
        ctxc_status_t const s = f();
        if (trace) std::fprintf(stderr, "  -> %s %s\n", ctxc_status_string(s), s ? ctxc_last_error() : "");
        checkStatus(s);
        if ((s == CTXC_E_INVALID_ARGUMENT || s == CTXC_E_CONTRACT || s == CTXC_E_INVALID_HANDLE) && observe() != before)
            fail("a refused call changed the coordinator", s);
        return s;
    }

    // The base pool, page table and lengths every coordinator of the input runs on (an EAGLE one: the draft triple
    // too).
    ctxc_coordinator_resources_t resources(bool eagle) const {
        ctxc_coordinator_resources_t r;
        ctxc_coordinator_resources_init(&r);
        r.base_pool = pool_;
        r.base_page_table = table_;
        r.base_lengths = lengths_;
        if (eagle) {
            r.draft_pool = draftPool_;
            r.draft_page_table = draftTable_;
            r.draft_lengths = draftLengths_;
        }
        return r;
    }

    void createCoordinator() {
        ctxc_coordinator_options_t o;
        ctxc_coordinator_options_init(&o);
        eagle_ = in_.ConsumeIntegralInRange<int>(0, 3) == 0;  // EAGLE: speculative requests, draft pages in the tier
        if (eagle_) o.has_spec = 1;
        ctxc_coordinator_resources_t const r = resources(eagle_);
        o.max_batch = 4;
        o.max_records = in_.ConsumeIntegralInRange<int32_t>(0, 4);
        o.eviction_policy = in_.ConsumeBool() ? CTXC_EVICTION_RECORD_LRU_TRIM : CTXC_EVICTION_RECORD_LRU;
        o.hash_algorithm = in_.ConsumeBool() ? CTXC_HASH_FNV1A128 : CTXC_HASH_SHA256;
        o.synchronize = synchronize;
        ctxc_store_link_options_t link;
        ctxc_store_link_options_init(&link);
        ctxc_kv_store_t* store = nullptr;
        if (in_.ConsumeBool()) {  // a host tier (its copies and synchronisations on every eviction and hit)
            o.host_tier_pages = in_.ConsumeIntegralInRange<int32_t>(0, 6);
            o.host_write_policy = in_.ConsumeBool() ? CTXC_HOST_WRITE_THROUGH : CTXC_HOST_WRITE_BACK;
            if (in_.ConsumeBool()) {  // and a byte store under it, the tier small so that blocks reach it
                store = createStore(link);
                o.host_store = &link;
                if (o.host_tier_pages > 2) o.host_tier_pages -= 3;
            }
        }
        if (in_.ConsumeIntegralInRange<int>(0, 15) == 0) o.model_state_kind = CTXC_MODEL_HYBRID;  // refused
        ctxc_status_t s = ctxc_coordinator_create(&r, &o, &coordinator_);
        checkStatus(s);
        if (s != CTXC_OK && store) {  // perhaps refused for the store's options (a tier of 0 pages, a bad model)
            o.host_store = nullptr;
            s = ctxc_coordinator_create(&r, &o, &coordinator_);
            checkStatus(s);
        }
        if (s != CTXC_OK) {
            o.model_state_kind = CTXC_MODEL_ATTENTION_ONLY;
            expectOk(ctxc_coordinator_create(&r, &o, &coordinator_), "create");
        }
        replicaEagle_ = eagle_;
        replica_ = false;
        if (store) {
            if (in_.ConsumeIntegralInRange<int>(0, 3) == 3) {
                expectOk(ctxc_kv_store_destroy(store), "store destroy");  // the tier keeps it
            } else {
                liveStores_.push_back(store);
                if (o.host_store) {  // a replica of this coordinator can be started later on the same store
                    replica_ = true;
                    replicaOptions_ = o;
                    replicaLink_ = link;
                    replicaOptions_.host_store = &replicaLink_;
                }
            }
        }
    }

    // A coordinator like the last one, on the same store, started empty (a replica that finds what the last one
    // put); the same resources (the last one is destroyed).
    void createReplica() {
        eagle_ = replicaEagle_;
        ctxc_coordinator_resources_t const r = resources(eagle_);
        expectOk(ctxc_coordinator_create(&r, &replicaOptions_, &coordinator_), "replica");
    }

    // A byte store for the next coordinator: the in-process one or a FaultStore's callbacks; `link` names it, with
    // the options the input picks (short deadlines: a stall outlives some of them).
    ctxc_kv_store_t* createStore(ctxc_store_link_options_t& link) {
        ctxc_kv_store_t* store = nullptr;
        int const kind = in_.ConsumeIntegralInRange<int>(0, 3);
        if (kind <= 1 && !liveStores_.empty()) {  // the store an earlier coordinator used (its handle stays live)
            store = liveStores_.back();
            liveStores_.pop_back();
        } else if (kind == 2) {
            expectOk(ctxc_memory_kv_store_create(in_.ConsumeBool() ? 0 : in_.ConsumeIntegralInRange<uint64_t>(0, 512),
                                                 &store),
                     "memory store");
        } else {
            faultStores_.push_back(std::make_unique<FaultStore>(
                sharedObjects_, in_.ConsumeIntegralInRange<int>(0, FaultStore::kModes - 1)));
            FaultStore& f = *faultStores_.back();
            ctxc_kv_store_callbacks_t c{};
            c.struct_size = sizeof c;
            c.user = &f;
            c.exist = FaultStore::exist;
            c.put = FaultStore::put;
            c.get = FaultStore::get;
            c.release = FaultStore::release;
            expectOk(ctxc_kv_store_create(&c, &store), "callback store");
        }
        link.store = store;
        link.model = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? "bad@model" : "fuzz";
        link.policy = in_.ConsumeBool() ? CTXC_STORE_LOAD_WAIT : CTXC_STORE_LOAD_BEST_EFFORT;
        link.min_ask_blocks = in_.ConsumeIntegralInRange<int32_t>(1, 3);
        link.load_deadline_us = in_.ConsumeIntegralInRange<int64_t>(0, 3000);
        link.put_deadline_us = in_.ConsumeIntegralInRange<int64_t>(1, 3000);
        link.negative_ttl_ms = in_.ConsumeIntegralInRange<int64_t>(0, 20);
        return store;
    }

    void createSwaManager() {
        ctxc_swa_manager_options_t o;
        ctxc_swa_manager_options_init(&o);
        o.max_batch = 4;
        o.window_size_tokens = in_.ConsumeIntegralInRange<int32_t>(1, 12);
        o.synchronize = synchronize;
        expectOk(ctxc_swa_manager_create(swaPool_, swaTable_, swaLengths_, &o, &swa_), "swa manager");
    }

    ctxc_swa_manager_t* swaArg() {
        switch (in_.ConsumeIntegralInRange<int>(0, 15)) {  // an exhausted input reads 0: the live manager
            case 14: return nullptr;
            case 15: return reinterpret_cast<ctxc_swa_manager_t*>(coordinator_);  // a handle of the wrong type
            default: return swa_;
        }
    }

    Engine& engine() { return engines_[in_.ConsumeIntegralInRange<size_t>(0, 1)]; }

    ctxc_kv_request_t* requestArg(Engine& e) {
        switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
            case 0: return nullptr;
            case 1:
                return reinterpret_cast<ctxc_kv_request_t*>(static_cast<uintptr_t>(in_.ConsumeIntegral<uint64_t>()));
            case 2: return reinterpret_cast<ctxc_kv_request_t*>(pool_);  // a handle of the wrong type
            case 3: return stale_;
            default: return e.handle;
        }
    }

    ctxc_resident_ref_t ref() {
        int32_t const slot = in_.ConsumeIntegralInRange<int32_t>(-1, 4);
        uint64_t epoch = 0;
        if (slot >= 0 && slot < 4) {
            switch (in_.ConsumeIntegralInRange<int>(0, 5)) {
                case 0: epoch = epochs_[slot]; break;  // stale (or 0)
                case 1: epoch = 0; break;
                default: epoch = ++epochs_[slot]; break;
            }
        }
        return ctxc_resident_ref_t{slot, 0, epoch};
    }

    std::vector<int32_t> prompt() {
        size_t const n = in_.ConsumeIntegralInRange<size_t>(0, 14);
        std::vector<int32_t> out;
        for (size_t i = 0; i < n; ++i) out.push_back(in_.ConsumeIntegralInRange<int32_t>(1, 3));  // prefixes collide
        return out;
    }

    ctxc_sequence_request_t sequenceOf(std::vector<int32_t> const& t) {
        ctxc_sequence_request_t s{};
        s.token_ids = t.data();
        s.token_count = t.size();
        s.lookup_policy = in_.ConsumeIntegralInRange<int>(0, 7) == 0 ? CTXC_LOOKUP_BYPASS : CTXC_INHERIT_LOOKUP_POLICY;
        return s;
    }

    void begin(Engine& e) {
        Engine fresh;
        size_t const n = in_.ConsumeIntegralInRange<size_t>(0, 3);
        std::vector<ctxc_sequence_request_t> seqs;
        for (size_t i = 0; i < n; ++i) {
            fresh.tokens.push_back(prompt());
            fresh.raw.push_back(static_cast<int32_t>(fresh.tokens.back().size()));
            fresh.generated.push_back(0);
            fresh.status.push_back(CTXC_SEQUENCE_RUNNING);
            fresh.refs.push_back(ref());
        }
        for (auto const& t : fresh.tokens) seqs.push_back(sequenceOf(t));
        ctxc_kv_request_options_t o;
        ctxc_kv_request_options_init(&o);
        o.commit_policy = in_.ConsumeBool() ? CTXC_COMMIT_PREFILL_STATE_ONLY : CTXC_COMMIT_INCLUDING_GENERATED_TOKENS;
        bool const onSwa = in_.ConsumeIntegralInRange<int>(0, 3) == 0;
        // The SWA backend needs headroom {1, 0}: mostly give it that.
        int const headroomPick = in_.ConsumeIntegralInRange<int>(0, 3);  // an exhausted input reads 0
        o.headroom.base_extra_tokens = onSwa && headroomPick != 3 ? 1 : in_.ConsumeIntegralInRange<int32_t>(-1, 5);
        if (eagle_ && !onSwa && in_.ConsumeIntegralInRange<int>(0, 3) != 0) o.speculative = 1;
        // Rare mistakes, on the largest draw (an exhausted input reads 0: a well-formed request).
        if (in_.ConsumeIntegralInRange<int>(0, 15) == 15) o.speculative = 1;
        if (in_.ConsumeIntegralInRange<int>(0, 15) == 15) o.token_state_contract = CTXC_TOKEN_STATE_FULLY_COMMITTED;
        if (in_.ConsumeIntegralInRange<int>(0, 15) == 15) o.struct_size = 4;
        fresh.swa = onSwa;
        fresh.speculative = o.speculative == 1;
        ctxc_kv_request_t* out = nullptr;
        ctxc_status_t const s = call([&] {
            return onSwa ? ctxc_kv_request_begin_swa(swaArg(), seqs.data(), seqs.size(), fresh.context(), &o, &out)
                         : ctxc_kv_request_begin(coordinatorArg(), seqs.data(), seqs.size(), fresh.context(), &o, &out);
        });
        if (s != CTXC_OK) {
            if (out) fail("a refused begin returned a request", s);
            return;
        }
        destroy(e);
        fresh.handle = out;
        e = std::move(fresh);
    }

    ctxc_coordinator_t* coordinatorArg() {
        switch (in_.ConsumeIntegralInRange<int>(0, 15)) {
            case 0: return nullptr;
            case 1: return reinterpret_cast<ctxc_coordinator_t*>(table_);
            default: return coordinator_;
        }
    }

    void destroy(Engine& e) {
        if (!e.handle) return;
        checkStatus(ctxc_kv_request_destroy(e.handle));
        stale_ = e.handle;
        e = Engine{};
    }

    void advance(Engine& e, bool prefill) {
        for (size_t i = 0; i < e.tokens.size(); ++i) {
            if (!prefill && e.status[i] != CTXC_SEQUENCE_RUNNING && in_.ConsumeIntegralInRange<int>(0, 7) != 0)
                continue;
            int const n = in_.ConsumeIntegralInRange<int>(0, 9) == 0 ? 2 : 1;
            for (int k = 0; k < n; ++k) e.tokens[i].push_back(in_.ConsumeIntegralInRange<int32_t>(1, 3));
            e.generated[i] += n;
            if (in_.ConsumeIntegralInRange<int>(0, 11) == 0) e.raw[i] += 1;  // a broken contract
            if (!prefill) switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
                    case 0: e.status[i] = CTXC_SEQUENCE_FINISHED; break;
                    case 1: e.status[i] = CTXC_SEQUENCE_CANCELLED; break;
                    default: break;
                }
        }
    }

    // A speculative request's common state lengths (what both pools hold: the committed length of each row, after a
    // prefill its prompt, after a decode step prompt + generated - the lookahead token), now and then off by one;
    // none for other requests (mostly).
    std::vector<int32_t> commonLengths(Engine const& e, bool prefill) {
        if (!e.speculative && in_.ConsumeIntegralInRange<int>(0, 7) != 7) return {};
        std::vector<int32_t> out;
        for (size_t i = 0; i < e.tokens.size(); ++i) out.push_back(prefill ? e.raw[i] : e.raw[i] + e.generated[i] - 1);
        if (!out.empty() && in_.ConsumeIntegralInRange<int>(0, 15) == 15) out[0] += 1;  // a broken contract
        return out;
    }

    void compactionMap(Engine& e) {
        size_t const n = e.tokens.size();
        e.pendingMap.assign(n, -1);
        int32_t next = 0;
        for (size_t i = 0; i < n; ++i)
            if (e.status[i] == CTXC_SEQUENCE_RUNNING || in_.ConsumeBool()) e.pendingMap[i] = next++;
        if (n >= 2 && in_.ConsumeIntegralInRange<int>(0, 7) == 0) std::swap(e.pendingMap[0], e.pendingMap[1]);
    }

    void applyCompaction(Engine& e) {
        Engine out;
        out.handle = e.handle;
        out.speculative = e.speculative;
        for (size_t i = 0; i < e.tokens.size(); ++i) {
            if (e.pendingMap[i] < 0) continue;
            out.tokens.push_back(e.tokens[i]);
            out.raw.push_back(e.raw[i]);
            out.generated.push_back(e.generated[i]);
            out.status.push_back(e.status[i]);
            out.refs.push_back(e.refs[i]);
        }
        e = std::move(out);
    }

    void one() {
        Engine& e = engine();
        int const op = in_.ConsumeIntegralInRange<int>(0, 20);
        if (trace)
            std::fprintf(stderr, "op %d on engine %d (rows %zu)\n", op, &e == &engines_[0] ? 0 : 1, e.tokens.size());
        switch (op) {
            case 0:
            case 1: begin(e); break;
            case 2: call([&] { return ctxc_kv_request_prepare_prefill(requestArg(e)); }); break;
            case 3: call([&] { return ctxc_kv_request_enqueue_prefill_captures(requestArg(e)); }); break;
            case 4: {
                Engine trial = e;
                advance(trial, true);
                std::vector<int32_t> const common = commonLengths(trial, true);
                if (call([&] {
                    return ctxc_kv_request_complete_prefill(requestArg(e), trial.context(),
                                                            common.empty() ? nullptr : common.data(), common.size());
                }) == CTXC_OK)
                    e = std::move(trial);
                break;
            }
            case 5: {
                ctxc_kv_headroom_t const h{in_.ConsumeIntegralInRange<int32_t>(0, 9), 0};
                call([&] { return ctxc_kv_request_prepare_decode_step(requestArg(e), e.context(), &h); });
                break;
            }
            case 6:
            case 7: {
                Engine trial = e;
                advance(trial, false);
                std::vector<int32_t> const common = commonLengths(trial, false);
                if (call([&] {
                    return ctxc_kv_request_complete_decode_step(
                        requestArg(e), trial.context(), common.empty() ? nullptr : common.data(), common.size());
                }) == CTXC_OK)
                    e = std::move(trial);
                break;
            }
            case 8: {
                compactionMap(e);
                int32_t survivors = 0;
                for (int32_t v : e.pendingMap) survivors += v >= 0;
                std::vector<int32_t> device(e.pendingMap.size() + 1, 0);
                call([&] {
                    return ctxc_kv_request_begin_batch_compaction(
                        requestArg(e), e.pendingMap.data(), e.pendingMap.size(), survivors,
                        in_.ConsumeBool() ? device.data() : nullptr, device.size());
                });
                break;
            }
            case 9:
                if (call([&] {
                    return ctxc_kv_request_complete_batch_compaction(requestArg(e), e.pendingMap.data(),
                                                                     e.pendingMap.size());
                }) == CTXC_OK)
                    applyCompaction(e);
                break;
            case 10: call([&] { return ctxc_kv_request_finish(requestArg(e)); }); break;
            case 11: destroy(e); break;
            case 12: {
                e.joinerTokens = prompt();
                e.joinerRef = ref();
                ctxc_sequence_request_t const s = sequenceOf(e.joinerTokens);
                int32_t status = -1, start = -1;
                if (call([&] {
                    return ctxc_kv_request_admit_sequence(requestArg(e), &s, &e.joinerRef, nullptr, nullptr, 0, &status,
                                                          &start);
                }) == CTXC_OK &&
                    status == CTXC_ADMIT_ADMITTED)
                    e.joinerPending = true;
                break;
            }
            case 13: {
                int32_t const row =
                    static_cast<int32_t>(e.tokens.size()) - in_.ConsumeIntegralInRange<int32_t>(0, 1) + 1;
                int32_t const length = static_cast<int32_t>(e.joinerTokens.size());
                if (call([&] {
                    return ctxc_kv_request_finalize_sequence_admission(requestArg(e), row - 1, 3, length);
                }) == CTXC_OK &&
                    e.joinerPending) {
                    e.tokens.push_back(e.joinerTokens);
                    e.tokens.back().push_back(3);
                    e.raw.push_back(length);
                    e.generated.push_back(1);
                    e.status.push_back(CTXC_SEQUENCE_RUNNING);
                    e.refs.push_back(e.joinerRef);
                    e.joinerPending = false;
                }
                break;
            }
            case 14: {
                int32_t retracted = 0;
                if (call([&] { return ctxc_kv_request_retract_sequence_admission(requestArg(e), &retracted); }) ==
                        CTXC_OK &&
                    retracted)
                    e.joinerPending = false;
                break;
            }
            case 15:
                switch (in_.ConsumeIntegralInRange<int>(0, 4)) {
                    case 0: call([&] { return ctxc_coordinator_shutdown(coordinatorArg()); }); break;
                    case 1: syncFails = !syncFails; break;
                    case 3: {  // the store's finished batches applied without a request
                        size_t applied = 0, inFlight = 0;
                        call([&] {
                            return ctxc_coordinator_poll_store(coordinatorArg(), in_.ConsumeBool() ? &applied : nullptr,
                                                               in_.ConsumeBool() ? &inFlight : nullptr);
                        });
                        break;
                    }
                    case 4: {  // the tier's memory, as a zero-copy store would register it
                        void* data = nullptr;
                        size_t bytes = 0;
                        if (call([&] { return ctxc_coordinator_host_tier_memory(coordinatorArg(), &data, &bytes); }) ==
                                CTXC_OK &&
                            (data == nullptr) != (bytes == 0))
                            fail("a host tier's memory without its size, or a size without memory", CTXC_OK);
                        break;
                    }
                    default: call([&] { return ctxc_coordinator_clear(coordinatorArg()); }); break;  // a reset
                }
                break;
            case 16: {
                ctxc_kv_sequence_info_t s{};
                s.struct_size = in_.ConsumeBool() ? sizeof s : 8;
                call([&] {
                    return ctxc_kv_request_sequence_info(requestArg(e), in_.ConsumeIntegralInRange<int32_t>(-1, 4), &s);
                });
                int32_t const* starts = nullptr;
                size_t count = 0;
                call([&] { return ctxc_kv_request_prefill_starts(requestArg(e), &starts, &count); });
                ctxc_context_cache_metrics_t m{};
                m.struct_size = in_.ConsumeBool() ? sizeof m : 16;
                call([&] { return ctxc_coordinator_metrics(coordinatorArg(), &m); });
                break;
            }
            case 17:
                // The coordinator goes first: live requests are orphaned, later calls on them are invalid handles.
                if (in_.ConsumeIntegralInRange<int>(0, 3) == 0) {
                    checkStatus(ctxc_coordinator_destroy(coordinator_));
                    coordinator_ = nullptr;
                    syncFails = false;
                    if (replica_ && in_.ConsumeIntegralInRange<int>(0, 3) != 0) createReplica();
                    else createCoordinator();
                }
                break;
            case 18: {
                // SWA prefill chunks: each row's endpoint moves to its prompt length, or somewhere near it.
                std::vector<int32_t> lengths;
                for (size_t i = 0; i < e.tokens.size(); ++i)
                    lengths.push_back(in_.ConsumeBool() ? e.raw[i] : in_.ConsumeIntegralInRange<int32_t>(-1, 16));
                if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) lengths.push_back(1);  // a length too many
                call([&] {
                    return ctxc_kv_request_prepare_swa_prefill(
                        requestArg(e), lengths.empty() ? nullptr : lengths.data(), lengths.size());
                });
                break;
            }
            case 19: {
                ctxc_swa_state_t w{};
                w.struct_size = in_.ConsumeBool() ? 8 : sizeof w;
                call([&] {
                    return ctxc_kv_request_swa_state(requestArg(e), in_.ConsumeIntegralInRange<int32_t>(-1, 4), &w);
                });
                ctxc_kv_request_info_t info{};
                info.struct_size = sizeof info;
                call([&] { return ctxc_kv_request_info(requestArg(e), &info); });
                int32_t length = 0;
                call([&] { return ctxc_kv_request_reuse_token_length(requestArg(e), 0, &length); });
                // The Hybrid+MTP members on whatever this request is: never a crash.
                std::vector<uint16_t> hidden(static_cast<size_t>(in_.ConsumeIntegralInRange<int>(0, 12)));
                int64_t const shape[2] = {in_.ConsumeIntegralInRange<int64_t>(-1, 4),
                                          in_.ConsumeIntegralInRange<int64_t>(0, 4)};
                ctxc_tensor_view_t view{hidden.empty() ? nullptr : hidden.data(), shape,
                                        static_cast<size_t>(in_.ConsumeIntegralInRange<int>(0, 3)), CTXC_SCALAR_FP16,
                                        -1};
                if (view.rank > 2 || static_cast<int64_t>(hidden.size()) < std::max<int64_t>(0, shape[0]) * shape[1])
                    view.rank = 0;  // a view that lies about its memory is the caller's bug, not a refusal
                if (in_.ConsumeBool())
                    call([&] {
                        return ctxc_kv_request_publish_hybrid_mtp_endpoint(
                            requestArg(e), in_.ConsumeIntegralInRange<int32_t>(-1, 2),
                            in_.ConsumeIntegralInRange<int32_t>(-1, 16), &view,
                            in_.ConsumeIntegralInRange<int32_t>(-1, 4));
                    });
                else
                    call([&] {
                        return ctxc_kv_request_restore_hybrid_mtp_boundary_hidden(
                            requestArg(e), in_.ConsumeIntegralInRange<int32_t>(-1, 2), &view,
                            in_.ConsumeIntegralInRange<int32_t>(-1, 4));
                    });
                break;
            }
            case 20:
                // The SWA manager goes first: live requests on it are refused from then on, and still destroyable.
                if (in_.ConsumeIntegralInRange<int>(0, 3) == 0) {
                    checkStatus(ctxc_swa_manager_destroy(swa_));
                    swa_ = nullptr;
                    syncFails = false;
                    createSwaManager();
                } else {
                    call([&] { return ctxc_swa_manager_shutdown(swaArg()); });
                }
                break;
        }
    }

    void teardown() {
        syncFails = false;
        for (Engine& e : engines_) destroy(e);
        if (coordinator_) {
            checkStatus(ctxc_coordinator_shutdown(coordinator_));
            expectOk(ctxc_coordinator_destroy(coordinator_), "coordinator destroy");
        }
        if (swa_) {
            checkStatus(ctxc_swa_manager_shutdown(swa_));
            expectOk(ctxc_swa_manager_destroy(swa_), "swa manager destroy");
        }
        expectOk(ctxc_kv_lengths_destroy(swaLengths_), "swa lengths destroy");
        expectOk(ctxc_kv_page_table_destroy(swaTable_), "swa table destroy");
        expectOk(ctxc_kv_pool_destroy(swaPool_), "swa pool destroy");
        expectOk(ctxc_kv_lengths_destroy(lengths_), "lengths destroy");
        expectOk(ctxc_kv_page_table_destroy(table_), "table destroy");
        expectOk(ctxc_kv_pool_destroy(pool_), "pool destroy");
        expectOk(ctxc_kv_lengths_destroy(draftLengths_), "draft lengths destroy");
        expectOk(ctxc_kv_page_table_destroy(draftTable_), "draft table destroy");
        expectOk(ctxc_kv_pool_destroy(draftPool_), "draft pool destroy");
        for (ctxc_kv_store_t* store : liveStores_) expectOk(ctxc_kv_store_destroy(store), "store destroy");
        for (auto const& f : faultStores_)
            if (f->released.load() != 1) fail("a callback store not released exactly once", CTXC_OK);
        size_t bytes = 1;
        expectOk(ctxc_device_backend_allocated_bytes(backend_, &bytes), "allocated bytes");
        if (bytes != 0) fail("device memory leaked", CTXC_OK);
        expectOk(ctxc_device_backend_destroy(backend_), "backend destroy");
    }

    FuzzedDataProvider& in_;
    ctxc_device_backend_t* backend_ = nullptr;
    ctxc_kv_pool_t* pool_ = nullptr;
    ctxc_kv_page_table_t* table_ = nullptr;
    ctxc_kv_lengths_t* lengths_ = nullptr;
    ctxc_kv_pool_t* draftPool_ = nullptr;  // EAGLE coordinators' draft triple
    ctxc_kv_page_table_t* draftTable_ = nullptr;
    ctxc_kv_lengths_t* draftLengths_ = nullptr;
    bool eagle_ = false;  // the live coordinator is an EAGLE deployment
    bool replicaEagle_ = false;
    ctxc_coordinator_t* coordinator_ = nullptr;
    ctxc_kv_pool_t* swaPool_ = nullptr;
    ctxc_kv_page_table_t* swaTable_ = nullptr;
    ctxc_kv_lengths_t* swaLengths_ = nullptr;
    ctxc_swa_manager_t* swa_ = nullptr;
    Engine engines_[2];
    bool replica_ = false;  // the last coordinator had a store whose handle is live: createReplica may follow
    ctxc_coordinator_options_t replicaOptions_{};
    ctxc_store_link_options_t replicaLink_{};
    SharedObjects sharedObjects_;
    std::vector<std::unique_ptr<FaultStore>> faultStores_;  // outlive every tier (checked released at the end)
    std::vector<ctxc_kv_store_t*> liveStores_;  // handles destroyed at the end
    ctxc_kv_request_t* stale_ = nullptr;
    uint64_t epochs_[4] = {0, 0, 0, 0};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(uint8_t const* data, size_t size) {
    FuzzedDataProvider in(data, size);
    Session(in).run();
    return 0;
}
