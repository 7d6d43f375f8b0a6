"""Configure the guests' test network: find each port by MAC, name it, address it.

Addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range): every
cable (a link lane) is its own /24, numbered in link order, and a node's host
number is its position in the link's `between` list, plus one. Everything is
done with `ip` in the guest, through the node's command channel, then checked
with a ping across every cable before any benchmark runs.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import threading
import time
from dataclasses import dataclass

from niclab.backends.base import GuestCommandError, Rig
from niclab.errors import NiclabError
from niclab.scenario import Scenario
from niclab.topology import Port

BASE = ipaddress.IPv4Network("198.18.0.0/15")
PREFIX = 24
CARRIER_TIMEOUT_S = 20
PING_TIMEOUT_S = 20


class NetconfError(NiclabError):
    """The guests' network could not be configured or does not pass traffic."""


@dataclass(frozen=True)
class Iface:
    """An addressed interface in a guest."""

    node: str
    name: str
    address: str
    link: int
    lane: int
    mtu: int
    port: Port


@dataclass(frozen=True)
class NetPlan:
    ifaces: tuple[Iface, ...]

    def on(self, node: str) -> list[Iface]:
        return [i for i in self.ifaces if i.node == node]

    def find(self, node: str, link: int, lane: int = 0) -> Iface:
        for iface in self.ifaces:
            if (iface.node, iface.link, iface.lane) == (node, link, lane):
                return iface
        raise KeyError((node, link, lane))


def subnet(index: int) -> ipaddress.IPv4Network:
    subnets = BASE.num_addresses // 2 ** (32 - PREFIX)
    if not 0 <= index < subnets:
        raise NetconfError(f"more than {subnets} cables: 198.18.0.0/15 has no room for another /24")
    return ipaddress.IPv4Network((int(BASE.network_address) + index * 2 ** (32 - PREFIX), PREFIX))


def plan(scenario: Scenario) -> NetPlan:
    ifaces = []
    index = 0
    for link_index, link in enumerate(scenario.links):
        for lane in range(link.count):
            net = subnet(index)
            index += 1
            for host, node in enumerate(link.between, start=1):
                port = next(p for p in scenario.topology().node(node).ports
                            if (p.link, p.lane) == (link_index, lane))
                ifaces.append(Iface(node, port.ifname, str(net.network_address + host), link_index, lane,
                                    link.mtu, port))
    return NetPlan(tuple(ifaces))


def node_script(ifaces: list[Iface], macs: dict[str, str]) -> str:
    """The shell script that names, sizes, addresses and raises a node's interfaces."""
    lines = [
        "set -e",
        'by_mac() { for d in /sys/class/net/*; do [ "$(cat "$d/address")" = "$1" ] && { echo "${d##*/}"; return 0; }; done; '
        'echo "no interface has MAC $1" >&2; return 3; }',
    ]
    for iface in ifaces:
        mac, name = macs[iface.name], shlex.quote(iface.name)
        lines += [
            f"dev=$(by_mac {mac})",
            f'[ "$dev" = {name} ] || {{ ip link set dev "$dev" down; ip link set dev "$dev" name {name}; }}',
            f"ip link set dev {name} mtu {iface.mtu}",
            f"ip addr flush dev {name}",
            f"ip addr add {iface.address}/{PREFIX} dev {name}",
            f"ip link set dev {name} up",
        ]
    names = " ".join(shlex.quote(i.name) for i in ifaces)
    lines += [
        f"for i in $(seq {CARRIER_TIMEOUT_S * 10}); do",
        "  down=''",
        f"  for n in {names}; do [ \"$(cat /sys/class/net/$n/carrier 2>/dev/null)\" = 1 ] || down=\"$down $n\"; done",
        '  [ -z "$down" ] && exit 0',
        "  sleep 0.1",
        "done",
        'echo "no carrier on:$down" >&2',
        "exit 4",
    ]
    return "\n".join(lines) + "\n"


def ping_script(source: Iface, target: Iface) -> str:
    """Wait until one ping answers, then measure the idle round trip with five more."""
    via = f"-I {shlex.quote(source.name)} {target.address}"
    return (f"for i in $(seq {PING_TIMEOUT_S}); do ping -n -q -c 1 -W 1 {via} >/dev/null && "
            f"exec ping -n -q -c 5 -i 0.2 -W 1 {via}; done; exit 1")


RTT_RE = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)")


def _parallel(jobs: dict[str, callable]) -> dict[str, object]:
    results: dict[str, object] = {}
    errors: dict[str, BaseException] = {}

    def run(key, job):
        try:
            results[key] = job()
        except BaseException as exc:  # reported below, in the caller's thread
            errors[key] = exc

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        key, exc = next(iter(errors.items()))
        if isinstance(exc, NiclabError):
            raise exc
        raise NetconfError(f"{key}: {exc}") from exc
    return results


def configure(rig: Rig, net: NetPlan, progress) -> dict:
    """Configure every node (in parallel), then ping across every cable. Returns facts."""
    started = time.monotonic()

    def configure_node(node: str):
        ifaces = net.on(node)
        macs = {i.name: rig.mac(i.port) for i in ifaces}
        result = rig.node(node).run(node_script(ifaces, macs), timeout=CARRIER_TIMEOUT_S + 30, check=False)
        if not result.ok:
            raise NetconfError(f"{node}: configuring {', '.join(i.name for i in ifaces)} failed: "
                               f"{(result.stderr or result.stdout).strip()}")

    _parallel({node: (lambda n=node: configure_node(n)) for node in rig.nodes})
    configured = time.monotonic() - started
    rtts: dict[str, float] = {}
    for link_lane in sorted({(i.link, i.lane) for i in net.ifaces}):
        ends = [i for i in net.ifaces if (i.link, i.lane) == link_lane]
        source = ends[0]
        for target in ends[1:]:
            try:
                result = rig.node(source.node).run(ping_script(source, target),
                                                   timeout=PING_TIMEOUT_S * 2 + 10)
            except GuestCommandError:
                raise NetconfError(
                    f"link {source.link}: {source.node} ({source.address}) cannot reach "
                    f"{target.node} ({target.address}) over {source.name} ({source.port.model}) "
                    f"within {PING_TIMEOUT_S} s") from None
            if match := RTT_RE.search(result.stdout):
                rtts[f"{source.node}->{target.node} link{source.link}.{source.lane}"] = float(match[1])
    progress(f"network up in {time.monotonic() - started:.1f} s "
             f"({len(net.ifaces)} interfaces; min ping RTT " + ", ".join(f"{k} {v:.2f} ms" for k, v in rtts.items()) + ")")
    return {"configure_s": round(configured, 2), "ping_ms": rtts,
            "interfaces": {f"{i.node}/{i.name}": {"address": f"{i.address}/{PREFIX}", "mtu": i.mtu,
                                                  "model": i.port.model} for i in net.ifaces}}
