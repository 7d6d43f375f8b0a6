"""The classic summary table: one row per test, one column per card (or cell), as the NIC studies printed it.

Rows as the benchmarks declare them (model.bench.declare.Row), each value the mean ± its confidence interval's
half width; a loopback reference in its own row below the link's. Also as CSV (csvsafe) and Markdown
(docs/reports.md).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from niclab.model import bench
from niclab.run.records import SummaryRecord
from niclab.ui import csvsafe
from niclab.ui.formats import beside_their_link, drivers_line, format_value, metric_label
from niclab.ui.report.data import SHOWN_CELLS, CellData, RunData


@dataclass(frozen=True)
class Cell:
    mean: float | None
    half: float | None
    unstable: bool

    def text(self) -> str:
        if self.mean is None:
            return "–"
        value = format_value(self.mean) + (f" ± {format_value(self.half)}" if self.half else "")
        return value + (" *" if self.unstable else "")


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[tuple[str, str, list[Cell]]]  # (test, unit, one cell per column)
    notes: list[str]

    def csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["test", "unit"] + [csvsafe.text(h) for c in self.columns for h in (c, f"{c} ±")])
        for test, unit, cells in self.rows:
            writer.writerow(
                [csvsafe.text(test), csvsafe.text(unit)]
                + [
                    v
                    for c in cells
                    for v in ("" if c.mean is None else f"{c.mean:.6g}", "" if not c.half else f"{c.half:.6g}")
                ]
            )
        return out.getvalue()

    def markdown(self) -> str:
        lines = ["| test | unit | " + " | ".join(self.columns) + " |", "|---|---|" + "---|" * len(self.columns)]
        lines += [
            f"| {test} | {unit} | " + " | ".join(c.text() for c in cells) + " |" for test, unit, cells in self.rows
        ]
        return "\n".join(lines + [""] + [f"{note}" for note in self.notes]) + "\n"


def column_label(run: RunData, cell: CellData) -> str:
    return cell.card if run.axes == ["nic"] else cell.id


def summary_table(run: RunData) -> Table:
    """The table of the run's first SHOWN_CELLS cells (a note says how many more `niclab export` has)."""
    labels = bench.table_rows()
    shown = run.cells[:SHOWN_CELLS]
    first: dict[tuple[str, int, str | None, int], SummaryRecord] = {}  # (name, link, peer, family) -> the first
    for cell in shown:
        for s in cell.summaries:
            if s.headline:
                first.setdefault((s.name, s.link, s.peer, s.family), s)
    links = {link for _, link, _, _ in first}
    rows = []
    for s in beside_their_link(list(first.values())):
        name, link, peer, family = s.name, s.link, s.peer, s.family
        label = labels.get(name) or f"{s.label.split(' (')[0]} {metric_label(s)}"
        where = [f"link {link}"] if len(links) > 1 else []
        where += ["loopback"] if peer == "self" else []
        where += ["IPv6"] if family == 6 and "(IPv6)" not in label else []
        cells = []
        for cell in shown:
            found = cell.summary(name, link, peer, family)
            half = (
                (found.ci_high - found.ci_low) / 2
                if found and found.n > 1 and found.ci_low is not None and found.ci_high is not None
                else None
            )
            cells.append(Cell(found.mean if found else None, half, bool(found and found.unstable)))
        rows.append((label + (f" ({', '.join(where)})" if where else ""), s.unit, cells))
    levels = {s.ci_level for c in shown for s in c.summaries if s.n > 1}
    notes = []
    if levels:
        notes.append(f"± is half the {'/'.join(f'{lv:g}' for lv in sorted(levels))} % Student-t interval of the mean.")
    if any(c.unstable for _, _, cells in rows for c in cells):
        notes.append("* unstable: its spread is above what the scenario accepts, or its tool doubted it.")
    kernels = {c.id: drivers_line(c.facts) for c in shown if c.facts is not None and c.facts.nodes}
    if len(set(kernels.values())) > 1:  # the run compares kernels or drivers: say which ran where
        notes += [f"{column_label(run, c)}: {kernels[c.id]}" for c in shown if c.id in kernels]
    if len(run.cells) > len(shown):
        notes.append(
            f"The first {len(shown)} of {len(run.cells):,} cells; `niclab export RUN --what summaries` has every one."
        )
    return Table(f"{run.scenario}", [column_label(run, c) for c in shown], rows, notes)
