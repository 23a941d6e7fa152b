"""The identity a KV event carries beyond its tokens (docs/EVENTS.md, "Identity"): the public KvEventKeys and
KvEventMedia (re-exported by ctxcache.events), and their conversions to and from the C structs
(ctxc_kv_event_keys_t for a publication, the lora_name and extra_keys of a ctxc_kv_event_t). Private: the manager
and the events module share these conversions. Plain functions of their arguments: no state, any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _arrays
from ._ffi import ffi, lib
from .enums import KvExtraKeyKind
from .errors import ArgumentTypeError, InvalidArgumentError

_NULL = ffi.NULL


@dataclass(frozen=True)
class KvEventMedia:
    """A media item of a prompt as events name it: its identifier (ctxcache's runtime uses 64 hex digits, the
    shape vLLM gives its own) and its placeholder tokens' span in the prompt."""

    identifier: str
    first_token: int
    token_count: int


@dataclass(frozen=True)
class KvEventKeys:
    """A publication's identity for its BlockStored events: the LoRA adapter's name (``lora_name``) and the
    prompt's media items (sorted by position, not overlapping), which give each block its ``extra_keys``."""

    lora_name: str = ""
    media: Sequence[KvEventMedia] = ()


def _text(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str, got {type(value).__name__}")
    return value.encode()


def c_event_keys(keys: KvEventKeys | None, keep: list[Any]) -> Any:
    """``keys`` as a ``ctxc_kv_event_keys_t *`` (NULL for None); what it points into goes to ``keep``."""
    if keys is None:
        return _NULL
    if not isinstance(keys, KvEventKeys):
        raise ArgumentTypeError(f"event_keys must be a KvEventKeys or None, got {type(keys).__name__}")
    c = ffi.new("ctxc_kv_event_keys_t *")
    lib.ctxc_kv_event_keys_init(c)
    keep.append(c)
    lora = _text(keys.lora_name, "event_keys.lora_name")
    if lora:
        buffer = ffi.new("char[]", lora)
        keep.append(buffer)
        c.lora_name = buffer
        c.lora_name_length = len(lora)
    media = list(keys.media)
    if media:
        items = ffi.new("ctxc_kv_event_media_t[]", len(media))
        keep.append(items)
        for i, item in enumerate(media):
            if not isinstance(item, KvEventMedia):
                raise ArgumentTypeError(f"event_keys.media[{i}] must be a KvEventMedia, got {type(item).__name__}")
            identifier = _text(item.identifier, f"event_keys.media[{i}].identifier")
            buffer = ffi.new("char[]", identifier)
            keep.append(buffer)
            items[i].identifier = buffer
            items[i].identifier_length = len(identifier)
            items[i].first_token = _arrays.integer(item.first_token, f"event_keys.media[{i}].first_token",
                                                   minimum=-2**63, maximum=2**63 - 1)
            items[i].token_count = _arrays.integer(item.token_count, f"event_keys.media[{i}].token_count",
                                                   minimum=-2**63, maximum=2**63 - 1)
        c.media = items
        c.media_count = len(media)
    return c


def _decode(pointer: Any, length: int) -> str:
    return bytes(ffi.buffer(pointer, length)).decode("utf-8", "replace") if length else ""


def stored_keys(e: Any) -> tuple[str | None, list[tuple[Any, ...] | None] | None]:
    """A drained BlockStored's lora_name and extra_keys, in vLLM's shapes."""
    lora = _decode(e.lora_name, e.lora_name_length) if e.lora_name_length else None
    if not e.extra_key_count:
        return lora, None
    per_block: list[list[Any] | None] = [None] * int(e.block_hash_count)
    for k in range(e.extra_key_count):
        key = e.extra_keys[k]
        text = _decode(key.text, key.text_length)
        item: Any = (text, int(key.offset)) if key.kind == KvExtraKeyKind.MEDIA else text
        entry = per_block[key.block]
        if entry is None:
            per_block[key.block] = [item]
        else:
            entry.append(item)
    return lora, [None if entry is None else tuple(entry) for entry in per_block]


def set_stored_keys(c: Any, event: Any, i: int, keep: list[Any]) -> None:
    """A BlockStored's lora_name and extra_keys into its ctxc_kv_event_t (a bare str is a name, a pair
    (identifier, offset) a media item)."""
    if event.lora_name is not None:
        lora = _text(event.lora_name, f"events[{i}].lora_name")
        if lora:
            buffer = ffi.new("char[]", lora)
            keep.append(buffer)
            c.lora_name = buffer
            c.lora_name_length = len(lora)
    if event.extra_keys is None:
        return
    if isinstance(event.extra_keys, (str, bytes)) or not isinstance(event.extra_keys, Sequence):
        raise ArgumentTypeError(f"events[{i}].extra_keys must be a list (one entry per block) or None")
    if len(event.extra_keys) != len(event.block_hashes):
        raise InvalidArgumentError(f"events[{i}].extra_keys has {len(event.extra_keys)} entries for "
                                   f"{len(event.block_hashes)} blocks")
    flat: list[tuple[int, int, bytes, int]] = []
    for block, entry in enumerate(event.extra_keys):
        if entry is None:
            continue
        if isinstance(entry, (str, bytes)) or not isinstance(entry, Sequence):
            raise ArgumentTypeError(f"events[{i}].extra_keys[{block}] must be a tuple of keys or None")
        for item in entry:
            where = f"events[{i}].extra_keys[{block}]"
            if isinstance(item, str):
                flat.append((block, KvExtraKeyKind.LORA_NAME, item.encode(), 0))
            elif (isinstance(item, Sequence) and not isinstance(item, bytes) and len(item) == 2
                  and isinstance(item[0], str)):
                offset = _arrays.integer(item[1], f"{where} offset", minimum=-2**63, maximum=2**63 - 1)
                flat.append((block, KvExtraKeyKind.MEDIA, item[0].encode(), offset))
            else:
                raise ArgumentTypeError(f"{where} holds {item!r}: a key is a str or an (identifier, offset) pair")
    if not flat:
        return
    keys = ffi.new("ctxc_kv_event_extra_key_t[]", len(flat))
    keep.append(keys)
    for k, (block, kind, text, offset) in enumerate(flat):
        buffer = ffi.new("char[]", text)
        keep.append(buffer)
        keys[k].block = block
        keys[k].kind = kind
        keys[k].text = buffer
        keys[k].text_length = len(text)
        keys[k].offset = offset
    c.extra_keys = keys
    c.extra_key_count = len(flat)
