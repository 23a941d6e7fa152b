"""The Python package's seams (issue 25 item 3): what `import ctxcache` pulls in, the applications without their
optional dependencies, and the shape of the package's import graph.

- `import ctxcache` imports neither matplotlib nor tqdm (a fresh interpreter; the applications import them lazily);
- `ctxcache sweep` without matplotlib (the `plot` extra; an import blocker stands in for its absence) writes its CSV
  and says in one line how to get the PNG;
- no module of python/ctxcache imports another in a cycle (module-level imports, read with ast), and no public module
  imports a private (underscored) name from another public module.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "ctxcache"

BLOCK_MATPLOTLIB = """
import sys
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'matplotlib':
            raise ModuleNotFoundError("No module named 'matplotlib'", name='matplotlib')
        return None
sys.meta_path.insert(0, _Blocker())
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=dict(os.environ))


def test_import_ctxcache_pulls_neither_matplotlib_nor_tqdm():
    done = _python("import ctxcache, sys; "
                   "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'tqdm')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_sweep_without_matplotlib_writes_the_csv_and_names_the_extra(tmp_path):
    code = BLOCK_MATPLOTLIB + (
        "from ctxcache.cli import main\n"
        f"code = main(['sweep', '--points', '8', '--out-dir', {str(tmp_path)!r}, '--no-progress'])\n"
        "assert 'matplotlib' not in sys.modules\n"
        "sys.exit(code)\n")
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ctxcache-sweep.csv").read_text().startswith("capacity_pages,")
    assert not (tmp_path / "ctxcache-sweep.png").exists()
    hints = [line for line in done.stdout.splitlines() if "pip install 'ctxcache[plot]'" in line]
    assert len(hints) == 1 and "ctxcache-sweep.csv" in hints[0], done.stdout


def test_sweep_json_without_matplotlib_reports_no_png_and_names_the_extra_on_stderr(tmp_path):
    code = BLOCK_MATPLOTLIB + (
        "from ctxcache.cli import main\n"
        f"sys.exit(main(['sweep', '--points', '8', '--out-dir', {str(tmp_path)!r}, '--no-progress', '--json']))\n")
    done = _python(code)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["png"] is None and report["csv"].endswith("ctxcache-sweep.csv")
    assert done.stderr.count("pip install 'ctxcache[plot]'") == 1


# ---- the import graph (read with ast, nothing imported) -----------------------------------------------------------

def _module_names() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name, for its __init__.py)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["ctxcache", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _module_names()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _module_level(body: list[ast.stmt]):
    """The import statements run when the module is imported: top level, and inside top-level if/try blocks (not
    those under `if TYPE_CHECKING:`, nor inside functions and classes)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            yield from _module_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _module_level(node.body + node.orelse + node.finalbody
                                     + [s for h in node.handlers for s in h.body])


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str | None]]:
    """(the package module imported, the name taken from it or None) for each name of one import statement."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names if a.name in MODULES]
    source = _resolve(module, node)
    if source not in MODULES:
        return []
    return [(f"{source}.{a.name}", None) if f"{source}.{a.name}" in MODULES else (source, a.name) for a in node.names]


def _graph() -> dict[str, set[str]]:
    """Module-level imports between the package's modules. A module's own ancestor packages are left out: Python
    runs them first whatever the module imports (each is an edge of the package's, not of the module's)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        edges = set()
        for node in _module_level(ast.parse(path.read_text()).body):
            for target, _ in _imported(module, node):
                if target != module and not module.startswith(target + "."):
                    edges.add(target)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_reader_sees_the_package_and_its_edges():
    graph = _graph()
    assert {"ctxcache", "ctxcache.runtime", "ctxcache.runtime.request", "ctxcache.cli", "ctxcache.bench"} <= set(graph)
    assert "ctxcache.runtime._marshal" in graph["ctxcache.runtime.request"]
    assert "ctxcache._ffi" in graph["ctxcache.device"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_the_package_imports_another_in_a_cycle():
    assert _cycles(_graph()) == []


def _public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def test_no_public_module_imports_a_private_name_from_another_public_module():
    """`from .device import _Handle` in a public module is a reach into device's privates: what modules share
    lives in a private module (ctxcache._resource, _arrays, runtime._marshal, ...). Imports inside functions
    count too."""
    reaches = []
    for module, path in MODULES.items():
        if not _public(module):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            for source, name in _imported(module, node):
                if (name is not None and name.startswith("_") and not name.startswith("__") and source != module
                        and _public(source)):
                    reaches.append(f"{module}: from {source} import {name}")
    assert reaches == []
