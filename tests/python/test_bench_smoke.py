"""Smoke test of the manager benchmark (python/ctxcache/bench/manager.py) on a tiny synthetic trace: the figures it
reports are self-consistent. No timing is asserted (benchmarks are not tests)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxcache.bench import manager as bench

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
    for _turn in range(5):
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
    assert r["retention"] == "none"  # the C++ half names its --retention; tools/bench_manager compares the two
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
    # The headline is one pass (each request once); hot keeps each request's fastest pass, so it is never slower.
    assert r["manager_ns_per_page_touched"] == pytest.approx(r["manager_seconds"] * 1e9 / r["pages_touched"], rel=1e-5)
    assert 0 < r["hot_manager_ns_per_page_touched"] <= r["manager_ns_per_page_touched"] * (1 + 1e-5)
    assert 0 < r["hot_hash_ns_per_token"] <= r["hash_ns_per_token"] * (1 + 1e-5)
    assert r["hot_requests_per_second"] >= r["requests_per_second"] * (1 - 1e-5)


@pytest.mark.parametrize("page_size", [16, 128])
def test_hybrid_figures_are_self_consistent(trace, page_size):
    requests = bench.load_trace(trace)
    r = bench.run_page_size(requests, page_size, mode="hybrid", repeat=2)

    assert r["mode"] == "hybrid" and r["snapshot_slots"] == 25 and r["hybrid_candidate_cap"] == 8
    assert r["acquired"] == r["requests"] == 50 and r["insufficient_capacity"] == 0 and r["grow_failures"] == 0
    assert r["candidates_tried"] <= min(r["candidate_lengths_offered"], 8 * r["requests"])
    assert r["digests"] == r["candidates_tried"] + r["requests"]  # + the publication digest of every prompt
    assert r["digest_tokens"] < r["digests"] * page_size
    assert r["reserve_calls"] == r["acquired"] and r["snapshot_pressure_skips"] == 0
    assert r["publish_calls"] == r["reserve_calls"] - r["snapshot_pressure_skips"]
    assert r["published_new"] + r["published_existing"] == r["publish_calls"]
    assert r["manager_calls"] == (r["requests"] + 3 * r["acquired"] + r["grow_calls"] + r["reserve_calls"]
                                  + 2 * r["publish_calls"])
    assert r["published_blocks"] == r["hashed_blocks"]  # a checkpoint publishes floor(n / P) full blocks
    assert r["pages_touched"] == r["lease_pages"] + r["published_blocks"]
    assert r["reused_tokens"] == r["matched_tokens"] and r["hits"] > 0  # exact checkpoints: reuse = match
    assert 0 < r["hit_rate"] <= r["upper_bound_hit_rate"] < 1
    assert r["records"] == r["published_new"] - r["evicted_records"]
    assert r["cached_recurrent_snapshots"] == r["records"] <= r["snapshot_slots"]
    assert r["cached_partial_kv_snapshots"] <= r["cached_recurrent_snapshots"]
    assert r["digest_seconds"] > 0 and r["manager_seconds"] > 0

    uncapped = bench.run_page_size(requests, page_size, mode="hybrid", repeat=1, hybrid_candidates=0)
    assert uncapped["candidates_tried"] == uncapped["candidate_lengths_offered"]
    assert uncapped["upper_bound_hit_rate"] >= r["upper_bound_hit_rate"]  # unbounded: more candidates, more reuse


def test_chained_digests_are_exact_prefix_digests():
    hasher = bench.Hasher("sha256", bench.DEFAULT_KEY.encode())
    try:
        tokens = bench.expand_tokens([3, 9, 4], 1300)
        for page_size in (16, 128):
            hashes = hasher.hash_full_blocks(tokens, page_size)
            for length in (1, page_size - 1, page_size, page_size + 1, 512, 700, 1299, 1300):
                tail = bench.expand_range([3, 9, 4], length // page_size * page_size, length)
                np.testing.assert_array_equal(tail, tokens[length // page_size * page_size:length])
                np.testing.assert_array_equal(bench._chained_digest(hasher, hashes, length, page_size, tail),
                                              hasher.hash_exact_prefix(tokens[:length], page_size))
    finally:
        hasher.close()


@pytest.mark.parametrize("page_size", [16, 128])
def test_spec_figures_are_self_consistent(trace, page_size):
    requests = bench.load_trace(trace)
    r = bench.run_page_size(requests, page_size, mode="spec", repeat=2)

    assert r["mode"] == "spec" and r["draft_capacity_pages"] == r["capacity_pages"]
    assert r["acquired"] == r["requests"] == 50 and r["insufficient_capacity"] == 0 and r["grow_failures"] == 0
    assert r["manager_calls"] == 2 * r["acquired"] + r["grow_calls"] + r["publish_calls"]
    assert r["lease_base_pages"] == r["lease_draft_pages"] and r["lease_pages"] == 2 * r["lease_base_pages"]
    assert r["pages_touched"] == r["lease_pages"] + r["published_blocks"]
    assert r["published_blocks"] == r["hashed_blocks"]
    assert r["hits"] > 0 and r["replayed_pages"] >= r["hits"]  # a one-block match replays its only page
    assert r["reused_tokens"] == r["matched_tokens"] - page_size * r["replayed_pages"]
    assert 0 < r["hit_rate"] <= r["upper_bound_hit_rate"] < 1
    # A spec hit that the new record dominates is superseded (its last draft page is never bindable).
    assert r["evicted_records"] > 0 and r["superseded_records"] > 0
    assert r["records"] == r["published_new"] - r["evicted_records"] - r["superseded_records"]
    assert r["cached_draft_pages"] <= r["draft_capacity_pages"]
    assert r["metadata_bytes_per_cached_page"] == pytest.approx(
        r["metadata_bytes"] / (r["cached_pages"] + r["cached_draft_pages"]), rel=1e-5)


def test_call_overhead_times_every_call_of_a_request_that_hits():
    out = bench.call_overhead(page_size=16, blocks=3, batches=3, batch_size=20)
    calls, setup = out["python_call_ns"], out["python_call_setup"]
    assert list(calls) == list(bench.CALL_OPS) + ["request"]
    assert all(calls[op] >= 0 for op in bench.CALL_OPS) and calls["acquire_vanilla"] > 0
    assert calls["request"] == pytest.approx(sum(calls[op] for op in bench.CALL_OPS), rel=1e-5)
    assert setup == {"page_size": 16, "blocks": 3, "tokens": 48, "batches": 3, "batch_size": 20,
                     "clock_ns": setup["clock_ns"]} and setup["clock_ns"] >= 0
    with pytest.raises(ValueError):
        bench.call_overhead(blocks=1)


def test_main_prints_one_json_object(trace, capsys):
    assert bench.main(["--trace", str(trace), "--requests", "20", "--page-size", "16", "--repeat", "1",
                       "--no-upper-bound", "--call-batches", "1", "--call-batch-size", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == "python" and [r["page_size"] for r in out["results"]] == [16, 16, 16]
    assert out["python_call_setup"]["page_size"] == 16 and set(out["python_call_ns"]) == set(bench.CALL_OPS) | {
        "request"}
    assert [r["mode"] for r in out["results"]] == ["vanilla", "hybrid", "spec"]  # the default: every mode
    assert out["results"][0]["requests"] == 20 and "upper_bound_hit_rate" not in out["results"][0]
    assert bench.main(["--trace", str(trace), "--requests", "20", "--page-size", "128", "--repeat", "1",
                       "--mode", "spec,vanilla", "--no-upper-bound", "--call-batches", "1", "--call-batch-size",
                       "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["page_size"], r["mode"]) for r in out["results"]] == [(128, "vanilla"), (128, "spec")]
    assert bench.main(["--calls", "--page-size", "128", "--call-batches", "1", "--call-batch-size", "5"]) == 0
    out = json.loads(capsys.readouterr().out)  # no trace needed
    assert set(out) == {"path", "python_call_ns", "python_call_setup"} and out["python_call_setup"]["tokens"] == 256


@pytest.mark.parametrize("mode", ["vanilla", "spec"])
def test_cold_loop_agrees_with_the_hot_loop_on_every_non_timing_figure(trace, mode):
    """The cache-cold loop (issue 24 item 11) hashes each request in its own loop and sweeps a buffer between two
    requests: the same hashes, reuse, evictions and records as the hot loop, labelled cold, without hot figures."""
    requests = bench.load_trace(trace)
    hot = bench.run_modes(requests, 16, [mode], capacity_blocks=20, repeat=1)[0]
    cold = bench.run_modes(requests, 16, [mode], capacity_blocks=20, cold_bytes=1 << 16)[0]
    assert hot["loop"] == "hot" and cold["loop"] == "cold" and cold["cold_bytes"] == 1 << 16
    assert hot["evicted_records"] > 0 and hot["reused_tokens"] > 0  # the comparison covers eviction and reuse
    timings = {"hash_seconds", "manager_seconds", "hash_ns_per_token", "manager_ns_per_page_touched",
               "manager_ns_per_call", "manager_requests_per_second", "requests_per_second", "acquire_p50_us",
               "acquire_p99_us", "acquire_max_us", "manager_seconds_by_operation"}
    assert not [k for k in cold if k.startswith("hot_")]
    for k, v in hot.items():
        if k in timings or k in ("loop",) or k.startswith("hot_"):
            continue
        assert cold[k] == v, k
    assert set(cold) - set(hot) == {"cold_bytes"}
    assert cold["hash_seconds"] > 0 and cold["manager_seconds"] > 0


def test_cold_loop_refuses_hybrid_and_a_tiny_sweep(trace):
    requests = bench.load_trace(trace)
    with pytest.raises(ValueError, match="not hybrid"):
        bench.run_modes(requests, 16, ["hybrid"], cold_bytes=1 << 16)
    with pytest.raises(ValueError, match="cold_bytes"):
        bench.run_modes(requests, 16, ["vanilla"], cold_bytes=8)


def test_default_cold_bytes_is_twice_the_last_level_cache():
    llc = bench.last_level_cache_bytes()
    assert bench.default_cold_bytes() == 2 * (llc or 32 << 20)


def test_bench_with_a_host_tier_reuses_more_and_says_how_much(trace):
    requests = bench.load_trace(trace)
    alone, = bench.run_modes(requests, 16, ["vanilla"], capacity_blocks=4, repeat=1, upper_bound=False)
    tiered, = bench.run_modes(requests, 16, ["vanilla"], capacity_blocks=4, repeat=1, upper_bound=False,
                              host_tier_pages=4000)
    assert "reused_tokens_host" not in alone
    assert tiered["host_tier_pages"] == 4000
    assert tiered["host_written_blocks"] > 0 and tiered["reused_tokens_host"] > 0
    assert tiered["reused_tokens"] > alone["reused_tokens"]
    assert tiered["reused_tokens_host"] % 16 == 0 and tiered["reused_tokens_host"] <= tiered["reused_tokens"]
