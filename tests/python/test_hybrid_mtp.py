"""Hybrid+MTP through Python: a coordinator over base and draft pools with boundary-hidden snapshots; the facade's
publish_hybrid_mtp_endpoint captures recurrent state, the hidden row and the paired partial page; a request that
extends the prompt starts at the checkpoint, finds every part restored and gets the hidden row back through
restore_hybrid_mtp_boundary_hidden; refused requests and deployments raise ContractError."""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import (
    ContextCacheCoordinator,
    DecodingContext,
    ManagedKVCacheRequest,
    Request,
    ResidentRef,
    SequenceStatus,
    SpecReuseContract,
    device,
)
from ctxcache.device import StatePart
from ctxcache.enums import CommitPolicy, ModelStateKind

P = 4
HIDDEN = 3


class World:
    def __init__(self, *, snapshots_over_draft: bool = True, boundary_hidden: bool = True, max_records: int = 64):
        self.backend = device.Backend("cpu")
        self.base = device.KvPagePool(self.backend, num_pages=16, page_size=P, layers=[(1, 2)], dtype="fp32")
        self.draft = device.KvPagePool(self.backend, num_pages=16, page_size=P, layers=[(1, 2)], dtype="fp32")
        self.base_table = device.KvPageTable(self.backend, max_batch=2, max_pages_per_seq=8, num_pages=16)
        self.draft_table = device.KvPageTable(self.backend, max_batch=2, max_pages_per_seq=8, num_pages=16)
        self.base_lengths = device.KvLengths(self.backend, 2)
        self.draft_lengths = device.KvLengths(self.backend, 2)
        self.state = device.ResidentState(self.backend, max_batch=2, num_layers=1, recurrent_heads=1,
                                          recurrent_head_dim=2, state_size=2, recurrent_dtype="fp32", conv_dim=2,
                                          conv_kernel=2, conv_dtype="fp32", hidden_size=HIDDEN)
        self.snapshots = device.SnapshotStorage(
            self.backend, state=self.state, base_pool=self.base,
            draft_pool=self.draft if snapshots_over_draft else None, recurrent_budget_bytes=4096,
            partial_kv_budget_bytes=4096, boundary_hidden=boundary_hidden)
        self.coordinator = ContextCacheCoordinator(
            max_batch=2, max_records=max_records, model_state_kind=ModelStateKind.HYBRID, spec=SpecReuseContract(),
            base_pool=self.base, base_table=self.base_table, base_lengths=self.base_lengths, draft_pool=self.draft,
            draft_table=self.draft_table, draft_lengths=self.draft_lengths, resident_state=self.state,
            snapshots=self.snapshots)
        self.epoch = 0

    def begin(self, prompt, **kwargs):
        self.epoch += 1
        context = DecodingContext([list(prompt)], [len(prompt)], [0], [SequenceStatus.RUNNING],
                                  [ResidentRef(0, self.epoch)])
        options = {"speculative": True, "headroom": (1, 1), "commit_policy": CommitPolicy.PREFILL_STATE_ONLY}
        options.update(kwargs)
        return ManagedKVCacheRequest.begin(self.coordinator, [Request(list(prompt))], context, **options), context


def _engine_state(w: World, request: ManagedKVCacheRequest, page: int, seed: int):
    rng = np.random.default_rng(seed)
    recurrent = rng.standard_normal(4).astype(np.float32)
    w.state.write_row(StatePart.RECURRENT, 0, 0, recurrent)
    base_page = int(request.sequence(0).base_pages[page])
    draft_page = int(request.sequence(0).draft_pages[page])
    kv = {name: rng.standard_normal((1, P, 1, 2)).astype(np.float32) for name in ("bk", "bv", "dk", "dv")}
    w.base.write_pages(0, base_page, kv["bk"])
    w.base.write_pages(0, base_page + 16, kv["bv"])
    w.draft.write_pages(0, draft_page, kv["dk"])
    w.draft.write_pages(0, draft_page + 16, kv["dv"])
    hidden = rng.standard_normal((3, HIDDEN)).astype(np.float16)
    return recurrent, kv, hidden


@pytest.mark.parametrize("length", [10, 8, 5])  # mid-page, page-aligned (a whole base page snapshotted), E-1 aligned
def test_an_extended_prompt_restores_every_part_and_the_hidden_row(length):
    w = World()
    prompt = list(range(100, 100 + length))
    fb = (length - 1) // P
    valid = length - fb * P
    request, context = w.begin(prompt)
    with request:
        request.prepare_prefill()
        recurrent, kv, hidden = _engine_state(w, request, fb, seed=length)
        request.publish_hybrid_mtp_endpoint(0, length, hidden, 1)
        request.enqueue_prefill_captures()
        context.token_ids[0].append(7)
        context.generated_lengths = [1]
        request.complete_prefill(context, [length])
        request.finish()
    metrics = w.coordinator.metrics
    assert metrics.committed_publications == 1
    assert metrics.base_kv_pages.capacity - metrics.base_kv_pages.free == fb
    assert metrics.draft_kv_pages.capacity - metrics.draft_kv_pages.free == fb

    request, context = w.begin(prompt + [55, 56])
    with request:
        assert request.prefill_starts.tolist() == [length]
        request.prepare_prefill()
        assert np.array_equal(w.state.read_row(StatePart.RECURRENT, 0, 0), recurrent)
        assert np.array_equal(w.state.read_row(StatePart.BOUNDARY_HIDDEN, 0, 0), hidden[1])
        info = request.sequence(0)
        got = {"bk": w.base.read_pages(0, int(info.base_pages[fb]), 1),
               "bv": w.base.read_pages(0, int(info.base_pages[fb]) + 16, 1),
               "dk": w.draft.read_pages(0, int(info.draft_pages[fb]), 1),
               "dv": w.draft.read_pages(0, int(info.draft_pages[fb]) + 16, 1)}
        for name in got:
            assert np.array_equal(got[name][0, :valid], kv[name][0, :valid]), name
        assert w.base_lengths.read().tolist() == [length]
        assert w.draft_lengths.read().tolist() == [length - 1]
        rows = np.zeros((2, HIDDEN), np.float16)
        request.restore_hybrid_mtp_boundary_hidden(0, rows, 0)
        assert np.array_equal(rows[0], hidden[1]) and not rows[1].any()
        request.finish()
    w.coordinator.check_invariants()


def test_requests_and_deployments_outside_appendix_c_are_refused():
    w = World()
    with pytest.raises(ctxcache.ContractError, match="prefill-state-only"):
        w.begin(list(range(6)), commit_policy=CommitPolicy.INCLUDING_GENERATED_TOKENS)
    with pytest.raises(ctxcache.ContractError, match="speculative requests only"):
        w.begin(list(range(6)), speculative=False, headroom=(1, 0))
    with pytest.raises(ctxcache.ContractError, match="snapshot storage built over its draft pool"):
        World(snapshots_over_draft=False)
    with pytest.raises(ctxcache.ContractError, match="boundary hidden row"):
        World(boundary_hidden=False)


def test_a_cold_request_has_no_hidden_row_to_restore_and_bad_tensors_are_refused():
    w = World()
    request, _ = w.begin(list(range(9)))
    with request:
        request.prepare_prefill()
        with pytest.raises(ctxcache.ContractError, match="restored no checkpoint"):
            request.restore_hybrid_mtp_boundary_hidden(0, np.zeros((1, HIDDEN), np.float16), 0)
        with pytest.raises(ctxcache.ContractError, match="fp16"):
            request.publish_hybrid_mtp_endpoint(0, 9, np.zeros((1, HIDDEN), np.float32), 0)
        with pytest.raises(ctxcache.ContractError, match=r"\[rows, 3\]"):
            request.publish_hybrid_mtp_endpoint(0, 9, np.zeros((1, 4), np.float16), 0)
        assert w.coordinator.metrics.publication_attempts == 0
        request.finish()
