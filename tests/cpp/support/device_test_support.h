// Helpers of the device-layer suites: deterministic byte patterns, host <-> device byte vectors, and a check that
// a call threw ContractError (the device layer's "invalid argument, nothing changed" answer).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/errors.h"

namespace ctxcache::test {

using Bytes = std::vector<unsigned char>;

// n bytes where byte i = (seed * 37 + i * 11) & 0xFF: distinct across nearby offsets, easy to recompute.
inline Bytes pattern(size_t n, uint32_t seed) {
    Bytes out(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<unsigned char>(seed * 37u + i * 11u);
    return out;
}

inline Bytes randomBytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    Bytes out(n);
    for (auto& b : out) b = static_cast<unsigned char>(rng());
    return out;
}

inline Bytes readBuffer(device::DeviceBuffer const& buffer, size_t offset = 0, size_t size = SIZE_MAX) {
    Bytes out(size == SIZE_MAX ? buffer.size() - offset : size);
    buffer.read(offset, out.data(), out.size());
    return out;
}

template <class T>
std::vector<T> asVector(Bytes const& bytes) {
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
}

template <class T>
Bytes asBytes(std::vector<T> const& values) {
    Bytes out(values.size() * sizeof(T));
    std::memcpy(out.data(), values.data(), out.size());
    return out;
}

// Expects `body` to throw ContractError whose message contains `needle`.
template <class F>
void expectContractError(F&& body, std::string const& needle) {
    try {
        body();
        ADD_FAILURE() << "expected ContractError containing \"" << needle << "\"";
    } catch (ContractError const& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
    }
}

}  // namespace ctxcache::test
