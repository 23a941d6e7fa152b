// KvLengths: the device int32 KV length of every active sequence, [maxBatch] (reference c.15's device KV
// lengths): the attention kernels' view of how many tokens each slot holds.
//
// Invariants: 0 <= activeBatch <= maxBatch; entries at and beyond activeBatch are unspecified.
// External:   the vector may be an engine's own int32 array (ExternalMemory: 4-byte aligned, >= 4 * maxBatch
//             bytes); construction writes nothing there and activeBatch starts at 0.
// Cost:       set() is one upload; add() and compact() one launch each; read() one download.
// Threading:  single writer; must not outlive its backend.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxcache/device/device_backend.h"

namespace ctxcache::device {

class KvLengths {
public:
    // ContractError on maxBatch <= 0 or one too large for the descriptor table; ExternalMemoryError on external
    // memory that cannot hold it.
    KvLengths(DeviceBackend& backend, int32_t maxBatch, ExternalMemory external = {});

    DeviceBackend& backend() const noexcept { return *backend_; }
    int32_t maxBatch() const noexcept { return maxBatch_; }
    int32_t activeBatch() const noexcept { return activeBatch_; }
    int32_t const* data() const noexcept { return static_cast<int32_t const*>(storage_.data()); }
    int32_t* data() noexcept { return static_cast<int32_t*>(storage_.data()); }
    bool external() const noexcept { return !storage_.owning(); }

    // Start a batch: the lengths (e.g. each sequence's reuse length) of count <= maxBatch sequences, each >= 0.
    void set(int32_t const* lengths, int32_t count);
    // One entry: index < activeBatch replaces it; index == activeBatch (< maxBatch) appends a sequence (an
    // in-flight joiner). value >= 0. One upload.
    void setEntry(int32_t index, int32_t value);
    // Drop the sequences at and beyond count (count <= activeBatch): a joiner retracted before it was seated.
    void truncate(int32_t count);
    // lengths[i] += increment for every active sequence (one decode step).
    void add(int32_t increment);
    // lengths[i] += increments[i] for every active sequence (accepted speculative tokens); the increments live on
    // the same backend and cover the active batch.
    void add(KvLengths const& increments);
    // Compact by a dense, order-preserving map of activeBatch entries (batch_compaction.h); activeBatch becomes
    // newBatch.
    void compact(int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch);
    // The active lengths, downloaded.
    std::vector<int32_t> read() const;

private:
    DeviceBackend* backend_;
    int32_t maxBatch_;
    int32_t activeBatch_ = 0;
    DeviceBuffer storage_;
    std::vector<RowMove> moves_;
};

}  // namespace ctxcache::device
