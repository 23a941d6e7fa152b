// C ABI of include/ctxcache/c/kv_events.h: KV events (enable, drain, status, publisher attachment) and the ZMQ
// publisher's handle.
#include "ctxcache/c/kv_events.h"

#include <memory>
#include <string>
#include <vector>

#include "api_support.h"
#include "ctxcache.h"
#include "ctxcache/events/kv_event_publisher.h"
#include "ctxcache/kv_events.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

static_assert(static_cast<int>(KvEventType::kBlockStored) == CTXC_KV_EVENT_BLOCK_STORED);
static_assert(static_cast<int>(KvEventType::kBlockRemoved) == CTXC_KV_EVENT_BLOCK_REMOVED);
static_assert(static_cast<int>(KvEventType::kAllBlocksCleared) == CTXC_KV_EVENT_ALL_BLOCKS_CLEARED);
static_assert(static_cast<int>(KvEventExtraKeyKind::kLoraName) == CTXC_KV_EXTRA_KEY_LORA_NAME);
static_assert(static_cast<int>(KvEventExtraKeyKind::kMedia) == CTXC_KV_EXTRA_KEY_MEDIA);

struct PublisherObject {
    std::shared_ptr<KvEventPublisher> publisher;
};

auto& publishers() { return handleTable<PublisherObject, 0xD3>(); }

std::shared_ptr<KvEventPublisher> const& requirePublisher(void const* handle) {
    return requireObject(publishers(), handle, "publisher").publisher;
}

}  // namespace

KvEventPublisher* ctxcache::capi::findPublisher(void const* handle) {
    PublisherObject* p = publishers().find(handle);
    return p ? p->publisher.get() : nullptr;
}

// A manager handle, or the manager inside a coordinator or a sim engine.
KvEventTarget ctxcache::capi::requireCache(void const* handle) {
    if (ManagerObject* m = managers().find(handle)) return {m->manager.get(), &m->kvEvents};
    if (KvEventTarget t = coordinatorKvEvents(handle); t.manager) return t;
    if (KvEventTarget t = simEngineKvEvents(handle); t.manager) return t;
    invalidHandle("cache is not a live ctxc_manager_t, ctxc_coordinator_t or ctxc_sim_engine_t");
}

namespace {

std::string optionalString(char const* text, char const* fallback) { return text ? text : fallback; }

}  // namespace

extern "C" {

CTXC_API ctxc_status_t ctxc_kv_events_enable(void* cache, size_t max_pending_events) {
    return guard(__func__, [&] {
        requireCache(cache).manager->enableKvEvents(max_pending_events == 0 ? size_t{1} << 20 : max_pending_events);
    });
}

CTXC_API ctxc_status_t ctxc_kv_events_disable(void* cache) {
    return guard(__func__, [&] { requireCache(cache).manager->disableKvEvents(); });
}

CTXC_API ctxc_status_t ctxc_kv_events_drained_media(const void* cache, const uint8_t** out_media, size_t* out_count) {
    return guard(__func__, [&] {
        const uint8_t*& media = requireOut(out_media, "out_media");
        size_t& count = requireOut(out_count, "out_count");
        media = nullptr;
        count = 0;
        KvEventsDrain const& d = *requireCache(cache).drain;
        media = d.media.data();
        count = d.media.size();
    });
}

CTXC_API ctxc_status_t ctxc_kv_events_drain(void* cache, const ctxc_kv_event_t** out_events, size_t* out_count,
                                            int32_t* out_block_size) {
    return guard(__func__, [&] {
        const ctxc_kv_event_t*& events = requireOut(out_events, "out_events");
        size_t& count = requireOut(out_count, "out_count");
        events = nullptr;
        count = 0;
        KvEventTarget const t = requireCache(cache);
        KvEventsDrain& d = *t.drain;
        // The views point into d.drained, so they are taken after the log moved there (a short std::string's
        // text moves by copy).
        d.views.clear();
        d.keyViews.clear();
        d.media.clear();
        t.manager->drainKvEvents(d.drained);
        KvEventLog const& log = d.drained;
        d.views.reserve(log.size());
        d.media.reserve(log.size());
        for (KvEvent const& e : log.events()) d.media.push_back(static_cast<uint8_t>(e.medium));
        d.keyViews.reserve(log.extraKeys().size());
        for (KvEventExtraKey const& k : log.extraKeys()) {
            std::string_view const text = log.text(k);
            d.keyViews.push_back({k.block, static_cast<int32_t>(k.kind), text.data(), text.size(), k.offset});
        }
        for (KvEvent const& e : log.events()) {
            ctxc_kv_event_t v{};
            v.type = static_cast<int32_t>(e.type);
            v.has_parent = e.hasParent ? 1 : 0;
            v.parent_block_hash = e.parentBlockHash;
            v.block_hashes = log.hashes().data() + e.firstHash;
            v.block_hash_count = e.hashCount;
            v.token_ids = log.tokens().data() + e.firstToken;
            v.token_count = e.tokenCount;
            std::string_view const lora = log.loraName(e);
            v.lora_name = lora.data();
            v.lora_name_length = lora.size();
            v.extra_keys = d.keyViews.data() + e.firstExtraKey;
            v.extra_key_count = e.extraKeyCount;
            d.views.push_back(v);
        }
        events = d.views.data();
        count = d.views.size();
        if (out_block_size) *out_block_size = t.manager->pageSize();
    });
}

CTXC_API ctxc_status_t ctxc_kv_events_status(const void* cache, int32_t* out_enabled, size_t* out_pending,
                                             uint64_t* out_lost) {
    return guard(__func__, [&] {
        ContextCacheManager const& m = *requireCache(cache).manager;
        if (out_enabled) *out_enabled = m.kvEventsEnabled() ? 1 : 0;
        if (out_pending) *out_pending = m.pendingKvEventCount();
        if (out_lost) *out_lost = m.lostKvEvents();
    });
}

CTXC_API ctxc_status_t ctxc_kv_events_attach_publisher(void* cache, ctxc_kv_event_publisher_t* publisher) {
    return guard(__func__, [&] {
        ContextCacheManager& m = *requireCache(cache).manager;
        std::shared_ptr<KvEventPublisher> p;
        if (publisher) p = requirePublisher(publisher);
        m.setKvEventSink(std::move(p));
    });
}

CTXC_API void ctxc_kv_event_keys_init(ctxc_kv_event_keys_t* keys) { initSized(keys); }

CTXC_API int32_t ctxc_kv_event_publisher_available(void) { return KvEventPublisher::available() ? 1 : 0; }

CTXC_API void ctxc_kv_event_publisher_options_init(ctxc_kv_event_publisher_options_t* options) {
    if (!initSized(options)) return;
    KvEventPublisherOptions const defaults;
    options->data_parallel_rank = -1;
    options->endpoint = "tcp://*:5557";
    options->replay_endpoint = nullptr;
    options->topic = "";
    options->medium = "GPU";
    options->buffer_steps = defaults.bufferSteps;
    options->max_queued_batches = defaults.maxQueuedBatches;
    options->send_high_water_mark = defaults.sendHighWaterMark;
}

CTXC_API ctxc_status_t ctxc_kv_event_publisher_create(const ctxc_kv_event_publisher_options_t* options,
                                                      ctxc_kv_event_publisher_t** out_publisher) {
    return guard(__func__, [&] {
        requireOut(out_publisher, "out_publisher") = nullptr;
        ctxc_kv_event_publisher_options_t const& o = requireSized(options, "options");
        if (!o.endpoint || !*o.endpoint) invalidArgument("options->endpoint is NULL or empty");
        if (o.data_parallel_rank < -1)
            invalidArgument("options->data_parallel_rank must be >= 0 or -1 (none), got " +
                            std::to_string(o.data_parallel_rank));
        if (o.max_queued_batches == 0) invalidArgument("options->max_queued_batches must be positive");
        requireNonNegative(o.send_high_water_mark, "options->send_high_water_mark");
        requireNonNegative(o.wait_for_subscriber_ms, "options->wait_for_subscriber_ms");
        requireNonNegative(o.linger_ms, "options->linger_ms");
        KvEventPublisherOptions po;
        po.endpoint = o.endpoint;
        po.replayEndpoint = optionalString(o.replay_endpoint, "");
        po.topic = optionalString(o.topic, "");
        po.medium = optionalString(o.medium, "GPU");
        if (o.data_parallel_rank >= 0) po.dataParallelRank = o.data_parallel_rank;
        po.bufferSteps = o.buffer_steps;
        po.maxQueuedBatches = o.max_queued_batches;
        po.sendHighWaterMark = o.send_high_water_mark;
        po.arrayEncoding = requireBool(o.array_encoding, "options->array_encoding");
        if (requireBool(o.has_first_sequence, "options->has_first_sequence")) po.firstSequence = o.first_sequence;
        po.waitForSubscriberMilliseconds = o.wait_for_subscriber_ms;
        po.lingerMilliseconds = o.linger_ms;
        auto object = std::make_unique<PublisherObject>();
        try {
            object->publisher = std::make_shared<KvEventPublisher>(std::move(po));
        } catch (KvEventPublisherUnavailableError const& e) {
            throw ApiError(CTXC_E_UNSUPPORTED, e.what());
        }
        *out_publisher = static_cast<ctxc_kv_event_publisher_t*>(publishers().add(std::move(object)));
    });
}

CTXC_API ctxc_status_t ctxc_kv_event_publisher_destroy(ctxc_kv_event_publisher_t* publisher) {
    return guard(__func__, [&] {
        if (!publisher) return;
        std::unique_ptr<PublisherObject> object = publishers().remove(publisher);
        if (!object) invalidHandle("publisher is not a live ctxc_kv_event_publisher_t");
        object->publisher->close();  // a cache that still holds it only counts drops from now on
    });
}

CTXC_API ctxc_status_t ctxc_kv_event_publisher_stats(const ctxc_kv_event_publisher_t* publisher,
                                                     ctxc_kv_event_publisher_stats_t* out_stats) {
    return guard(__func__, [&] {
        ctxc_kv_event_publisher_stats_t& out = requireSized(out_stats, "out_stats");
        KvEventPublisherStats const s = requirePublisher(publisher)->stats();
        out.accepted_batches = s.acceptedBatches;
        out.sent_batches = s.sentBatches;
        out.dropped_batches = s.droppedBatches;
        out.queued_batches = s.queuedBatches;
        out.next_sequence = s.nextSequence;
        out.replay_requests = s.replayRequests;
        out.subscriptions = s.subscriptions;
        out.holding = s.holding ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_kv_event_publisher_flush(ctxc_kv_event_publisher_t* publisher, int32_t timeout_ms,
                                                     int32_t* out_empty) {
    return guard(__func__, [&] {
        requireNonNegative(timeout_ms, "timeout_ms");
        bool const empty = requirePublisher(publisher)->flush(timeout_ms);
        if (out_empty) *out_empty = empty ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_kv_event_publisher_wait_for_subscriber(ctxc_kv_event_publisher_t* publisher,
                                                                   int32_t timeout_ms, int32_t* out_subscribed) {
    return guard(__func__, [&] {
        requireNonNegative(timeout_ms, "timeout_ms");
        bool const subscribed = requirePublisher(publisher)->waitForSubscriber(timeout_ms);
        if (out_subscribed) *out_subscribed = subscribed ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_kv_events_encode(const ctxc_kv_event_t* events, size_t count, int32_t block_size,
                                             double timestamp, int32_t data_parallel_rank, const char* medium,
                                             int32_t array_encoding, uint8_t* out_bytes, size_t out_capacity,
                                             size_t* out_size) {
    return ctxc_kv_events_encode_media(events, nullptr, count, block_size, timestamp, data_parallel_rank, medium,
                                       array_encoding, out_bytes, out_capacity, out_size);
}

CTXC_API ctxc_status_t ctxc_kv_events_encode_media(const ctxc_kv_event_t* events, const uint8_t* media, size_t count,
                                                   int32_t block_size, double timestamp, int32_t data_parallel_rank,
                                                   const char* medium, int32_t array_encoding, uint8_t* out_bytes,
                                                   size_t out_capacity, size_t* out_size) {
    return guard(__func__, [&] {
        requireOut(out_size, "out_size");
        requireArray(events, count, "events");
        if (media)
            for (size_t i = 0; i < count; ++i)
                if (media[i] != CTXC_KV_MEDIUM_DEVICE && media[i] != CTXC_KV_MEDIUM_HOST)
                    invalidArgument("media[" + std::to_string(i) + "] " + std::to_string(media[i]) +
                                    " is not a CTXC_KV_MEDIUM_* value");
        if (block_size <= 0) invalidArgument("block_size must be positive (got " + std::to_string(block_size) + ")");
        if (data_parallel_rank < -1) invalidArgument("data_parallel_rank must be >= 0 or -1 (none)");
        bool const arrays = requireBool(array_encoding, "array_encoding");
        KvEventLog log;
        log.blockSize = block_size;
        std::vector<KvEventExtraKeyValue> keys;
        for (size_t i = 0; i < count; ++i) {
            ctxc_kv_event_t const& e = events[i];
            std::string const at = "events[" + std::to_string(i) + "]";
            if (e.type < CTXC_KV_EVENT_BLOCK_STORED || e.type > CTXC_KV_EVENT_ALL_BLOCKS_CLEARED)
                invalidArgument(at + ".type " + std::to_string(e.type) + " is not a CTXC_KV_EVENT_* value");
            requireArray(e.block_hashes, e.block_hash_count, (at + ".block_hashes").c_str());
            requireArray(e.token_ids, e.token_count, (at + ".token_ids").c_str());
            bool const hasParent = requireBool(e.has_parent, (at + ".has_parent").c_str());
            requireBytes(e.lora_name, e.lora_name_length, (at + ".lora_name").c_str());
            requireArray(e.extra_keys, e.extra_key_count, (at + ".extra_keys").c_str());
            if (e.type != CTXC_KV_EVENT_BLOCK_STORED && (e.lora_name_length > 0 || e.extra_key_count > 0))
                invalidArgument(at + ": only a BlockStored event carries lora_name and extra_keys");
            keys.clear();
            keys.reserve(e.extra_key_count);
            for (size_t k = 0; k < e.extra_key_count; ++k) {
                ctxc_kv_event_extra_key_t const& x = e.extra_keys[k];
                std::string const key = at + ".extra_keys[" + std::to_string(k) + "]";
                if (x.kind != CTXC_KV_EXTRA_KEY_LORA_NAME && x.kind != CTXC_KV_EXTRA_KEY_MEDIA)
                    invalidArgument(key + ".kind " + std::to_string(x.kind) + " is not a CTXC_KV_EXTRA_KEY_* value");
                if (x.block >= e.block_hash_count)
                    invalidArgument(key + ".block " + std::to_string(x.block) + " is not one of the event's " +
                                    std::to_string(e.block_hash_count) + " blocks");
                if (k > 0 && x.block < e.extra_keys[k - 1].block)
                    invalidArgument(key + ".block " + std::to_string(x.block) + " comes after block " +
                                    std::to_string(e.extra_keys[k - 1].block) + " (keys are in block order)");
                requireBytes(x.text, x.text_length, (key + ".text").c_str());
                keys.push_back({x.block, static_cast<KvEventExtraKeyKind>(x.kind), {x.text, x.text_length}, x.offset});
            }
            log.appendEvent(static_cast<KvEventType>(e.type), hasParent, e.parent_block_hash, e.block_hashes,
                            e.block_hash_count, e.token_ids, e.token_count, {e.lora_name, e.lora_name_length},
                            keys.data(), keys.size(),
                            media && media[i] == CTXC_KV_MEDIUM_HOST ? KvEventMedium::kHost : KvEventMedium::kDevice);
        }
        std::string payload;
        try {
            payload = encodeKvEventBatch(
                log, timestamp, data_parallel_rank >= 0 ? std::optional<int32_t>(data_parallel_rank) : std::nullopt,
                optionalString(medium, "GPU"), arrays);
        } catch (KvEventPublisherUnavailableError const& e) {
            throw ApiError(CTXC_E_UNSUPPORTED, e.what());
        }
        return copyOut(payload, out_bytes, out_capacity, out_size, "out_bytes", "bytes", "out_size");
    });
}

}  // extern "C"
