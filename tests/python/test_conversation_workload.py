"""The seeded conversation workload (python/ctxcache/cli/workload.py: conversation_trace, `ctxcache workload`, `ctxcache
replay --workload conversations`): deterministic in its seed; every turn's prompt is the previous turn's prompt,
then its output, then a new question, token for token; the system prompts are shared in whole blocks; the file
`ctxcache workload --out` writes is a Mooncake JSONL trace that `ctxcache replay FILE --bookkeeping-only` replays
exactly as the built-in selection does; bad options are one line and exit 2."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from ctxcache import cli
from ctxcache.cli import replay, workload

SMALL = workload.ConversationSpec(conversations=12, turns=6, question_tokens=100, output_tokens=150,
                                  system_prompt_tokens=1200, system_prompts=2, concurrent=4, seed=7)


def _run(capsys, main, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _by_conversation(trace):
    turns = defaultdict(list)
    for r in trace:
        _, c, _, t = r.source.split()
        turns[int(c)].append((int(t), r))
    for c in turns.values():
        assert [t for t, _ in c] == list(range(len(c)))  # each conversation's turns arrive in order
    return {c: [r for _, r in v] for c, v in turns.items()}


def test_the_same_seed_gives_the_same_trace_and_another_seed_another():
    a, b = workload.conversation_trace(SMALL), workload.conversation_trace(SMALL)
    assert a == b
    other = workload.conversation_trace(dataclasses.replace(SMALL, seed=8))
    assert [(r.input_length, r.hash_ids) for r in other] != [(r.input_length, r.hash_ids) for r in a]
    assert len(a) == SMALL.conversations * SMALL.turns
    assert [r.timestamp for r in a] == sorted(r.timestamp for r in a)


def test_each_turn_extends_the_previous_prompt_and_its_output_with_a_question():
    trace = workload.conversation_trace(SMALL)
    conversations = _by_conversation(trace)
    assert len(conversations) == SMALL.conversations
    q = SMALL.question_tokens
    for turns in conversations.values():
        assert len(turns) == SMALL.turns
        for prev, cur in zip(turns, turns[1:]):
            question = cur.input_length - prev.input_length - prev.output_length
            assert -(-q // 2) <= question <= q + q // 2
            assert cur.hash_ids[:len(prev.hash_ids)] == prev.hash_ids
            tokens = workload.expand_tokens(cur.hash_ids, cur.input_length)
            assert np.array_equal(tokens[:prev.input_length], workload.expand_tokens(prev.hash_ids, prev.input_length))
            assert len(cur.hash_ids) == -(-cur.input_length // workload.TRACE_BLOCK)
        for r in turns:
            o = SMALL.output_tokens
            assert -(-o // 2) <= r.output_length <= o + o // 2


def test_conversations_share_system_prompts_in_whole_blocks_and_nothing_else():
    trace = workload.conversation_trace(SMALL)
    firsts = [turns[0] for turns in _by_conversation(trace).values()]
    owners = defaultdict(set)
    for c, turns in _by_conversation(trace).items():
        for r in turns:
            for h in r.hash_ids:
                owners[h].add(c)
    shared = {h for h, cs in owners.items() if len(cs) > 1}
    assert shared  # 12 conversations over 2 system prompts of about 1200 tokens: at least one shared block
    for r in firsts:  # a shared block is one of the system prompt's whole blocks, never past it
        for i, h in enumerate(r.hash_ids):
            if h in shared:
                assert (i + 1) * workload.TRACE_BLOCK <= SMALL.system_prompt_tokens * 3 // 2
                assert all(g in shared for g in r.hash_ids[:i])


def test_workload_out_writes_a_trace_that_replay_reads_as_the_built_in_selection(tmp_path, capsys):
    path = tmp_path / "conv.jsonl"
    options = ["--conversations", "10", "--turns", "5", "--question-tokens", "80", "--output-tokens", "120",
               "--system-prompt-tokens", "1100", "--concurrent", "3", "--seed", "4"]
    code, out, err = _run(capsys, cli.main, ["workload", "--out", str(path), *options])
    assert code == 0 and err == "" and out.startswith(f"wrote {path}: 50 requests")
    lines = path.read_text().splitlines()
    assert len(lines) == 50
    for line in lines:  # the Mooncake fields, nothing else
        obj = json.loads(line)
        assert sorted(obj) == ["hash_ids", "input_length", "output_length", "timestamp"]
        assert len(obj["hash_ids"]) * 512 >= obj["input_length"] > (len(obj["hash_ids"]) - 1) * 512
    read = workload.read_trace(path)
    spec = workload.ConversationSpec(conversations=10, turns=5, question_tokens=80, output_tokens=120,
                                     system_prompt_tokens=1100, concurrent=3, seed=4)
    generated = workload.conversation_trace(spec)
    assert [(r.timestamp, r.input_length, r.output_length, r.hash_ids) for r in read] == \
        [(r.timestamp, r.input_length, r.output_length, r.hash_ids) for r in generated]

    common = ["--bookkeeping-only", "--json", "--no-progress", "--no-optimum", "--mode", "spec"]
    code, out, _ = _run(capsys, replay.replay_main, [str(path), *common])
    assert code == 0
    from_file = json.loads(out)
    code, out, _ = _run(capsys, replay.replay_main, ["--workload", "conversations", *options, *common])
    assert code == 0
    built_in = json.loads(out)
    assert from_file["requests"] == built_in["requests"] == 50
    assert built_in["workload"].startswith("conversation workload (10 conversations x 5 turns, seed 4)")
    for key in ("prompt_tokens", "reused_tokens", "hit_rate", "upper_bound_reused_tokens", "evicted_records",
                "capacity_pages", "distinct_prompt_tokens"):
        assert from_file[key] == built_in[key], key
    assert built_in["reused_tokens"] > 0 and built_in["evicted_records"] > 0  # reuse, under eviction


def test_the_workload_command_from_a_shell(tmp_path):
    path = tmp_path / "conv.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ctxcache.cli", "workload", "--out", str(path), "--conversations",
                           "3", "--turns", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(workload.read_trace(path)) == 6
    proc = subprocess.run([sys.executable, "-m", "ctxcache.cli", "workload", "--out", "-", "--conversations", "2",
                           "--turns", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 4


@pytest.mark.parametrize("argv, words", [
    (["--turns", "0"], "--turns must be an integer in [1,"),
    (["--conversations", "-3"], "--conversations must be an integer in [1,"),
    (["--question-tokens", "0"], "--question-tokens must be an integer in [1,"),
    (["--seed", "-1"], "--seed must be an integer in [0,"),
    (["--seed", str(2**64)], "--seed must be an integer in [0,"),
    (["--turns", "2147483648"], "--turns must be an integer in [1,"),
    (["--conversations", "100000", "--turns", "11"], "more than 1,000,000"),
    (["--conversations", "1", "--turns", "100000", "--output-tokens", "1000"], "last prompt could reach"),
    (["--conversations", "100000", "--turns", "10", "--question-tokens", "10000"], "hash ids, more than"),
])
def test_bad_workload_options_are_one_line_and_exit_2(tmp_path, capsys, argv, words):
    code, out, err = _run(capsys, workload.workload_main, ["--out", str(tmp_path / "x.jsonl"), *argv])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("ctxcache workload: error: ") and words in err
    assert not (tmp_path / "x.jsonl").exists()


def test_an_unwritable_out_is_one_line_and_exit_2(tmp_path, capsys):
    code, _, err = _run(capsys, workload.workload_main, ["--out", str(tmp_path / "no" / "such" / "x.jsonl"),
                                                         "--conversations", "2", "--turns", "2"])
    assert code == 2 and err.count("\n") == 1 and "--out" in err


@pytest.mark.parametrize("argv, words", [
    (["--turns", "5"], "--turns needs --workload conversations"),
    (["--workload", "builtin", "--conversations", "5"], "--conversations needs --workload conversations"),
    (["--workload", "conversations", "--turns", "0"], "--turns must be an integer in [1,"),
    (["--workload", "conversations", "--page-size", "48"], "must divide 512"),
])
def test_replay_refuses_conversation_options_it_cannot_use(capsys, argv, words):
    code, _, err = _run(capsys, replay.replay_main, [*argv, "--bookkeeping-only", "--no-progress"])
    assert code == 2 and err.count("\n") == 1 and words in err


def test_replay_refuses_a_trace_with_workload(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    workload.write_trace(workload.conversation_trace(SMALL), path)
    code, _, err = _run(capsys, replay.replay_main, [str(path), "--workload", "conversations", "--bookkeeping-only"])
    assert code == 2 and "exclude each other" in err


def test_sweep_takes_the_conversation_workload(tmp_path, capsys):
    code, out, _ = _run(capsys, replay.sweep_main, ["--workload", "conversations", "--conversations", "6",
                                                    "--turns", "3", "--points", "8", "--out-dir", str(tmp_path),
                                                    "--json", "--no-progress", "--no-optimum"])
    assert code == 0
    r = json.loads(out)
    assert r["requests"] == 18 and r["workload"].startswith("conversation workload (6 conversations x 3 turns")
