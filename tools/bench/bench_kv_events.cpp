// bench_kv_events: what KV events cost the manager. The Mooncake trace replayed through a vanilla manager
// (acquire, grow to the output, publish the prompt with its tokens, release), in three configurations alternated
// round by round in one run: events off; events on and drained after every request (what a runtime that ships
// events itself does each step); events on with the ZMQ publisher attached (no subscriber: its sender thread still
// encodes every batch). Only manager calls (and the drain) are timed, on the manager's thread, both on the wall
// clock and in the thread's CPU time; the figure is the median over rounds (the order of the three rotates from
// round to round) of each pass's manager time, and the ratios to "off" are measured in this one run.
//
//   bench_kv_events [--trace PATH] [--requests N] [--page-size P] [--capacity-blocks B] [--rounds K]
//
// Requests: the trace as mooncake_trace.h reads it (timestamp order). Tokens: block id b of the trace (512 tokens)
// expands to tokens (b * 1000003 + j) mod 2^31 for j in [0, 512); hashes: FNV-1a-128 chains (hashing is not what is
// measured). Capacity: --capacity-blocks B trace blocks (default a quarter of the distinct blocks), so eviction
// runs. Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <time.h>
#include <unistd.h>

#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/events/kv_event_publisher.h"
#include "mooncake_trace.h"

using namespace ctxcache;

namespace {

using bench::kTraceBlock;
using bench::loadTrace;
using bench::Request;

[[noreturn]] void fail(std::string const& why) {
    std::cerr << "bench_kv_events: " << why << "\n";
    std::exit(1);
}

using Clock = std::chrono::steady_clock;

enum class Config { kOff, kDrain, kPublish };
char const* name(Config c) { return c == Config::kOff ? "off" : c == Config::kDrain ? "drain" : "publish"; }

// CPU time of the calling thread: the manager's own work, without the time another thread (the publisher's
// sender, or another process on a shared machine) took the core away.
int64_t threadCpuNs() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Pass {
    int64_t managerNs = 0;
    int64_t managerCpuNs = 0;
    int64_t reusedTokens = 0;
    int64_t events = 0;
    int64_t batches = 0;
};

Pass replay(std::vector<Request> const& requests, std::vector<std::vector<int32_t>> const& tokens,
            std::vector<std::vector<BlockHash>> const& hashes, int32_t pageSize, int32_t capacityPages, Config config) {
    ContextCacheManager manager(pageSize, {capacityPages, 0, 0, 0}, 1 << 20);
    std::shared_ptr<KvEventPublisher> publisher;
    if (config != Config::kOff) manager.enableKvEvents();
    if (config == Config::kPublish) {
        KvEventPublisherOptions options;
        options.endpoint = "ipc:///tmp/ctxcache-bench-kv-events-" + std::to_string(::getpid());
        publisher = std::make_shared<KvEventPublisher>(options);
        manager.setKvEventSink(publisher);
    }
    KvEventLog drained;
    Pass out;
    for (size_t i = 0; i < requests.size(); ++i) {
        Request const& r = requests[i];
        std::vector<BlockHash> const& h = hashes[i];
        std::vector<int32_t> const& t = tokens[i];
        int64_t const totalPages = (static_cast<int64_t>(r.inputLength) + r.outputLength + pageSize - 1) / pageSize;
        Clock::time_point const t0 = Clock::now();
        int64_t const c0 = threadCpuNs();
        AcquireResult acquired = manager.acquireVanilla(h, r.inputLength);
        if (acquired.lease) {
            CacheRequestLease& lease = *acquired.lease;
            int64_t const grow = totalPages - static_cast<int64_t>(lease.basePages().size());
            if (grow > 0) manager.growBasePages(lease, static_cast<int32_t>(grow));
            if (!h.empty()) manager.publish(lease, {h, r.inputLength, t});
            lease.release();
            out.reusedTokens += acquired.plan.reuseTokenLength;
        }
        if (config == Config::kDrain) {
            manager.drainKvEvents(drained);
            out.events += static_cast<int64_t>(drained.size());
        }
        out.managerCpuNs += threadCpuNs() - c0;
        out.managerNs += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    }
    manager.checkInvariants();
    if (publisher) {
        publisher->flush(30000);
        out.batches = static_cast<int64_t>(publisher->stats().acceptedBatches);
        publisher->close();
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::string trace = "../shared/data/mooncake_synthetic_trace.jsonl";
    int64_t limit = -1;
    int32_t pageSize = 16;
    int64_t capacityBlocks = -1;
    int rounds = 5;
    for (int i = 1; i < argc; ++i) {
        std::string const a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail(a + " needs a value");
            return argv[++i];
        };
        if (a == "--trace") trace = value();
        else if (a == "--requests") limit = std::stoll(value());
        else if (a == "--page-size") pageSize = static_cast<int32_t>(std::stol(value()));
        else if (a == "--capacity-blocks") capacityBlocks = std::stoll(value());
        else if (a == "--rounds") rounds = std::max(1, std::stoi(value()));
        else fail("unknown argument " + a);
    }
    if (pageSize <= 0 || kTraceBlock % pageSize) fail("--page-size must divide 512");
    std::vector<Request> requests;
    try {
        requests = loadTrace(trace, limit);
    } catch (std::runtime_error const& e) {
        fail(e.what());
    }
    std::set<int64_t> distinct;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::vector<BlockHash>> hashes;
    BlockHasher const hasher(HashAlgorithm::kFnv1a128);
    for (Request const& r : requests) {
        std::vector<int32_t> t;
        for (uint64_t const id : r.hashIds) {
            int64_t const b = static_cast<int64_t>(id);
            distinct.insert(b);
            for (int32_t j = 0; j < kTraceBlock && static_cast<int32_t>(t.size()) < r.inputLength; ++j)
                t.push_back(static_cast<int32_t>((b * 1000003 + j) % 2147483647));
        }
        t.resize(static_cast<size_t>(r.inputLength), 0);
        hashes.push_back(hasher.hashFullBlocks(t.data(), t.size(), pageSize));
        tokens.push_back(std::move(t));
    }
    if (capacityBlocks < 0) capacityBlocks = std::max<int64_t>(1, static_cast<int64_t>(distinct.size()) / 4);
    int64_t widest = 0;
    for (Request const& r : requests)
        widest =
            std::max<int64_t>(widest, (static_cast<int64_t>(r.inputLength) + r.outputLength + pageSize - 1) / pageSize);
    int32_t const capacityPages =
        static_cast<int32_t>(std::max<int64_t>(capacityBlocks * (kTraceBlock / pageSize), widest));

    Config const configs[] = {Config::kOff, Config::kDrain, Config::kPublish};
    int const count = KvEventPublisher::available() ? 3 : 2;  // built without ZMQ: no publish configuration
    std::vector<int64_t> times[3], cpuTimes[3];
    Pass last[3];
    for (int round = 0; round < rounds; ++round)
        for (int k = 0; k < count; ++k) {
            int const c = (round + k) % count;  // rotated, so that no configuration always runs first
            last[c] = replay(requests, tokens, hashes, pageSize, capacityPages, configs[c]);
            times[c].push_back(last[c].managerNs);
            cpuTimes[c].push_back(last[c].managerCpuNs);
        }
    if (last[1].reusedTokens != last[0].reusedTokens || (count == 3 && last[2].reusedTokens != last[0].reusedTokens))
        fail("events changed the reuse");
    int64_t medians[3] = {0, 0, 0}, cpuMedians[3] = {0, 0, 0};
    for (int c = 0; c < count; ++c) {
        std::sort(times[c].begin(), times[c].end());
        medians[c] = times[c][times[c].size() / 2];
        std::sort(cpuTimes[c].begin(), cpuTimes[c].end());
        cpuMedians[c] = cpuTimes[c][cpuTimes[c].size() / 2];
    }
    auto ratio = [](int64_t a, int64_t b) { return static_cast<double>(a) / static_cast<double>(b); };
    std::printf(
        "{\"requests\": %zu, \"page_size\": %d, \"capacity_pages\": %d, \"rounds\": %d, "
        "\"reused_tokens\": %lld, \"events_per_pass\": %lld, \"batches_per_pass\": %lld",
        requests.size(), pageSize, capacityPages, rounds, static_cast<long long>(last[0].reusedTokens),
        static_cast<long long>(last[1].events), static_cast<long long>(last[2].batches));
    for (int c = 0; c < count; ++c)
        std::printf(", \"%s_manager_ms\": %.3f, \"%s_manager_cpu_ms\": %.3f", name(configs[c]),
                    static_cast<double>(medians[c]) * 1e-6, name(configs[c]),
                    static_cast<double>(cpuMedians[c]) * 1e-6);
    std::printf(", \"drain_ratio\": %.4f, \"drain_cpu_ratio\": %.4f", ratio(medians[1], medians[0]),
                ratio(cpuMedians[1], cpuMedians[0]));
    if (count == 3)
        std::printf(", \"publish_ratio\": %.4f, \"publish_cpu_ratio\": %.4f", ratio(medians[2], medians[0]),
                    ratio(cpuMedians[2], cpuMedians[0]));
    else std::printf(", \"publish_ratio\": null, \"publish_cpu_ratio\": null");
    std::printf(", \"target_ratio\": 1.10}\n");
    return 0;
}
