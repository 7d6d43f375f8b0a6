"""NIC offload settings (ethtool -K), and a read-back of `ethtool -k`.

A scenario names features by ethtool's short names (tso, gro, …) or by the
long names `ethtool -k` prints. Each is turned on or off in the guest, then
read back: a feature the driver cannot change shows "[fixed]", and niclab
reports it rather than measuring something other than what was asked.
"""

from __future__ import annotations

from typing import Any

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
    from niclab.scenario.errors import closest, shown  # not at the top: niclab.scenario imports this module

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
    """`ethtool -K` words. It takes short names and the kernel's names, not the long names `-k` prints for
    ethtool's own flags (generic-receive-offload): those go as their short names (gro)."""
    return [
        word for feature, on in settings.items() for word in (SHORT_OF.get(feature, feature), "on" if on else "off")
    ]


def _feature_lines(text: str) -> list[tuple[str, bool, bool, str | None]]:
    """`ethtool -k` lines: (feature, on, fixed, the group it is indented under or None)."""
    lines: list[tuple[str, bool, bool, str | None]] = []
    group = None
    for line in text.splitlines():
        name, sep, rest = line.strip().partition(":")
        if not sep or not rest.strip() or rest.split()[0] not in ("on", "off"):
            continue
        under = group if line[:1].isspace() else None
        lines.append((name, rest.split()[0] == "on", "[fixed]" in rest, under))
        if under is None:
            group = name
    return lines


def parse_features(text: str) -> dict[str, tuple[bool, bool]]:
    """`ethtool -k` output -> feature: (on, fixed).

    A group (tcp-segmentation-offload) whose indented sub-features are all
    [fixed] is fixed too, though ethtool does not mark the group line.
    """
    lines = _feature_lines(text)
    found = {name: (on, fixed) for name, on, fixed, _ in lines}
    children: dict[str, list[bool]] = {}
    for _, _, fixed, group in lines:
        if group is not None:
            children.setdefault(group, []).append(fixed)
    for name, parts in children.items():
        found[name] = (found[name][0], found[name][1] or all(parts))
    return found


def changeable(text: str) -> dict[str, bool]:
    """`ethtool -k` output -> each feature the driver lets change, by its kernel name -> on.

    A group's line (tcp-segmentation-offload) is left out: its indented
    sub-features say more (tso turns tx-tcp-mangleid-segmentation on too, which
    a driver may have started with off). Setting all of these back gives a
    port the offloads it started with, whatever short names changed them.
    """
    lines = _feature_lines(text)
    groups = {group for *_, group in lines if group is not None}
    return {name: on for name, on, fixed, _ in lines if not fixed and name not in groups}


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
