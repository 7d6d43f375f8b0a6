"""The summary table `niclab run` prints at the end."""

from __future__ import annotations

from niclab.runner import CellOutcome


UNIT_SUFFIXES = {"Mbit/s": "_mbps", "us": "_us", "ms": "_ms", "%": "_pct"}


def format_value(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def value_with_unit(metric: str, value: float, unit: str) -> str:
    """The unit is left out where the metric's name already says it (throughput_mbps)."""
    suffix = UNIT_SUFFIXES.get(unit)
    return format_value(value) if suffix and metric.endswith(suffix) else f"{format_value(value)} {unit}"


def cell_table(scenario: str, outcome: CellOutcome, accel: str) -> str:
    rows = [(label, m.metric, value_with_unit(m.metric, m.value, m.unit))
            for label, m in outcome.measurements if m.headline]
    lines = [f"scenario {scenario} · cell {outcome.cell.id} · accel={accel}"]
    width_a = max([len("benchmark"), *(len(r[0]) for r in rows)]) + 2
    width_b = max([len("metric"), *(len(r[1]) for r in rows)]) + 2
    lines.append(f"{'benchmark':<{width_a}}{'metric':<{width_b}}value")
    for label, metric, value in rows:
        lines.append(f"{label:<{width_a}}{metric:<{width_b}}{value}")
    for error in outcome.errors:
        lines.append(f"FAILED: {error.splitlines()[0]}")
    return "\n".join(lines)
