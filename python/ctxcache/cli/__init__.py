"""The ``ctxcache`` command and its applications, outside the library's core (issue 25 item 3).

Contract: nothing here is imported by ``import ctxcache``; the library never imports this package. ``main`` is the
console script's entry point (``pyproject.toml``: ``ctxcache = "ctxcache.cli:main"``; ``python -m ctxcache.cli``).

- ``commands``  the ``ctxcache`` command's subcommands (info, replay, sweep, workload, bench, bench-runtime)
- ``args``      argument parsing shared by every command (one-line errors, ranged integers)
- ``replay``    ``ctxcache replay`` and ``ctxcache sweep`` (the sweep's PNG needs the ``plot`` extra: matplotlib)
- ``workload``  the built-in and conversation workloads, the Mooncake trace reader and writer
- ``oracle``    the offline optimum (Belady) the replay and the sweep report beside the hit rate

Importing this package loads only ``commands`` and ``args`` (the standard library): each subcommand imports its
module, and through it the library, when it runs.
"""

from __future__ import annotations

from .commands import main

__all__ = ["main"]
