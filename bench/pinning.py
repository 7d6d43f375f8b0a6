#!/usr/bin/env python3
"""Does pinning the guests' QEMU threads to host cores steady the figures? (issue 14, lever 2)

Runs the two-node e1000 pair (TCP_STREAM 4 s, 8 repeats) several times,
alternating: as niclab runs it (threads placed by the host's scheduler), and
with each guest's QEMU pinned once both guests answer, by thread:

- process: every thread of guest i's QEMU on core i (its vCPU shares a core
  only with its own I/O);
- vcpu: only the vCPU threads ("CPU n/TCG", QEMU's debug-threads names), on
  core i; the I/O threads float.

Only this script's own `niclab run`'s QEMUs are touched (found as its
children). Prints each run's samples, mean and CV, and the medians per way.

    .venv/bin/python bench/pinning.py [--rounds 3] [--ways none,process,vcpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import newest_run, niclab, records

SCENARIO = """\
name: pinning
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
repeat: 8
benchmarks:
  - netperf: {test: TCP_STREAM, seconds: 4}
"""


def qemus_of(parent: int) -> dict[str, int]:
    """node name -> PID of the QEMU processes `parent` started."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if argv and b"qemu-system" in argv[0] and ppid == parent and b"-name" in argv:
            found[argv[argv.index(b"-name") + 1].split(b",")[0].decode()] = int(entry.name)
    return found


def pin(qemus: dict[str, int], way: str) -> None:
    cores = sorted(os.sched_getaffinity(0))
    for i, (_name, pid) in enumerate(sorted(qemus.items())):
        core = {cores[i % len(cores)]}
        for task in Path(f"/proc/{pid}/task").iterdir():
            vcpu = (task / "comm").read_text().startswith("CPU ")
            if way == "process" or (way == "vcpu" and vcpu):
                os.sched_setaffinity(int(task.name), core)


def one_run(work: Path, way: str) -> list[float]:
    scenario = work / "pinning.yaml"
    scenario.write_text(SCENARIO)
    out = work / f"{way}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        niclab("run", str(scenario), "--out", str(out), "-q"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    pinned = way == "none"
    while proc.poll() is None:
        if not pinned and len(qemus := qemus_of(proc.pid)) == 2:
            time.sleep(3)  # the guests are up before the first benchmark starts (boot ~6 s)
            pin(qemus, way)
            pinned = True
        time.sleep(0.5)
    if proc.returncode != 0:
        sys.exit(f"niclab run failed:\n{proc.stderr.read() if proc.stderr else ''}")
    found = records(newest_run(out))
    return [r["value"] for r in found if r["type"] == "measurement" and r["metric"] == "throughput_mbps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ways", default="none,process,vcpu")
    args = parser.parse_args()
    ways = args.ways.split(",")
    means: dict[str, list[float]] = {w: [] for w in ways}
    cvs: dict[str, list[float]] = {w: [] for w in ways}
    with tempfile.TemporaryDirectory(prefix="niclab-pinning-") as work:
        for n in range(1, args.rounds + 1):
            for way in ways:
                samples = one_run(Path(work), way)
                mean, cv = statistics.mean(samples), statistics.stdev(samples) / statistics.mean(samples)
                means[way].append(mean)
                cvs[way].append(cv)
                print(f"round {n} {way:<8} {[round(v) for v in samples]} mean {mean:.0f} CV {cv:.1%}", flush=True)
    base = statistics.median(means[ways[0]])
    for way in ways:
        print(
            f"{way:<8} median mean {statistics.median(means[way]):.0f} Mbit/s "
            f"({statistics.median(means[way]) / base:.0%} of {ways[0]}), "
            f"median CV {statistics.median(cvs[way]):.1%} (range {min(cvs[way]):.1%}-{max(cvs[way]):.1%})"
        )


if __name__ == "__main__":
    main()
