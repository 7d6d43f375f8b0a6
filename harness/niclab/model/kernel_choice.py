"""Which kernel a node boots: a Debian suite's, or a developer's built tree (`kernel:` in a scenario).

The kernel is as much under test as the card: the driver is part of it. A
choice is made per scenario or per node, and can be a matrix axis
(`matrix: {kernel: [bookworm, trixie]}`). niclab.plumbing.image.kernels builds the
image for it; niclab.plumbing.kernel_check says whether it has what a scenario needs.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from niclab.base.problems import did_you_mean, shown

#: The Debian suites a scenario can name, and what their kernel is.
SUITES = {
    "bookworm": "Debian 12's kernel (6.1), the micro image's own",
    "bookworm-backports": "the newer kernel Debian 12 backports",
    "trixie": "Debian 13's kernel",
    "sid": "Debian unstable's kernel, the newest packaged",
}
DEFAULT_SUITE = "bookworm"  # the micro recipe's suite (a unit test keeps them equal)


@dataclass(frozen=True)
class KernelChoice:
    """A Debian suite's kernel, or a built tree's (an absolute path)."""

    suite: str = ""
    build: str = ""

    def __str__(self) -> str:
        return self.suite or f"build:{self.build}"

    @property
    def is_default(self) -> bool:
        return self.suite == DEFAULT_SUITE

    @property
    def slug(self) -> str:
        """Its part of an image directory's name."""
        if self.suite:
            return self.suite
        return "build-" + hashlib.sha256(self.build.encode()).hexdigest()[:12]


def parse_kernel(value: Any, base: Path | None = None) -> KernelChoice:
    """`trixie` or `{build: ../linux}` (relative to `base`, the scenario's directory); ValueError says why not."""
    if isinstance(value, KernelChoice):
        return value
    if isinstance(value, str):
        if value in SUITES:
            return KernelChoice(suite=value)
        hint = did_you_mean(value, SUITES)
        raise ValueError(
            f"unknown kernel {shown(value)}; {hint + ' ' if hint else ''}kernels are the Debian suites "
            f"{', '.join(SUITES)}, or {{build: DIR}} for a kernel tree you built"
        )
    if isinstance(value, dict) and set(value) == {"build"} and isinstance(value["build"], str) and value["build"]:
        try:
            tree = ((base or Path.cwd()) / Path(value["build"]).expanduser()).resolve()
        except (RuntimeError, OSError, ValueError) as exc:  # ~nosuchuser, a symlink loop, a NUL byte
            raise ValueError(f"kernel build {shown(value['build'])}: not a usable path ({exc})") from None
        if not tree.is_dir():
            raise ValueError(f"kernel build {shown(value['build'])}: no such directory ({tree})")
        return KernelChoice(build=str(tree))
    raise ValueError(f"kernel is a Debian suite ({', '.join(SUITES)}) or {{build: DIR}}, not {shown(value)}")
