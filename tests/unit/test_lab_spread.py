"""Emulated nodes on a lab's hosts: the inventory's address and capacity, placement by capacity, cards to avoid."""

from __future__ import annotations

import pytest

from niclab.model.lab.inventory import InventoryError, parse_inventory
from niclab.model.lab.match import Unrealizable, place
from niclab.model.lab.spread import Claim, Held, Load, cards_claim, spread
from niclab.model.scenario import parse

TWO_HOSTS = """\
name: pair
hosts:
  rig1: {libvirt: qemu:///system, address: 192.0.2.1, capacity: {cpus: 4, memory_mib: 2048}}
  rig2: {libvirt: qemu+ssh://root@rig2/system, address: "2001:db8::2", capacity: {cpus: 4, memory_mib: 2048}}
cards:
  - {id: a1, host: rig1, pci: "0000:03:00.0", model: e1000}
  - {id: b1, host: rig1, pci: "0000:04:00.0", model: e1000}
  - {id: a2, host: rig2, pci: "0000:03:00.0", model: e1000}
  - {id: b2, host: rig2, pci: "0000:04:00.0", model: e1000}
cables:
  - [a1, b1]
  - [a2, b2]
"""


def topology(cpus: int = 1, memory: int = 512):
    node = f"{{cpus: {cpus}, memory: {memory}}}"
    text = (
        f"name: s\nnodes: {{a: {node}, b: {node}}}\n"
        "links:\n  - {between: [a, b], nic: e1000}\nbenchmarks:\n  - ping: {}\n"
    )
    return parse(text, "s.yaml").cells[0].scenario.topology()


@pytest.fixture
def lab():
    return parse_inventory(TWO_HOSTS, "lab.yaml")


def test_a_host_gives_its_tunnel_address_and_capacity(lab):
    assert lab.hosts["rig1"].address == "192.0.2.1"
    assert lab.hosts["rig2"].address == "2001:db8::2"
    assert (lab.hosts["rig2"].capacity.cpus, lab.hosts["rig2"].capacity.memory_mib) == (4, 2048)
    bare = parse_inventory("hosts:\n  rig1: {}\n", "lab.yaml")
    assert bare.hosts["rig1"].address is None and bare.hosts["rig1"].capacity is None


@pytest.mark.parametrize(
    "address,message",
    [
        ("rig2.lab", "'rig2.lab' is not an IP address"),
        ("192.0.2.300", "'192.0.2.300' is not an IP address"),
        ("0.0.0.0", "0.0.0.0 is not one host's address"),
        (" 192.0.2.1", "' 192.0.2.1' is not an IP address"),
    ],
)
def test_an_address_is_one_ip_address_not_a_name(address, message):
    with pytest.raises(InventoryError, match=r"^lab.yaml:2:\d+: hosts.rig1.address: " + message):
        parse_inventory(f"hosts:\n  rig1: {{address: {address!r}}}\n", "lab.yaml")


def test_a_capacity_needs_both_figures_and_at_least_one_cpu():
    with pytest.raises(InventoryError, match=r"hosts.rig1.capacity.memory_mib: is required"):
        parse_inventory("hosts:\n  rig1: {capacity: {cpus: 2}}\n", "lab.yaml")
    with pytest.raises(InventoryError, match=r"hosts.rig1.capacity.cpus: 0 is below the minimum 1"):
        parse_inventory("hosts:\n  rig1: {capacity: {cpus: 0, memory_mib: 512}}\n", "lab.yaml")


def test_a_cell_that_fits_on_one_host_goes_on_the_first_with_room(lab):
    cell = topology()
    assert spread(cell, lab).hosts == {"a": "rig1", "b": "rig1"}
    one_running = Held.of([spread(cell, lab).claim(cell)])
    assert one_running.load == {"rig1": Load(2, 1024)}
    assert spread(cell, lab, one_running).hosts == {"a": "rig1", "b": "rig1"}  # 4 vCPUs: two such cells
    two_running = Held.of([spread(cell, lab).claim(cell)] * 2)
    assert spread(cell, lab, two_running).hosts == {"a": "rig2", "b": "rig2"}
    full = Held.of([spread(cell, lab).claim(cell)] * 2 + [spread(cell, lab, two_running).claim(cell)] * 2)
    assert full.load == {"rig1": Load(4, 2048), "rig2": Load(4, 2048)}
    assert spread(cell, lab, full) is None  # the lab is full: it waits


def test_a_cell_too_big_for_one_host_spreads_over_hosts_and_crosses_on_a_tunnel(lab):
    cell = topology(cpus=3)
    found = spread(cell, lab)
    assert found.hosts == {"a": "rig1", "b": "rig2"}
    assert [wire.link for wire in found.crossing(cell)] == [0]
    assert found.lines(cell, lab) == [
        "a: emulated on rig1",
        "b: emulated on rig2",
        "link 0: UDP tunnel a/link0 (192.0.2.1) <-> b/link0 (2001:db8::2)",
    ]
    assert dict(found.claim(cell).hosts) == {"rig1": Load(3, 512), "rig2": Load(3, 512)}


def test_a_cell_that_needs_a_tunnel_between_hosts_without_an_address_is_refused_in_one_line(lab):
    bare = lab.model_copy(deep=True)
    bare.hosts["rig2"].address = None
    with pytest.raises(Unrealizable) as caught:
        spread(topology(cpus=3), bare)
    assert str(caught.value) == (
        "the cell spreads over hosts: link 0 joins a on rig1 and b on rig2, and rig2 has no address: give each host "
        "the IP address it uses for tunnels to other hosts (hosts: NAME: address:) in the inventory"
    )
    assert spread(topology(), bare).hosts == {"a": "rig1", "b": "rig1"}  # on one host, no address is needed


def test_a_cell_no_host_has_room_for_is_refused_and_one_that_must_wait_is_not(lab):
    with pytest.raises(Unrealizable, match=r"^lab pair has no room for the cell \(10 vCPUs, 1024 MiB; node a"):
        spread(topology(cpus=5), lab)
    busy = Held.of([Claim(hosts=(("rig1", Load(4, 0)), ("rig2", Load(4, 0))))])
    assert spread(topology(), lab, busy) is None


def test_a_host_without_capacity_takes_one_cell_at_a_time():
    lab = parse_inventory("hosts:\n  rig1: {}\n  rig2: {}\n", "lab.yaml")
    cell = topology(cpus=16, memory=65536)
    first = spread(cell, lab)
    assert first.hosts == {"a": "rig1", "b": "rig1"}
    second = spread(cell, lab, Held.of([first.claim(cell)]))
    assert second.hosts == {"a": "rig2", "b": "rig2"}
    assert spread(cell, lab, Held.of([first.claim(cell), second.claim(cell)])) is None


def test_real_cards_other_cells_hold_are_avoided(lab):
    cell = topology()
    first = place(cell, lab)
    assert cards_claim(first).cards == {"a1", "b1"}
    second = place(cell, lab, avoid=cards_claim(first).cards)
    assert {card.id for card in second.cards.values()} == {"a2", "b2"} and second.hosts == {"a": "rig2", "b": "rig2"}
    with pytest.raises(Unrealizable, match=r"^the cards it needs are held by running cells \(a1, a2, b1, b2\)$"):
        place(cell, lab, avoid=frozenset({"a1", "b1", "a2", "b2"}))


def test_a_cell_that_fits_on_one_host_waits_for_one_rather_than_spread_beside_running_cells(lab):
    """rig1 has 3 vCPUs free and rig2 3: the 2+2 cell could spread, but alone it runs on one host, so it waits."""
    cell = topology(cpus=2)
    busy = Held.of([Claim(hosts=(("rig1", Load(1, 0)), ("rig2", Load(1, 0))))])
    assert spread(cell, lab, busy) is None
    assert spread(cell, lab, Held.of([Claim(hosts=(("rig1", Load(1, 0)),))])).hosts == {"a": "rig2", "b": "rig2"}
