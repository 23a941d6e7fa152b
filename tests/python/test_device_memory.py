"""Memory an engine can use, through Python on the CPU backend: DLPack views share the objects' bytes both ways
(numpy stands in for torch and CuPy), tensors keep their memory alive past the Python object and its handle,
objects built over the engine's own arrays use them in place, and the caller's stream is taken."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import ctxcache
from ctxcache import device
from ctxcache.device import Element


@pytest.fixture
def cpu():
    with device.Backend("cpu") as backend:
        yield backend


def aligned(n: int, dtype=np.uint8) -> np.ndarray:
    """n zeroed elements starting 256-byte aligned (what external pools and state need)."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(n * itemsize + 256, np.uint8)
    start = -raw.__array_interface__["data"][0] % 256
    return raw[start:start + n * itemsize].view(dtype)


def test_a_pool_layer_is_the_same_memory_both_ways(cpu):
    pool = device.KvPagePool(cpu, num_pages=4, page_size=2, layers=[(1, 4), (2, 3)], dtype="fp32")
    view = pool.layer(1)
    assert view.__dlpack_device__() == (1, 0)
    assert view.shape == (2, 4, 2, 2, 3)
    assert view.element == Element.FP32
    assert view.nbytes == 2 * 4 * pool.page_bytes(1)
    assert not view.external
    array = np.from_dlpack(view)
    assert array.shape == (2, 4, 2, 2, 3) and array.dtype == np.float32 and array.flags.writeable
    array[1, 2] = 7.5  # the engine writes V page 2 (flat page 6)
    assert (pool.read_pages(1, 6, 1) == 7.5).all()
    pool.write_pages(1, 0, np.full((1, 2, 2, 3), 3.0, np.float32))
    assert (array[0, 0] == 3.0).all()
    assert view.data == array.__array_interface__["data"][0]
    whole = pool.memory()
    assert whole.nbytes == pool.footprint_bytes
    assert whole.data <= view.data and view.data % 256 == 0


def test_every_object_shows_its_memory(cpu):
    table = device.KvPageTable(cpu, max_batch=3, max_pages_per_seq=2, num_pages=8)
    table.set_row(1, [4, 6])
    entries = np.from_dlpack(table.device_view)
    assert entries.shape == (3, 2, 2) and entries.dtype == np.int32
    assert (entries[1] == -1).all()  # current only after upload
    table.upload()
    assert entries[1].tolist() == [[4, 6], [12, 14]]

    lengths = device.KvLengths(cpu, 4)
    lengths.set([5, 9])
    values = np.from_dlpack(lengths.device_view)
    assert values.shape == (4,) and lengths.active_batch == 2
    values[1] = 42  # the engine's kernel updates a length
    assert lengths.read().tolist() == [5, 42]

    state = device.ResidentState(cpu, max_batch=3, num_layers=2, recurrent_heads=1, recurrent_head_dim=2, state_size=2,
                                 conv_dim=2, conv_kernel=3, conv_dtype="bf16", hidden_size=4)
    recurrent = np.from_dlpack(state.recurrent(1))
    assert recurrent.shape == (3, 4) and recurrent.dtype == np.float32
    recurrent[2] = [1, 2, 3, 4]
    assert state.read_row("recurrent", 1, 2).tolist() == [1, 2, 3, 4]
    with pytest.raises((BufferError, TypeError, RuntimeError)):
        np.from_dlpack(state.conv(0))  # bfloat16: numpy has none
    conv = np.from_dlpack(state.conv(0).view("uint16"))
    state.write_row("conv", 0, 1, np.arange(6, dtype=np.uint16))
    assert conv[1].tolist() == list(range(6))
    hidden = np.from_dlpack(state.hidden())
    assert hidden.dtype == np.float16 and hidden.shape == (3, 4)
    assert state.memory().nbytes == state.footprint_bytes

    storage = device.SnapshotStorage(cpu, state=state, recurrent_budget_bytes=1000)
    slab = np.from_dlpack(storage.recurrent_slab)
    layout = storage.layout
    assert slab.shape == (layout.recurrent_slots, layout.recurrent_bytes_per_slot)
    storage.capture(batch_slot=2, recurrent_slot=1)
    assert slab[1, 16 + 12:32 + 12].view(np.float32).tolist() == [1, 2, 3, 4]  # slot 1, layer 1's recurrent row
    assert storage.partial_kv_slab.shape == (0, 0)

    buffer = cpu.buffer(np.arange(8, dtype=np.uint8))
    assert np.from_dlpack(buffer.view()).tolist() == list(range(8))


def test_fp8_exports_as_uint8_bit_patterns(cpu):
    pool = device.KvPagePool(cpu, num_pages=2, page_size=2, layers=[(1, 4)], dtype="fp8_e4m3")
    pool.write_pages(0, 0, np.arange(32, dtype=np.uint8))
    array = np.from_dlpack(pool.layer(0))
    assert array.dtype == np.uint8
    assert array.reshape(-1)[:32].tolist() == list(range(32))


def test_a_tensor_keeps_its_memory_after_the_pool_is_dropped_or_closed(cpu):
    pool = device.KvPagePool(cpu, num_pages=2, page_size=2, layers=[(1, 2)], dtype="fp32")
    pool.write_pages(0, 0, np.full(16, 4.0, np.float32))
    footprint = cpu.allocated_bytes
    array = np.from_dlpack(pool.layer(0))
    alive = weakref.ref(pool)
    del pool
    assert alive() is None  # no cycle: the Python object went at once; the library keeps the memory
    assert cpu.allocated_bytes == footprint
    assert (array == 4.0).all()
    del array
    assert cpu.allocated_bytes == 0

    pool = device.KvPagePool(cpu, num_pages=2, page_size=2, layers=[(1, 2)], dtype="fp32")
    array = np.from_dlpack(pool.layer(0))
    view = pool.layer(0)
    pool.close()  # allowed: the tensor owns its reference
    array[:] = 1.0
    assert cpu.allocated_bytes == footprint
    with pytest.raises(ctxcache.InvalidHandleError, match="KV pool was closed"):
        view.__dlpack__()
    del array
    assert cpu.allocated_bytes == 0


def test_an_unconsumed_capsule_releases_its_tensor(cpu):
    pool = device.KvPagePool(cpu, num_pages=2, page_size=2, layers=[(1, 2)])
    for _ in range(3):
        capsule = pool.layer(0).__dlpack__()
        versioned = pool.layer(0).__dlpack__(max_version=(1, 0))
        assert type(capsule).__name__ == "PyCapsule"
        del capsule, versioned
    pool.close()
    gc.collect()
    assert cpu.allocated_bytes == 0


def test_dlpack_arguments(cpu):
    view = cpu.buffer(16).view()
    with pytest.raises(BufferError, match="never copied"):
        view.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="lives on"):
        view.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="takes no stream"):
        view.__dlpack__(stream=7)
    assert np.from_dlpack(view).nbytes == 16
    assert "uint8[16]" in repr(view)


def test_objects_over_engine_arrays_use_them_in_place(cpu):
    required = device.KvPagePool.required_bytes(num_pages=2, page_size=2, layers=[(1, 4)], dtype="fp32")
    engine = aligned(required // 4, np.float32)
    engine[:] = np.arange(engine.size)  # the engine's bytes are the pool's initial contents
    pool = device.KvPagePool(cpu, num_pages=2, page_size=2, layers=[(1, 4)], dtype="fp32", external=engine)
    assert cpu.allocated_bytes == 0
    assert pool.read_pages(0, 1, 1).reshape(-1).tolist() == list(range(8, 16))
    pool.write_pages(0, 3, np.full(8, -1.0, np.float32))
    assert (engine[24:32] == -1.0).all()
    assert pool.layer(0).external and pool.layer(0).data == engine.__array_interface__["data"][0]
    del pool
    assert (engine[24:32] == -1.0).all()  # left alone

    table_memory = aligned(12, np.int32)
    table_memory[:] = 77
    table = device.KvPageTable(cpu, max_batch=3, max_pages_per_seq=2, num_pages=4, external=table_memory)
    assert (table_memory == 77).all() and table.dirty
    table.upload()
    assert (table_memory == -1).all()
    lengths = device.KvLengths(cpu, 4, external=aligned(4, np.int32))
    lengths.set([1, 2])
    assert np.from_dlpack(lengths.device_view)[:2].tolist() == [1, 2]
    geometry = dict(max_batch=2, num_layers=1, recurrent_heads=1, recurrent_head_dim=2, state_size=2)
    state_memory = aligned(device.ResidentState.required_bytes(cpu, **geometry))
    state = device.ResidentState(cpu, **geometry, external=state_memory)
    state.write_row("recurrent", 0, 1, np.array([1, 2, 3, 4], np.float32))
    assert state_memory[16:32].view(np.float32).tolist() == [1, 2, 3, 4]
    slab = aligned(32)
    storage = device.SnapshotStorage(cpu, state=state, recurrent_budget_bytes=32, external_recurrent=slab)
    storage.capture(batch_slot=1, recurrent_slot=1)
    assert slab[16:32].view(np.float32).tolist() == [1, 2, 3, 4]
    buffer = device.DeviceBuffer(cpu, 8, external=(slab.__array_interface__["data"][0], 32))
    assert buffer.read(np.float32, 2, 0).tolist() == [0, 0]
    assert cpu.allocated_bytes == 0


def test_the_cpu_backend_takes_any_stream(cpu):
    assert cpu.stream == 0
    cpu.set_stream(0x1234)
    assert cpu.stream == 0x1234
    lengths = device.KvLengths(cpu, 2)
    lengths.set([1, 2])
    lengths.add(1)
    assert lengths.read().tolist() == [2, 3]

    class Stream:  # torch.cuda.Stream's attribute
        cuda_stream = 0x99

    cpu.set_stream(Stream())
    assert cpu.stream == 0x99
    cpu.set_stream(None)
    assert cpu.stream == 0
