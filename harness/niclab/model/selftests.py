"""The kernel's own NIC driver selftests: which kernels have them, and what a bundle of them is.

They arrived after Linux 6.1, so Debian 12's kernel has none; niclab.plumbing.kselftest fetches and installs
them per kernel (a bundle), the kselftest benchmark runs them (docs/benchmarks.md, "The kernel's own driver
tests").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from niclab.base.problems import did_you_mean
from niclab.model.kernel_choice import DEFAULT_SUITE, KernelChoice

#: The Debian suites whose kernel source has the drivers/net selftests, and the one without.
SUITES_WITH_TESTS = ("trixie", "bookworm-backports", "sid")
SUITES_WITHOUT = {"bookworm": "Debian 12's kernel 6.1"}
TARGETS = ("drivers/net", "drivers/net/hw")  # the targets the kselftest benchmark knows how to run
MAX_TIMEOUT = 3600  # a bundle's `settings` may ask more (a bundle is a scenario's, untrusted): this is the most
DEFAULT_TIMEOUT = 45  # kselftest's per-test timeout where a target's `settings` names none (0: none at all)
LIST_FILE = "kselftest-list.txt"  # what `make install` writes: one `target:program` a line


@dataclass(frozen=True)
class SelftestBundle:
    """Installed selftests (what `make -C tools/testing/selftests TARGETS=... install` writes), packed.

    `archive` is a gzip'd tar of the installed tree: run_kselftest.sh,
    kselftest-list.txt and one folder per target with its tests and the
    shared libraries (drivers/net/lib/py, net/lib/py, the YNL specs).
    """

    archive: Path
    source: str  # where it came from: "Debian trixie linux-source-6.12 6.12.107-1", "build tree /src/linux"
    version: str  # the kernel version of its source: 6.12.107
    tests: tuple[tuple[str, str], ...]  # (target, test program) as kselftest-list.txt lists them, in its order
    timeouts: dict[str, int] = field(default_factory=dict)  # target -> seconds per test, from its `settings`

    def timeout(self, target: str) -> int:
        """Seconds per test of the target, as run_kselftest.sh would allow them; 0 means no limit."""
        return self.timeouts.get(target, DEFAULT_TIMEOUT)

    def of(self, targets: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        """The bundle's tests of these targets, in its order."""
        return tuple((target, test) for target, test in self.tests if target in targets)

    def select(self, targets: tuple[str, ...], tests: Iterable[str] = ()) -> tuple[tuple[str, str], ...]:
        """The tests of these targets a scenario's `tests:` names (`ping.py` or `drivers/net:ping.py`), all of
        them when it names none; in the bundle's order. Names it lacks are missing_tests'."""
        wanted = set(tests)
        return tuple(
            (target, test)
            for target, test in self.of(targets)
            if not wanted or test in wanted or f"{target}:{test}" in wanted
        )

    def missing_tests(self, targets: tuple[str, ...], tests: Iterable[str]) -> list[tuple[str, str]]:
        """The names in a scenario's `tests:` that none of these targets' tests in the bundle answers, each
        with a did-you-mean hint ("" when nothing is close)."""
        have = self.of(targets)
        names = {test for _, test in have} | {f"{target}:{test}" for target, test in have}
        return [(name, did_you_mean(name, sorted(names))) for name in tests if name not in names]


def parse_list(text: str, where: str = LIST_FILE) -> tuple[tuple[str, str], ...]:
    """kselftest-list.txt's `target:program` lines; ValueError names the line that is not one."""
    tests = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        target, colon, test = line.strip().partition(":")
        if not colon or not target or not test or "/" in test or ".." in target.split("/"):
            raise ValueError(f"{where}:{number}: {line[:80]!r} is not `target:program`")
        tests.append((target, test))
    return tuple(tests)


def parse_settings(text: str) -> int | None:
    """The `timeout=N` of a target's `settings` file (kselftest's per-test limit; 0: none), None if it sets none."""
    for line in text.splitlines():
        key, equals, value = line.partition("=")
        if equals and key.strip() == "timeout" and value.strip().isdigit() and len(value.strip()) < 10:
            return min(int(value.strip()), MAX_TIMEOUT)
    return None


def _with_tests() -> str:
    first, *others = SUITES_WITH_TESTS
    return f"kernel: {first}" + (f" (or {', '.join(others)})" if others else "")


def kernel_problem(choice: KernelChoice | None, targets: tuple[str, ...]) -> str | None:
    """Why the kernel a node boots (None: the image's own) has no selftests of these targets, in one line; None
    when it has them. Decided before anything is fetched or booted: a suite by its name, a build tree by its
    tools/testing/selftests/<target>/Makefile."""
    if choice is not None and choice.build:
        absent = [t for t in targets if not (Path(choice.build) / "tools/testing/selftests" / t / "Makefile").is_file()]
        if not absent:
            return None
        return (
            f"kernel {choice} has no {' or '.join(absent)} selftests (no tools/testing/selftests/{absent[0]}/Makefile "
            f"in the tree): use {{build: DIR}} of a newer tree, or {_with_tests()}"
        )
    suite = choice.suite if choice is not None else DEFAULT_SUITE
    if suite in SUITES_WITH_TESTS:
        return None
    what = f"{suite} ({SUITES_WITHOUT[suite]})" if suite in SUITES_WITHOUT else suite
    own = "" if choice is not None else ", the image's own kernel,"
    return (
        f"kernel {what}{own} has no {' or '.join(targets)} selftests: they are newer than that Linux; "
        f"use {_with_tests()}, or {{build: DIR}} of a newer tree"
    )


def raw_name(target: str, test: str) -> str:
    """The name a test program's raw output is saved under (save_raw adds -N.txt): kselftest-drivers-net-ping.py.

    nipa.json links each test to it (niclab.ui.nipa), as NIPA's executors link their per-test log."""
    return "kselftest-" + re.sub(r"[^0-9A-Za-z._-]+", "-", f"{target}/{test}").strip("-.")
