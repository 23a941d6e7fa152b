// The C retention spec (include/ctxcache/c/retention.h) as the core's RetentionSpec, for every C call that takes
// one (a lease's, a runtime sequence's). Throws the C ABI's invalid-argument error for a bad struct (size, NULL
// ranges) and ContractError for a bad spec (validateRetentionSpec), so the call changes nothing.
#pragma once

#include "api_support.h"
#include "ctxcache.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/retention.h"

namespace ctxcache::capi {

RetentionSpec toRetentionSpec(ctxc_retention_spec_t const& spec, char const* name);
// A cache's retention metrics as the C struct (a manager's, or the one inside a coordinator or sim engine).
void fillRetentionMetrics(RetentionMetrics const& m, ctxc_retention_metrics_t& out);

}  // namespace ctxcache::capi
