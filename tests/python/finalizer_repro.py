"""Reproductions of the garbage-collector finalizer hang (issue 9, item 4), run in a fresh interpreter.

    python tests/python/finalizer_repro.py SCENARIO [RUNS]

cffi (ABI mode, the header parsed at import: a ``cffi.FFI``) looks a function up and parses a type lazily, the first
time, under ``ffi._lock``, which is not re-entrant. A cyclic collection that runs inside that first-time work (it
allocates) finalizes whatever garbage is young; a finalizer that then needs the lock (a destroy function never looked
up yet) waits on its own thread forever. The scenarios make that collection happen: garbage is made young, generation
0 is filled to a few allocations short of its threshold, and a first-time lookup follows (the finding's
reproduction); or cffi's lock is simply held while the collector runs, which is what the first-time work does, on
every Python version. The pre-parsed declarations (``_ffi_abi.py``, a ``_cffi_backend.FFI``) do their first-time work
in C, with no Python-level lock; the same scenarios run on them (the collection then runs without a lock to hold),
and test_finalizers.py runs every scenario in both modes.

A run that hangs for CTXCACHE_REPRO_TIMEOUT seconds dumps every thread's stack and exits 1 (faulthandler);
success prints ``ok <scenario> <runs> <mode>``, the mode being ``pre-parsed`` or ``parsed`` (the header parsed at
import). RUNS > 1 repeats the scenario with the package imported afresh each
time (new FFI, nothing resolved), so every run's first-time work is really first-time.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import sys
import threading

HANG_SECONDS = float(os.environ.get("CTXCACHE_REPRO_TIMEOUT", "20"))


def fresh_ctxcache():
    for name in [n for n in sys.modules if n == "ctxcache" or n.startswith("ctxcache.")]:
        del sys.modules[name]
    import ctxcache

    return ctxcache


def fill_gen0(slack: int) -> list:
    """Leave generation 0 ``slack`` allocations short of a collection (keep the result alive)."""
    pad = []
    for _ in range(gc.get_threshold()[0] - slack - gc.get_count()[0]):
        pad.append([])
    return pad


def cycle(*objects) -> None:
    """Put objects in a reference cycle of the caller's making (only the cyclic collector can free them)."""
    box = list(objects)
    box.append(box)


def collect_under_cffi_lock(ffi) -> None:
    """What a collection inside cffi's first-time work does: run finalizers while the lock is held.

    Only a ``cffi.FFI`` has that lock; the pre-parsed FFI's first-time work holds none, so there the collection just
    runs (its finalizers must still never block nor call C)."""
    lock = getattr(ffi, "_lock", None)
    if lock is None:
        gc.collect()
        return
    with lock:
        gc.collect()


def unresolved(ctxcache, spellings) -> tuple[list[str], list[str]]:
    """(functions never looked up, type spellings never parsed) in the loaded FFI: what cffi would still do lazily.

    A ``cffi.FFI`` keeps what it looked up in the library's instance dict and what it parsed in ``_parsed_types``;
    the pre-parsed FFI keeps both in C, in one dict each that only the garbage collector's view shows (``vars(lib)``
    there would look every function up)."""
    import cffi

    ffi, lib = ctxcache.ffi, ctxcache.lib
    if isinstance(ffi, cffi.FFI):
        functions, types = vars(lib), ffi._parsed_types
    else:
        (functions,) = [r for r in gc.get_referents(lib) if isinstance(r, dict)]
        (types,) = [r for r in gc.get_referents(ffi) if isinstance(r, dict)]
    return sorted(n for n in dir(lib) if n not in functions), sorted(s for s in spellings if s not in types)


def package_spellings(ctxcache) -> set[str]:
    """Every type spelling the package's sources pass to ffi.<something>("...")."""
    import re
    from pathlib import Path

    spellings = set()
    for path in Path(ctxcache.__file__).parent.glob("*.py"):
        spellings |= set(re.findall(r'ffi\.\w+\(\s*"([^"]+)"', path.read_text()))
    return spellings


def new_manager(ctxcache):
    return ctxcache.ContextCacheManager(page_size=4, capacities=ctxcache.ResourceDemand(base_kv_pages=8))


def scenario_manager(ctxcache) -> None:
    """The finding: two managers, drop one, touch a property of the other for the first time."""
    b = new_manager(ctxcache)
    touches = [lambda: b.metrics, lambda: b.live_lease_count, lambda: b.metadata_bytes, lambda: len(b.records),
               lambda: b.records.lru(), lambda: b.pools.free_count(ctxcache.ResourceType.BASE_KV_PAGE),
               lambda: len(b.base_index), lambda: len(b.draft_index), b.check_invariants]
    for i, touch in enumerate(touches):
        a = new_manager(ctxcache)
        pad = fill_gen0(6 + 3 * i)
        del a
        touch()
        del pad
    # A manager in a cycle of the caller's making, collected inside a first-time parse and under the lock.
    for i in range(3):
        cycle(new_manager(ctxcache))
        pad = fill_gen0(8 + 4 * i)
        ctxcache.ffi.typeof("ctxc_manager_metrics_t *" + " *" * (i + 2))  # a spelling nothing resolved before
        del pad
    cycle(new_manager(ctxcache))
    collect_under_cffi_lock(ctxcache.ffi)
    b.check_invariants()
    b.close()


def scenario_leases(ctxcache) -> None:
    manager = new_manager(ctxcache)
    hashes = ctxcache.hash_full_blocks(list(range(16)), page_size=4)
    result = manager.acquire_vanilla(hashes[:1], 4)
    cycle(result.lease, manager)
    other = manager.acquire_vanilla(hashes, 16)
    cycle(other)  # the AcquireResult (holding its lease) in a cycle
    del result, other
    pad = fill_gen0(10)
    ctxcache.ffi.typeof("ctxc_lease_info_t ***")
    del pad
    # Leases of a manager dropped in the same cycle, collected under the lock.
    doomed = new_manager(ctxcache)
    cycle(doomed, doomed.acquire_vanilla(hashes, 16).lease, doomed.acquire_vanilla(hashes[:2], 8).lease)
    del doomed
    live = manager.acquire_vanilla(hashes[:3], 12)
    cycle(live)
    del live
    collect_under_cffi_lock(ctxcache.ffi)
    # The next call on the manager destroys the collected leases (on this, its own, thread).
    assert manager.live_lease_count == 0, manager.live_lease_count
    assert manager.pools.free_count(ctxcache.ResourceType.BASE_KV_PAGE) == 8
    manager.check_invariants()
    manager.close()


def scenario_device(ctxcache) -> None:
    import numpy as np

    device = ctxcache.device
    backend = device.Backend("cpu")
    baseline = backend.allocated_bytes

    def build():
        pool = device.KvPagePool(backend, num_pages=4, page_size=4, layers=[(2, 8)])
        table = device.KvPageTable(backend, max_batch=2, max_pages_per_seq=2, num_pages=4)
        lengths = device.KvLengths(backend, 2)
        state = device.ResidentState(backend, max_batch=2, num_layers=1, recurrent_heads=1, recurrent_head_dim=2,
                                     state_size=2, conv_dim=2, conv_kernel=2)
        storage = device.SnapshotStorage(backend, state=state, base_pool=pool, recurrent_budget_bytes=256,
                                         partial_kv_budget_bytes=1024)
        buffer = backend.buffer(np.arange(64, dtype=np.uint8))
        return pool, table, lengths, state, storage, buffer

    cycle(*build())
    pad = fill_gen0(10)
    ctxcache.ffi.typeof("ctxc_kv_pool_options_t ***")
    del pad
    cycle(*build())
    other = device.Backend("cpu")  # a whole family, its backend included, collected at once
    cycle(other, device.KvLengths(other, 4), other.buffer(16))
    del other
    collect_under_cffi_lock(ctxcache.ffi)
    assert backend.allocated_bytes == baseline, (backend.allocated_bytes, baseline)
    backend.close()


def scenario_hasher(ctxcache) -> None:
    keep = ctxcache.Hasher("sha256", key=b"secret")
    cycle(ctxcache.Hasher("fnv1a128"), ctxcache.Hasher("sha256", key=b"k"))
    pad = fill_gen0(10)
    ctxcache.ffi.typeof("ctxc_hasher_options_t ***")
    del pad
    cycle(ctxcache.Hasher("sha256"))
    collect_under_cffi_lock(ctxcache.ffi)
    keep.hash_full_blocks(list(range(8)), page_size=4)
    keep.close()


def scenario_threads(ctxcache) -> None:
    """Objects made on one thread, collected on another, while that thread holds cffi's lock."""
    hashes = ctxcache.hash_full_blocks(list(range(16)), page_size=4)
    main_manager = new_manager(ctxcache)

    def make_garbage():
        manager = new_manager(ctxcache)
        cycle(manager, manager.acquire_vanilla(hashes, 16).lease)
        cycle(ctxcache.device.Backend("cpu").buffer(32))
        cycle(ctxcache.Hasher("fnv1a128"))

    worker = threading.Thread(target=make_garbage)
    worker.start()
    worker.join()
    collect_under_cffi_lock(ctxcache.ffi)  # made on the worker, collected here

    cycle(main_manager.acquire_vanilla(hashes, 16).lease)
    make_garbage()
    errors = []

    def collect_there():
        try:
            collect_under_cffi_lock(ctxcache.ffi)  # made here, collected on the worker
            pad = fill_gen0(10)
            ctxcache.ffi.typeof("ctxc_record_view_t ***")
            del pad
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    worker = threading.Thread(target=collect_there)
    worker.start()
    worker.join()
    assert not errors, errors
    assert main_manager.live_lease_count == 0  # destroyed here, at the manager's next call, not on the worker
    main_manager.close()


def scenario_resolved(ctxcache) -> None:
    """After import, nothing is left for cffi to do lazily (checked in a fresh interpreter, in either mode)."""
    spellings = package_spellings(ctxcache)
    assert spellings  # the scan found the package's calls
    assert unresolved(ctxcache, spellings) == ([], []), unresolved(ctxcache, spellings)


SCENARIOS = {name[len("scenario_"):]: fn for name, fn in globals().items() if name.startswith("scenario_")}


def main(argv: list[str]) -> int:
    name = argv[1]
    runs = int(argv[2]) if len(argv) > 2 else 1
    for _ in range(runs):
        faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)  # per run: a run takes about a second
        SCENARIOS[name](fresh_ctxcache())
        gc.collect()
    faulthandler.cancel_dump_traceback_later()
    print("ok", name, runs, "parsed" if sys.modules["ctxcache._ffi"].pre_parsed_module is None else "pre-parsed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
