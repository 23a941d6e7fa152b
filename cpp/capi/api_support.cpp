// The C ABI's thread-local last-error message, the resource-type argument check and the refusal of an overlapping
// call (CallScope, capi/call_family.h). The firewall (guard) and the other checks are inline in api_support.h,
// which states the contract.

#include "api_support.h"

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

void CallScope::refuse(CallFamily const& family, char const* holder) const {
    bool reentered = false;  // an enclosing call of this very thread holds it: a callback called back in
    for (CallScope const* s = parent_; s && !reentered; s = s->parent_)
        for (int i = 0; i < s->count_; ++i)
            if (s->held_[i] == &family) reentered = true;
    std::string message = std::string(holder) + " is in progress on the same " + family.members();
    message += reentered ? " on this thread (a callback it called is calling back into it)" : " on another thread";
    message += "; one family takes one call at a time (the single-writer contract): serialize these calls";
    throw ApiError(CTXC_E_CONCURRENT_USE, message);
}

void CallScope::tooManyFamilies() {
    throw ApiError(CTXC_E_INTERNAL, "one call entered more handle families than a call scope holds");
}

}  // namespace ctxcache::capi
