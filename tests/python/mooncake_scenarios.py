"""Scenarios against a real Mooncake Store, each run by tests/python/test_mooncake_store.py inside fresh network and
PID namespaces (mooncake_support.run_scenario): ``python mooncake_scenarios.py NAME``. Each brings up loopback,
starts the servers it needs, asserts what it can see from inside, and prints one JSON line of figures for the test
to check. Every loop is bounded; the namespaces end every server with the scenario.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable

import numpy as np

from ctxcache import KvStore, StoreLink
from ctxcache.mooncake_store import MooncakeStore
from ctxcache.sim import ReferenceEngine, Request
from mooncake_support import URL, Master, StoreNode, loopback_up, settle, wait_port

NO_SEGMENT_URL = URL.replace("segment=64MiB", "segment=0")  # a client whose objects live on the store node
DEADLINE_S = 0.1  # master_restart's load deadline (the library's default is 0.05 s)


def prompts(n: int, salt: int, shared_pages: int = 8, own_tokens: int = 40) -> list[Request]:
    """n prompts sharing ``shared_pages`` pages of 16 tokens (unique to ``salt``), each with tokens of its own."""
    shared = [1 + (salt * 7919 + t * 31) % 30000 for t in range(16 * shared_pages)]
    return [Request(np.array(shared + [1 + (salt * 131 + i * 977 + t) % 30000 for t in range(own_tokens)],
                             dtype=np.int32), max_new_tokens=3) for i in range(n)]


def engine(store: KvStore, model: str = "scenario", deadline_s: float = 2.0, **kwargs: Any) -> ReferenceEngine:
    """A replica over ``store``; the load deadline is generous (2 s: these scenarios are about which bytes come
    back, on a machine whose 2 cores also run the servers) except where a scenario measures the wait itself."""
    options = {"base_pages": 48, "host_tier_pages": 256, "host_write": "through", **kwargs}
    return ReferenceEngine(host_store=StoreLink(store, model=model, load_deadline_s=deadline_s),
                           **options)  # type: ignore[arg-type]


def cold(requests: list[Request], **kwargs: Any) -> list[Any]:
    with ReferenceEngine(base_pages=kwargs.get("base_pages", 48), reuse=False,
                         **{k: v for k, v in kwargs.items() if k != "base_pages"}) as e:
        return e.serve(requests)


def same(got: list[Any], want: list[Any]) -> bool:
    return all(g.state_digest == w.state_digest and list(g.generated) == list(w.generated)
               for g, w in zip(got, want)) and len(got) == len(want)


def store_counters(e: ReferenceEngine) -> dict[str, int]:
    m = e.metrics
    return {k: int(getattr(m, k)) for k in dir(m) if k.startswith("store_")}


def open_mooncake(url: str = URL, ready_s: float = 20.0) -> tuple[MooncakeStore, KvStore]:
    backend = MooncakeStore.from_url(url)
    assert backend.wait_ready(ready_s), "the Mooncake client did not set up"
    return backend, KvStore.from_backend(backend)


def timed(f: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    t = time.monotonic()
    out = f(*args)
    return out, time.monotonic() - t


# ---- scenarios ---------------------------------------------------------------------------------------------------

def shared() -> dict[str, Any]:
    """Two replicas in one process share the store: the second, started empty, loads the first's prefix through
    registered host-tier memory (no copy) and its bytes equal a cold run's."""
    master = Master()
    master.start()
    backend, store = open_mooncake()
    requests = prompts(6, salt=1)
    with engine(store) as a:
        a.serve(requests[:3])
        settle(a)
        put = store_counters(a)["store_put_blocks"]
        with engine(store) as b:
            got = b.serve(requests[3:])
            counters = store_counters(b)
            starts = [o.prefill_start for o in got]
    ok = same(got, cold(requests[3:]))
    store.close()
    backend.close()
    return {"byte_exact": ok, "a_put_blocks": put, "b": counters, "prefill_starts": starts,
            "zero_copy_keys": backend.zero_copy_keys, "copied_keys": backend.copied_keys}


def two_process() -> dict[str, Any]:
    """Process A (`ctxcache replay` of the first requests, its client without a segment: the objects live on a store
    node) is killed with SIGKILL; process B, started empty, replays more of the workload, reuses A's prefixes from
    the store, and --verify finds it byte-exact."""
    master = Master()
    master.start()
    node = StoreNode()
    node.start()
    common = ["--limit", "", "--capacity-tokens", "4096", "--host-tier-pages", "4000", "--host-write", "through",
              "--no-optimum", "--json", "--store-deadline-ms", "2000"]
    a_args = list(common)
    a_args[1] = "24"
    a = subprocess.Popen([sys.executable, __file__, "serve_and_wait", *a_args, "--store", NO_SEGMENT_URL],
                         stdout=subprocess.PIPE, text=True)
    assert a.stdout is not None
    lines: list[str] = []
    end = time.monotonic() + 120
    while time.monotonic() < end:
        line = a.stdout.readline()
        if not line or line.startswith("SERVED"):
            break
        lines.append(line)
    assert line.strip() == "SERVED 0", f"process A did not serve its requests ({line.strip()!r})"
    assert lines, "process A printed no report"
    report_a = json.loads("".join(lines))
    os.kill(a.pid, signal.SIGKILL)
    a.wait(timeout=10)
    b_args = list(common)
    b_args[1] = "48"
    b = subprocess.run([sys.executable, "-m", "ctxcache.cli", "replay", *b_args, "--verify",
                        "--store", NO_SEGMENT_URL], capture_output=True, text=True, timeout=180)
    assert b.returncode == 0, b.stderr[-3000:]
    report_b = json.loads(b.stdout)
    alone = subprocess.run([sys.executable, "-m", "ctxcache.cli", "replay", *b_args], capture_output=True, text=True,
                           timeout=180)  # B's workload with no store: what it reuses on its own
    assert alone.returncode == 0, alone.stderr[-3000:]
    return {"a_killed_by": -a.returncode, "a": {k: report_a[k] for k in ("reused_tokens", "store")},
            "b": {k: report_b[k] for k in ("reused_tokens", "reused_tokens_store", "reused_tokens_host", "store",
                                           "verify", "requests")},
            "b_alone": {"reused_tokens": json.loads(alone.stdout)["reused_tokens"]}}


def serve_and_wait(*argv: str) -> None:
    """Process A of two_process: `ctxcache replay ARGV` in this process (its report on stdout), then SERVED, then
    it waits to be killed."""
    from ctxcache.cli.commands import main

    status = main(["replay", *argv])
    sys.stdout.flush()
    print("SERVED", status, flush=True)
    time.sleep(300)


def absent_at_start() -> dict[str, Any]:
    """No master when the engine starts: it serves at once (the store answers unavailable without a wait), the
    store joins once a master appears, and a second replica then reuses the first's blocks."""
    backend = MooncakeStore.from_url(URL, retry_s=0.2)
    store = KvStore.from_backend(backend)
    early = prompts(3, salt=2)
    with engine(store) as a:
        got, early_s = timed(a.serve, early)
        early_ok = same(got, cold(early))
        settle(a)  # the puts' answers (unavailable) come back
        early_counters = store_counters(a)
        master = Master()
        master.start()
        ready, join_s = timed(backend.wait_ready, 30)
        later = prompts(6, salt=3)
        a.serve(later[:3])
        settle(a)
        with engine(store) as b:
            got_b = b.serve(later[3:])
            counters_b = store_counters(b)
    ok = early_ok and same(got_b, cold(later[3:]))
    store.close()
    backend.close()
    return {"byte_exact": ok, "early_serve_s": early_s, "early": early_counters, "joined": ready,
            "join_s": join_s, "b": counters_b}


def master_restart() -> dict[str, Any]:
    """The master is killed mid-run: no request waits past the deadline plus 50 ms (each one's serving time minus
    its serving time with no store at all), bytes stay exact; after a restart (an empty store) hits resume within
    5 s."""
    master = Master()
    master.start()
    backend, store = open_mooncake()
    worst_extra = 0.0
    exact = True
    with engine(store) as a, engine(store, deadline_s=DEADLINE_S) as b, \
            ReferenceEngine(base_pages=48, host_tier_pages=256, host_write="through") as alone:
        warm = prompts(4, salt=4)
        a.serve(warm[:2])
        settle(a)
        b.serve(warm[2:3])
        hits_before = store_counters(b)["store_loaded_tokens"]
        master.kill()
        killed_at = time.monotonic()
        k = 0
        while k < 12 or time.monotonic() - killed_at < 3.0:  # through the store's failures: each request alone, timed against a store-less engine
            req = prompts(1, salt=100 + k)
            got, took = timed(b.serve, req)
            _, base = timed(alone.serve, req)
            worst_extra = max(worst_extra, took - base)
            exact = exact and same(got, cold(req))
            if k % 3 == 0:
                a.serve(prompts(1, salt=200 + k))  # puts into a dead store
            k += 1
        down_s = time.monotonic() - killed_at
        master.start()
        restarted_at = time.monotonic()
        resumed_s = None
        attempt = 0
        while time.monotonic() - restarted_at < 20 and resumed_s is None:  # past 5 s only to report how late
            attempt += 1
            fresh = prompts(2, salt=300 + attempt)
            a.serve(fresh[:1])
            settle(a, timeout_s=2)
            before = store_counters(b)["store_loaded_tokens"]
            got, took = timed(b.serve, fresh[1:])
            _, base = timed(alone.serve, fresh[1:])
            worst_extra = max(worst_extra, took - base)
            exact = exact and same(got, cold(fresh[1:]))
            if store_counters(b)["store_loaded_tokens"] > before:
                resumed_s = time.monotonic() - restarted_at
            else:
                time.sleep(0.1)
        counters = store_counters(b)
    store.close()
    backend.close()
    return {"byte_exact": exact, "hits_before": hits_before, "worst_extra_s": worst_extra, "down_s": down_s,
            "deadline_s": DEADLINE_S,
            "resumed_s": resumed_s, "b": counters}


def holder_killed() -> dict[str, Any]:
    """The store node holding the objects is killed: a replica asking for them gets failed loads (counted, bytes
    exact), and asks each key at most once while the negative cache holds it."""
    master = Master()
    master.start()
    node = StoreNode()
    node.start()
    backend, store = open_mooncake(NO_SEGMENT_URL)
    requests = prompts(6, salt=5)
    with engine(store) as a:
        a.serve(requests[:3])
        settle(a)
    node.kill()
    with engine(store, base_pages=24) as b:
        first = b.serve(requests[3:])
        settle(b)  # the gets from a dead node fail after ~0.9 s, past the deadline: applied when they come back
        after_first = store_counters(b)
        again = b.serve(requests[3:])  # the same prefixes again (evicted from the small device pool meanwhile)
        settle(b)
        after_again = store_counters(b)
    ok = same(first, cold(requests[3:], base_pages=24)) and same(again, cold(requests[3:], base_pages=24))
    store.close()
    backend.close()
    return {"byte_exact": ok, "first": after_first, "again": after_again}


def full_store() -> dict[str, Any]:
    """A store smaller than what is put: puts it has no room for are dropped and counted; what it holds is
    reused byte for byte."""
    master = Master()
    master.start()
    backend, store = open_mooncake(URL.replace("segment=64MiB", "segment=16MiB"))
    big = {"layers": 8, "kv_heads": 8, "head_dim": 64}  # 256 KiB pages: 16 MiB holds about 60
    requests = [r for salt in range(6) for r in prompts(2, salt=40 + salt, shared_pages=12)]
    with engine(store, **big) as a:
        for r in requests:
            a.serve([r])
        settle(a)
        counters_a = store_counters(a)
    again = prompts(1, salt=45, shared_pages=12) + prompts(1, salt=40, shared_pages=12)
    with engine(store, **big) as b:
        got = b.serve(again)
        counters_b = store_counters(b)
    ok = same(got, cold(again, **big))
    store.close()
    backend.close()
    return {"byte_exact": ok, "a": counters_a, "b": counters_b}


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    f.__name__: f for f in (shared, two_process, absent_at_start, master_restart, holder_killed, full_store)}

if __name__ == "__main__":
    if sys.argv[1] == "serve_and_wait":
        serve_and_wait(*sys.argv[2:])
        sys.exit(0)
    loopback_up()
    assert wait_port is not None
    print(json.dumps(SCENARIOS[sys.argv[1]]()), flush=True)
    os._exit(0)  # no interpreter teardown: Mooncake's threads may still be running (the namespace ends them)
