"""What every front end says on the terminal, one way: progress lines, file checks, exit codes.

Exit codes: EXIT_OK (0) ok; EXIT_FAILED (1) a failed cell, benchmark or expectation, an interrupted run, a
file that does not validate; EXIT_USAGE (2) the command line is wrong or a file it names does not exist.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from niclab.base.errors import UsageError
from niclab.base.problems import ScenarioError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
T = TypeVar("T")
STARTED = time.monotonic()  # as early as the command can know it


class ProgressLines:
    """Progress lines on stderr, stamped with the time since the command started."""

    def __init__(self, quiet: bool = False):
        self.started = STARTED
        self.quiet = quiet

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.started:7.1f}s] {message}", file=sys.stderr, flush=True)


class FileCheck:
    """Load files one at a time (`validate`, `lab check`): a file with problems prints them to stderr and
    raises the exit status; the files that load are handed on."""

    def __init__(self) -> None:
        self.status = EXIT_OK

    def each(self, names: list[str], load: Callable[[Path], T]) -> Iterator[tuple[str, T]]:
        for name in names:
            try:
                loaded = load(Path(name))
            except ScenarioError as exc:  # each problem with its position (lab inventories' too)
                print(exc, file=sys.stderr)
                self.status = max(self.status, exc.exit_code)
                continue
            except UsageError as exc:  # no such file, cannot read it
                print(f"niclab: {exc}", file=sys.stderr)
                self.status = max(self.status, exc.exit_code)
                continue
            yield name, loaded
