// The runtime's metrics at the C ABI: one conversion shared by the coordinator's and the reference engine's getters.
#pragma once

#include "ctxcache.h"
#include "ctxcache/runtime/context_cache_metrics.h"

namespace ctxcache::capi {

// Every field of `m` into `out` (whose struct_size the caller has checked).
void fillMetrics(runtime::ContextCacheMetrics const& m, ctxc_context_cache_metrics_t& out);

}  // namespace ctxcache::capi
