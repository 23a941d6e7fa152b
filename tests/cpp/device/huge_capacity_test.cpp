// Capacities up to INT32_MAX (issue 24, item 3): per-id metadata is allocated for the first kEagerMetadataIds ids
// and grows with the ids actually handed out, so a pool, an index or a manager of any capacity constructs and
// serves in memory proportional to what it uses; metadata growth that cannot be allocated is an
// OutOfMemoryError naming the bytes, with nothing changed. Each case runs in a forked child under an
// address-space limit a few hundred MiB above what the process already maps (the old code needed about 100 GiB
// for these capacities), and reports through its exit status.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ctxcache/base_block_index.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/errors.h"
#include "ctxcache/resource_pools.h"
#include "support/test_support.h"

namespace ctxcache {
namespace {

using test::basePage;
using test::blockHash;
using test::expectCompletesWithinAddressSpace;

constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
constexpr ResourceType kBase = ResourceType::kBaseKvPage;
constexpr size_t kMiB = size_t{1} << 20;

// Inside a child an EXPECT would be lost: a failed check says why on stderr and throws (the child exits 1).
void require(bool condition, std::string const& what) {
    if (condition) return;
    std::fprintf(stderr, "child: %s\n", what.c_str());
    throw std::runtime_error(what);
}

// The body, with any exception it lets out reported on stderr first.
std::function<void()> reported(std::function<void()> body) {
    return [body = std::move(body)] {
        try {
            body();
        } catch (std::exception const& e) {
            std::fprintf(stderr, "child: %s\n", e.what());
            throw;
        }
    };
}

std::vector<BlockHash> chain(uint64_t lane, size_t count) {
    std::vector<BlockHash> out;
    out.reserve(count);
    for (size_t i = 0; i < count; ++i) out.push_back(blockHash(lane, i));
    return out;
}

#ifdef CTXC_UNDER_ASAN
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "address-space limits and AddressSanitizer do not mix"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

TEST(HugeCapacity, PoolsOfInt32MaxIdsConstructAndHandOutIdsInFifoOrderPastTheEagerPart) {
    SKIP_UNDER_ASAN();
    expectCompletesWithinAddressSpace(256 * kMiB, reported([] {
        ResourcePools pools({kMax, kMax, kMax, kMax});
        // The eager part only: 12 bytes per id for 2^20 ids per pool (the whole capacity would be 96 GiB).
        require(pools.memoryBytes() <= 4 * size_t{kEagerMetadataIds} * 12, "eager metadata only");
        require(pools.freeCount(kBase) == kMax && pools.issuedCount(kBase) == 0, "all free, none issued");
        std::vector<int32_t> ids;
        int32_t const n = kEagerMetadataIds + 1000;
        for (int32_t taken = 0; taken < n; taken += 4096) require(pools.allocateIds(kBase, 4096, ids), "allocated");
        for (size_t i = 0; i < ids.size(); ++i) require(ids[i] == static_cast<int32_t>(i), "ascending fresh ids");
        int32_t const issued = static_cast<int32_t>(ids.size());
        require(pools.issuedCount(kBase) == issued, "issued count");
        require(pools.memoryBytes() < 4 * size_t{kEagerMetadataIds} * 12 + static_cast<size_t>(issued) * 2 * 12 + kMiB,
                "metadata follows the issued ids");
        // Freed ids go behind every never-issued one (FIFO): the next ids are fresh, whatever was freed.
        pools.addCacheRef(basePage(5));
        pools.releaseActiveRef(basePage(5));  // reclaimable, not free
        pools.releaseActiveRef(basePage(issued - 1));
        pools.releaseActiveRef(basePage(7));
        require(pools.freeCount(kBase) == kMax - issued + 2, "two freed");
        require(pools.reclaimableCount(kBase) == 1, "one reclaimable");
        std::vector<int32_t> next;
        require(pools.allocateIds(kBase, 2, next), "two more");
        require(next == (std::vector<int32_t>{issued, issued + 1}), "fresh ids before freed ones");
        std::vector<int32_t> freeHead(3);
        require(pools.freeListInto(kBase, freeHead.data(), 3) == 3 &&
                    freeHead == (std::vector<int32_t>{issued + 2, issued + 3, issued + 4}),
                "the free list starts with the never-issued ids");
        // A never-issued id is valid and free: refcount operations on it fail like on any free id.
        require(pools.isFree(basePage(kMax - 1)) && pools.refCounts(basePage(kMax - 1)).active == 0, "free");
        bool refused = false;
        try {
            pools.addActiveRef(basePage(kMax - 1));
        } catch (ContractError const&) {
            refused = true;
        }
        require(refused && pools.isFree(basePage(kMax - 1)), "a ref on a never-issued id is refused");
        pools.checkInvariants();
        require(pools.releaseCacheRef(basePage(5)).cache == 0 && pools.isFree(basePage(5)), "freed");
        pools.checkInvariants();
    }));
}

TEST(HugeCapacity, WhenPoolGrowthCannotBeAllocatedItIsAnOutOfMemoryErrorNamingTheBytesAndChangesNothing) {
    SKIP_UNDER_ASAN();
    expectCompletesWithinAddressSpace(512 * kMiB, reported([] {
        ResourcePools pools({kMax, 0, 0, 0});
        std::vector<int32_t> ids;
        require(pools.allocateIds(kBase, 3, ids), "a few ids");
        // 2^26 more ids: the id vector (256 MiB) fits in the limit, their metadata (12 bytes for each of 3 + 2^26
        // ids) does not.
        std::vector<int32_t> more;
        std::string message;
        try {
            pools.allocateIds(kBase, 1 << 26, more);
        } catch (OutOfMemoryError const& e) {
            message = e.what();
        }
        require(message.find("cannot allocate 805306404 bytes") != std::string::npos, "the bytes: " + message);
        require(message.find("base KV page") != std::string::npos, "the pool: " + message);
        require(more.empty() && pools.issuedCount(kBase) == 3 && pools.freeCount(kBase) == kMax - 3, "unchanged");
        pools.checkInvariants();
        require(pools.allocateIds(kBase, 2, more) && more == (std::vector<int32_t>{3, 4}), "still serves");
    }));
}

TEST(HugeCapacity, AManagerOfInt32MaxPagesServesVanillaAndSpecRequestsPastTheEagerMetadata) {
    SKIP_UNDER_ASAN();
    expectCompletesWithinAddressSpace(768 * kMiB, reported([] {
        ContextCacheManager m(4, {kMax, kMax, 0, 0}, 64);
        require(m.metadataBytes() < 128 * kMiB, "eager metadata only: " + std::to_string(m.metadataBytes()));

        // One prompt of more blocks than the eager part: the pools, the base index's reverse map and its table
        // (which doubles once the mappings pass half of its 2^21 slots) all grow while it is served.
        size_t const blocks = static_cast<size_t>(kEagerMetadataIds) + 4096;
        std::vector<BlockHash> const prompt = chain(1, blocks);
        int32_t const tokens = static_cast<int32_t>(blocks * 4);
        AcquireResult cold = m.acquireVanilla(prompt, tokens);
        require(cold.lease.has_value(), "cold acquire");
        require(cold.lease->basePages().size() == blocks && cold.lease->basePages().back() == kEagerMetadataIds + 4095,
                "fresh pages 0..blocks-1");
        require(m.growBasePages(*cold.lease, 3), "grow");
        PublishResult const published = m.publish(*cold.lease, {prompt, tokens});
        require(published.record.has_value(), "published");
        require(m.baseIndex().size() == blocks, "every block indexed");
        cold.lease.reset();

        // The same prompt again: every block hits, on the very pages published (found in the grown table).
        AcquireResult warm = m.acquireVanilla(prompt, tokens);
        require(warm.lease.has_value(), "warm acquire");
        // Every block matches; the last one is recomputed (one token at least must be), so it binds a fresh page.
        require(warm.plan.matchedTokenLength == tokens && warm.plan.reuseTokenLength == tokens - 4 &&
                    warm.plan.basePageBindings.size() == blocks - 1,
                "hit: " + std::to_string(warm.plan.reuseTokenLength));
        for (size_t i = 0; i + 1 < blocks; ++i)
            require(warm.plan.basePageBindings[i] == static_cast<PageId>(i), "hit page " + std::to_string(i));
        warm.lease.reset();

        // A spec request after it: draft pages and the draft index's heads (pages past 2^20) grow as well.
        std::vector<BlockHash> const spec = chain(2, 64);
        AcquireResult draft = m.acquireSpec(spec, 64 * 4);
        require(draft.lease.has_value(), "spec acquire");
        require(draft.lease->draftPages().size() == 64 && draft.lease->draftPages().front() == 0, "draft pages");
        // Base pages: fresh ones after the cold lease's (blocks + 3) and the warm one's private page.
        require(draft.lease->basePages().front() == static_cast<PageId>(blocks + 4), "base pages after the rest");
        require(m.growSpecPages(*draft.lease, 1, 1), "spec grow");
        require(m.publish(*draft.lease, {spec, 64 * 4}).record.has_value(), "spec publish");
        draft.lease.reset();
        AcquireResult again = m.acquireSpec(spec, 64 * 4);
        require(again.lease.has_value(), "spec hit");
        // 63 blocks reused on their record's pages, the last one recomputed on a fresh base and draft page.
        require(again.plan.matchedTokenLength == 64 * 4 && again.plan.reuseTokenLength == 63 * 4 &&
                    again.lease->basePages().back() == static_cast<PageId>(blocks + 69) &&
                    again.lease->draftPages().back() == 65,
                "spec hit: " + std::to_string(again.plan.reuseTokenLength));
        again.lease.reset();
        m.checkInvariants();
        require(m.pools().issuedCount(kBase) == static_cast<int32_t>(blocks + 70) &&
                    m.pools().issuedCount(ResourceType::kDraftKvPage) == 66,
                "issued ids");
        require(m.metadataBytes() < 512 * kMiB, "metadata follows use: " + std::to_string(m.metadataBytes()));
    }));
}

TEST(HugeCapacity, ABaseIndexGrowsItsTableAndReverseMapAndFindsEveryMapping) {
    // An index of INT32_MAX pages holds the eager part only (the old one took 64 GiB), grows to cover the pages
    // inserted, and every mapping survives the table's rehash.
    SKIP_UNDER_ASAN();
    expectCompletesWithinAddressSpace(256 * kMiB, reported([] {
        BaseBlockIndex index(kMax);
        size_t const eagerBytes = index.memoryBytes();
        require(eagerBytes < 64 * kMiB, "eager part only: " + std::to_string(eagerBytes));
        int32_t const n = kEagerMetadataIds + 10;
        for (int32_t page = 0; page < n; ++page)
            require(index.insert(blockHash(3, static_cast<uint64_t>(page)), page).inserted, "inserted");
        require(index.memoryBytes() > eagerBytes && index.size() == static_cast<size_t>(n), "grown");
        for (int32_t page = 0; page < n; page += 997)
            require(index.lookup(blockHash(3, static_cast<uint64_t>(page))) == std::optional<PageId>(page), "found");
        require(index.lookup(blockHash(3, static_cast<uint64_t>(n - 1))) == std::optional<PageId>(n - 1), "last");
        require(!index.isMapped(n) && !index.hashOfPage(kMax - 1).has_value(), "unmapped pages");
        index.erasePage(kMax - 1);  // in range, never mapped: a no-op
        index.erasePage(0);
        require(!index.lookup(blockHash(3, 0)).has_value(), "erased");
        bool refused = false;
        try {
            index.insert(blockHash(4, 0), 1);  // page 1 is another hash's
        } catch (ContractError const&) {
            refused = true;
        }
        require(refused, "a page of another hash is refused");
        index.checkInvariants();
    }));
}

// Resident bytes of this process (the second field of /proc/self/statm, in pages).
size_t residentBytes() {
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
        if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        std::fclose(f);
    }
    return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(HugeCapacity, CpuBackendMemoryIsZeroedWithoutBeingTouched) {
    // The CPU backend zeroed each allocation with memset, making a large pool resident at once (the same trap
    // on the device side); it now takes zero pages from the kernel, resident only where written.
    SKIP_UNDER_ASAN();
    expectCompletesWithinAddressSpace(1024 * kMiB, reported([] {
        auto backend = device::createCpuBackend();
        size_t const before = residentBytes();
        device::DeviceBuffer buffer(*backend, 512 * kMiB);
        require(reinterpret_cast<uintptr_t>(buffer.data()) % 256 == 0, "256-byte aligned");
        require(backend->allocatedBytes() == 512 * kMiB, "accounted");
        uint64_t word = 0x0123456789ABCDEFull, back = 1;
        buffer.write(300 * kMiB, &word, sizeof word);
        buffer.read(300 * kMiB, &back, sizeof back);
        require(back == word, "written");
        buffer.read(100 * kMiB, &back, sizeof back);
        require(back == 0, "zeroed");
        size_t const grown = residentBytes() - before;
        require(grown < 64 * kMiB, "resident growth " + std::to_string(grown) + " bytes for a 512 MiB buffer");
    }));
}

}  // namespace
}  // namespace ctxcache
