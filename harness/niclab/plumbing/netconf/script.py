"""The shell scripts that configure one node's interfaces in its guest, and undo them between cells.

`node_script`: ports found by MAC and renamed, MTU and offloads, bonds, addresses, netem on egress, then a
wait for carrier. `reset_script` undoes what an earlier cell set on a rig the next cell reuses
(docs/architecture.md, "Cells that differ only in what netconf sets share one boot").
"""

from __future__ import annotations

import re
import shlex

from niclab.model import knobs, nics, offloads
from niclab.model.scenario import Bond
from niclab.model.topology import Port
from niclab.plumbing.guestsh import BY_MAC
from niclab.plumbing.netconf.plan import PREFIX, PREFIX6, Iface

CARRIER_TIMEOUT_S = 20
Unchanged = frozenset[tuple[str, str, str]]  # (port, kind, name) of knobs already at their value

# `ip` commands wait in $b, one per line, until ip_flush runs them all in one `ip -batch -`; a command that fails
# stops the batch and the script, and the message shows the batch (ip names the failed line: "Command failed -:N").
IP_BATCH = (
    "nl='\n'; b=\n"
    'ip_flush() { [ -n "$b" ] || return 0; printf %s "$b" | ip -batch - || '
    '{ printf "in the ip batch:\\n%s" "$b" >&2; exit 1; }; b=; }'
)
IP_FLUSH = "ip_flush"
_IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # niclab's names (link0, bond2, link2p1): nothing to quote in a batch


def _name(ifname: str) -> str:
    """An interface name niclab gave, checked to need no quoting (neither in the shell nor in an ip batch)."""
    if not _IFNAME.fullmatch(ifname):
        raise ValueError(f"not an interface name niclab gives: {ifname!r}")
    return ifname


def _ip(*commands: str) -> str:
    """The shell line that adds `ip` commands (without the `ip`) to the batch in $b."""
    return 'b="${b}' + "".join(f"{c}${{nl}}" for c in commands) + '"'


def _offloads_line(ifname: str, settings: dict[str, bool]) -> str:
    # A feature the driver cannot change is reported by the read-back, not here.
    return f"ethtool -K {shlex.quote(ifname)} {' '.join(offloads.ethtool_args(settings))} >/dev/null 2>&1 || true"


def _ports_script(iface: Iface, macs: dict[tuple[str, int, int], str], unchanged: Unchanged) -> list[str]:
    lines = []
    for port in iface.ports:
        name = _name(port.ifname)
        lines += [
            f"dev=$(by_mac {macs[port.key]})",
            f'[ "$dev" = {name} ] || {_ip("link set dev $dev down", "link set dev $dev name " + name)}',
            _ip(f"link set dev {name} mtu {iface.mtu}"),
        ]
        ethtool = []
        if iface.offloads:
            ethtool.append(_offloads_line(port.ifname, iface.offloads))
        for kind, settings in port_knobs(port).items():  # the driver's support was checked before (knobs_script)
            # a setting already at its value is left alone: a driver that shows a knob may not set it (vmxnet3's
            # channels), and asking for no change is no reason to fail
            settings = {n: v for n, v in settings.items() if (port.ifname, kind, n) not in unchanged}
            if settings:
                flag, args = knobs.KINDS[kind].set_flag, " ".join(knobs.set_args(settings))
                found = nics.lookup(port.model)
                refused = (
                    f"{port.ifname}: the {found.driver if found else port.model} driver refused ethtool {flag} {args}"
                )
                ethtool.append(f"ethtool {flag} {name} {args} || {{ echo {shlex.quote(refused)} >&2; exit 1; }}")
        if ethtool:  # ethtool finds the port by its new name: the batch so far goes first
            lines += [IP_FLUSH, *ethtool]
    return lines


def port_knobs(port: Port) -> dict[str, dict[str, int | bool]]:
    """kind -> name -> value of the port's ethtool knobs (Port.knobs holds them as words)."""
    out: dict[str, dict[str, int | bool]] = {}
    for kind, name, word in port.knobs:
        out.setdefault(kind, {})[name] = word == "on" if word in ("on", "off") else int(word)
    return out


def knobs_script(ports: dict[str, tuple[str, list[str]]]) -> str:
    """Each port's `ethtool -c/-g/-l` as its knobs need (ifname -> (MAC, kinds)), under '[knob NAME KIND]'.
    Ports are found by MAC: before configuration they may not have their name yet."""
    lines = [BY_MAC]
    for name, (mac, kinds) in ports.items():
        for kind in kinds:
            lines.append(f"echo '[knob {name} {kind}]'; ethtool {knobs.KINDS[kind].show_flag} \"$(by_mac {mac})\" 2>&1")
    return "\n".join(lines) + "\ntrue\n"  # a driver that refuses ethtool -c is an answer, not a failure


def _bond_script(iface: Iface, bond: Bond) -> list[str]:
    name = _name(iface.name)
    options = f"mode {bond.mode} miimon {bond.miimon}"
    if bond.xmit_hash_policy:
        options += f" xmit_hash_policy {bond.xmit_hash_policy}"
    lines = [_ip(f"link add {name} type bond {options}")]
    for port in iface.ports:
        lines.append(_ip(f"link set dev {_name(port.ifname)} down", f"link set dev {_name(port.ifname)} master {name}"))
    lines.append(_ip(f"link set dev {name} mtu {iface.mtu}"))
    return lines


def _l3_script(iface: Iface) -> list[str]:
    name = _name(iface.name)
    # global scope only: the IPv6 link-local address stays (it comes back only when the link goes down and up)
    addresses = [f"addr flush dev {name} scope global", f"addr add {iface.address}/{PREFIX} dev {name}"]
    if iface.address6 is not None:
        # nodad: the plan gives each address once per segment, and DAD would hold it tentative for a second
        addresses.append(f"addr add {iface.address6}/{PREFIX6} dev {name} nodad")
    lines = [_ip(*addresses)]
    up = dict.fromkeys([*(port.ifname for port in iface.ports), iface.name])  # a plain port is its own interface
    lines.append(_ip(*(f"link set dev {_name(n)} up" for n in up)))
    if iface.netem is not None:
        # `replace` would keep settings of an earlier netem: start from nothing.
        lines += [
            IP_FLUSH,
            f"tc qdisc del dev {name} root >/dev/null 2>&1 || true",
            f"tc qdisc add dev {name} root netem {' '.join(iface.netem.tc_args())}",
        ]
    return lines


def node_script(ifaces: list[Iface], macs: dict[tuple[str, int, int], str], unchanged: Unchanged = frozenset()) -> str:
    """The node's whole configuration; `unchanged`: knobs (port, kind, name) the driver already has as asked.

    Its `ip` commands are gathered in `$b` and run by one `ip -batch -` (IP_BATCH) wherever another program
    needs what they set, and at the end: each start of `ip` costs about 60 ms under TCG (its libraries), and a
    node has half a dozen per interface."""
    lines = ["set -e", BY_MAC, IP_BATCH]
    # The script is re-runnable (Vagrant provisions again): a bond left by an earlier run goes first, which
    # also gives its ports back their own MACs (a bond's ports carry the bond's), so by_mac finds them.
    if any(i.bond is not None for i in ifaces):
        # Loaded with its defaults, the bonding driver makes a bond0 of its own, and a link 0 bond is bond0.
        lines.append("modprobe bonding max_bonds=0 >/dev/null 2>&1 || true")
    lines += [f"ip link del {_name(i.name)} >/dev/null 2>&1 || true" for i in ifaces if i.bond is not None]
    for iface in ifaces:
        lines += _ports_script(iface, macs, unchanged)
    for iface in ifaces:
        if iface.bond is not None:
            lines += _bond_script(iface, iface.bond)
    for iface in ifaces:
        lines += _l3_script(iface)
    lines.append(IP_FLUSH)
    watched = " ".join(
        _name(n) for n in dict.fromkeys([p.ifname for i in ifaces for p in i.ports] + [i.name for i in ifaces])
    )
    lines += [
        f"for i in $(seq {CARRIER_TIMEOUT_S * 10}); do",
        "  down=''",
        f"  for n in {watched}; do c=; read -r c 2>/dev/null < /sys/class/net/$n/carrier || true; "
        '[ "$c" = 1 ] || down="$down $n"; done',
        '  [ -z "$down" ] && exit 0',
        "  sleep 0.1",
        "done",
        'echo "no carrier on:$down" >&2',
        "exit 4",
    ]
    return "\n".join(lines) + "\n"


def reset_script(ifaces: list[Iface], baseline: dict[str, dict[str, bool]]) -> str:
    """Undo an earlier plan. `baseline`: port ifname -> feature (kernel name) -> on, as the driver had it."""
    lines = ["set -e"]
    for iface in ifaces:
        name = shlex.quote(iface.name)
        if iface.bond is not None:
            lines.append(f"ip link del {name} >/dev/null 2>&1 || true")  # its ports get their own MACs back
        else:
            lines += [
                f"tc qdisc del dev {name} root >/dev/null 2>&1 || true",
                f"ip addr flush dev {name} scope global",
            ]
        for port in iface.ports:
            if iface.offloads and baseline.get(port.ifname):  # every feature, not just those named: tso has parts
                lines.append(_offloads_line(port.ifname, baseline[port.ifname]))
    return "\n".join(lines) + "\n"


def features_script(ports: dict[str, str]) -> str:
    """Each port's `ethtool -k` (port ifname -> MAC; found by MAC, renamed or not yet), under '[port NAME]'."""
    lines = ["set -e", BY_MAC]
    lines += [f"echo '[port {name}]'; ethtool -k \"$(by_mac {mac})\"" for name, mac in ports.items()]
    return "\n".join(lines) + "\n"
