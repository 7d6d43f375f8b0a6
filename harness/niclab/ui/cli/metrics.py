"""`niclab metrics`: every metric benchmarks report, with its unit."""

from __future__ import annotations

import argparse

from niclab.ui.console import EXIT_OK


def cmd_metrics(args: argparse.Namespace) -> int:
    from niclab.model.bench import all_metrics

    metrics = all_metrics()
    width = max(len(m.name) for m in metrics) + 2
    print(f"{'metric':<{width}}{'unit':<10}{'better':<8}meaning")
    for m in metrics:
        print(f"{m.name:<{width}}{m.unit:<10}{m.better or '':<8}{m.description}")
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    metrics = verbs.add_parser(
        "metrics",
        help="list every metric, with its unit",
        description="The metrics benchmarks report, by the names expectations use.",
    )
    metrics.set_defaults(func=cmd_metrics)
