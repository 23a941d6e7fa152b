// The C ABI's ctxc_store_link_options_t (c/store.h) as the tier's StoreLinkOptions, for the objects whose options
// take one (a coordinator, a reference engine). Defined in store_api.cpp.
#pragma once

#include <string>

#include "ctxcache/c/store.h"
#include "ctxcache/tier/store_link.h"

namespace ctxcache::capi {

// Checks the options (CTXC_E_INVALID_ARGUMENT naming `name`'s fields; a store that is not a live handle:
// CTXC_E_INVALID_HANDLE) and converts them; *model receives the key's model identity. The key prefix is left
// empty: the coordinator computes it from the model, the pool's layout and the hash.
tier::StoreLinkOptions storeLinkOptionsOf(ctxc_store_link_options_t const* options, char const* name,
                                          std::string* model);

}  // namespace ctxcache::capi
