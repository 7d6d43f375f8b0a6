"""The network plan: which interface each node gets on each link, and its address.

Addresses come from 198.18.0.0/15 (RFC 2544's benchmarking range): each
cable or segment (a link lane), or each bond (all lanes of a bonded link), is
its own /24, numbered in link order; a node's host number is its position in
the link's `between` list, plus one. A link with `ip: [4, 6]` (the default)
gets IPv6 addresses too, from 2001:2::/48 (RFC 5180's benchmarking range): the
same segment's /64 (`2001:2:0:N::/64`) and host number.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from niclab.base.errors import NiclabError
from niclab.model.netem import Netem
from niclab.model.scenario import Bond, Scenario
from niclab.model.topology import Port, Topology

BASE = ipaddress.IPv4Network("198.18.0.0/15")
PREFIX = 24
BASE6 = ipaddress.IPv6Network("2001:2::/48")
PREFIX6 = 64


class NetconfError(NiclabError):
    """The guests' network could not be configured, is not what was asked, or passes no traffic."""


@dataclass(frozen=True)
class Iface:
    """An addressed interface in a guest: one NIC port, or a bond of several."""

    node: str
    name: str
    address: str
    link: int
    lane: int | None  # None for a bond, which spans every lane of its link
    mtu: int
    ports: tuple[Port, ...]
    bond: Bond | None = None
    netem: Netem | None = None
    offloads: dict[str, bool] = field(default_factory=dict)
    address6: str | None = None  # its IPv6 address (without the prefix length), on a link with ip: [4, 6]

    @property
    def segment(self) -> tuple[int, int | None]:
        return (self.link, self.lane)


@dataclass(frozen=True)
class NetPlan:
    ifaces: tuple[Iface, ...]

    def on(self, node: str) -> list[Iface]:
        return [i for i in self.ifaces if i.node == node]

    def find(self, node: str, link: int, lane: int = 0) -> Iface:
        for iface in self.ifaces:
            if iface.node == node and iface.link == link and iface.lane in (lane, None):
                return iface
        raise KeyError((node, link, lane))

    def segments(self) -> dict[tuple[int, int | None], list[Iface]]:
        """The interfaces that share a wire (or a bond), in `between` order."""
        groups: dict[tuple[int, int | None], list[Iface]] = {}
        for iface in self.ifaces:
            groups.setdefault(iface.segment, []).append(iface)
        return groups


def subnet(index: int) -> ipaddress.IPv4Network:
    size = 2 ** (32 - PREFIX)
    if not 0 <= index < BASE.num_addresses // size:
        raise NetconfError(f"more than {BASE.num_addresses // size} cables: 198.18.0.0/15 has no room for another /24")
    return ipaddress.IPv4Network((int(BASE.network_address) + index * size, PREFIX))


def subnet6(index: int) -> ipaddress.IPv6Network:
    """The segment's /64 in 2001:2::/48: its number is the 4th group, as the /24's is the IPv4 address's 3rd."""
    return ipaddress.IPv6Network((int(BASE6.network_address) + (index << 64), PREFIX6))


def plan(scenario: Scenario, topology: Topology | None = None) -> NetPlan:
    """Addresses and settings of every interface; `topology` is the scenario's, when the caller has it already."""
    topology = topology or scenario.topology()
    ifaces: list[Iface] = []
    index = 0
    for link_index, link in enumerate(scenario.links):
        lanes = [None] if link.bond else list(range(link.count))
        for lane in lanes:
            net, net6 = subnet(index), subnet6(index)
            index += 1
            for host, node in enumerate(link.between, start=1):
                ports = tuple(
                    p for p in topology.node(node).ports if p.link == link_index and (lane is None or p.lane == lane)
                )
                ifaces.append(
                    Iface(
                        node=node,
                        name=f"bond{link_index}" if link.bond else ports[0].ifname,
                        address=str(net.network_address + host),
                        link=link_index,
                        lane=lane,
                        mtu=link.mtu,
                        ports=ports,
                        bond=link.bond,
                        netem=link.netem.get(node),
                        offloads=link.offloads.get(node, {}),
                        address6=str(net6.network_address + host) if 6 in link.ip else None,
                    )
                )
    return NetPlan(tuple(ifaces))
