// Paged-to-dense K/V gather of one attention layer: for consumers that want contiguous K and V (tests, FP8
// attention paths, vision blocks). Reads through the page table's device view exactly as an attention kernel
// would, zero-fills unmapped pages and tokens beyond each sequence's KV length, and dequantises an fp8 pool
// (e4m3ToFloat(x) * scale, rounded to nearest even) into fp16, bf16 or fp32. Any other dtype change is a
// ContractError ("wrong dtype").
//
// Output: K and V each [batch, seqLen, kvHeads, headDim] (token-major, the default) or [batch, kvHeads, seqLen,
// headDim] (head-major) of outDtype, in memory of the pool's backend.
// Cost: one launch; reads and writes each output byte once.
// Threading: the backend's single-writer contract.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"

namespace ctxcache::device {

struct KvGatherRequest {
    int32_t layer = 0;
    int32_t batch = 0;    // slots [0, batch) of the table
    int32_t seqLen = 0;   // tokens per output row; needs ceil(seqLen / pageSize) <= maxPagesPerSeq
    DType outDtype = DType::kFp16;
    float kScale = 1.0f;  // fp8 dequantisation scales (ignored for a same-dtype gather)
    float vScale = 1.0f;
    DenseKvLayout layout = DenseKvLayout::kTokenMajor;
};

// Bytes of each of the K and V outputs.
size_t gatherOutputBytes(KvPagePool const& pool, KvGatherRequest const& request);

// lengths may be null (every token up to seqLen counts); otherwise it covers at least `batch` sequences. The
// table must be uploaded (!dirty()) and describe the pool (same numPages); kOut/vOut hold outBytes each.
void gatherPagedKv(KvPagePool const& pool, KvPageTable const& table, KvLengths const* lengths,
                   KvGatherRequest const& request, void* kOut, void* vOut, size_t outBytes);

}  // namespace ctxcache::device
