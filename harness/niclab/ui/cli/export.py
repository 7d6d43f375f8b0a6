"""`niclab export RUN_DIR`: a run's results as CSV or Parquet, or its selftests for NIPA."""

from __future__ import annotations

import argparse
from pathlib import Path

from niclab.base.errors import UsageError
from niclab.ui.console import EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from niclab.ui.export import export

    run_dir = Path(args.run)
    if args.format == "nipa":
        from niclab.ui.nipa import write_nipa

        if args.out:
            raise UsageError("--format nipa writes nipa.json and nipa/ in the run directory; drop --out")
        written = write_nipa(run_dir, args.branch, args.url)
        if written is None:
            raise UsageError(f"{run_dir} has no kernel selftest results (test records) to export for NIPA")
        print(written)
        return EXIT_OK
    out = Path(args.out) if args.out else run_dir / f"{args.what}.{args.format}"
    count = export(run_dir, args.format, out, args.what)
    print(f"{out} ({count} rows)")
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = verbs.add_parser(
        "export",
        help="a run's results as CSV or Parquet, or its selftests for NIPA",
        description="One flat table for pandas: measurements (default) or summaries. --format nipa: the kernel "
        "selftests' results in NIPA's format (RUN_DIR/nipa.json, the manifest, and nipa/<cell>.json).",
    )
    export.add_argument("run", metavar="RUN_DIR")
    export.add_argument("--format", choices=("csv", "parquet", "nipa"), default="csv")
    export.add_argument("--what", choices=("measurements", "summaries"), default="measurements")
    export.add_argument("--out", metavar="FILE", help="default: RUN_DIR/<what>.<format>")
    export.add_argument("--branch", help="nipa: the branch the run tested (default: the run directory's name)")
    export.add_argument("--url", metavar="BASE_URL", help="nipa: where the run directory is published (links)")
    export.set_defaults(func=cmd_export)
