// ReferenceEngine: a deterministic stand-in for an inference engine that serves requests through the runtime
// exactly as an engine would (ManagedKVCacheRequest: begin, prefill from the prefill start, captures,
// completion, decode steps, admission of joiners, compaction of finished rows, finish) and computes real KV,
// draft KV and recurrent state with the SimModel kernels through the page tables and resident slots the runtime
// manages. Every word at position p depends on every earlier position and the next token is sampled from the
// stored words, so a wrong page, snapshot, length or compaction changes both the bytes and the generated text.
// A cold run with reuse off (coldReference) is the ground truth: serve() with reuse must produce the same
// generated tokens and the same stateDigest for every request.
//
// Scheduling: requests are served in order, in batches of at most maxBatch founders; on an attention-only,
//   non-speculative deployment, a row that finishes makes room for the next queued request, admitted in flight
//   (admitSequence, seated by a prefill of its own row, finalized). A batch that cannot all be seated is served
//   in waves (below); a request that cannot fit alone is an error (ContractError).
// Hybrid+MTP: with speculative = kMtp (hybrid deployment, commitPolicy kPrefillStateOnly) the model has an MTP
//   head with its own draft pool: its draft word at p reads the fp16 hidden row of p (kMtpHiddenSize words, each
//   a mix of base layer 0's stored K and V words at p, computed on the host from the pool) and token p + 1.
//   Requests are served one at a time (Appendix C). Prefill: base and recurrent state over [start, n), hidden
//   rows of [start, n) (row start - 1 restored with restoreHybridMtpBoundaryHidden after a hit, never recomputed),
//   the draft over [max(0, start - 1), n - 1), then publishHybridMtpEndpoint at E = n with row n - 1; the
//   lookahead is sampled from the state, including the draft word at n - 2, and the draft at n - 1 follows. So a
//   wrong boundary row, partial page, draft page or recurrent snapshot changes the tokens and the digest.
// Sliding window: with slidingWindow = W > 0 (attention deployment, reuse off) the model reads only the last W
//   positions (the sampler folds every base word of [e - W, e)) and the engine serves through the facade's
//   bounded-SWA backend (BoundedSwaKVPageManager over a sparse-window table): prefill in chunks of at most W
//   tokens (prepareSwaPrefill per chunk), one token per decode step, no joiners. Its cold truth (coldReference)
//   is the same model keeping the full history through the coordinator (swaPaging = false).
// Faults: with syncFailureRate > 0, the coordinator's synchroniser fails at seeded random points. The engine
//   then finishes the request (quarantined), calls shutdown() until it succeeds and re-serves every unfinished
//   request of that batch from scratch: what was published before the fault must still be byte-exact.
// Digest: SHA-256 over, in order, each base layer's K then V bytes of positions [0, committed) ([committed - W,
//   committed) with a sliding window: the retained positions), each draft
//   layer's K then V bytes of [0, committed), then each recurrent layer's recurrent and conv row: the sequence's
//   final state in logical order, read back through the page table before its row is released.
// Waves: founders that cannot be seated together are retried as half as many (founderCap_, kept across
//   serve calls, regrowing by one after a batch that needed no preemption). A decode step whose growth would
//   not fit preempts the newest rows first (recompute, as vLLM's: the row leaves unpublished and is served
//   again from scratch later; its prompt, published at prefill end, is usually a hit then), and joiners wait
//   until a row retires. The oldest row is never preempted and fits alone (validate), so any batch size
//   finishes, byte-exact.
// Retention: each request's RetentionSpec goes with its sequence (every publication of it carries the spec, its
//   generated tokens at the decode priority); a request with an arrival time moves the retention clock to it when
//   it is seated (founder or joiner), so eviction and expiry follow the workload's own time.
// Interrupts: requestInterrupt() (any thread, even during serve) makes the serve that is running, or the next,
//   stop at its next batch or decode step with InterruptedError (and consumes the request); the engine is left
//   with no live request. A wave of one row decodes at most maxNewTokens steps between two checks.
// Threading: single writer (requestInterrupt excepted: an atomic store); not copyable.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/dtype.h"
#include "ctxcache/retention.h"
#include "ctxcache/runtime/bounded_swa_kv_page_manager.h"
#include "ctxcache/runtime/context_cache_coordinator.h"
#include "ctxcache/runtime/managed_kv_cache_request.h"
#include "ctxcache/runtime/runtime_types.h"

namespace ctxcache::sim {

class SimModel;

// Values are part of the C ABI (CTXC_SIM_DEPLOYMENT_*).
enum class DeploymentKind : uint8_t { kAttention = 0, kHybrid = 1, kRecurrent = 2, kEagle = 3 };
// Values are part of the C ABI (CTXC_SIM_SPECULATIVE_*).
enum class SpeculativeKind : uint8_t { kNone = 0, kMtp = 1 };
inline constexpr int32_t kMtpHiddenSize = 8;  // fp16 words of the MTP head's hidden row

struct ReferenceEngineConfig {
    DeploymentKind deployment = DeploymentKind::kAttention;
    int32_t pageSize = 16;
    int32_t basePages = 256;           // base (and EAGLE draft) pool pages; > 0, or >= 0 for kRecurrent (no KV)
    int32_t maxRecords = 1024;
    EvictionPolicy evictionPolicy = EvictionPolicy::kRecordLru;  // the coordinator's manager's
    int32_t maxBatch = 8;
    int32_t maxPagesPerSequence = 64;  // page-table width: a sequence holds at most this many pages
    int32_t snapshotSlots = 64;        // recurrent (and partial-KV) snapshot slots for checkpoint deployments
    device::BackendKind backend = device::BackendKind::kCpu;
    device::DeviceBackend* sharedBackend = nullptr;  // run on this backend instead (not owned; must outlive us)
    uint32_t seed = 0;
    int32_t layers = 2;                // attention layers (and draft layers for EAGLE)
    int32_t kvHeads = 2;
    int32_t headDim = 8;
    device::DType kvDtype = device::DType::kFp16;
    int32_t recurrentLayers = 2;       // hybrid and recurrent deployments
    int32_t vocabSize = 32000;
    bool reuse = true;                 // false: every request bypasses lookup and publication (the cold truth)
    runtime::ContextCacheCommitPolicy commitPolicy = runtime::ContextCacheCommitPolicy::kIncludingGeneratedTokens;
    HashAlgorithm hashAlgorithm = HashAlgorithm::kSha256;
    int32_t slidingWindow = 0;         // W > 0: a sliding-window model (attention only, reuse off); see above
    SpeculativeKind speculative = SpeculativeKind::kNone;  // kMtp: the hybrid deployment with an MTP head (above)
    bool swaPaging = true;             // with W > 0: false keeps the full history (the windowed cold truth)
    double syncFailureRate = 0.0;      // probability that one synchronisation fails (fault injection)
    uint32_t faultSeed = 1;
    // A host-memory tier of this many pages beside the base pool (attention deployments; the coordinator's
    // ContextCacheConfig::hostTierPages): evicted blocks come back as copies. 0: none.
    int32_t hostTierPages = 0;
    tier::HostWritePolicy hostWritePolicy = tier::HostWritePolicy::kWriteBack;
    // A byte store under the host tier (ContextCacheConfig::hostStore; a cold run never uses it), and the model
    // identity its keys name.
    tier::StoreLinkOptions hostStore;
    std::string storeModel = "ctxcache";
};

struct EngineRequest {
    std::vector<int32_t> tokens;
    int32_t maxNewTokens = 8;        // >= 1: the lookahead sampled at prefill end is the first
    std::string lora;                // empty = the base model
    std::vector<runtime::MediaItem> media;
    int32_t cancelAfter = -1;        // >= 1: cancelled once it has generated this many tokens
    int32_t failAfter = -1;          // >= 1: fails (an engine error) once it has generated this many tokens
    int32_t seatingFailures = 0;     // as an in-flight joiner, the first this many seatings fail (retracted)
    RetentionSpec retention;         // what its publications carry (validated before anything is served)
    // When set, the engine drives the retention clock (ContextCacheCoordinator::setRetentionTime) to this time,
    // in nanoseconds, as the request is seated (never backwards: a request re-served after a preemption or a
    // fault, or one that arrived earlier than the clock, leaves the clock where it is).
    std::optional<int64_t> arrivalNs;
};

struct EngineOutput {
    // Where its (last, successful) prefill began: the reuse length; for a preempted request, its first
    // admission's (its recompute hits its own prompt, published at prefill end: nobody else's work).
    int32_t prefillStart = 0;
    std::vector<int32_t> generated;
    std::array<uint8_t, 32> stateDigest{};
    bool cancelled = false;
    bool failed = false;
    bool joined = false;             // admitted in flight into a running batch
    int32_t attempts = 1;            // > 1 when a synchronisation fault made it start over
};

struct EngineStats {
    uint64_t batches = 0;
    uint64_t joiners = 0;
    uint64_t joinerNoCapacity = 0;
    uint64_t retractions = 0;        // joiners whose seating failed and were retracted
    uint64_t compactions = 0;
    uint64_t decodeSteps = 0;
    uint64_t syncCalls = 0;
    uint64_t syncFailures = 0;
    uint64_t restarts = 0;           // requests served again after a fault
    uint64_t capacityRetries = 0;    // batches split because they did not fit together
    uint64_t preemptions = 0;        // rows preempted (served again later): a decode step could not grow
};

class ReferenceEngine {
public:
    // ContractError on an invalid configuration; BackendUnavailableError when the backend asked for is absent.
    explicit ReferenceEngine(ReferenceEngineConfig const& config);
    ~ReferenceEngine();  // storage and coordinator go before the backend they live on
    ReferenceEngine(ReferenceEngine const&) = delete;
    ReferenceEngine& operator=(ReferenceEngine const&) = delete;

    // Serve every request (see Scheduling); outputs in request order. ContractError on a malformed request
    // (empty prompt, maxNewTokens < 1, a prompt that can never fit) before anything is served.
    std::vector<EngineOutput> serve(std::vector<EngineRequest> const& requests);
    // The same requests on a fresh engine of this configuration with reuse off and no faults.
    std::vector<EngineOutput> coldReference(std::vector<EngineRequest> const& requests) const;
    // Ask the running (or next) serve/coldReference to stop with InterruptedError; false withdraws a request
    // not yet consumed. Safe from any thread and concurrently with serve (an atomic store, nothing else).
    void requestInterrupt(bool requested = true) noexcept;

    runtime::ContextCacheMetrics metrics() const;
    EngineStats const& stats() const noexcept { return stats_; }
    // Most pages one sequence had mapped at once (bound + pending retirement) under bounded-SWA paging; 0 otherwise.
    int32_t peakPagesPerSequence() const noexcept;
    // The coordinator's (and manager's) invariants, and that no request is live.
    void checkInvariants() const;
    // Evicts every record; afterwards every pool must be full again (returns false, with *why, when not).
    bool drainAndCheckPoolsFull(std::string* why = nullptr);

    // Drives the coordinator's retention clock (ContextCacheCoordinator::setRetentionTime; ContractError going
    // backwards or under bounded-SWA paging, which has no coordinator).
    void setRetentionTime(int64_t nowNs);

    ReferenceEngineConfig const& config() const noexcept { return config_; }
    device::DeviceBackend& backend() noexcept { return *backend_; }
    // ContractError under bounded-SWA paging (no coordinator serves it).
    runtime::ContextCacheCoordinator& coordinator();
    runtime::BoundedSwaKVPageManager* swaManager() noexcept { return swa_.get(); }

private:
    struct Row;
    struct Storage;
    class BatchServer;  // one serveBatch call, a method per phase (reference_engine.cpp)

    bool synchronize();
    void checkInterrupt();  // throws InterruptedError (consuming the request) when one is pending
    bool serveBatch(std::vector<size_t>& queue, std::vector<EngineRequest> const& requests,
                    std::vector<EngineOutput>& outputs, std::vector<uint8_t>& done);
    void recover();
    runtime::ResidentRef takeResident();
    void releaseResident(runtime::ResidentRef ref);
    std::unique_ptr<Row> newRow(size_t index, EngineRequest const& request, runtime::ResidentRef resident) const;
    void prefillRows(std::vector<Row*> const& rows);
    bool prefillWindowed(runtime::ManagedKVCacheRequest& request, std::vector<Row*> const& rows);
    bool backendPoisoned() const;
    std::string const& backendFailure() const;
    void finishPrefill(std::vector<Row*> const& rows);
    void decodeRows(std::vector<Row*> const& rows);
    bool mtp() const noexcept { return config_.speculative == SpeculativeKind::kMtp; }
    void computeHidden(Row& row, int32_t begin, int32_t end) const;
    void mtpDraft(Row& row, int32_t begin, int32_t end);
    runtime::TensorView boundaryView() const;
    void setLengths(std::vector<std::unique_ptr<Row>> const& rows);
    std::array<uint8_t, 32> digest(Row const& row) const;
    uint32_t salt(std::string const& lora) const;
    std::vector<uint32_t> mediaWords(EngineRequest const& request) const;
    void validate(std::vector<EngineRequest> const& requests) const;
    void arrive(EngineRequest const& request);  // the retention clock to request.arrivalNs (see EngineRequest)

    ReferenceEngineConfig config_;
    std::unique_ptr<device::DeviceBackend> ownedBackend_;
    device::DeviceBackend* backend_ = nullptr;
    std::unique_ptr<Storage> storage_;
    std::unique_ptr<SimModel> model_;
    std::unique_ptr<runtime::ContextCacheCoordinator> coordinator_;  // null under bounded-SWA paging
    std::unique_ptr<runtime::BoundedSwaKVPageManager> swa_;
    BlockHasher hasher_;
    std::vector<runtime::CacheSlot> freeSlots_;
    uint64_t nextEpoch_ = 1;
    uint64_t faultState_ = 0;
    int32_t founderCap_ = 0;                    // founders of the next batch (see Waves)
    std::vector<int32_t> seatingFailuresLeft_;  // per request of the current serve()
    std::vector<int32_t> firstReuse_;           // per request: its prefill start when first preempted, else -1
    std::atomic<bool> interruptRequested_{false};
    std::atomic<bool>* interruptSource_ = &interruptRequested_;  // a cold run's engine watches its parent's
    EngineStats stats_;
};

char const* toString(DeploymentKind kind) noexcept;

}  // namespace ctxcache::sim
