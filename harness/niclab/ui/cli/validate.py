"""`niclab validate FILE...`: check scenario files (and, with --backend or --lab, what can realize them)."""

from __future__ import annotations

import argparse

from niclab.ui.cli.options import add_backend_options
from niclab.ui.console import FileCheck


def cmd_validate(args: argparse.Namespace) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.run.realizable import backend_from_args, verdicts

    files = FileCheck()
    with backend_from_args(args) as backend:
        for name, scenario_file in files.each(args.files, load_scenario):
            count = len(scenario_file.cells)
            print(f"{name}: ok ({count} cell{'s' if count != 1 else ''})")
            if args.lab or args.backend:
                for verdict in verdicts(backend, scenario_file.cells):
                    if not verdict.ok:
                        print(f"{name}: cell {verdict.cell.id}: {backend.name} cannot realize it: {verdict.reason}")
    return files.status


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    validate = verbs.add_parser(
        "validate",
        help="check scenario files without booting anything",
        description="Check scenario files; exit 1 if any has a problem.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    add_backend_options(validate)
    validate.set_defaults(func=cmd_validate)
