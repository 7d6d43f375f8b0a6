"""`niclab plan SCENARIO`: a scenario's cells and the run's estimated wall time; boots nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from niclab.ui.cli.options import add_axis_option, add_backend_options, add_cell_options, overrides
from niclab.ui.console import EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.run.plan import once_warning, plan_table
    from niclab.run.realizable import backend_from_args, refused_cells

    with backend_from_args(args) as backend:
        scenario_file = load_scenario(Path(args.scenario), overrides(args))
        cells = scenario_file.select(args.cell, args.keyword)
        unrealizable, where = refused_cells(args, backend, cells)
        left_out = {v.cell.id for v in unrealizable}
        runnable = [cell for cell in cells if cell.id not in left_out]
        print(plan_table(scenario_file.name, runnable))
        if unrealizable:
            print(f"left out of the estimate: {len(unrealizable)} of {len(cells)} cells, which {where} cannot realize:")
            for verdict in unrealizable:
                print(f"  {verdict.cell.id}: {verdict.reason}")
            print("`niclab run` refuses them; `--allow-partial` runs the others")
        if warning := once_warning(args.scenario, runnable or cells):
            print(warning, file=sys.stderr)
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = verbs.add_parser(
        "plan",
        help="list a scenario's cells and estimate the run's wall time",
        description="List the matrix cells a run would realize, with an estimate of "
        "each one's wall time; boots nothing.",
    )
    plan.add_argument("scenario", metavar="SCENARIO")
    add_cell_options(plan, "plan")
    add_axis_option(plan)
    add_backend_options(plan)
    plan.set_defaults(func=cmd_plan)
