"""The reference engine: a deterministic stand-in for an inference engine that proves every reuse byte-exact.

It serves requests through the runtime exactly as an engine would (the ManagedKVCacheRequest facade over a
context-cache coordinator: begin, prefill from the prefill start, captures, completion, decode steps, joiners,
compaction, finish) and writes real KV, draft KV and recurrent state through the page tables the runtime
manages. Every stored word depends on every earlier position and the next token is sampled from the stored
words, so a wrong page, snapshot, length or compaction changes both the bytes and the generated text::

    from ctxcache import sim
    eng = sim.ReferenceEngine(deployment="attention", page_size=16, base_pages=256)
    out = eng.serve([sim.Request(tokens=np.arange(40, dtype=np.int32), max_new_tokens=8)])
    cold = eng.cold_reference(requests)   # a fresh engine with reuse off: the ground truth
    assert out[0].generated.tolist() == cold[0].generated.tolist()
    assert out[0].state_digest == cold[0].state_digest

Lifetime: ``close()`` or a ``with`` block frees the engine; results are copied out, so nothing outlives it.

Interrupts: a serve of any size can be stopped. On the main thread, ``serve`` runs the C call on a worker thread
and waits in 50 ms slices, so Python's signal handlers keep running: a KeyboardInterrupt there (or
``should_stop()`` turning true) calls ``ctxc_sim_engine_interrupt``, the engine stops at its next batch or decode
step (milliseconds), and KeyboardInterrupt is raised with the engine consistent. ``interrupt()`` does the same
from another thread (the serve then raises :class:`ctxcache.InterruptedCallError`). Why not bound every C call
instead: one batch's work grows with its size and its outputs, and cannot be cut into calls without changing
what a batch is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _arrays
from ._ffi import check, ffi, lib, new_output
from ._resource import Handle
from .device import BackendKind, DType
from .enums import CommitPolicy, EvictionPolicy, HashAlgorithm, SimDeployment, SimSpeculative
from .errors import STATUS_EXCEPTIONS, ArgumentTypeError, InternalError, InvalidArgumentError
from .events import KvEventSource
from .host_tier import HostWritePolicy
from .kv_store import StoreLink
from .manager import eviction_policy_of
from .retention import RetentionMetrics, RetentionSpec, c_retention_spec, clock_ns, retention_metrics_of
from .runtime import ContextCacheMetrics, MediaItem
from .runtime._marshal import _media_items, _metrics

__all__ = ["ContextCacheMetrics", "EngineStats", "MediaItem", "Output", "ReferenceEngine", "Request", "SimDeployment",
           "SimSpeculative"]

@dataclass(frozen=True)
class Request:
    tokens: Any  # a 1-D int32 array (or a sequence of ints)
    max_new_tokens: int = 8
    lora: str | None = None
    media: Sequence[MediaItem] = field(default_factory=tuple)
    cancel_after: int | None = None  # cancelled once it has generated this many tokens
    fail_after: int | None = None  # fails (an engine error) once it has generated this many tokens
    seating_failures: int = 0  # as an in-flight joiner, its first this many seatings fail and are retracted
    retention: RetentionSpec | None = None  # what its publications carry (None: the default, plain LRU)
    # Seconds: the engine drives the retention clock to it as the request is seated, never backwards (None: leaves
    # the clock alone).
    arrival: float | None = None


@dataclass(frozen=True)
class Output:
    prefill_start: int  # where its prefill began: the reuse length (a preempted request: its first admission's)
    generated: np.ndarray  # int32 tokens sampled from the stored bytes
    state_digest: bytes  # SHA-256 of its final KV, draft KV and recurrent bytes in logical order
    cancelled: bool
    failed: bool
    joined: bool  # admitted in flight into a running batch
    attempts: int  # > 1 when a synchronisation fault made it start over


@dataclass(frozen=True)
class EngineStats:
    batches: int
    joiners: int
    joiner_no_capacity: int
    compactions: int
    decode_steps: int
    sync_calls: int
    sync_failures: int
    restarts: int
    capacity_retries: int
    retractions: int
    preemptions: int  # rows preempted (served again from scratch) because a decode step could not grow


class ReferenceEngine(KvEventSource, Handle):
    """A reference engine over its own backend, pools, page tables, snapshot storage and coordinator.

    ``deployment``: "attention", "hybrid", "recurrent" or "eagle". ``base_pages``: the KV pool's pages, positive
    for every deployment with attention layers; a "recurrent" model has no KV pages, so it also takes 0.
    ``backend``: "cpu" (default), "cuda" or "auto". ``reuse=False`` serves every request cold. ``sync_failure_rate`` (with ``fault_seed``) fails device
    synchronisations at seeded random points: the engine recovers (shutdown) and serves again from scratch.
    ``sliding_window=W`` (attention, ``reuse=False``): a model that reads only its last W positions, served through
    the bounded sliding-window backend; ``serve(..., cold=True)`` then keeps the full history.
    ``speculative="mtp"`` (hybrid): Hybrid+MTP, a model whose MTP head's draft at p reads the base hidden row of p;
    requests are served one at a time and ``commit_policy`` defaults to prefill-state-only (the only one allowed).
    ``host_tier_pages=N`` (attention, eagle): a host-memory tier of N pages beside the KV pool (``host_write``
    "back", the default, or "through"; docs/TIERS.md): evicted blocks come back as copies (eagle: with their draft
    pages), and ``metrics.host_loaded_tokens`` counts the prompt tokens loaded from it. ``host_store=StoreLink(store, ...)`` (with a host tier): a byte store
    shared with other replicas under it (ctxcache.kv_store): blocks written to the tier are put there, and a hit the
    host cannot extend is asked of it; ``metrics.store_loaded_tokens`` counts what came from it.
    """

    _destroy = staticmethod(lib.ctxc_sim_engine_destroy)
    _what = "engine"

    def __init__(self, deployment: Any = "attention", *, page_size: int = 16, base_pages: int = 256,
                 max_records: int = 1024, max_batch: int = 8, max_pages_per_sequence: int = 64,
                 snapshot_slots: int = 64, backend: Any = "cpu", seed: int = 0, layers: int = 2, kv_heads: int = 2,
                 head_dim: int = 8, kv_dtype: Any = "fp16", recurrent_layers: int = 2, vocab_size: int = 32000,
                 reuse: bool = True, commit_policy: Any = None,
                 hash_algorithm: Any = HashAlgorithm.SHA256, sync_failure_rate: float = 0.0,
                 fault_seed: int = 1, sliding_window: int = 0, speculative: Any = None,
                 eviction_policy: Any = EvictionPolicy.RECORD_LRU, host_tier_pages: int = 0,
                 host_write: Any = "back", host_store: StoreLink | None = None) -> None:
        o = new_output("ctxc_sim_engine_options_t")
        lib.ctxc_sim_engine_options_init(o)
        o.deployment = _arrays.enum_member(SimDeployment, deployment, "deployment")
        o.page_size = _arrays.integer(page_size, "page_size", minimum=None)
        o.base_pages = _arrays.integer(base_pages, "base_pages", minimum=None)
        o.max_records = _arrays.integer(max_records, "max_records", minimum=None)
        o.eviction_policy = eviction_policy_of(eviction_policy)
        o.host_tier_pages = _arrays.integer(host_tier_pages, "host_tier_pages", minimum=None)
        try:
            o.host_write_policy = int(HostWritePolicy.parse(host_write))
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from None
        o.max_batch = _arrays.integer(max_batch, "max_batch", minimum=None)
        o.max_pages_per_sequence = _arrays.integer(max_pages_per_sequence, "max_pages_per_sequence", minimum=None)
        o.snapshot_slots = _arrays.integer(snapshot_slots, "snapshot_slots", minimum=None)
        o.backend = _arrays.enum_member(BackendKind, backend, "backend")
        o.seed = _arrays.integer(seed, "seed", maximum=2**32 - 1)
        o.layers = _arrays.integer(layers, "layers", minimum=None)
        o.kv_heads = _arrays.integer(kv_heads, "kv_heads", minimum=None)
        o.head_dim = _arrays.integer(head_dim, "head_dim", minimum=None)
        o.kv_dtype = _arrays.enum_member(DType, kv_dtype, "kv_dtype")
        o.recurrent_layers = _arrays.integer(recurrent_layers, "recurrent_layers", minimum=None)
        o.vocab_size = _arrays.integer(vocab_size, "vocab_size", minimum=None)
        o.reuse = 1 if _arrays.boolean(reuse, "reuse") else 0
        o.speculative = _arrays.enum_member(SimSpeculative, "none" if speculative is None else speculative, "speculative")
        if commit_policy is None:  # the deployment's: Hybrid+MTP publishes prefill state only (Appendix C)
            mtp = o.speculative == SimSpeculative.MTP
            commit_policy = CommitPolicy.PREFILL_STATE_ONLY if mtp else CommitPolicy.INCLUDING_GENERATED_TOKENS
        o.commit_policy = _arrays.enum_member(CommitPolicy, commit_policy, "commit_policy")
        o.hash_algorithm = _arrays.enum_member(HashAlgorithm, hash_algorithm, "hash_algorithm")
        o.fault_seed = _arrays.integer(fault_seed, "fault_seed", maximum=2**32 - 1)
        if not isinstance(sync_failure_rate, (int, float)):
            raise ArgumentTypeError(f"sync_failure_rate must be a number, got {type(sync_failure_rate).__name__}")
        o.sync_failure_rate = float(sync_failure_rate)
        o.sliding_window = _arrays.integer(sliding_window, "sliding_window", minimum=None)
        link = None
        if host_store is not None:
            if not isinstance(host_store, StoreLink):
                raise ArgumentTypeError(f"host_store must be a StoreLink (got {type(host_store).__name__})")
            link = host_store.options()  # (options, the model's bytes): alive through the create call
            o.host_store = link[0]
        out = ffi.new("ctxc_sim_engine_t **")
        check(lib.ctxc_sim_engine_create(o, out))
        super().__init__(out[0])
        self._registered: tuple[Any, int] | None = None  # (store backend, address) of the tier's registered memory
        if host_store is not None:
            self._register_tier_memory(host_store.store.backend)

    def _register_tier_memory(self, backend: Any) -> None:
        # A backend that moves bytes without a copy (MooncakeStore) registers the host tier's slots before the
        # first put; the range is unregistered at close(), before the engine's memory goes.
        if backend is None or not callable(getattr(backend, "register_memory", None)):
            return
        address, size = self.host_tier_memory
        if size:
            backend.register_memory(address, size)
            self._registered = (backend, address)

    def poll_store(self) -> tuple[int, int]:
        """Applies the host tier's finished store batches (as every request does first): (applied now, still at
        the store); (0, 0) without a store."""
        applied = ffi.new("size_t *")
        in_flight = ffi.new("size_t *")
        check(lib.ctxc_sim_engine_poll_store(self._live(), applied, in_flight))
        return int(applied[0]), int(in_flight[0])

    @property
    def host_tier_memory(self) -> tuple[int, int]:
        """(address, bytes) of the host tier's slots; (0, 0) without a tier."""
        data = ffi.new("void **")
        size = ffi.new("size_t *")
        check(lib.ctxc_sim_engine_host_tier_memory(self._live(), data, size))
        return int(ffi.cast("uintptr_t", data[0])), int(size[0])

    def close(self) -> None:
        super().close()
        registered, self._registered = getattr(self, "_registered", None), None
        if registered is not None:
            registered[0].unregister_memory(registered[1])

    def serve(self, requests: Sequence[Request], *,
              should_stop: Callable[[], bool] | None = None) -> list[Output]:
        """Serve the requests in order (waves of at most max_batch founders, joiners where the deployment allows,
        preemption when a step cannot grow). KeyboardInterrupt (or ``should_stop()`` true, polled every 50 ms on
        the main thread) stops it within a decode step: see the module comment."""
        return self._serve(requests, cold=False, should_stop=should_stop)

    def cold_reference(self, requests: Sequence[Request], *,
                       should_stop: Callable[[], bool] | None = None) -> list[Output]:
        """The same requests on a fresh engine of this configuration with reuse off and no faults."""
        return self._serve(requests, cold=True, should_stop=should_stop)

    def interrupt(self) -> None:
        """Stop the serve running on another thread (or the next one) at its next batch or decode step: it raises
        InterruptedCallError. Safe to call from any thread while a serve runs."""
        check(lib.ctxc_sim_engine_interrupt(self._live(), 1))

    def _call_interruptibly(self, call: Callable[[], int], results_out: Any,
                            should_stop: Callable[[], bool] | None) -> None:
        """``call()`` (a serve); on the main thread, on a worker thread while the main thread waits where signals
        are handled. Raises the call's typed error (its message read on the thread that made it)."""
        if threading.current_thread() is not threading.main_thread():
            check(call())
            return
        handle = self._live()
        outcome: list[tuple[int, str]] = []

        def work() -> None:
            status = call()
            outcome.append((status, ffi.string(lib.ctxc_last_error()).decode(errors="replace") if status else ""))

        worker = threading.Thread(target=work, name="ctxcache-sim-serve", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.05)
                if should_stop is not None and worker.is_alive() and should_stop():
                    raise KeyboardInterrupt
        except BaseException:
            lib.ctxc_sim_engine_interrupt(handle, 1)
            worker.join()
            lib.ctxc_sim_engine_interrupt(handle, 0)  # the serve may have finished first: withdraw
            if outcome and outcome[0][0] == 0:
                lib.ctxc_sim_results_destroy(results_out[0])
            raise
        status, message = outcome[0]
        if status:
            raise STATUS_EXCEPTIONS.get(status, InternalError)(message)

    def _serve(self, requests: Sequence[Request], *, cold: bool,
               should_stop: Callable[[], bool] | None = None) -> list[Output]:
        if not isinstance(requests, Sequence):
            raise ArgumentTypeError(f"requests must be a sequence of sim.Request, got {type(requests).__name__}")
        count = len(requests)
        c_requests = ffi.new("ctxc_sim_request_t[]", max(count, 1))
        keep: list[Any] = []  # arrays and strings the C structs point at, alive until the call returns
        for i, request in enumerate(requests):
            if not isinstance(request, Request):
                raise ArgumentTypeError(f"requests[{i}] must be a sim.Request, got {type(request).__name__}")
            tokens = _arrays.int32_array(request.tokens, f"requests[{i}].tokens")
            keep.append(tokens)
            c = c_requests[i]
            c.tokens = _arrays.int32_pointer(tokens)
            c.token_count = tokens.size
            c.max_new_tokens = _arrays.integer(request.max_new_tokens, f"requests[{i}].max_new_tokens", minimum=None)
            c.cancel_after = (0 if request.cancel_after is None else
                              _arrays.integer(request.cancel_after, f"requests[{i}].cancel_after", minimum=None))
            c.fail_after = (0 if request.fail_after is None else
                            _arrays.integer(request.fail_after, f"requests[{i}].fail_after", minimum=None))
            c.seating_failures = _arrays.integer(request.seating_failures, f"requests[{i}].seating_failures",
                                                 minimum=None)
            if request.lora:
                lora = ffi.new("char[]", request.lora.encode())
                keep.append(lora)
                c.lora = lora
            c.media, c.media_count = _media_items(request.media, f"requests[{i}]", keep)
            c.retention = c_retention_spec(request.retention, keep)
            if request.arrival is not None:
                arrival = ffi.new("int64_t *", clock_ns(request.arrival, f"requests[{i}].arrival"))
                keep.append(arrival)
                c.arrival_ns = arrival
        results_out = ffi.new("ctxc_sim_results_t **")
        handle = self._live()
        self._call_interruptibly(
            lambda: int(lib.ctxc_sim_engine_serve(handle, c_requests, count, 1 if cold else 0, results_out)),
            results_out, should_stop)
        results = results_out[0]
        try:
            outputs = []
            tokens_out = ffi.new("const int32_t **")
            size_out = ffi.new("size_t *")
            for i in range(count):
                o = new_output("ctxc_sim_output_t")
                check(lib.ctxc_sim_results_output(results, i, o))
                check(lib.ctxc_sim_results_generated(results, i, tokens_out, size_out))
                generated = np.frombuffer(ffi.buffer(tokens_out[0], size_out[0] * 4), dtype=np.int32).copy()
                outputs.append(Output(prefill_start=int(o.prefill_start), generated=generated,
                                      state_digest=bytes(ffi.buffer(o.state_digest, 32)),
                                      cancelled=bool(o.cancelled), failed=bool(o.failed), joined=bool(o.joined), attempts=int(o.attempts)))
            return outputs
        finally:
            check(lib.ctxc_sim_results_destroy(results))

    @property
    def stats(self) -> EngineStats:
        s = new_output("ctxc_sim_engine_stats_t")
        check(lib.ctxc_sim_engine_stats(self._live(), s))
        return EngineStats(batches=s.batches, joiners=s.joiners, joiner_no_capacity=s.joiner_no_capacity,
                           compactions=s.compactions, decode_steps=s.decode_steps, sync_calls=s.sync_calls,
                           sync_failures=s.sync_failures, restarts=s.restarts, capacity_retries=s.capacity_retries,
                           retractions=s.retractions, preemptions=s.preemptions)

    @property
    def metrics(self) -> ContextCacheMetrics:
        """The engine's coordinator metrics (the reference's counters, snake_case), occupancy included."""
        out = new_output("ctxc_context_cache_metrics_t")
        check(lib.ctxc_sim_engine_metrics(self._live(), out))
        return _metrics(out)

    @property
    def peak_pages_per_sequence(self) -> int:
        """With a sliding window: the most pages one sequence had mapped at once (0 without one)."""
        out = ffi.new("int32_t *")
        check(lib.ctxc_sim_engine_peak_pages_per_sequence(self._live(), out))
        return int(out[0])

    def check_invariants(self) -> None:
        """The coordinator's and the manager's invariants, and that no request is live (InvariantError)."""
        check(lib.ctxc_sim_engine_check_invariants(self._live()))

    @property
    def retention_metrics(self) -> RetentionMetrics:
        """What eviction took at which priority in the engine's coordinator, and its expiries and pins."""
        out = new_output("ctxc_retention_metrics_t")
        check(lib.ctxc_sim_engine_retention_metrics(self._live(), out))
        return retention_metrics_of(out)

    def set_retention_time(self, seconds: float) -> None:
        """Drive the retention clock of the engine's coordinator (seconds, any origin, never backwards:
        :class:`ctxcache.ContractError`; a sliding-window engine has no coordinator: ContractError too)."""
        check(lib.ctxc_sim_engine_set_retention_time(self._live(), clock_ns(seconds)))

    def drain(self) -> bool:
        """Evict every record; True when every pool is full again (nothing leaked)."""
        out = ffi.new("int32_t *")
        check(lib.ctxc_sim_engine_drain(self._live(), out))
        return bool(out[0])
