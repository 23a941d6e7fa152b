"""Run inside a private network namespace (``unshare -n``) by test_kv_events_dynamo.py: a manager with a host tier
(write-back) publishes its KV events to NVIDIA Dynamo's standalone indexer, whose answers split a prompt's match by
tier. Prints one JSON line: per step, what the indexer counts on the GPU and in its CPU tier for each probe prompt,
and what the cache holds on the device and in the tier.

Steps: A and B published (both on the device); C's publication needs the room and evicts A (write-back: A's blocks
go to the tier, reported with medium CPU, its device blocks removed); D evicts B (the 4-slot tier drops A's blocks,
leaf first, to hold B's, and reports the drops)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

import ctxcache
from dynamo_indexer_scenario import http, loopback_up, poll, start_indexer, stop_indexer

PAGE = 4
MODEL = "ctxcache-test"


def router_tiers(tokens: list[int]) -> dict[str, int]:
    answer = http("/query", {"token_ids": tokens, "model_name": MODEL})
    instance = answer.get("instances", {}).get("1", {})
    return {"gpu": int(instance.get("gpu", 0)), "cpu": int(instance.get("cpu", 0))}


def main() -> int:
    loopback_up()
    indexer = start_indexer()
    try:
        prompts = {  # 3 full blocks and a token each (4 pages with the partial one)
            "A": list(range(100, 113)),
            "B": list(range(200, 213)),
            "C": list(range(300, 321)),  # 5 full blocks + 1: 6 pages, the whole device
            "D": list(range(400, 421)),
        }
        report: dict[str, Any] = {"steps": []}
        with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=8), 8) as manager, \
                ctxcache.KvEventPublisher("tcp://*:5557") as publisher:
            manager.enable_kv_events()
            manager.attach_host_tier(4)  # write-back
            manager.attach_kv_event_publisher(publisher)
            http("/register", {"instance_id": 1, "endpoint": "tcp://127.0.0.1:5557", "model_name": MODEL,
                               "block_size": PAGE})
            time.sleep(1.0)  # its SUB connects before the first batch

            def publish(name: str) -> None:
                tokens = prompts[name]
                hashes = ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), PAGE)
                with manager.acquire_vanilla(hashes, len(tokens)).lease as lease:
                    manager.publish(lease, hashes, len(tokens), tokens=tokens)

            def cache(tokens: list[int]) -> dict[str, int]:
                hashes = ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), PAGE)
                device = manager.probe_vanilla(hashes, len(tokens) + 1).matched_token_length
                tier = manager.host_tier
                host = tier.probe_hit(hashes, len(tokens) + 1, device // PAGE) if tier is not None else 0
                return {"device": device, "tier": device + host * PAGE}

            def observe(step: str) -> None:
                publisher.flush(5.0)
                want = {name: cache(tokens) for name, tokens in prompts.items()}
                expect = {name: {"gpu": c["device"], "cpu": c["tier"]} for name, c in want.items()}
                got = poll(lambda: {name: router_tiers(tokens) for name, tokens in prompts.items()}, expect)
                report["steps"].append({"step": step, "router": got, "cache": expect,
                                        "tier": manager.host_tier.metrics.__dict__})

            publish("A")
            publish("B")
            observe("A and B on the device")
            publish("C")
            observe("C evicted A and B into the tier")
            publish("D")
            observe("D evicted C into the tier, which dropped A and B")
            report["publisher"] = publisher.stats.__dict__
    finally:
        log = stop_indexer(indexer)
    report["indexer_log_tail"] = log[-4000:]
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
