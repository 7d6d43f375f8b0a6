"""`niclab console NODE`: the serial console of a node of a rig `niclab up` holds; Ctrl-] leaves it.

What the guest writes reaches the terminal through base.text.TerminalFilter (a shell's cursor moves and
colours pass, other controls are escaped). Without a terminal on stdin it sends stdin, then prints what the
guest says until it has been quiet for a second (at most QUIET_LIMIT_S), which scripts and tests use.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import select
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from niclab.base.errors import NiclabError, UsageError
from niclab.ui.console import EXIT_OK

LEAVE = b"\x1d"  # Ctrl-], as telnet and virsh console
QUIET_S = 1.0
QUIET_LIMIT_S = 30.0
WRITE_LIMIT_S = 10.0
RESET = b"\x1b[0m"  # on leaving: colours or hidden text a guest left on do not stay on the user's terminal


def cmd_console(args: argparse.Namespace) -> int:
    from niclab.run.held import HeldRigError, find

    record, path = find(args.rig)
    if args.node not in record.nodes:
        raise UsageError(f"rig {record.name} has no node {args.node!r} (nodes: {', '.join(record.nodes)})")
    where = record.consoles.get(args.node)
    if where is None:
        raise HeldRigError(
            f"rig {record.name} ({record.backend} backend) gives no console to attach to: node {args.node}'s "
            f"console is copied to {record.serial_logs.get(args.node, 'its serial log')}; "
            f"`niclab exec {args.node} -- sh -c ...` runs commands in it"
        )
    with attached(path / f"console.{args.node}.lock", args.node), _connect(Path(where), args.node) as sock:
        sock.setblocking(False)
        if os.isatty(sys.stdin.fileno()):
            with raw_terminal(sys.stdin.fileno()):
                os.write(
                    2,
                    f"node {args.node} of rig {record.name}: its serial console; Ctrl-] leaves it, "
                    "Enter shows a prompt\r\n".encode(),
                )
                try:
                    relay(sock.fileno(), sys.stdin.fileno(), sys.stdout.fileno(), interactive=True)
                finally:
                    os.write(1, RESET)
            os.write(2, b"\n")
        else:
            relay(sock.fileno(), sys.stdin.fileno(), sys.stdout.fileno(), interactive=False)
    return EXIT_OK


def _connect(where: Path, node: str) -> socket.socket:
    from niclab.plumbing.guest import unix_connect
    from niclab.run.held import HeldRigError

    try:
        return unix_connect(where, 5.0)
    except OSError as exc:
        raise HeldRigError(f"node {node}'s console at {where}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def attached(lock: Path, node: str) -> Iterator[None]:
    """One console per node: QEMU serves one client, and a second would wait unseen, its keys sent later."""
    from niclab.run.held import HeldRigError

    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HeldRigError(f"node {node}'s console is attached elsewhere; Ctrl-] there leaves it") from None
        yield
    finally:
        os.close(fd)


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
    ended = 0.0  # when stdin ended
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
        if not reading and time.monotonic() - ended > QUIET_LIMIT_S:
            return
        if stdin in ready:
            data = os.read(stdin, 4096)
            if interactive and LEAVE in data:
                _write_all(line, data[: data.index(LEAVE)])
                return
            if not data:
                reading, ended = False, time.monotonic()
                continue
            _write_all(line, data)


def _write_all(fd: int, data: bytes) -> None:
    """Write it all; a side that takes nothing for WRITE_LIMIT_S (a guest that stopped reading) is given up."""
    view = memoryview(data)
    deadline = time.monotonic() + WRITE_LIMIT_S
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ConsoleStuck(f"the console took nothing for {WRITE_LIMIT_S:.0f} s; left it") from None
            select.select([], [fd], [], 1.0)


class ConsoleStuck(NiclabError):
    """The serial line (or the terminal) stopped taking what was written to it."""


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
