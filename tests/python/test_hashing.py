"""Block hashing: shapes, chaining, extras, and known answers computed here from the documented byte stream.

The reference implementation below follows include/ctxcache/block_hash.h and reference c.1 only: a tagged byte
stream (integers little-endian, a Hash128 as hi then lo u64), compressed by SHA-256 (first 16 bytes, big-endian
hi then lo; keyed: SHA-256(SHA-256(K) || 0^32 || stream)) or by 128-bit FNV-1a with Python big integers.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxcache
from ctxcache import BlockKeyExtras, MediaSpanKey

PAGE = 4

# ---- an independent reference implementation -----------------------------------------------------------------

TAG_PARENT, TAG_TOKENS, TAG_MEDIA, TAG_MEDIA_ENTRY = 1, 2, 3, 4
TAG_MEDIA_CONTENT, TAG_MEDIA_PLACEMENT, TAG_MEDIA_OFFSET, TAG_MEDIA_ITEM_ORDER, TAG_MEDIA_MODALITY = 5, 6, 7, 8, 9
TAG_ADAPTER, TAG_ADAPTER_ID, TAG_ADAPTER_GENERATION = 10, 11, 12
TAG_POSITION, TAG_CUSTOM_EMBEDDING, TAG_ISOLATION = 13, 14, 15
TAG_ABSENT, TAG_PRESENT, TAG_OPAQUE_IDENTITY, TAG_MEDIA_TOKEN = 16, 17, 18, 19

FNV_OFFSET_BASIS = 0x6C62272E07BB0142_62B821756295C58D
FNV_PRIME = 2**88 + 2**8 + 0x3B
ROOT = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)


@dataclass
class RefMedia:
    content: tuple[int, int]
    placement: tuple[int, int]
    offset: int
    order: int
    modality: int


@dataclass
class RefExtras:
    media: list = field(default_factory=list)
    adapter: tuple[tuple[int, int], int] | None = None  # (id, generation)
    position: tuple[int, int] | None = None
    custom: tuple[int, int] | None = None
    isolation: tuple[int, int] | None = None


def ser_hash(h) -> bytes:
    return struct.pack("<QQ", h[0], h[1])


def ser_optional(tag: int, h) -> bytes:
    return bytes([tag, TAG_ABSENT]) if h is None else bytes([tag, TAG_PRESENT]) + ser_hash(h)


def block_stream(parent, tokens, extras: RefExtras | None = None, media_hashes=None) -> bytes:
    extras = extras or RefExtras()
    out = bytearray([TAG_PARENT]) + ser_hash(parent)
    out += bytes([TAG_TOKENS]) + struct.pack("<Q", len(tokens))
    for i, token in enumerate(tokens):
        m = media_hashes[i] if media_hashes is not None else (0, 0)
        if m != (0, 0):
            out += bytes([TAG_MEDIA_TOKEN]) + ser_hash(m)
        else:
            out += struct.pack("<I", token & 0xFFFFFFFF)
    out += bytes([TAG_MEDIA]) + struct.pack("<Q", len(extras.media))
    for m in extras.media:
        out += bytes([TAG_MEDIA_ENTRY])
        out += bytes([TAG_MEDIA_CONTENT]) + ser_hash(m.content)
        out += bytes([TAG_MEDIA_PLACEMENT]) + ser_hash(m.placement)
        out += bytes([TAG_MEDIA_OFFSET]) + struct.pack("<i", m.offset)
        out += bytes([TAG_MEDIA_ITEM_ORDER]) + struct.pack("<i", m.order)
        out += bytes([TAG_MEDIA_MODALITY, m.modality])
    out += bytes([TAG_ADAPTER])
    if extras.adapter is None:
        out += bytes([TAG_ABSENT])
    else:
        out += bytes([TAG_PRESENT, TAG_ADAPTER_ID]) + ser_hash(extras.adapter[0])
        out += bytes([TAG_ADAPTER_GENERATION]) + struct.pack("<Q", extras.adapter[1])
    out += ser_optional(TAG_POSITION, extras.position)
    out += ser_optional(TAG_CUSTOM_EMBEDDING, extras.custom)
    out += ser_optional(TAG_ISOLATION, extras.isolation)
    return bytes(out)


def ref_sha256(stream: bytes, key: bytes | None = None) -> tuple[int, int]:
    if key:
        digest = hashlib.sha256(hashlib.sha256(key).digest() + bytes(32) + stream).digest()
    else:
        digest = hashlib.sha256(stream).digest()
    return int.from_bytes(digest[0:8], "big"), int.from_bytes(digest[8:16], "big")


def ref_fnv1a128(stream: bytes) -> tuple[int, int]:
    state = FNV_OFFSET_BASIS
    for byte in stream:
        state = ((state ^ byte) * FNV_PRIME) % 2**128
    return state >> 64, state & (2**64 - 1)


def ref_compress(algorithm: str, key: bytes | None):
    if algorithm == "fnv1a128":
        return ref_fnv1a128
    return lambda stream: ref_sha256(stream, key)


def ref_full_blocks(tokens, page, algorithm="sha256", key=None, extras=None, media_hashes=None):
    """extras: None, one RefExtras, or a list with one per block."""
    compress = ref_compress(algorithm, key)
    parent, out = ROOT, []
    for b in range(len(tokens) // page):
        e = extras[b] if isinstance(extras, list) else extras
        m = media_hashes[b * page:(b + 1) * page] if media_hashes is not None else None
        parent = compress(block_stream(parent, tokens[b * page:(b + 1) * page], e, m))
        out.append(parent)
    return out


def ref_exact_prefix(tokens, page, algorithm="sha256", key=None, extras=None):
    compress = ref_compress(algorithm, key)
    parent = ROOT
    for b, begin in enumerate(range(0, len(tokens), page)):
        e = extras[b] if isinstance(extras, list) else extras
        parent = compress(block_stream(parent, tokens[begin:begin + page], e))
    return parent


def ref_opaque(data: bytes, algorithm="sha256", key=None) -> tuple[int, int]:
    return ref_compress(algorithm, key)(bytes([TAG_OPAQUE_IDENTITY]) + struct.pack("<Q", len(data)) + data)


def rows(array) -> list[tuple[int, int]]:
    return [(int(r[0]), int(r[1])) for r in np.asarray(array).reshape(-1, 2)]


def as_tuple(h) -> tuple[int, int]:
    return int(h[0]), int(h[1])


# ---- the reference implementation itself -------------------------------------------------------------------


def test_reference_fnv1a128_matches_published_test_vectors():
    # 128-bit FNV-1a vectors (IETF draft-eastlake-fnv): "" -> the offset basis, "a" -> d228cb69...
    assert ref_fnv1a128(b"") == (0x6C62272E07BB0142, 0x62B821756295C58D)
    assert ref_fnv1a128(b"a") == (0xD228CB696F1A8CAF, 0x78912B704E4A8964)


def test_reference_sha256_is_the_standard_digest():
    assert ref_sha256(b"abc") == (0xBA7816BF8F01CFEA, 0x414140DE5DAE2223)


# ---- shapes and basic properties ---------------------------------------------------------------------------

ALGORITHMS = ["sha256", "fnv1a128"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 8, 11, 12])
def test_full_block_hashes_shape_and_dtype(n, algorithm):
    out = ctxcache.hash_full_blocks(np.arange(n, dtype=np.int32), PAGE, algorithm)
    assert out.shape == (n // PAGE, 2)
    assert out.dtype == np.uint64
    assert out.flags.c_contiguous


def test_python_list_and_int32_array_give_the_same_hashes():
    tokens = [5, -1, 2**31 - 1, -(2**31), 0, 7, 7, 7]
    assert np.array_equal(ctxcache.hash_full_blocks(tokens, PAGE),
                          ctxcache.hash_full_blocks(np.array(tokens, dtype=np.int32), PAGE))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_partial_tail_is_ignored(algorithm):
    base = list(range(8))
    a = ctxcache.hash_full_blocks(base + [100], PAGE, algorithm)
    b = ctxcache.hash_full_blocks(base + [200, 201, 202], PAGE, algorithm)
    c = ctxcache.hash_full_blocks(base, PAGE, algorithm)
    assert a.shape == (2, 2)
    assert np.array_equal(a, b) and np.array_equal(a, c)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_exact_prefix_of_page_aligned_prefix_is_last_full_block_hash(algorithm):
    tokens = list(range(10, 22))
    full = ctxcache.hash_full_blocks(tokens, PAGE, algorithm)
    exact = ctxcache.hash_exact_prefix(tokens, PAGE, algorithm)
    assert exact.shape == (2,) and exact.dtype == np.uint64
    assert as_tuple(exact) == as_tuple(full[-1])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_exact_prefix_includes_the_partial_tail(algorithm):
    tokens = list(range(10, 20))  # 2 full blocks + 2 tail tokens
    full = ctxcache.hash_full_blocks(tokens, PAGE, algorithm)
    exact = ctxcache.hash_exact_prefix(tokens, PAGE, algorithm)
    assert as_tuple(exact) not in rows(full)
    assert as_tuple(exact) == as_tuple(ctxcache.hash_block(full[-1], tokens[8:], algorithm))
    assert as_tuple(exact) != as_tuple(ctxcache.hash_exact_prefix(tokens[:9], PAGE, algorithm))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_empty_prefix_is_chain_root(algorithm):
    assert ctxcache.CHAIN_ROOT.dtype == np.uint64
    assert as_tuple(ctxcache.CHAIN_ROOT) == ROOT
    assert as_tuple(ctxcache.hash_exact_prefix([], PAGE, algorithm)) == ROOT
    assert ctxcache.hash_full_blocks([], PAGE, algorithm).shape == (0, 2)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_chain_is_hash_block_over_the_previous_hash(algorithm):
    tokens = list(range(100, 112))
    full = ctxcache.hash_full_blocks(tokens, PAGE, algorithm)
    parent = None  # the chain root
    for b in range(3):
        h = ctxcache.hash_block(parent, tokens[b * PAGE:(b + 1) * PAGE], algorithm)
        assert as_tuple(h) == as_tuple(full[b])
        parent = h
    assert as_tuple(ctxcache.hash_block(ctxcache.CHAIN_ROOT, tokens[:4], algorithm)) == as_tuple(full[0])


def test_a_changed_token_changes_its_block_and_every_descendant_only():
    tokens = list(range(12))
    base = rows(ctxcache.hash_full_blocks(tokens, PAGE))
    changed = list(tokens)
    changed[5] = 99  # block 1
    after = rows(ctxcache.hash_full_blocks(changed, PAGE))
    assert after[0] == base[0]
    assert after[1] != base[1] and after[2] != base[2]


def test_equal_inputs_produce_equal_hashes_and_hasher_objects_agree():
    tokens = np.arange(8, dtype=np.int32)
    hasher = ctxcache.Hasher("sha256")
    assert np.array_equal(hasher.hash_full_blocks(tokens, PAGE), ctxcache.hash_full_blocks(tokens, PAGE))
    assert hasher.algorithm == ctxcache.HashAlgorithm.SHA256 and hasher.keyed is False
    keyed = ctxcache.Hasher(ctxcache.HashAlgorithm.SHA256, key=b"k")
    assert keyed.keyed is True
    assert np.array_equal(keyed.hash_full_blocks(tokens, PAGE), ctxcache.hash_full_blocks(tokens, PAGE, key=b"k"))


def test_a_closed_hasher_refuses_to_hash():
    # Its C handle is gone; passing NULL on would hash with the default (unkeyed) hasher instead of its key.
    hasher = ctxcache.Hasher("sha256", key=b"tenant")
    tokens = np.arange(8, dtype=np.int32)
    keyed = hasher.hash_full_blocks(tokens, PAGE)
    hasher.close()
    hasher.close()  # idempotent
    for call in (lambda: hasher.hash_full_blocks(tokens, PAGE), lambda: hasher.hash_exact_prefix(tokens, PAGE),
                 lambda: hasher.hash_block(None, tokens[:PAGE]), lambda: hasher.hash_opaque_identity(b"lora")):
        with pytest.raises(ctxcache.InvalidHandleError, match="hasher is closed"):
            call()
    with pytest.raises(ctxcache.ArgumentTypeError):  # argument errors first, as on a live hasher
        hasher.hash_full_blocks(tokens.astype(np.int64), PAGE)
    with ctxcache.Hasher("sha256", key=b"tenant") as again:
        np.testing.assert_array_equal(again.hash_full_blocks(tokens, PAGE), keyed)


def test_keyed_and_unkeyed_differ_and_keys_separate_tenants():
    tokens = list(range(8))
    unkeyed = rows(ctxcache.hash_full_blocks(tokens, PAGE))
    key_a = rows(ctxcache.hash_full_blocks(tokens, PAGE, key=b"tenant-a"))
    key_a_str = rows(ctxcache.hash_full_blocks(tokens, PAGE, key="tenant-a"))
    key_b = rows(ctxcache.hash_full_blocks(tokens, PAGE, key=b"tenant-b"))
    assert len({tuple(unkeyed), tuple(key_a), tuple(key_b)}) == 3
    assert key_a == key_a_str
    # An empty key is no key.
    assert rows(ctxcache.hash_full_blocks(tokens, PAGE, key=b"")) == unkeyed


def test_sha256_and_fnv1a128_differ():
    tokens = list(range(8))
    assert set(rows(ctxcache.hash_full_blocks(tokens, PAGE, "sha256"))).isdisjoint(
        rows(ctxcache.hash_full_blocks(tokens, PAGE, "fnv1a128")))


# ---- extras --------------------------------------------------------------------------------------------------

H1, H2, H3 = (1, 2), (3, 4), (5, 6)
MEDIA = MediaSpanKey(H1, H2, offset_within_block=1, item_order=0, modality=1)

EXTRAS_VARIANTS = {
    "adapter": BlockKeyExtras(adapter_id=H1),
    "adapter_generation": BlockKeyExtras(adapter_id=H1, adapter_generation=1),
    "media": BlockKeyExtras(media=(MEDIA,)),
    "media_content": BlockKeyExtras(media=(MediaSpanKey(H3, H2, 1, 0, 1),)),
    "media_placement": BlockKeyExtras(media=(MediaSpanKey(H1, H3, 1, 0, 1),)),
    "media_offset": BlockKeyExtras(media=(MediaSpanKey(H1, H2, 2, 0, 1),)),
    "media_item_order": BlockKeyExtras(media=(MediaSpanKey(H1, H2, 1, 1, 1),)),
    "media_modality": BlockKeyExtras(media=(MediaSpanKey(H1, H2, 1, 0, 2),)),
    "two_media": BlockKeyExtras(media=(MEDIA, MEDIA)),
    "position_digest": BlockKeyExtras(position_digest=H1),
    "custom_embedding_digest": BlockKeyExtras(custom_embedding_digest=H1),
    "isolation_digest": BlockKeyExtras(isolation_digest=H1),
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_extras_variant_gives_a_distinct_identity(algorithm):
    tokens = list(range(8))
    plain = tuple(rows(ctxcache.hash_full_blocks(tokens, PAGE, algorithm)))
    seen = {plain: "none"}
    for name, extras in EXTRAS_VARIANTS.items():
        h = tuple(rows(ctxcache.hash_full_blocks(tokens, PAGE, algorithm, extras=extras)))
        assert h not in seen, f"{name} collides with {seen.get(h)}"
        seen[h] = name
    # The same digest in a different field is a different identity.
    assert len({tuple(rows(ctxcache.hash_full_blocks(tokens, PAGE, algorithm, extras=BlockKeyExtras(**{f: H1}))))
                for f in ("position_digest", "custom_embedding_digest", "isolation_digest")}) == 3


def test_empty_extras_equal_no_extras():
    tokens = list(range(8))
    assert np.array_equal(ctxcache.hash_full_blocks(tokens, PAGE, extras=BlockKeyExtras()),
                          ctxcache.hash_full_blocks(tokens, PAGE))
    assert np.array_equal(ctxcache.hash_full_blocks(tokens, PAGE, extras=[]), ctxcache.hash_full_blocks(tokens, PAGE))


def test_single_extras_applies_to_every_block():
    tokens = list(range(12))
    e = BlockKeyExtras(adapter_id=H1, isolation_digest=H2)
    one = ctxcache.hash_full_blocks(tokens, PAGE, extras=e)
    per_block = ctxcache.hash_full_blocks(tokens, PAGE, extras=[e, e, e])
    assert np.array_equal(one, per_block)
    # ... and is not applied to block 0 only.
    first_only = ctxcache.hash_full_blocks(tokens, PAGE, extras=[e, BlockKeyExtras(), BlockKeyExtras()])
    assert rows(first_only)[0] == rows(one)[0] and rows(first_only)[1] != rows(one)[1]


def test_per_block_extras_are_positional():
    tokens = list(range(8))
    a, b = BlockKeyExtras(position_digest=H1), BlockKeyExtras(position_digest=H2)
    ab = rows(ctxcache.hash_full_blocks(tokens, PAGE, extras=[a, b]))
    ba = rows(ctxcache.hash_full_blocks(tokens, PAGE, extras=[b, a]))
    assert ab[0] != ba[0] and ab[1] != ba[1]
    assert ab[0] == rows(ctxcache.hash_full_blocks(tokens[:4], PAGE, extras=a))[0]


def test_adapter_accepts_array_or_tuple_digests():
    tokens = list(range(4))
    as_array = ctxcache.hash_full_blocks(tokens, PAGE, extras=BlockKeyExtras(adapter_id=np.array(H1, dtype=np.uint64)))
    as_tuple_ = ctxcache.hash_full_blocks(tokens, PAGE, extras=BlockKeyExtras(adapter_id=H1))
    assert np.array_equal(as_array, as_tuple_)


def test_per_position_media_hashes_replace_only_their_positions():
    tokens = list(range(12))
    plain = rows(ctxcache.hash_full_blocks(tokens, PAGE))
    zeros = np.zeros((12, 2), dtype=np.uint64)
    assert rows(ctxcache.hash_full_blocks(tokens, PAGE, per_position_media_hashes=zeros)) == plain
    media = zeros.copy()
    media[5] = H3  # a media position in block 1
    with_media = rows(ctxcache.hash_full_blocks(tokens, PAGE, per_position_media_hashes=media))
    assert with_media[0] == plain[0]
    assert with_media[1] != plain[1] and with_media[2] != plain[2]
    # The media hash replaces the token id: the token under it no longer matters.
    other_tokens = list(tokens)
    other_tokens[5] = 777
    assert rows(ctxcache.hash_full_blocks(other_tokens, PAGE, per_position_media_hashes=media)) == with_media
    # Different media content at the same position is a different identity.
    media2 = zeros.copy()
    media2[5] = H2
    assert rows(ctxcache.hash_full_blocks(tokens, PAGE, per_position_media_hashes=media2))[1] != with_media[1]


def test_opaque_identity_binds_exact_bytes():
    a = as_tuple(ctxcache.hash_opaque_identity(b"lora-a"))
    assert a == as_tuple(ctxcache.hash_opaque_identity("lora-a"))
    assert a != as_tuple(ctxcache.hash_opaque_identity(b"lora-a\x00"))
    assert a != as_tuple(ctxcache.hash_opaque_identity(b"lora-b"))


# ---- known answers ---------------------------------------------------------------------------------------------

KAT_TOKENS = [1, 2, 3, 4, -5, 2**31 - 1, -(2**31), 0, 42, 43, 44, 45, 9]  # 3 full blocks + tail
KEYS = {"unkeyed": None, "keyed": b"secret key \x00\xff"}


def _kat_cases():
    for algorithm in ALGORITHMS:
        for key_name, key in KEYS.items():
            if algorithm == "fnv1a128" and key is not None:
                continue
            yield pytest.param(algorithm, key, id=f"{algorithm}-{key_name}")


@pytest.mark.parametrize("algorithm,key", list(_kat_cases()))
def test_known_answer_plain_chain(algorithm, key):
    got = rows(ctxcache.hash_full_blocks(KAT_TOKENS, PAGE, algorithm, key))
    assert got == ref_full_blocks(KAT_TOKENS, PAGE, algorithm, key)
    assert len(got) == 3


@pytest.mark.parametrize("algorithm,key", list(_kat_cases()))
def test_known_answer_exact_prefix_with_partial_tail(algorithm, key):
    got = as_tuple(ctxcache.hash_exact_prefix(KAT_TOKENS, PAGE, algorithm, key))
    assert got == ref_exact_prefix(KAT_TOKENS, PAGE, algorithm, key)


@pytest.mark.parametrize("algorithm,key", list(_kat_cases()))
def test_known_answer_with_every_extra(algorithm, key):
    content, placement = (0x0123456789ABCDEF, 0xFEDCBA9876543210), (2**64 - 1, 1)
    extras = BlockKeyExtras(
        media=(MediaSpanKey(content, placement, offset_within_block=-3, item_order=7, modality=255),
               MediaSpanKey(placement, content, offset_within_block=2, item_order=0, modality=0)),
        adapter_id=(11, 12), adapter_generation=2**64 - 1,
        position_digest=(13, 14), custom_embedding_digest=(15, 16), isolation_digest=(17, 18),
    )
    ref = RefExtras(
        media=[RefMedia(content, placement, -3, 7, 255), RefMedia(placement, content, 2, 0, 0)],
        adapter=((11, 12), 2**64 - 1), position=(13, 14), custom=(15, 16), isolation=(17, 18),
    )
    got = rows(ctxcache.hash_full_blocks(KAT_TOKENS, PAGE, algorithm, key, extras=extras))
    assert got == ref_full_blocks(KAT_TOKENS, PAGE, algorithm, key, extras=ref)
    got_exact = as_tuple(ctxcache.hash_exact_prefix(KAT_TOKENS, PAGE, algorithm, key, extras=extras))
    assert got_exact == ref_exact_prefix(KAT_TOKENS, PAGE, algorithm, key, extras=ref)


@pytest.mark.parametrize("algorithm,key", list(_kat_cases()))
def test_known_answer_per_block_extras(algorithm, key):
    extras = [BlockKeyExtras(adapter_id=(1, 1)), BlockKeyExtras(), BlockKeyExtras(isolation_digest=(2, 2))]
    ref = [RefExtras(adapter=((1, 1), 0)), RefExtras(), RefExtras(isolation=(2, 2))]
    got = rows(ctxcache.hash_full_blocks(KAT_TOKENS, PAGE, algorithm, key, extras=extras))
    assert got == ref_full_blocks(KAT_TOKENS, PAGE, algorithm, key, extras=ref)
    # The exact prefix touches a fourth (partial) block and takes one extras per touched block.
    extras.append(BlockKeyExtras(custom_embedding_digest=(3, 3)))
    ref.append(RefExtras(custom=(3, 3)))
    got_exact = as_tuple(ctxcache.hash_exact_prefix(KAT_TOKENS, PAGE, algorithm, key, extras=extras))
    assert got_exact == ref_exact_prefix(KAT_TOKENS, PAGE, algorithm, key, extras=ref)


@pytest.mark.parametrize("algorithm,key", list(_kat_cases()))
def test_known_answer_per_position_media_hashes(algorithm, key):
    media = np.zeros((len(KAT_TOKENS), 2), dtype=np.uint64)
    media[1] = (0xAAAA, 0xBBBB)
    media[6] = (0, 1)  # lo alone is non-zero: still a media position
    media[7] = (1, 0)
    media[12] = (5, 5)  # in the ignored tail
    ref_media = [(int(r[0]), int(r[1])) for r in media]
    got = rows(ctxcache.hash_full_blocks(KAT_TOKENS, PAGE, algorithm, key, per_position_media_hashes=media))
    assert got == ref_full_blocks(KAT_TOKENS, PAGE, algorithm, key, media_hashes=ref_media)


@pytest.mark.parametrize("algorithm,key", list(_kat_cases()))
def test_known_answer_hash_block_under_a_given_parent(algorithm, key):
    parent = (0x1111111111111111, 0x2222222222222222)
    got = as_tuple(ctxcache.hash_block(parent, [7, 8, 9], algorithm, key,
                                       extras=BlockKeyExtras(position_digest=(3, 3))))
    assert got == ref_compress(algorithm, key)(block_stream(parent, [7, 8, 9], RefExtras(position=(3, 3))))


@pytest.mark.parametrize("algorithm,key", list(_kat_cases()))
@pytest.mark.parametrize("data", [b"", b"lora-weights-v1", bytes(range(256)) * 3])
def test_known_answer_opaque_identity(algorithm, key, data):
    assert as_tuple(ctxcache.hash_opaque_identity(data, algorithm, key)) == ref_opaque(data, algorithm, key)


# ---- property: the library agrees with the reference on arbitrary inputs ---------------------------------------


INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
HASH = st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))


@settings(max_examples=60, deadline=None)
@given(tokens=st.lists(INT32, max_size=40), page=st.integers(1, 9), algorithm=st.sampled_from(ALGORITHMS),
       key=st.one_of(st.none(), st.binary(min_size=1, max_size=80)), isolation=st.one_of(st.none(), HASH),
       adapter=st.one_of(st.none(), st.tuples(HASH, st.integers(0, 2**64 - 1))))
def test_library_matches_reference_on_random_inputs(tokens, page, algorithm, key, isolation, adapter):
    if algorithm == "fnv1a128":
        key = None
    extras = None
    ref_extras = None
    if isolation is not None or adapter is not None:
        extras = BlockKeyExtras(isolation_digest=isolation, adapter_id=adapter[0] if adapter else None,
                                adapter_generation=adapter[1] if adapter else 0)
        ref_extras = RefExtras(isolation=isolation, adapter=adapter)
    got = rows(ctxcache.hash_full_blocks(tokens, page, algorithm, key, extras=extras))
    assert got == ref_full_blocks(tokens, page, algorithm, key, extras=ref_extras)
    exact = as_tuple(ctxcache.hash_exact_prefix(tokens, page, algorithm, key, extras=extras))
    assert exact == ref_exact_prefix(tokens, page, algorithm, key, extras=ref_extras)
