// KvEventLog: flat append-only event storage (include/ctxcache/kv_events.h).

#include "ctxcache/kv_events.h"

#include <algorithm>

namespace ctxcache {
namespace {

// Room for `extra` more elements, growing geometrically (reserve(size + extra) alone would reallocate on every
// append once the capacity is reached).
template <class T>
void makeRoom(std::vector<T>& v, size_t extra) {
    size_t const needed = v.size() + extra;
    if (needed > v.capacity()) v.reserve(std::max(needed, 2 * v.capacity()));
}

}  // namespace

KvEvent KvEventLog::header(KvEventType type, bool hasParent, uint64_t parentBlockHash, size_t count,
                           size_t tokenCount) const noexcept {
    KvEvent event;
    event.type = type;
    event.hasParent = hasParent;
    event.parentBlockHash = hasParent ? parentBlockHash : 0;
    event.firstHash = hashes_.size();
    event.hashCount = count;
    event.firstToken = tokens_.size();
    event.tokenCount = tokenCount;
    return event;
}

void KvEventLog::reserveFor(size_t count, size_t tokenCount) {
    makeRoom(events_, 1);
    makeRoom(hashes_, count);
    makeRoom(tokens_, tokenCount);
}

void KvEventLog::appendStored(BlockHash const* blockHashes, size_t count, bool hasParent, uint64_t parentBlockHash,
                              int32_t const* tokens, size_t tokenCount) {
    KvEvent const event = header(KvEventType::kBlockStored, hasParent, parentBlockHash, count, tokenCount);
    reserveFor(count, tokenCount);
    // Nothing below allocates: the log is unchanged if a reservation throws.
    for (size_t i = 0; i < count; ++i) hashes_.push_back(kvEventBlockHash(blockHashes[i]));
    tokens_.insert(tokens_.end(), tokens, tokens + tokenCount);
    events_.push_back(event);
}

void KvEventLog::beginRemoved(size_t capacity) {
    makeRoom(events_, 1);
    makeRoom(hashes_, capacity);
    KvEvent event;
    event.type = KvEventType::kBlockRemoved;
    event.firstHash = hashes_.size();
    event.firstToken = tokens_.size();
    events_.push_back(event);
}

void KvEventLog::endRemoved() noexcept {
    if (events_.empty() || events_.back().type != KvEventType::kBlockRemoved) return;
    KvEvent const& event = events_.back();
    if (event.hashCount == 0) {
        events_.pop_back();
        return;
    }
    auto const first = hashes_.begin() + static_cast<std::ptrdiff_t>(event.firstHash);
    std::reverse(first, first + static_cast<std::ptrdiff_t>(event.hashCount));
}

void KvEventLog::appendCleared() {
    KvEvent event;
    event.type = KvEventType::kAllBlocksCleared;
    event.firstHash = hashes_.size();
    event.firstToken = tokens_.size();
    events_.push_back(event);
}

void KvEventLog::appendEvent(KvEventType type, bool hasParent, uint64_t parentBlockHash, uint64_t const* blockHashes,
                             size_t count, int32_t const* tokens, size_t tokenCount) {
    KvEvent const event = header(type, hasParent, parentBlockHash, count, tokenCount);
    reserveFor(count, tokenCount);
    hashes_.insert(hashes_.end(), blockHashes, blockHashes + count);
    tokens_.insert(tokens_.end(), tokens, tokens + tokenCount);
    events_.push_back(event);
}

void KvEventLog::append(KvEventLog const& other) {
    size_t const hashBase = hashes_.size();
    size_t const tokenBase = tokens_.size();
    makeRoom(events_, other.events_.size());
    hashes_.insert(hashes_.end(), other.hashes_.begin(), other.hashes_.end());
    tokens_.insert(tokens_.end(), other.tokens_.begin(), other.tokens_.end());
    for (KvEvent event : other.events_) {
        event.firstHash += hashBase;
        event.firstToken += tokenBase;
        events_.push_back(event);
    }
    if (blockSize == 0) blockSize = other.blockSize;
}

}  // namespace ctxcache
