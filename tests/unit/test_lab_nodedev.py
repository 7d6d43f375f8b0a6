"""Cards on other lab hosts, checked through their libvirtd's node devices (niclab.plumbing.lab.nodedev).

libvirt's test driver takes a node file (`test:///ABSOLUTE/node.xml`, a `<node>` of `<device>`s) and
answers listAllDevices and XMLDesc from it as a host's libvirtd would, classes and IOMMU groups included;
it drops `<driver>`, so drivers are read from descriptions given as text (LibvirtPci.from_xml), written as
`virsh nodedev-dumpxml` prints them.
"""

from __future__ import annotations

import os
from pathlib import Path

import libvirt  # the lab extra (`make test` installs it): its test driver is the other host
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from niclab.base.errors import NiclabError
from niclab.model.lab.inventory import parse_inventory
from niclab.model.lab.match import Placement
from niclab.plumbing.lab import hostnet as hostnet_mod
from niclab.plumbing.lab import nodedev, passthrough
from niclab.plumbing.lab.doctor import CardRef, diagnose
from niclab.plumbing.lab.hostnet import UnknownNet
from niclab.plumbing.lab.nodedev import LibvirtPci, remote_readers
from niclab.plumbing.lab.passthrough import hold_cards
from niclab.plumbing.lab.statedir import StateDir
from niclab.plumbing.lab.vfio import Journal
from niclab.ui.cli import main as cli
from tests.helpers import CARD, check, quiet_net
from tests.unit import fakessh
from tests.unit.fakesysfs import FakeSysfs

NIC = "0000:03:00.0"
NIC2 = "0000:04:00.0"
NVME = "0000:01:00.0"
GPU = "0000:00:02.0"
SATA = "0000:00:17.0"
BRIDGE = "0000:00:1c.0"
RIG2 = "qemu+ssh://root@rig2/system"


def _name(pci: str) -> str:
    return "pci_" + pci.replace(":", "_").replace(".", "_")


def pci_device(
    pci: str,
    cls: int | None,
    vendor: int = 0x8086,
    product: int = 0x100E,
    group: int | None = None,
    members: tuple[str, ...] = (),
    driver: str | None = None,
    parent: str = "computer",
) -> str:
    """A PCI device's description as libvirt writes it (decimal address fields, hex ids and class)."""
    domain, bus, slot_function = pci.split(":")
    slot, function = slot_function.split(".")
    klass = f"<class>0x{cls:06x}</class>" if cls is not None else ""
    iommu = ""
    if group is not None:
        addresses = "".join(
            f"<address domain='0x{m[:4]}' bus='0x{m[5:7]}' slot='0x{m[8:10]}' function='0x{m[11]}'/>"
            for m in (pci, *members)
        )
        iommu = f"<iommuGroup number='{group}'>{addresses}</iommuGroup>"
    return (
        f"<device><name>{_name(pci)}</name><parent>{parent}</parent>"
        + (f"<driver><name>{driver}</name></driver>" if driver else "")
        + f"<capability type='pci'>{klass}<domain>{int(domain, 16)}</domain><bus>{int(bus, 16)}</bus>"
        f"<slot>{int(slot, 16)}</slot><function>{int(function, 16)}</function>"
        f"<product id='0x{product:04x}'>a product</product><vendor id='0x{vendor:04x}'>a vendor</vendor>"
        + ("<capability type='pci-bridge'/>" if cls is not None and cls >> 8 == 0x0604 else "")
        + f"{iommu}</capability></device>"
    )


def net_device(ifname: str, pci: str, mac: str = "52:54:00:00:00:01") -> str:
    return (
        f"<device><name>net_{ifname}_{mac.replace(':', '_')}</name><parent>{_name(pci)}</parent>"
        f"<capability type='net'><interface>{ifname}</interface><address>{mac}</address></capability></device>"
    )


def nvme_disk(block: str, pci: str) -> str:
    """An NVMe namespace: libvirt lists no nvme0 controller device, so its parent is the PCI device."""
    return (
        f"<device><name>storage_model_{block}</name><parent>{_name(pci)}</parent><capability type='storage'>"
        f"<block>/dev/{block}</block><drive_type>disk</drive_type><model>SSD 970</model><size>500107862016</size>"
        "</capability></device>"
    )


def sata_disk(block: str, pci: str, host: int = 0, storage: bool = True) -> list[str]:
    """A SATA disk: scsi_host under the controller, then scsi_target, scsi (type disk) and its storage device."""
    target, lun = f"scsi_target{host}_0_0", f"scsi_{host}_0_0_0"
    chain = [
        f"<device><name>scsi_host{host}</name><parent>{_name(pci)}</parent>"
        f"<capability type='scsi_host'><host>{host}</host><unique_id>1</unique_id></capability></device>",
        f"<device><name>{target}</name><parent>scsi_host{host}</parent>"
        f"<capability type='scsi_target'><target>target{host}:0:0</target></capability></device>",
        f"<device><name>{lun}</name><parent>{target}</parent><capability type='scsi'><host>{host}</host>"
        "<bus>0</bus><target>0</target><lun>0</lun><type>disk</type></capability></device>",
    ]
    if storage:
        chain.append(
            f"<device><name>storage_{block}</name><parent>{lun}</parent><capability type='storage'>"
            f"<block>/dev/{block}</block><bus>ata</bus><drive_type>disk</drive_type><size>1000204886016</size>"
            "</capability></device>"
        )
    return chain


def rig(*, display_beside_nic: bool = False, disk_beside_nic: bool = False) -> list[str]:
    """A host: a NIC alone in group 7 (or with a display or a disk's controller), a second NIC behind a
    bridge, an NVMe controller with its disk, a SATA controller with sda, and the bridge."""
    beside = (GPU,) if display_beside_nic else (SATA,) if disk_beside_nic else ()
    return [
        pci_device(BRIDGE, 0x060400, product=0x8C10, group=8),
        pci_device(NIC, 0x020000, group=7, members=beside),
        net_device("enp3s0", NIC),
        pci_device(NIC2, 0x020000, product=0x10D3, group=10, parent=_name(BRIDGE)),
        net_device("enp4s0", NIC2, "52:54:00:00:00:02"),
        pci_device(NVME, 0x010802, vendor=0x144D, product=0xA808, group=9),
        nvme_disk("nvme0n1", NVME),
        pci_device(GPU, 0x030000, product=0x3E92, group=7 if display_beside_nic else 1),
        pci_device(SATA, 0x010601, product=0xA102, group=7 if disk_beside_nic else 2),
        *sata_disk("sda", SATA),
    ]


def node_uri(tmp_path: Path, devices: list[str], name: str = "node.xml") -> str:
    """libvirt's test driver, answering for a host with these node devices."""
    path = tmp_path / name
    path.write_text("<node>\n" + "\n".join(devices) + "\n</node>\n")
    return f"test://{path.resolve()}"


def connect_to(uri: str, opened: list[str] | None = None):
    """A `connect` for hold_cards and remote_readers that opens the test driver's `uri` whatever URI it gets."""

    def connect(asked: str):
        if opened is not None:
            opened.append(asked)
        return libvirt.open(uri)

    return connect


def test_libvirt_pci_answers_from_a_hosts_node_devices(tmp_path):
    with libvirt.open(node_uri(tmp_path, rig(display_beside_nic=True))) as conn:
        pci = LibvirtPci(conn)
    assert pci.exists(NIC) and pci.exists(BRIDGE) and not pci.exists("0000:09:00.0")
    assert (pci.pci_class(NIC), pci.pci_id(NIC)) == (0x020000, "8086:100e")
    assert (pci.pci_class(NVME), pci.pci_id(NVME)) == (0x010802, "144d:a808")
    assert pci.is_bridge(BRIDGE) and not pci.is_bridge(NIC)
    assert (pci.iommu_group(NIC), pci.iommu_group(NVME)) == (7, 9)
    assert pci.group_devices(7) == [GPU, NIC]
    assert pci.group_devices(9) == [NVME]
    assert pci.netdevs(NIC) == ["enp3s0"] and pci.netdevs(NIC2) == ["enp4s0"] and pci.netdevs(BRIDGE) == []
    assert pci.blockdevs(NVME) == ["nvme0n1"] and pci.blockdevs(SATA) == ["sda"]
    assert pci.blockdevs(NIC) == [] and pci.blockdevs("0000:09:00.0") == []
    assert pci.netdev_device("enp4s0") == NIC2 and pci.netdev_device("eth9") is None
    assert pci.driver(NIC) is None and pci.driver_override(NIC) is None  # the test driver keeps no <driver>
    assert pci.pci_class("0000:09:00.0") == 0 and pci.iommu_group("0000:09:00.0") is None


def test_libvirt_pci_reads_drivers_and_scsi_disks_without_a_storage_device():
    pci = LibvirtPci.from_xml(
        [
            pci_device(NIC, 0x020000, group=7, driver="e1000e"),
            pci_device(SATA, 0x010601, group=2, driver="ahci"),
            *sata_disk("sda", SATA, storage=False),  # udev gave no storage device: the scsi disk still counts
        ]
    )
    assert (pci.driver(NIC), pci.driver(SATA)) == ("e1000e", "ahci")
    assert pci.blockdevs(SATA) == ["scsi_0_0_0_0"]


ODD = [
    "not xml at all <",
    "<!DOCTYPE device [<!ENTITY a 'aaaa'>]><device><name>pci_0000_05_00_0</name></device>",
    "<domain><name>pci_0000_06_00_0</name></domain>",  # not a device
    "<device><name>two words</name><capability type='pci'><class>0x020000</class></capability></device>",
    # an address out of range, and numbers that are not numbers
    pci_device("0000:07:00.0", 0x020000).replace("<slot>0</slot>", "<slot>99</slot>"),
    pci_device("0000:08:00.0", 0x020000, group=4)
    .replace("<class>0x020000</class>", "<class>network</class>")
    .replace("number='4'", "number='-1'")
    .replace("id='0x8086'", "id='0x1234567'"),
    # an interface name with a newline, a driver with a slash, a parent loop
    "<device><name>net_x</name><parent>net_y</parent><capability type='net'><interface>eth0\nFAIL x"
    "</interface></capability></device>",
    "<device><name>net_y</name><parent>net_x</parent><capability type='net'><interface>eth1</interface>"
    "</capability></device>",
    pci_device("0000:0a:00.0", 0x020000, group=11, driver="../../x"),
    "<device><name>storage_z</name><parent>pci_0000_0a_00_0</parent><capability type='storage'>"
    "<block>/dev/a b</block></capability></device>",
    "<device/>",
]


def test_odd_node_device_descriptions_read_as_unknown_never_a_crash():
    pci = LibvirtPci.from_xml(ODD)
    assert not pci.exists("0000:05:00.0") and not pci.exists("0000:06:00.0") and not pci.exists("0000:07:00.0")
    assert pci.exists("0000:08:00.0")
    assert pci.pci_class("0000:08:00.0") == 0  # unknown: not a network controller
    assert pci.iommu_group("0000:08:00.0") is None
    assert pci.pci_id("0000:08:00.0") == "0000:100e"
    assert pci.netdev_device("eth1") is None  # its parents loop: no PCI device above it
    assert pci.driver("0000:0a:00.0") is None
    assert pci.blockdevs("0000:0a:00.0") == ["storage_z"]  # a disk whose block name is odd: named by its device
    [report] = diagnose(pci, UnknownNet("rig2"), [CardRef("wan0", "0000:08:00.0", host="rig2")])
    assert check(report, "class").status == "fail" and not report.usable(force=True)
    assert "unclassified device (class 0x000000), not a network controller" in check(report, "class").detail


PROBED = [NIC, NIC2, NVME, GPU, SATA, BRIDGE, "0000:09:00.0"]


@settings(max_examples=400, derandomize=True, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(rig()) - 1), st.integers(0, 2000), st.integers(0, 40), st.text(max_size=20)),
        min_size=1,
        max_size=4,
    )
)
def test_damaged_descriptions_never_crash_the_reader_or_the_doctor(edits):
    """Each edit replaces a slice of one device's description with other text: whatever is left is read."""
    texts = rig(display_beside_nic=True)
    for index, start, length, text in edits:
        texts[index] = texts[index][:start] + text + texts[index][start + length :]
    pci = LibvirtPci.from_xml(texts)
    for address in PROBED:
        pci.exists(address), pci.driver(address), pci.pci_id(address), pci.pci_class(address)
        pci.is_bridge(address), pci.netdevs(address), pci.blockdevs(address)
        group = pci.iommu_group(address)
        assert group is None or isinstance(pci.group_devices(group), list)
    assert pci.netdev_device("enp3s0") in (NIC, None)
    cards = [CardRef(f"c{i}", address, host="rig2") for i, address in enumerate(PROBED)]
    for report in diagnose(pci, UnknownNet("rig2"), cards):
        assert report.checks and all("\n" not in c.detail for c in report.checks)


def test_a_nic_alone_in_its_group_passes_but_host_use_and_default_route_are_not_checked(tmp_path):
    pci, net = remote_readers("rig2", RIG2, connect_to(node_uri(tmp_path, rig())))
    [report] = diagnose(pci, net, [CardRef("wan0", NIC, "e1000", "8086:100e", host="rig2")])
    assert [(c.name, c.status) for c in report.checks] == [
        ("device", "ok"),
        ("class", "ok"),
        ("pci id", "ok"),
        ("iommu group", "ok"),
        ("default route", "warn"),
        ("driver", "ok"),
        ("host use", "warn"),
    ]
    use = check(report, "host use")
    assert use.detail == "not checked on rig2 (no access to its routes yet)"
    assert use.fix == "run niclab lab doctor --host rig2 on rig2 itself"
    assert check(report, "default route").detail == "not checked on rig2 (no access to its routes yet)"
    assert report.ok and report.refusal(force=False) is None


@pytest.mark.parametrize(
    ("layout", "card", "reason"),
    [
        (
            {},
            NVME,
            "0000:01:00.0 is a mass storage controller: NVMe (class 0x010802), not a network controller, "
            "with the host's disk nvme0n1",
        ),
        ({"display_beside_nic": True}, NIC, "group 7 also holds 0000:00:02.0 (display controller: VGA)"),
        (
            {"disk_beside_nic": True},
            NIC,
            "group 7 also holds 0000:00:17.0 (mass storage controller: SATA (AHCI), disk sda)",
        ),
        ({}, BRIDGE, "0000:00:1c.0 is a bridge: PCI bridge (class 0x060400), not a network controller"),
    ],
    ids=["nvme", "display", "disk", "bridge"],
)
def test_diagnose_through_libvirt_refuses_what_the_host_needs_even_forced(tmp_path, layout, card, reason):
    pci, net = remote_readers("rig2", RIG2, connect_to(node_uri(tmp_path, rig(**layout))))
    [report] = diagnose(pci, net, [CardRef("wan0", card, host="rig2")])
    assert not report.usable(force=True)
    refusal = report.refusal(force=True)
    assert refusal is not None and refusal.startswith(f"card wan0 ({card}) on rig2: {reason}")


def test_a_host_that_does_not_answer_is_one_error_naming_it(tmp_path):
    from niclab.plumbing.libvirt_conn import open_uri

    missing = f"qemu+unix:///system?socket={tmp_path}/no-libvirtd.sock"
    with pytest.raises(NiclabError) as raised:
        remote_readers("rig2", RIG2, lambda uri: open_uri(missing))
    message = str(raised.value)
    assert message.startswith(f"lab host rig2: cannot reach libvirt at {missing}: ") and "\n" not in message


def test_a_host_whose_node_devices_cannot_be_listed_is_one_error_naming_it():
    def closed(uri: str):
        conn = libvirt.open("test:///default")
        conn.close()  # a connection that broke after it opened
        return conn

    with pytest.raises(NiclabError) as raised:
        remote_readers("rig2", RIG2, closed)
    assert str(raised.value).startswith(f"lab host rig2 ({RIG2}): cannot list its node devices: ")


def two_host_lab(remote_pci: str, uri: str = RIG2, remote_model: str = "e1000") -> str:
    return (
        f'name: two\nhosts: {{rig1: {{libvirt: "qemu:///system"}}, rig2: {{libvirt: "{uri}"}}}}\n'
        'models: {fastnic: {driver: nvme, pci_id: "144d:a808"}}\n'
        f'cards:\n  - {{id: wan0, host: rig1, pci: "{CARD}", model: e1000}}\n'
        f'  - {{id: far0, host: rig2, pci: "{remote_pci}", model: {remote_model}}}\n'
    )


@pytest.fixture
def local_host(tmp_path):
    """This machine: a healthy host with one e1000 alone in group 7 (tests/unit/test_lab_host.py's `fake`)."""
    fake = FakeSysfs(tmp_path / "root")
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)
    fake.add_driver("vfio-pci")
    fake.add_module("vfio_pci")
    fake.add_device(CARD, group=7, netdevs=["enp3s0"])
    return fake


def remote_rig(tmp_path: Path, monkeypatch) -> FakeSysfs:
    """rig2 over the fake ssh: an e1000 alone in group 7 and an NVMe controller with its disk in group 9, no
    address or route on either."""
    fakessh.use(monkeypatch, tmp_path)
    root = fakessh.host_root(tmp_path, "rig2")
    fakessh.quiet_ip(root)
    fake = FakeSysfs(root)
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)
    fake.add_driver("vfio-pci")
    fake.add_device(NIC, group=7, netdevs=["enp3s0"])
    fake.add_device(NVME, vendor=0x144D, device=0xA808, cls=0x010802, driver="nvme", group=9)
    fake.add_disk("nvme0n1", NVME, under="nvme/nvme0")
    return fake


@pytest.mark.parametrize("force", [False, True])
def test_hold_cards_refuses_a_remote_nvme_card_before_anything_is_bound(tmp_path, monkeypatch, local_host, force):
    sim = local_host.sim()
    lab = parse_inventory(two_host_lab(NVME, remote_model="fastnic"), "lab.yaml")
    placement = Placement(
        cards={("a", 0, 0): lab.card("wan0"), ("b", 0, 0): lab.card("far0")},
        cables={},
        hosts={"a": "rig1", "b": "rig2"},
    )
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(passthrough, "HostNet", quiet_net)
    remote_rig(tmp_path, monkeypatch)
    with pytest.raises(NiclabError, match="cannot be passed through") as refused:
        with hold_cards(lab, placement, "run-1", lambda line: None, force=force, sysfs=sim, state=tmp_path / "st"):
            pytest.fail("the block ran: the domains would have started")
    assert (
        "card far0 (0000:01:00.0) on rig2: 0000:01:00.0 is a mass storage controller: NVMe (class 0x010802), "
        "not a network controller, with the host's disk nvme0n1" in str(refused.value)
    )
    assert sim.writes == [] and sim.driver(CARD) == "e1000"  # the local card was not bound either
    with StateDir(tmp_path / "st") as state:
        assert not Journal(state).entries()
    assert not list((tmp_path / "hosts" / "rig2" / "var/lib/niclab/leases").glob("*.json"))  # given back


def test_hold_cards_leases_a_remote_nic_on_its_host_and_checks_its_routes_there(tmp_path, monkeypatch, local_host):
    sim = local_host.sim()
    lab = parse_inventory(two_host_lab(NIC), "lab.yaml")
    placement = Placement(cards={("b", 0, 0): lab.card("far0")}, cables={}, hosts={"b": "rig2"})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    remote_rig(tmp_path, monkeypatch)
    leases = tmp_path / "hosts" / "rig2" / "var/lib/niclab/leases"
    said: list[str] = []
    with hold_cards(lab, placement, "run-1", said.append, sysfs=sim, state=tmp_path / "st"):
        assert '"run":"run-1"' in (leases / f"rig2.{NIC}.json").read_text()  # held there, not here
        with StateDir(tmp_path / "st") as state:
            assert not state.sub("leases").names()
    assert sim.writes == []  # a remote card is its libvirtd's to bind (managed hostdev)
    assert f"leasing and checking the cards on rig2 over ssh ({RIG2})" in said
    assert not [line for line in said if "not checked" in line]  # host use and routes were read on rig2
    assert not (leases / f"rig2.{NIC}.json").exists()


@pytest.fixture
def doctor(local_host, tmp_path, monkeypatch):
    """`niclab lab doctor` on the fake local host, with rig2's libvirt URI answered by the test driver."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "virsh").write_text("#!/bin/sh\necho 9.0.0\n")
    (bin_dir / "virsh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(hostnet_mod, "HostNet", quiet_net)
    opened: list[str] = []
    monkeypatch.setattr(nodedev, "open_uri", connect_to(node_uri(tmp_path, rig()), opened))
    fakessh.use(monkeypatch, tmp_path)
    monkeypatch.setenv("FAKE_SSH_DEAD", "rig2,127.0.0.1,localhost")  # libvirt answers, ssh does not

    def run(inventory: str, *extra: str) -> tuple[int, list[str]]:
        lab = tmp_path / "lab.yaml"
        lab.write_text(inventory)
        status = cli.main(["lab", "doctor", "--lab", str(lab), "--sysfs-root", str(local_host.root), *extra])
        return status, opened

    return run


@pytest.mark.parametrize("uri", [RIG2, "qemu+ssh://root@127.0.0.1/system", "qemu+tls://localhost/system"])
def test_lab_doctor_checks_the_cards_of_every_host_naming_it(doctor, capsys, uri):
    status, opened = doctor(two_host_lab(NVME, uri, "fastnic"))
    out = capsys.readouterr().out
    assert status == 1 and opened == [uri]
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "card wan0 (0000:03:00.0, e1000) on rig1" in lines
    assert "card far0 (0000:01:00.0, fastnic) on rig2" in lines
    assert (
        "FAIL class 0000:01:00.0 is a mass storage controller: NVMe (class 0x010802), not a network controller, "
        "with the host's disk nvme0n1" in lines
    )
    assert "not checked here" not in out
    assert out.count("a run would refuse") == 1 and "a run would refuse card far0 (0000:01:00.0) on rig2: " in out


def test_lab_doctor_warns_that_a_remote_nics_host_use_was_not_checked(doctor, capsys):
    """rig2's ssh does not answer but its libvirt does: the cards are read through libvirt, the host fails."""
    status, _ = doctor(two_host_lab(NIC))
    out = capsys.readouterr().out
    assert status == 1 and "a run would refuse" not in out, out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert f"host rig2 ({RIG2})" in lines
    assert (
        f"FAIL ssh lab host rig2 ({RIG2}) does not answer over ssh: ssh: connect to host rig2 port 22: "
        "Connection refused; check that `ssh -l root rig2 true` works from this machine (keys, ~/.ssh/config), "
        "as virsh needs" in lines
    )
    assert "WARN libvirt answers: its cards are read through its node devices, without routes" in lines
    block = lines[lines.index("card far0 (0000:03:00.0, e1000) on rig2") :]
    assert "WARN host use not checked on rig2 (no access to its routes yet)" in block
    assert "WARN default route not checked on rig2 (no access to its routes yet)" in block
    assert "fix: run niclab lab doctor --host rig2 on rig2 itself" in block


def test_lab_doctor_names_a_host_that_does_not_answer_and_exits_1(doctor, capsys, monkeypatch, tmp_path):
    from niclab.plumbing.libvirt_conn import open_uri

    missing = f"qemu+unix:///system?socket={tmp_path}/no-libvirtd.sock"
    monkeypatch.setattr(nodedev, "open_uri", lambda uri: open_uri(missing))
    status, _ = doctor(two_host_lab(NIC))
    out = capsys.readouterr().out
    assert status == 1
    [line] = [line for line in out.splitlines() if "rig2" in line]
    assert line.startswith(f"lab host rig2 ({RIG2}) does not answer over ssh: ssh: connect to host rig2 port 22: ")
    assert line.endswith(": its cards were not checked")
    assert "card wan0 (0000:03:00.0, e1000) on rig1" in out  # the hosts that answer are still checked


def test_lab_doctor_host_names_this_machine_and_leaves_other_local_uris(doctor, capsys):
    status, opened = doctor(two_host_lab(CARD, "qemu+ssh://root@rig2/system"), "--host", "rig2")
    out = capsys.readouterr().out
    assert status == 0 and opened == []  # rig2 is this machine: read through its sysfs, no libvirt
    assert "card far0 (0000:03:00.0, e1000) on rig2" in out and "WARN" not in out.split("card far0")[1]
    assert "not checked here (on rig1, whose libvirt URI is local; run the doctor there): wan0" in out
