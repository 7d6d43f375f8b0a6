"""The backend protocol: start nodes, hand out command channels, stop.

A backend knows how to bring up the nodes of a Topology and how to run
commands in them, and can say up front whether it can (`check`); it knows
nothing of benchmarks. Everything above it (netconf,
benchmarks, provenance) talks only to `Node` handles.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from niclab.base.node import Node, Progress
from niclab.model.lab.inventory import Inventory
from niclab.model.topology import Port, Topology


def _all_alive() -> dict[str, str]:
    return {}


def _no_host_pids() -> dict[str, int]:
    return {}


@dataclass
class Rig:
    """Running nodes, how to find each port in its guest, and facts about the realization."""

    topology: Topology
    nodes: dict[str, Node]
    macs: dict[tuple[str, int, int], str]  # Port.key -> MAC address the guest sees
    facts: dict = field(default_factory=dict)
    drivers: dict[tuple[str, int, int], str] = field(default_factory=dict)  # Port.key -> the driver it binds
    gone: Callable[[], dict[str, str]] = _all_alive  # node -> why it is gone, for the nodes that died
    # node -> the PID of the host process that runs it (QEMU), for nodes on this host: niclab.plumbing.contention
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
