"""Is each guest's clock running at the host's rate? Its benchmarks time themselves with it.

Under TCG a guest calibrates its TSC against the emulated PIT while it boots; a
vCPU starved by its neighbours (eight guests on two cores) now and then gets a
frequency several times too low, and its clock then runs that many times too
fast (seen: 5.85x): a 5 s netperf run is over in 0.85 s and its throughput is
multiplied. The image's kernel keeps the clocksource watchdog (no
`tsc=reliable`), which compares the TSC with the HPET and moves such a guest
to the HPET within seconds. This check proves it did: the guest's uptime is
read twice, a second or so apart (before and after the network check), and
its advance must lie within what the host saw between the two commands; a
clock outside that fails the cell, naming the node and its rate, instead of
recording figures measured with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from niclab.base.node import Node

UPTIME = 'read -r up _ < /proc/uptime; echo "uptime=$up"'  # a shell line; seconds since the guest's kernel began
SLACK = 1.5  # how far the guest's advance may stray beyond the host's bounds (rate), then 50 ms
SLACK_S = 0.05


@dataclass(frozen=True)
class Reading:
    """A guest's uptime and the host's monotonic clock just before and just after the command that read it."""

    before: float
    uptime: float
    after: float


def parse_uptime(text: str) -> float | None:
    """The `uptime=` line of a script's output (None if there is none)."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key == "uptime":
            try:
                return float(value)
            except ValueError:
                return None
    return None


def read(node: Node) -> Reading | None:
    before = time.monotonic()
    result = node.run(UPTIME, timeout=30, check=False)
    uptime = parse_uptime(result.stdout)
    return Reading(before, uptime, time.monotonic()) if uptime is not None else None


def problem(node: str, first: Reading, second: Reading) -> str | None:
    """Why the guest's clock cannot be trusted, or None. The guest read its clock somewhere inside each
    command, so its true advance lies between (second.before - first.after) and (second.after - first.before)."""
    shortest = max(0.0, second.before - first.after)
    longest = second.after - first.before
    advance = second.uptime - first.uptime
    if shortest / SLACK - SLACK_S <= advance <= longest * SLACK + SLACK_S:
        return None
    rate = advance / ((shortest + longest) / 2) if longest > 0 else float("inf")
    return (
        f"{node}: the guest's clock ran {rate:.2f}x the host's ({advance:.2f} s in {shortest:.2f}-{longest:.2f} s): "
        "its kernel calibrated its TSC wrongly while the host was busy, and the benchmarks time themselves with "
        "it; run again (with fewer guests at once, or KVM, it calibrates right)"
    )


def problems(first: Mapping[str, Reading | None], second: Mapping[str, Reading | None]) -> list[str]:
    found = []
    for node in sorted(first):
        a, b = first.get(node), second.get(node)
        if a is not None and b is not None and (why := problem(node, a, b)):
            found.append(why)
    return found
