// streamingCopy: non-temporal stores in four interleaved streams for long runs, std::memcpy otherwise. Contract:
// cpp/device/streaming_copy.h.
#include "streaming_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ctxcache::device::detail {

#if defined(__SSE2__)
namespace {
constexpr size_t kPrefetchAhead = 256;  // bytes ahead in each stream (four lines)

// One 64-byte line: unaligned loads, aligned non-temporal stores (dst is 16-byte aligned).
inline void streamLine(unsigned char* dst, unsigned char const* src) noexcept {
    __m128i const a = _mm_loadu_si128(reinterpret_cast<__m128i const*>(src));
    __m128i const b = _mm_loadu_si128(reinterpret_cast<__m128i const*>(src + 16));
    __m128i const c = _mm_loadu_si128(reinterpret_cast<__m128i const*>(src + 32));
    __m128i const d = _mm_loadu_si128(reinterpret_cast<__m128i const*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
}
}  // namespace
#endif

void streamingCopy(void* dst, void const* src, size_t bytes) noexcept {
#if defined(__SSE2__)
    if (bytes >= kStreamingCopyMinBytes) {
        auto* d = static_cast<unsigned char*>(dst);
        auto const* s = static_cast<unsigned char const*>(src);
        // Up to the destination's next 16-byte boundary, then four quarters of whole lines side by side, then
        // the tail: every byte once.
        size_t const head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
        std::memcpy(d, s, head);
        d += head;
        s += head;
        bytes -= head;
        size_t const quarter = bytes / 256 * 64;
        for (size_t i = 0; i < quarter; i += 64) {
            bool const ahead = i + kPrefetchAhead < quarter;  // never an address past the source
            for (size_t k = 0; k < 4; ++k) {
                if (ahead)
                    _mm_prefetch(reinterpret_cast<char const*>(s + k * quarter + i + kPrefetchAhead), _MM_HINT_T0);
                streamLine(d + k * quarter + i, s + k * quarter + i);
            }
        }
        std::memcpy(d + 4 * quarter, s + 4 * quarter, bytes - 4 * quarter);
        return;
    }
#endif
    std::memcpy(dst, src, bytes);
}

void streamingCopyFence() noexcept {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

}  // namespace ctxcache::device::detail
