"""A byte store under the host tier from Python (ctxcache.kv_store, issue 27): two reference engines (two replicas)
share one store; the second, started empty, reuses what the first computed, and its outputs (tokens and the SHA-256
of every byte of KV) equal a cold run's. A Python backend behind the C callback table: its keys name the layout and
the block; a backend that corrupts, truncates, fails, raises or stalls costs reuse (counted), never a wrong byte,
and never a wait past the deadline. Bad arguments raise typed errors; the backend is released with the last
engine that holds the store."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

import ctxcache
from ctxcache import KvStore, StoreLink, StoreLoadPolicy, StoreResult
from ctxcache.kv_store import _backends
from ctxcache.sim import ReferenceEngine, Request


def prompts(n: int, salt: int = 0) -> list[Request]:
    shared = [1000 + t * 7 + salt for t in range(64)]  # four pages of 16 shared by every prompt
    return [Request(np.array(shared + [5000 + i * 131 + t for t in range(56)], dtype=np.int32), max_new_tokens=4)
            for i in range(n)]


def engine(store: KvStore | None, **link: object) -> ReferenceEngine:
    options = {"min_ask_blocks": 1, "load_deadline_s": 2.0, **link}
    host_store = StoreLink(store, **options) if store is not None else None  # type: ignore[arg-type]
    return ReferenceEngine(base_pages=24, host_tier_pages=64, host_write="through", host_store=host_store)


def assert_equal_to_cold(got: list, cold: list) -> None:
    assert len(got) == len(cold)
    for i, (g, c) in enumerate(zip(got, cold)):
        assert g.state_digest == c.state_digest, f"request {i}"
        assert list(g.generated) == list(c.generated), f"request {i}"


class DictBackend:
    """A store in a dict, with Mooncake's semantics and faults a test turns on."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.keys: list[str] = []
        self.calls = {"exist": 0, "put": 0, "get": 0}
        self.corrupt = False  # flips a payload byte of every object got
        self.truncate = False  # returns half of every object
        self.fail = False  # every key fails (unavailable)
        self.raise_in_get = False
        self.get_delay = 0.0
        self.lock = threading.Lock()

    def exist(self, keys: list[str], deadline_ns: int) -> list[int]:
        self.calls["exist"] += 1
        if self.fail:
            return [StoreResult.UNAVAILABLE] * len(keys)
        return [1 if k in self.objects else 0 for k in keys]

    def put(self, keys: list[str], addrs: list[int], sizes: list[int], deadline_ns: int) -> list[int]:
        self.calls["put"] += 1
        with self.lock:
            for k, a, n in zip(keys, addrs, sizes):
                self.keys.append(k)
                self.objects.setdefault(k, ctypes.string_at(a, n))
        return [0] * len(keys)

    def get(self, keys: list[str], addrs: list[int], capacities: list[int], deadline_ns: int) -> list[int]:
        self.calls["get"] += 1
        if self.get_delay:
            time.sleep(self.get_delay)
        if self.raise_in_get:
            raise RuntimeError("the backend broke")
        out: list[int] = []
        for k, a, cap in zip(keys, addrs, capacities):
            obj = self.objects.get(k)
            if self.fail:
                out.append(StoreResult.UNAVAILABLE)
            elif obj is None:
                out.append(StoreResult.NOT_FOUND)
            elif len(obj) > cap:
                out.append(StoreResult.TOO_SMALL)
            else:
                if self.truncate:
                    obj = obj[: len(obj) // 2]
                if self.corrupt:
                    obj = obj[:100] + bytes([obj[100] ^ 0x20]) + obj[101:]
                ctypes.memmove(a, obj, len(obj))
                out.append(len(obj))
        return out


def test_a_second_replica_reuses_what_the_first_computed_and_matches_a_cold_run():
    with KvStore.memory() as store, engine(store) as a, engine(store) as b:
        requests = prompts(3)
        a.serve(requests)
        time.sleep(0.3)  # A's put batches reach the store (they run on A's worker)
        got = b.serve(requests)
        m = b.metrics
        assert m.store_loaded_tokens >= 112  # the first prompt's 7 full blocks of 16 (its last token is computed)
        assert m.store_rejected_loads == 0 and m.store_failed_loads == 0
        assert m.reused_tokens >= m.store_loaded_tokens + m.host_loaded_tokens
        assert_equal_to_cold(got, b.cold_reference(requests))
        a.serve(prompts(1, salt=9))  # A's next call applies its put completions
        assert a.metrics.store_put_blocks >= 7


def test_a_python_backend_through_the_callback_table():
    backend = DictBackend()
    store = KvStore.from_backend(backend)
    assert store.backend is backend
    requests = prompts(2, salt=3)
    with engine(store, model="llama-3-8b") as a:
        a.serve(requests)
    assert backend.calls["put"] > 0  # the engine's close flushed its puts
    key = backend.keys[0]
    assert key.startswith("llama-3-8b@tp_rank:0@pp_rank:0@kv:fp16:p16:l2:"), key
    assert "@sha256@" in key and len(key.rsplit("@", 1)[1]) == 32, key
    with engine(store, model="llama-3-8b") as b:
        got = b.serve(requests)
        assert b.metrics.store_loaded_tokens >= 112
        assert_equal_to_cold(got, b.cold_reference(requests))
    with engine(store, model="another-model") as c:  # another model's keys: nothing to reuse
        c.serve(requests)
        assert c.metrics.store_loaded_tokens == 0
    store.close()
    assert store.backend is None  # released with the last holder


@pytest.mark.parametrize("fault", ["corrupt", "truncate", "fail", "raise_in_get"])
def test_a_faulty_backend_costs_reuse_never_a_wrong_byte(fault):
    backend = DictBackend()
    with KvStore.from_backend(backend) as store:
        requests = prompts(2, salt=11)
        with engine(store) as a:
            a.serve(requests)
        setattr(backend, fault, True)
        with engine(store) as b:
            got = b.serve(requests)
            m = b.metrics
            assert m.store_loaded_tokens == 0
            if fault in ("corrupt", "truncate"):
                assert m.store_rejected_loads > 0
            else:
                assert m.store_failed_loads + m.store_asked_blocks > 0
            assert_equal_to_cold(got, b.cold_reference(requests))


def test_a_stalled_backend_costs_at_most_the_deadline():
    backend = DictBackend()
    with KvStore.from_backend(backend) as store:
        requests = prompts(1, salt=21)
        with engine(store) as a:
            a.serve(requests)
        backend.get_delay = 0.5
        with engine(store, load_deadline_s=0.03) as b:
            start = time.monotonic()
            got = b.serve(requests)
            elapsed = time.monotonic() - start
            m = b.metrics
            assert m.store_late_batches >= 1
            assert m.store_wait_micros <= 30_000 + 50_000
            assert elapsed < 0.45, elapsed  # the 0.5 s get was not waited for
            assert_equal_to_cold(got, b.cold_reference(requests))


def test_best_effort_never_waits():
    # (Its answers fill the host tier later: the C++ suite's HostTierByteStore test shows it; here the request that
    # asked computes the same blocks itself meanwhile, so they arrive to blocks the host already holds.)
    backend = DictBackend()
    with KvStore.from_backend(backend) as store:
        requests = prompts(1, salt=31)
        with engine(store) as a:
            a.serve(requests)
        backend.get_delay = 0.2
        with engine(store, policy=StoreLoadPolicy.BEST_EFFORT) as b:
            start = time.monotonic()
            got = b.serve(requests)
            assert time.monotonic() - start < 0.15
            m = b.metrics
            assert m.store_loaded_tokens == 0 and m.store_wait_micros == 0
            assert m.store_asked_blocks >= 7
            assert_equal_to_cold(got, b.cold_reference(requests))


def test_bad_arguments_raise_typed_errors():
    with KvStore.memory() as store:
        with pytest.raises(ctxcache.InvalidArgumentError, match="host_tier_pages"):
            ReferenceEngine(base_pages=24, host_store=StoreLink(store))
        with pytest.raises(ctxcache.ArgumentTypeError):
            ReferenceEngine(base_pages=24, host_tier_pages=8, host_store=store)  # type: ignore[arg-type]
        with pytest.raises(ctxcache.InvalidArgumentError):
            engine(store, load_deadline_s=-1)
        with pytest.raises(ctxcache.InvalidArgumentError):
            engine(store, min_ask_blocks=0)
        with pytest.raises(ctxcache.InvalidArgumentError):
            engine(store, model="a@b")
        with pytest.raises((ValueError, ctxcache.InvalidArgumentError)):
            engine(store, policy="sometimes")
    with pytest.raises(ctxcache.InvalidHandleError):
        engine(store)  # closed
    with pytest.raises(ctxcache.ArgumentTypeError, match="exist"):
        KvStore.from_backend(object())
    with pytest.raises(ctxcache.InvalidArgumentError):
        KvStore.memory(-1)


def test_the_backend_lives_while_an_engine_holds_the_store():
    backend = DictBackend()
    store = KvStore.from_backend(backend)
    ident = store._backend_id
    e = engine(store)
    store.close()
    assert ident in _backends  # the engine holds the store
    e.serve(prompts(1, salt=41))
    e.close()
    assert ident not in _backends
