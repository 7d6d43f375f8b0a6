"""The `niclab` command. Exit codes: 0 ok, 1 failed, 2 usage error, 3 niclab failed (a bug; niclab.ui.console).

Each verb is a module of this package: its command and, beside it, its parser (`add_parser`); here are the global
options, the verbs in the order `niclab --help` lists them, and the dispatch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from niclab import __version__
from niclab.base.errors import NiclabError, describe_exception
from niclab.ui.cli import (
    accel,
    compare,
    console,
    down,
    execute,
    export,
    image,
    lab,
    metrics,
    nics,
    plan,
    report,
    run,
    show,
    status,
    up,
    vagrant,
    validate,
)
from niclab.ui.console import EXIT_BUG, EXIT_FAILED, terminal_streams

VERBS = (
    run,
    up,
    status,
    execute,
    console,
    down,
    show,
    image,
    accel,
    nics,
    report,
    compare,
    export,
    metrics,
    plan,
    validate,
    lab,
    vagrant,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="niclab", description="Reproducible benchmarks of network cards and drivers.")
    parser.add_argument("--version", action="version", version=f"niclab {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb in VERBS:
        verb.add_parser(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    with terminal_streams():  # what guests, hosts and files say reaches the terminal with its controls escaped
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command: list[str] | None = None
    if words[:1] == ["exec"] and "--" in words:  # what follows `--` is the node's command, whatever its words
        at = words.index("--")
        words, command = words[:at], words[at + 1 :]
    args = build_parser().parse_args(words)
    if command is not None:  # words before `--` too (`exec a ls -- -l`)
        args.command = [*args.command, *command]
    args.argv = words  # `up` runs its keeper with the same words
    from niclab.base.procs import raise_interrupt

    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        return args.func(args)
    except NiclabError as exc:  # a scenario that does not validate exits 1 under validate, plan and run alike
        text = str(exc)
        print(text if "\n" in text or exc.shown_as_is else f"niclab: {text}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("niclab: interrupted", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        # Only a closed stdout gets here (`niclab metrics | head`): a guest's socket raises AgentError.
        # Point stdout at /dev/null so the interpreter's final flush does not complain, and stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as exc:
        print(f"niclab: {describe_exception(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        saved = save_crash(exc)
        print(
            f"niclab: {describe_exception(exc)}; this is a bug in niclab: the traceback is in {saved}", file=sys.stderr
        )
        return EXIT_BUG


def save_crash(exc: Exception) -> str:
    """Write the traceback of an unexpected exception to the cache, for a bug report."""
    import traceback

    from niclab.base.paths import cache_dir

    text = "".join(traceback.format_exception(exc))
    try:
        path = cache_dir() / "crashes" / f"{time.strftime('%Y-%m-%dT%H-%M-%S')}-{os.getpid()}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"niclab {__version__}: {' '.join(sys.argv)}\n{text}")
        return str(path)
    except OSError:
        sys.stderr.write(text)
        return "the lines above"
