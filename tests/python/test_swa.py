"""Bounded sliding-window paging through Python: the reservation bound over a long decode, retirement after the
completion point, compaction, a failed synchronisation (poisoned until shutdown), and refusals that change nothing."""

from __future__ import annotations

import pytest

import ctxcache
from ctxcache import BoundedSwaKVPageManager, ResidentRef


@pytest.fixture
def rig():
    backend = ctxcache.DeviceBackend("cpu")
    pool = ctxcache.KvPagePool(backend, num_pages=20, page_size=4, layers=[(1, 2)])
    table = ctxcache.KvPageTable(backend, max_batch=4, max_pages_per_seq=128, num_pages=20, mode="sparse_window")
    lengths = ctxcache.KvLengths(backend, 4)
    failing = {"next": False}

    def synchronizer(stream):
        if failing["next"]:
            failing["next"] = False
            return False
        return True

    manager = BoundedSwaKVPageManager(pool, table, lengths, window_size_tokens=8, max_batch=4,
                                      synchronizer=synchronizer)
    yield manager, failing
    manager.close()


def test_a_long_decode_holds_only_its_window(rig):
    manager, _ = rig
    assert manager.private_pages_per_sequence == 7
    with manager.begin_request([ResidentRef(0, 1), ResidentRef(1, 1)]) as request:
        assert manager.free_page_count == 20 - 14
        request.prepare_prefill([8, 3])
        request.complete_prefill()
        endpoints = [8, 3]
        for _ in range(400):
            endpoints = [e + 1 for e in endpoints]
            request.prepare_decode_step(endpoints)
            request.complete_decode_step()
            s = request.state(0)
            assert s.bound_pages + s.reserved_pages == 7
            assert s.retained_logical_page_begin == max(0, endpoints[0] - 8) // 4
            assert s.retained_logical_page_end == -(-endpoints[0] // 4)
        assert request.state(0).peak_bound_pages <= 7
        request.begin_batch_compaction([-1, 0], 1)
        request.compact_batch()
        assert request.batch_size == 1
        assert request.state(0).resident == ResidentRef(1, 1)
        request.finish()
    assert manager.free_page_count == 20
    manager.check_invariants()


def test_a_page_leaving_the_window_is_retired_at_completion(rig):
    manager, _ = rig
    with manager.begin_request([ResidentRef(0, 1)]) as request:
        request.prepare_prefill([11])
        request.complete_prefill()
        request.prepare_decode_step([12])
        s = request.state(0)
        assert s.pending_retire_pages == 1 and s.pending_endpoint == 12
        request.complete_decode_step()
        s = request.state(0)
        assert (s.pending_retire_pages, s.pending_endpoint, s.exact_resident_token_count) == (0, None, 12)
        request.finish()


def test_admission_refused_holds_nothing(rig):
    manager, _ = rig
    with pytest.raises(ctxcache.RequestFailedError, match="private pages"):
        manager.begin_request([ResidentRef(i, 1) for i in range(3)])  # 3 x 7 pages > 20
    assert manager.free_page_count == 20


def test_poisoned_until_shutdown(rig):
    manager, failing = rig
    request = manager.begin_request([ResidentRef(0, 1)])
    request.prepare_prefill([5])
    request.complete_prefill()
    with pytest.raises(ctxcache.ContractError, match="skip"):
        request.prepare_decode_step([7])
    assert request.state(0).exact_resident_token_count == 5
    request.prepare_decode_step([6])
    request.complete_decode_step()  # nothing retired: no synchronisation
    failing["next"] = True
    with pytest.raises(ctxcache.PoisonedError):
        request.finish()  # the step's work must complete before its pages are free
    assert manager.free_page_count == 20 - 7
    with pytest.raises(ctxcache.PoisonedError):
        manager.begin_request([ResidentRef(1, 1)])
    request.close()
    manager.shutdown()
    assert manager.free_page_count == 20
    with pytest.raises(ctxcache.ContractError, match="stale"):
        manager.begin_request([ResidentRef(0, 1)])
