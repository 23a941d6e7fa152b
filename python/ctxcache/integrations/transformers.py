"""Hugging Face transformers models served through ctxcache: attention KV in ctxcache pages, recurrent (Mamba)
state in ctxcache resident state and snapshots, requests through the ManagedKVCacheRequest facade.

The optional extra (``pip install .[transformers]``) pins ``torch==2.13.0`` and ``transformers==5.24.0``.

::

    from ctxcache.integrations.transformers import CachedGenerator
    with CachedGenerator(model, page_size=16, num_pages=256, max_seq_len=1024) as generator:
        first = generator.generate(prompt_ids, max_new_tokens=8)
        again = generator.generate(prompt_ids + first.tokens + question_ids, max_new_tokens=8)
        again.prefill_start   # tokens served from the cache instead of recomputed

What it is made of:

- :class:`PagedAttentionLayer`: a transformers cache layer whose K and V live in a ctxcache KV pool. ``update``
  scatters the new K/V (``[1, kv_heads, q, head_dim]``, as attention produces them) into the sequence's pages through
  the page table (one launch per layer, no transpose) and gathers the whole sequence back head-major for attention.
- :class:`ResidentRecurrentLayer`: a transformers linear-attention layer whose conv and recurrent state ARE rows of the
  ctxcache resident state (torch views through DLPack, no copy): the model updates them in place, the coordinator
  captures and restores them as snapshots at checkpoints.
- :class:`CtxcacheCache`: the transformers ``Cache`` of one request, one such layer per model layer.
- :class:`CachedGenerator`: a greedy generation loop over a :class:`ctxcache.deployment.Deployment` sized for the
  model, one sequence at a time (resident slot 0): ``begin`` (the prompt hashed with the model's identity and the
  LoRA name), ``prepare_prefill``, the model's prefill of ``prompt[start:]`` at positions ``arange(start, len)``
  (transformers infers positions from the cache for some models but restarts at 0 for others, e.g. Bamba, so they are
  always passed), ``enqueue_prefill_captures``, ``complete_prefill``, one ``prepare_decode_step`` /
  ``complete_decode_step`` per token, ``finish``.

Identity: two models (or dtypes) must never share cache entries. The coordinator's hash key is a digest of the
model's config, dtype and input-embedding weights (or ``model_id`` when given), so identical prompts of different
models hash apart; the LoRA name goes into every block hash as the runtime does.
Threading: single writer (the deployment's contract); the model runs on the calling thread.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import Cache, CacheLayerMixin, LinearAttentionLayer

from ..deployment import Deployment, RecurrentGeometry
from ..device import (
    BackendKind,
    DType,
    KvLayout,
    KvLengths,
    KvPagePool,
    KvPageTable,
    ResidentState,
    gather_kv_into,
    scatter_kv,
)
from ..enums import SequenceStatus
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..runtime import DecodingContext, ManagedKVCacheRequest, Request, ResidentRef

_DTYPES = {torch.float16: DType.FP16, torch.bfloat16: DType.BF16, torch.float32: DType.FP32}


@dataclass
class KvTimer:
    """Seconds spent moving KV in and out of pages (scatter + gather), and how many calls."""

    seconds: float = 0.0
    calls: int = 0


class PagedAttentionLayer(CacheLayerMixin):
    """One attention layer of one sequence (page-table slot 0), its K/V in ``pool`` layer ``pool_layer``. ``length``
    tokens are already in the pages (the reuse length at the start of a request)."""

    is_sliding = False
    is_compileable = False
    is_croppable = False
    supports_early_init = False

    def __init__(self, pool: KvPagePool, table: KvPageTable, lengths: KvLengths, pool_layer: int, length: int,
                 dtype: torch.dtype, timer: KvTimer) -> None:
        super().__init__()
        self._pool, self._table, self._lengths, self._layer, self._timer = pool, table, lengths, pool_layer, timer
        self._heads, self._head_dim = pool.layers[pool_layer]
        self.length = length
        self.dtype = dtype
        self.device: torch.device | None = None  # the device of the first K/V stored
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None  # bound to the pool at construction

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new tokens' K/V ([1, kv_heads, q, head_dim]) at positions [length, length + q) and return
        K/V of positions [0, length + q), read back through the page table as an attention kernel would (tokens at
        or past the device KV length, which the loop advances before each forward, read as zeros)."""
        started = time.perf_counter()
        k, v = key_states.contiguous(), value_states.contiguous()
        self.device = k.device
        scatter_kv(self._pool, self._table, k, v, layer=self._layer, first_position=self.length,
                   layout=KvLayout.HEAD_MAJOR)
        self.length += int(k.shape[2])
        keys = torch.empty((1, self._heads, self.length, self._head_dim), dtype=k.dtype, device=k.device)
        values = torch.empty_like(keys)
        gather_kv_into(self._pool, self._table, keys, values, self._lengths, layer=self._layer,
                       layout=KvLayout.HEAD_MAJOR)
        self._timer.seconds += time.perf_counter() - started
        self._timer.calls += 2
        return keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        raise NotImplementedError("a ctxcache layer is bound to one request's pages; start a new request instead")

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a ctxcache layer is bound to one request's pages; start a new request instead")


class ResidentRecurrentLayer(LinearAttentionLayer):
    """One recurrent layer of one sequence: ``conv`` ([1, conv_dim, conv_kernel]) and ``recurrent`` ([1, heads,
    head_dim, state_size]) are views of the resident state's rows, updated in place by the model. ``has_state``:
    the rows hold the state of the tokens before the prefill start (restored from a checkpoint)."""

    def __init__(self, conv: torch.Tensor, recurrent: torch.Tensor, conv_kernel: int, has_state: bool) -> None:
        super().__init__(number_of_states=1)
        self.conv_states[0] = conv
        self.recurrent_states[0] = recurrent
        self.is_conv_states_initialized[0] = True
        self.is_recurrent_states_initialized[0] = True
        self.conv_kernel_size[0] = conv_kernel
        self.has_previous_state[0] = has_state
        self.device, self.dtype = conv.device, conv.dtype
        self.batch_size = 1


class CtxcacheCache(Cache):
    """The transformers Cache of one request: a :class:`PagedAttentionLayer` or :class:`ResidentRecurrentLayer` per
    model layer."""

    def __init__(self, layers: Sequence[CacheLayerMixin | LinearAttentionLayer]) -> None:
        super().__init__(layers=list(layers))


@dataclass(frozen=True)
class ModelLayout:
    """What a model's cache holds, read from the model: per layer "attention" or "recurrent", the attention shapes
    (kv_heads, head_dim) in layer order, the recurrent geometry (None without recurrent layers), the dtype."""

    kinds: tuple[str, ...]
    attention: tuple[tuple[int, int], ...]
    recurrent: RecurrentGeometry | None
    dtype: torch.dtype

    @staticmethod
    def of(model: torch.nn.Module) -> ModelLayout:
        config = model.config.get_text_config(decoder=True)
        dtype = next(model.parameters()).dtype
        if dtype not in _DTYPES:
            raise ArgumentTypeError(f"model dtype {dtype} is not one ctxcache stores (float16, bfloat16, float32)")
        types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
        kinds = []
        for i, kind in enumerate(types):
            if kind in ("linear_attention", "mamba"):
                kinds.append("recurrent")
            elif kind in ("full_attention", "attention"):
                kinds.append("attention")
            else:
                raise InvalidArgumentError(f"layer {i} is {kind!r}: only full attention and Mamba-style recurrent "
                                           "layers are served")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        attention = tuple((int(heads), int(head_dim)) for k in kinds if k == "attention")
        recurrent = None
        if "recurrent" in kinds:
            mixers = [m for m in model.modules() if all(hasattr(m, a) for a in
                                                         ("conv_kernel_size", "ssm_state_size", "conv_dim", "num_heads",
                                                          "head_dim", "layer_idx"))]
            if len(mixers) != kinds.count("recurrent"):
                raise InvalidArgumentError(f"found {len(mixers)} Mamba-style mixers for {kinds.count('recurrent')} "
                                           "recurrent layers")
            m = mixers[0]
            recurrent = RecurrentGeometry(num_layers=len(mixers), heads=int(m.num_heads), head_dim=int(m.head_dim),
                                          state_size=int(m.ssm_state_size), conv_dim=int(m.conv_dim),
                                          conv_kernel=int(m.conv_kernel_size), dtype=_DTYPES[dtype])
        return ModelLayout(tuple(kinds), attention, recurrent, dtype)


def model_identity(model: torch.nn.Module) -> bytes:
    """A digest of the model's config, dtype and input-embedding weights: equal for the same weights, apart for
    different models (the coordinator's hash key, so their prompts never share blocks)."""
    digest = hashlib.sha256()
    digest.update(model.config.to_json_string(use_diff=False).encode())
    weights = model.get_input_embeddings().weight.detach()
    digest.update(str(weights.dtype).encode())
    digest.update(weights.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.digest()


@dataclass
class Generation:
    """One served request: the generated ``tokens``, ``prefill_start`` (prompt tokens served from the cache), the
    ``logits`` computed (prefill rows for positions [prefill_start, len(prompt)), then one row per decode step:
    ``len(prompt) - prefill_start + len(tokens) - 1`` rows), and wall times: ``seconds`` in all, ``model_seconds``
    in the model's forward calls (KV movement included), ``kv_seconds`` of that in scatter/gather, and
    ``facade_seconds`` in the ManagedKVCacheRequest steps (lookup, page binding, restores, captures,
    publication)."""

    tokens: list[int]
    prefill_start: int
    logits: torch.Tensor
    seconds: float = 0.0
    model_seconds: float = 0.0
    kv_seconds: float = 0.0
    facade_seconds: float = 0.0
    steps: list[str] = field(default_factory=list)

    @property
    def cache_seconds(self) -> float:
        """The cache's own cost: the facade steps plus moving KV through pages."""
        return self.facade_seconds + self.kv_seconds


class CachedGenerator:
    """Greedy generation with context reuse for a transformers causal LM (attention, or a Mamba/attention hybrid
    such as Bamba), on a :class:`ctxcache.deployment.Deployment` sized from the model. One sequence at a time.
    ``num_pages`` K pages of ``page_size`` tokens; ``max_seq_len`` tokens per request; ``snapshots`` checkpoint
    slots (recurrent and partial-KV each) for a hybrid; ``backend`` "cpu" (default), "cuda" or a Backend."""

    def __init__(self, model: torch.nn.Module, *, page_size: int = 16, num_pages: int = 256, max_seq_len: int = 2048,
                 snapshots: int | None = None, max_records: int = 1024, backend: Any = "cpu",
                 model_id: bytes | None = None) -> None:
        self.model = model
        self.layout = ModelLayout.of(model)
        self.deployment = Deployment(
            page_size=page_size, num_pages=num_pages, max_seq_len=max_seq_len,
            attention_layers=self.layout.attention, kv_dtype=_DTYPES[self.layout.dtype],
            recurrent=self.layout.recurrent, max_batch=1, recurrent_snapshots=snapshots,
            partial_kv_snapshots=snapshots, max_records=max_records, backend=backend,
            hash_key=model_identity(model) if model_id is None else model_id)
        self.device = next(model.parameters()).device
        # CUDA: the model, the scatter/gather kernels and the facade's captures and restores run on one stream of
        # the generator's, so they are ordered without a synchronisation (CPU: everything completes in order).
        self._stream: Any = None
        if self.deployment.backend.kind == BackendKind.CUDA:
            self._stream = torch.cuda.Stream(device=self.device)
            self.deployment.backend.set_stream(self._stream.cuda_stream)
        self._epoch = 0
        self._state_views: list[tuple[torch.Tensor, torch.Tensor]] = []
        state = self.deployment.state
        if state is not None:
            geometry = self.layout.recurrent
            assert geometry is not None
            for layer in range(geometry.num_layers):  # row 0 of every slab: the resident slot this loop uses
                conv = _torch_view(state, "conv", layer)[0].view(1, geometry.conv_dim, geometry.conv_kernel)
                recurrent = _torch_view(state, "recurrent", layer)[0].view(1, geometry.heads, geometry.head_dim,
                                                                           geometry.state_size)
                self._state_views.append((conv, recurrent))

    @property
    def coordinator(self) -> Any:
        return self.deployment.coordinator

    def close(self) -> None:
        self._state_views.clear()
        if self._stream is not None and not self.deployment.backend.closed:
            self._stream.synchronize()
            self.deployment.backend.set_stream(None)  # the backend never outlives a stream it was given
        self.deployment.close()

    def __enter__(self) -> CachedGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _positions(self, start: int, end: int) -> torch.Tensor:
        """Positions of tokens [start, end): their absolute positions, whatever the model would infer."""
        return torch.arange(start, end, device=self.device).unsqueeze(0)

    def _cache(self, start: int, timer: KvTimer) -> CtxcacheCache:
        layers: list[Any] = []
        attention = recurrent = 0
        d = self.deployment
        for kind in self.layout.kinds:
            if kind == "attention":
                assert d.pool is not None and d.table is not None and d.lengths is not None
                layers.append(PagedAttentionLayer(d.pool, d.table, d.lengths, attention, start, self.layout.dtype,
                                                  timer))
                attention += 1
            else:
                conv, state = self._state_views[recurrent]
                layers.append(ResidentRecurrentLayer(conv, state, conv.shape[-1], has_state=start > 0))
                recurrent += 1
        return CtxcacheCache(layers)

    def _forward(self, cache: CtxcacheCache, tokens: Sequence[int], start: int) -> torch.Tensor:
        """The model over `tokens` at positions [start, start + len): the device KV length (set to the reuse length
        by prepare_prefill) first grows to cover them, as an engine's does before its attention kernels run."""
        if self.deployment.lengths is not None:
            self.deployment.lengths.add(len(tokens))
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        with torch.no_grad():
            out = self.model(input_ids=ids, position_ids=self._positions(start, start + len(tokens)), cache=cache,
                             use_cache=True)
        return out.logits[0]

    def generate(self, prompt: Sequence[int], max_new_tokens: int, *, lora_name: str = "",
                 before_prefill: Callable[[ManagedKVCacheRequest], None] | None = None) -> Generation:
        """Serve one request greedily: ``max_new_tokens`` (>= 1) tokens after ``prompt``. ``before_prefill`` (tests,
        instrumentation) runs after the facade bound pages and restored state, before the model's prefill."""
        if self._stream is None:
            return self._generate(prompt, max_new_tokens, lora_name, before_prefill, None)
        with torch.cuda.stream(self._stream):
            return self._generate(prompt, max_new_tokens, lora_name, before_prefill, int(self._stream.cuda_stream))

    def _generate(self, prompt: Sequence[int], max_new_tokens: int, lora_name: str,
                  before_prefill: Callable[[ManagedKVCacheRequest], None] | None, stream: int | None) -> Generation:
        prompt = [int(t) for t in prompt]
        if max_new_tokens < 1:
            raise InvalidArgumentError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if len(prompt) < 1 or len(prompt) + max_new_tokens > self.deployment.max_seq_len:
            raise InvalidArgumentError(f"a prompt of {len(prompt)} tokens plus {max_new_tokens} new ones must fit "
                                       f"max_seq_len {self.deployment.max_seq_len}")
        started = time.perf_counter()
        facade = 0.0
        timer = KvTimer()
        self._epoch += 1
        history = np.array(prompt, dtype=np.int32)
        context = DecodingContext([history], raw_input_lengths=[len(prompt)], generated_lengths=[0],
                                  status=[SequenceStatus.RUNNING], resident_refs=[ResidentRef(0, self._epoch)])
        logits: list[torch.Tensor] = []
        tokens: list[int] = []
        steps: list[str] = []

        def step(name: str, call: Callable[[], Any]) -> Any:
            nonlocal facade
            t0 = time.perf_counter()
            result = call()
            facade += time.perf_counter() - t0
            steps.append(name)
            return result

        model_seconds = 0.0
        request = step("begin", lambda: ManagedKVCacheRequest.begin(
            self.coordinator, [Request(history, lora_name=lora_name)], context, stream=stream))
        with request:
            start = int(request.prefill_starts[0])
            step("prepare_prefill", request.prepare_prefill)
            if before_prefill is not None:
                before_prefill(request)
            cache = self._cache(start, timer)
            t0 = time.perf_counter()
            prefill = self._forward(cache, prompt[start:], start)
            model_seconds += time.perf_counter() - t0
            logits.append(prefill)
            step("enqueue_prefill_captures", request.enqueue_prefill_captures)
            tokens.append(int(prefill[-1].argmax()))
            context.token_ids[0] = np.array(prompt + tokens, dtype=np.int32)
            context.generated_lengths = [1]
            step("complete_prefill", lambda: request.complete_prefill(context))
            while len(tokens) < max_new_tokens:
                step("prepare_decode_step", lambda: request.prepare_decode_step(context))
                t0 = time.perf_counter()
                row = self._forward(cache, tokens[-1:], len(prompt) + len(tokens) - 1)
                model_seconds += time.perf_counter() - t0
                logits.append(row)
                tokens.append(int(row[-1].argmax()))
                context.token_ids[0] = np.array(prompt + tokens, dtype=np.int32)
                context.generated_lengths = [len(tokens)]
                if len(tokens) == max_new_tokens:
                    context.status = [SequenceStatus.FINISHED]
                step("complete_decode_step", lambda: request.complete_decode_step(context))
            step("finish", request.finish)
        return Generation(tokens, start, torch.cat(logits), seconds=time.perf_counter() - started,
                          model_seconds=model_seconds, kv_seconds=timer.seconds, facade_seconds=facade, steps=steps)


def cold_generate(model: torch.nn.Module, prompt: Sequence[int], max_new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """The reference: the same greedy loop on transformers' own DynamicCache, from scratch (prefill of the whole
    prompt, then one token per step), positions passed the same way. Returns (tokens, logits of every prompt
    position then of every decode step)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=torch.arange(len(prompt), device=device).unsqueeze(0), cache=cache,
                    use_cache=True)
        rows = [out.logits[0]]
        tokens = [int(out.logits[0, -1].argmax())]
        while len(tokens) < max_new_tokens:
            position = len(prompt) + len(tokens) - 1
            out = model(input_ids=torch.tensor([[tokens[-1]]], device=device),
                        position_ids=torch.tensor([[position]], device=device), cache=out.cache, use_cache=True)
            rows.append(out.logits[0])
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens, torch.cat(rows)


def _torch_view(state: ResidentState, part: str, layer: int) -> torch.Tensor:
    """A torch tensor over one slab of the resident state ([max_batch, row elements]), the same memory."""
    view = state.conv(layer) if part == "conv" else state.recurrent(layer)
    return torch.from_dlpack(view)


__all__ = ["CachedGenerator", "CtxcacheCache", "Generation", "KvTimer", "ModelLayout", "PagedAttentionLayer",
           "ResidentRecurrentLayer", "cold_generate", "model_identity"]
