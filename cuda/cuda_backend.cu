// The CUDA backend: device memory from cudaMalloc, every op one kernel on the backend's stream.
//
// Descriptor tables: each op packs its host descriptors into one of kStagingSlots pinned staging slots (waiting
// on that slot's event, i.e. on the upload issued kStagingSlots ops ago), copies the slot into the device table
// with ONE cudaMemcpyAsync, records the slot's event and launches its kernel, which reads the table. The device
// table is single: the next op's upload is stream-ordered after this op's kernel. Both are sized once at
// construction (BackendOptions::maxTableBytes), so no op allocates.
// Host memory: allocateHost is cudaHostAlloc(Portable | Mapped), zeroed on the host; ops address host memory by
// its mapped device pointer (doMapHost: pinned and mapped memory only). Pinning failure is OutOfMemoryError.
// Errors: a failing CUDA call throws DeviceError naming the call; construction failures release what was made.
// Streams: stream_ is the stream in use: the caller's (options.stream or setStream) or ownStream_, which the
// backend creates (at construction, or at the first setStream(nullptr) of a backend built on a caller's stream)
// and alone destroys. A caller's stream is never destroyed here.
// Threading: single writer (the DeviceBackend contract); every entry point first makes the backend's device
// current on the calling thread.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/device_error.h"
#include "ctxcache/errors.h"
#include "device_kernels.cuh"

namespace ctxcache::device {

namespace {

void check(cudaError_t status, char const* what) {
    if (status != cudaSuccess) {
        cudaGetLastError();  // clear a non-sticky error so the next call starts clean
        throw DeviceError(std::string("CUDA ") + what + ": " + cudaGetErrorName(status) + " (" +
                          cudaGetErrorString(status) + ")");
    }
}

constexpr int kStagingSlots = 4;
constexpr size_t kTableAlignment = 16;

size_t alignTable(size_t value) { return (value + kTableAlignment - 1) / kTableAlignment * kTableAlignment; }

class CudaBackend final : public DeviceBackend {
public:
    explicit CudaBackend(BackendOptions const& options) : DeviceBackend(BackendKind::kCuda, options) {
        try {
            check(cudaSetDevice(options.device), "cudaSetDevice");
            check(cudaDeviceGetAttribute(&smCount_, cudaDevAttrMultiProcessorCount, options.device),
                  "cudaDeviceGetAttribute(multiProcessorCount)");
            if (options.stream) {
                stream_ = static_cast<cudaStream_t>(options.stream);
            } else {
                check(cudaStreamCreateWithFlags(&ownStream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
                stream_ = ownStream_;
            }
            check(cudaMalloc(&table_, options.maxTableBytes), "cudaMalloc(descriptor table)");
            check(cudaMalloc(&partials_, static_cast<size_t>(options.maxHashChunks) * 16), "cudaMalloc(hash partials)");
            for (int i = 0; i < kStagingSlots; ++i) {
                check(
                    cudaHostAlloc(reinterpret_cast<void**>(&staging_[i]), options.maxTableBytes, cudaHostAllocDefault),
                    "cudaHostAlloc(staging)");
                check(cudaEventCreateWithFlags(&uploaded_[i], cudaEventDisableTiming), "cudaEventCreate");
            }
        } catch (...) {
            release();
            throw;
        }
    }

    ~CudaBackend() override { release(); }

    std::string description() const override {
        cudaDeviceProp properties{};
        if (cudaGetDeviceProperties(&properties, options().device) != cudaSuccess) {
            cudaGetLastError();
            return "cuda device " + std::to_string(options().device);
        }
        return std::string(properties.name) + " (sm_" + std::to_string(properties.major) +
               std::to_string(properties.minor) + ", " + std::to_string(properties.multiProcessorCount) + " SMs, " +
               std::to_string(properties.totalGlobalMem >> 20) + " MiB)";
    }

    void* stream() const noexcept override { return stream_; }

protected:
    void* doAllocate(size_t bytes) override {
        select();
        void* pointer = nullptr;
        check(cudaMalloc(&pointer, bytes), ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
        cudaError_t status = cudaMemsetAsync(pointer, 0, bytes, stream_);
        if (status == cudaSuccess) status = cudaStreamSynchronize(stream_);
        if (status != cudaSuccess) {
            cudaFree(pointer);
            check(status, "cudaMemsetAsync(new allocation)");
        }
        return pointer;
    }

    void* doAllocateHost(size_t bytes) override {
        select();
        void* pointer = nullptr;
        cudaError_t const status = cudaHostAlloc(&pointer, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
        if (status != cudaSuccess || !pointer) {
            cudaGetLastError();
            throw OutOfMemoryError(describeAllocationFailure(
                std::string("cuda backend: pinned host memory (cudaHostAlloc: ") + cudaGetErrorName(status) + ")",
                bytes));
        }
        if (reinterpret_cast<uintptr_t>(pointer) % kHostAlignment != 0) {
            cudaFreeHost(pointer);
            throw DeviceError("CUDA cudaHostAlloc returned memory that is not " + std::to_string(kHostAlignment) +
                              "-byte aligned");
        }
        std::memset(pointer, 0, bytes);
        return pointer;
    }

    void doDeallocateHost(void* pointer) noexcept override {
        cudaSetDevice(options().device);
        cudaStreamSynchronize(stream_);  // stream-ordered copies may still use it
        cudaFreeHost(pointer);
        cudaGetLastError();
    }

    // Pinned and mapped over its whole range: both ends are host memory the runtime maps, at device addresses
    // exactly bytes - 1 apart (one mapping).
    void* doMapHost(void* data, size_t bytes, std::string* why) const override {
        auto mappedAt = [&](void const* p, cudaPointerAttributes& a) -> bool {
            a = cudaPointerAttributes{};
            if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
                cudaGetLastError();
                *why = "is not memory the CUDA runtime knows";
                return false;
            }
            if (a.type != cudaMemoryTypeHost) {
                *why = "is not pinned host memory (cudaMemoryType " + std::to_string(int(a.type)) +
                       "): allocate it with cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable) or pin it "
                       "with cudaHostRegister(cudaHostRegisterMapped | cudaHostRegisterPortable)";
                return false;
            }
            if (!a.devicePointer) {
                *why =
                    "is pinned but not mapped into the device's address space (cudaHostAllocMapped / "
                    "cudaHostRegisterMapped)";
                return false;
            }
            return true;
        };
        cudaSetDevice(options().device);
        cudaPointerAttributes first{}, last{};
        unsigned char const* end = static_cast<unsigned char const*>(data) + bytes - 1;
        if (!mappedAt(data, first) || !mappedAt(end, last)) return nullptr;
        if (static_cast<unsigned char*>(last.devicePointer) - static_cast<unsigned char*>(first.devicePointer) !=
            static_cast<ptrdiff_t>(bytes - 1)) {
            *why = "of " + std::to_string(bytes) + " bytes is not one pinned, mapped allocation";
            return nullptr;
        }
        return first.devicePointer;
    }

    void doSetStream(void* stream) override {
        select();
        cudaStream_t next = static_cast<cudaStream_t>(stream);
        if (!next) {
            if (!ownStream_)
                check(cudaStreamCreateWithFlags(&ownStream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
            next = ownStream_;
        }
        if (next == stream_) return;
        // The descriptor table is single and the staging events were recorded on the old stream: finish its work
        // so the next op on the new stream needs no cross-stream ordering.
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(stream switch)");
        stream_ = next;
    }

    std::string doCheckExternal(void const* data, size_t) const override {
        cudaPointerAttributes attributes{};
        if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
            cudaGetLastError();
            return "is not memory the CUDA runtime knows";
        }
        if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)
            return "is not device or managed memory (cudaMemoryType " + std::to_string(int(attributes.type)) + ")";
        if (attributes.type == cudaMemoryTypeDevice && attributes.device != options().device)
            return "lives on device " + std::to_string(attributes.device) + ", the backend on device " +
                   std::to_string(options().device);
        return {};
    }

    void doDeallocate(void* pointer) noexcept override {
        cudaSetDevice(options().device);
        cudaStreamSynchronize(stream_);  // stream-ordered work may still use it
        cudaFree(pointer);
    }

    void doUpload(void* dst, void const* src, size_t bytes) override {
        select();
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(H2D)");
        // Pageable sources are staged by the driver before the call returns; a pinned source is read later, so
        // wait to keep the "source reusable on return" contract.
        cudaPointerAttributes attributes{};
        if (cudaPointerGetAttributes(&attributes, src) == cudaSuccess && attributes.type == cudaMemoryTypeHost)
            check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(pinned upload)");
        cudaGetLastError();
    }

    void doDownload(void* dst, void const* src, size_t bytes) override {
        select();
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync(D2H)");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(download)");
    }

    void doCopy(void* dst, void const* src, size_t bytes) override {
        select();
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync(D2D)");
    }

    void doZero(void* dst, size_t bytes) override {
        select();
        check(cudaMemsetAsync(dst, 0, bytes, stream_), "cudaMemsetAsync");
    }

    void doSynchronize() override {
        select();
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }

    void doCopySpans(SpanCopy const* spans, int32_t count, uint64_t totalChunks) override {
        select();
        Table t = beginTable();
        size_t const offset = t.append(spans, static_cast<size_t>(count) * sizeof(SpanCopy));
        unsigned char* device = upload(t);
        // One block per 16 KiB chunk (no grid-stride cap): the block scheduler balances chunks across SMs.
        kernels::launchCopySpans(reinterpret_cast<SpanCopy const*>(device + offset), count, totalChunks, 1 << 30,
                                 stream_);
        launched("copySpans");
    }

    void doCompactRows(CompactTensor const* tensors, int32_t tensorCount, RowMove const* moves,
                       int32_t moveCount) override {
        select();
        uint64_t maxColumns = 0;
        for (int32_t i = 0; i < tensorCount; ++i) {
            uint64_t const columns =
                tensors[i].rowBytes / kernels::compactUnitBytes(tensors[i].base, tensors[i].rowBytes);
            if (columns > maxColumns) maxColumns = columns;
        }
        Table t = beginTable();
        size_t const tensorOffset = t.append(tensors, static_cast<size_t>(tensorCount) * sizeof(CompactTensor));
        size_t const moveOffset = t.append(moves, static_cast<size_t>(moveCount) * sizeof(RowMove));
        unsigned char* device = upload(t);
        kernels::launchCompactRows(reinterpret_cast<CompactTensor const*>(device + tensorOffset), tensorCount,
                                   reinterpret_cast<RowMove const*>(device + moveOffset), moveCount, maxColumns,
                                   maxBlocks(), stream_);
        launched("compactRows");
    }

    void doRebaseExecutionRows(int32_t* indices, int64_t count, int32_t const* oldToNew, int32_t oldBatch,
                               int32_t rowsPerSequence) override {
        select();
        Table t = beginTable();
        size_t const offset = t.append(oldToNew, static_cast<size_t>(oldBatch) * sizeof(int32_t));
        unsigned char* device = oldBatch > 0 ? upload(t) : nullptr;
        kernels::launchRebaseRows(indices, count, device ? reinterpret_cast<int32_t const*>(device + offset) : nullptr,
                                  oldBatch, rowsPerSequence, maxBlocks(), stream_);
        launched("rebaseExecutionRows");
    }

    void doAddToLengths(int32_t* lengths, int32_t count, int32_t scalar, int32_t const* increments) override {
        select();
        kernels::launchAddToLengths(lengths, count, scalar, increments, stream_);
        launched("addToLengths");
    }

    void doGatherPagedKv(PagedKvGather const& params) override {
        select();
        kernels::launchGatherPagedKv(params, stream_);
        launched("gatherPagedKv");
    }

    void doScatterPagedKv(PagedKvScatter const& params) override {
        select();
        kernels::launchScatterPagedKv(params, stream_);
        launched("scatterPagedKv");
    }

    void doHashChunks(void const* data, uint64_t size, uint32_t numChunks, Hash128* hostPartials) override {
        select();
        kernels::launchHashChunks(static_cast<unsigned char const*>(data), size, numChunks,
                                  static_cast<unsigned long long*>(partials_), stream_);
        launched("hashChunks");
        static_assert(sizeof(Hash128) == 16, "Hash128 is two uint64 (hi, lo)");
        check(cudaMemcpyAsync(hostPartials, partials_, static_cast<size_t>(numChunks) * 16, cudaMemcpyDeviceToHost,
                              stream_),
              "cudaMemcpyAsync(hash partials)");
        ++counters_.transfers;
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(hashChunks)");
    }

    void doCopyHostPages(HostPageCopy const& c) override {
        select();
        Table t = beginTable();
        size_t const layerOffset = t.append(c.layers, static_cast<size_t>(c.numLayers) * sizeof(HostPageLayer));
        size_t const pairOffset = t.append(c.pairs, static_cast<size_t>(c.count) * sizeof(HostPagePair));
        unsigned char* device = upload(t);
        HostPageCopy k = c;
        k.layers = reinterpret_cast<HostPageLayer const*>(device + layerOffset);
        k.pairs = reinterpret_cast<HostPagePair const*>(device + pairOffset);
        kernels::launchCopyHostPages(k, static_cast<uint64_t>(c.count) * c.chunksPerPage, maxBlocks(), stream_);
        launched("copyHostPages");
    }

private:
    // A descriptor table being packed into a pinned staging slot.
    struct Table {
        unsigned char* host;
        size_t used;
        int slot;

        size_t append(void const* data, size_t bytes) {
            size_t const offset = alignTable(used);
            if (bytes > 0) std::memcpy(host + offset, data, bytes);
            used = offset + bytes;
            return offset;
        }
    };

    Table beginTable() {
        int const slot = nextSlot_;
        nextSlot_ = (nextSlot_ + 1) % kStagingSlots;
        check(cudaEventSynchronize(uploaded_[slot]), "cudaEventSynchronize(staging slot)");
        return Table{staging_[slot], 0, slot};
    }

    // One H2D copy of the packed table; the front already checked it fits maxTableBytes (a table is at most two
    // arrays, the second starting < 16 bytes after the first ends: the front reserves 16 bytes for that).
    unsigned char* upload(Table const& t) {
        check(cudaMemcpyAsync(table_, t.host, t.used, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(table)");
        check(cudaEventRecord(uploaded_[t.slot], stream_), "cudaEventRecord(staging slot)");
        ++counters_.transfers;
        return static_cast<unsigned char*>(table_);
    }

    void launched(char const* what) {
        ++counters_.kernels;
        check(cudaGetLastError(), what);
    }

    void select() { check(cudaSetDevice(options().device), "cudaSetDevice"); }

    int maxBlocks() const { return smCount_ * 8; }  // 8 blocks of 256 threads fill an SM's 2048 threads

    void release() noexcept {
        cudaSetDevice(options().device);
        if (stream_) cudaStreamSynchronize(stream_);
        for (int i = 0; i < kStagingSlots; ++i) {
            if (uploaded_[i]) cudaEventDestroy(uploaded_[i]);
            if (staging_[i]) cudaFreeHost(staging_[i]);
            uploaded_[i] = nullptr;
            staging_[i] = nullptr;
        }
        if (partials_) cudaFree(partials_);
        if (table_) cudaFree(table_);
        if (ownStream_ && ownStream_ != stream_) cudaStreamSynchronize(ownStream_);
        if (ownStream_) cudaStreamDestroy(ownStream_);  // never a caller's stream
        partials_ = nullptr;
        table_ = nullptr;
        stream_ = nullptr;
        ownStream_ = nullptr;
        cudaGetLastError();
    }

    int smCount_ = 0;
    cudaStream_t stream_ = nullptr;     // in use
    cudaStream_t ownStream_ = nullptr;  // created (and destroyed) by the backend; null until needed
    void* table_ = nullptr;
    void* partials_ = nullptr;
    unsigned char* staging_[kStagingSlots] = {};
    cudaEvent_t uploaded_[kStagingSlots] = {};
    int nextSlot_ = 0;
};

}  // namespace

std::unique_ptr<DeviceBackend> createCudaBackend(BackendOptions const& options) {
    std::string reason;
    if (!cudaBackendAvailable(&reason)) throw BackendUnavailableError("createCudaBackend: " + reason);
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (options.device >= count)
        throw BackendUnavailableError("createCudaBackend: device " + std::to_string(options.device) +
                                      " does not exist (" + std::to_string(count) + " visible)");
    return std::make_unique<CudaBackend>(options);
}

}  // namespace ctxcache::device
