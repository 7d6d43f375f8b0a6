"""The run itself, once: what `niclab run` and the pytest plugin's scenario items both do.

    planned = plan(RunRequest(scenario=scenario_file, cells=chosen, out=Path("runs")), backend)
    outcome = start(planned, progress).run()   # kernels checked, run directory made, cells run

docs/architecture.md, "run".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Progress
from niclab.model.kernel_choice import KernelChoice
from niclab.model.scenario import Cell, ScenarioFile
from niclab.plumbing.backends import Backend, Spreading, kernel_check
from niclab.plumbing.facts import host_facts
from niclab.plumbing.kernel_check import check_kernels, with_kernel
from niclab.run.parallel import ParallelRun
from niclab.run.progress import Watch
from niclab.run.realizable import Verdict, verdicts
from niclab.run.records import LabInfo, RunInfoRecord
from niclab.run.results import RunDir, new_run_dir, new_run_info
from niclab.run.rigs import BootKeeper
from niclab.run.runner import Runner, RunOutcome


class RunRequest(BaseModel):
    """What to run: the front end's options, parsed."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    scenario: ScenarioFile  # as parsed: run.json keeps its file and text, read once
    cells: list[Cell]  # the cells chosen (--cell, a shard, a pytest item), in the scenario's order
    out: Path  # where the run directory is made
    kernel: KernelChoice | None = None  # every node boots this kernel, whatever the scenario names (--kernel-build)
    repeat: int | None = None  # runs of each benchmark, over the scenario's `repeat`
    lab_file: Path | None = None  # the lab inventory the backend runs on: run.json keeps it
    started: float | None = None  # when the command began (time.monotonic()): the progress lines count from it
    parallel: bool = False  # cells at once over the lab's hosts (niclab.run.parallel); needs lab_file
    allow_partial: bool = True  # run the cells the backend can realize; False: refuse if it cannot realize one


class NothingRealizable(NiclabError):
    """The backend can realize none of the cells."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Plan:
    """The cells of a request on a backend, each with whether the backend can realize it. Boots nothing."""

    request: RunRequest
    backend: Backend
    verdicts: list[Verdict]

    @property
    def cells(self) -> list[Cell]:
        return [verdict.cell for verdict in self.verdicts]

    @property
    def skipped(self) -> list[Verdict]:
        return [verdict for verdict in self.verdicts if not verdict.ok]


def plan(request: RunRequest, backend: Backend) -> Plan:
    cells = with_kernel(request.cells, request.kernel) if request.kernel is not None else request.cells
    return Plan(request, backend, verdicts(backend, cells))


@dataclass(frozen=True)
class Started:
    """A run ready to go: its cells checked, its run directory made, run.json's first version in memory."""

    plan: Plan
    cells: list[Cell]  # the cells the backend can realize
    run_dir: RunDir
    info: RunInfoRecord
    progress: Progress

    def run(self, rigs: BootKeeper | None = None, watch: Watch | None = None) -> RunOutcome:
        """Run the cells; Ctrl-C stops the guests and comes through as KeyboardInterrupt, run.json written.

        `rigs`: a keeper of the caller's whose rigs outlive the run (the pytest plugin's, on the same backend);
        a parallel run boots its own. `watch` is told the whole run's progress as benchmark runs and cells end
        (niclab.run.progress)."""
        request = self.plan.request
        runner = Runner(
            self.plan.backend,
            self.run_dir,
            self.info,
            self.progress,
            started=request.started,
            repeat=request.repeat,
            watch=watch,
        )
        if request.parallel:
            return ParallelRun(runner).run(self.cells)
        return runner.run(self.cells, rigs)


def check_parallel(request: RunRequest, backend: Backend) -> None:
    """Refuse --parallel where cells cannot run at once: without a lab, or on a backend that does not spread."""
    if not request.parallel:
        return
    if request.lab_file is None:
        raise UsageError("--parallel runs cells at once over a lab's hosts: give --lab LAB_YAML")
    if not isinstance(backend, Spreading):
        raise UsageError(f"--parallel: the {backend.name} backend runs one cell at a time; use --backend libvirt")


def start(planned: Plan, progress: Progress) -> Started:
    """Skip (and say) the cells the backend cannot realize; check --out, then the kernels (building each one's
    image: a kernel that lacks a driver is refused before anything boots); make the run directory."""
    request, backend = planned.request, planned.backend
    check_parallel(request, backend)
    name = request.scenario.name
    skipped = planned.skipped
    if skipped and len(skipped) < len(planned.verdicts) and not request.allow_partial:
        listed = "; ".join(f"{v.cell.id}: {v.reason}" for v in skipped[:5])
        more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        raise UsageError(
            f"the {backend.name} backend cannot realize {len(skipped)} of the {len(planned.verdicts)} cells of "
            f"{name} ({listed}{more}): run the others with --allow-partial, or pick cells with --cell"
        )
    for verdict in skipped:
        progress(f"skipping cell {verdict.cell.id}: the {backend.name} backend cannot realize it: {verdict.reason}")
    if skipped and len(skipped) == len(planned.verdicts):
        raise NothingRealizable(
            f"the {backend.name} backend cannot realize any cell of {name}: {skipped[0].reason}",
            skipped[0].reason or "",
        )
    cells = [verdict.cell for verdict in planned.verdicts if verdict.ok]
    check_out(request.out)  # before images are built: a typo in --out is found at once
    if kernel_check(backend):
        check_kernels(cells, progress)
    try:
        run_dir = RunDir(new_run_dir(request.out, name))
    except OSError as exc:
        raise NiclabError(
            f"cannot create a run directory in --out {request.out}: {exc.strerror}; choose a directory you can write to"
        ) from None
    info = new_run_info(
        scenario=name,
        scenario_file=str(request.scenario.path.resolve()),
        scenario_text=request.scenario.text,
        cells=[cell.id for cell in cells],
        cell_order=[cell.id for cell in request.scenario.cells],
        backend=backend.name,
        host=host_facts().model_dump(),
    )
    info.warnings += [f"cell {verdict.cell.id} not run: {verdict.reason}" for verdict in skipped]
    if request.lab_file is not None:
        lab = getattr(backend, "lab", None)  # the backend that runs on a lab holds its inventory
        found = LabInfo(file=str(request.lab_file.resolve()), text=request.lab_file.read_text(errors="replace"))
        if lab is not None:  # what it was given is written, no null for what it was not
            found.name, found.prices = lab.name, lab.prices()
        info.lab = found
    progress(f"run directory {run_dir.path}")
    return Started(planned, cells, run_dir, info, progress)


def check_out(out: Path) -> None:
    """Refuse an --out no run directory can be made in (its nearest existing folder is a file, or not ours)."""
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    why = (
        "Not a directory"
        if not existing.is_dir()
        else "Permission denied"
        if not os.access(existing, os.W_OK | os.X_OK)
        else ""
    )
    if why:
        raise NiclabError(f"cannot create a run directory in --out {out}: {why}; choose a directory you can write to")
