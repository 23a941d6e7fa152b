// C ABI of include/ctxcache/c/store.h: a bookkeeping store, shared (shared_ptr) by its handle and the host tiers
// that use it (host_tier_api.cpp), so that destroying the handle first leaves the tiers a live store; a byte store
// over a runtime's callbacks (CallbackKvStore: the table's release runs when the last holder lets go) or in
// process (MemoryKvStore), shared the same way with the coordinators whose host tiers use it.
#include "ctxcache/c/store.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "api_support.h"
#include "ctxcache/tier/memory_kv_store.h"
#include "handles.h"
#include "store_link_options.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

tier::BookkeepingStore& requireStore(void const* handle) { return *requireObject(stores(), handle, "store").store; }

// A runtime's store behind the C callback table. Keys go out NUL-terminated (std::string's c_str); a callback
// that leaves a result unset leaves the worker's kStoreFailed there (results are prefilled).
class CallbackKvStore final : public tier::KvStore {
public:
    explicit CallbackKvStore(ctxc_kv_store_callbacks_t const& c) : c_(c) {}
    ~CallbackKvStore() override {
        if (c_.release) c_.release(c_.user);
    }
    void exist(std::string const* keys, size_t count, tier::StoreDeadline deadline, int64_t* results) override {
        std::vector<char const*> const k = names(keys, count);
        c_.exist(c_.user, k.data(), count, nanos(deadline), results);
    }
    void put(std::string const* keys, void const* const* data, size_t const* sizes, size_t count,
             tier::StoreDeadline deadline, int64_t* results) override {
        std::vector<char const*> const k = names(keys, count);
        c_.put(c_.user, k.data(), data, sizes, count, nanos(deadline), results);
    }
    void get(std::string const* keys, void* const* buffers, size_t const* capacities, size_t count,
             tier::StoreDeadline deadline, int64_t* results) override {
        std::vector<char const*> const k = names(keys, count);
        c_.get(c_.user, k.data(), buffers, capacities, count, nanos(deadline), results);
    }

private:
    static std::vector<char const*> names(std::string const* keys, size_t count) {
        std::vector<char const*> out(count);
        for (size_t i = 0; i < count; ++i) out[i] = keys[i].c_str();
        return out;
    }
    // steady_clock is CLOCK_MONOTONIC on the platforms the library builds for.
    static int64_t nanos(tier::StoreDeadline d) {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(d.time_since_epoch()).count();
    }
    ctxc_kv_store_callbacks_t const c_;
};

}  // namespace

tier::StoreLinkOptions ctxcache::capi::storeLinkOptionsOf(ctxc_store_link_options_t const* options, char const* name,
                                                          std::string* model) {
    ctxc_store_link_options_t const& o = requireSized(options, name);
    std::string const n = name;
    tier::StoreLinkOptions link;
    link.store = requireObject(kvStores(), o.store, (n + "->store").c_str()).store;
    if (o.policy != CTXC_STORE_LOAD_WAIT && o.policy != CTXC_STORE_LOAD_BEST_EFFORT)
        invalidArgument(n + "->policy must be CTXC_STORE_LOAD_* (got " + std::to_string(o.policy) + ")");
    if (o.min_ask_blocks < 1)
        invalidArgument(n + "->min_ask_blocks must be >= 1 (got " + std::to_string(o.min_ask_blocks) + ")");
    if (o.load_deadline_us < 0 || o.put_deadline_us <= 0 || o.negative_ttl_ms < 0)
        invalidArgument(n + "->load_deadline_us and negative_ttl_ms must be >= 0 and put_deadline_us > 0");
    constexpr int64_t kHour = int64_t{3600} * 1000 * 1000;  // microseconds: no deadline of ours is longer
    if (o.load_deadline_us > kHour || o.put_deadline_us > kHour || o.negative_ttl_ms > kHour / 1000 * 24)
        invalidArgument(n + ": deadlines above an hour (a negative TTL above a day) are refused");
    link.policy = static_cast<tier::StoreLoadPolicy>(o.policy);
    link.minAskBlocks = o.min_ask_blocks;
    link.loadDeadline = std::chrono::microseconds(o.load_deadline_us);
    link.putDeadline = std::chrono::microseconds(o.put_deadline_us);
    link.negativeTtl = std::chrono::milliseconds(o.negative_ttl_ms);
    std::string const m = o.model ? std::string(o.model) : std::string("ctxcache");
    if (m.empty() || m.size() > 256 || m.find('@') != std::string::npos)
        invalidArgument(n + "->model must be 1 to 256 bytes without '@'");
    *model = m;
    return link;
}

extern "C" {

CTXC_API ctxc_status_t ctxc_kv_store_create(const ctxc_kv_store_callbacks_t* callbacks, ctxc_kv_store_t** out_store) {
    return guard(__func__, [&] {
        requireOut(out_store, "out_store") = nullptr;
        ctxc_kv_store_callbacks_t const& c = requireSized(callbacks, "callbacks");
        if (!c.exist || !c.put || !c.get) invalidArgument("callbacks->exist, put and get are required");
        auto object = std::make_unique<KvStoreObject>();
        object->store = std::make_shared<CallbackKvStore>(c);
        *out_store = addObject<ctxc_kv_store_t>(kvStores(), std::move(object));
    });
}

CTXC_API ctxc_status_t ctxc_memory_kv_store_create(uint64_t capacity_bytes, ctxc_kv_store_t** out_store) {
    return guard(__func__, [&] {
        requireOut(out_store, "out_store") = nullptr;
        auto object = std::make_unique<KvStoreObject>();
        object->store = std::make_shared<tier::MemoryKvStore>(static_cast<size_t>(capacity_bytes));
        *out_store = addObject<ctxc_kv_store_t>(kvStores(), std::move(object));
    });
}

CTXC_API ctxc_status_t ctxc_kv_store_destroy(ctxc_kv_store_t* store) {
    return guard(__func__, [&] { destroyObject(kvStores(), store, "store"); });
}

CTXC_API void ctxc_store_link_options_init(ctxc_store_link_options_t* options) {
    if (!initSized(options)) return;
    tier::StoreLinkOptions const d;
    options->policy = CTXC_STORE_LOAD_WAIT;
    options->min_ask_blocks = d.minAskBlocks;
    options->load_deadline_us = d.loadDeadline.count();
    options->put_deadline_us = d.putDeadline.count();
    options->negative_ttl_ms = d.negativeTtl.count();
}

CTXC_API void ctxc_bookkeeping_store_options_init(ctxc_bookkeeping_store_options_t* options) { initSized(options); }

CTXC_API ctxc_status_t ctxc_bookkeeping_store_create(const ctxc_bookkeeping_store_options_t* options,
                                                     ctxc_bookkeeping_store_t** out_store) {
    return guard(__func__, [&] {
        requireOut(out_store, "out_store") = nullptr;
        ctxc_bookkeeping_store_options_t const& o = requireSized(options, "options");
        if (o.capacity_pages <= 0)
            invalidArgument("options->capacity_pages must be positive (got " + std::to_string(o.capacity_pages) + ")");
        auto object = std::make_unique<StoreObject>();
        object->store = std::make_shared<tier::BookkeepingStore>(o.capacity_pages);
        *out_store = addObject<ctxc_bookkeeping_store_t>(stores(), std::move(object));
    });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_destroy(ctxc_bookkeeping_store_t* store) {
    return guard(__func__, [&] { destroyObject(stores(), store, "store"); });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_probe(const ctxc_bookkeeping_store_t* store, const ctxc_hash128_t* hashes,
                                                    size_t count, size_t* out_blocks) {
    return guard(__func__, [&] {
        requireOut(out_blocks, "out_blocks") = 0;
        tier::BookkeepingStore const& s = requireStore(store);
        BlockHashSpan const span = inputHashes(hashes, count);
        *out_blocks = s.probe(span.data, span.size);
    });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_metrics(const ctxc_bookkeeping_store_t* store,
                                                      ctxc_bookkeeping_store_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        ctxc_bookkeeping_store_metrics_t& o = requireSized(out_metrics, "out_metrics");
        tier::BookkeepingStore const& s = requireStore(store);
        tier::BookkeepingStoreMetrics const m = s.metrics();
        o.capacity_pages = m.capacityPages;
        o.resident_blocks = m.residentBlocks;
        o.put_calls = m.putCalls;
        o.written_blocks = m.writtenBlocks;
        o.skipped_puts = m.skippedPuts;
        o.refused_puts = m.refusedPuts;
        o.dropped_blocks = m.droppedBlocks;
        o.get_calls = m.getCalls;
        o.hit_calls = m.hitCalls;
        o.hit_blocks = m.hitBlocks;
        o.metadata_bytes = s.memoryBytes();
    });
}

CTXC_API ctxc_status_t ctxc_bookkeeping_store_check_invariants(const ctxc_bookkeeping_store_t* store) {
    return guard(__func__, [&] { requireStore(store).checkInvariants(); });
}

}  // extern "C"
