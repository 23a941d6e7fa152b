"""ctxcache's vLLM KVCacheManager beside vLLM's own, driven the way vLLM's scheduler drives them.

Runs in vLLM's environment (build-peers/venv-vllm), started by tests/python/test_vllm_adapter.py; no model config is
needed: the managers are built from a KVCacheConfig, as vLLM's own manager tests build theirs.
"""

from __future__ import annotations

import random

import pytest
import torch
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, maybe_convert_block_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec
from vllm.v1.request import Request, RequestStatus

from ctxcache.enums import ResourceType
from ctxcache.errors import ContractError
from ctxcache.integrations.vllm import CtxcacheKVCacheManager, make_kv_cache_manager, stats

P = 4
_hash = get_hash_fn_by_name("sha256")
init_none_hash(_hash)
_hasher = get_request_block_hasher(P, _hash)


def config(num_blocks: int, spec: object | None = None) -> KVCacheConfig:
    spec = spec or FullAttentionSpec(block_size=P, num_kv_heads=1, head_size=1, dtype=torch.float16)
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)])


def build(kind: str, num_blocks: int, **kwargs: object) -> object:
    args = dict(max_model_len=4096, scheduler_block_size=P, hash_block_size=P, enable_caching=True, log_stats=True)
    args.update(kwargs)
    if kind == "vllm":
        return KVCacheManager(config(num_blocks), **args)
    manager = make_kv_cache_manager(config(num_blocks), **args)
    assert isinstance(manager, CtxcacheKVCacheManager)
    return manager


def request(rid: str, tokens: list[int], max_tokens: int = 8) -> Request:
    r = Request(rid, tokens, SamplingParams(max_tokens=max_tokens), None, block_hasher=_hasher)
    return r


def admit(manager: object, r: Request, chunk: int | None = None) -> tuple[int, object]:
    """The scheduler's admission: lookup, then the first chunk's slots (None: not admitted)."""
    blocks, computed, _ = manager.get_computed_blocks(r)
    todo = r.num_tokens - computed
    new = manager.allocate_slots(r, min(todo, chunk) if chunk else todo, computed, blocks)
    if new is not None:
        r.status = RequestStatus.RUNNING
        manager.record_prefix_cache_stats(r, computed)
    return computed, new


def step(r: Request, tokens: int) -> None:
    r.num_computed_tokens += tokens


def test_same_hits_and_blocks_as_vllm_without_pressure() -> None:
    rng = random.Random(7)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(4, 40))] for _ in range(6)]
    managers = {kind: build(kind, 2048) for kind in ("vllm", "ctxcache")}
    for i in range(60):
        tokens = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(1, 20))]
        results = {}
        for kind, manager in managers.items():
            r = request(f"r{i}", list(tokens))
            computed, new = admit(manager, r, chunk=5)
            assert new is not None
            step(r, min(r.num_tokens - computed, 5) + computed)
            while r.num_computed_tokens < r.num_tokens:  # the rest of the chunked prefill
                n = min(5, r.num_tokens - r.num_computed_tokens)
                assert manager.allocate_slots(r, n) is not None
                step(r, n)
            for t in range(3):  # three decode steps
                r.append_output_token_ids(1000 + 3 * i + t)
                assert manager.allocate_slots(r, 1) is not None
                step(r, 1)
            ids = manager.get_block_ids(r.request_id)[0]
            results[kind] = (computed, len(ids), manager.estimate_cached_tokens(r))
            manager.free(r)
        assert results["ctxcache"] == results["vllm"], i
    for manager in managers.values():
        assert manager.usage == pytest.approx(0.0)
    ours = managers["ctxcache"]
    ours.check_invariants()
    assert ours.make_prefix_cache_stats().hits == managers["vllm"].make_prefix_cache_stats().hits


def test_one_record_per_request_grows_through_prefill_and_decode() -> None:
    manager = build("ctxcache", 64)
    r = request("a", list(range(18)))
    computed, new = admit(manager, r, chunk=6)
    assert computed == 0 and new.get_block_ids()[0] == [1, 2]
    step(r, 6)
    assert len(manager.cache.records) == 1
    assert manager.allocate_slots(r, 12).get_block_ids()[0] == [3, 4, 5]  # 18 tokens: 5 blocks
    step(r, 12)
    assert len(manager.cache.records) == 1
    record = manager.cache.records[manager.cache.records.lru()[0]]
    assert record.base_page_path.tolist() == [0, 1, 2, 3]  # 4 full blocks, one record
    r.append_output_token_ids([7, 7])  # 20 tokens: the 5th block fills
    assert manager.allocate_slots(r, 2) is not None
    step(r, 2)
    assert len(manager.cache.records) == 1
    assert manager.cache.records[manager.cache.records.lru()[0]].base_page_path.tolist() == [0, 1, 2, 3, 4]
    assert manager.estimate_cached_tokens(r) == 20
    manager.free(r)
    manager.check_invariants()
    again = request("b", list(range(18)) + [7, 7, 9])
    blocks, computed, _ = manager.get_computed_blocks(again)
    assert computed == 20 and blocks.get_block_ids()[0] == [1, 2, 3, 4, 5]


def test_lookup_has_no_side_effect_and_admission_is_all_or_nothing() -> None:
    manager = build("ctxcache", 9)  # 8 usable blocks
    a = request("a", list(range(16)))
    assert admit(manager, a)[1] is not None
    step(a, 16)
    manager.free(a)
    assert manager.usage == 0.0  # cached but unused blocks count as free, as in vLLM
    b = request("b", list(range(100, 136)))  # 9 blocks: never fits
    metrics = manager.cache.metrics
    assert manager.get_computed_blocks(b)[1] == 0
    assert admit(manager, b)[1] is None
    assert manager.cache.metrics == metrics  # nothing evicted by the refused admission
    c = request("c", list(range(12)) + [50, 51])
    blocks, computed, _ = manager.get_computed_blocks(c)
    assert computed == 12 and blocks.get_block_ids()[0] == [1, 2, 3]
    assert manager.cache.metrics == metrics  # the lookup changed nothing either


def test_watermark_and_reserved_blocks_leave_room_like_vllm() -> None:
    for kind in ("vllm", "ctxcache"):
        manager = build(kind, 11, watermark=0.2)  # 10 usable, watermark 2
        first = request("first", list(range(20)))  # 5 blocks
        assert admit(manager, first)[1] is not None
        second = request("second", list(range(200, 216)))  # 4 blocks: 5 + 4 + 2 > 10
        second.status = RequestStatus.WAITING
        blocks, computed, _ = manager.get_computed_blocks(second)
        assert manager.allocate_slots(second, 16, computed, blocks) is None, kind
        assert manager.allocate_slots(second, 16, computed, blocks, has_scheduled_reqs=False) is not None, kind
        third = request("third", list(range(300, 304)))  # 1 block, but 1 must stay for the others
        blocks, computed, _ = manager.get_computed_blocks(third)
        assert manager.allocate_slots(third, 4, computed, blocks, reserved_blocks=1, has_scheduled_reqs=False) \
            is None, kind


def test_deferred_free_releases_the_popped_lease_once() -> None:
    manager = build("ctxcache", 32)
    r = request("a", list(range(10)))
    admit(manager, r)
    blocks = manager.pop_blocks_for_free(r)
    assert [b.block_id for b in blocks] == [1, 2, 3]
    assert manager.cache.live_lease_count == 1 and manager.get_block_ids("a") == ([],)
    manager.block_pool.free_blocks(reversed(blocks))  # the scheduler frees tail first
    assert manager.cache.live_lease_count == 0
    with pytest.raises(ContractError):
        manager.block_pool.free_blocks(blocks)
    manager.check_invariants()


def test_reset_prefix_cache_refuses_while_requests_hold_blocks() -> None:
    manager = build("ctxcache", 32)
    r = request("a", list(range(10)))
    admit(manager, r)
    assert manager.reset_prefix_cache() is False
    manager.free(r)
    assert manager.reset_prefix_cache() is True
    assert manager.make_prefix_cache_stats().reset is True
    assert manager.get_computed_blocks(request("b", list(range(10))))[1] == 0


def test_events_name_vllms_block_hashes() -> None:
    manager = build("ctxcache", 4, enable_kv_cache_events=True)  # 3 usable blocks
    a = request("a", list(range(9)))
    admit(manager, a)
    stored = manager.take_events()
    assert len(stored) == 1 and isinstance(stored[0], BlockStored)
    assert stored[0].block_hashes == [maybe_convert_block_hash(h) for h in a.block_hashes[:2]] and stored[0].parent_block_hash is None
    assert stored[0].token_ids == list(range(8)) and stored[0].medium == "GPU" and stored[0].group_idx == 0
    manager.free(a)
    b = request("b", list(range(100, 112)))  # 3 blocks: evicts a's
    admit(manager, b)
    events = manager.take_events()
    removed = [h for e in events if isinstance(e, BlockRemoved) for h in e.block_hashes]
    assert sorted(removed) == sorted(maybe_convert_block_hash(h) for h in a.block_hashes[:2])
    manager.free(b)
    assert manager.reset_prefix_cache()
    assert isinstance(manager.take_events()[-1], AllBlocksCleared)


def test_unsupported_configurations_fall_back_to_vllms_manager() -> None:
    before = stats.fell_back
    window = SlidingWindowSpec(block_size=P, num_kv_heads=1, head_size=1, dtype=torch.float16, sliding_window=8)
    manager = make_kv_cache_manager(config(32, window), max_model_len=256, scheduler_block_size=P, hash_block_size=P)
    assert type(manager) is KVCacheManager and stats.fell_back == before + 1
    manager = make_kv_cache_manager(config(32), max_model_len=256, scheduler_block_size=P, hash_block_size=P,
                                    use_eagle=True)
    assert type(manager) is KVCacheManager and stats.fell_back == before + 2


def test_pressure_keeps_the_adapter_consistent() -> None:
    rng = random.Random(3)
    manager = build("ctxcache", 24)
    live: list[Request] = []
    for i in range(300):
        if live and (len(live) > 3 or rng.random() < 0.4):
            r = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.5:
                manager.free(r)
            else:
                manager.block_pool.free_blocks(manager.pop_blocks_for_free(r))
        else:
            tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 30))]
            r = request(f"p{i}", tokens)
            if admit(manager, r, chunk=8)[1] is not None:
                step(r, min(8, r.num_tokens))
                live.append(r)
        manager.check_invariants()
        assert 0.0 <= manager.usage <= 1.0
    assert manager.cache.pools.free_count(ResourceType.BASE_KV_PAGE) <= 23


def test_preempted_request_reacquires_its_own_published_blocks() -> None:
    manager = build("ctxcache", 16)
    r = request("a", list(range(14)))
    admit(manager, r)
    step(r, 14)
    assert manager.estimate_cached_tokens(r) == 12
    manager.free(r)  # preemption: vLLM frees the request and resets its progress
    r.num_computed_tokens = 0
    r.num_preemptions += 1
    assert manager.cache.live_lease_count == 0
    computed, new = admit(manager, r)
    assert computed == 12 and len(new.get_block_ids()[0]) == 1  # the three published blocks hit, one page is new
    assert manager.get_block_ids("a")[0][:3] == [1, 2, 3]
    stats = manager.make_prefix_cache_stats()
    assert stats.preempted_requests == 1 and stats.preempted_hits == 12
    manager.free(r)
    manager.check_invariants()


def test_pytest_plugin_reports_a_lease_its_scheduler_no_longer_holds() -> None:
    import vllm.v1.core.sched.scheduler as scheduler_module

    from ctxcache.integrations.vllm import pytest_plugin
    from ctxcache.integrations.vllm.scheduler import ctxcache_manager_factory

    assert scheduler_module.KVCacheManager is make_kv_cache_manager  # the plugin swapped the scheduler's name
    scheduler_module.KVCacheManager = KVCacheManager
    with ctxcache_manager_factory():
        assert scheduler_module.KVCacheManager is make_kv_cache_manager
    assert scheduler_module.KVCacheManager is KVCacheManager  # only while a ctxcache scheduler is built

    class Scheduler:  # what the plugin reads of a scheduler
        def __init__(self) -> None:
            self.requests: dict[str, Request] = {}
            self.deferred_frees: list[tuple[int, list[object]]] = []

    manager = build("ctxcache", 16)
    scheduler = Scheduler()
    r = request("held", list(range(6)))
    scheduler.requests["held"] = r
    admit(manager, r)
    before = len(pytest_plugin._problems)
    pytest_plugin._check("t::running", manager, scheduler)  # a running request keeps its lease: fine
    assert len(pytest_plugin._problems) == before
    del scheduler.requests["held"]  # the scheduler forgot it, the lease is still live: reported
    pytest_plugin._check("t::leak", manager, scheduler)
    assert len(pytest_plugin._problems) == before + 1 and "held" in pytest_plugin._problems[-1]
    del pytest_plugin._problems[before:]
    manager.free(r)


def test_the_general_plugin_swaps_the_schedulers_manager_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.v1.core.sched.scheduler as scheduler_module

    from ctxcache.integrations import vllm_plugin

    monkeypatch.setattr(scheduler_module, "KVCacheManager", KVCacheManager)
    monkeypatch.delenv("CTXCACHE_VLLM", raising=False)
    vllm_plugin.register()
    assert scheduler_module.KVCacheManager is KVCacheManager
    monkeypatch.setenv("CTXCACHE_VLLM", "1")
    vllm_plugin.register()
    assert scheduler_module.KVCacheManager is make_kv_cache_manager
