"""Run a scenario's cells: realize each one in a Session and run its benchmarks.

Records go to the run directory as they are produced. A failure in one
benchmark is recorded and the next one runs; a cell that cannot boot or whose
network is not what was asked is recorded and the next cell runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from niclab.backends.base import Backend
from niclab.bench.base import Measurement
from niclab.errors import NiclabError
from niclab.results import RunDir, utc_now
from niclab.scenario import BenchmarkSpec, Cell
from niclab.session import Session

Progress = Callable[[str], None]


@dataclass
class CellOutcome:
    cell: Cell
    measurements: list[tuple[str, Measurement]] = field(default_factory=list)  # (benchmark label, measurement)
    errors: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


class Runner:
    def __init__(self, backend: Backend, run_dir: RunDir, scenario_name: str, progress: Progress,
                 started: float | None = None):
        self.backend = backend
        self.run_dir = run_dir
        self.scenario_name = scenario_name
        self.progress = progress
        self.started = time.monotonic() if started is None else started  # when `niclab run` began

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
                    "timings": {**session.timings,
                                "agents_ready_since_start_s": round(
                                    cell_started - self.started + session.timings["boot_s"], 2)},
                    **session.facts,
                })
                for spec in cell.scenario.benchmarks:
                    self._run_benchmark(session, spec, base, outcome)
        except NiclabError as exc:
            outcome.errors.append(str(exc))
            self.progress(f"cell {cell.id} failed: {exc}")
            self.run_dir.append({"type": "error", **base, "time": utc_now(), "stage": "cell", "message": str(exc)})
        return outcome

    def _run_benchmark(self, session: Session, spec: BenchmarkSpec, base: dict, outcome: CellOutcome) -> None:
        label = spec.describe()
        self.progress(f"running {label} (about {spec.plugin.estimate_seconds(spec.options):.0f} s)")
        started_at, started = utc_now(), time.monotonic()
        try:
            ends, found = session.run(spec)
        except NiclabError as exc:
            outcome.errors.append(f"{label}: {exc}")
            self.progress(f"{label} failed: {exc}")
            self.run_dir.append({"type": "error", **base, "time": utc_now(), "stage": "benchmark",
                                 "benchmark": label, "message": str(exc)})
            return
        client, server = ends.client.name, ends.server.name
        nics = {n: session.nic_summary(n, ends.link) for n in (client, server)}
        for m in found:
            self.run_dir.append({
                "type": "measurement", **base,
                "benchmark": m.benchmark, "test": m.test, "metric": m.metric, "name": m.name,
                "value": m.value, "unit": m.unit,
                "client": client, "server": server, "link": ends.link, "nics": nics,
                "accel": session.facts["rig"].get("accel"),
                "options": spec.options.model_dump(by_alias=True, exclude_none=True),
                "started_at": started_at, "finished_at": utc_now(),
                "seconds": round(time.monotonic() - started, 2),
                "extra": m.extra,
            })
        outcome.measurements += [(label, m) for m in found]
        shown = ", ".join(f"{m.metric} {m.value:g} {m.unit}" for m in found if m.headline)
        self.progress(f"{label}: {shown}")
