"""Identity in KV events: a LoRA request's BlockStored carries its adapter as ``lora_name`` and in every block's
``extra_keys``; a multimodal request's blocks carry ``(media identifier, offset)`` for each item that overlaps them,
offset = the item's first token minus the block's first token (negative when the item began in an earlier block),
as vLLM 0.33 sends them. The runtime derives both from the request (its LoRA name, its media items' bytes: the
identifier is 64 hex digits, SHA-256 of the item's 128-bit identity); a manager's caller passes them as
``event_keys``. vLLM's own ``BlockPool`` emits the same values for the same prompts, and vLLM's own decoder reads
them from ctxcache's payloads. Dynamo keeping two adapters apart is in test_kv_events_dynamo.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

import ctxcache
from ctxcache import BlockStored, KvEventKeys, KvEventMedia, sim
from test_kv_events import vllm_python

PAGE = 4
PLACEHOLDER = 9
SCRIPT = Path(__file__).with_name("vllm_event_keys.py")


def identifier_of(data: bytes, modality: int = int(ctxcache.MediaModality.IMAGE)) -> str:
    """What ctxcache names a media item, computed here from the documented rule: SHA-256 of the item's 128-bit
    identity (hash_opaque_identity of its modality byte and bytes), lo then hi, little-endian."""
    hi, lo = (int(x) for x in ctxcache.hash_opaque_identity(bytes([modality]) + data))
    return hashlib.sha256(lo.to_bytes(8, "little") + hi.to_bytes(8, "little")).hexdigest()


def with_placeholders(n: int, spans: list[tuple[int, int]], base: int) -> list[int]:
    tokens = list(range(base, base + n))
    for first, count in spans:
        tokens[first:first + count] = [PLACEHOLDER] * count
    return tokens


# Each case: a prompt of 13 or 17 tokens (3 or 4 full blocks of 4), its adapter, its media (bytes, first, count).
CASES: dict[str, dict[str, Any]] = {
    "lora": {"tokens": list(range(100, 113)), "lora": "adapter-a", "media": []},
    # One image over tokens [2, 9): blocks 0, 1, 2 (offsets 2, -2, -6); block 3 has none.
    "image": {"tokens": with_placeholders(17, [(2, 7)], 200), "lora": None, "media": [(b"pixels", 2, 7)]},
    # An adapter and two images, [1, 3) and [3, 6): block 0 holds both, block 1 the second, block 2 neither.
    "both": {"tokens": with_placeholders(13, [(1, 2), (3, 3)], 300), "lora": "adapter-b",
             "media": [(b"first", 1, 2), (b"second", 3, 3)]},
}


def expected_extra_keys(case: dict[str, Any]) -> list[tuple | None] | None:
    """vLLM's per-block extra keys, from its rule: the adapter's name, then (identifier, offset) per overlapping
    item."""
    blocks = len(case["tokens"]) // PAGE
    out: list[tuple | None] = []
    for b in range(blocks):
        start, end = b * PAGE, (b + 1) * PAGE
        keys: list[Any] = [case["lora"]] if case["lora"] else []
        for data, first, count in case["media"]:
            if first < end and first + count > start:
                keys.append((identifier_of(data), first - start))
        out.append(tuple(keys) if keys else None)
    return out if any(k is not None for k in out) else None


def served_events(deployment: str = "attention") -> dict[str, list[BlockStored]]:
    """Each case served cold through the reference engine (the runtime path), its BlockStored events. A hybrid
    deployment publishes through publishHybrid (a checkpoint), an attention one through publish."""
    out: dict[str, list[BlockStored]] = {}
    with sim.ReferenceEngine(deployment, page_size=PAGE, base_pages=64) as engine:
        engine.enable_kv_events()
        engine.drain_kv_events()
        for name, case in CASES.items():
            media = [sim.MediaItem(data, first, count) for data, first, count in case["media"]]
            request = sim.Request(tokens=np.array(case["tokens"], np.int32), max_new_tokens=2, lora=case["lora"],
                                  media=media)
            (result,) = engine.serve([request])
            assert result.prefill_start == 0, name
            out[name] = [e for e in engine.drain_kv_events() if isinstance(e, BlockStored)]
    return out


@pytest.mark.parametrize("deployment", ["attention", "hybrid"])
def test_the_runtime_names_the_adapter_and_the_media_in_block_stored(deployment: str) -> None:
    events = served_events(deployment)
    for name, case in CASES.items():
        (stored,) = events[name]
        assert stored.token_ids == case["tokens"][:len(stored.block_hashes) * PAGE], name
        assert len(stored.block_hashes) == len(case["tokens"]) // PAGE, name
        assert stored.lora_name == case["lora"], name
        assert stored.extra_keys == expected_extra_keys(case), name
    assert events["image"][0].extra_keys[1] == ((identifier_of(b"pixels"), -2),)
    assert events["image"][0].extra_keys[3] is None
    assert events["both"][0].extra_keys[0] == ("adapter-b", (identifier_of(b"first"), 1),
                                               (identifier_of(b"second"), 3))


def test_the_encoding_carries_them_and_omits_them_when_there_are_none() -> None:
    events = served_events()
    for name in CASES:
        for array_encoding in (False, True):
            payload = ctxcache.encode_kv_events(events[name], block_size=PAGE, timestamp=0.0,
                                                array_encoding=array_encoding)
            (decoded,) = msgspec.msgpack.decode(payload)[1]
            stored = events[name][0]
            extra = None if stored.extra_keys is None else [
                None if keys is None else [list(k) if isinstance(k, tuple) else k for k in keys]
                for keys in stored.extra_keys]
            if array_encoding:
                assert decoded[0] == "BlockStored" and decoded[7] == stored.lora_name
                assert (decoded[8] if len(decoded) > 8 else None) == extra
            else:
                assert decoded["lora_name"] == stored.lora_name
                assert decoded.get("extra_keys") == extra
    plain = ctxcache.encode_kv_events([BlockStored([1], None, [1, 2, 3, 4], PAGE)], block_size=PAGE, timestamp=0.0)
    (decoded,) = msgspec.msgpack.decode(plain)[1]
    assert "extra_keys" not in decoded and decoded["lora_name"] is None  # vLLM's defaults: nothing to send


def test_vllm_sends_the_same_lora_name_and_extra_keys_and_decodes_ours() -> None:
    python = vllm_python()
    events = served_events()
    job = {
        "block_size": PAGE,
        "cases": [{"name": name, "tokens": case["tokens"], "lora": case["lora"],
                   "media": [[identifier_of(data), first, count] for data, first, count in case["media"]]}
                  for name, case in CASES.items()],
        "payloads": {name: ctxcache.encode_kv_events(events[name], block_size=PAGE, timestamp=1.0,
                                                     data_parallel_rank=0).hex() for name in CASES},
    }
    done = subprocess.run([str(python), str(SCRIPT)], input=json.dumps(job), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for name, case in CASES.items():
        vllm = report["vllm"][name]
        (ours,) = report["ctxcache"][name]
        assert vllm["blocks"] == ours["blocks"] == len(case["tokens"]) // PAGE, name
        assert ours["lora_name"] == vllm["lora_name"] == case["lora"], name
        # vLLM sends a list of Nones for blocks without keys where ctxcache omits the field (its default, None).
        if all(k is None for k in vllm["extra_keys"]):
            assert ours["extra_keys"] is None, name
        else:
            assert ours["extra_keys"] == vllm["extra_keys"], name
        assert ours["extra_keys"] == json.loads(json.dumps(expected_extra_keys(case))), name


# ---- the manager's event_keys ------------------------------------------------------------------------------


def publish(manager: ctxcache.ContextCacheManager, tokens: list[int], keys: KvEventKeys | None,
            lora: str = "") -> list[BlockStored]:
    extras = ctxcache.BlockKeyExtras(adapter_id=ctxcache.hash_opaque_identity(lora)) if lora else None
    hashes = ctxcache.hash_full_blocks(np.array(tokens, np.int32), PAGE, extras=extras)
    with manager.acquire_vanilla(hashes, len(tokens)).lease as lease:
        manager.publish(lease, hashes, len(tokens), tokens=tokens, event_keys=keys)
    return [e for e in manager.drain_kv_events() if isinstance(e, BlockStored)]


def test_a_run_that_starts_later_in_the_prompt_gets_offsets_from_its_own_blocks() -> None:
    """A longer prompt whose first two blocks are stored already: its event lists blocks 2 and 3 only, and an
    image over tokens [6, 13) is at offset -2 in block 2 and -6 in block 3."""
    image = KvEventMedia("f" * 64, 6, 7)
    with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=16), 8) as manager:
        manager.enable_kv_events()
        tokens = list(range(50, 66))
        (first,) = publish(manager, tokens[:8], KvEventKeys("", [image]))
        assert first.extra_keys == [None, (("f" * 64, 2),)]  # the image's part inside the first 8 tokens
        (second,) = publish(manager, tokens, KvEventKeys("", [image]))
        assert second.parent_block_hash == first.block_hashes[-1]
        assert second.token_ids == tokens[8:]
        assert second.extra_keys == [(("f" * 64, -2),), (("f" * 64, -6),)]
        assert second.lora_name is None


def test_the_same_tokens_under_two_adapters_are_two_stored_chains() -> None:
    with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=16), 8) as manager:
        manager.enable_kv_events()
        tokens = list(range(10, 18))
        (a,) = publish(manager, tokens, KvEventKeys("adapter-a"), lora="adapter-a")
        (b,) = publish(manager, tokens, KvEventKeys("adapter-b"), lora="adapter-b")
        assert a.token_ids == b.token_ids and set(a.block_hashes).isdisjoint(b.block_hashes)
        assert (a.lora_name, a.extra_keys) == ("adapter-a", [("adapter-a",), ("adapter-a",)])
        assert (b.lora_name, b.extra_keys) == ("adapter-b", [("adapter-b",), ("adapter-b",)])
        assert publish(manager, tokens, KvEventKeys("adapter-a"), lora="adapter-a") == []  # stored already


@pytest.mark.parametrize("media, why", [
    ([KvEventMedia("", 0, 2)], "has no identifier"),
    ([KvEventMedia("x", -1, 2)], "negative position"),
    ([KvEventMedia("x", 0, 0)], "covers no tokens"),
    ([KvEventMedia("x", 4, 2), KvEventMedia("y", 0, 2)], "before the previous item's end"),
    ([KvEventMedia("x", 0, 3), KvEventMedia("y", 2, 2)], "before the previous item's end"),
])
def test_malformed_keys_are_refused_and_publish_nothing(media: list[KvEventMedia], why: str) -> None:
    with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=8), 8) as manager:
        manager.enable_kv_events()
        manager.drain_kv_events()
        tokens = list(range(8))
        hashes = ctxcache.hash_full_blocks(np.array(tokens, np.int32), PAGE)
        with manager.acquire_vanilla(hashes, 8).lease as lease:
            with pytest.raises(ctxcache.ContractError, match=why):
                manager.publish(lease, hashes, 8, tokens=tokens, event_keys=KvEventKeys("a", media))
        assert manager.drain_kv_events() == []
        assert manager.base_index.lookup(hashes[0]) is None
    # Without events the keys are not read: the same publication succeeds.
    with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=8), 8) as manager:
        with manager.acquire_vanilla(hashes, 8).lease as lease:
            manager.publish(lease, hashes, 8, tokens=tokens, event_keys=KvEventKeys("a", media))
        assert manager.base_index.lookup(hashes[0]) is not None


def test_bad_keys_and_bad_extra_keys_are_typed_errors() -> None:
    with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=8), 8) as manager:
        hashes = ctxcache.hash_full_blocks(np.arange(8, dtype=np.int32), PAGE)
        with manager.acquire_vanilla(hashes, 8).lease as lease:
            with pytest.raises(ctxcache.ArgumentTypeError, match="event_keys must be a KvEventKeys"):
                manager.publish(lease, hashes, 8, event_keys={"lora_name": "a"})
            with pytest.raises(ctxcache.ArgumentTypeError, match="lora_name must be a str"):
                manager.publish(lease, hashes, 8, event_keys=KvEventKeys(b"a"))
            with pytest.raises(ctxcache.ArgumentTypeError, match=r"media\[0\] must be a KvEventMedia"):
                manager.publish(lease, hashes, 8, event_keys=KvEventKeys("a", [("x", 0, 1)]))
        assert len(manager.records) == 0
    stored = BlockStored([1, 2], None, list(range(8)), PAGE, "a", [("a",), ("a",)])
    with pytest.raises(ctxcache.InvalidArgumentError, match="2 entries for 1 blocks"):
        ctxcache.encode_kv_events([BlockStored([1], None, [1, 2, 3, 4], PAGE, None, [None, None])], block_size=PAGE,
                                  timestamp=0.0)
    with pytest.raises(ctxcache.ArgumentTypeError, match="a key is a str or an"):
        ctxcache.encode_kv_events([BlockStored([1], None, [1, 2, 3, 4], PAGE, None, [(3,)])], block_size=PAGE,
                                  timestamp=0.0)
    with pytest.raises(ctxcache.ArgumentTypeError, match="must be a list"):
        ctxcache.encode_kv_events([BlockStored([1], None, [1, 2, 3, 4], PAGE, None, "a")], block_size=PAGE,
                                  timestamp=0.0)
    decoded = msgspec.msgpack.decode(ctxcache.encode_kv_events([stored], block_size=PAGE, timestamp=0.0))[1][0]
    assert decoded["extra_keys"] == [["a"], ["a"]] and decoded["lora_name"] == "a"


def test_the_c_abi_refuses_malformed_keys_with_a_status_and_a_message() -> None:
    """ctxc_kv_events_encode checks each stored event's keys (kind, block, order) and ctxc_manager_publish_with_tokens
    checks its ctxc_kv_event_keys_t (size, NULL arrays): each is an error status with a message, nothing else."""
    from ctxcache._ffi import check, ffi, lib

    hashes = ffi.new("uint64_t[]", [1, 2])
    tokens = ffi.new("int32_t[]", list(range(8)))
    text = ffi.new("char[]", b"adapter")

    def encode(block: int, kind: int, second_block: int | None = None) -> None:
        keys = ffi.new("ctxc_kv_event_extra_key_t[]", 2)
        for k, b in enumerate((block, block if second_block is None else second_block)):
            keys[k].block, keys[k].kind, keys[k].text, keys[k].text_length = b, kind, text, 7
        event = ffi.new("ctxc_kv_event_t *")
        event.type, event.block_hashes, event.block_hash_count = lib.CTXC_KV_EVENT_BLOCK_STORED, hashes, 2
        event.token_ids, event.token_count, event.extra_keys, event.extra_key_count = tokens, 8, keys, 2
        size = ffi.new("size_t *")
        status = lib.ctxc_kv_events_encode(event, 1, PAGE, 0.0, -1, ffi.NULL, 0, ffi.NULL, 0, size)
        if status != lib.CTXC_E_BUFFER_TOO_SMALL:
            check(status)

    if not ctxcache.publisher_available():
        pytest.skip("built without the ZMQ publisher: ctxc_kv_events_encode is CTXC_E_UNSUPPORTED")
    encode(0, lib.CTXC_KV_EXTRA_KEY_LORA_NAME, 1)  # well formed
    with pytest.raises(ctxcache.InvalidArgumentError, match=r"extra_keys\[0\].kind 7"):
        encode(0, 7)
    with pytest.raises(ctxcache.InvalidArgumentError, match=r"block 2 is not one of the event's 2 blocks"):
        encode(2, lib.CTXC_KV_EXTRA_KEY_MEDIA)
    with pytest.raises(ctxcache.InvalidArgumentError, match=r"comes after block 1 \(keys are in block order\)"):
        encode(1, lib.CTXC_KV_EXTRA_KEY_MEDIA, 0)

    with ctxcache.ContextCacheManager(PAGE, ctxcache.ResourceDemand(base_kv_pages=8), 8) as manager:
        manager.enable_kv_events()
        block_hashes = ctxcache.hash_full_blocks(np.arange(8, dtype=np.int32), PAGE)
        with manager.acquire_vanilla(block_hashes, 8).lease as lease:
            keys = ffi.new("ctxc_kv_event_keys_t *")
            lib.ctxc_kv_event_keys_init(keys)
            out = ctxcache._ffi.new_output("ctxc_publish_result_t")
            pointer = ctxcache._arrays.hash_pointer(block_hashes)

            def publish() -> None:
                check(lib.ctxc_manager_publish_with_tokens(manager._live(), lease._live_handle(), pointer, 2, 8,
                                                           tokens, 8, keys, out))

            keys.struct_size = 4
            with pytest.raises(ctxcache.InvalidArgumentError, match="event_keys"):
                publish()
            lib.ctxc_kv_event_keys_init(keys)
            keys.media_count = 1
            with pytest.raises(ctxcache.InvalidArgumentError, match=r"event_keys->media"):
                publish()
            keys.lora_name_length = 3
            keys.media_count = 0
            with pytest.raises(ctxcache.InvalidArgumentError, match=r"event_keys->lora_name"):
                publish()
            assert len(manager.records) == 0
            keys.lora_name, keys.lora_name_length = text, 7
            publish()
        (stored,) = [e for e in manager.drain_kv_events() if isinstance(e, BlockStored)]
        assert stored.lora_name == "adapter" and stored.extra_keys == [("adapter",), ("adapter",)]
