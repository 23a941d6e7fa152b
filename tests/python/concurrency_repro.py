"""Two Python threads on one ContextCacheManager (issue 24, item 1), run in a fresh interpreter.

    python tests/python/concurrency_repro.py [ROUNDS]

Each of two threads, ROUNDS times: hashes a prompt of its own (cffi releases the GIL inside every C call, so the
two threads' calls really overlap), acquires it (acquire_vanilla), checks the invariants (a long read), publishes
it and closes the lease. A call that
overlaps the other thread's call into the manager's family must raise ctxcache.ConcurrentUseError and change
nothing (the thread then retries it); every other outcome is a result. At the end every lease is gone and
check_invariants() passes. Prints one JSON object; exits 0 when that all held, 1 when an unexpected exception or
a failed check happened. On a library without the detection the overlapping calls corrupt the manager: spurious
errors, a failed invariant check, or a signal (SIGSEGV, SIGABRT), which the caller sees as the exit status.
"""

from __future__ import annotations

import faulthandler
import json
import sys
import threading

import numpy as np

import ctxcache

faulthandler.enable()  # a crash prints the threads' stacks before the signal ends the process
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
PAGE = 16
BLOCKS = 256  # long prompts: long calls, so that the threads' calls overlap often
PROMPTS = 24  # per thread: records are hit, published and evicted
Refused = getattr(ctxcache, "ConcurrentUseError", ())  # absent before the detection: then nothing is expected


def main() -> int:
    manager = ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=4 * BLOCKS), max_records=64)
    counts = {"refused": 0, "published": 0, "insufficient": 0}
    errors: list[str] = []
    lock = threading.Lock()  # guards the counters only

    def retried(call, *args):  # a refused call changed nothing: the same call again
        for _ in range(1_000_000):
            try:
                return call(*args)
            except Refused:
                with lock:
                    counts["refused"] += 1
        raise TimeoutError("refused a million times")

    prompts = [[np.arange(BLOCKS * PAGE, dtype=np.int32) + thread * 1_000_000 + p * 10_000 for p in range(PROMPTS)]
               for thread in range(2)]

    def worker(thread: int) -> None:
        try:
            for round_ in range(ROUNDS):
                tokens = prompts[thread][round_ % PROMPTS]
                hashes = ctxcache.hash_full_blocks(tokens, PAGE)
                result = retried(manager.acquire_vanilla, hashes, len(tokens))
                if result.lease is None:
                    with lock:
                        counts["insufficient"] += 1
                    continue
                lease = result.lease
                retried(manager.check_invariants)  # a long read beside the other thread's writes
                retried(manager.publish, lease, hashes, len(tokens))
                retried(lease.close)
                with lock:
                    counts["published"] += 1
        except Exception as error:  # anything but a refusal is a failure of the contract
            with lock:
                errors.append(f"thread {thread}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        manager.check_invariants()
        if manager.live_lease_count != 0:
            errors.append(f"{manager.live_lease_count} leases left")
    except Exception as error:
        errors.append(f"after the threads: {type(error).__name__}: {error}")
    print(json.dumps({"rounds": ROUNDS, **counts, "errors": errors[:5]}))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
