// The host tier through the C ABI only (include/ctxcache/c/host_tier.h): attach, write-back of what the device
// evicts, an extension after the device hit, metrics, detach; bad arguments answered with a status and a message
// and nothing changed; a manager destroyed with its tier attached takes the tier with it (the sanitizer run proves
// nothing leaks or dangles).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ctxcache.h"

namespace {

ctxc_hash128_t H(uint64_t n) { return ctxc_hash128_t{0x7E4000000000000ull | n, 0x1234000000000000ull ^ n}; }

std::vector<ctxc_hash128_t> Hs(uint64_t first, size_t n) {
    std::vector<ctxc_hash128_t> out;
    for (size_t i = 0; i < n; ++i) out.push_back(H(first + i));
    return out;
}

// draftPages > 0: an EAGLE manager (a draft pool beside the base pool).
ctxc_manager_t* makeManager(int32_t pages, int32_t draftPages = 0) {
    ctxc_manager_options_t options;
    ctxc_manager_options_init(&options);
    options.page_size = 4;
    options.capacities.base_kv_pages = pages;
    options.capacities.draft_kv_pages = draftPages;
    options.max_records = 8;
    ctxc_manager_t* m = nullptr;
    EXPECT_EQ(ctxc_manager_create(&options, &m), CTXC_OK) << ctxc_last_error();
    return m;
}

// Acquire (speculative: the EAGLE acquire), publish and destroy a prompt of hashes.size() full blocks and one more
// token.
void publishPrompt(ctxc_manager_t* m, std::vector<ctxc_hash128_t> const& hashes, bool speculative = false) {
    int32_t const tokens = static_cast<int32_t>(hashes.size()) * 4 + 1;
    ctxc_acquire_result_t r;
    std::memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    ctxc_lease_t* lease = nullptr;
    auto const acquire = speculative ? ctxc_manager_acquire_spec : ctxc_manager_acquire_vanilla;
    ASSERT_EQ(acquire(m, hashes.data(), hashes.size(), tokens, CTXC_LOOKUP_USE_CACHE, &r, &lease), CTXC_OK)
        << ctxc_last_error();
    ASSERT_NE(lease, nullptr);
    ctxc_publish_result_t p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    std::vector<int32_t> ids(static_cast<size_t>(tokens));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(hashes[0].lo % 1000 + i);
    // With tokens (which a manager with KV events on needs; read for nothing otherwise).
    ASSERT_EQ(ctxc_manager_publish_with_tokens(m, lease, hashes.data(), hashes.size(), tokens, ids.data(), ids.size(),
                                               nullptr, &p),
              CTXC_OK)
        << ctxc_last_error();
    ASSERT_EQ(ctxc_lease_destroy(lease), CTXC_OK) << ctxc_last_error();
}

ctxc_host_tier_metrics_t metrics(ctxc_manager_t const* m, int32_t* attached = nullptr) {
    ctxc_host_tier_metrics_t out;
    std::memset(&out, 0, sizeof out);
    out.struct_size = sizeof out;
    int32_t flag = -1;
    EXPECT_EQ(ctxc_manager_host_tier_metrics(m, &flag, &out), CTXC_OK) << ctxc_last_error();
    if (attached) *attached = flag;
    return out;
}

TEST(CApiHostTier, WriteBackThenExtendThenDetach) {
    ctxc_manager_t* m = makeManager(6);
    int32_t attached = -1;
    metrics(m, &attached);
    EXPECT_EQ(attached, 0);
    ctxc_host_tier_options_t options;
    ctxc_host_tier_options_init(&options);
    EXPECT_EQ(options.write_policy, CTXC_HOST_WRITE_BACK);
    options.capacity_pages = 16;
    ASSERT_EQ(ctxc_manager_attach_host_tier(m, &options), CTXC_OK) << ctxc_last_error();
    std::vector<ctxc_hash128_t> const a = Hs(1, 3);
    publishPrompt(m, a);
    publishPrompt(m, Hs(10, 5));  // evicts a: written back to the tier
    ctxc_host_tier_metrics_t x = metrics(m, &attached);
    EXPECT_EQ(attached, 1);
    EXPECT_EQ(x.capacity_pages, 16);
    EXPECT_EQ(x.resident_blocks, 3u);
    EXPECT_EQ(x.written_blocks, 3u);
    int32_t loaded = -1;
    ASSERT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), 13, 0, &loaded), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(loaded, 3);
    ASSERT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), 12, 1, &loaded), CTXC_OK);
    EXPECT_EQ(loaded, 1);  // blocks 1 and 2 after the device's one; the page-aligned prompt keeps its last
    EXPECT_EQ(ctxc_manager_host_tier_check_invariants(m), CTXC_OK) << ctxc_last_error();
    x = metrics(m);
    EXPECT_EQ(x.loaded_blocks, 4u);
    EXPECT_EQ(x.extend_calls, 2u);
    EXPECT_GT(x.metadata_bytes, 0u);
    ASSERT_EQ(ctxc_manager_host_tier_clear(m), CTXC_OK);
    EXPECT_EQ(metrics(m).resident_blocks, 0u);
    ASSERT_EQ(ctxc_manager_detach_host_tier(m), CTXC_OK);
    metrics(m, &attached);
    EXPECT_EQ(attached, 0);
    EXPECT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), 13, 0, &loaded), CTXC_E_CONTRACT);
    EXPECT_EQ(loaded, 0);
    EXPECT_NE(std::string(ctxc_last_error()).find("no host tier"), std::string::npos);
    EXPECT_EQ(ctxc_manager_check_invariants(m), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

// An EAGLE manager's tier (a manager with draft pages) extends a speculative hit one block short of its run: the
// last slot gives the draft page of the block before it, and the prefill replays its block. A manager without
// draft pages refuses the call with CTXC_E_CONTRACT.
TEST(CApiHostTier, AnEagleManagersTierExtendsSpeculativeHits) {
    ctxc_manager_t* m = makeManager(6, 6);
    ASSERT_NE(m, nullptr);
    ctxc_host_tier_options_t tierOptions;
    ctxc_host_tier_options_init(&tierOptions);
    tierOptions.capacity_pages = 16;
    ASSERT_EQ(ctxc_manager_attach_host_tier(m, &tierOptions), CTXC_OK) << ctxc_last_error();
    std::vector<ctxc_hash128_t> const a = Hs(1, 3);
    publishPrompt(m, a, true);  // 13 tokens
    {  // a cold prompt of six pages: the device drops a, written back
        ctxc_acquire_result_t r;
        std::memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        ctxc_lease_t* lease = nullptr;
        ASSERT_EQ(ctxc_manager_acquire_spec(m, nullptr, 0, 24, CTXC_LOOKUP_USE_CACHE, &r, &lease), CTXC_OK)
            << ctxc_last_error();
        ASSERT_NE(lease, nullptr);
        ASSERT_EQ(ctxc_lease_destroy(lease), CTXC_OK);
    }
    EXPECT_EQ(metrics(m).written_blocks, 3u);
    int32_t loaded = -1;
    ASSERT_EQ(ctxc_manager_host_tier_extend_spec_hit(m, a.data(), a.size(), 13, 0, &loaded), CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(loaded, 2);  // three slots, two blocks
    ASSERT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), 13, 0, &loaded), CTXC_OK);
    EXPECT_EQ(loaded, 3);  // the vanilla extension of the same run
    ctxc_host_tier_metrics_t const before = metrics(m);
    EXPECT_EQ(ctxc_manager_host_tier_extend_spec_hit(m, a.data(), a.size(), 13, 4, &loaded), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(loaded, 0);
    EXPECT_EQ(ctxc_manager_host_tier_extend_spec_hit(m, a.data(), a.size(), 13, 0, nullptr), CTXC_E_INVALID_ARGUMENT);
    ctxc_host_tier_metrics_t const after = metrics(m);
    EXPECT_EQ(std::memcmp(&before, &after, sizeof before), 0);
    EXPECT_EQ(ctxc_manager_host_tier_check_invariants(m), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
    ctxc_manager_t* plain = makeManager(6);
    ASSERT_EQ(ctxc_manager_attach_host_tier(plain, &tierOptions), CTXC_OK);
    EXPECT_EQ(ctxc_manager_host_tier_extend_spec_hit(plain, a.data(), a.size(), 13, 0, &loaded), CTXC_E_CONTRACT);
    EXPECT_NE(std::string(ctxc_last_error()).find("draft pages"), std::string::npos);
    EXPECT_EQ(ctxc_manager_destroy(plain), CTXC_OK);
}

TEST(CApiHostTier, BadArgumentsChangeNothing) {
    ctxc_manager_t* m = makeManager(6);
    ctxc_host_tier_options_t options;
    ctxc_host_tier_options_init(&options);
    options.capacity_pages = 0;
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, &options), CTXC_E_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ctxc_last_error()).find("capacity_pages"), std::string::npos);
    options.capacity_pages = 8;
    options.write_policy = 9;
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, &options), CTXC_E_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ctxc_last_error()).find("write_policy"), std::string::npos);
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, nullptr), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_attach_host_tier(nullptr, &options), CTXC_E_INVALID_HANDLE);
    int32_t attached = -1;
    metrics(m, &attached);
    EXPECT_EQ(attached, 0);
    options.write_policy = CTXC_HOST_WRITE_THROUGH;
    ASSERT_EQ(ctxc_manager_attach_host_tier(m, &options), CTXC_OK);
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, &options), CTXC_E_CONTRACT);  // one per manager
    publishPrompt(m, Hs(1, 2));
    ctxc_host_tier_metrics_t const before = metrics(m);
    std::vector<ctxc_hash128_t> const a = Hs(1, 2);
    int32_t loaded = -1;
    EXPECT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), 9, 3, &loaded), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), -1, 0, &loaded), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_host_tier_extend_hit(m, nullptr, 2, 9, 0, &loaded), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), 9, 0, nullptr), CTXC_E_INVALID_ARGUMENT);
    ctxc_host_tier_metrics_t small;
    std::memset(&small, 0, sizeof small);
    small.struct_size = 4;
    EXPECT_EQ(ctxc_manager_host_tier_metrics(m, &attached, &small), CTXC_E_INVALID_ARGUMENT);
    ctxc_host_tier_metrics_t const after = metrics(m);
    EXPECT_EQ(std::memcmp(&before, &after, sizeof before), 0);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);  // the tier goes with its manager
    EXPECT_EQ(ctxc_manager_host_tier_extend_hit(m, a.data(), a.size(), 9, 0, &loaded), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_manager_host_tier_metrics(m, &attached, nullptr), CTXC_E_INVALID_HANDLE);
}

// Drained events encode with their own media (ctxc_kv_events_encode_media): a device event carries the medium asked
// for, a host tier's "CPU"; ctxc_kv_events_encode writes every one as the device's; a medium that is not a
// CTXC_KV_MEDIUM_* value is refused.
TEST(CApiHostTier, DrainedEventsEncodeWithTheirOwnMedia) {
    if (!ctxc_kv_event_publisher_available()) GTEST_SKIP() << "built without the ZMQ publisher (libzmq, msgpack)";
    ctxc_manager_t* m = makeManager(6);
    ASSERT_EQ(ctxc_kv_events_enable(m, 1000), CTXC_OK) << ctxc_last_error();
    ctxc_host_tier_options_t options;
    ctxc_host_tier_options_init(&options);
    options.capacity_pages = 16;
    ASSERT_EQ(ctxc_manager_attach_host_tier(m, &options), CTXC_OK) << ctxc_last_error();
    publishPrompt(m, Hs(1, 3));
    publishPrompt(m, Hs(10, 5));  // evicts the first prompt: the device removes it, the tier writes it
    ASSERT_EQ(ctxc_manager_host_tier_clear(m), CTXC_OK) << ctxc_last_error();  // the tier removes it
    ctxc_kv_event_t const* events = nullptr;
    size_t count = 0;
    ASSERT_EQ(ctxc_kv_events_drain(m, &events, &count, nullptr), CTXC_OK) << ctxc_last_error();
    uint8_t const* media = nullptr;
    size_t mediaCount = 0;
    ASSERT_EQ(ctxc_kv_events_drained_media(m, &media, &mediaCount), CTXC_OK) << ctxc_last_error();
    ASSERT_EQ(mediaCount, count);
    size_t host = 0, device = 0;
    for (size_t i = 0; i < count; ++i) {
        if (events[i].type == CTXC_KV_EVENT_ALL_BLOCKS_CLEARED) continue;
        (media[i] == CTXC_KV_MEDIUM_HOST ? host : device) += 1;
    }
    ASSERT_GE(host, 1u);  // at least the tier's BlockRemoved
    ASSERT_GE(device, 3u);  // two prompts stored, one removed
    auto encode = [&](uint8_t const* with) {
        size_t size = 0;
        EXPECT_EQ(ctxc_kv_events_encode_media(events, with, count, 4, 0.0, -1, "HBM", 0, nullptr, 0, &size),
                  CTXC_E_BUFFER_TOO_SMALL);
        std::string bytes(size, '\0');
        EXPECT_EQ(ctxc_kv_events_encode_media(events, with, count, 4, 0.0, -1, "HBM", 0,
                                              reinterpret_cast<uint8_t*>(bytes.data()), size, &size),
                  CTXC_OK)
            << ctxc_last_error();
        return bytes;
    };
    auto occurrences = [](std::string const& bytes, char const* fixstr3) {  // a msgpack fixstr of 3 characters
        std::string const needle = std::string("\xa3") + fixstr3;
        size_t n = 0;
        for (size_t at = bytes.find(needle); at != std::string::npos; at = bytes.find(needle, at + 1)) ++n;
        return n;
    };
    std::string const mixed = encode(media);
    EXPECT_EQ(occurrences(mixed, "CPU"), host);
    EXPECT_EQ(occurrences(mixed, "HBM"), device);
    std::string const flat = encode(nullptr);  // as ctxc_kv_events_encode: all on the device
    EXPECT_EQ(occurrences(flat, "CPU"), 0u);
    EXPECT_EQ(occurrences(flat, "HBM"), host + device);
    size_t size = 0;
    EXPECT_EQ(ctxc_kv_events_encode(events, count, 4, 0.0, -1, "HBM", 0, nullptr, 0, &size), CTXC_E_BUFFER_TOO_SMALL);
    EXPECT_EQ(size, flat.size());
    std::vector<uint8_t> bad(media, media + count);
    bad[count - 1] = 7;
    size = 0;
    EXPECT_EQ(ctxc_kv_events_encode_media(events, bad.data(), count, 4, 0.0, -1, "HBM", 0, nullptr, 0, &size),
              CTXC_E_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ctxc_last_error()).find("CTXC_KV_MEDIUM_"), std::string::npos) << ctxc_last_error();
    EXPECT_EQ(size, 0u);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

// ---- a bookkeeping store shared by two managers (include/ctxcache/c/store.h) ------------------------------------

ctxc_bookkeeping_store_t* makeStore(int32_t pages) {
    ctxc_bookkeeping_store_options_t options;
    ctxc_bookkeeping_store_options_init(&options);
    options.capacity_pages = pages;
    ctxc_bookkeeping_store_t* s = nullptr;
    EXPECT_EQ(ctxc_bookkeeping_store_create(&options, &s), CTXC_OK) << ctxc_last_error();
    return s;
}

ctxc_bookkeeping_store_metrics_t storeMetrics(ctxc_bookkeeping_store_t const* s) {
    ctxc_bookkeeping_store_metrics_t out;
    std::memset(&out, 0, sizeof out);
    out.struct_size = sizeof out;
    EXPECT_EQ(ctxc_bookkeeping_store_metrics(s, &out), CTXC_OK) << ctxc_last_error();
    return out;
}

void attachWithStore(ctxc_manager_t* m, ctxc_bookkeeping_store_t* s, int32_t pages) {
    ctxc_host_tier_options_t options;
    ctxc_host_tier_options_init(&options);
    EXPECT_EQ(options.store, nullptr);
    options.capacity_pages = pages;
    options.store = s;
    ASSERT_EQ(ctxc_manager_attach_host_tier(m, &options), CTXC_OK) << ctxc_last_error();
}

TEST(CApiBookkeepingStore, TwoManagersShareOneStore) {
    ctxc_bookkeeping_store_t* s = makeStore(32);
    ctxc_manager_t* a = makeManager(8);
    ctxc_manager_t* b = makeManager(8);
    attachWithStore(a, s, 0);  // no host slots: the store only
    attachWithStore(b, s, 4);
    std::vector<ctxc_hash128_t> const prompt = Hs(1, 3);
    publishPrompt(a, prompt);
    ctxc_bookkeeping_store_metrics_t m = storeMetrics(s);
    EXPECT_EQ(m.capacity_pages, 32);
    EXPECT_EQ(m.written_blocks, 3u);
    EXPECT_EQ(m.resident_blocks, 3u);
    size_t held = 0;
    ASSERT_EQ(ctxc_bookkeeping_store_probe(s, prompt.data(), prompt.size(), &held), CTXC_OK);
    EXPECT_EQ(held, 3u);
    int32_t host = -1, fromStore = -1;
    ASSERT_EQ(ctxc_manager_host_tier_extend_hit_by_tier(b, prompt.data(), prompt.size(), 13, 0, &host, &fromStore),
              CTXC_OK)
        << ctxc_last_error();
    EXPECT_EQ(host, 0);
    EXPECT_EQ(fromStore, 3);
    int32_t loaded = -1;  // the plain call counts both tiers
    ASSERT_EQ(ctxc_manager_host_tier_extend_hit(b, prompt.data(), prompt.size(), 13, 1, &loaded), CTXC_OK);
    EXPECT_EQ(loaded, 2);
    ctxc_host_tier_metrics_t const tb = metrics(b);
    EXPECT_EQ(tb.store_loaded_blocks, 5u);
    EXPECT_EQ(tb.store_hit_requests, 2u);
    EXPECT_EQ(tb.loaded_blocks, 0u);
    EXPECT_EQ(storeMetrics(s).hit_blocks, 5u);
    EXPECT_EQ(ctxc_bookkeeping_store_check_invariants(s), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_manager_host_tier_check_invariants(b), CTXC_OK) << ctxc_last_error();
    // The store's handle may go first: the tiers keep the store.
    EXPECT_EQ(ctxc_bookkeeping_store_destroy(s), CTXC_OK);
    EXPECT_EQ(ctxc_bookkeeping_store_check_invariants(s), CTXC_E_INVALID_HANDLE);
    publishPrompt(a, Hs(20, 2));
    ASSERT_EQ(ctxc_manager_host_tier_extend_hit_by_tier(b, Hs(20, 2).data(), 2, 9, 0, &host, &fromStore), CTXC_OK);
    EXPECT_EQ(fromStore, 2);
    EXPECT_EQ(ctxc_manager_destroy(a), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(b), CTXC_OK);
}

TEST(CApiBookkeepingStore, BadArgumentsAreRefusedWithNothingChanged) {
    ctxc_bookkeeping_store_options_t options;
    ctxc_bookkeeping_store_options_init(&options);
    ctxc_bookkeeping_store_t* s = reinterpret_cast<ctxc_bookkeeping_store_t*>(0x1);
    options.capacity_pages = 0;
    EXPECT_EQ(ctxc_bookkeeping_store_create(&options, &s), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    EXPECT_NE(std::string(ctxc_last_error()).find("capacity_pages"), std::string::npos);
    EXPECT_EQ(ctxc_bookkeeping_store_create(nullptr, &s), CTXC_E_INVALID_ARGUMENT);
    s = makeStore(4);
    size_t held = 7;
    EXPECT_EQ(ctxc_bookkeeping_store_probe(s, nullptr, 2, &held), CTXC_E_INVALID_ARGUMENT);
    EXPECT_EQ(ctxc_bookkeeping_store_probe(s, nullptr, 0, nullptr), CTXC_E_INVALID_ARGUMENT);
    ctxc_bookkeeping_store_metrics_t small;
    std::memset(&small, 0, sizeof small);
    small.struct_size = 4;
    EXPECT_EQ(ctxc_bookkeeping_store_metrics(s, &small), CTXC_E_INVALID_ARGUMENT);
    ctxc_manager_t* m = makeManager(8);
    ctxc_host_tier_options_t tier;
    ctxc_host_tier_options_init(&tier);
    tier.capacity_pages = 0;  // 0 pages without a store
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, &tier), CTXC_E_INVALID_ARGUMENT);
    tier.capacity_pages = -1;
    tier.store = s;
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, &tier), CTXC_E_INVALID_ARGUMENT);
    tier.capacity_pages = 0;
    tier.store = reinterpret_cast<ctxc_bookkeeping_store_t*>(0x12345600D4ull);  // not a live store
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, &tier), CTXC_E_INVALID_HANDLE);
    int32_t attached = -1;
    metrics(m, &attached);
    EXPECT_EQ(attached, 0);  // nothing attached by a refusal
    EXPECT_EQ(ctxc_bookkeeping_store_destroy(s), CTXC_OK);
    tier.store = s;  // destroyed
    EXPECT_EQ(ctxc_manager_attach_host_tier(m, &tier), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_bookkeeping_store_destroy(s), CTXC_E_INVALID_HANDLE);
    EXPECT_EQ(ctxc_bookkeeping_store_destroy(nullptr), CTXC_OK);
    EXPECT_EQ(ctxc_manager_destroy(m), CTXC_OK);
}

}  // namespace
