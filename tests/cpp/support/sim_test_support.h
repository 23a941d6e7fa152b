// A small reference-model rig for the SimModel suites: base pool (3 attention layers of 8, 3 and 15 elements, 16
// pages of 4 tokens), optional draft pool (1 layer of 10 elements: more than base layer 0's 8, so the draft wraps
// e % 8) and optional resident state (2 recurrent layers: 12 fp32 recurrent words, 6 bf16 conv words), with
// scattered, non-identity page-table rows, on any backend.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "ctxcache/sim/sim_kernels.h"
#include "support/device_test_support.h"

namespace ctxcache::test {

struct SimRigOptions {
    bool base = true;
    bool draft = false;
    bool state = false;
    device::DType baseDtype = device::DType::kFp16;
    device::DType draftDtype = device::DType::kBf16;
    uint32_t seed = 7;
    std::vector<device::KvLayerShape> baseLayers = {{2, 4}, {1, 3}, {3, 5}};
    std::vector<device::KvLayerShape> draftLayers = {{2, 5}};
    int32_t numPages = 16;
    int32_t pageSize = 4;
};

// Token i of a history: distinct, deterministic, non-negative.
inline std::vector<int32_t> history(int32_t n, int32_t salt = 0) {
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = 100 + 7 * i + 1000 * salt;
    return out;
}

class SimRig {
public:
    SimRig(device::DeviceBackend& backend, SimRigOptions const& o = {}) : backend(backend), options(o) {
        using device::KvPageTable;
        if (o.base) {
            base = std::make_unique<device::KvPagePool>(
                backend, device::KvPoolGeometry{o.numPages, o.pageSize, o.baseDtype, o.baseLayers});
            baseTable = std::make_unique<KvPageTable>(backend, 4, 6, o.numPages, KvPageTable::Mode::kSparseWindow);
            std::vector<int32_t> const r0 = {5, 2, 9, 0, 13, 7}, r1 = {1, 3, 4, 6, 8, 10}, r2 = {11, 12, 14, 15};
            baseTable->setRow(0, r0.data(), 6);
            baseTable->setRow(1, r1.data(), 6);
            baseTable->setRow(2, r2.data(), 4);
            baseTable->upload();
        }
        if (o.draft) {
            draft = std::make_unique<device::KvPagePool>(
                backend, device::KvPoolGeometry{8, o.pageSize, o.draftDtype, o.draftLayers});
            draftTable = std::make_unique<KvPageTable>(backend, 4, 6, 8, KvPageTable::Mode::kSparseWindow);
            std::vector<int32_t> const r0 = {3, 1, 6}, r1 = {0, 2, 4}, r2 = {5, 7};
            draftTable->setRow(0, r0.data(), 3);
            draftTable->setRow(1, r1.data(), 3);
            draftTable->setRow(2, r2.data(), 2);
            draftTable->upload();
        }
        if (o.state) {
            device::ResidentStateGeometry g;
            g.maxBatch = 4;
            g.numLayers = 2;
            g.recurrentHeads = 2;
            g.recurrentHeadDim = 2;
            g.stateSize = 3;
            g.recurrentDtype = device::DType::kFp32;
            g.convDim = 3;
            g.convKernel = 2;
            g.convDtype = device::DType::kBf16;
            state = std::make_unique<device::ResidentState>(backend, g);
        }
        sim::SimModelStorage s;
        s.base = base.get();
        s.baseTable = baseTable.get();
        s.draft = draft.get();
        s.draftTable = draftTable.get();
        s.state = state.get();
        model = std::make_unique<sim::SimModel>(backend, sim::SimModelConfig{o.seed, 32000, 8}, s);
    }

    // A device copy of values that lives as long as the rig.
    template <class T>
    T const* onDevice(std::vector<T> const& values) {
        buffers.emplace_back(backend, values.size() * sizeof(T) + sizeof(T));
        if (!values.empty()) buffers.back().write(0, values.data(), values.size() * sizeof(T));
        return static_cast<T const*>(buffers.back().data());
    }

    // Positions [begin, end) of `slot` with the tokens of `tokens` (a whole history): tokens [begin, end + extra)
    // go to the device (extra = 1 for the draft).
    sim::SimSequence sequence(int32_t slot, int32_t begin, int32_t end, std::vector<int32_t> const& tokens,
                              uint32_t salt = 0, std::vector<uint32_t> const* media = nullptr, int32_t extra = 0) {
        sim::SimSequence s;
        s.slot = slot;
        s.begin = begin;
        s.end = end;
        s.salt = salt;
        std::vector<int32_t> const slice(tokens.begin() + begin, tokens.begin() + end + extra);
        s.tokens = onDevice(slice);
        s.tokenCount = static_cast<int32_t>(slice.size());
        if (media) s.media = onDevice(std::vector<uint32_t>(media->begin() + begin, media->begin() + end + extra));
        return s;
    }

    void attention(std::vector<sim::SimSequence> const& s) {
        model->attention(s.data(), static_cast<int32_t>(s.size()));
    }
    void recurrent(std::vector<sim::SimSequence> const& s) {
        model->recurrent(s.data(), static_cast<int32_t>(s.size()));
    }
    void draftStep(std::vector<sim::SimSequence> const& s) { model->draft(s.data(), static_cast<int32_t>(s.size())); }

    // Sampled tokens and folds.
    std::pair<std::vector<int32_t>, std::vector<uint32_t>> sample(std::vector<sim::SimSampleRequest> const& r) {
        size_t const n = r.size();
        device::DeviceBuffer tokens(backend, n * 4 + 4), folds(backend, n * 4 + 4);
        model->sample(r.data(), static_cast<int32_t>(n), static_cast<int32_t*>(tokens.data()),
                      static_cast<uint32_t*>(folds.data()));
        return {asVector<int32_t>(readBuffer(tokens, 0, n * 4)), asVector<uint32_t>(readBuffer(folds, 0, n * 4))};
    }

    static Bytes poolBytes(device::KvPagePool const& pool) {
        Bytes out;
        for (int32_t layer = 0; layer < pool.numLayers(); ++layer) {
            Bytes data(pool.layerBytes(layer));
            pool.readPages(layer, 0, 2 * pool.numPages(), data.data(), data.size());
            out.insert(out.end(), data.begin(), data.end());
        }
        return out;
    }

    Bytes stateBytes() const {
        Bytes out;
        if (!state) return out;
        for (int32_t slot = 0; slot < state->maxBatch(); ++slot)
            for (int32_t layer = 0; layer < state->numLayers(); ++layer)
                for (device::StatePart part : {device::StatePart::kRecurrent, device::StatePart::kConv}) {
                    Bytes row(state->rowBytes(part));
                    state->readRow(part, layer, slot, row.data(), row.size());
                    out.insert(out.end(), row.begin(), row.end());
                }
        return out;
    }

    // Every byte the model can write: base pool, draft pool, state.
    Bytes allBytes() const {
        Bytes out;
        if (base) out = poolBytes(*base);
        if (draft) {
            Bytes const d = poolBytes(*draft);
            out.insert(out.end(), d.begin(), d.end());
        }
        Bytes const s = stateBytes();
        out.insert(out.end(), s.begin(), s.end());
        return out;
    }

    // Every layer's K and V words of the token at `position` of `slot`, read through the host page table.
    static Bytes tokenRow(device::KvPagePool const& pool, device::KvPageTable const& table, int32_t slot,
                          int32_t position) {
        Bytes out;
        int32_t const* row = table.hostRow(slot);
        for (int32_t layer = 0; layer < pool.numLayers(); ++layer)
            for (int32_t half = 0; half < 2; ++half) {
                int32_t const page = row[half * table.maxPagesPerSeq() + position / pool.pageSize()];
                Bytes data(pool.pageBytes(layer));
                pool.readPages(layer, page, 1, data.data(), data.size());
                size_t const tokenBytes = pool.tokenBytes(layer);
                size_t const at = static_cast<size_t>(position % pool.pageSize()) * tokenBytes;
                out.insert(out.end(), data.begin() + static_cast<long>(at),
                           data.begin() + static_cast<long>(at + tokenBytes));
            }
        return out;
    }
    Bytes baseRow(int32_t slot, int32_t position) const { return tokenRow(*base, *baseTable, slot, position); }
    Bytes draftRow(int32_t slot, int32_t position) const { return tokenRow(*draft, *draftTable, slot, position); }

    device::DeviceBackend& backend;
    SimRigOptions options;
    std::unique_ptr<device::KvPagePool> base, draft;
    std::unique_ptr<device::KvPageTable> baseTable, draftTable;
    std::unique_ptr<device::ResidentState> state;
    std::unique_ptr<sim::SimModel> model;
    std::vector<device::DeviceBuffer> buffers;
};

}  // namespace ctxcache::test
