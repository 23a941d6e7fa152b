// C ABI of include/ctxcache/c/host_tier.h: a manager's host-memory tier, owned by its ManagerObject (declared after
// the manager there, so the tier detaches before the manager goes). Every call is in the manager's family.
#include "ctxcache/c/host_tier.h"

#include <memory>
#include <string>

#include "api_support.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

tier::HostTier& requireTier(ManagerObject& m) {
    if (!m.hostTier) throw ContractError("the manager has no host tier (ctxc_manager_attach_host_tier)");
    return *m.hostTier;
}

// What extend_hit and probe_hit share: the output cleared, the manager, the hashes and counts checked, then `hit`
// on the manager's tier with the hashes.
template <class Hit>
int32_t tierHit(void const* manager, ctxc_hash128_t const* hashes, size_t count, int32_t inputTokenCount,
                int32_t deviceBlocks, int32_t* outLoadedBlocks, Hit hit) {
    requireOut(outLoadedBlocks, "out_loaded_blocks") = 0;
    ManagerObject& m = requireManager(manager);
    BlockHashSpan const span = inputHashes(hashes, count);
    requireNonNegative(inputTokenCount, "input_token_count");
    requireNonNegative(deviceBlocks, "device_blocks");
    if (static_cast<size_t>(deviceBlocks) > count)
        invalidArgument("device_blocks (" + std::to_string(deviceBlocks) + ") exceeds the hash count (" +
                        std::to_string(count) + ")");
    return hit(requireTier(m), span);
}

}  // namespace

extern "C" {

CTXC_API void ctxc_host_tier_options_init(ctxc_host_tier_options_t* options) {
    if (!initSized(options)) return;
    options->write_policy = CTXC_HOST_WRITE_BACK;
}

CTXC_API ctxc_status_t ctxc_manager_attach_host_tier(ctxc_manager_t* manager, const ctxc_host_tier_options_t* options) {
    return guard(__func__, [&] {
        ManagerObject& m = requireManager(manager);
        ctxc_host_tier_options_t const& o = requireSized(options, "options");
        if (o.capacity_pages < 0 || (o.capacity_pages == 0 && !o.store))
            invalidArgument("options->capacity_pages must be positive (0 only with a store; got " +
                            std::to_string(o.capacity_pages) + ")");
        auto const policy = hostWritePolicyAs<tier::HostWritePolicy>(o.write_policy, "options->write_policy");
        std::shared_ptr<tier::BookkeepingStore> store;
        if (o.store) store = requireObject(stores(), o.store, "options->store").store;
        if (m.hostTier) throw ContractError("the manager already has a host tier; detach it first");
        tier::HostTierConfig config;
        config.capacityPages = o.capacity_pages;
        config.writePolicy = policy;
        config.store = std::move(store);
        m.hostTier = std::make_unique<tier::HostTier>(*m.manager, config);
    });
}

CTXC_API ctxc_status_t ctxc_manager_detach_host_tier(ctxc_manager_t* manager) {
    return guard(__func__, [&] { requireManager(manager).hostTier.reset(); });
}

CTXC_API ctxc_status_t ctxc_manager_host_tier_extend_hit(ctxc_manager_t* manager, const ctxc_hash128_t* hashes,
                                                         size_t count, int32_t input_token_count, int32_t device_blocks,
                                                         int32_t* out_loaded_blocks) {
    return guard(__func__, [&] {
        *out_loaded_blocks = tierHit(
            manager, hashes, count, input_token_count, device_blocks, out_loaded_blocks,
            [&](tier::HostTier& t, BlockHashSpan span) { return t.extendHit(span, input_token_count, device_blocks); });
    });
}

CTXC_API ctxc_status_t ctxc_manager_host_tier_extend_hit_by_tier(ctxc_manager_t* manager, const ctxc_hash128_t* hashes,
                                                                 size_t count, int32_t input_token_count,
                                                                 int32_t device_blocks, int32_t* out_host_blocks,
                                                                 int32_t* out_store_blocks) {
    return guard(__func__, [&] {
        requireOut(out_store_blocks, "out_store_blocks") = 0;
        tier::TierHit hit;
        *out_host_blocks = tierHit(manager, hashes, count, input_token_count, device_blocks, out_host_blocks,
                                   [&](tier::HostTier& t, BlockHashSpan span) {
            hit = t.extendHitByTier(span, input_token_count, device_blocks);
            return hit.hostBlocks;
        });
        *out_store_blocks = hit.storeBlocks;
    });
}

CTXC_API ctxc_status_t ctxc_manager_host_tier_extend_spec_hit(ctxc_manager_t* manager, const ctxc_hash128_t* hashes,
                                                              size_t count, int32_t input_token_count,
                                                              int32_t device_blocks, int32_t* out_loaded_blocks) {
    return guard(__func__, [&] {
        *out_loaded_blocks = tierHit(manager, hashes, count, input_token_count, device_blocks, out_loaded_blocks,
                                     [&](tier::HostTier& t, BlockHashSpan span) {
            return t.extendSpecHit(span, input_token_count, device_blocks);
        });
    });
}

CTXC_API ctxc_status_t ctxc_manager_host_tier_probe_hit(const ctxc_manager_t* manager, const ctxc_hash128_t* hashes,
                                                        size_t count, int32_t input_token_count, int32_t device_blocks,
                                                        int32_t* out_loaded_blocks) {
    return guard(__func__, [&] {
        *out_loaded_blocks = tierHit(manager, hashes, count, input_token_count, device_blocks, out_loaded_blocks,
                                     [&](tier::HostTier const& t, BlockHashSpan span) {
            return t.probeHit(span, input_token_count, device_blocks);
        });
    });
}

CTXC_API ctxc_status_t ctxc_manager_host_tier_clear(ctxc_manager_t* manager) {
    return guard(__func__, [&] { requireTier(requireManager(manager)).clear(); });
}

CTXC_API ctxc_status_t ctxc_manager_host_tier_metrics(const ctxc_manager_t* manager, int32_t* out_attached,
                                                      ctxc_host_tier_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        requireOut(out_attached, "out_attached") = 0;
        if (out_metrics) requireSized(out_metrics, "out_metrics");
        ManagerObject& m = requireManager(manager);
        if (!m.hostTier) return;
        *out_attached = 1;
        if (!out_metrics) return;
        tier::HostTier const& t = *m.hostTier;
        tier::HostTierMetrics const& x = t.metrics();
        ctxc_host_tier_metrics_t& o = *out_metrics;
        o.capacity_pages = t.config().capacityPages;
        o.resident_blocks = t.index().residentCount();
        o.writing_blocks = t.index().writingCount();
        o.pinned_blocks = t.index().pinnedCount();
        o.extend_calls = x.extendCalls;
        o.hit_requests = x.hitRequests;
        o.loaded_blocks = x.loadedBlocks;
        o.written_blocks = x.writtenBlocks;
        o.skipped_writes = x.skippedWrites;
        o.refused_writes = x.refusedWrites;
        o.dropped_blocks = x.droppedBlocks;
        o.failed_loads = x.failedLoads;
        o.metadata_bytes = t.memoryBytes();
        o.store_loaded_blocks = x.storeLoadedBlocks;
        o.store_hit_requests = x.storeHitRequests;
    });
}

CTXC_API ctxc_status_t ctxc_manager_host_tier_check_invariants(const ctxc_manager_t* manager) {
    return guard(__func__, [&] { requireTier(requireManager(manager)).checkInvariants(); });
}

}  // extern "C"
