"""Ownership of host processes: every process niclab starts belongs to a Supervisor.

Children die with the harness (PR_SET_PDEATHSIG), are recorded in <run dir>/pids/ with their start time (the
run directory registered under the cache's live/), so `niclab down` ends what a killed harness left and only
that; they end with the Supervisor's context (SIGTERM, then SIGKILL) and run with umask 077
(docs/architecture.md, "Processes die with the harness" and "Failure handling").
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from niclab.base.paths import live_dir

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """A signal handler: SIGTERM stops niclab as Ctrl-C does (every guest stopped on the way out)."""
    raise KeyboardInterrupt(f"signal {signum}")


def _child_setup() -> None:  # runs in the child between fork and exec
    die_with_parent()
    os.umask(0o077)  # its sockets (QMP, agent) and logs are the user's alone


def stat_fields(pid: int, proc: Path = Path("/proc")) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None if the process is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if it is gone."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == "Z":  # a zombie is gone for our purposes
        return None
    return int(fields[19])


def pid_namespace() -> str:
    """Where this process's PIDs mean something: the host name and the PID namespace.

    A container has a namespace (and a host name) of its own: a PID recorded there names no process
    here, nor the other way round.
    """
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = "pid:[?]"
    return f"{socket.gethostname()}/{namespace}"


@dataclass
class Child:
    name: str
    popen: subprocess.Popen
    record: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_reason(self) -> str | None:
        code = self.popen.poll()
        if code is None:
            return None
        if code < 0:
            return f"process {self.name} (pid {self.pid}) was killed by signal {-code}"
        return f"process {self.name} (pid {self.pid}) exited with status {code}"


class Supervisor:
    """Starts, records and ends the host processes of one run directory."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.pid_dir = run_dir / "pids"
        self.children: list[Child] = []
        self._live_entry = live_dir() / f"{os.getpid()}-{int(time.time() * 1000)}.json"

    def __enter__(self) -> Supervisor:
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self._live_entry.parent.mkdir(parents=True, exist_ok=True)
        self._live_entry.write_text(
            json.dumps(
                {
                    "harness_pid": os.getpid(),
                    "harness_start": process_start_time(os.getpid()),
                    "pid_dir": str(self.pid_dir.resolve()),
                }
            )
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
        self._live_entry.unlink(missing_ok=True)

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: Path,
        log: Path,
        pass_fds: Iterable[int] = (),
        stdin_pipe: bool = False,
    ) -> Child:
        """Start a child. With stdin_pipe its stdin is a pipe only this process holds open:
        a program that exits on end of input (vde_switch) then lives exactly as long as we do."""
        with log.open("ab") as sink:
            popen = subprocess.Popen(
                argv,
                cwd=cwd,
                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                pass_fds=tuple(pass_fds),
                preexec_fn=_child_setup,
                start_new_session=True,
            )
        record = self.pid_dir / f"{name}.json"
        record.write_text(
            json.dumps(
                {
                    "name": name,
                    "pid": popen.pid,
                    "start": process_start_time(popen.pid),
                    "argv": argv,
                }
            )
        )
        child = Child(name, popen, record)
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in self.children:
            if child.popen.poll() is None:
                child.popen.terminate()
        deadline = time.monotonic() + 3.0
        for child in self.children:
            try:
                child.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.popen.kill()
                child.popen.wait()
            if child.popen.stdin is not None:
                child.popen.stdin.close()
            child.record.unlink(missing_ok=True)
        self.children.clear()


@dataclass(frozen=True)
class Leftover:
    name: str
    pid: int
    pid_dir: Path


def _recorded(pid_dir: Path) -> list[tuple[Path, dict]]:
    records = []
    for path in sorted(pid_dir.glob("*.json")):
        try:
            records.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return records


def down(include_running: bool = False) -> list[Leftover]:
    """End processes left by harnesses that are gone (or by all, with include_running).

    Only a process whose PID and start time both match the record is signalled.
    """
    ended: list[Leftover] = []
    for entry in sorted(live_dir().glob("*.json")) if live_dir().is_dir() else []:
        try:
            live = json.loads(entry.read_text())
        except (OSError, ValueError):
            entry.unlink(missing_ok=True)
            continue
        harness_alive = process_start_time(live["harness_pid"]) == live["harness_start"]
        if harness_alive and not include_running:
            continue
        pid_dir = Path(live["pid_dir"])
        for path, record in _recorded(pid_dir):
            if process_start_time(record["pid"]) == record["start"]:
                _end(record["pid"])
                ended.append(Leftover(record["name"], record["pid"], pid_dir))
            path.unlink(missing_ok=True)
        entry.unlink(missing_ok=True)
    return ended


def _end(pid: int, grace: float = 3.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if process_start_time(pid) is None:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# -- a command's output, bounded ------------------------------------------------------------------------------

STDERR_LIMIT = 64 << 10  # kept of a command's standard error (the rest is dropped)


class OutputTimedOut(Exception):
    """The command did not end (or close its output) in time; it was ended."""


class OutputTooLarge(Exception):
    """The command printed more than it may; it was ended."""


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a command started in a session of its own, and what it started in that session (its process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def collect(proc: subprocess.Popen[bytes], timeout: float, limit: int) -> tuple[bytes, bytes]:
    """Read both pipes of `proc` (started in a session of its own) to their end within `timeout`, stdout up to
    `limit` bytes and the first STDERR_LIMIT of stderr; else the command is ended and OutputTimedOut or
    OutputTooLarge raised. What another host or a guest prints cannot hold niclab or fill its memory."""
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                stop(proc)
                raise OutputTimedOut
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer: bytearray = key.data
                if buffer is out and len(out) + len(chunk) > limit:
                    stop(proc)
                    raise OutputTooLarge
                if buffer is out or len(err) < STDERR_LIMIT:
                    buffer += chunk
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        stop(proc)  # closed its output but went on: a command that does not end
        raise OutputTimedOut from None
    finally:
        proc.stdout.close()
        proc.stderr.close()
    return bytes(out), bytes(err)
