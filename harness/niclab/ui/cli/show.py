"""`niclab show [RUN_DIR]`: the tables `niclab run` ends with, read back from a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from niclab.base.errors import UsageError
from niclab.ui.cli.options import add_cell_options
from niclab.ui.console import EXIT_FAILED, EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from niclab.base.text import one_line
    from niclab.run.results import newest_run
    from niclab.ui.report.data import load_run, picked
    from niclab.ui.table import CellView, cell_table

    if args.run:
        path = Path(args.run)
    else:
        found = newest_run(Path(args.runs))
        if found is None:
            raise UsageError(
                f"{args.runs} holds no run; run one with `niclab run SCENARIO`, or name it: niclab show RUN_DIR"
            )
        path = found
    run = picked(load_run(path), args.cell, args.keyword)
    scenario = one_line(run.scenario)
    failed = False
    for cell in run.cells:
        view = CellView.of_records(cell)
        failed = failed or bool(view.errors) or any(not met for met, _ in view.expectations)
        print(cell_table(scenario, view))
        print()
    status = one_line(run.info.status or "unknown")
    print(f"run:     {path} ({status})")
    for name in ("report.html", "nipa.json"):
        if (path / name).is_file():
            print(f"{name.split('.')[0] + ':':<8} {path / name}")
    return EXIT_FAILED if failed or status == "failed" else EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    show = verbs.add_parser(
        "show",
        help="print a finished run's tables in the terminal",
        description="Print the per-cell tables `niclab run` ends with, from a run directory (by default the run "
        "RUNS/latest points at, or the newest in RUNS). Exit 1 if the run failed, a benchmark failed or an "
        "expectation was missed.",
    )
    show.add_argument("run", metavar="RUN_DIR", nargs="?", help="default: the newest run in --runs")
    show.add_argument("--runs", default="runs", metavar="DIR", help="where runs are (default: runs)")
    add_cell_options(show, "show")
    show.set_defaults(func=cmd_show)
