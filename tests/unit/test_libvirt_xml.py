"""The libvirt backend's domain XML: what each node gets, and that libvirt's own schema accepts it."""

from __future__ import annotations

import shutil
import subprocess
from xml.etree import ElementTree as ET

import pytest

from niclab.model.lab.inventory import parse_inventory
from niclab.model.lab.match import place
from niclab.model.scenario import load_scenario
from niclab.plumbing.backends import BackendOptions, get_backend
from niclab.plumbing.backends.libvirt_cards import cards_facts
from niclab.plumbing.backends.libvirt_xml import DomainPlan, Hostdev, UdpInterface, domain_xml
from niclab.ui.cli.main import main
from tests.helpers import TWO_E1000_LAB


def plan(**changes) -> DomainPlan:
    values = dict(
        name="niclab-0123abcd-a",
        domain_type="qemu",
        memory_mib=256,
        vcpus=1,
        kernel="/var/lib/libvirt/images/niclab/k",
        initrd="/var/lib/libvirt/images/niclab/i",
        cmdline="console=ttyS0 niclab.node=a",
        ports=(
            UdpInterface("02:4e:4c:00:00:00", "e1000", 40000, 40001),
            UdpInterface("02:4e:4c:00:01:00", "virtio", 40002, 40003, event_idx_off=True),
            Hostdev("0000:03:00.0"),
        ),
        metadata={"harness-pid": "42"},
    )
    values.update(changes)
    return DomainPlan(**values)  # type: ignore[arg-type]


def validate(path) -> subprocess.CompletedProcess:
    if shutil.which("virt-xml-validate") is None or shutil.which("xmllint") is None:
        pytest.fail("virt-xml-validate and xmllint are missing: make test installs them (scripts/setup-host --test)")
    return subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True, text=True)


def test_ports_get_fixed_slots_cables_are_udp_on_loopback_and_cards_are_managed_vfio_hostdevs():
    root = ET.fromstring(domain_xml(plan()))
    assert root.get("type") == "qemu" and root.findtext("name") == "niclab-0123abcd-a"
    assert root.find("cpu").get("mode") == "maximum"
    nics = root.findall("devices/interface")
    assert [n.find("address").get("slot") for n in nics] == ["0x03", "0x04"]
    source = nics[0].find("source")
    assert (source.get("address"), source.get("port")) == ("127.0.0.1", "40001")
    assert (source.find("local").get("address"), source.find("local").get("port")) == ("127.0.0.1", "40000")
    assert nics[1].find("driver").get("event_idx") == "off" and nics[0].find("driver") is None
    hostdev = root.find("devices/hostdev")
    assert (hostdev.get("mode"), hostdev.get("type"), hostdev.get("managed")) == ("subsystem", "pci", "yes")
    assert hostdev.find("driver").get("name") == "vfio"
    assert hostdev.find("source/address").attrib == {
        "domain": "0x0000",
        "bus": "0x03",
        "slot": "0x00",
        "function": "0x0",
    }
    assert hostdev.find("address").get("slot") == "0x05"
    channel = root.find("devices/channel")
    assert channel.get("type") == "unix" and channel.find("target").get("name") == "org.qemu.guest_agent.0"
    assert ET.fromstring(domain_xml(plan(domain_type="kvm"))).find("cpu").get("mode") == "host-passthrough"


def test_libvirts_schema_accepts_the_xml(tmp_path):
    (tmp_path / "a.xml").write_text(domain_xml(plan()))
    result = validate(tmp_path / "a.xml")
    assert result.returncode == 0, result.stderr + result.stdout


def test_too_many_ports_for_a_pc_machine_is_an_error():
    with pytest.raises(ValueError, match="PCI slots for 29"):
        domain_xml(plan(ports=(Hostdev("0000:03:00.0"),) * 30))


def test_dry_run_on_a_fake_lab_maps_cells_to_cards_and_writes_valid_hostdev_xml(tmp_path, repo, capsys):
    (tmp_path / "lab.yaml").write_text(TWO_E1000_LAB)
    argv = ["run", str(repo / "scenarios" / "nic-shootout.yaml"), "--lab", str(tmp_path / "lab.yaml")]
    assert main([*argv, "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "nic=e1000:\n  cable 0: a/link0 intel-a (e1000 0000:03:00.0 on rig1) <-> b/link0 intel-b" in out
    assert "nic=rtl8139: cannot realize: lab fake-lab lacks cards: the cell needs 2 rtl8139 (it has 0)" in out
    written = sorted((tmp_path / "out").glob("dry-run-nic-shootout/*/*.xml"))
    assert [p.relative_to(tmp_path / "out").as_posix() for p in written] == [
        "dry-run-nic-shootout/nic=e1000/a.xml",
        "dry-run-nic-shootout/nic=e1000/b.xml",
    ]
    for path in written:
        assert ET.parse(path).find("devices/hostdev/source/address") is not None
        result = validate(path)
        assert result.returncode == 0, result.stderr + result.stdout


def test_the_libvirt_backend_without_a_lab_uses_the_emulated_stand_ins(repo, tmp_path):
    backend = get_backend("libvirt")
    topology = load_scenario(repo / "scenarios" / "two-node.yaml").cells[0].scenario.topology()
    assert backend.check(topology) is None
    lines = backend.describe(topology, tmp_path)
    assert lines == [
        f"a: domain on qemu:///system ({tmp_path / 'a.xml'})",
        f"b: domain on qemu:///system ({tmp_path / 'b.xml'})",
    ]
    a = ET.parse(tmp_path / "a.xml").getroot()
    assert a.find("devices/interface/model").get("type") == "e1000"
    assert validate(tmp_path / "a.xml").returncode == 0
    lab = parse_inventory(TWO_E1000_LAB, "lab.yaml")
    assert get_backend(options=BackendOptions(lab=lab)).check(topology) is None


def test_a_lab_runs_facts_name_each_ports_card_and_its_model(repo):
    topology = load_scenario(repo / "scenarios" / "two-node.yaml").cells[0].scenario.topology()
    lab = parse_inventory(TWO_E1000_LAB, "lab.yaml")
    facts = cards_facts(topology, place(topology, lab), {"a/link0": {"guest_driver": "e1000"}})
    assert facts["a/link0"] == {
        "card": "intel-a",
        "pci": "0000:03:00.0",
        "host": "rig1",
        "model": "e1000",
        "name": "Intel PRO/1000 MT",
        "guest_driver": "e1000",
    }
    assert facts["b/link0"]["card"] == "intel-b" and facts["b/link0"]["model"] == "e1000"


def test_the_libvirt_backend_makes_cables_not_switches(repo, tmp_path):
    switched = "name: t\nnodes: [a, b]\nlinks:\n  - {between: [a, b], nic: e1000, switch: true}\n"
    (tmp_path / "s.yaml").write_text(switched)
    topology = load_scenario(tmp_path / "s.yaml").cells[0].scenario.topology()
    assert get_backend("libvirt").check(topology) == (
        "link 0 joins a and b through a switch: the libvirt backend makes cables, not switches; run it with "
        "--backend qemu"
    )
