// KvStore's shared vocabulary: the names of its per-key results. Contract: include/ctxcache/tier/kv_store.h.

#include "ctxcache/tier/kv_store.h"

namespace ctxcache::tier {

char const* storeResultName(int64_t result) noexcept {
    if (result >= 0) return "ok";
    switch (result) {
        case kStoreFull: return "full";
        case kStoreTooSmall: return "destination too small";
        case kStoreNotFound: return "not found";
        case kStoreUnavailable: return "unavailable";
        case kStoreFailed: return "failed";
        case kStoreTimedOut: return "timed out";
        default: return "error";
    }
}

}  // namespace ctxcache::tier
