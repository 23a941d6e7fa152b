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


class SpecReplayMode(IntEnum):
    NONE = 0
    FULL_PAGE = 1


class AcquireStatus(IntEnum):
    ACQUIRED = 0
    INSUFFICIENT_CAPACITY = 1


class PublishStatus(IntEnum):
    PUBLISHED = 0
    EXISTING_RECORD = 1


class HashAlgorithm(IntEnum):
    SHA256 = 0
    FNV1A128 = 1


class LeaseState(IntEnum):
    LIVE = 0
    RELEASED = 1
    ORPHANED = 2


class CommitPolicy(IntEnum):
    """When a finished sequence's state is published: at prefill end and decode end, or at prefill end only."""

    INCLUDING_GENERATED_TOKENS = 0
    PREFILL_STATE_ONLY = 1


class SimDeployment(IntEnum):
    """What the reference engine's model keeps per sequence (ctxcache.sim)."""

    ATTENTION = 0
    HYBRID = 1
    RECURRENT = 2
    EAGLE = 3
