"""The command channel into a guest: the QEMU guest agent (qemu-ga) on a virtio-serial port.

One JSON object per line, answered in order. Anything left on the channel (output before the agent ran, the
late answer to a command that timed out) would pass for the next answer, so the channel is resynchronized
(`guest-sync-delimited`) at `connect` and before the next command after any timeout or broken reply
(docs/architecture.md, "The command channel is qemu-ga on virtio-serial").
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from niclab.base import jsonbound
from niclab.base.errors import NiclabError
from niclab.base.node import Command, CommandResult, GuestCommandError, as_argv
from niclab.base.threads import at_once

# How long `wait` sleeps between asking whether a command ended: an eighth of how long it has run, from 10 ms
# to 200 ms. A command is seen ended at most ~12 % after it did (the half-second scripts that set up a cell's
# network and read its counters), and a benchmark of seconds is asked five times a second, each question a
# wake-up of the guest's agent that costs the guest's one vCPU a little under TCG.
POLL_SHARE, POLL_MIN_S, POLL_MAX_S = 1 / 8, 0.01, 0.2
# What one reply may hold: qemu-ga captures at most 16 MiB of a command's output, 21.3 MiB in base64.
MAX_LINE_BYTES = 32 << 20
FILE_CHUNK = 48 * 1024  # bytes asked per guest-file-read
MAX_FILE_BYTES = 64 << 20  # of a file read from a guest (Node.get): niclab reads results and keys, not disks
FILE_SECONDS = 300.0  # to read one file, however the agent answers


def poll_interval(elapsed: float) -> float:
    return min(POLL_MAX_S, max(POLL_MIN_S, elapsed * POLL_SHARE))


_Shape = TypeVar("_Shape", dict, int)  # what an agent reply field must be


class AgentError(NiclabError):
    """The guest agent did not answer, or answered with an error or with something that is not a reply."""


def unix_connect(path: Path, timeout: float) -> socket.socket:
    """Connect to a unix socket whose path may be longer than sun_path's 107 bytes."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
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
    except BaseException:
        sock.close()  # connect() retries every 50 ms while the guest boots: do not leave a socket per try
        raise


def shorten(argv: tuple[str, ...], limit: int = 200) -> str:
    """The command for a message: its start (the program and first options) and its end, never a cut tail."""
    text = argv[-1] if argv[:2] == ("/bin/sh", "-c") else " ".join(argv)
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]} … {text[-(limit - head - 3) :]}"


def excerpt(data: bytes | str, limit: int = 80) -> str:
    """What the agent sent, for a message: quoted, cut at `limit`, bytes that are not UTF-8 as escapes."""
    text = data.decode("utf-8", "backslashreplace") if isinstance(data, bytes) else data
    return repr(text[:limit]) + (" …" if len(text) > limit else "")


class GuestAgent:
    """A connection to one guest's qemu-ga; thread-safe, one command at a time."""

    #: How long a resync waits for its answer before it reconnects (and then before it gives up).
    sync_timeout: float = 1.0

    def __init__(self, node: str, socket_path: Path):
        self.node = node
        self._path = socket_path
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._sync_id = int(time.time() * 1000) % 1_000_000_000
        # Set while a command is out and until its answer is read: if it is still set at the next
        # command, the channel may hold a late or partial answer and is resynchronized first.
        self._dirty = False

    # -- connection -------------------------------------------------------

    def connect(self, deadline: float, alive: Callable[[], str | None]) -> float:
        """Wait until the agent answers; returns when it did (monotonic time).

        `alive` returns None while the guest's process runs, else why it is gone.
        """
        while True:
            self.still_waiting(deadline, alive)
            try:
                self._sock = unix_connect(self._path, timeout=1.0)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.05)
        while True:
            self.still_waiting(deadline, alive)
            try:
                if self._sync(until=min(deadline, time.monotonic() + self.sync_timeout)):
                    self._dirty = False
                    return time.monotonic()
            except AgentError:
                # The socket goes away with QEMU: say why QEMU went, if it did.
                time.sleep(0.2)
                if (gone := alive()) is not None:
                    raise AgentError(f"{self.node}: {gone}") from None
                raise

    def still_waiting(self, deadline: float, alive: Callable[[], str | None]) -> None:
        """Raise AgentError if the guest is gone or the deadline passed: a `connect` loop goes on only if not."""
        if (gone := alive()) is not None:
            raise AgentError(f"{self.node}: {gone}")
        if time.monotonic() > deadline:
            raise AgentError(f"{self.node}: the guest agent did not answer in time")

    def _sync(self, until: float) -> bool:
        """Send guest-sync-delimited with a fresh id; True once its answer came, every line before it dropped.

        The 0xFF sent first resets the agent's JSON parser, in case an earlier write was cut short
        (qemu-ga answers it with a parse error, dropped like any other stale line). The answer's own
        0xFF marks where it starts, so a stale partial line in front of it is cut off.
        """
        self._sync_id += 1
        wanted = self._sync_id
        message = {"execute": "guest-sync-delimited", "arguments": {"id": wanted}}
        self._send(message, timeout=max(0.01, until - time.monotonic()), prefix=b"\xff")
        while (remaining := until - time.monotonic()) > 0:
            try:
                line = self._read_line(remaining)
            except TimeoutError:
                return False
            try:
                reply = self._parse(line.rpartition(b"\xff")[2])
            except AgentError:
                continue  # garbage before the sync's answer is what a resync is for
            if reply.get("return") == wanted:
                return True
        return False

    def _resync(self) -> None:
        """Bring the channel back in step before a command; reconnect if the agent stays silent.

        A silent agent may be busy with the command that timed out, or the socket may be half dead;
        a new connection (QEMU accepts one client at a time) gets a fresh chance.
        """
        if self._sock is not None:
            try:
                if self._sync(until=time.monotonic() + self.sync_timeout):
                    self._dirty = False
                    return
            except AgentError:
                pass  # the connection is gone: reconnect below
        self.close()
        try:
            self._sock = unix_connect(self._path, timeout=self.sync_timeout)
        except OSError as exc:
            raise AgentError(f"{self.node}: lost the guest agent connection and could not reconnect ({exc})") from None
        if not self._sync(until=time.monotonic() + self.sync_timeout):
            raise AgentError(
                f"{self.node}: the guest agent is out of step and did not answer "
                f"guest-sync-delimited in {self.sync_timeout:g} s, even on a new connection"
            )
        self._dirty = False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer = b""

    # -- wire format ------------------------------------------------------

    def _send(self, message: dict, timeout: float, prefix: bytes = b"") -> None:
        """Write one message whole.

        MSG_NOSIGNAL: writing to a dead guest's socket must raise here, not kill the harness with
        SIGPIPE (the CLI may run with SIGPIPE at its default disposition, as `| head` wants).
        """
        assert self._sock is not None, "connect() first"
        data = memoryview(prefix + json.dumps(message).encode() + b"\n")
        self._sock.settimeout(timeout)
        try:
            while data:
                data = data[self._sock.send(data, socket.MSG_NOSIGNAL) :]
        except TimeoutError:
            raise AgentError(f"{self.node}: the guest agent took no input for {timeout:.0f} s") from None
        except OSError as exc:
            raise AgentError(f"{self.node}: lost the guest agent connection ({exc})") from None

    def _read_line(self, timeout: float) -> bytes:
        """The next non-empty line, stripped; TimeoutError if none is complete in `timeout` seconds."""
        assert self._sock is not None, "connect() first"
        end = time.monotonic() + timeout
        while True:
            line, newline, rest = self._buffer.partition(b"\n")
            if newline:
                self._buffer = rest
                if line.lstrip(b"\xff").strip():
                    return line.strip()
                continue
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:  # an OSError too, but the caller's to judge
                raise
            except OSError as exc:  # ECONNRESET and the like
                raise AgentError(f"{self.node}: lost the guest agent connection ({exc})") from None
            if not chunk:
                if self._buffer.strip():
                    raise AgentError(
                        f"{self.node}: the guest agent closed the connection in the middle "
                        f"of a reply: {excerpt(self._buffer)}"
                    )
                raise AgentError(f"{self.node}: the guest agent closed the connection")
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE_BYTES and b"\n" not in chunk:
                self._buffer = b""  # the rest of the line is garbage to the next resync
                raise AgentError(
                    f"{self.node}: the guest agent sent a line longer than the {MAX_LINE_BYTES >> 20} MiB niclab reads"
                )

    def _parse(self, line: bytes) -> dict:
        """One reply line as a JSON object; anything else is reported with what came."""
        try:
            reply = jsonbound.loads(line.lstrip(b"\xff").decode("utf-8"))
        except UnicodeDecodeError:
            raise AgentError(f"{self.node}: the guest agent sent bytes that are not UTF-8: {excerpt(line)}") from None
        except ValueError:
            raise AgentError(f"{self.node}: the guest agent sent a line that is not JSON: {excerpt(line)}") from None
        if not isinstance(reply, dict):
            raise AgentError(f"{self.node}: the guest agent sent JSON that is not an object: {excerpt(line)}")
        return reply

    def _read_message(self, timeout: float) -> dict:
        return self._parse(self._read_line(timeout))

    def call(self, command: str, arguments: dict | None = None, timeout: float = 30.0) -> Any:
        """Run one agent command and return its "return" value."""
        message: dict = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        with self._lock:
            if self._dirty:
                self._resync()
            # Until a well-formed answer is read, any way out (timeout, garbage, a lost connection,
            # an interrupt) leaves the channel possibly holding what belongs to this command.
            self._dirty = True
            self._send(message, timeout)
            try:
                reply = self._read_message(timeout)
            except TimeoutError:
                raise AgentError(f"{self.node}: no answer to {command} in {timeout:.0f} s") from None
            if "error" not in reply and "return" not in reply:
                raise AgentError(
                    f"{self.node}: {command}: the guest agent's reply has neither "
                    f'"return" nor "error": {excerpt(json.dumps(reply))}'
                )
            self._dirty = False
        if "error" in reply:
            error = reply["error"]
            why = error.get("desc", error) if isinstance(error, dict) else error
            raise AgentError(f"{self.node}: {command}: {why}")
        return reply["return"]

    def _expect(self, command: str, value: object, kind: type[_Shape], what: str) -> _Shape:
        """`value` if it is a `kind`; a reply of the wrong shape is the agent's error, not a KeyError later."""
        if not isinstance(value, kind) or isinstance(value, bool):
            expected = "an object" if kind is dict else "an integer"
            raise AgentError(
                f"{self.node}: {command}: the guest agent's {what} is not {expected}: {excerpt(json.dumps(value))}"
            )
        return value

    def _b64(self, command: str, value: Any, what: str) -> bytes:
        """The bytes a base64 field carries; a field that is not base64 is the agent's error, not binascii's."""
        try:
            return base64.b64decode(value)
        except (ValueError, TypeError):
            raise AgentError(
                f"{self.node}: {command}: the guest agent's {what} is not base64: {excerpt(json.dumps(value))}"
            ) from None

    # -- commands ---------------------------------------------------------

    def start(self, argv: tuple[str, ...], stdin: bytes | None = None) -> int:
        arguments: dict = {"path": argv[0], "arg": list(argv[1:]), "capture-output": True}
        if stdin is not None:
            arguments["input-data"] = base64.b64encode(stdin).decode()
        reply = self._expect("guest-exec", self.call("guest-exec", arguments), dict, "reply")
        return self._expect("guest-exec", reply.get("pid"), int, "pid")

    def status(self, pid: int, argv: tuple[str, ...], started: float) -> CommandResult | None:
        command = "guest-exec-status"
        state = self._expect(command, self.call(command, {"pid": pid}), dict, "reply")
        if not state.get("exited"):
            return None
        code = state.get("exitcode")
        if code is None:  # killed by a signal
            code = 128 + self._expect(command, state.get("signal", 0), int, "signal")
        return CommandResult(
            node=self.node,
            argv=argv,
            returncode=self._expect(command, code, int, "exitcode"),
            stdout=self._b64(command, state.get("out-data", ""), "out-data").decode(errors="replace"),
            stderr=self._b64(command, state.get("err-data", ""), "err-data").decode(errors="replace"),
            seconds=time.monotonic() - started,
        )

    def wait(self, pid: int, argv: tuple[str, ...], started: float, timeout: float) -> CommandResult:
        waiting = time.monotonic()
        deadline = waiting + timeout
        while True:
            result = self.status(pid, argv, started)
            if result is not None:
                return result
            now = time.monotonic()
            if now > deadline:
                self.kill(pid)
                raise GuestCommandError(f"{self.node}: `{shorten(argv)}` did not finish in {timeout:.0f} s; killed it")
            # from when the wait began: a server long running is asked soon after it was told to stop
            time.sleep(poll_interval(now - max(started, waiting)))

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
                chunk = base64.b64encode(data[offset : offset + 48 * 1024]).decode()
                self.call("guest-file-write", {"handle": handle, "buf-b64": chunk})
        finally:
            self.call("guest-file-close", {"handle": handle})

    def read_file(self, path: str, limit: int = MAX_FILE_BYTES, seconds: float = FILE_SECONDS) -> bytes:
        """The guest's file `path`, at most `limit` bytes, read within `seconds`: else AgentError naming the node,
        the file and the bound (a guest that never says eof, or sends more than asked, is refused)."""
        handle = self.call("guest-file-open", {"path": path, "mode": "r"})
        parts: list[bytes] = []
        total = 0
        command = "guest-file-read"
        deadline = time.monotonic() + seconds
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AgentError(f"{self.node}: reading {path} took more than {seconds:.0f} s; gave up")
                asked = min(FILE_CHUNK, limit + 1 - total)  # one byte past the limit tells a file over it
                try:
                    reply = self.call(command, {"handle": handle, "count": asked}, timeout=min(30.0, left))
                except AgentError:
                    if time.monotonic() >= deadline:
                        raise AgentError(
                            f"{self.node}: reading {path} took more than {seconds:.0f} s; gave up"
                        ) from None
                    raise
                chunk = self._expect(command, reply, dict, "reply")
                data = self._b64(command, chunk.get("buf-b64", ""), "buf-b64")
                if len(data) > asked:
                    raise AgentError(f"{self.node}: {command} of {path}: {len(data)} bytes sent, {asked} asked")
                total += len(data)
                if total > limit:
                    raise AgentError(f"{self.node}: {path} is larger than the {limit >> 20} MiB niclab reads of it")
                parts.append(data)
                if chunk.get("eof"):
                    break
        except AgentError:
            self._close_quietly(handle)  # the error says it all; a close that fails too would hide it
            raise
        self.call("guest-file-close", {"handle": handle}, timeout=10.0)
        return b"".join(parts)

    def _close_quietly(self, handle: int) -> None:
        try:
            self.call("guest-file-close", {"handle": handle}, timeout=5.0)
        except AgentError:
            pass


def connect_all(
    agents: dict[str, GuestAgent], deadline: float, alive: dict[str, Callable[[], str | None]]
) -> tuple[dict[str, float], dict[str, str]]:
    """Connect every agent at once: when each answered, and why the others did not (those are closed)."""

    def connect(name: str) -> float:
        try:
            return agents[name].connect(deadline, alive[name])
        except AgentError:
            agents[name].close()
            raise

    answered, errors = at_once({name: partial(connect, name) for name in agents})
    unexpected = [exc for exc in errors.values() if not isinstance(exc, AgentError)]
    if unexpected:  # a bug, or Ctrl-C: raised as itself
        raise unexpected[0]
    return answered, {name: str(exc) for name, exc in errors.items()}


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
        done = self.poll()
        if done is None:
            self._agent.kill(self.pid, "TERM")
            try:
                return self.wait(grace)
            except GuestCommandError:  # wait() already sent SIGKILL
                return self.wait(10)
        return done


class AgentNode:
    """A Node handle whose commands go through qemu-ga (emulated and libvirt guests).

    Every command runs under `setsid`, as the leader of its own process group,
    so a timeout or a stop ends it and everything it started (a shell's
    children would otherwise keep the output pipes, and the agent, waiting).
    """

    def __init__(self, name: str, agent: GuestAgent):
        self.name = name
        self.agent = agent

    def run(self, command: Command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        argv = as_argv(command)
        started = time.monotonic()
        pid = self.agent.start(("setsid",) + argv)
        result = self.agent.wait(pid, argv, started, timeout)
        return result.check() if check else result

    def spawn(self, command: Command) -> AgentProcess:
        argv = as_argv(command)
        return AgentProcess(self.agent, self.agent.start(("setsid",) + argv), argv)

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.agent.write_file(path, data)
        self.run(["/bin/chmod", f"{mode:o}", path])

    def get(self, path: str) -> bytes:
        return self.agent.read_file(path)
