"""The libvirt backend: one transient domain per node, on emulated NICs or on a lab's real cards.

- The same Topology the QEMU backend gets. Without a lab, ports are emulated
  NICs (the NIC model's stand-in, as under QEMU) and a cable is a pair of
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
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Progress
from niclab.model import nics
from niclab.model.facts import RigFacts
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
from niclab.plumbing.backends.libvirt_domains import (
    domain_plans,
    harness_metadata,
    hostdevs,
    interfaces,
    loopback_ends,
    settled,
)
from niclab.plumbing.backends.libvirt_tunnels import TunnelPorts, UdpEnd, udp_ends
from niclab.plumbing.backends.libvirt_volumes import image_volumes
from niclab.plumbing.backends.libvirt_xml import DomainPlan, Hostdev, UdpInterface, domain_xml
from niclab.plumbing.backends.qemu_cmd import MAX_NICS, port_macs
from niclab.plumbing.backends.qemu_nics import stand_ins
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


@dataclass(frozen=True)
class RigPlan:
    """What a run's rig is made of, whatever its placement, before anything is started."""

    topology: Topology
    placement: Placement | Spread | None  # None without a lab
    node_uri: dict[str, str]  # node -> its host's libvirt URI
    images: dict[str, Image]  # node -> the image it boots
    token: str  # the run's, in its domains' names: niclab-<token>-<node>
    workdir: Path


@dataclass(frozen=True)
class Started:
    """What `_start` started: each node's (URI, domain plan), domain, Node and when its agent answered (s), under
    each host's accelerator; the fallback's warning, the accelerators chosen, and the hosts' connections."""

    plans: dict[str, tuple[str, DomainPlan]]
    running: dict[str, Any]
    nodes: dict[str, AgentNode]
    ready: dict[str, float]
    accels: dict[str, str]  # host URI -> the accelerator its domains run under: kvm or tcg
    fallback: str | None
    choices: dict[str, AccelChoice]
    conns: dict[str, Any]


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
        if isinstance(placement, Placement):
            return self._describe_on_cards(topology, placement, workdir)
        return self._describe_emulated(topology, placement, workdir)

    def _describe_on_cards(self, topology: Topology, placement: Placement, workdir: Path | None) -> list[str]:
        """The dry run on the lab's cards: each cable's cards, each card's guest driver, each node's domain."""
        assert self.lab is not None
        lab_image = self._image or find_image(LAB_RECIPE)
        floor = int(lab_image.manifest.get("min_memory_mib", 0)) if lab_image is not None else 0
        plans = self._dry_plans(topology, placement, hostdevs(topology, placement), floor)
        _write_dry(plans, workdir)
        lines = placement.lines(topology) + guest_driver_lines(
            self.lab, placement, lab_image, {p.key: str(p.driver) for p in topology.ports if p.driver is not None}
        )
        return lines + _domain_lines(plans, workdir)

    def _describe_emulated(self, topology: Topology, placement: Spread | None, workdir: Path | None) -> list[str]:
        """The dry run on emulated NICs: on a lab, each node's host and each tunnel; each node's domain."""
        with self._udp_ends(topology, placement) as ends:
            plans = self._dry_plans(topology, placement, interfaces(topology, ends()), 0)
        _write_dry(plans, workdir)
        lines = self._spread_lines(topology, placement)
        return lines + _domain_lines(plans, workdir)

    def _dry_plans(
        self,
        topology: Topology,
        placement: Placement | Spread | None,
        ports: Mapping[tuple[str, int, int], UdpInterface | Hostdev],
        memory_floor: int,
    ) -> dict[str, tuple[str, DomainPlan]]:
        """The dry run's domains: kvm, the volumes' paths with IMAGE for the image's name."""
        return domain_plans(
            topology,
            self._node_uris(topology, placement),
            ports,
            "dryrun",
            "kvm",
            (DRY_KERNEL, DRY_INITRD),
            "console=ttyS0",
            memory_floor=memory_floor,
        )

    def _spread_lines(self, topology: Topology, placement: Spread | None) -> list[str]:
        """Where --emulated puts each node and each tunnel between hosts; nothing without a lab."""
        if placement is None:
            return []
        assert self.lab is not None
        return placement.lines(topology, self.lab)

    # -- the run ----------------------------------------------------------

    @contextmanager
    def realize(self, topology: Topology, workdir: Path, progress: Progress) -> Iterator[Rig]:
        libvirt_module()  # says how to install it, before anything is held
        try:
            placement = self.placement(topology)
        except Unrealizable as exc:
            raise NiclabError(str(exc)) from None
        if isinstance(placement, Placement):
            run = self._realize_on_cards(topology, placement, workdir, progress)
        else:
            run = self._realize_emulated(topology, placement, workdir, progress)
        with run as rig:
            yield rig

    @contextmanager
    def _realize_on_cards(
        self, topology: Topology, placement: Placement, workdir: Path, progress: Progress
    ) -> Iterator[Rig]:
        """A run on the lab's cards: the guests carry every Ethernet driver and its firmware (the lab image), each
        card is held for the run and passed through to its node, and keeps its own MAC."""
        assert self.lab is not None
        images, image = self._images(topology, progress, LAB_RECIPE)
        tables = {node: DriverTable(i) for node, i in images.items()}
        guest_drivers, problems = placed_drivers(self.lab, placement, tables)  # the new modules' aliases too
        if problems:
            raise NiclabError("; ".join(problems))
        rig_plan = self._rig_plan(topology, placement, images, workdir)
        with ExitStack() as stack:
            run = f"{workdir.parent.parent.name}/{workdir.name}"
            held = hold_cards(self.lab, placement, run, progress, wait=self.wait, force=self.force)
            stack.enter_context(_one_at_a_time(self._setup, held))
            passed = hostdevs(topology, placement)
            up = self._start(rig_plan, lambda: passed, image, stack, progress)
            macs, seen = card_macs(topology, up.nodes)
            yield self._rig(rig_plan, up, macs, _drivers(topology, nics.get, guest_drivers), placement, seen)

    @contextmanager
    def _realize_emulated(
        self, topology: Topology, placement: Spread | None, workdir: Path, progress: Progress
    ) -> Iterator[Rig]:
        """A run on emulated NICs (each port its class's stand-in, as under QEMU): here, cables on 127.0.0.1; on a
        lab's hosts (--emulated), a cable between two hosts is a UDP tunnel between their addresses."""
        images, image = self._images(topology, progress)  # the catalog's drivers: the micro image
        rig_plan = self._rig_plan(topology, placement, images, workdir)
        with ExitStack() as stack:
            ends = stack.enter_context(self._udp_ends(topology, placement))
            up = self._start(rig_plan, lambda: interfaces(topology, ends()), image, stack, progress)
            yield self._rig(rig_plan, up, port_macs(topology), _drivers(topology, nics.stand_in, {}))

    def _images(
        self, topology: Topology, progress: Progress, recipe: str | None = None
    ) -> tuple[dict[str, Image], Image]:
        """Each node's image, on the base of `recipe` (None: the micro image's, as node_images picks it), and the
        image the accelerator is probed with."""
        with self._setup:
            base = self._image or (ensure_image(recipe, progress) if recipe else None)
            images = driver_images(topology.nodes, node_images(topology.nodes, base, progress), progress)
            image = self._image or ensure_image(progress=progress)  # what the accelerator was probed with
        return images, image

    def _rig_plan(
        self, topology: Topology, placement: Placement | Spread | None, images: dict[str, Image], workdir: Path
    ) -> RigPlan:
        """What the run's rig is made of, its work directory made and its token drawn."""
        workdir.mkdir(parents=True, exist_ok=True)
        token = hashlib.sha256(f"{workdir.resolve()}:{os.getpid()}:{time.time()}".encode()).hexdigest()[:8]
        return RigPlan(topology, placement, self._node_uris(topology, placement), images, token, workdir)

    def _start(
        self,
        rig_plan: RigPlan,
        ports: Callable[[], Mapping[tuple[str, int, int], UdpInterface | Hostdev]],  # asked again for each attempt
        image: Image,  # what the accelerators were probed with
        stack: ExitStack,
        progress: Progress,
    ) -> Started:
        """Open each host's connection, choose its accelerator and put the images' volumes there, and start the
        domains; start them again under TCG on the hosts whose KVM failed. What it opens goes on `stack`."""
        uris = set(rig_plan.node_uri.values())
        conns = {uri: open_uri(uri) for uri in sorted(uris)}
        for conn in conns.values():
            stack.callback(conn.close)
        with self._setup:
            choices = self._accels(conns, image, progress)
            distinct = {i.id: i for i in rig_plan.images.values()}
            volumes = {(uri, i): _volumes(conn, distinct[i], progress) for uri, conn in conns.items() for i in distinct}
        domains = stack.enter_context(ExitStack())
        cmdline = next(iter(rig_plan.images.values())).cmdline  # every kernel boots with the recipe's command line
        floor = max(int(i.manifest.get("min_memory_mib", 0)) for i in rig_plan.images.values())
        metadata = harness_metadata(rig_plan.workdir)

        def start(accels: dict[str, str]) -> Booted:
            kinds = {uri: "kvm" if a == "kvm" else "qemu" for uri, a in accels.items()}  # TCG's type is qemu
            plans = domain_plans(
                rig_plan.topology,
                rig_plan.node_uri,
                ports(),
                rig_plan.token,
                "qemu",
                ("", ""),
                cmdline,
                metadata,
                floor,
            )
            plan = BootPlan(
                settled(plans, volumes, rig_plan.images, kinds),
                conns,
                image_facts(rig_plan.images)["image"],
                rig_plan.workdir,
            )
            return self._boot(plan, domains, progress)

        booted, accels, fallback = boot_falling_back_hosts(
            {uri: choice.accel for uri, choice in choices.items()},
            start,
            domains.close,
            rig_plan.node_uri.__getitem__,
            image,
            progress,
            "destroyed the domains and started them",
            forced=bool(self._accel),
            answers=lambda uri: _answers(conns[uri]),
        )
        plans, running, agents, ready = booted
        return Started(plans, running, agents, ready, accels, fallback, choices, conns)

    def _rig(
        self,
        rig_plan: RigPlan,
        up: Started,
        macs: dict[tuple[str, int, int], str],
        drivers: dict[tuple[str, int, int], str],
        cards: Placement | None = None,
        seen: dict | None = None,  # what the guests see of the cards (card_macs)
    ) -> Rig:
        """The run's rig: its guests, each port's MAC and driver, and the facts of where and how it runs."""
        topology, placement, node_uri, workdir = (
            rig_plan.topology,
            rig_plan.placement,
            rig_plan.node_uri,
            rig_plan.workdir,
        )
        running = up.running
        seen = seen or {}
        return Rig(
            topology=topology,
            nodes=dict(up.nodes),
            macs=macs,
            drivers=drivers,
            modules=rig_modules(topology, rig_plan.images),
            facts=RigFacts.model_validate(
                {
                    "backend": self.name,
                    **accel_facts(node_uri, up.accels, up.choices),
                    "accel_fallback": up.fallback,
                    "libvirt": {node: {"uri": uri, "domain": plan.name} for node, (uri, plan) in up.plans.items()},
                    "hosts": dict(placement.hosts) if placement is not None else None,
                    "libvirt_version": version(next(iter(up.conns.values()))),
                    **image_facts(rig_plan.images),
                    "agent_ready_s": up.ready,
                    "cards": cards_facts(topology, cards, seen) if cards is not None else None,
                }
            ),
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
        self, topology: Topology, placement: Spread | None
    ) -> Iterator[Callable[[], dict[tuple[str, int, int], UdpEnd]]]:
        """Where each emulated port's cable ends, asked for each boot: on a lab's hosts, the run's tunnel ports,
        held while the block lasts; here, ports of 127.0.0.1 the kernel finds free when asked."""
        if placement is None:
            yield partial(loopback_ends, topology)
            return
        assert self.lab is not None
        with self._tunnels.held(2 * len(topology.wires)) as ports:
            ends = udp_ends(topology, placement, self.lab, ports)
            yield lambda: ends

    def _node_uris(self, topology: Topology, placement: Placement | Spread | None) -> dict[str, str]:
        """Each node's host's libvirt URI: its lab host's, else the backend's."""
        if placement is None or self.lab is None:
            return {spec.name: self.uri for spec in topology.nodes}
        return {spec.name: self.lab.hosts[placement.hosts[spec.name]].libvirt for spec in topology.nodes}

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


def _drivers(
    topology: Topology,
    models: Callable[[str], nics.NicModel | None],  # a port's model name -> the model whose driver it binds
    guest_drivers: dict[tuple[str, int, int], GuestDriver],  # the lab image's, where the model names none
) -> dict[tuple[str, int, int], str]:
    """Each port's driver in its guest."""
    drivers = {}
    for port in topology.ports:
        model = models(port.model)
        if model is not None:
            found = guest_drivers.get(port.key)
            drivers[port.key] = model.driver or (found.module if found and found.module else "")
    return drivers


def _write_dry(plans: dict[str, tuple[str, DomainPlan]], workdir: Path | None) -> None:
    """The dry run's domain XML, one file per node, if it has a directory."""
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        for node, (_, plan) in plans.items():
            (workdir / f"{node}.xml").write_text(domain_xml(plan))


def _domain_lines(plans: dict[str, tuple[str, DomainPlan]], workdir: Path | None) -> list[str]:
    """The dry run's lines saying where each node's domain goes, and its XML."""
    lines = []
    for node, (uri, _plan) in plans.items():
        where = f"{node}: domain on {uri}"
        if workdir is not None:
            where += f" ({workdir / (node + '.xml')})"
        lines.append(where)
    return lines


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
            "with --lab: every port an emulated NIC (its model's stand-in) on the lab's hosts, nodes placed by "
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
