"""`niclab lab …`: check an inventory, diagnose a lab host, give cards back after a crash.

niclab lab check LAB_YAML...        the inventory's schema and references (like `niclab validate`)
niclab lab doctor --lab LAB_YAML    per card, on its host: class, IOMMU group, driver, host use, the driver and
                                    firmware the lab guest gives it; this host's set-up
niclab lab restore                  every card a run left on vfio-pci back to its driver (from the journal)
niclab lab leases                   which run holds which card
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from niclab.base.errors import UsageError
from niclab.ui.console import FileCheck

if TYPE_CHECKING:
    from niclab.plumbing.lab.statedir import StateDir


def cmd_check(args: argparse.Namespace) -> int:
    from niclab.model.lab.inventory import load_inventory

    files = FileCheck()
    load = functools.partial(load_inventory, allow_uri_params=args.allow_uri_params)
    for name, lab in files.each(args.files, load):
        print(
            f"{name}: ok (lab {lab.name}: {len(lab.hosts)} host{'s' if len(lab.hosts) != 1 else ''}, "
            f"{len(lab.cards)} card{'s' if len(lab.cards) != 1 else ''}, "
            f"{len(lab.cables)} cable{'s' if len(lab.cables) != 1 else ''})"
        )
    return files.status


def cmd_doctor(args: argparse.Namespace) -> int:
    from niclab.base.errors import NiclabError
    from niclab.model.lab.inventory import load_inventory
    from niclab.plumbing.image.store import LAB_RECIPE, find_image
    from niclab.plumbing.lab.doctor import diagnose_host, render
    from niclab.plumbing.lab.drivers import DriverTable
    from niclab.plumbing.lab.hostnet import HostNet
    from niclab.plumbing.lab.nodedev import remote_readers
    from niclab.plumbing.lab.passthrough import Readers, diagnose_cards
    from niclab.plumbing.lab.sysfs import Sysfs

    lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    if args.host is not None and args.host not in lab.hosts:
        raise UsageError(f"{args.lab}: no host {args.host!r}; hosts are: {', '.join(lab.hosts)}")
    here = [args.host] if args.host else [name for name, host in lab.hosts.items() if host.local]
    sysfs = Sysfs(Path(args.sysfs_root))
    host = diagnose_host(sysfs)
    readers: dict[str, Readers] = {}
    unanswered: list[str] = []
    elsewhere: list[str] = []  # hosts whose URI is local to another machine (--host names this one)
    for name in dict.fromkeys(card.host for card in lab.cards):
        uri = lab.hosts[name].libvirt
        if name in here:
            readers[name] = (sysfs, HostNet())
        elif lab.hosts[name].local:
            elsewhere.append(name)
        else:
            try:
                readers[name] = remote_readers(name, uri)
            except NiclabError as exc:
                unanswered.append(f"{exc}: its cards were not checked")
    checked = [card.id for card in lab.cards if card.host in readers]
    image = find_image(LAB_RECIPE)  # not built here: a build takes minutes, a run builds it
    reports = diagnose_cards(lab, checked, readers, DriverTable(image) if image is not None else None)
    print(render(host, reports), end="")
    if image is None and checked:
        print(f"guest drivers not checked: the lab image is not built (niclab image build {LAB_RECIPE})")
    if elsewhere:
        unchecked = ", ".join(card.id for card in lab.cards if card.host in elsewhere)
        where = ", ".join(elsewhere)
        print(f"not checked here (on {where}, whose libvirt URI is local; run the doctor there): {unchecked}")
    for line in unanswered:
        print(line)
    refused = [why for report in reports if (why := report.refusal(args.force)) is not None]
    for why in refused:
        print(f"a run would refuse {why}")
    return 0 if host.ok and not refused and not unanswered else 1


def _state(args: argparse.Namespace) -> StateDir:
    from niclab.base.paths import state_dir
    from niclab.plumbing.lab.statedir import StateDir

    if args.state:
        return StateDir(Path(args.state), named_by="--state")
    return StateDir(state_dir())


def cmd_restore(args: argparse.Namespace) -> int:
    from niclab.plumbing.lab.sysfs import Sysfs
    from niclab.plumbing.lab.vfio import Journal, restore_all

    with _state(args) as state:
        journal = Journal(state)
        results = restore_all(Sysfs(Path(args.sysfs_root)), journal)
        if not results:
            print(f"nothing to restore (no card in the journal {journal.dir.path})")
            return 0
    for result in results:
        if result.ok:
            print(f"{result.pci}: back on {result.driver or 'no driver (it had none)'}")
        else:
            print(f"{result.pci}: NOT restored: {result.error}")
    return 0 if all(r.ok for r in results) else 1


def cmd_leases(args: argparse.Namespace) -> int:
    from niclab.base.errors import NiclabError
    from niclab.plumbing.lab.lease import holder, keys, locked

    held, problems = [], 0
    with _state(args) as state:
        for key in keys(state):
            record = holder(state, key)
            try:
                taken = record is not None and (record.alive() or locked(state, key))
            except NiclabError as exc:
                print(f"{key}: {exc}")
                problems += 1
                continue
            if record is not None and taken:
                held.append(key)
                print(f"{key}: {record.describe()}")
    if not held and not problems:
        print("no card is leased")
    return 1 if problems else 0


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = verbs.add_parser(
        "lab",
        help="lab inventories and lab hosts: check, doctor, restore",
        description="Real cards passed through to libvirt domains: check an inventory, diagnose this host, "
        "and give cards back after a crash. Runs use `niclab run SCENARIO --lab LAB_YAML`.",
    )
    actions = lab.add_subparsers(dest="lab_verb", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="check lab inventories without touching any host")
    check.add_argument("files", nargs="+", metavar="LAB_YAML")
    add_allow_uri_params(check)
    check.set_defaults(func=cmd_check)

    doctor = actions.add_parser(
        "doctor",
        help="can this host pass the lab's cards through?",
        description="Per card, on its host: its PCI class, its IOMMU group (viable, and holding no display, disk "
        "or default route's device), driver, whether the host uses it (an address, a route), the driver and firmware "
        "the lab image's guest gives it (from its modules.alias); and this host's IOMMU, "
        "interrupt remapping, vfio-pci, memlock and libvirt. Cards on other hosts are read through their libvirt "
        "URI's node devices, where host use and the default route are not checked (a warning). "
        "Exit 1 if a run would refuse or a host does not answer.",
    )
    doctor.add_argument("--lab", required=True, metavar="LAB_YAML")
    add_allow_uri_params(doctor)
    doctor.add_argument("--force", action="store_true", help="as a run with --force: host use does not refuse")
    doctor.add_argument(
        "--host",
        metavar="NAME",
        help="the inventory's host this machine is, read through /sys (default: the hosts whose libvirt URI is "
        "local); other hosts whose URI is local are then left out",
    )
    doctor.add_argument("--sysfs-root", default="/", help=argparse.SUPPRESS)  # tests point it at a fake tree
    doctor.set_defaults(func=cmd_doctor)

    restore = actions.add_parser(
        "restore",
        help="give every card a run left on vfio-pci back to its driver",
        description="After a crash (a killed run, a lost machine): the journal says each card's original "
        "driver; put each back. Needs root, like binding.",
    )
    restore.add_argument("--state", metavar="DIR", help="the state directory (default: /var/lib/niclab as root)")
    restore.add_argument("--sysfs-root", default="/", help=argparse.SUPPRESS)
    restore.set_defaults(func=cmd_restore)

    leases = actions.add_parser("leases", help="which run holds which card")
    leases.add_argument("--state", metavar="DIR", help="the state directory (default: /var/lib/niclab as root)")
    leases.set_defaults(func=cmd_leases)


def add_allow_uri_params(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-uri-params",
        action="store_true",
        help="accept libvirt URI parameters such as command= or socket= in the lab inventory "
        "(they make libvirt run a program as you: only for an inventory you trust)",
    )
