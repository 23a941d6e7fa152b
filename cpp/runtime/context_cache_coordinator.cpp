// ContextCacheCoordinator, construction and lifetime: the validation of a deployment against its resources, the
// request handle, the device helpers every phase uses (the live-request check, stream synchronisation, unbinding
// rows and slots), finish, abandonment, quarantine and shutdown, and observation (metrics, checkInvariants).
// The phases live beside it: coordinator_admission.cpp, coordinator_prefill.cpp (prefill and publication),
// coordinator_decode.cpp (decode and compaction); what they share is in coordinator_internal.h.
// Contract, invariants, cost: include/ctxcache/runtime/context_cache_coordinator.h.
// Threading: the coordinator is single-writer (one caller at a time, no internal locks); the destructor and
// shutdown() wait for the streams of the requests they free.
#include "ctxcache/runtime/context_cache_coordinator.h"

#include <algorithm>
#include <string>
#include <utility>

#include "coordinator_internal.h"
#include "ctxcache/device/dtype.h"
#include "ctxcache/errors.h"

namespace ctxcache::runtime {

namespace {

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

}  // namespace

void requirePhase(char const* op, ContextCacheCoordinator::RequestState const& s, std::initializer_list<Phase> ok) {
    for (Phase p : ok)
        if (s.phase == p) return;
    contract(op, std::string("not allowed while the request is ") + phaseName(s.phase));
}

namespace {

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

void unlink(ContextCacheCoordinator::RequestState*& head, ContextCacheCoordinator::RequestState& s) {
    if (s.prev) s.prev->next = s.next;
    else if (head == &s) head = s.next;
    if (s.next) s.next->prev = s.prev;
    s.prev = s.next = nullptr;
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
    if (config.hostTierPages < 0)
        contract("ContextCacheCoordinator", "hostTierPages must be >= 0 (got " + str(config.hostTierPages) + ")");
    if (config.hostStore.store && config.hostTierPages == 0)
        contract("ContextCacheCoordinator", "a byte store (hostStore) needs a host tier (hostTierPages > 0)");
    if (config.hostTierPages > 0) {
        if (!resources_.basePool || !profile_.hasAttention())
            contract("ContextCacheCoordinator", "a host tier needs an attention deployment with a base pool");
        // EAGLE: every slot also holds a draft page (a speculative hit loads both): slot j the draft page of block
        // j - 1, which block j's hash determines while a draft position depends on at most a page of later tokens.
        bool const eagleSlots = profile_.ownsPagedSpecState() && !profile_.usesCheckpointReuse() &&
                                profile_.specReuseContract->futureDependencyTokens <= resources_.basePool->pageSize();
        device::KvPagePool* const draftPool = eagleSlots ? resources_.draftPool : nullptr;
        device::HostBuffer const* memory = resources_.hostTierMemory;
        if (!memory) {
            size_t const bytes =
                tier::HostTier::slotBytes(*resources_.basePool, draftPool) * static_cast<size_t>(config.hostTierPages);
            hostMemory_.emplace(*backend_, bytes);
            memory = &*hostMemory_;
        }
        tier::HostTierStorage storage{resources_.basePool, memory, [this] {
            return syncStream(backend_ ? backend_->stream() : nullptr);
        }, draftPool};
        tier::StoreLinkOptions link = config.hostStore;
        if (link.store && link.keyPrefix.empty()) {
            device::KvPagePool const& pool = *resources_.basePool;
            tier::StoreLayout layout;
            layout.model = config.storeModel;
            layout.dtype = device::dtypeName(pool.dtype());
            layout.pageSize = pool.pageSize();
            layout.layers = pool.numLayers();
            layout.layoutDigest = tier::HostTier::layoutDigest(pool);
            layout.hashAlgorithm = config.hashAlgorithm == HashAlgorithm::kFnv1a128 ? "fnv1a128" : "sha256";
            layout.keyedHash = !config.hashKey.empty();
            link.keyPrefix = tier::storeKeyPrefix(layout);
        }
        hostTier_ = std::make_unique<tier::HostTier>(
            manager_, tier::HostTierConfig{config.hostTierPages, config.hostWritePolicy, nullptr, std::move(link)},
            std::move(storage));
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
    if (hostTier_) {
        tier::HostTierMetrics const& h = hostTier_->metrics();
        m.hostResidentBlocks = hostTier_->index().residentCount();
        m.hostWrittenBlocks = h.writtenBlocks;
        m.hostDroppedBlocks = h.droppedBlocks;
        m.hostFailedLoads = h.failedLoads;
        m.hostFailedWrites = h.failedWrites;
        m.hostBytesToHost = h.bytesToHost;
        m.hostBytesToDevice = h.bytesToDevice;
        tier::StoreLinkMetrics const& l = hostTier_->storeLinkMetrics();
        m.storePutBlocks = l.putBlocks;
        m.storeDroppedPuts = l.droppedPuts;
        m.storeFailedPuts = l.failedPuts;
        m.storeAskedBlocks = l.askedBlocks;
        m.storeFetchedBlocks = l.loadedBlocks;
        m.storeFailedLoads = l.failedLoads;
        m.storeRejectedLoads = l.rejectedLoads;
        m.storeLateBatches = l.lateBatches;
        m.storeBreakerRefusals = l.breakerRefusals;
        m.storeWaitMicros = l.waitMicros;
    }
    return m;
}

void ContextCacheCoordinator::clear() {
    if (activeRequests_ > 0 || !quarantine_.empty())
        contract("clear", str(activeRequests_) + " request(s) active and " +
                              str(static_cast<int64_t>(quarantine_.size())) +
                              " quarantined: finish them (or shut down) first");
    manager_.clear();
}

void ContextCacheCoordinator::setRetentionTime(int64_t nowNs) { manager_.setRetentionTime(nowNs); }

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
