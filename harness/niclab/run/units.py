"""Which cells run at once (`run --parallel`): units of cells, and when each may start. Pure: no threads.

A unit is the cells that share a boot (niclab.run.rigs.shared_boots): equal
topologies run back to back on one rig, their repeats interleaved, so they
stay one unit on one placement; a cell alone is a unit of one. Units are
numbered in the order a sequential run runs them, which is the order their
records go to results.jsonl.

A unit holds resources while it runs (niclab.model.lab.spread.Claim): the
lab cards it is placed on, or vCPUs and memory on the hosts its emulated
nodes run on. `starts` says which waiting units start now: going through
them in order, each that fits beside what the running units (and those
started before it in this pass) hold starts, so the earliest unit that fits
starts first, and a later small unit may start while an earlier big one
waits. No two running units ever hold one card.
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
