// C ABI of include/ctxcache/c/dlpack.h: DLPack export of device views.
//
// The DLPack structs are defined here from the public specification (dlpack.h) rather than vendored: the
// unversioned DLManagedTensor every consumer accepts ("dltensor" capsules, read-only to numpy >= 2) and the 1.x
// DLManagedTensorVersioned ("dltensor_versioned", writable: flags 0). A tensor owns a shared reference to its owner's
// storage and backend, taken from the handle's object, so the memory outlives the handle until the consumer calls
// the deleter. The deleter only drops C++ references: safe from any thread (DeviceBackend::deallocate is).
#include "ctxcache/c/dlpack.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api_support.h"
#include "device_handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;
using namespace ctxcache::device;

namespace {

// ---- DLPack 0.8 (dlpack.h), the parts an exporter fills ----
struct DLDevice {
    int32_t device_type;  // DLDeviceType: kDLCPU = 1, kDLCUDA = 2
    int32_t device_id;
};
struct DLDataType {
    uint8_t code;  // DLDataTypeCode: kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4
    uint8_t bits;
    uint16_t lanes;
};
struct DLTensor {
    void* data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;
    int64_t* strides;  // NULL: compact row-major
    uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor* self);
};
struct DLPackVersion {
    uint32_t major;
    uint32_t minor;
};
struct DLManagedTensorVersioned {
    DLPackVersion version;
    void* manager_ctx;
    void (*deleter)(DLManagedTensorVersioned* self);
    uint64_t flags;  // DLPACK_FLAG_BITMASK_READ_ONLY = 1, _IS_COPIED = 2: neither
    DLTensor dl_tensor;
};
constexpr int32_t kDLCPU = 1;
constexpr int32_t kDLCUDA = 2;
constexpr uint8_t kDLInt = 0;
constexpr uint8_t kDLUInt = 1;
constexpr uint8_t kDLFloat = 2;
constexpr uint8_t kDLBfloat = 4;

// The tensor handed out (a first member, so the pointer handed out is this object's address) and what it keeps.
struct ExportedTensor {
    union {
        DLManagedTensor legacy;
        DLManagedTensorVersioned versioned;
    };
    int64_t shape[5] = {};
    std::shared_ptr<DeviceBackend> backend;  // declared first: released last
    std::shared_ptr<void const> storage;
};

void deleteLegacy(DLManagedTensor* self) { delete reinterpret_cast<ExportedTensor*>(self); }
void deleteVersioned(DLManagedTensorVersioned* self) { delete reinterpret_cast<ExportedTensor*>(self); }

DLDataType dlType(int32_t element) {
    switch (element) {
        case CTXC_ELEMENT_FP16: return {kDLFloat, 16, 1};
        case CTXC_ELEMENT_BF16: return {kDLBfloat, 16, 1};
        case CTXC_ELEMENT_FP8_E4M3: return {kDLUInt, 8, 1};  // bit patterns (see the header)
        case CTXC_ELEMENT_FP32: return {kDLFloat, 32, 1};
        case CTXC_ELEMENT_INT32: return {kDLInt, 32, 1};
        case CTXC_ELEMENT_UINT8: return {kDLUInt, 8, 1};
        case CTXC_ELEMENT_UINT16: return {kDLUInt, 16, 1};
    }
    invalidArgument("view->element " + std::to_string(element) + " is not a CTXC_ELEMENT_* value");
}

// The owner's storage (a shared reference), its backend, and the device memory ranges a view may cover.
struct Owner {
    std::shared_ptr<DeviceBackend> backend;
    std::shared_ptr<void const> storage;
    std::vector<std::pair<void const*, size_t>> ranges;
};

Owner ownerOf(void const* handle) {
    if (!handle) invalidHandle("owner is NULL");
    Owner o;
    switch (reinterpret_cast<uintptr_t>(handle) & 0xFF) {
        case 0xC5: {
            BufferObject const& b = requireObject(deviceBuffers(), handle, "owner");
            o = {b.backend, b.buffer, {{b.buffer->data(), b.buffer->size()}}};
            break;
        }
        case 0xC6: {
            KvPoolObject const& p = requireObject(kvPools(), handle, "owner");
            o = {p.backend, p.pool, {{p.pool->data(), p.pool->footprintBytes()}}};
            break;
        }
        case 0xC7: {
            PageTableObject const& t = requireObject(pageTables(), handle, "owner");
            o = {t.backend, t.table, {{t.table->deviceView(), t.table->entryCount() * sizeof(int32_t)}}};
            break;
        }
        case 0xC8: {
            KvLengthsObject const& l = requireObject(kvLengths(), handle, "owner");
            o = {l.backend,
                 l.lengths,
                 {{l.lengths->data(), static_cast<size_t>(l.lengths->maxBatch()) * sizeof(int32_t)}}};
            break;
        }
        case 0xC9: {
            ResidentStateObject const& s = requireObject(residentStates(), handle, "owner");
            o = {s.backend, s.state, {{s.state->data(), s.state->footprintBytes()}}};
            break;
        }
        case 0xCA: {
            SnapshotStorageObject const& s = requireObject(snapshotStorages(), handle, "owner");
            SnapshotStorage const& st = *s.storage;
            o = {s.backend,
                 s.storage,
                 {{st.recurrentData(), static_cast<size_t>(st.recurrentSlots()) * st.recurrentBytesPerSlot()},
                  {st.partialKvData(), static_cast<size_t>(st.partialKvSlots()) * st.partialKvBytesPerSlot()}}};
            break;
        }
        default:
            invalidHandle(
                "owner is not a live handle of a device object (buffer, KV pool, page table, KV lengths, "
                "resident state or snapshot storage)");
    }
    return o;
}

bool inside(void const* data, size_t bytes, std::pair<void const*, size_t> const& range) {
    auto const begin = reinterpret_cast<uintptr_t>(range.first);
    auto const at = reinterpret_cast<uintptr_t>(data);
    return range.first && at >= begin && at - begin <= range.second && bytes <= range.second - (at - begin);
}

// CPython's functions, found in the process (a Python process exports them, which is also what ctypes.pythonapi
// relies on); null outside Python.
template <class F>
F python(char const* name) {
    void* symbol = dlsym(RTLD_DEFAULT, name);
    F function = nullptr;
    static_assert(sizeof function == sizeof symbol);
    std::memcpy(&function, &symbol, sizeof function);
    return function;
}

}  // namespace

extern "C" {

CTXC_API ctxc_status_t ctxc_device_view_to_dlpack(const ctxc_device_view_t* view, const void* owner, int32_t versioned,
                                                  void** out_managed) {
    return guard(__func__, [&] {
        requireOut(out_managed, "out_managed") = nullptr;
        bool const isVersioned = requireBool(versioned, "versioned");
        ctxc_device_view_t const& v = requireSized(view, "view");
        DLDataType const type = dlType(v.element);
        if (v.ndim < 1 || v.ndim > 5) invalidArgument("view->ndim " + std::to_string(v.ndim) + " is outside [1, 5]");
        size_t bytes = elementSize(v.element);
        for (int32_t i = 0; i < v.ndim; ++i) {
            requireNonNegative(v.shape[i], "view->shape[i]");
            bytes *= static_cast<size_t>(v.shape[i]);
        }
        if (bytes != v.bytes)
            invalidArgument("view->bytes " + std::to_string(v.bytes) + " is not product(shape) * element size (" +
                            std::to_string(bytes) + ")");
        Owner o = ownerOf(owner);
        if (v.backend != static_cast<int32_t>(o.backend->kind()))
            throw ContractError("the view's backend " + std::to_string(v.backend) + " is not the owner's");
        if (bytes > 0) {
            bool covered = false;
            for (auto const& range : o.ranges) covered = covered || inside(v.data, bytes, range);
            if (!covered)
                throw ContractError("the view's " + std::to_string(bytes) + " bytes lie outside the owner's memory");
        }
        auto tensor = std::make_unique<ExportedTensor>();
        bool const cuda = o.backend->kind() == BackendKind::kCuda;
        for (int32_t i = 0; i < v.ndim; ++i) tensor->shape[i] = v.shape[i];
        tensor->backend = std::move(o.backend);
        tensor->storage = std::move(o.storage);
        DLTensor t{};
        t.data = bytes > 0 ? v.data : nullptr;
        t.device = DLDevice{cuda ? kDLCUDA : kDLCPU, cuda ? tensor->backend->options().device : 0};
        t.ndim = v.ndim;
        t.dtype = type;
        t.shape = tensor->shape;
        t.strides = nullptr;
        t.byte_offset = 0;
        if (isVersioned) {
            tensor->versioned = DLManagedTensorVersioned{{1, 0}, tensor.get(), deleteVersioned, 0, t};
            *out_managed = &tensor.release()->versioned;
        } else {
            tensor->legacy = DLManagedTensor{t, tensor.get(), deleteLegacy};
            *out_managed = &tensor.release()->legacy;
        }
    });
}

CTXC_API void ctxc_dlpack_release(void* managed, int32_t versioned) {
    if (!managed) return;
    if (versioned) {
        auto* m = static_cast<DLManagedTensorVersioned*>(managed);
        if (m->deleter) m->deleter(m);
    } else {
        auto* m = static_cast<DLManagedTensor*>(managed);
        if (m->deleter) m->deleter(m);
    }
}

CTXC_API void ctxc_dlpack_capsule_destructor(void* capsule) {
    using Fetch = void (*)(void**, void**, void**);
    using Restore = void (*)(void*, void*, void*);
    using IsValid = int (*)(void*, char const*);
    using GetPointer = void* (*)(void*, char const*);
    static Fetch const fetch = python<Fetch>("PyErr_Fetch");
    static Restore const restore = python<Restore>("PyErr_Restore");
    static IsValid const isValid = python<IsValid>("PyCapsule_IsValid");
    static GetPointer const getPointer = python<GetPointer>("PyCapsule_GetPointer");
    if (!capsule || !fetch || !restore || !isValid || !getPointer) return;
    void* type = nullptr;
    void* value = nullptr;
    void* traceback = nullptr;
    fetch(&type, &value, &traceback);  // a consumer that failed destroys the capsule with its exception pending
    if (isValid(capsule, "dltensor")) ctxc_dlpack_release(getPointer(capsule, "dltensor"), 0);
    else if (isValid(capsule, "dltensor_versioned")) ctxc_dlpack_release(getPointer(capsule, "dltensor_versioned"), 1);
    restore(type, value, traceback);
}

}  // extern "C"
