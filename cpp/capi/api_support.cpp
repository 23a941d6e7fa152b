#include "capi/api_support.h"

#include <cstring>

namespace ctxcache::capi {
namespace {
thread_local std::string lastError;
}  // namespace

void setLastError(char const* function, char const* message) noexcept {
    try {
        lastError.assign(function);
        lastError.append(": ");
        lastError.append(message);
    } catch (...) {
        // Out of memory while reporting: keep whatever fits (assign of a short literal does not allocate with SSO).
        lastError.clear();
    }
}

char const* lastErrorMessage() noexcept { return lastError.c_str(); }

ResourceType resourceType(int32_t value, char const* name) {
    if (value < 0 || value >= kResourceTypeCount)
        invalidArgument(std::string(name) + " " + std::to_string(value) + " is not a CTXC_RESOURCE_* value");
    return static_cast<ResourceType>(value);
}

std::vector<BlockHash> toHashes(ctxc_hash128_t const* hashes, size_t count, char const* name) {
    requireArray(hashes, count, name);
    std::vector<BlockHash> result;
    result.reserve(count);
    for (size_t i = 0; i < count; ++i) result.push_back(toHash(hashes[i]));
    return result;
}

}  // namespace ctxcache::capi
