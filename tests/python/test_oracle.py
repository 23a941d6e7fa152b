"""The offline optimum (ctxcache.cli.oracle): hand-checked cases where Belady keeps what LRU drops, the leaf rule, a
request larger than the cache, the unbounded case equal to the replay's upper bound, and never below the
manager's LRU on the built-in workload; the replay and sweep report it."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from ctxcache.cli import replay, workload
from ctxcache.cli.oracle import offline_optimum, prepare_pages


def _prepared(prompts, page_size=4, outputs=None):
    requests = [workload.WorkloadRequest(len(p), (outputs or [0] * len(prompts))[i], f"request {i}",
                                         np.asarray(p, dtype=np.int32)) for i, p in enumerate(prompts)]
    prepared = replay.prepare(requests, replay.Settings(page_size=page_size))
    return prepared, prepare_pages(prepared.requests, prepared.hashes)


def test_belady_keeps_what_lru_drops():
    a, b, c = list(range(1, 10)), list(range(20, 29)), list(range(40, 49))  # 9 tokens: 2 full pages + 1 partial
    prepared, pages = _prepared([a, b, c, a])
    # Capacity 6: a and b publish 2 pages each; c needs 3 and forces an eviction. LRU drops a (least recent),
    # Belady drops b (never needed again), so the last request reuses a's 2 full pages: 8 of 36 prompt tokens.
    best = offline_optimum(pages, 4, 6)
    assert (best.reused_tokens, best.prompt_tokens, best.rejected, best.grow_failures) == (8, 36, 0, 0)
    lru = replay.replay_bookkeeping(prepared, replay.Settings(page_size=4), 6)
    assert sum(lru.reused) == 0
    assert best.hit_rate == pytest.approx(8 / 36)


def test_only_leaves_are_evicted_so_a_kept_page_keeps_its_prefix():
    # x and y share their first page; z forces evictions; x again needs both its pages.
    x, y, z = [1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 30, 31, 32, 33, 34], list(range(50, 59))
    _, pages = _prepared([x, y, z, x])
    r = offline_optimum(pages, 4, 6)
    # Cached after x, y: x1 (shared), x2, y2 = 3 pages; z needs 3 with 3 free: nothing is evicted and x reuses
    # both pages. At capacity 5 one page must go: y2 (a leaf, never used again), never x1 under x2.
    assert r.reused_tokens == 4 + 8 and r.evicted_pages == 0
    r5 = offline_optimum(pages, 4, 5)
    assert r5.reused_tokens == 4 + 8 and r5.evicted_pages >= 1


def test_a_request_larger_than_the_cache_is_rejected_and_a_failed_growth_skipped():
    _, pages = _prepared([list(range(1, 30)), list(range(1, 6))], outputs=[0, 40])
    r = offline_optimum(pages, 4, 6)  # 29 tokens need 8 pages; the second grows by 10 pages beyond 6
    assert r.rejected == 1 and r.grow_failures == 1 and r.reused_tokens == 0
    with pytest.raises(ValueError):
        offline_optimum(pages, 4, 0)


def test_unbounded_equals_the_upper_bound_and_it_never_trails_lru_on_the_builtin_workload():
    settings = replay.Settings(page_size=16)
    prepared = replay.prepare(workload.builtin_workload(0), settings)
    pages = prepare_pages(prepared.requests, prepared.hashes)
    bound, _ = replay.upper_bound(prepared, 16)
    assert offline_optimum(pages, 16, 10 * prepared.distinct_pages).reused_tokens == bound
    minimum = replay.minimum_capacity_pages(prepared.requests, settings)
    for fraction in (0.2, 0.4, 0.7):
        cap = max(minimum, int(prepared.distinct_pages * fraction))
        lru = sum(replay.replay_bookkeeping(prepared, settings, cap).reused)
        assert offline_optimum(pages, 16, cap).reused_tokens >= lru


def test_replay_and_sweep_report_the_optimum(tmp_path, capsys):
    assert replay.replay_main(["--bookkeeping-only", "--json", "--no-progress", "--capacity-tokens", "20000"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["hit_rate"] <= r["optimum_hit_rate"] <= r["upper_bound_hit_rate"]
    assert replay.replay_main(["--bookkeeping-only", "--json", "--no-progress", "--no-optimum"]) == 0
    assert json.loads(capsys.readouterr().out)["optimum_hit_rate"] is None
    assert replay.sweep_main(["--points", "8", "--out-dir", str(tmp_path), "--json", "--no-progress"]) == 0
    capsys.readouterr()
    with open(tmp_path / "ctxcache-sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(float(row["hit_rate"]) <= float(row["optimum_hit_rate"]) + 1e-9 for row in rows)
    assert any(float(row["optimum_hit_rate"]) > float(row["hit_rate"]) for row in rows)  # room to win
