"""The Python package's seams (issue 25 item 3): what `import ctxcache` pulls in, the applications without their
optional dependencies, and the shape of the package's import graph.

- `import ctxcache` imports neither matplotlib nor tqdm (a fresh interpreter; the applications import them lazily);
- `ctxcache sweep` without matplotlib (the `plot` extra; an import blocker stands in for its absence) writes its CSV
  and says in one line how to get the PNG;
- no module of python/ctxcache imports another in a cycle (module-level imports, read with ast), and no public module
  imports a private (underscored) name from another public module.
"""

from __future__ import annotations

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
