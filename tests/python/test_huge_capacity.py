"""Capacities up to INT32_MAX (issue 24, item 3), in subprocesses under an address-space limit and a time limit.

`ctxcache replay --bookkeeping-only --base-pages 2147483647` used to allocate about 100 GiB of page metadata up
front (the machine went out of memory); the metadata now grows with the pages used, so the run is served under
`ulimit -v 4000000`. Where even the first part of the metadata cannot be allocated (a tighter limit), the answer is
a typed error naming the bytes: ctxcache.OutOfMemoryError from Python, one line and exit 2 from the command.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap

import pytest

from conftest import UNDER_SANITIZER

# Every test here runs a child under an address-space limit, which AddressSanitizer's shadow memory cannot meet.
pytestmark = pytest.mark.skipif(UNDER_SANITIZER, reason="ulimit -v cannot hold AddressSanitizer's shadow memory "
                                                       "(tools/test runs these without it)")

INT32_MAX = 2**31 - 1
ULIMIT_V_BYTES = 4_000_000 * 1024  # `ulimit -v 4000000`

_ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _limit_address_space() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (ULIMIT_V_BYTES, ULIMIT_V_BYTES))


# Imports first, then a limit of the address space mapped so far plus `headroom` bytes (the soft limit only, so
# the child can lift it again), then the body.
_PRELUDE = """
import resource

def _mapped_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()

def limit(headroom):
    resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + headroom, resource.getrlimit(resource.RLIMIT_AS)[1]))

def unlimit():
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.getrlimit(resource.RLIMIT_AS)[1]))
"""


def _run_python(body: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    code = _PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=_ENV)


def test_replay_of_int32_max_pages_is_served_under_ulimit_v():
    proc = subprocess.run(
        [sys.executable, "-m", "ctxcache.cli", "replay", "--bookkeeping-only", "--base-pages", str(INT32_MAX),
         "--limit", "40", "--no-progress", "--json"],
        capture_output=True, text=True, timeout=180, env=_ENV, preexec_fn=_limit_address_space)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert report["capacity_pages"] == INT32_MAX and report["requests"] == 40
    # A capacity no request exhausts: nothing evicted or refused, every reusable token reused.
    assert report["evicted_records"] == 0 and report["rejected"] == 0 and report["grow_failures"] == 0
    assert report["reused_tokens"] == report["upper_bound_reused_tokens"] > 0


def test_replay_whose_metadata_cannot_be_allocated_is_one_line_and_exit_2():
    proc = _run_python("""
        import sys
        import tqdm
        from ctxcache.cli import replay
        tqdm.tqdm.monitor_interval = 0  # no monitor thread: its 8 MiB stack would not fit in the limit either
        limit(8 << 20)  # less than the first 2^20 pages' metadata
        sys.exit(replay.replay_main(["--bookkeeping-only", "--base-pages", "2147483647", "--limit", "8",
                                     "--no-progress"]))
        """)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0] == ("ctxcache replay: error: out of memory: ctxc_manager_create: ResourcePools: metadata for "
                        "1048576 ids of the base KV page pool (capacity 2147483647): cannot allocate 12582912 bytes "
                        "(12.0 MiB)"), lines[0]
    assert proc.stdout == ""


def test_manager_of_int32_max_pages_raises_a_typed_error_or_serves():
    proc = _run_python("""
        import ctxcache
        from ctxcache import ContextCacheManager, ResourceDemand, PublishStatus
        huge = ResourceDemand(2147483647, 2147483647, 2147483647, 2147483647)
        limit(8 << 20)
        try:
            ContextCacheManager(4, huge, 64)
        except ctxcache.OutOfMemoryError as e:
            assert isinstance(e, MemoryError) and e.status == 4
            assert "ctxc_manager_create: ResourcePools: metadata for 1048576 ids" in str(e), str(e)
            assert "cannot allocate 12582912 bytes (12.0 MiB)" in str(e), str(e)
            print("refused")
        unlimit()
        limit(512 << 20)  # the eager metadata (under 128 MiB) and what this use adds
        with ContextCacheManager(4, huge, 64) as m:
            tokens = list(range(4 * 3000))
            hashes = ctxcache.hash_full_blocks(tokens, 4)
            r = m.acquire_vanilla(hashes, len(tokens))
            assert [int(p) for p in r.lease.base_pages][-1] == 2999
            assert m.publish(r.lease, hashes, len(tokens)).status == PublishStatus.PUBLISHED
            r.lease.release()
            again = m.acquire_vanilla(hashes, len(tokens))
            assert again.plan.reuse_token_length == len(tokens) - 4
            assert [int(p) for p in again.lease.base_pages][:3] == [0, 1, 2]
            again.lease.release()
            m.check_invariants()
            assert m.pools.free_count(ctxcache.ResourceType.BASE_KV_PAGE) == 2147483647 - 3000
        print("served")
        """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused", "served"]
