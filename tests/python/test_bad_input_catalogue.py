"""The reliability issue's catalogue of bad inputs, in Python, one named entry per bad input.

Each entry lists its cases: manager cases already in ``test_bad_inputs.py`` (referenced by id; they run there),
new manager cases, and device-layer cases. Every case asserts the exact exception class, a distinctive substring
of the message that names the offending argument, that nothing observable changed (manager pools, free lists,
refcounts and records; device pool bytes, page-table rows host and device side, lengths, resident rows, snapshot
regions, buffer bytes and both backends' allocated bytes), and the fixtures prove that nothing leaked (manager
pools back to capacity, backend allocations back to zero). The C and C++ halves of the catalogue are
``tests/cpp/capi/capi_bad_inputs_test.cpp`` and ``tests/cpp/device/bad_inputs_test.cpp``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import pytest

import ctxcache
from ctxcache import (
    ArgumentTypeError,
    ContractError,
    InvalidArgumentError,
    InvalidHandleError,
    device,
)
from ctxcache._ffi import check, ffi, lib
from ctxcache.device import StatePart

from conftest import to_hashes
from test_bad_inputs import ALL_CASES, assert_rejected, world  # noqa: F401  (world is a fixture)

EXISTING_IDS = {p.id for p in ALL_CASES}


def case(name, exception, match, call):
    return pytest.param(exception, match, call, id=name)


def pattern(n: int, seed: int) -> np.ndarray:
    return ((seed * 37 + np.arange(n) * 11 + 1) % 256).astype(np.uint8)


# ---- the device world -------------------------------------------------------------------------------------------


@dataclass
class Dev:
    """A CPU backend with a patterned object of each kind, plus the odd ones the cases need."""

    backend: device.Backend
    pool: device.KvPagePool            # 4 pages of 4 tokens, layers (1 x 2) and (2 x 2), fp16
    table: device.KvPageTable          # 3 slots x 3 pages over 4 pages: slot 0 -> [1, 2], slot 1 -> [3]; uploaded
    lengths: device.KvLengths          # at most 4, active [5, 3, 7]
    state: device.ResidentState        # 3 slots, 1 layer: recurrent 1 x 2 x 2 fp32, conv 2 x 2 fp16, hidden 4
    storage: device.SnapshotStorage    # that state and pool: 2 recurrent slots (with hidden), 2 partial-KV slots
    buffer: device.DeviceBuffer        # 64 patterned bytes
    k: device.DeviceBuffer             # 256-byte gather outputs
    v: device.DeviceBuffer
    table5: device.KvPageTable         # addresses 5 pages: not this pool
    other: device.Backend              # another backend with a pool, a table and lengths of its own
    foreign_pool: device.KvPagePool
    foreign_table: device.KvPageTable
    foreign_lengths: device.KvLengths
    closed_pool: device.KvPagePool     # closed; stale_pool_handle is its dead C handle
    stale_pool_handle: object
    closed_backend: device.Backend
    objects: list = field(default_factory=list)


@pytest.fixture
def dev():
    backend = device.Backend("cpu")
    pool = device.KvPagePool(backend, num_pages=4, page_size=4, layers=[(1, 2), (2, 2)], dtype="fp16")
    for layer in range(2):
        pool.write_pages(layer, 0, pattern(8 * pool.page_bytes(layer), layer + 1))
    table = device.KvPageTable(backend, max_batch=3, max_pages_per_seq=3, num_pages=4)
    table.set_row(0, [1, 2])
    table.set_row(1, [3])
    table.upload()
    lengths = device.KvLengths(backend, 4)
    lengths.set([5, 3, 7])
    state = device.ResidentState(backend, max_batch=3, num_layers=1, recurrent_heads=1, recurrent_head_dim=2,
                                 state_size=2, conv_dim=2, conv_kernel=2, conv_dtype="fp16", hidden_size=4)
    for part in (StatePart.RECURRENT, StatePart.CONV, StatePart.BOUNDARY_HIDDEN):
        for slot in range(3):
            state.write_row(part, 0, slot, pattern(state.row_bytes(part), 10 * part + slot))
    storage = device.SnapshotStorage(backend, state=state, base_pool=pool, recurrent_budget_bytes=64,
                                     partial_kv_budget_bytes=192, boundary_hidden=True)
    assert (storage.layout.recurrent_slots, storage.layout.partial_kv_slots) == (2, 2)
    storage.capture(batch_slot=2, recurrent_slot=1, partial_kv_slot=0, base_page=3, valid_tokens=3)
    buffer = backend.buffer(pattern(64, 9))
    k, v = device.DeviceBuffer(backend, 256), device.DeviceBuffer(backend, 256)
    table5 = device.KvPageTable(backend, max_batch=3, max_pages_per_seq=3, num_pages=5)
    other = device.Backend("cpu")
    foreign_pool = device.KvPagePool(other, num_pages=4, page_size=4, layers=[(1, 2)])
    foreign_table = device.KvPageTable(other, max_batch=3, max_pages_per_seq=3, num_pages=4)
    foreign_lengths = device.KvLengths(other, 4)
    foreign_lengths.set([1, 1, 1])
    closed_pool = device.KvPagePool(backend, num_pages=2, page_size=2, layers=[(1, 1)])
    stale = closed_pool._handle
    closed_pool.close()
    closed_backend = device.Backend("cpu")
    closed_backend.close()
    objects = [storage, state, pool, table, lengths, buffer, k, v, table5]
    w = Dev(backend, pool, table, lengths, state, storage, buffer, k, v, table5, other, foreign_pool, foreign_table,
            foreign_lengths, closed_pool, stale, closed_backend, objects)
    yield w
    for obj in objects + [foreign_pool, foreign_table, foreign_lengths]:
        obj.close()
    assert backend.allocated_bytes == 0, "device memory leaked"
    assert other.allocated_bytes == 0, "device memory leaked"
    backend.close()
    other.close()


def observe(w: Dev) -> tuple:
    """Everything observable about the device world."""
    out = [w.backend.allocated_bytes, w.other.allocated_bytes]
    out += [w.pool.read_pages(layer, 0, 8).tobytes() for layer in range(2)]
    out += [w.table.host_table().tobytes(), w.table.device_table().tobytes(), w.table.dirty]
    out += [w.table5.host_table().tobytes(), w.foreign_table.host_table().tobytes()]
    out += [w.lengths.read().tolist(), w.foreign_lengths.read().tolist(), w.foreign_pool.read_pages(0, 0, 8).tobytes()]
    for part in (StatePart.RECURRENT, StatePart.CONV, StatePart.BOUNDARY_HIDDEN):
        out += [w.state.read_row(part, 0, slot).tobytes() for slot in range(3)]
    for part, layer, slots in ((StatePart.RECURRENT, 0, 2), (StatePart.CONV, 0, 2), (StatePart.BOUNDARY_HIDDEN, 0, 2),
                               (StatePart.PARTIAL_KV, 0, 2), (StatePart.PARTIAL_KV, 1, 2)):
        out += [w.storage.read_region(part, layer, slot).tobytes() for slot in range(slots)]
    out += [w.buffer.read().tobytes(), w.k.read().tobytes(), w.v.read().tobytes()]
    return tuple(out)


def gather(w: Dev, pool=None, table=None, **kwargs):
    """A gather into the world's preallocated outputs (so that a refusal cannot be blamed on them)."""
    kwargs.setdefault("batch", 1)
    kwargs.setdefault("seq_len", 4)
    kwargs.setdefault("out", (w.k, w.v))
    return device.gather_kv(w.pool if pool is None else pool, w.table if table is None else table, **kwargs)


def aligned(n: int) -> np.ndarray:
    """n zero bytes starting 256-byte aligned."""
    raw = np.zeros(n + 256, np.uint8)
    start = -raw.__array_interface__["data"][0] % 256
    return raw[start:start + n]


def view_of_a_closed_pool(w: Dev) -> device.DeviceView:
    pool = device.KvPagePool(w.backend, num_pages=2, page_size=2, layers=[(1, 2)])
    view = pool.layer(0)
    pool.close()
    return view


def host_slots(w: Dev, slots: int = 2) -> tuple[device.HostBuffer, int]:
    """A patterned host buffer of `slots` payload-only slots of the world's pool, and the slot size."""
    slot_bytes = w.pool.host_payload_bytes
    host = device.HostBuffer(w.backend, slots * slot_bytes)
    host.write(pattern(slots * slot_bytes, 77))
    return host, slot_bytes


def host_copy(w: Dev, to_host: bool, pages, slots, **layout):
    """A pool <-> host copy that must be refused: the host bytes must not change either."""
    host, slot_bytes = host_slots(w)
    before = host.read()
    layout.setdefault("slot_bytes", slot_bytes)
    try:
        copy = w.pool.copy_pages_to_host if to_host else w.pool.copy_pages_from_host
        copy(pages, host, slots, **layout)
    finally:
        assert np.array_equal(host.read(), before), "a refused copy changed the host slots"
        host.close()


def raw_page_bytes(handle):
    out = ffi.new("size_t *")
    check(lib.ctxc_kv_pool_page_bytes(handle, 0, out))
    return int(out[0])


F16 = np.float16
PAGE0 = 8  # fp16 elements in one page of layer 0 (4 tokens x 1 head x 2)

# ---- the catalogue: each named bad input, its existing manager cases (ids in test_bad_inputs.py), its new
# ---- manager cases and its device cases ------------------------------------------------------------------------

CATALOGUE: dict[str, dict[str, list]] = {
    "null_handle": {
        "existing": ["publish_none_as_lease"],
        "manager": [],
        "device": [
            case("gather_pool_none", ArgumentTypeError, "pool must be a KvPagePool, got NoneType",
                 lambda w: device.gather_kv(None, w.table, batch=1, seq_len=4)),
            case("gather_table_none", ArgumentTypeError, "table must be a KvPageTable, got NoneType",
                 lambda w: device.gather_kv(w.pool, None, batch=1, seq_len=4)),
            case("pool_on_no_backend", ArgumentTypeError, "backend must be a Backend, got NoneType",
                 lambda w: device.KvPagePool(None, num_pages=4, page_size=4, layers=[(1, 2)])),
            case("compact_rows_no_buffer", ArgumentTypeError, "buffer must be a DeviceBuffer, got NoneType",
                 lambda w: device.compact_rows(None, row_bytes=8, rows=4, old_to_new=[0], new_batch=1)),
            case("scatter_through_an_unmapped_page", ContractError, "slot 0 has no page mapped at logical page 2",
                 lambda w: device.scatter_kv(w.pool, w.table, np.ones((1, 4, 1, 2), F16), np.ones((1, 4, 1, 2), F16),
                                             first_position=6)),
            case("gather_pool_is_a_table", ArgumentTypeError, "pool must be a KvPagePool, got KvPageTable",
                 lambda w: device.gather_kv(w.table, w.table, batch=1, seq_len=4)),
            case("c_null_pool_handle", InvalidHandleError, "ctxc_kv_pool_page_bytes: pool is NULL",
                 lambda w: raw_page_bytes(ffi.NULL)),
        ],
    },
    "dangling_handle": {
        "existing": [],
        "manager": [
            case("grow_destroyed_lease", InvalidHandleError, "lease was destroyed",
                 lambda w: (w.released.close(), w.m.grow_base_pages(w.released, 1))),
        ],
        "device": [
            case("view_exported_after_its_pool_closed", InvalidHandleError, "KV pool was closed",
                 lambda w: view_of_a_closed_pool(w).__dlpack__()),
            case("closed_pool_write", InvalidHandleError, "KV pool was closed",
                 lambda w: w.closed_pool.write_pages(0, 0, np.zeros(2, F16))),
            case("closed_pool_in_gather", InvalidHandleError, "KV pool was closed",
                 lambda w: gather(w, pool=w.closed_pool)),
            case("closed_pool_in_storage", InvalidHandleError, "KV pool was closed",
                 lambda w: device.SnapshotStorage(w.backend, base_pool=w.closed_pool, partial_kv_budget_bytes=64)),
            case("c_stale_pool_handle", InvalidHandleError, "ctxc_kv_pool_page_bytes: pool is not a live handle",
                 lambda w: raw_page_bytes(w.stale_pool_handle)),
        ],
    },
    "double_release": {
        "existing": ["grow_released_lease", "publish_released_lease"],
        "manager": [
            case("release_twice", InvalidHandleError, "ctxc_lease_release: lease was already released",
                 lambda w: w.released.release()),
        ],
        "device": [
            # close() is idempotent (the context-manager protocol); a closed object refuses every use.
            case("closed_twice_then_used", InvalidHandleError, "KV pool was closed",
                 lambda w: (w.closed_pool.close(), w.closed_pool.page_bytes(0))),
            case("c_destroy_twice", InvalidHandleError, "ctxc_kv_pool_destroy: pool is not a live handle",
                 lambda w: check(lib.ctxc_kv_pool_destroy(w.stale_pool_handle))),
        ],
    },
    "lease_used_after_its_manager_died": {
        "existing": ["grow_orphaned_lease", "publish_orphaned_lease"],
        "manager": [],
        # Device objects keep their backend alive (test_device_cpu.py's
        # test_objects_outlive_their_backend_handle_and_close_in_any_order); only the closed backend refuses.
        "device": [
            case("object_on_a_closed_backend", InvalidHandleError, "backend was closed",
                 lambda w: device.KvLengths(w.closed_backend, 4)),
            case("closed_backend_query", InvalidHandleError, "backend was closed",
                 lambda w: w.closed_backend.allocated_bytes),
        ],
    },
    "lease_of_another_manager": {
        "existing": ["grow_foreign_lease", "publish_foreign_lease"],
        "manager": [],
        # The device analogue: objects of another backend.
        "device": [
            case("gather_pool_of_another_backend", ContractError, "output buffers live on another backend than the pool",
                 lambda w: gather(w, pool=w.foreign_pool)),
            case("gather_table_of_another_backend", ContractError, "the pool, table and lengths must share one backend",
                 lambda w: gather(w, table=w.foreign_table)),
            case("add_lengths_of_another_backend", ContractError, "the increments live on another backend",
                 lambda w: w.lengths.add(w.foreign_lengths)),
            case("storage_with_a_pool_of_another_backend", ContractError, "must live on the storage's backend",
                 lambda w: device.SnapshotStorage(w.backend, base_pool=w.foreign_pool, partial_kv_budget_bytes=1024)),
        ],
    },
    "negative_count": {
        "existing": ["grow_negative_count", "input_token_count_negative", "publish_negative_resident_length"],
        "manager": [],
        "device": [
            case("pool_write_negative_first_page", ContractError, r"pages \[-1, \+1\) are outside \[0, 8\)",
                 lambda w: w.pool.write_pages(0, -1, np.zeros(PAGE0, F16))),
            case("pool_read_negative_count", InvalidArgumentError, "count must be >= 0",
                 lambda w: w.pool.read_pages(0, 0, -1)),
            case("lengths_negative_value", ContractError, r"lengths\[1\] is negative \(-1\)",
                 lambda w: w.lengths.set([4, -1])),
            case("compact_rows_negative_rows", InvalidArgumentError, "rows must be >= 0",
                 lambda w: device.compact_rows(w.buffer, row_bytes=8, rows=-1, old_to_new=[], new_batch=0)),
            case("rebase_negative_rows_per_sequence", ContractError, r"rowsPerSequence must be positive \(got -3\)",
                 lambda w: device.rebase_execution_rows(w.buffer, count=4, old_to_new=[0, 1], new_batch=2,
                                                        rows_per_sequence=-3)),
            case("gather_negative_batch", ContractError, "batch and seqLen must be >= 0", lambda w: gather(w, batch=-1)),
            case("set_entry_negative_logical_page", ContractError, "logical page -1",
                 lambda w: w.table.set_entry(0, -1, 2)),
        ],
    },
    "huge_count": {
        "existing": ["input_token_count_above_int32", "grow_count_above_int32"],
        "manager": [],
        "device": [
            case("set_row_more_pages_than_a_row", ContractError, r"count 4 is outside \[0, 3\]",
                 lambda w: w.table.set_row(0, [0, 1, 2, 3])),
            case("lengths_more_than_max_batch", ContractError, r"count 5 is outside \[0, 4\]",
                 lambda w: w.lengths.set([1] * 5)),
            case("pool_read_count_above_int32", InvalidArgumentError, "count must be <= 2147483647",
                 lambda w: w.pool.read_pages(0, 0, 2**31)),
            # Regressions: each sized its output (numpy array or device buffers) before the library refused; now
            # Python refuses first (the anchored messages are Python's, not the library's).
            case("pool_read_more_pages_than_the_pool", ContractError, r"^read_pages: pages \[0, \+2147483647\) are outside \[0, 8\)",
                 lambda w: w.pool.read_pages(0, 0, 2**31 - 1)),
            case("buffer_read_beyond_the_end", ContractError, r"^read: \[0, \+1099511627776\) is outside the buffer's 64 bytes",
                 lambda w: w.buffer.read(np.uint8, 2**40)),
            case("gather_sequence_longer_than_the_table", ContractError, "^gatherPagedKv: seqLen 1073741824 needs more pages",
                 lambda w: device.gather_kv(w.pool, w.table, batch=3, seq_len=2**30)),
            case("hash_more_chunks_than_the_backend_holds", ContractError, r"numChunks must be in \[1, 65536\]",
                 lambda w: device.hash_chunked(w.buffer, num_chunks=2**32 - 1)),
            case("table_compaction_longer_than_the_table", ContractError, r"oldBatch 4 is outside \[0, 3\]",
                 lambda w: w.table.compact_rows([-1] * 4, 0)),
        ],
    },
    "hashes_of_the_wrong_length": {
        "existing": ["hashes_shape_n3", "hashes_1d", "too_many_hashes_for_token_count",
                     "publish_more_blocks_than_lease_pages", "per_position_media_wrong_length"],
        "manager": [],
        "device": [],  # the device layer takes no block hashes
    },
    "non_contiguous_array": {
        "existing": ["hashes_non_contiguous", "hashes_fortran_order", "tokens_non_contiguous"],
        "manager": [],
        "device": [
            case("pool_pages_non_contiguous", ArgumentTypeError, "pages must be C-contiguous",
                 lambda w: w.pool.write_pages(0, 0, np.zeros((PAGE0, 2), F16)[:, 0])),
            case("set_row_non_contiguous", ArgumentTypeError, "k_pages must be C-contiguous",
                 lambda w: w.table.set_row(2, np.arange(6, dtype=np.int32)[::2])),
            case("lengths_non_contiguous", ArgumentTypeError, "values must be C-contiguous",
                 lambda w: w.lengths.set(np.arange(6, dtype=np.int32)[::2])),
            case("compaction_map_non_contiguous", ArgumentTypeError, "old_to_new must be C-contiguous",
                 lambda w: device.compact_rows(w.buffer, row_bytes=8, rows=4, old_to_new=np.array([0, 9, 1, 9], np.int32)[::2],
                                               new_batch=2)),
            case("state_row_non_contiguous", ArgumentTypeError, "row must be C-contiguous",
                 lambda w: w.state.write_row("recurrent", 0, 0, np.zeros(8, np.float32)[::2])),
            case("buffer_write_fortran_order", ArgumentTypeError, "array must be C-contiguous",
                 lambda w: w.buffer.write(np.asfortranarray(np.zeros((4, 4), np.uint8)))),
            case("region_write_non_contiguous", ArgumentTypeError, "data must be a C-contiguous numpy array",
                 lambda w: w.storage.write_region("recurrent", 0, 0, np.zeros(32, np.uint8)[::2])),
            # Regression: the buffer was allocated before the array was refused.
            case("backend_buffer_from_a_transposed_array", ArgumentTypeError, "data must be C-contiguous",
                 lambda w: w.backend.buffer(np.zeros((4, 8), np.uint8).T)),
        ],
    },
    "wrongly_typed_array": {
        "existing": ["hashes_int64", "hashes_float64", "hashes_big_endian", "hashes_python_list", "tokens_int64",
                     "tokens_uint32"],
        "manager": [],
        "device": [
            case("external_memory_of_a_wrong_type", ArgumentTypeError, "external must be None, a numpy array",
                 lambda w: device.KvLengths(w.backend, 4, external="memory")),
            case("external_memory_not_contiguous", ArgumentTypeError, "external must be a writeable C-contiguous array",
                 lambda w: device.KvLengths(w.backend, 4, external=aligned(64)[::2])),
            case("view_reinterpreted_as_another_size", InvalidArgumentError, r"fp32 \(4 bytes\) cannot reinterpret fp16",
                 lambda w: w.pool.layer(0).view("fp32")),
            case("pool_pages_float32", ArgumentTypeError, "pages holds fp32 elements, the pool stores fp16",
                 lambda w: w.pool.write_pages(0, 0, np.zeros(PAGE0, np.float32))),
            case("pool_pages_list", ArgumentTypeError, "pages must be a numpy array, a DLPack tensor .* got list",
                 lambda w: w.pool.write_pages(0, 0, [0.0] * PAGE0)),
            case("pool_pages_heads_before_tokens", InvalidArgumentError, r"expected \(count, page_size, kv_heads, head_dim\)",
                 lambda w: w.pool.write_pages(1, 0, np.zeros((1, 2, 4, 2), F16))),
            case("scatter_heads_before_tokens", InvalidArgumentError, r"expected \(batch, seq, kv_heads=2, head_dim=2\)",
                 lambda w: device.scatter_kv(w.pool, w.table, np.ones((1, 2, 3, 2), F16), np.ones((1, 2, 3, 2), F16),
                                             layer=1)),
            case("scatter_float32", ArgumentTypeError, "k holds fp32 elements, the pool stores fp16",
                 lambda w: device.scatter_kv(w.pool, w.table, np.ones((1, 3, 1, 2), np.float32),
                                             np.ones((1, 3, 1, 2), np.float32))),
            case("scatter_k_and_v_of_other_shapes", InvalidArgumentError, "they must match",
                 lambda w: device.scatter_kv(w.pool, w.table, np.ones((1, 3, 1, 2), F16), np.ones((1, 2, 1, 2), F16))),
            case("set_row_int64", ArgumentTypeError, "k_pages must have dtype int32, got int64",
                 lambda w: w.table.set_row(2, np.array([0, 1], np.int64))),
            case("set_row_big_endian", ArgumentTypeError, "k_pages must have dtype int32, got >i4",
                 lambda w: w.table.set_row(2, np.array([0, 1], ">i4"))),
            case("set_row_2d", InvalidArgumentError, r"k_pages must be 1-D, got shape \(1, 2\)",
                 lambda w: w.table.set_row(2, np.array([[0, 1]], np.int32))),
            case("compaction_map_float64", ArgumentTypeError, "old_to_new must have dtype int32, got float64",
                 lambda w: w.lengths.compact(np.array([0.0, 1.0, 2.0]), 3)),
            case("compaction_map_list_of_floats", ArgumentTypeError, r"old_to_new\[0\] must be an integer, got float",
                 lambda w: w.lengths.compact([0.0, 1, 2], 3)),
            case("state_row_float64", ArgumentTypeError, "row must have dtype float32 or uint8, got float64",
                 lambda w: w.state.write_row("recurrent", 0, 0, np.zeros(4, np.float64))),
            case("lengths_uint32", ArgumentTypeError, "values must have dtype int32, got uint32",
                 lambda w: w.lengths.set(np.array([1, 2], np.uint32))),
            case("hash_host_str", ArgumentTypeError, "data must be bytes-like or a numpy array, got str",
                 lambda w: device.hash_chunked_host("abc")),
            case("gather_scale_string", ArgumentTypeError, "k_scale must be a number, got str",
                 lambda w: gather(w, k_scale="1")),
        ],
    },
    "publish_of_hashes_that_no_longer_describe_the_acquired_prefix": {
        "existing": ["publish_changed_second_block", "publish_changed_first_block", "publish_other_prompt"],
        "manager": [],
        "device": [],  # the device layer publishes nothing
    },
    "compaction_map_that_reorders": {
        "existing": [],
        "manager": [],  # the manager has no compaction maps
        "device": [
            case("compact_rows_swapped_survivors", ContractError, r"oldToNew\[0\] = 1 reorders",
                 lambda w: device.compact_rows(w.buffer, row_bytes=8, rows=4, old_to_new=[1, 0, -1], new_batch=2)),
            case("compact_rows_gap", ContractError, r"oldToNew\[2\] = 2 reorders or leaves a gap",
                 lambda w: device.compact_rows(w.buffer, row_bytes=8, rows=4, old_to_new=[0, -1, 2], new_batch=3)),
            case("lengths_swapped_survivors", ContractError, r"oldToNew\[0\] = 1 reorders",
                 lambda w: w.lengths.compact([1, 0, -1], 2)),
            case("state_swapped_survivors", ContractError, r"oldToNew\[0\] = 1 reorders",
                 lambda w: w.state.compact([1, 0, -1], 2)),
            case("rebase_swapped_survivors", ContractError, r"oldToNew\[0\] = 1 reorders",
                 lambda w: device.rebase_execution_rows(w.buffer, count=4, old_to_new=[1, 0, -1], new_batch=2,
                                                        rows_per_sequence=1)),
        ],
    },
    "compaction_map_that_duplicates": {
        "existing": [],
        "manager": [],
        "device": [
            case("compact_rows_twice_to_row_0", ContractError, r"overlapping map: oldToNew\[1\] = 0",
                 lambda w: device.compact_rows(w.buffer, row_bytes=8, rows=4, old_to_new=[0, 0, -1], new_batch=1)),
            case("lengths_twice_to_row_0", ContractError, r"overlapping map: oldToNew\[1\] = 0",
                 lambda w: w.lengths.compact([0, 0, -1], 1)),
            case("state_twice_to_row_0", ContractError, r"overlapping map: oldToNew\[1\] = 0",
                 lambda w: w.state.compact([0, 0, -1], 1)),
            case("table_twice_to_row_0", ContractError, r"oldToNew\[1\] = 0 repeats the destination of row 0",
                 lambda w: w.table.compact_rows([0, 0, -1], 1)),
            case("lengths_destination_out_of_range", ContractError, r"oldToNew\[1\] = 5 is outside \[-1, 2\)",
                 lambda w: w.lengths.compact([0, 5, -1], 2)),
            case("host_copy_twice_into_page_1", ContractError, "page 1 is a destination twice",
                 lambda w: host_copy(w, False, [1, 1], [0, 1])),
            case("host_copy_twice_into_slot_0", ContractError, "host slot 0 is a destination twice",
                 lambda w: host_copy(w, True, [1, 2], [0, 0])),
        ],
    },
    "page_id_out_of_range": {
        "existing": ["ref_count_index_out_of_range", "ref_count_index_of_empty_pool"],
        "manager": [],
        "device": [
            case("pool_view_of_a_layer_beyond_the_pool", ContractError, r"layer 2 is outside \[0, 2\)",
                 lambda w: w.pool.layer(2)),
            case("state_view_of_a_layer_beyond_the_state", ContractError, r"layer 1 is outside \[0, 1\)",
                 lambda w: w.state.recurrent(1)),
            case("snapshot_view_of_a_part_without_a_slab", ContractError, "names no slab",
                 lambda w: w.storage.slab("conv")),
            case("set_row_page_beyond_the_pool", ContractError, r"page id 4 is outside \[0, 4\)",
                 lambda w: w.table.set_row(2, [1, 4])),
            case("set_row_hole_in_dense_mode", ContractError, r"page id -1 is outside \[0, 4\)",
                 lambda w: w.table.set_row(2, [-1])),
            case("set_entry_page_beyond_the_pool", ContractError, r"page id 9 is outside \[0, 4\)",
                 lambda w: w.table.set_entry(1, 1, 9)),
            case("clear_row_slot_beyond_the_table", ContractError, r"slot 3 is outside \[0, 3\)",
                 lambda w: w.table.clear_row(3)),
            case("pool_write_past_the_v_pages", ContractError, r"pages \[8, \+1\) are outside \[0, 8\)",
                 lambda w: w.pool.write_pages(0, 8, np.zeros(PAGE0, F16))),
            case("pool_read_past_the_v_pages", ContractError, r"pages \[7, \+2\) are outside \[0, 8\)",
                 lambda w: w.pool.read_pages(0, 7, 2)),
            case("restore_base_page_beyond_the_pool", ContractError, r"base page 4 is outside \[0, 4\)",
                 lambda w: w.storage.restore(partial_kv_slot=1, base_page=4, valid_tokens=2)),
            case("capture_batch_slot_beyond_the_state", ContractError, r"batch slot 3 is outside \[0, 3\)",
                 lambda w: w.storage.capture(batch_slot=3, recurrent_slot=0)),
            case("region_slot_beyond_the_storage", ContractError, r"slot 2 is outside \[0, 2\)",
                 lambda w: w.storage.read_region(StatePart.PARTIAL_KV, 0, 2)),
            case("host_copy_page_beyond_the_pool", ContractError, r"pages\[1\] = 4 is outside \[0, 4\)",
                 lambda w: host_copy(w, False, [0, 4], [0, 1])),
            case("host_copy_slot_beyond_the_layout", ContractError, r"hostSlots\[0\] = 2 is outside \[0, 2\)",
                 lambda w: host_copy(w, False, [0], [2])),
            case("host_copy_more_slots_than_the_buffer_holds", ContractError, "3 slots of",
                 lambda w: host_copy(w, False, [0], [0], slot_count=3)),
        ],
    },
    "zero_capacity": {
        "existing": ["manager_page_size_zero"],
        "manager": [],  # zero pool capacities are legal: test_zero_capacity_manager_answers_insufficient_capacity
        "device": [
            case("pool_of_zero_pages", ContractError, r"numPages must be positive \(got 0\)",
                 lambda w: device.KvPagePool(w.backend, num_pages=0, page_size=4, layers=[(1, 2)])),
            case("pool_page_size_zero", ContractError, r"pageSize must be positive \(got 0\)",
                 lambda w: device.KvPagePool(w.backend, num_pages=4, page_size=0, layers=[(1, 2)])),
            case("pool_without_layers", ContractError, "a pool needs at least one layer",
                 lambda w: device.KvPagePool(w.backend, num_pages=4, page_size=4, layers=[])),
            case("pool_layer_of_zero_heads", ContractError, r"layer 0 needs positive kvHeads and headDim \(got 0, 2\)",
                 lambda w: device.KvPagePool(w.backend, num_pages=4, page_size=4, layers=[(0, 2)])),
            case("table_of_zero_slots", ContractError, r"must be positive \(got 0, 3, 4\)",
                 lambda w: device.KvPageTable(w.backend, max_batch=0, max_pages_per_seq=3, num_pages=4)),
            case("table_over_zero_pages", ContractError, r"must be positive \(got 3, 3, 0\)",
                 lambda w: device.KvPageTable(w.backend, max_batch=3, max_pages_per_seq=3, num_pages=0)),
            case("lengths_of_zero_sequences", ContractError, r"maxBatch must be positive \(got 0\)",
                 lambda w: device.KvLengths(w.backend, 0)),
            case("state_of_zero_slots", ContractError, r"maxBatch must be positive \(got 0\)",
                 lambda w: device.ResidentState(w.backend, max_batch=0, hidden_size=4)),
            case("state_holding_nothing", ContractError, "nothing to store",
                 lambda w: device.ResidentState(w.backend, max_batch=2)),
            case("backend_of_zero_hash_chunks", ContractError, "maxHashChunks must be positive",
                 lambda w: device.Backend("cpu", max_hash_chunks=0)),
            case("backend_of_an_empty_descriptor_table", ContractError,
                 r"maxTableBytes must be in \[4096, 1073741824\] \(got 0\)",
                 lambda w: device.Backend("cpu", max_table_bytes=0)),
        ],
    },
    "device_geometry_that_does_not_match_a_pool": {
        "existing": [],
        "manager": [],
        "device": [
            case("external_memory_smaller_than_the_pool", InvalidArgumentError, "holds 255 bytes, the object needs 256",
                 lambda w: device.KvPagePool(w.backend, num_pages=4, page_size=4, layers=[(1, 2)],
                                             external=aligned(1024)[:255])),
            case("external_memory_misaligned", InvalidArgumentError, "is not 256-byte aligned",
                 lambda w: device.KvPagePool(w.backend, num_pages=4, page_size=4, layers=[(1, 2)],
                                             external=aligned(1024)[16:])),
            case("external_null_address", InvalidArgumentError, "external memory is NULL but 16 bytes are needed",
                 lambda w: device.KvLengths(w.backend, 4, external=(0, 16))),
            case("gather_through_a_table_of_other_size", ContractError, "the table addresses 5 pages, the pool has 4",
                 lambda w: gather(w, table=w.table5)),
            case("gather_a_layer_the_pool_lacks", ContractError, r"layer 2 is outside \[0, 2\)",
                 lambda w: gather(w, layer=2)),
            case("gather_into_another_dtype", ContractError, "wrong dtype: a fp16 pool gathers only into fp16",
                 lambda w: gather(w, out_dtype="fp32")),
            case("gather_more_sequences_than_the_table", ContractError, "batch 4 exceeds the table's 3 slots",
                 lambda w: gather(w, batch=4)),
            case("gather_into_small_outputs", ContractError, "the outputs hold 64 bytes, 96 needed",
                 lambda w: gather(w, batch=3, seq_len=8, out=(w.buffer, w.k))),
            case("pages_not_a_whole_page", InvalidArgumentError, "pages holds 6 bytes, not a whole number of 16-byte pages",
                 lambda w: w.pool.write_pages(0, 0, np.zeros(3, F16))),
            case("row_of_another_length", ContractError, "12 bytes given for a row of 16",
                 lambda w: w.state.write_row("recurrent", 0, 0, np.zeros(3, np.float32))),
            case("partial_snapshot_of_a_full_page", ContractError, r"validTokens 4 is outside \(0, 4\)",
                 lambda w: w.storage.restore(partial_kv_slot=0, base_page=1, valid_tokens=4)),
            case("draft_page_without_a_draft_pool", ContractError, "a draft page was given but this storage has no draft pool",
                 lambda w: w.storage.restore(partial_kv_slot=0, base_page=1, draft_page=0, valid_tokens=2)),
            case("hidden_row_without_a_state", ContractError, "boundaryHidden needs a resident state with hiddenSize > 0",
                 lambda w: device.SnapshotStorage(w.backend, base_pool=w.pool, partial_kv_budget_bytes=192,
                                                  boundary_hidden=True)),
            # Regression: one pool as both base and draft was accepted (a restore then wrote one page twice).
            case("one_pool_as_base_and_draft", ContractError, "the draft pool must be another pool than the base pool",
                 lambda w: device.SnapshotStorage(w.backend, base_pool=w.pool, draft_pool=w.pool,
                                                  partial_kv_budget_bytes=1024)),
        ],
    },
}

MANAGER_CASES = [c for entry in CATALOGUE.values() for c in entry["manager"]]
DEVICE_CASES = [c for entry in CATALOGUE.values() for c in entry["device"]]
DEVICE_ITEMS = ("null_handle", "dangling_handle", "double_release", "compaction_map_that_reorders",
                "compaction_map_that_duplicates", "page_id_out_of_range", "zero_capacity",
                "device_geometry_that_does_not_match_a_pool", "non_contiguous_array", "wrongly_typed_array")


def test_every_named_bad_input_is_catalogued():
    assert len(CATALOGUE) == 16
    for name, entry in CATALOGUE.items():
        assert entry["existing"] or entry["manager"] or entry["device"], f"{name} has no case"
        missing = [i for i in entry["existing"] if i not in EXISTING_IDS]
        assert not missing, f"{name} refers to cases test_bad_inputs.py no longer has: {missing}"
    for name in DEVICE_ITEMS:
        assert CATALOGUE[name]["device"], f"{name} needs a device-layer case"
    ids = [p.id for p in MANAGER_CASES + DEVICE_CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("exception,match,call", MANAGER_CASES)
def test_manager_bad_input_is_refused_and_changes_nothing(world, exception, match, call):
    assert_rejected(world, exception, match, call)


@pytest.mark.parametrize("exception,match,call", DEVICE_CASES)
def test_device_bad_input_is_refused_and_changes_nothing(dev, exception, match, call):
    before = observe(dev)
    with pytest.raises(ctxcache.Error) as info:
        call(dev)
    assert type(info.value) is exception, f"{type(info.value).__name__}: {info.value}"
    assert re.search(match, str(info.value)), f"message {str(info.value)!r} does not mention {match!r}"
    del info  # the traceback must not keep a temporary alive past the comparison
    assert observe(dev) == before


# ---- the legal neighbours of bad inputs: answers, not errors ------------------------------------------------------


def test_zero_capacity_manager_answers_insufficient_capacity(make_manager):
    m = make_manager(base_kv_pages=0)
    result = m.acquire_vanilla(to_hashes(list(range(4))), 5)
    assert result.status == ctxcache.AcquireStatus.INSUFFICIENT_CAPACITY
    assert result.lease is None
    assert all(m.pools.capacity(t) == 0 for t in ctxcache.ResourceType)
    m.check_invariants()


def test_huge_growth_is_a_capacity_answer(world):
    before = world.m.pools.free_count(ctxcache.ResourceType.BASE_KV_PAGE)
    assert world.m.grow_base_pages(world.lease, 2**31 - 1) is False
    assert world.m.pools.free_count(ctxcache.ResourceType.BASE_KV_PAGE) == before
    world.m.check_invariants()


def test_zero_budget_storage_and_zero_byte_buffer_are_legal_and_refuse_every_slot(dev):
    with device.SnapshotStorage(dev.backend, state=dev.state, base_pool=dev.pool) as empty:
        assert empty.layout.footprint_bytes == 0
        with pytest.raises(ContractError, match="this storage has no recurrent slots"):
            empty.capture(batch_slot=0, recurrent_slot=0)
    with device.DeviceBuffer(dev.backend, 0) as zero:
        with pytest.raises(ContractError, match="outside the buffer's 0 bytes"):
            zero.write(np.zeros(1, np.uint8))


def test_page_table_rows_may_be_permuted(dev):
    """The contrast to the compaction-map cases: the host table moves rows without moving KV, so any order of
    survivors is legal there (duplicates are not)."""
    before = dev.table.host_table().copy()
    dev.table.compact_rows([1, 0, -1], 2)
    np.testing.assert_array_equal(dev.table.host_table()[0], before[1])
    np.testing.assert_array_equal(dev.table.host_table()[1], before[0])
    dev.table.check_invariants()


# ---- the runtime layer's bad inputs (coordinator and requests) ---------------------------------------------------

from ctxcache.retention import RetentionRange, RetentionSpec  # noqa: E402
from ctxcache.runtime import (  # noqa: E402
    ContextCacheCoordinator,
    DecodingContext,
    Headroom,
    ManagedKVCacheRequest,
    MediaItem,
    Request,
    ResidentRef,
    SpecReuseContract,
    _marshal,  # noqa: E402
)

RUNNING = ctxcache.SequenceStatus.RUNNING


@dataclass
class Rt:
    """A CPU coordinator (16 pages of 4 tokens, 4 x 8 table, lengths for 4) whose request runs rows on slots 0 and 1
    with a decode step prepared (slot 2's epoch 1 was used by an earlier, finished request), and a second
    coordinator whose request has a compaction pending. objects: the three triples (pool, table, lengths) of the
    first coordinator, the second, and a closed one (rows empty again)."""

    backend: device.Backend
    objects: list
    coordinator: ContextCacheCoordinator
    request: ManagedKVCacheRequest
    context: DecodingContext          # the request's batch as prepared for the step
    stepped: DecodingContext          # the same batch after the engine's step (each row one token)
    pending: ContextCacheCoordinator
    pending_request: ManagedKVCacheRequest
    closed_request: ManagedKVCacheRequest


def _rt_context(rows, refs):
    return DecodingContext([np.array(r, np.int32) for r in rows], [len(r) for r in rows], [0] * len(rows),
                           [RUNNING] * len(rows), refs)


def _rt_prefill(coordinator, rows, refs):
    context = _rt_context(rows, refs)
    request = ManagedKVCacheRequest.begin(coordinator, [Request(np.array(r, np.int32)) for r in rows], context)
    request.prepare_prefill()
    context.token_ids = [np.append(t, np.int32(100)) for t in context.token_ids]
    context.generated_lengths = [1] * len(rows)
    request.complete_prefill(context)
    return request, context


def _rt_devices(backend):
    pool = device.KvPagePool(backend, num_pages=16, page_size=4, layers=[(1, 2)])
    table = device.KvPageTable(backend, max_batch=4, max_pages_per_seq=8, num_pages=16)
    lengths = device.KvLengths(backend, 4)
    return pool, table, lengths


@pytest.fixture
def rt():
    backend = device.Backend("cpu")
    pool, table, lengths = _rt_devices(backend)
    coordinator = ContextCacheCoordinator(max_batch=4, base_pool=pool, base_table=table, base_lengths=lengths)
    earlier, _ = _rt_prefill(coordinator, [[7, 7, 7]], [ResidentRef(2, 1)])
    earlier.finish()
    earlier.close()
    request, context = _rt_prefill(coordinator, [list(range(1, 9)), list(range(20, 26))],
                                   [ResidentRef(0, 1), ResidentRef(1, 1)])
    request.prepare_decode_step(context)
    stepped = DecodingContext([np.append(t, np.int32(5)) for t in context.token_ids], context.raw_input_lengths,
                              [2, 2], context.status, context.resident_refs)
    p_pool, p_table, p_lengths = _rt_devices(backend)
    pending = ContextCacheCoordinator(max_batch=4, base_pool=p_pool, base_table=p_table, base_lengths=p_lengths)
    pending_request, _ = _rt_prefill(pending, [[1, 2, 3], [4, 5, 6]], [ResidentRef(0, 1), ResidentRef(1, 1)])
    pending_request.begin_batch_compaction([0, -1], 1)
    closed_pool, closed_table, closed_lengths = _rt_devices(backend)
    with ContextCacheCoordinator(max_batch=4, base_pool=closed_pool, base_table=closed_table,
                                 base_lengths=closed_lengths) as other:
        closed_request, _ = _rt_prefill(other, [[1, 2]], [ResidentRef(0, 1)])
        closed_request.close()
    objects = [pool, table, lengths, p_pool, p_table, p_lengths, closed_pool, closed_table, closed_lengths]
    w = Rt(backend, objects, coordinator, request, context, stepped, pending, pending_request, closed_request)
    yield w
    for c in (coordinator, pending):
        c.check_invariants()
    request.close()
    pending_request.close()
    coordinator.close()
    pending.close()
    for obj in objects:
        obj.close()
    assert backend.allocated_bytes == 0, "device memory leaked"
    backend.close()


def observe_rt(w: Rt) -> tuple:
    out = []
    for c, r in ((w.coordinator, w.request), (w.pending, w.pending_request)):
        metrics = dataclasses.replace(c.metrics, planning_nanoseconds=0)
        out += [metrics, c.poisoned, c.active_request_count, c.quarantined_request_count]
        out += [r.batch_size, r.live, r.has_pending_joiner, r.prefill_starts.tolist()]
        for row in range(r.batch_size):
            s = r.sequence(row)
            out += [dataclasses.replace(s, base_pages=None, draft_pages=None), s.base_pages.tolist()]
    for obj in w.objects:
        if isinstance(obj, device.KvPageTable):
            out.append(obj.host_table().tobytes())
        elif isinstance(obj, device.KvLengths):
            out.append(obj.read().tolist())
    return tuple(out)


def _c_metrics_short(w: Rt):
    out = ffi.new("ctxc_context_cache_metrics_t *")
    out.struct_size = 8
    check(lib.ctxc_coordinator_metrics(w.coordinator._live(), out))


def _admit(w: Rt, slot: int, epoch: int, request=None):
    return (request or w.request).admit_sequence(Request([40, 41, 42]), ResidentRef(slot, epoch))


def _c_begin_with_retention(w: Rt, priority: int):
    """ctxc_kv_request_begin with a C retention spec the Python layer would have refused (a range at `priority`)."""
    tokens = ffi.new("int32_t[]", [1, 2, 3])
    seq = ffi.new("ctxc_sequence_request_t *")
    seq.token_ids, seq.token_count, seq.lookup_policy = tokens, 3, lib.CTXC_INHERIT_LOOKUP_POLICY
    rng = ffi.new("ctxc_retention_range_t *")
    rng.token_start, rng.token_end, rng.priority, rng.duration_ns = 0, 2, priority, -1
    spec = ffi.new("ctxc_retention_spec_t *")
    lib.ctxc_retention_spec_init(spec)
    spec.ranges, spec.range_count = rng, 1
    seq.retention = spec
    keep: list = []
    context = _marshal._c_context(_rt_context([[1, 2, 3]], [ResidentRef(3, 1)]), keep)
    options = ffi.new("ctxc_kv_request_options_t *")
    lib.ctxc_kv_request_options_init(options)
    check(lib.ctxc_kv_request_begin(w.coordinator._live(), seq, 1, context, options, ffi.new("ctxc_kv_request_t **")))


def _retained(priority=90, token_end=2, duration=None):
    return Request([1, 2, 3], retention=RetentionSpec(ranges=(RetentionRange(0, token_end, priority, duration),)))


RUNTIME_CATALOGUE: dict[str, list] = {
    "null_handle": [
        case("rt_begin_on_no_coordinator", ArgumentTypeError,
             "backend must be a ContextCacheCoordinator or a BoundedSwaKVPageManager, got NoneType",
             lambda w: ManagedKVCacheRequest.begin(None, [Request([1])], w.context)),
        case("rt_c_begin_swa_on_a_coordinator", InvalidHandleError,
             "ctxc_kv_request_begin_swa: manager is not a live handle",
             lambda w: check(lib.ctxc_kv_request_begin_swa(ffi.cast("ctxc_swa_manager_t *", w.coordinator._live()),
                                                           ffi.NULL, 0, ffi.NULL, ffi.NULL,
                                                           ffi.new("ctxc_kv_request_t **")))),
        case("rt_c_null_request", InvalidHandleError, "ctxc_kv_request_prepare_prefill: request is NULL",
             lambda w: check(lib.ctxc_kv_request_prepare_prefill(ffi.NULL))),
        case("rt_coordinator_over_a_table_as_pool", ArgumentTypeError, "base_pool must be a KvPagePool or None, got KvPageTable",
             lambda w: ContextCacheCoordinator(base_pool=w.objects[1])),
        case("rt_c_pool_as_coordinator", InvalidHandleError, "ctxc_coordinator_shutdown: coordinator is not a live handle",
             lambda w: check(lib.ctxc_coordinator_shutdown(ffi.cast("ctxc_coordinator_t *", w.objects[0]._live())))),
    ],
    "dangling_handle": [
        case("rt_closed_request", InvalidHandleError, "request was closed", lambda w: w.closed_request.finish()),
        case("rt_c_stale_request", InvalidHandleError, "ctxc_kv_request_finish: request is not a live handle",
             lambda w: check(lib.ctxc_kv_request_finish(ffi.cast("ctxc_kv_request_t *", 0xDEAD00CC)))),
    ],
    "wrong_struct_size": [
        case("rt_metrics_short_struct", InvalidArgumentError, "out_metrics->struct_size is 8", _c_metrics_short),
    ],
    "stale_resident_epoch": [
        case("rt_joiner_epoch_already_used", ContractError, "resident epoch 1 of slot 2 is stale",
             lambda w: _admit(w, 2, 1)),
        case("rt_joiner_epoch_zero", ContractError, "resident epoch 0 is invalid", lambda w: _admit(w, 3, 0)),
    ],
    "duplicate_slots": [
        case("rt_begin_twice_on_slot_3", ContractError, r"sequences\[0\] and \[1\] share resident slot 3",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [Request([1]), Request([2])],
                                                   _rt_context([[1], [2]], [ResidentRef(3, 1), ResidentRef(3, 2)]))),
        case("rt_joiner_on_a_live_slot", ContractError, "resident slot 0 is held by a live sequence",
             lambda w: _admit(w, 0, 9)),
    ],
    "steps_out_of_order": [
        case("rt_prefill_while_executing", ContractError, "not allowed while the request is executing",
             lambda w: w.request.prepare_prefill()),
        case("rt_complete_compaction_never_begun", ContractError, "no compaction is pending",
             lambda w: w.request.complete_batch_compaction([0, 1])),
        case("rt_decode_step_while_compaction_pending", ContractError, "not allowed while the request is compaction pending",
             lambda w: w.pending_request.prepare_decode_step(_rt_context([[1, 2, 3, 100], [4, 5, 6, 100]],
                                                                         [ResidentRef(0, 1), ResidentRef(1, 1)]))),
    ],
    "compaction_map_that_reorders_survivors": [
        case("rt_swapped_survivors", ContractError, r"oldToNew\[0\] = 1 reorders",
             lambda w: w.request.begin_batch_compaction([1, 0], 2)),
        case("rt_map_of_another_length", ContractError, "the map has 3 entries for a batch of 2",
             lambda w: w.request.begin_batch_compaction([0, 1, -1], 2)),
    ],
    "advances_that_break_the_token_state_contract": [
        case("rt_generated_lengths_too_long", ContractError, "breaks the token-state contract",
             lambda w: w.request.complete_decode_step(dataclasses.replace(w.stepped, generated_lengths=[5, 2]))),
        case("rt_two_tokens_in_a_plain_step", ContractError, "a non-speculative step accepts one",
             lambda w: w.request.complete_decode_step(dataclasses.replace(
                 w.stepped, token_ids=[np.append(w.stepped.token_ids[0], np.int32(6)), w.stepped.token_ids[1]],
                 generated_lengths=[3, 2]))),
        case("rt_context_of_another_batch", ContractError, "active batch 1 differs from the request's 2",
             lambda w: w.request.complete_decode_step(_rt_context([[1, 2]], [ResidentRef(0, 1)]))),
    ],
    "admission_while_compaction_is_pending": [
        case("rt_joiner_during_compaction", ContractError, "not allowed while the request is compaction pending",
             lambda w: _admit(w, 2, 2, w.pending_request)),
    ],
    "deployment_the_profile_cannot_serve": [
        case("rt_hybrid_without_snapshots", ContractError, "checkpoint reuse needs resident state and snapshot storage",
             lambda w: ContextCacheCoordinator(max_batch=4, model_state_kind="hybrid", base_pool=w.objects[6],
                                               base_table=w.objects[7], base_lengths=w.objects[8])),
        case("rt_table_with_bound_rows", ContractError, "base page table row of slot 0 is not empty",
             lambda w: ContextCacheCoordinator(max_batch=4, base_pool=w.objects[0], base_table=w.objects[1],
                                               base_lengths=w.objects[2])),
        case("rt_spec_without_a_draft_pool", ContractError, "needs a draft pool, page table and KV lengths",
             lambda w: ContextCacheCoordinator(max_batch=4, spec=SpecReuseContract(), base_pool=w.objects[6],
                                               base_table=w.objects[7], base_lengths=w.objects[8])),
        case("rt_speculative_request_without_a_spec_contract", ContractError, "without a spec contract",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [Request([1])], _rt_context([[1]], [ResidentRef(3, 1)]),
                                                   speculative=True)),
    ],
    "seating_media_and_rows": [
        case("rt_finalize_without_a_joiner", ContractError, "no joiner is pending",
             lambda w: w.request.finalize_sequence_admission(2, 5, 3)),
        case("rt_reuse_length_of_a_missing_row", ContractError, "row 7 is out of range",
             lambda w: w.request.reuse_token_length(7)),
        case("rt_compaction_completed_with_another_map", ContractError, "keepMapping differs",
             lambda w: w.pending_request.complete_batch_compaction([-1, 0])),
        case("rt_media_span_past_the_prompt", ContractError, r"media\[0\] span \[2, 6\) is outside the 3-token prompt",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [Request([1, 2, 3], media=[MediaItem(b"x", 2, 4)])],
                                                   _rt_context([[1, 2, 3]], [ResidentRef(3, 1)]))),
        case("rt_media_over_a_text_token", ContractError, "which is not a media placeholder id",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [Request([1, 9, 9], media=[MediaItem(b"x", 0, 2)])],
                                                   _rt_context([[1, 9, 9]], [ResidentRef(3, 1)]),
                                                   media_token_ids=[9])),
        case("rt_overlapping_media", ContractError, "overlaps another media item",
             lambda w: ManagedKVCacheRequest.begin(
                 w.coordinator, [Request([9, 9, 9], media=[MediaItem(b"x", 0, 2), MediaItem(b"y", 1, 2)])],
                 _rt_context([[9, 9, 9]], [ResidentRef(3, 1)]))),
        case("rt_empty_prompt", ContractError, r"sequences\[0\] has no tokens",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [Request(np.zeros(0, np.int32))],
                                                   _rt_context([[]], [ResidentRef(3, 1)]))),
        case("rt_negative_headroom", InvalidArgumentError, r"headroom->base_extra_tokens is negative \(-1\)",
             lambda w: w.request.prepare_decode_step(w.context, Headroom(-1, 0))),
    ],
    "retention_specs_and_clock": [
        case("rt_retention_priority_above_100", InvalidArgumentError,
             r"retention.ranges\[0\].priority must be in \[0, 100\], got 101",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [_retained(101)],
                                                   _rt_context([[1, 2, 3]], [ResidentRef(3, 1)]))),
        case("rt_retention_end_before_start", InvalidArgumentError, r"ends at 0, not after its start 0|must be in",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [_retained(token_end=0)],
                                                   _rt_context([[1, 2, 3]], [ResidentRef(3, 1)]))),
        case("rt_retention_negative_duration", InvalidArgumentError, r"duration must be in \[0, 9.2e9\] seconds",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [_retained(duration=-1.0)],
                                                   _rt_context([[1, 2, 3]], [ResidentRef(3, 1)]))),
        case("rt_retention_not_a_spec", ArgumentTypeError, "retention must be a RetentionSpec or None, got dict",
             lambda w: ManagedKVCacheRequest.begin(w.coordinator, [Request([1, 2, 3], retention={"priority": 90})],
                                                   _rt_context([[1, 2, 3]], [ResidentRef(3, 1)]))),
        case("rt_c_retention_priority_above_100", ContractError,
             r"ctxc_kv_request_begin: .*priority 101 is outside 0..100", lambda w: _c_begin_with_retention(w, 101)),
        case("rt_joiner_retention_priority_negative", InvalidArgumentError, r"must be in \[0, 100\], got -1",
             lambda w: w.request.admit_sequence(_retained(-1), ResidentRef(2, 5))),
        case("rt_retention_time_not_a_number", ArgumentTypeError, "seconds must be a number of seconds, got str",
             lambda w: w.coordinator.set_retention_time("soon")),
        case("rt_retention_time_nan", InvalidArgumentError, r"seconds must be in \[-9.2e9, 9.2e9\] seconds, got nan",
             lambda w: w.coordinator.set_retention_time(float("nan"))),
    ],
}
RUNTIME_CASES = [c for cases in RUNTIME_CATALOGUE.values() for c in cases]


def test_every_runtime_bad_input_is_catalogued():
    assert len(RUNTIME_CATALOGUE) == 12 and all(RUNTIME_CATALOGUE.values())
    assert len(RUNTIME_CASES) >= 30
    ids = [p.id for p in RUNTIME_CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("exception,match,call", RUNTIME_CASES)
def test_runtime_bad_input_is_refused_and_changes_nothing(rt, exception, match, call):
    before = observe_rt(rt)
    with pytest.raises(ctxcache.Error) as info:
        call(rt)
    assert type(info.value) is exception, f"{type(info.value).__name__}: {info.value}"
    assert re.search(match, str(info.value)), f"message {str(info.value)!r} does not mention {match!r}"
    del info
    assert observe_rt(rt) == before
    rt.coordinator.check_invariants()
    rt.pending.check_invariants()
