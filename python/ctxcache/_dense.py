"""Dense arrays from the caller, without a copy: numpy arrays, objects with ``__dlpack__`` (torch, CuPy, JAX) and
objects with the buffer protocol, seen as (address, shape, element type, device) with their C-contiguity checked.

The export (:func:`to_dlpack`, for DeviceView.__dlpack__) is the other way: a capsule the library makes.

A DLPack producer hands over a capsule; this module reads the DLTensor inside it (ctypes, the DLPack C layout) and
keeps the capsule alive in :class:`Dense` for as long as the caller holds it. The capsule is never consumed
(never renamed), so its producer's destructor releases it when the ``Dense`` goes: no deleter is ever called from
here. bf16 travels as DLPack bfloat16 (torch.bfloat16) or as uint16 bit patterns (numpy has no bfloat16); fp8
e4m3 as float8_e4m3fn or uint8 bit patterns.

Threading: pure functions; a ``Dense`` is only valid while its source is not resized or freed by someone else.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._ffi import check, ffi, lib, library_path
from .errors import ArgumentTypeError

# Element kinds, by (DLPack type code, bits): the storage dtypes (values of ctxcache.device.DType) and raw integers.
FP16, BF16, FP8_E4M3, FP32 = 0, 1, 2, 3
UINT8, UINT16 = "uint8", "uint16"

_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_FLOAT8_E4M3FN = 0, 1, 2, 4, 10
_ELEMENTS: dict[tuple[int, int], Any] = {
    (_DL_FLOAT, 16): FP16,
    (_DL_BFLOAT, 16): BF16,
    (_DL_FLOAT, 32): FP32,
    (_DL_FLOAT8_E4M3FN, 8): FP8_E4M3,
    (_DL_UINT, 8): UINT8,
    (_DL_UINT, 16): UINT16,
}
_NUMPY = {np.dtype(np.float16): FP16, np.dtype(np.float32): FP32, np.dtype(np.uint8): UINT8,
          np.dtype(np.uint16): UINT16}
_NAMES = {FP16: "fp16", BF16: "bf16", FP8_E4M3: "fp8_e4m3", FP32: "fp32", UINT8: "uint8", UINT16: "uint16"}

DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):  # DLPack 1.x: version, manager_ctx, deleter, flags, dl_tensor
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_READ_ONLY_FLAG = 1


@dataclass(frozen=True)
class Dense:
    """A C-contiguous array of the caller's: ``address`` of element 0, ``shape``, ``element`` (FP16, BF16, FP8_E4M3,
    FP32, UINT8 or UINT16), ``device`` (DLPack device type and id), ``keep`` (what must stay alive meanwhile)."""

    address: int
    shape: tuple[int, ...]
    element: Any
    itemsize: int
    device: tuple[int, int]
    writeable: bool
    keep: Any

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def element_name(self) -> str:
        return _NAMES[self.element]


def _from_numpy(array: np.ndarray, name: str) -> Dense:
    element = _NUMPY.get(array.dtype)
    if element is None:
        raise ArgumentTypeError(f"{name} has dtype {array.dtype}; expected float16, float32, uint16 (bf16 bits) or "
                                "uint8 (fp8 bits or raw bytes)")
    if not array.flags.c_contiguous:
        raise ArgumentTypeError(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    return Dense(int(array.__array_interface__["data"][0]), tuple(int(n) for n in array.shape), element,
                 array.itemsize, (DL_CPU, 0), bool(array.flags.writeable), array)


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> bool:
    if strides is None:
        return True
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _from_dlpack(source: Any, name: str) -> Dense:
    try:
        capsule = source.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0 takes no max_version
        capsule = source.__dlpack__()
    versioned = bool(_is_valid(capsule, b"dltensor_versioned"))
    if versioned:
        managed = _DLManagedTensorVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))
        tensor, writeable = managed.dl_tensor, not (managed.flags & _READ_ONLY_FLAG)
    elif _is_valid(capsule, b"dltensor"):
        tensor, writeable = _DLTensor.from_address(_get_pointer(capsule, b"dltensor")), True
    else:
        raise ArgumentTypeError(f"{name}.__dlpack__() did not return a DLPack capsule")
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    strides = None if not tensor.strides else tuple(int(tensor.strides[i]) for i in range(tensor.ndim))
    code, bits, lanes = int(tensor.dtype.code), int(tensor.dtype.bits), int(tensor.dtype.lanes)
    element = _ELEMENTS.get((code, bits)) if lanes == 1 else None
    if element is None:
        raise ArgumentTypeError(f"{name} has DLPack dtype (code {code}, {bits} bits, {lanes} lanes); expected "
                                "float16, bfloat16, float32, float8_e4m3fn, uint8 or uint16")
    if not _contiguous(shape, strides):
        raise ArgumentTypeError(f"{name} must be C-contiguous (strides {strides} for shape {shape}; call .contiguous())")
    address = int(tensor.data or 0) + int(tensor.byte_offset)
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    return Dense(address, shape, element, bits // 8, device, writeable, (source, capsule))


def dense(source: Any, name: str) -> Dense:
    """The caller's array ``source`` as a :class:`Dense`, without a copy (ArgumentTypeError when it is none of
    numpy, DLPack or the buffer protocol, or not C-contiguous, or of an element type ctxcache has no use for)."""
    if isinstance(source, np.ndarray):
        return _from_numpy(source, name)
    if hasattr(source, "__dlpack__"):
        return _from_dlpack(source, name)
    try:
        view = memoryview(source)
    except TypeError:
        raise ArgumentTypeError(f"{name} must be a numpy array, a DLPack tensor (torch, CuPy) or a buffer, got "
                                f"{type(source).__name__}") from None
    array = np.asarray(view)
    dense_view = _from_numpy(array, name)
    return Dense(dense_view.address, dense_view.shape, dense_view.element, dense_view.itemsize, dense_view.device,
                 not view.readonly, (source, array))


def require_element(array: Dense, storage: int, name: str) -> None:
    """The array holds elements of storage dtype ``storage`` (a DType value): that type, or the bit patterns numpy
    uses for the two it lacks (uint16 for bf16, uint8 for fp8)."""
    if array.element == storage:
        return
    if (storage, array.element) in ((BF16, UINT16), (FP8_E4M3, UINT8)):
        return
    raise ArgumentTypeError(f"{name} holds {array.element_name} elements, the pool stores {_NAMES[storage]}")


# ---- export: a view of the library's memory as a capsule (DeviceView.__dlpack__) -----------------------------
# A capsule holds a DLManagedTensor made by the library, which keeps the owner's memory alive by itself (a C++
# reference): the Python owner may be closed or collected while a consumer holds the tensor, and no registry of
# Python owners is needed. A consumer renames the capsule "used_..." and calls the tensor's deleter when done; a
# capsule nobody consumed is released by its destructor, which is the library's own C function (it runs at an
# arbitrary point, often with the failed consumer's exception pending: no Python callback, no cffi, whose lock is
# not re-entrant, see _resource.py; it only drops C++ references, which is thread-safe in the library).

_DLTENSOR = b"dltensor"
_DLTENSOR_VERSIONED = b"dltensor_versioned"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_ctypes_library = ctypes.CDLL(library_path())
_capsule_destructor = ctypes.cast(_ctypes_library.ctxc_dlpack_capsule_destructor, ctypes.c_void_p)
_dlpack_release = _ctypes_library.ctxc_dlpack_release
_dlpack_release.restype = None
_dlpack_release.argtypes = [ctypes.c_void_p, ctypes.c_int32]


def to_dlpack(view: Any, handle: Any, versioned: bool) -> Any:
    """A capsule of ``view`` (a ctxc_device_view_t of the object ``handle``, live): "dltensor_versioned" (DLPack
    1.0, writable) when ``versioned``, else the unversioned "dltensor"."""
    out = ffi.new("void **")
    check(lib.ctxc_device_view_to_dlpack(view, handle, int(versioned), out))
    managed = int(ffi.cast("uintptr_t", out[0]))
    try:
        return _capsule_new(managed, _DLTENSOR_VERSIONED if versioned else _DLTENSOR, _capsule_destructor)
    except BaseException:
        _dlpack_release(managed, int(versioned))
        raise
