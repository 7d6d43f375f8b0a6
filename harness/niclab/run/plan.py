"""Estimate how long a scenario's cells take, without booting anything.

A cell costs its boot, its network set-ups and checks, and its benchmarks (each estimates itself); cells that
share a boot pay for it once. The figures are TCG's on a 2-core host: run/progress scales them by the pace a
run keeps (docs/architecture.md, "The time left is the plan's").
"""

from __future__ import annotations

from dataclasses import dataclass

from niclab.model.scenario import BenchmarkSpec, Cell
from niclab.run.rigs import network_setups, shared_boots

BOOT_S = 8.0  # QEMU start to every agent answering, under TCG
NETWORK_S = 4.0  # configure, read back, ping each wire
PER_SEGMENT_PING_S = 1.0
BUILD_S = 60.0  # a driver built for a Debian kernel: a root with its headers, then make (55-62 s measured here)


@dataclass(frozen=True)
class CellEstimate:
    cell: Cell
    boot_s: float
    network_s: float
    benchmarks_s: float

    @property
    def total_s(self) -> float:
        return self.boot_s + self.network_s + self.benchmarks_s


def repeats(cell: Cell, repeat: int | None = None) -> list[int]:
    """Each benchmark's number of runs (`repeat` overrides the scenario's and the benchmarks' own, as --repeat)."""
    return [repeat or spec.options.repeat or cell.scenario.repeat for spec in cell.scenario.benchmarks]


def run_once(cells: list[Cell], repeat: int | None = None) -> list[str]:
    """The labels of the benchmarks that run once in some cell and report a figure that moves with the guests'
    speed (a rate or a time: what compare judges by its samples), and run once by default: nothing (the
    scenario, the benchmark, --repeat) said `repeat: 1`. One sample is no test: compare says `untested`, and
    the report's spread is unknown. A selftest's pass or fail needs no repeat."""
    found: dict[str, None] = {}
    for cell in cells:
        chosen = repeat is not None or "repeat" in cell.scenario.model_fields_set
        for spec, runs in zip(cell.scenario.benchmarks, repeats(cell, repeat), strict=True):
            said = chosen or spec.options.repeat is not None
            if runs == 1 and not said and any(metric.pace for metric in spec.plugin.metrics()):
                found[spec.describe()] = None
    return list(found)


def once_warning(name: str, cells: list[Cell], repeat: int | None = None) -> str | None:
    """The warning `validate` and `plan` print for benchmarks that run once, with the fix; None if none does."""
    once = run_once(cells, repeat)
    if not once:
        return None
    listed = ", ".join(once[:5]) + (f" and {len(once) - 5} more" if len(once) > 5 else "")
    return (
        f"{name}: warning: {listed} run{'s' if len(once) == 1 else ''} once per cell: one sample cannot tell a "
        "change from noise (compare says untested); add repeat: 3 to the scenario"
    )


def rounds(cell: Cell, repeat: int | None = None) -> int:
    """How many rounds the cell runs: its most repeated benchmark's repeats."""
    return max(repeats(cell, repeat), default=1)


def run_seconds(spec: BenchmarkSpec) -> float:
    """One run of a benchmark: what it estimates for itself, and a second to start it and read its results."""
    return spec.plugin.estimate_seconds(spec.options) + 1


def estimate(cell: Cell, boots: bool = True, setups: int = 1, repeat: int | None = None) -> CellEstimate:
    scenario = cell.scenario
    wires = sum(link.count if not link.bond else 1 for link in scenario.links)
    benchmarks = sum(run_seconds(spec) * n for spec, n in zip(scenario.benchmarks, repeats(cell, repeat), strict=True))
    network = (NETWORK_S + PER_SEGMENT_PING_S * wires) * setups
    return CellEstimate(cell, BOOT_S if boots else 0.0, network, benchmarks)


def estimates(cells: list[Cell], repeat: int | None = None) -> list[CellEstimate]:
    """Each cell's estimate, in order: the first cell of a boot pays for it; each pays for every network set-up."""
    found: dict[int, CellEstimate] = {}
    for group in shared_boots([cell.topology for cell in cells]):
        setups = network_setups([rounds(cells[i], repeat) for i in group])
        for place, i in enumerate(group):
            found[i] = estimate(cells[i], place == 0, setups[place], repeat)
    return [found[i] for i in range(len(cells))]


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
    found = estimates(cells)
    boots = sum(1 for e in found if e.boot_s)
    width = max([len("cell"), *(len(e.cell.id) for e in found)]) + 2
    lines = [f"{'cell':<{width}}{'nodes':>5}  {'links':>5}  {'benchmarks':>10}  estimate"]
    for e in found:
        s = e.cell.scenario
        lines.append(
            f"{e.cell.id:<{width}}{len(s.nodes):>5}  {len(s.links):>5}  {len(s.benchmarks):>10}  {duration(e.total_s)}"
        )
    total = sum(e.total_s for e in found)
    lines.append(
        f"scenario {name}: {len(cells)} cell{'s' if len(cells) != 1 else ''}, about {duration(total)} "
        f"(TCG on 2 cores; {boots} boot{'s' if boots != 1 else ''} and network set-ups included)"
    )
    builds = {(spec.kernel, choice) for c in cells for spec in c.topology.nodes for _, choice in spec.drivers}
    if builds:
        lines.append(
            f"and {len(builds)} driver build{'s' if len(builds) != 1 else ''} before anything boots "
            f"(about {duration(BUILD_S * len(builds))} the first time; cached per source and kernel after that)"
        )
    return "\n".join(lines)
