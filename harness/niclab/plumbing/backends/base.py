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
from typing import Protocol, runtime_checkable

from niclab.base.node import Node, Progress
from niclab.model.facts import RigFacts
from niclab.model.lab.inventory import Inventory
from niclab.model.lab.spread import Claim, Held
from niclab.model.topology import Port, Topology
from niclab.plumbing.drivers.asked import AskedModule


def _all_alive() -> dict[str, str]:
    return {}


def _no_host_pids() -> dict[str, int]:
    return {}


def _no_console(node: str) -> str:
    return ""


@dataclass
class Rig:
    """Running nodes, how to find each port in its guest, and facts about the realization."""

    topology: Topology
    nodes: dict[str, Node]
    macs: dict[tuple[str, int, int], str]  # Port.key -> MAC address the guest sees
    facts: RigFacts = field(default_factory=RigFacts)
    drivers: dict[tuple[str, int, int], str] = field(default_factory=dict)  # Port.key -> the driver it binds
    # Port.key -> the module a scenario's `driver:` asks its card to be bound to, and what proves it (netconf.modules)
    modules: dict[tuple[str, int, int], AskedModule] = field(default_factory=dict)
    gone: Callable[[], dict[str, str]] = _all_alive  # node -> why it is gone, for the nodes that died
    # node -> the PID of the host process that runs it (QEMU), for nodes on this host: niclab.plumbing.contention
    host_pids: Callable[[], dict[str, int]] = _no_host_pids
    console: Callable[[str], str] = _no_console  # node -> the end of its serial console (a crash's oops or panic)
    # node -> the unix socket that carries its serial line (`niclab console`), for backends that give one
    serial_sockets: dict[str, Path] = field(default_factory=dict)

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


@runtime_checkable
class Spreading(Protocol):
    """A backend whose cells may run at once over a lab (`run --parallel`): it says what a cell would hold."""

    def claim(self, topology: Topology, held: Held) -> tuple[Claim, Backend] | None:
        """What the cell would hold if it started now beside what running cells hold, and a backend that
        realizes it there; None if it must wait. Raises niclab.model.lab.match.Unrealizable if it never fits."""
        ...


class BackendOptions:
    """What the command line gives backends: a lab inventory, and the values of the options the backends
    declare (`BackendPlugin.options`), by their `dest`. Each backend takes what it uses."""

    def __init__(self, lab: Inventory | None = None, **given: str | bool | None):
        self.lab = lab
        self.given = given

    def text(self, dest: str) -> str | None:
        """A value option's text (e.g. `libvirt_uri`), None if not given."""
        value = self.given.get(dest)
        return value if isinstance(value, str) and value else None

    def flag(self, dest: str) -> bool:
        """Whether a flag (e.g. `wait`) was given."""
        return self.given.get(dest) is True


@dataclass(frozen=True)
class BackendOption:
    """A command-line option a backend declares: `--NAME` of niclab's verbs, `--niclab-NAME` of the pytest plugin."""

    name: str  # e.g. "libvirt-uri"
    help: str
    metavar: str | None = None  # None: a flag, off unless given
    default: str | None = None
    starts_nodes: bool = False  # only where nodes start (`run`, a pytest cell), not where cells are checked

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flag(self) -> bool:
        return self.metavar is None


@dataclass(frozen=True)
class DownRequest:
    """What `niclab down` was asked: also leftovers of runs still going, a lab's hosts, the down options' values."""

    include_running: bool = False
    lab: Inventory | None = None
    given: dict[str, str | bool | None] = field(default_factory=dict)


Say = Callable[[str], None]


@dataclass(frozen=True)
class Leftovers:
    """What a killed run of the backend leaves behind, and how `niclab down` ends it.

    `end` says each leftover it ended or left alone (`say`: a line of the output; `complain`: one of the
    errors) and returns their names; `options` are down's own options for it. `niclab down` asks the
    backends in `order` (the host's own processes first).
    """

    end: Callable[[DownRequest, Say, Say], list[str]]
    options: tuple[BackendOption, ...] = ()
    order: int = 0


@dataclass(frozen=True)
class BackendPlugin:
    """A backend module's entry: its name, one line on what it does, and how to make one from options; and
    what it knows that the front ends ask: its command-line options, its leftovers, whether the kernels its
    guests boot are checked before a run (`kernel_check`), and whether it is the default (without a lab, or
    with one)."""

    name: str
    summary: str
    create: Callable[..., Backend]
    options: tuple[BackendOption, ...] = ()
    leftovers: Leftovers | None = None
    kernel_check: bool = True  # its guests boot the image's kernels: each is checked for the drivers a cell needs
    default: bool = False  # the backend of a run without a lab
    lab_default: bool = False  # the backend of a run with a lab (it passes the lab's cards through)
