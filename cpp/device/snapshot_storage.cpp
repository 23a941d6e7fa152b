// SnapshotStorage: slot sizing from byte budgets, region offsets, and the one-launch capture/restore table.
#include "ctxcache/device/snapshot_storage.h"

#include <algorithm>
#include <limits>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {

[[noreturn]] void fail(char const* op, std::string const& why) {
    throw ContractError(std::string("SnapshotStorage::") + op + ": " + why);
}

int32_t slotsFor(size_t budget, size_t bytesPerSlot) {
    if (bytesPerSlot == 0) return 0;
    return static_cast<int32_t>(std::min<size_t>(budget / bytesPerSlot, std::numeric_limits<int32_t>::max()));
}

size_t poolPartialBytes(KvPoolGeometry const& g) {
    size_t total = 0;
    for (KvLayerShape const& l : g.layers)
        total += 2 * static_cast<size_t>(g.pageSize) * static_cast<size_t>(l.kvHeads) * static_cast<size_t>(l.headDim) *
                 dtypeSize(g.dtype);
    return total;
}

}  // namespace

size_t SnapshotStorage::recurrentBytesPerSlot(ResidentStateGeometry const& g, bool boundaryHidden) {
    size_t const recurrent = g.numLayers == 0
                                 ? 0
                                 : static_cast<size_t>(g.recurrentHeads) * static_cast<size_t>(g.recurrentHeadDim) *
                                       static_cast<size_t>(g.stateSize) * dtypeSize(g.recurrentDtype);
    size_t const conv =
        g.numLayers == 0 ? 0
                         : static_cast<size_t>(g.convDim) * static_cast<size_t>(g.convKernel) * dtypeSize(g.convDtype);
    size_t const hidden = boundaryHidden ? static_cast<size_t>(g.hiddenSize) * dtypeSize(DType::kFp16) : 0;
    return static_cast<size_t>(g.numLayers) * (recurrent + conv) + hidden;
}

size_t SnapshotStorage::partialKvBytesPerSlot(KvPoolGeometry const* base, KvPoolGeometry const* draft) {
    return (base ? poolPartialBytes(*base) : 0) + (draft ? poolPartialBytes(*draft) : 0);
}

SnapshotStorage::SnapshotStorage(DeviceBackend& backend, ResidentState const* state, KvPagePool const* basePool,
                                 KvPagePool const* draftPool, SnapshotBudgets const& budgets)
    : backend_(&backend), state_(state), base_(basePool), draft_(draftPool), boundaryHidden_(budgets.boundaryHidden) {
    if ((state && &state->backend() != &backend) || (basePool && &basePool->backend() != &backend) ||
        (draftPool && &draftPool->backend() != &backend))
        fail("SnapshotStorage", "the state and pools must live on the storage's backend");
    if (draftPool && !basePool) fail("SnapshotStorage", "a draft pool needs a base pool");
    // One pool as both would let a restore write the same page from two regions in one launch (unordered on CUDA).
    if (draftPool && draftPool == basePool)
        fail("SnapshotStorage", "the draft pool must be another pool than the base pool");
    if (boundaryHidden_ && (!state || state->geometry().hiddenSize == 0))
        fail("SnapshotStorage", "boundaryHidden needs a resident state with hiddenSize > 0");
    recurrentBytesPerSlot_ = state ? recurrentBytesPerSlot(state->geometry(), boundaryHidden_) : 0;
    partialKvBytesPerSlot_ =
        partialKvBytesPerSlot(basePool ? &basePool->geometry() : nullptr, draftPool ? &draftPool->geometry() : nullptr);
    recurrentSlots_ = slotsFor(budgets.recurrentBytes, recurrentBytesPerSlot_);
    partialKvSlots_ = slotsFor(budgets.partialKvBytes, partialKvBytesPerSlot_);
    maxDescriptors_ = 2 * (state ? state->numLayers() : 0) + 1 + 2 * (basePool ? basePool->numLayers() : 0) +
                      2 * (draftPool ? draftPool->numLayers() : 0);
    if (static_cast<size_t>(maxDescriptors_) > backend.tableCapacity(sizeof(SpanCopy)))
        fail("SnapshotStorage", "a transfer needs " + std::to_string(maxDescriptors_) +
                                    " descriptors, more than the backend's table holds (raise maxTableBytes)");
    // Both checked before either allocates: a refused external slab costs nothing.
    size_t const recurrentBytes = static_cast<size_t>(recurrentSlots_) * recurrentBytesPerSlot_;
    size_t const partialKvBytes = static_cast<size_t>(partialKvSlots_) * partialKvBytesPerSlot_;
    DeviceBuffer recurrent;
    DeviceBuffer partialKv;
    if (budgets.recurrentMemory.data || budgets.recurrentMemory.bytes)
        recurrent = DeviceBuffer::external(backend, budgets.recurrentMemory, recurrentBytes, kExternalAlignment,
                                           "SnapshotStorage (recurrent slab)");
    if (budgets.partialKvMemory.data || budgets.partialKvMemory.bytes)
        partialKv = DeviceBuffer::external(backend, budgets.partialKvMemory, partialKvBytes, kExternalAlignment,
                                           "SnapshotStorage (partial-KV slab)");
    recurrent_ = recurrent.backend() ? std::move(recurrent) : DeviceBuffer(backend, recurrentBytes);
    partialKv_ = partialKv.backend() ? std::move(partialKv) : DeviceBuffer(backend, partialKvBytes);
    spans_.reserve(static_cast<size_t>(maxDescriptors_));
}

size_t SnapshotStorage::regionBytes(StatePart part, int32_t layer) const {
    auto requireLayer = [&](int32_t layers) {
        if (layer < 0 || layer >= layers)
            fail("regionBytes", "layer " + std::to_string(layer) + " is outside [0, " + std::to_string(layers) + ")");
    };
    switch (part) {
        case StatePart::kRecurrent:
        case StatePart::kConv: requireLayer(state_ ? state_->numLayers() : 0); return state_->rowBytes(part);
        case StatePart::kBoundaryHidden: requireLayer(boundaryHidden_ ? 1 : 0); return state_->rowBytes(part);
        case StatePart::kPartialKv: requireLayer(base_ ? base_->numLayers() : 0); return 2 * base_->pageBytes(layer);
        case StatePart::kDraftPartialKv:
            requireLayer(draft_ ? draft_->numLayers() : 0);
            return 2 * draft_->pageBytes(layer);
    }
    fail("regionBytes", "unknown part " + std::to_string(static_cast<int32_t>(part)));
}

void* SnapshotStorage::region(StatePart part, int32_t layer, int32_t slot) const {
    size_t const bytes = regionBytes(part, layer);
    if (bytes == 0) fail("region", "part " + std::to_string(static_cast<int32_t>(part)) + " holds no bytes here");
    bool const recurrentPart =
        part == StatePart::kRecurrent || part == StatePart::kConv || part == StatePart::kBoundaryHidden;
    int32_t const slots = recurrentPart ? recurrentSlots_ : partialKvSlots_;
    if (slot < 0 || slot >= slots)
        fail("region", "slot " + std::to_string(slot) + " is outside [0, " + std::to_string(slots) + ")");
    size_t offset = 0;
    if (recurrentPart) {
        size_t const perLayer = state_->rowBytes(StatePart::kRecurrent) + state_->rowBytes(StatePart::kConv);
        offset = static_cast<size_t>(slot) * recurrentBytesPerSlot_;
        if (part == StatePart::kBoundaryHidden) offset += static_cast<size_t>(state_->numLayers()) * perLayer;
        else
            offset += static_cast<size_t>(layer) * perLayer +
                      (part == StatePart::kConv ? state_->rowBytes(StatePart::kRecurrent) : 0);
        return recurrent_.bytes() + offset;
    }
    offset = static_cast<size_t>(slot) * partialKvBytesPerSlot_;
    int32_t const baseLayers = part == StatePart::kPartialKv ? layer : base_->numLayers();
    for (int32_t l = 0; l < baseLayers; ++l) offset += 2 * base_->pageBytes(l);
    if (part == StatePart::kDraftPartialKv)
        for (int32_t l = 0; l < layer; ++l) offset += 2 * draft_->pageBytes(l);
    return partialKv_.bytes() + offset;
}

void SnapshotStorage::writeRegion(StatePart part, int32_t layer, int32_t slot, void const* host, size_t bytes) {
    void* dst = region(part, layer, slot);
    if (bytes != regionBytes(part, layer))
        fail("writeRegion",
             std::to_string(bytes) + " bytes given for a region of " + std::to_string(regionBytes(part, layer)));
    backend_->upload(dst, host, bytes);
}

void SnapshotStorage::readRegion(StatePart part, int32_t layer, int32_t slot, void* host, size_t bytes) const {
    void const* src = region(part, layer, slot);
    if (bytes != regionBytes(part, layer))
        fail("readRegion",
             std::to_string(bytes) + " bytes asked of a region of " + std::to_string(regionBytes(part, layer)));
    backend_->download(host, src, bytes);
}

void SnapshotStorage::build(SnapshotTransfer const& t, bool capture) {
    char const* op = capture ? "capture" : "restore";
    bool const recurrentPart = t.recurrentSlot != -1;
    bool const partialPart = t.partialKvSlot != -1;
    if (!recurrentPart && !partialPart) fail(op, "the transfer names neither a recurrent nor a partial-KV slot");
    if (recurrentPart) {
        if (!state_ || recurrentSlots_ == 0) fail(op, "this storage has no recurrent slots");
        if (t.recurrentSlot < 0 || t.recurrentSlot >= recurrentSlots_)
            fail(op, "recurrent slot " + std::to_string(t.recurrentSlot) + " is outside [0, " +
                         std::to_string(recurrentSlots_) + ")");
        if (t.batchSlot < 0 || t.batchSlot >= state_->maxBatch())
            fail(op, "batch slot " + std::to_string(t.batchSlot) + " is outside [0, " +
                         std::to_string(state_->maxBatch()) + ")");
    }
    if (partialPart) {
        if (!base_ || partialKvSlots_ == 0) fail(op, "this storage has no partial-KV slots");
        if (t.partialKvSlot < 0 || t.partialKvSlot >= partialKvSlots_)
            fail(op, "partial-KV slot " + std::to_string(t.partialKvSlot) + " is outside [0, " +
                         std::to_string(partialKvSlots_) + ")");
        if (t.basePage < 0 || t.basePage >= base_->numPages())
            fail(op, "base page " + std::to_string(t.basePage) + " is outside [0, " +
                         std::to_string(base_->numPages()) + ")");
        if (draft_ && (t.draftPage < 0 || t.draftPage >= draft_->numPages()))
            fail(op, "draft page " + std::to_string(t.draftPage) + " is outside [0, " +
                         std::to_string(draft_->numPages()) + ")");
        if (!draft_ && t.draftPage != -1) fail(op, "a draft page was given but this storage has no draft pool");
        int32_t const pageSize = std::min(base_->pageSize(), draft_ ? draft_->pageSize() : base_->pageSize());
        // A whole base page is a shared page, never a partial snapshot, except with a draft pool (Hybrid+MTP): a
        // checkpoint at a page-aligned length keeps its last base page here because that page's draft half lags
        // one token behind (the boundary token's draft KV belongs to whoever reuses the checkpoint).
        bool const fullPageAllowed = draft_ != nullptr;
        if (t.validTokens <= 0 || t.validTokens > pageSize || (t.validTokens == pageSize && !fullPageAllowed))
            fail(op, "validTokens " + std::to_string(t.validTokens) + " is outside (0, " + std::to_string(pageSize) +
                         (fullPageAllowed ? "]" : ")"));
    }

    spans_.clear();
    auto add = [&](void* live, void* snapshot, size_t bytes) {
        spans_.push_back(capture ? SpanCopy{snapshot, live, bytes, 0} : SpanCopy{live, snapshot, bytes, 0});
    };
    if (recurrentPart) {
        for (int32_t layer = 0; layer < state_->numLayers(); ++layer) {
            add(state_->row(StatePart::kRecurrent, layer, t.batchSlot),
                region(StatePart::kRecurrent, layer, t.recurrentSlot), state_->rowBytes(StatePart::kRecurrent));
            if (state_->rowBytes(StatePart::kConv) > 0)
                add(state_->row(StatePart::kConv, layer, t.batchSlot), region(StatePart::kConv, layer, t.recurrentSlot),
                    state_->rowBytes(StatePart::kConv));
        }
        if (boundaryHidden_)
            add(state_->row(StatePart::kBoundaryHidden, 0, t.batchSlot),
                region(StatePart::kBoundaryHidden, 0, t.recurrentSlot), state_->rowBytes(StatePart::kBoundaryHidden));
    }
    if (partialPart) {
        auto addPool = [&](KvPagePool const& pool, StatePart part, int32_t page) {
            for (int32_t layer = 0; layer < pool.numLayers(); ++layer) {
                auto* slot = static_cast<unsigned char*>(region(part, layer, t.partialKvSlot));
                size_t const bytes = static_cast<size_t>(t.validTokens) * pool.tokenBytes(layer);
                add(pool.pageData(layer, page), slot, bytes);
                add(pool.pageData(layer, page + pool.numPages()), slot + pool.pageBytes(layer), bytes);
            }
        };
        addPool(*base_, StatePart::kPartialKv, t.basePage);
        if (draft_) addPool(*draft_, StatePart::kDraftPartialKv, t.draftPage);
    }
    backend_->copySpans(spans_.data(), static_cast<int32_t>(spans_.size()));
}

void SnapshotStorage::capture(SnapshotTransfer const& transfer) { build(transfer, true); }
void SnapshotStorage::restore(SnapshotTransfer const& transfer) { build(transfer, false); }

}  // namespace ctxcache::device
