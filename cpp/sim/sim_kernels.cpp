// SimModel: binding and validation on the host, then one launch of the CPU loops or the CUDA kernels, picked by
// the backend's kind. Every check lives here, so both implementations accept and reject the same calls.
#include "ctxcache/sim/sim_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "ctxcache/device/device_error.h"
#include "ctxcache/errors.h"
#include "sim_launchers.h"

namespace ctxcache::sim {

using device::BackendKind;
using device::DeviceBackend;
using device::dtypeSize;
using device::KvPagePool;
using device::KvPageTable;
using device::StatePart;

namespace {

[[noreturn]] void fail(char const* op, std::string const& why) {
    throw ContractError(std::string("SimModel::") + op + ": " + why);
}

std::string seq(int32_t i) { return "sequence " + std::to_string(i) + ": "; }

constexpr size_t kTableAlignment = 16;
size_t alignTable(size_t value) { return (value + kTableAlignment - 1) / kTableAlignment * kTableAlignment; }

int32_t checkedInt32(char const* what, int64_t value) {
    if (value <= 0 || value > std::numeric_limits<int32_t>::max())
        fail("SimModel", std::string(what) + " " + std::to_string(value) + " is outside [1, INT32_MAX]");
    return static_cast<int32_t>(value);
}

int64_t tableCapacity(KvPageTable const& table, KvPagePool const& pool) {
    return static_cast<int64_t>(table.maxPagesPerSeq()) * pool.pageSize();
}

// Every entry of `slot` for the positions [first, last] (both K and V rows) addresses the pool: K in
// [0, numPages), V in [numPages, 2 * numPages). The caller checked last < the table's capacity.
void checkMapped(char const* op, int32_t i, char const* which, KvPageTable const& table, int32_t pageSize, int32_t slot,
                 int32_t first, int32_t last) {
    int32_t const* row = table.hostRow(slot);
    int32_t const n = table.numPages();
    for (int32_t page = first / pageSize; page <= last / pageSize; ++page) {
        int32_t const k = row[page];
        int32_t const v = row[table.maxPagesPerSeq() + page];
        if (k < 0 || k >= n || v < n || v >= 2 * n)
            fail(op, seq(i) + which + " page table entry (slot " + std::to_string(slot) + ", logical page " +
                         std::to_string(page) + ") is " + std::to_string(k) + "/" + std::to_string(v) +
                         ", not a mapped page of [0, " + std::to_string(n) + ")");
    }
}

void checkTable(char const* op, char const* which, KvPageTable const& table) {
    if (table.dirty()) fail(op, std::string(which) + " page table has changes not uploaded: call upload() first");
}

}  // namespace

SimModel::SimModel(DeviceBackend& backend, SimModelConfig const& config, SimModelStorage const& storage)
    : backend_(&backend), config_(config), storage_(storage) {
    char const* op = "SimModel";
    if (config.vocabSize <= 0) fail(op, "vocabSize must be positive (got " + std::to_string(config.vocabSize) + ")");
    if (config.maxSequences <= 0 || config.maxSequences > 65535)
        fail(op, "maxSequences must be in [1, 65535] (got " + std::to_string(config.maxSequences) + ")");
    SimModelStorage const& s = storage;
    if ((s.base == nullptr) != (s.baseTable == nullptr)) fail(op, "a base pool and its page table go together");
    if ((s.draft == nullptr) != (s.draftTable == nullptr)) fail(op, "a draft pool and its page table go together");
    if (s.draft && !s.base) fail(op, "a draft pool needs a base pool (the draft reads base layer 0)");
    if (!s.base && !s.state) fail(op, "no base pool and no resident state: nothing to model");
    if (s.state && s.state->numLayers() == 0 && !s.base) fail(op, "the resident state has no recurrent layer");
    auto sameBackend = [&](DeviceBackend const& other, char const* what) {
        if (&other != &backend) fail(op, std::string(what) + " lives on another backend");
    };
    if (s.base) {
        sameBackend(s.base->backend(), "the base pool");
        sameBackend(s.baseTable->backend(), "the base page table");
        if (s.baseTable->numPages() != s.base->numPages())
            fail(op, "the base page table addresses " + std::to_string(s.baseTable->numPages()) +
                         " pages, the base pool has " + std::to_string(s.base->numPages()));
    }
    if (s.draft) {
        sameBackend(s.draft->backend(), "the draft pool");
        sameBackend(s.draftTable->backend(), "the draft page table");
        if (s.draftTable->numPages() != s.draft->numPages())
            fail(op, "the draft page table addresses " + std::to_string(s.draftTable->numPages()) +
                         " pages, the draft pool has " + std::to_string(s.draft->numPages()));
    }
    if (s.state) sameBackend(s.state->backend(), "the resident state");
    if (backend.kind() == BackendKind::kCuda) {
        launchers_ = detail::cudaSimLaunchers();
        if (!launchers_)
            throw device::BackendUnavailableError("SimModel: this build has no CUDA sim kernels (built without CUDA)");
    }

    // Descriptors of the bound storage: [base layers | draft layers | state segments | sample segments | requests].
    std::vector<SimKvLayer> baseLayers, draftLayers;
    auto layersOf = [&](KvPagePool const& pool, std::vector<SimKvLayer>& layers) {
        int64_t work = 0;
        for (int32_t l = 0; l < pool.numLayers(); ++l) {
            device::KvLayerShape const shape = pool.geometry().layers[static_cast<size_t>(l)];
            int32_t const elements =
                checkedInt32("kvHeads * headDim", static_cast<int64_t>(shape.kvHeads) * shape.headDim);
            layers.push_back(SimKvLayer{pool.layerData(l), elements, 0, work});
            work += 2 * static_cast<int64_t>(elements);
        }
        return work;
    };
    auto viewOf = [&](KvPagePool const& pool, KvPageTable const& table, int64_t work) {
        SimKvView v{};
        v.pageTable = table.deviceView();
        v.numLayers = pool.numLayers();
        v.numPages = pool.numPages();
        v.pageSize = pool.pageSize();
        v.maxPagesPerSeq = table.maxPagesPerSeq();
        v.wordBytes = static_cast<uint32_t>(dtypeSize(pool.dtype()));
        v.totalWork = work;
        return v;
    };
    if (s.base) baseView_ = viewOf(*s.base, *s.baseTable, layersOf(*s.base, baseLayers));
    if (s.draft) draftView_ = viewOf(*s.draft, *s.draftTable, layersOf(*s.draft, draftLayers));
    for (size_t l = 0; l < baseLayers.size(); ++l)
        for (int32_t source : {kSimSourceBaseK, kSimSourceBaseV}) {
            sampleSegments_.push_back(SimSampleSegment{baseLayers[l].data, 0, sampleWork_, baseLayers[l].elements,
                                                       baseView_.wordBytes, static_cast<int32_t>(l), source});
            sampleWork_ += baseLayers[l].elements;
        }
    for (size_t l = 0; l < draftLayers.size(); ++l)
        for (int32_t source : {kSimSourceDraftK, kSimSourceDraftV}) {
            sampleSegments_.push_back(SimSampleSegment{draftLayers[l].data, 0, sampleWork_, draftLayers[l].elements,
                                                       draftView_.wordBytes, static_cast<int32_t>(l), source});
            sampleWork_ += draftLayers[l].elements;
        }
    if (s.state) {
        device::ResidentStateGeometry const& g = s.state->geometry();
        for (int32_t layer = 0; layer < s.state->numLayers(); ++layer)
            for (StatePart part : {StatePart::kRecurrent, StatePart::kConv}) {
                size_t const bytes = s.state->rowBytes(part);
                if (bytes == 0) continue;
                uint32_t const wordBytes =
                    static_cast<uint32_t>(dtypeSize(part == StatePart::kRecurrent ? g.recurrentDtype : g.convDtype));
                int32_t const words = checkedInt32("state row words", static_cast<int64_t>(bytes / wordBytes));
                device::CompactTensor const slab = s.state->slab(part, layer);
                uint32_t const tag = part == StatePart::kRecurrent ? kSimTagRecurrent : kSimTagConv;
                int32_t const source = part == StatePart::kRecurrent ? kSimSourceRecurrent : kSimSourceConv;
                stateSegments_.push_back(
                    SimStateSegment{slab.base, slab.rowBytes, stateWork_, words, wordBytes, layer, tag});
                sampleSegments_.push_back(
                    SimSampleSegment{slab.base, slab.rowBytes, sampleWork_, words, wordBytes, layer, source});
                stateWork_ += words;
                sampleWork_ += words;
            }
    }
    size_t const baseOffset = 0;
    size_t const draftOffset = alignTable(baseOffset + baseLayers.size() * sizeof(SimKvLayer));
    size_t const stateOffset = alignTable(draftOffset + draftLayers.size() * sizeof(SimKvLayer));
    size_t const sampleOffset = alignTable(stateOffset + stateSegments_.size() * sizeof(SimStateSegment));
    requestsOffset_ = alignTable(sampleOffset + sampleSegments_.size() * sizeof(SimSampleSegment));
    size_t const requestBytes = std::max(sizeof(SimSequence), sizeof(SimSampleRequest));
    table_ = device::DeviceBuffer(backend, requestsOffset_ + static_cast<size_t>(config.maxSequences) * requestBytes);
    std::vector<unsigned char> host(requestsOffset_, 0);
    auto place = [&](size_t offset, void const* data, size_t bytes) {
        if (bytes > 0) std::memcpy(host.data() + offset, data, bytes);
        return table_.bytes() + offset;
    };
    baseView_.layers = reinterpret_cast<SimKvLayer const*>(
        place(baseOffset, baseLayers.data(), baseLayers.size() * sizeof(SimKvLayer)));
    draftView_.layers = reinterpret_cast<SimKvLayer const*>(
        place(draftOffset, draftLayers.data(), draftLayers.size() * sizeof(SimKvLayer)));
    place(stateOffset, stateSegments_.data(), stateSegments_.size() * sizeof(SimStateSegment));
    place(sampleOffset, sampleSegments_.data(), sampleSegments_.size() * sizeof(SimSampleSegment));
    stateTable_ = reinterpret_cast<SimStateSegment const*>(table_.bytes() + stateOffset);
    sampleTable_ = reinterpret_cast<SimSampleSegment const*>(table_.bytes() + sampleOffset);
    table_.write(0, host.data(), host.size());
    pageOwner_.assign(static_cast<size_t>(std::max(s.base ? s.base->numPages() : 0, s.draft ? s.draft->numPages() : 0)),
                      -1);
}

void SimModel::checkCount(char const* op, void const* items, int32_t count) const {
    if (count < 0) fail(op, "count is negative (" + std::to_string(count) + ")");
    if (count > config_.maxSequences)
        fail(op, std::to_string(count) + " sequences exceed the model's maxSequences " +
                     std::to_string(config_.maxSequences));
    if (count > 0 && !items) fail(op, "null array with a non-zero count");
}

// No page one sequence writes is written or read by another sequence of the launch.
void SimModel::checkDisjoint(char const* op, SimSequence const* sequences, int32_t count, KvPageTable const& table,
                             int32_t pageSize) const {
    std::vector<int32_t> touched;
    std::string why;
    for (int32_t i = 0; i < count && why.empty(); ++i) {
        SimSequence const& s = sequences[i];
        if (s.begin >= s.end) continue;
        int32_t const* row = table.hostRow(s.slot);
        for (int32_t page = s.begin / pageSize; page <= (s.end - 1) / pageSize; ++page) {
            int32_t& owner = pageOwner_[static_cast<size_t>(row[page])];
            if (owner == -1) {
                owner = i;
                touched.push_back(row[page]);
            } else if (owner != i) {
                why = seq(i) + "writes page " + std::to_string(row[page]) + ", which sequence " +
                      std::to_string(owner) + " of the same launch writes too";
                break;
            }
        }
    }
    for (int32_t i = 0; i < count && why.empty(); ++i) {
        SimSequence const& s = sequences[i];
        if (s.begin >= s.end || s.begin == 0) continue;
        int32_t const page = table.hostRow(s.slot)[(s.begin - 1) / pageSize];
        int32_t const owner = pageOwner_[static_cast<size_t>(page)];
        if (owner != -1 && owner != i)
            why = seq(i) + "reads page " + std::to_string(page) + ", which sequence " + std::to_string(owner) +
                  " of the same launch writes";
    }
    for (int32_t page : touched) pageOwner_[static_cast<size_t>(page)] = -1;
    if (!why.empty()) fail(op, why);
}

void SimModel::validateSequences(char const* op, SimSequence const* sequences, int32_t count, Kind kind) const {
    checkCount(op, sequences, count);
    SimModelStorage const& st = storage_;
    bool const draft = kind == Kind::kDraft;
    if (kind == Kind::kAttention && !st.base) fail(op, "the model has no base pool");
    if (kind == Kind::kRecurrent && (!st.state || st.state->numLayers() == 0))
        fail(op, "the model has no recurrent layers");
    if (draft && !st.draft) fail(op, "the model has no draft pool");
    if (kind != Kind::kRecurrent) checkTable(op, "the base", *st.baseTable);
    if (draft) checkTable(op, "the draft", *st.draftTable);
    std::vector<int32_t> slotUser(kind == Kind::kRecurrent ? static_cast<size_t>(st.state->maxBatch()) : 0, -1);
    for (int32_t i = 0; i < count; ++i) {
        SimSequence const& s = sequences[i];
        if (s.begin < 0 || s.begin > s.end)
            fail(op, seq(i) + "range [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                         ") is not 0 <= begin <= end");
        if (s.slot < 0) fail(op, seq(i) + "slot " + std::to_string(s.slot) + " is negative");
        if (s.tokenCount < 0) fail(op, seq(i) + "tokenCount is negative");
        if (s.begin == s.end) continue;  // reads and writes nothing
        int64_t const needed = static_cast<int64_t>(s.end) - s.begin + (draft ? 1 : 0);
        if (s.tokenCount < needed)
            fail(op, seq(i) + std::to_string(s.tokenCount) + " tokens for a range that reads " +
                         std::to_string(needed) + (draft ? " (end - begin + 1: the draft reads token end)" : ""));
        if (!s.tokens) fail(op, seq(i) + "tokens is null");
        auto checkSlotRange = [&](KvPageTable const& table, KvPagePool const& pool, char const* which) {
            if (s.slot >= table.maxBatch())
                fail(op, seq(i) + "slot " + std::to_string(s.slot) + " is outside the " + which + " page table's [0, " +
                             std::to_string(table.maxBatch()) + ")");
            if (s.end > tableCapacity(table, pool))
                fail(op, seq(i) + "end " + std::to_string(s.end) + " exceeds the " + which + " page table's " +
                             std::to_string(tableCapacity(table, pool)) + " positions");
        };
        if (kind == Kind::kRecurrent) {
            if (s.slot >= st.state->maxBatch())
                fail(op, seq(i) + "slot " + std::to_string(s.slot) + " is outside the state's [0, " +
                             std::to_string(st.state->maxBatch()) + ")");
            if (slotUser[static_cast<size_t>(s.slot)] >= 0)
                fail(op, seq(i) + "slot " + std::to_string(s.slot) + " is also sequence " +
                             std::to_string(slotUser[static_cast<size_t>(s.slot)]) +
                             "'s: one launch folds a slot once");
            slotUser[static_cast<size_t>(s.slot)] = i;
            continue;
        }
        checkSlotRange(*st.baseTable, *st.base, "base");
        if (draft) {
            checkSlotRange(*st.draftTable, *st.draft, "draft");
            checkMapped(op, i, "base", *st.baseTable, st.base->pageSize(), s.slot, s.begin, s.end - 1);
            checkMapped(op, i, "draft", *st.draftTable, st.draft->pageSize(), s.slot, std::max(s.begin - 1, 0),
                        s.end - 1);
        } else {
            checkMapped(op, i, "base", *st.baseTable, st.base->pageSize(), s.slot, std::max(s.begin - 1, 0), s.end - 1);
        }
    }
    if (kind == Kind::kAttention) checkDisjoint(op, sequences, count, *st.baseTable, st.base->pageSize());
    if (draft) checkDisjoint(op, sequences, count, *st.draftTable, st.draft->pageSize());
}

void* SimModel::uploadRequests(void const* data, size_t bytes) {
    table_.write(requestsOffset_, data, bytes);
    return table_.bytes() + requestsOffset_;
}

void SimModel::attention(SimSequence const* sequences, int32_t count) {
    validateSequences("attention", sequences, count, Kind::kAttention);
    if (count == 0) return;
    SimAttentionLaunch const launch{
        baseView_, static_cast<SimSequence const*>(uploadRequests(sequences, count * sizeof(SimSequence))), count,
        config_.seed};
    if (launchers_) cudaLaunchers().attention(launch, backend_->options().device, backend_->nativeStream());
    else detail::cpuSimAttention(launch);
    backend_->countLaunch();
}

void SimModel::recurrent(SimSequence const* sequences, int32_t count) {
    validateSequences("recurrent", sequences, count, Kind::kRecurrent);
    if (count == 0) return;
    SimRecurrentLaunch launch{};
    launch.segments = stateTable_;
    launch.segmentCount = static_cast<int32_t>(stateSegments_.size());
    launch.count = count;
    launch.totalWork = stateWork_;
    launch.sequences = static_cast<SimSequence const*>(uploadRequests(sequences, count * sizeof(SimSequence)));
    launch.seed = config_.seed;
    if (launchers_) cudaLaunchers().recurrent(launch, backend_->options().device, backend_->nativeStream());
    else detail::cpuSimRecurrent(launch);
    backend_->countLaunch();
}

void SimModel::draft(SimSequence const* sequences, int32_t count, uint16_t const* hidden, int32_t hiddenSize,
                     int32_t hiddenRows) {
    char const* op = "draft";
    validateSequences(op, sequences, count, Kind::kDraft);
    if (hidden) {
        if (hiddenSize <= 0 || hiddenRows < 0) fail(op, "hidden rows need hiddenSize > 0 and hiddenRows >= 0");
        for (int32_t i = 0; i < count; ++i) {
            SimSequence const& s = sequences[i];
            if (s.begin == s.end) continue;
            if (s.hiddenRow < 0 || static_cast<int64_t>(s.hiddenRow) + (s.end - s.begin) > hiddenRows)
                fail(op, "sequence " + std::to_string(i) + ": hidden rows [" + std::to_string(s.hiddenRow) + ", +" +
                             std::to_string(s.end - s.begin) + ") are outside the " + std::to_string(hiddenRows) +
                             " given");
        }
    }
    if (count == 0) return;
    SimDraftLaunch const launch{draftView_,
                                baseView_,
                                static_cast<SimSequence const*>(uploadRequests(sequences, count * sizeof(SimSequence))),
                                count,
                                config_.seed,
                                hidden,
                                hidden ? hiddenSize : 0};
    if (launchers_) cudaLaunchers().draft(launch, backend_->options().device, backend_->nativeStream());
    else detail::cpuSimDraft(launch);
    backend_->countLaunch();
}

void SimModel::sample(SimSampleRequest const* requests, int32_t count, int32_t* tokens, uint32_t* folds) {
    char const* op = "sample";
    checkCount(op, requests, count);
    if (count > 0 && !tokens) fail(op, "tokens is null");
    SimModelStorage const& st = storage_;
    if (st.base) checkTable(op, "the base", *st.baseTable);
    for (int32_t i = 0; i < count; ++i) {
        SimSampleRequest const& r = requests[i];
        std::string const at = "request " + std::to_string(i) + ": ";
        if (r.slot < 0) fail(op, at + "slot " + std::to_string(r.slot) + " is negative");
        if (r.length < 0) fail(op, at + "length " + std::to_string(r.length) + " is negative");
        if (r.draftPosition < -1) fail(op, at + "draftPosition must be -1 (none) or >= 0");
        if (st.state && r.slot >= st.state->maxBatch())
            fail(op, at + "slot " + std::to_string(r.slot) + " is outside the state's [0, " +
                         std::to_string(st.state->maxBatch()) + ")");
        if (st.base) {
            if (r.slot >= st.baseTable->maxBatch())
                fail(op, at + "slot " + std::to_string(r.slot) + " is outside the base page table's [0, " +
                             std::to_string(st.baseTable->maxBatch()) + ")");
            if (r.length == 0) fail(op, at + "length is 0: an attention model samples from position length - 1");
            if (r.length > tableCapacity(*st.baseTable, *st.base))
                fail(op, at + "length " + std::to_string(r.length) + " exceeds the base page table's " +
                             std::to_string(tableCapacity(*st.baseTable, *st.base)) + " positions");
            if (r.window < 0) fail(op, at + "window " + std::to_string(r.window) + " is negative");
            int32_t const first = r.window > 0 ? std::max(0, r.length - r.window) : r.length - 1;
            checkMapped(op, i, "base", *st.baseTable, st.base->pageSize(), r.slot, first, r.length - 1);
        }
        if (r.draftPosition >= 0) {
            if (!st.draft) fail(op, at + "draftPosition " + std::to_string(r.draftPosition) + " but no draft pool");
            checkTable(op, "the draft", *st.draftTable);
            if (r.slot >= st.draftTable->maxBatch())
                fail(op, at + "slot " + std::to_string(r.slot) + " is outside the draft page table's [0, " +
                             std::to_string(st.draftTable->maxBatch()) + ")");
            if (r.draftPosition >= tableCapacity(*st.draftTable, *st.draft))
                fail(op, at + "draftPosition " + std::to_string(r.draftPosition) + " is beyond the draft page table");
            checkMapped(op, i, "draft", *st.draftTable, st.draft->pageSize(), r.slot, r.draftPosition, r.draftPosition);
        }
    }
    if (count == 0) return;
    SimSampleLaunch launch{};
    launch.base = baseView_;
    launch.draft = draftView_;
    launch.segments = sampleTable_;
    launch.segmentCount = static_cast<int32_t>(sampleSegments_.size());
    launch.count = count;
    launch.totalWork = sampleWork_;
    launch.requests = static_cast<SimSampleRequest const*>(uploadRequests(requests, count * sizeof(SimSampleRequest)));
    launch.tokens = tokens;
    launch.folds = folds;
    launch.seed = config_.seed;
    launch.vocabSize = config_.vocabSize;
    if (launchers_) cudaLaunchers().sample(launch, backend_->options().device, backend_->nativeStream());
    else detail::cpuSimSample(launch);
    backend_->countLaunch();
}

detail::CudaSimLaunchers const& SimModel::cudaLaunchers() const {
    return *static_cast<detail::CudaSimLaunchers const*>(launchers_);
}

namespace detail {

namespace {
CudaSimLaunchers const* replacement = nullptr;
}  // namespace

CudaSimLaunchers const* cudaSimLaunchers() noexcept { return replacement ? replacement : builtinCudaSimLaunchers(); }
void replaceCudaSimLaunchers(CudaSimLaunchers const* launchers) noexcept { replacement = launchers; }

}  // namespace detail

}  // namespace ctxcache::sim
