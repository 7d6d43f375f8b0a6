"""Reaching another lab host for the doctor and a run: its sysfs and routes over ssh, else its libvirt only.

`reach(name, uri, stack)` reads one snapshot of the host's sysfs and runs `ip -j` over one connection; where
only libvirt answers, its node devices (routes unknown); where neither does, or the output is refused, no
readers and one line saying why (docs/lab.md, "Remote hosts").
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

from niclab.base.errors import NiclabError
from niclab.plumbing.lab.doctor import Check, HostReport, diagnose_remote_host
from niclab.plumbing.lab.hostnet import HostNet, HostNetError, NetReader
from niclab.plumbing.lab.nodedev import Connect, remote_readers
from niclab.plumbing.lab.remote import HostShell
from niclab.plumbing.lab.snapshot import HostSnapshot, SnapshotError, read_snapshot
from niclab.plumbing.lab.sysfs import PciReader


@dataclass
class Reached:
    """What the doctor learnt of one remote host: its block of checks, and its cards' readers (None: its
    cards cannot be checked, `why` says why)."""

    name: str
    uri: str
    report: HostReport
    readers: tuple[PciReader, NetReader] | None = None
    why: str = ""
    shell: HostShell | None = None
    snapshot: HostSnapshot | None = None


def ssh_readers(shell: HostShell) -> tuple[HostSnapshot, HostNet]:
    """The card checks' readers of the host `shell` reaches: one snapshot of its sysfs, and its interfaces and
    routes (read now: SnapshotError or HostNetError if the host's answers are refused)."""
    snapshot = read_snapshot(shell)
    net = HostNet(shell.runner, shell.name)
    net.read()
    return snapshot, net


def title(name: str, uri: str) -> str:
    return f"host {name} ({uri})"


def reach(name: str, uri: str, stack: ExitStack, connect: Connect | None = None) -> Reached:
    """Read lab host `name` at `uri`: over ssh (the shell stays open in `stack`), else through libvirt."""
    shell = stack.enter_context(HostShell(name, uri))
    heading = title(name, uri)
    try:
        snapshot, net = ssh_readers(shell)
    except (SnapshotError, HostNetError) as exc:  # it answered, with what niclab refuses to read
        return Reached(name, uri, HostReport([], heading), why=f"{exc}: its cards were not checked", shell=shell)
    except NiclabError as exc:
        unanswered = str(exc)
    else:
        report = diagnose_remote_host(heading, snapshot)
        return Reached(name, uri, report, (snapshot, net), shell=shell, snapshot=snapshot)
    try:
        node_devices, unknown = remote_readers(name, uri, connect)
    except NiclabError:
        return Reached(name, uri, HostReport([], heading), why=f"{unanswered}: its cards were not checked")
    checks = [
        Check("ssh", "fail", unanswered),
        Check("libvirt", "warn", "answers: its cards are read through its node devices, without routes"),
    ]
    return Reached(name, uri, HostReport(checks, heading), (node_devices, unknown))
