// KvEventPublisher and encodeKvEventBatch: vLLM's endpoint rules, the msgpack batch decoded back with msgpack-cxx
// (map and array encodings), sequence numbers, and a stalled subscriber that changes no cache result.
#include "ctxcache/events/kv_event_publisher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ctxcache/context_cache_manager.h"
#include "support/test_support.h"

#if CTXCACHE_WITH_KV_EVENT_PUBLISHER
#include <zmq.h>

#include <msgpack.hpp>
#endif

namespace ctxcache {
namespace {

TEST(KvEventPublisher, EndpointRulesFollowVllm) {
    EXPECT_TRUE(kvEventEndpointBinds("tcp://*:5557"));
    EXPECT_TRUE(kvEventEndpointBinds("tcp://[::]:5557"));
    EXPECT_TRUE(kvEventEndpointBinds("ipc:///tmp/events"));
    EXPECT_TRUE(kvEventEndpointBinds("inproc://events"));
    EXPECT_FALSE(kvEventEndpointBinds("tcp://127.0.0.1:5557"));
    EXPECT_FALSE(kvEventEndpointBinds("tcp://router.local:5557"));

    EXPECT_EQ(kvEventEndpointForRank("tcp://*:5557", 0), "tcp://*:5557");
    EXPECT_EQ(kvEventEndpointForRank("tcp://*:5557", 3), "tcp://*:5560");
    EXPECT_EQ(kvEventEndpointForRank("tcp://10.0.0.1:5557", 1), "tcp://10.0.0.1:5558");
    EXPECT_EQ(kvEventEndpointForRank("ipc:///tmp/events", 2), "ipc:///tmp/events_dp2");
    EXPECT_EQ(kvEventEndpointForRank("", 2), "");
    EXPECT_THROW(kvEventEndpointForRank("tcp://*:65535", 1), ContractError);
    EXPECT_THROW(kvEventEndpointForRank("tcp://host", 1), ContractError);
    EXPECT_THROW(kvEventEndpointForRank("tcp://*:5557", -1), ContractError);
}

KvEventLog sampleLog() {
    KvEventLog log;
    log.blockSize = 2;
    log.appendCleared();
    BlockHash const hashes[] = {{1, 0xFFFFFFFFFFFFFFFFull}, {2, 7}};
    int32_t const tokens[] = {10, 11, 12, 13};
    log.appendStored(hashes, 2, false, 0, tokens, 4);
    log.appendStored(hashes + 1, 1, true, 0xFFFFFFFFFFFFFFFFull, tokens + 2, 2);
    log.beginRemoved();
    log.addRemoved(0xFFFFFFFFFFFFFFFFull);
    log.addRemoved(7);
    log.endRemoved();  // leaf-first: 7, then the root
    return log;
}

#if CTXCACHE_WITH_KV_EVENT_PUBLISHER

msgpack::object_handle unpack(std::string const& payload) { return msgpack::unpack(payload.data(), payload.size()); }

std::string str(msgpack::object const& o) { return o.as<std::string>(); }

// A map event's value by key (the keys, in order, are checked separately).
msgpack::object const& field(msgpack::object const& event, char const* key) {
    for (uint32_t i = 0; i < event.via.map.size; ++i)
        if (str(event.via.map.ptr[i].key) == key) return event.via.map.ptr[i].val;
    throw std::runtime_error(std::string("no key ") + key);
}

std::vector<std::string> keys(msgpack::object const& event) {
    std::vector<std::string> out;
    for (uint32_t i = 0; i < event.via.map.size; ++i) out.push_back(str(event.via.map.ptr[i].key));
    return out;
}

TEST(KvEventPublisher, MapEncodingIsVllmsKvEventBatch) {
    msgpack::object_handle const h = unpack(encodeKvEventBatch(sampleLog(), 12.5, std::nullopt, "GPU", false));
    msgpack::object const& batch = h.get();
    ASSERT_EQ(batch.type, msgpack::type::ARRAY);
    ASSERT_EQ(batch.via.array.size, 3u);
    EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
    EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 12.5);
    EXPECT_TRUE(batch.via.array.ptr[2].is_nil());
    msgpack::object const& events = batch.via.array.ptr[1];
    ASSERT_EQ(events.via.array.size, 4u);

    msgpack::object const& cleared = events.via.array.ptr[0];
    EXPECT_EQ(keys(cleared), std::vector<std::string>{"type"});
    EXPECT_EQ(str(field(cleared, "type")), "AllBlocksCleared");

    msgpack::object const& root = events.via.array.ptr[1];
    EXPECT_EQ(keys(root), (std::vector<std::string>{"type", "block_hashes", "parent_block_hash", "token_ids",
                                                    "block_size", "lora_id", "medium", "lora_name"}));
    EXPECT_EQ(str(field(root, "type")), "BlockStored");
    EXPECT_EQ(field(root, "block_hashes").as<std::vector<uint64_t>>(),
              (std::vector<uint64_t>{0xFFFFFFFFFFFFFFFFull, 7}));
    EXPECT_EQ(field(root, "block_hashes").via.array.ptr[0].type, msgpack::type::POSITIVE_INTEGER);
    EXPECT_TRUE(field(root, "parent_block_hash").is_nil());
    EXPECT_EQ(field(root, "token_ids").as<std::vector<int32_t>>(), (std::vector<int32_t>{10, 11, 12, 13}));
    EXPECT_EQ(field(root, "block_size").as<int>(), 2);
    EXPECT_TRUE(field(root, "lora_id").is_nil());
    EXPECT_EQ(str(field(root, "medium")), "GPU");
    EXPECT_TRUE(field(root, "lora_name").is_nil());

    msgpack::object const& child = events.via.array.ptr[2];
    EXPECT_EQ(field(child, "parent_block_hash").as<uint64_t>(), 0xFFFFFFFFFFFFFFFFull);
    EXPECT_EQ(field(child, "token_ids").as<std::vector<int32_t>>(), (std::vector<int32_t>{12, 13}));

    msgpack::object const& removed = events.via.array.ptr[3];
    EXPECT_EQ(keys(removed), (std::vector<std::string>{"type", "block_hashes", "medium"}));
    EXPECT_EQ(field(removed, "block_hashes").as<std::vector<uint64_t>>(),
              (std::vector<uint64_t>{7, 0xFFFFFFFFFFFFFFFFull}));
}

TEST(KvEventPublisher, ArrayEncodingKeepsTheFieldOrder) {
    msgpack::object_handle const h = unpack(encodeKvEventBatch(sampleLog(), 1.0, 3, "CPU", true));
    msgpack::object const& batch = h.get();
    EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 3);
    msgpack::object const& events = batch.via.array.ptr[1];
    msgpack::object const& cleared = events.via.array.ptr[0];
    ASSERT_EQ(cleared.type, msgpack::type::ARRAY);
    EXPECT_EQ(cleared.via.array.size, 1u);
    EXPECT_EQ(str(cleared.via.array.ptr[0]), "AllBlocksCleared");
    msgpack::object const& stored = events.via.array.ptr[2];
    ASSERT_EQ(stored.via.array.size, 8u);
    EXPECT_EQ(str(stored.via.array.ptr[0]), "BlockStored");
    EXPECT_EQ(stored.via.array.ptr[1].as<std::vector<uint64_t>>(), std::vector<uint64_t>{7});
    EXPECT_EQ(stored.via.array.ptr[2].as<uint64_t>(), 0xFFFFFFFFFFFFFFFFull);
    EXPECT_EQ(stored.via.array.ptr[4].as<int>(), 2);
    EXPECT_EQ(str(stored.via.array.ptr[6]), "CPU");
    msgpack::object const& removed = events.via.array.ptr[3];
    ASSERT_EQ(removed.via.array.size, 3u);
    EXPECT_EQ(str(removed.via.array.ptr[0]), "BlockRemoved");
}

// A LoRA adapter and an image over tokens [1, 6) of two 4-token blocks: both blocks carry the adapter's name, then
// the image at offsets 1 and -3; a block without keys would be nil. The map gains "extra_keys" last; the array
// form puts it at position 8, after lora_name.
KvEventLog identityLog() {
    KvEventLog log;
    log.blockSize = 4;
    BlockHash const hashes[] = {{1, 11}, {2, 12}, {3, 13}};
    int32_t const tokens[] = {1, 9, 9, 9, 9, 9, 7, 8, 5, 5, 5, 5};
    KvEventMedia const image{"ab", 1, 5};
    log.appendStored(hashes, 2, false, 0, tokens, 8, KvEventKeys{"adapter", &image, 1}, 0);
    log.appendStored(hashes + 2, 1, true, 12, tokens + 8, 4, KvEventKeys{"", &image, 1}, 8);  // no key: nil
    return log;
}

TEST(KvEventPublisher, IdentityTravelsAsLoraNameAndPerBlockExtraKeys) {
    for (bool const arrays : {false, true}) {
        msgpack::object_handle const h = unpack(encodeKvEventBatch(identityLog(), 0.0, std::nullopt, "GPU", arrays));
        msgpack::object const& events = h.get().via.array.ptr[1];
        msgpack::object const& first = events.via.array.ptr[0];
        msgpack::object const& lora = arrays ? first.via.array.ptr[7] : field(first, "lora_name");
        msgpack::object const& extra = arrays ? first.via.array.ptr[8] : field(first, "extra_keys");
        EXPECT_EQ(str(lora), "adapter");
        if (!arrays)
            EXPECT_EQ(keys(first),
                      (std::vector<std::string>{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size",
                                                "lora_id", "medium", "lora_name", "extra_keys"}));
        else EXPECT_EQ(first.via.array.size, 9u);
        ASSERT_EQ(extra.via.array.size, 2u);
        msgpack::object const& block0 = extra.via.array.ptr[0];
        msgpack::object const& block1 = extra.via.array.ptr[1];
        ASSERT_EQ(block0.via.array.size, 2u);
        EXPECT_EQ(str(block0.via.array.ptr[0]), "adapter");
        EXPECT_EQ(str(block0.via.array.ptr[1].via.array.ptr[0]), "ab");
        EXPECT_EQ(block0.via.array.ptr[1].via.array.ptr[1].as<int64_t>(), 1);
        ASSERT_EQ(block1.via.array.size, 2u);
        EXPECT_EQ(block1.via.array.ptr[1].via.array.ptr[1].as<int64_t>(), -3);
        // The second event's block starts at token 8, after the image: no key, so no extra_keys and no name.
        msgpack::object const& second = events.via.array.ptr[1];
        EXPECT_EQ(arrays ? second.via.array.size : second.via.map.size, 8u);
        EXPECT_TRUE((arrays ? second.via.array.ptr[7] : field(second, "lora_name")).is_nil());
    }
}

std::string ipcEndpoint(char const* name) {
    char pattern[] = "/tmp/ctxcache-events-XXXXXX";
    char* dir = mkdtemp(pattern);
    if (!dir) throw std::runtime_error("mkdtemp failed");
    return std::string("ipc://") + dir + "/" + name;
}

TEST(KvEventPublisher, SequenceStartsAtTheWallClockOrTheGivenNumber) {
    uint64_t const now = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    KvEventPublisherOptions options;
    options.endpoint = ipcEndpoint("clock");
    KvEventPublisher byClock(options);
    uint64_t const first = byClock.stats().nextSequence;
    EXPECT_GE(first, now);
    EXPECT_LT(first, now + 60'000'000);
    KvEventLog log = sampleLog();
    byClock.consume(log);
    EXPECT_EQ(log.size(), 4u);  // copied into a recycled log: the caller's buffers stay the caller's
    EXPECT_EQ(byClock.stats().nextSequence, first + 1);
    EXPECT_TRUE(byClock.flush(5000));
    EXPECT_EQ(byClock.stats().sentBatches, 1u);
    byClock.close();
    KvEventLog late = sampleLog();
    byClock.consume(late);
    EXPECT_EQ(byClock.stats().droppedBatches, 1u);

    options.endpoint = ipcEndpoint("given");
    options.firstSequence = 42;
    KvEventPublisher given(options);
    EXPECT_EQ(given.stats().nextSequence, 42u);
}

TEST(KvEventPublisher, RefusesAnEndpointInUseWithAReason) {
    KvEventPublisherOptions options;
    options.endpoint = ipcEndpoint("dup");
    options.replayEndpoint = "tcp://*:not-a-port";
    try {
        KvEventPublisher broken(options);
        FAIL() << "a malformed replay endpoint was accepted";
    } catch (ContractError const& e) {
        EXPECT_NE(std::string(e.what()).find("replay endpoint"), std::string::npos) << e.what();
    }
}

// A subscriber that never reads, one-message high-water marks and a two-batch queue: every manager result equals
// that of a manager without events, and the publisher only counts what it could not send.
TEST(KvEventPublisher, AStalledSubscriberChangesNoCacheResult) {
    KvEventPublisherOptions options;
    options.endpoint = ipcEndpoint("stalled");
    options.maxQueuedBatches = 2;
    options.sendHighWaterMark = 1;
    options.bufferSteps = 0;
    auto publisher = std::make_shared<KvEventPublisher>(options);
    void* context = zmq_ctx_new();
    void* stalled = zmq_socket(context, ZMQ_SUB);
    int const one = 1;
    zmq_setsockopt(stalled, ZMQ_RCVHWM, &one, sizeof one);
    zmq_setsockopt(stalled, ZMQ_SUBSCRIBE, "", 0);
    ASSERT_EQ(zmq_connect(stalled, options.endpoint.c_str()), 0);

    ContextCacheManager quiet(4, {12, 0, 0, 0}, 6);
    ContextCacheManager loud(4, {12, 0, 0, 0}, 6);
    loud.enableKvEvents();
    loud.setKvEventSink(publisher);
    std::mt19937 rng(11);
    auto const started = std::chrono::steady_clock::now();
    for (int step = 0; step < 2000; ++step) {
        int32_t const length = 4 + static_cast<int32_t>(rng() % 20);
        std::vector<int32_t> tokens(static_cast<size_t>(length));
        for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 3);
        std::vector<BlockHash> hashes;  // a chain over the tokens: equal prefixes share blocks
        uint64_t h = 1469598103934665603ull;
        for (int32_t i = 0; i + 4 <= length; i += 4) {
            for (int32_t j = i; j < i + 4; ++j)
                h = (h ^ static_cast<uint64_t>(tokens[static_cast<size_t>(j)])) * 1099511628211ull;
            hashes.push_back({h, h * 31});
        }
        for (ContextCacheManager* m : {&quiet, &loud}) {
            AcquireResult a = m->acquireVanilla(hashes, length);
            ASSERT_TRUE(a.lease);
            if (!hashes.empty()) m->publish(*a.lease, {hashes, length, tokens});
            a.lease->release();
            if (step % 97 == 96) m->clear();
        }
        ASSERT_EQ(test::describe(quiet), test::describe(loud)) << "step " << step;
    }
    double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    EXPECT_LT(seconds, 30.0);
    loud.checkInvariants();
    EXPECT_TRUE(publisher->flush(5000));
    KvEventPublisherStats const s = publisher->stats();
    EXPECT_GT(s.acceptedBatches, 2000u);
    EXPECT_EQ(s.sentBatches + s.droppedBatches, s.acceptedBatches);
    zmq_close(stalled);
    zmq_ctx_term(context);
}

// Receives one multipart message within `ms`; empty when none came.
std::vector<std::string> receiveFrames(void* socket, int ms) {
    zmq_pollitem_t item{socket, 0, ZMQ_POLLIN, 0};
    std::vector<std::string> frames;
    if (zmq_poll(&item, 1, ms) <= 0) return frames;
    int more = 1;
    while (more) {
        zmq_msg_t message;
        zmq_msg_init(&message);
        if (zmq_msg_recv(&message, socket, 0) < 0) break;
        frames.emplace_back(static_cast<char const*>(zmq_msg_data(&message)), zmq_msg_size(&message));
        more = zmq_msg_more(&message);
        zmq_msg_close(&message);
    }
    return frames;
}

uint64_t sequenceOf(std::string const& frame) {
    uint64_t v = 0;
    for (char c : frame) v = (v << 8) | static_cast<uint8_t>(c);
    return v;
}

// ZMQ's slow joiner loses what is sent before a subscription arrives. With waitForSubscriberMilliseconds every
// batch is held (consume() still never blocks) until the first subscription, then all of them reach it in order.
TEST(KvEventPublisher, HeldBatchesReachTheFirstSubscriber) {
    KvEventPublisherOptions options;
    options.endpoint = ipcEndpoint("held");
    options.waitForSubscriberMilliseconds = 30'000;
    KvEventPublisher publisher(options);
    uint64_t const first = publisher.stats().nextSequence;
    for (int i = 0; i < 3; ++i) {
        KvEventLog log = sampleLog();
        publisher.consume(log);
    }
    EXPECT_FALSE(publisher.flush(200));
    KvEventPublisherStats s = publisher.stats();
    EXPECT_EQ(s.sentBatches, 0u);
    EXPECT_EQ(s.queuedBatches, 3u);
    EXPECT_TRUE(s.holding);
    EXPECT_FALSE(publisher.waitForSubscriber(20));

    void* context = zmq_ctx_new();
    void* sub = zmq_socket(context, ZMQ_SUB);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    ASSERT_EQ(zmq_connect(sub, options.endpoint.c_str()), 0);
    EXPECT_TRUE(publisher.waitForSubscriber(5000));
    std::vector<uint64_t> sequences;
    for (int i = 0; i < 3; ++i) {
        std::vector<std::string> const frames = receiveFrames(sub, 5000);
        ASSERT_EQ(frames.size(), 3u) << "batch " << i;
        sequences.push_back(sequenceOf(frames[1]));
    }
    EXPECT_EQ(sequences, (std::vector<uint64_t>{first, first + 1, first + 2}));
    EXPECT_TRUE(receiveFrames(sub, 100).empty());
    s = publisher.stats();
    EXPECT_EQ(s.sentBatches, 3u);
    EXPECT_EQ(s.subscriptions, 1u);
    EXPECT_FALSE(s.holding);
    zmq_close(sub);
    zmq_ctx_term(context);
}

// Nobody subscribes: the hold ends at its deadline (the batches go out as they would without it), and close()
// ends a longer one at once; waitForSubscriber answers false at once after close().
TEST(KvEventPublisher, TheHoldEndsAtItsDeadlineOrAtClose) {
    KvEventPublisherOptions options;
    options.endpoint = ipcEndpoint("deadline");
    options.waitForSubscriberMilliseconds = 300;
    KvEventPublisher brief(options);
    KvEventLog log = sampleLog();
    brief.consume(log);
    EXPECT_TRUE(brief.flush(5000));
    EXPECT_EQ(brief.stats().sentBatches, 1u);
    EXPECT_FALSE(brief.stats().holding);

    options.endpoint = ipcEndpoint("ended-by-close");
    options.waitForSubscriberMilliseconds = 600'000;
    KvEventPublisher held(options);
    KvEventLog again = sampleLog();
    held.consume(again);
    EXPECT_TRUE(held.stats().holding);
    auto const started = std::chrono::steady_clock::now();
    held.close();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 2.0);
    EXPECT_EQ(held.stats().sentBatches, 1u);
    EXPECT_FALSE(held.stats().holding);
    EXPECT_FALSE(held.waitForSubscriber(60'000));  // at once
}

// With lingerMilliseconds, close() keeps the replay socket serving until that long after the last batch: a router
// that noticed a gap after the last batch still gets it.
TEST(KvEventPublisher, LingerServesReplayAfterTheLastBatch) {
    KvEventPublisherOptions options;
    options.endpoint = ipcEndpoint("linger-live");
    options.replayEndpoint = ipcEndpoint("linger-replay");
    options.lingerMilliseconds = 1500;
    KvEventPublisher publisher(options);
    uint64_t const first = publisher.stats().nextSequence;
    for (int i = 0; i < 2; ++i) {
        KvEventLog log = sampleLog();
        publisher.consume(log);
    }
    ASSERT_TRUE(publisher.flush(5000));
    std::vector<uint64_t> replayed;
    std::thread router([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // close() has begun
        void* context = zmq_ctx_new();
        void* dealer = zmq_socket(context, ZMQ_DEALER);
        zmq_connect(dealer, options.replayEndpoint.c_str());
        std::string const empty;
        std::string start(8, '\0');  // big-endian
        for (size_t i = 0; i < 8; ++i) start[i] = static_cast<char>(first >> (56 - 8 * i));
        zmq_send(dealer, empty.data(), 0, ZMQ_SNDMORE);
        zmq_send(dealer, start.data(), start.size(), 0);
        for (;;) {
            std::vector<std::string> const frames = receiveFrames(dealer, 5000);
            if (frames.size() != 4 || sequenceOf(frames[2]) == ~uint64_t{0}) break;  // the end marker (or nothing)
            replayed.push_back(sequenceOf(frames[2]));
        }
        zmq_close(dealer);
        zmq_ctx_term(context);
    });
    auto const started = std::chrono::steady_clock::now();
    publisher.close();
    double const took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    router.join();
    EXPECT_GT(took, 1.0);
    EXPECT_LT(took, 4.0);
    EXPECT_EQ(replayed, (std::vector<uint64_t>{first, first + 1}));
    EXPECT_EQ(publisher.stats().replayRequests, 1u);
}

TEST(KvEventPublisher, RefusesANegativeWaitOrLinger) {
    KvEventPublisherOptions options;
    options.endpoint = ipcEndpoint("negative");
    options.waitForSubscriberMilliseconds = -1;
    EXPECT_THROW(KvEventPublisher{options}, ContractError);
    options.waitForSubscriberMilliseconds = 0;
    options.lingerMilliseconds = -5;
    EXPECT_THROW(KvEventPublisher{options}, ContractError);
}

#else

TEST(KvEventPublisher, IsUnavailableWithoutZmq) {
    EXPECT_FALSE(KvEventPublisher::available());
    EXPECT_THROW(KvEventPublisher(KvEventPublisherOptions{}), KvEventPublisherUnavailableError);
    EXPECT_THROW(encodeKvEventBatch(sampleLog(), 0, std::nullopt, "GPU", false), KvEventPublisherUnavailableError);
}

#endif

}  // namespace
}  // namespace ctxcache
