"""The summary table `niclab run` prints at the end of each cell, and `niclab show` prints again from the
run directory."""

from __future__ import annotations

from dataclasses import dataclass

from niclab.base.text import one_line
from niclab.model.expect import described
from niclab.run.records import CellRecord, ExpectationRecord, SummaryRecord
from niclab.run.runner import CellOutcome
from niclab.ui.formats import beside_their_link, drivers_line, metric_label, value_with_unit
from niclab.ui.report.data import CellData


@dataclass(frozen=True)
class CellView:
    """What a cell's table shows: as the run ends (its outcome) or read back (its records)."""

    id: str
    facts: CellRecord | None
    summaries: list[SummaryRecord]
    errors: list[str]
    expectations: list[tuple[bool, str]]  # (met, what was measured)

    @classmethod
    def of_outcome(cls, outcome: CellOutcome) -> CellView:
        verdicts = [(v.passed, v.describe()) for v in outcome.verdicts]
        return cls(outcome.cell.id, outcome.facts, outcome.summaries, outcome.errors, verdicts)

    @classmethod
    def of_records(cls, cell: CellData) -> CellView:
        """From a run directory (untrusted: its text is shown escaped, one line each)."""
        errors = [one_line(f"{_where(e.label, e.run)}{e.message}") for e in cell.errors]
        return cls(cell.id, cell.facts, cell.summaries, errors, [(e.passed, _described(e)) for e in cell.expectations])


def _where(label: str | None, run: str | None) -> str:
    """How a failure line names what failed: the benchmark and its run, as the runner's lines do."""
    if not label:
        return ""
    return f"{label} (run {run}): " if run else f"{label}: "


def _described(e: ExpectationRecord) -> str:
    """As the run said it as it ended (untrusted: escaped)."""
    return one_line(described(e.expectation, e.measured, e.unit, e.samples, e.where))


def _flags(summary: SummaryRecord) -> str:
    return " ".join(flag for flag, on in (("unstable", summary.unstable), ("contended", summary.contended)) if on)


def cell_table(scenario: str, cell: CellOutcome | CellView) -> str:
    outcome = cell if isinstance(cell, CellView) else CellView.of_outcome(cell)
    facts = outcome.facts
    accel = facts.rig.accel if facts is not None else None
    rows = beside_their_link([s for s in outcome.summaries if s.headline])  # a loopback row below the link's
    repeats = sorted({s.n for s in rows})
    header = f"scenario {scenario} · cell {outcome.id}" + (f" · accel={accel}" if accel else "")
    if repeats and repeats != [1]:
        level = rows[0].ci_level
        header += f" · {'/'.join(map(str, repeats))} runs, mean ± {level:g} % interval"
    cells = [(s.label, metric_label(s), value_with_unit(s), _flags(s)) for s in rows]
    width_a = max([len("benchmark"), *(len(c[0]) for c in cells)]) + 2
    width_b = max([len("metric"), *(len(c[1]) for c in cells)]) + 2
    width_c = max([len("value"), *(len(c[2]) for c in cells)]) + 2
    lines = [header]
    if facts is not None and facts.nodes:
        lines.append(drivers_line(facts))
    lines.append(f"{'benchmark':<{width_a}}{'metric':<{width_b}}value")
    for label, metric, value, flag in cells:
        lines.append(f"{label:<{width_a}}{metric:<{width_b}}{value:<{width_c}}{flag}".rstrip())
    for s in outcome.summaries:
        if s.unstable and s.headline:
            lines.append(f"unstable {s.label} {s.metric}: {'; '.join(s.reasons)}")
    contended = {s.label: s.contention for s in rows if s.contended}
    for benchmark, reasons in contended.items():
        lines.append(f"host contention during {benchmark}: {'; '.join(reasons)}")
    for error in outcome.errors:
        lines.append("FAILED: " + error.replace("\n", "\n        "))
    if outcome.expectations:
        met = sum(passed for passed, _ in outcome.expectations)
        lines.append(f"expectations: {met} met, {len(outcome.expectations) - met} missed")
        lines += [f"MISSED {said}" for passed, said in outcome.expectations if not passed]
    return "\n".join(lines)


def plain_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, the header first."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(f"{cell!s:<{width}}" for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )
