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

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from . import _arrays
from ._ffi import check, ffi, lib, new_output
from .device import KvLengths, KvPagePool, KvPageTable, ResidentState, SnapshotStorage, _Handle
from .enums import (
    AdmitSequenceStatus,
    CommitPolicy,
    EvictionPolicy,
    HashAlgorithm,
    LookupPolicy,
    MediaModality,
    ModelStateKind,
    ReusePlanKind,
    ScalarType,
    SequenceStatus,
    TokenStateContract,
)
from .errors import ArgumentTypeError, ConcurrentUseError, InvalidArgumentError
from .events import KvEventSource
from .manager import eviction_policy_of

_NULL = ffi.NULL
_INHERIT = int(lib.CTXC_INHERIT_LOOKUP_POLICY)

Synchronizer = Callable[[Optional[int]], Any]  # Optional: the alias is evaluated at import (Python 3.9)


# ---- values ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResidentRef:
    """A fixed resident slot (page-table row, recurrent-state row) and its epoch (> 0, growing with each reuse)."""

    slot: int
    epoch: int


@dataclass(frozen=True)
class Headroom:
    """KV positions one decoder execution may address beyond its materialized endpoint."""

    base_extra_tokens: int = 1
    draft_extra_tokens: int = 0


@dataclass(frozen=True)
class MediaItem:
    """One media item of a prompt: its bytes (its identity in block keys) and the tokens it occupies,
    [first_token, first_token + token_count)."""

    data: Any  # bytes-like or a numpy array (its raw bytes)
    first_token: int
    token_count: int
    modality: MediaModality = MediaModality.IMAGE


@dataclass(frozen=True)
class Request:
    """One sequence of a generation request: prompt token ids (int32 array or ints), LoRA name, media items, and an
    optional per-sequence lookup policy (None: the request's)."""

    token_ids: Any
    lora_name: str = ""
    media: Sequence[MediaItem] = ()
    lookup_policy: LookupPolicy | None = None


@dataclass
class DecodingContext:
    """The engine's live batch, one entry per row in every list (the engine updates it in place).

    token_ids: per row the full history (prompt + generated + the lookahead token), an int32 array (read in place)
    or a sequence of ints. resident_refs are read by ``begin`` only."""

    token_ids: list[Any]
    raw_input_lengths: Sequence[int]
    generated_lengths: Sequence[int]
    status: Sequence[SequenceStatus]
    resident_refs: Sequence[ResidentRef] = ()

    @property
    def active_batch_size(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class SpecReuseContract:
    """A speculative deployment: owns_paged_spec_state = the drafter has its own KV pool (EAGLE)."""

    owns_paged_spec_state: bool = True
    future_dependency_tokens: int = 1


@dataclass(frozen=True)
class PoolMetrics:
    free: int
    capacity: int


@dataclass(frozen=True)
class ContextCacheMetrics:
    """Every counter of the coordinator (cumulative), then the occupancy now."""

    admitted_sequences: int
    hit_sequences: int
    media_aware_sequences: int
    lookup_bypass_sequences: int
    forced_cold_sequences: int
    standard_plans: int
    no_reusable_prefix_plans: int
    full_input_rewind_plans: int
    matched_tokens: int
    reused_tokens: int
    publication_attempts: int
    committed_publications: int
    existing_publications: int
    published_endpoints: int
    hybrid_restores: int
    hybrid_snapshot_pressure_skips: int
    hybrid_capture_synchronizations: int
    spec_full_page_replays: int
    spec_pair_publications: int
    planning_nanoseconds: int
    media_boundary_trims: int
    current_records: int
    base_kv_pages: PoolMetrics
    draft_kv_pages: PoolMetrics
    recurrent_snapshots: PoolMetrics
    partial_kv_snapshots: PoolMetrics
    evicted_records: int
    reclaimed_base_kv_pages: int
    reclaimed_draft_kv_pages: int
    reclaimed_recurrent_snapshots: int
    reclaimed_partial_kv_snapshots: int


_POOLS = ("base_kv_pages", "draft_kv_pages", "recurrent_snapshots", "partial_kv_snapshots")


def _metrics(c: Any) -> ContextCacheMetrics:
    values: dict[str, Any] = {}
    for name in ContextCacheMetrics.__dataclass_fields__:
        if name in _POOLS:
            values[name] = PoolMetrics(int(getattr(c, name + "_free")), int(getattr(c, name + "_capacity")))
        else:
            values[name] = int(getattr(c, name))
    return ContextCacheMetrics(**values)


@dataclass(frozen=True)
class SequenceInfo:
    """One batch row (or the pending joiner) as the coordinator tracks it."""

    resident: ResidentRef
    input_length: int
    token_count: int
    committed_length: int
    common_length: int
    matched_length: int
    reuse_length: int
    plan_kind: ReusePlanKind
    bypass: bool
    forced_cold: bool
    published_full_block_count: int
    base_pages: np.ndarray = field(repr=False)
    draft_pages: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class SwaState:
    """One sequence's window on the bounded-SWA backend (ctxc_swa_state_t)."""

    resident: ResidentRef
    exact_resident_token_count: int
    retained_logical_page_begin: int
    retained_logical_page_end: int
    bound_pages: int
    pending_retire_pages: int
    reserved_pages: int
    pending_endpoint: int | None
    peak_bound_pages: int


def _swa_state(out: Any) -> SwaState:
    return SwaState(resident=ResidentRef(int(out.resident.slot), int(out.resident.epoch)),
                    exact_resident_token_count=int(out.exact_resident_token_count),
                    retained_logical_page_begin=int(out.retained_logical_page_begin),
                    retained_logical_page_end=int(out.retained_logical_page_end),
                    bound_pages=int(out.bound_pages), pending_retire_pages=int(out.pending_retire_pages),
                    reserved_pages=int(out.reserved_pages),
                    pending_endpoint=None if out.pending_endpoint < 0 else int(out.pending_endpoint),
                    peak_bound_pages=int(out.peak_bound_pages))


@dataclass(frozen=True)
class AdmitResult:
    status: AdmitSequenceStatus
    prefill_start: int


# ---- argument conversion (types only: values are the library's to check) -------------------------------------


def _enum(enum_type: Any, value: Any, name: str) -> int:
    if isinstance(value, str):
        try:
            return int(enum_type[value.upper()])
        except KeyError:
            raise InvalidArgumentError(f"{name} must be one of {[m.name.lower() for m in enum_type]}, got {value!r}") from None
    return _arrays.integer(value, name, minimum=None)


def _pointer(value: Any, name: str) -> Any:
    if value is None:
        return _NULL
    return ffi.cast("void *", _arrays.integer(value, name, maximum=2**64 - 1))


def _headroom(value: Any, name: str = "headroom") -> tuple[int, int]:
    if isinstance(value, Headroom):
        value = (value.base_extra_tokens, value.draft_extra_tokens)
    if not isinstance(value, tuple) or len(value) != 2:
        raise ArgumentTypeError(f"{name} must be a Headroom or a (base_extra_tokens, draft_extra_tokens) tuple")
    return (_arrays.integer(value[0], f"{name}.base_extra_tokens", minimum=None),
            _arrays.integer(value[1], f"{name}.draft_extra_tokens", minimum=None))


def _c_headroom(value: Any, keep: list[Any]) -> Any:
    base, draft = _headroom(value)
    out = ffi.new("ctxc_kv_headroom_t *", {"base_extra_tokens": base, "draft_extra_tokens": draft})
    keep.append(out)
    return out


def _int32s(value: Any, name: str, keep: list[Any]) -> tuple[Any, int]:
    array = _arrays.int32_array(value, name)
    keep.append(array)
    return _arrays.int32_pointer(array), int(array.size)


def _resident(ref: Any, name: str) -> tuple[int, int]:
    if not isinstance(ref, ResidentRef):
        raise ArgumentTypeError(f"{name} must be a ResidentRef, got {type(ref).__name__}")
    return (_arrays.integer(ref.slot, f"{name}.slot", minimum=None),
            _arrays.integer(ref.epoch, f"{name}.epoch", minimum=0, maximum=2**64 - 1))


def _media_items(media_items: Any, name: str, keep: list[Any]) -> tuple[Any, int]:
    """A C array of ``ctxc_media_item_t`` for a sequence of :class:`MediaItem` (NULL, 0 when empty); what the
    C structs point at is appended to ``keep``."""
    media = list(media_items)
    if not media:
        return ffi.NULL, 0
    items = ffi.new("ctxc_media_item_t[]", len(media))
    keep.append(items)
    for k, item in enumerate(media):
        where = f"{name}.media[{k}]"
        if not isinstance(item, MediaItem):
            raise ArgumentTypeError(f"{where} must be a MediaItem, got {type(item).__name__}")
        try:
            view = memoryview(item.data).cast("B")
        except TypeError:
            raise ArgumentTypeError(f"{where}.data must be bytes-like or a C-contiguous array") from None
        if view.nbytes:
            data = ffi.from_buffer(view)
            keep.append(data)
            items[k].bytes = ffi.cast("const uint8_t *", data)
        items[k].byte_count = view.nbytes
        items[k].first_token = _arrays.integer(item.first_token, f"{where}.first_token", minimum=None)
        items[k].token_count = _arrays.integer(item.token_count, f"{where}.token_count", minimum=None)
        items[k].modality = _enum(MediaModality, item.modality, f"{where}.modality")
    return items, len(media)


def _fill_sequence(c: Any, request: Any, name: str, keep: list[Any]) -> None:
    if not isinstance(request, Request):
        raise ArgumentTypeError(f"{name} must be a Request, got {type(request).__name__}")
    c.token_ids, c.token_count = _int32s(request.token_ids, f"{name}.token_ids", keep)
    if not isinstance(request.lora_name, str):
        raise ArgumentTypeError(f"{name}.lora_name must be a str, got {type(request.lora_name).__name__}")
    lora = request.lora_name.encode()
    if lora:
        buffer = ffi.new("char[]", lora)
        keep.append(buffer)
        c.lora_name = buffer
        c.lora_name_length = len(lora)
    c.media, c.media_count = _media_items(request.media, name, keep)
    c.lookup_policy = _INHERIT if request.lookup_policy is None else _enum(
        LookupPolicy, request.lookup_policy, f"{name}.lookup_policy")


def _c_context(context: Any, keep: list[Any]) -> Any:
    if not isinstance(context, DecodingContext):
        raise ArgumentTypeError(f"context must be a DecodingContext, got {type(context).__name__}")
    rows = [_arrays.int32_array(t, f"context.token_ids[{i}]") for i, t in enumerate(context.token_ids)]
    n = len(rows)
    for name in ("raw_input_lengths", "generated_lengths", "status"):
        if len(getattr(context, name)) != n:
            raise InvalidArgumentError(f"context.{name} has {len(getattr(context, name))} entries for {n} rows")
    refs = list(context.resident_refs)
    if refs and len(refs) != n:
        raise InvalidArgumentError(f"context.resident_refs has {len(refs)} entries for {n} rows")
    c = ffi.new("ctxc_decoding_context_t *")
    lib.ctxc_decoding_context_init(c)
    pointers = ffi.new("const int32_t *[]", [_arrays.int32_pointer(r) for r in rows])
    counts = ffi.new("int32_t[]", [r.size for r in rows])
    raw = _arrays.int32_array(context.raw_input_lengths, "context.raw_input_lengths")
    generated = _arrays.int32_array(context.generated_lengths, "context.generated_lengths")
    status = _arrays.int32_array([_enum(SequenceStatus, s, f"context.status[{i}]") for i, s in enumerate(context.status)],
                                 "context.status")
    keep += [c, rows, pointers, counts, raw, generated, status]
    c.active_batch_size = n
    c.token_ids = pointers
    c.token_counts = counts
    c.raw_input_lengths = _arrays.int32_pointer(raw)
    c.generated_lengths = _arrays.int32_pointer(generated)
    c.status = _arrays.int32_pointer(status)
    if refs:
        c_refs = ffi.new("ctxc_resident_ref_t[]", n)
        keep.append(c_refs)
        for i, ref in enumerate(refs):
            c_refs[i].slot, c_refs[i].epoch = _resident(ref, f"context.resident_refs[{i}]")
        c.resident_refs = c_refs
    return c


def _common(values: Any, keep: list[Any]) -> tuple[Any, int]:
    if values is None:
        return _NULL, 0
    return _int32s(values, "common_state_lengths", keep)


# ---- the synchronizer callback --------------------------------------------------------------------------------

_synchronizers: dict[int, Synchronizer] = {}  # user key -> the coordinator's callable, until it is destroyed
_keys_by_handle: dict[int, int] = {}
_next_key = itertools.count(1)


@ffi.callback("int(void *, void *)", error=1)  # type: ignore[untyped-decorator]  # an exception also reports failure
def _synchronize(user: Any, stream: Any) -> int:
    synchronizer = _synchronizers.get(int(ffi.cast("uintptr_t", user)))
    if synchronizer is None:
        return 1
    result = synchronizer(None if stream == _NULL else int(ffi.cast("uintptr_t", stream)))
    return 1 if result is False else 0


def _address(handle: Any) -> int:
    return int(ffi.cast("uintptr_t", handle))


def _register_synchronizer(synchronizer: Synchronizer | None, options: Any) -> int:
    """Point options.synchronize at ``synchronizer`` (through _synchronize); its key, or 0 when there is none."""
    if synchronizer is None:
        return 0
    if not callable(synchronizer):
        raise ArgumentTypeError(f"synchronizer must be callable, got {type(synchronizer).__name__}")
    key = next(_next_key)
    _synchronizers[key] = synchronizer
    options.synchronize = _synchronize
    options.synchronize_user = ffi.cast("void *", key)
    return key


def _create_synchronized(key: int, create: Callable[[], Any], out: Any) -> None:
    """Run a create call; on failure forget the synchronizer of ``key``, on success tie it to the new handle."""
    try:
        check(create())
    except BaseException:
        _synchronizers.pop(key, None)
        raise
    if key:
        _keys_by_handle[_address(out[0])] = key


def _destroy_synchronized(destroy: Any, handle: Any) -> int:
    """A destroy call, then forget the handle's synchronizer (the destroy may still call it); a destroy refused
    because another thread is inside the family destroyed nothing, so the synchronizer stays."""
    status = int(destroy(handle))
    if status == ConcurrentUseError.status:
        return status
    key = _keys_by_handle.pop(_address(handle), None)
    if key is not None:
        _synchronizers.pop(key, None)
    return status


def _destroy_coordinator(handle: Any) -> int:
    """ctxc_coordinator_destroy, then forget the coordinator's synchronizer."""
    return _destroy_synchronized(lib.ctxc_coordinator_destroy, handle)


# ---- coordinator ----------------------------------------------------------------------------------------------


def _device(value: Any, kind: type[_Handle], name: str, keep: list[Any]) -> Any:
    if value is None:
        return _NULL
    if not isinstance(value, kind):
        raise ArgumentTypeError(f"{name} must be a {kind.__name__} or None, got {type(value).__name__}")
    keep.append(value)
    return value._live()


class ContextCacheCoordinator(KvEventSource, _Handle):
    """A context-cache coordinator over device objects (None where the profile does not use them): attention
    needs base_pool, base_table and base_lengths; a speculative profile that owns paged spec state the draft
    triple; a hybrid or pure recurrent model resident_state and snapshots."""

    _destroy = staticmethod(_destroy_coordinator)
    _what = "coordinator"
    _rank = 1  # after its requests, when both are queued

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

    def __repr__(self) -> str:
        if self.closed:
            return "ContextCacheCoordinator(closed)"
        info = self._info()
        return (f"ContextCacheCoordinator(page_size={info.page_size}, active_requests={info.active_requests}, "
                f"poisoned={bool(info.poisoned)})")


# ---- requests -------------------------------------------------------------------------------------------------


class ManagedKVCacheRequest(_Handle):
    """One runtime request over exactly one backend, a context-cache coordinator or a bounded sliding-window page
    manager (reuse off); a context manager whose exit abandons it if unfinished. On the SWA backend the
    context-only members answer the seed's backstops: prefill_starts is empty, prepare_prefill and
    enqueue_prefill_captures do nothing, admit_sequence and finalize_sequence_admission raise RequestFailedError,
    retract_sequence_admission is True, reuse_token_length, sequence() and the Hybrid+MTP members raise
    ContractError; prepare_swa_prefill prepares each prefill chunk and swa_state(row) reads a window."""

    _destroy = staticmethod(lib.ctxc_kv_request_destroy)
    _what = "request"
    coordinator: ContextCacheCoordinator | None  # set by begin(): the context-reuse backend, or
    swa_manager: Any  # the BoundedSwaKVPageManager of the SWA backend (None on the other)

    @classmethod
    def begin(cls, backend: Any, requests: Sequence[Request], context: DecodingContext, *,
              speculative: bool = False, headroom: Any = Headroom(),
              token_state_contract: Any = TokenStateContract.COMMITTED_PLUS_LOOKAHEAD,
              commit_policy: Any = CommitPolicy.INCLUDING_GENERATED_TOKENS, media_token_ids: Any = (),
              stream: int | None = None, lookup_policy: Any = LookupPolicy.USE_CACHE) -> ManagedKVCacheRequest:
        """Admit the batch (one sequence per request; context: the same batch with one resident ref per row) on
        `backend`: a ContextCacheCoordinator, or a BoundedSwaKVPageManager (non-speculative, committed+lookahead,
        headroom (1, 0); lookup, commit policy and media are not read there). RequestFailedError on capacity or
        another active request; PoisonedError while quarantined work is unresolved."""
        from .swa import BoundedSwaKVPageManager  # swa imports this module

        if not isinstance(backend, (ContextCacheCoordinator, BoundedSwaKVPageManager)):
            raise ArgumentTypeError("backend must be a ContextCacheCoordinator or a BoundedSwaKVPageManager, got "
                                    f"{type(backend).__name__}")
        keep: list[Any] = []
        requests = list(requests)
        sequences = ffi.new("ctxc_sequence_request_t[]", len(requests))
        for i, request in enumerate(requests):
            _fill_sequence(sequences[i], request, f"requests[{i}]", keep)
        c_context = _c_context(context, keep)
        options = ffi.new("ctxc_kv_request_options_t *")
        lib.ctxc_kv_request_options_init(options)
        options.lookup_policy = _enum(LookupPolicy, lookup_policy, "lookup_policy")
        options.speculative = 1 if _arrays.boolean(speculative, "speculative") else 0
        options.token_state_contract = _enum(TokenStateContract, token_state_contract, "token_state_contract")
        options.commit_policy = _enum(CommitPolicy, commit_policy, "commit_policy")
        options.headroom.base_extra_tokens, options.headroom.draft_extra_tokens = _headroom(headroom)
        options.media_token_ids, options.media_token_id_count = _int32s(media_token_ids, "media_token_ids", keep)
        options.stream = _pointer(stream, "stream")
        out = ffi.new("ctxc_kv_request_t **")
        on_context = isinstance(backend, ContextCacheCoordinator)
        begin = lib.ctxc_kv_request_begin if on_context else lib.ctxc_kv_request_begin_swa
        check(begin(backend._live(), sequences if requests else _NULL, len(requests), c_context, options, out))
        self = cls.__new__(cls)
        _Handle.__init__(self, out[0], (backend,))
        self.coordinator = backend if isinstance(backend, ContextCacheCoordinator) else None
        self.swa_manager = None if self.coordinator is not None else backend
        return self

    def _request_info(self) -> Any:
        out = new_output("ctxc_kv_request_info_t")
        check(lib.ctxc_kv_request_info(self._live(), out))
        return out

    @property
    def batch_size(self) -> int:
        return int(self._request_info().batch_size)

    @property
    def has_context_reuse(self) -> bool:
        return bool(self._request_info().has_context_reuse)

    @property
    def speculative(self) -> bool:
        return bool(self._request_info().speculative)

    @property
    def has_pending_joiner(self) -> bool:
        return bool(self._request_info().has_pending_joiner)

    @property
    def live(self) -> bool:
        """Bound to an unfinished, unquarantined request."""
        return bool(self._request_info().live)

    @property
    def prefill_starts(self) -> np.ndarray:
        """The reuse length (prefill start) of every row (a read-only copy)."""
        starts = ffi.new("const int32_t **")
        count = ffi.new("size_t *")
        check(lib.ctxc_kv_request_prefill_starts(self._live(), starts, count))
        return _arrays.read_only_int32(starts[0], int(count[0]))

    def reuse_token_length(self, row: int) -> int:
        out = ffi.new("int32_t *")
        check(lib.ctxc_kv_request_reuse_token_length(self._live(), _arrays.integer(row, "row", minimum=None), out))
        return int(out[0])

    def sequence(self, row: int) -> SequenceInfo:
        """Batch row `row` (or the pending joiner, at row batch_size)."""
        out = new_output("ctxc_kv_sequence_info_t")
        check(lib.ctxc_kv_request_sequence_info(self._live(), _arrays.integer(row, "row", minimum=None), out))
        return SequenceInfo(ResidentRef(int(out.resident.slot), int(out.resident.epoch)), int(out.input_length),
                            int(out.token_count), int(out.committed_length), int(out.common_length),
                            int(out.matched_length), int(out.reuse_length), ReusePlanKind(out.plan_kind),
                            bool(out.bypass), bool(out.forced_cold), int(out.published_full_block_count),
                            _arrays.read_only_int32(out.base_pages, int(out.base_page_count)),
                            _arrays.read_only_int32(out.draft_pages, int(out.draft_page_count)))

    @property
    def last_error(self) -> str:
        """The request's own last failure ("" when none)."""
        out = ffi.new("const char **")
        check(lib.ctxc_kv_request_last_error(self._live(), out))
        return str(ffi.string(out[0]).decode("utf-8", "replace"))

    def prepare_prefill(self) -> None:
        check(lib.ctxc_kv_request_prepare_prefill(self._live()))

    def prepare_swa_prefill(self, lengths: Any) -> None:
        """SWA backend: one prefill chunk, row i's KV endpoint moves to lengths[i] (a second call first completes
        the previous chunk; complete_prefill completes the last). A no-op on the context-reuse backend."""
        keep: list[Any] = []
        check(lib.ctxc_kv_request_prepare_swa_prefill(self._live(), *_int32s(lengths, "lengths", keep)))

    def swa_state(self, row: int) -> SwaState:
        """SWA backend: row `row`'s window (ContractError on the context-reuse backend)."""
        out = new_output("ctxc_swa_state_t")
        check(lib.ctxc_kv_request_swa_state(self._live(), _arrays.integer(row, "row", minimum=None), out))
        return _swa_state(out)

    def enqueue_prefill_captures(self) -> None:
        check(lib.ctxc_kv_request_enqueue_prefill_captures(self._live()))

    def complete_prefill(self, context: DecodingContext, common_state_lengths: Any = None) -> None:
        keep: list[Any] = []
        c = _c_context(context, keep)
        common, count = _common(common_state_lengths, keep)
        check(lib.ctxc_kv_request_complete_prefill(self._live(), c, common, count))

    def prepare_decode_step(self, context: DecodingContext, headroom: Any = Headroom()) -> None:
        keep: list[Any] = []
        c = _c_context(context, keep)
        check(lib.ctxc_kv_request_prepare_decode_step(self._live(), c, _c_headroom(headroom, keep)))

    def complete_decode_step(self, context: DecodingContext, common_state_lengths: Any = None) -> None:
        keep: list[Any] = []
        c = _c_context(context, keep)
        common, count = _common(common_state_lengths, keep)
        check(lib.ctxc_kv_request_complete_decode_step(self._live(), c, common, count))

    def begin_batch_compaction(self, old_to_new: Any, new_batch_size: int, device_batch_mapping: Any = None) -> None:
        """device_batch_mapping: None, a writable int32 numpy array (CPU backend), or (address, capacity) of int32
        device memory on the coordinator's backend; it receives old_to_new."""
        keep: list[Any] = []
        mapping, count = _int32s(old_to_new, "old_to_new", keep)
        target, capacity = _NULL, 0
        if isinstance(device_batch_mapping, np.ndarray):
            array = _arrays.int32_array(device_batch_mapping, "device_batch_mapping")
            if not array.flags.writeable:
                raise ArgumentTypeError("device_batch_mapping must be writable")
            target, capacity = (ffi.cast("int32_t *", ffi.from_buffer(array)) if array.size else _NULL), array.size
        elif isinstance(device_batch_mapping, tuple) and len(device_batch_mapping) == 2:
            target = ffi.cast("int32_t *", _pointer(device_batch_mapping[0], "device_batch_mapping[0]"))
            capacity = _arrays.integer(device_batch_mapping[1], "device_batch_mapping[1]", maximum=2**62)
        elif device_batch_mapping is not None:
            raise ArgumentTypeError("device_batch_mapping must be None, an int32 numpy array or (address, capacity)")
        check(lib.ctxc_kv_request_begin_batch_compaction(
            self._live(), mapping, count, _arrays.integer(new_batch_size, "new_batch_size", minimum=None), target,
            capacity))

    def complete_batch_compaction(self, keep_mapping: Any) -> None:
        keep: list[Any] = []
        mapping, count = _int32s(keep_mapping, "keep_mapping", keep)
        check(lib.ctxc_kv_request_complete_batch_compaction(self._live(), mapping, count))

    def finish(self) -> None:
        """Synchronise, publish what is due, release the leases. A finished request: no-op."""
        check(lib.ctxc_kv_request_finish(self._live()))

    def admit_sequence(self, request: Request, resident: ResidentRef, headroom: Any = Headroom(),
                       media_token_ids: Any = ()) -> AdmitResult:
        """In-flight admission of a joiner; NO_CAPACITY is an answer (nothing held), a failure raises."""
        keep: list[Any] = []
        sequence = ffi.new("ctxc_sequence_request_t *")
        _fill_sequence(sequence, request, "request", keep)
        ref = ffi.new("ctxc_resident_ref_t *")
        ref.slot, ref.epoch = _resident(resident, "resident")
        ids, count = _int32s(media_token_ids, "media_token_ids", keep)
        status = ffi.new("int32_t *")
        start = ffi.new("int32_t *")
        check(lib.ctxc_kv_request_admit_sequence(self._live(), sequence, ref, _c_headroom(headroom, keep), ids, count,
                                                 status, start))
        return AdmitResult(AdmitSequenceStatus(status[0]), int(start[0]))

    def finalize_sequence_admission(self, row: int, lookahead_token: int, full_input_length: int) -> None:
        check(lib.ctxc_kv_request_finalize_sequence_admission(
            self._live(), _arrays.integer(row, "row", minimum=None),
            _arrays.integer(lookahead_token, "lookahead_token", minimum=-(2**31)),
            _arrays.integer(full_input_length, "full_input_length", minimum=None)))

    def retract_sequence_admission(self) -> bool:
        out = ffi.new("int32_t *")
        check(lib.ctxc_kv_request_retract_sequence_admission(self._live(), out))
        return bool(out[0])

    @staticmethod
    def _tensor(array: Any, keep: list[Any]) -> Any:
        if not isinstance(array, np.ndarray):
            raise ArgumentTypeError(f"base_hidden_states must be a numpy array, got {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise ArgumentTypeError("base_hidden_states must be C-contiguous")
        kinds = {np.dtype(np.float16): ScalarType.FP16, np.dtype(np.float32): ScalarType.FP32,
                 np.dtype(np.int32): ScalarType.INT32, np.dtype(np.int64): ScalarType.INT64,
                 np.dtype(np.uint8): ScalarType.UINT8, np.dtype(np.uint16): ScalarType.BF16}
        if array.dtype not in kinds:
            raise ArgumentTypeError(f"base_hidden_states has an unsupported dtype {array.dtype}")
        shape = ffi.new("int64_t[]", list(array.shape))
        view = ffi.new("ctxc_tensor_view_t *")
        view.data = ffi.cast("void *", ffi.from_buffer(array)) if array.nbytes else _NULL
        view.shape = shape
        view.rank = array.ndim
        view.dtype = kinds[array.dtype]
        view.device = -1
        keep += [shape, view, array]
        return view

    def publish_hybrid_mtp_endpoint(self, row: int, resident_state_length: int, base_hidden_states: np.ndarray,
                                    boundary_hidden_row: int) -> None:
        """Hybrid+MTP, mid-prefill with the device state at resident_state_length (E): capture the checkpoint
        (recurrent state, row boundary_hidden_row of base_hidden_states, an fp16 [rows, hidden_size] array on the
        CPU backend, and the paired partial page) and publish it (docs/RUNTIME.md, "Hybrid + MTP")."""
        keep: list[Any] = []
        check(lib.ctxc_kv_request_publish_hybrid_mtp_endpoint(
            self._live(), _arrays.integer(row, "row", minimum=None),
            _arrays.integer(resident_state_length, "resident_state_length", minimum=None),
            self._tensor(base_hidden_states, keep), _arrays.integer(boundary_hidden_row, "boundary_hidden_row", minimum=None)))

    def restore_hybrid_mtp_boundary_hidden(self, row: int, base_hidden_states: np.ndarray, destination_row: int) -> None:
        """Hybrid+MTP, after a hit: write the restored boundary hidden row into base_hidden_states[destination_row]
        (a writable fp16 [rows, hidden_size] array)."""
        if isinstance(base_hidden_states, np.ndarray) and not base_hidden_states.flags.writeable:
            raise ArgumentTypeError("base_hidden_states must be writable (the row is written into it)")
        keep: list[Any] = []
        check(lib.ctxc_kv_request_restore_hybrid_mtp_boundary_hidden(
            self._live(), _arrays.integer(row, "row", minimum=None), self._tensor(base_hidden_states, keep),
            _arrays.integer(destination_row, "destination_row", minimum=None)))

    def __repr__(self) -> str:
        if self.closed:
            return "ManagedKVCacheRequest(closed)"
        try:
            info = self._request_info()
        except Exception:
            return "ManagedKVCacheRequest(orphaned)"
        return f"ManagedKVCacheRequest(batch_size={info.batch_size}, live={bool(info.live)})"


__all__ = [
    "AdmitResult", "ContextCacheCoordinator", "ContextCacheMetrics", "DecodingContext", "Headroom",
    "ManagedKVCacheRequest", "MediaItem", "PoolMetrics", "Request", "ResidentRef", "SequenceInfo",
    "SpecReuseContract", "SwaState",
]
