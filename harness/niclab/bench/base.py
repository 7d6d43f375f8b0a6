"""The benchmark protocol: options, the two ends it runs between, measurements.

A benchmark starts its server on one node and its client on the other
through `Node` handles, parses what they print, and stops the server. It
knows nothing of QEMU or libvirt.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from niclab.backends.base import GuestCommandError, Node


class BenchOptions(BaseModel):
    """Options every benchmark takes; each benchmark extends this model."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: str | None = Field(None, alias="from", description="client node (default: the link's first end)")
    to: str | None = Field(None, description="server node (default: the link's second end)")
    link: int = Field(0, ge=0, description="which link of the scenario to measure across")
    repeat: int | None = Field(None, ge=1, le=100, description="runs of this benchmark (default: the scenario's)")


@dataclass(frozen=True)
class Endpoints:
    client: Node
    server: Node
    client_address: str
    server_address: str
    link: int


@dataclass(frozen=True)
class MetricInfo:
    """A metric a benchmark can report, for `niclab metrics`, expectations and comparisons."""

    name: str         # the dotted name: netperf.TCP_STREAM.throughput_mbps, netpipe.latency_us
    unit: str         # Mbit/s, us, ms, %, /s, ...
    description: str
    better: str | None = None  # "higher", "lower", or None when neither is better


@dataclass(frozen=True)
class Measurement:
    benchmark: str
    test: str | None
    metric: str
    value: float
    unit: str
    extra: dict = field(default_factory=dict)
    headline: bool = True  # shown in the summary table (all go to results.jsonl)
    warning: str | None = None  # the tool doubts this figure (e.g. its confidence target was missed)

    @property
    def label(self) -> str:
        return f"{self.benchmark} {self.test}" if self.test else self.benchmark

    @property
    def name(self) -> str:
        """The dotted name expectations use: netperf.TCP_STREAM.throughput_mbps."""
        return ".".join(p for p in (self.benchmark, self.test, self.metric) if p)


@dataclass
class BenchContext:
    ends: Endpoints
    save_raw: Callable[[str, str], Path]  # (file name, text) -> where it was written
    progress: Callable[[str], None]


class Benchmark(Protocol):
    """A benchmark plug-in: a module in niclab/bench/ that defines PLUGIN = <an instance>."""

    name: ClassVar[str]
    Options: ClassVar[type[BenchOptions]]

    def metrics(self) -> list[MetricInfo]:
        """Every metric run() can report."""
        ...

    def describe(self, options: BenchOptions) -> str:
        """A short label for progress lines and raw file names (netperf TCP_STREAM)."""
        ...

    # Optional: def metric_prefix(self, options) -> str, what the names of the metrics these options
    # produce start with ("netperf.TCP_RR."); without it, "<name>." is assumed.

    def estimate_seconds(self, options: BenchOptions) -> float: ...

    def run(self, ctx: BenchContext, options: BenchOptions) -> list[Measurement]: ...


class BenchmarkError(GuestCommandError):
    """A benchmark ran but did not produce a usable result."""


def poll_script(body: str, timeout: float, interval: float, give_up: str = "exit 1") -> str:
    """A guest shell loop that runs `body` every `interval` s until the body exits, or `timeout` s pass."""
    return (f"end=$(( $(date +%s) + {int(timeout)} )); while [ $(date +%s) -le $end ]; do {body}; "
            f"sleep {interval}; done; {give_up}")


def wait_listening(node: Node, port: int, proto: str = "tcp", timeout: float = 20.0) -> None:
    """Return once something listens on `port` in the guest (read from /proc/net)."""
    state = "0A" if proto == "tcp" else "07"
    script = poll_script(f"awk -v p=:{port:04X} '$2 ~ p\"$\" && $4 == \"{state}\" {{f=1}} END {{exit !f}}' "
                         f"/proc/net/{proto} /proc/net/{proto}6 2>/dev/null && exit 0", timeout, 0.05)
    result = node.run(script, timeout=timeout + 10, check=False)
    if not result.ok:
        raise BenchmarkError(f"{node.name}: nothing listens on {proto} port {port} after {timeout:.0f} s")


def free_port(node: Node, port: int, proto: str = "tcp", timeout: float = 10.0) -> list[str]:
    """End whatever still listens on `port` in the guest (a server a killed run left), and wait until it is free.

    Returns what was ended, for the raw output. A benchmark calls this before
    starting its server, so one hung run cannot make the next fail to bind.
    """
    flag = "t" if proto == "tcp" else "u"
    script = "ended=''; " + poll_script(
        f"pids=$(netstat -ln{flag}p 2>/dev/null | awk '$4 ~ /:{port}$/ {{split($NF, p, \"/\"); print p[1]}}' | sort -u); "
        f"[ -z \"$pids\" ] && {{ echo \"$ended\"; exit 0; }}; "
        f"for p in $pids; do [ \"$p\" -gt 1 ] 2>/dev/null && ended=\"$ended $p:$(cat /proc/$p/comm)\" && kill -9 $p; done",
        timeout, 0.1, give_up='echo "$ended"; exit 1')
    result = node.run(script, timeout=timeout + 10, check=False)
    if not result.ok:
        raise BenchmarkError(f"{node.name}: {proto} port {port} is still taken after {timeout:.0f} s")
    return result.stdout.split()


def quote(argv: list[str]) -> str:
    return shlex.join(argv)
