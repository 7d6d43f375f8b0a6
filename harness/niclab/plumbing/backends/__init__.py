"""Backends realize a Topology. Each module here that defines `PLUGIN` (a BackendPlugin) is one:
`qemu` (emulated NICs, QEMU processes) and `libvirt` (libvirt domains: emulated NICs, or a lab's
real cards passed through). Adding a backend is adding a module.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from niclab.base.errors import UsageError
from niclab.base.node import CommandResult, GuestCommandError, Node
from niclab.plumbing.backends.base import Backend, BackendOptions, BackendPlugin, Rig


@functools.cache
def registry() -> dict[str, BackendPlugin]:
    """Every backend, by name. Found on first use: the backends import modules that import this package."""
    found: dict[str, BackendPlugin] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        plugin = getattr(module, "PLUGIN", None)
        if isinstance(plugin, BackendPlugin):
            found[plugin.name] = plugin
    return found


def default_backend(options: BackendOptions) -> str:
    """libvirt for a lab run (its cards are passed through), else qemu."""
    return "libvirt" if options.lab is not None else "qemu"


def get_backend(name: str | None = None, options: BackendOptions | None = None, **kwargs) -> Backend:
    options = options or BackendOptions()
    name = name or default_backend(options)
    plugin = registry().get(name)
    if plugin is None:
        raise UsageError(
            f"unknown backend {name!r}; choose one of: "
            + ", ".join(f"{p.name} ({p.summary})" for p in registry().values())
        )
    return plugin.create(options, **kwargs)


__all__ = [
    "Backend",
    "BackendOptions",
    "BackendPlugin",
    "CommandResult",
    "GuestCommandError",
    "Node",
    "Rig",
    "default_backend",
    "get_backend",
    "registry",
]
