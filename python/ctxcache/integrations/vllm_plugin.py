"""The ``vllm.general_plugins`` entry point: with ``CTXCACHE_VLLM=1`` in the environment, every vLLM process that
loads its general plugins builds its schedulers' KV cache managers with ctxcache's factory (falling back to vLLM's
own manager for models ctxcache does not serve). Without it, the plugin does nothing and imports nothing: it lives
outside ``ctxcache.integrations.vllm`` (which imports vLLM and refuses a version other than 0.33), so that an
installed ctxcache never disturbs a vLLM that does not use it."""

from __future__ import annotations

import os


def register() -> None:
    if os.environ.get("CTXCACHE_VLLM", "") not in ("1", "true", "yes"):
        return
    import vllm.v1.core.sched.scheduler as scheduler_module

    from .vllm import make_kv_cache_manager

    scheduler_module.KVCacheManager = make_kv_cache_manager
