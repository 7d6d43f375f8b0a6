"""The summary table `niclab run` prints at the end of each cell."""

from __future__ import annotations

from niclab.run.records import SummaryRecord
from niclab.run.runner import CellOutcome
from niclab.ui.formats import beside_their_link, drivers_line, metric_label, value_with_unit


def _flags(summary: SummaryRecord) -> str:
    return " ".join(flag for flag, on in (("unstable", summary.unstable), ("contended", summary.contended)) if on)


def cell_table(scenario: str, outcome: CellOutcome) -> str:
    facts = outcome.facts
    accel = facts.rig.accel if facts is not None else None
    rows = beside_their_link([s for s in outcome.summaries if s.headline])  # a loopback row below the link's
    repeats = sorted({s.n for s in rows})
    header = f"scenario {scenario} · cell {outcome.cell.id}" + (f" · accel={accel}" if accel else "")
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
    if outcome.verdicts:
        met = sum(v.passed for v in outcome.verdicts)
        lines.append(f"expectations: {met} met, {len(outcome.verdicts) - met} missed")
        lines += [f"MISSED {v.describe()}" for v in outcome.missed]
    return "\n".join(lines)
