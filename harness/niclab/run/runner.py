"""Run a scenario's cells: realize each in a Session, run its benchmarks, judge them, write the records.

Records go to results.jsonl as they are made (their kinds: docs/results.md). Cells of equal topology share a
boot and their repeats go round-robin; a failed benchmark or cell is recorded and the next one runs; run.json
always ends in a final status. Why: docs/architecture.md ("Cells that differ only in what netconf sets share
one boot", "Failure handling").
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from niclab.base.errors import NiclabError, describe_exception
from niclab.base.node import NodeGone, Progress
from niclab.model import expect
from niclab.model.bench.base import BenchmarkError, Endpoints
from niclab.model.facts import Timings
from niclab.model.scenario import BenchmarkSpec, Cell
from niclab.plumbing.backends.base import Backend
from niclab.plumbing.contention import contention_of
from niclab.run import stats
from niclab.run.plan import repeats
from niclab.run.progress import RunTally, Watch
from niclab.run.records import (
    CellEndRecord,
    CellRecord,
    ErrorRecord,
    ExpectationRecord,
    MeasurementExtra,
    MeasurementRecord,
    RunInfoRecord,
    RunRecord,
    SummaryRecord,
    TestRecord,
)
from niclab.run.results import RunDir, utc_now
from niclab.run.rigs import BootKeeper, shared_boots, turns
from niclab.run.session import BenchRun, Session, describe_gone


def where_recorded(ends: Endpoints) -> dict[str, Any]:
    """The fields that say where a benchmark ran beyond its link, as its records keep them: `peer` over
    loopback and `family` over IPv6, each absent otherwise (as in runs written before they were recorded)."""
    found: dict[str, Any] = {"peer": ends.peer} if ends.peer else {}
    return found | ({"family": 6} if ends.family == 6 else {})


def _never() -> bool:
    return False


class Base(TypedDict):
    """What every record of a cell carries."""

    scenario: str
    cell: str
    params: dict[str, Any]


@dataclass
class CellOutcome:
    cell: Cell
    summaries: list[SummaryRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    verdicts: list[expect.Verdict] = field(default_factory=list)
    facts: CellRecord | None = None  # its `cell` record, once written

    @property
    def missed(self) -> list[expect.Verdict]:
        return [v for v in self.verdicts if not v.passed]

    @property
    def ok(self) -> bool:
        return not self.errors and not self.missed


@dataclass
class RunOutcome:
    cells: list[CellOutcome]
    status: str  # ok or failed (an interrupted run raises KeyboardInterrupt)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class CellWork:
    """A cell under way: its session, its runs so far per benchmark, whether it failed."""

    number: int  # its place among the run's cells, from 1
    of: int
    cell: Cell
    session: Session
    log: Path  # cells/<cell>/cell.log
    repeats: list[int]  # each benchmark's number of runs
    base: Base  # what every record of the cell carries: scenario, cell, params
    runs: dict[int, list[tuple[str, BenchRun]]] = field(default_factory=dict)  # benchmark index -> its runs
    outcome: CellOutcome = field(init=False)
    recorded: bool = False  # its `cell` record is written
    failed: bool = False
    summarized: set[int] = field(default_factory=set)  # benchmark indices whose summaries are written
    interleaved_with: list[str] = field(default_factory=list)  # cells whose repeats alternate with its own
    under_way: str | None = None  # the benchmark run under way ("netperf TCP_RR run 2/3"), to name in a failure

    def __post_init__(self) -> None:
        self.outcome = CellOutcome(self.cell)

    @property
    def rounds(self) -> int:
        return max(self.repeats, default=1)


def schedule(works: Sequence[CellWork]) -> list[tuple[CellWork, range]]:
    """The steps of a run: (cell, its rounds to run now).

    Cells sharing a boot run one after the other; when they repeat, their
    rounds alternate (niclab.run.rigs.turns). A cell alone on its rig runs all its
    rounds in one step, benchmark by benchmark as ever.
    """
    steps: list[tuple[CellWork, range]] = []
    for group in shared_boots([work.cell.topology for work in works]):
        members = [works[i] for i in group]
        if len(members) > 1 and max(work.rounds for work in members) > 1:
            for work in members:
                work.interleaved_with = [other.cell.id for other in members if other is not work]
        steps += [(members[place], now) for place, now in turns([work.rounds for work in members])]
    return steps


class RunAborted(NiclabError):
    """The run could not go on (its directory cannot be written, or a bug); run.json says so."""


class Stopped(KeyboardInterrupt):
    """A unit of a parallel run stops between steps: the run was interrupted."""


class Runner:
    def __init__(
        self,
        backend: Backend,
        run_dir: RunDir,
        info: RunInfoRecord,
        progress: Progress,
        started: float | None = None,
        repeat: int | None = None,
        tagged: bool = False,
        watch: Watch | None = None,
    ):
        self.backend = backend
        self.run_dir = run_dir
        self.info = info
        self.scenario_name = info.scenario or ""
        self._progress = progress
        self.started = time.monotonic() if started is None else started  # when `niclab run` began
        self.repeat = repeat  # overrides the scenario's and the benchmarks' repeat counts
        self._cell_log: Path | None = None
        self._cell: str | None = None  # the cell under way
        self.tagged = tagged  # progress lines start with [cell] (cells run at once)
        self.stopping: Callable[[], bool] = _never  # asked between steps and benchmark runs
        self.rigs: BootKeeper | None = None  # run_unit's, which a parallel run drops on Ctrl-C
        self.watch = watch  # told the whole run's progress as runs and cells end (niclab.run.progress)
        self.tally: RunTally | None = None  # the run's; a parallel run's units share the main runner's

    def progress(self, message: str) -> None:
        """A progress line, also kept in the current cell's log."""
        self._say(message)
        self._log(message)

    def _say(self, message: str) -> None:
        self._progress(f"[{self._cell}] {message}" if self.tagged and self._cell is not None else message)

    def _stop_here(self) -> None:
        if self.stopping():
            raise Stopped()

    def _log(self, text: str) -> None:
        if self._cell_log is None:
            return
        try:
            with self._cell_log.open("a") as log:
                log.write(f"{utc_now()} {text}\n")
        except OSError:
            pass  # the log is a convenience; results.jsonl is the record

    # -- the run ----------------------------------------------------------

    def run(self, cells: Sequence[Cell], rigs: BootKeeper | None = None) -> RunOutcome:
        """Run the cells; run.json ends ok, failed or interrupted, whatever happens.

        KeyboardInterrupt (Ctrl-C, SIGTERM) is recorded and re-raised, so the
        caller can stop as it must (the CLI prints a line, pytest its summary).
        Anything else that ends the run early becomes a RunAborted with one line.

        `rigs`, a keeper the caller holds (the pytest plugin's, one per session), lends the rig an earlier
        run left up and keeps the last one up after this run; without it the run's rigs stop with it.
        Whatever ends the run early stops the caller's rig too.
        """
        self.info.status = "running"
        works: list[CellWork] = []
        try:
            self._write_info()
            works = [self._work(n, cell, len(cells)) for n, cell in enumerate(cells, start=1)]
            self.tally = self.start_tally(cells)
            with ExitStack() as stack:
                if rigs is not None:
                    rigs.progress = self.progress  # the boots it makes now are this run's
                keeper = rigs or stack.enter_context(BootKeeper(self.backend, self.progress))
                for work, rounds in schedule(works):
                    self._run_step(keeper, work, rounds)
        except KeyboardInterrupt:
            if rigs is not None:
                rigs.drop()
            self._finish("interrupted", "interrupted; every guest was stopped")
            raise
        except Exception as exc:
            if rigs is not None:
                rigs.drop()
            message = describe_exception(exc)
            self.info.error = {"message": message, "traceback": traceback.format_exc()}
            self._finish("failed", f"the run stopped early: {message}")
            raise RunAborted(f"the run stopped early: {message}; see {self.run_dir.path / 'run.json'}") from None
        return self.conclude([work.outcome for work in works])

    def start_tally(self, cells: Sequence[Cell]) -> RunTally | None:
        """The run's tally of what has ended, told to the watcher (none without one)."""
        if self.watch is None:
            return None
        tally = RunTally(cells, self.watch, self.repeat)
        tally.start()
        return tally

    def cell_ended(self, work: CellWork) -> None:
        if self.tally is not None:
            self.tally.cell_ended(work.number, work.cell.id, not work.outcome.ok)

    def _run_ended(self, work: CellWork, index: int) -> None:
        if self.tally is not None:
            self.tally.run_ended(work.number, index)

    def conclude(self, outcomes: list[CellOutcome]) -> RunOutcome:
        """End the run ok, or failed with every cell's errors and missed expectations (run.json says which)."""
        failed = [o for o in outcomes if not o.ok]
        status = "failed" if failed else "ok"
        self._finish(
            status,
            "; ".join(
                [e for o in failed for e in o.errors]
                + [f"expectation missed: {v.describe()}" for o in failed for v in o.missed]
            ),
        )
        return RunOutcome(outcomes, status)

    def _finish(self, status: str, message: str) -> None:
        self.info.status, self.info.finished_at, self.info.message = status, utc_now(), message[:2000]
        self._write_info()

    def _write_info(self) -> None:
        try:
            self.run_dir.write_info(self.info)
        except OSError as exc:
            if self.info.status == "running":
                raise
            self._say(f"run.json could not be written: {describe_exception(exc)}")

    def warn(self, message: str) -> None:
        """A warning about the whole run (e.g. KVM fell back to TCG): progress and run.json."""
        self.progress(f"warning: {message}")
        if message not in self.info.warnings:
            self.info.warnings.append(message)
            self._write_info()

    # -- one cell ---------------------------------------------------------

    def run_unit(self, cells: Sequence[tuple[int, Cell]], of: int, first_boot: int) -> list[CellOutcome]:
        """Run cells that share a boot (numbered among the run's `of` cells) as a sequential run would, their
        boots numbered from `first_boot`; run.json is the caller's (niclab.run.parallel)."""
        works = [self._work(number, cell, of) for number, cell in cells]
        with BootKeeper(self.backend, self.progress, first_boot) as rigs:
            self.rigs = rigs
            for work, rounds in schedule(works):
                self._run_step(rigs, work, rounds)
        return [work.outcome for work in works]

    def _work(self, number: int, cell: Cell, of: int) -> CellWork:
        cell_dir = self.run_dir.cell_dir(cell.id)
        session = Session(
            cell,
            self.backend,
            cell_dir,
            self.progress,
            save_raw=lambda name, text: self.run_dir.save_raw(cell.id, name, text),
        )
        base = Base(scenario=self.scenario_name, cell=cell.id, params=cell.params)
        return CellWork(number, of, cell, session, cell_dir / "cell.log", repeats(cell, self.repeat), base)

    def _run_step(self, rigs: BootKeeper, work: CellWork, rounds: range) -> None:
        """Run rounds of one cell's benchmarks on its rig; the cell's last round also ends it."""
        if work.failed:
            return
        self._stop_here()
        work.log.parent.mkdir(parents=True, exist_ok=True)
        self._cell_log, self._cell = work.log, work.cell.id
        cell, session = work.cell, work.session
        shown = f" (round {rounds.start}/{work.rounds})" if work.interleaved_with else ""
        self._say(f"cell {work.number}/{work.of}: {cell.id}{shown}")
        ended = False
        try:
            session.prepare(rigs)
            if not work.recorded:
                self._record_cell(work)
            for index, spec in enumerate(cell.scenario.benchmarks):
                for n in rounds:
                    if n <= work.repeats[index]:
                        self._run_benchmark(session, index, n, spec, work)
                if work.repeats[index] in rounds:  # its last run is done
                    self._summarize_benchmark(work, index)
            if rounds.stop > work.rounds:
                self.run_dir.append(
                    CellEndRecord(type="cell_end", **work.base, time=utc_now(), nodes=session.facts_now())
                )
                ended = True
        except Exception as exc:  # the cell boundary: record it, go on with the next cell
            session.abandon(rigs)
            if session.gone and not isinstance(exc, NodeGone):  # a guest died under it: that is the cause
                exc = NodeGone(f"{describe_gone(session.gone)} ({describe_exception(exc)})")
            self._cell_failed(exc, work.base, work.outcome, "cell", shown=work.under_way)
            work.failed = ended = True
            for index in range(len(cell.scenario.benchmarks)):  # what its finished runs measured (an interleaved
                self._summarize_benchmark(work, index)  # cell has runs of every benchmark by now)
        finally:
            self._cell_log = self._cell = None
        if ended:
            self._judge(cell, work.base, work.outcome)
            self.cell_ended(work)

    def _summarize_benchmark(self, work: CellWork, index: int) -> None:
        """The summary of one benchmark's runs, once; fewer runs than asked (the cell failed) are marked partial."""
        runs = work.runs.get(index)
        if not runs or index in work.summarized:
            return
        work.summarized.add(index)
        spec = work.cell.scenario.benchmarks[index]
        self._summarize(work.session, index, spec, spec.describe(), runs, work.base, work.outcome, work.repeats[index])

    def _record_cell(self, work: CellWork) -> None:
        session = work.session
        ready = session.booted.ready_at - self.started if session.booted is not None else None
        facts = session.facts
        assert facts is not None, "the session is prepared"
        record = CellRecord(
            type="cell",
            **work.base,
            time=utc_now(),
            timings=Timings(
                **session.timings, agents_ready_since_start_s=round(ready, 2) if ready is not None else None
            ),
            host=facts.host,
            rig=facts.rig,
            boot=facts.boot,
            network=facts.network,
            nodes=facts.nodes,
        )
        if work.interleaved_with:  # a cell whose repeats alternated with no other's says nothing of it
            record.interleaved_with = list(work.interleaved_with)
        work.outcome.facts = record
        work.recorded = True
        if fallback := record.rig.accel_fallback:
            self.warn(fallback)
        self.run_dir.append(record)

    def _cell_failed(
        self,
        exc: Exception,
        base: Base,
        outcome: CellOutcome,
        stage: str,
        shown: str | None = None,
        **where: str,
    ) -> str:
        """Record a failure of a cell or a benchmark run; returns its one-line message.

        A NiclabError is a failure niclab understands (its message says it all);
        anything else is a bug or an unforeseen fault, kept with its traceback.
        Only a failure to write the results themselves ends the run.
        """
        message = describe_exception(exc)
        bug: dict[str, Any] = {}
        if not isinstance(exc, NiclabError):
            bug["traceback"] = traceback.format_exc()
            self._log(bug["traceback"])
            message += f" (traceback in {self.run_dir.cell_dir(base['cell']) / 'cell.log'})"
            self.info.internal_errors.append({"cell": base["cell"], "stage": stage, "message": message, **bug})
            self._write_info()
        given: dict[str, Any] = {**where, "message": message, **bug}
        record = ErrorRecord(type="error", **base, time=utc_now(), stage=stage, **given)
        label = shown or where.get("label")
        outcome.errors.append(f"{label}: {message}" if label else message)
        self.progress(f"{label or 'cell ' + base['cell']} failed: {message}")
        self.run_dir.append(record)
        return message

    def _run_benchmark(self, session: Session, index: int, n: int, spec: BenchmarkSpec, work: CellWork) -> None:
        """Run 1 of a benchmark's repeats, record it; a failed run is recorded and the cell goes on."""
        self._stop_here()
        label, repeats, base = spec.describe(), work.repeats[index], work.base
        run_id = f"{index}.{n}"
        of = f" run {n}/{repeats}" if repeats > 1 else ""
        self.progress(f"running {label}{of} (about {spec.plugin.estimate_seconds(spec.options):.0f} s)")
        started_at = utc_now()
        work.under_way = f"{label}{of}"  # what a bug that ends the cell (below) is named by
        try:
            run = session.run(spec)
        except NiclabError as exc:
            work.under_way = None
            self._run_ended(work, index)
            self._cell_failed(exc, base, work.outcome, "benchmark", shown=f"{label}{of}", run=run_id, label=label)
            session.check_nodes()  # a node that died under the benchmark ends the cell, saying which and why
            return
        self._record_run(session, spec, label, run_id, n, repeats, started_at, run, base)
        work.under_way = None
        work.runs.setdefault(index, []).append((run_id, run))
        self._run_ended(work, index)
        if run.stopped is not None:  # its results so far are recorded; so is why it stopped
            self._cell_failed(
                BenchmarkError(run.stopped),
                base,
                work.outcome,
                "benchmark",
                shown=f"{label}{of}",
                run=run_id,
                label=label,
            )
            session.check_nodes()
            return
        shown = ", ".join(f"{m.metric} {m.value:g} {m.unit}" for m in run.measurements if m.headline)
        doubts = dict.fromkeys(m.warning for m in run.measurements if m.warning)  # UDP's send and receive share one
        self.progress(f"{label}{of}: {shown}" + "".join(f" [{warning}]" for warning in doubts))
        if run.host_load is not None and run.host_load.contended:
            self.progress(f"{label}{of}: host contention: {'; '.join(run.host_load.reasons)}")

    def _record_run(
        self,
        session: Session,
        spec: BenchmarkSpec,
        label: str,
        run_id: str,
        n: int,
        repeats: int,
        started_at: str,
        run: BenchRun,
        base: Base,
    ) -> None:
        ends = run.ends
        load: dict[str, Any] = {"host_load": run.host_load.to_dict()} if run.host_load is not None else {}
        where = where_recorded(ends)
        self.run_dir.append(
            RunRecord(
                type="run",
                **base,
                run=run_id,
                label=label,
                tool=spec.tool,
                repeat=n,
                repeats=repeats,
                boot=session.booted.number if session.booted else None,
                client=ends.client.name,
                server=ends.server.name,
                link=ends.link,
                **where,
                options=spec.options.recorded(),
                started_at=started_at,
                finished_at=utc_now(),
                seconds=run.seconds,
                nics={
                    node: session.nic_summary(node, ends.link, ends.loopback)
                    for node in (ends.client.name, ends.server.name)
                },
                accel=session.facts.rig.accel if session.facts is not None else None,
                counters=run.counters,
                **load,
            )
        )
        self._record_tests(session, run, run_id, n, base)
        for m in run.measurements:
            doubted: dict[str, Any] = {"warning": m.warning} if m.warning else {}
            self.run_dir.append(
                MeasurementRecord(
                    type="measurement",
                    **base,
                    run=run_id,
                    repeat=n,
                    tool=m.tool,
                    test=m.test,
                    metric=m.metric,
                    name=m.name,
                    value=m.value,
                    unit=m.unit,
                    client=ends.client.name,
                    server=ends.server.name,
                    link=ends.link,
                    **where,
                    **doubted,
                    extra=MeasurementExtra.model_validate(m.extra),
                )
            )

    def _record_tests(self, session: Session, run: BenchRun, run_id: str, n: int, base: Base) -> None:
        """A `test` record per selftest program and subtest the run reported."""
        nodes = session.facts.nodes if session.facts is not None else {}
        for outcome in run.tests:
            self.run_dir.append(
                TestRecord(
                    type="test",
                    **base,
                    run=run_id,
                    repeat=n,
                    tool=outcome.tool,
                    target=outcome.target,
                    test=outcome.test,
                    result=outcome.result,
                    node=outcome.node,
                    remote=outcome.remote,
                    link=run.ends.link,
                    nic=session.nic_summary(outcome.node, run.ends.link),
                    kernel=seen.kernel if (seen := nodes.get(outcome.node)) is not None else None,
                    subtest=outcome.subtest,
                    reason=outcome.reason,
                    seconds=outcome.seconds,
                    dmesg=list(outcome.dmesg),
                    console=list(outcome.console),
                    tests_from=outcome.tests_from,
                )
            )

    def _summarize(
        self,
        session: Session,
        index: int,
        spec: BenchmarkSpec,
        label: str,
        runs: list[tuple[str, BenchRun]],
        base: Base,
        outcome: CellOutcome,
        wanted: int,
    ) -> None:
        settings = session.scenario.statistics
        limits = stats.Limits(settings.max_cv, settings.max_ci_width)
        by_metric: dict[str, list] = {}
        sources: dict[str, list[str]] = {}  # the run of each sample
        for run_id, run in runs:
            for m in run.measurements:
                by_metric.setdefault(m.name, []).append(m)
                sources.setdefault(m.name, []).append(run_id)
        ends = runs[0][1].ends
        where = where_recorded(ends)
        loads = [run.host_load for _, run in runs if run.host_load is not None]
        contention = contention_of(loads)
        for name, found in by_metric.items():
            summary = stats.summarize([m.value for m in found], settings.confidence)
            reasons = stats.instability(summary, limits, [m.warning for m in found if m.warning])
            figures: dict[str, Any] = summary.to_dict()
            if len(runs) < wanted:  # the cell failed before its other runs
                figures["partial"] = True
            if loads:  # the guests did not get their CPU in some run: the figure says more about the host than the NIC
                figures |= {"contended": bool(contention), "contention": contention}
            record = SummaryRecord(
                type="summary",
                **base,
                benchmark_index=index,
                label=label,
                name=name,
                test=found[0].test,
                metric=found[0].metric,
                unit=found[0].unit,
                headline=found[0].headline,
                client=ends.client.name,
                server=ends.server.name,
                link=ends.link,
                **where,
                runs=sources[name],
                unstable=bool(reasons),
                reasons=reasons,
                **figures,
            )
            self.run_dir.append(record)
            outcome.summaries.append(record)
            if reasons and found[0].headline:
                self.progress(f"{label} {found[0].metric} is unstable: {'; '.join(reasons)}")

    def _judge(self, cell: Cell, base: Base, outcome: CellOutcome) -> None:
        for text in cell.scenario.expect:
            for verdict in expect.evaluate(expect.parse(text), outcome.summaries):
                outcome.verdicts.append(verdict)
                self.run_dir.append(
                    ExpectationRecord(
                        type="expectation",
                        **base,
                        time=utc_now(),
                        expectation=text,
                        passed=verdict.passed,
                        measured=verdict.measured,
                        unit=verdict.expectation.unit,
                        samples=verdict.samples,
                        where=verdict.where,
                    )
                )
