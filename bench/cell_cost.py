#!/usr/bin/env python3
"""What a cell costs besides its benchmarks, this tree against another revision.

Runs `niclab run` on a scenario (default: scenarios/two-node.yaml) N times
from this checkout and N times from REV (checked out into a temporary git
worktree), alternating, and prints per run and as medians:

- ready: from the harness's start until the network was up and checked and
  the nodes' facts read (`agents_ready_since_start_s` + `network_s` of the
  first cell), the time before the first benchmark can start;
- network: the part after the agents answered (configure, read back, ping
  every pair, read the facts), the median over the run's cells (a cell on
  a boot an earlier cell left sets its network up again);
- per run: how much longer each benchmark run took than its own length
  (the counters read before and after it, its server started, the agent
  asked whether it ended), the median over the run's benchmark runs.

Ratios measured in one go, since this machine is shared and absolute times
drift. For eight nodes on one segment: bench/eight-node-switch.yaml.

    .venv/bin/python bench/cell_cost.py --against-rev REV [--runs 3] [SCENARIO]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from common import REPO, TWO_NODE, timed_run


def one_run(tree: Path, scenario: Path, out: Path) -> dict[str, float]:
    """One `niclab run` with the harness of `tree`; the first cell's costs."""
    run = timed_run(scenario, out, env={"PYTHONPATH": str(tree / "harness")}, cwd=tree)
    records = run.records()
    cells = [r for r in records if r["type"] == "cell"]
    runs = [r for r in records if r["type"] == "run"]
    extra = [r["seconds"] - r["options"]["seconds"] for r in runs if "seconds" in r.get("options", {})]
    timings = cells[0]["timings"]
    return {
        "ready": timings["agents_ready_since_start_s"] + timings["network_s"],
        "network": statistics.median(c["timings"]["network_s"] for c in cells),
        "per_run": statistics.median(extra) if extra else float("nan"),
        "wall": run.wall,
    }


def show(label: str, costs: dict[str, float]) -> str:
    return (
        f"{label}: ready {costs['ready']:5.1f} s (network {costs['network']:4.1f} s), "
        f"per run +{costs['per_run']:4.2f} s, run {costs['wall']:5.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default=str(TWO_NODE))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--against-rev", required=True, metavar="REV", help="the git revision to pair with")
    args = parser.parse_args()
    scenario = Path(args.scenario).resolve()
    with tempfile.TemporaryDirectory(prefix="niclab-bench-cell-") as tmp:
        other = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(other), args.against_rev], check=True
        )
        try:
            ours, theirs = [], []
            for n in range(1, args.runs + 1):
                theirs.append(one_run(other, scenario, Path(tmp) / "theirs"))
                ours.append(one_run(REPO, scenario, Path(tmp) / "ours"))
                print(f"run {n}: {show(args.against_rev, theirs[-1])}", flush=True)
                print(f"run {n}: {show('this tree', ours[-1])}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)], check=False)
    med = {
        side: {key: statistics.median(c[key] for c in costs) for key in costs[0]}
        for side, costs in (("theirs", theirs), ("ours", ours))
    }
    print(f"median: {show(args.against_rev, med['theirs'])}")
    print(f"median: {show('this tree', med['ours'])}")
    print(
        f"this tree's ready time is {med['ours']['ready'] / med['theirs']['ready']:.0%} of {args.against_rev}'s, "
        f"its network part {med['ours']['network'] / med['theirs']['network']:.0%}"
    )


if __name__ == "__main__":
    main()
