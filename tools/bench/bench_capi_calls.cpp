// bench_capi_calls: what one request's calls into the C ABI cost from C, the floor under the Python package's
// per-call figures (`ctxcache bench --calls`, python/ctxcache/bench/manager.py: call_overhead, whose loop this one
// mirrors call for call). tools/bench_manager runs both and reports Python's overhead per call as the difference.
//
//   bench_capi_calls [--page-size P] [--blocks N] [--batches K] [--batch-size B] [--key STRING]
//
// The request: N full blocks of P tokens (token i = i), hashed with the keyed SHA-256 hasher (the benchmark key),
// on a manager of page size P with 4096 base pages that already holds the prompt's record, so that every acquire
// hits (it binds N - 1 blocks: full-input rewind recomputes the last). Per request, each timed on its own:
//   hash_full_blocks  ctxc_hash_full_blocks(hasher, tokens, N * P, P, ...) into an N-hash buffer
//   acquire_vanilla   ctxc_manager_acquire_vanilla(manager, hashes, N, N * P, USE_CACHE, &result, &lease)
//   grow_base_pages   ctxc_manager_grow_base_pages(manager, lease, 2, &ok)
//   publish           ctxc_manager_publish_with_tokens(manager, lease, hashes, N, N * P, NULL, 0, NULL, &published)
//   lease_close       ctxc_lease_destroy(lease)
// Figures: per call, the mean over a batch of B requests minus the clock's own cost (an empty interval, measured
// in the same batch), then the median over K batches (after two warm-up batches). Prints one JSON object.
// Every request is checked (a hit reusing (N - 1) * P tokens, a grow that succeeds, an existing record): a
// figure of a request that went another way would measure something else, so the program exits 1 instead.
//
// Links the shared library (the C ABI only), like any C caller.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ctxcache.h"

namespace {

[[noreturn]] void fail(std::string const& why) {
    std::fprintf(stderr, "bench_capi_calls: %s\n", why.c_str());
    std::exit(1);
}

void ok(ctxc_status_t status, char const* what) {
    if (status != CTXC_OK) fail(std::string(what) + ": " + ctxc_last_error());
}

int64_t now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t const n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

constexpr char const* kOps[] = {"hash_full_blocks", "acquire_vanilla", "grow_base_pages", "publish", "lease_close"};
constexpr int kOpCount = 5;

}  // namespace

int main(int argc, char** argv) {
    int32_t pageSize = 16;
    int32_t blocks = 2;
    int batches = 40;
    int batchSize = 500;
    std::string key = "ctxcache-bench-key";
    for (int i = 1; i < argc; ++i) {
        std::string const a = argv[i];
        auto value = [&]() -> long {
            if (i + 1 >= argc) fail(a + " needs a value");
            return std::strtol(argv[++i], nullptr, 10);
        };
        if (a == "--page-size") pageSize = static_cast<int32_t>(value());
        else if (a == "--blocks") blocks = static_cast<int32_t>(value());
        else if (a == "--batches") batches = static_cast<int>(value());
        else if (a == "--batch-size") batchSize = static_cast<int>(value());
        else if (a == "--key") {
            if (i + 1 >= argc) fail("--key needs a value");
            key = argv[++i];
        } else if (a == "-h" || a == "--help") {
            std::puts("bench_capi_calls [--page-size P] [--blocks N] [--batches K] [--batch-size B] [--key STRING]");
            return 0;
        } else fail("unknown argument " + a);
    }
    if (pageSize <= 0 || blocks < 2 || blocks > 1024 || batches <= 0 || batchSize <= 0)
        fail("need --page-size > 0, 2 <= --blocks <= 1024, --batches > 0, --batch-size > 0");

    int32_t const tokenCount = blocks * pageSize;
    std::vector<int32_t> tokens(static_cast<size_t>(tokenCount));
    for (int32_t i = 0; i < tokenCount; ++i) tokens[static_cast<size_t>(i)] = i;
    std::vector<ctxc_hash128_t> hashes(static_cast<size_t>(blocks)), scratch(static_cast<size_t>(blocks));
    size_t hashCount = 0;

    ctxc_hasher_options_t hasherOptions;
    ctxc_hasher_options_init(&hasherOptions);
    hasherOptions.key = reinterpret_cast<uint8_t const*>(key.data());
    hasherOptions.key_length = key.size();
    ctxc_hasher_t* hasher = nullptr;
    ok(ctxc_hasher_create(&hasherOptions, &hasher), "ctxc_hasher_create");
    ok(ctxc_hash_full_blocks(hasher, tokens.data(), tokens.size(), pageSize, nullptr, 0, nullptr, hashes.data(),
                             hashes.size(), &hashCount),
       "ctxc_hash_full_blocks");

    ctxc_manager_options_t options;
    ctxc_manager_options_init(&options);
    options.page_size = pageSize;
    options.capacities.base_kv_pages = 4096;
    ctxc_manager_t* manager = nullptr;
    ok(ctxc_manager_create(&options, &manager), "ctxc_manager_create");

    ctxc_acquire_result_t result{};
    result.struct_size = sizeof result;
    ctxc_publish_result_t published{};
    published.struct_size = sizeof published;
    ctxc_lease_t* lease = nullptr;
    int32_t grown = 0;
    // The prompt's record, so that every timed acquire hits.
    ok(ctxc_manager_acquire_vanilla(manager, hashes.data(), hashes.size(), tokenCount, CTXC_LOOKUP_USE_CACHE, &result,
                                    &lease),
       "ctxc_manager_acquire_vanilla");
    ok(ctxc_manager_publish_with_tokens(manager, lease, hashes.data(), hashes.size(), tokenCount, nullptr, 0, nullptr,
                                        &published),
       "ctxc_manager_publish_with_tokens");
    ok(ctxc_lease_destroy(lease), "ctxc_lease_destroy");

    std::vector<double> perBatch[kOpCount];
    std::vector<double> clockCost;
    int32_t const expectedReuse = (blocks - 1) * pageSize;
    for (int batch = 0; batch < batches + 2; ++batch) {
        int64_t sum[kOpCount] = {};
        int64_t empty = 0;
        for (int i = 0; i < batchSize; ++i) {
            int64_t const t0 = now();
            ctxc_status_t const s0 = ctxc_hash_full_blocks(hasher, tokens.data(), tokens.size(), pageSize, nullptr, 0,
                                                           nullptr, scratch.data(), scratch.size(), &hashCount);
            int64_t const t1 = now();
            ctxc_status_t const s1 = ctxc_manager_acquire_vanilla(manager, hashes.data(), hashes.size(), tokenCount,
                                                                  CTXC_LOOKUP_USE_CACHE, &result, &lease);
            int64_t const t2 = now();
            ctxc_status_t const s2 = ctxc_manager_grow_base_pages(manager, lease, 2, &grown);
            int64_t const t3 = now();
            ctxc_status_t const s3 = ctxc_manager_publish_with_tokens(manager, lease, hashes.data(), hashes.size(),
                                                                      tokenCount, nullptr, 0, nullptr, &published);
            int64_t const t4 = now();
            ctxc_status_t const s4 = ctxc_lease_destroy(lease);
            int64_t const t5 = now();
            int64_t const t6 = now();
            if (s0 || s1 || s2 || s3 || s4) fail(std::string("a call failed: ") + ctxc_last_error());
            if (result.status != CTXC_ACQUIRE_ACQUIRED || result.plan.reuse_token_length != expectedReuse || !grown ||
                published.status != CTXC_PUBLISH_EXISTING_RECORD || scratch[0].lo != hashes[0].lo)
                fail("a request did not go the measured way (hit, grow, existing record)");
            sum[0] += t1 - t0;
            sum[1] += t2 - t1;
            sum[2] += t3 - t2;
            sum[3] += t4 - t3;
            sum[4] += t5 - t4;
            empty += t6 - t5;
        }
        if (batch < 2) continue;  // warm-up
        double const clock = static_cast<double>(empty) / batchSize;
        clockCost.push_back(clock);
        for (int op = 0; op < kOpCount; ++op)
            perBatch[op].push_back(std::max(0.0, static_cast<double>(sum[op]) / batchSize - clock));
    }

    std::printf(
        "{\"path\": \"c-abi\", \"page_size\": %d, \"blocks\": %d, \"tokens\": %d, \"batches\": %d, "
        "\"batch_size\": %d, \"clock_ns\": %.1f, \"capi_call_ns\": {",
        pageSize, blocks, tokenCount, batches, batchSize, median(clockCost));
    double request = 0;
    for (int op = 0; op < kOpCount; ++op) {
        double const ns = median(perBatch[op]);
        request += ns;
        std::printf("\"%s\": %.1f, ", kOps[op], ns);
    }
    std::printf("\"request\": %.1f}}\n", request);
    ok(ctxc_manager_destroy(manager), "ctxc_manager_destroy");
    ok(ctxc_hasher_destroy(hasher), "ctxc_hasher_destroy");
    return 0;
}
