// DeviceBackend's validating front and backend selection. Every check lives here, so the CPU and CUDA backends
// accept and reject the same calls; the do* implementations may assume valid arguments.
#include "ctxcache/device/device_backend.h"

#include <algorithm>
#include <limits>
#include <string>

#include "ctxcache/device/cuda_probe.h"
#include "ctxcache/device/device_error.h"
#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {

[[noreturn]] void fail(char const* op, std::string const& why) { throw ContractError(std::string(op) + ": " + why); }

bool overlaps(void const* a, void const* b, uint64_t bytes) {
    auto const x = reinterpret_cast<uintptr_t>(a);
    auto const y = reinterpret_cast<uintptr_t>(b);
    return x < y + bytes && y < x + bytes;
}

}  // namespace

DeviceBackend::DeviceBackend(BackendKind kind, BackendOptions const& options) : kind_(kind), options_(options) {
    if (options.maxTableBytes < 4096 || options.maxTableBytes > kMaxTableBytes)
        fail("DeviceBackend", "maxTableBytes must be in [4096, " + std::to_string(kMaxTableBytes) + "] (got " +
                                  std::to_string(options.maxTableBytes) + ")");
    if (options.maxHashChunks == 0) fail("DeviceBackend", "maxHashChunks must be positive");
    if (options.device < 0) fail("DeviceBackend", "device must be >= 0 (got " + std::to_string(options.device) + ")");
    spanScratch_.reserve(options.maxTableBytes / sizeof(SpanCopy));
}

void DeviceBackend::requireTable(char const* op, size_t bytes) const {
    if (bytes > options_.maxTableBytes)
        fail(op, "its descriptor table needs " + std::to_string(bytes) + " bytes, the backend's table holds " +
                     std::to_string(options_.maxTableBytes) + " (raise BackendOptions::maxTableBytes)");
}

void* DeviceBackend::allocate(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* pointer = doAllocate(bytes);
    allocatedBytes_.fetch_add(bytes, std::memory_order_relaxed);
    return pointer;
}

void DeviceBackend::deallocate(void* pointer, size_t bytes) noexcept {
    if (!pointer) return;
    doDeallocate(pointer);
    size_t current = allocatedBytes_.load(std::memory_order_relaxed);
    while (!allocatedBytes_.compare_exchange_weak(current, current - std::min(bytes, current),
                                                  std::memory_order_relaxed)) {
    }
}

void* DeviceBackend::allocateHost(size_t bytes) {
    if (bytes == 0) return nullptr;
    void* pointer = doAllocateHost(bytes);
    allocatedHostBytes_.fetch_add(bytes, std::memory_order_relaxed);
    return pointer;
}

void DeviceBackend::deallocateHost(void* pointer, size_t bytes) noexcept {
    if (!pointer) return;
    doDeallocateHost(pointer);
    size_t current = allocatedHostBytes_.load(std::memory_order_relaxed);
    while (!allocatedHostBytes_.compare_exchange_weak(current, current - std::min(bytes, current),
                                                      std::memory_order_relaxed)) {
    }
}

void* DeviceBackend::mapHost(void* data, size_t bytes, char const* what) const {
    if (bytes == 0) return nullptr;
    if (!data)
        throw ExternalMemoryError(std::string(what) + ": host memory is NULL but " + std::to_string(bytes) +
                                  " bytes are needed");
    std::string why;
    void* mapped = doMapHost(data, bytes, &why);
    if (!mapped) throw ExternalMemoryError(std::string(what) + ": host memory " + why);
    return mapped;
}

void DeviceBackend::setStream(void* stream) { doSetStream(stream); }

void DeviceBackend::checkExternal(void const* data, size_t bytes, char const* what) const {
    std::string const why = doCheckExternal(data, bytes);
    if (!why.empty()) throw ExternalMemoryError(std::string(what) + ": external memory " + why);
}

void DeviceBackend::upload(void* dst, void const* src, size_t bytes) {
    if (bytes == 0) return;
    if (!dst || !src) fail("upload", "null pointer with a non-zero size");
    doUpload(dst, src, bytes);
    ++counters_.transfers;
}

void DeviceBackend::download(void* dst, void const* src, size_t bytes) {
    if (bytes == 0) return;
    if (!dst || !src) fail("download", "null pointer with a non-zero size");
    doDownload(dst, src, bytes);
    ++counters_.transfers;
}

void DeviceBackend::copy(void* dst, void const* src, size_t bytes) {
    if (bytes == 0) return;
    if (!dst || !src) fail("copy", "null pointer with a non-zero size");
    if (overlaps(dst, src, bytes)) fail("copy", "source and destination overlap");
    doCopy(dst, src, bytes);
    ++counters_.transfers;
}

void DeviceBackend::zero(void* dst, size_t bytes) {
    if (bytes == 0) return;
    if (!dst) fail("zero", "null pointer with a non-zero size");
    doZero(dst, bytes);
    ++counters_.transfers;
}

void DeviceBackend::synchronize() { doSynchronize(); }

void DeviceBackend::copySpans(SpanCopy const* spans, int32_t count) {
    if (count < 0) fail("copySpans", "count is negative");
    if (count > 0 && !spans) fail("copySpans", "spans is null");
    requireTable("copySpans", static_cast<size_t>(count) * sizeof(SpanCopy));
    uint64_t chunks = 0;
    for (int32_t i = 0; i < count; ++i) {
        SpanCopy const& s = spans[i];
        if (s.bytes == 0) continue;
        if (!s.dst) fail("copySpans", "span " + std::to_string(i) + " has a null destination");
        if (s.src && overlaps(s.dst, s.src, s.bytes))
            fail("copySpans", "span " + std::to_string(i) + ": source and destination overlap");
    }
    spanScratch_.clear();
    for (int32_t i = 0; i < count; ++i) {
        if (spans[i].bytes == 0) continue;
        SpanCopy s = spans[i];
        s.firstChunk = chunks;
        chunks += (s.bytes + kSpanChunkBytes - 1) / kSpanChunkBytes;
        spanScratch_.push_back(s);
    }
    if (spanScratch_.empty()) return;
    doCopySpans(spanScratch_.data(), static_cast<int32_t>(spanScratch_.size()), chunks);
}

void DeviceBackend::compactRows(CompactTensor const* tensors, int32_t tensorCount, RowMove const* moves,
                                int32_t moveCount) {
    char const* op = "compactRows";
    if (tensorCount < 0 || moveCount < 0) fail(op, "negative count");
    if ((tensorCount > 0 && !tensors) || (moveCount > 0 && !moves)) fail(op, "null array with a non-zero count");
    if (tensorCount > 65535) fail(op, "more than 65535 tensors in one launch");
    requireTable(op, static_cast<size_t>(tensorCount) * sizeof(CompactTensor) + 16 +
                         static_cast<size_t>(moveCount) * sizeof(RowMove));
    for (int32_t m = 0; m < moveCount; ++m) {
        RowMove const& mv = moves[m];
        if (mv.to < 0 || mv.to >= mv.from)
            fail(op, "move " + std::to_string(m) + " (" + std::to_string(mv.from) + " -> " + std::to_string(mv.to) +
                         ") does not move a row to a lower index");
        if (m > 0 && (mv.from <= moves[m - 1].from || mv.to <= moves[m - 1].to))
            fail(op, "moves are not order-preserving at move " + std::to_string(m));
    }
    for (int32_t t = 0; t < tensorCount; ++t) {
        CompactTensor const& tensor = tensors[t];
        if (!tensor.base || tensor.rowBytes == 0)
            fail(op, "tensor " + std::to_string(t) + " is null or has empty rows");
        if (moveCount > 0 && static_cast<uint64_t>(moves[moveCount - 1].from) >= tensor.rows)
            fail(op, "row " + std::to_string(moves[moveCount - 1].from) + " is outside tensor " + std::to_string(t) +
                         " (" + std::to_string(tensor.rows) + " rows)");
    }
    if (tensorCount == 0 || moveCount == 0) return;
    doCompactRows(tensors, tensorCount, moves, moveCount);
}

void DeviceBackend::rebaseExecutionRows(int32_t* indices, int64_t count, int32_t const* oldToNew, int32_t oldBatch,
                                        int32_t rowsPerSequence) {
    char const* op = "rebaseExecutionRows";
    if (count < 0 || oldBatch < 0) fail(op, "negative count or batch");
    if (count > 0 && !indices) fail(op, "indices is null");
    if (oldBatch > 0 && !oldToNew) fail(op, "oldToNew is null");
    if (rowsPerSequence <= 0)
        fail(op, "rowsPerSequence must be positive (got " + std::to_string(rowsPerSequence) + ")");
    if (static_cast<int64_t>(oldBatch) * rowsPerSequence > std::numeric_limits<int32_t>::max())
        fail(op, "oldBatch * rowsPerSequence exceeds INT32_MAX");
    requireTable(op, static_cast<size_t>(oldBatch) * sizeof(int32_t));
    for (int32_t i = 0; i < oldBatch; ++i)
        if (oldToNew[i] < -1 || oldToNew[i] >= oldBatch)
            fail(op, "oldToNew[" + std::to_string(i) + "] = " + std::to_string(oldToNew[i]) + " is out of range");
    if (count == 0) return;
    doRebaseExecutionRows(indices, count, oldToNew, oldBatch, rowsPerSequence);
}

void DeviceBackend::addToLengths(int32_t* lengths, int32_t count, int32_t scalar, int32_t const* increments) {
    if (count < 0) fail("addToLengths", "count is negative");
    if (count > 0 && !lengths) fail("addToLengths", "lengths is null");
    if (count == 0) return;
    doAddToLengths(lengths, count, scalar, increments);
}

void DeviceBackend::gatherPagedKv(PagedKvGather const& g) {
    char const* op = "gatherPagedKv";
    if (!isValidDType(g.poolDtype) || !isValidDType(g.outDtype)) fail(op, "unknown dtype");
    auto const pool = static_cast<DType>(g.poolDtype);
    auto const out = static_cast<DType>(g.outDtype);
    if (pool != out && (pool != DType::kFp8E4m3 || out == DType::kFp8E4m3))
        fail(op, std::string("wrong dtype: a ") + dtypeName(pool) + " pool gathers only into " + dtypeName(pool) +
                     (pool == DType::kFp8E4m3 ? " or fp16/bf16/fp32 (dequantised)" : "") + ", not " + dtypeName(out));
    if (g.numPages <= 0 || g.pageSize <= 0 || g.kvHeads <= 0 || g.headDim <= 0 || g.maxPagesPerSeq <= 0)
        fail(op, "numPages, pageSize, kvHeads, headDim and maxPagesPerSeq must be positive");
    if (g.batch < 0 || g.seqLen < 0) fail(op, "batch and seqLen must be >= 0");
    if (g.batch > 65535) fail(op, "batch " + std::to_string(g.batch) + " exceeds 65535 sequences per launch");
    if (static_cast<int64_t>(g.seqLen) > static_cast<int64_t>(g.maxPagesPerSeq) * g.pageSize)
        fail(op, "seqLen " + std::to_string(g.seqLen) + " needs more pages than the table's " +
                     std::to_string(g.maxPagesPerSeq) + " per sequence");
    if (!isValidKvLayout(g.layout)) fail(op, "unknown dense KV layout " + std::to_string(g.layout));
    if (g.batch == 0 || g.seqLen == 0) return;
    if (!g.pool || !g.pageTable || !g.kOut || !g.vOut) fail(op, "null pool, page table or output");
    doGatherPagedKv(g);
}

void DeviceBackend::scatterPagedKv(PagedKvScatter const& s) {
    char const* op = "scatterPagedKv";
    if (!isValidDType(s.dtype)) fail(op, "unknown dtype");
    if (!isValidKvLayout(s.layout)) fail(op, "unknown dense KV layout " + std::to_string(s.layout));
    if (s.numPages <= 0 || s.pageSize <= 0 || s.kvHeads <= 0 || s.headDim <= 0 || s.maxPagesPerSeq <= 0)
        fail(op, "numPages, pageSize, kvHeads, headDim and maxPagesPerSeq must be positive");
    if (s.batch < 0 || s.seqLen < 0 || s.firstPosition < 0) fail(op, "batch, seqLen and firstPosition must be >= 0");
    if (s.batch > 65535) fail(op, "batch " + std::to_string(s.batch) + " exceeds 65535 sequences per launch");
    if (static_cast<int64_t>(s.firstPosition) + s.seqLen > static_cast<int64_t>(s.maxPagesPerSeq) * s.pageSize)
        fail(op, "positions [" + std::to_string(s.firstPosition) + ", " +
                     std::to_string(static_cast<int64_t>(s.firstPosition) + s.seqLen) +
                     ") need more pages than the table's " + std::to_string(s.maxPagesPerSeq) + " per sequence");
    if (s.batch == 0 || s.seqLen == 0) return;
    if (!s.pool || !s.pageTable || !s.kIn || !s.vIn) fail(op, "null pool, page table or input");
    doScatterPagedKv(s);
}

void DeviceBackend::copyHostPages(HostPageCopyRequest const& r) {
    if (r.direction != HostCopyDirection::kToHost && r.direction != HostCopyDirection::kFromHost)
        fail("copyHostPages", "unknown direction " + std::to_string(static_cast<int32_t>(r.direction)));
    bool const toHost = r.direction == HostCopyDirection::kToHost;
    char const* op = toHost ? "copyPagesToHost" : "copyPagesFromHost";
    if (r.count < 0) fail(op, "count is negative (" + std::to_string(r.count) + ")");
    if (r.count > 0 && (!r.pages || !r.slots))
        fail(op, "pages or hostSlots is null with a count of " + std::to_string(r.count));
    if (r.numLayers <= 0 || !r.layers) fail(op, "the pool has no layers");
    if (r.numPages <= 0) fail(op, "numPages must be positive (got " + std::to_string(r.numPages) + ")");
    if (r.slotCount < 0) fail(op, "slotCount is negative (" + std::to_string(r.slotCount) + ")");
    if (!r.host) fail(op, "the host base is null");
    requireTable(op, static_cast<size_t>(r.numLayers) * sizeof(HostPageLayer) + 16 +
                         static_cast<size_t>(r.count) * sizeof(HostPagePair));
    uint64_t slotEnd = 0;  // where the previous layer's V page ends within a slot
    for (int32_t l = 0; l < r.numLayers; ++l) {
        HostPageLayer const& layer = r.layers[l];
        std::string const name = "layer " + std::to_string(l);
        if (!layer.pool) fail(op, name + " has a null pool");
        if (layer.pageBytes == 0) fail(op, name + " has empty pages");
        if (layer.slotOffset < slotEnd)
            fail(op, name + " starts at slot byte " + std::to_string(layer.slotOffset) +
                         ", inside the layer before it (which ends at " + std::to_string(slotEnd) + ")");
        if (layer.pageBytes > r.slotBytes / 2 || layer.slotOffset > r.slotBytes - 2 * layer.pageBytes)
            fail(op, name + "'s K and V pages (2 x " + std::to_string(layer.pageBytes) + " bytes at " +
                         std::to_string(layer.slotOffset) + ") do not fit a slot of " + std::to_string(r.slotBytes) +
                         " bytes");
        slotEnd = layer.slotOffset + 2 * layer.pageBytes;
    }
    for (int32_t i = 0; i < r.count; ++i) {
        if (r.pages[i] < 0 || r.pages[i] >= r.numPages)
            fail(op, "pages[" + std::to_string(i) + "] = " + std::to_string(r.pages[i]) + " is outside [0, " +
                         std::to_string(r.numPages) + ")");
        if (r.slots[i] < 0 || r.slots[i] >= r.slotCount)
            fail(op, "hostSlots[" + std::to_string(i) + "] = " + std::to_string(r.slots[i]) + " is outside [0, " +
                         std::to_string(r.slotCount) + ")");
    }
    // No destination twice: two writes of one page or slot in one launch would race.
    int32_t const* destinations = toHost ? r.slots : r.pages;
    hostIdScratch_.assign(destinations, destinations + r.count);
    std::sort(hostIdScratch_.begin(), hostIdScratch_.end());
    auto const twice = std::adjacent_find(hostIdScratch_.begin(), hostIdScratch_.end());
    if (twice != hostIdScratch_.end())
        fail(op, std::string(toHost ? "host slot " : "page ") + std::to_string(*twice) +
                     " is a destination twice (in " + (toHost ? "hostSlots" : "pages") + ")");
    if (r.count == 0) return;

    hostLayerScratch_.assign(r.layers, r.layers + r.numLayers);
    uint64_t chunks = 0;
    for (HostPageLayer& layer : hostLayerScratch_) {
        layer.firstChunk = chunks;
        chunks += 2 * ((layer.pageBytes + kSpanChunkBytes - 1) / kSpanChunkBytes);
    }
    hostPairScratch_.resize(static_cast<size_t>(r.count));
    for (int32_t i = 0; i < r.count; ++i)
        hostPairScratch_[static_cast<size_t>(i)] = HostPagePair{r.pages[i], r.slots[i]};
    HostPageCopy copy{};
    copy.layers = hostLayerScratch_.data();
    copy.pairs = hostPairScratch_.data();
    copy.host = r.host;
    copy.slotBytes = r.slotBytes;
    copy.chunksPerPage = chunks;
    copy.numLayers = r.numLayers;
    copy.count = r.count;
    copy.numPages = r.numPages;
    copy.slotCount = r.slotCount;
    copy.direction = static_cast<int32_t>(r.direction);
    doCopyHostPages(copy);
}

void DeviceBackend::hashChunks(void const* data, uint64_t size, uint32_t numChunks, Hash128* hostPartials) {
    char const* op = "hashChunks";
    if (numChunks == 0 || numChunks > options_.maxHashChunks)
        fail(op, "numChunks must be in [1, " + std::to_string(options_.maxHashChunks) + "] (got " +
                     std::to_string(numChunks) + ")");
    if (size > 0 && !data) fail(op, "data is null");
    if (!hostPartials) fail(op, "hostPartials is null");
    doHashChunks(data, size, numChunks, hostPartials);
}

DeviceBuffer DeviceBuffer::external(DeviceBackend& backend, ExternalMemory memory, size_t required, size_t alignment,
                                    char const* what) {
    auto refuse = [&](std::string const& why) {
        throw ExternalMemoryError(std::string(what) + ": external memory " + why);
    };
    if (!memory.data && (memory.bytes > 0 || required > 0))
        refuse("is NULL but " + std::to_string(std::max(memory.bytes, required)) + " bytes are needed");
    if (alignment > 1 && reinterpret_cast<uintptr_t>(memory.data) % alignment != 0)
        refuse("at " + std::to_string(reinterpret_cast<uintptr_t>(memory.data)) + " is not " +
               std::to_string(alignment) + "-byte aligned");
    if (memory.bytes < required)
        refuse("holds " + std::to_string(memory.bytes) + " bytes, the object needs " + std::to_string(required));
    if (required > 0) backend.checkExternal(memory.data, required, what);
    DeviceBuffer buffer;
    buffer.backend_ = &backend;
    buffer.data_ = required > 0 ? memory.data : nullptr;
    buffer.bytes_ = required;
    buffer.owning_ = false;
    return buffer;
}

void DeviceBuffer::write(size_t offset, void const* host, size_t size) {
    if (offset > bytes_ || size > bytes_ - offset)
        throw ContractError("DeviceBuffer::write: [" + std::to_string(offset) + ", +" + std::to_string(size) +
                            ") is outside the buffer's " + std::to_string(bytes_) + " bytes");
    if (size > 0) backend_->upload(bytes() + offset, host, size);
}

void DeviceBuffer::read(size_t offset, void* host, size_t size) const {
    if (offset > bytes_ || size > bytes_ - offset)
        throw ContractError("DeviceBuffer::read: [" + std::to_string(offset) + ", +" + std::to_string(size) +
                            ") is outside the buffer's " + std::to_string(bytes_) + " bytes");
    if (size > 0) backend_->download(host, bytes() + offset, size);
}

bool cudaBackendAvailable(std::string* reason) {
    char const* why = "";
    int const count = cudaDeviceCount(&why);
    if (count > 0) return true;
    if (reason) *reason = count == 0 ? "no CUDA device" : why;
    return false;
}

std::unique_ptr<DeviceBackend> createBackend(BackendKind kind, BackendOptions const& options) {
    switch (kind) {
        case BackendKind::kCpu: return createCpuBackend(options);
        case BackendKind::kCuda: return createCudaBackend(options);
        case BackendKind::kAuto: return cudaBackendAvailable() ? createCudaBackend(options) : createCpuBackend(options);
    }
    throw ContractError("createBackend: unknown backend kind " + std::to_string(static_cast<int32_t>(kind)));
}

}  // namespace ctxcache::device
