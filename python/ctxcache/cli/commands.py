"""The ``ctxcache`` command.

  ctxcache info           what was built (ABI, CUDA backend, devices) and where the library lives
  ctxcache replay         replay a serving workload (built-in, or a Mooncake trace) through the cache: the report
  ctxcache sweep          the hit rate over a range of cache capacities: a PNG plot and a CSV
  ctxcache workload       write the seeded conversation workload as a Mooncake-format JSONL trace
  ctxcache bench          replay the Mooncake trace through the manager (see tools/bench_manager)
  ctxcache bench-runtime  the runtime's own bookkeeping per request and per decode step (see tools/bench_runtime)

A bad option, here or in a subcommand, is one line on stderr and exit status 2 (every parser is a
``ctxcache.cli.args.OneLineParser``, every integer option an ``int_range``); ``info`` reports a device count that is never
negative (a failed probe is 0 devices, its reason in ``cuda_probe``).

Ctrl-C ends any command within a second with exit status 130: replay, sweep and bench print the partial report
(what finished, marked as interrupted), the others one line on stderr; during start-up (loading the package) one
line too (ctxcache._startup).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .args import OneLineParser


def _info(_: argparse.Namespace) -> int:
    import ctxcache
    from ctxcache import _ffi

    probe = ctxcache.cuda_device_count()  # < 0: the probe failed (the negated CUDA error), which is no device
    print(json.dumps({
        "version": ctxcache.__version__,
        "abi_version": ctxcache.abi_version(),
        "library": _ffi._library_path,
        "cuda_compiled": ctxcache.cuda_compiled(),
        "cuda_device_count": max(probe, 0),
        "cuda_probe": "ok" if probe > 0 else (_ffi.last_error() or "no CUDA device visible"),
    }, indent=2))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from ..bench import manager as bench

    return bench.main(args.bench_args)


def _bench_runtime(args: argparse.Namespace) -> int:
    from ..bench import runtime as bench_runtime

    return bench_runtime.main(args.bench_args)


def _replay(args: argparse.Namespace) -> int:
    from . import replay

    return replay.replay_main(args.forwarded_args)


def _sweep(args: argparse.Namespace) -> int:
    from . import replay

    return replay.sweep_main(args.forwarded_args)


def _workload(args: argparse.Namespace) -> int:
    from . import workload

    return workload.workload_main(args.forwarded_args)


def main(argv: list[str] | None = None) -> int:
    from .. import _startup

    _startup.command_sigint()  # from here on, Ctrl-C is a KeyboardInterrupt (replay and sweep take it over)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # while parsing or importing a command's module
        _startup.interrupted_json("starting", list(sys.argv[1:] if argv is None else argv))
        print("ctxcache: interrupted (nothing was run)", file=sys.stderr)
        return 130
    finally:
        _startup.ignore_sigint_while_exiting()


def _main(argv: list[str] | None) -> int:
    parser = OneLineParser(prog="ctxcache", description="ctxcache: a context cache for LLM inference runtimes")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="what was built and what devices it sees").set_defaults(run=_info)
    bench = sub.add_parser("bench", help="replay a Mooncake trace through the manager", add_help=False)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    bench.set_defaults(run=_bench)
    bench_runtime = sub.add_parser("bench-runtime", help="the runtime's bookkeeping per request and per decode step",
                                   add_help=False)
    bench_runtime.add_argument("bench_args", nargs=argparse.REMAINDER)
    bench_runtime.set_defaults(run=_bench_runtime)
    for name, run, text in (("replay", _replay, "replay a serving workload through the cache and report it"),
                            ("sweep", _sweep, "the hit rate over a range of cache capacities (PNG + CSV)"),
                            ("workload", _workload, "write the conversation workload as a Mooncake JSONL trace")):
        forwarded = sub.add_parser(name, help=text, add_help=False)
        forwarded.add_argument("forwarded_args", nargs=argparse.REMAINDER)
        forwarded.set_defaults(run=run)
    # argparse.REMAINDER does not capture a remainder that starts with an option ("bench --requests 50"), so the
    # bench arguments are whatever the top-level parser does not know.
    args, extra = parser.parse_known_args(argv)
    if args.command in ("bench", "bench-runtime"):
        args.bench_args = extra + list(args.bench_args)
    elif args.command in ("replay", "sweep", "workload"):
        args.forwarded_args = extra + list(args.forwarded_args)
    elif extra:
        parser.error("unrecognized arguments: " + " ".join(extra))
    try:
        return int(args.run(args))
    except BrokenPipeError:  # `ctxcache replay | head`: the reader left; no traceback, the shell's SIGPIPE status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's final flush goes nowhere
        return 128 + 13
    except KeyboardInterrupt:  # a command without a partial report of its own (replay and sweep print theirs)
        from .. import _startup

        _startup.interrupted_json("starting" if args.command in ("replay", "sweep") else "running",
                                  [args.command, *getattr(args, "forwarded_args", [])])
        print(f"ctxcache {args.command}: interrupted (no report: it did not finish)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
