"""The catalogue of bad inputs: each is refused with its exact exception type, says which argument is wrong, and
changes nothing (every pool, free list, refcount, record, index entry and metric is as before, and the invariant
check passes). Argument errors are caught in Python before anything reaches C; state errors come from the library.

The per-request calls check their arguments through fast paths for the common exact types (an ``int`` in range,
an ``np.ndarray`` of the native dtype with C-contiguous strides) before the full checks: the ``*_fast_path_*``
cases are the inputs closest to those paths that must still be refused, and
test_inputs_off_the_fast_paths_are_accepted_as_before the ones that miss them and must still be accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

import ctxcache
from ctxcache import (
    ArgumentTypeError,
    BlockKeyExtras,
    ContractError,
    HybridCheckpointKey,
    HybridSnapshotReservation,
    InvalidArgumentError,
    InvalidHandleError,
    LeasesOutstandingError,
    LookupPolicy,
    MediaSpanKey,
    ResourceDemand,
    ResourceType,
)

from conftest import PAGE, pool_state, to_hashes

BASE = ResourceType.BASE_KV_PAGE
A, B, C, D = [11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34], [41, 42, 43, 44]
TOKENS = np.arange(12, dtype=np.int32)  # three full blocks
EMPTY = np.zeros((0, 2), dtype=np.uint64)


@dataclass
class World:
    m: ctxcache.ContextCacheManager  # a record [A, B] on pages 0, 1
    other: ctxcache.ContextCacheManager  # a second manager with its own lease
    h: np.ndarray  # hashes of A + B
    record: int
    result: ctxcache.AcquireResult  # the consumer's acquire result ...
    lease: ctxcache.Lease  # ... its live lease on A + B + [1]: pages [0, 1, 2], matched [A, B]
    released: ctxcache.Lease  # a released (not yet destroyed) lease of m
    foreign: ctxcache.Lease  # a live lease of `other`
    orphan: ctxcache.Lease  # a lease whose manager was closed first

    @property
    def managers(self):
        return (self.m, self.other)


@pytest.fixture
def world(make_manager):
    m = make_manager()
    other = make_manager(base_kv_pages=4)
    h = to_hashes(A + B)
    with m.acquire_vanilla(h, 8).lease as producer:
        record = m.publish(producer, h, 8).record
    result = m.acquire_vanilla(to_hashes(A + B + [1]), 9)
    assert [int(p) for p in result.lease.base_pages] == [0, 1, 2]
    released = m.acquire_vanilla(to_hashes(C), 4).lease
    released.release()
    foreign = other.acquire_vanilla(to_hashes(A), 4).lease
    closed = ctxcache.ContextCacheManager(PAGE, ResourceDemand(base_kv_pages=2))
    orphan = closed.acquire_vanilla(EMPTY, 4).lease
    with pytest.raises(LeasesOutstandingError):
        closed.close()
    w = World(m, other, h, record, result, result.lease, released, foreign, orphan)
    for manager in w.managers:
        manager.check_invariants()
    yield w
    for lease in (w.lease, w.released, w.foreign, w.orphan):
        lease.close()


def assert_rejected(world: World, exception: type, match: str | None, call) -> None:
    before = [pool_state(m) for m in world.managers]
    with pytest.raises(ctxcache.Error) as info:
        call(world)
    assert type(info.value) is exception, f"{type(info.value).__name__}: {info.value}"
    if match is not None:
        assert re.search(match, str(info.value)), f"message {str(info.value)!r} does not mention {match!r}"
    for m, state in zip(world.managers, before):
        m.check_invariants()
        assert pool_state(m) == state


def case(name, exception, match, call):
    return pytest.param(exception, match, call, id=name)


def noncontiguous_hashes(h):
    doubled = np.repeat(h, 2, axis=0)
    view = doubled[::2]
    assert not view.flags.c_contiguous and np.array_equal(view, h)
    return view


def one_column(h):
    """The hashes' first column: the strides of an (n, 2) uint64 array, the shape (n, 1)."""
    view = h[:, :1]
    assert view.strides == (16, 8) and view.shape == (h.shape[0], 1)
    return view


def destroyed_lease(w):
    """The world's released lease, now destroyed too (closing a released lease changes no pool)."""
    w.released.close()
    return w.released


def changed(h, index):
    out = h.copy()
    out[index, 1] ^= np.uint64(1)
    return out


# ---- acquire --------------------------------------------------------------------------------------------------

ACQUIRE_CASES = [
    case("hashes_int64", ArgumentTypeError, "full_block_hashes.*uint64",
         lambda w: w.m.acquire_vanilla(w.h.astype(np.int64), 9)),
    case("hashes_float64", ArgumentTypeError, "full_block_hashes.*uint64",
         lambda w: w.m.acquire_vanilla(w.h.astype(np.float64), 9)),
    case("hashes_big_endian", ArgumentTypeError, "full_block_hashes.*uint64",
         lambda w: w.m.acquire_vanilla(w.h.astype(">u8"), 9)),
    case("hashes_shape_n3", InvalidArgumentError, r"full_block_hashes.*shape \(n, 2\)",
         lambda w: w.m.acquire_vanilla(np.zeros((2, 3), dtype=np.uint64), 9)),
    case("hashes_1d", InvalidArgumentError, r"full_block_hashes.*shape \(n, 2\)",
         lambda w: w.m.acquire_vanilla(w.h[0], 9)),
    case("hashes_3d", InvalidArgumentError, r"full_block_hashes.*shape",
         lambda w: w.m.acquire_vanilla(w.h.reshape(1, 2, 2), 9)),
    case("hashes_non_contiguous", ArgumentTypeError, "full_block_hashes.*C-contiguous",
         lambda w: w.m.acquire_vanilla(noncontiguous_hashes(w.h), 9)),
    case("hashes_fortran_order", ArgumentTypeError, "C-contiguous",
         lambda w: w.m.acquire_vanilla(np.asfortranarray(w.h), 9)),
    case("hashes_python_list", ArgumentTypeError, "full_block_hashes.*numpy",
         lambda w: w.m.acquire_vanilla(w.h.tolist(), 9)),
    case("hashes_none", ArgumentTypeError, "full_block_hashes",
         lambda w: w.m.acquire_vanilla(None, 9)),
    case("input_token_count_negative", InvalidArgumentError, "input_token_count.*>= 0",
         lambda w: w.m.acquire_vanilla(EMPTY, -1)),
    case("input_token_count_above_int32", InvalidArgumentError, "input_token_count",
         lambda w: w.m.acquire_vanilla(EMPTY, 2**31)),
    case("input_token_count_bool", ArgumentTypeError, "input_token_count.*bool",
         lambda w: w.m.acquire_vanilla(EMPTY, True)),
    case("input_token_count_float", ArgumentTypeError, "input_token_count.*float",
         lambda w: w.m.acquire_vanilla(w.h, 9.0)),
    case("lookup_policy_unknown_value", InvalidArgumentError, "lookup_policy",
         lambda w: w.m.acquire_vanilla(w.h, 9, 2)),
    case("lookup_policy_negative", InvalidArgumentError, "lookup_policy",
         lambda w: w.m.acquire_vanilla(w.h, 9, -1)),
    case("lookup_policy_string", ArgumentTypeError, "lookup_policy",
         lambda w: w.m.acquire_vanilla(w.h, 9, "bypass")),
    case("lookup_policy_bool", ArgumentTypeError, "lookup_policy",
         lambda w: w.m.acquire_vanilla(w.h, 9, True)),
    case("too_many_hashes_for_token_count", ContractError, "3 full-block hashes for 11 tokens",
         lambda w: w.m.acquire_vanilla(to_hashes(A + B + C), 11)),
    case("hashes_for_an_empty_prompt", ContractError, "2 full-block hashes for 0 tokens",
         lambda w: w.m.acquire_vanilla(w.h, 0)),
    case("hashes_fast_path_one_column_view", InvalidArgumentError, r"full_block_hashes.*shape \(n, 2\)",
         lambda w: w.m.acquire_vanilla(one_column(w.h), 9)),
    case("hashes_fast_path_reversed_rows", ArgumentTypeError, "full_block_hashes.*C-contiguous",
         lambda w: w.m.acquire_vanilla(w.h[::-1], 9)),
    case("hashes_fast_path_uint32_pairs", ArgumentTypeError, "full_block_hashes.*uint64",
         lambda w: w.m.acquire_vanilla(np.zeros((2, 4), np.uint32).view(np.uint32), 9)),
    case("input_token_count_fast_path_numpy_bool", ArgumentTypeError, "input_token_count.*bool",
         lambda w: w.m.acquire_vanilla(EMPTY, np.bool_(True))),
    case("input_token_count_fast_path_numpy_above_int32", InvalidArgumentError, "input_token_count.*<= 2147483647",
         lambda w: w.m.acquire_vanilla(EMPTY, np.int64(2**31))),
    case("input_token_count_fast_path_string", ArgumentTypeError, "input_token_count.*str",
         lambda w: w.m.acquire_vanilla(EMPTY, "4")),
    case("lookup_policy_fast_path_numpy_unknown_value", InvalidArgumentError, "lookup_policy",
         lambda w: w.m.acquire_vanilla(w.h, 9, np.int64(2))),
    case("acquire_spec_fast_path_count_negative", InvalidArgumentError, "input_token_count.*>= 0",
         lambda w: w.m.acquire_spec(EMPTY, -1)),
]

# ---- grow -------------------------------------------------------------------------------------------------------

GROW_CASES = [
    case("grow_negative_count", InvalidArgumentError, "count.*>= 0", lambda w: w.m.grow_base_pages(w.lease, -1)),
    case("grow_count_above_int32", InvalidArgumentError, "count", lambda w: w.m.grow_base_pages(w.lease, 2**31)),
    case("grow_bool_count", ArgumentTypeError, "count.*bool", lambda w: w.m.grow_base_pages(w.lease, True)),
    case("grow_acquire_result_as_lease", ArgumentTypeError, "lease must be a Lease.*AcquireResult",
         lambda w: w.m.grow_base_pages(w.result, 1)),
    case("grow_foreign_lease", InvalidHandleError, "another manager", lambda w: w.m.grow_base_pages(w.foreign, 1)),
    case("grow_released_lease", InvalidHandleError, "already released", lambda w: w.m.grow_base_pages(w.released, 1)),
    case("grow_orphaned_lease", InvalidHandleError, "outlived", lambda w: w.m.grow_base_pages(w.orphan, 1)),
    case("grow_spec_pages_on_vanilla_lease", ContractError, r"needs a spec or Hybrid\+MTP lease",
         lambda w: w.m.grow_spec_pages(w.lease, 1, 0)),
    case("grow_fast_path_numpy_bool_count", ArgumentTypeError, "count.*bool",
         lambda w: w.m.grow_base_pages(w.lease, np.bool_(False))),
    case("grow_fast_path_float_count", ArgumentTypeError, "count.*float", lambda w: w.m.grow_base_pages(w.lease, 1.0)),
    case("grow_fast_path_none_as_lease", ArgumentTypeError, "lease must be a Lease, got NoneType",
         lambda w: w.m.grow_base_pages(None, 1)),
    case("grow_fast_path_destroyed_lease", InvalidHandleError, "lease was destroyed",
         lambda w: w.m.grow_base_pages(destroyed_lease(w), 1)),
    case("grow_spec_fast_path_negative_draft_count", InvalidArgumentError, "draft_count.*>= 0",
         lambda w: w.m.grow_spec_pages(w.lease, 0, -1)),
]

# ---- publish ------------------------------------------------------------------------------------------------------

PUBLISH_CASES = [
    case("publish_changed_second_block", ContractError, r"fullBlockHashes\[1\] no longer describes the acquired prefix",
         lambda w: w.m.publish(w.lease, changed(w.h, 1), 9)),
    case("publish_changed_first_block", ContractError, r"fullBlockHashes\[0\] no longer describes",
         lambda w: w.m.publish(w.lease, changed(w.h, 0), 9)),
    case("publish_other_prompt", ContractError, "no longer describes",
         lambda w: w.m.publish(w.lease, to_hashes(C + D), 9)),
    case("publish_zero_resident_blocks", ContractError, "at least one resident full block",
         lambda w: w.m.publish(w.lease, w.h, PAGE - 1)),
    case("publish_zero_hashes", ContractError, "at least one resident full block",
         lambda w: w.m.publish(w.lease, EMPTY, 9)),
    case("publish_more_blocks_than_lease_pages", ContractError, "4 blocks but the lease holds 3 base pages",
         lambda w: w.m.publish(w.lease, to_hashes(A + B + C + D), 16)),
    case("publish_negative_resident_length", InvalidArgumentError, "resident_state_length",
         lambda w: w.m.publish(w.lease, w.h, -4)),
    case("publish_bool_resident_length", ArgumentTypeError, "resident_state_length",
         lambda w: w.m.publish(w.lease, w.h, True)),
    case("publish_int64_hashes", ArgumentTypeError, "uint64",
         lambda w: w.m.publish(w.lease, w.h.astype(np.int64), 9)),
    case("publish_foreign_lease", InvalidHandleError, "another manager",
         lambda w: w.m.publish(w.foreign, to_hashes(A), 4)),
    case("publish_released_lease", InvalidHandleError, "already released",
         lambda w: w.m.publish(w.released, to_hashes(C), 4)),
    case("publish_orphaned_lease", InvalidHandleError, "outlived",
         lambda w: w.m.publish(w.orphan, to_hashes(C), 4)),
    case("publish_none_as_lease", ArgumentTypeError, "lease must be a Lease", lambda w: w.m.publish(None, w.h, 8)),
    case("publish_manager_as_lease", ArgumentTypeError, "lease must be a Lease",
         lambda w: w.m.publish(w.other, w.h, 8)),
    case("publish_hybrid_with_vanilla_lease", ContractError, "needs a hybrid lease",
         lambda w: w.m.publish_hybrid(w.lease, w.h, HybridCheckpointKey(w.h[1], 8), HybridSnapshotReservation(0))),
    case("publish_fast_path_one_column_hashes", InvalidArgumentError, r"full_block_hashes.*shape \(n, 2\)",
         lambda w: w.m.publish(w.lease, one_column(w.h), 9)),
    case("publish_fast_path_resident_numpy_bool", ArgumentTypeError, "resident_state_length.*bool",
         lambda w: w.m.publish(w.lease, w.h, np.bool_(True))),
    case("publish_fast_path_resident_above_int32", InvalidArgumentError, "resident_state_length",
         lambda w: w.m.publish(w.lease, w.h, 2**31)),
    case("publish_fast_path_tokens_int64", ArgumentTypeError, "tokens.*int32",
         lambda w: w.m.publish(w.lease, w.h, 9, TOKENS.astype(np.int64))),
    case("publish_fast_path_tokens_reversed", ArgumentTypeError, "tokens.*C-contiguous",
         lambda w: w.m.publish(w.lease, w.h, 9, TOKENS[::-1])),
    case("publish_fast_path_tokens_2d", InvalidArgumentError, "tokens.*1-D",
         lambda w: w.m.publish(w.lease, w.h, 9, TOKENS.reshape(3, 4))),
    case("publish_fast_path_destroyed_lease", InvalidHandleError, "lease was destroyed",
         lambda w: w.m.publish(destroyed_lease(w), w.h, 8)),
]

# ---- eviction and views ---------------------------------------------------------------------------------------

VIEW_CASES = [
    case("evict_unknown_record", ContractError, "no record 99", lambda w: w.m.evict_record(99)),
    case("evict_record_zero", ContractError, "no record 0", lambda w: w.m.evict_record(0)),
    case("evict_negative_record", InvalidArgumentError, "record_id", lambda w: w.m.evict_record(-1)),
    case("evict_record_above_uint64", InvalidArgumentError, "record_id", lambda w: w.m.evict_record(2**64)),
    case("evict_bool_record", ArgumentTypeError, "record_id", lambda w: w.m.evict_record(True)),
    case("evict_string_record", ArgumentTypeError, "record_id", lambda w: w.m.evict_record("1")),
    case("evict_record_of_other_manager", ContractError, "no record", lambda w: w.other.evict_record(w.record)),
    case("records_unknown_id", ContractError, "record 99 does not exist", lambda w: w.m.records[99]),
    case("free_count_unknown_type", InvalidArgumentError, "ResourceType", lambda w: w.m.pools.free_count(4)),
    case("free_count_negative_type", InvalidArgumentError, "ResourceType", lambda w: w.m.pools.free_count(-1)),
    case("free_count_string_type", ArgumentTypeError, "resource type", lambda w: w.m.pools.free_count("base")),
    case("capacity_bool_type", ArgumentTypeError, "resource type", lambda w: w.m.pools.capacity(False)),
    case("ref_count_index_out_of_range", ContractError, r"index 8 is out of range \[0, 8\)",
         lambda w: w.m.pools.active_ref_count((BASE, 8))),
    case("ref_count_index_of_empty_pool", ContractError, r"out of range \[0, 0\)",
         lambda w: w.m.pools.cache_ref_count((ResourceType.PARTIAL_KV_SNAPSHOT, 0))),
    case("ref_count_negative_index", InvalidArgumentError, "index",
         lambda w: w.m.pools.active_ref_count((BASE, -1))),
    case("ref_count_unknown_type", InvalidArgumentError, "ResourceType", lambda w: w.m.pools.active_ref_count((7, 0))),
    case("ref_count_list_id", ArgumentTypeError, "ResourceId", lambda w: w.m.pools.active_ref_count([BASE, 0])),
    case("base_index_lookup_bad_shape", InvalidArgumentError, "block_hash",
         lambda w: w.m.base_index.lookup(w.h)),
    case("base_index_lookup_negative_word", InvalidArgumentError, r"block_hash\[0\]",
         lambda w: w.m.base_index.lookup((-1, 0))),
]

# ---- hashing ---------------------------------------------------------------------------------------------------

HASH_CASES = [
    case("algorithm_unknown", InvalidArgumentError, "algorithm", lambda w: ctxcache.hash_full_blocks(TOKENS, 4, "md5")),
    case("algorithm_wrong_type", ArgumentTypeError, "algorithm", lambda w: ctxcache.hash_full_blocks(TOKENS, 4, 1.5)),
    case("hasher_algorithm_none", ArgumentTypeError, "algorithm", lambda w: ctxcache.Hasher(None)),
    case("fnv1a128_with_key", InvalidArgumentError, "fnv1a128 takes no key",
         lambda w: ctxcache.Hasher("fnv1a128", key=b"secret")),
    case("fnv1a128_with_key_function", InvalidArgumentError, "key",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, "fnv1a128", b"secret")),
    case("key_wrong_type", ArgumentTypeError, "key", lambda w: ctxcache.hash_full_blocks(TOKENS, 4, key=1.5)),
    case("key_negative_int", ArgumentTypeError, "key", lambda w: ctxcache.hash_full_blocks(TOKENS, 4, key=-1)),
    case("tokens_int64", ArgumentTypeError, "tokens.*int32",
         lambda w: ctxcache.hash_full_blocks(TOKENS.astype(np.int64), 4)),
    case("tokens_uint32", ArgumentTypeError, "tokens.*int32",
         lambda w: ctxcache.hash_full_blocks(TOKENS.astype(np.uint32), 4)),
    case("tokens_above_int32", InvalidArgumentError, r"tokens\[1\]",
         lambda w: ctxcache.hash_full_blocks([1, 2**31, 3, 4], 4)),
    case("tokens_below_int32", InvalidArgumentError, r"tokens\[0\]",
         lambda w: ctxcache.hash_full_blocks([-(2**31) - 1, 2, 3, 4], 4)),
    case("tokens_2d", InvalidArgumentError, "tokens.*1-D",
         lambda w: ctxcache.hash_full_blocks(TOKENS.reshape(3, 4), 4)),
    case("tokens_non_contiguous", ArgumentTypeError, "tokens.*C-contiguous",
         lambda w: ctxcache.hash_full_blocks(np.arange(24, dtype=np.int32)[::2], 4)),
    case("tokens_string", ArgumentTypeError, "tokens", lambda w: ctxcache.hash_full_blocks("abcd", 4)),
    case("tokens_float_list", ArgumentTypeError, r"tokens\[0\]", lambda w: ctxcache.hash_full_blocks([1.0, 2, 3, 4], 4)),
    case("tokens_bool_list", ArgumentTypeError, r"tokens\[2\]", lambda w: ctxcache.hash_full_blocks([1, 2, True, 4], 4)),
    case("page_size_zero", InvalidArgumentError, "page_size", lambda w: ctxcache.hash_full_blocks(TOKENS, 0)),
    case("page_size_negative", InvalidArgumentError, "page_size", lambda w: ctxcache.hash_exact_prefix(TOKENS, -4)),
    case("page_size_bool", ArgumentTypeError, "page_size", lambda w: ctxcache.hash_full_blocks(TOKENS, True)),
    case("extras_dict", ArgumentTypeError, "extras must be",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras={"adapter_id": (1, 2)})),
    case("extras_int", ArgumentTypeError, "extras must be", lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=5)),
    case("extras_list_with_other_object", ArgumentTypeError, r"extras\[1\]",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=[BlockKeyExtras(), None, BlockKeyExtras()])),
    case("extras_count_mismatch", InvalidArgumentError, "2 entries for 3 full blocks",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=[BlockKeyExtras(), BlockKeyExtras()])),
    case("extras_count_mismatch_exact_prefix", InvalidArgumentError, "extras",
         lambda w: ctxcache.hash_exact_prefix(TOKENS[:10], 4, extras=[BlockKeyExtras(), BlockKeyExtras()])),
    case("hash_block_extras_list", ArgumentTypeError, "extras",
         lambda w: ctxcache.hash_block(None, A, extras=[BlockKeyExtras()])),
    case("media_not_a_list", ArgumentTypeError, r"extras\[0\]\.media",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(media=5))),
    case("media_entry_wrong_type", ArgumentTypeError, "MediaSpanKey",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(media=[(1, 2)]))),
    case("media_modality_above_255", InvalidArgumentError, "modality",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(
             media=[MediaSpanKey((1, 1), (2, 2), 0, 0, 256)]))),
    case("media_offset_above_int32", InvalidArgumentError, "offset_within_block",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(
             media=[MediaSpanKey((1, 1), (2, 2), 2**31, 0, 0)]))),
    case("adapter_id_int64_array", ArgumentTypeError, "adapter_id.*uint64",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(adapter_id=np.array([1, 2])))),
    case("adapter_id_three_words", ArgumentTypeError, "adapter_id",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(adapter_id=(1, 2, 3)))),
    case("adapter_id_word_above_uint64", InvalidArgumentError, r"adapter_id\[1\]",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(adapter_id=(1, 2**64)))),
    case("adapter_generation_negative", InvalidArgumentError, "adapter_generation",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(adapter_id=(1, 2), adapter_generation=-1))),
    case("isolation_digest_string", ArgumentTypeError, "isolation_digest",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, extras=BlockKeyExtras(isolation_digest="tenant"))),
    case("per_position_media_wrong_length", InvalidArgumentError, "per_position_media_hashes has 11 rows for 12 tokens",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, per_position_media_hashes=np.zeros((11, 2), np.uint64))),
    case("per_position_media_wrong_dtype", ArgumentTypeError, "per_position_media_hashes.*uint64",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 4, per_position_media_hashes=np.zeros((12, 2), np.int64))),
    case("per_position_media_wrong_shape", InvalidArgumentError, "per_position_media_hashes.*shape",
         lambda w: ctxcache.hash_exact_prefix(TOKENS, 4, per_position_media_hashes=np.zeros((12, 3), np.uint64))),
    case("hash_block_parent_wrong_shape", InvalidArgumentError, "parent",
         lambda w: ctxcache.hash_block(np.zeros(3, np.uint64), A)),
    case("hash_block_parent_wrong_type", ArgumentTypeError, "parent", lambda w: ctxcache.hash_block([1, 2], A)),
    case("opaque_identity_int", ArgumentTypeError, "data", lambda w: ctxcache.hash_opaque_identity(5)),
    case("tokens_fast_path_reversed", ArgumentTypeError, "tokens.*C-contiguous",
         lambda w: ctxcache.hash_full_blocks(TOKENS[::-1], 4)),
    case("tokens_fast_path_column", ArgumentTypeError, "tokens.*C-contiguous",
         lambda w: ctxcache.hash_full_blocks(np.arange(24, dtype=np.int32).reshape(12, 2)[:, 0], 4)),
    case("page_size_fast_path_numpy_bool", ArgumentTypeError, "page_size.*bool",
         lambda w: ctxcache.hash_full_blocks(TOKENS, np.bool_(True))),
    case("page_size_fast_path_above_int32", InvalidArgumentError, "page_size",
         lambda w: ctxcache.hash_full_blocks(TOKENS, 2**31)),
]

# ---- construction ------------------------------------------------------------------------------------------------

CONSTRUCTION_CASES = [
    case("manager_page_size_zero", InvalidArgumentError, "page_size.*>= 1",
         lambda w: ctxcache.ContextCacheManager(0, ResourceDemand(base_kv_pages=4))),
    case("manager_page_size_negative", InvalidArgumentError, "page_size",
         lambda w: ctxcache.ContextCacheManager(-16, ResourceDemand(base_kv_pages=4))),
    case("manager_page_size_float", ArgumentTypeError, "page_size",
         lambda w: ctxcache.ContextCacheManager(4.0, ResourceDemand(base_kv_pages=4))),
    case("manager_capacities_dict", ArgumentTypeError, "capacities must be a ResourceDemand",
         lambda w: ctxcache.ContextCacheManager(4, {"base_kv_pages": 4})),
    case("manager_capacities_int", ArgumentTypeError, "capacities must be a ResourceDemand",
         lambda w: ctxcache.ContextCacheManager(4, 8)),
    case("demand_negative_capacity", InvalidArgumentError, "base_kv_pages",
         lambda w: ResourceDemand(base_kv_pages=-1)),
    case("demand_capacity_above_int32", InvalidArgumentError, "draft_kv_pages",
         lambda w: ResourceDemand(draft_kv_pages=2**31)),
    case("demand_float_capacity", ArgumentTypeError, "recurrent_snapshot_slots",
         lambda w: ResourceDemand(recurrent_snapshot_slots=1.5)),
    case("demand_bool_capacity", ArgumentTypeError, "partial_kv_snapshot_slots",
         lambda w: ResourceDemand(partial_kv_snapshot_slots=True)),
    case("manager_max_records_negative", InvalidArgumentError, "max_records",
         lambda w: ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=4), -1)),
    case("manager_max_records_none", ArgumentTypeError, "max_records",
         lambda w: ctxcache.ContextCacheManager(4, ResourceDemand(base_kv_pages=4), None)),
]

ALL_CASES = ACQUIRE_CASES + GROW_CASES + PUBLISH_CASES + VIEW_CASES + HASH_CASES + CONSTRUCTION_CASES


@pytest.mark.parametrize("exception,match,call", ALL_CASES)
def test_bad_input_is_refused_and_changes_nothing(world, exception, match, call):
    assert_rejected(world, exception, match, call)


def test_the_catalogue_is_large_and_distinct():
    names = [p.id for p in ALL_CASES]
    assert len(names) == len(set(names))
    assert len(names) >= 30


# ---- inputs the fast paths do not see are accepted as before ---------------------------------------------------


class HashArray(np.ndarray):
    """An ndarray subclass: not `type(x) is np.ndarray`, still a valid argument."""


class Count(int):
    """An int subclass: not `type(x) is int`, still a valid count."""


def off_the_fast_paths(h: np.ndarray) -> dict:
    """Valid arguments that miss each fast path (each checked to miss it)."""
    tagged = np.dtype(np.uint64, metadata={"tag": 1})  # == uint64, but not numpy's own uint64 dtype object
    padded = np.repeat(h, 2, axis=0)[::2][:1]  # one row, strides (32, 8): C-contiguous all the same
    out = {"subclass": h.view(HashArray), "tagged_dtype": h.view(tagged), "one_row_padded": padded}
    assert type(out["subclass"]) is not np.ndarray
    assert out["tagged_dtype"].dtype == np.uint64 and out["tagged_dtype"].dtype is not np.dtype(np.uint64)
    assert padded.strides != (16, 8) and padded.flags.c_contiguous
    return out


def serve(m, hashes, count, policy, grow):
    """One request (acquire, grow, publish with tokens, close) on a manager holding the record of A + B: what
    every call answered, and the manager's state after it."""
    result = m.acquire_vanilla(hashes, count, policy)
    plan = result.plan
    with result.lease as lease:
        grown = m.grow_base_pages(lease, grow)
        pages = [int(p) for p in lease.base_pages]
        published = m.publish(lease, hashes, count, TOKENS[:9].copy())
    m.check_invariants()
    return ((result.status, plan.matched_token_length, plan.reuse_token_length, plan.bound_base_page_count, grown,
             pages, published.status, published.record, [int(p) for p in published.canonical_base_pages],
             published.published_base_full_block_count), pool_state(m))


@pytest.mark.parametrize("count", [9, np.int64(9), np.int32(9), np.uint16(9), Count(9)],
                         ids=["int", "int64", "int32", "uint16", "int_subclass"])
@pytest.mark.parametrize("policy", [LookupPolicy.USE_CACHE, 0, np.int64(0)], ids=["enum", "int", "int64"])
def test_inputs_off_the_fast_paths_are_accepted_as_before(make_manager, count, policy):
    """Every valid spelling of the per-request calls' arguments answers, and changes the state, exactly as the
    plain spelling (an exact ndarray, int and LookupPolicy) does on a twin manager."""
    h = to_hashes(A + B + [1])  # two full blocks + one token: 9 tokens
    for name, hashes in {"plain": h, **off_the_fast_paths(h)}.items():
        twins = []
        for _ in range(2):
            m = make_manager()
            with m.acquire_vanilla(h, 9).lease as producer:
                m.publish(producer, h, 9)
            twins.append(m)
        plain = serve(twins[0], np.array(hashes), 9, LookupPolicy.USE_CACHE, 1)
        assert plain[0][0] == ctxcache.AcquireStatus.ACQUIRED and plain[0][4] is True  # a hit that grew
        assert serve(twins[1], hashes, count, policy, Count(1) if name == "subclass" else np.int64(1)) == plain, name


def test_token_arguments_off_the_fast_paths_hash_as_before():
    plain = ctxcache.hash_full_blocks(TOKENS, 4)
    tagged = np.dtype(np.int32, metadata={"tag": 1})
    assert tagged == np.int32 and TOKENS.view(tagged).dtype is not np.dtype(np.int32)
    for tokens in (list(TOKENS), TOKENS.view(HashArray), TOKENS.view(tagged), np.arange(12, dtype=np.int32)[:, None][:, 0]):
        for page_size in (4, np.int64(4), Count(4)):
            np.testing.assert_array_equal(ctxcache.hash_full_blocks(tokens, page_size), plain)
    hasher = ctxcache.Hasher()
    try:
        first, second = hasher.hash_full_blocks(TOKENS, 4), hasher.hash_full_blocks(TOKENS[:8], 4)
        assert first.shape == (3, 2) and second.shape == (2, 2)
        np.testing.assert_array_equal(first[:2], second)  # separate outputs: the later call wrote its own array
        np.testing.assert_array_equal(first, plain)
    finally:
        hasher.close()


# ---- after a refusal the objects are still fully usable ---------------------------------------------------------


def test_lease_still_publishes_after_refused_publications(world):
    for bad in (lambda: world.m.publish(world.lease, changed(world.h, 1), 9),
                lambda: world.m.publish(world.lease, world.h, 3),
                lambda: world.m.publish(world.lease, to_hashes(A + B + C + D), 16)):
        with pytest.raises(ContractError):
            bad()
    extended = to_hashes(A + B + [1, 2, 3])  # still the acquired prefix
    published = world.m.publish(world.lease, extended, 9)
    assert published.status == ctxcache.PublishStatus.EXISTING_RECORD and published.record == world.record
    # Page 3 went to the back of the free list when the world's released lease gave it up.
    assert [int(p) for p in world.m.pools.free_list(BASE)] == [4, 5, 6, 7, 3]
    assert world.m.grow_base_pages(world.lease, 1) is True
    assert [int(p) for p in world.lease.base_pages] == [0, 1, 2, 4]
    world.m.check_invariants()


def test_manager_still_acquires_after_refused_acquires(world):
    with pytest.raises(ContractError):
        world.m.acquire_vanilla(to_hashes(A + B + C), 9)
    with pytest.raises(InvalidArgumentError):
        world.m.acquire_vanilla(world.h, 9, 5)
    result = world.m.acquire_vanilla(world.h, 9, LookupPolicy.USE_CACHE)
    assert result.plan.reuse_token_length == 8
    result.lease.close()
    world.m.check_invariants()


# ---- a closed manager --------------------------------------------------------------------------------------------

CLOSED_CALLS = [
    pytest.param(lambda m, h: m.acquire_vanilla(h, 8), id="acquire_vanilla"),
    pytest.param(lambda m, h: m.evict_record(1), id="evict_record"),
    pytest.param(lambda m, h: m.check_invariants(), id="check_invariants"),
    pytest.param(lambda m, h: m.metrics, id="metrics"),
    pytest.param(lambda m, h: m.pools.free_count(BASE), id="pools_free_count"),
    pytest.param(lambda m, h: m.pools.active_ref_count((BASE, 0)), id="pools_ref_count"),
    pytest.param(lambda m, h: len(m.records), id="records_len"),
    pytest.param(lambda m, h: m.records[1], id="records_get"),
    pytest.param(lambda m, h: m.base_index.lookup(h[0]), id="base_index_lookup"),
    pytest.param(lambda m, h: m.live_lease_count, id="live_lease_count"),
]


@pytest.mark.parametrize("call", CLOSED_CALLS)
def test_closed_manager_raises_invalid_handle(make_manager, call):
    m = make_manager()
    h = to_hashes(A + B)
    with m.acquire_vanilla(h, 8).lease as lease:
        m.publish(lease, h, 8)
    m.close()
    with pytest.raises(InvalidHandleError, match="manager is closed") as info:
        call(m, h)
    assert type(info.value) is InvalidHandleError


def test_lease_of_a_closed_manager_cannot_be_published_or_grown(make_manager, world):
    m = make_manager()
    lease = m.acquire_vanilla(to_hashes(A), 4).lease
    with pytest.raises(LeasesOutstandingError):
        m.close()
    before = pool_state(world.m)
    for call in (lambda: m.publish(lease, to_hashes(A), 4), lambda: m.grow_base_pages(lease, 1)):
        with pytest.raises(InvalidHandleError, match="manager is closed"):
            call()
    # Handing the orphan to a live manager is refused as well.
    for call in (lambda: world.m.publish(lease, to_hashes(A), 4), lambda: world.m.grow_base_pages(lease, 1)):
        with pytest.raises(InvalidHandleError, match="outlived"):
            call()
    assert pool_state(world.m) == before
    world.m.check_invariants()
    lease.close()
