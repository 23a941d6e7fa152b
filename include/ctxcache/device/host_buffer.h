// HostBuffer: host memory a host tier keeps KV in, addressable by its backend's copies (kv_host_copy.h). Owned
// (DeviceBackend::allocateHost: CUDA pinned, portable and mapped; CPU plain memory; page-aligned, zero-filled),
// or a non-owning window on memory the engine already has (external(): never freed, zeroed or written at
// construction; CUDA needs it pinned and mapped, e.g. cudaHostRegister(..., cudaHostRegisterMapped)).
//
// Invariants: data() is the host address, deviceData() the address the backend's kernels use for the same bytes
//             (the same pointer on CPU and, under UVA, for cudaHostAlloc'd memory); both stay valid and fixed
//             while the buffer lives. An owned buffer's bytes count in backend.allocatedHostBytes(), never in
//             allocatedBytes().
// Cost:       construction allocates (pins, on CUDA) and zeroes `bytes` (external: neither); destruction of an
//             owned buffer waits for the backend's stream (CUDA) and frees.
// Threading:  the backend's single-writer contract; the host bytes are plain memory the caller may read or write
//             between copies, after synchronising the backend (copies are stream-ordered on CUDA). The buffer
//             must not outlive its backend. Move-only.
#pragma once

#include <cstddef>

#include "ctxcache/device/device_backend.h"

namespace ctxcache::device {

class HostBuffer {
public:
    HostBuffer() = default;
    // OutOfMemoryError (naming the bytes) when the backend cannot allocate them.
    HostBuffer(DeviceBackend& backend, size_t bytes);
    // The whole of memory (memory.bytes bytes), not owned. ExternalMemoryError (nothing changed) unless memory.data
    // is non-null (or memory is empty) and the backend can address all of it. `what` names the object in the
    // message.
    static HostBuffer external(DeviceBackend& backend, ExternalMemory memory, char const* what);
    HostBuffer(HostBuffer&& other) noexcept { *this = std::move(other); }
    HostBuffer& operator=(HostBuffer&& other) noexcept;
    HostBuffer(HostBuffer const&) = delete;
    HostBuffer& operator=(HostBuffer const&) = delete;
    ~HostBuffer() { reset(); }

    void* data() const noexcept { return data_; }
    unsigned char* bytes() const noexcept { return static_cast<unsigned char*>(data_); }
    void* deviceData() const noexcept { return deviceData_; }
    size_t size() const noexcept { return bytes_; }
    DeviceBackend* backend() const noexcept { return backend_; }
    // False for a window on external memory.
    bool owning() const noexcept { return owning_; }

private:
    void reset() noexcept;

    DeviceBackend* backend_ = nullptr;
    void* data_ = nullptr;
    void* deviceData_ = nullptr;
    size_t bytes_ = 0;
    bool owning_ = true;
};

}  // namespace ctxcache::device
