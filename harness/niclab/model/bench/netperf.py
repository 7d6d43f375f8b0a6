"""netperf: bulk transfer (TCP_STREAM, TCP_MAERTS, UDP_STREAM) and request/response (TCP_RR, UDP_RR, TCP_CRR).

Through the omni `-k` output (parsed in netperf_parse); its command lines and the confidence iteration's
limits: docs/benchmarks.md, "netperf 2.7.0".
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from niclab.base.node import GuestCommandError
from niclab.base.text import said
from niclab.model.bench.base import BenchContext, BenchmarkError, BenchOptions, Measurement, MetricInfo, quote, served
from niclab.model.bench.declare import Figure, GuestNeeds, Row, Series, Shortfall, Shows
from niclab.model.bench.netperf_flows import combined, flows_command, slowest_metric, split_flows
from niclab.model.bench.netperf_parse import (
    LATENCIES,
    REQUEST_RESPONSE,
    SELECTORS,
    STREAMS,
    measurements,
    parse_keyvals,
)

PORT = 12865
TYPICAL_LATENCIES = frozenset({"latency_mean_us", "latency_p50_us", "latency_min_us"})  # not the tails: p90, p99, max

__all__ = ["Netperf", "NetperfHung", "NetperfOptions", "client_argv", "measurements", "parse_keyvals", "server_argv"]


class NetperfHung(BenchmarkError):
    """netperf did not end long after its test should have."""


C_INT = 2**31 - 1  # netperf reads sizes into C ints
Iterations = Annotated[int, Field(ge=3, le=30)]  # netperf clamps -i to 3..30


class Confidence(BaseModel):
    model_config = ConfigDict(extra="forbid")

    level: Literal[95, 99] = Field(99, description="confidence level in %")
    width: float = Field(5.0, gt=0, le=100, description="the interval's full width, in % of the mean (5 or 5%)")

    @field_validator("width", mode="before")
    @classmethod
    def _per_cent(cls, value: Any) -> Any:
        """`5%` as max_cv takes it, or a number."""
        if isinstance(value, str) and value.strip().endswith("%"):
            return value.strip()[:-1].strip()
        return value


class NetperfOptions(BenchOptions):
    test: Literal["TCP_STREAM", "TCP_MAERTS", "UDP_STREAM", "TCP_RR", "UDP_RR", "TCP_CRR"] = Field(
        "TCP_STREAM", description="the test (-t)"
    )
    seconds: float = Field(10.0, gt=0, le=3600, description="test length (-l)")
    message_size: int | None = Field(None, ge=1, le=65507, description="send size in bytes (-- -m), streams")
    local_buffer: int | None = Field(None, ge=1, le=C_INT, description="local socket buffer bytes (-- -s)")
    remote_buffer: int | None = Field(None, ge=1, le=C_INT, description="remote socket buffer bytes (-- -S)")
    request_size: int | None = Field(None, ge=1, le=C_INT, description="request bytes (-- -r), request/response tests")
    response_size: int | None = Field(
        None, ge=1, le=C_INT, description="response bytes (-- -r), request/response tests"
    )
    cpu: bool = Field(False, description="measure CPU utilization and service demand on both ends (-c -C)")
    confidence: Confidence | None = Field(
        None, description='iterate until the mean is this sure (-I): {level: 99, width: 5%}, or "99,5" as -I takes it'
    )
    iterations: tuple[Iterations, Iterations] | None = Field(
        None, description='[min, max] iterations for confidence (-i), or "max,min" in -i\'s own order: "10,2"'
    )
    flows: int = Field(
        1, ge=1, le=64, description="netperf instances at once, each its own connection: the flows' figures combined"
    )

    @field_validator("confidence", mode="before")
    @classmethod
    def _as_netperf_says_it(cls, value: Any) -> Any:
        """`"99,5"`: netperf's -I LEVEL,WIDTH."""
        if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*,\s*[\d.]+%?\s*", value):
            level, width = (part.strip() for part in value.split(","))
            return {"level": int(level), "width": width}
        return value

    @field_validator("iterations", mode="before")
    @classmethod
    def _min_then_max(cls, value: Any) -> Any:
        """[min, max], each 3..30: one message for any pair out of that (the per-element bounds say less).
        A string is netperf's own `-i max,min` ("10,2"): a minimum under 3 is raised to 3, as netperf does."""
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d{1,3})\s*,\s*(\d{1,3})\s*", value)
            if not match:
                raise ValueError(f'{value!r} is not netperf\'s -i "max,min", e.g. "10,2"; or write [min, max]')
            high, low = int(match[1]), int(match[2])
            value = [max(low, 3), high]
        if isinstance(value, list | tuple) and len(value) == 2 and all(type(n) is int for n in value):
            low, high = value
            if low > high:
                raise ValueError(
                    f"{list(value)} is [min, max]: for netperf's -i {low},{high} (max,min) write "
                    f'"{low},{high}" or [{max(high, 3)}, {low}]'
                )
            if not 3 <= low <= high <= 30:
                raise ValueError(
                    f"{list(value)} must be [min, max] with 3 <= min <= max <= 30 (netperf clamps to that range)"
                )
        return value

    @model_validator(mode="after")
    def _fits_the_test(self) -> NetperfOptions:
        if self.test in STREAMS and (self.request_size or self.response_size):
            raise ValueError(f"request_size and response_size are for request/response tests, not {self.test}")
        if self.test in REQUEST_RESPONSE and self.message_size:
            raise ValueError(f"message_size is for stream tests, not {self.test}; use request_size")
        if self.flows > 1 and self.cpu:
            raise ValueError("cpu: true with flows: each netperf would measure the whole node's CPU; use flows: 1")
        if self.flows > 1 and (self.confidence is not None or self.iterations is not None):
            raise ValueError("confidence with flows: each netperf would iterate on its own; use flows: 1")
        if self.iterations is not None:
            if self.confidence is None:
                self.confidence = Confidence()
        elif self.confidence is not None:
            self.iterations = (3, 10)
        return self


def client_argv(options: NetperfOptions, server_address: str) -> list[str]:
    argv = ["netperf", "-H", server_address, "-p", str(PORT), "-t", options.test, "-l", f"{options.seconds:g}"]
    if options.cpu:
        argv += ["-c", "-C"]
    if options.confidence is not None:
        assert options.iterations is not None, "NetperfOptions sets iterations along with confidence"
        low, high = options.iterations
        argv += ["-i", f"{high},{low}", "-I", f"{options.confidence.level},{options.confidence.width:g}"]
    argv += ["-P", "0", "--"]
    if options.message_size:
        argv += ["-m", str(options.message_size)]
    if options.local_buffer:
        argv += ["-s", str(options.local_buffer)]
    if options.remote_buffer:
        argv += ["-S", str(options.remote_buffer)]
    if options.request_size or options.response_size:
        argv += ["-r", f"{options.request_size or 1},{options.response_size or 1}"]
    return argv + ["-k", ",".join(SELECTORS[options.test])]


def server_argv(server_address: str) -> list[str]:
    family = "inet6" if ":" in server_address else "inet"
    return ["netserver", "-D", "-p", str(PORT), "-L", f"{server_address},{family}"]


def _declared() -> list[MetricInfo]:
    out = []
    for test in ("TCP_STREAM", "TCP_MAERTS"):
        out += [
            MetricInfo(f"netperf.{test}.throughput_mbps", "Mbit/s", "TCP bulk transfer rate", "higher", pace="rate"),
            MetricInfo(f"netperf.{test}.retransmits", "segments", "TCP segments the sender sent again", "lower"),
        ]
    out += [
        MetricInfo("netperf.UDP_STREAM.send_throughput_mbps", "Mbit/s", "what the sender sent", "higher", pace="rate"),
        MetricInfo("netperf.UDP_STREAM.recv_throughput_mbps", "Mbit/s", "what the receiver got", "higher", pace="rate"),
        MetricInfo("netperf.UDP_STREAM.loss_pct", "%", "datagrams sent but not received", "lower"),
    ]
    for test in REQUEST_RESPONSE:
        out.append(
            MetricInfo(f"netperf.{test}.transaction_rate", "/s", "transactions per second", "higher", pace="rate")
        )
        out += [
            MetricInfo(
                f"netperf.{test}.{metric}",
                "us",
                f"transaction latency ({key.split('_')[0].lower()})",
                "lower",
                pace="time" if metric in TYPICAL_LATENCIES else None,
            )
            for key, metric in LATENCIES
        ]
    for test in (*STREAMS, *REQUEST_RESPONSE):
        slowest, unit = slowest_metric(test)
        out += [
            MetricInfo(f"netperf.{test}.{slowest}", unit, "the slowest flow's rate (flows > 1)", "higher", "rate"),
            MetricInfo(
                f"netperf.{test}.fairness",
                "",
                "Jain's fairness index of the flows' rates, 1/n to 1 (flows > 1)",
                "higher",
            ),
        ]
    for test in (*STREAMS, *REQUEST_RESPONSE):
        suffix, unit = ("tr", "us/Tr") if test in REQUEST_RESPONSE else ("kb", "us/KB")
        for side in ("local", "remote"):
            out += [
                MetricInfo(f"netperf.{test}.{side}_cpu_pct", "%", f"{side} CPU utilization (cpu: true)", "lower"),
                MetricInfo(
                    f"netperf.{test}.{side}_sd_us_per_{suffix}",
                    unit,
                    f"{side} service demand: CPU time per unit of work (cpu: true)",
                    "lower",
                ),
            ]
    return out


class Netperf:
    name: ClassVar[str] = "netperf"
    Options: ClassVar[type[NetperfOptions]] = NetperfOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(packages=("netperf",), programs=("/usr/bin/netperf", "/usr/bin/netserver"))
    shows: ClassVar[Shows] = Shows(
        rows=(
            Row("netperf.TCP_STREAM.throughput_mbps", "tcp"),
            Row("netperf.TCP_MAERTS.throughput_mbps", "tcp (reverse)"),
            Row("netperf.UDP_STREAM.send_throughput_mbps", "udp send"),
            Row("netperf.UDP_STREAM.recv_throughput_mbps", "udp receive"),
            Row("netperf.UDP_STREAM.loss_pct", "udp loss"),
            Row("netperf.TCP_STREAM.local_cpu_pct", "tcp cpu (sender)"),
            Row("netperf.TCP_STREAM.remote_cpu_pct", "tcp cpu (receiver)"),
            Row("netperf.UDP_STREAM.local_cpu_pct", "udp cpu (sender)"),
            Row("netperf.UDP_STREAM.remote_cpu_pct", "udp cpu (receiver)"),
            Row("netperf.TCP_RR.transaction_rate", "rr"),
            Row("netperf.TCP_RR.latency_mean_us", "rr latency"),
        ),
        figures=(
            Figure("throughput", (Series("netperf.TCP_STREAM.throughput_mbps", "TCP_STREAM"),)),
            Figure(
                "bars",
                (
                    Series("netperf.UDP_STREAM.send_throughput_mbps", "sent"),
                    Series("netperf.UDP_STREAM.recv_throughput_mbps", "received"),
                ),
                section="throughput, latency and CPU",
                title="UDP: sent against received",
                caption="netperf UDP_STREAM; the gap is what the receiver lost.",
                unit="Mbit/s",
                order=21,
                link=0,
            ),
            Figure("latency", (Series("netperf.TCP_RR.latency_mean_us", "TCP_RR mean"),)),
            *(
                figure
                for test, unit, suffix in (
                    ("TCP_STREAM", "µs per KB", "kb"),
                    ("UDP_STREAM", "µs per KB", "kb"),
                    ("TCP_RR", "µs per transaction", "tr"),
                )
                for figure in (
                    Figure(
                        "bars",
                        (
                            Series(f"netperf.{test}.local_cpu_pct", "local"),
                            Series(f"netperf.{test}.remote_cpu_pct", "remote"),
                        ),
                        section="throughput, latency and CPU",
                        title=f"CPU utilization, netperf {test}",
                        caption="netperf -c -C.",
                        unit="%",
                        order=23,
                    ),
                    Figure(
                        "bars",
                        (
                            Series(f"netperf.{test}.local_sd_us_per_{suffix}", "local"),
                            Series(f"netperf.{test}.remote_sd_us_per_{suffix}", "remote"),
                        ),
                        section="throughput, latency and CPU",
                        title=f"Service demand, netperf {test}",
                        caption="CPU time per unit of work.",
                        unit=unit,
                        order=23,
                    ),
                )
            ),
            Figure("against-mtu", (Series("netperf.TCP_STREAM.throughput_mbps", "TCP_STREAM"),)),
            Figure(
                "against-ports",
                (Series("netperf.TCP_STREAM.throughput_mbps", "TCP_STREAM"),),
                section="bonding",
                title="Bonding: throughput against ports",
                caption="netperf TCP_STREAM over one card and over the bond, against the ideal of N times the single "
                "card.",
                unit="TCP throughput (Mbit/s)",
                order=40,
            ),
        ),
        findings=(
            Shortfall(
                "udp-receiver",
                whole="netperf.UDP_STREAM.send_throughput_mbps",
                part="netperf.UDP_STREAM.recv_throughput_mbps",
                share=0.5,
                text="UDP: {whole:.0f} Mbit/s sent, {part:.0f} received ({percent:.0f} %): the receiver drops",
            ),
        ),
        peaks=("netperf.TCP_STREAM.throughput_mbps", "netperf.UDP_STREAM.recv_throughput_mbps"),
    )

    def metrics(self) -> list[MetricInfo]:
        return _declared()

    def metric_prefix(self, options: NetperfOptions) -> str:
        return f"netperf.{options.test}."

    def describe(self, options: NetperfOptions) -> str:
        return f"netperf {options.test}" + (f" {options.flows} flows" if options.flows > 1 else "")

    def estimate_seconds(self, options: NetperfOptions) -> float:
        runs = options.iterations[1] if options.iterations else 1
        return options.seconds * runs + 3 + (options.flows - 1) * 0.5  # each more flow: a netperf to start

    def run(self, ctx: BenchContext, options: NetperfOptions) -> list[Measurement]:
        try:
            return self._run_once(ctx, options)
        except NetperfHung as hung:
            if options.test != "UDP_STREAM":
                raise
            # A UDP flood can lose the datagrams that tell netserver the test is over: netperf then
            # waits for it forever. That says nothing about the card; one retry, and the result says so.
            ctx.progress(f"{hung}; trying once more")
            found = self._run_once(ctx, options)
            return [replace(m, warning=m.warning or f"the first attempt hung and was retried ({hung})") for m in found]

    def _run_once(self, ctx: BenchContext, options: NetperfOptions) -> list[Measurement]:
        ends = ctx.ends
        argv = client_argv(options, ends.server_address)
        limit = self.estimate_seconds(options) + 30
        with served(ctx, server_argv(ends.server_address), PORT, label=f"netperf-{options.test}") as run:
            command = flows_command(quote(argv), options.flows) if options.flows > 1 else argv
            try:
                result = run.run_client(command, timeout=limit)
            except GuestCommandError:
                raise NetperfHung(f"netperf {options.test} did not end within {limit:.0f} s") from None
        raw = (
            f"$ {command if isinstance(command, str) else quote(argv)}\n"
            f"# exit {result.returncode} after {result.seconds:.1f} s\n"
            f"{result.stdout}{result.stderr}\n# server: {run.server_output}{run.leftovers}"
        )
        path = run.save(raw)
        if not result.ok:
            raise BenchmarkError(
                f"netperf {options.test} exited {result.returncode}: "
                f"{said(result.stderr or result.stdout, 400)} (raw output: {path})"
            )
        try:
            if options.flows > 1:
                outputs = split_flows(result.stdout, options.flows)
                return combined(options.test, [measurements(options.test, parse_keyvals(o)) for o in outputs])
            return measurements(options.test, parse_keyvals(result.stdout), cpu=options.cpu)
        except BenchmarkError as exc:
            raise BenchmarkError(f"{exc} (raw output: {path})") from None


PLUGIN = Netperf()
