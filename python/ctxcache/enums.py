"""Enumerations: the C++ names without the ``k`` prefix, in UPPER_SNAKE case; values equal the C ABI's."""

from __future__ import annotations

from enum import IntEnum


class ResourceType(IntEnum):
    BASE_KV_PAGE = 0
    DRAFT_KV_PAGE = 1
    RECURRENT_SNAPSHOT = 2
    PARTIAL_KV_SNAPSHOT = 3


class LookupPolicy(IntEnum):
    USE_CACHE = 0
    BYPASS = 1


ContextCacheLookupPolicy = LookupPolicy


class ReusePlanKind(IntEnum):
    STANDARD = 0
    NO_REUSABLE_PREFIX = 1
    FULL_INPUT_REWIND = 2


class ReusePlanMode(IntEnum):
    VANILLA = 0
    HYBRID = 1
    SPEC = 2
    HYBRID_MTP = 3


class EvictionPolicy(IntEnum):
    """Capacity eviction: whole records least recent first (the default), or the same walk trimming the last
    record reached down to the prefix it can keep (``"lru"`` / ``"lru-trim"`` in the command line)."""

    RECORD_LRU = 0
    RECORD_LRU_TRIM = 1

    @property
    def label(self) -> str:
        return "lru" if self is EvictionPolicy.RECORD_LRU else "lru-trim"

    @classmethod
    def parse(cls, value: EvictionPolicy | str) -> EvictionPolicy:
        """An EvictionPolicy, or its command-line label ``"lru"`` / ``"lru-trim"``."""
        if isinstance(value, EvictionPolicy):
            return value
        for policy in cls:
            if value == policy.label:
                return policy
        raise ValueError(f"unknown eviction policy {value!r} (lru or lru-trim)")


class SpecReplayMode(IntEnum):
    NONE = 0
    FULL_PAGE = 1


class AcquireStatus(IntEnum):
    ACQUIRED = 0
    INSUFFICIENT_CAPACITY = 1


class PublishStatus(IntEnum):
    PUBLISHED = 0
    EXISTING_RECORD = 1


class PublicationGrowth(IntEnum):
    """What a vanilla lease's later publication does with its own record (``publish(..., extend_record=...)``):
    add a nested record (the default) or grow the lease's record into the longer one."""

    NEW_RECORD = 0
    EXTEND_LEASE_RECORD = 1


class HashAlgorithm(IntEnum):
    SHA256 = 0
    FNV1A128 = 1


class LeaseState(IntEnum):
    LIVE = 0
    RELEASED = 1
    ORPHANED = 2


# ---- the runtime layer (ctxcache.runtime) ----------------------------------------------------------------------


class ModelStateKind(IntEnum):
    """What a deployment's model keeps per sequence, and so which reuse it can serve."""

    ATTENTION_ONLY = 0
    PURE_RECURRENT = 1
    HYBRID = 2


ContextCacheModelStateKind = ModelStateKind


class TokenStateContract(IntEnum):
    COMMITTED_PLUS_LOOKAHEAD = 0  # the token list ends with one sampled token whose KV is not written yet
    FULLY_COMMITTED = 1  # every listed token already has KV


DecodingTokenStateContract = TokenStateContract


class CommitPolicy(IntEnum):
    INCLUDING_GENERATED_TOKENS = 0  # publish at prefill end and at decode end of normally finished sequences
    PREFILL_STATE_ONLY = 1  # publish at prefill end only


ContextCacheCommitPolicy = CommitPolicy


class SequenceStatus(IntEnum):
    RUNNING = 0
    FINISHED = 1  # normal end: publishable at decode end
    CANCELLED = 2
    FAILED = 3


class AdmitSequenceStatus(IntEnum):
    ADMITTED = 0
    NO_CAPACITY = 1  # transient: nothing held, try again later
    FAILED = 2


class MediaModality(IntEnum):
    IMAGE = 0
    AUDIO = 1
    VIDEO = 2


class ScalarType(IntEnum):
    """Element type of a tensor view; the first four equal :class:`ctxcache.DType`."""

    FP16 = 0
    BF16 = 1
    FP8_E4M3 = 2
    FP32 = 3
    INT32 = 4
    INT64 = 5
    UINT8 = 6


class SimDeployment(IntEnum):
    """What the reference engine's model keeps per sequence (ctxcache.sim)."""

    ATTENTION = 0
    HYBRID = 1
    RECURRENT = 2
    EAGLE = 3


class SimSpeculative(IntEnum):
    """The reference engine's drafter: none, or an MTP head (with the hybrid deployment: Hybrid+MTP)."""

    NONE = 0
    MTP = 1


class KvEventType(IntEnum):
    """A KV event's kind (ctxcache.events): vLLM's BlockStored, BlockRemoved and AllBlocksCleared."""

    BLOCK_STORED = 0
    BLOCK_REMOVED = 1
    ALL_BLOCKS_CLEARED = 2


class KvExtraKeyKind(IntEnum):
    """What one of a stored block's extra keys names (ctxc_kv_event_extra_key_t): the LoRA adapter's name, or a
    media item as (identifier, offset)."""

    LORA_NAME = 0
    MEDIA = 1


class KvEventMedium(IntEnum):
    """Where an event's blocks live (ctxc_kv_events_drained_media): the device pool ("GPU" on the wire) or a host
    tier ("CPU"). Python's drained events carry it as their ``medium`` string."""

    DEVICE = 0
    HOST = 1
