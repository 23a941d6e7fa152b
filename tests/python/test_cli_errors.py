"""The ``ctxcache`` command's bad options and honest figures (issue 24, items 5, 7 and 8).

Every bad invocation runs as its own process (``python -m ctxcache.cli ...``, this interpreter and environment) and
must end with exit status 2 and exactly one line on stderr that names the option and what it allows, never a
traceback. The processes start together (a module fixture, a few at a time) so that the import of each overlaps the
others. The rest runs in this process where it can: sweep's output checks come before any work, ``info`` never reports a
negative device count, the progress bar stays silent when stderr is not a terminal, the report's figures say
what they cover, and a pipe whose reader has gone is no traceback.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import ctxcache
from ctxcache import cli
from ctxcache.bench import runtime as bench_runtime
from ctxcache.cli import replay

INT32 = "2147483647"
UINT32 = "4294967295"
SWEEP_REMOVED = ("--capacity-tokens", "--base-pages", "--backend", "--bookkeeping-only", "--commit-policy")

# (id, argv after `python -m ctxcache.cli`, words the one line must hold: the option first, then its range)
# "{tmp}" stands for a fresh directory with a regular file "file" in it.
CASES = [
    ("base-pages-above-int32", ["replay", "--base-pages", "2147483648"], ["--base-pages", "1", INT32]),
    ("capacity-tokens-above-int32", ["replay", "--capacity-tokens", "99999999999"], ["--capacity-tokens", "1", INT32]),
    ("capacity-tokens-negative", ["replay", "--capacity-tokens", "-5"], ["--capacity-tokens", "1", INT32, "-5"]),
    ("capacity-tokens-under-a-page", ["replay", "--capacity-tokens", "5", "--limit", "2", "--no-progress"],
     ["--capacity-tokens 5", "--page-size (16)"]),
    ("store-without-host-tier", ["replay", "--limit", "2", "--no-progress", "--store", "memory://"],
     ["--store", "--host-tier-pages"]),
    ("store-with-bookkeeping-only", ["replay", "--limit", "2", "--no-progress", "--bookkeeping-only",
                                     "--host-tier-pages", "8", "--store", "memory://"], ["--store", "--store-pages"]),
    ("store-unknown-scheme", ["replay", "--limit", "2", "--no-progress", "--host-tier-pages", "8", "--store",
                              "redis://127.0.0.1:6379"], ["--store", "mooncake://", "memory://", "redis://"]),
    ("store-unknown-option", ["replay", "--limit", "2", "--no-progress", "--host-tier-pages", "8", "--store",
                              "mooncake://127.0.0.1:1?segmnt=1GiB"], ["--store", "'segmnt'", "segment"]),
    ("store-deadline-negative", ["replay", "--limit", "2", "--no-progress", "--host-tier-pages", "8", "--store",
                                 "memory://", "--store-deadline-ms", "-1"], ["--store-deadline-ms", "60000", "-1"]),
    ("page-size-above-int32", ["replay", "--page-size", "3000000000"], ["--page-size", "1", INT32]),
    ("max-records-above-int32", ["replay", "--max-records", "3000000000"], ["--max-records", "1", INT32]),
    ("batch-size-above-int32", ["replay", "--batch-size", "3000000000"], ["--batch-size", "1", INT32]),
    ("batch-size-not-a-number", ["replay", "--batch-size", "many"], ["--batch-size", "1", INT32, "'many'"]),
    ("seed-negative", ["replay", "--seed", "-1"], ["--seed", "0", UINT32]),
    ("seed-above-2-64", ["replay", "--seed", str(2**64 + 1)], ["--seed", "0", UINT32]),
    ("sweep-seed-negative", ["sweep", "--seed", "-1"], ["--seed", "0", UINT32]),
    ("limit-zero", ["replay", "--limit", "0"], ["--limit", "1", INT32]),
    ("sweep-points", ["sweep", "--points", "7"], ["--points", "8", "1000"]),
    ("sweep-out-dir-proc", ["sweep", "--out-dir", "/proc"], ["--out-dir /proc", "cannot write"]),
    ("sweep-out-dir-under-a-file", ["sweep", "--out-dir", "{tmp}/file/sub"], ["--out-dir {tmp}/file/sub", "cannot"]),
    ("sweep-output-is-a-directory", ["sweep", "--out-dir", "{tmp}", "--name", "taken"],
     ["{tmp}/taken.csv", "--name", "--out-dir"]),
    ("sweep-name-with-directories", ["sweep", "--name", "a/b/c"], ["--name", "file name", "--out-dir"]),
    ("sweep-name-empty", ["sweep", "--name", ""], ["--name", "file name"]),
    *[(f"sweep-has-no-{option[2:]}", ["sweep", option, *([] if option == "--bookkeeping-only" else ["1"])],
       ["unrecognized arguments", option]) for option in SWEEP_REMOVED],
    ("events-ipv4-out-of-range", ["replay", "--events", "tcp://256.1.1.1:5557"], ["--events", "0 to 255"]),
    ("events-port-out-of-range", ["replay", "--events", "tcp://*:65536"], ["--events", "1 to 65535"]),
    ("events-scheme", ["replay", "--events", "udp://host:5557"], ["--events", "tcp://HOST:PORT"]),
    ("events-replay-no-port", ["replay", "--events", "tcp://*:5557", "--events-replay", "tcp://*"],
     ["--events-replay", "tcp://HOST:PORT"]),
    ("retain-priority-above-100", ["replay", "--retain-system-prompts", "101"],
     ["--retain-system-prompts", "priority", "0 to 100", "101"]),
    ("retain-negative-seconds", ["replay", "--retain-system-prompts", "90:-1"],
     ["--retain-system-prompts", "seconds", "0 to 9.2e9", "'-1'"]),
    ("retain-not-a-rule", ["replay", "--retain-system-prompts", "high"],
     ["--retain-system-prompts", "PRIORITY[:SECONDS]", "'high'"]),
    ("sweep-retain-nan-seconds", ["sweep", "--retain-system-prompts", "50:nan"],
     ["--retain-system-prompts", "seconds", "'nan'"]),
    ("bench-runtime-seed", ["bench-runtime", "--seed", "-1"], ["--seed", "0", "4294967294"]),
    ("bench-runtime-requests", ["bench-runtime", "--requests", "0"], ["--requests", "1", "20000"]),
    ("bench-page-size-not-dividing-512", ["bench", "--page-size", "48"], ["--page-size", "512", "48"]),
    ("bench-repeat-zero", ["bench", "--repeat", "0"], ["--repeat", "1", "1000"]),
    ("unknown-command", ["frobnicate"], ["command", "replay", "sweep"]),
]
# --backend cuda on a machine without a usable device (on one with a device the run would just work).
NO_DEVICE = ctxcache.cuda_device_count() <= 0
if NO_DEVICE:
    CASES.append(("backend-cuda-without-a-device", ["replay", "--backend", "cuda", "--limit", "1"],
                  ["--backend cuda", "cpu", "auto"]))


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    (d / "file").write_text("a regular file\n")
    (d / "taken.csv").mkdir()
    return d


@pytest.fixture(scope="module")
def outcomes(tmp_dir: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    def run(case: tuple[str, list[str], list[str]]) -> tuple[str, subprocess.CompletedProcess[str]]:
        name, argv, _ = case
        args = [a.replace("{tmp}", str(tmp_dir)) for a in argv]
        return name, subprocess.run([sys.executable, "-m", "ctxcache.cli", *args], capture_output=True, text=True,
                                    timeout=120, cwd=tmp_dir)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(run, CASES))


@pytest.mark.parametrize("name, argv, words", CASES, ids=[c[0] for c in CASES])
def test_a_bad_option_is_one_line_and_exit_2(outcomes, tmp_dir: Path, name: str, argv: list[str],
                                            words: list[str]) -> None:
    proc = outcomes[name]
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    assert proc.stdout == ""
    assert ": error: " in lines[0]
    for word in words:
        assert word.replace("{tmp}", str(tmp_dir)) in lines[0]


def test_bench_transformers_without_torch_names_the_extra() -> None:
    blocked = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['bench_transformers', '--rounds', '1']; "
               "runpy.run_module('ctxcache.bench.transformers', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert "torch" in lines[0] and "ctxcache[transformers]" in lines[0]


# ---- sweep: the output is checked before the work --------------------------------------------------------------

def test_sweep_refuses_an_unwritable_output_before_any_work(monkeypatch, capsys, tmp_path: Path) -> None:
    def no_work(*args, **kwargs):
        raise AssertionError("the sweep started its work before checking where its output goes")

    monkeypatch.setattr(replay, "load_workload", no_work)
    monkeypatch.setattr(replay, "prepare", no_work)
    (tmp_path / "file").write_text("x")
    for out_dir in ("/proc", str(tmp_path / "file"), str(tmp_path / "file" / "sub")):
        t0 = time.perf_counter()
        code = replay.sweep_main(["--out-dir", out_dir, "--no-progress"])
        elapsed = time.perf_counter() - t0
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and f"--out-dir {out_dir}" in err, err
        assert elapsed < 2.0


def test_sweep_help_lists_only_what_it_uses_and_every_option_says_what_it_does() -> None:
    sweep = {s for a in replay.sweep_parser()._actions for s in a.option_strings}
    assert not sweep & set(SWEEP_REMOVED)
    for parser in (replay.replay_parser(), replay.sweep_parser(), bench_runtime.build_parser()):
        silent = [a.option_strings for a in parser._actions if not a.help or a.help == argparse.SUPPRESS]
        assert silent == [], f"{parser.prog}: options without help: {silent}"
    assert set(SWEEP_REMOVED) <= {s for a in replay.replay_parser()._actions for s in a.option_strings}


def test_sweep_table_shows_the_record_lru_column_only_beside_another_policy(tmp_path: Path, capsys) -> None:
    common = ["--limit", "30", "--points", "8", "--no-progress", "--no-optimum", "--out-dir", str(tmp_path)]
    assert replay.sweep_main(common) == 0
    table = capsys.readouterr().out.split("\n\n")[1].splitlines()
    header, rows = table[0], table[2:]
    assert "record LRU" not in header and "optimum" not in header and "hit rate (lru)" in header
    assert rows and all(cell != "-" for row in rows for cell in row.split())
    assert replay.sweep_main([*common, "--policy", "lru-trim", "--name", "trim"]) == 0
    table = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert "record LRU" in table[0] and "hit rate (lru-trim)" in table[0]
    assert all(row.split()[3].endswith("%") for row in table[2:])
    with open(tmp_path / "trim.csv", newline="") as f:
        assert all(row["lru_hit_rate"] != "" for row in csv.DictReader(f))
    assert (tmp_path / "trim.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_reach_is_interpolated_between_the_sampled_points() -> None:
    rows = [{"capacity_tokens": 100, "hit_rate": 0.10}, {"capacity_tokens": 1000, "hit_rate": 0.30},
            {"capacity_tokens": 10000, "hit_rate": 0.50}]
    hit = replay.reaching(rows, 0.40)  # halfway from 0.30 to 0.50, in log capacity: sqrt(1000 * 10000)
    assert hit == {"sampled_tokens": 10000, "interpolated_tokens": 3162, "below_range": False,
                   "between": [1000, 10000]}
    assert replay.reaching(rows, 0.05) == {"sampled_tokens": 100, "interpolated_tokens": 100, "below_range": True,
                                           "between": None}
    assert replay.reaching(rows, 0.30)["interpolated_tokens"] == 1000  # exactly on a point
    assert replay.reaching(rows, 0.51) is None


# ---- figures ------------------------------------------------------------------------------------------------

def test_info_never_reports_a_negative_device_count(monkeypatch, capsys) -> None:
    assert cli.main(["info"]) == 0
    real = json.loads(capsys.readouterr().out)
    assert real["cuda_device_count"] >= 0
    assert (real["cuda_probe"] == "ok") == (real["cuda_device_count"] > 0)
    monkeypatch.setattr(ctxcache, "cuda_device_count", lambda: -35)  # the probe's error: no driver
    monkeypatch.setattr(ctxcache._ffi, "last_error", lambda: "ctxc_cuda_device_count: no driver")
    assert cli.main(["info"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["cuda_device_count"] == 0 and info["cuda_probe"] == "ctxc_cuda_device_count: no driver"


def test_requests_per_second_covers_the_replay_alone() -> None:
    settings = replay.Settings(bookkeeping_only=True)
    prepared = replay.Prepared([], [], 30.0, 0)
    m = replay.Measured("bookkeeping-only", 10, reused=[0] * 10, manager_seconds=2.0)
    r = replay.build_report(prepared, settings, m, workload="w", wall_seconds=100.0, bound_total=None,
                            bound_per_request=None, interrupted=False)
    assert r["replay_seconds"] == 2.0 and r["requests_per_second"] == 5.0 and r["wall_seconds"] == 100.0
    text = replay.format_report(r)
    assert "replay 2.00 s (the manager calls only): 5 requests/s" in text
    assert "wall time 100.00 s (adds reading the workload, hashing, the bound)" in text


def _progress_output(stream: io.TextIOBase, monkeypatch) -> None:
    """Drive a progress bar on ``stream`` with a clock that runs 10 s per reading (past the bar's 2 s delay)."""
    import tqdm.std

    clock = iter(range(0, 10**6, 10))
    monkeypatch.setattr(tqdm.std, "time", lambda: float(next(clock)))
    monkeypatch.setattr(sys, "stderr", stream)
    with replay._progress(5, "replay", True) as step:
        for _ in range(5):
            step(1)
    stream.flush()


def test_the_progress_bar_is_silent_when_stderr_is_a_pipe_and_shown_on_a_terminal(monkeypatch) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as pipe:
        _progress_output(pipe, monkeypatch)
    with os.fdopen(read_end) as f:
        assert f.read() == ""
    leader, follower = pty.openpty()
    # tqdm sizes a bar on sys.stderr by the terminal and hides it on a terminal of 0 rows (a new pty's size)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with os.fdopen(follower, "w") as terminal:
        _progress_output(terminal, monkeypatch)
        os.set_blocking(leader, False)
        try:
            shown = os.read(leader, 65536).decode()
        except BlockingIOError:  # nothing was written
            shown = ""
    os.close(leader)
    assert "replay" in shown and "\r" in shown


def test_a_reader_that_leaves_early_is_no_traceback() -> None:
    """`ctxcache info | head -0`: the pipe's reader is gone before the command writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "ctxcache.cli", "info"], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 128 + 13 and proc.stderr == "", proc.stderr
