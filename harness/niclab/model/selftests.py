"""The kernel's own NIC driver selftests: which kernels have them, and what a bundle of them is.

`tools/testing/selftests/drivers/net` (and `drivers/net/hw`) are Python tests
that judge a driver on a real NIC or an emulated one: NETIF is the port under
test, the remote end is another machine reached over ssh. They arrived after
Linux 6.1, so Debian 12's own kernel has none; the suites below carry a newer
kernel and its `linux-source` package. niclab.plumbing.kselftest fetches and
installs them per kernel (a "bundle"); the kselftest benchmark runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from niclab.model.kernel_choice import KernelChoice

#: The Debian suites whose kernel source has the drivers/net selftests, and the one without.
SUITES_WITH_TESTS = ("trixie", "bookworm-backports", "sid")
SUITES_WITHOUT = {"bookworm": "Debian 12's kernel 6.1 predates the drivers/net selftests (Linux 6.9 and later)"}
TARGETS = ("drivers/net", "drivers/net/hw")  # the targets the kselftest benchmark knows how to run
DEFAULT_TIMEOUT = 45  # kselftest's per-test timeout where a target's `settings` names none


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
        return self.timeouts.get(target, DEFAULT_TIMEOUT)

    def of(self, targets: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        """The bundle's tests of these targets, in its order."""
        return tuple((target, test) for target, test in self.tests if target in targets)


def kernel_problem(choice: KernelChoice | None, targets: tuple[str, ...]) -> str | None:
    """Why a node booting `choice` (None: the image's own, bookworm) cannot run the targets' selftests, or None."""
    if choice is not None and choice.suite in SUITES_WITH_TESTS:
        return None
    if choice is not None and choice.build:
        tree = Path(choice.build) / "tools/testing/selftests"
        missing = [t for t in targets if not (tree / t / "Makefile").is_file()]
        if not missing:
            return None
        return (
            f"kernel build {choice.build} has no {', '.join(missing)} selftests (tools/testing/selftests); "
            "use a newer tree, or a Debian suite that has them: " + ", ".join(SUITES_WITH_TESTS)
        )
    suite = choice.suite if choice is not None else "bookworm"
    why = SUITES_WITHOUT.get(suite, f"Debian {suite}'s kernel has none")
    return (
        f"kernel {suite} cannot run the {', '.join(targets)} selftests: {why}; "
        f"use kernel: {SUITES_WITH_TESTS[0]} (or {', '.join(SUITES_WITH_TESTS[1:])}), or {{build: DIR}} of a newer tree"
    )
