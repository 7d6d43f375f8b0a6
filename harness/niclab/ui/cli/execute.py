"""`niclab exec NODE -- COMMAND`: run a command in a node of a rig `niclab up` holds; exit with its status."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from niclab.base.errors import UsageError
from niclab.base.text import TerminalFilter


def cmd_exec(args: argparse.Namespace) -> int:
    from niclab.run.held import ask, find

    words = args.command
    if not words:
        raise UsageError("exec: give the command after the node: niclab exec NODE -- ip -br addr")
    record, path = find(args.rig)
    if args.node not in record.nodes:
        raise UsageError(f"rig {record.name} has no node {args.node!r} (nodes: {', '.join(record.nodes)})")
    command = words[0] if len(words) == 1 else shlex.join(words)  # the node's /bin/sh runs it, with its PATH
    reply = ask(path, {"op": "exec", "node": args.node, "command": command, "timeout": args.timeout}, args.timeout + 30)
    sys.stdout.flush()
    for fd, key in ((1, "stdout"), (2, "stderr")):
        data = str(reply.get(key, "")).encode()
        # as the node printed it into a pipe or a file; on a terminal, controls other than a shell's escaped
        _write(fd, TerminalFilter().feed(data) if os.isatty(fd) else data)
    code = reply.get("exit")
    return code if isinstance(code, int) and 0 <= code <= 255 else 1


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds from 0 to 86400")
    return value


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = verbs.add_parser(
        "exec",
        help="run a command in a node of a rig that is up",
        description="Run a command in a node of a rig `niclab up` holds, print what it printed and exit with "
        "its status. The node's /bin/sh runs it: one word as a line of the shell (pipes and redirections "
        "work: niclab exec a -- 'ip -s link | head'), several as the words they are.",
    )
    run.add_argument("node", metavar="NODE")
    run.add_argument("command", metavar="COMMAND", nargs="*", help="the command, after --")
    run.add_argument("--rig", metavar="NAME", help="the rig (needed when more than one is up)")
    run.add_argument(
        "--timeout", type=seconds, default=60.0, metavar="S", help="stop waiting after S seconds (default 60)"
    )
    run.set_defaults(func=cmd_exec)
