// Chunked FNV-1a: the host computation, the reduction, and the device path.
#include "ctxcache/device/chunked_hash.h"

#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {

Hash128 const kBasis{kFnvOffsetHi, kFnvOffsetLo};

void putU64(unsigned char* out, uint64_t value) {
    for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

void requireChunks(uint32_t numChunks) {
    if (numChunks == 0) throw ContractError("chunkedFnv1a128: numChunks must be positive");
}

}  // namespace

Hash128 combineChunkPartials(Hash128 const* partials, uint32_t numChunks, uint64_t totalSize) {
    requireChunks(numChunks);
    unsigned char header[9];
    header[0] = kTagOpaqueIdentity;
    putU64(header + 1, totalSize);
    Hash128 state = fnv1a128(header, sizeof header, kBasis);
    for (uint32_t i = 0; i < numChunks; ++i) {
        unsigned char bytes[16];
        putU64(bytes, partials[i].hi);
        putU64(bytes + 8, partials[i].lo);
        state = fnv1a128(bytes, sizeof bytes, state);
    }
    return state;
}

Hash128 chunkedFnv1a128Host(void const* bytes, uint64_t size, uint32_t numChunks) {
    requireChunks(numChunks);
    if (size > 0 && !bytes) throw ContractError("chunkedFnv1a128Host: bytes is null");
    auto const data = static_cast<unsigned char const*>(bytes);
    uint64_t const chunk = hashChunkBytes(size, numChunks);
    std::vector<Hash128> partials(numChunks);
    for (uint32_t i = 0; i < numChunks; ++i) {
        uint64_t const begin = hashChunkBegin(size, numChunks, i);
        uint64_t const end = begin + chunk < size ? begin + chunk : size;
        partials[i] = fnv1a128(data + begin, static_cast<size_t>(end - begin), kBasis);
    }
    return combineChunkPartials(partials.data(), numChunks, size);
}

Hash128 chunkedFnv1a128(DeviceBackend& backend, void const* deviceData, uint64_t size, uint32_t numChunks,
                        std::vector<Hash128>* partials) {
    requireChunks(numChunks);
    std::vector<Hash128> local;
    std::vector<Hash128>& out = partials ? *partials : local;
    out.resize(numChunks);
    backend.hashChunks(deviceData, size, numChunks, out.data());
    return combineChunkPartials(out.data(), numChunks, size);
}

}  // namespace ctxcache::device
