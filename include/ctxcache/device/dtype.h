// Element types of device storage (KV pools, recurrent and conv state, snapshot slabs, gather outputs).
//
// The numeric values are part of the C ABI (CTXC_DTYPE_*). Conversions between them live in layout.h, written
// with integer bit math so that host and device produce the same bits.
// Threading: plain values; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ctxcache::device {

enum class DType : int32_t {
    kFp16 = 0,     // IEEE binary16
    kBf16 = 1,     // bfloat16
    kFp8E4m3 = 2,  // OCP FP8 E4M3 "FN": bias 7, no infinities, S.1111.111 is NaN, max finite 448
    kFp32 = 3,     // IEEE binary32
};
inline constexpr int kDTypeCount = 4;

constexpr bool isValidDType(int32_t value) noexcept { return value >= 0 && value < kDTypeCount; }

constexpr size_t dtypeSize(DType type) noexcept {
    switch (type) {
        case DType::kFp16: return 2;
        case DType::kBf16: return 2;
        case DType::kFp8E4m3: return 1;
        case DType::kFp32: return 4;
    }
    return 0;
}

constexpr char const* dtypeName(DType type) noexcept {
    switch (type) {
        case DType::kFp16: return "fp16";
        case DType::kBf16: return "bf16";
        case DType::kFp8E4m3: return "fp8_e4m3";
        case DType::kFp32: return "fp32";
    }
    return "unknown";
}

}  // namespace ctxcache::device
