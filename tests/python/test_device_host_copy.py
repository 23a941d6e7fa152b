"""Host buffers and the pool <-> host slot copies through Python on the CPU backend (and, marked ``gpu``, CUDA
against CPU): the page-first slot bytes, headers untouched, host bytes counted apart, typed errors with nothing
changed."""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache
from ctxcache import device


@pytest.fixture
def cpu():
    with device.Backend("cpu") as backend:
        yield backend


def _pool(backend, seed=1):
    """4 K pages of 4 tokens, fp16; layers (2 x 8) and (1 x 4): 128- and 32-byte pages; every byte patterned."""
    pool = device.KvPagePool(backend, num_pages=4, page_size=4, layers=[(2, 8), (1, 4)], dtype="fp16")
    rng = np.random.default_rng(seed)
    for layer in range(2):
        pool.write_pages(layer, 0, rng.integers(0, 256, 8 * pool.page_bytes(layer), dtype=np.uint8))
    return pool


def _page(pool, layer, flat):
    return pool.read_pages(layer, flat, 1).view(np.uint8).ravel()


def test_pages_round_trip_through_slots_with_headers_untouched(cpu):
    pool = _pool(cpu)
    assert pool.host_payload_bytes == 2 * 128 + 2 * 32
    slot_bytes = 16 + pool.host_payload_bytes
    host = device.HostBuffer(cpu, 3 * slot_bytes)
    assert cpu.allocated_host_bytes == 3 * slot_bytes
    assert host.address % 4096 == 0
    assert not host.read().any()
    host.write(np.full(3 * slot_bytes, 0xAB, dtype=np.uint8))

    pool.copy_pages_to_host([3, 1], host, [2, 0], slot_bytes=slot_bytes, payload_offset=16)
    expected = np.full(3 * slot_bytes, 0xAB, dtype=np.uint8)
    for page, slot in ((3, 2), (1, 0)):
        payload = np.concatenate([_page(pool, 0, page), _page(pool, 0, page + 4),
                                  _page(pool, 1, page), _page(pool, 1, page + 4)])
        expected[slot * slot_bytes + 16: (slot + 1) * slot_bytes] = payload
    np.testing.assert_array_equal(host.read(), expected)

    before = [pool.read_pages(layer, 0, 8).copy() for layer in range(2)]
    pool.copy_pages_from_host([0], host, [2], slot_bytes=slot_bytes, payload_offset=16)  # page 3's bytes into page 0
    for layer in range(2):
        after = pool.read_pages(layer, 0, 8)
        np.testing.assert_array_equal(after[0], before[layer][3])
        np.testing.assert_array_equal(after[4], before[layer][7])
        np.testing.assert_array_equal(after[1:4], before[layer][1:4])
    host.close()
    assert cpu.allocated_host_bytes == 0


def test_a_host_buffer_over_engine_memory_is_used_in_place(cpu):
    pool = _pool(cpu)
    engine = np.zeros(2 * pool.host_payload_bytes, dtype=np.uint8)
    host = device.HostBuffer(cpu, engine.nbytes, external=engine)
    assert host.address == engine.ctypes.data
    assert cpu.allocated_host_bytes == 0
    pool.copy_pages_to_host([2], host, [1], slot_bytes=pool.host_payload_bytes)
    np.testing.assert_array_equal(engine[pool.host_payload_bytes: pool.host_payload_bytes + 128], _page(pool, 0, 2))
    assert not engine[: pool.host_payload_bytes].any()


def test_bad_copies_are_refused_with_nothing_changed(cpu):
    pool = _pool(cpu)
    slot_bytes = pool.host_payload_bytes
    host = device.HostBuffer(cpu, 2 * slot_bytes)
    marks = np.arange(2 * slot_bytes, dtype=np.uint32).astype(np.uint8)
    host.write(marks)
    pages_before = [pool.read_pages(layer, 0, 8).copy() for layer in range(2)]
    with pytest.raises(ctxcache.ContractError, match=r"pages\[0\] = 4 is outside \[0, 4\)"):
        pool.copy_pages_to_host([4], host, [0], slot_bytes=slot_bytes)
    with pytest.raises(ctxcache.ContractError, match=r"hostSlots\[1\] = 2 is outside \[0, 2\)"):
        pool.copy_pages_from_host([0, 1], host, [0, 2], slot_bytes=slot_bytes)
    with pytest.raises(ctxcache.ContractError, match="host slot 1 is a destination twice"):
        pool.copy_pages_to_host([0, 1], host, [1, 1], slot_bytes=slot_bytes)
    with pytest.raises(ctxcache.ContractError, match="page 0 is a destination twice"):
        pool.copy_pages_from_host([0, 0], host, [0, 1], slot_bytes=slot_bytes)
    with pytest.raises(ctxcache.ContractError, match="is less than payloadOffset 8"):
        pool.copy_pages_to_host([0], host, [0], slot_bytes=slot_bytes, payload_offset=8)
    with pytest.raises(ctxcache.ContractError, match="3 slots of"):
        pool.copy_pages_to_host([0], host, [0], slot_bytes=slot_bytes, slot_count=3)
    with pytest.raises(ctxcache.InvalidArgumentError, match="differ in length"):
        pool.copy_pages_to_host([0, 1], host, [0], slot_bytes=slot_bytes)
    with pytest.raises(ctxcache.ArgumentTypeError, match="host must be a HostBuffer"):
        pool.copy_pages_to_host([0], cpu.buffer(16), [0], slot_bytes=slot_bytes)
    with device.Backend("cpu") as other:
        foreign = device.HostBuffer(other, 2 * slot_bytes)
        with pytest.raises(ctxcache.ContractError, match="share one backend"):
            pool.copy_pages_to_host([0], foreign, [0], slot_bytes=slot_bytes)
        foreign.close()
    with pytest.raises(ctxcache.ContractError, match="outside the host buffer"):
        host.read(offset=2 * slot_bytes - 1, count=2)
    np.testing.assert_array_equal(host.read(), marks)
    for layer in range(2):
        np.testing.assert_array_equal(pool.read_pages(layer, 0, 8), pages_before[layer])
    host.close()
    with pytest.raises(ctxcache.InvalidHandleError):
        pool.copy_pages_to_host([0], host, [0], slot_bytes=slot_bytes)


@pytest.mark.gpu
def test_cuda_host_copies_match_the_cpu_twin():
    results = []
    for kind in ("cpu", "cuda"):
        with device.Backend(kind) as backend:
            pool = device.KvPagePool(backend, num_pages=6, page_size=16, layers=[(8, 128), (3, 5)], dtype="bf16")
            rng = np.random.default_rng(5)
            for layer in range(2):
                pool.write_pages(layer, 0, rng.integers(0, 256, 12 * pool.page_bytes(layer), dtype=np.uint8))
            slot_bytes = 40 + pool.host_payload_bytes
            host = device.HostBuffer(backend, 4 * slot_bytes)
            host.write(rng.integers(0, 256, 4 * slot_bytes, dtype=np.uint8))
            pool.copy_pages_to_host([5, 0, 2], host, [3, 1, 0], slot_bytes=slot_bytes, payload_offset=40)
            pool.copy_pages_from_host([4, 1], host, [3, 2], slot_bytes=slot_bytes, payload_offset=40)
            results.append((host.read(), [pool.read_pages(layer, 0, 12).view(np.uint8) for layer in range(2)]))
    np.testing.assert_array_equal(results[1][0], results[0][0])
    for layer in range(2):
        np.testing.assert_array_equal(results[1][1][layer], results[0][1][layer])
