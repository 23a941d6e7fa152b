"""The reference engine through Python: every reuse path served with real bytes, compared with a cold run.

Each scenario runs on the CPU backend and again on CUDA (marked ``gpu``: skipped with the probe's reason where
no device is usable). In every case the generated tokens and state digests equal the cold reference's, the
prefill starts where the reference says, and the metrics count what happened.
"""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import sim

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def toks(n, start=1000):
    return np.arange(start, start + n, dtype=np.int32)


def serve_and_compare(eng, requests):
    warm = eng.serve(requests)
    cold = eng.cold_reference(requests)
    assert len(warm) == len(requests)
    for i, (w, c) in enumerate(zip(warm, cold)):
        assert w.generated.dtype == np.int32
        assert w.generated.tolist() == c.generated.tolist(), f"request {i}"
        assert w.state_digest == c.state_digest, f"request {i}"
        assert len(w.state_digest) == 32
        assert c.prefill_start == 0
        assert w.cancelled == c.cancelled
        assert w.failed == c.failed
    eng.check_invariants()
    return warm


@pytest.mark.parametrize("backend", BACKENDS)
def test_vanilla_multi_turn_starts_at_the_decode_end_publication(backend):
    with sim.ReferenceEngine("attention", page_size=16, backend=backend) as eng:
        turn1 = toks(40)
        out1 = serve_and_compare(eng, [sim.Request(tokens=turn1, max_new_tokens=8)])
        assert len(out1[0].generated) == 8
        turn2 = np.concatenate([turn1, out1[0].generated, toks(10, 5000)])
        out2 = serve_and_compare(eng, [sim.Request(tokens=turn2, max_new_tokens=4)])
        assert out2[0].prefill_start == 32  # committed 47 at the end of turn 1: 2 full blocks
        m = eng.metrics
        assert m.admitted_sequences == 2
        assert m.hit_sequences == 1
        assert m.reused_tokens == 32


@pytest.mark.parametrize("backend", BACKENDS)
def test_lora_and_media_identities_do_not_cross(backend):
    with sim.ReferenceEngine("attention", page_size=16, backend=backend) as eng:
        prompt = toks(48)
        serve_and_compare(eng, [sim.Request(tokens=prompt, max_new_tokens=2, lora="a")])
        assert serve_and_compare(eng, [sim.Request(tokens=prompt, max_new_tokens=2, lora="b")])[0].prefill_start == 0
        assert serve_and_compare(eng, [sim.Request(tokens=prompt, max_new_tokens=2, lora="a")])[0].prefill_start == 32

        def with_image(pixels):
            return sim.Request(tokens=toks(48, 9000), max_new_tokens=2, media=[sim.MediaItem(pixels, 20, 8)])

        serve_and_compare(eng, [with_image(b"\x01\x02\x03")])
        assert serve_and_compare(eng, [with_image(b"\x01\x02\x04")])[0].prefill_start == 16
        assert serve_and_compare(eng, [with_image(b"\x01\x02\x03")])[0].prefill_start == 32
        assert eng.metrics.media_aware_sequences == 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("deployment", ["hybrid", "recurrent"])
def test_checkpoints_restore_mid_page_from_a_decode_end_capture(backend, deployment):
    with sim.ReferenceEngine(deployment, page_size=16, backend=backend) as eng:
        turn1 = toks(37)
        out1 = serve_and_compare(eng, [sim.Request(tokens=turn1, max_new_tokens=6)])
        turn2 = np.concatenate([turn1, out1[0].generated, toks(9, 7000)])
        out2 = serve_and_compare(eng, [sim.Request(tokens=turn2, max_new_tokens=5)])
        assert out2[0].prefill_start == 42  # 37 + 6 - 1: mid-page
        m = eng.metrics
        assert m.hybrid_restores == 1
        assert m.hybrid_capture_synchronizations >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pure_recurrent_engine_takes_zero_base_pages_and_serves_byte_exact(backend):
    # No attention layer, so no KV page: base_pages=0 builds no pool, and checkpoint reuse is unchanged.
    with sim.ReferenceEngine("recurrent", page_size=16, base_pages=0, backend=backend) as eng:
        turn1 = toks(37)
        out1 = serve_and_compare(eng, [sim.Request(tokens=turn1, max_new_tokens=6),
                                       sim.Request(tokens=toks(50, 4000), max_new_tokens=3)])
        turn2 = np.concatenate([turn1, out1[0].generated, toks(9, 7000)])
        out2 = serve_and_compare(eng, [sim.Request(tokens=turn2, max_new_tokens=5)])
        assert out2[0].prefill_start == 42
        m = eng.metrics
        assert (m.base_kv_pages.free, m.base_kv_pages.capacity) == (0, 0)
        assert m.hybrid_restores == 1 and m.reused_tokens == 42


@pytest.mark.parametrize("deployment", ["attention", "hybrid", "eagle"])
def test_zero_base_pages_is_refused_where_the_model_has_attention(deployment):
    with pytest.raises(ctxcache.ContractError) as refused:
        sim.ReferenceEngine(deployment, base_pages=0)
    assert str(refused.value) == (
        f"ctxc_sim_engine_create: ReferenceEngine: basePages must be positive for the {deployment} deployment: it "
        "has attention layers, whose KV lives in pages (0 pages is only for the pure-recurrent deployment)")
    with pytest.raises(ctxcache.ContractError, match="sizes must be positive"):
        sim.ReferenceEngine("recurrent", base_pages=-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eagle_pair_publication_and_full_page_replay(backend):
    with sim.ReferenceEngine("eagle", page_size=16, backend=backend) as eng:
        turn1 = toks(50)
        out1 = serve_and_compare(eng, [sim.Request(tokens=turn1, max_new_tokens=6)])
        assert eng.metrics.spec_pair_publications >= 1
        turn2 = np.concatenate([turn1, out1[0].generated, toks(7, 300)])
        out2 = serve_and_compare(eng, [sim.Request(tokens=turn2, max_new_tokens=4)])
        assert out2[0].prefill_start == 32  # 3 paired blocks, the boundary page replayed
        assert eng.metrics.spec_full_page_replays == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("length", [37, 32, 33])  # mid-page, page-aligned, one past a page
def test_hybrid_mtp_next_turn_restores_the_checkpoint(backend, length):
    with sim.ReferenceEngine("hybrid", speculative="mtp", page_size=16, snapshot_slots=8, backend=backend) as eng:
        turn1 = toks(length)
        out1 = serve_and_compare(eng, [sim.Request(tokens=turn1, max_new_tokens=6)])
        turn2 = np.concatenate([turn1, out1[0].generated, toks(9, 7000)])
        out2 = serve_and_compare(eng, [sim.Request(tokens=turn2, max_new_tokens=5)])
        assert out2[0].prefill_start == length  # the prompt's own endpoint; nothing after prefill is published
        m = eng.metrics
        assert m.hybrid_restores == 1
        assert m.spec_pair_publications == 2
        assert serve_and_compare(eng, [sim.Request(tokens=turn1, max_new_tokens=2)])[0].prefill_start == 0
        assert eng.drain()


def test_hybrid_mtp_is_refused_where_appendix_c_refuses_it():
    with pytest.raises(ctxcache.ContractError, match="needs the hybrid deployment"):
        sim.ReferenceEngine("attention", speculative="mtp")
    with pytest.raises(ctxcache.ContractError, match="prefill-state-only"):
        sim.ReferenceEngine("hybrid", speculative="mtp", commit_policy="including_generated_tokens")
    with pytest.raises(ctxcache.InvalidArgumentError, match="speculative"):
        sim.ReferenceEngine("hybrid", speculative="eagle")


@pytest.mark.parametrize("backend", BACKENDS)
def test_joiners_retraction_compaction_cancellation_and_failure(backend):
    with sim.ReferenceEngine("attention", page_size=16, max_batch=3, backend=backend) as eng:
        system = toks(32, 1)
        requests = [sim.Request(tokens=np.concatenate([system, toks(5 + i, 100 * (i + 1))]),
                                max_new_tokens=2 + 3 * (i % 3), cancel_after=3 if i == 4 else None,
                                fail_after=2 if i == 5 else None, seating_failures=1 if i in (3, 6) else 0)
                    for i in range(8)]
        out = serve_and_compare(eng, requests)
        assert eng.stats.joiners >= 3
        assert eng.stats.retractions >= 1
        assert sum(o.joined for o in out) >= 3
        assert eng.stats.compactions >= 3
        assert out[4].cancelled and len(out[4].generated) == 3
        assert out[5].failed and len(out[5].generated) == 2
        assert out[7].prefill_start == 32
        assert eng.drain()


@pytest.mark.parametrize("backend", BACKENDS)
def test_failed_synchronisations_quarantine_and_lose_nothing(backend):
    for deployment in ("attention", "hybrid", "eagle"):
        with sim.ReferenceEngine(deployment, page_size=16, backend=backend, sync_failure_rate=0.25,
                                 fault_seed=11) as eng:
            system = toks(40, 1)
            requests = [sim.Request(tokens=np.concatenate([system, toks(3 + i % 7, 1000 * i)]),
                                    max_new_tokens=1 + i % 6) for i in range(20)]
            serve_and_compare(eng, requests)
            assert eng.stats.sync_failures > 0
            assert eng.stats.restarts > 0
            assert eng.drain(), ctxcache._ffi.last_error()


def test_bad_requests_raise_typed_errors_and_serve_nothing():
    with sim.ReferenceEngine("attention") as eng:
        with pytest.raises(ctxcache.ContractError, match="empty prompt"):
            eng.serve([sim.Request(tokens=np.zeros(0, dtype=np.int32))])
        with pytest.raises(ctxcache.ContractError, match="maxNewTokens"):
            eng.serve([sim.Request(tokens=toks(4), max_new_tokens=0)])
        with pytest.raises(ctxcache.ArgumentTypeError):
            eng.serve([{"tokens": toks(4)}])
        with pytest.raises(ctxcache.InvalidArgumentError):
            sim.ReferenceEngine("transformer")
        with pytest.raises(ctxcache.ContractError, match="sizes must be positive"):
            sim.ReferenceEngine("attention", page_size=0)
        assert eng.metrics.admitted_sequences == 0
    with pytest.raises(ctxcache.InvalidHandleError):
        eng.serve([sim.Request(tokens=toks(4))])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("window", "page"), [(32, 8), (20, 8)])
def test_sliding_window_holds_only_its_window_and_matches_the_full_history(backend, window, page):
    with sim.ReferenceEngine("attention", page_size=page, backend=backend, reuse=False,
                             sliding_window=window) as eng:
        requests = [sim.Request(tokens=toks(n, 100 * n), max_new_tokens=3 + (n * 7) % 50)
                    for n in (1, window - 1, window, window + 1, 2 * window + 3, 70)]
        serve_and_compare(eng, requests)
        reservation = 2 * (-(-window // page) + 1) + 1
        assert 0 < eng.peak_pages_per_sequence <= reservation
        assert eng.drain()
    with sim.ReferenceEngine("attention", page_size=page, backend=backend) as eng:
        assert eng.peak_pages_per_sequence == 0


def test_sliding_window_needs_reuse_off():
    with pytest.raises(ctxcache.ContractError):
        sim.ReferenceEngine("attention", sliding_window=16)
    with pytest.raises(ctxcache.ContractError):
        sim.ReferenceEngine("eagle", sliding_window=16, reuse=False)
