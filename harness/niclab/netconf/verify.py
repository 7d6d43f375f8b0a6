"""Read back each node's network state and compare it with the plan.

One guest command per node prints, for every planned interface and port, its
MTU, carrier and qdisc, the bond's mode and ports with their link status, and
the ports' `ethtool -k` features. The comparison lists every difference at
once; the state itself goes into the cell's provenance.
"""

from __future__ import annotations

import shlex

from niclab import netem as netem_mod
from niclab import offloads
from niclab.netconf.plan import Iface


def state_script(ifaces: list[Iface]) -> str:
    lines = []
    for iface in ifaces:
        q = shlex.quote(iface.name)
        lines += [f"echo '[iface {iface.name}]'",
                  f"echo \"mtu=$(cat /sys/class/net/{q}/mtu)\"",
                  f"echo \"carrier=$(cat /sys/class/net/{q}/carrier 2>/dev/null)\"",
                  f"echo \"qdisc=$(tc qdisc show dev {q} | head -n 1)\""]
        if iface.bond is not None:
            lines += [f"echo \"bond_mode=$(cut -d' ' -f1 /sys/class/net/{q}/bonding/mode)\"",
                      f"echo \"bond_miimon=$(cat /sys/class/net/{q}/bonding/miimon)\"",
                      f"for s in $(cat /sys/class/net/{q}/bonding/slaves); do "
                      f"echo \"bond_port.$s=$(cat /sys/class/net/$s/bonding_slave/mii_status)\"; done"]
        for port in iface.ports:
            p = shlex.quote(port.ifname)
            lines += [f"echo '[port {port.ifname}]'",
                      f"echo \"mtu=$(cat /sys/class/net/{p}/mtu)\"",
                      f"echo \"carrier=$(cat /sys/class/net/{p}/carrier 2>/dev/null)\"",
                      f"ethtool -k {p} 2>/dev/null | sed -n 's/^\\([a-z0-9-]*\\): /feature.\\1=/p'"]
    return "\n".join(lines) + "\n"


def parse_state(text: str) -> dict[str, dict]:
    """'[iface bond0]' / '[port link1p0]' sections of key=value lines -> {'iface bond0': {...}}."""
    state: dict[str, dict] = {}
    section: dict | None = None
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = state.setdefault(line[1:-1], {})
        elif section is not None and "=" in line:
            key, _, value = line.partition("=")
            section[key] = value
    return state


def _int(value: str | None) -> int | None:
    return int(value) if value and value.strip().isdigit() else None


def mismatches(node: str, ifaces: list[Iface], state: dict[str, dict]) -> list[str]:
    problems = []
    for iface in ifaces:
        seen = state.get(f"iface {iface.name}", {})
        where = f"{node}/{iface.name}"
        if _int(seen.get("mtu")) != iface.mtu:
            problems.append(f"{where}: MTU is {seen.get('mtu') or 'unknown'}, asked {iface.mtu}")
        if seen.get("carrier") != "1":
            problems.append(f"{where}: no carrier")
        qdisc = seen.get("qdisc", "")
        if iface.netem is not None:
            problems += [f"{where}: netem {p}" for p in netem_mod.mismatches(iface.netem, netem_mod.parse_qdisc(qdisc))]
        elif " netem " in f" {qdisc} ":
            problems.append(f"{where}: a netem qdisc is installed that was not asked for: {qdisc}")
        if iface.bond is not None:
            if seen.get("bond_mode") != iface.bond.mode:
                problems.append(f"{where}: bonding mode is {seen.get('bond_mode')}, asked {iface.bond.mode}")
            ports = {k.split(".", 1)[1]: v for k, v in seen.items() if k.startswith("bond_port.")}
            for port in iface.ports:
                if port.ifname not in ports:
                    problems.append(f"{where}: {port.ifname} is not a port of the bond")
                elif ports[port.ifname] != "up":
                    problems.append(f"{where}: bond port {port.ifname} is {ports[port.ifname]}")
        for port in iface.ports:
            port_state = state.get(f"port {port.ifname}", {})
            if port_state.get("carrier") != "1":
                problems.append(f"{node}/{port.ifname}: no carrier")
            if iface.offloads:
                features = {k.split(".", 1)[1]: v for k, v in port_state.items() if k.startswith("feature.")}
                parsed = offloads.parse_features("\n".join(f"{k}: {v}" for k, v in features.items()))
                problems += [f"{node}/{port.ifname} ({port.model}): offload {p}"
                             for p in offloads.mismatches(iface.offloads, parsed)]
    return problems


def summary(state: dict[str, dict]) -> dict:
    """The state as provenance: features condensed to the settable ones' on/off."""
    out: dict[str, dict] = {}
    for section, values in state.items():
        entry = {k: v for k, v in values.items() if not k.startswith("feature.")}
        features = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("feature.")}
        if features:
            entry["offloads"] = {name: features[name] for name in offloads.SHORT_NAMES.values() if name in features}
        out[section] = entry
    return out
