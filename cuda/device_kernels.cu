// The device layer's kernels. Each mirrors a loop of the CPU backend (cpp/device/cpu_backend.cpp) and uses the
// same layout.h math, so the two produce identical bytes. All are memory-bound: 16-byte accesses whenever source
// and destination are co-aligned, several independent loads in flight per thread before the first store.
//
// Host page copies (copyHostPagesKernel, a host tier's pool <-> pinned slot transfers) are a kernel too, not
// cudaMemcpyBatchAsync (CUDA 12.8+): one launch covers every page x layer x K/V from a table of 32 bytes per layer
// + 8 per page, where the batch call takes three host arrays of 2 * layers * pages entries (pointers and sizes, plus
// attributes) the driver walks per call and splits into per-copy copy-engine work, small copies of one page half
// each (16-64 KiB on typical models) that keep the copy engines below their bandwidth; the kernel keeps 16-byte
// accesses in flight from every SM instead and is one code path with the CPU twin and the emulation suite. Its
// signature also changed between CUDA 12.8 and 13 (failIdx dropped). The price: SM time during a transfer, and
// pinned host memory must be mapped (HostBuffer does that). bench_kernels holds it to >= 80% of a plain pinned
// cudaMemcpyAsync of the same bytes.
//
// Threading: each kernel owns the bytes its descriptors name; concurrent launches on other streams touching the
// same bytes are the caller's race.
#include "device_kernels.cuh"

#include <cuda_runtime.h>

#include <cstdint>

// Every launch goes through this macro so that tests/cpp/emulation can run these very kernels on CPU threads.
#ifndef CTXC_LAUNCH
#define CTXC_LAUNCH(kernel, grid, block, stream) kernel<<<(grid), (block), 0, (stream)>>>
#endif

namespace ctxcache::device::kernels {

namespace {

constexpr int kUnroll = 4;

// n elements of T from src to dst (or zeros when src is null), cooperatively by the block, kUnroll loads in
// flight per thread.
template <class T>
__device__ __forceinline__ void blockCopyUnits(T* dst, T const* src, uint64_t n) {
    uint64_t const stride = static_cast<uint64_t>(blockDim.x);
    if (src == nullptr) {
        T const zero{};
        for (uint64_t i = threadIdx.x; i < n; i += stride) dst[i] = zero;
        return;
    }
    for (uint64_t base = threadIdx.x; base < n; base += kUnroll * stride) {
        T r[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            uint64_t const i = base + k * stride;
            if (i < n) r[k] = src[i];
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            uint64_t const i = base + k * stride;
            if (i < n) dst[i] = r[k];
        }
    }
}

template <class T>
__device__ __forceinline__ void blockCopyAligned(unsigned char* dst, unsigned char const* src, uint64_t n) {
    constexpr uint64_t kSize = sizeof(T);
    uint64_t const misalign = reinterpret_cast<uintptr_t>(dst) & (kSize - 1);
    uint64_t const head = misalign == 0 ? 0 : (kSize - misalign < n ? kSize - misalign : n);
    for (uint64_t i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src ? src[i] : 0;
    uint64_t const units = (n - head) / kSize;
    blockCopyUnits(reinterpret_cast<T*>(dst + head), src ? reinterpret_cast<T const*>(src + head) : nullptr, units);
    for (uint64_t i = head + units * kSize + threadIdx.x; i < n; i += blockDim.x) dst[i] = src ? src[i] : 0;
}

// n bytes from src to dst (src null: zero-fill), with the widest access the two addresses allow.
__device__ __forceinline__ void blockCopyBytes(unsigned char* dst, unsigned char const* src, uint64_t n) {
    uintptr_t const d = reinterpret_cast<uintptr_t>(dst);
    uintptr_t const s = src ? reinterpret_cast<uintptr_t>(src) : d;
    if (((d ^ s) & 15) == 0) blockCopyAligned<uint4>(dst, src, n);
    else if (((d ^ s) & 3) == 0) blockCopyAligned<uint32_t>(dst, src, n);
    else blockCopyUnits<unsigned char>(dst, src, n);
}

// n bytes from src to dst (src null: zero-fill) by one group of `width` threads of the block (lane in [0, width)):
// 16-byte accesses when both addresses and n allow, else 4-byte, else bytes. For many short rows (a head's headDim
// elements), where a whole block on one row would leave most threads idle.
__device__ __forceinline__ void groupCopyBytes(unsigned char* dst, unsigned char const* src, uint64_t n, uint32_t lane,
                                               uint32_t width) {
    uintptr_t const d = reinterpret_cast<uintptr_t>(dst);
    uintptr_t const s = src ? reinterpret_cast<uintptr_t>(src) : 0;
    if (((d | s | n) & 15) == 0) {
        for (uint64_t i = lane; i < n / 16; i += width)
            reinterpret_cast<uint4*>(dst)[i] = src ? reinterpret_cast<uint4 const*>(src)[i] : make_uint4(0, 0, 0, 0);
    } else if (((d | s | n) & 3) == 0) {
        for (uint64_t i = lane; i < n / 4; i += width)
            reinterpret_cast<uint32_t*>(dst)[i] = src ? reinterpret_cast<uint32_t const*>(src)[i] : 0u;
    } else {
        for (uint64_t i = lane; i < n; i += width) dst[i] = src ? src[i] : 0;
    }
}

// The group of threads that copies one row: a warp of the block.
constexpr uint32_t kRowGroup = 32;

__global__ void __launch_bounds__(kThreads) copySpansKernel(SpanCopy const* spans, int32_t count,
                                                            uint64_t totalChunks) {
    for (uint64_t chunk = blockIdx.x; chunk < totalChunks; chunk += gridDim.x) {
        SpanCopy const span = spans[spanOfChunk(spans, count, chunk)];
        uint64_t const begin = (chunk - span.firstChunk) * kSpanChunkBytes;
        uint64_t const n = span.bytes - begin < kSpanChunkBytes ? span.bytes - begin : kSpanChunkBytes;
        blockCopyBytes(static_cast<unsigned char*>(span.dst) + begin,
                       span.src ? static_cast<unsigned char const*>(span.src) + begin : nullptr, n);
    }
}

// Pool pages <-> host slots: the work is count * chunksPerPage chunks of at most kSpanChunkBytes (a page pair's
// chunks run layer by layer, K then V, each half cut into 16 KiB chunks); blocks stride over the chunks, each copying
// one chunk block-wide (16-byte accesses when pool and slot addresses are co-aligned). The host side is mapped
// pinned memory, so the loads (from host) or stores (to host) cross PCIe from the SMs directly.
__global__ void __launch_bounds__(kThreads) copyHostPagesKernel(HostPageCopy c, uint64_t totalChunks) {
    bool const toHost = c.direction == static_cast<int32_t>(HostCopyDirection::kToHost);
    for (uint64_t chunk = blockIdx.x; chunk < totalChunks; chunk += gridDim.x) {
        uint64_t const item = chunk / c.chunksPerPage;
        uint64_t const within = chunk - item * c.chunksPerPage;
        HostPageLayer const layer = c.layers[hostLayerOfChunk(c.layers, c.numLayers, within)];
        uint64_t const perHalf = (layer.pageBytes + kSpanChunkBytes - 1) / kSpanChunkBytes;
        uint64_t const local = within - layer.firstChunk;
        int32_t const half = local >= perHalf ? 1 : 0;
        uint64_t const begin = (local - static_cast<uint64_t>(half) * perHalf) * kSpanChunkBytes;
        uint64_t const n = layer.pageBytes - begin < kSpanChunkBytes ? layer.pageBytes - begin : kSpanChunkBytes;
        HostPagePair const pair = c.pairs[item];
        unsigned char* page = hostCopyPoolPage(layer, c.numPages, pair.page, half) + begin;
        unsigned char* slot = hostCopySlotPage(c, layer, pair.slot, half) + begin;
        if (toHost) blockCopyBytes(slot, page, n);
        else blockCopyBytes(page, slot, n);
    }
}

__host__ __device__ __forceinline__ uint32_t unitOf(void const* base, uint64_t rowBytes) {
    uintptr_t const a = reinterpret_cast<uintptr_t>(base);
    if ((a & 15) == 0 && (rowBytes & 15) == 0) return 16;
    if ((a & 3) == 0 && (rowBytes & 3) == 0) return 4;
    return 1;
}

// Each thread owns whole element columns and walks the moves in ascending order, loading kUnroll source rows
// before storing them: with an order-preserving move list no load ever reads a row an earlier or the current
// group stores to, so the in-place move needs no synchronisation at all.
template <class T>
__device__ __forceinline__ void compactColumns(T* rows, uint64_t rowUnits, RowMove const* moves, int32_t moveCount) {
    uint64_t const stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t col = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < rowUnits; col += stride) {
        for (int32_t m = 0; m < moveCount; m += kUnroll) {
            T r[kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k)
                if (m + k < moveCount) r[k] = rows[static_cast<uint64_t>(moves[m + k].from) * rowUnits + col];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k)
                if (m + k < moveCount) rows[static_cast<uint64_t>(moves[m + k].to) * rowUnits + col] = r[k];
        }
    }
}

__global__ void __launch_bounds__(kThreads) compactRowsKernel(CompactTensor const* tensors, RowMove const* moves,
                                                              int32_t moveCount) {
    CompactTensor const t = tensors[blockIdx.y];
    switch (unitOf(t.base, t.rowBytes)) {
        case 16: compactColumns(static_cast<uint4*>(t.base), t.rowBytes / 16, moves, moveCount); break;
        case 4: compactColumns(static_cast<uint32_t*>(t.base), t.rowBytes / 4, moves, moveCount); break;
        default: compactColumns(static_cast<unsigned char*>(t.base), t.rowBytes, moves, moveCount); break;
    }
}

__device__ __forceinline__ int32_t rebaseRow(int32_t v, int64_t limit, int32_t const* oldToNew,
                                             int32_t rowsPerSequence) {
    if (v < 0 || v >= limit) return -1;
    int32_t const target = oldToNew[v / rowsPerSequence];
    return target < 0 ? -1 : target * rowsPerSequence + v % rowsPerSequence;
}

// indices[0, head) and the tail after the 16-byte body are done one by one (by block 0); the body four at a time.
__global__ void __launch_bounds__(kThreads) rebaseRowsKernel(int32_t* indices, int64_t count, int64_t head,
                                                             int32_t const* oldToNew, int32_t oldBatch,
                                                             int32_t rowsPerSequence) {
    int64_t const limit = static_cast<int64_t>(oldBatch) * rowsPerSequence;
    int64_t const vectors = (count - head) / 4;
    int4* body = reinterpret_cast<int4*>(indices + head);
    int64_t const stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
        int4 v = body[i];
        v.x = rebaseRow(v.x, limit, oldToNew, rowsPerSequence);
        v.y = rebaseRow(v.y, limit, oldToNew, rowsPerSequence);
        v.z = rebaseRow(v.z, limit, oldToNew, rowsPerSequence);
        v.w = rebaseRow(v.w, limit, oldToNew, rowsPerSequence);
        body[i] = v;
    }
    if (blockIdx.x == 0) {
        for (int64_t i = threadIdx.x; i < head; i += blockDim.x)
            indices[i] = rebaseRow(indices[i], limit, oldToNew, rowsPerSequence);
        for (int64_t i = head + 4 * vectors + threadIdx.x; i < count; i += blockDim.x)
            indices[i] = rebaseRow(indices[i], limit, oldToNew, rowsPerSequence);
    }
}

__global__ void __launch_bounds__(kThreads) addToLengthsKernel(int32_t* lengths, int32_t count, int32_t scalar,
                                                               int32_t const* increments) {
    for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        uint32_t v = static_cast<uint32_t>(lengths[i]) + static_cast<uint32_t>(scalar);
        if (increments) v += static_cast<uint32_t>(increments[i]);
        lengths[i] = static_cast<int32_t>(v);
    }
}

// n fp8 values dequantised into out (outDtype) through `lut`, the block's table of dequantFp8Bits() of all 256
// byte values (so the result is bit-identical to the CPU's per-element conversion at the cost of one shared
// memory load per element). 8 values per thread step when src is 8-byte and out 16-byte aligned, else one at a
// time.
__device__ __forceinline__ void blockDequant(unsigned char* out, uint8_t const* src, uint64_t n, uint32_t const* lut,
                                             bool fp32) {
    uint64_t done = 0;
    if ((reinterpret_cast<uintptr_t>(src) & 7) == 0 && (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
        uint64_t const groups = n / 8;
        for (uint64_t g = threadIdx.x; g < groups; g += blockDim.x) {
            uint2 const raw = reinterpret_cast<uint2 const*>(src)[g];
            uint32_t bits[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) bits[k] = lut[((k < 4 ? raw.x : raw.y) >> (8 * (k & 3))) & 0xFFu];
            if (fp32) {
                uint4* o = reinterpret_cast<uint4*>(out) + 2 * g;
                o[0] = make_uint4(bits[0], bits[1], bits[2], bits[3]);
                o[1] = make_uint4(bits[4], bits[5], bits[6], bits[7]);
            } else {
                reinterpret_cast<uint4*>(out)[g] = make_uint4(bits[0] | (bits[1] << 16), bits[2] | (bits[3] << 16),
                                                              bits[4] | (bits[5] << 16), bits[6] | (bits[7] << 16));
            }
        }
        done = groups * 8;
    }
    for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
        uint32_t const bits = lut[src[i]];
        unsigned char* o = out + i * (fp32 ? 4 : 2);  // byte stores: the caller's output may be unaligned
        o[0] = static_cast<unsigned char>(bits);
        o[1] = static_cast<unsigned char>(bits >> 8);
        if (fp32) {
            o[2] = static_cast<unsigned char>(bits >> 16);
            o[3] = static_cast<unsigned char>(bits >> 24);
        }
    }
}

// What one block of a paged gather covers: tokens [t0, t0 + tokens) of sequence b's K (half 0) or V (half 1),
// starting at token `first` of its page `page`; the first `valid` of them are present (mapped and below the
// sequence's KV length), the rest are zero-filled. tokens <= 0: the block has nothing to do.
struct GatherBlock {
    int32_t b, half, first, tokens, t0, page, valid;
};
__device__ inline GatherBlock gatherBlock(PagedKvGather const& g, int32_t splits, int32_t tokensPerBlock) {
    GatherBlock r{};
    int32_t const logicalPage = static_cast<int32_t>(blockIdx.x) / splits;
    r.first = (static_cast<int32_t>(blockIdx.x) % splits) * tokensPerBlock;  // token within the page
    r.b = blockIdx.y;
    r.half = blockIdx.z;
    int32_t const pageStart = logicalPage * g.pageSize;
    int32_t const pageTokens = g.seqLen - pageStart < g.pageSize ? g.seqLen - pageStart : g.pageSize;
    if (r.first >= pageTokens) return r;  // tokens == 0
    r.tokens = pageTokens - r.first < tokensPerBlock ? pageTokens - r.first : tokensPerBlock;
    r.t0 = pageStart + r.first;
    r.page = g.pageTable[pageTableIndex(r.b, r.half, logicalPage, g.maxPagesPerSeq)];
    if (r.page >= 0 && r.page < 2 * g.numPages) {
        r.valid = r.tokens;
        if (g.kvLengths) {
            int32_t const live = g.kvLengths[r.b] - r.t0;
            r.valid = live < 0 ? 0 : (live < r.tokens ? live : r.tokens);
        }
    }
    return r;
}

// One block per (token range of a logical page, sequence, K/V half): a page's tokens are contiguous in the pool
// and in the dense output, so the gather is a span copy (or dequantisation) of the valid tokens plus a zero-fill
// of the rest. A page is split into ranges of tokensPerBlock tokens so that every block writes ~kSpanChunkBytes.
__global__ void __launch_bounds__(kThreads) gatherPagedKvKernel(PagedKvGather g, int32_t splits,
                                                                int32_t tokensPerBlock) {
    GatherBlock const blk = gatherBlock(g, splits, tokensPerBlock);
    if (blk.tokens <= 0) return;
    int32_t const b = blk.b, half = blk.half, first = blk.first, tokens = blk.tokens, t0 = blk.t0, page = blk.page,
                  valid = blk.valid;
    uint64_t const inSize = dtypeBytes(g.poolDtype);
    uint64_t const outSize = dtypeBytes(g.outDtype);
    uint64_t const tokenElems = static_cast<uint64_t>(g.kvHeads) * g.headDim;
    uint64_t const validElems = static_cast<uint64_t>(valid) * tokenElems;
    uint64_t const totalElems = static_cast<uint64_t>(tokens) * tokenElems;
    unsigned char* out = static_cast<unsigned char*>(half == 0 ? g.kOut : g.vOut) +
                         denseKvIndex(b, t0, 0, 0, g.seqLen, g.kvHeads, g.headDim) * outSize;
    if (validElems > 0) {  // block-uniform, so the barrier below is reached by every thread or by none
        unsigned char const* src = static_cast<unsigned char const*>(g.pool) +
                                   kvPoolIndex(page, first, 0, 0, g.pageSize, g.kvHeads, g.headDim) * inSize;
        if (g.poolDtype == g.outDtype) {
            blockCopyBytes(out, src, validElems * outSize);
        } else {
            __shared__ uint32_t lut[256];
            for (uint32_t x = threadIdx.x; x < 256; x += blockDim.x)
                lut[x] = dequantFp8Bits(static_cast<uint8_t>(x), half == 0 ? g.kScale : g.vScale, g.outDtype);
            __syncthreads();
            blockDequant(out, src, validElems, lut, g.outDtype == static_cast<int32_t>(DType::kFp32));
        }
    }
    if (totalElems > validElems)
        blockCopyBytes(out + validElems * outSize, nullptr, (totalElems - validElems) * outSize);
}

// The head-major gather ([batch, kvHeads, seqLen, headDim]): the same blocks as gatherPagedKvKernel, but a token's
// heads are no longer contiguous in the output, so each warp copies whole headDim rows, one (token, head) pair at a
// time, and an fp8 pool is dequantised element by element with dequantFp8To (the CPU's conversion, so the bits
// match).
__global__ void __launch_bounds__(kThreads) gatherHeadMajorKernel(PagedKvGather g, int32_t splits,
                                                                  int32_t tokensPerBlock) {
    GatherBlock const blk = gatherBlock(g, splits, tokensPerBlock);
    if (blk.tokens <= 0) return;
    int32_t const b = blk.b, half = blk.half, first = blk.first, tokens = blk.tokens, t0 = blk.t0, page = blk.page,
                  valid = blk.valid;
    uint64_t const inSize = dtypeBytes(g.poolDtype);
    uint64_t const outSize = dtypeBytes(g.outDtype);
    uint64_t const rowBytes = static_cast<uint64_t>(g.headDim) * outSize;
    float const scale = half == 0 ? g.kScale : g.vScale;
    unsigned char* out = static_cast<unsigned char*>(half == 0 ? g.kOut : g.vOut);
    uint32_t const lane = threadIdx.x % kRowGroup;
    int32_t const rows = tokens * g.kvHeads;
    for (int32_t row = static_cast<int32_t>(threadIdx.x / kRowGroup); row < rows;
         row += static_cast<int32_t>(blockDim.x / kRowGroup)) {
        int32_t const k = row / g.kvHeads;
        int32_t const h = row % g.kvHeads;
        unsigned char* dst = out + denseKvIndexIn(g.layout, b, t0 + k, h, 0, g.seqLen, g.kvHeads, g.headDim) * outSize;
        if (k >= valid) {
            groupCopyBytes(dst, nullptr, rowBytes, lane, kRowGroup);
            continue;
        }
        unsigned char const* src = static_cast<unsigned char const*>(g.pool) +
                                   kvPoolIndex(page, first + k, h, 0, g.pageSize, g.kvHeads, g.headDim) * inSize;
        if (g.poolDtype == g.outDtype) {
            groupCopyBytes(dst, src, rowBytes, lane, kRowGroup);
            continue;
        }
        for (int32_t d = static_cast<int32_t>(lane); d < g.headDim; d += static_cast<int32_t>(kRowGroup))
            dequantFp8To(src[d], scale, g.outDtype, dst + static_cast<uint64_t>(d) * outSize);
    }
}

// The inverse of the gather: one block per (range of tokensPerBlock tokens, sequence, K/V half). A token's heads
// are contiguous in the pool; in a token-major input they are contiguous too (one block-wide span per token), in a
// head-major input each (token, head) row is its own span, copied by one warp. The front validated every page-table
// entry touched.
__global__ void __launch_bounds__(kThreads) scatterPagedKvKernel(PagedKvScatter s, int32_t tokensPerBlock) {
    int32_t const b = blockIdx.y;
    int32_t const half = blockIdx.z;
    int32_t const t0 = static_cast<int32_t>(blockIdx.x) * tokensPerBlock;
    if (t0 >= s.seqLen) return;
    int32_t const end = s.seqLen - t0 < tokensPerBlock ? s.seqLen : t0 + tokensPerBlock;
    uint64_t const size = dtypeBytes(s.dtype);
    uint64_t const rowBytes = static_cast<uint64_t>(s.headDim) * size;
    bool const tokenMajor = s.layout == static_cast<int32_t>(DenseKvLayout::kTokenMajor);
    unsigned char const* in = static_cast<unsigned char const*>(half == 0 ? s.kIn : s.vIn);
    unsigned char* pool = static_cast<unsigned char*>(s.pool);
    if (tokenMajor) {  // a token's heads are contiguous on both sides: one block-wide span per token
        for (int32_t t = t0; t < end; ++t) {
            int32_t const slot = (s.firstPosition + t) % s.pageSize;
            unsigned char* dst =
                pool +
                kvPoolIndex(scatterTargetPage(s, b, half, t), slot, 0, 0, s.pageSize, s.kvHeads, s.headDim) * size;
            blockCopyBytes(dst, in + denseKvIndexIn(s.layout, b, t, 0, 0, s.seqLen, s.kvHeads, s.headDim) * size,
                           rowBytes * static_cast<uint64_t>(s.kvHeads));
        }
        return;
    }
    // Head-major: a warp per (token, head) row.
    uint32_t const lane = threadIdx.x % kRowGroup;
    int32_t const rows = (end - t0) * s.kvHeads;
    for (int32_t row = static_cast<int32_t>(threadIdx.x / kRowGroup); row < rows;
         row += static_cast<int32_t>(blockDim.x / kRowGroup)) {
        int32_t const t = t0 + row / s.kvHeads;
        int32_t const h = row % s.kvHeads;
        int32_t const page = scatterTargetPage(s, b, half, t);
        int32_t const slot = (s.firstPosition + t) % s.pageSize;
        groupCopyBytes(pool + kvPoolIndex(page, slot, h, 0, s.pageSize, s.kvHeads, s.headDim) * size,
                       in + denseKvIndexIn(s.layout, b, t, h, 0, s.seqLen, s.kvHeads, s.headDim) * size, rowBytes, lane,
                       kRowGroup);
    }
}

__device__ __forceinline__ void fnvWord(uint64_t& hi, uint64_t& lo, uint32_t word) {
#pragma unroll
    for (int k = 0; k < 4; ++k) fnv1aByte(hi, lo, (word >> (8 * k)) & 0xFFu);
}

// One thread per chunk: FNV-1a is a serial chain, so a chunk is walked in order, 16 bytes per load with the
// next load issued before the current 16 bytes are folded in.
__global__ void __launch_bounds__(128) hashChunksKernel(unsigned char const* data, uint64_t size, uint32_t numChunks,
                                                        unsigned long long* partials) {
    uint32_t const chunk = blockIdx.x * blockDim.x + threadIdx.x;
    if (chunk >= numChunks) return;
    uint64_t const begin = hashChunkBegin(size, numChunks, chunk);
    uint64_t const length = hashChunkBytes(size, numChunks);
    uint64_t const end = begin + length < size ? begin + length : size;
    uint64_t hi = kFnvOffsetHi;
    uint64_t lo = kFnvOffsetLo;
    uint64_t p = begin;
    while (p < end && (reinterpret_cast<uintptr_t>(data + p) & 15) != 0) fnv1aByte(hi, lo, data[p++]);
    if (p + 16 <= end) {
        uint4 next = *reinterpret_cast<uint4 const*>(data + p);
        while (p + 16 <= end) {
            uint4 const current = next;
            p += 16;
            if (p + 16 <= end) next = *reinterpret_cast<uint4 const*>(data + p);
            fnvWord(hi, lo, current.x);
            fnvWord(hi, lo, current.y);
            fnvWord(hi, lo, current.z);
            fnvWord(hi, lo, current.w);
        }
    }
    while (p < end) fnv1aByte(hi, lo, data[p++]);
    partials[2 * static_cast<uint64_t>(chunk)] = hi;
    partials[2 * static_cast<uint64_t>(chunk) + 1] = lo;
}

int blocksFor(uint64_t work, int perBlock, int maxBlocks) {
    uint64_t const blocks = (work + perBlock - 1) / perBlock;
    return static_cast<int>(blocks < static_cast<uint64_t>(maxBlocks) ? (blocks == 0 ? 1 : blocks) : maxBlocks);
}

}  // namespace

void launchCopySpans(SpanCopy const* spans, int32_t count, uint64_t totalChunks, int maxBlocks, cudaStream_t stream) {
    CTXC_LAUNCH(copySpansKernel, blocksFor(totalChunks, 1, maxBlocks), kThreads, stream)(spans, count, totalChunks);
}

void launchCopyHostPages(HostPageCopy const& copy, uint64_t totalChunks, int maxBlocks, cudaStream_t stream) {
    CTXC_LAUNCH(copyHostPagesKernel, blocksFor(totalChunks, 1, maxBlocks), kThreads, stream)(copy, totalChunks);
}

uint32_t compactUnitBytes(void const* base, uint64_t rowBytes) { return unitOf(base, rowBytes); }

void launchCompactRows(CompactTensor const* tensors, int32_t tensorCount, RowMove const* moves, int32_t moveCount,
                       uint64_t maxColumns, int maxBlocks, cudaStream_t stream) {
    dim3 const grid(blocksFor(maxColumns, kThreads, maxBlocks), static_cast<unsigned>(tensorCount));
    CTXC_LAUNCH(compactRowsKernel, grid, kThreads, stream)(tensors, moves, moveCount);
}

void launchRebaseRows(int32_t* indices, int64_t count, int32_t const* oldToNew, int32_t oldBatch,
                      int32_t rowsPerSequence, int maxBlocks, cudaStream_t stream) {
    int64_t const misalign = static_cast<int64_t>((reinterpret_cast<uintptr_t>(indices) & 15) / sizeof(int32_t));
    int64_t const head = misalign == 0 ? 0 : (4 - misalign < count ? 4 - misalign : count);
    CTXC_LAUNCH(rebaseRowsKernel, blocksFor(static_cast<uint64_t>(count / 4 + 1), kThreads, maxBlocks), kThreads,
                stream)(indices, count, head, oldToNew, oldBatch, rowsPerSequence);
}

void launchAddToLengths(int32_t* lengths, int32_t count, int32_t scalar, int32_t const* increments,
                        cudaStream_t stream) {
    CTXC_LAUNCH(addToLengthsKernel, blocksFor(static_cast<uint64_t>(count), kThreads, 1024), kThreads, stream)(
        lengths, count, scalar, increments);
}

void launchGatherPagedKv(PagedKvGather const& params, cudaStream_t stream) {
    uint64_t const tokenBytes = static_cast<uint64_t>(params.kvHeads) * params.headDim * dtypeBytes(params.outDtype);
    uint64_t const perBlock = kSpanChunkBytes / tokenBytes;
    int32_t const tokensPerBlock =
        perBlock == 0
            ? 1
            : (perBlock < static_cast<uint64_t>(params.pageSize) ? static_cast<int32_t>(perBlock) : params.pageSize);
    int32_t const splits = (params.pageSize + tokensPerBlock - 1) / tokensPerBlock;
    uint64_t const pages = (static_cast<uint64_t>(params.seqLen) + params.pageSize - 1) / params.pageSize;
    dim3 const grid(static_cast<unsigned>(pages * splits), static_cast<unsigned>(params.batch), 2);
    if (params.layout == static_cast<int32_t>(DenseKvLayout::kHeadMajor))
        CTXC_LAUNCH(gatherHeadMajorKernel, grid, kThreads, stream)(params, splits, tokensPerBlock);
    else CTXC_LAUNCH(gatherPagedKvKernel, grid, kThreads, stream)(params, splits, tokensPerBlock);
}

void launchScatterPagedKv(PagedKvScatter const& params, cudaStream_t stream) {
    uint64_t const tokenBytes = static_cast<uint64_t>(params.kvHeads) * params.headDim * dtypeBytes(params.dtype);
    uint64_t const perBlock = kSpanChunkBytes / tokenBytes;
    int32_t const tokensPerBlock = perBlock == 0 ? 1 : (perBlock < 65536 ? static_cast<int32_t>(perBlock) : 65536);
    uint64_t const blocks = (static_cast<uint64_t>(params.seqLen) + tokensPerBlock - 1) / tokensPerBlock;
    dim3 const grid(static_cast<unsigned>(blocks), static_cast<unsigned>(params.batch), 2);
    CTXC_LAUNCH(scatterPagedKvKernel, grid, kThreads, stream)(params, tokensPerBlock);
}

void launchHashChunks(unsigned char const* data, uint64_t size, uint32_t numChunks, unsigned long long* partials,
                      cudaStream_t stream) {
    CTXC_LAUNCH(hashChunksKernel, (numChunks + 127) / 128, 128, stream)(data, size, numChunks, partials);
}

}  // namespace ctxcache::device::kernels
