"""The UDP ends of emulated nodes' cables on a lab's hosts (`--emulated`): the address and port of each NIC.

A cable within a host stays on 127.0.0.1; one between two hosts binds each host's `address:` and sends to the
other's. Ports come from a block hashed from the run's token (`TunnelPorts`), each held by one cell at a time
and skipped when something on this machine holds it (docs/lab.md, "Running").
"""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from niclab.base.errors import NiclabError
from niclab.model.lab.inventory import Inventory
from niclab.model.lab.spread import Spread
from niclab.model.topology import Topology

LOOPBACK = "127.0.0.1"
FIRST_PORT = 20000
BLOCK = 512
BLOCKS = 64  # 20000..52767: under Linux's ephemeral ports (32768..60999) only in part, and skipped there when busy


@dataclass(frozen=True)
class UdpEnd:
    """One NIC's end of a cable: what it binds, and where its frames go."""

    local_address: str
    local_port: int
    remote_address: str
    remote_port: int


def _busy_here(port: int) -> bool:
    """Whether a process on this machine holds the UDP port (on any address)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind(("", port))
    except OSError:
        return True
    finally:
        sock.close()
    return False


class TunnelPorts:
    """The run's block of UDP ports, handed out to cells and given back; safe to share between threads."""

    def __init__(self, token: str):
        block = int(hashlib.sha256(token.encode()).hexdigest(), 16) % BLOCKS
        self.ports = range(FIRST_PORT + block * BLOCK, FIRST_PORT + (block + 1) * BLOCK)
        self._taken: set[int] = set()
        self._lock = threading.Lock()

    def take(self, count: int) -> list[int]:
        with self._lock:
            found = [port for port in self.ports if port not in self._taken and not _busy_here(port)][:count]
            if len(found) < count:
                raise NiclabError(
                    f"the run's UDP ports {self.ports.start}-{self.ports.stop - 1} are all in use by its cells; "
                    "run fewer cells at once"
                )
            self._taken.update(found)
            return found

    def give_back(self, ports: list[int]) -> None:
        with self._lock:
            self._taken.difference_update(ports)

    @contextmanager
    def held(self, count: int) -> Iterator[list[int]]:
        ports = self.take(count)
        try:
            yield ports
        finally:
            self.give_back(ports)


def udp_ends(
    topology: Topology, spread: Spread, lab: Inventory, ports: list[int]
) -> dict[tuple[str, int, int], UdpEnd]:
    """Each port's UDP end (Port.key -> UdpEnd), from two of `ports` per cable."""
    if len(ports) < 2 * len(topology.wires):
        raise ValueError(f"{len(topology.wires)} cables need {2 * len(topology.wires)} ports, not {len(ports)}")
    ends: dict[tuple[str, int, int], UdpEnd] = {}
    for index, wire in enumerate(topology.wires):
        left, right = wire.ports
        hosts = spread.hosts[left.node], spread.hosts[right.node]
        if hosts[0] == hosts[1]:
            addresses = (LOOPBACK, LOOPBACK)
        else:
            first, second = lab.hosts[hosts[0]].address, lab.hosts[hosts[1]].address
            if first is None or second is None:  # spread() never places a cell so
                raise NiclabError(f"link {wire.link} crosses from {hosts[0]} to {hosts[1]}: give both an address:")
            addresses = (first, second)
        pa, pb = ports[2 * index], ports[2 * index + 1]
        ends[left.key] = UdpEnd(addresses[0], pa, addresses[1], pb)
        ends[right.key] = UdpEnd(addresses[1], pb, addresses[0], pa)
    return ends
