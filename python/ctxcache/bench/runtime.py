"""``ctxcache bench-runtime``: the runtime's own bookkeeping through Python, the engine's work excluded.

This is the Python half of the runtime benchmark; ``tools/bench/bench_runtime.cpp`` is the C++ half and
``tools/bench_runtime`` runs both and checks that every non-timing figure agrees. The definitions are the C++
file's (see its header comment) and must stay identical:

- prompts: ``std::mt19937(seed)`` (numpy's legacy ``RandomState(seed)`` draws the same 32-bit stream: full-range
  uint32 ``randint`` is one draw per value): 8 system prompts of 1,024 tokens, then per request a draw picking
  the system prompt (``% 8``), a draw for its own length (``64 + % 960``) and that many tokens; a token is a draw
  ``% 32000``. The decode batch: ``std::mt19937(seed + 1)``, 200 tokens per row. ``prompt_token_sum`` and
  ``decode_token_sum`` prove both paths drew the same tokens;
- pools: ``8 * 1024 // P + requests * (1024 // P + 2) // 2`` pages of one layer (1 KV head of 8, fp16),
  ``2048 // P + 2`` pages per sequence; the decode rig ``batch * (that + 2)`` pages and ``that + (steps + P) // P``
  pages per sequence; 1 << 20 records; unkeyed SHA-256.

1. Per request, a single pass in prompt order, each request once (no best-of: a server sees each prompt once):

   - manager: ``Hasher.hash_full_blocks``, ``acquire_vanilla``, publish the prefill end, ``lease.close()``.
     The C++ path acquires with a page coverage of ``ceil((n + 1) / P)`` pages (the runtime's headroom of one
     token); the C ABI has no coverage argument, so Python acquires ``ceil(n / P)`` pages and grows the lease by
     the difference (one page when P divides n): one more manager call on those requests (``grow_calls``);
   - runtime: ``ManagedKVCacheRequest.begin`` (batch of one), ``prepare_prefill``, ``enqueue_prefill_captures``,
     ``complete_prefill`` (the lookahead token appended), ``finish``, ``close``. Building the two
     :class:`DecodingContext` objects is the caller's and is timed (the C++ path times its admission copy too).

   overhead per request = (runtime - manager) / requests, both from this one pass.
2. Per sequence per decode step: a batch of 8 rows of 200-token prompts (commit policy PREFILL_STATE_ONLY)
   decodes ``steps`` steps; a step is ``prepare_decode_step`` + ``complete_decode_step`` (the engine's token
   append between them is not timed; the histories are views of preallocated buffers). Steps where a row
   crosses a page are reported apart. Python only, to say where the time goes: the same decode on a second
   rig through the C ABI with one prebuilt ``ctxc_decoding_context_t`` (no Python marshalling), the
   marshalling alone (``ctxcache.runtime._marshal._c_context``, once per call), and the slope of the C-ABI step time over the
   history length (the C ABI copies every row's history into vectors on each call): the medians of the first and
   last quarter of the steps over their mean histories (robust to a shared machine's preemptions).
3. Launches per snapshot capture and restore of all layers (hybrid, 4 recurrent + 4 attention layers):
   ``Backend.counters.kernels`` around one restore and one capture of a batch of one.

Usage: ``ctxcache bench-runtime [--requests N] [--page-size P] [--steps S] [--batch B] [--seed X]``. Prints one
JSON object: the C++ path's keys, then Python-only ones.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._ffi import check, ffi, lib
from ..cli.args import UINT32_MAX, OneLineParser, int_range
from ..device import Backend, KvLengths, KvPagePool, KvPageTable, ResidentState, SnapshotStorage
from ..enums import CommitPolicy, ModelStateKind, SequenceStatus
from ..hashing import Hasher
from ..manager import ContextCacheManager, ResourceDemand
from ..runtime import ContextCacheCoordinator, DecodingContext, ManagedKVCacheRequest, Request, ResidentRef
from ..runtime._marshal import _c_context

SYSTEM_PROMPTS = 8
SYSTEM_TOKENS = 1024
VOCAB = 32000
DECODE_PROMPT = 200
LOOKAHEAD = 7
MAX_RECORDS = 1 << 20
TARGET_OVERHEAD_US = 3.0
TARGET_NS_PER_SEQUENCE_STEP = 150


# ---- the seeded workload (identical in tools/bench/bench_runtime.cpp) -------------------------------------------

class Mt19937:
    """The output stream of ``std::mt19937(seed)``: numpy's legacy RandomState seeds MT19937 the same way
    (init_genrand), and a full-range uint32 ``randint`` returns one 32-bit draw per value, in order."""

    def __init__(self, seed: int) -> None:
        self._state = np.random.RandomState(seed)

    def draws(self, count: int) -> np.ndarray:
        return self._state.randint(0, 2**32, size=count, dtype=np.uint32)

    def __call__(self) -> int:
        return int(self.draws(1)[0])


def prompts(requests: int, seed: int = 1) -> list[np.ndarray]:
    """The requests' prompts, each an int32 array of its tokens followed by the lookahead token (the engine's
    first sample, appended before ``complete_prefill``): ``prompt = out[i][:-1]``."""
    rng = Mt19937(seed)
    systems = [(rng.draws(SYSTEM_TOKENS) % VOCAB).astype(np.int32) for _ in range(SYSTEM_PROMPTS)]
    out = []
    for _ in range(requests):
        system = systems[rng() % SYSTEM_PROMPTS]
        own = 64 + rng() % 960
        tokens = np.empty(SYSTEM_TOKENS + own + 1, dtype=np.int32)
        tokens[:SYSTEM_TOKENS] = system
        tokens[SYSTEM_TOKENS:-1] = rng.draws(own) % VOCAB
        tokens[-1] = LOOKAHEAD
        out.append(tokens)
    return out


def decode_prompts(batch: int, seed: int = 1) -> list[np.ndarray]:
    rng = Mt19937(seed + 1)
    return [(rng.draws(DECODE_PROMPT) % VOCAB).astype(np.int32) for _ in range(batch)]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Rig:
    """A CPU backend, one-layer pool, page table, lengths and an attention-only coordinator over them."""

    def __init__(self, pages: int, page_size: int, batch: int, max_pages_per_seq: int) -> None:
        self.backend = Backend("cpu")
        self.pool = KvPagePool(self.backend, num_pages=pages, page_size=page_size, layers=[(1, 8)])
        self.table = KvPageTable(self.backend, max_batch=batch, max_pages_per_seq=max_pages_per_seq, num_pages=pages)
        self.lengths = KvLengths(self.backend, batch)
        self.max_pages_per_seq = max_pages_per_seq
        self.coordinator = ContextCacheCoordinator(max_records=MAX_RECORDS, max_batch=batch, base_pool=self.pool,
                                                   base_table=self.table, base_lengths=self.lengths)

    def close(self) -> None:
        for r in (self.coordinator, self.lengths, self.table, self.pool, self.backend):
            r.close()


# ---- 1. per request ---------------------------------------------------------------------------------------------

def manager_pass(inputs: Sequence[np.ndarray], page_size: int, pages: int) -> dict[str, Any]:
    """The manager's own calls for every request, once, in order (timed as one pass)."""
    hasher = Hasher("sha256")
    manager = ContextCacheManager(page_size, ResourceDemand(base_kv_pages=pages), MAX_RECORDS)
    reused = grow_calls = refused = 0
    perf = time.perf_counter_ns
    gc.collect()
    try:
        t0 = perf()
        for full in inputs:
            n = full.shape[0] - 1
            tokens = full[:n]
            hashes = hasher.hash_full_blocks(tokens, page_size)
            result = manager.acquire_vanilla(hashes, n)
            lease = result.lease
            if lease is None:
                refused += 1
                continue
            reused += result.plan.reuse_token_length
            extra = _ceil_div(n + 1, page_size) - _ceil_div(n, page_size)  # C++: PageCoverage{ceil((n + 1) / P)}
            if extra:
                grow_calls += 1
                if not manager.grow_base_pages(lease, extra):
                    raise AssertionError("the manager path could not cover the runtime's headroom")
            if hashes.shape[0]:
                manager.publish(lease, hashes, n)
            lease.close()
        ns = perf() - t0
    finally:
        manager.close()
        hasher.close()
    return {"ns": ns, "reused_tokens": reused, "grow_calls": grow_calls, "refused": refused}


def runtime_pass(inputs: Sequence[np.ndarray], page_size: int, pages: int, batch: int,
                 max_pages_per_seq: int) -> dict[str, Any]:
    """The coordinator's lifecycle for a batch of one, every request once, in order (timed as one pass)."""
    rig = _Rig(pages, page_size, batch, max_pages_per_seq)
    running = [SequenceStatus.RUNNING]
    perf = time.perf_counter_ns
    gc.collect()
    try:
        before = rig.coordinator.metrics
        t0 = perf()
        for epoch, full in enumerate(inputs, 1):
            n = full.shape[0] - 1
            prompt = full[:n]
            context = DecodingContext([prompt], [n], [0], running, [ResidentRef(0, epoch)])
            with ManagedKVCacheRequest.begin(rig.coordinator, [Request(prompt)], context) as request:
                request.prepare_prefill()
                request.enqueue_prefill_captures()
                request.complete_prefill(DecodingContext([full], [n], [1], running))
                request.finish()
        ns = perf() - t0
        after = rig.coordinator.metrics
        rig.coordinator.check_invariants()
    finally:
        rig.close()
    return {"ns": ns, "reused_tokens": after.reused_tokens - before.reused_tokens,
            "admitted": after.admitted_sequences - before.admitted_sequences}


# ---- 2. per sequence per decode step ---------------------------------------------------------------------------

class _DecodeBatch:
    """The engine's side of a decode batch: preallocated histories (prompt, lookahead, then one token per step)
    and a DecodingContext whose rows are views of them, updated in place."""

    def __init__(self, rows: Sequence[np.ndarray], capacity: int) -> None:
        self.buffers = []
        for prompt in rows:
            b = np.full(capacity, LOOKAHEAD, dtype=np.int32)
            b[:DECODE_PROMPT] = prompt
            self.buffers.append(b)
        n = len(rows)
        self.length = DECODE_PROMPT
        self.context = DecodingContext([b[:DECODE_PROMPT] for b in self.buffers], [DECODE_PROMPT] * n, [0] * n,
                                       [SequenceStatus.RUNNING] * n, [ResidentRef(b, b + 1) for b in range(n)])

    def append(self) -> None:
        """The engine samples one token per row (the buffers already hold it)."""
        self.length += 1
        c = self.context
        generated = self.length - DECODE_PROMPT
        for i, b in enumerate(self.buffers):
            c.token_ids[i] = b[:self.length]
        c.generated_lengths = [generated] * len(self.buffers)


def _decode_rig(page_size: int, batch: int, max_pages_per_seq: int, steps: int) -> _Rig:
    return _Rig(batch * (max_pages_per_seq + 2), page_size, batch, max_pages_per_seq + (steps + page_size) // page_size)


def _begin_decode(rig: _Rig, rows: Sequence[np.ndarray], capacity: int) -> tuple[ManagedKVCacheRequest, _DecodeBatch]:
    engine = _DecodeBatch(rows, capacity)
    request = ManagedKVCacheRequest.begin(rig.coordinator, [Request(b[:DECODE_PROMPT]) for b in engine.buffers],
                                          engine.context, commit_policy=CommitPolicy.PREFILL_STATE_ONLY)
    request.prepare_prefill()
    request.enqueue_prefill_captures()
    engine.append()  # the lookahead token
    request.complete_prefill(engine.context)
    return request, engine


def _crossing(committed: int, page_size: int) -> bool:
    return (committed + 1) % page_size == 1 or page_size == 1  # the step that needs one more page


def decode_pass(rows: Sequence[np.ndarray], page_size: int, steps: int, batch: int,
                max_pages_per_seq: int) -> dict[str, Any]:
    """Per-step times through the Python API: (plain ns, plain steps, all ns, steps)."""
    rig = _decode_rig(page_size, batch, max_pages_per_seq, steps)
    steps = min(steps, (rig.max_pages_per_seq - 1) * page_size - (DECODE_PROMPT + 1))
    perf = time.perf_counter_ns
    plain_ns = all_ns = plain_steps = 0
    try:
        request, engine = _begin_decode(rig, rows, DECODE_PROMPT + 2 + steps)
        context = engine.context
        committed = DECODE_PROMPT
        gc.collect()
        for _ in range(steps):
            crossing = _crossing(committed, page_size)
            t0 = perf()
            request.prepare_decode_step(context)
            t1 = perf()
            engine.append()
            t2 = perf()
            request.complete_decode_step(context)
            t3 = perf()
            dt = (t1 - t0) + (t3 - t2)
            all_ns += dt
            if not crossing:
                plain_ns += dt
                plain_steps += 1
            committed += 1
        request.finish()
        request.close()
    finally:
        rig.close()
    return {"steps": steps, "plain_steps": plain_steps, "plain_ns": plain_ns, "all_ns": all_ns}


def decode_breakdown(rows: Sequence[np.ndarray], page_size: int, steps: int, batch: int,
                     max_pages_per_seq: int) -> dict[str, Any]:
    """The same decode through the C ABI with one prebuilt context (counts and lengths updated in place), and
    the Python marshalling of one call (``ctxcache.runtime._marshal._c_context``) timed apart, every step."""
    rig = _decode_rig(page_size, batch, max_pages_per_seq, steps)
    steps = min(steps, (rig.max_pages_per_seq - 1) * page_size - (DECODE_PROMPT + 1))
    perf = time.perf_counter_ns
    histories: list[int] = []
    step_ns: list[int] = []
    marshal_ns = 0
    try:
        request, engine = _begin_decode(rig, rows, DECODE_PROMPT + 2 + steps)
        n = len(engine.buffers)
        c = ffi.new("ctxc_decoding_context_t *")
        lib.ctxc_decoding_context_init(c)
        pointers = ffi.new("const int32_t *[]", [ffi.cast("const int32_t *", ffi.from_buffer(b)) for b in engine.buffers])
        counts = ffi.new("int32_t[]", [engine.length] * n)
        raw = ffi.new("int32_t[]", [DECODE_PROMPT] * n)
        generated = ffi.new("int32_t[]", [engine.length - DECODE_PROMPT] * n)
        status = ffi.new("int32_t[]", [int(SequenceStatus.RUNNING)] * n)
        c.active_batch_size, c.token_ids, c.token_counts = n, pointers, counts
        c.raw_input_lengths, c.generated_lengths, c.status = raw, generated, status
        headroom = ffi.new("ctxc_kv_headroom_t *", {"base_extra_tokens": 1, "draft_extra_tokens": 0})
        handle = request._live()
        prepare, complete, null = lib.ctxc_kv_request_prepare_decode_step, lib.ctxc_kv_request_complete_decode_step, ffi.NULL
        committed = DECODE_PROMPT
        gc.collect()
        for _ in range(steps):
            t0 = perf()
            _c_context(engine.context, [])
            marshal_ns += perf() - t0
            crossing = _crossing(committed, page_size)
            t0 = perf()
            s1 = prepare(handle, c, headroom)
            t1 = perf()
            engine.append()
            for i in range(n):
                counts[i] = engine.length
                generated[i] = engine.length - DECODE_PROMPT
            t2 = perf()
            s2 = complete(handle, c, null, 0)
            t3 = perf()
            check(s1)
            check(s2)
            if not crossing:
                histories.append(engine.length - 1)  # the history each call copied (prepare's; complete's is + 1)
                step_ns.append((t1 - t0) + (t3 - t2))
            committed += 1
        request.finish()
        request.close()
    finally:
        rig.close()
    x = np.asarray(histories, dtype=np.float64)
    y = np.asarray(step_ns, dtype=np.float64) / n
    # The cost per token of history: medians of the first and the last quarter of the steps (a shared machine's
    # preemptions are outliers a least-squares fit would follow), over their mean histories.
    slope, intercept = 0.0, float(np.median(y)) if len(y) else 0.0
    q = len(x) // 4
    if q and x[-q:].mean() > x[:q].mean():
        early, late = float(np.median(y[:q])), float(np.median(y[-q:]))
        slope = (late - early) / (x[-q:].mean() - x[:q].mean())
        intercept = early - slope * x[:q].mean()
    return {"steps": steps, "plain_ns_per_sequence_step": float(y.mean()) if len(y) else 0.0,
            "marshal_ns_per_call": marshal_ns / steps if steps else 0.0,
            "slope_ns_per_history_token": slope, "intercept_ns": intercept,
            "history_first": int(x[0]) if len(x) else 0, "history_last": int(x[-1]) if len(x) else 0}


# ---- 3. launches per snapshot capture and restore ----------------------------------------------------------------

def launches(page_size: int) -> dict[str, Any]:
    backend = Backend("cpu")
    pool = KvPagePool(backend, num_pages=64, page_size=page_size, layers=[(2, 8)] * 4)
    table = KvPageTable(backend, max_batch=1, max_pages_per_seq=16, num_pages=64)
    lengths = KvLengths(backend, 1)
    geometry = dict(max_batch=1, num_layers=4, recurrent_heads=2, recurrent_head_dim=4, state_size=4, conv_dim=8,
                    conv_kernel=4)
    state = ResidentState(backend, **geometry)
    # The C++ path sizes the budgets with SnapshotStorage::*BytesPerSlot; Python reads them off a probe's layout.
    probe = SnapshotStorage(backend, state=state, base_pool=pool, recurrent_budget_bytes=1 << 20,
                            partial_kv_budget_bytes=1 << 20)
    layout = probe.layout
    probe.close()
    snapshots = SnapshotStorage(backend, state=state, base_pool=pool,
                                recurrent_budget_bytes=8 * layout.recurrent_bytes_per_slot,
                                partial_kv_budget_bytes=8 * layout.partial_kv_bytes_per_slot)
    coordinator = ContextCacheCoordinator(max_batch=1, model_state_kind=ModelStateKind.HYBRID, base_pool=pool,
                                          base_table=table, base_lengths=lengths, resident_state=state,
                                          snapshots=snapshots)
    running = [SequenceStatus.RUNNING]

    def serve_once(epoch: int, tokens: np.ndarray) -> tuple[int, int]:
        n = tokens.shape[0]
        context = DecodingContext([tokens], [n], [0], running, [ResidentRef(0, epoch)])
        with ManagedKVCacheRequest.begin(coordinator, [Request(tokens)], context) as request:
            k0 = backend.counters.kernels
            request.prepare_prefill()
            restore = backend.counters.kernels - k0
            k1 = backend.counters.kernels
            request.enqueue_prefill_captures()
            capture = backend.counters.kernels - k1
            request.complete_prefill(DecodingContext([np.append(tokens, np.int32(LOOKAHEAD))], [n], [1], running))
            request.finish()
        return restore, capture

    try:
        prompt = np.full(page_size + page_size // 2, 3, dtype=np.int32)
        cold_restore, capture = serve_once(1, prompt)
        warm_restore, _ = serve_once(2, np.append(prompt, np.array([9, 10], dtype=np.int32)))
        restored = coordinator.metrics.hybrid_restores == 1
    finally:
        for r in (coordinator, snapshots, state, lengths, table, pool, backend):
            r.close()
    return {"capture": capture, "restore": warm_restore, "restored": restored, "cold": cold_restore}


# ---- the benchmark ------------------------------------------------------------------------------------------------

def run(requests: int = 2000, page_size: int = 128, steps: int = 2000, batch: int = 8, seed: int = 1,
        breakdown: bool = True) -> dict[str, Any]:
    """Every figure, in the C++ path's key order, then the Python-only ones."""
    if requests <= 0 or page_size <= 0 or steps <= 0 or batch <= 0:
        raise ValueError("requests, page size, steps and batch must be positive")
    p = page_size
    inputs = prompts(requests, seed)
    pages = 8 * 1024 // p + requests * (1024 // p + 2) // 2  # about half the distinct pages
    max_pages_per_seq = 2048 // p + 2

    manager = manager_pass(inputs, p, pages)
    rt = runtime_pass(inputs, p, pages, batch, max_pages_per_seq)
    if rt["reused_tokens"] != manager["reused_tokens"]:
        raise AssertionError(f"the paths disagree on reuse ({rt['reused_tokens']} vs {manager['reused_tokens']} "
                             "tokens)")
    rows = decode_prompts(batch, seed)
    decode = decode_pass(rows, p, steps, batch, max_pages_per_seq)
    counts = launches(p)

    manager_us = manager["ns"] / requests / 1e3
    runtime_us = rt["ns"] / requests / 1e3
    per_step = decode["plain_ns"] / decode["plain_steps"] / batch if decode["plain_steps"] else 0.0
    out: dict[str, Any] = {
        "path": "python", "requests": requests, "page_size": p,
        "prompt_tokens": sum(int(t.shape[0]) - 1 for t in inputs),
        "prompt_token_sum": sum(int(t[:-1].sum(dtype=np.uint64)) for t in inputs),
        "reused_tokens": rt["reused_tokens"],
        "manager_us_per_request": round(manager_us, 3), "runtime_us_per_request": round(runtime_us, 3),
        "runtime_overhead_us_per_request": round(runtime_us - manager_us, 3),
        "target_overhead_us_per_request": TARGET_OVERHEAD_US,
        "decode_batch": batch, "decode_token_sum": sum(int(r.sum(dtype=np.uint64)) for r in rows),
        "decode_steps": decode["steps"], "decode_steps_without_crossing": decode["plain_steps"],
        "ns_per_sequence_step_without_crossing": round(per_step, 1),
        "ns_per_sequence_step_all": round(decode["all_ns"] / decode["steps"] / batch, 1),
        "target_ns_per_sequence_step": TARGET_NS_PER_SEQUENCE_STEP,
        "snapshot_layers": {"recurrent": 4, "attention": 4},
        "launches_per_capture": counts["capture"], "launches_per_restore": counts["restore"],
        "restore_happened": counts["restored"], "launches_for_cold_zeroing": counts["cold"],
        # Python only
        "manager_grow_calls": manager["grow_calls"], "runtime_admitted": rt["admitted"],
    }
    if breakdown:
        b = decode_breakdown(rows, p, steps, batch, max_pages_per_seq)
        out.update({
            "c_abi_ns_per_sequence_step_without_crossing": round(b["plain_ns_per_sequence_step"], 1),
            "marshal_ns_per_call": round(b["marshal_ns_per_call"], 1),
            "marshal_ns_per_sequence_step": round(2 * b["marshal_ns_per_call"] / batch, 1),
            "c_abi_ns_per_history_token_per_sequence_step": round(b["slope_ns_per_history_token"], 4),
            "c_abi_ns_per_sequence_step_at_empty_history": round(b["intercept_ns"], 1),
            "breakdown_history_tokens": [b["history_first"], b["history_last"]],
        })
    return out


def build_parser() -> OneLineParser:
    """The command's options (a bad value: one line, exit status 2)."""
    parser = OneLineParser(prog="ctxcache bench-runtime", description=__doc__.split("\n\n")[0])
    # The upper bounds keep the pools under about a GiB (32 bytes per token; see the module comment's sizes).
    parser.add_argument("--requests", type=int_range(1, 20_000), default=2000,
                        help="requests of the per-request pass, each once in prompt order (default 2000, at most "
                             "20,000)")
    parser.add_argument("--page-size", type=int_range(1, 1024), default=128,
                        help="tokens per page (default 128, at most 1024)")
    parser.add_argument("--steps", type=int_range(1, 100_000), default=2000,
                        help="decode steps of the per-step pass (default 2000, at most 100,000)")
    parser.add_argument("--batch", type=int_range(1, 256), default=8,
                        help="rows of the decode batch (default 8, at most 256)")
    parser.add_argument("--seed", type=int_range(0, UINT32_MAX - 1), default=1,
                        help=f"prompt seed, 0 to {UINT32_MAX - 1}: the decode batch draws from seed + 1 (default 1)")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the C-ABI / marshalling decode breakdown")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    print(json.dumps(run(args.requests, args.page_size, args.steps, args.batch, args.seed,
                         breakdown=not args.no_breakdown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
