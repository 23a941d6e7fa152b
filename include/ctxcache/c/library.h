/* ctxcache C ABI: what every part needs: the export macro CTXC_API, CTXC_ABI_VERSION, the status codes
 * (ctxc_status_t; which status for which failure is the table in ctxcache.h) and the library-wide calls
 * (the loaded library's ABI version, ctxc_last_error, status names, struct sizes, the CUDA probe).
 * Every other part includes this one, so that each compiles alone; ctxcache.h includes them all. */
#ifndef CTXCACHE_C_LIBRARY_H
#define CTXCACHE_C_LIBRARY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CTXCACHE_BUILDING_LIBRARY)
#define CTXC_API __attribute__((visibility("default")))
#else
#define CTXC_API
#endif

#define CTXC_ABI_VERSION 5

typedef enum ctxc_status {
    CTXC_OK = 0,
    CTXC_E_INVALID_ARGUMENT = 1,    /* an argument is malformed in itself: NULL, negative, wrong size, unknown enum */
    CTXC_E_CONTRACT = 2,            /* arguments inconsistent with the state: wrong lease kind, changed prefix, ... */
    CTXC_E_INVALID_HANDLE = 3,      /* NULL, stale, double-released, foreign or orphaned handle */
    CTXC_E_NO_MEMORY = 4,
    CTXC_E_INVARIANT = 5,           /* ctxc_manager_check_invariants found the state inconsistent (a ctxcache bug) */
    CTXC_E_LEASES_OUTSTANDING = 6,  /* a manager was destroyed while leases were alive (they are now orphaned) */
    CTXC_E_BUFFER_TOO_SMALL = 7,
    CTXC_E_UNSUPPORTED = 8,
    CTXC_E_INTERNAL = 9,
    CTXC_E_DEVICE = 10,             /* the CUDA runtime failed; device memory touched by the call is unspecified */
    CTXC_E_REQUEST_FAILED = 11, /* a runtime request step could not be served (capacity, ...): see ctxcache.h's table */
    CTXC_E_POISONED = 12, /* a device synchronisation failed; the coordinator needs a successful shutdown */
    CTXC_E_CONCURRENT_USE = 13, /* another call was inside the same handle family: see Threading in ctxcache.h */
    CTXC_E_INTERRUPTED = 14, /* the caller asked a long call to stop (ctxc_sim_engine_interrupt); nothing returned */
    CTXC_STATUS_COUNT /* not a status: one past the last code (a new code goes before it) */
} ctxc_status_t;

/* ---- library ------------------------------------------------------------------------------------------- */

/* CTXC_ABI_VERSION of the library that was loaded; a binding checks it against its header. */
CTXC_API int32_t ctxc_abi_version(void);
/* The most recent failure on this thread: "<function>: <argument>: <why>". Never NULL ("" before any failure). */
CTXC_API const char *ctxc_last_error(void);
/* A static name for a status code ("CTXC_E_CONTRACT"); never NULL. */
CTXC_API const char *ctxc_status_string(ctxc_status_t status);
/* Size in bytes of a public struct by its type name ("ctxc_publish_result_t"), 0 if unknown: lets a binding that
 * declares the structs itself (cffi ABI mode) verify its layout. */
CTXC_API size_t ctxc_sizeof(const char *type_name);
/* 1 if this library was built with the CUDA backend, else 0. */
CTXC_API int32_t ctxc_cuda_compiled(void);
/* CUDA devices this process can use: > 0 devices, 0 none, < 0 the negated cudaError_t of the probe (-35: no
 * driver) or -1 when built without CUDA. ctxc_last_error() then holds the reason. Never fails. */
CTXC_API int32_t ctxc_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_LIBRARY_H */
