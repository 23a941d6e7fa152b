// Launchers of the device layer's kernels (device_kernels.cu). CUDA-only: included by cuda/*.cu, never by
// cpp/. Each launcher enqueues exactly one kernel on `stream` and leaves error checking (cudaGetLastError) to
// the caller. Descriptor pointers are device memory (the backend's uploaded table).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ctxcache/device/layout.h"

namespace ctxcache::device::kernels {

inline constexpr int kThreads = 256;

// Copy or zero every span; grid = min(totalChunks, maxBlocks) blocks striding over the chunks.
void launchCopySpans(SpanCopy const* spans, int32_t count, uint64_t totalChunks, int maxBlocks, cudaStream_t stream);

// Pool pages <-> host slots (copy.layers and copy.pairs in device memory, copy.host mapped host memory);
// totalChunks = count * chunksPerPage; grid = min(totalChunks, maxBlocks) blocks striding over the chunks.
void launchCopyHostPages(HostPageCopy const& copy, uint64_t totalChunks, int maxBlocks, cudaStream_t stream);

// Bytes per access of a tensor's compaction (16, 4 or 1: the widest that base and rowBytes are aligned to).
uint32_t compactUnitBytes(void const* base, uint64_t rowBytes);
// In-place order-preserving compaction; maxColumns = max over tensors of rowBytes / compactUnitBytes.
void launchCompactRows(CompactTensor const* tensors, int32_t tensorCount, RowMove const* moves, int32_t moveCount,
                       uint64_t maxColumns, int maxBlocks, cudaStream_t stream);

void launchRebaseRows(int32_t* indices, int64_t count, int32_t const* oldToNew, int32_t oldBatch,
                      int32_t rowsPerSequence, int maxBlocks, cudaStream_t stream);

void launchAddToLengths(int32_t* lengths, int32_t count, int32_t scalar, int32_t const* increments,
                        cudaStream_t stream);

void launchGatherPagedKv(PagedKvGather const& params, cudaStream_t stream);
void launchScatterPagedKv(PagedKvScatter const& params, cudaStream_t stream);

// partials: 2 * numChunks uint64 (hi, lo per chunk).
void launchHashChunks(unsigned char const* data, uint64_t size, uint32_t numChunks, unsigned long long* partials,
                      cudaStream_t stream);

}  // namespace ctxcache::device::kernels
