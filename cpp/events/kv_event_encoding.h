// The publisher's encoder entry point: encodeKvEventBatch into a caller's string, reused from batch to batch so
// that the sender thread allocates nothing in steady state. Built only with msgpack-cxx
// (CTXCACHE_WITH_KV_EVENT_PUBLISHER). Threading: pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ctxcache/kv_events.h"

namespace ctxcache {

// `out` is cleared first; on return it holds exactly the payload encodeKvEventBatch returns.
void encodeKvEventBatchInto(KvEventLog const& events, double timestamp, std::optional<int32_t> dataParallelRank,
                            std::string const& medium, bool arrayEncoding, std::string& out);

}  // namespace ctxcache
