"""Hybrid checkpoints (attention + recurrent, pure recurrent) and EAGLE speculative reuse through Python.

Page size 4 throughout. Hybrid checkpoints are keyed by the exact-prefix digest and length (hash_exact_prefix);
spec reuse binds one coherent paired record and always replays its boundary page.
"""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import (
    AcquireStatus,
    HybridCheckpointCandidate,
    HybridCheckpointKey,
    HybridSnapshotReservation,
    LookupPolicy,
    PublishStatus,
    ResourceType,
    ReusePlanKind,
    ReusePlanMode,
    SpecReplayMode,
)

from conftest import pool_state

P = 4
BASE, DRAFT, RECURRENT, PARTIAL = ResourceType
TOKENS = np.arange(100, 140, dtype=np.int32)  # one long conversation; prompts are its prefixes


def full_hashes(n: int) -> np.ndarray:
    return ctxcache.hash_full_blocks(TOKENS[:n], P)


def digest(n: int) -> np.ndarray:
    return ctxcache.hash_exact_prefix(TOKENS[:n], P)


def candidates(manager, n: int) -> list[HybridCheckpointCandidate]:
    return [HybridCheckpointCandidate(length, digest(length)) for length in manager.hybrid_candidate_lengths(n)]


def checkpoint(manager, lease, n: int, attention: bool):
    """The producer's sequence after prefill: reserve, (capture), publish the checkpoint at n, retire."""
    reservation = manager.reserve_hybrid_snapshots(lease, attention and n % P != 0)
    assert reservation is not None
    result = manager.publish_hybrid(lease, full_hashes(n), HybridCheckpointKey(digest(n), n), reservation)
    manager.retire_hybrid_snapshot_reservation(lease, reservation)
    return result, reservation


def acquire_hybrid(manager, n: int, attention: bool, **kwargs):
    return manager.acquire_hybrid(candidates(manager, n), full_hashes(n), n, attention, **kwargs)


# ---- hybrid ---------------------------------------------------------------------------------------------------


def test_hybrid_checkpoint_restores_all_state_mid_page(make_manager):
    m = make_manager(base_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    cold = acquire_hybrid(m, 10, True)
    assert cold.plan.mode == ReusePlanMode.HYBRID and cold.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX
    assert list(cold.lease.base_pages) == [0, 1, 2]
    published, reservation = checkpoint(m, cold.lease, 10, True)
    assert reservation == HybridSnapshotReservation(0, 0)
    assert published.status == PublishStatus.PUBLISHED
    assert list(published.canonical_base_pages) == [0, 1]
    assert published.published_base_full_block_count == 2
    cold.lease.close()
    record = m.records[published.record]
    assert record.exact_checkpoint_length == 10 and record.full_block_count == 2
    assert (record.recurrent_snapshot_slot, record.partial_kv_snapshot_slot) == (0, 0)
    np.testing.assert_array_equal(record.terminal_hash, digest(10))
    assert m.hybrid_candidate_lengths(14) == [10]
    assert m.hybrid_candidate_lengths(10) == []

    warm = acquire_hybrid(m, 14, True)
    plan = warm.plan
    assert plan.kind == ReusePlanKind.STANDARD
    assert (plan.matched_token_length, plan.reuse_token_length) == (10, 10)  # mid-page
    assert plan.hybrid_record == published.record
    assert plan.hybrid_checkpoint.exact_length == 10
    assert (plan.recurrent_snapshot_binding, plan.partial_kv_snapshot_binding) == (0, 0)
    assert plan.demand == ctxcache.ResourceDemand(base_kv_pages=2)
    assert list(warm.lease.base_pages) == [0, 1, 3, 4]
    assert (warm.lease.recurrent_snapshot_slot, warm.lease.partial_kv_snapshot_slot) == (0, 0)
    assert m.pools.active_ref_count(RECURRENT, 0) == 1
    m.release_restored_hybrid_snapshots(warm.lease)
    assert warm.lease.recurrent_snapshot_slot is None and warm.lease.partial_kv_snapshot_slot is None
    assert m.pools.active_ref_count(RECURRENT, 0) == 0
    m.release_restored_hybrid_snapshots(warm.lease)  # idempotent
    warm.lease.close()
    m.check_invariants()


def test_pure_recurrent_checkpoint_needs_no_pages(make_manager):
    m = make_manager(base_kv_pages=0, recurrent_snapshot_slots=2)
    cold = acquire_hybrid(m, 10, False)
    assert len(cold.lease.base_pages) == 0 and cold.plan.demand == ctxcache.ResourceDemand()
    published, reservation = checkpoint(m, cold.lease, 10, False)
    assert reservation.partial_kv_snapshot_slot is None
    assert len(published.canonical_base_pages) == 0 and published.published_base_full_block_count == 0
    cold.lease.close()
    assert len(m.records[published.record].base_page_path) == 0
    warm = acquire_hybrid(m, 14, False)
    assert warm.plan.reuse_token_length == 10
    assert len(warm.lease.base_pages) == 0
    assert warm.lease.recurrent_snapshot_slot == 0 and warm.lease.partial_kv_snapshot_slot is None
    warm.lease.close()


def test_existing_checkpoint_is_touched_and_duplicate_slots_are_freed(make_manager):
    m = make_manager(base_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    with acquire_hybrid(m, 10, True).lease as lease:
        first, _ = checkpoint(m, lease, 10, True)
    with acquire_hybrid(m, 6, True).lease as lease:
        second, _ = checkpoint(m, lease, 6, True)
    assert m.records.lru() == [first.record, second.record]
    with acquire_hybrid(m, 10, True, lookup_policy=LookupPolicy.BYPASS).lease as lease:
        again, reservation = checkpoint(m, lease, 10, True)
    assert again.status == PublishStatus.EXISTING_RECORD and again.record == first.record
    assert m.records.lru() == [second.record, first.record]
    assert m.pools.active_ref_count(RECURRENT, reservation.recurrent_snapshot_slot) == 0
    assert m.pools.cache_ref_count(RECURRENT, reservation.recurrent_snapshot_slot) == 0


def test_snapshot_pressure_returns_none_until_the_restore_pins_go(make_manager):
    m = make_manager(base_kv_pages=16, recurrent_snapshot_slots=1, partial_kv_snapshot_slots=1)
    with acquire_hybrid(m, 10, True).lease as lease:
        published, _ = checkpoint(m, lease, 10, True)
    hit = acquire_hybrid(m, 14, True)
    before = pool_state(m)
    assert m.reserve_hybrid_snapshots(hit.lease, True) is None  # the only slots are pinned by this very hit
    assert pool_state(m) == before
    m.release_restored_hybrid_snapshots(hit.lease)
    reservation = m.reserve_hybrid_snapshots(hit.lease, True)
    assert reservation == HybridSnapshotReservation(0, 0)
    assert published.record not in m.records.lru()
    assert m.metrics.evicted_records == 1
    hit.lease.close()


# ---- spec -----------------------------------------------------------------------------------------------------


def serve_spec(m, n, resident=None):
    result = m.acquire_spec(full_hashes(n), n)
    assert result.status == AcquireStatus.ACQUIRED
    with result.lease as lease:
        return m.publish(lease, full_hashes(n), n if resident is None else resident)


def test_spec_reuse_binds_one_paired_record_and_replays_one_page(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16)
    first = serve_spec(m, 12)
    record = m.records[first.record]
    assert list(record.base_page_path) == [0, 1, 2] and list(record.draft_page_path) == [0, 1, 2]

    warm = m.acquire_spec(full_hashes(18), 18)
    plan = warm.plan
    assert plan.mode == ReusePlanMode.SPEC and plan.kind == ReusePlanKind.STANDARD
    assert plan.spec_replay_mode == SpecReplayMode.FULL_PAGE
    assert (plan.matched_token_length, plan.reuse_token_length) == (12, 8)
    assert plan.draft_record == first.record
    dependency = plan.spec_replay_dependency
    assert dependency.path_block_count == 3
    np.testing.assert_array_equal(dependency.terminal_hash, full_hashes(12)[2])
    assert plan.demand == ctxcache.ResourceDemand(base_kv_pages=3, draft_kv_pages=3)
    assert list(warm.lease.base_pages) == [0, 1, 3, 4, 5]
    assert list(warm.lease.draft_pages) == [0, 1, 3, 4, 5]
    published = m.publish(warm.lease, full_hashes(18), 16)
    assert list(published.canonical_base_pages) == [0, 1, 2, 4]  # block 2 keeps the first committer's page
    assert list(m.records[published.record].draft_page_path) == [0, 1, 3, 4]
    warm.lease.close()


def test_spec_ignores_base_only_records_and_upgrades_them(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16)
    with m.acquire_vanilla(full_hashes(12), 12).lease as lease:
        base_only = m.publish(lease, full_hashes(12), 12)
    spec = m.acquire_spec(full_hashes(12), 12)
    assert spec.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX and spec.plan.matched_token_length == 0
    upgraded = m.publish(spec.lease, full_hashes(12), 12)
    assert upgraded.status == PublishStatus.PUBLISHED and upgraded.record == base_only.record
    assert list(upgraded.canonical_base_pages) == [0, 1, 2]
    assert list(m.records[base_only.record].draft_page_path) == [0, 1, 2]
    spec.lease.close()
    m.evict_record(base_only.record)
    assert m.metrics.reclaimed_draft_kv_pages == 3 and m.metrics.reclaimed_base_kv_pages == 3


def test_exact_spec_input_rewinds_one_page(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16)
    serve_spec(m, 12)
    result = m.acquire_spec(full_hashes(12), 12)
    assert result.plan.kind == ReusePlanKind.FULL_INPUT_REWIND
    assert (result.plan.matched_token_length, result.plan.reuse_token_length) == (12, 8)
    result.lease.close()


def test_spec_publication_uses_the_common_boundary(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16)
    published = serve_spec(m, 16, resident=9)
    assert published.published_base_full_block_count == 2
    assert m.records[published.record].full_block_count == 2


def test_grow_spec_pages_is_atomic_across_pools(make_manager):
    m = make_manager(base_kv_pages=8, draft_kv_pages=4)
    result = m.acquire_spec(full_hashes(8), 9)
    before = pool_state(m)
    assert m.grow_spec_pages(result.lease, 2, 2) is False  # draft has only one free page
    assert pool_state(m) == before
    assert m.grow_spec_pages(result.lease, 2, 1) is True
    assert (len(result.lease.base_pages), len(result.lease.draft_pages)) == (5, 4)
    result.lease.close()


def test_spec_hit_is_protected_during_pressure_eviction(make_manager):
    m = make_manager(base_kv_pages=8, draft_kv_pages=8)
    hit = serve_spec(m, 12)
    other_tokens = np.arange(500, 512, dtype=np.int32)
    with m.acquire_spec(ctxcache.hash_full_blocks(other_tokens, P), 12).lease as lease:
        other = m.publish(lease, ctxcache.hash_full_blocks(other_tokens, P), 12)
    assert m.records.lru() == [hit.record, other.record]
    result = m.acquire_spec(full_hashes(28), 28)  # 2 bound + 5 private pages per pool, 2 free
    assert result.status == AcquireStatus.ACQUIRED
    assert m.records.lru() == [hit.record]
    result.lease.close()


# ---- the same scenario for every deployment kind ----------------------------------------------------------------


@pytest.mark.parametrize("attention", [True, False], ids=["hybrid", "pure-recurrent"])
def test_hybrid_scenario(make_manager, attention):
    m = make_manager(base_kv_pages=12 if attention else 0, recurrent_snapshot_slots=2,
                     partial_kv_snapshot_slots=2 if attention else 0)
    with acquire_hybrid(m, 10, attention).lease as lease:
        checkpoint(m, lease, 10, attention)
    warm = acquire_hybrid(m, 14, attention)
    assert warm.plan.reuse_token_length == 10
    m.release_restored_hybrid_snapshots(warm.lease)
    checkpoint(m, warm.lease, 14, attention)
    warm.lease.close()
    pressure = acquire_hybrid(m, 18, attention)
    assert pressure.plan.reuse_token_length == 14
    m.release_restored_hybrid_snapshots(pressure.lease)
    assert m.reserve_hybrid_snapshots(pressure.lease, attention) is not None
    metrics = m.metrics
    assert metrics.evicted_records == 1
    assert metrics.reclaimed_recurrent_snapshots == 1
    assert metrics.reclaimed_partial_kv_snapshots == (1 if attention else 0)
    assert metrics.reclaimed_base_kv_pages == 0  # shared with the surviving checkpoint
    pressure.lease.close()
    # make_manager's teardown evicts everything and proves every pool is back to full capacity.


def test_spec_scenario(make_manager):
    m = make_manager(base_kv_pages=12, draft_kv_pages=12)
    serve_spec(m, 12)
    warm = m.acquire_spec(full_hashes(20), 20)
    assert warm.plan.reuse_token_length == 8
    first = m.records.lru()[0]
    published = m.publish(warm.lease, full_hashes(20), 20)
    warm.lease.close()
    # The longer record holds every page the first one could ever bind (a hit binds one draft page less than it
    # matches): the first is superseded, not evicted, and its last draft page goes back to the free list.
    assert first != published.record and m.records.lru() == [published.record]
    assert (m.pools.free_count(BASE), m.pools.free_count(DRAFT)) == (7, 7)
    extended = np.concatenate([TOKENS[:20], np.arange(900, 924, dtype=np.int32)])
    pressure = m.acquire_spec(ctxcache.hash_full_blocks(extended, P), 44)
    assert pressure.status == AcquireStatus.ACQUIRED and pressure.plan.reuse_token_length == 16
    assert m.metrics.evicted_records == 0  # the 7 pages per pool it needs were free
    assert (m.metrics.reclaimed_draft_kv_pages, m.metrics.reclaimed_base_kv_pages) == (0, 0)
    pressure.lease.close()


# ---- out-of-range candidates and the empty input (reference c.6) -----------------------------------------------


def test_out_of_range_candidates_are_skipped_beside_a_valid_shorter_hit(make_manager):
    m = make_manager(base_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    with acquire_hybrid(m, 10, True).lease as lease:
        ten, _ = checkpoint(m, lease, 10, True)
    with acquire_hybrid(m, 14, True, lookup_policy=LookupPolicy.BYPASS).lease as lease:
        whole, _ = checkpoint(m, lease, 14, True)  # a complete record exactly as long as the next input
    bad = [HybridCheckpointCandidate(14, digest(14)), HybridCheckpointCandidate(0, digest(4)),
           HybridCheckpointCandidate(-4, digest(4)), HybridCheckpointCandidate(15, digest(15))]

    hit = m.acquire_hybrid(bad + [HybridCheckpointCandidate(10, digest(10))], full_hashes(14), 14, True)
    assert hit.status == AcquireStatus.ACQUIRED and hit.plan.kind == ReusePlanKind.STANDARD
    assert hit.plan.reuse_token_length == 10 and hit.plan.hybrid_record == ten.record
    assert m.records.lru()[-1] == ten.record  # the hit is touched, the skipped record is not
    hit.lease.close()

    with m.acquire_hybrid(bad, full_hashes(14), 14, True).lease as lease:  # only bad ones: cold, not an error
        assert lease is not None
    lru = m.records.lru()
    bypass = m.acquire_hybrid(bad + [HybridCheckpointCandidate(10, digest(10))], full_hashes(14), 14, True,
                              lookup_policy=LookupPolicy.BYPASS)
    assert bypass.status == AcquireStatus.ACQUIRED and bypass.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX
    assert bypass.plan.reuse_token_length == 0 and bypass.plan.hybrid_record is None
    assert bypass.plan.demand == ctxcache.ResourceDemand(base_kv_pages=4)
    assert bypass.lease.recurrent_snapshot_slot is None
    assert m.records.lru() == lru and whole.record in lru
    bypass.lease.close()
    m.check_invariants()


@pytest.mark.parametrize("policy", [LookupPolicy.USE_CACHE, LookupPolicy.BYPASS])
def test_empty_input_is_a_standard_plan_in_every_mode(make_manager, policy):
    m = make_manager(base_kv_pages=8, draft_kv_pages=8, recurrent_snapshot_slots=2, partial_kv_snapshot_slots=2)
    none = np.zeros((0, 2), dtype=np.uint64)
    junk = [HybridCheckpointCandidate(0, digest(4)), HybridCheckpointCandidate(4, digest(4))]
    before = pool_state(m)
    results = {
        ReusePlanMode.VANILLA: [m.acquire_vanilla(none, 0, policy)],
        ReusePlanMode.HYBRID: [m.acquire_hybrid(junk, none, 0, attention, policy) for attention in (True, False)],
        ReusePlanMode.SPEC: [m.acquire_spec(none, 0, policy)],
    }
    for mode, acquired in results.items():
        for result in acquired:
            plan = result.plan
            assert result.status == AcquireStatus.ACQUIRED and plan.mode == mode
            assert plan.kind == ReusePlanKind.STANDARD
            assert (plan.matched_token_length, plan.reuse_token_length) == (0, 0)
            assert plan.demand == ctxcache.ResourceDemand()
            assert plan.hybrid_record is None and plan.draft_record is None
            assert len(result.lease.base_pages) == 0 and len(result.lease.draft_pages) == 0
            result.lease.close()
    assert pool_state(m) == before
    m.check_invariants()


# ---- bad inputs specific to these paths: typed errors, nothing changed -----------------------------------------


@pytest.fixture
def mixed(make_manager):
    m = make_manager(base_kv_pages=24, draft_kv_pages=8, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    leases = {
        "vanilla": m.acquire_vanilla(full_hashes(8), 9).lease,
        "spec": m.acquire_spec(full_hashes(8), 9).lease,
        "hybrid": acquire_hybrid(m, 10, True).lease,
        "recurrent": acquire_hybrid(m, 10, False).lease,
    }
    yield m, leases
    for lease in leases.values():
        lease.close()


BAD_CALLS = {
    "publish on a hybrid lease": (lambda m, l: m.publish(l["hybrid"], full_hashes(8), 8), ctxcache.ContractError),
    "publish_hybrid on a vanilla lease": (
        lambda m, l: m.publish_hybrid(l["vanilla"], full_hashes(8), HybridCheckpointKey(digest(8), 8),
                                      HybridSnapshotReservation(0)), ctxcache.ContractError),
    "grow_base_pages on a spec lease": (lambda m, l: m.grow_base_pages(l["spec"], 1), ctxcache.ContractError),
    "grow_spec_pages on a vanilla lease": (lambda m, l: m.grow_spec_pages(l["vanilla"], 1, 1), ctxcache.ContractError),
    "reserve on a spec lease": (lambda m, l: m.reserve_hybrid_snapshots(l["spec"], False), ctxcache.ContractError),
    "release_restored on a vanilla lease": (lambda m, l: m.release_restored_hybrid_snapshots(l["vanilla"]),
                                            ctxcache.ContractError),
    "partial slot without attention": (lambda m, l: m.reserve_hybrid_snapshots(l["recurrent"], True),
                                       ctxcache.ContractError),
    "retire a reservation the lease does not own": (
        lambda m, l: m.retire_hybrid_snapshot_reservation(l["hybrid"], HybridSnapshotReservation(3, 3)),
        ctxcache.ContractError),
    "publish_hybrid with slots the lease does not own": (
        lambda m, l: m.publish_hybrid(l["hybrid"], full_hashes(10), HybridCheckpointKey(digest(10), 10),
                                      HybridSnapshotReservation(3, 3)), ctxcache.ContractError),
    "negative length for candidate lengths": (lambda m, l: m.hybrid_candidate_lengths(-1),
                                              ctxcache.InvalidArgumentError),
    "candidate of the wrong type": (lambda m, l: m.acquire_hybrid([(4, digest(4))], full_hashes(8), 9, True),
                                    ctxcache.ArgumentTypeError),
    "candidate digest of the wrong dtype": (
        lambda m, l: m.acquire_hybrid([HybridCheckpointCandidate(4, digest(4).astype(np.int64))], full_hashes(8), 9,
                                      True), ctxcache.ArgumentTypeError),
    "has_attention not a bool": (lambda m, l: m.acquire_hybrid([], full_hashes(8), 9, 1), ctxcache.ArgumentTypeError),
    "needs_partial not a bool": (lambda m, l: m.reserve_hybrid_snapshots(l["hybrid"], 1), ctxcache.ArgumentTypeError),
    "checkpoint of the wrong type": (lambda m, l: m.publish_hybrid(l["hybrid"], full_hashes(8), (digest(8), 8),
                                                                   HybridSnapshotReservation(0)),
                                     ctxcache.ArgumentTypeError),
    "reservation of the wrong type": (lambda m, l: m.retire_hybrid_snapshot_reservation(l["hybrid"], (0, None)),
                                      ctxcache.ArgumentTypeError),
    "negative spec growth": (lambda m, l: m.grow_spec_pages(l["spec"], -1, 0), ctxcache.InvalidArgumentError),
    "spec publish more blocks than draft pages": (lambda m, l: m.publish(l["spec"], full_hashes(16), 16),
                                                  ctxcache.ContractError),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_hybrid_and_spec_inputs_change_nothing(mixed, case):
    m, leases = mixed
    call, error = BAD_CALLS[case]
    before = pool_state(m)
    with pytest.raises(error):
        call(m, leases)
    assert pool_state(m) == before
    m.check_invariants()


def test_changed_dependency_hash_is_refused(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16)
    serve_spec(m, 12)
    warm = m.acquire_spec(full_hashes(18), 18)
    changed = full_hashes(18).copy()
    changed[2, 1] ^= np.uint64(1)  # the replayed boundary block differs from the one the draft KV depended on
    before = pool_state(m)
    with pytest.raises(ctxcache.ContractError, match="replayed boundary"):
        m.publish(warm.lease, changed, 16)
    with pytest.raises(ctxcache.ContractError):
        m.publish(warm.lease, full_hashes(18), 8)  # stops before the dependency's block
    assert pool_state(m) == before
    warm.lease.close()


def test_partial_slot_rules_on_publication(make_manager):
    m = make_manager(base_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    lease = acquire_hybrid(m, 10, True).lease
    both = m.reserve_hybrid_snapshots(lease, True)
    recurrent_only = m.reserve_hybrid_snapshots(lease, False)
    before = pool_state(m)
    with pytest.raises(ctxcache.ContractError):  # mid-page on an attention model needs the partial slot
        m.publish_hybrid(lease, full_hashes(10), HybridCheckpointKey(digest(10), 10), recurrent_only)
    with pytest.raises(ctxcache.ContractError):  # page aligned takes none
        m.publish_hybrid(lease, full_hashes(8), HybridCheckpointKey(digest(8), 8), both)
    with pytest.raises(ctxcache.ContractError):  # hashes must be exactly the full blocks of the checkpoint
        m.publish_hybrid(lease, full_hashes(4), HybridCheckpointKey(digest(10), 10), both)
    assert pool_state(m) == before
    lease.close()


def test_every_seed_function_is_reachable_from_python():
    seed_manager = ["acquire_vanilla", "acquire_hybrid", "hybrid_candidate_lengths", "acquire_spec", "grow_base_pages",
                    "grow_spec_pages", "reserve_hybrid_snapshots", "release_restored_hybrid_snapshots",
                    "retire_hybrid_snapshot_reservation", "publish", "publish_hybrid", "pools", "base_index",
                    "draft_index", "records", "metrics"]
    seed_lease = ["base_pages", "draft_pages", "recurrent_snapshot_slot", "partial_kv_snapshot_slot", "valid",
                  "release"]
    assert [name for name in seed_manager if not hasattr(ctxcache.ContextCacheManager, name)] == []
    assert [name for name in seed_lease if not hasattr(ctxcache.Lease, name)] == []


def test_draft_index_view_names_one_coherent_record(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16)
    assert len(m.draft_index) == 0
    first = serve_spec(m, 12)
    assert len(m.draft_index) == 3
    match = m.draft_index.lookup_longest(full_hashes(16), 4)
    assert match == ctxcache.DraftPathMatch(first.record, 3)
    assert m.draft_index.lookup_longest(full_hashes(16), 2) == ctxcache.DraftPathMatch(first.record, 2)
    assert m.draft_index.lookup_longest(full_hashes(16), 0) is None
    other = ctxcache.hash_full_blocks(np.arange(700, 716, dtype=np.int32), P)
    assert m.draft_index.lookup_longest(other, 4) is None
    with pytest.raises(ctxcache.InvalidArgumentError):
        m.draft_index.lookup_longest(full_hashes(16), -1)
    m.evict_record(first.record)
    assert len(m.draft_index) == 0


def test_candidate_lengths_narrowed_to_the_prompts_own_chain(make_manager):
    m = make_manager(base_kv_pages=32, recurrent_snapshot_slots=8, partial_kv_snapshot_slots=8)
    other = np.arange(900, 940, dtype=np.int32)
    for tokens, n in ((TOKENS, 6), (TOKENS, 9), (other, 10), (other, 3)):
        with m.acquire_hybrid([], ctxcache.hash_full_blocks(tokens[:n], P), n, True,
                              lookup_policy=LookupPolicy.BYPASS).lease as lease:
            reservation = m.reserve_hybrid_snapshots(lease, n % P != 0)
            m.publish_hybrid(lease, ctxcache.hash_full_blocks(tokens[:n], P),
                             HybridCheckpointKey(ctxcache.hash_exact_prefix(tokens[:n], P), n), reservation)
            m.retire_hybrid_snapshot_reservation(lease, reservation)
    assert m.hybrid_candidate_lengths(20) == [10, 9, 6, 3]
    assert m.hybrid_candidate_lengths(20, full_hashes(20)) == [9, 6, 3]
    assert m.hybrid_candidate_lengths(9, full_hashes(8)) == [6, 3]
    assert m.hybrid_candidate_lengths(20, ctxcache.hash_full_blocks(other[:20], P)) == [10, 3]
    with pytest.raises(ctxcache.ArgumentTypeError):
        m.hybrid_candidate_lengths(20, full_hashes(20).astype(np.int64))
