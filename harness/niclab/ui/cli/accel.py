"""`niclab accel`: whether guests run under KVM or TCG here (or on each host of a lab), and why."""

from __future__ import annotations

import argparse
from pathlib import Path

from niclab.ui.cli.options import add_allow_uri_params
from niclab.ui.console import EXIT_OK, ProgressLines


def cmd_accel(args: argparse.Namespace) -> int:
    from niclab.plumbing.accel import choose_accel
    from niclab.plumbing.image import ensure_image

    progress = ProgressLines()
    if args.lab:
        return _lab_accel(args, progress)
    choice = choose_accel(ensure_image(progress=progress), refresh=args.probe, progress=progress)
    how = "set by NICLAB_ACCEL" if choice.forced else f"decided {choice.probed_at}"
    print(f"{choice.accel} ({how}): {choice.reason}")
    return EXIT_OK


def _lab_accel(args: argparse.Namespace, progress: ProgressLines) -> int:
    """`niclab accel --lab`: each host's verdict, probed there through its libvirt where none is cached."""
    from niclab.model.lab.inventory import load_inventory
    from niclab.plumbing.backends.libvirt_accel import hosts_accel
    from niclab.plumbing.image import ensure_image

    lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    image = ensure_image(progress=progress)
    verdicts = hosts_accel({name: host.libvirt for name, host in lab.hosts.items()}, image, progress, args.probe)
    status = EXIT_OK
    for name, verdict in verdicts.items():
        where = f"host {name} ({lab.hosts[name].libvirt})"
        if isinstance(verdict, str):
            print(f"{where}: not probed: {verdict}")
            status = 1
            continue
        how = "set by NICLAB_ACCEL" if verdict.forced else f"decided {verdict.probed_at}"
        print(f"{where}: {verdict.accel} ({how}): {verdict.reason}")
    return status


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    accel = verbs.add_parser(
        "accel",
        help="say whether guests run under KVM or TCG here, and why",
        description="KVM is used only where the guest image's kernel reaches userspace "
        "under it; the verdict is cached per host and image.",
    )
    accel.add_argument("--probe", action="store_true", help="probe KVM again instead of using the cached verdict")
    accel.add_argument(
        "--lab",
        metavar="LAB_YAML",
        help="each host of this lab: a remote host's probe boots there, through its libvirt (cached per host URI "
        "and image)",
    )
    add_allow_uri_params(accel)
    accel.set_defaults(func=cmd_accel)
