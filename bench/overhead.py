#!/usr/bin/env python3
"""How much of a run is harness rather than benchmark: nic-shootout by default.

Runs `niclab run` once and splits its wall time, from the records it wrote:

- boot: QEMU start to every guest agent answering;
- network: configuring the links, reading them back, pinging every wire;
- tools: the time the benchmark tools were asked to measure for (each run's
  `seconds` option, or the run's whole duration for tools without one);
- around the tools: the rest of each benchmark run (servers starting and
  stopping, waiting for their ports, NIC counters read before and after);
- other: everything else (start-up, provenance, results, shutting down).

Everything but "tools" is overhead; the script prints it as a share of the run.

    .venv/bin/python bench/overhead.py [SCENARIO] [--cell ID ...] [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from common import REPO, timed_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", default=str(REPO / "scenarios" / "nic-shootout.yaml"))
    parser.add_argument("--cell", action="append", default=[])
    parser.add_argument("--repeat", type=int)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="niclab-bench-overhead-") as out:
        options = [word for cell in args.cell for word in ("--cell", cell)]
        options += ["--repeat", str(args.repeat)] if args.repeat else []
        run = timed_run(args.scenario, Path(out), *options, check=False)
        records, wall = run.records(), run.wall
    if run.returncode != 0:
        print(
            f"(the run exited {run.returncode}; the split below covers what it recorded)\n{run.stderr.strip()[-600:]}",
            file=sys.stderr,
        )
    cells = [r for r in records if r["type"] == "cell"]
    runs = [r for r in records if r["type"] == "run"]
    boot = sum(c["timings"]["boot_s"] for c in cells)
    network = sum(c["timings"]["network_s"] for c in cells)
    in_runs = sum(r["seconds"] for r in runs)
    tools = sum(min(r["options"].get("seconds", r["seconds"]), r["seconds"]) for r in runs)
    parts = [
        ("boot", boot),
        ("network set-up and check", network),
        ("tools measuring", tools),
        ("around the tools", in_runs - tools),
        ("other", wall - boot - network - in_runs),
    ]
    print(f"{Path(args.scenario).name}: {len(cells)} cell(s), {len(runs)} benchmark run(s), {wall:.1f} s in all")
    for name, seconds in parts:
        print(f"  {name:<26}{seconds:8.1f} s  {seconds / wall:6.1%}")
    print(f"harness overhead (all but the tools measuring): {(wall - tools) / wall:.1%} of the run")


if __name__ == "__main__":
    main()
