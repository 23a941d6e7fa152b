"""Workloads for ``ctxcache replay`` and ``ctxcache sweep``: Mooncake-format traces and the built-in workload.

A workload is a sequence of :class:`WorkloadRequest` (prompt tokens on demand, the number of tokens to generate).

- Traces (``read_trace``): one JSON object per line with ``timestamp``, ``input_length``, ``output_length`` and
  ``hash_ids`` (one id per 512-token block). Hash id ``h`` expands into the tokens
  ``int32(splitmix64(h * 512 + j) mod 32000)`` for ``j`` in 0..511 (arithmetic mod 2**64), cut to
  ``input_length``; any page size that divides 512 keeps the trace's sharing structure exactly. Requests are
  stably sorted by timestamp. A malformed line is a :class:`TraceError` naming the file, the line and the field.
- The built-in workload (``builtin_workload``): generated here from a seed, so the installed command needs no data
  file: multi-turn conversations over a few shared system prompts, agent loops that re-send a growing context,
  a few long documents asked several questions, and one-off prompts, interleaved in a seeded order; request i
  arrives at i * BUILTIN_INTERVAL seconds.
- Each request says how long a shared system prompt it opens with (``system_tokens``: the built-in conversations'
  system prompts, the conversation workload's shared whole blocks of one; 0 elsewhere) and when it arrives
  (``arrival``, seconds: a trace's millisecond timestamp / 1000), what ``replay --retain-system-prompts`` reads.
- The conversation workload (``conversation_trace``, ``ctxcache replay --workload conversations``, written as a
  trace by ``ctxcache workload --out FILE``): many multi-turn conversations at scale, generated as a trace (hash
  ids), so that it replays, sweeps and benchmarks exactly as a downloaded trace does. Each turn's prompt is the
  previous turn's prompt, then its output, then a new question, token for token: a block keeps its hash id while
  it fills (the expansion is by id and offset, so a longer prompt extends the shorter one), and new blocks take
  fresh ids. Conversations open with one of a few system prompts, shared in whole 512-token blocks (the trace
  format shares block by block: a system prompt's last partial block is each conversation's own). A fixed number
  of conversations are in progress at once; each request is a turn of one of them, picked at random, and a
  finished conversation's place goes to the next. The same ``ConversationSpec`` (seed included) gives the same
  trace, request for request.

Nothing here reads files other than the trace it is given (``write_trace`` writes the file it is given).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import numpy as np

TRACE_BLOCK = 512
VOCAB = 32000
BUILTIN_INTERVAL = 0.1  # seconds between two arrivals of the built-in workload (it has no timestamps of its own)

__all__ = ["BUILTIN_INTERVAL", "TRACE_BLOCK", "ConversationSpec", "TraceError", "TraceRequest", "WorkloadError", "WorkloadRequest",
           "add_conversation_options", "builtin_workload", "conversation_spec", "conversation_trace", "expand_range",
           "expand_tokens", "given_conversation_options", "read_trace", "splitmix64", "trace_workload",
           "write_trace"]


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
    source: str = ""  # a generated request's place in its workload ("conversation 3 turn 2"); not in the file
    system_tokens: int = 0  # a generated request's shared system prompt (its whole blocks' tokens); not in the file


@dataclass(frozen=True)
class WorkloadRequest:
    """One request of a workload: the prompt (given, or expanded from trace hash ids on demand), its output, the
    shared system prompt it opens with (its length) and its arrival time."""

    input_length: int
    output_length: int
    source: str  # "trace line N", or the built-in stream it belongs to ("conversation 3 turn 2", ...)
    prompt: np.ndarray | None = None
    hash_ids: tuple[int, ...] = ()
    system_tokens: int = 0  # its first tokens are this long a system prompt shared with other requests (0: none)
    arrival: float | None = None  # seconds: when it arrives (a trace's timestamp; the built-in's nominal time)

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
    """The trace's requests as a workload; a timestamp (milliseconds) is the request's arrival in seconds."""
    return [WorkloadRequest(r.input_length, r.output_length, r.source or f"trace line {r.line}", hash_ids=r.hash_ids,
                            system_tokens=r.system_tokens, arrival=r.timestamp / 1000.0)
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
        system = context = systems[int(rng.integers(len(systems)))]
        turns: list[WorkloadRequest] = []
        for t in range(int(rng.integers(3, 7))):
            context = np.concatenate([context, text(16, 96)])
            out = int(rng.integers(16, 65))
            turns.append(WorkloadRequest(context.size, out, f"conversation {c} turn {t}", prompt=context,
                                         system_tokens=system.size))
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
    return [dataclasses.replace(r, arrival=i * BUILTIN_INTERVAL) for i, r in enumerate(order)]


# ---- the conversation workload (a generated trace) ---------------------------------------------------------------

class WorkloadError(ValueError):
    """A workload that cannot be generated with the options given (the message names the option)."""


@dataclass(frozen=True)
class ConversationSpec:
    """The conversation workload's shape. Token sizes are means: each question, output and system prompt is drawn
    uniformly from [ceil(mean / 2), mean + mean // 2] (a mean of 0 gives 0)."""

    conversations: int = 200
    turns: int = 20  # every conversation has exactly this many turns: conversations * turns requests
    question_tokens: int = 128
    output_tokens: int = 256
    system_prompt_tokens: int = 2048
    system_prompts: int = 4
    concurrent: int = 32  # conversations in progress at once
    interval_ms: int = 100  # mean gap between two requests (Poisson arrivals); the trace's timestamps
    seed: int = 0

    # (field, option, smallest value) for the checks and the command-line options
    _LIMITS = (("conversations", "--conversations", 1), ("turns", "--turns", 1),
               ("question_tokens", "--question-tokens", 1), ("output_tokens", "--output-tokens", 0),
               ("system_prompt_tokens", "--system-prompt-tokens", 0), ("system_prompts", "--system-prompts", 1),
               ("concurrent", "--concurrent", 1), ("interval_ms", "--interval-ms", 0), ("seed", "--seed", 0))
    # A trace is generated and read in memory (about 100 us and 8 bytes per hash id in Python): bounded so that
    # the largest takes minutes and a few hundred MB, never the machine.
    MAX_REQUESTS = 1_000_000
    MAX_PROMPT_TOKENS = 1 << 24  # one prompt
    MAX_TRACE_BLOCKS = 1 << 25

    def check(self) -> None:
        """WorkloadError naming the option when a size is out of range or the trace would be unreasonably large."""
        for name, option, low in self._LIMITS:
            value = getattr(self, name)
            high = 2**64 - 1 if name == "seed" else 2**31 - 1
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise WorkloadError(f"{option} must be an integer in [{low}, {high}], got {value!r}")
        requests = self.conversations * self.turns
        if requests > self.MAX_REQUESTS:
            raise WorkloadError(f"--conversations x --turns is {requests:,} requests, more than "
                                f"{self.MAX_REQUESTS:,}")
        per_turn = self.question_tokens + self.question_tokens // 2 + self.output_tokens + self.output_tokens // 2
        longest = self.system_prompt_tokens + self.system_prompt_tokens // 2 + self.turns * per_turn
        if longest > self.MAX_PROMPT_TOKENS:
            raise WorkloadError(f"a conversation's last prompt could reach {longest:,} tokens, more than "
                                f"{self.MAX_PROMPT_TOKENS:,}: lower --turns, --question-tokens or --output-tokens")
        mean_blocks = (self.system_prompt_tokens + self.turns * (self.question_tokens + self.output_tokens) / 2) / 512
        if requests * mean_blocks > self.MAX_TRACE_BLOCKS:
            raise WorkloadError(f"the trace would list about {requests * mean_blocks:,.0f} hash ids, more than "
                                f"{self.MAX_TRACE_BLOCKS:,}: lower --conversations or --turns")


def conversation_trace(spec: ConversationSpec) -> list[TraceRequest]:
    """The conversation workload as trace requests in arrival order (see the module comment); deterministic in
    ``spec``. Hash ids are numbered from 0: the system prompts' shared blocks first, then each block as it opens."""
    spec.check()
    rng = np.random.default_rng(spec.seed)

    def draw(mean: int) -> int:
        return int(rng.integers(-(-mean // 2), mean + mean // 2 + 1)) if mean > 0 else 0

    next_id = 0

    def fresh(count: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + count))
        next_id += count
        return ids

    systems = []  # (length, shared ids: its whole blocks)
    for _ in range(spec.system_prompts):
        length = draw(spec.system_prompt_tokens)
        systems.append((length, fresh(length // TRACE_BLOCK)))

    class Conversation:
        def __init__(self, number: int) -> None:
            self.number = number
            length, shared = systems[int(rng.integers(len(systems)))]
            self.ids = list(shared)
            self.system_tokens = len(shared) * TRACE_BLOCK  # what the trace shares of it: its whole blocks
            self.length = length  # tokens of the history (what the next prompt starts with)
            self.turn = 0

        def extend(self, tokens: int) -> None:
            self.length += tokens
            blocks = -(-self.length // TRACE_BLOCK)
            if blocks > len(self.ids):
                self.ids.extend(fresh(blocks - len(self.ids)))

    requests: list[TraceRequest] = []
    live: list[Conversation] = []
    started = 0
    time_ms = 0.0
    while started < spec.conversations or live:
        while len(live) < spec.concurrent and started < spec.conversations:
            live.append(Conversation(started))
            started += 1
        k = int(rng.integers(len(live)))
        c = live[k]
        c.extend(draw(spec.question_tokens))
        output = draw(spec.output_tokens)
        time_ms += float(rng.exponential(spec.interval_ms)) if spec.interval_ms else 0.0
        # line: where `write_trace` puts it (timestamps never decrease, so reading it back keeps this order)
        requests.append(TraceRequest(int(time_ms), c.length, output, tuple(c.ids), len(requests) + 1,
                                     f"conversation {c.number} turn {c.turn}", c.system_tokens))
        c.extend(output)  # the answer is re-sent with the next question
        c.turn += 1
        if c.turn == spec.turns:
            live.pop(k)
    return requests


def write_trace(requests: Sequence[TraceRequest], out: str | os.PathLike[str] | TextIO) -> None:
    """Writes the requests as a Mooncake JSONL trace (one object per line, the fields in the format's order) to
    a path or an open text file; ``read_trace`` reads it back as it was."""
    if not isinstance(out, (str, os.PathLike)):
        for r in requests:
            out.write(json.dumps({"timestamp": r.timestamp, "input_length": r.input_length,
                                  "output_length": r.output_length, "hash_ids": list(r.hash_ids)}) + "\n")
        return
    with open(out, "w", encoding="utf-8") as f:
        write_trace(requests, f)


def add_conversation_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The conversation workload's options. With ``defaults=False`` they default to None (unset), so that a caller
    can tell which were given (``conversation_spec`` fills in the rest)."""
    d = ConversationSpec()
    group = parser.add_argument_group("conversation workload (--workload conversations)" if not defaults else
                                      "conversation workload")
    helps = {"conversations": "conversations in the workload", "turns": "turns (requests) per conversation",
             "question_tokens": "mean tokens of each new question",
             "output_tokens": "mean tokens of each answer (re-sent in the next turn's prompt)",
             "system_prompt_tokens": "mean tokens of a system prompt", "system_prompts":
             "distinct system prompts the conversations share", "concurrent": "conversations in progress at once",
             "interval_ms": "mean milliseconds between two requests (the timestamps)"}
    for name, option, low in ConversationSpec._LIMITS:
        if name == "seed":
            continue
        default = getattr(d, name)
        group.add_argument(option, dest=name, type=int, default=default if defaults else None, metavar="N",
                           help=f"{helps[name]} (default {default:,}; at least {low})")


def conversation_spec(args: argparse.Namespace, seed: int) -> ConversationSpec:
    """The ConversationSpec of parsed options (unset ones take their defaults); WorkloadError when out of range."""
    given = {name: getattr(args, name) for name, _, _ in ConversationSpec._LIMITS
             if name != "seed" and getattr(args, name, None) is not None}
    spec = ConversationSpec(**given, seed=seed)
    spec.check()
    return spec


def given_conversation_options(args: argparse.Namespace) -> list[str]:
    """The conversation options set on the command line (those not left at None)."""
    return [option for name, option, _ in ConversationSpec._LIMITS
            if name != "seed" and getattr(args, name, None) is not None]


def workload_main(argv: Sequence[str] | None = None) -> int:
    """``ctxcache workload --out FILE [options]``: writes the conversation workload as a Mooncake JSONL trace and
    prints one line saying what it wrote. A bad option or an unwritable file: one line on stderr, exit 2."""
    import sys

    parser = argparse.ArgumentParser(
        prog="ctxcache workload",
        description="Write the seeded conversation workload (the one `ctxcache replay --workload conversations` "
                    "replays) as a Mooncake-format JSONL trace, to replay, sweep or benchmark as a file.")
    parser.add_argument("--out", required=True, metavar="FILE", help="the trace to write (- for stdout)")
    parser.add_argument("--seed", type=int, default=0, help="the workload's seed (default 0)")
    add_conversation_options(parser, defaults=True)
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        spec = conversation_spec(args, args.seed)
        requests = conversation_trace(spec)
        write_trace(requests, sys.stdout if args.out == "-" else args.out)
    except WorkloadError as e:
        print(f"ctxcache workload: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"ctxcache workload: error: --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ctxcache workload: interrupted (the trace is incomplete)", file=sys.stderr)
        return 130
    blocks = sum(len(r.hash_ids) for r in requests)
    distinct = len({h for r in requests for h in r.hash_ids})
    if args.out != "-":
        print(f"wrote {args.out}: {len(requests):,} requests, {sum(r.input_length for r in requests):,} prompt "
              f"tokens, {blocks:,} blocks ({distinct:,} distinct ids) from {spec.conversations:,} conversations x "
              f"{spec.turns} turns, seed {spec.seed}")
    return 0
