// The objects behind the device layer's C handles (tags 0xC4..0xCA, 0xCF) and their checked lookups.
//
// Every object holds a shared_ptr to its backend (declared first, so it is destroyed last) and to whatever it
// was built from, so handles may be destroyed in any order: the device memory goes away with the last owner.
// The storage itself is a shared_ptr too, so that a DLPack export (dlpack_api.cpp) can keep it alive after
// its handle is destroyed.
// Threading: the handle tables are locked; the objects follow the backend's single-writer contract: a backend and
// everything built on it share one CallFamily (capi/call_family.h), so overlapping calls are refused.
#pragma once

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>

#include "api_support.h"
#include "call_family.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/host_buffer.h"
#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/device/snapshot_storage.h"
#include "handle_table.h"

namespace ctxcache::capi {

struct BackendObject {
    std::shared_ptr<CallFamily> family = newFamily(
        "device backend (a backend, the device objects built on it, and the coordinators and bounded-SWA managers "
        "built over those, with their requests)");
    std::shared_ptr<device::DeviceBackend> backend;
};

struct BufferObject {
    std::shared_ptr<CallFamily> family;  // its backend's
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::DeviceBuffer> buffer;
};

struct HostBufferObject {
    std::shared_ptr<CallFamily> family;  // its backend's
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::HostBuffer> buffer;
};

struct KvPoolObject {
    std::shared_ptr<CallFamily> family;  // its backend's
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::KvPagePool> pool;
};

struct PageTableObject {
    std::shared_ptr<CallFamily> family;  // its backend's
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::KvPageTable> table;  // shared with the coordinators built over it
};

struct KvLengthsObject {
    std::shared_ptr<CallFamily> family;  // its backend's
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::KvLengths> lengths;  // shared with the coordinators built over it
};

struct ResidentStateObject {
    std::shared_ptr<CallFamily> family;  // its backend's
    std::shared_ptr<device::DeviceBackend> backend;
    std::shared_ptr<device::ResidentState> state;
};

struct SnapshotStorageObject {
    std::shared_ptr<CallFamily> family;  // its backend's
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
inline auto& hostBuffers() { return handleTable<HostBufferObject, 0xCF>(); }

// The backend a handle names, or CTXC_E_INVALID_HANDLE.
inline std::shared_ptr<device::DeviceBackend> const& backendOf(ctxc_device_backend_t const* handle) {
    return requireObject(deviceBackends(), handle, "backend").backend;
}

// The size of each device options struct as first released: its external_* fields came later, and a caller
// built before them passes this struct_size (readOptions reads the missing fields as zero: allocate).
#define CTXC_END_OF(S, field) (offsetof(S, field) + sizeof(static_cast<S*>(nullptr)->field))
template <class S>
inline constexpr size_t kFirstReleasedSize = sizeof(S);
template <>
inline constexpr size_t kFirstReleasedSize<ctxc_device_buffer_options_t> =
    CTXC_END_OF(ctxc_device_buffer_options_t, bytes);
template <>
inline constexpr size_t kFirstReleasedSize<ctxc_kv_pool_options_t> = CTXC_END_OF(ctxc_kv_pool_options_t, layer_count);
template <>
inline constexpr size_t kFirstReleasedSize<ctxc_kv_page_table_options_t> =
    CTXC_END_OF(ctxc_kv_page_table_options_t, mode);
template <>
inline constexpr size_t kFirstReleasedSize<ctxc_kv_lengths_options_t> =
    CTXC_END_OF(ctxc_kv_lengths_options_t, max_batch);
template <>
inline constexpr size_t kFirstReleasedSize<ctxc_resident_state_options_t> =
    CTXC_END_OF(ctxc_resident_state_options_t, hidden_size);
template <>
inline constexpr size_t kFirstReleasedSize<ctxc_snapshot_storage_options_t> =
    CTXC_END_OF(ctxc_snapshot_storage_options_t, partial_kv_budget_bytes);
#undef CTXC_END_OF

// An options struct of this library's size or larger, or of exactly its first released size (the fields after
// it read as zero); anything else is CTXC_E_INVALID_ARGUMENT.
template <class S>
S readOptions(S const* options, char const* name) {
    S const& given = requireOut(const_cast<S*>(options), name);
    if (given.struct_size >= sizeof(S)) return given;
    if (given.struct_size != kFirstReleasedSize<S>) requireStructSize(&given, name);
    S copy{};
    std::memcpy(static_cast<void*>(&copy), options, kFirstReleasedSize<S>);
    return copy;
}

inline device::ExternalMemory externalMemory(void* data, size_t bytes) { return device::ExternalMemory{data, bytes}; }

// The body every create on a backend shares: clear *out, check the backend and the options, let
// `make(backend, options)` build the object, give it its backend, register it and hand out its handle.
template <class Handle, class Options, class T, uint8_t Tag, class Make>
void createOnBackend(HandleTable<T, Tag>& table, ctxc_device_backend_t const* backend, Options const* options,
                     Handle** out, char const* outName, Make&& make) {
    requireOut(out, outName) = nullptr;
    BackendObject const& bo = requireObject(deviceBackends(), backend, "backend");
    std::shared_ptr<device::DeviceBackend> const& b = bo.backend;
    Options const o = readOptions(options, "options");
    std::unique_ptr<T> object = make(*b, o);
    object->family = bo.family;
    object->backend = b;
    *out = addObject<Handle>(table, std::move(object));
}

device::DType requireDType(int32_t value, char const* name);
device::StatePart requirePart(int32_t value, char const* name);

// Fill a view of `data` (C-contiguous, shape) on backend b; checks out's struct_size.
void fillView(ctxc_device_view_t* out, device::DeviceBackend const& b, int32_t element, void const* data,
              std::initializer_list<int64_t> shape, bool external);
size_t elementSize(int32_t element);

}  // namespace ctxcache::capi
