"""`python -m niclab.base.reaper COMMAND…`: run COMMAND, then end every process it left behind.

As the child subreaper (PR_SET_CHILD_SUBREAPER) it inherits whatever COMMAND leaves (`setsid sleep 123 &`
too) and kills it all once COMMAND ends, or at once on SIGTERM (a time limit, niclab's own end); it exits
with COMMAND's status (docs/architecture.md, "Trust": code a scenario brings).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def children() -> list[int]:
    """The PIDs of this process's children (orphans it took in among them)."""
    found: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            found += [int(pid) for pid in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def end_all() -> None:
    """Kill every child, and every orphan that becomes one meanwhile, and reap them, until none is left."""
    while True:
        left = children()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, 0 if left else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
            left = [p for p in left if p != pid]
        if not left and not children():
            return


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m niclab.base.reaper COMMAND...", file=sys.stderr)
        return 2
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    def stop(signum: int, frame: FrameType | None) -> None:
        end_all()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        command = subprocess.Popen(argv)
    except OSError as exc:
        print(f"niclab: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    status = command.wait()
    end_all()
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
