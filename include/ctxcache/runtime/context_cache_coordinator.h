// ContextCacheCoordinator: drives the context-cache manager the way an engine's request lifecycle needs it, and
// owns the device side of reuse (reference c.11, 0.11 API): page-table rows bound to resident slots, device
// KV lengths reset to reuse lengths, hybrid snapshot restore and capture, stream synchronisation, publication
// at prefill end and at decode end of normally finished sequences, in-flight admission of joiners, batch
// compaction, and quarantine after a failed synchronisation.
//
// Lifecycle of one request (every step on its RequestHandle, in this order; a step out of order is a
// ContractError that changes nothing):
//   beginRequest -> preparePrefill -> [engine prefill] -> enqueuePrefillCaptures -> [engine sync]
//   -> finalizePrefillPublication -> { prepareDecodeStep -> [engine step] -> completeDecodeStep
//                                      | admitSequence -> [seat] -> finalize/retractSequenceAdmission
//                                      | beginBatchCompaction -> compactBatch }* -> finish
//
// Invariants (checkInvariants() verifies them with the manager's):
//   - a resident slot belongs to at most one live sequence; its page-table row lists exactly its lease's pages
//     (base, and draft for a speculative lease); rows of free slots are empty;
//   - per sequence: committed <= token history; committed, common length and published block count only grow;
//     publication covers only complete blocks up to the committed (or common) boundary; every publication of a
//     sequence carries the retention it was admitted with (promptTokenCount = its prompt length), kept once per
//     sequence;
//   - a request whose synchronisation failed is quarantined: its leases stay pinned (the device may still read
//     them) and new admissions get kPoisoned, until shutdown() synchronises successfully.
// Errors: a broken contract (a step out of order, malformed advances, a bad resident ref, a map that reorders
//   survivors) throws ContractError and changes nothing; capacity is a status (kRequestFailed, kNoCapacity);
//   device failure is kPoisoned.
// Cost: O(blocks touched) host work per call plus the manager's; snapshot capture/restore one launch per
//   sequence; page-table upload one copy per dirty row range.
// Threading: single writer: callers serialise every call on the coordinator and its handles (the manager's
//   contract). Handles should be finished or destroyed before the coordinator; any still naming it then (live,
//   or quarantined in place: calls on those answer kPoisoned) are detached, so no handle reaches a destroyed
//   coordinator, whatever the order and however often the coordinator was reused after shutdown().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/device/snapshot_storage.h"
#include "ctxcache/runtime/context_cache_metrics.h"
#include "ctxcache/runtime/deployment_profile.h"
#include "ctxcache/runtime/runtime_types.h"
#include "ctxcache/tier/host_tier.h"

namespace ctxcache::runtime {

struct SequenceState;  // cpp/runtime/request_state.h

// The C ABI answers these as CTXC_OK, CTXC_E_REQUEST_FAILED and CTXC_E_POISONED.
enum class ContextCacheCoordinatorStatus : uint8_t { kOk = 0, kRequestFailed = 1, kPoisoned = 2 };

struct ContextCacheConfig {
    int32_t maxRecords = 1024;
    int32_t maxBatch = 8;    // sequences one request may hold (<= every page table's and lengths' maxBatch)
    int32_t pageSize = 0;    // tokens per page; 0 = the base pool's (required for a pure recurrent model)
    HashAlgorithm hashAlgorithm = HashAlgorithm::kSha256;
    std::string hashKey;     // optional secret of the keyed SHA-256 chain
    EvictionPolicy evictionPolicy = EvictionPolicy::kRecordLru;  // the manager's capacity eviction
    // A host-memory tier of this many pages beside the base pool (0: none; tier/host_tier.h): blocks the device
    // evicts (write-back) or publishes (write-through) are copied to host memory, and a vanilla attention
    // sequence's hit is extended by the blocks it holds, copied into the sequence's own pages at admission (its
    // prefill start moves past them). Needs an attention pool. With EAGLE (a paged speculative contract, no
    // checkpoints, futureDependencyTokens <= the page size) every slot also holds a draft page, and a speculative
    // sequence's hit is extended with both (HostTier::loadHit's speculative rule); hybrid and media-bearing
    // sequences are not extended. Its memory: resources.hostTierMemory, or pinned host memory the coordinator
    // allocates.
    int32_t hostTierPages = 0;
    tier::HostWritePolicy hostWritePolicy = tier::HostWritePolicy::kWriteBack;
    // A byte store shared with other replicas, under the host tier (tier/store_link.h; needs hostTierPages > 0):
    // blocks written to the tier are put there, and a hit the host cannot extend further is asked of it. An empty
    // keyPrefix is computed from storeModel, the base pool's layout and the hash algorithm (storeKeyPrefix).
    tier::StoreLinkOptions hostStore;
    std::string storeModel = "ctxcache";  // the model identity the store's keys name (replicas of one model share)
};

// The device objects the coordinator drives; all on one backend, all outliving the coordinator. What a
// deployment does not use is null: attention needs basePool + basePageTable + baseLengths; a paged speculative
// contract the draft triple; checkpoint reuse residentState + snapshots.
struct ContextCachePhysicalResources {
    device::KvPagePool* basePool = nullptr;
    device::KvPageTable* basePageTable = nullptr;
    device::KvLengths* baseLengths = nullptr;
    device::KvPagePool* draftPool = nullptr;
    device::KvPageTable* draftPageTable = nullptr;
    device::KvLengths* draftLengths = nullptr;
    device::ResidentState* residentState = nullptr;
    device::SnapshotStorage* snapshots = nullptr;
    // The host tier's slots (config.hostTierPages * tier::HostTier::slotBytes(*basePool, EAGLE ? draftPool :
    // nullptr) bytes, of the base pool's backend), or null: the coordinator allocates them.
    device::HostBuffer const* hostTierMemory = nullptr;
};

struct ContextCacheSequenceAdmission {
    // The prompt, a view of the caller's tokens (read in place during beginRequest / admitSequence): the
    // coordinator copies it once, into the sequence's own history. Built from a vector lvalue (a temporary would
    // dangle and is refused at compile time) or from an array and its length.
    TokenSpan tokenIds;
    BlockKeyExtras keyExtras;                  // request-wide identity (LoRA adapter, ...)
    std::vector<Hash128> perPositionMediaHash; // empty, or one per token (zero = a text token)
    // What the sequence's KV events name beyond its tokens (BlockStored's lora_name and extra keys): null = the
    // base model without media. ContextCacheRequest fills it from the request; media items lie in the prompt.
    std::shared_ptr<KvEventIdentity const> eventIdentity;
    ResidentRef resident;
    std::optional<ContextCacheLookupPolicy> lookupPolicy;
    // The sequence's retention (read during the admission, validated there: ContractError before anything is
    // held; the coordinator keeps its one copy). null: the default. Every publication of the sequence carries it
    // with promptTokenCount = the prompt's length (whatever it says), so tokens published at decode end take its
    // decodePriority.
    RetentionSpec const* retention = nullptr;
};

struct ContextCacheBatchAdmission {
    std::vector<ContextCacheSequenceAdmission> sequences;
    bool speculativeRequest = false;
    DecodingTokenStateContract tokenStateContract = DecodingTokenStateContract::kCommittedPlusLookahead;
    ContextCacheLookupPolicy lookupPolicy = ContextCacheLookupPolicy::kUseCache;
    ContextCacheCommitPolicy commitPolicy = ContextCacheCommitPolicy::kIncludingGeneratedTokens;
};

// How one sequence moved in a step: the tokens accepted (appended to its history) and its committed length.
struct ContextCacheSequenceAdvance {
    static constexpr int32_t kHoldCommittedStateLength = -1;  // with 0 tokens: a cancelled/failed row stays put
    int32_t const* acceptedTokenIds = nullptr;
    int32_t acceptedTokenCount = 0;
    int32_t committedStateLength = 0;
};

struct ContextCacheSequenceInfo {
    ResidentRef resident;
    int32_t inputLength = 0;
    int32_t tokenCount = 0;  // history length (prompt + accepted tokens)
    int32_t committedLength = 0;
    int32_t commonLength = 0;
    int32_t matchedLength = 0;
    int32_t reuseLength = 0;  // the prefill start
    ReusePlanKind planKind = ReusePlanKind::kNoReusablePrefix;
    bool bypass = false;
    bool forcedCold = false;
    int32_t publishedFullBlockCount = 0;
    std::vector<PageId> basePages;
    std::vector<PageId> draftPages;
};

class ContextCacheCoordinator {
public:
    // Returns false when the stream's work failed (the device may still be using what it was given).
    using StreamSynchronizer = std::function<bool(StreamHandle)>;

    struct RequestState;  // defined in cpp/runtime/request_state.h

    // A live request. Move-only; destroying it before finish() abandons the request (synchronising first when
    // device work may be pending; a failed synchronisation quarantines and poisons).
    class RequestHandle {
    public:
        RequestHandle() noexcept;
        ~RequestHandle();
        RequestHandle(RequestHandle&&) noexcept;
        RequestHandle& operator=(RequestHandle&&) noexcept;
        RequestHandle(RequestHandle const&) = delete;
        RequestHandle& operator=(RequestHandle const&) = delete;

        bool valid() const noexcept;  // bound to a live, unfinished request of a live coordinator
        int32_t batchSize() const noexcept;
        std::vector<int32_t> const& prefillStarts() const noexcept;
        ContextCacheSequenceInfo sequence(int32_t row) const;
        bool speculative() const noexcept;
        bool hasPendingJoiner() const noexcept;

    private:
        friend class ContextCacheCoordinator;
        explicit RequestHandle(std::unique_ptr<RequestState> state) noexcept;
        void reset() noexcept;
        std::unique_ptr<RequestState> state_;
    };

    struct BeginRequestResult {
        ContextCacheCoordinatorStatus status = ContextCacheCoordinatorStatus::kOk;
        std::optional<RequestHandle> request;  // set iff kOk
        std::vector<int32_t> prefillStarts;
        std::string failure;  // why, when not kOk
    };

    // Values are part of the C ABI (CTXC_ADMIT_*).
    enum class AdmitSequenceStatus : uint8_t { kAdmitted = 0, kNoCapacity = 1, kFailed = 2 };
    struct AdmitSequenceResult {
        AdmitSequenceStatus status = AdmitSequenceStatus::kFailed;
        int32_t prefillStart = 0;
        std::string failure;
    };

    // ContractError when the profile cannot be served by the resources (missing pools, geometry that does not
    // match, zero snapshot slots for checkpoint reuse, a speculative hybrid or recurrent profile).
    ContextCacheCoordinator(ContextCacheConfig const& config, ContextCacheDeploymentProfile const& profile,
                            ContextCachePhysicalResources const& resources, StreamSynchronizer synchronizer = {});
    ~ContextCacheCoordinator();
    ContextCacheCoordinator(ContextCacheCoordinator const&) = delete;
    ContextCacheCoordinator& operator=(ContextCacheCoordinator const&) = delete;

    // Admit a batch: one lease per sequence (forced-cold retry when a cache-derived plan does not fit),
    // prefillStarts[i] = reuse length. kRequestFailed (nothing held) on capacity or page-table overflow;
    // kPoisoned while quarantined work is unresolved. `stream` (optional) orders every step of the request: the
    // backend is switched to it at each step when it is on another, and synchronisations wait for it.
    BeginRequestResult beginRequest(ContextCacheBatchAdmission const& admission, DecodingKvHeadroom const& headroom,
                                    StreamHandle stream = nullptr);
    // Bind page-table rows, restore (or zero) recurrent state and partial-KV snapshots, set device KV lengths to
    // the reuse lengths.
    ContextCacheCoordinatorStatus preparePrefill(RequestHandle& request);
    // Hybrid: reserve and enqueue the prefill-end checkpoint captures (after the engine's prefill kernels). A
    // no-op for other deployments.
    ContextCacheCoordinatorStatus enqueuePrefillCaptures(RequestHandle& request);
    // After the engine's prefill sync: apply the prefill advances and publish prefill-end state.
    ContextCacheCoordinatorStatus finalizePrefillPublication(RequestHandle& request,
                                                             std::vector<ContextCacheSequenceAdvance> const& advances,
                                                             std::vector<int32_t> const* commonStateLengths = nullptr);
    // Grow every running row so it covers committed + headroom. kRequestFailed (request finishing) when growth
    // or the page table cannot.
    ContextCacheCoordinatorStatus prepareDecodeStep(RequestHandle& request, DecodingKvHeadroom const& headroom);
    // Whether prepareDecodeStep(request, headroom) can grow every running row now: the pages it would add (the
    // same arithmetic) fit the page table and the pools once every reclaimable page is evicted (exact, as
    // growth's own test). Read-only; false unless the request is executing. An engine that preempts rows until
    // this holds never loses a whole batch to a growth failure.
    bool canPrepareDecodeStep(RequestHandle const& request, DecodingKvHeadroom const& headroom) const;
    // Apply one step's advances; publish decode-end state for publishableCompletedRows (normally finished rows).
    ContextCacheCoordinatorStatus completeDecodeStep(RequestHandle& request,
                                                     std::vector<ContextCacheSequenceAdvance> const& advances,
                                                     std::vector<int32_t> const& publishableCompletedRows,
                                                     std::vector<int32_t> const* commonStateLengths = nullptr);
    // Validate an order-preserving dense map (-1 retires a row) and copy it to deviceBatchMapping (int32, at least
    // batch entries; data may be null to skip the copy).
    ContextCacheCoordinatorStatus beginBatchCompaction(RequestHandle& request, std::vector<int32_t> const& oldToNew,
                                                       int32_t newBatchSize, TensorView& deviceBatchMapping);
    // Apply the pending compaction: retired rows' page-table rows cleared and recurrent state zeroed, lengths
    // compacted, one synchronisation, then the retired leases released.
    ContextCacheCoordinatorStatus compactBatch(RequestHandle& request);
    // Synchronise pending work and release the request. An empty or finished handle is a no-op (kOk).
    ContextCacheCoordinatorStatus finish(RequestHandle& request);
    // Re-synchronise quarantined requests and free them. kOk clears the poison; kPoisoned when a sync still
    // fails; kRequestFailed when requests are still live.
    ContextCacheCoordinatorStatus shutdown() noexcept;

    // Hybrid+MTP (a hybrid profile whose MTP head owns a draft pool; reference c.11 HybridMtpPolicy, Appendix C:
    // speculative, text-only requests of one sequence under kPrefillStateOnly). Checkpoint at exact length E
    // (residentStateLength): recurrent state after E tokens, base KV [0, E), draft KV [0, E - 1) (the draft at
    // E - 1 reads token E, which stays private to whoever reuses the checkpoint) and the base hidden row of
    // position E - 1. publishHybridMtpEndpoint (during prefill, after preparePrefill and before
    // finalizePrefillPublication, with the device state at E) copies that row from baseHiddenStates
    // [rows, hiddenSize] fp16 into the resident slot, reserves the snapshot slots, captures recurrent state,
    // hidden row and the base + draft partial page floor((E - 1) / P) in ONE launch, synchronises once and
    // publishes fb = floor((E - 1) / P) paired blocks (kOk without publishing for a bypassed sequence or under
    // snapshot pressure). A later request that hits the checkpoint starts prefill at E with base lengths E and
    // draft lengths E - 1; restoreHybridMtpBoundaryHidden copies the restored row into baseHiddenStates at
    // destinationRow, so the engine can compute the draft at E - 1 from it and its own token E. `row` is the
    // batch row. Both: ContractError on another deployment, a bad row, length or tensor; kPoisoned after a
    // failed synchronisation (the request is quarantined).
    ContextCacheCoordinatorStatus publishHybridMtpEndpoint(RequestHandle& request, int32_t row,
                                                           int32_t residentStateLength,
                                                           TensorView const& baseHiddenStates,
                                                           int32_t boundaryHiddenRow);
    ContextCacheCoordinatorStatus restoreHybridMtpBoundaryHidden(RequestHandle& request, int32_t row,
                                                                 TensorView& baseHiddenStates, int32_t destinationRow);

    // In-flight admission of a joiner (attention-only, non-speculative deployments and requests): binds only the
    // new resident row and sets its device KV length to the reuse length. kNoCapacity is transient.
    AdmitSequenceResult admitSequence(RequestHandle& request, ContextCacheSequenceAdmission const& admission,
                                      DecodingKvHeadroom const& headroom);
    // The seated joiner (at batch row `row` == the batch size before admission) becomes a member: its prefill
    // advance is applied and prefill-end blocks published.
    ContextCacheCoordinatorStatus finalizeSequenceAdmission(RequestHandle& request, int32_t row,
                                                            ContextCacheSequenceAdvance const& advance);
    // Undo an admitted, not yet finalized joiner: row cleared, lease released. False when there is none.
    bool retractSequenceAdmission(RequestHandle& request) noexcept;
    bool supportsLiveSequenceAdmission() const noexcept;

    // A prefix-cache reset (ContextCacheManager::clear): afterwards no request reuses anything cached before it.
    // Refused while requests are active or quarantined (ContractError, nothing changed).
    void clear();
    // Drives the manager's retention clock (ContextCacheManager::setRetentionTime: nanoseconds, never backwards,
    // ContractError otherwise) instead of the steady clock; the expiries it reaches apply at once.
    void setRetentionTime(int64_t nowNs);
    ContextCacheMetrics metrics() const;
    ContextCacheManager& manager() noexcept { return manager_; }
    ContextCacheManager const& manager() const noexcept { return manager_; }
    tier::HostTier const* hostTier() const noexcept { return hostTier_.get(); }
    // Applies the host tier's finished byte-store batches (HostTier::pollStore; 0 without a store): what every
    // acquire does first, for a runtime with idle time between requests. Single writer.
    size_t pollStore() { return hostTier_ ? hostTier_->pollStore() : 0; }
    size_t storeBatchesInFlight() const noexcept { return hostTier_ ? hostTier_->storeBatchesInFlight() : 0; }
    // The host tier's slots (the resources' hostTierMemory or the coordinator's own), nullptr without a tier: what a
    // byte store registers for zero-copy puts and gets.
    device::HostBuffer const* hostTierMemory() const noexcept {
        if (!hostTier_) return nullptr;
        return resources_.hostTierMemory ? resources_.hostTierMemory : &*hostMemory_;
    }
    ContextCacheDeploymentProfile const& profile() const noexcept { return profile_; }
    ContextCacheConfig const& config() const noexcept { return config_; }
    BlockHasher const& hasher() const noexcept { return hasher_; }
    int32_t pageSize() const noexcept { return pageSize_; }
    bool poisoned() const noexcept { return poisoned_; }
    int32_t activeRequestCount() const noexcept { return activeRequests_; }
    size_t quarantinedRequestCount() const noexcept { return quarantine_.size(); }
    // Why the last call that returned a failure status failed.
    std::string const& lastFailure() const noexcept { return lastFailure_; }
    // Throws InvariantError naming the first violation (the manager's, then the coordinator's own).
    void checkInvariants() const;

private:
    friend class RequestHandle;

    using Status = ContextCacheCoordinatorStatus;

    RequestState& live(RequestHandle& request, char const* op);
    bool acquireSequence(ContextCacheSequenceAdmission const& admission, ContextCacheLookupPolicy policy,
                         DecodingKvHeadroom const& headroom, bool pagedSpec, SequenceState& seq, std::string& failure,
                         bool& capacity);
    void countAdmission(SequenceState const& seq);
    void bindRows(SequenceState const& seq);
    void clearRows(int32_t slot);
    void uploadTables();
    void restoreOrZero(SequenceState const& seq);
    bool stageCapture(SequenceState& seq, int32_t length);
    char* hiddenRowOf(char const* op, TensorView const& tensor, int32_t row) const;
    void publishBase(SequenceState& seq, int32_t length);
    void publishStaged(SequenceState& seq);
    void publishPrefillEnd(RequestState& state, SequenceState& seq);
    void flushFrozen(SequenceState& seq);
    bool coverRow(SequenceState& seq, DecodingKvHeadroom const& headroom, std::string& why);
    ResourceDemand coverDemand(SequenceState const& seq, DecodingKvHeadroom const& headroom, bool& fitsTable) const;
    Status failRequest(RequestState& state, std::string why);
    Status terminalize(RequestHandle& request, RequestState& state, char const* op);
    Status quarantineLive(RequestHandle& request, std::string why);
    bool syncStream(StreamHandle stream) noexcept;
    bool synchronize(RequestState& state) noexcept;
    void unbind(RequestState& state) noexcept;
    void abandon(std::unique_ptr<RequestState> state) noexcept;
    void release(RequestState& state) noexcept;

    ContextCacheConfig config_;
    ContextCacheDeploymentProfile profile_;
    ContextCachePhysicalResources resources_;
    StreamSynchronizer synchronizer_;
    device::DeviceBackend* backend_ = nullptr;  // where every resource lives
    int32_t pageSize_ = 0;
    BlockHasher hasher_;
    ContextCacheManager manager_;
    // After the manager: destroyed (detached) before it.
    std::optional<device::HostBuffer> hostMemory_;  // the tier's slots when the resources bring none
    std::unique_ptr<tier::HostTier> hostTier_;
    ContextCacheMetrics counters_;
    std::vector<uint64_t> residentEpochs_;  // per slot: epoch of its live sequence (0 = free)
    std::vector<uint64_t> lastEpochs_;      // per slot: the highest epoch ever admitted
    std::vector<std::unique_ptr<RequestState>> quarantine_;
    RequestState* liveList_ = nullptr;  // intrusive list of live requests (for detaching at destruction)
    // Intrusive list of handles' states quarantined in place (they still name this coordinator until finished or
    // destroyed; detached at destruction like the live ones).
    RequestState* quarantinedHandles_ = nullptr;
    int32_t activeRequests_ = 0;
    bool poisoned_ = false;
    std::string lastFailure_;
};

}  // namespace ctxcache::runtime
