"""`niclab vagrant …`: what the Vagrantfile asks of niclab, and the box it boots.

niclab vagrant box                 build the Debian image if needed, pack and add it as a box
niclab vagrant config              the rig of a scenario cell, as JSON for the Vagrantfile
niclab vagrant check / forget      check a machine's links after `up` (the Vagrantfile's triggers)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Progress
from niclab.base.paths import SOURCE_ROOT
from niclab.ui.console import ProgressLines

if TYPE_CHECKING:
    from niclab.model.scenario import Cell
    from niclab.plumbing.image import Image

DEFAULT_SCENARIO = "scenarios/two-node.yaml"


def _progress() -> Progress:
    return ProgressLines()


def _cell(args: argparse.Namespace) -> Cell:
    from niclab.model.scenario import load_scenario

    scenario_file = load_scenario(Path(args.scenario))
    if args.cell:
        chosen = scenario_file.select([args.cell])
        if len(chosen) > 1:  # a rig is one cell
            raise UsageError(
                f"{args.scenario}: {args.cell} picks {len(chosen)} cells ({', '.join(c.id for c in chosen)}); "
                "a rig is one cell: name all its axes"
            )
        cell = chosen[0]
    else:
        if len(scenario_file.cells) > 1:
            _progress()(
                f"{args.scenario} has {len(scenario_file.cells)} cells; using {scenario_file.cells[0].id} "
                f"(choose with NICLAB_CELL=…: {', '.join(c.id for c in scenario_file.cells)})"
            )
        cell = scenario_file.cells[0]
    booted = [spec for spec in cell.topology.nodes if spec.kernel is not None or spec.cmdline or spec.drivers]
    if booted:
        raise NiclabError(
            f"{args.scenario}: cell {cell.id} chooses a kernel, a driver or driver module parameters for node "
            f"{booted[0].name}; the Vagrant rig boots the debian box's own kernel, modules and command line: run "
            "this cell with `niclab run`"
        )
    return cell


def _driver(image: Image | None, progress: Progress) -> dict:
    """libvirt's domain type: kvm where the probe boots the guest's kernel under KVM, else qemu (TCG)."""
    from niclab.plumbing.accel import choose_accel

    if image is None:
        return {"driver": "qemu", "accel_reason": "the debian image is not built yet"}
    choice = choose_accel(image, progress=progress)
    return {"driver": "kvm" if choice.accel == "kvm" else "qemu", "accel_reason": choice.reason}


def cmd_config(args: argparse.Namespace) -> int:
    from niclab.plumbing.image import find_image
    from niclab.ui.vagrant.box import BOX_NAME, added, box_version
    from niclab.ui.vagrant.machines import port_keys, vagrant_cell
    from niclab.ui.vagrant.state import domain_prefix, state_dir, udp_ports

    cell = _cell(args)
    dotfile = Path(args.dotfile)
    ports = udp_ports(state_dir(dotfile), port_keys(cell))
    machines = vagrant_cell(cell, str(Path(args.scenario).resolve()), ports)
    image = find_image("debian")
    problem = None
    if image is None:
        problem = "the Debian guest image is not built: run `make vagrant` (or .venv/bin/niclab vagrant box)"
    elif not added(image):
        problem = (
            f"the box for image {image.id} is not in Vagrant: run `make vagrant` (or .venv/bin/niclab vagrant box)"
        )
    config = {
        "rig": machines.as_dict(),
        "box": {"name": BOX_NAME, "version": box_version(image) if image else None, "problem": problem},
        "libvirt": {
            **_driver(image, _progress()),
            "uri": os.environ.get("NICLAB_LIBVIRT_URI", "qemu:///system"),
            "prefix": domain_prefix(dotfile),
        },
    }
    json.dump(config, sys.stdout, indent=2)
    print()
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from niclab.plumbing.ssh import SshTarget
    from niclab.ui.vagrant.check import check
    from niclab.ui.vagrant.state import state_dir

    cell = _cell(args)
    if args.node not in cell.scenario.nodes:
        raise UsageError(f"no node {args.node!r} in {args.scenario}; nodes are: {', '.join(cell.scenario.nodes)}")
    target = SshTarget(args.host, args.port, args.user, args.key)
    check(cell, args.node, target, state_dir(Path(args.dotfile)), _progress())
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    from niclab.ui.vagrant.check import forget
    from niclab.ui.vagrant.state import state_dir

    forget(state_dir(Path(args.dotfile)), args.node)
    return 0


def cmd_box(args: argparse.Namespace) -> int:
    from niclab.plumbing.image import ensure_image
    from niclab.ui.vagrant.box import add_box

    progress = _progress()
    image = ensure_image("debian", progress=progress)
    print(add_box(image, progress))
    return 0


def _rig_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        default=os.environ.get("NICLAB_SCENARIO") or str(SOURCE_ROOT / DEFAULT_SCENARIO),
        help=f"scenario file (default: $NICLAB_SCENARIO, else {DEFAULT_SCENARIO})",
    )
    parser.add_argument(
        "--cell",
        default=os.environ.get("NICLAB_CELL") or None,
        help="matrix cell (default: $NICLAB_CELL, else the first)",
    )
    parser.add_argument(
        "--dotfile",
        default=os.environ.get("VAGRANT_DOTFILE_PATH") or ".vagrant",
        help="Vagrant's state directory (default: $VAGRANT_DOTFILE_PATH, else .vagrant)",
    )


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vagrant = verbs.add_parser(
        "vagrant",
        help="the Vagrant rig: its box, and what the Vagrantfile asks of niclab",
        description="`vagrant up` brings up a scenario's nodes as vagrant-libvirt machines; "
        "these are the pieces behind it.",
    )
    actions = vagrant.add_subparsers(dest="vagrant_verb", metavar="ACTION", required=True)
    box = actions.add_parser(
        "box",
        help="build the Debian image if needed, pack it as a vagrant-libvirt box and add it",
        description="Build the Debian guest image (if its recipe changed) and add it to Vagrant as box "
        "niclab/debian, from a local file: nothing is downloaded from a box catalog.",
    )
    box.set_defaults(func=cmd_box)

    config = actions.add_parser(
        "config",
        help="the rig of a scenario cell, as the JSON the Vagrantfile reads",
        description="Machines, NIC models, UDP cables, provisioning scripts and libvirt settings of one cell.",
    )
    _rig_arguments(config)
    config.set_defaults(func=cmd_config)

    check = actions.add_parser(
        "check",
        help="check one machine's links over SSH (run by the Vagrantfile after up)",
        description="Read the machine's links back and compare them with the scenario; the last machine "
        "of the rig to pass pings across every cable and writes <dotfile>/niclab/network.json.",
    )
    _rig_arguments(check)
    check.add_argument("--node", required=True)
    check.add_argument("--host", required=True)
    check.add_argument("--port", type=int, default=22)
    check.add_argument("--user", default="vagrant")
    check.add_argument("--key", required=True, help="SSH private key file")
    check.set_defaults(func=cmd_check)

    forget = actions.add_parser(
        "forget",
        help="drop a machine's earlier check (run by the Vagrantfile before up or provision)",
        description="Remove the machine's check result, so the next check starts over.",
    )
    _rig_arguments(forget)
    forget.add_argument("--node", required=True)
    forget.set_defaults(func=cmd_forget)
