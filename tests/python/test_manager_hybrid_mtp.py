"""Hybrid+MTP checkpoints through Python (issue 12, item 1).

A hybrid model drafting with a multi-token-prediction head: a checkpoint at exact length E holds the recurrent
state after E tokens, base KV [0, E) and draft KV [0, E-1), because the draft KV at E-1 depends on token E, which
belongs to whoever reuses it (the boundary token stays private). So fb = floor((E - 1) / P) pages are bound in
both pools and the partial-KV slot is always part of the checkpoint. Page size 4 throughout.
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
    ResourceDemand,
    ResourceType,
    ReusePlanKind,
    ReusePlanMode,
)

from conftest import pool_state

P = 4
BASE, DRAFT, RECURRENT, PARTIAL = ResourceType
TOKENS = np.arange(300, 340, dtype=np.int32)  # one long conversation; prompts are its prefixes


def full_hashes(n: int, tokens: np.ndarray = TOKENS) -> np.ndarray:
    return ctxcache.hash_full_blocks(tokens[:n], P)


def digest(n: int, tokens: np.ndarray = TOKENS) -> np.ndarray:
    return ctxcache.hash_exact_prefix(tokens[:n], P)


def mtp_blocks(length: int) -> int:
    return (length - 1) // P


def candidates(manager, n: int, tokens: np.ndarray = TOKENS) -> list[HybridCheckpointCandidate]:
    return [HybridCheckpointCandidate(length, digest(length, tokens))
            for length in manager.hybrid_candidate_lengths(n, full_hashes(n, tokens))]


def publish_mtp(manager, lease, length: int, tokens: np.ndarray = TOKENS):
    """The producer after its mid-prefill capture: reserve both slots, publish the checkpoint at length, retire."""
    reservation = manager.reserve_hybrid_snapshots(lease, True)
    assert reservation is not None and reservation.partial_kv_snapshot_slot is not None
    hashes = full_hashes(length, tokens)[:mtp_blocks(length)]
    result = manager.publish_hybrid_mtp(lease, hashes, HybridCheckpointKey(digest(length, tokens), length),
                                        reservation)
    manager.retire_hybrid_snapshot_reservation(lease, reservation)
    return result, reservation


def cold_checkpoint(manager, length: int, tokens: np.ndarray = TOKENS):
    acquired = manager.acquire_hybrid_mtp([], full_hashes(length, tokens), length, LookupPolicy.BYPASS)
    with acquired.lease:
        return publish_mtp(manager, acquired.lease, length, tokens)[0]


@pytest.mark.parametrize(("length", "blocks"), [(1, 0), (4, 0), (5, 1), (8, 1), (9, 2), (10, 2), (12, 2)])
def test_checkpoint_binds_floor_of_length_minus_one_pages_in_both_pools(make_manager, length, blocks):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    cold = m.acquire_hybrid_mtp([], full_hashes(length), length)
    pages = -(-length // P)
    assert cold.plan.mode == ReusePlanMode.HYBRID_MTP and cold.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX
    assert cold.plan.demand == ResourceDemand(pages, pages)
    assert cold.lease.mode == ReusePlanMode.HYBRID_MTP
    assert len(cold.lease.base_pages) == len(cold.lease.draft_pages) == pages
    published, reservation = publish_mtp(m, cold.lease, length)
    assert reservation == HybridSnapshotReservation(0, 0)
    assert published.status == PublishStatus.PUBLISHED
    assert published.published_base_full_block_count == blocks
    draft_path = list(cold.lease.draft_pages[:blocks])
    assert list(published.canonical_base_pages) == list(cold.lease.base_pages[:blocks])
    cold.lease.close()
    record = m.records[published.record]
    assert record.hybrid_mtp_checkpoint
    assert (record.exact_checkpoint_length, record.full_block_count) == (length, blocks)
    assert list(record.draft_page_path) == draft_path
    assert (record.recurrent_snapshot_slot, record.partial_kv_snapshot_slot) == (0, 0)  # partial always
    assert len(m.draft_index) == 0  # found through its checkpoint key only
    assert m.hybrid_candidate_lengths(16, full_hashes(16)) == [length]

    warm = m.acquire_hybrid_mtp(candidates(m, 16), full_hashes(16), 16)
    plan = warm.plan
    assert plan.kind == ReusePlanKind.STANDARD
    assert plan.matched_token_length == plan.reuse_token_length == length
    assert plan.bound_base_page_count == plan.bound_draft_page_count == blocks
    assert plan.demand == ResourceDemand(4 - blocks, 4 - blocks)
    assert plan.hybrid_record == published.record and plan.draft_record is None
    assert (plan.recurrent_snapshot_binding, plan.partial_kv_snapshot_binding) == (0, 0)
    assert plan.hybrid_checkpoint.exact_length == length
    assert list(warm.lease.draft_pages[:blocks]) == draft_path
    assert len(warm.lease.base_pages) == len(warm.lease.draft_pages) == 4
    assert (warm.lease.recurrent_snapshot_slot, warm.lease.partial_kv_snapshot_slot) == (0, 0)
    m.release_restored_hybrid_snapshots(warm.lease)
    warm.lease.close()
    m.check_invariants()


def test_the_boundary_token_stays_private(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    published = cold_checkpoint(m, 8)
    offered = [HybridCheckpointCandidate(8, digest(8))]
    with m.acquire_hybrid_mtp(offered, full_hashes(8), 8).lease as lease:  # the same 8 tokens: nothing to reuse
        assert m.records.lru() == [published.record]
        assert len(lease.base_pages) == len(lease.draft_pages) == 2
    same = m.acquire_hybrid_mtp(offered, full_hashes(8), 8)
    assert same.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX and same.plan.reuse_token_length == 0
    same.lease.close()
    longer = m.acquire_hybrid_mtp(offered, full_hashes(9), 9)
    assert longer.plan.kind == ReusePlanKind.STANDARD and longer.plan.reuse_token_length == 8
    assert longer.plan.bound_base_page_count == longer.plan.bound_draft_page_count == 1
    assert longer.plan.demand == ResourceDemand(2, 2)
    longer.lease.close()


def test_plain_hybrid_and_mtp_checkpoints_never_hit_each_other(make_manager):
    m = make_manager(base_kv_pages=32, draft_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    offered = [HybridCheckpointCandidate(10, digest(10))]
    with m.acquire_hybrid([], full_hashes(10), 10, True).lease as lease:
        reservation = m.reserve_hybrid_snapshots(lease, True)
        plain = m.publish_hybrid(lease, full_hashes(10), HybridCheckpointKey(digest(10), 10), reservation)
        m.retire_hybrid_snapshot_reservation(lease, reservation)
    miss = m.acquire_hybrid_mtp(offered, full_hashes(14), 14)
    assert miss.plan.kind == ReusePlanKind.NO_REUSABLE_PREFIX and miss.plan.hybrid_record is None
    assert miss.plan.demand == ResourceDemand(4, 4)
    mtp, _ = publish_mtp(m, miss.lease, 10)
    miss.lease.close()
    assert mtp.status == PublishStatus.PUBLISHED and mtp.record != plain.record  # a separate record of one key
    assert not m.records[plain.record].hybrid_mtp_checkpoint and m.records[mtp.record].hybrid_mtp_checkpoint
    assert m.hybrid_candidate_lengths(14, full_hashes(14)) == [10]
    with m.acquire_hybrid(offered, full_hashes(14), 14, True).lease as lease:
        assert lease.mode == ReusePlanMode.HYBRID and len(lease.draft_pages) == 0
    assert m.records.lru()[-1] == plain.record
    hit = m.acquire_hybrid_mtp(offered, full_hashes(14), 14)
    assert hit.plan.hybrid_record == mtp.record
    assert hit.plan.bound_base_page_count == hit.plan.bound_draft_page_count == 2
    hit.lease.close()
    m.evict_record(mtp.record)
    miss = m.acquire_hybrid_mtp(offered, full_hashes(14), 14)
    assert miss.plan.hybrid_record is None
    miss.lease.close()


def test_duplicate_publication_touches_the_existing_checkpoint(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    first = cold_checkpoint(m, 10)
    other_tokens = np.arange(900, 920, dtype=np.int32)
    second = cold_checkpoint(m, 5, other_tokens)
    assert m.records.lru() == [first.record, second.record]
    before = m.records[first.record]
    again = m.acquire_hybrid_mtp([], full_hashes(12), 12, LookupPolicy.BYPASS)
    dup, reservation = publish_mtp(m, again.lease, 10)
    assert dup.status == PublishStatus.EXISTING_RECORD and dup.record == first.record
    assert dup.published_base_full_block_count == 2
    assert m.records.lru() == [second.record, first.record]
    assert list(m.records[first.record].draft_page_path) == list(before.draft_page_path)
    assert m.pools.active_ref_count((RECURRENT, reservation.recurrent_snapshot_slot)) == 0
    assert m.pools.cache_ref_count((RECURRENT, reservation.recurrent_snapshot_slot)) == 0
    again.lease.close()


def test_record_limit_and_capacity_eviction_return_paired_state(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4,
                     max_records=2)
    conversations = [np.arange(1000 * i, 1000 * i + 20, dtype=np.int32) for i in (1, 2, 3)]
    first = cold_checkpoint(m, 9, conversations[0])
    victim = m.records[first.record]
    cold_checkpoint(m, 9, conversations[1])
    m.check_invariants()
    cold_checkpoint(m, 9, conversations[2])  # the record limit evicts the first
    m.check_invariants()
    assert first.record not in m.records
    for page in victim.draft_page_path:
        assert m.pools.active_ref_count((DRAFT, int(page))) == m.pools.cache_ref_count((DRAFT, int(page))) == 0
    assert m.pools.free_count(DRAFT) == 12 and m.pools.free_count(RECURRENT) == m.pools.free_count(PARTIAL) == 2
    metrics = m.metrics
    assert (metrics.evicted_records, metrics.reclaimed_base_kv_pages, metrics.reclaimed_draft_kv_pages,
            metrics.reclaimed_recurrent_snapshots, metrics.reclaimed_partial_kv_snapshots) == (1, 2, 2, 1, 1)

    tight = make_manager(base_kv_pages=4, draft_kv_pages=4, recurrent_snapshot_slots=1, partial_kv_snapshot_slots=1)
    cold_checkpoint(tight, 9)
    big = tight.acquire_hybrid_mtp([], full_hashes(16, conversations[0]), 16)  # needs every page back
    assert big.status == AcquireStatus.ACQUIRED
    assert len(tight.records) == 0
    assert tight.metrics.reclaimed_draft_kv_pages == 2 and tight.metrics.reclaimed_partial_kv_snapshots == 1
    assert tight.pools.free_count(RECURRENT) == tight.pools.free_count(PARTIAL) == 1
    before = pool_state(tight)
    refused = tight.acquire_hybrid_mtp([], full_hashes(5, conversations[1]), 5)
    assert refused.status == AcquireStatus.INSUFFICIENT_CAPACITY and refused.lease is None
    assert pool_state(tight) == before
    big.lease.close()
    tight.check_invariants()


def test_mtp_leases_grow_both_pools(make_manager):
    m = make_manager(base_kv_pages=16, draft_kv_pages=16, recurrent_snapshot_slots=4, partial_kv_snapshot_slots=4)
    with m.acquire_hybrid_mtp([], full_hashes(10), 10).lease as lease:
        assert m.grow_spec_pages(lease, 1, 2)
        assert (len(lease.base_pages), len(lease.draft_pages)) == (4, 5)
        m.check_invariants()


# ---- bad inputs: typed errors, nothing changed ------------------------------------------------------------------


@pytest.fixture
def leases(make_manager):
    m = make_manager(base_kv_pages=24, draft_kv_pages=16, recurrent_snapshot_slots=6, partial_kv_snapshot_slots=6)
    held = {
        "mtp": m.acquire_hybrid_mtp([], full_hashes(12), 12).lease,
        "hybrid": m.acquire_hybrid([], full_hashes(10), 10, True).lease,
        "spec": m.acquire_spec(full_hashes(8), 9).lease,
    }
    held["slots"] = m.reserve_hybrid_snapshots(held["mtp"], True)
    held["hybrid slots"] = m.reserve_hybrid_snapshots(held["hybrid"], True)
    yield m, held
    for name in ("mtp", "hybrid", "spec"):
        held[name].close()


def key(length: int) -> HybridCheckpointKey:
    return HybridCheckpointKey(digest(length), length)


BAD_CALLS = {
    "E = 8 has one full block, not two": (
        lambda m, h: m.publish_hybrid_mtp(h["mtp"], full_hashes(8), key(8), h["slots"]), ctxcache.ContractError),
    "exact length zero": (lambda m, h: m.publish_hybrid_mtp(h["mtp"], full_hashes(0), key(0), h["slots"]),
                          ctxcache.ContractError),
    "no partial slot": (
        lambda m, h: m.publish_hybrid_mtp(h["mtp"], full_hashes(8), key(9),
                                          HybridSnapshotReservation(h["slots"].recurrent_snapshot_slot)),
        ctxcache.ContractError),
    "slots of another lease": (
        lambda m, h: m.publish_hybrid_mtp(h["mtp"], full_hashes(8), key(9), h["hybrid slots"]),
        ctxcache.ContractError),
    "publish_hybrid_mtp on a hybrid lease": (
        lambda m, h: m.publish_hybrid_mtp(h["hybrid"], full_hashes(8), key(9), h["hybrid slots"]),
        ctxcache.ContractError),
    "publish_hybrid_mtp on a spec lease": (
        lambda m, h: m.publish_hybrid_mtp(h["spec"], full_hashes(8), key(9), h["slots"]), ctxcache.ContractError),
    "publish_hybrid on an MTP lease": (
        lambda m, h: m.publish_hybrid(h["mtp"], full_hashes(8), key(8), HybridSnapshotReservation(0, None)),
        ctxcache.ContractError),
    "publish on an MTP lease": (lambda m, h: m.publish(h["mtp"], full_hashes(8), 8), ctxcache.ContractError),
    "grow_base_pages on an MTP lease": (lambda m, h: m.grow_base_pages(h["mtp"], 1), ctxcache.ContractError),
    "reserve without the partial slot": (lambda m, h: m.reserve_hybrid_snapshots(h["mtp"], False),
                                         ctxcache.ContractError),
    "more blocks than the lease's pages": (
        lambda m, h: m.publish_hybrid_mtp(h["mtp"], full_hashes(16), key(17), h["slots"]), ctxcache.ContractError),
    "candidate of the wrong type": (lambda m, h: m.acquire_hybrid_mtp([(4, digest(4))], full_hashes(8), 9),
                                    ctxcache.ArgumentTypeError),
    "checkpoint of the wrong type": (
        lambda m, h: m.publish_hybrid_mtp(h["mtp"], full_hashes(8), (digest(9), 9), h["slots"]),
        ctxcache.ArgumentTypeError),
    "negative input length": (lambda m, h: m.acquire_hybrid_mtp([], full_hashes(0), -1),
                              ctxcache.InvalidArgumentError),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_hybrid_mtp_inputs_change_nothing(leases, case):
    m, held = leases
    call, error = BAD_CALLS[case]
    before = pool_state(m)
    with pytest.raises(error):
        call(m, held)
    assert pool_state(m) == before
    m.check_invariants()
