// ContextCacheManager's KV event stream: enabling and disabling it, the sink, draining, the check that a
// publication carries its blocks' tokens (and well-formed identity keys), staging and emitting BlockStored runs, and
// the end-of-call rule (a lost event or an overfull log without a sink becomes one AllBlocksCleared). Contract (event
// order, bounds, loss): include/ctxcache/context_cache_manager.h and include/ctxcache/kv_events.h. Threading: the
// manager's single writer; the sink is called on the calling thread, at the end of a call.
#include "ctxcache/context_cache_manager.h"

#include <algorithm>
#include <string>
#include <utility>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/errors.h"
#include "lease_state.h"

namespace ctxcache {
namespace {

using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{""};

}  // namespace

void ContextCacheManager::enableKvEvents(size_t maxPendingEvents) {
    char const* const op = "enableKvEvents";
    if (eventsEnabled_) contract(op, "events are already enabled");
    if (maxPendingEvents == 0) contract(op, "maxPendingEvents must be positive");
    if (baseIndex_.size() != 0)
        contract(op, "the base index already holds " + str(static_cast<int64_t>(baseIndex_.size())) +
                         " blocks: enable events before the first publication");
    KvEventLog fresh;
    fresh.blockSize = pageSize_;
    fresh.appendCleared();
    events_ = std::move(fresh);
    eventsEnabled_ = true;
    eventsBroken_ = false;
    maxPendingEvents_ = maxPendingEvents;
}

void ContextCacheManager::disableKvEvents() noexcept {
    eventsEnabled_ = false;
    eventsBroken_ = false;
    events_.clear();
    eventSink_.reset();
    stagedStores_.clear();
}

void ContextCacheManager::setKvEventSink(std::shared_ptr<KvEventSink> sink) {
    if (!eventsEnabled_) contract("setKvEventSink", "events are not enabled");
    eventSink_ = std::move(sink);
    if (eventSink_ && eventCallDepth_ == 0) finishEventCall();
}

void ContextCacheManager::drainKvEvents(KvEventLog& out) {
    out.clear();
    out.blockSize = pageSize_;
    if (eventsEnabled_) std::swap(out, events_);
    events_.clear();
    events_.blockSize = pageSize_;
}

void ContextCacheManager::checkEventTokens(char const* operation, BlockTokenSpan tokens, KvEventKeys const& keys,
                                           size_t blocks) const {
    if (tokens.size > 0 && !tokens.data) contract(operation, "tokens is null");
    if (!eventsEnabled_) return;
    checkKvEventKeys(operation, keys);
    size_t const needed = blocks * static_cast<size_t>(pageSize_);
    if (tokens.size < needed)
        contract(operation, "KV events are on: the publication needs the tokens of its " +
                                str(static_cast<int64_t>(blocks)) + " blocks (" + str(static_cast<int64_t>(needed)) +
                                "), got " + str(static_cast<int64_t>(tokens.size)));
}

void ContextCacheManager::emitStored(std::vector<BlockHash> const& hashes, BlockTokenSpan tokens,
                                     KvEventKeys const& keys) noexcept {
    size_t const page = static_cast<size_t>(pageSize_);
    try {
        for (size_t run = 0; run < stagedStores_.size();) {
            size_t end = run + 1;
            while (end < stagedStores_.size() && stagedStores_[end] == stagedStores_[end - 1] + 1) ++end;
            size_t const first = stagedStores_[run];
            size_t const count = end - run;
            bool const hasParent = first > 0;
            events_.appendStored(hashes.data() + first, count, hasParent,
                                 hasParent ? kvEventBlockHash(hashes[first - 1]) : 0, tokens.data + first * page,
                                 count * page, keys, static_cast<int64_t>(first * page));
            run = end;
        }
    } catch (...) {
        eventFailed();
    }
    // stagedStores_ stays for the observer; commitRecord clears it.
}

void ContextCacheManager::eventFailed() noexcept {
    // An event could not be recorded (out of memory): what the consumer would learn is incomplete, so the
    // pending events are replaced by one AllBlocksCleared at the end of the call.
    lostKvEvents_ += events_.size() + 1;
    events_.clear();
    eventsBroken_ = true;
}

void ContextCacheManager::finishEventCall() noexcept {
    if (!eventsEnabled_) return;
    if (eventsBroken_ || (!eventSink_ && events_.size() > maxPendingEvents_)) {
        if (!eventsBroken_) lostKvEvents_ += events_.size();
        events_.clear();
        try {
            events_.appendCleared();
            eventsBroken_ = false;
        } catch (...) {
            return;  // still broken: the next call retries
        }
    }
    if (eventSink_ && !events_.empty()) {
        eventSink_->consume(events_);
        events_.clear();
        events_.blockSize = pageSize_;
    }
}

}  // namespace ctxcache
