"""A lab run's hold on its cards: leased, checked, bound to vfio-pci and given back, whatever happens.

Per card: a lease (on its own host: remote_lease), the doctor's card checks on its host, then the move to
vfio-pci, through the journal (vfio) as root on this machine, by libvirt's managed hostdev otherwise (no root,
a read-only /sys, another host). A host whose ssh does not answer is refused by name (docs/lab.md,
"Running"; docs/architecture.md, "Lab mode").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.base.paths import state_dir
from niclab.model import nics
from niclab.model.lab.inventory import Inventory
from niclab.model.lab.match import Placement
from niclab.plumbing.lab.doctor import CardRef, CardReport, diagnose
from niclab.plumbing.lab.drivers import DriverTable
from niclab.plumbing.lab.hostnet import HostNet, NetReader
from niclab.plumbing.lab.hosts import ssh_readers
from niclab.plumbing.lab.lease import leases
from niclab.plumbing.lab.nodedev import Connect
from niclab.plumbing.lab.remote import HostShell
from niclab.plumbing.lab.remote_lease import remote_leases
from niclab.plumbing.lab.statedir import StateDir
from niclab.plumbing.lab.sysfs import PciReader, Sysfs
from niclab.plumbing.lab.vfio import Journal, Sleep, passed_through


def lease_key(lab: Inventory, card_id: str) -> str:
    """What a lease is named by: the card's host and PCI address (two hosts may have the same address)."""
    card = lab.card(card_id)
    return f"{card.host}.{card.pci}"


def card_refs(lab: Inventory, card_ids: list[str]) -> list[CardRef]:
    refs = []
    for card_id in card_ids:
        card = lab.card(card_id)
        found = nics.lookup(card.model)
        expected = card.pci_id or (found.pci_id if found else None)
        refs.append(CardRef(card.id, card.pci, card.model, expected, lab.allowed_class(card_id), card.host))
    return refs


Readers = tuple[PciReader, NetReader]


def diagnose_cards(
    lab: Inventory, card_ids: list[str], readers: Mapping[str, Readers], drivers: DriverTable | None = None
) -> list[CardReport]:
    """The doctor's card checks on each card, read through its host's readers (`readers[host]`); with the lab
    image's `drivers`, the driver each card gets in the guest too."""
    return [report for c in card_ids for report in diagnose(*readers[lab.card(c).host], card_refs(lab, [c]), drivers)]


@contextmanager
def hold_cards(
    lab: Inventory,
    placement: Placement,
    run: str,
    progress: Progress,
    *,
    wait: bool = False,
    force: bool = False,
    sysfs: Sysfs | None = None,
    state: Path | None = None,
    sleep: Sleep = time.sleep,
    connect: Connect | None = None,
) -> Iterator[None]:
    """Lease the placement's cards, each on its host (those on other hosts there, over ssh), check each on its
    host (another host's through one snapshot of its sysfs and its routes, read over ssh) and, as root, hold
    those on this machine on vfio-pci for the block (each with its inventory model's allow_class). The state
    directory is opened and checked first. (`connect` is kept for callers that pass one: libvirt's node
    devices are the doctor's fallback, not a run's.)"""
    del connect
    sysfs = sysfs or Sysfs()
    cards = list(dict.fromkeys(card.id for card in placement.cards.values()))
    local = [c for c in cards if lab.hosts[lab.card(c).host].local]
    with ExitStack() as stack:
        checked = stack.enter_context(StateDir(state or state_dir()))
        keys = {lease_key(lab, c): c for c in cards}
        here = [key for key, c in keys.items() if c in local]
        stack.enter_context(leases(checked, here, run, wait=wait, progress=progress, cards=keys))
        shells: dict[str, HostShell] = {}
        for name in dict.fromkeys(lab.card(c).host for c in cards if c not in local):
            progress(f"leasing and checking the cards on {name} over ssh ({lab.hosts[name].libvirt})")
            shells[name] = stack.enter_context(HostShell(name, lab.hosts[name].libvirt))
        there = [key for key, c in keys.items() if c not in local]
        stack.enter_context(remote_leases(shells, there, run, wait=wait, progress=progress, cards=keys))
        hostnet = HostNet()
        readers: dict[str, Readers] = {}
        for name in dict.fromkeys(lab.card(c).host for c in cards):
            if name in shells:
                readers[name] = ssh_readers(shells[name])
            else:
                readers[name] = (sysfs, hostnet)
        reports = diagnose_cards(lab, cards, readers)
        for report in reports:
            for warned in (c for c in report.checks if c.status == "warn"):
                progress(f"card {report.card.id}: {warned.name} {warned.detail}")
        refusals = [why for report in reports if (why := report.refusal(force)) is not None]
        if refusals:
            raise NiclabError(
                "the lab's cards cannot be passed through: " + "; ".join(refusals) + " (niclab lab doctor says more)"
            )
        if local and os.geteuid() == 0 and sysfs.writable():
            journal = Journal(checked)
            allowed = {lab.card(c).pci: lab.allowed_class(c) for c in local}
            progress(f"binding {', '.join(local)} to vfio-pci (journal in {journal.dir.path})")
            stack.enter_context(passed_through(sysfs, journal, allowed, run, sleep=sleep))
        elif local:
            why = "not root" if os.geteuid() != 0 else f"{sysfs.sys} takes no writes (read-only, as in a container)"
            progress(f"{why}: libvirt's managed hostdev binds the cards to vfio-pci and back")
        yield
