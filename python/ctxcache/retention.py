"""Retention: which prefixes matter and for how long (docs/RETENTION.md), shaped as TensorRT-LLM's
KvCacheRetentionConfig. A :class:`RetentionSpec` travels with a publication (``ContextCacheManager.publish(...,
retention=)``) or with a runtime sequence: token ranges each with a priority 0..100 and an optional duration in
seconds, and a priority for the tokens generated in decode. Everything it does not name stays at
:data:`DEFAULT_PRIORITY` forever, which is plain LRU. Plain values; the conversion to the C struct is private to
the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._ffi import ffi, lib
from .errors import ArgumentTypeError, InvalidArgumentError

DEFAULT_PRIORITY = 35
MAX_PRIORITY = 100
MAX_RANGES = 64
_NO_DURATION = -1


@dataclass(frozen=True)
class RetentionRange:
    """Tokens ``[token_start, token_end)`` (``token_end=None``: to the end of the prompt) at ``priority`` for
    ``duration`` seconds from the publication (None: as long as the record lives)."""

    token_start: int = 0
    token_end: int | None = None
    priority: int = DEFAULT_PRIORITY
    duration: float | None = None


@dataclass(frozen=True)
class RetentionSpec:
    """A publication's retention: its ranges, the priority (and duration) of decode tokens, and where the prompt
    ends (``prompt_token_count``; None: all of it is prompt, as for a manager publication of a prompt's blocks)."""

    ranges: Sequence[RetentionRange] = field(default_factory=tuple)
    decode_priority: int = DEFAULT_PRIORITY
    decode_duration: float | None = None
    prompt_token_count: int | None = None


@dataclass(frozen=True)
class RetentionMetrics:
    """What eviction took at which priority (records by their rank then; only priorities that occurred), and the
    retention clock's and the pins' counts (``pinned_*`` are gauges)."""

    evicted_records_by_priority: dict[int, int]
    trimmed_records_by_priority: dict[int, int]
    retention_expiries: int
    pin_expiries: int
    pins_refused: int
    pinned_records: int
    pinned_base_pages: int


def retention_metrics_of(m: Any) -> RetentionMetrics:
    """A filled ``ctxc_retention_metrics_t`` (a manager's, coordinator's or sim engine's) as RetentionMetrics."""
    return RetentionMetrics(
        {p: int(n) for p, n in enumerate(m.evicted_records_by_priority) if n},
        {p: int(n) for p, n in enumerate(m.trimmed_records_by_priority) if n},
        int(m.retention_expiries), int(m.pin_expiries), int(m.pins_refused), int(m.pinned_records),
        int(m.pinned_base_pages))


def _int(value: Any, name: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise InvalidArgumentError(f"{name} must be in [{minimum}, {maximum}], got {value}")
    return value


def duration_ns(value: Any, name: str) -> int:
    """Seconds (int or float, >= 0) as nanoseconds; None as the C ABI's 'no duration'."""
    if value is None:
        return _NO_DURATION
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number of seconds or None, got {type(value).__name__}")
    if not 0 <= value <= 9.2e9:  # int64 nanoseconds hold about 292 years
        raise InvalidArgumentError(f"{name} must be in [0, 9.2e9] seconds, got {value}")
    return int(round(value * 1e9))


def clock_ns(seconds: Any, name: str = "seconds") -> int:
    """A retention clock reading in seconds (int or float, any origin) as int64 nanoseconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number of seconds, got {type(seconds).__name__}")
    if not -9.2e9 <= seconds <= 9.2e9:  # int64 nanoseconds hold about 292 years either way (NaN fails too)
        raise InvalidArgumentError(f"{name} must be in [-9.2e9, 9.2e9] seconds, got {seconds}")
    return int(round(seconds * 1e9))


def c_retention_spec(spec: RetentionSpec | None, keep: list[Any]) -> Any:
    """``spec`` as a ``ctxc_retention_spec_t *`` (NULL for None); what it points into goes to ``keep``. Checks the
    fields' types and ranges here, so a bad spec is a typed error before any C call."""
    if spec is None:
        return ffi.NULL
    if not isinstance(spec, RetentionSpec):
        raise ArgumentTypeError(f"retention must be a RetentionSpec or None, got {type(spec).__name__}")
    c = ffi.new("ctxc_retention_spec_t *")
    lib.ctxc_retention_spec_init(c)
    keep.append(c)
    ranges = list(spec.ranges)
    if len(ranges) > MAX_RANGES:
        raise InvalidArgumentError(f"retention.ranges has {len(ranges)} ranges, at most {MAX_RANGES}")
    if ranges:
        items = ffi.new("ctxc_retention_range_t[]", len(ranges))
        keep.append(items)
        for i, r in enumerate(ranges):
            if not isinstance(r, RetentionRange):
                raise ArgumentTypeError(f"retention.ranges[{i}] must be a RetentionRange, got {type(r).__name__}")
            start = _int(r.token_start, f"retention.ranges[{i}].token_start", 0, 2**31 - 1)
            end = -1 if r.token_end is None else _int(r.token_end, f"retention.ranges[{i}].token_end", 1, 2**31 - 1)
            if end != -1 and end <= start:
                raise InvalidArgumentError(f"retention.ranges[{i}] ends at {end}, not after its start {start}")
            items[i].token_start = start
            items[i].token_end = end
            items[i].priority = _int(r.priority, f"retention.ranges[{i}].priority", 0, MAX_PRIORITY)
            items[i].duration_ns = duration_ns(r.duration, f"retention.ranges[{i}].duration")
        c.ranges = items
        c.range_count = len(ranges)
    c.decode_priority = _int(spec.decode_priority, "retention.decode_priority", 0, MAX_PRIORITY)
    c.decode_duration_ns = duration_ns(spec.decode_duration, "retention.decode_duration")
    c.prompt_token_count = (-1 if spec.prompt_token_count is None
                            else _int(spec.prompt_token_count, "retention.prompt_token_count", 0, 2**31 - 1))
    return c
