"""Run inside a private network namespace (``unshare -n``) by test_kv_events_dynamo.py: ``ctxcache replay
--events`` against NVIDIA Dynamo's standalone KV indexer (``python -m dynamo.indexer``), the way a new user tries a
router against a workload. Prints one JSON line: per case, the blocks the indexer holds after the replay exited
(distinct block hashes of its dump), the blocks the replay's cache held at its end (its report), the distinct full
blocks of the workload (computed here from its tokens) and the replay's KV event report.

Cases (the built-in workload, page 16, a capacity that evicts nothing):
  listening  the indexer is up and registered before the replay starts: the replay waits for its subscription
             (ZMQ's slow joiner would otherwise lose every batch sent before the connection completed);
  late       the replay starts first with a replay endpoint; the indexer starts a second later and registers
             with both endpoints: the replay's wait for a first subscriber covers it, and a gap it notices is
             served by the replay socket."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from ctxcache.cli.workload import builtin_workload
from dynamo_indexer_scenario import dump_blocks, http, loopback_up, start_indexer, stop_indexer

PAGE = 16
MODEL = "ctxcache-replay"
CAPACITY_TOKENS = 4_000_000  # the built-in workload's distinct tokens are about 130k: nothing is evicted


def distinct_full_blocks() -> int:
    """Distinct full blocks of the built-in workload at PAGE: a block's identity is its whole prefix."""
    seen: set[int] = set()
    for request in builtin_workload(0):
        tokens = [int(t) for t in request.prompt]
        identity = 0
        for start in range(0, len(tokens) - len(tokens) % PAGE, PAGE):
            identity = hash((identity, tuple(tokens[start:start + PAGE])))
            seen.add(identity)
    return len(seen)


def register(replay_endpoint: str | None) -> None:
    body: dict[str, Any] = {"instance_id": 1, "endpoint": "tcp://127.0.0.1:5557", "model_name": MODEL,
                            "block_size": PAGE}
    if replay_endpoint:
        body["replay_endpoint"] = replay_endpoint
    http("/register", body)


def settled_blocks(want: int) -> int:
    """The indexer applies events asynchronously: its count once it reaches `want` or stops moving (5 s)."""
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 5:
        got = dump_blocks()
        if got == want:
            return got
        if got != last:
            last, since = got, time.monotonic()
        time.sleep(0.1)
    return last


def replay_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "ctxcache.cli", "replay", "--page-size", str(PAGE), "--bookkeeping-only",
            "--capacity-tokens", str(CAPACITY_TOKENS), "--events", "tcp://*:5557", "--json", *extra]


def main() -> int:
    loopback_up()
    report: dict[str, Any] = {"workload_blocks": distinct_full_blocks(), "cases": {}}

    indexer = start_indexer()
    try:
        register(None)
        done = subprocess.run(replay_command(), capture_output=True, text=True, timeout=120)
        result = json.loads(done.stdout) if done.returncode == 0 else {}
        events = result.get("kv_events", {})
        report["cases"]["listening"] = {"rc": done.returncode, "stderr": done.stderr[-2000:], "events": events,
                                        "evicted_records": result.get("evicted_records"),
                                        "indexer": settled_blocks(events.get("cache_blocks", -1))}
    finally:
        report["cases"].setdefault("listening", {})["log"] = stop_indexer(indexer)[-3000:]

    replay = subprocess.Popen(replay_command("--events-replay", "tcp://*:5558"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    indexer = None
    try:
        time.sleep(1.0)
        indexer = start_indexer()
        register("tcp://127.0.0.1:5558")
        out, err = replay.communicate(timeout=120)
        result = json.loads(out) if replay.returncode == 0 else {}
        events = result.get("kv_events", {})
        report["cases"]["late"] = {"rc": replay.returncode, "stderr": err[-2000:], "events": events,
                                   "evicted_records": result.get("evicted_records"),
                                   "indexer": settled_blocks(events.get("cache_blocks", -1))}
    finally:
        if replay.poll() is None:
            replay.kill()
        if indexer is not None:
            report["cases"].setdefault("late", {})["log"] = stop_indexer(indexer)[-3000:]
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
