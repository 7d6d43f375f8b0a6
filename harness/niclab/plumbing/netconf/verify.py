"""Read back each node's network state and compare it with the plan.

One guest command per node prints, for every planned interface and port, its
MTU, carrier and qdisc, the bond's mode and ports with their link status, and
the ports' `ethtool -k` features. The comparison lists every difference at
once; the state itself goes into the cell's provenance.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping

from niclab.model import knobs, nics, offloads
from niclab.model import netem as netem_mod
from niclab.plumbing.guestsh import KV, sections
from niclab.plumbing.netconf.plan import PREFIX, PREFIX6, Iface
from niclab.plumbing.netconf.script import port_knobs

# ethtool -k lines as feature.NAME=VALUE, and the indented parts of a group as
# subfeature.NAME=VALUE (a group is fixed when all its parts are).
FEATURE_AWK = (
    '{ part = ($0 ~ /^[ \\t]/); sub(/^[ \\t]+/, ""); k = $0; sub(/:.*/, "", k); v = $0; '
    'sub(/^[^:]*: */, "", v); if (v != "") print (part ? "subfeature." : "feature.") k "=" v }'
)


# `ip -o addr show scope global` lines as addr.DEV.ADDRESS/PREFIX=FLAGS (tentative, dadfailed: none when usable)
ADDR_AWK = (
    '{ dev = $2; sub(/@.*/, "", dev); flags = ""; for (i = 5; i <= NF && $i != "valid_lft"; i++) '
    'if ($i == "tentative" || $i == "dadfailed") flags = flags $i " "; print "addr." dev "." $4 "=" flags }'
)


def state_script(ifaces: list[Iface]) -> str:
    lines = [KV, "echo '[addresses]'", f"ip -o addr show scope global | awk '{ADDR_AWK}'"]
    for iface in ifaces:
        q = shlex.quote(iface.name)
        lines += [
            f"echo '[iface {iface.name}]'",
            f"kv mtu /sys/class/net/{q}/mtu",
            f"kv carrier /sys/class/net/{q}/carrier",
            f'echo "qdisc=$(tc qdisc show dev {q} | head -n 1)"',
        ]
        if iface.bond is not None:
            lines += [
                f"echo \"bond_mode=$(cut -d' ' -f1 /sys/class/net/{q}/bonding/mode)\"",
                f"kv bond_miimon /sys/class/net/{q}/bonding/miimon",
                f"slaves=; read -r slaves 2>/dev/null < /sys/class/net/{q}/bonding/slaves || true",
                "for s in $slaves; do kv bond_port.$s /sys/class/net/$s/bonding_slave/mii_status; done",
            ]
        for port in iface.ports:
            p = shlex.quote(port.ifname)
            lines += [
                f"echo '[port {port.ifname}]'",
                f"kv mtu /sys/class/net/{p}/mtu",
                f"kv carrier /sys/class/net/{p}/carrier",
                f"echo \"driver=$(ethtool -i {p} 2>/dev/null | sed -n 's/^driver: //p')\"",
                f"ethtool -k {p} 2>/dev/null | awk '{FEATURE_AWK}'",
            ]
            for kind in dict.fromkeys(k for k, _, _ in port.knobs):
                lines.append(
                    f"echo '[knob {port.ifname} {kind}]'; ethtool {knobs.KINDS[kind].show_flag} {p} 2>&1 || true"
                )
    return "\n".join(lines) + "\n"


def read_knobs(text: str) -> dict[str, dict[str, knobs.Shown]]:
    """The '[knob PORT KIND]' sections of a script's output: port -> kind -> what ethtool showed."""
    out: dict[str, dict[str, knobs.Shown]] = {}
    for section, lines in sections(text)[1].items():
        word, _, rest = section.partition(" ")
        port, _, kind = rest.partition(" ")
        if word == "knob" and kind in knobs.KINDS:
            out.setdefault(port, {})[kind] = knobs.parse_show(knobs.KINDS[kind], "\n".join(lines))
    return out


def knob_problems(node: str, ifaces: list[Iface], shown: dict[str, dict[str, knobs.Shown]], before: bool) -> list[str]:
    """Before setting (`before`): what the drivers cannot take. After: what differs from what was asked."""
    problems = []
    for iface in ifaces:
        for port in iface.ports:
            model = nics.lookup(port.model)
            driver = model.driver if model else port.model
            for kind, settings in port_knobs(port).items():
                seen = shown.get(port.ifname, {}).get(kind)
                where = f"{node}/{port.ifname} ({port.model})"
                if seen is None:
                    problems.append(f"{where}: {knobs.KINDS[kind].shown()} printed nothing")
                elif before:
                    problems += [f"{where}: {p}" for p in knobs.unsupported(knobs.KINDS[kind], settings, seen, driver)]
                else:
                    problems += [f"{where}: {p}" for p in knobs.mismatches(knobs.KINDS[kind], settings, seen)]
    return problems


def knobs_at_value(ifaces: list[Iface], shown: dict[str, dict[str, knobs.Shown]]) -> frozenset[tuple[str, str, str]]:
    """(port, kind, name) of each knob the driver already has at the value asked: nothing to set."""
    return frozenset(
        (port.ifname, kind, name)
        for iface in ifaces
        for port in iface.ports
        for kind, settings in port_knobs(port).items()
        if (seen := shown.get(port.ifname, {}).get(kind)) is not None
        for name, value in settings.items()
        if not knobs.mismatches(knobs.KINDS[kind], {name: value}, seen)
    )


def knob_readback(ifaces: list[Iface], shown: dict[str, dict[str, knobs.Shown]]) -> dict[str, dict]:
    """For provenance: 'port NAME' -> kind -> every value the driver reports (not only those set)."""
    out: dict[str, dict] = {}
    for iface in ifaces:
        for port in iface.ports:
            for kind, seen in shown.get(port.ifname, {}).items():
                values = {n: v for n, v in seen.current.items() if v is not None}
                out.setdefault(f"port {port.ifname}", {})[kind] = values
    return out


def parse_state(text: str) -> dict[str, dict]:
    """'[iface bond0]' / '[port link1p0]' sections of key=value lines -> {'iface bond0': {...}}."""
    return {
        name: dict(line.partition("=")[::2] for line in lines if "=" in line)
        for name, lines in sections(text)[1].items()
        if not name.startswith("knob ")  # read_knobs reads those
    }


def _ethtool_text(section: dict[str, str]) -> str:
    """The feature lines of a port's state, back in `ethtool -k` form (parts indented)."""
    lines = []
    for key, value in section.items():
        kind, _, name = key.partition(".")
        if kind in ("feature", "subfeature"):
            indent = "\t" if kind == "subfeature" else ""
            lines.append(f"{indent}{name}: {value}")
    return "\n".join(lines)


def _int(value: str | None) -> int | None:
    return int(value) if value and value.strip().isdigit() else None


def mismatches(
    node: str,
    ifaces: list[Iface],
    state: dict[str, dict],
    drivers: Mapping[tuple[str, int, int], str] | None = None,
    started: Mapping[str, dict[str, bool]] | None = None,
    proven: Collection[tuple[str, int, int]] = (),
) -> list[str]:
    """What differs from the plan. `drivers`: the driver each port must bind, where the backend says
        (a lab's model emulated by a catalog one binds the stand-in's driver); else its NIC model's.
        `started`: port -> offload feature -> on, as the driver started, for ports an earlier cell on the
        same boot may have changed (niclab.run.rigs.Booted.baseline). `proven`: ports whose module was checked
    already (netconf.modules: a scenario's `driver:`), whose driver name is not the NIC model's."""
    problems = []
    addresses = state.get("addresses", {})
    for iface in ifaces:
        seen = state.get(f"iface {iface.name}", {})
        where = f"{node}/{iface.name}"
        for address in filter(None, (f"{iface.address}/{PREFIX}", iface.address6 and f"{iface.address6}/{PREFIX6}")):
            flags = addresses.get(f"addr.{iface.name}.{address}")
            if flags is None:
                problems.append(f"{where}: has no address {address}")
            elif flags.strip():
                problems.append(f"{where}: address {address} is {flags.strip()}")
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
            model = nics.lookup(port.model)
            wanted = (drivers or {}).get(port.key) or (model.driver if model else None)
            if wanted is not None and port.key not in proven and port_state.get("driver") != wanted:
                problems.append(
                    f"{node}/{port.ifname}: driver {port_state.get('driver') or 'none'} is bound, "
                    f"the {port.model} {'model' if nics.is_emulated(port.model) else 'card'} needs {wanted}"
                )
            features = _ethtool_text(port_state)
            if iface.offloads:
                problems += [
                    f"{node}/{port.ifname} ({port.model}): offload {p}"
                    for p in offloads.mismatches(iface.offloads, offloads.parse_features(features))
                ]
            if started and started.get(port.ifname):
                problems += [
                    f"{node}/{port.ifname} ({port.model}): offload {p}"
                    for p in offloads.leftovers(iface.offloads, features, started[port.ifname])
                ]
    return problems


def summary(state: dict[str, dict]) -> dict:
    """The state as provenance: features condensed to the settable ones' on/off."""
    out: dict[str, dict] = {}
    for section, values in state.items():
        entry = {k: v for k, v in values.items() if not k.startswith(("feature.", "subfeature."))}
        features = offloads.parse_features(_ethtool_text(values))
        if features:
            entry["offloads"] = {
                name: ("on" if features[name][0] else "off") + (" [fixed]" if features[name][1] else "")
                for name in offloads.SHORT_NAMES.values()
                if name in features
            }
        out[section] = entry
    return out
