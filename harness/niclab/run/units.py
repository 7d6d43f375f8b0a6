"""Which cells run at once (`run --parallel`): units of cells, and when each may start. Pure: no threads.

A unit is the cells that share a boot, numbered in a sequential run's order; it holds its cards or its hosts'
vCPUs and memory while it runs (model.lab.spread.Claim). `starts` starts, in order, each waiting unit that
fits beside what is held, so a later small unit may pass an earlier big one (docs/lab.md, "Running").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from niclab.model.lab.spread import Claim, Held
from niclab.model.topology import Topology
from niclab.run.rigs import shared_boots

P = TypeVar("P")  # what placing a unit gives besides its claim (a backend pinned to the placement)


@dataclass(frozen=True)
class Unit:
    """Cells that run on one boot, one placement: their places in the run's cell list."""

    number: int  # from 1, in the order of a sequential run
    cells: tuple[int, ...]
    topology: Topology


def units_of(topologies: Sequence[Topology]) -> list[Unit]:
    return [Unit(n, tuple(group), topologies[group[0]]) for n, group in enumerate(shared_boots(topologies), start=1)]


@dataclass(frozen=True)
class Start(Generic[P]):
    unit: Unit
    claim: Claim
    placed: P


Fits = Callable[[Unit, Held], "tuple[Claim, P] | None"]


def starts(waiting: Sequence[Unit], running: Sequence[Claim], fits: Fits[P]) -> list[Start[P]]:
    """The waiting units (in order) that start now beside the running ones; `fits` places a unit beside what
    is held, or says None (it waits)."""
    claims = list(running)
    started: list[Start[P]] = []
    for unit in waiting:
        held = Held.of(claims)
        found = fits(unit, held)
        if found is None:
            continue
        claim, placed = found
        if claim.cards & held.cards:  # a placement that shares a card: never, whatever `fits` says
            continue
        claims.append(claim)
        started.append(Start(unit, claim, placed))
    return started
