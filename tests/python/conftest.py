"""Shared fixtures for the ctxcache Python tests.

- ``manager``: a small vanilla manager (page size 4, 8 base pages, 16 records). Its teardown proves that the
  test left nothing behind: no live lease, and once every record is evicted every pool is back to full capacity,
  with the whole-state invariant check passing.
- ``hashes``: turns token lists into chained full-block hashes (``ctxcache.hash_full_blocks``).
- ``pool_state``: a comparable snapshot of everything a failed call must leave unchanged.
- The ``gpu`` marker: such tests are skipped with reason "no CUDA device: <why>" when
  ``ctxcache.cuda_device_count() <= 0``; ``CTXCACHE_REQUIRE_GPU=1`` turns that skip into a failure.
- ``UNDER_SANITIZER``: true under ``tools/test --sanitize`` (AddressSanitizer preloaded). A test that limits the
  address space (ASan reserves terabytes of shadow memory at start) or times the process skips there, with that
  reason; the normal ``tools/test`` runs it.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ctxcache
from ctxcache import ResourceType

PAGE = 4
BASE_PAGES = 8
MAX_RECORDS = 16
ALL_TYPES = tuple(ResourceType)
UNDER_SANITIZER = "libasan" in os.environ.get("LD_PRELOAD", "")


# ---- GPU marker -------------------------------------------------------------------------------------------

_gpu_probe: tuple[int, str] | None = None


def _probe_gpu() -> tuple[int, str]:
    """(device count, reason) of the library's CUDA probe, computed once per session."""
    global _gpu_probe
    if _gpu_probe is None:
        count = ctxcache.cuda_device_count()
        # ctxc_last_error() is thread-local and set by the probe itself when it finds no device.
        reason = ctxcache._ffi.last_error() if count <= 0 else ""
        _gpu_probe = (count, reason)
    return _gpu_probe


def _missing_gpu(item) -> str | None:
    """The skip reason of a gpu-marked item on a machine without a usable device, else None."""
    if item.get_closest_marker("gpu") is None:
        return None
    count, reason = _probe_gpu()
    return None if count > 0 else f"no CUDA device: {reason}"


def _gpu_required() -> bool:
    return os.environ.get("CTXCACHE_REQUIRE_GPU") == "1"


def pytest_runtest_setup(item):
    message = _missing_gpu(item)
    if message is not None and not _gpu_required():
        pytest.skip(message)


def pytest_runtest_call(item):
    # Runs before the test body: with CTXCACHE_REQUIRE_GPU=1 a missing device is a test failure (not a skip,
    # not a setup error), and the body never runs.
    message = _missing_gpu(item)
    if message is not None and _gpu_required():
        pytest.fail(f"CTXCACHE_REQUIRE_GPU=1 but {message}", pytrace=False)


# ---- helpers ------------------------------------------------------------------------------------------------


def to_hashes(tokens, page_size: int = PAGE, **kwargs) -> np.ndarray:
    """Chained full-block hashes of a token list (an (n // page_size, 2) uint64 array)."""
    return ctxcache.hash_full_blocks(np.asarray(tokens, dtype=np.int32), page_size, **kwargs)


def pool_state(manager: ctxcache.ContextCacheManager) -> dict:
    """Everything observable about a manager's bookkeeping, in a form that compares with ==."""
    state = {
        "free": tuple(manager.pools.free_count(t) for t in ALL_TYPES),
        "free_list": tuple(tuple(int(x) for x in manager.pools.free_list(t)) for t in ALL_TYPES),
        "records": tuple(manager.records.lru()),
        "metrics": manager.metrics,
        "leases": manager.live_lease_count,
        "index": len(manager.base_index),
    }
    refs = []
    for t in ALL_TYPES:
        for i in range(manager.pools.capacity(t)):
            refs.append((int(t), i, manager.pools.active_ref_count((t, i)), manager.pools.cache_ref_count((t, i))))
    state["refs"] = tuple(refs)
    for record_id in state["records"]:
        r = manager.records[record_id]
        state[f"record{record_id}"] = (tuple(r.base_page_path), r.logical_block_hashes.tobytes(),
                                       tuple(r.draft_page_path), r.hybrid_mtp_checkpoint)
    return state


def drain_and_check(manager: ctxcache.ContextCacheManager) -> None:
    """Evict every record, then prove that every pool is back to full capacity and the state is consistent."""
    manager.check_invariants()
    assert manager.live_lease_count == 0, "a test left a lease alive"
    for record_id in manager.records.lru():
        manager.evict_record(record_id)
    manager.check_invariants()
    assert len(manager.records) == 0
    assert len(manager.base_index) == 0
    for t in ALL_TYPES:
        assert manager.pools.free_count(t) == manager.pools.capacity(t), f"{t.name} pages leaked"


# ---- fixtures -------------------------------------------------------------------------------------------------


@pytest.fixture
def hashes():
    """hashes(tokens, page_size=4, **kwargs) -> (n, 2) uint64 chained full-block hashes."""
    return to_hashes


@pytest.fixture
def make_manager():
    """Factory for managers that are drained, checked and closed at teardown."""
    created = []

    def make(page_size: int = PAGE, base_kv_pages: int = BASE_PAGES, max_records: int = MAX_RECORDS, **capacities):
        m = ctxcache.ContextCacheManager(page_size, ctxcache.ResourceDemand(base_kv_pages=base_kv_pages, **capacities),
                                         max_records)
        created.append(m)
        return m

    yield make
    for m in created:
        if m.closed:
            continue
        drain_and_check(m)
        m.close()


@pytest.fixture
def manager(make_manager):
    """Page size 4, 8 base pages, at most 16 records."""
    return make_manager()
