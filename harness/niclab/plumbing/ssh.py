"""A node reached over SSH (Vagrant guests, lab hosts): the same Node protocol as the guest agent.

Commands run as root through `sudo -n` (Vagrant's user has password-less sudo);
a string runs through the guest's /bin/sh, a sequence as it is. The host key is
not checked: these are throw-away guests on a private management network.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from dataclasses import dataclass

from niclab.base.node import Command, CommandResult, GuestCommandError, as_argv
from niclab.base.procs import OutputTimedOut, OutputTooLarge, collect
from niclab.base.text import said
from niclab.plumbing.guest import MAX_FILE_BYTES, MAX_LINE_BYTES, shorten

CONNECT_TIMEOUT_S = 15
OUTPUT_LIMIT = MAX_LINE_BYTES  # of a command's output: as much as a guest agent's reply may carry


@dataclass(frozen=True)
class SshTarget:
    host: str
    port: int
    user: str
    key: str  # private key file

    def argv(self, remote: str) -> list[str]:
        """The ssh command that runs `remote` (one shell word string) on the target."""
        return [
            "ssh",
            "-q",
            "-i",
            self.key,
            "-p",
            str(self.port),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o",
            "ServerAliveInterval=5",
            f"{self.user}@{self.host}",
            remote,
        ]


def remote_command(argv: tuple[str, ...], as_root: bool = True) -> str:
    """The command line the remote shell runs for `argv`."""
    words = ("sudo", "-n", *argv) if as_root else argv
    return shlex.join(words)


class SshProcess:
    """A background command on the target; stopping it ends the remote process group, not just ssh."""

    def __init__(self, node: SshNode, argv: tuple[str, ...]):
        self._node, self.argv = node, argv
        self._started = time.monotonic()
        # setsid gives the command its own process group; its id is printed first so stop() can end the group.
        wrapped = remote_command(("/bin/sh", "-c", 'echo "$$"; exec setsid "$@"', "sh", *argv))
        self._proc = subprocess.Popen(
            node.target.argv(wrapped), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        assert self._proc.stdout is not None
        first = self._proc.stdout.readline(32).strip()  # the remote shell's pid: a short line, or nothing
        self.pid = int(first) if first.isdigit() else 0
        self._result: CommandResult | None = None

    def _finish(self, timeout: float) -> CommandResult:
        """Read what it printed (bounded, as SshNode.run reads) once it ended or ends within `timeout`."""
        try:
            stdout, stderr = collect(self._proc, timeout, OUTPUT_LIMIT)
        except OutputTooLarge:
            raise GuestCommandError(
                f"{self._node.name}: `{shorten(self.argv)}` printed more than {OUTPUT_LIMIT >> 20} MiB; ended it"
            ) from None
        self._result = CommandResult(
            self._node.name,
            self.argv,
            self._proc.returncode,
            stdout.decode(errors="replace"),
            stderr.decode(errors="replace"),
            round(time.monotonic() - self._started, 3),
        )
        return self._result

    def poll(self) -> CommandResult | None:
        if self._result is None and self._proc.poll() is not None:
            return self._finish(10)
        return self._result

    def wait(self, timeout: float) -> CommandResult:
        if self._result is None:
            try:
                return self._finish(timeout)
            except OutputTimedOut:
                self._kill_remote("KILL")
                raise GuestCommandError(
                    f"{self._node.name}: `{shorten(self.argv)}` did not finish in {timeout:.0f} s; killed it"
                ) from None
        return self._result

    def _kill_remote(self, signal: str) -> None:
        if self.pid:
            self._node.run(f"kill -{signal} -- -{self.pid} 2>/dev/null; true", timeout=30, check=False)

    def stop(self, grace: float = 5.0) -> CommandResult:
        if (done := self.poll()) is not None:
            return done
        self._kill_remote("TERM")
        try:
            return self._finish(grace)
        except OutputTimedOut:
            self._kill_remote("KILL")
            return CommandResult(self._node.name, self.argv, -9, "", "", round(time.monotonic() - self._started, 3))


class SshNode:
    def __init__(self, name: str, target: SshTarget):
        self.name = name
        self.target = target

    def _ssh(self, argv: tuple[str, ...], timeout: float, limit: int, what: str) -> tuple[int, bytes, bytes]:
        """Run `argv` on the target: its status and output, within `timeout` and `limit` bytes of stdout."""
        try:
            proc = subprocess.Popen(
                self.target.argv(remote_command(argv)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise GuestCommandError(f"{self.name}: cannot run ssh: {exc.strerror}") from None
        try:
            out, err = collect(proc, timeout, limit)
        except OutputTimedOut:
            raise GuestCommandError(f"{self.name}: {what} did not finish in {timeout:.0f} s") from None
        except OutputTooLarge:
            raise GuestCommandError(f"{self.name}: {what} printed more than {limit >> 20} MiB; refused") from None
        return proc.returncode, out, err

    def run(self, command: Command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        argv = as_argv(command)
        started = time.monotonic()
        code, out, err = self._ssh(argv, timeout, OUTPUT_LIMIT, f"`{shorten(argv)}`")
        stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
        if code == 255 and not stdout:
            raise GuestCommandError(
                f"{self.name}: ssh to {self.target.user}@{self.target.host}:{self.target.port} failed: "
                f"{said(stderr) or 'no reason given'}"
            )
        result = CommandResult(self.name, argv, code, stdout, stderr, round(time.monotonic() - started, 3))
        return result.check() if check else result

    def spawn(self, command: Command) -> SshProcess:
        return SshProcess(self, as_argv(command))

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        script = f"umask 077; cat > {shlex.quote(path)} && chmod {mode:o} {shlex.quote(path)}"
        proc = subprocess.run(
            self.target.argv(remote_command(("/bin/sh", "-c", script))), input=data, capture_output=True, timeout=120
        )
        if proc.returncode != 0:
            raise GuestCommandError(f"{self.name}: writing {path} failed: {said(proc.stderr.decode(errors='replace'))}")

    def get(self, path: str) -> bytes:
        code, out, err = self._ssh(("cat", path), 120, MAX_FILE_BYTES, f"reading {path}")
        if code != 0:
            raise GuestCommandError(f"{self.name}: reading {path} failed: {said(err.decode(errors='replace'))}")
        return out
