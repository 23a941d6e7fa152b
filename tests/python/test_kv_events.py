"""KV events (docs/EVENTS.md): the drained stream, the msgpack encoding decoded with a schema (msgspec Structs
shaped like vLLM's KVEventBatch), the ZMQ publisher's 3-frame batches and replay decoded from a real pyzmq
subscriber, a stalled subscriber that changes no cache result, and vLLM's own decoder where a vLLM venv exists."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import zmq

import ctxcache
from ctxcache import AllBlocksCleared, BlockRemoved, BlockStored, ResourceDemand

PAGE = 4


# ---- the schema: vLLM's wire types (vllm/distributed/kv_events.py), written here from the format ----------------

class MapEvent(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    pass


class MapBlockStored(MapEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class MapBlockRemoved(MapEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class MapAllBlocksCleared(MapEvent, tag="AllBlocksCleared"):
    pass


class MapBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[MapBlockStored | MapBlockRemoved | MapAllBlocksCleared]
    data_parallel_rank: int | None = None


class ArrayEvent(msgspec.Struct, tag=True, array_like=True, omit_defaults=True, gc=False):
    pass


class ArrayBlockStored(ArrayEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class ArrayBlockRemoved(ArrayEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class ArrayAllBlocksCleared(ArrayEvent, tag="AllBlocksCleared"):
    pass


class ArrayBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[ArrayBlockStored | ArrayBlockRemoved | ArrayAllBlocksCleared]
    data_parallel_rank: int | None = None


MAP_DECODER = msgspec.msgpack.Decoder(MapBatch)
ARRAY_DECODER = msgspec.msgpack.Decoder(ArrayBatch)


def as_events(batch: Any) -> list[ctxcache.events.KvEvent]:
    """A decoded wire batch as the drain's dataclasses (medium checked separately)."""
    out: list[ctxcache.events.KvEvent] = []
    for e in batch.events:
        name = type(e).__name__
        if name.endswith("BlockStored"):
            assert (e.lora_id, e.lora_name) == (None, None)
            out.append(BlockStored(e.block_hashes, e.parent_block_hash, e.token_ids, e.block_size))
        elif name.endswith("BlockRemoved"):
            out.append(BlockRemoved(e.block_hashes))
        else:
            out.append(AllBlocksCleared())
    return out


# ---- a scripted sequence and the events its index changes imply --------------------------------------------------

def low64(hashes: np.ndarray) -> list[int]:
    return [int(lo) for lo in hashes[:, 1]]


class Scenario:
    """publish A (3 blocks), publish A again, publish B (shares 2 blocks), evict A, capacity eviction by C, clear."""

    def __init__(self) -> None:
        self.a_tokens = list(range(100, 114))  # 3 full blocks + a tail
        self.b_tokens = list(range(100, 108)) + [500, 501, 502, 503]
        self.c_tokens = list(range(900, 924))  # 6 blocks: every page
        self.a = ctxcache.hash_full_blocks(np.array(self.a_tokens, dtype=np.int32), PAGE)
        self.b = ctxcache.hash_full_blocks(np.array(self.b_tokens, dtype=np.int32), PAGE)
        self.c = ctxcache.hash_full_blocks(np.array(self.c_tokens, dtype=np.int32), PAGE)

    def steps(self) -> list[str]:
        return ["publish A", "publish A again", "publish B", "evict A", "publish C", "clear"]

    def run(self, manager: ctxcache.ContextCacheManager, after_step: Any = None) -> None:
        def publish(hashes: np.ndarray, tokens: list[int]) -> None:
            result = manager.acquire_vanilla(hashes, len(tokens))
            with result.lease as lease:
                manager.publish(lease, hashes, len(tokens), tokens=tokens)

        actions = [
            lambda: publish(self.a, self.a_tokens),
            lambda: publish(self.a, self.a_tokens),
            lambda: publish(self.b, self.b_tokens),
            lambda: manager.evict_record(manager.records.lru()[0]),
            lambda: publish(self.c, self.c_tokens),
            manager.clear,
        ]
        for name, action in zip(self.steps(), actions):
            action()
            manager.check_invariants()
            if after_step:
                after_step(name)

    def expected(self) -> dict[str, list[list[ctxcache.events.KvEvent]]]:
        """Per step, its batches (one per manager call that changed the index), each a list of events."""
        a, b, c = low64(self.a), low64(self.b), low64(self.c)
        assert a[:2] == b[:2] and a[2] != b[2]
        return {
            "enable": [[AllBlocksCleared()]],
            "publish A": [[BlockStored(a, None, self.a_tokens[:12], PAGE)]],
            "publish A again": [],
            "publish B": [[BlockStored([b[2]], a[1], self.b_tokens[8:12], PAGE)]],
            "evict A": [[BlockRemoved([a[2]])]],
            # the acquire evicts B (leaf-first), then the publication stores C
            "publish C": [[BlockRemoved([b[2], b[1], b[0]])], [BlockStored(c, None, self.c_tokens, PAGE)]],
            "clear": [[AllBlocksCleared()]],
        }


def flat(batches: list[list[Any]]) -> list[Any]:
    return [event for batch in batches for event in batch]


def new_manager() -> ctxcache.ContextCacheManager:
    return ctxcache.ContextCacheManager(PAGE, ResourceDemand(base_kv_pages=6), 8)


def test_drain_reports_exactly_the_index_changes_of_the_scripted_sequence() -> None:
    scenario = Scenario()
    expected = scenario.expected()
    with new_manager() as manager:
        manager.enable_kv_events()
        assert manager.drain_kv_events() == flat(expected["enable"])
        seen: dict[str, list[Any]] = {}
        scenario.run(manager, lambda step: seen.__setitem__(step, manager.drain_kv_events()))
        assert seen == {step: flat(expected[step]) for step in scenario.steps()}
        assert len(manager.base_index) == 0
        assert manager.kv_event_status == ctxcache.KvEventStatus(True, 0, 0)


def test_events_need_tokens_and_an_empty_index() -> None:
    scenario = Scenario()
    with new_manager() as manager:
        manager.enable_kv_events()
        manager.drain_kv_events()
        with manager.acquire_vanilla(scenario.a, 14).lease as lease:
            with pytest.raises(ctxcache.ContractError, match="tokens"):
                manager.publish(lease, scenario.a, 14)
            with pytest.raises(ctxcache.ContractError, match="tokens"):
                manager.publish(lease, scenario.a, 14, tokens=scenario.a_tokens[:11])
            assert len(manager.records) == 0
        assert manager.drain_kv_events() == []
        with pytest.raises(ctxcache.ContractError, match="already enabled"):
            manager.enable_kv_events()
        manager.disable_kv_events()
        with manager.acquire_vanilla(scenario.a, 14).lease as lease:
            manager.publish(lease, scenario.a, 14)  # no events: no tokens needed
        with pytest.raises(ctxcache.ContractError, match="before the first publication"):
            manager.enable_kv_events()
        manager.clear()


def test_pending_limit_turns_overflow_into_one_clear() -> None:
    scenario = Scenario()
    with new_manager() as manager:
        manager.enable_kv_events(max_pending_events=2)
        scenario.run(manager)
        status = manager.kv_event_status
        assert status.lost > 0 and status.pending <= 2
        events = manager.drain_kv_events()
        assert AllBlocksCleared() in events and len(events) <= 2


# ---- the encoding, decoded with the schema ---------------------------------------------------------------------

ALL_KINDS = [AllBlocksCleared(), BlockStored([1, 2**64 - 1], None, list(range(8)), 4),
             BlockStored([7], 2**63, [9, 9, 9, 9], 4), BlockRemoved([2**64 - 1, 1])]


@pytest.mark.skipif(not ctxcache.publisher_available(), reason="built without the ZMQ publisher (libzmq, msgpack)")
@pytest.mark.parametrize("array_encoding", [False, True])
def test_encoding_decodes_with_the_schema(array_encoding: bool) -> None:
    payload = ctxcache.encode_kv_events(ALL_KINDS, block_size=4, timestamp=1234.5, data_parallel_rank=3,
                                        medium="GPU", array_encoding=array_encoding)
    batch = (ARRAY_DECODER if array_encoding else MAP_DECODER).decode(payload)
    assert batch.ts == 1234.5 and batch.data_parallel_rank == 3
    assert as_events(batch) == ALL_KINDS
    assert [getattr(e, "medium", "GPU") for e in batch.events] == ["GPU"] * 4
    # The other decoder refuses it: a map consumer cannot read arrays, and the reverse.
    with pytest.raises(msgspec.ValidationError):
        (MAP_DECODER if array_encoding else ARRAY_DECODER).decode(payload)
    # Hashes are msgpack integers (a router drops byte-string hashes): the raw structure says so.
    raw = msgspec.msgpack.decode(payload)
    stored = raw[1][1]
    hashes = stored[1] if array_encoding else stored["block_hashes"]
    assert hashes == [1, 2**64 - 1] and all(isinstance(h, int) for h in hashes)
    nil_rank = msgspec.msgpack.decode(ctxcache.encode_kv_events([], block_size=4, timestamp=0.0))
    assert nil_rank == [0.0, [], None]


def test_publisher_is_unavailable_or_works() -> None:
    if ctxcache.publisher_available():
        endpoint = f"ipc://{tempfile.mkdtemp()}/p"
        with ctxcache.KvEventPublisher(endpoint) as publisher, new_manager() as manager:
            assert publisher.stats.accepted_batches == 0
            manager.enable_kv_events()
            manager.attach_kv_event_publisher(publisher)
            manager.clear()
            assert publisher.flush(5.0)
            last = publisher.stats.next_sequence - 1
            assert publisher.stats.accepted_batches == 2
        with pytest.raises(ctxcache.InvalidHandleError):
            publisher.stats
        # A restarted publisher on the same endpoint continues above the numbers a router has seen.
        with ctxcache.KvEventPublisher(endpoint) as restarted:
            assert restarted.stats.next_sequence > last
    else:
        with pytest.raises(ctxcache.UnsupportedError, match="built without"):
            ctxcache.KvEventPublisher("tcp://*:5557")


# ---- the ZMQ publisher, as a subscriber sees it -----------------------------------------------------------------

needs_publisher = pytest.mark.skipif(not ctxcache.publisher_available(),
                                     reason="built without the ZMQ publisher (libzmq, msgpack-cxx)")


def receive(sub: zmq.Socket, timeout: float = 5.0) -> list[list[bytes]] | None:
    if not sub.poll(int(timeout * 1000)):
        return None
    return sub.recv_multipart()


def replay(endpoint: str, start: int) -> list[list[bytes]]:
    """A late joiner's DEALER: every buffered batch from `start`, then the end marker."""
    context = zmq.Context.instance()
    with context.socket(zmq.DEALER) as dealer:
        dealer.connect(endpoint)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            assert dealer.poll(5000), "no replay answer"
            frames = dealer.recv_multipart()
            assert frames[0] == b""
            if frames[1] == b"" and int.from_bytes(frames[2], "big", signed=True) == -1:
                assert frames[3] == b""
                return out
            out.append(frames[1:])


@needs_publisher
@pytest.mark.parametrize("array_encoding", [False, True])
def test_published_batches_decode_to_the_scripted_events_and_replay(array_encoding: bool) -> None:
    scenario = Scenario()
    expected = scenario.expected()
    folder = tempfile.mkdtemp()
    endpoint, replay_endpoint = f"ipc://{folder}/events", f"ipc://{folder}/replay"
    decoder = ARRAY_DECODER if array_encoding else MAP_DECODER
    context = zmq.Context.instance()
    with context.socket(zmq.SUB) as sub, new_manager() as manager, \
            ctxcache.KvEventPublisher(endpoint, replay_endpoint=replay_endpoint, topic="kv@pod-1@model",
                                      data_parallel_rank=2, array_encoding=array_encoding,
                                      medium="GPU") as publisher:
        first = publisher.stats.next_sequence
        assert abs(first / 1e6 - time.time()) < 60  # wall-clock microseconds: above any earlier run's numbers
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        sub.connect(endpoint + "_dp2")  # vLLM's rule: rank r suffixes an ipc path (a tcp port moves up by r)
        time.sleep(0.3)  # the subscription reaches the PUB (a slow joiner misses earlier batches)
        manager.enable_kv_events()
        manager.attach_kv_event_publisher(publisher)
        batches: dict[str, list[list[bytes]]] = {}
        names = ["enable"] + scenario.steps()

        def take(step: str) -> None:
            assert publisher.flush(5.0)
            batches[step] = []
            for _ in expected[step]:
                frames = receive(sub)
                assert frames is not None, f"no batch after {step}"
                batches[step].append(frames)
            assert receive(sub, 0.05) is None  # one batch per call, none for a call without index changes

        take("enable")
        scenario.run(manager, take)
        assert manager.drain_kv_events() == []  # the publisher took everything

        sequences = []
        live = [frames for step in names for frames in batches[step]]
        for step in names:
            for (topic, sequence, payload), events in zip(batches[step], expected[step]):
                assert topic == b"kv@pod-1@model"
                sequences.append(int.from_bytes(sequence, "big"))
                batch = decoder.decode(payload)
                assert batch.data_parallel_rank == 2
                assert as_events(batch) == events, step
        assert sequences == list(range(first, first + len(sequences)))
        stats = publisher.stats
        assert (stats.accepted_batches, stats.sent_batches, stats.dropped_batches) == (len(sequences),) * 2 + (0,)

        # A late joiner asks for everything from the third batch: the same frames, then the end marker.
        replayed = replay(replay_endpoint + "_dp2", first + 2)
        assert replayed == live[2:]
        assert replay(replay_endpoint + "_dp2", first + 100) == []
        assert publisher.stats.replay_requests == 2


@needs_publisher
def test_a_stalled_subscriber_changes_no_cache_result() -> None:
    """A subscriber that never reads (tiny high-water marks) and a two-batch queue: the manager with the publisher
    gives every result the manager without events gives, and the publisher only counts what it drops."""
    rng = np.random.default_rng(7)
    folder = tempfile.mkdtemp()
    endpoint = f"ipc://{folder}/stalled"
    context = zmq.Context.instance()
    with context.socket(zmq.SUB) as stalled, \
            ctxcache.KvEventPublisher(endpoint, max_queued_batches=2, send_high_water_mark=1,
                                      buffer_steps=0) as publisher, \
            new_manager() as quiet, new_manager() as loud:
        stalled.setsockopt(zmq.RCVHWM, 1)
        stalled.setsockopt(zmq.SUBSCRIBE, b"")
        stalled.connect(endpoint)
        loud.enable_kv_events()
        loud.attach_kv_event_publisher(publisher)
        started = time.perf_counter()
        for step in range(300):
            tokens = [int(t) for t in rng.integers(0, 4, size=int(rng.integers(4, 20)))]
            hashes = ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), PAGE)
            results = []
            for manager in (quiet, loud):
                acquired = manager.acquire_vanilla(hashes, len(tokens))
                assert acquired.lease is not None
                with acquired.lease as lease:
                    published = manager.publish(lease, hashes, len(tokens), tokens=tokens)
                    results.append((acquired.plan.reuse_token_length, list(lease.base_pages), published))
                if step % 37 == 36:
                    manager.clear()
                results.append((manager.records.lru(), len(manager.base_index)))
            assert results[:2] == results[2:], step
        elapsed = time.perf_counter() - started
        loud.check_invariants()
        publisher.flush(5.0)
        stats = publisher.stats
        assert stats.accepted_batches > 300
        assert stats.sent_batches + stats.dropped_batches == stats.accepted_batches
        assert elapsed < 30


# ---- vLLM's own decoder, where a vLLM environment exists ---------------------------------------------------------

def _vllm_python() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    candidates = [os.environ.get("CTXCACHE_VLLM_VENV"), root / "build-peers" / "venv-vllm"]
    for venv in candidates:
        if venv and (Path(venv) / "bin" / "python").exists():
            return Path(venv) / "bin" / "python"
    return None


def vllm_python() -> Path:
    """The vLLM environment's python, or a skip with the reason; a failure instead under CTXCACHE_REQUIRE_VLLM=1
    (tools/test builds the environment and sets it)."""
    python = _vllm_python()
    if python is None:
        why = "no vLLM environment (CTXCACHE_VLLM_VENV or build-peers/venv-vllm: tools/bench_peers --venv-only)"
        if os.environ.get("CTXCACHE_REQUIRE_VLLM") == "1":
            pytest.fail(f"CTXCACHE_REQUIRE_VLLM=1 but {why}")
        pytest.skip(why)
    return python


_VLLM_DECODE = """
import sys, msgspec
from vllm.distributed.kv_events import KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared
batch = msgspec.msgpack.Decoder(type=KVEventBatch).decode(sys.stdin.buffer.read())
out = []
for e in batch.events:
    if isinstance(e, BlockStored):
        out.append(["stored", list(e.block_hashes), e.parent_block_hash, list(e.token_ids), e.block_size, e.medium])
    elif isinstance(e, BlockRemoved):
        out.append(["removed", list(e.block_hashes), e.medium])
    else:
        assert isinstance(e, AllBlocksCleared)
        out.append(["cleared"])
print(msgspec.json.encode([batch.data_parallel_rank, out]).decode())
"""


@needs_publisher
def test_vllm_kv_event_batch_decoder_reads_our_batches() -> None:
    python = vllm_python()
    payload = ctxcache.encode_kv_events(ALL_KINDS, block_size=4, timestamp=1.0, data_parallel_rank=0)
    done = subprocess.run([str(python), "-c", _VLLM_DECODE], input=payload, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    rank, events = msgspec.json.decode(done.stdout)
    assert rank == 0
    assert events == [["cleared"], ["stored", [1, 2**64 - 1], None, list(range(8)), 4, "GPU"],
                      ["stored", [7], 2**63, [9, 9, 9, 9], 4, "GPU"], ["removed", [2**64 - 1, 1], "GPU"]]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


# ---- ctxcache replay --events ----------------------------------------------------------------------------------

@needs_publisher
@pytest.mark.parametrize("engine", ["--bookkeeping-only", "--verify"])
def test_replay_publishes_its_events(engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from ctxcache.cli import replay

    endpoint = f"ipc://{tempfile.mkdtemp()}/replay-events"
    context = zmq.Context.instance()
    with context.socket(zmq.SUB) as sub:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(endpoint)  # before the publisher binds: ZMQ connects once it does
        code = replay.replay_main(["--limit", "24", "--page-size", "16", engine, "--json", "--no-progress",
                                   "--no-optimum", "--events", endpoint, "--events-topic", "kv@replay@toy"])
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        received = []
        while (frames := receive(sub, 1.0)) is not None:
            received.append(frames)
    ev = report["kv_events"]
    assert ev["batches"] > 0 and ev["handed_to_zmq"] == ev["batches"] and ev["dropped"] == 0
    # The subscriber was listening before the replay began: the replay waited for its subscription (ZMQ's slow
    # joiner loses what is sent before it arrives), so every batch arrived, in order, and decodes.
    assert ev["subscribed"] is True and ev["subscriptions"] >= 1 and ev["waited_seconds"] < 5
    assert len(received) == ev["batches"]
    sequences = [int.from_bytes(f[1], "big") for f in received]
    assert sequences == list(range(sequences[0], sequences[0] + len(sequences)))
    stored = 0
    for topic, _, payload in received:
        assert topic == b"kv@replay@toy"
        for event in MAP_DECODER.decode(payload).events:
            if isinstance(event, MapBlockStored):
                assert event.block_size == 16 and len(event.token_ids) == 16 * len(event.block_hashes)
                stored += len(event.block_hashes)
    assert stored > 0


def publish_prompts(manager: ctxcache.ContextCacheManager, count: int) -> None:
    for i in range(count):
        tokens = list(range(100 * i, 100 * i + 8))
        hashes = ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), 4)
        with manager.acquire_vanilla(hashes, len(tokens)).lease as lease:
            manager.publish(lease, hashes, len(tokens), tokens=tokens)


@needs_publisher
def test_held_batches_wait_for_the_first_subscriber() -> None:
    """wait_for_subscriber: every batch is held (none sent, the cache never waits) until a subscriber's subscription
    arrives; then all of them reach it, in order, with no gap."""
    endpoint = f"ipc://{tempfile.mkdtemp()}/held"
    context = zmq.Context.instance()
    with new_manager() as manager, ctxcache.KvEventPublisher(endpoint, wait_for_subscriber=30.0) as publisher:
        manager.enable_kv_events()
        manager.attach_kv_event_publisher(publisher)
        publish_prompts(manager, 3)  # AllBlocksCleared, then three stores: four batches
        assert not publisher.flush(0.3)  # held, not sent
        stats = publisher.stats
        assert (stats.accepted_batches, stats.sent_batches, stats.queued_batches, stats.holding) == (4, 0, 4, True)
        assert stats.subscriptions == 0 and not publisher.wait_for_subscriber(0.05)
        with context.socket(zmq.SUB) as sub:
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(endpoint)
            assert publisher.wait_for_subscriber(5.0)
            received = [receive(sub) for _ in range(4)]
            assert receive(sub, 0.1) is None
        first = stats.next_sequence - 4
        assert [int.from_bytes(f[1], "big") for f in received if f] == [first, first + 1, first + 2, first + 3]
        stats = publisher.stats
        assert (stats.sent_batches, stats.holding, stats.subscriptions) == (4, False, 1)


@needs_publisher
def test_the_hold_ends_at_its_deadline_or_at_close() -> None:
    with new_manager() as manager, ctxcache.KvEventPublisher(f"ipc://{tempfile.mkdtemp()}/deadline",
                                                             wait_for_subscriber=0.3) as publisher:
        manager.enable_kv_events()
        manager.attach_kv_event_publisher(publisher)
        publish_prompts(manager, 1)
        assert publisher.flush(5.0)  # nobody came: after 0.3 s the batches go out as usual
        assert (publisher.stats.sent_batches, publisher.stats.holding) == (2, False)
    publisher = ctxcache.KvEventPublisher(f"ipc://{tempfile.mkdtemp()}/close", wait_for_subscriber=600.0)
    with new_manager() as manager:
        manager.enable_kv_events()
        manager.attach_kv_event_publisher(publisher)
        publish_prompts(manager, 2)
        assert publisher.stats.holding
        started = time.monotonic()
        publisher.close()  # ends the wait at once: what is held is sent to whoever is subscribed
        assert time.monotonic() - started < 2.0
        with pytest.raises(ctxcache.InvalidHandleError):
            publisher.stats
    lingering = ctxcache.KvEventPublisher(f"ipc://{tempfile.mkdtemp()}/held-linger", wait_for_subscriber=600.0,
                                          replay_endpoint=f"ipc://{tempfile.mkdtemp()}/r", linger=30.0)
    started = time.monotonic()
    lingering.close()  # still holding: nobody subscribed, so there is nobody to linger for
    assert time.monotonic() - started < 2.0


@needs_publisher
def test_linger_keeps_the_replay_socket_serving_after_the_last_batch() -> None:
    folder = tempfile.mkdtemp()
    replay_endpoint = f"ipc://{folder}/replay"
    publisher = ctxcache.KvEventPublisher(f"ipc://{folder}/live", replay_endpoint=replay_endpoint, linger=1.5)
    with new_manager() as manager:
        manager.enable_kv_events()
        manager.attach_kv_event_publisher(publisher)
        publish_prompts(manager, 2)
        first = publisher.stats.next_sequence - 3
        assert publisher.flush(5.0)
        replayed: list[list[list[bytes]]] = []
        asker = threading.Thread(target=lambda: (time.sleep(0.5), replayed.append(replay(replay_endpoint, first))))
        asker.start()
        started = time.monotonic()
        publisher.close()  # the router noticed a gap after the last batch: the linger still answers it
        took = time.monotonic() - started
        asker.join()
    assert 1.2 < took < 4.0
    assert [int.from_bytes(frames[1], "big") for frames in replayed[0]] == [first, first + 1, first + 2]


def test_bad_wait_and_linger_are_refused() -> None:
    for name in ("wait_for_subscriber", "linger"):
        with pytest.raises(ctxcache.ArgumentTypeError, match=name):
            ctxcache.KvEventPublisher("inproc://x", **{name: True})
        for bad in (-1.0, float("nan"), float("inf"), 3e6):
            with pytest.raises(ctxcache.InvalidArgumentError, match=name):
                ctxcache.KvEventPublisher("inproc://x", **{name: bad})
    if ctxcache.publisher_available():
        with ctxcache.KvEventPublisher(f"ipc://{tempfile.mkdtemp()}/w") as publisher:
            with pytest.raises(ctxcache.InvalidArgumentError, match="timeout"):
                publisher.wait_for_subscriber(-1)


def test_replay_refuses_bad_event_waits(capsys: pytest.CaptureFixture[str]) -> None:
    from ctxcache.cli import replay

    for option, value in (("--events-wait", "-1"), ("--events-linger", "nan"), ("--events-wait", "soon")):
        with pytest.raises(SystemExit) as exit_info:
            replay.replay_main(["--limit", "2", "--events", "ipc:///tmp/x", option, value])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and option in err and "number of seconds from 0 to 3600" in err


# ---- bad input: a typed error, nothing changed ----------------------------------------------------------------

def test_bad_event_calls_are_refused_and_change_nothing() -> None:
    from ctxcache._ffi import ffi, lib

    scenario = Scenario()
    with new_manager() as manager:
        manager.enable_kv_events()
        # Not a cache: a NULL handle, a lease handle, a closed manager.
        for handle in (ffi.NULL,):
            with pytest.raises(ctxcache.InvalidHandleError, match="not a live ctxc_manager_t"):
                ctxcache._ffi.check(lib.ctxc_kv_events_enable(handle, 0))
        with manager.acquire_vanilla(scenario.a, 14).lease as lease:
            with pytest.raises(ctxcache.InvalidHandleError):
                ctxcache._ffi.check(lib.ctxc_kv_events_drain(lease._live_handle(), ffi.new("const ctxc_kv_event_t **"),
                                                             ffi.new("size_t *"), ffi.NULL))
            with pytest.raises(ctxcache.InvalidArgumentError, match="out_events"):
                ctxcache._ffi.check(lib.ctxc_kv_events_drain(manager._live(), ffi.NULL, ffi.new("size_t *"),
                                                             ffi.NULL))
            with pytest.raises(ctxcache.InvalidArgumentError, match="tokens is NULL"):
                ctxcache._ffi.check(lib.ctxc_manager_publish_with_tokens(
                    manager._live(), lease._live_handle(), ctxcache._arrays.hash_pointer(scenario.a), 3, 14, ffi.NULL,
                    12, ffi.NULL, ctxcache._ffi.new_output("ctxc_publish_result_t")))
        assert manager.drain_kv_events() == [AllBlocksCleared()]  # nothing was published or lost
        with pytest.raises(ctxcache.ArgumentTypeError, match="KvEventPublisher"):
            manager.attach_kv_event_publisher("tcp://*:5557")  # type: ignore[arg-type]
        with pytest.raises(ctxcache.ArgumentTypeError, match="token_ids"):
            ctxcache.encode_kv_events([BlockStored([1], None, [1.5], 4)], block_size=4, timestamp=0.0)  # type: ignore[list-item]
        with pytest.raises(ctxcache.ArgumentTypeError, match="not a KV event"):
            ctxcache.encode_kv_events(["BlockStored"], block_size=4, timestamp=0.0)  # type: ignore[list-item]
    with pytest.raises(ctxcache.InvalidHandleError):
        manager.drain_kv_events()


@needs_publisher
def test_bad_publisher_options_are_refused() -> None:
    with pytest.raises(ctxcache.InvalidArgumentError, match="endpoint"):
        ctxcache.KvEventPublisher("")
    with pytest.raises(ctxcache.InvalidArgumentError, match="max_queued_batches"):
        ctxcache.KvEventPublisher("inproc://x", max_queued_batches=0)
    with pytest.raises(ctxcache.ContractError, match="cannot bind"):
        ctxcache.KvEventPublisher("tcp://*:not-a-port")
    with pytest.raises(ctxcache.ContractError, match="cannot offset"):
        ctxcache.KvEventPublisher("tcp://host-without-port", data_parallel_rank=1)
    with pytest.raises(ctxcache.InvalidArgumentError, match="data_parallel_rank"):
        ctxcache.KvEventPublisher("inproc://x", data_parallel_rank=-1)
    import socket

    with socket.socket() as probe:  # a free port; the publisher binds it on every interface, as vLLM's default does
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = f"tcp://*:{port}"
    with ctxcache.KvEventPublisher(endpoint):
        with pytest.raises(ctxcache.ContractError, match="Address already in use"):
            ctxcache.KvEventPublisher(endpoint)
    with new_manager() as manager:
        with pytest.raises(ctxcache.ContractError, match="not enabled"):
            with ctxcache.KvEventPublisher(f"ipc://{tempfile.mkdtemp()}/p") as publisher:
                manager.attach_kv_event_publisher(publisher)


# ---- the runtime publishes with its own tokens ------------------------------------------------------------------

def replay_stream(events: list[ctxcache.events.KvEvent], page: int) -> set[int]:
    """Apply a stream the way a router does, checking what a router needs: a stored block's parent is known and the
    block is new, every block carries its page of tokens, a removed block is known. Returns the live blocks."""
    live: set[int] = set()
    for event in events:
        if isinstance(event, AllBlocksCleared):
            live.clear()
        elif isinstance(event, BlockStored):
            assert event.block_size == page and len(event.token_ids) == page * len(event.block_hashes)
            assert event.parent_block_hash is None or event.parent_block_hash in live, event
            for h in event.block_hashes:
                assert h not in live, event
                live.add(h)
        else:
            for h in event.block_hashes:
                assert h in live, event
                live.remove(h)
    return live


@pytest.mark.parametrize("deployment, speculative", [("attention", None), ("eagle", None), ("hybrid", None),
                                                     ("hybrid", "mtp")])
def test_the_runtime_stream_describes_the_index(deployment: str, speculative: str | None) -> None:
    """Multi-turn conversations through the reference engine (real runtime, small pool: evictions) with events
    on: replayed as a router does, the stream is consistent and names exactly as many blocks as the cache holds;
    a prompt's first stored block is the hash of its first page of tokens."""
    from ctxcache import sim

    rng = np.random.default_rng(3)
    with sim.ReferenceEngine(deployment, speculative=speculative, page_size=PAGE, base_pages=24,
                             max_pages_per_sequence=24, snapshot_slots=16) as engine:
        engine.enable_kv_events()
        events: list[ctxcache.events.KvEvent] = []
        histories = [np.arange(i * 1000, i * 1000 + 9, dtype=np.int32) for i in range(6)]
        for _ in range(4):
            for i in rng.permutation(len(histories)):
                prompt = np.concatenate([histories[i], rng.integers(0, 50, size=3, dtype=np.int32)])
                out = engine.serve([sim.Request(tokens=prompt, max_new_tokens=3)])[0]
                histories[i] = np.concatenate([prompt, out.generated])
                events += engine.drain_kv_events()
        engine.check_invariants()
        metrics = engine.metrics
        live = replay_stream(events, PAGE)
        assert len(live) == metrics.base_kv_pages.capacity - metrics.base_kv_pages.free
        assert any(isinstance(e, BlockRemoved) for e in events)
        roots = [e for e in events if isinstance(e, BlockStored) and e.parent_block_hash is None]
        assert roots
        for e in roots:
            expected = ctxcache.hash_full_blocks(np.array(e.token_ids[:PAGE], dtype=np.int32), PAGE)
            assert e.block_hashes[0] == int(expected[0, 1])


def test_replay_refuses_an_endpoint_it_cannot_use(capsys: pytest.CaptureFixture[str]) -> None:
    from ctxcache.cli import replay

    args = ["--limit", "4", "--bookkeeping-only", "--no-progress", "--no-optimum", "--events"]
    with pytest.raises(SystemExit) as exited:  # malformed: refused as the options are parsed
        replay.replay_main([*args, "tcp://*:not-a-port"])
    why = capsys.readouterr().err
    assert exited.value.code == 2 and "--events" in why and "port" in why
    # well-formed, but ZMQ cannot bind it (or the build has no publisher): refused as the replay starts
    code = replay.replay_main([*args, "ipc:///nonexistent-ctxcache-dir/events"])
    why = capsys.readouterr().err
    assert code == 2 and "--events" in why and ("cannot bind" in why or "built without" in why)
