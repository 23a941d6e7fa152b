// layout.h: element conversions against independent references, FNV step against the core hash, index math.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "ctxcache/block_hash.h"
#include "ctxcache/device/layout.h"

using namespace ctxcache;
using namespace ctxcache::device;

namespace {

// Independent e4m3 reference: (-1)^s * (e == 0 ? m/8 * 2^-6 : (1 + m/8) * 2^(e-7)).
double e4m3Reference(uint8_t x) {
    int const s = x >> 7, e = (x >> 3) & 0xF, m = x & 7;
    double const v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

// Nearest half by bisection over the monotonic positive encodings, ties to the even encoding: a reference that
// shares no code with floatToHalfBits. Values beyond the largest finite half go to infinity when
// |f| >= 65520 (the tie with the next, unrepresentable step rounds up, as IEEE does).
uint16_t halfReference(float f) {
    double const a = std::fabs(static_cast<double>(f));
    uint16_t const sign = std::signbit(f) ? 0x8000 : 0;
    if (a >= 65520.0) return sign | 0x7C00;
    uint16_t lo = 0, hi = 0x7BFF;
    while (lo < hi) {  // largest encoding with value <= a
        uint16_t const mid = static_cast<uint16_t>((lo + hi + 1) / 2);
        if (static_cast<double>(halfBitsToFloat(mid)) <= a) lo = mid;
        else hi = static_cast<uint16_t>(mid - 1);
    }
    if (lo == 0x7BFF) return sign | lo;
    double const below = halfBitsToFloat(lo), above = halfBitsToFloat(static_cast<uint16_t>(lo + 1));
    uint16_t pick = lo;
    if (a - below > above - a) pick = static_cast<uint16_t>(lo + 1);
    else if (a - below == above - a) pick = (lo & 1) ? static_cast<uint16_t>(lo + 1) : lo;
    return sign | pick;
}

float fromBits(uint32_t u) { return bitsFloat(u); }

}  // namespace

TEST(DeviceLayout, Fp8E4m3DecodesEveryByteExactly) {
    EXPECT_EQ(fp8E4m3ToFloat(0x38), 1.0f);
    EXPECT_EQ(fp8E4m3ToFloat(0x7E), 448.0f);              // largest finite
    EXPECT_EQ(fp8E4m3ToFloat(0x01), std::ldexp(1.0f, -9)); // smallest subnormal
    EXPECT_EQ(fp8E4m3ToFloat(0x08), std::ldexp(1.0f, -6)); // smallest normal
    EXPECT_EQ(floatBits(fp8E4m3ToFloat(0x80)), 0x80000000u);  // -0
    EXPECT_EQ(floatBits(fp8E4m3ToFloat(0x7F)), 0x7FC00000u);  // NaN, canonical
    EXPECT_EQ(floatBits(fp8E4m3ToFloat(0xFF)), 0x7FC00000u);
    for (int x = 0; x < 256; ++x) {
        if ((x & 0x7F) == 0x7F) continue;
        EXPECT_EQ(static_cast<double>(fp8E4m3ToFloat(static_cast<uint8_t>(x))), e4m3Reference(static_cast<uint8_t>(x)))
            << "byte 0x" << std::hex << x;
    }
}

TEST(DeviceLayout, HalfRoundTripsEveryEncoding) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        bool const nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
        uint16_t const back = floatToHalfBits(halfBitsToFloat(static_cast<uint16_t>(h)));
        EXPECT_EQ(back, nan ? 0x7E00 : h) << "half 0x" << std::hex << h;
    }
}

TEST(DeviceLayout, FloatToHalfRoundsToNearestEven) {
    EXPECT_EQ(floatToHalfBits(1.0f), 0x3C00);
    EXPECT_EQ(floatToHalfBits(-2.0f), 0xC000);
    EXPECT_EQ(floatToHalfBits(65504.0f), 0x7BFF);
    EXPECT_EQ(floatToHalfBits(65519.0f), 0x7BFF);
    EXPECT_EQ(floatToHalfBits(65520.0f), 0x7C00);                    // the tie rounds to infinity
    EXPECT_EQ(floatToHalfBits(std::numeric_limits<float>::infinity()), 0x7C00);
    EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);        // smallest subnormal
    EXPECT_EQ(floatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);        // tie with 0 and 2^-24: even
    EXPECT_EQ(floatToHalfBits(std::ldexp(1.5f, -25)), 0x0001);
    EXPECT_EQ(floatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);        // tie between 1 and 2 ulps: even
    EXPECT_EQ(floatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00); // tie: even
    EXPECT_EQ(floatToHalfBits(1.0f + std::ldexp(3.0f, -11)), 0x3C02); // tie: even (up)
    EXPECT_EQ(floatToHalfBits(fromBits(0xFFC00001u)), 0x7E00);        // NaN: canonical, sign dropped
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) {
        float f = fromBits(rng());
        if (std::isnan(f)) continue;
        if (i % 2) f = std::ldexp(std::fmod(f, 2.0f), static_cast<int>(rng() % 48) - 30);  // half's range
        if (std::isnan(f)) continue;
        ASSERT_EQ(floatToHalfBits(f), halfReference(f)) << "float bits 0x" << std::hex << floatBits(f);
    }
}

TEST(DeviceLayout, Bf16RoundsToNearestEven) {
    EXPECT_EQ(floatToBf16Bits(1.0f), 0x3F80);
    EXPECT_EQ(floatToBf16Bits(fromBits(0x3F808000u)), 0x3F80);  // tie: even (down)
    EXPECT_EQ(floatToBf16Bits(fromBits(0x3F818000u)), 0x3F82);  // tie: even (up)
    EXPECT_EQ(floatToBf16Bits(fromBits(0x3F808001u)), 0x3F81);
    EXPECT_EQ(floatToBf16Bits(fromBits(0x7F7FFFFFu)), 0x7F80);  // max float rounds to infinity
    EXPECT_EQ(floatToBf16Bits(fromBits(0xFF800001u)), 0x7FC0);  // NaN: canonical
    for (uint32_t b = 0; b < 0x10000; ++b) {
        bool const nan = (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
        EXPECT_EQ(floatToBf16Bits(bf16BitsToFloat(static_cast<uint16_t>(b))), nan ? 0x7FC0 : b);
    }
}

TEST(DeviceLayout, Fp8DequantisationScalesThenRounds) {
    EXPECT_EQ(dequantFp8Bits(0x38, 2.0f, static_cast<int32_t>(DType::kFp16)), 0x4000u);      // 1 * 2
    EXPECT_EQ(dequantFp8Bits(0x38, 2.0f, static_cast<int32_t>(DType::kBf16)), 0x4000u);
    EXPECT_EQ(dequantFp8Bits(0x38, 2.0f, static_cast<int32_t>(DType::kFp32)), 0x40000000u);
    EXPECT_EQ(dequantFp8Bits(0x7E, 512.0f, static_cast<int32_t>(DType::kFp16)), 0x7C00u);    // 229376 overflows fp16
    EXPECT_EQ(dequantFp8Bits(0xBC, 0.5f, static_cast<int32_t>(DType::kFp16)), 0xBA00u);      // -1.5 * 0.5 = -0.75
    EXPECT_EQ(dequantFp8Bits(0x7F, 1.0f, static_cast<int32_t>(DType::kFp32)), 0x7FC00000u);  // NaN stays canonical
    EXPECT_EQ(dequantFp8Bits(0x38, std::numeric_limits<float>::quiet_NaN(), static_cast<int32_t>(DType::kBf16)),
              0x7FC0u);
    unsigned char out[4] = {};
    dequantFp8To(0x38, 2.0f, static_cast<int32_t>(DType::kFp32), out);
    EXPECT_EQ(out[0], 0x00);
    EXPECT_EQ(out[3], 0x40);
}

TEST(DeviceLayout, FnvByteStepMatchesTheCoreHash) {
    std::mt19937 rng(11);
    std::vector<unsigned char> bytes(4099);
    for (auto& b : bytes) b = static_cast<unsigned char>(rng());
    uint64_t hi = kFnvOffsetHi, lo = kFnvOffsetLo;
    for (unsigned char b : bytes) fnv1aByte(hi, lo, b);
    Hash128 const expected = fnv1a128(bytes.data(), bytes.size());
    EXPECT_EQ(hi, expected.hi);
    EXPECT_EQ(lo, expected.lo);
}

TEST(DeviceLayout, IndexMathFollowsTheDocumentedLayouts) {
    // Pool [2, numPages=3, pageSize=4, kvHeads=2, headDim=5]: page elements 40; V page of K page 1 is flat page 4.
    EXPECT_EQ(kvPageElements(4, 2, 5), 40);
    EXPECT_EQ(vPageOf(1, 3), 4);
    EXPECT_EQ(vPageOf(-1, 3), -1);
    EXPECT_EQ(kvPoolIndex(4, 3, 1, 2, 4, 2, 5), 4 * 40 + 3 * 10 + 1 * 5 + 2);
    // Page table [maxBatch, 2, maxPagesPerSeq=6]
    EXPECT_EQ(pageTableIndex(2, 1, 5, 6), (2 * 2 + 1) * 6 + 5);
    EXPECT_EQ(denseKvIndex(1, 2, 1, 3, 7, 2, 5), ((1 * 7 + 2) * 2 + 1) * 5 + 3);
    // Hash chunking: 5 bytes in 2 chunks -> [0,3), [3,5); 3 bytes in 8 chunks -> chunks 3.. are empty.
    EXPECT_EQ(hashChunkBytes(5, 2), 3u);
    EXPECT_EQ(hashChunkBegin(5, 2, 1), 3u);
    EXPECT_EQ(hashChunkBytes(3, 8), 1u);
    EXPECT_EQ(hashChunkBegin(3, 8, 5), 3u);
    EXPECT_EQ(hashChunkBytes(0, 2048), 0u);
    // spanOfChunk: spans of 2, 1 and 3 chunks start at chunks 0, 2 and 3.
    SpanCopy spans[3] = {{nullptr, nullptr, 1, 0}, {nullptr, nullptr, 1, 2}, {nullptr, nullptr, 1, 3}};
    EXPECT_EQ(spanOfChunk(spans, 3, 0), 0);
    EXPECT_EQ(spanOfChunk(spans, 3, 1), 0);
    EXPECT_EQ(spanOfChunk(spans, 3, 2), 1);
    EXPECT_EQ(spanOfChunk(spans, 3, 5), 2);
}
