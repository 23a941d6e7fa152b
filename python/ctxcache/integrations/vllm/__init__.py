"""ctxcache as vLLM's prefix cache: a drop-in for vLLM 0.33's ``KVCacheManager`` (vllm/v1/core/kv_cache_manager.py).

vLLM has no registry for its KV cache manager: its scheduler builds ``KVCacheManager(...)`` by the name it imported
into ``vllm.v1.core.sched.scheduler``. That interface is not public in vLLM and changes between releases; this
module supports vLLM 0.33 (checked at import) and nothing else. Three ways to turn it on, none patching vLLM's files:

- ``--scheduler-cls ctxcache.integrations.vllm.scheduler.CtxcacheAsyncScheduler`` (or ``...CtxcacheScheduler``):
  schedulers whose manager is built by :func:`make_kv_cache_manager`;
- the ``vllm.general_plugins`` entry point ``ctxcache`` (installed with this package), active when the environment
  sets ``CTXCACHE_VLLM=1``: it points the scheduler module's name at :func:`make_kv_cache_manager` in every vLLM
  process;
- for tests, ``pytest -p ctxcache.integrations.vllm.pytest_plugin``.

:func:`make_kv_cache_manager` takes vLLM's constructor arguments and returns a :class:`CtxcacheKVCacheManager` for a
model with a single full-attention KV cache group (prefix caching on or off, hash block size = block size), and
vLLM's own manager for anything else (several groups, sliding window, Mamba, EAGLE's last-block drop, hash
lookahead, context parallelism, a KV connector, KV-cache residency metrics), saying why once in the log.
docs/VLLM.md has the mapping and what differs.
"""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import Any

import vllm

if not vllm.__version__.startswith("0.33."):
    raise ImportError(f"ctxcache.integrations.vllm supports vLLM 0.33, not {vllm.__version__} (the KV cache manager "
                      "interface is internal to vLLM and changes between releases)")

from vllm.v1.core.kv_cache_manager import KVCacheManager as VllmKVCacheManager  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec  # noqa: E402

from .manager import CtxcacheKVCacheManager, block_keys  # noqa: E402

__all__ = ["CtxcacheKVCacheManager", "VllmKVCacheManager", "block_keys", "fallback_reason", "make_kv_cache_manager",
           "stats"]

logger = logging.getLogger("ctxcache.integrations.vllm")


class _Stats:
    """What :func:`make_kv_cache_manager` built in this process (the pytest plugin reports it)."""

    def __init__(self) -> None:
        self.built = 0
        self.fell_back = 0
        self.reasons: dict[str, int] = {}
        # Called with (manager, the scheduler building it or None) for each manager ctxcache builds.
        self.listeners: list[Any] = []


stats = _Stats()
_logged: set[str] = set()

_SUPPORTED_SPECS = (FullAttentionSpec, MLAAttentionSpec)


def fallback_reason(kv_cache_config: Any, scheduler_block_size: int, hash_block_size: int, *, use_eagle: bool = False,
                    num_hash_lookahead_tokens: int = 0, num_prefill_lookahead: int = 0, dcp_world_size: int = 1,
                    pcp_world_size: int = 1, metrics_collector: Any = None, connector: Any = None) -> str | None:
    """Why ctxcache's manager cannot serve this configuration (None: it can)."""
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        return f"{len(groups)} KV cache groups (ctxcache serves one full-attention group)"
    spec = groups[0].kv_cache_spec
    if type(spec) not in _SUPPORTED_SPECS:
        return f"KV cache spec {type(spec).__name__} (ctxcache serves full attention)"
    if getattr(kv_cache_config, "has_mamba_layers", False) or getattr(kv_cache_config, "needs_kv_cache_zeroing",
                                                                        False):
        return "Mamba layers or mixed-precision KV cache"
    if not (spec.block_size == scheduler_block_size == hash_block_size):
        return (f"block size {spec.block_size}, scheduler block size {scheduler_block_size}, hash block size "
                f"{hash_block_size} (ctxcache needs them equal)")
    if use_eagle:
        return "EAGLE's last-block drop"
    if num_hash_lookahead_tokens or num_prefill_lookahead:
        return "hash or prefill lookahead tokens"
    if dcp_world_size != 1 or pcp_world_size != 1:
        return "context parallelism"
    if metrics_collector is not None:
        return "KV cache residency metrics (they sample vLLM's block pool)"
    if kv_cache_config.num_blocks < 2:
        return f"{kv_cache_config.num_blocks} blocks"
    return None


def _calling_scheduler() -> Any:
    """The vLLM scheduler whose __init__ is building a manager, if that is the caller (the constructor arguments do
    not say whether a KV connector is configured; the scheduler does)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if candidate is not None and hasattr(candidate, "kv_cache_config") and hasattr(candidate, "connector"):
            return candidate
        if frame.f_code.co_name != "__init__":
            return None
        frame = frame.f_back
    return None


def make_kv_cache_manager(kv_cache_config: Any, max_model_len: int, scheduler_block_size: int,
                          hash_block_size: int, **kwargs: Any) -> Any:
    """vLLM's ``KVCacheManager(...)``, answered by ctxcache where it can serve the configuration."""
    scheduler = kwargs.pop("_scheduler", None) or _calling_scheduler()
    reason = fallback_reason(
        kv_cache_config, scheduler_block_size, hash_block_size, use_eagle=kwargs.get("use_eagle", False),
        num_hash_lookahead_tokens=kwargs.get("num_hash_lookahead_tokens", 0),
        num_prefill_lookahead=kwargs.get("num_prefill_lookahead", 0),
        dcp_world_size=kwargs.get("dcp_world_size", 1), pcp_world_size=kwargs.get("pcp_world_size", 1),
        metrics_collector=kwargs.get("metrics_collector"),
        connector=getattr(scheduler, "connector", None))
    if reason is not None:
        stats.fell_back += 1
        stats.reasons[reason] = stats.reasons.get(reason, 0) + 1
        if reason not in _logged:
            _logged.add(reason)
            logger.warning("ctxcache: vLLM's own KV cache manager serves this model: %s", reason)
        return VllmKVCacheManager(kv_cache_config, max_model_len, scheduler_block_size, hash_block_size, **kwargs)
    manager = CtxcacheKVCacheManager(kv_cache_config, max_model_len, scheduler_block_size, hash_block_size, **kwargs)
    stats.built += 1
    for listener in stats.listeners:
        listener(manager, scheduler)
    return manager
