"""The benchmarks, outside the library's core (issue 25 item 3): each the Python half of a benchmark whose C++ half
is under tools/bench, driven by tools/bench_manager, tools/bench_runtime and tools/bench_peers.

Contract: the library never imports this package, nor does this ``__init__`` import its modules.

- ``manager``       ``ctxcache bench``: a Mooncake-format trace through the manager
- ``runtime``       ``ctxcache bench-runtime``: the runtime's own bookkeeping per request and per decode step
- ``transformers``  ``python -m ctxcache.bench.transformers``: cold against warm generation through the
                    transformers integration (the ``transformers`` extra)
"""
