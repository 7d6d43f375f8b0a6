#!/usr/bin/env python3
"""Do the integration tests that measure pass beside a busy process? Passes and failures counted, failures named.

Runs the integration tests marked `measures` (those that judge measured
figures: throughput, round trips, transaction rates, compare's verdicts on
them) with one busy host process beside them the whole time (`yes >
/dev/null`, started and ended here by PID), as a shared CI runner's
neighbour or a developer's build would be, and prints how many passed and
failed out of how many, naming each failure. The tests' outcomes come from
pytest's JUnit XML, not its console, which is shown as it runs.

--tests narrows the run: node ids or files (anything with a "/" or "::")
replace tests/integration, anything else is a `-k` expression; only tests
marked `measures` run either way. --keep keeps pytest's temporary
directories (the tests' run directories) and the JUnit XML in DIR.

Goal (issue 31): every one of them passes. A test that fails only because
the host is busy is a defect of the test: it should judge within one run
(A/B cells) or assert what niclab must say under contention.

    .venv/bin/python bench/busy_suite.py [--tests EXPR_OR_NODE_ID ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from common import REPO, busy_process

MARKER = "measures"


@dataclass
class Outcome:
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # failures and errors
    skipped: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.passed) + len(self.failed) + len(self.skipped)


def pytest_args(tests: list[str], junit: Path, basetemp: Path) -> list[str]:
    """The pytest command line: the marked tests, narrowed by node ids (or files) and a -k expression."""
    paths = [t for t in tests if "/" in t or "::" in t]
    expression = " ".join(t for t in tests if t not in paths)
    args = [sys.executable, "-m", "pytest", *(paths or ["tests/integration"]), "-m", MARKER, "-p", "no:cacheprovider"]
    args += ["-rfE", f"--junitxml={junit}", f"--basetemp={basetemp}"]
    return args + (["-k", expression] if expression else [])


def node_id(case: ElementTree.Element) -> str:
    """A JUnit test case as pytest names it: tests/integration/test_compare.py::test_x."""
    module, name = case.get("classname", ""), case.get("name", "")
    parts = module.split(".")
    for at in range(len(parts), 0, -1):  # the module's file, then a test class inside it, if any
        path = REPO.joinpath(*parts[:at]).with_suffix(".py")
        if path.is_file():
            return "::".join([str(path.relative_to(REPO)), *parts[at:], name])
    return f"{module}::{name}"


def outcome_of(junit: Path) -> Outcome:
    found = Outcome()
    if not junit.is_file():
        return found
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        bucket = found.failed if kinds & {"failure", "error"} else found.skipped if "skipped" in kinds else found.passed
        bucket.append(node_id(case))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", nargs="+", default=[], help="node ids or files, or a -k expression")
    parser.add_argument("--keep", type=Path, help="keep pytest's temporary directories and the JUnit XML here")
    args = parser.parse_args()
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="niclab-busy-"))
    work.mkdir(parents=True, exist_ok=True)
    junit = work / "junit.xml"
    command = pytest_args(args.tests, junit, work / "pytest")
    started = time.monotonic()
    with busy_process() as busy:
        print(f"beside a busy process (yes > /dev/null, PID {busy.pid}): {' '.join(command[1:])}", flush=True)
        code = subprocess.run(command, cwd=REPO, check=False).returncode
    minutes = (time.monotonic() - started) / 60
    found = outcome_of(junit)
    print(
        f"\n{len(found.passed)} of {found.total} measuring tests passed beside a busy process, "
        f"{len(found.failed)} failed, {len(found.skipped)} skipped ({minutes:.1f} min; pytest exit status {code})"
    )
    for name in found.failed:
        print(f"  failed: {name}")
    if busy.ended_early:
        print("the busy process ended before the tests did: the host was not busy throughout")
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if found.total and not found.failed and not busy.ended_early else 1)


if __name__ == "__main__":
    main()
