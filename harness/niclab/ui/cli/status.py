"""`niclab status`: the rigs `niclab up` holds, each with its state, cell, nodes and backend."""

from __future__ import annotations

import argparse
import json
import time

from niclab.ui.console import EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from niclab.run.held import status
    from niclab.ui.table import plain_table

    rigs = status()
    if args.json:
        print(json.dumps([rig.model_dump() for rig in rigs], indent=1))
        return EXIT_OK
    if not rigs:
        print("no rig is up (`niclab up SCENARIO` starts one)")
        return EXIT_OK
    rows = [
        [
            rig.name,
            rig.state,
            rig.cell,
            ", ".join(f"{node} (gone)" if node in rig.gone else node for node in rig.nodes),
            rig.backend,
            time.strftime("%H:%M:%S", time.localtime(rig.since)) if rig.since else "",
        ]
        for rig in rigs
    ]
    print(plain_table(["rig", "state", "cell", "nodes", "backend", "since"], rows))
    for rig in rigs:
        if rig.problem:
            print(f"{rig.name}: {rig.problem}")
        for node, why in rig.gone.items():
            print(f"{rig.name}: node {node} is gone: {why}")
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = verbs.add_parser(
        "status",
        help="list the rigs `niclab up` holds",
        description="List the rigs `niclab up` brought up and holds: their state, cell, nodes and backend.",
    )
    parser.add_argument("--json", action="store_true", help="as JSON, one object per rig")
    parser.set_defaults(func=cmd_status)
