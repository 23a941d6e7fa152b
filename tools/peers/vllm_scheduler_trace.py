"""vLLM 0.33's own scheduler over a Mooncake-format trace, with vLLM's KV cache manager or ctxcache's.

Run by tools/vllm_conformance --trace inside vLLM's environment (build-peers/venv-vllm), from the root of vLLM's
unpacked source distribution (its tests/v1/core/utils.py builds the scheduler, as vLLM's scheduler tests do), one
process per manager. Prints one JSON object.

Per request of the trace, in trace order: the tokens ctxcache's workload expansion gives (hash id h -> 512 tokens),
cut to input_length; vLLM's block hasher (sha256, block size 16); SamplingParams(max_tokens=output_length,
ignore_eos). Requests are added --arrivals at a time; every step is scheduler.schedule() then update_from_output with
a fake model output (one sampled token per request whose prompt is complete after the step, none for a prefill chunk
that is not the last) until the trace is done. Figures:
  hit rate        sum of the prefix-cache hits the scheduler records at each request's first admission
                  (record_prefix_cache_stats) / sum of prompt tokens
  manager time    the time spent inside the scheduler's calls into its KV cache manager (every method and property,
                  timed by a proxy), per scheduling step and in all
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


class Timed:
    """The scheduler's KV cache manager, each call into it timed."""

    def __init__(self, target: Any):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "ns", 0)
        object.__setattr__(self, "calls", 0)

    def __getattr__(self, name: str) -> Any:
        target = object.__getattribute__(self, "_target")
        t0 = time.perf_counter_ns()
        value = getattr(target, name)
        object.__setattr__(self, "ns", self.ns + time.perf_counter_ns() - t0)
        if not callable(value) or name.startswith("__"):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return value(*args, **kwargs)
            finally:
                object.__setattr__(self, "ns", self.ns + time.perf_counter_ns() - start)
                object.__setattr__(self, "calls", self.calls + 1)

        return timed

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_target"), name, value)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--manager", choices=("vllm", "ctxcache"), required=True)
    parser.add_argument("--trace", required=True)
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--num-blocks", type=int, default=140_001)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--arrivals", type=int, default=4, help="requests added before each step")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path.cwd()))  # vLLM's sdist root: tests.v1.core.utils
    # The trace's prompts are longer than opt-125m's positions; no model runs here, only the scheduler.
    os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    import vllm.v1.core.sched.scheduler as scheduler_module
    from tests.v1.core.utils import create_scheduler
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    if args.manager == "ctxcache":
        from ctxcache.integrations.vllm import make_kv_cache_manager, stats
        scheduler_module.KVCacheManager = make_kv_cache_manager

    from ctxcache.cli import workload  # the token expansion of ctxcache's own replay

    trace = workload.read_trace(args.trace, args.requests)
    max_len = max(r.input_length + r.output_length for r in trace) + 16

    scheduler = create_scheduler(max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                                 enable_prefix_caching=True, num_blocks=args.num_blocks, block_size=16,
                                 max_model_len=max_len)
    if args.manager == "ctxcache":
        assert stats.built == 1, "ctxcache's adapter did not build the manager"
    first_hits: dict[str, int] = {}  # the prefix-cache hit of each request's first admission
    record = scheduler.kv_cache_manager.record_prefix_cache_stats

    def record_first(request: Any, num_hits: int) -> None:
        first_hits.setdefault(request.request_id, num_hits)
        record(request, num_hits)

    scheduler.kv_cache_manager.record_prefix_cache_stats = record_first
    timed = Timed(scheduler.kv_cache_manager)
    scheduler.kv_cache_manager = timed
    init_none_hash(sha256)
    hasher = get_request_block_hasher(16, sha256)

    pending = list(enumerate(trace))
    pending.reverse()
    requests: dict[str, Request] = {}
    prompt_tokens = cached_tokens = steps = preemptions = 0
    finished = 0
    gc.collect()
    wall = time.perf_counter()
    while pending or scheduler.has_requests():
        for _ in range(args.arrivals):
            if not pending:
                break
            i, r = pending.pop()
            tokens = workload.expand_tokens(r.hash_ids, r.input_length).tolist()
            request = Request(str(i), tokens, SamplingParams(max_tokens=max(1, r.output_length), ignore_eos=True),
                              None, block_hasher=hasher)
            requests[request.request_id] = request
            prompt_tokens += r.input_length
            scheduler.add_request(request)
        output = scheduler.schedule()
        steps += 1
        ids = list(output.num_scheduled_tokens)
        sampled = [[] if requests[rid].num_computed_tokens < requests[rid].num_tokens else [7] for rid in ids]
        result = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: k for k, rid in enumerate(ids)},
                                   sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                   pooler_output=[])
        engine_outputs = scheduler.update_from_output(output, result)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                if out.finish_reason is not None:
                    finished += 1
                    req = requests.pop(out.request_id)
                    cached_tokens += first_hits.get(out.request_id, 0)
                    preemptions += req.num_preemptions
    wall = time.perf_counter() - wall
    print(json.dumps({
        "manager": args.manager, "requests": len(trace), "finished": finished, "num_blocks": args.num_blocks,
        "prompt_tokens": prompt_tokens, "cached_tokens": cached_tokens, "hit_rate": cached_tokens / prompt_tokens,
        "steps": steps, "preemptions": preemptions, "manager_seconds": timed.ns / 1e9,
        "manager_calls": timed.calls, "manager_us_per_step": timed.ns / 1e3 / steps, "wall_seconds": wall}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
