"""`niclab report RUN_DIR...`: one HTML page of one or more runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from niclab.base.errors import UsageError
from niclab.ui.cli.options import add_cell_options
from niclab.ui.console import EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    import yaml

    from niclab.ui.report.page import report_runs

    prices = None
    if args.prices:
        try:
            prices = yaml.safe_load(Path(args.prices).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"{args.prices}: cannot read prices ({exc})") from None
        if not isinstance(prices, dict):
            raise UsageError(f"{args.prices}: prices are a mapping of NIC model to price, e.g. {{e1000: 35}}")
        for model, price in prices.items():
            if isinstance(price, bool) or not isinstance(price, int | float):
                raise UsageError(f"{args.prices}: {model}: {price!r} is not a price; give a number, e.g. 35")
    runs = [Path(p) for p in args.runs]
    out = Path(args.out) if args.out else (runs[0] / "report.html" if len(runs) == 1 else Path("report.html"))
    print(report_runs(runs, out, prices, args.cell, args.keyword))
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = verbs.add_parser(
        "report",
        help="write an HTML report of one or more runs",
        description="One self-contained HTML page (plots embedded) from run directories: "
        "summary tables, NetPIPE curves, bars, MTU and bonding plots, fio, "
        "costs, findings and provenance.",
    )
    report.add_argument("runs", nargs="+", metavar="RUN_DIR")
    report.add_argument("--out", metavar="FILE", help="default: RUN_DIR/report.html for one run, else report.html")
    report.add_argument("--prices", metavar="FILE", help="YAML: NIC model -> price, for cost per Mbit/s")
    add_cell_options(report, "report")
    report.set_defaults(func=cmd_report)
