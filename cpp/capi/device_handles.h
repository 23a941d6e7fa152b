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

inline auto& deviceBackends() { return handleTable<BackendObject, 0xC4>(); }
inline auto& deviceBuffers() { return handleTable<BufferObject, 0xC5>(); }
inline auto& kvPools() { return handleTable<KvPoolObject, 0xC6>(); }
inline auto& pageTables() { return handleTable<PageTableObject, 0xC7>(); }
inline auto& kvLengths() { return handleTable<KvLengthsObject, 0xC8>(); }
inline auto& residentStates() { return handleTable<ResidentStateObject, 0xC9>(); }
inline auto& snapshotStorages() { return handleTable<SnapshotStorageObject, 0xCA>(); }

device::DType requireDType(int32_t value, char const* name);
device::StatePart requirePart(int32_t value, char const* name);

}  // namespace ctxcache::capi
