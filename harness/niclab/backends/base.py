"""The backend protocol: start nodes, hand out command channels, stop.

A backend knows how to bring up the nodes of a Topology and how to run
commands in them, and can say up front whether it can (`check`); it knows
nothing of benchmarks. Everything above it (netconf,
benchmarks, provenance) talks only to `Node` handles.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from niclab.errors import NiclabError
from niclab.topology import Port, Topology

if TYPE_CHECKING:
    from niclab.lab.inventory import Inventory

Progress = Callable[[str], None]
Command = str | Sequence[str]


class GuestCommandError(NiclabError):
    """A command in a guest failed or timed out."""


class NodeGone(NiclabError):
    """A node's guest died (its process was killed or exited) while the cell used it."""


def _all_alive() -> dict[str, str]:
    return {}


def _no_host_pids() -> dict[str, int]:
    return {}


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


@dataclass
class Rig:
    """Running nodes, how to find each port in its guest, and facts about the realization."""

    topology: Topology
    nodes: dict[str, Node]
    macs: dict[tuple[str, int, int], str]  # Port.key -> MAC address the guest sees
    facts: dict = field(default_factory=dict)
    drivers: dict[tuple[str, int, int], str] = field(default_factory=dict)  # Port.key -> the driver it binds
    gone: Callable[[], dict[str, str]] = _all_alive  # node -> why it is gone, for the nodes that died
    # node -> the PID of the host process that runs it (QEMU), for nodes on this host: niclab.contention
    host_pids: Callable[[], dict[str, int]] = _no_host_pids

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def mac(self, port: Port) -> str:
        return self.macs[port.key]


class Backend(Protocol):
    name: str

    def check(self, topology: Topology) -> str | None:
        """Why this backend (with its options: a lab) cannot realize the topology, or None. Boots nothing."""
        ...

    def describe(self, topology: Topology, workdir: Path | None = None) -> list[str]:
        """How the topology would be realized, for `run --dry-run`; may write what it would start to workdir."""
        ...

    def realize(self, topology: Topology, workdir: Path, progress: Progress) -> AbstractContextManager[Rig]:
        """Start every node; on exit stop them all, whatever happened inside."""
        ...


@dataclass(frozen=True)
class BackendOptions:
    """What the command line gives backends: a lab inventory, a libvirt URI. Each takes what it uses."""

    lab: Inventory | None = None
    libvirt_uri: str | None = None
    wait: bool = False  # a lab card another run holds: wait for it (else refuse)
    force: bool = False  # take a lab card even though the host uses it (an address, a route)


@dataclass(frozen=True)
class BackendPlugin:
    """A backend module's entry: its name, one line on what it does, and how to make one from options."""

    name: str
    summary: str
    create: Callable[..., Backend]
