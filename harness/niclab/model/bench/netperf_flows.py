"""netperf with `flows: N`: N netperf instances started together, each its own connection, read as one figure.

Each instance is a flow of its own (its own control and data connection to the one netserver, which forks a
child per test). Their figures are combined per metric: rates and retransmits summed (the link's total), the
mean latency weighted by each flow's transactions (the mean of every transaction), the median flow's p50,
the worst flow's p90, p99 and maximum, the best flow's minimum, and UDP loss from the summed counts. Two
figures say how the flows shared the link: Jain's fairness index of their rates ((Σx)² / (n·Σx²): 1 when every
flow got the same, 1/n when one got all) and the slowest flow's rate. Every combined measurement keeps each
flow's own value in `extra.per_flow`.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import replace

from niclab.base.text import said
from niclab.model.bench.base import BenchmarkError, Measurement
from niclab.model.bench.netperf_parse import REQUEST_RESPONSE

FLOW_MARK = "== niclab flow "
EXIT_MARK = "NICLAB_EXIT="
FLOW = re.compile(rf"^{re.escape(FLOW_MARK)}([0-9]{{1,3}})$", re.MULTILINE)
EXIT = re.compile(rf"^{EXIT_MARK}([0-9]{{1,3}})$", re.MULTILINE)

SUMMED = frozenset({"throughput_mbps", "send_throughput_mbps", "recv_throughput_mbps", "transaction_rate"})
COUNTS = frozenset({"retransmits"})
WORST = frozenset({"latency_p90_us", "latency_p99_us", "latency_max_us"})


def rate_metric(test: str) -> str:
    """The metric a flow's share of the link is judged by."""
    if test in REQUEST_RESPONSE:
        return "transaction_rate"
    return "recv_throughput_mbps" if test == "UDP_STREAM" else "throughput_mbps"


def slowest_metric(test: str) -> tuple[str, str]:
    """The slowest flow's metric and unit for `test`."""
    return ("slowest_flow_rate", "/s") if test in REQUEST_RESPONSE else ("slowest_flow_mbps", "Mbit/s")


def flows_command(one: str, flows: int) -> str:
    """`one` (a netperf command line) `flows` times at once; then each one's output after a mark, with its exit
    status, in order."""
    return (
        "d=$(mktemp -d) || exit 1\n"
        f'for i in $(seq {flows}); do ( {one}; echo "{EXIT_MARK}$?" ) > "$d/$i" 2>&1 & done\n'
        "wait\n"
        f'for i in $(seq {flows}); do echo "{FLOW_MARK}$i"; cat "$d/$i"; done\n'
        'rm -rf "$d"\n'
    )


def split_flows(text: str, flows: int) -> list[str]:
    """Each flow's output, in order; a flow that is missing or exited non-zero is the run's error."""
    marks = list(FLOW.finditer(text))
    if [int(m[1]) for m in marks] != list(range(1, flows + 1)):
        raise BenchmarkError(f"netperf's {flows} flows did not all report: {said(text)}")
    outputs = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        output = text[mark.end() : end]
        status = EXIT.search(output)
        if status is None or status[1] != "0":
            code = status[1] if status else "?"
            raise BenchmarkError(f"netperf flow {i + 1} of {flows} exited {code}: {said(output, 400)}")
        outputs.append(output)
    return outputs


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index of the flows' rates; None when no flow moved anything."""
    squares = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * squares) if squares > 0 else None


def combined(test: str, per_flow: list[list[Measurement]]) -> list[Measurement]:
    """One measurement per metric for the flows together, then the fairness index and the slowest flow."""
    names = [m.metric for m in per_flow[0]]
    if any([m.metric for m in found] != names for found in per_flow):
        raise BenchmarkError(f"netperf's {len(per_flow)} flows reported different figures")
    by_name = {name: [found[i] for found in per_flow] for i, name in enumerate(names)}
    rates = [m.value for m in by_name[rate_metric(test)]]
    out = []
    for name, flows in by_name.items():
        values = [m.value for m in flows]
        extra = {**flows[0].extra, "flows": len(flows), "per_flow": values}
        for count in ("sent_datagrams", "received_datagrams", "lost_datagrams"):  # UDP loss: the flows' totals
            if all(isinstance(m.extra.get(count), int) for m in flows):
                extra[count] = sum(m.extra[count] for m in flows)
        out.append(replace(flows[0], value=_combine(name, flows, rates), extra=extra))
    first = by_name[rate_metric(test)][0]
    slowest, unit = slowest_metric(test)
    out.append(replace(first, metric=slowest, value=min(rates), unit=unit, extra={"flows": len(rates)}))
    if (index := jain(rates)) is not None:
        out.append(replace(first, metric="fairness", value=index, unit="", extra={"flows": len(rates)}))
    if any(not math.isfinite(m.value) for m in out):  # each flow's was finite; their sum need not be
        raise BenchmarkError(f"netperf's {len(per_flow)} flows add up to no finite figure")
    return out


def _combine(name: str, flows: list[Measurement], rates: list[float]) -> float:
    values = [m.value for m in flows]
    if name in SUMMED or name in COUNTS:
        return float(sum(values))
    if name == "loss_pct":
        sent = [m.extra.get("sent_datagrams") for m in flows]
        received = [m.extra.get("received_datagrams") for m in flows]
        if all(isinstance(n, int) for n in (*sent, *received)):
            total = sum(sent)  # type: ignore[arg-type]
            return 100.0 * max(0, total - sum(received)) / total if total else 0.0  # type: ignore[arg-type]
        return statistics.fmean(values)  # over confidence iterations netperf gives no counts
    if name == "latency_mean_us":
        weight = sum(rates)
        return sum(r * v for r, v in zip(rates, values, strict=True)) / weight if weight else statistics.fmean(values)
    if name == "latency_p50_us":
        return float(statistics.median(values))
    if name in WORST:
        return max(values)
    if name == "latency_min_us":
        return min(values)
    return statistics.fmean(values)  # what has no better rule (CPU is refused with flows)
