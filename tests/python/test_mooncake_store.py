"""Mooncake Store as the shared store (ctxcache.mooncake_store, issue 27).

Without a master (in this process): the backend's URL and sizes are checked, a client that cannot reach its master
answers "unavailable" at once, without a wait and without touching Mooncake, and an engine over it serves at once,
byte-exact. Against a real master and store nodes on a private loopback (mooncake_scenarios.py, each scenario in
fresh namespaces): two replicas share blocks through registered host-tier memory; process A is killed with SIGKILL
and process B, started empty, reuses its prefixes and `--verify`s byte-exact; the store joins when a master appears
after start; a master killed and restarted costs no request more than the deadline plus 50 ms and hits resume within
5 s; a store node killed costs one failed load per key; a full store drops puts, counted. Every scenario checks
every byte against a cold run.

These tests skip with the reason where Mooncake cannot run (no extra, no libibverbs, no namespaces);
CTXCACHE_REQUIRE_MOONCAKE=1 (tools/test sets it once it installed the extra) turns that skip into a failure.
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest

import mooncake_support
from ctxcache import KvStore, StoreLink, StoreResult
from ctxcache.errors import InvalidArgumentError
from ctxcache.kv_store import open_store
from ctxcache.mooncake_store import MooncakeStore, parse_size
from ctxcache.sim import ReferenceEngine, Request

REASON = mooncake_support.unavailable_reason()
if REASON and os.environ.get("CTXCACHE_REQUIRE_MOONCAKE") == "1":
    raise RuntimeError(f"CTXCACHE_REQUIRE_MOONCAKE=1 but Mooncake cannot run here: {REASON}")
needs_mooncake = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# ---- without a master ----------------------------------------------------------------------------------------------

def test_sizes_and_urls_are_checked() -> None:
    assert parse_size("64MiB", "segment") == 64 << 20
    assert parse_size("1GiB", "segment") == 1 << 30
    assert parse_size("4096", "segment") == 4096
    assert parse_size("2GB", "segment") == 2 * 1000**3
    for bad in ("", "MiB", "-1MiB", "1.5GiB", "12 parsecs"):
        with pytest.raises(InvalidArgumentError, match="segment"):
            parse_size(bad, "segment")
    for url, words in [("redis://127.0.0.1:1", "mooncake://"), ("mooncake://", "mooncake://HOST:PORT"),
                       ("mooncake://127.0.0.1", "HOST:PORT"), ("mooncake://127.0.0.1:99999", "HOST:PORT"),
                       ("mooncake://127.0.0.1:1?segmnt=1GiB", "'segmnt'"),
                       ("mooncake://127.0.0.1:1?segment=1MiB", "16 MiB"),
                       ("mooncake://127.0.0.1:1?metadata=nowhere", "metadata")]:
        with pytest.raises(InvalidArgumentError, match=words):
            MooncakeStore.from_url(url)
    with pytest.raises(InvalidArgumentError, match="memory://"):
        open_store("memory://somewhere")
    with pytest.raises(InvalidArgumentError, match="mooncake://"):
        open_store("file:///tmp/x")


@needs_mooncake
def test_a_client_without_its_master_answers_unavailable_at_once_and_closes_fast() -> None:
    port = unused_port()
    backend = MooncakeStore(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/metadata", retry_s=0.05)
    try:
        time.sleep(0.3)  # several setup attempts' probes, all refused
        assert not backend.ready and backend.setup_attempts == 0  # setup() never ran against a silent port
        far = time.monotonic_ns() + 10**9
        t = time.monotonic()
        assert backend.exist(["a", "b"], far) == [StoreResult.UNAVAILABLE] * 2
        assert backend.put(["a"], [0], [8], far) == [StoreResult.UNAVAILABLE]
        assert backend.get(["a"], [0], [8], far) == [StoreResult.UNAVAILABLE]
        assert time.monotonic() - t < 0.05
        assert "joining" in repr(backend)
    finally:
        t = time.monotonic()
        backend.close()
        assert time.monotonic() - t < 0.5
    assert "closed" in repr(backend)
    assert backend.exist(["a"], 0) == [StoreResult.UNAVAILABLE]
    backend.close()  # idempotent


@needs_mooncake
def test_an_engine_over_an_absent_store_serves_at_once_byte_exact() -> None:
    port = unused_port()
    backend = MooncakeStore(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}/metadata", retry_s=0.05)
    store = KvStore.from_backend(backend)
    shared = list(range(1, 129))
    requests = [Request(np.array(shared + [500 + i * 40 + t for t in range(40)], dtype=np.int32), max_new_tokens=3)
                for i in range(4)]
    try:
        with ReferenceEngine(base_pages=48, host_tier_pages=64, host_write="through",
                             host_store=StoreLink(store, load_deadline_s=1.0)) as e, \
                ReferenceEngine(base_pages=48, reuse=False) as cold_engine:
            t = time.monotonic()
            got = e.serve(requests)
            took = time.monotonic() - t
            cold = cold_engine.serve(requests)
            mooncake_support.settle(e, timeout_s=5)  # the puts' answers (unavailable) come back
            m = e.metrics
            address, size = e.host_tier_memory
            assert size == 64 * 2304 and address != 0  # 2 layers x K,V x 2 heads x 8 dims x 16 tokens x 2 B + header
            assert backend._pending == [(address, size)]  # registered once the client is set up
        assert backend._pending == []  # unregistered at close
        assert took < 0.5  # a 1 s deadline never waited for: the store answered at once
        for g, c in zip(got, cold):
            assert g.state_digest == c.state_digest and list(g.generated) == list(c.generated)
        assert m.store_loaded_tokens == 0 and m.store_fetched_blocks == 0
        assert m.store_failed_puts + m.store_dropped_puts > 0  # puts refused (unavailable, then the breaker), counted
    finally:
        store.close()
        backend.close()


def test_memory_url_opens_an_in_process_store() -> None:
    with open_store("memory://?capacity=1MiB") as store:
        assert store.backend is None
        link = StoreLink(store)
        with ReferenceEngine(base_pages=32, host_tier_pages=16, host_write="through", host_store=link) as e:
            assert e.poll_store() == (0, 0)
            e.serve([Request(np.arange(1, 70, dtype=np.int32), max_new_tokens=2)])
            mooncake_support.settle(e, timeout_s=5)
            assert e.metrics.store_put_blocks == 4  # 69 tokens + 2 generated: four full pages put, and counted
    with ReferenceEngine(base_pages=32) as plain:
        assert plain.poll_store() == (0, 0) and plain.host_tier_memory == (0, 0)


# ---- a real master on a private loopback ---------------------------------------------------------------------------

@needs_mooncake
def test_two_replicas_share_blocks_without_a_copy() -> None:
    r = mooncake_support.run_scenario("shared")
    assert r["byte_exact"]
    assert r["a_put_blocks"] >= 8  # the shared 8 pages, and the prompts' own
    assert r["prefill_starts"] == [128, 128, 128]  # every request of B starts after the 8 shared pages
    assert r["b"]["store_loaded_tokens"] == 128 and r["b"]["store_fetched_blocks"] == 8
    assert r["b"]["store_failed_loads"] == 0 and r["b"]["store_rejected_loads"] == 0
    assert r["zero_copy_keys"] > 0 and r["copied_keys"] == 0  # all through registered host-tier memory


@needs_mooncake
def test_a_killed_process_prefixes_are_reused_by_another_byte_exact() -> None:
    r = mooncake_support.run_scenario("two_process")
    assert r["a_killed_by"] == 9
    assert r["a"]["store"]["put_blocks"] > 100 and r["a"]["store"]["failed_puts"] == 0
    b = r["b"]
    assert b["verify"]["verdict"] == "byte-exact" and b["verify"]["checked"] == 48
    assert b["reused_tokens_store"] > 0 and b["store"]["fetched_blocks"] > 0
    assert b["reused_tokens_store"] == b["store"]["loaded_tokens"]
    assert b["reused_tokens"] > r["b_alone"]["reused_tokens"]  # more than B reuses on its own
    assert b["store"]["failed_loads"] == 0 and b["store"]["rejected_loads"] == 0


@needs_mooncake
def test_the_store_joins_when_a_master_appears_after_start() -> None:
    r = mooncake_support.run_scenario("absent_at_start")
    assert r["byte_exact"]
    assert r["early_serve_s"] < 0.5  # served at once, no master
    assert r["early"]["store_fetched_blocks"] == 0
    assert r["early"]["store_failed_puts"] + r["early"]["store_dropped_puts"] > 0  # counted, not lost
    assert r["joined"] and r["join_s"] < 5
    assert r["b"]["store_loaded_tokens"] == 128


@needs_mooncake
def test_a_master_killed_and_restarted_costs_no_wait_past_the_deadline() -> None:
    r = mooncake_support.run_scenario("master_restart")
    assert r["byte_exact"]
    assert r["hits_before"] == 128
    assert r["down_s"] >= 3.0
    assert r["worst_extra_s"] <= r["deadline_s"] + 0.05  # over every request while down and after
    assert r["resumed_s"] is not None and r["resumed_s"] <= 5.0
    assert r["b"]["store_late_batches"] > 0 or r["b"]["store_breaker_refusals"] > 0  # the outage was seen


@needs_mooncake
def test_a_killed_store_node_costs_one_failed_load_per_key() -> None:
    r = mooncake_support.run_scenario("holder_killed")
    assert r["byte_exact"]
    first, again = r["first"], r["again"]
    assert first["store_loaded_tokens"] == 0 and first["store_failed_loads"] > 0
    assert first["store_failed_loads"] <= 8  # at most the 8 shared blocks, once each
    assert again["store_failed_loads"] == first["store_failed_loads"]  # not asked again (negative cache)
    assert again["store_asked_blocks"] == first["store_asked_blocks"]


@needs_mooncake
def test_a_full_store_drops_puts_and_serves_what_it_holds() -> None:
    r = mooncake_support.run_scenario("full_store")
    assert r["byte_exact"]
    assert r["a"]["store_dropped_puts"] > 0 and r["a"]["store_put_blocks"] > 0
    assert r["b"]["store_fetched_blocks"] > 0 and r["b"]["store_failed_loads"] == 0
