"""Compare two runs: per metric and cell, the change and whether it is real.

The verdict comes from Welch's two-sample t-test (unequal variances) on the
samples each run kept for that metric: "better" or "worse" (by the metric's
direction) when the difference is significant at `alpha` AND larger than
`threshold` % of the base mean; otherwise "no significant change". A metric
with fewer than two samples on either side cannot be tested and says so.
Cells are matched by id; two single-cell runs are matched whatever their ids.
By default the headline metrics are judged (throughput, transaction rate,
mean latency, loss); secondary ones such as retransmit counts are noisy
enough to raise false alarms, and come with `every_metric`.

A metric measured while the host starved the guests of CPU on either side
(the summary's `contended`, niclab.contention) gets no verdict: "host
contention, no verdict", with the reason. A busy host looks exactly like a
slower driver.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scipy import stats as scipy_stats

from niclab.bench import all_metrics
from niclab.report.data import RunData, load_run

METHOD = "Welch's t-test (two-sided, unequal variances) on each run's samples"
CONTENDED = "host contention, no verdict"


@dataclass(frozen=True)
class Change:
    cell: str
    benchmark: str
    name: str
    unit: str
    link: int
    base_mean: float
    new_mean: float
    change_pct: float | None
    p_value: float | None
    base_n: int
    new_n: int
    verdict: str  # better, worse, no significant change, untested, host contention, no verdict
    contention: list[str] = field(default_factory=list)  # why there is no verdict: "base: …", "new: …"


def _direction() -> dict[str, str | None]:
    return {m.name: m.better for m in all_metrics()}


def _key(summary: dict) -> tuple:
    return (summary["benchmark_index"], summary["name"], summary["link"], summary["client"], summary["server"])


def _pairs(base: RunData, new: RunData):
    if len(base.cells) == 1 and len(new.cells) == 1:
        yield base.cells[0], new.cells[0]
        return
    by_id = {cell.id: cell for cell in new.cells}
    for cell in base.cells:
        if cell.id in by_id:
            yield cell, by_id[cell.id]


def compare(
    base: RunData, new: RunData, threshold_pct: float = 5.0, alpha: float = 0.05, every_metric: bool = False
) -> list[Change]:
    """Changes of the headline metrics (every metric with every_metric) present in both runs."""
    better_of = _direction()
    changes = []
    for base_cell, new_cell in _pairs(base, new):
        news = {_key(s): s for s in new_cell.summaries}
        for b in base_cell.summaries:
            if not (every_metric or b.get("headline", True)):
                continue
            n = news.get(_key(b))
            if n is None:
                continue
            change = 100.0 * (n["mean"] - b["mean"]) / abs(b["mean"]) if b["mean"] else None
            p_value = None
            contention = [f"{side}: {why}" for side, s in (("base", b), ("new", n)) for why in s.get("contention", [])]
            if contention:
                verdict = CONTENDED
            elif len(b["samples"]) < 2 or len(n["samples"]) < 2:
                verdict = "untested"
            else:
                result = scipy_stats.ttest_ind(b["samples"], n["samples"], equal_var=False)
                p_value = (
                    float(result.pvalue) if not math.isnan(result.pvalue) else (1.0 if b["mean"] == n["mean"] else 0.0)
                )  # no variance at all on either side
                better = better_of.get(b["name"])
                if p_value < alpha and change is not None and abs(change) > threshold_pct and better:
                    improved = (change > 0) == (better == "higher")
                    verdict = "better" if improved else "worse"
                else:
                    verdict = "no significant change"
            changes.append(
                Change(
                    base_cell.id if base_cell.id == new_cell.id else f"{base_cell.id} → {new_cell.id}",
                    b["benchmark"],
                    b["name"],
                    b["unit"],
                    b["link"],
                    b["mean"],
                    n["mean"],
                    change,
                    p_value,
                    len(b["samples"]),
                    len(n["samples"]),
                    verdict,
                    contention,
                )
            )
    return changes


def as_text(changes: list[Change], base: Path, new: Path, threshold_pct: float, alpha: float) -> str:
    lines = [
        f"base {base}",
        f"new  {new}",
        f"verdicts: {METHOD}; significant at p < {alpha:g} and beyond {threshold_pct:g} %",
        "",
    ]
    width = max([len(c.name) for c in changes] + [6]) + 2
    for c in changes:
        change = "n/a" if c.change_pct is None else f"{c.change_pct:+.1f} %"
        p = "" if c.p_value is None else f"p={c.p_value:.3g}"
        lines.append(
            f"{c.cell:<16}{c.name:<{width}}{c.base_mean:>10.4g} → {c.new_mean:<10.4g}{c.unit:<8}"
            f"{change:>9}  {p:<9} {c.verdict}"
        )
    worse = [c for c in changes if c.verdict == "worse"]
    contended = sum(c.verdict == CONTENDED for c in changes)
    lines += [
        "",
        f"{len(worse)} worse, {sum(c.verdict == 'better' for c in changes)} better, "
        f"{sum(c.verdict == 'no significant change' for c in changes)} no significant change, "
        f"{sum(c.verdict == 'untested' for c in changes)} untested (fewer than two samples)"
        + (f", {contended} without a verdict (host contention)" if contended else ""),
    ]
    for c in changes:
        if c.contention:
            lines.append(f"{c.cell} {c.name}: no verdict: {'; '.join(c.contention)}")
    return "\n".join(lines)


def as_json(changes: list[Change], base: Path, new: Path, threshold_pct: float, alpha: float) -> str:
    return json.dumps(
        {
            "base": str(base),
            "new": str(new),
            "method": METHOD,
            "alpha": alpha,
            "threshold_pct": threshold_pct,
            "changes": [asdict(c) for c in changes],
        },
        indent=2,
    )


def compare_dirs(
    base: Path, new: Path, threshold_pct: float = 5.0, alpha: float = 0.05, every_metric: bool = False
) -> list[Change]:
    return compare(load_run(base), load_run(new), threshold_pct, alpha, every_metric)


def as_html(changes: list[Change], base: Path, new: Path, threshold_pct: float, alpha: float) -> str:
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    from niclab.report.render import TEMPLATES

    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    return env.get_template("compare.html.j2").render(
        changes=changes, base=base, new=new, method=METHOD, alpha=alpha, threshold=threshold_pct
    )
