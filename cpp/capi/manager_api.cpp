// C ABI of include/ctxcache/c/manager.h: the context cache manager (its introspection is debug_api.cpp's).
#include "ctxcache/c/manager.h"

#include <cstddef>

#include "api_support.h"
#include "handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;

namespace {

ContextCacheLookupPolicy lookupPolicy(int32_t value) {
    if (value != CTXC_LOOKUP_USE_CACHE && value != CTXC_LOOKUP_BYPASS)
        invalidArgument("lookup_policy " + std::to_string(value) + " is not a CTXC_LOOKUP_* value");
    return static_cast<ContextCacheLookupPolicy>(value);
}

ctxc_resource_demand_t fromDemand(ResourceDemand const& d) {
    return ctxc_resource_demand_t{d.baseKvPages, d.draftKvPages, d.recurrentSnapshotSlots, d.partialKvSnapshotSlots};
}

ctxc_reuse_plan_t fromPlan(ReusePlan const& p) {
    ctxc_reuse_plan_t out{};
    out.mode = static_cast<int32_t>(p.mode);
    out.kind = static_cast<int32_t>(p.kind);
    out.spec_replay_mode = static_cast<int32_t>(p.specReplayMode);
    out.matched_token_length = p.matchedTokenLength;
    out.reuse_token_length = p.reuseTokenLength;
    out.bound_base_page_count = static_cast<int32_t>(p.basePageBindings.size());
    out.bound_draft_page_count = static_cast<int32_t>(p.draftPageBindings.size());
    out.hybrid_has_attention = p.hybridHasAttention ? 1 : 0;
    out.demand = fromDemand(p.demand);
    out.draft_record = p.draftRecord.value_or(kNoRecord);
    out.hybrid_record = p.hybridRecord.value_or(kNoRecord);
    out.recurrent_snapshot_binding = p.recurrentSnapshotBinding.value_or(-1);
    out.partial_kv_snapshot_binding = p.partialKvSnapshotBinding.value_or(-1);
    if (p.specReplayDependency) {
        out.has_spec_replay_dependency = 1;
        out.spec_replay_dependency_block_count = p.specReplayDependency->pathBlockCount;
        out.spec_replay_dependency_hash = fromHash(p.specReplayDependency->terminalHash);
    }
    if (p.hybridCheckpoint) {
        out.has_hybrid_checkpoint = 1;
        out.hybrid_checkpoint_length = p.hybridCheckpoint->exactLength;
        out.hybrid_checkpoint_digest = fromHash(p.hybridCheckpoint->exactPrefixDigest);
    }
    return out;
}

// Shared tail of the acquire calls: fill the result, register the lease handle.
ctxc_status_t finishAcquire(ctxc_manager_t* handle, ManagerObject& m, AcquireResult result, ctxc_acquire_result_t& out,
                            ctxc_lease_t** outLease) {
    out.status = static_cast<int32_t>(result.status);
    out.plan = fromPlan(result.plan);
    if (result.status != AcquireStatus::kAcquired) return CTXC_OK;
    auto object = std::make_unique<LeaseObject>();
    object->family = m.family;
    object->lease = std::move(*result.lease);
    object->managerHandle = handle;
    void* leaseHandle = leases().add(std::move(object));
    try {
        m.leases.insert(leaseHandle);
    } catch (...) {
        leases().remove(leaseHandle);  // its destructor releases the lease: nothing leaks
        throw;
    }
    *outLease = static_cast<ctxc_lease_t*>(leaseHandle);
    return CTXC_OK;
}

// The common shape of the acquires: outputs cleared first, then manager, length and policy checked, then
// `acquire(manager, policy)` runs and its result is reported.
template <class Acquire>
ctxc_status_t acquireChecked(ctxc_manager_t* handle, int32_t inputTokenCount, int32_t lookupPolicyValue,
                             ctxc_acquire_result_t* outResult, ctxc_lease_t** outLease, Acquire&& acquire) {
    requireOut(outLease, "out_lease") = nullptr;
    ctxc_acquire_result_t& result = requireSized(outResult, "out_result");
    ManagerObject& m = requireManager(handle);
    requireNonNegative(inputTokenCount, "input_token_count");
    ContextCacheLookupPolicy const policy = lookupPolicy(lookupPolicyValue);
    return finishAcquire(handle, m, acquire(*m.manager, policy), result, outLease);
}

template <class Acquire>
ctxc_status_t acquireWith(char const* function, ctxc_manager_t* handle, int32_t inputTokenCount,
                          int32_t lookupPolicyValue, ctxc_acquire_result_t* outResult, ctxc_lease_t** outLease,
                          Acquire&& acquire) noexcept {
    return guard(function, [&] {
        return acquireChecked(handle, inputTokenCount, lookupPolicyValue, outResult, outLease, acquire);
    });
}

// The pages view lives in the lease the call published: a caller copying it is not disturbed by a call on
// another lease.
void fillPublishResult(LeaseObject& l, PublishResult r, ctxc_publish_result_t& out) {
    l.publishedPages = std::move(r.canonicalBasePages);
    out.status = static_cast<int32_t>(r.status);
    out.record = r.record.value_or(kNoRecord);
    out.published_base_full_block_count = r.publishedBaseFullBlockCount;
    out.canonical_base_pages = l.publishedPages.data();
    out.canonical_base_page_count = l.publishedPages.size();
}

std::vector<HybridCheckpointCandidate> toCandidates(ctxc_hybrid_candidate_t const* candidates, size_t count) {
    requireArray(candidates, count, "candidates");
    std::vector<HybridCheckpointCandidate> out(count);
    for (size_t i = 0; i < count; ++i)
        out[i] = HybridCheckpointCandidate{candidates[i].exact_length, toHash(candidates[i].exact_prefix_digest)};
    return out;
}

HybridSnapshotReservation toReservation(ctxc_hybrid_snapshot_reservation_t const& r) {
    HybridSnapshotReservation out;
    out.recurrentSnapshotSlot = r.recurrent_snapshot_slot;
    if (r.partial_kv_snapshot_slot >= 0) out.partialKvSnapshotSlot = r.partial_kv_snapshot_slot;
    else if (r.partial_kv_snapshot_slot != -1) invalidArgument("partial_kv_snapshot_slot must be >= 0 or -1 (none)");
    if (r.recurrent_snapshot_slot < 0) invalidArgument("recurrent_snapshot_slot is negative");
    return out;
}

BlockTokenSpan inputTokens(int32_t const* tokens, size_t count) {
    requireBytes(tokens, count, "tokens");
    return {tokens, count};
}

using PublishCheckpointFn = PublishResult (ContextCacheManager::*)(CacheRequestLease&, HybridPublishRequest const&);

// A publication's identity for its events, as views of the caller's ctxc_kv_event_keys_t (NULL: none). The media
// views live in `media`; the manager checks their order and shape (CTXC_E_CONTRACT).
KvEventKeys inputEventKeys(ctxc_kv_event_keys_t const* keys, std::vector<KvEventMedia>& media) {
    if (!keys) return {};
    ctxc_kv_event_keys_t const& k = requireSized(keys, "event_keys");
    requireBytes(k.lora_name, k.lora_name_length, "event_keys->lora_name");
    requireArray(k.media, k.media_count, "event_keys->media");
    media.reserve(k.media_count);
    for (size_t i = 0; i < k.media_count; ++i) {
        ctxc_kv_event_media_t const& m = k.media[i];
        requireBytes(m.identifier, m.identifier_length,
                     ("event_keys->media[" + std::to_string(i) + "].identifier").c_str());
        media.push_back({{m.identifier, m.identifier_length}, m.first_token, m.token_count});
    }
    return {{k.lora_name, k.lora_name_length}, media.data(), media.size()};
}

// What one publish call publishes besides the lease, hashes and tokens: a resident state length (the plain
// publication, checkpointed NULL) or a checkpoint and its snapshots (ContextCacheManager::publishHybrid or
// publishHybridMtp as checkpointed).
struct Publication {
    int32_t residentStateLength = 0;
    ctxc_hybrid_checkpoint_key_t const* checkpoint = nullptr;
    ctxc_hybrid_snapshot_reservation_t const* snapshots = nullptr;
    PublishCheckpointFn checkpointed = nullptr;
};

// The one body of the six publish calls (plain, hybrid and Hybrid+MTP, each with or without the prompt's tokens
// and identity; those without pass neither). The checks run in one order per publication: a checkpoint
// publication checks the tokens and the event keys first, then out_result, the manager, the live lease,
// checkpoint and snapshots; the plain one checks out_result, the manager, the live lease, resident_state_length
// and then the tokens and the event keys.
ctxc_status_t publishWith(char const* function, ctxc_manager_t* manager, ctxc_lease_t* lease,
                          ctxc_hash128_t const* hashes, size_t count, int32_t const* tokenIds, size_t tokenCount,
                          ctxc_kv_event_keys_t const* eventKeys, Publication const& p,
                          ctxc_publish_result_t* outResult) noexcept {
    return guard(function, [&] {
        BlockTokenSpan tokens;
        std::vector<KvEventMedia> media;
        KvEventKeys keys;
        if (p.checkpointed) {
            tokens = inputTokens(tokenIds, tokenCount);
            keys = inputEventKeys(eventKeys, media);
        }
        ctxc_publish_result_t& out = requireSized(outResult, "out_result");
        ManagerObject& m = requireManager(manager);
        LeaseObject& l = requireLiveLease(lease, manager);
        if (!p.checkpointed) {
            requireNonNegative(p.residentStateLength, "resident_state_length");
            tokens = inputTokens(tokenIds, tokenCount);
            keys = inputEventKeys(eventKeys, media);
            fillPublishResult(l,
                              m.manager->publish(l.lease, {inputHashes(hashes, count), p.residentStateLength, tokens,
                                                           keys, l.retention ? &*l.retention : nullptr, l.growth}),
                              out);
            return;
        }
        if (!p.checkpoint) invalidArgument("checkpoint is NULL");
        if (!p.snapshots) invalidArgument("snapshots is NULL");
        HybridCheckpointKey const key{toHash(p.checkpoint->exact_prefix_digest), p.checkpoint->exact_length};
        fillPublishResult(
            l,
            (m.manager.get()->*p.checkpointed)(l.lease, {inputHashes(hashes, count), key, toReservation(*p.snapshots),
                                                         tokens, keys, l.retention ? &*l.retention : nullptr}),
            out);
    });
}

}  // namespace

extern "C" {

CTXC_API void ctxc_manager_options_init(ctxc_manager_options_t* options) {
    if (!initSized(options)) return;
    options->page_size = 128;
    options->max_records = 1024;
}

CTXC_API ctxc_status_t ctxc_manager_create(const ctxc_manager_options_t* options, ctxc_manager_t** out_manager) {
    return guard(__func__, [&] {
        requireOut(out_manager, "out_manager") = nullptr;
        ctxc_manager_options_t const& o = requireSized(options, "options");
        if (o.page_size <= 0)
            invalidArgument("options->page_size must be positive (got " + std::to_string(o.page_size) + ")");
        requireNonNegative(o.capacities.base_kv_pages, "options->capacities.base_kv_pages");
        requireNonNegative(o.capacities.draft_kv_pages, "options->capacities.draft_kv_pages");
        requireNonNegative(o.capacities.recurrent_snapshot_slots, "options->capacities.recurrent_snapshot_slots");
        requireNonNegative(o.capacities.partial_kv_snapshot_slots, "options->capacities.partial_kv_snapshot_slots");
        requireNonNegative(o.max_records, "options->max_records");
        ResourceDemand const capacities{o.capacities.base_kv_pages, o.capacities.draft_kv_pages,
                                        o.capacities.recurrent_snapshot_slots, o.capacities.partial_kv_snapshot_slots};
        auto object = std::make_unique<ManagerObject>();
        object->manager = std::make_unique<ContextCacheManager>(
            o.page_size, capacities, o.max_records, evictionPolicyOf(o.eviction_policy, "options->eviction_policy"));
        *out_manager = static_cast<ctxc_manager_t*>(managers().add(std::move(object)));
    });
}

CTXC_API ctxc_status_t ctxc_manager_destroy(ctxc_manager_t* manager) {
    return guard(__func__, [&] {
        if (!manager) return CTXC_OK;
        std::unique_ptr<ManagerObject> m = managers().remove(manager);
        if (!m) invalidHandle("manager is not a live ctxc_manager_t (destroyed, or not a manager handle)");
        size_t orphaned = 0;
        for (void const* leaseHandle : m->leases) {
            LeaseObject* lease = leases().find(leaseHandle);
            if (!lease) continue;
            if (lease->state == CTXC_LEASE_LIVE) ++orphaned;
            lease->state = CTXC_LEASE_ORPHANED;
        }
        m.reset();  // the manager detaches its remaining leases: they never touch it again
        if (orphaned > 0)
            throw ApiError(CTXC_E_LEASES_OUTSTANDING,
                           "destroyed with " + std::to_string(orphaned) +
                               " live lease(s); they are orphaned and must still be destroyed");
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_manager_acquire_vanilla(ctxc_manager_t* manager, const ctxc_hash128_t* hashes, size_t count,
                                                    int32_t input_token_count, int32_t lookup_policy,
                                                    ctxc_acquire_result_t* out_result, ctxc_lease_t** out_lease) {
    return acquireWith(__func__, manager, input_token_count, lookup_policy, out_result, out_lease,
                       [&](ContextCacheManager& m, ContextCacheLookupPolicy policy) {
        return m.acquireVanilla(inputHashes(hashes, count), input_token_count, policy);
    });
}

CTXC_API ctxc_status_t ctxc_manager_acquire_hybrid(ctxc_manager_t* manager, const ctxc_hybrid_candidate_t* candidates,
                                                   size_t candidate_count, const ctxc_hash128_t* hashes, size_t count,
                                                   int32_t input_token_count, int32_t has_attention,
                                                   int32_t lookup_policy, ctxc_acquire_result_t* out_result,
                                                   ctxc_lease_t** out_lease) {
    return acquireWith(__func__, manager, input_token_count, lookup_policy, out_result, out_lease,
                       [&](ContextCacheManager& m, ContextCacheLookupPolicy policy) {
        bool const attention = requireBool(has_attention, "has_attention");
        return m.acquireHybrid(toCandidates(candidates, candidate_count), inputHashes(hashes, count), input_token_count,
                               attention, policy);
    });
}

CTXC_API ctxc_status_t ctxc_manager_acquire_hybrid_mtp(ctxc_manager_t* manager,
                                                       const ctxc_hybrid_candidate_t* candidates,
                                                       size_t candidate_count, const ctxc_hash128_t* hashes,
                                                       size_t count, int32_t input_token_count, int32_t lookup_policy,
                                                       ctxc_acquire_result_t* out_result, ctxc_lease_t** out_lease) {
    return acquireWith(__func__, manager, input_token_count, lookup_policy, out_result, out_lease,
                       [&](ContextCacheManager& m, ContextCacheLookupPolicy policy) {
        return m.acquireHybridMtp(toCandidates(candidates, candidate_count), inputHashes(hashes, count),
                                  input_token_count, policy);
    });
}

CTXC_API ctxc_status_t ctxc_manager_acquire_spec(ctxc_manager_t* manager, const ctxc_hash128_t* hashes, size_t count,
                                                 int32_t input_token_count, int32_t lookup_policy,
                                                 ctxc_acquire_result_t* out_result, ctxc_lease_t** out_lease) {
    return acquireWith(__func__, manager, input_token_count, lookup_policy, out_result, out_lease,
                       [&](ContextCacheManager& m, ContextCacheLookupPolicy policy) {
        return m.acquireSpec(inputHashes(hashes, count), input_token_count, policy);
    });
}

CTXC_API ctxc_status_t ctxc_manager_probe_vanilla(const ctxc_manager_t* manager, const ctxc_hash128_t* hashes,
                                                  size_t count, int32_t input_token_count, int32_t* out_pages,
                                                  size_t out_capacity, ctxc_reuse_probe_t* out_probe) {
    return guard(__func__, [&] {
        ctxc_reuse_probe_t& out = requireSized(out_probe, "out_probe");
        ManagerObject& m = requireManager(manager);
        requireNonNegative(input_token_count, "input_token_count");
        ReuseProbe const probe = m.manager->probeVanilla(inputHashes(hashes, count), input_token_count);
        out.kind = static_cast<int32_t>(probe.kind);
        out.matched_token_length = probe.matchedTokenLength;
        out.reuse_token_length = probe.reuseTokenLength;
        out.page_count = probe.pages.size();
        return copyOut(probe.pages, out_pages, out_capacity, &out.page_count, "out_pages", "pages");
    });
}

CTXC_API ctxc_status_t ctxc_manager_hybrid_candidate_lengths(const ctxc_manager_t* manager, int32_t input_token_count,
                                                             int32_t* out_lengths, size_t out_capacity,
                                                             size_t* out_count) {
    return guard(__func__, [&] {
        ManagerObject& m = requireManager(manager);
        requireNonNegative(input_token_count, "input_token_count");
        return copyOut(m.manager->hybridCandidateLengths(input_token_count), out_lengths, out_capacity, out_count,
                       "out_lengths");
    });
}

CTXC_API ctxc_status_t ctxc_manager_hybrid_candidate_lengths_for(const ctxc_manager_t* manager,
                                                                 int32_t input_token_count,
                                                                 const ctxc_hash128_t* hashes, size_t count,
                                                                 int32_t* out_lengths, size_t out_capacity,
                                                                 size_t* out_count) {
    return guard(__func__, [&] {
        ManagerObject& m = requireManager(manager);
        requireNonNegative(input_token_count, "input_token_count");
        BlockHashSpan const input = inputHashes(hashes, count);
        return copyOut(m.manager->hybridCandidateLengths(input_token_count, input), out_lengths, out_capacity,
                       out_count, "out_lengths");
    });
}

CTXC_API ctxc_status_t ctxc_manager_grow_base_pages(ctxc_manager_t* manager, ctxc_lease_t* lease, int32_t count,
                                                    int32_t* out_ok) {
    return guard(__func__, [&] {
        int32_t& ok = requireOut(out_ok, "out_ok");
        ok = 0;
        ManagerObject& m = requireManager(manager);
        LeaseObject& l = requireLiveLease(lease, manager);
        requireNonNegative(count, "count");
        ok = m.manager->growBasePages(l.lease, count) ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_manager_grow_spec_pages(ctxc_manager_t* manager, ctxc_lease_t* lease, int32_t base_count,
                                                    int32_t draft_count, int32_t* out_ok) {
    return guard(__func__, [&] {
        int32_t& ok = requireOut(out_ok, "out_ok");
        ok = 0;
        ManagerObject& m = requireManager(manager);
        LeaseObject& l = requireLiveLease(lease, manager);
        requireNonNegative(base_count, "base_count");
        requireNonNegative(draft_count, "draft_count");
        ok = m.manager->growSpecPages(l.lease, base_count, draft_count) ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_manager_reserve_hybrid_snapshots(ctxc_manager_t* manager, ctxc_lease_t* lease,
                                                             int32_t needs_partial_kv_snapshot,
                                                             ctxc_hybrid_snapshot_reservation_t* out_reservation,
                                                             int32_t* out_ok) {
    return guard(__func__, [&] {
        int32_t& ok = requireOut(out_ok, "out_ok");
        ok = 0;
        ctxc_hybrid_snapshot_reservation_t& out = requireOut(out_reservation, "out_reservation");
        out = ctxc_hybrid_snapshot_reservation_t{-1, -1};
        ManagerObject& m = requireManager(manager);
        LeaseObject& l = requireLiveLease(lease, manager);
        bool const partial = requireBool(needs_partial_kv_snapshot, "needs_partial_kv_snapshot");
        std::optional<HybridSnapshotReservation> r = m.manager->reserveHybridSnapshots(l.lease, partial);
        if (!r) return CTXC_OK;
        out.recurrent_snapshot_slot = r->recurrentSnapshotSlot;
        out.partial_kv_snapshot_slot = r->partialKvSnapshotSlot.value_or(-1);
        ok = 1;
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_manager_release_restored_hybrid_snapshots(ctxc_manager_t* manager, ctxc_lease_t* lease) {
    return guard(__func__, [&] {
        ManagerObject& m = requireManager(manager);
        m.manager->releaseRestoredHybridSnapshots(requireLiveLease(lease, manager).lease);
    });
}

CTXC_API ctxc_status_t ctxc_manager_retire_hybrid_snapshot_reservation(
    ctxc_manager_t* manager, ctxc_lease_t* lease, const ctxc_hybrid_snapshot_reservation_t* reservation) {
    return guard(__func__, [&] {
        ManagerObject& m = requireManager(manager);
        LeaseObject& l = requireLiveLease(lease, manager);
        if (!reservation) invalidArgument("reservation is NULL");
        m.manager->retireHybridSnapshotReservation(l.lease, toReservation(*reservation));
    });
}

CTXC_API ctxc_status_t ctxc_manager_publish(ctxc_manager_t* manager, ctxc_lease_t* lease, const ctxc_hash128_t* hashes,
                                            size_t count, int32_t resident_state_length,
                                            ctxc_publish_result_t* out_result) {
    return ctxc_manager_publish_with_tokens(manager, lease, hashes, count, resident_state_length, nullptr, 0, nullptr,
                                            out_result);
}

CTXC_API ctxc_status_t ctxc_manager_publish_with_tokens(ctxc_manager_t* manager, ctxc_lease_t* lease,
                                                        const ctxc_hash128_t* hashes, size_t count,
                                                        int32_t resident_state_length, const int32_t* tokens,
                                                        size_t token_count, const ctxc_kv_event_keys_t* event_keys,
                                                        ctxc_publish_result_t* out_result) {
    Publication p;
    p.residentStateLength = resident_state_length;
    return publishWith("ctxc_manager_publish", manager, lease, hashes, count, tokens, token_count, event_keys, p,
                       out_result);
}

CTXC_API ctxc_status_t ctxc_manager_publish_hybrid(ctxc_manager_t* manager, ctxc_lease_t* lease,
                                                   const ctxc_hash128_t* hashes, size_t count,
                                                   const ctxc_hybrid_checkpoint_key_t* checkpoint,
                                                   const ctxc_hybrid_snapshot_reservation_t* snapshots,
                                                   ctxc_publish_result_t* out_result) {
    return ctxc_manager_publish_hybrid_with_tokens(manager, lease, hashes, count, checkpoint, snapshots, nullptr, 0,
                                                   nullptr, out_result);
}

CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_with_tokens(ctxc_manager_t* manager, ctxc_lease_t* lease,
                                                               const ctxc_hash128_t* hashes, size_t count,
                                                               const ctxc_hybrid_checkpoint_key_t* checkpoint,
                                                               const ctxc_hybrid_snapshot_reservation_t* snapshots,
                                                               const int32_t* tokens, size_t token_count,
                                                               const ctxc_kv_event_keys_t* event_keys,
                                                               ctxc_publish_result_t* out_result) {
    Publication const p{0, checkpoint, snapshots, &ContextCacheManager::publishHybrid};
    return publishWith("ctxc_manager_publish_hybrid", manager, lease, hashes, count, tokens, token_count, event_keys, p,
                       out_result);
}

CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_mtp(ctxc_manager_t* manager, ctxc_lease_t* lease,
                                                       const ctxc_hash128_t* hashes, size_t count,
                                                       const ctxc_hybrid_checkpoint_key_t* checkpoint,
                                                       const ctxc_hybrid_snapshot_reservation_t* snapshots,
                                                       ctxc_publish_result_t* out_result) {
    return ctxc_manager_publish_hybrid_mtp_with_tokens(manager, lease, hashes, count, checkpoint, snapshots, nullptr, 0,
                                                       nullptr, out_result);
}

CTXC_API ctxc_status_t ctxc_manager_publish_hybrid_mtp_with_tokens(ctxc_manager_t* manager, ctxc_lease_t* lease,
                                                                   const ctxc_hash128_t* hashes, size_t count,
                                                                   const ctxc_hybrid_checkpoint_key_t* checkpoint,
                                                                   const ctxc_hybrid_snapshot_reservation_t* snapshots,
                                                                   const int32_t* tokens, size_t token_count,
                                                                   const ctxc_kv_event_keys_t* event_keys,
                                                                   ctxc_publish_result_t* out_result) {
    Publication const p{0, checkpoint, snapshots, &ContextCacheManager::publishHybridMtp};
    return publishWith("ctxc_manager_publish_hybrid_mtp", manager, lease, hashes, count, tokens, token_count,
                       event_keys, p, out_result);
}

CTXC_API ctxc_status_t ctxc_manager_clear(ctxc_manager_t* manager) {
    return guard(__func__, [&] { requireManager(manager).manager->clear(); });
}

CTXC_API ctxc_status_t ctxc_manager_evict_record(ctxc_manager_t* manager, uint64_t record) {
    return guard(__func__, [&] { requireManager(manager).manager->evictRecord(record); });
}

CTXC_API ctxc_status_t ctxc_manager_metrics(const ctxc_manager_t* manager, ctxc_manager_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        ctxc_manager_metrics_t& out = requireSized(out_metrics, "out_metrics");
        ContextCacheManagerMetrics const& mm = requireManager(manager).manager->metrics();
        out.evicted_records = mm.evictedRecords;
        out.reclaimed_base_kv_pages = mm.reclaimedBaseKvPages;
        out.reclaimed_draft_kv_pages = mm.reclaimedDraftKvPages;
        out.reclaimed_recurrent_snapshots = mm.reclaimedRecurrentSnapshots;
        out.reclaimed_partial_kv_snapshots = mm.reclaimedPartialKvSnapshots;
        out.trimmed_records = mm.trimmedRecords;
        out.trimmed_blocks = mm.trimmedBlocks;
        out.prefix_cache_queries = mm.prefixCacheQueries;
        out.prefix_cache_hits = mm.prefixCacheHits;
        out.superseded_records = mm.supersededRecords;
    });
}

CTXC_API ctxc_status_t ctxc_manager_page_size(const ctxc_manager_t* manager, int32_t* out_page_size) {
    return getInto(__func__, out_page_size, "out_page_size",
                   [&] { return requireManager(manager).manager->pageSize(); });
}

CTXC_API ctxc_status_t ctxc_manager_pool_counts(const ctxc_manager_t* manager, int32_t resource_type, int32_t* out_free,
                                                int32_t* out_capacity) {
    return guard(__func__, [&] {
        ResourcePools const& pools = requireManager(manager).manager->pools();
        ResourceType const type = resourceType(resource_type, "resource_type");
        if (out_free) *out_free = pools.freeCount(type);
        if (out_capacity) *out_capacity = pools.capacity(type);
    });
}

CTXC_API ctxc_status_t ctxc_manager_acquirable_count(const ctxc_manager_t* manager, int32_t resource_type,
                                                     int32_t* out_count) {
    return guard(__func__, [&] {
        int32_t& out = requireOut(out_count, "out_count");
        ResourcePools const& pools = requireManager(manager).manager->pools();
        out = pools.acquirableCount(resourceType(resource_type, "resource_type"));
    });
}

CTXC_API ctxc_status_t ctxc_manager_record_count(const ctxc_manager_t* manager, size_t* out_count) {
    return getInto(__func__, out_count, "out_count", [&] { return requireManager(manager).manager->records().size(); });
}

CTXC_API ctxc_status_t ctxc_manager_base_index_size(const ctxc_manager_t* manager, size_t* out_size) {
    return getInto(__func__, out_size, "out_size", [&] { return requireManager(manager).manager->baseIndex().size(); });
}

CTXC_API ctxc_status_t ctxc_manager_live_lease_count(const ctxc_manager_t* manager, size_t* out_count) {
    return getInto(__func__, out_count, "out_count", [&] { return requireManager(manager).manager->liveLeaseCount(); });
}

CTXC_API ctxc_status_t ctxc_manager_metadata_bytes(const ctxc_manager_t* manager, size_t* out_bytes) {
    return getInto(__func__, out_bytes, "out_bytes", [&] { return requireManager(manager).manager->metadataBytes(); });
}

CTXC_API ctxc_status_t ctxc_manager_check_invariants(const ctxc_manager_t* manager) {
    return guard(__func__, [&] { requireManager(manager).manager->checkInvariants(); });
}

}  // extern "C"
