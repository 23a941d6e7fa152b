"""The CUDA backend against the CPU backend, byte for byte, through Python. Marked ``gpu``: skipped with the
probe's reason when no CUDA device is usable (failing instead under CTXCACHE_REQUIRE_GPU=1)."""

from __future__ import annotations

import numpy as np
import pytest

from ctxcache import device
from ctxcache.device import StatePart

pytestmark = pytest.mark.gpu


@pytest.fixture
def backends():
    cpu = device.Backend("cpu")
    cuda = device.Backend("cuda")
    yield cpu, cuda
    cuda.close()
    cpu.close()


def _random(rng, nbytes):
    return rng.integers(0, 256, size=nbytes, dtype=np.uint8)


def test_snapshot_round_trip_matches(backends):
    results = []
    for backend in backends:
        rng = np.random.default_rng(1)
        state = device.ResidentState(backend, max_batch=4, num_layers=24, recurrent_heads=4, recurrent_head_dim=16,
                                     state_size=8, conv_dim=33, conv_kernel=4, conv_dtype="bf16", hidden_size=96)
        pool = device.KvPagePool(backend, num_pages=6, page_size=16, layers=[(2, 24)] * 8, dtype="fp16")
        for slot in range(4):
            for layer in range(24):
                for part in (StatePart.RECURRENT, StatePart.CONV):
                    state.write_row(part, layer, slot, _random(rng, state.row_bytes(part)))
        for layer in range(8):
            pool.write_pages(layer, 0, _random(rng, 12 * pool.page_bytes(layer)))
        storage = device.SnapshotStorage(backend, state=state, base_pool=pool, recurrent_budget_bytes=1 << 22,
                                         partial_kv_budget_bytes=1 << 20)
        before = backend.counters.kernels
        storage.capture(batch_slot=2, recurrent_slot=1, partial_kv_slot=0, base_page=3, valid_tokens=7)
        storage.restore(batch_slot=0, recurrent_slot=1, partial_kv_slot=0, base_page=5, valid_tokens=7)
        assert backend.counters.kernels == before + 2
        out = [state.read_row(part, layer, slot).tobytes() for slot in range(4) for layer in range(24)
               for part in (StatePart.RECURRENT, StatePart.CONV)]
        out += [pool.read_pages(layer, 0, 12).tobytes() for layer in range(8)]
        results.append(out)
    assert results[0] == results[1]


@pytest.mark.parametrize("pool_dtype,out_dtype", [("fp16", "fp16"), ("bf16", "bf16"), ("fp32", "fp32"),
                                                  ("fp8_e4m3", "fp16"), ("fp8_e4m3", "bf16"), ("fp8_e4m3", "fp32")])
def test_gather_matches(backends, pool_dtype, out_dtype):
    results = []
    for backend in backends:
        rng = np.random.default_rng(2)
        pool = device.KvPagePool(backend, num_pages=8, page_size=16, layers=[(4, 32)], dtype=pool_dtype)
        pool.write_pages(0, 0, _random(rng, 16 * pool.page_bytes(0)))
        table = device.KvPageTable(backend, max_batch=2, max_pages_per_seq=4, num_pages=8, mode="sparse_window")
        table.set_row(0, [3, 1, -1, 6])
        table.set_row(1, [0, 7])
        table.upload()
        lengths = device.KvLengths(backend, 2)
        lengths.set([60, 20])
        k, v = device.gather_kv(pool, table, lengths, batch=2, seq_len=61, out_dtype=out_dtype, k_scale=0.5, v_scale=3.0)
        results.append((k.tobytes(), v.tobytes()))
    assert results[0] == results[1]


def test_compaction_rebasing_and_hashing_match(backends):
    results = []
    for backend in backends:
        rng = np.random.default_rng(3)
        buffer = backend.buffer(_random(rng, 9 * 4100 + 3))
        device.compact_rows(buffer, row_bytes=4100, rows=9, old_to_new=[0, -1, 1, 2, -1, -1, 3, -1, 4], new_batch=5,
                            offset=3)
        indices = backend.buffer(np.arange(-2, 40, dtype=np.int32))
        device.rebase_execution_rows(indices, count=42, old_to_new=[-1, 0, 1, -1], new_batch=2, rows_per_sequence=9)
        data = backend.buffer(_random(rng, (1 << 21) + 5))
        digest = device.hash_chunked(data, offset=5)
        results.append((buffer.read().tobytes(), indices.read().tobytes(), digest.tolist()))
    assert results[0] == results[1]


def test_cuda_views_describe_device_memory_and_export_through_dlpack(backends):
    cpu, cuda = backends
    pool = device.KvPagePool(cuda, num_pages=4, page_size=16, layers=[(2, 32)], dtype="fp16")
    view = pool.layer(0)
    assert view.__dlpack_device__() == (2, 0)  # kDLCUDA, ordinal 0
    assert view.shape == (2, 4, 16, 2, 32) and view.data % 256 == 0
    capsule = view.__dlpack__(stream=None)  # the backend's work is finished first
    assert type(capsule).__name__ == "PyCapsule"
    del capsule
    with pytest.raises(BufferError):
        view.__dlpack__(dl_device=(1, 0))
    pool.close()
    assert cuda.allocated_bytes == 0


def test_cuda_pool_over_engine_memory_and_the_callers_stream(backends):
    cpu, cuda = backends
    engine = device.DeviceBuffer(cuda, device.KvPagePool.required_bytes(num_pages=4, page_size=16, layers=[(2, 32)]))
    engine.write(np.arange(engine.nbytes, dtype=np.uint64).astype(np.uint8))
    before = cuda.allocated_bytes
    pool = device.KvPagePool(cuda, num_pages=4, page_size=16, layers=[(2, 32)],
                             external=(engine.view().data, engine.nbytes))
    assert cuda.allocated_bytes == before
    assert pool.read_pages(0, 0, 1).view(np.uint8).reshape(-1).tolist() == [i % 256 for i in range(2048)]  # kept
    other = device.Backend("cuda")
    cuda.set_stream(other.stream)  # an engine's stream (here: another backend's own, which it keeps)
    assert cuda.stream == other.stream
    pool.write_pages(0, 1, np.ones((1, 16, 2, 32), np.float16))
    assert (pool.read_pages(0, 1, 1) == 1).all()
    cuda.set_stream(None)
    assert cuda.stream != other.stream
    pool.close()
    other.close()
