"""Loads the shared library (cffi ABI mode) and turns C statuses into typed exceptions.

The cdef is the installed public header itself (preprocessor and ``extern "C"`` lines dropped), so the
declarations cannot drift from the library's. The library and header ship inside the package (found with
importlib.resources, which also works for editable installs); ``CTXCACHE_LIBRARY`` (and optionally
``CTXCACHE_HEADER``) point at a build tree instead, which is what ``tools/test`` does.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import cffi

from .errors import STATUS_EXCEPTIONS, InternalError

_LIBRARY_NAME = "libctxcache.so"


def _header_to_cdef(text: str) -> str:
    lines = []
    skip_cplusplus = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#ifdef __cplusplus"):
            skip_cplusplus = True
            continue
        if skip_cplusplus:
            if stripped.startswith("#endif"):
                skip_cplusplus = False
            continue
        if stripped.startswith("#"):
            continue
        lines.append(line.replace("CTXC_API ", ""))
    return "\n".join(lines)


def _locate() -> tuple[str, str]:
    library = os.environ.get("CTXCACHE_LIBRARY")
    header = os.environ.get("CTXCACHE_HEADER")
    package = resources.files(__package__)
    if not library:
        candidate = package / _LIBRARY_NAME
        if not candidate.is_file():
            raise ImportError(
                f"ctxcache: {_LIBRARY_NAME} is not installed inside the package; run `pip install .` "
                "or set CTXCACHE_LIBRARY to a built library"
            )
        with resources.as_file(candidate) as path:
            library = str(path)
    if not header:
        candidate = package / "include" / "ctxcache.h"
        if candidate.is_file():
            header = str(candidate)
        else:  # a source checkout: python/ctxcache -> include/ctxcache.h
            header = str(Path(__file__).resolve().parents[2] / "include" / "ctxcache.h")
    return library, header


ffi: Any = cffi.FFI()  # ABI mode: what the cdef declares exists only at run time
_library_path, _header_path = _locate()
_header_text = Path(_header_path).read_text()
ffi.cdef(_header_to_cdef(_header_text))
lib: Any = ffi.dlopen(_library_path)

HEADER_ABI_VERSION = int(re.search(r"#define CTXC_ABI_VERSION (\d+)", _header_text).group(1))  # type: ignore[union-attr]
if lib.ctxc_abi_version() != HEADER_ABI_VERSION:
    raise ImportError(
        f"ctxcache: library ABI {lib.ctxc_abi_version()} does not match header ABI {HEADER_ABI_VERSION} "
        f"({_library_path})"
    )


def _resolve_everything() -> None:
    """Look up every function and parse every type the package uses, now, at import.

    cffi (ABI mode) does both lazily, the first time under ``ffi._lock``, which is not re-entrant: a garbage
    collection that runs inside that first-time work (it allocates) and finalizes an object whose cleanup needs
    the lock deadlocks the thread on itself. Resolving everything here leaves nothing lazy for later calls,
    finalizers included (which, besides, never call C: see _resource.py). Types are parsed per spelling, so each
    typedef is resolved in every spelling the package writes (``T *``, ``T **``, ``const T *``, ``T[]``);
    tests/python/test_finalizers.py checks that every spelling in the sources is covered.
    """
    missing = []
    for name in dir(lib):
        try:
            getattr(lib, name)
        except AttributeError:
            missing.append(name)
    if missing:
        raise ImportError(f"ctxcache: {_library_path} lacks functions its header declares: {', '.join(missing)}")
    typedefs = sorted(set(re.findall(r"\b(ctxc_\w+_t)\b", _header_text)))  # the header names every type ctxc_*_t
    for spelling in ("void *", "const void *", "uintptr_t", "const int32_t *[]"):  # raw pointers and row tables
        ffi.typeof(spelling)
    for name in typedefs + ["int32_t", "int64_t", "uint64_t", "size_t", "uint8_t", "char"]:
        ffi.typeof(name)
        for spelling in ("%s *", "%s **", "const %s *", "const %s **"):
            ffi.typeof(spelling % name)
        if ffi.typeof(name).kind not in ("struct", "union") or ffi.typeof(name).fields is not None:
            ffi.typeof(name + "[]")  # not for opaque handles: an array of an incomplete type is an error
    ffi.typeof("void **")


_resolve_everything()


def library_path() -> str:
    """The shared library cffi loaded (device.py also loads it through ctypes, for DLPack capsule destructors)."""
    return _library_path


def last_error() -> str:
    return str(ffi.string(lib.ctxc_last_error()).decode("utf-8", "replace"))


# cffi's FFI.new and FFI.from_buffer are Python wrappers that look their type string up (a dictionary,
# under a try) and then call these functions of its C backend. The package's per-call paths call them directly,
# with types parsed once at import (``ffi.typeof``): a few hundred nanoseconds less per call into C.
new_cdata: Any = ffi._backend.newp  # new_cdata(ctype_pointer_or_array[, init]): zeroed memory the cdata owns
from_buffer_cdata: Any = ffi._backend.from_buffer  # from_buffer_cdata(array_ctype, buffer, require_writable)


def new_output(ctype: str) -> Any:
    """A zeroed output struct (``ctype`` names the struct type) with struct_size filled, as the library requires."""
    out = ffi.new(ctype + " *")
    out.struct_size = ffi.sizeof(ctype)
    return out


def check(status: int) -> None:
    """Raise the typed exception of a non-OK status, with the library's message."""
    if status:
        raise STATUS_EXCEPTIONS.get(status, InternalError)(last_error())
