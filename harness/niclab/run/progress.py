"""The whole run's progress: cells and benchmark runs done of all, time elapsed, and an estimate of the time left.

The runner tells a RunTally what ends (from any unit's thread), and the front end's watcher gets a RunProgress
after each; the time left is the plan's seconds not yet credited times the measured pace
(docs/architecture.md, "The time left is the plan's, at the pace the run keeps").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from niclab.model.scenario import Cell
from niclab.run.plan import estimates, repeats, run_seconds

Event = Literal["start", "run", "cell"]


@dataclass(frozen=True)
class RunProgress:
    """The run as it stands at `at` (time.monotonic()), after `event`."""

    event: Event  # the run started, a benchmark run ended, or a cell ended (`cell` says which)
    cells: int
    cells_done: int  # ended, failed ones included
    cells_failed: int  # ended with an error or a missed expectation
    runs: int  # benchmark runs of every cell, each repeat counted
    runs_done: int  # ended, failed ones included; a failed cell's runs that will not run count as done
    elapsed_s: float  # since the run began
    left_s: float | None  # the estimate of the time left; None once every cell has ended
    at: float
    cell: str | None = None  # the cell that ended (event "cell")

    @property
    def finished(self) -> bool:
        return self.cells_done >= self.cells

    def advanced(self, now: float) -> RunProgress:
        """The same progress seen at `now`: elapsed grows with the clock, the time left shrinks (to 0 at least)."""
        gone = max(0.0, now - self.at)
        left = None if self.left_s is None else max(0.0, self.left_s - gone)
        return replace(self, elapsed_s=self.elapsed_s + gone, left_s=left, at=max(now, self.at))


Watch = Callable[[RunProgress], None]


def time_left(planned_s: float, credited_s: float, measured_s: float, prior_s: float) -> float:
    """Seconds the rest of a run should take: the planned seconds not yet credited, at the measured pace.

    The pace is wall seconds per credited planned second, the plan counted as `prior_s` seconds of work
    that ran as planned: with nothing credited it is the plan's own (1), and the more work has ended the
    more it is the measured one.
    """
    weight = credited_s + prior_s
    pace = (measured_s + prior_s) / weight if weight > 0 else 1.0
    return pace * max(0.0, planned_s - credited_s)


@dataclass
class _CellPlan:
    planned_s: float  # the plan's whole estimate of the cell
    run_s: list[float]  # one run of each benchmark
    repeats: list[int]  # each benchmark's runs
    credited_s: float = 0.0
    runs_done: int = 0
    started: bool = False  # a run of it has ended: its boot and network are credited
    ended: bool = False

    @property
    def runs(self) -> int:
        return sum(self.repeats)

    @property
    def setup_s(self) -> float:
        """Its boot and network set-ups: the plan's estimate less its benchmark runs."""
        return max(0.0, self.planned_s - sum(s * n for s, n in zip(self.run_s, self.repeats, strict=True)))


class RunTally:
    """Counts what has ended of a run's cells (numbered from 1, as the runner numbers them) and tells `watch`.

    Safe to call from several threads (the units of a parallel run); `watch` is called with the tally's lock
    held, so the progress it sees arrives in order.
    """

    def __init__(
        self,
        cells: Sequence[Cell],
        watch: Watch,
        repeat: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._watch = watch
        self._clock = clock
        self._lock = threading.Lock()
        self._plans: list[_CellPlan] = []
        for found in estimates(list(cells), repeat):
            each = [run_seconds(spec) for spec in found.cell.scenario.benchmarks]
            self._plans.append(_CellPlan(found.total_s, each, repeats(found.cell, repeat)))
        self.planned_s = sum(plan.planned_s for plan in self._plans)
        self._prior_s = self.planned_s / len(self._plans) if self._plans else 0.0
        self.started = clock()
        self._last = self.started  # when the last run or cell ended
        self._failed = 0

    def start(self) -> None:
        """Tell the watcher what the run holds before anything has run."""
        with self._lock:
            self._tell("start")

    def run_ended(self, number: int, index: int) -> None:
        """A run of the cell's benchmark `index` ended, ok or not."""
        with self._lock:
            plan = self._plans[number - 1]
            if plan.ended:
                return
            credit = plan.run_s[index] + (0.0 if plan.started else plan.setup_s)
            plan.started = True
            plan.runs_done = min(plan.runs, plan.runs_done + 1)
            plan.credited_s = min(plan.planned_s, plan.credited_s + credit)
            self._last = self._clock()
            self._tell("run")

    def cell_ended(self, number: int, cell: str, failed: bool) -> None:
        """The cell ended, ok or failed: it counts as done whole, the runs it did not get to included."""
        with self._lock:
            plan = self._plans[number - 1]
            if plan.ended:
                return
            plan.ended, plan.started = True, True
            plan.runs_done, plan.credited_s = plan.runs, plan.planned_s
            self._failed += failed
            self._last = self._clock()
            self._tell("cell", cell)

    def _tell(self, event: Event, cell: str | None = None) -> None:
        now = self._clock()
        done = sum(plan.ended for plan in self._plans)
        credited = sum(plan.credited_s for plan in self._plans)
        left: float | None = None
        if done < len(self._plans):
            at_last = time_left(self.planned_s, credited, self._last - self.started, self._prior_s)
            left = max(0.0, at_last - (now - self._last))
        self._watch(
            RunProgress(
                event=event,
                cells=len(self._plans),
                cells_done=done,
                cells_failed=self._failed,
                runs=sum(plan.runs for plan in self._plans),
                runs_done=sum(plan.runs_done for plan in self._plans),
                elapsed_s=now - self.started,
                left_s=left,
                at=now,
                cell=cell,
            )
        )
