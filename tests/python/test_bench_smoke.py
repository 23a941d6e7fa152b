"""Smoke test of the manager benchmark (python/ctxcache/bench.py) on a tiny synthetic trace: the figures it
reports are self-consistent. No timing is asserted (benchmarks are not tests)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxcache import bench

MASK = 2**64 - 1


def _splitmix64_reference(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_token_expansion_matches_the_definition():
    ids = [0, 7, 2**40 + 3]
    tokens = bench.expand_tokens(ids, 2 * 512 + 100)
    assert tokens.dtype == np.int32 and tokens.shape == (1124,)
    for pos in (0, 1, 511, 512, 1023, 1024, 1123):
        h, j = ids[pos // 512], pos % 512
        assert tokens[pos] == _splitmix64_reference(h * 512 + j) % 32000
    assert bench.expand_tokens([5], 0).shape == (0,)


@pytest.fixture
def trace(tmp_path):
    """50 requests: 10 conversations of 5 turns each, every turn extending its conversation's prefix."""
    rng = np.random.default_rng(7)
    lines, next_id, t = [], 0, 0
    conversations = [[] for _ in range(10)]
    for turn in range(5):
        for c in range(10):
            new_blocks = int(rng.integers(1, 4))
            conversations[c] += list(range(next_id, next_id + new_blocks))
            next_id += new_blocks
            ids = conversations[c]
            input_length = (len(ids) - 1) * 512 + int(rng.integers(1, 513))
            lines.append({"timestamp": t, "input_length": input_length, "output_length": int(rng.integers(1, 300)),
                          "hash_ids": ids})
            t += int(rng.integers(0, 3))
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in lines))
    return path


@pytest.mark.parametrize("page_size", [16, 128])
def test_bench_figures_are_self_consistent(trace, page_size):
    requests = bench.load_trace(trace)
    assert len(requests) == 50
    r = bench.run_page_size(requests, page_size, repeat=2)

    assert r["requests"] == 50 and r["capacity_pages"] == r["distinct_blocks"] // 2 * (512 // page_size)
    assert r["acquired"] + r["insufficient_capacity"] == r["requests"]
    assert r["insufficient_capacity"] == 0 and r["grow_failures"] == 0
    assert r["manager_calls"] == 2 * r["acquired"] + r["grow_calls"] + r["publish_calls"]
    assert r["published_new"] + r["published_existing"] == r["publish_calls"]
    assert r["hashed_tokens"] == r["hashed_blocks"] * page_size
    assert r["published_blocks"] == r["hashed_blocks"]  # every request publishes all its full blocks
    assert r["pages_touched"] == r["lease_pages"] + r["published_blocks"]
    assert r["reused_tokens"] <= r["matched_tokens"] <= r["input_tokens"]
    assert r["reused_tokens"] % page_size == 0
    assert r["hit_rate"] == pytest.approx(r["reused_tokens"] / r["input_tokens"], rel=1e-5)
    assert 0 < r["hit_rate"] <= r["upper_bound_hit_rate"] < 1
    assert r["evicted_records"] > 0  # half the distinct blocks: capacity pressure
    assert r["records"] == r["published_new"] - r["evicted_records"]
    assert r["cached_pages"] == r["base_index_entries"] <= r["capacity_pages"]
    assert r["metadata_bytes_per_cached_block"] == pytest.approx(r["metadata_bytes"] / r["cached_pages"], rel=1e-5)
    assert r["metadata_bytes"] <= r["peak_metadata_bytes"]
    assert r["manager_seconds"] > 0 and r["hash_seconds"] > 0


def test_main_prints_one_json_object(trace, capsys):
    assert bench.main(["--trace", str(trace), "--requests", "20", "--page-size", "16", "--repeat", "1",
                       "--no-upper-bound"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == "python" and [r["page_size"] for r in out["results"]] == [16]
    assert out["results"][0]["requests"] == 20 and "upper_bound_hit_rate" not in out["results"][0]
