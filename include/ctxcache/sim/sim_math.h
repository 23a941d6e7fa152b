// The reference engine's model math, shared by host and device code: the ONE place where what the simulated
// model writes and samples is defined. The CPU implementation (cpp/sim/sim_kernels_cpu.cpp, the oracle) and the
// CUDA kernels (cuda/sim_kernels.cu) both call these CTXC_HD functions, which use only 32-bit integer arithmetic,
// so both compute the same bits.
//
// Words: a stored element is an unsigned integer word of its dtype's size (fp16/bf16 16 bits, fp32 32, fp8 8),
// read zero-extended to uint32 and written truncated. The bytes are never interpreted as numbers.
//
// mix: murmur3_32 (Appleby's MurmurHash3_x86_32 body and fmix32 finaliser) over a list of 32-bit words, seeded
// with the model seed. For an attention element e of layer l at position p of a sequence with LoRA salt s:
//     K[l][p][e] = trunc(mix(seed; prevK, token[p], s, media[p], l, e, p, kSimTagK))     (V: prevV, kSimTagV)
// where prevK is K[l][p-1][e] read back through the page table, or for p == 0 the seed word
//     seedWord(l, e, tag) = trunc(mix(seed; kSimTagSeedWord, l, e, tag)).
// Recurrent and conv word w of recurrent layer r: s = trunc(mix(seed; s, token[p], salt, media[p], r, w, p, tag)).
// Draft (EAGLE) element e of draft layer l at p:
//     D[l][p][e] = trunc(mix(seed; prevD, base0[p][e % baseElements], token[p+1], salt, l, e, p, tag))
// with base0 the base layer 0's K (for draft K) or V (for draft V) word, read through the base page table.
// Sampling: fold = mix(seed; kSimTagSample, sum of mix(seed; word, source, layer, index, kSimTagSampleTerm) over
// every word read, mod 2^32); token = fold % vocabSize. A windowed sample (window W > 0, a sliding-window model)
// reads the base words of every position q of [max(0, L - W), L), each term mix(seed; word, source, layer, index,
// q, kSimTagSampleWindowTerm) (positions included, so a page mapped at the wrong logical index changes the sum). The
// sum is order-free (so the GPU can reduce it in any order) and changes whenever any one word changes (murmur3 is
// injective in each input word).
//
// POD descriptors (the kernel views) are built on the host by SimModel (cpp/sim/sim_kernels.cpp) and read by
// both implementations. Threading: pure functions and plain structs.
#pragma once

#include <cstdint>

#include "ctxcache/device/layout.h"

namespace ctxcache::sim {

// ---- the caller's per-sequence inputs (also read by the kernels, from a device copy) --------------------------

// One sequence of an attention, recurrent or draft step: positions [begin, end) of slot `slot` (its page-table
// row and its resident-state row).
struct SimSequence {
    int32_t slot = 0;
    int32_t begin = 0;
    int32_t end = 0;
    uint32_t salt = 0;                // identity of the LoRA adapter (its name's hash), 0 = none
    int32_t const* tokens = nullptr;  // device memory: tokens[i] is the token at position begin + i
    uint32_t const* media = nullptr;  // device memory or null (all text): media[i] for position begin + i, 0 = text
    int32_t tokenCount = 0;           // entries of tokens (and of media when it is not null)
    int32_t hiddenRow = 0;            // a draft over hidden rows (MTP head): the row of position begin
};

// One sequence to sample: the slot's stored state after `length` tokens.
struct SimSampleRequest {
    int32_t slot = 0;
    int32_t length = 0;          // KV length L: the base K/V words at position L - 1 are read (attention models)
    int32_t draftPosition = -1;  // the draft layers' K/V words at this position are read too; -1 = none
    int32_t window = 0;          // > 0: the base words of every position of [max(0, L - window), L) are read
};

// ---- tags: every mix names what it computes -------------------------------------------------------------------

inline constexpr uint32_t kSimTagK = 0x53494D01u;  // "SIM" 01
inline constexpr uint32_t kSimTagV = 0x53494D02u;
inline constexpr uint32_t kSimTagDraftK = 0x53494D03u;
inline constexpr uint32_t kSimTagDraftV = 0x53494D04u;
inline constexpr uint32_t kSimTagRecurrent = 0x53494D05u;
inline constexpr uint32_t kSimTagConv = 0x53494D06u;
inline constexpr uint32_t kSimTagSeedWord = 0x53494D07u;
inline constexpr uint32_t kSimTagSampleTerm = 0x53494D08u;
inline constexpr uint32_t kSimTagSample = 0x53494D09u;
inline constexpr uint32_t kSimTagSampleWindowTerm = 0x53494D0Au;
inline constexpr uint32_t kSimTagHidden = 0x53494D0Bu;  // the reference engine's MTP hidden rows (host side)

// Sources of sampled words (the `source` input of a sample term).
enum SimSource : int32_t {
    kSimSourceBaseK = 0,
    kSimSourceBaseV = 1,
    kSimSourceDraftK = 2,
    kSimSourceDraftV = 3,
    kSimSourceRecurrent = 4,
    kSimSourceConv = 5,
};

// ---- mix: murmur3_32 over 32-bit words --------------------------------------------------------------------------

CTXC_HD uint32_t simRotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

CTXC_HD uint32_t simFmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

// One murmur3_32 block step of word k into state h.
CTXC_HD uint32_t simMixStep(uint32_t h, uint32_t k) {
    k *= 0xCC9E2D51u;
    k = simRotl(k, 15);
    k *= 0x1B873593u;
    h ^= k;
    h = simRotl(h, 13);
    return h * 5u + 0xE6546B64u;
}

CTXC_HD uint32_t simMixFinish(uint32_t h, uint32_t words) { return simFmix32(h ^ (words * 4u)); }

CTXC_HD uint32_t simMix2(uint32_t seed, uint32_t a, uint32_t b) {
    return simMixFinish(simMixStep(simMixStep(seed, a), b), 2);
}

CTXC_HD uint32_t simMix4(uint32_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    return simMixFinish(simMixStep(simMixStep(simMixStep(simMixStep(seed, a), b), c), d), 4);
}

CTXC_HD uint32_t simMix5(uint32_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t e) {
    return simMixFinish(simMixStep(simMixStep(simMixStep(simMixStep(simMixStep(seed, a), b), c), d), e), 5);
}

CTXC_HD uint32_t simMix8(uint32_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d, uint32_t e, uint32_t f,
                         uint32_t g, uint32_t h) {
    uint32_t x = simMixStep(seed, a);
    x = simMixStep(x, b);
    x = simMixStep(x, c);
    x = simMixStep(x, d);
    x = simMixStep(x, e);
    x = simMixStep(x, f);
    x = simMixStep(x, g);
    x = simMixStep(x, h);
    return simMixFinish(x, 8);
}

// ---- words ------------------------------------------------------------------------------------------------------

CTXC_HD uint32_t simTruncate(uint32_t value, uint32_t wordBytes) {
    return wordBytes >= 4 ? value : value & ((1u << (8 * wordBytes)) - 1u);
}

CTXC_HD uint32_t simLoadWord(void const* base, int64_t index, uint32_t wordBytes) {
    if (wordBytes == 1) return static_cast<uint8_t const*>(base)[index];
    if (wordBytes == 2) return static_cast<uint16_t const*>(base)[index];
    return static_cast<uint32_t const*>(base)[index];
}

CTXC_HD void simStoreWord(void* base, int64_t index, uint32_t wordBytes, uint32_t value) {
    if (wordBytes == 1) static_cast<uint8_t*>(base)[index] = static_cast<uint8_t>(value);
    else if (wordBytes == 2) static_cast<uint16_t*>(base)[index] = static_cast<uint16_t>(value);
    else static_cast<uint32_t*>(base)[index] = value;
}

CTXC_HD uint32_t simSeedWord(uint32_t seed, int32_t layer, int32_t element, uint32_t tag, uint32_t wordBytes) {
    return simTruncate(
        simMix4(seed, kSimTagSeedWord, static_cast<uint32_t>(layer), static_cast<uint32_t>(element), tag), wordBytes);
}

// ---- kernel views (built on the host, read by both implementations) -----------------------------------------

// One layer of a KV pool: its [2, numPages, pageSize, elements] words; work items [firstWork, firstWork +
// 2 * elements) of a sequence are (half, element) pairs of this layer (K elements, then V).
struct SimKvLayer {
    void* data;
    int32_t elements;  // kvHeads * headDim
    int32_t reserved;
    int64_t firstWork;
};

// A pool and the page table that addresses it.
struct SimKvView {
    SimKvLayer const* layers;
    int32_t const* pageTable;  // [maxBatch, 2, maxPagesPerSeq] (layout.h)
    int32_t numLayers;
    int32_t numPages;
    int32_t pageSize;
    int32_t maxPagesPerSeq;
    uint32_t wordBytes;
    int32_t reserved;
    int64_t totalWork;  // 2 * sum of elements
};

// One recurrent or conv row of one recurrent layer: slab of rows of rowBytes bytes, `words` words each; work
// items [firstWork, firstWork + words).
struct SimStateSegment {
    void* data;
    uint64_t rowBytes;
    int64_t firstWork;
    int32_t words;
    uint32_t wordBytes;
    int32_t layer;
    uint32_t tag;  // kSimTagRecurrent or kSimTagConv
};

// Words a sample reads: a K or V row of a (base or draft) layer at one position, or a state row of a slot.
struct SimSampleSegment {
    void* data;        // KV: the layer's data; state: the slab
    uint64_t rowBytes;  // state only
    int64_t firstWork;
    int32_t words;
    uint32_t wordBytes;
    int32_t layer;
    int32_t source;  // SimSource
};

struct SimAttentionLaunch {
    SimKvView kv;
    SimSequence const* sequences;
    int32_t count;
    uint32_t seed;
};

struct SimRecurrentLaunch {
    SimStateSegment const* segments;
    int32_t segmentCount;
    int32_t count;
    int64_t totalWork;
    SimSequence const* sequences;
    uint32_t seed;
};

struct SimDraftLaunch {
    SimKvView draft;
    SimKvView base;  // layer 0 is read (EAGLE)
    SimSequence const* sequences;
    int32_t count;
    uint32_t seed;
    // MTP head: the base input at p is word element % hiddenSize of hidden row hiddenRow + (p - begin) (fp16
    // bits, device memory) instead of base layer 0's word; null = read the base pool.
    uint16_t const* hidden;
    int32_t hiddenSize;
};

struct SimSampleLaunch {
    SimKvView base;   // numLayers == 0: no base pool
    SimKvView draft;  // numLayers == 0: no draft pool
    SimSampleSegment const* segments;
    int32_t segmentCount;
    int32_t count;
    int64_t totalWork;
    SimSampleRequest const* requests;
    int32_t* tokens;  // [count]
    uint32_t* folds;  // [count] or null
    uint32_t seed;
    int32_t vocabSize;
};

// ---- index math ---------------------------------------------------------------------------------------------

// The item i with items[i].firstWork <= work < items[i+1].firstWork (items sorted by firstWork, count > 0).
template <class Item>
CTXC_HD int32_t simItemOfWork(Item const* items, int32_t count, int64_t work) {
    int32_t lo = 0, hi = count - 1;
    while (lo < hi) {
        int32_t const mid = (lo + hi + 1) / 2;
        if (items[mid].firstWork <= work) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Word index, in its layer, of element e of the token at `position` of `slot` (half 0 = K, 1 = V), through the
// page table.
CTXC_HD int64_t simKvWordIndex(SimKvView const& kv, int32_t elements, int32_t slot, int32_t half, int32_t position,
                               int32_t element) {
    int32_t const flatPage =
        kv.pageTable[device::pageTableIndex(slot, half, position / kv.pageSize, kv.maxPagesPerSeq)];
    return (static_cast<int64_t>(flatPage) * kv.pageSize + position % kv.pageSize) * elements + element;
}

// ---- the ops, one work item at a time -----------------------------------------------------------------------

// Attention: element `element` of `half` of layer `layer` at positions [begin, end) of one sequence, in order.
CTXC_HD void simAttentionItem(SimKvView const& kv, SimSequence const& s, int32_t layer, int32_t half, int32_t element,
                              uint32_t seed) {
    if (s.begin >= s.end) return;
    SimKvLayer const& l = kv.layers[layer];
    uint32_t const tag = half == 0 ? kSimTagK : kSimTagV;
    uint32_t prev =
        s.begin == 0
            ? simSeedWord(seed, layer, element, tag, kv.wordBytes)
            : simLoadWord(l.data, simKvWordIndex(kv, l.elements, s.slot, half, s.begin - 1, element), kv.wordBytes);
    for (int32_t p = s.begin; p < s.end; ++p) {
        int32_t const i = p - s.begin;
        uint32_t const media = s.media ? s.media[i] : 0u;
        prev = simTruncate(
            simMix8(seed, prev, static_cast<uint32_t>(s.tokens[i]), s.salt, media, static_cast<uint32_t>(layer),
                    static_cast<uint32_t>(element), static_cast<uint32_t>(p), tag),
            kv.wordBytes);
        simStoreWord(l.data, simKvWordIndex(kv, l.elements, s.slot, half, p, element), kv.wordBytes, prev);
    }
}

// Recurrent fold: word `word` of one segment's row of the sequence's slot over positions [begin, end).
CTXC_HD void simRecurrentItem(SimStateSegment const& g, SimSequence const& s, int32_t word, uint32_t seed) {
    if (s.begin >= s.end) return;
    void* row = static_cast<unsigned char*>(g.data) + static_cast<uint64_t>(s.slot) * g.rowBytes;
    uint32_t state = simLoadWord(row, word, g.wordBytes);
    for (int32_t p = s.begin; p < s.end; ++p) {
        int32_t const i = p - s.begin;
        uint32_t const media = s.media ? s.media[i] : 0u;
        state = simTruncate(
            simMix8(seed, state, static_cast<uint32_t>(s.tokens[i]), s.salt, media, static_cast<uint32_t>(g.layer),
                    static_cast<uint32_t>(word), static_cast<uint32_t>(p), g.tag),
            g.wordBytes);
    }
    simStoreWord(row, word, g.wordBytes, state);
}

// Draft: element `element` of `half` of draft layer `layer` at positions [begin, end) of one sequence, from the
// previous draft word, the base input at p (base layer 0's word, or the MTP head's hidden row) and token p + 1.
CTXC_HD void simDraftItem(SimDraftLaunch const& d, SimSequence const& s, int32_t layer, int32_t half, int32_t element) {
    if (s.begin >= s.end) return;
    SimKvLayer const& l = d.draft.layers[layer];
    SimKvLayer const& b = d.base.layers[0];
    int32_t const baseElement = element % b.elements;
    uint32_t const tag = half == 0 ? kSimTagDraftK : kSimTagDraftV;
    uint32_t prev = s.begin == 0
                        ? simSeedWord(d.seed, layer, element, tag, d.draft.wordBytes)
                        : simLoadWord(l.data, simKvWordIndex(d.draft, l.elements, s.slot, half, s.begin - 1, element),
                                      d.draft.wordBytes);
    for (int32_t p = s.begin; p < s.end; ++p) {
        int32_t const i = p - s.begin;
        uint32_t const base =
            d.hidden ? static_cast<uint32_t>(
                           d.hidden[(static_cast<int64_t>(s.hiddenRow) + i) * d.hiddenSize + element % d.hiddenSize])
                     : simLoadWord(b.data, simKvWordIndex(d.base, b.elements, s.slot, half, p, baseElement),
                                   d.base.wordBytes);
        prev = simTruncate(
            simMix8(d.seed, prev, base, static_cast<uint32_t>(s.tokens[i + 1]), s.salt, static_cast<uint32_t>(layer),
                    static_cast<uint32_t>(element), static_cast<uint32_t>(p), tag),
            d.draft.wordBytes);
        simStoreWord(l.data, simKvWordIndex(d.draft, l.elements, s.slot, half, p, element), d.draft.wordBytes, prev);
    }
}

// Sample: the term of work item `work` of request r (0 for a draft word when the request reads no draft).
CTXC_HD uint32_t simSampleTerm(SimSampleLaunch const& L, SimSampleRequest const& r, int64_t work) {
    SimSampleSegment const& g = L.segments[simItemOfWork(L.segments, L.segmentCount, work)];
    int32_t const index = static_cast<int32_t>(work - g.firstWork);
    uint32_t word = 0;
    if (g.source == kSimSourceRecurrent || g.source == kSimSourceConv) {
        void const* row = static_cast<unsigned char const*>(g.data) + static_cast<uint64_t>(r.slot) * g.rowBytes;
        word = simLoadWord(row, index, g.wordBytes);
    } else {
        bool const draft = g.source == kSimSourceDraftK || g.source == kSimSourceDraftV;
        if (draft && r.draftPosition < 0) return 0;
        int32_t const half = (g.source == kSimSourceBaseV || g.source == kSimSourceDraftV) ? 1 : 0;
        if (!draft && r.window > 0) {
            uint32_t sum = 0;
            for (int32_t q = r.length > r.window ? r.length - r.window : 0; q < r.length; ++q) {
                uint32_t const w =
                    simLoadWord(g.data, simKvWordIndex(L.base, g.words, r.slot, half, q, index), g.wordBytes);
                uint32_t x = simMixStep(L.seed, w);
                x = simMixStep(x, static_cast<uint32_t>(g.source));
                x = simMixStep(x, static_cast<uint32_t>(g.layer));
                x = simMixStep(x, static_cast<uint32_t>(index));
                x = simMixStep(x, static_cast<uint32_t>(q));
                x = simMixStep(x, kSimTagSampleWindowTerm);
                sum += simMixFinish(x, 6);
            }
            return sum;
        }
        int32_t const position = draft ? r.draftPosition : r.length - 1;
        word = simLoadWord(g.data, simKvWordIndex(draft ? L.draft : L.base, g.words, r.slot, half, position, index),
                           g.wordBytes);
    }
    return simMix5(L.seed, word, static_cast<uint32_t>(g.source), static_cast<uint32_t>(g.layer),
                   static_cast<uint32_t>(index), kSimTagSampleTerm);
}

CTXC_HD uint32_t simSampleFold(uint32_t seed, uint32_t termSum) { return simMix2(seed, kSimTagSample, termSum); }

CTXC_HD int32_t simSampleToken(uint32_t fold, int32_t vocabSize) {
    return static_cast<int32_t>(fold % static_cast<uint32_t>(vocabSize));
}

}  // namespace ctxcache::sim
