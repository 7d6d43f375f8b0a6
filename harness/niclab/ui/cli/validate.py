"""`niclab validate FILE...`: check scenario files (and, with --backend or --lab, what can realize them)."""

from __future__ import annotations

import argparse
import sys

from niclab.ui.cli.options import add_axis_option, add_backend_options, overrides
from niclab.ui.console import EXIT_FAILED, EXIT_OK, FileCheck


def cmd_validate(args: argparse.Namespace) -> int:
    from niclab.model.scenario import load_scenario
    from niclab.run.plan import once_warning
    from niclab.run.realizable import backend_from_args, refused_cells

    files = FileCheck()
    status = EXIT_OK
    with backend_from_args(args) as backend:
        for name, scenario_file in files.each(args.files, lambda path: load_scenario(path, overrides(args))):
            cells = scenario_file.cells
            count = f"{len(cells)} cell{'s' if len(cells) != 1 else ''}"
            unrealizable, where = refused_cells(args, backend, cells)
            if unrealizable:  # the file is sound, but the rig asked for cannot run all of it
                status = EXIT_FAILED
                print(f"{name}: {where} cannot realize {len(unrealizable)} of {count}:", file=sys.stderr)
                for verdict in unrealizable:
                    print(f"{name}: cell {verdict.cell.id}: {verdict.reason}", file=sys.stderr)
                print(
                    f"{name}: run the others with `niclab run --allow-partial`, or choose cells with --cell",
                    file=sys.stderr,
                )
            else:
                print(f"{name}: ok ({count}{f' on {backend.name}' if args.lab or args.backend else ''})")
            if warning := once_warning(name, cells):
                print(warning, file=sys.stderr)
    return max(files.status, status)


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    validate = verbs.add_parser(
        "validate",
        help="check scenario files without booting anything",
        description="Check scenario files, every problem of a file at once; exit 1 if any has a problem, "
        "or (with --lab or --backend) if a cell cannot be realized there. Warns when a benchmark runs once.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    add_backend_options(validate)
    add_axis_option(validate)
    validate.set_defaults(func=cmd_validate)
