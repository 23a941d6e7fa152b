// ResidentState: the live per-sequence state of a hybrid (attention + recurrent) or MTP model, one row per
// resident batch slot: for each recurrent layer a recurrent-state row [heads, headDim, stateSize] and a conv row
// [convDim, convKernel], plus an optional fp16 boundary hidden row [hiddenSize] (the MTP draft's input).
//
// Layout: per layer a recurrent slab [maxBatch, heads*headDim*stateSize] and a conv slab [maxBatch,
//         convDim*convKernel], then the hidden slab [maxBatch, hiddenSize]; each slab starts 256-byte aligned in
//         ONE allocation made at construction (footprintBytes() is its exact size).
//         Built over ExternalMemory (256-byte aligned, >= requiredBytes()), the state neither owns nor zeroes
//         it: its bytes are the initial rows.
// Cost:   zeroSlot and compact are one launch over every layer; row transfers are one copy each.
// Threading: single writer; must not outlive its backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/dtype.h"

namespace ctxcache::device {

// Values are part of the C ABI (CTXC_STATE_*): which kind of row a read, write or size query means.
enum class StatePart : int32_t {
    kRecurrent = 0,
    kConv = 1,
    kBoundaryHidden = 2,
    kPartialKv = 3,       // snapshot storage only: one base attention layer's partial K+V
    kDraftPartialKv = 4,  // snapshot storage only: one draft attention layer's partial K+V
};

struct ResidentStateGeometry {
    int32_t maxBatch = 0;
    int32_t numLayers = 0;  // recurrent layers (0 allowed: hidden rows only)
    int32_t recurrentHeads = 0;
    int32_t recurrentHeadDim = 0;
    int32_t stateSize = 0;
    DType recurrentDtype = DType::kFp32;
    int32_t convDim = 0;
    int32_t convKernel = 0;
    DType convDtype = DType::kFp16;
    int32_t hiddenSize = 0;  // fp16 boundary hidden row per slot; 0 = none
};

class ResidentState {
public:
    // ContractError on maxBatch <= 0, negative counts, a recurrent layer with a non-positive dimension, an
    // unknown dtype, or nothing to store at all; ExternalMemoryError on external memory that cannot hold it.
    ResidentState(DeviceBackend& backend, ResidentStateGeometry const& geometry, ExternalMemory external = {});
    // The footprint of this geometry on this backend (ContractError as the constructor).
    static size_t requiredBytes(DeviceBackend const& backend, ResidentStateGeometry const& geometry);

    DeviceBackend& backend() const noexcept { return *backend_; }
    ResidentStateGeometry const& geometry() const noexcept { return geometry_; }
    int32_t maxBatch() const noexcept { return geometry_.maxBatch; }
    int32_t numLayers() const noexcept { return geometry_.numLayers; }

    // Bytes of one row of a part (0 for a part this state does not hold); kPartialKv parts are a ContractError.
    size_t rowBytes(StatePart part) const;
    size_t footprintBytes() const noexcept { return storage_.size(); }
    void* data() const noexcept { return storage_.data(); }
    bool external() const noexcept { return !storage_.owning(); }
    // Device address of (part, layer, slot); the hidden part has layer 0 only.
    void* row(StatePart part, int32_t layer, int32_t slot) const;
    // Base and row count of a part's slab, for descriptor building.
    CompactTensor slab(StatePart part, int32_t layer) const;

    void writeRow(StatePart part, int32_t layer, int32_t slot, void const* host, size_t bytes);
    void readRow(StatePart part, int32_t layer, int32_t slot, void* host, size_t bytes) const;

    // Zero the recurrent and conv rows of one slot in every layer (a new sequence's initial state): one launch.
    void zeroSlot(int32_t slot);
    // Compact rows [0, oldBatch) of every slab (recurrent, conv, hidden) by a dense, order-preserving map
    // (batch_compaction.h): one launch.
    void compact(int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch);

private:
    void checkRow(char const* op, StatePart part, int32_t layer, int32_t slot) const;

    DeviceBackend* backend_;
    ResidentStateGeometry geometry_;
    std::vector<size_t> recurrentOffsets_;
    std::vector<size_t> convOffsets_;
    size_t hiddenOffset_ = 0;
    DeviceBuffer storage_;
    std::vector<SpanCopy> spans_;        // zeroSlot's table, sized at construction
    std::vector<CompactTensor> slabs_;   // compact's tensors, fixed at construction
    std::vector<RowMove> moves_;         // compact's plan, reserved at construction
};

}  // namespace ctxcache::device
