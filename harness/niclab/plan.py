"""Estimate how long a scenario's cells take, without booting anything.

A cell costs its boot, its network set-up and check, and its benchmarks
(each benchmark estimates itself); cells that share a boot (niclab.rigs) pay
for it once. Boot and set-up figures are what TCG
takes on a 2-core host; KVM boots faster, which the estimate ignores.
"""

from __future__ import annotations

from dataclasses import dataclass

from niclab.rigs import shared_boots
from niclab.scenario import Cell

BOOT_S = 8.0  # QEMU start to every agent answering, under TCG
NETWORK_S = 4.0  # configure, read back, ping each wire
PER_SEGMENT_PING_S = 1.0


@dataclass(frozen=True)
class CellEstimate:
    cell: Cell
    boot_s: float
    network_s: float
    benchmarks_s: float

    @property
    def total_s(self) -> float:
        return self.boot_s + self.network_s + self.benchmarks_s


def estimate(cell: Cell, boots: bool = True) -> CellEstimate:
    scenario = cell.scenario
    wires = sum(link.count if not link.bond else 1 for link in scenario.links)
    benchmarks = sum(
        (spec.plugin.estimate_seconds(spec.options) + 1) * (spec.options.repeat or scenario.repeat)
        for spec in scenario.benchmarks
    )
    return CellEstimate(cell, BOOT_S if boots else 0.0, NETWORK_S + PER_SEGMENT_PING_S * wires, benchmarks)


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def plan_table(name: str, cells: list[Cell]) -> str:
    booting = {group[0] for group in shared_boots([cell.scenario.topology() for cell in cells])}
    estimates = [estimate(cell, n in booting) for n, cell in enumerate(cells)]
    width = max([len("cell"), *(len(e.cell.id) for e in estimates)]) + 2
    lines = [f"{'cell':<{width}}{'nodes':>5}  {'links':>5}  {'benchmarks':>10}  estimate"]
    for e in estimates:
        s = e.cell.scenario
        lines.append(
            f"{e.cell.id:<{width}}{len(s.nodes):>5}  {len(s.links):>5}  {len(s.benchmarks):>10}  {duration(e.total_s)}"
        )
    total = sum(e.total_s for e in estimates)
    lines.append(
        f"scenario {name}: {len(cells)} cell{'s' if len(cells) != 1 else ''}, about {duration(total)} "
        f"(TCG on 2 cores; {len(booting)} boot{'s' if len(booting) != 1 else ''} and network set-ups included)"
    )
    return "\n".join(lines)
