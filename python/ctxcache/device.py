"""The device layer: KV page pools, page tables, KV lengths, resident recurrent state, snapshot slabs and the
operations that move their bytes, with numpy in and out.

Every object lives on a :class:`Backend`: ``"cpu"`` (always available; the reference) or ``"cuda"`` (when the
library was built with CUDA and a device is visible); ``"auto"`` picks CUDA when it can. Both give identical
bytes. Arrays are copied in with ``write_*`` and out with ``read_*`` (for tests and tools).

Memory an engine can use: every object also shows its device memory without a copy, as a :class:`DeviceView`
(``pool.layer(i)``, ``table.device_view``, ``lengths.device_view``, ``state.recurrent(layer)``,
``storage.recurrent_slab``, ``buffer.view()``, ...) that implements DLPack, so ``numpy.from_dlpack(view)`` (CPU),
``torch.from_dlpack(view)`` and ``cupy.from_dlpack(view)`` see the same bytes. A tensor taken that way keeps the
memory alive by itself (a reference inside the library): closing or dropping the object while a consumer holds
the tensor is allowed, and the memory goes when the consumer lets the tensor go. Closing the object makes its
views unusable for new exports (:class:`ctxcache.InvalidHandleError`). fp8 exports as uint8 bit patterns (reinterpret
as ``torch.float8_e4m3fn`` there); bf16 as DLPack bfloat16, which numpy cannot import: ``view.view("uint16")``
gives its bit patterns. Objects can also be built over memory the engine already owns (``external=``: a numpy
array, an object with ``__cuda_array_interface__``, or an ``(address, nbytes)`` tuple, kept alive by the object),
and :meth:`Backend.set_stream` runs every later operation on the engine's stream.

Host tier: a :class:`HostBuffer` is host memory the backend's copies reach (pinned and mapped on CUDA);
:meth:`KvPagePool.copy_pages_to_host` and :meth:`KvPagePool.copy_pages_from_host` move whole pages (every layer's K
and V) between a pool and its slots in one launch: slot s at ``s * slot_bytes``, a caller header of
``payload_offset`` bytes, then layer by layer the K page bytes and the V page bytes (``pool.host_payload_bytes``).

Dense K/V: :func:`scatter_kv` writes one layer's K and V (numpy arrays or DLPack tensors such as torch's, read in
place; token-major ``[batch, seq, kv_heads, head_dim]`` or head-major ``[batch, kv_heads, seq, head_dim]``) into
the pages a page table maps, K and V in one launch; :func:`gather_kv_into` reads them back into arrays of the
caller's. Their full shape and dtype are checked (a head-major array passed as token-major is refused, not
reinterpreted). "No slot" is None everywhere (snapshot capture and restore included).

Element types map to numpy as: fp16 -> ``float16``, bf16 -> ``uint16`` (bit patterns; numpy has no bfloat16),
fp8 e4m3 -> ``uint8`` (bit patterns), fp32 -> ``float32``. Writes also accept raw ``uint8`` bytes. Arrays must be
C-contiguous; a wrong dtype or layout raises :class:`ctxcache.ArgumentTypeError` before anything reaches C, and so
does an object of the wrong type (or None) where a backend, pool, table, lengths or buffer is expected. Nothing is
allocated for a call that is then refused: output arrays and buffers are sized only after the arguments are
checked, and temporary buffers are freed when the call fails.

Single-writer: a backend and everything built on it must not be used from several threads at once. Objects are
context managers; closing them in any order is safe (an object keeps what it was built from alive).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from . import _arrays, _dense
from ._ffi import check, ffi, lib, new_output
from ._resource import Handle
from .errors import ArgumentTypeError, ContractError, InvalidArgumentError

_NULL = ffi.NULL
DEFAULT_HASH_CHUNKS = 2048


class BackendKind(IntEnum):
    AUTO = 0
    CPU = 1
    CUDA = 2


class DType(IntEnum):
    FP16 = 0
    BF16 = 1
    FP8_E4M3 = 2
    FP32 = 3

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype((np.float16, np.uint16, np.uint8, np.float32)[self])

    @property
    def itemsize(self) -> int:
        return (2, 2, 1, 4)[self]


class Element(IntEnum):
    """Element types of a :class:`DeviceView`: the storage dtypes, then int32 (page tables, KV lengths), uint8
    (raw bytes) and uint16 (bf16 or fp16 bit patterns)."""

    FP16 = 0
    BF16 = 1
    FP8_E4M3 = 2
    FP32 = 3
    INT32 = 4
    UINT8 = 5
    UINT16 = 6

    @property
    def itemsize(self) -> int:
        return (2, 2, 1, 4, 4, 1, 2)[self]


class StatePart(IntEnum):
    RECURRENT = 0
    CONV = 1
    BOUNDARY_HIDDEN = 2
    PARTIAL_KV = 3
    DRAFT_PARTIAL_KV = 4


class PageTableMode(IntEnum):
    DENSE = 0
    SPARSE_WINDOW = 1


class KvLayout(IntEnum):
    """Layout of dense K or V (gather output, scatter input): TOKEN_MAJOR [batch, seq, kv_heads, head_dim] or
    HEAD_MAJOR [batch, kv_heads, seq, head_dim] (what attention code such as Hugging Face's reads)."""

    TOKEN_MAJOR = 0
    HEAD_MAJOR = 1


@dataclass(frozen=True)
class LaunchCounters:
    kernels: int
    transfers: int


@dataclass(frozen=True)
class SnapshotLayout:
    recurrent_bytes_per_slot: int
    partial_kv_bytes_per_slot: int
    recurrent_slots: int
    partial_kv_slots: int
    footprint_bytes: int
    max_descriptors: int


# ---- argument helpers -----------------------------------------------------------------------------------------


def _handle(value: Any, kind: type[Handle], name: str) -> Any:
    """The live C handle of an object that must be a `kind` (None and other types are ArgumentTypeError)."""
    if not isinstance(value, kind):
        raise ArgumentTypeError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return value._live()


def _contiguous(array: Any, name: str, dtypes: Sequence[np.dtype]) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise ArgumentTypeError(f"{name} must be a numpy array, got {type(array).__name__}")
    if array.dtype not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise ArgumentTypeError(f"{name} must have dtype {allowed}, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise ArgumentTypeError(f"{name} must be C-contiguous (use np.ascontiguousarray)")
    return array


def _typed(array: Any, dtype: DType, name: str) -> np.ndarray:
    """An array of a storage dtype's numpy type, or raw uint8 bytes."""
    return _contiguous(array, name, (dtype.numpy_dtype, np.dtype(np.uint8)))


def _in(array: np.ndarray) -> Any:
    return _NULL if array.nbytes == 0 else ffi.from_buffer(array)


def _out(nbytes: int, dtype: Any, shape: Any = None) -> tuple[np.ndarray, Any]:
    array = np.empty(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    if shape is not None:
        array = array.reshape(shape)
    return array, (_NULL if nbytes == 0 else ffi.from_buffer(array))


def _size_out(fn: Any, *args: Any) -> int:
    out = ffi.new("size_t *")
    check(fn(*args, out))
    return int(out[0])


def _external(memory: Any, name: str) -> tuple[int, int]:
    """(address, nbytes) of caller memory: None (allocate), a numpy array, an object with
    ``__cuda_array_interface__`` (torch, CuPy), or an (address, nbytes) tuple."""
    if memory is None:
        return 0, 0
    if isinstance(memory, np.ndarray):
        if not memory.flags.c_contiguous or not memory.flags.writeable:
            raise ArgumentTypeError(f"{name} must be a writeable C-contiguous array")
        return int(memory.__array_interface__["data"][0]), int(memory.nbytes)
    interface = getattr(memory, "__cuda_array_interface__", None)
    if isinstance(interface, dict):
        if interface.get("strides") is not None:
            raise ArgumentTypeError(f"{name} must be C-contiguous (its __cuda_array_interface__ has strides)")
        itemsize = np.dtype(interface["typestr"]).itemsize
        return int(interface["data"][0]), int(math.prod(interface["shape"])) * itemsize
    if isinstance(memory, tuple) and len(memory) == 2:
        return (_arrays.integer(memory[0], f"{name}[0] (address)", maximum=2**64 - 1),
                _arrays.integer(memory[1], f"{name}[1] (nbytes)", maximum=2**62))
    raise ArgumentTypeError(f"{name} must be None, a numpy array, an object with __cuda_array_interface__ or an "
                            f"(address, nbytes) tuple, got {type(memory).__name__}")


def _set_external(options: Any, memory: Any, name: str, data_field: str = "external_data",
                  bytes_field: str = "external_bytes") -> None:
    address, nbytes = _external(memory, name)
    setattr(options, data_field, ffi.cast("void *", address))
    setattr(options, bytes_field, nbytes)


# ---- DLPack: the export (a capsule made by the library) is _dense.to_dlpack, beside the import -----------------


class DeviceView:
    """A dense, C-contiguous view of a device object's memory: ``data`` (the device pointer, an int), ``shape``,
    ``element``, ``nbytes``, where it lives (``__dlpack_device__``) and whether the memory was the caller's
    (``external``). Implements DLPack; built per access and holding only its owner (never the reverse)."""

    __slots__ = ("_owner", "_view")

    def __init__(self, owner: Handle, view: Any) -> None:
        self._owner = owner
        self._view = view  # ctxc_device_view_t *, filled by the library

    @property
    def data(self) -> int:
        return int(ffi.cast("uintptr_t", self._view.data))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(self._view.shape[i]) for i in range(self._view.ndim))

    @property
    def element(self) -> Element:
        return Element(self._view.element)

    @property
    def nbytes(self) -> int:
        return int(self._view.bytes)

    @property
    def external(self) -> bool:
        return bool(self._view.external)

    @property
    def backend_kind(self) -> BackendKind:
        return BackendKind(self._view.backend)

    def view(self, element: Any) -> DeviceView:
        """The same memory as another element type of the same size (e.g. bf16 as uint16 for numpy)."""
        target = _arrays.enum_member(Element, element, "element")
        if target.itemsize != self.element.itemsize:
            raise InvalidArgumentError(f"{target.name.lower()} ({target.itemsize} bytes) cannot reinterpret "
                                       f"{self.element.name.lower()} ({self.element.itemsize} bytes)")
        copy = new_output("ctxc_device_view_t")
        ffi.buffer(copy)[:] = ffi.buffer(self._view)[:]
        copy.element = target
        return DeviceView(self._owner, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_dense.DL_CUDA, int(self._view.device)) if self._view.backend == BackendKind.CUDA else (_dense.DL_CPU, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """A capsule of this memory: "dltensor_versioned" (DLPack 1.0, writable) when the consumer's
        ``max_version`` allows it, else the unversioned "dltensor". CUDA: unless ``stream`` is -1, the backend's
        work is finished first, so any consumer stream sees it."""
        if copy:
            raise BufferError("ctxcache views share memory; they are never copied")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the view lives on {self.__dlpack_device__()}, not {tuple(dl_device)}")
        handle = self._owner._live()
        if self._view.backend == BackendKind.CUDA:
            if stream != -1:
                check(lib.ctxc_device_backend_synchronize(_family_backend(self._owner)._live()))
        elif stream not in (None, -1):
            raise BufferError(f"a CPU view takes no stream (got {stream!r})")
        return _dense.to_dlpack(self._view, handle, max_version is not None and tuple(max_version)[0] >= 1)

    def numpy(self) -> np.ndarray:
        """numpy.from_dlpack of a CPU view (the same memory, no copy)."""
        return np.from_dlpack(self)

    def __repr__(self) -> str:
        return (f"DeviceView({self.element.name.lower()}{list(self.shape)}, {self.backend_kind.name.lower()}, "
                f"data=0x{self.data:x}{', external' if self.external else ''})")


def _view(owner: Handle, fn: Any, *args: Any) -> DeviceView:
    out = new_output("ctxc_device_view_t")
    check(fn(*args, out))
    return DeviceView(owner, out)


def _family_backend(owner: Handle) -> Backend:
    """The backend an object lives on (itself for a backend)."""
    return owner if isinstance(owner, Backend) else owner._keep[0]


# ---- backend and buffers --------------------------------------------------------------------------------------


class Backend(Handle):
    """Where device objects live. ``kind``: "auto" (default), "cpu" or "cuda"; asking for CUDA where it is
    unavailable raises :class:`ctxcache.UnsupportedError` with the reason."""

    _destroy = staticmethod(lib.ctxc_device_backend_destroy)
    _what = "backend"

    def __init__(self, kind: Any = BackendKind.AUTO, *, device: int = 0, max_table_bytes: int | None = None,
                 max_hash_chunks: int | None = None):
        options = ffi.new("ctxc_device_backend_options_t *")
        lib.ctxc_device_backend_options_init(options)
        options.kind = _arrays.enum_member(BackendKind, kind, "kind")
        options.device = _arrays.integer(device, "device")
        if max_table_bytes is not None:
            options.max_table_bytes = _arrays.integer(max_table_bytes, "max_table_bytes", maximum=2**62)
        if max_hash_chunks is not None:
            options.max_hash_chunks = _arrays.integer(max_hash_chunks, "max_hash_chunks", maximum=2**32 - 1)
        out = ffi.new("ctxc_device_backend_t **")
        check(lib.ctxc_device_backend_create(options, out))
        super().__init__(out[0])
        self.device = int(options.device)

    @property
    def kind(self) -> BackendKind:
        out = ffi.new("int32_t *")
        check(lib.ctxc_device_backend_kind(self._live(), out))
        return BackendKind(out[0])

    def synchronize(self) -> None:
        check(lib.ctxc_device_backend_synchronize(self._live()))

    @property
    def counters(self) -> LaunchCounters:
        out = new_output("ctxc_launch_counters_t")
        check(lib.ctxc_device_backend_counters(self._live(), out))
        return LaunchCounters(int(out.kernels), int(out.transfers))

    @property
    def allocated_bytes(self) -> int:
        return _size_out(lib.ctxc_device_backend_allocated_bytes, self._live())

    @property
    def allocated_host_bytes(self) -> int:
        """Bytes of the host buffers allocated on this backend (counted apart from device bytes)."""
        return _size_out(lib.ctxc_device_backend_allocated_host_bytes, self._live())

    def set_stream(self, stream: Any) -> None:
        """Run every later operation on ``stream``: CUDA, a cudaStream_t as an int (``torch.cuda.Stream.cuda_stream``,
        ``cupy.cuda.Stream.ptr``) or an object with one of those attributes; None = the backend's own stream. The work
        issued before completes first. The backend never destroys a caller's stream (set None before destroying
        it). The CPU backend accepts any value and ignores it."""
        if stream is None:
            address = 0
        else:
            for attribute in ("cuda_stream", "ptr"):
                if hasattr(stream, attribute):
                    stream = getattr(stream, attribute)
                    break
            address = _arrays.integer(stream, "stream", maximum=2**64 - 1)
        check(lib.ctxc_device_backend_set_stream(self._live(), ffi.cast("void *", address)))

    @property
    def stream(self) -> int:
        """The stream in use as an int (CUDA: the backend's own unless set; CPU: the last value set, 0 at first)."""
        out = ffi.new("void **")
        check(lib.ctxc_device_backend_stream(self._live(), out))
        return int(ffi.cast("uintptr_t", out[0]))

    def buffer(self, data: Any) -> DeviceBuffer:
        """A zero-filled buffer of ``data`` bytes, or a buffer holding a copy of a numpy array."""
        if isinstance(data, np.ndarray):
            if not data.flags.c_contiguous:
                raise ArgumentTypeError("data must be C-contiguous (use np.ascontiguousarray)")
            buffer = DeviceBuffer(self, data.nbytes)
            buffer.write(data)
            return buffer
        return DeviceBuffer(self, data)

    def __repr__(self) -> str:
        return "Backend(closed)" if self.closed else f"Backend({self.kind.name.lower()})"


class _Bytes(Handle):
    """What a device buffer and a host buffer share: bytes made by a backend (zero-filled), or a window of
    ``nbytes`` on caller memory (``external``: not zeroed, kept alive by the object), written and read by offset.
    A subclass names its C calls and its options type."""

    _type: str  # the C handle type
    _options: str
    _options_init: Any
    _create: Any
    _size: Any
    _write: Any
    _read: Any

    def __init__(self, backend: Backend, nbytes: int, *, external: Any = None):
        nbytes = _arrays.integer(nbytes, "nbytes", maximum=2**62)
        options = ffi.new(self._options + " *")
        self._options_init(options)
        options.bytes = nbytes
        _set_external(options, external, "external")
        out = ffi.new(self._type + " **")
        check(self._create(_handle(backend, Backend, "backend"), options, out))
        super().__init__(out[0], (backend, external))
        self.backend = backend

    @property
    def nbytes(self) -> int:
        return _size_out(self._size, self._live())

    def write(self, array: np.ndarray, offset: int = 0) -> None:
        """Copy a C-contiguous array's bytes to [offset, offset + array.nbytes), after the backend's earlier work."""
        if not isinstance(array, np.ndarray):
            raise ArgumentTypeError(f"array must be a numpy array, got {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise ArgumentTypeError("array must be C-contiguous (use np.ascontiguousarray)")
        offset = _arrays.integer(offset, "offset", maximum=2**62)
        check(self._write(self._live(), offset, _in(array), array.nbytes))

    def read(self, dtype: Any = np.uint8, count: int | None = None, offset: int = 0) -> np.ndarray:
        """A copy of ``count`` elements of ``dtype`` from byte ``offset`` (default: the rest), after the backend's
        earlier work."""
        dtype = np.dtype(dtype)
        offset = _arrays.integer(offset, "offset", maximum=2**62)
        size = self.nbytes
        if count is None:
            count = max(size - offset, 0) // dtype.itemsize
        count = _arrays.integer(count, "count", maximum=2**62)
        if offset + count * dtype.itemsize > size:  # before the output array is allocated
            raise ContractError(f"read: [{offset}, +{count * dtype.itemsize}) is outside the {self._what}'s {size} bytes")
        array, pointer = _out(count * dtype.itemsize, dtype)
        check(self._read(self._live(), offset, pointer, array.nbytes))
        return array


class DeviceBuffer(_Bytes):
    """A zero-filled device buffer of ``nbytes``, or (``external``) a window of ``nbytes`` on caller memory, not
    zeroed."""

    _destroy = staticmethod(lib.ctxc_device_buffer_destroy)
    _what = "buffer"
    _type = "ctxc_device_buffer_t"
    _options = "ctxc_device_buffer_options_t"
    _options_init = staticmethod(lib.ctxc_device_buffer_options_init)
    _create = staticmethod(lib.ctxc_device_buffer_create)
    _size = staticmethod(lib.ctxc_device_buffer_size)
    _write = staticmethod(lib.ctxc_device_buffer_write)
    _read = staticmethod(lib.ctxc_device_buffer_read)

    def view(self) -> DeviceView:
        """The buffer's memory: uint8 [nbytes]."""
        return _view(self, lib.ctxc_device_buffer_view, self._live())


class HostBuffer(_Bytes):
    """Host memory for a host tier's KV slots: zero-filled and page-aligned, pinned and mapped on CUDA so the
    backend's copies reach it directly; plain memory on the CPU backend. ``external``: a window of ``nbytes`` on the
    engine's own host memory (a numpy array or an ``(address, nbytes)`` tuple; on CUDA it must be pinned and
    mapped), not zeroed, kept alive by the buffer. Read or write it only through :meth:`read` and :meth:`write`
    (they wait for the backend's copies)."""

    _destroy = staticmethod(lib.ctxc_host_buffer_destroy)
    _what = "host buffer"
    _type = "ctxc_host_buffer_t"
    _options = "ctxc_host_buffer_options_t"
    _options_init = staticmethod(lib.ctxc_host_buffer_options_init)
    _create = staticmethod(lib.ctxc_host_buffer_create)
    _size = staticmethod(lib.ctxc_host_buffer_size)
    _write = staticmethod(lib.ctxc_host_buffer_write)
    _read = staticmethod(lib.ctxc_host_buffer_read)

    @property
    def address(self) -> int:
        """The host address of the bytes (0 when empty); read or write them only after ``backend.synchronize()``."""
        out = ffi.new("void **")
        check(lib.ctxc_host_buffer_data(self._live(), out))
        return int(ffi.cast("uintptr_t", out[0]))


# ---- KV pools, page tables, lengths ---------------------------------------------------------------------------


class KvPagePool(Handle):
    """Paged KV of some attention layers: per layer [2, num_pages, page_size, kv_heads, head_dim]. ``layers`` is
    a sequence of (kv_heads, head_dim). Flat page f in [0, 2 * num_pages): K pages, then V pages."""

    _destroy = staticmethod(lib.ctxc_kv_pool_destroy)
    _what = "KV pool"

    def __init__(self, backend: Backend, *, num_pages: int, page_size: int, layers: Sequence[tuple[int, int]],
                 dtype: Any = DType.FP16, external: Any = None):
        self.dtype = _arrays.enum_member(DType, dtype, "dtype")
        self.num_pages = _arrays.integer(num_pages, "num_pages", minimum=None)
        self.page_size = _arrays.integer(page_size, "page_size", minimum=None)
        shapes = [tuple(layer) for layer in layers]
        c_layers = ffi.new("ctxc_kv_layer_shape_t[]", max(len(shapes), 1))
        for i, shape in enumerate(shapes):
            if len(shape) != 2:
                raise InvalidArgumentError(f"layers[{i}] must be (kv_heads, head_dim), got {shape}")
            c_layers[i].kv_heads = _arrays.integer(shape[0], f"layers[{i}].kv_heads", minimum=None)
            c_layers[i].head_dim = _arrays.integer(shape[1], f"layers[{i}].head_dim", minimum=None)
        self.layers = [(int(h), int(d)) for h, d in shapes]
        options = ffi.new("ctxc_kv_pool_options_t *")
        lib.ctxc_kv_pool_options_init(options)
        options.num_pages = self.num_pages
        options.page_size = self.page_size
        options.dtype = self.dtype
        options.layers = c_layers if shapes else _NULL
        options.layer_count = len(shapes)
        _set_external(options, external, "external")
        out = ffi.new("ctxc_kv_pool_t **")
        check(lib.ctxc_kv_pool_create(_handle(backend, Backend, "backend"), options, out))
        super().__init__(out[0], (backend, external))
        self.backend = backend

    @staticmethod
    def required_bytes(*, num_pages: int, page_size: int, layers: Sequence[tuple[int, int]],
                       dtype: Any = DType.FP16) -> int:
        """The footprint of such a pool: what ``external`` memory must hold (256-byte aligned)."""
        shapes = [tuple(layer) for layer in layers]
        c_layers = ffi.new("ctxc_kv_layer_shape_t[]", max(len(shapes), 1))
        for i, shape in enumerate(shapes):
            if len(shape) != 2:
                raise InvalidArgumentError(f"layers[{i}] must be (kv_heads, head_dim), got {shape}")
            c_layers[i].kv_heads = _arrays.integer(shape[0], f"layers[{i}].kv_heads", minimum=None)
            c_layers[i].head_dim = _arrays.integer(shape[1], f"layers[{i}].head_dim", minimum=None)
        options = ffi.new("ctxc_kv_pool_options_t *")
        lib.ctxc_kv_pool_options_init(options)
        options.num_pages = _arrays.integer(num_pages, "num_pages", minimum=None)
        options.page_size = _arrays.integer(page_size, "page_size", minimum=None)
        options.dtype = _arrays.enum_member(DType, dtype, "dtype")
        options.layers = c_layers if shapes else _NULL
        options.layer_count = len(shapes)
        return _size_out(lib.ctxc_kv_pool_required_bytes, options)

    def layer(self, layer: int) -> DeviceView:
        """One layer's memory: the pool's dtype, (2, num_pages, page_size, kv_heads, head_dim)."""
        return _view(self, lib.ctxc_kv_pool_layer_view, self._live(), _arrays.integer(layer, "layer", minimum=None))

    def memory(self) -> DeviceView:
        """The whole pool: uint8 [footprint_bytes] (every layer starts 256-byte aligned)."""
        return _view(self, lib.ctxc_kv_pool_memory_view, self._live())

    def page_bytes(self, layer: int) -> int:
        return _size_out(lib.ctxc_kv_pool_page_bytes, self._live(), _arrays.integer(layer, "layer", minimum=None))

    @property
    def footprint_bytes(self) -> int:
        return _size_out(lib.ctxc_kv_pool_footprint_bytes, self._live())

    def write_pages(self, layer: int, first_flat_page: int, pages: Any) -> None:
        """Write whole pages from host memory: ``(count, page_size, kv_heads, head_dim)`` elements of the pool's dtype
        (numpy, or a CPU tensor through DLPack; bf16 also as uint16 and fp8 as uint8 bit patterns), one page as
        ``(page_size, kv_heads, head_dim)``, or a flat 1-D array (the caller vouches for its order; uint8 here means
        raw bytes). Any other shape, e.g. ``(kv_heads, page_size, head_dim)``, is InvalidArgumentError."""
        array = _dense.dense(pages, "pages")
        if array.device[0] not in (_dense.DL_CPU, _dense.DL_CUDA_HOST):
            raise ArgumentTypeError(f"pages must be in host memory (use a DLPack device view to reach device memory), "
                                    f"got DLPack device {array.device}")
        raw = array.element == _dense.UINT8 and len(array.shape) == 1
        if not raw:
            _dense.require_element(array, self.dtype, "pages")
        layer = _arrays.integer(layer, "layer", minimum=None)
        page_bytes = self.page_bytes(layer)
        if array.nbytes % page_bytes:
            raise InvalidArgumentError(f"pages holds {array.nbytes} bytes, not a whole number of {page_bytes}-byte pages")
        if len(array.shape) != 1:
            heads, dim = self.layers[layer]
            page = (self.page_size, heads, dim)
            if array.shape != page and (len(array.shape) != 4 or array.shape[1:] != page):
                raise InvalidArgumentError(f"pages has shape {array.shape}, expected (count, page_size, kv_heads, "
                                           f"head_dim) = (count, {self.page_size}, {heads}, {dim}), one page "
                                           f"{page}, or a flat 1-D array")
        pointer = _NULL if array.nbytes == 0 else ffi.cast("const void *", array.address)
        check(lib.ctxc_kv_pool_write_pages(self._live(), layer, _arrays.integer(first_flat_page, "first_flat_page", minimum=None),
                                           array.nbytes // page_bytes, pointer, array.nbytes))

    @property
    def host_payload_bytes(self) -> int:
        """Bytes of one host slot's payload: for every layer, its K page bytes then its V page bytes."""
        return _size_out(lib.ctxc_kv_pool_host_payload_bytes, self._live())

    def _copy_host(self, fn: Any, pages: Any, host: HostBuffer, host_slots: Any, slot_bytes: int,
                   payload_offset: int, slot_count: int | None) -> None:
        page_ids = _arrays.int32_array(pages, "pages")
        slot_ids = _arrays.int32_array(host_slots, "host_slots")
        if page_ids.size != slot_ids.size:
            raise InvalidArgumentError(f"pages and host_slots differ in length ({page_ids.size} and {slot_ids.size})")
        host_handle = _handle(host, HostBuffer, "host")
        layout = ffi.new("ctxc_host_slot_layout_t *")
        lib.ctxc_host_slot_layout_init(layout)
        layout.slot_bytes = _arrays.integer(slot_bytes, "slot_bytes", maximum=2**62)
        layout.payload_offset = _arrays.integer(payload_offset, "payload_offset", maximum=2**62)
        if slot_count is None:
            slot_count = min(host.nbytes // layout.slot_bytes, 2**31 - 1) if layout.slot_bytes else 0
        layout.slot_count = _arrays.integer(slot_count, "slot_count", minimum=None)
        check(fn(self._live(), _arrays.int32_pointer(page_ids), _arrays.int32_pointer(slot_ids), page_ids.size,
                 host_handle, layout))

    def copy_pages_to_host(self, pages: Any, host: HostBuffer, host_slots: Any, *, slot_bytes: int,
                           payload_offset: int = 0, slot_count: int | None = None) -> None:
        """Page ``pages[i]`` (every layer, K and V) into slot ``host_slots[i]`` of ``host``, in one launch (on CUDA
        asynchronous: ``host.read`` waits for it). Slot s starts at byte ``s * slot_bytes``; its first
        ``payload_offset`` bytes are the caller's header, never touched. ``slot_count`` defaults to as many slots as
        ``host`` holds. A page id, slot or layout out of range, or a slot twice, is ContractError (nothing copied)."""
        self._copy_host(lib.ctxc_kv_pool_copy_pages_to_host, pages, host, host_slots, slot_bytes, payload_offset,
                        slot_count)

    def copy_pages_from_host(self, pages: Any, host: HostBuffer, host_slots: Any, *, slot_bytes: int,
                             payload_offset: int = 0, slot_count: int | None = None) -> None:
        """Slot ``host_slots[i]`` of ``host`` into page ``pages[i]``: the inverse of :meth:`copy_pages_to_host`,
        with no page twice."""
        self._copy_host(lib.ctxc_kv_pool_copy_pages_from_host, pages, host, host_slots, slot_bytes, payload_offset,
                        slot_count)

    def read_pages(self, layer: int, first_flat_page: int, count: int) -> np.ndarray:
        """(count, page_size, kv_heads, head_dim) array of the pool's numpy dtype."""
        count = _arrays.integer(count, "count")
        first_flat_page = _arrays.integer(first_flat_page, "first_flat_page", minimum=None)
        heads, dim = self.layers[_arrays.integer(layer, "layer", maximum=len(self.layers) - 1)]
        if first_flat_page < 0 or first_flat_page + count > 2 * self.num_pages:  # before the output is allocated
            raise ContractError(f"read_pages: pages [{first_flat_page}, +{count}) are outside [0, {2 * self.num_pages})")
        array, pointer = _out(count * self.page_bytes(layer), self.dtype.numpy_dtype, (count, self.page_size, heads, dim))
        check(lib.ctxc_kv_pool_read_pages(self._live(), layer, first_flat_page, count, pointer, array.nbytes))
        return array


class KvPageTable(Handle):
    """[max_batch, 2, max_pages_per_seq] int32 page table: K ids, V ids = K + num_pages, -1 unused. Edits change
    the host table; :meth:`upload` copies the changed row ranges to the device."""

    _destroy = staticmethod(lib.ctxc_kv_page_table_destroy)
    _what = "page table"

    def __init__(self, backend: Backend, *, max_batch: int, max_pages_per_seq: int, num_pages: int,
                 mode: Any = PageTableMode.DENSE, external: Any = None):
        self.mode = _arrays.enum_member(PageTableMode, mode, "mode")
        self.max_batch = _arrays.integer(max_batch, "max_batch", minimum=None)
        self.max_pages_per_seq = _arrays.integer(max_pages_per_seq, "max_pages_per_seq", minimum=None)
        self.num_pages = _arrays.integer(num_pages, "num_pages", minimum=None)
        options = ffi.new("ctxc_kv_page_table_options_t *")
        lib.ctxc_kv_page_table_options_init(options)
        options.max_batch = self.max_batch
        options.max_pages_per_seq = self.max_pages_per_seq
        options.num_pages = self.num_pages
        options.mode = self.mode
        _set_external(options, external, "external")
        out = ffi.new("ctxc_kv_page_table_t **")
        check(lib.ctxc_kv_page_table_create(_handle(backend, Backend, "backend"), options, out))
        super().__init__(out[0], (backend, external))
        self.backend = backend

    @property
    def device_view(self) -> DeviceView:
        """The device table the kernels read: int32 (max_batch, 2, max_pages_per_seq). Current only after
        :meth:`upload` (the host table is the truth; an upload overwrites the rows it copies)."""
        return _view(self, lib.ctxc_kv_page_table_device_view, self._live())

    def set_row(self, slot: int, k_pages: Any) -> None:
        pages = _arrays.int32_array(k_pages, "k_pages")
        check(lib.ctxc_kv_page_table_set_row(self._live(), _arrays.integer(slot, "slot", minimum=None),
                                             _arrays.int32_pointer(pages), pages.size))

    def clear_row(self, slot: int) -> None:
        check(lib.ctxc_kv_page_table_clear_row(self._live(), _arrays.integer(slot, "slot", minimum=None)))

    def set_identity(self) -> None:
        check(lib.ctxc_kv_page_table_set_identity(self._live()))

    def set_entry(self, slot: int, logical_page: int, k_page: int) -> None:
        check(lib.ctxc_kv_page_table_set_entry(self._live(), _arrays.integer(slot, "slot", minimum=None),
                                               _arrays.integer(logical_page, "logical_page", minimum=None),
                                               _arrays.integer(k_page, "k_page", minimum=None)))

    def clear_entry(self, slot: int, logical_page: int) -> None:
        check(lib.ctxc_kv_page_table_clear_entry(self._live(), _arrays.integer(slot, "slot", minimum=None),
                                                 _arrays.integer(logical_page, "logical_page", minimum=None)))

    def compact_rows(self, old_to_new: Any, new_batch: int) -> None:
        mapping = _arrays.int32_array(old_to_new, "old_to_new")
        check(lib.ctxc_kv_page_table_compact_rows(self._live(), _arrays.int32_pointer(mapping), mapping.size,
                                                  _arrays.integer(new_batch, "new_batch", minimum=None)))

    def check_invariants(self) -> None:
        """Raises :class:`ctxcache.InvariantError` naming the first violation."""
        check(lib.ctxc_kv_page_table_check_invariants(self._live()))

    def upload(self) -> int:
        """Copy the changed row ranges to the device; returns the number of copies."""
        out = ffi.new("int32_t *")
        check(lib.ctxc_kv_page_table_upload(self._live(), out))
        return int(out[0])

    @property
    def dirty(self) -> bool:
        out = ffi.new("int32_t *")
        check(lib.ctxc_debug_kv_page_table_is_dirty(self._live(), out))
        return bool(out[0])

    def _read(self, fn: Any) -> np.ndarray:
        shape = (self.max_batch, 2, self.max_pages_per_seq)
        array, pointer = _out(4 * self.max_batch * 2 * self.max_pages_per_seq, np.int32, shape)
        count = ffi.new("size_t *")
        check(fn(self._live(), ffi.cast("int32_t *", pointer), array.size, count))
        return array

    def host_table(self) -> np.ndarray:
        return self._read(lib.ctxc_kv_page_table_read_host)

    def device_table(self) -> np.ndarray:
        """The device copy, read back (current only when not dirty)."""
        return self._read(lib.ctxc_debug_kv_page_table_read_device)


class KvLengths(Handle):
    """Device int32 KV lengths of the active sequences."""

    _destroy = staticmethod(lib.ctxc_kv_lengths_destroy)
    _what = "KV lengths"

    def __init__(self, backend: Backend, max_batch: int, *, external: Any = None):
        self.max_batch = _arrays.integer(max_batch, "max_batch", minimum=None)
        options = ffi.new("ctxc_kv_lengths_options_t *")
        lib.ctxc_kv_lengths_options_init(options)
        options.max_batch = self.max_batch
        _set_external(options, external, "external")
        out = ffi.new("ctxc_kv_lengths_t **")
        check(lib.ctxc_kv_lengths_create(_handle(backend, Backend, "backend"), options, out))
        super().__init__(out[0], (backend, external))
        self.backend = backend

    @property
    def device_view(self) -> DeviceView:
        """The device vector: int32 (max_batch,); entries at and beyond active_batch are unspecified."""
        return _view(self, lib.ctxc_kv_lengths_device_view, self._live())

    @property
    def active_batch(self) -> int:
        out = ffi.new("int32_t *")
        check(lib.ctxc_kv_lengths_active_batch(self._live(), out))
        return int(out[0])

    def set(self, values: Any) -> None:
        array = _arrays.int32_array(values, "values")
        check(lib.ctxc_kv_lengths_set(self._live(), _arrays.int32_pointer(array), array.size))

    def add(self, increment: Any) -> None:
        """Add an int to every active length, or another KvLengths element-wise."""
        if isinstance(increment, KvLengths):
            check(lib.ctxc_kv_lengths_add_lengths(self._live(), increment._live()))
        else:
            check(lib.ctxc_kv_lengths_add(self._live(), _arrays.integer(increment, "increment", minimum=-(2**31))))

    def compact(self, old_to_new: Any, new_batch: int) -> None:
        mapping = _arrays.int32_array(old_to_new, "old_to_new")
        check(lib.ctxc_kv_lengths_compact(self._live(), _arrays.int32_pointer(mapping), mapping.size,
                                          _arrays.integer(new_batch, "new_batch", minimum=None)))

    def read(self) -> np.ndarray:
        count = ffi.new("size_t *")
        status = lib.ctxc_kv_lengths_read(self._live(), _NULL, 0, count)
        if status not in (0, 7):  # CTXC_E_BUFFER_TOO_SMALL is the size answer
            check(status)
        array, pointer = _out(4 * int(count[0]), np.int32)
        check(lib.ctxc_kv_lengths_read(self._live(), ffi.cast("int32_t *", pointer), array.size, count))
        return array


# ---- resident state and snapshots -----------------------------------------------------------------------------


class ResidentState(Handle):
    """Live per-slot recurrent state: per recurrent layer a recurrent row [heads, head_dim, state_size] and a conv
    row [conv_dim, conv_kernel]; optionally an fp16 boundary hidden row. ``dtype`` (default fp32) is the element
    type of both the recurrent and the conv rows; ``recurrent_dtype`` / ``conv_dtype`` override it for one part."""

    _destroy = staticmethod(lib.ctxc_resident_state_destroy)
    _what = "resident state"

    def __init__(self, backend: Backend, *, max_batch: int, num_layers: int = 0, recurrent_heads: int = 0,
                 recurrent_head_dim: int = 0, state_size: int = 0, dtype: Any = DType.FP32,
                 recurrent_dtype: Any = None, conv_dim: int = 0, conv_kernel: int = 0, conv_dtype: Any = None,
                 hidden_size: int = 0, external: Any = None):
        options = self._options(max_batch=max_batch, num_layers=num_layers, recurrent_heads=recurrent_heads,
                                recurrent_head_dim=recurrent_head_dim, state_size=state_size, dtype=dtype,
                                recurrent_dtype=recurrent_dtype, conv_dim=conv_dim, conv_kernel=conv_kernel,
                                conv_dtype=conv_dtype, hidden_size=hidden_size)
        self.dtypes: dict[StatePart, DType] = {StatePart.RECURRENT: DType(options.recurrent_dtype),
                                               StatePart.CONV: DType(options.conv_dtype),
                                               StatePart.BOUNDARY_HIDDEN: DType.FP16}
        self.max_batch = int(options.max_batch)
        self.num_layers = int(options.num_layers)
        _set_external(options, external, "external")
        out = ffi.new("ctxc_resident_state_t **")
        check(lib.ctxc_resident_state_create(_handle(backend, Backend, "backend"), options, out))
        super().__init__(out[0], (backend, external))
        self.backend = backend

    @staticmethod
    def _options(*, max_batch: int, num_layers: int = 0, recurrent_heads: int = 0, recurrent_head_dim: int = 0,
                 state_size: int = 0, dtype: Any = DType.FP32, recurrent_dtype: Any = None, conv_dim: int = 0,
                 conv_kernel: int = 0, conv_dtype: Any = None, hidden_size: int = 0) -> Any:
        options = ffi.new("ctxc_resident_state_options_t *")
        lib.ctxc_resident_state_options_init(options)
        for name, value in (("max_batch", max_batch), ("num_layers", num_layers), ("recurrent_heads", recurrent_heads),
                            ("recurrent_head_dim", recurrent_head_dim), ("state_size", state_size),
                            ("conv_dim", conv_dim), ("conv_kernel", conv_kernel), ("hidden_size", hidden_size)):
            setattr(options, name, _arrays.integer(value, name, minimum=None))
        dtype = _arrays.enum_member(DType, dtype, "dtype")
        options.recurrent_dtype = dtype if recurrent_dtype is None else _arrays.enum_member(DType, recurrent_dtype, "recurrent_dtype")
        options.conv_dtype = dtype if conv_dtype is None else _arrays.enum_member(DType, conv_dtype, "conv_dtype")
        return options

    @staticmethod
    def required_bytes(backend: Backend, **geometry: Any) -> int:
        """The footprint of a state of this geometry (the constructor's keywords) on ``backend``: what ``external``
        memory must hold (256-byte aligned)."""
        options = ResidentState._options(**geometry)
        return _size_out(lib.ctxc_resident_state_required_bytes, _handle(backend, Backend, "backend"), options)

    def slab(self, part: Any, layer: int = 0) -> DeviceView:
        """One slab: the part's dtype, (max_batch, row elements)."""
        return _view(self, lib.ctxc_resident_state_view, self._live(), _arrays.enum_member(StatePart, part, "part"),
                     _arrays.integer(layer, "layer", minimum=None))

    def recurrent(self, layer: int) -> DeviceView:
        return self.slab(StatePart.RECURRENT, layer)

    def conv(self, layer: int) -> DeviceView:
        return self.slab(StatePart.CONV, layer)

    def hidden(self) -> DeviceView:
        return self.slab(StatePart.BOUNDARY_HIDDEN, 0)

    def memory(self) -> DeviceView:
        """The whole state: uint8 [footprint_bytes]."""
        return _view(self, lib.ctxc_resident_state_memory_view, self._live())

    def row_bytes(self, part: Any) -> int:
        return _size_out(lib.ctxc_resident_state_row_bytes, self._live(), _arrays.enum_member(StatePart, part, "part"))

    @property
    def footprint_bytes(self) -> int:
        return _size_out(lib.ctxc_resident_state_footprint_bytes, self._live())

    def _dtype(self, part: StatePart) -> DType:
        if part not in self.dtypes:
            raise InvalidArgumentError(f"part {part.name} is not a resident-state part")
        return self.dtypes[part]

    def write_row(self, part: Any, layer: int, slot: int, row: np.ndarray) -> None:
        part = _arrays.enum_member(StatePart, part, "part")
        row = _typed(row, self._dtype(part), "row")
        check(lib.ctxc_resident_state_write_row(self._live(), part, _arrays.integer(layer, "layer", minimum=None),
                                                _arrays.integer(slot, "slot", minimum=None), _in(row), row.nbytes))

    def read_row(self, part: Any, layer: int, slot: int) -> np.ndarray:
        """One row as a 1-D array of the part's numpy dtype."""
        part = _arrays.enum_member(StatePart, part, "part")
        array, pointer = _out(self.row_bytes(part), self._dtype(part).numpy_dtype)
        check(lib.ctxc_resident_state_read_row(self._live(), part, _arrays.integer(layer, "layer", minimum=None),
                                               _arrays.integer(slot, "slot", minimum=None), pointer, array.nbytes))
        return array

    def zero_slot(self, slot: int) -> None:
        check(lib.ctxc_resident_state_zero_slot(self._live(), _arrays.integer(slot, "slot", minimum=None)))

    def compact(self, old_to_new: Any, new_batch: int) -> None:
        mapping = _arrays.int32_array(old_to_new, "old_to_new")
        check(lib.ctxc_resident_state_compact(self._live(), _arrays.int32_pointer(mapping), mapping.size,
                                              _arrays.integer(new_batch, "new_batch", minimum=None)))


class SnapshotStorage(Handle):
    """Snapshot slabs sized from byte budgets (see :attr:`layout`). ``state``, ``base_pool`` and ``draft_pool``
    are optional; capture and restore move every part of a transfer in one launch."""

    _destroy = staticmethod(lib.ctxc_snapshot_storage_destroy)
    _what = "snapshot storage"

    def __init__(self, backend: Backend, *, state: ResidentState | None = None, base_pool: KvPagePool | None = None,
                 draft_pool: KvPagePool | None = None, recurrent_budget_bytes: int = 0,
                 partial_kv_budget_bytes: int = 0, boundary_hidden: bool = False, external_recurrent: Any = None,
                 external_partial_kv: Any = None):
        for name, value, kind in (("state", state, ResidentState), ("base_pool", base_pool, KvPagePool),
                                  ("draft_pool", draft_pool, KvPagePool)):
            if value is not None and not isinstance(value, kind):
                raise ArgumentTypeError(f"{name} must be a {kind.__name__} or None, got {type(value).__name__}")
        options = ffi.new("ctxc_snapshot_storage_options_t *")
        lib.ctxc_snapshot_storage_options_init(options)
        options.recurrent_budget_bytes = _arrays.integer(recurrent_budget_bytes, "recurrent_budget_bytes", maximum=2**62)
        options.partial_kv_budget_bytes = _arrays.integer(partial_kv_budget_bytes, "partial_kv_budget_bytes", maximum=2**62)
        options.boundary_hidden = int(_arrays.boolean(boundary_hidden, "boundary_hidden"))
        _set_external(options, external_recurrent, "external_recurrent", "external_recurrent_data",
                      "external_recurrent_bytes")
        _set_external(options, external_partial_kv, "external_partial_kv", "external_partial_kv_data",
                      "external_partial_kv_bytes")
        out = ffi.new("ctxc_snapshot_storage_t **")
        check(lib.ctxc_snapshot_storage_create(_handle(backend, Backend, "backend"), state._live() if state else _NULL,
                                               base_pool._live() if base_pool else _NULL,
                                               draft_pool._live() if draft_pool else _NULL, options, out))
        super().__init__(out[0], (backend, state, base_pool, draft_pool, external_recurrent, external_partial_kv))
        self.backend = backend

    def slab(self, part: Any) -> DeviceView:
        """RECURRENT or PARTIAL_KV slots: uint8 (slots, bytes per slot)."""
        return _view(self, lib.ctxc_snapshot_storage_view, self._live(), _arrays.enum_member(StatePart, part, "part"))

    @property
    def recurrent_slab(self) -> DeviceView:
        return self.slab(StatePart.RECURRENT)

    @property
    def partial_kv_slab(self) -> DeviceView:
        return self.slab(StatePart.PARTIAL_KV)

    @property
    def layout(self) -> SnapshotLayout:
        out = new_output("ctxc_snapshot_layout_t")
        check(lib.ctxc_snapshot_storage_layout(self._live(), out))
        return SnapshotLayout(int(out.recurrent_bytes_per_slot), int(out.partial_kv_bytes_per_slot),
                              int(out.recurrent_slots), int(out.partial_kv_slots), int(out.footprint_bytes),
                              int(out.max_descriptors))

    @staticmethod
    def _transfer(**parts: Any) -> Any:
        """A transfer; a part given as None (the default) is skipped. Slots, pages and counts are >= 0: "no slot"
        is None, as everywhere in the Python API (the C ABI's -1 never reaches it)."""
        t = ffi.new("ctxc_snapshot_transfer_t *")
        lib.ctxc_snapshot_transfer_init(t)
        for name, value in parts.items():
            setattr(t, name, 0 if value is None and name == "valid_tokens" else
                    -1 if value is None else _arrays.integer(value, name))
        return t

    def capture(self, *, batch_slot: int | None = None, recurrent_slot: int | None = None,
                partial_kv_slot: int | None = None, base_page: int | None = None, draft_page: int | None = None,
                valid_tokens: int = 0) -> None:
        """Live -> snapshot. A part whose slot is None is skipped."""
        t = self._transfer(batch_slot=batch_slot, recurrent_slot=recurrent_slot, partial_kv_slot=partial_kv_slot,
                           base_page=base_page, draft_page=draft_page, valid_tokens=valid_tokens)
        check(lib.ctxc_snapshot_storage_capture(self._live(), t))

    def restore(self, *, batch_slot: int | None = None, recurrent_slot: int | None = None,
                partial_kv_slot: int | None = None, base_page: int | None = None, draft_page: int | None = None,
                valid_tokens: int = 0) -> None:
        """Snapshot -> live (only the first valid_tokens tokens of each K and V page are written). None: skipped."""
        t = self._transfer(batch_slot=batch_slot, recurrent_slot=recurrent_slot, partial_kv_slot=partial_kv_slot,
                           base_page=base_page, draft_page=draft_page, valid_tokens=valid_tokens)
        check(lib.ctxc_snapshot_storage_restore(self._live(), t))

    def region_bytes(self, part: Any, layer: int) -> int:
        return _size_out(lib.ctxc_snapshot_storage_region_bytes, self._live(), _arrays.enum_member(StatePart, part, "part"),
                         _arrays.integer(layer, "layer", minimum=None))

    def read_region(self, part: Any, layer: int, slot: int) -> np.ndarray:
        """One region of a slot as raw uint8 bytes."""
        part = _arrays.enum_member(StatePart, part, "part")
        array, pointer = _out(self.region_bytes(part, layer), np.uint8)
        check(lib.ctxc_snapshot_storage_read_region(self._live(), part, layer, _arrays.integer(slot, "slot", minimum=None),
                                                    pointer, array.nbytes))
        return array

    def write_region(self, part: Any, layer: int, slot: int, data: np.ndarray) -> None:
        part = _arrays.enum_member(StatePart, part, "part")
        if not isinstance(data, np.ndarray) or not data.flags.c_contiguous:
            raise ArgumentTypeError("data must be a C-contiguous numpy array")
        check(lib.ctxc_snapshot_storage_write_region(self._live(), part, _arrays.integer(layer, "layer", minimum=None),
                                                     _arrays.integer(slot, "slot", minimum=None), _in(data), data.nbytes))


# ---- operations -----------------------------------------------------------------------------------------------


def compact_rows(buffer: DeviceBuffer, *, row_bytes: int, rows: int, old_to_new: Any, new_batch: int,
                 offset: int = 0) -> None:
    """In-place dim-0 compaction of ``rows`` rows of ``row_bytes`` bytes at ``offset`` by a dense,
    order-preserving map (``len(old_to_new) <= rows`` entries, -1 = retired)."""
    mapping = _arrays.int32_array(old_to_new, "old_to_new")
    check(lib.ctxc_device_compact_rows(_handle(buffer, DeviceBuffer, "buffer"), _arrays.integer(offset, "offset", maximum=2**62),
                                       _arrays.integer(row_bytes, "row_bytes", maximum=2**62), _arrays.integer(rows, "rows"),
                                       _arrays.int32_pointer(mapping), mapping.size, _arrays.integer(new_batch, "new_batch", minimum=None)))


def rebase_execution_rows(buffer: DeviceBuffer, *, count: int, old_to_new: Any, new_batch: int,
                          rows_per_sequence: int, offset: int = 0) -> None:
    """Rebase ``count`` int32 execution-row indices at ``offset`` after a compaction by ``old_to_new``."""
    mapping = _arrays.int32_array(old_to_new, "old_to_new")
    check(lib.ctxc_device_rebase_execution_rows(_handle(buffer, DeviceBuffer, "buffer"), _arrays.integer(offset, "offset", maximum=2**62),
                                                _arrays.integer(count, "count", maximum=2**62), _arrays.int32_pointer(mapping),
                                                mapping.size, _arrays.integer(new_batch, "new_batch", minimum=None),
                                                _arrays.integer(rows_per_sequence, "rows_per_sequence", minimum=None)))


def _gather_request(layer: Any, batch: Any, seq_len: Any, out_dtype: Any, k_scale: Any, v_scale: Any) -> Any:
    request = ffi.new("ctxc_kv_gather_request_t *")
    lib.ctxc_kv_gather_request_init(request)
    request.layer = _arrays.integer(layer, "layer", minimum=None)
    request.batch = _arrays.integer(batch, "batch", minimum=None)
    request.seq_len = _arrays.integer(seq_len, "seq_len", minimum=None)
    request.out_dtype = out_dtype
    for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ArgumentTypeError(f"{name} must be a number, got {type(value).__name__}")
        setattr(request, name, float(value))
    return request


def gather_kv(pool: KvPagePool, table: KvPageTable, lengths: KvLengths | None = None, *, layer: int = 0, batch: int,
              seq_len: int, out_dtype: Any = None, k_scale: float = 1.0, v_scale: float = 1.0,
              out: tuple[DeviceBuffer, DeviceBuffer] | None = None,
              layout: Any = KvLayout.TOKEN_MAJOR) -> tuple[np.ndarray, np.ndarray]:
    """Dense K and V [batch, seq_len, kv_heads, head_dim] (``layout`` HEAD_MAJOR: [batch, kv_heads, seq_len,
    head_dim]) of one layer, read through the uploaded page table, as numpy copies. ``out_dtype`` defaults to the
    pool's; an fp8 pool may dequantise into fp16, bf16 or fp32. ``out``: reuse two device buffers (else two are
    allocated for the call). To gather into memory of your own without a copy, see :func:`gather_kv_into`."""
    pool_handle = _handle(pool, KvPagePool, "pool")
    table_handle = _handle(table, KvPageTable, "table")
    lengths_handle = _NULL if lengths is None else _handle(lengths, KvLengths, "lengths")
    out_dtype = pool.dtype if out_dtype is None else _arrays.enum_member(DType, out_dtype, "out_dtype")
    layout = _arrays.enum_member(KvLayout, layout, "layout")
    request = _gather_request(layer, batch, seq_len, out_dtype, k_scale, v_scale)
    nbytes = _size_out(lib.ctxc_kv_gather_output_bytes, pool_handle, request)

    def run(k: DeviceBuffer, v: DeviceBuffer) -> None:
        if k is v:
            raise InvalidArgumentError("k_out and v_out are the same buffer")
        if k.nbytes < nbytes or v.nbytes < nbytes:
            raise ContractError(f"gatherPagedKv: the outputs hold {min(k.nbytes, v.nbytes)} bytes, {nbytes} needed")
        if _family_backend(k) is not pool.backend or _family_backend(v) is not pool.backend:
            raise ContractError("the output buffers live on another backend than the pool")
        check(lib.ctxc_kv_gather_into(pool_handle, table_handle, lengths_handle, request, layout,
                                      ffi.cast("void *", k.view().data), ffi.cast("void *", v.view().data), nbytes))

    if out is not None:
        if not isinstance(out, tuple) or len(out) != 2:
            raise ArgumentTypeError(f"out must be a (k, v) tuple of DeviceBuffer, got {type(out).__name__}")
        k, v = out
        _handle(k, DeviceBuffer, "out[0]")
        _handle(v, DeviceBuffer, "out[1]")
        run(k, v)
    else:
        # Refuse what the table cannot hold before sizing two output buffers for it.
        if request.batch > table.max_batch:
            raise ContractError(f"gatherPagedKv: batch {request.batch} exceeds the table's {table.max_batch} slots")
        if request.seq_len > table.max_pages_per_seq * pool.page_size:
            raise ContractError(f"gatherPagedKv: seqLen {request.seq_len} needs more pages than the table's "
                                f"{table.max_pages_per_seq} per sequence")
        k, v = DeviceBuffer(pool.backend, nbytes), DeviceBuffer(pool.backend, nbytes)
        try:
            check(lib.ctxc_kv_gather(pool_handle, table_handle, lengths_handle, request, k._live(), v._live())) \
                if layout == KvLayout.TOKEN_MAJOR else run(k, v)
        except BaseException:
            k.close()  # a refused gather keeps no device memory
            v.close()
            raise
    heads, dim = pool.layers[request.layer]
    shape = (batch, seq_len, heads, dim) if layout == KvLayout.TOKEN_MAJOR else (batch, heads, seq_len, dim)
    return (k.read(out_dtype.numpy_dtype, nbytes // out_dtype.itemsize).reshape(shape),
            v.read(out_dtype.numpy_dtype, nbytes // out_dtype.itemsize).reshape(shape))


def _on_backend(array: _dense.Dense, backend: Backend, name: str) -> None:
    """The array's memory is where the backend's operations can reach it."""
    kind = backend.kind
    if kind == BackendKind.CUDA:
        if array.device[0] not in (_dense.DL_CUDA, _dense.DL_CUDA_MANAGED) or array.device[1] != backend.device:
            raise ArgumentTypeError(f"{name} lives on DLPack device {array.device}; the backend is CUDA device "
                                    f"{backend.device}")
    elif array.device[0] not in (_dense.DL_CPU, _dense.DL_CUDA_HOST):
        raise ArgumentTypeError(f"{name} lives on DLPack device {array.device}; the CPU backend needs host memory")


def _dense_kv(pool: KvPagePool, layer: int, arrays: tuple[Any, Any], layout: KvLayout, names: tuple[str, str],
              element: Any, writeable: bool) -> tuple[_dense.Dense, _dense.Dense, int, int]:
    """Both K and V as Dense arrays of one 4-D shape in ``layout`` for the layer: (k, v, batch, seq_len)."""
    k, v = (_dense.dense(a, n) for a, n in zip(arrays, names))
    heads, dim = pool.layers[_arrays.integer(layer, "layer", maximum=len(pool.layers) - 1)]
    for array, name in ((k, names[0]), (v, names[1])):
        _dense.require_element(array, element, name)
        _on_backend(array, pool.backend, name)
        if writeable and not array.writeable:
            raise ArgumentTypeError(f"{name} is read-only")
        if len(array.shape) != 4:
            raise InvalidArgumentError(f"{name} must be 4-D, got shape {array.shape}")
    token_major = layout == KvLayout.TOKEN_MAJOR
    batch, seq_len = (k.shape[0], k.shape[1]) if token_major else (k.shape[0], k.shape[2])
    shape = (batch, seq_len, heads, dim) if token_major else (batch, heads, seq_len, dim)
    what = (f"(batch, seq, kv_heads={heads}, head_dim={dim})" if token_major
            else f"(batch, kv_heads={heads}, seq, head_dim={dim})")
    if k.shape != shape:
        raise InvalidArgumentError(f"{names[0]} has shape {k.shape}, expected {what} ({layout.name.lower()} layout)")
    if v.shape != shape:
        raise InvalidArgumentError(f"{names[1]} has shape {v.shape}, {names[0]} {k.shape}: they must match")
    return k, v, batch, seq_len


def scatter_kv(pool: KvPagePool, table: KvPageTable, k: Any, v: Any, *, layer: int = 0, first_position: int = 0,
               layout: Any = KvLayout.TOKEN_MAJOR) -> None:
    """Write dense K and V of one layer into the pool's pages through the uploaded page table, in one launch: token t
    of sequence b goes to position ``first_position + t`` of table slot b. ``k`` and ``v``: the pool's dtype (bf16 also
    as uint16, fp8 as uint8 bit patterns), shape (batch, seq, kv_heads, head_dim), or (batch, kv_heads, seq, head_dim)
    with ``layout="head_major"``; numpy arrays or DLPack tensors (torch) in the backend's memory, read in place. A
    wrong shape or dtype is refused before anything is written, and so is a position whose page is not mapped."""
    pool_handle = _handle(pool, KvPagePool, "pool")
    table_handle = _handle(table, KvPageTable, "table")
    layout = _arrays.enum_member(KvLayout, layout, "layout")
    kd, vd, batch, seq_len = _dense_kv(pool, layer, (k, v), layout, ("k", "v"), pool.dtype, writeable=False)
    request = ffi.new("ctxc_kv_scatter_request_t *")
    lib.ctxc_kv_scatter_request_init(request)
    request.layer = _arrays.integer(layer, "layer", minimum=None)
    request.batch = _arrays.integer(batch, "batch")
    request.seq_len = _arrays.integer(seq_len, "seq_len")
    request.first_position = _arrays.integer(first_position, "first_position", minimum=None)
    request.layout = layout
    check(lib.ctxc_kv_scatter(pool_handle, table_handle, request, ffi.cast("const void *", kd.address),
                              ffi.cast("const void *", vd.address), kd.nbytes))


def gather_kv_into(pool: KvPagePool, table: KvPageTable, k_out: Any, v_out: Any, lengths: KvLengths | None = None, *,
                   layer: int = 0, layout: Any = KvLayout.TOKEN_MAJOR, k_scale: float = 1.0,
                   v_scale: float = 1.0) -> None:
    """Gather one layer's K and V through the uploaded page table into arrays of the caller's (numpy or DLPack, in
    the backend's memory, written in place, no copy): their shape gives batch and seq_len, their dtype the output
    dtype (the pool's, or fp16/bf16/fp32 from an fp8 pool)."""
    pool_handle = _handle(pool, KvPagePool, "pool")
    table_handle = _handle(table, KvPageTable, "table")
    lengths_handle = _NULL if lengths is None else _handle(lengths, KvLengths, "lengths")
    layout = _arrays.enum_member(KvLayout, layout, "layout")
    probe = _dense.dense(k_out, "k_out")
    element = probe.element
    if element in (_dense.UINT16, _dense.UINT8):
        element = DType.BF16 if element == _dense.UINT16 else DType.FP8_E4M3
    kd, vd, batch, seq_len = _dense_kv(pool, layer, (k_out, v_out), layout, ("k_out", "v_out"), element,
                                       writeable=True)
    if vd.element != kd.element:
        raise ArgumentTypeError(f"k_out holds {kd.element_name}, v_out {vd.element_name}")
    request = _gather_request(layer, batch, seq_len, DType(element), k_scale, v_scale)
    check(lib.ctxc_kv_gather_into(pool_handle, table_handle, lengths_handle, request, layout,
                                  ffi.cast("void *", kd.address), ffi.cast("void *", vd.address), kd.nbytes))


def _digest(out: Any) -> np.ndarray:
    return np.array([out.hi, out.lo], dtype=np.uint64)


def hash_chunked(buffer: DeviceBuffer, size: int | None = None, *, offset: int = 0,
                 num_chunks: int = DEFAULT_HASH_CHUNKS) -> np.ndarray:
    """Chunked 128-bit FNV-1a of [offset, offset + size) of a device buffer, as a (2,) uint64 array (hi, lo)."""
    handle = _handle(buffer, DeviceBuffer, "buffer")
    offset = _arrays.integer(offset, "offset", maximum=2**62)
    size = buffer.nbytes - offset if size is None else _arrays.integer(size, "size", maximum=2**62)
    out = ffi.new("ctxc_hash128_t *")
    check(lib.ctxc_device_hash_chunked(handle, offset, size, _arrays.integer(num_chunks, "num_chunks", maximum=2**32 - 1), out))
    return _digest(out)


def hash_chunked_host(data: Any, *, num_chunks: int = DEFAULT_HASH_CHUNKS) -> np.ndarray:
    """The same digest computed on the host, of a bytes-like object or a C-contiguous array."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise ArgumentTypeError("data must be C-contiguous (use np.ascontiguousarray)")
        view = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        view = np.frombuffer(data, dtype=np.uint8)
    else:
        raise ArgumentTypeError(f"data must be bytes-like or a numpy array, got {type(data).__name__}")
    out = ffi.new("ctxc_hash128_t *")
    check(lib.ctxc_hash_chunked_host(_in(view), view.nbytes, _arrays.integer(num_chunks, "num_chunks", maximum=2**32 - 1), out))
    return _digest(out)


__all__ = [
    "Backend",
    "BackendKind",
    "DEFAULT_HASH_CHUNKS",
    "DType",
    "DeviceBuffer",
    "DeviceView",
    "Element",
    "HostBuffer",
    "KvLengths",
    "KvPagePool",
    "KvLayout",
    "KvPageTable",
    "LaunchCounters",
    "PageTableMode",
    "ResidentState",
    "SnapshotLayout",
    "SnapshotStorage",
    "StatePart",
    "compact_rows",
    "gather_kv",
    "gather_kv_into",
    "hash_chunked",
    "hash_chunked_host",
    "rebase_execution_rows",
    "scatter_kv",
]
