// KvPageTable: which physical KV pages each resident slot reads, as the attention kernels want it (reference
// c.9). The host table is the truth; the device copy is refreshed by upload(), which copies only the row ranges
// changed since the last upload.
//
// Layout:     int32 [maxBatch, 2, maxPagesPerSeq] (layout.h): row 0 K page ids, row 1 V ids = K + numPages;
//             -1 = unused, in both rows.
// Invariants: every entry is -1 or a valid id, and V == K + numPages entry by entry. Dense mode: within a slot no
//             live entry follows a -1 (a sequence's pages are a prefix). Sparse-window mode: holes are allowed
//             (a sliding window drops its oldest pages). checkInvariants() verifies all of it.
// External:   the device view may be an engine's own int32 array (ExternalMemory: 4-byte aligned, at least
//             requiredBytes()): construction then writes nothing there and marks every row dirty, so the first
//             upload() writes the whole table (-1 everywhere unless set before).
// Cost:       setRow O(maxPagesPerSeq); compactRows O(maxBatch * maxPagesPerSeq) on the host; upload one transfer
//             per coalesced dirty row range.
// Threading:  single writer; must not outlive its backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ctxcache/device/device_backend.h"

namespace ctxcache::device {

class KvPageTable {
public:
    enum class Mode : int32_t { kDense = 0, kSparseWindow = 1 };  // values are CTXC_PAGE_TABLE_*

    struct RowUpdate {
        int32_t slot = 0;
        std::vector<int32_t> kPages;  // may hold -1 (a hole) only in sparse-window mode
    };

    // Every entry starts at -1, uploaded (external device view: dirty, see above). ContractError on a
    // non-positive size or more than INT32_MAX entries; ExternalMemoryError on external memory that cannot hold
    // the device view.
    KvPageTable(DeviceBackend& backend, int32_t maxBatch, int32_t maxPagesPerSeq, int32_t numPages,
                Mode mode = Mode::kDense, ExternalMemory external = {});
    // Bytes of the device view: maxBatch * 2 * maxPagesPerSeq * 4 (ContractError as the constructor).
    static size_t requiredBytes(int32_t maxBatch, int32_t maxPagesPerSeq, int32_t numPages);

    DeviceBackend& backend() const noexcept { return *backend_; }
    int32_t maxBatch() const noexcept { return maxBatch_; }
    int32_t maxPagesPerSeq() const noexcept { return maxPagesPerSeq_; }
    int32_t numPages() const noexcept { return numPages_; }
    Mode mode() const noexcept { return mode_; }

    // Slot `slot` reads K pages kPages[0..count) (then -1). count <= maxPagesPerSeq; ids in [0, numPages).
    void setRow(int32_t slot, int32_t const* kPages, int32_t count);
    // Several rows at once: all validated (each slot at most once) before any changes.
    void setRows(std::vector<RowUpdate> const& updates);
    void clearRow(int32_t slot);
    // Slot b reads pages [b * maxPagesPerSeq, (b + 1) * maxPagesPerSeq) (needs maxBatch * maxPagesPerSeq <=
    // numPages): the layout of a cache without reuse.
    void setIdentity();
    // One entry. Dense mode: only appending right after the live prefix or replacing a live entry (setEntry) and
    // dropping the last live entry (clearEntry) keep the prefix shape; anything else is a ContractError.
    void setEntry(int32_t slot, int32_t logicalPage, int32_t kPage);
    void clearEntry(int32_t slot, int32_t logicalPage);
    // Row b moves to oldToNew[b] (-1 retires it); every destination < newBatch exactly once (any order: rows move
    // on the host, no KV data moves). Rows [newBatch, maxBatch) end up cleared.
    void compactRows(int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch);

    // True when consistent; otherwise *why (optional) names the first violation.
    bool checkInvariants(std::string* why = nullptr) const;

    // Copies the dirty row ranges to the device; returns the number of copies (0 when nothing changed).
    int32_t upload();
    bool dirty() const noexcept { return dirtyCount_ > 0; }

    int32_t const* hostData() const noexcept { return host_.data(); }
    // The 2 * maxPagesPerSeq entries of a slot (K row then V row).
    int32_t const* hostRow(int32_t slot) const;
    // The kernel view (device memory), [maxBatch, 2, maxPagesPerSeq] int32; current only when !dirty() (after
    // upload()). Whoever writes it directly (an engine through this pointer) bypasses the host table, which
    // stays the truth: the next upload of a row overwrites it.
    int32_t const* deviceView() const noexcept { return static_cast<int32_t const*>(device_.data()); }
    bool external() const noexcept { return !device_.owning(); }
    size_t entryCount() const noexcept { return host_.size(); }

private:
    void checkSlot(char const* op, int32_t slot) const;
    void checkPageId(char const* op, int32_t kPage, bool allowHole) const;
    void writeRow(int32_t slot, int32_t const* kPages, int32_t count);
    void markDirty(int32_t slot);
    int32_t liveCount(int32_t slot) const;  // dense mode: length of the live prefix

    DeviceBackend* backend_;
    int32_t maxBatch_;
    int32_t maxPagesPerSeq_;
    int32_t numPages_;
    Mode mode_;
    std::vector<int32_t> host_;
    std::vector<uint8_t> dirtyRows_;
    int32_t dirtyCount_ = 0;
    std::vector<int32_t> scratch_;  // compactRows' copy of the old table
    DeviceBuffer device_;
};

}  // namespace ctxcache::device
