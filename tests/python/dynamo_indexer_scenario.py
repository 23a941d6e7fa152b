"""Run inside a private network namespace (``unshare -n``) by test_kv_events_dynamo.py: brings up loopback,
starts NVIDIA Dynamo's standalone KV indexer (``python -m dynamo.indexer``), publishes a ctxcache manager's KV
events to it, and prints one JSON line: per step, the matched-token counts the indexer answers for each probe
prompt and the counts the cache itself holds (its base index's leading hits times the page size).

Steps: stores before the indexer knows us, then a live store (the indexer sees the sequence gap and recovers the
missed batches through the replay socket), an eviction, a clear, a store after the clear."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np

import ctxcache

PAGE = 4
HTTP = "http://127.0.0.1:8090"
MODEL = "ctxcache-test"


def loopback_up() -> None:
    """ip link set lo up, without iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, struct.pack("16sH", b"lo", 0))[:18])[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 0x1))


def http(path: str, body: Any = None) -> Any:
    request = urllib.request.Request(HTTP + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read().decode() or "null")


def indexer_env() -> dict[str, str]:
    """The indexer is not ours to sanitize: under tools/test --sanitize it runs without the preloaded runtimes."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}


def start_indexer() -> subprocess.Popen[str]:
    """`python -m dynamo.indexer` on port 8090, once its HTTP API answers (at most 20 s, else RuntimeError)."""
    indexer = subprocess.Popen([sys.executable, "-m", "dynamo.indexer", "--port", "8090", "--threads", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=indexer_env())
    for _ in range(400):
        try:
            http("/dump")
            return indexer
        except OSError:
            time.sleep(0.05)
    indexer.kill()
    raise RuntimeError("the indexer did not come up in 20 s")


def stop_indexer(indexer: subprocess.Popen[str]) -> str:
    """Stops it; its log."""
    indexer.terminate()
    try:
        return indexer.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        indexer.kill()
        return indexer.communicate()[0]


def poll(read: Callable[[], Any], want: Any, seconds: float = 10.0) -> Any:
    """The indexer applies events asynchronously: read() until it equals `want`, at most `seconds`; the last value."""
    got = read()
    deadline = time.monotonic() + seconds
    while got != want and time.monotonic() < deadline:
        time.sleep(0.05)
        got = read()
    return got


def router_matched(tokens: list[int]) -> int:
    answer = http("/query", {"token_ids": tokens, "model_name": MODEL})
    return int(answer.get("scores", {}).get("1", {}).get("0", 0))


def dump_blocks() -> int:
    """Distinct blocks in the indexer's dump (its tree, as stored events)."""
    blocks: set[int] = set()
    for group in http("/dump").values():
        for entry in group.get("events", []):
            stored = entry.get("event", {}).get("data", {}).get("stored")
            if stored:
                blocks.update(int(b["block_hash"]) for b in stored["blocks"])
    return len(blocks)


def cache_matched(manager: ctxcache.ContextCacheManager, tokens: list[int]) -> int:
    hashes = ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), PAGE)
    blocks = 0
    for h in hashes:
        if manager.base_index.lookup(h) is None:
            break
        blocks += 1
    return blocks * PAGE


def main() -> int:
    loopback_up()
    indexer = start_indexer()
    try:
        prompts = {
            "A": list(range(100, 114)),
            "B": list(range(100, 108)) + [500, 501, 502, 503],
            "C": list(range(900, 904)),
        }
        report: dict[str, Any] = {"steps": []}
        with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=8), 8) as manager, \
                ctxcache.KvEventPublisher("tcp://*:5557", replay_endpoint="tcp://*:5558") as publisher:
            manager.enable_kv_events()
            manager.attach_kv_event_publisher(publisher)

            def publish(name: str) -> None:
                tokens = prompts[name]
                hashes = ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), PAGE)
                with manager.acquire_vanilla(hashes, len(tokens)).lease as lease:
                    manager.publish(lease, hashes, len(tokens), tokens=tokens)

            def observe(step: str) -> None:
                publisher.flush(5.0)
                want = {name: cache_matched(manager, tokens) for name, tokens in prompts.items()}
                got = poll(lambda: {name: router_matched(tokens) for name, tokens in prompts.items()}, want)
                report["steps"].append({"step": step, "router": got, "cache": want})

            publish("A")
            publish("B")
            # The indexer subscribes late: the batches so far come back through the replay socket.
            http("/register", {"instance_id": 1, "endpoint": "tcp://127.0.0.1:5557",
                               "replay_endpoint": "tcp://127.0.0.1:5558", "model_name": MODEL,
                               "block_size": PAGE})
            time.sleep(0.5)  # its SUB connects; what it missed stays missed until the next live batch
            # The next live batch shows the indexer a gap in the sequence numbers: it asks the replay socket for
            # the batches it missed (A and B) and gets them before C.
            publish("C")
            observe("late join: live store + replay")
            manager.evict_record(manager.records.lru()[0])  # A's record: its third block goes, B keeps two
            observe("eviction")
            manager.clear()
            observe("clear")
            report["dump_blocks_after_clear"] = dump_blocks()  # the router forgot every block
            publish("B")
            observe("store after clear")
            report["dump_blocks_at_end"] = dump_blocks()
            report["publisher"] = publisher.stats.__dict__
    finally:
        log = stop_indexer(indexer)
    report["indexer_log_tail"] = log[-4000:]
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
