// ContextCacheCoordinator: admission (hash, candidates, acquire with forced-cold retry), the device side of a
// request (rows, lengths, snapshot restore/capture, synchronisation), publication at prefill end and decode end,
// in-flight joiners, compaction, quarantine and shutdown. Contract, invariants, cost and threading:
// include/ctxcache/runtime/context_cache_coordinator.h.
#include "ctxcache/runtime/context_cache_coordinator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/device/device_error.h"
#include "ctxcache/errors.h"
#include "request_state.h"

namespace ctxcache::runtime {

using Phase = ContextCacheCoordinator::RequestState::Phase;
using Status = ContextCacheCoordinatorStatus;

namespace {

std::string str(int64_t v) { return std::to_string(v); }

[[noreturn]] void contract(char const* op, std::string const& why) {
    throw ContractError(std::string("ContextCacheCoordinator::") + op + ": " + why);
}

int32_t ceilDiv(int64_t a, int32_t b) { return static_cast<int32_t>((a + b - 1) / b); }

char const* phaseName(Phase phase) {
    switch (phase) {
        case Phase::kAdmitted: return "admitted";
        case Phase::kPrefillPrepared: return "prefill prepared";
        case Phase::kPrefillCaptured: return "prefill captures enqueued";
        case Phase::kExecuting: return "executing";
        case Phase::kCompactionPending: return "compaction pending";
        case Phase::kFinishing: return "finishing";
        case Phase::kQuarantined: return "quarantined";
        case Phase::kFinished: return "finished";
    }
    return "unknown";
}

void requirePhase(char const* op, ContextCacheCoordinator::RequestState const& s, std::initializer_list<Phase> ok) {
    for (Phase p : ok)
        if (s.phase == p) return;
    contract(op, std::string("not allowed while the request is ") + phaseName(s.phase));
}

ContextCachePhysicalResources const& validated(ContextCacheConfig const& config,
                                               ContextCacheDeploymentProfile const& profile,
                                               ContextCachePhysicalResources const& r) {
    char const* op = "ContextCacheCoordinator";
    if (config.maxBatch <= 0) contract(op, "maxBatch must be positive (" + str(config.maxBatch) + ")");
    if (config.maxRecords < 0) contract(op, "maxRecords must be non-negative (" + str(config.maxRecords) + ")");
    if (config.pageSize < 0) contract(op, "pageSize must be non-negative (" + str(config.pageSize) + ")");
    if (profile.baseStateKind > ContextCacheModelStateKind::kHybrid) contract(op, "unknown model state kind");
    if (profile.isSpeculative() && profile.isPureRecurrent())
        contract(op, "speculative reuse on a pure recurrent model is not supported (Appendix C)");
    if (profile.isSpeculative() && profile.isHybrid() &&
        (!profile.ownsPagedSpecState() || profile.specReuseContract->futureDependencyTokens != 1))
        contract(op,
                 "a speculative hybrid deployment must be Hybrid+MTP: an MTP head with its own draft pool and a "
                 "one-token future dependency (EAGLE, DFlash, JetSpec, DSpark and shared-KV drafters on hybrid "
                 "models are not supported, Appendix C)");
    if (profile.specReuseContract && profile.specReuseContract->futureDependencyTokens < 0)
        contract(op, "spec contract futureDependencyTokens is negative");
    device::DeviceBackend* backend = nullptr;
    auto sameBackend = [&](device::DeviceBackend& b, char const* what) {
        if (!backend) backend = &b;
        else if (backend != &b) contract(op, std::string(what) + " lives on another backend");
    };
    auto checkTriple = [&](device::KvPagePool* pool, device::KvPageTable* table, device::KvLengths* lengths,
                           char const* which) {
        if (!pool || !table || !lengths)
            contract(op, std::string("the deployment needs a ") + which + " pool, page table and KV lengths");
        sameBackend(pool->backend(), which);
        sameBackend(table->backend(), which);
        sameBackend(lengths->backend(), which);
        if (table->numPages() != pool->numPages())
            contract(op, std::string(which) + " page table addresses " + str(table->numPages()) +
                             " pages, the pool has " + str(pool->numPages()));
        if (table->mode() != device::KvPageTable::Mode::kDense)
            contract(op, std::string(which) + " page table must be dense");
        if (table->maxBatch() < config.maxBatch || lengths->maxBatch() < config.maxBatch)
            contract(op, std::string(which) + " page table and lengths must cover maxBatch " + str(config.maxBatch));
        // The coordinator binds rows [0, maxBatch) itself: they must start empty (its invariant for free slots).
        for (int32_t slot = 0; slot < config.maxBatch; ++slot)
            if (table->hostRow(slot)[0] != -1)
                contract(op, std::string(which) + " page table row of slot " + str(slot) +
                                 " is not empty (the coordinator binds its rows itself)");
    };
    if (profile.hasAttention()) {
        checkTriple(r.basePool, r.basePageTable, r.baseLengths, "base");
        if (config.pageSize != 0 && config.pageSize != r.basePool->pageSize())
            contract(op, "pageSize " + str(config.pageSize) + " differs from the base pool's " +
                             str(r.basePool->pageSize()));
    } else if (r.basePool || r.basePageTable || r.baseLengths) {
        contract(op, "a pure recurrent deployment has no base pool");
    } else if (config.pageSize <= 0) {
        contract(op, "a pure recurrent deployment needs config.pageSize");
    }
    if (profile.ownsPagedSpecState()) {
        checkTriple(r.draftPool, r.draftPageTable, r.draftLengths, "draft");
        if (r.draftPool->pageSize() != r.basePool->pageSize())
            contract(op, "the draft pool's page size differs from the base pool's");
    } else if (r.draftPool || r.draftPageTable || r.draftLengths) {
        contract(op, "draft resources given but the profile has no paged spec state");
    }
    if (profile.usesCheckpointReuse()) {
        if (!r.residentState || !r.snapshots)
            contract(op, "checkpoint reuse needs resident state and snapshot storage");
        sameBackend(r.residentState->backend(), "resident state");
        if (r.residentState->maxBatch() < config.maxBatch)
            contract(op, "resident state must cover maxBatch " + str(config.maxBatch));
        // The storage restores into its own state and reads its own pools' pages: they must be the ones this
        // coordinator binds, zeroes and compacts.
        if (r.snapshots->state() != r.residentState)
            contract(op, "the snapshot storage was built over another resident state");
        if (r.snapshots->basePool() != r.basePool)
            contract(op, std::string("the snapshot storage was built over ") +
                             (r.basePool ? "another base pool" : "a base pool this deployment does not have"));
        if (profile.isHybridMtp()) {
            // The partial slot carries the draft pool's page with the base one, the recurrent slot the hidden row.
            if (r.snapshots->draftPool() != r.draftPool)
                contract(op, "a Hybrid+MTP deployment needs snapshot storage built over its draft pool");
            if (!r.snapshots->boundaryHidden())
                contract(op, "a Hybrid+MTP deployment needs snapshot storage with the boundary hidden row");
        } else if (r.snapshots->draftPool() != nullptr) {
            contract(op, "the snapshot storage holds draft partial KV");
        }
        if (r.snapshots->recurrentSlots() <= 0) contract(op, "checkpoint reuse needs at least one recurrent slot");
        if (profile.isHybrid() && r.snapshots->partialKvSlots() <= 0)
            contract(op, "a hybrid model needs at least one partial-KV slot");
        if (profile.isHybrid() && r.basePool && r.basePool->pageSize() != config.pageSize && config.pageSize != 0)
            contract(op, "page size mismatch");
    } else if (r.residentState || r.snapshots) {
        contract(op, "snapshot resources given to an attention-only deployment");
    }
    return r;
}

ResourceDemand capacitiesOf(ContextCacheDeploymentProfile const& profile, ContextCachePhysicalResources const& r) {
    ResourceDemand d;
    if (profile.hasAttention()) d.baseKvPages = r.basePool->numPages();
    if (profile.ownsPagedSpecState()) d.draftKvPages = r.draftPool->numPages();
    if (profile.usesCheckpointReuse()) {
        d.recurrentSnapshotSlots = r.snapshots->recurrentSlots();
        if (profile.isHybrid()) d.partialKvSnapshotSlots = r.snapshots->partialKvSlots();
    }
    return d;
}

int32_t pageSizeOf(ContextCacheConfig const& config, ContextCacheDeploymentProfile const& profile,
                   ContextCachePhysicalResources const& r) {
    if (profile.hasAttention() && r.basePool) return r.basePool->pageSize();
    return config.pageSize;
}

}  // namespace

char const* toString(ContextCacheModelStateKind kind) noexcept {
    switch (kind) {
        case ContextCacheModelStateKind::kAttentionOnly: return "attention-only";
        case ContextCacheModelStateKind::kPureRecurrent: return "pure recurrent";
        case ContextCacheModelStateKind::kHybrid: return "hybrid";
    }
    return "unknown";
}

size_t scalarSize(ScalarType type) noexcept {
    switch (type) {
        case ScalarType::kFp16: return 2;
        case ScalarType::kBf16: return 2;
        case ScalarType::kFp8E4m3: return 1;
        case ScalarType::kFp32: return 4;
        case ScalarType::kInt32: return 4;
        case ScalarType::kInt64: return 8;
        case ScalarType::kUInt8: return 1;
    }
    return 0;
}

// ---- RequestHandle ----------------------------------------------------------------------------------------

ContextCacheCoordinator::RequestHandle::RequestHandle() noexcept = default;
ContextCacheCoordinator::RequestHandle::RequestHandle(std::unique_ptr<RequestState> state) noexcept
    : state_(std::move(state)) {}
ContextCacheCoordinator::RequestHandle::~RequestHandle() { reset(); }
ContextCacheCoordinator::RequestHandle::RequestHandle(RequestHandle&& other) noexcept
    : state_(std::move(other.state_)) {}
ContextCacheCoordinator::RequestHandle& ContextCacheCoordinator::RequestHandle::operator=(
    RequestHandle&& other) noexcept {
    if (this != &other) {
        reset();
        state_ = std::move(other.state_);
    }
    return *this;
}

void ContextCacheCoordinator::RequestHandle::reset() noexcept {
    if (!state_) return;
    if (state_->owner) state_->owner->abandon(std::move(state_));
    state_.reset();
}

bool ContextCacheCoordinator::RequestHandle::valid() const noexcept {
    return state_ && state_->owner && state_->phase != Phase::kFinished && state_->phase != Phase::kQuarantined;
}
int32_t ContextCacheCoordinator::RequestHandle::batchSize() const noexcept {
    return state_ ? static_cast<int32_t>(state_->sequences.size()) : 0;
}
std::vector<int32_t> const& ContextCacheCoordinator::RequestHandle::prefillStarts() const noexcept {
    static std::vector<int32_t> const empty;
    return state_ ? state_->prefillStarts : empty;
}
bool ContextCacheCoordinator::RequestHandle::speculative() const noexcept { return state_ && state_->speculative; }
bool ContextCacheCoordinator::RequestHandle::hasPendingJoiner() const noexcept {
    return state_ && state_->joiner.has_value();
}

ContextCacheSequenceInfo ContextCacheCoordinator::RequestHandle::sequence(int32_t row) const {
    if (!state_) throw ContractError("RequestHandle::sequence: empty handle");
    SequenceState const* s = nullptr;
    if (row >= 0 && row < static_cast<int32_t>(state_->sequences.size())) s = &state_->sequences[row];
    else if (state_->joiner && row == static_cast<int32_t>(state_->sequences.size())) s = &*state_->joiner;
    if (!s) throw ContractError("RequestHandle::sequence: row " + str(row) + " is out of range");
    ContextCacheSequenceInfo info;
    info.resident = s->resident;
    info.inputLength = s->inputLength;
    info.tokenCount = static_cast<int32_t>(s->tokens.size());
    info.committedLength = s->committed;
    info.commonLength = s->common;
    info.matchedLength = s->matched;
    info.reuseLength = s->reuse;
    info.planKind = s->kind;
    info.bypass = s->bypass;
    info.forcedCold = s->forcedCold;
    info.publishedFullBlockCount = s->published;
    if (s->lease.valid()) {
        info.basePages = s->lease.basePages();
        info.draftPages = s->lease.draftPages();
    }
    return info;
}

// ---- construction ------------------------------------------------------------------------------------------

ContextCacheCoordinator::ContextCacheCoordinator(ContextCacheConfig const& config,
                                                 ContextCacheDeploymentProfile const& profile,
                                                 ContextCachePhysicalResources const& resources,
                                                 StreamSynchronizer synchronizer)
    : config_(config),
      profile_(profile),
      resources_(validated(config, profile, resources)),
      synchronizer_(std::move(synchronizer)),
      pageSize_(pageSizeOf(config, profile, resources)),
      hasher_(config.hashAlgorithm, config.hashKey),
      manager_(pageSize_, capacitiesOf(profile, resources), config.maxRecords, config.evictionPolicy),
      residentEpochs_(static_cast<size_t>(config.maxBatch), 0),
      lastEpochs_(static_cast<size_t>(config.maxBatch), 0) {
    if (resources_.basePool) backend_ = &resources_.basePool->backend();
    else if (resources_.residentState) backend_ = &resources_.residentState->backend();
    if (!synchronizer_) {
        device::DeviceBackend* backend = backend_;
        synchronizer_ = [backend](StreamHandle) {
            try {
                if (backend) backend->synchronize();
                return true;
            } catch (...) {
                return false;
            }
        };
    }
}

ContextCacheCoordinator::~ContextCacheCoordinator() {
    // Requests must be finished first; any still alive are synchronised (best effort), released and detached so
    // their handles never reach freed memory. Their page-table rows are cleared: the tables outlive this
    // coordinator (another one may be built over them) and must not keep listing pages nobody owns.
    auto clear = [this](RequestState& s) noexcept {
        unbind(s);
        s.sequences.clear();
        s.joiner.reset();
    };
    for (RequestState* s = liveList_; s;) {
        RequestState* next = s->next;
        if (s->devicePending) (void)syncStream(s->stream);
        clear(*s);
        s->owner = nullptr;
        s->prev = s->next = nullptr;
        s = next;
    }
    // Handles quarantined in place hold nothing (their sequences moved to quarantine_) but still name this
    // coordinator: detach them too.
    for (RequestState* s = quarantinedHandles_; s;) {
        RequestState* next = s->next;
        s->owner = nullptr;
        s->prev = s->next = nullptr;
        s = next;
    }
    quarantinedHandles_ = nullptr;
    for (auto& q : quarantine_) {
        (void)syncStream(q->stream);
        clear(*q);
    }
    quarantine_.clear();
    try {
        uploadTables();
    } catch (...) {
        // A destructor reports nothing; the host tables, which are the truth, are clear.
    }
}

bool ContextCacheCoordinator::supportsLiveSequenceAdmission() const noexcept {
    return profile_.baseStateKind == ContextCacheModelStateKind::kAttentionOnly && !profile_.isSpeculative();
}

// ---- helpers ----------------------------------------------------------------------------------------------

ContextCacheCoordinator::RequestState& ContextCacheCoordinator::live(RequestHandle& request, char const* op) {
    RequestState* s = request.state_.get();
    if (!s) contract(op, "empty request handle");
    if (s->owner != this)
        contract(op, s->owner ? "the request belongs to another coordinator" : "the request is detached");
    // The request's device work runs on its stream: switch the backend when it is on another (the switch orders
    // the old stream's work first; the backend stays on the request's stream afterwards).
    if (s->stream && backend_ && backend_->stream() != s->stream) backend_->setStream(s->stream);
    return *s;
}

bool ContextCacheCoordinator::syncStream(StreamHandle stream) noexcept {
    try {
        return synchronizer_(stream);
    } catch (...) {
        return false;  // a synchroniser that throws failed
    }
}

bool ContextCacheCoordinator::synchronize(RequestState& state) noexcept {
    bool const ok = syncStream(state.stream);
    if (ok) state.devicePending = false;
    return ok;
}

// Gives back what the request's sequences hold outside their leases: page-table rows (cleared, not uploaded),
// resident slots, producer snapshot reservations. The leases go with the sequences themselves.
void ContextCacheCoordinator::unbind(RequestState& s) noexcept {
    for (SequenceState& seq : s.sequences) {
        clearRows(seq.resident.slot);
        residentEpochs_[static_cast<size_t>(seq.resident.slot)] = 0;
        if (seq.staged) manager_.retireHybridSnapshotReservation(seq.lease, seq.staged->reservation);
    }
    if (s.joiner) {
        clearRows(s.joiner->resident.slot);
        residentEpochs_[static_cast<size_t>(s.joiner->resident.slot)] = 0;
    }
}

namespace {

void unlink(ContextCacheCoordinator::RequestState*& head, ContextCacheCoordinator::RequestState& s) {
    if (s.prev) s.prev->next = s.next;
    else if (head == &s) head = s.next;
    if (s.next) s.next->prev = s.prev;
    s.prev = s.next = nullptr;
}

}  // namespace

namespace {
// Extend the full-block hash chain over the first `length` tokens.
void extendHashes(SequenceState& s, BlockHasher const& hasher, int32_t pageSize, int32_t length) {
    size_t const want = static_cast<size_t>(length / pageSize);
    while (s.hashes.size() < want) {
        size_t const b = s.hashes.size();
        BlockHash const parent = b == 0 ? kChainRoot : s.hashes[b - 1];
        size_t const begin = b * static_cast<size_t>(pageSize);
        Hash128 const* media = s.media.empty() ? nullptr : s.media.data() + begin;
        s.hashes.push_back(
            hasher.hashBlock(parent, s.tokens.data() + begin, static_cast<size_t>(pageSize), s.extras, media));
    }
}

BlockHash exactDigest(SequenceState& s, BlockHasher const& hasher, int32_t pageSize, int32_t length) {
    extendHashes(s, hasher, pageSize, length);
    int32_t const full = length / pageSize;
    BlockHash const parent = full == 0 ? kChainRoot : s.hashes[static_cast<size_t>(full - 1)];
    int32_t const tail = length % pageSize;
    if (tail == 0) return parent;
    size_t const begin = static_cast<size_t>(full) * static_cast<size_t>(pageSize);
    Hash128 const* media = s.media.empty() ? nullptr : s.media.data() + begin;
    return hasher.hashBlock(parent, s.tokens.data() + begin, static_cast<size_t>(tail), s.extras, media);
}

void appendTokens(SequenceState& s, int32_t const* tokens, int32_t count) {
    s.tokens.insert(s.tokens.end(), tokens, tokens + count);
    if (!s.media.empty()) s.media.resize(s.tokens.size(), Hash128{});
}
}  // namespace

// ---- admission --------------------------------------------------------------------------------------------

namespace {

struct AdmissionOutcome {
    bool ok = false;
    bool capacity = false;  // false with !ok: page-table overflow
    std::string failure;
};

}  // namespace

// Validates one sequence admission (throws ContractError); returns the effective lookup policy.
static ContextCacheLookupPolicy validateSequence(char const* op, ContextCacheSequenceAdmission const& a, size_t index,
                                                 int32_t maxBatch, ContextCacheLookupPolicy batchPolicy) {
    std::string const where = "sequences[" + str(static_cast<int64_t>(index)) + "]";
    if (a.tokenIds.empty()) contract(op, where + " has no tokens");
    if (a.tokenIds.size() > static_cast<size_t>(INT32_MAX / 2)) contract(op, where + " is too long");
    if (a.resident.slot < 0 || a.resident.slot >= maxBatch)
        contract(op, where + " resident slot " + str(a.resident.slot) + " is outside [0, " + str(maxBatch) + ")");
    if (a.resident.epoch == 0) contract(op, where + " resident epoch 0 is invalid");
    if (!a.perPositionMediaHash.empty() && a.perPositionMediaHash.size() != a.tokenIds.size())
        contract(op, where + " perPositionMediaHash has " + str(static_cast<int64_t>(a.perPositionMediaHash.size())) +
                         " entries for " + str(static_cast<int64_t>(a.tokenIds.size())) + " tokens");
    ContextCacheLookupPolicy const policy = a.lookupPolicy.value_or(batchPolicy);
    if (policy != ContextCacheLookupPolicy::kUseCache && policy != ContextCacheLookupPolicy::kBypass)
        contract(op, where + " has an unknown lookup policy");
    return policy;
}

void validateResident(char const* op, std::vector<uint64_t> const& live, std::vector<uint64_t> const& last,
                      ResidentRef r, std::string const& where) {
    size_t const slot = static_cast<size_t>(r.slot);
    if (live[slot] != 0)
        contract(op, where + " resident slot " + str(r.slot) + " is held by a live sequence (epoch " +
                         std::to_string(live[slot]) + ")");
    if (r.epoch <= last[slot])
        contract(op, where + " resident epoch " + std::to_string(r.epoch) + " of slot " + str(r.slot) +
                         " is stale (last admitted epoch " + std::to_string(last[slot]) + ")");
}

ContextCacheCoordinator::BeginRequestResult ContextCacheCoordinator::beginRequest(
    ContextCacheBatchAdmission const& admission, DecodingKvHeadroom const& headroom, StreamHandle stream) {
    char const* op = "beginRequest";
    BeginRequestResult result;
    // 1. Validate everything before anything is held.
    if (admission.sequences.empty()) contract(op, "a request needs at least one sequence");
    if (admission.sequences.size() > static_cast<size_t>(config_.maxBatch))
        contract(op, str(static_cast<int64_t>(admission.sequences.size())) + " sequences exceed maxBatch " +
                         str(config_.maxBatch));
    if (admission.tokenStateContract > DecodingTokenStateContract::kFullyCommitted)
        contract(op, "unknown token-state contract");
    if (admission.commitPolicy > ContextCacheCommitPolicy::kPrefillStateOnly) contract(op, "unknown commit policy");
    if (admission.lookupPolicy > ContextCacheLookupPolicy::kBypass) contract(op, "unknown lookup policy");
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) contract(op, "headroom is negative");
    if (admission.speculativeRequest && !profile_.isSpeculative())
        contract(op, "a speculative request on a deployment without a spec contract");
    if (profile_.isHybridMtp()) {
        // Appendix C: Hybrid+MTP reuse serves text-only batches of one under the prefill-state-only commit policy
        // (the MTP draft KV lags the base by the last accepted span, so no decode-end state is publishable).
        if (!admission.speculativeRequest) contract(op, "a Hybrid+MTP deployment serves speculative requests only");
        if (admission.sequences.size() != 1)
            contract(op, "Hybrid+MTP reuse serves a batch of one sequence, got " +
                             str(static_cast<int64_t>(admission.sequences.size())));
        if (admission.commitPolicy != ContextCacheCommitPolicy::kPrefillStateOnly)
            contract(op, "Hybrid+MTP reuse needs the prefill-state-only commit policy");
        if (!admission.sequences[0].perPositionMediaHash.empty())
            contract(op, "Hybrid+MTP reuse serves text-only requests (the sequence carries media)");
    }
    std::vector<ContextCacheLookupPolicy> policies;
    policies.reserve(admission.sequences.size());
    bool anyMedia = false;
    for (size_t i = 0; i < admission.sequences.size(); ++i) {
        ContextCacheSequenceAdmission const& a = admission.sequences[i];
        policies.push_back(validateSequence(op, a, i, config_.maxBatch, admission.lookupPolicy));
        validateResident(op, residentEpochs_, lastEpochs_, a.resident,
                         "sequences[" + str(static_cast<int64_t>(i)) + "]");
        for (size_t j = 0; j < i; ++j)
            if (admission.sequences[j].resident.slot == a.resident.slot)
                contract(op, "sequences[" + str(static_cast<int64_t>(j)) + "] and [" + str(static_cast<int64_t>(i)) +
                                 "] share resident slot " + str(a.resident.slot));
        anyMedia = anyMedia || !a.perPositionMediaHash.empty();
    }
    if (poisoned_) {
        result.status = Status::kPoisoned;
        result.failure = lastFailure_ = "beginRequest: the coordinator is poisoned until shutdown() succeeds";
        return result;
    }
    if (activeRequests_ > 0) {
        result.status = Status::kRequestFailed;
        result.failure = lastFailure_ =
            "beginRequest: another request is active (one request at a time; in-flight "
            "joiners use admitSequence)";
        return result;
    }

    auto state = std::make_unique<RequestState>();
    state->speculative = admission.speculativeRequest;
    state->pagedSpec = admission.speculativeRequest && profile_.ownsPagedSpecState();
    state->contract = admission.tokenStateContract;
    state->commit = admission.commitPolicy;
    state->stream = stream;
    // Speculative decoding with media is bypassed batch-wide (Appendix C).
    bool const forceBypass = admission.speculativeRequest && anyMedia;

    // 2. One lease per sequence; any failure releases what was taken (the states' destructors).
    for (size_t i = 0; i < admission.sequences.size(); ++i) {
        ContextCacheLookupPolicy const policy = forceBypass ? ContextCacheLookupPolicy::kBypass : policies[i];
        SequenceState seq;
        std::string failure;
        bool capacity = false;
        if (!acquireSequence(admission.sequences[i], policy, headroom, state->pagedSpec, seq, failure, capacity)) {
            result.status = Status::kRequestFailed;
            result.failure = lastFailure_ =
                std::string("beginRequest: sequences[") + str(static_cast<int64_t>(i)) + "]: " + failure;
            return result;
        }
        state->sequences.push_back(std::move(seq));
    }

    // 3. Commit: claim resident slots, count, link.
    for (SequenceState& seq : state->sequences) {
        residentEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
        lastEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
        state->prefillStarts.push_back(seq.reuse);
        countAdmission(seq);
    }
    state->owner = this;
    state->next = liveList_;
    if (liveList_) liveList_->prev = state.get();
    liveList_ = state.get();
    ++activeRequests_;
    result.prefillStarts = state->prefillStarts;
    result.request.emplace(RequestHandle(std::move(state)));
    return result;
}

bool ContextCacheCoordinator::acquireSequence(ContextCacheSequenceAdmission const& a, ContextCacheLookupPolicy policy,
                                              DecodingKvHeadroom const& headroom, bool pagedSpec, SequenceState& seq,
                                              std::string& failure, bool& capacity) {
    auto const started = std::chrono::steady_clock::now();
    int32_t const n = static_cast<int32_t>(a.tokenIds.size());
    seq.resident = a.resident;
    seq.tokens = a.tokenIds;
    seq.media = a.perPositionMediaHash;
    bool hasMedia = false;
    for (Hash128 const& h : seq.media) hasMedia = hasMedia || h != Hash128{};
    if (!hasMedia) seq.media.clear();
    seq.extras = a.keyExtras;
    seq.inputLength = n;
    capacity = false;

    // Page-table coverage of the first step: n + headroom.
    PageCoverage coverage;
    if (profile_.hasAttention()) {
        coverage.basePages = ceilDiv(static_cast<int64_t>(n) + headroom.baseExtraTokens, pageSize_);
        if (coverage.basePages > resources_.basePageTable->maxPagesPerSeq()) {
            failure = "needs " + str(coverage.basePages) + " pages for " + str(n) +
                      " tokens + headroom, the page table "
                      "holds " +
                      str(resources_.basePageTable->maxPagesPerSeq()) + " per sequence";
            return false;
        }
    }
    if (pagedSpec) {
        coverage.draftPages = ceilDiv(static_cast<int64_t>(n) + headroom.draftExtraTokens, pageSize_);
        if (coverage.draftPages > resources_.draftPageTable->maxPagesPerSeq()) {
            failure = "needs " + str(coverage.draftPages) + " draft pages, the draft page table holds " +
                      str(resources_.draftPageTable->maxPagesPerSeq()) + " per sequence";
            return false;
        }
    }

    extendHashes(seq, hasher_, pageSize_, n);
    auto acquire = [&](ContextCacheLookupPolicy p, size_t hashCount) {
        if (profile_.usesCheckpointReuse()) {
            std::vector<HybridCheckpointCandidate> candidates;
            if (p == ContextCacheLookupPolicy::kUseCache) {
                for (int32_t length : manager_.hybridCandidateLengths(n, seq.hashes))
                    candidates.push_back({length, exactDigest(seq, hasher_, pageSize_, length)});
            }
            if (profile_.isHybridMtp())
                return manager_.acquireHybridMtp(candidates, seq.hashes.data(), hashCount, n, p, coverage);
            return manager_.acquireHybrid(candidates, seq.hashes.data(), hashCount, n, profile_.hasAttention(), p,
                                          coverage);
        }
        if (pagedSpec) return manager_.acquireSpec(seq.hashes.data(), hashCount, n, p, coverage);
        return manager_.acquireVanilla(seq.hashes.data(), hashCount, n, p, coverage);
    };
    AcquireResult r = acquire(policy, seq.hashes.size());
    if (r.status == AcquireStatus::kInsufficientCapacity && policy == ContextCacheLookupPolicy::kUseCache &&
        (r.plan.reuseTokenLength > 0 || r.plan.kind == ReusePlanKind::kFullInputRewind)) {
        // Forced cold retry: the hit's pins cost capacity a cold plan does not need.
        r = acquire(ContextCacheLookupPolicy::kBypass, seq.hashes.size());
        seq.forcedCold = true;
    }
    // Media-boundary trimming (vanilla): a reuse boundary inside a media run would resume prefill mid-item, so
    // reuse stops at the last page boundary before the run and the whole item is recomputed.
    if (r.status == AcquireStatus::kAcquired && !seq.media.empty() && !profile_.usesCheckpointReuse() && !pagedSpec) {
        auto splits = [&](int32_t reuse) {
            return reuse > 0 && reuse < n && seq.media[static_cast<size_t>(reuse - 1)] != Hash128{} &&
                   seq.media[static_cast<size_t>(reuse)] != Hash128{};
        };
        while (r.status == AcquireStatus::kAcquired && splits(r.plan.reuseTokenLength)) {
            size_t const keep = static_cast<size_t>(r.plan.reuseTokenLength / pageSize_) -
                                (r.plan.reuseTokenLength % pageSize_ == 0 ? 1 : 0);
            r.lease->release();
            r = acquire(seq.forcedCold ? ContextCacheLookupPolicy::kBypass : policy, keep);
            ++counters_.mediaBoundaryTrims;
        }
    }
    counters_.planningNanoseconds += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
    if (r.status != AcquireStatus::kAcquired) {
        capacity = true;
        failure = "insufficient capacity for " + str(n) + " tokens";
        return false;
    }
    seq.lease = std::move(*r.lease);
    seq.bypass = policy == ContextCacheLookupPolicy::kBypass || seq.forcedCold;
    seq.matched = r.plan.matchedTokenLength;
    seq.reuse = r.plan.reuseTokenLength;
    seq.kind = r.plan.kind;
    seq.hadReplay = r.plan.specReplayMode == SpecReplayMode::kFullPage;
    seq.mediaAware = hasMedia;
    return true;
}

void ContextCacheCoordinator::countAdmission(SequenceState const& seq) {
    ++counters_.admittedSequences;
    if (seq.matched > 0) ++counters_.hitSequences;
    if (seq.mediaAware) ++counters_.mediaAwareSequences;
    if (seq.bypass) ++counters_.lookupBypassSequences;
    if (seq.forcedCold) ++counters_.forcedColdSequences;
    switch (seq.kind) {
        case ReusePlanKind::kStandard: ++counters_.standardPlans; break;
        case ReusePlanKind::kNoReusablePrefix: ++counters_.noReusablePrefixPlans; break;
        case ReusePlanKind::kFullInputRewind: ++counters_.fullInputRewindPlans; break;
    }
    counters_.matchedTokens += static_cast<uint64_t>(seq.matched);
    counters_.reusedTokens += static_cast<uint64_t>(seq.reuse);
    if (seq.hadReplay) ++counters_.specFullPageReplays;
}

// ---- prefill ----------------------------------------------------------------------------------------------

void ContextCacheCoordinator::bindRows(SequenceState const& seq) {
    int32_t const slot = seq.resident.slot;
    if (profile_.hasAttention()) {
        auto const& pages = seq.lease.basePages();
        resources_.basePageTable->setRow(slot, pages.data(), static_cast<int32_t>(pages.size()));
    }
    if (profile_.ownsPagedSpecState()) {
        auto const& pages = seq.lease.draftPages();
        resources_.draftPageTable->setRow(slot, pages.data(), static_cast<int32_t>(pages.size()));
    }
}

void ContextCacheCoordinator::clearRows(int32_t slot) {
    if (profile_.hasAttention()) resources_.basePageTable->clearRow(slot);
    if (profile_.ownsPagedSpecState()) resources_.draftPageTable->clearRow(slot);
}

void ContextCacheCoordinator::uploadTables() {
    if (profile_.hasAttention()) resources_.basePageTable->upload();
    if (profile_.ownsPagedSpecState()) resources_.draftPageTable->upload();
}

void ContextCacheCoordinator::restoreOrZero(SequenceState const& seq) {
    int32_t const slot = seq.resident.slot;
    std::optional<int32_t> const recurrent = seq.lease.recurrentSnapshotSlot();
    if (!recurrent) {
        resources_.residentState->zeroSlot(slot);
        return;
    }
    device::SnapshotTransfer t;
    t.batchSlot = slot;
    t.recurrentSlot = *recurrent;
    if (std::optional<int32_t> partial = seq.lease.partialKvSnapshotSlot()) {
        t.partialKvSlot = *partial;
        if (seq.lease.mode() == ReusePlanMode::kHybridMtp) {
            // The paired page fb = floor((E - 1) / P): base tokens [fb P, E), the draft's one fewer (restored too;
            // the engine recomputes the draft at E - 1 before anything reads it).
            size_t const fb = static_cast<size_t>((seq.reuse - 1) / pageSize_);
            t.basePage = seq.lease.basePages()[fb];
            t.draftPage = seq.lease.draftPages()[fb];
            t.validTokens = seq.reuse - static_cast<int32_t>(fb) * pageSize_;
        } else {
            t.basePage = seq.lease.basePages()[static_cast<size_t>(seq.reuse / pageSize_)];
            t.validTokens = seq.reuse % pageSize_;
        }
    }
    resources_.snapshots->restore(t);
    ++counters_.hybridRestores;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::preparePrefill(RequestHandle& request) {
    char const* op = "preparePrefill";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kAdmitted});
    for (SequenceState const& seq : s.sequences) bindRows(seq);
    uploadTables();
    if (profile_.usesCheckpointReuse())
        for (SequenceState const& seq : s.sequences) restoreOrZero(seq);
    std::vector<int32_t> lengths;
    lengths.reserve(s.sequences.size());
    for (SequenceState const& seq : s.sequences) lengths.push_back(seq.reuse);
    if (profile_.hasAttention()) resources_.baseLengths->set(lengths.data(), static_cast<int32_t>(lengths.size()));
    if (profile_.ownsPagedSpecState()) {
        // Hybrid+MTP: the draft KV of a checkpoint at E ends at E - 1 (its boundary position is recomputed).
        if (profile_.isHybridMtp())
            for (int32_t& length : lengths) length = std::max(0, length - 1);
        resources_.draftLengths->set(lengths.data(), static_cast<int32_t>(lengths.size()));
    }
    s.devicePending = true;
    s.phase = Phase::kPrefillPrepared;
    return Status::kOk;
}

bool ContextCacheCoordinator::stageCapture(SequenceState& seq, int32_t length) {
    bool const partial = profile_.hasAttention() && length % pageSize_ != 0;
    std::optional<HybridSnapshotReservation> reservation = manager_.reserveHybridSnapshots(seq.lease, partial);
    if (!reservation) {
        ++counters_.hybridSnapshotPressureSkips;
        return false;
    }
    device::SnapshotTransfer t;
    t.batchSlot = seq.resident.slot;
    t.recurrentSlot = reservation->recurrentSnapshotSlot;
    if (reservation->partialKvSnapshotSlot) {
        t.partialKvSlot = *reservation->partialKvSnapshotSlot;
        t.basePage = seq.lease.basePages()[static_cast<size_t>(length / pageSize_)];
        t.validTokens = length % pageSize_;
    }
    try {
        resources_.snapshots->capture(t);
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, *reservation);
        throw;
    }
    seq.staged = StagedCheckpoint{*reservation, length, exactDigest(seq, hasher_, pageSize_, length)};
    return true;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::enqueuePrefillCaptures(RequestHandle& request) {
    char const* op = "enqueuePrefillCaptures";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kPrefillPrepared});
    // Hybrid+MTP captures only at its endpoint (publishHybridMtpEndpoint).
    if (profile_.usesCheckpointReuse() && !profile_.isHybridMtp()) {
        for (SequenceState& seq : s.sequences)
            if (!seq.bypass) stageCapture(seq, seq.inputLength);
        s.devicePending = true;
    }
    s.phase = Phase::kPrefillCaptured;
    return Status::kOk;
}

// Validates a prefill advance (throws) for a sequence whose committed length must become its input length.
static void checkPrefillAdvance(char const* op, DecodingTokenStateContract contract_, SequenceState const& seq,
                                ContextCacheSequenceAdvance const& a, std::string const& where) {
    if (contract_ == DecodingTokenStateContract::kCommittedPlusLookahead) {
        if (a.acceptedTokenCount != 1 || !a.acceptedTokenIds)
            contract(op, where +
                             " must carry exactly one sampled lookahead token (committed+lookahead contract), got " +
                             str(a.acceptedTokenCount));
    } else if (a.acceptedTokenCount != 0) {
        contract(op,
                 where + " must carry no token under the fully-committed contract, got " + str(a.acceptedTokenCount));
    }
    if (a.committedStateLength != seq.inputLength)
        contract(op, where + " committed length " + str(a.committedStateLength) + " must equal the input length " +
                         str(seq.inputLength));
}

void ContextCacheCoordinator::publishBase(SequenceState& seq, int32_t length) {
    int32_t const blocks = length / pageSize_;
    if (seq.bypass || blocks <= seq.published || blocks == 0) return;
    extendHashes(seq, hasher_, pageSize_, length);
    ++counters_.publicationAttempts;
    PublishResult const r = manager_.publish(seq.lease, seq.hashes.data(), static_cast<size_t>(blocks), length,
                                             {seq.tokens.data(), seq.tokens.size()});
    if (r.status == PublishStatus::kPublished) ++counters_.committedPublications;
    else ++counters_.existingPublications;
    ++counters_.publishedEndpoints;
    if (seq.lease.mode() == ReusePlanMode::kSpec) ++counters_.specPairPublications;
    seq.published = blocks;
}

void ContextCacheCoordinator::publishStaged(SequenceState& seq) {
    if (!seq.staged) return;
    StagedCheckpoint const staged = *seq.staged;
    seq.staged.reset();
    extendHashes(seq, hasher_, pageSize_, staged.length);
    size_t const blocks = static_cast<size_t>(staged.length / pageSize_);
    ++counters_.publicationAttempts;
    try {
        PublishResult const r = manager_.publishHybrid(seq.lease, seq.hashes.data(), blocks,
                                                       HybridCheckpointKey{staged.digest, staged.length},
                                                       staged.reservation, {seq.tokens.data(), seq.tokens.size()});
        if (r.status == PublishStatus::kPublished) ++counters_.committedPublications;
        else ++counters_.existingPublications;
        ++counters_.publishedEndpoints;
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
        throw;
    }
    manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
}

void ContextCacheCoordinator::publishPrefillEnd(RequestState& s, SequenceState& seq) {
    if (profile_.usesCheckpointReuse()) {
        manager_.releaseRestoredHybridSnapshots(seq.lease);
        publishStaged(seq);
    } else if (seq.lease.mode() == ReusePlanMode::kSpec) {
        if (!seq.bypass) seq.frozenEndpoint = seq.committed;
    } else {
        publishBase(seq, seq.committed);
    }
    (void)s;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::finalizePrefillPublication(
    RequestHandle& request, std::vector<ContextCacheSequenceAdvance> const& advances,
    std::vector<int32_t> const* commonStateLengths) {
    char const* op = "finalizePrefillPublication";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kPrefillPrepared, Phase::kPrefillCaptured});
    if (advances.size() != s.sequences.size())
        contract(op, str(static_cast<int64_t>(advances.size())) + " advances for a batch of " +
                         str(static_cast<int64_t>(s.sequences.size())));
    if (s.pagedSpec && !commonStateLengths)
        contract(op, "a speculative request needs the common materialized state lengths");
    if (commonStateLengths && commonStateLengths->size() != s.sequences.size())
        contract(op, "commonStateLengths has " + str(static_cast<int64_t>(commonStateLengths->size())) + " entries");
    for (size_t i = 0; i < advances.size(); ++i) {
        std::string const where = "advances[" + str(static_cast<int64_t>(i)) + "]";
        checkPrefillAdvance(op, s.contract, s.sequences[i], advances[i], where);
        if (commonStateLengths) {
            int32_t const common = (*commonStateLengths)[i];
            if (s.pagedSpec ? common != advances[i].committedStateLength
                            : (common < 0 || common > advances[i].committedStateLength))
                contract(op, "commonStateLengths[" + str(static_cast<int64_t>(i)) + "] = " + str(common) +
                                 " must equal the committed length " + str(advances[i].committedStateLength));
        }
    }
    if (s.phase == Phase::kPrefillPrepared && profile_.usesCheckpointReuse())
        contract(op, "a checkpoint deployment must enqueue its prefill captures first");
    for (size_t i = 0; i < advances.size(); ++i) {
        SequenceState& seq = s.sequences[i];
        appendTokens(seq, advances[i].acceptedTokenIds, advances[i].acceptedTokenCount);
        seq.committed = advances[i].committedStateLength;
        seq.common = commonStateLengths ? (*commonStateLengths)[i] : seq.committed;
    }
    for (SequenceState& seq : s.sequences) publishPrefillEnd(s, seq);
    s.phase = Phase::kExecuting;
    return Status::kOk;
}

// ---- Hybrid+MTP endpoint ---------------------------------------------------------------------------------

// The address of row `row` of an fp16 [rows, hiddenSize] tensor on the coordinator's backend (throws).
char* ContextCacheCoordinator::hiddenRowOf(char const* op, TensorView const& tensor, int32_t row) const {
    int32_t const hidden = resources_.residentState->geometry().hiddenSize;
    if (!tensor.data) contract(op, "baseHiddenStates has no data");
    if (tensor.dtype != ScalarType::kFp16) contract(op, "baseHiddenStates must be fp16 (the boundary row's type)");
    if (tensor.shape.size() != 2 || tensor.shape[1] != hidden)
        contract(op, "baseHiddenStates must be [rows, " + str(hidden) + "] (the model's hidden size)");
    if (row < 0 || row >= tensor.shape[0])
        contract(op, "hidden row " + str(row) + " is outside [0, " + str(tensor.shape[0]) + ")");
    bool const onDevice = resources_.residentState->backend().kind() == device::BackendKind::kCuda;
    if (onDevice != (tensor.device >= 0))
        contract(op, std::string("baseHiddenStates must be ") + (onDevice ? "device" : "host") +
                         " memory (the coordinator's backend)");
    return static_cast<char*>(tensor.data) + static_cast<size_t>(row) * static_cast<size_t>(hidden) * 2;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::publishHybridMtpEndpoint(RequestHandle& request, int32_t row,
                                                                                int32_t residentStateLength,
                                                                                TensorView const& baseHiddenStates,
                                                                                int32_t boundaryHiddenRow) {
    char const* op = "publishHybridMtpEndpoint";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    if (!profile_.isHybridMtp())
        contract(op, "the deployment has no Hybrid+MTP reuse (a hybrid profile with an MTP head)");
    requirePhase(op, s, {Phase::kPrefillPrepared, Phase::kPrefillCaptured});
    if (row < 0 || static_cast<size_t>(row) >= s.sequences.size()) contract(op, "row " + str(row) + " is out of range");
    SequenceState& seq = s.sequences[static_cast<size_t>(row)];
    int32_t const E = residentStateLength;
    if (E < 1 || E > seq.inputLength || E < seq.reuse)
        contract(op, "residentStateLength " + str(E) + " must lie in [max(1, prefill start " + str(seq.reuse) +
                         "), input length " + str(seq.inputLength) + "]");
    char* const source = hiddenRowOf(op, baseHiddenStates, boundaryHiddenRow);
    if (seq.bypass) return Status::kOk;  // nothing is published for a bypassed sequence
    device::ResidentState& state = *resources_.residentState;
    std::optional<HybridSnapshotReservation> reservation = manager_.reserveHybridSnapshots(seq.lease, true);
    if (!reservation) {
        ++counters_.hybridSnapshotPressureSkips;
        return Status::kOk;
    }
    int32_t const fb = (E - 1) / pageSize_;
    device::SnapshotTransfer t;
    t.batchSlot = seq.resident.slot;
    t.recurrentSlot = reservation->recurrentSnapshotSlot;
    t.partialKvSlot = reservation->partialKvSnapshotSlot.value_or(-1);
    t.basePage = seq.lease.basePages()[static_cast<size_t>(fb)];
    t.draftPage = seq.lease.draftPages()[static_cast<size_t>(fb)];
    t.validTokens = E - fb * pageSize_;
    try {
        state.backend().copy(state.row(device::StatePart::kBoundaryHidden, 0, seq.resident.slot), source,
                             state.rowBytes(device::StatePart::kBoundaryHidden));
        resources_.snapshots->capture(t);
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, *reservation);
        throw;
    }
    extendHashes(seq, hasher_, pageSize_, E);
    seq.staged = StagedCheckpoint{*reservation, E, exactDigest(seq, hasher_, pageSize_, E)};
    s.devicePending = true;
    ++counters_.hybridCaptureSynchronizations;
    if (!synchronize(s)) return quarantineLive(request, std::string(op) + ": the capture synchronisation failed");
    StagedCheckpoint const staged = *seq.staged;
    seq.staged.reset();
    ++counters_.publicationAttempts;
    try {
        PublishResult const r = manager_.publishHybridMtp(seq.lease, seq.hashes.data(), static_cast<size_t>(fb),
                                                          HybridCheckpointKey{staged.digest, staged.length},
                                                          staged.reservation, {seq.tokens.data(), seq.tokens.size()});
        if (r.status == PublishStatus::kPublished) ++counters_.committedPublications;
        else ++counters_.existingPublications;
        ++counters_.publishedEndpoints;
        ++counters_.specPairPublications;
    } catch (...) {
        manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
        throw;
    }
    manager_.retireHybridSnapshotReservation(seq.lease, staged.reservation);
    return Status::kOk;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::restoreHybridMtpBoundaryHidden(RequestHandle& request,
                                                                                      int32_t row,
                                                                                      TensorView& baseHiddenStates,
                                                                                      int32_t destinationRow) {
    char const* op = "restoreHybridMtpBoundaryHidden";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    if (!profile_.isHybridMtp())
        contract(op, "the deployment has no Hybrid+MTP reuse (a hybrid profile with an MTP head)");
    requirePhase(op, s, {Phase::kPrefillPrepared, Phase::kPrefillCaptured});
    if (row < 0 || static_cast<size_t>(row) >= s.sequences.size()) contract(op, "row " + str(row) + " is out of range");
    SequenceState const& seq = s.sequences[static_cast<size_t>(row)];
    if (seq.reuse == 0) contract(op, "row " + str(row) + " restored no checkpoint (its prefill starts at 0)");
    char* const destination = hiddenRowOf(op, baseHiddenStates, destinationRow);
    device::ResidentState& state = *resources_.residentState;
    state.backend().copy(destination, state.row(device::StatePart::kBoundaryHidden, 0, seq.resident.slot),
                         state.rowBytes(device::StatePart::kBoundaryHidden));
    s.devicePending = true;
    return Status::kOk;
}

// ---- decode -----------------------------------------------------------------------------------------------

ContextCacheCoordinatorStatus ContextCacheCoordinator::failRequest(RequestState& s, std::string why) {
    s.phase = Phase::kFinishing;
    lastFailure_ = std::move(why);
    return Status::kRequestFailed;
}

// The pages that cover `seq` to committed + headroom still needs (base, and draft for a paired lease), and whether
// that coverage fits the page table. One definition for coverRow and canPrepareDecodeStep.
ResourceDemand ContextCacheCoordinator::coverDemand(SequenceState const& seq, DecodingKvHeadroom const& headroom,
                                                    bool& fitsTable) const {
    fitsTable = true;
    ResourceDemand demand;
    if (!profile_.hasAttention()) return demand;
    int32_t const base = ceilDiv(static_cast<int64_t>(seq.committed) + headroom.baseExtraTokens, pageSize_);
    bool const paired = seq.lease.mode() == ReusePlanMode::kSpec || seq.lease.mode() == ReusePlanMode::kHybridMtp;
    int32_t const draft =
        paired ? ceilDiv(static_cast<int64_t>(seq.committed) + headroom.draftExtraTokens, pageSize_) : 0;
    int32_t const haveBase = static_cast<int32_t>(seq.lease.basePages().size());
    int32_t const haveDraft = static_cast<int32_t>(seq.lease.draftPages().size());
    if (base <= haveBase && draft <= haveDraft) return demand;
    if (base > resources_.basePageTable->maxPagesPerSeq() ||
        (draft > 0 && draft > resources_.draftPageTable->maxPagesPerSeq()))
        fitsTable = false;
    demand.baseKvPages = std::max(0, base - haveBase);
    demand.draftKvPages = paired ? std::max(0, draft - haveDraft) : 0;
    return demand;
}

bool ContextCacheCoordinator::coverRow(SequenceState& seq, DecodingKvHeadroom const& headroom, std::string& why) {
    bool fitsTable = true;
    ResourceDemand const demand = coverDemand(seq, headroom, fitsTable);
    if (demand.isZero()) return true;
    int32_t const base = static_cast<int32_t>(seq.lease.basePages().size()) + demand.baseKvPages;
    if (!fitsTable) {
        why = "resident slot " + str(seq.resident.slot) + " needs " + str(base) + " pages, beyond the page table";
        return false;
    }
    bool const paired = seq.lease.mode() == ReusePlanMode::kSpec || seq.lease.mode() == ReusePlanMode::kHybridMtp;
    bool grown = paired ? manager_.growSpecPages(seq.lease, demand.baseKvPages, demand.draftKvPages)
                        : manager_.growBasePages(seq.lease, demand.baseKvPages);
    if (!grown) {
        why = "insufficient capacity to grow resident slot " + str(seq.resident.slot) + " to " + str(base) + " pages";
        return false;
    }
    bindRows(seq);
    return true;
}

bool ContextCacheCoordinator::canPrepareDecodeStep(RequestHandle const& request,
                                                   DecodingKvHeadroom const& headroom) const {
    RequestState const* s = request.state_.get();
    if (!s || s->owner != this || s->phase != Phase::kExecuting || s->joiner) return false;
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) return false;
    ResourceDemand total;
    for (SequenceState const& seq : s->sequences) {
        if (seq.completed) continue;
        bool fitsTable = true;
        ResourceDemand const d = coverDemand(seq, headroom, fitsTable);
        if (!fitsTable) return false;
        total.baseKvPages += d.baseKvPages;
        total.draftKvPages += d.draftKvPages;
    }
    return total.isZero() || manager_.pools().canAllocateOnceReclaimed(total);
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::prepareDecodeStep(RequestHandle& request,
                                                                         DecodingKvHeadroom const& headroom) {
    char const* op = "prepareDecodeStep";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    if (s.phase == Phase::kFinishing) {
        lastFailure_ = "prepareDecodeStep: the request is finishing";
        return Status::kRequestFailed;
    }
    requirePhase(op, s, {Phase::kExecuting});
    if (s.joiner) contract(op, "a joiner is admitted but not yet finalized or retracted");
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) contract(op, "headroom is negative");
    std::string why;
    for (SequenceState& seq : s.sequences) {
        if (seq.completed) continue;
        if (!coverRow(seq, headroom, why)) {
            uploadTables();
            return failRequest(s, "prepareDecodeStep: " + why);
        }
    }
    uploadTables();
    s.devicePending = true;
    return Status::kOk;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::completeDecodeStep(
    RequestHandle& request, std::vector<ContextCacheSequenceAdvance> const& advances,
    std::vector<int32_t> const& publishableRows, std::vector<int32_t> const* commonStateLengths) {
    char const* op = "completeDecodeStep";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kExecuting, Phase::kFinishing});
    if (s.joiner) contract(op, "a joiner is admitted but not yet finalized or retracted");
    size_t const batch = s.sequences.size();
    if (advances.size() != batch)
        contract(op, str(static_cast<int64_t>(advances.size())) + " advances for a batch of " +
                         str(static_cast<int64_t>(batch)));
    if (s.pagedSpec && !commonStateLengths) contract(op, "a speculative request needs the common state lengths");
    if (commonStateLengths && commonStateLengths->size() != batch)
        contract(op, "commonStateLengths has " + str(static_cast<int64_t>(commonStateLengths->size())) + " entries");
    int32_t const lookahead = s.contract == DecodingTokenStateContract::kCommittedPlusLookahead ? 1 : 0;
    std::vector<uint8_t> held(batch, 0);
    for (size_t i = 0; i < batch; ++i) {
        SequenceState const& seq = s.sequences[i];
        ContextCacheSequenceAdvance const& a = advances[i];
        std::string const where = "advances[" + str(static_cast<int64_t>(i)) + "]";
        if (a.acceptedTokenCount == 0 &&
            a.committedStateLength == ContextCacheSequenceAdvance::kHoldCommittedStateLength) {
            held[i] = 1;
            continue;
        }
        if (seq.completed) contract(op, where + ": the row already completed; it may only hold");
        if (a.acceptedTokenCount < 1 || !a.acceptedTokenIds)
            contract(op, where + " must accept at least one token (or hold with 0 tokens and the hold sentinel)");
        if (!s.speculative && a.acceptedTokenCount != 1)
            contract(op,
                     where + " accepts " + str(a.acceptedTokenCount) + " tokens; a non-speculative step accepts one");
        int64_t const expected = static_cast<int64_t>(seq.committed) + a.acceptedTokenCount;
        if (a.committedStateLength != expected)
            contract(op, where + " committed length " + str(a.committedStateLength) +
                             " breaks the token-state contract "
                             "(expected " +
                             str(expected) + ")");
        int64_t const history = static_cast<int64_t>(seq.tokens.size()) + a.acceptedTokenCount;
        if (history - lookahead != a.committedStateLength)
            contract(op, where + " leaves a history of " + str(history) + " tokens for committed length " +
                             str(a.committedStateLength));
        if (commonStateLengths) {
            int32_t const common = (*commonStateLengths)[i];
            if (common < seq.common || common > a.committedStateLength)
                contract(op, "commonStateLengths[" + str(static_cast<int64_t>(i)) + "] = " + str(common) +
                                 " must lie in [" + str(seq.common) + ", " + str(a.committedStateLength) + "]");
        }
    }
    std::vector<uint8_t> publish(batch, 0);
    for (int32_t row : publishableRows) {
        if (row < 0 || static_cast<size_t>(row) >= batch)
            contract(op, "publishable row " + str(row) + " is out of range");
        if (publish[static_cast<size_t>(row)]) contract(op, "publishable row " + str(row) + " is listed twice");
        // A held row may be listed: a row that finished in an earlier step publishes at its committed length (the
        // caller lists only normally finished rows, never cancelled or failed ones).
        if (s.sequences[static_cast<size_t>(row)].completed)
            contract(op, "publishable row " + str(row) + " was already published at decode end");
        publish[static_cast<size_t>(row)] = 1;
    }

    // Apply.
    for (size_t i = 0; i < batch; ++i) {
        if (held[i]) continue;
        SequenceState& seq = s.sequences[i];
        appendTokens(seq, advances[i].acceptedTokenIds, advances[i].acceptedTokenCount);
        seq.committed = advances[i].committedStateLength;
        seq.common = commonStateLengths ? (*commonStateLengths)[i] : seq.committed;
    }
    // The first completed round proves the draft initialisation finished: publish the frozen prefill endpoints.
    for (SequenceState& seq : s.sequences) flushFrozen(seq);

    bool const decodeEnd = s.commit == ContextCacheCommitPolicy::kIncludingGeneratedTokens;
    if (decodeEnd && profile_.usesCheckpointReuse()) {
        bool staged = false;
        for (size_t i = 0; i < batch; ++i)
            if (publish[i] && !s.sequences[i].bypass)
                staged = stageCapture(s.sequences[i], s.sequences[i].committed) || staged;
        if (staged) {
            ++counters_.hybridCaptureSynchronizations;
            if (!synchronize(s))
                return quarantineLive(request, "completeDecodeStep: the capture synchronisation failed");
            for (size_t i = 0; i < batch; ++i)
                if (publish[i]) publishStaged(s.sequences[i]);
        }
    } else if (decodeEnd) {
        for (size_t i = 0; i < batch; ++i) {
            if (!publish[i]) continue;
            SequenceState& seq = s.sequences[i];
            publishBase(seq, seq.lease.mode() == ReusePlanMode::kSpec ? seq.common : seq.committed);
        }
    }
    for (size_t i = 0; i < batch; ++i)
        if (publish[i]) s.sequences[i].completed = true;
    return Status::kOk;
}

void ContextCacheCoordinator::flushFrozen(SequenceState& seq) {
    if (!seq.frozenEndpoint) return;
    int32_t const endpoint = *seq.frozenEndpoint;
    seq.frozenEndpoint.reset();
    publishBase(seq, endpoint);
}

// Publish EAGLE frozen endpoints after a synchronisation proves the draft initialisation complete.
ContextCacheCoordinatorStatus ContextCacheCoordinator::terminalize(RequestHandle& request, RequestState& s,
                                                                   char const* op) {
    bool frozen = false;
    for (SequenceState const& seq : s.sequences) frozen = frozen || seq.frozenEndpoint.has_value();
    if (!frozen) return Status::kOk;
    if (!synchronize(s)) return quarantineLive(request, std::string(op) + ": the synchronisation failed");
    for (SequenceState& seq : s.sequences) flushFrozen(seq);
    return Status::kOk;
}

// ---- compaction -------------------------------------------------------------------------------------------

ContextCacheCoordinatorStatus ContextCacheCoordinator::beginBatchCompaction(RequestHandle& request,
                                                                            std::vector<int32_t> const& oldToNew,
                                                                            int32_t newBatchSize,
                                                                            TensorView& deviceBatchMapping) {
    char const* op = "beginBatchCompaction";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kExecuting, Phase::kFinishing});
    if (s.joiner) contract(op, "a joiner is admitted but not yet finalized or retracted");
    int32_t const batch = static_cast<int32_t>(s.sequences.size());
    if (static_cast<int32_t>(oldToNew.size()) != batch)
        contract(op,
                 "the map has " + str(static_cast<int64_t>(oldToNew.size())) + " entries for a batch of " + str(batch));
    std::vector<device::RowMove> moves;
    device::planCompaction("ContextCacheCoordinator::beginBatchCompaction", oldToNew.data(), batch, newBatchSize,
                           moves);
    for (SequenceState const& seq : s.sequences)
        if (seq.staged) contract(op, "a hybrid capture is staged and not yet published");
    if (deviceBatchMapping.data) {
        if (deviceBatchMapping.dtype != ScalarType::kInt32) contract(op, "deviceBatchMapping must be int32");
        if (deviceBatchMapping.elementCount() < batch)
            contract(op, "deviceBatchMapping holds " + str(deviceBatchMapping.elementCount()) + " entries, needs " +
                             str(batch));
    }
    Status const t = terminalize(request, s, op);
    if (t != Status::kOk) return t;
    if (deviceBatchMapping.data && batch > 0) {
        device::DeviceBackend& backend =
            profile_.hasAttention() ? resources_.basePool->backend() : resources_.residentState->backend();
        backend.upload(deviceBatchMapping.data, oldToNew.data(), static_cast<size_t>(batch) * sizeof(int32_t));
        s.devicePending = true;
    }
    s.pendingMap = oldToNew;
    s.pendingNewBatch = newBatchSize;
    s.phase = Phase::kCompactionPending;
    return Status::kOk;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::compactBatch(RequestHandle& request) {
    char const* op = "compactBatch";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kCompactionPending});
    int32_t const oldBatch = static_cast<int32_t>(s.sequences.size());
    for (int32_t i = 0; i < oldBatch; ++i)
        if (s.pendingMap[static_cast<size_t>(i)] < 0) {
            int32_t const slot = s.sequences[static_cast<size_t>(i)].resident.slot;
            clearRows(slot);
            if (profile_.usesCheckpointReuse()) resources_.residentState->zeroSlot(slot);
        }
    uploadTables();
    if (profile_.hasAttention()) resources_.baseLengths->compact(s.pendingMap.data(), oldBatch, s.pendingNewBatch);
    if (profile_.ownsPagedSpecState())
        resources_.draftLengths->compact(s.pendingMap.data(), oldBatch, s.pendingNewBatch);
    s.devicePending = true;
    if (!synchronize(s)) return quarantineLive(request, "compactBatch: the synchronisation failed");
    std::vector<SequenceState> survivors;
    std::vector<int32_t> starts;
    survivors.reserve(static_cast<size_t>(s.pendingNewBatch));
    for (int32_t i = 0; i < oldBatch; ++i) {
        SequenceState& seq = s.sequences[static_cast<size_t>(i)];
        if (s.pendingMap[static_cast<size_t>(i)] < 0) {
            residentEpochs_[static_cast<size_t>(seq.resident.slot)] = 0;
            continue;  // the lease releases when `seq` goes below
        }
        starts.push_back(s.prefillStarts[static_cast<size_t>(i)]);
        survivors.push_back(std::move(seq));
    }
    s.sequences = std::move(survivors);
    s.prefillStarts = std::move(starts);
    s.pendingMap.clear();
    s.phase = s.sequences.empty() ? Phase::kFinishing : Phase::kExecuting;
    return Status::kOk;
}

// ---- finish, abandonment, quarantine ----------------------------------------------------------------------

void ContextCacheCoordinator::release(RequestState& s) noexcept {
    unbind(s);
    try {
        uploadTables();
    } catch (...) {
        poisoned_ = true;  // the device table could not be updated: treat the device as suspect
    }
    s.sequences.clear();
    s.joiner.reset();
    unlink(liveList_, s);
    if (s.phase != Phase::kFinished && s.phase != Phase::kQuarantined) --activeRequests_;
    s.phase = Phase::kFinished;
    s.owner = nullptr;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::quarantineLive(RequestHandle& request, std::string why) {
    lastFailure_ = std::move(why);
    RequestState& s = *request.state_;
    // Move the request's ownership (leases, resident slots) into a quarantine record: nothing is freed while the
    // device may still be using it. The handle keeps an empty, quarantined state.
    auto record = std::make_unique<RequestState>();
    record->stream = s.stream;
    record->sequences = std::move(s.sequences);
    record->joiner = std::move(s.joiner);
    record->phase = Phase::kQuarantined;
    s.sequences.clear();
    s.joiner.reset();
    unlink(liveList_, s);
    if (s.phase != Phase::kFinished && s.phase != Phase::kQuarantined) --activeRequests_;
    s.phase = Phase::kQuarantined;
    s.owner = this;  // calls on the handle keep answering kPoisoned
    s.next = quarantinedHandles_;  // until it is finished or destroyed, or this coordinator detaches it
    if (quarantinedHandles_) quarantinedHandles_->prev = &s;
    quarantinedHandles_ = &s;
    poisoned_ = true;
    quarantine_.push_back(std::move(record));
    return Status::kPoisoned;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::finish(RequestHandle& request) {
    RequestState* s = request.state_.get();
    if (!s || !s->owner || s->phase == Phase::kFinished) return Status::kOk;
    if (s->owner != this) contract("finish", "the request belongs to another coordinator");
    if (s->phase == Phase::kQuarantined) {
        unlink(quarantinedHandles_, *s);
        request.state_.reset();
        return Status::kPoisoned;
    }
    if (s->joiner) retractSequenceAdmission(request);
    for (SequenceState& seq : s->sequences)
        if (seq.frozenEndpoint) s->devicePending = true;
    if (s->devicePending && !synchronize(*s)) {
        Status const st = quarantineLive(request, "finish: the synchronisation failed");
        unlink(quarantinedHandles_, *s);
        request.state_.reset();
        return st;
    }
    try {
        for (SequenceState& seq : s->sequences) flushFrozen(seq);
    } catch (...) {
        release(*s);
        request.state_.reset();
        throw;
    }
    release(*s);
    request.state_.reset();
    return Status::kOk;
}

void ContextCacheCoordinator::abandon(std::unique_ptr<RequestState> state) noexcept {
    RequestState& s = *state;
    if (s.phase == Phase::kQuarantined) unlink(quarantinedHandles_, s);  // quarantined in place: off the list
    if (s.phase == Phase::kFinished || s.phase == Phase::kQuarantined) return;
    // Early destruction: nothing is published; device work still in flight is waited for first.
    if (s.devicePending) {
        if (!synchronize(s)) {
            lastFailure_ = "abandon: the synchronisation failed";
            unlink(liveList_, s);
            --activeRequests_;
            s.phase = Phase::kQuarantined;
            poisoned_ = true;
            quarantine_.push_back(std::move(state));
            return;
        }
    }
    for (SequenceState& seq : s.sequences) seq.frozenEndpoint.reset();
    release(s);
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::shutdown() noexcept {
    bool stillFailing = false;
    for (auto it = quarantine_.begin(); it != quarantine_.end();) {
        if (!syncStream((*it)->stream)) {
            stillFailing = true;
            ++it;
            continue;
        }
        unbind(**it);
        it = quarantine_.erase(it);
    }
    try {
        uploadTables();
    } catch (...) {
        stillFailing = true;
    }
    if (stillFailing) {
        lastFailure_ = "shutdown: a quarantined request's synchronisation still fails";
        return Status::kPoisoned;
    }
    poisoned_ = false;
    if (activeRequests_ > 0) {
        lastFailure_ = "shutdown: " + str(activeRequests_) + " request(s) still active";
        return Status::kRequestFailed;
    }
    return Status::kOk;
}

// ---- in-flight admission ----------------------------------------------------------------------------------

ContextCacheCoordinator::AdmitSequenceResult ContextCacheCoordinator::admitSequence(
    RequestHandle& request, ContextCacheSequenceAdmission const& admission, DecodingKvHeadroom const& headroom) {
    char const* op = "admitSequence";
    AdmitSequenceResult result;
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined || poisoned_) {
        result.failure = lastFailure_ = "admitSequence: the coordinator is poisoned";
        return result;
    }
    if (!supportsLiveSequenceAdmission()) {
        result.failure = lastFailure_ = std::string(
                                            "admitSequence: live admission needs an attention-only, "
                                            "non-speculative deployment (this one is ") +
                                        toString(profile_.baseStateKind) +
                                        (profile_.isSpeculative() ? ", speculative)" : ")");
        return result;
    }
    if (s.speculative) contract(op, "a speculative request does not take joiners");
    requirePhase(op, s, {Phase::kExecuting});
    if (s.joiner) contract(op, "a joiner is already pending");
    if (static_cast<int32_t>(s.sequences.size()) >= config_.maxBatch)
        contract(op, "the batch is full (" + str(config_.maxBatch) + ")");
    if (headroom.baseExtraTokens < 0 || headroom.draftExtraTokens < 0) contract(op, "headroom is negative");
    ContextCacheLookupPolicy policy =
        validateSequence(op, admission, 0, config_.maxBatch, ContextCacheLookupPolicy::kUseCache);
    validateResident(op, residentEpochs_, lastEpochs_, admission.resident, "the joiner");
    if (resources_.baseLengths->activeBatch() != static_cast<int32_t>(s.sequences.size()))
        contract(op, "the device lengths cover " + str(resources_.baseLengths->activeBatch()) +
                         " rows, the batch has " + str(static_cast<int64_t>(s.sequences.size())));
    SequenceState seq;
    std::string failure;
    bool capacity = false;
    if (!acquireSequence(admission, policy, headroom, false, seq, failure, capacity)) {
        result.status = capacity ? AdmitSequenceStatus::kNoCapacity : AdmitSequenceStatus::kFailed;
        result.failure = lastFailure_ = "admitSequence: " + failure;
        return result;
    }
    try {
        bindRows(seq);
        uploadTables();
        resources_.baseLengths->setEntry(static_cast<int32_t>(s.sequences.size()), seq.reuse);
    } catch (std::exception const& e) {
        clearRows(seq.resident.slot);
        try {
            uploadTables();
        } catch (...) {
            poisoned_ = true;
        }
        result.failure = lastFailure_ = std::string("admitSequence: binding the row failed: ") + e.what();
        return result;
    }
    residentEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
    lastEpochs_[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
    countAdmission(seq);
    result.status = AdmitSequenceStatus::kAdmitted;
    result.prefillStart = seq.reuse;
    s.joiner = std::move(seq);
    s.devicePending = true;
    return result;
}

ContextCacheCoordinatorStatus ContextCacheCoordinator::finalizeSequenceAdmission(
    RequestHandle& request, int32_t row, ContextCacheSequenceAdvance const& advance) {
    char const* op = "finalizeSequenceAdmission";
    RequestState& s = live(request, op);
    if (s.phase == Phase::kQuarantined) return Status::kPoisoned;
    requirePhase(op, s, {Phase::kExecuting});
    if (!s.joiner) contract(op, "no joiner is pending");
    if (row != static_cast<int32_t>(s.sequences.size()))
        contract(op,
                 "the joiner is seated at row " + str(static_cast<int64_t>(s.sequences.size())) + ", not " + str(row));
    checkPrefillAdvance(op, s.contract, *s.joiner, advance, "the joiner's advance");
    SequenceState& seq = *s.joiner;
    appendTokens(seq, advance.acceptedTokenIds, advance.acceptedTokenCount);
    seq.committed = seq.common = advance.committedStateLength;
    publishBase(seq, seq.committed);
    s.prefillStarts.push_back(seq.reuse);
    s.sequences.push_back(std::move(seq));
    s.joiner.reset();
    return Status::kOk;
}

bool ContextCacheCoordinator::retractSequenceAdmission(RequestHandle& request) noexcept {
    RequestState* s = request.state_.get();
    if (!s || s->owner != this || !s->joiner) return false;
    try {
        clearRows(s->joiner->resident.slot);
        uploadTables();
        resources_.baseLengths->truncate(static_cast<int32_t>(s->sequences.size()));
    } catch (...) {
        poisoned_ = true;
        lastFailure_ = "retractSequenceAdmission: clearing the joiner's row failed";
        return false;
    }
    residentEpochs_[static_cast<size_t>(s->joiner->resident.slot)] = 0;
    s->joiner.reset();
    return true;
}

// ---- observation ------------------------------------------------------------------------------------------

ContextCacheMetrics ContextCacheCoordinator::metrics() const {
    ContextCacheMetrics m = counters_;
    ResourcePools const& pools = manager_.pools();
    auto pool = [&](ResourceType t) { return ContextCachePoolMetrics{pools.freeCount(t), pools.capacity(t)}; };
    m.currentRecords = manager_.records().size();
    m.baseKvPages = pool(ResourceType::kBaseKvPage);
    m.draftKvPages = pool(ResourceType::kDraftKvPage);
    m.recurrentSnapshots = pool(ResourceType::kRecurrentSnapshot);
    m.partialKvSnapshots = pool(ResourceType::kPartialKvSnapshot);
    ContextCacheManagerMetrics const& e = manager_.metrics();
    m.evictedRecords = e.evictedRecords;
    m.reclaimedBaseKvPages = e.reclaimedBaseKvPages;
    m.reclaimedDraftKvPages = e.reclaimedDraftKvPages;
    m.reclaimedRecurrentSnapshots = e.reclaimedRecurrentSnapshots;
    m.reclaimedPartialKvSnapshots = e.reclaimedPartialKvSnapshots;
    return m;
}

void ContextCacheCoordinator::checkInvariants() const {
    manager_.checkInvariants();
    auto fail = [](std::string const& why) { throw InvariantError("ContextCacheCoordinator: " + why); };
    std::vector<uint64_t> seen(residentEpochs_.size(), 0);
    auto checkRow = [&](device::KvPageTable const* table, int32_t slot, std::vector<PageId> const& pages,
                        char const* which) {
        int32_t const* row = table->hostRow(slot);
        int32_t const width = table->maxPagesPerSeq();
        for (int32_t j = 0; j < width; ++j) {
            int32_t const want = static_cast<size_t>(j) < pages.size() ? pages[static_cast<size_t>(j)] : -1;
            if (row[j] != want)
                fail(std::string(which) + " row of slot " + str(slot) + " entry " + str(j) + " is " + str(row[j]) +
                     ", the lease says " + str(want));
        }
    };
    auto checkSequence = [&](SequenceState const& seq, bool rowsBound) {
        size_t const slot = static_cast<size_t>(seq.resident.slot);
        if (seen[slot]) fail("resident slot " + str(seq.resident.slot) + " is held twice");
        seen[slot] = seq.resident.epoch;
        if (residentEpochs_[slot] != seq.resident.epoch)
            fail("resident slot " + str(seq.resident.slot) + " epoch " + std::to_string(residentEpochs_[slot]) +
                 " != the sequence's " + std::to_string(seq.resident.epoch));
        if (!seq.lease.valid()) fail("a live sequence lost its lease");
        if (seq.committed > static_cast<int32_t>(seq.tokens.size())) fail("committed beyond the token history");
        if (static_cast<int64_t>(seq.published) * pageSize_ > std::max(seq.committed, seq.inputLength))
            fail("published blocks beyond the committed boundary");
        if (rowsBound && profile_.hasAttention())
            checkRow(resources_.basePageTable, seq.resident.slot, seq.lease.basePages(), "base");
        if (rowsBound && profile_.ownsPagedSpecState())
            checkRow(resources_.draftPageTable, seq.resident.slot, seq.lease.draftPages(), "draft");
    };
    int32_t liveCount = 0;
    for (RequestState const* s = liveList_; s; s = s->next) {
        ++liveCount;
        bool const bound = s->phase != Phase::kAdmitted;
        for (SequenceState const& seq : s->sequences) checkSequence(seq, bound);
        if (s->joiner) checkSequence(*s->joiner, true);
    }
    if (liveCount != activeRequests_) fail("active request count " + str(activeRequests_) + " != " + str(liveCount));
    for (auto const& q : quarantine_) {
        for (SequenceState const& seq : q->sequences) seen[static_cast<size_t>(seq.resident.slot)] = seq.resident.epoch;
        if (q->joiner) seen[static_cast<size_t>(q->joiner->resident.slot)] = q->joiner->resident.epoch;
    }
    for (size_t slot = 0; slot < residentEpochs_.size(); ++slot) {
        if (residentEpochs_[slot] != 0 && seen[slot] == 0)
            fail("resident slot " + str(static_cast<int64_t>(slot)) + " is claimed by no sequence");
        if (residentEpochs_[slot] == 0) {
            std::vector<PageId> const none;
            if (profile_.hasAttention()) checkRow(resources_.basePageTable, static_cast<int32_t>(slot), none, "base");
            if (profile_.ownsPagedSpecState())
                checkRow(resources_.draftPageTable, static_cast<int32_t>(slot), none, "draft");
        }
    }
    std::string why;
    if (profile_.hasAttention() && !resources_.basePageTable->checkInvariants(&why)) fail("base page table: " + why);
    if (profile_.ownsPagedSpecState() && !resources_.draftPageTable->checkInvariants(&why))
        fail("draft page table: " + why);
}

}  // namespace ctxcache::runtime
