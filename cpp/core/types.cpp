// Core vocabulary (include/ctxcache/types.h): the display names of the resource types. No state.

#include "ctxcache/types.h"

namespace ctxcache {

char const* toString(ResourceType type) noexcept {
    switch (type) {
        case ResourceType::kBaseKvPage: return "base KV page";
        case ResourceType::kDraftKvPage: return "draft KV page";
        case ResourceType::kRecurrentSnapshot: return "recurrent snapshot slot";
        case ResourceType::kPartialKvSnapshot: return "partial-KV snapshot slot";
    }
    return "unknown resource type";
}

}  // namespace ctxcache
