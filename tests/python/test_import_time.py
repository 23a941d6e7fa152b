"""`import ctxcache` is fast (issue 24, item 9): the declarations come pre-parsed, never from cffi's parser at import.

Every `ctxcache` command pays the import. It took 1.7 to 2.4 s (cffi parsing the 1,600-line header, then each type
spelling, with pycparser); the build now writes the parsed declarations beside the library (_ffi_abi.py, cffi's
out-of-line ABI mode) and the import loads them. The deterministic proof is that no parser is imported at all; the
timed test measures the import in fresh interpreters, by CPU time (what the import costs, whatever else the machine
runs) against the issue's 0.3 s, and by wall-clock time against a baseline interpreter that imports only numpy and
cffi's backend, measured interleaved with it: a loaded machine stretches both alike (on 2 shared cores at a load of
14 the package took 0.57 s against the baseline's 0.38 s, with 0.16 s of CPU; main took 5 s, 13 times the baseline).

The fallback paths (no module beside the library, a module from another header, an unloadable one) parse the header
with one warning that says why, and fail with one line when there is no header either.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ctxcache
from ctxcache import _ffi

from conftest import UNDER_SANITIZER

RUNS = 10
CPU_BOUND_S = 0.3  # the target, for the whole `python -c "import ctxcache"`, on the machine it was set on
# What the package adds over its two dependencies' own import, in CPU seconds. The issue's 0.3 s was set where
# `import numpy, _cffi_backend` took about 0.1 s of CPU; on a slower machine numpy alone takes 0.28 s (measured
# 2026-12-03 on this project's 2-core runner, quiet), so the whole-command bound would measure the machine. The
# test holds the whole command to 0.3 s when the dependencies leave room, and always the package's own share to
# what the 0.3 s left it then.
OWN_CPU_BOUND_S = 0.2
WALL_OVER_BASELINE = 3.0  # at most this many times the wall-clock time of `python -c "import numpy, _cffi_backend"`


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test run's environment, with byte-code cached (in tmp_path) as an installed package's is."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path / "pycache"), **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def _timed(code: str, env: dict[str, str]) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds: user + system, its threads included) of one `python -c code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_this_run_uses_the_pre_parsed_declarations():
    """The test run itself takes the fast path (tools/test builds _ffi_abi.py beside the library it points at)."""
    import _cffi_backend
    import cffi

    assert _ffi.pre_parsed_module == str(Path(_ffi.library_path()).with_name("_ffi_abi.py"))
    assert type(ctxcache.ffi) is _cffi_backend.FFI and not isinstance(ctxcache.ffi, cffi.FFI)
    assert sys.modules["ctxcache._ffi_abi"].CDEF_SHA256 == _ffi.cdef_digest(
        _ffi.header_to_cdef(_ffi.read_header(Path(_ffi._header_path))))
    assert ctxcache.HEADER_ABI_VERSION == ctxcache.abi_version()


def test_import_parses_nothing_and_imports_numpy_and_cffi_only(tmp_path):
    """No parser at import (the deterministic proof), no warning, and no heavy dependency for any command."""
    probe = ("import sys; before = set(sys.modules); import ctxcache, ctxcache.cli; "
             "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names)))")
    done = _python(probe, _env(tmp_path))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.split("\n")[0] == "['_cffi_backend', 'ctxcache', 'numpy']"  # no pycparser, cffi, matplotlib, tqdm


@pytest.mark.skipif(UNDER_SANITIZER, reason="a timing under AddressSanitizer measures the sanitizer "
                                             "(tools/test runs it without)")
def test_import_takes_under_0_3_s(tmp_path):
    env = _env(tmp_path)
    baseline, package = "import numpy, _cffi_backend", "import ctxcache"
    _timed(package, env)  # the byte-code cache, written once
    base_runs, runs = [], []
    for _ in range(RUNS):  # interleaved: a change in the machine's load falls on both
        base_runs.append(_timed(baseline, env))
        runs.append(_timed(package, env))
    cpu = statistics.median(cpu for _, cpu in runs)
    wall = statistics.median(wall for wall, _ in runs)
    base_cpu = statistics.median(cpu for _, cpu in base_runs)
    base_wall = statistics.median(wall for wall, _ in base_runs)
    print(f"import ctxcache: median {wall:.3f} s wall, {cpu:.3f} s CPU; "
          f"numpy + _cffi_backend {base_wall:.3f} s wall, {base_cpu:.3f} s CPU")
    assert cpu - base_cpu < OWN_CPU_BOUND_S, (cpu, base_cpu, sorted(runs), sorted(base_runs))
    if base_cpu < CPU_BOUND_S - OWN_CPU_BOUND_S:  # the dependencies leave the package its share of the 0.3 s
        assert cpu < CPU_BOUND_S, (cpu, base_cpu, sorted(runs))
    assert wall < WALL_OVER_BASELINE * base_wall, (wall, base_wall, sorted(runs))


# ---- the fallbacks ----------------------------------------------------------------------------------------------


def _library_in(directory: Path) -> Path:
    """The library seen from ``directory`` (a symbolic link): _ffi looks for _ffi_abi.py beside it, there."""
    directory.mkdir(exist_ok=True)
    link = directory / "libctxcache.so"
    link.symlink_to(os.path.realpath(_ffi.library_path()))
    return link


FALLBACK_PROBE = ("import sys, warnings; warnings.simplefilter('always'); import ctxcache; "
                  "print(ctxcache._ffi.pre_parsed_module, type(ctxcache.ffi).__module__, 'pycparser' in sys.modules, "
                  "ctxcache.abi_version() == ctxcache.HEADER_ABI_VERSION)")


def _fallback(tmp_path: Path, library: Path) -> str:
    done = _python(FALLBACK_PROBE, _env(tmp_path, CTXCACHE_LIBRARY=str(library)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "cffi.api", "True", "True"]  # parsed, by cffi.FFI, and it works
    warnings = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warnings) == 1, done.stderr  # once, saying why
    return warnings[0]


def test_without_the_module_the_header_is_parsed_with_one_warning(tmp_path):
    library = _library_in(tmp_path / "bare")
    assert f"no pre-parsed declarations (_ffi_abi.py) beside {library}" in _fallback(tmp_path, library)


def test_a_module_from_another_header_is_never_used(tmp_path):
    library = _library_in(tmp_path / "stale")
    source = Path(_ffi.pre_parsed_module).read_text()
    digest = sys.modules["ctxcache._ffi_abi"].CDEF_SHA256
    assert source.count(digest) == 1
    (library.parent / "_ffi_abi.py").write_text(source.replace(digest, "0" * 64))
    assert "_ffi_abi.py was generated from another ctxcache.h than" in _fallback(tmp_path, library)


def test_an_unloadable_module_is_reported_and_the_header_parsed(tmp_path):
    library = _library_in(tmp_path / "broken")
    (library.parent / "_ffi_abi.py").write_text("raise RuntimeError('truncated')\n")
    warning = _fallback(tmp_path, library)
    assert f"cannot load {library.parent / '_ffi_abi.py'}: truncated" in warning


def test_the_module_is_trusted_without_a_header_and_missing_both_is_one_line(tmp_path):
    library = _library_in(tmp_path / "no-header")
    shutil.copy(_ffi.pre_parsed_module, library.parent / "_ffi_abi.py")
    env = _env(tmp_path, CTXCACHE_LIBRARY=str(library), CTXCACHE_HEADER=str(tmp_path / "absent.h"))
    done = _python("import ctxcache; print(ctxcache._ffi.pre_parsed_module)", env)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, str(library.parent / "_ffi_abi.py"), "")
    (library.parent / "_ffi_abi.py").unlink()
    done = _python("import ctxcache", env)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImportError: ctxcache: no pre-parsed declarations (_ffi_abi.py) beside {library}, and no header to parse "
        f"instead ({tmp_path / 'absent.h'}); rebuild or reinstall")


def test_the_generator_writes_what_the_build_writes(tmp_path):
    """_ffi_build.py, run as the CMake build runs it, writes the module this run loaded (byte for byte)."""
    header = Path(_ffi._header_path)
    done = subprocess.run([sys.executable, str(Path(_ffi.__file__).with_name("_ffi_build.py")), str(header),
                           str(tmp_path / "_ffi_abi.py")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "_ffi_abi.py").read_text() == Path(_ffi.pre_parsed_module).read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["_ffi_abi.py"]  # written through a temporary file, renamed
