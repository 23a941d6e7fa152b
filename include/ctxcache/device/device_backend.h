// DeviceBackend: where the device layer's bytes live and the one interface every data movement goes through.
// Two implementations with identical results: the CPU backend (always built; "device memory" is host memory; the
// oracle) and the CUDA backend (built when nvcc exists; used when a device is present).
//
// Invariants: every public operation validates its arguments here, in the non-virtual front, before a backend
//             sees them, so both backends accept and reject exactly the same calls (ContractError, state unchanged).
//             Each op is ONE kernel launch, preceded on CUDA by at most one host-to-device copy of its descriptor
//             table into a device table sized at construction (BackendOptions::maxTableBytes). No op allocates
//             device memory; allocate() and allocateHost() are for constructing storage objects only.
//             allocatedBytes() counts device bytes, allocatedHostBytes() host bytes (a host tier's slots), apart.
// Ordering:   operations are stream-ordered on the backend's stream (CUDA) or complete on return (CPU). upload()
//             lets the caller reuse its source on return; download() and hashChunks() wait for the work before
//             them. setStream() moves every later op onto the caller's stream. Device pointers passed to ops come
//             from this backend's allocate() or are external memory of its device (ExternalMemory); the host
//             pointer of copyHostPages() is mapHost()'s answer (HostBuffer::deviceData()).
// Cost:       the front does O(descriptors) host work per op; kernels are memory-bound.
// Threading:  single writer: the caller serialises every call on one backend and the storage built on it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ctxcache/block_hash.h"
#include "ctxcache/device/layout.h"

namespace ctxcache::device {

// Values are part of the C ABI (CTXC_BACKEND_*).
enum class BackendKind : int32_t { kAuto = 0, kCpu = 1, kCuda = 2 };

// The largest descriptor table a backend accepts: the table and its host staging are allocated at construction.
inline constexpr size_t kMaxTableBytes = size_t{1} << 30;

struct BackendOptions {
    size_t maxTableBytes = size_t{1} << 20;  // per-op descriptor table (device copy and pinned staging), in
                                             // [4096, kMaxTableBytes]
    uint32_t maxHashChunks = 65536;          // capacity of the chunk-partials buffer of hashChunks()
    int32_t device = 0;                      // CUDA device ordinal
    void* stream = nullptr;                  // CUDA: a cudaStream_t to run on; null = the backend creates its own
};

// Memory an engine already owns, for a storage object to be built over instead of allocating its own. The object
// never frees it and never zeroes or overwrites it at construction (the bytes there are the initial contents);
// the caller keeps it alive and unused by anything else the object does not know of until the object is gone.
// data == nullptr (and bytes == 0): allocate as usual. CUDA: device memory of the backend's device (cudaMalloc,
// a caching allocator's block, managed memory); CPU: host memory.
struct ExternalMemory {
    void* data = nullptr;
    size_t bytes = 0;
};
// The alignment external memory of pools, resident state, snapshot slabs and buffers needs (what cudaMalloc
// gives); page tables and KV lengths need only int32 alignment.
inline constexpr size_t kExternalAlignment = 256;
// The alignment of allocateHost() (a host page).
inline constexpr size_t kHostAlignment = 4096;

// One copyHostPages() call: pages[i] of a pool <-> slot slots[i] of host memory laid out as layout.h's host slots,
// every layer (layers[0, numLayers): each layer's pool array, page bytes and slot offset; firstChunk is ignored, the
// front computes it), K and V.
struct HostPageCopyRequest {
    HostCopyDirection direction = HostCopyDirection::kToHost;
    HostPageLayer const* layers = nullptr;
    int32_t numLayers = 0;
    int32_t numPages = 0;  // K pages of the pool
    int32_t const* pages = nullptr;
    int32_t const* slots = nullptr;
    int32_t count = 0;
    void* host = nullptr;  // slot 0 as the backend addresses it (mapHost())
    uint64_t slotBytes = 0;
    int32_t slotCount = 0;  // slots [0, slotCount)
};

// What the backend submitted, for tests ("capture is one launch") and the benchmark (launches per operation).
// kernels: kernel launches (the CPU backend counts one per op); transfers: copies and memsets, table uploads
// included.
struct LaunchCounters {
    uint64_t kernels = 0;
    uint64_t transfers = 0;
};

class DeviceBackend {
public:
    DeviceBackend(DeviceBackend const&) = delete;
    DeviceBackend& operator=(DeviceBackend const&) = delete;
    virtual ~DeviceBackend() = default;

    BackendKind kind() const noexcept { return kind_; }
    char const* name() const noexcept { return kind_ == BackendKind::kCuda ? "cuda" : "cpu"; }
    BackendOptions const& options() const noexcept { return options_; }
    LaunchCounters counters() const noexcept { return counters_; }
    // Bytes allocate() handed out and not yet deallocated (external memory is not counted).
    size_t allocatedBytes() const noexcept { return allocatedBytes_.load(std::memory_order_relaxed); }
    // Bytes allocateHost() handed out and not yet deallocated (external host memory is not counted).
    size_t allocatedHostBytes() const noexcept { return allocatedHostBytes_.load(std::memory_order_relaxed); }
    // "cpu", or the CUDA device's name, compute capability and multiprocessor count.
    virtual std::string description() const = 0;
    // Descriptors of one op that fit the table: e.g. SpanCopy entries.
    size_t tableCapacity(size_t entryBytes) const noexcept { return options_.maxTableBytes / entryBytes; }

    // ---- stream ----
    // The stream stream-ordered ops run on: CUDA, the cudaStream_t in use (the backend's own unless setStream()
    // gave another); CPU, whatever setStream() was last given (null at first), which it ignores.
    virtual void* stream() const noexcept = 0;
    // Run every later op on `stream` (CUDA: a cudaStream_t of the backend's device; null = the backend's own
    // stream again). The work issued before the switch completes before this returns, so the new stream needs no
    // ordering with the old one. The caller's stream is never destroyed by the backend; it must outlive its use
    // (switch back with setStream(nullptr) before destroying it). CPU: any value is accepted and ignored (every
    // op completes on return anyway).
    void setStream(void* stream);

    // ---- memory: construction time only ----
    void* allocate(size_t bytes);                    // zero-filled, 256-byte aligned; 0 bytes -> nullptr
    // Safe from any thread (a DLPack consumer may drop the last reference of exported memory on its own thread).
    void deallocate(void* pointer, size_t bytes) noexcept;
    // ContractError unless [data, data + bytes) can be external memory of this backend (CUDA: device or managed
    // memory of its device, when the runtime can tell).
    void checkExternal(void const* data, size_t bytes, char const* what) const;

    // ---- host memory (a host tier's slots): construction time only ----
    // Zero-filled, kHostAlignment-aligned host memory this backend's ops can address: CUDA, pinned, portable and
    // mapped (cudaHostAlloc(cudaHostAllocPortable | cudaHostAllocMapped)), so kernels reach it through UVA; CPU,
    // plain memory. 0 bytes -> nullptr. OutOfMemoryError (naming the bytes) when the memory cannot be had.
    void* allocateHost(size_t bytes);
    // Safe from any thread, like deallocate(). CUDA: waits for the backend's stream first.
    void deallocateHost(void* pointer, size_t bytes) noexcept;
    // The address this backend's kernels use for host memory [data, data + bytes): CPU, data; CUDA, its mapped
    // device pointer (memory of allocateHost(), or pinned and mapped by the caller: cudaHostAlloc(...Mapped) or
    // cudaHostRegister(...Mapped)). ExternalMemoryError naming `what` when the backend cannot address all of it
    // (CUDA: pageable or unmapped memory). bytes == 0 -> nullptr.
    void* mapHost(void* data, size_t bytes, char const* what) const;

    // ---- transfers ----
    void upload(void* dst, void const* src, size_t bytes);    // host -> device
    void download(void* dst, void const* src, size_t bytes);  // device -> host (synchronous)
    void copy(void* dst, void const* src, size_t bytes);      // device -> device: the benchmark's baseline
    void zero(void* dst, size_t bytes);
    void synchronize();

    // ---- ops ----
    // Copy (src != null) or zero every span, all in one launch. Spans must not overlap each other's dst.
    void copySpans(SpanCopy const* spans, int32_t count);
    // In-place dim-0 compaction of every tensor by one validated, order-preserving move list, in one launch.
    void compactRows(CompactTensor const* tensors, int32_t tensorCount, RowMove const* moves, int32_t moveCount);
    // indices[i] in [0, oldBatch*rowsPerSequence) -> oldToNew[seq]*rowsPerSequence + row, or -1 when the sequence
    // retired; anything else -> -1. oldToNew is a host map of oldBatch entries (validated by the caller's plan).
    void rebaseExecutionRows(int32_t* indices, int64_t count, int32_t const* oldToNew, int32_t oldBatch,
                             int32_t rowsPerSequence);
    // lengths[i] += scalar + (increments ? increments[i] : 0) for i < count (device arrays).
    void addToLengths(int32_t* lengths, int32_t count, int32_t scalar, int32_t const* increments);
    void gatherPagedKv(PagedKvGather const& params);
    // Dense K and V into the pool's pages through the page table (one launch for both halves). The front checks
    // geometry, dtype and layout only; kv_scatter.h checks the table entries the write touches.
    void scatterPagedKv(PagedKvScatter const& params);
    // Pages of a pool to or from host slots, every layer, K and V, in one launch. The front checks every pair
    // (page ids in [0, numPages), slots in [0, slotCount), no destination twice: a page in kFromHost, a slot in
    // kToHost), the layers (pool and host non-null, positive page bytes, each layer's K and V inside the slot, layers
    // in slot order without overlap) and the table size; count == 0 validates and enqueues nothing.
    void copyHostPages(HostPageCopyRequest const& request);
    // Plain 128-bit FNV-1a of each of numChunks chunks of a device buffer (layout.h chunking) into
    // hostPartials[numChunks]. Synchronous.
    void hashChunks(void const* data, uint64_t size, uint32_t numChunks, Hash128* hostPartials);

    // For kernels launched outside the backend on its stream (the reference model's, cpp/sim/): the stream (a
    // cudaStream_t; null on CPU), and the count of one launch, so LaunchCounters stay the truth.
    void* nativeStream() const noexcept { return kind_ == BackendKind::kCuda ? stream() : nullptr; }
    void countLaunch() noexcept { ++counters_.kernels; }

protected:
    DeviceBackend(BackendKind kind, BackendOptions const& options);

    virtual void* doAllocate(size_t bytes) = 0;
    virtual void doDeallocate(void* pointer) noexcept = 0;
    virtual void doUpload(void* dst, void const* src, size_t bytes) = 0;
    virtual void doDownload(void* dst, void const* src, size_t bytes) = 0;
    virtual void doCopy(void* dst, void const* src, size_t bytes) = 0;
    virtual void doZero(void* dst, size_t bytes) = 0;
    virtual void doSynchronize() = 0;
    // spans carry firstChunk; totalChunks = sum of ceil(bytes / kSpanChunkBytes).
    virtual void doCopySpans(SpanCopy const* spans, int32_t count, uint64_t totalChunks) = 0;
    virtual void doCompactRows(CompactTensor const* tensors, int32_t tensorCount, RowMove const* moves,
                               int32_t moveCount) = 0;
    virtual void doRebaseExecutionRows(int32_t* indices, int64_t count, int32_t const* oldToNew, int32_t oldBatch,
                                       int32_t rowsPerSequence) = 0;
    virtual void doAddToLengths(int32_t* lengths, int32_t count, int32_t scalar, int32_t const* increments) = 0;
    virtual void doGatherPagedKv(PagedKvGather const& params) = 0;
    virtual void doScatterPagedKv(PagedKvScatter const& params) = 0;
    virtual void doHashChunks(void const* data, uint64_t size, uint32_t numChunks, Hash128* hostPartials) = 0;
    // copy.layers carry firstChunk, copy.chunksPerPage is set; count > 0.
    virtual void doCopyHostPages(HostPageCopy const& copy) = 0;
    virtual void* doAllocateHost(size_t bytes) = 0;
    virtual void doDeallocateHost(void* pointer) noexcept = 0;
    // The kernels' address of [data, data + bytes) (bytes > 0), or nullptr with *why set.
    virtual void* doMapHost(void* data, size_t bytes, std::string* why) const = 0;
    virtual void doSetStream(void* stream) = 0;
    // Empty when the memory is usable; otherwise why not.
    virtual std::string doCheckExternal(void const*, size_t) const { return {}; }

    LaunchCounters counters_;

private:
    void requireTable(char const* op, size_t bytes) const;

    BackendKind kind_;
    BackendOptions options_;
    std::atomic<size_t> allocatedBytes_{0};
    std::atomic<size_t> allocatedHostBytes_{0};
    std::vector<SpanCopy> spanScratch_;  // copySpans' table with firstChunk filled; capacity fixed at construction
    // copyHostPages' layers with firstChunk, its pairs, and its destinations sorted for the duplicate check: host
    // vectors that grow to the largest call and are reused.
    std::vector<HostPageLayer> hostLayerScratch_;
    std::vector<HostPagePair> hostPairScratch_;
    std::vector<int32_t> hostIdScratch_;
};

// A device allocation owned by its backend (which must outlive it), or a non-owning window on external memory
// (external(): never deallocated). Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(DeviceBackend& backend, size_t bytes)
        : backend_(&backend), data_(backend.allocate(bytes)), bytes_(bytes) {}
    // The first `required` bytes of caller memory, not owned. ExternalMemoryError (state unchanged) unless
    // memory.data is non-null (or required is 0 and memory is empty), aligned to `alignment`, memory.bytes >=
    // required, and the backend accepts it. `what` names the object in the message.
    static DeviceBuffer external(DeviceBackend& backend, ExternalMemory memory, size_t required, size_t alignment,
                                 char const* what);
    // external() when memory.data is set, else an owned allocation of `required` bytes.
    static DeviceBuffer make(DeviceBackend& backend, ExternalMemory memory, size_t required, size_t alignment,
                             char const* what) {
        if (memory.data || memory.bytes) return external(backend, memory, required, alignment, what);
        return DeviceBuffer(backend, required);
    }
    DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            reset();
            backend_ = other.backend_;
            data_ = other.data_;
            bytes_ = other.bytes_;
            owning_ = other.owning_;
            other.data_ = nullptr;
            other.bytes_ = 0;
        }
        return *this;
    }
    DeviceBuffer(DeviceBuffer const&) = delete;
    DeviceBuffer& operator=(DeviceBuffer const&) = delete;
    ~DeviceBuffer() { reset(); }

    void* data() const noexcept { return data_; }
    unsigned char* bytes() const noexcept { return static_cast<unsigned char*>(data_); }
    size_t size() const noexcept { return bytes_; }
    DeviceBackend* backend() const noexcept { return backend_; }
    // False for a window on external memory.
    bool owning() const noexcept { return owning_; }

    // Host <-> buffer at a byte offset; offset + size must fit (ContractError).
    void write(size_t offset, void const* host, size_t size);
    void read(size_t offset, void* host, size_t size) const;

private:
    void reset() noexcept {
        if (data_ && backend_ && owning_) backend_->deallocate(data_, bytes_);
        data_ = nullptr;
        bytes_ = 0;
    }

    DeviceBackend* backend_ = nullptr;
    void* data_ = nullptr;
    size_t bytes_ = 0;
    bool owning_ = true;
};

// The CPU backend: always available.
std::unique_ptr<DeviceBackend> createCpuBackend(BackendOptions const& options = {});
// The CUDA backend on options.device; BackendUnavailableError when not compiled in or no device is visible.
std::unique_ptr<DeviceBackend> createCudaBackend(BackendOptions const& options = {});
// kAuto: CUDA when compiled in and a device is visible, else CPU. kCpu / kCuda: that backend or an exception.
std::unique_ptr<DeviceBackend> createBackend(BackendKind kind, BackendOptions const& options = {});

// Whether createBackend(kCuda) can succeed here; *reason (optional) says why not.
bool cudaBackendAvailable(std::string* reason = nullptr);

}  // namespace ctxcache::device
