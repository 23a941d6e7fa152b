"""Ctrl-C while the ``ctxcache`` command starts: one line on stderr and exit status 130, never a traceback.

Imported first by ``ctxcache/__init__.py`` (the import is the installation). Loading the package takes a moment (the cffi header parse, numpy), and a KeyboardInterrupt raised there would print
a long traceback from inside cffi. Only when this process is the ``ctxcache`` command (the console script, or
``python -m ctxcache.cli``) does importing the package install a SIGINT handler that writes one line and ends the
process with 130 at once (nothing has been measured yet, so there is nothing to report). :func:`ctxcache.cli.main`
puts Python's own handler back before it runs a command, whose own interrupt handling then applies, and ignores
SIGINT once the command has returned (its report is printed and its status chosen). A library import (any other
program) leaves signals alone.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def is_ctxcache_command() -> bool:
    """Whether this process is the ``ctxcache`` command."""
    if sys.argv and os.path.basename(sys.argv[0]) == "ctxcache":
        return True
    orig = list(getattr(sys, "orig_argv", []))
    if "-m" in orig:
        k = orig.index("-m")
        return k + 1 < len(orig) and orig[k + 1] in ("ctxcache.cli", "ctxcache")
    return False


def _interrupted_while_loading(signum: int, frame: Any) -> None:
    if "--json" in sys.argv[1:]:  # the command's one JSON object, as its own interrupted report would be
        command = sys.argv[1] if len(sys.argv) > 1 else ""
        os.write(1, (json.dumps({"command": command, "interrupted": True, "interrupted_phase": "starting",
                                 "requests": 0}) + "\n").encode())
    os.write(2, b"ctxcache: interrupted while starting (nothing was run)\n")
    os._exit(130)


def guard_sigint_while_loading() -> None:
    if not is_ctxcache_command():
        return
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupted_while_loading)


def release_sigint() -> None:
    """Python's own SIGINT handler again, where guard_sigint_while_loading had installed ours."""
    import signal
    import threading

    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is _interrupted_while_loading):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def ignore_sigint_while_exiting() -> None:
    """The command has printed its report and chosen its status: a Ctrl-C while the interpreter shuts down must
    not turn it into a death by signal. The command process only."""
    import signal
    import threading

    if is_ctxcache_command() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


guard_sigint_while_loading()
