// KvEventPublisher: a KvEventSink that sends each batch of a manager's KV events over ZMQ in vLLM's wire format
// (docs/EVENTS.md), so that NVIDIA Dynamo's KV router and llm-d's indexer can subscribe to a ctxcache engine.
//
//   XPUB socket  (a PUB that also sees its subscribers' subscriptions) 3 frames per batch: topic, an 8-byte big-endian
//   sequence number, a msgpack payload
//                [timestamp (float seconds), [events...], data_parallel_rank | nil]. Events are tagged maps
//                ({"type": "BlockStored", ...}, vLLM >= 0.24) or, with arrayEncoding, positional arrays.
//                vLLM's rule decides bind or connect: an endpoint with "*", "::", "ipc://" or "inproc://" binds,
//                any other connects (the consumer binds). A data-parallel rank r adds r to a tcp port.
//   ROUTER       optional replay socket (always binds): a DEALER sends [b"", start_seq (8 bytes BE)] and gets
//                [b"", topic, seq, payload] for every buffered batch with seq >= start_seq, then the end marker
//                [b"", b"", -1 (8 bytes, signed BE), b""]. The ring keeps the last bufferSteps batches.
//   Sequence     starts at firstSequence, by default the wall clock in microseconds since the Unix epoch, so a
//                restarted publisher continues above what a router saw last (routers drop seq <= their
//                watermark); it grows by one per batch, including batches dropped before they were sent, so a
//                consumer sees the gap.
//   Late joiners ZMQ's slow joiner: a batch sent before a subscriber's connection completed is lost to it. With
//                waitForSubscriberMilliseconds the sender holds every batch until the first subscription arrives
//                (or that long after construction has passed, then sends as usual); waitForSubscriber() blocks
//                the caller instead. close() ends a wait at once (what is held is sent to whoever is subscribed)
//                and, with lingerMilliseconds, keeps the replay socket serving until that long after the last
//                batch was sent, so a router that noticed a gap can still fetch it.
//
// Invariants: consume() never blocks on the network and never throws: it moves the batch into a bounded queue
//             (maxQueuedBatches; the oldest batch is dropped and counted when it is full), hands the manager a
//             recycled log, and wakes nobody (a futex wake per call would cost more than the events): the sender
//             thread (at a nice value 10 above the process's: background work) polls every 5 ms (or is woken at
//             half queue), encodes, sends (ZMQ never blocks a PUB: a slow
//             subscriber loses messages at the high-water mark) and serves replay requests. close() sends what is
//             queued, stops the thread and closes the sockets; consume() after close() drops and counts.
// Availability: built only when CMake found libzmq and msgpack-cxx (CTXCACHE_WITH_KV_EVENT_PUBLISHER);
//             otherwise available() is false and the constructor throws KvEventPublisherUnavailableError. The
//             event stream and its drain do not depend on it.
// Threading:  consume() and stats() may be called from any thread (internally locked); the sender thread is
//             the only one that touches the sockets.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ctxcache/errors.h"
#include "ctxcache/kv_events.h"

namespace ctxcache {

class KvEventPublisherUnavailableError : public Error {
public:
    using Error::Error;
};

struct KvEventPublisherOptions {
    std::string endpoint = "tcp://*:5557";
    std::string replayEndpoint;  // empty: no replay socket
    std::string topic;           // llm-d reads pod and model from "kv@<pod>@<model>"
    std::string medium = "GPU";  // BlockStored/BlockRemoved "medium" (a router matches removals by it)
    std::optional<int32_t> dataParallelRank;
    size_t bufferSteps = 10000;       // replay ring, in batches (0: replay answers only the end marker)
    size_t maxQueuedBatches = 10000;  // batches waiting for the sender thread
    int32_t sendHighWaterMark = 100000;
    bool arrayEncoding = false;
    std::optional<uint64_t> firstSequence;
    int32_t waitForSubscriberMilliseconds = 0;  // hold batches until the first subscriber, at most this long
    int32_t lingerMilliseconds = 0;             // close(): serve replay until this long after the last batch
};

struct KvEventPublisherStats {
    uint64_t acceptedBatches = 0;  // batches consume() took (each got a sequence number)
    uint64_t sentBatches = 0;      // handed to ZMQ
    uint64_t droppedBatches = 0;   // dropped from a full queue, after close(), or refused by ZMQ
    uint64_t queuedBatches = 0;    // waiting for the sender thread now
    uint64_t nextSequence = 0;     // the sequence number of the next batch
    uint64_t replayRequests = 0;
    uint64_t subscriptions = 0;  // subscribe messages the XPUB socket saw (one per topic per subscriber)
    bool holding = false;        // waiting for the first subscriber: batches accepted now are held
};

// vLLM's rule (see the file comment): true when the endpoint binds.
bool kvEventEndpointBinds(std::string const& endpoint);
// The endpoint of data-parallel rank `rank`: a tcp port moves up by rank; an ipc/inproc path gets "_dp<rank>".
std::string kvEventEndpointForRank(std::string const& endpoint, int32_t rank);

class KvEventPublisher final : public KvEventSink {
public:
    static bool available() noexcept;

    // Binds or connects the sockets and starts the sender thread. ContractError on malformed options (an empty
    // endpoint, a negative rank, a zero queue, a negative wait or linger), KvEventPublisherUnavailableError without
    // ZMQ, Error when ZMQ refuses the endpoint (the message says why).
    explicit KvEventPublisher(KvEventPublisherOptions options);
    ~KvEventPublisher() override;
    KvEventPublisher(KvEventPublisher const&) = delete;
    KvEventPublisher& operator=(KvEventPublisher const&) = delete;

    void consume(KvEventLog& events) noexcept override;
    // Waits until the queue is empty (every accepted batch sent or dropped) or the timeout passes; true when it
    // is empty.
    bool flush(int32_t timeoutMilliseconds);
    // Waits until a subscriber has subscribed (true) or the timeout passes (false). After close(): false at once.
    bool waitForSubscriber(int32_t timeoutMilliseconds);
    // Sends what is queued or held, serves replay for the linger (see the file comment), stops the thread and
    // closes the sockets. Blocks for at most the linger plus a second. Idempotent.
    void close() noexcept;
    KvEventPublisherStats stats() const;
    KvEventPublisherOptions const& options() const noexcept;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

// The msgpack payload of one batch, exactly as the publisher sends it (for tests and for shipping events another
// way). Throws KvEventPublisherUnavailableError without msgpack-cxx.
std::string encodeKvEventBatch(KvEventLog const& events, double timestamp, std::optional<int32_t> dataParallelRank,
                               std::string const& medium, bool arrayEncoding);

}  // namespace ctxcache
