"""tools/check_layers (run by tools/test --lint): the include-direction check passes on the tree and fails, naming
the file, the line and the rule, when a layer includes a header above it or another layer's private header."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check_layers"


def _copy_library(tmp_path: Path) -> Path:
    for folder in ("include", "cpp", "cuda"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=60)


def _prepend(path: Path, line: str) -> None:
    path.write_text(line + "\n" + path.read_text())


def test_the_tree_follows_the_layer_table():
    proc = _run(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every include follows the layer table" in proc.stdout


def test_a_core_file_including_a_runtime_header_fails(tmp_path):
    root = _copy_library(tmp_path)
    _prepend(root / "cpp" / "core" / "types.cpp", '#include "ctxcache/runtime/runtime_types.h"')
    proc = _run(root)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "cpp/core/types.cpp:1: the core layer includes include/ctxcache/runtime/runtime_types.h, a runtime header "
        "(core may use core)"]


def test_a_core_header_including_a_device_header_fails(tmp_path):
    root = _copy_library(tmp_path)
    _prepend(root / "include" / "ctxcache" / "types.h", '#include "ctxcache/device/kv_lengths.h"')
    proc = _run(root)
    assert proc.returncode == 1
    assert "include/ctxcache/types.h:1: the core layer includes include/ctxcache/device/kv_lengths.h" in proc.stdout


def test_another_layers_private_header_fails_even_where_the_layer_may_be_used(tmp_path):
    root = _copy_library(tmp_path)
    # runtime may use core, but lease_state.h is core's private header.
    _prepend(root / "cpp" / "runtime" / "context_cache_request.cpp", '#include "../core/lease_state.h"')
    proc = _run(root)
    assert proc.returncode == 1
    assert ("cpp/runtime/context_cache_request.cpp:1: the runtime layer includes cpp/core/lease_state.h, private to "
            "core") in proc.stdout


def test_a_misspelt_header_of_ours_fails(tmp_path):
    root = _copy_library(tmp_path)
    _prepend(root / "cpp" / "events" / "kv_event_encoder.cpp", '#include "ctxcache/events/no_such_header.h"')
    proc = _run(root)
    assert proc.returncode == 1
    assert 'kv_event_encoder.cpp:1: #include "ctxcache/events/no_such_header.h" names no header of ours' in proc.stdout


def test_a_reach_into_another_layers_private_folder_by_its_cpp_path_fails(tmp_path):
    # How the C ABI once included the device layer's CUDA probe, when cpp/ was on every layer's include path.
    root = _copy_library(tmp_path)
    shutil.copy(root / "include" / "ctxcache" / "device" / "cuda_probe.h", root / "cpp" / "device" / "probe.h")
    _prepend(root / "cpp" / "capi" / "library_api.cpp", '#include "device/probe.h"')
    proc = _run(root)
    assert proc.returncode == 1
    assert "cpp/capi/library_api.cpp:1: the capi layer includes cpp/device/probe.h, private to device" in proc.stdout


def test_a_core_header_including_a_part_of_the_c_header_fails(tmp_path):
    # include/ctxcache/c/ is the C ABI's layer, the top one: nothing below it may include it.
    root = _copy_library(tmp_path)
    _prepend(root / "include" / "ctxcache" / "types.h", '#include "ctxcache/c/hash.h"')
    proc = _run(root)
    assert proc.returncode == 1
    assert ("include/ctxcache/types.h:1: the core layer includes include/ctxcache/c/hash.h, a capi header "
            "(core may use core)") in proc.stdout


def test_a_part_of_the_c_header_including_a_cpp_header_fails(tmp_path):
    root = _copy_library(tmp_path)
    _prepend(root / "include" / "ctxcache" / "c" / "hash.h", '#include "ctxcache/block_hash.h"')
    proc = _run(root)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "include/ctxcache/c/hash.h:1: the C header includes include/ctxcache/block_hash.h, which is not one of its "
        "parts (include/ctxcache/c/)"]
