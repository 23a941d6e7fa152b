// KvEventPublisher: the bounded hand-off queue, the sender thread, the XPUB and replay ROUTER sockets over libzmq's C
// API (include/ctxcache/events/kv_event_publisher.h). Without libzmq only the endpoint rules and the "unavailable"
// answer are compiled.

#include "ctxcache/events/kv_event_publisher.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#if CTXCACHE_WITH_KV_EVENT_PUBLISHER
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>

#include "kv_event_encoding.h"
#endif

namespace ctxcache {

bool kvEventEndpointBinds(std::string const& endpoint) {
    return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
           endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

std::string kvEventEndpointForRank(std::string const& endpoint, int32_t rank) {
    if (rank < 0)
        throw ContractError("KvEventPublisher: data-parallel rank is negative (" + std::to_string(rank) + ")");
    if (endpoint.empty() || rank == 0) return endpoint;
    if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0)
        return endpoint + "_dp" + std::to_string(rank);
    size_t const colon = endpoint.rfind(':');
    if (endpoint.rfind("tcp://", 0) == 0 && colon != std::string::npos && colon > 5) {
        std::string const port = endpoint.substr(colon + 1);
        if (!port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos) {
            int const moved = std::stoi(port) + rank;
            if (moved > 65535)
                throw ContractError("KvEventPublisher: port " + port + " + rank " + std::to_string(rank) +
                                    " exceeds 65535");
            return endpoint.substr(0, colon + 1) + std::to_string(moved);
        }
    }
    throw ContractError("KvEventPublisher: cannot offset endpoint \"" + endpoint +
                        "\" by a data-parallel rank (a tcp://host:port, ipc:// or inproc:// endpoint is needed)");
}

#if CTXCACHE_WITH_KV_EVENT_PUBLISHER

namespace {

// consume() does not wake the sender (a futex wake per manager call would cost the manager more than the events
// themselves): the sender looks at the queue and the replay socket every kPollMilliseconds, so a batch leaves
// within that time, and consume() wakes it early only when the queue is half full.
constexpr int kPollMilliseconds = 5;
constexpr size_t kSpareLogs = 64;  // recycled event logs (their capacity) handed back to the manager by consume()

std::string bigEndian(uint64_t value) {
    std::string out(8, '\0');
    for (int i = 7; i >= 0; --i) {
        out[static_cast<size_t>(i)] = static_cast<char>(value & 0xFF);
        value >>= 8;
    }
    return out;
}

std::string zmqWhy() { return zmq_strerror(zmq_errno()); }

// Sends the frames as one multipart message without blocking; false when ZMQ refused any of them.
bool sendFrames(void* socket, std::initializer_list<std::string const*> frames) {
    size_t i = 0;
    for (std::string const* frame : frames) {
        int const more = ++i < frames.size() ? ZMQ_SNDMORE : 0;
        if (zmq_send(socket, frame->data(), frame->size(), more | ZMQ_DONTWAIT) < 0) return false;
    }
    return true;
}

}  // namespace

struct KvEventPublisher::Impl {
    struct Batch {
        uint64_t sequence = 0;
        double timestamp = 0;
        KvEventLog events;
    };

    KvEventPublisherOptions options;
    std::string topic;
    void* context = nullptr;
    void* pub = nullptr;
    void* replay = nullptr;

    mutable std::mutex mutex;
    std::condition_variable wake;     // the sender: work or stop
    std::condition_variable drained;  // flush(): the queue emptied
    std::condition_variable subscribed;  // waitForSubscriber(): a subscription arrived
    std::deque<Batch> queue;
    std::vector<KvEventLog> spare;
    bool sending = false;  // the sender holds a batch outside the queue
    bool stopping = false;
    bool closed = false;
    KvEventPublisherStats stats;

    std::deque<std::pair<uint64_t, std::string>> ring;  // sender thread only: (sequence, payload)
    std::string payload;                                 // sender thread only: the encoding buffer, reused
    std::chrono::steady_clock::time_point createdAt = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> lastSent;  // sender thread only
    std::thread thread;

    void run() noexcept;
    bool sendBatch(Batch& batch) noexcept;  // true when ZMQ took it
    void serveReplay() noexcept;
    void readSubscriptions() noexcept;  // sender thread: counts the XPUB socket's subscribe messages
    // Under the mutex: batches wait for the first subscriber (the option is on, none came yet, the wait has not
    // run out and close() has not ended it).
    bool holdingLocked() const noexcept {
        return options.waitForSubscriberMilliseconds > 0 && stats.subscriptions == 0 && !stopping &&
               std::chrono::steady_clock::now() <
                   createdAt + std::chrono::milliseconds(options.waitForSubscriberMilliseconds);
    }
    void linger() noexcept;  // sender thread, at close: serve replay until lingerMilliseconds after the last batch
    void closeSockets() noexcept {
        if (replay) zmq_close(replay);
        if (pub) zmq_close(pub);
        if (context) zmq_ctx_term(context);
        replay = pub = context = nullptr;
    }
};

void KvEventPublisher::Impl::run() noexcept {
    // Background work: on a machine with more runnable threads than cores the manager's thread goes first (a
    // nice value 10 above the process's; Linux schedules threads by their own nice value). Failure is harmless.
    pid_t const tid = static_cast<pid_t>(syscall(SYS_gettid));
    errno = 0;
    int const nice = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
    if (errno == 0) setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(19, nice + 10));
    std::deque<Batch> work;  // a burst taken from the queue in one lock
    for (;;) {
        readSubscriptions();
        {
            std::unique_lock<std::mutex> lock(mutex);
            bool hold = holdingLocked();
            if ((queue.empty() || hold) && !stopping) {
                wake.wait_for(lock, std::chrono::milliseconds(kPollMilliseconds));
                hold = holdingLocked();
            }
            if (queue.empty() || hold) {
                if (stopping && queue.empty()) {
                    lock.unlock();
                    linger();
                    return;
                }
                lock.unlock();
                serveReplay();
                continue;
            }
            work.swap(queue);
            stats.queuedBatches = 0;
            sending = true;
        }
        uint64_t sent = 0, dropped = 0;
        for (Batch& batch : work) (sendBatch(batch) ? sent : dropped) += 1;
        lastSent = std::chrono::steady_clock::now();
        {
            std::lock_guard<std::mutex> lock(mutex);
            stats.sentBatches += sent;
            stats.droppedBatches += dropped;
            for (Batch& batch : work) {
                if (spare.size() >= kSpareLogs) break;
                batch.events.clear();
                try {
                    spare.push_back(std::move(batch.events));
                } catch (...) {
                    break;
                }
            }
            sending = false;
            if (queue.empty()) drained.notify_all();
        }
        work.clear();
        serveReplay();
    }
}

void KvEventPublisher::Impl::readSubscriptions() noexcept {
    uint64_t seen = 0;
    for (;;) {
        char message[64];  // [1 = subscribe | 0 = unsubscribe, topic...]; a longer topic is truncated, not lost
        if (zmq_recv(pub, message, sizeof message, ZMQ_DONTWAIT) < 1) break;
        if (message[0] == 1) ++seen;
    }
    if (seen == 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    stats.subscriptions += seen;
    subscribed.notify_all();
}

void KvEventPublisher::Impl::linger() noexcept {
    if (!replay || !lastSent || options.lingerMilliseconds <= 0) return;
    auto const until = *lastSent + std::chrono::milliseconds(options.lingerMilliseconds);
    while (std::chrono::steady_clock::now() < until) {
        serveReplay();
        readSubscriptions();
        std::this_thread::sleep_for(std::chrono::milliseconds(kPollMilliseconds));
    }
    serveReplay();
}

bool KvEventPublisher::Impl::sendBatch(Batch& batch) noexcept {
    try {
        encodeKvEventBatchInto(batch.events, batch.timestamp, options.dataParallelRank, options.medium,
                               options.arrayEncoding, payload);
        std::string const sequence = bigEndian(batch.sequence);
        bool const sent = sendFrames(pub, {&topic, &sequence, &payload});
        if (replay && options.bufferSteps > 0) {  // the ring only serves a replay socket
            ring.emplace_back(batch.sequence, payload);
            while (ring.size() > options.bufferSteps) ring.pop_front();
        }
        return sent;
    } catch (...) {
        return false;  // out of memory while encoding: the batch is lost, and counted
    }
}

void KvEventPublisher::Impl::serveReplay() noexcept {
    if (!replay) return;
    for (;;) {
        std::vector<std::string> frames;
        int more = 1;
        while (more) {
            zmq_msg_t message;
            zmq_msg_init(&message);
            if (zmq_msg_recv(&message, replay, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&message);
                if (frames.empty()) return;  // nothing waiting
                more = 0;
                break;
            }
            try {
                frames.emplace_back(static_cast<char const*>(zmq_msg_data(&message)), zmq_msg_size(&message));
            } catch (...) {
            }
            more = zmq_msg_more(&message);
            zmq_msg_close(&message);
        }
        {
            std::lock_guard<std::mutex> lock(mutex);
            ++stats.replayRequests;
        }
        // [identity, "", start (8 bytes BE)]; anything else is ignored, as vLLM does.
        if (frames.size() != 3 || frames[2].size() != 8) continue;
        uint64_t start = 0;
        for (char c : frames[2]) start = (start << 8) | static_cast<uint8_t>(c);
        std::string const empty;
        try {
            for (auto const& [sequence, payload] : ring) {
                if (sequence < start) continue;
                std::string const seq = bigEndian(sequence);
                sendFrames(replay, {&frames[0], &empty, &topic, &seq, &payload});
            }
            std::string const end = bigEndian(~uint64_t{0});  // -1 as a signed 8-byte integer
            sendFrames(replay, {&frames[0], &empty, &empty, &end, &empty});
        } catch (...) {
        }
    }
}

bool KvEventPublisher::available() noexcept { return true; }

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options) : impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    if (options.endpoint.empty()) throw ContractError("KvEventPublisher: endpoint is empty");
    if (options.maxQueuedBatches == 0) throw ContractError("KvEventPublisher: maxQueuedBatches must be positive");
    if (options.waitForSubscriberMilliseconds < 0)
        throw ContractError("KvEventPublisher: waitForSubscriberMilliseconds is negative (" +
                            std::to_string(options.waitForSubscriberMilliseconds) + ")");
    if (options.lingerMilliseconds < 0)
        throw ContractError("KvEventPublisher: lingerMilliseconds is negative (" +
                            std::to_string(options.lingerMilliseconds) + ")");
    if (options.sendHighWaterMark < 0)
        throw ContractError("KvEventPublisher: sendHighWaterMark is negative (" +
                            std::to_string(options.sendHighWaterMark) + ")");
    int32_t const rank = options.dataParallelRank.value_or(0);
    std::string const endpoint = kvEventEndpointForRank(options.endpoint, rank);
    std::string const replayEndpoint = kvEventEndpointForRank(options.replayEndpoint, rank);
    s.topic = options.topic;
    s.stats.nextSequence = options.firstSequence.value_or(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count()));
    s.options = std::move(options);

    auto fail = [&](std::string const& what) {
        std::string const why = zmqWhy();
        s.closeSockets();
        throw ContractError("KvEventPublisher: " + what + ": " + why);
    };
    s.context = zmq_ctx_new();
    if (!s.context) fail("cannot create a ZMQ context");
    s.pub = zmq_socket(s.context, ZMQ_XPUB);
    if (!s.pub) fail("cannot create the XPUB socket");
    int const verbose = 1;  // every subscriber's subscription comes up, not only a topic's first
    zmq_setsockopt(s.pub, ZMQ_XPUB_VERBOSE, &verbose, sizeof verbose);
    int const hwm = s.options.sendHighWaterMark;
    int const linger = 1000;  // close() gives queued messages a second to leave, never more
    zmq_setsockopt(s.pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s.pub, ZMQ_LINGER, &linger, sizeof linger);
    if (kvEventEndpointBinds(endpoint) ? zmq_bind(s.pub, endpoint.c_str()) != 0
                                       : zmq_connect(s.pub, endpoint.c_str()) != 0)
        fail(std::string(kvEventEndpointBinds(endpoint) ? "cannot bind " : "cannot connect ") + endpoint);
    if (!replayEndpoint.empty()) {
        s.replay = zmq_socket(s.context, ZMQ_ROUTER);
        if (!s.replay) fail("cannot create the replay ROUTER socket");
        zmq_setsockopt(s.replay, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_bind(s.replay, replayEndpoint.c_str()) != 0) fail("cannot bind the replay endpoint " + replayEndpoint);
    }
    try {
        s.thread = std::thread([&s] { s.run(); });
    } catch (...) {
        s.closeSockets();
        throw;
    }
}

KvEventPublisher::~KvEventPublisher() { close(); }

void KvEventPublisher::consume(KvEventLog& events) noexcept {
    if (events.empty()) return;
    Impl& s = *impl_;
    Impl::Batch batch;
    batch.timestamp = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    KvEventLog recycled;
    bool haveRecycled = false;
    {
        std::lock_guard<std::mutex> lock(s.mutex);
        if (!s.spare.empty()) {
            recycled = std::move(s.spare.back());
            s.spare.pop_back();
            haveRecycled = true;
        }
    }
    // The batch takes the manager's log and the manager gets a recycled one in exchange: no copy, and both keep
    // their capacity, so steady state allocates nothing (handing the manager's buffers over without an exchange
    // made it allocate, and fault in fresh pages, on every call). With no recycled log to give (the sender is
    // behind), the batch is a copy and the manager keeps its own.
    bool copied = true;
    if (haveRecycled) {
        recycled.clear();
        recycled.blockSize = events.blockSize;
        batch.events = std::move(events);
        events = std::move(recycled);
    } else {
        try {
            batch.events = events;
        } catch (...) {
            copied = false;
        }
    }
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.closed || !copied) {
        ++s.stats.droppedBatches;
        return;
    }
    batch.sequence = s.stats.nextSequence++;
    ++s.stats.acceptedBatches;
    try {
        if (s.queue.size() >= s.options.maxQueuedBatches) {
            s.queue.pop_front();  // the oldest: its sequence number becomes a gap the consumer sees
            ++s.stats.droppedBatches;
        }
        s.queue.push_back(std::move(batch));
        s.stats.queuedBatches = s.queue.size();
    } catch (...) {
        ++s.stats.droppedBatches;
        return;
    }
    if (2 * s.queue.size() >= s.options.maxQueuedBatches) s.wake.notify_one();
}

bool KvEventPublisher::waitForSubscriber(int32_t timeoutMilliseconds) {
    Impl& s = *impl_;
    std::unique_lock<std::mutex> lock(s.mutex);
    s.subscribed.wait_for(lock, std::chrono::milliseconds(std::max(0, timeoutMilliseconds)),
                          [&] { return s.closed || s.stats.subscriptions > 0; });
    return s.stats.subscriptions > 0;
}

bool KvEventPublisher::flush(int32_t timeoutMilliseconds) {
    Impl& s = *impl_;
    std::unique_lock<std::mutex> lock(s.mutex);
    return s.drained.wait_for(lock, std::chrono::milliseconds(std::max(0, timeoutMilliseconds)),
                              [&] { return s.closed || (s.queue.empty() && !s.sending); });
}

void KvEventPublisher::close() noexcept {
    Impl& s = *impl_;
    {
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.closed) return;
        s.closed = true;
        s.stopping = true;  // the sender sends what is queued, then stops
    }
    s.wake.notify_all();
    s.subscribed.notify_all();
    if (s.thread.joinable()) s.thread.join();
    s.closeSockets();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stats.queuedBatches = 0;
    s.drained.notify_all();
}

KvEventPublisherStats KvEventPublisher::stats() const {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    KvEventPublisherStats out = impl_->stats;
    out.holding = !impl_->closed && impl_->holdingLocked();
    return out;
}

KvEventPublisherOptions const& KvEventPublisher::options() const noexcept { return impl_->options; }

#else  // built without libzmq / msgpack-cxx

struct KvEventPublisher::Impl {
    KvEventPublisherOptions options;
};

bool KvEventPublisher::available() noexcept { return false; }

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions) {
    throw KvEventPublisherUnavailableError(
        "KvEventPublisher: this ctxcache was built without libzmq and msgpack-cxx (Debian libzmq3-dev "
        "libmsgpack-cxx-dev; CMake CTXCACHE_KV_EVENT_PUBLISHER); drain the events and ship them another way");
}
KvEventPublisher::~KvEventPublisher() = default;
void KvEventPublisher::consume(KvEventLog&) noexcept {}
bool KvEventPublisher::flush(int32_t) { return true; }
bool KvEventPublisher::waitForSubscriber(int32_t) { return false; }
void KvEventPublisher::close() noexcept {}
KvEventPublisherStats KvEventPublisher::stats() const { return {}; }
KvEventPublisherOptions const& KvEventPublisher::options() const noexcept { return impl_->options; }

#endif

}  // namespace ctxcache
