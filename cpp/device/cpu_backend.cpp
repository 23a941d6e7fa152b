// The CPU backend: "device memory" is 256-byte aligned host memory and every op is a plain loop over the same
// layout.h math the CUDA kernels use. It is the oracle the CUDA backend is compared to byte for byte, so it is
// written for obviousness, not speed, with one exception: the host-tier page copies write their runs through
// streamingCopy (memcpy's bytes with non-temporal stores; streaming_copy.h), since a CPU deployment's tier moves
// every page it writes or loads through them.
//
// Host memory (allocateHost) is plain page-aligned memory, the same as its "device memory": every host address
// is its own kernel address (mapHost).
//
// Ordering: every op completes before it returns (synchronize() is a no-op). Counts one "kernel" per op so that
// launch-count expectations read the same on both backends.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/errors.h"
#include "streaming_copy.h"

namespace ctxcache::device {

namespace {

class CpuBackend final : public DeviceBackend {
public:
    explicit CpuBackend(BackendOptions const& options) : DeviceBackend(BackendKind::kCpu, options) {}

    std::string description() const override { return "cpu (host memory)"; }
    void* stream() const noexcept override { return stream_; }

protected:
    // 256-byte aligned, zeroed (alignedCalloc); host memory the same, page-aligned.
    void* doAllocate(size_t bytes) override { return alignedCalloc(bytes, 256, "cpu backend"); }
    void doDeallocate(void* pointer) noexcept override { std::free(static_cast<void**>(pointer)[-1]); }
    void* doAllocateHost(size_t bytes) override {
        return alignedCalloc(bytes, kHostAlignment, "cpu backend: host memory");
    }
    void doDeallocateHost(void* pointer) noexcept override { std::free(static_cast<void**>(pointer)[-1]); }
    void* doMapHost(void* data, size_t, std::string*) const override { return data; }
    void doUpload(void* dst, void const* src, size_t bytes) override { std::memmove(dst, src, bytes); }
    void doDownload(void* dst, void const* src, size_t bytes) override { std::memmove(dst, src, bytes); }
    void doCopy(void* dst, void const* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void doZero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
    void doSynchronize() override {}
    void doSetStream(void* stream) override { stream_ = stream; }  // accepted and ignored: ops complete on return

    void doCopySpans(SpanCopy const* spans, int32_t count, uint64_t) override {
        ++counters_.kernels;
        for (int32_t i = 0; i < count; ++i) {
            if (spans[i].src) std::memcpy(spans[i].dst, spans[i].src, spans[i].bytes);
            else std::memset(spans[i].dst, 0, spans[i].bytes);
        }
    }

    void doCompactRows(CompactTensor const* tensors, int32_t tensorCount, RowMove const* moves,
                       int32_t moveCount) override {
        ++counters_.kernels;
        for (int32_t t = 0; t < tensorCount; ++t) {
            auto* base = static_cast<unsigned char*>(tensors[t].base);
            uint64_t const rowBytes = tensors[t].rowBytes;
            for (int32_t m = 0; m < moveCount; ++m)  // ascending: a source is read before anything overwrites it
                std::memcpy(base + static_cast<uint64_t>(moves[m].to) * rowBytes,
                            base + static_cast<uint64_t>(moves[m].from) * rowBytes, rowBytes);
        }
    }

    void doRebaseExecutionRows(int32_t* indices, int64_t count, int32_t const* oldToNew, int32_t oldBatch,
                               int32_t rowsPerSequence) override {
        ++counters_.kernels;
        int64_t const limit = static_cast<int64_t>(oldBatch) * rowsPerSequence;
        for (int64_t i = 0; i < count; ++i) {
            int32_t const v = indices[i];
            if (v < 0 || v >= limit) {
                indices[i] = -1;
                continue;
            }
            int32_t const target = oldToNew[v / rowsPerSequence];
            indices[i] = target < 0 ? -1 : target * rowsPerSequence + v % rowsPerSequence;
        }
    }

    void doAddToLengths(int32_t* lengths, int32_t count, int32_t scalar, int32_t const* increments) override {
        ++counters_.kernels;
        for (int32_t i = 0; i < count; ++i) {  // two's-complement wrap, as the kernel does
            uint32_t v = static_cast<uint32_t>(lengths[i]) + static_cast<uint32_t>(scalar);
            if (increments) v += static_cast<uint32_t>(increments[i]);
            lengths[i] = static_cast<int32_t>(v);
        }
    }

    // One headDim row per (half, b, t, head): the same loop serves both dense layouts.
    void doGatherPagedKv(PagedKvGather const& g) override {
        ++counters_.kernels;
        auto const pool = static_cast<unsigned char const*>(g.pool);
        size_t const inSize = dtypeSize(static_cast<DType>(g.poolDtype));
        size_t const outSize = dtypeSize(static_cast<DType>(g.outDtype));
        bool const convert = g.poolDtype != g.outDtype;
        for (int32_t half = 0; half < 2; ++half) {
            auto* out = static_cast<unsigned char*>(half == 0 ? g.kOut : g.vOut);
            float const scale = half == 0 ? g.kScale : g.vScale;
            for (int32_t b = 0; b < g.batch; ++b) {
                for (int32_t t = 0; t < g.seqLen; ++t) {
                    int32_t const page = gatherSourcePage(g, b, half, t);
                    for (int32_t h = 0; h < g.kvHeads; ++h) {
                        unsigned char* dst =
                            out + denseKvIndexIn(g.layout, b, t, h, 0, g.seqLen, g.kvHeads, g.headDim) * outSize;
                        if (page < 0) {
                            std::memset(dst, 0, static_cast<size_t>(g.headDim) * outSize);
                            continue;
                        }
                        unsigned char const* src =
                            pool + kvPoolIndex(page, t % g.pageSize, h, 0, g.pageSize, g.kvHeads, g.headDim) * inSize;
                        if (!convert) {
                            std::memcpy(dst, src, static_cast<size_t>(g.headDim) * outSize);
                            continue;
                        }
                        for (int32_t e = 0; e < g.headDim; ++e)
                            dequantFp8To(src[e], scale, g.outDtype, dst + e * outSize);
                    }
                }
            }
        }
    }

    void doScatterPagedKv(PagedKvScatter const& s) override {
        ++counters_.kernels;
        auto* pool = static_cast<unsigned char*>(s.pool);
        size_t const size = dtypeSize(static_cast<DType>(s.dtype));
        size_t const rowBytes = static_cast<size_t>(s.headDim) * size;
        for (int32_t half = 0; half < 2; ++half) {
            auto const* in = static_cast<unsigned char const*>(half == 0 ? s.kIn : s.vIn);
            for (int32_t b = 0; b < s.batch; ++b) {
                for (int32_t t = 0; t < s.seqLen; ++t) {
                    int32_t const page = scatterTargetPage(s, b, half, t);
                    int32_t const slot = (s.firstPosition + t) % s.pageSize;
                    for (int32_t h = 0; h < s.kvHeads; ++h)
                        std::memcpy(pool + kvPoolIndex(page, slot, h, 0, s.pageSize, s.kvHeads, s.headDim) * size,
                                    in + denseKvIndexIn(s.layout, b, t, h, 0, s.seqLen, s.kvHeads, s.headDim) * size,
                                    rowBytes);
                }
            }
        }
    }

    // Page by page, layer by layer, K then V: one memcpy per page half, in the slot layout of layout.h.
    void doCopyHostPages(HostPageCopy const& c) override {
        ++counters_.kernels;
        bool const toHost = c.direction == static_cast<int32_t>(HostCopyDirection::kToHost);
        for (int32_t i = 0; i < c.count; ++i) {
            HostPagePair const pair = c.pairs[i];
            for (int32_t l = 0; l < c.numLayers; ++l) {
                HostPageLayer const& layer = c.layers[l];
                for (int32_t half = 0; half < 2; ++half) {
                    unsigned char* page = hostCopyPoolPage(layer, c.numPages, pair.page, half);
                    unsigned char* slot = hostCopySlotPage(c, layer, pair.slot, half);
                    if (toHost) detail::streamingCopy(slot, page, layer.pageBytes);
                    else detail::streamingCopy(page, slot, layer.pageBytes);
                }
            }
        }
        detail::streamingCopyFence();  // the batch's bytes before whatever the caller stores next
    }

    void doHashChunks(void const* data, uint64_t size, uint32_t numChunks, Hash128* hostPartials) override {
        ++counters_.kernels;
        auto const bytes = static_cast<unsigned char const*>(data);
        uint64_t const chunk = hashChunkBytes(size, numChunks);
        for (uint32_t i = 0; i < numChunks; ++i) {
            uint64_t const begin = hashChunkBegin(size, numChunks, i);
            uint64_t const end = begin + chunk < size ? begin + chunk : size;
            hostPartials[i] = fnv1a128(bytes + begin, static_cast<size_t>(end - begin));
        }
    }

private:
    // Zeroed memory from calloc, which takes large blocks as fresh zero pages from the kernel without writing
    // them: a pool costs resident memory only for the pages written (a huge pool no longer touches every byte
    // at construction). Aligned by hand; the raw pointer sits just before the aligned one.
    static void* alignedCalloc(size_t bytes, size_t align, char const* what) {
        if (bytes > SIZE_MAX - align - sizeof(void*)) throw OutOfMemoryError(describeAllocationFailure(what, bytes));
        void* raw = std::calloc(1, bytes + align + sizeof(void*));
        if (!raw) throw OutOfMemoryError(describeAllocationFailure(what, bytes));
        uintptr_t const aligned = (reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + align - 1) & ~(align - 1);
        reinterpret_cast<void**>(aligned)[-1] = raw;
        return reinterpret_cast<void*>(aligned);
    }

    void* stream_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceBackend> createCpuBackend(BackendOptions const& options) {
    return std::make_unique<CpuBackend>(options);
}

}  // namespace ctxcache::device
