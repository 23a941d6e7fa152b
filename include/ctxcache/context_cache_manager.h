// ContextCacheManager: host orchestrator of the whole context-cache lifecycle, acquire -> model execution ->
// publish or release. ResourcePools owns capacity and refcounts, BaseBlockIndex the canonical base lookup,
// DraftPathIndex the coherent EAGLE-path lookup, CacheRecordStore endpoints and LRU, EvictionPlanner the policy
// that picks victims (the manager applies it one record at a time); the manager composes them.
//
// Invariants (checkInvariants() verifies all of them):
//   - every id's active refs == its holdings by live leases; cache refs == its listings by records;
//     an id is free <=> both are zero;
//   - a base mapping hash -> page exists exactly while page holds a cache ref, and a base record's path is the
//     index's projection of its logical hashes (so the store keeps no copy of them: it derives each from the
//     index's page -> hash entry, and a pure-recurrent checkpoint, which has no pages, keeps its own); every
//     block of every record, through the store's digest of the hashes it was published with;
//   - every paired non-hybrid (EAGLE) record's boundaries are in the draft index and nothing else is: a
//     Hybrid+MTP checkpoint's draft path is found only through its exact checkpoint key (the store's MTP
//     index), never by the EAGLE path lookup, whose one-page replay rule does not describe it;
//   - records <= maxRecords (none at all when maxRecords == 0).
// Atomicity: acquire pins the hit, checks from the exact reclaimable counts that eviction can make room, and
//   either evicts + allocates (cannot fail) or rolls back the pins and reports kInsufficientCapacity having
//   evicted nothing. grow and reserve are all-or-nothing.
//   Publication validates everything (the lease's acquired prefix, replay dependency, owned snapshots) before
//   it mutates, then adds cache refs, canonical mappings and one record as one transaction.
// Canonical projection (every publish*): block i's canonical page is the page the index maps hashes[i] to, if
//   any (first committer wins, whoever produced it); else the lease's page i becomes canonical for hashes[i] --
//   unless that page is already the canonical page of ANOTHER hash. That happens only when a lease published
//   two different hashes for one page of its own (a cold lease's hashes are not checked against anything), and
//   possibly seen by another lease that hit the page meanwhile: the publication is refused (ContractError naming
//   the block, the page and both hashes; nothing changed), as BaseBlockIndex::insert and the reference's commit
//   ("missing mappings must be fresh") refuse it. It is neither skipped nor re-mapped: a record is a complete
//   path from the chain root, so no block can be left out, and the page stays canonical for the hash its
//   holders published first.
// Hybrid+MTP (kHybridMtp leases): acquireHybridMtp binds a checkpoint's base AND draft paths (fb pages each,
//   fb = floor((E-1)/P): the boundary token E stays private) plus its recurrent and partial-KV slots; the lease
//   grows with growSpecPages (both pools; growBasePages refuses it), reserves BOTH snapshot slots (a reservation
//   without the partial slot is a ContractError: every MTP checkpoint has one) and publishes with
//   publishHybridMtp only. The record keeps base and an equally long draft path through the E-1 boundary.
// Recency: hybrid, Hybrid+MTP and spec hits are touched at acquire; plain base-block hits touch nothing; an
//   exact duplicate publication touches the existing record; capacity and record-limit eviction are strict
//   record LRU within a retention priority, the lowest priority first (retention.h, docs/RETENTION.md: a
//   publication's RetentionSpec ranks its record, by its best block under record LRU and by its last block under
//   lru-trim; with no spec every record is at the default priority and eviction is plain record LRU). Under
//   EvictionPolicy::kRecordLruTrim (opt-in at construction) capacity eviction may instead trim the last record it
//   reaches down to a shorter prefix (eviction_planner.h), never below a tail of higher priority than its rank (a
//   low tail that is not enough is cut and the record re-ranks); the record-limit victim is always evicted whole.
//   Pinned records (pinRecord) are outside the order and hold their resources like a lease; every record's rank
//   is as of the last time the retention clock was read, with every expiry up to it applied.
// Growing publication (PublishRequest::growth, opt-in; vanilla leases only, else ContractError): a lease remembers
//   its own record, the one its last publication created or grew (an existing record it met, kExistingRecord, is
//   never its own). With kExtendLeaseRecord, when that record R is alive, unpinned, base-only, shorter than the N
//   published blocks and its last hash is hashes[R's count - 1] (its path is a prefix of this one), the result is
//   one record of N blocks and R is gone: the new record (or the existing exact one, kExistingRecord) is
//   committed, then R is removed as superseded in the same call, before any record-limit eviction (the count does
//   not grow; no other record is evicted for it). Superseding is not eviction: no metrics, no BlockRemoved (R's
//   pages stay cached and indexed through its successor; BlockStored for the newly mapped blocks only, as
//   always). The result is MRU. Retention: the publication's spec applies as usual and R's ranges join the
//   successor's by the existing-record merge, less those a successor range dominates (same or wider blocks, at a
//   priority at least as high, lasting at least as long). Otherwise (no own record, R gone, pinned, longer,
//   diverged) the publication creates a record as with kNewRecord. RecordIds are never reused, so the lease
//   keeps R's id and re-validates it at use; nothing dangles. Superseded records count in
//   ContextCacheManagerMetrics::supersededRecords.
// A spec lease's dominated hit (always on, no option): a hit at boundary n binds n - 1 draft pages, so an EAGLE
//   record's last draft page is never bindable. When a spec lease's publication creates a record whose base path
//   strictly extends the base path of the record the lease hit (plan.draftRecord) and whose draft path starts
//   with that record's draft path less its last page, the new record holds everything the hit record could ever
//   give a hit; if the hit record is also alive, unpinned and without retention ranges, it is superseded as above
//   (before the record limit, no eviction metrics, no BlockRemoved) and its last draft page goes back to the free
//   list unless another holder keeps it. Without this, every turn of a conversation leaves a dominated record
//   holding one dead draft page, and eviction under pressure walks those records one page at a time.
// Errors: a broken contract throws ContractError and changes nothing; capacity shortage is a status.
// Cost: O(blocks touched) per call, plus eviction proportional to the victims. Memory: metadata for the ids
//   handed out so far (at least the first kEagerMetadataIds of each pool, allocated at construction), never for
//   the whole capacity, so any capacity up to INT32_MAX is fine; metadata that cannot be allocated is an
//   OutOfMemoryError naming the bytes (the call changes nothing).
// KV events (opt-in, include/ctxcache/kv_events.h, docs/EVENTS.md): the events mirror the base block index, the
//   blocks a later lookup can hit. BlockStored when a publication maps blocks canonically (a draft path, a
//   recurrent or partial snapshot and an existing record add none), BlockRemoved when eviction erases an index
//   entry (whether or not a lease still pins the page: a lookup can no longer find it), AllBlocksCleared when
//   events are enabled and on clear(). Each public call's events go to the sink at the end of that call (one
//   batch), or stay pending for drainKvEvents(). With events on, a publication must carry its blocks' tokens,
//   and its identity (eventKeys: LoRA adapter, media items) becomes BlockStored's lora_name and extra keys.
// Threading: none internal. Callers serialize every manager and lease access (single writer). Leases must be
//   released before the manager is destroyed; any still alive then are detached (invalid, release is a no-op).
//   A sink is called on the caller's thread, at the end of the call that produced the events.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "ctxcache/base_block_index.h"
#include "ctxcache/base_block_observer.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/cache_record_store.h"
#include "ctxcache/cache_request_lease.h"
#include "ctxcache/draft_path_index.h"
#include "ctxcache/eviction_planner.h"
#include "ctxcache/kv_events.h"
#include "ctxcache/resource_pools.h"
#include "ctxcache/retention.h"
#include "ctxcache/retention_table.h"
#include "ctxcache/reuse_plan.h"
#include "ctxcache/types.h"

namespace ctxcache {

enum class AcquireStatus : uint8_t { kAcquired = 0, kInsufficientCapacity = 1 };
enum class PublishStatus : uint8_t { kPublished = 0, kExistingRecord = 1 };

// A plan is built and consumed under the manager's single-writer contract, so it cannot go stale in between.
struct AcquireResult {
    std::optional<CacheRequestLease> lease;
    AcquireStatus status = AcquireStatus::kAcquired;
    ReusePlan plan;
};

// What a vanilla lease's publication does with the record its earlier publication made (see "Growing
// publication" above): kNewRecord (the default, the reference's) adds a record per longer publication, nested
// records; kExtendLeaseRecord replaces the lease's own record R by the longer one (R superseded, not evicted).
enum class PublicationGrowth : uint8_t { kNewRecord = 0, kExtendLeaseRecord = 1 };

// What a publication names, as views of the caller's arrays (read during the call, never kept; a vector converts,
// so `PublishRequest{hashes, length}` works as before and no copy is made at the C ABI).
struct PublishRequest {
    BlockHashSpan fullBlockHashes;
    // Greatest logical prefix ready for publication. For speculative leases, both base and draft state must be
    // materialized through this boundary.
    int32_t residentStateLength = 0;
    BlockTokenSpan tokenIds;  // the prompt's tokens (at least the published blocks'): needed with events on
    KvEventKeys eventKeys;    // the prompt's LoRA adapter and media items, for BlockStored (read with events on)
    RetentionSpec const* retention = nullptr;  // how long the record should stay (retention.h); null: the default
    PublicationGrowth growth = PublicationGrowth::kNewRecord;  // kExtendLeaseRecord: vanilla leases only
};

struct PublishResult {
    PublishStatus status = PublishStatus::kPublished;
    std::optional<RecordId> record;  // empty when the record was evicted at once (record limit 0)
    // Canonical base pages owned by the record. Never an active-row update recipe: the lease keeps its pages.
    std::vector<PageId> canonicalBasePages;
    int32_t publishedBaseFullBlockCount = 0;
    // kExtendLeaseRecord: the lease's record this publication replaced (superseded, not evicted).
    std::optional<RecordId> supersededRecord = std::nullopt;
};

// What acquireVanilla with kUseCache would reuse right now (probeVanilla): the plan's kind, matched and reuse
// lengths, and the canonical pages it would bind (reuseTokenLength / pageSize of them, in block order).
struct ReuseProbe {
    ReusePlanKind kind = ReusePlanKind::kNoReusablePrefix;
    int32_t matchedTokenLength = 0;  // as ReusePlan::matchedTokenLength (before the full-input rewind)
    int32_t reuseTokenLength = 0;    // as ReusePlan::reuseTokenLength
    std::vector<PageId> pages;       // as ReusePlan::basePageBindings
};

// The fewest pages a new lease must hold (shared prefix + private), so that a runtime's first step fits without
// a separate grow: an acquire raises its private demand to cover them, in the same all-or-nothing step. A pool
// the lease does not use (draft on a vanilla lease, base on a pure-recurrent one) ignores its entry.
struct PageCoverage {
    int32_t basePages = 0;
    int32_t draftPages = 0;
};

// Request-private snapshot slots reserved before the runtime enqueues a hybrid capture.
struct HybridSnapshotReservation {
    int32_t recurrentSnapshotSlot = 0;
    std::optional<int32_t> partialKvSnapshotSlot;
};

// A hybrid or Hybrid+MTP publication, as views of the caller's arrays (like PublishRequest).
struct HybridPublishRequest {
    BlockHashSpan fullBlockHashes;
    HybridCheckpointKey checkpoint;
    HybridSnapshotReservation snapshots;
    BlockTokenSpan tokenIds;  // as PublishRequest::tokenIds
    KvEventKeys eventKeys;    // as PublishRequest::eventKeys
    RetentionSpec const* retention = nullptr;  // as PublishRequest::retention
};

// Cumulative eviction outcomes and lookups. Reclaimed counts include only resources returned to a free list at the
// eviction point; resources still pinned by an active request are not counted. An acquire that fails
// (kInsufficientCapacity) changes none of them.
struct ContextCacheManagerMetrics {
    uint64_t evictedRecords = 0;
    uint64_t reclaimedBaseKvPages = 0;
    uint64_t reclaimedDraftKvPages = 0;
    uint64_t reclaimedRecurrentSnapshots = 0;
    uint64_t reclaimedPartialKvSnapshots = 0;
    uint64_t trimmedRecords = 0;  // kRecordLruTrim: trims applied (a record trimmed twice counts twice)
    uint64_t trimmedBlocks = 0;   // blocks those trims took off their records
    // Lookups, as vLLM's prefix-cache stats count them, over the acquires that succeeded and read the cache
    // (kUseCache): their prompt tokens and the tokens they skip (reuseTokenLength). hits / queries is the hit rate.
    uint64_t prefixCacheQueries = 0;
    uint64_t prefixCacheHits = 0;
    // Records a longer publication replaced (a vanilla lease's growth, a spec lease's dominated hit): not evicted,
    // so in none of the counts above.
    uint64_t supersededRecords = 0;
};

// Retention outcomes (retention.h): what eviction took at which priority, and the clock's effects.
struct RetentionMetrics {
    uint64_t evictedRecordsByPriority[kRetentionPriorityCount] = {};  // a record's rank when it was evicted
    uint64_t trimmedRecordsByPriority[kRetentionPriorityCount] = {};  // the rank under which a trim cut it
    uint64_t retentionExpiries = 0;  // records whose rank fell because a range's duration ended
    uint64_t pinExpiries = 0;  // pins released because their duration ended
    uint64_t pinsRefused = 0;  // pins the budget refused
    uint64_t pinnedRecords = 0;  // gauges: records pinned now, and the distinct base pages they hold
    uint64_t pinnedBasePages = 0;
};

class ContextCacheManager {
public:
    ContextCacheManager(int32_t pageSize, ResourceDemand capacities, int32_t maxRecords,
                        EvictionPolicy evictionPolicy = EvictionPolicy::kRecordLru);
    ~ContextCacheManager();
    ContextCacheManager(ContextCacheManager const&) = delete;
    ContextCacheManager& operator=(ContextCacheManager const&) = delete;
    ContextCacheManager(ContextCacheManager&&) = delete;
    ContextCacheManager& operator=(ContextCacheManager&&) = delete;

    // One entry point per operation. The hashes are the prompt's full blocks, a view of the caller's array (a
    // std::vector converts; the C ABI passes its array in place): read during the call, never copied or kept.
    AcquireResult acquireVanilla(BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount,
                                 ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache,
                                 PageCoverage coverage = {});
    AcquireResult acquireHybrid(std::vector<HybridCheckpointCandidate> const& candidates,
                                BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount, bool hasAttention,
                                ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache,
                                PageCoverage coverage = {});
    // A lookup without side effects (TensorRT-LLM's probe_reuse): what acquireVanilla(hashes, n, kUseCache) would
    // reuse if it ran now, by the same rule (matchVanillaPrefix), so it equals the plan of an acquire that follows
    // with nothing in between. Changes nothing: no recency, no metrics, no events, no pins, no clock read.
    // Validation as acquireVanilla (ContractError). O(blocks matched + 1).
    ReuseProbe probeVanilla(BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount) const;
    std::vector<int32_t> hybridCandidateLengths(int32_t inputTokenCount) const;
    // Only the stored lengths below inputTokenCount whose checkpoint hangs off this prompt's own block chain (its
    // last full block is one of the prompt's): the candidates worth a digest. O(prompt blocks + results).
    std::vector<int32_t> hybridCandidateLengths(int32_t inputTokenCount, BlockHashSpan inputFullBlockHashes) const;
    // The caller must first select greedy, non-hybrid EAGLE on a supported deployment.
    AcquireResult acquireSpec(BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount,
                              ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache,
                              PageCoverage coverage = {});
    // A hybrid (attention + recurrent) model drafting with an MTP head: the longest complete Hybrid+MTP
    // checkpoint among the candidates (makeHybridMtpReusePlan). Coverage raises base and draft demand alike.
    AcquireResult acquireHybridMtp(std::vector<HybridCheckpointCandidate> const& candidates,
                                   BlockHashSpan inputFullBlockHashes, int32_t inputTokenCount,
                                   ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache,
                                   PageCoverage coverage = {});

    // Atomically append private base pages (vanilla or hybrid lease); false changes nothing.
    bool growBasePages(CacheRequestLease& lease, int32_t count);
    // Atomically append base and draft pages (spec or Hybrid+MTP lease); false changes nothing.
    bool growSpecPages(CacheRequestLease& lease, int32_t baseCount, int32_t draftCount);

    // Reserve unpublished snapshot storage (hybrid lease: partial only with attention; Hybrid+MTP lease: both
    // slots always, so needsPartialKvSnapshot must be true). nullopt is retention pressure and leaves the lease
    // unchanged.
    std::optional<HybridSnapshotReservation> reserveHybridSnapshots(CacheRequestLease& lease,
                                                                    bool needsPartialKvSnapshot);
    // Drop the hit-snapshot pins after the stream-ordered restore has completed (hybrid or Hybrid+MTP lease).
    // Idempotent.
    void releaseRestoredHybridSnapshots(CacheRequestLease& lease);
    // Drop producer ownership of a reservation after capture is terminal and publication committed or skipped.
    void retireHybridSnapshotReservation(CacheRequestLease& lease, HybridSnapshotReservation const& reservation);

    // With events on, request.tokenIds must hold at least (published blocks) * pageSize tokens (ContractError,
    // nothing changed); without, it is ignored. request.growth kExtendLeaseRecord: see "Growing publication".
    PublishResult publish(CacheRequestLease& lease, PublishRequest const& request);
    PublishResult publishHybrid(CacheRequestLease& lease, HybridPublishRequest const& request);
    // A Hybrid+MTP checkpoint at exact length E >= 1 (kHybridMtp lease): fullBlockHashes are its
    // floor((E-1)/P) full blocks; snapshots must hold BOTH slots, reserved by this lease. The record owns the
    // canonical base path, the lease's first floor((E-1)/P) draft pages and both slots. An existing MTP
    // checkpoint with that key is touched (kExistingRecord). Everything is validated first (ContractError,
    // nothing changed).
    PublishResult publishHybridMtp(CacheRequestLease& lease, HybridPublishRequest const& request);

    // Evicts one record now (whatever its recency or priority; a pinned one loses its pin). Unknown id:
    // ContractError.
    void evictRecord(RecordId id);

    // Retention (retention.h). Time: the steady clock, until the caller drives it: setRetentionTime switches to
    // the caller's clock for good (every expiry set on the steady clock keeps the time it had left) and applies
    // the expiries it reaches (a time before the last one set: ContractError). retentionTime() is the time expiries are
    // judged by.
    void setRetentionTime(int64_t nowNs);
    int64_t retentionTime() const noexcept;
    bool retentionClockDriven() const noexcept { return clockDriven_; }
    // A record's eviction rank now (its bucket) and its ranges in block units (empty: the default).
    int32_t recordPriority(RecordId id) const;
    RetentionBlockRanges recordRetention(RecordId id) const;
    // Hard pins: a pinned record is never evicted or trimmed until unpinned, explicitly or when durationNs
    // (kNoRetentionDuration: none) ends. It holds its resources like a lease does, so an acquire never counts on
    // them. The budget bounds them: the distinct ids pinned records hold in each pool stay within
    // floor(fraction * capacity), and pinned records below maxRecords, so admission never fails for lack of what
    // pins hold beyond it. A pin past the budget is refused (ContractError naming the pool, the ids it needs and
    // the budget; nothing changed: the refusal is decided before the clock is read, so it applies no expiry either).
    // Pinning a pinned record again only sets its duration.
    void setPinBudget(double fraction);  // 0 (the default) refuses every pin; fraction in [0, 1]
    double pinBudget() const noexcept { return pinBudget_; }
    void pinRecord(RecordId id, int64_t durationNs = kNoRetentionDuration);
    void unpinRecord(RecordId id);  // unknown or unpinned id: ContractError
    bool isPinned(RecordId id) const;
    RetentionMetrics const& retentionMetrics() const noexcept { return retentionMetrics_; }
    // A prefix-cache reset: evicts every record, so that no lookup finds anything afterwards (with events on: one
    // AllBlocksCleared instead of the removals). Refused while leases are live (ContractError, nothing changed):
    // their publications would refill the cache the reset claims to empty, as vLLM's reset_prefix_cache refuses
    // while blocks are in use. The ids cached records held are free afterwards.
    void clear();

    // Turns the event stream on: ContractError when it is already on, when the base index is not empty (the
    // stream must describe the whole index, so enable it before the first publication) or when maxPendingEvents
    // is 0. The first event is AllBlocksCleared. Without a sink, events wait for drainKvEvents(); when more than
    // maxPendingEvents are waiting at the end of a call, they are dropped (counted in lostKvEvents()) and replaced
    // by one AllBlocksCleared, so a consumer under-reports this cache, never over-reports it.
    void enableKvEvents(size_t maxPendingEvents = size_t{1} << 20);
    // Turns it off: pending events are dropped and the sink is detached. Idempotent.
    void disableKvEvents() noexcept;
    bool kvEventsEnabled() const noexcept { return eventsEnabled_; }
    // Each later call's events go to `sink` (null: they wait for a drain). Pending events go to it now. Needs
    // events on (ContractError).
    void setKvEventSink(std::shared_ptr<KvEventSink> sink);
    // Swaps the pending events into `out` (whose old contents are discarded). Empty when events are off.
    void drainKvEvents(KvEventLog& out);
    size_t pendingKvEventCount() const noexcept { return events_.size(); }
    uint64_t lostKvEvents() const noexcept { return lostKvEvents_; }

    // The observer told of blocks stored and removed (base_block_observer.h), or null: not owned, it must stay
    // alive until replaced or detached (null). One at a time: setting a second while one is set is a
    // ContractError (nothing changed) unless it is null. Independent of the event stream.
    void setBaseBlockObserver(BaseBlockObserver* observer);
    BaseBlockObserver* baseBlockObserver() const noexcept { return observer_; }
    // What a tier beside the manager reports on the manager's event stream (medium kHost; nothing while events are
    // off): blocks it now holds (root-first, pageSize tokens each, parent = the block before the first, if any)
    // and blocks it dropped. Inside a manager call (an observer) they leave with that call's events; outside,
    // at once. A failure to record them is the stream's usual loss (an AllBlocksCleared), never a throw.
    void reportTierStored(BlockHash const* hashes, size_t count, BlockHash const* parent,
                          int32_t const* tokens) noexcept;
    void reportTierRemoved(BlockHash const* hashes, size_t count) noexcept;

    ResourcePools const& pools() const noexcept { return pools_; }
    BaseBlockIndex const& baseIndex() const noexcept { return baseIndex_; }
    DraftPathIndex const& draftIndex() const noexcept { return draftIndex_; }
    CacheRecordStore const& records() const noexcept { return records_; }
    ContextCacheManagerMetrics const& metrics() const noexcept { return metrics_; }
    int32_t pageSize() const noexcept { return pageSize_; }
    EvictionPolicy evictionPolicy() const noexcept { return evictionPolicy_; }
    size_t liveLeaseCount() const noexcept { return liveLeases_; }

    // Throws InvariantError describing the first violation found. O(ids allocated so far + records + leases).
    void checkInvariants() const;
    // Heap bytes of every index and record (not leases): the metadata cost of the cache.
    size_t metadataBytes() const noexcept;

private:
    friend class CacheRequestLease;
    using LeaseState = CacheRequestLease::State;

    static ResourceDemand validatedCapacities(int32_t pageSize, ResourceDemand capacities, int32_t maxRecords);
    static EvictionPolicy validatedPolicy(EvictionPolicy policy);
    AcquireResult acquire(ReusePlan plan, PageCoverage coverage, int32_t inputTokenCount,
                          ContextCacheLookupPolicy lookupPolicy);
    CacheRequestLease newLease(ReusePlanMode mode);
    LeaseState& checkLease(CacheRequestLease& lease, char const* operation) const;
    void releaseLease(LeaseState& state) noexcept;
    // Evicts (under kRecordLruTrim: or trims) least recent records, protectedRecord last, one at a time until the
    // pools can allocate `demand`, which ResourcePools::canAllocateOnceReclaimed promised: exactly the victims and
    // the trim EvictionPlanner::plan picks, applied as the walk goes (a record's own simulation is all a step
    // needs once the earlier victims are really gone). InvariantError if the room is not there after all.
    void makeRoom(ResourceDemand const& demand, std::optional<RecordId> protectedRecord);
    void evictOne(RecordId id);
    void trimRecord(RecordTrim const& trim);
    // What the observer needs beside a page path it hears about (a publication's, a released one): the page before
    // pages[0] (a trimmed tail's: the kept part's last; -1 for a whole path) and, for an EAGLE record, its draft
    // pages aligned with the path's (with the draft page of that parent). Null / -1: none.
    struct ObservedPath {
        PageId parentBase = -1;
        PageId parentDraft = -1;
        std::vector<PageId> const* draft = nullptr;
    };
    // Drops one cache reference on each base page (unmapping it when that was the last) and counts what it frees;
    // after beginRemovals, each unmapped block is added to the open BlockRemoved event.
    void releaseBasePages(std::vector<PageId> const& pages, size_t from, ObservedPath const& path);
    bool beginRemovals(size_t maxBlocks) noexcept;  // opens a BlockRemoved event when removals are reported
    // producerPages[i] for i < matchedBlocks is the canonical page the lease pinned for hashes[i] at acquire
    // (the caller has checked hashes against the lease's matched prefix). A producer page that is the canonical
    // page of another hash refuses the publication (ContractError from `operation`, nothing mapped).
    std::vector<PageId> projectCanonicalBasePath(char const* operation, BlockHashSpan hashes, size_t count,
                                                 std::vector<PageId> const& producerPages, size_t matchedBlocks,
                                                 std::vector<PageId>& newlyMapped);
    // superseded: the lease's record the new one replaces (kExtendLeaseRecord): removed after the commit, in
    // place of a record-limit victim (the count does not grow).
    PublishResult commitRecord(CacheRecord record, std::vector<PageId> const& newlyMapped, int32_t publishedBlocks,
                               BlockTokenSpan tokens, KvEventKeys const& keys, RetentionSpec const* retention,
                               std::optional<RecordId> superseded = std::nullopt);
    // The lease's own record, when a publication of `count` blocks of `hashes` may supersede it: alive, unpinned,
    // a plain base record (no draft path) of fewer blocks whose last hash is hashes[its count - 1]. O(1).
    std::optional<RecordId> extendableLeaseRecord(LeaseState const& s, BlockHashSpan hashes, size_t count) const;
    // A spec lease's hit record, when the record about to be committed (its canonical base path and draft path
    // given) dominates it: alive, unpinned, without retention ranges of its own, an EAGLE record whose base path is
    // a strict prefix of basePath and whose draft path less its last page (never bindable: a hit at boundary n
    // binds n - 1 draft pages) is a prefix of draftPath. O(its path).
    std::optional<RecordId> dominatedSpecHit(LeaseState const& s, std::vector<PageId> const& basePath,
                                             std::vector<PageId> const& draftPath) const;
    // Whether the successor's base path starts with the old record's (so removing the old one unmaps nothing).
    bool extendsBasePath(RecordId old, std::vector<PageId> const& successorPath) const;
    // Removes `old`, which `successor` (holding every base page of it) replaces: no eviction (no metrics, no
    // events, no base page freed or unmapped); its retention ranges that the successor's do not dominate join the
    // successor's. A superseded EAGLE record leaves the draft index and drops its draft pages' references: its
    // last draft page, which no hit can bind, goes back to the free list when nothing else holds it.
    void supersede(RecordId old, RecordId successor);
    void checkEventTokens(char const* operation, BlockTokenSpan tokens, KvEventKeys const& keys, size_t blocks) const;
    void emitStored(std::vector<BlockHash> const& hashes, BlockTokenSpan tokens, KvEventKeys const& keys) noexcept;
    void eventFailed() noexcept;
    void finishEventCall() noexcept;

    // Marks one public call: the outermost one hands its events to the sink when it ends.
    class EventCall {
    public:
        explicit EventCall(ContextCacheManager& m) noexcept : m_(m) { ++m_.eventCallDepth_; }
        ~EventCall() {
            if (--m_.eventCallDepth_ == 0) m_.finishEventCall();
        }
        EventCall(EventCall const&) = delete;
        EventCall& operator=(EventCall const&) = delete;

    private:
        ContextCacheManager& m_;
    };

    int32_t pageSize_;
    int32_t maxRecords_;
    EvictionPolicy evictionPolicy_;
    ResourcePools pools_;
    BaseBlockIndex baseIndex_;
    DraftPathIndex draftIndex_;
    CacheRecordStore records_;
    ContextCacheManagerMetrics metrics_;
    LeaseState* leaseList_ = nullptr;  // intrusive list of live lease states
    size_t liveLeases_ = 0;

    bool eventsEnabled_ = false;
    bool eventsBroken_ = false;  // an append failed: the pending events become one AllBlocksCleared
    bool suppressRemovals_ = false;  // clear() reports one AllBlocksCleared instead
    bool reportingRemovals_ = false;  // the running releaseBasePages adds to an open BlockRemoved event
    int eventCallDepth_ = 0;
    size_t maxPendingEvents_ = 0;
    uint64_t lostKvEvents_ = 0;
    KvEventLog events_;  // this call's events, or all pending ones without a sink
    std::shared_ptr<KvEventSink> eventSink_;
    std::vector<size_t> stagedStores_;  // blocks the running publication mapped canonically, in order
    BaseBlockObserver* observer_ = nullptr;
    std::vector<BlockHash> observedHashes_;  // the running notification's blocks (capacity kept)
    std::vector<PageId> observedPages_;
    std::vector<int32_t> observedTokens_;
    std::vector<size_t> observedPositions_;  // the running removal's path index of each observed block
    bool observingRemovals_ = false;  // the running releaseBasePages collects removals for the observer
    // path.draft: an EAGLE record's draft page path (null: none).
    void notifyStored(std::vector<BlockHash> const& hashes, std::vector<PageId> const& pages, BlockTokenSpan tokens,
                      ObservedPath const& path) noexcept;
    // The observer hears observedHashes_ (path indices observedPositions_ of `pages`) in runs, then forgets them.
    void notifyRemoved(std::vector<PageId> const& pages, ObservedPath const& path) noexcept;
    // The draft side of the run [first, first + count) of `pages` (DraftRun): empty unless path.draft is aligned
    // with pages; the parent's pages only when the observer is told the parent (parentKnown).
    static DraftRun draftRunOf(std::vector<PageId> const& pages, ObservedPath const& path, size_t first, size_t count,
                               bool parentKnown) noexcept;

    // Retention: the records' ranges, expiries and pins (retention_table.h), the clock and the pin budget.
    RetentionTable retention_;
    RetentionMetrics retentionMetrics_;
    bool clockDriven_ = false;
    int64_t drivenNowNs_ = 0;
    double pinBudget_ = 0.0;
    int64_t rankedAtNs_ = std::numeric_limits<int64_t>::min();  // every record is ranked as of this time
    int64_t nowNs() const noexcept;
    // Reads the clock, applies the expiries due by then and makes it the ranking time; returns it.
    int64_t advanceRetentionClock();
    // The record's rank under this manager's policy at nowNs (its bucket in the store).
    int32_t rankOf(StoredRecord const& record, int64_t nowNs) const noexcept;
    // Re-ranks records whose ranges expired and releases pins whose duration ended, up to nowNs.
    void applyExpiries(int64_t nowNs);
    void applyExpiriesIfDue();
    // Stores a publication's spec on its record (a new one: set; an existing one: merged) and ranks it.
    void retain(RecordId id, RetentionSpec const* spec, bool existing);
    void dropPin(RecordId id);  // releases the pin's holds; the record goes back to its bucket
};

}  // namespace ctxcache
