"""The C header is one umbrella over one part per object (issue 25, item 2): include/ctxcache.h includes every
include/ctxcache/c/<part>.h and declares nothing itself; each part compiles alone (C99 -pedantic and C++17), opens
with its contract and has include and ``extern "C"`` guards; every function the library exports is declared in
exactly one part, and a part's functions are defined in its own cpp/capi/<part>_api.cpp, which includes that part
first; the cffi declarations (_ffi_build.read_header) are every part, each once."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ctxcache import _ffi
from ctxcache._ffi_build import header_to_cdef, read_header

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "include"
UMBRELLA = INCLUDE / "ctxcache.h"
PARTS_DIR = INCLUDE / "ctxcache" / "c"
CAPI = ROOT / "cpp" / "capi"
PARTS = sorted(p.stem for p in PARTS_DIR.glob("*.h"))
PART_INCLUDE = re.compile(r'^\s*#\s*include\s+"ctxcache/c/(\w+)\.h"', re.M)
DECLARED = re.compile(r"\bCTXC_API\b[^;{]*?\b(ctxc_\w+)\s*\(")


def _code(text: str) -> str:
    """The text without its comments (a comment may name a function it does not declare)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)


def _declared(part: str) -> list[str]:
    return DECLARED.findall(_code((PARTS_DIR / f"{part}.h").read_text()))


def test_the_parts_are_the_ones_the_issues_name():
    # Issue 25's twelve, metrics (issue 30), retention (issue 29), the host tier (issue 26) and the store (27).
    assert PARTS == sorted(["library", "hash", "manager", "lease", "kv_events", "device", "dense_kv", "dlpack",
                            "runtime", "swa", "sim", "debug", "metrics", "retention", "host_tier", "store"])


def test_the_umbrella_includes_every_part_and_declares_nothing():
    text = UMBRELLA.read_text()
    assert sorted(PART_INCLUDE.findall(text)) == PARTS
    assert DECLARED.findall(_code(text)) == []
    assert "typedef" not in _code(text)
    assert len(text.splitlines()) < 300


@pytest.mark.parametrize("part", PARTS)
def test_each_part_opens_with_its_contract_and_has_its_guards(part):
    text = (PARTS_DIR / f"{part}.h").read_text()
    guard = f"CTXCACHE_C_{part.upper()}_H"
    assert text.startswith("/* ctxcache C ABI: "), "the part's first line states its contract"
    assert f"#ifndef {guard}\n#define {guard}\n" in text
    assert text.rstrip().endswith(f"#endif /* {guard} */")
    assert '#ifdef __cplusplus\nextern "C" {\n#endif' in text and "#ifdef __cplusplus\n}\n#endif" in text
    if part != "library":  # every other part reaches library.h (CTXC_API, ctxc_status_t) through what it includes
        assert PART_INCLUDE.findall(text), f"{part}.h includes no other part"


def _compile(compiler: list[str], part: str, tmp_path: Path) -> None:
    source = tmp_path / "part.c"
    source.write_text(f"#include <ctxcache/c/{part}.h>\n")
    done = subprocess.run([*compiler, "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", str(source)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("part", PARTS)
def test_each_part_compiles_alone_as_c99(part, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc)")
    _compile([cc, "-std=c99", "-pedantic"], part, tmp_path)


@pytest.mark.parametrize("part", PARTS)
def test_each_part_compiles_alone_as_cpp17(part, tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (c++)")
    _compile([cxx, "-x", "c++", "-std=c++17", "-pedantic"], part, tmp_path)


def _exported() -> set[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm to list the library's exported symbols")
    done = subprocess.run([nm, "-D", "--defined-only", _ffi.library_path()], capture_output=True, text=True,
                          timeout=60, check=True)
    return {line.split()[-1] for line in done.stdout.splitlines() if line.split()[-1].startswith("ctxc_")}


def test_every_exported_function_is_declared_in_exactly_one_part():
    owners: dict[str, list[str]] = {}
    for part in PARTS:
        for name in _declared(part):
            owners.setdefault(name, []).append(part)
    twice = {name: parts for name, parts in owners.items() if len(parts) > 1}
    assert not twice, f"declared in more than one part: {twice}"
    exported = _exported()
    assert len(exported) > 200
    assert sorted(exported - owners.keys()) == [], "exported by the library but declared in no part"
    assert sorted(owners.keys() - exported) == [], "declared in a part but not exported by the library"


DEFINED = re.compile(r"^CTXC_API\b[^;{]*?\b(ctxc_\w+)\s*\(", re.M)


@pytest.mark.parametrize("part", PARTS)
def test_a_parts_functions_are_defined_in_its_own_api_source_which_includes_it_first(part):
    source = CAPI / f"{part}_api.cpp"
    assert source.is_file(), f"include/ctxcache/c/{part}.h has no cpp/capi/{part}_api.cpp"
    text = source.read_text()
    first = re.search(r'^#include\s+[<"]([^">]+)[">]', text, re.M)
    assert first is not None and first.group(1) == f"ctxcache/c/{part}.h", "the part's own header comes first"
    assert sorted(_declared(part)) == sorted(DEFINED.findall(_code(text)))


def test_every_api_source_has_its_part():
    sources = sorted(p.name.removesuffix("_api.cpp") for p in CAPI.glob("*_api.cpp"))
    assert sources == PARTS


def test_the_declarations_are_every_part_once():
    text = read_header(UMBRELLA)
    for part in PARTS:
        guard = f"#define CTXCACHE_C_{part.upper()}_H"
        assert text.count(guard) == 1, part
    assert PART_INCLUDE.findall(text) == []  # every part inlined
    cdef = header_to_cdef(text)
    assert "#" not in _code(cdef)
    assert sorted(DECLARED.findall(_code(text))) == sorted(n for p in PARTS for n in _declared(p))


def test_read_header_inlines_recursively_once_and_names_a_missing_part(tmp_path):
    parts = tmp_path / "ctxcache" / "c"
    parts.mkdir(parents=True)
    (parts / "a.h").write_text("int a;\n")
    (parts / "b.h").write_text('#include "ctxcache/c/a.h"\nint b;\n')
    umbrella = tmp_path / "ctxcache.h"
    umbrella.write_text('#include "ctxcache/c/b.h"\n#include "ctxcache/c/a.h"\n#include <stdint.h>\nint u;\n')
    assert read_header(umbrella).split() == ["int", "a;", "int", "b;", "#include", "<stdint.h>", "int", "u;"]
    (parts / "a.h").unlink()
    with pytest.raises(FileNotFoundError, match=r'#include "ctxcache/c/a.h": no such header'):
        read_header(umbrella)
