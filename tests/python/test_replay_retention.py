"""``ctxcache replay --retain-system-prompts`` and ``sweep`` with it (issue 29): the workloads' system prompts and
arrival times, the retention clock driven by the arrivals in both engines, ``reuse_by_priority`` and its table,
the retention metrics of the report, and the headline check on the built-in workload.

A hand-checked workload (page size 4, 24 pages, records of 5 pages): A = a 16-token system prompt + 4 tokens at
t = 0 s, six one-off 20-token prompts F0..F5 at t = 1..6 s, then B = the system prompt + 4 other tokens at t = 7 s.
A, F0, F1 and F2 fill 20 pages; F3, F4 and F5 each need one eviction, and B (cold) a fourth. Under plain LRU the
first victim is A, so B reuses nothing; with the system prompt at priority 90 the victims are F0, F1 and F2, and B
reuses A's 4 system-prompt pages (16 tokens) with no eviction of its own. With a 2.5 s duration the range has ended
(at t = 2.5 s) before F3 needs room (it arrives at t = 4 s): A is back at 35 and, the least recent, goes first.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from ctxcache.cli import replay, workload

S = np.arange(1000, 1016, dtype=np.int32)
RETAINED = {"90": {"prompt_tokens": 32, "unbounded_reusable_tokens": 16, "reused_tokens": 16},
            "35": {"prompt_tokens": 128, "unbounded_reusable_tokens": 0, "reused_tokens": 0}}


def hand_workload() -> list[workload.WorkloadRequest]:
    w = workload.WorkloadRequest
    out = [w(20, 1, "A", prompt=np.concatenate([S, np.arange(1, 5, dtype=np.int32)]), system_tokens=16, arrival=0.0)]
    out += [w(20, 1, f"F{i}", prompt=np.arange(2000 + 100 * i, 2020 + 100 * i, dtype=np.int32), arrival=i + 1.0)
            for i in range(6)]
    out.append(w(20, 1, "B", prompt=np.concatenate([S, np.arange(7, 11, dtype=np.int32)]), system_tokens=16,
                 arrival=7.0))
    return out


@pytest.mark.parametrize("full", [False, True], ids=["bookkeeping-only", "full"])
@pytest.mark.parametrize("retain, last, evicted, expiries, by_priority", [
    (None, 0, 4, 0, {"35": {"prompt_tokens": 160, "unbounded_reusable_tokens": 16, "reused_tokens": 0}}),
    ((90, None), 16, 3, 0, RETAINED),
    ((90, 10.0), 16, 3, 0, RETAINED),
    ((90, 2.5), 0, 4, 1, {"90": {**RETAINED["90"], "reused_tokens": 0}, "35": RETAINED["35"]}),
], ids=["plain-lru", "priority-90", "priority-90-for-10s", "priority-90-for-2.5s"])
def test_a_hand_checked_workload_in_both_engines(full, retain, last, evicted, expiries, by_priority):
    settings = replay.Settings(page_size=4, retain_system=retain, bookkeeping_only=not full, max_records=100)
    prepared = replay.prepare(hand_workload(), settings)
    m = (replay.replay_full if full else replay.replay_bookkeeping)(prepared, settings, 24)
    _, bound = replay.upper_bound(prepared, 4)
    assert m.reused == [0] * 7 + [last]
    assert m.evicted_records == evicted
    assert m.retention == {"evicted_records_by_priority": {"35": evicted}, "trimmed_records_by_priority": {},
                           "retention_expiries": expiries}
    assert replay.reuse_by_priority(prepared.requests, settings, m.reused, bound) == by_priority


def test_the_workloads_know_their_system_prompts_and_arrivals():
    builtin = workload.builtin_workload(0)
    assert [r.arrival for r in builtin[:3]] == [0.0, workload.BUILTIN_INTERVAL, 2 * workload.BUILTIN_INTERVAL]
    conversations = [r for r in builtin if r.source.startswith("conversation")]
    assert conversations and all(r.system_tokens > 0 for r in conversations)
    assert all(r.system_tokens == 0 for r in builtin if not r.source.startswith("conversation"))
    systems = {r.tokens()[:r.system_tokens].tobytes(): r.system_tokens for r in conversations}
    assert sorted(systems.values()) == [258, 382, 692]
    trace = workload.conversation_trace(workload.ConversationSpec(conversations=4, turns=2, seed=1,
                                                                  system_prompt_tokens=1500, system_prompts=2))
    requests = workload.trace_workload(trace)
    assert [r.arrival for r in requests] == [t.timestamp / 1000 for t in trace]
    assert all(r.system_tokens % workload.TRACE_BLOCK == 0 and r.system_tokens >= 512 for r in requests)


# ---- the command ---------------------------------------------------------------------------------------------

def _replay(capsys, argv):
    code = replay.replay_main(argv)
    out = capsys.readouterr().out
    assert code == 0
    return out


# 20% of the built-in workload's 26,112 distinct prompt tokens (5% and 10% hold less than its largest request,
# 3,504 tokens, and less than its three system prompts' 82 full pages). lru-trim cuts the conversations' tails at
# 35 before the system prompts' blocks at 90; under record LRU a record's rank is its highest block's, so whole
# conversations stay at 90 and crowd each other out.
HEADLINE = ["--capacity-tokens", "5222", "--policy", "lru-trim", "--json", "--no-progress", "--no-optimum"]


@pytest.mark.parametrize("engine", [["--bookkeeping-only"], []], ids=["bookkeeping-only", "full"])
def test_headline_every_later_request_reuses_its_system_prompts_full_blocks(capsys, engine):
    plain = json.loads(_replay(capsys, HEADLINE + engine))
    kept = json.loads(_replay(capsys, HEADLINE + engine + ["--retain-system-prompts", "90"]))
    assert plain["reused_tokens"] == 34096 and kept["reused_tokens"] == 37456
    assert plain["reuse_by_priority"] == {"35": {"prompt_tokens": 98417, "unbounded_reusable_tokens": 71504,
                                                 "reused_tokens": 34096}}
    assert kept["reuse_by_priority"] == {
        "90": {"prompt_tokens": 19058, "unbounded_reusable_tokens": 17648, "reused_tokens": 17648},
        "35": {"prompt_tokens": 79359, "unbounded_reusable_tokens": 53856, "reused_tokens": 19808}}
    assert kept["retain_system_prompts"] == {"priority": 90, "seconds": None} and plain["retain_system_prompts"] is None
    assert kept["retention_metrics"]["evicted_records_by_priority"] == {"35": 84}
    # request by request: after the first request that carries a system prompt, every one reuses all its full blocks
    settings = replay.Settings(page_size=16, retain_system=(90, None), eviction_policy="lru-trim")
    prepared = replay.prepare(workload.builtin_workload(0), settings)
    m = replay.replay_bookkeeping(prepared, settings, 5222 // 16)
    seen: set[bytes] = set()
    later = []
    for r, reused in zip(prepared.requests, m.reused):
        if r.system_tokens:
            key = r.tokens()[:r.system_tokens].tobytes()
            if key in seen:
                later.append(reused >= r.system_tokens // 16 * 16)
            seen.add(key)
    assert len(later) == 49 and all(later)


def test_the_text_report_has_the_priority_table_only_with_the_option(capsys):
    argv = ["--capacity-tokens", "5222", "--bookkeeping-only", "--no-progress", "--no-optimum", "--policy", "lru-trim"]
    assert "reuse by priority" not in _replay(capsys, argv)
    text = _replay(capsys, argv + ["--retain-system-prompts", "90:0.5"])
    assert "reuse by priority (system prompts at 90 for 0.5 s):" in text
    assert "retention expiries 15" in text
    lines = text.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("priority")))
    assert lines[header + 2].split() == ["90", "19,058", "17,648", "13,870", "78.59%"]
    assert lines[header + 3].split() == ["35", "79,359", "53,856", "20,770", "38.57%"]


def test_a_trace_without_system_prompts_says_nothing_was_retained(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 10 * i, "input_length": 600, "output_length": 4,
                                         "hash_ids": [1, 2 + i]}) + "\n" for i in range(3)))
    text = _replay(capsys, [str(trace), "--retain-system-prompts", "90", "--bookkeeping-only", "--no-progress",
                            "--capacity-tokens", "4096"])
    assert "(no request of this workload opens with a shared system prompt: nothing was retained)" in text
    r = json.loads(_replay(capsys, [str(trace), "--retain-system-prompts", "90", "--bookkeeping-only",
                                    "--no-progress", "--capacity-tokens", "4096", "--json"]))
    assert r["reuse_by_priority"] == {"35": {"prompt_tokens": 1800, "unbounded_reusable_tokens": 1024,
                                             "reused_tokens": 1024}}


def test_sweep_draws_the_curve_without_retention_beside_it(tmp_path, capsys):
    code = replay.sweep_main(["--points", "8", "--out-dir", str(tmp_path), "--json", "--no-progress",
                              "--no-optimum", "--retain-system-prompts", "90", "--policy", "lru-trim"])
    r = json.loads(capsys.readouterr().out)
    assert code == 0 and r["retain_system_prompts"] == {"priority": 90, "seconds": None}
    with open(tmp_path / "ctxcache-sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and all(row["without_retention_hit_rate"] != "" for row in rows)
    assert float(rows[-1]["hit_rate"]) == float(rows[-1]["without_retention_hit_rate"])  # nothing is evicted there
    code = replay.sweep_main(["--points", "8", "--out-dir", str(tmp_path), "--json", "--no-progress", "--no-optimum"])
    capsys.readouterr()
    with open(tmp_path / "ctxcache-sweep.csv", newline="") as f:
        assert all(row["without_retention_hit_rate"] == "" for row in csv.DictReader(f))
