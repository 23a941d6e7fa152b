// The C ABI's exception firewall and argument checks.
//
// Every extern "C" body runs inside guard(): exceptions become a status and a thread-local message
// ("<function>: <why>"); nothing crosses the boundary. ApiError carries an explicit status (invalid argument,
// invalid handle); device::ExternalMemoryError (caller memory that cannot hold an object: malformed options) to
// CTXC_E_INVALID_ARGUMENT; ctxcache::ContractError maps to CTXC_E_CONTRACT, InvariantError to CTXC_E_INVARIANT,
// device::DeviceError to CTXC_E_DEVICE, std::bad_alloc to CTXC_E_NO_MEMORY (an OutOfMemoryError's message names
// what was being allocated and the bytes), anything else to CTXC_E_INTERNAL.
// guard() also opens the call's CallScope (capi/call_family.h): the handle lookups inside the body enter their
// objects' families, refused with CTXC_E_CONCURRENT_USE while another call is inside one, released on return.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "call_family.h"
#include "ctxcache.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/device/device_error.h"
#include "ctxcache/errors.h"
#include "ctxcache/eviction_planner.h"
#include "ctxcache/types.h"

namespace ctxcache::capi {

class ApiError : public std::runtime_error {
public:
    ApiError(ctxc_status_t status, std::string const& message) : std::runtime_error(message), status_(status) {}
    ctxc_status_t status() const noexcept { return status_; }

private:
    ctxc_status_t status_;
};

[[noreturn]] inline void invalidArgument(std::string const& message) {
    throw ApiError(CTXC_E_INVALID_ARGUMENT, message);
}
[[noreturn]] inline void invalidHandle(std::string const& message) { throw ApiError(CTXC_E_INVALID_HANDLE, message); }

void setLastError(char const* function, char const* message) noexcept;
char const* lastErrorMessage() noexcept;

// A body returns its status, or nothing for CTXC_OK.
template <class F>
ctxc_status_t guard(char const* function, F&& body) noexcept {
    CallScope scope(function);  // declared first: its families are released after the status is known
    try {
        if constexpr (std::is_void_v<decltype(body())>) {
            body();
            return CTXC_OK;
        } else {
            return body();
        }
    } catch (ApiError const& e) {
        setLastError(function, e.what());
        return e.status();
    } catch (device::ExternalMemoryError const& e) {
        setLastError(function, e.what());
        return CTXC_E_INVALID_ARGUMENT;
    } catch (ContractError const& e) {
        setLastError(function, e.what());
        return CTXC_E_CONTRACT;
    } catch (InvariantError const& e) {
        setLastError(function, e.what());
        return CTXC_E_INVARIANT;
    } catch (device::DeviceError const& e) {
        setLastError(function, e.what());
        return CTXC_E_DEVICE;
    } catch (OutOfMemoryError const& e) {  // what and how many bytes
        setLastError(function, e.what());
        return CTXC_E_NO_MEMORY;
    } catch (std::bad_alloc const&) {
        setLastError(function, "out of memory");
        return CTXC_E_NO_MEMORY;
    } catch (std::exception const& e) {
        setLastError(function, e.what());
        return CTXC_E_INTERNAL;
    } catch (...) {
        setLastError(function, "unknown exception");
        return CTXC_E_INTERNAL;
    }
}

template <class T>
T& requireOut(T* out, char const* name) {
    if (!out) invalidArgument(std::string(name) + " is NULL");
    return *out;
}

// An input array: NULL is allowed only with count 0; count must fit the core's int32 sizes.
template <class T>
void requireArray(T const* data, size_t count, char const* name) {
    if (!data && count > 0) invalidArgument(std::string(name) + " is NULL but its count is " + std::to_string(count));
    if (count > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        invalidArgument(std::string(name) + " count " + std::to_string(count) + " exceeds INT32_MAX");
}

inline void requireNonNegative(int64_t value, char const* name) {
    if (value < 0) invalidArgument(std::string(name) + " is negative (" + std::to_string(value) + ")");
}

// A CTXC_EVICTION_* value as the core's policy.
// A CTXC_HOST_WRITE_* value (tier::HostWritePolicy's numbering), or CTXC_E_INVALID_ARGUMENT naming `name`.
template <class Policy>
Policy hostWritePolicyAs(int32_t value, char const* name) {
    if (value != 0 && value != 1)
        invalidArgument(std::string(name) + " must be a CTXC_HOST_WRITE_* value (got " + std::to_string(value) + ")");
    return static_cast<Policy>(value);
}

inline EvictionPolicy evictionPolicyOf(int32_t value, char const* name) {
    if (value != static_cast<int32_t>(EvictionPolicy::kRecordLru) &&
        value != static_cast<int32_t>(EvictionPolicy::kRecordLruTrim))
        invalidArgument(std::string(name) + " must be a CTXC_EVICTION_* value (got " + std::to_string(value) + ")");
    return static_cast<EvictionPolicy>(value);
}

inline bool requireBool(int32_t value, char const* name) {
    if (value != 0 && value != 1)
        invalidArgument(std::string(name) + " must be 0 or 1 (got " + std::to_string(value) + ")");
    return value == 1;
}

template <class S>
void requireStructSize(S const* s, char const* name) {
    if (s->struct_size < sizeof(S))
        invalidArgument(std::string(name) + "->struct_size is " + std::to_string(s->struct_size) + ", expected " +
                        std::to_string(sizeof(S)) + " (call the matching _init function)");
}

// A caller's byte buffer: NULL only with size 0.
inline void requireBytes(void const* pointer, size_t size, char const* name) {
    if (!pointer && size > 0) invalidArgument(std::string(name) + " is NULL but size is " + std::to_string(size));
}

// A struct that begins with struct_size: present (input options, or an output to fill) and at least as large as
// this library's version of it.
template <class S>
S& requireSized(S* s, char const* name) {
    requireStructSize(&requireOut(s, name), name);
    return *s;
}
template <class S>
S const& requireSized(S const* s, char const* name) {
    return requireSized(const_cast<S*>(s), name);
}

// The body of every _init function: zero, then struct_size; the caller sets its defaults on the result.
template <class S>
S* initSized(S* s) noexcept {
    if (!s) return nullptr;
    *s = S{};
    s->struct_size = sizeof(S);
    return s;
}

// The whole body of a getter: check the out-parameter, then write what `get` returns (it looks up the handle).
template <class T, class Get>
ctxc_status_t getInto(char const* function, T* out, char const* name, Get&& get) noexcept {
    return guard(function, [&] {
        T& o = requireOut(out, name);
        o = get();
    });
}

// A compaction map of old_batch entries.
inline void requireMap(int32_t const* oldToNew, int32_t oldBatch) {
    requireNonNegative(oldBatch, "old_batch");
    requireArray(oldToNew, static_cast<size_t>(oldBatch), "old_to_new");
}

ResourceType resourceType(int32_t value, char const* name);

inline Hash128 toHash(ctxc_hash128_t const& h) { return Hash128{h.hi, h.lo}; }
inline ctxc_hash128_t fromHash(Hash128 const& h) { return ctxc_hash128_t{h.hi, h.lo}; }

// Copies `values` (a vector, a string) into a caller buffer (two-call pattern): always sets *outCount;
// CTXC_E_BUFFER_TOO_SMALL (and nothing copied) when the buffer is short; `unit` names its elements in the message.
template <class Out, class Values>
ctxc_status_t copyOut(Values const& values, Out* out, size_t capacity, size_t* outCount, char const* name,
                      char const* unit = "entries", char const* countName = "out_count") {
    requireOut(outCount, countName) = values.size();
    if (values.empty()) return CTXC_OK;
    if (capacity < values.size()) {
        if (out == nullptr && capacity == 0) return CTXC_E_BUFFER_TOO_SMALL;  // the size query
        throw ApiError(CTXC_E_BUFFER_TOO_SMALL, std::string(name) + " holds " + std::to_string(capacity) + " " + unit +
                                                    ", " + std::to_string(values.size()) + " needed");
    }
    if (!out) invalidArgument(std::string(name) + " is NULL");
    for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<Out>(values[i]);
    return CTXC_OK;
}

}  // namespace ctxcache::capi
