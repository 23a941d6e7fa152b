// streamingCopy: the CPU backend's copy of one page-sized run between the pool and host slots. A host-tier batch
// writes many such runs (one per page, layer and K/V half: 32 KiB each for an 8-head, 128-dim fp16 page of 16
// tokens) that nothing reads again soon, so a run of at least kStreamingCopyMinBytes is written with
// non-temporal stores (no read of the destination's lines first) in four interleaved streams (the hardware keeps
// several lines in flight). Measured on 256 MiB of written bytes (bench_kernels --backend cpu --only host_copy):
// 0.56 to 0.63 of memmove with std::memcpy per run, 0.90 to 0.96 with this (docs/TIERS.md, "The copies' speed").
//
// Invariants: the bytes written are exactly memcpy's (the same sources, the same destinations, nothing else
//             touched); shorter runs, and builds without SSE2, are std::memcpy. Source and destination must not
//             overlap. Non-temporal stores are weakly ordered: a batch ends with streamingCopyFence() before
//             anything that publishes its bytes to another thread.
// Threading:  none of its own; the caller's.
#pragma once

#include <cstddef>

namespace ctxcache::device::detail {

inline constexpr size_t kStreamingCopyMinBytes = 4096;

void streamingCopy(void* dst, void const* src, size_t bytes) noexcept;

// Orders the streaming stores made so far before any later store (an sfence; nothing without SSE2).
void streamingCopyFence() noexcept;

}  // namespace ctxcache::device::detail
