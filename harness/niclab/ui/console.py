"""What every front end says on the terminal, one way: progress lines, file checks, exit codes.

Everything reaches the terminal through `terminal_streams`, each unprintable character escaped (base.text);
a run's progress is one line updated in place in a terminal, plain lines in a log. Exit codes: EXIT_OK 0,
EXIT_FAILED 1, EXIT_USAGE 2, EXIT_BUG 3 (docs/architecture.md, "Failure handling").
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from niclab.base.errors import UsageError
from niclab.base.problems import ScenarioError
from niclab.base.text import one_line

if TYPE_CHECKING:
    from niclab.run.progress import RunProgress

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3
T = TypeVar("T")
STARTED = time.monotonic()  # as early as the command can know it
TICK_S = 1.0  # how often the run's line in a terminal counts the time
CLEAR = "\r\x1b[K"  # to the start of the line, and erase it
FALLBACK_WIDTH = 80  # columns, when the terminal does not say


def clock(seconds: float) -> str:
    """A duration as a clock reads it: 0:07, 12:34, 1:02:03."""
    minutes, secs = divmod(round(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def describe_progress(progress: RunProgress) -> str:
    """The run so far, in one line: cells and runs done of all, time elapsed and the estimate of the time left."""
    failed = f" ({progress.cells_failed} failed)" if progress.cells_failed else ""
    parts = [
        f"{progress.cells_done}/{progress.cells} cells done{failed}",
        f"{progress.runs_done}/{progress.runs} runs",
        f"{clock(progress.elapsed_s)} elapsed",
    ]
    if progress.left_s is None:
        pass
    elif progress.left_s >= 1:
        parts.append(f"about {clock(progress.left_s)} left")
    else:  # the estimate is spent: the last cells are ending (their runs are done), or the run is slower than it
        parts.append("ending" if progress.runs_done >= progress.runs else "over the estimate")
    return ", ".join(parts)


def shown_lines(text: str) -> str:
    """`text` as the terminal shows it: each line's control characters escaped, the line breaks kept."""
    return "\n".join(one_line(line) for line in text.split("\n"))


class TerminalText:
    """A text stream whose writes show control characters escaped (`shown_lines`); `raw` is the stream under
    it, for niclab's own control sequences (the run's line that updates in place)."""

    def __init__(self, raw: TextIO):
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(shown_lines(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


@contextmanager
def terminal_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr as TerminalText for the length of the block (a command's run)."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, TerminalText):
        sys.stdout = TerminalText(sys.stdout)
    if not isinstance(sys.stderr, TerminalText):
        sys.stderr = TerminalText(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


class ProgressLines:
    """Progress lines on stderr, stamped with the time since the command started; and a run's progress
    (`watch`, while `showing_run`): one updating line in a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool = False, stream: TextIO | None = None):
        self.started = STARTED
        self.quiet = quiet
        self._stream = stream  # sys.stderr as it is when a line is printed, unless given
        self._lock = threading.RLock()  # the units of a parallel run and the clock's ticks print at once
        self._run: RunProgress | None = None  # the run's line at the bottom of the terminal, while it is shown
        self._shown = False  # the run's line is on the screen, after the last progress line
        self._ticking: threading.Event | None = None  # set to stop the clock's ticks; None: no line is shown

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _stamp(self, message: str, now: float | None = None) -> str:
        return f"[{(time.monotonic() if now is None else now) - self.started:7.1f}s] {message}"

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._write(f"{CLEAR if self._shown else ''}{self._stamp(one_line(message))}\n")
            self._shown = False
            self._draw()

    def _write(self, text: str) -> None:
        """Write niclab's own line (its messages already escaped, its control sequences meant)."""
        stream = self.stream
        raw = stream.raw if isinstance(stream, TerminalText) else stream
        raw.write(text)
        raw.flush()

    # -- the run's line -----------------------------------------------------------------------------------

    def watch(self, progress: RunProgress) -> None:
        """What the runner tells as runs and cells end (niclab.run.progress.Watch)."""
        if self.quiet:
            return
        with self._lock:
            if self._ticking is not None:
                self._run = progress
                self._draw()
            elif progress.event != "run":  # a log gets the start and each ended cell
                ended = f"cell {progress.cell} ended: " if progress.cell is not None else "run: "
                self._write(self._stamp(ended + describe_progress(progress), progress.at) + "\n")

    def _draw(self) -> None:
        """The run's line, after the progress lines, cut to the terminal's width (a wrapped line cannot be
        erased in place)."""
        if self._run is None or self._ticking is None:
            return
        now = time.monotonic()
        line = self._stamp(describe_progress(self._run.advanced(now)), now)
        self._write((CLEAR if self._shown else "\r") + line[: self._width() - 1])
        self._shown = True

    @contextmanager
    def showing_run(self) -> Iterator[None]:
        """While the run goes: in a terminal, its line at the bottom, ticking with the clock; after it,
        its last state as a progress line of its own."""
        if self.quiet or not is_terminal(self.stream):
            yield
            return
        stop = threading.Event()
        with self._lock:
            self._ticking = stop
        ticker = threading.Thread(target=self._tick, args=(stop,), name="niclab-run-line", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
            with self._lock:
                self._ticking = None
                last, self._run = self._run, None
                if self._shown:
                    self._write(CLEAR)
                    self._shown = False
                if last is not None:
                    now = time.monotonic()
                    self._write(self._stamp("run: " + describe_progress(last.advanced(now)), now) + "\n")

    def _width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or FALLBACK_WIDTH
        except (AttributeError, OSError, ValueError):  # no descriptor, or not a terminal after all
            return shutil.get_terminal_size((FALLBACK_WIDTH, 24)).columns

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(TICK_S):
            with self._lock:
                self._draw()


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
