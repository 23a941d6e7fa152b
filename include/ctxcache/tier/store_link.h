// StoreLink: how a host tier that holds bytes uses a byte store shared with other replicas (issue 27): the options
// (which store, the keys' layout, the load policy and its deadline, the ask rule) and the counters. The traffic
// itself is the tier's (host_tier.h, cpp/tier/host_tier_store.cpp); every call runs on a StoreWorker's thread
// (store_worker.h), never on the manager's.
//
// What goes to the store: every block written to the host tier that the store is not known to hold, in one put
// batch per write, from its host slot (the slot stays pinned until the put completes). What comes back: when an
// extension's host run ends before the prompt's room, the next blocks are asked of the store (one existence batch,
// then one get batch of the leading run the store holds, into freshly reserved host slots); each object's header
// and checksum are checked (store_object.h) before the block becomes a host block; the extension then goes on
// through the new host blocks. The ask rule: only when at least `minAskBlocks` blocks are left to ask (an
// existence round trip costs about as much as loading a few blocks; SGLang's HiCache asks from 256 tokens on), and
// never for a key the negative cache holds (a key whose get failed or whose object was rejected: not asked again
// for `negativeTtl`, longer than Mooncake's 11 s client TTL of a dead holder's objects).
// Policies: kWait waits for the store's answers until `loadDeadline` after the extension began, then serves what
// arrived (a batch that finishes later still fills the host tier for the next request); kBestEffort never waits:
// the extension serves the host's run, and the store's answers fill the host tier at the tier's next calls (a
// prefetch).
// Threading: the tier's (single writer); the worker's thread calls the store only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ctxcache/tier/kv_store.h"
#include "ctxcache/tier/store_worker.h"

namespace ctxcache::tier {

// Values are part of the C ABI (CTXC_STORE_LOAD_*).
enum class StoreLoadPolicy : uint8_t {
    kWait = 0,        // wait for the store's answers until the deadline
    kBestEffort = 1,  // never wait: what arrives fills the host tier for later requests
};

struct StoreLinkOptions {
    std::shared_ptr<KvStore> store;  // null: no store
    // The keys' layout part (storeKeyPrefix), naming the model, ranks, dtype, page, layers, digest and hash.
    std::string keyPrefix;
    StoreLoadPolicy policy = StoreLoadPolicy::kWait;
    std::chrono::microseconds loadDeadline{50'000};   // kWait: the longest an extension waits for the store
    std::chrono::microseconds putDeadline{2'000'000};  // a put batch's deadline on the worker
    int32_t minAskBlocks = 4;
    std::chrono::milliseconds negativeTtl{15'000};
    size_t knownKeysLimit = 1u << 20;  // keys remembered as held by the store (not put again); then forgotten
    StoreWorkerOptions worker;
};

struct StoreLinkMetrics {
    uint64_t putBlocks = 0;         // blocks the store accepted (or already held)
    uint64_t skippedPuts = 0;       // blocks not put: the store is known to hold them
    uint64_t droppedPuts = 0;       // puts the store refused as full, or not sent (breaker open)
    uint64_t failedPuts = 0;        // puts that failed or timed out
    uint64_t askedBlocks = 0;       // blocks whose existence was asked
    uint64_t heldBlocks = 0;        // of them, the leading run the store said it held (then got)
    uint64_t loadedBlocks = 0;      // objects got and validated: now host blocks
    uint64_t failedLoads = 0;       // gets that failed or timed out (unavailable, failed, not found, too small)
    uint64_t rejectedLoads = 0;     // objects got whose header or checksum did not match (a miss)
    uint64_t rejectedShort = 0, rejectedForeign = 0, rejectedOtherLayout = 0, rejectedOtherBlock = 0,
             rejectedWrongLength = 0, rejectedCorrupt = 0;  // rejectedLoads by verdict
    uint64_t lateBatches = 0;       // batches an extension stopped waiting for (applied later)
    uint64_t negativeSkips = 0;     // asks cut short by the negative cache
    uint64_t breakerRefusals = 0;   // batches not sent because the breaker was open
    uint64_t waitMicros = 0;        // time extensions spent waiting for the store
};

}  // namespace ctxcache::tier
