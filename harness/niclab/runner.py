"""Run a scenario's cells: realize each one in a Session, run its benchmarks, judge the results.

Records go to the run directory as they are produced (results.jsonl):

- `cell`: provenance at the start (host, rig, network as read back, nodes);
- `run`: one run of one benchmark (which repeat, where, how long, and what
  each NIC counted meanwhile: packets, bytes, drops, interrupts per CPU);
- `measurement`: one number of one run, linked to its run by `run`;
- `summary`: a metric over a benchmark's repeats (mean, median, spread,
  Student-t interval, every sample) and whether it is stable;
- `cell_end`: the nodes' facts after the benchmarks;
- `expectation`: each check of `expect:` with the value it saw;
- `error`: a benchmark or cell that failed.

A failed benchmark run is recorded and the next one runs; a cell that cannot
boot or whose network is not what was asked is recorded and the next cell runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from niclab import expect, stats
from niclab.backends.base import Backend
from niclab.errors import NiclabError
from niclab.results import RunDir, utc_now
from niclab.scenario import BenchmarkSpec, Cell
from niclab.session import BenchRun, Session

Progress = Callable[[str], None]


@dataclass
class CellOutcome:
    cell: Cell
    summaries: list[dict] = field(default_factory=list)  # the `summary` records
    errors: list[str] = field(default_factory=list)
    verdicts: list[expect.Verdict] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def missed(self) -> list[expect.Verdict]:
        return [v for v in self.verdicts if not v.passed]

    @property
    def ok(self) -> bool:
        return not self.errors and not self.missed


class Runner:
    def __init__(self, backend: Backend, run_dir: RunDir, scenario_name: str, progress: Progress,
                 started: float | None = None, repeat: int | None = None):
        self.backend = backend
        self.run_dir = run_dir
        self.scenario_name = scenario_name
        self.progress = progress
        self.started = time.monotonic() if started is None else started  # when `niclab run` began
        self.repeat = repeat  # overrides the scenario's and the benchmarks' repeat counts

    def run_cell(self, cell: Cell) -> CellOutcome:
        outcome = CellOutcome(cell)
        base = {"scenario": self.scenario_name, "cell": cell.id, "params": cell.params}
        cell_started = time.monotonic()
        session = Session(cell, self.backend, self.run_dir.cell_dir(cell.id), self.progress,
                          save_raw=lambda name, text: self.run_dir.save_raw(cell.id, name, text))
        try:
            with session:
                outcome.facts = session.facts
                self.run_dir.append({
                    "type": "cell", **base, "time": utc_now(),
                    "timings": {**session.timings, "agents_ready_since_start_s": round(
                        cell_started - self.started + session.timings["boot_s"], 2)},
                    **session.facts,
                })
                for index, spec in enumerate(cell.scenario.benchmarks):
                    self._run_benchmark(session, index, spec, base, outcome)
                self.run_dir.append({"type": "cell_end", **base, "time": utc_now(), "nodes": session.facts_now()})
        except NiclabError as exc:
            outcome.errors.append(str(exc))
            self.progress(f"cell {cell.id} failed: {exc}")
            self.run_dir.append({"type": "error", **base, "time": utc_now(), "stage": "cell", "message": str(exc)})
        self._judge(cell, base, outcome)
        return outcome

    def _run_benchmark(self, session: Session, index: int, spec: BenchmarkSpec, base: dict,
                       outcome: CellOutcome) -> None:
        label = spec.describe()
        repeats = self.repeat or spec.options.repeat or session.scenario.repeat
        runs: list[tuple[str, BenchRun]] = []
        for n in range(1, repeats + 1):
            run_id = f"{index}.{n}"
            of = f" run {n}/{repeats}" if repeats > 1 else ""
            self.progress(f"running {label}{of} (about {spec.plugin.estimate_seconds(spec.options):.0f} s)")
            started_at = utc_now()
            try:
                run = session.run(spec)
            except NiclabError as exc:
                outcome.errors.append(f"{label}{of}: {exc}")
                self.progress(f"{label}{of} failed: {exc}")
                self.run_dir.append({"type": "error", **base, "time": utc_now(), "stage": "benchmark",
                                     "run": run_id, "benchmark": label, "message": str(exc)})
                continue
            self._record_run(session, spec, label, run_id, n, repeats, started_at, run, base)
            runs.append((run_id, run))
            shown = ", ".join(f"{m.metric} {m.value:g} {m.unit}" for m in run.measurements if m.headline)
            self.progress(f"{label}{of}: {shown}" + "".join(f" [{m.warning}]" for m in run.measurements if m.warning))
        if runs:
            self._summarize(session, index, spec, label, runs, base, outcome)

    def _record_run(self, session, spec, label, run_id, n, repeats, started_at, run: BenchRun, base) -> None:
        ends = run.ends
        where = {"client": ends.client.name, "server": ends.server.name, "link": ends.link}
        self.run_dir.append({
            "type": "run", **base, "run": run_id, "benchmark": label, "tool": spec.tool, "repeat": n,
            "repeats": repeats, **where, "options": spec.options.model_dump(by_alias=True, exclude_none=True),
            "started_at": started_at, "finished_at": utc_now(), "seconds": run.seconds,
            "nics": {node: session.nic_summary(node, ends.link) for node in (ends.client.name, ends.server.name)},
            "accel": session.facts["rig"].get("accel"), "counters": run.counters,
        })
        for m in run.measurements:
            self.run_dir.append({
                "type": "measurement", **base, "run": run_id, "repeat": n, "benchmark": m.benchmark, "test": m.test,
                "metric": m.metric, "name": m.name, "value": m.value, "unit": m.unit, **where,
                **({"warning": m.warning} if m.warning else {}), "extra": m.extra,
            })

    def _summarize(self, session, index, spec, label, runs, base, outcome) -> None:
        settings = session.scenario.statistics
        limits = stats.Limits(settings.max_cv, settings.max_ci_width)
        by_metric: dict[str, list] = {}
        for _, run in runs:
            for m in run.measurements:
                by_metric.setdefault(m.name, []).append(m)
        ends = runs[0][1].ends
        for name, found in by_metric.items():
            summary = stats.summarize([m.value for m in found], settings.confidence)
            reasons = stats.instability(summary, limits, [m.warning for m in found if m.warning])
            record = {
                "type": "summary", **base, "benchmark_index": index, "benchmark": label, "name": name,
                "test": found[0].test, "metric": found[0].metric, "unit": found[0].unit,
                "headline": found[0].headline,
                "client": ends.client.name, "server": ends.server.name, "link": ends.link,
                "runs": [run_id for run_id, _ in runs], **summary.to_dict(),
                "unstable": bool(reasons), "reasons": reasons,
            }
            self.run_dir.append(record)
            outcome.summaries.append(record)
            if reasons and found[0].headline:
                self.progress(f"{label} {found[0].metric} is unstable: {'; '.join(reasons)}")

    def _judge(self, cell: Cell, base: dict, outcome: CellOutcome) -> None:
        for text in cell.scenario.expect:
            for verdict in expect.evaluate(expect.parse(text), outcome.summaries):
                outcome.verdicts.append(verdict)
                self.run_dir.append({"type": "expectation", **base, "time": utc_now(), "expectation": text,
                                     "passed": verdict.passed, "measured": verdict.measured,
                                     "unit": verdict.expectation.unit, "samples": verdict.samples,
                                     "where": verdict.where})
