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
from niclab.plumbing.guest import shorten

CONNECT_TIMEOUT_S = 15


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
            node.target.argv(wrapped), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        self.pid = int(self._proc.stdout.readline().strip() or 0)
        self._result: CommandResult | None = None

    def _finish(self, stdout: str, stderr: str) -> CommandResult:
        self._result = CommandResult(
            self._node.name,
            self.argv,
            self._proc.returncode,
            stdout,
            stderr,
            round(time.monotonic() - self._started, 3),
        )
        return self._result

    def poll(self) -> CommandResult | None:
        if self._result is None and self._proc.poll() is not None:
            stdout, stderr = self._proc.communicate()
            return self._finish(stdout, stderr)
        return self._result

    def wait(self, timeout: float) -> CommandResult:
        if self._result is None:
            try:
                stdout, stderr = self._proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stop()
                raise GuestCommandError(
                    f"{self._node.name}: `{shorten(self.argv)}` did not finish in {timeout:.0f} s; killed it"
                ) from None
            return self._finish(stdout, stderr)
        return self._result

    def stop(self, grace: float = 5.0) -> CommandResult:
        if (done := self.poll()) is not None:
            return done
        if self.pid:
            self._node.run(f"kill -TERM -- -{self.pid} 2>/dev/null; true", timeout=30, check=False)
        try:
            stdout, stderr = self._proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            if self.pid:
                self._node.run(f"kill -KILL -- -{self.pid} 2>/dev/null; true", timeout=30, check=False)
            self._proc.kill()
            stdout, stderr = self._proc.communicate()
        return self._finish(stdout, stderr)


class SshNode:
    def __init__(self, name: str, target: SshTarget):
        self.name = name
        self.target = target

    def run(self, command: Command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        argv = as_argv(command)
        started = time.monotonic()
        try:
            proc = subprocess.run(
                self.target.argv(remote_command(argv)), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise GuestCommandError(f"{self.name}: `{shorten(argv)}` did not finish in {timeout:.0f} s") from None
        if proc.returncode == 255 and not proc.stdout:
            raise GuestCommandError(
                f"{self.name}: ssh to {self.target.user}@{self.target.host}:{self.target.port} failed: "
                f"{proc.stderr.strip() or 'no reason given'}"
            )
        result = CommandResult(
            self.name, argv, proc.returncode, proc.stdout, proc.stderr, round(time.monotonic() - started, 3)
        )
        return result.check() if check else result

    def spawn(self, command: Command) -> SshProcess:
        return SshProcess(self, as_argv(command))

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        script = f"umask 077; cat > {shlex.quote(path)} && chmod {mode:o} {shlex.quote(path)}"
        proc = subprocess.run(
            self.target.argv(remote_command(("/bin/sh", "-c", script))), input=data, capture_output=True, timeout=120
        )
        if proc.returncode != 0:
            raise GuestCommandError(f"{self.name}: writing {path} failed: {proc.stderr.decode(errors='replace')}")

    def get(self, path: str) -> bytes:
        proc = subprocess.run(self.target.argv(remote_command(("cat", path))), capture_output=True, timeout=120)
        if proc.returncode != 0:
            raise GuestCommandError(f"{self.name}: reading {path} failed: {proc.stderr.decode(errors='replace')}")
        return proc.stdout
