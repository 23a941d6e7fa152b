"""CtxcacheKVCacheManager: vLLM 0.33's ``KVCacheManager`` interface, kept by a ctxcache ContextCacheManager.

vLLM's scheduler (vllm/v1/core/sched/scheduler.py) talks to its KV cache manager through about 25 members; this
class answers each of them for a model with one full-attention KV cache group, and keeps no block pool of vLLM's:

- a request's blocks are one ctxcache lease. Its first ``allocate_slots`` acquires the lease for the prefix hit
  vLLM's lookup returned plus the tokens to compute (all or nothing: ``None`` when the pool cannot hold them, nothing
  evicted); later calls grow it by whole pages. vLLM block id = ctxcache page + 1 (vLLM's block 0 is its null block).
- ``get_computed_blocks`` is ctxcache's probe: the longest cached prefix of ``request.block_hashes`` within vLLM's
  bound (``num_tokens - 1`` by default), with no side effect.
- caching (``allocate_slots``' newly full blocks, ``cache_blocks``) publishes the lease's full blocks with
  ``extend_record=True``: one record per request that grows chunk after chunk and through decode.
- ``free`` releases the lease (its published blocks stay cached and evictable); ``pop_blocks_for_free`` hands the
  blocks to the scheduler, whose later ``block_pool.free_blocks`` releases that lease once.
- ``usage`` and admission count cached blocks no request uses as free, as vLLM does (ctxcache's acquirable count).
- the prefix-cache stats are vLLM's own ``PrefixCacheStats``; ``take_events`` turns ctxcache's KV events into
  vLLM's ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` with vLLM's block hashes.

Hashes: vLLM's block hashes (which carry LoRA, multimodal and ``cache_salt`` keys) are used as they are; ctxcache
keys each by its first 128 bits (vLLM's hashes are SHA-256 or 128-bit xxHash digests; any other form is reduced
with BLAKE2b-128).

Eviction: ctxcache's ``lru-trim`` by default (least recent record first, its tail blocks first), the closest to
vLLM's free-block queue. What differs from vLLM's manager is documented in docs/VLLM.md.

Threading: vLLM's scheduler is single threaded; so is this class (ctxcache's single-writer contract).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from vllm.v1.core.kv_cache_manager import KVCacheBlocks
from vllm.v1.core.kv_cache_utils import KVCacheBlock, maybe_convert_block_hash
from vllm.v1.kv_cache_interface import get_kv_cache_spec_kind, get_kv_cache_spec_sliding_window
from vllm.v1.metrics.stats import PrefixCacheStats
from vllm.v1.request import RequestStatus

from ...enums import AcquireStatus, LookupPolicy, ResourceType
from ...errors import ContractError
from ...events import AllBlocksCleared as _Cleared
from ...events import BlockRemoved as _Removed
from ...events import BlockStored as _Stored
from ...manager import ContextCacheManager, Lease, ResourceDemand

logger = logging.getLogger("ctxcache.integrations.vllm")

_BASE = ResourceType.BASE_KV_PAGE
_ADMISSION = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
_NO_KEYS = np.empty((0, 2), dtype=np.uint64)


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def block_keys(hashes: Sequence[Any]) -> np.ndarray:
    """ctxcache's (n, 2) uint64 keys of vLLM block hashes: the first 128 bits of each digest (one join and a view
    for the usual 32- or 16-byte digests), BLAKE2b-128 of anything shorter or not bytes."""
    n = len(hashes)
    if n == 0:
        return _NO_KEYS
    first = hashes[0]
    if type(first) is bytes and len(first) >= 16 and len(first) % 8 == 0:
        words = np.frombuffer(b"".join(hashes), dtype=np.uint64)
        width = len(first) // 8
        if words.size == n * width:
            return np.ascontiguousarray(words.reshape(n, width)[:, :2])
    return np.frombuffer(b"".join(_digest16(h) for h in hashes), dtype=np.uint64).reshape(n, 2)


def _digest16(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)) and len(value) >= 16:
        return bytes(value[:16])
    data = bytes(value) if isinstance(value, (bytes, bytearray)) else repr(value).encode()
    return hashlib.blake2b(data, digest_size=16).digest()


class _Held:
    """One scheduled request: its lease, its vLLM blocks (the lease's pages + 1, in order) and how many of its
    full blocks are published."""

    __slots__ = ("lease", "blocks", "published", "keys")

    def __init__(self, lease: Lease, blocks: list[KVCacheBlock]):
        self.lease = lease
        self.blocks = blocks
        self.published = 0
        self.keys = _NO_KEYS  # ctxcache keys of the request's block hashes so far (they only grow)


class _GroupView:
    """What the scheduler and tests read of vLLM's per-group manager (``coordinator.single_type_managers[0]``)."""

    def __init__(self, owner: CtxcacheKVCacheManager, spec: Any):
        self._owner = owner
        self.kv_cache_spec = spec
        self.block_size = spec.block_size
        self.kv_cache_group_id = 0
        self.retains_longer_hit = False
        self.records_new_block_ids = False
        self.block_pool = owner.block_pool

    @property
    def req_to_blocks(self) -> dict[str, list[KVCacheBlock]]:
        return {rid: list(h.blocks) for rid, h in self._owner._held.items()}

    @property
    def num_cached_block(self) -> dict[str, int]:
        return {rid: h.published for rid, h in self._owner._held.items()}


class _Coordinator:
    """The part of vLLM's KVCacheCoordinator the scheduler calls (``get_num_blocks_to_allocate`` for its admission
    estimate) and the flags it reads."""

    enable_partial_hash_hits = False
    eagle_group_ids: tuple[int, ...] = ()
    num_reprefillable_tokens = 0

    def __init__(self, owner: CtxcacheKVCacheManager, spec: Any):
        self._owner = owner
        self.single_type_managers = (_GroupView(owner, spec),)
        self.block_size = spec.block_size

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int, new_computed_blocks: Any,
                                   total_computed_tokens: int = 0, num_local_computed_tokens: int = 0,
                                   num_tokens_main_model: int = 0, apply_admission_cap: bool = False,
                                   prefill_end: int = 0, num_encoder_tokens: int = 0) -> int:
        return self._owner._blocks_to_allocate(request_id, num_tokens, new_computed_blocks)

    def new_step_starts(self) -> None:
        return None


class _FreeCount:
    __slots__ = ("num_free_blocks",)

    def __init__(self, count: int):
        self.num_free_blocks = count


class _BlockPool:
    """vLLM's ``block_pool`` as the scheduler uses it: deferred frees of popped blocks, and the free count."""

    def __init__(self, owner: CtxcacheKVCacheManager):
        self._owner = owner
        self.hash_block_size = owner.block_size

    def get_cached_block(self, block_hash: Any, kv_cache_group_ids: Sequence[int]) -> list[KVCacheBlock] | None:
        """The cached block of one vLLM block hash (one per group: the one group), or None."""
        page = self._owner.cache.base_index.lookup(block_keys([block_hash])[0])
        return None if page is None else [self._owner._block(page) for _ in kv_cache_group_ids]

    def free_blocks(self, blocks: Iterable[KVCacheBlock]) -> None:
        self._owner._free_popped([b.block_id for b in blocks])

    def get_num_free_blocks(self) -> int:
        return self._owner._acquirable()

    @property
    def free_block_queue(self) -> Any:
        """vLLM's free queue, as far as its length: the blocks an allocation can take (free or cached unused)."""
        return _FreeCount(self._owner._acquirable())

    @property
    def blocks(self) -> list[KVCacheBlock]:
        """Every block (the null block first) with ``ref_cnt`` = the requests holding it now. O(capacity): for
        tests and debugging."""
        owner = self._owner
        pools = owner.cache.pools
        out = [KVCacheBlock(0)]
        for page in range(owner.num_gpu_blocks - 1):
            block = KVCacheBlock(page + 1)
            block.ref_cnt = pools.active_ref_count(_BASE, page) if page < pools.capacity(_BASE) else 0
            out.append(block)
        return out

    def get_usage(self) -> float:
        return self._owner.usage

    @property
    def num_gpu_blocks(self) -> int:
        return self._owner.num_gpu_blocks


class CtxcacheKVCacheManager:
    """vLLM's KVCacheManager for one full-attention KV cache group, on ctxcache. Built by
    :func:`ctxcache.integrations.vllm.make_kv_cache_manager` with vLLM's own constructor arguments."""

    def __init__(self, kv_cache_config: Any, max_model_len: int, scheduler_block_size: int, hash_block_size: int,
                 max_in_flight_tokens: int | None = None, enable_caching: bool = True, use_eagle: bool = False,
                 num_hash_lookahead_tokens: int = 0, num_prefill_lookahead: int = 0, log_stats: bool = False,
                 enable_kv_cache_events: bool = False, dcp_world_size: int = 1, pcp_world_size: int = 1,
                 metrics_collector: Any = None, watermark: float = 0.0,
                 enable_mamba_shared_prefix_checkpoint: bool = False, *,
                 eviction_policy: str = "lru-trim", max_records: int | None = None) -> None:
        group = kv_cache_config.kv_cache_groups[0]
        spec = group.kv_cache_spec
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        self.use_eagle = use_eagle
        self.log_stats = log_stats
        self.metrics_collector = metrics_collector
        self.prefix_cache_stats = PrefixCacheStats() if log_stats else None
        self.num_kv_cache_groups = 1
        self.block_size = spec.block_size
        self.num_gpu_blocks: int = kv_cache_config.num_blocks
        capacity = self.num_gpu_blocks - 1  # block 0 is vLLM's null block
        assert watermark >= 0.0, "watermark must be non-negative"
        self.watermark_blocks = int(watermark * kv_cache_config.num_blocks)
        self.mamba_shared_prefix_checkpoint = False
        self.retained_hit_group_ids: tuple[int, ...] = ()
        self.kv_cache_event_metadata = ((get_kv_cache_spec_kind(spec).value, get_kv_cache_spec_sliding_window(spec)),)
        self.empty_kv_cache_blocks = KVCacheBlocks(((),))
        # Every cached block can be a record of its own at worst (a request per block): the record budget never
        # evicts before the pages do.
        self.cache = ContextCacheManager(self.block_size, ResourceDemand(base_kv_pages=capacity),
                                         max_records=capacity if max_records is None else max_records,
                                         eviction_policy=eviction_policy)
        if enable_kv_cache_events:
            self.cache.enable_kv_events()
            self.cache.drain_kv_events()  # the AllBlocksCleared that opens a stream: vLLM's pool starts empty
        self.block_pool = _BlockPool(self)
        self.coordinator = _Coordinator(self, spec)
        # One vLLM block object per page, made once (as vLLM's block pool does): block i is page i - 1.
        self._blocks = [KVCacheBlock(i) for i in range(self.num_gpu_blocks)]
        self._held: dict[str, _Held] = {}
        self._popped: dict[tuple[int, ...], Lease] = {}  # pop_blocks_for_free's leases, by their block ids
        self._event_hashes: dict[int, Any] = {}  # ctxcache event hash -> vLLM block hash (events on)

    # -- blocks ---------------------------------------------------------------------------------------------------
    def _block(self, page: int) -> KVCacheBlock:
        return self._blocks[page + 1]

    def _blocks_of(self, pages: Any) -> list[KVCacheBlock]:
        blocks = self._blocks
        return [blocks[b] for b in (pages + 1).tolist()]

    def create_kv_cache_blocks(self, blocks: tuple[Sequence[KVCacheBlock], ...]) -> KVCacheBlocks:
        return KVCacheBlocks(blocks) if any(blocks) else self.empty_kv_cache_blocks

    def _acquirable(self) -> int:
        return int(self.cache.pools.acquirable_count(_BASE))

    @property
    def usage(self) -> float:
        capacity = self.num_gpu_blocks - 1
        return 1.0 - self._acquirable() / capacity if capacity else 0.0

    def _unheld(self, blocks: Sequence[KVCacheBlock]) -> int:
        """How many of these cached blocks no request holds: an acquire that reuses them takes them from the
        acquirable count, as vLLM's touch takes them from its free queue."""
        pools = self.cache.pools
        return sum(1 for b in blocks if pools.active_ref_count(_BASE, b.block_id - 1) == 0)

    def _blocks_to_allocate(self, request_id: str, num_tokens: int, new_computed_blocks: Sequence[Any]) -> int:
        required = cdiv(num_tokens, self.block_size)
        held = self._held.get(request_id)
        if held is not None:
            return max(required - len(held.blocks), 0)
        computed = new_computed_blocks[0] if new_computed_blocks else ()  # one group's blocks
        return max(required - len(computed), 0) + self._unheld(computed)

    # -- stats --------------------------------------------------------------------------------------------------
    def make_prefix_cache_stats(self) -> PrefixCacheStats | None:
        if not self.log_stats:
            return None
        stats = self.prefix_cache_stats
        self.prefix_cache_stats = PrefixCacheStats()
        return stats

    def prefix_cache_lookup_enabled(self, request: Any) -> bool:
        return self.enable_caching and not request.skip_reading_prefix_cache

    def record_prefix_cache_stats(self, request: Any, num_hits: int) -> None:
        if not self.log_stats or not self.prefix_cache_lookup_enabled(request):
            return
        assert self.prefix_cache_stats is not None
        self.prefix_cache_stats.record(num_tokens=request.num_tokens, num_hits=num_hits,
                                       preempted=request.num_preemptions > 0)

    # -- lookup ---------------------------------------------------------------------------------------------------
    def get_computed_blocks(self, request: Any, max_cache_hit_length: int | None = None
                            ) -> tuple[KVCacheBlocks, int, int]:
        if not self.prefix_cache_lookup_enabled(request):
            return self.empty_kv_cache_blocks, 0, 0
        if max_cache_hit_length is None:
            max_cache_hit_length = request.num_tokens - 1
        limit = min(max_cache_hit_length // self.block_size, len(request.block_hashes))
        if limit <= 0:
            return self.empty_kv_cache_blocks, 0, 0
        keys = block_keys(request.block_hashes[:limit])
        # One token past the bound: the probe's full-input rewind then never applies, the bound already did.
        probe = self.cache.probe_vanilla(keys, limit * self.block_size + 1)
        pages = probe.pages
        if not len(pages):
            return self.empty_kv_cache_blocks, 0, 0
        return KVCacheBlocks((self._blocks_of(pages),)), len(pages) * self.block_size, 0

    def get_computed_blocks_for_connector(self, request: Any, max_cache_hit_length: int | None = None
                                          ) -> tuple[KVCacheBlocks, int, int, bool]:
        return (*self.get_computed_blocks(request, max_cache_hit_length), False)

    def truncate_computed_blocks(self, blocks: KVCacheBlocks, num_computed_tokens: int) -> KVCacheBlocks:
        assert num_computed_tokens % self.block_size == 0
        count = num_computed_tokens // self.block_size
        assert count <= len(blocks.blocks[0])
        return self.create_kv_cache_blocks((list(blocks.blocks[0][:count]),))

    # -- allocation -------------------------------------------------------------------------------------------------
    def allocate_slots(self, request: Any, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: KVCacheBlocks | None = None, num_lookahead_tokens: int = 0,
                       num_external_computed_tokens: int = 0, delay_cache_blocks: bool = False,
                       num_encoder_tokens: int = 0, full_sequence_must_fit: bool = False, reserved_blocks: int = 0,
                       has_scheduled_reqs: bool = True, skip_zeroing_group_ids: tuple[int, ...] = ()
                       ) -> KVCacheBlocks | None:
        if num_new_tokens == 0 and num_external_computed_tokens == 0 and num_new_computed_tokens == 0:
            raise ValueError("num_new_tokens must be greater than 0 when there are no computed tokens to adopt")
        page = self.block_size
        computed = new_computed_blocks.blocks[0] if new_computed_blocks is not None else ()
        # A KV connector's external tokens are computed elsewhere and loaded into this request's own pages: they
        # need pages like new tokens, and are cached (published) once vLLM says they are there (delay_cache_blocks).
        total_computed = min(request.num_computed_tokens + num_new_computed_tokens + num_external_computed_tokens,
                             self.max_model_len)
        main_tokens = total_computed + num_new_tokens
        slot_tokens = min(main_tokens + num_lookahead_tokens, self.max_model_len)
        watermark = (self.watermark_blocks if has_scheduled_reqs and request.status in _ADMISSION else 0)
        # full_sequence_must_fit: the pages the whole sequence needs must be there now (0: not asked).
        full_pages = cdiv(min(request.num_tokens, self.max_model_len), page) if full_sequence_must_fit else 0
        held = self._held.get(request.request_id)
        if held is None:
            hit = len(computed)
            # Tokens the request counts as computed before its first allocation (a disaggregated decode worker's
            # prompt) are treated as external ones: pages of its own, cached with the rest.
            if hit * page != num_new_computed_tokens or (hit and request.num_computed_tokens):
                raise ContractError(f"request {request.request_id!r}: a first allocation takes the lookup's "
                                    f"{hit} blocks as {num_new_computed_tokens} computed tokens on "
                                    f"{request.num_computed_tokens} already computed")
            new_pages = max(cdiv(slot_tokens, page) - hit, 0)
            if watermark or reserved_blocks or full_sequence_must_fit:
                # vLLM's admission: the new pages plus the hit's pages no request holds (reusing them takes them
                # from the free count), plus the watermark, within the free count less the reserved blocks. The
                # hit's pages are only counted one by one when the bound with all of them does not fit.
                need = max(new_pages, full_pages - hit)
                available = self._acquirable()
                if need + hit + watermark > available - reserved_blocks:
                    unheld = self._unheld(computed)
                    if full_sequence_must_fit and max(full_pages - hit, 0) + unheld + watermark > available:
                        return None
                    if new_pages + unheld + watermark > available - reserved_blocks:
                        return None
            keys = block_keys(request.block_hashes[:hit]) if hit else _NO_KEYS
            policy = LookupPolicy.USE_CACHE if self.enable_caching else LookupPolicy.BYPASS
            result = self.cache.acquire_vanilla(keys, max(slot_tokens, hit * page + 1), policy)
            if result.status is not AcquireStatus.ACQUIRED:
                return None
            lease = result.lease
            assert lease is not None  # ACQUIRED
            if result.plan.reuse_token_length != hit * page:
                lease.release()
                raise ContractError(f"request {request.request_id!r}: the cache reuses "
                                    f"{result.plan.reuse_token_length} tokens where the lookup found {hit * page} "
                                    "(the cache changed between get_computed_blocks and allocate_slots)")
            pages = lease.base_pages
            held = _Held(lease, list(computed) + self._blocks_of(pages[hit:]))
            held.published = hit  # the hit's blocks are cached already
            self._held[request.request_id] = held
            new_blocks = held.blocks[hit:]
        else:
            extra = cdiv(slot_tokens, page) - len(held.blocks)
            new_blocks = []
            if full_sequence_must_fit and max(full_pages - len(held.blocks), 0) + watermark > self._acquirable():
                return None
            if extra > 0:
                if (watermark or reserved_blocks) and extra + watermark > self._acquirable() - reserved_blocks:
                    return None
                if not self.cache.grow_base_pages(held.lease, extra):
                    return None
                new_blocks = self._blocks_of(held.lease.base_pages[-extra:])
                held.blocks.extend(new_blocks)
        if not delay_cache_blocks:
            self._cache_blocks(request, held, min(total_computed + num_new_tokens, request.num_tokens))
        return self.create_kv_cache_blocks((new_blocks,))

    def cache_blocks(self, request: Any, num_computed_tokens: int) -> None:
        held = self._held.get(request.request_id)
        if held is not None:
            self._cache_blocks(request, held, num_computed_tokens)

    def _cache_blocks(self, request: Any, held: _Held, num_tokens: int) -> None:
        if not self.enable_caching:
            return
        count = min(num_tokens // self.block_size, len(request.block_hashes), len(held.blocks))
        if count <= held.published:
            return
        known = len(held.keys)
        if known < count:  # the request's hashes only grow: convert the new ones
            more = block_keys(request.block_hashes[known:])
            held.keys = np.concatenate((held.keys, more)) if known else more
        keys = held.keys[:count]
        tokens = None
        if self.enable_kv_cache_events:
            tokens = np.asarray(request.all_token_ids[:count * self.block_size], dtype=np.int32)
            # Every block of the path, not only the new ones: an earlier block evicted meanwhile is stored again.
            names = self._event_hashes
            for key, vllm_hash in zip(keys[:, 1].tolist(), request.block_hashes[:count]):
                if key not in names:
                    names[key] = vllm_hash
        self.cache.publish(held.lease, keys, count * self.block_size, tokens=tokens, extend_record=True)
        held.published = count

    # -- freeing --------------------------------------------------------------------------------------------------
    def free(self, request: Any) -> None:
        held = self._held.pop(request.request_id, None)
        if held is not None:
            held.lease.release()

    def pop_blocks_for_free(self, request: Any) -> list[KVCacheBlock]:
        held = self._held.pop(request.request_id, None)
        if held is None:
            return []
        if not held.blocks:
            held.lease.release()
            return []
        self._popped[tuple(b.block_id for b in held.blocks)] = held.lease
        return list(held.blocks)

    def _free_popped(self, block_ids: list[int]) -> None:
        key = tuple(block_ids)
        lease = self._popped.pop(key, None)
        if lease is None:
            lease = self._popped.pop(key[::-1], None)
        if lease is None:
            raise ContractError(f"block_pool.free_blocks: blocks {list(block_ids)[:8]} are no request's popped "
                                "blocks (ctxcache frees a request's blocks once, as pop_blocks_for_free gave them)")
        lease.release()

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int,
                              num_prompt_tokens: int | None = None) -> None:
        return None  # full attention skips nothing

    def evict_blocks(self, block_ids: set[int]) -> None:
        """Evict the records holding these blocks (vLLM evicts the blocks; ctxcache's unit is the record)."""
        pages = {b - 1 for b in block_ids if b > 0}
        if not pages:
            return
        records = self.cache.records
        for record_id in list(records):
            if pages.intersection(records[record_id].base_page_path.tolist()):
                self.cache.evict_record(record_id)

    def reset_prefix_cache(self) -> bool:
        if self.cache.live_lease_count:
            logger.warning("Failed to reset prefix cache because some blocks (%d) are not freed yet",
                           sum(len(h.blocks) for h in self._held.values()))
            return False
        self.cache.clear()
        self._event_hashes.clear()
        if self.log_stats:
            assert self.prefix_cache_stats is not None
            self.prefix_cache_stats.reset = True
        return True

    # -- views --------------------------------------------------------------------------------------------------------
    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        held = self._held.get(request_id)
        return self.create_kv_cache_blocks((list(held.blocks),)) if held else self.empty_kv_cache_blocks

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        ids: tuple[list[int], ...] = self.get_blocks(request_id).get_block_ids()
        return ids

    def get_block_ids_for_computed_tokens(self, request_id: str, num_computed_tokens: int) -> tuple[list[int], ...]:
        (ids,) = self.get_block_ids(request_id)
        return (ids[:cdiv(num_computed_tokens, self.block_size)],)

    def get_num_common_prefix_blocks(self, running_request_id: str) -> list[int]:
        return [0]

    def estimate_cached_tokens(self, request: Any) -> int:
        held = self._held.get(request.request_id)
        return held.published * self.block_size if held else 0

    # -- per-step drains ------------------------------------------------------------------------------------------------
    def new_step_starts(self) -> None:
        return None

    def take_new_block_ids(self) -> list[int]:
        return []

    def record_blocks_for_zeroing(self, request_id: str, start_token: int) -> None:
        return None

    def take_kv_cache_block_copies(self) -> tuple[list[Any], list[KVCacheBlock]]:
        return [], []

    def take_boundary_state_offloads(self) -> dict[str, list[tuple[int, int, int]]]:
        return {}

    def finalize_partial_tail_offloads(self, request: Any) -> list[tuple[int, int, int]]:
        return []

    def take_events(self) -> list[Any]:
        if not self.enable_kv_cache_events:
            return []
        kind, window = self.kv_cache_event_metadata[0]
        hashes = self._event_hashes
        out: list[Any] = []
        for event in self.cache.drain_kv_events():
            if isinstance(event, _Stored):
                vllm_hashes = [maybe_convert_block_hash(hashes[h]) for h in event.block_hashes]
                parent = (maybe_convert_block_hash(hashes[event.parent_block_hash])
                          if event.parent_block_hash is not None else None)
                out.append(BlockStored(block_hashes=vllm_hashes, parent_block_hash=parent,
                                       token_ids=list(event.token_ids), block_size=event.block_size, lora_id=None,
                                       medium="GPU", lora_name=event.lora_name, group_idx=0,
                                       kv_cache_spec_kind=kind, kv_cache_spec_sliding_window=window))
            elif isinstance(event, _Removed):
                for h in event.block_hashes:
                    out.append(BlockRemoved(block_hashes=[maybe_convert_block_hash(hashes.pop(h))], medium="GPU",
                                            group_idx=0))
            elif isinstance(event, _Cleared):
                hashes.clear()
                out.append(AllBlocksCleared())
        return out

    # -- checks -------------------------------------------------------------------------------------------------------
    def live_leases(self) -> int:
        """Leases this manager holds for requests (scheduled or popped and not yet freed)."""
        return len(self._held) + len(self._popped)

    def check_invariants(self) -> None:
        """ctxcache's own invariants, and that every live lease is one of this manager's requests."""
        self.cache.check_invariants()
        live = self.cache.live_lease_count
        if live != self.live_leases():
            raise AssertionError(f"ctxcache holds {live} leases, the adapter tracks {self.live_leases()}")

    def close(self) -> None:
        for held in self._held.values():
            held.lease.release()
        for lease in self._popped.values():
            lease.release()
        self._held.clear()
        self._popped.clear()
        self.cache.close()
