"""Metrics in the Prometheus text format (ctxc_metrics_text, ctxcache.metrics): exact counters after a scripted
sequence, the text parsed by prometheus_client's own parser, the names equal to docs/METRICS.md's table, the
collector's snapshots, and `ctxcache replay --metrics-port` scraped while it runs, its final counters equal to the
replay's own report."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import ctxcache
from ctxcache import ResourceDemand, ResourceType

DOC = Path(__file__).resolve().parents[2] / "docs" / "METRICS.md"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text, keyed by (name, sorted labels), as prometheus_client parses it."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def one(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


def publish(manager: ctxcache.ContextCacheManager, tokens: list[int], page: int = 4) -> ctxcache.AcquireResult:
    hashes = ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), page)
    result = manager.acquire_vanilla(hashes, len(tokens))
    if result.lease is not None:
        with result.lease as lease:
            manager.publish(lease, hashes, len(tokens), tokens=tokens)
    return result


def test_a_scripted_sequence_gives_exact_counters_in_the_text_and_the_struct() -> None:
    with ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=8), 8) as manager:
        a = list(range(10))
        publish(manager, a)  # cold: 10 tokens queried, 0 hit
        publish(manager, a)  # two full blocks hit: 8
        hashes = ctxcache.hash_full_blocks(np.array(a, dtype=np.int32), 4)
        with manager.acquire_vanilla(hashes, 10, ctxcache.LookupPolicy.BYPASS).lease:
            pass  # a bypass is no query
        refused = manager.acquire_vanilla(ctxcache.hash_full_blocks(np.arange(100, 140, dtype=np.int32), 4), 40)
        assert refused.status == ctxcache.AcquireStatus.INSUFFICIENT_CAPACITY  # 10 pages of 8: counted, no query
        big = manager.acquire_vanilla(ctxcache.hash_full_blocks(np.arange(200, 232, dtype=np.int32), 4), 32)
        assert big.lease is not None  # 8 pages: evicts the record of `a`
        m = manager.metrics
        assert (m.prefix_cache_queries, m.prefix_cache_hits) == (10 + 10 + 32, 8)  # the refused one: no query
        assert (m.evicted_records, m.reclaimed_base_kv_pages) == (1, 2)
        text = ctxcache.metrics_text(manager)
        assert one(text, "ctxcache_prefix_cache_queries_total") == 52
        assert one(text, "ctxcache_prefix_cache_hits_total") == 8
        assert one(text, "ctxcache_evicted_records_total") == 1
        assert one(text, "ctxcache_reclaimed_total", resource="base_kv_page") == 2
        assert one(text, "ctxcache_pool_capacity", tier="device", resource="base_kv_page") == 8
        assert one(text, "ctxcache_pool_free", tier="device", resource="base_kv_page") == 0  # big holds all 8
        assert one(text, "ctxcache_live_leases") == 1
        assert one(text, "ctxcache_records") == 0
        assert one(text, "ctxcache_metadata_bytes") == manager.metadata_bytes
        big.lease.close()
        text = ctxcache.metrics_text(manager)
        assert one(text, "ctxcache_pool_free", tier="device", resource="base_kv_page") == 8
        assert one(text, "ctxcache_live_leases") == 0


def test_superseded_records_are_counted_apart_from_evictions() -> None:
    # A spec lease that hits a record and publishes a longer prompt holds every page the hit record could ever
    # bind (a hit at boundary n binds n - 1 draft pages): the hit record is superseded, its last draft page freed.
    demand = ResourceDemand(base_kv_pages=8, draft_kv_pages=8)
    with ctxcache.ContextCacheManager(4, demand, 8) as manager:
        tokens = np.arange(20, dtype=np.int32)
        for n in (12, 20):
            hashes = ctxcache.hash_full_blocks(tokens[:n], 4)
            with manager.acquire_spec(hashes, n).lease as lease:
                manager.publish(lease, hashes, n)
        m = manager.metrics
        assert (m.superseded_records, m.evicted_records, m.reclaimed_draft_kv_pages) == (1, 0, 0)
        assert len(manager.records) == 1
        assert manager.pools.free_count(ResourceType.DRAFT_KV_PAGE) == 3  # the record holds 5 of 8
        text = ctxcache.metrics_text(manager)
        assert one(text, "ctxcache_superseded_records_total") == 1
        assert one(text, "ctxcache_evicted_records_total") == 0


def test_the_names_are_docs_metrics_table() -> None:
    documented = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"\| `(ctxcache_[a-z_]+)` \| (counter|gauge) \|", line)
        if match:
            documented[match.group(1)] = match.group(2)
    written = {}
    with ctxcache.BookkeepingStore(8) as store, \
            ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=8), 8) as manager:
        manager.attach_host_tier(8, store=store)  # its families appear only with a tier (and a store)
        texts = [ctxcache.metrics_text(manager)]
    if ctxcache.publisher_available():
        with ctxcache.KvEventPublisher(f"ipc://{tempfile.mkdtemp()}/m") as publisher:
            texts.append(ctxcache.metrics_text(publisher))
    for text in texts:
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                written[name] = kind
            elif line and not line.startswith("#"):
                name = re.match(r"[a-z_]+", line).group(0)  # type: ignore[union-attr]
                assert name in written, line  # every sample belongs to a declared family
                assert re.fullmatch(r"[a-z_]+(\{[a-z_]+=\"[a-z_0-9]+\"(,[a-z_]+=\"[a-z_0-9]+\")*\})? \d+", line), line
    for name, kind in written.items():
        assert (kind == "counter") == name.endswith("_total"), name
    expected = documented if ctxcache.publisher_available() else {
        k: v for k, v in documented.items() if not k.startswith("ctxcache_kv_event_")}
    assert written == expected


def test_a_publisher_coordinator_and_engine_have_metrics() -> None:
    if ctxcache.publisher_available():
        with ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=8), 8) as manager, \
                ctxcache.KvEventPublisher(f"ipc://{tempfile.mkdtemp()}/p") as publisher:
            manager.enable_kv_events()
            manager.attach_kv_event_publisher(publisher)
            publish(manager, list(range(8)))
            assert publisher.flush(5.0)
            text = ctxcache.metrics_text(publisher)
            stats = publisher.stats
            assert one(text, "ctxcache_kv_event_batches_total", outcome="accepted") == stats.accepted_batches == 2
            assert one(text, "ctxcache_kv_event_batches_total", outcome="sent") == stats.sent_batches
            assert one(text, "ctxcache_kv_event_batches_total", outcome="dropped") == 0
            assert one(ctxcache.metrics_text(manager), "ctxcache_kv_events_enabled") == 1
    from ctxcache import sim

    with sim.ReferenceEngine("attention", page_size=4, base_pages=32, max_batch=2,
                             max_pages_per_sequence=8) as engine:
        prompt = np.arange(12, dtype=np.int32)
        engine.serve([sim.Request(tokens=prompt, max_new_tokens=2)])
        outputs = engine.serve([sim.Request(tokens=prompt, max_new_tokens=2)])
        text = ctxcache.metrics_text(engine)
        assert one(text, "ctxcache_prefix_cache_hits_total") == outputs[0].prefill_start > 0
        assert one(text, "ctxcache_prefix_cache_queries_total") == 24


def test_bad_sources_are_refused() -> None:
    with pytest.raises(TypeError):
        ctxcache.metrics_text(42)
    manager = ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=8), 8)
    manager.close()
    with pytest.raises(ctxcache.InvalidHandleError):
        ctxcache.metrics_text(manager)
    buffer = ctxcache.ffi.new("char[]", 4)
    size = ctxcache.ffi.new("size_t *")
    with ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=8), 8) as live:
        status = ctxcache.lib.ctxc_metrics_text(live._live(), buffer, 4, size)
        assert status == ctxcache.lib.CTXC_E_BUFFER_TOO_SMALL and size[0] > 4
        assert ctxcache.lib.ctxc_metrics_text(live._live(), ctxcache.ffi.NULL, 0, ctxcache.ffi.NULL) == \
            ctxcache.lib.CTXC_E_INVALID_ARGUMENT
    assert ctxcache.lib.ctxc_metrics_text(ctxcache.ffi.NULL, ctxcache.ffi.NULL, 0, size) == \
        ctxcache.lib.CTXC_E_INVALID_HANDLE


def test_the_collector_serves_snapshots_from_another_thread() -> None:
    """collect() runs on the exporter's thread and never calls into the cache: a scrape beside the cache's own
    calls raises nothing, and serves the snapshot of the last update()."""
    with ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=64), 64) as manager:
        collector = ctxcache.MetricsCollector(manager)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        assert one(generate_latest(registry).decode(), "ctxcache_prefix_cache_queries_total") == 0
        stop = threading.Event()
        scraped: list[float] = []
        errors: list[BaseException] = []

        def scrape() -> None:
            try:
                while not stop.is_set():
                    scraped.append(one(generate_latest(registry).decode(), "ctxcache_prefix_cache_queries_total"))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        scraper = threading.Thread(target=scrape)
        scraper.start()
        for i in range(200):
            publish(manager, list(range(i, i + 8)))
            if i % 50 == 49:
                collector.update()
        stop.set()
        scraper.join()
        assert not errors
        assert set(scraped) <= {0, 400, 800, 1200, 1600} and scraped == sorted(scraped)
        assert one(collector.text, "ctxcache_prefix_cache_queries_total") == 1600
    assert collector.update() == ""  # a closed source drops out


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return str(response.read().decode())
    except OSError:
        return None


def test_replay_serves_metrics_that_end_equal_to_its_report() -> None:
    port = free_port()
    command = [sys.executable, "-m", "ctxcache.cli", "replay", "--bookkeeping-only", "--page-size", "16",
               "--no-progress", "--no-optimum", "--json", "--metrics-port", str(port), "--metrics-linger", "30",
               "--capacity-tokens", "20000"]
    replay = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        during = None
        deadline = time.monotonic() + 60
        while during is None and time.monotonic() < deadline and replay.poll() is None:
            during = scrape(port)
            time.sleep(0.02)
        assert during is not None, replay.stderr.read() if replay.poll() is not None else "no scrape answered"
        text_string_to_metric_families(during)  # parses while the replay runs
        line = replay.stdout.readline()  # the report: the final snapshot was taken before it was printed
        report = json.loads(line)
        final = scrape(port)
        assert final is not None
        hits = one(final, "ctxcache_prefix_cache_hits_total")
        queries = one(final, "ctxcache_prefix_cache_queries_total")
        assert report["evicted_records"] > 0  # the capacity is small enough to evict
        assert hits == report["reused_tokens"] > 0
        assert report["forced_cold"] == report["rejected"] == 0
        assert queries == report["prompt_tokens"]
        assert hits / queries == pytest.approx(report["hit_rate"], abs=1e-6)
        assert one(final, "ctxcache_evicted_records_total") == report["evicted_records"]
    finally:
        replay.terminate()
        replay.wait(timeout=10)


def test_replay_metrics_port_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from ctxcache.cli import replay

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = replay.replay_main(["--limit", "2", "--bookkeeping-only", "--no-progress", "--metrics-port",
                                   str(port)])
        assert code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"--metrics-port {port}" in err, err
    with pytest.raises(SystemExit) as exit_info:
        replay.replay_main(["--metrics-port", "70000"])
    assert exit_info.value.code == 2
