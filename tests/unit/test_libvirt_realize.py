"""The libvirt backend's run (`realize`) with a fake libvirt: on emulated NICs here, on emulated NICs on a lab's
hosts (--emulated), and on a lab's cards; the domains it starts, the rig it yields, its fallback and its errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from niclab.base.errors import NiclabError
from niclab.model.lab.inventory import parse_inventory
from niclab.model.scenario import parse
from niclab.plumbing.backends import boot as boot_mod
from niclab.plumbing.backends import libvirt
from niclab.plumbing.backends.base import Rig
from niclab.plumbing.backends.libvirt import LibvirtBackend
from niclab.plumbing.backends.qemu_cmd import port_macs
from niclab.plumbing.image.store import Image
from niclab.plumbing.lab.drivers import GuestDriver

LAB = """\
name: pair
hosts:
  rig1: {libvirt: qemu:///system, address: 192.0.2.1, capacity: {cpus: 2, memory_mib: 1024}}
  rig2: {libvirt: qemu+ssh://root@rig2/system, address: 192.0.2.2, capacity: {cpus: 2, memory_mib: 1024}}
cards:
  - {id: a1, host: rig1, pci: "0000:03:00.0", model: e1000}
  - {id: b1, host: rig1, pci: "0000:04:00.0", model: e1000}
cables:
  - [a1, b1]
"""

SCENARIO = """\
name: t
nodes: {a: {cpus: CPUS}, b: {cpus: CPUS}}
links:
  - {between: [a, b], nic: NIC}
"""


def topology(nic: str = "rtl8139", cpus: int = 1):
    return parse(SCENARIO.replace("CPUS", str(cpus)).replace("NIC", nic), "t.yaml").cells[0].scenario.topology()


class FakeError(Exception):
    def get_error_message(self) -> str:
        return str(self)


class FakeDomain:
    def __init__(self, conn: FakeConn, xml: str):
        self.conn, self.xml = conn, xml
        self.running, self.resumed = True, False

    def name(self) -> str:
        return str(ET.fromstring(self.xml).findtext("name"))

    def resume(self) -> None:
        if self.conn.world.refuse_resume:
            raise FakeError("cannot resume")
        self.resumed = True

    def isActive(self) -> bool:
        return self.running

    def destroy(self) -> None:
        self.running = False
        self.conn.world.said.append(f"destroy {self.name()}")

    def connect(self) -> FakeConn:
        return self.conn


class FakeConn:
    def __init__(self, world: World, uri: str):
        self.world, self.uri = world, uri

    def createXML(self, xml: str, flags: int) -> FakeDomain:
        assert flags == 1  # started paused
        if self.world.refuse_create:
            raise FakeError(self.world.refuse_create)
        self.world.created.append((self.uri, xml))
        return FakeDomain(self, xml)

    def close(self) -> None:
        self.world.said.append(f"close {self.uri}")

    def isAlive(self) -> bool:
        return True

    def getLibVersion(self) -> int:
        return 9_000_001


class World:
    """What the fake libvirt was asked, and how it answers."""

    def __init__(self, tmp_path: Path):
        self.image = Image("micro", "0123456789abcdef", tmp_path / "micro", "console=ttyS0 quiet", {})
        self.lab_image = Image("lab", "fedcba9876543210", tmp_path / "lab", "console=ttyS0", {"min_memory_mib": 448})
        self.created: list[tuple[str, str]] = []
        self.said: list[str] = []
        self.held: list[tuple[str, bool, bool]] = []
        self.refuse_create = ""
        self.refuse_resume = False
        self.hung: list[str] = []  # the accelerators under which node a does not answer

    def xml(self, uri: str, node: str) -> ET.Element:
        found = [
            ET.fromstring(x)
            for u, x in self.created
            if u == uri and str(ET.fromstring(x).findtext("name")).endswith(f"-{node}")
        ]
        return found[-1]


@pytest.fixture
def world(monkeypatch, tmp_path: Path) -> World:
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NICLAB_ACCEL", raising=False)
    world = World(tmp_path)
    module = SimpleNamespace(libvirtError=FakeError, VIR_DOMAIN_START_PAUSED=1)
    monkeypatch.setattr(libvirt, "libvirt_module", lambda: module)
    monkeypatch.setattr(libvirt, "open_uri", lambda uri: FakeConn(world, uri))
    monkeypatch.setattr(
        libvirt, "ensure_image", lambda recipe=None, progress=None: world.lab_image if recipe else world.image
    )
    monkeypatch.setattr(
        libvirt, "node_images", lambda nodes, base, progress: {n.name: base or world.image for n in nodes}
    )
    monkeypatch.setattr(
        libvirt, "image_volumes", lambda conn, image, progress: (f"/pool/{image.id}-k", f"/pool/{image.id}-i")
    )

    class FakeConsole:
        def __init__(self, uri: str, name: str, log: Path):
            self.name = name

        def start(self) -> None:
            world.said.append(f"console {self.name}")

        def close(self) -> None:
            world.said.append(f"console closed {self.name}")

    monkeypatch.setattr(libvirt, "Console", FakeConsole)

    def connect_all(agents: dict[str, Any], deadline: float, alive: dict[str, Any]) -> tuple[dict, dict]:
        hung = {
            n for n, agent in agents.items() if n == "a" and ET.fromstring(agent._domain.xml).get("type") in world.hung
        }
        return {n: time.monotonic() for n in agents if n not in hung}, {
            n: f"{n}: the agent did not answer" for n in hung
        }

    monkeypatch.setattr(libvirt, "connect_all", connect_all)

    @contextmanager
    def hold_cards(lab: Any, placement: Any, run: str, progress: Any, *, wait: bool, force: bool) -> Iterator[None]:
        world.held.append((run, wait, force))
        world.said.append("cards held")
        try:
            yield
        finally:
            world.said.append("cards given back")

    monkeypatch.setattr(libvirt, "hold_cards", hold_cards)
    monkeypatch.setattr(libvirt, "DriverTable", lambda image: image)
    monkeypatch.setattr(
        libvirt,
        "placed_drivers",
        lambda lab, placement, tables: ({("a", 0, 0): GuestDriver("8086:100e", ("e1000",), False)}, []),
    )
    monkeypatch.setattr(
        libvirt,
        "card_macs",
        lambda topology, nodes: (
            {p.key: f"00:1b:21:00:00:0{i}" for i, p in enumerate(topology.ports)},
            {"a/link0": {"guest_pci": "0000:00:03.0"}},
        ),
    )
    return world


def realize(backend: LibvirtBackend, topo, workdir: Path) -> tuple[Rig, list[str]]:
    said: list[str] = []
    with backend.realize(topo, workdir, said.append) as rig:
        return rig, said


def test_emulated_nics_here_are_domains_on_the_uri_with_udp_cables_on_loopback(world, tmp_path):
    topo = topology()
    rig, said = realize(LibvirtBackend(accel="kvm"), topo, tmp_path / "runs" / "r" / "cell")
    assert [uri for uri, _ in world.created] == ["qemu:///system", "qemu:///system"]
    a, b = world.xml("qemu:///system", "a"), world.xml("qemu:///system", "b")
    assert a.get("type") == "kvm" and a.findtext("os/kernel") == "/pool/micro-0123456789abcdef-k"
    assert a.findtext("os/cmdline") == "console=ttyS0 quiet niclab.node=a"
    a_nic, b_nic = a.find("devices/interface"), b.find("devices/interface")
    assert a_nic.get("type") == "udp" and a_nic.find("model").get("type") == "rtl8139"
    assert a_nic.find("source").get("address") == a_nic.find("source/local").get("address") == "127.0.0.1"
    assert a_nic.find("source").get("port") == b_nic.find("source/local").get("port")
    assert (tmp_path / "runs" / "r" / "cell" / "a.xml").read_text() == world.created[0][1]
    assert rig.macs == port_macs(topo) and rig.drivers == {("a", 0, 0): "8139cp", ("b", 0, 0): "8139cp"}
    assert rig.facts.accel_fallback is None
    facts = rig.facts.model_dump(exclude_unset=True)  # as the cell record holds them: what was found
    assert facts["backend"] == "libvirt" and facts["accel"] == "kvm"
    assert facts["libvirt"]["a"]["uri"] == "qemu:///system" and facts["libvirt_version"] == "9.0.1"
    assert "hosts" not in facts and "cards" not in facts
    assert said[0] == "starting 2 libvirt domains (kvm; image micro-0123456789abcdef)"
    assert said[1].startswith("guests answering: a ")
    assert world.said[-4:] == [
        f"destroy {facts['libvirt']['b']['domain']}",
        f"console closed {facts['libvirt']['a']['domain']}",
        f"destroy {facts['libvirt']['a']['domain']}",
        "close qemu:///system",
    ]


def test_emulated_nics_on_a_labs_hosts_cross_between_them_on_a_tunnel(world, tmp_path):
    backend = LibvirtBackend(lab=parse_inventory(LAB, "lab.yaml"), accel="tcg", emulated=True)
    rig, said = realize(backend, topology(cpus=2), tmp_path / "cell")
    assert [uri for uri, _ in world.created] == ["qemu:///system", "qemu+ssh://root@rig2/system"]
    a = world.xml("qemu:///system", "a")
    b = world.xml("qemu+ssh://root@rig2/system", "b")
    assert a.get("type") == b.get("type") == "qemu"
    assert a.find("devices/interface/source/local").get("address") == "192.0.2.1"
    assert a.find("devices/interface/source").get("address") == "192.0.2.2"
    assert rig.facts.model_dump(exclude_unset=True)["hosts"] == {
        "a": "rig1",
        "b": "rig2",
    } and "cards" not in rig.facts.model_dump(exclude_unset=True)
    assert rig.facts.model_dump(exclude_unset=True)["libvirt"]["b"]["uri"] == "qemu+ssh://root@rig2/system"
    assert rig.drivers == {("a", 0, 0): "8139cp", ("b", 0, 0): "8139cp"}
    assert world.held == [] and said[0].startswith("starting 2 libvirt domains (qemu; ")
    assert world.said[-2:] == ["close qemu:///system", "close qemu+ssh://root@rig2/system"]


def test_a_labs_cards_are_held_passed_through_and_keep_their_own_macs(world, tmp_path):
    backend = LibvirtBackend(lab=parse_inventory(LAB, "lab.yaml"), accel="kvm", wait=True)
    topo = topology(nic="e1000")
    rig, _ = realize(backend, topo, tmp_path / "run-1" / "cells" / "cell")
    assert world.held == [("run-1/cell", True, False)]
    a = world.xml("qemu:///system", "a")
    assert a.find("devices/interface") is None
    assert a.find("devices/hostdev/source/address").get("bus") == "0x03"
    assert a.find("devices/hostdev/address").get("slot") == "0x03"
    assert a.findtext("memory") == "448"  # the lab image's floor
    assert a.findtext("os/kernel") == "/pool/lab-fedcba9876543210-k"
    assert rig.macs == {("a", 0, 0): "00:1b:21:00:00:00", ("b", 0, 0): "00:1b:21:00:00:01"}
    assert rig.drivers == {("a", 0, 0): "e1000", ("b", 0, 0): "e1000"}
    assert rig.facts.model_dump(exclude_unset=True)["hosts"] == {"a": "rig1", "b": "rig1"}
    assert rig.facts.model_dump(exclude_unset=True)["cards"]["a/link0"] == {
        "card": "a1",
        "pci": "0000:03:00.0",
        "host": "rig1",
        "model": "e1000",
        "name": rig.facts.model_dump(exclude_unset=True)["cards"]["a/link0"]["name"],
        "guest_pci": "0000:00:03.0",
    }
    assert world.said.index("cards held") < world.said.index(
        f"console {rig.facts.model_dump(exclude_unset=True)['libvirt']['a']['domain']}"
    )
    assert world.said[-2:] == ["close qemu:///system", "cards given back"]


def test_guests_hung_under_kvm_are_destroyed_and_started_again_as_qemu(world, tmp_path, monkeypatch):
    marked: list[str] = []
    monkeypatch.setattr(boot_mod, "mark_kvm_unusable", lambda image, why: marked.append(why))
    monkeypatch.setattr(
        libvirt, "host_accel", lambda conn, uri, image, progress: libvirt.AccelChoice("kvm", "probed", "now")
    )
    world.hung = ["kvm"]
    rig, said = realize(LibvirtBackend(), topology(), tmp_path / "cell")
    assert [ET.fromstring(x).get("type") for _, x in world.created] == ["kvm", "kvm", "qemu", "qemu"]
    first, again = ET.fromstring(world.created[0][1]), ET.fromstring(world.created[2][1])
    assert first.findtext("name") == again.findtext("name")
    assert len(marked) == 1 and "a: the agent did not answer" in marked[0]
    assert rig.facts.model_dump(exclude_unset=True)["accel"] == "tcg" and rig.facts.model_dump(exclude_unset=True)[
        "accel_fallback"
    ].startswith("KVM did not work here")
    assert said[1].startswith("warning: KVM did not work here")
    assert (tmp_path / "cell" / "a.xml").read_text() == world.created[2][1]


def test_a_domain_libvirt_will_not_start_or_run_is_an_error_naming_its_host(world, tmp_path):
    world.refuse_create = "no such pool"
    with pytest.raises(NiclabError) as refused:
        realize(LibvirtBackend(accel="kvm"), topology(), tmp_path / "cell")
    assert str(refused.value) == (
        "a: libvirt on qemu:///system would not start the domain (no such pool); "
        f"its XML is {tmp_path / 'cell' / 'a.xml'}"
    )
    world.refuse_create, world.refuse_resume = "", True
    with pytest.raises(NiclabError) as stuck:
        realize(LibvirtBackend(lab=parse_inventory(LAB, "lab.yaml"), accel="kvm"), topology("e1000"), tmp_path / "c")
    assert str(stuck.value) == (
        "a: libvirt on host rig1 (qemu:///system) started the domain but would not run it (cannot resume)"
    )
    assert world.said[-1] == "cards given back"
