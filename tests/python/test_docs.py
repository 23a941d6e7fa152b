"""The documentation cannot rot: every ```python block of docs/RUNTIME.md, docs/ENGINES.md, docs/EVENTS.md and README.md
runs, and every ```c block of docs/RUNTIME.md is a verbatim excerpt of examples/c/runtime_example.c (which ctest
install.examples builds and runs against the installed package). Every relative link of README.md and docs/*.md
names a file of the repository, none of them points outside it (a clone has nothing beside it), and the README's
layout table lists every page of docs/.

A block runs when its info string is exactly ``python`` (```` ```python skip ```` marks an illustration that needs
something the tests do not have), each in a fresh namespace, on the CPU backend. A ```` ```python transformers ````
block needs the transformers extra: it runs when torch and transformers import, else it is skipped with the reason
(a failure under CTXCACHE_REQUIRE_TRANSFORMERS=1, which tools/test sets when it installed the extra). Every ``ctxc_*``
and ``CTXC_*`` name the runtime page mentions must exist in include/ctxcache.h (the umbrella and its parts).
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

import ctxcache
from ctxcache._ffi_build import read_header

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "docs" / "RUNTIME.md"
README = ROOT / "README.md"
EVENTS = ROOT / "docs" / "EVENTS.md"
ENGINES = ROOT / "docs" / "ENGINES.md"
C_EXAMPLE = ROOT / "examples" / "c" / "runtime_example.c"
HEADER = ROOT / "include" / "ctxcache.h"

_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)


def blocks(path: Path, language: str) -> list[tuple[int, str]]:
    """(line number, code) of every fenced block of `path` whose info string is exactly `language`."""
    text = path.read_text()
    out = []
    for match in _FENCE.finditer(text):
        if match.group("info").strip() == language:
            out.append((text.count("\n", 0, match.start()) + 1, match.group("body")))
    return out


PYTHON_BLOCKS = [(path, line, code) for path in (RUNTIME, README, ENGINES, EVENTS)
                 for line, code in blocks(path, "python")]
TRANSFORMERS_BLOCKS = [(README, line, code) for line, code in blocks(README, "python transformers")]


def test_the_documents_have_python_blocks():
    assert len(blocks(RUNTIME, "python")) >= 5
    assert len(blocks(README, "python")) >= 1
    assert len(blocks(ENGINES, "python")) >= 1


@pytest.mark.parametrize(("path", "line", "code"), PYTHON_BLOCKS,
                         ids=[f"{p.name}:{line}" for p, line, _ in PYTHON_BLOCKS])
def test_python_block_runs(path, line, code):
    namespace = {"__name__": f"doc_{path.stem.lower()}_{line}"}
    try:
        exec(compile(code, f"{path}:{line}", "exec"), namespace)
    finally:
        # A block's functions and its namespace form a cycle, so what it leaves open is destroyed later by the
        # collector in no particular order; close what it left open in a sound order now (coordinators first).
        leftovers = [v for v in namespace.values() if isinstance(v, ctxcache.ContextCacheCoordinator)]
        leftovers += [v for v in namespace.values() if isinstance(v, ctxcache.ManagedKVCacheRequest)]
        for value in leftovers[::-1]:
            value.close()
        namespace.clear()


@pytest.mark.parametrize(("path", "line", "code"), TRANSFORMERS_BLOCKS,
                         ids=[f"{p.name}:{line}" for p, line, _ in TRANSFORMERS_BLOCKS])
def test_python_transformers_block_runs(path, line, code):
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        message = f"the transformers extra is not installed (no {', '.join(missing)}); pip install .[transformers]"
        if os.environ.get("CTXCACHE_REQUIRE_TRANSFORMERS") == "1":
            pytest.fail(f"CTXCACHE_REQUIRE_TRANSFORMERS=1 but {message}", pytrace=False)
        pytest.skip(message)
    test_python_block_runs(path, line, code)


def test_the_readme_runs_a_real_model():
    assert len(TRANSFORMERS_BLOCKS) == 1


def test_c_blocks_are_excerpts_of_the_c_example():
    source = C_EXAMPLE.read_text()
    found = blocks(RUNTIME, "c")
    assert found, "docs/RUNTIME.md shows no C"
    for line, code in found:
        assert code in source, f"docs/RUNTIME.md:{line}: this C block is not an excerpt of {C_EXAMPLE.name}"


def test_every_c_name_the_runtime_page_mentions_exists():
    header = read_header(HEADER)
    declared = set(re.findall(r"\b(?:ctxc|CTXC)_\w+", header))
    mentioned = set(re.findall(r"\b(?:ctxc|CTXC)_\w+", RUNTIME.read_text()))
    # "ctxc_sim_*"-style family names end with an underscore.
    missing = sorted(name for name in mentioned if not name.endswith("_") and name not in declared)
    assert not missing, f"docs/RUNTIME.md names what include/ctxcache.h does not declare: {missing}"


DOCS = sorted((ROOT / "docs").glob("*.md"))
USER_DOCUMENTS = [README, *DOCS]
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("path", USER_DOCUMENTS, ids=[p.name for p in USER_DOCUMENTS])
def test_links_name_files_of_the_repository(path):
    text = path.read_text()
    assert "../shared" not in text, f"{path.name} points into ../shared, which a clone does not have"
    dead = []
    for match in _LINK.finditer(text):
        target = match.group("target").split("#", 1)[0]
        if not target or "://" in target or target.startswith("mailto:"):
            continue
        resolved = (path.parent / target).resolve()
        if ROOT not in resolved.parents and resolved != ROOT:
            dead.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            dead.append(target)
    assert not dead, f"{path.name}: links to what the repository does not have: {dead}"


def test_the_readme_layout_lists_every_document():
    layout = README.read_text().split("## Layout", 1)[1]
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in layout]
    assert not missing, f"README.md's layout table does not list {missing}"
