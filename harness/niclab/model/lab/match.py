"""Which lab cards and cables realize a cell: each of its cables onto a lab cable whose ends match.

A cell's wire between two ports of classes (A, B) takes a lab cable whose
cards are of classes A and B (either way round); parallel wires of a bond
take that many parallel cables. Every card of a node must sit in one host:
the node's domain runs there. The search backtracks (cells have a handful
of wires); when nothing fits, the reason names what is missing. Cards other
running cells hold (`avoid`) are left out, as if unplugged: the parallel
scheduler places a cell beside those already running.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from niclab.model.lab.inventory import Card, Inventory
from niclab.model.topology import Port, Topology, Wire


class Unrealizable(Exception):
    """This lab cannot realize the cell; the message says why."""


@dataclass(frozen=True)
class Placement:
    """A cell on a lab: the card behind each port, the cable behind each wire, the host of each node."""

    cards: dict[tuple[str, int, int], Card]  # Port.key -> card
    cables: dict[tuple[int, int], int]  # (link, lane) -> index in inventory.cables
    hosts: dict[str, str]  # node -> inventory host

    def lines(self, topology: Topology) -> list[str]:
        """One line per wire: a/link0 -> intel-a (0000:03:00.0 on rig1) == cable 0 == ..."""
        out = []
        for wire in topology.wires:
            ends = [
                f"{p.node}/{p.ifname} {self.cards[p.key].id} ({self.cards[p.key].class_name} "
                f"{self.cards[p.key].pci} on {self.cards[p.key].host})"
                for p in wire.ports
            ]
            out.append(f"cable {self.cables[(wire.link, wire.lane)]}: " + " <-> ".join(ends))
        return out


def place(topology: Topology, inventory: Inventory, avoid: frozenset[str] = frozenset()) -> Placement:
    """Map the topology onto the lab's cards and cables but the cards in `avoid`, or raise Unrealizable saying
    why (without `avoid`: why the lab cannot realize the cell at all)."""
    for wire in topology.wires:
        if wire.switched:
            raise Unrealizable(f"{wire.medium()}: a lab inventory lists cables, not switches")
    _enough_cards(topology, inventory)
    cables = [
        (i, inventory.card(a), inventory.card(b))
        for i, (a, b) in enumerate(inventory.cables)
        if a not in avoid and b not in avoid
    ]
    found = _search(list(topology.wires), cables, {}, {}, {})
    if found is None:
        if avoid:
            raise Unrealizable(f"the cards it needs are held by running cells ({', '.join(sorted(avoid))})")
        raise Unrealizable(_why_not(topology, inventory))
    cards, used, hosts = found
    for spec in topology.nodes:  # a node without ports still runs somewhere: the first host
        hosts.setdefault(spec.name, next(iter(inventory.hosts)))
    return Placement(cards, used, hosts)


def _enough_cards(topology: Topology, inventory: Inventory) -> None:
    needed = Counter(port.model for port in topology.ports)
    have = Counter(card.class_name for card in inventory.cards)
    short = [f"{count} {name} (it has {have[name]})" for name, count in sorted(needed.items()) if have[name] < count]
    if short:
        raise Unrealizable(f"lab {inventory.name} lacks cards: the cell needs {', '.join(short)}")


Assignment = tuple[dict[tuple[str, int, int], Card], dict[tuple[int, int], int], dict[str, str]]


def _search(
    wires: list[Wire],
    cables: list[tuple[int, Card, Card]],
    cards: dict[tuple[str, int, int], Card],
    used: dict[tuple[int, int], int],
    hosts: dict[str, str],
) -> Assignment | None:
    if not wires:
        return dict(cards), dict(used), dict(hosts)
    wire, rest = wires[0], wires[1:]
    taken = set(used.values())
    left, right = wire.ports
    for index, a, b in cables:
        if index in taken:
            continue
        for first, second in ((a, b), (b, a)):
            if not (_fits(left, first, hosts) and _fits(right, second, hosts)):
                continue
            new_hosts = {**hosts, left.node: first.host, right.node: second.host}
            found = _search(
                rest,
                cables,
                {**cards, left.key: first, right.key: second},
                {**used, (wire.link, wire.lane): index},
                new_hosts,
            )
            if found is not None:
                return found
    return None


def _fits(port: Port, card: Card, hosts: dict[str, str]) -> bool:
    return card.class_name == port.model and hosts.get(port.node, card.host) == card.host


def _why_not(topology: Topology, inventory: Inventory) -> str:
    """The first wire no lab cable fits, on its own: the likeliest reason the whole cell does not."""
    for wire in topology.wires:
        a, b = (p.model for p in wire.ports)
        fitting = [
            cable
            for cable in inventory.cables
            if sorted(inventory.card(end).class_name for end in cable) == sorted((a, b))
        ]
        count = sum(1 for w in topology.wires if sorted(p.model for p in w.ports) == sorted((a, b)))
        if len(fitting) < count:
            return (
                f"lab {inventory.name} has {len(fitting)} cable{'s' if len(fitting) != 1 else ''} between "
                f"a {a} and a {b} card; the cell needs {count}"
            )
    return (
        f"lab {inventory.name} has the cables, but not with each node's cards on one host: "
        "a node runs on one host, so all its cards must be there"
    )
