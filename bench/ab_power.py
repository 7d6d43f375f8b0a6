#!/usr/bin/env python3
"""A/B within one run: do alternating repeats on one boot see a real 10 % change, and only that, on a busy host?

Each trial runs, quiet and then beside one busy host process (`yes >
/dev/null`, started and ended here by PID), one `niclab run` of three cells
on one boot of the two-node e1000 pair, their TCP_STREAM repeats
alternating, each round starting one cell later (A1 A'1 B1 A'2 B2 A2 …):

- A and A': the same open link (an A/A comparison: any "worse" is false);
  all three carry a netem qdisc, A and A' at a rate that does not bind;
- B: the link capped by netem so that it carries 90 % of what A measured in
  the previous run under the same condition (a real 10 % change). netem's
  rate counts every byte on the wire, so a cap carries less TCP payload than
  its rate, and less still when the host is busy: the cap is the target
  divided by what the last cap carried per unit of its rate under that
  condition (two calibration trials come first and are not counted).

Each pair is judged twice from the same run: paired, as `niclab compare RUN
--cells` does for alternated cells, and unpaired (Welch, with contention
blocking a verdict), as comparing separate runs would. Goals (issue 14): A/A
is never "worse" (>= 19 of 20), A/B is "worse" (>= 19 of 20), quiet or loaded.

    .venv/bin/python bench/ab_power.py [--trials 20] [--repeat 8] [--keep DIR]
    .venv/bin/python bench/ab_power.py --analyze DIR     # judge kept runs again
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import busy_process, run_scenario
from niclab.ui.report.compare import compare_pair
from niclab.ui.report.data import CellData, RunData, load_run

SCENARIO = """\
name: ab-power
description: A/B on one boot (bench/ab_power.py)
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
    netem: {{rate: "${{rate}}"}}
matrix:
  rate: [{a}, {a2}, {cap:.0f}mbit]
repeat: {repeat}
benchmarks:
  - netperf: {{test: TCP_STREAM, seconds: 4}}
"""
METRIC = "netperf.TCP_STREAM.throughput_mbps"
# A and A' differ only in a netem rate no emulated NIC here comes near (a matrix refuses two equal cells)
SIDES = {"A": "10gbit", "A2": "9gbit"}
# Uncounted trials first: the open rate, then what a cap carries (a busy host carries more of a cap than a quiet one:
# its TCP is already slowed by the CPU, not only by the cap)
CALIBRATION = 2


def run(work: Path, name: str, cap: float, repeat: int) -> RunData:
    text = SCENARIO.format(a=SIDES["A"], a2=SIDES["A2"], cap=cap, repeat=repeat)
    return load_run(run_scenario(work, name, text))


def cells(data: RunData) -> dict[str, CellData]:
    """The cells by side: A, A2 (the open rates), B (the cap)."""
    side_of = {rate: side for side, rate in SIDES.items()}
    return {side_of.get(str(cell.params["rate"]), "B"): cell for cell in data.cells}


def verdict(data: RunData, base: str, new: str, paired: bool) -> tuple[str, float]:
    found = cells(data)
    changes = compare_pair(found[base], found[new], 5.0, 0.05, False, paired=paired)
    (change,) = [c for c in changes if c.name == METRIC]
    return change.verdict, change.change_pct or 0.0


def mean(data: RunData, side: str) -> float:
    return next(s["mean"] for s in cells(data)[side].summaries if s["name"] == METRIC)


def judge(data: RunData, condition: str, tallies: dict[tuple[str, str], Counter]) -> list[str]:
    """Count one run's A/A and A/B verdicts, paired and unpaired; the paired ones as a line's parts."""
    row = []
    for label, new in (("A/A", "A2"), ("A/B", "B")):
        for how in ("paired", "unpaired"):
            found, change = verdict(data, "A", new, paired=how == "paired")
            tallies.setdefault((f"{label} {condition}", how), Counter())[found] += 1
            if how == "paired":
                row.append(f"{label} {condition} {change:+.1f} % {found}")
    return row


def report(tallies: dict[tuple[str, str], Counter], n: int, minutes: float | None) -> None:
    took = f" in {minutes:.0f} min" if minutes is not None else ""
    print(f"\n{n} trials{took}; verdicts (unpaired → paired):")
    for label in ("A/A quiet", "A/A loaded", "A/B quiet", "A/B loaded"):
        wanted = "not worse" if label.startswith("A/A") else "worse"
        before, after = tallies.get((label, "unpaired"), Counter()), tallies.get((label, "paired"), Counter())
        count = [n - c["worse"] if wanted == "not worse" else c["worse"] for c in (before, after)]
        print(f"  {label:<11} {wanted:>9}: {count[0]}/{n} → {count[1]}/{n}   (paired: {dict(after)})")


def analyze(work: Path) -> None:
    """Judge the runs a --keep directory holds again (after a change to compare), running nothing."""
    tallies: dict[tuple[str, str], Counter] = {}
    trials = sorted(d for d in work.glob("trial-*") if d.name != "trial-00")
    done = 0
    for here in trials:
        runs = {c: next((here / c).iterdir(), None) for c in ("quiet", "loaded") if (here / c).is_dir()}
        if len(runs) < 2 or None in runs.values():
            continue  # a trial the run did not finish
        done += 1
        row = [part for condition, path in runs.items() for part in judge(load_run(path), condition, tallies)]
        print(f"{here.name}: " + "; ".join(row))
    report(tallies, done, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    parser.add_argument("--analyze", type=Path, metavar="DIR", help="judge the runs kept in DIR again; run nothing")
    args = parser.parse_args()
    if args.analyze:
        analyze(args.analyze)
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="niclab-ab-"))
    work.mkdir(parents=True, exist_ok=True)
    tallies: dict[tuple[str, str], Counter] = {}
    open_mean = {"quiet": 0.0, "loaded": 0.0}
    # the cap's throughput per unit of its rate: first a guess, then as last measured
    carried = {"quiet": 0.87, "loaded": 0.87}
    realized: dict[str, list[float]] = {"quiet": [], "loaded": []}
    started = time.monotonic()
    for trial in range(args.trials + CALIBRATION):
        here = work / f"trial-{trial:02d}"
        here.mkdir(exist_ok=True)
        row = []
        for condition in ("quiet", "loaded"):
            cap = 0.9 * open_mean[condition] / carried[condition] if trial else 8_000.0  # trial 0: the open rate
            counted = trial >= CALIBRATION
            if condition == "loaded":
                with busy_process():
                    data = run(here, condition, cap, args.repeat)
            else:
                data = run(here, condition, cap, args.repeat)
            open_mean[condition] = mean(data, "A")
            if trial:  # a cap that did not bind says it was too high: the next is lower
                carried[condition] = mean(data, "B") / cap
            if counted:
                row += judge(data, condition, tallies)
                realized[condition].append(mean(data, "B") / mean(data, "A") - 1)
        label = f"trial {trial - CALIBRATION + 1}" if counted else f"calibration {trial + 1}"
        print(f"{label}: " + ("; ".join(row) or f"open {open_mean}, cap carried {carried}"), flush=True)
    for condition, changes in realized.items():
        if not changes:
            continue
        print(
            f"the cap's change, {condition}: median {statistics.median(changes):+.1%}, "
            f"{min(changes):+.1%} to {max(changes):+.1%}"
        )
    report(tallies, args.trials, (time.monotonic() - started) / 60)
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
