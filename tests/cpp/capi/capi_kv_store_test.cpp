// A byte store under the host tier through the C ABI only (include/ctxcache/c/store.h): two reference engines (two
// replicas) share one store; the second, started empty, reuses what the first computed and its outputs (tokens and
// the SHA-256 of every byte of KV) equal a cold run's. A runtime's own store through the callback table: keys that
// name the layout and the block, one result per key, `release` once when the last holder lets go. Bad options are
// refused with a status and a message, nothing created.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ctxcache.h"

namespace {

struct Served {
    std::vector<ctxc_sim_output_t> outputs;
    std::vector<std::vector<int32_t>> generated;
};

// Prompts of 120 tokens sharing their first 64 (four pages of 16), each with its own tail.
std::vector<std::vector<int32_t>> prompts(int n, int32_t salt) {
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < n; ++i) {
        std::vector<int32_t> p;
        for (int32_t t = 0; t < 64; ++t) p.push_back(1000 + t * 7 + salt);
        for (int32_t t = 0; t < 56; ++t) p.push_back(5000 + i * 131 + t);
        out.push_back(p);
    }
    return out;
}

Served serve(ctxc_sim_engine_t* engine, std::vector<std::vector<int32_t>> const& ps, int32_t cold) {
    std::vector<ctxc_sim_request_t> requests(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
        std::memset(&requests[i], 0, sizeof requests[i]);
        requests[i].tokens = ps[i].data();
        requests[i].token_count = ps[i].size();
        requests[i].max_new_tokens = 4;
    }
    ctxc_sim_results_t* results = nullptr;
    Served s;
    EXPECT_EQ(ctxc_sim_engine_serve(engine, requests.data(), requests.size(), cold, &results), CTXC_OK)
        << ctxc_last_error();
    if (!results) return s;
    for (size_t i = 0; i < ps.size(); ++i) {
        ctxc_sim_output_t o;
        std::memset(&o, 0, sizeof o);
        o.struct_size = sizeof o;
        EXPECT_EQ(ctxc_sim_results_output(results, i, &o), CTXC_OK) << ctxc_last_error();
        s.outputs.push_back(o);
        int32_t const* tokens = nullptr;
        size_t count = 0;
        EXPECT_EQ(ctxc_sim_results_generated(results, i, &tokens, &count), CTXC_OK);
        s.generated.emplace_back(tokens, tokens + count);
    }
    EXPECT_EQ(ctxc_sim_results_destroy(results), CTXC_OK);
    return s;
}

ctxc_context_cache_metrics_t metrics(ctxc_sim_engine_t const* engine) {
    ctxc_context_cache_metrics_t m;
    std::memset(&m, 0, sizeof m);
    m.struct_size = sizeof m;
    EXPECT_EQ(ctxc_sim_engine_metrics(engine, &m), CTXC_OK) << ctxc_last_error();
    return m;
}

ctxc_sim_engine_t* makeEngine(ctxc_kv_store_t* store, int32_t hostPages = 64) {
    ctxc_sim_engine_options_t o;
    ctxc_sim_engine_options_init(&o);
    o.base_pages = 24;
    o.host_tier_pages = hostPages;
    o.host_write_policy = CTXC_HOST_WRITE_THROUGH;
    ctxc_store_link_options_t link;
    ctxc_store_link_options_init(&link);
    link.store = store;
    link.min_ask_blocks = 1;
    link.load_deadline_us = 2'000'000;  // generous: this test is about bytes, not deadlines
    o.host_store = store ? &link : nullptr;
    ctxc_sim_engine_t* engine = nullptr;
    EXPECT_EQ(ctxc_sim_engine_create(&o, &engine), CTXC_OK) << ctxc_last_error();
    return engine;
}

void expectEqual(Served const& got, Served const& cold) {
    ASSERT_EQ(got.outputs.size(), cold.outputs.size());
    for (size_t i = 0; i < got.outputs.size(); ++i) {
        EXPECT_EQ(std::memcmp(got.outputs[i].state_digest, cold.outputs[i].state_digest, 32), 0) << "request " << i;
        EXPECT_EQ(got.generated[i], cold.generated[i]) << "request " << i;
    }
}

TEST(CApiKvStore, ASecondReplicaReusesWhatTheFirstComputedAndMatchesAColdRun) {
    ctxc_kv_store_t* store = nullptr;
    ASSERT_EQ(ctxc_memory_kv_store_create(0, &store), CTXC_OK) << ctxc_last_error();
    ctxc_sim_engine_t* a = makeEngine(store);
    ctxc_sim_engine_t* b = makeEngine(store);
    ASSERT_EQ(ctxc_kv_store_destroy(store), CTXC_OK);  // the engines keep it
    std::vector<std::vector<int32_t>> const ps = prompts(3, 0);
    serve(a, ps, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // A's put batches reach the store
    Served const got = serve(b, ps, 0);
    ctxc_context_cache_metrics_t const mb = metrics(b);
    // B's device and host were empty: its first request's full blocks come from the store (the prompt's last
    // token stays for the prefill), and later ones hit B's own device.
    EXPECT_GE(mb.store_loaded_tokens, 112u) << "7 full blocks of 16 of the first prompt";
    EXPECT_EQ(mb.store_rejected_loads, 0u);
    EXPECT_EQ(mb.store_failed_loads, 0u);
    EXPECT_GE(mb.reused_tokens, mb.store_loaded_tokens + mb.host_loaded_tokens);  // the device's part on top
    serve(a, prompts(1, 9), 0);             // A's next call applies its put completions
    EXPECT_GE(metrics(a).store_put_blocks, 7u);
    Served const cold = serve(b, ps, 1);
    expectEqual(got, cold);
    EXPECT_EQ(ctxc_sim_engine_check_invariants(b), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_sim_engine_destroy(a), CTXC_OK);
    EXPECT_EQ(ctxc_sim_engine_destroy(b), CTXC_OK);
}

// A runtime's store: a map behind the callback table.
struct MapStore {
    std::mutex mutex;
    std::map<std::string, std::vector<unsigned char>> objects;
    std::vector<std::string> keysSeen;
    std::vector<std::pair<uintptr_t, size_t>> putRanges;  // where each put's bytes were
    int releases = 0;
    int exists = 0, puts = 0, gets = 0;
};

void mapExist(void* user, char const* const* keys, size_t count, int64_t, int64_t* results) {
    auto& s = *static_cast<MapStore*>(user);
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.exists;
    for (size_t i = 0; i < count; ++i) results[i] = s.objects.count(keys[i]) ? 1 : 0;
}
void mapPut(void* user, char const* const* keys, void const* const* data, size_t const* sizes, size_t count, int64_t,
            int64_t* results) {
    auto& s = *static_cast<MapStore*>(user);
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.puts;
    for (size_t i = 0; i < count; ++i) {
        s.keysSeen.emplace_back(keys[i]);
        s.putRanges.emplace_back(reinterpret_cast<uintptr_t>(data[i]), sizes[i]);
        auto const* p = static_cast<unsigned char const*>(data[i]);
        s.objects.emplace(keys[i], std::vector<unsigned char>(p, p + sizes[i]));  // the first value stays
        results[i] = 0;
    }
}
void mapGet(void* user, char const* const* keys, void* const* buffers, size_t const* capacities, size_t count, int64_t,
            int64_t* results) {
    auto& s = *static_cast<MapStore*>(user);
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.gets;
    for (size_t i = 0; i < count; ++i) {
        auto it = s.objects.find(keys[i]);
        if (it == s.objects.end()) {
            results[i] = CTXC_KV_STORE_NOT_FOUND;
        } else if (it->second.size() > capacities[i]) {
            results[i] = CTXC_KV_STORE_TOO_SMALL;
        } else {
            std::memcpy(buffers[i], it->second.data(), it->second.size());
            results[i] = static_cast<int64_t>(it->second.size());
        }
    }
}
void mapRelease(void* user) { ++static_cast<MapStore*>(user)->releases; }

TEST(CApiKvStore, ARuntimesOwnStoreThroughTheCallbackTable) {
    MapStore map;
    ctxc_kv_store_callbacks_t c;
    std::memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.user = &map;
    c.exist = mapExist;
    c.put = mapPut;
    c.get = mapGet;
    c.release = mapRelease;
    ctxc_kv_store_t* store = nullptr;
    ASSERT_EQ(ctxc_kv_store_create(&c, &store), CTXC_OK) << ctxc_last_error();
    ctxc_sim_engine_t* a = makeEngine(store);
    void* tierData = nullptr;
    size_t tierBytes = 0;
    ASSERT_EQ(ctxc_sim_engine_host_tier_memory(a, &tierData, &tierBytes), CTXC_OK) << ctxc_last_error();
    ASSERT_NE(tierData, nullptr);
    EXPECT_EQ(tierBytes % 64u, 0u);
    std::vector<std::vector<int32_t>> const ps = prompts(2, 3);
    serve(a, ps, 0);
    // Applied without another request: poll until no batch is at the store (bounded).
    size_t applied = 0, inFlight = 1;
    for (int i = 0; i < 400 && inFlight > 0; ++i) {
        size_t now = 0;
        ASSERT_EQ(ctxc_sim_engine_poll_store(a, &now, &inFlight), CTXC_OK) << ctxc_last_error();
        applied += now;
        if (inFlight) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(inFlight, 0u);
    EXPECT_GT(applied, 0u);
    EXPECT_GE(metrics(a).store_put_blocks, 7u);  // counted without a further request
    EXPECT_EQ(ctxc_sim_engine_destroy(a), CTXC_OK);  // its worker stops; its puts were sent
    EXPECT_EQ(map.releases, 0);                      // the handle still holds the store
    {
        std::lock_guard<std::mutex> lock(map.mutex);
        ASSERT_FALSE(map.keysSeen.empty());
        // model@tp_rank:0@pp_rank:0@kv:<dtype>:p<page>:l<layers>:<digest>@<hash>@<32 hex digits>
        std::string const& k = map.keysSeen.front();
        EXPECT_EQ(k.rfind("ctxcache@tp_rank:0@pp_rank:0@kv:fp16:p16:l2:", 0), 0u) << k;
        EXPECT_NE(k.find("@sha256@"), std::string::npos) << k;
        EXPECT_EQ(k.size() - k.rfind('@') - 1, 32u) << k;
        // Every put came straight from the tier's slots (what a zero-copy store registers), never a copy.
        uintptr_t const begin = reinterpret_cast<uintptr_t>(tierData);
        for (auto const& [at, size] : map.putRanges) {
            EXPECT_GE(at, begin);
            EXPECT_LE(at + size, begin + tierBytes);
        }
    }
    ctxc_sim_engine_t* b = makeEngine(store);
    Served const got = serve(b, ps, 0);
    EXPECT_GE(metrics(b).store_loaded_tokens, 112u);
    EXPECT_GT(map.gets, 0);
    expectEqual(got, serve(b, ps, 1));
    EXPECT_EQ(ctxc_kv_store_destroy(store), CTXC_OK);
    EXPECT_EQ(map.releases, 0);  // B still holds it
    EXPECT_EQ(ctxc_sim_engine_destroy(b), CTXC_OK);
    EXPECT_EQ(map.releases, 1);
}

TEST(CApiKvStore, PollAndTierMemoryWithoutAStoreOrATier) {
    ctxc_sim_engine_options_t o;
    ctxc_sim_engine_options_init(&o);
    o.base_pages = 24;
    ctxc_sim_engine_t* plain = nullptr;
    ASSERT_EQ(ctxc_sim_engine_create(&o, &plain), CTXC_OK) << ctxc_last_error();
    size_t applied = 7, inFlight = 7;
    EXPECT_EQ(ctxc_sim_engine_poll_store(plain, &applied, &inFlight), CTXC_OK);
    EXPECT_EQ(applied, 0u);
    EXPECT_EQ(inFlight, 0u);
    EXPECT_EQ(ctxc_sim_engine_poll_store(plain, &applied, nullptr), CTXC_OK);  // in flight is optional
    void* data = &o;
    size_t bytes = 7;
    EXPECT_EQ(ctxc_sim_engine_host_tier_memory(plain, &data, &bytes), CTXC_OK);
    EXPECT_EQ(data, nullptr);
    EXPECT_EQ(bytes, 0u);
    EXPECT_EQ(ctxc_sim_engine_poll_store(plain, nullptr, &inFlight), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_sim_engine_host_tier_memory(plain, nullptr, &bytes), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_sim_engine_host_tier_memory(plain, &data, nullptr), CTXC_E_INVALID_ARGUMENT);
    ctxc_sim_engine_t* tiered = makeEngine(nullptr, 32);  // a tier, no store
    EXPECT_EQ(ctxc_sim_engine_host_tier_memory(tiered, &data, &bytes), CTXC_OK);
    EXPECT_NE(data, nullptr);
    EXPECT_EQ(bytes, 32u * (2 * 2 * 2 * 8 * 16 * 2 + 256));  // 32 slots: header + every layer's K and V of a page
    EXPECT_EQ(ctxc_sim_engine_poll_store(tiered, &applied, &inFlight), CTXC_OK);
    EXPECT_EQ(inFlight, 0u);
    EXPECT_EQ(ctxc_sim_engine_destroy(tiered), CTXC_OK);
    EXPECT_EQ(ctxc_sim_engine_destroy(plain), CTXC_OK);
    EXPECT_EQ(ctxc_sim_engine_poll_store(plain, &applied, &inFlight), CTXC_E_INVALID_HANDLE);  // a stale handle
}

TEST(CApiKvStore, BadOptionsAreRefusedWithNothingCreated) {
    ctxc_kv_store_callbacks_t c;
    std::memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    ctxc_kv_store_t* store = reinterpret_cast<ctxc_kv_store_t*>(1);
    EXPECT_EQ(ctxc_kv_store_create(&c, &store), CTXC_E_INVALID_ARGUMENT);  // no callbacks
    EXPECT_EQ(store, nullptr);
    EXPECT_NE(std::strstr(ctxc_last_error(), "exist, put and get"), nullptr) << ctxc_last_error();
    ASSERT_EQ(ctxc_memory_kv_store_create(0, &store), CTXC_OK);

    ctxc_sim_engine_options_t o;
    ctxc_sim_engine_options_init(&o);
    o.base_pages = 24;
    ctxc_store_link_options_t link;
    ctxc_store_link_options_init(&link);
    link.store = store;
    o.host_store = &link;
    ctxc_sim_engine_t* engine = nullptr;
    EXPECT_EQ(ctxc_sim_engine_create(&o, &engine), CTXC_E_INVALID_ARGUMENT);  // no host tier
    EXPECT_NE(std::strstr(ctxc_last_error(), "host_tier_pages"), nullptr) << ctxc_last_error();
    o.host_tier_pages = 16;
    link.policy = 7;
    EXPECT_EQ(ctxc_sim_engine_create(&o, &engine), CTXC_E_INVALID_ARGUMENT);
    link.policy = CTXC_STORE_LOAD_WAIT;
    link.put_deadline_us = 0;
    EXPECT_EQ(ctxc_sim_engine_create(&o, &engine), CTXC_E_INVALID_ARGUMENT);
    link.put_deadline_us = 1000;
    link.model = "a@b";
    EXPECT_EQ(ctxc_sim_engine_create(&o, &engine), CTXC_E_INVALID_ARGUMENT);
    link.model = nullptr;
    EXPECT_EQ(engine, nullptr);
    ASSERT_EQ(ctxc_kv_store_destroy(store), CTXC_OK);
    EXPECT_EQ(ctxc_sim_engine_create(&o, &engine), CTXC_E_INVALID_HANDLE);  // a destroyed store
    EXPECT_EQ(ctxc_kv_store_destroy(store), CTXC_E_INVALID_HANDLE);
}

}  // namespace
