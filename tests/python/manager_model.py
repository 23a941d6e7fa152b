"""A pure-Python model of ContextCacheManager's observable behaviour, written from the reference semantics.

It is a second, deliberately naive implementation (dicts, lists, linear scans) of the pools (refcounts and FIFO
free lists), the canonical base index, the record store with its eviction order, the draft path index, the
eviction walk (a record at a time, as makeRoom applies it), the four reuse planners (vanilla, hybrid, Hybrid+MTP,
spec) and every manager operation.
The stateful test drives the real manager and this model with the same operations and compares everything
observable after each step, so any divergence in plans, page ids, free-list order, recency, eviction victims or
metrics is caught.

Retention (issue 29) is modelled from the same semantics, naively: each record keeps its block ranges
[first, end, priority, expiry] and a stored rank (its bucket) and a recency stamp; the eviction order is the listed
records sorted by (rank, stamp), the pinned ones after it in the order they were pinned. Block b's effective
priority is the highest among the live ranges covering it (35 if none); a record ranks by its last block under
lru-trim (non-hybrid), by its best block otherwise. Under lru-trim a walk may cut only a record's tail at or
below its rank: when that is not enough, it is cut anyway (down to the high head), the record re-ranks and the walk
goes on. Pins are active refs on the record's resources, within a budget of distinct ids per pool. The clock is the
driven one (nanoseconds); expiries re-rank every record at set_time, and a pin whose expiry has come (a duration
of 0 makes one due at once) is released at the next point where the library reads its clock (set_time, pin, a
publication's retention, a commit at the record limit, an eviction).

Broken contracts raise ModelContractError where the library raises ctxcache.ContractError.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

BASE, DRAFT, RECURRENT, PARTIAL = range(4)
STANDARD, NO_REUSABLE_PREFIX, FULL_INPUT_REWIND = range(3)
VANILLA, HYBRID, SPEC, HYBRID_MTP = range(4)
CHECKPOINT_MODES = (HYBRID, HYBRID_MTP)  # leases that reserve, restore and retire snapshot slots
DRAFT_MODES = (SPEC, HYBRID_MTP)         # leases that hold draft pages (and grow with grow_spec)
PUBLISHED, EXISTING_RECORD = range(2)
ACQUIRED, INSUFFICIENT_CAPACITY = range(2)
DEFAULT_PRIORITY = 35
NEVER = 2**63 - 1            # an expiry that never comes (kRetentionNever)
MAX_RANGES = 64


class ModelContractError(Exception):
    pass


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def duration_ns(seconds) -> int | None:
    """As ctxcache.retention.duration_ns: seconds to nanoseconds; None (no duration) stays None."""
    return None if seconds is None else int(round(seconds * 1e9))


def expiry_after(now: int, duration: int | None) -> int:
    return NEVER if duration is None else min(now + duration, NEVER)


def spec_is_default(spec) -> bool:
    """Says nothing beyond the default: every range at the default priority for good (it cannot change a block:
    covered or not, it is at the default) and decode at the default with no duration."""
    if any(r.priority != DEFAULT_PRIORITY or r.duration is not None for r in spec.ranges):
        return False
    return (spec.prompt_token_count is None or (
        spec.decode_priority == DEFAULT_PRIORITY and spec.decode_duration is None))


def block_ranges(spec, page_size: int, blocks: int, now: int) -> list[list[int]]:
    """A spec (anything shaped as ctxcache.RetentionSpec) as [first block, end block, priority, expiry] ranges of a
    record of `blocks` blocks published at `now`: each token range [start, end) covers blocks [start // P,
    ceil(end / P)) clipped to the record, empty ones dropped; an open end is the prompt's end; decode tokens (at or
    past prompt_token_count) take the decode priority when it says anything."""
    out: list[list[int]] = []
    if spec_is_default(spec) or blocks <= 0:
        return out
    total = blocks * page_size
    prompt = total if spec.prompt_token_count is None else min(spec.prompt_token_count, total)

    def add(start, end, priority, seconds):
        if end <= start:
            return
        first, last = start // page_size, min(blocks, ceil_div(end, page_size))
        if first < last:
            out.append([first, last, priority, expiry_after(now, duration_ns(seconds))])

    for r in spec.ranges:
        end = prompt if r.token_end is None else min(r.token_end, total)
        add(r.token_start, end, r.priority, r.duration)
    if spec.prompt_token_count is not None and (spec.decode_priority != DEFAULT_PRIORITY
                                                or spec.decode_duration is not None):
        add(prompt, total, spec.decode_priority, spec.decode_duration)
    return out


def block_priority(ranges, block: int, now: int) -> int:
    live = [p for first, end, p, expiry in ranges if first <= block < end and expiry > now]
    return max(live) if live else DEFAULT_PRIORITY


def cold_kind(n: int) -> int:
    """A plan that reuses nothing: an empty input is the reference's default STANDARD in every mode (c.6)."""
    return STANDARD if n == 0 else NO_REUSABLE_PREFIX


class Pools:
    def __init__(self, capacities):
        self.capacity = list(capacities)
        self.active = [[0] * c for c in capacities]
        self.cache = [[0] * c for c in capacities]
        self.free = [deque(range(c)) for c in capacities]

    def can_allocate(self, demand) -> bool:
        return all(demand[t] <= len(self.free[t]) for t in range(4))

    def allocate(self, t: int, n: int) -> list[int]:
        ids = [self.free[t].popleft() for _ in range(n)]
        for i in ids:
            self.active[t][i] = 1
        return ids

    def _maybe_free(self, t, i):
        if self.active[t][i] == 0 and self.cache[t][i] == 0:
            self.free[t].append(i)

    def add_active(self, t, i):
        assert self.active[t][i] or self.cache[t][i], "pinning a free id"
        self.active[t][i] += 1

    def release_active(self, t, i):
        assert self.active[t][i] > 0
        self.active[t][i] -= 1
        self._maybe_free(t, i)

    def add_cache(self, t, i):
        assert self.active[t][i] or self.cache[t][i], "caching a free id"
        self.cache[t][i] += 1

    def release_cache(self, t, i):
        assert self.cache[t][i] > 0
        self.cache[t][i] -= 1
        self._maybe_free(t, i)

    def is_free(self, t, i) -> bool:
        return self.active[t][i] == 0 and self.cache[t][i] == 0

    def reclaimable(self, t) -> int:
        return sum(1 for i in range(self.capacity[t]) if self.active[t][i] == 0 and self.cache[t][i] > 0)


@dataclass
class Record:
    id: int
    terminal: tuple
    full_block_count: int
    hashes: list
    base: list
    draft: list = field(default_factory=list)
    recurrent: int | None = None
    partial: int | None = None
    exact_length: int | None = None
    mtp: bool = False  # a Hybrid+MTP checkpoint: in its own key index, never in the (EAGLE) draft index
    ranges: list = field(default_factory=list)  # retention: [first block, end block, priority, expiry]
    priority: int = DEFAULT_PRIORITY             # its bucket: the rank as of the last (re)ranking
    stamp: int = 0                               # recency: the tick of its insert or last touch

    def resources(self):
        out = [(BASE, p) for p in self.base] + [(DRAFT, p) for p in self.draft]
        if self.recurrent is not None:
            out.append((RECURRENT, self.recurrent))
        if self.partial is not None:
            out.append((PARTIAL, self.partial))
        return out

    @property
    def hybrid_key(self):
        return None if self.exact_length is None else (self.terminal, self.exact_length)

    @property
    def in_draft_index(self) -> bool:
        return bool(self.draft) and self.exact_length is None


@dataclass
class Plan:
    mode: int
    kind: int = NO_REUSABLE_PREFIX
    matched: int = 0
    reuse: int = 0
    matched_hashes: list = field(default_factory=list)
    base_bindings: list = field(default_factory=list)
    draft_bindings: list = field(default_factory=list)
    draft_record: int | None = None
    dependency: tuple | None = None  # (hash, block count)
    has_attention: bool = False
    hybrid_record: int | None = None
    recurrent_binding: int | None = None
    partial_binding: int | None = None
    demand: list = field(default_factory=lambda: [0, 0, 0, 0])
    full_page_replay: bool = False


@dataclass
class Lease:
    mode: int
    has_attention: bool
    matched_hashes: list
    dependency: tuple | None
    base: list = field(default_factory=list)
    draft: list = field(default_factory=list)
    recurrent: int | None = None
    partial: int | None = None
    reserved: list = field(default_factory=list)  # [(type, index)]
    live: bool = True
    spec_hit: int | None = None  # a spec lease's hit record (plan.draft_record): its publication may supersede it


class Model:
    def __init__(self, page_size: int, capacities, max_records: int, policy: str = "lru"):
        self.P = page_size
        self.policy = policy  # "lru": whole records; "lru-trim": the last record reached may be trimmed
        self.pools = Pools(capacities)
        self.max_records = max_records
        self.index: dict = {}       # hash -> page
        self.reverse: dict = {}     # page -> hash
        self.records: dict[int, Record] = {}
        self.exact: dict = {}       # (terminal, count) -> id
        self.hybrid: dict = {}      # (digest, length) -> id (plain hybrid checkpoints)
        self.mtp: dict = {}         # (digest, length) -> id (Hybrid+MTP checkpoints; the same key may be in both)
        self.draft_index: dict = {}  # hash -> [(record, count)]
        self.next_id = 1
        self.metrics = [0, 0, 0, 0, 0, 0, 0]  # evicted, base, draft, recurrent, partial, trimmed records, blocks
        # Retention: the recency tick, the driven clock (ns; None until set), the pins (record -> [expiry, the
        # resources it holds an active ref on], in the order they were pinned) and the pin budget.
        self.tick = 0
        self.now: int | None = None
        self.pins: dict[int, list] = {}
        self.pin_budget = 0.0
        self.evicted_by_priority: dict[int, int] = {}
        self.trimmed_by_priority: dict[int, int] = {}
        self.retention_expiries = 0
        self.pin_expiries = 0
        self.pins_refused = 0
        self.low_tail_trims = 0  # lru-trim cuts down to a high head that did not meet the demand alone (coverage)

    def _checkpoints(self, mtp: bool) -> dict:
        return self.mtp if mtp else self.hybrid

    # ---- records --------------------------------------------------------------------------------------------
    def eviction_order(self) -> list[int]:
        """The listed (unpinned) records by (rank, recency): the order eviction walks."""
        return sorted((rid for rid in self.records if rid not in self.pins),
                      key=lambda rid: (self.records[rid].priority, self.records[rid].stamp))

    @property
    def lru(self) -> list[int]:
        """What records.lru() lists: the eviction order, then the pinned records in the order they were pinned."""
        return self.eviction_order() + list(self.pins)

    def touch(self, rid):
        self.tick += 1
        self.records[rid].stamp = self.tick

    def evict(self, rid):
        if rid not in self.records:
            raise ModelContractError(f"no record {rid}")
        self._drop_pin(rid)  # an explicit eviction of a pinned record ends its pin
        r = self.records.pop(rid)
        self.evicted_by_priority[r.priority] = self.evicted_by_priority.get(r.priority, 0) + 1
        if r.hybrid_key is not None:
            del self._checkpoints(r.mtp)[r.hybrid_key]
        else:
            del self.exact[(r.terminal, r.full_block_count)]
        if r.in_draft_index:
            self._unindex_draft(rid, r.hashes)
        self._release_pages(r.base, r.draft)
        if r.recurrent is not None:
            self.pools.release_cache(RECURRENT, r.recurrent)
            if self.pools.is_free(RECURRENT, r.recurrent):
                self.metrics[3] += 1
        if r.partial is not None:
            self.pools.release_cache(PARTIAL, r.partial)
            if self.pools.is_free(PARTIAL, r.partial):
                self.metrics[4] += 1
        self.metrics[0] += 1

    def _unindex_draft(self, rid, hashes, first: int = 0):
        """Removes rid's draft-index entries at boundaries first + 1 .. first + len(hashes) (hashes: its blocks
        from `first` on)."""
        for i, h in enumerate(hashes):
            self.draft_index[h].remove((rid, first + i + 1))
            if not self.draft_index[h]:
                del self.draft_index[h]

    def _release_pages(self, base, draft):
        """Drops one cache reference on each page; a base page whose last one goes loses its mapping."""
        for p in base:
            self.pools.release_cache(BASE, p)
            if self.pools.cache[BASE][p] == 0:
                h = self.reverse.pop(p, None)
                if h is not None and self.index.get(h) == p:
                    del self.index[h]
                if self.pools.active[BASE][p] == 0:
                    self.metrics[1] += 1
        for p in draft:
            self.pools.release_cache(DRAFT, p)
            if self.pools.is_free(DRAFT, p):
                self.metrics[2] += 1

    def trim(self, rid, keep):
        """lru-trim: the record keeps its first `keep` blocks (its recency too; its ranges are clipped to them and
        it re-ranks by what is left)."""
        r = self.records[rid]
        self.trimmed_by_priority[r.priority] = self.trimmed_by_priority.get(r.priority, 0) + 1
        del self.exact[(r.terminal, r.full_block_count)]
        if r.in_draft_index:
            self._unindex_draft(rid, r.hashes[keep:], keep)
        tail_base, tail_draft = r.base[keep:], r.draft[keep:]
        r.hashes, r.base, r.draft = r.hashes[:keep], r.base[:keep], r.draft[:keep]
        r.terminal, r.full_block_count = r.hashes[-1], keep
        self.exact[(r.terminal, keep)] = rid
        if r.ranges:
            r.ranges = [[first, min(end, keep), p, e] for first, end, p, e in r.ranges if first < min(end, keep)]
            r.priority = self.rank(r)
        self._release_pages(tail_base, tail_draft)
        self.metrics[5] += 1
        self.metrics[6] += len(tail_base)

    # ---- retention ----------------------------------------------------------------------------------------------
    def _now(self) -> int:
        assert self.now is not None, "the model runs on the driven clock only: set_time first"
        return self.now

    def rank(self, r: Record) -> int:
        """The record's eviction rank now: its last block's priority under lru-trim (not a hybrid record), else its
        best block's; the default without ranges (or blocks)."""
        if not r.ranges:
            return DEFAULT_PRIORITY
        blocks, now = r.full_block_count, self._now()
        if self.policy == "lru-trim" and r.exact_length is None and blocks >= 1:
            return block_priority(r.ranges, blocks - 1, now)
        return max((block_priority(r.ranges, b, now) for b in range(blocks)), default=DEFAULT_PRIORITY)

    def tail_start(self, r: Record, blocks: int, priority: int) -> int:
        """The first block of the longest suffix of blocks whose effective priorities are all <= priority."""
        start = blocks
        while start > 0 and block_priority(r.ranges, start - 1, self._now()) <= priority:
            start -= 1
        return start

    def _advance(self):
        """Where the library reads its clock: pins whose expiry has come end; a record whose rank changed (a range
        expired) moves to its new bucket, at its place by recency."""
        now = self._now()
        for rid, (expiry, _) in list(self.pins.items()):
            if expiry <= now:
                self._drop_pin(rid)
                self.pin_expiries += 1
        for r in self.records.values():
            rank = self.rank(r)
            if rank != r.priority:
                r.priority = rank
                self.retention_expiries += 1

    def set_time(self, now_ns: int):
        if self.now is not None and now_ns < self.now:
            raise ModelContractError("the clock never runs backwards")
        self.now = now_ns
        self._advance()

    def retain(self, rid, spec, existing: bool):
        """A publication's spec: a new record takes its ranges; an existing one (a duplicate, a draft upgrade) merges
        them (its expired ranges go; an equal range keeps the later expiry); either re-ranks. None or a default spec
        changes nothing."""
        if spec is None or spec_is_default(spec) or rid not in self.records:
            return
        self._advance()
        now = self._now()
        r = self.records[rid]
        more = block_ranges(spec, self.P, r.full_block_count, now)
        if not existing:
            r.ranges = more
        elif more:
            ranges = [x for x in r.ranges if x[3] > now]
            for m in more:
                if m[3] <= now:
                    continue
                same = [x for x in ranges if x[:3] == m[:3]]
                if same:
                    same[0][3] = max(same[0][3], m[3])
                elif len(ranges) <= MAX_RANGES:
                    ranges.append(list(m))
            r.ranges = ranges
        r.priority = self.rank(r)

    def _pinned_count(self, t: int) -> int:
        return len({i for _, resources in self.pins.values() for (u, i) in resources if u == t})

    def set_pin_budget(self, fraction: float):
        for t in range(4):
            if self._pinned_count(t) > math.floor(fraction * self.pools.capacity[t]):
                raise ModelContractError("pinned records hold more than the budget allows")
        self.pin_budget = fraction

    def pin(self, rid, duration: int | None):
        """Pins are active refs on every resource of the record; the record leaves the eviction order. Pinning a
        pinned record only resets its expiry. Refused (counted) when the pins would leave fewer than two record
        slots, or hold more distinct ids of a pool than floor(budget * capacity), judged before the clock is read
        (expiries only drop pins, so a pin that fits before them fits after)."""
        if rid not in self.records:
            raise ModelContractError(f"no record {rid}")
        resources = self.records[rid].resources()
        if rid not in self.pins:  # refused before the clock is read: a refusal applies no expiry
            if self.max_records == 0 or len(self.pins) + 1 >= self.max_records:
                self.pins_refused += 1
                raise ModelContractError("pinned records would leave no record slot to evict")
            for t in range(4):
                held = {i for _, res in self.pins.values() for (u, i) in res if u == t}
                fresh = {i for (u, i) in resources if u == t} - held
                if fresh and len(held) + len(fresh) > math.floor(self.pin_budget * self.pools.capacity[t]):
                    self.pins_refused += 1
                    raise ModelContractError("the pin budget is exceeded")
        self._advance()
        expiry = expiry_after(self._now(), duration)
        if rid in self.pins:
            self.pins[rid][0] = expiry
            return
        for t, i in resources:
            self.pools.add_active(t, i)
        self.pins[rid] = [expiry, resources]

    def unpin(self, rid):
        if rid not in self.records:
            raise ModelContractError(f"no record {rid}")
        if rid not in self.pins:
            raise ModelContractError(f"record {rid} is not pinned")
        self._drop_pin(rid)

    def _drop_pin(self, rid):
        """The pin's refs go and the record is listed again (at its place by rank and recency)."""
        if rid not in self.pins:
            return
        _, resources = self.pins.pop(rid)
        for t, i in resources:
            self.pools.release_active(t, i)

    def clear(self, live_leases: int):
        if live_leases:
            raise ModelContractError("leases are live")
        for rid in list(self.pins):
            self._drop_pin(rid)
        while self.records:
            self.evict(self.eviction_order()[0])

    def retention_metrics(self):
        """As ctxcache's RetentionMetrics fields, in order."""
        return (dict(self.evicted_by_priority), dict(self.trimmed_by_priority), self.retention_expiries,
                self.pin_expiries, self.pins_refused, len(self.pins), self._pinned_count(BASE))

    # ---- eviction -------------------------------------------------------------------------------------------------
    def trim_point(self, demand, r: Record, min_keep: int):
        """lru-trim: the most blocks (>= min_keep) the record can keep with its cut tail meeting the demand and its
        shorter key free; None when no such cut exists (or another record already ends there)."""
        pools, n = self.pools, len(r.base)
        if r.exact_length is not None or n < 2 or min_keep >= n:
            return None
        missing = [demand[t] - len(pools.free[t]) for t in range(4)]
        if missing[RECURRENT] > 0 or missing[PARTIAL] > 0:
            return None
        reclaimed = [0, 0]
        for keep in range(n - 1, min_keep - 1, -1):
            for t, path in ((BASE, r.base), (DRAFT, r.draft)):
                if path and pools.cache[t][path[keep]] == 1 and pools.active[t][path[keep]] == 0:
                    reclaimed[t] += 1
            if reclaimed[BASE] < missing[BASE] or reclaimed[DRAFT] < missing[DRAFT]:
                continue
            if (r.hashes[keep - 1], keep) not in self.exact:
                return keep
            break  # a record that stays already ends there: this one goes whole
        return None

    def _evict_step(self, rid, demand) -> bool:
        """One record of the walk, applied: trimmed or evicted. True once the pools can allocate."""
        r = self.records[rid]
        if self.policy == "lru-trim":
            blocks = len(r.base)
            min_keep = 1
            if r.ranges and r.exact_length is None:  # only the tail at or below its rank may go
                min_keep = max(1, self.tail_start(r, blocks, r.priority))
            keep = self.trim_point(demand, r, min_keep)
            if keep is not None:
                self.trim(rid, keep)
                return True
            if 1 < min_keep < blocks and (r.hashes[min_keep - 1], min_keep) not in self.exact:
                self.low_tail_trims += 1
                self.trim(rid, min_keep)  # its low tail goes; it re-ranks by its new last block, the walk goes on
                return self.pools.can_allocate(demand)
        self.evict(rid)
        return self.pools.can_allocate(demand)

    def evict_for(self, demand, protected=None) -> bool:
        """Makes room for `demand`: False (nothing changed) when even every reclaimable resource is short; else walks
        the eviction order front to back (the protected hit record last), one record at a time."""
        pools = self.pools
        if pools.can_allocate(demand):
            return True
        for t in range(4):
            if len(pools.free[t]) + pools.reclaimable(t) < demand[t]:
                return False
        self._advance()
        if protected is not None and (protected not in self.records or protected in self.pins):
            protected = None  # gone, or pinned (never a victim)
        done = False
        while not done:
            order = [rid for rid in self.eviction_order() if rid != protected]
            if not order:
                break
            done = self._evict_step(order[0], demand)
        while not done and protected is not None and protected in self.records:
            done = self._evict_step(protected, demand)
        assert done, "model: evicting everything fell short"
        return True

    # ---- planning ---------------------------------------------------------------------------------------------
    def _validate(self, hashes, n):
        if len(hashes) > n // self.P:
            raise ModelContractError("too many hashes")

    def lookup_prefix(self, hashes):
        pages = []
        for h in hashes:
            if h not in self.index:
                break
            pages.append(self.index[h])
        return pages

    def plan_vanilla(self, hashes, n, bypass):
        self._validate(hashes, n)
        total = ceil_div(n, self.P)
        plan = Plan(VANILLA, kind=cold_kind(n), demand=[total, 0, 0, 0])
        if n == 0 or bypass:
            return plan
        pages = self.lookup_prefix(hashes)
        m = bound = len(pages)
        if n % self.P == 0 and m == total:
            bound = m - 1
            plan.kind = FULL_INPUT_REWIND
        elif m > 0:
            plan.kind = STANDARD
        plan.matched, plan.reuse = m * self.P, bound * self.P
        plan.base_bindings = pages[:bound]
        plan.matched_hashes = list(hashes[:bound])
        plan.demand = [total - bound, 0, 0, 0]
        return plan

    def plan_hybrid(self, candidates, hashes, n, attention, bypass):
        self._validate(hashes, n)
        total = ceil_div(n, self.P)
        plan = Plan(HYBRID, kind=cold_kind(n), has_attention=attention, demand=[total if attention else 0, 0, 0, 0])
        if n == 0 or bypass:
            return plan
        for length, digest in sorted(candidates, key=lambda c: -c[0]):
            if length <= 0 or length >= n:  # reference c.6: skipped, never an error
                continue
            rid = self.hybrid.get((digest, length))
            if rid is None:
                continue
            r = self.records[rid]
            fb = length // self.P
            mid = length % self.P != 0
            if fb > len(hashes) or r.hashes != list(hashes[:fb]):
                continue
            if r.recurrent is None or (r.partial is not None) != (attention and mid):
                continue
            if len(r.base) != (fb if attention else 0):
                continue
            plan.kind = STANDARD
            plan.matched = plan.reuse = length
            plan.matched_hashes = list(hashes[:fb])
            plan.base_bindings = list(r.base) if attention else []
            plan.hybrid_record = rid
            plan.recurrent_binding, plan.partial_binding = r.recurrent, r.partial
            plan.demand = [total - fb if attention else 0, 0, 0, 0]
            return plan
        return plan

    def plan_hybrid_mtp(self, candidates, hashes, n, bypass):
        """A checkpoint at E keeps its boundary token private: fb = (E-1)//P blocks bound in base AND draft."""
        self._validate(hashes, n)
        total = ceil_div(n, self.P)
        plan = Plan(HYBRID_MTP, kind=cold_kind(n), has_attention=True, demand=[total, total, 0, 0])
        if n == 0 or bypass:
            return plan
        for length, digest in sorted(candidates, key=lambda c: -c[0]):
            if length < 1 or length >= n:
                continue
            rid = self.mtp.get((digest, length))  # plain hybrid checkpoints never hit here
            if rid is None:
                continue
            r = self.records[rid]
            fb = (length - 1) // self.P
            if fb > len(hashes) or r.hashes != list(hashes[:fb]):
                continue
            if r.recurrent is None or r.partial is None or len(r.base) != fb or len(r.draft) != fb:
                continue
            plan.kind = STANDARD
            plan.matched = plan.reuse = length
            plan.matched_hashes = list(hashes[:fb])
            plan.base_bindings, plan.draft_bindings = list(r.base), list(r.draft)
            plan.hybrid_record = rid
            plan.recurrent_binding, plan.partial_binding = r.recurrent, r.partial
            plan.demand = [total - fb, total - fb, 0, 0]
            return plan
        return plan

    def plan_spec(self, hashes, n, bypass):
        self._validate(hashes, n)
        total = ceil_div(n, self.P)
        plan = Plan(SPEC, kind=cold_kind(n), demand=[total, total, 0, 0])
        if n == 0 or bypass:
            return plan
        base_pages = self.lookup_prefix(hashes)
        match = None
        for count in range(min(len(base_pages), len(hashes)), 0, -1):
            for rid, c in reversed(self.draft_index.get(hashes[count - 1], [])):
                if c == count:
                    match = (rid, count)
                    break
            if match:
                break
        if match is None:
            return plan
        rid, paired = match
        r = self.records[rid]
        if len(r.draft) < paired or r.hashes[:paired] != list(hashes[:paired]):
            return plan
        bound = paired - 1
        plan.full_page_replay = True
        plan.matched, plan.reuse = paired * self.P, bound * self.P
        if paired > 1:
            plan.dependency = (hashes[paired - 1], paired)
        plan.base_bindings = base_pages[:bound]
        plan.draft_bindings = r.draft[:bound]
        plan.matched_hashes = list(hashes[:bound])
        if n % self.P == 0 and paired == total:
            plan.kind = FULL_INPUT_REWIND
        else:
            plan.kind = STANDARD if bound > 0 else NO_REUSABLE_PREFIX
        if bound > 0:
            plan.draft_record = rid
        plan.demand = [total - bound, total - bound, 0, 0]
        return plan

    # ---- manager operations -------------------------------------------------------------------------------------
    def acquire(self, plan: Plan):
        lease = Lease(plan.mode, plan.has_attention, plan.matched_hashes, plan.dependency)
        if plan.mode == SPEC:
            lease.spec_hit = plan.draft_record
        for p in plan.base_bindings:
            self.pools.add_active(BASE, p)
            lease.base.append(p)
        for p in plan.draft_bindings:
            self.pools.add_active(DRAFT, p)
            lease.draft.append(p)
        if plan.recurrent_binding is not None:
            self.pools.add_active(RECURRENT, plan.recurrent_binding)
            lease.recurrent = plan.recurrent_binding
        if plan.partial_binding is not None:
            self.pools.add_active(PARTIAL, plan.partial_binding)
            lease.partial = plan.partial_binding
        hit = plan.draft_record if plan.draft_record is not None else plan.hybrid_record
        if not self.evict_for(plan.demand, hit):
            self.release(lease)
            return INSUFFICIENT_CAPACITY, None
        lease.base += self.pools.allocate(BASE, plan.demand[BASE])
        lease.draft += self.pools.allocate(DRAFT, plan.demand[DRAFT])
        if hit is not None and hit in self.records:
            self.touch(hit)
        return ACQUIRED, lease

    def release(self, lease: Lease):
        if not lease.live:
            raise ModelContractError("released twice")
        for p in lease.base:
            self.pools.release_active(BASE, p)
        for p in lease.draft:
            self.pools.release_active(DRAFT, p)
        if lease.recurrent is not None:
            self.pools.release_active(RECURRENT, lease.recurrent)
        if lease.partial is not None:
            self.pools.release_active(PARTIAL, lease.partial)
        for t, i in lease.reserved:
            self.pools.release_active(t, i)
        lease.base, lease.draft, lease.reserved = [], [], []
        lease.recurrent = lease.partial = None
        lease.live = False

    def grow_base(self, lease, count) -> bool:
        if lease.mode in DRAFT_MODES:
            raise ModelContractError("spec or Hybrid+MTP lease grows with grow_spec")
        if count == 0:
            return True
        if not self.evict_for([count, 0, 0, 0]):
            return False
        lease.base += self.pools.allocate(BASE, count)
        return True

    def grow_spec(self, lease, base, draft) -> bool:
        if lease.mode not in DRAFT_MODES:
            raise ModelContractError("needs a spec or Hybrid+MTP lease")
        if base == 0 and draft == 0:
            return True
        if not self.evict_for([base, draft, 0, 0]):
            return False
        lease.base += self.pools.allocate(BASE, base)
        lease.draft += self.pools.allocate(DRAFT, draft)
        return True

    def reserve(self, lease, partial: bool):
        if lease.mode not in CHECKPOINT_MODES:
            raise ModelContractError("needs hybrid lease")
        if lease.mode == HYBRID_MTP and not partial:
            raise ModelContractError("a Hybrid+MTP checkpoint always has a partial slot")
        if partial and not lease.has_attention:
            raise ModelContractError("partial without attention")
        demand = [0, 0, 1, 1 if partial else 0]
        if not self.evict_for(demand):
            return None
        r = self.pools.allocate(RECURRENT, 1)[0]
        lease.reserved.append((RECURRENT, r))
        p = None
        if partial:
            p = self.pools.allocate(PARTIAL, 1)[0]
            lease.reserved.append((PARTIAL, p))
        return (r, p)

    def release_restored(self, lease):
        if lease.mode not in CHECKPOINT_MODES:
            raise ModelContractError("needs hybrid lease")
        if lease.recurrent is not None:
            self.pools.release_active(RECURRENT, lease.recurrent)
        if lease.partial is not None:
            self.pools.release_active(PARTIAL, lease.partial)
        lease.recurrent = lease.partial = None

    def retire(self, lease, reservation):
        if lease.mode not in CHECKPOINT_MODES:
            raise ModelContractError("needs hybrid lease")
        r, p = reservation
        if (RECURRENT, r) not in lease.reserved:
            raise ModelContractError("recurrent slot not reserved")
        if p is not None and (PARTIAL, p) not in lease.reserved:
            raise ModelContractError("partial slot not reserved")
        lease.reserved.remove((RECURRENT, r))
        self.pools.release_active(RECURRENT, r)
        if p is not None:
            lease.reserved.remove((PARTIAL, p))
            self.pools.release_active(PARTIAL, p)

    def _check_matched(self, hashes, count, matched):
        for i in range(min(count, len(matched))):
            if hashes[i] != matched[i]:
                raise ModelContractError("prefix changed")

    def _project(self, hashes, count, producer):
        """Canonical projection (reference c.7): an indexed hash keeps its page (first committer wins); else the
        producer's page becomes canonical, unless it is already the canonical page of another hash: then the whole
        publication is refused with nothing changed. A page the lease acquired for hashes[i] is no exception (it
        may have been mapped again to another hash by the lease that produced it, after its records went)."""
        canonical, newly = [], []
        try:
            for i in range(count):
                h, page = hashes[i], producer[i]
                if h in self.index:
                    canonical.append(self.index[h])
                    continue
                if page in self.reverse:
                    raise ModelContractError("page mapped to another hash")
                self.index[h] = page
                self.reverse[page] = h
                canonical.append(page)
                newly.append(page)
        except ModelContractError:
            for page in newly:
                del self.index[self.reverse.pop(page)]
            raise
        return canonical

    def _dominated_spec_hit(self, lease: Lease, base: list, draft: list) -> int | None:
        """The spec lease's hit record when the new record (canonical base path, draft path) dominates it: alive,
        unpinned, no retention ranges, an EAGLE record whose base path is a strict prefix of base and whose draft
        path less its last page (a hit never binds it) is a prefix of draft."""
        rid = lease.spec_hit
        r = self.records.get(rid) if rid is not None else None
        if r is None or rid in self.pins or r.ranges or not r.in_draft_index or len(r.base) >= len(base):
            return None
        bindable = len(r.draft) - 1
        if base[:len(r.base)] != r.base or bindable > len(draft) or draft[:bindable] != r.draft[:bindable]:
            return None
        return rid

    def _supersede(self, rid):
        """Removes a dominated record: not an eviction (no metrics); its successor holds every base page."""
        r = self.records.pop(rid)
        del self.exact[(r.terminal, r.full_block_count)]
        self._unindex_draft(rid, r.hashes)
        for p in r.base:
            self.pools.release_cache(BASE, p)
            assert self.pools.cache[BASE][p] > 0, "a superseded record's base page is its successor's"
        for p in r.draft:
            self.pools.release_cache(DRAFT, p)

    def _commit(self, record: Record, published: int, retention=None, superseded: int | None = None):
        victim = None
        if self.max_records > 0 and superseded is None and len(self.records) >= self.max_records:
            self._advance()
            order = self.eviction_order()  # the lowest rank's least recent (pinned records are not in it)
            victim = order[0] if order else None
        for t, i in record.resources():
            self.pools.add_cache(t, i)
        record.id = self.next_id
        self.next_id += 1
        self.records[record.id] = record
        self.touch(record.id)
        if record.hybrid_key is not None:
            self._checkpoints(record.mtp)[record.hybrid_key] = record.id
        else:
            self.exact[(record.terminal, record.full_block_count)] = record.id
        if record.in_draft_index:
            for i, h in enumerate(record.hashes):
                self.draft_index.setdefault(h, []).append((record.id, i + 1))
        canonical = list(record.base)
        self.retain(record.id, retention, existing=False)
        if superseded is not None:
            self._supersede(superseded)
        if self.max_records == 0:
            self.evict(record.id)
        elif victim is not None:
            self.evict(victim)
        return PUBLISHED, (record.id if record.id in self.records else None), canonical, published

    def publish(self, lease: Lease, hashes, resident: int, retention=None):
        if lease.mode in CHECKPOINT_MODES:
            raise ModelContractError("hybrid or Hybrid+MTP lease")
        spec = lease.mode == SPEC
        count = min(len(hashes), resident // self.P)
        if count == 0 or count > len(lease.base) or (spec and count > len(lease.draft)):
            raise ModelContractError("bad block count")
        self._check_matched(hashes, count, lease.matched_hashes)
        if lease.dependency is not None:
            h, c = lease.dependency
            if count < c or hashes[c - 1] != h:
                raise ModelContractError("dependency")
        key = (hashes[count - 1], count)
        if key in self.exact:
            rid = self.exact[key]
            r = self.records[rid]
            if not spec or r.draft or rid in self.pins:  # a pinned record is frozen: no draft upgrade
                self.touch(rid)
                self.retain(rid, retention, existing=True)
                return EXISTING_RECORD, rid, list(r.base), count
            r.draft = list(lease.draft[:count])
            for p in r.draft:
                self.pools.add_cache(DRAFT, p)
            for i, h in enumerate(r.hashes):
                self.draft_index.setdefault(h, []).append((rid, i + 1))
            self.touch(rid)
            self.retain(rid, retention, existing=True)
            return PUBLISHED, rid, list(r.base), count
        canonical = self._project(hashes, count, lease.base)
        record = Record(0, hashes[count - 1], count, list(hashes[:count]), canonical,
                        list(lease.draft[:count]) if spec else [])
        superseded = self._dominated_spec_hit(lease, record.base, record.draft) if spec else None
        return self._commit(record, count, retention, superseded)

    def publish_hybrid(self, lease: Lease, hashes, digest, length, reservation, retention=None):
        if lease.mode != HYBRID:
            raise ModelContractError("needs hybrid lease")
        if length <= 0:
            raise ModelContractError("length")
        fb = length // self.P
        if len(hashes) != fb:
            raise ModelContractError("hash count")
        r, p = reservation
        if (p is not None) != (lease.has_attention and length % self.P != 0):
            raise ModelContractError("partial slot rule")
        if lease.has_attention and fb > len(lease.base):
            raise ModelContractError("too few base pages")
        if (RECURRENT, r) not in lease.reserved or (p is not None and (PARTIAL, p) not in lease.reserved):
            raise ModelContractError("not reserved")
        self._check_matched(hashes, fb, lease.matched_hashes)
        published = fb if lease.has_attention else 0
        key = (digest, length)
        if key in self.hybrid:
            rid = self.hybrid[key]
            self.touch(rid)
            self.retain(rid, retention, existing=True)
            return EXISTING_RECORD, rid, list(self.records[rid].base), published
        base = self._project(hashes, fb, lease.base) if lease.has_attention else []
        record = Record(0, digest, fb, list(hashes), base, [], r, p, length)
        return self._commit(record, published, retention)

    def publish_hybrid_mtp(self, lease: Lease, hashes, digest, length, reservation, retention=None):
        if lease.mode != HYBRID_MTP:
            raise ModelContractError("needs a Hybrid+MTP lease")
        if length < 1:
            raise ModelContractError("length")
        fb = (length - 1) // self.P
        if len(hashes) != fb:
            raise ModelContractError("hash count")
        if fb > len(lease.base) or fb > len(lease.draft):
            raise ModelContractError("too few pages")
        r, p = reservation
        if p is None:
            raise ModelContractError("needs a partial slot")
        if (RECURRENT, r) not in lease.reserved or (PARTIAL, p) not in lease.reserved:
            raise ModelContractError("not reserved")
        self._check_matched(hashes, fb, lease.matched_hashes)
        key = (digest, length)
        if key in self.mtp:
            rid = self.mtp[key]
            self.touch(rid)
            self.retain(rid, retention, existing=True)
            return EXISTING_RECORD, rid, list(self.records[rid].base), fb
        base = self._project(hashes, fb, lease.base)
        record = Record(0, digest, fb, list(hashes), base, list(lease.draft[:fb]), r, p, length, mtp=True)
        return self._commit(record, fb, retention)

    def hybrid_candidate_lengths_for(self, n, hashes):
        """Lengths whose checkpoint's last full block (or the chain root) is the prompt's block at that count."""
        out = set()
        for r in self.records.values():
            if r.exact_length is None or r.exact_length >= n or r.full_block_count > len(hashes):
                continue
            if r.full_block_count == 0 or r.hashes[-1] == hashes[r.full_block_count - 1]:
                out.add(r.exact_length)
        return sorted(out, reverse=True)

    def hybrid_candidate_lengths(self, n):
        return sorted({r.exact_length for r in self.records.values() if r.exact_length is not None and r.exact_length < n},
                      reverse=True)
