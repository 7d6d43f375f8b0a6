"""Is each guest's clock running at the host's rate? Its benchmarks time themselves with it.

Each guest's uptime is read before its network is configured and after it is checked; its advance must lie
within the host's bounds for the two commands. A clock outside is watched a few seconds more (`settle`): one
that keeps time by then is recorded and the cell goes on, one that does not fails it, naming the node and its
rate (docs/architecture.md, "Each guest's clock is checked"; docs/measurements.md, "Guests' clocks").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from niclab.base.node import Node
from niclab.base.text import said

UPTIME = 'read -r up _ < /proc/uptime; echo "uptime=$up"'  # a shell line; seconds since the guest's kernel began
# A correct clock's advance lies within the host's bounds; beyond them it may stray by /proc/uptime's 10 ms
# steps and by the TSC's calibration (the kernel refines it to within 1 %): 2 %, then 50 ms.
RATE_SLACK = 0.02
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


def read(node: Node) -> Reading | str:
    """The node's uptime with the host's bounds, or why it could not be read."""
    before = time.monotonic()
    result = node.run(UPTIME, timeout=30, check=False)
    uptime = parse_uptime(result.stdout)
    if uptime is None:
        told = said(result.stderr or result.stdout, 200, last=False) or f"exit status {result.returncode}, no output"
        return f"{node.name}: its clock could not be read from /proc/uptime: {told}"
    return Reading(before, uptime, time.monotonic())


def problem(node: str, first: Reading, second: Reading) -> str | None:
    """Why the guest's clock cannot be trusted, or None. The guest read its clock somewhere inside each
    command, so its true advance lies between (second.before - first.after) and (second.after - first.before)."""
    shortest = max(0.0, second.before - first.after)
    longest = second.after - first.before
    advance = second.uptime - first.uptime
    if shortest * (1 - RATE_SLACK) - SLACK_S <= advance <= longest * (1 + RATE_SLACK) + SLACK_S:
        return None
    rate = advance / ((shortest + longest) / 2) if longest > 0 else float("inf")
    return (
        f"{node}: the guest's clock ran {rate:.2f}x the host's ({advance:.2f} s in {shortest:.2f}-{longest:.2f} s): "
        "its kernel calibrated its TSC wrongly while the host was busy, and the benchmarks time themselves with "
        "it; run again (with fewer guests at once, or KVM, it calibrates right)"
    )


def judge(first: Mapping[str, Reading | str], second: Mapping[str, Reading | str]) -> dict[str, str]:
    """node -> what is wrong with its clock (read as `first`, then as `second`), for the nodes with a problem,
    in node order."""
    found: dict[str, str] = {}
    for node in sorted(first):
        a, b = first[node], second.get(node, f"{node}: its clock was not read again")
        if isinstance(a, str) or isinstance(b, str):
            found[node] = "; ".join(why for why in (a, b) if isinstance(why, str))
        elif why := problem(node, a, b):
            found[node] = why
    return found


def problems(first: Mapping[str, Reading | str], second: Mapping[str, Reading | str]) -> list[str]:
    """What is wrong with each node's clock, in node order."""
    return list(judge(first, second).values())


SETTLE_WINDOW_S = 2.0  # long enough to tell a clock 1.3x fast from the host's, whatever the agent's delays
SETTLE_TRIES = 3


def settle(
    read_all: Callable[[Collection[str]], Mapping[str, Reading | str]],
    nodes: Collection[str],
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str]:
    """Watch the clocks that ran off during a set-up that otherwise succeeded: the kernel's watchdog moves a
    guest whose TSC calibrated wrongly to the HPET within seconds, and from then on it keeps time. Up to
    SETTLE_TRIES windows of SETTLE_WINDOW_S; returns node -> problem for the clocks still off after them."""
    off = {node: "" for node in nodes}
    for _ in range(SETTLE_TRIES):
        first = read_all(list(off))
        sleep(SETTLE_WINDOW_S)
        off = judge(first, read_all(list(off)))
        if not off:
            break
    return off
