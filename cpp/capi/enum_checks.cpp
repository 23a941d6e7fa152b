// The C header's CTXC_* constants are the one truth for every enum's values; the C++ enums the capi casts them to
// must agree, and this file refuses to compile when one drifts. (Python checks the same constants at test time:
// tests/python/test_abi.py.) A capi body converts with static_cast<Enum>(value) after a range check, so equal
// values here are what makes those casts correct.
#include "ctxcache.h"
#include "ctxcache/block_hash.h"
#include "ctxcache/context_cache_manager.h"
#include "ctxcache/device/device_backend.h"
#include "ctxcache/device/dtype.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/device/layout.h"
#include "ctxcache/device/resident_state.h"
#include "ctxcache/reuse_plan.h"
#include "ctxcache/runtime/context_cache_coordinator.h"
#include "ctxcache/runtime/deployment_profile.h"
#include "ctxcache/runtime/runtime_types.h"
#include "ctxcache/sim/reference_engine.h"
#include "ctxcache/types.h"

namespace ctxcache::capi {
namespace {

template <class E>
constexpr bool same(E cpp, int c) {
    return static_cast<int>(cpp) == c;
}

static_assert(same(sim::DeploymentKind::kAttention, CTXC_SIM_DEPLOYMENT_ATTENTION));
static_assert(same(sim::DeploymentKind::kHybrid, CTXC_SIM_DEPLOYMENT_HYBRID));
static_assert(same(sim::DeploymentKind::kRecurrent, CTXC_SIM_DEPLOYMENT_RECURRENT));
static_assert(same(sim::DeploymentKind::kEagle, CTXC_SIM_DEPLOYMENT_EAGLE));
static_assert(same(sim::SpeculativeKind::kNone, CTXC_SIM_SPECULATIVE_NONE));
static_assert(same(sim::SpeculativeKind::kMtp, CTXC_SIM_SPECULATIVE_MTP));
static_assert(same(runtime::ContextCacheCommitPolicy::kIncludingGeneratedTokens,
                   CTXC_COMMIT_INCLUDING_GENERATED_TOKENS));
static_assert(same(runtime::ContextCacheCommitPolicy::kPrefillStateOnly, CTXC_COMMIT_PREFILL_STATE_ONLY));

static_assert(same(ResourceType::kBaseKvPage, CTXC_RESOURCE_BASE_KV_PAGE));
static_assert(same(ResourceType::kDraftKvPage, CTXC_RESOURCE_DRAFT_KV_PAGE));
static_assert(same(ResourceType::kRecurrentSnapshot, CTXC_RESOURCE_RECURRENT_SNAPSHOT));
static_assert(same(ResourceType::kPartialKvSnapshot, CTXC_RESOURCE_PARTIAL_KV_SNAPSHOT));
static_assert(kResourceTypeCount == CTXC_RESOURCE_PARTIAL_KV_SNAPSHOT + 1);

static_assert(same(ContextCacheLookupPolicy::kUseCache, CTXC_LOOKUP_USE_CACHE));
static_assert(same(ContextCacheLookupPolicy::kBypass, CTXC_LOOKUP_BYPASS));

static_assert(same(ReusePlanKind::kStandard, CTXC_PLAN_STANDARD));
static_assert(same(ReusePlanKind::kNoReusablePrefix, CTXC_PLAN_NO_REUSABLE_PREFIX));
static_assert(same(ReusePlanKind::kFullInputRewind, CTXC_PLAN_FULL_INPUT_REWIND));

static_assert(same(ReusePlanMode::kVanilla, CTXC_MODE_VANILLA));
static_assert(same(EvictionPolicy::kRecordLru, CTXC_EVICTION_RECORD_LRU));
static_assert(same(EvictionPolicy::kRecordLruTrim, CTXC_EVICTION_RECORD_LRU_TRIM));
static_assert(same(ReusePlanMode::kHybrid, CTXC_MODE_HYBRID));
static_assert(same(ReusePlanMode::kSpec, CTXC_MODE_SPEC));
static_assert(same(ReusePlanMode::kHybridMtp, CTXC_MODE_HYBRID_MTP));

static_assert(same(SpecReplayMode::kNone, CTXC_SPEC_REPLAY_NONE));
static_assert(same(SpecReplayMode::kFullPage, CTXC_SPEC_REPLAY_FULL_PAGE));

static_assert(same(AcquireStatus::kAcquired, CTXC_ACQUIRE_ACQUIRED));
static_assert(same(AcquireStatus::kInsufficientCapacity, CTXC_ACQUIRE_INSUFFICIENT_CAPACITY));

static_assert(same(PublishStatus::kPublished, CTXC_PUBLISH_PUBLISHED));
static_assert(same(PublishStatus::kExistingRecord, CTXC_PUBLISH_EXISTING_RECORD));

static_assert(same(HashAlgorithm::kSha256, CTXC_HASH_SHA256));
static_assert(same(HashAlgorithm::kFnv1a128, CTXC_HASH_FNV1A128));

static_assert(same(device::BackendKind::kAuto, CTXC_BACKEND_AUTO));
static_assert(same(device::BackendKind::kCpu, CTXC_BACKEND_CPU));
static_assert(same(device::BackendKind::kCuda, CTXC_BACKEND_CUDA));

static_assert(same(device::DType::kFp16, CTXC_DTYPE_FP16));
static_assert(same(device::DType::kBf16, CTXC_DTYPE_BF16));
static_assert(same(device::DType::kFp8E4m3, CTXC_DTYPE_FP8_E4M3));
static_assert(same(device::DType::kFp32, CTXC_DTYPE_FP32));
static_assert(device::kDTypeCount == CTXC_DTYPE_FP32 + 1);

static_assert(same(device::StatePart::kRecurrent, CTXC_STATE_RECURRENT));
static_assert(same(device::StatePart::kConv, CTXC_STATE_CONV));
static_assert(same(device::StatePart::kBoundaryHidden, CTXC_STATE_BOUNDARY_HIDDEN));
static_assert(same(device::StatePart::kPartialKv, CTXC_STATE_PARTIAL_KV));
static_assert(same(device::StatePart::kDraftPartialKv, CTXC_STATE_DRAFT_PARTIAL_KV));

static_assert(same(device::KvPageTable::Mode::kDense, CTXC_PAGE_TABLE_DENSE));
static_assert(same(device::KvPageTable::Mode::kSparseWindow, CTXC_PAGE_TABLE_SPARSE_WINDOW));

static_assert(device::kDefaultHashChunks == CTXC_DEFAULT_HASH_CHUNKS);

using runtime::ContextCacheCommitPolicy;
using runtime::ContextCacheModelStateKind;
using runtime::DecodingTokenStateContract;
using runtime::ScalarType;
using runtime::SequenceStatus;
using AdmitStatus = runtime::ContextCacheCoordinator::AdmitSequenceStatus;

static_assert(same(ContextCacheModelStateKind::kAttentionOnly, CTXC_MODEL_ATTENTION_ONLY));
static_assert(same(ContextCacheModelStateKind::kPureRecurrent, CTXC_MODEL_PURE_RECURRENT));
static_assert(same(ContextCacheModelStateKind::kHybrid, CTXC_MODEL_HYBRID));

static_assert(same(DecodingTokenStateContract::kCommittedPlusLookahead, CTXC_TOKEN_STATE_COMMITTED_PLUS_LOOKAHEAD));
static_assert(same(DecodingTokenStateContract::kFullyCommitted, CTXC_TOKEN_STATE_FULLY_COMMITTED));

static_assert(same(ContextCacheCommitPolicy::kIncludingGeneratedTokens, CTXC_COMMIT_INCLUDING_GENERATED_TOKENS));
static_assert(same(ContextCacheCommitPolicy::kPrefillStateOnly, CTXC_COMMIT_PREFILL_STATE_ONLY));

static_assert(same(SequenceStatus::kRunning, CTXC_SEQUENCE_RUNNING));
static_assert(same(SequenceStatus::kFinished, CTXC_SEQUENCE_FINISHED));
static_assert(same(SequenceStatus::kCancelled, CTXC_SEQUENCE_CANCELLED));
static_assert(same(SequenceStatus::kFailed, CTXC_SEQUENCE_FAILED));

static_assert(same(AdmitStatus::kAdmitted, CTXC_ADMIT_ADMITTED));
static_assert(same(AdmitStatus::kNoCapacity, CTXC_ADMIT_NO_CAPACITY));
static_assert(same(AdmitStatus::kFailed, CTXC_ADMIT_FAILED));

static_assert(same(ScalarType::kFp16, CTXC_SCALAR_FP16));
static_assert(same(ScalarType::kBf16, CTXC_SCALAR_BF16));
static_assert(same(ScalarType::kFp8E4m3, CTXC_SCALAR_FP8_E4M3));
static_assert(same(ScalarType::kFp32, CTXC_SCALAR_FP32));
static_assert(same(ScalarType::kInt32, CTXC_SCALAR_INT32));
static_assert(same(ScalarType::kInt64, CTXC_SCALAR_INT64));
static_assert(same(ScalarType::kUInt8, CTXC_SCALAR_UINT8));
static_assert(same(device::DType::kFp8E4m3, CTXC_SCALAR_FP8_E4M3) && same(device::DType::kFp32, CTXC_SCALAR_FP32));

// The coordinator's statuses reach C as CTXC_OK / CTXC_E_REQUEST_FAILED / CTXC_E_POISONED (cpp/capi/runtime_api.cpp);
// media modality has no C++ enum (MediaItem::modality is a byte holding CTXC_MEDIA_*).
// CTXC_LEASE_* has no C++ twin: the lease state is a capi notion (LeaseObject::state holds the constant itself).

}  // namespace
}  // namespace ctxcache::capi
