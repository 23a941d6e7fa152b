"""KV events: what cluster routers (NVIDIA Dynamo, llm-d) need to know about a cache, in vLLM's vocabulary.

A manager (or the manager inside a coordinator or a reference engine) reports the changes of its base block index
once events are enabled (before the first publication): ``BlockStored`` when a publication makes blocks canonical
(root-first, with the parent and the tokens), ``BlockRemoved`` when eviction erases them (leaf-first),
``AllBlocksCleared`` when events are enabled and on ``clear()``. Block hashes are the low 64 bits of ctxcache's
128-bit block hashes. Either drain them (:meth:`KvEventSource.drain_kv_events`, e.g. to feed Dynamo's
``publish_stored``) or attach a :class:`KvEventPublisher`, which sends every manager call's events as one ZMQ
batch in vLLM's wire format (docs/EVENTS.md). Same single-writer contract as the object the events come from;
a publisher itself may be read from any thread.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from . import _arrays
from ._event_keys import KvEventKeys, KvEventMedia, set_stored_keys, stored_keys
from ._ffi import check, ffi, lib, new_output
from ._resource import Family, Resource
from .enums import KvEventType
from .errors import ArgumentTypeError, InvalidArgumentError

_NULL = ffi.NULL


@dataclass(frozen=True)
class BlockStored:
    """Blocks a publication made canonical. ``lora_name``: the adapter's name (None: the base model).
    ``extra_keys``: None when no block has any, else one entry per block as vLLM sends them: None, or a tuple of
    the adapter's name (a str) then ``(media identifier, offset)`` per media item overlapping the block, offset =
    the item's first token minus the block's first token."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_name: str | None = None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    medium: str = "GPU"  # where the blocks live: "GPU" (the device pool) or "CPU" (a host tier)


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: list[int]
    medium: str = "GPU"


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


KvEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]


@dataclass(frozen=True)
class KvEventStatus:
    enabled: bool
    pending: int  # events waiting for a drain
    lost: int  # events dropped beyond the pending limit (replaced by one AllBlocksCleared)


@dataclass(frozen=True)
class PublisherStats:
    accepted_batches: int
    sent_batches: int
    dropped_batches: int
    queued_batches: int
    next_sequence: int
    replay_requests: int
    subscriptions: int = 0  # subscribe messages seen (one per topic per subscriber)
    holding: bool = False  # batches are held for the first subscriber


def publisher_available() -> bool:
    """Whether this library was built with the ZMQ publisher (libzmq and msgpack-cxx)."""
    return bool(lib.ctxc_kv_event_publisher_available())


class KvEventPublisher(Resource):
    """A ZMQ PUB socket (and optionally a replay ROUTER) sending KV event batches in vLLM's format from a sender
    thread; a manager call never waits for it (a bounded queue drops the oldest batches and counts them).

    ``endpoint``: vLLM's rule: a ``*`` or ``::`` host, ``ipc://`` or ``inproc://`` binds, any other endpoint
    connects. ``data_parallel_rank`` r is sent with every batch and adds r to a tcp port. ``first_sequence``
    defaults to the wall clock in microseconds, so that a restarted publisher continues above its old numbers.

    A subscriber whose connection is not complete loses what is sent (ZMQ's slow joiner). ``wait_for_subscriber``
    (seconds) holds every batch until the first subscription arrives, at most that long after creation, without
    blocking the cache; :meth:`wait_for_subscriber` blocks the caller instead. ``linger`` (seconds): :meth:`close`
    keeps the replay socket serving until that long after the last batch was sent, so a router that noticed a gap
    can still fetch it (Ctrl-C cuts the linger short).
    Raises :class:`ctxcache.UnsupportedError` when the library was built without the publisher. Close it (or use
    ``with``): that sends what is queued and closes the sockets."""

    __slots__ = ("_handle", "_family", "endpoint", "replay_endpoint", "linger", "__weakref__")
    _destroy = staticmethod(lib.ctxc_kv_event_publisher_destroy)
    _what = "publisher"

    def __init__(self, endpoint: str = "tcp://*:5557", *, replay_endpoint: str | None = None, topic: str = "",
                 medium: str = "GPU", data_parallel_rank: int | None = None, buffer_steps: int = 10000,
                 max_queued_batches: int = 10000, send_high_water_mark: int = 100000, array_encoding: bool = False,
                 first_sequence: int | None = None, wait_for_subscriber: float = 0.0, linger: float = 0.0):
        options = ffi.new("ctxc_kv_event_publisher_options_t *")
        lib.ctxc_kv_event_publisher_options_init(options)
        keep = []
        for name, value in (("endpoint", endpoint), ("replay_endpoint", replay_endpoint), ("topic", topic),
                            ("medium", medium)):
            if value is None:
                continue
            if not isinstance(value, str):
                raise ArgumentTypeError(f"{name} must be a str, got {type(value).__name__}")
            text = ffi.new("char[]", value.encode())
            keep.append(text)
            setattr(options, name, text)
        if data_parallel_rank is not None:
            options.data_parallel_rank = _arrays.integer(data_parallel_rank, "data_parallel_rank")
        options.buffer_steps = _arrays.integer(buffer_steps, "buffer_steps", maximum=2**62)
        options.max_queued_batches = _arrays.integer(max_queued_batches, "max_queued_batches", maximum=2**62)
        options.send_high_water_mark = _arrays.integer(send_high_water_mark, "send_high_water_mark")
        options.array_encoding = int(_arrays.boolean(array_encoding, "array_encoding"))
        if first_sequence is not None:
            options.has_first_sequence = 1
            options.first_sequence = _arrays.integer(first_sequence, "first_sequence", maximum=2**64 - 1)
        options.wait_for_subscriber_ms = _arrays.milliseconds(wait_for_subscriber, "wait_for_subscriber")
        # The linger is served here, in interruptible slices, before the handle is destroyed (the C call would
        # block for all of it): the library's own linger stays 0.
        self.linger = _arrays.milliseconds(linger, "linger") / 1000
        out = ffi.new("ctxc_kv_event_publisher_t **")
        check(lib.ctxc_kv_event_publisher_create(options, out))
        del keep
        self._handle = out[0]
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self._join(Family())

    @property
    def stats(self) -> PublisherStats:
        s = new_output("ctxc_kv_event_publisher_stats_t")
        check(lib.ctxc_kv_event_publisher_stats(self._live(), s))
        return PublisherStats(int(s.accepted_batches), int(s.sent_batches), int(s.dropped_batches),
                              int(s.queued_batches), int(s.next_sequence), int(s.replay_requests),
                              int(s.subscriptions), bool(s.holding))

    def wait_for_subscriber(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until a subscriber has subscribed (what is sent from then on reaches
        it); True when one has. Waits in slices of 0.1 s, so Ctrl-C interrupts it."""
        deadline = time.monotonic() + _arrays.milliseconds(timeout, "timeout") / 1000
        subscribed = ffi.new("int32_t *")
        while True:
            left = deadline - time.monotonic()
            check(lib.ctxc_kv_event_publisher_wait_for_subscriber(
                self._live(), max(0, min(100, round(left * 1000))), subscribed))
            if subscribed[0] or left <= 0:
                return bool(subscribed[0])

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds until every accepted batch was sent (or dropped); True when it was."""
        empty = ffi.new("int32_t *")
        check(lib.ctxc_kv_event_publisher_flush(self._live(), _arrays.integer(round(timeout * 1000), "timeout"),
                                                empty))
        return bool(empty[0])

    def close(self) -> None:
        """Send what is queued, serve replay for the linger, stop and close the sockets; idempotent. A cache it
        is attached to then only counts the batches it drops. A publisher still holding its batches for a first
        subscriber sends them and closes at once (no subscriber came: there is nobody to linger for)."""
        if self.linger > 0 and not self.closed and not self.stats.holding:
            try:
                deadline = time.monotonic() + 10.0
                while not self.flush(0.1) and time.monotonic() < deadline:
                    pass
                end = time.monotonic() + self.linger  # the sender thread serves replay requests meanwhile
                while (left := end - time.monotonic()) > 0:
                    time.sleep(min(0.1, left))
            finally:
                Resource.close(self)
            return
        Resource.close(self)

    def __repr__(self) -> str:
        return f"KvEventPublisher({self.endpoint!r}{', closed' if self.closed else ''})"


class KvEventSource:
    """The KV event calls of an object that owns a manager (ContextCacheManager, ContextCacheCoordinator,
    sim.ReferenceEngine). The class provides ``_live()`` (its C handle) and a ``_kv_publisher`` attribute."""

    __slots__ = ()

    if TYPE_CHECKING:  # what the host class provides
        def _live(self) -> Any: ...

    def enable_kv_events(self, max_pending_events: int = 0) -> None:
        """Turn the event stream on (before the first publication: ContractError otherwise). Undrained events
        beyond ``max_pending_events`` (0: 1048576) become one AllBlocksCleared. With events on, a manager's
        publications need their tokens (``publish(..., tokens=...)``)."""
        check(lib.ctxc_kv_events_enable(self._live(), _arrays.integer(max_pending_events, "max_pending_events",
                                                                        maximum=2**62)))

    def disable_kv_events(self) -> None:
        check(lib.ctxc_kv_events_disable(self._live()))
        object.__setattr__(self, "_kv_publisher", None)

    def drain_kv_events(self) -> list[KvEvent]:
        """The events since the last drain (none while a publisher is attached)."""
        events = ffi.new("const ctxc_kv_event_t **")
        count = ffi.new("size_t *")
        block_size = ffi.new("int32_t *")
        check(lib.ctxc_kv_events_drain(self._live(), events, count, block_size))
        media = ffi.new("const uint8_t **")
        media_count = ffi.new("size_t *")
        check(lib.ctxc_kv_events_drained_media(self._live(), media, media_count))
        out: list[KvEvent] = []
        size = int(block_size[0])
        for i in range(count[0]):
            e = events[0][i]
            medium = "CPU" if i < media_count[0] and media[0][i] == int(lib.CTXC_KV_MEDIUM_HOST) else "GPU"
            hashes = [int(h) for h in ffi.unpack(e.block_hashes, e.block_hash_count)] if e.block_hash_count else []
            if e.type == KvEventType.BLOCK_STORED:
                tokens = [int(t) for t in ffi.unpack(e.token_ids, e.token_count)] if e.token_count else []
                lora, extra = stored_keys(e)
                out.append(BlockStored(hashes, int(e.parent_block_hash) if e.has_parent else None, tokens, size,
                                       lora, extra, medium))
            elif e.type == KvEventType.BLOCK_REMOVED:
                out.append(BlockRemoved(hashes, medium))
            else:
                out.append(AllBlocksCleared())
        return out

    @property
    def kv_event_status(self) -> KvEventStatus:
        enabled = ffi.new("int32_t *")
        pending = ffi.new("size_t *")
        lost = ffi.new("uint64_t *")
        check(lib.ctxc_kv_events_status(self._live(), enabled, pending, lost))
        return KvEventStatus(bool(enabled[0]), int(pending[0]), int(lost[0]))

    def attach_kv_event_publisher(self, publisher: KvEventPublisher | None) -> None:
        """Send every later call's events through ``publisher`` (None: back to draining); pending events go to it
        now. The publisher stays alive while attached (this object keeps a reference)."""
        if publisher is not None and not isinstance(publisher, KvEventPublisher):
            raise ArgumentTypeError(f"publisher must be a KvEventPublisher or None, got {type(publisher).__name__}")
        check(lib.ctxc_kv_events_attach_publisher(self._live(), publisher._live() if publisher else _NULL))
        object.__setattr__(self, "_kv_publisher", publisher)


def encode_kv_events(events: Sequence[KvEvent], *, block_size: int, timestamp: float,
                     data_parallel_rank: int | None = None, medium: str = "GPU", array_encoding: bool = False) -> bytes:
    """The msgpack payload a publisher sends for ``events`` (the last frame of its 3-frame message). Each event
    keeps its own medium: one on the device (``"GPU"``, as drained from a manager) is written as ``medium``, one
    a host tier reported (``"CPU"``) as ``"CPU"``, exactly as the library's publisher sends them."""
    c_events = ffi.new("ctxc_kv_event_t[]", max(1, len(events)))
    c_media = ffi.new("uint8_t[]", max(1, len(events)))
    keep: list[Any] = []
    for i, event in enumerate(events):
        c = c_events[i]
        hashes: list[int] = []
        event_medium = getattr(event, "medium", "GPU")
        if event_medium not in ("GPU", "CPU"):
            raise InvalidArgumentError(f"events[{i}].medium must be 'GPU' or 'CPU', got {event_medium!r}")
        c_media[i] = int(lib.CTXC_KV_MEDIUM_HOST if event_medium == "CPU" else lib.CTXC_KV_MEDIUM_DEVICE)
        if isinstance(event, BlockStored):
            c.type = KvEventType.BLOCK_STORED
            hashes = event.block_hashes
            tokens = _arrays.int32_array(event.token_ids, "token_ids")
            keep.append(tokens)
            c.token_ids = _arrays.int32_pointer(tokens) if tokens.size else _NULL
            c.token_count = tokens.size
            if event.parent_block_hash is not None:
                c.has_parent = 1
                c.parent_block_hash = _arrays.integer(event.parent_block_hash, "parent_block_hash", maximum=2**64 - 1)
            set_stored_keys(c, event, i, keep)
        elif isinstance(event, BlockRemoved):
            c.type = KvEventType.BLOCK_REMOVED
            hashes = event.block_hashes
        elif isinstance(event, AllBlocksCleared):
            c.type = KvEventType.ALL_BLOCKS_CLEARED
        else:
            raise ArgumentTypeError(f"events[{i}] is not a KV event: {type(event).__name__}")
        if hashes:
            c_hashes = ffi.new("uint64_t[]", [_arrays.integer(h, "block hash", maximum=2**64 - 1) for h in hashes])
            keep.append(c_hashes)
            c.block_hashes = c_hashes
            c.block_hash_count = len(hashes)
    if not isinstance(medium, str):
        raise ArgumentTypeError(f"medium must be a str, got {type(medium).__name__}")
    c_medium = ffi.new("char[]", medium.encode())
    rank = -1 if data_parallel_rank is None else _arrays.integer(data_parallel_rank, "data_parallel_rank")
    size = ffi.new("size_t *")
    args = (c_events, c_media, len(events), _arrays.integer(block_size, "block_size"), float(timestamp), rank,
            c_medium, int(_arrays.boolean(array_encoding, "array_encoding")))
    status = lib.ctxc_kv_events_encode_media(*args, _NULL, 0, size)  # the size query (a payload is never empty)
    if status != lib.CTXC_E_BUFFER_TOO_SMALL:
        check(status)
    buffer = ffi.new("uint8_t[]", size[0])
    check(lib.ctxc_kv_events_encode_media(*args, buffer, size[0], size))
    del keep
    return bytes(ffi.buffer(buffer, size[0]))


__all__ = ["AllBlocksCleared", "BlockRemoved", "BlockStored", "KvEvent", "KvEventKeys", "KvEventMedia",
           "KvEventPublisher", "KvEventSource", "KvEventStatus", "PublisherStats", "encode_kv_events",
           "publisher_available"]
