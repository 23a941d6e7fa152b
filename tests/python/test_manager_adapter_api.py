"""The manager calls a scheduler-driven adapter (vLLM's KVCacheManager, issue 28) needs, through Python:
``probe_vanilla`` (a lookup that changes nothing and equals the plan of the acquire after it),
``pools.acquirable_count`` (free + reclaimable: exactly what an acquire can take) and ``publish(...,
extend_record=True)`` (a lease's longer publication replaces its own record instead of nesting another).

Managers come from the ``make_manager`` fixture (page size 4), whose teardown drains every record and proves that
every pool is back to capacity and the invariants hold.
"""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import AcquireStatus, ContractError, LookupPolicy, PublishStatus, ResourceType, ReusePlanKind

from conftest import pool_state, to_hashes

BASE = ResourceType.BASE_KV_PAGE


class HashView(np.ndarray):
    """An ndarray subclass: the calls take their fully checked path for it, not the inline fast path."""


def publish_tokens(manager, tokens):
    h = to_hashes(tokens)
    result = manager.acquire_vanilla(h, len(tokens))
    assert result.status == AcquireStatus.ACQUIRED
    with result.lease as lease:
        return manager.publish(lease, h, len(tokens))


# ---- probe_vanilla ----------------------------------------------------------------------------------------------


def test_probe_reports_the_acquires_plan_and_changes_nothing(make_manager):
    m = make_manager(base_kv_pages=8)
    tokens = list(range(12))
    publish_tokens(m, tokens)  # pages 0, 1, 2
    h = to_hashes(tokens)
    before = pool_state(m)
    probe = m.probe_vanilla(h, 12)
    assert pool_state(m) == before  # the LRU, the metrics (prefix-cache queries), every refcount
    assert probe.kind == ReusePlanKind.FULL_INPUT_REWIND
    assert (probe.matched_token_length, probe.reuse_token_length) == (12, 8)
    assert probe.pages.dtype == np.int32 and not probe.pages.flags.writeable
    assert probe.pages.tolist() == [0, 1]
    longer = m.probe_vanilla(to_hashes(tokens + [5, 6]), 14)
    assert (longer.kind, longer.reuse_token_length, longer.pages.tolist()) == (ReusePlanKind.STANDARD, 12, [0, 1, 2])
    miss = m.probe_vanilla(to_hashes([99] * 8), 8)
    assert (miss.kind, miss.reuse_token_length, miss.pages.tolist()) == (ReusePlanKind.NO_REUSABLE_PREFIX, 0, [])
    assert m.probe_vanilla(np.zeros((0, 2), np.uint64), 0).kind == ReusePlanKind.STANDARD
    assert m.probe_vanilla(h.view(HashView), 12) == probe  # the checked (slow) path agrees
    assert pool_state(m) == before

    result = m.acquire_vanilla(h, 12)
    with result.lease as lease:
        assert result.plan.kind == probe.kind
        assert result.plan.reuse_token_length == probe.reuse_token_length
        assert result.plan.matched_token_length == probe.matched_token_length
        assert lease.base_pages[:2].tolist() == probe.pages.tolist()


def test_probe_validates_like_the_acquire(make_manager):
    m = make_manager()
    h = to_hashes(list(range(12)))
    with pytest.raises(ContractError, match="full-block hashes for 11 tokens"):
        m.probe_vanilla(h, 11)
    with pytest.raises(ctxcache.InvalidArgumentError):
        m.probe_vanilla(h, -1)
    with pytest.raises(ctxcache.ArgumentTypeError):
        m.probe_vanilla("hashes", 12)


def test_probe_equals_the_following_acquire_in_many_states(make_manager):
    m = make_manager(base_kv_pages=16, max_records=4)
    rng = np.random.default_rng(7)
    live = []
    for step in range(150):
        lane = int(rng.integers(3))
        n = int(rng.integers(0, 20))
        tokens = [1000 * lane + i for i in range(n)]
        if rng.integers(2):
            tokens[n // 2:] = [100_000 + step * 50 + i for i in range(n - n // 2)]
        h = to_hashes(tokens)
        before = pool_state(m)
        probe = m.probe_vanilla(h, n)
        assert pool_state(m) == before, step
        result = m.acquire_vanilla(h, n)
        assert (result.plan.kind, result.plan.reuse_token_length, result.plan.matched_token_length) == (
            probe.kind, probe.reuse_token_length, probe.matched_token_length), step
        if result.lease is not None:
            assert result.lease.base_pages[:len(probe.pages)].tolist() == probe.pages.tolist(), step
            if len(h) and rng.integers(4):
                m.publish(result.lease, h, n)
            live.append(result.lease)
        while len(live) > 2 or (live and rng.integers(3) == 0):
            live.pop(0).close()
        m.check_invariants()
    for lease in live:
        lease.close()
    assert m.metrics.evicted_records > 5


# ---- acquirable_count ---------------------------------------------------------------------------------------------


def test_acquirable_count_is_exactly_what_an_acquire_can_take(make_manager):
    m = make_manager(base_kv_pages=12)
    publish_tokens(m, list(range(8)))         # pages 0, 1 cached
    b = publish_tokens(m, list(range(100, 112))).record  # pages 2, 3, 4 cached
    held = m.acquire_vanilla(np.zeros((0, 2), np.uint64), 8, LookupPolicy.BYPASS).lease  # pages 5, 6
    assert (m.pools.free_count(BASE), m.pools.acquirable_count(BASE)) == (5, 10)
    assert m.pools.acquirable_count(ResourceType.DRAFT_KV_PAGE) == 0
    before = pool_state(m)
    assert m.acquire_vanilla(np.zeros((0, 2), np.uint64), 44, LookupPolicy.BYPASS).status == \
        AcquireStatus.INSUFFICIENT_CAPACITY
    assert pool_state(m) == before
    m.set_pin_budget(0.5)
    m.pin_record(b)  # a pinned record holds its pages like a lease
    assert m.pools.acquirable_count(BASE) == 7
    assert m.acquire_vanilla(np.zeros((0, 2), np.uint64), 32, LookupPolicy.BYPASS).status == \
        AcquireStatus.INSUFFICIENT_CAPACITY
    with m.acquire_vanilla(np.zeros((0, 2), np.uint64), 28, LookupPolicy.BYPASS).lease as exact:
        assert len(exact.base_pages) == 7
        assert m.pools.acquirable_count(BASE) == 0
    m.unpin_record(b)
    assert m.pools.acquirable_count(BASE) == 10
    held.close()
    with pytest.raises(ctxcache.InvalidArgumentError):
        m.pools.acquirable_count(9)


# ---- publish(extend_record=True) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extend", [True, False])
def test_a_growing_lease_keeps_one_record(make_manager, extend):
    m = make_manager(base_kv_pages=8)
    tokens = list(range(20))
    h = to_hashes(tokens)
    with m.acquire_vanilla(h, 22).lease as lease:
        results = [m.publish(lease, h, blocks * 4, extend_record=extend) for blocks in (1, 3, 5)]
        assert [r.status for r in results] == [PublishStatus.PUBLISHED] * 3
        assert results[-1].canonical_base_pages.tolist() == lease.base_pages[:5].tolist()
        if extend:
            assert m.records.lru() == [results[-1].record]
            assert [m.pools.cache_ref_count((BASE, p)) for p in range(5)] == [1] * 5
        else:
            assert len(m.records) == 3
            assert [m.pools.cache_ref_count((BASE, p)) for p in range(5)] == [3, 2, 2, 1, 1]
        m.check_invariants()
    assert m.metrics.evicted_records == 0  # superseding is not evicting
    assert m.metrics.superseded_records == (2 if extend else 0)
    assert m.probe_vanilla(h, 22).reuse_token_length == 20


def test_growth_at_the_record_limit_evicts_no_other_record(make_manager):
    m = make_manager(base_kv_pages=8, max_records=2)
    other = publish_tokens(m, [90, 91, 92, 93]).record
    h = to_hashes(list(range(12)))
    with m.acquire_vanilla(h, 12).lease as lease:
        first = m.publish(lease, h, 4, extend_record=True)
        second = m.publish(lease, h, 12, extend_record=True)
    assert sorted(m.records.lru()) == sorted([other, second.record])
    assert first.record not in m.records
    assert m.metrics.evicted_records == 0


def test_an_evicted_own_record_is_not_extended(make_manager):
    m = make_manager(base_kv_pages=8)
    h = to_hashes(list(range(12)))
    with m.acquire_vanilla(h, 12).lease as lease:
        first = m.publish(lease, h, 4, extend_record=True)
        m.evict_record(first.record)
        m.publish(lease, h, 12, extend_record=True)
        assert len(m.records) == 1
        # Back to nested records: the setting is per call.
        m.publish(lease, h, 8)
        assert len(m.records) == 2
    m.check_invariants()


def test_growth_on_a_spec_lease_is_refused_with_nothing_changed(make_manager):
    m = make_manager(base_kv_pages=8, draft_kv_pages=8)
    h = to_hashes(list(range(8)))
    with m.acquire_spec(h, 9).lease as lease:
        m.publish(lease, h, 4)
        before = pool_state(m)
        with pytest.raises(ContractError, match="vanilla"):
            m.publish(lease, h, 8, extend_record=True)
        assert pool_state(m) == before
        with pytest.raises(ctxcache.ArgumentTypeError):
            m.publish(lease, h, 8, extend_record="yes")
        assert m.publish(lease, h, 8).status == PublishStatus.PUBLISHED
    assert len(m.records) == 2
