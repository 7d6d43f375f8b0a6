"""`niclab compare BASE_RUN [NEW_RUN]`: what changed between two runs (or two cells), and whether it is real."""

from __future__ import annotations

import argparse
from pathlib import Path

from niclab.base.errors import UsageError
from niclab.ui.console import EXIT_FAILED, EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from niclab.run.reader import RunDirError

    try:
        return _compare(args)
    except RunDirError as exc:  # input the gate cannot judge: 2, never the 1 of a regression
        raise UsageError(str(exc)) from None


def _compare(args: argparse.Namespace) -> int:
    from niclab.ui.report import compare
    from niclab.ui.report.data import for_compare, for_comparing_runs, load_run, picked

    base = Path(args.base)
    new = Path(args.new) if args.new else base
    if args.cells and args.keyword:
        raise UsageError("compare takes --cells BASE_CELL NEW_CELL or -k EXPR, not both")
    if args.cells:
        if args.new:  # two runs: nothing pairs their repeats
            a = load_run(base, for_comparing_runs).cell(args.cells[0])
            b = load_run(new, for_comparing_runs).cell(args.cells[1])
            paired = False
        else:
            run = load_run(base, for_compare)
            a, b = run.cell(args.cells[0]), run.cell(args.cells[1])
            paired = compare.alternated(a, b)
        verdicts = compare.gate_pair(a, b, args.threshold, args.alpha, args.all, paired)
    elif not args.new:
        raise UsageError("compare needs two runs, or one run and --cells BASE_CELL NEW_CELL")
    else:
        base_run, new_run = (picked(load_run(p, for_comparing_runs), None, args.keyword) for p in (base, new))
        verdicts = compare.gate(base_run, new_run, args.threshold, args.alpha, every_metric=args.all)
    if not (verdicts.changes or verdicts.lost or verdicts.added or verdicts.tests):
        raise UsageError(f"{base} has no figure to compare{' in that cell' if args.cells else ''}")
    render = {"text": compare.as_text, "json": compare.as_json, "html": compare.as_html}[args.format]
    text = render(verdicts, base, new, args.threshold, args.alpha)
    if args.out:
        from niclab.base.atomic import write_text

        write_text(Path(args.out), text + ("" if text.endswith("\n") else "\n"))
        print(args.out)
    else:
        print(text)
    return EXIT_OK if verdicts.passed else EXIT_FAILED


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compare = verbs.add_parser(
        "compare",
        help="what changed between two runs, and whether it is real",
        description="A gate for CI. Every figure of the base run is accounted for in the new one: compared "
        "(its change in per cent, and a verdict from Welch's t-test on the samples, or a paired t-test for two "
        "cells of one run whose repeats alternated), or lost (its benchmark or its cell failed, or it did not "
        "run); figures only the new run has are listed as new; and the kernel selftests whose result changed. "
        "Exit status: 0 nothing worse and nothing lost; 1 a figure got worse, a figure was lost, or a selftest "
        "that passed fails or crashes now; 2 the runs cannot be compared (two scenarios, no cell in common, "
        "no figures, a run directory niclab will not read), or a usage error.",
    )
    compare.add_argument("base", metavar="BASE_RUN")
    compare.add_argument("new", metavar="NEW_RUN", nargs="?", help="omitted: compare two cells of BASE_RUN (--cells)")
    compare.add_argument(
        "--cells",
        nargs=2,
        metavar=("BASE_CELL", "NEW_CELL"),
        help="A/B: this cell of BASE_RUN against that one (of NEW_RUN, or of BASE_RUN itself); "
        "cells whose repeats alternated on one boot are compared repeat by repeat (a paired t-test)",
    )
    compare.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        help='compare only the cells whose ids match, as pytest\'s -k reads names, e.g. -k "e1000 or virtio"',
    )
    compare.add_argument("--format", choices=("text", "json", "html"), default="text")
    compare.add_argument("--out", metavar="FILE", help="write there instead of to stdout")
    compare.add_argument(
        "--threshold",
        type=float,
        default=5.0,
        metavar="PCT",
        help="smallest change that counts, in %% of the base mean (default 5)",
    )
    compare.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    compare.add_argument(
        "--all",
        action="store_true",
        help="judge every metric, not only the headline ones (retransmits, percentiles, ...)",
    )
    compare.set_defaults(func=cmd_compare)
