"""Bounded sliding-window paging through Python: the reservation bound over a long decode, retirement after the
completion point, compaction, a failed synchronisation (poisoned until shutdown), and refusals that change nothing;
and the request facade (ManagedKVCacheRequest) on this backend: the lifecycle from the engine's decoding context,
the seed's backstops, its preconditions and its lifetime."""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import BoundedSwaKVPageManager, ResidentRef
from ctxcache.enums import SequenceStatus, TokenStateContract
from ctxcache.runtime import DecodingContext, Headroom, ManagedKVCacheRequest, Request


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


def _context(histories, prompts, refs, status=None):
    return DecodingContext(token_ids=[np.asarray(h, dtype=np.int32) for h in histories],
                           raw_input_lengths=list(prompts),
                           generated_lengths=[len(h) - p for h, p in zip(histories, prompts)],
                           status=status or [SequenceStatus.RUNNING] * len(histories), resident_refs=refs)


def test_the_facade_serves_chunks_and_decode_steps_through_the_windows(rig):
    manager, _ = rig
    prompts = [list(range(11)), [1, 2, 3]]
    refs = [ResidentRef(0, 1), ResidentRef(1, 1)]
    histories = [list(p) for p in prompts]
    with ManagedKVCacheRequest.begin(manager, [Request(p) for p in prompts],
                                     _context(histories, [11, 3], refs)) as request:
        assert request.swa_manager is manager and request.coordinator is None
        assert (request.batch_size, request.has_context_reuse, request.live) == (2, False, True)
        assert manager.free_page_count == 20 - 14
        assert request.prefill_starts.size == 0
        request.prepare_prefill()  # no-ops on this backend
        request.enqueue_prefill_captures()
        request.prepare_swa_prefill([4, 3])
        request.prepare_swa_prefill([11, 3])  # completes the first chunk
        assert request.swa_state(0).exact_resident_token_count == 4
        assert request.swa_state(0).pending_endpoint == 11
        for h in histories:
            h.append(50)  # the lookahead token
        request.complete_prefill(_context(histories, [11, 3], refs))
        for step in range(30):
            context = _context(histories, [11, 3], refs)
            request.prepare_decode_step(context)
            s = request.swa_state(0)
            assert s.pending_endpoint == 12 + step
            for h in histories:
                h.append(step)
            request.complete_decode_step(_context(histories, [11, 3], refs))
            s = request.swa_state(0)
            endpoint = 12 + step
            assert s.exact_resident_token_count == endpoint
            assert (s.retained_logical_page_begin, s.retained_logical_page_end) == ((endpoint - 8) // 4,
                                                                                  -(-endpoint // 4))
            assert s.bound_pages + s.reserved_pages == 7 and s.pending_retire_pages == 0
        request.begin_batch_compaction([-1, 0], 1)
        request.complete_batch_compaction([-1, 0])
        assert request.batch_size == 1
        assert request.swa_state(0).resident == ResidentRef(1, 1)
        assert manager.free_page_count == 20 - 7
        request.finish()
        assert not request.live
    assert manager.free_page_count == 20
    manager.check_invariants()


def test_the_facade_answers_the_backstops_and_changes_nothing(rig):
    manager, _ = rig
    refs = [ResidentRef(0, 1)]
    history = [1, 2, 3, 4, 5]
    request = ManagedKVCacheRequest.begin(manager, [Request(history)], _context([history], [5], refs))
    request.prepare_swa_prefill([5])
    history.append(6)
    request.complete_prefill(_context([history], [5], refs))
    with pytest.raises(ctxcache.ContractError):
        request.reuse_token_length(0)
    with pytest.raises(ctxcache.ContractError, match="bounded-SWA"):
        request.sequence(0)
    with pytest.raises(ctxcache.RequestFailedError, match="live-slot admission"):
        request.admit_sequence(Request([1, 2]), ResidentRef(1, 1))
    with pytest.raises(ctxcache.RequestFailedError):
        request.finalize_sequence_admission(1, 3, 2)
    assert request.retract_sequence_admission() is True
    hidden = np.zeros((2, 4), dtype=np.float16)
    with pytest.raises(ctxcache.ContractError):
        request.publish_hybrid_mtp_endpoint(0, 5, hidden, 0)
    with pytest.raises(ctxcache.ContractError):
        request.restore_hybrid_mtp_boundary_hidden(0, hidden, 0)
    with pytest.raises(ctxcache.ContractError, match="KV endpoint is 5"):
        request.prepare_decode_step(_context([history + [7]], [5], refs))
    with pytest.raises(ctxcache.ContractError, match="headroom"):
        request.prepare_decode_step(_context([history], [5], refs), Headroom(2, 0))
    s = request.swa_state(0)
    assert (s.exact_resident_token_count, s.pending_endpoint) == (5, None)
    assert manager.free_page_count == 20 - 7
    request.finish()
    request.close()
    assert manager.free_page_count == 20


def test_the_facade_refuses_what_the_swa_backend_cannot_serve(rig):
    manager, _ = rig
    refs = [ResidentRef(0, 1)]
    context = _context([[1, 2, 3]], [3], refs)
    with pytest.raises(ctxcache.ContractError, match="non-speculative"):
        ManagedKVCacheRequest.begin(manager, [Request([1, 2, 3])], context, speculative=True)
    with pytest.raises(ctxcache.ContractError, match="committed\\+lookahead"):
        ManagedKVCacheRequest.begin(manager, [Request([1, 2, 3])], context,
                                    token_state_contract=TokenStateContract.FULLY_COMMITTED)
    with pytest.raises(ctxcache.ContractError, match="headroom"):
        ManagedKVCacheRequest.begin(manager, [Request([1, 2, 3])], context, headroom=Headroom(1, 1))
    with pytest.raises(ctxcache.ContractError, match="one raw input"):
        ManagedKVCacheRequest.begin(manager, [Request([1, 2, 3]), Request([4])], context)
    with pytest.raises(ctxcache.ArgumentTypeError, match="BoundedSwaKVPageManager"):
        ManagedKVCacheRequest.begin(object(), [Request([1, 2, 3])], context)
    assert manager.free_page_count == 20


def test_swa_state_is_a_contract_error_on_the_context_backend():
    backend = ctxcache.DeviceBackend("cpu")
    pool = ctxcache.KvPagePool(backend, num_pages=16, page_size=4, layers=[(1, 2)])
    table = ctxcache.KvPageTable(backend, max_batch=2, max_pages_per_seq=8, num_pages=16)
    lengths = ctxcache.KvLengths(backend, 2)
    with ctxcache.ContextCacheCoordinator(max_batch=2, base_pool=pool, base_table=table,
                                          base_lengths=lengths) as coordinator:
        refs = [ResidentRef(0, 1)]
        with ManagedKVCacheRequest.begin(coordinator, [Request([1, 2, 3])],
                                         _context([[1, 2, 3]], [3], refs)) as request:
            assert request.coordinator is coordinator and request.swa_manager is None
            request.prepare_swa_prefill([3])  # a no-op here
            with pytest.raises(ctxcache.ContractError, match="context-reuse backend"):
                request.swa_state(0)
            request.finish()


def test_a_facade_request_outliving_its_manager_is_refused_not_followed(rig):
    manager, _ = rig
    refs = [ResidentRef(0, 1)]
    request = ManagedKVCacheRequest.begin(manager, [Request([1, 2, 3])], _context([[1, 2, 3]], [3], refs))
    request.prepare_swa_prefill([3])
    with pytest.raises(ctxcache.LeasesOutstandingError):
        manager.close()
    with pytest.raises(ctxcache.InvalidHandleError):
        request.finish()
    request.close()
