"""A real router reads ctxcache's KV events: NVIDIA Dynamo's standalone KV indexer (PyPI ai-dynamo-runtime),
started on loopback inside a private network namespace, registered with our PUB and replay endpoints and page
size, answers matched-token queries equal to what the cache holds after a late join (stores it missed, served by
replay when the next live batch shows the gap), an eviction, a clear and a store after the clear (dynamo_indexer_scenario.py runs the scenario)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ctxcache

SCENARIO = Path(__file__).with_name("dynamo_indexer_scenario.py")
REPLAY_SCENARIO = Path(__file__).with_name("dynamo_replay_scenario.py")
LORA_SCENARIO = Path(__file__).with_name("dynamo_lora_scenario.py")
TIER_SCENARIO = Path(__file__).with_name("dynamo_tier_scenario.py")


def _why_not() -> str | None:
    if not ctxcache.publisher_available():
        return "built without the ZMQ publisher (libzmq, msgpack-cxx)"
    if importlib.util.find_spec("dynamo") is None:
        return "ai-dynamo-runtime is not installed (pip install ai-dynamo-runtime==1.6.1)"
    if shutil.which("unshare") is None:
        return "no unshare(1) (util-linux)"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"cannot create a network namespace: {probe.stderr.decode().strip()} (needs root or user namespaces)"
    return None


def _run(scenario: Path) -> subprocess.CompletedProcess[str]:
    why = _why_not()
    if why:
        pytest.skip(why)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(ctxcache.__file__).parents[1]), str(scenario.parent),
                                                    env.get("PYTHONPATH")) if p)
    return subprocess.run(["unshare", "-n", sys.executable, str(scenario)], capture_output=True, text=True,
                          timeout=240, env=env)


def test_replay_events_reach_a_router_that_listens_or_comes_late() -> None:
    """`ctxcache replay --events` against the real indexer (dynamo_replay_scenario.py): one registered before the
    replay starts, and one started a second after it with the replay endpoint. After the replay exits the indexer
    holds exactly the workload's distinct full blocks, which is what the replay's cache holds (it evicted nothing).
    Before the replay waited for a first subscriber, both held 0 blocks: every batch went out before the
    subscriber's connection completed."""
    done = _run(REPLAY_SCENARIO)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    workload = report["workload_blocks"]
    assert workload > 1000
    for name in ("listening", "late"):
        case = report["cases"][name]
        assert case["rc"] == 0, case["stderr"]
        events = case["events"]
        assert case["evicted_records"] == 0 and events["cache_blocks"] == workload, name
        assert events["subscribed"] is True and events["dropped"] == 0, name
        assert case["indexer"] == workload, f"{name}: {case['indexer']} of {workload}\n{case['log']}"


def test_dynamo_indexer_agrees_with_the_cache() -> None:
    done = _run(SCENARIO)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    steps = {s["step"]: s for s in report["steps"]}
    # What the cache holds, step by step (page 4; A = 3 blocks + a tail, B shares A's first two, C one block).
    assert [s["cache"] for s in report["steps"]] == [
        {"A": 12, "B": 12, "C": 4},
        {"A": 8, "B": 12, "C": 4},
        {"A": 0, "B": 0, "C": 0},
        {"A": 8, "B": 12, "C": 0},
    ], report["indexer_log_tail"]
    for name, step in steps.items():
        assert step["router"] == step["cache"], f"{name}: {step}\n{report['indexer_log_tail']}"
    assert report["dump_blocks_after_clear"] == 0  # clear() reached the router: its dump is empty
    assert report["dump_blocks_at_end"] == 3  # then B's three blocks
    assert report["publisher"]["dropped_batches"] == 0
    assert report["publisher"]["replay_requests"] >= 1


def test_dynamo_keeps_two_adapters_equal_token_blocks_apart() -> None:
    """The same 12 tokens published under adapter A, adapter B and the base model (dynamo_lora_scenario.py):
    Dynamo hashes each event's lora_name into its block keys, so a query under A matches A's blocks only, and
    evicting A's record takes A's match to 0 while B's and the base model's stay whole. Before events carried
    lora_name, all three were one chain of plain tokens to the router."""
    done = _run(LORA_SCENARIO)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["subscribed"] is True
    steps = {s["step"]: s for s in report["steps"]}
    assert steps["three publications"]["want"] == {"A": 12, "B": 12, "base": 12, "C": 0}
    for name, step in steps.items():
        assert step["router"] == step["want"], f"{name}: {step}\n{report['indexer_log_tail']}"
    assert report["dump_blocks"] == 9  # three chains of three blocks
    assert report["publisher"]["dropped_batches"] == 0


def test_dynamo_counts_the_host_tier_in_its_cpu_tier() -> None:
    """A manager with a 4-slot host tier (write-back) and its KV events (dynamo_tier_scenario.py): after each step
    the real indexer's per-tier answer equals the cache's: on the GPU what the device holds, in its CPU tier the
    device's chain extended by the tier's (the tier's blocks are reported with medium CPU after the device's
    removal, and its drops are reported too)."""
    done = _run(TIER_SCENARIO)
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    steps = report["steps"]
    assert [s["step"] for s in steps] == ["A and B on the device", "C evicted A and B into the tier",
                                          "D evicted C into the tier, which dropped A and B"]
    for step in steps:
        assert step["router"] == step["cache"], f"{step}\n{report['indexer_log_tail']}"
    # The tier was used: A and B in the CPU tier only, then dropped; C there after D evicted it.
    assert steps[1]["cache"]["B"] == {"gpu": 0, "cpu": 12}
    assert steps[2]["cache"]["C"]["gpu"] == 0 and steps[2]["cache"]["C"]["cpu"] > 0
    assert steps[2]["cache"]["A"] == {"gpu": 0, "cpu": 0} and steps[2]["tier"]["dropped_blocks"] > 0
