"""The libvirt backend: one transient domain per node, on emulated NICs or on a lab's real cards.

- The same Topology the QEMU backend gets. Without a lab, ports are emulated
  NICs (the card class's stand-in, as under QEMU) and a cable is a pair of
  `<interface type='udp'>` on 127.0.0.1. With a lab (`--lab lab.yaml`), ports
  are the lab's cards (niclab.model.lab.match places the cell), passed through as
  managed VFIO hostdevs at fixed guest PCI slots; the cables are real. With a
  lab and `--emulated`, ports are emulated NICs on the lab's hosts, placed by
  their capacity (niclab.model.lab.spread); a cable between two hosts is a UDP
  tunnel between their addresses (backends/libvirt_tunnels.py).
- Cells that run at once (`run --parallel`) each get a copy of the backend
  pinned to their placement (`claim`): beside the cards and capacity the
  running cells hold.
- Domains are transient, named niclab-<run token>-<node>, and carry the
  harness's PID and start time in their metadata: leaving the context
  destroys them, and `niclab down` destroys those of a killed harness.
- Domain type kvm where the KVM probe says guests run, else qemu (TCG), per
  host: a remote host's probe boots there through its libvirt
  (backends/libvirt_accel.py), a local URI's is this machine's
  (niclab.plumbing.accel). Guests that do not answer under KVM fall back to
  TCG on their host only. The micro image boots by direct kernel boot from
  volumes of the `niclab` pool (backends/libvirt_volumes.py).
- The guest agent and the console go through libvirt, so a node may run on
  a remote host (`qemu+ssh://`): each lab host has its own URI.
- Lab cards on this host are leased for the run and bound to vfio-pci by
  niclab with a journal (niclab.plumbing.lab.vfio) so they go back to their driver
  after the run, or after a crash with `niclab lab restore`.
"""

from __future__ import annotations

import copy
import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Progress
from niclab.base.procs import pid_namespace, process_start_time
from niclab.model import nics
from niclab.model.lab.inventory import LOCAL_URI, Inventory
from niclab.model.lab.match import Placement, Unrealizable, place
from niclab.model.lab.spread import Claim, Held, Spread, cards_claim, spread
from niclab.model.topology import Topology
from niclab.plumbing.accel import AccelChoice, forced_choice, now
from niclab.plumbing.backends.base import (
    BackendOption,
    BackendOptions,
    BackendPlugin,
    DownRequest,
    Leftovers,
    Rig,
    Say,
)
from niclab.plumbing.backends.boot import (
    DEFAULT_BOOT_TIMEOUT_S,
    BootError,
    boot_falling_back_hosts,
    console_end,
    env_seconds,
    tail,
)
from niclab.plumbing.backends.libvirt_accel import host_accel
from niclab.plumbing.backends.libvirt_agent import LibvirtAgent
from niclab.plumbing.backends.libvirt_cards import card_macs, cards_facts
from niclab.plumbing.backends.libvirt_tunnels import TunnelPorts, UdpEnd, udp_ends
from niclab.plumbing.backends.libvirt_volumes import image_volumes
from niclab.plumbing.backends.libvirt_xml import DomainPlan, Hostdev, UdpInterface, domain_xml
from niclab.plumbing.backends.qemu_cmd import MAX_NICS, port_macs
from niclab.plumbing.backends.qemu_nics import emulated_model, qemu_nic, stand_ins
from niclab.plumbing.drivers.layer import driver_images, rig_modules
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


@dataclass(frozen=True)
class BootPlan:
    """One attempt at starting a run's domains, settled before `_boot` starts them."""

    domains: dict[str, tuple[str, DomainPlan]]  # node -> its host's URI, its domain (type, kernel, ports settled)
    conns: dict[str, Any]  # host URI -> the run's libvirt connection there
    image: str  # what the progress line names (image_facts' `image`)
    workdir: Path  # each domain's XML and console log


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
        emulated: bool = False,
    ):
        self.lab = lab
        self.wait, self.force = wait, force
        self.emulated = emulated and lab is not None  # emulated NICs on the lab's hosts
        self._pinned: Placement | Spread | None = None  # a parallel cell's placement (claim)
        self._tunnels = TunnelPorts(f"{os.getpid()}:{time.time()}")  # the run's UDP ports, shared with its copies
        self._setup = threading.Lock()  # what cells starting at once must not do together (probe, upload, vfio)
        self.uri = uri or LOCAL_URI
        self._image = image
        self._accel = accel
        self.boot_timeout = boot_timeout or env_seconds("NICLAB_BOOT_TIMEOUT", DEFAULT_BOOT_TIMEOUT_S)

    # -- before anything boots --------------------------------------------

    def placement(self, topology: Topology) -> Placement | Spread | None:
        """Where a lab run puts each port, or each emulated node (--emulated); None without a lab; raises
        Unrealizable."""
        if self._pinned is not None:
            return self._pinned
        if self.lab is None:
            return None
        return spread(topology, self.lab) if self.emulated else place(topology, self.lab)

    def claim(self, topology: Topology, held: Held) -> tuple[Claim, LibvirtBackend] | None:
        """For `run --parallel`: what the cell would hold if it started now beside `held`, and a copy of this
        backend that realizes it there; None if it must wait. Raises Unrealizable if it never fits."""
        if self.lab is None:
            raise Unrealizable("cells run at once only on a lab (--lab)")
        found: Placement | Spread | None
        if self.emulated:
            found = spread(topology, self.lab, held)
            if found is None:
                return None
            taken = found.claim(topology)
        else:
            try:
                found = place(topology, self.lab, held.cards)
            except Unrealizable:
                if not held.cards:
                    raise
                place(topology, self.lab)  # raises if the lab cannot realize it at all
                return None
            taken = cards_claim(found)
        pinned = copy.copy(self)
        pinned._pinned = found
        return taken, pinned

    def check(self, topology: Topology) -> str | None:
        problems = []
        if self.lab is not None and self.emulated:
            try:
                self.placement(topology)
            except Unrealizable as exc:
                problems.append(str(exc))
            problems += stand_ins(topology)
        elif self.lab is not None:
            try:
                self.placement(topology)
            except Unrealizable as exc:
                problems.append(str(exc))
            problems += self._driver_problems(topology)
        else:
            problems += stand_ins(topology)
            for wire in topology.wires:
                if wire.switched:
                    problems.append(
                        f"{wire.medium()}: the libvirt backend makes cables, not switches; run it with --backend qemu"
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
        if not isinstance(placement, Placement) or self.lab is None or image is None:
            return []
        table = DriverTable(image)
        asked = {p.key for p in topology.ports if p.driver is not None}
        return placed_drivers(self.lab, placement, {spec.name: table for spec in topology.nodes}, asked)[1]

    def describe(self, topology: Topology, workdir: Path | None = None) -> list[str]:
        placement = self.placement(topology)
        lab_image = (self._image or find_image(LAB_RECIPE)) if isinstance(placement, Placement) else None
        floor = int(lab_image.manifest.get("min_memory_mib", 0)) if lab_image is not None else 0
        dry = (DRY_KERNEL, DRY_INITRD)
        with self._udp_ends(topology, placement) as ends:
            plans = self._plans(
                topology, placement, "dryrun", "kvm", dry, "console=ttyS0", ends=ends, memory_floor=floor
            )
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
            for node, (_, plan) in plans.items():
                (workdir / f"{node}.xml").write_text(domain_xml(plan))
        lines: list[str] = []
        if isinstance(placement, Spread):
            assert self.lab is not None
            lines = placement.lines(topology, self.lab)
        elif placement is not None:
            assert self.lab is not None
            lines = placement.lines(topology) + guest_driver_lines(
                self.lab, placement, lab_image, {p.key: str(p.driver) for p in topology.ports if p.driver is not None}
            )
        for node, (uri, _plan) in plans.items():
            where = f"{node}: domain on {uri}"
            if workdir is not None:
                where += f" ({workdir / (node + '.xml')})"
            lines.append(where)
        return lines

    def _plans(
        self,
        topology: Topology,
        placement: Placement | Spread | None,
        token: str,
        domain_type: str,
        boot: tuple[str, str],
        cmdline: str,
        metadata: dict[str, str] | None = None,
        ends: dict[tuple[str, int, int], UdpEnd] | None = None,
        memory_floor: int = 0,  # MiB: what the image's initramfs needs unpacked (its manifest's min_memory_mib)
    ) -> dict[str, tuple[str, DomainPlan]]:
        macs = port_macs(topology)
        ports_udp = ends or {}
        if placement is None:
            for wire, (a, b) in zip(topology.wires, _pairs(len(topology.wires)), strict=True):
                left, right = wire.ports
                ports_udp[left.key] = UdpEnd("127.0.0.1", a, "127.0.0.1", b)
                ports_udp[right.key] = UdpEnd("127.0.0.1", b, "127.0.0.1", a)
        plans = {}
        for spec in topology.nodes:
            ports: list[UdpInterface | Hostdev] = []
            for port in spec.ports:
                if isinstance(placement, Placement):
                    ports.append(Hostdev(placement.cards[port.key].pci))
                    continue
                qemu = qemu_nic(emulated_model(port.model).name)
                end = ports_udp[port.key]
                ports.append(
                    UdpInterface(
                        macs[port.key],
                        qemu.libvirt_type,
                        end.local_port,
                        end.remote_port,
                        "event_idx=off" in qemu.properties,
                        end.local_address,
                        end.remote_address,
                    )
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
        guest_drivers: dict[tuple[str, int, int], GuestDriver] = {}
        with self._setup:
            # a lab run's guests carry every Ethernet driver and its firmware; an emulated run's, the catalog's
            on_cards = isinstance(placement, Placement)
            base = self._image or (ensure_image(LAB_RECIPE, progress) if on_cards else None)
            images = driver_images(topology.nodes, node_images(topology.nodes, base, progress), progress)
            image = self._image or ensure_image(progress=progress)  # what the accelerator was probed with
        if isinstance(placement, Placement):
            assert self.lab is not None
            tables = {node: DriverTable(i) for node, i in images.items()}
            guest_drivers, problems = placed_drivers(self.lab, placement, tables)  # the new modules' aliases too
            if problems:
                raise NiclabError("; ".join(problems))
        workdir.mkdir(parents=True, exist_ok=True)
        token = hashlib.sha256(f"{workdir.resolve()}:{os.getpid()}:{time.time()}".encode()).hexdigest()[:8]
        with ExitStack() as stack:
            if isinstance(placement, Placement):
                assert self.lab is not None
                run = f"{workdir.parent.parent.name}/{workdir.name}"
                held = hold_cards(self.lab, placement, run, progress, wait=self.wait, force=self.force)
                stack.enter_context(_one_at_a_time(self._setup, held))
            ends = stack.enter_context(self._udp_ends(topology, placement))
            uris = {self.uri} if placement is None else {uri for uri in self._host_uris(placement)}
            conns = {uri: open_uri(uri) for uri in sorted(uris)}
            for conn in conns.values():
                stack.callback(conn.close)
            with self._setup:
                choices = self._accels(conns, image, progress)
                distinct = {i.id: i for i in images.values()}
                boot = {
                    (uri, i): _volumes(conn, distinct[i], progress) for uri, conn in conns.items() for i in distinct
                }
            domains = stack.enter_context(ExitStack())
            node_uri = {spec.name: self._node_uri(spec.name, placement) for spec in topology.nodes}
            cmdline = next(iter(images.values())).cmdline  # every kernel boots with the recipe's command line
            floor = max(int(i.manifest.get("min_memory_mib", 0)) for i in images.values())
            metadata = _harness_metadata(workdir)

            def start(accels: dict[str, str]) -> Booted:
                kinds = {uri: "kvm" if a == "kvm" else "qemu" for uri, a in accels.items()}  # TCG's type is qemu
                plans = self._plans(
                    topology, placement, token, "qemu", ("", ""), cmdline, metadata, ends=ends, memory_floor=floor
                )
                settled = _settled(plans, boot, images, kinds)
                return self._boot(BootPlan(settled, conns, image_facts(images)["image"], workdir), domains, progress)

            booted, accels, fallback = boot_falling_back_hosts(
                {uri: choice.accel for uri, choice in choices.items()},
                start,
                domains.close,
                node_uri.__getitem__,
                image,
                progress,
                "destroyed the domains and started them",
                forced=bool(self._accel),
                answers=lambda uri: _answers(conns[uri]),
            )
            plans, running, nodes, ready = booted
            macs, seen = port_macs(topology), dict[str, dict]()
            cards = placement if isinstance(placement, Placement) else None
            if cards is not None:
                macs, seen = card_macs(topology, nodes)
            drivers = {}
            for port in topology.ports:
                cls = nics.get(port.model) if cards is not None else nics.stand_in(port.model)
                if cls is not None:
                    found = guest_drivers.get(port.key)
                    drivers[port.key] = cls.driver or (found.module if found and found.module else "")
            yield Rig(
                topology=topology,
                nodes=dict(nodes),
                macs=macs,
                drivers=drivers,
                modules=rig_modules(topology, images),
                facts={
                    "backend": self.name,
                    **accel_facts(node_uri, accels, choices),
                    "accel_fallback": fallback,
                    "libvirt": {node: {"uri": uri, "domain": plan.name} for node, (uri, plan) in plans.items()},
                    **({"hosts": dict(placement.hosts)} if placement is not None else {}),
                    "libvirt_version": version(next(iter(conns.values()))),
                    **image_facts(images),
                    "agent_ready_s": ready,
                    **({"cards": cards_facts(topology, cards, seen)} if cards is not None else {}),
                },
                gone=lambda: {
                    name: why for name, d in running.items() if (why := gone_why(d, self._host_title(node_uri[name])))
                },
                console=lambda name: console_end(workdir / f"{name}.serial.log"),  # read through libvirt
            )

    def _boot(self, plan: BootPlan, stack: ExitStack, progress: Progress) -> Booted:
        """Start every domain of `plan` and wait for the agents; what it starts goes on `stack`."""
        libvirt = libvirt_module()
        workdir = plan.workdir
        domains: dict[str, Any] = {}
        started = time.monotonic()
        types = {node: domain.domain_type for node, (_, domain) in plan.domains.items()}
        said = (
            next(iter(types.values()))
            if len(set(types.values())) == 1
            else ", ".join(f"{node} {kind}" for node, kind in types.items())
        )
        progress(f"starting {len(plan.domains)} libvirt domains ({said}; image {plan.image})")
        for node, (uri, domain_plan) in plan.domains.items():
            xml = domain_xml(domain_plan)
            (workdir / f"{node}.xml").write_text(xml)
            try:
                domain = plan.conns[uri].createXML(xml, libvirt.VIR_DOMAIN_START_PAUSED)
            except libvirt.libvirtError as exc:
                raise NiclabError(
                    f"{node}: libvirt on {self._host_title(uri)} would not start the domain "
                    f"({exc.get_error_message()}); its XML is {workdir / (node + '.xml')}"
                ) from None
            stack.callback(destroy, domain)
            try:
                console = Console(uri, domain_plan.name, workdir / f"{node}.serial.log")
                console.start()
                stack.callback(console.close)
                domain.resume()
            except libvirt.libvirtError as exc:
                raise NiclabError(
                    f"{node}: libvirt on {self._host_title(uri)} started the domain but would not run it "
                    f"({exc.get_error_message()})"
                ) from None
            domains[node] = domain
        agents = self._connect(domains, started, workdir, {node: uri for node, (uri, _) in plan.domains.items()})
        ready = {name: round(at - started, 2) for name, (_, at) in agents.items()}
        progress("guests answering: " + ", ".join(f"{n} {s:.1f} s" for n, s in ready.items()))
        nodes = {name: AgentNode(name, agent) for name, (agent, _) in agents.items()}
        return plan.domains, domains, nodes, ready

    @contextmanager
    def _udp_ends(
        self, topology: Topology, placement: Placement | Spread | None
    ) -> Iterator[dict[tuple[str, int, int], UdpEnd] | None]:
        """The UDP ends of emulated nodes' cables on the lab's hosts, their ports the run's while the block lasts;
        None where there are none (real cards), or where _plans picks free ports itself (no lab)."""
        if not isinstance(placement, Spread):
            yield None
            return
        assert self.lab is not None
        with self._tunnels.held(2 * len(topology.wires)) as ports:
            yield udp_ends(topology, placement, self.lab, ports)

    def _host_uris(self, placement: Placement | Spread) -> list[str]:
        assert self.lab is not None
        return [self.lab.hosts[host].libvirt for host in placement.hosts.values()]

    def _node_uri(self, node: str, placement: Placement | Spread | None) -> str:
        if placement is None or self.lab is None:
            return self.uri
        return self.lab.hosts[placement.hosts[node]].libvirt

    def _host_title(self, uri: str) -> str:
        """How an error names a host: `host l1b (qemu+ssh://root@l1b/system)` in a lab, else its URI."""
        if self.lab is not None:
            for name, host in self.lab.hosts.items():
                if host.libvirt == uri:
                    return f"host {name} ({uri})"
        return uri

    def _accels(self, conns: dict[str, Any], image: Image, progress: Progress) -> dict[str, AccelChoice]:
        """Per host URI: the caller's accelerator, else $NICLAB_ACCEL's, else that host's probe (a remote host's
        booted there, through its libvirt; a local URI's on this machine), cached per host and image."""
        if self._accel:
            chosen = AccelChoice("kvm" if self._accel == "kvm" else "tcg", "chosen by the caller", now(), forced=True)
            return {uri: chosen for uri in conns}
        if (forced := forced_choice()) is not None:
            return {uri: forced for uri in conns}
        return {uri: host_accel(conn, uri, image, progress) for uri, conn in conns.items()}

    def _connect(
        self, domains: dict[str, Any], started: float, workdir: Path, uris: dict[str, str]
    ) -> dict[str, tuple[GuestAgent, float]]:
        agents: dict[str, GuestAgent] = {
            name: LibvirtAgent(name, domain, self._host_title(uris[name])) for name, domain in domains.items()
        }
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
            raise BootError("guest(s) did not come up: " + "\n".join(details), nodes=tuple(failures))
        return results


def accel_facts(node_uri: dict[str, str], accels: dict[str, str], choices: dict[str, AccelChoice]) -> dict[str, object]:
    """The rig facts of the accelerators: `accel` (kvm or tcg; `mixed` when the nodes' hosts differ, with
    `accel_nodes` saying each node's) and `accel_reason` (each host's, where there are several)."""
    per_node = {node: accels[uri] for node, uri in node_uri.items()}
    kinds = set(per_node.values())
    reasons = {
        uri: choices[uri].reason if accels[uri] == choices[uri].accel else "KVM fell back, see the warning"
        for uri in dict.fromkeys(node_uri.values())
    }
    facts: dict[str, object] = {
        "accel": kinds.pop() if len(kinds) == 1 else "mixed",
        "accel_reason": next(iter(reasons.values()))
        if len(set(reasons.values())) == 1
        else "; ".join(f"{uri}: {why}" for uri, why in reasons.items()),
    }
    if facts["accel"] == "mixed":
        facts["accel_nodes"] = per_node
    return facts


def _harness_metadata(workdir: Path) -> dict[str, str]:
    """What a run's domains carry for `niclab down`: the harness's PID, its start time and PID namespace, the run."""
    return {
        "harness-pid": str(os.getpid()),
        "harness-start": str(process_start_time(os.getpid())),
        "harness-at": pid_namespace(),
        "run": str(workdir),
    }


def _settled(
    plans: dict[str, tuple[str, DomainPlan]],
    volumes: dict[tuple[str, str], tuple[str, str]],  # (uri, image id) -> the kernel and initrd volumes there
    images: dict[str, Image],
    kinds: dict[str, str],  # uri -> the domain type there: kvm, or qemu (TCG)
) -> dict[str, tuple[str, DomainPlan]]:
    """Each node's domain with its host's domain type and its image's volumes on that host."""
    settled = {}
    for node, (uri, plan) in plans.items():
        kernel, initrd = volumes[(uri, images[node].id)]
        settled[node] = (uri, replace(plan, kernel=kernel, initrd=initrd, domain_type=kinds[uri]))
    return settled


def _answers(conn: Any) -> bool:
    """Whether a host's libvirt connection is still open (its keepalives close it when the host goes away)."""
    try:
        return bool(conn.isAlive())
    except Exception:  # libvirtError on a closed connection
        return False


def gone_why(domain: Any, host: str) -> str | None:
    """Why a node's domain is gone (None while it runs): it stopped, or its host stopped answering."""
    if active(domain):
        return None
    try:
        alive = bool(domain.connect().isAlive())
    except Exception:
        alive = False
    if not alive:
        return f"{host} stopped answering: its libvirt connection is closed"
    return "its domain is no longer running"


def _stopped(domain: Any) -> str | None:
    """Why the domain's guest is gone, for the agent's wait; None while it runs."""
    return None if active(domain) else "its domain stopped"


@contextmanager
def _one_at_a_time(lock: threading.Lock, held: AbstractContextManager[Any]) -> Iterator[None]:
    """Enter and leave `held` under the lock (cells that start or stop at once take turns); hold it between."""
    with lock:
        held.__enter__()
    try:
        yield
    except BaseException as exc:
        with lock:
            if not held.__exit__(type(exc), exc, exc.__traceback__):
                raise
    else:
        with lock:
            held.__exit__(None, None, None)


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
    if options.flag("emulated") and options.lab is None:
        raise UsageError("--emulated runs emulated NICs on a lab's hosts: give --lab (without a lab they are anyway)")
    return LibvirtBackend(
        lab=options.lab,
        uri=uri,
        wait=options.flag("wait"),
        force=options.flag("force"),
        emulated=options.flag("emulated"),
        **kwargs,
    )


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
        BackendOption(
            "emulated",
            "with --lab: every port an emulated NIC (its class's stand-in) on the lab's hosts, nodes placed by "
            "the hosts' capacity; cables between hosts are UDP tunnels between their addresses",
        ),
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
