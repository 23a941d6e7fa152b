"""``ctxcache bench``: replay a Mooncake-format trace through the manager from Python (the public API only).

This is the Python half of the manager benchmark; ``tools/bench/bench_manager.cpp`` is the C++ half and
``tools/bench_manager`` runs both and checks that every non-timing figure agrees. The definitions are shared and
must stay identical (see the C++ file's header comment for the full list):

- token expansion: hash id ``h`` becomes ``int32(splitmix64(h * 512 + j) mod 32000)`` for ``j`` in 0..511 (all
  arithmetic mod 2**64); a request's tokens are the concatenation over its ``hash_ids``, cut to ``input_length``;
- hashing phase (once per page size, shared by the modes): keyed SHA-256 ``hash_full_blocks`` (timed apart);
- per request (file order, stably sorted by timestamp), in three modes (``--mode``, default all three):

  - vanilla: ``acquire_vanilla``; ``grow_base_pages`` to ``ceil((input_length + output_length) / P)`` pages when
    that adds any; ``publish(lease, hashes, input_length)`` when there is a full block; ``lease.close()``;
  - hybrid (attention + recurrent, one exact checkpoint at every prompt end): ``hybrid_candidate_lengths(n,
    hashes)`` (only checkpoints that hang off the prompt's own block chain),
    the K longest tried (``--hybrid-candidates``, default 8, 0 = all) with their keyed ``hash_exact_prefix``
    digests, computed incrementally from the request's chained full-block hashes (``hashes[L // P - 1]`` when P
    divides L, else ``hash_block(parent, tokens[L // P * P:L])``; checked against ``hash_exact_prefix`` at every
    request's own length); ``acquire_hybrid(candidates, hashes, n, True)``;
    ``release_restored_hybrid_snapshots``; grow as vanilla; ``reserve_hybrid_snapshots(lease, n % P != 0)``
    (None = snapshot pressure: counted, nothing published); ``publish_hybrid(lease, hashes, (digest(n), n),
    reservation)``; ``retire_hybrid_snapshot_reservation``; ``lease.close()``;
  - spec (greedy EAGLE, paired base + draft pools): ``acquire_spec``; ``grow_spec_pages`` by the same count in
    both pools; ``publish(lease, hashes, input_length)``; ``lease.close()``. A hit replays its boundary page:
    reuse = matched - P (checked); replayed pages = sum of (matched - reuse) / P;

- capacity: ``floor(distinct 512-token blocks / 2) * (512 / P)`` base pages (spec: a draft pool of the same size;
  hybrid: ``max(1, requests // 2)`` recurrent and as many partial-KV snapshot slots), 1,000,000 records; the
  upper bound is the same replay with pools that nothing evicts from;
- figures: hit rate = sum(reuse_token_length) / sum(input_length); pages touched = base + draft lease pages after
  growth + published blocks; manager time = every manager call of the request; hybrid digest time (candidates'
  and publication digests, building the candidate list included) is reported apart; metadata bytes per cached
  block = ``metadata_bytes / (capacity - free base pages)`` after the last request (spec: also per cached base +
  draft page);
- timings: the headline figures are what a server sees, ONE pass in trace order with each request hashed once and
  served once (the first of the passes); each request is hashed ``--repeat`` times back to back and the replay runs
  ``--repeat`` times, and the ``hot_*`` figures count every request with its fastest repetition (caches warm from
  the identical passes before it): labelled hot wherever they are shown.
- vanilla and spec also report each acquire call's time (``acquire_p50_us``, ``acquire_p99_us``,
  ``acquire_max_us``, nearest rank, first pass) and ``manager_seconds_by_operation`` (acquire, grow, publish,
  release); ``ctxcache workload --out FILE`` writes the conversation workload (docs/TRACES.md) to bench with
  ``--trace FILE``.

- the cache-cold loop (``--cold``, vanilla and spec, default both; repeat 1): no hashing phase; per request its
  tokens are expanded (untimed) and hashed (timed) in the mode's own loop, served as above, and between two
  requests one byte of every 64-byte line of a ``--cold-bytes`` buffer is read (untimed; default twice the
  last-level cache), as a forward pass would sweep the caches (:class:`ColdLoop`). Results say ``"loop": "cold"``
  and ``cold_bytes`` and have no ``hot_*`` figures; every other figure equals the hot loop's.

Beside the trace replay, ``python_call_ns`` is what one call through the package costs (see
:func:`call_overhead`): a tiny request that always hits, in a warm loop, timed call by call. It is an upper bound
of the package's overhead per call into C: it includes the C++ work of that 2-block request, which
``tools/bench/bench_capi_calls`` measures through the same C functions (``tools/bench_manager`` subtracts it).
``--calls`` measures only that (no trace needed).

Usage: ``ctxcache bench [--trace PATH] [--requests N] [--page-size P]... [--mode vanilla|hybrid|spec]...
[--capacity-blocks B] [--max-records R] [--snapshot-slots S] [--hybrid-candidates K] [--key STRING] [--repeat K]
[--no-upper-bound] [--cold [--cold-bytes B]] [--call-batches K] [--call-batch-size B] [--calls] [--table]``. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from ..cli.args import INT32_MAX, OneLineParser, int_range
from ..cli.workload import TRACE_BLOCK, expand_range, expand_tokens, read_trace, splitmix64
from ..enums import AcquireStatus, PublishStatus, ResourceType
from ..hashing import Hasher
from ..manager import ContextCacheManager, HybridCheckpointCandidate, HybridCheckpointKey, ResourceDemand

__all__ = ["TRACE_BLOCK", "ColdLoop", "Request", "call_overhead", "default_cold_bytes", "default_trace", "expand_range",
           "expand_tokens", "last_level_cache_bytes", "load_trace", "main", "replay", "replay_hybrid", "replay_spec",
           "replay_vanilla", "run_modes", "run_page_size", "splitmix64"]

DEFAULT_KEY = "ctxcache-bench-key"
DEFAULT_MAX_RECORDS = 1_000_000
DEFAULT_HYBRID_CANDIDATES = 8
DEFAULT_CALL_BATCHES = 40
DEFAULT_CALL_BATCH_SIZE = 500
CALL_OPS = ("hash_full_blocks", "acquire_vanilla", "grow_base_pages", "publish", "lease_close", "read_results",
            "drop_results")
MODES = ("vanilla", "hybrid", "spec")
_MASK64 = 2**64 - 1


@dataclass(frozen=True)
class Request:
    timestamp: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def default_trace() -> Path | None:
    """$CTXCACHE_TRACE, or None: the installed package reads no file it was not given (tools/bench_manager passes
    the repository's trace with --trace)."""
    value = os.environ.get("CTXCACHE_TRACE")
    return Path(value) if value else None


def load_trace(path: str | os.PathLike[str], limit: int | None = None) -> list[Request]:
    """The first ``limit`` requests of a Mooncake JSONL trace, stably sorted by timestamp (TraceError names the
    file, line and field of a malformed request)."""
    return [Request(r.timestamp, r.input_length, r.output_length, r.hash_ids) for r in read_trace(path, limit)]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def last_level_cache_bytes() -> int:
    """The largest data or unified cache of cpu0 (/sys/devices/system/cpu/cpu0/cache), 0 when unreadable."""
    best = 0
    for index in range(16):
        d = Path(f"/sys/devices/system/cpu/cpu0/cache/index{index}")
        try:
            kind, size = (d / "type").read_text().strip(), (d / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction" or not size:
            continue
        digits = size.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1))
    return best


def default_cold_bytes() -> int:
    """The cold loop's sweep: twice the last-level cache (64 MiB when it cannot be read)."""
    return 2 * (last_level_cache_bytes() or 32 << 20)


class ColdLoop:
    """The cache-cold loop's state (as tools/bench/bench_manager.cpp's ColdLoop): the hasher, and a buffer of
    ``cold_bytes`` bytes, written once so that every page is backed, of which :meth:`sweep` reads one byte per
    64-byte line, as a forward pass between two requests would sweep the caches."""

    def __init__(self, hasher: Hasher, cold_bytes: int) -> None:
        self.hasher = hasher
        self.buffer = np.ones(cold_bytes, dtype=np.uint8)
        self.lines = self.buffer[::64]
        self.sink = 0
        self.hash_ns: list[int] = []

    def sweep(self) -> None:
        self.sink += int(self.lines.sum(dtype=np.uint64))


def call_overhead(page_size: int = 16, blocks: int = 2, batches: int = DEFAULT_CALL_BATCHES,
                  batch_size: int = DEFAULT_CALL_BATCH_SIZE, key: str = DEFAULT_KEY) -> dict[str, Any]:
    """What each call of one request costs through the package, in nanoseconds: an upper bound of the Python
    (and cffi) overhead per call into C.

    The request: ``blocks`` full blocks of ``page_size`` tokens (token i = i), hashed with the keyed SHA-256
    hasher, on a manager of 4096 base pages that already holds the prompt's record, so that every acquire hits.
    Per request, each timed on its own with ``time.perf_counter_ns``: ``hash_full_blocks(tokens, page_size)``,
    ``acquire_vanilla(hashes, n)``, ``grow_base_pages(lease, 2)``, ``publish(lease, hashes, n)``,
    ``lease.close()``; and what a caller pays around the calls: ``read_results`` (reading the acquire's status and
    plan (reuse and matched lengths, made on first read) and the publication's status) and ``drop_results``
    (dropping the request's result objects: their deallocation and the lease's finalizer). Each figure is a
    batch's mean minus the clock's own cost (an empty interval timed in the same batch), and the median over
    ``batches`` batches of ``batch_size`` requests (after two warm-up batches; the garbage collector runs as
    usual). ``request`` is their sum.

    Each figure includes the C++ work of the call (small for this request, but not zero):
    ``tools/bench/bench_capi_calls`` runs the same loop through the same C functions, and the overhead is the
    difference. Every request is checked (a hit reusing ``(blocks - 1) * page_size`` tokens, a grow that
    succeeds, an existing record): AssertionError otherwise."""
    if page_size <= 0 or not 2 <= blocks <= 1024 or batches <= 0 or batch_size <= 0:
        raise ValueError("need page_size > 0, 2 <= blocks <= 1024, batches > 0, batch_size > 0")
    n = blocks * page_size
    tokens = np.arange(n, dtype=np.int32)
    hasher = Hasher("sha256", key.encode("utf-8"))
    manager = ContextCacheManager(page_size, ResourceDemand(base_kv_pages=4096))
    try:
        hashes = hasher.hash_full_blocks(tokens, page_size)
        first = manager.acquire_vanilla(hashes, n).lease
        assert first is not None
        with first:  # the record every timed acquire hits
            manager.publish(first, hashes, n)
        expected_reuse = (blocks - 1) * page_size
        hit, existing = AcquireStatus.ACQUIRED, PublishStatus.EXISTING_RECORD
        perf = time.perf_counter_ns
        hash_full_blocks, acquire, grow, publish = (hasher.hash_full_blocks, manager.acquire_vanilla,
                                                    manager.grow_base_pages, manager.publish)
        figures: list[list[float]] = [[] for _ in CALL_OPS]
        clock: list[float] = []
        gc.collect()
        for batch in range(batches + 2):
            sums = [0] * len(CALL_OPS)
            empty = 0
            for _ in range(batch_size):
                t0 = perf()
                hashed = hash_full_blocks(tokens, page_size)
                t1 = perf()
                result = acquire(hashes, n)
                t2 = perf()
                lease = result.lease
                if lease is None:
                    raise AssertionError("a request did not go the measured way (hit, grow, existing record)")
                t3 = perf()
                grown = grow(lease, 2)
                t4 = perf()
                published = publish(lease, hashes, n)
                t5 = perf()
                lease.close()
                t6 = perf()
                status, plan, publication = result.status, result.plan, published.status
                reused, matched = plan.reuse_token_length, plan.matched_token_length
                t7 = perf()
                if (status is not hit or reused != expected_reuse or matched != n or not grown
                        or publication is not existing or hashed[0, 1] != hashes[0, 1]):
                    raise AssertionError("a request did not go the measured way (hit, grow, existing record)")
                t8 = perf()
                del hashed, result, lease, published, plan
                t9 = perf()
                t10 = perf()
                sums[0] += t1 - t0
                sums[1] += t2 - t1
                sums[2] += t4 - t3
                sums[3] += t5 - t4
                sums[4] += t6 - t5
                sums[5] += t7 - t6
                sums[6] += t9 - t8
                empty += t10 - t9
            if batch < 2:  # warm-up
                continue
            clock_ns = empty / batch_size
            clock.append(clock_ns)
            for op, total in enumerate(sums):
                figures[op].append(max(0.0, total / batch_size - clock_ns))
    finally:
        manager.close()
        hasher.close()
    calls = {op: _sig(statistics.median(values)) for op, values in zip(CALL_OPS, figures)}
    calls["request"] = _sig(sum(calls[op] for op in CALL_OPS))
    return {"python_call_ns": calls,
            "python_call_setup": {"page_size": page_size, "blocks": blocks, "tokens": n, "batches": batches,
                                  "batch_size": batch_size, "clock_ns": _sig(statistics.median(clock))}}


def replay(requests: Sequence[Request], hashes: Sequence[np.ndarray], page_size: int, capacity_pages: int,
           max_records: int, sample_peak: bool = True) -> dict[str, Any]:
    """The vanilla replay (see replay_vanilla)."""
    return replay_vanilla(requests, list(hashes), page_size, capacity_pages, max_records, sample_peak)


def _finish(manager: ContextCacheManager, out: dict[str, Any], capacities: ResourceDemand, peak: int) -> None:
    """What every replay reads at its end."""
    manager.check_invariants()
    metrics = manager.metrics
    pools = manager.pools
    out["capacity_pages"] = capacities.base_kv_pages
    out["cached_pages"] = capacities.base_kv_pages - pools.free_count(ResourceType.BASE_KV_PAGE)
    out["cached_draft_pages"] = capacities.draft_kv_pages - pools.free_count(ResourceType.DRAFT_KV_PAGE)
    out["cached_recurrent_snapshots"] = (capacities.recurrent_snapshot_slots
                                         - pools.free_count(ResourceType.RECURRENT_SNAPSHOT))
    out["cached_partial_kv_snapshots"] = (capacities.partial_kv_snapshot_slots
                                          - pools.free_count(ResourceType.PARTIAL_KV_SNAPSHOT))
    out["records"] = len(manager.records)
    out["base_index_entries"] = len(manager.base_index)
    out["metadata_bytes"] = manager.metadata_bytes
    out["peak_metadata_bytes"] = max(peak, out["metadata_bytes"])
    out["evicted_records"] = metrics.evicted_records
    out["superseded_records"] = metrics.superseded_records
    out["trimmed_records"] = metrics.trimmed_records
    out["reclaimed_base_pages"] = metrics.reclaimed_base_kv_pages
    out["reclaimed_draft_pages"] = metrics.reclaimed_draft_kv_pages
    out["reclaimed_recurrent_snapshots"] = metrics.reclaimed_recurrent_snapshots
    out["reclaimed_partial_kv_snapshots"] = metrics.reclaimed_partial_kv_snapshots


def _replay_paged(requests: Sequence[Request], hashes: list[np.ndarray], page_size: int, capacity_pages: int,
                  max_records: int, sample_peak: bool, spec: bool, eviction_policy: str = "lru",
                  cold: ColdLoop | None = None, host_tier_pages: int = 0) -> dict[str, Any]:
    """One pass of acquire / grow / publish / release: vanilla, or EAGLE spec with a draft pool as large as the base
    pool (both grown alike). Only the manager calls are timed. ``cold``: the cache-cold loop, each request's tokens
    expanded (untimed) and hashed (timed apart, into ``cold.hash_ns``; the hashes stored in ``hashes[i]``) in the
    loop, and a cache sweep between two requests."""
    capacities = ResourceDemand(base_kv_pages=capacity_pages, draft_kv_pages=capacity_pages if spec else 0)
    manager = ContextCacheManager(page_size, capacities, max_records, eviction_policy)
    # A host tier (write-back, bookkeeping) extends each hit (spec: its speculative extension, whose slots hold draft
    # pages too); its call is timed with the acquire.
    extend = None
    if host_tier_pages > 0:
        tier = manager.attach_host_tier(host_tier_pages)
        extend = tier.extend_spec_hit if spec else tier.extend_hit
    pools = 2 if spec else 1
    acquire = manager.acquire_spec if spec else manager.acquire_vanilla
    perf = time.perf_counter_ns
    out: dict[str, Any] = dict(requests=0, acquired=0, insufficient_capacity=0, grow_calls=0, grow_failures=0, publish_calls=0,
               published_new=0, published_existing=0, manager_calls=0, input_tokens=0, reused_tokens=0,
               matched_tokens=0, lease_pages=0, published_blocks=0, pages_touched=0)
    if spec:
        out.update(lease_base_pages=0, lease_draft_pages=0, hits=0, replayed_pages=0)
    request_ns = [0] * len(requests)
    acquire_ns = [0] * len(requests)
    op_ns = [0, 0, 0, 0]  # acquire, grow, publish, release
    peak = 0
    acquired_ok = AcquireStatus.ACQUIRED
    published_ok = PublishStatus.PUBLISHED
    if cold is not None:
        cold.hash_ns = [0] * len(requests)
        hash_full_blocks = cold.hasher.hash_full_blocks
    gc.collect()
    try:
        for i, r in enumerate(requests):
            if cold is not None:
                if i:
                    cold.sweep()  # the forward pass between two requests
                tokens = expand_tokens(r.hash_ids, r.input_length)
                h0 = perf()
                h = hash_full_blocks(tokens, page_size)
                cold.hash_ns[i] = perf() - h0
                hashes[i] = h
            else:
                h = hashes[i]
            n_in = r.input_length
            input_pages = _ceil_div(n_in, page_size)
            grow = _ceil_div(n_in + r.output_length, page_size) - input_pages  # a lease holds input_pages per pool
            publishes = h.shape[0] > 0

            t0 = perf()
            result = acquire(h, n_in)
            loaded = (extend(h, n_in, result.plan.reuse_token_length // page_size)
                      if extend is not None and result.lease is not None else 0)
            t_acquired = perf()
            acquire_ns[i] = t_acquired - t0
            op_ns[0] += t_acquired - t0
            lease = result.lease
            if lease is None:
                t1 = t_acquired
                request_ns[i] = t1 - t0
                out["requests"] += 1
                out["input_tokens"] += n_in
                out["manager_calls"] += 1
                out["insufficient_capacity"] += 1
                continue
            if grow > 0:
                grown = manager.grow_spec_pages(lease, grow, grow) if spec else manager.grow_base_pages(lease, grow)
            else:
                grown = True
            t_grown = perf()
            published = manager.publish(lease, h, n_in) if publishes else None
            t_published = perf()
            lease.close()
            t1 = perf()
            op_ns[1] += t_grown - t_acquired
            op_ns[2] += t_published - t_grown
            op_ns[3] += t1 - t_published

            request_ns[i] = t1 - t0
            plan = result.plan
            if (result.status != acquired_ok or plan.bound_base_page_count + plan.demand.base_kv_pages != input_pages
                    or (spec and plan.bound_draft_page_count + plan.demand.draft_kv_pages != input_pages)):
                raise AssertionError("a lease must hold ceil(input_length / page_size) pages in each pool after acquire")
            matched, reused = plan.matched_token_length, plan.reuse_token_length
            out["requests"] += 1
            out["input_tokens"] += n_in
            out["acquired"] += 1
            out["manager_calls"] += 2
            out["reused_tokens"] += reused + loaded * page_size
            out["matched_tokens"] += matched
            if extend is not None:
                out["reused_tokens_host"] = out.get("reused_tokens_host", 0) + loaded * page_size
            if spec:
                if matched > 0 and reused != matched - page_size:
                    raise AssertionError("a spec hit must replay exactly its boundary page")
                out["replayed_pages"] += (matched - reused) // page_size
                if reused > 0:
                    out["hits"] += 1
            pages = input_pages
            if grow > 0:
                out["grow_calls"] += 1
                out["manager_calls"] += 1
                if grown:
                    pages += grow
                else:
                    out["grow_failures"] += 1
            blocks = 0
            if published is not None:
                out["publish_calls"] += 1
                out["manager_calls"] += 1
                blocks = published.published_base_full_block_count
                if published.status == published_ok:
                    out["published_new"] += 1
                else:
                    out["published_existing"] += 1
            out["lease_pages"] += pools * pages
            if spec:
                out["lease_base_pages"] += pages
                out["lease_draft_pages"] += pages
            out["published_blocks"] += blocks
            out["pages_touched"] += pools * pages + blocks
            if sample_peak:
                peak = max(peak, manager.metadata_bytes)

        _finish(manager, out, capacities, peak)
        if extend is not None:
            host = manager.host_tier.metrics  # type: ignore[union-attr]
            out.setdefault("reused_tokens_host", 0)
            out.update(host_written_blocks=host.written_blocks, host_dropped_blocks=host.dropped_blocks)
        if spec:
            out["draft_capacity_pages"] = capacity_pages
        out["request_ns"] = request_ns
        out["acquire_ns"] = acquire_ns
        out["op_ns"] = op_ns
    finally:
        manager.close()
    return out


def _nearest_rank_us(ns: Sequence[int], q: float) -> float:
    """The q-quantile of call times in microseconds, nearest rank (as tools/bench/bench_manager.cpp computes it)."""
    ordered = sorted(ns)
    return ordered[int(q * (len(ordered) - 1) + 0.5)] * 1e-3 if ordered else 0.0


def replay_vanilla(requests: Sequence[Request], hashes: list[np.ndarray], page_size: int, capacity_pages: int,
                   max_records: int, sample_peak: bool = True, eviction_policy: str = "lru",
                   cold: ColdLoop | None = None, host_tier_pages: int = 0) -> dict[str, Any]:
    """One pass of acquire / grow / publish / release over every request. Only the manager calls are timed."""
    return _replay_paged(requests, hashes, page_size, capacity_pages, max_records, sample_peak, spec=False,
                         eviction_policy=eviction_policy, cold=cold, host_tier_pages=host_tier_pages)


def _chained_digest(hasher: Hasher, hashes: np.ndarray, length: int, page_size: int, tail: np.ndarray) -> Any:
    """The exact-prefix digest at ``length`` from the request's chained full-block hashes and its tokens
    ``[length // P * P, length)`` (``tail``)."""
    full, rest = divmod(length, page_size)
    parent = hashes[full - 1] if full else None
    return parent if rest == 0 else hasher.hash_block(parent, tail)


def replay_hybrid(requests: Sequence[Request], hashes: Sequence[np.ndarray], page_size: int, capacity_pages: int,
                  max_records: int, *, snapshot_slots: int, hasher: Hasher,
                  candidate_cap: int = DEFAULT_HYBRID_CANDIDATES, exact_digests: Sequence[np.ndarray] | None = None,
                  sample_peak: bool = True, eviction_policy: str = "lru") -> dict[str, Any]:
    """One pass of the hybrid protocol (attention + recurrent, a checkpoint at every prompt end). The manager
    calls and the exact-prefix digests are timed apart; expanding the digests' tokens is not timed."""
    capacities = ResourceDemand(base_kv_pages=capacity_pages, recurrent_snapshot_slots=snapshot_slots,
                                partial_kv_snapshot_slots=snapshot_slots)
    manager = ContextCacheManager(page_size, capacities, max_records, eviction_policy)
    perf = time.perf_counter_ns
    out: dict[str, Any] = dict(requests=0, acquired=0, insufficient_capacity=0, grow_calls=0, grow_failures=0, publish_calls=0,
               published_new=0, published_existing=0, manager_calls=0, input_tokens=0, reused_tokens=0,
               matched_tokens=0, lease_pages=0, published_blocks=0, pages_touched=0, hits=0,
               candidate_lengths_offered=0, candidates_tried=0, digests=0, digest_tokens=0, reserve_calls=0,
               snapshot_pressure_skips=0)
    digest_hi = digest_lo = 0
    request_ns = [0] * len(requests)
    request_digest_ns = [0] * len(requests)
    peak = 0
    acquired_ok = AcquireStatus.ACQUIRED
    published_ok = PublishStatus.PUBLISHED
    gc.collect()
    try:
        for i, (r, h) in enumerate(zip(requests, hashes)):
            n = r.input_length
            input_pages = _ceil_div(n, page_size)
            grow = _ceil_div(n + r.output_length, page_size) - input_pages  # a hybrid lease holds input_pages

            t0 = perf()
            lengths = manager.hybrid_candidate_lengths(n, h)
            t1 = perf()
            tried = lengths[:candidate_cap] if candidate_cap else lengths
            digest_lengths = tried + [n] if n > 0 else tried
            tails = [expand_range(r.hash_ids, length // page_size * page_size, length) for length in digest_lengths]
            t2 = perf()
            candidates = [HybridCheckpointCandidate(length, _chained_digest(hasher, h, length, page_size, tail))
                          for length, tail in zip(tried, tails)]
            published_digest = _chained_digest(hasher, h, n, page_size, tails[-1]) if n > 0 else None
            t3 = perf()

            out["requests"] += 1
            out["input_tokens"] += n
            out["manager_calls"] += 1  # hybrid_candidate_lengths
            out["candidate_lengths_offered"] += len(lengths)
            out["candidates_tried"] += len(tried)
            out["digests"] += len(digest_lengths)
            out["digest_tokens"] += sum(t.shape[0] for t in tails)
            for c in candidates:
                digest_hi += int(c.exact_prefix_digest[0])
                digest_lo += int(c.exact_prefix_digest[1])
            if published_digest is not None:
                digest_hi += int(published_digest[0])
                digest_lo += int(published_digest[1])
                if exact_digests is not None and not np.array_equal(published_digest, exact_digests[i]):
                    raise AssertionError("the chained exact-prefix digest differs from hash_exact_prefix")
            request_digest_ns[i] = t3 - t2

            t4 = perf()
            result = manager.acquire_hybrid(candidates, h, n, True)
            lease = result.lease
            if lease is None:
                t5 = perf()
                request_ns[i] = (t1 - t0) + (t5 - t4)
                out["manager_calls"] += 1
                out["insufficient_capacity"] += 1
                continue
            manager.release_restored_hybrid_snapshots(lease)
            grown = manager.grow_base_pages(lease, grow) if grow > 0 else True
            reservation = published = None
            if n > 0:
                reservation = manager.reserve_hybrid_snapshots(lease, n % page_size != 0)
                if reservation is not None:
                    published = manager.publish_hybrid(lease, h, HybridCheckpointKey(published_digest, n), reservation)
                    manager.retire_hybrid_snapshot_reservation(lease, reservation)
            lease.close()
            t5 = perf()

            request_ns[i] = (t1 - t0) + (t5 - t4)
            plan = result.plan
            if result.status != acquired_ok or plan.bound_base_page_count + plan.demand.base_kv_pages != input_pages:
                raise AssertionError("a hybrid lease with attention must hold ceil(input_length / page_size) pages")
            out["acquired"] += 1
            out["manager_calls"] += 3  # acquire + release restored + release
            out["reused_tokens"] += plan.reuse_token_length
            out["matched_tokens"] += plan.matched_token_length
            if plan.reuse_token_length > 0:
                out["hits"] += 1
            pages = input_pages
            if grow > 0:
                out["grow_calls"] += 1
                out["manager_calls"] += 1
                if grown:
                    pages += grow
                else:
                    out["grow_failures"] += 1
            if n > 0:
                out["reserve_calls"] += 1
                out["manager_calls"] += 1
                if reservation is None:
                    out["snapshot_pressure_skips"] += 1
            blocks = 0
            if published is not None:
                out["publish_calls"] += 1
                out["manager_calls"] += 2  # publish + retire
                blocks = published.published_base_full_block_count
                if published.status == published_ok:
                    out["published_new"] += 1
                else:
                    out["published_existing"] += 1
            out["lease_pages"] += pages
            out["published_blocks"] += blocks
            out["pages_touched"] += pages + blocks
            if sample_peak:
                peak = max(peak, manager.metadata_bytes)

        _finish(manager, out, capacities, peak)
        out["snapshot_slots"] = snapshot_slots
        out["digest_sum_hi"] = str(digest_hi & _MASK64)
        out["digest_sum_lo"] = str(digest_lo & _MASK64)
        out["request_ns"] = request_ns
        out["request_digest_ns"] = request_digest_ns
    finally:
        manager.close()
    return out


def replay_spec(requests: Sequence[Request], hashes: list[np.ndarray], page_size: int, capacity_pages: int,
                max_records: int, sample_peak: bool = True, eviction_policy: str = "lru",
                cold: ColdLoop | None = None, host_tier_pages: int = 0) -> dict[str, Any]:
    """One pass of the EAGLE protocol: paired base + draft pools of the same size. Only manager calls are timed."""
    return _replay_paged(requests, hashes, page_size, capacity_pages, max_records, sample_peak, spec=True,
                         eviction_policy=eviction_policy, cold=cold, host_tier_pages=host_tier_pages)


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _sig(x: float) -> float:
    """Round like the C++ side's %.6g, so that both print the same derived figures."""
    return float(f"{x:.6g}")


def _best_of(repeat: int, run: Any) -> dict[str, Any]:
    """One mode's bounded replay ``repeat`` times: the figures must repeat. The first pass's timings are the
    headline (each request served once); the hot ones keep each request's fastest pass."""
    best: Any = None  # the first pass's dict (None before it)
    hot: list[int] = []
    hot_digest: list[int] = []
    for pass_no in range(repeat):
        r = run(pass_no)
        if best is None:
            best = r
            hot = list(r["request_ns"])
            hot_digest = list(r.get("request_digest_ns", ()))
            continue
        for k in ("reused_tokens", "pages_touched", "evicted_records", "metadata_bytes", "snapshot_pressure_skips",
                  "digest_sum_hi", "digest_sum_lo"):
            if r.get(k) != best.get(k):
                raise AssertionError("the replay is not deterministic")
        hot = [min(x, y) for x, y in zip(hot, r["request_ns"])]
        if "request_digest_ns" in r:
            hot_digest = [min(x, y) for x, y in zip(hot_digest, r["request_digest_ns"])]
    best["manager_ns"] = sum(best["request_ns"])
    best["digest_ns"] = sum(best.get("request_digest_ns", ()))
    best["hot_manager_ns"] = sum(hot)
    best["hot_digest_ns"] = sum(hot_digest)
    return cast("dict[str, Any]", best)


def run_page_size(requests: Sequence[Request], page_size: int, *, mode: str = "vanilla",
                  capacity_blocks: int | None = None, max_records: int = DEFAULT_MAX_RECORDS, key: str = DEFAULT_KEY,
                  repeat: int = 5, upper_bound: bool = True, snapshot_slots: int | None = None,
                  hybrid_candidates: int = DEFAULT_HYBRID_CANDIDATES, eviction_policy: str = "lru") -> dict[str, Any]:
    """The benchmark at one page size in one mode: hashing phase, bounded replay, upper-bound replay."""
    return run_modes(requests, page_size, [mode], capacity_blocks=capacity_blocks, max_records=max_records, key=key,
                     repeat=repeat, upper_bound=upper_bound, snapshot_slots=snapshot_slots,
                     hybrid_candidates=hybrid_candidates, eviction_policy=eviction_policy)[0]


def run_modes(requests: Sequence[Request], page_size: int, modes: Sequence[str] = MODES, *,
              capacity_blocks: int | None = None, max_records: int = DEFAULT_MAX_RECORDS, key: str = DEFAULT_KEY,
              repeat: int = 5, upper_bound: bool = True, snapshot_slots: int | None = None,
              hybrid_candidates: int = DEFAULT_HYBRID_CANDIDATES, eviction_policy: str = "lru",
              cold_bytes: int | None = None, host_tier_pages: int = 0) -> list[dict[str, Any]]:
    """The benchmark at one page size: one hashing phase, then per mode (in the order vanilla, hybrid, spec) the
    bounded replay and the upper-bound replay; one result dict per mode. ``cold_bytes``: the cache-cold loop
    instead (vanilla and spec; no hashing phase, each request hashed in its mode's loop, a sweep of that many
    bytes between two requests, repeat 1, no hot figures)."""
    if page_size <= 0 or TRACE_BLOCK % page_size:
        raise ValueError(f"page size {page_size} does not divide {TRACE_BLOCK}")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown} (vanilla, hybrid or spec)")
    modes = [m for m in MODES if m in modes]
    if cold_bytes is not None:
        if "hybrid" in modes:
            raise ValueError("the cold loop runs the vanilla and spec modes (not hybrid)")
        if not 64 <= cold_bytes <= 1 << 40:
            raise ValueError("cold_bytes out of range (64 to 2**40)")
        repeat = 1
    if hybrid_candidates < 0:
        raise ValueError("hybrid_candidates must be >= 0 (0 = every candidate length)")
    repeat = max(1, repeat)
    distinct = len({h for r in requests for h in r.hash_ids})
    trace_blocks = sum(len(r.hash_ids) for r in requests)
    max_request_tokens = max((r.input_length + r.output_length for r in requests), default=0)
    if capacity_blocks is None:
        capacity_blocks = distinct // 2
    if snapshot_slots is None:
        snapshot_slots = max(1, len(requests) // 2)
    pages_per_block = TRACE_BLOCK // page_size
    capacity_pages = capacity_blocks * pages_per_block
    want_hybrid = "hybrid" in modes

    hasher = Hasher("sha256", key.encode("utf-8"))
    perf = time.perf_counter_ns
    hashes: list[np.ndarray] = []
    exact_digests: list[np.ndarray] = []
    hash_request_ns: list[Any] = [None] * len(requests)  # the first pass: the headline
    hot_hash_request_ns: list[Any] = [None] * len(requests)  # the fastest pass
    results = []
    cold = ColdLoop(hasher, cold_bytes) if cold_bytes is not None else None
    try:
        for i, r in enumerate(requests if cold is None else ()):  # cold: hashed in each mode's loop
            tokens = expand_tokens(r.hash_ids, r.input_length)
            for pass_no in range(repeat):
                t0 = perf()
                h = hasher.hash_full_blocks(tokens, page_size)
                t = perf() - t0
                if pass_no == 0:
                    hash_request_ns[i] = hot_hash_request_ns[i] = t
                else:
                    hot_hash_request_ns[i] = min(t, hot_hash_request_ns[i])
                if pass_no == 0:
                    hashes.append(h)
                elif not np.array_equal(h, hashes[i]):
                    raise AssertionError("hashing is not deterministic")
            if want_hybrid:  # untimed reference for the chained digests
                exact_digests.append(hasher.hash_exact_prefix(tokens, page_size))
        def sum_hashes() -> tuple[int, int, int, int, int, int]:
            hashed_blocks = sum(h.shape[0] for h in hashes)
            all_hashes = np.concatenate(hashes) if hashes else np.empty((0, 2), dtype=np.uint64)
            sum_hi = int(all_hashes[:, 0].sum(dtype=np.uint64)) if hashed_blocks else 0
            sum_lo = int(all_hashes[:, 1].sum(dtype=np.uint64)) if hashed_blocks else 0
            return (sum(hash_request_ns), sum(hot_hash_request_ns), hashed_blocks, hashed_blocks * page_size, sum_hi,
                    sum_lo)

        if cold is None:
            hash_ns, hot_hash_ns, hashed_blocks, hashed_tokens, sum_hi, sum_lo = sum_hashes()
        else:
            hashes = [np.empty((0, 2), dtype=np.uint64)] * len(requests)

        for mode in modes:
            def run_once(base_pages: int, slots: int, sample_peak: bool, check: bool, mode: str = mode) -> dict[str, Any]:
                loop = cold if check else None  # the upper bound replays the cold loop's hashes, hot
                if mode == "vanilla":
                    return replay_vanilla(requests, hashes, page_size, base_pages, max_records, sample_peak,
                                          eviction_policy, loop, host_tier_pages)
                if mode == "spec":
                    return replay_spec(requests, hashes, page_size, base_pages, max_records, sample_peak,
                                       eviction_policy, loop, host_tier_pages)
                return replay_hybrid(requests, hashes, page_size, base_pages, max_records, snapshot_slots=slots,
                                     hasher=hasher, candidate_cap=hybrid_candidates,
                                     exact_digests=exact_digests if check else None, sample_peak=sample_peak,
                                     eviction_policy=eviction_policy)

            run = _best_of(repeat, lambda pass_no: run_once(capacity_pages, snapshot_slots, pass_no == 0, pass_no == 0))
            if cold is not None:  # this mode's own hashing, in its loop
                hash_request_ns = hot_hash_request_ns = list(cold.hash_ns)
                hash_ns, hot_hash_ns, hashed_blocks, hashed_tokens, sum_hi, sum_lo = sum_hashes()

            bound = None
            bound_capacity = bound_slots = 0
            if upper_bound:
                bound_capacity = distinct * pages_per_block + _ceil_div(max_request_tokens, page_size) + 1
                bound_slots = len(requests) + 2
                while True:
                    if bound_capacity > 2**31 - 1:
                        raise ValueError("upper-bound capacity exceeds INT32_MAX pages")
                    bound = run_once(bound_capacity, bound_slots if mode == "hybrid" else 0, False, False)
                    if (bound["evicted_records"] == 0 and bound["insufficient_capacity"] == 0
                            and bound.get("snapshot_pressure_skips", 0) == 0):
                        break
                    bound_capacity *= 2
                    bound_slots *= 2

            results.append(_result(mode, run, bound, page_size=page_size, repeat=repeat, distinct=distinct,
                                   trace_blocks=trace_blocks, capacity_blocks=capacity_blocks,
                                   max_records=max_records, hashed_tokens=hashed_tokens, hashed_blocks=hashed_blocks,
                                   sum_hi=sum_hi, sum_lo=sum_lo, hash_ns=hash_ns, hot_hash_ns=hot_hash_ns,
                                   bound_capacity=bound_capacity,
                                   bound_slots=bound_slots, hybrid_candidates=hybrid_candidates,
                                   eviction_policy=eviction_policy, cold_bytes=cold_bytes,
                                   host_tier_pages=host_tier_pages if mode != "hybrid" else 0))
    finally:
        hasher.close()
    return results


def _result(mode: str, run: dict[str, Any], bound: dict[str, Any] | None, *, page_size: int, repeat: int, distinct: int,
            trace_blocks: int, capacity_blocks: int, max_records: int, hashed_tokens: int, hashed_blocks: int,
            sum_hi: int, sum_lo: int, hash_ns: int, hot_hash_ns: int, bound_capacity: int, bound_slots: int,
            hybrid_candidates: int, eviction_policy: str = "lru", cold_bytes: int | None = None,
            host_tier_pages: int = 0) -> dict[str, Any]:
    """One mode's result: the same keys, in the same order, as the C++ benchmark prints."""
    hybrid, spec = mode == "hybrid", mode == "spec"
    # retention: the C++ benchmark's --retention (none by default); this half publishes without specs.
    res: dict[str, Any] = {"page_size": page_size, "mode": mode, "eviction_policy": eviction_policy,
                           "retention": "none", "loop": "hot" if cold_bytes is None else "cold"}
    if cold_bytes is not None:
        res["cold_bytes"] = cold_bytes
    if host_tier_pages:
        res["host_tier_pages"] = host_tier_pages
    res.update({"repeat": repeat, "requests": run["requests"], "distinct_blocks": distinct,
                "trace_blocks": trace_blocks, "capacity_blocks": capacity_blocks,
                "capacity_pages": run["capacity_pages"]})
    if spec:
        res["draft_capacity_pages"] = run["draft_capacity_pages"]
    if hybrid:
        res["snapshot_slots"] = run["snapshot_slots"]
        res["hybrid_candidate_cap"] = hybrid_candidates
    res.update({"max_records": max_records, "input_tokens": run["input_tokens"], "hashed_tokens": hashed_tokens,
                "hashed_blocks": hashed_blocks, "hash_sum_hi": str(sum_hi), "hash_sum_lo": str(sum_lo)})
    if hybrid:
        for k in ("candidate_lengths_offered", "candidates_tried", "digests", "digest_tokens", "digest_sum_hi",
                  "digest_sum_lo"):
            res[k] = run[k]
    for k in ("acquired", "insufficient_capacity", "grow_calls", "grow_failures"):
        res[k] = run[k]
    if hybrid:
        res["reserve_calls"] = run["reserve_calls"]
        res["snapshot_pressure_skips"] = run["snapshot_pressure_skips"]
    for k in ("publish_calls", "published_new", "published_existing", "manager_calls", "reused_tokens",
              "matched_tokens"):
        res[k] = run[k]
    if mode != "vanilla":
        res["hits"] = run["hits"]
    if spec:
        res["replayed_pages"] = run["replayed_pages"]
    if "reused_tokens_host" in run:
        for k in ("reused_tokens_host", "host_written_blocks", "host_dropped_blocks"):
            res[k] = run[k]
    res["hit_rate"] = _sig(_ratio(run["reused_tokens"], run["input_tokens"]))
    if bound is not None:
        res["upper_bound_reused_tokens"] = bound["reused_tokens"]
        res["upper_bound_hit_rate"] = _sig(_ratio(bound["reused_tokens"], bound["input_tokens"]))
        res["upper_bound_capacity_pages"] = bound_capacity
        if hybrid:
            res["upper_bound_snapshot_slots"] = bound_slots
        res["upper_bound_cached_pages"] = bound["cached_pages"]
        if spec:
            res["upper_bound_cached_draft_pages"] = bound["cached_draft_pages"]
    res["lease_pages"] = run["lease_pages"]
    if spec:
        res["lease_base_pages"] = run["lease_base_pages"]
        res["lease_draft_pages"] = run["lease_draft_pages"]
    for k in ("published_blocks", "pages_touched", "evicted_records", "superseded_records", "trimmed_records",
              "reclaimed_base_pages"):
        res[k] = run[k]
    if spec:
        res["reclaimed_draft_pages"] = run["reclaimed_draft_pages"]
    if hybrid:
        res["reclaimed_recurrent_snapshots"] = run["reclaimed_recurrent_snapshots"]
        res["reclaimed_partial_kv_snapshots"] = run["reclaimed_partial_kv_snapshots"]
    for k in ("records", "base_index_entries", "cached_pages"):
        res[k] = run[k]
    if spec:
        res["cached_draft_pages"] = run["cached_draft_pages"]
    if hybrid:
        res["cached_recurrent_snapshots"] = run["cached_recurrent_snapshots"]
        res["cached_partial_kv_snapshots"] = run["cached_partial_kv_snapshots"]
    res["metadata_bytes"] = run["metadata_bytes"]
    res["metadata_bytes_per_cached_block"] = _sig(_ratio(run["metadata_bytes"], run["cached_pages"]))
    if spec:
        res["metadata_bytes_per_cached_page"] = _sig(_ratio(run["metadata_bytes"],
                                                            run["cached_pages"] + run["cached_draft_pages"]))
    res["peak_metadata_bytes"] = run["peak_metadata_bytes"]
    hash_s, manager_s, digest_s = hash_ns * 1e-9, run["manager_ns"] * 1e-9, run["digest_ns"] * 1e-9
    res["hash_seconds"] = _sig(hash_s)
    if hybrid:
        res["digest_seconds"] = _sig(digest_s)
    res["manager_seconds"] = _sig(manager_s)
    if "acquire_ns" in run:  # vanilla and spec: the acquire tail and where the time goes (first pass)
        for name, q in (("acquire_p50_us", 0.5), ("acquire_p99_us", 0.99), ("acquire_max_us", 1.0)):
            res[name] = _sig(_nearest_rank_us(run["acquire_ns"], q))
        res["manager_seconds_by_operation"] = {op: _sig(t * 1e-9) for op, t in
                                               zip(("acquire", "grow", "publish", "release"), run["op_ns"])}
    res["hash_ns_per_token"] = _sig(_ratio(hash_ns, hashed_tokens))
    if hybrid:
        res["digest_ns_per_token"] = _sig(_ratio(run["digest_ns"], hashed_tokens))
        res["digest_ns_per_digest"] = _sig(_ratio(run["digest_ns"], run["digests"]))
    res["manager_ns_per_page_touched"] = _sig(_ratio(run["manager_ns"], run["pages_touched"]))
    res["manager_ns_per_call"] = _sig(_ratio(run["manager_ns"], run["manager_calls"]))
    res["manager_requests_per_second"] = _sig(_ratio(run["requests"], manager_s))
    res["requests_per_second"] = _sig(_ratio(run["requests"], hash_s + digest_s + manager_s))
    # hot: each request's fastest of the --repeat passes (caches warm from the identical passes before); the cold
    # loop has none
    if cold_bytes is not None:
        return res
    res["hot_hash_ns_per_token"] = _sig(_ratio(hot_hash_ns, hashed_tokens))
    if hybrid:
        res["hot_digest_ns_per_token"] = _sig(_ratio(run["hot_digest_ns"], hashed_tokens))
    res["hot_manager_ns_per_page_touched"] = _sig(_ratio(run["hot_manager_ns"], run["pages_touched"]))
    res["hot_manager_ns_per_call"] = _sig(_ratio(run["hot_manager_ns"], run["manager_calls"]))
    res["hot_requests_per_second"] = _sig(_ratio(run["requests"],
                                                 (hot_hash_ns + run["hot_digest_ns"] + run["hot_manager_ns"]) * 1e-9))
    return res


def _table(results: Sequence[dict[str, Any]]) -> str:
    rows = [("page size", "page_size", "{}"), ("mode", "mode", "{}"),
            ("requests/s (incl. hashing)", "requests_per_second", "{:,.0f}"),
            ("manager ns / page touched", "manager_ns_per_page_touched", "{:.1f}"),
            ("  hot (fastest of repeats)", "hot_manager_ns_per_page_touched", "{:.1f}"),
            ("manager ns / call", "manager_ns_per_call", "{:,.0f}"),
            ("hashing ns / token", "hash_ns_per_token", "{:.2f}"),
            ("+ digest ns / token", "digest_ns_per_token", "{:.3f}"), ("hit rate", "hit_rate", "{:.4f}"),
            ("upper bound", "upper_bound_hit_rate", "{:.4f}"), ("evicted records", "evicted_records", "{:,}"),
            ("superseded records", "superseded_records", "{:,}"),
            ("snapshot pressure skips", "snapshot_pressure_skips", "{:,}"),
            ("replayed pages", "replayed_pages", "{:,}"),
            ("metadata B / cached block", "metadata_bytes_per_cached_block", "{:.1f}"),
            ("metadata B / cached page", "metadata_bytes_per_cached_page", "{:.1f}")]
    lines = []
    for label, key, fmt in rows:
        cells = [fmt.format(r[key]) if key in r else "-" for r in results]
        lines.append(f"{label:<28}" + "".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def _call_table(calls: dict[str, Any]) -> str:
    setup = calls["python_call_setup"]
    lines = [f"ns per call through Python (a {setup['blocks']}-block request of page size {setup['page_size']} "
             "that hits; C++ work included):"]
    lines += [f"  {op:<26}{ns:>10,.0f}" for op, ns in calls["python_call_ns"].items()]
    return "\n".join(lines)


def _modes(values: Sequence[str] | None) -> list[str]:
    if not values:
        return list(MODES)
    modes = [m for v in values for m in v.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {', '.join(unknown)} (vanilla, hybrid or spec)")
    return [m for m in MODES if m in modes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="ctxcache bench", description=__doc__.split("\n\n")[0])
    positive = int_range(1, INT32_MAX)
    parser.add_argument("--trace", default=None, help="Mooncake JSONL trace (default: $CTXCACHE_TRACE)")
    parser.add_argument("--requests", type=positive, default=None, help="replay only the first N requests")
    parser.add_argument("--page-size", type=int_range(1, TRACE_BLOCK), action="append", dest="page_sizes",
                        help=f"page size, a divisor of the trace's {TRACE_BLOCK}-token blocks (repeatable; default 16 "
                             f"and 128)")
    parser.add_argument("--mode", action="append", dest="modes",
                        help="vanilla, hybrid or spec (repeatable or comma separated; default all three)")
    parser.add_argument("--capacity-blocks", type=positive, default=None,
                        help="base (and spec draft) pool capacity in 512-token blocks (default: half the distinct "
                             "blocks)")
    parser.add_argument("--max-records", type=positive, default=DEFAULT_MAX_RECORDS,
                        help=f"cache record limit (default {DEFAULT_MAX_RECORDS:,})")
    parser.add_argument("--snapshot-slots", type=positive, default=None,
                        help="hybrid recurrent and partial-KV snapshot slots, each (default: half the requests)")
    parser.add_argument("--hybrid-candidates", type=int_range(0, INT32_MAX), default=DEFAULT_HYBRID_CANDIDATES,
                        help="hybrid: try the K longest candidate lengths (default 8; 0 = all)")
    parser.add_argument("--key", default=DEFAULT_KEY, help="SHA-256 hashing key")
    parser.add_argument("--repeat", type=int_range(1, 1000), default=5,
                        help="identical passes; each request counts with its fastest (default 5, at most 1000)")
    parser.add_argument("--no-upper-bound", action="store_true", help="skip the unbounded-cache replay")
    parser.add_argument("--eviction-policy", choices=("lru", "lru-trim"), default="lru",
                        help="the manager's capacity eviction (default lru, the reference's whole-record LRU)")
    parser.add_argument("--host-tier-pages", type=int_range(0, INT32_MAX), default=0, metavar="N",
                        help="vanilla and spec: a host tier of N pages (write-back, bookkeeping) beside the pool; "
                             "its extension of each hit is timed with the acquire (docs/TIERS.md)")
    parser.add_argument("--cold", action="store_true",
                        help="the cache-cold loop: each request expanded, hashed and served on its own, a sweep of "
                             "--cold-bytes between two requests (vanilla and spec, default both; --repeat 1)")
    parser.add_argument("--cold-bytes", type=int_range(64, 1 << 40), default=None,
                        help="the cold loop's sweep in bytes (default twice the last-level cache of cpu0)")
    parser.add_argument("--call-batches", type=int_range(1, 100_000), default=DEFAULT_CALL_BATCHES,
                        help="python_call_ns: batches of the per-call loop (default 40; the median is reported)")
    parser.add_argument("--call-batch-size", type=int_range(1, 100_000), default=DEFAULT_CALL_BATCH_SIZE,
                        help="python_call_ns: requests per batch (default 500)")
    parser.add_argument("--calls", action="store_true",
                        help="measure only python_call_ns, at the first --page-size (default 16); no trace needed")
    parser.add_argument("--table", action="store_true", help="also print a readable table on stderr")
    args = parser.parse_args(list(argv) if argv is not None else None)
    page_sizes = args.page_sizes or [16, 128]
    if any(TRACE_BLOCK % p for p in page_sizes):
        parser.error(f"argument --page-size: must divide {TRACE_BLOCK} (the trace's block size), got "
                     f"{', '.join(str(p) for p in page_sizes if TRACE_BLOCK % p)}")
    calls = call_overhead(page_sizes[0] if args.page_sizes else 16, batches=args.call_batches,
                          batch_size=args.call_batch_size, key=args.key)
    if args.calls:
        print(json.dumps({"path": "python", **calls}))
        if args.table:
            print(_call_table(calls), file=sys.stderr)
        return 0
    try:
        modes = _modes(args.modes if args.modes or not args.cold else ["vanilla,spec"])
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    if args.cold and "hybrid" in modes:
        parser.error("argument --cold: the cold loop runs the vanilla and spec modes (not hybrid)")
    if args.cold_bytes is not None and not args.cold:
        parser.error("argument --cold-bytes: needs --cold")
    cold_bytes = (args.cold_bytes or default_cold_bytes()) if args.cold else None

    trace = Path(args.trace) if args.trace else default_trace()
    if trace is None:
        parser.error("no trace: pass --trace PATH (or set $CTXCACHE_TRACE)")
    if not trace.is_file():
        parser.error(f"trace {trace} not found (pass --trace)")
    requests = load_trace(trace, args.requests)
    results: list[dict[str, Any]] = []
    interrupted = False
    try:  # Ctrl-C: the page sizes finished so far, marked as interrupted, and exit 130
        for p in page_sizes:
            results += run_modes(requests, p, modes, capacity_blocks=args.capacity_blocks,
                                 max_records=args.max_records, key=args.key, repeat=args.repeat,
                                 upper_bound=not args.no_upper_bound, snapshot_slots=args.snapshot_slots,
                                 hybrid_candidates=args.hybrid_candidates, eviction_policy=args.eviction_policy,
                                 cold_bytes=cold_bytes, host_tier_pages=args.host_tier_pages)
    except KeyboardInterrupt:
        interrupted = True
    print(json.dumps({"path": "python", "trace": str(trace), "hash": "sha256-keyed", "interrupted": interrupted,
                      **calls, "results": results}))
    if args.table:
        print(_table(results), file=sys.stderr)
        print(_call_table(calls), file=sys.stderr)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
