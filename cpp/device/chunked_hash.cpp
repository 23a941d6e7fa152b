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

// The reduction's state before the first partial, and one partial folded in.
Hash128 reductionStart(uint64_t totalSize) {
    unsigned char header[9];
    header[0] = kTagOpaqueIdentity;
    putU64(header + 1, totalSize);
    return fnv1a128(header, sizeof header, kBasis);
}

Hash128 foldPartial(Hash128 state, Hash128 const& partial) {
    unsigned char bytes[16];
    putU64(bytes, partial.hi);
    putU64(bytes + 8, partial.lo);
    return fnv1a128(bytes, sizeof bytes, state);
}

}  // namespace

Hash128 combineChunkPartials(Hash128 const* partials, uint32_t numChunks, uint64_t totalSize) {
    requireChunks(numChunks);
    Hash128 state = reductionStart(totalSize);
    for (uint32_t i = 0; i < numChunks; ++i) state = foldPartial(state, partials[i]);
    return state;
}

Hash128 chunkedFnv1a128Host(void const* bytes, uint64_t size, uint32_t numChunks) {
    requireChunks(numChunks);
    if (size > 0 && !bytes) throw ContractError("chunkedFnv1a128Host: bytes is null");
    auto const data = static_cast<unsigned char const*>(bytes);
    uint64_t const chunk = hashChunkBytes(size, numChunks);
    // Each partial is folded in as soon as it is known: O(1) memory whatever numChunks is.
    Hash128 state = reductionStart(size);
    for (uint32_t i = 0; i < numChunks; ++i) {
        uint64_t const begin = hashChunkBegin(size, numChunks, i);
        uint64_t const end = begin + chunk < size ? begin + chunk : size;
        state = foldPartial(state, fnv1a128(data + begin, static_cast<size_t>(end - begin), kBasis));
    }
    return state;
}

Hash128 chunkedFnv1a128(DeviceBackend& backend, void const* deviceData, uint64_t size, uint32_t numChunks,
                        std::vector<Hash128>* partials) {
    requireChunks(numChunks);
    // The backend refuses more chunks than its partials buffer holds; refuse before sizing the host copy.
    if (numChunks > backend.options().maxHashChunks)
        throw ContractError("hashChunks: numChunks must be in [1, " + std::to_string(backend.options().maxHashChunks) +
                            "] (got " + std::to_string(numChunks) + ")");
    std::vector<Hash128> local;
    std::vector<Hash128>& out = partials ? *partials : local;
    out.resize(numChunks);
    backend.hashChunks(deviceData, size, numChunks, out.data());
    return combineChunkPartials(out.data(), numChunks, size);
}

}  // namespace ctxcache::device
