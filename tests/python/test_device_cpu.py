"""The device layer through Python on the CPU backend: every operation against hand-computed bytes, and typed
errors for bad geometry, ids, maps and dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import device
from ctxcache.device import StatePart

FNV_BASIS = (0x6C62272E07BB0142 << 64) | 0x62B821756295C58D
FNV_PRIME = (1 << 88) + 0x13B


def fnv1a128(data: bytes, state: int = FNV_BASIS) -> int:
    """Pure-Python 128-bit FNV-1a: a reference independent of the library."""
    for byte in data:
        state = ((state ^ byte) * FNV_PRIME) & ((1 << 128) - 1)
    return state


def digest(state: int) -> list[int]:
    return [state >> 64, state & ((1 << 64) - 1)]


@pytest.fixture
def cpu():
    with device.Backend("cpu") as backend:
        yield backend


def test_auto_backend_is_cpu_and_cuda_is_unsupported_without_a_device():
    if ctxcache.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    with device.Backend() as backend:
        assert backend.kind == device.BackendKind.CPU
    with pytest.raises(ctxcache.UnsupportedError, match="createCudaBackend"):
        device.Backend("cuda")
    with pytest.raises(ctxcache.InvalidArgumentError):
        device.Backend("tpu")


def test_pool_pages_round_trip_with_dtype_checks(cpu):
    pool = device.KvPagePool(cpu, num_pages=3, page_size=4, layers=[(2, 8), (1, 4)], dtype="fp16")
    assert pool.page_bytes(0) == 4 * 2 * 8 * 2
    assert pool.footprint_bytes == 768 + 256
    assert cpu.allocated_bytes == pool.footprint_bytes
    pages = np.arange(2 * 4 * 2 * 8, dtype=np.float16).reshape(2, 4, 2, 8)
    pool.write_pages(0, 1, pages)  # K page 1 and K page 2
    np.testing.assert_array_equal(pool.read_pages(0, 1, 2), pages)
    assert not pool.read_pages(0, 4, 1).any()  # the V page of K page 1 is untouched
    with pytest.raises(ctxcache.ArgumentTypeError, match="holds fp32 elements, the pool stores fp16"):
        pool.write_pages(0, 0, pages.astype(np.float32))
    # Full shape, not just the element count: heads before tokens is another layout, refused before any write.
    with pytest.raises(ctxcache.InvalidArgumentError, match=r"expected \(count, page_size, kv_heads, head_dim\)"):
        pool.write_pages(0, 0, np.ascontiguousarray(pages.transpose(0, 2, 1, 3)))
    with pytest.raises(ctxcache.InvalidArgumentError, match="expected"):
        pool.write_pages(0, 0, pages.reshape(2, 4, 16))
    np.testing.assert_array_equal(pool.read_pages(0, 0, 1), np.zeros((1, 4, 2, 8), np.float16))
    with pytest.raises(ctxcache.ArgumentTypeError, match="C-contiguous"):
        pool.write_pages(0, 0, np.asfortranarray(pages[0].reshape(8, 8)))
    with pytest.raises(ctxcache.ContractError, match="outside"):
        pool.write_pages(0, 5, pages)
    with pytest.raises(ctxcache.ContractError, match="numPages"):
        device.KvPagePool(cpu, num_pages=0, page_size=4, layers=[(1, 1)])
    with pytest.raises(ctxcache.InvalidArgumentError):
        device.KvPagePool(cpu, num_pages=1, page_size=4, layers=[(1, 1)], dtype=7)


def test_page_table_rows_uploads_and_compaction(cpu):
    table = device.KvPageTable(cpu, max_batch=4, max_pages_per_seq=3, num_pages=10)
    table.set_row(1, [7, 2])
    table.set_row(2, [4])
    np.testing.assert_array_equal(table.host_table()[1], [[7, 2, -1], [17, 12, -1]])
    assert table.dirty
    assert table.upload() == 1  # rows 1 and 2 coalesce into one copy
    np.testing.assert_array_equal(table.device_table(), table.host_table())
    table.compact_rows([-1, 0, 1, -1], new_batch=2)
    np.testing.assert_array_equal(table.host_table()[0], [[7, 2, -1], [17, 12, -1]])
    np.testing.assert_array_equal(table.host_table()[1], [[4, -1, -1], [14, -1, -1]])
    table.check_invariants()
    with pytest.raises(ctxcache.ContractError, match="overlapping"):
        table.compact_rows([0, 0], new_batch=1)
    with pytest.raises(ctxcache.ContractError, match="page id 10"):
        table.set_row(0, [10])
    with pytest.raises(ctxcache.ContractError, match="hole"):
        table.set_entry(3, 1, 5)
    with pytest.raises(ctxcache.ArgumentTypeError):
        table.set_row(0, np.array([1, 2], dtype=np.int64))


def test_kv_lengths(cpu):
    lengths = device.KvLengths(cpu, 8)
    lengths.set([128, 0, 64, 5])
    lengths.add(1)
    increments = device.KvLengths(cpu, 8)
    increments.set([3, 0, 2, 1])
    lengths.add(increments)
    np.testing.assert_array_equal(lengths.read(), [132, 1, 67, 7])
    lengths.compact([0, -1, 1, -1], new_batch=2)
    np.testing.assert_array_equal(lengths.read(), [132, 67])
    with pytest.raises(ctxcache.ContractError, match="reorders"):
        lengths.compact([1, 0], new_batch=2)


def _hybrid(backend):
    state = device.ResidentState(backend, max_batch=3, num_layers=2, recurrent_heads=2, recurrent_head_dim=2,
                                 state_size=3, recurrent_dtype="fp32", conv_dim=3, conv_kernel=2, conv_dtype="fp16",
                                 hidden_size=5)
    base = device.KvPagePool(backend, num_pages=4, page_size=4, layers=[(1, 2)], dtype="fp16")
    return state, base


def test_snapshot_layout_is_sized_from_budgets(cpu):
    state, base = _hybrid(cpu)
    storage = device.SnapshotStorage(cpu, state=state, base_pool=base, recurrent_budget_bytes=1000,
                                     partial_kv_budget_bytes=100, boundary_hidden=True)
    layout = storage.layout
    assert layout.recurrent_bytes_per_slot == 2 * (2 * 2 * 3 * 4 + 3 * 2 * 2) + 5 * 2  # 130
    assert layout.partial_kv_bytes_per_slot == 2 * 4 * 1 * 2 * 2                      # 32
    assert (layout.recurrent_slots, layout.partial_kv_slots) == (7, 3)
    assert layout.footprint_bytes == 7 * 130 + 3 * 32
    assert layout.max_descriptors == 2 * 2 + 1 + 2


def test_snapshot_capture_and_restore_exact_bytes_in_one_launch(cpu):
    state, base = _hybrid(cpu)
    storage = device.SnapshotStorage(cpu, state=state, base_pool=base, recurrent_budget_bytes=1000,
                                     partial_kv_budget_bytes=100, boundary_hidden=True)
    rec = [np.arange(12, dtype=np.float32) + 100 * layer for layer in range(2)]
    conv = [np.arange(6, dtype=np.float16) + 10 * layer for layer in range(2)]
    hidden = np.linspace(-1, 1, 5).astype(np.float16)
    for layer in range(2):
        state.write_row(StatePart.RECURRENT, layer, 1, rec[layer])
        state.write_row("conv", layer, 1, conv[layer])
    state.write_row(StatePart.BOUNDARY_HIDDEN, 0, 1, hidden)
    k_page = np.arange(8, dtype=np.float16).reshape(1, 4, 1, 2)
    v_page = -np.arange(8, dtype=np.float16).reshape(1, 4, 1, 2)
    base.write_pages(0, 2, k_page)
    base.write_pages(0, 6, v_page)

    before = cpu.counters
    storage.capture(batch_slot=1, recurrent_slot=4, partial_kv_slot=2, base_page=2, valid_tokens=3)
    assert cpu.counters.kernels == before.kernels + 1
    assert storage.read_region(StatePart.RECURRENT, 1, 4).tobytes() == rec[1].tobytes()
    assert storage.read_region(StatePart.CONV, 0, 4).tobytes() == conv[0].tobytes()
    assert storage.read_region(StatePart.BOUNDARY_HIDDEN, 0, 4).tobytes() == hidden.tobytes()
    partial = storage.read_region(StatePart.PARTIAL_KV, 0, 2)
    assert partial[:12].tobytes() == k_page.tobytes()[:12]
    assert partial[16:28].tobytes() == v_page.tobytes()[:12]
    assert not partial[12:16].any() and not partial[28:].any()

    storage.restore(batch_slot=0, recurrent_slot=4, partial_kv_slot=2, base_page=0, valid_tokens=3)
    assert cpu.counters.kernels == before.kernels + 2
    np.testing.assert_array_equal(state.read_row(StatePart.RECURRENT, 1, 0), rec[1])
    np.testing.assert_array_equal(state.read_row(StatePart.CONV, 1, 0), conv[1])
    restored_k = base.read_pages(0, 0, 1)
    np.testing.assert_array_equal(restored_k.reshape(-1)[:6], np.arange(6, dtype=np.float16))
    assert not restored_k.reshape(-1)[6:].any()

    with pytest.raises(ctxcache.ContractError, match="validTokens 4"):
        storage.capture(partial_kv_slot=0, base_page=0, valid_tokens=4)
    with pytest.raises(ctxcache.ContractError, match="recurrent slot 7"):
        storage.capture(batch_slot=0, recurrent_slot=7)
    with pytest.raises(ctxcache.ContractError, match="neither"):
        storage.restore()
    with pytest.raises(ctxcache.ArgumentTypeError, match="float32"):
        state.write_row(StatePart.RECURRENT, 0, 0, np.zeros(12, dtype=np.float64))


def test_zero_slot_and_resident_compaction(cpu):
    state, _ = _hybrid(cpu)
    for slot in range(3):
        for layer in range(2):
            state.write_row(StatePart.RECURRENT, layer, slot, np.full(12, slot + 1, dtype=np.float32))
            state.write_row(StatePart.CONV, layer, slot, np.full(6, slot + 1, dtype=np.float16))
    state.zero_slot(0)
    assert not state.read_row(StatePart.RECURRENT, 1, 0).any()
    state.compact([-1, 0, 1], new_batch=2)
    np.testing.assert_array_equal(state.read_row(StatePart.RECURRENT, 0, 0), np.full(12, 2, dtype=np.float32))
    np.testing.assert_array_equal(state.read_row(StatePart.CONV, 1, 1), np.full(6, 3, dtype=np.float16))


@pytest.mark.parametrize("row_bytes", [1, 2, 4, 12, 37])
def test_compact_rows_in_place_for_any_element_size(cpu, row_bytes):
    data = (np.arange(6 * row_bytes) * 7 % 251).astype(np.uint8)
    buffer = cpu.buffer(data)
    device.compact_rows(buffer, row_bytes=row_bytes, rows=6, old_to_new=[-1, 0, -1, 1, 2, -1], new_batch=3)
    rows = data.reshape(6, row_bytes)
    expected = np.concatenate([rows[[1, 3, 4]], rows[3:]])
    np.testing.assert_array_equal(buffer.read().reshape(6, row_bytes), expected)


def test_compaction_maps_are_validated(cpu):
    buffer = cpu.buffer(64)
    with pytest.raises(ctxcache.ContractError, match="overlapping"):
        device.compact_rows(buffer, row_bytes=4, rows=4, old_to_new=[0, 0, -1, -1], new_batch=1)
    with pytest.raises(ctxcache.ContractError, match="reorders"):
        device.compact_rows(buffer, row_bytes=4, rows=4, old_to_new=[1, 0, -1, -1], new_batch=2)
    with pytest.raises(ctxcache.ContractError, match="outside the buffer"):
        device.compact_rows(buffer, row_bytes=32, rows=4, old_to_new=[0, 1], new_batch=2)


def test_rebase_execution_rows(cpu):
    buffer = cpu.buffer(np.array([0, 3, 5, 7, 9, 11, -1, 12, 4], dtype=np.int32))
    device.rebase_execution_rows(buffer, count=9, old_to_new=[-1, 0, -1, 1], new_batch=2, rows_per_sequence=3)
    np.testing.assert_array_equal(buffer.read(np.int32), [-1, 0, 2, -1, 3, 5, -1, -1, 1])


def test_gather_with_zero_fill_and_fp8_dequantisation(cpu):
    pool = device.KvPagePool(cpu, num_pages=3, page_size=2, layers=[(1, 2)], dtype="fp16")
    layer = np.array([100 * f + 10 * t + d for f in range(6) for t in range(2) for d in range(2)], dtype=np.float16)
    pool.write_pages(0, 0, layer)
    table = device.KvPageTable(cpu, max_batch=2, max_pages_per_seq=3, num_pages=3)
    table.set_row(0, [2, 0])
    table.set_row(1, [1])
    table.upload()
    lengths = device.KvLengths(cpu, 2)
    lengths.set([3, 5])
    k, v = device.gather_kv(pool, table, lengths, batch=2, seq_len=5)
    assert k.shape == (2, 5, 1, 2) and k.dtype == np.float16
    np.testing.assert_array_equal(k.reshape(2, -1), [[200, 201, 210, 211, 0, 1, 0, 0, 0, 0],
                                                     [100, 101, 110, 111, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(v.reshape(2, -1)[0], [500, 501, 510, 511, 300, 301, 0, 0, 0, 0])
    with pytest.raises(ctxcache.ContractError, match="wrong dtype"):
        device.gather_kv(pool, table, batch=1, seq_len=2, out_dtype="fp32")

    fp8 = device.KvPagePool(cpu, num_pages=3, page_size=2, layers=[(1, 2)], dtype="fp8_e4m3")
    fp8.write_pages(0, 0, np.array([0x38, 0x3C, 0xC0, 0x7E], dtype=np.uint8))  # 1, 1.5, -2, 448
    fp8.write_pages(0, 3, np.array([0x30] * 4, dtype=np.uint8))                # 0.5
    table.set_row(0, [0])
    table.upload()
    k, v = device.gather_kv(fp8, table, batch=1, seq_len=2, out_dtype="fp32", k_scale=2.0, v_scale=4.0)
    np.testing.assert_array_equal(k.reshape(-1), np.array([2, 3, -4, 896], dtype=np.float32))
    np.testing.assert_array_equal(v.reshape(-1), np.full(4, 2, dtype=np.float32))
    k16, _ = device.gather_kv(fp8, table, batch=1, seq_len=2, out_dtype="fp16", k_scale=2.0)
    assert k16.view(np.uint16).tolist() == [[[[0x4000, 0x4200]], [[0xC400, 0x6300]]]]


def test_chunked_hash_matches_an_independent_python_reference(cpu):
    data = b"abcde"
    partials = [fnv1a128(b"abc"), fnv1a128(b"de")]  # 2 chunks of ceil(5 / 2) = 3 bytes
    stream = bytes([18]) + (5).to_bytes(8, "little")
    for p in partials:
        stream += (p >> 64).to_bytes(8, "little") + (p & ((1 << 64) - 1)).to_bytes(8, "little")
    expected = digest(fnv1a128(stream))
    assert device.hash_chunked_host(data, num_chunks=2).tolist() == expected
    buffer = cpu.buffer(np.frombuffer(b"xx" + data, dtype=np.uint8))
    assert device.hash_chunked(buffer, 5, offset=2, num_chunks=2).tolist() == expected


def test_chunked_hash_device_path_equals_host_path(cpu):
    rng = np.random.default_rng(3)
    for size in (0, 1, 2047, 2049, 1 << 20):
        data = rng.integers(0, 256, size=size, dtype=np.uint8)
        buffer = cpu.buffer(max(size, 1))
        if size:
            buffer.write(data)
        for chunks in (1, 7, device.DEFAULT_HASH_CHUNKS):
            host = device.hash_chunked_host(data, num_chunks=chunks)
            np.testing.assert_array_equal(device.hash_chunked(buffer, size, num_chunks=chunks), host)


def test_objects_outlive_their_backend_handle_and_close_in_any_order():
    backend = device.Backend("cpu")
    pool = device.KvPagePool(backend, num_pages=2, page_size=2, layers=[(1, 1)])
    storage = device.SnapshotStorage(backend, base_pool=pool, partial_kv_budget_bytes=64)
    backend.close()
    pool.close()
    storage.capture(partial_kv_slot=0, base_page=1, valid_tokens=1)  # the storage keeps the pool alive
    storage.close()
    with pytest.raises(ctxcache.InvalidHandleError):
        pool.page_bytes(0)
    with pytest.raises(ctxcache.InvalidHandleError):
        device.Backend.synchronize(backend)


def test_scatter_and_gather_into_caller_arrays_in_both_layouts_without_a_copy(cpu):
    pool = device.KvPagePool(cpu, num_pages=4, page_size=4, layers=[(2, 3)], dtype="bf16")
    table = device.KvPageTable(cpu, max_batch=1, max_pages_per_seq=3, num_pages=4)
    table.set_row(0, [2, 0, 3])
    table.upload()
    rng = np.random.default_rng(5)
    k = rng.integers(1, 2**15, size=(1, 2, 6, 3), dtype=np.uint16)  # bf16 bit patterns, head-major
    v = rng.integers(1, 2**15, size=(1, 2, 6, 3), dtype=np.uint16)
    kernels = cpu.counters.kernels
    device.scatter_kv(pool, table, k, v, first_position=3, layout="head_major")
    assert cpu.counters.kernels == kernels + 1  # K and V in one launch
    # Position 3 is the last token of K page 2; positions 4-7 fill K page 0; position 8 starts K page 3.
    np.testing.assert_array_equal(pool.read_pages(0, 2, 1)[0, 3], k[0, :, 0])
    np.testing.assert_array_equal(pool.read_pages(0, 0, 1)[0], k[0, :, 1:5].transpose(1, 0, 2))
    np.testing.assert_array_equal(pool.read_pages(0, 3 + 4, 1)[0, 0], v[0, :, 5])
    k_out = np.full((1, 9, 2, 3), 7, np.uint16)
    v_out = np.full((1, 9, 2, 3), 7, np.uint16)
    address = k_out.__array_interface__["data"][0]
    device.gather_kv_into(pool, table, k_out, v_out)  # token-major: the transpose of what went in
    assert k_out.__array_interface__["data"][0] == address
    np.testing.assert_array_equal(k_out[0, 3:], k[0].transpose(1, 0, 2))
    np.testing.assert_array_equal(v_out[0, 3:], v[0].transpose(1, 0, 2))
    assert not k_out[0, :3].any()  # positions 0-2 were never written
    k_head, _ = device.gather_kv(pool, table, batch=1, seq_len=9, layout="head_major")
    np.testing.assert_array_equal(k_head[0, :, 3:], k[0])
    with pytest.raises(ctxcache.ArgumentTypeError, match="read-only"):
        k_out.flags.writeable = False
        device.gather_kv_into(pool, table, k_out, v_out)
