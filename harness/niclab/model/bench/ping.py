"""ping (iputils): round-trip time min/avg/max/mdev and loss over N probes.

The baseline for latency comparisons and for checking that netem delays are
what they claim.
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field

from niclab.base.text import said
from niclab.model.bench.base import BenchContext, BenchmarkError, BenchOptions, Measurement, MetricInfo, quote
from niclab.model.bench.declare import GuestNeeds, Row, Shows

SUMMARY = re.compile(r"([0-9]{1,12}) packets transmitted, ([0-9]{1,12}) received")
RTT = re.compile(
    r"= ([0-9]{1,12}\.[0-9]{1,9})/([0-9]{1,12}\.[0-9]{1,9})/([0-9]{1,12}\.[0-9]{1,9})/([0-9]{1,12}\.[0-9]{1,9}) ms"
)


class PingOptions(BenchOptions):
    count: int = Field(20, ge=1, le=100000, description="probes (-c)")
    interval: float = Field(0.2, ge=0.002, le=60, description="seconds between probes (-i)")
    size: int = Field(56, ge=0, le=65507, description="ICMP payload bytes (-s)")


def parse(text: str) -> list[Measurement]:
    sent = SUMMARY.search(text)
    if sent is None:
        raise BenchmarkError(f"ping printed no summary: {said(text)}")
    transmitted, received = int(sent[1]), int(sent[2])
    if not 0 < transmitted >= received:
        raise BenchmarkError(f"ping reports {received} packets received of {transmitted} sent: {said(sent[0])}")
    found = [
        Measurement(
            "ping",
            None,
            "loss_pct",
            100.0 * (transmitted - received) / transmitted,
            "%",
            {"transmitted": transmitted, "received": received},
        )
    ]
    rtt = RTT.search(text)
    if rtt is not None:
        for i, name in enumerate(("rtt_min_ms", "rtt_avg_ms", "rtt_max_ms", "rtt_mdev_ms"), start=1):
            found.append(Measurement("ping", None, name, float(rtt[i]), "ms", headline=name == "rtt_avg_ms"))
    return found


def argv(options: PingOptions, source: str, target: str) -> list[str]:
    return [
        "ping",
        "-n",
        "-q",
        "-c",
        str(options.count),
        "-i",
        f"{options.interval:g}",
        "-s",
        str(options.size),
        "-W",
        "2",
        "-I",
        source,
        target,
    ]


class Ping:
    name: ClassVar[str] = "ping"
    Options: ClassVar[type[PingOptions]] = PingOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(packages=("iputils-ping",), programs=("/usr/bin/ping",))
    shows: ClassVar[Shows] = Shows(rows=(Row("ping.rtt_avg_ms", "ping RTT"),))

    def metrics(self) -> list[MetricInfo]:
        return [
            MetricInfo("ping.loss_pct", "%", "probes without an answer", "lower"),
            MetricInfo("ping.rtt_min_ms", "ms", "shortest round trip", "lower", pace="time"),
            MetricInfo("ping.rtt_avg_ms", "ms", "mean round trip", "lower", pace="time"),
            MetricInfo("ping.rtt_max_ms", "ms", "longest round trip", "lower"),
            MetricInfo("ping.rtt_mdev_ms", "ms", "mean deviation of the round trip", "lower"),
        ]

    def describe(self, options: PingOptions) -> str:
        return "ping"

    def estimate_seconds(self, options: PingOptions) -> float:
        return options.count * options.interval + 2

    def run(self, ctx: BenchContext, options: PingOptions) -> list[Measurement]:
        ends = ctx.ends
        command = argv(options, ends.client_address, ends.server_address)
        result = ends.client.run(quote(command), timeout=options.count * options.interval + 60, check=False)
        path = ctx.save_raw("ping", f"$ {quote(command)}\n# exit {result.returncode}\n{result.stdout}{result.stderr}")
        if result.returncode not in (0, 1):  # 1: some probes got no answer, still a result
            raise BenchmarkError(
                f"ping exited {result.returncode}: {said(result.stderr or result.stdout)} (raw output: {path})"
            )
        return parse(result.stdout)


PLUGIN = Ping()
