// KvPagePool: the paged attention KV of a model's attention layers (or of an EAGLE/MTP draft model, which gets a
// pool of its own geometry), one [2, numPages, pageSize, kvHeads, headDim] array per layer (layout.h).
//
// Invariants: every layer shares numPages, pageSize and dtype; kvHeads and headDim may differ per layer. Page ids
//             are the manager's PageIds; the V page of K page p is flat page p + numPages. Layers start at
//             256-byte aligned offsets of ONE allocation made at construction; footprintBytes() is its exact size.
//             Built over ExternalMemory (an engine's own allocation, 256-byte aligned, >= requiredBytes()), the
//             pool does not own, free, zero or write that memory at construction: its bytes are the pool's.
// Cost:       construction allocates and zeroes the pool (external: neither); writePages/readPages are one
//             transfer each.
// Threading:  single writer (the backend's contract); the pool must not outlive its backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/dtype.h"

namespace ctxcache::device {

struct KvLayerShape {
    int32_t kvHeads = 0;
    int32_t headDim = 0;
};

struct KvPoolGeometry {
    int32_t numPages = 0;  // K pages (the pool holds 2 * numPages flat pages)
    int32_t pageSize = 0;  // tokens per page
    DType dtype = DType::kFp16;
    std::vector<KvLayerShape> layers;
};

class KvPagePool {
public:
    // ContractError on a non-positive page count, page size, layer count, head count or head dim, an unknown
    // dtype, or a layer too large for int64 element indexing; ExternalMemoryError on external memory that cannot
    // hold the pool (nothing is allocated then).
    KvPagePool(DeviceBackend& backend, KvPoolGeometry geometry, ExternalMemory external = {});

    // The footprint of a pool of this geometry (what external memory must hold); ContractError as the constructor.
    static size_t requiredBytes(KvPoolGeometry const& geometry);

    DeviceBackend& backend() const noexcept { return *backend_; }
    KvPoolGeometry const& geometry() const noexcept { return geometry_; }
    int32_t numLayers() const noexcept { return static_cast<int32_t>(geometry_.layers.size()); }
    int32_t numPages() const noexcept { return geometry_.numPages; }
    int32_t pageSize() const noexcept { return geometry_.pageSize; }
    DType dtype() const noexcept { return geometry_.dtype; }

    size_t tokenBytes(int32_t layer) const;  // kvHeads * headDim * sizeof(dtype)
    size_t pageBytes(int32_t layer) const;   // one K (or V) page
    size_t layerBytes(int32_t layer) const;  // 2 * numPages * pageBytes
    size_t footprintBytes() const noexcept { return storage_.size(); }
    // The whole pool (layer l at layerData(l)); footprintBytes() long.
    void* data() const noexcept { return storage_.data(); }
    bool external() const noexcept { return !storage_.owning(); }

    void* layerData(int32_t layer) const;
    // Flat page f in [0, 2 * numPages): K pages, then V pages.
    void* pageData(int32_t layer, int32_t flatPage) const;

    // Host <-> `count` consecutive flat pages starting at firstFlatPage; `bytes` must be count * pageBytes(layer).
    void writePages(int32_t layer, int32_t firstFlatPage, int32_t count, void const* host, size_t bytes);
    void readPages(int32_t layer, int32_t firstFlatPage, int32_t count, void* host, size_t bytes) const;

private:
    void checkLayer(char const* op, int32_t layer) const;
    void checkPages(char const* op, int32_t layer, int32_t first, int32_t count, size_t bytes) const;

    DeviceBackend* backend_;
    KvPoolGeometry geometry_;
    std::vector<size_t> layerOffsets_;
    DeviceBuffer storage_;
};

}  // namespace ctxcache::device
