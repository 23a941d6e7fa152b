/* ctxcache C ABI: a context cache (KV-cache reuse) for LLM inference runtimes.
 *
 * Layout: one header per object under this umbrella (as libgit2's git2.h), each matching one cpp/capi/<part>_api.cpp;
 * this file includes them all (the cffi declarations follow these includes), and each also compiles alone:
 *   ctxcache/c/library.h    CTXC_API, CTXC_ABI_VERSION, ctxc_status_t, ctxc_last_error and the library calls
 *                           (every part includes it, so that each stands alone)
 *   ctxcache/c/hash.h       ctxc_hash128_t, hashers and block hashing
 *   ctxcache/c/manager.h    the context-cache manager: acquire, grow, publish, evict, metrics
 *   ctxcache/c/lease.h      leases (a manager's grants)
 *   ctxcache/c/kv_events.h  KV events and their ZMQ publisher
 *   ctxcache/c/metrics.h    metrics in the Prometheus text format
 *   ctxcache/c/retention.h  retention specs, the retention clock and pins
 *   ctxcache/c/store.h      a KV store shared by several managers' tiers (bookkeeping)
 *   ctxcache/c/host_tier.h  a host-memory tier beside a manager
 *   ctxcache/c/device.h     device backends, buffers, KV pools, page tables, KV lengths, resident state, snapshots
 *   ctxcache/c/dense_kv.h   dense K/V scatter into pages and gather out of them
 *   ctxcache/c/dlpack.h     DLPack export of device views
 *   ctxcache/c/runtime.h    coordinators and requests (the request facade, on either backend)
 *   ctxcache/c/swa.h        bounded sliding-window paging
 *   ctxcache/c/sim.h        the reference engine (simulation)
 *   ctxcache/c/debug.h      introspection for tests and checkers (ctxc_debug_*)
 *
 * Conventions
 *   - Every symbol is ctxc_<object>_<verb>; types ctxc_<name>_t; constants CTXC_<NAME> (integer literals or
 *     enums only, so that the header is also the cffi cdef).
 *   - Handles are opaque and checked: a NULL, stale (destroyed), double-released, foreign (another manager's
 *     lease) or wrongly typed handle returns CTXC_E_INVALID_HANDLE, never a crash. Handles may be destroyed in
 *     any order: a child (a lease, a request) whose parent (its manager, coordinator or SWA manager) was destroyed
 *     first is detected and reported the same way, whatever it went through before (quarantine, shutdown, the
 *     parent reused for other children); device objects keep what they were built over alive instead.
 *   - Every fallible call returns ctxc_status_t (CTXC_OK == 0). On failure nothing changed (but see
 *     CTXC_E_DEVICE), and ctxc_last_error() (thread-local, never NULL) says which call, which argument and why.
 *   - Capacity shortage is an answer, not an error: an acquire reports CTXC_ACQUIRE_INSUFFICIENT_CAPACITY in its
 *     result, grow and reserve set *out_ok = 0.
 *   - Argument order: the object first, then inputs, then outputs. Every output parameter (out_*: a handle, a
 *     struct, a scalar, or a two-call buffer out_x, out_capacity, out_count) comes last, creates included:
 *     ctxc_<object>_create(<parents...>, options, out_object).
 *   - Every create takes an options struct. Every struct that may grow begins with uint32_t struct_size: options
 *     and request structs (inputs) are filled by their _init() call; output structs are filled by the caller with
 *     sizeof (or zero-initialised and struct_size set), and the library writes them only when struct_size is at
 *     least its own sizeof (else CTXC_E_INVALID_ARGUMENT, nothing written). A new field goes at the end of its
 *     struct. The small value structs used in arrays or embedded (ctxc_hash128_t, ctxc_resource_demand_t,
 *     ctxc_media_span_key_t, ctxc_block_key_extras_t, ctxc_hybrid_candidate_t, ctxc_hybrid_snapshot_reservation_t,
 *     ctxc_hybrid_checkpoint_key_t, ctxc_kv_layer_shape_t, ctxc_resident_ref_t, ctxc_kv_headroom_t,
 *     ctxc_media_item_t, ctxc_sequence_request_t, ctxc_tensor_view_t, and ctxc_reuse_plan_t, the last member of
 *     ctxc_acquire_result_t whose struct_size covers it) are frozen: their size is static_asserted in the
 *     library and a change to them is a new type, or a new CTXC_ABI_VERSION (a binding checks it at load), as
 *     for ctxc_sequence_request_t's retention in version 4.
 *   - The calls of ctxcache/c/debug.h, named ctxc_debug_*, read internal state for tests and checkers
 *     (reference counts, free lists, records, indexes, the device copy of a page table). A runtime needs none of
 *     them; they may cost O(state) and may change with CTXC_ABI_VERSION like any other call.
 *   - Variable-size outputs are pointer + count views owned by the library, valid until the next mutating call
 *     on the same manager (or lease), or caller buffers with the two-call pattern (out_capacity, *out_count:
 *     CTXC_E_BUFFER_TOO_SMALL still sets *out_count to the size needed).
 *   - Hashes are ctxc_hash128_t {hi, lo}: an array of n of them is the same memory as an (n, 2) uint64 array.
 *
 * Errors: which status for which failure (the one statement of it; the code and the tests follow it)
 *   CTXC_E_INVALID_ARGUMENT  an argument malformed in itself, whatever the state: a required pointer NULL, a NULL
 *                            array or byte buffer with a non-zero count, a negative count or length, a value that
 *                            is not one of its CTXC_* constants, a 0/1 flag with another value, a struct_size
 *                            smaller than the struct's.
 *   CTXC_E_CONTRACT          an argument inconsistent with the state of the objects it names: an id, index, slot,
 *                            page, layer, record or byte range outside what the object holds (every out-of-range
 *                            read or write, on every object), an invalid geometry, a wrong lease kind, a changed
 *                            prefix, objects from different backends.
 *   CTXC_E_INVALID_HANDLE    a NULL, stale, double-released, foreign, orphaned or wrongly typed handle.
 *   CTXC_E_DEVICE            the CUDA runtime failed (the CUDA error is in ctxc_last_error()); device memory the
 *                            call touched is unspecified, the objects can still be destroyed.
 *   CTXC_E_NO_MEMORY         a host allocation failed (the message names what and, where known, the bytes it needed).
 *   CTXC_E_UNSUPPORTED       the build or the machine lacks what was asked for (CUDA), with the reason.
 *   CTXC_E_BUFFER_TOO_SMALL  a two-call output buffer is short (*out_count says how much is needed).
 *   CTXC_E_INVARIANT         a check_invariants call found the state inconsistent (a ctxcache bug).
 *   CTXC_E_LEASES_OUTSTANDING  ctxc_manager_destroy orphaned live leases, or ctxc_coordinator_destroy orphaned
 *                            live requests (the manager or coordinator is destroyed anyway).
 *   CTXC_E_REQUEST_FAILED    a runtime request step could not be served (capacity, page-table overflow, another
 *                            request active, a deployment without that reuse): an answer about this request, not a
 *                            malformed call; ctxc_last_error() holds the request's own last error.
 *   CTXC_E_POISONED          a device synchronisation failed: the coordinator refuses new work until
 *                            ctxc_coordinator_shutdown() synchronises its quarantined requests successfully.
 *   CTXC_E_CONCURRENT_USE    the call overlapped another call into the same handle family (below) on another
 *                            thread, or re-entered one from a callback: the single-writer contract was broken.
 *                            Refused before the family's state is read or changed; ctxc_last_error() names both
 *                            calls (the one in progress and the one refused).
 *   CTXC_E_INTERRUPTED       a long-running call stopped early because the caller asked it to
 *                            (ctxc_sim_engine_interrupt); the object is consistent and may be used again.
 *   CTXC_E_INTERNAL          anything else: a ctxcache bug.
 *
 * Threading: the handles of one family follow a single-writer contract: the caller serializes every call that
 * touches them (including read-only queries, and destroys). The families: a manager, its leases and its KV events;
 * a device backend and everything built on it (device objects, the coordinators and bounded-SWA managers built
 * over them, and their requests); a coordinator without device objects and its requests; a sim engine; a sim
 * results object. A breach is detected, not undefined: a call that starts while another call is inside its family
 * returns CTXC_E_CONCURRENT_USE (it does not wait; nothing changed). Different families may be used from different
 * threads at once. Hashers are immutable and shareable; a KV event publisher may be used from any thread.
 */
#ifndef CTXCACHE_H
#define CTXCACHE_H

#include "ctxcache/c/library.h"

#include "ctxcache/c/debug.h"
#include "ctxcache/c/dense_kv.h"
#include "ctxcache/c/device.h"
#include "ctxcache/c/dlpack.h"
#include "ctxcache/c/hash.h"
#include "ctxcache/c/host_tier.h"
#include "ctxcache/c/kv_events.h"
#include "ctxcache/c/lease.h"
#include "ctxcache/c/manager.h"
#include "ctxcache/c/metrics.h"
#include "ctxcache/c/retention.h"
#include "ctxcache/c/runtime.h"
#include "ctxcache/c/sim.h"
#include "ctxcache/c/store.h"
#include "ctxcache/c/swa.h"

#endif /* CTXCACHE_H */
