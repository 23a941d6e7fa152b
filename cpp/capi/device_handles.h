// The objects behind the device layer's C handles (tags 0xC4..0xCA) and their checked lookups.
//
// Every object holds a shared_ptr to its backend (declared first, so it is destroyed last) and to whatever it
// was built from, so handles may be destroyed in any order: the device memory goes away with the last owner.
// Threading: the handle tables are locked; the objects follow the backend's single-writer contract.
#pragma once

#include <memory>

#include "capi/api_support.h"
#include "capi/handle_table.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/device/snapshot_storage.h"

namespace ctxcache::capi {

struct BackendObject {
    std::shared_ptr<device::DeviceBackend> backend;
};

struct BufferObject {
    std::shared_ptr<device::DeviceBackend> backend;
    device::DeviceBuffer buffer;
};

struct KvPoolObject {
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::KvPagePool> pool;
};

struct PageTableObject {
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::KvPageTable> table;  // shared with the coordinators built over it
};

struct KvLengthsObject {
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::KvLengths> lengths;  // shared with the coordinators built over it
};

struct ResidentStateObject {
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::ResidentState> state;
};

struct SnapshotStorageObject {
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::ResidentState> state;
    std::shared_ptr<device::KvPagePool> base;
    std::shared_ptr<device::KvPagePool> draft;
    std::shared_ptr<device::SnapshotStorage> storage;  // shared with the coordinators built over it
};

inline auto& deviceBackends() { return handleTable<BackendObject, 0xC4>(); }
inline auto& deviceBuffers() { return handleTable<BufferObject, 0xC5>(); }
inline auto& kvPools() { return handleTable<KvPoolObject, 0xC6>(); }
inline auto& pageTables() { return handleTable<PageTableObject, 0xC7>(); }
inline auto& kvLengths() { return handleTable<KvLengthsObject, 0xC8>(); }
inline auto& residentStates() { return handleTable<ResidentStateObject, 0xC9>(); }
inline auto& snapshotStorages() { return handleTable<SnapshotStorageObject, 0xCA>(); }

// The backend a handle names, or CTXC_E_INVALID_HANDLE.
inline std::shared_ptr<device::DeviceBackend> const& backendOf(ctxc_device_backend_t const* handle) {
    return requireObject(deviceBackends(), handle, "backend").backend;
}

// The body every create on a backend shares: clear *out, check the backend and the options, let
// `make(backend, options)` build the object, give it its backend, register it and hand out its handle.
template <class Handle, class Options, class T, uint8_t Tag, class Make>
void createOnBackend(HandleTable<T, Tag>& table, ctxc_device_backend_t const* backend, Options const* options,
                     Handle** out, char const* outName, Make&& make) {
    requireOut(out, outName) = nullptr;
    std::shared_ptr<device::DeviceBackend> const& b = backendOf(backend);
    Options const& o = requireSized(options, "options");
    std::unique_ptr<T> object = make(*b, o);
    object->backend = b;
    *out = addObject<Handle>(table, std::move(object));
}

device::DType requireDType(int32_t value, char const* name);
device::StatePart requirePart(int32_t value, char const* name);

}  // namespace ctxcache::capi
