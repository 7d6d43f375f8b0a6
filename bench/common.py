"""What the bench scripts share: the repository, the niclab CLI, timed runs, the busy process, medians.

How a bench reaches niclab, one way for all of them:

- A run is measured as users make it: the CLI in a child process, `niclab(ARGS)` here: this
  interpreter (the repository's .venv/bin/python) running the niclab package's own entry, `-m niclab`.
  The package, not the .venv/bin/niclab script, so that a tree of another revision (PYTHONPATH=its
  harness, as cell_cost.py runs one) starts its own CLI wherever it kept it.
- niclab.* is imported only for what has no command: reading or making run directories as niclab does
  (load_run, compare, the records' models), a figure it judges by, an image's directory, a Session driven
  step by step, a library function timed in-process (fidelity.py, vagrant_up.py, sizes.py).
- niclab is imported by its installed name: nothing here puts harness/ on sys.path. The tests' fakes and
  builders (tests/) become importable through `tests_importable()`.
- A bench script imports no other bench script, only this module.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
TWO_NODE = REPO / "scenarios" / "two-node.yaml"


def niclab(*args: str) -> list[str]:
    """The command line of `niclab ARGS`: this interpreter running the niclab package."""
    return [sys.executable, "-m", "niclab", *args]


def niclab_script() -> Path:
    """The `niclab` command beside this interpreter (the repository's .venv/bin/niclab): for a program
    that wants one executable to run, not for the benches' own runs (the Vagrantfile's NICLAB)."""
    return Path(sys.executable).with_name("niclab")


def tests_importable() -> None:
    """Let `tests.…` be imported: the repository's own test fakes and builders (tests/ is a package
    of the repository, not of the installed niclab)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def newest_run(out: Path) -> Path:
    """The run directory niclab made last under `out`."""
    runs = [path for path in out.iterdir() if path.is_dir()] if out.is_dir() else []
    if not runs:
        sys.exit(f"niclab made no run directory in {out}")
    return max(runs, key=lambda path: path.stat().st_mtime)


def records(run_dir: Path) -> list[dict[str, Any]]:
    """A run directory's records as its results.jsonl holds them (plain JSON: a run written by another
    revision reads as well as this one's)."""
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


@dataclass(frozen=True)
class TimedRun:
    run_dir: Path  # the run directory the run made
    wall: float  # seconds from starting `niclab run` to its exit
    returncode: int
    stderr: str

    def records(self) -> list[dict[str, Any]]:
        return records(self.run_dir)


def timed_run(
    scenario: Path | str,
    out: Path,
    *options: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
) -> TimedRun:
    """`niclab run SCENARIO --out OUT -q OPTIONS` in a child process, timed. On failure, with `check`,
    exits with the tail of what niclab said; without, returns what the run recorded."""
    argv = niclab("run", str(scenario), "--out", str(out), "-q", *options)
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    wall = time.monotonic() - started
    if check and result.returncode != 0:
        where = f" (in {cwd})" if cwd else ""
        sys.exit(f"{' '.join(argv[2:])}{where} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return TimedRun(newest_run(out), wall, result.returncode, result.stderr)


def run_scenario(work: Path, name: str, text: str) -> Path:
    """`niclab run` of a scenario text, written to WORK/NAME.yaml, into WORK/NAME (quietly, exiting on
    failure); its run directory."""
    scenario = work / f"{name}.yaml"
    scenario.write_text(text)
    return timed_run(scenario, work / name).run_dir


@dataclass
class Busy:
    pid: int
    ended_early: bool = False  # the busy process was gone before the work ended: the load was not there throughout


@contextmanager
def busy_process() -> Iterator[Busy]:
    """One process spinning on a CPU (`yes > /dev/null`), as a CI runner's neighbour would: started here,
    given a second to get going, and ended by its PID when the block ends."""
    with open(os.devnull, "w") as sink:
        proc = subprocess.Popen(["yes"], stdout=sink)
    busy = Busy(proc.pid)
    try:
        time.sleep(1)
        yield busy
    finally:
        busy.ended_early = proc.poll() is not None
        proc.terminate()
        proc.wait()


def medians(*series: Iterable[float]) -> tuple[float, ...]:
    """The median of each series: the figures of runs made alternating in one go, whose ratio a bench
    prints (the ratio holds on a shared host when the seconds do not)."""
    return tuple(statistics.median(values) for values in series)
