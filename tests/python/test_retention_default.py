"""With the default retention spec, every eviction decision is plain LRU's (issue 29): the built-in workload and the
public synthetic trace served through one manager whose publications carry no spec and one whose publications
carry a spec that ranks as the default (priority 35 over the whole prompt for 10^6 s, stored on every record), under
both policies and a capacity that evicts heavily. After every request both hold the same records in the same
eviction order (same victims, same order, same trims), and their metrics agree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ctxcache
from ctxcache import AcquireStatus, RetentionRange, RetentionSpec
from ctxcache.cli.workload import builtin_workload, read_trace, trace_workload

PAGE = 16
TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake_synthetic_trace.jsonl"
# At the default priority for longer than any run: stored on every record (the retention code runs: block ranges,
# expiries scheduled, ranks computed), yet every rank stays the default's. (A 35 range without a duration is the
# default itself, stored as nothing.)
EXPLICIT_DEFAULT = RetentionSpec([RetentionRange(0, None, ctxcache.retention.DEFAULT_PRIORITY, duration=1e6)])


def distinct_blocks(prompts: list[np.ndarray]) -> int:
    seen: set[bytes] = set()
    for h in prompts:
        seen.update(bytes(row) for row in h)
    return len(seen)


def replay_side_by_side(prompts: list[np.ndarray], lengths: list[int], policy: str) -> tuple[int, int]:
    pages = max(8, distinct_blocks(prompts) // 20)  # 5% of the distinct blocks
    capacities = ctxcache.ResourceDemand(base_kv_pages=pages)
    with ctxcache.ContextCacheManager(PAGE, capacities, 4096, policy) as plain, \
            ctxcache.ContextCacheManager(PAGE, capacities, 4096, policy) as retained:
        for i, (h, n) in enumerate(zip(prompts, lengths)):
            records = []
            for manager, spec in ((plain, None), (retained, EXPLICIT_DEFAULT)):
                result = manager.acquire_vanilla(h, n)
                if result.status != AcquireStatus.ACQUIRED:
                    records.append(None)
                    continue
                with result.lease as lease:
                    records.append(manager.publish(lease, h, n, retention=spec).record if len(h) else None)
            assert records[0] == records[1], f"request {i}"
            assert plain.records.lru() == retained.records.lru(), f"request {i}: the eviction order differs"
        assert plain.metrics == retained.metrics
        retained.check_invariants()
        assert retained.retention_metrics.evicted_records_by_priority == (
            {35: plain.metrics.evicted_records} if plain.metrics.evicted_records else {})
        return plain.metrics.evicted_records, plain.metrics.trimmed_records


@pytest.mark.parametrize("policy", ["lru", "lru-trim"])
def test_the_builtin_workload_evicts_the_same_records_in_the_same_order(policy):
    workload = builtin_workload()
    prompts = [ctxcache.hash_full_blocks(r.tokens(), PAGE) for r in workload]
    evicted, trimmed = replay_side_by_side(prompts, [r.input_length for r in workload], policy)
    assert evicted > 50
    assert (trimmed > 0) == (policy == "lru-trim")


@pytest.mark.skipif(not TRACE.exists(), reason=f"the public synthetic trace is not beside the repository ({TRACE})")
@pytest.mark.parametrize("policy", ["lru", "lru-trim"])
def test_the_synthetic_trace_evicts_the_same_records_in_the_same_order(policy):
    workload = trace_workload(read_trace(TRACE, 800))
    prompts = [ctxcache.hash_full_blocks(r.tokens(), PAGE) for r in workload]
    evicted, _ = replay_side_by_side(prompts, [r.input_length for r in workload], policy)
    assert evicted > 100
