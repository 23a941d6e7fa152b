"""ctxcache: a context cache (KV-cache reuse) for LLM inference runtimes.

A thin cffi (ABI mode) shell over the C ABI of ``libctxcache.so``, which ships inside this package::

    import ctxcache
    manager = ctxcache.ContextCacheManager(page_size=16, capacities=ctxcache.ResourceDemand(base_kv_pages=64))
    hashes = ctxcache.hash_full_blocks(tokens, page_size=16)
    result = manager.acquire_vanilla(hashes, len(tokens))
    with result.lease as lease:
        ...  # prefill from result.plan.reuse_token_length, writing KV into lease.base_pages
        manager.publish(lease, hashes, resident_state_length=len(tokens))
"""

from __future__ import annotations

from . import _startup  # noqa: F401 - first: the `ctxcache` command's Ctrl-C while loading is one line, exit 130
from ._ffi import HEADER_ABI_VERSION, ffi, lib
from .enums import (
    AcquireStatus,
    AdmitSequenceStatus,
    CommitPolicy,
    ContextCacheCommitPolicy,
    ContextCacheLookupPolicy,
    ContextCacheModelStateKind,
    DecodingTokenStateContract,
    EvictionPolicy,
    HashAlgorithm,
    KvEventType,
    KvExtraKeyKind,
    LeaseState,
    LookupPolicy,
    MediaModality,
    ModelStateKind,
    PublicationGrowth,
    PublishStatus,
    ResourceType,
    ReusePlanKind,
    ReusePlanMode,
    ScalarType,
    SequenceStatus,
    SpecReplayMode,
    TokenStateContract,
)
from .errors import (
    ArgumentTypeError,
    BufferTooSmallError,
    ConcurrentUseError,
    ContractError,
    DeviceError,
    Error,
    InternalError,
    InterruptedCallError,
    InvalidArgumentError,
    InvalidHandleError,
    InvariantError,
    LeasesOutstandingError,
    OutOfMemoryError,
    PoisonedError,
    RequestFailedError,
    UnsupportedError,
)
from .hashing import (
    CHAIN_ROOT,
    BlockKeyExtras,
    Hasher,
    MediaSpanKey,
    hash_block,
    hash_exact_prefix,
    hash_full_blocks,
    hash_opaque_identity,
)
from .host_tier import BookkeepingStore, BookkeepingStoreMetrics, HostTier, HostTierMetrics, HostWritePolicy
from .kv_store import KvStore, StoreLink, StoreLoadPolicy, StoreResult
from .manager import (
    AcquireResult,
    CacheRecord,
    ContextCacheManager,
    DraftPathMatch,
    HybridCheckpointCandidate,
    HybridCheckpointKey,
    HybridSnapshotReservation,
    Lease,
    ManagerMetrics,
    PublishResult,
    ResourceDemand,
    ResourceId,
    ReusePlan,
    ReuseProbe,
    SpecReplayDependency,
)
from .retention import RetentionMetrics, RetentionRange, RetentionSpec

__version__ = "0.1.0"
CacheRequestLease = Lease


def abi_version() -> int:
    """The loaded library's ABI version (checked against the header at import)."""
    return int(lib.ctxc_abi_version())


def cuda_compiled() -> bool:
    return bool(lib.ctxc_cuda_compiled())


def cuda_device_count() -> int:
    """> 0 devices usable; 0 none; < 0 the negated CUDA error of the probe (-35: no driver), -1 no CUDA build."""
    return int(lib.ctxc_cuda_device_count())


# The device layer (storage and data movement; CPU backend always, CUDA when built and a device is present).
from . import device  # noqa: E402
from .device import DType, KvLengths, KvPagePool, KvPageTable, ResidentState, SnapshotStorage, StatePart  # noqa: E402

DeviceBackend = device.Backend

# The runtime layer (coordinator and requests over the device objects) and bounded sliding-window paging (reuse
# off, a windowed pool).
# One object that sizes a model's pool, page table, lengths, resident state, snapshots and coordinator together;
# KV events for cluster routers (docs/EVENTS.md).
from . import (  # noqa: E402
    deployment,  # noqa: E402
    events,  # noqa: E402
    metrics,
    runtime,
)
from .deployment import Deployment, RecurrentGeometry  # noqa: E402
from .events import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventKeys,
    KvEventMedia,
    KvEventPublisher,
    KvEventStatus,
    PublisherStats,
    encode_kv_events,
    publisher_available,
)
from .metrics import MetricsCollector, metrics_text  # noqa: E402
from .runtime import (  # noqa: E402
    AdmitResult,
    ContextCacheCoordinator,
    ContextCacheMetrics,
    DecodingContext,
    Headroom,
    ManagedKVCacheRequest,
    MediaItem,
    PoolMetrics,
    Request,
    ResidentRef,
    SequenceInfo,
    SpecReuseContract,
    SwaState,
    swa,  # noqa: E402  (ctxcache.swa: the module ctxcache.runtime.swa)
)
from .runtime.swa import BoundedSwaKVPageManager, SwaRequest  # noqa: E402

# Spelled out (not computed) so that type checkers see what the package exports.
__all__ = [
    "AdmitResult", "AdmitSequenceStatus", "CommitPolicy", "ContextCacheCommitPolicy", "ContextCacheCoordinator",
    "ContextCacheMetrics", "ContextCacheModelStateKind", "DecodingContext", "DecodingTokenStateContract", "Headroom",
    "ManagedKVCacheRequest", "MediaItem", "MediaModality", "ModelStateKind", "PoisonedError", "PoolMetrics", "Request",
    "RequestFailedError", "ResidentRef", "ScalarType", "SequenceInfo", "SequenceStatus", "SpecReuseContract",
    "TokenStateContract", "runtime",
    "BoundedSwaKVPageManager", "SwaRequest", "SwaState", "swa",
    "Deployment", "RecurrentGeometry", "deployment",
    "AllBlocksCleared", "BlockRemoved", "BlockStored", "KvEventKeys", "KvEventMedia", "KvEventPublisher",
    "KvEventStatus", "KvEventType", "KvExtraKeyKind", "PublisherStats",
    "encode_kv_events", "events", "publisher_available",
    "MetricsCollector", "metrics", "metrics_text",
    "RetentionMetrics", "RetentionRange", "RetentionSpec", "retention",
    "AcquireResult", "AcquireStatus", "ArgumentTypeError", "BlockKeyExtras", "BufferTooSmallError", "CHAIN_ROOT",
    "CacheRecord", "CacheRequestLease", "ConcurrentUseError", "ContextCacheLookupPolicy", "ContextCacheManager", "ContractError", "DType", "EvictionPolicy",
    "DeviceBackend", "DeviceError", "DraftPathMatch", "Error", "HEADER_ABI_VERSION", "HashAlgorithm", "Hasher",
    "HybridCheckpointCandidate", "HybridCheckpointKey", "HybridSnapshotReservation", "InternalError",
    "InterruptedCallError",
    "InvalidArgumentError", "InvalidHandleError", "InvariantError", "KvLengths", "KvPagePool", "KvPageTable", "Lease",
    "LeaseState", "LeasesOutstandingError", "LookupPolicy", "ManagerMetrics", "MediaSpanKey", "OutOfMemoryError",
    "PublicationGrowth", "PublishResult", "PublishStatus", "ResidentState", "ResourceDemand", "ResourceId",
    "BookkeepingStore", "BookkeepingStoreMetrics", "HostTier", "HostTierMetrics", "HostWritePolicy",
    "KvStore", "StoreLink", "StoreLoadPolicy", "StoreResult",
    "ResourceType", "ReusePlan", "ReuseProbe", "ReusePlanKind", "ReusePlanMode", "SnapshotStorage", "SpecReplayDependency", "SpecReplayMode", "StatePart",
    "UnsupportedError", "abi_version", "cuda_compiled", "cuda_device_count", "device", "enums", "errors", "ffi",
    "hash_block", "hash_exact_prefix", "hash_full_blocks", "hash_opaque_identity", "hashing", "lib", "manager",
]
