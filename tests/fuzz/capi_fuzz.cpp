// libFuzzer target for the C ABI: the input bytes are decoded into a sequence of ctxc_* calls over up to two
// managers and a handful of leases (and their host tiers and a bookkeeping store they share), including NULL, stale,
// foreign and made-up handles, out-of-range ids, negative and huge counts, NULL arrays with non-zero counts, and hashes
// drawn from a tiny alphabet so that prefixes really collide and get reused.
//
// After every call the target checks, and aborts on violation:
//   - the status is a known ctxc_status_t;
//   - every live manager passes ctxc_manager_check_invariants();
//   - a failed mutating call changed nothing observable (pool free counts, record LRU, lease pages);
// and at the end of each input, after destroying every lease and evicting every record, that every pool is back
// to full capacity (nothing leaked). ASan/UBSan/LSan catch memory errors and leaks.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ctxcache.h"

namespace {

[[noreturn]] void fail(char const* what, ctxc_status_t status) {
    std::fprintf(stderr, "capi_fuzz: %s (status %d %s, last error: %s)\n", what, static_cast<int>(status),
                 ctxc_status_string(status), ctxc_last_error());
    std::abort();
}

// CTXCACHE_FUZZ_TRACE=1: print each step's operation (and the retention calls' arguments) to stderr, to read a
// reproducer's story.
bool const kTrace = std::getenv("CTXCACHE_FUZZ_TRACE") != nullptr;
#define FUZZ_TRACE(...)                        \
    do {                                       \
        if (kTrace) {                          \
            std::fprintf(stderr, __VA_ARGS__); \
            std::fputc('\n', stderr);          \
        }                                      \
    } while (0)

void checkStatus(ctxc_status_t status) {
    if (status < CTXC_OK || status >= CTXC_STATUS_COUNT) fail("unknown status code", status);
    if (status == CTXC_E_INTERNAL || status == CTXC_E_INVARIANT || status == CTXC_E_DEVICE)
        fail("internal error, invariant violation or device failure", status);
    if (status == CTXC_E_CONCURRENT_USE) fail("one thread refused as concurrent (a family flag left held)", status);
}

struct ManagerSlot {
    ctxc_manager_t* handle = nullptr;
    bool live = false;
};

struct LeaseSlot {
    ctxc_lease_t* handle = nullptr;
    int manager = 0;
    bool live = false;  // handle not destroyed (may be released or orphaned)
    std::vector<ctxc_hybrid_snapshot_reservation_t> reservations;
};

// What a failed call must leave untouched.
struct Observed {
    std::array<int32_t, 4> free{};
    std::vector<uint64_t> lru;

    bool operator==(Observed const& o) const { return free == o.free && lru == o.lru; }
};

Observed observe(ctxc_manager_t* m) {
    Observed o;
    for (int32_t t = 0; t < 4; ++t) {
        int32_t capacity = 0;
        if (ctxc_manager_pool_counts(m, t, &o.free[static_cast<size_t>(t)], &capacity) != CTXC_OK)
            fail("pool_counts on a live manager", CTXC_E_INTERNAL);
    }
    size_t count = 0;
    ctxc_debug_manager_records_lru(m, nullptr, 0, &count);
    o.lru.resize(count);
    if (count && ctxc_debug_manager_records_lru(m, o.lru.data(), count, &count) != CTXC_OK)
        fail("records_lru", CTXC_E_INTERNAL);
    return o;
}

class Session {
public:
    explicit Session(FuzzedDataProvider& in) : in_(in) {}

    void run() {
        for (int step = 0; step < 64 && in_.remaining_bytes() > 0; ++step) {
            one();
            for (ManagerSlot& m : managers_)
                if (m.live) {
                    ctxc_status_t const s = ctxc_manager_check_invariants(m.handle);
                    if (s != CTXC_OK) fail("invariants broken", s);
                    int32_t attached = 0;
                    ctxc_host_tier_metrics_t tier{};
                    tier.struct_size = sizeof tier;
                    if (ctxc_manager_host_tier_metrics(m.handle, &attached, &tier) != CTXC_OK)
                        fail("the host tier's metrics of a live manager", CTXC_E_INTERNAL);
                    if (attached) {
                        ctxc_status_t const t = ctxc_manager_host_tier_check_invariants(m.handle);
                        if (t != CTXC_OK) fail("host tier invariants broken", t);
                        if (tier.resident_blocks + tier.writing_blocks > static_cast<uint64_t>(tier.capacity_pages))
                            fail("the host tier holds more blocks than its capacity", CTXC_OK);
                    }
                }
            if (storeLive_) {
                ctxc_status_t const s = ctxc_bookkeeping_store_check_invariants(store_);
                if (s != CTXC_OK) fail("store invariants broken", s);
                ctxc_bookkeeping_store_metrics_t sm{};
                sm.struct_size = sizeof sm;
                if (ctxc_bookkeeping_store_metrics(store_, &sm) != CTXC_OK) fail("a live store's metrics", CTXC_OK);
                if (sm.resident_blocks > static_cast<uint64_t>(sm.capacity_pages))
                    fail("the store holds more blocks than its capacity", CTXC_OK);
            }
        }
        teardown();
    }

private:
    ctxc_hash128_t hash(uint8_t symbol) const { return ctxc_hash128_t{0xF00Dull, symbol}; }

    std::vector<ctxc_hash128_t> hashes(size_t maxCount) {
        size_t const n = in_.ConsumeIntegralInRange<size_t>(0, maxCount);
        std::vector<ctxc_hash128_t> out;
        for (size_t i = 0; i < n; ++i) out.push_back(hash(in_.ConsumeIntegralInRange<uint8_t>(0, 5)));
        return out;
    }

    int32_t smallCount() {
        switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
            case 0: return -in_.ConsumeIntegralInRange<int32_t>(1, 3);
            case 1: return INT32_MAX - in_.ConsumeIntegralInRange<int32_t>(0, 2);
            default: return in_.ConsumeIntegralInRange<int32_t>(0, 40);
        }
    }

    ctxc_manager_t* managerArg(int* index = nullptr) {
        switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
            case 0: return nullptr;
            case 1: return reinterpret_cast<ctxc_manager_t*>(static_cast<uintptr_t>(in_.ConsumeIntegral<uint64_t>()));
            default: {
                int const i = in_.ConsumeIntegralInRange<int>(0, 1);
                if (index) *index = i;
                return managers_[static_cast<size_t>(i)].handle;  // possibly stale
            }
        }
    }

    LeaseSlot* leaseSlot() {
        if (leases_.empty()) return nullptr;
        return &leases_[in_.ConsumeIntegralInRange<size_t>(0, leases_.size() - 1)];
    }

    ctxc_lease_t* leaseArg() {
        switch (in_.ConsumeIntegralInRange<int>(0, 9)) {
            case 0: return nullptr;
            case 1: return reinterpret_cast<ctxc_lease_t*>(static_cast<uintptr_t>(in_.ConsumeIntegral<uint64_t>()));
            case 2: return reinterpret_cast<ctxc_lease_t*>(managers_[0].handle);  // a handle of the wrong type
            default: {
                LeaseSlot* l = leaseSlot();
                return l ? l->handle : nullptr;
            }
        }
    }

    bool liveManager(ctxc_manager_t* m) const {
        for (ManagerSlot const& s : managers_)
            if (s.live && s.handle == m && m) return true;
        return false;
    }

    // Runs a mutating call: on failure (or a capacity answer) nothing observable may change.
    template <class F>
    void mutating(ctxc_manager_t* m, F&& call, bool capacityAnswerMustChangeNothing = false) {
        bool const observable = liveManager(m);
        Observed before;
        if (observable) before = observe(m);
        bool unchanged = false;
        ctxc_status_t const s = call(unchanged);
        checkStatus(s);
        if (observable && (s != CTXC_OK || (capacityAnswerMustChangeNothing && unchanged)) && !(observe(m) == before))
            fail("a failed call changed the state", s);
    }

    void acquire(int kind) {
        int index = 0;
        ctxc_manager_t* m = managerArg(&index);
        std::vector<ctxc_hash128_t> h = hashes(6);
        int32_t n = smallCount();
        if (in_.ConsumeBool() && n >= 0 && n < 1000)
            n = static_cast<int32_t>(h.size()) * pageSize_[static_cast<size_t>(index)] +
                in_.ConsumeIntegralInRange<int32_t>(0, 3);
        int32_t const policy = in_.ConsumeIntegralInRange<int32_t>(-1, 2);
        bool const nullArray = in_.ConsumeIntegralInRange<int>(0, 15) == 0;
        ctxc_acquire_result_t result{};
        result.struct_size = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? 4 : sizeof(result);
        ctxc_lease_t* lease = nullptr;
        ctxc_hash128_t const* data = nullArray ? nullptr : h.data();
        mutating(m, [&](bool& unchanged) {
            ctxc_status_t s;
            if (kind == 0) {
                s = ctxc_manager_acquire_vanilla(m, data, h.size(), n, policy, &result, &lease);
            } else if (kind == 1 || kind == 3) {
                std::vector<ctxc_hybrid_candidate_t> candidates;
                size_t const count = in_.ConsumeIntegralInRange<size_t>(0, 3);
                for (size_t i = 0; i < count; ++i)
                    candidates.push_back({in_.ConsumeIntegralInRange<int32_t>(-2, 30), 0,
                                          ctxc_hash128_t{0xD16Eull, in_.ConsumeIntegralInRange<uint64_t>(0, 30)}});
                if (kind == 3)  // Hybrid+MTP: same candidates, both pools
                    s = ctxc_manager_acquire_hybrid_mtp(m, candidates.data(), candidates.size(), data, h.size(), n,
                                                        policy, &result, &lease);
                else
                    s = ctxc_manager_acquire_hybrid(m, candidates.data(), candidates.size(), data, h.size(), n,
                                                    in_.ConsumeIntegralInRange<int32_t>(0, 2), policy, &result, &lease);
            } else {
                s = ctxc_manager_acquire_spec(m, data, h.size(), n, policy, &result, &lease);
            }
            unchanged = s == CTXC_OK && result.status == CTXC_ACQUIRE_INSUFFICIENT_CAPACITY;
            if (s == CTXC_OK && result.status == CTXC_ACQUIRE_INSUFFICIENT_CAPACITY && lease)
                fail("lease on failure", s);
            return s;
        }, true);
        if (lease) leases_.push_back(LeaseSlot{lease, index, true, {}});
    }

    // Retention: a lease's spec (sometimes malformed), the driven clock (sometimes backwards), the pin budget,
    // pins and unpins of arbitrary ids; a refused call changes nothing, and every later check holds.
    void retention() {
        ctxc_manager_t* m = managerArg();
        switch (in_.ConsumeIntegralInRange<int>(0, 4)) {
            case 0: {
                ctxc_lease_t* l = leaseArg();
                std::vector<ctxc_retention_range_t> ranges(in_.ConsumeIntegralInRange<size_t>(0, 3));
                for (ctxc_retention_range_t& r : ranges)
                    r = {in_.ConsumeIntegralInRange<int32_t>(-1, 24), in_.ConsumeIntegralInRange<int32_t>(-2, 24),
                         in_.ConsumeIntegralInRange<int32_t>(-1, 101), 0,
                         in_.ConsumeIntegralInRange<int64_t>(-2, 4'000'000'000)};
                ctxc_retention_spec_t spec;
                ctxc_retention_spec_init(&spec);
                spec.ranges = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : ranges.data();
                spec.range_count = ranges.size();
                spec.decode_priority = in_.ConsumeIntegralInRange<int32_t>(-1, 101);
                spec.prompt_token_count = in_.ConsumeIntegralInRange<int32_t>(-2, 24);
                bool const none = in_.ConsumeIntegralInRange<int>(0, 7) == 0;
                ctxc_status_t const st = ctxc_lease_set_retention(l, none ? nullptr : &spec);
                FUZZ_TRACE("  lease_set_retention %s decode %d prompt %d -> %d", none ? "NULL" : "spec",
                           spec.decode_priority, spec.prompt_token_count, st);
                for (ctxc_retention_range_t const& r : ranges)
                    FUZZ_TRACE("    range [%d, %d) priority %d duration %lld", r.token_start, r.token_end, r.priority,
                               static_cast<long long>(r.duration_ns));
                checkStatus(st);
                break;
            }
            case 1: {
                int64_t const now = clock_ + in_.ConsumeIntegralInRange<int64_t>(-1'000'000'000, 3'000'000'000);
                FUZZ_TRACE("  set_retention_time %lld", static_cast<long long>(now));
                mutating(m, [&](bool&) { return ctxc_manager_set_retention_time(m, now); });
                if (now > clock_) clock_ = now;
                break;
            }
            case 2: {
                double const fraction = in_.ConsumeIntegralInRange<int>(-1, 5) / 4.0;
                mutating(m, [&](bool&) { return ctxc_manager_set_pin_budget(m, fraction); });
                break;
            }
            case 3: {
                uint64_t const id = in_.ConsumeIntegralInRange<uint64_t>(0, 12);
                int64_t const duration = in_.ConsumeIntegralInRange<int64_t>(-2, 4'000'000'000);
                FUZZ_TRACE("  pin_record %llu for %lld", static_cast<unsigned long long>(id),
                           static_cast<long long>(duration));
                mutating(m, [&](bool&) { return ctxc_manager_pin_record(m, id, duration); });
                break;
            }
            default: {
                uint64_t const id = in_.ConsumeIntegralInRange<uint64_t>(0, 12);
                FUZZ_TRACE("  unpin_record %llu", static_cast<unsigned long long>(id));
                mutating(m, [&](bool&) { return ctxc_manager_unpin_record(m, id); });
                int32_t priority = 0;
                checkStatus(ctxc_manager_record_priority(m, id, &priority));
                ctxc_retention_metrics_t metrics{sizeof metrics};
                checkStatus(ctxc_manager_retention_metrics(m, &metrics));
                break;
            }
        }
    }

    // What an engine's scheduler adds (vLLM's adapter): the side-effect-free probe (it must change nothing, bind at
    // most one page per hash and report its pages consistently), the acquirable count, a lease's publication growth
    // (any value; a refused one changes nothing), after which the ordinary publish cases extend its record.
    void adapter() {
        int index = 0;
        ctxc_manager_t* m = managerArg(&index);
        switch (in_.ConsumeIntegralInRange<int>(0, 2)) {
            case 0: {
                std::vector<ctxc_hash128_t> h = hashes(6);
                int32_t n = smallCount();
                if (in_.ConsumeBool() && n >= 0 && n < 1000)
                    n = static_cast<int32_t>(h.size()) * pageSize_[static_cast<size_t>(index)] +
                        in_.ConsumeIntegralInRange<int32_t>(0, 3);
                std::vector<int32_t> pages(in_.ConsumeIntegralInRange<size_t>(0, 7), -7);
                ctxc_reuse_probe_t probe{};
                probe.struct_size = in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? 4 : sizeof(probe);
                bool const live = liveManager(m);
                Observed const before = live ? observe(m) : Observed{};
                ctxc_status_t const s = ctxc_manager_probe_vanilla(
                    m, in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : h.data(), h.size(), n,
                    pages.empty() ? nullptr : pages.data(), pages.size(), &probe);
                checkStatus(s);
                if (live && !(observe(m) == before)) fail("the probe changed the state", s);
                if (s == CTXC_OK && (probe.page_count > h.size() || probe.page_count > pages.size()))
                    fail("the probe reported more pages than hashes or than the buffer holds", s);
                if (s == CTXC_OK)
                    for (size_t i = 0; i < probe.page_count; ++i)
                        if (pages[i] < 0) fail("the probe reported a page it did not write", s);
                break;
            }
            case 1: {
                int32_t count = -1;
                ctxc_status_t const s = ctxc_manager_acquirable_count(m, in_.ConsumeIntegralInRange<int32_t>(-1, 4),
                                                                      in_.ConsumeBool() ? &count : nullptr);
                checkStatus(s);
                if (s == CTXC_OK && count < 0) fail("a negative acquirable count", s);
                break;
            }
            default: {
                ctxc_lease_t* l = leaseArg();
                checkStatus(ctxc_lease_set_publication_growth(l, in_.ConsumeIntegralInRange<int32_t>(-1, 2)));
                break;
            }
        }
    }

    // A host tier beside a manager (bookkeeping): attach with any options, extend hits (vanilla or speculative)
    // with any arguments (the manager's state must not change: the tier only reads its hashes), clear, detach; the
    // per-step check covers its invariants and capacity, and the manager's destruction takes it along.
    // And a bookkeeping store (c/store.h) that both managers' tiers may share: created, destroyed (while tiers
    // still use it), attached with 0 or more host pages, extended into, probed; its invariants are checked after
    // every step while its handle lives.
    ctxc_bookkeeping_store_t* storeArg() {
        switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
            case 0: return nullptr;
            case 1: return reinterpret_cast<ctxc_bookkeeping_store_t*>(managers_[0].handle);  // the wrong type
            default: return store_;  // possibly stale
        }
    }

    // An extension (speculative: the EAGLE one) with any arguments: the manager's state must not change, and no
    // more blocks load than the prompt has (speculative: fewer, its last slot gives only a draft page).
    void extendHit(ctxc_manager_t* m, bool speculative) {
        std::vector<ctxc_hash128_t> h = hashes(6);
        int32_t loaded = -1;
        bool const live = liveManager(m);
        Observed const before = live ? observe(m) : Observed{};
        auto const call = speculative ? ctxc_manager_host_tier_extend_spec_hit : ctxc_manager_host_tier_extend_hit;
        ctxc_status_t const s = call(m, in_.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : h.data(), h.size(),
                                     smallCount(), in_.ConsumeIntegralInRange<int32_t>(-1, 7),
                                     in_.ConsumeIntegralInRange<int>(0, 15) ? &loaded : nullptr);
        checkStatus(s);
        if (live && !(observe(m) == before)) fail("extending a hit changed the manager", s);
        size_t const most = speculative ? std::max<size_t>(h.size(), 1) - 1 : h.size();
        if (s == CTXC_OK && (loaded < 0 || static_cast<size_t>(loaded) > most))
            fail("an extension loaded more blocks than the prompt allows", s);
    }

    void hostTier() {
        ctxc_manager_t* m = managerArg();
        switch (in_.ConsumeIntegralInRange<int>(0, 7)) {
            case 7: extendHit(m, true); break;  // a manager without draft pages: CTXC_E_CONTRACT
            case 4: {
                if (storeLive_ && in_.ConsumeBool()) {
                    checkStatus(ctxc_bookkeeping_store_destroy(store_));  // the tiers keep it
                    storeLive_ = false;
                    break;
                }
                if (storeLive_) break;
                ctxc_bookkeeping_store_options_t o;
                ctxc_bookkeeping_store_options_init(&o);
                o.capacity_pages = in_.ConsumeBool() ? in_.ConsumeIntegralInRange<int32_t>(1, 16) : smallCount();
                ctxc_bookkeeping_store_t* created = nullptr;
                ctxc_status_t const st = ctxc_bookkeeping_store_create(&o, &created);
                checkStatus(st);
                FUZZ_TRACE("  store_create %d -> %d", o.capacity_pages, st);
                if (st == CTXC_OK) {
                    store_ = created;
                    storeLive_ = true;
                }
                break;
            }
            case 5: {
                ctxc_host_tier_options_t o;
                ctxc_host_tier_options_init(&o);
                o.capacity_pages = in_.ConsumeIntegralInRange<int32_t>(-1, 8);
                o.write_policy = in_.ConsumeIntegralInRange<int32_t>(0, 1);
                o.store = storeArg();
                checkStatus(ctxc_manager_attach_host_tier(m, &o));
                break;
            }
            case 6: {
                std::vector<ctxc_hash128_t> h = hashes(6);
                int32_t host = -1, stored = -1;
                bool const live = liveManager(m);
                Observed const before = live ? observe(m) : Observed{};
                ctxc_status_t const s = ctxc_manager_host_tier_extend_hit_by_tier(
                    m, h.data(), h.size(), smallCount(), in_.ConsumeIntegralInRange<int32_t>(-1, 7), &host,
                    in_.ConsumeIntegralInRange<int>(0, 15) ? &stored : nullptr);
                checkStatus(s);
                if (live && !(observe(m) == before)) fail("extending a hit changed the manager", s);
                if (s == CTXC_OK && (host < 0 || stored < 0 || static_cast<size_t>(host) + stored > h.size()))
                    fail("an extension by tier loaded more blocks than the prompt has", s);
                size_t held = 0;
                ctxc_status_t const p = ctxc_bookkeeping_store_probe(storeArg(), h.data(), h.size(), &held);
                checkStatus(p);
                if (p == CTXC_OK && held > h.size()) fail("a store probe longer than the prompt", p);
                break;
            }
            case 0: {
                ctxc_host_tier_options_t o;
                ctxc_host_tier_options_init(&o);
                o.capacity_pages = in_.ConsumeBool() ? in_.ConsumeIntegralInRange<int32_t>(1, 12) : smallCount();
                o.write_policy = in_.ConsumeIntegralInRange<int32_t>(-1, 2);
                checkStatus(ctxc_manager_attach_host_tier(m, in_.ConsumeIntegralInRange<int>(0, 15) ? &o : nullptr));
                break;
            }
            case 1: extendHit(m, false); break;
            case 2: checkStatus(ctxc_manager_host_tier_clear(m)); break;
            default: checkStatus(ctxc_manager_detach_host_tier(m)); break;
        }
    }

    void one() {
        int const op = in_.ConsumeIntegralInRange<int>(0, 24);
        FUZZ_TRACE("op %d", op);
        switch (op) {
            case 24: hostTier(); break;
            case 23: adapter(); break;
            case 22: retention(); break;
            case 0: {  // create
                int const i = in_.ConsumeIntegralInRange<int>(0, 1);
                if (managers_[static_cast<size_t>(i)].live) break;
                ctxc_manager_options_t o;
                ctxc_manager_options_init(&o);
                o.page_size = in_.ConsumeIntegralInRange<int32_t>(-1, 8);
                o.capacities = {in_.ConsumeIntegralInRange<int32_t>(-1, 16), in_.ConsumeIntegralInRange<int32_t>(0, 12),
                                in_.ConsumeIntegralInRange<int32_t>(0, 3), in_.ConsumeIntegralInRange<int32_t>(0, 3)};
                o.max_records = in_.ConsumeIntegralInRange<int32_t>(-1, 4);
                o.eviction_policy = in_.ConsumeIntegralInRange<int32_t>(-1, 1);  // -1: refused
                ctxc_manager_t* m = nullptr;
                ctxc_status_t const s = ctxc_manager_create(&o, &m);
                checkStatus(s);
                if (s == CTXC_OK) {
                    managers_[static_cast<size_t>(i)] = {m, true};
                    pageSize_[static_cast<size_t>(i)] = o.page_size;
                } else if (m) {
                    fail("failed create returned a handle", s);
                }
                break;
            }
            case 1: {  // destroy (maybe with live leases, maybe stale)
                int index = 0;
                ctxc_manager_t* m = managerArg(&index);
                ctxc_status_t const s = ctxc_manager_destroy(m);
                checkStatus(s);
                if (s == CTXC_OK || s == CTXC_E_LEASES_OUTSTANDING)
                    for (ManagerSlot& slot : managers_)
                        if (slot.handle == m) slot.live = false;
                break;
            }
            case 2: acquire(0); break;
            case 3: acquire(in_.ConsumeBool() ? 1 : 3); break;  // hybrid or Hybrid+MTP
            case 4: acquire(2); break;
            case 5: {
                ctxc_manager_t* m = managerArg();
                int32_t ok = 0;
                int32_t const count = smallCount();
                ctxc_lease_t* l = leaseArg();
                mutating(m, [&](bool& unchanged) {
                    ctxc_status_t s = ctxc_manager_grow_base_pages(m, l, count, &ok);
                    unchanged = s == CTXC_OK && !ok;
                    return s;
                }, true);
                break;
            }
            case 6: {
                ctxc_manager_t* m = managerArg();
                int32_t ok = 0;
                int32_t const base = smallCount(), draft = smallCount();
                ctxc_lease_t* l = leaseArg();
                mutating(m, [&](bool& unchanged) {
                    ctxc_status_t s = ctxc_manager_grow_spec_pages(m, l, base, draft, &ok);
                    unchanged = s == CTXC_OK && !ok;
                    return s;
                }, true);
                break;
            }
            case 7: {
                ctxc_manager_t* m = managerArg();
                LeaseSlot* slot = leaseSlot();
                ctxc_lease_t* l = slot && in_.ConsumeBool() ? slot->handle : leaseArg();
                ctxc_hybrid_snapshot_reservation_t r{};
                int32_t ok = 0;
                int32_t const partial = in_.ConsumeIntegralInRange<int32_t>(0, 2);
                mutating(m, [&](bool& unchanged) {
                    ctxc_status_t s = ctxc_manager_reserve_hybrid_snapshots(m, l, partial, &r, &ok);
                    unchanged = s == CTXC_OK && !ok;
                    return s;
                }, true);
                if (ok && slot && l == slot->handle) slot->reservations.push_back(r);
                break;
            }
            case 8: {
                ctxc_manager_t* m = managerArg();
                ctxc_lease_t* l = leaseArg();
                mutating(m, [&](bool&) { return ctxc_manager_release_restored_hybrid_snapshots(m, l); });
                break;
            }
            case 9: {
                ctxc_manager_t* m = managerArg();
                LeaseSlot* slot = leaseSlot();
                ctxc_lease_t* l = leaseArg();
                ctxc_hybrid_snapshot_reservation_t r{in_.ConsumeIntegralInRange<int32_t>(-2, 3),
                                                     in_.ConsumeIntegralInRange<int32_t>(-2, 3)};
                if (slot && !slot->reservations.empty() && in_.ConsumeBool()) r = slot->reservations.back();
                mutating(m, [&](bool&) {
                    return ctxc_manager_retire_hybrid_snapshot_reservation(m, l, in_.ConsumeBool() ? &r : nullptr);
                });
                break;
            }
            case 10: {
                ctxc_manager_t* m = managerArg();
                ctxc_lease_t* l = leaseArg();
                std::vector<ctxc_hash128_t> h = hashes(8);
                int32_t const resident = smallCount();
                ctxc_publish_result_t out{};
                out.struct_size = sizeof(out);
                mutating(m, [&](bool&) {
                    return ctxc_manager_publish(m, l, h.empty() ? nullptr : h.data(), h.size(), resident, &out);
                });
                break;
            }
            case 11: {
                ctxc_manager_t* m = managerArg();
                LeaseSlot* slot = leaseSlot();
                ctxc_lease_t* l = slot ? slot->handle : leaseArg();
                std::vector<ctxc_hash128_t> h = hashes(6);
                ctxc_hybrid_checkpoint_key_t key{ctxc_hash128_t{0xD16Eull, in_.ConsumeIntegralInRange<uint64_t>(0, 30)},
                                                 in_.ConsumeIntegralInRange<int32_t>(-1, 30), 0};
                ctxc_hybrid_snapshot_reservation_t r{in_.ConsumeIntegralInRange<int32_t>(-1, 3),
                                                     in_.ConsumeIntegralInRange<int32_t>(-1, 3)};
                if (slot && !slot->reservations.empty() && in_.ConsumeBool()) r = slot->reservations.back();
                ctxc_publish_result_t out{};
                out.struct_size = sizeof(out);
                bool const mtp = in_.ConsumeBool();
                mutating(m, [&](bool&) {
                    return mtp ? ctxc_manager_publish_hybrid_mtp(m, l, h.data(), h.size(), &key, &r, &out)
                               : ctxc_manager_publish_hybrid(m, l, h.data(), h.size(), &key, &r, &out);
                });
                break;
            }
            case 12: {
                ctxc_lease_t* l = leaseArg();
                checkStatus(ctxc_lease_release(l));
                break;
            }
            case 13: {
                LeaseSlot* slot = leaseSlot();
                ctxc_lease_t* l = slot && in_.ConsumeBool() ? slot->handle : leaseArg();
                ctxc_status_t const s = ctxc_lease_destroy(l);
                checkStatus(s);
                if (s == CTXC_OK)
                    for (LeaseSlot& ls : leases_)
                        if (ls.handle == l) ls.live = false;
                break;
            }
            case 14: {
                ctxc_manager_t* m = managerArg();
                uint64_t const id = in_.ConsumeIntegralInRange<uint64_t>(0, 12);
                mutating(m, [&](bool&) { return ctxc_manager_evict_record(m, id); });
                break;
            }
            case 15: {  // read-only queries with arbitrary arguments
                ctxc_manager_t* m = managerArg();
                int32_t a = 0, b = 0;
                checkStatus(ctxc_debug_manager_ref_counts(m, in_.ConsumeIntegralInRange<int32_t>(-1, 4),
                                                          in_.ConsumeIntegralInRange<int32_t>(-2, 20), &a, &b));
                checkStatus(ctxc_manager_pool_counts(m, in_.ConsumeIntegralInRange<int32_t>(-1, 4), &a, &b));
                std::vector<int32_t> ids(in_.ConsumeIntegralInRange<size_t>(0, 20));
                size_t count = 0;
                checkStatus(ctxc_debug_manager_free_list(m, in_.ConsumeIntegralInRange<int32_t>(0, 4),
                                                         ids.empty() ? nullptr : ids.data(), ids.size(), &count));
                std::vector<int32_t> lengths(in_.ConsumeIntegralInRange<size_t>(0, 4));
                checkStatus(ctxc_manager_hybrid_candidate_lengths(
                    m, smallCount(), lengths.empty() ? nullptr : lengths.data(), lengths.size(), &count));
                ctxc_record_view_t view{sizeof(ctxc_record_view_t)};
                checkStatus(ctxc_debug_manager_record(m, in_.ConsumeIntegralInRange<uint64_t>(0, 12), &view));
                ctxc_hash128_t const h = hash(in_.ConsumeIntegral<uint8_t>());
                checkStatus(ctxc_debug_manager_base_index_lookup(m, in_.ConsumeBool() ? &h : nullptr, &a));
                break;
            }
            case 16: {  // lease queries
                ctxc_lease_t* l = leaseArg();
                int32_t const* pages = nullptr;
                size_t count = 0;
                ctxc_status_t s = ctxc_lease_base_pages(l, &pages, &count);
                checkStatus(s);
                if (s == CTXC_OK)
                    for (size_t i = 0; i < count; ++i)
                        if (pages[i] < 0) fail("negative page id in a lease", s);
                checkStatus(ctxc_lease_draft_pages(l, &pages, &count));
                ctxc_lease_info_t info{sizeof(ctxc_lease_info_t)};
                checkStatus(ctxc_lease_info(l, in_.ConsumeBool() ? &info : nullptr));
                break;
            }
            case 17: {  // hashing with malformed inputs
                std::vector<int32_t> tokens(in_.ConsumeIntegralInRange<size_t>(0, 24));
                for (int32_t& t : tokens) t = in_.ConsumeIntegral<int32_t>();
                int32_t const page = in_.ConsumeIntegralInRange<int32_t>(-1, 6);
                std::vector<ctxc_hash128_t> out(in_.ConsumeIntegralInRange<size_t>(0, 30));
                size_t count = 0;
                std::array<ctxc_block_key_extras_t, 2> extras{};
                for (ctxc_block_key_extras_t& e : extras) {
                    e.has_adapter = in_.ConsumeIntegralInRange<uint32_t>(0, 2);
                    e.media_count = in_.ConsumeIntegralInRange<size_t>(0, 1);  // media pointer stays NULL
                }
                size_t const extrasCount = in_.ConsumeIntegralInRange<size_t>(0, extras.size());
                checkStatus(ctxc_hash_full_blocks(nullptr, tokens.empty() ? nullptr : tokens.data(), tokens.size(),
                                                  page, extrasCount ? extras.data() : nullptr, extrasCount, nullptr,
                                                  out.empty() ? nullptr : out.data(), out.size(), &count));
                ctxc_hash128_t digest;
                checkStatus(
                    ctxc_hash_exact_prefix(nullptr, tokens.data(), tokens.size(), page, nullptr, 0, nullptr, &digest));
                break;
            }
            case 19: {  // KV events: enable, drain (each event well-formed), status, disable
                ctxc_manager_t* m = managerArg();
                switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
                    case 0:
                        mutating(m, [&](bool&) {
                            return ctxc_kv_events_enable(m, in_.ConsumeIntegralInRange<size_t>(0, 4));
                        });
                        break;
                    case 1: {
                        ctxc_kv_event_t const* events = nullptr;
                        size_t count = 0;
                        int32_t blockSize = 0;
                        ctxc_status_t const s = ctxc_kv_events_drain(m, &events, &count, &blockSize);
                        checkStatus(s);
                        for (size_t i = 0; s == CTXC_OK && i < count; ++i) {
                            ctxc_kv_event_t const& e = events[i];
                            if (e.type < CTXC_KV_EVENT_BLOCK_STORED || e.type > CTXC_KV_EVENT_ALL_BLOCKS_CLEARED)
                                fail("drained an event of no known type", s);
                            if (e.type == CTXC_KV_EVENT_BLOCK_STORED &&
                                (e.block_hash_count == 0 ||
                                 e.token_count != e.block_hash_count * static_cast<size_t>(blockSize)))
                                fail("a stored event without its tokens", s);
                            for (size_t k = 0; k < e.extra_key_count; ++k) {
                                ctxc_kv_event_extra_key_t const& x = e.extra_keys[k];
                                if (x.block >= e.block_hash_count || (k > 0 && x.block < e.extra_keys[k - 1].block))
                                    fail("an extra key outside its event's blocks or out of block order", s);
                                if (x.kind == CTXC_KV_EXTRA_KEY_MEDIA && (x.text_length != 64 || x.offset >= blockSize))
                                    fail("a media key without its identifier or beyond its block", s);
                                if (x.kind == CTXC_KV_EXTRA_KEY_LORA_NAME &&
                                    std::string(x.text, x.text_length) != std::string(e.lora_name, e.lora_name_length))
                                    fail("a LoRA key that is not the event's lora_name", s);
                            }
                        }
                        break;
                    }
                    case 2: {
                        int32_t enabled = 0;
                        size_t pending = 0;
                        uint64_t lost = 0;
                        checkStatus(ctxc_kv_events_status(m, &enabled, &pending, &lost));
                        break;
                    }
                    default: checkStatus(ctxc_kv_events_disable(m)); break;
                }
                break;
            }
            case 20: {  // publication with tokens (maybe too few, maybe NULL), or a clear
                ctxc_manager_t* m = managerArg();
                if (in_.ConsumeIntegralInRange<int>(0, 3) == 0) {
                    mutating(m, [&](bool&) { return ctxc_manager_clear(m); });
                    break;
                }
                ctxc_lease_t* l = leaseArg();
                std::vector<ctxc_hash128_t> h = hashes(8);
                int32_t const resident = smallCount();
                std::vector<int32_t> tokens(in_.ConsumeIntegralInRange<size_t>(0, 48));
                for (int32_t& t : tokens) t = in_.ConsumeIntegralInRange<int32_t>(0, 9);
                bool const nullTokens = in_.ConsumeIntegralInRange<int>(0, 7) == 0;
                // An identity for the events, sometimes: a LoRA name and up to three media items whose positions
                // may be out of order, overlapping, negative or empty (each of those is CTXC_E_CONTRACT).
                ctxc_kv_event_keys_t keys;
                ctxc_kv_event_keys_init(&keys);
                std::string const lora =
                    in_.ConsumeBool() ? "adapter-" + std::to_string(in_.ConsumeIntegral<uint8_t>()) : "";
                keys.lora_name = lora.data();
                keys.lora_name_length = lora.size();
                static char const kIdentifier[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
                std::vector<ctxc_kv_event_media_t> media(in_.ConsumeIntegralInRange<size_t>(0, 3));
                for (ctxc_kv_event_media_t& item : media) {
                    item.identifier = kIdentifier;
                    item.identifier_length = in_.ConsumeIntegralInRange<size_t>(0, 8) == 0 ? 0 : 64;
                    item.first_token = in_.ConsumeIntegralInRange<int64_t>(-1, 40);
                    item.token_count = in_.ConsumeIntegralInRange<int64_t>(0, 20);
                }
                keys.media = media.empty() ? nullptr : media.data();
                keys.media_count = media.size();
                bool const withKeys = in_.ConsumeBool();
                ctxc_publish_result_t out{};
                out.struct_size = sizeof(out);
                mutating(m, [&](bool&) {
                    return ctxc_manager_publish_with_tokens(m, l, h.empty() ? nullptr : h.data(), h.size(), resident,
                                                            nullTokens ? nullptr : tokens.data(), tokens.size(),
                                                            withKeys ? &keys : nullptr, &out);
                });
                break;
            }
            case 18: {  // made-up and NULL handles everywhere
                auto* fake = reinterpret_cast<ctxc_manager_t*>(static_cast<uintptr_t>(in_.ConsumeIntegral<uint64_t>()));
                auto* fakeLease =
                    reinterpret_cast<ctxc_lease_t*>(static_cast<uintptr_t>(in_.ConsumeIntegral<uint64_t>()));
                int32_t ok = 0;
                if (ctxc_manager_grow_base_pages(fake, fakeLease, 1, &ok) == CTXC_OK && fake)
                    fail("fake handle accepted", CTXC_OK);
                checkStatus(ctxc_manager_check_invariants(fake));
                checkStatus(ctxc_lease_release(fakeLease));
                break;
            }
            default: {
                ctxc_manager_t* m = managerArg();
                size_t n = 0;
                checkStatus(ctxc_manager_record_count(m, &n));
                checkStatus(ctxc_manager_live_lease_count(m, &n));
                checkStatus(ctxc_manager_metadata_bytes(m, &n));
                break;
            }
        }
    }

    void teardown() {
        if (storeLive_ && ctxc_bookkeeping_store_destroy(store_) != CTXC_OK) fail("destroying a live store", CTXC_OK);
        storeLive_ = false;
        for (LeaseSlot& l : leases_)
            if (l.live) checkStatus(ctxc_lease_destroy(l.handle));
        for (ManagerSlot& m : managers_) {
            if (!m.live) continue;
            size_t count = 0;
            ctxc_debug_manager_records_lru(m.handle, nullptr, 0, &count);
            std::vector<uint64_t> ids(count);
            if (count) ctxc_debug_manager_records_lru(m.handle, ids.data(), count, &count);
            for (uint64_t id : ids)
                if (ctxc_manager_evict_record(m.handle, id) != CTXC_OK)
                    fail("evicting a listed record", CTXC_E_INTERNAL);
            for (int32_t t = 0; t < 4; ++t) {
                int32_t free = 0, capacity = 0;
                ctxc_manager_pool_counts(m.handle, t, &free, &capacity);
                if (free != capacity) fail("a resource leaked (pool not back to capacity after teardown)", CTXC_OK);
            }
            ctxc_status_t const s = ctxc_manager_destroy(m.handle);
            if (s != CTXC_OK) fail("destroy after teardown", s);
        }
    }

    FuzzedDataProvider& in_;
    std::array<ManagerSlot, 2> managers_{};
    std::array<int32_t, 2> pageSize_{{1, 1}};
    std::vector<LeaseSlot> leases_;
    int64_t clock_ = 0;  // the latest retention time set (a manager refuses going back; the fuzzer tries)
    ctxc_bookkeeping_store_t* store_ = nullptr;  // the last store created (stale once destroyed)
    bool storeLive_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(uint8_t const* data, size_t size) {
    FuzzedDataProvider in(data, size);
    Session(in).run();
    return 0;
}
