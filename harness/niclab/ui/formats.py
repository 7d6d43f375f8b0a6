"""How a figure and a cell's provenance read in a table: the run's printed table and the report's alike."""

from __future__ import annotations

from collections.abc import Sequence

from niclab.model.driver_choice import module_key
from niclab.model.facts import NicFacts
from niclab.run.records import CellRecord, SummaryRecord

UNIT_SUFFIXES = {"Mbit/s": "_mbps", "MB/s": "_mb_s", "us": "_us", "ms": "_ms", "%": "_pct"}
COUNTS = ("tests",)  # units of things counted: a whole number is shown as one (10 tests, not 10.0 tests)


def format_value(value: float, unit: str = "") -> str:
    if unit in COUNTS and value == int(value):
        return str(int(value))
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def value_with_unit(summary: SummaryRecord) -> str:
    """mean [± half-width of the interval], and the unit unless the metric's name says it."""
    text = format_value(summary.mean, summary.unit)
    if summary.n > 1 and summary.ci_low is not None and summary.ci_high is not None:
        text += f" ± {format_value((summary.ci_high - summary.ci_low) / 2)}"
    suffix = UNIT_SUFFIXES.get(summary.unit)
    return text if suffix and summary.metric.endswith(suffix) else f"{text} {summary.unit}"


def beside_their_link(summaries: Sequence[SummaryRecord]) -> list[SummaryRecord]:
    """The summaries in their order, except that a loopback reference (`peer: self`) comes right after the
    figure of the same metric, link and IP version that it stands beside, when that was measured too."""

    def beside(s: SummaryRecord) -> tuple[str, int, int]:
        return (s.name, s.link, s.family)

    measured = {beside(s) for s in summaries if s.peer is None}
    placed = [s for s in summaries if s.peer is None or beside(s) not in measured]
    for reference in summaries:
        if reference.peer is not None and beside(reference) in measured:
            after = max(n for n, s in enumerate(placed) if beside(s) == beside(reference))
            placed.insert(after + 1, reference)
    return placed


def metric_label(summary: SummaryRecord) -> str:
    """The metric, with its test in front when the benchmark's label does not already say it (fio patterns)."""
    test = summary.test
    return f"{test}.{summary.metric}" if test and test not in summary.label else summary.metric


def _driver(nic: NicFacts) -> str:
    """e1000e 6.1.0-50-amd64, and the module when it is not the driver's namesake or was built out of tree."""
    text = f"{'?' if nic.driver is None else nic.driver} {nic.version or ''}".strip()
    notes = []
    if nic.module and module_key(nic.module) != module_key(nic.driver or ""):
        notes.append(f"module {nic.module}")
    if nic.taint and "O" in nic.taint:
        notes.append("out of tree")
    return text + (f" ({', '.join(notes)})" if notes else "")


def drivers_line(facts: CellRecord) -> str:
    """What a cell's guests ran: each node's kernel and its NICs' drivers with their versions, said once when alike."""
    seen: dict[str, list[str]] = {}
    for node, info in sorted(facts.nodes.items()):
        drivers = sorted({_driver(nic) for nic in info.interfaces.values()})
        kernel = "?" if info.kernel is None else info.kernel
        text = f"kernel {kernel}" + (f", driver {', '.join(drivers)}" if drivers else "")
        seen.setdefault(text, []).append(node)
    if len(seen) == 1:
        return next(iter(seen))
    return "; ".join(f"{', '.join(nodes)}: {text}" for text, nodes in seen.items())
