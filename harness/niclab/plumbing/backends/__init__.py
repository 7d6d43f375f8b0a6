"""Backends realize a Topology. Each module here that defines `PLUGIN` (a BackendPlugin) is one:
`qemu` (emulated NICs, QEMU processes) and `libvirt` (libvirt domains: emulated NICs, or a lab's
real cards passed through). Adding a backend is adding a module: its plug-in declares its command-line
options, its leftovers for `niclab down` and whether its guests' kernels are checked, and the CLI and
the pytest plugin ask this registry for them.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any

from niclab.base.errors import UsageError
from niclab.base.node import CommandResult, GuestCommandError, Node
from niclab.plumbing.backends.base import (
    Backend,
    BackendOption,
    BackendOptions,
    BackendPlugin,
    DownRequest,
    Leftovers,
    Rig,
    Say,
    Spreading,
)


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


def defaults() -> tuple[str, str]:
    """The backend of a run without a lab, and of a run with one (qemu, and libvirt: it passes cards through)."""
    plugins = list(registry().values())
    plain = next((p.name for p in plugins if p.default), plugins[0].name)
    return plain, next((p.name for p in plugins if p.lab_default), plain)


def default_backend(options: BackendOptions) -> str:
    return defaults()[1 if options.lab is not None else 0]


def declared_options(starts_nodes: bool = True) -> list[BackendOption]:
    """Every backend's command-line options, each name once (the first backend to declare it gives its help);
    without `starts_nodes`, only those that matter where cells are checked, not run."""
    found: dict[str, BackendOption] = {}
    for plugin in registry().values():
        for option in plugin.options:
            if starts_nodes or not option.starts_nodes:
                found.setdefault(option.name, option)
    return list(found.values())


def down_options() -> list[BackendOption]:
    """The options of `niclab down` that the backends' leftovers declare, each name once."""
    found: dict[str, BackendOption] = {}
    for plugin in registry().values():
        for option in plugin.leftovers.options if plugin.leftovers else ():
            found.setdefault(option.name, option)
    return list(found.values())


def leftovers() -> list[Leftovers]:
    """What killed runs of each backend may leave, in the order `niclab down` ends them."""
    found = [plugin.leftovers for plugin in registry().values() if plugin.leftovers is not None]
    return sorted(found, key=lambda kind: kind.order)


def kernel_check(backend: Backend) -> bool:
    """Whether the kernels the backend's guests boot are checked before a run, as its plug-in declares; a
    backend no plug-in registers (a test's) is checked."""
    plugin = registry().get(backend.name)
    return plugin.kernel_check if plugin is not None else True


def get_backend(name: str | None = None, options: BackendOptions | None = None, **kwargs: Any) -> Backend:
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
    "BackendOption",
    "BackendOptions",
    "BackendPlugin",
    "CommandResult",
    "DownRequest",
    "GuestCommandError",
    "Leftovers",
    "Node",
    "Rig",
    "Say",
    "Spreading",
    "declared_options",
    "default_backend",
    "defaults",
    "down_options",
    "get_backend",
    "kernel_check",
    "leftovers",
    "registry",
]
