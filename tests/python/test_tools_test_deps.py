"""tools/test's dependency check: the shared libraries the mooncake extra links are found by the dynamic loader's
cache however large that cache is, and reported missing when the cache lacks them.

A CI run once failed with "still missing after apt-get install: librdmacm1" right after apt-get said the package
was installed: `ldconfig -p | grep -q` under pipefail fails whenever grep stops at an early match before ldconfig
has written a cache larger than a pipe holds, and ldconfig dies of SIGPIPE."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS_TEST = ROOT / "tools" / "test"
MOONCAKE_LIBRARIES = {"libibverbs1": "libibverbs.so.1", "librdmacm1": "librdmacm.so.1"}


def _fake_ldconfig(folder: Path, sonames: list[str], filler_lines: int) -> None:
    """An `ldconfig` whose -p prints the given sonames first, then filler_lines more entries."""
    lines = [f"{filler_lines + len(sonames)} libs found in cache `/etc/ld.so.cache'"]
    lines += [f"\t{name} (libc6,x86-64) => /lib/x86_64-linux-gnu/{name}" for name in sonames]
    lines += [f"\tlibfiller{i}.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libfiller{i}.so.1"
              for i in range(filler_lines)]
    cache = folder / "cache.txt"
    cache.write_text("\n".join(lines) + "\n")
    script = folder / "ldconfig"
    script.write_text(f"#!/bin/sh\nexec cat '{cache}'\n")
    script.chmod(0o755)


def _missing(folder: Path) -> set[str]:
    env = dict(os.environ, PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")
    env.pop("CTXCACHE_NO_MOONCAKE", None)
    env.pop("CTXCACHE_DEPS_PRETEND_MISSING", None)
    env.pop("LD_PRELOAD", None)  # a shell script under test, not our library: no sanitizer runtimes in it
    proc = subprocess.run(["bash", str(TOOLS_TEST), "--check-deps"], capture_output=True, text=True, env=env,
                          timeout=120)
    if proc.returncode == 0:
        assert "every dependency is present" in proc.stdout, proc.stdout + proc.stderr
        return set()
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tools/test: missing: ")]
    assert proc.returncode == 1 and len(lines) == 1, proc.stdout + proc.stderr
    return set(lines[0].removeprefix("tools/test: missing: ").split())


def test_libraries_early_in_a_cache_larger_than_a_pipe_are_found(tmp_path):
    # 20,000 entries are about 1.5 MiB: far past a pipe's 64 KiB, with the libraries in the first lines.
    _fake_ldconfig(tmp_path, list(MOONCAKE_LIBRARIES.values()), filler_lines=20_000)
    for _ in range(5):
        assert not _missing(tmp_path) & MOONCAKE_LIBRARIES.keys()


def test_libraries_absent_from_the_cache_are_reported_missing(tmp_path):
    _fake_ldconfig(tmp_path, [], filler_lines=20_000)
    assert _missing(tmp_path) >= MOONCAKE_LIBRARIES.keys()


def test_one_library_present_the_other_missing(tmp_path):
    _fake_ldconfig(tmp_path, ["librdmacm.so.1"], filler_lines=100)
    assert _missing(tmp_path) & MOONCAKE_LIBRARIES.keys() == {"libibverbs1"}
