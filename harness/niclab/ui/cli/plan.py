"""`niclab plan SCENARIO`: a scenario's cells and the run's estimated wall time; boots nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from niclab.ui.cli.options import add_backend_options
from niclab.ui.console import EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.run.plan import plan_table
    from niclab.run.realizable import backend_from_args, verdicts

    with backend_from_args(args) as backend:
        scenario_file = load_scenario(Path(args.scenario))
        cells = scenario_file.select(args.cell)
        print(plan_table(scenario_file.name, cells))
        if args.lab or args.backend:
            for verdict in verdicts(backend, cells):
                if not verdict.ok:
                    print(f"cannot realize {verdict.cell.id} on {backend.name}: {verdict.reason}")
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = verbs.add_parser(
        "plan",
        help="list a scenario's cells and estimate the run's wall time",
        description="List the matrix cells a run would realize, with an estimate of "
        "each one's wall time; boots nothing.",
    )
    plan.add_argument("scenario", metavar="SCENARIO")
    plan.add_argument("--cell", action="append", metavar="ID", help="only these cells")
    add_backend_options(plan)
    plan.set_defaults(func=cmd_plan)
