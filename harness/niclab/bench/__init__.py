"""Benchmark plug-ins, one module per tool; each implements bench.base.Benchmark."""

from __future__ import annotations

from niclab.bench.base import Benchmark, BenchContext, BenchOptions, Endpoints, Measurement
from niclab.bench.iperf3 import Iperf3
from niclab.bench.netperf import Netperf
from niclab.bench.ping import Ping

REGISTRY: dict[str, Benchmark] = {plugin.name: plugin for plugin in (Netperf(), Iperf3(), Ping())}


def get(name: str) -> Benchmark:
    return REGISTRY[name]


__all__ = ["Benchmark", "BenchContext", "BenchOptions", "Endpoints", "Measurement", "REGISTRY", "get"]
