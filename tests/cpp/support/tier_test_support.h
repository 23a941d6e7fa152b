// Helpers the host tier's suites share: a manager's publication of a prompt, and a CPU pool whose every page holds
// bytes derived from its position, so that every copy through a tier (or a store) can be checked byte for byte.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/kv_page_pool.h"

namespace ctxcache::test {

constexpr int32_t kPage = 4;

// Acquires and publishes a cold prompt of hashes.size() full blocks plus `extra` tokens; returns its block pages.
inline std::vector<PageId> publishPrompt(ContextCacheManager& m, std::vector<BlockHash> const& hashes,
                                         int32_t extra = 1) {
    int32_t const tokens = static_cast<int32_t>(hashes.size()) * kPage + extra;
    AcquireResult r = m.acquireVanilla(hashes, tokens);
    EXPECT_EQ(r.status, AcquireStatus::kAcquired);
    if (!r.lease) return {};
    PublishResult const p = m.publish(*r.lease, PublishRequest{hashes, tokens});
    EXPECT_EQ(p.status, PublishStatus::kPublished);
    return {r.lease->basePages().begin(), r.lease->basePages().begin() + static_cast<std::ptrdiff_t>(hashes.size())};
}

// A CPU pool of 6 pages (2 layers of different shapes) whose page p, layer l, K or V holds bytes derived from
// (p, l, kv) so that every copy can be checked byte for byte.
struct BytesFixture {
    std::unique_ptr<device::DeviceBackend> backend = device::createCpuBackend();
    device::KvPagePool pool{*backend, device::KvPoolGeometry{6, kPage, device::DType::kFp16, {{2, 4}, {1, 8}}}};
    std::vector<std::vector<uint8_t>> original;  // per layer: the whole layer's bytes as filled

    BytesFixture() {
        for (int32_t l = 0; l < pool.numLayers(); ++l) {
            std::vector<uint8_t> bytes(pool.layerBytes(l));
            for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + l * 31 + 1);
            pool.writePages(l, 0, 12, bytes.data(), bytes.size());
            original.push_back(bytes);
        }
    }
    // Page p's bytes (every layer, K then V), as it is now, and as it was filled for page q.
    std::vector<uint8_t> page(PageId p) const {
        std::vector<uint8_t> out;
        for (int32_t l = 0; l < pool.numLayers(); ++l)
            for (int32_t kv = 0; kv < 2; ++kv) {
                std::vector<uint8_t> b(pool.pageBytes(l));
                pool.readPages(l, p + kv * 6, 1, b.data(), b.size());
                out.insert(out.end(), b.begin(), b.end());
            }
        return out;
    }
    std::vector<uint8_t> filled(PageId q) const {
        std::vector<uint8_t> out;
        for (int32_t l = 0; l < pool.numLayers(); ++l)
            for (int32_t kv = 0; kv < 2; ++kv) {
                size_t const pb = pool.pageBytes(l);
                auto first = original[static_cast<size_t>(l)].begin() + static_cast<std::ptrdiff_t>((q + kv * 6) * pb);
                out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(pb));
            }
        return out;
    }
};

}  // namespace ctxcache::test
