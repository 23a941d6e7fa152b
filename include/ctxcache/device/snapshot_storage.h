// SnapshotStorage: device slabs for hybrid checkpoints (reference c.8). The manager owns the slot ids and their
// refcounts; this owns only the bytes and moves them.
//
//   recurrent slot  = for each recurrent layer: its recurrent row, then its conv row; then (boundaryHidden) the
//                     fp16 boundary hidden row.        bytes = L_rec * (recurrent + conv) [+ 2 * hiddenSize]
//   partial-KV slot = for each base attention layer [2, pageSize, kvHeads, headDim] (K half, then V half),
//                     then the same for each draft layer.  bytes = sum over layers of 2 * pageBytes
// Slots are packed without padding (slot s at s * bytesPerSlot); slot counts are budget / bytesPerSlot (integer
// division, 0 when a part has nothing to store) and footprintBytes() is exactly the sum of both slabs.
//
// Capture and restore move every part of a transfer (recurrent + conv rows of all layers, the first
// validTokens tokens of a K page and its V page in every base and draft layer, the hidden row) with ONE
// descriptor table and ONE launch: the reference issues one memcpy per layer and tensor.
// Cost: O(layers) host work to build the table (its storage is reserved at construction); one launch.
// Threading: single writer; the state and pools given must outlive the storage and share its backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/resident_state.h"

namespace ctxcache::device {

struct SnapshotBudgets {
    size_t recurrentBytes = 0;  // bytes available for recurrent slots
    size_t partialKvBytes = 0;  // bytes available for partial-KV slots
    bool boundaryHidden = false;  // recurrent slots also hold the boundary hidden row (needs state hiddenSize > 0)
    // Caller memory for each slab (256-byte aligned, >= slots * bytes per slot); empty = allocate. Never owned,
    // zeroed or written at construction: the bytes there are the slots' contents.
    ExternalMemory recurrentMemory;
    ExternalMemory partialKvMemory;
};

// One checkpoint transfer. A part whose slot is -1 is skipped; at least one part must be present.
struct SnapshotTransfer {
    int32_t batchSlot = -1;       // resident slot of the recurrent part
    int32_t recurrentSlot = -1;   // recurrent snapshot slot; -1 = no recurrent part
    int32_t partialKvSlot = -1;   // partial-KV snapshot slot; -1 = no partial-KV part
    int32_t basePage = -1;        // K page id in the base pool (with partialKvSlot)
    int32_t draftPage = -1;       // K page id in the draft pool (with partialKvSlot, iff there is a draft pool)
    int32_t validTokens = 0;      // tokens of the partial page: 0 < validTokens < pageSize, or == pageSize with a
                              // draft pool (a Hybrid+MTP checkpoint whose draft half of the page is partial)
};

class SnapshotStorage {
public:
    // state / basePool / draftPool may be null (nothing of that kind to snapshot); a draft pool needs a base
    // pool and must be another pool. Everything must live on `backend`. ContractError otherwise, or when
    // boundaryHidden is asked of a state without hidden rows; ExternalMemoryError on external memory that cannot
    // hold its slab.
    SnapshotStorage(DeviceBackend& backend, ResidentState const* state, KvPagePool const* basePool,
                    KvPagePool const* draftPool, SnapshotBudgets const& budgets);

    static size_t recurrentBytesPerSlot(ResidentStateGeometry const& state, bool boundaryHidden);
    static size_t partialKvBytesPerSlot(KvPoolGeometry const* base, KvPoolGeometry const* draft);

    size_t recurrentBytesPerSlot() const noexcept { return recurrentBytesPerSlot_; }
    size_t partialKvBytesPerSlot() const noexcept { return partialKvBytesPerSlot_; }
    int32_t recurrentSlots() const noexcept { return recurrentSlots_; }
    int32_t partialKvSlots() const noexcept { return partialKvSlots_; }
    size_t footprintBytes() const noexcept { return recurrent_.size() + partialKv_.size(); }
    // The slabs: slot s of a kind at data + s * bytesPerSlot (null when the kind has no slots).
    void* recurrentData() const noexcept { return recurrent_.data(); }
    void* partialKvData() const noexcept { return partialKv_.data(); }
    bool recurrentExternal() const noexcept { return !recurrent_.owning(); }
    bool partialKvExternal() const noexcept { return !partialKv_.owning(); }
    bool boundaryHidden() const noexcept { return boundaryHidden_; }
    // What the storage was built over (null: nothing of that kind); a coordinator checks they are its own.
    ResidentState const* state() const noexcept { return state_; }
    KvPagePool const* basePool() const noexcept { return base_; }
    KvPagePool const* draftPool() const noexcept { return draft_; }
    // Most descriptors one transfer needs: 2 * recurrent layers + 1 + 2 * (base + draft attention layers).
    int32_t maxDescriptors() const noexcept { return maxDescriptors_; }

    // live -> snapshot / snapshot -> live; each ONE launch. Validates every slot, page and length first.
    void capture(SnapshotTransfer const& transfer);
    void restore(SnapshotTransfer const& transfer);

    // One region of a slot (for tests and tools): kRecurrent / kConv (layer = recurrent layer), kBoundaryHidden
    // (layer 0), kPartialKv (base attention layer), kDraftPartialKv (draft attention layer).
    size_t regionBytes(StatePart part, int32_t layer) const;
    void* region(StatePart part, int32_t layer, int32_t slot) const;
    void writeRegion(StatePart part, int32_t layer, int32_t slot, void const* host, size_t bytes);
    void readRegion(StatePart part, int32_t layer, int32_t slot, void* host, size_t bytes) const;

private:
    void build(SnapshotTransfer const& transfer, bool capture);

    DeviceBackend* backend_;
    ResidentState const* state_;
    KvPagePool const* base_;
    KvPagePool const* draft_;
    bool boundaryHidden_;
    size_t recurrentBytesPerSlot_ = 0;
    size_t partialKvBytesPerSlot_ = 0;
    int32_t recurrentSlots_ = 0;
    int32_t partialKvSlots_ = 0;
    int32_t maxDescriptors_ = 0;
    DeviceBuffer recurrent_;
    DeviceBuffer partialKv_;
    std::vector<SpanCopy> spans_;
};

}  // namespace ctxcache::device
