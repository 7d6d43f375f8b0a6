"""The command channel into a guest: the QEMU guest agent (qemu-ga).

The agent listens on a virtio-serial port whose host end is a unix socket, so
control traffic never crosses the links under test. The protocol is one JSON
object per line. What the host writes before the agent runs is buffered and
answered later, so `connect` sends `guest-sync-delimited` with a fresh id until
the matching reply (prefixed with 0xFF) arrives, dropping the stale ones.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Callable

from niclab.backends.base import CommandResult, GuestCommandError, as_argv
from niclab.errors import NiclabError

POLL_INTERVALS = (0.01, 0.02, 0.05, 0.1, 0.2)


class AgentError(NiclabError):
    """The guest agent did not answer, or answered with an error."""


def unix_connect(path: Path, timeout: float) -> socket.socket:
    """Connect to a unix socket whose path may be longer than sun_path's 107 bytes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    if len(os.fsencode(path)) < 100:
        sock.connect(os.fspath(path))
        return sock
    dir_fd = os.open(path.parent, os.O_PATH)
    try:
        sock.connect(f"/proc/self/fd/{dir_fd}/{path.name}")
    finally:
        os.close(dir_fd)
    return sock


def shorten(argv: tuple[str, ...], limit: int = 200) -> str:
    """The command for a message: its start (the program and first options) and its end, never a cut tail."""
    text = argv[-1] if argv[:2] == ("/bin/sh", "-c") else " ".join(argv)
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]} … {text[-(limit - head - 3):]}"


class GuestAgent:
    """A connection to one guest's qemu-ga; thread-safe, one command at a time."""

    def __init__(self, node: str, socket_path: Path):
        self.node = node
        self._path = socket_path
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._sync_id = int(time.time() * 1000) % 1_000_000_000

    # -- connection -------------------------------------------------------

    def connect(self, deadline: float, alive: Callable[[], str | None]) -> float:
        """Wait until the agent answers; returns when it did (monotonic time).

        `alive` returns None while the guest's process runs, else why it is gone.
        """
        while True:
            if (gone := alive()) is not None:
                raise AgentError(f"{self.node}: {gone}")
            if time.monotonic() > deadline:
                raise AgentError(f"{self.node}: the guest agent did not answer in time")
            try:
                self._sock = unix_connect(self._path, timeout=1.0)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.05)
        while True:
            if (gone := alive()) is not None:
                raise AgentError(f"{self.node}: {gone}")
            if time.monotonic() > deadline:
                raise AgentError(f"{self.node}: the guest agent did not answer in time")
            self._sync_id += 1
            try:
                self._send({"execute": "guest-sync-delimited", "arguments": {"id": self._sync_id}})
                if self._await_sync(self._sync_id, until=min(deadline, time.monotonic() + 1.0)):
                    return time.monotonic()
            except AgentError:
                # The socket goes away with QEMU: say why QEMU went, if it did.
                time.sleep(0.2)
                if (gone := alive()) is not None:
                    raise AgentError(f"{self.node}: {gone}") from None
                raise

    def _await_sync(self, wanted: int, until: float) -> bool:
        while time.monotonic() < until:
            try:
                reply = self._read_message(timeout=max(0.01, until - time.monotonic()))
            except TimeoutError:
                return False
            if reply.get("return") == wanted:
                return True
        return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- wire format ------------------------------------------------------

    def _send(self, message: dict) -> None:
        assert self._sock is not None, "connect() first"
        try:
            self._sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError as exc:
            raise AgentError(f"{self.node}: lost the guest agent connection ({exc})") from None

    def _read_message(self, timeout: float) -> dict:
        assert self._sock is not None
        end = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout:
                raise TimeoutError from None
            except OSError as exc:
                raise AgentError(f"{self.node}: lost the guest agent connection ({exc})") from None
            if not chunk:
                raise AgentError(f"{self.node}: the guest agent closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        line = line.lstrip(b"\xff").strip()
        if not line:
            return self._read_message(max(0.0, end - time.monotonic()))
        return json.loads(line)

    def call(self, command: str, arguments: dict | None = None, timeout: float = 30.0):
        """Run one agent command and return its "return" value."""
        message = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        with self._lock:
            self._send(message)
            try:
                reply = self._read_message(timeout)
            except TimeoutError:
                raise AgentError(f"{self.node}: no answer to {command} in {timeout:.0f} s") from None
        if "error" in reply:
            raise AgentError(f"{self.node}: {command}: {reply['error'].get('desc', reply['error'])}")
        return reply.get("return")

    # -- commands ---------------------------------------------------------

    def start(self, argv: tuple[str, ...], stdin: bytes | None = None) -> int:
        arguments: dict = {"path": argv[0], "arg": list(argv[1:]), "capture-output": True}
        if stdin is not None:
            arguments["input-data"] = base64.b64encode(stdin).decode()
        return self.call("guest-exec", arguments)["pid"]

    def status(self, pid: int, argv: tuple[str, ...], started: float) -> CommandResult | None:
        state = self.call("guest-exec-status", {"pid": pid})
        if not state.get("exited"):
            return None
        code = state.get("exitcode")
        if code is None:  # killed by a signal
            code = 128 + state.get("signal", 0)
        return CommandResult(
            node=self.node,
            argv=argv,
            returncode=code,
            stdout=base64.b64decode(state.get("out-data", "")).decode(errors="replace"),
            stderr=base64.b64decode(state.get("err-data", "")).decode(errors="replace"),
            seconds=time.monotonic() - started,
        )

    def wait(self, pid: int, argv: tuple[str, ...], started: float, timeout: float) -> CommandResult:
        deadline = time.monotonic() + timeout
        for attempt in range(10**9):
            result = self.status(pid, argv, started)
            if result is not None:
                return result
            if time.monotonic() > deadline:
                self.kill(pid)
                raise GuestCommandError(f"{self.node}: `{shorten(argv)}` did not finish "
                                        f"in {timeout:.0f} s; killed it")
            time.sleep(POLL_INTERVALS[min(attempt, len(POLL_INTERVALS) - 1)])
        raise AssertionError("unreachable")

    def kill(self, pid: int, signal: str = "KILL") -> None:
        """Signal the process group `pid` leads (commands run under setsid), else the process."""
        argv = ("/bin/sh", "-c", f"/usr/bin/kill -s {signal} -{pid} 2>/dev/null || /usr/bin/kill -s {signal} {pid}")
        killer = self.start(argv)
        try:
            self.wait(killer, argv, time.monotonic(), timeout=10)
        except GuestCommandError:
            pass

    def write_file(self, path: str, data: bytes) -> None:
        handle = self.call("guest-file-open", {"path": path, "mode": "w"})
        try:
            for offset in range(0, max(len(data), 1), 48 * 1024):
                chunk = base64.b64encode(data[offset:offset + 48 * 1024]).decode()
                self.call("guest-file-write", {"handle": handle, "buf-b64": chunk})
        finally:
            self.call("guest-file-close", {"handle": handle})

    def read_file(self, path: str) -> bytes:
        handle = self.call("guest-file-open", {"path": path, "mode": "r"})
        parts = []
        try:
            while True:
                chunk = self.call("guest-file-read", {"handle": handle, "count": 48 * 1024})
                parts.append(base64.b64decode(chunk.get("buf-b64", "")))
                if chunk.get("eof"):
                    break
        finally:
            self.call("guest-file-close", {"handle": handle})
        return b"".join(parts)


class AgentProcess:
    """A background command in a guest, started through the agent."""

    def __init__(self, agent: GuestAgent, pid: int, argv: tuple[str, ...]):
        self._agent, self.pid, self.argv = agent, pid, argv
        self._started = time.monotonic()
        self._result: CommandResult | None = None

    def poll(self) -> CommandResult | None:
        if self._result is None:
            self._result = self._agent.status(self.pid, self.argv, self._started)
        return self._result

    def wait(self, timeout: float) -> CommandResult:
        if self._result is None:
            self._result = self._agent.wait(self.pid, self.argv, self._started, timeout)
        return self._result

    def stop(self, grace: float = 5.0) -> CommandResult:
        """SIGTERM, then SIGKILL after `grace` seconds; returns what it printed."""
        if self.poll() is None:
            self._agent.kill(self.pid, "TERM")
            try:
                return self.wait(grace)
            except GuestCommandError:  # wait() already sent SIGKILL
                return self.wait(10)
        return self._result


class AgentNode:
    """A Node handle whose commands go through qemu-ga (emulated and libvirt guests).

    Every command runs under `setsid`, as the leader of its own process group,
    so a timeout or a stop ends it and everything it started (a shell's
    children would otherwise keep the output pipes, and the agent, waiting).
    """

    def __init__(self, name: str, agent: GuestAgent):
        self.name = name
        self.agent = agent

    def run(self, command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        argv = as_argv(command)
        started = time.monotonic()
        pid = self.agent.start(("setsid",) + argv)
        result = self.agent.wait(pid, argv, started, timeout)
        return result.check() if check else result

    def spawn(self, command) -> AgentProcess:
        argv = as_argv(command)
        return AgentProcess(self.agent, self.agent.start(("setsid",) + argv), argv)

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.agent.write_file(path, data)
        self.run(["/bin/chmod", f"{mode:o}", path])

    def get(self, path: str) -> bytes:
        return self.agent.read_file(path)
