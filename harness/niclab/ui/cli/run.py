"""`niclab run SCENARIO`: boot a scenario's nodes, run its benchmarks, write a run directory, its report and
its nipa.json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from niclab.base.errors import UsageError
from niclab.ui.cli.options import (
    add_axis_option,
    add_backend_options,
    add_cell_options,
    add_start_options,
    overrides,
    positive_int,
)
from niclab.ui.console import EXIT_BUG, EXIT_FAILED, EXIT_OK, STARTED, ProgressLines

if TYPE_CHECKING:
    from niclab.base.node import Progress
    from niclab.plumbing.backends import Backend
    from niclab.run.results import RunDir


def cmd_run(args: argparse.Namespace) -> int:
    from niclab.run.realizable import backend_from_args

    with backend_from_args(args) as backend:
        return _run(args, backend)


def _run(args: argparse.Namespace, backend: Backend) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.model.shard import parse_shard
    from niclab.run.realizable import describe
    from niclab.run.results import point_latest
    from niclab.run.start import RunRequest, check_parallel, plan, start
    from niclab.ui.table import cell_table

    progress = ProgressLines(args.quiet)
    scenario_file = load_scenario(Path(args.scenario), overrides(args))
    cells = scenario_file.select(args.cell, args.keyword)
    if args.shard:
        shard = parse_shard(args.shard)
        cells = [cell for cell in cells if shard.holds(scenario_file.name, cell.id)]
        progress(f"shard {shard}: {len(cells)} of {len(scenario_file.cells)} cells")
        if not cells:
            print(f"niclab: shard {shard} of {scenario_file.name} holds no cell; nothing to run", file=sys.stderr)
            return EXIT_OK
    kernel = None
    if args.kernel_build:
        from niclab.model.kernel_choice import parse_kernel

        try:
            kernel = parse_kernel({"build": args.kernel_build})
        except ValueError as exc:
            raise UsageError(f"--kernel-build: {exc}") from None
    request = RunRequest(
        scenario=scenario_file,
        cells=cells,
        out=Path(args.out),
        kernel=kernel,
        repeat=args.repeat,
        lab_file=Path(args.lab) if args.lab else None,
        started=STARTED,
        parallel=args.parallel,
        allow_partial=args.allow_partial,
    )
    check_parallel(request, backend)
    planned = plan(request, backend)
    if args.dry_run:
        where = request.out / f"dry-run-{scenario_file.name}"
        print(f"{scenario_file.name} on the {backend.name} backend (boots nothing):")
        print(describe(backend, planned.verdicts, where))
        if where.is_dir():
            print(f"what it would start is in {where}")
        return EXIT_OK if any(v.ok for v in planned.verdicts) else EXIT_FAILED
    started = start(planned, progress)
    run_dir = started.run_dir
    point_latest(run_dir.path)  # RUNS/latest: what `niclab show` shows by default
    try:
        with progress.showing_run():  # the whole run's progress: a line of its own in a terminal
            outcome = started.run(watch=progress.watch)
    except KeyboardInterrupt:
        print(f"niclab: interrupted; the guests were stopped; partial results in {run_dir.results}", file=sys.stderr)
        write_run_report(run_dir.path, progress)
        write_run_nipa(run_dir.path, progress)
        return EXIT_FAILED
    for cell in outcome.cells:
        print(cell_table(scenario_file.name, cell))
        print()
    for warning in started.info.warnings:
        print(f"warning: {warning}")
    print(f"results: {run_dir.results}")
    print(f"report:  {write_run_report(run_dir.path, progress)}")
    if (nipa := write_run_nipa(run_dir.path, progress)) is not None:
        print(f"nipa:    {nipa}")
    if started.info.internal_errors:
        sys.stdout.flush()
        print(internal_errors_line(started.info.internal_errors, run_dir), file=sys.stderr)
        return EXIT_BUG
    return EXIT_OK if outcome.ok else EXIT_FAILED


def internal_errors_line(errors: list[dict], run_dir: RunDir) -> str:
    """The last line of a run in which niclab itself failed: a bug, whatever the cards did, and where to look."""
    cells = list(dict.fromkeys(str(error.get("cell")) for error in errors))
    logs = ", ".join(str(run_dir.cell_dir(cell) / "cell.log") for cell in cells)
    count = f"{len(errors)} internal error{'s' if len(errors) > 1 else ''}"
    return f"niclab failed, not the card: {count} (a bug in niclab); see the traceback in {logs}, and please report it"


def write_run_report(run_dir: Path, progress: Progress) -> Path | str:
    from niclab.ui.report.page import report_runs

    try:
        return report_runs([run_dir], run_dir / "report.html")
    except Exception as exc:  # a report problem must not hide the results already written
        progress(f"the report could not be written: {exc!r}")
        return "(not written; see the message above)"


def write_run_nipa(run_dir: Path, progress: Progress) -> Path | None:
    """The run's selftest results as NIPA reads them (nipa.json), when it ran any; None otherwise."""
    from niclab.ui.nipa import write_nipa

    try:
        return write_nipa(run_dir)
    except Exception as exc:  # an export problem must not hide the results already written
        progress(f"nipa.json could not be written: {exc!r}")
        return None


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = verbs.add_parser(
        "run",
        help="run a scenario's benchmarks",
        description="Boot the scenario's nodes, configure the links, run the benchmarks and write a run directory.",
    )
    run.add_argument("scenario", metavar="SCENARIO", help="scenario file (YAML)")
    run.add_argument("--out", default="runs", metavar="DIR", help="where run directories go (default: runs)")
    add_cell_options(run, "run")
    add_axis_option(run)
    add_backend_options(run)
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="boot nothing: say how each cell maps onto the backend (a lab's cards and cables) and write "
        "the domain XML",
    )
    add_start_options(run)
    run.add_argument(
        "--repeat", type=positive_int, metavar="N", help="run every benchmark N times (overrides the scenario)"
    )
    run.add_argument(
        "--parallel",
        action="store_true",
        help="with --lab: run cells at once wherever their cards (or, with --emulated, a host's capacity) are free; "
        "the run directory is as a sequential run writes it",
    )
    run.add_argument(
        "--allow-partial",
        action="store_true",
        help="run the cells the backend (or lab) can realize and skip the others; without it a run that cannot "
        "realize every cell chosen is refused, naming them",
    )
    run.add_argument("--shard", metavar="I/N", help="run only the cells of shard I of N (stable across machines)")
    run.add_argument(
        "--kernel-build",
        metavar="DIR",
        help="boot every node on the kernel built in DIR (its bzImage and modules), whatever the scenario names",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    run.set_defaults(func=cmd_run)
