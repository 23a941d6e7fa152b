"""Retention priorities through Python (issue 29): a spec on a publication, eviction by priority then recency, a
driven clock, lru-trim cutting a low tail before a high head, hard pins within a budget, typed errors. Page size
4; fresh pools hand out page ids FIFO from 0.
"""

from __future__ import annotations

import pytest

import ctxcache
from ctxcache import AcquireStatus, RetentionRange, RetentionSpec

from conftest import drain_and_check, to_hashes

PAGE = 4
SYSTEM = list(range(1000, 1008))  # two blocks of system prompt


def make(base_pages, max_records=64, policy="lru"):
    return ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=base_pages), max_records, policy)


def serve(manager, tokens, retention=None):
    """A request to completion: acquire, publish every full block (with ``retention``), release."""
    h = to_hashes(tokens)
    result = manager.acquire_vanilla(h, len(tokens))
    assert result.status == AcquireStatus.ACQUIRED
    with result.lease as lease:
        published = manager.publish(lease, h, len(tokens), retention=retention)
    manager.check_invariants()
    return published.record


def pages(manager, record):
    return [int(p) for p in manager.records[record].base_page_path]


def other(n, blocks=3):
    return list(range(10_000 * (n + 1), 10_000 * (n + 1) + blocks * PAGE))


KEEP_SYSTEM = RetentionSpec([RetentionRange(0, len(SYSTEM), 90)])


def test_a_priority_90_system_prompt_survives_a_flood_that_evicts_everything_else():
    with make(16) as m:
        s = serve(m, SYSTEM + [1, 2, 3, 4], KEEP_SYSTEM)
        assert m.record_priority(s) == 90
        flood = [serve(m, other(i)) for i in range(20)]
        assert s in m.records and pages(m, s) == [0, 1, 2]
        assert [r in m.records for r in flood] == [False] * 16 + [True] * 4
        assert m.retention_metrics.evicted_records_by_priority == {35: 16}
        text = ctxcache.metrics_text(m)
        assert 'ctxcache_evicted_records_by_priority_total{priority="35"} 16' in text.splitlines()
        assert 'ctxcache_evicted_records_by_priority_total{priority="90"}' not in text
        h = to_hashes(SYSTEM + [5, 6, 7, 8])
        with m.acquire_vanilla(h, 12).lease as lease:
            assert [int(p) for p in lease.base_pages[:2]] == [0, 1]
        drain_and_check(m)


def test_at_its_durations_end_the_system_prompt_goes_in_lru_order():
    with make(16) as m:
        m.set_retention_time(0.0)
        keep = RetentionSpec([RetentionRange(0, len(SYSTEM), 90, duration=10.0)])
        prompt = SYSTEM + [1, 2, 3, 4]
        s = serve(m, prompt, keep)
        m.set_retention_time(1.0)
        a = serve(m, other(1))
        m.set_retention_time(2.0)
        b = serve(m, other(2))
        m.set_retention_time(3.0)
        assert serve(m, prompt, keep) == s  # touched: now after b
        m.set_retention_time(4.0)
        c = serve(m, other(3))
        d = serve(m, other(4))
        m.set_retention_time(13.0)
        assert m.record_priority(s) == 35
        assert m.retention_metrics.retention_expiries == 1
        order = [a, b, s, c, d]
        for i in range(len(order)):
            serve(m, other(20 + i))
            assert [r in m.records for r in order] == [j > i for j in range(len(order))]
        drain_and_check(m)


def test_lru_trim_cuts_a_priority_0_tail_before_a_priority_90_head():
    with make(12, policy="lru-trim") as m:
        spec = RetentionSpec([RetentionRange(0, 8, 90), RetentionRange(8, None, 0)])
        r = serve(m, other(1, 4), spec)
        assert m.record_priority(r) == 0
        x = serve(m, other(2, 4))
        y = serve(m, other(3, 4))
        serve(m, other(4, 2))
        assert pages(m, r) == [0, 1]
        assert m.record_priority(r) == 90
        assert x in m.records and y in m.records
        assert m.retention_metrics.trimmed_records_by_priority == {0: 1}
        drain_and_check(m)


def test_the_pin_budget_refuses_the_pin_past_it_and_admission_never_fails_below_it():
    with make(16) as m:
        p = serve(m, other(1, 3))
        q = serve(m, other(2, 2))
        with pytest.raises(ctxcache.ContractError, match="budget"):
            m.pin_record(p)  # the default budget is 0
        m.set_pin_budget(0.25)
        m.pin_record(p)
        with pytest.raises(ctxcache.ContractError, match="would hold 5 base KV page ids"):
            m.pin_record(q)
        metrics = m.retention_metrics
        assert (metrics.pins_refused, metrics.pinned_records, metrics.pinned_base_pages) == (2, 1, 3)
        for i in range(3):
            serve(m, other(50 + i, 4))
        big = to_hashes(other(60, 12))
        result = m.acquire_vanilla(big, len(big) * PAGE)  # 16 - 4 pages: admitted whatever the pins hold
        assert result.status == AcquireStatus.ACQUIRED
        result.lease.release()
        assert pages(m, p) == [0, 1, 2]
        m.check_invariants()
        m.unpin_record(p)
        with pytest.raises(ctxcache.ContractError, match="not pinned"):
            m.unpin_record(p)
        drain_and_check(m)


def test_a_pin_ends_with_its_duration():
    with make(8) as m:
        m.set_pin_budget(0.5)
        m.set_retention_time(0)
        p = serve(m, other(1, 2))
        m.pin_record(p, duration=5)
        serve(m, other(2, 2))
        serve(m, other(3, 5))
        assert p in m.records
        m.set_retention_time(5)
        assert m.retention_metrics.pin_expiries == 1
        serve(m, other(4, 4))
        assert p not in m.records
        drain_and_check(m)


@pytest.mark.parametrize("spec, error, needle", [
    (RetentionSpec([RetentionRange(0, 4, 101)]), ctxcache.InvalidArgumentError, "priority"),
    (RetentionSpec([RetentionRange(-1, 4, 50)]), ctxcache.InvalidArgumentError, "token_start"),
    (RetentionSpec([RetentionRange(4, 4, 50)]), ctxcache.InvalidArgumentError, "not after its start"),
    (RetentionSpec([RetentionRange(0, 4, 50, duration=-1.0)]), ctxcache.InvalidArgumentError, "duration"),
    (RetentionSpec([RetentionRange(0, 4, "high")]), ctxcache.ArgumentTypeError, "priority"),
    (RetentionSpec([RetentionRange()] * 65), ctxcache.InvalidArgumentError, "at most 64"),
    ("90", ctxcache.ArgumentTypeError, "RetentionSpec"),
])
def test_a_bad_spec_is_a_typed_error_and_publishes_nothing(spec, error, needle):
    with make(8) as m:
        h = to_hashes(other(1, 2))
        with m.acquire_vanilla(h, 8).lease as lease:
            with pytest.raises(error, match=needle):
                m.publish(lease, h, 8, retention=spec)
        assert len(m.records) == 0
        drain_and_check(m)


def test_the_clock_never_runs_backwards():
    with make(8) as m:
        m.set_retention_time(10)
        with pytest.raises(ctxcache.ContractError, match="never runs backwards"):
            m.set_retention_time(9.5)
        with pytest.raises(ctxcache.ArgumentTypeError):
            m.set_retention_time("soon")
