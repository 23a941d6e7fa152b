"""Argument parsing shared by the ``ctxcache`` commands: a bad option is one line on stderr and exit status 2.

Invariants: every integer option of a command is parsed by :func:`int_range`, whose error names the allowed range
(argparse prefixes the option's name: ``argument --seed: must be an integer from 0 to 4294967295, got -1``); every
command's parser is a :class:`OneLineParser`, whose errors are the single line ``PROG: error: MESSAGE (see PROG
--help)``. Nothing here imports the library, so a command refuses its options before loading it. Stateless: safe
from any thread.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
from collections.abc import Callable
from typing import NoReturn

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} (see {self.prog} --help)\n")


def int_range(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse ``type``: a decimal integer in [minimum, maximum]; the error names the range."""
    allowed = f"an integer from {minimum} to {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:  # not a number, or more digits than int() converts
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {shown!r}") from None
        if not minimum <= value <= maximum:
            shown = str(value) if len(text) <= 40 else f"a {len(text.lstrip('+-'))}-digit number"
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {shown}")
        return value

    parse.__name__ = allowed  # what argparse would name in its own messages
    return parse


def seconds_range(minimum: float, maximum: float) -> Callable[[str], float]:
    """An argparse ``type``: a decimal number of seconds in [minimum, maximum]; the error names the range."""
    allowed = f"a number of seconds from {minimum:g} to {maximum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {shown!r}") from None
        if not minimum <= value <= maximum:  # also NaN
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text if len(text) <= 40 else value}")
        return value

    parse.__name__ = allowed
    return parse


def retention_rule(text: str) -> tuple[int, float | None]:
    """An argparse ``type``: ``PRIORITY[:SECONDS]``, a retention priority (an integer from 0 to 100) and an
    optional duration in seconds (a number from 0 to 9.2e9, what int64 nanoseconds hold); the error names both."""
    allowed = "PRIORITY[:SECONDS] (PRIORITY an integer from 0 to 100, SECONDS a number from 0 to 9.2e9)"
    shown = text if len(text) <= 40 else text[:40] + "..."
    head, colon, tail = text.partition(":")
    try:
        priority = int(head, 10)
        seconds = float(tail) if colon else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {shown!r}") from None
    if not 0 <= priority <= 100:
        raise argparse.ArgumentTypeError(f"priority must be an integer from 0 to 100, got {priority} in {shown!r}")
    if seconds is not None and not 0 <= seconds <= 9.2e9:  # also NaN
        raise argparse.ArgumentTypeError(f"seconds must be a number from 0 to 9.2e9, got {tail!r} in {shown!r}")
    return priority, seconds


def file_stem(text: str) -> str:
    """An argparse ``type``: a file name without its extension (no directory part, not empty, not . or ..)."""
    if not text or text in (".", "..") or "/" in text or "\0" in text:
        raise argparse.ArgumentTypeError(
            f"must be a file name without a directory or an extension (e.g. ctxcache-sweep), got {text!r}; "
            f"use --out-dir for the directory")
    return text


_HOSTNAME_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def zmq_endpoint(text: str) -> str:
    """An argparse ``type``: a ZMQ endpoint a KV event publisher can use: ``tcp://HOST:PORT`` (HOST ``*``, an IPv4
    address, ``[IPv6]``, or a host or interface name; PORT 1 to 65535), ``ipc://PATH`` or ``inproc://NAME``.

    Checked up front because ZMQ connects lazily: a connect to an address that cannot exist (``tcp://256.1.1.1:5557``)
    succeeds and then loses every message. Names are not resolved here (that can block)."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("tcp", "ipc", "inproc"):
        raise argparse.ArgumentTypeError(f"must be tcp://HOST:PORT, ipc://PATH or inproc://NAME, got {text!r}")
    if scheme != "tcp":
        if not rest:
            raise argparse.ArgumentTypeError(f"{scheme}:// needs a {'path' if scheme == 'ipc' else 'name'}, "
                                             f"got {text!r}")
        return text
    host, colon, port = rest.rpartition(":")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"must be tcp://HOST:PORT (e.g. tcp://*:5557), got {text!r}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"port must be an integer from 1 to 65535, got {port!r} in {text!r}")
    if host == "*" or _valid_host(host):
        return text
    raise argparse.ArgumentTypeError(f"host {host!r} in {text!r} is neither *, an IPv4 address (four numbers from "
                                     f"0 to 255), an [IPv6] address nor a host name")


def _valid_host(host: str) -> bool:
    if ":" in host:  # IPv6, bracketed ([::1]) or bare (::, vLLM's bind-everything host)
        try:
            bracketed = host.startswith("[") and host.endswith("]")
            ipaddress.IPv6Address((host[1:-1] if bracketed else host).split("%")[0])
        except ValueError:
            return False
        return True
    if all(part.isdigit() for part in host.split(".")):  # all-numeric: an IPv4 address or nothing
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
        return True
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    return len(host) <= 253 and all(_HOSTNAME_LABEL.match(label) for label in labels)
