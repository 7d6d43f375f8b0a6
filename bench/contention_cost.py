#!/usr/bin/env python3
"""What one busy host process costs each NIC model's throughput: the data behind compare's contention bound.

Each round runs the two-node pair over every model in `--nics` (one cell per
model, TCP_STREAM, 3 repeats) twice: on the quiet host, and beside one busy
process (`yes > /dev/null`, started and ended here by PID); the two runs
alternate which goes first. Per model it prints the quiet and loaded
throughput, the mean loss, and the worst loss (the fastest quiet run's
repeat mean against the slowest loaded one's): compare's bound
(`CONTENTION_BOUND_PCT`) must lie beyond the worst loss of every model.
It also prints the other processes' load the loaded runs recorded, which must
stay within the bound's `MEASURED_LOAD_PCT`.

    .venv/bin/python bench/contention_cost.py [--nics e1000,virtio,rtl8139] [--rounds 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import busy_process, records, run_scenario
from niclab.ui.report.compare import CONTENTION_BOUND_PCT, MEASURED_LOAD_PCT

SCENARIO = """\
name: contention-cost
description: two-node pair per NIC model, TCP_STREAM only (bench/contention_cost.py)
nodes: [a, b]
links:
  - between: [a, b]
    nic: ${{nic}}
matrix:
  nic: [{nics}]
repeat: 3
benchmarks:
  - netperf: {{test: TCP_STREAM, seconds: 5}}
"""
METRIC = "netperf.TCP_STREAM.throughput_mbps"


def run(work: Path, name: str, nics: list[str]) -> Path:
    """The scenario over these models, run quietly; its run directory."""
    return run_scenario(work, name, SCENARIO.format(nics=", ".join(nics)))


def figures(run_dir: Path) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Per model: the throughput's mean over the repeats, and the other processes' load each repeat recorded."""
    means: dict[str, float] = {}
    loads: dict[str, list[float]] = {}
    for record in records(run_dir):
        nic = record.get("params", {}).get("nic")
        if record["type"] == "summary" and record["name"] == METRIC:
            means[nic] = record["mean"]
        elif record["type"] == "run" and (load := record.get("host_load")) and load.get("others_cpu_pct") is not None:
            steal = (load.get("steal_pct") or 0.0) * (load.get("cpus") or 1)
            loads.setdefault(nic, []).append(load["others_cpu_pct"] + steal)
    return means, loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nics", default="e1000,virtio,rtl8139", help="the NIC models, comma-separated")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    args = parser.parse_args()
    nics = [nic.strip() for nic in args.nics.split(",") if nic.strip()]
    work = args.keep or Path(tempfile.mkdtemp(prefix="niclab-contention-"))
    work.mkdir(parents=True, exist_ok=True)
    quiet: dict[str, list[float]] = {nic: [] for nic in nics}
    loaded: dict[str, list[float]] = {nic: [] for nic in nics}
    load_seen: list[float] = []
    started = time.monotonic()
    for round_ in range(args.rounds):
        here = work / f"round-{round_:02d}"
        here.mkdir()
        order = ("quiet", "loaded") if round_ % 2 == 0 else ("loaded", "quiet")
        for kind in order:
            if kind == "loaded":
                with busy_process():
                    means, loads = figures(run(here, kind, nics))
                load_seen += [pct for values in loads.values() for pct in values]
            else:
                means, _ = figures(run(here, kind, nics))
            for nic in nics:
                (quiet if kind == "quiet" else loaded)[nic].append(means[nic])
        print(
            f"round {round_}: "
            + "; ".join(f"{nic} {quiet[nic][-1]:.0f} quiet, {loaded[nic][-1]:.0f} loaded" for nic in nics),
            flush=True,
        )
    print(f"\n{args.rounds} rounds in {(time.monotonic() - started) / 60:.0f} min (Mbit/s, TCP_STREAM):")
    worst_all = 0.0
    for nic in nics:
        mean_loss = 1 - statistics.fmean(loaded[nic]) / statistics.fmean(quiet[nic])
        worst = 1 - min(loaded[nic]) / max(quiet[nic])
        worst_all = max(worst_all, worst)
        print(
            f"  {nic:<10} quiet {min(quiet[nic]):.0f}–{max(quiet[nic]):.0f}, loaded {min(loaded[nic]):.0f}–"
            f"{max(loaded[nic]):.0f}: loss {mean_loss:.0%} on average, {worst:.0%} at the extremes"
        )
    if load_seen:
        print(
            f"other processes and steal during the loaded runs: {min(load_seen):.0f}–{max(load_seen):.0f} % of a core "
            f"(the bound holds up to {MEASURED_LOAD_PCT:g} %)"
        )
    verdict = "covers" if worst_all * 100 < CONTENTION_BOUND_PCT else "does NOT cover"
    print(f"compare's bound, {CONTENTION_BOUND_PCT:g} % slower at most, {verdict} the worst loss, {worst_all:.0%}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
