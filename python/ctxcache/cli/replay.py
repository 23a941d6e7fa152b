"""``ctxcache replay`` and ``ctxcache sweep``: a serving workload replayed through the context cache.

Two engines, one report:

- full (the default): every request is served through the runtime by :class:`ctxcache.sim.ReferenceEngine`
  (real KV bytes on the CPU or CUDA backend; deployment attention, hybrid or eagle for --mode vanilla, hybrid,
  spec), ``max_new_tokens`` = the request's output length, batches of --batch-size founders. ``--verify`` serves the
  same requests again on a fresh engine with reuse off and compares every request's generated tokens and state
  digest (SHA-256 of its final KV bytes): equal everywhere = every reused prefix was byte-exact.
- bookkeeping-only (``--bookkeeping-only``): the manager alone, no bytes, for capacities too large to hold real
  pools. Per batch of --batch-size requests: hash the prompt's full pages (timed apart), ``acquire`` (vanilla or
  spec; on insufficient capacity after a hit, the coordinator's forced-cold retry: acquire again bypassing the
  cache, and publish nothing), then at prefill end ``publish(prompt)``, then decode growth to
  ``ceil((input + output) / P)`` pages per pool, then ``release``. A request that does not fit even cold is
  counted as rejected. Each of the four operations is timed (p50/p99/max).

What agrees between them: the bookkeeping-only replay publishes the prompt only, at prefill end, which is what the
engine does with ``--commit-policy prefill_state_only`` (the trace gives output lengths, not output tokens, so a
generated tail could never be re-sent anyway). With batch size 1, that commit policy and the same page size, pool
capacity and record limit, every request's reused tokens are equal in both (``tests/python/test_replay.py``).
With ``including_generated_tokens`` the engine also publishes prompt + generated tokens at decode end: more
records, earlier eviction, the same hits on traces.

The unbounded-cache upper bound (``upper_bound``): an infinite cache, requests in order, each prompt's chained
full-page hashes matched page by page against every page published before it; reuse = matched tokens, except that a
prompt matched whole and page-aligned recomputes its last page (the full-input rewind: the next token's logits
need one computed position), and in spec mode every hit replays its boundary page. Each prompt's pages are then
published. This is exactly what the manager does with pools and records that never run short.

Options and figures: every integer option is range-checked as it is parsed (``ctxcache.cli.args.int_range``), and what
depends on two options or on the machine (``--capacity-tokens`` against ``--page-size``, ``--backend cuda``, the
sweep's ``--out-dir`` and ``--name``) is checked before any work: a bad one is one line on stderr, exit status 2.
The report's requests/s covers the replay alone (the manager calls, or the engine's serving with ``--verify``'s
cold runs), not the reading, the hashing, the bound or the optimum, which the wall time adds. The sweep's 90% and
99% capacities are interpolated log-linearly between the sampled point below and the first sampled point at or
above the target (both are reported). The progress bar is drawn only on a terminal.

Retention (docs/RETENTION.md): ``--retain-system-prompts PRIORITY[:SECONDS]`` gives each request's shared system
prompt (``WorkloadRequest.system_tokens``) a range at that priority in every publication of it, in both engines;
both drive the retention clock from the requests' arrival times (``WorkloadRequest.arrival``), never backwards.
``reuse_by_priority`` splits each request's prompt, its unbounded-cache reuse and its reuse (all prefixes) at the
system prompt's end: the tokens before it at PRIORITY, the rest at the default 35.

The offline optimum (``ctxcache.cli.oracle``, vanilla mode with prefill-state publication; ``--no-optimum`` skips it):
what the same capacity would reuse if eviction always removed the cached page needed farthest in the future
(Belady), leaves of the prefix tree only, requests one at a time. No online policy can do better; the gap between
it and the hit rate is what a better eviction policy could still win (docs/EVICTION.md).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..enums import AcquireStatus, CommitPolicy, HashAlgorithm, LookupPolicy, ResourceType, ReusePlanKind
from ..hashing import Hasher
from ..host_tier import BookkeepingStore
from ..manager import ContextCacheManager, ResourceDemand
from ..retention import DEFAULT_PRIORITY, RetentionMetrics, RetentionRange, RetentionSpec
from .args import (
    INT32_MAX,
    UINT32_MAX,
    OneLineParser,
    file_stem,
    int_range,
    retention_rule,
    seconds_range,
    zmq_endpoint,
)
from .oracle import offline_optimum, prepare_pages
from .workload import (
    TRACE_BLOCK,
    ConversationSpec,
    TraceError,
    WorkloadError,
    WorkloadRequest,
    add_conversation_options,
    builtin_workload,
    conversation_spec,
    conversation_trace,
    given_conversation_options,
    read_trace,
    trace_workload,
)

MODES = {"vanilla": "attention", "hybrid": "hybrid", "spec": "eagle"}
DEFAULT_KEY = "ctxcache-replay-key"
OPERATIONS = ("acquire", "publish", "grow", "release")
OCCUPANCY_SAMPLES = 20
# Full mode: the engine's toy model stores 2 layers x K,V x 2 heads x 8 dims x 2 bytes = 128 bytes per token and
# pool; pools larger than this are refused (use --bookkeeping-only or a smaller capacity).
FULL_MODE_MAX_POOL_BYTES = 2 << 30
_BYTES_PER_TOKEN = 128


class SettingsError(ValueError):
    """Settings the replay cannot run with (the message says which and why)."""


# ---- settings and hashes -------------------------------------------------------------------------------------------

@dataclass
class Settings:
    page_size: int = 16
    capacity_pages: int | None = None  # None: half the workload's distinct prompt pages
    max_records: int = 1_000_000
    batch_size: int = 1
    mode: str = "vanilla"
    backend: str = "cpu"
    hash_algorithm: str = "sha256"
    key: str = DEFAULT_KEY
    commit_policy: str = "prefill_state_only"
    seed: int = 0
    bookkeeping_only: bool = False
    verify: bool = False
    events: str | None = None  # KV event PUB endpoint (docs/EVENTS.md)
    events_replay: str | None = None
    events_topic: str = ""
    events_wait: float = 5.0  # seconds to wait for a first subscriber before replaying (ZMQ's slow joiner)
    events_linger: float = 2.0  # seconds the replay socket keeps serving after the last batch
    eviction_policy: str = "lru"  # "lru" (whole records, the reference's) or "lru-trim" (tails first)
    # --retain-system-prompts: (priority, seconds or None) for the tokens of each request's shared system prompt
    retain_system: tuple[int, float | None] | None = None
    host_tier_pages: int = 0  # a host-memory tier beside the device pool (vanilla mode)
    host_write: str = "back"  # "back" (at eviction) or "through" (at publication)
    replicas: int = 1  # the workload dealt to this many replicas, each with its own pool and tier
    deal: str = "round-robin"  # how requests go to replicas: "round-robin" or "conversation"
    store_pages: int = 0  # bookkeeping-only: a store of this many pages shared by every replica (0: none)
    store_url: str | None = None  # full mode: a byte store under the host tier (memory://, mooncake://...)
    store_policy: str = "wait"  # "wait" (up to store_deadline_ms) or "best-effort"
    store_deadline_ms: float = 50.0


@dataclass
class Prepared:
    """The workload with its prompts' full-page hashes (computed once, shared by the bound and every replay)."""

    requests: list[WorkloadRequest]
    hashes: list[np.ndarray]
    hash_seconds: float
    distinct_pages: int

    @property
    def prompt_tokens(self) -> int:
        return sum(r.input_length for r in self.requests)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def prepare(requests: Sequence[WorkloadRequest], settings: Settings,
            progress: Callable[[int], None] | None = None) -> Prepared:
    """Hash every prompt's full pages (keyed SHA-256 or FNV-1a-128); KeyboardInterrupt keeps what was hashed."""
    if settings.page_size <= 0:
        raise SettingsError(f"--page-size must be positive, got {settings.page_size}")
    if settings.hash_algorithm not in ("sha256", "fnv1a128"):
        raise SettingsError(f"--hash must be sha256 or fnv1a128, got {settings.hash_algorithm!r}")
    key = settings.key.encode() if settings.hash_algorithm == "sha256" and settings.key else None
    hashes: list[np.ndarray] = []
    distinct: set[bytes] = set()
    t0 = time.perf_counter()
    hasher = Hasher(settings.hash_algorithm, key)
    try:
        for r in requests:
            h = hasher.hash_full_blocks(r.tokens(), settings.page_size)
            hashes.append(h)
            distinct.update(h.view("V16").reshape(-1).tolist())
            if progress:
                progress(1)
    finally:
        hasher.close()
    return Prepared(list(requests[:len(hashes)]), hashes, time.perf_counter() - t0, len(distinct))


def default_capacity_pages(prepared: Prepared, settings: Settings) -> int:
    """Half the distinct prompt pages, and at least what the batch's largest requests need."""
    return max(prepared.distinct_pages // 2, minimum_capacity_pages(prepared.requests, settings))


def minimum_capacity_pages(requests: Sequence[WorkloadRequest], settings: Settings) -> int:
    """The pages the largest request needs on its own (prompt + output, + the engine's one-token headroom)."""
    return max((_ceil_div(r.input_length + r.output_length + 1, settings.page_size) for r in requests), default=1)


def check_capacity(requests: Sequence[WorkloadRequest], settings: Settings, capacity_pages: int) -> None:
    if capacity_pages <= 0:
        raise SettingsError(f"the pool capacity must be positive, got {capacity_pages} pages")
    if settings.max_records <= 0:
        raise SettingsError(f"--max-records must be positive, got {settings.max_records}")
    if settings.batch_size <= 0:
        raise SettingsError(f"--batch-size must be positive, got {settings.batch_size}")
    need = minimum_capacity_pages(requests, settings)
    if capacity_pages < need:
        worst = max(requests, key=lambda r: r.input_length + r.output_length)
        raise SettingsError(
            f"capacity of {capacity_pages} pages ({capacity_pages * settings.page_size} tokens) is smaller than one "
            f"request: {worst.source} needs {need} pages ({worst.input_length} prompt + {worst.output_length} "
            f"output tokens at page size {settings.page_size}); use --capacity-tokens "
            f"{need * settings.page_size} or more")


# ---- retention (docs/RETENTION.md) ---------------------------------------------------------------------------------

def retention_of(request: WorkloadRequest, settings: Settings) -> RetentionSpec | None:
    """What the request's publications carry: with --retain-system-prompts, its shared system prompt's tokens at
    that priority (for that many seconds); else nothing (the default, plain LRU)."""
    if settings.retain_system is None or request.system_tokens <= 0:
        return None
    priority, seconds = settings.retain_system
    return RetentionSpec(ranges=(RetentionRange(0, min(request.system_tokens, request.input_length), priority,
                                                seconds),))


def priority_split(request: WorkloadRequest, settings: Settings, tokens: int) -> list[tuple[int, int]]:
    """The first ``tokens`` of the request's prompt by the priority the replay gave them: (priority, count) pairs,
    the retained system prompt's first."""
    spec = retention_of(request, settings)
    if spec is None:
        return [(DEFAULT_PRIORITY, tokens)]
    r = spec.ranges[0]
    head = min(tokens, r.token_end or 0)
    return [(r.priority, head), (DEFAULT_PRIORITY, tokens - head)]


def reuse_by_priority(requests: Sequence[WorkloadRequest], settings: Settings, reused: Sequence[int],
                      bound: Sequence[int] | None) -> dict[str, dict[str, int | None]]:
    """Per priority that occurs (highest first, as decimal strings): the prompt tokens at it, what an unbounded
    cache would reuse of them (None without the bound) and what was reused."""
    rows: dict[int, list[int | None]] = {}
    for k, (r, used) in enumerate(zip(requests, reused)):
        for priority, count in priority_split(r, settings, r.input_length):
            rows.setdefault(priority, [0, 0 if bound is not None else None, 0])[0] += count  # type: ignore[operator]
        if bound is not None:
            for priority, count in priority_split(r, settings, bound[k]):
                rows[priority][1] += count  # type: ignore[operator]
        for priority, count in priority_split(r, settings, used):
            rows[priority][2] += count  # type: ignore[operator]
    return {str(p): {"prompt_tokens": v[0], "unbounded_reusable_tokens": v[1], "reused_tokens": v[2]}
            for p, v in sorted(rows.items(), reverse=True)}


# ---- the unbounded-cache upper bound -------------------------------------------------------------------------------

def upper_bound(prepared: Prepared, page_size: int, mode: str = "vanilla") -> tuple[int, list[int]]:
    """Reused tokens with an unbounded cache (see the module comment): the total and per request."""
    cached: set[bytes] = set()
    per_request: list[int] = []
    for r, h in zip(prepared.requests, prepared.hashes):
        keys = h.view("V16").reshape(-1).tolist()
        matched = 0
        for k in keys:
            if k not in cached:
                break
            matched += 1
        reuse = matched * page_size
        if mode == "spec":
            reuse = max(0, reuse - page_size)
        elif reuse > 0 and reuse == r.input_length:
            reuse -= page_size  # full-input rewind
        per_request.append(reuse)
        cached.update(keys[matched:])
    return sum(per_request), per_request


# ---- measurements ------------------------------------------------------------------------------------------------

@dataclass
class Measured:
    """What a replay measured, request by request (what an interrupted run reports is what is here)."""

    engine: str
    capacity_pages: int
    reused: list[int] = field(default_factory=list)
    reused_host: list[int] = field(default_factory=list)  # of reused: the tokens the host tier supplied
    reused_store: list[int] = field(default_factory=list)  # of reused: the tokens the shared store supplied
    replica: list[int] = field(default_factory=list)  # the replica that served each request
    replicas: int = 1
    matched: list[int] = field(default_factory=list)
    used_pages: list[int] = field(default_factory=list)  # base pool pages held after each request (or chunk)
    used_at: list[int] = field(default_factory=list)  # requests done at each sample
    records: list[int] = field(default_factory=list)
    op_ns: dict[str, list[int]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    full_input_rewinds: int = 0
    forced_cold: int = 0
    rejected: int = 0
    grow_failures: int = 0
    evicted_records: int = 0
    reclaimed_pages: int = 0
    manager_seconds: float = 0.0
    engine_seconds: float = 0.0
    verify: dict[str, Any] | None = None
    engine_stats: dict[str, Any] | None = None
    events: dict[str, Any] | None = None  # the KV event publisher's counters
    retention: dict[str, Any] | None = None  # the manager's retention metrics: evictions by priority, expiries
    host_tier: dict[str, Any] | None = None  # the host tier's metrics (summed over replicas)
    store: dict[str, Any] | None = None  # the shared store's metrics
    exporter: MetricsExporter | None = None  # --metrics-port


class MetricsExporter:
    """--metrics-port: prometheus_client's HTTP server over a MetricsCollector. The replay's own thread attaches the
    cache (and the publisher), takes a snapshot at most every ``interval`` seconds between requests, and a last one
    when the replay ends; a scrape (the server's thread) only reads the latest snapshot, so it never enters the
    cache's single-writer family."""

    def __init__(self, port: int, interval: float = 0.25):
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise SettingsError("--metrics-port needs prometheus_client: pip install 'ctxcache[metrics]'") from None
        from ..metrics import MetricsCollector

        self.collector = MetricsCollector()
        self.interval = interval
        self._next = 0.0
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            self._server, self._thread = start_http_server(port, registry=registry)
        except OSError as e:
            raise SettingsError(f"--metrics-port {port}: {e.strerror or e}") from None
        self.port = self._server.server_address[1]

    def attach(self, source: Any) -> None:
        self.collector.add(source)

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            self.collector.update()

    def finish(self) -> None:
        """The last snapshot (before the sources close); later scrapes serve it."""
        self.collector.detach()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def _kv_events(settings: Settings, cache: Any, measured: Measured) -> Iterator[bool]:
    """With --events: a publisher attached to ``cache`` (a manager or the engine) for the block; its counters go
    into ``measured.events``. Yields whether events are on."""
    if settings.events is None:
        yield False
        return
    from ..errors import ContractError, InvalidArgumentError, UnsupportedError
    from ..events import KvEventPublisher

    try:
        publisher = KvEventPublisher(settings.events, replay_endpoint=settings.events_replay,
                                     topic=settings.events_topic,
                                     linger=settings.events_linger if settings.events_replay else 0.0)
    except (UnsupportedError, ContractError, InvalidArgumentError) as e:  # no ZMQ in this build, a bad endpoint
        raise SettingsError(f"--events: {e}") from None
    with publisher:
        if measured.exporter is not None:
            measured.exporter.attach(publisher)
        # A batch sent before a router's connection completes is lost to it: wait (Ctrl-C-able) for the first
        # subscription before the first batch (enabling sends AllBlocksCleared), so that a router already
        # listening, or one that comes within the wait, sees everything.
        started = time.monotonic()
        subscribed = settings.events_wait > 0 and publisher.wait_for_subscriber(settings.events_wait)
        waited = time.monotonic() - started
        cache.enable_kv_events()
        cache.attach_kv_event_publisher(publisher)
        try:
            yield True
        finally:
            publisher.flush(10.0)
            stats = publisher.stats
            measured.events = {"endpoint": settings.events, "replay_endpoint": settings.events_replay,
                               "topic": settings.events_topic, "batches": stats.accepted_batches,
                               "handed_to_zmq": stats.sent_batches, "dropped": stats.dropped_batches,
                               "replay_requests": stats.replay_requests, "subscribed": subscribed,
                               "waited_seconds": round(waited, 3), "subscriptions": stats.subscriptions,
                               "linger_seconds": publisher.linger}
            index = getattr(cache, "base_index", None)  # the manager's (bookkeeping-only): what a router should hold
            if index is not None:
                measured.events["cache_blocks"] = len(index)


def _retention_report(r: RetentionMetrics) -> dict[str, Any]:
    return {"evicted_records_by_priority": {str(p): n for p, n in sorted(r.evicted_records_by_priority.items())},
            "trimmed_records_by_priority": {str(p): n for p, n in sorted(r.trimmed_records_by_priority.items())},
            "retention_expiries": r.retention_expiries}


def deal_requests(prepared: Prepared, settings: Settings) -> list[int]:
    """The replica of each request. ``round-robin``: request i to replica i mod R. ``conversation``: requests whose
    first full block after their shared system prompt is the same (a conversation's turns, a trace's session) go
    to one replica, as a prefix-aware router keeps them; the groups are dealt round-robin in the order they first
    appear (a prompt without such a block is a group of its own)."""
    r = settings.replicas
    if r <= 1:
        return [0] * len(prepared.requests)
    if settings.deal == "round-robin":
        return [i % r for i in range(len(prepared.requests))]
    groups: dict[bytes, int] = {}
    out = []
    for i, (req, h) in enumerate(zip(prepared.requests, prepared.hashes)):
        first = req.system_tokens // settings.page_size
        key = h[first].tobytes() if first < h.shape[0] else i.to_bytes(8, "little") + b"own"
        out.append(groups.setdefault(key, len(groups) % r))
    return out


def replay_bookkeeping(prepared: Prepared, settings: Settings, capacity_pages: int,
                       progress: Callable[[int], None] | None = None, measured: Measured | None = None) -> Measured:
    """The manager-only replay (see the module comment). Fills ``measured`` as it goes, so a KeyboardInterrupt
    leaves every finished request in it. With ``settings.replicas`` > 1 the requests are dealt to replicas (each
    a manager of ``capacity_pages`` pages and its own host tier); with ``settings.store_pages`` every replica's
    tier shares one store (tier.BookkeepingStore)."""
    if settings.mode == "hybrid":
        raise SettingsError("--mode hybrid needs the full engine (its checkpoints are exact-state digests); "
                            "drop --bookkeeping-only")
    if settings.store_url:
        raise SettingsError("--store moves bytes: drop --bookkeeping-only (bookkeeping models a shared store with "
                            "--store-pages N)")
    spec = settings.mode == "spec"
    page_size = settings.page_size
    n_replicas = settings.replicas
    m = measured if measured is not None else Measured("bookkeeping-only", capacity_pages)
    m.replicas = n_replicas
    tiered = settings.host_tier_pages > 0 or settings.store_pages > 0
    if settings.store_pages > 0 and spec:
        raise SettingsError("--store-pages: the bookkeeping store models base-KV pages only, and an EAGLE hit needs "
                            "its draft pages too (use --mode vanilla, or --host-tier-pages alone)")
    if n_replicas > 1 and (settings.events is not None or m.exporter is not None):
        raise SettingsError("--events and --metrics-port follow one cache: not with --replicas (this version)")
    capacities = ResourceDemand(base_kv_pages=capacity_pages, draft_kv_pages=capacity_pages if spec else 0)
    replica_of = deal_requests(prepared, settings)
    stack = ExitStack()  # closes the store handle and every manager (their tiers with them), last opened first
    try:
        store = stack.enter_context(BookkeepingStore(settings.store_pages)) if settings.store_pages > 0 else None
        managers = [stack.enter_context(ContextCacheManager(page_size, capacities, settings.max_records,
                                                            settings.eviction_policy))
                    for _ in range(n_replicas)]
    except BaseException:
        stack.close()
        raise
    manager = managers[0]
    tiers = ([mg.attach_host_tier(settings.host_tier_pages, settings.host_write, store) for mg in managers]
             if tiered else None)
    # spec: the tier's speculative extension (its slots hold draft pages too; the store is never asked).
    extends = ([(lambda h, n, d, t=t: (t.extend_spec_hit(h, n, d), 0)) if spec else t.extend_hit_by_tier
                for t in tiers] if tiers is not None else None)
    acquires = [mg.acquire_spec if spec else mg.acquire_vanilla for mg in managers]
    pools = [mg.pools for mg in managers]
    perf = time.perf_counter_ns
    acquired_ok = AcquireStatus.ACQUIRED
    rewind = ReusePlanKind.FULL_INPUT_REWIND
    bypass = LookupPolicy.BYPASS
    ops = m.op_ns
    requests, hashes = prepared.requests, prepared.hashes
    i = 0
    clock = -float("inf")  # the retention clock, in seconds, once an arrival has set it
    t_start = time.perf_counter()
    events = ExitStack()
    exporter = m.exporter
    if exporter is not None:
        exporter.attach(manager)
    try:
        with_tokens = events.enter_context(_kv_events(settings, manager, m))
        while i < len(requests):
            batch: list[tuple[int, Any, bool]] = []  # (request index, lease, forced cold)
            while i < len(requests) and len(batch) < settings.batch_size:
                r, h = requests[i], hashes[i]
                rep = replica_of[i]
                if r.arrival is not None and r.arrival > clock:  # the retention clock follows the arrivals
                    clock = r.arrival
                    for mg in managers:
                        mg.set_retention_time(clock)
                acquire = acquires[rep]
                t0 = perf()
                result = acquire(h, r.input_length)
                ops["acquire"].append(perf() - t0)
                forced = False
                if result.status != acquired_ok and (result.plan.reuse_token_length > 0 or
                                                     result.plan.kind == rewind):
                    t0 = perf()
                    result = acquire(h, r.input_length, bypass)
                    ops["acquire"].append(perf() - t0)
                    forced = True
                if result.lease is None:
                    if batch:  # retried alone once the batch is done (as the engine splits a batch)
                        break
                    m.rejected += 1
                    m.reused.append(0)
                    m.reused_host.append(0)
                    m.reused_store.append(0)
                    m.replica.append(rep)
                    m.matched.append(0)
                    i += 1
                    continue
                plan = result.plan
                host = stored = 0
                if extends is not None and not forced:  # the blocks after the device hit the tiers hold
                    t0 = perf()
                    host, stored = extends[rep](h, r.input_length, plan.reuse_token_length // page_size)
                    ops["acquire"][-1] += perf() - t0
                host *= page_size
                stored *= page_size
                m.reused.append(plan.reuse_token_length + host + stored)
                m.reused_host.append(host)
                m.reused_store.append(stored)
                m.replica.append(rep)
                m.matched.append(plan.matched_token_length)
                m.full_input_rewinds += plan.kind == rewind
                m.forced_cold += forced
                batch.append((i, result.lease, forced))
                i += 1
            for j, lease, forced in batch:  # prefill end: publish the prompt
                h = hashes[j]
                if not forced and h.shape[0] > 0:
                    mg = managers[replica_of[j]]
                    tokens = requests[j].tokens() if with_tokens else None
                    retention = retention_of(requests[j], settings)
                    t0 = perf()
                    if retention is None:
                        mg.publish(lease, h, requests[j].input_length, tokens=tokens)
                    else:
                        mg.publish(lease, h, requests[j].input_length, tokens=tokens, retention=retention)
                    ops["publish"].append(perf() - t0)
            for j, lease, _ in batch:  # decode: grow to hold the output
                r = requests[j]
                mg = managers[replica_of[j]]
                grow = _ceil_div(r.input_length + r.output_length, page_size) - _ceil_div(r.input_length, page_size)
                if grow > 0:
                    t0 = perf()
                    ok = mg.grow_spec_pages(lease, grow, grow) if spec else mg.grow_base_pages(lease, grow)
                    ops["grow"].append(perf() - t0)
                    m.grow_failures += not ok
            for _, lease, _ in batch:
                t0 = perf()
                lease.close()
                ops["release"].append(perf() - t0)
            m.used_pages.append(sum(capacity_pages - p.free_count(ResourceType.BASE_KV_PAGE) for p in pools))
            m.used_at.append(i)
            m.records.append(sum(len(mg.records) for mg in managers))
            if exporter is not None:
                exporter.tick()
            if progress:
                progress(len(batch) or 1)
    finally:
        try:
            m.manager_seconds += time.perf_counter() - t_start
            for mg in managers:
                metrics = mg.metrics
                m.evicted_records += metrics.evicted_records
                m.reclaimed_pages += metrics.reclaimed_base_kv_pages + metrics.reclaimed_draft_kv_pages
            m.retention = _retention_report(manager.retention_metrics)
            if tiers is not None:
                summed = [dataclasses.asdict(t.metrics) for t in tiers]
                m.host_tier = {k: sum(x[k] for x in summed) for k in summed[0]}
                m.host_tier["capacity_pages"] = settings.host_tier_pages  # per replica
                m.host_tier["write_policy"] = settings.host_write
            if store is not None:
                m.store = dataclasses.asdict(store.metrics)
            if exporter is not None:
                exporter.finish()
            events.close()
        finally:
            stack.close()
    return m


def replay_full(prepared: Prepared, settings: Settings, capacity_pages: int,
                progress: Callable[[int], None] | None = None, measured: Measured | None = None) -> Measured:
    """Serve the workload through the reference engine, in chunks of whole batches (progress, occupancy samples
    and a partial report between chunks); with settings.verify, compare with a cold run. With settings.replicas
    R > 1: R engines, each with its own pool and host tier, the requests dealt to them (deal_requests), all over
    the one --store when there is one."""
    from .. import sim

    if settings.store_pages > 0:
        raise SettingsError("--store-pages models a store's bookkeeping: add --bookkeeping-only (the full engine "
                            "takes a real store: --store URL)")
    if settings.host_tier_pages > 0 and settings.mode == "hybrid":
        raise SettingsError("--host-tier-pages: the host tier holds KV pages (base, and EAGLE's draft pages); "
                            "--mode hybrid keeps recurrent checkpoints it does not hold (use --mode vanilla or spec)")
    if settings.store_url and settings.host_tier_pages <= 0:
        raise SettingsError("--store: the store sits under the host tier; add --host-tier-pages N")
    if not 0 <= settings.store_deadline_ms <= 60_000:
        raise SettingsError(f"--store-deadline-ms must be between 0 and 60000 (got {settings.store_deadline_ms:g})")
    n_replicas = settings.replicas
    m = measured if measured is not None else Measured("full", capacity_pages)
    m.replicas = n_replicas
    if n_replicas > 1 and (settings.events is not None or m.exporter is not None):
        raise SettingsError("--events and --metrics-port follow one cache: not with --replicas (this version)")
    pool_bytes = capacity_pages * settings.page_size * _BYTES_PER_TOKEN * (2 if settings.mode == "spec" else 1)
    if pool_bytes * n_replicas > FULL_MODE_MAX_POOL_BYTES:
        raise SettingsError(f"the full engine would hold {pool_bytes * n_replicas / 2**30:.1f} GiB of KV pools for "
                            f"{capacity_pages} pages" + (f" on each of {n_replicas} replicas" if n_replicas > 1 else "")
                            + "; use --bookkeeping-only, a smaller --capacity-tokens, or --limit")
    requests = prepared.requests
    replica_of = deal_requests(prepared, settings)
    stack = ExitStack()
    widest = minimum_capacity_pages(requests, settings) + 1
    max_batch = min(settings.batch_size, max(1, len(requests)))  # no batch holds more than the workload
    engines: list[Any] = []
    try:
        link = _store_link(settings, stack) if settings.store_url else None
        for _ in range(n_replicas):
            engines.append(sim.ReferenceEngine(
                MODES[settings.mode], page_size=settings.page_size, base_pages=capacity_pages,
                max_records=settings.max_records, max_batch=max_batch, max_pages_per_sequence=widest,
                snapshot_slots=max(64, 2 * max_batch), backend=settings.backend, seed=settings.seed,
                commit_policy=CommitPolicy[settings.commit_policy.upper()],
                hash_algorithm=HashAlgorithm[settings.hash_algorithm.upper()],
                eviction_policy=settings.eviction_policy, host_tier_pages=settings.host_tier_pages,
                host_write=settings.host_write, host_store=link))
    except BaseException:
        for e in engines:
            e.close()
        stack.close()
        raise
    engine = engines[0]
    host_loaded = [0] * n_replicas  # each engine's host- and store-loaded tokens so far
    store_loaded = [0] * n_replicas
    chunk = settings.batch_size * max(1, 16 // settings.batch_size)
    checked = mismatches = 0
    first_mismatch: str | None = None
    t_start = time.perf_counter()
    events = ExitStack()
    exporter = m.exporter
    if exporter is not None:
        exporter.attach(engine)
    try:
        events.enter_context(_kv_events(settings, engine, m))
        for begin in range(0, len(requests), chunk):
            part = list(range(begin, min(begin + chunk, len(requests))))
            reused = [0] * len(part)
            from_host = [0] * len(part)
            from_store = [0] * len(part)
            for rep, e in enumerate(engines):
                mine = [k for k, i in enumerate(part) if replica_of[i] == rep]
                if not mine:
                    continue
                served = [sim.Request(tokens=requests[part[k]].tokens(),
                                      max_new_tokens=max(1, requests[part[k]].output_length),
                                      retention=retention_of(requests[part[k]], settings),
                                      arrival=requests[part[k]].arrival) for k in mine]
                outputs = e.serve(served, should_stop=_stop_requested)
                metrics = e.metrics
                if settings.verify:
                    cold = e.cold_reference(served, should_stop=_stop_requested)
                    for k, o, c in zip(mine, outputs, cold):
                        checked += 1
                        if not (np.array_equal(o.generated, c.generated) and o.state_digest == c.state_digest):
                            mismatches += 1
                            first_mismatch = first_mismatch or requests[part[k]].source
                for k, o in zip(mine, outputs):
                    reused[k] = o.prefill_start
                # The tiers' share per chunk and replica (the engine counts it in total): on its first request.
                from_host[mine[0]] = metrics.host_loaded_tokens - host_loaded[rep]
                from_store[mine[0]] = metrics.store_loaded_tokens - store_loaded[rep]
                host_loaded[rep], store_loaded[rep] = metrics.host_loaded_tokens, metrics.store_loaded_tokens
            m.reused.extend(reused)
            m.reused_host.extend(from_host)
            m.reused_store.extend(from_store)
            m.replica.extend(replica_of[i] for i in part)
            all_metrics = [e.metrics for e in engines]
            m.used_pages.append(sum(capacity_pages - x.base_kv_pages.free for x in all_metrics))
            m.used_at.append(part[-1] + 1)
            m.records.append(sum(x.current_records for x in all_metrics))
            if exporter is not None:
                exporter.tick()
            if progress:
                progress(len(part))
        for e in engines:
            e.check_invariants()
    finally:
        m.engine_seconds += time.perf_counter() - t_start
        if not any(e.closed for e in engines):
            for e in engines:
                e.poll_store()  # the store batches already back count in the report
            metrics_of = [e.metrics for e in engines]
            stats_of = [e.stats for e in engines]

            def total(name: str) -> int:
                return sum(int(getattr(x, name)) for x in metrics_of)

            m.full_input_rewinds = total("full_input_rewind_plans")
            m.forced_cold = total("forced_cold_sequences")
            m.evicted_records = total("evicted_records")
            m.reclaimed_pages = total("reclaimed_base_kv_pages") + total("reclaimed_draft_kv_pages")
            m.retention = _retention_report(engine.retention_metrics)
            if settings.host_tier_pages > 0:
                m.host_tier = {"capacity_pages": settings.host_tier_pages, "write_policy": settings.host_write,
                               "resident_blocks": total("host_resident_blocks"),
                               "written_blocks": total("host_written_blocks"),
                               "loaded_blocks": total("host_loaded_tokens") // settings.page_size,
                               "dropped_blocks": total("host_dropped_blocks"),
                               "failed_loads": total("host_failed_loads"), "failed_writes": total("host_failed_writes"),
                               "bytes_to_host": total("host_bytes_to_host"),
                               "bytes_to_device": total("host_bytes_to_device")}
            if settings.store_url:
                m.store = {"url": settings.store_url, "policy": settings.store_policy,
                           "deadline_ms": settings.store_deadline_ms,
                           **{k[len("store_"):]: total(k) for k in _STORE_COUNTERS}}
            m.matched = [-1] * len(m.reused)  # the engine reports reuse, not matched tokens, per request
            m.engine_stats = {"batches": sum(x.batches for x in stats_of),
                              "joiners": sum(x.joiners for x in stats_of),
                              "decode_steps": sum(x.decode_steps for x in stats_of),
                              "capacity_retries": sum(x.capacity_retries for x in stats_of),
                              "preemptions": sum(x.preemptions for x in stats_of),
                              "planning_seconds": total("planning_nanoseconds") * 1e-9}
            if settings.verify:
                m.verify = {"checked": checked, "mismatches": mismatches, "first_mismatch": first_mismatch,
                            "verdict": "byte-exact" if mismatches == 0 else "MISMATCH"}
            if exporter is not None:
                exporter.finish()
            events.close()
        for e in engines:
            e.close()
        stack.close()  # the store, after the engines (whose tiers flushed their puts when they closed)
    return m


_STORE_COUNTERS = ("store_loaded_tokens", "store_put_blocks", "store_dropped_puts", "store_failed_puts",
                   "store_asked_blocks", "store_fetched_blocks", "store_failed_loads", "store_rejected_loads",
                   "store_late_batches", "store_breaker_refusals", "store_wait_micros")
STORE_JOIN_SECONDS = 10.0  # how long a replay waits for a store that is not set up yet before serving without it


def _store_link(settings: Settings, stack: ExitStack) -> Any:
    """The --store URL opened (closed by ``stack``, after the engine), as the engine's StoreLink. The model
    identity its keys name is the reference model's (mode and seed: its weights), so replays of one model share
    blocks and others never do."""
    from ..kv_store import StoreLink, StoreLoadPolicy, open_store

    try:
        store = open_store(settings.store_url or "")
    except (ValueError, ImportError) as e:
        raise SettingsError(f"--store: {e}") from None
    backend = store.backend
    if backend is not None and callable(getattr(backend, "close", None)):
        stack.callback(backend.close)
    stack.callback(store.close)
    if backend is not None and callable(getattr(backend, "wait_ready", None)):
        if not backend.wait_ready(STORE_JOIN_SECONDS):  # serving goes on; the store joins when it can
            print(f"ctxcache replay: note: the store {settings.store_url} did not answer within "
                  f"{STORE_JOIN_SECONDS:g} s; serving without it until it joins", file=sys.stderr)
    policy = StoreLoadPolicy.BEST_EFFORT if settings.store_policy == "best-effort" else StoreLoadPolicy.WAIT
    return StoreLink(store, model=f"ctxcache-reference-{settings.mode}-seed{settings.seed}", policy=policy,
                     load_deadline_s=settings.store_deadline_ms / 1000.0)


# ---- the report ----------------------------------------------------------------------------------------------------

def _percentiles(ns: Sequence[int]) -> dict[str, float | int]:
    if not ns:
        return {"count": 0, "p50_us": 0.0, "p99_us": 0.0, "max_us": 0.0}
    a = np.asarray(ns, dtype=np.float64) * 1e-3
    return {"count": len(ns), "p50_us": round(float(np.percentile(a, 50)), 3),
            "p99_us": round(float(np.percentile(a, 99)), 3), "max_us": round(float(a.max()), 3)}


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def build_report(prepared: Prepared, settings: Settings, m: Measured, *, workload: str, wall_seconds: float,
                 bound_total: int | None, bound_per_request: Sequence[int] | None,
                 interrupted: bool, optimum: float | None = None,
                 interrupted_phase: str | None = None) -> dict[str, Any]:
    """The report as one JSON-ready dict. An interrupted run counts only the requests it finished
    (``interrupted_phase`` says what was running: "replaying", or "computing the offline optimum" after a complete
    replay)."""
    done = len(m.reused)
    requests = prepared.requests[:done]
    prompt_tokens = sum(r.input_length for r in requests)
    reused = sum(m.reused)
    bound = sum(bound_per_request[:done]) if bound_per_request is not None else bound_total
    report: dict[str, Any] = {
        "command": "replay", "workload": workload, "engine": m.engine, "interrupted": interrupted,
        "interrupted_phase": interrupted_phase,
        "mode": settings.mode, "backend": settings.backend if m.engine == "full" else None,
        "page_size": settings.page_size, "capacity_pages": m.capacity_pages,
        "capacity_tokens": m.capacity_pages * settings.page_size, "max_records": settings.max_records,
        "batch_size": settings.batch_size, "hash_algorithm": settings.hash_algorithm,
        "eviction_policy": settings.eviction_policy,
        "commit_policy": settings.commit_policy if m.engine == "full" else "prefill_state_only",
        "seed": settings.seed,
        "requests": done, "requests_in_workload": len(prepared.requests), "prompt_tokens": prompt_tokens,
        "distinct_prompt_tokens": prepared.distinct_pages * settings.page_size,
        "reused_tokens": reused, "hit_rate": round(_ratio(reused, prompt_tokens), 6),
        "reused_tokens_device": reused - sum(m.reused_host[:done]) - sum(m.reused_store[:done]),
        "reused_tokens_host": sum(m.reused_host[:done]), "reused_tokens_store": sum(m.reused_store[:done]),
        "host_tier_pages": settings.host_tier_pages, "store_pages": settings.store_pages,
        "replicas": m.replicas, "deal": settings.deal if m.replicas > 1 else None,
        "requests_with_reuse": sum(1 for x in m.reused if x > 0),
        "upper_bound_reused_tokens": bound,
        "upper_bound_hit_rate": round(_ratio(bound, prompt_tokens), 6) if bound is not None else None,
        "ratio_to_upper_bound": round(_ratio(reused, bound), 6) if bound else None,
        "optimum_hit_rate": round(optimum, 6) if optimum is not None else None,
        "full_input_rewinds": m.full_input_rewinds, "forced_cold": m.forced_cold, "rejected": m.rejected,
        "grow_failures": m.grow_failures, "evicted_records": m.evicted_records,
        "reclaimed_pages": m.reclaimed_pages,
        "retain_system_prompts": ({"priority": settings.retain_system[0], "seconds": settings.retain_system[1]}
                                  if settings.retain_system is not None else None),
        "reuse_by_priority": reuse_by_priority(requests, settings, m.reused,
                                               bound_per_request[:done] if bound_per_request is not None else None),
        "retention_metrics": m.retention,
        "host_tier": m.host_tier,
        "store": m.store,
        "per_replica": _per_replica(requests, m) if m.replicas > 1 else None,
    }
    occ = np.asarray(m.used_pages, dtype=np.int64)
    picks = sorted({int(round(x)) for x in np.linspace(0, len(occ) - 1, min(OCCUPANCY_SAMPLES, len(occ)))}) \
        if len(occ) else []
    report["occupancy"] = {
        "peak_pages": int(occ.max()) if len(occ) else 0,
        "mean_pages": round(float(occ.mean()), 1) if len(occ) else 0.0,
        "final_pages": int(occ[-1]) if len(occ) else 0,
        "samples": [{"requests": m.used_at[k], "pages": int(occ[k]),
                     "fraction": round(_ratio(int(occ[k]), m.capacity_pages * m.replicas), 4),
                     "records": m.records[k]}
                    for k in picks]}
    if m.engine == "bookkeeping-only":
        report["latency"] = {op: _percentiles(m.op_ns[op]) for op in OPERATIONS}
        report["hash_seconds"] = round(prepared.hash_seconds, 3)
        report["manager_seconds"] = round(m.manager_seconds, 3)
    else:
        report["engine_seconds"] = round(m.engine_seconds, 3)
        report["engine_stats"] = m.engine_stats
        report["verify"] = m.verify
    if m.events is not None:
        report["kv_events"] = m.events
    # The replay alone (the manager loop or the engine's serving, with --verify's cold runs): not the trace reading,
    # the hashing, the bound or the optimum, which the wall time also holds.
    replay_seconds = m.manager_seconds if m.engine == "bookkeeping-only" else m.engine_seconds
    report["replay_seconds"] = round(replay_seconds, 3)
    report["requests_per_second"] = round(_ratio(done, replay_seconds), 1)
    report["wall_seconds"] = round(wall_seconds, 3)
    return report


def _per_replica(requests: Sequence[WorkloadRequest], m: Measured) -> list[dict[str, Any]]:
    """Each replica's requests, prompt tokens, reuse (by tier) and hit rate."""
    rows: list[dict[str, Any]] = [{"requests": 0, "prompt_tokens": 0, "reused_tokens": 0, "reused_tokens_host": 0,
                                   "reused_tokens_store": 0} for _ in range(m.replicas)]
    for r, rep, reused, host, stored in zip(requests, m.replica, m.reused, m.reused_host, m.reused_store):
        row = rows[rep]
        row["requests"] += 1
        row["prompt_tokens"] += r.input_length
        row["reused_tokens"] += reused
        row["reused_tokens_host"] += host
        row["reused_tokens_store"] += stored
    for row in rows:
        row["hit_rate"] = round(_ratio(row["reused_tokens"], row["prompt_tokens"]), 6)
    return rows


def _table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> str:
    all_rows = [list(header)] + [list(r) for r in rows] if header else [list(r) for r in rows]
    widths = [max(len(r[c]) for r in all_rows) for c in range(len(all_rows[0]))]
    lines = ["  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths)))
             for r in all_rows]
    if header:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_report(r: dict[str, Any]) -> str:
    """The readable report (the --json object as tables)."""
    pct = "{:.2%}".format
    out = [f"ctxcache replay: {r['workload']}, {r['engine']} ({r['mode']}"
           + (f", {r['backend']} backend" if r["backend"] else "") + ")"
           + (f"  [INTERRUPTED while {r.get('interrupted_phase') or 'replaying'}: partial figures]"
              if r["interrupted"] else ""),
           f"  page size {r['page_size']}, capacity {r['capacity_pages']:,} pages ({r['capacity_tokens']:,} tokens), "
           f"max records {r['max_records']:,}, batch size {r['batch_size']}, commit {r['commit_policy']}, "
           f"eviction {r['eviction_policy']}", ""]
    bound = r["upper_bound_hit_rate"]
    rows = [("requests", f"{r['requests']:,}" + (f" of {r['requests_in_workload']:,}" if r["interrupted"] else "")),
            ("prompt tokens", f"{r['prompt_tokens']:,}"),
            ("reused tokens", f"{r['reused_tokens']:,}"
             + (f" (device {r['reused_tokens_device']:,}, host tier {r['reused_tokens_host']:,}"
                + (f", store {r['reused_tokens_store']:,}" if r.get("store") else "") + ")"
                if r.get("host_tier") else "")),
            ("hit rate", pct(r["hit_rate"])),
            ("unbounded-cache upper bound", pct(bound) if bound is not None else "-"),
            ("offline optimum (this capacity)",
             pct(r["optimum_hit_rate"]) if r.get("optimum_hit_rate") is not None else "-"),
            ("ratio to the bound", pct(r["ratio_to_upper_bound"]) if r["ratio_to_upper_bound"] is not None else "-"),
            ("requests with reuse", f"{r['requests_with_reuse']:,}"),
            ("full-input rewinds", f"{r['full_input_rewinds']:,}"),
            ("forced-cold retries", f"{r['forced_cold']:,}"),
            ("evicted records", f"{r['evicted_records']:,}"),
            ("reclaimed pages", f"{r['reclaimed_pages']:,}")]
    if r["engine"] == "bookkeeping-only":
        rows += [("rejected (no capacity)", f"{r['rejected']:,}"), ("grow failures", f"{r['grow_failures']:,}")]
    out += [_table(rows), ""]
    if r.get("replicas", 1) > 1:
        out.append(f"{r['replicas']} replicas ({r['deal']}), each {r['capacity_pages']:,} device pages"
                   + (f" and {r['host_tier_pages']:,} host pages" if r.get("host_tier_pages") else "")
                   + (f", one shared store of {r['store_pages']:,} pages" if r.get("store_pages") else
                      f", one shared store ({r['store']['url']})" if (r.get("store") or {}).get("url") else
                      ", no store")
                   + ":")
        out.append(_table([(f"replica {k}", f"{row['requests']:,}", f"{row['prompt_tokens']:,}",
                            f"{row['reused_tokens']:,}", f"{row['reused_tokens_store']:,}", pct(row["hit_rate"]))
                           for k, row in enumerate(r["per_replica"])],
                          header=("", "requests", "prompt tokens", "reused", "from the store", "hit rate")))
        out.append("")
    st = r.get("store")
    if st and "url" in st:
        out.append(f"store {st['url']} ({st['policy']}, {st['deadline_ms']:g} ms): {st['put_blocks']:,} blocks put "
                   f"({st['dropped_puts']:,} dropped, {st['failed_puts']:,} failed), {st['asked_blocks']:,} asked, "
                   f"{st['fetched_blocks']:,} fetched, {st['failed_loads']:,} failed and {st['rejected_loads']:,} "
                   f"rejected loads, {st['late_batches']:,} late batches, {st['breaker_refusals']:,} breaker refusals")
        out.append("")
    elif st:
        out.append(f"store: {st['capacity_pages']:,} pages (bookkeeping): {st['written_blocks']:,} blocks put "
                   f"({st['skipped_puts']:,} already held, {st['refused_puts']:,} refused), {st['hit_blocks']:,} "
                   f"loaded by {st['hit_calls']:,} requests, {st['dropped_blocks']:,} dropped for room, "
                   f"{st['resident_blocks']:,} held at the end")
        out.append("")
    ht = r.get("host_tier")
    if ht and ht.get("capacity_pages"):
        moved = ("bookkeeping: no bytes moved" if "bytes_to_host" not in ht else
                 f"{ht['bytes_to_host'] / 2**20:,.1f} MiB copied to host, {ht['bytes_to_device'] / 2**20:,.1f} MiB "
                 f"back, {ht['failed_loads']:,} failed loads, {ht['failed_writes']:,} failed writes")
        out.append(f"host tier: {ht['capacity_pages']:,} pages, write-{ht['write_policy']}: "
                   f"{ht['written_blocks']:,} blocks written"
                   + (f" ({ht['skipped_writes']:,} already held)" if "skipped_writes" in ht else "")
                   + f", {ht['loaded_blocks']:,} loaded"
                   + (f" by {ht['hit_requests']:,} requests" if "hit_requests" in ht else "")
                   + f", {ht['dropped_blocks']:,} dropped for room, {ht['resident_blocks']:,} held at the end "
                   f"({moved})")
        out.append("")
    retained = r.get("retain_system_prompts")
    if retained is not None:
        seconds = retained["seconds"]
        out.append(f"reuse by priority (system prompts at {retained['priority']}"
                   + (f" for {seconds:g} s" if seconds is not None else "") + "):")
        rm = r.get("retention_metrics") or {}
        evicted = ", ".join(f"{n:,} at {p}" for p, n in sorted(rm.get("evicted_records_by_priority", {}).items(),
                                                                  key=lambda item: -int(item[0])))
        out.append(_table([(p, f"{v['prompt_tokens']:,}",
                            f"{v['unbounded_reusable_tokens']:,}" if v["unbounded_reusable_tokens"] is not None
                            else "-", f"{v['reused_tokens']:,}",
                            pct(_ratio(v["reused_tokens"], v["unbounded_reusable_tokens"]))
                            if v["unbounded_reusable_tokens"] else "-")
                           for p, v in r["reuse_by_priority"].items()],
                          header=("priority", "prompt tokens", "unbounded reusable", "reused", "of unbounded")))
        if str(retained["priority"]) not in r["reuse_by_priority"]:
            out.append("(no request of this workload opens with a shared system prompt: nothing was retained)")
        out.append(f"evicted records by their rank: {evicted or 'none'}; "
                   f"retention expiries {rm.get('retention_expiries', 0):,}")
        out.append("")
    occ = r["occupancy"]
    out.append(f"pool occupancy over time (peak {occ['peak_pages']:,} pages, mean {occ['mean_pages']:,.0f}):")
    out.append(_table([(f"{s['requests']:,}", f"{s['pages']:,}", pct(s["fraction"]), f"{s['records']:,}")
                       for s in occ["samples"]], header=("after request", "pages", "of pool", "records")))
    out.append("")
    if "latency" in r:
        out.append(_table([(op, f"{v['count']:,}", f"{v['p50_us']:.1f}", f"{v['p99_us']:.1f}", f"{v['max_us']:.1f}")
                           for op, v in r["latency"].items()],
                          header=("operation", "calls", "p50 us", "p99 us", "max us")))
        out.append(f"hashing {r['hash_seconds']:.2f} s, manager {r['manager_seconds']:.2f} s")
    else:
        st = r["engine_stats"] or {}
        out.append(f"engine {r['engine_seconds']:.2f} s: {st.get('batches', 0):,} batches, "
                   f"{st.get('decode_steps', 0):,} decode steps, {st.get('preemptions', 0):,} preemptions, "
                   f"planning {st.get('planning_seconds', 0.0):.3f} s")
        v = r["verify"]
        if v is not None:
            out.append(f"verify: {v['verdict']} ({v['checked']:,} requests compared with a cold run, "
                       f"{v['mismatches']} mismatches"
                       + (f", first: {v['first_mismatch']}" if v["first_mismatch"] else "") + ")")
    ev = r.get("kv_events")
    if ev:
        out.append(f"KV events on {ev['endpoint']}"
                   + (f" (replay {ev['replay_endpoint']})" if ev["replay_endpoint"] else "")
                   + f": {ev['batches']:,} batches, {ev['handed_to_zmq']:,} handed to ZMQ (a PUB socket confirms "
                   f"no delivery), {ev['dropped']:,} dropped, {ev['replay_requests']:,} replay requests; "
                   + (f"a subscriber was there after {ev['waited_seconds']:.2f} s" if ev["subscribed"] else
                      f"no subscriber came in {ev['waited_seconds']:.2f} s: what was sent before one connected is "
                      f"lost to it (--events-wait)"))
    covers = ("the manager calls only" if r["engine"] == "bookkeeping-only" else
              "the engine's serving and --verify's cold runs" if r.get("verify") is not None else
              "the engine's serving only")
    out.append(f"replay {r['replay_seconds']:.2f} s ({covers}): {r['requests_per_second']:,.0f} requests/s; "
               f"wall time {r['wall_seconds']:.2f} s (adds reading the workload, hashing, the bound"
               + (", the offline optimum" if r.get("optimum_hit_rate") is not None else "") + ")")
    return "\n".join(out)


# ---- progress ------------------------------------------------------------------------------------------------------

# Ctrl-C during a run only sets this flag (see _guarded); the next interrupt point (a progress step, the optimum's
# per-request check, a sim serve's 50 ms wait) raises KeyboardInterrupt there. Python's default handler raises
# wherever the interpreter happens to be, including a garbage-collector callback, where the exception is printed
# and dropped: the interrupt would be lost and the run would go on. A phase without interrupt points (reading a
# trace, importing matplotlib, writing the plot) is covered by a fallback: half a second after the Ctrl-C, if no
# point has taken it, the main thread is interrupted wherever it is (_thread.interrupt_main), and again every half
# second until one has. So every command ends within a second of Ctrl-C.
_interrupt_requested = False
_interrupt_taken = False  # a KeyboardInterrupt for it was raised; the run is unwinding to its report
_FALLBACK_SECONDS = 0.5


def _check_interrupt() -> None:
    """An interrupt point: KeyboardInterrupt once after a Ctrl-C."""
    global _interrupt_taken
    if _interrupt_requested and not _interrupt_taken:
        _interrupt_taken = True
        raise KeyboardInterrupt


def _stop_requested() -> bool:
    """For a sim serve's wait (which raises KeyboardInterrupt itself when this is true)."""
    global _interrupt_taken
    if _interrupt_requested and not _interrupt_taken:
        _interrupt_taken = True
        return True
    return False


def _interrupt_handled() -> None:
    """A KeyboardInterrupt was caught on the way to the report: the fallback must not interrupt the report."""
    global _interrupt_taken
    _interrupt_taken = True


@contextmanager
def _progress(total: int, desc: str, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr, shown only once a run has taken 2 seconds, and never when disabled or when stderr is not
    a terminal (a log or a pipe would collect its carriage-return updates). Each step is also an interrupt point (a
    pending Ctrl-C surfaces there as KeyboardInterrupt)."""
    from tqdm import tqdm

    stream = sys.stderr
    on_terminal = stream is not None and hasattr(stream, "isatty") and stream.isatty()
    bar = tqdm(total=total, desc=desc, unit="req", delay=2.0, disable=not (enabled and on_terminal), leave=False,
               file=stream)
    def step(count: int) -> None:
        _check_interrupt()
        bar.update(count)

    try:
        yield step
    finally:
        bar.close()


# ---- the commands --------------------------------------------------------------------------------------------------

_POSITIVE_INT32 = int_range(1, INT32_MAX)
_NON_NEGATIVE_INT32 = int_range(0, INT32_MAX)


def _add_common(p: argparse.ArgumentParser) -> None:
    """The options replay and sweep share (every integer through int_range: a bad value is one line, exit 2)."""
    p.add_argument("trace", nargs="?", help="a Mooncake-format JSONL trace (default: the built-in workload)")
    p.add_argument("--workload", choices=("builtin", "conversations"), default=None,
                   help="without a trace: builtin (the default: chats, agent loops, documents, one-off prompts) or "
                        "conversations (many multi-turn conversations at scale, seeded by --seed; the options "
                        "below; `ctxcache workload --out FILE` writes it as a trace)")
    p.add_argument("--page-size", type=_POSITIVE_INT32, default=16,
                   help="tokens per page (default 16; divides 512 for traces)")
    p.add_argument("--max-records", type=_POSITIVE_INT32, default=1_000_000,
                   help="cache record limit (default 1,000,000)")
    p.add_argument("--policy", dest="eviction_policy", choices=("lru", "lru-trim"), default="lru",
                   help="capacity eviction: lru, whole records least recent first (the reference's, default), or "
                        "lru-trim, the same walk giving up a record's tail blocks first (docs/EVICTION.md)")
    p.add_argument("--batch-size", type=_POSITIVE_INT32, default=1, help="requests in flight together (default 1)")
    p.add_argument("--mode", choices=sorted(MODES), default="vanilla",
                   help="vanilla (attention), hybrid (attention + recurrent) or spec (EAGLE); default vanilla")
    p.add_argument("--hash", dest="hash_algorithm", choices=("sha256", "fnv1a128"), default="sha256",
                   help="block hash: sha256, keyed with --key (default), or fnv1a128 (faster, unkeyed: for "
                        "trusted input only)")
    p.add_argument("--key", default=DEFAULT_KEY, help="SHA-256 key of the bookkeeping-only hashes")
    p.add_argument("--seed", type=int_range(0, UINT32_MAX), default=0,
                   help=f"seed of the built-in and conversation workloads and of the engine's model, 0 to {UINT32_MAX} "
                        "(default 0)")
    p.add_argument("--limit", type=_POSITIVE_INT32, default=None, help="replay only the first N requests")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-optimum", action="store_true",
                   help="skip the offline optimum (Belady) at the same capacity (vanilla mode, prefill state only; "
                        "a few seconds on a 4,000-request trace)")
    p.add_argument("--retain-system-prompts", dest="retain_system", type=retention_rule, default=None,
                   metavar="PRIORITY[:SECONDS]",
                   help="give each request's shared system prompt (the built-in and conversation workloads know "
                        "them) a retention range at PRIORITY, 0 to 100 (default tokens are at 35; eviction takes "
                        "the lowest first), for SECONDS of the workload's time from each publication (default: as "
                        "long as the record lives); the report splits reuse by priority")
    p.add_argument("--host-tier-pages", type=_NON_NEGATIVE_INT32, default=0, metavar="N",
                   help="a host-memory tier of N pages beside the device pool: evicted blocks come back as copies "
                        "(docs/TIERS.md; vanilla and spec modes; sweep: the same tier beside every device capacity; "
                        "default 0: none)")
    p.add_argument("--host-write", choices=("back", "through"), default="back",
                   help="with --host-tier-pages: write blocks to the tier when the device evicts them (back, the "
                        "default) or when a publication makes them canonical (through)")
    add_conversation_options(p, defaults=False)


def _add_replay_only(p: argparse.ArgumentParser) -> None:
    """The options of replay that sweep has no use for (it chooses the capacities, runs bookkeeping-only and
    publishes the prefill state)."""
    cap = p.add_mutually_exclusive_group()
    cap.add_argument("--base-pages", type=_POSITIVE_INT32, default=None, help="base pool capacity in pages")
    cap.add_argument("--capacity-tokens", type=_POSITIVE_INT32, default=None,
                     help="base pool capacity in tokens (rounded down to pages; default: half the workload's "
                          "distinct prompt tokens)")
    p.add_argument("--bookkeeping-only", action="store_true", help="the manager alone: no bytes, no engine")
    p.add_argument("--backend", choices=("cpu", "cuda", "auto"), default="cpu",
                   help="full engine backend: cpu (default), cuda (needs a usable device), or auto (cuda when a "
                        "device is usable, else cpu)")
    p.add_argument("--commit-policy", choices=("prefill_state_only", "including_generated_tokens"),
                   default="prefill_state_only", help="full engine: what is published (default prefill_state_only)")
    p.add_argument("--replicas", type=int_range(1, 1024), default=1, metavar="R",
                   help="deal the workload to R replicas, each with the --base-pages / --capacity-tokens pool and "
                        "--host-tier-pages tier of its own, sharing --store (full mode) or --store-pages "
                        "(bookkeeping-only) when given (1 to 1024; default 1)")
    p.add_argument("--deal", choices=("round-robin", "conversation"), default="round-robin",
                   help="with --replicas: request i to replica i mod R (round-robin, the default), or a "
                        "conversation's requests (those whose first block after a shared system prompt is the "
                        "same) to one replica")
    p.add_argument("--store-pages", type=_NON_NEGATIVE_INT32, default=0, metavar="N",
                   help="bookkeeping-only: a store of N pages shared by every replica: each block a publication "
                        "makes canonical is put there and a hit goes on from the device and host into it "
                        "(docs/TIERS.md; vanilla mode; default 0: none)")
    p.add_argument("--store", dest="store_url", default=None, metavar="URL",
                   help="full mode: a byte store under the host tier, shared with other replays of the same model "
                        "(mode and seed): mooncake://HOST:PORT?metadata=http://HOST:PORT/metadata&segment=64MiB"
                        "&buffer=16MiB (the mooncake extra), or memory:// (in process); needs --host-tier-pages")
    p.add_argument("--store-policy", choices=("wait", "best-effort"), default="wait",
                   help="with --store: a hit the host cannot extend waits for the store's answer up to "
                        "--store-deadline-ms (wait, the default), or never waits and fills the host for later "
                        "requests (best-effort)")
    p.add_argument("--store-deadline-ms", type=float, default=50.0, metavar="MS",
                   help="with --store and --store-policy wait: the longest a request waits for the store (default 50)")


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(page_size=args.page_size, max_records=args.max_records, batch_size=args.batch_size,
                    mode=args.mode, backend=getattr(args, "backend", Settings.backend),
                    hash_algorithm=args.hash_algorithm, key=args.key,
                    commit_policy=getattr(args, "commit_policy", Settings.commit_policy), seed=args.seed,
                    eviction_policy=args.eviction_policy,
                    bookkeeping_only=getattr(args, "bookkeeping_only", True), verify=getattr(args, "verify", False),
                    events=getattr(args, "events", None), events_replay=getattr(args, "events_replay", None),
                    events_topic=getattr(args, "events_topic", ""),
                    events_wait=getattr(args, "events_wait", Settings.events_wait),
                    events_linger=getattr(args, "events_linger", Settings.events_linger),
                    retain_system=getattr(args, "retain_system", None),
                    host_tier_pages=getattr(args, "host_tier_pages", 0),
                    host_write=getattr(args, "host_write", "back"),
                    replicas=getattr(args, "replicas", 1), deal=getattr(args, "deal", "round-robin"),
                    store_pages=getattr(args, "store_pages", 0), store_url=getattr(args, "store_url", None),
                    store_policy=getattr(args, "store_policy", "wait"),
                    store_deadline_ms=getattr(args, "store_deadline_ms", 50.0))


def conversation_workload(args: argparse.Namespace, settings: Settings) -> ConversationSpec | None:
    """--workload conversations: its spec (seeded by --seed); None for the other workloads. A conversation option
    without it, or --workload with a trace, is a SettingsError."""
    options = given_conversation_options(args)
    chosen = getattr(args, "workload", None)
    if chosen is not None and getattr(args, "trace", None) is not None:
        raise SettingsError(f"--workload {chosen} and a trace file exclude each other")
    if chosen != "conversations":
        if options:
            raise SettingsError(f"{options[0]} needs --workload conversations")
        return None
    try:
        return conversation_spec(args, settings.seed)
    except WorkloadError as e:
        raise SettingsError(str(e)) from None


def load_workload(trace: str | None, settings: Settings, limit: int | None,
                  conversations: ConversationSpec | None = None) -> tuple[str, list[WorkloadRequest]]:
    if limit is not None and limit <= 0:
        raise SettingsError(f"--limit must be positive, got {limit}")
    if conversations is not None:
        if settings.page_size <= 0 or TRACE_BLOCK % settings.page_size:
            raise SettingsError(f"--page-size {settings.page_size} must divide {TRACE_BLOCK} (the conversation "
                                f"workload is a trace of {TRACE_BLOCK}-token blocks)")
        c = conversations
        name = f"conversation workload ({c.conversations:,} conversations x {c.turns} turns, seed {c.seed})"
        return name, trace_workload(conversation_trace(c)[:limit])
    if trace is None:
        return "built-in workload", builtin_workload(settings.seed)[:limit]
    if settings.page_size <= 0 or TRACE_BLOCK % settings.page_size:
        raise SettingsError(f"--page-size {settings.page_size} must divide {TRACE_BLOCK} (the trace's block size)")
    return trace, trace_workload(read_trace(trace, limit))


def _capacity(args: argparse.Namespace, prepared: Prepared, settings: Settings) -> int:
    if args.base_pages is not None:
        return int(args.base_pages)
    if args.capacity_tokens is not None:
        if args.capacity_tokens < settings.page_size:
            raise SettingsError(f"--capacity-tokens {args.capacity_tokens} is less than one page: it must be at least "
                                f"--page-size ({settings.page_size})")
        return int(args.capacity_tokens) // settings.page_size
    return default_capacity_pages(prepared, settings)


def _optimum_applies(settings: Settings, args: argparse.Namespace) -> bool:
    """The offline optimum models the bookkeeping-only replay of vanilla reuse with prefill-state publication, on
    the device alone (not with a host tier)."""
    if (getattr(args, "no_optimum", False) or settings.mode != "vanilla" or settings.host_tier_pages > 0
            or settings.store_pages > 0 or settings.replicas > 1):
        return False
    return settings.bookkeeping_only or settings.commit_policy == "prefill_state_only"


def _check_backend(settings: Settings) -> None:
    """--backend cuda where no device is usable: refused before the work, with the probe's reason."""
    if settings.bookkeeping_only or settings.backend != "cuda":
        return
    from .. import _ffi, cuda_compiled, cuda_device_count

    if not cuda_compiled():
        raise SettingsError("--backend cuda: this library was built without CUDA; use --backend cpu or auto")
    if cuda_device_count() <= 0:
        raise SettingsError(f"--backend cuda: no usable CUDA device ({_ffi.last_error() or 'none visible'}); "
                            f"use --backend cpu or auto")


def _interrupted_early(workload: str, phase: str, total: int | None, hashed: int, wall_seconds: float,
                       as_json: bool) -> str:
    """The report of a replay interrupted before anything was replayed: what was done, and only that."""
    if as_json:
        return json.dumps({"command": "replay", "workload": workload, "interrupted": True, "interrupted_phase": phase,
                           "requests": 0, "requests_in_workload": total, "hashed_requests": hashed,
                           "wall_seconds": round(wall_seconds, 3)})
    done = ("the workload was not read yet" if total is None else
            f"{hashed:,} of {total:,} requests hashed, none replayed")
    return (f"ctxcache replay: {workload}  [INTERRUPTED while {phase}: {done}]\n"
            f"wall time {wall_seconds:.2f} s")


def run_replay(args: argparse.Namespace) -> int:
    """The replay command; with --metrics-port, its metrics served from start to end (and --metrics-linger
    seconds after the report)."""
    port = getattr(args, "metrics_port", None)
    exporter = MetricsExporter(port) if port is not None else None
    try:
        code = _run_replay(args, exporter)
        linger = getattr(args, "metrics_linger", 0.0)
        if exporter is not None and linger > 0 and code != 130:
            end = time.monotonic() + linger
            try:
                while (left := end - time.monotonic()) > 0:
                    time.sleep(min(0.1, left))
            except KeyboardInterrupt:  # the report is out: Ctrl-C only ends the linger
                _interrupt_handled()
        return code
    finally:
        if exporter is not None:
            exporter.close()


def _run_replay(args: argparse.Namespace, exporter: MetricsExporter | None) -> int:
    settings = _settings(args)
    _check_backend(settings)
    t0 = time.perf_counter()
    workload = args.trace or "built-in workload"
    show = not args.no_progress
    bound_total: int | None = None
    bound_each: list[int] | None = None
    prepared = Prepared([], [], 0.0, 0)
    measured: Measured | None = None
    optimum: float | None = None
    interrupted = False
    total: int | None = None
    hashed = 0
    phase = "reading the workload"  # what is running now: an interrupt reports what finished before it
    try:
        workload, requests = load_workload(args.trace, settings, args.limit,
                                           conversation_workload(args, settings))
        total = len(requests)
        phase = "hashing"
        with _progress(len(requests), "hashing", show) as step:
            def hash_step(count: int) -> None:
                nonlocal hashed
                hashed += count
                step(count)

            prepared = prepare(requests, settings, hash_step)
        phase = "computing the bound"
        capacity = _capacity(args, prepared, settings)
        check_capacity(prepared.requests, settings, capacity)
        if settings.mode == "hybrid" and settings.bookkeeping_only:
            raise SettingsError("--mode hybrid needs the full engine (its checkpoints are exact-state digests); "
                                "drop --bookkeeping-only")
        bound_total, bound_each = upper_bound(prepared, settings.page_size,
                                              "spec" if settings.mode == "spec" else "vanilla")
        if settings.mode == "hybrid":
            bound_total = bound_each = None  # checkpoint reuse has its own bound; not modelled here
        _check_interrupt()
        measured = Measured("bookkeeping-only" if settings.bookkeeping_only else "full", capacity, exporter=exporter)
        phase = "replaying"
        with _progress(len(prepared.requests), "replay", show) as step:
            if settings.bookkeeping_only:
                replay_bookkeeping(prepared, settings, capacity, step, measured)
            else:
                replay_full(prepared, settings, capacity, step, measured)
        if _optimum_applies(settings, args):
            phase = "computing the offline optimum"
            optimum = offline_optimum(prepare_pages(prepared.requests, prepared.hashes), settings.page_size,
                                      capacity, _check_interrupt).hit_rate
        phase = "writing the report"
        _check_interrupt()
    except KeyboardInterrupt:
        interrupted = True
        _interrupt_handled()
    if measured is None:  # interrupted before the replay began
        print(_interrupted_early(workload, phase, total, hashed, time.perf_counter() - t0, args.json), flush=True)
        return 130
    report = build_report(prepared, settings, measured, workload=workload, wall_seconds=time.perf_counter() - t0,
                          bound_total=bound_total, bound_per_request=bound_each, interrupted=interrupted,
                          optimum=optimum, interrupted_phase=phase if interrupted else None)
    print(json.dumps(report) if args.json else format_report(report), flush=True)
    if interrupted:
        return 130
    verify = report.get("verify")
    return 1 if verify is not None and verify["mismatches"] else 0


# ---- sweep ---------------------------------------------------------------------------------------------------------

def sweep_capacities(distinct_pages: int, points: int) -> list[int]:
    """``points`` capacities in pages, geometric from 1% to 100% of the distinct prompt pages (at least one page),
    distinct and ascending."""
    return sorted({max(1, int(round(distinct_pages * f))) for f in np.geomspace(0.01, 1.0, points)})


def non_monotonic_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every capacity that reuses more than a larger one, with the reason."""
    notes = []
    for a, b in zip(rows, rows[1:]):
        if a["hit_rate"] > b["hit_rate"]:
            notes.append(
                f"{a['capacity_tokens']:,} tokens reuse more ({a['hit_rate']:.2%}) than {b['capacity_tokens']:,} "
                f"({b['hit_rate']:.2%}): LRU over whole records is not a stack algorithm, so a larger pool evicts at "
                f"different moments and can drop a different (longer or more shared) record; evicted records "
                f"{a['evicted_records']:,} vs {b['evicted_records']:,}")
    return notes


def sweep_outputs(out_dir: str, name: str) -> tuple[Path, Path]:
    """The sweep's CSV and PNG paths, checked before any work: the directory is created if missing and must take a
    new file, and an output that exists must be a file that can be overwritten."""
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SettingsError(f"--out-dir {out_dir}: cannot create it as a directory ({e.strerror or e})") from None
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=f".{name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise SettingsError(f"--out-dir {out_dir}: cannot write a file there ({e.strerror or e})") from None
    paths = directory / f"{name}.csv", directory / f"{name}.png"
    for path in paths:
        if path.is_dir() or (path.exists() and not os.access(path, os.W_OK)):
            raise SettingsError(f"{path} exists and cannot be overwritten: use another --name or --out-dir")
    return paths


def reaching(rows: Sequence[dict[str, Any]], target: float) -> dict[str, Any] | None:
    """Where the sampled curve first reaches ``target`` (a hit rate): the first sampled point at or above it
    (``sampled_tokens``), and the capacity interpolated log-linearly between it and the sampled point before it,
    which is below the target (``interpolated_tokens``; the first point itself when that is the smallest sampled,
    with ``below_range`` True: the target may be reached at a smaller capacity). None when no point reaches it."""
    k = next((i for i, r in enumerate(rows) if r["hit_rate"] >= target - 1e-12), None)
    if k is None:
        return None
    hit = rows[k]
    if k == 0:
        return {"sampled_tokens": hit["capacity_tokens"], "interpolated_tokens": hit["capacity_tokens"],
                "below_range": True, "between": None}
    low = rows[k - 1]
    x0, x1 = np.log(low["capacity_tokens"]), np.log(hit["capacity_tokens"])
    y0, y1 = low["hit_rate"], hit["hit_rate"]
    x = x0 + (target - y0) / (y1 - y0) * (x1 - x0) if y1 > y0 else x1
    return {"sampled_tokens": hit["capacity_tokens"], "interpolated_tokens": int(round(float(np.exp(x)))),
            "below_range": False, "between": [low["capacity_tokens"], hit["capacity_tokens"]]}


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed (the ``plot`` extra)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


PLOT_HINT = "no PNG: matplotlib is not installed (pip install 'ctxcache[plot]' for the plot)"


def _plot(plt: Any, png_path: Path, rows: Sequence[dict[str, Any]], reach: dict[str, dict[str, Any] | None],
          bound_rate: float, with_lru: bool, with_optimum: bool, settings: Settings, title: str) -> None:
    """The sweep's PNG: the hit-rate curves against capacity, the unbounded bound, where 90% and 99% of it are
    reached."""
    fig, ax = plt.subplots(figsize=(8, 5))
    if rows:
        retained = settings.retain_system
        ax.plot([r["capacity_tokens"] for r in rows], [100 * r["hit_rate"] for r in rows], "o-",
                label=f"hit rate ({'record LRU' if not with_lru else settings.eviction_policy}"
                      + (f", system prompts at {retained[0]}" if retained is not None else "") + ")")
        if with_lru:
            ax.plot([r["capacity_tokens"] for r in rows], [100 * r["lru_hit_rate"] for r in rows], "^:",
                    color="tab:orange", label="hit rate (record LRU, the reference's)")
        if settings.retain_system is not None:
            ax.plot([r["capacity_tokens"] for r in rows], [100 * r["without_retention_hit_rate"] for r in rows], "v-.",
                    color="tab:purple", label=f"hit rate without --retain-system-prompts ({settings.eviction_policy})")
        if with_optimum:
            ax.plot([r["capacity_tokens"] for r in rows], [100 * r["optimum_hit_rate"] for r in rows], "s--",
                    color="tab:green", label="offline optimum (Belady, knows the future)")
    ax.axhline(100 * bound_rate, color="gray", linestyle="--", label=f"unbounded cache {bound_rate:.1%}")
    for share, style in (("90", ":"), ("99", "-.")):
        hit = reach[share]
        if hit is not None:
            where = (f"{hit['interpolated_tokens']:,} tokens or less (smallest sampled)" if hit["below_range"] else
                     f"~{hit['interpolated_tokens']:,} tokens (interpolated)")
            ax.axvline(hit["interpolated_tokens"], color="tab:red", linestyle=style,
                       label=f"{share}% of the bound at {where}")
    ax.set_xscale("log")
    ax.set_xlabel(f"cache capacity (tokens, page size {settings.page_size})")
    ax.set_ylabel("prompt tokens reused (%)")
    ax.set_title(f"ctxcache sweep: {title} ({settings.mode})")
    ax.set_ylim(0, max(5.0, 100 * bound_rate * 1.1))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    try:
        fig.savefig(png_path, dpi=120, format="png")
    except OSError as e:
        raise SettingsError(f"cannot write {png_path}: {e.strerror or e}") from None
    plt.close(fig)


def run_sweep(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if settings.mode == "hybrid":
        raise SettingsError("sweep runs bookkeeping-only: --mode vanilla or spec")
    csv_path, png_path = sweep_outputs(args.out_dir, args.name)  # before the work, not after it

    plt = _pyplot()  # None without the plot extra: the CSV is still written, and one line says how to get the PNG

    t0 = time.perf_counter()
    workload, requests = load_workload(args.trace, settings, args.limit, conversation_workload(args, settings))
    show = not args.no_progress
    hashed = 0
    try:
        with _progress(len(requests), "hashing", show) as step:
            def hash_step(count: int) -> None:
                nonlocal hashed
                hashed += count
                step(count)

            prepared = prepare(requests, settings, hash_step)
    except KeyboardInterrupt:
        _interrupt_handled()
        print(json.dumps({"command": "sweep", "workload": workload, "interrupted": True,
                          "interrupted_phase": "hashing", "requests": len(requests), "hashed_requests": hashed,
                          "points": []}) if args.json else
              f"ctxcache sweep: {workload}  [INTERRUPTED while hashing: {hashed:,} of {len(requests):,} requests "
              f"hashed, no capacity swept, nothing written]", flush=True)
        return 130
    bound_total, _ = upper_bound(prepared, settings.page_size, settings.mode)
    prompt_tokens = prepared.prompt_tokens
    bound_rate = _ratio(bound_total, prompt_tokens)
    minimum = minimum_capacity_pages(prepared.requests, settings)
    capacities = sweep_capacities(prepared.distinct_pages, args.points)
    check_capacity(prepared.requests, settings, max(capacities[-1], minimum))  # the other settings
    rows: list[dict[str, Any]] = []
    interrupted = False
    with_optimum = _optimum_applies(settings, args)
    pages = prepare_pages(prepared.requests, prepared.hashes) if with_optimum else None
    # Another policy than the reference's: its curve is drawn beside record LRU's, measured at the same points.
    baseline = dataclasses.replace(settings, eviction_policy="lru") if settings.eviction_policy != "lru" else None
    # --retain-system-prompts: the same policy without the retention spec, measured at the same points.
    plain = dataclasses.replace(settings, retain_system=None) if settings.retain_system is not None else None
    try:
        with _progress(len(capacities) * len(prepared.requests), "sweep", show) as step:
            for cap in capacities:  # below `minimum`, the requests that cannot fit bypass the cache (rejected)
                m = replay_bookkeeping(prepared, settings, cap, step)
                reused = sum(m.reused)
                lru_reused = (sum(replay_bookkeeping(prepared, baseline, cap, lambda _: _check_interrupt()).reused)
                              if baseline else None)
                plain_reused = (sum(replay_bookkeeping(prepared, plain, cap, lambda _: _check_interrupt()).reused)
                                if plain else None)
                optimum = (offline_optimum(pages, settings.page_size, cap, _check_interrupt).hit_rate
                           if pages is not None else None)
                rows.append({"capacity_pages": cap, "capacity_tokens": cap * settings.page_size,
                             "fraction_of_distinct": round(_ratio(cap, prepared.distinct_pages), 6),
                             "hit_rate": round(_ratio(reused, prompt_tokens), 6),
                             "ratio_to_upper_bound": round(_ratio(reused, bound_total), 6),
                             "optimum_hit_rate": round(optimum, 6) if optimum is not None else "",
                             "lru_hit_rate": round(_ratio(lru_reused, prompt_tokens), 6) if lru_reused is not None
                             else "",
                             "reused_tokens": reused, "rejected": m.rejected, "evicted_records": m.evicted_records,
                             "reclaimed_pages": m.reclaimed_pages, "peak_pages": max(m.used_pages, default=0),
                             "without_retention_hit_rate": round(_ratio(plain_reused, prompt_tokens), 6)
                             if plain_reused is not None else "",
                             "host_tier_pages": settings.host_tier_pages,
                             "reused_tokens_host": sum(m.reused_host)})
    except KeyboardInterrupt:
        interrupted = True
        _interrupt_handled()

    if _interrupt_requested and not interrupted:  # Ctrl-C after the last point: the figures are complete
        interrupted = True
        _interrupt_handled()

    reach = {"90": reaching(rows, 0.9 * bound_rate), "99": reaching(rows, 0.99 * bound_rate)}
    columns = ["capacity_pages", "capacity_tokens", "fraction_of_distinct", "hit_rate", "ratio_to_upper_bound",
               "optimum_hit_rate", "lru_hit_rate", "reused_tokens", "rejected", "evicted_records", "reclaimed_pages", "peak_pages",
               "without_retention_hit_rate", "host_tier_pages", "reused_tokens_host"]
    try:
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
    except OSError as e:  # checked writable before the work; the disk may have filled since
        raise SettingsError(f"cannot write {csv_path}: {e.strerror or e}") from None

    if plt is not None:
        _plot(plt, png_path, rows, reach, bound_rate, baseline is not None, with_optimum, settings,
              Path(workload).name if args.trace else workload)

    notes = non_monotonic_notes(rows)
    small = [r for r in rows if r["rejected"]]
    if small:
        notes.append(f"{len(small)} capacities (up to {small[-1]['capacity_tokens']:,} tokens) are smaller than the "
                     f"largest request ({minimum * settings.page_size:,} tokens with its output): the requests that "
                     f"do not fit bypass the cache and count as not reused (column 'rejected')")
    report = {"command": "sweep", "workload": workload, "interrupted": interrupted,
              "interrupted_phase": (("sweeping" if len(rows) < len(capacities) else "writing the results")
                                    if interrupted else None), "mode": settings.mode,
              "eviction_policy": settings.eviction_policy,
              "retain_system_prompts": ({"priority": settings.retain_system[0], "seconds": settings.retain_system[1]}
                                        if settings.retain_system is not None else None),
              "page_size": settings.page_size, "max_records": settings.max_records,
              "batch_size": settings.batch_size, "requests": len(prepared.requests), "prompt_tokens": prompt_tokens,
              "distinct_prompt_tokens": prepared.distinct_pages * settings.page_size,
              "minimum_capacity_tokens": minimum * settings.page_size,
              "upper_bound_hit_rate": round(bound_rate, 6), "points": rows,
              # the first sampled capacity at or above 90% / 99% of the bound, and log-linearly interpolated
              "reaches_90_percent_of_bound_tokens": reach["90"]["sampled_tokens"] if reach["90"] else None,
              "reaches_99_percent_of_bound_tokens": reach["99"]["sampled_tokens"] if reach["99"] else None,
              "reaches_90_percent_of_bound_interpolated_tokens":
                  reach["90"]["interpolated_tokens"] if reach["90"] else None,
              "reaches_99_percent_of_bound_interpolated_tokens":
                  reach["99"]["interpolated_tokens"] if reach["99"] else None,
              "non_monotonic": notes, "csv": str(csv_path), "png": str(png_path) if plt is not None else None,
              "wall_seconds": round(time.perf_counter() - t0, 3)}
    if args.json:
        print(json.dumps(report), flush=True)
        if plt is None:
            print(f"ctxcache sweep: {PLOT_HINT}", file=sys.stderr, flush=True)
    else:
        lines = [f"ctxcache sweep: {workload} ({settings.mode}, page size {settings.page_size}, "
                 f"eviction {settings.eviction_policy})"
                 + (("  [INTERRUPTED: partial figures]" if len(rows) < len(capacities) else
                     "  [INTERRUPTED after the last capacity: figures complete]") if interrupted else ""),
                 f"  {len(prepared.requests):,} requests, {prompt_tokens:,} prompt tokens, "
                 f"{report['distinct_prompt_tokens']:,} distinct; unbounded-cache bound {bound_rate:.2%}", "",
                 _sweep_table(rows, settings.eviction_policy, baseline is not None, with_optimum,
                              settings.retain_system is not None), ""]
        for share in ("90", "99"):
            hit = reach[share]
            if hit is None:
                lines.append(f"{share}% of the bound: not reached")
            elif hit["below_range"]:
                lines.append(f"{share}% of the bound: reached at the smallest sampled capacity, "
                             f"{hit['sampled_tokens']:,} tokens (perhaps below it)")
            else:
                low, high = hit["between"]
                lines.append(f"{share}% of the bound: ~{hit['interpolated_tokens']:,} tokens, interpolated "
                             f"(log-linear) between the sampled {low:,} (below) and {high:,} (the first sampled "
                             f"point at or above it)")
        lines += [f"note: {n}" for n in notes]
        if plt is not None:
            lines.append(f"wrote {png_path} and {csv_path} in {report['wall_seconds']:.1f} s")
        else:
            lines.append(f"wrote {csv_path} in {report['wall_seconds']:.1f} s; {PLOT_HINT}")
        print("\n".join(lines), flush=True)
    return 130 if interrupted else 0


def _sweep_table(rows: Sequence[dict[str, Any]], policy: str, with_lru: bool, with_optimum: bool,
                 retained: bool = False) -> str:
    """The sweep's table: the record LRU column only beside another policy, the column without retention only with
    --retain-system-prompts, the optimum only when computed."""
    header = ["capacity tokens", "of distinct", f"hit rate ({policy})"]
    header += ["no retention"] if retained else []
    header += ["record LRU"] if with_lru else []
    header += ["optimum"] if with_optimum else []
    header += ["of bound", "evicted records", "rejected"]
    table = []
    for r in rows:
        cells = [f"{r['capacity_tokens']:,}", f"{r['fraction_of_distinct']:.1%}", f"{r['hit_rate']:.2%}"]
        cells += [f"{r['without_retention_hit_rate']:.2%}"] if retained else []
        cells += [f"{r['lru_hit_rate']:.2%}"] if with_lru else []
        cells += [f"{r['optimum_hit_rate']:.2%}"] if with_optimum else []
        cells += [f"{r['ratio_to_upper_bound']:.1%}", f"{r['evicted_records']:,}", f"{r['rejected']:,}"]
        table.append(cells)
    return _table(table, header=header)


def _guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, prog: str) -> int:
    """Errors a user can fix: one line on stderr, exit status 2, no traceback. Ctrl-C: exit 130 with the partial
    report (the run prints it), or one line when it came where no report can be made."""
    import _thread
    import signal
    import threading

    from .. import _startup
    from ..errors import ContractError

    global _interrupt_requested, _interrupt_taken
    _interrupt_requested = _interrupt_taken = False
    previous: Any = None

    fallback_firing = False

    def fallback() -> None:  # see _interrupt_requested
        nonlocal fallback_firing
        while not _interrupt_taken:
            fallback_firing = True
            _thread.interrupt_main()
            time.sleep(_FALLBACK_SECONDS)

    def on_sigint(signum: int, frame: Any) -> None:
        global _interrupt_requested
        if _interrupt_requested:  # a second Ctrl-C, or the fallback: stop here
            if fallback_firing and _interrupt_taken:
                return  # an interrupt point took it meanwhile: the report is being made
            if _startup.in_collector(frame):
                return  # raised there it would be dropped: the fallback tries again in half a second
            raise KeyboardInterrupt  # taken once caught (run_* or below), so a dropped one is retried
        _interrupt_requested = True
        timer = threading.Timer(_FALLBACK_SECONDS, fallback)
        timer.daemon = True
        timer.start()

    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        code = run(args)
        if _interrupt_requested and code != 130:  # Ctrl-C while the complete report was being printed
            print(f"{prog}: interrupted as it finished (the report is complete)", file=sys.stderr)
            code = 130
        return code
    except (TraceError, SettingsError, ContractError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except MemoryError as e:  # ctxcache.OutOfMemoryError names what and the bytes; numpy's says as much
        print(f"{prog}: error: out of memory: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # where no partial report can be made (reading the trace, writing the plot)
        _interrupt_taken = True
        if getattr(args, "json", False):
            print(json.dumps({"command": prog.split()[-1], "interrupted": True,
                              "interrupted_phase": "outside the measured phases", "requests": 0, "report": None}),
                  flush=True)
        print(f"{prog}: interrupted (no report: it came before anything was measured or while writing results)",
              file=sys.stderr)
        return 130
    finally:
        _interrupt_taken = True  # the fallback stops
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def replay_parser(prog: str = "ctxcache replay") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description="Replay a serving workload through the context cache and "
                                             "report what it reused, evicted and cost.")
    _add_common(p)
    _add_replay_only(p)
    p.add_argument("--verify", action="store_true",
                   help="full engine: compare every request with a cold run, byte for byte")
    p.add_argument("--events", metavar="ENDPOINT", type=zmq_endpoint, default=None,
                   help="publish the cache's KV events in vLLM's ZMQ format while replaying (e.g. tcp://*:5557, "
                        "which binds; a tcp://host:port connects to a router that binds): docs/EVENTS.md")
    p.add_argument("--events-replay", metavar="ENDPOINT", type=zmq_endpoint, default=None,
                   help="with --events: the replay ROUTER endpoint (e.g. tcp://*:5558)")
    p.add_argument("--events-topic", metavar="TOPIC", default="",
                   help="with --events: the topic (llm-d expects kv@<pod>@<model>)")
    p.add_argument("--events-wait", metavar="SECONDS", type=seconds_range(0, 3600), default=Settings.events_wait,
                   help="with --events: wait up to this long for a first subscriber before replaying, so a router "
                        "that is listening sees every batch (default %(default)g; 0: do not wait)")
    p.add_argument("--events-linger", metavar="SECONDS", type=seconds_range(0, 3600),
                   default=Settings.events_linger,
                   help="with --events-replay: keep the replay socket serving this long after the last batch, for "
                        "a router that noticed a gap (default %(default)g)")
    p.add_argument("--metrics-port", metavar="PORT", type=int_range(0, 65535), default=None,
                   help="serve the cache's metrics in the Prometheus text format on this port (every interface; 0: "
                        "any free port) while replaying (the names: docs/METRICS.md; needs prometheus_client, "
                        "pip install 'ctxcache[metrics]')")
    p.add_argument("--metrics-linger", metavar="SECONDS", type=seconds_range(0, 3600), default=0.0,
                   help="with --metrics-port: keep serving the final metrics this long after the report (default "
                        "0; Ctrl-C ends it)")
    return p


def sweep_parser(prog: str = "ctxcache sweep") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description="Hit rate over a range of cache capacities "
                                             "(bookkeeping-only): a PNG plot and a CSV.")
    _add_common(p)
    p.add_argument("--points", type=int_range(8, 1000), default=10,
                   help="capacities, 1%% to 100%% of the distinct prompt tokens (default 10, 8 to 1000)")
    p.add_argument("--out-dir", default=".",
                   help="where the PNG and CSV go (default .; created if missing, checked before the work)")
    p.add_argument("--name", type=file_stem, default="ctxcache-sweep",
                   help="file name stem: NAME.png and NAME.csv (default ctxcache-sweep)")
    return p


def replay_main(argv: Sequence[str] | None = None) -> int:
    args = replay_parser().parse_args(list(argv) if argv is not None else None)
    if args.verify and args.bookkeeping_only:
        replay_parser().error("--verify needs the full engine (drop --bookkeeping-only)")
    if (args.events_replay or args.events_topic) and not args.events:
        replay_parser().error("--events-replay and --events-topic need --events")
    return _guarded(run_replay, args, "ctxcache replay")


def sweep_main(argv: Sequence[str] | None = None) -> int:
    args = sweep_parser().parse_args(list(argv) if argv is not None else None)
    args.bookkeeping_only = True
    return _guarded(run_sweep, args, "ctxcache sweep")


if __name__ == "__main__":
    sys.exit(replay_main())
