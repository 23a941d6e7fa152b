"""Run inside vLLM's virtual environment by test_kv_event_identity.py (no ctxcache import): what vLLM 0.33 itself
sends for a prompt's blocks, and what its own decoder reads from ctxcache's payloads.

Reads one JSON object from stdin:
    {"block_size": P, "cases": [{"name": str, "tokens": [int...], "lora": str | null,
                                 "media": [[identifier, offset, length], ...]}, ...],
     "payloads": {name: hex}}
For each case it builds a ``vllm.v1.request.Request`` (a ``LoRARequest`` for the adapter, one
``MultiModalFeatureSpec`` per media item with that identifier and placeholder range) hashed by vLLM's own block
hasher, caches all its full blocks in a ``BlockPool`` with KV events on, and takes the ``BlockStored`` vLLM emits.
Each payload (ctxcache's encoding of the same prompt's events) is decoded with ``KVEventBatch``'s msgspec decoder.
Prints one JSON object: {"vllm": {name: stored}, "ctxcache": {name: [stored...]}} where stored is
{"blocks": n, "lora_name": str | null, "extra_keys": [...] | null} (tuples become lists in JSON).
"""

from __future__ import annotations

import json
import sys

import msgspec
from vllm.distributed.kv_events import BlockStored, KVEventBatch
from vllm.lora.request import LoRARequest
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request


def stored(event: BlockStored) -> dict:
    return {"blocks": len(event.block_hashes), "lora_name": event.lora_name, "extra_keys": event.extra_keys}


def vllm_stored(case: dict, block_size: int, hash_fn) -> dict:
    lora = LoRARequest(case["lora"], 1, "/adapters/" + case["lora"]) if case["lora"] else None
    features = [MultiModalFeatureSpec(data=None, modality="image", identifier=identifier,
                                      mm_position=PlaceholderRange(offset=offset, length=length))
                for identifier, offset, length in case["media"]]
    request = Request(case["name"], case["tokens"], SamplingParams(max_tokens=1), None, mm_features=features or None,
                      lora_request=lora, block_hasher=get_request_block_hasher(block_size, hash_fn))
    full = len(case["tokens"]) // block_size
    pool = BlockPool(num_gpu_blocks=full + 2, enable_caching=True, hash_block_size=block_size,
                     enable_kv_cache_events=True)
    blocks = pool.get_new_blocks(full)
    pool.cache_full_blocks(request, blocks, 0, full, block_size, 0)
    events = [e for e in pool.take_events() if isinstance(e, BlockStored)]
    assert len(events) == 1, events
    return stored(events[0])


def main() -> int:
    job = json.load(sys.stdin)
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    out: dict = {"vllm": {}, "ctxcache": {}}
    for case in job["cases"]:
        out["vllm"][case["name"]] = vllm_stored(case, job["block_size"], hash_fn)
    for name, payload in job["payloads"].items():
        batch = decoder.decode(bytes.fromhex(payload))
        out["ctxcache"][name] = [stored(e) for e in batch.events if isinstance(e, BlockStored)]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
