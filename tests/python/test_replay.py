"""ctxcache replay and ctxcache sweep (python/ctxcache/cli/replay.py, workload.py): the trace reader's errors, the
report's arithmetic and the unbounded-cache bound on hand-checked traces, bookkeeping-only vs full-engine
agreement, --verify on the built-in workload, the sweep's PNG and CSV, Ctrl-C."""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from ctxcache.cli import replay, workload

# Page size 512 = one trace block per page. Hand-checked, requests in order, an unbounded cache:
#   1  ids [1, 2]    1024 tokens: nothing cached                                -> 0       (publishes 1, 2)
#   2  ids [1, 2, 3] 1300 tokens: pages 1, 2 match (the third is partial)      -> 1024
#   3  ids [1, 2]    1024 tokens: matched whole and page-aligned: rewind one   -> 512     (a full-input rewind)
#   4  ids [4]        300 tokens: no full page                                  -> 0
#   5  ids [1, 5]    1024 tokens: page 1 matches                                -> 512
HAND = [([1, 2], 1024), ([1, 2, 3], 1300), ([1, 2], 1024), ([4], 300), ([1, 5], 1024)]
HAND_REUSE = [0, 1024, 512, 0, 512]


def _write_trace(path, rows, output_length=10):
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": output_length,
                                        "hash_ids": ids}) + "\n" for t, (ids, n) in enumerate(rows)))
    return path


@pytest.fixture
def hand_trace(tmp_path):
    return _write_trace(tmp_path / "hand.jsonl", HAND)


@pytest.fixture
def conversations(tmp_path):
    """66 requests: 12 conversations of 5 turns, each turn extending its conversation's prefix (as in the bench
    smoke test), then three page-aligned prompts sent twice each (full-input rewinds)."""
    rng = np.random.default_rng(3)
    lines, next_id, t = [], 100, 0
    convs = [[] for _ in range(12)]
    for _turn in range(5):
        for c in range(12):
            new = int(rng.integers(1, 3))
            convs[c] += list(range(next_id, next_id + new))
            next_id += new
            ids = convs[c]
            n = (len(ids) - 1) * 512 + (512 if rng.random() < 0.2 else int(rng.integers(1, 512)))
            lines.append({"timestamp": t, "input_length": n, "output_length": int(rng.integers(1, 40)),
                          "hash_ids": ids})
            t += 1
    for c in range(3):  # an aligned prompt, then the same prompt again: a full-input rewind
        for _ in range(2):
            lines.append({"timestamp": t, "input_length": len(convs[c]) * 512, "output_length": 5,
                          "hash_ids": convs[c]})
            t += 1
    path = tmp_path / "conv.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in lines))
    return path


def _run(capsys, main, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---- the trace reader ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("lines, line, field, words", [
    (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}', '{"timestamp": 1,'],
     2, None, "not JSON"),
    (['{"timestamp": 0, "output_length": 1, "hash_ids": [1]}'], 1, "input_length", "missing"),
    (['', '{"timestamp": 0, "input_length": "ten", "output_length": 1, "hash_ids": [1]}'], 2, "input_length",
     "must be an integer"),
    (['{"timestamp": 0, "input_length": 10, "output_length": -1, "hash_ids": [1]}'], 1, "output_length", ">= 0"),
    (['{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}'], 1, "hash_ids",
     "fewer than input_length"),
    (['{"timestamp": 0, "input_length": 6, "output_length": 1, "hash_ids": "abc"}'], 1, "hash_ids", "list"),
    (['[1, 2]'], 1, None, "not a JSON object"),
])
def test_trace_reader_names_file_line_and_field(tmp_path, lines, line, field, words):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(workload.TraceError) as e:
        workload.read_trace(path)
    assert (e.value.line, e.value.field) == (line, field)
    assert str(e.value).startswith(f"{path}:{line}: ") and words in str(e.value)


def test_missing_or_malformed_trace_exits_2_with_one_line_and_no_traceback(tmp_path, capsys):
    code, out, err = _run(capsys, replay.replay_main, [str(tmp_path / "nope.jsonl"), "--no-progress"])
    assert code == 2 and out == "" and err.strip() == f"ctxcache replay: error: {tmp_path / 'nope.jsonl'}: no such file"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 2}\n')
    code, out, err = _run(capsys, replay.replay_main, [str(bad), "--bookkeeping-only", "--no-progress"])
    assert code == 2 and err.strip() == f"ctxcache replay: error: {bad}:2: field 'input_length': missing"
    proc = subprocess.run([sys.executable, "-m", "ctxcache.cli", "sweep", str(bad), "--no-progress"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and f"{bad}:2: field 'input_length'" in proc.stderr


def test_a_capacity_smaller_than_one_request_is_refused(hand_trace, capsys):
    code, out, err = _run(capsys, replay.replay_main, [str(hand_trace), "--page-size", "512", "--base-pages", "2",
                                                       "--bookkeeping-only", "--no-progress"])
    assert code == 2 and out == ""
    assert "smaller than one request: trace line 2 needs 3 pages (1300 prompt + 10 output tokens" in err
    assert "--capacity-tokens 1536" in err


# ---- the bound and the report's arithmetic --------------------------------------------------------------------

def test_upper_bound_on_a_hand_checked_trace(hand_trace):
    settings = replay.Settings(page_size=512)
    prepared = replay.prepare(workload.trace_workload(workload.read_trace(hand_trace)), settings)
    # distinct full pages (chained): [1], [1, 2], [1, 5]; ids 3 and 4 only ever end in a partial page
    assert prepared.distinct_pages == 3
    total, each = replay.upper_bound(prepared, 512)
    assert each == HAND_REUSE and total == 2048
    # spec: every hit replays its boundary page
    assert replay.upper_bound(prepared, 512, "spec")[1] == [0, 512, 512, 0, 0]


def test_report_arithmetic_on_a_hand_checked_trace(hand_trace, capsys):
    code, out, _ = _run(capsys, replay.replay_main, [str(hand_trace), "--page-size", "512", "--base-pages", "64",
                                                     "--bookkeeping-only", "--json", "--no-progress"])
    assert code == 0
    r = json.loads(out)
    assert r["requests"] == 5 and r["prompt_tokens"] == 1024 + 1300 + 1024 + 300 + 1024 == 4672
    assert r["reused_tokens"] == r["upper_bound_reused_tokens"] == 2048
    assert r["hit_rate"] == round(2048 / 4672, 6) and r["upper_bound_hit_rate"] == r["hit_rate"]
    assert r["ratio_to_upper_bound"] == 1.0
    assert r["requests_with_reuse"] == 3 and r["full_input_rewinds"] == 1
    assert (r["forced_cold"], r["rejected"], r["evicted_records"], r["reclaimed_pages"]) == (0, 0, 0, 0)
    assert r["latency"]["acquire"]["count"] == 5 and r["latency"]["release"]["count"] == 5
    assert r["latency"]["publish"]["count"] == 4  # request 4 has no full page to publish
    assert r["latency"]["grow"]["count"] == 3  # the page-aligned 1024 + 10 tokens need one more page
    # pages held after each request: the cached [1], [1, 2] (request 2's partial third page and its growth are
    # private and freed at release), then [1, 5] adds one
    assert [s["pages"] for s in r["occupancy"]["samples"]] == [2, 2, 2, 2, 3]
    assert r["interrupted"] is False and r["engine"] == "bookkeeping-only"
    text_code, text, _ = _run(capsys, replay.replay_main, [str(hand_trace), "--page-size", "512", "--base-pages", "64",
                                                           "--bookkeeping-only", "--no-progress"])
    assert text_code == 0 and "hit rate" in text and "43.84%" in text and "p99 us" in text


def test_bookkeeping_only_equals_the_bound_with_an_unbounded_capacity(conversations):
    settings = replay.Settings(page_size=16)
    prepared = replay.prepare(workload.trace_workload(workload.read_trace(conversations)), settings)
    _, each = replay.upper_bound(prepared, 16)
    m = replay.replay_bookkeeping(prepared, settings, 4 * prepared.distinct_pages + 1000)
    assert m.reused == each and m.full_input_rewinds > 0 and m.evicted_records == 0


# ---- bookkeeping-only vs the full engine ----------------------------------------------------------------------

@pytest.mark.parametrize("mode, share", [("vanilla", 4.0), ("vanilla", 0.25), ("spec", 0.25)])
def test_bookkeeping_only_agrees_with_the_full_engine_request_by_request(conversations, mode, share):
    """Batch size 1, prefill_state_only: every request reuses the same tokens in both, evictions included."""
    settings = replay.Settings(page_size=16, mode=mode, max_records=1000)
    prepared = replay.prepare(workload.trace_workload(workload.read_trace(conversations)), settings)
    capacity = max(int(prepared.distinct_pages * share), replay.minimum_capacity_pages(prepared.requests, settings))
    book = replay.replay_bookkeeping(prepared, settings, capacity)
    full = replay.replay_full(prepared, settings, capacity)
    assert book.reused == full.reused and sum(book.reused) > 0
    assert (book.evicted_records, book.reclaimed_pages, book.full_input_rewinds, book.forced_cold) == \
        (full.evicted_records, full.reclaimed_pages, full.full_input_rewinds, full.forced_cold)
    if share < 1:
        assert book.evicted_records > 0


def test_verify_on_the_built_in_workload_is_byte_exact(capsys):
    code, out, _ = _run(capsys, replay.replay_main, ["--verify", "--json", "--limit", "40", "--no-progress"])
    r = json.loads(out)
    assert code == 0 and r["engine"] == "full" and r["requests"] == 40
    assert r["verify"] == {"checked": 40, "mismatches": 0, "first_mismatch": None, "verdict": "byte-exact"}
    assert r["reused_tokens"] > 0


@pytest.mark.gpu
def test_verify_on_the_built_in_workload_is_byte_exact_on_cuda(capsys):
    code, out, _ = _run(capsys, replay.replay_main, ["--verify", "--json", "--backend", "cuda", "--no-progress"])
    r = json.loads(out)
    assert code == 0 and r["engine"] == "full"
    assert r["verify"]["verdict"] == "byte-exact" and r["verify"]["mismatches"] == 0
    assert r["reused_tokens"] > 0


def test_verify_with_generated_tokens_published_and_batches_on_a_reduced_workload():
    settings = replay.Settings(page_size=16, batch_size=4, commit_policy="including_generated_tokens", verify=True)
    prepared = replay.prepare(workload.builtin_workload(1, scale=0.3), settings)
    m = replay.replay_full(prepared, settings, replay.default_capacity_pages(prepared, settings))
    assert m.verify is not None and m.verify["verdict"] == "byte-exact" and m.verify["checked"] == len(prepared.requests)


def test_builtin_workload_is_seeded_and_shares_prefixes():
    a, b = workload.builtin_workload(5), workload.builtin_workload(5)
    assert [r.source for r in a] == [r.source for r in b]
    assert all(np.array_equal(x.tokens(), y.tokens()) for x, y in zip(a, b))
    assert [r.source for r in workload.builtin_workload(6)] != [r.source for r in a]
    kinds = {r.source.split()[0] for r in a}
    assert kinds == {"conversation", "agent", "document", "one-off"}


# ---- sweep ----------------------------------------------------------------------------------------------------

def test_sweep_writes_the_plot_and_the_csv(tmp_path, capsys):
    code, out, _ = _run(capsys, replay.sweep_main, ["--points", "8", "--out-dir", str(tmp_path), "--json",
                                                    "--no-progress"])
    assert code == 0
    r = json.loads(out)
    png, table = tmp_path / "ctxcache-sweep.png", tmp_path / "ctxcache-sweep.csv"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(r["points"]) == 8
    assert list(rows[0]) == ["capacity_pages", "capacity_tokens", "fraction_of_distinct", "hit_rate",
                             "ratio_to_upper_bound", "optimum_hit_rate", "lru_hit_rate", "reused_tokens", "rejected",
                             "evicted_records", "reclaimed_pages", "peak_pages", "without_retention_hit_rate",
                             "host_tier_pages", "reused_tokens_host"]
    caps = [int(x["capacity_pages"]) for x in rows]
    assert caps == sorted(caps) and caps[-1] == r["distinct_prompt_tokens"] // 16
    assert float(rows[0]["fraction_of_distinct"]) == pytest.approx(0.01, abs=0.002)
    assert float(rows[-1]["hit_rate"]) == pytest.approx(r["upper_bound_hit_rate"], abs=1e-3)
    assert r["reaches_99_percent_of_bound_tokens"] is not None


def test_sweep_notes_a_smaller_capacity_that_reuses_more():
    rows = [{"capacity_tokens": 100, "hit_rate": 0.5, "evicted_records": 9},
            {"capacity_tokens": 200, "hit_rate": 0.4, "evicted_records": 7},
            {"capacity_tokens": 400, "hit_rate": 0.6, "evicted_records": 1}]
    notes = replay.non_monotonic_notes(rows)
    assert len(notes) == 1 and notes[0].startswith("100 tokens reuse more (50.00%) than 200") and "LRU" in notes[0]


# ---- Ctrl-C ---------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _interrupt_replay_after(count):
    """A progress hook that raises KeyboardInterrupt once the replay (not the hashing) has done `count` steps."""
    @contextlib.contextmanager
    def progress(total, desc, enabled):
        done = [0]

        def step(n):
            done[0] += n
            if desc == "replay" and done[0] >= count:
                raise KeyboardInterrupt

        yield step
    yield progress


@pytest.mark.parametrize("engine_args", [["--bookkeeping-only"], []])
def test_ctrl_c_prints_what_was_measured_and_exits_130(conversations, monkeypatch, capsys, engine_args):
    with _interrupt_replay_after(16) as hook:
        monkeypatch.setattr(replay, "_progress", hook)
        code, out, _ = _run(capsys, replay.replay_main, [str(conversations), "--json", *engine_args])
    r = json.loads(out)
    assert code == 130 and r["interrupted"] is True
    assert r["requests"] == 16 and r["requests_in_workload"] == 66
    assert r["prompt_tokens"] == sum(x.input_length for x in
                                     workload.trace_workload(workload.read_trace(conversations))[:16])
    assert r["upper_bound_reused_tokens"] >= r["reused_tokens"] > 0
    with _interrupt_replay_after(16) as hook:
        monkeypatch.setattr(replay, "_progress", hook)
        code, text, _ = _run(capsys, replay.replay_main, [str(conversations), *engine_args])
    assert code == 130 and "INTERRUPTED" in text and "16 of 66" in text


def test_ctrl_c_on_a_real_process(tmp_path):
    """SIGINT to a running `ctxcache replay`: partial JSON on stdout, exit status 130."""
    import signal
    import time

    big = _write_trace(tmp_path / "big.jsonl", [([i % 50, 1000 + i], 1000) for i in range(200000)], output_length=1)
    proc = subprocess.Popen([sys.executable, "-m", "ctxcache.cli", "replay", str(big), "--bookkeeping-only",
                             "--json", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    r = json.loads(out)
    assert r["interrupted"] is True and r["requests"] < 200000
