#!/usr/bin/env python3
"""What `--parallel` buys on a lab: four emulated cells run one after another, then at once over the lab's hosts.

Runs `niclab run SCENARIO --lab LAB --emulated` (default scenario:
bench/lab-parallel.yaml, four cells that each boot their own rig) twice, in
one go, sequentially and with `--parallel`, and prints both wall times, their
ratio, which host each cell ran on, and whether the parallel run's cells
overlapped (their benchmark runs' start and end times, to the second).
The lab's hosts need `capacity:` for more than one cell each, or several
hosts; the integrator's nested rig has two.

    .venv/bin/python bench/lab_parallel.py --lab lab.yaml [--scenario S] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import BENCH, records, timed_run

SCENARIO = BENCH / "lab-parallel.yaml"


def one_run(scenario: Path, lab: Path, out: Path, parallel: bool) -> tuple[float, Path]:
    run = timed_run(scenario, out, "--lab", str(lab), "--emulated", *(["--parallel"] if parallel else []))
    return run.wall, run.run_dir


def spans(run: Path) -> dict[str, tuple[str, str]]:
    """Per cell: its first benchmark run's start and its last one's end (UTC, to the second)."""
    found: dict[str, tuple[str, str]] = {}
    for record in records(run):
        if record["type"] == "run":
            first, _ = found.get(record["cell"], (record["started_at"], record["finished_at"]))
            found[record["cell"]] = (first, record["finished_at"])
    return found


def overlapped(found: dict[str, tuple[str, str]]) -> bool:
    """Whether a cell's runs began before an earlier-begun cell's had ended."""
    ended = ""
    for start, end in sorted(found.values()):
        if ended and start < ended:
            return True
        ended = max(ended, end)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lab", required=True, type=Path, help="the lab inventory (hosts with address: and capacity:)")
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--out", type=Path, help="where the two run directories go (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lab-parallel-") as scratch:
        out = args.out or Path(scratch)
        sequential, seq_run = one_run(args.scenario, args.lab, out / "sequential", parallel=False)
        parallel, par_run = one_run(args.scenario, args.lab, out / "parallel", parallel=True)
        hosts = {
            r["cell"]: "+".join(sorted(set((r.get("rig") or {}).get("hosts", {}).values()))) or "?"
            for r in records(par_run)
            if r["type"] == "cell"
        }
        shape = [(r["type"], r["cell"]) for r in records(seq_run)] == [(r["type"], r["cell"]) for r in records(par_run)]
        print(f"scenario   {args.scenario}  lab {args.lab}")
        print(f"sequential {sequential:7.1f} s  ({seq_run})")
        print(f"parallel   {parallel:7.1f} s  ({par_run})")
        print(f"ratio      {sequential / parallel:7.2f}  (sequential / parallel)")
        print("cells      " + ", ".join(f"{cell} on {host}" for cell, host in hosts.items()))
        print(f"overlapped {'yes' if overlapped(spans(par_run)) else 'no'}; same records in the same order: {shape}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
