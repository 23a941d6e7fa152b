// ReferenceEngine's private state, shared by its two implementation files (reference_engine.cpp: construction,
// kernels, recovery, digests; reference_engine_batch.cpp: BatchServer, one serveBatch call by phase): the device
// storage it owns and one served row. Internal to cpp/sim; the layout is not part of any API.
// Invariants: a Row's history is its prompt then its generated tokens (inputLength + generated entries once
//             prefill sampled the lookahead); a Row holds its resident slot until it retires or the batch faults.
// Threading: the engine's (one caller at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/device/snapshot_storage.h"
#include "ctxcache/sim/reference_engine.h"

namespace ctxcache::sim {

struct ReferenceEngine::Storage {
    std::unique_ptr<device::KvPagePool> base, draft;
    std::unique_ptr<device::KvPageTable> baseTable, draftTable;
    std::unique_ptr<device::KvLengths> baseLengths, draftLengths;
    std::unique_ptr<device::ResidentState> state;
    std::unique_ptr<device::SnapshotStorage> snapshots;
    device::DeviceBuffer tokens;   // staging of the tokens an op reads
    device::DeviceBuffer media;    // staging of its media words
    device::DeviceBuffer sampled;  // int32 per sequence
    device::DeviceBuffer mapping;  // int32 compaction map
    device::DeviceBuffer hidden;    // Hybrid+MTP: staging of the hidden rows a draft op reads
    device::DeviceBuffer boundary;  // Hybrid+MTP: the one boundary row published or restored
    size_t stagingEntries = 0;
};

struct ReferenceEngine::Row {
    size_t request = 0;
    runtime::ResidentRef resident;
    std::vector<int32_t> history;  // prompt + generated
    int32_t inputLength = 0;
    int32_t generated = 0;
    int32_t prefillStart = 0;
    int32_t maxNewTokens = 0;
    int32_t cancelAfter = -1;
    int32_t failAfter = -1;
    uint32_t salt = 0;
    std::vector<uint32_t> media;  // per prompt position, empty when the prompt has none
    runtime::SequenceStatus status = runtime::SequenceStatus::kRunning;
    bool joined = false;
    std::vector<uint16_t> hidden;  // Hybrid+MTP: kMtpHiddenSize fp16 words per position computed or restored

    int32_t committed() const { return inputLength + generated - 1; }
};

}  // namespace ctxcache::sim
