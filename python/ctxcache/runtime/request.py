"""ManagedKVCacheRequest: the request facade an engine drives, over one backend (docs: ctxcache.runtime).

Contract: one C request handle (ctxc_kv_request_t) with the handle protocol of ctxcache._resource; it keeps its
backend alive in Python, never the other way round. The backend begins the request (its ``_begin_kv_request``:
the coordinator's ctxc_kv_request_begin, the bounded-SWA manager's ctxc_kv_request_begin_swa), so this module
imports neither backend. Single writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _arrays
from .._ffi import check, ffi, lib, new_output
from .._resource import Handle
from ..enums import (
    AdmitSequenceStatus,
    CommitPolicy,
    LookupPolicy,
    ReusePlanKind,
    ScalarType,
    TokenStateContract,
)
from ..errors import ArgumentTypeError
from ._marshal import (
    _NULL,
    _c_context,
    _c_headroom,
    _common,
    _enum,
    _fill_sequence,
    _headroom,
    _int32s,
    _pointer,
    _resident,
    _swa_state,
)
from .types import AdmitResult, DecodingContext, Headroom, Request, ResidentRef, SequenceInfo, SwaState

if TYPE_CHECKING:
    from .coordinator import ContextCacheCoordinator

class ManagedKVCacheRequest(Handle):
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
        begin = getattr(type(backend), "_begin_kv_request", None)  # each backend begins its own request
        if begin is None:
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
        check(begin(backend._live(), sequences if requests else _NULL, len(requests), c_context, options, out))
        self = cls.__new__(cls)
        Handle.__init__(self, out[0], (backend,))
        self.coordinator = backend if backend._reuses_context else None
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

