#!/usr/bin/env python3
"""Does `niclab compare` tell a busy host from a slower NIC? Verdicts counted over repeated trials.

Each trial runs the two-node e1000 pair (TCP_STREAM, 3 repeats) four times:
a quiet base, the same configuration beside one busy host process
(`yes > /dev/null`, started and ended here by PID), and both again with the
link capped by netem so that it carries 90 % of the quiet throughput (a
real 10 % change). netem's rate counts every byte on the wire, so a cap
carries less TCP payload than its rate: the cap is the target divided by
what the last quiet capped run carried per unit of its cap (trial 0
measures that first and is not counted).
Each of the three comparisons against the base is then judged twice from
the same runs: as `niclab compare` does now, and as it did before contention
detection (the summaries' contention stripped), so the before/after ratio
comes from one set of runs on one host.

Goals (issue 14): the busy host is never called "worse" (>= 19 of 20); the
capped link is called "worse" (>= 19 of 20), quiet or loaded.

    .venv/bin/python bench/compare_power.py [--trials 20] [--keep DIR]
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
from niclab.ui.report.compare import compare
from niclab.ui.report.data import load_run

SCENARIO = """\
name: power
description: two-node e1000, TCP_STREAM only (bench/compare_power.py)
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
{netem}repeat: 3
benchmarks:
  - netperf: {{test: TCP_STREAM, seconds: 5}}
"""
METRIC = "netperf.TCP_STREAM.throughput_mbps"


def run(work: Path, name: str, cap_mbit: float | None) -> Path:
    netem = f"    netem: {{rate: {cap_mbit:.0f}mbit}}\n" if cap_mbit else ""
    return run_scenario(work, name, SCENARIO.format(netem=netem))


def verdict(base: Path, new: Path, before_detection: bool) -> str:
    base_run, new_run = load_run(base), load_run(new)
    if before_detection:
        for cell in base_run.cells + new_run.cells:
            for summary in cell.summaries:
                summary.pop("contended", None)
                summary.pop("contention", None)
    (change,) = [c for c in compare(base_run, new_run) if c.name == METRIC]
    return change.verdict


def mean(run_dir: Path) -> float:
    (cell,) = load_run(run_dir).cells
    return next(s["mean"] for s in cell.summaries if s["name"] == METRIC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="niclab-power-"))
    work.mkdir(parents=True, exist_ok=True)
    tallies: dict[tuple[str, str], Counter] = {}
    started = time.monotonic()
    carried = 1.0  # capped throughput per unit of netem rate, as the last quiet capped run measured it
    realized = []
    for trial in range(args.trials + 1):
        here = work / f"trial-{trial:02d}"
        here.mkdir()
        base = run(here, "quiet-open", None)
        cap = 0.9 * mean(base) / carried
        quiet_capped = run(here, "quiet-capped", cap)
        carried = mean(quiet_capped) / cap
        if not trial:  # trial 0 only measures what a cap carries
            print(f"trial 0 (calibration): a {cap:.0f} Mbit/s cap carried {carried:.0%} of it", flush=True)
            continue
        realized.append(mean(quiet_capped) / mean(base) - 1)
        with busy_process():
            loaded_open = run(here, "loaded-open", None)
        with busy_process():
            loaded_capped = run(here, "loaded-capped", cap)
        row = []
        for label, new in (
            ("busy host", loaded_open),
            ("10 % cap, quiet", quiet_capped),
            ("10 % cap, loaded", loaded_capped),
        ):
            for when in ("before", "after"):
                found = verdict(base, new, before_detection=when == "before")
                tallies.setdefault((label, when), Counter())[found] += 1
                if when == "after":
                    row.append(f"{label}: {mean(new):.0f} Mbit/s ({mean(new) / mean(base) - 1:+.0%}), {found}")
        print(f"trial {trial}: base {mean(base):.0f} Mbit/s; " + "; ".join(row), flush=True)
    if realized:
        print(
            f"\nthe quiet cap's change, realized: median {statistics.median(realized):+.1%}, "
            f"{min(realized):+.1%} to {max(realized):+.1%}"
        )
    print(
        f"\n{args.trials} trials in {(time.monotonic() - started) / 60:.0f} min; verdicts (before → after detection):"
    )
    goals = {"busy host": ("not worse", lambda c: sum(v for k, v in c.items() if k != "worse")),
             "10 % cap, quiet": ("worse", lambda c: c["worse"]),
             "10 % cap, loaded": ("worse", lambda c: c["worse"])}  # fmt: skip
    for label, (wanted, count) in goals.items():
        before, after = tallies.get((label, "before"), Counter()), tallies.get((label, "after"), Counter())
        print(
            f"  {label:<18} {wanted:>9}: {count(before)}/{args.trials} → {count(after)}/{args.trials}   "
            f"(after: {dict(after)})"
        )
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
