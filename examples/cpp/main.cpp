// ctxcache from C++: two requests share a 100-token system prompt; the second reuses the first one's six full
// 16-token pages (96 tokens). Any surprise exits non-zero.
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <utility>
#include <vector>

#include <ctxcache/block_hash.h>
#include <ctxcache/context_cache_manager.h>
#include <ctxcache/errors.h>

namespace {

constexpr int32_t kPageSize = 16;

void expect(bool ok, char const* what) {
    if (!ok) {
        std::fprintf(stderr, "unexpected: %s\n", what);
        std::exit(1);
    }
}

// Hash the prompt's full blocks, acquire, (run the model), publish; the lease releases when it goes out of scope.
int32_t serve(ctxcache::ContextCacheManager& manager, ctxcache::BlockHasher const& hasher,
              std::vector<int32_t> const& prompt) {
    auto const count = static_cast<int32_t>(prompt.size());
    std::vector<ctxcache::BlockHash> hashes = hasher.hashFullBlocks(prompt.data(), prompt.size(), kPageSize);
    ctxcache::AcquireResult result = manager.acquireVanilla(hashes, count);
    expect(result.status == ctxcache::AcquireStatus::kAcquired && result.lease, "acquire did not return a lease");
    ctxcache::CacheRequestLease lease = std::move(*result.lease);
    expect(lease.basePages().size() == (prompt.size() + kPageSize - 1) / kPageSize, "the lease covers the prompt");
    // ... the runtime prefills prompt[reuseTokenLength:] into lease.basePages() here ...
    manager.publish(lease, ctxcache::PublishRequest{hashes, count});
    return result.plan.reuseTokenLength;
}

}  // namespace

int main() {
    try {
        ctxcache::ResourceDemand capacities;
        capacities.baseKvPages = 64;
        ctxcache::ContextCacheManager manager(kPageSize, capacities, /*maxRecords=*/16);
        ctxcache::BlockHasher hasher;  // unkeyed SHA-256

        std::vector<int32_t> first(100), second(100);
        std::iota(first.begin(), first.end(), 0);
        std::iota(second.begin(), second.end(), 0);
        first.insert(first.end(), {7, 8, 9});
        second.insert(second.end(), {1000, 1001, 1002, 1003});

        int32_t const reusedFirst = serve(manager, hasher, first);
        int32_t const reusedSecond = serve(manager, hasher, second);
        expect(reusedFirst == 0, "a cold cache reuses nothing");
        expect(reusedSecond == 96, "the second request reuses the six full pages of the system prompt");
        expect(manager.liveLeaseCount() == 0, "every lease was released");
        manager.checkInvariants();
        std::printf("ctxcache C++ example: first request reused %d tokens, second reused %d\n", reusedFirst,
                    reusedSecond);
        return 0;
    } catch (ctxcache::Error const& e) {
        std::fprintf(stderr, "ctxcache error: %s\n", e.what());
        return 1;
    }
}
