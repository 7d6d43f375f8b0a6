"""Booted rigs that several cells share: cells that differ only in what netconf sets boot once.

`BootKeeper.get(topology, workdir)` boots, or hands back the rig already up; `drop()` after a failure, so the
next cell boots afresh; `shared_boots` groups cells by topology (docs/architecture.md, "Cells that differ
only in what netconf sets share one boot").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from niclab.base.node import Progress
from niclab.model.topology import Topology
from niclab.plumbing.backends.base import Backend, Rig
from niclab.plumbing.netconf import NetPlan


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


class BootKeeper:
    """Hands out a booted rig per topology, keeping the last one up for the next cell that needs it."""

    def __init__(self, backend: Backend, progress: Progress, first: int = 1):
        self.backend = backend
        self.progress = progress
        self.current: Booted | None = None
        self._stack: ExitStack | None = None
        self._boots = first - 1  # the number of its first boot: a parallel run's unit boots where a sequential would
        self._dropping = threading.Lock()  # a parallel run drops a unit's rig from its main thread on Ctrl-C

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
        with self._dropping:
            stack, self._stack, self.current = self._stack, None, None
        if stack is not None:
            stack.close()

    def __enter__(self) -> BootKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()


def shared_boots(topologies: Sequence[Topology]) -> list[list[int]]:
    """Indices of cells grouped by equal topology, groups in order of first appearance: each group boots once."""
    groups: dict[Topology, list[int]] = {}
    for index, topology in enumerate(topologies):
        groups.setdefault(topology, []).append(index)
    return list(groups.values())


def turns(rounds: Sequence[int]) -> list[tuple[int, range]]:
    """The order in which the cells of one boot run: (cell's place in the group, the rounds it runs now).

    When they repeat, round r of each runs before round r + 1 of any, and
    each round starts one cell later than the one before (A1 B1 B2 A2 A3 B3
    …), so a cell's place in the round (first after a boot, after another
    cell's network) favours none. A cell alone, or cells that run once, run
    all their rounds in one go.
    """
    if len(rounds) < 2 or max(rounds) < 2:
        return [(place, range(1, count + 1)) for place, count in enumerate(rounds)]
    steps: list[tuple[int, range]] = []
    for r in range(1, max(rounds) + 1):
        first = (r - 1) % len(rounds)
        order = [*range(first, len(rounds)), *range(first)]
        steps += [(place, range(r, r + 1)) for place in order if r <= rounds[place]]
    return steps


def network_setups(rounds: Sequence[int]) -> list[int]:
    """How often each cell of one boot configures its network: once, and again each time it follows another cell."""
    setups, last = [0] * len(rounds), None
    for place, _ in turns(rounds):
        setups[place] += place != last
        last = place
    return setups
