// SimModel: the reference engine's "model": a deterministic stand-in for a transformer that writes real KV and
// recurrent state through the page tables and resident slots the runtime manages, and samples the next token from
// the stored bytes, so that any reuse bug (wrong page, wrong snapshot, wrong length, wrong compaction) changes both
// the bytes and the generated text. The math is in sim_math.h; this is its host API.
//
// Ops (each one kernel launch on the backend's stream, counted in its LaunchCounters; count == 0 launches nothing):
//   attention  every base layer's K and V at positions [begin, end) of each sequence, each word computed from the
//              word at p - 1 read back through the page table, token p, the salt and media word p;
//   recurrent  every recurrent and conv word of each sequence's resident slot folded over tokens [begin, end);
//   draft      every draft layer's K and V at [begin, end), from the previous draft word, the base input at p
//              and token p + 1 (so a sequence passes end - begin + 1 tokens). The base input is base layer 0's
//              word at p (EAGLE) or, for an MTP head, the fp16 hidden row of p the caller passes (a row per
//              position, which the engine computes from the stored base words or restores at a checkpoint);
//   sample     the next token of each sequence from its stored words (base K/V at L - 1, or at every position of
//              the last `window` when the request sets one; draft K/V at a chosen position; every recurrent and conv
//              word of its slot).
// Writing [0, n) in one call equals writing [0, k) then [k, n): the property reuse relies on.
//
// Invariants: every op validates on the host before it launches (the same checks for both backends; ContractError,
//             nothing changed): ranges 0 <= begin <= end, slots in range, every page-table entry the op reads or
//             writes mapped (host row, and the table uploaded: not dirty), token arrays long enough, and no page
//             written by one sequence of a launch read or written by another (so the result does not depend on
//             the order the sequences run in). Ops with an empty range read and write nothing for that sequence.
// Storage:   the pools, tables and state are bound at construction, on the model's backend; descriptors of the
//             bound layers are uploaded once, the sequences of each op in one transfer into a device table sized
//             at construction (config.maxSequences). No op allocates.
// Ordering:  stream-ordered on CUDA (inputs such as tokens must be on the device when the op runs), complete on
//             return on CPU.
// Cost:      attention and draft: one thread per (sequence, layer, K/V, element) looping over the range;
//             recurrent: one thread per (sequence, state word); sample: one block per sequence.
// Threading: single writer (the backend's contract); the model must not outlive its backend or bound storage.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/sim/sim_math.h"

namespace ctxcache::sim {

namespace detail {
struct CudaSimLaunchers;  // cpp/sim/sim_launchers.h
}

struct SimModelConfig {
    uint32_t seed = 0;
    int32_t vocabSize = 32000;  // sampled tokens are in [0, vocabSize)
    int32_t maxSequences = 64;  // sequences per op, in [1, 65535]
};

// What the model reads and writes; null = the model has no such part. A model has a base pool (with its table),
// a resident state, or both; a draft pool (with its table) needs a base pool. Tables address their pool (same
// numPages) and every object lives on the model's backend.
struct SimModelStorage {
    device::KvPagePool* base = nullptr;
    device::KvPageTable const* baseTable = nullptr;
    device::KvPagePool* draft = nullptr;
    device::KvPageTable const* draftTable = nullptr;
    device::ResidentState* state = nullptr;
};

class SimModel {
public:
    // ContractError on an invalid config or storage; BackendUnavailableError on a CUDA backend whose sim kernels
    // were not built.
    SimModel(device::DeviceBackend& backend, SimModelConfig const& config, SimModelStorage const& storage);

    device::DeviceBackend& backend() const noexcept { return *backend_; }
    SimModelConfig const& config() const noexcept { return config_; }
    SimModelStorage const& storage() const noexcept { return storage_; }

    // Base attention layers at [begin, end) of each sequence (needs a base pool). tokenCount >= end - begin.
    void attention(SimSequence const* sequences, int32_t count);
    // Recurrent and conv rows of each sequence's resident slot over [begin, end) (needs a state). Slots distinct.
    void recurrent(SimSequence const* sequences, int32_t count);
    // Draft layers at [begin, end) (needs the draft and base pools); tokenCount >= end - begin + 1 (token end is
    // the next token); the base pages of [begin, end) must be mapped. media is not read. hidden (device memory,
    // hiddenRows rows of hiddenSize fp16 words) switches the base input to the hidden rows: sequence s reads rows
    // [s.hiddenRow, s.hiddenRow + end - begin).
    void draft(SimSequence const* sequences, int32_t count, uint16_t const* hidden = nullptr, int32_t hiddenSize = 0,
               int32_t hiddenRows = 0);
    // tokens[i] (device memory, count entries) = the next token of requests[i]; folds[i] (device memory or null)
    // = its 32-bit fold (sim_math.h). A model with a base pool needs length > 0 and reads position length - 1
    // (window > 0: every position of [max(0, length - window), length), each mapped);
    // draftPosition >= 0 needs a draft pool.
    void sample(SimSampleRequest const* requests, int32_t count, int32_t* tokens, uint32_t* folds = nullptr);

private:
    enum class Kind { kAttention, kRecurrent, kDraft };

    void checkCount(char const* op, void const* items, int32_t count) const;
    void validateSequences(char const* op, SimSequence const* sequences, int32_t count, Kind kind) const;
    void checkDisjoint(char const* op, SimSequence const* sequences, int32_t count, device::KvPageTable const& table,
                       int32_t pageSize) const;
    void* uploadRequests(void const* data, size_t bytes);
    detail::CudaSimLaunchers const& cudaLaunchers() const;

    device::DeviceBackend* backend_;
    SimModelConfig config_;
    SimModelStorage storage_;
    detail::CudaSimLaunchers const* launchers_ = nullptr;  // CUDA backend only; CPU runs the host loops
    SimKvView baseView_{};
    SimKvView draftView_{};
    std::vector<SimStateSegment> stateSegments_;
    std::vector<SimSampleSegment> sampleSegments_;
    SimStateSegment const* stateTable_ = nullptr;    // device copies of the segments
    SimSampleSegment const* sampleTable_ = nullptr;
    int64_t stateWork_ = 0;
    int64_t sampleWork_ = 0;
    size_t requestsOffset_ = 0;
    device::DeviceBuffer table_;              // bound descriptors (uploaded once), then the per-op requests
    mutable std::vector<int32_t> pageOwner_;  // validation scratch: the sequence writing each page, or -1
};

}  // namespace ctxcache::sim
