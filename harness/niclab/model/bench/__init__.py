"""Benchmark plug-ins, one module per tool: each module here that defines `PLUGIN` is registered by its name.

The functions below gather what the plug-ins declare (niclab.model.bench.declare) over all of them, so the
kernel check, the report and the CLI name no tool (docs/architecture.md, "Benchmarks are plug-ins").
"""

from __future__ import annotations

import importlib
import pkgutil

from niclab.model.bench.base import BenchContext, Benchmark, BenchOptions, Endpoints, Measurement, MetricInfo
from niclab.model.bench.declare import Dip, Figure, GuestNeeds, KernelModule, Row, Series, Shortfall, Shows


def _discover() -> dict[str, Benchmark]:
    found: dict[str, Benchmark] = {}
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        plugin = getattr(module, "PLUGIN", None)
        if plugin is not None:
            found[plugin.name] = plugin
    return found


REGISTRY: dict[str, Benchmark] = _discover()


def get(name: str) -> Benchmark:
    return REGISTRY[name]


def all_metrics() -> list[MetricInfo]:
    return [metric for plugin in REGISTRY.values() for metric in plugin.metrics()]


def guest_packages() -> list[str]:
    """The Debian packages every benchmark's guests need, in registry order, each once."""
    return list(dict.fromkeys(p for plugin in REGISTRY.values() for p in plugin.guest.packages))


def kernel_modules() -> dict[str, KernelModule]:
    """Every kernel module a benchmark loads in its guests, by name."""
    return {m.name: m for plugin in REGISTRY.values() for m in plugin.guest.modules}


def table_rows() -> dict[str, str]:
    """Metric name -> its row's label in the summary table."""
    return {row.metric: row.label for plugin in REGISTRY.values() for row in plugin.shows.rows}


def figures() -> list[Figure]:
    """Every benchmark's figures, in the order they are shown (their `order`, then the registry's)."""
    return sorted((f for plugin in REGISTRY.values() for f in plugin.shows.figures), key=lambda f: f.order)


def findings() -> list[Dip | Shortfall]:
    return [finding for plugin in REGISTRY.values() for finding in plugin.shows.findings]


def peak_metrics() -> list[str]:
    """Throughput metrics a card's cost per Mbit/s may be taken over."""
    return [name for plugin in REGISTRY.values() for name in plugin.shows.peaks]


__all__ = [
    "Benchmark",
    "BenchContext",
    "BenchOptions",
    "Endpoints",
    "Dip",
    "Figure",
    "GuestNeeds",
    "KernelModule",
    "Measurement",
    "MetricInfo",
    "REGISTRY",
    "Row",
    "Series",
    "Shortfall",
    "Shows",
    "all_metrics",
    "figures",
    "findings",
    "get",
    "guest_packages",
    "kernel_modules",
    "peak_metrics",
    "table_rows",
]
