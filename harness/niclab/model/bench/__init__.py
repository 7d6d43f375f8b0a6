"""Benchmark plug-ins, one module per tool.

Each module in this package that defines `PLUGIN` (an object implementing
niclab.model.bench.base.Benchmark) is registered under `PLUGIN.name`: adding a
benchmark is adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil

from niclab.model.bench.base import BenchContext, Benchmark, BenchOptions, Endpoints, Measurement, MetricInfo


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


__all__ = [
    "Benchmark",
    "BenchContext",
    "BenchOptions",
    "Endpoints",
    "Measurement",
    "MetricInfo",
    "REGISTRY",
    "all_metrics",
    "get",
]
