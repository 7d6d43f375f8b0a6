"""The processes an integration test starts and watches: niclab's command line as a child, its progress lines,
and the QEMU guests a run leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def qemus_under(directory: Path) -> list[int]:
    """PIDs of QEMU processes whose working directory is inside `directory`."""
    found = []
    root = str(directory.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cmdline and b"qemu-system" in cmdline[0] and (cwd == root or cwd.startswith(root + "/")):
            found.append(int(entry.name))
    return found


def wait_no_qemu(directory: Path, seconds: float = 15) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := qemus_under(directory)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def default_signals() -> None:
    """In the child: SIGINT and SIGHUP as a terminal would deliver them. A job started with `&` by a
    non-interactive shell (`nohup make test &`) inherits SIGINT ignored (and, under nohup, SIGHUP),
    and Python keeps them so; a test that interrupts its child must not depend on how the suite was
    started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def niclab(*args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "niclab", *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
        **kwargs,
    )


def wait_for_line(proc: subprocess.Popen, text: str, seconds: float, stream=None) -> list[str]:
    """Read the child's progress (stderr, or `stream`) until a line has `text`; the lines read."""
    stream = stream or proc.stderr
    lines, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    pytest.fail(f"never saw {text!r}; output so far:\n{''.join(lines)}")
