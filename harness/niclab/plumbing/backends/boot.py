"""What every backend that boots the guest image shares: its boot errors, its timeouts, the KVM->TCG fallback.

`boot_falling_back` stops guests that do not answer under KVM in time, marks KVM unusable and boots them under
TCG, for QEMU processes and libvirt domains alike; `boot_falling_back_hosts` does so only on the hosts whose
KVM guests did not answer (docs/architecture.md, "KVM is probed with the real kernel").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Progress
from niclab.plumbing.accel import mark_kvm_unusable, mark_kvm_unusable_on
from niclab.plumbing.image import Image
from niclab.plumbing.libvirt_conn import local_uri

DEFAULT_BOOT_TIMEOUT_S = 240.0  # TCG on a busy 2-core host; $NICLAB_BOOT_TIMEOUT overrides

Booted = TypeVar("Booted")


class BootError(NiclabError):
    """A guest never came up."""

    def __init__(self, message: str, summary: str = "", nodes: tuple[str, ...] = ()):
        super().__init__(message)
        self.summary = summary or message.splitlines()[0]
        self.nodes = nodes  # the nodes that did not come up, when known


def falls_back(accel: str, forced: bool) -> bool:
    """Whether a boot under `accel` that failed is tried again under TCG: only KVM's, and not one the caller
    forced on the backend (a test that asks for KVM wants to see it fail)."""
    return accel == "kvm" and not forced


def fallback_warning(why: str, undone: str, where: str = "") -> str:
    """The run's warning for a KVM boot that failed (`why`) and what was done with its guests (`undone`);
    `where` names the hosts whose KVM failed when they are not just this one."""
    if where:
        return (
            f"KVM did not work on {where} ({why}); {undone} there under TCG. "
            "KVM is marked unusable for those hosts and the image; `niclab accel --lab LAB_YAML --probe` tests it "
            "again"
        )
    return (
        f"KVM did not work here ({why}); {undone} under TCG. "
        "KVM is marked unusable for this host and image; `niclab accel --probe` tests it again"
    )


def boot_falling_back(
    accel: str,
    boot: Callable[[str], Booted],
    undo: Callable[[], None],
    image: Image,
    progress: Progress,
    undone: str,
    forced: bool = False,
    mark: Callable[[Image, str], object] | None = None,
) -> tuple[Booted, str | None]:
    """Boot under `accel` ("kvm" or "tcg"); a KVM boot that raises BootError is undone (every KVM guest
    stopped before a TCG one starts), KVM is marked unusable for `image`, and the boot is tried once more
    under TCG (`mark`: mark_kvm_unusable). Returns what `boot` returned and the fallback's warning (None if
    there was none)."""
    try:
        return boot(accel), None
    except BootError as exc:
        if not falls_back(accel, forced):
            raise
        undo()
        (mark or mark_kvm_unusable)(image, exc.summary)
        warning = fallback_warning(exc.summary, undone)
        progress(f"warning: {warning}")
        return boot("tcg"), warning


def boot_falling_back_hosts(
    accels: dict[str, str],
    boot: Callable[[dict[str, str]], Booted],
    undo: Callable[[], None],
    host_of: Callable[[str], str],
    image: Image,
    progress: Progress,
    undone: str,
    forced: bool = False,
    mark: Callable[[str, Image, str], object] | None = None,
    answers: Callable[[str], bool] = lambda host: True,
) -> tuple[Booted, dict[str, str], str | None]:
    """Boot with each host under its own accelerator (`accels`: host -> "kvm" or "tcg"). A boot that raises
    BootError while some of its failed nodes ran under KVM is undone (every guest stopped), the hosts of those
    nodes (`host_of`: node -> host URI; all KVM hosts when the error names no node) are marked
    (`mark`: mark_kvm_unusable_host) and put on TCG, and the boot is tried once more; the other hosts keep
    their accelerator. A host that no longer `answers` (its libvirt connection closed: it went away) is no
    reason to doubt its KVM: it is neither marked nor booted again, and the error stands. Returns what `boot`
    returned, the accelerators it ran under, and the fallback's warning (None if there was none)."""
    try:
        return boot(accels), accels, None
    except BootError as exc:
        on_kvm = {host for host, accel in accels.items() if accel == "kvm"}
        failed = {host_of(node) for node in exc.nodes} & on_kvm if exc.nodes else on_kvm
        if forced or not failed or not all(answers(host) for host in failed):
            raise
        undo()
        for host in sorted(failed):
            (mark or mark_kvm_unusable_host)(host, image, exc.summary)
        where = ", ".join(sorted(failed)) if len(accels) > 1 else ""
        warning = fallback_warning(exc.summary, undone, where)
        progress(f"warning: {warning}")
        after = {host: "tcg" if host in failed else accel for host, accel in accels.items()}
        return boot(after), after, warning


def mark_kvm_unusable_host(uri: str, image: Image, why: str) -> object:
    """Record that KVM does not run `image` on the libvirt host at `uri` (this machine's cache for a local URI)."""
    return mark_kvm_unusable(image, why) if local_uri(uri) else mark_kvm_unusable_on(uri, image, why)


def env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"{name}={text!r}: give a number of seconds above 0")
    return value


CONSOLE_BYTES = 256 * 1024  # of a guest's console log read back (a guest can write without end)


def console_end(path: Path) -> str:
    """The end of a guest's console log (its last CONSOLE_BYTES), "" if there is none."""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            size = log.tell()
            log.seek(max(0, size - CONSOLE_BYTES))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(nothing written)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"
