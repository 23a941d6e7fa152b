"""Retention through the Python runtime (issue 29): a Request's RetentionSpec reaches every publication of its
sequence, the coordinator's and the reference engine's retention clocks, and a sim.Request's arrival time.

The scenario of every test: pages of 4 tokens (16 for the engine), a 16-page pool, a prompt whose first 8 (32)
tokens are a "system prompt" given priority 90, then a flood of default requests whose records fill the pool, then
the system prompt again. Under plain LRU (the same requests without a spec) the system prompt's record is the least
recent one and the first evicted; at priority 90 the flood's own records go first and the system prompt is reused.
"""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import (
    ContextCacheCoordinator,
    ContractError,
    DecodingContext,
    ManagedKVCacheRequest,
    Request,
    ResidentRef,
    RetentionRange,
    RetentionSpec,
    SequenceStatus,
    device,
    sim,
)

SYSTEM = list(range(1000, 1008))  # two pages of 4 tokens
PRIORITY_90 = RetentionSpec(ranges=(RetentionRange(0, 8, 90),))


class World:
    """A CPU backend: a 16-page pool of 4-token pages, a 4 x 8 dense page table, lengths for 4, one coordinator."""

    def __init__(self) -> None:
        self.backend = device.Backend("cpu")
        self.pool = device.KvPagePool(self.backend, num_pages=16, page_size=4, layers=[(1, 2)])
        self.table = device.KvPageTable(self.backend, max_batch=4, max_pages_per_seq=8, num_pages=16)
        self.lengths = device.KvLengths(self.backend, 4)
        self.coordinator = ContextCacheCoordinator(max_batch=4, max_records=64, base_pool=self.pool,
                                                   base_table=self.table, base_lengths=self.lengths)
        self.epoch = 0

    def serve(self, tokens: list[int], retention: RetentionSpec | None = None) -> int:
        """Begin, prefill (publishing the prompt's full pages) and finish one sequence; its prefill start."""
        self.epoch += 1
        context = DecodingContext([np.array(tokens, np.int32)], [len(tokens)], [0], [SequenceStatus.RUNNING],
                                  [ResidentRef(0, self.epoch)])
        with ManagedKVCacheRequest.begin(self.coordinator, [Request(np.array(tokens, np.int32), retention=retention)],
                                         context) as request:
            start = request.prefill_starts[0]
            request.prepare_prefill()
            request.enqueue_prefill_captures()
            context.token_ids[0] = np.append(context.token_ids[0], np.int32(100))
            context.generated_lengths = [1]
            request.complete_prefill(context)
            request.finish()
        return int(start)

    def flood(self, count: int = 8) -> None:
        for i in range(count):  # 3 pages while served, a 2-page record after: the 7th and 8th must evict
            assert self.serve(list(range(2000 + 100 * i, 2010 + 100 * i))) == 0

    def close(self) -> None:
        self.coordinator.check_invariants()
        for obj in (self.coordinator, self.lengths, self.table, self.pool):
            obj.close()
        self.backend.close()


@pytest.fixture
def world():
    w = World()
    yield w
    w.close()


def test_the_package_exports_the_retention_types():
    assert ctxcache.RetentionSpec is ctxcache.retention.RetentionSpec
    assert ctxcache.RetentionRange is ctxcache.retention.RetentionRange
    assert Request([1]).retention is None and sim.Request([1]).retention is None and sim.Request([1]).arrival is None


@pytest.mark.parametrize("retention, reused", [(PRIORITY_90, 8), (None, 0)], ids=["priority-90", "plain-lru"])
def test_a_retained_system_prompt_survives_a_flood_that_plain_lru_evicts(world, retention, reused):
    assert world.serve(SYSTEM + [1, 2], retention) == 0
    world.flood()
    assert world.coordinator.metrics.evicted_records == 2
    assert world.coordinator.retention_metrics.evicted_records_by_priority == {35: 2}
    assert world.serve(SYSTEM + [7, 7]) == reused


@pytest.mark.parametrize("now, reused", [(1.4, 8), (1.6, 0)], ids=["before-expiry", "after-expiry"])
def test_the_coordinators_clock_ends_a_range_at_its_duration(world, now, reused):
    """Published at 1.0 s with a 0.5 s duration: at 1.4 s the prefix is still at 90, at 1.6 s it is back at the
    default and, the least recent record, the flood evicts it first."""
    world.coordinator.set_retention_time(1.0)
    assert world.serve(SYSTEM + [1, 2], RetentionSpec(ranges=(RetentionRange(0, 8, 90, duration=0.5),))) == 0
    world.coordinator.set_retention_time(now)
    world.flood()
    assert world.serve(SYSTEM + [7, 7]) == reused
    assert world.coordinator.retention_metrics.retention_expiries == (1 if now > 1.5 else 0)
    with pytest.raises(ContractError, match="backwards"):
        world.coordinator.set_retention_time(now - 0.1)


def test_decode_tokens_take_the_decode_priority_and_the_prompt_length_is_the_coordinators(world):
    """A caller's prompt_token_count is replaced by the prompt's length: the spec below would otherwise make the
    whole publication decode tokens at priority 0, and the flood would evict it before the older default records."""
    spec = RetentionSpec(ranges=(RetentionRange(0, 8, 90),), decode_priority=0, prompt_token_count=0)
    assert world.serve(SYSTEM + [1, 2], spec) == 0
    world.flood()
    assert world.serve(SYSTEM + [7, 7]) == 8


# ---- the reference engine -------------------------------------------------------------------------------------

def _engine_run(retain: bool) -> tuple[list[int], int, sim.ReferenceEngine]:
    system = np.arange(100, 132, dtype=np.int32)  # two pages of 16 tokens
    spec = RetentionSpec(ranges=(RetentionRange(0, 32, 90),)) if retain else None
    engine = sim.ReferenceEngine("attention", page_size=16, base_pages=16, max_batch=1, max_pages_per_sequence=32,
                                 commit_policy=ctxcache.CommitPolicy.PREFILL_STATE_ONLY)
    requests = [sim.Request(np.concatenate([system, np.arange(7000, 7008, dtype=np.int32)]), retention=spec,
                            arrival=1e-6)]
    requests += [sim.Request(np.arange(10000 + 100 * i, 10040 + 100 * i, dtype=np.int32), arrival=(i + 2) * 1e-6)
                 for i in range(8)]
    requests.append(sim.Request(np.concatenate([system, np.arange(8000, 8008, dtype=np.int32)]), retention=spec,
                                arrival=10e-6))
    out = engine.serve(requests)
    cold = engine.cold_reference(requests)
    assert [o.generated.tolist() for o in out] == [c.generated.tolist() for c in cold]
    assert [o.state_digest for o in out] == [c.state_digest for c in cold]
    return [o.prefill_start for o in out], engine.metrics.evicted_records, engine


@pytest.mark.parametrize("retain, last_start, evicted", [(True, 32, 2), (False, 0, 3)],
                         ids=["priority-90", "plain-lru"])
def test_the_reference_engine_carries_retention_and_arrivals_byte_exact(retain, last_start, evicted):
    starts, evicted_records, engine = _engine_run(retain)
    with engine:
        assert starts == [0] * 9 + [last_start] and evicted_records == evicted
        assert engine.retention_metrics.evicted_records_by_priority == {35: evicted}
        engine.set_retention_time(1e-5)  # the last arrival: the clock stands there (never backwards)
        with pytest.raises(ContractError, match="backwards"):
            engine.set_retention_time(9e-6)
        engine.check_invariants()


def test_a_bad_spec_on_a_sim_request_is_refused_before_serving():
    with sim.ReferenceEngine("attention", page_size=16, base_pages=64) as engine:
        bad = sim.Request(np.arange(20, dtype=np.int32), retention=RetentionSpec(decode_priority=101))
        with pytest.raises(ctxcache.InvalidArgumentError, match=r"decode_priority must be in \[0, 100\], got 101"):
            engine.serve([sim.Request(np.arange(50, 70, dtype=np.int32)), bad])
        with pytest.raises(ctxcache.ArgumentTypeError, match="arrival must be a number of seconds"):
            engine.serve([sim.Request(np.arange(20, dtype=np.int32), arrival="now")])
        assert engine.metrics.admitted_sequences == 0 and engine.stats.batches == 0
