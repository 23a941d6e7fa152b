"""Typed exceptions: every C status code, and every bad argument caught before it reaches C.

All derive from :class:`ctxcache.Error`. Argument errors also derive from the builtin a Python caller would
expect (``ValueError``, ``TypeError``, ``MemoryError``), so generic handlers keep working.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every exception ctxcache raises on purpose."""

    status: int | None = None


class InvalidArgumentError(Error, ValueError):
    """An argument is malformed in itself: negative, wrong length, unknown enum value, NULL."""

    status = 1


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type or dtype, or is a non-contiguous array."""


class ContractError(Error):
    """Arguments inconsistent with the cache's state: wrong lease kind, a changed prefix, an unknown record."""

    status = 2


class InvalidHandleError(Error):
    """A closed, released, foreign (another manager's) or orphaned (its manager was closed) object."""

    status = 3


class OutOfMemoryError(Error, MemoryError):
    status = 4


class InvariantError(Error):
    """check_invariants() found the state inconsistent: always a ctxcache bug."""

    status = 5


class LeasesOutstandingError(Error):
    """A manager was closed while leases were alive, or a coordinator while requests were: they are orphaned (the
    manager or coordinator is closed anyway)."""

    status = 6


class BufferTooSmallError(Error):
    status = 7


class UnsupportedError(Error):
    status = 8


class InternalError(Error):
    status = 9


class DeviceError(Error):
    """The CUDA runtime failed; device memory the call touched is unspecified (the objects can still be closed)."""

    status = 10


class RequestFailedError(Error):
    """A runtime request step could not be served (capacity, page-table overflow, another request active, a
    deployment without that reuse); the message is the request's own last error. Only finishing remains."""

    status = 11


class PoisonedError(RequestFailedError):
    """A device synchronisation failed: the coordinator refuses new work until ``shutdown()`` succeeds."""

    status = 12


class ConcurrentUseError(Error):
    """A call overlapped another call into the same family of objects (a manager and its leases; a backend and
    what is built on it; a coordinator and its requests; a sim engine) from another thread, or re-entered one
    from a callback. The single-writer contract was broken; the call was refused before it read or changed
    anything, and the message names both calls. Serialize calls on one family (one lock around each use of a
    manager, its leases and their results): docs/RELIABILITY.md, "Single writer"."""

    status = 13


class InterruptedCallError(Error):
    """A long-running call stopped early because it was asked to (``ReferenceEngine.interrupt()``); the object is
    consistent and may be used again. (Ctrl-C during such a call raises KeyboardInterrupt instead.)"""

    status = 14


STATUS_EXCEPTIONS: dict[int, type[Error]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        ContractError,
        InvalidHandleError,
        OutOfMemoryError,
        InvariantError,
        LeasesOutstandingError,
        BufferTooSmallError,
        UnsupportedError,
        InternalError,
        DeviceError,
        RequestFailedError,
        PoisonedError,
        ConcurrentUseError,
        InterruptedCallError,
    )
}
