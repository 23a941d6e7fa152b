"""Ctrl-C while the ``ctxcache`` command starts: one line on stderr and exit status 130, never a traceback.

Imported first by ``ctxcache/__init__.py`` (the import is the installation). Loading the package takes a moment (the cffi header parse, numpy), and a KeyboardInterrupt raised there would print
a long traceback from inside cffi. Only when this process is the ``ctxcache`` command (the console script, or
``python -m ctxcache.cli``) does importing the package install a SIGINT handler that writes one line and ends the
process with 130 at once (nothing has been measured yet, so there is nothing to report). :func:`ctxcache.cli.main`
replaces it before it runs a command by one that raises KeyboardInterrupt (never inside the garbage collector,
where it would be lost), whose own interrupt handling then applies, and ignores
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


def interrupted_json(phase: str, argv: list[str] | None = None) -> None:
    """With --json, the one JSON object a command prints, for an interrupt that left no report: nothing done."""
    args = sys.argv[1:] if argv is None else argv
    if "--json" in args:
        command = next((a for a in args if not a.startswith("-")), "")
        os.write(1, (json.dumps({"command": command, "interrupted": True, "interrupted_phase": phase,
                                 "requests": 0, "report": None}) + "\n").encode())


def _interrupted_while_loading(signum: int, frame: Any) -> None:
    interrupted_json("starting")
    os.write(2, b"ctxcache: interrupted while starting (nothing was run)\n")
    os._exit(130)


def guard_sigint_while_loading() -> None:
    if not is_ctxcache_command():
        return
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupted_while_loading)


def in_collector(frame: Any) -> bool:
    """Whether the main thread is inside the cyclic garbage collector (its callbacks, the finalizers it runs):
    an exception raised there is printed as "Exception ignored" and dropped, so an interrupt must wait."""
    resource = sys.modules.get("ctxcache._resource")
    if resource is None:
        return False
    return bool(resource._collecting) or (frame is not None and frame.f_code is resource._gc_phase.__code__)


def _raise_outside_collector(signum: int, frame: Any) -> None:
    if in_collector(frame):  # try again in 50 ms, once the collection is over
        import _thread
        import threading

        timer = threading.Timer(0.05, _thread.interrupt_main)
        timer.daemon = True
        timer.start()
        return
    raise KeyboardInterrupt


def command_sigint() -> None:
    """While a command runs (after loading): Ctrl-C is a KeyboardInterrupt, never one raised inside the garbage
    collector (where it would be lost). Replaces the loading handler; the command process only."""
    import signal
    import threading

    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is _interrupted_while_loading):
        signal.signal(signal.SIGINT, _raise_outside_collector)


def ignore_sigint_while_exiting() -> None:
    """The command has printed its report and chosen its status: a Ctrl-C while the interpreter shuts down must
    not turn it into a death by signal. The command process only."""
    import signal
    import threading

    if is_ctxcache_command() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


guard_sigint_while_loading()
