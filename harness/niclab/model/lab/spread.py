"""Where a lab run puts emulated nodes (`--emulated`): on the lab's hosts, by their capacity.

A cell goes on the first host it fits on, else its nodes spread, a cable between two hosts a UDP tunnel;
`spread(topology, inventory)` places a cell alone, `spread(topology, inventory, held)` beside running cells
(None: wait). docs/lab.md, "Running".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from niclab.model.lab.inventory import Inventory
from niclab.model.lab.match import Placement, Unrealizable
from niclab.model.topology import NodeSpec, Topology, Wire


@dataclass(frozen=True)
class Load:
    """What a running cell uses on one host: vCPUs and memory (MiB)."""

    cpus: int = 0
    memory_mib: int = 0

    def __add__(self, other: Load) -> Load:
        return Load(self.cpus + other.cpus, self.memory_mib + other.memory_mib)


@dataclass(frozen=True)
class Claim:
    """What a unit of cells holds while it runs: lab cards (by id), and load on hosts (by name)."""

    cards: frozenset[str] = frozenset()
    hosts: tuple[tuple[str, Load], ...] = ()


@dataclass(frozen=True)
class Held:
    """What the running units hold together: no two hold a card, and a host's loads add up."""

    cards: frozenset[str] = frozenset()
    load: dict[str, Load] = field(default_factory=dict)

    @staticmethod
    def of(claims: Iterable[Claim]) -> Held:
        cards: set[str] = set()
        load: dict[str, Load] = {}
        for claim in claims:
            cards |= claim.cards
            for host, used in claim.hosts:
                load[host] = load.get(host, Load()) + used
        return Held(frozenset(cards), load)


@dataclass(frozen=True)
class Spread:
    """The host of each node of a cell of emulated nodes on a lab."""

    hosts: dict[str, str]  # node -> inventory host

    def crossing(self, topology: Topology) -> list[Wire]:
        """The cables whose two ends are on two hosts: UDP tunnels between the hosts' addresses."""
        return [wire for wire in topology.wires if len({self.hosts[port.node] for port in wire.ports}) > 1]

    def claim(self, topology: Topology) -> Claim:
        load: dict[str, Load] = {}
        for spec in topology.nodes:
            host = self.hosts[spec.name]
            load[host] = load.get(host, Load()) + _need(spec)
        return Claim(hosts=tuple(load.items()))

    def lines(self, topology: Topology, inventory: Inventory) -> list[str]:
        """One line per node and per cross-host cable, for `run --dry-run`."""
        out = [f"{spec.name}: emulated on {self.hosts[spec.name]}" for spec in topology.nodes]
        for wire in self.crossing(topology):
            ends = [f"{p.node}/{p.ifname} ({inventory.hosts[self.hosts[p.node]].address})" for p in wire.ports]
            out.append(f"link {wire.link}: UDP tunnel " + " <-> ".join(ends))
        return out


def _need(spec: NodeSpec) -> Load:
    return Load(spec.cpus, spec.memory_mib)


def spread(topology: Topology, inventory: Inventory, held: Held | None = None) -> Spread | None:
    """The cell's hosts given what is held; None if it must wait for a running cell. Raises Unrealizable if it
    would not fit on the lab even alone (or only over a cable between hosts without `address:`).

    A cell that fits on one host when it runs alone always runs on one host: while others hold room, it
    waits rather than spread over hosts, so `--parallel` measures the path a sequential run measures."""
    _check_cables(topology)
    alone = _fit(topology, inventory, Held())
    if alone is None:
        raise Unrealizable(_why_not(topology, inventory))
    found = _fit(topology, inventory, held or Held())
    if found is None:
        return None
    if len(set(alone.hosts.values())) == 1 and len(set(found.hosts.values())) > 1:
        return None  # alone it runs on one host: wait for one, rather than measure over a tunnel instead
    return found


def _check_cables(topology: Topology) -> None:
    for wire in topology.wires:
        if wire.switched:
            raise Unrealizable(f"{wire.medium()}: emulated nodes on a lab are joined by cables, not switches")


def _room(inventory: Inventory, host: str, held: Held, taken: Load) -> Load | None:
    """What is free on the host beyond `taken` (by this cell); None: a host without capacity:, free whole."""
    capacity = inventory.hosts[host].capacity
    if capacity is None:
        return None
    used = held.load.get(host, Load()) + taken
    return Load(capacity.cpus - used.cpus, capacity.memory_mib - used.memory_mib)


def _fits(inventory: Inventory, host: str, held: Held, taken: Load, need: Load) -> bool:
    room = _room(inventory, host, held, taken)
    if room is None:  # one cell at a time: free if no other cell is on it
        return host not in held.load
    return need.cpus <= room.cpus and need.memory_mib <= room.memory_mib


def _fit(topology: Topology, inventory: Inventory, held: Held) -> Spread | None:
    total = Load()
    for spec in topology.nodes:
        total += _need(spec)
    for host in inventory.hosts:  # the whole cell on one host: no tunnel between hosts
        if _fits(inventory, host, held, Load(), total):
            return Spread({spec.name: host for spec in topology.nodes})
    placed: dict[str, str] = {}
    taken: dict[str, Load] = {}
    for spec in topology.nodes:
        need = _need(spec)
        fitting = [h for h in inventory.hosts if _fits(inventory, h, held, taken.get(h, Load()), need)]
        if not fitting:
            return None
        host = fitting[0]
        placed[spec.name] = host
        taken[host] = taken.get(host, Load()) + need
    found = Spread(placed)
    if any(inventory.hosts[placed[p.node]].address is None for w in found.crossing(topology) for p in w.ports):
        return None
    return found


def _why_not(topology: Topology, inventory: Inventory) -> str:
    wanted = Load()
    for spec in topology.nodes:
        wanted += _need(spec)
    crossing = _fit_ignoring_addresses(topology, inventory)
    if crossing is not None:
        wire = crossing.crossing(topology)[0]
        ends = " and ".join(f"{p.node} on {crossing.hosts[p.node]}" for p in wire.ports)
        bare = sorted(
            {crossing.hosts[p.node] for p in wire.ports if inventory.hosts[crossing.hosts[p.node]].address is None}
        )
        return (
            f"the cell spreads over hosts: link {wire.link} joins {ends}, and {', '.join(bare)} "
            f"{'has' if len(bare) == 1 else 'have'} no address: give each host the IP address it uses for tunnels "
            "to other hosts (hosts: NAME: address:) in the inventory"
        )
    biggest = max(topology.nodes, key=lambda spec: (spec.cpus, spec.memory_mib))
    return (
        f"lab {inventory.name} has no room for the cell ({wanted.cpus} vCPUs, {wanted.memory_mib} MiB; node "
        f"{biggest.name} alone {biggest.cpus} vCPUs, {biggest.memory_mib} MiB): raise a host's capacity: in the "
        "inventory, or give the nodes fewer CPUs or less memory"
    )


def _fit_ignoring_addresses(topology: Topology, inventory: Inventory) -> Spread | None:
    """The spread of the cell alone as if every host had an address: a cable across hosts is why it fails."""
    hosts = {
        name: host.model_copy(update={"address": host.address or "192.0.2.1"}) for name, host in inventory.hosts.items()
    }
    found = _fit(topology, inventory.model_copy(update={"hosts": hosts}), Held())
    return found if found is not None and found.crossing(topology) else None


def cards_claim(placement: Placement) -> Claim:
    """What a cell on the lab's real cards holds: its cards (one cell per card), and no load."""
    return Claim(cards=frozenset(card.id for card in placement.cards.values()))
