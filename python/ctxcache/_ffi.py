"""Loads the shared library (cffi ABI mode) and turns C statuses into typed exceptions.

The declarations are the public header's (_ffi_build.read_header: the umbrella ctxcache.h with its per-object parts
under ctxcache/c/ inlined; then header_to_cdef: preprocessor and ``extern "C"`` lines dropped), so they cannot drift
from the library's. They come pre-parsed (cffi's out-of-line ABI mode): the build writes ``_ffi_abi.py`` beside
``libctxcache.so`` (_ffi_build.py), and importing it costs milliseconds where parsing the 1,600 lines of the header
and its parts costs about 2 s. Still ABI mode: ``ffi.dlopen`` of the very library a C or C++ runtime links.

Where the library is: inside the package (importlib.resources, which also works for editable installs), or
``CTXCACHE_LIBRARY`` (and optionally ``CTXCACHE_HEADER``) pointing at a build tree, which is what ``tools/test`` does.
The header is the umbrella ``ctxcache.h``; its parts are read from ``ctxcache/c/`` beside it (the package's
``include/``, a source checkout's ``include/``, or wherever CTXCACHE_HEADER points).
The pre-parsed module is the one beside that library, used only when its declarations' digest equals the header's
(when the header is present; the library's ABI version is checked either way). Without such a module (missing,
unloadable, or made from another header) the header is parsed at import, as before, with one RuntimeWarning that
says why; without the header either, import fails with a one-line ImportError.

Threading: everything here runs once, at import (under the import lock); afterwards nothing is lazy (see
_resolve_everything), so no later call, finalizers included, does first-time work inside cffi.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import _cffi_backend

from ._ffi_build import MODULE_NAME, cdef_digest, header_abi_version, header_to_cdef, read_header
from .errors import STATUS_EXCEPTIONS, InternalError

_LIBRARY_NAME = "libctxcache.so"


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
        candidate = package / "include" / "ctxcache.h"  # its parts in include/ctxcache/c/ (CMakeLists.txt installs both)
        if candidate.is_file():
            header = str(candidate)
        else:  # a source checkout: python/ctxcache -> include/ctxcache.h
            header = str(Path(__file__).resolve().parents[2] / "include" / "ctxcache.h")
    return library, header


def _load_pre_parsed(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"{__package__}.{MODULE_NAME}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python module: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[spec.name] = module
    return module


def _declarations(library: str, header: str) -> tuple[Any, int, str | None]:
    """(ffi, the declarations' ABI version, the pre-parsed module's path or None when the header was parsed)."""
    try:
        header_text: str | None = read_header(Path(header))
    except OSError:  # the header, or one of the parts it includes, is missing
        header_text = None
    cdef = header_to_cdef(header_text) if header_text is not None else None
    module_path = Path(library).with_name(MODULE_NAME + ".py")  # not resolved: beside the path we were given
    if not module_path.is_file():
        reason = f"no pre-parsed declarations ({module_path.name}) beside {library}"
    else:
        try:
            module = _load_pre_parsed(module_path)
            digest, abi = str(module.CDEF_SHA256), int(module.ABI_VERSION)
        except Exception as error:  # a truncated file, or a _cffi_backend that rejects its format
            reason = f"cannot load {module_path}: {error}"
        else:
            if cdef is None or digest == cdef_digest(cdef):
                return module.ffi, abi, str(module_path)
            reason = f"{module_path} was generated from another ctxcache.h than {header}"
    if header_text is None or cdef is None:
        raise ImportError(f"ctxcache: {reason}, and no header to parse instead ({header}); rebuild or reinstall")
    warnings.warn(f"ctxcache: {reason}; parsing {header} at import instead (about 2 s; rebuilding the library "
                  "writes the module)", RuntimeWarning, stacklevel=2)
    import cffi  # only here: its parser (pycparser) is what the pre-parsed module spares every import

    parsed = cffi.FFI()
    parsed.cdef(cdef)
    return parsed, header_abi_version(header_text), None


_library_path, _header_path = _locate()
ffi: Any  # ABI mode: what the declarations name exists only at run time
ffi, HEADER_ABI_VERSION, pre_parsed_module = _declarations(_library_path, _header_path)
lib: Any = ffi.dlopen(_library_path)

if lib.ctxc_abi_version() != HEADER_ABI_VERSION:
    raise ImportError(
        f"ctxcache: library ABI {lib.ctxc_abi_version()} does not match header ABI {HEADER_ABI_VERSION} "
        f"({_library_path})"
    )


def _resolve_everything() -> None:
    """Look up every function and parse every type the package uses, now, at import.

    cffi does both lazily. When the header was parsed at import (a ``cffi.FFI``), the first time runs under
    ``ffi._lock``, which is not re-entrant: a garbage collection that runs inside that first-time work (it allocates)
    and finalizes an object whose cleanup needs the lock deadlocks the thread on itself. The pre-parsed FFI (a
    ``_cffi_backend.FFI``) does its first-time work in C with no such lock, but resolving everything here leaves
    nothing lazy for later calls in either case, finalizers included (which, besides, never call C: see
    _resource.py). Types are parsed per spelling, so each typedef is resolved in every spelling the package writes
    (``T *``, ``T **``, ``const T *``, ``T[]``); tests/python/test_finalizers.py checks that every spelling in the
    sources is covered.
    """
    missing = []
    for name in dir(lib):
        try:
            getattr(lib, name)
        except (AttributeError, _cffi_backend.FFI.error):  # cffi.FFI raises the first, the pre-parsed FFI the second
            missing.append(name)
    if missing:
        raise ImportError(f"ctxcache: {_library_path} lacks functions its header declares: {', '.join(missing)}")
    typedefs = sorted(ffi.list_types()[0])  # every typedef the declarations make (the header names them ctxc_*_t)
    for spelling in ("void *", "const void *", "uintptr_t", "const int32_t *[]"):  # raw pointers and row tables
        ffi.typeof(spelling)
    for name in typedefs + ["int32_t", "int64_t", "uint64_t", "size_t", "uint8_t", "char"]:
        ffi.typeof(name)
        for spelling in ("%s *", "%s **", "const %s *", "const %s **"):
            ffi.typeof(spelling % name)
        try:
            ffi.sizeof(name)  # completes a struct's layout; an opaque handle has none (and .fields would abort)
        except (ValueError, _cffi_backend.FFI.error):  # cffi.FFI raises the first, the pre-parsed FFI the second
            continue  # an opaque handle: an array of an incomplete type is an error
        ffi.typeof(name + "[]")
    ffi.typeof("void **")


_resolve_everything()


def library_path() -> str:
    """The shared library cffi loaded (device.py also loads it through ctypes, for DLPack capsule destructors)."""
    return _library_path


def last_error() -> str:
    return str(ffi.string(lib.ctxc_last_error()).decode("utf-8", "replace"))


# cffi's FFI.new and FFI.from_buffer look their type string up (a dictionary; in cffi.FFI a Python wrapper, under a
# try) and then call these functions of its C backend. The package's per-call paths call them directly, with types
# parsed once at import (``ffi.typeof``): a few hundred nanoseconds less per call into C. The same functions serve the
# pre-parsed FFI and cffi.FFI (whose ``_backend`` is this module).
new_cdata: Any = _cffi_backend.newp  # new_cdata(ctype_pointer_or_array[, init]): zeroed memory the cdata owns
from_buffer_cdata: Any = _cffi_backend.from_buffer  # from_buffer_cdata(array_ctype, buffer, require_writable)


def new_output(ctype: str) -> Any:
    """A zeroed output struct (``ctype`` names the struct type) with struct_size filled, as the library requires."""
    out = ffi.new(ctype + " *")
    out.struct_size = ffi.sizeof(ctype)
    return out


def check(status: int) -> None:
    """Raise the typed exception of a non-OK status, with the library's message."""
    if status:
        raise STATUS_EXCEPTIONS.get(status, InternalError)(last_error())
