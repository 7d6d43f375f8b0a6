"""What a backend must realize: nodes, their NIC ports, and the wires between ports.

A Topology is backend-neutral: the QEMU backend turns ports into emulated
devices and wires into sockets; a lab backend maps them to cards and cables.
"""

from __future__ import annotations

from dataclasses import dataclass

from niclab.model.driver_choice import DriverChoice
from niclab.model.kernel_choice import KernelChoice


@dataclass(frozen=True)
class Port:
    """One end of a link on one node: link index, lane among parallel cables, NIC model."""

    node: str
    link: int
    lane: int
    model: str
    ifname: str  # the name netconf gives the interface in the guest
    knobs: tuple[tuple[str, str, str], ...] = ()  # (coalesce, rx-usecs, 100): set by netconf, undone only by a boot
    driver: DriverChoice | None = None  # the module that drives the card; None: the kernel's own (the catalog's)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.node, self.link, self.lane)


@dataclass(frozen=True)
class Wire:
    """A cable (two ports) or a switched segment (three or more, or two through a switch)."""

    link: int
    lane: int
    ports: tuple[Port, ...]
    switch: bool = False  # two ports joined through a switch, not a cable (three or more always are)

    @property
    def switched(self) -> bool:
        return self.switch or len(self.ports) > 2

    def medium(self) -> str:
        """What joins its ports, as a refusal names it: "link 0 joins 3 nodes (a, b, c) through a switch"."""
        nodes = [port.node for port in self.ports]
        if len(nodes) > 2:
            return f"link {self.link} joins {len(nodes)} nodes ({', '.join(nodes)}) through a switch"
        return f"link {self.link} joins {' and '.join(nodes)} " + ("through a switch" if self.switch else "by a cable")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int
    cpus: int
    memory_mib: int
    ports: tuple[Port, ...]
    kernel: KernelChoice | None = None  # None: the image's own
    cmdline: tuple[str, ...] = ()  # added to the kernel's command line: driver module parameters (e1000.X=1)
    # add-on archives behind the image's initramfs (images/<name>/, `addon = true`): what the benchmarks of the
    # node's scenario ask for in GuestNeeds.addons
    addons: tuple[str, ...] = ()
    # (card PCI ID, the driver those cards take instead), sorted: the node's image carries the driver, and the
    # guest binds cards of that ID to it (no other module's alias for the ID is left in its modules.alias)
    drivers: tuple[tuple[str, DriverChoice], ...] = ()


@dataclass(frozen=True)
class Topology:
    nodes: tuple[NodeSpec, ...]
    wires: tuple[Wire, ...]

    def node(self, name: str) -> NodeSpec:
        for spec in self.nodes:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def ports(self) -> tuple[Port, ...]:
        return tuple(port for wire in self.wires for port in wire.ports)


def port_ifname(link: int, lane: int, count: int) -> str:
    """link0 for a single cable, link0p1 for the second of several parallel ones."""
    return f"link{link}" if count == 1 else f"link{link}p{lane}"
