// C ABI of include/ctxcache/c/library.h: library-wide entry points (version, errors, layout checks, CUDA probe).
#include "ctxcache/c/library.h"

#include <cstddef>
#include <cstring>

#include "api_support.h"
#include "ctxcache/device/cuda_probe.h"

using namespace ctxcache::capi;

// The frozen structs (no struct_size; see the header's Conventions): a change to one of them must be a new type.
static_assert(sizeof(ctxc_hash128_t) == 16);
static_assert(sizeof(ctxc_resource_demand_t) == 16);
static_assert(sizeof(ctxc_media_span_key_t) == 48);
static_assert(sizeof(ctxc_block_key_extras_t) == 104);
static_assert(sizeof(ctxc_hybrid_candidate_t) == 24);
static_assert(sizeof(ctxc_hybrid_snapshot_reservation_t) == 8);
static_assert(sizeof(ctxc_hybrid_checkpoint_key_t) == 24);
static_assert(sizeof(ctxc_kv_layer_shape_t) == 8);
static_assert(sizeof(ctxc_reuse_plan_t) == 120);
static_assert(sizeof(ctxc_resident_ref_t) == 16);
static_assert(sizeof(ctxc_kv_headroom_t) == 8);
static_assert(sizeof(ctxc_media_item_t) == 32);
static_assert(sizeof(ctxc_sequence_request_t) == 64);  // 56 before CTXC_ABI_VERSION 4 (retention)
static_assert(sizeof(ctxc_tensor_view_t) == 32);
static_assert(sizeof(ctxc_sim_request_t) == 72);  // 56 before CTXC_ABI_VERSION 4 (retention, arrival)
static_assert(sizeof(ctxc_kv_event_t) == 80);
static_assert(sizeof(ctxc_kv_event_extra_key_t) == 32);
static_assert(sizeof(ctxc_kv_event_media_t) == 32);
static_assert(sizeof(ctxc_retention_range_t) == 24);
// The reuse plan can still grow: it is the last member of the acquire result, whose struct_size covers it.
static_assert(offsetof(ctxc_acquire_result_t, plan) + sizeof(ctxc_reuse_plan_t) == sizeof(ctxc_acquire_result_t));

extern "C" {

CTXC_API int32_t ctxc_abi_version(void) { return CTXC_ABI_VERSION; }

CTXC_API const char* ctxc_last_error(void) { return lastErrorMessage(); }

CTXC_API const char* ctxc_status_string(ctxc_status_t status) {
    switch (status) {
        case CTXC_OK: return "CTXC_OK";
        case CTXC_E_INVALID_ARGUMENT: return "CTXC_E_INVALID_ARGUMENT";
        case CTXC_E_CONTRACT: return "CTXC_E_CONTRACT";
        case CTXC_E_INVALID_HANDLE: return "CTXC_E_INVALID_HANDLE";
        case CTXC_E_NO_MEMORY: return "CTXC_E_NO_MEMORY";
        case CTXC_E_INVARIANT: return "CTXC_E_INVARIANT";
        case CTXC_E_LEASES_OUTSTANDING: return "CTXC_E_LEASES_OUTSTANDING";
        case CTXC_E_BUFFER_TOO_SMALL: return "CTXC_E_BUFFER_TOO_SMALL";
        case CTXC_E_UNSUPPORTED: return "CTXC_E_UNSUPPORTED";
        case CTXC_E_INTERNAL: return "CTXC_E_INTERNAL";
        case CTXC_E_DEVICE: return "CTXC_E_DEVICE";
        case CTXC_E_REQUEST_FAILED: return "CTXC_E_REQUEST_FAILED";
        case CTXC_E_POISONED: return "CTXC_E_POISONED";
        case CTXC_E_CONCURRENT_USE: return "CTXC_E_CONCURRENT_USE";
        case CTXC_E_INTERRUPTED: return "CTXC_E_INTERRUPTED";
        case CTXC_STATUS_COUNT: break;
    }
    return "CTXC_UNKNOWN_STATUS";
}

CTXC_API size_t ctxc_sizeof(const char* type_name) {
    if (!type_name) return 0;
    struct Entry {
        char const* name;
        size_t size;
    };
#define CTXC_SIZEOF_ENTRY(type) \
    {                           \
        #type, sizeof(type)     \
    }
    static Entry const table[] = {
        CTXC_SIZEOF_ENTRY(ctxc_hash128_t),
        CTXC_SIZEOF_ENTRY(ctxc_resource_demand_t),
        CTXC_SIZEOF_ENTRY(ctxc_hasher_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_media_span_key_t),
        CTXC_SIZEOF_ENTRY(ctxc_block_key_extras_t),
        CTXC_SIZEOF_ENTRY(ctxc_manager_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_event_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_event_extra_key_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_event_media_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_event_keys_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_event_publisher_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_event_publisher_stats_t),
        CTXC_SIZEOF_ENTRY(ctxc_reuse_plan_t),
        CTXC_SIZEOF_ENTRY(ctxc_reuse_probe_t),
        CTXC_SIZEOF_ENTRY(ctxc_acquire_result_t),
        CTXC_SIZEOF_ENTRY(ctxc_hybrid_candidate_t),
        CTXC_SIZEOF_ENTRY(ctxc_hybrid_snapshot_reservation_t),
        CTXC_SIZEOF_ENTRY(ctxc_hybrid_checkpoint_key_t),
        CTXC_SIZEOF_ENTRY(ctxc_publish_result_t),
        CTXC_SIZEOF_ENTRY(ctxc_manager_metrics_t),
        CTXC_SIZEOF_ENTRY(ctxc_retention_range_t),
        CTXC_SIZEOF_ENTRY(ctxc_retention_spec_t),
        CTXC_SIZEOF_ENTRY(ctxc_retention_metrics_t),
        CTXC_SIZEOF_ENTRY(ctxc_record_view_t),
        CTXC_SIZEOF_ENTRY(ctxc_lease_info_t),
        CTXC_SIZEOF_ENTRY(ctxc_device_backend_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_launch_counters_t),
        CTXC_SIZEOF_ENTRY(ctxc_device_view_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_layer_shape_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_pool_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_resident_state_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_snapshot_storage_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_snapshot_layout_t),
        CTXC_SIZEOF_ENTRY(ctxc_snapshot_transfer_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_gather_request_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_scatter_request_t),
        CTXC_SIZEOF_ENTRY(ctxc_device_buffer_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_host_buffer_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_host_slot_layout_t),
        CTXC_SIZEOF_ENTRY(ctxc_host_tier_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_host_tier_metrics_t),
        CTXC_SIZEOF_ENTRY(ctxc_bookkeeping_store_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_bookkeeping_store_metrics_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_store_callbacks_t),
        CTXC_SIZEOF_ENTRY(ctxc_store_link_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_page_table_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_lengths_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_resident_ref_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_headroom_t),
        CTXC_SIZEOF_ENTRY(ctxc_media_item_t),
        CTXC_SIZEOF_ENTRY(ctxc_sequence_request_t),
        CTXC_SIZEOF_ENTRY(ctxc_tensor_view_t),
        CTXC_SIZEOF_ENTRY(ctxc_coordinator_resources_t),
        CTXC_SIZEOF_ENTRY(ctxc_coordinator_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_context_cache_metrics_t),
        CTXC_SIZEOF_ENTRY(ctxc_coordinator_info_t),
        CTXC_SIZEOF_ENTRY(ctxc_decoding_context_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_request_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_request_info_t),
        CTXC_SIZEOF_ENTRY(ctxc_kv_sequence_info_t),
        CTXC_SIZEOF_ENTRY(ctxc_swa_manager_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_swa_state_t),
        CTXC_SIZEOF_ENTRY(ctxc_sim_engine_options_t),
        CTXC_SIZEOF_ENTRY(ctxc_sim_request_t),
        CTXC_SIZEOF_ENTRY(ctxc_sim_output_t),
        CTXC_SIZEOF_ENTRY(ctxc_sim_engine_stats_t),
    };
#undef CTXC_SIZEOF_ENTRY
    for (Entry const& e : table)
        if (std::strcmp(e.name, type_name) == 0) return e.size;
    return 0;
}

CTXC_API int32_t ctxc_cuda_compiled(void) { return ctxcache::device::cudaCompiled() ? 1 : 0; }

CTXC_API int32_t ctxc_cuda_device_count(void) {
    char const* reason = "";
    int const count = ctxcache::device::cudaDeviceCount(&reason);
    if (count <= 0) setLastError("ctxc_cuda_device_count", reason);
    return count;
}

}  // extern "C"
