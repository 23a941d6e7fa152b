"""Warm against cold wall time of a real (tiny, seeded) Hugging Face Llama served through ctxcache.

    python -m ctxcache.bench.transformers [--prefix 2000] [--question 50] [--new-tokens 8] [--rounds 5] [--json]

Each round builds a fresh shared prefix (so its first request is cold), serves prefix + question A (cold: the
whole prompt is prefilled) and then prefix + question B (warm: the prefix comes from ctxcache's pages, only the
question is prefilled), both greedy for ``--new-tokens`` tokens, and checks the warm logits against a cold run on
transformers' DynamicCache. It prints the medians over the rounds of: the request wall times, their ratio, and the
cache's own cost per request apart from the model (the ManagedKVCacheRequest steps, and the scatter/gather that
moves K/V in and out of pages, which a DynamicCache does with torch.cat), plus the same cold request on a plain
DynamicCache as the no-cache baseline. Needs the transformers extra. The machine is shared: read ratios measured
in one run, not absolute seconds.
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import time
from typing import Any

from ..cli.args import OneLineParser, int_range


def run(prefix: int, question: int, new_tokens: int, rounds: int, page_size: int, threads: int) -> dict[str, Any]:
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..integrations.transformers import CachedGenerator, cold_generate

    torch.set_num_threads(threads)  # on a shared machine, fewer threads than cores keeps the rounds comparable
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=prefix + question + new_tokens + 16, initializer_range=0.2)
    model = LlamaForCausalLM(config).eval()
    rng = np.random.default_rng(1)
    samples: dict[str, list[float]] = {k: [] for k in ("cold", "warm", "baseline", "cold_cache", "warm_cache",
                                                        "warm_facade", "warm_kv", "max_abs_diff", "speedup")}
    pages = rounds * 2 * ((prefix + question + new_tokens) // page_size + 2)
    with CachedGenerator(model, page_size=page_size, num_pages=pages,
                         max_seq_len=prefix + question + new_tokens + page_size) as generator:
        for _ in range(rounds):
            shared = rng.integers(0, 97, size=prefix).tolist()
            a = shared + rng.integers(0, 97, size=question).tolist()
            b = shared + rng.integers(0, 97, size=question).tolist()
            cold = generator.generate(a, new_tokens)
            warm = generator.generate(b, new_tokens)
            if cold.prefill_start != 0 or warm.prefill_start < prefix - page_size:
                raise AssertionError(f"reuse {cold.prefill_start} then {warm.prefill_start}: the rounds overlapped")
            started = time.perf_counter()
            _, reference = cold_generate(model, b, new_tokens)
            baseline = time.perf_counter() - started
            samples["cold"].append(cold.seconds)
            samples["warm"].append(warm.seconds)
            samples["speedup"].append(cold.seconds / warm.seconds)  # within one round: the load is alike
            samples["baseline"].append(baseline)
            samples["cold_cache"].append(cold.cache_seconds)
            samples["warm_cache"].append(warm.cache_seconds)
            samples["warm_facade"].append(warm.facade_seconds)
            samples["warm_kv"].append(warm.kv_seconds)
            samples["max_abs_diff"].append(float((reference[warm.prefill_start:] - warm.logits).abs().max()))
        generator.coordinator.check_invariants()
    median = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "model": "LlamaForCausalLM hidden 32, 2 layers, 4 heads (2 KV), fp32, CPU",
        "prefix_tokens": prefix, "question_tokens": question, "new_tokens": new_tokens, "rounds": rounds,
        "page_size": page_size, "warm_reused_tokens": warm.prefill_start,
        "cold_seconds": median["cold"], "warm_seconds": median["warm"],
        "warm_speedup": median["speedup"], "threads": threads,
        "baseline_dynamic_cache_seconds": median["baseline"],
        "cold_cache_overhead_seconds": median["cold_cache"], "warm_cache_overhead_seconds": median["warm_cache"],
        "warm_facade_seconds": median["warm_facade"], "warm_kv_move_seconds": median["warm_kv"],
        "max_abs_logit_diff_warm_vs_cold": max(samples["max_abs_diff"]),
    }


def _missing_extra() -> str | None:
    """The first of the transformers extra's packages that does not import (its name), or None."""
    for name in ("torch", "transformers"):
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def main(argv: list[str] | None = None) -> int:
    prog = "python -m ctxcache.bench.transformers"
    parser = OneLineParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--prefix", type=int_range(1, 8192), default=2000,
                        help="shared prefix tokens (default 2000, at most 8192: eager attention is quadratic)")
    parser.add_argument("--question", type=int_range(1, 1024), default=50,
                        help="question tokens after it (default 50, at most 1024)")
    parser.add_argument("--new-tokens", type=int_range(1, 1024), default=8,
                        help="tokens generated per request (default 8, at most 1024)")
    parser.add_argument("--rounds", type=int_range(1, 1000), default=5,
                        help="rounds; medians are reported (default 5, at most 1000)")
    parser.add_argument("--page-size", type=int_range(1, 4096), default=16, help="tokens per page (default 16)")
    parser.add_argument("--threads", type=int_range(1, 1024), default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    missing = _missing_extra()
    if missing is not None:
        print(f"{prog}: error: needs {missing}, which is not installed: install the transformers extra "
              f"(pip install 'ctxcache[transformers]', or pip install '.[transformers]' from a checkout)",
              file=sys.stderr)
        return 2
    result = run(args.prefix, args.question, args.new_tokens, args.rounds, args.page_size, args.threads)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['model']}: {args.prefix}-token shared prefix + {args.question}-token question, "
          f"{args.new_tokens} new tokens, {args.threads} torch thread(s), median of {args.rounds} rounds")
    print(f"  cold request  {result['cold_seconds'] * 1e3:8.1f} ms   (plain DynamicCache, no ctxcache: "
          f"{result['baseline_dynamic_cache_seconds'] * 1e3:.1f} ms)")
    print(f"  warm request  {result['warm_seconds'] * 1e3:8.1f} ms   ({result['warm_reused_tokens']} tokens reused): "
          f"{result['warm_speedup']:.1f}x faster (median of the rounds' cold/warm ratios)")
    print(f"  cache's own cost per request: cold {result['cold_cache_overhead_seconds'] * 1e3:.1f} ms, warm "
          f"{result['warm_cache_overhead_seconds'] * 1e3:.1f} ms (facade steps {result['warm_facade_seconds'] * 1e3:.2f} "
          f"ms + K/V through pages {result['warm_kv_move_seconds'] * 1e3:.1f} ms)")
    print(f"  warm logits vs cold: max |diff| {result['max_abs_logit_diff_warm_vs_cold']:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
