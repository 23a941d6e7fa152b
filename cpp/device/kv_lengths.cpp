// KvLengths: the device KV length vector and its per-step updates.
#include "ctxcache/device/kv_lengths.h"

#include <algorithm>
#include <string>

#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {
[[noreturn]] void fail(char const* op, std::string const& why) {
    throw ContractError(std::string("KvLengths::") + op + ": " + why);
}
// Validated before anything is allocated: a refused geometry costs nothing.
int32_t validatedBatch(DeviceBackend const& backend, int32_t maxBatch) {
    if (maxBatch <= 0) fail("KvLengths", "maxBatch must be positive (got " + std::to_string(maxBatch) + ")");
    if (static_cast<size_t>(maxBatch) * sizeof(RowMove) + sizeof(CompactTensor) + 16 > backend.options().maxTableBytes)
        fail("KvLengths", "maxBatch " + std::to_string(maxBatch) + " is too large for the backend's descriptor table");
    return maxBatch;
}
}  // namespace

KvLengths::KvLengths(DeviceBackend& backend, int32_t maxBatch, ExternalMemory external)
    : backend_(&backend),
      maxBatch_(validatedBatch(backend, maxBatch)),
      storage_(DeviceBuffer::make(backend, external, static_cast<size_t>(maxBatch) * sizeof(int32_t), alignof(int32_t),
                                  "KvLengths")) {
    moves_.reserve(static_cast<size_t>(maxBatch));
}

void KvLengths::set(int32_t const* lengths, int32_t count) {
    if (count < 0 || count > maxBatch_)
        fail("set", "count " + std::to_string(count) + " is outside [0, " + std::to_string(maxBatch_) + "]");
    if (count > 0 && !lengths) fail("set", "lengths is null");
    for (int32_t i = 0; i < count; ++i)
        if (lengths[i] < 0)
            fail("set", "lengths[" + std::to_string(i) + "] is negative (" + std::to_string(lengths[i]) + ")");
    backend_->upload(data(), lengths, static_cast<size_t>(count) * sizeof(int32_t));
    activeBatch_ = count;
}

void KvLengths::setEntry(int32_t index, int32_t value) {
    if (index < 0 || index > activeBatch_ || index >= maxBatch_)
        fail("setEntry", "index " + std::to_string(index) + " is outside [0, " +
                             std::to_string(std::min(activeBatch_ + 1, maxBatch_)) + ")");
    if (value < 0) fail("setEntry", "value is negative (" + std::to_string(value) + ")");
    backend_->upload(data() + index, &value, sizeof(int32_t));
    if (index == activeBatch_) ++activeBatch_;
}

void KvLengths::truncate(int32_t count) {
    if (count < 0 || count > activeBatch_)
        fail("truncate", "count " + std::to_string(count) + " is outside [0, " + std::to_string(activeBatch_) + "]");
    activeBatch_ = count;
}

void KvLengths::add(int32_t increment) { backend_->addToLengths(data(), activeBatch_, increment, nullptr); }

void KvLengths::add(KvLengths const& increments) {
    if (&increments.backend() != backend_) fail("add", "the increments live on another backend");
    if (increments.activeBatch() != activeBatch_)
        fail("add", "the increments cover " + std::to_string(increments.activeBatch()) + " sequences, the batch has " +
                        std::to_string(activeBatch_));
    if (&increments == this) fail("add", "a vector cannot be its own increments");
    backend_->addToLengths(data(), activeBatch_, 0, increments.data());
}

void KvLengths::compact(int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch) {
    if (oldBatch != activeBatch_)
        fail("compact", "the map has " + std::to_string(oldBatch) + " entries, the active batch is " +
                            std::to_string(activeBatch_));
    planCompaction("KvLengths::compact", oldToNew, oldBatch, newBatch, moves_);
    CompactTensor const tensor{data(), sizeof(int32_t), static_cast<uint64_t>(maxBatch_)};
    backend_->compactRows(&tensor, 1, moves_.data(), static_cast<int32_t>(moves_.size()));
    activeBatch_ = newBatch;
}

std::vector<int32_t> KvLengths::read() const {
    std::vector<int32_t> out(static_cast<size_t>(activeBatch_));
    backend_->download(out.data(), data(), out.size() * sizeof(int32_t));
    return out;
}

}  // namespace ctxcache::device
