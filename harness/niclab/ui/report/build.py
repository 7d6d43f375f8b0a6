"""Assemble a report from run directories: per run, its table, plots, costs, checks and provenance."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from niclab import __version__
from niclab.run.records import ErrorRecord, ExpectationRecord
from niclab.ui.report import answers, compare, cost, findings, plots, provenance
from niclab.ui.report.data import RunData, merge_runs
from niclab.ui.report.figures import Plot, plain_text
from niclab.ui.report.selftests import SelftestMap, selftest_map
from niclab.ui.report.tables import SHOWN_CELLS, Table, summary_table


def _maker(figures: list[plots.Figure]) -> Callable[[RunData], list[Plot]]:
    return lambda run: [plot for figure in figures for plot in plots.draw(run, figure)]


@dataclass
class RunSection:
    run: RunData
    table: Table
    plots: dict[str, list[Plot]]
    missing: list[str]  # sections these runs have no data for
    undrawn: list[str]  # sections whose figures matplotlib could not draw (values such as 1e308 beside 1)
    crowded: list[str]  # sections whose figures would hold more bars or lines than can be read: why, per section
    costs: list[cost.CostRow]
    currency: str
    expectations: list[ExpectationRecord]
    errors: list[ErrorRecord]
    cells: list[dict] = field(default_factory=list)  # provenance per cell, of the first SHOWN_CELLS
    selftests: SelftestMap | None = None  # the kernel's selftests, test × card, when the run has any
    answers: answers.Answers | None = None  # what the report says first: the ranking, what failed, what was measured
    side: str = ""  # base or new, for two runs of one scenario shown side by side
    comparison: Comparison | None = None  # on the new side: compare's verdicts against the base


@dataclass(frozen=True)
class Comparison:
    """Two runs of one scenario, as `niclab compare BASE NEW` judges them."""

    title: str
    summary: str
    gate: str
    changes: list[compare.Change]
    lost: list[compare.Lost]
    passed: bool


@dataclass
class Report:
    title: str
    generated_at: str
    version: str
    runs: list[RunSection]
    findings: list[findings.Finding]  # the first SHOWN_FINDINGS
    more_findings: int = 0  # beyond those


SHOWN_FINDINGS = 200  # a sweep of thousands of cells can flag thousands


def _drawn(
    title: str, make: Callable[[RunData], Any], run: RunData, undrawn: list[str], crowded: list[str]
) -> list[Plot]:
    """A section's figures; none when matplotlib cannot draw the run's values (a run directory is
    untrusted: a mean of 1e308 beside one of 1 leaves no tick to place), or when they would hold more bars
    or lines than anyone can read (a sweep of thousands of cells), and the section says so."""
    try:
        made = make(run)
    except plots.Crowded as exc:
        crowded.append(f"{title} ({exc})")
        return []
    except (ValueError, ArithmeticError):
        undrawn.append(title)
        return []
    return [p for p in (made if isinstance(made, list) else [made]) if p]


def _named(title: str, notes: list[str]) -> bool:
    return any(note.startswith(f"{title} (") for note in notes)


def _before_and_after(group: list[RunData]) -> bool:
    """Whether two runs of one scenario are a before and an after: neither is a shard (`--shard` on its
    command line) and both measured the same cells. Shards, cells run apart, or a failed cell run again,
    are parts of one run: they merge."""
    if len(group) != 2 or any("--shard" in run.info.command for run in group):
        return False
    base, new = ({c.id for c in run.cells if c.summaries or c.tests} for run in group)
    return bool(base) and base == new


def sides(runs: list[RunData]) -> list[tuple[RunData, str, Comparison | None]]:
    """The report's sections: runs of one scenario merged when they are parts of one run, and two runs that
    measured the same cells side by side (before, after) with compare's verdicts on the second."""
    groups: dict[str, list[RunData]] = {}
    for run in runs:
        groups.setdefault(run.scenario, []).append(run)
    found: list[tuple[RunData, str, Comparison | None]] = []
    for group in groups.values():
        if _before_and_after(group):
            base, new = group
            verdicts = compare.gate(base, new)
            shown = Comparison(
                f"{base.path.name} → {new.path.name}: what changed",
                compare.summary_line(verdicts),
                compare.gate_line(verdicts),
                verdicts.changes,
                verdicts.lost,
                verdicts.passed,
            )
            found += [(base, "base", None), (new, "new", shown)]
        else:
            found += [(run, "", None) for run in merge_runs(group)]
    return found


def build(runs: list[RunData], prices: dict[str, float] | None = None) -> Report:
    """A report of the runs: runs of one scenario that are parts of one run (shards) become one section, two
    runs of it that measured the same cells two sections side by side, judged as compare judges them."""
    placed = sides(runs)
    runs = [run for run, _, _ in placed]
    makers = [(title, _maker(figures)) for title, figures in plots.sections().items()]
    makers.append((plots.SWEEP_SECTION, plots.sweep_lines))
    sections = []
    for run, side, comparison in placed:
        undrawn: list[str] = []
        crowded: list[str] = []
        with plain_text():  # what run directories name is text, not matplotlib's math
            figures = {title: _drawn(title, make, run, undrawn, crowded) for title, make in makers}
        known, currency = cost.prices_of(run, prices)
        sections.append(
            RunSection(
                run=run,
                table=summary_table(run),
                plots={k: v for k, v in figures.items() if v},
                missing=[k for k, v in figures.items() if not v and k not in undrawn and not _named(k, crowded)],
                undrawn=undrawn,
                crowded=crowded,
                costs=cost.cost_rows(run, known),
                currency=currency,
                expectations=[e for c in run.cells for e in c.expectations],
                errors=[e for c in run.cells for e in c.errors],
                cells=[
                    {
                        "id": c.id,
                        "rig": provenance.rig_line(c),
                        "interfaces": provenance.interfaces(c),
                        "interrupts": provenance.interrupt_spread(c),
                    }
                    for c in run.cells[:SHOWN_CELLS]
                ],
                selftests=selftest_map(run),
                answers=answers.answers(run),
                side=side,
                comparison=comparison,
            )
        )
    names = list(dict.fromkeys(run.scenario for run in runs))
    if any(side for _, side, _ in placed):
        names = [f"{name} (before and after)" for name in names]
    found = [f for run in runs for f in findings.find(run)]
    return Report(
        title="niclab report: " + ", ".join(names),
        generated_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        version=__version__,
        runs=sections,
        findings=found[:SHOWN_FINDINGS],
        more_findings=max(0, len(found) - SHOWN_FINDINGS),
    )
