// ReferenceEngine: construction, serve() and its waves' queue, SimModel launches, fault recovery and digests; one
// wave (the facade lifecycle of a batch, by phase) is BatchServer, in reference_engine_batch.cpp, and the state the
// two share is in reference_engine_internal.h. Contract: include/ctxcache/sim/reference_engine.h.
#include "ctxcache/sim/reference_engine.h"

#include <openssl/evp.h>

#include <algorithm>
#include <deque>
#include <string>
#include <utility>

#include "ctxcache/detail/contract_scope.h"
#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/device/snapshot_storage.h"
#include "ctxcache/errors.h"
#include "ctxcache/runtime/managed_kv_cache_request.h"
#include "ctxcache/sim/sim_kernels.h"
#include "reference_engine_internal.h"

namespace ctxcache::sim {

using runtime::ContextCacheCoordinator;
using runtime::DecodingInferenceContext;
using runtime::DecodingKvHeadroom;
using runtime::ManagedKVCacheRequest;
using runtime::ResidentRef;
using runtime::SequenceStatus;

namespace {

using ctxcache::detail::str;
constexpr ctxcache::detail::ContractScope contract{"ReferenceEngine"};

bool hasAttention(DeploymentKind k) { return k != DeploymentKind::kRecurrent; }
bool hasState(DeploymentKind k) { return k == DeploymentKind::kHybrid || k == DeploymentKind::kRecurrent; }

}  // namespace

char const* toString(DeploymentKind kind) noexcept {
    switch (kind) {
        case DeploymentKind::kAttention: return "attention";
        case DeploymentKind::kHybrid: return "hybrid";
        case DeploymentKind::kRecurrent: return "recurrent";
        case DeploymentKind::kEagle: return "eagle";
    }
    return "unknown";
}

// ---- construction ------------------------------------------------------------------------------------------

ReferenceEngine::ReferenceEngine(ReferenceEngineConfig const& config) : config_(config), hasher_(config.hashAlgorithm) {
    ReferenceEngineConfig const& c = config_;
    if (c.deployment > DeploymentKind::kEagle) contract("unknown deployment kind");
    if (c.pageSize <= 0 || c.basePages < 0 || c.maxBatch <= 0 || c.maxPagesPerSequence <= 0 || c.layers <= 0 ||
        c.kvHeads <= 0 || c.headDim <= 0 || c.vocabSize <= 0 || c.maxRecords < 0 || c.snapshotSlots < 0 ||
        c.recurrentLayers <= 0)
        contract(
            "sizes must be positive (page size, batch, pages per sequence, layers, heads, head dim, vocab, "
            "recurrent layers; base pages, records and snapshot slots non-negative)");
    // A pure-recurrent model has no attention layer, so no KV page: its pool may be empty (it is not built).
    if (c.basePages == 0 && hasAttention(c.deployment))
        contract(std::string("basePages must be positive for the ") + toString(c.deployment) +
                 " deployment: it has attention layers, whose KV lives in pages (0 pages is only for the "
                 "pure-recurrent deployment)");
    if (!(c.syncFailureRate >= 0.0 && c.syncFailureRate < 1.0)) contract("syncFailureRate must lie in [0, 1)");
    if (hasState(c.deployment) && c.snapshotSlots <= 0) contract("checkpoint deployments need snapshot slots");
    if (c.slidingWindow < 0) contract("slidingWindow must be >= 0");
    if (c.slidingWindow > 0 && c.deployment != DeploymentKind::kAttention)
        contract("a sliding window needs the attention deployment");
    if (c.slidingWindow > 0 && c.reuse) contract("a sliding window needs reuse off (the bounded-SWA backend)");
    if (c.speculative > SpeculativeKind::kMtp) contract("unknown speculative kind");
    bool const mtpHead = c.speculative == SpeculativeKind::kMtp;
    if (mtpHead && c.deployment != DeploymentKind::kHybrid)
        contract("an MTP head needs the hybrid deployment (Hybrid+MTP)");
    if (mtpHead && c.commitPolicy != runtime::ContextCacheCommitPolicy::kPrefillStateOnly)
        contract("Hybrid+MTP needs the prefill-state-only commit policy (Appendix C)");
    bool const swa = c.slidingWindow > 0 && c.swaPaging;
    if (c.sharedBackend) {
        backend_ = c.sharedBackend;
    } else {
        ownedBackend_ = device::createBackend(c.backend);
        backend_ = ownedBackend_.get();
    }
    storage_ = std::make_unique<Storage>();
    Storage& s = *storage_;
    device::KvPoolGeometry geometry{c.basePages, c.pageSize, c.kvDtype, {}};
    for (int32_t l = 0; l < c.layers; ++l) geometry.layers.push_back({c.kvHeads, c.headDim});
    runtime::ContextCachePhysicalResources resources;
    if (hasAttention(c.deployment)) {
        s.base = std::make_unique<device::KvPagePool>(*backend_, geometry);
        s.baseTable = std::make_unique<device::KvPageTable>(
            *backend_, c.maxBatch, c.maxPagesPerSequence, c.basePages,
            swa ? device::KvPageTable::Mode::kSparseWindow : device::KvPageTable::Mode::kDense);
        s.baseLengths = std::make_unique<device::KvLengths>(*backend_, c.maxBatch);
        resources.basePool = s.base.get();
        resources.basePageTable = s.baseTable.get();
        resources.baseLengths = s.baseLengths.get();
    }
    if (c.deployment == DeploymentKind::kEagle || mtpHead) {
        s.draft = std::make_unique<device::KvPagePool>(*backend_, geometry);
        s.draftTable = std::make_unique<device::KvPageTable>(*backend_, c.maxBatch, c.maxPagesPerSequence, c.basePages);
        s.draftLengths = std::make_unique<device::KvLengths>(*backend_, c.maxBatch);
        resources.draftPool = s.draft.get();
        resources.draftPageTable = s.draftTable.get();
        resources.draftLengths = s.draftLengths.get();
    }
    if (hasState(c.deployment)) {
        device::ResidentStateGeometry g;
        g.maxBatch = c.maxBatch;
        g.numLayers = c.recurrentLayers;
        g.recurrentHeads = 2;
        g.recurrentHeadDim = 4;
        g.stateSize = 4;
        g.recurrentDtype = device::DType::kFp32;
        g.convDim = 8;
        g.convKernel = 4;
        g.convDtype = device::DType::kFp16;
        g.hiddenSize = mtpHead ? kMtpHiddenSize : 0;
        s.state = std::make_unique<device::ResidentState>(*backend_, g);
        device::SnapshotBudgets budgets;
        budgets.boundaryHidden = mtpHead;
        budgets.recurrentBytes =
            static_cast<size_t>(c.snapshotSlots) * device::SnapshotStorage::recurrentBytesPerSlot(g, mtpHead);
        device::KvPagePool const* snapshotDraft = mtpHead ? s.draft.get() : nullptr;
        if (s.base)
            budgets.partialKvBytes = static_cast<size_t>(c.snapshotSlots) *
                                     device::SnapshotStorage::partialKvBytesPerSlot(
                                         &s.base->geometry(), snapshotDraft ? &snapshotDraft->geometry() : nullptr);
        s.snapshots =
            std::make_unique<device::SnapshotStorage>(*backend_, s.state.get(), s.base.get(), snapshotDraft, budgets);
        resources.residentState = s.state.get();
        resources.snapshots = s.snapshots.get();
    }
    s.stagingEntries = static_cast<size_t>(c.maxBatch) *
                       (static_cast<size_t>(c.maxPagesPerSequence) * static_cast<size_t>(c.pageSize) + 2);
    s.tokens = device::DeviceBuffer(*backend_, s.stagingEntries * sizeof(int32_t));
    s.media = device::DeviceBuffer(*backend_, s.stagingEntries * sizeof(uint32_t));
    s.sampled = device::DeviceBuffer(*backend_, static_cast<size_t>(c.maxBatch) * sizeof(int32_t));
    s.mapping = device::DeviceBuffer(*backend_, static_cast<size_t>(c.maxBatch) * sizeof(int32_t));
    if (mtpHead) {
        s.hidden = device::DeviceBuffer(*backend_, s.stagingEntries * kMtpHiddenSize * sizeof(uint16_t));
        s.boundary = device::DeviceBuffer(*backend_, kMtpHiddenSize * sizeof(uint16_t));
    }

    SimModelConfig mc;
    mc.seed = c.seed;
    mc.vocabSize = c.vocabSize;
    mc.maxSequences = c.maxBatch;
    SimModelStorage ms;
    ms.base = s.base.get();
    ms.baseTable = s.baseTable.get();
    ms.draft = s.draft.get();
    ms.draftTable = s.draftTable.get();
    ms.state = s.state.get();
    model_ = std::make_unique<SimModel>(*backend_, mc, ms);

    runtime::ContextCacheConfig cc;
    cc.maxRecords = c.maxRecords;
    cc.evictionPolicy = c.evictionPolicy;
    cc.hostTierPages = c.hostTierPages;
    cc.hostWritePolicy = c.hostWritePolicy;
    cc.hostStore = c.hostStore;
    cc.storeModel = c.storeModel;
    cc.maxBatch = c.maxBatch;
    cc.pageSize = c.deployment == DeploymentKind::kRecurrent ? c.pageSize : 0;
    cc.hashAlgorithm = c.hashAlgorithm;
    runtime::ContextCacheDeploymentProfile profile;
    switch (c.deployment) {
        case DeploymentKind::kAttention: break;
        case DeploymentKind::kHybrid:
            profile.baseStateKind = runtime::ContextCacheModelStateKind::kHybrid;
            if (mtpHead) profile.specReuseContract = runtime::SpecReuseContract{true, 1};
            break;
        case DeploymentKind::kRecurrent:
            profile.baseStateKind = runtime::ContextCacheModelStateKind::kPureRecurrent;
            break;
        case DeploymentKind::kEagle: profile.specReuseContract = runtime::SpecReuseContract{true, 1}; break;
    }
    faultState_ = 0x9E3779B97F4A7C15ull ^ c.faultSeed;
    if (swa)
        swa_ = std::make_unique<runtime::BoundedSwaKVPageManager>(
            runtime::BoundedSwaConfig{c.maxBatch, c.slidingWindow}, *s.base, *s.baseTable, s.baseLengths.get(),
            [this](runtime::StreamHandle) { return synchronize(); });
    else
        coordinator_ = std::make_unique<ContextCacheCoordinator>(
            cc, profile, resources, [this](runtime::StreamHandle) { return synchronize(); });
    for (int32_t slot = c.maxBatch - 1; slot >= 0; --slot) freeSlots_.push_back(slot);
    founderCap_ = c.maxBatch;
}

ReferenceEngine::~ReferenceEngine() {
    coordinator_.reset();
    swa_.reset();
    model_.reset();
    storage_.reset();
}

bool ReferenceEngine::synchronize() {
    ++stats_.syncCalls;
    backend_->synchronize();
    if (config_.syncFailureRate <= 0.0) return true;
    // splitmix64: a seeded, reproducible fault schedule.
    uint64_t z = (faultState_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double const u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
    if (u < config_.syncFailureRate) {
        ++stats_.syncFailures;
        return false;
    }
    return true;
}

ResidentRef ReferenceEngine::takeResident() {
    if (freeSlots_.empty()) throw InvariantError("ReferenceEngine: no free resident slot");
    ResidentRef r{freeSlots_.back(), nextEpoch_++};
    freeSlots_.pop_back();
    return r;
}

void ReferenceEngine::releaseResident(ResidentRef ref) { freeSlots_.push_back(ref.slot); }

uint32_t ReferenceEngine::salt(std::string const& lora) const {
    if (lora.empty()) return 0;
    Hash128 const h = hasher_.hashOpaqueIdentity(lora);
    return static_cast<uint32_t>(h.lo) | 1u;
}

std::vector<uint32_t> ReferenceEngine::mediaWords(EngineRequest const& request) const {
    if (request.media.empty()) return {};
    std::vector<uint32_t> words(request.tokens.size(), 0);
    for (runtime::MediaItem const& item : request.media) {
        std::string identity(1, static_cast<char>(item.modality));
        identity.append(reinterpret_cast<char const*>(item.bytes.data()), item.bytes.size());
        uint32_t const w = static_cast<uint32_t>(hasher_.hashOpaqueIdentity(identity).lo) | 1u;
        for (int32_t p = item.firstToken; p < item.firstToken + item.tokenCount; ++p)
            if (p >= 0 && static_cast<size_t>(p) < words.size()) words[static_cast<size_t>(p)] = w;
    }
    return words;
}

// A batch row for request `index` on `resident`, before its prefill.
std::unique_ptr<ReferenceEngine::Row> ReferenceEngine::newRow(size_t index, EngineRequest const& request,
                                                              ResidentRef resident) const {
    auto row = std::make_unique<Row>();
    row->request = index;
    row->resident = resident;
    row->history = request.tokens;
    row->inputLength = static_cast<int32_t>(request.tokens.size());
    row->maxNewTokens = request.maxNewTokens;
    row->cancelAfter = request.cancelAfter;
    row->failAfter = request.failAfter;
    row->salt = salt(request.lora);
    row->media = mediaWords(request);
    return row;
}

void ReferenceEngine::validate(std::vector<EngineRequest> const& requests) const {
    for (size_t i = 0; i < requests.size(); ++i) {
        EngineRequest const& r = requests[i];
        std::string const where = "requests[" + str(static_cast<int64_t>(i)) + "]";
        if (r.tokens.empty()) contract(where + " has an empty prompt");
        if (r.maxNewTokens < 1) contract(where + " maxNewTokens must be >= 1");
        int64_t const worst = static_cast<int64_t>(r.tokens.size()) + r.maxNewTokens + 1;
        int64_t const pages = (worst + config_.pageSize - 1) / config_.pageSize;
        if (hasAttention(config_.deployment) && pages > config_.maxPagesPerSequence)
            contract(where + " needs up to " + str(pages) + " pages, a sequence holds " +
                     str(config_.maxPagesPerSequence));
        if (swa_ && swa_->privatePagesPerSequence() > config_.basePages)
            contract(where + " needs a reservation of " + str(swa_->privatePagesPerSequence()) +
                     " pages, the pool has " + str(config_.basePages));
        else if (!swa_ && hasAttention(config_.deployment) && pages > config_.basePages)
            contract(where + " needs up to " + str(pages) + " pages, the pool has " + str(config_.basePages));
        for (runtime::MediaItem const& m : r.media)
            if (m.tokenCount <= 0 || m.firstToken < 0 ||
                static_cast<int64_t>(m.firstToken) + m.tokenCount > static_cast<int64_t>(r.tokens.size()))
                contract(where + " has a media span outside its prompt");
        validateRetentionSpec(("ReferenceEngine: " + where + ".retention").c_str(), r.retention);
    }
}

void ReferenceEngine::arrive(EngineRequest const& request) {
    if (!request.arrivalNs || !coordinator_) return;
    ContextCacheManager const& m = coordinator_->manager();
    if (!m.retentionClockDriven() || *request.arrivalNs > m.retentionTime())
        coordinator_->setRetentionTime(*request.arrivalNs);
}

void ReferenceEngine::setRetentionTime(int64_t nowNs) { coordinator().setRetentionTime(nowNs); }

// ---- kernels ----------------------------------------------------------------------------------------------

namespace {

// Packs each row's tokens [begin, begin + count) (and media words) into the staging buffers and fills the op's
// sequence descriptors.
struct Packer {
    std::vector<int32_t> tokens;
    std::vector<uint32_t> media;
    std::vector<SimSequence> seqs;
    std::vector<size_t> tokenOffsets, mediaOffsets;
    std::vector<bool> hasMedia;

    void add(int32_t slot, int32_t begin, int32_t end, uint32_t salt, int32_t const* src, int32_t count,
             std::vector<uint32_t> const* words) {
        SimSequence s;
        s.slot = slot;
        s.begin = begin;
        s.end = end;
        s.salt = salt;
        s.tokenCount = count;
        tokenOffsets.push_back(tokens.size());
        tokens.insert(tokens.end(), src, src + count);
        bool const m = words && !words->empty();
        hasMedia.push_back(m);
        mediaOffsets.push_back(media.size());
        if (m)
            for (int32_t i = 0; i < count; ++i) {
                size_t const p = static_cast<size_t>(begin + i);
                media.push_back(p < words->size() ? (*words)[p] : 0u);
            }
        seqs.push_back(s);
    }

    // Uploads and points the descriptors at the device copies.
    void upload(device::DeviceBuffer& tokenBuffer, device::DeviceBuffer& mediaBuffer) {
        if (!tokens.empty()) tokenBuffer.write(0, tokens.data(), tokens.size() * sizeof(int32_t));
        if (!media.empty()) mediaBuffer.write(0, media.data(), media.size() * sizeof(uint32_t));
        auto* t = static_cast<int32_t const*>(tokenBuffer.data());
        auto* m = static_cast<uint32_t const*>(mediaBuffer.data());
        for (size_t i = 0; i < seqs.size(); ++i) {
            seqs[i].tokens = t + tokenOffsets[i];
            seqs[i].media = hasMedia[i] ? m + mediaOffsets[i] : nullptr;
        }
    }
};

}  // namespace

// Attention and recurrent state over [prefillStart, input length) of each row.
void ReferenceEngine::prefillRows(std::vector<Row*> const& rows) {
    Packer p;
    for (Row* r : rows) {
        int32_t const count = r->inputLength - r->prefillStart;
        p.add(r->resident.slot, r->prefillStart, r->inputLength, r->salt, r->history.data() + r->prefillStart, count,
              &r->media);
    }
    p.upload(storage_->tokens, storage_->media);
    if (hasAttention(config_.deployment)) model_->attention(p.seqs.data(), static_cast<int32_t>(p.seqs.size()));
    if (hasState(config_.deployment)) model_->recurrent(p.seqs.data(), static_cast<int32_t>(p.seqs.size()));
}

// Bounded-SWA prefill: chunks of at most W tokens (a chunk's writes then fall inside its new window, and its first
// position reads the previous one, still mapped until the chunk completes), each prepared on the facade.
bool ReferenceEngine::prefillWindowed(ManagedKVCacheRequest& request, std::vector<Row*> const& rows) {
    int32_t const W = config_.slidingWindow;
    int32_t longest = 0;
    for (Row* r : rows) longest = std::max(longest, r->inputLength);
    for (int32_t begin = 0; begin < longest; begin += W) {
        std::vector<int32_t> ends;
        Packer p;
        for (Row* r : rows) {
            int32_t const from = std::min(begin, r->inputLength);
            int32_t const to = std::min(begin + W, r->inputLength);
            ends.push_back(to);
            if (from < to) p.add(r->resident.slot, from, to, r->salt, r->history.data() + from, to - from, &r->media);
        }
        if (!request.prepareSwaPrefill(ends)) return false;
        p.upload(storage_->tokens, storage_->media);
        model_->attention(p.seqs.data(), static_cast<int32_t>(p.seqs.size()));
    }
    return true;
}

namespace {
std::vector<int32_t> sampleRows(SimModel& model, device::DeviceBuffer& out, std::vector<SimSampleRequest> const& reqs) {
    std::vector<int32_t> tokens(reqs.size());
    if (reqs.empty()) return tokens;
    model.sample(reqs.data(), static_cast<int32_t>(reqs.size()), static_cast<int32_t*>(out.data()));
    out.read(0, tokens.data(), tokens.size() * sizeof(int32_t));
    return tokens;
}
}  // namespace

// ---- serving ----------------------------------------------------------------------------------------------

std::vector<EngineOutput> ReferenceEngine::serve(std::vector<EngineRequest> const& requests) {
    validate(requests);
    std::vector<EngineOutput> outputs(requests.size());
    for (EngineOutput& o : outputs) o.attempts = 0;
    std::vector<uint8_t> done(requests.size(), 0);
    seatingFailuresLeft_.clear();
    for (EngineRequest const& r : requests) seatingFailuresLeft_.push_back(std::max(0, r.seatingFailures));
    firstReuse_.assign(requests.size(), -1);
    std::vector<size_t> queue;
    queue.reserve(requests.size());
    for (size_t i = requests.size(); i-- > 0;) queue.push_back(i);  // back = next
    while (!queue.empty()) {
        checkInterrupt();
        serveBatch(queue, requests, outputs, done);
    }
    return outputs;
}

void ReferenceEngine::requestInterrupt(bool requested) noexcept {
    interruptSource_->store(requested, std::memory_order_relaxed);
}

void ReferenceEngine::checkInterrupt() {
    if (interruptSource_->load(std::memory_order_relaxed) && interruptSource_->exchange(false))
        throw InterruptedError(
            "ReferenceEngine::serve: interrupted (requestInterrupt); nothing of this call was "
            "returned, and requests it finished stay published");
}

std::vector<EngineOutput> ReferenceEngine::coldReference(std::vector<EngineRequest> const& requests) const {
    ReferenceEngineConfig cold = config_;
    cold.reuse = false;
    cold.hostTierPages = 0;  // a cold run reuses nothing, from any tier
    cold.hostStore = {};
    cold.swaPaging = false;  // the full history: what a window must reproduce
    cold.syncFailureRate = 0.0;
    ReferenceEngine engine(cold);
    engine.interruptSource_ = interruptSource_;  // an interrupt of this engine stops its cold run too
    return engine.serve(requests);
}

bool ReferenceEngine::backendPoisoned() const { return swa_ ? swa_->poisoned() : coordinator_->poisoned(); }

std::string const& ReferenceEngine::backendFailure() const {
    return swa_ ? swa_->lastFailure() : coordinator_->lastFailure();
}

runtime::ContextCacheCoordinator& ReferenceEngine::coordinator() {
    if (!coordinator_) contract("bounded-SWA paging has no coordinator");
    return *coordinator_;
}

int32_t ReferenceEngine::peakPagesPerSequence() const noexcept { return swa_ ? swa_->peakBoundPages() : 0; }

void ReferenceEngine::recover() {
    if (swa_) {
        for (int attempt = 0; attempt < 10000; ++attempt) {
            runtime::SwaKVCacheStatus const s = swa_->shutdown();
            if (s == runtime::SwaKVCacheStatus::kOk) return;
            if (s == runtime::SwaKVCacheStatus::kRequestFailed)
                throw InvariantError("ReferenceEngine: shutdown found a live request: " + swa_->lastFailure());
        }
        throw InvariantError("ReferenceEngine: the device never recovered");
    }
    for (int attempt = 0; attempt < 10000; ++attempt) {
        runtime::ContextCacheCoordinatorStatus const s = coordinator_->shutdown();
        if (s == runtime::ContextCacheCoordinatorStatus::kOk) return;
        if (s == runtime::ContextCacheCoordinatorStatus::kRequestFailed)
            throw InvariantError("ReferenceEngine: shutdown found a live request: " + coordinator_->lastFailure());
    }
    throw InvariantError("ReferenceEngine: the device never recovered");
}

// Sample each row's lookahead token from the state after its prompt; EAGLE rows then compute their draft KV
// over [prefillStart, input length) (the draft at p reads token p + 1, the last of which is the lookahead).
void ReferenceEngine::finishPrefill(std::vector<Row*> const& rows) {
    std::vector<SimSampleRequest> reqs;
    for (Row* r : rows)
        reqs.push_back({r->resident.slot, r->inputLength, mtp() && r->inputLength >= 2 ? r->inputLength - 2 : -1,
                        config_.slidingWindow});
    std::vector<int32_t> const next = sampleRows(*model_, storage_->sampled, reqs);
    for (size_t i = 0; i < rows.size(); ++i) {
        rows[i]->history.push_back(next[i]);
        rows[i]->generated = 1;
    }
    if (mtp())
        for (Row* r : rows) mtpDraft(*r, r->inputLength - 1, r->inputLength);
    if (config_.deployment == DeploymentKind::kEagle) {
        Packer p;
        for (Row* r : rows)
            p.add(r->resident.slot, r->prefillStart, r->inputLength, r->salt, r->history.data() + r->prefillStart,
                  r->inputLength - r->prefillStart + 1, nullptr);
        p.upload(storage_->tokens, storage_->media);
        model_->draft(p.seqs.data(), static_cast<int32_t>(p.seqs.size()));
    }
}

void ReferenceEngine::decodeRows(std::vector<Row*> const& rows) {
    if (rows.empty()) return;
    bool const eagle = config_.deployment == DeploymentKind::kEagle;
    bool const drafts = eagle || mtp();
    Packer p;
    for (Row* r : rows) {
        int32_t const pos = r->committed();
        p.add(r->resident.slot, pos, pos + 1, r->salt, r->history.data() + pos, 1, nullptr);
    }
    p.upload(storage_->tokens, storage_->media);
    if (hasAttention(config_.deployment)) model_->attention(p.seqs.data(), static_cast<int32_t>(p.seqs.size()));
    if (hasState(config_.deployment)) model_->recurrent(p.seqs.data(), static_cast<int32_t>(p.seqs.size()));
    std::vector<SimSampleRequest> reqs;
    for (Row* r : rows) {
        int32_t const pos = r->committed();
        reqs.push_back({r->resident.slot, pos + 1, drafts ? pos - 1 : -1, config_.slidingWindow});
    }
    if (mtp())
        for (Row* r : rows) computeHidden(*r, r->committed(), r->committed() + 1);
    std::vector<int32_t> const next = sampleRows(*model_, storage_->sampled, reqs);
    for (size_t i = 0; i < rows.size(); ++i) rows[i]->history.push_back(next[i]);
    if (mtp())
        for (Row* r : rows) mtpDraft(*r, r->committed(), r->committed() + 1);
    if (eagle) {
        Packer d;
        for (Row* r : rows) {
            int32_t const pos = r->committed();
            d.add(r->resident.slot, pos, pos + 1, r->salt, r->history.data() + pos, 2, nullptr);
        }
        d.upload(storage_->tokens, storage_->media);
        model_->draft(d.seqs.data(), static_cast<int32_t>(d.seqs.size()));
    }
    for (Row* r : rows) ++r->generated;
}

// Hybrid+MTP: the hidden rows of [begin, end), each word a mix of base layer 0's stored K and V words at p (read
// back through the page table), so the rows depend on the stored bytes.
void ReferenceEngine::computeHidden(Row& row, int32_t begin, int32_t end) const {
    device::KvPagePool const& pool = *storage_->base;
    device::KvPageTable const& table = *storage_->baseTable;
    int32_t const P = pool.pageSize();
    int32_t const elements = config_.kvHeads * config_.headDim;
    uint32_t const wordBytes = static_cast<uint32_t>(device::dtypeSize(config_.kvDtype));
    int32_t const* entries = table.hostRow(row.resident.slot);
    size_t const needed = static_cast<size_t>(end) * kMtpHiddenSize;
    if (row.hidden.size() < needed) row.hidden.resize(needed, 0);
    std::vector<unsigned char> k(pool.pageBytes(0)), v(pool.pageBytes(0));
    int32_t loaded = -1;
    for (int32_t p = begin; p < end; ++p) {
        if (p / P != loaded) {
            loaded = p / P;
            int32_t const flatK = entries[loaded];
            int32_t const flatV = entries[table.maxPagesPerSeq() + loaded];
            if (flatK < 0 || flatV < 0) throw InvariantError("ReferenceEngine: a hidden row's base page is unmapped");
            pool.readPages(0, flatK, 1, k.data(), k.size());
            pool.readPages(0, flatV, 1, v.data(), v.size());
        }
        for (int32_t j = 0; j < kMtpHiddenSize; ++j) {
            int64_t const index = static_cast<int64_t>(p % P) * elements + j % elements;
            uint32_t const kw = simLoadWord(k.data(), index, wordBytes);
            uint32_t const vw = simLoadWord(v.data(), index, wordBytes);
            row.hidden[static_cast<size_t>(p) * kMtpHiddenSize + static_cast<size_t>(j)] = static_cast<uint16_t>(
                simMix5(config_.seed, kSimTagHidden, kw, vw, static_cast<uint32_t>(p), static_cast<uint32_t>(j)));
        }
    }
}

// Hybrid+MTP: the draft over [begin, end) from the row's hidden rows and tokens [begin, end].
void ReferenceEngine::mtpDraft(Row& row, int32_t begin, int32_t end) {
    if (begin >= end) return;
    size_t const rows = static_cast<size_t>(end - begin);
    storage_->hidden.write(0, row.hidden.data() + static_cast<size_t>(begin) * kMtpHiddenSize,
                           rows * kMtpHiddenSize * sizeof(uint16_t));
    Packer p;
    p.add(row.resident.slot, begin, end, row.salt, row.history.data() + begin, end - begin + 1, nullptr);
    p.upload(storage_->tokens, storage_->media);
    p.seqs[0].hiddenRow = 0;
    model_->draft(p.seqs.data(), 1, static_cast<uint16_t const*>(storage_->hidden.data()), kMtpHiddenSize,
                  static_cast<int32_t>(rows));
}

runtime::TensorView ReferenceEngine::boundaryView() const {
    return runtime::TensorView{storage_->boundary.data(),
                               runtime::ScalarType::kFp16,
                               {1, kMtpHiddenSize},
                               backend_->kind() == device::BackendKind::kCuda ? 0 : -1};
}

// The engine owns its rows' device KV lengths after the coordinator's reset: each is the committed length (the
// KV written so far).
void ReferenceEngine::setLengths(std::vector<std::unique_ptr<Row>> const& rows) {
    std::vector<int32_t> lengths;
    for (auto const& r : rows) lengths.push_back(r->committed());
    int32_t const count = static_cast<int32_t>(lengths.size());
    if (storage_->baseLengths) storage_->baseLengths->set(lengths.data(), count);
    if (storage_->draftLengths) storage_->draftLengths->set(lengths.data(), count);
}

// ---- digests and checks -----------------------------------------------------------------------------------

std::array<uint8_t, 32> ReferenceEngine::digest(Row const& row) const {
    Storage const& s = *storage_;
    EVP_MD_CTX* md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), nullptr);
    int32_t const length = row.committed();
    std::vector<unsigned char> page;
    auto hashPool = [&](device::KvPagePool const& pool, device::KvPageTable const& table) {
        int32_t const* entries = table.hostRow(row.resident.slot);
        int32_t const width = table.maxPagesPerSeq();
        int32_t const P = pool.pageSize();
        int32_t const W = config_.slidingWindow;
        for (int32_t l = 0; l < pool.numLayers(); ++l) {
            page.resize(pool.pageBytes(l));
            size_t const tokenBytes = pool.tokenBytes(l);
            if (W > 0) {  // the retained positions [committed - W, committed), one at a time
                for (int32_t half = 0; half < 2; ++half)
                    for (int32_t q = std::max(0, length - W); q < length; ++q) {
                        int32_t const flat = entries[half * width + q / P];
                        if (flat < 0) throw InvariantError("ReferenceEngine: digest found an unmapped page");
                        pool.readPages(l, flat, 1, page.data(), page.size());
                        EVP_DigestUpdate(md, page.data() + static_cast<size_t>(q % P) * tokenBytes, tokenBytes);
                    }
                continue;
            }
            for (int32_t half = 0; half < 2; ++half)
                for (int32_t j = 0; j * P < length; ++j) {
                    int32_t const flat = entries[half * width + j];
                    if (flat < 0) throw InvariantError("ReferenceEngine: digest found an unmapped page");
                    pool.readPages(l, flat, 1, page.data(), page.size());
                    size_t const valid = static_cast<size_t>(std::min(P, length - j * P));
                    EVP_DigestUpdate(md, page.data(), valid * tokenBytes);
                }
        }
    };
    if (s.base) hashPool(*s.base, *s.baseTable);
    if (s.draft) hashPool(*s.draft, *s.draftTable);
    if (s.state) {
        std::vector<unsigned char> bytes;
        for (int32_t l = 0; l < s.state->numLayers(); ++l)
            for (device::StatePart part : {device::StatePart::kRecurrent, device::StatePart::kConv}) {
                bytes.resize(s.state->rowBytes(part));
                s.state->readRow(part, l, row.resident.slot, bytes.data(), bytes.size());
                EVP_DigestUpdate(md, bytes.data(), bytes.size());
            }
    }
    std::array<uint8_t, 32> out{};
    unsigned int size = 0;
    EVP_DigestFinal_ex(md, out.data(), &size);
    EVP_MD_CTX_free(md);
    return out;
}

runtime::ContextCacheMetrics ReferenceEngine::metrics() const {
    if (coordinator_) return coordinator_->metrics();
    runtime::ContextCacheMetrics m;  // bounded-SWA paging: only the base pool's occupancy
    m.baseKvPages.capacity = config_.basePages;
    m.baseKvPages.free = swa_->freePageCount();
    return m;
}

void ReferenceEngine::checkInvariants() const {
    if (swa_) {
        swa_->checkInvariants();
        if (swa_->hasLiveRequest()) throw InvariantError("ReferenceEngine: a request is still live");
    } else {
        coordinator_->checkInvariants();
        if (coordinator_->activeRequestCount() != 0) throw InvariantError("ReferenceEngine: a request is still live");
    }
    if (freeSlots_.size() != static_cast<size_t>(config_.maxBatch))
        throw InvariantError("ReferenceEngine: " + str(static_cast<int64_t>(freeSlots_.size())) + " of " +
                             str(config_.maxBatch) + " resident slots are free");
}

bool ReferenceEngine::drainAndCheckPoolsFull(std::string* why) {
    if (swa_) {
        if (swa_->freePageCount() == config_.basePages) return true;
        if (why) *why = "base pages: " + str(swa_->freePageCount()) + " of " + str(config_.basePages) + " free";
        return false;
    }
    ContextCacheManager& manager = coordinator_->manager();
    for (RecordId id : manager.records().lruToMru()) manager.evictRecord(id);
    runtime::ContextCacheMetrics const m = coordinator_->metrics();
    auto full = [&](runtime::ContextCachePoolMetrics const& p, char const* name) {
        if (p.free == p.capacity) return true;
        if (why) *why = std::string(name) + ": " + str(p.free) + " of " + str(p.capacity) + " free";
        return false;
    };
    return full(m.baseKvPages, "base pages") && full(m.draftKvPages, "draft pages") &&
           full(m.recurrentSnapshots, "recurrent snapshots") && full(m.partialKvSnapshots, "partial-KV snapshots");
}

}  // namespace ctxcache::sim
