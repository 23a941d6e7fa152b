"""The C header as cffi declarations, and those declarations pre-parsed into a module (cffi out-of-line ABI mode).

    python python/ctxcache/_ffi_build.py HEADER OUTPUT     the CMake build runs this (it needs cffi, with pycparser)

writes OUTPUT (``_ffi_abi.py``, beside ``libctxcache.so`` in a build tree and in the installed package): a pure-Python
module whose ``ffi`` (a ``_cffi_backend.FFI``) holds every declaration of HEADER already parsed, so ``import ctxcache``
never runs cffi's parser (about 2 s saved). The module also holds ``CDEF_SHA256``, the digest of the declarations it
was made from, and ``ABI_VERSION``, the header's ``CTXC_ABI_VERSION``; _ffi.py compares the digest with the header's
when the header is present, so a module left behind by an older header is never used silently.

HEADER is the umbrella ``ctxcache.h``, which includes one part per object (``#include "ctxcache/c/<part>.h"``):
``read_header`` inlines those parts, recursively and each once, so the declarations are the whole API in the order a
compiler sees it.

Invariants: this module imports the standard library only (cffi only inside ``write_module``), so _ffi.py may import
it cheaply and the build may run it as a script; ``read_header`` then ``header_to_cdef`` is the one translation of
the header into declarations, used by both the generated module and _ffi.py's fallback. OUTPUT is replaced
atomically.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

MODULE_NAME = "_ffi_abi"  # the generated module's file is MODULE_NAME + ".py", beside the library
_PART_INCLUDE = re.compile(r'^\s*#\s*include\s+"(ctxcache/c/[^"]+)"\s*$')


def read_header(header: Path) -> str:
    """The umbrella header's text with every quoted ``#include "ctxcache/c/..."`` replaced by that part's text.

    Recursive (a part includes the parts it needs) and each part once, where it is first included, as its include
    guard makes a compiler read it. A part is looked up beside the including file, then under the umbrella's own
    directory (the include root, as ``-I``). A missing part raises FileNotFoundError (an OSError, like a missing
    header). Plain string paths (no Path.resolve): this runs at every ``import ctxcache``.
    """
    root = os.path.dirname(os.path.abspath(header))
    seen: set[str] = set()

    def inline(path: str) -> list[str]:
        seen.add(path)
        with open(path) as file:
            lines = file.read().splitlines()
        out = []
        for line in lines:
            match = _PART_INCLUDE.match(line) if "#" in line and "include" in line else None
            if match is None:
                out.append(line)
                continue
            name = match.group(1)
            candidates = (os.path.join(os.path.dirname(path), name), os.path.join(root, name))
            part = next((os.path.normpath(c) for c in candidates if os.path.isfile(c)), None)
            if part is None:
                raise FileNotFoundError(f"{path}: #include \"{name}\": no such header under {root}")
            if part not in seen:  # one spelling per file: normalized, absolute (under the absolute root)
                out.extend(inline(part))
        return out

    return "\n".join(inline(os.path.join(root, os.path.basename(header)))) + "\n"


def header_to_cdef(text: str) -> str:
    """The header without preprocessor lines, its ``extern "C"`` guard and the export macro: what cffi parses."""
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


def cdef_digest(cdef: str) -> str:
    """What identifies a set of declarations: the generated module and the header it is checked against agree on it."""
    return hashlib.sha256(cdef.encode("utf-8")).hexdigest()


def header_abi_version(text: str) -> int:
    match = re.search(r"#define CTXC_ABI_VERSION (\d+)", text)
    if match is None:
        raise ValueError("the header defines no CTXC_ABI_VERSION")
    return int(match.group(1))


def write_module(header: Path, output: Path) -> None:
    import cffi  # only here: the build needs it, `import ctxcache` does not

    text = read_header(header)
    cdef = header_to_cdef(text)
    builder = cffi.FFI()
    builder.cdef(cdef)
    builder.set_source("ctxcache." + MODULE_NAME, None)  # None: ABI mode, no C compiled (the .so is dlopen()ed)
    partial = output.with_name(f"{output.name}.tmp{os.getpid()}")
    builder.emit_python_code(str(partial))
    with open(partial, "a") as module:
        module.write(f"\n# Written by ctxcache/_ffi_build.py from {header.name}; checked by ctxcache/_ffi.py at import.\n"
                     f"CDEF_SHA256 = {cdef_digest(cdef)!r}\nABI_VERSION = {header_abi_version(text)}\n")
    os.replace(partial, output)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: _ffi_build.py HEADER OUTPUT", file=sys.stderr)
        return 2
    write_module(Path(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
