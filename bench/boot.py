#!/usr/bin/env python3
"""How much of a run is booting: time from `niclab run` start to both guests answering.

Runs `niclab run` on a scenario (default: scenarios/two-node.yaml) N times and
prints, per run and as medians, the time until every guest's agent answered,
the whole run's wall time, and the boot's share of it. Ratios measured in one
go, since this machine is shared and absolute times drift.

    .venv/bin/python bench/boot.py [--runs 3] [SCENARIO]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one_run(scenario: Path, out: Path) -> tuple[float, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "niclab", "run", str(scenario), "--out", str(out), "-q"], capture_output=True, text=True
    )
    wall = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"niclab run failed:\n{result.stderr}")
    run = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    cells = [
        json.loads(line)
        for line in (run / "results.jsonl").read_text().splitlines()
        if json.loads(line)["type"] == "cell"
    ]
    return cells[0]["timings"]["agents_ready_since_start_s"], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default=str(REPO / "scenarios" / "two-node.yaml"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    boots, walls = [], []
    with tempfile.TemporaryDirectory(prefix="niclab-bench-boot-") as out:
        for n in range(1, args.runs + 1):
            boot, wall = one_run(Path(args.scenario), Path(out))
            boots.append(boot)
            walls.append(wall)
            print(f"run {n}: guests answering after {boot:5.1f} s of a {wall:5.1f} s run ({boot / wall:5.1%})")
    boot, wall = statistics.median(boots), statistics.median(walls)
    print(
        f"median: boot {boot:.1f} s, run {wall:.1f} s, boot share {boot / wall:.1%} "
        f"(harness start to every agent answering; first cell)"
    )


if __name__ == "__main__":
    main()
