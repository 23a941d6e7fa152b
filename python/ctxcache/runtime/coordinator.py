"""ContextCacheCoordinator: the context-cache coordinator over device objects (docs: ctxcache.runtime).

Contract: one C coordinator handle (ctxc_coordinator_t) with the handle protocol of ctxcache._resource; it keeps
its device objects alive in the library; its synchronizer is registered through ._marshal and forgotten when the
handle is destroyed. It begins its own requests (``_begin_kv_request``, called by ManagedKVCacheRequest.begin).
Single writer.
"""

from __future__ import annotations

from typing import Any

from .. import _arrays
from .._ffi import check, ffi, lib, new_output
from .._resource import Handle
from ..device import KvLengths, KvPagePool, KvPageTable, ResidentState, SnapshotStorage
from ..enums import (
    EvictionPolicy,
    HashAlgorithm,
    ModelStateKind,
)
from ..errors import ArgumentTypeError
from ..events import KvEventSource
from ..manager import eviction_policy_of
from ..retention import RetentionMetrics, clock_ns, retention_metrics_of
from ._marshal import (
    _create_synchronized,
    _destroy_coordinator,
    _device,
    _enum,
    _metrics,
    _register_synchronizer,
)
from .types import ContextCacheMetrics, SpecReuseContract, Synchronizer


class ContextCacheCoordinator(KvEventSource, Handle):
    """A context-cache coordinator over device objects (None where the profile does not use them): attention
    needs base_pool, base_table and base_lengths; a speculative profile that owns paged spec state the draft
    triple; a hybrid or pure recurrent model resident_state and snapshots."""

    _destroy = staticmethod(_destroy_coordinator)
    _what = "coordinator"
    _rank = 1  # after its requests, when both are queued
    # ManagedKVCacheRequest.begin on this backend: ctxc_kv_request_begin; the request's `coordinator` is this one.
    _begin_kv_request = staticmethod(lib.ctxc_kv_request_begin)
    _reuses_context = True

    def __init__(self, *, max_records: int = 1024, max_batch: int = 8, page_size: int = 0,
                 hash_algorithm: Any = HashAlgorithm.SHA256, hash_key: bytes | None = None,
                 model_state_kind: Any = ModelStateKind.ATTENTION_ONLY, spec: SpecReuseContract | None = None,
                 base_pool: KvPagePool | None = None, base_table: KvPageTable | None = None,
                 base_lengths: KvLengths | None = None, draft_pool: KvPagePool | None = None,
                 draft_table: KvPageTable | None = None, draft_lengths: KvLengths | None = None,
                 resident_state: ResidentState | None = None, snapshots: SnapshotStorage | None = None,
                 synchronizer: Synchronizer | None = None, eviction_policy: Any = EvictionPolicy.RECORD_LRU):
        keep: list[Any] = []
        resources = ffi.new("ctxc_coordinator_resources_t *")
        lib.ctxc_coordinator_resources_init(resources)
        resources.base_pool = _device(base_pool, KvPagePool, "base_pool", keep)
        resources.base_page_table = _device(base_table, KvPageTable, "base_table", keep)
        resources.base_lengths = _device(base_lengths, KvLengths, "base_lengths", keep)
        resources.draft_pool = _device(draft_pool, KvPagePool, "draft_pool", keep)
        resources.draft_page_table = _device(draft_table, KvPageTable, "draft_table", keep)
        resources.draft_lengths = _device(draft_lengths, KvLengths, "draft_lengths", keep)
        resources.resident_state = _device(resident_state, ResidentState, "resident_state", keep)
        resources.snapshots = _device(snapshots, SnapshotStorage, "snapshots", keep)
        options = ffi.new("ctxc_coordinator_options_t *")
        lib.ctxc_coordinator_options_init(options)
        options.max_records = _arrays.integer(max_records, "max_records", minimum=None)
        options.eviction_policy = eviction_policy_of(eviction_policy)
        options.max_batch = _arrays.integer(max_batch, "max_batch", minimum=None)
        options.page_size = _arrays.integer(page_size, "page_size", minimum=None)
        options.hash_algorithm = _enum(HashAlgorithm, hash_algorithm, "hash_algorithm")
        options.model_state_kind = _enum(ModelStateKind, model_state_kind, "model_state_kind")
        key_buffer = None
        if hash_key is not None:
            if not isinstance(hash_key, (bytes, bytearray)):
                raise ArgumentTypeError(f"hash_key must be bytes, got {type(hash_key).__name__}")
            if hash_key:
                key_buffer = ffi.from_buffer(hash_key)
                options.hash_key = ffi.cast("const uint8_t *", key_buffer)
                options.hash_key_length = len(hash_key)
        if spec is not None:
            if not isinstance(spec, SpecReuseContract):
                raise ArgumentTypeError(f"spec must be a SpecReuseContract or None, got {type(spec).__name__}")
            options.has_spec = 1
            options.owns_paged_spec_state = 1 if _arrays.boolean(spec.owns_paged_spec_state, "spec.owns_paged_spec_state") else 0
            options.future_dependency_tokens = _arrays.integer(spec.future_dependency_tokens,
                                                               "spec.future_dependency_tokens", minimum=None)
        key = _register_synchronizer(synchronizer, options)
        out = ffi.new("ctxc_coordinator_t **")
        _create_synchronized(key, lambda: lib.ctxc_coordinator_create(resources, options, out), out)
        del key_buffer
        self.synchronizer = synchronizer
        super().__init__(out[0], tuple(keep))

    @property
    def metrics(self) -> ContextCacheMetrics:
        out = new_output("ctxc_context_cache_metrics_t")
        check(lib.ctxc_coordinator_metrics(self._live(), out))
        return _metrics(out)

    def _info(self) -> Any:
        out = new_output("ctxc_coordinator_info_t")
        check(lib.ctxc_coordinator_info(self._live(), out))
        return out

    @property
    def page_size(self) -> int:
        return int(self._info().page_size)

    @property
    def poisoned(self) -> bool:
        return bool(self._info().poisoned)

    @property
    def active_request_count(self) -> int:
        return int(self._info().active_requests)

    @property
    def quarantined_request_count(self) -> int:
        return int(self._info().quarantined_requests)

    @property
    def supports_live_sequence_admission(self) -> bool:
        return bool(self._info().supports_live_sequence_admission)

    def shutdown(self) -> None:
        """Re-synchronise quarantined requests and free them. PoisonedError when a synchronisation still fails;
        RequestFailedError (poison cleared) when requests are still live."""
        check(lib.ctxc_coordinator_shutdown(self._live()))

    def check_invariants(self) -> None:
        """Raises :class:`ctxcache.InvariantError` naming the first violation."""
        check(lib.ctxc_coordinator_check_invariants(self._live()))

    def clear(self) -> None:
        """A prefix-cache reset: no later request reuses what was cached before (with KV events on, one
        AllBlocksCleared). :class:`ctxcache.ContractError` (nothing changed) while requests are active or
        quarantined."""
        check(lib.ctxc_coordinator_clear(self._live()))

    @property
    def retention_metrics(self) -> RetentionMetrics:
        """What eviction took at which priority in the coordinator's manager, and its expiries and pins."""
        out = new_output("ctxc_retention_metrics_t")
        check(lib.ctxc_coordinator_retention_metrics(self._live(), out))
        return retention_metrics_of(out)

    def set_retention_time(self, seconds: float) -> None:
        """Drive the retention clock of the coordinator's manager (seconds, any origin, never backwards:
        :class:`ctxcache.ContractError`, nothing changed) instead of the steady clock: a retention range's duration
        ends, and its blocks fall back to the default priority, when this clock passes it."""
        check(lib.ctxc_coordinator_set_retention_time(self._live(), clock_ns(seconds)))

    def __repr__(self) -> str:
        if self.closed:
            return "ContextCacheCoordinator(closed)"
        info = self._info()
        return (f"ContextCacheCoordinator(page_size={info.page_size}, active_requests={info.active_requests}, "
                f"poisoned={bool(info.poisoned)})")

