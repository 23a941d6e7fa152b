// prefetchForRead: a hint to start loading the cache line at an address, for the core's pipelined walks (a chain's
// home slots, an eviction's reverse entries). Never faults, changes no state, and may be ignored by the CPU.
//
// Why not __builtin_prefetch alone: GCC 12 at -O2/-O3 deletes a __builtin_prefetch whose address comes from a
// clamped index or a loaded value (its dead-code pass treats the prefetch as removable), which silently undid
// every pipelined walk in the manager. On x86-64 with GCC or Clang the hint is an asm volatile prefetcht0 that no
// pass may delete; elsewhere it falls back to the builtin.
// Threading: none needed; it reads nothing the program can observe.
#pragma once

namespace ctxcache::detail {

inline void prefetchForRead(void const* address) noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    asm volatile("prefetcht0 (%0)" : : "r"(address));
#else
    __builtin_prefetch(address);
#endif
}

}  // namespace ctxcache::detail
