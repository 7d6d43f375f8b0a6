"""netperf: TCP_STREAM and TCP_RR through the omni `-k` output (KEY=value lines).

Server: `netserver -D -p PORT -L ADDR,inet` (foreground). Client:
`netperf -H ADDR -p PORT -t TEST -l SECONDS -P 0 -- -k SELECTORS`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from niclab.bench.base import (BenchContext, BenchmarkError, BenchOptions, Measurement, MetricInfo,
                               quote, wait_listening)

PORT = 12865

STREAM_SELECTORS = ("THROUGHPUT", "THROUGHPUT_UNITS", "ELAPSED_TIME", "PROTOCOL", "TRANSPORT_MSS")
UDP_SELECTORS = ("THROUGHPUT", "THROUGHPUT_UNITS", "LOCAL_SEND_THROUGHPUT", "REMOTE_RECV_THROUGHPUT",
                 "LOCAL_SEND_CALLS", "REMOTE_RECV_CALLS", "LOCAL_SEND_SIZE", "ELAPSED_TIME", "PROTOCOL")
RR_SELECTORS = ("THROUGHPUT", "THROUGHPUT_UNITS", "ELAPSED_TIME", "PROTOCOL", "RT_LATENCY",
                "MIN_LATENCY", "MEAN_LATENCY", "P50_LATENCY", "P90_LATENCY", "P99_LATENCY",
                "MAX_LATENCY", "STDDEV_LATENCY")


class NetperfOptions(BenchOptions):
    test: Literal["TCP_STREAM", "TCP_RR", "UDP_STREAM"] = Field("TCP_STREAM", description="the netperf test")
    seconds: float = Field(10.0, gt=0, le=3600, description="test length (-l)")
    message_size: int | None = Field(None, ge=1, le=65507, description="send size in bytes (-- -m)")


def parse_keyvals(text: str) -> dict[str, str]:
    """KEY=value lines, as netperf prints them with -P 0 -- -k; other lines are ignored."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.isupper() and " " not in key:
            values[key.strip()] = value.strip()
    return values


def _number(values: dict[str, str], key: str) -> float:
    try:
        return float(values[key])
    except KeyError:
        raise BenchmarkError(f"netperf printed no {key}") from None
    except ValueError:
        raise BenchmarkError(f"netperf printed {key}={values[key]!r}, not a number") from None


def measurements(test: str, values: dict[str, str]) -> list[Measurement]:
    """Turn netperf's selectors into measurements with units."""
    units = values.get("THROUGHPUT_UNITS", "")
    extra = {k.lower(): values[k] for k in ("ELAPSED_TIME", "PROTOCOL", "TRANSPORT_MSS") if k in values}
    if test == "TCP_STREAM":
        if units != "10^6bits/s":
            raise BenchmarkError(f"netperf reported throughput in {units!r}, expected 10^6bits/s")
        return [Measurement("netperf", test, "throughput_mbps", _number(values, "THROUGHPUT"), "Mbit/s", extra)]
    if test == "UDP_STREAM":
        sent, received = _number(values, "LOCAL_SEND_CALLS"), _number(values, "REMOTE_RECV_CALLS")
        lost = max(0.0, sent - received)
        return [
            Measurement("netperf", test, "send_throughput_mbps", _number(values, "LOCAL_SEND_THROUGHPUT"),
                        "Mbit/s", extra),
            Measurement("netperf", test, "recv_throughput_mbps", _number(values, "REMOTE_RECV_THROUGHPUT"),
                        "Mbit/s", extra),
            Measurement("netperf", test, "loss_pct", 100.0 * lost / sent if sent else 0.0, "%",
                        {"sent_datagrams": int(sent), "received_datagrams": int(received),
                         "lost_datagrams": int(lost)}),
        ]
    if test == "TCP_RR":
        if units != "Trans/s":
            raise BenchmarkError(f"netperf reported {units!r} for an RR test, expected Trans/s")
        result = [Measurement("netperf", test, "transaction_rate", _number(values, "THROUGHPUT"), "/s", extra)]
        for key, metric in (("MEAN_LATENCY", "latency_mean_us"), ("P50_LATENCY", "latency_p50_us"),
                            ("P90_LATENCY", "latency_p90_us"), ("P99_LATENCY", "latency_p99_us"),
                            ("MIN_LATENCY", "latency_min_us"), ("MAX_LATENCY", "latency_max_us")):
            if key in values:
                result.append(Measurement("netperf", test, metric, _number(values, key), "us",
                                          headline=metric == "latency_mean_us"))
        return result
    raise BenchmarkError(f"no parser for netperf test {test}")


def client_argv(options: NetperfOptions, server_address: str) -> list[str]:
    selectors = {"TCP_STREAM": STREAM_SELECTORS, "UDP_STREAM": UDP_SELECTORS}.get(options.test, RR_SELECTORS)
    test_options = ["-m", str(options.message_size)] if options.message_size else []
    return ["netperf", "-H", server_address, "-p", str(PORT), "-t", options.test,
            "-l", f"{options.seconds:g}", "-P", "0", "--", *test_options, "-k", ",".join(selectors)]


def server_argv(server_address: str) -> list[str]:
    return ["netserver", "-D", "-p", str(PORT), "-L", f"{server_address},inet"]


class Netperf:
    name: ClassVar[str] = "netperf"
    Options: ClassVar[type[NetperfOptions]] = NetperfOptions

    def metrics(self) -> list[MetricInfo]:
        rr = [("transaction_rate", "/s", "request/response transactions per second", "higher")] + [
            (f"latency_{p}_us", "us", f"{label} transaction latency", "lower")
            for p, label in (("mean", "mean"), ("p50", "median"), ("p90", "90th percentile"),
                             ("p99", "99th percentile"), ("min", "shortest"), ("max", "longest"))]
        return (
            [MetricInfo("netperf.TCP_STREAM.throughput_mbps", "Mbit/s", "TCP bulk transfer rate", "higher")]
            + [MetricInfo(f"netperf.TCP_RR.{name}", unit, text, better) for name, unit, text, better in rr]
            + [MetricInfo("netperf.UDP_STREAM.send_throughput_mbps", "Mbit/s", "what the sender sent", "higher"),
               MetricInfo("netperf.UDP_STREAM.recv_throughput_mbps", "Mbit/s", "what the receiver got", "higher"),
               MetricInfo("netperf.UDP_STREAM.loss_pct", "%", "datagrams sent but not received", "lower")]
        )

    def describe(self, options: NetperfOptions) -> str:
        return f"netperf {options.test}"

    def estimate_seconds(self, options: NetperfOptions) -> float:
        return options.seconds + 3

    def run(self, ctx: BenchContext, options: NetperfOptions) -> list[Measurement]:
        ends = ctx.ends
        server = ends.server.spawn(quote(server_argv(ends.server_address)))
        try:
            wait_listening(ends.server, PORT)
            argv = client_argv(options, ends.server_address)
            result = ends.client.run(quote(argv), timeout=options.seconds * 3 + 60, check=False)
        finally:
            served = server.stop()
        raw = (f"$ {quote(argv)}\n# exit {result.returncode} after {result.seconds:.1f} s\n"
               f"{result.stdout}{result.stderr}\n# server: {served.stdout}{served.stderr}")
        path = ctx.save_raw(f"netperf-{options.test}", raw)
        if not result.ok:
            raise BenchmarkError(f"netperf {options.test} exited {result.returncode}: "
                                 f"{(result.stderr or result.stdout).strip()[-400:]} (raw output: {path})")
        found = measurements(options.test, parse_keyvals(result.stdout))
        return found


PLUGIN = Netperf()
