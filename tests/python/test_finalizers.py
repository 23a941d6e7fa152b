"""The package never hangs (or calls into C) from a garbage-collector finalizer (issue 9, item 4).

The reproductions run in fresh interpreters (finalizer_repro.py), so cffi's lazy first-time work is really
first-time, and under a timeout, so a hang is a failure with every thread's stack rather than a stuck test run.
Each runs in both ways the package can load its declarations: pre-parsed (``_ffi_abi.py`` beside the library, what
every build and install has) and parsed at import (the fallback, a ``cffi.FFI`` with its non-re-entrant lock: the
library seen through a directory that has no ``_ffi_abi.py``). CTXCACHE_HANG_RUNS sets how many runs in a row the
main reproduction must pass pre-parsed (default 10; 100 is the acceptance run:
``CTXCACHE_HANG_RUNS=100 pytest tests/python/test_finalizers.py``); parsed, each import costs seconds, so 2.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

import ctxcache
from ctxcache import ContextCacheManager, ResourceDemand, device

from finalizer_repro import package_spellings, unresolved

REPRO = Path(__file__).with_name("finalizer_repro.py")
HANG_SECONDS = 20
MODES = ["pre-parsed", "parsed"]


@pytest.fixture(scope="module")
def bare_library(tmp_path_factory) -> str:
    """The library seen from a directory without _ffi_abi.py: the package parses the header at import there."""
    link = tmp_path_factory.mktemp("bare") / "libctxcache.so"
    link.symlink_to(os.path.realpath(ctxcache._ffi.library_path()))
    return str(link)


def _run(scenario: str, runs: int, mode: str, bare_library: str) -> None:
    env = dict(os.environ, CTXCACHE_REPRO_TIMEOUT=str(HANG_SECONDS))  # per run
    if mode == "parsed":
        env["CTXCACHE_LIBRARY"] = bare_library
    try:
        done = subprocess.run([sys.executable, str(REPRO), scenario, str(runs)], env=env, capture_output=True,
                              text=True, timeout=HANG_SECONDS * (runs + 1))
    except subprocess.TimeoutExpired as error:  # faulthandler should have ended it first
        pytest.fail(f"{scenario}: hung ({error})")
    assert done.returncode == 0 and f"ok {scenario} {runs} {mode}" in done.stdout, (
        f"{scenario} failed (rc {done.returncode}; a 'Timeout' below is the hang):\n{done.stdout}\n{done.stderr}")


@pytest.mark.parametrize("mode", MODES)
def test_main_reproduction_passes_many_runs_in_a_row(mode, bare_library):
    """Two managers, drop one, touch a property of the other for the first time: hung every time before."""
    runs = int(os.environ.get("CTXCACHE_HANG_RUNS", "10")) if mode == "pre-parsed" else 2
    _run("manager", runs, mode, bare_library)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", ["leases", "device", "hasher", "threads", "resolved"])
def test_collecting_in_a_cycle_never_hangs(scenario, mode, bare_library):
    _run(scenario, 1, mode, bare_library)


def _freed_by_reference_counting(make) -> None:
    """Drop what make() returns with the cyclic collector off: reference counting alone must free it."""
    gc.collect()
    gc.disable()
    try:
        refs = [weakref.ref(obj) for obj in make()]
        assert all(ref() is None for ref in refs), [ref() for ref in refs]
        assert gc.collect() == 0  # and nothing was left for the collector either
    finally:
        gc.enable()


def test_a_manager_and_its_views_and_leases_are_freed_without_the_collector():
    hashes = ctxcache.hash_full_blocks(list(range(16)), page_size=4)

    def make():
        manager = ContextCacheManager(page_size=4, capacities=ResourceDemand(base_kv_pages=8))
        views = (manager.pools, manager.records, manager.base_index, manager.draft_index)
        result = manager.acquire_vanilla(hashes, 16)
        assert len(views[1]) == 0 and views[0].free_count(0) == 4
        result.lease.base_pages
        return manager, result.lease

    _freed_by_reference_counting(make)


def test_device_objects_and_hashers_are_freed_without_the_collector():
    def make():
        backend = device.Backend("cpu")
        pool = device.KvPagePool(backend, num_pages=4, page_size=4, layers=[(2, 8)])
        state = device.ResidentState(backend, max_batch=2, num_layers=1, recurrent_heads=1, recurrent_head_dim=2,
                                     state_size=2)
        return (backend, pool, state, device.KvPageTable(backend, max_batch=2, max_pages_per_seq=2, num_pages=4),
                device.KvLengths(backend, 2), backend.buffer(np.zeros(8, dtype=np.uint8)),
                device.SnapshotStorage(backend, state=state, base_pool=pool, recurrent_budget_bytes=256),
                ctxcache.Hasher("sha256", key=b"k"))

    _freed_by_reference_counting(make)


def test_a_view_keeps_its_manager_alive():
    pools = ContextCacheManager(page_size=4, capacities=ResourceDemand(base_kv_pages=8)).pools
    assert pools.capacity(0) == 8


def test_a_lease_collected_in_a_cycle_is_destroyed_at_the_managers_next_call():
    manager = ContextCacheManager(page_size=4, capacities=ResourceDemand(base_kv_pages=8))
    box = [manager.acquire_vanilla(ctxcache.hash_full_blocks(list(range(8)), page_size=4), 8).lease]
    box.append(box)
    del box
    gc.collect()  # (the collection under cffi's lock is the subprocess scenarios' business: it hangs when broken)
    assert manager._family.pending  # queued, not destroyed, inside the collection
    assert manager.live_lease_count == 0 and manager.pools.free_count(0) == 8
    manager.close()  # no LeasesOutstandingError


def test_every_function_and_type_spelling_is_resolved_at_import():
    """Nothing cffi does lazily is left for after import (here, pre-parsed; the "resolved" scenario checks both)."""
    spellings = package_spellings(ctxcache)
    assert spellings  # the scan found the package's calls
    assert unresolved(ctxcache, spellings) == ([], [])
    functions, types = unresolved(ctxcache, spellings | {"ctxc_manager_t *****"})
    assert functions == [] and types == ["ctxc_manager_t *****"]  # the check sees what was never parsed
