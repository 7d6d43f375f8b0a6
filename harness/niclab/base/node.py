"""What every guest handle is, whatever runs the guest: the Node protocol and what its commands return.

A backend (QEMU, libvirt, Vagrant) hands out Nodes; netconf, the benchmarks and the provenance talk only to
them. Progress is how long work says what it is doing: a callable taking one line.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from niclab.base.errors import NiclabError

Progress = Callable[[str], None]
Command = str | Sequence[str]


class GuestCommandError(NiclabError):
    """A command in a guest failed or timed out."""


class NodeGone(NiclabError):
    """A node's guest died (its process was killed or exited) while the cell used it."""


@dataclass(frozen=True)
class CommandResult:
    node: str
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self) -> CommandResult:
        if self.returncode != 0:
            shown = self.argv[-1] if self.argv[:2] == ("/bin/sh", "-c") else shlex.join(self.argv)
            detail = (self.stderr.strip() or self.stdout.strip())[-800:]
            raise GuestCommandError(f"{self.node}: `{shown}` exited {self.returncode}: {detail}")
        return self


def as_argv(command: Command) -> tuple[str, ...]:
    """A string runs through the guest's /bin/sh; a sequence is executed as it is."""
    return ("/bin/sh", "-c", command) if isinstance(command, str) else tuple(command)


class GuestProcess(Protocol):
    """A command started in the background in a guest (a benchmark server)."""

    def poll(self) -> CommandResult | None: ...

    def wait(self, timeout: float) -> CommandResult: ...

    def stop(self) -> CommandResult: ...


class Node(Protocol):
    name: str

    def run(self, command: Command, timeout: float = 60.0, check: bool = True) -> CommandResult: ...

    def spawn(self, command: Command) -> GuestProcess: ...

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    def get(self, path: str) -> bytes: ...
