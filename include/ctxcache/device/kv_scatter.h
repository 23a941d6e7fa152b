// Dense-to-paged K/V scatter of one attention layer: the inverse of gatherPagedKv, for an engine that computes K
// and V densely (a prefill chunk, a decode step) and keeps them in the pool's pages. Writes K and V together, in
// one launch, through the page table's device view exactly where an attention kernel will read them: dense token
// t of sequence b lands at position firstPosition + t of slot b.
//
// Invariants: the host page table is the truth, so before anything is launched every entry the write touches
//             (slots [0, batch), logical pages of positions [firstPosition, firstPosition + seqLen)) must be mapped
//             to a K page of the pool, and the table uploaded; else ContractError and nothing is written.
//             Same dtype only: the input is bit-copied (no quantisation).
// Input:      K and V each [batch, seqLen, kvHeads, headDim] (token-major) or [batch, kvHeads, seqLen, headDim]
//             (head-major) of the pool's dtype, in memory of the pool's backend.
// Cost:       one launch; reads and writes each input byte once; host checks O(batch * pages touched).
// Threading:  the backend's single-writer contract.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"

namespace ctxcache::device {

struct KvScatterRequest {
    int32_t layer = 0;
    int32_t batch = 0;          // slots [0, batch) of the table
    int32_t seqLen = 0;         // tokens per input row
    int32_t firstPosition = 0;  // position of the first input token in every sequence
    DenseKvLayout layout = DenseKvLayout::kTokenMajor;
};

// Bytes of each of the K and V inputs: batch * seqLen * kvHeads * headDim * sizeof(pool dtype).
size_t scatterInputBytes(KvPagePool const& pool, KvScatterRequest const& request);

// kIn and vIn hold inBytes each (exactly scatterInputBytes).
void scatterPagedKv(KvPagePool& pool, KvPageTable const& table, KvScatterRequest const& request, void const* kIn,
                    void const* vIn, size_t inBytes);

}  // namespace ctxcache::device
