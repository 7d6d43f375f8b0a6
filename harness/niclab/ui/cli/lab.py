"""`niclab lab …`: check an inventory, diagnose a lab host, give cards back after a crash.

niclab lab check LAB_YAML...        the inventory's schema and references (like `niclab validate`)
niclab lab doctor --lab LAB_YAML    every host's set-up and, per card on its host: class, IOMMU group, driver, host
                                    use, the driver and firmware the lab guest gives it
niclab lab restore                  every card a run left on vfio-pci back to its driver (from the journal)
niclab lab leases [--lab LAB_YAML]  which run holds which card (on every lab host, with --lab)
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from niclab.base.errors import UsageError
from niclab.ui.cli.options import add_allow_uri_params
from niclab.ui.console import FileCheck

if TYPE_CHECKING:
    from collections.abc import Mapping

    from niclab.model.lab.inventory import Host
    from niclab.plumbing.lab.doctor import HostReport
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
    from contextlib import ExitStack

    from niclab.model.lab.inventory import load_inventory
    from niclab.plumbing.image.store import LAB_RECIPE, find_image
    from niclab.plumbing.lab.doctor import diagnose_host, render
    from niclab.plumbing.lab.drivers import DriverTable
    from niclab.plumbing.lab.hostnet import HostNet
    from niclab.plumbing.lab.hosts import reach, title
    from niclab.plumbing.lab.passthrough import Readers, diagnose_cards
    from niclab.plumbing.lab.sysfs import Sysfs

    lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    if args.host is not None and args.host not in lab.hosts:
        raise UsageError(f"{args.lab}: no host {args.host!r}; hosts are: {', '.join(lab.hosts)}")
    here = [args.host] if args.host else [name for name, host in lab.hosts.items() if host.local]
    sysfs = Sysfs(Path(args.sysfs_root))
    hosts: list[HostReport] = []
    readers: dict[str, Readers] = {}
    unanswered: list[str] = []
    elsewhere: list[str] = []  # hosts whose URI is local to another machine (--host names this one)
    remote: dict[str, HostReport] = {}  # the remote hosts that answered: their kvm check says the probe's verdict
    with ExitStack() as stack:
        for name, entry in lab.hosts.items():
            if name in here:
                report = diagnose_host(sysfs)
                if len(lab.hosts) > 1:
                    report.title = title(name, entry.libvirt)
                hosts.append(report)
                readers[name] = (sysfs, HostNet())
            elif entry.local:
                if any(card.host == name for card in lab.cards):
                    elsewhere.append(name)
            else:
                reached = reach(name, entry.libvirt, stack)
                if reached.readers is None:
                    unanswered.append(reached.why)
                    continue
                hosts.append(reached.report)
                readers[name] = reached.readers
                remote[name] = reached.report
        _kvm_verdicts(lab.hosts, remote, args.probe)
        checked = [card.id for card in lab.cards if card.host in readers]
        image = find_image(LAB_RECIPE)  # not built here: a build takes minutes, a run builds it
        reports = diagnose_cards(lab, checked, readers, DriverTable(image) if image is not None else None)
    print(render(hosts, reports), end="")
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
    return 0 if all(host.ok for host in hosts) and not refused and not unanswered else 1


def _kvm_verdicts(hosts: Mapping[str, Host], reports: dict[str, HostReport], probe: bool) -> None:
    """Put each remote host's KVM verdict for the lab's image in its kvm check: the cached one, or with `probe`
    a new one, booted there through its libvirt."""
    from niclab.plumbing.accel import cached_host_choice
    from niclab.plumbing.backends.libvirt_accel import hosts_accel
    from niclab.plumbing.image import ensure_image
    from niclab.plumbing.image.store import find_image
    from niclab.plumbing.lab.doctor import Check, kvm_verdict
    from niclab.ui.console import ProgressLines

    image = ensure_image(progress=ProgressLines()) if probe else find_image()
    if image is None or not reports:
        return
    if probe:
        probed = hosts_accel({name: hosts[name].libvirt for name in reports}, image, ProgressLines(), refresh=True)
    for name, report in reports.items():
        verdict = probed[name] if probe else cached_host_choice(hosts[name].libvirt, image)
        if isinstance(verdict, str):
            report.checks.append(Check("kvm probe", "warn", f"not probed: {verdict}"))
        elif verdict is not None:
            kvm_verdict(report, verdict.accel, verdict.reason, verdict.probed_at)


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

    if args.lab:
        return _lab_leases(args)
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


def _lab_leases(args: argparse.Namespace) -> int:
    """Each lab host's leases: this machine's state directory for a local host, the host's own over ssh."""
    from niclab.base.errors import NiclabError
    from niclab.model.lab.inventory import load_inventory
    from niclab.plumbing.lab.lease import holder, keys, locked
    from niclab.plumbing.lab.remote import HostShell
    from niclab.plumbing.lab.remote_lease import list_leases

    lab = load_inventory(Path(args.lab), allow_uri_params=args.allow_uri_params)
    problems = 0
    for name, entry in lab.hosts.items():
        lines: list[str] = []
        try:
            if entry.local:
                with _state(args) as state:
                    for key in keys(state):
                        record = holder(state, key)
                        if key.startswith(f"{name}.") and record is not None and (record.alive() or locked(state, key)):
                            lines.append(f"{key}: {record.describe()}")
            else:
                with HostShell(name, entry.libvirt) as shell:
                    for lease in list_leases(shell):
                        who = lease.holder.describe() if lease.holder is not None else "a holder with no record"
                        lines.append(f"{lease.key}: {who}")
        except NiclabError as exc:
            print(f"{exc}: its leases were not listed")
            problems += 1
            continue
        print(f"host {name} ({entry.libvirt}): " + (f"{len(lines)} card(s) leased" if lines else "no card is leased"))
        for line in lines:
            print(f"  {line}")
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
        "interrupt remapping, vfio-pci, memlock and libvirt. Every other host of the lab is checked from here "
        "over ssh (its sysfs, its routes, KVM and libvirt), at the host its libvirt URI names; a host whose ssh "
        "does not answer but whose libvirt does has its cards read through libvirt's node devices, where host "
        "use and the default route are not checked (a warning). Exit 1 if a run would refuse or a host does "
        "not answer.",
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
    doctor.add_argument(
        "--probe",
        action="store_true",
        help="boot the KVM probe on every remote host through its libvirt (the image's kernel, a few seconds) and "
        "cache its verdict, instead of saying the cached one",
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

    leases = actions.add_parser(
        "leases",
        help="which run holds which card",
        description="The leases of this machine's state directory; with --lab, each lab host's: those of a "
        "remote host are read on that host over ssh, where its cards' leases are held. Exit 1 if a host "
        "does not answer.",
    )
    leases.add_argument("--state", metavar="DIR", help="the state directory (default: /var/lib/niclab as root)")
    leases.add_argument("--lab", metavar="LAB_YAML", help="list the leases on every host of this lab")
    add_allow_uri_params(leases)
    leases.set_defaults(func=cmd_leases)
