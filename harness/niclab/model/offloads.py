"""NIC offload settings (ethtool -K), and a read-back of `ethtool -k`.

A scenario names features by ethtool's short names (tso, gro, …) or by the
long names `ethtool -k` prints. Each is turned on or off in the guest, then
read back: a feature the driver cannot change shows "[fixed]", and niclab
reports it rather than measuring something other than what was asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from niclab.base.problems import closest, shown

SHORT_NAMES = {
    "rx": "rx-checksumming",
    "tx": "tx-checksumming",
    "sg": "scatter-gather",
    "tso": "tcp-segmentation-offload",
    "ufo": "udp-fragmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "lro": "large-receive-offload",
    "rxvlan": "rx-vlan-offload",
    "txvlan": "tx-vlan-offload",
    "ntuple": "ntuple-filters",
    "rxhash": "receive-hashing",
}
SHORT_OF = {long: short for short, long in SHORT_NAMES.items()}
LONG_NAMES = set(SHORT_NAMES.values()) | {
    "tx-nocache-copy",
    "rx-gro-hw",
    "rx-gro-list",
    "rx-udp-gro-forwarding",
    "highdma",
    "rx-fcs",
    "rx-all",
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-checksum-ipv4",
    "tx-checksum-ip-generic",
    "tx-checksum-ipv6",
    "tx-scatter-gather",
    "tx-udp-segmentation",
    "rx-vlan-filter",
}


def long_name(feature: str) -> str:
    return SHORT_NAMES.get(feature, feature)


def check_feature(feature: str) -> str | None:
    """None if ethtool knows the feature, else a message with a suggestion."""
    if feature in SHORT_NAMES or feature in LONG_NAMES:
        return None
    close = closest(feature, [*SHORT_NAMES, *LONG_NAMES])  # within the file's budget of suggestions
    hint = f"; did you mean '{close}'?" if close else ""
    return f"unknown offload feature {shown(feature)}{hint} (ethtool -K names: {', '.join(SHORT_NAMES)})"


def parse_switch(feature: str, value: Any) -> bool:
    """YAML reads on/off as booleans; "on"/"off" strings are fine too."""
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("on", "off"):
        return str(value).lower() == "on"
    text = repr(value)
    raise ValueError(f"{text if len(text) <= 60 else text[:28] + '...' + text[-28:]} is neither on nor off")


def ethtool_args(settings: dict[str, bool]) -> list[str]:
    """`ethtool -K` words: ethtool's own flags by their short names (gro for generic-receive-offload, the
    name `-k` prints), the kernel's features by theirs."""
    return [
        word for feature, on in settings.items() for word in (SHORT_OF.get(feature, feature), "on" if on else "off")
    ]


@dataclass(frozen=True)
class _Line:
    name: str
    on: bool
    fixed: bool
    wanted: bool  # what was asked of the driver: "off [requested on]" is off only while something holds it off
    group: str | None  # the group it is indented under


def _feature_lines(text: str) -> list[_Line]:
    """The feature lines of `ethtool -k` output."""
    lines: list[_Line] = []
    group = None
    for line in text.splitlines():
        name, sep, rest = line.strip().partition(":")
        if not sep or not rest.strip() or rest.split()[0] not in ("on", "off"):
            continue
        on = rest.split()[0] == "on"
        requested = re.search(r"\[requested (on|off)\]", rest)
        under = group if line[:1].isspace() else None
        lines.append(_Line(name, on, "[fixed]" in rest, requested[1] == "on" if requested else on, under))
        if under is None:
            group = name
    return lines


def parse_features(text: str) -> dict[str, tuple[bool, bool]]:
    """`ethtool -k` output -> feature: (on, fixed).

    A group (tcp-segmentation-offload) whose indented sub-features are all
    [fixed] is fixed too, though ethtool does not mark the group line.
    """
    lines = _feature_lines(text)
    found = {line.name: (line.on, line.fixed) for line in lines}
    children: dict[str, list[bool]] = {}
    for line in lines:
        if line.group is not None:
            children.setdefault(line.group, []).append(line.fixed)
    for name, parts in children.items():
        found[name] = (found[name][0], found[name][1] or all(parts))
    return found


def changeable(text: str) -> dict[str, bool]:
    """`ethtool -k` output -> each feature the driver lets change -> on, as asked of the driver.

    Features by the names `ethtool -k` prints, without a group's line
    (tcp-segmentation-offload): its indented parts say more (tso turns
    tx-tcp-mangleid-segmentation on too, which a driver may have started with
    off). The state is the one asked of the driver ("off [requested on]" is
    on), which does not move when another setting holds a feature off.
    Setting all of these back gives a port the offloads it started with,
    whatever names changed them.
    """
    return _changeable(_feature_lines(text))


def _changeable(lines: list[_Line]) -> dict[str, bool]:
    groups = {line.group for line in lines if line.group is not None}
    return {line.name: line.wanted for line in lines if not line.fixed and line.name not in groups}


#: Features the kernel itself turns off on a port (a bond's port, a forwarding host): not left by a cell.
KERNEL_MANAGED = frozenset({"large-receive-offload", "rx-gro-hw"})


def leftovers(named: dict[str, bool], text: str, started: dict[str, bool]) -> list[str]:
    """Features of a port that differ from what the driver started with, other than those a cell names.

    `named`: the cell's offload settings; `text`: the port's `ethtool -k`
    now; `started`: `changeable` before any cell changed it. A difference is
    a leftover of an earlier cell on the same boot, and would be measured.
    """
    lines = _feature_lines(text)
    mine = {long_name(feature) for feature in named}
    mine |= {line.name for line in lines if line.group in mine}
    now = _changeable(lines)
    return [
        f"{feature} is {'on' if now[feature] else 'off'}, the driver started with {'on' if on else 'off'} "
        "(left by an earlier cell on this boot)"
        for feature, on in started.items()
        if feature in now and now[feature] != on and feature not in mine and feature not in KERNEL_MANAGED
    ]


def mismatches(wanted: dict[str, bool], features: dict[str, tuple[bool, bool]]) -> list[str]:
    problems = []
    for feature, on in wanted.items():
        state = features.get(long_name(feature))
        if state is None:
            problems.append(f"{feature}: the driver does not report it")
        elif state[0] != on:
            why = "fixed by the driver" if state[1] else "the driver refused the change"
            problems.append(f"{feature}: asked {'on' if on else 'off'}, is {'on' if state[0] else 'off'} ({why})")
    return problems
