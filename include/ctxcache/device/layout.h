// Layout, index math and element conversions shared by host and device code: the ONE place where the device
// layer's byte layouts are defined. Every function is CTXC_HD (static __host__ __device__ __forceinline__ under
// nvcc, static inline elsewhere) and uses only integer arithmetic and IEEE single-precision multiplication, so
// the CPU backend (the oracle) and the CUDA kernels compute the same bits.
//
// Layouts (element indices; every array is dense, row-major, no padding):
//   KV page pool of one layer   [2, numPages, pageSize, kvHeads, headDim]   K half, then V half. A "flat page"
//                               f in [0, 2*numPages) addresses one page of either half: V page of K page p is
//                               p + numPages.
//   Page table (kernel view)    [maxBatch, 2, maxPagesPerSeq] int32: row 0 K flat pages, row 1 V flat pages
//                               (= K + numPages), -1 = unused (both rows).
//   Dense K or V (gather output, scatter input), by DenseKvLayout:
//                               token-major [batch, seqLen, kvHeads, headDim]   (kTokenMajor, the default)
//                               head-major  [batch, kvHeads, seqLen, headDim]   (kHeadMajor: what attention
//                               code such as Hugging Face's reads, so no transpose copy is needed)
//   Partial-KV snapshot layer   [2, pageSize, kvHeads, headDim] per slot: the first validTokens tokens of a K
//                               page, then (at pageSize*kvHeads*headDim) those of its V page.
//   Host slot ("page-first")    bytes; slot s at hostBase + s * slotBytes: [0, payloadOffset) the caller's header
//                               (never touched), then for layer l = 0..L-1 in order the K page bytes of layer l,
//                               then its V page bytes (pageBytes(l) each); the rest of the slot is never touched.
//
// POD descriptors (SpanCopy, CompactTensor, RowMove, PagedKvGather, PagedKvScatter, HostPageCopy) are built on the
// host and read by kernels. Threading: pure functions and plain structs.
#pragma once

#include <cstddef>
#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

#include "ctxcache/device/dtype.h"

#if defined(__CUDACC__)
#define CTXC_HD static __host__ __device__ __forceinline__
#else
#define CTXC_HD static inline
#endif

namespace ctxcache::device {

// ---- POD descriptors ---------------------------------------------------------------------------------------

// One contiguous byte span to copy (src != null) or to zero (src == null). The backend fills firstChunk (the
// prefix sum of ceil(bytes / kSpanChunkBytes) over the preceding spans) before a launch.
struct SpanCopy {
    void* dst;
    void const* src;
    uint64_t bytes;
    uint64_t firstChunk;
};
inline constexpr uint64_t kSpanChunkBytes = 16384;  // bytes one CUDA block copies per chunk (a multiple of 16)

// A dim-0 batched tensor compacted in place: rows of rowBytes bytes starting at base.
struct CompactTensor {
    void* base;
    uint64_t rowBytes;
    uint64_t rows;
};

// Row `from` moves to row `to`. A valid move list is order-preserving: from strictly increasing, to strictly
// increasing, to < from (identity moves are dropped). Then no read of a later source ever aliases an earlier or
// current destination, which is what makes in-place compaction safe with any read-ahead.
struct RowMove {
    int32_t from;
    int32_t to;
};

// Layout of a dense K or V tensor. Values are part of the C ABI (CTXC_KV_LAYOUT_*).
enum class DenseKvLayout : int32_t { kTokenMajor = 0, kHeadMajor = 1 };

// Paged K/V of one layer gathered into dense K and V tensors (layout: a DenseKvLayout). Token t of
// sequence b comes from page table entry (b, half, t / pageSize); it is zero when the entry is -1 (or outside
// [0, 2*numPages)) or when t >= kvLengths[b] (kvLengths may be null: every token counts). Same-dtype output is
// a bit copy; an fp8 pool may be dequantised to fp16, bf16 or fp32 as e4m3ToFloat(x) * scale.
struct PagedKvGather {
    void const* pool;
    int32_t const* pageTable;
    int32_t const* kvLengths;
    void* kOut;
    void* vOut;
    int32_t numPages;
    int32_t pageSize;
    int32_t kvHeads;
    int32_t headDim;
    int32_t maxPagesPerSeq;
    int32_t batch;
    int32_t seqLen;
    int32_t poolDtype;  // DType
    int32_t outDtype;   // DType
    float kScale;
    float vScale;
    int32_t layout;     // DenseKvLayout
};

// Dense K and V of one layer written into its pages through the page table: the inverse of the gather. Token t
// of sequence b (t < seqLen) is stored at position p = firstPosition + t, in page table entry (b, half,
// p / pageSize), token p % pageSize of that page. Same dtype only (a bit copy). The front checks on the host
// table that every entry the write touches is mapped, so the kernel never meets a -1.
struct PagedKvScatter {
    void* pool;
    int32_t const* pageTable;
    void const* kIn;
    void const* vIn;
    int32_t numPages;
    int32_t pageSize;
    int32_t kvHeads;
    int32_t headDim;
    int32_t maxPagesPerSeq;
    int32_t batch;
    int32_t seqLen;
    int32_t firstPosition;
    int32_t dtype;   // DType of the pool and the inputs
    int32_t layout;  // DenseKvLayout
};

// Pages of a KV pool copied to or from host slots (the host slot layout above), every layer, K and V, in one
// launch. The backend's front fills firstChunk and chunksPerPage and packs the layers and pairs into its table.
struct HostPageLayer {
    void* pool;            // the layer's [2, numPages, ...] array: K page p at pool + p * pageBytes, V page at
                           // pool + (p + numPages) * pageBytes
    uint64_t pageBytes;    // one K (or V) page
    uint64_t slotOffset;   // where the layer's K page starts within a slot (its V page follows at + pageBytes)
    uint64_t firstChunk;   // sum over earlier layers of 2 * ceil(pageBytes / kSpanChunkBytes)
};
// pages[i] of the pool <-> slot slots[i] of the host.
struct HostPagePair {
    int32_t page;
    int32_t slot;
};
enum class HostCopyDirection : int32_t { kToHost = 0, kFromHost = 1 };
struct HostPageCopy {
    HostPageLayer const* layers;
    HostPagePair const* pairs;
    void* host;              // slot 0, as the backend's kernels address it (CUDA: a mapped pinned pointer)
    uint64_t slotBytes;
    uint64_t chunksPerPage;  // sum over layers of 2 * ceil(pageBytes / kSpanChunkBytes)
    int32_t numLayers;
    int32_t count;           // pairs
    int32_t numPages;        // K pages of the pool
    int32_t slotCount;       // slots [0, slotCount) at host
    int32_t direction;       // HostCopyDirection
    int32_t reserved;
};

// ---- element sizes (dtype.h's dtypeSize, callable from device code) --------------------------------------------

CTXC_HD uint32_t dtypeBytes(int32_t dtype) {
    return dtype == static_cast<int32_t>(DType::kFp32) ? 4u : dtype == static_cast<int32_t>(DType::kFp8E4m3) ? 1u : 2u;
}

// ---- index math ----------------------------------------------------------------------------------------------

CTXC_HD int64_t kvPageElements(int32_t pageSize, int32_t kvHeads, int32_t headDim) {
    return static_cast<int64_t>(pageSize) * kvHeads * headDim;
}

// Element index of (flat page, token in page, head, dim) in a layer's pool.
CTXC_HD int64_t kvPoolIndex(int64_t flatPage, int32_t token, int32_t head, int32_t dim, int32_t pageSize,
                            int32_t kvHeads, int32_t headDim) {
    return ((flatPage * pageSize + token) * kvHeads + head) * static_cast<int64_t>(headDim) + dim;
}

CTXC_HD int32_t vPageOf(int32_t kPage, int32_t numPages) { return kPage < 0 ? -1 : kPage + numPages; }

// Index into the [maxBatch, 2, maxPagesPerSeq] page table.
CTXC_HD int64_t pageTableIndex(int32_t slot, int32_t half, int32_t logicalPage, int32_t maxPagesPerSeq) {
    return (static_cast<int64_t>(slot) * 2 + half) * maxPagesPerSeq + logicalPage;
}

CTXC_HD int64_t denseKvIndex(int32_t b, int32_t t, int32_t head, int32_t dim, int32_t seqLen, int32_t kvHeads,
                             int32_t headDim) {
    return ((static_cast<int64_t>(b) * seqLen + t) * kvHeads + head) * static_cast<int64_t>(headDim) + dim;
}

// Element index of (b, t, head, dim) in a dense K or V tensor of either layout.
CTXC_HD int64_t denseKvIndexIn(int32_t layout, int32_t b, int32_t t, int32_t head, int32_t dim, int32_t seqLen,
                               int32_t kvHeads, int32_t headDim) {
    if (layout == static_cast<int32_t>(DenseKvLayout::kHeadMajor))
        return ((static_cast<int64_t>(b) * kvHeads + head) * seqLen + t) * static_cast<int64_t>(headDim) + dim;
    return denseKvIndex(b, t, head, dim, seqLen, kvHeads, headDim);
}

CTXC_HD bool isValidKvLayout(int32_t layout) {
    return layout == static_cast<int32_t>(DenseKvLayout::kTokenMajor) ||
           layout == static_cast<int32_t>(DenseKvLayout::kHeadMajor);
}

// Flat destination page of token t of sequence b of a scatter (half 0 = K, 1 = V).
CTXC_HD int32_t scatterTargetPage(PagedKvScatter const& s, int32_t b, int32_t half, int32_t t) {
    return s.pageTable[pageTableIndex(b, half, (s.firstPosition + t) / s.pageSize, s.maxPagesPerSeq)];
}

// Flat source page of token t of sequence b (half 0 = K, 1 = V), or -1 when it is zero-filled.
CTXC_HD int32_t gatherSourcePage(PagedKvGather const& g, int32_t b, int32_t half, int32_t t) {
    if (g.kvLengths != nullptr && t >= g.kvLengths[b]) return -1;
    int32_t const page = g.pageTable[pageTableIndex(b, half, t / g.pageSize, g.maxPagesPerSeq)];
    return (page < 0 || page >= 2 * g.numPages) ? -1 : page;
}

// Chunked hashing: chunk size ceil(n / numChunks); chunk i covers [min(i*cs, n), min((i+1)*cs, n)).
CTXC_HD uint64_t hashChunkBytes(uint64_t total, uint32_t numChunks) {
    return numChunks == 0 ? 0 : (total + numChunks - 1) / numChunks;
}
CTXC_HD uint64_t hashChunkBegin(uint64_t total, uint32_t numChunks, uint32_t chunk) {
    uint64_t const begin = static_cast<uint64_t>(chunk) * hashChunkBytes(total, numChunks);
    return begin < total ? begin : total;
}

// The span whose chunk range holds `chunk`: spans[i].firstChunk <= chunk < spans[i+1].firstChunk.
CTXC_HD int32_t spanOfChunk(SpanCopy const* spans, int32_t count, uint64_t chunk) {
    int32_t lo = 0, hi = count - 1;
    while (lo < hi) {
        int32_t const mid = (lo + hi + 1) / 2;
        if (spans[mid].firstChunk <= chunk) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The layer whose chunk range holds chunk `within` of a page pair: layers[l].firstChunk <= within <
// layers[l+1].firstChunk.
CTXC_HD int32_t hostLayerOfChunk(HostPageLayer const* layers, int32_t numLayers, uint64_t within) {
    int32_t lo = 0, hi = numLayers - 1;
    while (lo < hi) {
        int32_t const mid = (lo + hi + 1) / 2;
        if (layers[mid].firstChunk <= within) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Half `half` (0 = K, 1 = V) of page `page` of a layer, and its place in slot `slot`.
CTXC_HD unsigned char* hostCopyPoolPage(HostPageLayer const& layer, int32_t numPages, int32_t page, int32_t half) {
    return static_cast<unsigned char*>(layer.pool) +
           (static_cast<uint64_t>(page) + static_cast<uint64_t>(half) * static_cast<uint64_t>(numPages)) *
               layer.pageBytes;
}
CTXC_HD unsigned char* hostCopySlotPage(HostPageCopy const& c, HostPageLayer const& layer, int32_t slot, int32_t half) {
    return static_cast<unsigned char*>(c.host) + static_cast<uint64_t>(slot) * c.slotBytes + layer.slotOffset +
           static_cast<uint64_t>(half) * layer.pageBytes;
}

// ---- bit casts -------------------------------------------------------------------------------------------------

CTXC_HD uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
#endif
}
CTXC_HD float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
#endif
}

// ---- element conversions (bit exact, round to nearest even, NaN canonicalised) --------------------------------

// Position of the highest set bit of v (v > 0).
CTXC_HD int32_t highestBit(uint32_t v) {
    int32_t p = 0;
    while (v >>= 1) ++p;
    return p;
}

CTXC_HD float fp8E4m3ToFloat(uint8_t x) {
    uint32_t const sign = static_cast<uint32_t>(x & 0x80u) << 24;
    uint32_t const exponent = (x >> 3) & 0xFu;
    uint32_t const mantissa = x & 0x7u;
    if (exponent == 0xFu && mantissa == 0x7u) return bitsFloat(0x7FC00000u);  // NaN (E4M3FN has no infinity)
    if (exponent == 0) {
        if (mantissa == 0) return bitsFloat(sign);
        int32_t const p = highestBit(mantissa);  // value = mantissa * 2^-9
        uint32_t const e = static_cast<uint32_t>(p - 9 + 127);
        return bitsFloat(sign | (e << 23) | ((mantissa - (1u << p)) << (23 - p)));
    }
    return bitsFloat(sign | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

CTXC_HD float halfBitsToFloat(uint16_t h) {
    uint32_t const sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t const exponent = (h >> 10) & 0x1Fu;
    uint32_t const mantissa = h & 0x3FFu;
    if (exponent == 0) {
        if (mantissa == 0) return bitsFloat(sign);
        int32_t const p = highestBit(mantissa);  // value = mantissa * 2^-24
        uint32_t const e = static_cast<uint32_t>(p - 24 + 127);
        return bitsFloat(sign | (e << 23) | ((mantissa - (1u << p)) << (23 - p)));
    }
    if (exponent == 0x1Fu) return bitsFloat(sign | 0x7F800000u | (mantissa << 13));
    return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

CTXC_HD float bf16BitsToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

CTXC_HD uint16_t floatToHalfBits(float f) {
    uint32_t const x = floatBits(f);
    uint32_t const sign = (x >> 16) & 0x8000u;
    uint32_t const a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7E00u;                                     // NaN
    if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);      // >= 65520 rounds to infinity
    if (a < 0x38800000u) {                                                    // below 2^-14: subnormal or zero
        if (a <= 0x33000000u) return static_cast<uint16_t>(sign);            // <= 2^-25 rounds to zero
        uint32_t const e = a >> 23;
        uint32_t const m = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t const shift = 126 - e;                                       // 14..24
        uint32_t q = m >> shift;
        uint32_t const rem = m & ((1u << shift) - 1);
        uint32_t const halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    uint32_t const r = a + 0xFFFu + ((a >> 13) & 1u) - 0x38000000u;
    return static_cast<uint16_t>(sign | (r >> 13));
}

CTXC_HD uint16_t floatToBf16Bits(float f) {
    uint32_t const x = floatBits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;  // NaN
    return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

CTXC_HD uint32_t canonicalFloatBits(float f) {
    uint32_t const x = floatBits(f);
    return (x & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : x;
}

// fp8 e4m3 byte -> bits of an output element of `outDtype` (fp16, bf16 or fp32): e4m3ToFloat(x) * scale,
// rounded to nearest even, NaN canonical. 16-bit results are in the low half.
CTXC_HD uint32_t dequantFp8Bits(uint8_t x, float scale, int32_t outDtype) {
    float const value = fp8E4m3ToFloat(x) * scale;
    if (outDtype == static_cast<int32_t>(DType::kFp32)) return canonicalFloatBits(value);
    return outDtype == static_cast<int32_t>(DType::kBf16) ? floatToBf16Bits(value) : floatToHalfBits(value);
}

// The same, written little-endian into out[0 .. dtypeSize(outDtype)).
CTXC_HD void dequantFp8To(uint8_t x, float scale, int32_t outDtype, unsigned char* out) {
    uint32_t const bits = dequantFp8Bits(x, scale, outDtype);
    out[0] = static_cast<unsigned char>(bits);
    out[1] = static_cast<unsigned char>(bits >> 8);
    if (outDtype == static_cast<int32_t>(DType::kFp32)) {
        out[2] = static_cast<unsigned char>(bits >> 16);
        out[3] = static_cast<unsigned char>(bits >> 24);
    }
}

// ---- 128-bit FNV-1a -----------------------------------------------------------------------------------------

inline constexpr uint64_t kFnvOffsetHi = 0x6C62272E07BB0142ull;
inline constexpr uint64_t kFnvOffsetLo = 0x62B821756295C58Dull;
inline constexpr uint8_t kTagOpaqueIdentity = 18;
inline constexpr uint32_t kDefaultHashChunks = 2048;

// state = (state ^ byte) * (2^88 + 0x13B) mod 2^128, on (hi, lo) 64-bit halves.
CTXC_HD void fnv1aByte(uint64_t& hi, uint64_t& lo, uint32_t byte) {
    uint64_t const m = 0x13Bull;
    lo ^= byte;
#if defined(__CUDA_ARCH__)
    uint64_t const carry = __umul64hi(lo, m);
#else
    uint64_t const p0 = (lo & 0xFFFFFFFFull) * m;
    uint64_t const p1 = (lo >> 32) * m;
    uint64_t const carry = (p1 + (p0 >> 32)) >> 32;
#endif
    hi = hi * m + carry + (lo << 24);
    lo = lo * m;
}

}  // namespace ctxcache::device
