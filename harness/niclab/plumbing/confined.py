"""Running code a scenario brings onto this host: a build tree's Makefile, a driver's, the selftests' install.

As root such a step runs as nobody (setpriv: uid and gid 65534, no groups, no new privileges) on files made
nobody's; as another user, as that user. Either way it runs in a session of its own under niclab.base.reaper,
so nothing it starts outlives it, however it ends: its end, its time limit, or niclab's own end. What it
wrote is read back through niclab.base.treewalk (every path component opened, never a link).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from niclab.base.errors import NiclabError

NOBODY_ID = 65534


def unprivileged() -> list[str]:
    """The prefix that runs a command as nobody, when niclab is root; nothing otherwise."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={NOBODY_ID}", f"--regid={NOBODY_ID}", "--clear-groups", "--no-new-privs"]


def give_to_nobody(*paths: Path, whole: bool = True) -> None:
    """As root: `paths` (niclab's own copies) become nobody's, and with `whole` everything under them, links
    not followed."""
    if os.geteuid() != 0:
        return
    for top in paths:
        for path in (top, *(top.rglob("*") if whole else ())):
            os.lchown(path, NOBODY_ID, NOBODY_ID)


def readable_by_step(path: Path) -> bool:
    """Whether the step's user can read `path` (as root: nobody)."""
    prefix = unprivileged()
    return not prefix or subprocess.run([*prefix, "test", "-r", str(path)], capture_output=True).returncode == 0


def run_step(
    argv: list[str],
    log: Path,
    timeout: float,
    where: str,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    append: bool = False,
) -> int:
    """Run `argv` as the step's user, its output to `log`, within `timeout` seconds: its exit status, or
    NiclabError naming `where` past the time limit. Whatever it left running is ended before this returns."""
    command = [sys.executable, "-m", "niclab.base.reaper", *unprivileged(), *argv]
    with log.open("a" if append else "w") as sink:
        try:
            process = subprocess.Popen(
                command,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise NiclabError(f"{where}: {argv[0]} did not run ({exc.strerror}); its log: {log}") from None
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)  # the reaper ends the command and all it left
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            raise NiclabError(
                f"{where}: {argv[0]} took more than {timeout:.0f} s and was ended; its log: {log}"
            ) from None
        except BaseException:  # Ctrl-C: the step ends with niclab
            process.send_signal(signal.SIGTERM)
            process.wait()
            raise
