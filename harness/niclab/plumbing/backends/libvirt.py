"""The libvirt backend: one transient domain per node, on emulated NICs or on a lab's real cards.

- The same Topology the QEMU backend gets. Without a lab, ports are emulated
  NICs (the card class's stand-in, as under QEMU) and a cable is a pair of
  `<interface type='udp'>` on 127.0.0.1. With a lab (`--lab lab.yaml`), ports
  are the lab's cards (niclab.model.lab.match places the cell), passed through as
  managed VFIO hostdevs at fixed guest PCI slots; the cables are real.
- Domains are transient, named niclab-<run token>-<node>, and carry the
  harness's PID and start time in their metadata: leaving the context
  destroys them, and `niclab down` destroys those of a killed harness.
- Domain type kvm where the KVM probe says guests run (niclab.plumbing.accel), else
  qemu (TCG). The micro image boots by direct kernel boot from volumes of
  the `niclab` pool (backends/libvirt_volumes.py).
- The guest agent and the console go through libvirt, so a node may run on
  a remote host (`qemu+ssh://`): each lab host has its own URI.
- Lab cards on this host are leased for the run and bound to vfio-pci by
  niclab with a journal (niclab.plumbing.lab.vfio) so they go back to their driver
  after the run, or after a crash with `niclab lab restore`.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Progress
from niclab.base.procs import pid_namespace, process_start_time
from niclab.model import nics
from niclab.model.lab.inventory import LOCAL_URI, Inventory
from niclab.model.lab.match import Placement, Unrealizable, place
from niclab.model.topology import Topology
from niclab.plumbing.accel import choose_accel
from niclab.plumbing.backends.base import (
    BackendOption,
    BackendOptions,
    BackendPlugin,
    DownRequest,
    Leftovers,
    Rig,
    Say,
)
from niclab.plumbing.backends.boot import DEFAULT_BOOT_TIMEOUT_S, BootError, boot_falling_back, env_seconds, tail
from niclab.plumbing.backends.libvirt_agent import LibvirtAgent
from niclab.plumbing.backends.libvirt_cards import card_macs, cards_facts
from niclab.plumbing.backends.libvirt_volumes import image_volumes
from niclab.plumbing.backends.libvirt_xml import DomainPlan, Hostdev, UdpInterface, domain_xml
from niclab.plumbing.backends.qemu_cmd import MAX_NICS, port_macs
from niclab.plumbing.backends.qemu_nics import emulated_model, qemu_nic, stand_ins
from niclab.plumbing.guest import AgentNode, GuestAgent, connect_all
from niclab.plumbing.image import Image, ensure_image
from niclab.plumbing.image.kernels import image_facts, node_images
from niclab.plumbing.image.store import LAB_RECIPE, find_image
from niclab.plumbing.lab.drivers import DriverTable, GuestDriver, guest_driver_lines, placed_drivers
from niclab.plumbing.lab.passthrough import hold_cards
from niclab.plumbing.libvirt_conn import (
    Console,
    active,
    destroy,
    leftover_domains,
    libvirt_module,
    open_uri,
    version,
)

# What `run --dry-run` writes where a run gives the image's volumes (backends/libvirt_volumes.py).
DRY_KERNEL = "/var/lib/libvirt/niclab/IMAGE-vmlinuz"
DRY_INITRD = "/var/lib/libvirt/niclab/IMAGE-initrd"


# What `_boot` started: each node's (URI, domain plan), its domain, its Node, and when its agent answered (s).
Booted = tuple[dict[str, tuple[str, DomainPlan]], dict[str, Any], dict[str, AgentNode], dict[str, float]]


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


class LibvirtBackend:
    name = "libvirt"

    def __init__(
        self,
        lab: Inventory | None = None,
        uri: str | None = None,
        image: Image | None = None,
        accel: str | None = None,
        boot_timeout: float | None = None,
        wait: bool = False,
        force: bool = False,
    ):
        self.lab = lab
        self.wait, self.force = wait, force
        self.uri = uri or LOCAL_URI
        self._image = image
        self._accel = accel
        self.boot_timeout = boot_timeout or env_seconds("NICLAB_BOOT_TIMEOUT", DEFAULT_BOOT_TIMEOUT_S)

    # -- before anything boots --------------------------------------------

    def placement(self, topology: Topology) -> Placement | None:
        """Where a lab run puts each port (None without a lab); raises Unrealizable."""
        return place(topology, self.lab) if self.lab is not None else None

    def check(self, topology: Topology) -> str | None:
        problems = []
        if self.lab is not None:
            try:
                self.placement(topology)
            except Unrealizable as exc:
                problems.append(str(exc))
            problems += self._driver_problems(topology)
        else:
            problems += stand_ins(topology)
            for wire in topology.wires:
                if len(wire.ports) != 2:
                    problems.append(
                        f"link {wire.link} joins {len(wire.ports)} nodes: the libvirt backend makes cables, not "
                        "switches; run it with --backend qemu"
                    )
                    break
        for spec in topology.nodes:
            if len(spec.ports) > MAX_NICS:
                problems.append(f"node {spec.name} has {len(spec.ports)} NICs; a pc machine has {MAX_NICS} slots")
        return "; ".join(dict.fromkeys(problems)) or None

    def _driver_problems(self, topology: Topology) -> list[str]:
        """Lab cards whose PCI ID no driver of the lab image matches: they would show no interface. Checked
        against the lab image if it is built; a run that builds it checks again before it takes a card."""
        try:
            placement = self.placement(topology)
        except Unrealizable:
            return []  # said already
        image = self._image or find_image(LAB_RECIPE)
        if placement is None or self.lab is None or image is None:
            return []
        table = DriverTable(image)
        return placed_drivers(self.lab, placement, {spec.name: table for spec in topology.nodes})[1]

    def describe(self, topology: Topology, workdir: Path | None = None) -> list[str]:
        placement = self.placement(topology)
        lab_image = (self._image or find_image(LAB_RECIPE)) if placement is not None else None
        floor = int(lab_image.manifest.get("min_memory_mib", 0)) if lab_image is not None else 0
        dry = (DRY_KERNEL, DRY_INITRD)
        plans = self._plans(topology, placement, "dryrun", "kvm", dry, "console=ttyS0", None, floor)
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
            for node, (_, plan) in plans.items():
                (workdir / f"{node}.xml").write_text(domain_xml(plan))
        lines = placement.lines(topology) if placement else []
        if placement is not None and self.lab is not None:
            lines += guest_driver_lines(self.lab, placement, lab_image)
        for node, (uri, _plan) in plans.items():
            where = f"{node}: domain on {uri}"
            if workdir is not None:
                where += f" ({workdir / (node + '.xml')})"
            lines.append(where)
        return lines

    def _plans(
        self,
        topology: Topology,
        placement: Placement | None,
        token: str,
        domain_type: str,
        boot: tuple[str, str],
        cmdline: str,
        metadata: dict[str, str] | None = None,
        memory_floor: int = 0,  # MiB: what the image's initramfs needs unpacked (its manifest's min_memory_mib)
    ) -> dict[str, tuple[str, DomainPlan]]:
        macs = port_macs(topology)
        ports_udp = {}
        if placement is None:
            for wire, (a, b) in zip(topology.wires, _pairs(len(topology.wires)), strict=True):
                left, right = wire.ports
                ports_udp[left.key], ports_udp[right.key] = (a, b), (b, a)
        plans = {}
        for spec in topology.nodes:
            ports: list[UdpInterface | Hostdev] = []
            for port in spec.ports:
                if placement is not None:
                    ports.append(Hostdev(placement.cards[port.key].pci))
                    continue
                qemu = qemu_nic(emulated_model(port.model).name)
                local, remote = ports_udp[port.key]
                ports.append(
                    UdpInterface(macs[port.key], qemu.libvirt_type, local, remote, "event_idx=off" in qemu.properties)
                )
            uri = self.uri
            if placement is not None and self.lab is not None:
                uri = self.lab.hosts[placement.hosts[spec.name]].libvirt
            plans[spec.name] = (
                uri,
                DomainPlan(
                    name=f"niclab-{token}-{spec.name}",
                    domain_type=domain_type,
                    memory_mib=max(spec.memory_mib, memory_floor),
                    vcpus=spec.cpus,
                    kernel=boot[0],
                    initrd=boot[1],
                    cmdline=" ".join([cmdline, *spec.cmdline, f"niclab.node={spec.name}"]),
                    ports=tuple(ports),
                    metadata=metadata or {},
                ),
            )
        return plans

    # -- the run ----------------------------------------------------------

    @contextmanager
    def realize(self, topology: Topology, workdir: Path, progress: Progress) -> Iterator[Rig]:
        libvirt_module()  # says how to install it, before anything is held
        try:
            placement = self.placement(topology)
        except Unrealizable as exc:
            raise NiclabError(str(exc)) from None
        # a lab run's guests carry every Ethernet driver and its firmware; an emulated run's, the catalog's
        base = self._image or (ensure_image(LAB_RECIPE, progress) if placement is not None else None)
        images = node_images(topology.nodes, base, progress)
        image = self._image or ensure_image(progress=progress)  # what the accelerator was probed with
        guest_drivers: dict[tuple[str, int, int], GuestDriver] = {}
        if placement is not None:
            assert self.lab is not None
            tables = {node: DriverTable(i) for node, i in images.items()}
            guest_drivers, problems = placed_drivers(self.lab, placement, tables)
            if problems:
                raise NiclabError("; ".join(problems))
        workdir.mkdir(parents=True, exist_ok=True)
        token = hashlib.sha256(f"{workdir.resolve()}:{os.getpid()}:{time.time()}".encode()).hexdigest()[:8]
        with ExitStack() as stack:
            if placement is not None:
                assert self.lab is not None
                run = f"{workdir.parent.parent.name}/{workdir.name}"
                stack.enter_context(hold_cards(self.lab, placement, run, progress, wait=self.wait, force=self.force))
            uris = {self.uri} if placement is None else {uri for uri in self._host_uris(placement)}
            conns = {uri: open_uri(uri) for uri in sorted(uris)}
            for conn in conns.values():
                stack.callback(conn.close)
            accel = self._accel_of(image, progress)
            distinct = {i.id: i for i in images.values()}
            boot = {(uri, i): _volumes(conn, distinct[i], progress) for uri, conn in conns.items() for i in distinct}
            domains = stack.enter_context(ExitStack())

            def start(under: str) -> tuple[str, Booted]:
                kind = "kvm" if under == "kvm" else "qemu"  # libvirt's domain type for TCG is qemu
                return kind, self._boot(
                    domains, conns, boot, topology, placement, token, kind, images, workdir, progress
                )

            (domain_type, booted), fallback = boot_falling_back(
                accel,
                start,
                domains.close,
                image,
                progress,
                "destroyed the domains and started them",
                forced=bool(self._accel),
            )
            plans, running, nodes, ready = booted
            macs, seen = port_macs(topology), dict[str, dict]()
            if placement is not None:
                macs, seen = card_macs(topology, nodes)
            drivers = {}
            for port in topology.ports:
                cls = nics.get(port.model) if placement is not None else nics.stand_in(port.model)
                if cls is not None:
                    found = guest_drivers.get(port.key)
                    drivers[port.key] = cls.driver or (found.module if found and found.module else "")
            yield Rig(
                topology=topology,
                nodes=dict(nodes),
                macs=macs,
                drivers=drivers,
                facts={
                    "backend": self.name,
                    "accel": "kvm" if domain_type == "kvm" else "tcg",
                    "accel_fallback": fallback,
                    "libvirt": {node: {"uri": uri, "domain": plan.name} for node, (uri, plan) in plans.items()},
                    "libvirt_version": version(next(iter(conns.values()))),
                    **image_facts(images),
                    "agent_ready_s": ready,
                    **({"cards": cards_facts(topology, placement, seen)} if placement is not None else {}),
                },
                gone=lambda: {name: "its domain is no longer running" for name, d in running.items() if not active(d)},
            )

    def _boot(
        self,
        stack: ExitStack,
        conns: dict[str, Any],
        boot: dict[tuple[str, str], tuple[str, str]],  # (uri, image id) -> the kernel and initrd volumes there
        topology: Topology,
        placement: Placement | None,
        token: str,
        domain_type: str,
        images: dict[str, Image],
        workdir: Path,
        progress: Progress,
    ) -> Booted:
        """Start every node's domain as `domain_type` and wait for the agents; what it starts goes on `stack`."""
        libvirt = libvirt_module()
        metadata = {
            "harness-pid": str(os.getpid()),
            "harness-start": str(process_start_time(os.getpid())),
            "harness-at": pid_namespace(),
            "run": str(workdir),
        }
        cmdline = next(iter(images.values())).cmdline  # every kernel boots with the recipe's command line
        floor = max(int(i.manifest.get("min_memory_mib", 0)) for i in images.values())
        plans = self._plans(topology, placement, token, domain_type, ("", ""), cmdline, metadata, floor)
        domains: dict[str, Any] = {}
        started = time.monotonic()
        progress(f"starting {len(plans)} libvirt domains ({domain_type}; image {image_facts(images)['image']})")
        for node, (uri, plan) in plans.items():
            kernel, initrd = boot[(uri, images[node].id)]
            plan = DomainPlan(**{**plan.__dict__, "kernel": kernel, "initrd": initrd})
            xml = domain_xml(plan)
            (workdir / f"{node}.xml").write_text(xml)
            try:
                domain = conns[uri].createXML(xml, libvirt.VIR_DOMAIN_START_PAUSED)
            except libvirt.libvirtError as exc:
                raise NiclabError(
                    f"{node}: libvirt would not start the domain ({exc.get_error_message()}); "
                    f"its XML is {workdir / (node + '.xml')}"
                ) from None
            stack.callback(destroy, domain)
            console = Console(uri, plan.name, workdir / f"{node}.serial.log")
            console.start()
            stack.callback(console.close)
            domain.resume()
            domains[node] = domain
        agents = self._connect(domains, started, workdir)
        ready = {name: round(at - started, 2) for name, (_, at) in agents.items()}
        progress("guests answering: " + ", ".join(f"{n} {s:.1f} s" for n, s in ready.items()))
        nodes = {name: AgentNode(name, agent) for name, (agent, _) in agents.items()}
        return plans, domains, nodes, ready

    def _host_uris(self, placement: Placement) -> list[str]:
        assert self.lab is not None
        return [self.lab.hosts[host].libvirt for host in placement.hosts.values()]

    def _accel_of(self, image: Image, progress: Progress) -> str:
        """kvm or tcg: the caller's choice, else the probe's."""
        chosen = self._accel or choose_accel(image, progress=progress).accel
        return "kvm" if chosen == "kvm" else "tcg"

    def _connect(self, domains: dict[str, Any], started: float, workdir: Path) -> dict[str, tuple[GuestAgent, float]]:
        agents: dict[str, GuestAgent] = {name: LibvirtAgent(name, domain) for name, domain in domains.items()}
        answered, failures = connect_all(
            agents, started + self.boot_timeout, {name: partial(_stopped, domain) for name, domain in domains.items()}
        )
        results = {name: (agents[name], at) for name, at in answered.items()}
        if failures:
            details = []
            for name, why in failures.items():
                console = workdir / f"{name}.serial.log"
                details.append(
                    f"{why} (waited {time.monotonic() - started:.0f} s)\n"
                    f"--- the end of {console}:\n{tail(console)}" + _qemu_log(domains[name])
                )
            raise BootError("guest(s) did not come up: " + "\n".join(details))
        return results


def _stopped(domain: Any) -> str | None:
    """Why the domain's guest is gone, for the agent's wait; None while it runs."""
    return None if active(domain) else "its domain stopped"


def _qemu_log(domain: Any) -> str:
    """The end of libvirt's log of the domain's QEMU, where it is on this machine and readable."""
    path = Path("/var/log/libvirt/qemu") / f"{domain.name()}.log"
    if not path.is_file() or not os.access(path, os.R_OK):
        return ""
    return f"\n--- the end of {path}:\n{tail(path, 10)}"


def _pairs(count: int) -> list[tuple[int, int]]:
    ports = free_udp_ports(2 * count)
    return [(ports[2 * i], ports[2 * i + 1]) for i in range(count)]


def _volumes(conn: Any, image: Image, progress: Progress) -> tuple[str, str]:
    return image_volumes(conn, image, progress)


def _create(options: BackendOptions, **kwargs: Any) -> LibvirtBackend:
    uri = options.text("libvirt_uri")
    if options.lab is not None and uri:
        raise UsageError("--libvirt-uri is for runs without a lab: a lab gives each host's URI (hosts: libvirt:)")
    return LibvirtBackend(lab=options.lab, uri=uri, wait=options.flag("wait"), force=options.flag("force"), **kwargs)


def end_domains(request: DownRequest, say: Say, complain: Say) -> list[str]:
    """`niclab down`: the domains of killed runs on --libvirt-uri, each host of --lab, else qemu:///system if it
    answers: destroyed, or left alone when their harness ran elsewhere; each said, and all named in the result."""
    uri = request.given.get("libvirt_uri")
    uris = [uri] if isinstance(uri, str) and uri else []
    if request.lab is not None:
        uris += [host.libvirt for host in request.lab.hosts.values()]
    explicit = bool(uris)
    ended: list[str] = []
    for uri in dict.fromkeys(uris or [LOCAL_URI]):
        try:
            found = leftover_domains(uri, include_running=request.include_running)
        except NiclabError as exc:
            if explicit:  # say so, and go on with the other hosts
                complain(f"niclab: {exc}")
            continue  # without --lab or --libvirt-uri: no libvirt here, so no domain to stop either
        for name in found.destroyed:
            say(f"destroyed libvirt domain {name} on {uri}")
        for name in found.elsewhere:
            say(
                f"left libvirt domain {name} on {uri} alone: its run was started in a container or on another "
                "host, where its PID cannot be checked from here (niclab down --all stops it)"
            )
        ended += found.destroyed + found.elsewhere
    return ended


PLUGIN = BackendPlugin(
    "libvirt",
    "libvirt domains: emulated NICs, or a lab's real cards (--lab)",
    _create,
    options=(
        BackendOption(
            "libvirt-uri", "libvirt connection of --backend libvirt without a lab (qemu:///system)", metavar="URI"
        ),
        BackendOption("wait", "a lab card another run holds: wait for it, not refuse", starts_nodes=True),
        BackendOption("force", "take lab cards the host uses (an address, a route): it loses them", starts_nodes=True),
    ),
    leftovers=Leftovers(
        end_domains,
        options=(
            BackendOption(
                "libvirt-uri", "destroy leftover niclab domains there (default: qemu:///system)", metavar="URI"
            ),
        ),
        order=1,
    ),
    lab_default=True,
)
