// BoundedSwaKVPageManager: reservations, window advances, retirement after the completion point, compaction,
// quarantine. Contract: include/ctxcache/runtime/bounded_swa_kv_page_manager.h.
#include "ctxcache/runtime/bounded_swa_kv_page_manager.h"

#include <algorithm>
#include <string>
#include <utility>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/device/batch_compaction.h"
#include "ctxcache/errors.h"

namespace ctxcache::runtime {

namespace {

using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{"BoundedSwaKVPageManager"};

[[noreturn]] void broken(std::string const& why) { throw InvariantError("BoundedSwaKVPageManager: " + why); }

}  // namespace

// ---- handle -------------------------------------------------------------------------------------------------
// A handle with an owner is on that owner's list (link/unlink/relink below); the manager's destructor empties it.

BoundedSwaKVPageManager::RequestHandle::~RequestHandle() {
    if (!owner_) return;
    try {
        (void)owner_->finish(*this);  // abandonment: synchronise, then release (or quarantine)
    } catch (...) {
    }
    detach();  // finish detaches; this covers a finish that threw
}

BoundedSwaKVPageManager::RequestHandle::RequestHandle(RequestHandle&& other) noexcept
    : owner_(other.owner_), id_(other.id_) {
    if (owner_) owner_->relink(other, *this);
    other.owner_ = nullptr;
    other.id_ = 0;
}

BoundedSwaKVPageManager::RequestHandle& BoundedSwaKVPageManager::RequestHandle::operator=(
    RequestHandle&& other) noexcept {
    if (this == &other) return *this;
    if (owner_) {
        try {
            (void)owner_->finish(*this);
        } catch (...) {
        }
        detach();
    }
    owner_ = other.owner_;
    id_ = other.id_;
    if (owner_) owner_->relink(other, *this);
    other.owner_ = nullptr;
    other.id_ = 0;
    return *this;
}

bool BoundedSwaKVPageManager::RequestHandle::valid() const noexcept {
    return owner_ && owner_->live_ && owner_->live_->id == id_;
}

int32_t BoundedSwaKVPageManager::RequestHandle::batchSize() const noexcept {
    return valid() ? static_cast<int32_t>(owner_->live_->rows.size()) : 0;
}

void BoundedSwaKVPageManager::RequestHandle::detach() noexcept {
    if (owner_) owner_->unlink(*this);
    owner_ = nullptr;
    id_ = 0;
}

void BoundedSwaKVPageManager::link(RequestHandle& h) noexcept {
    h.prev_ = nullptr;
    h.next_ = handles_;
    if (handles_) handles_->prev_ = &h;
    handles_ = &h;
}

void BoundedSwaKVPageManager::unlink(RequestHandle& h) noexcept {
    if (h.prev_) h.prev_->next_ = h.next_;
    else if (handles_ == &h) handles_ = h.next_;
    if (h.next_) h.next_->prev_ = h.prev_;
    h.prev_ = h.next_ = nullptr;
}

void BoundedSwaKVPageManager::relink(RequestHandle& from, RequestHandle& to) noexcept {
    to.prev_ = from.prev_;
    to.next_ = from.next_;
    if (to.prev_) to.prev_->next_ = &to;
    else if (handles_ == &from) handles_ = &to;
    if (to.next_) to.next_->prev_ = &to;
    from.prev_ = from.next_ = nullptr;
}

// ---- construction -------------------------------------------------------------------------------------------

BoundedSwaKVPageManager::BoundedSwaKVPageManager(BoundedSwaConfig const& config, device::KvPagePool& pool,
                                                 device::KvPageTable& swaTable, device::KvLengths* lengths,
                                                 StreamSynchronizer synchronizer)
    : config_(config), pool_(&pool), table_(&swaTable), lengths_(lengths), synchronizer_(std::move(synchronizer)) {
    char const* op = "BoundedSwaKVPageManager";
    if (swaTable.mode() != device::KvPageTable::Mode::kSparseWindow)
        contract(op, "the SWA page table must be in sparse-window mode");
    if (swaTable.numPages() != pool.numPages())
        contract(op,
                 "the table addresses " + str(swaTable.numPages()) + " pages, the pool has " + str(pool.numPages()));
    if (&swaTable.backend() != &pool.backend()) contract(op, "the table and the pool live on different backends");
    if (config.windowSizeTokens <= 0) contract(op, "windowSizeTokens must be positive");
    if (config.maxBatch <= 0 || config.maxBatch > swaTable.maxBatch())
        contract(op, "maxBatch " + str(config.maxBatch) + " must lie in [1, " + str(swaTable.maxBatch()) + "]");
    if (lengths && config.maxBatch > lengths->maxBatch())
        contract(op, "maxBatch " + str(config.maxBatch) + " exceeds the lengths' " + str(lengths->maxBatch()));
    pageSize_ = pool.pageSize();
    int64_t const windowPages = (static_cast<int64_t>(config.windowSizeTokens) + pageSize_ - 1) / pageSize_ + 1;
    if (windowPages > swaTable.maxPagesPerSeq())
        contract(op, "a window of " + str(config.windowSizeTokens) + " tokens spans up to " + str(windowPages) +
                         " pages, the table has " + str(swaTable.maxPagesPerSeq()) + " per sequence");
    reservation_ = static_cast<int32_t>(2 * windowPages + 1);
    freePages_.reserve(static_cast<size_t>(pool.numPages()));
    for (int32_t p = pool.numPages() - 1; p >= 0; --p) freePages_.push_back(p);  // back = lowest id
    lastEpochs_.assign(static_cast<size_t>(config.maxBatch), 0);
    slotBusy_.assign(static_cast<size_t>(config.maxBatch), 0);
    if (!synchronizer_) {
        device::DeviceBackend* backend = &pool.backend();
        synchronizer_ = [backend](StreamHandle) {
            try {
                backend->synchronize();
                return true;
            } catch (...) {
                return false;
            }
        };
    }
}

BoundedSwaKVPageManager::~BoundedSwaKVPageManager() {
    // The tables outlive the manager: leave no row listing pages nobody owns.
    if (live_) {
        if (live_->devicePending) {
            try {
                (void)synchronizer_(live_->stream);
            } catch (...) {
            }
        }
        for (SwaKVCacheState& s : live_->rows) releaseRow(s);
    }
    for (Quarantined& q : quarantine_) {
        try {
            (void)synchronizer_(q.stream);
        } catch (...) {
        }
        for (SwaKVCacheState& s : q.rows) releaseRow(s);
    }
    // Every handle that still names this manager (live, quarantined, or resolved by shutdown and not yet
    // finished) forgets it: none may reach freed memory later.
    for (RequestHandle* h = handles_; h;) {
        RequestHandle* next = h->next_;
        h->owner_ = nullptr;
        h->id_ = 0;
        h->prev_ = h->next_ = nullptr;
        h = next;
    }
    handles_ = nullptr;
    upload();
}

// ---- helpers ------------------------------------------------------------------------------------------------

BoundedSwaKVPageManager::Live* BoundedSwaKVPageManager::live(RequestHandle const& request, char const* op) {
    if (!request.owner_) contract(op, "empty or finished request handle");
    if (request.owner_ != this) contract(op, "the request belongs to another manager");
    if (live_ && live_->id == request.id_) {
        if (live_->stream && pool_->backend().stream() != live_->stream) pool_->backend().setStream(live_->stream);
        return &*live_;
    }
    for (Quarantined const& q : quarantine_)
        if (q.id == request.id_) return nullptr;
    contract(op, "the request is finished");
}

void BoundedSwaKVPageManager::requirePhase(char const* op, Live const& l, Phase phase) const {
    static char const* const names[] = {"admitted", "prefill pending", "idle", "decode step pending",
                                        "compaction pending"};
    if (l.phase != phase)
        contract(op, std::string("called in phase '") + names[static_cast<int>(l.phase)] + "', needs '" +
                         names[static_cast<int>(phase)] + "'");
}

void BoundedSwaKVPageManager::checkEndpoints(char const* op, Live const& l, std::vector<int32_t> const& endpoints,
                                             bool decode) const {
    if (endpoints.size() != l.rows.size())
        contract(op, str(static_cast<int64_t>(endpoints.size())) + " endpoints for a batch of " +
                         str(static_cast<int64_t>(l.rows.size())));
    for (size_t i = 0; i < endpoints.size(); ++i) {
        int32_t const from = l.rows[i].exactResidentTokenCount;
        int32_t const to = endpoints[i];
        std::string const row = "row " + str(static_cast<int64_t>(i));
        if (to < from) contract(op, row + " goes back from " + str(from) + " to " + str(to));
        if (decode && to > from + 1)
            contract(op, row + " advances from " + str(from) + " to " + str(to) +
                             ": a decode step writes one token (an advance must not skip tokens)");
        if (retainedEnd(to, pageSize_) > table_->maxPagesPerSeq())
            contract(op, row + " endpoint " + str(to) + " lies past the table's " + str(table_->maxPagesPerSeq()) +
                             " pages per sequence");
    }
}

// Moves a row's window to `endpoint`: binds the new logical pages from the reservation (table entries set now),
// stages the pages that left the window (entries kept until applyRetirements).
void BoundedSwaKVPageManager::advance(SwaKVCacheState& s, int32_t endpoint) {
    int32_t const from = s.exactResidentTokenCount;
    if (endpoint == from) return;
    s.pendingEndpoint = endpoint;
    int32_t const W = config_.windowSizeTokens;
    int32_t const P = pageSize_;
    int32_t const slot = s.resident.slot;
    int32_t const newBegin = retainedBegin(endpoint, W, P);
    int32_t const newEnd = retainedEnd(endpoint, P);
    if (endpoint == from + 1) {
        // Fast path: each end of the window moves by at most one page.
        if (newEnd > s.retainedLogicalPageEnd) {
            PageId const page = s.reservedPages.back();
            s.reservedPages.pop_back();
            table_->setEntry(slot, newEnd - 1, page);
            s.pageBindings.push_back({newEnd - 1, page});
            s.newPageBindings.push_back({newEnd - 1, page});
        }
        if (newBegin > s.retainedLogicalPageBegin && !s.pageBindings.empty() &&
            s.pageBindings.front().logicalPage < newBegin) {
            s.pendingRetireBindings.push_back(s.pageBindings.front());
            s.pageBindings.pop_front();
        }
    } else {
        // General path: bind every page of the new range not bound yet (after the old range, so the deque stays
        // ascending), stage every bound page before it.
        while (!s.pageBindings.empty() && s.pageBindings.front().logicalPage < newBegin) {
            s.pendingRetireBindings.push_back(s.pageBindings.front());
            s.pageBindings.pop_front();
        }
        int32_t const firstNew = s.pageBindings.empty() ? newBegin : s.pageBindings.back().logicalPage + 1;
        for (int32_t lp = std::max(firstNew, newBegin); lp < newEnd; ++lp) {
            PageId const page = s.reservedPages.back();
            s.reservedPages.pop_back();
            table_->setEntry(slot, lp, page);
            s.pageBindings.push_back({lp, page});
            s.newPageBindings.push_back({lp, page});
        }
    }
    s.retainedLogicalPageBegin = newBegin;
    s.retainedLogicalPageEnd = newEnd;
    int32_t const mapped = static_cast<int32_t>(s.pageBindings.size() + s.pendingRetireBindings.size());
    s.peakBoundPages = std::max(s.peakBoundPages, mapped);
    peakBoundPages_ = std::max(peakBoundPages_, mapped);
}

void BoundedSwaKVPageManager::applyRetirements(SwaKVCacheState& s) {
    for (SwaPageBinding const& b : s.pendingRetireBindings) {
        table_->clearEntry(s.resident.slot, b.logicalPage);
        s.reservedPages.push_back(b.page);
    }
    s.pendingRetireBindings.clear();
    s.newPageBindings.clear();
    if (s.pendingEndpoint) s.exactResidentTokenCount = *s.pendingEndpoint;
    s.pendingEndpoint.reset();
}

bool BoundedSwaKVPageManager::synchronize(Live& l) noexcept {
    bool ok = false;
    try {
        ok = synchronizer_(l.stream);
    } catch (...) {
        ok = false;
    }
    if (ok) l.devicePending = false;
    return ok;
}

void BoundedSwaKVPageManager::upload() noexcept {
    try {
        if (table_->dirty()) table_->upload();
    } catch (...) {
        poisoned_ = true;  // the device table could not be updated: treat the device as suspect
    }
}

// Every page of the row back to the free list, its table row cleared, its slot free.
void BoundedSwaKVPageManager::releaseRow(SwaKVCacheState& s) noexcept {
    try {
        table_->clearRow(s.resident.slot);
    } catch (...) {
    }
    for (SwaPageBinding const& b : s.pageBindings) freePages_.push_back(b.page);
    for (SwaPageBinding const& b : s.pendingRetireBindings) freePages_.push_back(b.page);
    for (PageId p : s.reservedPages) freePages_.push_back(p);
    s.pageBindings.clear();
    s.pendingRetireBindings.clear();
    s.newPageBindings.clear();
    s.reservedPages.clear();
    slotBusy_[static_cast<size_t>(s.resident.slot)] = 0;
}

SwaKVCacheStatus BoundedSwaKVPageManager::quarantine(std::string why) {
    lastFailure_ = std::move(why);
    Quarantined q;
    q.id = live_->id;
    q.stream = live_->stream;
    q.rows = std::move(live_->rows);
    quarantine_.push_back(std::move(q));
    live_.reset();
    poisoned_ = true;  // the handle keeps answering kPoisoned
    return SwaKVCacheStatus::kPoisoned;
}

// ---- lifecycle ----------------------------------------------------------------------------------------------

BoundedSwaKVPageManager::BeginRequestResult BoundedSwaKVPageManager::beginRequest(
    std::vector<ResidentRef> const& residents, StreamHandle stream) {
    char const* op = "beginRequest";
    BeginRequestResult result;
    int64_t const batch = static_cast<int64_t>(residents.size());
    if (batch == 0 || batch > config_.maxBatch)
        contract(op, "a batch of " + str(batch) + " sequences; must lie in [1, " + str(config_.maxBatch) + "]");
    std::vector<uint8_t> seen(static_cast<size_t>(config_.maxBatch), 0);
    for (size_t i = 0; i < residents.size(); ++i) {
        ResidentRef const r = residents[i];
        std::string const row = "residents[" + str(static_cast<int64_t>(i)) + "]";
        if (r.slot < 0 || r.slot >= config_.maxBatch)
            contract(op, row + " slot " + str(r.slot) + " outside [0, " + str(config_.maxBatch) + ")");
        if (seen[static_cast<size_t>(r.slot)]) contract(op, row + " repeats slot " + str(r.slot));
        seen[static_cast<size_t>(r.slot)] = 1;
        if (r.epoch == 0) contract(op, row + " has epoch 0 (invalid)");
        if (r.epoch <= lastEpochs_[static_cast<size_t>(r.slot)])
            contract(op, row + " slot " + str(r.slot) + " epoch " + std::to_string(r.epoch) +
                             " is stale (the slot was last admitted at epoch " +
                             std::to_string(lastEpochs_[static_cast<size_t>(r.slot)]) + ")");
    }
    if (poisoned_) {
        result.status = SwaKVCacheStatus::kPoisoned;
        result.failure = lastFailure_ = "beginRequest: the manager is poisoned until shutdown() succeeds";
        return result;
    }
    if (live_) {
        result.status = SwaKVCacheStatus::kRequestFailed;
        result.failure = lastFailure_ = "beginRequest: a request is already live (one at a time)";
        return result;
    }
    for (ResidentRef const& r : residents)
        if (slotBusy_[static_cast<size_t>(r.slot)]) contract(op, "slot " + str(r.slot) + " is still held");
    int64_t const needed = batch * reservation_;
    if (needed > static_cast<int64_t>(freePages_.size())) {
        result.status = SwaKVCacheStatus::kRequestFailed;
        result.failure = lastFailure_ = "beginRequest: " + str(batch) + " sequences need " + str(needed) +
                                        " private pages (" + str(reservation_) + " each), " +
                                        str(static_cast<int64_t>(freePages_.size())) + " are free";
        return result;
    }
    Live l;
    l.id = nextId_++;
    l.stream = stream;
    l.rows.resize(residents.size());
    for (size_t i = 0; i < residents.size(); ++i) {
        SwaKVCacheState& s = l.rows[i];
        s.resident = residents[i];
        s.pageSizeTokens = pageSize_;
        s.windowSizeTokens = config_.windowSizeTokens;
        s.reservedPages.assign(freePages_.end() - reservation_, freePages_.end());
        std::reverse(s.reservedPages.begin(), s.reservedPages.end());  // back = lowest id: bound first
        freePages_.resize(freePages_.size() - static_cast<size_t>(reservation_));
        lastEpochs_[static_cast<size_t>(s.resident.slot)] = s.resident.epoch;
        slotBusy_[static_cast<size_t>(s.resident.slot)] = 1;
        table_->clearRow(s.resident.slot);
    }
    live_ = std::move(l);
    result.request.emplace();
    result.request->owner_ = this;
    result.request->id_ = live_->id;
    link(*result.request);
    return result;
}

SwaKVCacheStatus BoundedSwaKVPageManager::preparePrefill(RequestHandle& request,
                                                         std::vector<int32_t> const& effectiveInputLengths) {
    char const* op = "preparePrefill";
    Live* l = live(request, op);
    if (!l) return SwaKVCacheStatus::kPoisoned;
    if (l->phase != Phase::kAdmitted && l->phase != Phase::kIdle) requirePhase(op, *l, Phase::kIdle);
    if (l->decoded) contract(op, "a decode step already ran: no more prefill chunks");
    checkEndpoints(op, *l, effectiveInputLengths, false);
    if (lengths_ && l->phase == Phase::kAdmitted) {
        std::vector<int32_t> zero(l->rows.size(), 0);
        lengths_->set(zero.data(), static_cast<int32_t>(zero.size()));
    }
    for (size_t i = 0; i < l->rows.size(); ++i) advance(l->rows[i], effectiveInputLengths[i]);
    upload();
    l->devicePending = true;  // the engine's prefill runs next
    l->phase = Phase::kPrefillPending;
    return SwaKVCacheStatus::kOk;
}

SwaKVCacheStatus BoundedSwaKVPageManager::completePrefill(RequestHandle& request) {
    char const* op = "completePrefill";
    Live* l = live(request, op);
    if (!l) return SwaKVCacheStatus::kPoisoned;
    requirePhase(op, *l, Phase::kPrefillPending);
    if (!synchronize(*l)) return quarantine("completePrefill: the synchronisation failed");
    for (SwaKVCacheState& s : l->rows) applyRetirements(s);
    upload();
    l->phase = Phase::kIdle;
    return SwaKVCacheStatus::kOk;
}

SwaKVCacheStatus BoundedSwaKVPageManager::prepareDecodeStep(RequestHandle& request,
                                                            std::vector<int32_t> const& endpoints) {
    char const* op = "prepareDecodeStep";
    Live* l = live(request, op);
    if (!l) return SwaKVCacheStatus::kPoisoned;
    requirePhase(op, *l, Phase::kIdle);
    checkEndpoints(op, *l, endpoints, true);
    for (size_t i = 0; i < l->rows.size(); ++i) advance(l->rows[i], endpoints[i]);
    if (table_->dirty()) upload();
    l->devicePending = true;  // the engine's step runs next: finish or compaction waits for it
    l->decoded = true;
    l->phase = Phase::kDecodePending;
    return SwaKVCacheStatus::kOk;
}

SwaKVCacheStatus BoundedSwaKVPageManager::completeDecodeStep(RequestHandle& request) {
    char const* op = "completeDecodeStep";
    Live* l = live(request, op);
    if (!l) return SwaKVCacheStatus::kPoisoned;
    requirePhase(op, *l, Phase::kDecodePending);
    bool retiring = false;
    for (SwaKVCacheState const& s : l->rows) retiring = retiring || !s.pendingRetireBindings.empty();
    // A retiring page may still be read by the step: wait for it before the page can be bound again.
    if (retiring && !synchronize(*l)) return quarantine("completeDecodeStep: the synchronisation failed");
    for (SwaKVCacheState& s : l->rows) applyRetirements(s);
    if (table_->dirty()) upload();
    l->phase = Phase::kIdle;
    return SwaKVCacheStatus::kOk;
}

SwaKVCacheStatus BoundedSwaKVPageManager::beginBatchCompaction(RequestHandle& request,
                                                               std::vector<int32_t> const& oldToNew,
                                                               int32_t newBatchSize, TensorView& deviceBatchMapping) {
    char const* op = "beginBatchCompaction";
    Live* l = live(request, op);
    if (!l) return SwaKVCacheStatus::kPoisoned;
    requirePhase(op, *l, Phase::kIdle);
    int32_t const batch = static_cast<int32_t>(l->rows.size());
    if (static_cast<int32_t>(oldToNew.size()) != batch)
        contract(op,
                 "the map has " + str(static_cast<int64_t>(oldToNew.size())) + " entries for a batch of " + str(batch));
    std::vector<device::RowMove> moves;
    device::planCompaction("BoundedSwaKVPageManager::beginBatchCompaction", oldToNew.data(), batch, newBatchSize,
                           moves);
    if (deviceBatchMapping.data) {
        if (deviceBatchMapping.dtype != ScalarType::kInt32) contract(op, "deviceBatchMapping must be int32");
        if (deviceBatchMapping.elementCount() < batch)
            contract(op, "deviceBatchMapping holds " + str(deviceBatchMapping.elementCount()) + " entries, needs " +
                             str(batch));
        pool_->backend().upload(deviceBatchMapping.data, oldToNew.data(), static_cast<size_t>(batch) * sizeof(int32_t));
        l->devicePending = true;
    }
    l->pendingMap = oldToNew;
    l->pendingNewBatch = newBatchSize;
    l->phase = Phase::kCompactionPending;
    return SwaKVCacheStatus::kOk;
}

SwaKVCacheStatus BoundedSwaKVPageManager::compactBatch(RequestHandle& request) {
    char const* op = "compactBatch";
    Live* l = live(request, op);
    if (!l) return SwaKVCacheStatus::kPoisoned;
    requirePhase(op, *l, Phase::kCompactionPending);
    int32_t const oldBatch = static_cast<int32_t>(l->rows.size());
    for (int32_t i = 0; i < oldBatch; ++i)
        if (l->pendingMap[static_cast<size_t>(i)] < 0) table_->clearRow(l->rows[static_cast<size_t>(i)].resident.slot);
    upload();
    if (lengths_ && lengths_->activeBatch() == oldBatch)
        lengths_->compact(l->pendingMap.data(), oldBatch, l->pendingNewBatch);
    l->devicePending = true;
    // The retired rows' pages go back to the free list only once the device can no longer read them.
    if (!synchronize(*l)) {
        std::vector<uint8_t> cleared(static_cast<size_t>(oldBatch), 0);
        for (int32_t i = 0; i < oldBatch; ++i)
            cleared[static_cast<size_t>(i)] = l->pendingMap[static_cast<size_t>(i)] < 0;
        SwaKVCacheStatus const st = quarantine("compactBatch: the synchronisation failed");
        quarantine_.back().unmapped = std::move(cleared);
        return st;
    }
    std::vector<SwaKVCacheState> survivors;
    survivors.reserve(static_cast<size_t>(l->pendingNewBatch));
    for (int32_t i = 0; i < oldBatch; ++i) {
        SwaKVCacheState& s = l->rows[static_cast<size_t>(i)];
        if (l->pendingMap[static_cast<size_t>(i)] < 0) releaseRow(s);
        else survivors.push_back(std::move(s));
    }
    l->rows = std::move(survivors);
    l->pendingMap.clear();
    l->phase = Phase::kIdle;
    return SwaKVCacheStatus::kOk;
}

SwaKVCacheStatus BoundedSwaKVPageManager::finish(RequestHandle& request) {
    if (!request.owner_) return SwaKVCacheStatus::kOk;
    if (request.owner_ != this) contract("finish", "the request belongs to another manager");
    Live* l = nullptr;
    if (live_ && live_->id == request.id_) l = &*live_;
    bool quarantined = false;
    for (Quarantined const& q : quarantine_) quarantined = quarantined || q.id == request.id_;
    request.detach();
    if (!l) return quarantined ? SwaKVCacheStatus::kPoisoned : SwaKVCacheStatus::kOk;
    if (l->devicePending && !synchronize(*l)) {
        SwaKVCacheStatus const st = quarantine("finish: the synchronisation failed");
        upload();
        return st;
    }
    for (SwaKVCacheState& s : l->rows) releaseRow(s);
    live_.reset();
    upload();
    return SwaKVCacheStatus::kOk;
}

SwaKVCacheStatus BoundedSwaKVPageManager::shutdown() noexcept {
    bool stillFailing = false;
    for (auto it = quarantine_.begin(); it != quarantine_.end();) {
        bool ok = false;
        try {
            ok = synchronizer_(it->stream);
        } catch (...) {
            ok = false;
        }
        if (!ok) {
            stillFailing = true;
            ++it;
            continue;
        }
        for (SwaKVCacheState& s : it->rows) releaseRow(s);
        it = quarantine_.erase(it);
    }
    upload();
    if (stillFailing) {
        lastFailure_ = "shutdown: a quarantined request's synchronisation still fails";
        return SwaKVCacheStatus::kPoisoned;
    }
    poisoned_ = false;
    if (live_) {
        lastFailure_ = "shutdown: a request is still live";
        return SwaKVCacheStatus::kRequestFailed;
    }
    return SwaKVCacheStatus::kOk;
}

// ---- inspection ---------------------------------------------------------------------------------------------

SwaKVCacheState const& BoundedSwaKVPageManager::state(RequestHandle const& request, int32_t row) const {
    char const* op = "state";
    if (request.owner_ != this || !live_ || live_->id != request.id_)
        contract(op, "the handle is not this manager's live request");
    if (row < 0 || row >= static_cast<int32_t>(live_->rows.size()))
        contract(op, "row " + str(row) + " outside the batch of " + str(static_cast<int64_t>(live_->rows.size())));
    return live_->rows[static_cast<size_t>(row)];
}

void BoundedSwaKVPageManager::checkInvariants() const {
    std::string why;
    if (!table_->checkInvariants(&why)) broken("table: " + why);
    std::vector<uint8_t> owner(static_cast<size_t>(pool_->numPages()), 0);
    auto own = [&](PageId p, char const* where) {
        if (p < 0 || p >= pool_->numPages()) broken(std::string(where) + " holds page " + str(p) + " out of range");
        if (owner[static_cast<size_t>(p)]) broken("page " + str(p) + " is held twice (" + where + ")");
        owner[static_cast<size_t>(p)] = 1;
    };
    for (PageId p : freePages_) own(p, "free list");
    auto checkRow = [&](SwaKVCacheState const& s, bool settled, bool inTable) {
        std::string const at = "slot " + str(s.resident.slot);
        size_t const held = s.pageBindings.size() + s.pendingRetireBindings.size() + s.reservedPages.size();
        if (held != static_cast<size_t>(reservation_))
            broken(at + " holds " + str(static_cast<int64_t>(held)) + " pages, its reservation is " +
                   str(reservation_));
        int32_t const* row = table_->hostRow(s.resident.slot);
        if (!inTable) {  // a row a failed compaction dropped: it holds its pages, the table maps none of them
            for (SwaPageBinding const& b : s.pageBindings) own(b.page, "a dropped row's binding");
            for (SwaPageBinding const& b : s.pendingRetireBindings) own(b.page, "a dropped row's pending retirement");
            for (PageId p : s.reservedPages) own(p, "a dropped row's reservation");
            for (int32_t j = 0; j < table_->maxPagesPerSeq(); ++j)
                if (row[j] != -1) broken(at + " was dropped by a compaction but still maps logical page " + str(j));
            return;
        }
        std::vector<uint8_t> mapped(static_cast<size_t>(table_->maxPagesPerSeq()), 0);
        int32_t expect = s.retainedLogicalPageBegin;
        for (SwaPageBinding const& b : s.pageBindings) {
            own(b.page, "a binding");
            if (b.logicalPage != expect) broken(at + " bindings are not the contiguous retained range");
            ++expect;
            if (row[b.logicalPage] != b.page) broken(at + " logical page " + str(b.logicalPage) + " is not mapped");
            mapped[static_cast<size_t>(b.logicalPage)] = 1;
        }
        if (settled && expect != s.retainedLogicalPageEnd) broken(at + " bindings do not reach the range's end");
        int32_t const e = s.pendingEndpoint.value_or(s.exactResidentTokenCount);
        if (retainedBegin(e, s.windowSizeTokens, pageSize_) != s.retainedLogicalPageBegin ||
            retainedEnd(e, pageSize_) != s.retainedLogicalPageEnd)
            broken(at + " retained range does not match its endpoint " + str(e));
        for (SwaPageBinding const& b : s.pendingRetireBindings) {
            own(b.page, "a pending retirement");
            if (row[b.logicalPage] != b.page) broken(at + " a page pending retirement lost its entry");
            mapped[static_cast<size_t>(b.logicalPage)] = 1;
        }
        for (PageId p : s.reservedPages) own(p, "a reservation");
        for (int32_t j = 0; j < table_->maxPagesPerSeq(); ++j)
            if (!mapped[static_cast<size_t>(j)] && row[j] != -1)
                broken(at + " maps logical page " + str(j) + " outside its window");
    };
    if (live_)
        for (SwaKVCacheState const& s : live_->rows) checkRow(s, true, true);
    for (Quarantined const& q : quarantine_)
        for (size_t i = 0; i < q.rows.size(); ++i) checkRow(q.rows[i], true, i >= q.unmapped.size() || !q.unmapped[i]);
    for (int32_t p = 0; p < pool_->numPages(); ++p)
        if (!owner[static_cast<size_t>(p)]) broken("page " + str(p) + " is lost");
}

}  // namespace ctxcache::runtime
