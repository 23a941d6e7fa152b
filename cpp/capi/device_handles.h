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
    std::unique_ptr<device::KvPageTable> table;
};

struct KvLengthsObject {
    std::shared_ptr<device::DeviceBackend> backend;
    std::unique_ptr<device::KvLengths> lengths;
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
    std::unique_ptr<device::SnapshotStorage> storage;
};

HandleTable<BackendObject, 0xC4>& deviceBackends();
HandleTable<BufferObject, 0xC5>& deviceBuffers();
HandleTable<KvPoolObject, 0xC6>& kvPools();
HandleTable<PageTableObject, 0xC7>& pageTables();
HandleTable<KvLengthsObject, 0xC8>& kvLengths();
HandleTable<ResidentStateObject, 0xC9>& residentStates();
HandleTable<SnapshotStorageObject, 0xCA>& snapshotStorages();

// The live object of a handle, or CTXC_E_INVALID_HANDLE naming `what`.
template <class T, uint8_t Tag>
T& requireObject(HandleTable<T, Tag>& table, void const* handle, char const* what) {
    if (!handle) invalidHandle(std::string(what) + " is NULL");
    T* object = table.find(handle);
    if (!object) invalidHandle(std::string(what) + " is not a live handle of its type (destroyed, or another type)");
    return *object;
}

// Destroy a handle (NULL is a no-op).
template <class T, uint8_t Tag>
ctxc_status_t destroyObject(HandleTable<T, Tag>& table, void const* handle, char const* what) {
    if (!handle) return CTXC_OK;
    if (!table.remove(handle)) invalidHandle(std::string(what) + " is not a live handle of its type");
    return CTXC_OK;
}

device::DType requireDType(int32_t value, char const* name);
device::StatePart requirePart(int32_t value, char const* name);

}  // namespace ctxcache::capi
