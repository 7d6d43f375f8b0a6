"""A QEMU's monitor (QMP) over its unix socket: commands, with timeouts and bounded answers.

What the emulated backend asks of a QEMU it started: save a guest's state, start a restored one, plug its
cards in (plumbing/backends/saved_state.py, restore.py).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from niclab.base.errors import NiclabError
from niclab.plumbing.guest import unix_connect

MAX_LINE = 1 << 20  # an answer longer than this is not one QEMU gives to the commands sent here


class QmpError(NiclabError):
    """QMP could not be reached, or a command failed; the message names the node."""


class Qmp:
    """One QMP connection, capabilities negotiated; events are read past and dropped."""

    def __init__(self, node: str, path: Path, deadline: float, alive: Callable[[], str | None] = lambda: None):
        self.node = node
        self._buffer = b""
        self._sent = 0
        while True:
            try:
                self._sock = unix_connect(path, timeout=1.0)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if (gone := alive()) is not None:
                    raise QmpError(f"{node}: {gone}") from None
                if time.monotonic() > deadline:
                    raise QmpError(f"{node}: QEMU's monitor did not open {path}") from None
                time.sleep(0.01)
            except OSError as exc:
                raise QmpError(f"{node}: QEMU's monitor at {path}: {exc.strerror or exc}") from None
        try:
            self._line(deadline)  # the greeting
            self.execute("qmp_capabilities", timeout=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Qmp:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def execute(
        self, command: str, arguments: dict[str, Any] | None = None, timeout: float = 10.0, fd: int | None = None
    ) -> Any:
        """The command's `return`; QmpError naming the node and the command when QEMU says it failed. `fd` goes
        along with the command (SCM_RIGHTS), for `getfd`. Each command has an id: a late answer to an earlier
        one is not taken for its."""
        self._sent += 1
        message = {"execute": command, "id": self._sent, **({"arguments": arguments} if arguments else {})}
        data = json.dumps(message).encode() + b"\n"
        try:
            if fd is None:
                self._sock.sendall(data)
            else:
                socket.send_fds(self._sock, [data], [fd])
        except OSError as exc:
            raise QmpError(f"{self.node}: QEMU's monitor is gone ({exc.strerror}) at {command}") from None
        deadline = time.monotonic() + timeout
        while True:
            answer = self._line(deadline)
            if answer.get("id") != self._sent:
                continue  # an event, or the late answer to an earlier command
            if "return" in answer:
                return answer["return"]
            if "error" in answer:
                error = answer["error"]
                said = error.get("desc", error) if isinstance(error, dict) else error
                raise QmpError(f"{self.node}: QEMU refused {command}: {str(said)[:300]}")

    def _line(self, deadline: float) -> dict:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise QmpError(f"{self.node}: QEMU's monitor did not answer in time")
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise QmpError(f"{self.node}: QEMU's monitor is gone ({exc.strerror})") from None
            if not chunk:
                raise QmpError(f"{self.node}: QEMU's monitor closed (QEMU exited)")
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE:
                raise QmpError(f"{self.node}: QEMU's monitor sent a line of over {MAX_LINE} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            parsed = json.loads(line)
        except ValueError:
            raise QmpError(f"{self.node}: QEMU's monitor sent something that is not JSON") from None
        return parsed if isinstance(parsed, dict) else {}

    def send_fd(self, name: str, fd: int) -> None:
        """Hand QEMU an open file as `name` (for `migrate fd:NAME`)."""
        self.execute("getfd", {"fdname": name}, fd=fd)

    def wait_migration(self, deadline: float, alive: Callable[[], str | None] = lambda: None) -> dict:
        """Poll `query-migrate` until it says completed (its answer) or failed (QmpError with QEMU's reason)."""
        while True:
            status = self.execute("query-migrate", timeout=max(1.0, deadline - time.monotonic()))
            state = status.get("status") if isinstance(status, dict) else None
            if state == "completed":
                return status
            if state in ("failed", "cancelled"):
                why = status.get("error-desc", state) if isinstance(status, dict) else state
                raise QmpError(f"{self.node}: QEMU's migration {state}: {str(why)[:300]}")
            if (gone := alive()) is not None:
                raise QmpError(f"{self.node}: {gone}")
            if time.monotonic() > deadline:
                raise QmpError(f"{self.node}: QEMU's migration was not done in time (status {state})")
            time.sleep(0.01)
