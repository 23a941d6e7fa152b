"""Run inside a private network namespace (``unshare -n``) by test_kv_events_dynamo.py: NVIDIA Dynamo's standalone
KV indexer keeps two LoRA adapters' equal-token blocks apart when ctxcache's events name the adapter.

One prompt's 12 tokens (3 blocks of 4) are published three times: under adapter A, under adapter B and for the
base model (the block hashes differ, since the adapter is part of ctxcache's block key; the tokens do not). Dynamo
hashes the tokens with the event's ``lora_name`` into its own block keys, so a query with ``lora_name`` A matches
A's blocks only. Then A's record is evicted: A's query drops to 0, B's and the base model's stay whole. Prints one
JSON line: per step, the matched-token counts the indexer answers per adapter (``C`` was never published)."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import ctxcache
from dynamo_indexer_scenario import MODEL, PAGE, dump_blocks, http, loopback_up, poll, start_indexer, stop_indexer

TOKENS = list(range(700, 712))
ADAPTERS = {"A": "adapter-a", "B": "adapter-b", "base": "", "C": "adapter-c"}


def router_matched(lora: str) -> int:
    body: dict[str, Any] = {"token_ids": TOKENS, "model_name": MODEL}
    if lora:
        body["lora_name"] = lora
    answer = http("/query", body)
    return int(answer.get("scores", {}).get("1", {}).get("0", 0))


def main() -> int:
    loopback_up()
    indexer = start_indexer()
    report: dict[str, Any] = {"steps": []}
    try:
        with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=16), 8) as manager, \
                ctxcache.KvEventPublisher("tcp://*:5557", replay_endpoint="tcp://*:5558",
                                          wait_for_subscriber=10.0) as publisher:
            manager.enable_kv_events()
            manager.attach_kv_event_publisher(publisher)
            http("/register", {"instance_id": 1, "endpoint": "tcp://127.0.0.1:5557",
                               "replay_endpoint": "tcp://127.0.0.1:5558", "model_name": MODEL, "block_size": PAGE})
            report["subscribed"] = publisher.wait_for_subscriber(10.0)
            records: dict[str, int] = {}
            for name in ("A", "B", "base"):
                lora = ADAPTERS[name]
                extras = ctxcache.BlockKeyExtras(adapter_id=ctxcache.hash_opaque_identity(lora)) if lora else None
                hashes = ctxcache.hash_full_blocks(np.array(TOKENS, np.int32), PAGE, extras=extras)
                with manager.acquire_vanilla(hashes, len(TOKENS)).lease as lease:
                    result = manager.publish(lease, hashes, len(TOKENS), tokens=TOKENS,
                                             event_keys=ctxcache.KvEventKeys(lora))
                records[name] = int(result.record)

            def observe(step: str, want: dict[str, int]) -> None:
                publisher.flush(5.0)
                got = poll(lambda: {name: router_matched(lora) for name, lora in ADAPTERS.items()}, want)
                report["steps"].append({"step": step, "router": got, "want": want})

            full = len(TOKENS)
            observe("three publications", {"A": full, "B": full, "base": full, "C": 0})
            report["dump_blocks"] = dump_blocks()
            manager.evict_record(records["A"])
            observe("A evicted", {"A": 0, "B": full, "base": full, "C": 0})
            report["publisher"] = publisher.stats.__dict__
    finally:
        log = stop_indexer(indexer)
    report["indexer_log_tail"] = log[-4000:]
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
