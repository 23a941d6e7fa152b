"""The offline optimum of a replay: the measuring stick for eviction policies (docs/EVICTION.md).

What a cache of the same capacity would reuse on the same requests if it always evicted, when it must, the cached
page needed farthest in the future (Belady's rule) -- knowing the whole trace in advance, which no online policy
can. Pages are the prompts' full pages, identified by their chained block hashes (equal hash = equal prefix), so
a page is useless without its prefix: only pages with no cached successor (leaves of the prefix tree) are evicted.
Page-granular, where the manager evicts whole records, so it is an upper bound for any record policy too.

The bookkeeping is the manager's, as ``ctxcache replay --bookkeeping-only`` drives it with batches of one and
``prefill_state_only`` (vanilla mode): a request reuses the longest cached prefix of its full pages (an exactly
cached page-aligned prompt recomputes its last page), needs ceil(n / P) pages for its prompt, publishes its full
pages at prefill end, grows by ceil((n + out) / P) - ceil(n / P) pages for its output, and releases its private
pages (partial last page, output pages, a recomputed duplicate). Pages the running request uses are pinned. A
request larger than the whole cache is rejected (reuses nothing, publishes nothing), as the replay rejects it;
output growth that even evicting every unpinned page cannot cover is skipped, as a failed grow is.

Cost: O(pages touched x log(cached pages)) with a lazy heap; about 4 s per capacity on the 3,993-request
Mooncake trace. Pure Python over the prepared hashes; no C calls.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .workload import WorkloadRequest

__all__ = ["OracleResult", "PreparedPages", "offline_optimum", "prepare_pages"]

_NEVER = 1 << 62


@dataclass(frozen=True)
class PreparedPages:
    """The workload as page ids (one per prompt full page, equal iff the chained hashes are equal) and, for every
    request's pages, the index of the next request that uses each one (or never)."""

    pages: list[list[int]]
    next_use: list[list[int]]
    input_lengths: list[int]
    output_lengths: list[int]
    page_ids: int


@dataclass(frozen=True)
class OracleResult:
    capacity_pages: int
    reused_tokens: int
    prompt_tokens: int
    evicted_pages: int
    rejected: int
    grow_failures: int

    @property
    def hit_rate(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def prepare_pages(requests: Sequence[WorkloadRequest], hashes: Sequence[np.ndarray]) -> PreparedPages:
    """Page ids from the full-page hashes (``Prepared.hashes`` of the replay) and the next-use table."""
    ids: dict[bytes, int] = {}
    pages: list[list[int]] = []
    for h in hashes:
        keys = h.view("V16").reshape(-1).tolist()
        pages.append([ids.setdefault(k, len(ids)) for k in keys])
    last: dict[int, int] = {}
    next_use: list[list[int]] = [[] for _ in pages]
    for i in range(len(pages) - 1, -1, -1):
        next_use[i] = [last.get(p, _NEVER) for p in pages[i]]
        for p in pages[i]:
            last[p] = i
    return PreparedPages(pages, next_use, [r.input_length for r in requests], [r.output_length for r in requests],
                         len(ids))


def offline_optimum(prepared: PreparedPages, page_size: int, capacity_pages: int,
                    check: Callable[[], None] | None = None) -> OracleResult:
    """Reused tokens of the offline optimum at ``capacity_pages`` (see the module comment). ``check`` is called
    before each request (the replay's interrupt point: it raises KeyboardInterrupt after a Ctrl-C)."""
    if page_size <= 0 or capacity_pages <= 0:
        raise ValueError(f"page_size and capacity_pages must be positive, got {page_size} and {capacity_pages}")
    n_ids = prepared.page_ids
    cached = bytearray(n_ids)
    children = [0] * n_ids  # cached successors of each page
    parent = [-1] * n_ids
    key = [0] * n_ids  # the next use the heap entry of a page must carry to be current
    heap: list[tuple[int, int, int]] = []  # (-next use, -depth, page): farthest first, deepest first
    pinned: set[int] = set()
    used = 0  # cached pages + the running request's private pages are accounted separately
    reused = prompt = evicted = rejected = grow_failures = 0

    def evict_one() -> bool:
        nonlocal used, evicted
        held: list[tuple[int, int, int]] = []  # pinned leaves: needed now, set aside and put back
        found = -1
        while heap:
            entry = heapq.heappop(heap)
            p = entry[2]
            if not cached[p] or children[p] or key[p] != -entry[0]:
                continue  # stale entry
            if p in pinned:
                held.append(entry)
                continue
            found = p
            break
        for entry in held:
            heapq.heappush(heap, entry)
        if found >= 0:
            p = found
            cached[p] = 0
            used -= 1
            evicted += 1
            q = parent[p]
            if q >= 0:
                children[q] -= 1
                if children[q] == 0 and cached[q]:
                    heapq.heappush(heap, (-key[q], 0, q))
            return True
        return False

    for i, pages in enumerate(prepared.pages):
        if check is not None:
            check()
        n = prepared.input_lengths[i]
        prompt += n
        full = len(pages)
        total = -(-n // page_size)
        grow = -(-(n + prepared.output_lengths[i]) // page_size) - total
        if total > capacity_pages:
            rejected += 1
            continue
        matched = 0
        while matched < full and cached[pages[matched]]:
            matched += 1
        bound = matched
        rewind = n % page_size == 0 and matched == total and matched > 0
        if rewind:
            bound -= 1
        reused += bound * page_size
        # The matched prefix is used now (its pages' next use is this request); the reused pages are pinned.
        for p in pages[:matched]:
            key[p] = i
        pinned = set(pages[:bound])
        while capacity_pages - used < total - bound:
            if not evict_one():
                raise AssertionError("offline_optimum: a request that fits could not be seated")
        # Prefill end: the prompt's full pages become cached (the prefix is cached: leaves-only eviction keeps it).
        # A recomputed last page whose cached copy survived is a private duplicate until release.
        duplicate = 1 if rewind and cached[pages[full - 1]] else 0
        present = 0
        while present < full and cached[pages[present]]:
            present += 1
        prev = pages[present - 1] if present > 0 else -1
        for p in pages[present:]:
            cached[p] = 1
            used += 1
            if prev >= 0:
                parent[p] = prev
                children[prev] += 1
            prev = p
        pinned = set(pages)
        private = (total - full) + duplicate
        while capacity_pages - used - private < grow:
            if not evict_one():
                grow_failures += 1
                break
        pinned = set()
        # Release: every page of the prompt is next needed at its next use.
        uses = prepared.next_use[i]
        for k, p in enumerate(pages):
            key[p] = uses[k]
            if not children[p]:
                heapq.heappush(heap, (-uses[k], -k, p))
    return OracleResult(capacity_pages, reused, prompt, evicted, rejected, grow_failures)
