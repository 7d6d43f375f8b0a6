"""`niclab down`: stop the rigs `niclab up` holds, and the QEMU processes and libvirt domains that killed runs
left behind."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from niclab.ui.cli.options import add_allow_uri_params, add_declared
from niclab.ui.console import EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    from niclab.plumbing.backends import DownRequest, down_options, leftovers

    ended = end_rigs(args.rigs)
    if args.rigs:  # the rigs named, nothing else
        return EXIT_OK
    lab = None
    if args.lab:
        from niclab.model.lab.inventory import load_inventory

        lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    request = DownRequest(args.all, lab, {option.dest: getattr(args, option.dest) for option in down_options()})
    for kind in leftovers():
        ended += kind.end(request, print, lambda line: print(line, file=sys.stderr))
    if not ended:
        print("nothing to stop")
    return EXIT_OK


def end_rigs(names: list[str]) -> list[str]:
    """Stop the rigs named (every one held, without names), each said; a name no rig has is an error."""
    from niclab.run.held import HeldRigError, KeeperKilled, check_name, end, found, read_record, remove, rigs_dir

    if names:
        paths = []
        for name in names:
            path = rigs_dir() / check_name(name)
            if not path.exists():
                raise HeldRigError(f"no rig named {name}; `niclab status` lists the rigs that are up")
            paths.append(path)
        rigs = [(path, read_record(path)) for path in paths]
    else:
        rigs = []
        for rig in found():
            if rig.record is None:
                remove(rig.path)
                print(f"removed {rig.path}: {rig.problem}")
            else:
                rigs.append((rig.path, rig.record))
    ended = []
    for path, record in rigs:
        if record.elsewhere and not names:
            print(f"left rig {record.name}: it is held elsewhere ({record.where})")
            continue
        try:
            stopped = end(record, path)
        except KeeperKilled as exc:
            print(f"niclab: {exc}", file=sys.stderr)
            stopped = True
        if stopped:
            print(f"stopped rig {record.name} (cell {record.cell}; nodes {', '.join(record.nodes) or 'not up yet'})")
        else:
            print(f"cleared rig {record.name}: its keeper (pid {record.pid}) was gone")
        ended.append(record.name)
    return ended


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from niclab.plumbing.backends import down_options

    down = verbs.add_parser(
        "down",
        help="stop the rigs `niclab up` holds, and what a killed run left behind",
        description="Stop the rigs NAME (every rig `niclab up` holds, without names: their guests and "
        "keepers), then the QEMU processes recorded by harnesses that are no longer running (by recorded PID "
        "and start time), and destroy the libvirt domains such runs left.",
    )
    down.add_argument("rigs", nargs="*", metavar="NAME", help="stop only these rigs (`niclab status` lists them)")
    down.add_argument("--all", action="store_true", help="also stop those of runs still in progress")
    add_declared(down, down_options())
    down.add_argument("--lab", metavar="LAB_YAML", help="destroy leftover niclab domains on every host of this lab")
    add_allow_uri_params(down)
    down.set_defaults(func=cmd_down)
