"""A real Mooncake Store on loopback for the tests (tests/python/test_mooncake_store.py): a master and store nodes
started from the wheel's binaries inside a private network and PID namespace, so nothing binds a shared address
and every server dies with the scenario (``unshare --net --pid --fork --kill-child``).

The test side calls :func:`unavailable_reason` (a skip reason, or None) and :func:`run_scenario`, which runs
``mooncake_scenarios.py NAME`` in fresh namespaces and returns the JSON dict it prints last. The scenario side
(inside the namespaces) uses :func:`loopback_up`, :class:`Master` and :class:`StoreNode`. Every wait here is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MASTER_PORT = 50051
METADATA_PORT = 8080
NODE_PORT = 50052
URL = (f"mooncake://127.0.0.1:{MASTER_PORT}?metadata=http://127.0.0.1:{METADATA_PORT}/metadata"
       "&segment=64MiB&buffer=16MiB")
NAMESPACES = ["unshare", "--net", "--pid", "--fork", "--kill-child"]


def _mooncake_dir() -> Path | None:
    try:
        import mooncake
    except ImportError:
        return None
    return Path(mooncake.__file__).resolve().parent


def _namespaces() -> list[str]:
    """unshare's arguments: as root, the namespaces alone; else with a user namespace mapping us to root."""
    return NAMESPACES if os.geteuid() == 0 else [*NAMESPACES[:1], "--map-root-user", *NAMESPACES[1:]]


def unavailable_reason() -> str | None:
    """Why a real Mooncake Store cannot run here (None when it can)."""
    if os.environ.get("CTXCACHE_NO_MOONCAKE") == "1":
        return ("CTXCACHE_NO_MOONCAKE=1 (tools/test --sanitize sets it: Mooncake's client and servers are not built "
                "with the sanitizers)")
    directory = _mooncake_dir()
    if directory is None:
        return "the mooncake extra is not installed (pip install 'ctxcache[mooncake]')"
    try:
        import mooncake.store  # noqa: F401  (needs Debian's libibverbs1 librdmacm1)
    except ImportError as e:
        return f"mooncake.store does not load ({e}; Debian's libibverbs1 librdmacm1 are needed)"
    if not (directory / "mooncake_master").exists():
        return "the mooncake wheel has no mooncake_master"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare and ip (util-linux, iproute2) are needed to run Mooncake on a private loopback"
    probe = subprocess.run([*_namespaces(), "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return f"network namespaces are not available here ({probe.stderr.decode(errors='replace').strip()})"
    return None


def run_scenario(name: str, *args: str, timeout: float = 240) -> dict[str, Any]:
    """Runs ``mooncake_scenarios.py NAME ARGS`` in fresh namespaces; its last stdout line as JSON. AssertionError
    (with its output) when it fails or prints nothing."""
    env = dict(os.environ, MC_TCP_BIND_ADDRESS="127.0.0.1", PYTHONUNBUFFERED="1",
               GLOG_minloglevel="2")  # Mooncake's own logging: errors only
    proc = subprocess.run([*_namespaces(), sys.executable, str(HERE / "mooncake_scenarios.py"), name, *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, (f"scenario {name} failed (exit {proc.returncode}):\n"
                                            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def settle(engine: Any, timeout_s: float = 10.0) -> None:
    """Until every batch ``engine`` sent to its store has come back and been applied (bounded by ``timeout_s``)."""
    end = time.monotonic() + timeout_s
    while engine.poll_store()[1] > 0 and time.monotonic() < end:
        time.sleep(0.01)


# ---- inside the namespaces ---------------------------------------------------------------------------------------

def loopback_up() -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def wait_port(port: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class _Server:
    def __init__(self, argv: list[str], port: int) -> None:
        self.argv = argv
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.proc is None
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_port(self.port, 20):
            raise RuntimeError(f"{self.argv[0]} did not listen on {self.port} within 20 s")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


class Master(_Server):
    def __init__(self) -> None:
        d = _mooncake_dir()
        assert d is not None
        super().__init__([str(d / "mooncake_master"), "--rpc_address=127.0.0.1", f"--rpc_port={MASTER_PORT}",
                          "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
                          f"--http_metadata_server_port={METADATA_PORT}", "--metrics_port=9003"], MASTER_PORT)


class StoreNode(_Server):
    """A node that only contributes memory (the wheel's mooncake_client): objects put by clients without a segment
    of their own live here, and outlive those clients."""

    def __init__(self, segment: str = "256MB") -> None:
        d = _mooncake_dir()
        assert d is not None
        super().__init__([str(d / "mooncake_client"), f"--master_server_address=127.0.0.1:{MASTER_PORT}",
                          f"--metadata_server=http://127.0.0.1:{METADATA_PORT}/metadata",
                          f"--global_segment_size={segment}", "--local_buffer_size=16MB", "--host=127.0.0.1",
                          f"--port={NODE_PORT}", "--protocol=tcp"], NODE_PORT)
