"""`niclab down`: stop the QEMU processes and libvirt domains that killed runs left behind."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from niclab.ui.cli.options import add_allow_uri_params, add_declared
from niclab.ui.console import EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    from niclab.plumbing.backends import DownRequest, down_options, leftovers

    lab = None
    if args.lab:
        from niclab.model.lab.inventory import load_inventory

        lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    request = DownRequest(args.all, lab, {option.dest: getattr(args, option.dest) for option in down_options()})
    ended = []
    for kind in leftovers():
        ended += kind.end(request, print, lambda line: print(line, file=sys.stderr))
    if not ended:
        print("nothing to stop")
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from niclab.plumbing.backends import down_options

    down = verbs.add_parser(
        "down",
        help="stop what a killed run left behind",
        description="Stop the QEMU processes recorded by harnesses that are no longer "
        "running (by recorded PID and start time), and destroy the libvirt domains such runs left.",
    )
    down.add_argument("--all", action="store_true", help="also stop those of runs still in progress")
    add_declared(down, down_options())
    down.add_argument("--lab", metavar="LAB_YAML", help="destroy leftover niclab domains on every host of this lab")
    add_allow_uri_params(down)
    down.set_defaults(func=cmd_down)
