// bench_manager: replay a Mooncake-format trace through the context cache manager (C++ path).
//
//   bench_manager [--trace PATH] [--requests N] [--page-size P]... [--capacity-blocks B] [--max-records R]
//                 [--key STRING] [--repeat K] [--no-upper-bound]
//
// Prints one JSON object on stdout: {"path": "c++", ..., "results": [one object per page size]}.
// python/ctxcache/bench.py is the same benchmark through the Python package; tools/bench_manager runs both and
// checks that every non-timing figure agrees. The definitions below are shared by both and must stay identical.
//
// Token expansion: hash id h becomes the 512 pseudo-tokens
//     token[j] = int32(splitmix64(h * 512 + j) mod 32000),  j = 0..511   (all arithmetic mod 2^64)
// and a request's tokens are the concatenation over its hash_ids, truncated to input_length. Page sizes that
// divide 512 keep the trace's sharing structure exactly.
//
// Per request (file order, stably sorted by timestamp):
//     hashes = keyed SHA-256 hashFullBlocks(tokens, P)                           [hashing phase, timed apart]
//     acquireVanilla(hashes, input_length); INSUFFICIENT_CAPACITY: counted, request skipped
//     growBasePages(lease, ceil((input_length + output_length) / P) - lease pages)  if > 0 (failure counted)
//     publish(lease, {hashes, input_length})                                      if any full block
//     release(lease)
// Capacity: base pool = floor(distinct 512-token blocks of the replayed requests / 2) * (512 / P) pages (or
// --capacity-blocks B: B * 512 / P); max records 1,000,000 by default so that only capacity pressure evicts.
// Upper bound: the same replay with a pool no request can exhaust (distinct blocks * 512/P + the largest
// request, doubled until nothing is evicted).
//
// Figures: hit rate = sum(reuse_token_length) / sum(input_length). Pages touched per request = pages in the
// lease after growth + blocks published. Manager time = acquire + grow + publish + release (hashing excluded),
// ns per page touched = manager time / pages touched. Hash ns per token = hashing time / tokens hashed (full
// blocks * P). requests/s = requests / (hashing time + manager time). Metadata bytes per cached block =
// metadataBytes() / cached base pages (pages with a cache ref: capacity - free after the last release), at the
// end of the run; the peak of metadataBytes() is sampled after every request, outside the timed region.
// Timings: each request is hashed --repeat K times back to back (default 5) and the whole replay is run K times
// (a fresh manager per replay, whose figures must repeat exactly); every request counts with its fastest
// repetition (they do identical work, so this filters out preemption and other noise of a shared machine).
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"

using namespace ctxcache;

namespace {

constexpr int32_t kTraceBlock = 512;
constexpr char const* kDefaultTrace = "../shared/data/mooncake_synthetic_trace.jsonl";
constexpr char const* kDefaultKey = "ctxcache-bench-key";

struct Request {
    int64_t timestamp = 0;
    int32_t inputLength = 0;
    int32_t outputLength = 0;
    std::vector<uint64_t> hashIds;
};

[[noreturn]] void fail(std::string const& why) {
    std::fprintf(stderr, "bench_manager: %s\n", why.c_str());
    std::exit(2);
}

// ---- a tiny parser for the fixed JSONL format ----------------------------------------------------------------

class LineParser {
public:
    LineParser(std::string const& line, size_t lineNo) : s_(line), lineNo_(lineNo) {}

    Request parse() {
        Request r;
        bool seen[4] = {};
        expect('{');
        skipSpace();
        if (peek() == '}') fail(where("empty object"));
        for (;;) {
            std::string const key = string();
            expect(':');
            if (key == "timestamp") r.timestamp = integer(), seen[0] = true;
            else if (key == "input_length") r.inputLength = static_cast<int32_t>(integer()), seen[1] = true;
            else if (key == "output_length") r.outputLength = static_cast<int32_t>(integer()), seen[2] = true;
            else if (key == "hash_ids") {
                expect('[');
                skipSpace();
                if (peek() == ']') ++i_;
                else
                    for (;;) {
                        int64_t const id = integer();
                        if (id < 0) fail(where("negative hash id"));
                        r.hashIds.push_back(static_cast<uint64_t>(id));
                        skipSpace();
                        if (peek() == ',') { ++i_; continue; }
                        expect(']');
                        break;
                    }
                seen[3] = true;
            } else {
                fail(where("unknown key \"" + key + "\""));
            }
            skipSpace();
            if (peek() == ',') { ++i_; continue; }
            expect('}');
            break;
        }
        if (!(seen[0] && seen[1] && seen[2] && seen[3])) fail(where("missing field"));
        if (r.inputLength < 0 || r.outputLength < 0) fail(where("negative length"));
        if (static_cast<int64_t>(r.hashIds.size()) * kTraceBlock < r.inputLength)
            fail(where("hash_ids do not cover input_length"));
        return r;
    }

private:
    std::string where(std::string const& why) const {
        return "trace line " + std::to_string(lineNo_) + ": " + why;
    }
    void skipSpace() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) ++i_;
    }
    char peek() {
        skipSpace();
        return i_ < s_.size() ? s_[i_] : '\0';
    }
    void expect(char c) {
        if (peek() != c) fail(where(std::string("expected '") + c + "'"));
        ++i_;
    }
    std::string string() {
        expect('"');
        size_t const end = s_.find('"', i_);
        if (end == std::string::npos) fail(where("unterminated string"));
        std::string out = s_.substr(i_, end - i_);
        i_ = end + 1;
        return out;
    }
    int64_t integer() {
        skipSpace();
        bool negative = false;
        if (i_ < s_.size() && s_[i_] == '-') negative = true, ++i_;
        if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail(where("expected an integer"));
        int64_t v = 0;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') v = v * 10 + (s_[i_++] - '0');
        if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) fail(where("expected an integer"));
        return negative ? -v : v;
    }

    std::string const& s_;
    size_t lineNo_;
    size_t i_ = 0;
};

std::vector<Request> loadTrace(std::string const& path, int64_t limit) {
    std::ifstream in(path);
    if (!in) fail("cannot open trace " + path);
    std::vector<Request> requests;
    std::string line;
    size_t lineNo = 0;
    while ((limit < 0 || static_cast<int64_t>(requests.size()) < limit) && std::getline(in, line)) {
        ++lineNo;
        if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
        requests.push_back(LineParser(line, lineNo).parse());
    }
    std::stable_sort(requests.begin(), requests.end(),
                     [](Request const& a, Request const& b) { return a.timestamp < b.timestamp; });
    return requests;
}

// ---- token expansion (identical in python/ctxcache/bench.py) -----------------------------------------------

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
    int64_t matchedTokens = 0;
    int64_t pagesTouched = 0;
    int64_t leasePages = 0;
    int64_t publishedBlocks = 0;
    int64_t managerNs = 0;
    std::vector<int64_t> requestNs;  // manager time of each request
    int64_t capacityPages = 0;
    int64_t cachedPages = 0;
    int64_t records = 0;
    int64_t baseIndexEntries = 0;
    int64_t metadataBytes = 0;
    int64_t peakMetadataBytes = 0;
    int64_t poolBytes = 0, baseIndexBytes = 0, draftIndexBytes = 0, recordBytes = 0;  // metadataBytes() parts
    ContextCacheManagerMetrics metrics;
};

Replay replay(std::vector<Request> const& requests, std::vector<std::vector<BlockHash>>& hashes, int32_t pageSize,
              int32_t capacityPages, int32_t maxRecords, bool samplePeak) {
    ResourceDemand capacities;
    capacities.baseKvPages = capacityPages;
    ContextCacheManager manager(pageSize, capacities, maxRecords);
    Replay out;
    out.capacityPages = capacityPages;
    out.requestNs.assign(requests.size(), 0);
    PublishRequest publish;
    for (size_t i = 0; i < requests.size(); ++i) {
        Request const& r = requests[i];
        std::vector<BlockHash>& h = hashes[i];
        ++out.requests;
        out.inputTokens += r.inputLength;
        int64_t const totalPages = (static_cast<int64_t>(r.inputLength) + r.outputLength + pageSize - 1) / pageSize;

        Clock::time_point const t0 = Clock::now();
        AcquireResult acquired = manager.acquireVanilla(h, r.inputLength);
        if (!acquired.lease) {
            Clock::time_point const t1 = Clock::now();
            out.requestNs[i] = ns(t0, t1);
            out.managerNs += out.requestNs[i];
            ++out.managerCalls;
            ++out.insufficientCapacity;
            continue;
        }
        CacheRequestLease& lease = *acquired.lease;
        int64_t const grow = totalPages - static_cast<int64_t>(lease.basePages().size());
        bool grown = true;
        if (grow > 0) grown = manager.growBasePages(lease, static_cast<int32_t>(grow));
        int64_t const pagesAfterGrowth = static_cast<int64_t>(lease.basePages().size());
        int32_t published = 0;
        PublishStatus status = PublishStatus::kPublished;
        if (!h.empty()) {
            publish.fullBlockHashes.swap(h);  // the caller's hashes, moved in and back (no copy)
            publish.residentStateLength = r.inputLength;
            PublishResult const result = manager.publish(lease, publish);
            publish.fullBlockHashes.swap(h);
            published = result.publishedBaseFullBlockCount;
            status = result.status;
        }
        lease.release();
        Clock::time_point const t1 = Clock::now();

        out.requestNs[i] = ns(t0, t1);
        out.managerNs += out.requestNs[i];
        ++out.acquired;
        out.managerCalls += 2;  // acquire + release
        out.reusedTokens += acquired.plan.reuseTokenLength;
        out.matchedTokens += acquired.plan.matchedTokenLength;
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
        out.leasePages += pagesAfterGrowth;
        out.publishedBlocks += published;
        out.pagesTouched += pagesAfterGrowth + published;
        if (samplePeak) out.peakMetadataBytes = std::max<int64_t>(out.peakMetadataBytes, static_cast<int64_t>(manager.metadataBytes()));
    }
    manager.checkInvariants();
    out.cachedPages = capacityPages - manager.pools().freeCount(ResourceType::kBaseKvPage);
    out.records = static_cast<int64_t>(manager.records().size());
    out.baseIndexEntries = static_cast<int64_t>(manager.baseIndex().size());
    out.metadataBytes = static_cast<int64_t>(manager.metadataBytes());
    out.poolBytes = static_cast<int64_t>(manager.pools().memoryBytes());
    out.baseIndexBytes = static_cast<int64_t>(manager.baseIndex().memoryBytes());
    out.draftIndexBytes = static_cast<int64_t>(manager.draftIndex().memoryBytes());
    out.recordBytes = static_cast<int64_t>(manager.records().memoryBytes());
    out.peakMetadataBytes = std::max(out.peakMetadataBytes, out.metadataBytes);
    out.metrics = manager.metrics();
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

int main(int argc, char** argv) {
    std::string trace = kDefaultTrace;
    std::string key = kDefaultKey;
    int64_t limit = -1;
    int64_t capacityBlocks = -1;
    int64_t maxRecords = 1000000;
    bool upperBound = true;
    int repeat = 5;
    std::vector<int32_t> pageSizes;
    for (int i = 1; i < argc; ++i) {
        std::string const a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail(a + " needs a value");
            return argv[++i];
        };
        if (a == "--trace") trace = value();
        else if (a == "--requests") limit = std::stoll(value());
        else if (a == "--page-size") pageSizes.push_back(static_cast<int32_t>(std::stol(value())));
        else if (a == "--capacity-blocks") capacityBlocks = std::stoll(value());
        else if (a == "--max-records") maxRecords = std::stoll(value());
        else if (a == "--key") key = value();
        else if (a == "--repeat") repeat = std::max(1, std::stoi(value()));
        else if (a == "--no-upper-bound") upperBound = false;
        else if (a == "-h" || a == "--help") {
            std::puts("bench_manager [--trace PATH] [--requests N] [--page-size P]... [--capacity-blocks B] "
                      "[--max-records R] [--key STRING] [--repeat K] [--no-upper-bound]");
            return 0;
        } else fail("unknown argument " + a);
    }
    if (pageSizes.empty()) pageSizes = {16, 128};
    for (int32_t p : pageSizes)
        if (p <= 0 || kTraceBlock % p != 0) fail("page size " + std::to_string(p) + " does not divide 512");
    if (maxRecords < 0 || maxRecords > INT32_MAX) fail("--max-records out of range");

    std::vector<Request> const requests = loadTrace(trace, limit);
    std::unordered_set<uint64_t> distinct;
    int64_t traceBlocks = 0, maxRequestTokens = 0;
    for (Request const& r : requests) {
        distinct.insert(r.hashIds.begin(), r.hashIds.end());
        traceBlocks += static_cast<int64_t>(r.hashIds.size());
        maxRequestTokens = std::max<int64_t>(maxRequestTokens, static_cast<int64_t>(r.inputLength) + r.outputLength);
    }
    int64_t const distinctBlocks = static_cast<int64_t>(distinct.size());
    if (capacityBlocks < 0) capacityBlocks = distinctBlocks / 2;

    BlockHasher const hasher(HashAlgorithm::kSha256, key);
    std::vector<int32_t> tokens;
    std::vector<std::string> results;
    for (int32_t pageSize : pageSizes) {
        int64_t const pagesPerBlock = kTraceBlock / pageSize;
        int64_t const capacityPages = capacityBlocks * pagesPerBlock;
        if (capacityPages > INT32_MAX) fail("capacity exceeds INT32_MAX pages");

        // Hashing phase: expand each request's tokens (untimed), then hash them --repeat times back to back
        // (timed; the fastest counts; repetitions after the first go to scratch storage and must match it).
        std::vector<std::vector<BlockHash>> hashes(requests.size());
        std::vector<BlockHash> scratch;
        std::vector<int64_t> hashRequestNs(requests.size(), INT64_MAX);
        int64_t hashNs = 0, hashedTokens = 0, hashedBlocks = 0;
        uint64_t sumHi = 0, sumLo = 0;
        for (size_t i = 0; i < requests.size(); ++i) {
            expandTokens(requests[i], tokens);
            for (int pass = 0; pass < repeat; ++pass) {
                std::vector<BlockHash>& out = pass == 0 ? hashes[i] : scratch;
                out.clear();
                out.reserve(tokens.size() / static_cast<size_t>(pageSize));
                Clock::time_point const t0 = Clock::now();
                hasher.hashFullBlocksInto(tokens.data(), tokens.size(), pageSize, {}, nullptr, out);
                hashRequestNs[i] = std::min(hashRequestNs[i], ns(t0, Clock::now()));
                if (pass > 0 && out != hashes[i]) fail("hashing is not deterministic");
            }
        }
        for (int64_t t : hashRequestNs) hashNs += t;
        for (std::vector<BlockHash> const& hs : hashes) {
            hashedBlocks += static_cast<int64_t>(hs.size());
            for (BlockHash const& h : hs) sumHi += h.hi, sumLo += h.lo;
        }
        hashedTokens = hashedBlocks * pageSize;

        Replay run;
        for (int pass = 0; pass < repeat; ++pass) {
            Replay const r = replay(requests, hashes, pageSize, static_cast<int32_t>(capacityPages),
                                    static_cast<int32_t>(maxRecords), pass == 0);
            if (pass == 0) {
                run = r;
                continue;
            }
            if (r.reusedTokens != run.reusedTokens || r.pagesTouched != run.pagesTouched ||
                r.metrics.evictedRecords != run.metrics.evictedRecords || r.metadataBytes != run.metadataBytes)
                fail("the replay is not deterministic");
            for (size_t i = 0; i < run.requestNs.size(); ++i) run.requestNs[i] = std::min(run.requestNs[i], r.requestNs[i]);
        }
        run.managerNs = 0;
        for (int64_t t : run.requestNs) run.managerNs += t;

        Replay bound;
        int64_t boundCapacity = 0;
        if (upperBound) {
            boundCapacity = distinctBlocks * pagesPerBlock + (maxRequestTokens + pageSize - 1) / pageSize + 1;
            for (;;) {
                if (boundCapacity > INT32_MAX) fail("upper-bound capacity exceeds INT32_MAX pages");
                bound = replay(requests, hashes, pageSize, static_cast<int32_t>(boundCapacity),
                               static_cast<int32_t>(maxRecords), false);
                if (bound.metrics.evictedRecords == 0 && bound.insufficientCapacity == 0) break;
                boundCapacity *= 2;
            }
        }

        Json j;
        j.num("page_size", static_cast<int64_t>(pageSize));
        j.num("repeat", static_cast<int64_t>(repeat));
        j.num("requests", run.requests);
        j.num("distinct_blocks", distinctBlocks);
        j.num("trace_blocks", traceBlocks);
        j.num("capacity_blocks", capacityBlocks);
        j.num("capacity_pages", run.capacityPages);
        j.num("max_records", maxRecords);
        j.num("input_tokens", run.inputTokens);
        j.num("hashed_tokens", hashedTokens);
        j.num("hashed_blocks", hashedBlocks);
        j.str("hash_sum_hi", std::to_string(sumHi));
        j.str("hash_sum_lo", std::to_string(sumLo));
        j.num("acquired", run.acquired);
        j.num("insufficient_capacity", run.insufficientCapacity);
        j.num("grow_calls", run.growCalls);
        j.num("grow_failures", run.growFailures);
        j.num("publish_calls", run.publishCalls);
        j.num("published_new", run.publishedNew);
        j.num("published_existing", run.publishedExisting);
        j.num("manager_calls", run.managerCalls);
        j.num("reused_tokens", run.reusedTokens);
        j.num("matched_tokens", run.matchedTokens);
        j.real("hit_rate", ratio(static_cast<double>(run.reusedTokens), static_cast<double>(run.inputTokens)));
        if (upperBound) {
            j.num("upper_bound_reused_tokens", bound.reusedTokens);
            j.real("upper_bound_hit_rate", ratio(static_cast<double>(bound.reusedTokens), static_cast<double>(bound.inputTokens)));
            j.num("upper_bound_capacity_pages", boundCapacity);
            j.num("upper_bound_cached_pages", bound.cachedPages);
        }
        j.num("lease_pages", run.leasePages);
        j.num("published_blocks", run.publishedBlocks);
        j.num("pages_touched", run.pagesTouched);
        j.num("evicted_records", static_cast<uint64_t>(run.metrics.evictedRecords));
        j.num("reclaimed_base_pages", static_cast<uint64_t>(run.metrics.reclaimedBaseKvPages));
        j.num("records", run.records);
        j.num("base_index_entries", run.baseIndexEntries);
        j.num("cached_pages", run.cachedPages);
        j.num("metadata_bytes", run.metadataBytes);
        j.real("metadata_bytes_per_cached_block", ratio(static_cast<double>(run.metadataBytes), static_cast<double>(run.cachedPages)));
        j.num("peak_metadata_bytes", run.peakMetadataBytes);
        {  // C++ only (the C ABI reports the total): where the metadata bytes per cached block go
            Json b;
            double const cached = static_cast<double>(run.cachedPages);
            b.real("pools", ratio(static_cast<double>(run.poolBytes), cached));
            b.real("base_index", ratio(static_cast<double>(run.baseIndexBytes), cached));
            b.real("draft_index", ratio(static_cast<double>(run.draftIndexBytes), cached));
            b.real("records", ratio(static_cast<double>(run.recordBytes), cached));
            b.real("manager_object", ratio(static_cast<double>(run.metadataBytes - run.poolBytes - run.baseIndexBytes -
                                                               run.draftIndexBytes - run.recordBytes), cached));
            j.raw("cpp_metadata_bytes_per_cached_block_by_part", b.done());
        }
        // timings
        double const hashS = static_cast<double>(hashNs) * 1e-9, managerS = static_cast<double>(run.managerNs) * 1e-9;
        j.real("hash_seconds", hashS);
        j.real("manager_seconds", managerS);
        j.real("hash_ns_per_token", ratio(static_cast<double>(hashNs), static_cast<double>(hashedTokens)));
        j.real("manager_ns_per_page_touched", ratio(static_cast<double>(run.managerNs), static_cast<double>(run.pagesTouched)));
        j.real("manager_ns_per_call", ratio(static_cast<double>(run.managerNs), static_cast<double>(run.managerCalls)));
        j.real("manager_requests_per_second", ratio(static_cast<double>(run.requests), managerS));
        j.real("requests_per_second", ratio(static_cast<double>(run.requests), hashS + managerS));
        results.push_back(j.done());
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
