"""Bounded sliding-window paging: a model that reads only its last W positions, with reuse off, keeps only its window.

::

    backend = ctxcache.DeviceBackend("cpu")
    pool = ctxcache.KvPagePool(backend, num_pages=64, page_size=16, layers=[(8, 128)])
    table = ctxcache.KvPageTable(backend, max_batch=8, max_pages_per_seq=256, num_pages=64, mode="sparse_window")
    with BoundedSwaKVPageManager(pool, table, window_size_tokens=256) as manager:
        with manager.begin_request([ResidentRef(0, 1)]) as request:
            request.prepare_prefill([prompt_length]); ...; request.complete_prefill()
            request.prepare_decode_step([prompt_length + 1]); ...; request.complete_decode_step()
            request.finish()

Each sequence takes a fixed private reservation of ``2 * (ceil(W / page_size) + 1) + 1`` pages at
``begin_request``; its retained logical pages ``[floor(max(0, e - W) / P), ceil(e / P))`` for KV endpoint e are
bound in the sparse-window table; a page that left the window stays mapped until ``complete_*``. Every check is
the library's (:class:`ctxcache.ContractError`); capacity is :class:`ctxcache.RequestFailedError`, a failed
synchronisation :class:`ctxcache.PoisonedError` until :meth:`BoundedSwaKVPageManager.shutdown` succeeds.
Lifetimes as the coordinator's (docs: ctxcache.runtime). Single writer.

The request facade runs on this backend too: ``ctxcache.ManagedKVCacheRequest.begin(manager, requests, context)``
drives the same windows from the engine's decoding context (one chunk per ``prepare_swa_prefill``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import _arrays
from .._ffi import check, ffi, lib, new_output
from .._resource import Handle
from ..device import KvLengths, KvPagePool, KvPageTable
from ..errors import ArgumentTypeError
from ._marshal import (
    _create_synchronized,
    _destroy_synchronized,
    _int32s,
    _pointer,
    _register_synchronizer,
    _resident,
    _swa_state,
)
from .types import SwaState, Synchronizer  # SwaState: the state of a window (the request facade returns it too)

_NULL = ffi.NULL


def _destroy_manager(handle: Any) -> int:
    """ctxc_swa_manager_destroy, then forget the manager's synchronizer."""
    return _destroy_synchronized(lib.ctxc_swa_manager_destroy, handle)


def _typed(value: Any, kind: type[Handle], name: str) -> Any:
    if not isinstance(value, kind):
        raise ArgumentTypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return value._live()


class BoundedSwaKVPageManager(Handle):
    """The manager over a pool, a sparse-window table and (optional) lengths compacted with the batch."""

    _destroy = staticmethod(_destroy_manager)
    _what = "manager"
    _rank = 1  # after its request, when both are queued
    # ManagedKVCacheRequest.begin on this backend: ctxc_kv_request_begin_swa; the request's `swa_manager` is this one.
    _begin_kv_request = staticmethod(lib.ctxc_kv_request_begin_swa)
    _reuses_context = False

    def __init__(self, pool: KvPagePool, table: KvPageTable, lengths: KvLengths | None = None, *,
                 window_size_tokens: int, max_batch: int = 8, synchronizer: Synchronizer | None = None):
        keep: list[Any] = [pool, table]
        c_pool = _typed(pool, KvPagePool, "pool")
        c_table = _typed(table, KvPageTable, "table")
        c_lengths = _NULL
        if lengths is not None:
            c_lengths = _typed(lengths, KvLengths, "lengths")
            keep.append(lengths)
        options = ffi.new("ctxc_swa_manager_options_t *")
        lib.ctxc_swa_manager_options_init(options)
        options.max_batch = _arrays.integer(max_batch, "max_batch", minimum=None)
        options.window_size_tokens = _arrays.integer(window_size_tokens, "window_size_tokens", minimum=None)
        key = _register_synchronizer(synchronizer, options)
        out = ffi.new("ctxc_swa_manager_t **")
        _create_synchronized(key, lambda: lib.ctxc_swa_manager_create(c_pool, c_table, c_lengths, options, out), out)
        self.synchronizer = synchronizer
        super().__init__(out[0], tuple(keep))

    def _count(self, function: Any) -> int:
        out = ffi.new("int32_t *")
        check(function(self._live(), out))
        return int(out[0])

    @property
    def free_page_count(self) -> int:
        return self._count(lib.ctxc_swa_manager_free_page_count)

    @property
    def private_pages_per_sequence(self) -> int:
        return self._count(lib.ctxc_swa_manager_private_pages_per_sequence)

    def begin_request(self, resident_refs: Sequence[Any], *, stream: int | None = None) -> SwaRequest:
        """Admit one sequence per resident ref (RequestFailedError when the reservations do not fit)."""
        refs = list(resident_refs)
        c_refs = ffi.new("ctxc_resident_ref_t[]", max(1, len(refs)))
        for i, ref in enumerate(refs):
            c_refs[i].slot, c_refs[i].epoch = _resident(ref, f"resident_refs[{i}]")
        out = ffi.new("ctxc_swa_request_t **")
        check(lib.ctxc_swa_manager_begin_request(self._live(), c_refs, len(refs), _pointer(stream, "stream"), out))
        request = SwaRequest.__new__(SwaRequest)
        Handle.__init__(request, out[0], (self,))
        request.manager = self
        return request

    def shutdown(self) -> None:
        """Re-synchronise quarantined requests and free them (PoisonedError while a synchronisation fails)."""
        check(lib.ctxc_swa_manager_shutdown(self._live()))

    def check_invariants(self) -> None:
        check(lib.ctxc_swa_manager_check_invariants(self._live()))


class SwaRequest(Handle):
    """One request over a BoundedSwaKVPageManager; a context manager whose exit abandons it if unfinished."""

    _destroy = staticmethod(lib.ctxc_swa_request_destroy)
    _what = "request"
    manager: BoundedSwaKVPageManager  # set by begin_request()

    def prepare_prefill(self, lengths: Any) -> None:
        """One prefill chunk: row i's KV endpoint moves to lengths[i]."""
        keep: list[Any] = []
        check(lib.ctxc_swa_request_prepare_prefill(self._live(), *_int32s(lengths, "lengths", keep)))

    def complete_prefill(self) -> None:
        check(lib.ctxc_swa_request_complete_prefill(self._live()))

    def prepare_decode_step(self, endpoints: Any) -> None:
        """endpoints[i]: row i's current endpoint (it holds) or one more."""
        keep: list[Any] = []
        check(lib.ctxc_swa_request_prepare_decode_step(self._live(), *_int32s(endpoints, "endpoints", keep)))

    def complete_decode_step(self) -> None:
        check(lib.ctxc_swa_request_complete_decode_step(self._live()))

    def begin_batch_compaction(self, old_to_new: Any, new_batch_size: int, device_mapping: int | None = None) -> None:
        keep: list[Any] = []
        pointer, count = _int32s(old_to_new, "old_to_new", keep)
        check(lib.ctxc_swa_request_begin_batch_compaction(
            self._live(), pointer, count, _arrays.integer(new_batch_size, "new_batch_size", minimum=None),
            _pointer(device_mapping, "device_mapping")))

    def compact_batch(self) -> None:
        check(lib.ctxc_swa_request_compact_batch(self._live()))

    @property
    def batch_size(self) -> int:
        out = ffi.new("int32_t *")
        check(lib.ctxc_swa_request_batch_size(self._live(), out))
        return int(out[0])

    def state(self, row: int) -> SwaState:
        out = new_output("ctxc_swa_state_t")
        check(lib.ctxc_swa_request_state(self._live(), _arrays.integer(row, "row", minimum=None), out))
        return _swa_state(out)

    def finish(self) -> None:
        check(lib.ctxc_swa_request_finish(self._live()))
