// Conversions the runtime's C ABI and the reference engine's share: the metrics structs (the coordinator's, and
// the retention outcomes of its manager), and a sequence's media items (validated the same way wherever a caller
// passes them).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ctxcache.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/runtime/context_cache_metrics.h"
#include "ctxcache/runtime/runtime_types.h"

namespace ctxcache::capi {

// Every field of `m` into `out` (whose struct_size the caller has checked).
void fillMetrics(runtime::ContextCacheMetrics const& m, ctxc_context_cache_metrics_t& out);

// `count` C media items as the runtime's; `where` names the owner in messages (CTXC_E_INVALID_ARGUMENT on a NULL
// array, NULL bytes, a negative span or an unknown modality).
std::vector<runtime::MediaItem> mediaItemsOf(ctxc_media_item_t const* items, size_t count, std::string const& where);

}  // namespace ctxcache::capi
