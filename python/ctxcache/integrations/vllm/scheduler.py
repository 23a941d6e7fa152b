"""vLLM schedulers whose KV cache manager is ctxcache's (where it can serve the model): for ``--scheduler-cls``.

    vllm serve MODEL --scheduler-cls ctxcache.integrations.vllm.scheduler.CtxcacheAsyncScheduler

vLLM's ``Scheduler.__init__`` builds its manager as ``KVCacheManager(...)``, a name of its module; these subclasses
point that name at :func:`ctxcache.integrations.vllm.make_kv_cache_manager` for the duration of their own
construction only (the scheduler is built once, on the engine core's thread), so other schedulers in the process
keep vLLM's manager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import vllm.v1.core.sched.scheduler as _scheduler_module
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from . import make_kv_cache_manager

__all__ = ["CtxcacheAsyncScheduler", "CtxcacheScheduler", "ctxcache_manager_factory"]


@contextlib.contextmanager
def ctxcache_manager_factory() -> Iterator[None]:
    """Within the block, vLLM's scheduler module builds its KV cache manager with ctxcache's factory."""
    previous = _scheduler_module.KVCacheManager
    _scheduler_module.KVCacheManager = make_kv_cache_manager
    try:
        yield
    finally:
        _scheduler_module.KVCacheManager = previous


class CtxcacheScheduler(Scheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with ctxcache_manager_factory():
            super().__init__(*args, **kwargs)


class CtxcacheAsyncScheduler(AsyncScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        with ctxcache_manager_factory():
            super().__init__(*args, **kwargs)
