"""What a report says first: which card is faster, by how much, and whether it is real; what failed; and what
the figures describe (QEMU's device models on this host, or a lab's cards).

Per headline metric the cells are ranked and each is judged against the best with compare's own verdict
(niclab.ui.report.compare: Welch's t-test, or the paired test for cells whose repeats alternated; no verdict under
host contention). In a matrix of several axes the cells are ranked along the first axis (the cards, in a
shoot-out) within each combination of the others (per MTU, in a sweep). docs/reports.md, "The answers".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from niclab.base.text import one_line
from niclab.run.records import SummaryRecord
from niclab.ui.formats import metric_label, value_with_unit
from niclab.ui.report.compare import CONTENDED, Change, alternated, compare_pair, failures, metric_info
from niclab.ui.report.data import CellData, RunData

THRESHOLD_PCT, ALPHA = 5.0, 0.05  # compare's defaults


@dataclass(frozen=True)
class Place:
    """One cell's place in a ranking."""

    cell: str
    value: str  # mean ± half the interval, with its unit
    n: int
    cv_pct: float | None
    from_best_pct: float | None  # None for the best
    verdict: str  # against the best: best, worse, not significantly different, untested …, no verdict


@dataclass(frozen=True)
class Ranking:
    """The cells ranked by one metric (within one combination of the other axes)."""

    title: str  # netperf TCP_STREAM throughput_mbps, per: mtu=9000
    better: str  # higher or lower
    places: list[Place]
    primary: bool  # a rate or a typical time (what a card is chosen by), not CPU, loss or a tail


@dataclass
class Banner:
    """What failed, with why: the run, its cells, its benchmarks."""

    run_failed: str = ""  # the run's status message when it failed
    cells: list[tuple[str, str]] = field(default_factory=list)  # cell, why
    benchmarks: list[tuple[str, str, int, int, str]] = field(default_factory=list)  # cell, label, failed, of, why

    def __bool__(self) -> bool:
        return bool(self.run_failed or self.cells or self.benchmarks)


@dataclass
class Answers:
    what: str  # what the figures describe: emulated models on this host, or a lab's cards
    banner: Banner
    rankings: list[Ranking]
    axis: str  # the axis the cells are ranked along ("" for one cell)


def answers(run: RunData) -> Answers:
    return Answers(describe(run), banner(run), rankings(run), _axis(run))


def describe(run: RunData) -> str:
    """One plain sentence on what the figures are of."""
    facts = [c.facts for c in run.cells if c.facts is not None]
    if run.info.lab is not None:
        hosts = sorted({h for f in facts for h in (f.rig.hosts or {}).values()}) or ["its hosts"]
        cards = sorted({one_line(c.card[:100]) for c in run.cells})
        return one_line(
            f"Measured on lab {run.info.lab.name or run.info.lab.file}: hosts {', '.join(hosts)}; cards "
            f"{', '.join(cards)}, passed through to the guests by VFIO (each cell's cards: its provenance below)."
        )
    accels = sorted({f.rig.accel for f in facts if f.rig.accel}) or ["an unrecorded accelerator"]
    cpus = sorted({f.host.cpu_model for f in facts if f.host.cpu_model})
    where = f"this host's CPU ({', '.join(cpus)})" if cpus else "this host's CPU"
    how = " and ".join(a.upper() for a in accels)
    return one_line(
        f"Emulated: these figures describe QEMU's device models on {where} under {how}, not the real cards. "
        "Compare them with each other, on this host; not with a datasheet."
    )


def banner(run: RunData) -> Banner:
    found = Banner()
    for cell in run.cells:
        failed_cell, failed = failures(cell)
        if failed_cell:
            found.cells.append((cell.id, one_line(failed_cell[:300])))
        for label, messages in failed.items():
            repeats = {s.n for s in cell.summaries if s.label == label}
            total = len(messages) + max(repeats, default=0)
            found.benchmarks.append((cell.id, label, len(messages), total, one_line(messages[0][:300])))
    if run.info.status in ("failed", "interrupted"):
        said = "" if found.cells or found.benchmarks else f": {one_line((run.info.message or '')[:300])}"
        found.run_failed = f"The run {run.info.status}{said.rstrip(': ')}"
    return found


def _axis(run: RunData) -> str:
    return run.axes[0] if run.axes else ""


def _groups(run: RunData) -> list[tuple[str, list[CellData]]]:
    """The cells to rank together: along the first axis, per combination of the others."""
    axis = _axis(run)
    groups: dict[str, list[CellData]] = {}
    for cell in run.cells:
        others = ",".join(f"{k}={v}" for k, v in cell.params.items() if k != axis)
        groups.setdefault(others, []).append(cell)
    return [(others, cells) for others, cells in groups.items() if len(cells) >= 2]


def _key(s: SummaryRecord) -> tuple:
    return (s.label, s.name, s.link, s.peer)


def rankings(run: RunData) -> list[Ranking]:
    found = []
    judged: dict[tuple[str, str], dict[tuple, Change]] = {}
    metrics = metric_info()
    for others, cells in _groups(run):
        keys: dict[tuple, None] = {}
        for cell in cells:
            keys.update(dict.fromkeys(_key(s) for s in cell.summaries if s.headline))
        for key in keys:
            info = metrics.get(key[1])
            if info is None or info.better is None:
                continue
            measured = [(cell, s) for cell in cells for s in cell.summaries if _key(s) == key]
            if len(measured) < 2:
                continue
            high = info.better == "higher"
            measured.sort(key=lambda pair: pair[1].mean, reverse=high)
            best_cell, best = measured[0]
            places = [Place(best_cell.id, value_with_unit(best), best.n, best.cv_pct, None, "best")]
            for cell, summary in measured[1:]:
                pair = (best_cell.id, cell.id)
                if pair not in judged:
                    changes = compare_pair(
                        best_cell, cell, THRESHOLD_PCT, ALPHA, True, paired=alternated(best_cell, cell)
                    )
                    judged[pair] = {(c.label, c.name, c.link): c for c in changes}
                change = judged[pair].get(key[:3])
                places.append(
                    Place(
                        cell.id,
                        value_with_unit(summary),
                        summary.n,
                        summary.cv_pct,
                        100.0 * (summary.mean - best.mean) / abs(best.mean) if best.mean else None,
                        _verdict(change),
                    )
                )
            title = f"{best.label} {metric_label(best)}" + (" (loopback)" if best.peer else "")
            found.append(Ranking(f"{title}, {others}" if others else title, info.better, places, info.pace is not None))
    return found


def _verdict(change: Change | None) -> str:
    if change is None:
        return "not compared"
    if change.verdict == "untested":
        n = min(change.base_n, change.new_n)
        return f"untested ({n} sample{'' if n == 1 else 's'}): add repeat: 3"
    if change.verdict == CONTENDED:
        return "host contention, no verdict"
    if change.verdict == "no significant change":
        return "not significantly different"
    # worse (or better, if the best's mean was not the better side of a one-sided test: it cannot be here)
    return ", ".join(p for p in ("significantly " + change.verdict, change.beyond, change.across) if p)
