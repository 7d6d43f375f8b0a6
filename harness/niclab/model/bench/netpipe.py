"""NetPIPE (NPtcp 3.7.2): a ping-pong sweep over message sizes, latency and throughput curve.

Its command lines, its output file (Mbps of 2^20 bit/s, one-way seconds), the size rule it follows and how it
fails: docs/benchmarks.md, "NetPIPE (NPtcp 3.7.2)".
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import ClassVar

from pydantic import Field, model_validator

from niclab.base.node import GuestCommandError
from niclab.model.bench.base import BenchContext, BenchmarkError, BenchOptions, Measurement, MetricInfo, quote, served
from niclab.model.bench.declare import Dip, Figure, GuestNeeds, Series, Shows
from niclab.model.bench.declare import Row as TableRow

PORT = 5002
OUTPUT = "/tmp/niclab-netpipe.out"
MBPS_2_20_TO_10_6 = 1.048576  # NPtcp's Mbps is 2^20 bit/s
SECONDS_PER_SIZE = 0.4  # 3 trials of ~0.1 s each: measured on an e1000 pair under TCG
SWEEP_BITS_PER_SECOND = 300e6  # what that pair carries, for the sizes whose 3 x 3 round trips take longer

Row = tuple[int, float, float]  # bytes, NPtcp Mbps (2^20 bit/s), seconds (one way)


class NetpipeOptions(BenchOptions):
    FAMILIES = (4,)
    NOT_FAMILY = "NetPIPE's NPtcp resolves its peer as IPv4 only (gethostbyname); measure over IPv4"
    start: int = Field(1, ge=1, le=1 << 26, description="smallest message, bytes (-l)")
    end: int = Field(1 << 20, ge=1, le=1 << 26, description="largest message, bytes (-u)")
    perturbation: int = Field(
        0, ge=0, le=1024, description="bytes probed either side of each size (-p); 0 turns it off"
    )
    buffer: int | None = Field(None, ge=1024, le=1 << 28, description="socket buffer size, bytes (-b)")
    streaming: bool = Field(False, description="send one way only (-s); gives no latency")
    max_seconds: float = Field(
        300.0,
        gt=0,
        le=7200,
        description="time budget of the sweep; a sweep cut short keeps its curve, with a "
        "warning (a card whose TCP collapses can take many minutes)",
    )

    @model_validator(mode="after")
    def _sizes_in_order(self) -> NetpipeOptions:
        if self.start > self.end:
            raise ValueError(f"start ({self.start}) is larger than end ({self.end})")
        return self


def tool_options(options: NetpipeOptions) -> list[str]:
    """The flags both ends take."""
    argv = ["-P", str(PORT), "-l", str(options.start), "-u", str(options.end), "-p", str(options.perturbation)]
    if options.buffer:
        argv += ["-b", str(options.buffer)]
    if options.streaming:
        argv.append("-s")
    return argv


def receiver_argv(options: NetpipeOptions) -> list[str]:
    return ["NPtcp", *tool_options(options)]


def sender_argv(options: NetpipeOptions, server_address: str) -> list[str]:
    return ["NPtcp", "-h", server_address, "-o", OUTPUT, *tool_options(options)]


def sizes(start: int, end: int, perturbation: int) -> list[int]:
    """The message sizes NPtcp measures (its main loop), before its 1 s stop rule."""
    found: list[int] = []
    inc, nq, length = (start // 2 if start > 1 else 1), (1 if start > 1 else 0), start
    while length <= end and len(found) < 8000 - 3:
        if nq > 2 and nq % 2:
            inc += inc
        probe = perturbation > 0 and inc > perturbation + 1
        found += [length + p for p in ((-perturbation, 0, perturbation) if probe else (0,))]
        length, nq = length + inc, nq + 1
    return found


def parse_rows(text: str) -> list[Row]:
    """The rows of NPtcp's output file."""
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            if len(fields) != 3:
                raise ValueError
            rows.append((int(fields[0]), float(fields[1]), float(fields[2])))
        except ValueError:
            raise BenchmarkError(f"NPtcp output line {number} is not `bytes Mbps seconds`: {line.strip()!r}") from None
    if not rows:
        raise BenchmarkError("NPtcp wrote no measurements")
    return rows


def measurements(rows: list[Row], streaming: bool = False) -> list[Measurement]:
    """Latency (smallest message), peak throughput in 10^6 bit/s with the whole curve, and where it peaks."""
    curve = [[size, round(mbps * MBPS_2_20_TO_10_6, 6), round(seconds * 1e6, 3)] for size, mbps, seconds in rows]
    peak = max(curve, key=lambda point: point[1])
    smallest = min(curve, key=lambda point: point[0])
    found = [] if streaming else [Measurement("netpipe", None, "latency_us", smallest[2], "us", {"bytes": smallest[0]})]
    return found + [
        Measurement("netpipe", None, "peak_throughput_mbps", peak[1], "Mbit/s", {"curve": curve}),
        Measurement("netpipe", None, "peak_size_bytes", float(peak[0]), "bytes", headline=False),
    ]


ERROR = re.compile(r"(?:NetPIPE|Client|Server): .*|.*errno=\d+.*")


def failure(returncode: int, stdout: str, stderr: str) -> str:
    """What NPtcp said when it failed: its last error line (stdout first, then stderr), errno spelled out."""
    said = next((found[-1] for found in (ERROR.findall(stdout), ERROR.findall(stderr)) if found), "")
    said = re.sub(r"errno=(\d+)", lambda m: f"errno={m[1]} ({os.strerror(int(m[1]))})", said.strip())
    return f"NPtcp exited {returncode}: {said or 'no error message'}"


class Netpipe:
    name: ClassVar[str] = "netpipe"
    Options: ClassVar[type[NetpipeOptions]] = NetpipeOptions
    guest: ClassVar[GuestNeeds] = GuestNeeds(packages=("netpipe-tcp",), programs=("/usr/bin/NPtcp",))
    shows: ClassVar[Shows] = Shows(
        rows=(
            TableRow("netpipe.latency_us", "NetPIPE latency"),
            TableRow("netpipe.peak_throughput_mbps", "NetPIPE peak"),
        ),
        figures=(
            Figure(
                "size-curve",
                (Series("netpipe.peak_throughput_mbps", "NetPIPE"),),
                section="NetPIPE curves",
                title="NetPIPE",
                caption="NPtcp's sweep, Mbit/s = 10^6 bit/s.",
                order=10,
            ),
            Figure("throughput", (Series("netpipe.peak_throughput_mbps", "NetPIPE peak", order=1),)),
            Figure("latency", (Series("netpipe.latency_us", "NetPIPE", order=3, one_way=True),)),
            Figure("against-mtu", (Series("netpipe.peak_throughput_mbps", "NetPIPE peak", order=1),)),
        ),
        findings=(Dip("netpipe.peak_throughput_mbps", "NetPIPE"),),
        peaks=("netpipe.peak_throughput_mbps",),
    )

    def metrics(self) -> list[MetricInfo]:
        return [
            MetricInfo(
                "netpipe.latency_us",
                "us",
                "one-way time of the smallest message (half its round trip)",
                "lower",
                pace="time",
            ),
            MetricInfo(
                "netpipe.peak_throughput_mbps",
                "Mbit/s",
                "highest throughput over the message sizes (extra.curve: [bytes, Mbit/s, half RTT us])",
                "higher",
                pace="rate",
            ),
            MetricInfo("netpipe.peak_size_bytes", "bytes", "message size of the peak throughput"),
        ]

    def describe(self, options: NetpipeOptions) -> str:
        return "netpipe streaming" if options.streaming else "netpipe"

    def estimate_seconds(self, options: NetpipeOptions) -> float:
        each = (
            max(SECONDS_PER_SIZE, 3 * 3 * 2 * 8 * size / SWEEP_BITS_PER_SECOND)
            for size in sizes(options.start, options.end, options.perturbation)
        )
        return sum(each) + 2

    def run(self, ctx: BenchContext, options: NetpipeOptions) -> list[Measurement]:
        ends = ctx.ends
        argv = sender_argv(options, ends.server_address)
        cut_short = None
        with served(ctx, receiver_argv(options), PORT, label="netpipe") as run:
            try:
                result = run.run_client(f"rm -f {OUTPUT} && {quote(argv)}", timeout=options.max_seconds)
                table = ends.client.get(OUTPUT).decode(errors="replace") if result.ok else ""
                summary = f"# exit {result.returncode} after {result.seconds:.1f} s\n{result.stdout}{result.stderr}"
            except GuestCommandError as exc:  # the budget ran out: NPtcp was killed, its rows so far remain
                result, cut_short = None, str(exc)
                table = ends.client.get(OUTPUT).decode(errors="replace")
                summary = f"# {cut_short}\n"
        raw = (
            f"$ {quote(argv)}\n{summary}\n# {OUTPUT}:\n{table}\n"
            f"# receiver (exit {run.server_exit}): {run.server_output}{run.leftovers}"
        )
        path = run.save(raw)
        try:
            if result is not None and not result.ok:
                raise BenchmarkError(failure(result.returncode, result.stdout, result.stderr))
            found = measurements(parse_rows(table), options.streaming)
        except BenchmarkError as exc:
            raise BenchmarkError(f"{exc} (raw output: {path})") from None
        if cut_short is None:
            return found
        last = parse_rows(table)[-1][0]
        warning = (
            f"the NPtcp sweep ran out of its {options.max_seconds:g} s budget at {last} bytes "
            f"(of {options.end}): the curve stops there"
        )
        return [replace(m, warning=warning) for m in found]


PLUGIN = Netpipe()
