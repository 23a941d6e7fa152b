"""Block hashing: chained 128-bit identities of token blocks, as (n, 2) uint64 arrays (hi, lo).

``algorithm`` is ``"sha256"`` (default; optionally keyed with a secret ``key``) or ``"fnv1a128"``. Extras
(LoRA adapter, media spans, position / custom-embedding / isolation digests) are :class:`BlockKeyExtras`;
one applies to every block, a list gives one per block.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _arrays
from ._ffi import check, ffi, from_buffer_cdata, lib, new_cdata
from ._resource import Family, Resource
from .enums import HashAlgorithm
from .errors import ArgumentTypeError, InvalidArgumentError

Digest = Any  # a (2,) uint64 array or a (hi, lo) tuple

_NULL = ffi.NULL
_SIZE_T_PTR = ffi.typeof("size_t *")
_HASHES = _arrays._HASHES  # the fast paths' types and tests, defined once in _arrays
_INT32S = _arrays._INT32S
_NDARRAY = _arrays._NDARRAY
_UINT64 = _arrays._UINT64
_INT32 = _arrays._INT32
_INT32_STRIDES = _arrays._INT32_STRIDES
_INT32_MAX = _arrays.INT32_MAX
_empty = np.empty
_hash_full_blocks = lib.ctxc_hash_full_blocks
_scratch = threading.local()  # per thread (hashers are shared between threads): outputs nobody reads


@dataclass(frozen=True)
class MediaSpanKey:
    content_digest: Digest
    placement_digest: Digest
    offset_within_block: int = 0
    item_order: int = 0
    modality: int = 0


@dataclass(frozen=True)
class BlockKeyExtras:
    media: Sequence[MediaSpanKey] = field(default_factory=tuple)
    adapter_id: Digest | None = None
    adapter_generation: int = 0
    position_digest: Digest | None = None
    custom_embedding_digest: Digest | None = None
    isolation_digest: Digest | None = None


def _set_hash(target: Any, value: Digest, name: str) -> None:
    h = _arrays.single_hash(value, name)
    target.hi = int(h[0])
    target.lo = int(h[1])


_NO_EXTRAS = (_arrays._NULL, 0, ())


def _extras_array(extras: BlockKeyExtras | Sequence[BlockKeyExtras] | None) -> Any:
    """ctxc_block_key_extras_t[] and the keep-alive list of their media arrays."""
    if extras is None:
        return _NO_EXTRAS
    if not isinstance(extras, (BlockKeyExtras, list, tuple)):
        raise ArgumentTypeError(f"extras must be a BlockKeyExtras or a list of them, got {type(extras).__name__}")
    items = [extras] if isinstance(extras, BlockKeyExtras) else list(extras)
    for i, e in enumerate(items):
        if not isinstance(e, BlockKeyExtras):
            raise ArgumentTypeError(f"extras[{i}] must be a BlockKeyExtras, got {type(e).__name__}")
    if not items:
        return _arrays._NULL, 0, []
    out = ffi.new("ctxc_block_key_extras_t[]", len(items))
    keep = []
    for i, e in enumerate(items):
        c = out[i]
        if not isinstance(e.media, (list, tuple)):
            raise ArgumentTypeError(f"extras[{i}].media must be a list of MediaSpanKey, got {type(e.media).__name__}")
        media = list(e.media)
        if media:
            spans = ffi.new("ctxc_media_span_key_t[]", len(media))
            for j, m in enumerate(media):
                if not isinstance(m, MediaSpanKey):
                    raise ArgumentTypeError(f"extras[{i}].media[{j}] must be a MediaSpanKey")
                _set_hash(spans[j].content_digest, m.content_digest, "content_digest")
                _set_hash(spans[j].placement_digest, m.placement_digest, "placement_digest")
                spans[j].offset_within_block = _arrays.integer(m.offset_within_block, "offset_within_block", minimum=-(2**31))
                spans[j].item_order = _arrays.integer(m.item_order, "item_order", minimum=-(2**31))
                spans[j].modality = _arrays.integer(m.modality, "modality", maximum=255)
            keep.append(spans)
            c.media = spans
            c.media_count = len(media)
        if e.adapter_id is not None:
            c.has_adapter = 1
            _set_hash(c.adapter_id, e.adapter_id, "adapter_id")
            c.adapter_generation = _arrays.integer(e.adapter_generation, "adapter_generation", maximum=2**64 - 1)
        for attr in ("position_digest", "custom_embedding_digest", "isolation_digest"):
            value = getattr(e, attr)
            if value is not None:
                setattr(c, "has_" + attr, 1)
                _set_hash(getattr(c, attr), value, attr)
    keep.append(out)
    return out, len(items), keep


def _media_pointer(per_position_media_hashes: Any, token_count: int) -> Any:
    if per_position_media_hashes is None:
        return _arrays._NULL
    media = _arrays.hash_array(per_position_media_hashes, "per_position_media_hashes")
    if media.shape[0] != token_count:
        raise InvalidArgumentError(
            f"per_position_media_hashes has {media.shape[0]} rows for {token_count} tokens (one per token)"
        )
    return _arrays.hash_pointer(media)


def _algorithm(value: Any) -> int:
    if isinstance(value, HashAlgorithm):
        return int(value)
    if not isinstance(value, str):
        raise ArgumentTypeError(f"algorithm must be a str or a HashAlgorithm, got {type(value).__name__}")
    if value.lower() in ("sha256", "fnv1a128"):
        return int(HashAlgorithm.SHA256 if value.lower() == "sha256" else HashAlgorithm.FNV1A128)
    raise InvalidArgumentError(f"algorithm must be 'sha256' or 'fnv1a128', got {value!r}")


class Hasher(Resource):
    """An algorithm and optional secret key, created once and reused (the key block is absorbed once)."""

    __slots__ = ("_handle", "_family", "algorithm", "keyed", "__weakref__")
    _destroy = staticmethod(lib.ctxc_hasher_destroy)
    # _live(): the C handle; a closed hasher raises (its NULL handle would hash, unkeyed, with the default hasher).
    # A hasher is alone in its family and may be called from several threads at once: its calls drain nothing.
    _what = "hasher"
    _closed = "is closed"
    _drains = False

    def __init__(self, algorithm: str | HashAlgorithm = "sha256", key: bytes | bytearray | memoryview | str | None = None):
        self._handle = _arrays._NULL
        self._join(Family())
        code = _algorithm(algorithm)
        if isinstance(key, str):
            key = key.encode("utf-8")
        if key is not None and not isinstance(key, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"key must be bytes or str, got {type(key).__name__}")
        options = ffi.new("ctxc_hasher_options_t *")
        lib.ctxc_hasher_options_init(options)
        options.algorithm = code
        key_buffer = None
        if key:
            key_buffer = ffi.from_buffer(bytes(key))
            options.key = ffi.cast("const uint8_t *", key_buffer)
            options.key_length = len(key)
        out = ffi.new("ctxc_hasher_t **")
        check(lib.ctxc_hasher_create(options, out))
        self._handle = out[0]
        self.algorithm = HashAlgorithm(code)
        self.keyed = bool(key)

    def hash_full_blocks(self, tokens: Any, page_size: int, extras: Any = None, per_position_media_hashes: Any = None) -> np.ndarray:
        # The common argument types are tested inline (see _arrays), anything else takes the full checks.
        if type(tokens) is not _NDARRAY or tokens.dtype is not _INT32 or tokens.strides != _INT32_STRIDES:
            tokens = _arrays.int32_array(tokens)
        if type(page_size) is not int or not 1 <= page_size <= _INT32_MAX:
            page_size = _arrays.integer(page_size, "page_size", minimum=1)
        extras_ptr, extras_count, keep = _NO_EXTRAS if extras is None else _extras_array(extras)
        n = tokens.shape[0]
        media = _NULL if per_position_media_hashes is None else _media_pointer(per_position_media_hashes, n)
        blocks = n // page_size
        if extras_count > 1 and extras_count != blocks:
            raise InvalidArgumentError(f"extras has {extras_count} entries for {blocks} full blocks (0, 1 or one per block)")
        out = _empty((blocks, 2), _UINT64)
        try:
            count = _scratch.count  # C writes the count (= blocks, the capacity given): never read
        except AttributeError:  # this thread's first call
            count = _scratch.count = new_cdata(_SIZE_T_PTR)
        status = _hash_full_blocks(self._live(), from_buffer_cdata(_INT32S, tokens, False) if n else _NULL, n,
                                   page_size, extras_ptr, extras_count, media,
                                   from_buffer_cdata(_HASHES, out, True) if blocks else _NULL, blocks, count)
        if status:
            check(status)
        del keep
        return out

    def hash_exact_prefix(self, tokens: Any, page_size: int, extras: Any = None, per_position_media_hashes: Any = None) -> np.ndarray:
        tokens = _arrays.int32_array(tokens)
        page_size = _arrays.integer(page_size, "page_size", minimum=1)
        extras_ptr, extras_count, keep = _extras_array(extras)
        media = _media_pointer(per_position_media_hashes, tokens.shape[0])
        blocks = -(-tokens.shape[0] // page_size)
        if extras_count > 1 and extras_count != blocks:
            raise InvalidArgumentError(f"extras has {extras_count} entries for {blocks} blocks (0, 1 or one per block)")
        digest = ffi.new("ctxc_hash128_t *")
        check(lib.ctxc_hash_exact_prefix(self._live(), _arrays.int32_pointer(tokens), tokens.shape[0], page_size,
                                         extras_ptr, extras_count, media, digest))
        del keep
        return np.array([digest.hi, digest.lo], dtype=np.uint64)

    def hash_block(self, parent: Any, tokens: Any, extras: BlockKeyExtras | None = None, per_position_media_hashes: Any = None) -> np.ndarray:
        tokens = _arrays.int32_array(tokens)
        parent_ptr = _arrays._NULL
        if parent is not None:
            p = _arrays.single_hash(parent, "parent")
            parent_ptr = ffi.new("ctxc_hash128_t *", {"hi": int(p[0]), "lo": int(p[1])})
        if extras is not None and not isinstance(extras, BlockKeyExtras):
            raise ArgumentTypeError("extras must be a BlockKeyExtras")
        extras_ptr, _, keep = _extras_array(extras)
        media = _media_pointer(per_position_media_hashes, tokens.shape[0])
        out = ffi.new("ctxc_hash128_t *")
        check(lib.ctxc_hash_block(self._live(), parent_ptr, _arrays.int32_pointer(tokens), tokens.shape[0],
                                  extras_ptr, media, out))
        del keep
        return np.array([out.hi, out.lo], dtype=np.uint64)

    def hash_opaque_identity(self, data: bytes | str) -> np.ndarray:
        if isinstance(data, str):
            data = data.encode("utf-8")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"data must be bytes or str, got {type(data).__name__}")
        data = bytes(data)
        out = ffi.new("ctxc_hash128_t *")
        buf = ffi.from_buffer(data) if data else _arrays._NULL
        check(lib.ctxc_hash_opaque_identity(self._live(), buf, len(data), out))
        return np.array([out.hi, out.lo], dtype=np.uint64)


_default_hashers: dict[tuple[int, bytes], Hasher] = {}


def _hasher(algorithm: str | HashAlgorithm, key: Any) -> Hasher:
    if isinstance(key, str):
        key = key.encode("utf-8")
    if key is not None and not isinstance(key, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"key must be bytes or str, got {type(key).__name__}")
    cache_key = (_algorithm(algorithm), bytes(key) if key else b"")
    hasher = _default_hashers.get(cache_key)
    if hasher is None:
        hasher = Hasher(algorithm, key)
        if not key:  # never keep secrets alive in a module-level cache
            _default_hashers[cache_key] = hasher
    return hasher


def hash_full_blocks(tokens: Any, page_size: int, algorithm: str = "sha256", key: bytes | None = None, *, extras: Any = None,
                     per_position_media_hashes: Any = None) -> np.ndarray:
    """Chained hashes of the full blocks of ``tokens``: a (floor(n / page_size), 2) uint64 array (hi, lo)."""
    return _hasher(algorithm, key).hash_full_blocks(tokens, page_size, extras, per_position_media_hashes)


def hash_exact_prefix(tokens: Any, page_size: int, algorithm: str = "sha256", key: bytes | None = None, *, extras: Any = None,
                      per_position_media_hashes: Any = None) -> np.ndarray:
    """Digest of the exact prefix (the last block may be partial): a (2,) uint64 array (hi, lo)."""
    return _hasher(algorithm, key).hash_exact_prefix(tokens, page_size, extras, per_position_media_hashes)


def hash_block(parent: Any, tokens: Any, algorithm: str = "sha256", key: bytes | None = None, *, extras: Any = None,
               per_position_media_hashes: Any = None) -> np.ndarray:
    """One block under ``parent`` (None = the chain root)."""
    return _hasher(algorithm, key).hash_block(parent, tokens, extras, per_position_media_hashes)


def hash_opaque_identity(data: bytes | str, algorithm: str = "sha256", key: bytes | None = None) -> np.ndarray:
    """Identity of opaque bytes (a LoRA name, a media item's content)."""
    return _hasher(algorithm, key).hash_opaque_identity(data)


CHAIN_ROOT = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], dtype=np.uint64)
