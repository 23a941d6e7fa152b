"""The host-memory tier (issue 26) through Python and in ``ctxcache replay``: a manager's tier (bookkeeping) is
attached, observed and detached; write-back keeps what the device evicts and write-through what it publishes; an
extension after the device hit loads what the tier holds and never the prompt's last token; bad arguments are
typed errors that change nothing; the reference engine with a tier (bytes copied to host memory and back) matches
a cold run byte for byte; and the replay splits its reuse by tier, in both modes (vanilla and EAGLE, whose
bookkeeping tier keeps which slots hold their draft pages) reusing strictly more than the device alone and, with a
tier as large as the workload, everything an unbounded cache would; the bookkeeping-only replay reuses what the
full one does, tier by tier.
"""

from __future__ import annotations

import json

import msgspec
import numpy as np
import pytest

import ctxcache
from ctxcache import AcquireStatus, ContractError, HostWritePolicy, InvalidArgumentError, InvalidHandleError, sim
from ctxcache.cli import replay
from test_replay import _run, conversations  # noqa: F401  (the fixture)

from conftest import to_hashes

PAGE = 4


def publish(manager, tokens):
    h = to_hashes(tokens, PAGE)
    result = manager.acquire_vanilla(h, len(tokens))
    assert result.status == AcquireStatus.ACQUIRED
    with result.lease as lease:
        manager.publish(lease, h, len(tokens))
    return h


def test_write_back_keeps_what_the_device_evicts_and_extends_the_next_hit(make_manager):
    m = make_manager(page_size=PAGE, base_kv_pages=6, max_records=8)
    tier = m.attach_host_tier(16)
    assert m.host_tier is not None and tier.metrics.capacity_pages == 16
    a = publish(m, list(range(13)))  # 3 full blocks + 1 token
    assert tier.metrics.resident_blocks == 0  # write-back: nothing until the device drops them
    publish(m, list(range(100, 121)))  # 5 blocks + 1 token: the device must evict a's record
    metrics = tier.metrics
    assert (metrics.resident_blocks, metrics.written_blocks) == (3, 3)
    assert m.probe_vanilla(a, 13).reuse_token_length == 0  # the device has none of a...
    assert tier.extend_hit(a, 13, 0) == 3  # ...the tier has all of it
    assert tier.extend_hit(a, 12, 0) == 2  # a page-aligned prompt keeps its last block for the prefill
    assert tier.extend_hit(a, 13, 2) == 1
    metrics = tier.metrics
    assert (metrics.extend_calls, metrics.hit_requests, metrics.loaded_blocks) == (3, 3, 6)
    # The scrape says the same (docs/METRICS.md): counters, and the tier's slots as a pool of tier "host".
    text = ctxcache.metrics_text(m)
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert int(samples["ctxcache_host_tier_loaded_blocks_total"]) == 6
    assert int(samples["ctxcache_host_tier_written_blocks_total"]) == 3
    assert int(samples['ctxcache_pool_capacity{tier="host",resource="base_kv_page"}']) == 16
    assert int(samples['ctxcache_pool_free{tier="host",resource="base_kv_page"}']) == 13
    assert int(samples['ctxcache_host_tier_bytes_total{direction="to_host"}']) == 0  # bookkeeping: no bytes
    tier.check_invariants()
    m.check_invariants()


def test_write_through_writes_at_publication_and_never_twice(make_manager):
    m = make_manager(page_size=PAGE, base_kv_pages=6, max_records=8)
    tier = m.attach_host_tier(16, "through")
    a = publish(m, list(range(13)))
    assert tier.metrics.written_blocks == 3
    publish(m, list(range(100, 121)))  # evicts a: the tier already holds it
    assert tier.metrics.written_blocks == 8
    assert tier.extend_hit(a, 13, 0) == 3
    publish(m, list(range(13)))  # a, recomputed on the device: newly canonical there, already in the tier
    metrics = tier.metrics
    assert (metrics.written_blocks, metrics.skipped_writes) == (8, 3)
    tier.clear()
    assert tier.metrics.resident_blocks == 0
    tier.check_invariants()


def test_bad_arguments_are_typed_errors_that_change_nothing(make_manager):
    m = make_manager(page_size=PAGE, base_kv_pages=6)
    with pytest.raises(InvalidArgumentError):
        m.attach_host_tier(0)
    with pytest.raises(InvalidArgumentError):
        m.attach_host_tier(8, "sideways")
    assert m.host_tier is None
    tier = m.attach_host_tier(8, HostWritePolicy.THROUGH)
    with pytest.raises(ContractError):
        m.attach_host_tier(8)  # one tier per manager
    a = publish(m, list(range(13)))
    before = tier.metrics
    with pytest.raises(InvalidArgumentError):
        tier.extend_hit(a, 13, 4)  # more device blocks than the prompt has
    with pytest.raises(InvalidArgumentError):
        tier.extend_hit(a, -1, 0)
    with pytest.raises(InvalidArgumentError):
        tier.extend_hit(np.zeros((2, 3), dtype=np.uint64), 13, 0)
    assert tier.metrics == before
    m.detach_host_tier()
    m.detach_host_tier()  # nothing attached: nothing done
    assert m.host_tier is None
    with pytest.raises(ContractError):
        tier.extend_hit(a, 13, 0)  # the view outlived its tier
    with pytest.raises(ContractError):
        tier.metrics


def test_an_eagle_managers_tier_extends_speculative_hits_one_block_short_of_its_run(make_manager):
    # EAGLE (a manager with draft pages): each slot also stands for the draft page of the block before it, and a
    # speculative extension of k slots loads k - 1 blocks (the last slot gives its draft page only; the prefill
    # replays its block), where the vanilla extension of the same run loads all that the prompt allows.
    m = make_manager(page_size=PAGE, base_kv_pages=6, draft_kv_pages=6, max_records=8)
    tier = m.attach_host_tier(16)
    a = to_hashes(list(range(13)), PAGE)  # 3 full blocks + 1 token
    result = m.acquire_spec(a, 13)
    with result.lease as lease:
        m.publish(lease, a, 13)
    with m.acquire_spec(np.zeros((0, 2), dtype=np.uint64), 6 * PAGE).lease:  # a cold prompt: the device drops a
        pass
    assert tier.metrics.written_blocks == 3
    assert m.probe_vanilla(a, 13).reuse_token_length == 0  # the device has none of a
    assert tier.probe_hit(a, 13, 0) == 3
    assert tier.extend_spec_hit(a, 13, 0) == 2  # slots 1, 2, 3: blocks 1 and 2, draft pages from slots 2 and 3
    assert tier.extend_spec_hit(a, 12, 0) == 2  # page-aligned: the run may reach the last full block
    assert tier.extend_spec_hit(a, 13, 1) == 1
    assert tier.extend_spec_hit(a[:1], 13, 0) == 0  # one slot alone loads nothing
    metrics = tier.metrics
    assert (metrics.extend_calls, metrics.hit_requests, metrics.loaded_blocks) == (4, 3, 5)
    with pytest.raises(InvalidArgumentError):
        tier.extend_spec_hit(a, 13, 4)  # more device blocks than hashes
    assert tier.metrics == metrics
    tier.check_invariants()
    vanilla = make_manager(page_size=PAGE, base_kv_pages=6, max_records=8)
    with pytest.raises(ContractError, match="draft pages"):
        vanilla.attach_host_tier(8).extend_spec_hit(a, 13, 0)


def test_the_tier_dies_with_its_manager_and_its_view_reports_it():
    m = ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=6), 8)
    tier = m.attach_host_tier(8)
    publish(m, list(range(13)))
    m.close()
    with pytest.raises(InvalidHandleError):
        tier.metrics


# ---- ctxcache replay --host-tier-pages -------------------------------------------------------------------------


def _replay(capsys, path, *extra):
    code, out, err = _run(capsys, replay.replay_main, [str(path), "--bookkeeping-only", "--json", "--no-progress",
                                                        "--no-optimum", *extra])
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("mode", ["vanilla", "spec"])
def test_replay_splits_reuse_by_tier_and_reuses_more_than_the_device_alone(capsys, conversations, mode):  # noqa: F811
    alone = _replay(capsys, conversations, "--base-pages", "400", "--mode", mode)
    assert alone["reused_tokens_host"] == 0 and alone["host_tier"] is None
    for write in ("back", "through"):
        tiered = _replay(capsys, conversations, "--base-pages", "400", "--host-tier-pages", "4000",
                         "--host-write", write, "--mode", mode)
        assert tiered["reused_tokens"] == tiered["reused_tokens_device"] + tiered["reused_tokens_host"]
        assert tiered["reused_tokens_host"] > 0
        assert tiered["reused_tokens"] > alone["reused_tokens"]
        # A tier that holds the whole workload: everything an unbounded cache would reuse.
        assert tiered["reused_tokens"] == tiered["upper_bound_reused_tokens"]
        ht = tiered["host_tier"]
        assert ht["write_policy"] == write and ht["loaded_blocks"] * 16 == tiered["reused_tokens_host"]
        assert ht["resident_blocks"] <= 4000


def test_replay_refuses_a_tier_it_cannot_serve_with_one_line(capsys, conversations):  # noqa: F811
    for argv, words in ((["--host-tier-pages", "100", "--mode", "hybrid"], "--mode hybrid"),
                        (["--store-pages", "100", "--bookkeeping-only", "--mode", "spec"], "draft pages"),
                        (["--host-tier-pages", "-1", "--bookkeeping-only"], "--host-tier-pages"),
                        (["--host-tier-pages", "8", "--host-write", "sideways", "--bookkeeping-only"],
                         "--host-write")):
        try:
            code, out, err = _run(capsys, replay.replay_main, [str(conversations), "--no-progress", *argv])
        except SystemExit as e:  # argparse's refusals
            code, err = e.code, capsys.readouterr().err
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and words in err, (argv, err)


@pytest.mark.parametrize("mode,write", [("vanilla", "back"), ("vanilla", "through"), ("spec", "back"),
                                        ("spec", "through")])
def test_full_replay_with_a_tier_is_byte_exact_and_reuses_what_the_device_evicted(capsys, conversations, mode,  # noqa: F811
                                                                                  write):
    # spec: EAGLE, whose tier slots hold each block's draft page beside its base page.
    def full(*extra):
        code, out, err = _run(capsys, replay.replay_main, [str(conversations), "--json", "--no-progress", "--verify",
                                                            "--base-pages", "400", "--mode", mode, *extra])
        assert code == 0, err
        return json.loads(out)

    alone = full()
    tiered = full("--host-tier-pages", "4000", "--host-write", write)
    for r in (alone, tiered):
        assert r["engine"] == "full" and r["verify"]["verdict"] == "byte-exact" and r["verify"]["checked"] == 66
    assert tiered["reused_tokens"] == tiered["reused_tokens_device"] + tiered["reused_tokens_host"]
    assert tiered["reused_tokens_host"] > 0 and tiered["reused_tokens"] > alone["reused_tokens"]
    ht = tiered["host_tier"]
    assert ht["write_policy"] == write and ht["failed_loads"] == ht["failed_writes"] == 0
    assert ht["loaded_blocks"] * 16 == tiered["reused_tokens_host"]
    # The bookkeeping-only replay, which sizes a tier on a trace, predicts what the bytes do, tier by tier (spec:
    # its slots' draft flags stand for the draft pages the engine's slots hold).
    modelled = _replay(capsys, conversations, "--base-pages", "400", "--mode", mode, "--host-tier-pages", "4000",
                       "--host-write", write)
    for key in ("reused_tokens", "reused_tokens_device", "reused_tokens_host"):
        assert modelled[key] == tiered[key], key
    assert modelled["host_tier"]["loaded_blocks"] == ht["loaded_blocks"]
    page_bytes = 16 * 128  # the toy model's base page: 2 layers x K,V x 2 heads x 8 dims x 2 bytes a token
    if mode == "vanilla":
        assert ht["bytes_to_device"] == ht["loaded_blocks"] * page_bytes
        assert ht["bytes_to_host"] == ht["written_blocks"] * page_bytes
    else:  # every loaded block brings its draft page (the same geometry); a written one has it when it is valid
        assert ht["bytes_to_device"] == ht["loaded_blocks"] * 2 * page_bytes
        assert ht["written_blocks"] * page_bytes < ht["bytes_to_host"] <= ht["written_blocks"] * 2 * page_bytes


@pytest.mark.parametrize("deployment,loaded", [("attention", 96), ("eagle", 80)])
def test_the_reference_engine_loads_an_evicted_prefix_from_its_tier(deployment, loaded):
    # EAGLE: six slots load five blocks (slot j holds the draft page of block j - 1).
    prefix = list(range(7000, 7100))
    flood = [list(range(20000 + 1000 * f, 20150 + 1000 * f)) for f in range(6)]
    follow = prefix + [90000 + i for i in range(5)]
    starts = {}
    for pages in (0, 64):
        with sim.ReferenceEngine(deployment, page_size=16, base_pages=32, max_batch=1,
                                 host_tier_pages=pages) as engine:
            for tokens in [prefix, *flood, follow]:
                request = sim.Request(tokens=tokens, max_new_tokens=4)
                warm = engine.serve([request])[0]
                cold = engine.cold_reference([request])[0]
                assert np.array_equal(warm.generated, cold.generated) and warm.state_digest == cold.state_digest
            starts[pages] = warm.prefill_start
            assert engine.metrics.host_loaded_tokens == (loaded if pages else 0)
            engine.check_invariants()
    assert starts == {0: 0, 64: loaded}
    with pytest.raises(InvalidArgumentError):
        sim.ReferenceEngine("attention", host_tier_pages=-1)
    with pytest.raises(InvalidArgumentError):
        sim.ReferenceEngine("attention", host_tier_pages=8, host_write="sideways")


def test_sweep_puts_the_same_tier_beside_every_capacity(capsys, conversations, tmp_path):  # noqa: F811
    code, out, err = _run(capsys, replay.sweep_main, [str(conversations), "--host-tier-pages", "2000", "--points", "8",
                                                      "--no-progress", "--json", "--out-dir", str(tmp_path)])
    assert code == 0, err
    points = json.loads(out)["points"]
    assert len(points) == 8 and all(p["host_tier_pages"] == 2000 for p in points)
    assert any(p["reused_tokens_host"] > 0 for p in points)
    assert all(p["reused_tokens_host"] <= p["reused_tokens"] for p in points)
    header = next(tmp_path.glob("*.csv")).read_text().splitlines()[0].split(",")
    assert header[-2:] == ["host_tier_pages", "reused_tokens_host"]


def test_drained_events_name_the_tiers_blocks_cpu(make_manager):
    m = make_manager(page_size=PAGE, base_kv_pages=6, max_records=8)
    m.enable_kv_events()
    tier = m.attach_host_tier(16)
    m.drain_kv_events()  # AllBlocksCleared
    a = list(range(13))
    h = to_hashes(a, PAGE)
    with m.acquire_vanilla(h, 13).lease as lease:
        m.publish(lease, h, 13, tokens=a)
    stored_on_device = m.drain_kv_events()
    assert [e.medium for e in stored_on_device] == ["GPU"]
    b = list(range(100, 121))
    hb = to_hashes(b, PAGE)
    with m.acquire_vanilla(hb, 21).lease as lease:  # evicts a: written back
        m.publish(lease, hb, 21, tokens=b)
    events = m.drain_kv_events()
    assert [(type(e).__name__, e.medium) for e in events] == [
        ("BlockRemoved", "GPU"), ("BlockStored", "CPU"), ("BlockStored", "GPU")]
    host = events[1]
    assert host.block_hashes == stored_on_device[0].block_hashes and host.parent_block_hash is None
    assert host.token_ids == a[:12]
    assert tier.probe_hit(h, 13, 0) == 3 and tier.metrics.loaded_blocks == 0  # a probe loads nothing
    tier.clear()  # the tier's drops are reported too
    assert [(type(e).__name__, e.medium, len(e.block_hashes)) for e in m.drain_kv_events()] == [
        ("BlockRemoved", "CPU", 3)]
    if ctxcache.publisher_available():
        # Encoded as the publisher sends them: each event with its own medium, the device's as asked.
        raw = msgspec.msgpack.decode(ctxcache.encode_kv_events(events, block_size=PAGE, timestamp=0.0, medium="HBM"))
        assert [(e["type"], e["medium"]) for e in raw[1]] == [
            ("BlockRemoved", "HBM"), ("BlockStored", "CPU"), ("BlockStored", "HBM")]
        with pytest.raises(InvalidArgumentError, match=r"events\[0\]\.medium"):
            ctxcache.encode_kv_events([ctxcache.BlockRemoved([1], "NVMe")], block_size=PAGE, timestamp=0.0)
