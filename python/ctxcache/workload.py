"""Workloads for ``ctxcache replay`` and ``ctxcache sweep``: Mooncake-format traces and the built-in workload.

A workload is a sequence of :class:`WorkloadRequest` (prompt tokens on demand, the number of tokens to generate).

- Traces (``read_trace``): one JSON object per line with ``timestamp``, ``input_length``, ``output_length`` and
  ``hash_ids`` (one id per 512-token block). Hash id ``h`` expands into the tokens
  ``int32(splitmix64(h * 512 + j) mod 32000)`` for ``j`` in 0..511 (arithmetic mod 2**64), cut to
  ``input_length``; any page size that divides 512 keeps the trace's sharing structure exactly. Requests are
  stably sorted by timestamp. A malformed line is a :class:`TraceError` naming the file, the line and the field.
- The built-in workload (``builtin_workload``): generated here from a seed, so the installed command needs no data
  file: multi-turn conversations over a few shared system prompts, agent loops that re-send a growing context,
  a few long documents asked several questions, and one-off prompts, interleaved in a seeded order.

Nothing here reads files other than the trace it is given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TRACE_BLOCK = 512
VOCAB = 32000

__all__ = ["TRACE_BLOCK", "TraceError", "TraceRequest", "WorkloadRequest", "builtin_workload", "expand_range",
           "expand_tokens", "read_trace", "splitmix64", "trace_workload"]


class TraceError(ValueError):
    """A trace that cannot be read: ``path``, ``line`` (1-based, 0 = the file itself) and ``field`` say where."""

    def __init__(self, path: str, line: int, field: str | None, message: str) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {'field ' + repr(field) + ': ' if field else ''}{message}")
        self.path, self.line, self.field = path, line, field


@dataclass(frozen=True)
class TraceRequest:
    timestamp: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    line: int = 0  # where it was read (0: not from a file)


@dataclass(frozen=True)
class WorkloadRequest:
    """One request of a workload: the prompt (given, or expanded from trace hash ids on demand) and its output."""

    input_length: int
    output_length: int
    source: str  # "trace line N", or the built-in stream it belongs to ("conversation 3 turn 2", ...)
    prompt: np.ndarray | None = None
    hash_ids: tuple[int, ...] = ()

    def tokens(self) -> np.ndarray:
        if self.prompt is not None:
            return self.prompt
        return expand_tokens(self.hash_ids, self.input_length)


# ---- traces ------------------------------------------------------------------------------------------------------

def _integer(obj: dict[str, object], name: str, path: str, line: int) -> int:
    if name not in obj:
        raise TraceError(path, line, name, "missing")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise TraceError(path, line, name, f"must be an integer, got {json.dumps(value)}")
    if value < 0:
        raise TraceError(path, line, name, f"must be >= 0, got {int(value)}")
    return int(value)


def read_trace(path: str | os.PathLike[str], limit: int | None = None) -> list[TraceRequest]:
    """The first ``limit`` requests (file order) of a Mooncake JSONL trace, stably sorted by timestamp."""
    name = os.fspath(path)
    try:
        f = open(name, encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(name, 0, None, "no such file") from None
    except OSError as e:
        raise TraceError(name, 0, None, e.strerror or str(e)) from None
    requests: list[TraceRequest] = []
    with f:
        try:
            for line_no, line in enumerate(f, 1):
                if limit is not None and len(requests) >= limit:
                    break
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceError(name, line_no, None, f"not JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(obj, dict):
                    raise TraceError(name, line_no, None, "not a JSON object")
                timestamp = _integer(obj, "timestamp", name, line_no)
                input_length = _integer(obj, "input_length", name, line_no)
                output_length = _integer(obj, "output_length", name, line_no)
                ids = obj.get("hash_ids")
                if ids is None:
                    raise TraceError(name, line_no, "hash_ids", "missing")
                if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and
                                                        0 <= h < 2**64 for h in ids):
                    raise TraceError(name, line_no, "hash_ids", "must be a list of integers in [0, 2**64)")
                if len(ids) * TRACE_BLOCK < input_length:
                    raise TraceError(name, line_no, "hash_ids",
                                     f"{len(ids)} ids cover {len(ids) * TRACE_BLOCK} tokens, "
                                     f"fewer than input_length {input_length}")
                requests.append(TraceRequest(timestamp, input_length, output_length, tuple(ids), line_no))
        except UnicodeDecodeError as e:
            raise TraceError(name, len(requests) + 1, None, f"not UTF-8 text ({e.reason})") from None
    if not requests:
        raise TraceError(name, 0, None, "no requests in the trace")
    requests.sort(key=lambda r: r.timestamp)
    return requests


def trace_workload(requests: Sequence[TraceRequest]) -> list[WorkloadRequest]:
    return [WorkloadRequest(r.input_length, r.output_length, f"trace line {r.line}", hash_ids=r.hash_ids)
            for r in requests]


# ---- token expansion (identical in tools/bench/bench_manager.cpp) --------------------------------------------

_J = np.arange(TRACE_BLOCK, dtype=np.uint64)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of every element of a uint64 array (wrapping arithmetic)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def expand_tokens(hash_ids: Sequence[int], input_length: int) -> np.ndarray:
    """The request's pseudo-tokens: 512 per hash id, cut to input_length (int32)."""
    blocks = -(-input_length // TRACE_BLOCK)
    ids = np.asarray(hash_ids[:blocks], dtype=np.uint64)
    x = (ids[:, None] * np.uint64(TRACE_BLOCK) + _J).reshape(-1)[:input_length]
    return (splitmix64(x) % np.uint64(VOCAB)).astype(np.int32)


def expand_range(hash_ids: Sequence[int], begin: int, end: int) -> np.ndarray:
    """Tokens [begin, end) of a request (int32), as expand_tokens would give them."""
    pos = np.arange(begin, end, dtype=np.uint64)
    ids = np.asarray(hash_ids, dtype=np.uint64)[(pos // np.uint64(TRACE_BLOCK)).astype(np.intp)]
    return (splitmix64(ids * np.uint64(TRACE_BLOCK) + pos % np.uint64(TRACE_BLOCK)) % np.uint64(VOCAB)).astype(np.int32)


# ---- the built-in workload ---------------------------------------------------------------------------------------

def builtin_workload(seed: int = 0, scale: float = 1.0) -> list[WorkloadRequest]:
    """The built-in serving workload (about 110 requests and 130k prompt tokens at scale 1): 12 multi-turn
    conversations over 3 shared system prompts, 4 agent loops re-sending a growing context, 3 long documents asked
    3-4 questions each, and 20 one-off prompts, interleaved in a seeded order that keeps each stream's own order.
    ``scale`` < 1 keeps that fraction of each kind of stream (at least one), for quick tests."""
    rng = np.random.default_rng(seed)

    def text(lo: int, hi: int) -> np.ndarray:
        return rng.integers(0, VOCAB, int(rng.integers(lo, hi + 1)), dtype=np.int32)

    def count(n: int) -> int:
        return max(1, round(n * scale))

    streams: list[list[WorkloadRequest]] = []
    systems = [text(256, 768) for _ in range(3)]
    for c in range(count(12)):
        context = systems[int(rng.integers(len(systems)))]
        turns: list[WorkloadRequest] = []
        for t in range(int(rng.integers(3, 7))):
            context = np.concatenate([context, text(16, 96)])
            out = int(rng.integers(16, 65))
            turns.append(WorkloadRequest(context.size, out, f"conversation {c} turn {t}", prompt=context))
            context = np.concatenate([context, text(out, out)])  # the previous answer, re-sent next turn
        streams.append(turns)
    for a in range(count(4)):
        context = np.concatenate([text(512, 512), text(32, 128)])
        steps: list[WorkloadRequest] = []
        for s in range(int(rng.integers(4, 9))):
            out = int(rng.integers(16, 33))
            steps.append(WorkloadRequest(context.size, out, f"agent {a} step {s}", prompt=context))
            context = np.concatenate([context, text(out, out), text(64, 256)])  # its action, then the tool output
        streams.append(steps)
    for d in range(count(3)):
        document = text(2048, 4096)
        questions = []
        for q in range(int(rng.integers(3, 5))):
            prompt = np.concatenate([document, text(16, 48)])
            questions.append(WorkloadRequest(prompt.size, int(rng.integers(16, 49)), f"document {d} question {q}",
                                             prompt=prompt))
        streams.append(questions)
    for o in range(count(20)):
        prompt = text(32, 512)
        streams.append([WorkloadRequest(prompt.size, int(rng.integers(8, 65)), f"one-off {o}", prompt=prompt)])

    order: list[WorkloadRequest] = []
    cursors = [0] * len(streams)
    live = [i for i in range(len(streams))]
    while live:
        k = int(rng.integers(len(live)))
        s = live[k]
        order.append(streams[s][cursors[s]])
        cursors[s] += 1
        if cursors[s] == len(streams[s]):
            live.pop(k)
    return order
