"""netperf's omni `-k` output (KEY=value lines) turned into measurements.

Which keys hold what (units, UDP's sent and received, the datagrams lost, CPU), and why a missed confidence
target is checked here (netperf says nothing): docs/benchmarks.md, "netperf 2.7.0".
"""

from __future__ import annotations

import math

from niclab.model.bench.base import BenchmarkError, Measurement

STREAMS = ("TCP_STREAM", "TCP_MAERTS", "UDP_STREAM")
REQUEST_RESPONSE = ("TCP_RR", "UDP_RR", "TCP_CRR")
LATENCIES = (
    ("MEAN_LATENCY", "latency_mean_us"),
    ("P50_LATENCY", "latency_p50_us"),
    ("P90_LATENCY", "latency_p90_us"),
    ("P99_LATENCY", "latency_p99_us"),
    ("MIN_LATENCY", "latency_min_us"),
    ("MAX_LATENCY", "latency_max_us"),
)
SD_UNITS = {"usec/KB": ("us/KB", "kb"), "usec/Tran": ("us/Tr", "tr")}

COMMON = (
    "THROUGHPUT",
    "THROUGHPUT_UNITS",
    "ELAPSED_TIME",
    "PROTOCOL",
    "LOCAL_CPU_UTIL",
    "REMOTE_CPU_UTIL",
    "LOCAL_SD",
    "REMOTE_SD",
    "SD_UNITS",
    "CONFIDENCE_LEVEL",
    "CONFIDENCE_INTERVAL",
    "CONFIDENCE_ITERATION",
    "THROUGHPUT_CONFID",
    "LOCAL_CPU_CONFID",
    "REMOTE_CPU_CONFID",
    "LSS_SIZE",
    "RSR_SIZE",
)
SELECTORS = {
    "TCP_STREAM": COMMON + ("TRANSPORT_MSS", "LOCAL_TRANSPORT_RETRANS", "LOCAL_SEND_SIZE"),
    "TCP_MAERTS": COMMON + ("TRANSPORT_MSS", "REMOTE_TRANSPORT_RETRANS"),
    "UDP_STREAM": COMMON
    + ("LOCAL_SEND_THROUGHPUT", "REMOTE_RECV_THROUGHPUT", "LOCAL_SEND_CALLS", "REMOTE_RECV_CALLS", "LOCAL_SEND_SIZE"),
    **{
        test: COMMON
        + ("REQUEST_SIZE", "RESPONSE_SIZE", "RT_LATENCY", "STDDEV_LATENCY")
        + tuple(k for k, _ in LATENCIES)
        for test in REQUEST_RESPONSE
    },
}


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
        value = float(values[key])
    except KeyError:
        raise BenchmarkError(f"netperf printed no {key}") from None
    except ValueError:
        raise BenchmarkError(f"netperf printed {key}={values[key]!r}, not a number") from None
    if not math.isfinite(value):
        raise BenchmarkError(f"netperf printed {key}={values[key]!r}, not a finite number")
    return value


def _optional(values: dict[str, str], key: str) -> float | None:
    """A figure netperf reports as -1 when it was not measured (and as nan when it could not compute it)."""
    try:
        value = float(values[key])
    except (KeyError, ValueError):
        return None
    return None if value < 0 or not math.isfinite(value) else value


def confidence(values: dict[str, str], cpu: bool) -> tuple[dict, str | None]:
    """What netperf's confidence iteration achieved, and a warning when it missed the target."""
    wanted = _optional(values, "CONFIDENCE_INTERVAL")
    level = _optional(values, "CONFIDENCE_LEVEL")
    if not wanted or not level:  # not asked for (absent, -1 or 0)
        return {}, None
    iterations = _optional(values, "CONFIDENCE_ITERATION")
    keys = {"throughput": "THROUGHPUT_CONFID"}
    if cpu:
        keys.update(local_cpu="LOCAL_CPU_CONFID", remote_cpu="REMOTE_CPU_CONFID")
    achieved = {name: _optional(values, key) for name, key in keys.items()}
    # a width netperf could not compute (nan: a mean of 0, when nothing was received) is no width reached
    unknown = {name: values[key] for name, key in keys.items() if key in values and _not_finite(values[key])}
    missed = {k: v for k, v in achieved.items() if v is not None and v > wanted}
    facts = {
        "confidence_level": level,
        "confidence_width_pct": wanted,
        "confidence_achieved_width_pct": {k: v for k, v in achieved.items() if v is not None},
        "confidence_iterations": iterations,
        "confidence_met": not missed and not unknown,
    }
    if facts["confidence_met"]:
        return facts, None
    detail = ", ".join(
        [f"{k.replace('_', ' ')} ±{v / 2:.1f} %" for k, v in missed.items()]
        + [f"{k.replace('_', ' ')} has no interval (netperf printed {text})" for k, text in unknown.items()]
    )
    return facts, (
        f"netperf's {int(level)} % confidence target (±{wanted / 2:g} %) was missed after "
        f"{int(iterations or 0)} iterations: {detail}"
    )


def _not_finite(text: str) -> bool:
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return False


def measurements(test: str, values: dict[str, str], cpu: bool = False) -> list[Measurement]:
    """Turn netperf's selectors into measurements with units."""
    units = values.get("THROUGHPUT_UNITS", "")
    expected = "10^6bits/s" if test in STREAMS else "Trans/s"
    if units != expected:
        raise BenchmarkError(f"netperf reported {units or 'no'} throughput units for {test}, expected {expected}")
    facts, warning = confidence(values, cpu)
    extra = {
        k.lower(): values[k]
        for k in ("ELAPSED_TIME", "PROTOCOL", "TRANSPORT_MSS", "LSS_SIZE", "RSR_SIZE", "REQUEST_SIZE", "RESPONSE_SIZE")
        if k in values
    } | facts
    found: list[Measurement] = []
    if test == "UDP_STREAM":
        send_rate, recv_rate = _number(values, "LOCAL_SEND_THROUGHPUT"), _number(values, "THROUGHPUT")
        found += [
            Measurement("netperf", test, "send_throughput_mbps", send_rate, "Mbit/s", extra, warning=warning),
            Measurement("netperf", test, "recv_throughput_mbps", recv_rate, "Mbit/s", extra, warning=warning),
            _udp_loss(values, send_rate, recv_rate, facts),
        ]
    elif test in STREAMS:
        found.append(
            Measurement(
                "netperf", test, "throughput_mbps", _number(values, "THROUGHPUT"), "Mbit/s", extra, warning=warning
            )
        )
        key = "LOCAL_TRANSPORT_RETRANS" if test == "TCP_STREAM" else "REMOTE_TRANSPORT_RETRANS"
        if (retrans := _optional(values, key)) is not None:
            found.append(Measurement("netperf", test, "retransmits", retrans, "segments", headline=False))
    elif test in REQUEST_RESPONSE:
        found.append(
            Measurement(
                "netperf", test, "transaction_rate", _number(values, "THROUGHPUT"), "/s", extra, warning=warning
            )
        )
        for key, metric in LATENCIES:
            if (value := _optional(values, key)) is not None:
                found.append(Measurement("netperf", test, metric, value, "us", headline=metric == "latency_mean_us"))
    else:
        raise BenchmarkError(f"no parser for netperf test {test}")
    if cpu:
        found += _cpu(test, values)
    return found


def _udp_loss(values: dict[str, str], send_rate: float, recv_rate: float, facts: dict) -> Measurement:
    """The datagrams sent but not received, in %: from the counts of one run; over confidence iterations, from the
    mean rates, since netperf then reports the last iteration's send count and no receive count (0)."""
    if facts:
        lost = max(0.0, send_rate - recv_rate)
        return Measurement(
            "netperf", "UDP_STREAM", "loss_pct", 100.0 * lost / send_rate if send_rate else 0.0, "%", facts
        )
    sent, received = _number(values, "LOCAL_SEND_CALLS"), _number(values, "REMOTE_RECV_CALLS")
    lost = max(0.0, sent - received)
    return Measurement(
        "netperf",
        "UDP_STREAM",
        "loss_pct",
        100.0 * lost / sent if sent else 0.0,
        "%",
        {"sent_datagrams": int(sent), "received_datagrams": int(received), "lost_datagrams": int(lost)},
    )


def _cpu(test: str, values: dict[str, str]) -> list[Measurement]:
    unit, suffix = SD_UNITS.get(values.get("SD_UNITS", ""), (None, None))
    found = []
    for side in ("local", "remote"):
        util = _optional(values, f"{side.upper()}_CPU_UTIL")
        if util is None:
            raise BenchmarkError(f"netperf measured no {side} CPU utilization (-c/-C)")
        found.append(Measurement("netperf", test, f"{side}_cpu_pct", util, "%"))
        demand = _optional(values, f"{side.upper()}_SD")
        if demand is not None and unit:
            found.append(Measurement("netperf", test, f"{side}_sd_us_per_{suffix}", demand, unit, headline=False))
    return found
