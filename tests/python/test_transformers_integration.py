"""Hugging Face models served through ctxcache (ctxcache.integrations.transformers): a warm request's logits equal
a cold run's on transformers' own DynamicCache, at every reuse point the facade offers, for a tiny seeded Llama
(fp32 within 1e-4, fp16 bit for bit) and a tiny seeded Bamba (Mamba2 + attention, fp32 within 1e-4); three negative
controls prove the comparison can fail. The models are built from seeded configs in code (no download);
initializer_range=0.2 so that a wrong page or state moves the logits visibly.

Skipped with the reason when the transformers extra is missing; CTXCACHE_REQUIRE_TRANSFORMERS=1 (set by tools/test,
which installs the extra) turns that skip into a failure.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

try:
    import torch
    import transformers
    from transformers import BambaConfig, BambaForCausalLM, LlamaConfig, LlamaForCausalLM
except ImportError as missing:  # pragma: no cover - the environment decides
    if os.environ.get("CTXCACHE_REQUIRE_TRANSFORMERS") == "1":
        raise ImportError(f"CTXCACHE_REQUIRE_TRANSFORMERS=1 but the transformers extra is missing: {missing}") from missing
    pytest.skip(f"the transformers extra is not installed ({missing}); pip install .[transformers]",
                allow_module_level=True)

import ctxcache
from ctxcache import device
from ctxcache.deployment import Deployment, RecurrentGeometry
from ctxcache.integrations.transformers import CachedGenerator, cold_generate, model_identity

PAGE = 8
VOCAB = 97
TOLERANCE = 1e-4
MOVED = 0.5

transformers.logging.set_verbosity_error()  # Bamba's note that the optional CUDA kernels fall back to PyTorch


def tiny_llama(seed: int = 0, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         initializer_range=0.2)
    return LlamaForCausalLM(config).eval().to(dtype)


def tiny_bamba(seed: int = 0) -> BambaForCausalLM:
    torch.manual_seed(seed)
    config = BambaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[1], mamba_n_heads=4,
                         mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2,
                         mamba_chunk_size=16, max_position_embeddings=512, initializer_range=0.2)
    return BambaForCausalLM(config).eval()


def tokens(count: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, VOCAB, size=count).tolist()


@pytest.fixture(scope="module")
def llama():
    return tiny_llama()


@pytest.fixture(scope="module")
def bamba():
    return tiny_bamba()


def serve(generator, prompt, new_tokens):
    """Serve `prompt` and check the whole state (coordinator, manager, page table)."""
    served = generator.generate(prompt, new_tokens)
    generator.coordinator.check_invariants()
    return served


def serve_and_compare(generator, model, prompt, new_tokens=4, **kwargs):
    """Serve `prompt`, check the whole state, and return (generation, max |warm - cold| over the computed rows)."""
    warm = generator.generate(prompt, new_tokens, **kwargs)
    generator.coordinator.check_invariants()
    if generator.deployment.lengths is not None:  # the device KV length covers every token fed to the model
        assert generator.deployment.lengths.read().tolist() == [len(prompt) + new_tokens - 1]
    cold_tokens, cold_logits = cold_generate(model, prompt, new_tokens)
    rows = cold_logits[warm.prefill_start:]
    assert rows.shape == warm.logits.shape
    difference = (rows.float() - warm.logits.float()).abs().max().item()
    if difference <= TOLERANCE:
        assert warm.tokens == cold_tokens
    return warm, difference, rows


# ---- Llama ------------------------------------------------------------------------------------------------------


def test_llama_multi_turn_reuses_pages_and_warm_logits_equal_cold_fp32(llama):
    with CachedGenerator(llama, page_size=PAGE, num_pages=64, max_seq_len=256) as generator:
        first = tokens(21, 1)  # two full pages and a mid-page tail of 5 tokens
        turn1, difference, _ = serve_and_compare(generator, llama, first)
        assert turn1.prefill_start == 0 and difference == 0.0  # a cold request is the cold run
        # Turn 2 extends the conversation: prompt + answer + question. The 24 committed tokens (the last answer
        # token was never fed) are three full pages; the partial tail page is recomputed.
        second = first + turn1.tokens + tokens(6, 2)
        turn2, difference, _ = serve_and_compare(generator, llama, second)
        assert turn2.prefill_start == 24
        assert difference <= TOLERANCE
        # A page-aligned prompt fully cached (32 = 4 pages of turn 2): the last page is recomputed so that the
        # prefill has a token to produce logits from (full-input rewind).
        turn3, difference, _ = serve_and_compare(generator, llama, second[:32])
        assert turn3.prefill_start == 24
        assert difference <= TOLERANCE
        # The same prompt with another LoRA name shares nothing.
        turn4, difference, _ = serve_and_compare(generator, llama, second, lora_name="adapter-a")
        assert turn4.prefill_start == 0
        metrics = generator.coordinator.metrics
        assert metrics.hit_sequences == 2 and metrics.reused_tokens == 48


def test_llama_fp16_warm_logits_are_bit_identical_to_cold():
    model = tiny_llama(dtype=torch.float16)
    with CachedGenerator(model, page_size=PAGE, num_pages=64, max_seq_len=256) as generator:
        first = tokens(21, 3)
        turn1 = serve(generator, first, 4)
        for prompt, start in ((first + turn1.tokens + tokens(5, 4), 24), (first[:16] + tokens(8, 5), 16)):
            warm, _, rows = serve_and_compare(generator, model, prompt)
            assert warm.prefill_start == start
            assert warm.logits.dtype == torch.float16
            assert torch.equal(warm.logits, rows)


# ---- Bamba (Mamba2 + attention) ----------------------------------------------------------------------------------


def test_bamba_checkpoints_mid_page_page_aligned_and_end_of_turn_restore_exactly(bamba):
    with CachedGenerator(bamba, page_size=PAGE, num_pages=64, max_seq_len=256, snapshots=16) as generator:
        first = tokens(21, 6)
        turn1, difference, _ = serve_and_compare(generator, bamba, first)
        assert turn1.prefill_start == 0 and difference == 0.0
        restores = generator.coordinator.metrics.hybrid_restores
        # Mid-page checkpoint: the prefill-end state at 21 (5 tokens into page 3: a partial-KV snapshot).
        warm, difference, _ = serve_and_compare(generator, bamba, first + tokens(6, 7))
        assert warm.prefill_start == 21
        assert difference <= TOLERANCE
        # End of turn: the decode-end state at 24 committed tokens (prompt + 3 fed answer tokens).
        warm, difference, _ = serve_and_compare(generator, bamba, first + turn1.tokens + tokens(3, 8))
        assert warm.prefill_start == 24
        assert difference <= TOLERANCE
        # A page-aligned checkpoint: a 16-token prompt, then a prompt extending it.
        aligned = tokens(16, 9)
        serve(generator, aligned, 2)
        warm, difference, _ = serve_and_compare(generator, bamba, aligned + tokens(5, 10))
        assert warm.prefill_start == 16
        assert difference <= TOLERANCE
        # An end-of-turn checkpoint in the middle of a page: 19 + 4 answer tokens -> 22 committed.
        odd = tokens(19, 11)
        answer = serve(generator, odd, 4)
        warm, difference, _ = serve_and_compare(generator, bamba, odd + answer.tokens + tokens(4, 12))
        assert warm.prefill_start == 22
        assert difference <= TOLERANCE
        assert generator.coordinator.metrics.hybrid_restores == restores + 4


# ---- negative controls: the comparison can fail -----------------------------------------------------------------


class RestartedPositions(CachedGenerator):
    """What a loop that lets Bamba infer positions would do: the prefill restarts at position 0."""

    def _positions(self, start, end):
        return torch.arange(0, end - start).unsqueeze(0)


def test_negative_control_positions_restarted_at_zero_move_the_logits(llama):
    with RestartedPositions(llama, page_size=PAGE, num_pages=64, max_seq_len=256) as generator:
        first = tokens(24, 13)
        serve(generator, first, 2)
        warm, difference, _ = serve_and_compare(generator, llama, first + tokens(6, 14))
        assert warm.prefill_start == 24
        assert difference > MOVED


def test_negative_control_one_reused_page_holding_other_tokens_moves_the_logits(llama):
    with CachedGenerator(llama, page_size=PAGE, num_pages=64, max_seq_len=256) as generator:
        first = tokens(24, 15)
        serve(generator, first, 2)
        pool = generator.deployment.pool

        def overwrite_second_page(request):
            # Page 1 of the reused prefix gets page 0's K and V (tokens 0-7 instead of 8-15), in every layer.
            pages = request.sequence(0).base_pages
            assert len(pages) >= 3
            for layer in range(len(pool.layers)):
                pool.write_pages(layer, int(pages[1]), pool.read_pages(layer, int(pages[0]), 1))
                pool.write_pages(layer, int(pages[1]) + pool.num_pages,
                                 pool.read_pages(layer, int(pages[0]) + pool.num_pages, 1))

        warm, difference, _ = serve_and_compare(generator, llama, first + tokens(6, 16),
                                                before_prefill=overwrite_second_page)
        assert warm.prefill_start == 24
        assert difference > MOVED


def test_negative_control_zeroed_recurrent_state_moves_the_logits(bamba):
    with CachedGenerator(bamba, page_size=PAGE, num_pages=64, max_seq_len=256, snapshots=16) as generator:
        first = tokens(21, 17)
        serve(generator, first, 2)
        warm, difference, _ = serve_and_compare(generator, bamba, first + tokens(6, 18),
                                                before_prefill=lambda request: generator.deployment.state.zero_slot(0))
        assert warm.prefill_start == 21
        assert difference > MOVED


# ---- the pieces -------------------------------------------------------------------------------------------------


def test_deployment_sizes_every_object_from_one_description():
    recurrent = RecurrentGeometry(num_layers=2, heads=4, head_dim=16, state_size=8, conv_dim=144, conv_kernel=4)
    with Deployment(page_size=8, num_pages=40, max_seq_len=100, attention_layers=[(2, 8)], kv_dtype="fp32",
                    recurrent=recurrent, max_batch=2, recurrent_snapshots=5, partial_kv_snapshots=3,
                    backend="cpu") as d:
        assert d.model_state_kind == ctxcache.ModelStateKind.HYBRID
        assert d.table.max_pages_per_seq == 13 and d.table.max_batch == 2 and d.pool.num_pages == 40
        assert (d.snapshots.layout.recurrent_slots, d.snapshots.layout.partial_kv_slots) == (5, 3)
        assert d.state.dtypes[device.StatePart.CONV] == d.state.dtypes[device.StatePart.RECURRENT] == device.DType.FP32
        assert d.state.row_bytes(device.StatePart.RECURRENT) == 4 * 16 * 8 * 4
        metrics = d.coordinator.metrics
        assert (metrics.base_kv_pages.capacity, metrics.recurrent_snapshots.capacity,
                metrics.partial_kv_snapshots.capacity) == (40, 5, 3)
        assert d.footprint_bytes == (d.pool.footprint_bytes + d.state.footprint_bytes
                                     + d.snapshots.layout.footprint_bytes)
    with pytest.raises(ctxcache.InvalidArgumentError):
        Deployment(page_size=8, num_pages=4, max_seq_len=16)


def test_torch_tensors_travel_by_dlpack_without_a_copy_bf16_included():
    backend = device.Backend("cpu")
    pool = device.KvPagePool(backend, num_pages=4, page_size=4, layers=[(2, 3)], dtype="bf16")
    table = device.KvPageTable(backend, max_batch=1, max_pages_per_seq=2, num_pages=4)
    table.set_row(0, [3, 1])
    table.upload()
    k = torch.randn(1, 2, 7, 3, dtype=torch.bfloat16)
    v = torch.randn(1, 2, 7, 3, dtype=torch.bfloat16)
    device.scatter_kv(pool, table, k, v, first_position=1, layout="head_major")
    k_out = torch.empty(1, 2, 8, 3, dtype=torch.bfloat16)
    v_out = torch.empty_like(k_out)
    address = k_out.data_ptr()
    device.gather_kv_into(pool, table, k_out, v_out, layout="head_major")
    assert k_out.data_ptr() == address
    assert torch.equal(k_out[:, :, 1:], k) and torch.equal(v_out[:, :, 1:], v)
    # The pool's bytes are the tensor's bit patterns: bf16 K of position 1 is in K page 3, token 1.
    np.testing.assert_array_equal(pool.read_pages(0, 3, 1)[0, 1], k[0, :, 0].view(torch.uint16).numpy())
    with pytest.raises(ctxcache.InvalidArgumentError, match="head_major layout"):
        device.scatter_kv(pool, table, k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous(),
                          layout="head_major")
    with pytest.raises(ctxcache.ArgumentTypeError, match="C-contiguous"):
        device.scatter_kv(pool, table, k.transpose(1, 2), v.transpose(1, 2))
    with pytest.raises(ctxcache.ArgumentTypeError, match="holds fp16 elements, the pool stores bf16"):
        device.scatter_kv(pool, table, k.half(), v.half(), layout="head_major")
    # The resident state is writable through torch as well: the same memory.
    state = device.ResidentState(backend, max_batch=2, num_layers=1, recurrent_heads=1, recurrent_head_dim=2,
                                 state_size=2, conv_dim=2, conv_kernel=2)
    torch.from_dlpack(state.recurrent(0))[1] = 3.0
    np.testing.assert_array_equal(state.read_row("recurrent", 0, 1), np.full(4, 3.0, np.float32))


def test_model_identity_tells_models_apart_and_keys_the_hashes():
    a, same, other = tiny_llama(0), tiny_llama(0), tiny_llama(1)
    assert model_identity(a) == model_identity(same)
    assert model_identity(a) != model_identity(other)
    assert model_identity(a) != model_identity(tiny_llama(0, torch.float16))


@pytest.mark.gpu
def test_generation_loop_on_the_cuda_backend_equals_cold():
    if not torch.cuda.is_available():  # the extra pins a CPU build of torch; a CUDA one is the engine's choice
        pytest.skip(f"torch {torch.__version__} sees no CUDA device (a CPU build?): the model cannot run there")
    model = tiny_llama().to("cuda")
    with CachedGenerator(model, page_size=PAGE, num_pages=64, max_seq_len=256, backend="cuda") as generator:
        first = tokens(21, 19)
        turn1 = serve(generator, first, 4)
        warm, difference, _ = serve_and_compare(generator, model, first + turn1.tokens + tokens(6, 20))
        assert warm.prefill_start == 24
        assert difference <= TOLERANCE
    hybrid = tiny_bamba().to("cuda")
    with CachedGenerator(hybrid, page_size=PAGE, num_pages=64, max_seq_len=256, snapshots=16,
                         backend="cuda") as generator:
        first = tokens(21, 21)
        serve(generator, first, 2)
        warm, difference, _ = serve_and_compare(generator, hybrid, first + tokens(6, 22))
        assert warm.prefill_start == 21
        assert difference <= TOLERANCE
