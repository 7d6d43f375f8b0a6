"""Each node's libvirt domain before it starts: its host, its ports (a lab's cards passed through, or emulated NICs
on UDP cables), and what the harness marks it with; then, for each boot, its host's domain type and its image's
volumes there."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from niclab.base.procs import pid_namespace, process_start_time
from niclab.model.lab.match import Placement
from niclab.model.topology import Topology
from niclab.plumbing.backends.libvirt_tunnels import UdpEnd
from niclab.plumbing.backends.libvirt_xml import DomainPlan, Hostdev, UdpInterface
from niclab.plumbing.backends.qemu_cmd import port_macs
from niclab.plumbing.backends.qemu_nics import emulated_model, qemu_nic
from niclab.plumbing.image import Image


def domain_plans(
    topology: Topology,
    node_uri: dict[str, str],
    ports: Mapping[tuple[str, int, int], UdpInterface | Hostdev],  # port key -> its device in the domain
    token: str,
    domain_type: str,
    boot: tuple[str, str],
    cmdline: str,
    metadata: dict[str, str] | None = None,
    memory_floor: int = 0,  # MiB: what the image's initramfs needs unpacked (its manifest's min_memory_mib)
) -> dict[str, tuple[str, DomainPlan]]:
    """Each node's host URI and domain."""
    return {
        spec.name: (
            node_uri[spec.name],
            DomainPlan(
                name=f"niclab-{token}-{spec.name}",
                domain_type=domain_type,
                memory_mib=max(spec.memory_mib, memory_floor),
                vcpus=spec.cpus,
                kernel=boot[0],
                initrd=boot[1],
                cmdline=" ".join([cmdline, *spec.cmdline, f"niclab.node={spec.name}"]),
                ports=tuple(ports[port.key] for port in spec.ports),
                metadata=metadata or {},
            ),
        )
        for spec in topology.nodes
    }


def hostdevs(topology: Topology, placement: Placement) -> dict[tuple[str, int, int], Hostdev]:
    """Each port's card, passed through."""
    return {port.key: Hostdev(placement.cards[port.key].pci) for spec in topology.nodes for port in spec.ports}


def interfaces(
    topology: Topology, ends: Mapping[tuple[str, int, int], UdpEnd]
) -> dict[tuple[str, int, int], UdpInterface]:
    """Each port's emulated NIC (its class's stand-in), its cable's end at `ends`."""
    macs = port_macs(topology)
    made = {}
    for spec in topology.nodes:
        for port in spec.ports:
            qemu = qemu_nic(emulated_model(port.model).name)
            end = ends[port.key]
            made[port.key] = UdpInterface(
                macs[port.key],
                qemu.libvirt_type,
                end.local_port,
                end.remote_port,
                "event_idx=off" in qemu.properties,
                end.local_address,
                end.remote_address,
            )
    return made


def loopback_ends(topology: Topology) -> dict[tuple[str, int, int], UdpEnd]:
    """Each cable's two ends on 127.0.0.1, on ports free now."""
    ends = {}
    for wire, (a, b) in zip(topology.wires, _pairs(len(topology.wires)), strict=True):
        left, right = wire.ports
        ends[left.key] = UdpEnd("127.0.0.1", a, "127.0.0.1", b)
        ends[right.key] = UdpEnd("127.0.0.1", b, "127.0.0.1", a)
    return ends


def free_udp_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 free now: the kernel picks them, for QEMU to bind a moment later."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _pairs(count: int) -> list[tuple[int, int]]:
    ports = free_udp_ports(2 * count)
    return [(ports[2 * i], ports[2 * i + 1]) for i in range(count)]


def harness_metadata(workdir: Path) -> dict[str, str]:
    """What a run's domains carry for `niclab down`: the harness's PID, its start time and PID namespace, the run."""
    return {
        "harness-pid": str(os.getpid()),
        "harness-start": str(process_start_time(os.getpid())),
        "harness-at": pid_namespace(),
        "run": str(workdir),
    }


def settled(
    plans: dict[str, tuple[str, DomainPlan]],
    volumes: dict[tuple[str, str], tuple[str, str]],  # (uri, image id) -> the kernel and initrd volumes there
    images: dict[str, Image],
    kinds: dict[str, str],  # uri -> the domain type there: kvm, or qemu (TCG)
) -> dict[str, tuple[str, DomainPlan]]:
    """Each node's domain with its host's domain type and its image's volumes on that host."""
    made = {}
    for node, (uri, plan) in plans.items():
        kernel, initrd = volumes[(uri, images[node].id)]
        made[node] = (uri, replace(plan, kernel=kernel, initrd=initrd, domain_type=kinds[uri]))
    return made
