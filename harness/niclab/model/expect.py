"""Expectations: `METRIC[SELECTOR] OP VALUE [UNIT]` checks on a cell's results.

    netperf.TCP_STREAM.throughput_mbps[link=1] > 0.5 Gbit/s

Selectors, loopback runs, units and the value checked (the mean over the repeats): docs/benchmarks.md,
"Expectations".
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from niclab.base.problems import did_you_mean, shown
from niclab.model.bench import all_metrics

OPERATORS = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "!=": operator.ne,
}
# unit -> (dimension, factor to the dimension's base unit)
UNITS = {
    "bit/s": ("rate", 1.0),
    "kbit/s": ("rate", 1e3),
    "Mbit/s": ("rate", 1e6),
    "Gbit/s": ("rate", 1e9),
    "kB/s": ("bytes", 1e3),
    "MB/s": ("bytes", 1e6),
    "GB/s": ("bytes", 1e9),
    "us": ("time", 1e-6),
    "ms": ("time", 1e-3),
    "s": ("time", 1.0),
}
SELECTOR_KEYS = {"link": "link", "from": "client", "to": "server", "peer": "peer", "family": "family"}
PEERS = ("self",)  # what peer= selects: runs over loopback
FAMILIES = ("4", "6")  # what family= selects: runs over IPv4 or IPv6 (without it, both, each judged alone)
GRAMMAR = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9_.]+)(?:\[(?P<selector>[^\]]*)\])?\s*(?P<op>>=|<=|==|!=|>|<)\s*"
    # atomic value and one optional unit: linear time, where "\s*(\S+)?\s*$" backtracked quadratically
    r"(?>(?P<value>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?))(?:\s*(?P<unit>\S+))?\s*$"
)


class ExpectationError(ValueError):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint


class Summary(Protocol):
    """What an expectation reads of a `summary` record (niclab.run.records.SummaryRecord)."""

    @property
    def name(self) -> str: ...
    @property
    def mean(self) -> float: ...
    @property
    def n(self) -> int: ...
    @property
    def client(self) -> str: ...
    @property
    def server(self) -> str: ...
    @property
    def link(self) -> int: ...
    @property
    def peer(self) -> Literal["self"] | None: ...
    @property
    def family(self) -> Literal[4, 6]: ...


def where(summary: Summary) -> str:
    """Where a summary was measured: `a->b on link 0`, `a over loopback (beside link 0)`, and ` over IPv6`."""
    over = " over IPv6" if summary.family == 6 else ""
    if summary.peer == "self":
        return f"{summary.client} over loopback{over} (beside link {summary.link})"
    return f"{summary.client}->{summary.server} on link {summary.link}{over}"


@dataclass(frozen=True)
class Expectation:
    text: str
    name: str
    selector: tuple[tuple[str, str], ...]  # (record field, value), peer apart
    op: str
    value: float  # in the metric's own unit
    unit: str  # the metric's unit
    peer: Literal["self"] | None = None  # runs over loopback (peer=self), or across a link (None)

    def holds(self, measured: float) -> bool:
        return OPERATORS[self.op](measured, self.value)

    def matches(self, summary: Summary) -> bool:
        return (
            summary.name == self.name
            and summary.peer == self.peer
            and all(str(getattr(summary, k)) == v for k, v in self.selector)
        )


def parse(text: str) -> Expectation:
    """Parse and check one expectation against the metrics niclab knows."""
    match = GRAMMAR.match(text) if isinstance(text, str) else None
    if match is None:
        raise ExpectationError(
            f"{shown(text)} is not an expectation",
            "write METRIC OP VALUE [UNIT], e.g. netperf.TCP_STREAM.throughput_mbps >= 100",
        )
    declared = {m.name: m for m in all_metrics()}
    name = match["name"]
    if name not in declared:
        hint = did_you_mean(name, declared)
        raise ExpectationError(f"unknown metric {shown(name)}", f"{hint + ' ' if hint else ''}run 'niclab metrics'")
    unit = declared[name].unit
    value = float(match["value"])
    if match["unit"] and match["unit"] != unit:
        given, own = UNITS.get(match["unit"]), UNITS.get(unit)
        if given is None or own is None or given[0] != own[0]:
            raise ExpectationError(f"{name} is in {unit}, not {match['unit']}", f"write the value in {unit}")
        value = float(f"{value * given[1] / own[1]:.12g}")  # 2 ms is 2000 us, not 2000.0000000000002
    selector = []
    peer: Literal["self"] | None = None
    for part in filter(None, (p.strip() for p in (match["selector"] or "").split(","))):
        key, sep, wanted = part.partition("=")
        if not sep or key.strip() not in SELECTOR_KEYS:
            raise ExpectationError(
                f"selector {shown(part)} is not understood",
                "use link=N, from=NODE, to=NODE, family=4 or 6, or peer=self",
            )
        if key.strip() == "peer":
            if wanted.strip() not in PEERS:
                raise ExpectationError(f"selector {shown(part)} is not understood", "peer=self is the only peer")
            peer = "self"
            continue
        if key.strip() == "family" and wanted.strip() not in FAMILIES:
            raise ExpectationError(f"selector {shown(part)} is not understood", "family=4 or family=6")
        selector.append((SELECTOR_KEYS[key.strip()], wanted.strip()))
    return Expectation(text.strip(), name, tuple(selector), match["op"], value, unit, peer)


@dataclass(frozen=True)
class Verdict:
    expectation: Expectation
    passed: bool
    measured: float | None  # the mean; None when nothing was measured
    samples: int
    where: str  # client->server on link N, or client over loopback (beside link N)

    def describe(self) -> str:
        e = self.expectation
        return described(e.text, self.measured, e.unit, self.samples, self.where)


def described(expectation: str, measured: float | None, unit: str, samples: int, where: str) -> str:
    """An expectation's check in one line, as a run ends and as `niclab show` reads it back."""
    if measured is None:
        return f"{expectation}: not measured"
    mean = f" (mean of {samples})" if samples > 1 else ""
    return f"{expectation}: measured {measured:.4g} {unit}{mean} {where}"


def evaluate(expectation: Expectation, summaries: Sequence[Summary]) -> list[Verdict]:
    """Check an expectation against a cell's summary records (one per metric and run group)."""
    matching = [s for s in summaries if expectation.matches(s)]
    if not matching:
        return [Verdict(expectation, False, None, 0, "")]
    return [
        Verdict(
            expectation,
            expectation.holds(s.mean),
            s.mean,
            s.n,
            where(s),
        )
        for s in matching
    ]
