// Pool <-> host slot copies: the slot layout checked against the pool and the host buffer, then the backend's
// single launch (its front checks the pages, slots and duplicates).
#include "ctxcache/device/kv_host_copy.h"

#include <limits>
#include <string>
#include <vector>

#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {

void copy(KvPagePool const& pool, int32_t const* pages, int32_t const* hostSlots, HostSlotLayout const& layout,
          int32_t count, HostCopyDirection direction) {
    char const* op = direction == HostCopyDirection::kToHost ? "copyPagesToHost" : "copyPagesFromHost";
    auto fail = [&](std::string const& why) { throw ContractError(std::string(op) + ": " + why); };
    DeviceBackend& backend = pool.backend();
    HostBuffer const* host = layout.host;
    if (!host) fail("layout.host is null");
    if (host->backend() != &backend) fail("layout.host belongs to another backend than the pool");
    if (!host->data() || !host->deviceData()) fail("the host base is null (an empty host buffer)");
    size_t const payload = hostSlotPayloadBytes(pool);
    if (layout.payloadOffset > std::numeric_limits<size_t>::max() - payload ||
        layout.slotBytes < layout.payloadOffset + payload)
        fail("layout.slotBytes " + std::to_string(layout.slotBytes) + " is less than payloadOffset " +
             std::to_string(layout.payloadOffset) + " + the pool's payload of " + std::to_string(payload) + " bytes");
    if (layout.slotCount < 0) fail("layout.slotCount is negative (" + std::to_string(layout.slotCount) + ")");
    size_t const slotCount = static_cast<size_t>(layout.slotCount);
    if (slotCount > 0 && layout.slotBytes > host->size() / slotCount)
        fail("layout: " + std::to_string(slotCount) + " slots of " + std::to_string(layout.slotBytes) +
             " bytes do not fit the host buffer's " + std::to_string(host->size()) + " bytes");
    auto const hostBegin = reinterpret_cast<uintptr_t>(host->data());
    auto const poolBegin = reinterpret_cast<uintptr_t>(pool.data());
    size_t const slotsBytes = slotCount * layout.slotBytes;
    if (slotsBytes > 0 && hostBegin < poolBegin + pool.footprintBytes() && poolBegin < hostBegin + slotsBytes)
        fail("the host slots overlap the pool's memory");

    std::vector<HostPageLayer> layers(static_cast<size_t>(pool.numLayers()));
    uint64_t offset = layout.payloadOffset;
    for (int32_t l = 0; l < pool.numLayers(); ++l) {
        HostPageLayer& layer = layers[static_cast<size_t>(l)];
        layer.pool = pool.layerData(l);
        layer.pageBytes = pool.pageBytes(l);
        layer.slotOffset = offset;
        offset += 2 * layer.pageBytes;
    }
    HostPageCopyRequest r;
    r.direction = direction;
    r.layers = layers.data();
    r.numLayers = pool.numLayers();
    r.numPages = pool.numPages();
    r.pages = pages;
    r.slots = hostSlots;
    r.count = count;
    r.host = host->deviceData();
    r.slotBytes = layout.slotBytes;
    r.slotCount = layout.slotCount;
    backend.copyHostPages(r);
}

}  // namespace

size_t hostSlotPayloadBytes(KvPagePool const& pool) {
    size_t bytes = 0;
    for (int32_t l = 0; l < pool.numLayers(); ++l) bytes += 2 * pool.pageBytes(l);
    return bytes;
}

void copyPagesToHost(KvPagePool const& pool, int32_t const* pages, int32_t const* hostSlots,
                     HostSlotLayout const& layout, int32_t count) {
    copy(pool, pages, hostSlots, layout, count, HostCopyDirection::kToHost);
}

void copyPagesFromHost(KvPagePool& pool, int32_t const* pages, int32_t const* hostSlots, HostSlotLayout const& layout,
                       int32_t count) {
    copy(pool, pages, hostSlots, layout, count, HostCopyDirection::kFromHost);
}

}  // namespace ctxcache::device
