// HostBuffer: an owned allocateHost() block or a checked window on engine memory, with the address the backend's
// kernels use for it.
#include "ctxcache/device/host_buffer.h"

#include <string>

#include "ctxcache/device/device_error.h"

namespace ctxcache::device {

HostBuffer::HostBuffer(DeviceBackend& backend, size_t bytes) : backend_(&backend), bytes_(bytes) {
    data_ = backend.allocateHost(bytes);
    try {
        deviceData_ = backend.mapHost(data_, bytes, "HostBuffer");
    } catch (...) {
        backend.deallocateHost(data_, bytes);
        throw;
    }
}

HostBuffer HostBuffer::external(DeviceBackend& backend, ExternalMemory memory, char const* what) {
    if (!memory.data && memory.bytes > 0)
        throw ExternalMemoryError(std::string(what) + ": external host memory is NULL but holds " +
                                  std::to_string(memory.bytes) + " bytes");
    void* const mapped = backend.mapHost(memory.data, memory.bytes, what);
    HostBuffer buffer;
    buffer.backend_ = &backend;
    buffer.data_ = memory.bytes > 0 ? memory.data : nullptr;
    buffer.deviceData_ = mapped;
    buffer.bytes_ = memory.bytes;
    buffer.owning_ = false;
    return buffer;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
    if (this != &other) {
        reset();
        backend_ = other.backend_;
        data_ = other.data_;
        deviceData_ = other.deviceData_;
        bytes_ = other.bytes_;
        owning_ = other.owning_;
        other.data_ = nullptr;
        other.deviceData_ = nullptr;
        other.bytes_ = 0;
    }
    return *this;
}

void HostBuffer::reset() noexcept {
    if (data_ && backend_ && owning_) backend_->deallocateHost(data_, bytes_);
    data_ = nullptr;
    deviceData_ = nullptr;
    bytes_ = 0;
}

}  // namespace ctxcache::device
