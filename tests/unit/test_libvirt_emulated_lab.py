"""Emulated nodes on a lab's hosts (`--lab --emulated`): placement, UDP tunnels between hosts, claims."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest

from niclab.base.errors import UsageError
from niclab.model.lab.inventory import parse_inventory
from niclab.model.lab.match import Unrealizable
from niclab.model.lab.spread import Held, Load
from niclab.model.scenario import parse
from niclab.plumbing.backends import BackendOptions, get_backend
from niclab.plumbing.backends.libvirt_tunnels import BLOCK, FIRST_PORT, TunnelPorts
from niclab.ui.cli.main import main

LAB = """\
name: pair
hosts:
  rig1: {libvirt: qemu:///system, address: 192.0.2.1, capacity: {cpus: 2, memory_mib: 1024}}
  rig2: {libvirt: qemu+ssh://root@rig2/system, address: 192.0.2.2, capacity: {cpus: 2, memory_mib: 1024}}
cards:
  - {id: a1, host: rig1, pci: "0000:03:00.0", model: e1000}
  - {id: b1, host: rig1, pci: "0000:04:00.0", model: e1000}
  - {id: a2, host: rig2, pci: "0000:03:00.0", model: e1000}
  - {id: b2, host: rig2, pci: "0000:04:00.0", model: e1000}
cables:
  - [a1, b1]
  - [a2, b2]
"""

SCENARIO = """\
name: spread
nodes: {a: {cpus: CPUS}, b: {cpus: CPUS}}
links:
  - {between: [a, b], nic: rtl8139}
benchmarks:
  - ping: {}
"""


def topology(cpus: int = 1):
    return parse(SCENARIO.replace("CPUS", str(cpus)), "s.yaml").cells[0].scenario.topology()


def backend(text: str = LAB, emulated: bool = True):
    return get_backend(options=BackendOptions(lab=parse_inventory(text, "lab.yaml"), emulated=emulated))


def udp(path):
    nic = ET.parse(path).getroot().find("devices/interface")
    source = nic.find("source")
    return (
        nic.get("type"),
        (source.get("address"), int(source.get("port"))),
        (source.find("local").get("address"), int(source.find("local").get("port"))),
    )


def test_emulated_nodes_of_a_cell_too_big_for_one_host_cross_on_a_tunnel_between_the_hosts_addresses(tmp_path):
    on_lab = backend()
    cell = topology(cpus=2)
    assert on_lab.check(cell) is None  # no rtl8139 card in the lab: emulated, it needs none
    lines = on_lab.describe(cell, tmp_path)
    assert lines == [
        "a: emulated on rig1",
        "b: emulated on rig2",
        "link 0: UDP tunnel a/link0 (192.0.2.1) <-> b/link0 (192.0.2.2)",
        f"a: domain on qemu:///system ({tmp_path / 'a.xml'})",
        f"b: domain on qemu+ssh://root@rig2/system ({tmp_path / 'b.xml'})",
    ]
    kind, a_sends_to, a_binds = udp(tmp_path / "a.xml")
    _, b_sends_to, b_binds = udp(tmp_path / "b.xml")
    assert kind == "udp" and a_binds[0] == "192.0.2.1" and b_binds[0] == "192.0.2.2"
    assert a_sends_to == b_binds and b_sends_to == a_binds
    assert ET.parse(tmp_path / "a.xml").find("devices/interface/model").get("type") == "rtl8139"


def test_a_cell_that_fits_on_one_host_stays_on_127_0_0_1(tmp_path):
    on_lab = backend()
    lines = on_lab.describe(topology(), tmp_path)
    assert lines[:2] == ["a: emulated on rig1", "b: emulated on rig1"]
    _, a_sends_to, a_binds = udp(tmp_path / "a.xml")
    assert a_sends_to[0] == a_binds[0] == "127.0.0.1"


def test_a_tunnel_between_hosts_without_an_address_is_refused_in_one_line():
    refused = backend(LAB.replace(", address: 192.0.2.2", "")).check(topology(cpus=2))
    assert refused == (
        "the cell spreads over hosts: link 0 joins a on rig1 and b on rig2, and rig2 has no address: give each host "
        "the IP address it uses for tunnels to other hosts (hosts: NAME: address:) in the inventory"
    )


def test_dry_run_with_emulated_shows_the_placement(tmp_path, capsys):
    (tmp_path / "lab.yaml").write_text(LAB)
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("CPUS", "2"))
    argv = ["run", str(tmp_path / "s.yaml"), "--lab", str(tmp_path / "lab.yaml"), "--emulated", "--dry-run"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "  link 0: UDP tunnel a/link0 (192.0.2.1) <-> b/link0 (192.0.2.2)\n" in out
    assert sorted(p.name for p in (tmp_path / "out").glob("dry-run-spread/*/*.xml")) == ["a.xml", "b.xml"]


def test_emulated_needs_a_lab():
    with pytest.raises(UsageError, match="--emulated runs emulated NICs on a lab's hosts: give --lab"):
        get_backend("libvirt", BackendOptions(emulated=True))


def test_claims_place_cells_beside_the_running_ones_and_pin_a_copy_of_the_backend(tmp_path):
    on_lab = backend()
    cell = topology()
    first, pinned = on_lab.claim(cell, Held())
    assert dict(first.hosts) == {"rig1": Load(2, 512)} and pinned is not on_lab
    second, pinned2 = on_lab.claim(cell, Held.of([first]))
    assert [host for host, _ in second.hosts] == ["rig2"]
    assert on_lab.claim(cell, Held.of([first, second])) is None  # both hosts full: it waits
    assert pinned2.describe(cell, tmp_path)[:2] == ["a: emulated on rig2", "b: emulated on rig2"]
    with pytest.raises(Unrealizable):
        on_lab.claim(topology(cpus=3), Held())  # never fits


def test_claims_of_real_cards_leave_out_the_cards_running_cells_hold():
    cards = backend(emulated=False)
    cell = parse(SCENARIO.replace("CPUS", "1").replace("rtl8139", "e1000"), "s.yaml").cells[0].scenario.topology()
    first, _ = cards.claim(cell, Held())
    second, pinned = cards.claim(cell, Held.of([first]))
    assert first.cards == {"a1", "b1"} and second.cards == {"a2", "b2"}
    assert pinned.placement(cell).hosts == {"a": "rig2", "b": "rig2"}
    assert cards.claim(cell, Held.of([first, second])) is None


def test_the_runs_tunnel_ports_come_from_its_block_and_two_cells_never_share_one():
    ports = TunnelPorts("run-1")
    assert ports.ports.start >= FIRST_PORT and len(ports.ports) == BLOCK
    first = ports.take(4)
    second = ports.take(4)
    assert not set(first) & set(second) and set(first) | set(second) <= set(ports.ports)
    ports.give_back(first)
    assert set(ports.take(8)) >= set(first)
