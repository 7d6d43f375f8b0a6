#!/usr/bin/env python3
"""How `niclab report`, `compare`, `export` and `plan` grow with a run's cells.

Makes run directories synthetically, each cell's records built through the
results format's own models (niclab.run.records) and written as the runner
writes them: a nightly sweep of kernels × cards × MTUs × interrupt coalescing,
each cell netperf TCP_STREAM of two repeats, about 3.9 KB of results.jsonl
per cell (20,000 cells: some 78 MB, more than the 57 MB of the sweep issue 31 measured). A sibling run of
the same cells, its figures a little apart, is what `compare` judges against.

Each command runs in its own process; its wall time, CPU time and peak memory
(the child's own high-water mark of resident memory, VmHWM) are printed per cell count, with
the growth per 1,000 cells between the smallest and largest. `plan` answers
for a scenario whose matrix has 1,000 cells.

    .venv/bin/python bench/scale.py [--cells 1000,5000,20000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import REPO
from niclab.run.records import (
    CellEndRecord,
    CellRecord,
    MeasurementRecord,
    Record,
    RunInfoRecord,
    RunRecord,
    SummaryRecord,
    as_json,
)
from niclab.run.stats import summarize

SCENARIO = "nightly"
KERNELS = [f"6.{minor}.{patch}" for minor in (1, 6, 12, 15, 18) for patch in range(5)]  # 25
NICS = ["e1000", "e1000e", "igb", "ixgbe", "i40e", "vmxnet3", "virtio", "rtl8139"]  # 8
MTUS = [1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 9216]  # 10
USECS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256]  # 10: 25 × 8 × 10 × 10 = 20,000 cells
BENCHMARKS = [("netperf TCP_STREAM", "TCP_STREAM", "throughput_mbps", "Mbit/s")]
REPEATS = 2


def cell_ids(count: int) -> Iterator[tuple[str, dict[str, Any]]]:
    made = 0
    for kernel in KERNELS:
        for nic in NICS:
            for mtu in MTUS:
                for usecs in USECS:
                    if made == count:
                        return
                    params = {"kernel": kernel, "nic": nic, "mtu": mtu, "rx_usecs": usecs}
                    yield ",".join(f"{k}={v}" for k, v in params.items()), params
                    made += 1
    if made < count:
        raise SystemExit(f"at most {made} cells")


def cell_records(cell: str, params: dict[str, Any], rng: random.Random) -> list[Record]:
    base = {"scenario": SCENARIO, "cell": cell, "params": params}
    nodes = {
        node: {
            "kernel": params["kernel"],
            "interfaces": {
                "link0": {"driver": params["nic"], "version": "7.3", "mtu": params["mtu"], "pci_id": "8086:100e"}
            },
        }
        for node in ("a", "b")
    }
    records: list[Record] = [
        CellRecord.model_validate(
            {
                **base,
                "type": "cell",
                "time": "2026-11-22T05:12:50Z",
                "timings": {"boot_s": 0.0, "network_s": 1.84},
                "host": {"hostname": "ci", "kernel": "6.18.4", "cpu_model": "AMD EPYC", "python": "3.11.7"},
                "rig": {"backend": "qemu", "accel": "kvm", "image": "micro-7cd0dd18", "kernel": params["kernel"]},
                "boot": {"number": 1, "reused": True},
                "nodes": nodes,
            }
        )
    ]
    for index, (label, test, metric, unit) in enumerate(BENCHMARKS):
        samples = []
        runs = []
        for repeat in range(1, REPEATS + 1):
            run_id = f"{index}.{repeat}"
            value = round(rng.uniform(900, 1000) * (1 if index == 0 else 20), 2)
            samples.append(value)
            runs.append(run_id)
            nic = {"model": params["nic"], "driver": params["nic"], "mtu": params["mtu"]}
            records.append(
                RunRecord.model_validate(
                    {
                        **base,
                        "type": "run",
                        "run": run_id,
                        "label": label,
                        "tool": "netperf",
                        "repeat": repeat,
                        "repeats": REPEATS,
                        "client": "a",
                        "server": "b",
                        "link": 0,
                        "seconds": 5.0,
                        "nics": {"a": nic, "b": nic},
                        "accel": "kvm",
                        "counters": {"a": {"link0": {"rx_packets": 41250}}},
                    }
                )
            )
            records.append(
                MeasurementRecord.model_validate(
                    {
                        **base,
                        "type": "measurement",
                        "run": run_id,
                        "repeat": repeat,
                        "tool": "netperf",
                        "test": test,
                        "metric": metric,
                        "name": f"netperf.{test}.{metric}",
                        "value": value,
                        "unit": unit,
                        "client": "a",
                        "server": "b",
                        "link": 0,
                        "extra": {},
                    }
                )
            )
        stats = summarize(samples).to_dict()
        records.append(
            SummaryRecord.model_validate(
                {
                    **base,
                    "type": "summary",
                    "benchmark_index": index,
                    "label": label,
                    "name": f"netperf.{test}.{metric}",
                    "test": test,
                    "metric": metric,
                    "unit": unit,
                    "headline": True,
                    "client": "a",
                    "server": "b",
                    "link": 0,
                    "runs": runs,
                    **stats,
                    "unstable": False,
                    "reasons": [],
                }
            )
        )
    records.append(
        CellEndRecord.model_validate({**base, "type": "cell_end", "time": "2026-11-22T05:13:20Z", "nodes": nodes})
    )
    return records


def make_run(path: Path, cells: int, seed: int) -> int:
    """A run directory of `cells` cells at `path`; returns the size of its results.jsonl."""
    path.mkdir(parents=True)
    rng = random.Random(seed)
    ids = list(cell_ids(cells))
    info = RunInfoRecord(
        scenario=SCENARIO,
        scenario_file=f"{SCENARIO}.yaml",
        scenario_text=f"name: {SCENARIO}\n",
        cells=[cid for cid, _ in ids],
        cell_order=[cid for cid, _ in ids],
        backend="qemu",
        status="ok",
    )
    (path / "run.json").write_text(json.dumps(as_json(info), indent=2) + "\n")
    with (path / "results.jsonl").open("w") as sink:
        for cid, params in ids:
            for record in cell_records(cid, params, rng):
                sink.write(json.dumps(as_json(record)) + "\n")
    return (path / "results.jsonl").stat().st_size


def plan_scenario(path: Path) -> Path:
    """A scenario whose matrix has 1,000 cells (2 kernels × 5 cards × 10 MTUs × 10 coalescing settings)."""
    path.write_text(
        """name: plan-1000
nodes: [a, b]
kernel: ${kernel}
links:
  - between: [a, b]
    nic: ${nic}
    mtu: ${mtu}
    coalesce: {rx-usecs: "${rx_usecs}"}
matrix:
  kernel: [bookworm, trixie]
  nic: [e1000-82545em, e1000, e1000e, vmxnet3, virtio]
  mtu: [1500, 1800, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000]
  rx_usecs: [0, 1, 2, 4, 8, 16, 32, 64, 128, 256]
repeat: 3
benchmarks:
  - netperf: {test: TCP_STREAM, seconds: 5}
  - netperf: {test: TCP_RR, seconds: 5}
"""
    )
    return path


# The CLI as common.niclab runs it (the niclab package's own entry under this interpreter), reporting its own
# peak: a child's ru_maxrss from wait4 is at least what the parent held when it forked (Linux keeps the
# high-water mark across exec), and this parent holds more than a small run needs.
PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    with open('/proc/self/status') as status:\n"
    "        kb = next(line.split()[1] for line in status if line.startswith('VmHWM:'))\n"
    "    sys.stderr.write(f'\\nscale.py peak kB {kb}\\n')\n"
    "atexit.register(peak)\n"
    "sys.argv = ['niclab', *sys.argv[1:]]\n"
    "runpy.run_module('niclab', run_name='__main__', alter_sys=True)\n"
)


def timed(args: list[str]) -> tuple[float, float, float]:
    """`niclab ARGS` in a child process: its wall seconds, CPU seconds (what a busy host does not inflate)
    and peak resident MB (the child's own VmHWM)."""
    started = time.monotonic()
    with open(os.devnull, "w") as devnull:
        child = subprocess.Popen([sys.executable, "-c", PEAK, *args], stdout=devnull, stderr=subprocess.PIPE, cwd=REPO)
        assert child.stderr is not None
        errors = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1) or (code == 1 and args[0] != "compare"):  # compare exits 1 on a worse metric
        sys.exit(f"niclab {' '.join(args)} exited {code}:\n{errors.decode(errors='replace')}")
    child.returncode = code
    peaks = [
        line.split()[-1] for line in errors.decode(errors="replace").splitlines() if line.startswith("scale.py peak")
    ]
    return wall, usage.ru_utime + usage.ru_stime, int(peaks[-1]) / 1024


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", default="1000,5000,20000", help="comma-separated cell counts")
    parser.add_argument("--keep", metavar="DIR", help="make the runs here and keep them (default: a temporary dir)")
    args = parser.parse_args()
    counts = [int(c) for c in args.cells.split(",")]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="niclab-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    commands: list[tuple[str, list[str]]] = [
        ("report", ["report", "{run}", "--out", "{out}/report.html"]),
        ("compare", ["compare", "{run}", "{sibling}", "--out", "{out}/compare.txt"]),
        ("export csv", ["export", "{run}", "--format", "csv", "--out", "{out}/measurements.csv"]),
    ]
    if parquet_available():
        commands.append(("export parquet", ["export", "{run}", "--format", "parquet", "--out", "{out}/m.parquet"]))
    results: dict[str, list[tuple[int, float, float]]] = {name: [] for name, _ in commands}
    print(f"{'cells':>7}  {'command':<15}{'seconds':>9}  {'CPU s':>7}  {'peak MB':>8}  results.jsonl / output")
    try:
        for count in counts:
            run, sibling, out = work / f"run-{count}", work / f"sibling-{count}", work / f"out-{count}"
            for path in (run, sibling, out):
                shutil.rmtree(path, ignore_errors=True)
            size = make_run(run, count, seed=1)
            make_run(sibling, count, seed=2)
            out.mkdir()
            made = f"{size / 1e6:.1f} MB, {size / count / 1000:.2f} KB per cell"
            print(f"{count:>7}  {'(made)':<15}{'':>9}  {'':>7}  {'':>8}  {made}")
            for name, template in commands:
                argv = [a.format(run=run, sibling=sibling, out=out) for a in template]
                wall, cpu, peak = timed(argv)
                results[name].append((count, wall, peak))
                written = Path(argv[argv.index("--out") + 1])
                shown = f"{written.stat().st_size / 1e6:.1f} MB" if written.exists() else ""
                print(f"{count:>7}  {name:<15}{wall:>9.2f}  {cpu:>7.2f}  {peak:>8.0f}  {shown}", flush=True)
        print()
        print(f"{'command':<15}{'s per 1k cells':>15}  {'MB per 1k cells':>16}  (between the smallest and largest run)")
        for name, found in results.items():
            if len(found) > 1:
                (c0, w0, p0), (c1, w1, p1) = found[0], found[-1]
                per = 1000 / (c1 - c0)
                print(f"{name:<15}{(w1 - w0) * per:>15.3f}  {(p1 - p0) * per:>16.1f}")
        scenario = plan_scenario(work / "plan-1000.yaml")
        wall, cpu, peak = timed(["plan", str(scenario)])
        print(f"\nplan of a 1,000-cell matrix: {wall:.2f} s ({cpu:.2f} s CPU), {peak:.0f} MB peak")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
