"""iperf3: TCP (streams, reverse, both ways at once) and UDP at a set bitrate (jitter, loss), from its JSON.

Its command lines, the JSON `error` a failed connection exits 0 with, and the UDP start tried again when its
one hello is lost: docs/benchmarks.md, "iperf3" and "Traps the benchmarks handle".
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from niclab.base import jsonbound
from niclab.base.text import said
from niclab.model.bench.base import BenchContext, BenchmarkError, BenchOptions, Measurement, MetricInfo, quote, served
from niclab.model.bench.declare import GuestNeeds, Shows
from niclab.model.bench.fields import Fields

PORT = 5201
UDP_STARTS = 3
_LOST_START = "unable to read from stream socket"


class UdpStartLost(BenchmarkError):
    """The UDP stream's hello or its reply was lost: nothing was measured."""


class Iperf3Options(BenchOptions):
    protocol: Literal["tcp", "udp"] = "tcp"
    seconds: float = Field(10.0, gt=0, le=3600, description="test length (-t)")
    streams: int = Field(1, ge=1, le=128, description="parallel streams (-P)")
    reverse: bool = Field(False, description="the server sends (-R)")
    bidir: bool = Field(False, description="both directions at once (--bidir)")
    bitrate: str | None = Field(
        None, pattern=r"^[0-9]+(\.[0-9]+)?[KMG]?$", description="target rate (-b), e.g. 10M; UDP's default is 1M"
    )
    length: int | None = Field(None, ge=16, le=65507, description="datagram (UDP) or buffer (TCP) bytes (-l)")

    @model_validator(mode="after")
    def _one_direction_option(self) -> Iperf3Options:
        if self.reverse and self.bidir:
            raise ValueError("reverse and bidir exclude each other: bidir already sends both ways")
        return self


def parse(text: str, protocol: str) -> list[Measurement]:
    """iperf3's -J output as measurements; anything else iperf3 printed (or a guest did) is its own error."""
    try:
        data = Fields("iperf3", jsonbound.loads(text))
    except ValueError:
        raise BenchmarkError(f"iperf3 printed no JSON: {said(text)}") from None
    if not isinstance(data.value, dict):
        raise BenchmarkError(f"iperf3's JSON is not an object: {said(text, 100, last=False)}")
    if (error := data.get("error")) is not None:
        message = said(error.value if isinstance(error.value, str) else json.dumps(error.value))
        lost_start = protocol == "udp" and _LOST_START in message and not data.value.get("intervals")
        raise (UdpStartLost if lost_start else BenchmarkError)(f"iperf3: {message}")
    end = data["end"]
    test = protocol.upper()
    cpu = end.get("cpu_utilization_percent")
    extra = {
        "cpu_host_pct": _optional(cpu, "host_total"),
        "cpu_remote_pct": _optional(cpu, "remote_total"),
    }
    sent, received = end["sum_sent"], end["sum_received"]
    found = [
        Measurement("iperf3", test, "throughput_mbps", received["bits_per_second"].number() / 1e6, "Mbit/s", extra),
        Measurement(
            "iperf3", test, "sent_throughput_mbps", sent["bits_per_second"].number() / 1e6, "Mbit/s", headline=False
        ),
    ]
    if (reverse := end.get("sum_received_bidir_reverse")) is not None:
        rate = reverse["bits_per_second"].number() / 1e6
        found.append(Measurement("iperf3", test, "reverse_throughput_mbps", rate, "Mbit/s"))
    if protocol == "tcp":
        retransmits = sent.get("retransmits")
        found.append(
            Measurement(
                "iperf3", test, "retransmits", retransmits.number() if retransmits else 0.0, "segments", headline=False
            )
        )
        streams = end.get("streams")
        rtts = [
            rtt.number()
            for stream in (streams.items() if streams is not None else [])
            if (sender := stream.get("sender")) is not None and (rtt := sender.get("mean_rtt")) is not None
        ]
        if any(rtts):
            mean = math.fsum(rtts) / len(rtts)
            found.append(Measurement("iperf3", test, "rtt_mean_us", mean, "us", headline=False))
    else:
        packets = {"lost_packets": received["lost_packets"].integer(), "packets": received["packets"].integer()}
        found += [
            Measurement("iperf3", test, "loss_pct", received["lost_percent"].number(), "%", packets),
            Measurement("iperf3", test, "jitter_ms", received["jitter_ms"].number(), "ms", headline=False),
        ]
    return found


def _optional(fields: Fields | None, key: str) -> float | None:
    """An optional figure (iperf3 leaves some out): None when absent; the tool's error when not a number."""
    found = fields.get(key) if fields is not None else None
    return found.number() if found is not None else None


def client_argv(options: Iperf3Options, server_address: str) -> list[str]:
    argv = ["iperf3", "-c", server_address, "-p", str(PORT), "-t", f"{options.seconds:g}", "-J"]
    if options.streams > 1:
        argv += ["-P", str(options.streams)]
    if options.reverse:
        argv.append("-R")
    if options.bidir:
        argv.append("--bidir")
    if options.protocol == "udp":
        argv.append("-u")
    if options.bitrate:
        argv += ["-b", options.bitrate]
    if options.length:
        argv += ["-l", str(options.length)]
    return argv


class Iperf3:
    name: ClassVar[str] = "iperf3"
    Options: ClassVar[type[Iperf3Options]] = Iperf3Options
    guest: ClassVar[GuestNeeds] = GuestNeeds(packages=("iperf3",), programs=("/usr/bin/iperf3",))
    shows: ClassVar[Shows] = Shows()  # its headline metrics get rows labelled by their names

    def metrics(self) -> list[MetricInfo]:
        out = []
        for test in ("TCP", "UDP"):
            out += [
                MetricInfo(f"iperf3.{test}.throughput_mbps", "Mbit/s", "what the receiver got", "higher", pace="rate"),
                MetricInfo(
                    f"iperf3.{test}.sent_throughput_mbps", "Mbit/s", "what the sender sent", "higher", pace="rate"
                ),
                MetricInfo(
                    f"iperf3.{test}.reverse_throughput_mbps",
                    "Mbit/s",
                    "what the client got back from the server at the same time (bidir)",
                    "higher",
                    pace="rate",
                ),
            ]
        return out + [
            MetricInfo("iperf3.TCP.retransmits", "segments", "TCP segments sent again", "lower"),
            MetricInfo("iperf3.TCP.rtt_mean_us", "us", "mean smoothed RTT the sender's TCP saw", "lower", pace="time"),
            MetricInfo("iperf3.UDP.loss_pct", "%", "datagrams sent but not received", "lower"),
            MetricInfo("iperf3.UDP.jitter_ms", "ms", "variation of datagram transit time (RFC 3550)", "lower"),
        ]

    def metric_prefix(self, options: Iperf3Options) -> str:
        return f"iperf3.{options.protocol.upper()}."

    def describe(self, options: Iperf3Options) -> str:
        return (
            f"iperf3 {options.protocol.upper()}"
            + (" reverse" if options.reverse else "")
            + (" bidir" if options.bidir else "")
        )

    def estimate_seconds(self, options: Iperf3Options) -> float:
        return options.seconds + 3

    def run(self, ctx: BenchContext, options: Iperf3Options) -> list[Measurement]:
        lost = 0
        while True:
            try:
                found = self._run_once(ctx, options)
            except UdpStartLost as exc:
                lost += 1
                if lost == UDP_STARTS:
                    raise BenchmarkError(f"{exc}; the UDP stream failed to start {lost} times in a row") from None
                ctx.progress(f"{exc}; the UDP stream's start was lost, trying again")
                continue
            return [replace(m, extra={**m.extra, "lost_starts": lost}) for m in found] if lost else found

    def _run_once(self, ctx: BenchContext, options: Iperf3Options) -> list[Measurement]:
        ends = ctx.ends
        argv = client_argv(options, ends.server_address)
        with served(
            ctx,
            ["iperf3", "-s", "-B", ends.server_address, "-p", str(PORT), "-1"],
            PORT,
            label=f"iperf3-{options.protocol}",
        ) as run:
            result = run.run_client(argv, timeout=options.seconds * 3 + 60)
        path = run.save(f"$ {quote(argv)}\n# exit {result.returncode}\n{result.stdout}{result.stderr}{run.leftovers}")
        try:
            return parse(result.stdout, options.protocol)
        except BenchmarkError as exc:
            raise type(exc)(f"{exc} (raw output: {path})") from None


PLUGIN = Iperf3()
