"""pytest plugin: run vLLM's own tests with ctxcache as the scheduler's KV cache manager.

    pytest -p ctxcache.integrations.vllm.pytest_plugin tests/v1/core/test_scheduler.py

On load it points ``vllm.v1.core.sched.scheduler.KVCacheManager`` at ctxcache's factory, so every scheduler a test
builds gets ctxcache's manager where ctxcache serves the model (vLLM's own otherwise). After each test, every ctxcache
manager that test built is checked: ctxcache's invariants, and no lease left for a request its scheduler no longer
holds (running requests and deferred frees keep theirs legitimately). A failed check does not change the test's
outcome; it fails the run at the end, after the one-line summary
``ctxcache vllm adapter: N managers built, M fell back to vLLM's``.
"""

from __future__ import annotations

from typing import Any

import pytest
import vllm.v1.core.sched.scheduler as _scheduler_module

from . import make_kv_cache_manager, stats

_scheduler_module.KVCacheManager = make_kv_cache_manager

_problems: list[str] = []
_built: list[tuple[Any, Any]] = []  # this test's (manager, scheduler), held until the test has been checked
stats.listeners.append(lambda manager, scheduler: _built.append((manager, scheduler)))


def _check(nodeid: str, manager: Any, scheduler: Any) -> None:
    try:
        manager.check_invariants()
    except Exception as error:  # noqa: BLE001 - reported, with the test that left it
        _problems.append(f"{nodeid}: {type(error).__name__}: {error}")
        return
    if scheduler is None:
        return
    requests = getattr(scheduler, "requests", {})
    leaked = [rid for rid in manager._held if rid not in requests]
    deferred = {tuple(b.block_id for b in blocks) for _, blocks in getattr(scheduler, "deferred_frees", ())}
    leaked += [f"popped {ids[:4]}" for ids in manager._popped if ids not in deferred and ids[::-1] not in deferred]
    if leaked:
        _problems.append(f"{nodeid}: leases still live for requests the scheduler no longer holds: {leaked[:5]}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    yield  # managers built by the test's fixtures and by the test itself
    for manager, scheduler in _built:
        _check(item.nodeid, manager, scheduler)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _built.clear()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    terminalreporter.write_line(
        f"ctxcache vllm adapter: {stats.built} managers built, {stats.fell_back} fell back to vLLM's")
    for reason, count in sorted(stats.reasons.items()):
        terminalreporter.write_line(f"  fell back {count}x: {reason}")
    for problem in _problems:
        terminalreporter.write_line(f"ctxcache vllm adapter check failed: {problem}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _problems:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
