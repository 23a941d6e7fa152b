// ResidentState: slab offsets in one allocation, row transfers, one-launch zeroing and compaction.
#include "ctxcache/device/resident_state.h"

#include <string>

#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {

constexpr size_t kSlabAlignment = 256;
size_t alignUp(size_t value) { return (value + kSlabAlignment - 1) / kSlabAlignment * kSlabAlignment; }

[[noreturn]] void fail(char const* op, std::string const& why) {
    throw ContractError(std::string("ResidentState::") + op + ": " + why);
}

// Every check runs before anything is allocated: a refused geometry costs nothing.
ResidentStateGeometry const& validated(DeviceBackend const& backend, ResidentStateGeometry const& g) {
    if (g.maxBatch <= 0) fail("ResidentState", "maxBatch must be positive (got " + std::to_string(g.maxBatch) + ")");
    if (g.numLayers < 0 || g.hiddenSize < 0) fail("ResidentState", "numLayers and hiddenSize must be >= 0");
    if (g.numLayers == 0 && g.hiddenSize == 0)
        fail("ResidentState", "no recurrent layer and no hidden row: nothing to store");
    if (g.numLayers > 0) {
        if (g.recurrentHeads <= 0 || g.recurrentHeadDim <= 0 || g.stateSize <= 0)
            fail("ResidentState", "recurrentHeads, recurrentHeadDim and stateSize must be positive");
        if (g.convDim < 0 || g.convKernel < 0 || (g.convDim == 0) != (g.convKernel == 0))
            fail("ResidentState", "convDim and convKernel must both be positive (or both 0: no conv state)");
        if (!isValidDType(static_cast<int32_t>(g.recurrentDtype)) || !isValidDType(static_cast<int32_t>(g.convDtype)))
            fail("ResidentState", "unknown dtype");
        long double const row =
            1.0L * g.recurrentHeads * g.recurrentHeadDim * g.stateSize * 4 + 1.0L * g.convDim * g.convKernel * 4;
        if (row * g.maxBatch * g.numLayers > 1e18L) fail("ResidentState", "state too large");
    }
    // zeroSlot's table holds two spans per layer; compact's holds every slab and a move per row.
    size_t const layers = static_cast<size_t>(g.numLayers);
    size_t const slabs = layers * (g.numLayers > 0 && g.convDim > 0 ? 2 : 1) + (g.hiddenSize > 0 ? 1 : 0);
    if (2 * layers > backend.tableCapacity(sizeof(SpanCopy)) ||
        slabs * sizeof(CompactTensor) + 16 + static_cast<size_t>(g.maxBatch) * sizeof(RowMove) >
            backend.options().maxTableBytes)
        fail("ResidentState", std::to_string(g.numLayers) + " layers of " + std::to_string(g.maxBatch) +
                                  " rows need a larger descriptor table than the backend's " +
                                  std::to_string(backend.options().maxTableBytes) + " bytes (raise maxTableBytes)");
    return g;
}

// The slab offsets of a validated geometry (any output may be null); returns the footprint.
size_t slabLayout(ResidentStateGeometry const& g, std::vector<size_t>* recurrent, std::vector<size_t>* conv,
                  size_t* hidden) {
    size_t const batch = static_cast<size_t>(g.maxBatch);
    size_t const recurrentRow = g.numLayers == 0
                                    ? 0
                                    : static_cast<size_t>(g.recurrentHeads) * static_cast<size_t>(g.recurrentHeadDim) *
                                          static_cast<size_t>(g.stateSize) * dtypeSize(g.recurrentDtype);
    size_t const convRow =
        g.numLayers == 0 ? 0
                         : static_cast<size_t>(g.convDim) * static_cast<size_t>(g.convKernel) * dtypeSize(g.convDtype);
    size_t offset = 0;
    for (int32_t layer = 0; layer < g.numLayers; ++layer) {
        if (recurrent) recurrent->push_back(offset);
        offset = alignUp(offset + batch * recurrentRow);
        if (conv) conv->push_back(offset);
        offset = alignUp(offset + batch * convRow);
    }
    if (hidden) *hidden = offset;
    return alignUp(offset + batch * static_cast<size_t>(g.hiddenSize) * dtypeSize(DType::kFp16));
}

}  // namespace

size_t ResidentState::requiredBytes(DeviceBackend const& backend, ResidentStateGeometry const& geometry) {
    return slabLayout(validated(backend, geometry), nullptr, nullptr, nullptr);
}

ResidentState::ResidentState(DeviceBackend& backend, ResidentStateGeometry const& geometry, ExternalMemory external)
    : backend_(&backend), geometry_(validated(backend, geometry)) {
    size_t const footprint = slabLayout(geometry_, &recurrentOffsets_, &convOffsets_, &hiddenOffset_);
    storage_ = DeviceBuffer::make(backend, external, footprint, kExternalAlignment, "ResidentState");
    for (int32_t layer = 0; layer < geometry_.numLayers; ++layer) {
        slabs_.push_back(slab(StatePart::kRecurrent, layer));
        if (rowBytes(StatePart::kConv) > 0) slabs_.push_back(slab(StatePart::kConv, layer));
    }
    if (geometry_.hiddenSize > 0) slabs_.push_back(slab(StatePart::kBoundaryHidden, 0));
    spans_.reserve(2 * static_cast<size_t>(geometry_.numLayers));
    moves_.reserve(static_cast<size_t>(geometry_.maxBatch));
}

size_t ResidentState::rowBytes(StatePart part) const {
    ResidentStateGeometry const& g = geometry_;
    switch (part) {
        case StatePart::kRecurrent:
            return g.numLayers == 0 ? 0
                                    : static_cast<size_t>(g.recurrentHeads) * static_cast<size_t>(g.recurrentHeadDim) *
                                          static_cast<size_t>(g.stateSize) * dtypeSize(g.recurrentDtype);
        case StatePart::kConv:
            return g.numLayers == 0
                       ? 0
                       : static_cast<size_t>(g.convDim) * static_cast<size_t>(g.convKernel) * dtypeSize(g.convDtype);
        case StatePart::kBoundaryHidden: return static_cast<size_t>(g.hiddenSize) * dtypeSize(DType::kFp16);
        case StatePart::kPartialKv:
        case StatePart::kDraftPartialKv: break;
    }
    fail("rowBytes", "part " + std::to_string(static_cast<int32_t>(part)) + " is not a resident-state part");
}

void ResidentState::checkRow(char const* op, StatePart part, int32_t layer, int32_t slot) const {
    size_t const bytes = rowBytes(part);  // rejects snapshot-only parts
    if (bytes == 0) fail(op, "this state holds no rows of part " + std::to_string(static_cast<int32_t>(part)));
    int32_t const layers = part == StatePart::kBoundaryHidden ? 1 : geometry_.numLayers;
    if (layer < 0 || layer >= layers)
        fail(op, "layer " + std::to_string(layer) + " is outside [0, " + std::to_string(layers) + ")");
    if (slot < 0 || slot >= geometry_.maxBatch)
        fail(op, "slot " + std::to_string(slot) + " is outside [0, " + std::to_string(geometry_.maxBatch) + ")");
}

CompactTensor ResidentState::slab(StatePart part, int32_t layer) const {
    checkRow("slab", part, layer, 0);
    size_t const offset = part == StatePart::kRecurrent ? recurrentOffsets_[static_cast<size_t>(layer)]
                          : part == StatePart::kConv    ? convOffsets_[static_cast<size_t>(layer)]
                                                        : hiddenOffset_;
    return CompactTensor{storage_.bytes() + offset, rowBytes(part), static_cast<uint64_t>(geometry_.maxBatch)};
}

void* ResidentState::row(StatePart part, int32_t layer, int32_t slot) const {
    checkRow("row", part, layer, slot);
    CompactTensor const s = slab(part, layer);
    return static_cast<unsigned char*>(s.base) + static_cast<size_t>(slot) * s.rowBytes;
}

void ResidentState::writeRow(StatePart part, int32_t layer, int32_t slot, void const* host, size_t bytes) {
    checkRow("writeRow", part, layer, slot);
    if (bytes != rowBytes(part))
        fail("writeRow", std::to_string(bytes) + " bytes given for a row of " + std::to_string(rowBytes(part)));
    backend_->upload(row(part, layer, slot), host, bytes);
}

void ResidentState::readRow(StatePart part, int32_t layer, int32_t slot, void* host, size_t bytes) const {
    checkRow("readRow", part, layer, slot);
    if (bytes != rowBytes(part))
        fail("readRow", std::to_string(bytes) + " bytes asked for a row of " + std::to_string(rowBytes(part)));
    backend_->download(host, row(part, layer, slot), bytes);
}

void ResidentState::zeroSlot(int32_t slot) {
    if (slot < 0 || slot >= geometry_.maxBatch)
        fail("zeroSlot",
             "slot " + std::to_string(slot) + " is outside [0, " + std::to_string(geometry_.maxBatch) + ")");
    spans_.clear();
    for (int32_t layer = 0; layer < geometry_.numLayers; ++layer) {
        spans_.push_back(
            SpanCopy{row(StatePart::kRecurrent, layer, slot), nullptr, rowBytes(StatePart::kRecurrent), 0});
        if (rowBytes(StatePart::kConv) > 0)
            spans_.push_back(SpanCopy{row(StatePart::kConv, layer, slot), nullptr, rowBytes(StatePart::kConv), 0});
    }
    backend_->copySpans(spans_.data(), static_cast<int32_t>(spans_.size()));
}

void ResidentState::compact(int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch) {
    if (oldBatch > geometry_.maxBatch)
        fail("compact",
             "oldBatch " + std::to_string(oldBatch) + " exceeds maxBatch " + std::to_string(geometry_.maxBatch));
    planCompaction("ResidentState::compact", oldToNew, oldBatch, newBatch, moves_);
    backend_->compactRows(slabs_.data(), static_cast<int32_t>(slabs_.size()), moves_.data(),
                          static_cast<int32_t>(moves_.size()));
}

}  // namespace ctxcache::device
