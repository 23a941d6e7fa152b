"""Argument checks shared by every call: run before anything reaches C, raise typed errors naming the argument.

Hash arrays are numpy ``uint64`` arrays of shape ``(n, 2)`` (columns ``hi``, ``lo``), C-contiguous: exactly
the memory of ``n`` ``ctxc_hash128_t``, passed to C without a copy. Token arrays are C-contiguous ``int32``
vectors; a plain Python sequence of ints is converted (and range-checked) once.

Every check first tries the common case in a few identity and attribute tests (an exact ``int`` in range; an
exact ``np.ndarray`` of the native dtype whose strides say it is C-contiguous): these run on every call into C,
and what they accept the full checks after them would accept too. Anything else takes the full checks, which
accept or refuse it exactly as before (test_bad_inputs.py holds the cases on both sides of each fast path).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._ffi import ffi, from_buffer_cdata
from .errors import ArgumentTypeError, InvalidArgumentError

INT32_MAX = 2**31 - 1
_NULL = ffi.NULL
_NDARRAY = np.ndarray
_UINT64 = np.dtype(np.uint64)  # numpy's one native uint64 dtype object: arrays made the usual way share it
_INT32 = np.dtype(np.int32)
_HASH_STRIDES = (16, 8)  # an (n, 2) uint64 array with these strides is C-contiguous
_INT32_STRIDES = (4,)
_HASHES = ffi.typeof("ctxc_hash128_t[]")
_INT32S = ffi.typeof("int32_t[]")
_frombuffer = np.frombuffer
_buffer = ffi.buffer


def integer(value: Any, name: str, *, minimum: int | None = 0, maximum: int = INT32_MAX) -> int:
    """An exact integer (bool refused) within [minimum, maximum]."""
    if type(value) is int and (minimum is None or value >= minimum) and value <= maximum:
        return value  # the common case (bool is a subclass of int, never int itself)
    if isinstance(value, (bool, np.bool_)):  # before operator.index, which turns True into 1
        raise ArgumentTypeError(f"{name} must be an integer, got bool")
    if not isinstance(value, (int, np.integer)):
        try:
            value = operator.index(value)
        except TypeError:
            raise ArgumentTypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    value = int(value)
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise InvalidArgumentError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def milliseconds(value: Any, name: str) -> int:
    """A duration in seconds (a real number, bool refused), >= 0 and finite, as whole milliseconds within int32."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if not seconds >= 0 or seconds * 1000 > INT32_MAX:  # also NaN
        raise InvalidArgumentError(f"{name} must be between 0 and {INT32_MAX // 1000} seconds, got {value}")
    return round(seconds * 1000)


def boolean(value: Any, name: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentTypeError(f"{name} must be a bool, got {type(value).__name__}")


def count(value: Any, name: str) -> int:
    """``integer(value, name)``: an exact integer in [0, INT32_MAX] (a count, a length), bool refused."""
    if type(value) is int and 0 <= value <= INT32_MAX:
        return value
    return integer(value, name)


def hash_array(value: Any, name: str = "full_block_hashes") -> np.ndarray:
    """Validate an (n, 2) uint64 C-contiguous hash array (n may be 0)."""
    if type(value) is _NDARRAY and value.dtype is _UINT64 and value.strides == _HASH_STRIDES:
        shape = value.shape  # two strides: two dimensions
        if shape[1] == 2 and shape[0] <= INT32_MAX:
            return value
    if not isinstance(value, np.ndarray):
        raise ArgumentTypeError(f"{name} must be a numpy uint64 array of shape (n, 2), got {type(value).__name__}")
    if value.dtype != np.uint64:
        raise ArgumentTypeError(f"{name} must have dtype uint64, got {value.dtype}")
    if value.ndim != 2 or value.shape[1] != 2:
        raise InvalidArgumentError(f"{name} must have shape (n, 2) (columns hi, lo), got {value.shape}")
    if not value.flags.c_contiguous:
        raise ArgumentTypeError(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    if value.shape[0] > INT32_MAX:
        raise InvalidArgumentError(f"{name} holds {value.shape[0]} hashes, more than INT32_MAX")
    return value


def hash_pointer(array: np.ndarray) -> Any:
    """A ctxc_hash128_t* over the array's memory (no copy), NULL when empty."""
    if array.shape[0] == 0:
        return _NULL
    return from_buffer_cdata(_HASHES, array, False)


def hashes(value: Any, name: str = "full_block_hashes") -> tuple[Any, int]:
    """``hash_array(value, name)`` as the (pointer, count) a C call takes. The pointer (NULL when empty) keeps the
    array alive."""
    if type(value) is _NDARRAY and value.dtype is _UINT64 and value.strides == _HASH_STRIDES:  # hash_array's
        n, width = value.shape
        if width == 2 and n <= INT32_MAX:
            return (from_buffer_cdata(_HASHES, value, False) if n else _NULL), n
    array = hash_array(value, name)
    n = array.shape[0]
    return (from_buffer_cdata(_HASHES, array, False) if n else _NULL), n


def single_hash(value: Any, name: str) -> np.ndarray:
    """A single hash: a (2,) uint64 array (hi, lo), a (1, 2) array, or a (hi, lo) pair of ints."""
    if isinstance(value, np.ndarray):
        if value.dtype != np.uint64:
            raise ArgumentTypeError(f"{name} must have dtype uint64, got {value.dtype}")
        if value.shape not in ((2,), (1, 2)):
            raise InvalidArgumentError(f"{name} must have shape (2,) (hi, lo), got {value.shape}")
        return np.ascontiguousarray(value.reshape(2))
    if isinstance(value, tuple) and len(value) == 2:
        hi = integer(value[0], f"{name}[0]", minimum=0, maximum=2**64 - 1)
        lo = integer(value[1], f"{name}[1]", minimum=0, maximum=2**64 - 1)
        return np.array([hi, lo], dtype=np.uint64)
    raise ArgumentTypeError(f"{name} must be a (2,) uint64 array or a (hi, lo) tuple, got {type(value).__name__}")


def int32_array(value: Any, name: str = "tokens") -> np.ndarray:
    """A 1-D C-contiguous int32 array; Python sequences are converted with a range check."""
    if type(value) is _NDARRAY and value.dtype is _INT32 and value.strides == _INT32_STRIDES:
        return value  # one stride: one dimension
    if isinstance(value, np.ndarray):
        if value.dtype != np.int32:
            raise ArgumentTypeError(f"{name} must have dtype int32, got {value.dtype}")
        if value.ndim != 1:
            raise InvalidArgumentError(f"{name} must be 1-D, got shape {value.shape}")
        if not value.flags.c_contiguous:
            raise ArgumentTypeError(f"{name} must be C-contiguous (use np.ascontiguousarray)")
        return value
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise ArgumentTypeError(f"{name} must be an int32 array or a sequence of ints, got {type(value).__name__}")
    converted = [integer(v, f"{name}[{i}]", minimum=-(2**31)) for i, v in enumerate(value)]
    return np.array(converted, dtype=np.int32)


def int32_pointer(array: np.ndarray) -> Any:
    """An int32_t* over a 1-D C-contiguous int32 array's memory (no copy; keeps the array alive), NULL when
    empty."""
    if array.shape[0] == 0:
        return _NULL
    return from_buffer_cdata(_INT32S, array, False)


def read_only_int32(pointer: Any, count: int) -> np.ndarray:
    """A read-only int32 array holding a copy of a C view (C views die at the next mutation)."""
    if count == 0:
        out = np.empty(0, dtype=np.int32)
        out.flags.writeable = False
        return out
    return _frombuffer(_buffer(pointer, count * 4)[:], _INT32)  # over immutable bytes: read-only


def read_only_hashes(pointer: Any, count: int) -> np.ndarray:
    if count == 0:
        out = np.empty((0, 2), dtype=np.uint64)
        out.flags.writeable = False
        return out
    return np.frombuffer(bytes(ffi.buffer(pointer, count * 16)), dtype=np.uint64).reshape(count, 2)


def enum_member(enum_type: Any, value: Any, name: str) -> Any:
    """`value` as a member of `enum_type`: the member, its name in any case, or its number (InvalidArgumentError
    otherwise)."""
    if isinstance(value, str):
        try:
            return enum_type[value.upper()]
        except KeyError:
            raise InvalidArgumentError(f"{name} must be one of {[m.name.lower() for m in enum_type]}, got {value!r}") from None
    if isinstance(value, enum_type):
        return value
    number = integer(value, name, minimum=None)
    try:
        return enum_type(number)
    except ValueError:
        raise InvalidArgumentError(f"{name} {number} is not a {enum_type.__name__} value") from None
