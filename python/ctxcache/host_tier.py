"""A manager's host-memory tier (docs/TIERS.md): blocks the device evicted (write-back) or published
(write-through) are kept in host memory, and an acquire's device hit is extended by the blocks the tier holds
after it, loaded instead of recomputed.

``ContextCacheManager.attach_host_tier(capacity_pages)`` attaches one and returns a :class:`HostTier` view; the
view holds its manager, the manager never holds the view (no cycle), and the tier itself lives and dies with the
manager (or ``detach_host_tier()``). This version keeps the tier's bookkeeping: a bookkeeping-only replay sizes a
tier on a trace. Base-KV blocks; with a manager that has draft pages (EAGLE), also whether each slot holds its
draft page, and ``extend_spec_hit`` extends speculative hits. Hybrid acquires are not extended (the engine's tier
with bytes moves the pages themselves: ``sim.ReferenceEngine(host_tier_pages=)``).

A :class:`BookkeepingStore` stands for a KV store shared by several replicas (issue 27, bookkeeping): each
replica's tier is attached with ``store=``; every block a publication makes canonical is put there, and an
extension goes on from the host's run with the store's (``extend_hit_by_tier`` says how many blocks came from
each). A tier of 0 pages passes blocks to the store only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from . import _arrays
from ._ffi import check, ffi, lib, new_output
from ._resource import Family, Resource
from .errors import ArgumentTypeError, ContractError, InvalidArgumentError

if TYPE_CHECKING:
    from .manager import ContextCacheManager


class HostWritePolicy(IntEnum):
    """When blocks are written to the tier: at publication (every newly canonical block) or at eviction (every
    block the device drops; the default: the tier holds what the device no longer does)."""

    THROUGH = 0
    BACK = 1

    @property
    def label(self) -> str:
        return "through" if self is HostWritePolicy.THROUGH else "back"

    @classmethod
    def parse(cls, value: Any) -> HostWritePolicy:
        """A policy from itself, its value or its label (``"through"``, ``"back"``)."""
        if isinstance(value, str):
            for p in cls:
                if value == p.label:
                    return p
            raise ValueError(f"host write policy must be 'through' or 'back' (got {value!r})")
        return cls(value)


@dataclass(frozen=True)
class HostTierMetrics:
    capacity_pages: int
    resident_blocks: int
    writing_blocks: int
    pinned_blocks: int
    extend_calls: int
    hit_requests: int
    loaded_blocks: int
    written_blocks: int
    skipped_writes: int
    refused_writes: int
    dropped_blocks: int
    failed_loads: int
    metadata_bytes: int
    store_loaded_blocks: int  # blocks extensions took from the store (loaded_blocks counts the host's)
    store_hit_requests: int  # extensions that took at least one block from the store


_METRIC_FIELDS = tuple(HostTierMetrics.__dataclass_fields__)


@dataclass(frozen=True)
class BookkeepingStoreMetrics:
    capacity_pages: int
    resident_blocks: int
    put_calls: int
    written_blocks: int
    skipped_puts: int
    refused_puts: int
    dropped_blocks: int
    get_calls: int
    hit_calls: int
    hit_blocks: int
    metadata_bytes: int


_STORE_METRIC_FIELDS = tuple(BookkeepingStoreMetrics.__dataclass_fields__)


class BookkeepingStore(Resource):
    """A KV store shared by several managers' host tiers, modelled by its bookkeeping: which blocks a store of
    ``capacity_pages`` pages holds, dropped least recently used first (``ctxcache/c/store.h``). Safe to share
    between managers on different threads. ``close()`` (or ``with``) releases this handle; tiers attached with it
    keep the store until they are detached or their managers closed."""

    __slots__ = ("_handle", "_family", "__weakref__")
    _destroy = staticmethod(lib.ctxc_bookkeeping_store_destroy)
    _what = "store"

    def __init__(self, capacity_pages: int) -> None:
        self._handle = _arrays._NULL
        self._join(Family())
        options = ffi.new("ctxc_bookkeeping_store_options_t *")
        lib.ctxc_bookkeeping_store_options_init(options)
        options.capacity_pages = _arrays.integer(capacity_pages, "capacity_pages")
        out = ffi.new("ctxc_bookkeeping_store_t **")
        check(lib.ctxc_bookkeeping_store_create(options, out))
        self._handle = out[0]

    def probe(self, full_block_hashes: Any) -> int:
        """The longest run of ``full_block_hashes`` from its first the store holds, changing nothing."""
        hashes, count = _arrays.hashes(full_block_hashes)
        out = ffi.new("size_t *")
        check(lib.ctxc_bookkeeping_store_probe(self._live(), hashes, count, out))
        return int(out[0])

    @property
    def metrics(self) -> BookkeepingStoreMetrics:
        out = new_output("ctxc_bookkeeping_store_metrics_t")
        check(lib.ctxc_bookkeeping_store_metrics(self._live(), out))
        return BookkeepingStoreMetrics(*(int(getattr(out, f)) for f in _STORE_METRIC_FIELDS))

    def check_invariants(self) -> None:
        check(lib.ctxc_bookkeeping_store_check_invariants(self._live()))


class HostTier:
    """The host tier attached to ``manager`` (see the module comment). Calls raise InvalidHandleError once the
    manager is closed and ContractError once the tier was detached."""

    __slots__ = ("_manager",)

    def __init__(self, manager: ContextCacheManager) -> None:
        self._manager = manager

    def extend_hit(self, full_block_hashes: Any, input_token_count: int, device_blocks: int) -> int:
        """The blocks the tier adds to a device hit of ``device_blocks`` blocks of a prompt of
        ``input_token_count`` tokens whose full blocks hash to ``full_block_hashes``: the longest run after the
        device hit the tier holds, never covering the prompt's last token (loaded now: bookkeeping)."""
        return self._hit(lib.ctxc_manager_host_tier_extend_hit, full_block_hashes, input_token_count, device_blocks)

    def extend_hit_by_tier(self, full_block_hashes: Any, input_token_count: int,
                           device_blocks: int) -> tuple[int, int]:
        """:meth:`extend_hit`, its blocks split by where they came from: ``(host_blocks, store_blocks)``."""
        hashes, count = _arrays.hashes(full_block_hashes)
        n = _arrays.integer(input_token_count, "input_token_count")
        d = _arrays.integer(device_blocks, "device_blocks")
        host, store = ffi.new("int32_t *"), ffi.new("int32_t *")
        check(lib.ctxc_manager_host_tier_extend_hit_by_tier(self._manager._live(), hashes, count, n, d, host, store))
        return int(host[0]), int(store[0])

    def extend_spec_hit(self, full_block_hashes: Any, input_token_count: int, device_blocks: int) -> int:
        """The speculative extension of an EAGLE deployment's tier (a manager with draft pages): after a
        speculative device hit that binds ``device_blocks`` blocks (and replays the next), a run of k slots whose
        every slot after the first holds its draft page loads k - 1 blocks, base and draft pages, and the prefill
        replays the block of its last slot (loaded now: bookkeeping). The store is not asked."""
        return self._hit(lib.ctxc_manager_host_tier_extend_spec_hit, full_block_hashes, input_token_count,
                         device_blocks)

    def probe_hit(self, full_block_hashes: Any, input_token_count: int, device_blocks: int) -> int:
        """What :meth:`extend_hit` would answer now, changing nothing (no load, no recency, no metrics)."""
        return self._hit(lib.ctxc_manager_host_tier_probe_hit, full_block_hashes, input_token_count, device_blocks)

    def _hit(self, call: Any, full_block_hashes: Any, input_token_count: int, device_blocks: int) -> int:
        hashes, count = _arrays.hashes(full_block_hashes)
        n = _arrays.integer(input_token_count, "input_token_count")
        d = _arrays.integer(device_blocks, "device_blocks")
        out = ffi.new("int32_t *")
        check(call(self._manager._live(), hashes, count, n, d, out))
        return int(out[0])

    @property
    def metrics(self) -> HostTierMetrics:
        attached = ffi.new("int32_t *")
        out = new_output("ctxc_host_tier_metrics_t")
        check(lib.ctxc_manager_host_tier_metrics(self._manager._live(), attached, out))
        if not attached[0]:
            raise ContractError("the manager has no host tier (it was detached)")
        return HostTierMetrics(*(int(getattr(out, f)) for f in _METRIC_FIELDS))

    def clear(self) -> None:
        """Drops every block the tier holds (the manager's clear() does not)."""
        check(lib.ctxc_manager_host_tier_clear(self._manager._live()))

    def check_invariants(self) -> None:
        check(lib.ctxc_manager_host_tier_check_invariants(self._manager._live()))


def attach(manager: ContextCacheManager, capacity_pages: int,
           write_policy: Any = HostWritePolicy.BACK, store: BookkeepingStore | None = None) -> HostTier:
    options = ffi.new("ctxc_host_tier_options_t *")
    lib.ctxc_host_tier_options_init(options)
    options.capacity_pages = _arrays.integer(capacity_pages, "capacity_pages")
    try:
        options.write_policy = int(HostWritePolicy.parse(write_policy))
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from None
    if store is not None:
        if not isinstance(store, BookkeepingStore):
            raise ArgumentTypeError(f"store must be a BookkeepingStore, got {type(store).__name__}")
        options.store = store._live()
    check(lib.ctxc_manager_attach_host_tier(manager._live(), options))
    return HostTier(manager)


def attached(manager: ContextCacheManager) -> HostTier | None:
    flag = ffi.new("int32_t *")
    check(lib.ctxc_manager_host_tier_metrics(manager._live(), flag, ffi.NULL))
    return HostTier(manager) if flag[0] else None
