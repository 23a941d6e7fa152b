"""Mooncake Store as a ctxcache byte store (issue 27; docs/TIERS.md): a backend for :meth:`ctxcache.KvStore.from_backend`
over ``mooncake.store.MooncakeDistributedStore`` (the ``ctxcache[mooncake]`` extra), so replicas that share a
Mooncake master reuse each other's KV blocks.

Invariants:
- The Mooncake client is never touched before its ``setup()`` returned 0: until then (no master yet, a master that
  does not answer) every call answers :attr:`StoreResult.UNAVAILABLE` at once. Setup runs on a daemon thread that
  first probes the master's TCP port (``setup()`` against an absent master blocks 90 s), then retries every
  ``retry_s`` until it succeeds or :meth:`close` is called: serving starts at once and the store joins when it can.
- A call whose deadline (CLOCK_MONOTONIC nanoseconds) has passed answers :attr:`StoreResult.TIMED_OUT` without
  calling Mooncake. A call that started runs to Mooncake's own end (its calls cannot be cancelled); the tier that
  asked stops waiting at its deadline and applies the answer later, if at all.
- Bytes move without a copy (``batch_put_from`` / ``batch_get_into``) when an object lies inside memory registered
  with :meth:`register_memory` (engines register their host tier's slots themselves); any other address goes
  through Mooncake's byte API (``put`` / ``get``, one copy). Duplicate puts keep the first value (Mooncake's rule):
  keys name the layout, so a value is never replaced by another layout's.
- Nothing here decides what to trust: the tier checks every object's header and checksum before a byte is used.

Threading: the methods are called on the tiers' worker threads, several at once when several tiers share the
store; Mooncake's client is thread-safe, and this object's own state (readiness, registrations) is guarded by a
lock. ``close()`` is the owner's, once the engines using the store are closed.
"""

from __future__ import annotations

import ctypes
import re
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .errors import InvalidArgumentError
from .kv_store import StoreResult

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30}
_MIN_SEGMENT = 16 << 20  # Mooncake refuses a smaller global segment


def parse_size(text: str, what: str) -> int:
    """``"64MiB"``, ``"1GiB"``, ``"4096"`` -> bytes (InvalidArgumentError naming ``what`` otherwise)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise InvalidArgumentError(f"{what} must be a size such as 64MiB or 1GiB (got {text!r})")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgumentError(f"{what} must be HOST:PORT (got {text!r})")
    return host, int(port)


class MooncakeStore:
    """A Mooncake Store client as a byte-store backend (see the module comment).

    ``master``: the master's ``HOST:PORT``; ``metadata``: its metadata server (``http://HOST:PORT/metadata``);
    ``segment_bytes``: the memory this client contributes to the store (at least 16 MiB, Mooncake's floor; 0: none,
    this client only reads and writes other nodes' segments); ``buffer_bytes``: the client's transfer buffer."""

    def __init__(self, master: str, metadata: str, *, segment_bytes: int = 64 << 20, buffer_bytes: int = 16 << 20,
                 local_hostname: str = "127.0.0.1", protocol: str = "tcp", device: str = "",
                 retry_s: float = 1.0) -> None:
        self._master = _address(master, "master")
        self._master_text = master
        if not str(metadata).startswith(("http://", "etcd://", "redis://", "P2PHANDSHAKE")):
            raise InvalidArgumentError(f"metadata must be a metadata server URL such as http://HOST:PORT/metadata "
                                       f"(got {metadata!r})")
        if segment_bytes != 0 and segment_bytes < _MIN_SEGMENT:
            raise InvalidArgumentError(f"segment_bytes must be 0 or at least 16 MiB (Mooncake's floor; got "
                                       f"{segment_bytes})")
        if buffer_bytes < 0 or segment_bytes < 0:
            raise InvalidArgumentError("segment_bytes and buffer_bytes must be non-negative")
        if not 0 < retry_s <= 60:
            raise InvalidArgumentError(f"retry_s must be in (0, 60] (got {retry_s})")
        try:
            from mooncake.store import MooncakeDistributedStore  # noqa: F401  (the extra is there)
        except ImportError as e:
            raise ImportError("the Mooncake backend needs the mooncake extra: pip install 'ctxcache[mooncake]' "
                              f"(and Debian's libibverbs1 librdmacm1): {e}") from e
        self._metadata = str(metadata)
        self._segment_bytes = int(segment_bytes)
        self._buffer_bytes = int(buffer_bytes)
        self._hostname = local_hostname
        self._protocol = protocol
        self._device = device
        self._retry_s = float(retry_s)
        self._lock = threading.Lock()
        self._client: Any = None  # set once setup() returned 0
        self._ranges: list[tuple[int, int]] = []  # (address, bytes) registered with the client
        self._pending: list[tuple[int, int]] = []  # asked for before the client was ready
        self._closed = threading.Event()
        self.setup_attempts = 0
        self.zero_copy_keys = 0  # keys put or got through registered memory (batch_put_from / batch_get_into)
        self.copied_keys = 0  # keys that went through the byte API (an unregistered address)
        self._thread = threading.Thread(target=self._setup_loop, name="ctxcache-mooncake-setup", daemon=True)
        self._thread.start()

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> MooncakeStore:
        """``mooncake://HOST:PORT?metadata=http://HOST:PORT/metadata&segment=64MiB&buffer=16MiB`` (also
        ``protocol``, ``hostname``, ``device``); the metadata defaults to ``http://HOST:8080/metadata``."""
        parts = urlsplit(url)
        if parts.scheme != "mooncake" or not parts.netloc:
            raise InvalidArgumentError(f"a Mooncake store URL is mooncake://HOST:PORT?metadata=... (got {url!r})")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        known = {"metadata", "segment", "buffer", "protocol", "hostname", "device"}
        unknown = sorted(set(query) - known)
        if unknown:
            raise InvalidArgumentError(f"unknown Mooncake store option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        host, _ = _address(parts.netloc, "the store URL's address")
        kwargs: dict[str, Any] = {
            "metadata": query.get("metadata", f"http://{host}:8080/metadata"),
            "segment_bytes": parse_size(query.get("segment", "64MiB"), "segment"),
            "buffer_bytes": parse_size(query.get("buffer", "16MiB"), "buffer"),
            "local_hostname": query.get("hostname", "127.0.0.1"),
            "protocol": query.get("protocol", "tcp"),
            "device": query.get("device", ""),
        }
        kwargs.update(overrides)
        return cls(parts.netloc, **kwargs)

    # ---- readiness ------------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Whether the client is set up (calls reach Mooncake)."""
        return self._client is not None

    def wait_ready(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for the client to be set up; returns :attr:`ready`."""
        end = time.monotonic() + timeout_s
        while not self.ready and not self._closed.is_set() and time.monotonic() < end:
            time.sleep(0.02)
        return self.ready

    def _master_answers(self) -> bool:
        try:
            with socket.create_connection(self._master, timeout=1.0):
                return True
        except OSError:
            return False

    def _setup_loop(self) -> None:
        from mooncake.store import MooncakeDistributedStore

        while not self._closed.is_set():
            if self._master_answers():
                self.setup_attempts += 1
                client = MooncakeDistributedStore()
                rc = client.setup(self._hostname, self._metadata, self._segment_bytes, self._buffer_bytes,
                                  self._protocol, self._device, self._master_text)
                if rc == 0:
                    with self._lock:
                        if self._closed.is_set():
                            break
                        for address, size in self._pending:
                            if client.register_buffer(address, size) == 0:
                                self._ranges.append((address, size))
                        self._pending.clear()
                        self._client = client
                    return
            self._closed.wait(self._retry_s)

    # ---- memory ---------------------------------------------------------------------------------------------
    def register_memory(self, address: int, size: int) -> None:
        """Registers ``size`` bytes at ``address`` (an engine's host tier) for copy-free puts and gets: now when
        the client is ready, else as soon as it is."""
        with self._lock:
            if self._client is None:
                self._pending.append((int(address), int(size)))
            elif self._client.register_buffer(int(address), int(size)) == 0:
                self._ranges.append((int(address), int(size)))

    def unregister_memory(self, address: int) -> None:
        """Forgets the range registered at ``address`` (before its memory is freed)."""
        with self._lock:
            self._pending = [r for r in self._pending if r[0] != address]
            if any(r[0] == address for r in self._ranges):
                self._ranges = [r for r in self._ranges if r[0] != address]
                if self._client is not None:
                    self._client.unregister_buffer(int(address))

    def _registered(self, address: int, size: int) -> bool:
        return any(start <= address and address + size <= start + length for start, length in self._ranges)

    # ---- the backend's calls (KvStore.from_backend) ---------------------------------------------------------
    def _usable(self, count: int, deadline_ns: int) -> tuple[Any, list[int] | None]:
        client = self._client
        if client is None or self._closed.is_set():
            return None, [int(StoreResult.UNAVAILABLE)] * count
        if deadline_ns and time.monotonic_ns() >= deadline_ns:
            return None, [int(StoreResult.TIMED_OUT)] * count
        return client, None

    def exist(self, keys: Sequence[str], deadline_ns: int) -> list[int]:
        client, refused = self._usable(len(keys), deadline_ns)
        if refused is not None:
            return refused
        return [int(v) if int(v) < 0 else (1 if int(v) else 0) for v in client.batch_is_exist(list(keys))]

    def put(self, keys: Sequence[str], addresses: Sequence[int], sizes: Sequence[int], deadline_ns: int) -> list[int]:
        client, refused = self._usable(len(keys), deadline_ns)
        if refused is not None:
            return refused
        results = [int(StoreResult.FAILED)] * len(keys)
        fast = [i for i in range(len(keys)) if self._registered(addresses[i], sizes[i])]
        self.zero_copy_keys += len(fast)
        self.copied_keys += len(keys) - len(fast)
        if fast:
            answer = client.batch_put_from([keys[i] for i in fast], [addresses[i] for i in fast],
                                           [sizes[i] for i in fast])
            for i, v in zip(fast, answer):
                results[i] = min(int(v), 0)
        for i in sorted(set(range(len(keys))) - set(fast)):
            results[i] = min(int(client.put(keys[i], ctypes.string_at(addresses[i], sizes[i]))), 0)
        return results

    def get(self, keys: Sequence[str], addresses: Sequence[int], capacities: Sequence[int],
            deadline_ns: int) -> list[int]:
        client, refused = self._usable(len(keys), deadline_ns)
        if refused is not None:
            return refused
        results = [int(StoreResult.FAILED)] * len(keys)
        fast = [i for i in range(len(keys)) if self._registered(addresses[i], capacities[i])]
        self.zero_copy_keys += len(fast)
        self.copied_keys += len(keys) - len(fast)
        if fast:
            answer = client.batch_get_into([keys[i] for i in fast], [addresses[i] for i in fast],
                                           [capacities[i] for i in fast])
            for i, v in zip(fast, answer):
                results[i] = int(v)
        for i in sorted(set(range(len(keys))) - set(fast)):
            data = client.get(keys[i])
            if not data:
                results[i] = int(StoreResult.NOT_FOUND)
            elif len(data) > capacities[i]:
                results[i] = int(StoreResult.TOO_SMALL)
            else:
                ctypes.memmove(addresses[i], bytes(data), len(data))
                results[i] = len(data)
        return results

    # ---- lifetime -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the setup thread and closes the client (Mooncake's close() can take seconds with the GIL held,
        17 s with a dead master). Later calls answer UNAVAILABLE. Idempotent."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            client, self._client = self._client, None
            self._ranges.clear()
            self._pending.clear()
        if client is not None:
            client.close()

    def __enter__(self) -> MooncakeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else ("ready" if self.ready else "joining")
        return f"MooncakeStore({self._master_text!r}, {state})"
