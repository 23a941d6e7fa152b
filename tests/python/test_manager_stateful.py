"""Model-based test: random operation sequences drive the real manager and tests/python/manager_model.py alike.

Every profile runs under both eviction policies (record LRU, and record LRU trimming tails first). Every acquire
(vanilla, hybrid with and without attention, Hybrid+MTP, spec), grow, reserve, release of restored
snapshots, retire, publish, hybrid and Hybrid+MTP publish (well formed and corrupt), release and eviction runs on
both; results must agree exactly (status, plan, page ids, record ids, canonical pages), a broken contract must fail
on both, and after every step the whole observable state must agree (free lists in allocation order, every
refcount, record LRU, metrics, index size) and check_invariants() must pass.

Retention (issue 29) runs through all of it on the driven clock (set at create, so the steady clock is never read):
publications carry random specs (none, the default, a range over the first tokens at a random priority with an
optional duration, a high head with a priority-0 tail, decode ranges), the clock advances by random amounts (and
is refused going back), records are pinned (with or without a duration, within a random budget; refusals and
bogus ids included), unpinned and cleared; after every step the eviction order (records.lru(): priority buckets,
then recency, then the pinned records), every record's priority and the retention metrics must agree too.

Budget: at least CTXCACHE_HYPOTHESIS_EXAMPLES (default 200) examples that run all CTXCACHE_HYPOTHESIS_STEPS
(default 50) steps; Hypothesis is given twice that many examples because it also explores short programs.
At the default budget (CI's) the examples are derandomized, so the budget check cannot pass on one run and fail on
the next; a run that sets CTXCACHE_HYPOTHESIS_EXAMPLES explores new examples every time.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import ctxcache
from ctxcache import LookupPolicy, ResourceDemand, ResourceType

import manager_model as mm

STEPS = int(os.environ.get("CTXCACHE_HYPOTHESIS_STEPS", "50"))
# Hypothesis also tries short programs; FULL_LENGTH examples must run all STEPS (test_budget_was_met checks).
FULL_LENGTH = int(os.environ.get("CTXCACHE_HYPOTHESIS_EXAMPLES", "200"))
EXAMPLES = 2 * FULL_LENGTH
_steps_per_example: list[int] = []
_trims_per_trimming_example: list[int] = []  # trims applied in each lru-trim example
# Per example, what retention did (the budget check wants each to happen in some examples): a rank changed by an
# expiry, a pin held, a pin ended by its duration, a pin refused, a record evicted (or, under lru-trim, trimmed) at
# a priority other than the default, a low tail cut down to a high head that did not meet the demand alone.
_retention_coverage: list[dict[str, bool]] = []
# A spec lease's publication onto a pinned base-only record once broke the pin's bookkeeping (the draft upgrade
# added resources the pin did not hold; test_retention.py keeps the case). A pinned record is now frozen: the
# publication answers EXISTING_RECORD without the upgrade, in the library and the model alike. True would skip it.
SKIP_PINNED_DRAFT_UPGRADE = False
SEQUENCE_LENGTH = 16

_rng = np.random.default_rng(20261129)
BASE_SEQUENCES = [_rng.integers(0, 50, SEQUENCE_LENGTH, dtype=np.int32) for _ in range(3)]


def as_tuples(hashes: np.ndarray) -> list[tuple[int, int]]:
    return [(int(h[0]), int(h[1])) for h in hashes]


PRIORITIES = st.one_of(st.sampled_from([0, 35, 90]), st.integers(0, 100))
# Durations in seconds, multiples of a quarter (the clock's step): exact as floats and as nanoseconds.
DURATIONS = st.one_of(st.none(), st.sampled_from([0.0, 0.25, 1.0, 2.0, 5.0, 10.0]))
PIN_DURATIONS = st.one_of(st.none(), st.sampled_from([0.0, 0.25, 1.0, 2.0, 5.0]))


@st.composite
def retention_specs(draw):
    """A publication's retention: mostly none, else the explicit default, a range over the first tokens (open or
    not, possibly past the record) at a random priority with an optional duration, a head over a priority-0 tail,
    or a decode range (with or without a prompt range)."""
    shape = draw(st.sampled_from(["none", "none", "none", "default", "head", "head", "tail", "tail", "decode"]))
    if shape == "none":
        return None
    if shape == "default":
        return ctxcache.RetentionSpec()
    if shape == "head":
        start = draw(st.sampled_from([0, 0, 0, 1, 3]))
        end = draw(st.one_of(st.none(), st.integers(start + 1, SEQUENCE_LENGTH + 4)))
        return ctxcache.RetentionSpec([ctxcache.RetentionRange(start, end, draw(PRIORITIES), draw(DURATIONS))])
    if shape == "tail":
        split = draw(st.integers(1, SEQUENCE_LENGTH))
        return ctxcache.RetentionSpec([
            ctxcache.RetentionRange(0, split, draw(PRIORITIES), draw(DURATIONS)),
            ctxcache.RetentionRange(split, None, draw(st.sampled_from([0, 0, 10])), draw(DURATIONS))])
    ranges = draw(st.sampled_from([[], [ctxcache.RetentionRange(0, None, 90)]]))
    return ctxcache.RetentionSpec(ranges, decode_priority=draw(PRIORITIES), decode_duration=draw(DURATIONS),
                                  prompt_token_count=draw(st.integers(0, SEQUENCE_LENGTH)))


class Outcome:
    """Runs a call on the library and on the model; both must succeed or both must break the contract."""

    @staticmethod
    def both(real, model):
        try:
            real_result = real()
        except ctxcache.ContractError as error:
            try:
                model()
            except mm.ModelContractError:
                return None, None
            raise AssertionError(f"library raised ContractError ({error}) but the model accepted the call") from error
        try:
            model_result = model()
        except mm.ModelContractError as error:
            raise AssertionError(f"the model refused ({error}) but the library accepted the call: {real_result!r}") from error
        return real_result, model_result


class ManagerMachine(RuleBasedStateMachine):
    # (page size, [base, draft, recurrent, partial], max records): mostly roomy so that prefixes really get reused,
    # plus pressure, starvation, a record limit of one and of zero.
    PROFILES = [
        (2, [32, 24, 3, 3], 8),
        (4, [24, 16, 3, 3], 8),
        (1, [40, 24, 2, 2], 6),
        (2, [12, 8, 2, 1], 8),   # pressure: eviction on most acquires
        (2, [10, 10, 2, 2], 8),
        (4, [8, 6, 1, 1], 3),
        (4, [7, 7, 2, 2], 6),
        (2, [24, 16, 3, 3], 1),  # record limit 1
        (2, [16, 0, 0, 0], 0),   # max_records 0: nothing is ever kept; no draft or snapshot pools
        (4, [0, 0, 3, 0], 4),    # pure recurrent only
        (3, [36, 36, 6, 6], 10), # roomy snapshot pools (every Hybrid+MTP checkpoint takes a partial slot), P = 3
    ]

    @initialize(profile=st.sampled_from(PROFILES), policy=st.sampled_from(["lru", "lru-trim"]),
                pin_budget=st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.0]))
    def create(self, profile, policy, pin_budget=0.0):
        page_size, capacities, max_records = profile
        self.manager = ctxcache.ContextCacheManager(page_size, ResourceDemand(*capacities), max_records, policy)
        self.model = mm.Model(page_size, capacities, max_records, policy)
        self.manager.set_pin_budget(pin_budget)
        self.model.set_pin_budget(pin_budget)
        self._pinned = False  # some record was pinned in this example
        self.P = page_size
        self.quarters = 0  # the driven retention clock, in quarter seconds (exact as floats and as nanoseconds)
        self.manager.set_retention_time(0.0)  # from the start: the steady clock is never read
        self.model.set_time(0)
        self.leases = []  # [real lease, model lease, tokens, hashes (array), reservations [(real, model tuple)]]

    def teardown(self):
        if not hasattr(self, "manager"):
            return
        # State comparisons made: one per step (Hypothesis counts the create step within stateful_step_count).
        _steps_per_example.append(getattr(self, "_steps", 0))
        if self.model.policy == "lru-trim":
            _trims_per_trimming_example.append(self.manager.metrics.trimmed_records)
        rm = self.manager.retention_metrics
        _retention_coverage.append({
            "expiry": rm.retention_expiries > 0, "pinned": self._pinned, "pin expiry": rm.pin_expiries > 0,
            "pin refused": rm.pins_refused > 0,
            "evicted off default": any(p != mm.DEFAULT_PRIORITY for p in rm.evicted_records_by_priority),
            "trimmed off default": any(p != mm.DEFAULT_PRIORITY for p in rm.trimmed_records_by_priority),
            "low tail cut": self.model.low_tail_trims > 0})
        if os.environ.get("CTXCACHE_STATEFUL_TRACE"):
            print(f"steps={getattr(self, '_steps', 0)} leases={len(self.leases)} records={len(self.manager.records)} "
                  f"next_record_id={self.model.next_id} evicted={self.manager.metrics.evicted_records}")
        for entry in self.leases:
            entry[0].close()
        for rid in self.manager.records.lru():
            self.manager.evict_record(rid)
        for t in ResourceType:
            assert self.manager.pools.free_count(t) == self.manager.pools.capacity(t), f"{t.name} leaked"
        self.manager.check_invariants()
        self.manager.close()

    # ---- helpers ----------------------------------------------------------------------------------------------
    def tokens(self, sequence, length, diverge_at, salt):
        tokens = BASE_SEQUENCES[sequence][:length].copy()
        if diverge_at < length:
            tokens[diverge_at:] = (tokens[diverge_at:] + 1 + salt) % 50
        return tokens

    def hashes(self, tokens):
        return ctxcache.hash_full_blocks(tokens, self.P, algorithm="fnv1a128")

    def digest(self, tokens, length):
        d = ctxcache.hash_exact_prefix(tokens[:length], self.P, algorithm="fnv1a128")
        return (int(d[0]), int(d[1])), d

    def check_acquire(self, real, model_status, model_lease, plan):
        assert int(real.status) == model_status
        p = real.plan
        assert int(p.kind) == plan.kind
        assert int(p.mode) == plan.mode
        assert p.matched_token_length == plan.matched
        assert p.reuse_token_length == plan.reuse
        assert [p.demand.base_kv_pages, p.demand.draft_kv_pages, p.demand.recurrent_snapshot_slots,
                p.demand.partial_kv_snapshot_slots] == plan.demand
        assert p.bound_base_page_count == len(plan.base_bindings)
        assert p.bound_draft_page_count == len(plan.draft_bindings)
        assert p.draft_record == plan.draft_record
        assert p.hybrid_record == plan.hybrid_record
        assert p.recurrent_snapshot_binding == plan.recurrent_binding
        assert p.partial_kv_snapshot_binding == plan.partial_binding
        dependency = p.spec_replay_dependency
        if plan.dependency is None:
            assert dependency is None
        else:
            assert (tuple(int(x) for x in dependency.terminal_hash), dependency.path_block_count) == plan.dependency
        if model_lease is None:
            assert real.lease is None
        else:
            assert list(real.lease.base_pages) == model_lease.base
            assert list(real.lease.draft_pages) == model_lease.draft

    def live_entry(self, index):
        live = [e for e in self.leases if e[1].live]
        return live[index % len(live)] if live else None

    # ---- rules ------------------------------------------------------------------------------------------------
    KINDS = st.sampled_from(["vanilla", "vanilla", "hybrid", "hybrid-no-attention", "spec", "spec",
                             "hybrid-mtp", "hybrid-mtp"])
    REQUEST = dict(sequence=st.integers(0, 2), length=st.integers(0, SEQUENCE_LENGTH),
                   diverge_at=st.one_of(st.just(SEQUENCE_LENGTH), st.integers(0, SEQUENCE_LENGTH)),
                   salt=st.integers(0, 3), bypass=st.sampled_from([False, False, False, True]))

    def _acquire(self, kind, sequence, length, diverge_at, salt, bypass, narrow=False, junk=False):
        tokens = self.tokens(sequence, length, diverge_at, salt)
        hashes = self.hashes(tokens)
        model_hashes = as_tuples(hashes)
        policy = LookupPolicy.BYPASS if bypass else LookupPolicy.USE_CACHE
        if kind == "vanilla":
            real = self.manager.acquire_vanilla(hashes, length, policy)
            plan = self.model.plan_vanilla(model_hashes, length, bypass)
        elif kind == "spec":
            real = self.manager.acquire_spec(hashes, length, policy)
            plan = self.model.plan_spec(model_hashes, length, bypass)
        else:
            candidates, model_candidates = self.candidates(tokens, hashes, length, narrow, junk)
            if kind == "hybrid-mtp":
                real = self.manager.acquire_hybrid_mtp(candidates, hashes, length, policy)
                plan = self.model.plan_hybrid_mtp(model_candidates, model_hashes, length, bypass)
            else:
                attention = kind == "hybrid"
                real = self.manager.acquire_hybrid(candidates, hashes, length, attention, policy)
                plan = self.model.plan_hybrid(model_candidates, model_hashes, length, attention, bypass)
        status, model_lease = self.model.acquire(plan)
        self.check_acquire(real, status, model_lease, plan)
        if real.lease is None:
            return None
        entry = [real.lease, model_lease, tokens, hashes, []]
        self.leases.append(entry)
        return entry

    def candidates(self, tokens, hashes, length, narrow, junk):
        """Hybrid (plain or MTP) candidates as a runtime builds them: every stored length below the prompt's (or
        only those on its own block chain), each keyed by the digest of the prompt's prefix of that length."""
        model_hashes = as_tuples(hashes)
        lengths = self.manager.hybrid_candidate_lengths(length)
        assert lengths == self.model.hybrid_candidate_lengths(length)
        narrowed = self.manager.hybrid_candidate_lengths(length, hashes)
        assert narrowed == self.model.hybrid_candidate_lengths_for(length, model_hashes)
        if narrow:
            lengths = narrowed
        candidates, model_candidates = [], []
        for n in lengths:
            key, digest = self.digest(tokens, n)
            candidates.append(ctxcache.HybridCheckpointCandidate(n, digest))
            model_candidates.append((n, key))
        if junk:  # lengths outside (0, length), one of them keyed like a checkpoint of the whole prompt: skipped
            for n in (0, -1, length, length + 2):
                key, digest = self.digest(tokens, max(n, 0))
                candidates.insert(0, ctxcache.HybridCheckpointCandidate(n, digest))
                model_candidates.insert(0, (n, key))
        return candidates, model_candidates

    @precondition(lambda self: sum(e[1].live for e in self.leases) < 4)
    @rule(kind=KINDS, narrow=st.booleans(), junk=st.booleans(), **REQUEST)
    def acquire(self, kind, sequence, length, diverge_at, salt, bypass, narrow, junk):
        self._acquire(kind, sequence, length, diverge_at, salt, bypass, narrow, junk)

    @rule(kind=KINDS, retention=retention_specs(), **REQUEST)
    def serve(self, kind, sequence, length, diverge_at, salt, bypass, retention=None):
        """A whole request as a runtime runs it: acquire, publish the prompt (or its checkpoint), release."""
        entry = self._acquire(kind, sequence, length, diverge_at, salt, bypass)
        if entry is None:
            return
        if kind in ("vanilla", "spec"):
            if not self._upgrades_a_pinned_record(entry[1], as_tuples(entry[3]), length):
                real, model = Outcome.both(
                    lambda: self.manager.publish(entry[0], entry[3], length, retention=retention),
                    lambda: self.model.publish(entry[1], as_tuples(entry[3]), length, retention))
                if real is not None:
                    assert (int(real.status), real.record, list(real.canonical_base_pages),
                            real.published_base_full_block_count) == model
        else:
            self._checkpoint(entry, None, retention)
        entry[0].release()
        self.model.release(entry[1])

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5), count=st.integers(0, 4))
    def grow_base(self, index, count):
        real_lease, model_lease, *_ = self.live_entry(index)
        real, model = Outcome.both(lambda: self.manager.grow_base_pages(real_lease, count),
                                   lambda: self.model.grow_base(model_lease, count))
        assert real == model

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5), base=st.integers(0, 3), draft=st.integers(0, 3))
    def grow_spec(self, index, base, draft):
        real_lease, model_lease, *_ = self.live_entry(index)
        real, model = Outcome.both(lambda: self.manager.grow_spec_pages(real_lease, base, draft),
                                   lambda: self.model.grow_spec(model_lease, base, draft))
        assert real == model

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5), partial=st.booleans())
    def reserve(self, index, partial):
        entry = self.live_entry(index)
        real, model = Outcome.both(lambda: self.manager.reserve_hybrid_snapshots(entry[0], partial),
                                   lambda: self.model.reserve(entry[1], partial))
        if real is None:
            assert model is None
            return
        assert (real.recurrent_snapshot_slot, real.partial_kv_snapshot_slot) == model
        entry[4].append((real, model))

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5))
    def release_restored(self, index):
        real_lease, model_lease, *_ = self.live_entry(index)
        Outcome.both(lambda: self.manager.release_restored_hybrid_snapshots(real_lease),
                     lambda: self.model.release_restored(model_lease))

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5), which=st.integers(0, 3), bogus=st.booleans())
    def retire(self, index, which, bogus):
        entry = self.live_entry(index)
        if entry[4] and not bogus:
            real_r, model_r = entry[4][which % len(entry[4])]
        else:
            model_r = (which, None)
            real_r = ctxcache.HybridSnapshotReservation(which, None)
        Outcome.both(lambda: self.manager.retire_hybrid_snapshot_reservation(entry[0], real_r),
                     lambda: self.model.retire(entry[1], model_r))

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5), resident=st.one_of(st.none(), st.integers(0, SEQUENCE_LENGTH)),
          corrupt=st.one_of(st.just(-1), st.integers(0, 8)), retention=retention_specs())
    def publish(self, index, resident, corrupt, retention=None):
        real_lease, model_lease, tokens, hashes, _ = self.live_entry(index)
        if resident is None:
            resident = len(tokens)  # the usual case: the whole prompt is resident
        hashes = hashes.copy()
        if 0 <= corrupt < hashes.shape[0]:
            hashes[corrupt, 1] ^= np.uint64(0x5A5A)  # the producer's blocks no longer match what it acquired
        if self._upgrades_a_pinned_record(model_lease, as_tuples(hashes), resident):
            return
        real, model = Outcome.both(lambda: self.manager.publish(real_lease, hashes, resident, retention=retention),
                                   lambda: self.model.publish(model_lease, as_tuples(hashes), resident, retention))
        if real is not None:
            assert (int(real.status), real.record, list(real.canonical_base_pages),
                    real.published_base_full_block_count) == model

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5), length=st.integers(-1, SEQUENCE_LENGTH), which=st.integers(0, 3),
          drop_partial=st.booleans(), retention=retention_specs())
    def publish_hybrid(self, index, length, which, drop_partial, retention=None):
        entry = self.live_entry(index)
        real_lease, model_lease, tokens = entry[0], entry[1], entry[2]
        length = min(length, len(tokens))
        if entry[4]:
            real_r, model_r = entry[4][which % len(entry[4])]
        else:
            real_r, model_r = ctxcache.HybridSnapshotReservation(which, None), (which, None)
        if drop_partial and model_r[1] is not None:
            real_r = ctxcache.HybridSnapshotReservation(real_r.recurrent_snapshot_slot, None)
            model_r = (model_r[0], None)
        full = self.hashes(tokens[:max(length, 0)])
        key, digest = self.digest(tokens, max(length, 0))
        checkpoint = ctxcache.HybridCheckpointKey(digest, length)
        real, model = Outcome.both(
            lambda: self.manager.publish_hybrid(real_lease, full, checkpoint, real_r, retention=retention),
            lambda: self.model.publish_hybrid(model_lease, as_tuples(full), key, length, model_r, retention))
        if real is not None:
            assert (int(real.status), real.record, list(real.canonical_base_pages),
                    real.published_base_full_block_count) == model

    @precondition(lambda self: any(e[1].live and e[1].mode in mm.CHECKPOINT_MODES for e in self.leases))
    @rule(index=st.integers(0, 5), length=st.one_of(st.none(), st.integers(1, SEQUENCE_LENGTH)),
          retention=retention_specs())
    def hybrid_checkpoint(self, index, length, retention=None):
        hybrid = [e for e in self.leases if e[1].live and e[1].mode in mm.CHECKPOINT_MODES]
        self._checkpoint(hybrid[index % len(hybrid)], length, retention)

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5), length=st.integers(-1, SEQUENCE_LENGTH), which=st.integers(0, 3),
          corrupt=st.sampled_from([None, None, None, "fewer", "more", "drop_partial", "foreign", "prefix", "beyond"]),
          retention=retention_specs())
    def publish_hybrid_mtp(self, index, length, which, corrupt, retention=None):
        """One Hybrid+MTP publication on any live lease, usually well formed (a reservation it holds, the
        floor((E-1)/P) hashes of its own prompt), sometimes corrupt: one hash too few or too many, the partial slot
        dropped, slots the lease does not own, a first block the lease did not acquire, or a checkpoint 2P tokens past
        the prompt (more blocks than the lease holds unless it grew). Length may be out of range (E < 1). Any lease
        but a Hybrid+MTP one is refused."""
        entry = self.live_entry(index)
        real_lease, model_lease, tokens = entry[0], entry[1], entry[2]
        length = min(length, len(tokens))
        if corrupt == "beyond":
            length = len(tokens) + 2 * self.P
            tokens = np.concatenate([tokens, BASE_SEQUENCES[0][:2 * self.P]])
        if entry[4] and corrupt != "foreign":
            real_r, model_r = entry[4][which % len(entry[4])]
        else:  # slots this lease did not reserve (whatever else holds them)
            real_r, model_r = ctxcache.HybridSnapshotReservation(which, which), (which, which)
        if corrupt == "drop_partial":
            real_r = ctxcache.HybridSnapshotReservation(real_r.recurrent_snapshot_slot, None)
            model_r = (model_r[0], None)
        blocks = max(length - 1, 0) // self.P
        full = self.hashes(tokens)[:blocks]
        if corrupt == "fewer" and blocks > 0:
            full = full[:-1]
        elif corrupt == "more":
            full = self.hashes(np.concatenate([tokens, tokens]))[:blocks + 1]
        elif corrupt == "prefix" and blocks > 0:
            full = full.copy()
            full[0, 1] ^= np.uint64(0x5A5A)
        key, digest = self.digest(tokens, max(length, 0))
        real, model = Outcome.both(
            lambda: self.manager.publish_hybrid_mtp(real_lease, full, ctxcache.HybridCheckpointKey(digest, length),
                                                    real_r, retention=retention),
            lambda: self.model.publish_hybrid_mtp(model_lease, as_tuples(full), key, length, model_r, retention))
        if real is not None:
            assert (int(real.status), real.record, list(real.canonical_base_pages),
                    real.published_base_full_block_count) == model

    def _checkpoint(self, entry, length, retention=None):
        """The runtime's whole producer sequence: restore done, reserve, capture, publish, retire."""
        real_lease, model_lease, tokens = entry[:3]
        length = len(tokens) if length is None else min(length, len(tokens))
        if length == 0:
            return
        self.manager.release_restored_hybrid_snapshots(real_lease)
        self.model.release_restored(model_lease)
        mtp = model_lease.mode == mm.HYBRID_MTP
        partial = mtp or (model_lease.has_attention and length % self.P != 0)
        real_r = self.manager.reserve_hybrid_snapshots(real_lease, partial)
        model_r = self.model.reserve(model_lease, partial)
        if real_r is None:
            assert model_r is None
            return
        assert (real_r.recurrent_snapshot_slot, real_r.partial_kv_snapshot_slot) == model_r
        key, digest = self.digest(tokens, length)
        checkpoint = ctxcache.HybridCheckpointKey(digest, length)
        if mtp:  # the boundary token stays private: floor((E-1)/P) blocks
            full = self.hashes(tokens[:length])[:(length - 1) // self.P]
            real, model = Outcome.both(
                lambda: self.manager.publish_hybrid_mtp(real_lease, full, checkpoint, real_r, retention=retention),
                lambda: self.model.publish_hybrid_mtp(model_lease, as_tuples(full), key, length, model_r, retention))
        else:
            full = self.hashes(tokens[:length])
            real, model = Outcome.both(
                lambda: self.manager.publish_hybrid(real_lease, full, checkpoint, real_r, retention=retention),
                lambda: self.model.publish_hybrid(model_lease, as_tuples(full), key, length, model_r, retention))
        if real is not None:
            assert (int(real.status), real.record, list(real.canonical_base_pages),
                    real.published_base_full_block_count) == model
        self.manager.retire_hybrid_snapshot_reservation(real_lease, real_r)
        self.model.retire(model_lease, model_r)

    @precondition(lambda self: any(e[1].live for e in self.leases))
    @rule(index=st.integers(0, 5))
    def release(self, index):
        entry = self.live_entry(index)
        entry[0].release()
        self.model.release(entry[1])

    @precondition(lambda self: self.model.records)
    @rule(choice=st.integers(0, 6))
    def evict(self, choice):
        lru = self.manager.records.lru()
        rid = lru[choice % len(lru)] if lru and choice < 5 else 1000 + choice
        Outcome.both(lambda: self.manager.evict_record(rid), lambda: self.model.evict(rid))

    # ---- retention: the clock, pins, the budget, clear ----------------------------------------------------------
    def _upgrades_a_pinned_record(self, model_lease, model_hashes, resident):
        """True for the one publication the machine skips while SKIP_PINNED_DRAFT_UPGRADE (see there)."""
        if not SKIP_PINNED_DRAFT_UPGRADE or model_lease.mode != mm.SPEC or not model_lease.live:
            return False
        count = min(len(model_hashes), resident // self.P)
        rid = self.model.exact.get((model_hashes[count - 1], count)) if count > 0 else None
        return rid is not None and rid in self.model.pins and not self.model.records[rid].draft

    @rule(quarters=st.sampled_from([0, 1, 2, 4, 4, 8, 20, 40, -1]))
    def advance_clock(self, quarters):
        """The driven clock moves on by a quarter second to ten seconds (expiries apply), or is refused going back."""
        t = self.quarters + quarters
        Outcome.both(lambda: self.manager.set_retention_time(t / 4), lambda: self.model.set_time(t * 250_000_000))
        self.quarters = max(self.quarters, t)

    @rule(op=st.sampled_from(["pin", "pin", "pin", "pin", "unpin", "unpin", "unpin", "budget", "budget", "clear"]),
          choice=st.integers(0, 7), duration=PIN_DURATIONS, fraction=st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]))
    def retention_control(self, op, choice, duration, fraction):
        """One rule (so that the requests keep their share of the steps): pin a record (a pinned one: a new
        duration; sometimes an id that does not exist), unpin one (from the pinned end of records.lru()), set the
        pin budget (refused below what the pins hold) or, rarely, clear (pins first, then every record in eviction
        order; refused while leases are live)."""
        lru = self.manager.records.lru()
        if op == "pin" and lru:
            rid = lru[choice % len(lru)] if choice < 6 else 1000 + choice
            Outcome.both(lambda: self.manager.pin_record(rid, duration),
                         lambda: self.model.pin(rid, mm.duration_ns(duration)))
            self._pinned = self._pinned or bool(self.model.pins)
        elif op == "unpin" and lru:
            rid = lru[-1 - choice % len(lru)] if choice < 6 else 1000 + choice
            Outcome.both(lambda: self.manager.unpin_record(rid), lambda: self.model.unpin(rid))
        elif op == "budget":
            Outcome.both(lambda: self.manager.set_pin_budget(fraction), lambda: self.model.set_pin_budget(fraction))
        elif op == "clear":
            live = sum(e[1].live for e in self.leases)
            Outcome.both(self.manager.clear, lambda: self.model.clear(live))

    # ---- the whole observable state after every step ------------------------------------------------------
    @invariant()
    def state_agrees(self):
        if not hasattr(self, "manager"):
            return
        self._steps = getattr(self, "_steps", 0) + 1
        m, model = self.manager, self.model
        m.check_invariants()
        for t in ResourceType:
            assert list(m.pools.free_list(t)) == list(model.pools.free[t]), f"{t.name} free list"
            for i in range(model.pools.capacity[t]):
                assert m.pools.active_ref_count(t, i) == model.pools.active[t][i], f"{t.name} {i} active"
                assert m.pools.cache_ref_count(t, i) == model.pools.cache[t][i], f"{t.name} {i} cache"
            reclaimable = sum(1 for a, c in zip(model.pools.active[t], model.pools.cache[t]) if a == 0 and c > 0)
            assert m.pools.acquirable_count(t) == len(model.pools.free[t]) + reclaimable, f"{t.name} acquirable"
        assert m.records.lru() == model.lru
        metrics = m.metrics
        assert [metrics.evicted_records, metrics.reclaimed_base_kv_pages, metrics.reclaimed_draft_kv_pages,
                metrics.reclaimed_recurrent_snapshots, metrics.reclaimed_partial_kv_snapshots,
                metrics.trimmed_records, metrics.trimmed_blocks] == model.metrics
        for rid in model.records:
            assert m.record_priority(rid) == model.records[rid].priority, f"record {rid} priority"
        rm = m.retention_metrics
        assert (rm.evicted_records_by_priority, rm.trimmed_records_by_priority, rm.retention_expiries,
                rm.pin_expiries, rm.pins_refused, rm.pinned_records, rm.pinned_base_pages) == model.retention_metrics()
        for rid in model.lru:  # trims change a record's key and paths in place
            real, expected = m.records[rid], model.records[rid]
            assert real.full_block_count == expected.full_block_count, f"record {rid} blocks"
            assert as_tuples(real.logical_block_hashes) == expected.hashes, f"record {rid} hashes"
            assert list(real.base_page_path) == expected.base, f"record {rid} base path"
            assert list(real.draft_page_path) == expected.draft, f"record {rid} draft path"
        assert len(m.base_index) == len(model.index)
        for real_lease, model_lease, *_ in self.leases:
            if model_lease.live:
                assert list(real_lease.base_pages) == model_lease.base
                assert list(real_lease.draft_pages) == model_lease.draft
                assert real_lease.recurrent_snapshot_slot == model_lease.recurrent
                assert real_lease.partial_kv_snapshot_slot == model_lease.partial


ManagerMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize="CTXCACHE_HYPOTHESIS_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestManagerAgainstModel = ManagerMachine.TestCase


def test_publish_onto_a_matched_page_canonical_for_another_hash_is_refused_by_both():
    """Issue 24's divergence (CTXCACHE_HYPOTHESIS_EXAMPLES=4000, seed 65944512406657351022619579769398815842),
    shrunk by hand from 162 steps to these seven calls. A cold spec lease publishes its 3 blocks [h, h1, h2] on its
    pages 0 1 2; a vanilla lease hits h at page 0 (a full-input rewind binds block 0 only); the record is evicted
    (both leases still pin page 0); the spec lease publishes again with h corrupted to h' (a cold lease's hashes are
    checked against nothing, so page 0 becomes canonical for h'); the vanilla lease then publishes its true chain
    [h, h1]. h is indexed nowhere and page 0 is h''s: the model refuses ("page mapped to another hash"), and so must
    the library (it used to answer PUBLISHED with canonical pages [0, 1], a record holding page 0 for h)."""
    recorded = len(_steps_per_example), len(_trims_per_trimming_example), len(_retention_coverage)
    s = ManagerMachine()
    s.create(profile=(2, [32, 24, 3, 3], 8), policy="lru")
    request = dict(sequence=0, diverge_at=SEQUENCE_LENGTH, salt=0, bypass=False, narrow=False, junk=False)
    s.acquire(kind="spec", length=6, **request)
    s.state_agrees()
    s.publish(index=0, resident=None, corrupt=-1)
    s.state_agrees()
    s.acquire(kind="vanilla", length=4, **request)
    s.state_agrees()
    spec, vanilla = s.leases[0], s.leases[1]
    assert [list(spec[0].base_pages), list(vanilla[0].base_pages)] == [[0, 1, 2], [0, 3]]
    s.evict(choice=0)
    s.state_agrees()
    s.publish(index=0, resident=None, corrupt=0)  # the spec lease: page 0 now canonical for h'
    s.state_agrees()
    h, h1 = as_tuples(vanilla[3])
    assert s.manager.base_index.lookup(vanilla[3][0]) is None
    before = [(int(r), list(s.manager.records[r].base_page_path)) for r in s.manager.records.lru()]
    with pytest.raises(ctxcache.ContractError, match="page 0 is already the canonical page of another hash"):
        s.manager.publish(vanilla[0], vanilla[3], 4)
    with pytest.raises(mm.ModelContractError, match="page mapped to another hash"):
        s.model.publish(vanilla[1], [h, h1], 4)
    s.state_agrees()  # nothing changed on either side; check_invariants passes
    assert [(int(r), list(s.manager.records[r].base_page_path)) for r in s.manager.records.lru()] == before
    assert s.manager.base_index.lookup(vanilla[3][0]) is None
    s.publish(index=1, resident=None, corrupt=-1)  # the same call through the machine: both refuse
    s.state_agrees()
    s.teardown()
    del _steps_per_example[recorded[0]:], _trims_per_trimming_example[recorded[1]:]  # not a budgeted example
    del _retention_coverage[recorded[2]:]


def test_budget_was_met():
    """Runs after the state machine (pytest keeps file order): enough examples ran every step."""
    if not _steps_per_example:
        pytest.skip("the state machine did not run in this session (deselected)")
    full = sum(1 for steps in _steps_per_example if steps >= STEPS)
    assert full >= FULL_LENGTH, f"only {full} of {len(_steps_per_example)} examples ran all {STEPS} steps"
    trimming = sum(1 for trims in _trims_per_trimming_example if trims > 0)
    assert trimming >= FULL_LENGTH // 20, f"only {trimming} lru-trim examples trimmed a record"
    # Retention: each behaviour in some examples (the rarest, cuts of a low tail down to a high head, in about 2%
    # of them at the default budget, most of the others in 10% or more).
    for what, share in (("expiry", 50), ("pinned", 50), ("pin expiry", 50), ("pin refused", 50),
                        ("evicted off default", 50), ("trimmed off default", 100), ("low tail cut", 100)):
        seen = sum(1 for example in _retention_coverage if example[what])
        assert seen >= FULL_LENGTH // share, f"only {seen} examples had a {what}"
