"""Resource: the lifetime protocol every handle-owning object shares.

A subclass defines ``close()`` (idempotent: frees its C handle once); this base makes it a context manager
and closes it when garbage-collected (errors there are swallowed: a finalizer must not raise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

_R = TypeVar("_R", bound="Resource")


class Resource:
    __slots__ = ()

    if TYPE_CHECKING:

        def close(self) -> None: ...

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
