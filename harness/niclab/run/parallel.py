"""`niclab run --lab lab.yaml --parallel`: units of cells at once wherever their cards or host capacity are free.

Each unit (niclab.run.units) runs in a thread with its own Runner, on a backend pinned to its placement; the
main thread starts units as resources come free and writes their records in unit order, as a sequential run
does. A failed unit fails its cells only; Ctrl-C stops them all and keeps what they recorded (docs/lab.md,
"Running": cells at once).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from niclab.base.errors import NiclabError, UsageError, describe_exception
from niclab.model.lab.match import Unrealizable
from niclab.model.lab.spread import Claim, Held
from niclab.model.scenario import Cell
from niclab.plumbing.backends.base import Backend, Spreading
from niclab.run.records import Record, RunInfoRecord
from niclab.run.results import RunDir
from niclab.run.runner import CellOutcome, RunAborted, Runner, RunOutcome
from niclab.run.units import Start, Unit, starts, units_of

JOIN_S = 60.0  # after Ctrl-C, how long a unit's thread gets to stop its guests before the run ends without it


class BufferedRunDir(RunDir):
    """A unit's view of the run directory: its cells' directories as they are, its records kept until the
    units before it have written theirs; after Ctrl-C (`closed`) it keeps no more."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.records: list[Record] = []
        self.closed = False

    def append(self, record: Record) -> None:
        if not self.closed:
            self.records.append(record)

    def write_info(self, info: RunInfoRecord) -> None:
        """run.json is the parallel run's own: a unit's warnings go in when its records do."""


@dataclass
class UnitRun:
    unit: Unit
    runner: Runner
    run_dir: BufferedRunDir
    claim: Claim = field(default_factory=Claim)
    thread: threading.Thread | None = None
    outcomes: list[CellOutcome] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    done: bool = False
    written: bool = False


class ParallelRun:
    def __init__(self, runner: Runner):
        if not isinstance(runner.backend, Spreading):
            raise UsageError(f"the {runner.backend.name} backend does not run cells at once; --parallel needs libvirt")
        self.main = runner
        self.spreading: Spreading = runner.backend
        self._stop = threading.Event()
        self._ended: queue.Queue[UnitRun] = queue.Queue()
        self._say_lock = threading.Lock()
        self.units: list[UnitRun] = []
        self._cells_list: list[Cell] = []

    def progress(self, message: str) -> None:
        with self._say_lock:
            self.main._progress(message)

    # -- the run ----------------------------------------------------------

    def run(self, cells: Sequence[Cell]) -> RunOutcome:
        """Run the cells unit by unit at once; run.json ends ok, failed or interrupted, as Runner.run's."""
        main = self.main
        main.info.status = "running"
        main._write_info()
        self._cells_list = list(cells)
        self.units = [self._unit_run(unit, cells) for unit in units_of([cell.topology for cell in cells])]
        tally = main.start_tally(cells)  # shared: units tell it what ends, in whatever order it ends
        for run in self.units:
            run.runner.tally = tally
        waiting = list(self.units)
        running: list[UnitRun] = []
        try:
            while waiting or running:
                for begun in self._starts(waiting, running):
                    waiting.remove(begun)
                    running.append(begun)
                if not running:  # nothing fits even on an idle lab: the first waiting unit fails
                    self._unplaceable(waiting.pop(0))
                    continue
                ended = self._ended.get()
                running.remove(ended)
                self._write_done()
        except KeyboardInterrupt:
            self._interrupt(running)
            main._finish("interrupted", "interrupted; every guest was stopped")
            raise
        except Exception as exc:
            self._interrupt(running)
            raise self._aborted(exc) from None
        outcomes = [outcome for unit in self.units for outcome in unit.outcomes]
        order = {cell.id: n for n, cell in enumerate(cells)}
        outcomes.sort(key=lambda outcome: order[outcome.cell.id])
        return main.conclude(outcomes)

    def _aborted(self, exc: Exception) -> NiclabError:
        message = describe_exception(exc)
        self.main.info.error = {"message": message}
        self.main._finish("failed", f"the run stopped early: {message}")
        return RunAborted(f"the run stopped early: {message}; see {self.main.run_dir.path / 'run.json'}")

    def _unit_run(self, unit: Unit, cells: Sequence[Cell]) -> UnitRun:
        main = self.main
        run_dir = BufferedRunDir(main.run_dir.path)
        info = main.info.model_copy(update={"warnings": [], "internal_errors": []})
        runner = Runner(
            main.backend, run_dir, info, self.progress, started=main.started, repeat=main.repeat, tagged=True
        )
        runner.stopping = self._stop.is_set
        return UnitRun(unit, runner, run_dir)

    def _starts(self, waiting: list[UnitRun], running: list[UnitRun]) -> list[UnitRun]:
        by_unit = {id(run.unit): run for run in waiting}
        failed: list[UnitRun] = []

        def fits(unit: Unit, held: Held) -> tuple[Claim, Backend] | None:
            try:
                return self.spreading.claim(unit.topology, held)
            except Unrealizable as exc:
                failed.append(by_unit[id(unit)])
                self._fail(by_unit[id(unit)], str(exc))
                return None

        begun: list[Start[Backend]] = starts([run.unit for run in waiting], [run.claim for run in running], fits)
        for run in failed:
            waiting.remove(run)
            self._write_done()
        out = []
        for start in begun:
            run = by_unit[id(start.unit)]
            run.claim, run.runner.backend = start.claim, start.placed
            run.thread = threading.Thread(target=self._run_unit, args=(run,), name=f"niclab-unit-{run.unit.number}")
            run.started_at = time.monotonic()
            run.thread.start()
            out.append(run)
        return out

    def _run_unit(self, run: UnitRun) -> None:
        cells = self._cells(run)
        try:
            run.outcomes = run.runner.run_unit(cells, len(self._cells_list), run.unit.number)
        except KeyboardInterrupt:
            pass  # Ctrl-C: the main thread ends the run
        except Exception as exc:  # a bug in a unit: its cells fail, the others go on
            self._fail(run, f"the unit of {', '.join(cell.id for _, cell in cells)} stopped: {describe_exception(exc)}")
        finally:
            run.ended_at = time.monotonic()
            run.done = True
            self._ended.put(run)

    def _cells(self, run: UnitRun) -> list[tuple[int, Cell]]:
        return [(index + 1, self._cells_list[index]) for index in run.unit.cells]

    def _unplaceable(self, run: UnitRun) -> None:
        self._fail(run, "no lab host can take it")
        self._write_done()

    def _fail(self, run: UnitRun, message: str) -> None:
        """Record each of the unit's cells as failed with the message (the unit never ran, or broke)."""
        runner = run.runner
        outcomes = []
        for number, cell in self._cells(run):
            work = runner._work(number, cell, len(self._cells_list))
            runner._cell_failed(NiclabError(message), work.base, work.outcome, "cell")
            runner.cell_ended(work)
            outcomes.append(work.outcome)
        run.outcomes = outcomes
        run.done = True

    def _write_done(self) -> None:
        """Write each ended unit's records, in unit order, up to the first that has not ended."""
        for run in self.units:
            if run.written:
                continue
            if not run.done:
                return
            self._write(run)

    def _write(self, run: UnitRun) -> None:
        main = self.main
        for record in run.run_dir.records:
            main.run_dir.append(record)
        run.written = True
        info = run.runner.info
        main.info.warnings += [w for w in info.warnings if w not in main.info.warnings]
        main.info.internal_errors += info.internal_errors
        if info.warnings or info.internal_errors:
            main._write_info()

    def _interrupt(self, running: list[UnitRun]) -> None:
        """Stop every unit: no step starts, every rig dropped; what was recorded before is written in order."""
        self._stop.set()
        self.progress(f"interrupted: stopping {len(running)} running unit(s) and their guests")
        for run in running:
            run.run_dir.closed = True
            if run.runner.rigs is not None:
                run.runner.rigs.drop()  # its domains go now, not after the benchmark under way
        deadline = time.monotonic() + JOIN_S
        for run in running:
            if run.thread is not None:
                run.thread.join(max(0.0, deadline - time.monotonic()))
        for run in self.units:
            if not run.written and (run.done or run in running):
                self._write(run)
