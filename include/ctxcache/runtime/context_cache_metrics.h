// ContextCacheMetrics: what the coordinator did, cumulative since construction, plus a snapshot of current
// occupancy (reference (b) "Metrics"). Read with ContextCacheCoordinator::metrics(); plain values.
#pragma once

#include <cstdint>

namespace ctxcache::runtime {

struct ContextCachePoolMetrics {
    int32_t free = 0;
    int32_t capacity = 0;
};

struct ContextCacheMetrics {
    // Admission.
    uint64_t admittedSequences = 0;
    uint64_t hitSequences = 0;            // matchedTokenLength > 0
    uint64_t mediaAwareSequences = 0;     // prompts with media items
    uint64_t lookupBypassSequences = 0;   // bypass asked for, or forced cold
    uint64_t forcedColdSequences = 0;     // a cache-derived plan did not fit and was retried cold
    uint64_t standardPlans = 0;
    uint64_t noReusablePrefixPlans = 0;
    uint64_t fullInputRewindPlans = 0;
    uint64_t matchedTokens = 0;
    uint64_t reusedTokens = 0;
    // Publication.
    uint64_t publicationAttempts = 0;
    uint64_t committedPublications = 0;   // kPublished
    uint64_t existingPublications = 0;    // kExistingRecord
    uint64_t publishedEndpoints = 0;      // both
    // Hybrid and speculative.
    uint64_t hybridRestores = 0;
    uint64_t hybridSnapshotPressureSkips = 0;
    uint64_t hybridCaptureSynchronizations = 0;
    uint64_t specFullPageReplays = 0;
    uint64_t specPairPublications = 0;
    uint64_t planningNanoseconds = 0;
    uint64_t mediaBoundaryTrims = 0;      // ours: re-plans that moved a reuse boundary out of a media run
    // Occupancy now.
    uint64_t currentRecords = 0;
    ContextCachePoolMetrics baseKvPages;
    ContextCachePoolMetrics draftKvPages;
    ContextCachePoolMetrics recurrentSnapshots;
    ContextCachePoolMetrics partialKvSnapshots;
    // The manager's eviction counters.
    uint64_t evictedRecords = 0;
    uint64_t reclaimedBaseKvPages = 0;
    uint64_t reclaimedDraftKvPages = 0;
    uint64_t reclaimedRecurrentSnapshots = 0;
    uint64_t reclaimedPartialKvSnapshots = 0;
    // The host tier (ContextCacheConfig::hostTierPages; all 0 without one): prompt tokens loaded from it instead
    // of computed, its blocks now, and its counters (tier/host_tier.h).
    uint64_t hostLoadedTokens = 0;
    uint64_t hostResidentBlocks = 0;
    uint64_t hostWrittenBlocks = 0;
    uint64_t hostDroppedBlocks = 0;
    uint64_t hostFailedLoads = 0;
    uint64_t hostFailedWrites = 0;
    uint64_t hostBytesToHost = 0;
    uint64_t hostBytesToDevice = 0;
    // The byte store under the host tier (ContextCacheConfig::hostStore; all 0 without one): prompt tokens loaded
    // from it (through host slots; hostLoadedTokens counts the host's own), and its link's counters
    // (tier/store_link.h).
    uint64_t storeLoadedTokens = 0;
    uint64_t storePutBlocks = 0;
    uint64_t storeDroppedPuts = 0;
    uint64_t storeFailedPuts = 0;
    uint64_t storeAskedBlocks = 0;
    uint64_t storeFetchedBlocks = 0;  // objects got and validated into host slots (waited for or not)
    uint64_t storeFailedLoads = 0;
    uint64_t storeRejectedLoads = 0;
    uint64_t storeLateBatches = 0;
    uint64_t storeBreakerRefusals = 0;
    uint64_t storeWaitMicros = 0;
};

}  // namespace ctxcache::runtime
