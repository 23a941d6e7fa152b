"""The runtime layer: a coordinator over device objects and the ManagedKVCacheRequest facade an engine drives.

::

    backend = ctxcache.DeviceBackend("cpu")
    pool = ctxcache.KvPagePool(backend, num_pages=64, page_size=16, layers=[(8, 128)])
    table = ctxcache.KvPageTable(backend, max_batch=8, max_pages_per_seq=32, num_pages=64)
    lengths = ctxcache.KvLengths(backend, 8)
    with ContextCacheCoordinator(base_pool=pool, base_table=table, base_lengths=lengths) as coordinator:
        context = DecodingContext([prompt], raw_input_lengths=[len(prompt)], generated_lengths=[0],
                                  status=[SequenceStatus.RUNNING], resident_refs=[ResidentRef(0, 1)])
        with ManagedKVCacheRequest.begin(coordinator, [Request(prompt)], context) as request:
            request.prepare_prefill()           # prefill from request.prefill_starts[row]
            ...                                 # the engine samples; context gains the lookahead token
            request.complete_prefill(context)
            ...                                 # prepare_decode_step / complete_decode_step per step
            request.finish()

Every check on values is the library's (a step out of order, a stale resident epoch, a map that reorders
survivors are :class:`ctxcache.ContractError`); Python checks only what the C call cannot see (types, numpy
dtypes and layouts, per-row lists of one length). A step the coordinator cannot serve raises
:class:`ctxcache.RequestFailedError`; a failed device synchronisation :class:`ctxcache.PoisonedError` (a
subclass), until :meth:`ContextCacheCoordinator.shutdown` succeeds.

Lifetimes: the coordinator keeps its device objects alive in the library (close them in any order); a request
keeps its coordinator alive in Python and never the other way round (no cycle). Closing a request before
``finish()`` abandons it (nothing is published). Closing a coordinator with live requests orphans them (their
later use raises InvalidHandleError) and raises LeasesOutstandingError.

The synchronizer: ``synchronizer(stream)`` (stream: the int address given to ``begin``, or None) is called from
inside coordinator and request calls (never from a finalizer: handles collected in a cycle are destroyed at the
next call, see _resource.py); it returns False, or raises, when the stream's work failed.
Single-writer: a coordinator, its requests and its device objects must not be used from several threads at once.
"""


# The subpackage (issue 25 item 3): types (the values), coordinator (ContextCacheCoordinator), request (the
# ManagedKVCacheRequest facade), swa (bounded sliding-window paging, the facade's second backend) and _marshal (the
# private conversion between these values and the C structs, and the synchronizer callback). No module here
# imports another in a cycle: each backend begins its own request.

from __future__ import annotations

from . import swa
from .coordinator import ContextCacheCoordinator
from .request import ManagedKVCacheRequest
from .swa import BoundedSwaKVPageManager, SwaRequest
from .types import (
    AdmitResult,
    ContextCacheMetrics,
    DecodingContext,
    Headroom,
    MediaItem,
    PoolMetrics,
    Request,
    ResidentRef,
    SequenceInfo,
    SpecReuseContract,
    SwaState,
    Synchronizer,
)

__all__ = [
    "AdmitResult", "ContextCacheCoordinator", "ContextCacheMetrics", "DecodingContext", "Headroom",
    "ManagedKVCacheRequest", "MediaItem", "PoolMetrics", "Request", "ResidentRef", "SequenceInfo",
    "SpecReuseContract", "SwaState", "Synchronizer", "BoundedSwaKVPageManager", "SwaRequest", "swa",
]

