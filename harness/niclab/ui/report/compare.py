"""Compare two runs, or two cells of one run: per metric and cell, the change and whether it is real.

Welch's t-test between runs, a paired t-test for cells whose repeats alternated on one boot; a contended side
gets a verdict only for a change beyond what contention explains (`CONTENTION_BOUND_PCT`,
`MEASURED_LOAD_PCT`); figures from different lab hosts are never paired; the selftests' changes come from
testchanges. The rules: docs/reports.md; why: docs/architecture.md, "Measuring on a shared host".
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from niclab.base.errors import NiclabError, UsageError
from niclab.base.text import one_line
from niclab.model.bench import MetricInfo, all_metrics
from niclab.run.records import SummaryRecord
from niclab.ui.report.assets import TEMPLATES
from niclab.ui.report.data import CellData, RunData
from niclab.ui.report.testchanges import TestComparison, compare_tests
from niclab.ui.report.welch import welch_p_value

METHOD = "Welch's t-test (two-sided, unequal variances) on each run's samples"
PAIRED = "paired t-test on the differences of alternating repeats (A1 B1 B2 A2 … on one boot)"
CONTENDED = "host contention, no verdict"
#: The most host contention costs the guests' speed, in %: beside one busy process it has cost 41–49 % on average
#: and 45–55 % at the extremes (e1000, rtl8139, virtio; bench/contention_cost.py), and ten points more allow for the
#: models not measured. A contended side ran at no less than 35 % of its quiet speed.
CONTENTION_BOUND_PCT = 65.0
#: The load the bound was measured under: other processes (and the hypervisor's steal) taking at most one core, in %
#: of a core (one busy process: 79–99 %). Heavier contention, or contention not measured so, has no known bound.
MEASURED_LOAD_PCT = 100.0
BEYOND = f"beyond host contention (at most {CONTENTION_BOUND_PCT:g} % slower)"


@dataclass(frozen=True)
class Change:
    cell: str
    label: str
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
    contention: list[str] = field(default_factory=list)  # contended runs, "base: …", "new: …" (unpaired: no verdict)
    paired: bool = False  # judged on repeat-by-repeat differences (the cells alternated on one boot)
    left_out: int = 0  # pairs not judged: the host was contended during one side's repeat only, or a reboot between
    across: str = ""  # the sides ran on different lab hosts: "across hosts (rig1 vs rig2)"
    beyond: str = ""  # a verdict on a contended side: the change lies beyond what contention costs (BEYOND)
    unbounded: list[str] = field(default_factory=list)  # contended sides heavier than the bound was measured under

    @property
    def shown(self) -> str:
        """The verdict as a verdict line shows it: why it is untested and the fix, beyond contention when a side
        was contended, and where the sides ran, when on different hosts."""
        verdict = self.verdict
        if verdict == "untested":
            n = min(self.base_n, self.new_n)
            what = "fair pair" if self.paired else "sample"
            verdict = f"untested ({n} {what}{'' if n == 1 else 's'}): add repeat: 3"
        return ", ".join(part for part in (verdict, self.beyond, self.across) if part)


@dataclass(frozen=True)
class Lost:
    """A figure of the base run the new run does not have: its benchmark failed, its cell failed, or it did
    not run. `name` is empty for repeats that failed in the new run only (the figure itself was compared)."""

    cell: str
    label: str
    name: str
    reason: str


@dataclass(frozen=True)
class Added:
    """A figure only the new run has."""

    cell: str
    label: str
    name: str


@dataclass
class Verdicts:
    """What compare found: the changes, the figures lost and new, the base's own failures (nothing to compare
    there), the selftests that changed; and whether the gate passes."""

    changes: list[Change]
    lost: list[Lost] = field(default_factory=list)
    added: list[Added] = field(default_factory=list)
    base_failed: list[Lost] = field(default_factory=list)
    tests: TestComparison | None = None

    def add(self, lost: list[Lost], added: list[Added], base_failed: list[Lost]) -> None:
        self.lost += lost
        self.added += added
        self.base_failed += base_failed

    @property
    def worse(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == "worse"]

    @property
    def passed(self) -> bool:
        """The gate: nothing worse, nothing lost, no selftest that passed fails now."""
        return not (self.worse or self.lost or (self.tests is not None and self.tests.broke))

    def counts(self) -> dict[str, int]:
        verdicts = [c.verdict for c in self.changes]
        return {
            "worse": verdicts.count("worse"),
            "better": verdicts.count("better"),
            "no significant change": verdicts.count("no significant change"),
            "untested": verdicts.count("untested"),
            "host contention": verdicts.count(CONTENDED),
            "lost": len(self.lost),
            "new": len(self.added),
        }


@functools.cache
def metric_info() -> dict[str, MetricInfo]:
    """Every metric the benchmarks declare, by name (found once)."""
    return {m.name: m for m in all_metrics()}


def _key(summary: SummaryRecord) -> tuple[int, str, int, str, str, str | None, int]:
    return (
        summary.benchmark_index,
        summary.name,
        summary.link,
        summary.client,
        summary.server,
        summary.peer,
        summary.family,
    )


def _pairs(base: RunData, new: RunData) -> Iterator[tuple[CellData, CellData]]:
    if len(base.cells) == 1 and len(new.cells) == 1:
        yield base.cells[0], new.cells[0]
        return
    by_id = {cell.id: cell for cell in new.cells}
    for cell in base.cells:
        if cell.id in by_id:
            yield cell, by_id[cell.id]


def _shown_id(base_cell: CellData, new_cell: CellData) -> str:
    return base_cell.id if base_cell.id == new_cell.id else f"{base_cell.id} → {new_cell.id}"


def failures(cell: CellData) -> tuple[str | None, dict[str, list[str]]]:
    """A cell's own failure (its message), and its benchmarks' failed repeats: label -> their messages."""
    failed: str | None = None
    repeats: dict[str, list[str]] = {}
    for error in cell.errors:
        if error.stage == "cell":
            failed = failed or error.message
        elif error.label:
            repeats.setdefault(error.label, []).append(error.message)
    return failed, repeats


def account(
    base_cell: CellData, new_cell: CellData | None, every_metric: bool = False, missing: str = ""
) -> tuple[list[Lost], list[Added], list[Lost]]:
    """Each figure of the base cell that the new cell lacks (lost, with why), each only the new cell has
    (added), and the base cell's own failures (what it has nothing to compare of). `new_cell` None: the new
    run has no such cell (`missing` says why)."""
    wanted = [s for s in base_cell.summaries if every_metric or s.headline]
    cell = base_cell.id if new_cell is None else _shown_id(base_cell, new_cell)
    base_failed, base_repeats = failures(base_cell)
    noted = [Lost(cell, "", "", f"the base cell failed: {one_line(base_failed)}")] if base_failed else []
    measured = {s.label for s in base_cell.summaries}
    noted += [
        Lost(cell, label, "", f"failed {len(messages)} time(s) in the base run: {one_line(messages[0])}")
        for label, messages in base_repeats.items()
        if label not in measured
    ]
    if new_cell is None:
        return [Lost(cell, s.label, s.name, missing) for s in wanted], [], noted
    failed, repeats = failures(new_cell)
    news = {_key(s) for s in new_cell.summaries}
    lost, said = [], set()
    for summary in wanted:
        if _key(summary) in news:
            more = len(repeats.get(summary.label, [])) - len(base_repeats.get(summary.label, []))
            if more > 0 and summary.label not in said:
                said.add(summary.label)
                why = one_line(repeats[summary.label][0])
                lost.append(Lost(cell, summary.label, "", f"{more} more repeat(s) failed than in the base run: {why}"))
            continue
        if failed:
            reason = f"the cell failed: {one_line(failed)}"
        elif summary.label in repeats:
            messages = repeats[summary.label]
            reason = f"failed {len(messages)} time(s): {one_line(messages[0])}"
        else:
            reason = "not measured in the new run"
        lost.append(Lost(cell, summary.label, summary.name, reason))
    olds = {_key(s) for s in base_cell.summaries}
    added = [
        Added(cell, s.label, s.name) for s in new_cell.summaries if (every_metric or s.headline) and _key(s) not in olds
    ]
    return lost, added, noted


def gate(
    base: RunData, new: RunData, threshold_pct: float = 5.0, alpha: float = 0.05, every_metric: bool = False
) -> Verdicts:
    """Two runs of one scenario, every figure of the base accounted for: compared, lost or new. Runs of two
    scenarios, or with no cell in common, are refused (UsageError: pair two cells with --cells)."""
    if base.info.scenario and new.info.scenario and base.info.scenario != new.info.scenario:
        raise UsageError(
            f"{base.path} ran scenario {_said(base.info.scenario)} and {new.path} ran {_said(new.info.scenario)}: "
            "compare two runs of one scenario, or pair two cells with --cells BASE_CELL NEW_CELL"
        )
    pairs = list(_pairs(base, new))
    if not pairs:
        raise UsageError(
            f"{base.path} and {new.path} have no cell in common (base: {_ids(base)}; new: {_ids(new)}): "
            "pair two cells with --cells BASE_CELL NEW_CELL"
        )
    verdicts = Verdicts(compare(base, new, threshold_pct, alpha, every_metric), tests=selftest_changes(base, new))
    paired_ids = {b.id for b, _ in pairs}, {n.id for _, n in pairs}
    for base_cell, new_cell in pairs:
        verdicts.add(*account(base_cell, new_cell, every_metric))
    for cell in base.cells:
        if cell.id not in paired_ids[0]:
            verdicts.add(*account(cell, None, every_metric, "the new run has no such cell"))
    for cell in new.cells:
        if cell.id not in paired_ids[1]:
            verdicts.added += [Added(cell.id, s.label, s.name) for s in cell.summaries if every_metric or s.headline]
    return verdicts


def gate_pair(
    base_cell: CellData,
    new_cell: CellData,
    threshold_pct: float,
    alpha: float,
    every_metric: bool,
    paired: bool,
) -> Verdicts:
    """Two cells (of one run, or of two), every figure of the base cell accounted for."""
    verdicts = Verdicts(compare_pair(base_cell, new_cell, threshold_pct, alpha, every_metric, paired))
    verdicts.add(*account(base_cell, new_cell, every_metric))
    verdicts.tests = compare_tests([(base_cell, new_cell)])
    return verdicts


def _said(text: str) -> str:
    return repr(one_line(text[:200]))


def _ids(run: RunData) -> str:
    ids = [one_line(c.id[:200]) for c in run.cells]
    return ", ".join(ids[:5]) + (f", … ({len(ids)} in all)" if len(ids) > 5 else "") if ids else "none"


def selftest_changes(base: RunData, new: RunData) -> TestComparison | None:
    """The selftests whose result changed, in the cells `compare` matches; None unless both runs have selftests."""
    return compare_tests(_pairs(base, new))


def compare(
    base: RunData, new: RunData, threshold_pct: float = 5.0, alpha: float = 0.05, every_metric: bool = False
) -> list[Change]:
    """Changes of the headline metrics (every metric with every_metric) present in both runs."""
    changes = []
    for base_cell, new_cell in _pairs(base, new):
        changes += compare_pair(base_cell, new_cell, threshold_pct, alpha, every_metric, paired=False)
    return changes


def alternated(a: CellData, b: CellData) -> bool:
    """Whether two cells' repeats alternated on one boot (the runner's interleaving), so they pair up."""
    return b.id in _interleaved_with(a) and a.id in _interleaved_with(b)


def hosts_of(cell: CellData) -> str:
    """The lab host(s) the cell ran on, e.g. rig1, or a: rig1, b: rig2 when its nodes ran on several; empty
    without a lab."""
    hosts = (cell.facts.rig.hosts if cell.facts is not None else None) or {}
    if len(set(hosts.values())) <= 1:
        return next(iter(hosts.values()), "")
    return ", ".join(f"{node}: {host}" for node, host in sorted(hosts.items()))


def across_hosts(base: CellData, new: CellData) -> str:
    """'across hosts (rig1 vs rig2)' when the two cells' nodes ran on different lab hosts (a node on another
    host, not only another set of hosts: a on rig1 and b on rig2 is not b on rig1 and a on rig2), else empty."""
    a, b = hosts_of(base), hosts_of(new)
    return f"across hosts ({a or 'no lab host'} vs {b or 'no lab host'})" if (a or b) and a != b else ""


def _interleaved_with(cell: CellData) -> list[str]:
    return cell.facts.interleaved_with if cell.facts is not None else []


def compare_cells(
    run: RunData, base_id: str, new_id: str, threshold_pct: float = 5.0, alpha: float = 0.05, every_metric: bool = False
) -> list[Change]:
    """A/B within one run: cell `base_id` against cell `new_id`, paired when their repeats alternated."""
    a, b = (run.cell(cid) for cid in (base_id, new_id))
    return compare_pair(a, b, threshold_pct, alpha, every_metric, paired=alternated(a, b))


def _by_repeat(cell: CellData, summary: SummaryRecord) -> dict[int, tuple[str, float]]:
    """A summary's samples keyed by repeat number: repeat -> (run id, value).

    The number is the `run` record's; runs written before it said so are
    numbered by their id (BENCHMARK.REPEAT).
    """
    runs, samples = summary.runs, summary.samples
    found = {}
    for run_id, value in zip(runs, samples, strict=False):
        number = run_id.rpartition(".")[2]
        named = int(number) if number.isdecimal() and len(number) < 10 else None
        run = cell.runs.get(run_id)
        repeat = (run.repeat if run is not None else None) or named
        if repeat is not None:  # a sample of no known repeat pairs with nothing
            found[repeat] = (run_id, value)
    return found


def _conditions(cell: CellData, run_id: str) -> tuple[bool, int | None]:
    """What a repeat ran under that its pair must share: whether the host was contended, and the boot."""
    run = cell.runs.get(run_id)
    if run is None:
        return False, None
    return bool(run.host_load is not None and run.host_load.contended), run.boot


def fair_pairs(
    base_cell: CellData, base: SummaryRecord, new_cell: CellData, new: SummaryRecord
) -> tuple[list[float], list[float], int]:
    """Same-numbered repeats of two alternated cells, but not those the host hit on one side only.

    A host that stayed busy hits both repeats of a round alike (the pair is
    fair); a burst (another tenant, the hypervisor's steal) during one repeat
    only is not, nor are two repeats on different boots (another cell's
    failure stopped the rig between them). Returns the base and new samples of the fair pairs, and how
    many pairs were left out.
    """
    base_by, new_by = _by_repeat(base_cell, base), _by_repeat(new_cell, new)
    kept_base, kept_new, left_out = [], [], 0
    for repeat in sorted(set(base_by) & set(new_by)):
        (base_run, base_value), (new_run, new_value) = base_by[repeat], new_by[repeat]
        if _conditions(base_cell, base_run) != _conditions(new_cell, new_run):
            left_out += 1
            continue
        kept_base.append(base_value)
        kept_new.append(new_value)
    return kept_base, kept_new, left_out


def speed(metric: MetricInfo | None, base_mean: float, new_mean: float) -> float | None:
    """The new side's speed against the base's, for a metric that moves with the guests' speed (its plug-in
    declares its `pace`): new / base for a rate, base / new for a typical time. None for any other metric, or
    when a mean is not positive."""
    if metric is None or metric.pace is None or base_mean <= 0 or new_mean <= 0:
        return None
    return new_mean / base_mean if metric.pace == "rate" else base_mean / new_mean


def load_pct(cell: CellData, summary: SummaryRecord) -> float | None:
    """The most CPU other processes and the hypervisor took while the summary's runs ran, in % of a core; None
    where a run did not measure it (runs of other backends, or from before niclab recorded it)."""
    worst = None
    for run_id in summary.runs:
        run = cell.runs.get(run_id)
        load = run.host_load if run is not None else None
        if load is None or load.others_cpu_pct is None:
            return None
        taken = load.others_cpu_pct + (load.steal_pct or 0.0) * (load.cpus or 1)
        worst = taken if worst is None else max(worst, taken)
    return worst


def bounded(cell: CellData, summary: SummaryRecord) -> bool:
    """Whether what contention cost this side is bounded: it was measured, and no heavier than the bound's."""
    load = load_pct(cell, summary)
    return load is not None and load <= MEASURED_LOAD_PCT


def beyond_contention(ratio: float | None, base: str, new: str) -> bool:
    """Whether a speed ratio (`speed`) lies beyond what host contention explains, by how each side was contended
    ("", "bounded" or "unbounded"): a bounded contended new side explains a speed down to 1 - CONTENTION_BOUND_PCT
    / 100 (0.35), a bounded contended base side one up to its inverse (2.86), an unbounded one any speed that way,
    an uncontended side nothing."""
    if ratio is None:
        return False
    slowest = 1 - CONTENTION_BOUND_PCT / 100
    low = {"": 1.0, "bounded": slowest}.get(new, 0.0)
    high = {"": 1.0, "bounded": 1 / slowest}.get(base, math.inf)
    return not low <= ratio <= high


def _p_value(base: list[float], new: list[float], paired: bool) -> float:
    if paired:  # A/B within one run only: a comparison of two runs never loads scipy.stats (about 50 MB)
        from scipy import stats as scipy_stats

        p_value = float(scipy_stats.ttest_rel(base, new).pvalue)
    else:
        p_value = welch_p_value(base, new)
    if math.isnan(p_value):  # no variance at all (of the differences, when paired)
        return 1.0 if statistics.fmean(base) == statistics.fmean(new) else 0.0
    return p_value


def compare_pair(
    base_cell: CellData,
    new_cell: CellData,
    threshold_pct: float,
    alpha: float,
    every_metric: bool,
    paired: bool,
) -> list[Change]:
    metrics = metric_info()
    across = across_hosts(base_cell, new_cell)
    if paired and across:
        raise NiclabError(
            f"cells {base_cell.id} and {new_cell.id} alternated but ran {across}: a paired comparison assumes one "
            "host; compare them unpaired, as two runs"
        )
    changes = []
    news = {_key(s): s for s in new_cell.summaries}
    for b in base_cell.summaries:
        if not (every_metric or b.headline):
            continue
        n = news.get(_key(b))
        if n is None:
            continue
        p_value, left_out = None, 0
        contention = [f"{side}: {why}" for side, s in (("base", b), ("new", n)) for why in s.contention]
        base_mean, new_mean = b.mean, n.mean
        if paired:
            base_samples, new_samples, left_out = fair_pairs(base_cell, b, new_cell, n)
            if base_samples:  # the change the test judges: over the pairs it judges
                base_mean, new_mean = statistics.fmean(base_samples), statistics.fmean(new_samples)
        else:
            base_samples, new_samples = b.samples, n.samples
        change = 100.0 * (new_mean - base_mean) / abs(base_mean) if base_mean else None
        contended = bool(contention) and not paired  # paired: the contention hit both sides alike and cancels
        beyond, how = "", {}
        if contended:
            how = {
                side: ("bounded" if bounded(cell, s) else "unbounded") if s.contention else ""
                for side, cell, s in (("base", base_cell, b), ("new", new_cell, n))
            }
        if len(base_samples) < 2 or len(new_samples) < 2:
            verdict = CONTENDED if contended else "untested"
        else:
            p_value = _p_value(base_samples, new_samples, paired)
            metric = metrics.get(b.name)
            better = metric.better if metric is not None else None
            if p_value < alpha and change is not None and abs(change) > threshold_pct and better:
                improved = (change > 0) == (better == "higher")
                verdict = "better" if improved else "worse"
            else:
                verdict = "no significant change"
            if contended:  # a verdict stands only beyond what the contention explains
                ratio = speed(metric, base_mean, new_mean)
                if verdict in ("better", "worse") and beyond_contention(ratio, how["base"], how["new"]):
                    beyond = BEYOND
                else:
                    verdict, p_value = CONTENDED, None
        changes.append(
            Change(
                _shown_id(base_cell, new_cell),
                b.label,
                b.name,
                b.unit,
                b.link,
                base_mean,
                new_mean,
                change,
                p_value,
                len(base_samples),
                len(new_samples),
                verdict,
                contention,
                paired,
                left_out,
                across,
                beyond,
                [side for side, kind in how.items() if kind == "unbounded"],
            )
        )
    return changes


def as_text(verdicts: Verdicts, base: Path, new: Path, threshold_pct: float, alpha: float) -> str:
    tests = verdicts.tests
    if tests is not None and not (verdicts.changes or verdicts.lost):  # selftests only: no verdicts to explain
        return "\n".join([f"base {base}", f"new  {new}", "", *tests.lines(), "", gate_line(verdicts)])
    text = _measurements_text(verdicts, base, new, threshold_pct, alpha)
    parts = [text] if tests is None else [text, "", *tests.lines()]
    return "\n".join([*parts, "", gate_line(verdicts)])


def gate_line(verdicts: Verdicts) -> str:
    if verdicts.passed:
        return "gate: passed (nothing worse, nothing lost)"
    why = [f"{len(verdicts.worse)} worse"] if verdicts.worse else []
    why += [f"{len(verdicts.lost)} lost"] if verdicts.lost else []
    broke = verdicts.tests.broke if verdicts.tests is not None else []
    why += [f"{len(broke)} selftest(s) broke"] if broke else []
    return f"gate: FAILED ({', '.join(why)})"


def summary_line(verdicts: Verdicts) -> str:
    counts = verdicts.counts()
    line = (
        f"{counts['worse']} worse, {counts['better']} better, {counts['no significant change']} no significant "
        f"change, {counts['untested']} untested, {counts['lost']} lost, {counts['new']} new"
    )
    contended = counts["host contention"]
    return line + (f", {contended} without a verdict (host contention)" if contended else "")


def _measurements_text(verdicts: Verdicts, base: Path, new: Path, threshold_pct: float, alpha: float) -> str:
    changes = verdicts.changes
    method = PAIRED if any(c.paired for c in changes) else METHOD
    lines = [
        f"base {base}",
        f"new  {new}",
        f"verdicts: {method}; significant at p < {alpha:g} and beyond {threshold_pct:g} %",
        "",
    ]
    width = max([len(c.name) for c in changes] + [6]) + 2
    cells = max([len(c.cell) for c in changes] + [14]) + 2
    for c in changes:
        change = "n/a" if c.change_pct is None else f"{c.change_pct:+.1f} %"
        p = "" if c.p_value is None else f"p={c.p_value:.3g}"
        lines.append(
            f"{c.cell:<{cells}}{c.name:<{width}}{c.base_mean:>10.4g} → {c.new_mean:<10.4g}{c.unit:<8}"
            f"{change:>9}  {p:<9} {c.shown}"
        )
    if verdicts.lost:
        lines += ["", "lost (the base run has these figures, the new run does not):"]
        lines += [f"  {_what(lost)}: {lost.reason}" for lost in verdicts.lost]
    if verdicts.added:
        lines += ["", "new (only the new run has these):"]
        lines += [f"  {_what(added)}" for added in verdicts.added]
    if verdicts.base_failed:
        lines += ["", "failed in the base run (nothing to compare):"]
        lines += [f"  {_what(failed)}: {failed.reason}" for failed in verdicts.base_failed]
    lines += ["", summary_line(verdicts)]
    if any(c.verdict == "untested" for c in changes):
        lines.append(
            "untested: a side has fewer than two samples, so no test can tell a change from noise; "
            "add repeat: 3 to the scenario"
        )
    for c in changes:
        if c.left_out:
            lines.append(
                f"{c.cell} {c.name}: {c.left_out} round(s) left out: the host was contended in one side only, "
                "or the sides ran on different boots"
            )
        if c.contention:
            if c.paired:
                why = "host contention (paired: rounds it hit on both sides alike)"
            else:
                why = f"{c.verdict}, {c.beyond}" if c.beyond else "no verdict"
                if c.unbounded:
                    sides = " and ".join(c.unbounded)
                    why += f" ({sides}: heavier than the one busy core the bound was measured under, or not measured)"
            lines.append(f"{c.cell} {c.name}: {why}: {'; '.join(c.contention)}")
    return "\n".join(lines)


def _what(item: Lost | Added) -> str:
    """A figure's place in one line: cell, benchmark, metric (what is known of them)."""
    return "  ".join(part for part in (item.cell, item.label, item.name) if part)


#: The version of `compare --format json`'s object (docs/reports.md); a change of its meaning raises it.
JSON_VERSION = 1


def as_json(verdicts: Verdicts, base: Path, new: Path, threshold_pct: float, alpha: float) -> str:
    found = {
        "version": JSON_VERSION,
        "base": str(base),
        "new": str(new),
        "method": PAIRED if any(c.paired for c in verdicts.changes) else METHOD,
        "alpha": alpha,
        "threshold_pct": threshold_pct,
        "gate": "passed" if verdicts.passed else "failed",
        "counts": verdicts.counts(),
        "changes": [asdict(c) | {"shown": c.shown} for c in verdicts.changes],
        "lost": [asdict(lost) for lost in verdicts.lost],
        "new_figures": [asdict(added) for added in verdicts.added],
        "base_failed": [asdict(failed) for failed in verdicts.base_failed],
    }
    tests = verdicts.tests
    return json.dumps(found if tests is None else found | {"selftests": tests.as_dict()}, indent=2)


def as_html(verdicts: Verdicts, base: Path, new: Path, threshold_pct: float, alpha: float) -> str:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    return env.get_template("compare.html.j2").render(
        verdicts=verdicts,
        changes=verdicts.changes,
        tests=verdicts.tests,
        base=base,
        new=new,
        method=PAIRED if any(c.paired for c in verdicts.changes) else METHOD,
        alpha=alpha,
        threshold=threshold_pct,
        summary=summary_line(verdicts),
        gate=gate_line(verdicts),
        what=_what,
    )
