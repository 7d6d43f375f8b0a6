"""Booted rigs that several cells share: cells that differ only in what netconf sets boot once.

Two cells whose topologies are equal (the same nodes with the same CPUs and
memory, the same NIC models on the same cables) need the same guests; only
what netconf sets in them differs (MTU, netem, offloads, bond mode,
addresses). The runner keeps such a rig booted from one cell to the next: the
next cell's Session undoes the previous cell's network, configures its own and
checks it as after a boot. A 5-value MTU sweep boots once, not five times.

    with RigKeeper(backend, progress) as rigs:
        booted = rigs.get(topology, workdir)   # boots, or hands back the rig already up
        ...
        rigs.drop()                            # after a failure: the next cell boots afresh
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from niclab.backends.base import Backend, Rig
from niclab.netconf import NetPlan
from niclab.topology import Topology

Progress = Callable[[str], None]


@dataclass
class Booted:
    """One boot of a topology, and what the cells that used it did to it."""

    rig: Rig
    topology: Topology
    number: int  # the run's first boot is 1
    boot_s: float
    ready_at: float  # time.monotonic() when every guest answered
    cells: list[str] = field(default_factory=list)  # the cells that used it, in order
    net: NetPlan | None = None  # the network as the last cell configured it
    # node -> port -> offload feature -> on, as the driver had it before any cell changed it
    baseline: dict[str, dict[str, dict[str, bool]]] = field(default_factory=dict)


class RigKeeper:
    """Hands out a booted rig per topology, keeping the last one up for the next cell that needs it."""

    def __init__(self, backend: Backend, progress: Progress):
        self.backend = backend
        self.progress = progress
        self.current: Booted | None = None
        self._stack: ExitStack | None = None
        self._boots = 0

    def get(self, topology: Topology, workdir: Path) -> Booted:
        if self.current is not None and self.current.topology == topology:
            return self.current
        self.drop()
        started = time.monotonic()
        stack = ExitStack()
        rig = stack.enter_context(self.backend.realize(topology, workdir, self.progress))  # a failure stops it all
        self._stack = stack
        self._boots += 1
        self.current = Booted(rig, topology, self._boots, round(time.monotonic() - started, 2), time.monotonic())
        return self.current

    def drop(self) -> None:
        """Stop the current rig's guests (after a failure, or when the next cell needs another topology)."""
        stack, self._stack, self.current = self._stack, None, None
        if stack is not None:
            stack.close()

    def __enter__(self) -> RigKeeper:
        return self

    def __exit__(self, *exc) -> None:
        self.drop()


def shared_boots(topologies: Sequence[Topology]) -> list[list[int]]:
    """Indices of cells grouped by equal topology, groups in order of first appearance: each group boots once."""
    groups: dict[Topology, list[int]] = {}
    for index, topology in enumerate(topologies):
        groups.setdefault(topology, []).append(index)
    return list(groups.values())
