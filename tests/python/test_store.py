"""A KV store shared by replicas, in its bookkeeping model (issue 27), through Python and in ``ctxcache replay``:
two managers' tiers share one ``BookkeepingStore``, so a prompt one published is found by the other; the split of an
extension by tier; the store outliving its Python handle while tiers use it; bad arguments as typed errors that
change nothing; and ``replay --replicas R --store-pages N`` dealing a workload to replicas, with and without a
store, splitting the reuse by tier and by replica.
"""

from __future__ import annotations

import json
import threading

import pytest

import ctxcache
from ctxcache import ArgumentTypeError, BookkeepingStore, InvalidArgumentError, InvalidHandleError
from test_host_tier import PAGE, _replay, publish


def test_a_replica_reuses_what_another_published_through_the_store(make_manager):
    with BookkeepingStore(64) as store:
        a = make_manager(page_size=PAGE, base_kv_pages=16, max_records=8)
        b = make_manager(page_size=PAGE, base_kv_pages=16, max_records=8)
        ta = a.attach_host_tier(0, store=store)  # no host slots: the store only
        tb = b.attach_host_tier(4, store=store)
        h = publish(a, list(range(13)))  # 3 full blocks + 1 token
        m = store.metrics
        assert (m.capacity_pages, m.written_blocks, m.resident_blocks) == (64, 3, 3)
        assert store.probe(h) == 3
        assert b.probe_vanilla(h, 13).reuse_token_length == 0  # b's device has none of it...
        assert tb.probe_hit(h, 13, 0) == 3
        assert tb.extend_hit_by_tier(h, 13, 0) == (0, 3)  # ...the store has all of it
        assert tb.extend_hit(h, 12, 1) == 1  # page-aligned: the last block stays for the prefill
        t = tb.metrics
        assert (t.store_loaded_blocks, t.store_hit_requests, t.loaded_blocks, t.hit_requests) == (4, 2, 0, 2)
        assert ta.metrics.refused_writes == 0  # a tier of 0 pages does not try to hold blocks
        assert store.metrics.hit_blocks == 4
        # The scrape names this manager's share (docs/METRICS.md); a manager without a store has no such family.
        samples = dict(line.rsplit(" ", 1) for line in ctxcache.metrics_text(b).splitlines()
                       if line and not line.startswith("#"))
        assert int(samples["ctxcache_host_tier_store_loaded_blocks_total"]) == 4
        assert int(samples['ctxcache_pool_capacity{tier="host",resource="base_kv_page"}']) == 4
        plain = make_manager(page_size=PAGE, base_kv_pages=8)
        plain.attach_host_tier(4)
        assert "ctxcache_host_tier_store_loaded_blocks_total" not in ctxcache.metrics_text(plain)
        publish(b, list(range(13)))  # b publishes what it loaded: the store keeps what it had
        m = store.metrics
        assert (m.written_blocks, m.skipped_puts) == (3, 3)
        store.check_invariants()
        tb.check_invariants()


def test_the_store_outlives_its_handle_while_a_tier_uses_it(make_manager):
    store = BookkeepingStore(8)
    a = make_manager(page_size=PAGE, base_kv_pages=16, max_records=8)
    b = make_manager(page_size=PAGE, base_kv_pages=16, max_records=8)
    a.attach_host_tier(0, store=store)
    tb = b.attach_host_tier(0, store=store)
    store.close()
    store.close()  # idempotent
    with pytest.raises(InvalidHandleError, match="store"):
        store.metrics
    h = publish(a, list(range(9)))
    assert tb.extend_hit_by_tier(h, 9, 0) == (0, 2)
    with pytest.raises(InvalidHandleError):  # a closed store cannot be attached
        make_manager(page_size=PAGE, base_kv_pages=4).attach_host_tier(0, store=store)


def test_bad_arguments_are_typed_errors_that_change_nothing(make_manager):
    with pytest.raises(InvalidArgumentError, match="capacity_pages"):
        BookkeepingStore(0)
    with pytest.raises((InvalidArgumentError, ArgumentTypeError)):
        BookkeepingStore("many")
    m = make_manager(page_size=PAGE, base_kv_pages=8)
    with pytest.raises(InvalidArgumentError, match="0 only with a store"):
        m.attach_host_tier(0)
    with pytest.raises(ArgumentTypeError, match="BookkeepingStore"):
        m.attach_host_tier(0, store=object())
    with BookkeepingStore(4) as store:
        with pytest.raises(InvalidArgumentError):
            m.attach_host_tier(-1, store=store)
        assert m.host_tier is None
        with pytest.raises(InvalidArgumentError):
            store.probe([[1, 2, 3]])
        assert store.metrics.put_calls == 0


def test_managers_on_threads_share_one_store(make_manager):
    with BookkeepingStore(4096) as store:
        managers = [make_manager(page_size=PAGE, base_kv_pages=64, max_records=16) for _ in range(3)]
        for m in managers:
            m.attach_host_tier(0, store=store)
        errors = []

        def serve(m, seed):
            try:
                for i in range(150):
                    publish(m, list(range(seed * 100_000 + i * 10, seed * 100_000 + i * 10 + 9)))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=serve, args=(m, k)) for k, m in enumerate(managers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        m = store.metrics
        assert m.put_calls == 450 and m.written_blocks == 900  # 2 full blocks per prompt, all distinct
        store.check_invariants()


# ---- ctxcache replay --replicas R --store-pages N -------------------------------------------------------------------

from ctxcache.cli import replay  # noqa: E402
from test_replay import _run, conversations  # noqa: E402,F401  (the fixture)


def test_replay_deals_to_replicas_and_a_shared_store_brings_back_what_each_alone_misses(capsys, conversations):  # noqa: F811
    one = _replay(capsys, conversations, "--base-pages", "1600")
    assert one["replicas"] == 1 and one["per_replica"] is None and one["reused_tokens_store"] == 0
    alone = _replay(capsys, conversations, "--base-pages", "400", "--replicas", "4")
    rows = alone["per_replica"]
    assert [r["requests"] for r in rows] == [17, 17, 16, 16]  # 66 requests round-robin
    assert sum(r["reused_tokens"] for r in rows) == alone["reused_tokens"]
    assert sum(r["prompt_tokens"] for r in rows) == alone["prompt_tokens"]
    assert alone["store"] is None and alone["reused_tokens_store"] == 0
    # Round-robin sends each turn to another replica than the one before: alone, they reuse far less than one cache.
    assert alone["reused_tokens"] < one["reused_tokens"]
    shared = _replay(capsys, conversations, "--base-pages", "400", "--replicas", "4", "--store-pages", "100000")
    assert shared["reused_tokens"] == (shared["reused_tokens_device"] + shared["reused_tokens_host"]
                                       + shared["reused_tokens_store"])
    assert shared["reused_tokens_host"] == 0 and shared["reused_tokens_store"] > 0
    assert shared["reused_tokens_device"] == alone["reused_tokens"]  # the devices cache what they did alone
    # A store that holds the whole workload: everything an unbounded cache would reuse.
    assert shared["reused_tokens"] == shared["upper_bound_reused_tokens"]
    st = shared["store"]
    assert st["hit_blocks"] * 16 == shared["reused_tokens_store"]
    assert st["dropped_blocks"] == 0 and st["resident_blocks"] == st["written_blocks"]
    assert sum(r["reused_tokens_store"] for r in shared["per_replica"]) == shared["reused_tokens_store"]
    # A store smaller than the workload drops blocks and reuses less, never more.
    small = _replay(capsys, conversations, "--base-pages", "400", "--replicas", "4", "--store-pages", "300")
    assert small["store"]["dropped_blocks"] > 0 and small["store"]["resident_blocks"] == 300
    assert alone["reused_tokens"] < small["reused_tokens"] < shared["reused_tokens"]
    # With host tiers beside the devices as well, the split still sums.
    both = _replay(capsys, conversations, "--base-pages", "400", "--replicas", "4", "--store-pages", "300",
                   "--host-tier-pages", "800")
    assert both["reused_tokens_host"] > 0
    assert both["reused_tokens"] == (both["reused_tokens_device"] + both["reused_tokens_host"]
                                     + both["reused_tokens_store"])
    assert both["host_tier"]["capacity_pages"] == 800


def test_replay_deals_a_conversation_to_one_replica(capsys, conversations):  # noqa: F811
    rr = _replay(capsys, conversations, "--base-pages", "400", "--replicas", "4")
    conv = _replay(capsys, conversations, "--base-pages", "400", "--replicas", "4", "--deal", "conversation")
    assert conv["deal"] == "conversation"
    # 12 conversations of 5 turns dealt 3 to each replica; conversations 0..2's rewound prompts follow them.
    assert [r["requests"] for r in conv["per_replica"]] == [17, 17, 17, 15]
    assert conv["reused_tokens"] > rr["reused_tokens"]  # each replica sees its conversations' earlier turns


def _replay_full(capsys, path, *extra):
    code, out, err = _run(capsys, replay.replay_main, [str(path), "--json", "--no-progress", "--no-optimum",
                                                        "--verify", *extra])
    assert code == 0, err
    report = json.loads(out)
    assert report["verify"]["verdict"] == "byte-exact" and report["verify"]["mismatches"] == 0
    return report


def test_full_replicas_share_a_real_byte_store_byte_exact(capsys, conversations):  # noqa: F811
    common = ["--base-pages", "400", "--host-tier-pages", "200", "--host-write", "through", "--replicas", "4"]
    alone = _replay_full(capsys, conversations, *common)
    assert alone["store"] is None and alone["reused_tokens_store"] == 0
    rows = alone["per_replica"]
    assert [r["requests"] for r in rows] == [17, 17, 16, 16]  # 66 requests round-robin, as in bookkeeping
    assert alone["verify"]["checked"] == 66
    shared = _replay_full(capsys, conversations, *common, "--store", "memory://")
    assert shared["reused_tokens"] == (shared["reused_tokens_device"] + shared["reused_tokens_host"]
                                       + shared["reused_tokens_store"])
    assert shared["reused_tokens_store"] > 0 and shared["reused_tokens"] > alone["reused_tokens"]
    assert sum(r["reused_tokens_store"] for r in shared["per_replica"]) == shared["reused_tokens_store"]
    assert sum(r["reused_tokens"] for r in shared["per_replica"]) == shared["reused_tokens"]
    st = shared["store"]
    assert st["url"] == "memory://" and st["policy"] == "wait"
    assert st["loaded_tokens"] == shared["reused_tokens_store"] and st["fetched_blocks"] * 16 >= st["loaded_tokens"]
    assert st["put_blocks"] > 0 and st["failed_loads"] == 0 and st["rejected_loads"] == 0
    # The bookkeeping model of the same fleet (a store as large as the workload) is the bound the bytes reach.
    modelled = _replay(capsys, conversations, "--base-pages", "400", "--replicas", "4", "--store-pages", "100000")
    assert shared["reused_tokens"] <= modelled["upper_bound_reused_tokens"]


def test_replay_refuses_a_fleet_it_cannot_model_with_one_line(capsys, conversations):  # noqa: F811
    for argv, words in ((["--replicas", "0", "--bookkeeping-only"], "--replicas"),
                        (["--replicas", "2000", "--bookkeeping-only"], "--replicas"),
                        (["--store-pages", "-5", "--bookkeeping-only"], "--store-pages"),
                        (["--deal", "random", "--bookkeeping-only"], "--deal"),
                        (["--replicas", "2", "--events", "tcp://127.0.0.1:5999"], "--replicas"),
                        (["--store-pages", "100"], "--bookkeeping-only"),
                        (["--store-pages", "100", "--bookkeeping-only", "--mode", "spec"], "draft pages"),
                        (["--replicas", "2", "--bookkeeping-only", "--events", "tcp://127.0.0.1:5999"],
                         "--replicas")):
        try:
            code, out, err = _run(capsys, replay.replay_main, [str(conversations), "--no-progress", *argv])
        except SystemExit as e:  # argparse's refusals
            code, err = e.code, capsys.readouterr().err
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and words in err, (argv, err)
