"""The runtime layer through Python: a coordinator over CPU device objects and the ManagedKVCacheRequest facade.

A vanilla lifecycle and a request that reuses it, in-flight admission and compaction, typed exceptions
(RequestFailedError, PoisonedError from a synchronizer that fails or raises), and lifetimes: closing in any order,
a coordinator closed under a live request, requests collected in a cycle (queued, never destroyed from inside the
collector), the synchronizer forgotten with its coordinator. The runtime's bad inputs are catalogued in
test_bad_input_catalogue.py.
"""

from __future__ import annotations

import dataclasses
import gc
from dataclasses import fields

import numpy as np
import pytest

import ctxcache
from ctxcache import (
    AdmitSequenceStatus,
    ContextCacheCoordinator,
    DecodingContext,
    Headroom,
    ManagedKVCacheRequest,
    MediaItem,
    Request,
    ResidentRef,
    ReusePlanKind,
    SequenceStatus,
    device,
    runtime,
)
from ctxcache._ffi import ffi
from ctxcache.runtime import _marshal

RUNNING, FINISHED, CANCELLED = SequenceStatus.RUNNING, SequenceStatus.FINISHED, SequenceStatus.CANCELLED


class World:
    """A CPU backend: a 16-page pool of 4-token pages, a 4 x 8 dense page table, lengths for 4."""

    def __init__(self) -> None:
        self.backend = device.Backend("cpu")
        self.pool = device.KvPagePool(self.backend, num_pages=16, page_size=4, layers=[(1, 2)])
        self.table = device.KvPageTable(self.backend, max_batch=4, max_pages_per_seq=8, num_pages=16)
        self.lengths = device.KvLengths(self.backend, 4)
        self.fail = False
        self.calls: list[int | None] = []

    def synchronize(self, stream: int | None) -> bool:
        self.calls.append(stream)
        return not self.fail

    def coordinator(self, **kwargs) -> ContextCacheCoordinator:
        kwargs.setdefault("max_batch", 4)
        kwargs.setdefault("max_records", 8)
        kwargs.setdefault("synchronizer", self.synchronize)
        return ContextCacheCoordinator(base_pool=self.pool, base_table=self.table, base_lengths=self.lengths, **kwargs)

    def close(self) -> None:
        for obj in (self.lengths, self.table, self.pool):
            obj.close()
        assert self.backend.allocated_bytes == 0, "device memory leaked"
        self.backend.close()


@pytest.fixture
def world():
    w = World()
    yield w
    w.close()


@pytest.fixture
def coordinator(world):
    c = world.coordinator()
    yield c
    if not c.closed:
        c.check_invariants()
        c.close()


def context_of(*rows: tuple[list[int], ResidentRef]) -> DecodingContext:
    return DecodingContext([np.array(t, np.int32) for t, _ in rows], [len(t) for t, _ in rows], [0] * len(rows),
                           [RUNNING] * len(rows), [ref for _, ref in rows])


def sample(context: DecodingContext, row: int, token: int) -> None:
    context.token_ids[row] = np.append(context.token_ids[row], np.int32(token))
    generated = list(context.generated_lengths)
    generated[row] += 1
    context.generated_lengths = generated


def prefill(coordinator, context: DecodingContext, **kwargs) -> ManagedKVCacheRequest:
    request = ManagedKVCacheRequest.begin(coordinator, [Request(t.copy()) for t in context.token_ids], context, **kwargs)
    request.prepare_prefill()
    request.enqueue_prefill_captures()
    for row in range(context.active_batch_size):
        sample(context, row, 100 + row)
    request.complete_prefill(context)
    return request


def step(request: ManagedKVCacheRequest, context: DecodingContext, token: int) -> None:
    request.prepare_decode_step(context)
    for row, status in enumerate(context.status):
        if status == RUNNING:
            sample(context, row, token)
    request.complete_decode_step(context)


# ---- lifecycle ------------------------------------------------------------------------------------------------


def test_vanilla_lifecycle_then_a_request_that_reuses_it(world, coordinator):
    assert coordinator.page_size == 4 and coordinator.supports_live_sequence_admission
    context = context_of((list(range(1, 11)), ResidentRef(0, 1)))
    with prefill(coordinator, context) as request:
        assert request.has_context_reuse and request.live and request.batch_size == 1
        assert request.prefill_starts.tolist() == [0]
        step(request, context, 200)
        request.prepare_decode_step(context)
        sample(context, 0, 201)
        context.status = [FINISHED]  # normally finished in this step: published at decode end
        request.complete_decode_step(context)
        seq = request.sequence(0)
        assert (seq.input_length, seq.committed_length, seq.published_full_block_count) == (10, 12, 3)
        assert seq.plan_kind == ReusePlanKind.NO_REUSABLE_PREFIX and seq.resident == ResidentRef(0, 1)
        pages = seq.base_pages.tolist()
        request.finish()
        request.finish()  # no-op
        assert not request.live
    metrics = coordinator.metrics
    assert (metrics.admitted_sequences, metrics.hit_sequences, metrics.publication_attempts) == (1, 0, 2)
    assert metrics.base_kv_pages == runtime.PoolMetrics(free=13, capacity=16)
    assert world.calls and set(world.calls) == {None}

    prompt = context.token_ids[0][:12].tolist() + [7, 8]
    second = context_of((prompt, ResidentRef(0, 2)))
    with prefill(coordinator, second) as request:
        assert request.prefill_starts.tolist() == [12]
        assert request.reuse_token_length(0) == 12
        assert request.sequence(0).base_pages.tolist()[:3] == pages[:3]
        assert world.lengths.read().tolist() == [12]
        request.finish()
    metrics = coordinator.metrics
    assert (metrics.admitted_sequences, metrics.hit_sequences, metrics.standard_plans) == (2, 1, 1)
    assert (metrics.matched_tokens, metrics.reused_tokens) == (12, 12)
    coordinator.check_invariants()


def test_metrics_name_every_field_of_the_c_struct(coordinator):
    c_fields = {name for name, _ in ffi.typeof("ctxc_context_cache_metrics_t").fields} - {"struct_size", "reserved"}
    py_fields = set()
    for f in fields(runtime.ContextCacheMetrics):
        py_fields |= {f.name + "_free", f.name + "_capacity"} if f.name in _marshal._POOLS else {f.name}
    assert py_fields == c_fields
    with pytest.raises(dataclasses.FrozenInstanceError):
        coordinator.metrics.admitted_sequences = 3


def test_joiner_then_compaction_with_a_host_mapping(coordinator):
    context = context_of((list(range(1, 7)), ResidentRef(0, 1)))
    with prefill(coordinator, context) as request:
        step(request, context, 50)
        joiner = np.arange(30, 35, dtype=np.int32)
        result = request.admit_sequence(Request(joiner), ResidentRef(1, 1))
        assert result == runtime.AdmitResult(AdmitSequenceStatus.ADMITTED, 0)
        assert request.has_pending_joiner
        assert request.sequence(1).resident == ResidentRef(1, 1)  # the joiner, at row batch_size
        request.finalize_sequence_admission(1, 77, 5)
        context.token_ids.append(np.append(joiner, np.int32(77)))
        context.raw_input_lengths = [6, 5]
        context.generated_lengths = [*context.generated_lengths, 1]
        context.status = [RUNNING, RUNNING]
        context.resident_refs = [*context.resident_refs, ResidentRef(1, 1)]
        step(request, context, 51)
        mapping = np.full(2, -7, np.int32)
        request.begin_batch_compaction([-1, 0], 1, mapping)
        assert mapping.tolist() == [-1, 0]
        request.complete_batch_compaction(np.array([-1, 0], np.int32))
        assert request.batch_size == 1 and request.sequence(0).resident.slot == 1
        coordinator.check_invariants()
        request.finish()


def test_retract_and_no_capacity_are_answers(coordinator):
    context = context_of((list(range(1, 7)), ResidentRef(0, 1)))
    with prefill(coordinator, context) as request:
        assert request.admit_sequence(Request(list(range(30, 58))), ResidentRef(1, 1)).status == AdmitSequenceStatus.ADMITTED
        assert request.retract_sequence_admission() is True
        assert request.retract_sequence_admission() is False
        request.admit_sequence(Request(list(range(30, 58))), ResidentRef(2, 1))
        request.finalize_sequence_admission(1, 9, 28)
        before = coordinator.metrics.base_kv_pages
        answer = request.admit_sequence(Request(list(range(70, 98))), ResidentRef(3, 1), Headroom(1, 0))
        assert answer.status == AdmitSequenceStatus.NO_CAPACITY
        assert coordinator.metrics.base_kv_pages == before
        coordinator.check_invariants()


def test_media_items_make_media_aware_admissions(coordinator):
    prompt = np.array([1, 2, 9, 9, 9, 9, 3, 4], np.int32)
    context = context_of((prompt.tolist(), ResidentRef(0, 1)))
    item = MediaItem(b"pixels", first_token=2, token_count=4)
    with ManagedKVCacheRequest.begin(coordinator, [Request(prompt, lora_name="adapter", media=[item])], context,
                                     media_token_ids=[9]) as request:
        assert request.prefill_starts.tolist() == [0]
        request.finish()
    assert coordinator.metrics.media_aware_sequences == 1
    with pytest.raises(ctxcache.ContractError, match="not a media placeholder id"):
        ManagedKVCacheRequest.begin(coordinator, [Request(prompt, media=[MediaItem(b"x", 0, 3)])],
                                    context_of((prompt.tolist(), ResidentRef(1, 1))), media_token_ids=[9])


# ---- typed exceptions -----------------------------------------------------------------------------------------


def test_capacity_and_a_second_active_request_are_request_failures(coordinator):
    context = context_of((list(range(40)), ResidentRef(0, 1)))
    with pytest.raises(ctxcache.RequestFailedError, match="page table holds 8") as info:
        ManagedKVCacheRequest.begin(coordinator, [Request(list(range(40)))], context)
    assert type(info.value) is ctxcache.RequestFailedError
    first = ManagedKVCacheRequest.begin(coordinator, [Request([1, 2, 3])], context_of(([1, 2, 3], ResidentRef(0, 1))))
    with pytest.raises(ctxcache.RequestFailedError, match="another request is active"):
        ManagedKVCacheRequest.begin(coordinator, [Request([1, 2, 3])], context_of(([1, 2, 3], ResidentRef(1, 1))))
    first.close()  # abandoned
    assert coordinator.active_request_count == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # cffi reports the raise, then fails
@pytest.mark.parametrize("failure", ["returns_false", "raises"])
def test_failed_synchronisation_poisons_until_shutdown(world, failure):
    state = {"fail": False}

    def synchronizer(stream):
        if state["fail"]:
            if failure == "raises":
                raise RuntimeError("device lost")
            return False
        return None  # like torch.cuda.synchronize: None is success

    with world.coordinator(synchronizer=synchronizer) as coordinator:
        context = context_of((list(range(1, 9)), ResidentRef(0, 1)))
        request = prefill(coordinator, context)
        state["fail"] = True
        with pytest.raises(ctxcache.PoisonedError, match="poisoned"):
            request.finish()
        assert coordinator.poisoned and coordinator.quarantined_request_count == 1
        assert isinstance(ctxcache.PoisonedError("x"), ctxcache.RequestFailedError)
        coordinator.check_invariants()
        request.close()
        with pytest.raises(ctxcache.PoisonedError, match="poisoned until shutdown"):
            ManagedKVCacheRequest.begin(coordinator, [Request([1, 2, 3])], context_of(([1, 2, 3], ResidentRef(1, 1))))
        with pytest.raises(ctxcache.PoisonedError, match="still fails"):
            coordinator.shutdown()
        state["fail"] = False
        coordinator.shutdown()
        assert not coordinator.poisoned and coordinator.quarantined_request_count == 0
        with ManagedKVCacheRequest.begin(coordinator, [Request([1, 2, 3])],
                                         context_of(([1, 2, 3], ResidentRef(1, 1)))) as request:
            request.finish()


def test_hybrid_mtp_endpoints_on_another_deployment_are_contract_errors(coordinator):
    context = context_of((list(range(1, 9)), ResidentRef(0, 1)))
    with prefill(coordinator, context) as request:
        with pytest.raises(ctxcache.ContractError, match="no Hybrid\\+MTP reuse"):
            request.publish_hybrid_mtp_endpoint(0, 8, np.zeros((1, 4), np.float16), 0)
        with pytest.raises(ctxcache.ArgumentTypeError, match="base_hidden_states must be a numpy array"):
            request.restore_hybrid_mtp_boundary_hidden(0, [0.0], 0)


def test_python_checks_only_what_c_cannot_see(coordinator):
    context = context_of(([1, 2, 3], ResidentRef(0, 1)))
    with pytest.raises(ctxcache.ArgumentTypeError, match="requests\\[0\\].token_ids must have dtype int32, got int64"):
        ManagedKVCacheRequest.begin(coordinator, [Request(np.array([1, 2, 3]))], context)
    with pytest.raises(ctxcache.InvalidArgumentError, match="context.status has 2 entries for 1 rows"):
        ManagedKVCacheRequest.begin(coordinator, [Request([1, 2, 3])],
                                    DecodingContext([[1, 2, 3]], [3], [0], [RUNNING, RUNNING], [ResidentRef(0, 1)]))
    with pytest.raises(ctxcache.ArgumentTypeError, match="backend must be a ContextCacheCoordinator or a BoundedSwaKVPageManager"):
        ManagedKVCacheRequest.begin(None, [Request([1, 2, 3])], context)
    # Values are the library's: an unknown enum value reaches C and comes back as its InvalidArgumentError.
    with pytest.raises(ctxcache.InvalidArgumentError, match="ctxc_kv_request_begin: options->token_state_contract 9"):
        ManagedKVCacheRequest.begin(coordinator, [Request([1, 2, 3])], context, token_state_contract=9)
    assert coordinator.metrics.admitted_sequences == 0


# ---- lifetimes ------------------------------------------------------------------------------------------------


def test_device_objects_may_close_before_the_coordinator():
    w = World()
    coordinator = w.coordinator()
    for obj in (w.lengths, w.table, w.pool):
        obj.close()
    context = context_of((list(range(1, 9)), ResidentRef(0, 1)))
    with prefill(coordinator, context) as request:
        request.finish()
    coordinator.check_invariants()
    assert w.backend.allocated_bytes > 0  # the coordinator keeps them
    coordinator.close()
    assert w.backend.allocated_bytes == 0
    w.backend.close()


def test_closing_a_coordinator_under_a_live_request_orphans_it(world):
    coordinator = world.coordinator()
    request = prefill(coordinator, context_of((list(range(1, 9)), ResidentRef(0, 1))))
    with pytest.raises(ctxcache.LeasesOutstandingError, match="1 live request"):
        coordinator.close()
    assert coordinator.closed
    with pytest.raises(ctxcache.InvalidHandleError, match="outlived its coordinator"):
        request.finish()
    assert repr(request) == "ManagedKVCacheRequest(orphaned)"
    request.close()
    with pytest.raises(ctxcache.InvalidHandleError, match="request was closed"):
        request.prepare_prefill()


def test_the_synchronizer_is_forgotten_with_its_coordinator(world):
    before = len(_marshal._synchronizers)
    coordinator = world.coordinator()
    assert len(_marshal._synchronizers) == before + 1
    coordinator.close()
    assert len(_marshal._synchronizers) == before
    with pytest.raises(ctxcache.ContractError):
        world.coordinator(max_batch=9)  # refused: nothing registered stays behind
    assert len(_marshal._synchronizers) == before


def test_requests_collected_in_a_cycle_are_queued_not_destroyed_by_the_collector(world):
    coordinator = world.coordinator()
    request = prefill(coordinator, context_of((list(range(1, 9)), ResidentRef(0, 1))))
    box = [request]
    box.append(box)
    calls = len(world.calls)
    del request, box
    gc.collect()
    assert coordinator._family.pending  # queued: the collector called nothing in C
    assert len(world.calls) == calls  # and so no synchronisation ran inside it
    assert coordinator.active_request_count == 0  # the next call destroyed (abandoned) it first
    assert len(world.calls) > calls
    coordinator.check_invariants()
    coordinator.close()


def test_a_request_keeps_its_coordinator_alive_without_a_cycle(world):
    coordinator = world.coordinator()
    request = prefill(coordinator, context_of((list(range(1, 9)), ResidentRef(0, 1))))
    family = coordinator._family
    del coordinator
    assert request.coordinator.active_request_count == 1
    gc.collect()
    assert not family.pending
    request.finish()
    coordinator = request.coordinator
    del request  # reference counting destroys it at once
    assert not family.pending
    coordinator.close()


def test_a_pure_recurrent_deployment_takes_zero_pages_and_one_with_attention_does_not():
    from ctxcache.deployment import Deployment, RecurrentGeometry

    recurrent = RecurrentGeometry(num_layers=2, heads=4, head_dim=16, state_size=8, conv_dim=144, conv_kernel=4)
    with Deployment(page_size=8, num_pages=0, max_seq_len=100, recurrent=recurrent, recurrent_snapshots=5,
                    backend="cpu") as d:
        assert d.model_state_kind == ctxcache.ModelStateKind.PURE_RECURRENT and d.pool is None
        metrics = d.coordinator.metrics
        assert (metrics.base_kv_pages.capacity, metrics.recurrent_snapshots.capacity) == (0, 5)
    with pytest.raises(ctxcache.InvalidArgumentError, match=r"^num_pages must be positive: the deployment has 2 "
                       r"attention layers, whose KV lives in pages \(0 pages is only for a pure recurrent model\)$"):
        Deployment(page_size=8, num_pages=0, max_seq_len=100, attention_layers=[(2, 8)] * 2, recurrent=recurrent,
                   recurrent_snapshots=5, backend="cpu")
    with pytest.raises(ctxcache.InvalidArgumentError, match="needs an explicit recurrent_snapshots"):
        Deployment(page_size=8, num_pages=0, max_seq_len=100, recurrent=recurrent, backend="cpu")
    with pytest.raises(ctxcache.InvalidArgumentError, match="num_pages must be >= 0"):
        Deployment(page_size=8, num_pages=-1, max_seq_len=100, recurrent=recurrent, backend="cpu")


# ---- a reset ------------------------------------------------------------------------------------------------


def test_clear_is_refused_while_a_request_is_active_and_then_forgets_everything(world, coordinator):
    prompt = list(range(1, 11))
    with prefill(coordinator, context_of((prompt, ResidentRef(0, 1)))) as request:
        request.finish()
    active = prefill(coordinator, context_of((prompt, ResidentRef(0, 2))))
    assert active.prefill_starts.tolist() == [8]
    with pytest.raises(ctxcache.ContractError, match="1 request"):
        coordinator.clear()
    assert coordinator.metrics.current_records == 1  # nothing changed
    active.finish()
    active.close()
    coordinator.clear()
    assert coordinator.metrics.current_records == 0
    with prefill(coordinator, context_of((prompt, ResidentRef(0, 3)))) as cold:
        assert cold.prefill_starts.tolist() == [0]  # what was cached before the reset is gone
        cold.finish()


def test_a_manager_clear_is_refused_while_a_lease_is_live() -> None:
    with ctxcache.ContextCacheManager(4, ctxcache.ResourceDemand(base_kv_pages=8), 8) as manager:
        tokens = np.arange(8, dtype=np.int32)
        hashes = ctxcache.hash_full_blocks(tokens, 4)
        with manager.acquire_vanilla(hashes, 8).lease as lease:
            manager.publish(lease, hashes, 8)
            with pytest.raises(ctxcache.ContractError, match="1 lease"):
                manager.clear()
            assert len(manager.base_index) == 2
        manager.clear()
        assert len(manager.base_index) == 0 and len(manager.records) == 0
        again = manager.acquire_vanilla(hashes, 8)
        with again.lease:
            assert again.plan.reuse_token_length == 0  # the earlier prompt misses
        manager.check_invariants()
