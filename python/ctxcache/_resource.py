"""Resource: the lifetime protocol every handle-owning object shares.

A subclass defines ``close()`` (idempotent: frees its C handle once); this base makes it a context manager
and closes it when garbage-collected (errors there are swallowed: a finalizer must not raise).
"""

from __future__ import annotations


class Resource:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
