// BookkeepingStore: puts reserve a slot per new block in the LRU index and complete it at once (no bytes to wait
// for); gets take the index's resident run and touch it. Full contract: include/ctxcache/tier/bookkeeping_store.h.

#include "ctxcache/tier/bookkeeping_store.h"

#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::tier {

namespace {

int32_t validated(int32_t capacityPages) {
    if (capacityPages <= 0)
        throw ContractError("BookkeepingStore: capacityPages must be positive (got " + std::to_string(capacityPages) +
                            ")");
    return capacityPages;
}

void requireHashes(BlockHash const* hashes, size_t count, char const* operation) {
    if (count > 0 && !hashes) throw ContractError(std::string("BookkeepingStore::") + operation + ": hashes is null");
}

}  // namespace

BookkeepingStore::BookkeepingStore(int32_t capacityPages) : capacity_(validated(capacityPages)), index_(capacityPages) {
    metrics_.capacityPages = capacityPages;
}

size_t BookkeepingStore::put(BlockHash const* hashes, size_t count) {
    requireHashes(hashes, count, "put");
    std::lock_guard<std::mutex> const lock(mutex_);
    ++metrics_.putCalls;
    if (count == 0) return 0;
    uint64_t const droppedBefore = index_.counters().droppedBlocks;
    size_t const written = index_.reserveWrites(hashes, count, slots_, nullptr, nullptr, &held_);
    size_t refused = 0;
    for (size_t i = 0; i < count; ++i) {
        if (slots_[i] != HostTierIndex::kNoSlot) index_.completeWrites(&slots_[i], 1);  // the last ends most recent
        else if (held_[i] == HostTierIndex::kNoSlot) ++refused;  // no room (reserveWrites stopped before it)
    }
    metrics_.droppedBlocks += index_.counters().droppedBlocks - droppedBefore;
    metrics_.writtenBlocks += written;
    metrics_.refusedPuts += refused;
    metrics_.skippedPuts += count - written - refused;
    metrics_.residentBlocks = index_.residentCount();
    return written;
}

size_t BookkeepingStore::get(BlockHash const* hashes, size_t count) {
    requireHashes(hashes, count, "get");
    std::lock_guard<std::mutex> const lock(mutex_);
    ++metrics_.getCalls;
    slots_.clear();
    size_t const n = index_.residentRun(hashes, count, &slots_);
    for (size_t i = 0; i < n; ++i) index_.touch(slots_[i]);  // in order: the run's last block ends the most recent
    if (n > 0) ++metrics_.hitCalls;
    metrics_.hitBlocks += n;
    return n;
}

size_t BookkeepingStore::probe(BlockHash const* hashes, size_t count) const {
    requireHashes(hashes, count, "probe");
    std::lock_guard<std::mutex> const lock(mutex_);
    return index_.residentRun(hashes, count);
}

void BookkeepingStore::clear() {
    std::lock_guard<std::mutex> const lock(mutex_);
    index_.clear();
    metrics_.residentBlocks = index_.residentCount();
}

BookkeepingStoreMetrics BookkeepingStore::metrics() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    return metrics_;
}

size_t BookkeepingStore::memoryBytes() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    return sizeof(*this) + index_.memoryBytes() + slots_.capacity() * sizeof(int32_t);
}

void BookkeepingStore::checkInvariants() const {
    std::lock_guard<std::mutex> const lock(mutex_);
    index_.checkInvariants();
    if (index_.writingCount() != 0 || index_.pinnedCount() != 0)
        throw InvariantError("BookkeepingStore: " + std::to_string(index_.writingCount()) + " writing and " +
                             std::to_string(index_.pinnedCount()) + " pinned slots between calls (expected none)");
    if (metrics_.residentBlocks != index_.residentCount())
        throw InvariantError("BookkeepingStore: the metrics count " + std::to_string(metrics_.residentBlocks) +
                             " resident blocks, the index " + std::to_string(index_.residentCount()));
}

}  // namespace ctxcache::tier
