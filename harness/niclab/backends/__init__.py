"""Backends realize a Topology: `qemu` (emulated NICs) today, `libvirt` (lab cards) later."""

from __future__ import annotations

from niclab.backends.base import Backend, CommandResult, GuestCommandError, Node, Rig
from niclab.errors import UsageError

NAMES = ("qemu",)


def get_backend(name: str, **options) -> Backend:
    if name == "qemu":
        from niclab.backends.qemu import QemuBackend

        return QemuBackend(**options)
    raise UsageError(f"unknown backend {name!r}; choose one of: {', '.join(NAMES)}")


__all__ = ["Backend", "CommandResult", "GuestCommandError", "Node", "Rig", "get_backend", "NAMES"]
