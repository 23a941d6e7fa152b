"""The context cache manager and its leases, over the C ABI.

Single-writer: a manager and its leases are not thread-safe; serialize every call on them. Leases are
context managers (``with manager.acquire_vanilla(...).lease as lease:``) and release on exit; a lease object
that is garbage-collected is released and freed. Closing a manager with live leases orphans them (their later
use raises InvalidHandleError) and raises LeasesOutstandingError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _arrays, _resource
from . import host_tier as _host_tier
from ._event_keys import KvEventKeys, c_event_keys
from ._ffi import check, ffi, from_buffer_cdata, lib, new_cdata, new_output
from ._resource import Family, Resource, drain, orphans
from .enums import (
    AcquireStatus,
    EvictionPolicy,
    LeaseState,
    LookupPolicy,
    PublicationGrowth,
    PublishStatus,
    ResourceType,
    ReusePlanKind,
    ReusePlanMode,
    SpecReplayMode,
)
from .errors import ArgumentTypeError, InvalidArgumentError, InvalidHandleError
from .events import KvEventSource
from .host_tier import BookkeepingStore, HostTier
from .retention import RetentionMetrics, RetentionSpec, c_retention_spec, clock_ns, duration_ns, retention_metrics_of

_NULL = ffi.NULL


@dataclass(frozen=True)
class ResourceDemand:
    """Pool capacities, or the demand of one operation. Omitted fields are 0."""

    base_kv_pages: int = 0
    draft_kv_pages: int = 0
    recurrent_snapshot_slots: int = 0
    partial_kv_snapshot_slots: int = 0

    def __post_init__(self) -> None:
        for name in ("base_kv_pages", "draft_kv_pages", "recurrent_snapshot_slots", "partial_kv_snapshot_slots"):
            _arrays.integer(getattr(self, name), name)

    def get(self, resource_type: ResourceType) -> int:
        return (self.base_kv_pages, self.draft_kv_pages, self.recurrent_snapshot_slots,
                self.partial_kv_snapshot_slots)[ResourceType(resource_type)]


@dataclass(frozen=True)
class ResourceId:
    type: ResourceType
    index: int


@dataclass(frozen=True)
class HybridCheckpointCandidate:
    exact_length: int
    exact_prefix_digest: Any  # (2,) uint64 array or (hi, lo)


@dataclass(frozen=True)
class HybridCheckpointKey:
    exact_prefix_digest: Any
    exact_length: int


@dataclass(frozen=True)
class HybridSnapshotReservation:
    recurrent_snapshot_slot: int
    partial_kv_snapshot_slot: int | None = None


@dataclass(frozen=True)
class SpecReplayDependency:
    terminal_hash: np.ndarray
    path_block_count: int


@dataclass(frozen=True)
class DraftPathMatch:
    record: int
    path_block_count: int


@dataclass(frozen=True)
class ManagerMetrics:
    evicted_records: int
    reclaimed_base_kv_pages: int
    reclaimed_draft_kv_pages: int
    reclaimed_recurrent_snapshots: int
    reclaimed_partial_kv_snapshots: int
    trimmed_records: int = 0  # EvictionPolicy.RECORD_LRU_TRIM: trims applied
    trimmed_blocks: int = 0  # blocks those trims took off their records
    prefix_cache_queries: int = 0  # prompt tokens of the acquires that succeeded reading the cache
    prefix_cache_hits: int = 0  # the tokens those acquires skip (reuse_token_length): hits / queries
    superseded_records: int = 0  # records a longer publication replaced (growth, a spec lease's dominated hit)


_ACQUIRE_STATUSES = tuple(AcquireStatus)
_PUBLISH_STATUSES = tuple(PublishStatus)
_PLAN_KINDS = tuple(ReusePlanKind)
_ACQUIRED = AcquireStatus.ACQUIRED
_NDARRAY = _arrays._NDARRAY
_UINT64 = _arrays._UINT64
_HASH_STRIDES = _arrays._HASH_STRIDES
_HASHES = _arrays._HASHES
_USE_CACHE = LookupPolicy.USE_CACHE
INT32_MAX = _arrays.INT32_MAX
_acquire_vanilla = lib.ctxc_manager_acquire_vanilla
_probe_vanilla = lib.ctxc_manager_probe_vanilla
_grow_base_pages = lib.ctxc_manager_grow_base_pages
_publish = lib.ctxc_manager_publish
_publish_with_tokens = lib.ctxc_manager_publish_with_tokens
_ACQUIRE_RESULT = ffi.typeof("ctxc_acquire_result_t *")
_LEASE_OUT = ffi.typeof("ctxc_lease_t **")
_OK_OUT = ffi.typeof("int32_t *")
# A fresh result is a copy of this template (struct_size set, the rest zero): copying a struct is cheaper for cffi
# than converting an initializer list. _ACQUIRE_RESULT_TEMPLATE owns the memory the struct view reads.
_ACQUIRE_RESULT_TEMPLATE = new_cdata(_ACQUIRE_RESULT, [ffi.sizeof("ctxc_acquire_result_t")])
_ACQUIRE_RESULT_INIT = _ACQUIRE_RESULT_TEMPLATE[0]
_INT32 = _arrays._INT32
_INT32S = _arrays._INT32S
_empty = np.empty
_frombuffer = np.frombuffer
_new_object = object.__new__
_buffer = ffi.buffer


def _demand(c: Any) -> ResourceDemand:
    return ResourceDemand(c.base_kv_pages, c.draft_kv_pages, c.recurrent_snapshot_slots, c.partial_kv_snapshot_slots)


_NO_TOKENS = (_NULL, 0)


def _token_pointer(tokens: np.ndarray) -> tuple[Any, int]:
    """(pointer, count) of a publication's token array (the pointer keeps the array alive)."""
    if tokens.size == 0:
        return _NO_TOKENS
    return _arrays.int32_pointer(tokens), int(tokens.size)


def _optional_slot(value: int) -> int | None:
    return None if value < 0 else int(value)


class ReusePlan:
    """What an acquire decided: how much is reused, what was bound, what had to be allocated."""

    __slots__ = ("_c", "_owner")

    def __init__(self, result: Any) -> None:
        self._owner = result  # the ctxc_acquire_result_t that owns the memory of ...
        self._c = result.plan  # ... this nested ctxc_reuse_plan_t (a view, not a copy)

    mode = property(lambda self: ReusePlanMode(self._c.mode))
    kind = property(lambda self: ReusePlanKind(self._c.kind))
    spec_replay_mode = property(lambda self: SpecReplayMode(self._c.spec_replay_mode))
    matched_token_length = property(lambda self: self._c.matched_token_length)
    reuse_token_length = property(lambda self: self._c.reuse_token_length)
    bound_base_page_count = property(lambda self: self._c.bound_base_page_count)
    bound_draft_page_count = property(lambda self: self._c.bound_draft_page_count)
    hybrid_has_attention = property(lambda self: bool(self._c.hybrid_has_attention))
    demand = property(lambda self: _demand(self._c.demand))
    draft_record = property(lambda self: self._c.draft_record or None)
    hybrid_record = property(lambda self: self._c.hybrid_record or None)
    recurrent_snapshot_binding = property(lambda self: _optional_slot(self._c.recurrent_snapshot_binding))
    partial_kv_snapshot_binding = property(lambda self: _optional_slot(self._c.partial_kv_snapshot_binding))

    @property
    def spec_replay_dependency(self) -> SpecReplayDependency | None:
        c = self._c
        if not c.has_spec_replay_dependency:
            return None
        h = c.spec_replay_dependency_hash
        return SpecReplayDependency(np.array([h.hi, h.lo], dtype=np.uint64), c.spec_replay_dependency_block_count)

    @property
    def hybrid_checkpoint(self) -> HybridCheckpointKey | None:
        c = self._c
        if not c.has_hybrid_checkpoint:
            return None
        h = c.hybrid_checkpoint_digest
        return HybridCheckpointKey(np.array([h.hi, h.lo], dtype=np.uint64), c.hybrid_checkpoint_length)

    def __repr__(self) -> str:
        return (f"ReusePlan(mode={self.mode.name}, kind={self.kind.name}, matched_token_length="
                f"{self.matched_token_length}, reuse_token_length={self.reuse_token_length}, demand={self.demand})")


class AcquireResult:
    """An acquire's status, its lease (None unless ACQUIRED) and its plan."""

    __slots__ = ("status", "lease", "_plan")

    def __init__(self, status: AcquireStatus, lease: Lease | None, plan: Any):
        # ContextCacheManager.acquire_vanilla fills a hit's result with this body inline: keep the two alike.
        self.status = status
        self.lease = lease
        self._plan = plan  # a ReusePlan, or (from the manager) the call's result struct, made a ReusePlan on read

    @property
    def plan(self) -> ReusePlan:
        plan = self._plan
        if type(plan) is not ReusePlan:
            plan = self._plan = ReusePlan(plan)
        return plan

    @plan.setter
    def plan(self, value: ReusePlan) -> None:
        self._plan = value

    def __repr__(self) -> str:
        return f"AcquireResult(status={self.status.name}, lease={self.lease!r}, plan={self.plan!r})"


class PublishResult:
    """What a publication committed. canonical_base_pages: the record's pages (read-only int32), never a
    page-table update recipe: the lease keeps its own pages."""

    __slots__ = ("status", "record", "_pages", "published_base_full_block_count")

    def __init__(self, status: PublishStatus, record: int | None, canonical_base_pages: np.ndarray | bytes,
                 published_base_full_block_count: int):
        # ContextCacheManager.publish fills its result with this body inline: keep the two alike.
        self.status = status
        self.record = record
        self._pages = canonical_base_pages  # the manager passes bytes: its copy of the C view, made an array on read
        self.published_base_full_block_count = published_base_full_block_count

    @property
    def canonical_base_pages(self) -> np.ndarray:
        pages = self._pages
        if type(pages) is bytes:
            pages = self._pages = _frombuffer(pages, _INT32)  # over immutable bytes: read-only
        return pages  # type: ignore[return-value]  # bytes were replaced just above

    @canonical_base_pages.setter
    def canonical_base_pages(self, value: np.ndarray) -> None:
        self._pages = value

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PublishResult) and (self.status, self.record, self.published_base_full_block_count)
                == (other.status, other.record, other.published_base_full_block_count)
                and np.array_equal(self.canonical_base_pages, other.canonical_base_pages))

    __hash__ = None  # type: ignore[assignment]  # unhashable on purpose (it defines __eq__); typeshed's object.__hash__ is a method

    def __repr__(self) -> str:
        return (f"PublishResult(status={self.status.name}, record={self.record}, canonical_base_pages="
                f"{list(self.canonical_base_pages)}, published_base_full_block_count="
                f"{self.published_base_full_block_count})")


class ReuseProbe:
    """What :meth:`ContextCacheManager.acquire_vanilla` (``LookupPolicy.USE_CACHE``) would reuse right now, from
    :meth:`ContextCacheManager.probe_vanilla`: the plan's kind, its matched and reuse lengths, and the canonical pages
    it would bind (read-only int32, ``reuse_token_length // page_size`` of them, in block order)."""

    __slots__ = ("kind", "matched_token_length", "reuse_token_length", "pages")

    def __init__(self, kind: ReusePlanKind, matched_token_length: int, reuse_token_length: int,
                 pages: np.ndarray) -> None:
        # ContextCacheManager.probe_vanilla fills its result with this body inline: keep the two alike.
        self.kind = kind
        self.matched_token_length = matched_token_length
        self.reuse_token_length = reuse_token_length
        self.pages = pages

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ReuseProbe) and (self.kind, self.matched_token_length, self.reuse_token_length)
                == (other.kind, other.matched_token_length, other.reuse_token_length)
                and np.array_equal(self.pages, other.pages))

    __hash__ = None  # type: ignore[assignment]  # unhashable on purpose (it defines __eq__)

    def __repr__(self) -> str:
        return (f"ReuseProbe(kind={self.kind.name}, matched_token_length={self.matched_token_length}, "
                f"reuse_token_length={self.reuse_token_length}, pages={list(self.pages)})")


@dataclass(frozen=True)
class CacheRecord:
    id: int
    terminal_hash: np.ndarray
    full_block_count: int
    exact_checkpoint_length: int | None
    recurrent_snapshot_slot: int | None
    partial_kv_snapshot_slot: int | None
    logical_block_hashes: np.ndarray
    base_page_path: np.ndarray
    draft_page_path: np.ndarray
    hybrid_mtp_checkpoint: bool = False  # full blocks are floor((exact_checkpoint_length - 1) / page_size)


class Lease(Resource):
    """One request's pins and page bindings. Release it (or use it as a context manager) when done."""

    __slots__ = ("_manager", "_handle", "_base_pages", "_draft_pages", "_family", "_grows", "__weakref__")
    _destroy = staticmethod(lib.ctxc_lease_destroy)
    _what = "lease"
    _closed = "was destroyed"

    def __init__(self, manager: ContextCacheManager, handle: Any) -> None:
        # ContextCacheManager.acquire_vanilla makes its leases with this body inline: keep the two alike.
        self._manager = manager
        self._handle = handle
        family = self._family = manager._family  # Resource._join, inline: this runs once per acquire
        family.members += 1
        self._base_pages: np.ndarray | None = None
        self._draft_pages: np.ndarray | None = None
        self._grows = False  # what ctxc_lease_set_publication_growth last set (publish's extend_record)

    _live_handle = Resource._live  # the lease's name for the handle protocol's _live()

    def _changed(self) -> None:
        self._base_pages = None
        self._draft_pages = None

    def _pages(self, getter: Any) -> np.ndarray:
        ptr = ffi.new("const int32_t **")
        count = ffi.new("size_t *")
        check(getter(self._live_handle(), ptr, count))
        return _arrays.read_only_int32(ptr[0], count[0])

    @property
    def base_pages(self) -> np.ndarray:
        """Ordered base K-page ids (shared prefix, then private pages); read-only int32."""
        if self._base_pages is None or self._manager.closed:  # an orphaned lease must not serve a stale view
            self._base_pages = self._pages(lib.ctxc_lease_base_pages)
        return self._base_pages

    @property
    def draft_pages(self) -> np.ndarray:
        if self._draft_pages is None or self._manager.closed:
            self._draft_pages = self._pages(lib.ctxc_lease_draft_pages)
        return self._draft_pages

    def _info(self) -> Any:
        info = new_output("ctxc_lease_info_t")
        check(lib.ctxc_lease_info(self._live_handle(), info))
        return info

    @property
    def state(self) -> LeaseState:
        return LeaseState(self._info().state) if self._handle != _NULL else LeaseState.RELEASED

    @property
    def valid(self) -> bool:
        return bool(self._handle != _NULL and self._info().state == LeaseState.LIVE)

    @property
    def mode(self) -> ReusePlanMode:
        return ReusePlanMode(self._info().mode)

    @property
    def recurrent_snapshot_slot(self) -> int | None:
        info = self._info()
        self._require_live(info)
        return _optional_slot(info.recurrent_snapshot_slot)

    @property
    def partial_kv_snapshot_slot(self) -> int | None:
        info = self._info()
        self._require_live(info)
        return _optional_slot(info.partial_kv_snapshot_slot)

    @property
    def reserved_snapshot_count(self) -> int:
        return int(self._info().reserved_snapshot_count)

    @staticmethod
    def _require_live(info: Any) -> None:
        if info.state == LeaseState.RELEASED:
            raise InvalidHandleError("lease was already released")
        if info.state == LeaseState.ORPHANED:
            raise InvalidHandleError("lease outlived its manager (the manager was closed first)")

    def release(self) -> None:
        """Drop every active reference. A second release raises InvalidHandleError."""
        check(lib.ctxc_lease_release(self._live_handle()))
        self._changed()

    def close(self) -> None:
        """Release (if still live) and free the handle; idempotent."""
        if self._handle != _NULL:
            self._base_pages = self._draft_pages = None  # _changed(), inline
            Resource.close(self)

    def __repr__(self) -> str:
        if self._handle == _NULL:
            return "Lease(destroyed)"
        info = self._info()
        return (f"Lease(state={LeaseState(info.state).name}, mode={ReusePlanMode(info.mode).name}, "
                f"base_pages={info.base_page_count}, draft_pages={info.draft_page_count})")



class Pools:
    """Read-only view of the four resource pools."""

    __slots__ = ("_manager",)

    def __init__(self, manager: ContextCacheManager):
        self._manager = manager

    def _counts(self, resource_type: Any) -> tuple[int, int]:
        free = ffi.new("int32_t *")
        capacity = ffi.new("int32_t *")
        check(lib.ctxc_manager_pool_counts(self._manager._live(), _resource_type(resource_type), free, capacity))
        return free[0], capacity[0]

    def free_count(self, resource_type: Any) -> int:
        return self._counts(resource_type)[0]

    def acquirable_count(self, resource_type: Any) -> int:
        """The ids of one type an acquire or grow could obtain now: the free ones plus those eviction would free
        (cached by unpinned records and held by no lease). An acquire's hit pins its shared pages first."""
        out = ffi.new("int32_t *")
        check(lib.ctxc_manager_acquirable_count(self._manager._live(), _resource_type(resource_type), out))
        return int(out[0])

    def capacity(self, resource_type: Any) -> int:
        return self._counts(resource_type)[1]

    def _refs(self, rid: Any, index: int | None) -> tuple[int, int]:
        if index is None:
            if not isinstance(rid, (ResourceId, tuple)) or len(tuple(_rid_fields(rid))) != 2:
                raise ArgumentTypeError("expected a ResourceId, a (type, index) tuple, or (type, index) arguments")
            rid, index = _rid_fields(rid)
        active = ffi.new("int32_t *")
        cache = ffi.new("int32_t *")
        check(lib.ctxc_debug_manager_ref_counts(self._manager._live(), _resource_type(rid),
                                          _arrays.integer(index, "index", minimum=None, maximum=2**31 - 1),
                                          active, cache))
        return active[0], cache[0]

    def active_ref_count(self, rid: Any, index: int | None = None) -> int:
        return self._refs(rid, index)[0]

    def cache_ref_count(self, rid: Any, index: int | None = None) -> int:
        return self._refs(rid, index)[1]

    def free_list(self, resource_type: Any) -> np.ndarray:
        return self._manager._two_call(lambda buf, cap, n: lib.ctxc_debug_manager_free_list(
            self._manager._live(), _resource_type(resource_type), buf, cap, n), "int32_t", np.int32)


def _rid_fields(rid: Any) -> tuple[Any, ...]:
    if isinstance(rid, ResourceId):
        return rid.type, rid.index
    return tuple(rid)


def _resource_type(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"resource type must be a ResourceType, got {type(value).__name__}")
    try:
        return int(ResourceType(int(value)))
    except ValueError:
        raise InvalidArgumentError(f"{value} is not a ResourceType") from None


class Records:
    """Read-only view of the record store."""

    __slots__ = ("_manager",)

    def __init__(self, manager: ContextCacheManager):
        self._manager = manager

    def __len__(self) -> int:
        out = ffi.new("size_t *")
        check(lib.ctxc_manager_record_count(self._manager._live(), out))
        return int(out[0])

    def lru(self) -> list[int]:
        """Record ids in eviction order (priority buckets ascending, least recently used first within one), then
        the pinned records (never evicted while pinned)."""
        return [int(x) for x in self._manager._two_call(
            lambda buf, cap, n: lib.ctxc_debug_manager_records_lru(self._manager._live(), buf, cap, n), "uint64_t", np.uint64)]

    def __iter__(self) -> Iterator[int]:
        return iter(self.lru())

    def __contains__(self, record_id: Any) -> bool:
        return record_id in self.lru()

    def __getitem__(self, record_id: int) -> CacheRecord:
        view = new_output("ctxc_record_view_t")
        check(lib.ctxc_debug_manager_record(self._manager._live(),
                                      _arrays.integer(record_id, "record_id", maximum=2**64 - 1), view))
        return CacheRecord(
            id=int(view.id),
            terminal_hash=np.array([view.terminal_hash.hi, view.terminal_hash.lo], dtype=np.uint64),
            full_block_count=view.full_block_count,
            exact_checkpoint_length=None if view.exact_checkpoint_length < 0 else view.exact_checkpoint_length,
            recurrent_snapshot_slot=_optional_slot(view.recurrent_snapshot_slot),
            partial_kv_snapshot_slot=_optional_slot(view.partial_kv_snapshot_slot),
            logical_block_hashes=_arrays.read_only_hashes(view.logical_block_hashes, view.logical_block_count),
            base_page_path=_arrays.read_only_int32(view.base_page_path, view.base_page_count),
            draft_page_path=_arrays.read_only_int32(view.draft_page_path, view.draft_page_count),
            hybrid_mtp_checkpoint=bool(view.hybrid_mtp_checkpoint),
        )

    get = __getitem__


class BaseIndex:
    __slots__ = ("_manager",)

    def __init__(self, manager: ContextCacheManager):
        self._manager = manager

    def lookup(self, block_hash: Any) -> int | None:
        h = _arrays.single_hash(block_hash, "block_hash")
        page = ffi.new("int32_t *")
        c = ffi.new("ctxc_hash128_t *", {"hi": int(h[0]), "lo": int(h[1])})
        check(lib.ctxc_debug_manager_base_index_lookup(self._manager._live(), c, page))
        return None if page[0] < 0 else page[0]

    def __len__(self) -> int:
        out = ffi.new("size_t *")
        check(lib.ctxc_manager_base_index_size(self._manager._live(), out))
        return int(out[0])


class DraftIndex:
    """Read-only view of the EAGLE draft path index."""

    __slots__ = ("_manager",)

    def __init__(self, manager: ContextCacheManager):
        self._manager = manager

    def lookup_longest(self, full_block_hashes: Any, max_block_count: int) -> DraftPathMatch | None:
        """The longest coherent paired path of one record within the first max_block_count hashes."""
        hashes = _arrays.hash_array(full_block_hashes)
        record = ffi.new("uint64_t *")
        blocks = ffi.new("int32_t *")
        check(lib.ctxc_debug_manager_draft_index_lookup(self._manager._live(), _arrays.hash_pointer(hashes), hashes.shape[0],
                                                  _arrays.integer(max_block_count, "max_block_count"), record, blocks))
        return DraftPathMatch(int(record[0]), blocks[0]) if record[0] else None

    def __len__(self) -> int:
        out = ffi.new("size_t *")
        check(lib.ctxc_debug_manager_draft_index_size(self._manager._live(), out))
        return int(out[0])


def _lookup_policy(value: Any) -> int:
    if type(value) is LookupPolicy:  # the common case, without constructing an enum (nor hashing one)
        return value._value_
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"lookup_policy must be a LookupPolicy, got {type(value).__name__}")
    try:
        return int(LookupPolicy(int(value)))
    except ValueError:
        raise InvalidArgumentError(f"lookup_policy {value} is not a LookupPolicy") from None


def _candidates(candidates: Any) -> Any:
    """A ctxc_hybrid_candidate_t array (at least one element, so that cffi never sees a zero-length array)."""
    if isinstance(candidates, (str, bytes)) or not hasattr(candidates, "__len__"):
        raise ArgumentTypeError("candidates must be a sequence of HybridCheckpointCandidate")
    c = ffi.new("ctxc_hybrid_candidate_t[]", max(len(candidates), 1))
    for i, candidate in enumerate(candidates):
        if not isinstance(candidate, HybridCheckpointCandidate):
            raise ArgumentTypeError(f"candidates[{i}] must be a HybridCheckpointCandidate")
        c[i].exact_length = _arrays.integer(candidate.exact_length, f"candidates[{i}].exact_length",
                                            minimum=-(2**31))
        digest = _arrays.single_hash(candidate.exact_prefix_digest, f"candidates[{i}].exact_prefix_digest")
        c[i].exact_prefix_digest.hi = int(digest[0])
        c[i].exact_prefix_digest.lo = int(digest[1])
    return c


def _checkpoint_key(checkpoint: Any) -> Any:
    if not isinstance(checkpoint, HybridCheckpointKey):
        raise ArgumentTypeError(f"checkpoint must be a HybridCheckpointKey, got {type(checkpoint).__name__}")
    key = ffi.new("ctxc_hybrid_checkpoint_key_t *")
    digest = _arrays.single_hash(checkpoint.exact_prefix_digest, "checkpoint.exact_prefix_digest")
    key.exact_prefix_digest.hi = int(digest[0])
    key.exact_prefix_digest.lo = int(digest[1])
    key.exact_length = _arrays.integer(checkpoint.exact_length, "checkpoint.exact_length", minimum=-(2**31))
    return key


def _reservation(value: Any) -> Any:
    if not isinstance(value, HybridSnapshotReservation):
        raise ArgumentTypeError(f"expected a HybridSnapshotReservation, got {type(value).__name__}")
    c = ffi.new("ctxc_hybrid_snapshot_reservation_t *")
    c.recurrent_snapshot_slot = _arrays.integer(value.recurrent_snapshot_slot, "recurrent_snapshot_slot")
    c.partial_kv_snapshot_slot = (-1 if value.partial_kv_snapshot_slot is None else
                                  _arrays.integer(value.partial_kv_snapshot_slot, "partial_kv_snapshot_slot"))
    return c


def eviction_policy_of(value: Any, name: str = "eviction_policy") -> EvictionPolicy:
    """An EvictionPolicy from itself or its label ("lru", "lru-trim"); anything else is InvalidArgumentError."""
    try:
        return EvictionPolicy.parse(value)
    except ValueError:
        raise InvalidArgumentError(f"{name} must be an EvictionPolicy, 'lru' or 'lru-trim', got {value!r}") from None


class ContextCacheManager(KvEventSource, Resource):
    """Host orchestrator of the context cache: acquire -> model execution -> publish or release.

    ``capacities`` sizes the four pools; ``max_records`` bounds the record count (0 keeps none);
    ``eviction_policy`` is an :class:`EvictionPolicy` or its label (``"lru"``, the default, or ``"lru-trim"``).
    """

    __slots__ = ("_handle", "_lease_outs", "_publish_outs", "_ok_outs", "_probe_outs", "_family", "_kv_publisher",
                 "page_size", "eviction_policy", "__weakref__")
    _destroy = staticmethod(lib.ctxc_manager_destroy)
    _rank = 1  # destroyed after its leases when both wait in the family
    _what = "manager"
    _closed = "is closed"

    def __init__(self, page_size: int, capacities: ResourceDemand, max_records: int = 1024,
                 eviction_policy: EvictionPolicy | str = EvictionPolicy.RECORD_LRU):
        self._handle = _NULL
        self._join(Family())
        if not isinstance(capacities, ResourceDemand):
            raise ArgumentTypeError(f"capacities must be a ResourceDemand, got {type(capacities).__name__}")
        options = ffi.new("ctxc_manager_options_t *")
        lib.ctxc_manager_options_init(options)
        options.page_size = _arrays.integer(page_size, "page_size", minimum=1)
        options.capacities.base_kv_pages = capacities.base_kv_pages
        options.capacities.draft_kv_pages = capacities.draft_kv_pages
        options.capacities.recurrent_snapshot_slots = capacities.recurrent_snapshot_slots
        options.capacities.partial_kv_snapshot_slots = capacities.partial_kv_snapshot_slots
        options.max_records = _arrays.integer(max_records, "max_records")
        policy = eviction_policy_of(eviction_policy)
        options.eviction_policy = policy
        out = ffi.new("ctxc_manager_t **")
        check(lib.ctxc_manager_create(options, out))
        self._handle = out[0]
        self.page_size = options.page_size
        self.eviction_policy = policy
        # Outputs of the per-request calls, reused (an acquire's result struct is not: a ReusePlan views it). Each
        # is a pool a call takes its buffer from (list.pop, atomic) and gives it back to once it has read it: a
        # thread that breaks the single-writer contract gets ConcurrentUseError from the library, and must not
        # also find its output overwritten by the other thread's call (an empty pool makes a new buffer).
        self._lease_outs = [new_cdata(_LEASE_OUT)]
        self._publish_outs = [new_output("ctxc_publish_result_t")]
        self._ok_outs = [new_cdata(_OK_OUT)]
        self._probe_outs = [new_output("ctxc_reuse_probe_t")]

    # Views are made on demand and hold the manager; the manager holds none of them (no reference cycle, so
    # dropping a manager frees it by reference counting, never in the cyclic collector: see _resource.py).
    pools = property(lambda self: Pools(self), doc="Read-only view of the four resource pools.")
    records = property(lambda self: Records(self), doc="Read-only view of the record store.")
    base_index = property(lambda self: BaseIndex(self))
    draft_index = property(lambda self: DraftIndex(self), doc="Read-only view of the EAGLE draft path index.")

    # -- lifecycle --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Destroy the manager. Raises LeasesOutstandingError (after closing) if leases were still alive."""
        _resource.drain(self._family)  # leases collected in a cycle first: they are not outstanding
        Resource.close(self)

    # -- acquire ------------------------------------------------------------------------------------------
    def _finish_acquire(self, status_code: int, result: Any, lease_out: Any) -> AcquireResult:
        if status_code:
            check(status_code)
        if result.status == 0:  # CTXC_ACQUIRE_ACQUIRED
            return AcquireResult(_ACQUIRED, Lease(self, lease_out[0]), result)
        return AcquireResult(_ACQUIRE_STATUSES[result.status], None, result)

    # The per-request calls (acquire_vanilla, acquire_spec, grow_*, publish) test the common argument types inline
    # (an int in [0, INT32_MAX], the default lookup policy) and call the full checks for anything else. The two
    # busiest (acquire_vanilla, publish) also inline _arrays.hashes' fast path and _live(): a Python call costs
    # about 0.1 us, the budget of a call into C is 2 us (bench.call_overhead measures it).
    def acquire_vanilla(self, full_block_hashes: Any, input_token_count: int,
                        lookup_policy: LookupPolicy = LookupPolicy.USE_CACHE) -> AcquireResult:
        """Lease for a prompt on an attention-only deployment: the longest cached full-block prefix."""
        h = full_block_hashes
        if (type(h) is _NDARRAY and h.dtype is _UINT64 and h.strides == _HASH_STRIDES
                and (shape := h.shape)[1] == 2 and shape[0] <= INT32_MAX):
            count = shape[0]
            hashes = from_buffer_cdata(_HASHES, h, False) if count else _NULL
        else:
            hashes, count = _arrays.hashes(h)
        n = (input_token_count if type(input_token_count) is int and 0 <= input_token_count <= INT32_MAX
             else _arrays.integer(input_token_count, "input_token_count"))
        result = new_cdata(_ACQUIRE_RESULT, _ACQUIRE_RESULT_INIT)  # fresh: the plan views it
        family = self._family  # _live(), inline
        if family.pending or orphans:
            drain(family)
        handle = self._handle
        if handle == _NULL:
            raise InvalidHandleError("manager is closed")
        outs = self._lease_outs
        try:
            lease_out = outs.pop()
        except IndexError:  # another thread holds it
            lease_out = new_cdata(_LEASE_OUT)
        status = _acquire_vanilla(handle, hashes, count, n,
                                  0 if lookup_policy is _USE_CACHE else _lookup_policy(lookup_policy), result,
                                  lease_out)
        if status:
            check(status)
        if result.status == 0:  # CTXC_ACQUIRE_ACQUIRED (_finish_acquire, inline)
            # Lease(self, handle) and AcquireResult(...), their __init__ inline: a Python call less each.
            lease = _new_object(Lease)
            lease._manager = self
            lease._handle = lease_out[0]
            outs.append(lease_out)
            lease._family = family
            family.members += 1
            lease._base_pages = lease._draft_pages = None
            lease._grows = False
            acquired = _new_object(AcquireResult)
            acquired.status = _ACQUIRED
            acquired.lease = lease
            acquired._plan = result
            return acquired
        outs.append(lease_out)
        return AcquireResult(_ACQUIRE_STATUSES[result.status], None, result)

    def probe_vanilla(self, full_block_hashes: Any, input_token_count: int) -> ReuseProbe:
        """What :meth:`acquire_vanilla` with ``LookupPolicy.USE_CACHE`` would reuse if called now (the same rule,
        so an acquire that follows with nothing in between reports the same plan), changing nothing: no recency,
        metrics, events or pins (TensorRT-LLM's probe_reuse). Arguments as for the acquire."""
        h = full_block_hashes  # (acquire_vanilla's fast paths, inline)
        if (type(h) is _NDARRAY and h.dtype is _UINT64 and h.strides == _HASH_STRIDES
                and (shape := h.shape)[1] == 2 and shape[0] <= INT32_MAX):
            count = shape[0]
            hashes = from_buffer_cdata(_HASHES, h, False) if count else _NULL
        else:
            hashes, count = _arrays.hashes(h)
        n = (input_token_count if type(input_token_count) is int and 0 <= input_token_count <= INT32_MAX
             else _arrays.integer(input_token_count, "input_token_count"))
        family = self._family  # _live(), inline
        if family.pending or orphans:
            drain(family)
        handle = self._handle
        if handle == _NULL:
            raise InvalidHandleError("manager is closed")
        pages = _empty(count, _INT32)  # the probe binds at most one page per hash
        outs = self._probe_outs
        try:
            out = outs.pop()
        except IndexError:  # another thread holds it
            out = new_output("ctxc_reuse_probe_t")
        status = _probe_vanilla(handle, hashes, count, n, from_buffer_cdata(_INT32S, pages, True) if count else _NULL,
                                count, out)
        if status:
            outs.append(out)
            check(status)
        bound = out.page_count
        if bound != count:
            pages = pages[:bound]
        pages.flags.writeable = False
        probe = _new_object(ReuseProbe)  # ReuseProbe.__init__, inline
        probe.kind = _PLAN_KINDS[out.kind]
        probe.matched_token_length = out.matched_token_length
        probe.reuse_token_length = out.reuse_token_length
        probe.pages = pages
        outs.append(out)
        return probe

    def acquire_hybrid(self, candidates: Sequence[HybridCheckpointCandidate], full_block_hashes: Any,
                       input_token_count: int, has_attention: bool,
                       lookup_policy: LookupPolicy = LookupPolicy.USE_CACHE) -> AcquireResult:
        """Lease on a hybrid / pure-recurrent deployment: the longest complete exact checkpoint.

        A candidate whose length is not in (0, input_token_count) is skipped, never an error."""
        hashes, count = _arrays.hashes(full_block_hashes)
        n = _arrays.count(input_token_count, "input_token_count")
        attention = _arrays.boolean(has_attention, "has_attention")
        c = _candidates(candidates)
        result = new_cdata(_ACQUIRE_RESULT, _ACQUIRE_RESULT_INIT)  # fresh: the plan views it
        lease_out = new_cdata(_LEASE_OUT)
        return self._finish_acquire(lib.ctxc_manager_acquire_hybrid(
            self._live(), c if candidates else _NULL, len(candidates), hashes, count, n, int(attention),
            _lookup_policy(lookup_policy), result, lease_out), result, lease_out)

    def acquire_hybrid_mtp(self, candidates: Sequence[HybridCheckpointCandidate], full_block_hashes: Any,
                           input_token_count: int,
                           lookup_policy: LookupPolicy = LookupPolicy.USE_CACHE) -> AcquireResult:
        """Lease on a hybrid model drafting with an MTP head: the longest complete Hybrid+MTP checkpoint.

        A checkpoint of exact length E keeps its boundary token private: it binds floor((E - 1) / page_size) base
        and draft pages plus its recurrent and partial-KV slots. Plain hybrid checkpoints never hit here. A
        candidate whose length is not in [1, input_token_count) is skipped, never an error."""
        hashes, count = _arrays.hashes(full_block_hashes)
        n = _arrays.count(input_token_count, "input_token_count")
        c = _candidates(candidates)
        result = new_cdata(_ACQUIRE_RESULT, _ACQUIRE_RESULT_INIT)  # fresh: the plan views it
        lease_out = new_cdata(_LEASE_OUT)
        return self._finish_acquire(lib.ctxc_manager_acquire_hybrid_mtp(
            self._live(), c if candidates else _NULL, len(candidates), hashes, count, n,
            _lookup_policy(lookup_policy), result, lease_out), result, lease_out)

    def acquire_spec(self, full_block_hashes: Any, input_token_count: int,
                     lookup_policy: LookupPolicy = LookupPolicy.USE_CACHE) -> AcquireResult:
        """Lease for greedy, non-hybrid EAGLE: one coherent paired record, boundary page replayed."""
        hashes, count = _arrays.hashes(full_block_hashes)
        n = (input_token_count if type(input_token_count) is int and 0 <= input_token_count <= INT32_MAX
             else _arrays.integer(input_token_count, "input_token_count"))
        result = new_cdata(_ACQUIRE_RESULT, _ACQUIRE_RESULT_INIT)  # fresh: the plan views it
        lease_out = new_cdata(_LEASE_OUT)
        return self._finish_acquire(lib.ctxc_manager_acquire_spec(
            self._live(), hashes, count, n, 0 if lookup_policy is _USE_CACHE else _lookup_policy(lookup_policy),
            result, lease_out), result, lease_out)

    def hybrid_candidate_lengths(self, input_token_count: int, full_block_hashes: Any = None) -> list[int]:
        """Stored checkpoint lengths below input_token_count, longest first. With the prompt's full-block hashes,
        only the checkpoints that hang off the prompt's own block chain (found in O(blocks))."""
        n = _arrays.integer(input_token_count, "input_token_count")
        if full_block_hashes is None:
            call = lambda buf, cap, cnt: lib.ctxc_manager_hybrid_candidate_lengths(self._live(), n, buf, cap, cnt)  # noqa: E731
        else:
            hashes = _arrays.hash_array(full_block_hashes)
            pointer = _arrays.hash_pointer(hashes)
            call = lambda buf, cap, cnt: lib.ctxc_manager_hybrid_candidate_lengths_for(  # noqa: E731
                self._live(), n, pointer, hashes.shape[0], buf, cap, cnt)
        return [int(x) for x in self._two_call(call, "int32_t", np.int32)]

    # -- grow / snapshots --------------------------------------------------------------------------------------
    @staticmethod
    def _lease_handle(lease: Any) -> Any:
        """``lease._live_handle()`` of a Lease (inline: every per-request call takes one)."""
        if type(lease) is not Lease and not isinstance(lease, Lease):
            raise ArgumentTypeError(f"lease must be a Lease, got {type(lease).__name__}")
        family = lease._family
        if family.pending or orphans:
            drain(family)
        handle = lease._handle
        if handle == _NULL:
            raise InvalidHandleError("lease was destroyed")
        return handle

    def grow_base_pages(self, lease: Lease, count: int) -> bool:
        """Append ``count`` private base pages; False (nothing changed) when capacity is short."""
        handle = self._lease_handle(lease)
        outs = self._ok_outs
        try:
            ok = outs.pop()
        except IndexError:  # another thread holds it
            ok = new_cdata(_OK_OUT)
        status = _grow_base_pages(self._live(), handle, count if type(count) is int and 0 <= count <= INT32_MAX
                                  else _arrays.integer(count, "count"), ok)
        if status:
            check(status)
        lease._base_pages = lease._draft_pages = None  # lease._changed(), inline
        grown = bool(ok[0])
        outs.append(ok)
        return grown

    def grow_spec_pages(self, lease: Lease, base_count: int, draft_count: int) -> bool:
        handle = self._lease_handle(lease)
        ok = new_cdata(_OK_OUT)
        status = lib.ctxc_manager_grow_spec_pages(self._live(), handle, _arrays.count(base_count, "base_count"),
                                                  _arrays.count(draft_count, "draft_count"), ok)
        if status:
            check(status)
        lease._base_pages = lease._draft_pages = None
        return bool(ok[0])

    def reserve_hybrid_snapshots(self, lease: Lease, needs_partial_kv_snapshot: bool) -> HybridSnapshotReservation | None:
        """Reserve producer snapshot slots; None under retention pressure (skip the capture)."""
        handle = self._lease_handle(lease)
        partial = _arrays.boolean(needs_partial_kv_snapshot, "needs_partial_kv_snapshot")
        out = ffi.new("ctxc_hybrid_snapshot_reservation_t *")
        ok = ffi.new("int32_t *")
        check(lib.ctxc_manager_reserve_hybrid_snapshots(self._live(), handle, int(partial), out, ok))
        if not ok[0]:
            return None
        return HybridSnapshotReservation(out.recurrent_snapshot_slot, _optional_slot(out.partial_kv_snapshot_slot))

    def release_restored_hybrid_snapshots(self, lease: Lease) -> None:
        check(lib.ctxc_manager_release_restored_hybrid_snapshots(self._live(), self._lease_handle(lease)))

    def retire_hybrid_snapshot_reservation(self, lease: Lease, reservation: HybridSnapshotReservation) -> None:
        handle = self._lease_handle(lease)
        check(lib.ctxc_manager_retire_hybrid_snapshot_reservation(self._live(), handle, _reservation(reservation)))

    # -- publish ----------------------------------------------------------------------------------------------
    @staticmethod
    def _publish_result(status: int, out: Any) -> PublishResult:
        if status:
            check(status)
        # out's page view dies with the next mutating call: copied now (bytes)
        pages = out.canonical_base_page_count
        return PublishResult(_PUBLISH_STATUSES[out.status], out.record or None,
                             _buffer(out.canonical_base_pages, pages * 4)[:] if pages else b"",
                             out.published_base_full_block_count)

    def publish(self, lease: Lease, full_block_hashes: Any, resident_state_length: int,
                tokens: Any = None, event_keys: KvEventKeys | None = None,
                retention: RetentionSpec | None = None, extend_record: bool = False) -> PublishResult:
        """Publish the lease's first min(len(hashes), resident // page_size) blocks as one record. ``tokens``
        (the prompt's token ids, at least the published blocks'): required once KV events are on.
        ``event_keys``: the request's LoRA adapter and media items, which its BlockStored events name
        (``lora_name``, ``extra_keys``); read only while events are on. ``retention``: how long the record should
        stay (:class:`ctxcache.RetentionSpec`; None: the default priority, plain LRU). ``extend_record`` (vanilla
        leases only, else ContractError): grow the lease's own record, the one its last publication created or
        grew, into this longer one instead of adding a nested record (it is superseded: no eviction, no metrics,
        no BlockRemoved); a chunked prefill that publishes every chunk keeps one record. A spec lease's new
        record supersedes the record the lease hit when it dominates it (docs/ENGINES.md); both kinds count in
        ``metrics.superseded_records``."""
        if retention is not None:
            return self._retained(lease, retention, lambda: self.publish(lease, full_block_hashes,
                                                                         resident_state_length, tokens, event_keys,
                                                                         extend_record=extend_record))
        if type(lease) is not Lease and not isinstance(lease, Lease):  # _lease_handle(lease), inline
            raise ArgumentTypeError(f"lease must be a Lease, got {type(lease).__name__}")
        family = lease._family
        if family.pending or orphans:
            drain(family)
        handle = lease._handle
        if handle == _NULL:
            raise InvalidHandleError("lease was destroyed")
        if extend_record is not lease._grows:  # the lease's growth changes (rare: the default costs this test only)
            self._set_growth(lease, handle, extend_record)
        h = full_block_hashes
        if (type(h) is _NDARRAY and h.dtype is _UINT64 and h.strides == _HASH_STRIDES
                and (shape := h.shape)[1] == 2 and shape[0] <= INT32_MAX):
            count = shape[0]
            hashes = from_buffer_cdata(_HASHES, h, False) if count else _NULL
        else:
            hashes, count = _arrays.hashes(h)
        resident = (resident_state_length if type(resident_state_length) is int
                    and 0 <= resident_state_length <= INT32_MAX
                    else _arrays.integer(resident_state_length, "resident_state_length"))
        if tokens is not None or event_keys is not None:
            pointer, token_count = _NO_TOKENS if tokens is None else _token_pointer(_arrays.int32_array(tokens))
            keep: list[Any] = []
            keys = c_event_keys(event_keys, keep)
        if self._family is not family:  # _live(), inline (this manager's own lease: drained just above)
            family = self._family
            if family.pending or orphans:
                drain(family)
        manager = self._handle
        if manager == _NULL:
            raise InvalidHandleError("manager is closed")
        outs = self._publish_outs
        try:
            out = outs.pop()
        except IndexError:  # another thread holds it
            out = new_output("ctxc_publish_result_t")
        # Without tokens and keys, the C call that takes neither (the same function, fewer arguments to convert).
        status = (_publish(manager, handle, hashes, count, resident, out) if tokens is None and event_keys is None
                  else _publish_with_tokens(manager, handle, hashes, count, resident, pointer, token_count, keys,
                                            out))
        if status:
            check(status)
        pages = out.canonical_base_page_count  # (_publish_result, inline; PublishResult's __init__ too)
        published = _new_object(PublishResult)
        published.status = _PUBLISH_STATUSES[out.status]
        published.record = out.record or None
        published._pages = _buffer(out.canonical_base_pages, pages * 4)[:] if pages else b""
        published.published_base_full_block_count = out.published_base_full_block_count
        outs.append(out)
        return published

    def publish_hybrid(self, lease: Lease, full_block_hashes: Any, checkpoint: HybridCheckpointKey,
                       snapshots: HybridSnapshotReservation, tokens: Any = None,
                       event_keys: KvEventKeys | None = None,
                       retention: RetentionSpec | None = None) -> PublishResult:
        """Publish one captured exact checkpoint (its floor(exact_length / page_size) full-block hashes).
        ``tokens``, ``event_keys`` and ``retention`` as for :meth:`publish`."""
        return self._retained(lease, retention, lambda: self._publish_checkpoint(
            lib.ctxc_manager_publish_hybrid_with_tokens, lease, full_block_hashes, checkpoint, snapshots, tokens,
            event_keys))

    def publish_hybrid_mtp(self, lease: Lease, full_block_hashes: Any, checkpoint: HybridCheckpointKey,
                           snapshots: HybridSnapshotReservation, tokens: Any = None,
                           event_keys: KvEventKeys | None = None,
                           retention: RetentionSpec | None = None) -> PublishResult:
        """Publish one captured Hybrid+MTP checkpoint of exact length E >= 1: its floor((E - 1) / page_size)
        full-block hashes, and both snapshot slots reserved by this lease. The record keeps base and an equally
        long draft path. ``tokens``, ``event_keys`` and ``retention`` as for :meth:`publish`."""
        return self._retained(lease, retention, lambda: self._publish_checkpoint(
            lib.ctxc_manager_publish_hybrid_mtp_with_tokens, lease, full_block_hashes, checkpoint, snapshots,
            tokens, event_keys))

    @staticmethod
    def _set_growth(lease: Lease, handle: Any, extend_record: Any) -> None:
        """ctxc_lease_set_publication_growth to what ``extend_record`` asks, remembered on the lease."""
        grows = _arrays.boolean(extend_record, "extend_record")
        if grows is not lease._grows:
            growth = PublicationGrowth.EXTEND_LEASE_RECORD if grows else PublicationGrowth.NEW_RECORD
            check(lib.ctxc_lease_set_publication_growth(handle, growth))
            lease._grows = grows

    def _retained(self, lease: Lease, retention: RetentionSpec | None,
                  publish: Callable[[], PublishResult]) -> PublishResult:
        """``publish()`` with ``retention`` on the lease for that one call (ctxc_lease_set_retention, then back
        to the default)."""
        if retention is None:
            return publish()
        handle = self._lease_handle(lease)
        keep: list[Any] = []
        check(lib.ctxc_lease_set_retention(handle, c_retention_spec(retention, keep)))
        try:
            return publish()
        finally:
            lib.ctxc_lease_set_retention(handle, _NULL)

    def _publish_checkpoint(self, function: Any, lease: Lease, full_block_hashes: Any,
                            checkpoint: HybridCheckpointKey, snapshots: HybridSnapshotReservation,
                            tokens: Any, event_keys: KvEventKeys | None) -> PublishResult:
        handle = self._lease_handle(lease)
        hashes, count = _arrays.hashes(full_block_hashes)
        key = _checkpoint_key(checkpoint)
        pointer, token_count = _NO_TOKENS if tokens is None else _token_pointer(_arrays.int32_array(tokens))
        keep: list[Any] = []
        keys = c_event_keys(event_keys, keep)
        out = new_output("ctxc_publish_result_t")
        return self._publish_result(function(self._live(), handle, hashes, count, key, _reservation(snapshots),
                                             pointer, token_count, keys, out), out)

    def evict_record(self, record_id: int) -> None:
        check(lib.ctxc_manager_evict_record(self._live(), _arrays.integer(record_id, "record_id", maximum=2**64 - 1)))

    # -- retention (ctxcache.retention, docs/RETENTION.md) -----------------------------------------------------
    def set_retention_time(self, seconds: float) -> None:
        """Drive the retention clock (seconds, any origin, never backwards) from now on instead of the steady
        clock, applying the expiries it reaches: a replay drives it from its trace, a test step by step."""
        check(lib.ctxc_manager_set_retention_time(self._live(), clock_ns(seconds)))

    def record_priority(self, record_id: int) -> int:
        """The record's eviction rank now, 0..100 (the lowest goes first, LRU within one)."""
        out = ffi.new("int32_t *")
        check(lib.ctxc_manager_record_priority(self._live(), _arrays.integer(record_id, "record_id",
                                                                             maximum=2**64 - 1), out))
        return int(out[0])

    def set_pin_budget(self, fraction: float) -> None:
        """The fraction of each pool pinned records may hold (0, the default, refuses every pin)."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise ArgumentTypeError(f"fraction must be a number, got {type(fraction).__name__}")
        if not 0.0 <= fraction <= 1.0:
            raise InvalidArgumentError(f"fraction must be in [0, 1], got {fraction}")
        check(lib.ctxc_manager_set_pin_budget(self._live(), float(fraction)))

    def pin_record(self, record_id: int, duration: float | None = None) -> None:
        """Keep the record resident until :meth:`unpin_record` or for ``duration`` seconds. Past the budget:
        :class:`ctxcache.ContractError` naming the pool and the numbers, nothing changed."""
        ns = duration_ns(duration, "duration")
        check(lib.ctxc_manager_pin_record(self._live(), _arrays.integer(record_id, "record_id", maximum=2**64 - 1),
                                          ns))

    def unpin_record(self, record_id: int) -> None:
        check(lib.ctxc_manager_unpin_record(self._live(), _arrays.integer(record_id, "record_id",
                                                                          maximum=2**64 - 1)))

    @property
    def retention_metrics(self) -> RetentionMetrics:
        m = new_output("ctxc_retention_metrics_t")
        check(lib.ctxc_manager_retention_metrics(self._live(), m))
        return retention_metrics_of(m)

    def clear(self) -> None:
        """A prefix-cache reset: evict every record, so no lookup finds anything afterwards (with KV events on: one
        AllBlocksCleared instead of the removals). :class:`ctxcache.ContractError` (nothing changed) while leases
        are live: their publications would refill the cache the reset empties."""
        check(lib.ctxc_manager_clear(self._live()))

    # -- inspection ---------------------------------------------------------------------------------------------
    @property
    def metrics(self) -> ManagerMetrics:
        m = new_output("ctxc_manager_metrics_t")
        check(lib.ctxc_manager_metrics(self._live(), m))
        return ManagerMetrics(m.evicted_records, m.reclaimed_base_kv_pages, m.reclaimed_draft_kv_pages,
                              m.reclaimed_recurrent_snapshots, m.reclaimed_partial_kv_snapshots, m.trimmed_records,
                              m.trimmed_blocks, m.prefix_cache_queries, m.prefix_cache_hits, m.superseded_records)

    @property
    def live_lease_count(self) -> int:
        out = ffi.new("size_t *")
        check(lib.ctxc_manager_live_lease_count(self._live(), out))
        return int(out[0])

    @property
    def metadata_bytes(self) -> int:
        out = ffi.new("size_t *")
        check(lib.ctxc_manager_metadata_bytes(self._live(), out))
        return int(out[0])

    def check_invariants(self) -> None:
        """Raise InvariantError describing the first inconsistency in the whole state."""
        check(lib.ctxc_manager_check_invariants(self._live()))

    def attach_host_tier(self, capacity_pages: int, write_policy: Any = "back",
                         store: BookkeepingStore | None = None) -> HostTier:
        """Attaches a host-memory tier of ``capacity_pages`` slots (ctxcache.host_tier): ``write_policy``
        ``"back"`` (blocks the device evicts, the default) or ``"through"`` (blocks each publication makes
        canonical), or a HostWritePolicy; ``store``: a BookkeepingStore shared with other managers' tiers (then
        ``capacity_pages`` may be 0). ContractError when one is attached. Returns its view."""
        return _host_tier.attach(self, capacity_pages, write_policy, store)

    def detach_host_tier(self) -> None:
        """Detaches and destroys the host tier (what it held is gone); nothing when there is none."""
        check(lib.ctxc_manager_detach_host_tier(self._live()))

    @property
    def host_tier(self) -> HostTier | None:
        """The attached host tier's view, or None."""
        return _host_tier.attached(self)

    def _two_call(self, call: Any, ctype: str, dtype: Any) -> np.ndarray:
        count = ffi.new("size_t *")
        status = call(_NULL, 0, count)
        if status not in (0, 7):  # CTXC_OK, CTXC_E_BUFFER_TOO_SMALL (the size query)
            check(status)
        n = count[0]
        out = np.empty(n, dtype=dtype)
        if n:
            check(call(ffi.cast(ctype + " *", ffi.from_buffer(out, require_writable=True)), n, count))
        return out
