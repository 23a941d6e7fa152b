// bench_manager: replay a Mooncake-format trace through the context cache manager (C++ path).
//
//   bench_manager [--trace PATH] [--requests N] [--page-size P]... [--mode vanilla|hybrid|spec]...
//                 [--capacity-blocks B] [--max-records R] [--snapshot-slots S] [--hybrid-candidates K]
//                 [--key STRING] [--repeat K] [--no-upper-bound] [--eviction-policy lru|lru-trim]
//                 [--cold [--cold-bytes B]] [--retention none|default|stored|mixed]
//
// Prints one JSON object on stdout: {"path": "c++", ..., "results": [one object per page size and mode, page
// sizes outer, modes inner in the order vanilla, hybrid, spec]}. --mode is repeatable (or comma separated);
// the default is all three. python/ctxcache/bench/manager.py is the same benchmark through the Python package;
// tools/bench_manager runs both and checks that every non-timing figure agrees. The definitions below are shared
// by both and must stay identical.
//
// Token expansion: hash id h becomes the 512 pseudo-tokens
//     token[j] = int32(splitmix64(h * 512 + j) mod 32000),  j = 0..511   (all arithmetic mod 2^64)
// and a request's tokens are the concatenation over its hash_ids, truncated to input_length. Page sizes that
// divide 512 keep the trace's sharing structure exactly.
//
// Hashing phase (once per page size, shared by the modes): hashes = keyed SHA-256 hashFullBlocks(tokens, P)
// (floor(n/P) hashes for an input of n tokens), timed apart from the manager.
//
// Per request (file order, stably sorted by timestamp), n = input_length, total = ceil((n + output_length) / P):
//   vanilla  acquireVanilla(hashes, n); INSUFFICIENT_CAPACITY: counted, request skipped
//            growBasePages(lease, total - lease pages)  if > 0 (failure counted)
//            publish(lease, {hashes, n})                if any full block
//            release(lease)
//   hybrid   (attention + recurrent, hasAttention = true; one exact checkpoint at every prompt end)
//            lengths = hybridCandidateLengths(n, hashes) (stored exact lengths < n whose checkpoint hangs off this
//            prompt's own block chain, longest first); the K longest are
//            tried (--hybrid-candidates K, default 8; 0 = all): candidate L gets digest = the keyed SHA-256
//            hashExactPrefix(tokens[:L], P), computed incrementally from the request's own chained full-block
//            hashes: hashes[L/P - 1] when P divides L, else hashBlock(L >= P ? hashes[L/P - 1] : chain root,
//            tokens[floor(L/P)*P : L]) (at most P - 1 tokens per digest; the identity is checked against
//            hashExactPrefix at every request's own length n before the replay). The publication digest (at n)
//            is computed in the same step.
//            acquireHybrid(candidates, hashes, n, true); INSUFFICIENT_CAPACITY: counted, request skipped
//            releaseRestoredHybridSnapshots(lease)       (the restore is complete at once)
//            growBasePages(lease, total - lease pages)  if > 0 (failure counted)
//            reserveHybridSnapshots(lease, n % P != 0); nullopt = snapshot pressure: counted, nothing published
//            publishHybrid(lease, hashes, {digest(n), n}, reservation); retireHybridSnapshotReservation(...)
//            release(lease)
//   spec     (greedy EAGLE, paired base + draft pools)
//            acquireSpec(hashes, n); INSUFFICIENT_CAPACITY: counted, request skipped
//            growSpecPages(lease, g, g), g = total - lease base pages (= lease draft pages)  if > 0
//            publish(lease, {hashes, n})  if any full block (base and draft both materialized through n)
//            release(lease)
//            A paired hit always replays its boundary page: reuse = matched - P (checked on every hit);
//            replayed pages = sum over acquired requests of (matched - reuse) / P (one per hit).
// Capacity: base pool = floor(distinct 512-token blocks of the replayed requests / 2) * (512 / P) pages (or
// --capacity-blocks B: B * 512 / P); spec: a draft pool of the same size; hybrid: recurrent and partial-KV
// snapshot pools of S slots each, S = max(1, floor(replayed requests / 2)) (or --snapshot-slots S). Max records
// 1,000,000 by default so that only capacity pressure evicts.
// Upper bound: the same replay with pools no request can exhaust (base and draft: distinct blocks * 512/P + the
// largest request; snapshots: requests + 2; all doubled until nothing is evicted, refused or skipped).
//
// Figures: hit rate = sum(reuse_token_length) / sum(input_length). Pages touched per request = base + draft
// pages in the lease after growth + blocks published. Manager time = every manager call of the request (hybrid:
// hybridCandidateLengths, acquire, release restored, grow, reserve, publish, retire, release), ns per page
// touched = manager time / pages touched. Hash ns per token = full-block hashing time / tokens hashed (full
// blocks * P), the same in every mode; hybrid digest ns per token = exact-prefix digest time (the candidates'
// and the publication's, building the candidate list included) / the same tokens, so hybrid hashing costs
// hash + digest ns per token. requests/s = requests / (hashing time [+ digest time] + manager time). Metadata
// bytes per cached block = metadataBytes() / cached base pages (pages with a cache ref: capacity - free after
// the last release), at the end of the run; spec also per cached base + draft page; the peak of metadataBytes()
// is sampled after every request, outside the timed region.
// Vanilla and spec also report each acquire call's time (acquire_p50_us, acquire_p99_us, acquire_max_us, nearest
// rank over the first pass) and the manager time split by call (manager_seconds_by_operation: acquire, grow,
// publish, release); a conversation workload (`ctxcache workload --out FILE`, tools/bench_manager --workload
// conversations) is where spec's acquire tail used to show.
// Timings: the headline figures are what a server sees: ONE pass in trace order, each request hashed once and
// served once (the first of the K passes). Each request is then hashed --repeat K times back to back (default 5)
// and the whole replay is run K times (a fresh manager per replay, whose figures must repeat exactly): the hot_*
// figures count every request with its fastest repetition (caches warm from the identical work before it), and
// are labelled hot wherever they are shown.
// Cache-cold loop (--cold; vanilla and spec, default both; --repeat is 1): what a server sees when the model's
// forward pass runs between two requests. No hashing phase: per request, expand its tokens (untimed), hash them
// (timed: the hashing figures), acquire / grow / publish / release as above (timed: the manager figures), then read
// one byte of every 64-byte line of a buffer of B bytes (untimed; default twice the last-level cache, the largest
// data or unified cache of cpu0 in /sys/devices/system/cpu/cpu0/cache, 64 MiB when unreadable). Every other figure
// is the same as the hot loop's; the result says "loop": "cold" and "cold_bytes", and has no hot_* figures. The
// upper bound replays the hashes the cold loop made, hot (only its non-timing figures are reported).
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/tier/host_tier.h"
#include "mooncake_trace.h"

using namespace ctxcache;

namespace {

using bench::kTraceBlock;
using bench::loadTrace;
using bench::Request;

constexpr char const* kDefaultTrace = "../shared/data/mooncake_synthetic_trace.jsonl";
constexpr char const* kDefaultKey = "ctxcache-bench-key";

[[noreturn]] void fail(std::string const& why) {
    std::fprintf(stderr, "bench_manager: %s\n", why.c_str());
    std::exit(2);
}

// ---- token expansion (identical in python/ctxcache/bench/manager.py) -----------------------------------------------

inline uint64_t splitmix64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void expandTokens(Request const& r, std::vector<int32_t>& tokens) {
    tokens.resize(static_cast<size_t>(r.inputLength));
    size_t pos = 0;
    for (uint64_t id : r.hashIds) {
        for (uint64_t j = 0; j < static_cast<uint64_t>(kTraceBlock) && pos < tokens.size(); ++j)
            tokens[pos++] = static_cast<int32_t>(splitmix64(id * kTraceBlock + j) % 32000u);
        if (pos == tokens.size()) break;
    }
}

// Tokens [begin, end) of the request (end <= input_length), into `out`.
void expandRange(Request const& r, int32_t begin, int32_t end, std::vector<int32_t>& out) {
    out.clear();
    for (int32_t pos = begin; pos < end; ++pos) {
        uint64_t const id = r.hashIds[static_cast<size_t>(pos / kTraceBlock)];
        out.push_back(
            static_cast<int32_t>(splitmix64(id * kTraceBlock + static_cast<uint64_t>(pos % kTraceBlock)) % 32000u));
    }
}

// ---- cache-cold mode (--cold; identical in python/ctxcache/bench/manager.py and tools/bench_peers's vLLM loop) -----
//
// What a server sees: between two requests the model's forward pass sweeps the CPU caches. Each request is its own
// step: expand its tokens (untimed), hash them (timed), acquire / grow / publish / release (timed), then read one
// byte of every 64-byte line of a buffer of --cold-bytes bytes (untimed; default twice the last-level cache, the
// largest cache of cpu0 in /sys/devices/system/cpu/cpu0/cache, 64 MiB when that cannot be read).

int64_t lastLevelCacheBytes() {
    int64_t best = 0;
    for (int index = 0; index < 16; ++index) {
        std::string const dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
        std::ifstream type(dir + "type"), size(dir + "size");
        std::string t, sz;
        if (!(type >> t) || !(size >> sz)) continue;
        if (t == "Instruction" || sz.empty()) continue;
        int64_t value = 0;
        size_t pos = 0;
        while (pos < sz.size() && sz[pos] >= '0' && sz[pos] <= '9') value = value * 10 + (sz[pos++] - '0');
        char const unit = pos < sz.size() ? sz[pos] : ' ';
        value *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? int64_t{1} << 30 : 1;
        best = std::max(best, value);
    }
    return best;
}

int64_t defaultColdBytes() {
    int64_t const llc = lastLevelCacheBytes();
    return 2 * (llc > 0 ? llc : int64_t{32} << 20);
}

volatile uint64_t gSweepSink = 0;  // keeps the sweep's loads

struct ColdLoop {
    BlockHasher const* hasher = nullptr;
    std::vector<uint8_t> buffer;  // written once, so that every page is backed (not the shared zero page)
    std::vector<int32_t> tokens;
    std::vector<int64_t> hashNs;  // each request's hashing time

    explicit ColdLoop(BlockHasher const& h, int64_t bytes) : hasher(&h), buffer(static_cast<size_t>(bytes), 1) {}
    void sweep() {
        uint64_t acc = 0;
        uint8_t const* const p = buffer.data();
        for (size_t i = 0; i < buffer.size(); i += 64) acc += p[i];
        gSweepSink = gSweepSink + acc;
    }
};

// ---- retention (--retention none|default|stored|mixed; C++ only, not mirrored by `ctxcache bench`) --------------
// none: publications carry no spec (the headline). default: every publication carries an explicit default spec
// (one range at priority 35 over the whole prompt, which the manager recognises as the default). stored: that range
// for 10^6 s, so every record stores it and the ranking code runs, deciding as plain LRU. mixed:
// request i's spec is one of four by a hash of i: its first 512 tokens at 90 (a shared system prompt), a
// priority-0 tail past token 512, everything at 60, or none. No durations: the figures must repeat pass to pass.
enum class RetentionMix { kNone, kDefault, kStored, kMixed };
RetentionMix gRetention = RetentionMix::kNone;
// --host-tier-pages N (vanilla and spec): a host tier (write-back, bookkeeping) whose extension of each hit is timed
// with the acquire (docs/TIERS.md), as `ctxcache bench --host-tier-pages` does.
int32_t gHostTierPages = 0;

RetentionSpec const* retentionFor(size_t request) {
    static RetentionSpec const explicitDefault{
        {{0, kRetentionOpenEnd, kDefaultRetentionPriority, kNoRetentionDuration}}};
    static RetentionSpec const stored{{{0, kRetentionOpenEnd, kDefaultRetentionPriority, 1'000'000'000'000'000}}};
    static RetentionSpec const mixed[3] = {
        RetentionSpec{{{0, 512, 90, kNoRetentionDuration}}},
        RetentionSpec{{{512, kRetentionOpenEnd, 0, kNoRetentionDuration}}},
        RetentionSpec{{{0, kRetentionOpenEnd, 60, kNoRetentionDuration}}},
    };
    switch (gRetention) {
        case RetentionMix::kNone: return nullptr;
        case RetentionMix::kDefault: return &explicitDefault;
        case RetentionMix::kStored: return &stored;
        case RetentionMix::kMixed: {
            size_t const pick = static_cast<size_t>((request * 0x9E3779B97F4A7C15ull) >> 62);  // 0..3
            return pick < 3 ? &mixed[pick] : nullptr;
        }
    }
    return nullptr;
}

// ---- the replay -------------------------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

inline int64_t ns(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}

struct Replay {
    int64_t requests = 0;
    int64_t acquired = 0;
    int64_t insufficientCapacity = 0;
    int64_t growCalls = 0;
    int64_t growFailures = 0;
    int64_t publishCalls = 0;
    int64_t publishedNew = 0;
    int64_t publishedExisting = 0;
    int64_t managerCalls = 0;
    int64_t inputTokens = 0;
    int64_t reusedTokens = 0;
    int64_t hostReusedTokens = 0;  // of reusedTokens: loaded from the host tier (--host-tier-pages)
    uint64_t hostWrittenBlocks = 0;
    uint64_t hostDroppedBlocks = 0;
    int64_t matchedTokens = 0;
    int64_t pagesTouched = 0;
    int64_t leasePages = 0;
    int64_t publishedBlocks = 0;
    int64_t managerNs = 0;
    int64_t hotManagerNs = 0;        // each request's fastest of the repetitions (bestOf)
    std::vector<int64_t> requestNs;  // manager time of each request
    std::vector<int64_t> acquireNs;  // vanilla and spec: each acquire call (its percentiles)
    int64_t opNs[4] = {0, 0, 0, 0};  // vanilla and spec: acquire, grow, publish, release (sums)
    int64_t capacityPages = 0;
    int64_t cachedPages = 0;
    int64_t records = 0;
    int64_t baseIndexEntries = 0;
    int64_t metadataBytes = 0;
    int64_t peakMetadataBytes = 0;
    int64_t poolBytes = 0, baseIndexBytes = 0, draftIndexBytes = 0, recordBytes = 0;  // metadataBytes() parts
    ContextCacheManagerMetrics metrics;
    // hybrid and spec
    int64_t hits = 0;  // acquired requests with reuse > 0
    int64_t leaseBasePages = 0, leaseDraftPages = 0;
    // hybrid
    int64_t snapshotSlots = 0;
    int64_t candidateLengthsOffered = 0, candidatesTried = 0;
    int64_t digests = 0, digestTokens = 0;
    uint64_t digestSumHi = 0, digestSumLo = 0;
    std::vector<int64_t> requestDigestNs;  // exact-prefix digest time of each request
    int64_t digestNs = 0;
    int64_t hotDigestNs = 0;
    int64_t snapshotPressureSkips = 0;
    int64_t reserveCalls = 0;
    int64_t cachedRecurrentSlots = 0, cachedPartialSlots = 0;
    // spec
    int64_t draftCapacityPages = 0;
    int64_t cachedDraftPages = 0;
    int64_t replayedPages = 0;
};

// What every replay reads at its end.
void finishReplay(ContextCacheManager const& manager, Replay& out) {
    manager.checkInvariants();
    ResourcePools const& pools = manager.pools();
    out.cachedPages = out.capacityPages - pools.freeCount(ResourceType::kBaseKvPage);
    out.cachedDraftPages = out.draftCapacityPages - pools.freeCount(ResourceType::kDraftKvPage);
    out.cachedRecurrentSlots = out.snapshotSlots - pools.freeCount(ResourceType::kRecurrentSnapshot);
    out.cachedPartialSlots = out.snapshotSlots - pools.freeCount(ResourceType::kPartialKvSnapshot);
    out.records = static_cast<int64_t>(manager.records().size());
    out.baseIndexEntries = static_cast<int64_t>(manager.baseIndex().size());
    out.metadataBytes = static_cast<int64_t>(manager.metadataBytes());
    out.poolBytes = static_cast<int64_t>(pools.memoryBytes());
    out.baseIndexBytes = static_cast<int64_t>(manager.baseIndex().memoryBytes());
    out.draftIndexBytes = static_cast<int64_t>(manager.draftIndex().memoryBytes());
    out.recordBytes = static_cast<int64_t>(manager.records().memoryBytes());
    out.peakMetadataBytes = std::max(out.peakMetadataBytes, out.metadataBytes);
    out.metrics = manager.metrics();
    if (auto const* host = dynamic_cast<tier::HostTier const*>(manager.baseBlockObserver())) {
        out.hostWrittenBlocks = host->metrics().writtenBlocks;
        out.hostDroppedBlocks = host->metrics().droppedBlocks;
    }
}

// One pass of acquire / grow / publish / release: vanilla, or EAGLE spec with a draft pool as large as the base
// pool (both grown alike). Only manager calls are timed.
// cold: the cache-cold loop (each request hashed in the loop, into hashes[i], and a cache sweep after it).
Replay replayPaged(std::vector<Request> const& requests, std::vector<std::vector<BlockHash>>& hashes, int32_t pageSize,
                   int32_t capacityPages, int32_t maxRecords, EvictionPolicy policy, bool samplePeak, bool spec,
                   ColdLoop* cold = nullptr) {
    ResourceDemand capacities;
    capacities.baseKvPages = capacityPages;
    capacities.draftKvPages = spec ? capacityPages : 0;
    ContextCacheManager manager(pageSize, capacities, maxRecords, policy);
    std::unique_ptr<tier::HostTier> hostTier;  // after the manager: destroyed (detached) first
    if (gHostTierPages > 0)
        hostTier = std::make_unique<tier::HostTier>(
            manager, tier::HostTierConfig{gHostTierPages, tier::HostWritePolicy::kWriteBack, nullptr, {}});
    Replay out;
    out.capacityPages = capacityPages;
    out.draftCapacityPages = capacities.draftKvPages;
    out.requestNs.assign(requests.size(), 0);
    out.acquireNs.assign(requests.size(), 0);
    if (cold) cold->hashNs.assign(requests.size(), 0);
    for (size_t i = 0; i < requests.size(); ++i) {
        Request const& r = requests[i];
        if (cold) {
            if (i > 0) cold->sweep();  // the forward pass between two requests
            expandTokens(r, cold->tokens);
            std::vector<BlockHash>& into = hashes[i];
            into.clear();
            into.reserve(cold->tokens.size() / static_cast<size_t>(pageSize));
            Clock::time_point const h0 = Clock::now();
            cold->hasher->hashFullBlocksInto(cold->tokens.data(), cold->tokens.size(), pageSize, {}, nullptr, into);
            cold->hashNs[i] = ns(h0, Clock::now());
        }
        std::vector<BlockHash> const& h = hashes[i];
        int32_t const n = r.inputLength;
        ++out.requests;
        out.inputTokens += n;
        int64_t const totalPages = (static_cast<int64_t>(n) + r.outputLength + pageSize - 1) / pageSize;

        Clock::time_point const t0 = Clock::now();
        AcquireResult acquired = spec ? manager.acquireSpec(h, n) : manager.acquireVanilla(h, n);
        int32_t loaded = 0;
        if (hostTier && acquired.lease) {  // spec: the tier's speculative extension (slots hold draft pages too)
            int32_t const deviceBlocks = acquired.plan.reuseTokenLength / pageSize;
            loaded = spec ? hostTier->extendSpecHit(h, n, deviceBlocks) : hostTier->extendHit(h, n, deviceBlocks);
        }
        Clock::time_point const tAcquired = Clock::now();
        out.acquireNs[i] = ns(t0, tAcquired);
        out.opNs[0] += out.acquireNs[i];
        if (!acquired.lease) {
            Clock::time_point const t1 = tAcquired;
            out.requestNs[i] = ns(t0, t1);
            out.managerNs += out.requestNs[i];
            ++out.managerCalls;
            ++out.insufficientCapacity;
            continue;
        }
        CacheRequestLease& lease = *acquired.lease;
        int64_t const grow = totalPages - static_cast<int64_t>(lease.basePages().size());
        bool grown = true;
        if (grow > 0) {
            auto const g = static_cast<int32_t>(grow);
            grown = spec ? manager.growSpecPages(lease, g, g) : manager.growBasePages(lease, g);
        }
        Clock::time_point const tGrown = Clock::now();
        int64_t const basePages = static_cast<int64_t>(lease.basePages().size());
        int64_t const draftPages = static_cast<int64_t>(lease.draftPages().size());
        int32_t published = 0;
        PublishStatus status = PublishStatus::kPublished;
        if (!h.empty()) {
            PublishRequest request{h, n};
            request.retention = retentionFor(i);
            PublishResult const result = manager.publish(lease, request);
            published = result.publishedBaseFullBlockCount;
            status = result.status;
        }
        Clock::time_point const tPublished = Clock::now();
        lease.release();
        Clock::time_point const t1 = Clock::now();
        out.opNs[1] += ns(tAcquired, tGrown);
        out.opNs[2] += ns(tGrown, tPublished);
        out.opNs[3] += ns(tPublished, t1);

        out.requestNs[i] = ns(t0, t1);
        out.managerNs += out.requestNs[i];
        ReusePlan const& plan = acquired.plan;
        ++out.acquired;
        out.managerCalls += 2;  // acquire + release
        out.reusedTokens += plan.reuseTokenLength + static_cast<int64_t>(loaded) * pageSize;
        out.hostReusedTokens += static_cast<int64_t>(loaded) * pageSize;
        out.matchedTokens += plan.matchedTokenLength;
        if (spec) {
            if (plan.matchedTokenLength > 0 && plan.reuseTokenLength != plan.matchedTokenLength - pageSize)
                fail("a spec hit must replay exactly its boundary page");
            out.replayedPages += (plan.matchedTokenLength - plan.reuseTokenLength) / pageSize;
            if (plan.reuseTokenLength > 0) ++out.hits;
        }
        if (grow > 0) {
            ++out.growCalls;
            ++out.managerCalls;
            if (!grown) ++out.growFailures;
        }
        if (!h.empty()) {
            ++out.publishCalls;
            ++out.managerCalls;
            if (status == PublishStatus::kPublished) ++out.publishedNew;
            else ++out.publishedExisting;
        }
        out.leasePages += basePages + draftPages;
        if (spec) {
            out.leaseBasePages += basePages;
            out.leaseDraftPages += draftPages;
        }
        out.publishedBlocks += published;
        out.pagesTouched += basePages + draftPages + published;
        if (samplePeak)
            out.peakMetadataBytes =
                std::max<int64_t>(out.peakMetadataBytes, static_cast<int64_t>(manager.metadataBytes()));
    }
    finishReplay(manager, out);
    return out;
}

struct HybridOptions {
    int32_t snapshotSlots = 0;
    int32_t candidateCap = 8;  // 0 = every candidate length
    BlockHasher const* hasher = nullptr;
    std::vector<BlockHash> const* exactDigests = nullptr;  // hashExactPrefix(tokens[:n]) per request: checked
};

// The exact-prefix digest at length L from the request's chained full-block hashes and its tokens
// [floor(L/P)*P, L) (`tail`).
inline BlockHash chainedDigest(BlockHasher const& hasher, std::vector<BlockHash> const& hashes, int32_t length,
                               int32_t pageSize, int32_t const* tail) {
    int32_t const full = length / pageSize, rest = length % pageSize;
    BlockHash const parent = full > 0 ? hashes[static_cast<size_t>(full - 1)] : kChainRoot;
    if (rest == 0) return parent;
    return hasher.hashBlock(parent, tail, static_cast<size_t>(rest));
}

Replay replayHybrid(std::vector<Request> const& requests, std::vector<std::vector<BlockHash>>& hashes, int32_t pageSize,
                    int32_t capacityPages, int32_t maxRecords, EvictionPolicy policy, HybridOptions const& options,
                    bool samplePeak) {
    ResourceDemand capacities;
    capacities.baseKvPages = capacityPages;
    capacities.recurrentSnapshotSlots = options.snapshotSlots;
    capacities.partialKvSnapshotSlots = options.snapshotSlots;
    ContextCacheManager manager(pageSize, capacities, maxRecords, policy);
    BlockHasher const& hasher = *options.hasher;
    Replay out;
    out.capacityPages = capacityPages;
    out.snapshotSlots = options.snapshotSlots;
    out.requestNs.assign(requests.size(), 0);
    out.requestDigestNs.assign(requests.size(), 0);
    std::vector<HybridCheckpointCandidate> candidates;
    std::vector<int32_t> tails;          // the tokens each digest hashes, back to back (expanded untimed)
    std::vector<int32_t> tailLengths;    // candidate lengths, then n
    std::vector<int32_t> scratch;
    for (size_t i = 0; i < requests.size(); ++i) {
        Request const& r = requests[i];
        std::vector<BlockHash> const& h = hashes[i];
        int32_t const n = r.inputLength;
        ++out.requests;
        out.inputTokens += n;
        int64_t const totalPages = (static_cast<int64_t>(n) + r.outputLength + pageSize - 1) / pageSize;

        Clock::time_point const t0 = Clock::now();
        std::vector<int32_t> const lengths = manager.hybridCandidateLengths(n, h);
        Clock::time_point const t1 = Clock::now();

        // Untimed: the tokens the digests will hash (what a runtime already holds).
        size_t const tried = options.candidateCap > 0
                                 ? std::min(lengths.size(), static_cast<size_t>(options.candidateCap))
                                 : lengths.size();
        tailLengths.assign(lengths.begin(), lengths.begin() + static_cast<std::ptrdiff_t>(tried));
        if (n > 0) tailLengths.push_back(n);
        tails.clear();
        for (int32_t length : tailLengths) {
            expandRange(r, length / pageSize * pageSize, length, scratch);
            tails.insert(tails.end(), scratch.begin(), scratch.end());
        }

        Clock::time_point const t2 = Clock::now();
        candidates.clear();
        size_t offset = 0;
        for (size_t k = 0; k < tried; ++k) {
            int32_t const length = tailLengths[k];
            candidates.push_back({length, chainedDigest(hasher, h, length, pageSize, tails.data() + offset)});
            offset += static_cast<size_t>(length % pageSize);
        }
        BlockHash const published = n > 0 ? chainedDigest(hasher, h, n, pageSize, tails.data() + offset) : kChainRoot;
        Clock::time_point const t3 = Clock::now();

        out.candidateLengthsOffered += static_cast<int64_t>(lengths.size());
        out.candidatesTried += static_cast<int64_t>(tried);
        out.digests += static_cast<int64_t>(tailLengths.size());
        out.digestTokens += static_cast<int64_t>(tails.size());
        for (HybridCheckpointCandidate const& c : candidates)
            out.digestSumHi += c.exactPrefixDigest.hi, out.digestSumLo += c.exactPrefixDigest.lo;
        if (n > 0) {
            out.digestSumHi += published.hi, out.digestSumLo += published.lo;
            if (options.exactDigests && (*options.exactDigests)[i] != published)
                fail("the chained exact-prefix digest differs from hashExactPrefix");
        }
        out.requestDigestNs[i] = ns(t2, t3);
        ++out.managerCalls;  // hybridCandidateLengths

        Clock::time_point const t4 = Clock::now();
        AcquireResult acquired = manager.acquireHybrid(candidates, h, n, true);
        if (!acquired.lease) {
            Clock::time_point const t5 = Clock::now();
            out.requestNs[i] = ns(t0, t1) + ns(t4, t5);
            ++out.managerCalls;
            ++out.insufficientCapacity;
            continue;
        }
        CacheRequestLease& lease = *acquired.lease;
        manager.releaseRestoredHybridSnapshots(lease);
        int64_t const grow = totalPages - static_cast<int64_t>(lease.basePages().size());
        bool grown = true;
        if (grow > 0) grown = manager.growBasePages(lease, static_cast<int32_t>(grow));
        int64_t const pagesAfterGrowth = static_cast<int64_t>(lease.basePages().size());
        bool reserved = false;
        int32_t publishedBlocks = 0;
        PublishStatus status = PublishStatus::kPublished;
        if (n > 0) {
            std::optional<HybridSnapshotReservation> const reservation =
                manager.reserveHybridSnapshots(lease, n % pageSize != 0);
            if (reservation) {
                reserved = true;
                PublishResult const result = manager.publishHybrid(lease, {h, {published, n}, *reservation});
                publishedBlocks = result.publishedBaseFullBlockCount;
                status = result.status;
                manager.retireHybridSnapshotReservation(lease, *reservation);
            }
        }
        lease.release();
        Clock::time_point const t5 = Clock::now();

        out.requestNs[i] = ns(t0, t1) + ns(t4, t5);
        ++out.acquired;
        out.managerCalls += 3;  // acquire + release restored + release
        out.reusedTokens += acquired.plan.reuseTokenLength;
        out.matchedTokens += acquired.plan.matchedTokenLength;
        if (acquired.plan.reuseTokenLength > 0) ++out.hits;
        if (grow > 0) {
            ++out.growCalls;
            ++out.managerCalls;
            if (!grown) ++out.growFailures;
        }
        if (n > 0) {
            ++out.reserveCalls;
            ++out.managerCalls;
            if (!reserved) ++out.snapshotPressureSkips;
        }
        if (reserved) {
            ++out.publishCalls;
            out.managerCalls += 2;  // publish + retire
            if (status == PublishStatus::kPublished) ++out.publishedNew;
            else ++out.publishedExisting;
        }
        out.leasePages += pagesAfterGrowth;
        out.leaseBasePages += pagesAfterGrowth;
        out.publishedBlocks += publishedBlocks;
        out.pagesTouched += pagesAfterGrowth + publishedBlocks;
        if (samplePeak)
            out.peakMetadataBytes =
                std::max<int64_t>(out.peakMetadataBytes, static_cast<int64_t>(manager.metadataBytes()));
    }
    finishReplay(manager, out);
    return out;
}

// ---- output -----------------------------------------------------------------------------------------------

class Json {
public:
    void key(char const* k) {
        os_ << (first_ ? "" : ", ") << '"' << k << "\": ";
        first_ = false;
    }
    void num(char const* k, int64_t v) { key(k), os_ << v; }
    void num(char const* k, uint64_t v) { key(k), os_ << v; }
    void real(char const* k, double v) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        key(k), os_ << buf;
    }
    void str(char const* k, std::string const& v) {
        key(k), os_ << '"';
        for (char c : v) {
            if (c == '"' || c == '\\') os_ << '\\';
            os_ << c;
        }
        os_ << '"';
    }
    void raw(char const* k, std::string const& v) { key(k), os_ << v; }
    std::string done() { return "{" + os_.str() + "}"; }

private:
    std::ostringstream os_;
    bool first_ = true;
};

double ratio(double a, double b) { return b == 0 ? 0.0 : a / b; }

}  // namespace

enum class Mode { kVanilla, kHybrid, kSpec };
char const* modeName(Mode m) { return m == Mode::kVanilla ? "vanilla" : m == Mode::kHybrid ? "hybrid" : "spec"; }

// One mode's bounded replay --repeat times (figures must repeat). The first pass's timings are the headline (each
// request served once); hot timings keep each request's fastest pass.
template <typename ReplayFn>
Replay bestOf(int repeat, ReplayFn&& run) {
    Replay best;
    std::vector<int64_t> hotRequestNs, hotRequestDigestNs;
    for (int pass = 0; pass < repeat; ++pass) {
        Replay const r = run(pass);
        if (pass == 0) {
            best = r;
            hotRequestNs = r.requestNs;
            hotRequestDigestNs = r.requestDigestNs;
            continue;
        }
        if (r.reusedTokens != best.reusedTokens || r.pagesTouched != best.pagesTouched ||
            r.metrics.evictedRecords != best.metrics.evictedRecords || r.metadataBytes != best.metadataBytes ||
            r.snapshotPressureSkips != best.snapshotPressureSkips || r.digestSumHi != best.digestSumHi ||
            r.digestSumLo != best.digestSumLo)
            fail("the replay is not deterministic");
        for (size_t i = 0; i < hotRequestNs.size(); ++i) hotRequestNs[i] = std::min(hotRequestNs[i], r.requestNs[i]);
        for (size_t i = 0; i < hotRequestDigestNs.size(); ++i)
            hotRequestDigestNs[i] = std::min(hotRequestDigestNs[i], r.requestDigestNs[i]);
    }
    best.managerNs = best.hotManagerNs = 0;
    for (int64_t t : best.requestNs) best.managerNs += t;
    for (int64_t t : hotRequestNs) best.hotManagerNs += t;
    best.digestNs = best.hotDigestNs = 0;
    for (int64_t t : best.requestDigestNs) best.digestNs += t;
    for (int64_t t : hotRequestDigestNs) best.hotDigestNs += t;
    return best;
}

int main(int argc, char** argv) {
    std::string trace = kDefaultTrace;
    std::string key = kDefaultKey;
    int64_t limit = -1;
    int64_t capacityBlocks = -1;
    int64_t maxRecords = 1000000;
    int64_t snapshotSlotsOption = -1;
    int64_t candidateCap = 8;
    bool upperBound = true;
    int repeat = 5;
    bool coldMode = false;
    int64_t coldBytes = -1;
    EvictionPolicy policy = EvictionPolicy::kRecordLru;
    std::vector<int32_t> pageSizes;
    std::vector<Mode> modes;
    char const* const usage =
        "bench_manager [--trace PATH] [--requests N] [--page-size P]... [--mode vanilla|hybrid|spec]... "
        "[--capacity-blocks B] [--max-records R] [--snapshot-slots S] [--hybrid-candidates K] [--key STRING] "
        "[--repeat K] [--no-upper-bound] [--eviction-policy lru|lru-trim] [--cold [--cold-bytes B]] "
        "[--retention none|default|stored|mixed] [--host-tier-pages N]";
    for (int i = 1; i < argc; ++i) {
        std::string const a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail(a + " needs a value");
            return argv[++i];
        };
        if (a == "--trace") trace = value();
        else if (a == "--requests") limit = std::stoll(value());
        else if (a == "--page-size") pageSizes.push_back(static_cast<int32_t>(std::stol(value())));
        else if (a == "--mode") {
            std::stringstream list(value());
            std::string m;
            while (std::getline(list, m, ',')) {
                Mode const mode = m == "vanilla"  ? Mode::kVanilla
                                  : m == "hybrid" ? Mode::kHybrid
                                  : m == "spec"
                                      ? Mode::kSpec
                                      : (fail("unknown mode \"" + m + "\" (vanilla, hybrid or spec)"), Mode::kVanilla);
                if (std::find(modes.begin(), modes.end(), mode) == modes.end()) modes.push_back(mode);
            }
        } else if (a == "--capacity-blocks") capacityBlocks = std::stoll(value());
        else if (a == "--max-records") maxRecords = std::stoll(value());
        else if (a == "--snapshot-slots") snapshotSlotsOption = std::stoll(value());
        else if (a == "--hybrid-candidates") candidateCap = std::stoll(value());
        else if (a == "--key") key = value();
        else if (a == "--repeat") repeat = std::max(1, std::stoi(value()));
        else if (a == "--no-upper-bound") upperBound = false;
        else if (a == "--cold") coldMode = true;
        else if (a == "--cold-bytes") coldBytes = std::stoll(value());
        else if (a == "--eviction-policy") {
            std::string const name = value();
            policy = name == "lru"        ? EvictionPolicy::kRecordLru
                     : name == "lru-trim" ? EvictionPolicy::kRecordLruTrim
                                          : (fail("unknown eviction policy \"" + name + "\" (lru or lru-trim)"),
                                             EvictionPolicy::kRecordLru);
        } else if (a == "--host-tier-pages") {
            long long const pages = std::stoll(value());
            if (pages < 0 || pages > INT32_MAX) fail("--host-tier-pages must be in [0, 2^31 - 1]");
            gHostTierPages = static_cast<int32_t>(pages);
        } else if (a == "--retention") {
            std::string const name = value();
            char const* const names[] = {"none", "default", "stored", "mixed"};
            auto const found = std::find(std::begin(names), std::end(names), name);
            if (found == std::end(names)) fail("unknown --retention \"" + name + "\" (none, default, stored or mixed)");
            gRetention = static_cast<RetentionMix>(found - std::begin(names));
        } else if (a == "-h" || a == "--help") {
            std::puts(usage);
            return 0;
        } else fail("unknown argument " + a);
    }
    if (pageSizes.empty()) pageSizes = {16, 128};
    if (modes.empty())
        modes = coldMode ? std::vector<Mode>{Mode::kVanilla, Mode::kSpec}
                         : std::vector<Mode>{Mode::kVanilla, Mode::kHybrid, Mode::kSpec};
    if (coldMode) {
        if (std::find(modes.begin(), modes.end(), Mode::kHybrid) != modes.end())
            fail("--cold runs the vanilla and spec modes (not hybrid)");
        if (coldBytes < 0) coldBytes = defaultColdBytes();
        if (coldBytes < 64 || coldBytes > (int64_t{1} << 40)) fail("--cold-bytes out of range (64 to 2^40)");
        repeat = 1;  // each request served once; no hot figures
    } else if (coldBytes >= 0) fail("--cold-bytes needs --cold");
    std::sort(modes.begin(), modes.end());
    for (int32_t p : pageSizes)
        if (p <= 0 || kTraceBlock % p != 0) fail("page size " + std::to_string(p) + " does not divide 512");
    if (maxRecords < 0 || maxRecords > INT32_MAX) fail("--max-records out of range");
    if (candidateCap < 0 || candidateCap > INT32_MAX) fail("--hybrid-candidates out of range");
    if (snapshotSlotsOption > INT32_MAX / 4) fail("--snapshot-slots out of range");
    bool const wantHybrid = std::find(modes.begin(), modes.end(), Mode::kHybrid) != modes.end();

    std::vector<Request> requests;
    try {
        requests = loadTrace(trace, limit);
    } catch (std::runtime_error const& e) {
        fail(e.what());
    }
    std::unordered_set<uint64_t> distinct;
    int64_t traceBlocks = 0, maxRequestTokens = 0;
    for (Request const& r : requests) {
        distinct.insert(r.hashIds.begin(), r.hashIds.end());
        traceBlocks += static_cast<int64_t>(r.hashIds.size());
        maxRequestTokens = std::max<int64_t>(maxRequestTokens, static_cast<int64_t>(r.inputLength) + r.outputLength);
    }
    int64_t const distinctBlocks = static_cast<int64_t>(distinct.size());
    if (capacityBlocks < 0) capacityBlocks = distinctBlocks / 2;
    int64_t const snapshotSlots = snapshotSlotsOption >= 0
                                      ? snapshotSlotsOption
                                      : std::max<int64_t>(1, static_cast<int64_t>(requests.size()) / 2);

    BlockHasher const hasher(HashAlgorithm::kSha256, key);
    std::vector<int32_t> tokens;
    std::vector<std::string> results;
    for (int32_t pageSize : pageSizes) {
        int64_t const pagesPerBlock = kTraceBlock / pageSize;
        int64_t const capacityPages = capacityBlocks * pagesPerBlock;
        if (capacityPages > INT32_MAX) fail("capacity exceeds INT32_MAX pages");

        // Hashing phase: expand each request's tokens (untimed), then hash them --repeat times back to back
        // (timed: the first is the headline, the fastest the hot figure; repetitions after the first go to
        // scratch storage and must match it).
        // Hybrid: also the untimed reference hashExactPrefix(tokens[:n]) of every request.
        std::vector<std::vector<BlockHash>> hashes(requests.size());
        std::vector<BlockHash> exactDigests(wantHybrid ? requests.size() : 0);
        std::vector<BlockHash> scratch;
        std::vector<int64_t> hashRequestNs(requests.size(), 0), hotHashRequestNs(requests.size(), INT64_MAX);
        int64_t hashNs = 0, hotHashNs = 0, hashedTokens = 0, hashedBlocks = 0;
        uint64_t sumHi = 0, sumLo = 0;
        for (size_t i = 0; i < requests.size() && !coldMode; ++i) {  // cold: hashed in the replay loop
            expandTokens(requests[i], tokens);
            for (int pass = 0; pass < repeat; ++pass) {
                std::vector<BlockHash>& out = pass == 0 ? hashes[i] : scratch;
                out.clear();
                out.reserve(tokens.size() / static_cast<size_t>(pageSize));
                Clock::time_point const t0 = Clock::now();
                hasher.hashFullBlocksInto(tokens.data(), tokens.size(), pageSize, {}, nullptr, out);
                int64_t const t = ns(t0, Clock::now());
                if (pass == 0) hashRequestNs[i] = t;
                hotHashRequestNs[i] = std::min(hotHashRequestNs[i], t);
                if (pass > 0 && out != hashes[i]) fail("hashing is not deterministic");
            }
            if (wantHybrid) exactDigests[i] = hasher.hashExactPrefix(tokens.data(), tokens.size(), pageSize);
        }
        auto sumHashes = [&] {
            hashNs = hotHashNs = hashedBlocks = 0;
            sumHi = sumLo = 0;
            for (int64_t t : hashRequestNs) hashNs += t;
            for (int64_t t : hotHashRequestNs) hotHashNs += t;
            for (std::vector<BlockHash> const& hs : hashes) {
                hashedBlocks += static_cast<int64_t>(hs.size());
                for (BlockHash const& h : hs) sumHi += h.hi, sumLo += h.lo;
            }
            hashedTokens = hashedBlocks * pageSize;
        };
        if (!coldMode) sumHashes();
        std::unique_ptr<ColdLoop> cold;
        if (coldMode) cold = std::make_unique<ColdLoop>(hasher, coldBytes);

        for (Mode mode : modes) {
            auto runOnce = [&](int64_t basePages, int64_t slots, bool samplePeak, bool check) -> Replay {
                if (basePages > INT32_MAX || slots > INT32_MAX) fail("capacity exceeds INT32_MAX");
                int32_t const pages = static_cast<int32_t>(basePages), records = static_cast<int32_t>(maxRecords);
                switch (mode) {
                    case Mode::kVanilla:
                    case Mode::kSpec:
                        return replayPaged(requests, hashes, pageSize, pages, records, policy, samplePeak,
                                           mode == Mode::kSpec, check ? cold.get() : nullptr);
                    case Mode::kHybrid: break;
                }
                HybridOptions options;
                options.snapshotSlots = static_cast<int32_t>(slots);
                options.candidateCap = static_cast<int32_t>(candidateCap);
                options.hasher = &hasher;
                options.exactDigests = check ? &exactDigests : nullptr;
                return replayHybrid(requests, hashes, pageSize, pages, records, policy, options, samplePeak);
            };
            Replay run =
                bestOf(repeat, [&](int pass) { return runOnce(capacityPages, snapshotSlots, pass == 0, pass == 0); });
            if (coldMode) {  // this mode's own hashing, in its loop
                hashRequestNs = cold->hashNs;
                hotHashRequestNs = cold->hashNs;
                sumHashes();
            }

            Replay bound;
            int64_t boundCapacity = 0, boundSlots = 0;
            if (upperBound) {
                boundCapacity = distinctBlocks * pagesPerBlock + (maxRequestTokens + pageSize - 1) / pageSize + 1;
                boundSlots = static_cast<int64_t>(requests.size()) + 2;
                for (;;) {
                    if (boundCapacity > INT32_MAX) fail("upper-bound capacity exceeds INT32_MAX pages");
                    bound = runOnce(boundCapacity, mode == Mode::kHybrid ? boundSlots : 0, false, false);
                    if (bound.metrics.evictedRecords == 0 && bound.insufficientCapacity == 0 &&
                        bound.snapshotPressureSkips == 0)
                        break;
                    boundCapacity *= 2;
                    boundSlots *= 2;
                }
            }

            Json j;
            j.num("page_size", static_cast<int64_t>(pageSize));
            j.str("mode", modeName(mode));
            j.str("eviction_policy", toString(policy));
            char const* const retentionNames[] = {"none", "default", "stored", "mixed"};
            j.str("retention", retentionNames[static_cast<int>(gRetention)]);
            j.str("loop", coldMode ? "cold" : "hot");
            if (coldMode) j.num("cold_bytes", coldBytes);
            if (gHostTierPages > 0 && mode != Mode::kHybrid)
                j.num("host_tier_pages", static_cast<int64_t>(gHostTierPages));
            j.num("repeat", static_cast<int64_t>(repeat));
            j.num("requests", run.requests);
            j.num("distinct_blocks", distinctBlocks);
            j.num("trace_blocks", traceBlocks);
            j.num("capacity_blocks", capacityBlocks);
            j.num("capacity_pages", run.capacityPages);
            if (mode == Mode::kSpec) j.num("draft_capacity_pages", run.draftCapacityPages);
            if (mode == Mode::kHybrid) {
                j.num("snapshot_slots", run.snapshotSlots);
                j.num("hybrid_candidate_cap", candidateCap);
            }
            j.num("max_records", maxRecords);
            j.num("input_tokens", run.inputTokens);
            j.num("hashed_tokens", hashedTokens);
            j.num("hashed_blocks", hashedBlocks);
            j.str("hash_sum_hi", std::to_string(sumHi));
            j.str("hash_sum_lo", std::to_string(sumLo));
            if (mode == Mode::kHybrid) {
                j.num("candidate_lengths_offered", run.candidateLengthsOffered);
                j.num("candidates_tried", run.candidatesTried);
                j.num("digests", run.digests);
                j.num("digest_tokens", run.digestTokens);
                j.str("digest_sum_hi", std::to_string(run.digestSumHi));
                j.str("digest_sum_lo", std::to_string(run.digestSumLo));
            }
            j.num("acquired", run.acquired);
            j.num("insufficient_capacity", run.insufficientCapacity);
            j.num("grow_calls", run.growCalls);
            j.num("grow_failures", run.growFailures);
            if (mode == Mode::kHybrid) {
                j.num("reserve_calls", run.reserveCalls);
                j.num("snapshot_pressure_skips", run.snapshotPressureSkips);
            }
            j.num("publish_calls", run.publishCalls);
            j.num("published_new", run.publishedNew);
            j.num("published_existing", run.publishedExisting);
            j.num("manager_calls", run.managerCalls);
            j.num("reused_tokens", run.reusedTokens);
            j.num("matched_tokens", run.matchedTokens);
            if (mode != Mode::kVanilla) j.num("hits", run.hits);
            if (mode == Mode::kSpec) j.num("replayed_pages", run.replayedPages);
            if (gHostTierPages > 0 && mode != Mode::kHybrid) {
                j.num("reused_tokens_host", run.hostReusedTokens);
                j.num("host_written_blocks", run.hostWrittenBlocks);
                j.num("host_dropped_blocks", run.hostDroppedBlocks);
            }
            j.real("hit_rate", ratio(static_cast<double>(run.reusedTokens), static_cast<double>(run.inputTokens)));
            if (upperBound) {
                j.num("upper_bound_reused_tokens", bound.reusedTokens);
                j.real("upper_bound_hit_rate",
                       ratio(static_cast<double>(bound.reusedTokens), static_cast<double>(bound.inputTokens)));
                j.num("upper_bound_capacity_pages", boundCapacity);
                if (mode == Mode::kHybrid) j.num("upper_bound_snapshot_slots", boundSlots);
                j.num("upper_bound_cached_pages", bound.cachedPages);
                if (mode == Mode::kSpec) j.num("upper_bound_cached_draft_pages", bound.cachedDraftPages);
            }
            j.num("lease_pages", run.leasePages);
            if (mode == Mode::kSpec) {
                j.num("lease_base_pages", run.leaseBasePages);
                j.num("lease_draft_pages", run.leaseDraftPages);
            }
            j.num("published_blocks", run.publishedBlocks);
            j.num("pages_touched", run.pagesTouched);
            j.num("evicted_records", static_cast<uint64_t>(run.metrics.evictedRecords));
            j.num("superseded_records", static_cast<uint64_t>(run.metrics.supersededRecords));
            j.num("trimmed_records", static_cast<uint64_t>(run.metrics.trimmedRecords));
            j.num("reclaimed_base_pages", static_cast<uint64_t>(run.metrics.reclaimedBaseKvPages));
            if (mode == Mode::kSpec)
                j.num("reclaimed_draft_pages", static_cast<uint64_t>(run.metrics.reclaimedDraftKvPages));
            if (mode == Mode::kHybrid) {
                j.num("reclaimed_recurrent_snapshots", static_cast<uint64_t>(run.metrics.reclaimedRecurrentSnapshots));
                j.num("reclaimed_partial_kv_snapshots", static_cast<uint64_t>(run.metrics.reclaimedPartialKvSnapshots));
            }
            j.num("records", run.records);
            j.num("base_index_entries", run.baseIndexEntries);
            j.num("cached_pages", run.cachedPages);
            if (mode == Mode::kSpec) j.num("cached_draft_pages", run.cachedDraftPages);
            if (mode == Mode::kHybrid) {
                j.num("cached_recurrent_snapshots", run.cachedRecurrentSlots);
                j.num("cached_partial_kv_snapshots", run.cachedPartialSlots);
            }
            j.num("metadata_bytes", run.metadataBytes);
            j.real("metadata_bytes_per_cached_block",
                   ratio(static_cast<double>(run.metadataBytes), static_cast<double>(run.cachedPages)));
            if (mode == Mode::kSpec)
                j.real("metadata_bytes_per_cached_page",
                       ratio(static_cast<double>(run.metadataBytes),
                             static_cast<double>(run.cachedPages + run.cachedDraftPages)));
            j.num("peak_metadata_bytes", run.peakMetadataBytes);
            {  // C++ only (the C ABI reports the total): where the metadata bytes per cached block go
                Json b;
                double const cached = static_cast<double>(run.cachedPages);
                b.real("pools", ratio(static_cast<double>(run.poolBytes), cached));
                b.real("base_index", ratio(static_cast<double>(run.baseIndexBytes), cached));
                b.real("draft_index", ratio(static_cast<double>(run.draftIndexBytes), cached));
                b.real("records", ratio(static_cast<double>(run.recordBytes), cached));
                b.real("manager_object",
                       ratio(static_cast<double>(run.metadataBytes - run.poolBytes - run.baseIndexBytes -
                                                 run.draftIndexBytes - run.recordBytes),
                             cached));
                j.raw("cpp_metadata_bytes_per_cached_block_by_part", b.done());
            }
            // timings
            double const hashS = static_cast<double>(hashNs) * 1e-9,
                         managerS = static_cast<double>(run.managerNs) * 1e-9;
            double const digestS = static_cast<double>(run.digestNs) * 1e-9;
            j.real("hash_seconds", hashS);
            if (mode == Mode::kHybrid) j.real("digest_seconds", digestS);
            j.real("manager_seconds", managerS);
            if (!run.acquireNs.empty()) {  // vanilla and spec: where the time goes, and the acquire tail
                std::vector<int64_t> a = run.acquireNs;
                std::sort(a.begin(), a.end());
                auto at = [&](double q) {  // nearest rank
                    size_t const k = static_cast<size_t>(q * static_cast<double>(a.size() - 1) + 0.5);
                    return static_cast<double>(a[k]) * 1e-3;
                };
                j.real("acquire_p50_us", at(0.50));
                j.real("acquire_p99_us", at(0.99));
                j.real("acquire_max_us", at(1.0));
                Json b;
                char const* const names[4] = {"acquire", "grow", "publish", "release"};
                for (int k = 0; k < 4; ++k) b.real(names[k], static_cast<double>(run.opNs[k]) * 1e-9);
                j.raw("manager_seconds_by_operation", b.done());
            }
            j.real("hash_ns_per_token", ratio(static_cast<double>(hashNs), static_cast<double>(hashedTokens)));
            if (mode == Mode::kHybrid) {
                j.real("digest_ns_per_token",
                       ratio(static_cast<double>(run.digestNs), static_cast<double>(hashedTokens)));
                j.real("digest_ns_per_digest",
                       ratio(static_cast<double>(run.digestNs), static_cast<double>(run.digests)));
            }
            j.real("manager_ns_per_page_touched",
                   ratio(static_cast<double>(run.managerNs), static_cast<double>(run.pagesTouched)));
            j.real("manager_ns_per_call",
                   ratio(static_cast<double>(run.managerNs), static_cast<double>(run.managerCalls)));
            j.real("manager_requests_per_second", ratio(static_cast<double>(run.requests), managerS));
            j.real("requests_per_second", ratio(static_cast<double>(run.requests), hashS + digestS + managerS));
            // hot: each request's fastest of the --repeat passes (caches warm from the identical passes before);
            // the cold loop has none
            if (coldMode) {
                results.push_back(j.done());
                continue;
            }
            double const hotS = static_cast<double>(hotHashNs + run.hotDigestNs + run.hotManagerNs) * 1e-9;
            j.real("hot_hash_ns_per_token", ratio(static_cast<double>(hotHashNs), static_cast<double>(hashedTokens)));
            if (mode == Mode::kHybrid)
                j.real("hot_digest_ns_per_token",
                       ratio(static_cast<double>(run.hotDigestNs), static_cast<double>(hashedTokens)));
            j.real("hot_manager_ns_per_page_touched",
                   ratio(static_cast<double>(run.hotManagerNs), static_cast<double>(run.pagesTouched)));
            j.real("hot_manager_ns_per_call",
                   ratio(static_cast<double>(run.hotManagerNs), static_cast<double>(run.managerCalls)));
            j.real("hot_requests_per_second", ratio(static_cast<double>(run.requests), hotS));
            results.push_back(j.done());
        }
    }

    Json top;
    top.str("path", "c++");
    top.str("trace", trace);
    top.str("hash", "sha256-keyed");
    std::string list = "[";
    for (size_t i = 0; i < results.size(); ++i) list += (i ? ", " : "") + results[i];
    list += "]";
    top.raw("results", list);
    std::cout << top.done() << std::endl;
    return 0;
}
