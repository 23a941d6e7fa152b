// KvPagePool: geometry validation, per-layer offsets in one allocation, host <-> page transfers.
#include "ctxcache/device/kv_page_pool.h"

#include <limits>
#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {

constexpr size_t kLayerAlignment = 256;

size_t alignUp(size_t value) { return (value + kLayerAlignment - 1) / kLayerAlignment * kLayerAlignment; }

[[noreturn]] void fail(char const* op, std::string const& why) {
    throw ContractError(std::string("KvPagePool::") + op + ": " + why);
}

KvPoolGeometry validated(KvPoolGeometry geometry) {
    if (geometry.numPages <= 0)
        fail("KvPagePool", "numPages must be positive (got " + std::to_string(geometry.numPages) + ")");
    if (geometry.pageSize <= 0)
        fail("KvPagePool", "pageSize must be positive (got " + std::to_string(geometry.pageSize) + ")");
    if (!isValidDType(static_cast<int32_t>(geometry.dtype)))
        fail("KvPagePool", "unknown dtype " + std::to_string(static_cast<int32_t>(geometry.dtype)));
    if (geometry.layers.empty()) fail("KvPagePool", "a pool needs at least one layer");
    if (geometry.numPages > std::numeric_limits<int32_t>::max() / 2)
        fail("KvPagePool", "numPages too large: V page ids (K + numPages) must fit int32");
    for (size_t i = 0; i < geometry.layers.size(); ++i) {
        KvLayerShape const& l = geometry.layers[i];
        if (l.kvHeads <= 0 || l.headDim <= 0)
            fail("KvPagePool", "layer " + std::to_string(i) + " needs positive kvHeads and headDim (got " +
                                   std::to_string(l.kvHeads) + ", " + std::to_string(l.headDim) + ")");
        // 2 * numPages * pageSize * kvHeads * headDim * 4 bytes must fit comfortably in int64 (and size_t).
        long double const bytes = 2.0L * geometry.numPages * geometry.pageSize * l.kvHeads * l.headDim * 4;
        if (bytes > static_cast<long double>(std::numeric_limits<int64_t>::max() / 4))
            fail("KvPagePool", "layer " + std::to_string(i) + " is too large");
    }
    return geometry;
}

// Layer l starts at offsets[l]; returns the footprint.
size_t layerOffsets(KvPoolGeometry const& g, std::vector<size_t>* offsets) {
    size_t offset = 0;
    for (KvLayerShape const& l : g.layers) {
        if (offsets) offsets->push_back(offset);
        offset =
            alignUp(offset + 2 * static_cast<size_t>(g.numPages) * static_cast<size_t>(g.pageSize) *
                                 static_cast<size_t>(l.kvHeads) * static_cast<size_t>(l.headDim) * dtypeSize(g.dtype));
    }
    return offset;
}

}  // namespace

KvPagePool::KvPagePool(DeviceBackend& backend, KvPoolGeometry geometry, ExternalMemory external)
    : backend_(&backend), geometry_(validated(std::move(geometry))) {
    size_t const footprint = layerOffsets(geometry_, &layerOffsets_);
    storage_ = DeviceBuffer::make(backend, external, footprint, kExternalAlignment, "KvPagePool");
}

size_t KvPagePool::requiredBytes(KvPoolGeometry const& geometry) { return layerOffsets(validated(geometry), nullptr); }

void KvPagePool::checkLayer(char const* op, int32_t layer) const {
    if (layer < 0 || layer >= numLayers())
        fail(op, "layer " + std::to_string(layer) + " is outside [0, " + std::to_string(numLayers()) + ")");
}

size_t KvPagePool::tokenBytes(int32_t layer) const {
    checkLayer("tokenBytes", layer);
    KvLayerShape const& l = geometry_.layers[static_cast<size_t>(layer)];
    return static_cast<size_t>(l.kvHeads) * static_cast<size_t>(l.headDim) * dtypeSize(geometry_.dtype);
}

size_t KvPagePool::pageBytes(int32_t layer) const {
    return static_cast<size_t>(geometry_.pageSize) * tokenBytes(layer);
}

size_t KvPagePool::layerBytes(int32_t layer) const {
    return 2 * static_cast<size_t>(geometry_.numPages) * pageBytes(layer);
}

void* KvPagePool::layerData(int32_t layer) const {
    checkLayer("layerData", layer);
    return storage_.bytes() + layerOffsets_[static_cast<size_t>(layer)];
}

void* KvPagePool::pageData(int32_t layer, int32_t flatPage) const {
    checkLayer("pageData", layer);
    if (flatPage < 0 || flatPage >= 2 * geometry_.numPages)
        fail("pageData", "flat page " + std::to_string(flatPage) + " is outside [0, " +
                             std::to_string(2 * geometry_.numPages) + ")");
    return static_cast<unsigned char*>(layerData(layer)) + static_cast<size_t>(flatPage) * pageBytes(layer);
}

void KvPagePool::checkPages(char const* op, int32_t layer, int32_t first, int32_t count, size_t bytes) const {
    checkLayer(op, layer);
    if (first < 0 || count < 0 || static_cast<int64_t>(first) + count > 2 * static_cast<int64_t>(geometry_.numPages))
        fail(op, "pages [" + std::to_string(first) + ", +" + std::to_string(count) + ") are outside [0, " +
                     std::to_string(2 * geometry_.numPages) + ")");
    if (bytes != static_cast<size_t>(count) * pageBytes(layer))
        fail(op, std::to_string(bytes) + " bytes given for " + std::to_string(count) + " pages of " +
                     std::to_string(pageBytes(layer)) + " bytes");
}

void KvPagePool::writePages(int32_t layer, int32_t firstFlatPage, int32_t count, void const* host, size_t bytes) {
    checkPages("writePages", layer, firstFlatPage, count, bytes);
    if (bytes > 0) backend_->upload(pageData(layer, firstFlatPage), host, bytes);
}

void KvPagePool::readPages(int32_t layer, int32_t firstFlatPage, int32_t count, void* host, size_t bytes) const {
    checkPages("readPages", layer, firstFlatPage, count, bytes);
    if (bytes > 0) backend_->download(host, pageData(layer, firstFlatPage), bytes);
}

}  // namespace ctxcache::device
