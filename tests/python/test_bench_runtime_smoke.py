"""Smoke test of the runtime benchmark's Python path (python/ctxcache/bench/runtime.py) on a tiny workload: the
figures it reports are self-consistent and its prompts are std::mt19937's. No timing is asserted (benchmarks are
not tests)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxcache.bench import runtime as bench_runtime


def test_the_generator_is_std_mt19937():
    # std::mt19937(1)'s first draws, and the 10,000th draw of a default-seeded (5489) one, which the C++ standard
    # fixes ([rand.predef]).
    rng = bench_runtime.Mt19937(1)
    assert [rng() for _ in range(3)] == [1791095845, 4282876139, 3093770124]
    assert int(bench_runtime.Mt19937(5489).draws(10000)[-1]) == 4123659995
    split = bench_runtime.Mt19937(7)
    whole = bench_runtime.Mt19937(7).draws(10)
    np.testing.assert_array_equal(np.concatenate([split.draws(3), [split()], split.draws(6)]), whole)


def test_prompts_follow_the_definition():
    inputs = bench_runtime.prompts(5, seed=1)
    rng = bench_runtime.Mt19937(1)
    systems = [rng.draws(1024) % 32000 for _ in range(8)]
    for full in inputs:
        system = systems[rng() % 8]
        own = 64 + rng() % 960
        assert full.dtype == np.int32 and full.shape == (1024 + own + 1,) and full[-1] == bench_runtime.LOOKAHEAD
        np.testing.assert_array_equal(full[:1024], system)
        np.testing.assert_array_equal(full[1024:-1], rng.draws(own) % 32000)
    assert bench_runtime.prompts(5, seed=2)[0][0] != inputs[0][0]


@pytest.mark.parametrize("page_size", [16, 128])
def test_figures_are_self_consistent(page_size):
    r = bench_runtime.run(requests=40, page_size=page_size, steps=3 * page_size, batch=4)
    inputs = bench_runtime.prompts(40)
    assert r["path"] == "python" and r["requests"] == 40 and r["page_size"] == page_size
    assert r["prompt_tokens"] == sum(t.shape[0] - 1 for t in inputs)
    assert r["prompt_token_sum"] == sum(int(t[:-1].sum()) for t in inputs)
    # Reuse is whole pages of the shared system prompts (run() asserts the manager path reused as much).
    assert 0 < r["reused_tokens"] < r["prompt_tokens"] and r["reused_tokens"] % page_size == 0
    assert r["reused_tokens"] <= (40 - 1) * 1024 + 40 * 1023
    assert r["runtime_admitted"] == 40 and 0 <= r["manager_grow_calls"] <= 40
    assert r["manager_grow_calls"] == sum(1 for t in inputs if (t.shape[0] - 1) % page_size == 0)
    assert r["decode_batch"] == 4
    assert r["decode_token_sum"] == sum(int(x.sum()) for x in bench_runtime.decode_prompts(4))
    # Committed lengths 200 .. 200 + steps - 1: a step crosses a page when it commits the first token of one.
    crossings = sum(1 for c in range(200, 200 + r["decode_steps"]) if (c + 1) % page_size == 1)
    assert r["decode_steps"] == 3 * page_size and r["decode_steps_without_crossing"] == r["decode_steps"] - crossings
    assert r["launches_per_capture"] == 1 and r["launches_per_restore"] == 1 and r["restore_happened"] is True
    assert r["launches_for_cold_zeroing"] >= 0
    assert r["breakdown_history_tokens"][0] == 201
    for key in ("manager_us_per_request", "runtime_us_per_request", "ns_per_sequence_step_without_crossing",
                "ns_per_sequence_step_all", "c_abi_ns_per_sequence_step_without_crossing", "marshal_ns_per_call"):
        assert r[key] > 0, key
    assert r["runtime_overhead_us_per_request"] == pytest.approx(
        r["runtime_us_per_request"] - r["manager_us_per_request"], abs=2e-3)


def test_main_prints_one_json_object(capsys):
    assert bench_runtime.main(["--requests", "10", "--steps", "20", "--batch", "2", "--no-breakdown"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 10 and out["decode_steps"] == 20 and out["decode_batch"] == 2
    assert "marshal_ns_per_call" not in out
    with pytest.raises(SystemExit):
        bench_runtime.main(["--requests", "0"])
