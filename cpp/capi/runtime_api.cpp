// C ABI: the runtime layer (ContextCacheCoordinator and the ManagedKVCacheRequest facade) over the device objects'
// handles. Contract: include/ctxcache/c/runtime.h.
//
// A CoordinatorObject owns its coordinator and shares ownership of every device object it was built over (and of
// what those were built from), so the device handles may be destroyed in any order; it knows the handles of its
// requests, so that destroying it orphans them (a later use is CTXC_E_INVALID_HANDLE) instead of leaving them to
// reach a destroyed coordinator. A KvRequestObject owns one facade and backs the views its getters return; one on the
// bounded-SWA backend remembers its manager's handle instead and checks it on every call (capi/swa_handles.h).
// Threading: the handle tables are locked; the objects follow the coordinator's single-writer contract: a
// coordinator and its requests are in the family of its device objects' backend (or in a family of their own when
// it has none), a request on the bounded-SWA backend in its manager's (capi/call_family.h).
#include "ctxcache/c/runtime.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "api_support.h"
#include "ctxcache/runtime/context_cache_coordinator.h"
#include "ctxcache/runtime/managed_kv_cache_request.h"
#include "device_handles.h"
#include "handle_table.h"
#include "handles.h"
#include "retention_support.h"
#include "runtime_conversions.h"
#include "store_link_options.h"
#include "swa_handles.h"

using namespace ctxcache;
using namespace ctxcache::capi;
using namespace ctxcache::runtime;

namespace {

struct CoordinatorObject {
    std::shared_ptr<CallFamily> family;  // its device objects' backend's, or its own
    // The device objects and their backends (declared first: they outlive the coordinator). Each backend is kept
    // before the objects built on it, so they are released last to first: an object never outlives its backend.
    std::vector<std::shared_ptr<void>> keep;
    std::unique_ptr<ContextCacheCoordinator> coordinator;
    std::unordered_set<void const*> requests;  // handles of this coordinator's requests not yet destroyed
    KvEventsDrain kvEvents;

    CoordinatorObject() = default;
    CoordinatorObject(CoordinatorObject const&) = delete;
    CoordinatorObject& operator=(CoordinatorObject const&) = delete;
    ~CoordinatorObject() {
        coordinator.reset();
        while (!keep.empty()) keep.pop_back();
    }
};

struct KvRequestObject {
    std::shared_ptr<CallFamily> family;  // its coordinator's or its bounded-SWA manager's
    std::optional<ManagedKVCacheRequest> request;
    void const* coordinatorHandle = nullptr;  // the context-reuse backend's coordinator, or
    void const* swaManagerHandle = nullptr;   // the bounded-SWA backend's manager
    bool orphaned = false;                    // the coordinator was destroyed first
    std::vector<int32_t> basePagesView;  // back ctxc_kv_sequence_info_t's page views
    std::vector<int32_t> draftPagesView;
};

auto& coordinators() { return handleTable<CoordinatorObject, 0xCB>(); }
auto& kvRequests() { return handleTable<KvRequestObject, 0xCC>(); }

}  // namespace

KvEventTarget ctxcache::capi::coordinatorKvEvents(void const* handle) {
    CoordinatorObject* object = coordinators().find(handle);
    if (!object) return {};
    return {&object->coordinator->manager(), &object->kvEvents};
}

namespace {

CoordinatorObject& requireCoordinator(void const* handle) {
    return requireObject(coordinators(), handle, "coordinator");
}

KvRequestObject& requireRequest(void const* handle) {
    KvRequestObject& r = requireObject(kvRequests(), handle, "request");
    if (r.orphaned) invalidHandle("request outlived its coordinator (the coordinator was destroyed first)");
    if (r.swaManagerHandle && !swaManagers().find(r.swaManagerHandle))
        invalidHandle("request outlived its bounded-SWA manager (the manager was destroyed first)");
    return r;
}

ContextCacheRequest& contextOf(KvRequestObject& r, char const* op) {
    ContextCacheRequest* c = r.request->contextRequest();
    if (!c)
        throw ContractError(std::string(op) +
                            ": the request runs on the bounded-SWA backend, which has no context "
                            "reuse (ctxc_kv_request_swa_state reads its windows)");
    return *c;
}

// A facade member answered false: the request's own reason (or, for a context-only member on the SWA backend, the
// backstop's), as CTXC_E_POISONED when its backend is now poisoned (the request was quarantined) and
// CTXC_E_REQUEST_FAILED otherwise.
[[noreturn]] void failed(KvRequestObject& r, char const* backstop = nullptr) {
    bool const poisoned = r.request->hasContextReuse() ? r.request->contextRequest()->coordinator().poisoned()
                                                       : requireSwaManager(r.swaManagerHandle).poisoned();
    bool const backstopAnswered = backstop && !r.request->hasContextReuse();
    throw ApiError(poisoned ? CTXC_E_POISONED : CTXC_E_REQUEST_FAILED,
                   backstopAnswered ? std::string(backstop) : r.request->lastError());
}

void answer(KvRequestObject& r, bool ok, char const* backstop = nullptr) {
    if (!ok) failed(r, backstop);
}

// The options both backends read, checked and converted.
struct BeginOptions {
    GenerationRequest request;
    bool speculative = false;
    DecodingTokenStateContract contract = DecodingTokenStateContract::kCommittedPlusLookahead;
    ContextCacheCommitPolicy commit = ContextCacheCommitPolicy::kIncludingGeneratedTokens;
    DecodingKvHeadroom headroom;
    std::vector<int32_t> mediaTokenIds;
};

template <class E>
E enumValue(int32_t value, int32_t last, char const* name, char const* constants) {
    if (value < 0 || value > last)
        invalidArgument(std::string(name) + " " + std::to_string(value) + " is not a " + constants + " value");
    return static_cast<E>(value);
}

ContextCacheLookupPolicy lookupPolicy(int32_t value, char const* name) {
    return enumValue<ContextCacheLookupPolicy>(value, CTXC_LOOKUP_BYPASS, name, "CTXC_LOOKUP_*");
}

DecodingKvHeadroom headroomOf(ctxc_kv_headroom_t const* h, char const* name) {
    if (!h) return DecodingKvHeadroom{};
    requireNonNegative(h->base_extra_tokens, (std::string(name) + "->base_extra_tokens").c_str());
    requireNonNegative(h->draft_extra_tokens, (std::string(name) + "->draft_extra_tokens").c_str());
    return DecodingKvHeadroom{h->base_extra_tokens, h->draft_extra_tokens};
}

std::vector<int32_t> int32s(int32_t const* values, size_t count, char const* name) {
    requireArray(values, count, name);
    return count ? std::vector<int32_t>(values, values + count) : std::vector<int32_t>{};
}

SequenceRequest sequenceOf(ctxc_sequence_request_t const& s, std::string const& where) {
    SequenceRequest out;
    out.tokenIds = int32s(s.token_ids, s.token_count, (where + ".token_ids").c_str());
    requireBytes(s.lora_name, s.lora_name_length, (where + ".lora_name").c_str());
    if (s.lora_name_length) out.loraName.assign(s.lora_name, s.lora_name_length);
    out.media = mediaItemsOf(s.media, s.media_count, where);
    if (s.lookup_policy != CTXC_INHERIT_LOOKUP_POLICY)
        out.lookupPolicy = lookupPolicy(s.lookup_policy, (where + ".lookup_policy").c_str());
    if (s.retention) out.retention = toRetentionSpec(*s.retention, (where + ".retention").c_str());
    return out;
}

ResidentRef residentOf(ctxc_resident_ref_t const& r) { return ResidentRef{r.slot, r.epoch}; }

// The engine's batch as the runtime's context. Malformed arrays are CTXC_E_INVALID_ARGUMENT; whether the context
// matches the request is the runtime's to say (CTXC_E_CONTRACT).
DecodingInferenceContext contextOf(ctxc_decoding_context_t const* context) {
    ctxc_decoding_context_t const& c = requireSized(context, "context");
    requireNonNegative(c.active_batch_size, "context->active_batch_size");
    size_t const n = static_cast<size_t>(c.active_batch_size);
    requireArray(c.token_ids, n, "context->token_ids");
    DecodingInferenceContext out;
    out.activeBatchSize = c.active_batch_size;
    out.rawInputLengths = int32s(c.raw_input_lengths, n, "context->raw_input_lengths");
    out.generatedLengths = int32s(c.generated_lengths, n, "context->generated_lengths");
    std::vector<int32_t> const counts = int32s(c.token_counts, n, "context->token_counts");
    std::vector<int32_t> const status = int32s(c.status, n, "context->status");
    out.tokenIds.resize(n);
    out.status.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        std::string const row = "[" + std::to_string(i) + "]";
        requireNonNegative(counts[i], ("context->token_counts" + row).c_str());
        requireArray(c.token_ids[i], static_cast<size_t>(counts[i]), ("context->token_ids" + row).c_str());
        out.tokenIds[i] = TokenSpan(c.token_ids[i], static_cast<size_t>(counts[i]));  // read in place
        out.status.push_back(enumValue<SequenceStatus>(status[i], CTXC_SEQUENCE_FAILED,
                                                       ("context->status" + row).c_str(), "CTXC_SEQUENCE_*"));
    }
    if (c.resident_refs) {
        out.residentRefs.reserve(n);
        for (size_t i = 0; i < n; ++i) out.residentRefs.push_back(residentOf(c.resident_refs[i]));
    }
    return out;
}

TensorView tensorOf(ctxc_tensor_view_t const* view, char const* name) {
    if (!view) invalidArgument(std::string(name) + " is NULL");
    requireArray(view->shape, view->rank, (std::string(name) + "->shape").c_str());
    TensorView out;
    out.data = view->data;
    out.dtype =
        enumValue<ScalarType>(view->dtype, CTXC_SCALAR_UINT8, (std::string(name) + "->dtype").c_str(), "CTXC_SCALAR_*");
    out.device = view->device;
    for (size_t i = 0; i < view->rank; ++i) {
        requireNonNegative(view->shape[i], (std::string(name) + "->shape[" + std::to_string(i) + "]").c_str());
        out.shape.push_back(view->shape[i]);
    }
    return out;
}

// A device object named in ctxc_coordinator_resources_t: NULL, or a live handle whose objects the coordinator keeps
// (and whose backend's family the coordinator joins).
template <class T, uint8_t Tag, class Get>
auto resource(HandleTable<T, Tag>& table, void const* handle, char const* name, CoordinatorObject& c, Get&& get)
    -> decltype(get(std::declval<T&>()).get()) {
    if (!handle) return nullptr;
    T& object = requireObject(table, handle, name);
    if (!c.family) c.family = object.family;
    std::vector<std::shared_ptr<void>>& keep = c.keep;
    keep.push_back(object.backend);
    auto const& shared = get(object);
    keep.push_back(shared);
    return shared.get();
}

std::vector<int32_t> commonLengths(int32_t const* values, size_t count) {
    return int32s(values, count, "common_state_lengths");
}

// begin's arguments, checked (CTXC_E_INVALID_ARGUMENT) and converted; whether they suit the backend is the
// facade's to say (CTXC_E_CONTRACT).
BeginOptions beginOptions(ctxc_sequence_request_t const* sequences, size_t sequenceCount,
                          ctxc_decoding_context_t const* context, ctxc_kv_request_options_t const* options) {
    ctxc_kv_request_options_t const& o = requireSized(options, "options");
    requireArray(sequences, sequenceCount, "sequences");
    BeginOptions out;
    out.request.lookupPolicy = lookupPolicy(o.lookup_policy, "options->lookup_policy");
    out.request.sequences.reserve(sequenceCount);
    for (size_t i = 0; i < sequenceCount; ++i)
        out.request.sequences.push_back(sequenceOf(sequences[i], "sequences[" + std::to_string(i) + "]"));
    ctxc_decoding_context_t const& c = requireSized(context, "context");
    if (!c.resident_refs && c.active_batch_size > 0)
        invalidArgument("context->resident_refs is NULL (begin reads one per row)");
    out.speculative = requireBool(o.speculative, "options->speculative");
    out.contract = enumValue<DecodingTokenStateContract>(o.token_state_contract, CTXC_TOKEN_STATE_FULLY_COMMITTED,
                                                         "options->token_state_contract", "CTXC_TOKEN_STATE_*");
    out.commit = enumValue<ContextCacheCommitPolicy>(o.commit_policy, CTXC_COMMIT_PREFILL_STATE_ONLY,
                                                     "options->commit_policy", "CTXC_COMMIT_*");
    out.headroom = headroomOf(&o.headroom, "options->headroom");
    out.mediaTokenIds = int32s(o.media_token_ids, o.media_token_id_count, "options->media_token_ids");
    return out;
}

// The one body of ctxc_kv_request_begin and ctxc_kv_request_begin_swa, once the backend's handle is checked: on
// a coordinator (c set, swa NULL) or a bounded-SWA manager (the other way round), whose C handle is backendHandle.
// The request is in its backend's family; a coordinator's also enters its set of requests (destroying the
// coordinator orphans what is still there), and is removed again if that fails: nothing leaks.
ctxc_kv_request_t* beginRequest(CoordinatorObject* c, SwaManagerObject* swa, void const* backendHandle,
                                ctxc_sequence_request_t const* sequences, size_t sequenceCount,
                                ctxc_decoding_context_t const* context, ctxc_kv_request_options_t const* options) {
    ContextCacheCoordinator* const coordinator = c ? c->coordinator.get() : nullptr;
    runtime::BoundedSwaKVPageManager* const manager = c ? nullptr : swa->manager.get();
    BeginOptions const o = beginOptions(sequences, sequenceCount, context, options);
    DecodingInferenceContext const ctx = contextOf(context);
    std::optional<ManagedKVCacheRequest> begun =
        ManagedKVCacheRequest::begin(coordinator, manager, o.request, ctx, o.speculative, o.headroom, o.contract,
                                     o.commit, o.mediaTokenIds, options->stream);
    if (!begun) {
        bool const poisoned = coordinator ? coordinator->poisoned() : manager->poisoned();
        throw ApiError(poisoned ? CTXC_E_POISONED : CTXC_E_REQUEST_FAILED,
                       coordinator ? coordinator->lastFailure() : manager->lastFailure());
    }
    auto object = std::make_unique<KvRequestObject>();
    object->family = c ? c->family : swa->family;
    object->request.emplace(std::move(*begun));
    (c ? object->coordinatorHandle : object->swaManagerHandle) = backendHandle;
    void* handle = kvRequests().add(std::move(object));
    if (c) {
        try {
            c->requests.insert(handle);
        } catch (...) {
            kvRequests().remove(handle);  // its destructor abandons the request: nothing leaks
            throw;
        }
    }
    return static_cast<ctxc_kv_request_t*>(handle);
}

}  // namespace

std::vector<MediaItem> ctxcache::capi::mediaItemsOf(ctxc_media_item_t const* items, size_t count,
                                                    std::string const& where) {
    requireArray(items, count, (where + ".media").c_str());
    std::vector<MediaItem> out;
    out.reserve(count);
    for (size_t k = 0; k < count; ++k) {
        ctxc_media_item_t const& m = items[k];
        std::string const item = where + ".media[" + std::to_string(k) + "]";
        requireBytes(m.bytes, m.byte_count, (item + ".bytes").c_str());
        requireNonNegative(m.first_token, (item + ".first_token").c_str());
        requireNonNegative(m.token_count, (item + ".token_count").c_str());
        MediaItem media;
        media.modality = enumValue<uint8_t>(m.modality, CTXC_MEDIA_VIDEO, (item + ".modality").c_str(), "CTXC_MEDIA_*");
        if (m.byte_count) media.bytes.assign(m.bytes, m.bytes + m.byte_count);
        media.firstToken = m.first_token;
        media.tokenCount = m.token_count;
        out.push_back(std::move(media));
    }
    return out;
}

void ctxcache::capi::fillMetrics(runtime::ContextCacheMetrics const& m, ctxc_context_cache_metrics_t& out) {
    out.admitted_sequences = m.admittedSequences;
    out.hit_sequences = m.hitSequences;
    out.media_aware_sequences = m.mediaAwareSequences;
    out.lookup_bypass_sequences = m.lookupBypassSequences;
    out.forced_cold_sequences = m.forcedColdSequences;
    out.standard_plans = m.standardPlans;
    out.no_reusable_prefix_plans = m.noReusablePrefixPlans;
    out.full_input_rewind_plans = m.fullInputRewindPlans;
    out.matched_tokens = m.matchedTokens;
    out.reused_tokens = m.reusedTokens;
    out.publication_attempts = m.publicationAttempts;
    out.committed_publications = m.committedPublications;
    out.existing_publications = m.existingPublications;
    out.published_endpoints = m.publishedEndpoints;
    out.hybrid_restores = m.hybridRestores;
    out.hybrid_snapshot_pressure_skips = m.hybridSnapshotPressureSkips;
    out.hybrid_capture_synchronizations = m.hybridCaptureSynchronizations;
    out.spec_full_page_replays = m.specFullPageReplays;
    out.spec_pair_publications = m.specPairPublications;
    out.planning_nanoseconds = m.planningNanoseconds;
    out.media_boundary_trims = m.mediaBoundaryTrims;
    out.current_records = m.currentRecords;
    out.base_kv_pages_free = m.baseKvPages.free;
    out.base_kv_pages_capacity = m.baseKvPages.capacity;
    out.draft_kv_pages_free = m.draftKvPages.free;
    out.draft_kv_pages_capacity = m.draftKvPages.capacity;
    out.recurrent_snapshots_free = m.recurrentSnapshots.free;
    out.recurrent_snapshots_capacity = m.recurrentSnapshots.capacity;
    out.partial_kv_snapshots_free = m.partialKvSnapshots.free;
    out.partial_kv_snapshots_capacity = m.partialKvSnapshots.capacity;
    out.evicted_records = m.evictedRecords;
    out.reclaimed_base_kv_pages = m.reclaimedBaseKvPages;
    out.reclaimed_draft_kv_pages = m.reclaimedDraftKvPages;
    out.reclaimed_recurrent_snapshots = m.reclaimedRecurrentSnapshots;
    out.reclaimed_partial_kv_snapshots = m.reclaimedPartialKvSnapshots;
    out.host_loaded_tokens = m.hostLoadedTokens;
    out.host_resident_blocks = m.hostResidentBlocks;
    out.host_written_blocks = m.hostWrittenBlocks;
    out.host_dropped_blocks = m.hostDroppedBlocks;
    out.host_failed_loads = m.hostFailedLoads;
    out.host_failed_writes = m.hostFailedWrites;
    out.host_bytes_to_host = m.hostBytesToHost;
    out.host_bytes_to_device = m.hostBytesToDevice;
    out.store_loaded_tokens = m.storeLoadedTokens;
    out.store_put_blocks = m.storePutBlocks;
    out.store_dropped_puts = m.storeDroppedPuts;
    out.store_failed_puts = m.storeFailedPuts;
    out.store_asked_blocks = m.storeAskedBlocks;
    out.store_fetched_blocks = m.storeFetchedBlocks;
    out.store_failed_loads = m.storeFailedLoads;
    out.store_rejected_loads = m.storeRejectedLoads;
    out.store_late_batches = m.storeLateBatches;
    out.store_breaker_refusals = m.storeBreakerRefusals;
    out.store_wait_micros = m.storeWaitMicros;
}

extern "C" {

// ---- coordinator ------------------------------------------------------------------------------------------

CTXC_API void ctxc_coordinator_resources_init(ctxc_coordinator_resources_t* resources) { initSized(resources); }

CTXC_API void ctxc_coordinator_options_init(ctxc_coordinator_options_t* options) {
    if (!initSized(options)) return;
    ContextCacheConfig const config;
    SpecReuseContract const spec;
    options->max_records = config.maxRecords;
    options->max_batch = config.maxBatch;
    options->page_size = config.pageSize;
    options->hash_algorithm = static_cast<int32_t>(config.hashAlgorithm);
    options->model_state_kind = CTXC_MODEL_ATTENTION_ONLY;
    options->owns_paged_spec_state = spec.ownsPagedSpecState ? 1 : 0;
    options->future_dependency_tokens = spec.futureDependencyTokens;
    options->host_write_policy = CTXC_HOST_WRITE_BACK;
}

CTXC_API ctxc_status_t ctxc_coordinator_create(const ctxc_coordinator_resources_t* resources,
                                               const ctxc_coordinator_options_t* options,
                                               ctxc_coordinator_t** out_coordinator) {
    return guard(__func__, [&] {
        requireOut(out_coordinator, "out_coordinator") = nullptr;
        ctxc_coordinator_resources_t const& r = requireSized(resources, "resources");
        ctxc_coordinator_options_t const& o = requireSized(options, "options");
        requireNonNegative(o.max_records, "options->max_records");
        requireNonNegative(o.max_batch, "options->max_batch");
        requireNonNegative(o.page_size, "options->page_size");
        requireNonNegative(o.future_dependency_tokens, "options->future_dependency_tokens");
        requireBytes(o.hash_key, o.hash_key_length, "options->hash_key");
        ContextCacheConfig config;
        config.maxRecords = o.max_records;
        config.evictionPolicy = evictionPolicyOf(o.eviction_policy, "options->eviction_policy");
        requireNonNegative(o.host_tier_pages, "options->host_tier_pages");
        config.hostTierPages = o.host_tier_pages;
        config.hostWritePolicy =
            hostWritePolicyAs<tier::HostWritePolicy>(o.host_write_policy, "options->host_write_policy");
        if (o.host_store) {
            config.hostStore = storeLinkOptionsOf(o.host_store, "options->host_store", &config.storeModel);
            if (o.host_tier_pages == 0) invalidArgument("options->host_store needs options->host_tier_pages > 0");
        }
        config.maxBatch = o.max_batch;
        config.pageSize = o.page_size;
        config.hashAlgorithm =
            enumValue<HashAlgorithm>(o.hash_algorithm, CTXC_HASH_FNV1A128, "options->hash_algorithm", "CTXC_HASH_*");
        if (o.hash_key_length) config.hashKey.assign(reinterpret_cast<char const*>(o.hash_key), o.hash_key_length);
        ContextCacheDeploymentProfile profile;
        profile.baseStateKind = enumValue<ContextCacheModelStateKind>(o.model_state_kind, CTXC_MODEL_HYBRID,
                                                                      "options->model_state_kind", "CTXC_MODEL_*");
        bool const ownsPaged = requireBool(o.owns_paged_spec_state, "options->owns_paged_spec_state");
        if (requireBool(o.has_spec, "options->has_spec"))
            profile.specReuseContract = SpecReuseContract{ownsPaged, o.future_dependency_tokens};

        auto object = std::make_unique<CoordinatorObject>();
        std::vector<std::shared_ptr<void>>& keep = object->keep;
        auto pool = [](KvPoolObject& p) -> std::shared_ptr<device::KvPagePool> const& { return p.pool; };
        auto table = [](PageTableObject& t) -> std::shared_ptr<device::KvPageTable> const& { return t.table; };
        auto lengths = [](KvLengthsObject& l) -> std::shared_ptr<device::KvLengths> const& { return l.lengths; };
        ContextCachePhysicalResources physical;
        physical.basePool = resource(kvPools(), r.base_pool, "resources->base_pool", *object, pool);
        physical.basePageTable =
            resource(pageTables(), r.base_page_table, "resources->base_page_table", *object, table);
        physical.baseLengths = resource(kvLengths(), r.base_lengths, "resources->base_lengths", *object, lengths);
        physical.draftPool = resource(kvPools(), r.draft_pool, "resources->draft_pool", *object, pool);
        physical.draftPageTable =
            resource(pageTables(), r.draft_page_table, "resources->draft_page_table", *object, table);
        physical.draftLengths = resource(kvLengths(), r.draft_lengths, "resources->draft_lengths", *object, lengths);
        physical.residentState =
            resource(residentStates(), r.resident_state, "resources->resident_state", *object,
                     [](ResidentStateObject& s) -> std::shared_ptr<device::ResidentState> const& { return s.state; });
        physical.snapshots = resource(snapshotStorages(), r.snapshots, "resources->snapshots", *object,
                                      [&](SnapshotStorageObject& s) -> std::shared_ptr<device::SnapshotStorage> const& {
            keep.push_back(s.state);  // the storage reads them through plain pointers
            keep.push_back(s.base);
            keep.push_back(s.draft);
            return s.storage;
        });
        if (!object->family) object->family = newFamily("coordinator (a coordinator and its requests)");
        ContextCacheCoordinator::StreamSynchronizer synchronizer;
        if (o.synchronize) {
            ctxc_synchronize_fn const fn = o.synchronize;
            void* const user = o.synchronize_user;
            synchronizer = [fn, user](StreamHandle stream) { return fn(user, stream) == 0; };
        }
        object->coordinator = std::make_unique<ContextCacheCoordinator>(config, profile, physical, synchronizer);
        *out_coordinator = addObject<ctxc_coordinator_t>(coordinators(), std::move(object));
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_destroy(ctxc_coordinator_t* coordinator) {
    return guard(__func__, [&] {
        if (!coordinator) return CTXC_OK;
        std::unique_ptr<CoordinatorObject> c = coordinators().remove(coordinator);
        if (!c) invalidHandle("coordinator is not a live ctxc_coordinator_t (destroyed, or another type)");
        size_t live = 0;
        for (void const* handle : c->requests) {
            KvRequestObject* r = kvRequests().find(handle);
            if (!r) continue;
            ContextCacheRequest* context = r->request->contextRequest();
            if (context && context->handle().valid()) ++live;
            r->orphaned = true;
        }
        c.reset();  // synchronises and releases what the live requests hold and detaches them
        if (live > 0)
            throw ApiError(CTXC_E_LEASES_OUTSTANDING,
                           "destroyed with " + std::to_string(live) +
                               " live request(s); they are orphaned and must still be destroyed");
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_metrics(const ctxc_coordinator_t* coordinator,
                                                ctxc_context_cache_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        ctxc_context_cache_metrics_t& out = requireSized(out_metrics, "out_metrics");
        fillMetrics(requireCoordinator(coordinator).coordinator->metrics(), out);
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_poll_store(ctxc_coordinator_t* coordinator, size_t* out_applied,
                                                   size_t* out_in_flight) {
    return guard(__func__, [&] {
        size_t& applied = requireOut(out_applied, "out_applied");
        ContextCacheCoordinator& c = *requireCoordinator(coordinator).coordinator;
        applied = c.pollStore();
        if (out_in_flight) *out_in_flight = c.storeBatchesInFlight();
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_host_tier_memory(const ctxc_coordinator_t* coordinator, void** out_data,
                                                         size_t* out_bytes) {
    return guard(__func__, [&] {
        void*& data = requireOut(out_data, "out_data");
        size_t& bytes = requireOut(out_bytes, "out_bytes");
        device::HostBuffer const* memory = requireCoordinator(coordinator).coordinator->hostTierMemory();
        data = memory ? memory->data() : nullptr;
        bytes = memory ? memory->size() : 0;
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_info(const ctxc_coordinator_t* coordinator, ctxc_coordinator_info_t* out_info) {
    return guard(__func__, [&] {
        ctxc_coordinator_info_t& out = requireSized(out_info, "out_info");
        ContextCacheCoordinator const& c = *requireCoordinator(coordinator).coordinator;
        out.page_size = c.pageSize();
        out.poisoned = c.poisoned() ? 1 : 0;
        out.active_requests = c.activeRequestCount();
        out.quarantined_requests = c.quarantinedRequestCount();
        out.supports_live_sequence_admission = c.supportsLiveSequenceAdmission() ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_shutdown(ctxc_coordinator_t* coordinator) {
    return guard(__func__, [&] {
        ContextCacheCoordinator& c = *requireCoordinator(coordinator).coordinator;
        switch (c.shutdown()) {
            case ContextCacheCoordinatorStatus::kOk: return CTXC_OK;
            case ContextCacheCoordinatorStatus::kPoisoned: throw ApiError(CTXC_E_POISONED, c.lastFailure());
            case ContextCacheCoordinatorStatus::kRequestFailed: break;
        }
        throw ApiError(CTXC_E_REQUEST_FAILED, c.lastFailure());
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_check_invariants(const ctxc_coordinator_t* coordinator) {
    return guard(__func__, [&] { requireCoordinator(coordinator).coordinator->checkInvariants(); });
}

CTXC_API ctxc_status_t ctxc_coordinator_clear(ctxc_coordinator_t* coordinator) {
    return guard(__func__, [&] { requireCoordinator(coordinator).coordinator->clear(); });
}

CTXC_API ctxc_status_t ctxc_coordinator_retention_metrics(const ctxc_coordinator_t* coordinator,
                                                          ctxc_retention_metrics_t* out_metrics) {
    return guard(__func__, [&] {
        ctxc_retention_metrics_t& out = requireSized(out_metrics, "out_metrics");
        fillRetentionMetrics(requireCoordinator(coordinator).coordinator->manager().retentionMetrics(), out);
    });
}

CTXC_API ctxc_status_t ctxc_coordinator_set_retention_time(ctxc_coordinator_t* coordinator, int64_t now_ns) {
    return guard(__func__, [&] { requireCoordinator(coordinator).coordinator->setRetentionTime(now_ns); });
}

// ---- requests ---------------------------------------------------------------------------------------------

CTXC_API void ctxc_decoding_context_init(ctxc_decoding_context_t* context) { initSized(context); }

CTXC_API void ctxc_kv_request_options_init(ctxc_kv_request_options_t* options) {
    if (!initSized(options)) return;
    DecodingKvHeadroom const headroom;
    options->lookup_policy = CTXC_LOOKUP_USE_CACHE;
    options->token_state_contract = CTXC_TOKEN_STATE_COMMITTED_PLUS_LOOKAHEAD;
    options->commit_policy = CTXC_COMMIT_INCLUDING_GENERATED_TOKENS;
    options->headroom = ctxc_kv_headroom_t{headroom.baseExtraTokens, headroom.draftExtraTokens};
}

CTXC_API ctxc_status_t ctxc_kv_request_begin(ctxc_coordinator_t* coordinator, const ctxc_sequence_request_t* sequences,
                                             size_t sequence_count, const ctxc_decoding_context_t* context,
                                             const ctxc_kv_request_options_t* options,
                                             ctxc_kv_request_t** out_request) {
    return guard(__func__, [&] {
        requireOut(out_request, "out_request") = nullptr;
        CoordinatorObject& c = requireCoordinator(coordinator);
        *out_request = beginRequest(&c, nullptr, coordinator, sequences, sequence_count, context, options);
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_begin_swa(ctxc_swa_manager_t* manager, const ctxc_sequence_request_t* sequences,
                                                 size_t sequence_count, const ctxc_decoding_context_t* context,
                                                 const ctxc_kv_request_options_t* options,
                                                 ctxc_kv_request_t** out_request) {
    return guard(__func__, [&] {
        requireOut(out_request, "out_request") = nullptr;
        SwaManagerObject& m = requireObject(swaManagers(), manager, "manager");
        *out_request = beginRequest(nullptr, &m, manager, sequences, sequence_count, context, options);
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_destroy(ctxc_kv_request_t* request) {
    return guard(__func__, [&] {
        if (!request) return CTXC_OK;
        std::unique_ptr<KvRequestObject> r = kvRequests().remove(request);
        if (!r) invalidHandle("request is not a live ctxc_kv_request_t (destroyed, or another type)");
        if (!r->orphaned)
            if (CoordinatorObject* c = coordinators().find(r->coordinatorHandle)) c->requests.erase(request);
        r.reset();  // abandons an unfinished request (a detached one touches nothing)
        return CTXC_OK;
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_info(const ctxc_kv_request_t* request, ctxc_kv_request_info_t* out_info) {
    return guard(__func__, [&] {
        ctxc_kv_request_info_t& out = requireSized(out_info, "out_info");
        KvRequestObject& r = requireRequest(request);
        if (runtime::BoundedSwaKVPageManager::RequestHandle const* w = r.request->swaRequest()) {
            out.batch_size = w->batchSize();
            out.has_context_reuse = 0;
            out.speculative = 0;
            out.has_pending_joiner = 0;
            out.live = w->valid() ? 1 : 0;
            return;
        }
        ContextCacheCoordinator::RequestHandle const& h = contextOf(r, "ctxc_kv_request_info").handle();
        out.batch_size = h.batchSize();
        out.has_context_reuse = 1;
        out.speculative = h.speculative() ? 1 : 0;
        out.has_pending_joiner = h.hasPendingJoiner() ? 1 : 0;
        out.live = h.valid() ? 1 : 0;
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_prefill_starts(const ctxc_kv_request_t* request, const int32_t** out_starts,
                                                      size_t* out_count) {
    return guard(__func__, [&] {
        int32_t const*& starts = requireOut(out_starts, "out_starts");
        size_t& count = requireOut(out_count, "out_count");
        std::vector<int32_t> const* v = requireRequest(request).request->prefillStarts();
        starts = v ? v->data() : nullptr;
        count = v ? v->size() : 0;
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_reuse_token_length(const ctxc_kv_request_t* request, int32_t row,
                                                          int32_t* out_length) {
    return getInto(__func__, out_length, "out_length",
                   [&] { return requireRequest(request).request->reuseTokenLength(row); });
}

CTXC_API ctxc_status_t ctxc_kv_request_sequence_info(const ctxc_kv_request_t* request, int32_t row,
                                                     ctxc_kv_sequence_info_t* out_info) {
    return guard(__func__, [&] {
        ctxc_kv_sequence_info_t& out = requireSized(out_info, "out_info");
        KvRequestObject& r = requireRequest(request);
        ContextCacheSequenceInfo s = contextOf(r, "ctxc_kv_request_sequence_info").handle().sequence(row);
        r.basePagesView = std::move(s.basePages);
        r.draftPagesView = std::move(s.draftPages);
        out.resident = ctxc_resident_ref_t{s.resident.slot, 0, s.resident.epoch};
        out.input_length = s.inputLength;
        out.token_count = s.tokenCount;
        out.committed_length = s.committedLength;
        out.common_length = s.commonLength;
        out.matched_length = s.matchedLength;
        out.reuse_length = s.reuseLength;
        out.plan_kind = static_cast<int32_t>(s.planKind);
        out.bypass = s.bypass ? 1 : 0;
        out.forced_cold = s.forcedCold ? 1 : 0;
        out.published_full_block_count = s.publishedFullBlockCount;
        out.base_pages = r.basePagesView.data();
        out.base_page_count = r.basePagesView.size();
        out.draft_pages = r.draftPagesView.data();
        out.draft_page_count = r.draftPagesView.size();
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_last_error(const ctxc_kv_request_t* request, const char** out_message) {
    return getInto(__func__, out_message, "out_message",
                   [&] { return requireRequest(request).request->lastError().c_str(); });
}

CTXC_API ctxc_status_t ctxc_kv_request_prepare_prefill(ctxc_kv_request_t* request) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        answer(r, r.request->preparePrefill());
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_prepare_swa_prefill(ctxc_kv_request_t* request, const int32_t* lengths,
                                                           size_t count) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        answer(r, r.request->prepareSwaPrefill(int32s(lengths, count, "lengths")));
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_swa_state(const ctxc_kv_request_t* request, int32_t row,
                                                 ctxc_swa_state_t* out_state) {
    return guard(__func__, [&] {
        ctxc_swa_state_t& out = requireSized(out_state, "out_state");
        KvRequestObject& r = requireRequest(request);
        runtime::BoundedSwaKVPageManager::RequestHandle* w = r.request->swaRequest();
        if (!w)
            throw ContractError(
                "ctxc_kv_request_swa_state: the request runs on the context-reuse backend, which "
                "keeps no window (ctxc_kv_request_sequence_info reads its rows)");
        fillSwaState(requireSwaManager(r.swaManagerHandle).state(*w, row), out);
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_enqueue_prefill_captures(ctxc_kv_request_t* request) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        answer(r, r.request->enqueuePrefillCaptures());
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_complete_prefill(ctxc_kv_request_t* request,
                                                        const ctxc_decoding_context_t* context,
                                                        const int32_t* common_state_lengths, size_t common_count) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        DecodingInferenceContext const ctx = contextOf(context);
        answer(r, r.request->completePrefill(ctx, commonLengths(common_state_lengths, common_count)));
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_prepare_decode_step(ctxc_kv_request_t* request,
                                                           const ctxc_decoding_context_t* context,
                                                           const ctxc_kv_headroom_t* headroom) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        DecodingInferenceContext const ctx = contextOf(context);
        answer(r, r.request->prepareDecodeStep(ctx, headroomOf(headroom, "headroom")));
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_complete_decode_step(ctxc_kv_request_t* request,
                                                            const ctxc_decoding_context_t* context,
                                                            const int32_t* common_state_lengths, size_t common_count) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        DecodingInferenceContext const ctx = contextOf(context);
        answer(r, r.request->completeDecodeStep(ctx, commonLengths(common_state_lengths, common_count)));
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_begin_batch_compaction(ctxc_kv_request_t* request, const int32_t* old_to_new,
                                                              size_t old_batch, int32_t new_batch,
                                                              int32_t* out_device_batch_mapping,
                                                              size_t mapping_capacity) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        std::vector<int32_t> const map = int32s(old_to_new, old_batch, "old_to_new");
        requireNonNegative(new_batch, "new_batch");
        requireArray(out_device_batch_mapping, mapping_capacity, "out_device_batch_mapping");
        TensorView mapping;
        mapping.data = out_device_batch_mapping;
        mapping.dtype = ScalarType::kInt32;
        mapping.shape = {static_cast<int64_t>(mapping_capacity)};
        answer(r, r.request->beginBatchCompaction(map, new_batch, mapping));
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_complete_batch_compaction(ctxc_kv_request_t* request,
                                                                 const int32_t* keep_mapping, size_t count) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        answer(r, r.request->completeBatchCompaction(int32s(keep_mapping, count, "keep_mapping")));
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_finish(ctxc_kv_request_t* request) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        answer(r, r.request->finish());
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_admit_sequence(ctxc_kv_request_t* request,
                                                      const ctxc_sequence_request_t* sequence,
                                                      const ctxc_resident_ref_t* resident,
                                                      const ctxc_kv_headroom_t* headroom,
                                                      const int32_t* media_token_ids, size_t media_token_id_count,
                                                      int32_t* out_status, int32_t* out_prefill_start) {
    return guard(__func__, [&] {
        int32_t& status = requireOut(out_status, "out_status");
        int32_t& prefillStart = requireOut(out_prefill_start, "out_prefill_start");
        status = CTXC_ADMIT_FAILED;
        prefillStart = 0;
        KvRequestObject& r = requireRequest(request);
        if (!sequence) invalidArgument("sequence is NULL");
        if (!resident) invalidArgument("resident is NULL");
        SequenceRequest const s = sequenceOf(*sequence, "sequence");
        if (sequence->lookup_policy != CTXC_INHERIT_LOOKUP_POLICY)
            invalidArgument("sequence.lookup_policy must be CTXC_INHERIT_LOOKUP_POLICY (a joiner looks up the cache)");
        DecodingKvHeadroom const h = headroomOf(headroom, "headroom");
        std::vector<int32_t> const mediaTokenIds = int32s(media_token_ids, media_token_id_count, "media_token_ids");
        int32_t start = 0;
        ContextCacheRequest::AdmitSequenceStatus const admitted = r.request->admitSequence(
            s.tokenIds, s.loraName, h, start, residentOf(*resident), nullptr, mediaTokenIds, s.media, &s.retention);
        status = static_cast<int32_t>(admitted);
        if (admitted == ContextCacheRequest::AdmitSequenceStatus::kAdmitted) prefillStart = start;
        if (admitted == ContextCacheRequest::AdmitSequenceStatus::kFailed)
            failed(r,
                   "the bounded-SWA backend has no live-slot admission (its per-slot window state cannot join a "
                   "running batch)");
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_finalize_sequence_admission(ctxc_kv_request_t* request, int32_t row,
                                                                   int32_t lookahead_token, int32_t full_input_length) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        answer(r, r.request->finalizeSequenceAdmission(row, lookahead_token, full_input_length),
               "the bounded-SWA backend has no live-slot admission");
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_retract_sequence_admission(ctxc_kv_request_t* request, int32_t* out_retracted) {
    return getInto(__func__, out_retracted, "out_retracted",
                   [&] { return requireRequest(request).request->retractSequenceAdmission() ? 1 : 0; });
}

CTXC_API ctxc_status_t ctxc_kv_request_publish_hybrid_mtp_endpoint(ctxc_kv_request_t* request, int32_t row,
                                                                   int32_t resident_state_length,
                                                                   const ctxc_tensor_view_t* base_hidden_states,
                                                                   int32_t boundary_hidden_row) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        TensorView const hidden = tensorOf(base_hidden_states, "base_hidden_states");
        answer(r, r.request->publishHybridMtpEndpoint(row, resident_state_length, hidden, boundary_hidden_row));
    });
}

CTXC_API ctxc_status_t ctxc_kv_request_restore_hybrid_mtp_boundary_hidden(ctxc_kv_request_t* request, int32_t row,
                                                                          const ctxc_tensor_view_t* base_hidden_states,
                                                                          int32_t destination_row) {
    return guard(__func__, [&] {
        KvRequestObject& r = requireRequest(request);
        TensorView hidden = tensorOf(base_hidden_states, "base_hidden_states");
        answer(r, r.request->restoreHybridMtpBoundaryHidden(row, hidden, destination_row));
    });
}

}  // extern "C"
