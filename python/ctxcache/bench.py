"""``ctxcache bench``: replay a Mooncake-format trace through the manager from Python (the public API only).

This is the Python half of the manager benchmark; ``tools/bench/bench_manager.cpp`` is the C++ half and
``tools/bench_manager`` runs both and checks that every non-timing figure agrees. The definitions are shared and
must stay identical (see the C++ file's header comment for the full list):

- token expansion: hash id ``h`` becomes ``int32(splitmix64(h * 512 + j) mod 32000)`` for ``j`` in 0..511 (all
  arithmetic mod 2**64); a request's tokens are the concatenation over its ``hash_ids``, cut to ``input_length``;
- per request (file order, stably sorted by timestamp): keyed SHA-256 ``hash_full_blocks`` (timed apart), then
  ``acquire_vanilla``; ``grow_base_pages`` to ``ceil((input_length + output_length) / P)`` pages when that adds
  any; ``publish(lease, hashes, input_length)`` when there is a full block; ``lease.close()`` (release);
- capacity: ``floor(distinct 512-token blocks / 2) * (512 / P)`` base pages, 1,000,000 records; the upper bound
  is the same replay with a pool that nothing evicts from;
- figures: hit rate = sum(reuse_token_length) / sum(input_length); pages touched = lease pages after growth +
  published blocks; manager time = acquire + grow + publish + release; metadata bytes per cached block =
  ``metadata_bytes / (capacity - free base pages)`` after the last request; each request is hashed ``--repeat``
  times back to back and the replay runs ``--repeat`` times: every request counts with its fastest repetition
  (they do identical work; this filters the noise of a shared machine).

Usage: ``ctxcache bench [--trace PATH] [--requests N] [--page-size P]... [--capacity-blocks B]
[--max-records R] [--key STRING] [--repeat K] [--no-upper-bound] [--table]``. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .enums import AcquireStatus, PublishStatus, ResourceType
from .hashing import Hasher
from .manager import ContextCacheManager, ResourceDemand

TRACE_BLOCK = 512
DEFAULT_KEY = "ctxcache-bench-key"
DEFAULT_MAX_RECORDS = 1_000_000
_REPO_TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mooncake_synthetic_trace.jsonl"


@dataclass(frozen=True)
class Request:
    timestamp: int
    input_length: int
    output_length: int
    hash_ids: tuple


def default_trace() -> Path:
    return Path(os.environ.get("CTXCACHE_TRACE", str(_REPO_TRACE)))


def load_trace(path: str | os.PathLike, limit: int | None = None) -> list[Request]:
    """The first ``limit`` requests of a Mooncake JSONL trace, stably sorted by timestamp."""
    requests: list[Request] = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if limit is not None and len(requests) >= limit:
                break
            if not line.strip():
                continue
            o = json.loads(line)
            r = Request(int(o["timestamp"]), int(o["input_length"]), int(o["output_length"]),
                        tuple(int(h) for h in o["hash_ids"]))
            if r.input_length < 0 or r.output_length < 0 or len(r.hash_ids) * TRACE_BLOCK < r.input_length:
                raise ValueError(f"trace line {line_no}: lengths do not match hash_ids")
            requests.append(r)
    requests.sort(key=lambda r: r.timestamp)
    return requests


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
    return (splitmix64(x) % np.uint64(32000)).astype(np.int32)


# ---- the replay -------------------------------------------------------------------------------------------------

def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def replay(requests: Sequence[Request], hashes: Sequence[np.ndarray], page_size: int, capacity_pages: int,
           max_records: int, sample_peak: bool = True) -> dict:
    """One pass of acquire / grow / publish / release over every request. Only the manager calls are timed."""
    manager = ContextCacheManager(page_size, ResourceDemand(base_kv_pages=capacity_pages), max_records)
    perf = time.perf_counter_ns
    out = dict(requests=0, acquired=0, insufficient_capacity=0, grow_calls=0, grow_failures=0, publish_calls=0,
               published_new=0, published_existing=0, manager_calls=0, input_tokens=0, reused_tokens=0,
               matched_tokens=0, lease_pages=0, published_blocks=0, pages_touched=0)
    request_ns = [0] * len(requests)
    peak = 0
    acquired_ok = AcquireStatus.ACQUIRED
    gc.collect()
    try:
        for i, (r, h) in enumerate(zip(requests, hashes)):
            n_in = r.input_length
            input_pages = _ceil_div(n_in, page_size)
            grow = _ceil_div(n_in + r.output_length, page_size) - input_pages  # a vanilla lease holds input_pages
            publishes = h.shape[0] > 0

            t0 = perf()
            result = manager.acquire_vanilla(h, n_in)
            lease = result.lease
            if lease is None:
                t1 = perf()
                request_ns[i] = t1 - t0
                out["requests"] += 1
                out["input_tokens"] += n_in
                out["manager_calls"] += 1
                out["insufficient_capacity"] += 1
                continue
            grown = manager.grow_base_pages(lease, grow) if grow > 0 else True
            published = manager.publish(lease, h, n_in) if publishes else None
            lease.close()
            t1 = perf()

            request_ns[i] = t1 - t0
            plan = result.plan
            if result.status != acquired_ok or plan.bound_base_page_count + plan.demand.base_kv_pages != input_pages:
                raise AssertionError("a vanilla lease must hold ceil(input_length / page_size) pages after acquire")
            out["requests"] += 1
            out["input_tokens"] += n_in
            out["acquired"] += 1
            out["manager_calls"] += 2
            out["reused_tokens"] += plan.reuse_token_length
            out["matched_tokens"] += plan.matched_token_length
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
                if published.status == PublishStatus.PUBLISHED:
                    out["published_new"] += 1
                else:
                    out["published_existing"] += 1
            out["lease_pages"] += pages
            out["published_blocks"] += blocks
            out["pages_touched"] += pages + blocks
            if sample_peak:
                peak = max(peak, manager.metadata_bytes)

        manager.check_invariants()
        metrics = manager.metrics
        out["capacity_pages"] = capacity_pages
        out["cached_pages"] = capacity_pages - manager.pools.free_count(ResourceType.BASE_KV_PAGE)
        out["records"] = len(manager.records)
        out["base_index_entries"] = len(manager.base_index)
        out["metadata_bytes"] = manager.metadata_bytes
        out["peak_metadata_bytes"] = max(peak, out["metadata_bytes"])
        out["evicted_records"] = metrics.evicted_records
        out["reclaimed_base_pages"] = metrics.reclaimed_base_kv_pages
        out["request_ns"] = request_ns
    finally:
        manager.close()
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _sig(x: float) -> float:
    """Round like the C++ side's %.6g, so that both print the same derived figures."""
    return float(f"{x:.6g}")


def run_page_size(requests: Sequence[Request], page_size: int, *, capacity_blocks: int | None = None,
                  max_records: int = DEFAULT_MAX_RECORDS, key: str = DEFAULT_KEY, repeat: int = 5,
                  upper_bound: bool = True) -> dict:
    """The benchmark at one page size: hashing phase, bounded replay, upper-bound replay; one result dict."""
    if page_size <= 0 or TRACE_BLOCK % page_size:
        raise ValueError(f"page size {page_size} does not divide {TRACE_BLOCK}")
    repeat = max(1, repeat)
    distinct = len({h for r in requests for h in r.hash_ids})
    trace_blocks = sum(len(r.hash_ids) for r in requests)
    max_request_tokens = max((r.input_length + r.output_length for r in requests), default=0)
    if capacity_blocks is None:
        capacity_blocks = distinct // 2
    pages_per_block = TRACE_BLOCK // page_size
    capacity_pages = capacity_blocks * pages_per_block

    hasher = Hasher("sha256", key.encode("utf-8"))
    perf = time.perf_counter_ns
    hashes: list[np.ndarray] = []
    hash_request_ns = [None] * len(requests)
    try:
        for i, r in enumerate(requests):
            tokens = expand_tokens(r.hash_ids, r.input_length)
            for pass_no in range(repeat):
                t0 = perf()
                h = hasher.hash_full_blocks(tokens, page_size)
                t = perf() - t0
                hash_request_ns[i] = t if pass_no == 0 else min(t, hash_request_ns[i])
                if pass_no == 0:
                    hashes.append(h)
                elif not np.array_equal(h, hashes[i]):
                    raise AssertionError("hashing is not deterministic")
    finally:
        hasher.close()
    hash_ns = sum(hash_request_ns)
    hashed_blocks = sum(h.shape[0] for h in hashes)
    hashed_tokens = hashed_blocks * page_size
    all_hashes = np.concatenate(hashes) if hashes else np.empty((0, 2), dtype=np.uint64)
    sum_hi = int(all_hashes[:, 0].sum(dtype=np.uint64)) if hashed_blocks else 0
    sum_lo = int(all_hashes[:, 1].sum(dtype=np.uint64)) if hashed_blocks else 0
    del all_hashes

    run = None
    for pass_no in range(repeat):
        r = replay(requests, hashes, page_size, capacity_pages, max_records, sample_peak=pass_no == 0)
        if run is None:
            run = r
            continue
        for k in ("reused_tokens", "pages_touched", "evicted_records", "metadata_bytes"):
            if r[k] != run[k]:
                raise AssertionError("the replay is not deterministic")
        run["request_ns"] = [min(a, b) for a, b in zip(run["request_ns"], r["request_ns"])]
    run["manager_ns"] = sum(run["request_ns"])

    bound = None
    bound_capacity = 0
    if upper_bound:
        bound_capacity = distinct * pages_per_block + _ceil_div(max_request_tokens, page_size) + 1
        while True:
            if bound_capacity > 2**31 - 1:
                raise ValueError("upper-bound capacity exceeds INT32_MAX pages")
            bound = replay(requests, hashes, page_size, bound_capacity, max_records, sample_peak=False)
            if bound["evicted_records"] == 0 and bound["insufficient_capacity"] == 0:
                break
            bound_capacity *= 2

    res = {
        "page_size": page_size, "repeat": repeat, "requests": run["requests"], "distinct_blocks": distinct,
        "trace_blocks": trace_blocks, "capacity_blocks": capacity_blocks, "capacity_pages": capacity_pages,
        "max_records": max_records, "input_tokens": run["input_tokens"], "hashed_tokens": hashed_tokens,
        "hashed_blocks": hashed_blocks, "hash_sum_hi": str(sum_hi), "hash_sum_lo": str(sum_lo),
    }
    for k in ("acquired", "insufficient_capacity", "grow_calls", "grow_failures", "publish_calls", "published_new",
              "published_existing", "manager_calls", "reused_tokens", "matched_tokens"):
        res[k] = run[k]
    res["hit_rate"] = _sig(_ratio(run["reused_tokens"], run["input_tokens"]))
    if bound is not None:
        res["upper_bound_reused_tokens"] = bound["reused_tokens"]
        res["upper_bound_hit_rate"] = _sig(_ratio(bound["reused_tokens"], bound["input_tokens"]))
        res["upper_bound_capacity_pages"] = bound_capacity
        res["upper_bound_cached_pages"] = bound["cached_pages"]
    for k in ("lease_pages", "published_blocks", "pages_touched", "evicted_records", "reclaimed_base_pages", "records",
              "base_index_entries", "cached_pages", "metadata_bytes"):
        res[k] = run[k]
    res["metadata_bytes_per_cached_block"] = _sig(_ratio(run["metadata_bytes"], run["cached_pages"]))
    res["peak_metadata_bytes"] = run["peak_metadata_bytes"]
    hash_s, manager_s = hash_ns * 1e-9, run["manager_ns"] * 1e-9
    res["hash_seconds"] = _sig(hash_s)
    res["manager_seconds"] = _sig(manager_s)
    res["hash_ns_per_token"] = _sig(_ratio(hash_ns, hashed_tokens))
    res["manager_ns_per_page_touched"] = _sig(_ratio(run["manager_ns"], run["pages_touched"]))
    res["manager_ns_per_call"] = _sig(_ratio(run["manager_ns"], run["manager_calls"]))
    res["manager_requests_per_second"] = _sig(_ratio(run["requests"], manager_s))
    res["requests_per_second"] = _sig(_ratio(run["requests"], hash_s + manager_s))
    return res


def _table(results: Sequence[dict]) -> str:
    rows = [("page size", "page_size", "{}"), ("requests/s (incl. hashing)", "requests_per_second", "{:,.0f}"),
            ("manager ns / page touched", "manager_ns_per_page_touched", "{:.1f}"),
            ("manager ns / call", "manager_ns_per_call", "{:,.0f}"),
            ("hashing ns / token", "hash_ns_per_token", "{:.2f}"), ("hit rate", "hit_rate", "{:.4f}"),
            ("upper bound", "upper_bound_hit_rate", "{:.4f}"), ("evicted records", "evicted_records", "{:,}"),
            ("metadata B / cached block", "metadata_bytes_per_cached_block", "{:.1f}")]
    lines = []
    for label, key, fmt in rows:
        cells = [fmt.format(r[key]) if key in r else "-" for r in results]
        lines.append(f"{label:<28}" + "".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxcache bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default=None, help="Mooncake JSONL trace (default: $CTXCACHE_TRACE or "
                                                      "../shared/data/mooncake_synthetic_trace.jsonl)")
    parser.add_argument("--requests", type=int, default=None, help="replay only the first N requests")
    parser.add_argument("--page-size", type=int, action="append", dest="page_sizes",
                        help="page size (repeatable; default 16 and 128)")
    parser.add_argument("--capacity-blocks", type=int, default=None,
                        help="base pool capacity in 512-token blocks (default: half the distinct blocks)")
    parser.add_argument("--max-records", type=int, default=DEFAULT_MAX_RECORDS)
    parser.add_argument("--key", default=DEFAULT_KEY, help="SHA-256 hashing key")
    parser.add_argument("--repeat", type=int, default=5,
                        help="identical passes; each request counts with its fastest (default 5)")
    parser.add_argument("--no-upper-bound", action="store_true", help="skip the unbounded-cache replay")
    parser.add_argument("--table", action="store_true", help="also print a readable table on stderr")
    args = parser.parse_args(list(argv) if argv is not None else None)

    trace = Path(args.trace) if args.trace else default_trace()
    if not trace.is_file():
        parser.error(f"trace {trace} not found (pass --trace)")
    requests = load_trace(trace, args.requests)
    page_sizes = args.page_sizes or [16, 128]
    results = [run_page_size(requests, p, capacity_blocks=args.capacity_blocks, max_records=args.max_records,
                             key=args.key, repeat=args.repeat, upper_bound=not args.no_upper_bound)
               for p in page_sizes]
    print(json.dumps({"path": "python", "trace": str(trace), "hash": "sha256-keyed", "results": results}))
    if args.table:
        print(_table(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
