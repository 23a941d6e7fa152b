"""The runtime's values: what an engine passes to the coordinator and the request facade, and what they return.

Contract: frozen dataclasses (DecodingContext excepted: the engine mutates it between steps) that mirror the C
structs of include/ctxcache.h's runtime section; plain Python, no C call, no check (the library checks values when
they are passed). Safe from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..enums import (
    AdmitSequenceStatus,
    LookupPolicy,
    MediaModality,
    ReusePlanKind,
    SequenceStatus,
)
from ..retention import RetentionSpec

Synchronizer = Callable[[Optional[int]], Any]  # Optional: the alias is evaluated at import (Python 3.9)


# ---- values ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResidentRef:
    """A fixed resident slot (page-table row, recurrent-state row) and its epoch (> 0, growing with each reuse)."""

    slot: int
    epoch: int


@dataclass(frozen=True)
class Headroom:
    """KV positions one decoder execution may address beyond its materialized endpoint."""

    base_extra_tokens: int = 1
    draft_extra_tokens: int = 0


@dataclass(frozen=True)
class MediaItem:
    """One media item of a prompt: its bytes (its identity in block keys) and the tokens it occupies,
    [first_token, first_token + token_count)."""

    data: Any  # bytes-like or a numpy array (its raw bytes)
    first_token: int
    token_count: int
    modality: MediaModality = MediaModality.IMAGE


@dataclass(frozen=True)
class Request:
    """One sequence of a generation request: prompt token ids (int32 array or ints), LoRA name, media items, an
    optional per-sequence lookup policy (None: the request's) and its retention (None: the default, plain LRU):
    every publication of the sequence carries it, with ``prompt_token_count`` set to the prompt's length by the
    coordinator, so the tokens generated in decode take its ``decode_priority``."""

    token_ids: Any
    lora_name: str = ""
    media: Sequence[MediaItem] = ()
    lookup_policy: LookupPolicy | None = None
    retention: RetentionSpec | None = None


@dataclass
class DecodingContext:
    """The engine's live batch, one entry per row in every list (the engine updates it in place).

    token_ids: per row the full history (prompt + generated + the lookahead token), an int32 array (read in place)
    or a sequence of ints. resident_refs are read by ``begin`` only."""

    token_ids: list[Any]
    raw_input_lengths: Sequence[int]
    generated_lengths: Sequence[int]
    status: Sequence[SequenceStatus]
    resident_refs: Sequence[ResidentRef] = ()

    @property
    def active_batch_size(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class SpecReuseContract:
    """A speculative deployment: owns_paged_spec_state = the drafter has its own KV pool (EAGLE)."""

    owns_paged_spec_state: bool = True
    future_dependency_tokens: int = 1


@dataclass(frozen=True)
class PoolMetrics:
    free: int
    capacity: int


@dataclass(frozen=True)
class ContextCacheMetrics:
    """Every counter of the coordinator (cumulative), then the occupancy now."""

    admitted_sequences: int
    hit_sequences: int
    media_aware_sequences: int
    lookup_bypass_sequences: int
    forced_cold_sequences: int
    standard_plans: int
    no_reusable_prefix_plans: int
    full_input_rewind_plans: int
    matched_tokens: int
    reused_tokens: int
    publication_attempts: int
    committed_publications: int
    existing_publications: int
    published_endpoints: int
    hybrid_restores: int
    hybrid_snapshot_pressure_skips: int
    hybrid_capture_synchronizations: int
    spec_full_page_replays: int
    spec_pair_publications: int
    planning_nanoseconds: int
    media_boundary_trims: int
    current_records: int
    base_kv_pages: PoolMetrics
    draft_kv_pages: PoolMetrics
    recurrent_snapshots: PoolMetrics
    partial_kv_snapshots: PoolMetrics
    evicted_records: int
    reclaimed_base_kv_pages: int
    reclaimed_draft_kv_pages: int
    reclaimed_recurrent_snapshots: int
    reclaimed_partial_kv_snapshots: int
    # The host tier (0 without one): prompt tokens loaded from it, its blocks now, its counters.
    host_loaded_tokens: int
    host_resident_blocks: int
    host_written_blocks: int
    host_dropped_blocks: int
    host_failed_loads: int
    host_failed_writes: int
    host_bytes_to_host: int
    host_bytes_to_device: int
    # The byte store under the host tier (0 without one; ctxcache.kv_store): prompt tokens loaded from it
    # (host_loaded_tokens counts the host's own), puts done, dropped and failed, blocks asked, loads failed and
    # objects rejected (a miss each), batches an extension stopped waiting for, batches the open breaker kept back,
    # and the time extensions waited.
    store_loaded_tokens: int = 0
    store_put_blocks: int = 0
    store_dropped_puts: int = 0
    store_failed_puts: int = 0
    store_asked_blocks: int = 0
    store_fetched_blocks: int = 0  # objects got and validated into host slots (waited for or not)
    store_failed_loads: int = 0
    store_rejected_loads: int = 0
    store_late_batches: int = 0
    store_breaker_refusals: int = 0
    store_wait_micros: int = 0




@dataclass(frozen=True)
class SequenceInfo:
    """One batch row (or the pending joiner) as the coordinator tracks it."""

    resident: ResidentRef
    input_length: int
    token_count: int
    committed_length: int
    common_length: int
    matched_length: int
    reuse_length: int
    plan_kind: ReusePlanKind
    bypass: bool
    forced_cold: bool
    published_full_block_count: int
    base_pages: np.ndarray = field(repr=False)
    draft_pages: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class SwaState:
    """One sequence's window on the bounded-SWA backend (ctxc_swa_state_t)."""

    resident: ResidentRef
    exact_resident_token_count: int
    retained_logical_page_begin: int
    retained_logical_page_end: int
    bound_pages: int
    pending_retire_pages: int
    reserved_pages: int
    pending_endpoint: int | None
    peak_bound_pages: int



@dataclass(frozen=True)
class AdmitResult:
    status: AdmitSequenceStatus
    prefill_start: int

