"""`niclab console NODE`: the serial console of a node of a rig `niclab up` holds; Ctrl-] leaves it.

What the guest writes reaches the terminal through base.text.TerminalFilter (a shell's cursor moves and
colours pass, other controls are escaped). Without a terminal on stdin it sends stdin, then prints what the
guest says until it has been quiet for a second (at most QUIET_LIMIT_S), which scripts and tests use.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from niclab.base.errors import UsageError
from niclab.ui.console import EXIT_OK

LEAVE = b"\x1d"  # Ctrl-], as telnet and virsh console
QUIET_S = 1.0
QUIET_LIMIT_S = 30.0


def cmd_console(args: argparse.Namespace) -> int:
    from niclab.plumbing.guest import unix_connect
    from niclab.run.held import HeldRigError, find

    record, _ = find(args.rig)
    if args.node not in record.nodes:
        raise UsageError(f"rig {record.name} has no node {args.node!r} (nodes: {', '.join(record.nodes)})")
    where = record.consoles.get(args.node)
    if where is None:
        raise HeldRigError(
            f"rig {record.name} ({record.backend} backend) gives no console to attach to: node {args.node}'s "
            f"console is copied to {record.serial_logs.get(args.node, 'its serial log')}; "
            f"`niclab exec {args.node} -- sh -c ...` runs commands in it"
        )
    try:
        sock = unix_connect(Path(where), 5.0)
    except OSError as exc:
        raise HeldRigError(f"node {args.node}'s console at {where}: {exc.strerror or exc}") from None
    with sock:
        sock.setblocking(False)
        if os.isatty(sys.stdin.fileno()):
            with raw_terminal(sys.stdin.fileno()):
                print(
                    f"node {args.node} of rig {record.name}: its serial console; Ctrl-] leaves it, "
                    "Enter shows a prompt",
                    end="\r\n",
                    file=sys.stderr,
                    flush=True,
                )
                relay(sock.fileno(), sys.stdin.fileno(), sys.stdout.fileno(), interactive=True)
            print(file=sys.stderr)
        else:
            relay(sock.fileno(), sys.stdin.fileno(), sys.stdout.fileno(), interactive=False)
    return EXIT_OK


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)  # what was typed meanwhile is sent, not dropped
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def relay(line: int, stdin: int, stdout: int, interactive: bool) -> None:
    """Copy stdin to the serial line and the serial line (filtered) to stdout, until Ctrl-], the line's end,
    or, without a terminal, stdin's end and a quiet second after it."""
    from niclab.base.text import TerminalFilter

    shown = TerminalFilter()
    reading = True
    quiet_since = ended = 0.0
    while True:
        wait = [line] + ([stdin] if reading else [])
        timeout = None if reading else QUIET_S
        ready, _, _ = select.select(wait, [], [], timeout)
        if not ready:  # stdin is done and the guest has been quiet
            return
        if line in ready:
            data = os.read(line, 65536)
            if not data:
                return
            _write_all(stdout, shown.feed(data))
            quiet_since = time.monotonic()
        if not reading and quiet_since and time.monotonic() - ended > QUIET_LIMIT_S:
            return
        if stdin in ready:
            data = os.read(stdin, 4096)
            if interactive and LEAVE in data:
                _write_all(line, data[: data.index(LEAVE)])
                return
            if not data:
                reading, ended = False, time.monotonic()
                quiet_since = ended
                continue
            _write_all(line, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [], 5.0)


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    console = verbs.add_parser(
        "console",
        help="attach to the serial console of a node of a rig that is up",
        description="Attach to the serial console of a node of a rig `niclab up` holds (a root shell in the "
        "micro image); Ctrl-] leaves it. Without a terminal, send stdin and print what the node says until "
        "it has been quiet for a second.",
    )
    console.add_argument("node", metavar="NODE")
    console.add_argument("--rig", metavar="NAME", help="the rig (needed when more than one is up)")
    console.set_defaults(func=cmd_console)
