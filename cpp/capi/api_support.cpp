// The C ABI's thread-local last-error message and the resource-type argument check. The firewall (guard) and
// the other checks are inline in api_support.h, which states the contract.

#include "capi/api_support.h"

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
        // Out of memory while reporting: an empty message rather than an exception across the C ABI.
        lastError.clear();
    }
}

char const* lastErrorMessage() noexcept { return lastError.c_str(); }

ResourceType resourceType(int32_t value, char const* name) {
    if (value < 0 || value >= kResourceTypeCount)
        invalidArgument(std::string(name) + " " + std::to_string(value) + " is not a CTXC_RESOURCE_* value");
    return static_cast<ResourceType>(value);
}

}  // namespace ctxcache::capi
