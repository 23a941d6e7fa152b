"""The private marshalling between the runtime's Python values and its C structs, and the synchronizer callback.

Contract: each function converts one Python value to what a C call takes (types, numpy dtypes and layouts, per-row
lists of one length: what the C call cannot see; values are the library's to check), appending what the C structs
point at to ``keep`` (the caller holds it for the call), or one C struct back to a Python value. The synchronizer
registry maps a coordinator's or SWA manager's handle to its Python callable until that handle is destroyed.
Used by the runtime subpackage and the reference engine (ctxcache.sim) only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from .. import _arrays
from .._ffi import check, ffi, lib
from .._resource import Handle
from ..enums import (
    LookupPolicy,
    MediaModality,
    SequenceStatus,
)
from ..errors import ArgumentTypeError, ConcurrentUseError, InvalidArgumentError
from ..retention import c_retention_spec
from .types import (
    ContextCacheMetrics,
    DecodingContext,
    Headroom,
    MediaItem,
    PoolMetrics,
    Request,
    ResidentRef,
    SwaState,
    Synchronizer,
)

_NULL = ffi.NULL
_INHERIT = int(lib.CTXC_INHERIT_LOOKUP_POLICY)


_POOLS = ("base_kv_pages", "draft_kv_pages", "recurrent_snapshots", "partial_kv_snapshots")


def _metrics(c: Any) -> ContextCacheMetrics:
    values: dict[str, Any] = {}
    for name in ContextCacheMetrics.__dataclass_fields__:
        if name in _POOLS:
            values[name] = PoolMetrics(int(getattr(c, name + "_free")), int(getattr(c, name + "_capacity")))
        else:
            values[name] = int(getattr(c, name))
    return ContextCacheMetrics(**values)



def _swa_state(out: Any) -> SwaState:
    return SwaState(resident=ResidentRef(int(out.resident.slot), int(out.resident.epoch)),
                    exact_resident_token_count=int(out.exact_resident_token_count),
                    retained_logical_page_begin=int(out.retained_logical_page_begin),
                    retained_logical_page_end=int(out.retained_logical_page_end),
                    bound_pages=int(out.bound_pages), pending_retire_pages=int(out.pending_retire_pages),
                    reserved_pages=int(out.reserved_pages),
                    pending_endpoint=None if out.pending_endpoint < 0 else int(out.pending_endpoint),
                    peak_bound_pages=int(out.peak_bound_pages))



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
    c.retention = c_retention_spec(request.retention, keep)


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



def _device(value: Any, kind: type[Handle], name: str, keep: list[Any]) -> Any:
    if value is None:
        return _NULL
    if not isinstance(value, kind):
        raise ArgumentTypeError(f"{name} must be a {kind.__name__} or None, got {type(value).__name__}")
    keep.append(value)
    return value._live()

