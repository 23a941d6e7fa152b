// HandleTable: the C ABI's opaque handles are not pointers but checked names: (generation << 32) | (slot << 8)
// | tag. A lookup validates the tag (object type), the slot and the generation, so NULL, stale (destroyed),
// foreign-typed and made-up handles are recognised instead of dereferenced. A slot is reused only with a new
// generation, so a stale handle never aliases a newer object.
//
// Threading: the table itself is guarded by a mutex (managers may live on different threads); the objects it
// owns follow their own single-writer contract, which find() and remove() enforce: inside a C call they enter the
// object's family (capi/call_family.h) while they hold the mutex, so an object is never freed between one thread's
// lookup and its entry, and an overlapping call is refused (CTXC_E_CONCURRENT_USE) instead of racing.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api_support.h"
#include "call_family.h"

static_assert(sizeof(void*) == 8, "handles encode a 32-bit generation above a 24-bit slot");

namespace ctxcache::capi {

template <class T, uint8_t Tag>
class HandleTable {
public:
    void* add(std::unique_ptr<T> object) {
        std::lock_guard<std::mutex> lock(mutex_);
        uint32_t slot;
        if (!freeSlots_.empty()) {
            slot = freeSlots_.back();
            freeSlots_.pop_back();
        } else {
            if (entries_.size() >= (1u << 24)) throw std::bad_alloc();
            entries_.emplace_back();
            freeSlots_.reserve(entries_.size());  // remove() pushes without allocating
            slot = static_cast<uint32_t>(entries_.size() - 1);
        }
        Entry& e = entries_[slot];
        e.generation = nextGeneration_++;
        if (nextGeneration_ == 0) nextGeneration_ = 1;
        e.object = std::move(object);
        return encode(slot, e.generation);
    }

    // The live object of `handle` (null if none), its family entered for the calling C call.
    T* find(void const* handle) const {
        std::lock_guard<std::mutex> lock(mutex_);
        Entry const* e = entry(handle);
        if (!e) return nullptr;
        enterFamilyOf(*e->object, false);
        return e->object.get();
    }

    // For the few calls meant to reach an object from any thread while another call is inside its family (e.g. a
    // request to interrupt a long call): runs `touch(object)` under the table's mutex, without entering the
    // family (so a destroy cannot free the object meanwhile); `touch` must be short and use only what is safe
    // beside the running call (atomics). False when `handle` names no live object.
    template <class Touch>
    bool touchWithoutEntering(void const* handle, Touch&& touch) const {
        std::lock_guard<std::mutex> lock(mutex_);
        Entry const* e = entry(handle);
        if (!e) return false;
        touch(*e->object);
        return true;
    }

    // Takes the object of `handle` out of the table (null if none), its family entered and kept alive for the
    // calling C call (the caller frees the object, maybe the family's last owner, before the call returns).
    std::unique_ptr<T> remove(void const* handle) {
        std::lock_guard<std::mutex> lock(mutex_);
        Entry* e = const_cast<Entry*>(entry(handle));
        if (!e) return nullptr;
        enterFamilyOf(*e->object, true);
        std::unique_ptr<T> object = std::move(e->object);
        e->generation = 0;
        freeSlots_.push_back(static_cast<uint32_t>(e - entries_.data()));  // capacity was reserved by add()
        return object;
    }

private:
    struct Entry {
        uint32_t generation = 0;  // 0 = empty
        std::unique_ptr<T> object;
    };

    static void* encode(uint32_t slot, uint32_t generation) noexcept {
        uintptr_t const value = (static_cast<uintptr_t>(generation) << 32) | (static_cast<uintptr_t>(slot) << 8) | Tag;
        return reinterpret_cast<void*>(value);
    }

    Entry const* entry(void const* handle) const noexcept {
        uintptr_t const value = reinterpret_cast<uintptr_t>(handle);
        if ((value & 0xFF) != Tag) return nullptr;
        uint32_t const slot = static_cast<uint32_t>((value >> 8) & 0xFFFFFF);
        uint32_t const generation = static_cast<uint32_t>(value >> 32);
        if (generation == 0 || slot >= entries_.size()) return nullptr;
        Entry const& e = entries_[slot];
        return e.generation == generation ? &e : nullptr;
    }

    mutable std::mutex mutex_;
    std::vector<Entry> entries_;
    std::vector<uint32_t> freeSlots_;
    uint32_t nextGeneration_ = 1;
};

// The one table of each handle type (tag): a function-local static, created on first use.
template <class T, uint8_t Tag>
HandleTable<T, Tag>& handleTable() {
    static HandleTable<T, Tag> table;
    return table;
}

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
void destroyObject(HandleTable<T, Tag>& table, void const* handle, char const* what) {
    if (handle && !table.remove(handle)) invalidHandle(std::string(what) + " is not a live handle of its type");
}

// Register a new object and return its handle as the C type.
template <class Handle, class T, uint8_t Tag>
Handle* addObject(HandleTable<T, Tag>& table, std::unique_ptr<T> object) {
    return static_cast<Handle*>(table.add(std::move(object)));
}

}  // namespace ctxcache::capi
