"""Which lab cards and cables realize a cell: each of its cables onto a lab cable whose ends match.

Every card of a node sits in one host; the search (`_search`) chooses each node's host and counts cables, and
says what is missing when nothing fits. Cards that running cells hold (`avoid`) are left out, as if
unplugged (docs/lab.md, "Running").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from niclab.model.lab.inventory import Card, Inventory
from niclab.model.topology import Topology, Wire


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
                f"{p.node}/{p.ifname} {self.cards[p.key].id} ({self.cards[p.key].model} "
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
    if (short := _short_of_cables(topology, inventory)) is not None:
        raise Unrealizable(short)
    cables = [
        (i, inventory.card(a), inventory.card(b))
        for i, (a, b) in enumerate(inventory.cables)
        if a not in avoid and b not in avoid
    ]
    found = _search(topology, cables)
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
    have = Counter(card.model for card in inventory.cards)
    short = [f"{count} {name} (it has {have[name]})" for name, count in sorted(needed.items()) if have[name] < count]
    if short:
        raise Unrealizable(f"lab {inventory.name} lacks cards: the cell needs {', '.join(short)}")


Assignment = tuple[dict[tuple[str, int, int], Card], dict[tuple[int, int], int], dict[str, str]]
End = tuple[str, str]  # a cable's end as the search counts it: (NIC model, host)
Kind = tuple[End, End]  # a cable as the search counts it: its two ends, in order


def _kind(x: End, y: End) -> Kind:
    return (x, y) if x <= y else (y, x)


MAX_CHOICES = 300_000  # hosts tried for nodes in one search (a 16-link cell on 100 cables takes a few thousand)


class _Search:
    """The choice of a host for each node, and the counting that judges it (see `_search`)."""

    def __init__(self, topology: Topology, cables: list[tuple[int, Card, Card]]):
        self.supply = Counter(_kind((a.model, a.host), (b.model, b.host)) for _, a, b in cables)
        self.ends = Counter(end for _, a, b in cables for end in ((a.model, a.host), (b.model, b.host)))
        hosts = list(dict.fromkeys(card.host for _, a, b in cables for card in (a, b)))
        self.wires = list(topology.wires)
        self.nodes = list(dict.fromkeys(port.node for wire in self.wires for port in wire.ports))
        place = {node: k for k, node in enumerate(self.nodes)}
        self.needs: dict[str, Counter[str]] = {node: Counter() for node in self.nodes}
        last = dict(place)  # the place of a node's last neighbour: until then it is on the frontier
        self.closing: list[list[Wire]] = [[] for _ in self.nodes]  # the wires all of whose ends are placed at k
        for wire in self.wires:
            at = max(place[p.node] for p in wire.ports)
            self.closing[at].append(wire)
            for port in wire.ports:
                self.needs[port.node][port.model] += 1
                last[port.node] = max(last[port.node], at)
        self.frontier = [[n for n in self.nodes[: k + 1] if last[n] > k] for k in range(len(self.nodes))]
        self.candidates = [
            [h for h in hosts if all(self.ends[(model, h)] >= n for model, n in self.needs[node].items())]
            for node in self.nodes
        ]
        self.choices = 0

    def hosts(self, counted: bool) -> dict[str, str] | None:
        """A host for every node such that each wire has a cable of its kind (`counted`: a cable of its own,
        and a card of its own at each end), or None. Depth first, without recursion; a state that led
        nowhere is not searched again. Unrealizable past MAX_CHOICES choices."""
        dead: set[tuple] = set()
        nothing: Counter = Counter()
        # (node, its next candidate, hosts so far, cable kinds asked, ends taken, the state they make)
        stack: list[tuple[int, int, dict[str, str], Counter, Counter, tuple]] = [(0, 0, {}, nothing, nothing, ())]
        while stack:
            k, i, hosts, asked, taken, state = stack.pop()
            if k == len(self.nodes):
                return hosts
            if i == len(self.candidates[k]):
                dead.add(state)  # every host of node k failed from here
                continue
            stack.append((k, i + 1, hosts, asked, taken, state))
            self.choices += 1
            if self.choices > MAX_CHOICES:
                raise Unrealizable(
                    f"no placement found in {MAX_CHOICES:,} choices of hosts; the lab may still have one: "
                    "place the cell's links on fewer hosts' cards, or split the cell"
                )
            node, host = self.nodes[k], self.candidates[k][i]
            now = {**hosts, node: host}
            kinds = Counter(_kind(*((p.model, now[p.node]) for p in wire.ports)) for wire in self.closing[k])
            if counted:
                now_taken = taken + Counter({(model, host): n for model, n in self.needs[node].items()})
                now_asked = asked + kinds
                if any(now_taken[e] > self.ends[e] for e in now_taken) or any(
                    now_asked[kind] > self.supply[kind] for kind in kinds
                ):
                    continue
                known: tuple = (frozenset(now_asked.items()), frozenset(now_taken.items()))
            else:
                if any(self.supply[kind] == 0 for kind in kinds):
                    continue
                now_asked, now_taken, known = asked, taken, ()
            child = (k + 1, *known, *(now[n] for n in self.frontier[k]))
            if child not in dead:
                stack.append((k + 1, 0, now, now_asked, now_taken, child))
        return None


def _search(topology: Topology, cables: list[tuple[int, Card, Card]]) -> Assignment | None:
    """The cards and cables of a placement, or None if there is none.

    Once every node has a host, a wire needs a cable of one kind (the model and host at each end), and any
    free cable of that kind will do: so the search chooses hosts, node by node, and counts. A host is tried
    for a node only if it has the node's cards (ends of free cables, per model), and given up as soon as a
    kind of cable or of cable end is asked for more often than the lab has it. First the hosts are chosen
    without counting (can the lab's cables join them at all?), where a state is the hosts of the nodes still
    to be joined: few, so a cell the lab's cables cannot join is refused at once. Then with counting.
    """
    search = _Search(topology, cables)
    if search.hosts(counted=False) is None:
        return None
    hosts = search.hosts(counted=True)
    if hosts is None:
        return None
    free: dict[Kind, list[tuple[int, Card, Card]]] = {}
    for cable in cables:
        _, a, b = cable
        free.setdefault(_kind((a.model, a.host), (b.model, b.host)), []).append(cable)
    cards: dict[tuple[str, int, int], Card] = {}
    used: dict[tuple[int, int], int] = {}
    for wire in search.wires:
        left, right = wire.ports
        index, a, b = free[_kind((left.model, hosts[left.node]), (right.model, hosts[right.node]))].pop(0)
        first, second = (a, b) if (a.model, a.host) == (left.model, hosts[left.node]) else (b, a)
        cards[left.key], cards[right.key], used[(wire.link, wire.lane)] = first, second, index
    return cards, used, hosts


def _short_of_cables(topology: Topology, inventory: Inventory) -> str | None:
    """Why no placement can exist, if the lab has fewer cables between two models than the cell has wires."""
    wanted = Counter(tuple(sorted(p.model for p in wire.ports)) for wire in topology.wires)
    have = Counter(tuple(sorted(inventory.card(end).model for end in cable)) for cable in inventory.cables)
    for pair, count in wanted.items():
        if have[pair] < count:
            a, b = pair
            cables = f"{have[pair]} cable{'s' if have[pair] != 1 else ''}"
            return f"lab {inventory.name} has {cables} between a {a} and a {b} card; the cell needs {count}"
    return None


def _why_not(topology: Topology, inventory: Inventory) -> str:
    """Why the lab cannot realize a cell whose cables it has, by model: where the cards are."""
    return _short_of_cables(topology, inventory) or (
        f"lab {inventory.name} has the cables, but not with each node's cards on one host: "
        "a node runs on one host, so all its cards must be there"
    )
