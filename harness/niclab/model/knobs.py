"""Driver knobs set with ethtool: interrupt coalescing (-C), ring sizes (-G), queues (-L).

Names are checked when the scenario is read; the guest is asked what its driver supports before anything is
set, and what it reports afterwards is compared with what was asked (docs/scenarios.md, "Links").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from niclab.base.problems import did_you_mean, listing, shown


@dataclass(frozen=True)
class Kind:
    key: str  # the scenario's word: coalesce
    set_flag: str  # ethtool -C
    show_flag: str  # ethtool -c
    names: tuple[str, ...]  # what ethtool calls each setting
    switches: tuple[str, ...] = ()  # those among them that are on/off
    labels: tuple[tuple[str, str], ...] = ()  # how `ethtool -g/-l` prints a name (RX Mini: rx-mini)
    example: str = ""

    def shown(self) -> str:
        return f"ethtool {self.show_flag}"


_USECS_FRAMES = tuple(
    f"{d}-{what}{when}" for when in ("", "-irq", "-low", "-high") for d in ("rx", "tx") for what in ("usecs", "frames")
)
COALESCE = Kind(
    "coalesce",
    "-C",
    "-c",
    ("adaptive-rx", "adaptive-tx", "sample-interval", "stats-block-usecs", "pkt-rate-low", "pkt-rate-high")
    + _USECS_FRAMES
    + ("cqe-mode-rx", "cqe-mode-tx"),
    switches=("adaptive-rx", "adaptive-tx", "cqe-mode-rx", "cqe-mode-tx"),
    # ethtool -c prints the frame counts of the low and high rates in the singular
    labels=tuple((f"{d}-frame-{when}", f"{d}-frames-{when}") for when in ("low", "high") for d in ("rx", "tx")),
    example="{rx-usecs: 100}",
)
RINGS = Kind(
    "rings",
    "-G",
    "-g",
    ("rx", "rx-mini", "rx-jumbo", "tx"),
    labels=(("RX", "rx"), ("RX Mini", "rx-mini"), ("RX Jumbo", "rx-jumbo"), ("TX", "tx")),
    example="{rx: 256, tx: 256}",
)
QUEUES = Kind(
    "queues",
    "-L",
    "-l",
    ("rx", "tx", "other", "combined"),
    labels=(("RX", "rx"), ("TX", "tx"), ("Other", "other"), ("Combined", "combined")),
    example="{combined: 2}",
)
KINDS = {kind.key: kind for kind in (COALESCE, RINGS, QUEUES)}
MAX_VALUE = 2**32 - 1


def check_setting(kind: Kind, name: Any, value: Any) -> tuple[int | bool | None, str | None, str]:
    """(the value, None) or (None, the problem, its hint) for one `name: value` of a knob."""
    if name not in kind.names:
        hint = did_you_mean(str(name), kind.names)
        names = f"({kind.shown()} names)" if hint else f"{kind.shown()} names: {listing(kind.names, 30)}"
        return None, f"unknown {kind.key} setting {shown(name)}", f"{hint + ' ' if hint else ''}{names}"
    if name in kind.switches:
        if isinstance(value, bool):
            return value, None, ""
        if isinstance(value, str) and value.lower() in ("on", "off"):  # "on" quoted, which YAML keeps a word
            return value.lower() == "on", None, ""
        return None, f"{kind.key} {name} is on or off, not {shown(value)}", ""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VALUE:
        return None, f"{kind.key} {name} is a whole number from 0 to {MAX_VALUE}, not {shown(value)}", ""
    return value, None, ""


def set_args(settings: dict[str, int | bool]) -> list[str]:
    return [w for name, value in settings.items() for w in (name, word(value))]


def word(value: int | bool | str) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass(frozen=True)
class Shown:
    """What `ethtool -c/-g/-l` printed for a port: current values, maximums; None where it says n/a."""

    current: dict[str, str | None]
    maximum: dict[str, str | None]
    error: str = ""  # what ethtool said instead (netlink error: Operation not supported)

    def supported(self, kind: Kind) -> list[str]:
        if kind is COALESCE:
            return [n for n in kind.names if self.current.get(n) is not None]
        return [n for n in kind.names if self.maximum.get(n) not in (None, "0")]


def parse_show(kind: Kind, text: str) -> Shown:
    """Parse `ethtool -c` (name: value lines; 'Adaptive RX: on  TX: off') or `-g`/`-l` (maximums, then current)."""
    current: dict[str, str | None] = {}
    maximum: dict[str, str | None] = {}
    labels = dict(kind.labels)
    into = current
    error = ""
    for line in text.splitlines():
        line = line.strip()
        if "error" in line.lower() or "not supported" in line.lower():
            error = error or line
        if line.startswith("Pre-set maximums"):
            into = maximum
            continue
        if line.startswith("Current hardware settings"):
            into = current
            continue
        pair = re.fullmatch(r"(Adaptive|CQE mode) RX:\s*(\S+)\s+TX:\s*(\S+)", line)
        if pair:
            prefix = "adaptive" if pair[1] == "Adaptive" else "cqe-mode"
            current[f"{prefix}-rx"], current[f"{prefix}-tx"] = _value(pair[2]), _value(pair[3])
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue
        name = labels.get(name.strip(), name.strip())
        if name in kind.names:
            into[name] = _value(value.strip())
    return Shown(current, maximum, error)


def _value(text: str) -> str | None:
    return None if text in ("n/a", "") else text


def unsupported(kind: Kind, settings: dict[str, int | bool], shown: Shown, driver: str) -> list[str]:
    """Why the driver cannot take these settings (before any is set), or nothing."""
    supported = shown.supported(kind)
    problems = []
    for name, value in settings.items():
        if name not in supported:
            if supported:
                what = f"it supports {', '.join(supported)} ({kind.shown()})"
            else:
                what = f"it supports no {kind.key} setting ({kind.shown()}: {shown.error or 'all n/a'})"
            problems.append(f"the {driver} driver does not support {kind.key} {name}; {what}")
        elif not isinstance(value, bool) and (top := shown.maximum.get(name)) is not None and value > int(top):
            problems.append(f"{kind.key} {name} {value} is above the {driver} driver's maximum, {top} ({kind.shown()})")
    return problems


ROUNDING = 0.02  # a driver may keep a value as the hardware does (e1000: rx-usecs as an interrupt rate)


def mismatches(kind: Kind, settings: dict[str, int | bool], shown: Shown) -> list[str]:
    """What the guest reports that differs from what was set (beyond a driver's rounding, 2 %)."""
    problems = []
    for name, value in settings.items():
        seen = shown.current.get(name)
        if seen == word(value):
            continue
        if not isinstance(value, bool) and seen is not None and seen.isdigit():
            if abs(int(seen) - value) <= ROUNDING * value:
                continue
        problems.append(f"{kind.key} {name} is {seen or 'n/a'}, asked {word(value)}")
    return problems
