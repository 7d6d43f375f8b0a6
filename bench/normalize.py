#!/usr/bin/env python3
"""Does a reference path measured in the same cell cancel the host's speed? (issue 14, host-independent figures)

Runs the two-node pair with two cables, e1000 (the NIC under test) and
virtio (the reference), alternately quiet and beside one busy host process
(`yes > /dev/null`, started and ended here by PID). Each run measures
TCP_STREAM over the reference, the NIC, the reference, the NIC, … so each
NIC figure has a reference figure right before and right after it, from the
same guests on the same boot. The normalized figure is the NIC's divided by
the mean of those two.

Prints each run's raw and normalized figures, then the CV of each across
every run, quiet and loaded: the goal is a normalized CV of at most 5 %
while the raw figure moves with the host.

    .venv/bin/python bench/normalize.py [--runs 4] [--samples 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from common import busy_process, records, run_scenario

HEAD = """\
name: normalize
description: a NIC and a reference path in one cell (bench/normalize.py)
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
  - between: [a, b]
    nic: virtio
benchmarks:
"""
REFERENCE = "  - netperf: {test: TCP_STREAM, seconds: 4, link: 1}\n"
NIC = "  - netperf: {test: TCP_STREAM, seconds: 4}\n"
METRIC = "netperf.TCP_STREAM.throughput_mbps"


def scenario(samples: int) -> str:
    return HEAD + REFERENCE + (NIC + REFERENCE) * samples


def figures(run_dir: Path) -> list[tuple[float, float]]:
    """(raw, normalized) per NIC figure: benchmarks 1, 3, 5, … each between two reference figures."""
    values = {
        int(r["run"].split(".")[0]): r["value"]
        for r in records(run_dir)
        if r["type"] == "measurement" and r["name"] == METRIC
    }
    return [
        (values[i], values[i] / statistics.fmean([values[i - 1], values[i + 1]]))
        for i in range(1, max(values), 2)
        if {i - 1, i, i + 1} <= values.keys()
    ]


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs, alternately quiet and loaded")
    parser.add_argument("--samples", type=int, default=4, help="NIC figures per run")
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="niclab-normalize-"))
    work.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[tuple[float, float]]] = {"quiet": [], "loaded": []}
    for n in range(args.runs):
        condition = ("quiet", "loaded")[n % 2]
        if condition == "loaded":
            with busy_process():
                run_dir = run_scenario(work, f"{n + 1}-{condition}", scenario(args.samples))
        else:
            run_dir = run_scenario(work, f"{n + 1}-{condition}", scenario(args.samples))
        got = figures(run_dir)
        found[condition] += got
        print(
            f"run {n + 1} ({condition}): e1000 "
            + ", ".join(f"{raw:.0f}" for raw, _ in got)
            + " Mbit/s; e1000/virtio "
            + ", ".join(f"{ratio:.3f}" for _, ratio in got),
            flush=True,
        )
    every = found["quiet"] + found["loaded"]
    print(f"\n{len(every)} figures over {args.runs} runs, quiet and loaded:")
    for label, column in (("raw (Mbit/s)", 0), ("normalized", 1)):
        means = {c: statistics.fmean(f[column] for f in found[c]) for c in found if found[c]}
        print(
            f"  {label:<13} CV {cv([f[column] for f in every]):5.1f} %   "
            + "   ".join(f"mean {c} {m:.3g}" for c, m in means.items())
            + ("   (goal: normalized CV <= 5 %)" if column else "")
        )
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
