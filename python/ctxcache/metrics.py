"""Metrics for operators: a cache's (a manager, coordinator or reference engine) or a KV event publisher's counters
and gauges in the Prometheus text format, written by the library (``ctxc_metrics_text``; the names are the table
of docs/METRICS.md), and a collector for ``prometheus_client`` (the optional ``metrics`` extra).

Threading: reading a cache's metrics is a call into its single-writer family, so a scrape thread must not make it
beside the cache's own calls (it would get :class:`ctxcache.ConcurrentUseError`). :class:`MetricsCollector` keeps
snapshots instead: :meth:`MetricsCollector.update` (on the thread that drives the cache) takes one, and
``collect()`` (on the exporter's thread) serves the latest, under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from ._ffi import check, ffi, lib


def metrics_text(source: Any) -> str:
    """The metrics of ``source`` (a ContextCacheManager, ContextCacheCoordinator, sim.ReferenceEngine or
    KvEventPublisher) in the Prometheus text exposition format."""
    live = getattr(source, "_live", None)
    if live is None:
        raise TypeError(f"metrics_text needs a cache or a KvEventPublisher, got {type(source).__name__}")
    handle = live()
    size = ffi.new("size_t *")
    status = lib.ctxc_metrics_text(handle, ffi.NULL, 0, size)
    if status != lib.CTXC_E_BUFFER_TOO_SMALL:
        check(status)
    text = ffi.new("char[]", max(1, size[0]))
    check(lib.ctxc_metrics_text(handle, text, size[0], size))
    return str(ffi.unpack(text, size[0]).decode())


class MetricsCollector:
    """A ``prometheus_client`` collector over snapshots of one or more sources' metrics::

        collector = MetricsCollector(manager, publisher)
        prometheus_client.REGISTRY.register(collector)
        prometheus_client.start_http_server(9400)
        ...  # on the thread that drives the manager, now and then:
        collector.update()

    ``update()`` takes a snapshot of every source (on the thread that drives them); ``collect()`` yields the
    latest as metric families (from any thread). A source that is closed drops out of later snapshots."""

    def __init__(self, *sources: Any):
        self._sources = list(sources)
        self._lock = threading.Lock()
        self._text = ""
        self.update()

    def update(self) -> str:
        """Snapshot every live source now; returns the text it will serve."""
        text = "".join(metrics_text(s) for s in self._sources if not getattr(s, "closed", False))
        with self._lock:
            self._text = text
        return text

    def add(self, source: Any) -> None:
        """Snapshot ``source`` too, from now on (and now)."""
        self._sources.append(source)
        self.update()

    def detach(self) -> None:
        """Take a last snapshot, then stop reading the sources (before they close): ``collect()`` keeps serving it."""
        self.update()
        self._sources.clear()

    @property
    def text(self) -> str:
        """The latest snapshot, as Prometheus text."""
        with self._lock:
            return self._text

    def collect(self) -> Iterator[Any]:
        from prometheus_client.parser import text_string_to_metric_families

        yield from text_string_to_metric_families(self.text)

    def describe(self) -> list[Any]:  # no eager collect() at registration (it would only parse the snapshot)
        return []


__all__ = ["MetricsCollector", "metrics_text"]
