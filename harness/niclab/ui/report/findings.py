"""Findings the report flags on its own, as a careful reader of a NIC study would.

The benchmarks declare which of their metrics are checked how (model.bench.declare): a dip in a curve,
unstable results, one metric far short of another, a bond's interrupts on one CPU, host contention
(docs/reports.md, `niclab report`).
"""

from __future__ import annotations

from dataclasses import dataclass

from niclab.model import bench
from niclab.model.bench import Dip, Shortfall
from niclab.ui.report.data import CellData, RunData
from niclab.ui.report.figures import size_label
from niclab.ui.report.plots import size_curve

DIP_DEPTH = 0.15  # a dip is at least 15 % below the lower of its two neighbours
IRQ_ONE_CPU_SHARE = 0.9  # a CPU took more than 90 % of a bond's interrupts


@dataclass(frozen=True)
class Finding:
    kind: str  # dip, unstable, irq-one-cpu, host-contention, or a benchmark's shortfall (udp-receiver)
    where: str  # scenario · cell
    text: str


def dips(curve: list[list[float]], depth: float = DIP_DEPTH) -> list[tuple[int, float, float]]:
    """(size, throughput, the lower neighbour's throughput) of each point well below both neighbours."""
    found = []
    for left, point, right in zip(curve, curve[1:], curve[2:], strict=False):
        floor = min(left[1], right[1])
        if floor > 0 and point[1] < (1 - depth) * floor:
            found.append((int(point[0]), point[1], floor))
    return found


def find(run: RunData) -> list[Finding]:
    declared = bench.findings()
    found: list[Finding] = []
    for cell in run.cells:
        where = f"{run.scenario} · {cell.id}"
        for dip in (d for d in declared if isinstance(d, Dip)):
            for size, value, floor in dips(size_curve(cell, dip.metric) or []):
                found.append(
                    Finding(
                        "dip",
                        where,
                        f"{dip.label} dips at {size_label(size)} bytes: {value:.0f} Mbit/s, "
                        f"{100 * (1 - value / floor):.0f} % below its neighbours",
                    )
                )
        contended = {s.label: s.contention for s in cell.summaries if s.contended}
        for benchmark, reasons in contended.items():
            found.append(Finding("host-contention", where, f"{benchmark}: host contention: {'; '.join(reasons)}"))
        for s in cell.summaries:
            if s.unstable and s.headline:
                found.append(Finding("unstable", where, f"{s.label} {s.metric} is unstable: {'; '.join(s.reasons)}"))
        for short in (d for d in declared if isinstance(d, Shortfall)):
            whole, part = cell.summary(short.whole), cell.summary(short.part)
            if whole and part and whole.mean > 0 and part.mean < short.share * whole.mean:
                percent = 100 * part.mean / whole.mean
                text = short.text.format(whole=whole.mean, part=part.mean, percent=percent)
                found.append(Finding(short.kind, where, text))
        found += _bond_irqs(cell, where)
    return found


def _bond_irqs(cell: CellData, where: str) -> list[Finding]:
    found = []
    for run in cell.runs.values():
        for node, nic in run.nics.items():
            if (nic.ports or 1) < 2:
                continue
            per_cpu: list[int] = []
            for port in run.counters.get(node, {}).values():
                counts = port.interrupts_per_cpu
                per_cpu = [a + b for a, b in zip(per_cpu, counts, strict=False)] if per_cpu else list(counts)
            total = sum(per_cpu)
            if len(per_cpu) >= 2 and total and max(per_cpu) > IRQ_ONE_CPU_SHARE * total:
                cpu = per_cpu.index(max(per_cpu))
                found.append(
                    Finding(
                        "irq-one-cpu",
                        where,
                        f"{node}: {100 * max(per_cpu) / total:.0f} % of the interrupts of its "
                        f"{nic.ports} bonded ports landed on CPU {cpu} ({run.label})",
                    )
                )
                break
    return found
