// StoreObject: store keys and object headers. Full contract: include/ctxcache/tier/store_object.h.

#include "ctxcache/tier/store_object.h"

#include <cstring>

#include "ctxcache/errors.h"

namespace ctxcache::tier {

namespace {

void appendHex(std::string& out, uint64_t value, int digits) {
    static char const kDigits[] = "0123456789abcdef";
    for (int i = digits - 1; i >= 0; --i) out.push_back(kDigits[(value >> (4 * i)) & 0xF]);
}

void checkName(std::string const& value, char const* what, bool mayBeEmpty) {
    if (value.empty() && !mayBeEmpty) throw ContractError(std::string("storeKeyPrefix: the ") + what + " is empty");
    if (value.size() > 256)
        throw ContractError(std::string("storeKeyPrefix: the ") + what + " is longer than 256 bytes");
    for (char c : value)
        if (c == '@' || static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
            throw ContractError(std::string("storeKeyPrefix: the ") + what + " '" + value +
                                "' contains '@' or a control character (a key's separator)");
}

uint64_t load64(unsigned char const* p) noexcept {
    uint64_t v = 0;
    std::memcpy(&v, p, 8);
    return v;
}

constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;

uint64_t mix(uint64_t h) noexcept {
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    return h;
}

}  // namespace

std::string storeKeyPrefix(StoreLayout const& layout) {
    checkName(layout.model, "model", false);
    checkName(layout.dtype, "dtype", false);
    checkName(layout.hashAlgorithm, "hash algorithm", false);
    if (layout.pageSize <= 0 || layout.layers <= 0)
        throw ContractError("storeKeyPrefix: page size (" + std::to_string(layout.pageSize) + ") and layers (" +
                            std::to_string(layout.layers) + ") must be positive");
    if (layout.tpRank < 0 || layout.ppRank < 0) throw ContractError("storeKeyPrefix: negative parallel rank");
    std::string out = layout.model;
    out += "@tp_rank:" + std::to_string(layout.tpRank) + "@pp_rank:" + std::to_string(layout.ppRank);
    out += "@kv:" + layout.dtype + ":p" + std::to_string(layout.pageSize) + ":l" + std::to_string(layout.layers) + ":";
    appendHex(out, layout.layoutDigest, 16);
    out += "@" + layout.hashAlgorithm + (layout.keyedHash ? "-keyed@" : "@");
    return out;
}

std::string storeKey(std::string_view prefix, BlockHash const& hash) {
    std::string out;
    out.reserve(prefix.size() + 32);
    out.append(prefix);
    appendHex(out, hash.hi, 16);
    appendHex(out, hash.lo, 16);
    return out;
}

uint64_t storeChecksum(void const* data, size_t size) noexcept {
    // Four independent multiply-xor lanes over 8-byte words (the multiplies overlap), the tail byte by byte, the
    // length folded in, each lane finalized: any changed byte changes its lane's word and so the result.
    auto const* p = static_cast<unsigned char const*>(data);
    uint64_t lane[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull, 0x082EFA98EC4E6C89ull};
    size_t i = 0;
    for (; i + 32 <= size; i += 32)
        for (int k = 0; k < 4; ++k) lane[k] = (lane[k] ^ load64(p + i + 8 * k)) * kMul + static_cast<uint64_t>(k);
    for (; i + 8 <= size; i += 8) lane[0] = (lane[0] ^ load64(p + i)) * kMul;
    for (; i < size; ++i) lane[1] = (lane[1] ^ p[i]) * kMul;
    uint64_t h = static_cast<uint64_t>(size) * kMul;
    for (uint64_t v : lane) h = mix(h ^ mix(v));
    return h;
}

StoreObjectHeader encodeStoreObjectHeader(uint64_t layoutDigest, BlockHash const& hash, int64_t tokens,
                                          void const* payload, size_t payloadBytes) noexcept {
    StoreObjectHeader h;
    h.layoutDigest = layoutDigest;
    h.hashHi = hash.hi;
    h.hashLo = hash.lo;
    h.tokens = tokens;
    h.payloadBytes = payloadBytes;
    h.checksum = storeChecksum(payload, payloadBytes);
    return h;
}

char const* toString(StoreObjectVerdict verdict) noexcept {
    switch (verdict) {
        case StoreObjectVerdict::kValid: return "valid";
        case StoreObjectVerdict::kShort: return "short";
        case StoreObjectVerdict::kForeign: return "foreign";
        case StoreObjectVerdict::kOtherLayout: return "other layout";
        case StoreObjectVerdict::kOtherBlock: return "other block";
        case StoreObjectVerdict::kWrongLength: return "wrong length";
        case StoreObjectVerdict::kCorrupt: return "corrupt";
    }
    return "unknown";
}

StoreObjectVerdict checkStoreObject(void const* object, size_t size, StoreObjectExpectation const& expect) noexcept {
    if (!object || size < sizeof(StoreObjectHeader)) return StoreObjectVerdict::kShort;
    StoreObjectHeader h;
    std::memcpy(&h, object, sizeof h);
    if (h.magic != StoreObjectHeader::kMagic || h.version != StoreObjectHeader::kVersion ||
        h.headerBytes != sizeof(StoreObjectHeader))
        return StoreObjectVerdict::kForeign;
    if (h.layoutDigest != expect.layoutDigest || h.tokens != expect.tokens) return StoreObjectVerdict::kOtherLayout;
    if (h.hashHi != expect.hash.hi || h.hashLo != expect.hash.lo) return StoreObjectVerdict::kOtherBlock;
    if (h.payloadBytes != expect.payloadBytes) return StoreObjectVerdict::kWrongLength;
    if (size - sizeof h < h.payloadBytes) return StoreObjectVerdict::kShort;
    auto const* payload = static_cast<unsigned char const*>(object) + sizeof h;
    if (storeChecksum(payload, static_cast<size_t>(h.payloadBytes)) != h.checksum) return StoreObjectVerdict::kCorrupt;
    return StoreObjectVerdict::kValid;
}

}  // namespace ctxcache::tier
