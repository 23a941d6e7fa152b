"""Resource: the lifetime protocol every handle-owning object shares.

``close()`` (or a ``with`` block) is the protocol: a subclass defines it (idempotent: frees its C handle once).
Finalization is only a safety net, and it never calls into C at an arbitrary point:

- No handle owner sits in a reference cycle of the package's making (views hold their owner, owners never hold
  their views), so dropping the last reference frees an object by reference counting, at a point the caller
  chose: its handle is destroyed there, as ``close()`` would.
- An object the cyclic garbage collector finalizes (the caller put it in a cycle) is finalized at an arbitrary
  allocation: inside cffi's first-time parsing (whose lock is not re-entrant), between a C call and the reading
  of the view it returned, or on another thread than the one using its manager or backend. There its finalizer
  only queues the handle on its :class:`Family`; the next call on any object of that family destroys it (one of
  them, on the family's own thread, under the single-writer contract). A family none of whose objects is left is
  destroyed by the next call on any object, or at exit.
- A queued destroy that finds another thread's call inside its family (``CTXC_E_CONCURRENT_USE``: the caller broke
  the single-writer contract) stays queued for the next drain instead of being lost.

Every C function is resolved at import (_ffi.py), so even the reference-counting path never takes cffi's lock.
"""

from __future__ import annotations

import atexit
import gc
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from ._ffi import check, ffi
from .errors import InvalidHandleError

if TYPE_CHECKING:
    _Entry = tuple[int, Callable[[Any], Any], Any]  # a queued handle: (rank, destroy, handle)

_NULL = ffi.NULL
_CONCURRENT_USE = 13  # CTXC_E_CONCURRENT_USE (errors.ConcurrentUseError.status)
_collecting = False  # True while the cyclic collector runs (its finalizers must not call into C)
orphans: list[Family] = []  # families with no object left (collected in a cycle): anyone may destroy their handles


def _gc_phase(phase: str, info: dict[str, Any]) -> None:
    global _collecting
    _collecting = phase == "start"


gc.callbacks.append(_gc_phase)


class Family:
    """The objects behind one single-writer contract (a manager and its leases; a backend and what is built on
    it; a hasher alone), and the handles of its collected objects, waiting to be destroyed."""

    __slots__ = ("pending", "members")

    def __init__(self) -> None:
        self.pending: list[_Entry] = []  # (rank, destroy, handle): rank 1 (a manager) after rank 0 (its leases)
        self.members = 0  # Python objects of the family not finalized yet


def drain(family: Family | None = None) -> None:
    """Destroy the queued handles of ``family`` and of every orphaned family. Never inside a collection."""
    if _collecting:
        return
    if family is not None and family.pending:
        _destroy_pending(family)
    for _ in range(len(orphans)):  # those queued now: a family refused again waits for the next drain
        try:
            orphan = orphans.pop(0)
        except IndexError:  # another thread took the last one
            break
        _destroy_pending(orphan)


def _destroy_pending(family: Family) -> None:
    entries: list[_Entry] = []
    while family.pending:
        try:
            entries.append(family.pending.pop())
        except IndexError:
            break
    entries.sort(key=lambda entry: entry[0])
    refused = False
    for entry in entries:
        # A finalizer's cleanup: its status has no one to go to, except a refusal because another thread is
        # inside the family right now: then the handle waits for the next drain.
        if entry[1](entry[2]) == _CONCURRENT_USE:
            family.pending.append(entry)
            refused = True
    if refused and family.members <= 0:
        orphans.append(family)  # no object of it is left to drain it: any next call (or exit) retries


atexit.register(drain)


_R = TypeVar("_R", bound="Resource")


class Resource:
    """Subclasses set ``_destroy`` (the C destroy function, bound at import), ``_handle`` and, through
    :meth:`_join`, ``_family`` before they own a handle.

    The handle protocol, in one place: ``_live()`` is the C handle of an open object (first destroying what its
    family and the orphaned families have queued, unless ``_drains`` is False), or InvalidHandleError
    "``_what`` ``_closed``"; ``closed``; ``close()`` destroys the handle once (idempotent), and a destroy refused
    because another thread is inside the family (CTXC_E_CONCURRENT_USE) leaves the object open and raises."""

    __slots__ = ()
    _destroy: Any = None  # a cffi function (Any: ABI mode), wrapped in staticmethod by each subclass
    _rank = 0
    _what = "object"  # the messages: "<_what> <_closed>"
    _closed = "was closed"
    _drains = True  # whether _live() destroys what was queued first (a hasher, alone and thread-safe: not)

    def _live(self) -> Any:
        if self._drains:
            family = self._family
            if family.pending or orphans:
                drain(family)
        handle = self._handle
        if handle == _NULL:
            raise InvalidHandleError(f"{self._what} {self._closed}")
        return handle

    @property
    def closed(self) -> bool:
        return bool(self._handle == _NULL)

    def close(self) -> None:
        handle = self._handle
        if handle != _NULL:
            self._handle = _NULL
            status = type(self)._destroy(handle)
            if status:
                if status == _CONCURRENT_USE:  # refused, nothing destroyed: still open
                    self._handle = handle
                check(status)

    if TYPE_CHECKING:  # declared for the type checker only: each subclass lists them in its own __slots__
        _family: Family
        _handle: Any


    def _join(self, family: Family) -> None:
        # A slot of each subclass (this base has none), which mypy's __slots__ check does not see from here.
        self._family = family  # type: ignore[misc]
        family.members += 1

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            family = self._family
        except AttributeError:  # __init__ failed before the object owned anything
            return
        try:
            family.members -= 1
            handle = getattr(self, "_handle", _NULL)
            if handle is not _NULL and handle != _NULL:
                self._handle = _NULL
                family.pending.append((self._rank, type(self)._destroy, handle))
            if not _collecting:
                if family.pending or orphans:  # (drain's own test, without the call for a closed object)
                    drain(family)  # reference counting: the caller's own point, as close() would be
            elif family.members <= 0:
                orphans.append(family)
        except Exception:  # a finalizer must not raise
            pass


class Handle(Resource):
    """A device-layer or runtime object: owns one C handle and keeps the Python objects it was built from
    (``keep``; keep[0]'s family is its own: everything built on a backend is one family with it)."""

    def __init__(self, handle: Any, keep: tuple[Any, ...] = ()) -> None:
        self._handle = handle
        self._keep = keep  # Python objects whose handles this one was built from (for readable repr / lifetime)
        self._join(keep[0]._family if keep else Family())
