"""Byte stores shared by replicas (issue 27; ``ctxcache/c/store.h``, docs/TIERS.md): a :class:`KvStore` sits under
an engine's host tier (``ReferenceEngine(host_store=StoreLink(store, ...))``); blocks written to the tier are put
there, and a hit the host cannot extend further is asked of it, so that one replica reuses what another computed.

A store is either in-process (:meth:`KvStore.memory`, for tests) or a Python backend behind the C callback table
(:meth:`KvStore.from_backend`): any object with ``exist(keys, deadline_ns)``, ``put(keys, addrs, sizes,
deadline_ns)`` and ``get(keys, addrs, capacities, deadline_ns)``, each returning one result per key (``>= 0``
success, else a :class:`StoreResult`), such as :class:`ctxcache.mooncake_store.MooncakeStore`. Its methods are
called on the tier's own worker threads (never the caller's): at most one put and one exist or get at a time per
tier, so they must be thread-safe (Mooncake's client is); a backend method that
raises fails its batch (every key :attr:`StoreResult.FAILED`), which costs reuse, never correctness: every object
is checked (magic, layout, block, length, checksum) before a byte of it is trusted.

Lifetime: ``close()`` (or ``with``) releases this handle; engines created with the store keep it (and the
backend) until they are closed. The backend is held by a module registry from creation until the library lets go
of the store (its ``release``), never by a finalizer: no reference cycle, no call into C from the collector.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from . import _arrays
from ._ffi import check, ffi, lib
from ._resource import Family, Resource
from .errors import ArgumentTypeError, InvalidArgumentError


class StoreResult(IntEnum):
    """A key's failure (Mooncake Store's codes); success is a non-negative value."""

    FULL = -200
    TOO_SMALL = -600
    NOT_FOUND = -704
    UNAVAILABLE = -800
    FAILED = -900
    TIMED_OUT = -1000


class StoreLoadPolicy(IntEnum):
    """WAIT: an extension waits for the store's answers until the load deadline. BEST_EFFORT: it never waits; the
    answers fill the host tier for later requests (a prefetch)."""

    WAIT = 0
    BEST_EFFORT = 1


# Backends by the id passed to C as `user`; an entry leaves when the library releases the store.
_backends: dict[int, Any] = {}
_backends_lock = threading.Lock()
_next_id = [1]


def _backend(user: Any) -> Any:
    return _backends.get(int(ffi.cast("uintptr_t", user)))


def _fill(results: Any, count: int, answer: Any) -> None:
    values = list(answer) if answer is not None else []
    for i in range(count):
        try:
            v = int(values[i]) if i < len(values) else int(StoreResult.FAILED)
        except (TypeError, ValueError):
            v = int(StoreResult.FAILED)
        results[i] = v


def _keys(keys: Any, count: int) -> list[str]:
    return [ffi.string(keys[i]).decode("utf-8") for i in range(count)]


def _addresses(pointers: Any, count: int) -> list[int]:
    return [int(ffi.cast("uintptr_t", pointers[i])) for i in range(count)]


def _exist(user: Any, keys: Any, count: int, deadline_ns: int, results: Any) -> None:
    try:
        _fill(results, count, _backend(user).exist(_keys(keys, count), int(deadline_ns)))
    except Exception:
        _fill(results, count, None)


def _put(user: Any, keys: Any, data: Any, sizes: Any, count: int, deadline_ns: int, results: Any) -> None:
    try:
        answer = _backend(user).put(_keys(keys, count), _addresses(data, count), [int(sizes[i]) for i in range(count)],
                                    int(deadline_ns))
        _fill(results, count, answer)
    except Exception:
        _fill(results, count, None)


def _get(user: Any, keys: Any, buffers: Any, capacities: Any, count: int, deadline_ns: int, results: Any) -> None:
    try:
        answer = _backend(user).get(_keys(keys, count), _addresses(buffers, count),
                                    [int(capacities[i]) for i in range(count)], int(deadline_ns))
        _fill(results, count, answer)
    except Exception:
        _fill(results, count, None)


def _release(user: Any) -> None:
    with _backends_lock:
        _backends.pop(int(ffi.cast("uintptr_t", user)), None)


# C function pointers for the table (alive as long as this module).
_exist_c = ffi.callback("void(void *, const char *const *, size_t, int64_t, int64_t *)", _exist)
_put_c = ffi.callback("void(void *, const char *const *, const void *const *, const size_t *, size_t, int64_t, int64_t *)", _put)
_get_c = ffi.callback("void(void *, const char *const *, void *const *, const size_t *, size_t, int64_t, int64_t *)", _get)
_release_c = ffi.callback("void(void *)", _release)


class KvStore(Resource):
    """A byte store (see the module comment). Build one with :meth:`memory` or :meth:`from_backend`."""

    __slots__ = ("_handle", "_family", "_backend_id", "__weakref__")
    _destroy = staticmethod(lib.ctxc_kv_store_destroy)
    _what = "store"

    def __init__(self, *, _handle: Any, backend_id: int = 0) -> None:
        self._handle = _handle
        self._backend_id = backend_id
        self._join(Family())

    @classmethod
    def memory(cls, capacity_bytes: int = 0) -> KvStore:
        """An in-process store of ``capacity_bytes`` (0: no limit) with Mooncake Store's semantics: a put of a key
        it holds keeps the first value; a full store refuses puts (:attr:`StoreResult.FULL`)."""
        out = ffi.new("ctxc_kv_store_t **")
        check(lib.ctxc_memory_kv_store_create(_arrays.integer(capacity_bytes, "capacity_bytes", maximum=2**63 - 1),
                                              out))
        return cls(_handle=out[0])

    @classmethod
    def from_backend(cls, backend: Any) -> KvStore:
        """A store whose calls go to ``backend`` (see the module comment), on the tiers' worker threads."""
        for method in ("exist", "put", "get"):
            if not callable(getattr(backend, method, None)):
                raise ArgumentTypeError(f"a store backend needs a callable {method}() (got {type(backend).__name__})")
        with _backends_lock:
            ident = _next_id[0]
            _next_id[0] += 1
            _backends[ident] = backend
        c = ffi.new("ctxc_kv_store_callbacks_t *")
        c.struct_size = ffi.sizeof("ctxc_kv_store_callbacks_t")
        c.user = ffi.cast("void *", ident)
        c.exist = _exist_c
        c.put = _put_c
        c.get = _get_c
        c.release = _release_c
        out = ffi.new("ctxc_kv_store_t **")
        try:
            check(lib.ctxc_kv_store_create(c, out))
        except BaseException:
            with _backends_lock:
                _backends.pop(ident, None)
            raise
        return cls(_handle=out[0], backend_id=ident)

    @property
    def backend(self) -> Any:
        """The Python backend (None for an in-process store, or once the library released it)."""
        return _backends.get(self._backend_id) if self._backend_id else None


@dataclass(frozen=True)
class StoreLink:
    """How an engine's host tier uses ``store``: the model identity its keys name (replicas of one model and
    layout share keys), the load policy, the ask rule (``min_ask_blocks``), the deadlines and the negative
    cache's TTL. Defaults: the library's (tier/store_link.h)."""

    store: KvStore
    model: str = "ctxcache"
    policy: Any = StoreLoadPolicy.WAIT
    min_ask_blocks: int = 4
    load_deadline_s: float = 0.05
    put_deadline_s: float = 2.0
    negative_ttl_s: float = 15.0

    def options(self) -> tuple[Any, Any]:
        """The C options (and the model's bytes, which must live as long as they are read)."""
        if not isinstance(self.store, KvStore):
            raise ArgumentTypeError(f"StoreLink.store must be a KvStore (got {type(self.store).__name__})")
        o = ffi.new("ctxc_store_link_options_t *")
        lib.ctxc_store_link_options_init(o)
        o.store = self.store._live()
        model = ffi.new("char[]", str(self.model).encode("utf-8"))
        o.model = model
        o.policy = _arrays.enum_member(StoreLoadPolicy, self.policy, "policy")
        o.min_ask_blocks = _arrays.integer(self.min_ask_blocks, "min_ask_blocks", minimum=None)
        for name, scale, field in (("load_deadline_s", 1e6, "load_deadline_us"),
                                   ("put_deadline_s", 1e6, "put_deadline_us"),
                                   ("negative_ttl_s", 1e3, "negative_ttl_ms")):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ArgumentTypeError(f"{name} must be a number of seconds (got {type(value).__name__})")
            if not 0 <= value <= 3600:
                raise InvalidArgumentError(f"{name} must be between 0 and 3600 seconds (got {value})")
            setattr(o, field, int(round(value * scale)))
        return o, model


def open_store(url: str) -> KvStore:
    """A store by URL: ``memory://`` (in process; ``memory://?capacity=1GiB`` bounds it) or
    ``mooncake://HOST:PORT?metadata=...`` (:meth:`ctxcache.mooncake_store.MooncakeStore.from_url`; the
    ``mooncake`` extra). A Mooncake backend is set up in the background (:meth:`MooncakeStore.wait_ready`); the
    caller closes the returned store and then its ``backend``. InvalidArgumentError for any other URL."""
    from urllib.parse import parse_qs, urlsplit

    if not isinstance(url, str):
        raise ArgumentTypeError(f"a store URL must be a str (got {type(url).__name__})")
    parts = urlsplit(url)
    if parts.scheme == "memory":
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = sorted(set(query) - {"capacity"})
        if parts.netloc or parts.path or unknown:
            raise InvalidArgumentError(f"an in-process store URL is memory:// or memory://?capacity=SIZE (got {url!r})")
        from .mooncake_store import parse_size

        return KvStore.memory(parse_size(query.get("capacity", "0"), "capacity"))
    if parts.scheme == "mooncake":
        from .mooncake_store import MooncakeStore

        backend = MooncakeStore.from_url(url)
        try:
            return KvStore.from_backend(backend)
        except BaseException:
            backend.close()
            raise
    raise InvalidArgumentError(f"a store URL starts with mooncake:// or memory:// (got {url!r})")
