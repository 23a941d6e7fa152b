"""One deployment: every device object a model's context cache needs, sized together from one description.

A coordinator, its manager and the device objects it drives must agree on page size, page counts, batch, layer
shapes and snapshot slot counts; kept in step by hand they drift (pages on the pool, pages on the table, byte
budgets on the snapshot storage while the manager counts slots). :class:`Deployment` takes the model's shape and
the capacities in the units the manager counts (pages, slots, sequences) and builds the backend, the KV pool,
the page table, the KV lengths, the resident state, the snapshot storage (budgets computed from the library's own
bytes-per-slot, never from a Python table) and the coordinator over them::

    with Deployment(page_size=16, num_pages=256, max_seq_len=1024, attention_layers=[(8, 64)] * 4,
                    kv_dtype="fp16") as d:
        with ManagedKVCacheRequest.begin(d.coordinator, ...) as request: ...

Invariants: every object lives on ``backend``; ``table`` addresses ``pool`` (same page count) for ``max_batch``
rows of ``max_pages_per_seq`` pages; ``state`` has ``max_batch`` slots; ``snapshots`` holds exactly the requested
slot counts. Lifetime: ``close()`` (or the ``with`` block) closes the coordinator and then every object; the
library keeps what a coordinator uses alive until it goes, so the order cannot dangle.
Threading: single writer, as every object it holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _arrays
from .device import Backend, BackendKind, DType, KvLengths, KvPagePool, KvPageTable, ResidentState, SnapshotStorage
from .enums import HashAlgorithm, ModelStateKind
from .errors import ArgumentTypeError, InvalidArgumentError
from .runtime import ContextCacheCoordinator, Synchronizer


@dataclass(frozen=True)
class RecurrentGeometry:
    """The recurrent (Mamba-style) layers of a model: per layer a state [heads, head_dim, state_size] and a conv
    window [conv_dim, conv_kernel], both of ``dtype``."""

    num_layers: int
    heads: int
    head_dim: int
    state_size: int
    conv_dim: int = 0
    conv_kernel: int = 0
    dtype: Any = DType.FP32


class Deployment:
    """Backend, KV pool, page table, KV lengths, resident state, snapshot storage and coordinator of one model,
    sized together. ``attention_layers``: (kv_heads, head_dim) per attention layer (empty: a pure recurrent model);
    ``recurrent``: the recurrent layers (None: attention only). Capacities: ``num_pages`` K pages in the pool
    (positive with attention layers; a pure recurrent model has no pool, so it also takes 0, with an explicit
    ``recurrent_snapshots``),
    ``max_batch`` resident sequences, ``max_seq_len`` tokens per sequence (the table's pages per row),
    ``recurrent_snapshots`` and ``partial_kv_snapshots`` checkpoint slots (a hybrid model needs both; defaults
    scale with the pool). ``backend``: a :class:`ctxcache.device.Backend` or its kind ("auto", "cpu", "cuda")."""

    def __init__(self, *, page_size: int, num_pages: int, max_seq_len: int, attention_layers: Sequence[tuple[int, int]] = (),
                 kv_dtype: Any = DType.FP16, recurrent: RecurrentGeometry | None = None, max_batch: int = 1,
                 recurrent_snapshots: int | None = None, partial_kv_snapshots: int | None = None,
                 max_records: int = 1024, backend: Any = BackendKind.AUTO, hash_key: bytes | None = None,
                 synchronizer: Synchronizer | None = None):
        self.page_size = _arrays.integer(page_size, "page_size", minimum=1)
        self.num_pages = _arrays.integer(num_pages, "num_pages", minimum=0)
        self.max_batch = _arrays.integer(max_batch, "max_batch", minimum=1)
        self.max_seq_len = _arrays.integer(max_seq_len, "max_seq_len", minimum=1)
        self.max_pages_per_seq = math.ceil(self.max_seq_len / self.page_size)
        self.attention_layers = [(int(h), int(d)) for h, d in attention_layers]
        if recurrent is not None and not isinstance(recurrent, RecurrentGeometry):
            raise ArgumentTypeError(f"recurrent must be a RecurrentGeometry or None, got {type(recurrent).__name__}")
        if not self.attention_layers and recurrent is None:
            raise InvalidArgumentError("a deployment needs attention layers, recurrent layers or both")
        if self.num_pages == 0 and self.attention_layers:
            raise InvalidArgumentError(
                f"num_pages must be positive: the deployment has {len(self.attention_layers)} attention "
                f"layer{'' if len(self.attention_layers) == 1 else 's'}, whose KV lives in pages (0 pages is only for a "
                "pure recurrent model)")
        if self.num_pages == 0 and recurrent_snapshots is None:
            raise InvalidArgumentError("num_pages=0 needs an explicit recurrent_snapshots (its default is num_pages)")
        self.recurrent = recurrent
        self.model_state_kind = (ModelStateKind.ATTENTION_ONLY if recurrent is None else
                                 ModelStateKind.HYBRID if self.attention_layers else ModelStateKind.PURE_RECURRENT)
        owned: list[Any] = []
        try:
            self.backend = backend if isinstance(backend, Backend) else Backend(backend)
            if not isinstance(backend, Backend):
                owned.append(self.backend)
            self.pool = self.table = self.lengths = None
            if self.attention_layers:
                self.pool = KvPagePool(self.backend, num_pages=self.num_pages, page_size=self.page_size,
                                       layers=self.attention_layers, dtype=kv_dtype)
                owned.append(self.pool)
                self.table = KvPageTable(self.backend, max_batch=self.max_batch,
                                         max_pages_per_seq=self.max_pages_per_seq, num_pages=self.num_pages)
                owned.append(self.table)
                self.lengths = KvLengths(self.backend, self.max_batch)
                owned.append(self.lengths)
            self.state = self.snapshots = None
            if recurrent is not None:
                self.state = ResidentState(self.backend, max_batch=self.max_batch, num_layers=recurrent.num_layers,
                                           recurrent_heads=recurrent.heads, recurrent_head_dim=recurrent.head_dim,
                                           state_size=recurrent.state_size, conv_dim=recurrent.conv_dim,
                                           conv_kernel=recurrent.conv_kernel, dtype=recurrent.dtype)
                owned.append(self.state)
                recurrent_slots = self.num_pages if recurrent_snapshots is None else recurrent_snapshots
                partial_slots = (self.num_pages if partial_kv_snapshots is None else partial_kv_snapshots
                                 ) if self.pool is not None else 0
                # The library says what a slot takes: a storage without slots reports its bytes per slot.
                with SnapshotStorage(self.backend, state=self.state, base_pool=self.pool) as probe:
                    layout = probe.layout
                self.snapshots = SnapshotStorage(
                    self.backend, state=self.state, base_pool=self.pool,
                    recurrent_budget_bytes=_arrays.integer(recurrent_slots, "recurrent_snapshots") * layout.recurrent_bytes_per_slot,
                    partial_kv_budget_bytes=_arrays.integer(partial_slots, "partial_kv_snapshots") * layout.partial_kv_bytes_per_slot)
                owned.append(self.snapshots)
            self.coordinator = ContextCacheCoordinator(
                max_records=max_records, max_batch=self.max_batch, page_size=self.page_size,
                hash_algorithm=HashAlgorithm.SHA256, hash_key=hash_key, model_state_kind=self.model_state_kind,
                base_pool=self.pool, base_table=self.table, base_lengths=self.lengths, resident_state=self.state,
                snapshots=self.snapshots, synchronizer=synchronizer)
        except BaseException:
            for obj in reversed(owned):
                obj.close()
            raise
        self._owned = [self.coordinator, *reversed(owned)]

    @property
    def footprint_bytes(self) -> int:
        """Device bytes of the pool, the resident state and the snapshot slabs together."""
        total = self.pool.footprint_bytes if self.pool is not None else 0
        if self.state is not None:
            total += self.state.footprint_bytes
        if self.snapshots is not None:
            total += self.snapshots.layout.footprint_bytes
        return total

    def close(self) -> None:
        for obj in self._owned:
            obj.close()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Deployment({self.model_state_kind.name.lower()}, {len(self.attention_layers)} attention layers, "
                f"{self.recurrent.num_layers if self.recurrent else 0} recurrent, {self.num_pages} pages of "
                f"{self.page_size}, max_batch={self.max_batch}, max_seq_len={self.max_seq_len})")
