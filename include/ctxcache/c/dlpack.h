/* ctxcache C ABI: DLPack export of device views (device.h): a tensor that keeps its owner's memory alive until
 * its consumer's deleter runs, and the PyCapsule destructor for Python bindings. */
#ifndef CTXCACHE_C_DLPACK_H
#define CTXCACHE_C_DLPACK_H

#include "ctxcache/c/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- DLPack export ------------------------------------------------------------------------------------------ */

/* A DLPack tensor describing a view taken from `owner` (the device object handle the view came from: buffer, KV
 * pool, page table, KV lengths, resident state or snapshot storage), returned as *out_managed: versioned = 1, a
 * DLManagedTensorVersioned (DLPack 1.0, writable: the payload of a "dltensor_versioned" PyCapsule); versioned = 0,
 * the unversioned DLManagedTensor (DLPack 0.8: a "dltensor" capsule, which numpy >= 2 imports read-only). The
 * view must lie inside the owner's memory (else CTXC_E_CONTRACT); its element may be reinterpreted as another of
 * the same size (e.g. BF16 as UINT16). Element types map to DLPack as FP16 -> float16, BF16 -> bfloat16, FP32 ->
 * float32, INT32 -> int32, UINT16 -> uint16, and FP8_E4M3 and UINT8 -> uint8 (FP8 as its bit patterns: every
 * consumer can import it; reinterpret it as float8_e4m3fn there). Device: kDLCPU (1) on the CPU backend, kDLCUDA
 * (2) with the ordinal on CUDA. Strides NULL (compact row-major).
 * The tensor holds its own reference to the owner's memory (and its backend): destroying the handle while a
 * consumer still uses the tensor is safe, the memory goes when the consumer calls the tensor's deleter (which
 * may then free device memory: safe from any thread). Nothing is written or synchronized. */
CTXC_API ctxc_status_t ctxc_device_view_to_dlpack(const ctxc_device_view_t *view, const void *owner, int32_t versioned,
                                                  void **out_managed);
/* Calls the deleter of a tensor from ctxc_device_view_to_dlpack that no consumer took (a capsule destroyed
 * unconsumed); `versioned` as it was made. NULL is a no-op. */
CTXC_API void ctxc_dlpack_release(void *managed, int32_t versioned);
/* For Python bindings: a PyCapsule destructor (void (*)(PyObject *)) for a "dltensor" or "dltensor_versioned"
 * capsule of such a tensor: releases it when no consumer took it (a consumer renames the capsule), keeping any
 * pending Python exception (a consumer that failed destroys the capsule with its exception set). It uses the
 * CPython functions the process exports, looked up at run time; outside Python it does nothing. */
CTXC_API void ctxc_dlpack_capsule_destructor(void *capsule);

#ifdef __cplusplus
}
#endif

#endif /* CTXCACHE_C_DLPACK_H */
