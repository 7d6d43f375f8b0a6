"""Backends realize a Topology: `qemu` (emulated NICs) today, `libvirt` (lab cards) later."""

from __future__ import annotations

from niclab.backends.base import Backend, CommandResult, GuestCommandError, Node, Rig
from niclab.errors import UsageError

NAMES = ("qemu",)
PLANNED = {"libvirt": "libvirt domains with real cards passed through (VFIO), for lab runs"}


def get_backend(name: str, **options) -> Backend:
    if name == "qemu":
        from niclab.backends.qemu import QemuBackend

        return QemuBackend(**options)
    if name in PLANNED:
        raise UsageError(f"backend {name!r} ({PLANNED[name]}) is not built yet; today only 'qemu' runs scenarios")
    raise UsageError(f"unknown backend {name!r}; choose one of: {', '.join(NAMES)}")


__all__ = ["Backend", "CommandResult", "GuestCommandError", "Node", "Rig", "get_backend", "NAMES"]
