// RequestState: the coordinator's private bookkeeping of one live request and its sequences. Internal to
// cpp/runtime; the layout is not part of any API.
//
// Invariants: sequences are in batch-row order; every sequence holds a valid lease (bound to the coordinator's
//             manager) and a claimed resident slot; committed <= tokens.size(); published * pageSize <= the
//             boundary it was published at. A quarantined request holds nothing (its sequences moved to the
//             coordinator's quarantine list).
// Threading:  the coordinator's single-writer contract.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ctxcache/runtime/context_cache_coordinator.h"

namespace ctxcache::runtime {

struct StagedCheckpoint {
    HybridSnapshotReservation reservation;
    int32_t length = 0;
    BlockHash digest;
};

struct SequenceState {
    ResidentRef resident;
    std::vector<int32_t> tokens;       // history: prompt + accepted tokens
    std::vector<Hash128> media;        // per position (empty when the prompt has no media)
    BlockKeyExtras extras;
    std::shared_ptr<KvEventIdentity const> eventIdentity;  // LoRA name and media items for BlockStored, or null
    std::vector<BlockHash> hashes;     // full-block chain over tokens, extended lazily
    // The admission's retention with promptTokenCount = inputLength, copied once at admission; null for the
    // default (every publication then passes null: plain LRU, today's path).
    std::optional<RetentionSpec> retention;
    int32_t inputLength = 0;
    int32_t committed = 0;
    int32_t common = 0;
    int32_t matched = 0;
    int32_t reuse = 0;
    ReusePlanKind kind = ReusePlanKind::kNoReusablePrefix;
    bool bypass = false;
    bool forcedCold = false;
    bool hadReplay = false;            // the plan replays the EAGLE boundary page
    bool mediaAware = false;
    bool completed = false;            // decode-end publication done (or the row finished): no more advances
    int32_t published = 0;             // full blocks published so far (monotonic)
    CacheRequestLease lease;
    std::optional<StagedCheckpoint> staged;  // hybrid capture enqueued, publication pending
    std::optional<int32_t> frozenEndpoint;   // EAGLE prefill endpoint awaiting its first completed round

    KvEventKeys eventKeys() const noexcept { return eventIdentity ? eventIdentity->keys() : KvEventKeys{}; }
    RetentionSpec const* retentionSpec() const noexcept { return retention ? &*retention : nullptr; }
};

struct ContextCacheCoordinator::RequestState {
    enum class Phase : uint8_t {
        kAdmitted,
        kPrefillPrepared,
        kPrefillCaptured,
        kExecuting,
        kCompactionPending,
        kFinishing,  // failed or emptied: only finish() (and abandonment) remain
        kQuarantined,
        kFinished,
    };

    ContextCacheCoordinator* owner = nullptr;  // null once detached (coordinator destroyed) or finished
    RequestState* prev = nullptr;
    RequestState* next = nullptr;
    Phase phase = Phase::kAdmitted;
    std::vector<SequenceState> sequences;
    std::vector<int32_t> prefillStarts;
    std::optional<SequenceState> joiner;
    std::vector<int32_t> pendingMap;
    int32_t pendingNewBatch = 0;
    bool speculative = false;
    bool pagedSpec = false;  // speculative with a draft pool: spec leases
    DecodingTokenStateContract contract = DecodingTokenStateContract::kCommittedPlusLookahead;
    ContextCacheCommitPolicy commit = ContextCacheCommitPolicy::kIncludingGeneratedTokens;
    StreamHandle stream = nullptr;
    bool devicePending = false;
};

}  // namespace ctxcache::runtime
