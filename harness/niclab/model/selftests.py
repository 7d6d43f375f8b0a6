"""The kernel's own NIC driver selftests: which kernels have them, and what a bundle of them is.

`tools/testing/selftests/drivers/net` (and `drivers/net/hw`) are Python tests
that judge a driver on a real NIC or an emulated one: NETIF is the port under
test, the remote end is another machine reached over ssh. They arrived after
Linux 6.1, so Debian 12's own kernel has none; the suites below carry a newer
kernel and its `linux-source` package. niclab.plumbing.kselftest fetches and
installs them per kernel (a "bundle"); the kselftest benchmark runs them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

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


def raw_name(target: str, test: str) -> str:
    """The name a test program's raw output is saved under (save_raw adds -N.txt): kselftest-drivers-net-ping.py.

    nipa.json links each test to it (niclab.ui.nipa), as NIPA's executors link their per-test log."""
    return "kselftest-" + re.sub(r"[^0-9A-Za-z._-]+", "-", f"{target}/{test}").strip("-.")
