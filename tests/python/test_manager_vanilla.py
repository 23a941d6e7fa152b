"""The vanilla (attention-only) manager through Python: acquire, publish, reuse, grow, evict, leases, views.

Every test runs on the ``manager`` fixture (page size 4, 8 base pages, 16 records) or a ``make_manager`` variant,
whose teardown proves that no lease is left, that evicting every record returns every pool to full capacity, and
that the invariant check passes. Fresh pools hand out ids FIFO from 0, and freed ids go to the back.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxcache
from ctxcache import AcquireStatus, LeaseState, LookupPolicy, PublishStatus, ResourceType, ReusePlanKind, ReusePlanMode

from conftest import PAGE, drain_and_check, to_hashes

BASE = ResourceType.BASE_KV_PAGE

A = [11, 12, 13, 14]  # one block each
B = [21, 22, 23, 24]
C = [31, 32, 33, 34]
D = [41, 42, 43, 44]
E = [51, 52, 53, 54]


def refs(manager, page):
    return manager.pools.active_ref_count((BASE, page)), manager.pools.cache_ref_count((BASE, page))


def free(manager):
    return manager.pools.free_count(BASE)


def pages(lease):
    return [int(p) for p in lease.base_pages]


def produce(manager, hashes, tokens, publish_tokens=None):
    """Cold-or-warm acquire, publish the full blocks, release: the record id and the lease's pages."""
    h = hashes(tokens)
    result = manager.acquire_vanilla(h, len(tokens))
    assert result.status == AcquireStatus.ACQUIRED
    with result.lease as lease:
        leased = pages(lease)
        published = manager.publish(lease, h, publish_tokens if publish_tokens is not None else len(tokens))
    manager.check_invariants()
    return published, leased


# ---- cold and warm ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 4, 5, 8, 9, 12, 13, 32])
def test_cold_miss_allocates_every_input_page(manager, hashes, n):
    tokens = list(range(100, 100 + n))
    result = manager.acquire_vanilla(hashes(tokens), n)
    expected_pages = -(-n // PAGE)
    assert result.status == AcquireStatus.ACQUIRED
    plan = result.plan
    assert plan.mode == ReusePlanMode.VANILLA
    assert plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX
    assert (plan.matched_token_length, plan.reuse_token_length, plan.bound_base_page_count) == (0, 0, 0)
    assert plan.demand == ctxcache.ResourceDemand(base_kv_pages=expected_pages)
    with result.lease as lease:
        assert pages(lease) == list(range(expected_pages))
        assert free(manager) == 8 - expected_pages
        assert [int(p) for p in manager.pools.free_list(BASE)] == list(range(expected_pages, 8))
        for p in range(8):
            assert refs(manager, p) == ((1, 0) if p < expected_pages else (0, 0))
        assert manager.live_lease_count == 1
        manager.check_invariants()
    assert free(manager) == 8
    assert manager.live_lease_count == 0


def test_empty_prompt_gets_an_empty_lease(manager):
    result = manager.acquire_vanilla(np.zeros((0, 2), dtype=np.uint64), 0)
    assert result.status == AcquireStatus.ACQUIRED
    assert result.plan.kind == ReusePlanKind.STANDARD  # reference c.6: n == 0 gives the default (empty) plan
    assert result.plan.demand == ctxcache.ResourceDemand()
    with result.lease as lease:
        assert pages(lease) == []
        assert free(manager) == 8


def test_cold_miss_then_warm_hit_binds_published_canonical_pages(manager, hashes):
    tokens = A + B + [1, 2]  # two full blocks and a partial tail
    h = hashes(tokens)
    cold = manager.acquire_vanilla(h, 10)
    producer = cold.lease
    assert pages(producer) == [0, 1, 2]

    published = manager.publish(producer, h, 10)
    assert published.status == PublishStatus.PUBLISHED
    assert published.record == 1  # record ids start at 1
    assert [int(p) for p in published.canonical_base_pages] == [0, 1]
    assert published.published_base_full_block_count == 2
    assert refs(manager, 0) == (1, 1) and refs(manager, 1) == (1, 1) and refs(manager, 2) == (1, 0)
    record = manager.records[1]
    assert record.id == 1 and record.full_block_count == 2
    assert [int(p) for p in record.base_page_path] == [0, 1]
    assert np.array_equal(record.logical_block_hashes, h)
    assert np.array_equal(record.terminal_hash, h[1])
    assert record.exact_checkpoint_length is None and record.recurrent_snapshot_slot is None
    assert manager.base_index.lookup(h[0]) == 0 and manager.base_index.lookup(h[1]) == 1
    assert len(manager.base_index) == 2

    producer.release()
    assert refs(manager, 0) == (0, 1) and refs(manager, 2) == (0, 0)
    assert free(manager) == 6  # the private tail page went back; the published pages stay cached
    assert [int(p) for p in manager.pools.free_list(BASE)] == [3, 4, 5, 6, 7, 2]
    manager.check_invariants()

    warm = manager.acquire_vanilla(h, 10)
    assert warm.status == AcquireStatus.ACQUIRED
    plan = warm.plan
    assert plan.kind == ReusePlanKind.STANDARD
    assert plan.matched_token_length == 8 and plan.reuse_token_length == 8
    assert plan.bound_base_page_count == 2
    assert plan.demand == ctxcache.ResourceDemand(base_kv_pages=1)
    with warm.lease as consumer:
        assert pages(consumer) == [0, 1, 3]  # canonical pages first, then the next free page (FIFO)
        assert refs(manager, 0) == (1, 1) and refs(manager, 1) == (1, 1) and refs(manager, 3) == (1, 0)
        manager.check_invariants()
    producer.close()


@pytest.mark.parametrize("query,matched,kind,reuse,bound_pages,demand", [
    (A, 4, ReusePlanKind.FULL_INPUT_REWIND, 0, [], 1),
    (A + [9], 4, ReusePlanKind.STANDARD, 4, [0], 1),
    (A + B, 8, ReusePlanKind.FULL_INPUT_REWIND, 4, [0], 1),
    (A + B + C, 12, ReusePlanKind.FULL_INPUT_REWIND, 8, [0, 1], 1),
    (A + B + C + [9], 12, ReusePlanKind.STANDARD, 12, [0, 1, 2], 1),
    (A + B + C + D, 12, ReusePlanKind.STANDARD, 12, [0, 1, 2], 1),
    (A + B + D, 8, ReusePlanKind.STANDARD, 8, [0, 1], 1),  # lookup stops at the first missing block
    (A + D + C, 4, ReusePlanKind.STANDARD, 4, [0], 2),
    (D + B + C, 0, ReusePlanKind.NO_REUSABLE_PREFIX, 0, [], 3),  # a changed parent changes every descendant
    (B, 0, ReusePlanKind.NO_REUSABLE_PREFIX, 0, [], 1),
])
def test_warm_plans_against_one_published_prompt(manager, hashes, query, matched, kind, reuse, bound_pages, demand):
    produce(manager, hashes, A + B + C)  # record on pages 0, 1, 2
    result = manager.acquire_vanilla(hashes(query), len(query))
    plan = result.plan
    assert plan.kind == kind
    assert plan.matched_token_length == matched
    assert plan.reuse_token_length == reuse
    assert plan.bound_base_page_count == len(bound_pages)
    assert plan.demand.base_kv_pages == demand
    with result.lease as lease:
        assert pages(lease)[:len(bound_pages)] == bound_pages
        assert len(pages(lease)) == -(-len(query) // PAGE)
        assert set(pages(lease)[len(bound_pages):]).isdisjoint({0, 1, 2})
        manager.check_invariants()


def test_full_input_rewind_recomputes_last_page(manager, hashes):
    produce(manager, hashes, A + B)
    result = manager.acquire_vanilla(hashes(A + B), 8)
    plan = result.plan
    assert plan.kind == ReusePlanKind.FULL_INPUT_REWIND
    assert plan.matched_token_length == 8  # what the cache holds ...
    assert plan.reuse_token_length == 4  # ... but the last page is recomputed for the last token's logits
    assert plan.bound_base_page_count == 1 and plan.demand.base_kv_pages == 1
    with result.lease as lease:
        assert pages(lease) == [0, 2]
        assert refs(manager, 0) == (1, 1) and refs(manager, 1) == (0, 1) and refs(manager, 2) == (1, 0)
        # Publishing the same endpoint from the rewound lease finds the existing record, canonical pages unchanged.
        again = manager.publish(lease, hashes(A + B), 8)
        assert again.status == PublishStatus.EXISTING_RECORD and again.record == 1
        assert [int(p) for p in again.canonical_base_pages] == [0, 1]
        assert refs(manager, 2) == (1, 0)


def test_bypass_uses_private_pages_without_lookup(manager, hashes):
    produce(manager, hashes, A + B)
    h = hashes(A + B + [7])
    result = manager.acquire_vanilla(h, 9, LookupPolicy.BYPASS)
    plan = result.plan
    assert plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX
    assert (plan.matched_token_length, plan.reuse_token_length, plan.bound_base_page_count) == (0, 0, 0)
    assert plan.demand.base_kv_pages == 3
    with result.lease as lease:
        assert pages(lease) == [2, 3, 4]
        assert refs(manager, 0) == (0, 1) and refs(manager, 1) == (0, 1)  # the cached pages are not pinned
    assert ctxcache.ContextCacheLookupPolicy is LookupPolicy


def test_partial_tail_stays_private_and_is_not_published(manager, hashes):
    tokens = A + B + [1, 2, 3]
    published, leased = produce(manager, hashes, tokens)
    assert leased == [0, 1, 2]
    assert published.published_base_full_block_count == 2
    assert [int(p) for p in published.canonical_base_pages] == [0, 1]
    assert refs(manager, 2) == (0, 0)  # the tail page was freed with the lease
    # A consumer with a different tail reuses both full blocks and gets its own tail page.
    result = manager.acquire_vanilla(hashes(A + B + [9]), 9)
    assert result.plan.reuse_token_length == 8 and result.plan.demand.base_kv_pages == 1
    with result.lease as lease:
        assert pages(lease)[:2] == [0, 1] and pages(lease)[2] not in (0, 1)


def test_publish_counts_only_resident_full_blocks(manager, hashes):
    h = hashes(A + B + C)
    result = manager.acquire_vanilla(h, 12)
    with result.lease as lease:
        published = manager.publish(lease, h, 7)  # one resident full block
        assert published.published_base_full_block_count == 1
        assert [int(p) for p in published.canonical_base_pages] == [0]
        record = manager.records[published.record]
        assert record.full_block_count == 1 and np.array_equal(record.terminal_hash, h[0])
        # Hashes bound the count too: two hashes with everything resident publish two blocks.
        second = manager.publish(lease, h[:2], 12)
        assert second.published_base_full_block_count == 2 and second.record == published.record + 1
        assert [int(p) for p in second.canonical_base_pages] == [0, 1]
        assert refs(manager, 0) == (1, 2)  # shared ancestor: one cache ref per record
        assert manager.records.lru() == [1, 2]


def test_publishing_an_existing_endpoint_promotes_it_to_mru(manager, hashes):
    first, _ = produce(manager, hashes, A + B)
    second, _ = produce(manager, hashes, C + D)
    assert manager.records.lru() == [first.record, second.record]
    result = manager.acquire_vanilla(hashes(A + B + [5]), 9)  # warm hit on the first record
    # A plain base-block hit does not touch the owning record's recency.
    assert manager.records.lru() == [first.record, second.record]
    with result.lease as lease:
        again = manager.publish(lease, hashes(A + B), 9)
        assert again.status == PublishStatus.EXISTING_RECORD
        assert again.record == first.record
        assert [int(p) for p in again.canonical_base_pages] == [0, 1]
        assert again.published_base_full_block_count == 2
        assert len(manager.records) == 2
        assert manager.records.lru() == [second.record, first.record]
        assert refs(manager, 0) == (1, 1)  # no second cache ref for an existing record
        manager.check_invariants()


def test_canonical_projection_keeps_the_second_producers_private_page(manager, hashes):
    # Two producers miss concurrently on prompts that share block A.
    h1, h2 = hashes(A + B + [1]), hashes(A + C + [1])
    first = manager.acquire_vanilla(h1, 9).lease
    second = manager.acquire_vanilla(h2, 9).lease
    assert pages(first) == [0, 1, 2] and pages(second) == [3, 4, 5]

    p1 = manager.publish(first, h1, 9)
    assert [int(p) for p in p1.canonical_base_pages] == [0, 1]
    p2 = manager.publish(second, h2, 9)
    assert p2.status == PublishStatus.PUBLISHED and p2.record == p1.record + 1
    # Block A keeps the first committer's page 0; block C becomes the second producer's page 4.
    assert [int(p) for p in p2.canonical_base_pages] == [0, 4]
    assert [int(p) for p in manager.records[p2.record].base_page_path] == [0, 4]
    assert manager.base_index.lookup(h2[0]) == 0 and manager.base_index.lookup(h2[1]) == 4
    # The lease is not rebound: it keeps computing on its private duplicate page 3.
    assert pages(second) == [3, 4, 5]
    assert refs(manager, 0) == (1, 2) and refs(manager, 3) == (1, 0) and refs(manager, 4) == (1, 1)
    manager.check_invariants()

    second.release()
    assert refs(manager, 3) == (0, 0) and refs(manager, 5) == (0, 0)  # the duplicate is freed with the lease
    assert refs(manager, 4) == (0, 1)
    first.release()
    assert free(manager) == 8 - 3  # pages 0, 1 and 4 stay cached
    manager.check_invariants()


def test_warm_consumer_extends_the_prefix_into_a_branch_record(manager, hashes):
    base, _ = produce(manager, hashes, A + B)
    h = hashes(A + B + C + D)
    result = manager.acquire_vanilla(h, 16)
    with result.lease as lease:
        assert pages(lease) == [0, 1, 2, 3]
        published = manager.publish(lease, h, 16)
        assert [int(p) for p in published.canonical_base_pages] == [0, 1, 2, 3]
        assert refs(manager, 0) == (1, 2) and refs(manager, 2) == (1, 1)
    # Evicting the branch keeps the shared ancestors cached for the other record.
    manager.evict_record(published.record)
    assert refs(manager, 0) == (0, 1) and refs(manager, 2) == (0, 0)
    assert manager.base_index.lookup(h[2]) is None and manager.base_index.lookup(h[0]) == 0
    assert manager.metrics.reclaimed_base_kv_pages == 2
    assert manager.records.lru() == [base.record]


# ---- capacity: acquire, grow, eviction ----------------------------------------------------------------------


def test_insufficient_capacity_changes_nothing(manager, hashes):
    produce(manager, hashes, A)
    held = manager.acquire_vanilla(hashes(A + [1]), 5).lease  # pins page 0
    before = (free(manager), manager.records.lru(), manager.metrics, [int(p) for p in manager.pools.free_list(BASE)])
    result = manager.acquire_vanilla(np.zeros((0, 2), dtype=np.uint64), 4 * 8)  # 8 pages; 7 are reclaimable at most
    assert result.status == AcquireStatus.INSUFFICIENT_CAPACITY
    assert result.lease is None
    assert result.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX and result.plan.demand.base_kv_pages == 8
    after = (free(manager), manager.records.lru(), manager.metrics, [int(p) for p in manager.pools.free_list(BASE)])
    assert after == before
    manager.check_invariants()
    held.close()


def test_infeasible_warm_acquire_rolls_back_its_pins(make_manager, hashes):
    manager = make_manager(base_kv_pages=3)
    produce(manager, hashes, A + B)
    result = manager.acquire_vanilla(hashes(A + B + C + D), 16)  # binds 2, needs 2 more, only 1 free
    assert result.status == AcquireStatus.INSUFFICIENT_CAPACITY and result.lease is None
    assert result.plan.kind == ReusePlanKind.STANDARD and result.plan.bound_base_page_count == 2
    assert refs(manager, 0) == (0, 1) and refs(manager, 1) == (0, 1)
    assert manager.metrics.evicted_records == 0 and len(manager.records) == 1
    manager.check_invariants()


def test_grow_base_pages_appends_private_pages(manager, hashes):
    result = manager.acquire_vanilla(hashes(A + [1]), 5)
    with result.lease as lease:
        assert pages(lease) == [0, 1]
        assert manager.grow_base_pages(lease, 3) is True
        assert pages(lease) == [0, 1, 2, 3, 4]
        assert free(manager) == 3
        assert manager.grow_base_pages(lease, 0) is True
        assert pages(lease) == [0, 1, 2, 3, 4]
        for p in range(5):
            assert refs(manager, p) == (1, 0)
        manager.check_invariants()
    assert free(manager) == 8


def test_grow_base_pages_failure_changes_nothing(manager, hashes):
    produce(manager, hashes, A)  # record on page 0
    result = manager.acquire_vanilla(hashes(A + B + [1]), 9)  # pins page 0, allocates 1 and 2
    with result.lease as lease:
        before = (pages(lease), free(manager), manager.records.lru(), manager.metrics,
                  [int(p) for p in manager.pools.free_list(BASE)])
        assert manager.grow_base_pages(lease, 6) is False  # 5 free, the cached page is pinned
        after = (pages(lease), free(manager), manager.records.lru(), manager.metrics,
                 [int(p) for p in manager.pools.free_list(BASE)])
        assert after == before
        manager.check_invariants()
        assert manager.grow_base_pages(lease, 5) is True
        assert pages(lease) == [0, 1, 2, 3, 4, 5, 6, 7]
        assert free(manager) == 0


def test_grow_evicts_unpinned_records_when_needed(manager, hashes):
    a, _ = produce(manager, hashes, A + B)  # pages 0, 1
    result = manager.acquire_vanilla(np.zeros((0, 2), dtype=np.uint64), 4 * 5)  # pages 2..6
    with result.lease as lease:
        assert manager.grow_base_pages(lease, 3) is True  # 1 free + 2 reclaimed
        assert manager.metrics.evicted_records == 1 and manager.metrics.reclaimed_base_kv_pages == 2
        assert a.record not in manager.records
        assert pages(lease) == [2, 3, 4, 5, 6, 7, 0, 1]
        manager.check_invariants()


def test_eviction_under_pressure_frees_exactly_the_unpinned_resources(manager, hashes):
    a, _ = produce(manager, hashes, A + B)  # pages 0, 1
    b, _ = produce(manager, hashes, C + D)  # pages 2, 3
    c, _ = produce(manager, hashes, E)  # page 4
    assert manager.records.lru() == [a.record, b.record, c.record]
    assert free(manager) == 3
    pin = manager.acquire_vanilla(hashes(A + B + [1]), 9).lease  # pins a's pages, takes page 5
    assert pages(pin) == [0, 1, 5]
    assert free(manager) == 2

    # 5 pages = 2 free + b's 2 + c's 1. Record-granular LRU walks a, b, c: a is evicted first but, pinned, it
    # returns no page; the planner counts only what really comes back, so it has to go on through b and c.
    result = manager.acquire_vanilla(np.zeros((0, 2), dtype=np.uint64), 4 * 5)
    assert result.status == AcquireStatus.ACQUIRED
    metrics = manager.metrics
    assert metrics.evicted_records == 3
    assert metrics.reclaimed_base_kv_pages == 3  # b's two pages and c's one; a's pages are still pinned
    assert len(manager.records) == 0
    assert refs(manager, 0) == (1, 0) and refs(manager, 1) == (1, 0)  # pinned, no longer cached
    assert manager.base_index.lookup(hashes(A)[0]) is None
    with result.lease as lease:
        assert sorted(pages(lease)) == [2, 3, 4, 6, 7]
        manager.check_invariants()
    pin.close()
    assert free(manager) == 8


def test_eviction_takes_the_shortest_lru_prefix(manager, hashes):
    a, _ = produce(manager, hashes, A + B)  # pages 0, 1
    b, _ = produce(manager, hashes, C + D)  # pages 2, 3
    c, _ = produce(manager, hashes, E)  # page 4
    result = manager.acquire_vanilla(np.zeros((0, 2), dtype=np.uint64), 4 * 4)  # 3 free + a's 2 >= 4
    assert result.status == AcquireStatus.ACQUIRED
    assert manager.records.lru() == [b.record, c.record]
    assert manager.metrics.evicted_records == 1 and manager.metrics.reclaimed_base_kv_pages == 2
    with result.lease as lease:
        assert pages(lease) == [5, 6, 7, 0]
    assert free(manager) == 8 - 3


def test_evict_record_metrics_count_only_pages_returned_to_the_free_list(manager, hashes):
    h = hashes(A + B)
    result = manager.acquire_vanilla(h, 8)
    with result.lease as lease:
        short = manager.publish(lease, h, 4)  # record [A] on page 0
        long = manager.publish(lease, h, 8)  # record [A, B] on pages 0, 1
        manager.evict_record(short.record)
        assert manager.metrics.evicted_records == 1
        assert manager.metrics.reclaimed_base_kv_pages == 0  # page 0 is still cached by the long record
        assert refs(manager, 0) == (1, 1)
    manager.evict_record(long.record)
    assert manager.metrics == ctxcache.ManagerMetrics(2, 2, 0, 0, 0, prefix_cache_queries=8, prefix_cache_hits=0)
    assert free(manager) == 8
    manager.check_invariants()


def test_record_limit_evicts_the_lru_record(make_manager, hashes):
    manager = make_manager(max_records=2)
    r1, _ = produce(manager, hashes, A)
    r2, _ = produce(manager, hashes, B)
    assert manager.records.lru() == [r1.record, r2.record]
    assert free(manager) == 6
    r3, _ = produce(manager, hashes, C)
    assert r3.status == PublishStatus.PUBLISHED and r3.record == 3
    assert manager.records.lru() == [r2.record, r3.record]
    assert manager.metrics.evicted_records == 1 and manager.metrics.reclaimed_base_kv_pages == 1
    assert manager.base_index.lookup(hashes(A)[0]) is None
    assert free(manager) == 6
    # Touching r2 (existing publication) makes r3 the next victim.
    produce(manager, hashes, B)
    r4, _ = produce(manager, hashes, D)
    assert manager.records.lru() == [r2.record, r4.record]


def test_max_records_zero_keeps_nothing(make_manager, hashes):
    manager = make_manager(max_records=0)
    h = hashes(A + B)
    result = manager.acquire_vanilla(h, 8)
    with result.lease as lease:
        published = manager.publish(lease, h, 8)
        assert published.status == PublishStatus.PUBLISHED
        assert published.record is None
        assert [int(p) for p in published.canonical_base_pages] == [0, 1]
        assert len(manager.records) == 0 and len(manager.base_index) == 0
        assert refs(manager, 0) == (1, 0)
        assert manager.metrics.evicted_records == 1
        manager.check_invariants()
    again = manager.acquire_vanilla(h, 8)
    assert again.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX
    again.lease.close()


# ---- leases -------------------------------------------------------------------------------------------------


def test_lease_as_context_manager_releases_on_exit(manager, hashes):
    with manager.acquire_vanilla(hashes(A + B), 9).lease as lease:
        assert lease.valid and lease.state == LeaseState.LIVE and lease.mode == ReusePlanMode.VANILLA
        assert manager.live_lease_count == 1 and free(manager) == 5
    assert manager.live_lease_count == 0 and free(manager) == 8
    assert not lease.valid and lease.state == LeaseState.RELEASED
    with pytest.raises(ctxcache.InvalidHandleError):
        lease.base_pages
    lease.close()  # idempotent


def test_lease_releases_on_exception_inside_with(manager, hashes):
    with pytest.raises(RuntimeError):
        with manager.acquire_vanilla(hashes(A), 4).lease:
            raise RuntimeError("model execution failed")
    assert manager.live_lease_count == 0 and free(manager) == 8


def test_dropped_lease_is_released_by_the_garbage_collector(manager, hashes):
    manager.acquire_vanilla(hashes(A), 4)
    gc.collect()
    assert manager.live_lease_count == 0 and free(manager) == 8


def test_base_pages_is_a_read_only_int32_array(manager, hashes):
    with manager.acquire_vanilla(hashes(A + B), 8).lease as lease:
        view = lease.base_pages
        assert isinstance(view, np.ndarray)
        assert view.dtype == np.int32 and view.shape == (2,)
        assert view.flags.writeable is False
        with pytest.raises(ValueError):
            view[0] = 5
        assert pages(lease) == [0, 1]
        # Growing refreshes the view.
        manager.grow_base_pages(lease, 1)
        assert pages(lease) == [0, 1, 2]


def test_release_twice_raises_invalid_handle(manager, hashes):
    lease = manager.acquire_vanilla(hashes(A), 4).lease
    lease.release()
    assert lease.state == LeaseState.RELEASED and not lease.valid
    assert free(manager) == 8 and manager.live_lease_count == 0
    with pytest.raises(ctxcache.InvalidHandleError, match="already released"):
        lease.release()
    with pytest.raises(ctxcache.InvalidHandleError):
        lease.base_pages
    manager.check_invariants()
    lease.close()
    with pytest.raises(ctxcache.InvalidHandleError):
        lease.release()


def test_closing_manager_with_live_lease_orphans_it(make_manager, hashes):
    manager = make_manager()
    lease = manager.acquire_vanilla(hashes(A + B), 8).lease
    assert pages(lease) == [0, 1]  # also caches the view
    with pytest.raises(ctxcache.LeasesOutstandingError, match="1 live lease"):
        manager.close()
    assert manager.closed
    assert lease.state == LeaseState.ORPHANED and not lease.valid
    with pytest.raises(ctxcache.InvalidHandleError, match="outlived"):
        lease.base_pages
    with pytest.raises(ctxcache.InvalidHandleError):
        lease.release()
    with pytest.raises(ctxcache.InvalidHandleError):
        manager.check_invariants()
    lease.close()  # an orphaned lease can still be freed
    assert lease.state == LeaseState.RELEASED
    manager.close()  # idempotent


def test_closing_manager_after_leases_is_clean(make_manager, hashes):
    manager = make_manager()
    with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=2)) as other:
        with other.acquire_vanilla(hashes(A), 4).lease:
            pass
    assert other.closed
    manager.close()
    assert manager.closed


def test_refcounts_count_every_lease_and_record(manager, hashes):
    h = hashes(A + B + [1])
    producer = manager.acquire_vanilla(h, 9).lease
    manager.publish(producer, h, 9)
    consumers = [manager.acquire_vanilla(h, 9).lease for _ in range(2)]
    assert refs(manager, 0) == (3, 1) and refs(manager, 1) == (3, 1)
    assert [pages(c) for c in consumers] == [[0, 1, 3], [0, 1, 4]]
    assert manager.pools.active_ref_count(ctxcache.ResourceId(BASE, 0)) == 3
    assert manager.pools.cache_ref_count(BASE, 1) == 1
    manager.check_invariants()
    for lease in [producer] + consumers:
        lease.release()
        manager.check_invariants()
    assert refs(manager, 0) == (0, 1)
    for lease in [producer] + consumers:
        lease.close()


def test_plan_outlives_its_call(manager, hashes):
    # The plan is a view into the call's result struct: it must keep that memory alive.
    result = manager.acquire_vanilla(hashes(A + B), 10)
    plan = result.plan
    result.lease.close()
    del result
    gc.collect()
    from ctxcache._ffi import ffi
    junk = []
    for _ in range(200):
        j = ffi.new("ctxc_acquire_result_t *")
        j.plan.kind = 2
        j.plan.demand.base_kv_pages = 777
        junk.append(j)
    assert plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX and plan.demand.base_kv_pages == 3


def test_a_plan_read_after_later_acquires_describes_its_own(manager, hashes):
    # A plan is made on first read, from its own acquire's result (each acquire fills a fresh one).
    produce(manager, hashes, A + B)
    hit = manager.acquire_vanilla(hashes(A + B + [1]), 9)
    miss = manager.acquire_vanilla(hashes(C + D), 8)
    bypass = manager.acquire_vanilla(hashes(A + B), 8, LookupPolicy.BYPASS)
    for result in (hit, miss, bypass):
        result.lease.close()
    assert (hit.plan.kind, hit.plan.reuse_token_length, hit.plan.bound_base_page_count,
            hit.plan.demand.base_kv_pages) == (ReusePlanKind.STANDARD, 8, 2, 1)
    assert (miss.plan.kind, miss.plan.reuse_token_length, miss.plan.demand.base_kv_pages) == (
        ReusePlanKind.NO_REUSABLE_PREFIX, 0, 2)
    assert (bypass.plan.mode, bypass.plan.matched_token_length, bypass.plan.bound_base_page_count) == (
        ReusePlanMode.VANILLA, 0, 0)  # the record was there: bypassed
    assert hit.plan is hit.plan  # made once


def test_publish_result_outlives_later_calls(manager, hashes):
    # The C view of the canonical pages dies with the next mutating call: the result keeps a copy of its own.
    first, _ = produce(manager, hashes, A + B)
    second, _ = produce(manager, hashes, C)
    grown = manager.acquire_vanilla(hashes(D), 4).lease
    assert manager.grow_base_pages(grown, 2) is True
    grown.close()
    assert (first.status, first.record, first.published_base_full_block_count) == (PublishStatus.PUBLISHED, 1, 2)
    assert [int(p) for p in first.canonical_base_pages] == [0, 1] and [int(p) for p in second.canonical_base_pages] == [2]
    pages = first.canonical_base_pages
    assert pages.dtype == np.int32 and pages.flags.writeable is False and pages is first.canonical_base_pages
    with pytest.raises(ValueError):
        pages[0] = 7
    assert first == first and first != second


# ---- views ----------------------------------------------------------------------------------------------------


def test_records_view(manager, hashes):
    a, _ = produce(manager, hashes, A + B + [1])
    b, _ = produce(manager, hashes, C)
    assert len(manager.records) == 2
    assert manager.records.lru() == [1, 2] and list(manager.records) == [1, 2]
    assert 1 in manager.records and 3 not in manager.records
    ra = manager.records[a.record]
    assert [int(p) for p in ra.base_page_path] == [0, 1]
    assert ra.base_page_path.dtype == np.int32 and ra.base_page_path.flags.writeable is False
    assert ra.draft_page_path.shape == (0,)
    assert ra.logical_block_hashes.shape == (2, 2) and ra.logical_block_hashes.dtype == np.uint64
    rb = manager.records.get(b.record)
    assert [int(p) for p in rb.base_page_path] == [3]  # page 2 was the first record's private tail page
    assert rb.full_block_count == 1 and np.array_equal(rb.terminal_hash, hashes(C)[0])
    assert manager.metadata_bytes > 0


def test_pools_view(make_manager):
    manager = make_manager(base_kv_pages=5, draft_kv_pages=2, recurrent_snapshot_slots=1)
    assert manager.page_size == PAGE
    assert [manager.pools.capacity(t) for t in ResourceType] == [5, 2, 1, 0]
    assert [manager.pools.free_count(t) for t in ResourceType] == [5, 2, 1, 0]
    assert [int(p) for p in manager.pools.free_list(ResourceType.DRAFT_KV_PAGE)] == [0, 1]
    assert manager.pools.free_list(ResourceType.PARTIAL_KV_SNAPSHOT).shape == (0,)


# ---- property: random operation sequences keep every invariant and leak nothing ------------------------------


BLOCKS = [A, B, C, D]
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.lists(st.integers(0, 3), max_size=4), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("publish"), st.integers(0, 7), st.integers(0, 20)),
        st.tuples(st.just("release"), st.integers(0, 7)),
        st.tuples(st.just("grow"), st.integers(0, 7), st.integers(0, 3)),
        st.tuples(st.just("evict"), st.integers(0, 7)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(operations=OPERATIONS, capacity=st.integers(1, 10), max_records=st.integers(0, 4))
def test_random_operations_keep_invariants(operations, capacity, max_records):
    manager = ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=capacity), max_records)
    live = []  # (lease, hashes, token count)
    try:
        for op in operations:
            if op[0] == "acquire":
                _, blocks, tail, bypass = op
                tokens = [t for b in blocks for t in BLOCKS[b]] + list(range(900, 900 + tail))
                h = to_hashes(tokens)
                n = len(tokens)
                lookups = [manager.base_index.lookup(x) for x in h]
                before_free = free(manager)
                result = manager.acquire_vanilla(h, n, LookupPolicy.BYPASS if bypass else LookupPolicy.USE_CACHE)
                plan = result.plan
                total = -(-n // PAGE)
                bound = plan.bound_base_page_count
                assert plan.reuse_token_length == bound * PAGE <= plan.matched_token_length
                assert plan.demand.base_kv_pages == total - bound
                if bypass or n == 0:  # an empty input is the reference's default STANDARD plan (c.6)
                    cold = ReusePlanKind.STANDARD if n == 0 else ReusePlanKind.NO_REUSABLE_PREFIX
                    assert plan.kind == cold and plan.matched_token_length == 0
                else:
                    hits = 0
                    while hits < len(lookups) and lookups[hits] is not None:
                        hits += 1
                    assert plan.matched_token_length == hits * PAGE
                    rewind = hits == total and n % PAGE == 0
                    assert bound == (hits - 1 if rewind else hits)
                    expected_kind = (ReusePlanKind.FULL_INPUT_REWIND if rewind else
                                     ReusePlanKind.STANDARD if hits else ReusePlanKind.NO_REUSABLE_PREFIX)
                    assert plan.kind == expected_kind
                if result.status == AcquireStatus.ACQUIRED:
                    assert pages(result.lease)[:bound] == lookups[:bound]
                    assert len(pages(result.lease)) == total
                    live.append((result.lease, h, n))
                else:
                    assert result.lease is None and free(manager) == before_free
            elif op[0] == "publish" and live:
                lease, h, n = live[op[1] % len(live)]
                resident = min(op[2], n)
                count = min(len(h), resident // PAGE)
                if count == 0:
                    with pytest.raises(ctxcache.ContractError):
                        manager.publish(lease, h, resident)
                else:
                    published = manager.publish(lease, h, resident)
                    assert published.published_base_full_block_count == count
                    assert len(published.canonical_base_pages) == count
                    if max_records == 0:
                        assert published.record is None
                    if published.record is not None:
                        assert np.array_equal(manager.records[published.record].logical_block_hashes, h[:count])
            elif op[0] == "release" and live:
                lease, _, _ = live.pop(op[1] % len(live))
                lease.release()
                lease.close()
            elif op[0] == "grow" and live:
                lease, _, _ = live[op[1] % len(live)]
                before = pages(lease)
                if manager.grow_base_pages(lease, op[2]):
                    assert pages(lease)[:len(before)] == before and len(pages(lease)) == len(before) + op[2]
                else:
                    assert pages(lease) == before
            elif op[0] == "evict":
                ids = manager.records.lru()
                if ids:
                    manager.evict_record(ids[op[1] % len(ids)])
            manager.check_invariants()
            # Every page is free, pinned by a lease or cached by a record, and never two of "free" and "held".
            held = {p for lease, _, _ in live for p in pages(lease)}
            for record_id in manager.records.lru():
                held.update(int(p) for p in manager.records[record_id].base_page_path)
            assert free(manager) + len(held) == capacity
            assert len(manager.records) <= max_records
        for lease, _, _ in live:
            lease.close()
        live.clear()
        drain_and_check(manager)
    finally:
        for lease, _, _ in live:
            lease.close()
        manager.close()
