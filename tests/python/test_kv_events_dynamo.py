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


def test_dynamo_indexer_agrees_with_the_cache() -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(ctxcache.__file__).parents[1]),
                                                    env.get("PYTHONPATH")) if p)
    done = subprocess.run(["unshare", "-n", sys.executable, str(SCENARIO)], capture_output=True, text=True,
                          timeout=240, env=env)
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
    assert report["publisher"]["dropped_batches"] == 0
    assert report["publisher"]["replay_requests"] >= 1
