"""lmbench 3.0-a9 network tests: bw_tcp, lat_tcp, lat_udp, lat_connect, one per benchmark entry.

Where Debian puts the binaries, the daemons' fixed ports, the stderr line parsed, the timing variables set,
and why a latency without a server is checked against the client's TCP counters: docs/benchmarks.md,
"lmbench 3.0-a9".
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from niclab.base.node import CommandResult, GuestCommandError
from niclab.base.text import said
from niclab.model.bench.base import (
    BenchContext,
    BenchmarkError,
    BenchOptions,
    Endpoints,
    Measurement,
    MetricInfo,
    quote,
    served,
)
from niclab.model.bench.declare import Figure, GuestNeeds, Row, Series, Shows

BIN = "/usr/lib/lmbench/bin/x86_64-linux-gnu"
PORTS = {"bw_tcp": (31236, "tcp"), "lat_tcp": (31234, "tcp"), "lat_udp": (34298, "udp"), "lat_connect": (31237, "tcp")}
MIN_INTERVAL_S = {"lat_tcp": 2.0, "lat_udp": 1.0}  # benchmp's floor: MEDIUM, SHORT
DEFAULT_WARMUP_S = {"bw_tcp": 7.5}
SNMP = "grep -E '^(Tcp|Udp):' /proc/net/snmp"
COUNT = re.compile(r"-?\d{1,20}")  # a counter of /proc/net/snmp (64 bits at most)
# lmbench processes still alive after the stop: killed by PID, and named in the raw output
SWEEP = (
    f"for p in /proc/[0-9]*; do case $(readlink $p/exe 2>/dev/null) in {BIN}/*) "
    "echo \"killed leftover ${p#/proc/}: $(tr '\\0' ' ' < $p/cmdline)\"; kill -KILL ${p#/proc/};; "
    "esac; done 2>/dev/null; true"
)

BANDWIDTH = re.compile(r"^([\d.]+) ([\d.]+) MB/sec$", re.M)
LATENCY = re.compile(
    r"^(TCP latency using|UDP latency using|TCP/IP connection cost to) (\S+): "
    r"([\d.]+) microseconds$",
    re.M,
)
LATENCY_LABEL = {
    "lat_tcp": "TCP latency using",
    "lat_udp": "UDP latency using",
    "lat_connect": "TCP/IP connection cost to",
}

Test = Literal["bw_tcp", "lat_tcp", "lat_udp", "lat_connect"]


class LmbenchOptions(BenchOptions):
    FAMILIES = (4,)
    NOT_FAMILY = "lmbench's programs resolve their peer as IPv4 only (gethostbyname); measure over IPv4"
    test: Test = Field(description="the lmbench program")
    message_size: int | None = Field(
        None, ge=1, le=10 << 20, description="bytes per read/write (-m); bw_tcp 65536, lat_tcp 1, lat_udp 4"
    )
    repetitions: int = Field(11, ge=1, le=1000, description="timed repetitions; the result is their median (-N)")
    warmup: float | None = Field(
        None, ge=0, le=600, description="seconds of traffic before timing (-W); bw_tcp's default is 7.5"
    )
    interval_ms: int = Field(
        100,
        ge=5,
        le=60000,
        description="timing interval per repetition ($ENOUGH); lat_tcp uses at least 2 s, lat_udp 1 s",
    )

    @model_validator(mode="after")
    def _fits_the_test(self) -> LmbenchOptions:
        if self.test == "lat_connect" and (self.message_size is not None or self.warmup is not None):
            raise ValueError("lat_connect takes neither message_size nor warmup")
        if self.test == "lat_udp" and self.message_size is not None and not 4 <= self.message_size <= 65507:
            raise ValueError("lat_udp's message_size is 4 to 65507 bytes")
        return self


def server_argv(test: str) -> list[str]:
    return [f"{BIN}/{test}", "-s"]


def shutdown_argv(test: str, server_address: str) -> list[str]:
    return [f"{BIN}/{test}", "-S", server_address]


def client_argv(options: LmbenchOptions, server_address: str) -> list[str]:
    argv = ["env", f"ENOUGH={options.interval_ms * 1000}", "TIMING_O=0", "LOOP_O=0", f"{BIN}/{options.test}"]
    if options.message_size is not None:
        argv += ["-m", str(options.message_size)]
    if options.warmup is not None:
        argv += ["-W", str(round(options.warmup * 1e6))]
    return argv + ["-N", str(options.repetitions), server_address]


def client_command(argv: list[str]) -> str:
    """The client between two snapshots of the TCP and UDP counters (on stdout, which lmbench leaves empty)."""
    return f"{SNMP}; {quote(argv)}; rc=$?; {SNMP}; exit $rc"


def snapshots(text: str) -> list[dict[str, int]]:
    """`Tcp:`/`Udp:` header and value lines, as {"Tcp.ActiveOpens": n, ...} per snapshot."""
    found: list[dict[str, int]] = []
    headers: dict[str, list[str]] = {}
    for line in text.splitlines():
        proto, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or proto not in ("Tcp", "Udp") or not fields:
            continue
        if not COUNT.fullmatch(fields[0]):
            headers[proto] = fields
            continue
        values = {
            f"{proto}.{key}": int(value)
            for key, value in zip(headers.get(proto, []), fields, strict=False)
            if COUNT.fullmatch(value)  # a guest's "nan" or 5000 digits is no count (int() would raise)
        }
        if not found or values.keys() & found[-1].keys():
            found.append({})
        found[-1].update(values)
    return found


def traffic(test: str, before: dict[str, int], after: dict[str, int]) -> dict:
    """What the run did on the client's TCP/UDP; a failure when it cannot have measured the server."""
    delta = {key: after[key] - before.get(key, 0) for key in after}
    if test == "lat_udp":
        if delta.get("Udp.InDatagrams", 0) < 1:
            raise BenchmarkError("lat_udp got no UDP datagram back from the server")
        return {"udp_datagrams_in": delta["Udp.InDatagrams"]}
    opened, failed = delta.get("Tcp.ActiveOpens", 0), delta.get("Tcp.AttemptFails", 0)
    if failed:
        raise BenchmarkError(
            f"{failed} of {opened} TCP connection attempts to the server failed, so lmbench "
            f"timed refusals, not the network (was the server up for the whole run?)"
        )
    if opened < 1:
        raise BenchmarkError(f"{test} opened no TCP connection to the server")
    return {"tcp_connections": opened, "tcp_retransmits": delta.get("Tcp.RetransSegs", 0)}


def parse(test: str, stderr: str) -> Measurement:
    """The result line lmbench printed on stderr; its other lines are the error when there is none."""
    if test == "bw_tcp":
        found = BANDWIDTH.search(stderr)
        if found:
            megabytes = float(found[2])  # 10^6 bytes per second
            return Measurement(
                "lmbench",
                test,
                "throughput_mbps",
                round(megabytes * 8, 6),
                "Mbit/s",
                {"lmbench_mb_per_s": megabytes, "message_bytes": round(float(found[1]) * 1e6)},
            )
    else:
        found = next((m for m in LATENCY.finditer(stderr) if m[1] == LATENCY_LABEL[test]), None)
        if found:
            return Measurement("lmbench", test, "latency_us", float(found[3]), "us")
    told = "; ".join(line.strip() for line in stderr.splitlines() if line.strip())
    raise BenchmarkError(
        f"{test} printed no result: {said(told, 400)}"
        if told
        else f"{test} printed no result and no error (did the server stop during the run?)"
    )


def measurements(test: str, result: CommandResult) -> list[Measurement]:
    """The result, checked against the client's counters, with what the run did in `extra`."""
    found = parse(test, result.stderr)
    counted = snapshots(result.stdout)
    if len(counted) != 2:
        raise BenchmarkError(f"expected TCP/UDP counters before and after {test}, found {len(counted)} sets")
    extra = traffic(test, counted[0], counted[1])
    return [Measurement(found.tool, found.test, found.metric, found.value, found.unit, {**found.extra, **extra})]


class Lmbench:
    name: ClassVar[str] = "lmbench"
    Options: ClassVar[type[LmbenchOptions]] = LmbenchOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(packages=("lmbench",), programs=tuple(f"{BIN}/{test}" for test in PORTS))
    shows: ClassVar[Shows] = Shows(
        rows=(
            Row("lmbench.bw_tcp.throughput_mbps", "lmbench bw_tcp"),
            Row("lmbench.lat_tcp.latency_us", "lmbench lat_tcp"),
            Row("lmbench.lat_udp.latency_us", "lmbench lat_udp"),
            Row("lmbench.lat_connect.latency_us", "lmbench lat_connect"),
        ),
        figures=(
            Figure("throughput", (Series("lmbench.bw_tcp.throughput_mbps", "lmbench bw_tcp", order=2),)),
            Figure(
                "latency",
                (
                    Series("lmbench.lat_tcp.latency_us", "lmbench lat_tcp", order=1),
                    Series("lmbench.lat_udp.latency_us", "lmbench lat_udp", order=2),
                ),
            ),
        ),
        peaks=("lmbench.bw_tcp.throughput_mbps",),
    )

    def metrics(self) -> list[MetricInfo]:
        return [
            MetricInfo(
                "lmbench.bw_tcp.throughput_mbps",
                "Mbit/s",
                "TCP bulk transfer rate, server to client",
                "higher",
                pace="rate",
            ),
            MetricInfo(
                "lmbench.lat_tcp.latency_us", "us", "TCP request/response round trip (median)", "lower", pace="time"
            ),
            MetricInfo(
                "lmbench.lat_udp.latency_us", "us", "UDP request/response round trip (median)", "lower", pace="time"
            ),
            MetricInfo("lmbench.lat_connect.latency_us", "us", "TCP connect and close (median)", "lower", pace="time"),
        ]

    def metric_prefix(self, options: LmbenchOptions) -> str:
        return f"lmbench.{options.test}."

    def describe(self, options: LmbenchOptions) -> str:
        return f"lmbench {options.test}"

    def estimate_seconds(self, options: LmbenchOptions) -> float:
        warmup = options.warmup if options.warmup is not None else DEFAULT_WARMUP_S.get(options.test, 0.0)
        interval = max(options.interval_ms / 1000, MIN_INTERVAL_S.get(options.test, 0.0))
        # lmbench sizes each interval from the first, shorter one: they came out ~1.5 x as long under TCG
        return warmup + (options.repetitions + 1) * interval * 1.5 + 2

    def run(self, ctx: BenchContext, options: LmbenchOptions) -> list[Measurement]:
        ends, test = ctx.ends, options.test
        port, proto = PORTS[test]
        argv = client_argv(options, ends.server_address)
        with served(
            ctx,
            server_argv(test),
            port,
            proto,
            label=f"lmbench-{test}",
            before_stop=lambda: self._shutdown(ends, test),
            after_stop=lambda: self._sweep(ends),
        ) as run:
            result = run.run_client(client_command(argv), timeout=self.estimate_seconds(options) * 3 + 60)
        stopped = "\n".join(
            note
            for note in (run.before, f"# server (exit {run.server_exit}): {run.server_output}".rstrip(), run.after)
            if note
        )
        path = run.save(
            f"$ {quote(argv)}\n# exit {result.returncode} after {result.seconds:.1f} s\n"
            f"{result.stderr}\n# counters:\n{result.stdout}\n{stopped}{run.leftovers}\n"
        )
        try:
            return measurements(test, result)
        except BenchmarkError as exc:
            raise BenchmarkError(f"{exc} (raw output: {path})") from None

    def _shutdown(self, ends: Endpoints, test: str) -> str:
        """Ask the server to exit (-S) before its process group is ended."""
        try:
            said = ends.server.run(quote(shutdown_argv(test, ends.server_address)), timeout=30, check=False)
            return f"# {test} -S: exit {said.returncode} {said.stderr.strip()}"
        except GuestCommandError as exc:
            return f"# {test} -S: {exc}"

    def _sweep(self, ends: Endpoints) -> str:
        """Kill any lmbench process left in either guest (the one, over loopback) after the stop, by PID."""
        notes = []
        for node in (ends.server,) if ends.loopback else (ends.server, ends.client):
            left = node.run(SWEEP, timeout=30, check=False).stdout.strip()
            if left:
                notes.append(f"# {node.name}: {left}")
        return "\n".join(notes)


PLUGIN = Lmbench()
