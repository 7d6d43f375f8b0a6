"""The lab's host side against fake sysfs trees: doctor, vfio binding with its journal, card leases."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from niclab.base.errors import NiclabError
from niclab.base.procs import process_start_time
from niclab.model.lab.inventory import parse_inventory
from niclab.model.lab.match import Placement
from niclab.model.lab.pciclass import AllowedClass
from niclab.plumbing.lab import hostnet as hostnet_mod
from niclab.plumbing.lab import lease as lease_mod
from niclab.plumbing.lab import passthrough
from niclab.plumbing.lab.doctor import CardRef, diagnose, diagnose_host, render
from niclab.plumbing.lab.hostnet import HostNet
from niclab.plumbing.lab.lease import Holder, current_user, holder, lease, leases, locked
from niclab.plumbing.lab.passthrough import card_refs, hold_cards
from niclab.plumbing.lab.statedir import StateDir
from niclab.plumbing.lab.vfio import Journal, bind_to_vfio, passed_through, restore, restore_all
from niclab.ui.cli import main as cli
from tests.helpers import CARD, check, ip_runner, link, quiet_net
from tests.unit.fakesysfs import FakeSysfs

OTHER = "0000:03:00.1"
BRIDGE = "0000:00:1c.0"
NVME = "0000:01:00.0"
GPU = "0000:00:02.0"
SATA = "0000:00:17.0"
ONBOARD = "0000:00:1f.6"
E1000 = CardRef("wan0", CARD, "e1000", "8086:100e")
NO_SLEEP: dict[str, Any] = {"sleep": lambda seconds: None}


@pytest.fixture
def fake(tmp_path):
    """A healthy Intel host: IOMMU with interrupt remapping, vfio-pci loaded, one e1000 card alone in group 7."""
    fake = FakeSysfs(tmp_path / "root")
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)  # a real Skylake value: bit 3 (IR) set
    fake.add_driver("vfio-pci")
    fake.add_module("vfio_pci")
    fake.add_device(CARD, group=7, netdevs=["enp3s0"])
    return fake


@pytest.fixture
def journal(tmp_path):
    with StateDir(tmp_path / "state") as state:
        yield Journal(state)


@pytest.fixture
def state(tmp_path):
    """The test's temp dir as a lease state directory."""
    with StateDir(tmp_path) as state:
        yield state


def host_report(fake, memlock=1 << 40, libvirt="9.0.0"):
    return diagnose_host(fake.sysfs(), memlock=lambda: memlock, libvirt=lambda: libvirt)


# -- doctor: the host --------------------------------------------------------------------------------


def test_a_healthy_host_passes(fake):
    report = host_report(fake)
    assert report.ok, report.checks
    assert [c.name for c in report.checks] == ["iommu", "interrupt remapping", "vfio-pci", "memlock", "libvirt"]


@pytest.mark.parametrize("vendor,param", [("GenuineIntel", "intel_iommu=on"), ("AuthenticAMD", "amd_iommu=on")])
def test_iommu_off_names_the_kernel_parameter_for_the_cpu(tmp_path, vendor, param):
    fake = FakeSysfs(tmp_path / "root")
    fake.set_cpu(vendor)
    fake.add_device(CARD)  # no group: the IOMMU is off
    report = host_report(fake)
    iommu = check(report, "iommu")
    assert not report.ok and iommu.status == "fail" and param in iommu.fix and "GRUB_CMDLINE_LINUX" in iommu.fix
    assert check(diagnose(fake.sysfs(), quiet_net(), [E1000])[0], "iommu group").status == "fail"
    assert f"fix: add {param}" in render(report, [])


def test_iommu_asked_for_but_off_points_at_the_firmware(tmp_path):
    fake = FakeSysfs(tmp_path / "root")
    fake.set_cmdline("root=/dev/sda1 intel_iommu=on iommu=pt")
    assert "firmware" in check(host_report(fake), "iommu").fix


@pytest.mark.parametrize(
    "units,expected",
    [
        ([("dmar0", 0xF020DF)], True),
        ([("dmar0", 0xF020DF), ("dmar1", 0xF020D7)], False),  # the kernel needs IR on every unit
        ([("dmar0", 0x1000)], False),
        ([("ivhd0", None)], True),
        ([], None),
    ],
)
def test_interrupt_remapping_from_ecap(tmp_path, units, expected):
    fake = FakeSysfs(tmp_path / "root")
    for name, ecap in units:
        fake.add_iommu(name, intel_ecap=ecap)
    assert fake.sysfs().interrupt_remapping() is expected


def test_no_interrupt_remapping_fails_unless_unsafe_interrupts_are_allowed(tmp_path):
    fake = FakeSysfs(tmp_path / "root")
    fake.add_iommu("dmar0", intel_ecap=0x1000)
    remap = check(host_report(fake), "interrupt remapping")
    assert remap.status == "fail" and "allow_unsafe_interrupts" in remap.fix and "unsafe" in remap.fix
    fake.add_module("vfio_iommu_type1", allow_unsafe_interrupts="Y")
    remap = check(host_report(fake), "interrupt remapping")
    assert remap.status == "warn" and "unsafe" in remap.detail


def test_vfio_pci_loaded_loadable_or_missing(tmp_path):
    fake = FakeSysfs(tmp_path / "root")
    vfio = check(host_report(fake), "vfio-pci")
    assert vfio.status == "fail" and "6.1.0-fake" in vfio.detail and "modprobe vfio-pci" in vfio.fix
    fake.add_module_file()
    vfio = check(host_report(fake), "vfio-pci")
    assert (vfio.status, vfio.fix) == ("warn", "modprobe vfio-pci")
    fake.add_driver("vfio-pci")
    assert check(host_report(fake), "vfio-pci").status == "ok"


def test_low_memlock_warns_and_missing_libvirt_fails(fake):
    report = host_report(fake, memlock=8 << 20, libvirt=None)
    memlock = check(report, "memlock")
    assert memlock.status == "warn" and "8 MiB" in memlock.detail and "libvirt raises it" in memlock.detail
    libvirt = check(report, "libvirt")
    assert libvirt.status == "fail" and "libvirt not found" in libvirt.detail
    assert libvirt.fix == "apt install libvirt-daemon-system"


# -- doctor: the cards -------------------------------------------------------------------------------


def test_a_card_alone_in_its_group_is_usable(fake):
    [report] = diagnose(fake.sysfs(), quiet_net(), [E1000])
    assert report.ok and report.usable(force=False) and report.refusal(force=False) is None
    assert check(report, "driver").detail == "e1000"
    assert check(report, "host use").detail == "enp3s0: no address or route"


def test_a_group_shared_with_a_bound_device_is_not_viable(fake):
    fake.add_device(OTHER, device=0x10D3, driver="e1000e", group=7)
    [report] = diagnose(fake.sysfs(), quiet_net(), [E1000])
    group = check(report, "iommu group")
    assert group.status == "fail" and "0000:03:00.1 (e1000e)" in group.detail and "group 7" in group.detail
    assert not report.usable(force=True)  # force overrides host use only


def test_a_group_shared_with_a_bridge_or_unbound_or_vfio_devices_is_viable(fake):
    fake.add_device(BRIDGE, cls=0x060400, driver="pcieport", group=7)
    fake.add_device(OTHER, driver=None, group=7)
    fake.add_device("0000:03:00.2", driver="vfio-pci", group=7)
    [report] = diagnose(fake.sysfs(), quiet_net(), [E1000])
    assert check(report, "iommu group").detail == "group 7, viable"


def test_a_card_carrying_the_default_route_is_refused_unless_forced(fake):
    net = HostNet(ip_runner([link("enp3s0", "192.168.1.5/24", "fe80::1/64")], [{"dst": "default", "dev": "enp3s0"}]))
    [report] = diagnose(fake.sysfs(), net, [E1000])
    assert not report.ok and not report.usable(force=False) and report.usable(force=True)
    refusal = report.refusal(force=False)
    assert refusal is not None and refusal.startswith("card wan0 (0000:03:00.0): in use by the host")
    assert "enp3s0 carries the default route" in refusal and "--force" in refusal
    assert report.refusal(force=True) is None


def test_a_card_carrying_an_address_or_a_route(fake):
    net = HostNet(
        ip_runner(
            [link("enp3s0", "192.168.1.5/24")],
            [
                {"dst": "192.168.1.0/24", "dev": "enp3s0", "protocol": "kernel", "scope": "link"},
                {"dst": "10.0.0.0/8", "gateway": "192.168.1.1", "dev": "enp3s0"},
                {"dst": "192.168.1.5", "dev": "enp3s0", "table": "local", "type": "local"},
            ],
        )
    )
    assert net.uses("enp3s0") == ["carries 192.168.1.5/24", "carries a route to 10.0.0.0/8"]
    detail = check(diagnose(fake.sysfs(), net, [E1000])[0], "host use").detail
    assert detail == "in use by the host: enp3s0 carries 192.168.1.5/24; enp3s0 carries a route to 10.0.0.0/8"


def test_link_local_ipv6_alone_is_no_use(fake):
    net = HostNet(
        ip_runner([link("enp3s0", "fe80::5054:ff:fe12:3456/64")], [], [{"dst": "fe80::/64", "dev": "enp3s0"}])
    )
    assert net.addresses() == {"enp3s0": []} and net.uses("enp3s0") == []


def test_a_port_of_a_bridge_or_a_vlan_base_is_used_through_them():
    net = HostNet(
        ip_runner(
            [link("enp3s0", master="br0"), link("br0", "192.168.1.5/24"), link("enp4s0"), link("v100", link="enp4s0")],
            [],
            [{"dst": "default", "dev": "v100", "table": "200", "nexthops": []}],
        )
    )
    assert net.uses("enp3s0") == ["carries 192.168.1.5/24 (via br0)"]
    assert net.uses("enp4s0") == ["carries the default route (table 200) (via v100)"]


def test_pci_id_mismatch_and_missing_device(fake):
    fake.add_device(OTHER, vendor=0x10EC, device=0x8139, driver="8139too", group=8)
    missing = CardRef("lan9", "0000:09:00.0", "e1000", "8086:100e")
    wrong, gone = diagnose(fake.sysfs(), quiet_net(), [CardRef("lan0", OTHER, "e1000", "8086:100e"), missing])
    assert check(wrong, "pci id").detail == "0000:03:00.1 is 10ec:8139, but e1000 cards are 8086:100e"
    assert [(c.name, c.status) for c in gone.checks] == [("device", "fail")]
    assert gone.checks[0].detail == "no PCI device 0000:09:00.0 on this host"
    assert gone.checks[0].fix == "check the inventory's pci"


def test_render_lists_each_card_with_its_fixes(fake):
    fake.add_device(OTHER, driver="e1000e", group=7)
    text = render(host_report(fake, libvirt=None), diagnose(fake.sysfs(), quiet_net(), [E1000]))
    assert "host\n" in text and "card wan0 (0000:03:00.0, e1000)\n" in text
    assert "FAIL iommu group" in " ".join(text.split()) and "fix: apt install libvirt-daemon-system" in text


def one_card_lab(pci: str, model: str = "e1000", models: str = "") -> str:
    """An inventory with one card on this machine (its libvirt URI is local)."""
    return (
        f'name: one-card\nhosts: {{rig1: {{libvirt: "qemu:///system"}}}}\n{models}'
        f'cards:\n  - {{id: wan0, host: rig1, pci: "{pci}", model: {model}}}\n'
    )


# A hostile inventory's "network card": an NVMe controller under a model that gives its PCI ID.
NVME_AS_A_CARD = 'models: {fastnic: {driver: nvme, pci_id: "144d:a808"}}\n'


def add_nvme(fake, group: int = 9) -> None:
    fake.add_device(NVME, vendor=0x144D, device=0xA808, cls=0x010802, driver="nvme", group=group)


def test_a_network_controller_shows_its_class_in_words(fake):
    [report] = diagnose(fake.sysfs(), quiet_net(), [E1000])
    assert [c.name for c in report.checks] == ["device", "class", "pci id", "iommu group", "driver", "host use"]
    assert (check(report, "class").status, check(report, "class").detail) == ("ok", "network controller: Ethernet")


def test_an_nvme_controller_is_refused_naming_its_class_even_forced(fake):
    add_nvme(fake)
    [report] = diagnose(fake.sysfs(), quiet_net(), [CardRef("wan0", NVME, "fastnic", "144d:a808")])
    cls = check(report, "class")
    assert cls.status == "fail"
    assert cls.detail == "0000:01:00.0 is a mass storage controller: NVMe (class 0x010802), not a network controller"
    assert cls.fix == (
        "check the inventory's pci with lspci -D -s 0000:01:00.0; a host's disks, display, memory, bridges, "
        "system peripherals, input devices and USB or SMBus controllers are never passed through"
    )
    assert not report.usable(force=True)
    refusal = report.refusal(force=True)
    assert refusal is not None and "mass storage controller: NVMe" in refusal
    # nothing about its group, driver or use: they would read as how to bind it
    assert [c.name for c in report.checks] == ["device", "class"]
    text = render(host_report(fake), [report])
    assert "passthrough" not in text and "pass them through" not in text and "--force" not in text


def test_a_controller_of_the_hosts_disk_is_refused_even_when_its_class_is_allowed(fake):
    add_nvme(fake)
    fake.add_disk("nvme0n1", NVME, under="nvme/nvme0")
    card = CardRef("wan0", NVME, "fastnic", "144d:a808", AllowedClass.parse("0x0108"))
    cls = check(diagnose(fake.sysfs(), quiet_net(), [card])[0], "class")
    assert cls.status == "fail" and "allow_class" not in cls.fix
    assert (
        cls.detail
        == "0000:01:00.0 is a mass storage controller: NVMe (class 0x010802), not a network controller, with the "
        "host's disk nvme0n1"
    )


def test_a_class_the_inventory_allows_passes_the_class_check(fake):
    fake.add_device(NVME, vendor=0x1234, device=0x5678, cls=0x120000, driver=None, group=9)
    lab = parse_inventory(
        one_card_lab(NVME, "accel", 'models: {accel: {driver: acc, pci_id: "1234:5678", allow_class: "0x12"}}\n'),
        "lab.yaml",
    )
    [ref] = card_refs(lab, ["wan0"])
    assert ref.allowed_class == AllowedClass.parse("0x12")
    [report] = diagnose(fake.sysfs(), quiet_net(), [ref])
    cls = check(report, "class")
    assert (cls.status, cls.detail) == ("ok", "processing accelerator (class 0x120000), allowed by allow_class 0x12")
    assert report.ok
    [unlisted] = diagnose(fake.sysfs(), quiet_net(), [CardRef("wan0", NVME, "accel")])
    assert check(unlisted, "class").status == "fail"


@pytest.fixture
def doctor_cli(fake, tmp_path, monkeypatch):
    """`niclab lab doctor --sysfs-root FAKE` in-process, with a virsh that says 9.0.0 and the fake's own routes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "virsh").write_text("#!/bin/sh\necho 9.0.0\n")
    (bin_dir / "virsh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(hostnet_mod, "HostNet", quiet_net)  # not this machine's own interfaces

    def run(inventory: str, *extra: str) -> int:
        lab = tmp_path / "lab.yaml"
        lab.write_text(inventory)
        return cli.main(["lab", "doctor", "--lab", str(lab), "--sysfs-root", str(fake.root), *extra])

    return run


def test_lab_doctor_exits_1_on_an_nvme_controller_even_forced(fake, doctor_cli, capsys):
    assert doctor_cli(one_card_lab(CARD)) == 0, capsys.readouterr().out  # the host and a real card pass
    capsys.readouterr()
    add_nvme(fake)
    for extra in ((), ("--force",)):
        assert doctor_cli(one_card_lab(NVME, "fastnic", NVME_AS_A_CARD), *extra) == 1
        out = capsys.readouterr().out
        assert "FAIL class" in " ".join(out.split())
        assert (
            "a run would refuse card wan0 (0000:01:00.0) on rig1: 0000:01:00.0 is a mass storage controller: NVMe "
            "(class 0x010802), not a network controller" in out
        )


@pytest.mark.parametrize("driver", ["i915", "vfio-pci", None])
def test_a_group_holding_a_display_controller_is_refused_whatever_its_driver(fake, driver):
    fake.add_device(GPU, vendor=0x8086, device=0x3E92, cls=0x030000, driver=driver, group=7)
    [report] = diagnose(fake.sysfs(), quiet_net(), [E1000])
    group = check(report, "iommu group")
    assert (group.status, group.detail) == ("fail", "group 7 also holds 0000:00:02.0 (display controller: VGA)")
    assert "own IOMMU group" in group.fix and "pass them through" not in group.fix
    assert not report.usable(force=True)


def test_a_group_holding_the_hosts_disk_is_refused(fake):
    fake.add_device(SATA, device=0xA102, cls=0x010601, driver="ahci", group=7)
    fake.add_disk("sda", SATA)
    fake.add_disk("sda1", None)  # a partition: no device of its own
    fake.add_disk("loop0", None)
    [report] = diagnose(fake.sysfs(), quiet_net(), [E1000])
    group = check(report, "iommu group")
    assert group.status == "fail" and "pass them through" not in group.fix
    assert group.detail == "group 7 also holds 0000:00:17.0 (mass storage controller: SATA (AHCI), disk sda)"
    assert not report.usable(force=True)


def test_a_group_holding_the_default_routes_nic_is_refused(fake):
    fake.add_device(ONBOARD, device=0x15B7, driver="e1000e", group=7, netdevs=["eno1"])
    fake.add_interface("eno1", ONBOARD)
    fake.add_interface("br0", None)
    net = HostNet(
        ip_runner([link("eno1", master="br0"), link("br0", "192.0.2.2/24")], [{"dst": "default", "dev": "br0"}])
    )
    assert net.default_route_interfaces() == ["br0", "eno1"]
    [report] = diagnose(fake.sysfs(), net, [E1000])
    group = check(report, "iommu group")
    assert group.detail == "group 7 also holds 0000:00:1f.6 (network controller: Ethernet, default route via eno1)"
    assert not report.usable(force=True)


def test_a_group_names_each_device_the_host_needs(fake):
    fake.add_device(GPU, cls=0x030000, driver="i915", group=7)
    fake.add_device(SATA, cls=0x010601, driver="ahci", group=7)
    fake.add_disk("sda", SATA)
    fake.add_disk("sdb", SATA, under="ata2/host1/target1:0:0/1:0:0:0")
    detail = check(diagnose(fake.sysfs(), quiet_net(), [E1000])[0], "iommu group").detail
    assert detail == (
        "group 7 also holds 0000:00:02.0 (display controller: VGA), "
        "0000:00:17.0 (mass storage controller: SATA (AHCI), disks sda, sdb)"
    )


def test_a_group_of_bridges_and_vfio_devices_is_viable_though_a_bridge_leads_to_the_hosts_disk(fake):
    """The disk's controller and the default route's NIC lie behind a bridge of the card's group, in a group
    of their own: the bridge is not theirs to give away."""
    fake.add_device(BRIDGE, cls=0x060400, driver="pcieport", group=7)
    fake.add_device("0000:03:00.2", driver="vfio-pci", group=7)
    fake.add_device(SATA, cls=0x010601, driver="ahci", group=8, parent=BRIDGE)
    fake.add_device(ONBOARD, device=0x15B7, driver="e1000e", group=8, netdevs=["eno1"], parent=BRIDGE)
    fake.add_disk("sda", SATA)
    fake.add_interface("eno1", ONBOARD)
    sysfs = fake.sysfs()
    assert sysfs.blockdevs(SATA) == ["sda"] and sysfs.blockdevs(BRIDGE) == []
    assert sysfs.netdev_device("eno1") == ONBOARD
    net = HostNet(ip_runner([link("eno1", "192.0.2.2/24")], [{"dst": "default", "dev": "eno1"}]))
    [report] = diagnose(sysfs, net, [E1000])
    assert check(report, "iommu group").detail == "group 7, viable" and report.ok


# -- vfio binding and its journal --------------------------------------------------------------------


def test_bind_then_restore_returns_the_card_to_its_driver(fake, journal):
    sim = fake.sim()
    bind_to_vfio(sim, journal, CARD, "run-1", **NO_SLEEP)
    assert sim.driver(CARD) == "vfio-pci" and sim.driver_override(CARD) == "vfio-pci" and sim.netdevs(CARD) == []
    entry = journal.get(CARD)
    assert entry is not None and (entry.driver, entry.driver_override, entry.run) == ("e1000", None, "run-1")
    result = restore(sim, journal, CARD, **NO_SLEEP)
    assert result.ok and result.driver == "e1000"
    assert sim.driver(CARD) == "e1000" and sim.driver_override(CARD) is None and sim.netdevs(CARD) == ["enp3s0"]
    assert journal.get(CARD) is None and journal.entries() == []
    assert not any(path.endswith("new_id") for path, _ in sim.writes)
    assert all(path.read_text() == "" for path in fake.root.rglob("new_id"))


def test_the_journal_is_valid_json_and_written_before_any_sysfs_write(fake, journal):
    sim = fake.sim()
    seen = []
    sim.before_write = lambda path, text: seen.append(json.loads(Path(journal.path(CARD)).read_text())["driver"])
    bind_to_vfio(sim, journal, CARD, "run-1", **NO_SLEEP)
    assert seen == ["e1000"] * 3  # driver_override, unbind, drivers_probe
    assert [path.rsplit("/", 1)[1] for path, _ in sim.writes] == ["driver_override", "unbind", "drivers_probe"]
    assert not list(journal.dir.path.glob(".*"))  # no temp file left


def test_a_card_already_on_vfio_stays_there(fake, journal):
    fake.add_device(OTHER, driver="vfio-pci", native="e1000", group=8)
    sim = fake.sim()
    bind_to_vfio(sim, journal, OTHER, "run-1", **NO_SLEEP)
    entry = journal.get(OTHER)
    assert sim.writes == [] and entry is not None and entry.driver == "vfio-pci"
    assert restore(sim, journal, OTHER, **NO_SLEEP).driver == "vfio-pci"
    assert sim.writes == [] and sim.driver(OTHER) == "vfio-pci" and journal.get(OTHER) is None


def test_restore_all_after_an_interrupted_run(fake, journal, repo):
    script = (
        "import os, sys\nfrom pathlib import Path\n"
        "from niclab.plumbing.lab.statedir import StateDir\n"
        "from niclab.plumbing.lab.vfio import Journal, passed_through\n"
        "from tests.unit.fakesysfs import KernelSim\n"
        "with StateDir(Path(sys.argv[2])) as state, passed_through(\n"
        "    KernelSim(Path(sys.argv[1])), Journal(state), {sys.argv[3]: None}, 'run-1'\n"
        "):\n"
        "    os._exit(9)  # killed mid-run: no cleanup\n"
    )
    argv = [sys.executable, "-c", script, str(fake.root), str(journal.state.path), CARD]
    done = subprocess.run(argv, cwd=repo, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 9
    sim = fake.sim()
    assert sim.driver(CARD) == "vfio-pci" and [e.pci for e in journal.entries()] == [CARD]
    assert [(r.pci, r.driver, r.ok) for r in restore_all(sim, journal, **NO_SLEEP)] == [(CARD, "e1000", True)]
    assert sim.driver_override(CARD) is None and journal.entries() == []


def test_a_new_bind_keeps_the_original_a_crash_journaled(fake, journal):
    sim = fake.sim()
    bind_to_vfio(sim, journal, CARD, "crashed-run", **NO_SLEEP)  # never restored
    bind_to_vfio(sim, journal, CARD, "run-2", **NO_SLEEP)
    entry = journal.get(CARD)
    assert entry is not None and (entry.driver, entry.run) == ("e1000", "crashed-run")
    assert restore(sim, journal, CARD, **NO_SLEEP).driver == "e1000"


@pytest.mark.parametrize("module_file", [True, False])
def test_a_failed_bind_puts_the_card_back_and_says_modprobe(tmp_path, journal, module_file):
    fake = FakeSysfs(tmp_path / "root")  # vfio-pci not loaded
    fake.add_device(CARD, group=7, netdevs=["enp3s0"])
    if module_file:
        fake.add_module_file()
    sim = fake.sim()
    with pytest.raises(NiclabError, match="modprobe vfio-pci") as caught:
        bind_to_vfio(sim, journal, CARD, "run-1", **NO_SLEEP)
    assert "did not bind to vfio-pci (it is unbound)" in str(caught.value)
    assert "it is back on e1000" in str(caught.value)
    assert sim.driver(CARD) == "e1000" and sim.driver_override(CARD) is None and sim.netdevs(CARD) == ["enp3s0"]
    assert journal.entries() == []


def test_passed_through_restores_every_card_however_the_block_ends(fake, journal):
    fake.add_device(OTHER, driver="e1000", group=8)
    sim = fake.sim()
    with pytest.raises(RuntimeError), passed_through(sim, journal, {CARD: None, OTHER: None}, "run-1", **NO_SLEEP):
        assert sim.driver(CARD) == sim.driver(OTHER) == "vfio-pci"
        raise RuntimeError("the benchmark failed")
    assert sim.driver(CARD) == sim.driver(OTHER) == "e1000" and journal.entries() == []
    with pytest.raises(NiclabError, match=r"no PCI device 0000:09:00\.0"):  # a later card fails: the first goes back
        with passed_through(sim, journal, {CARD: None, "0000:09:00.0": None}, "run-2", **NO_SLEEP):
            pytest.fail("the block must not run")
    assert sim.driver(CARD) == "e1000" and journal.entries() == []


def test_a_restore_that_cannot_rebind_keeps_the_journal_entry(fake, journal):
    sim = fake.sim()
    bind_to_vfio(sim, journal, CARD, "run-1", **NO_SLEEP)
    for path in (fake.pci / "drivers" / "e1000").iterdir():
        path.unlink()
    (fake.pci / "drivers" / "e1000").rmdir()  # the e1000 module was unloaded meanwhile
    [result] = restore_all(sim, journal, **NO_SLEEP)
    assert not result.ok and result.driver is None
    assert "modprobe e1000" in (result.error or "") and "niclab lab restore" in (result.error or "")
    assert journal.get(CARD) is not None


# -- leases ------------------------------------------------------------------------------------------


def test_a_second_lease_is_refused_naming_the_holder(state):
    with lease(state, CARD, "run-1", card="wan0") as mine:
        assert holder(state, CARD) == mine
        with pytest.raises(NiclabError) as caught, lease(state, CARD, "run-2", card="wan0"):
            pass
    expected = f"card wan0 (0000:03:00.0) is leased to run run-1 (user {current_user()}, pid {mine.pid}); "
    assert str(caught.value) == expected + "wait for it with --wait, or end that run"
    assert holder(state, CARD) is None
    with lease(state, CARD, "run-3"):  # free again
        pass


def _record(tmp_path, pid: int, start: int | None, at: str | None = None) -> None:
    (tmp_path / "leases").mkdir(mode=0o700, exist_ok=True)
    stale = Holder(run="crashed", user="someone", pid=pid, start=start, since=0.0, at=at)
    (tmp_path / "leases" / f"{CARD}.json").write_text(stale.model_dump_json())


def test_a_stale_holder_is_reclaimed(tmp_path, state):
    gone = subprocess.Popen(["true"])
    gone.wait()
    _record(tmp_path, gone.pid, 12345)  # that process is gone
    with lease(state, CARD, "run-2") as mine:
        assert holder(state, CARD) == mine
    _record(tmp_path, 1, (process_start_time(1) or 0) + 1)  # a live PID, but another process (start time)
    with lease(state, CARD, "run-3") as mine:
        assert holder(state, CARD) == mine


def test_a_live_holder_counts_even_without_its_flock(tmp_path, state):
    _record(tmp_path, 1, process_start_time(1))  # e.g. the lock file was deleted under it
    with pytest.raises(NiclabError, match=r"leased to run crashed \(user someone, pid 1\)"):
        with lease(state, CARD, "run-2"):
            pass


def test_a_holder_in_another_container_counts_while_it_holds_the_flock(tmp_path, state):
    """Its PID means nothing here (another PID namespace): the flock on the shared lock file decides."""
    elsewhere = "a1b2c3/pid:[4026532999]"
    _record(tmp_path, 1, process_start_time(1), at=elsewhere)  # PID 1 runs here too: not to be trusted
    fd = os.open(tmp_path / "leases" / f"{CARD}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the container's run, alive
        assert locked(state, CARD) and not holder(state, CARD).alive()
        with pytest.raises(NiclabError, match=r"pid 1, in another container or on another host\)"):
            with lease(state, CARD, "run-2"):
                pass
    finally:
        os.close(fd)  # the container's run ends
    assert not locked(state, CARD)
    with lease(state, CARD, "run-3") as mine:  # its record is stale now: reclaimed
        assert holder(state, CARD) == mine and mine.at is not None and not mine.elsewhere()


def _hold_in_thread(state, pcis, run, messages):
    result: dict = {}

    def take():
        with leases(state, pcis, run, wait=True, progress=messages.append, interval=0.02) as held:
            result["held"] = held

    thread = threading.Thread(target=take)
    thread.start()
    return thread, result


def _until(condition, seconds: float = 60.0) -> None:
    """Wait for `condition`; the bound only keeps a broken lease from hanging the suite (a busy host is slow)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_wait_takes_the_card_once_the_holder_releases_it(state):
    messages: list[str] = []
    with lease(state, CARD, "run-1") as first:
        thread, result = _hold_in_thread(state, [CARD], "run-2", messages)
        _until(lambda: messages)
        time.sleep(0.1)
        assert "held" not in result and len(messages) == 1  # said once, not at every poll
    thread.join(60)
    assert not thread.is_alive(), "the waiting run never took its cards"
    assert messages == [f"waiting for card {CARD}, held by run run-1 (user {first.user}, pid {first.pid})"]
    assert [h.run for h in result["held"]] == ["run-2"]


def test_waiting_gives_up_after_the_timeout(state):
    with (
        lease(state, CARD, "run-1"),
        pytest.raises(NiclabError, match=r"still leased to run run-1 \(user .*\) after 0\.1 s of waiting"),
    ):
        with lease(state, CARD, "run-2", wait=True, timeout=0.1, interval=0.02):
            pass


def test_several_cards_are_taken_in_sorted_order_and_released_in_reverse(state, monkeypatch):
    a, b, c = "0000:03:00.0", "0000:04:00.0", "0000:05:00.0"
    messages: list[str] = []
    with lease(state, b, "run-1"):
        thread, result = _hold_in_thread(state, [c, a, b, a], "run-2", messages)
        _until(lambda: messages)
        assert holder(state, a) is not None and holder(state, c) is None  # a taken, waiting on b, c not yet
    thread.join(60)
    assert not thread.is_alive(), "the waiting run never took its cards"
    assert [h.run for h in result["held"]] == ["run-2"] * 3
    assert all(holder(state, pci) is None for pci in (a, b, c))
    released = []
    real = lease_mod.lease

    def recording(state, pci, *args, **kwargs):
        with real(state, pci, *args, **kwargs) as held:
            yield held
        released.append(pci)

    monkeypatch.setattr(lease_mod, "lease", contextmanager(recording))
    with leases(state, [b, c, a], "run-3"):
        pass
    assert released == [c, b, a]


def test_an_interface_under_a_child_device_counts_as_the_cards(tmp_path):
    """virtio puts its interface under virtioN/, not the PCI device's net/: /sys/class/net finds it."""
    fake = FakeSysfs(tmp_path / "root")
    fake.add_device(CARD, group=7, netdevs=[])
    sysfs = fake.sysfs()
    child = sysfs.device(CARD) / "virtio2"
    (child / "net" / "eth0").mkdir(parents=True)
    (sysfs.root / "sys" / "class" / "net" / "eth0").mkdir(parents=True)
    (sysfs.root / "sys" / "class" / "net" / "eth0" / "device").symlink_to(child)
    (sysfs.root / "sys" / "class" / "net" / "lo").mkdir(parents=True)  # no device: not a card's
    assert sysfs.netdevs(CARD) == ["eth0"]
    net = HostNet(ip_runner([link("eth0", "192.0.2.2/24")], [{"dst": "default", "dev": "eth0"}]))
    [report] = diagnose(sysfs, net, [E1000])
    assert check(report, "host use").detail == (
        "in use by the host: eth0 carries 192.0.2.2/24; eth0 carries the default route"
    )


# -- holding a run's cards ------------------------------------------------------------------------


def _nvme_as_the_card(fake):
    add_nvme(fake)
    return one_card_lab(NVME, "fastnic", NVME_AS_A_CARD), "mass storage controller: NVMe"


def _display_beside_the_card(fake):
    fake.add_device(GPU, cls=0x030000, driver="vfio-pci", group=7)  # vfio's: the viability check lets it be
    return one_card_lab(CARD), "0000:00:02.0 (display controller: VGA)"


def _disk_beside_the_card(fake):
    fake.add_device(SATA, cls=0x010601, driver="ahci", group=7)
    fake.add_disk("sda", SATA)
    return one_card_lab(CARD), "disk sda"


def _default_route_beside_the_card(fake):
    fake.add_device(ONBOARD, device=0x15B7, driver="e1000e", group=7, netdevs=["eth0"])
    fake.add_interface("eth0", ONBOARD)  # quiet_net's default route leaves by eth0
    return one_card_lab(CARD), "default route via eth0"


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize(
    "setup", [_nvme_as_the_card, _display_beside_the_card, _disk_beside_the_card, _default_route_beside_the_card]
)
def test_hold_cards_refuses_what_the_host_needs_before_any_sysfs_write(fake, tmp_path, monkeypatch, setup, force):
    inventory, reason = setup(fake)
    sim = fake.sim()
    lab = parse_inventory(inventory, "lab.yaml")
    placement = Placement(cards={("a", 0, 0): lab.card("wan0")}, cables={}, hosts={"a": "rig1"})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(passthrough, "HostNet", quiet_net)
    drivers = {name: sim.driver(name) for name in os.listdir(fake.pci / "devices")}
    with pytest.raises(NiclabError, match="cannot be passed through") as refused:
        with hold_cards(lab, placement, "run-1", lambda line: None, force=force, sysfs=sim, state=tmp_path / "state"):
            pass
    assert reason in str(refused.value)
    assert sim.writes == []
    with StateDir(tmp_path / "state") as state:
        assert not Journal(state).entries()
    assert {name: sim.driver(name) for name in drivers} == drivers


class ReadOnlySysfs(FakeSysfs):
    """What an unprivileged container sees: the host's devices, through a /sys mounted read-only."""

    def sysfs(self):
        sysfs = super().sysfs()
        sysfs.writable = lambda: False  # type: ignore[method-assign]
        return sysfs


def test_as_root_behind_a_read_only_sys_libvirt_binds_the_cards(tmp_path, monkeypatch):
    fake = ReadOnlySysfs(tmp_path / "root")
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)
    fake.add_driver("vfio-pci")
    fake.add_module("vfio_pci")
    fake.add_device(CARD, group=7, netdevs=["enp3s0"])
    sysfs = fake.sysfs()
    lab = parse_inventory(
        f'name: one-card\nhosts: {{rig1: {{libvirt: "qemu:///system"}}}}\n'
        f'cards:\n  - {{id: wan0, host: rig1, pci: "{CARD}", model: e1000}}\n',
        "lab.yaml",
    )
    placement = Placement(cards={("a", 0, 0): lab.card("wan0")}, cables={}, hosts={"a": "rig1"})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(passthrough, "HostNet", quiet_net)  # not this machine's own interfaces
    said: list[str] = []
    with hold_cards(lab, placement, "run-1", said.append, sysfs=sysfs, state=tmp_path / "state"):
        assert sysfs.driver(CARD) == "e1000" and sysfs.driver_override(CARD) is None  # nothing written
    assert any("takes no writes" in line and "libvirt's managed hostdev" in line for line in said), said
    with StateDir(tmp_path / "state") as state:
        assert not Journal(state).entries()


@pytest.mark.parametrize(
    ("links", "routes"),
    [
        ("5", "[]"),
        ('[{"addr_info": []}]', "[]"),
        ('[{"ifname": "eth0", "addr_info": [{"local": 5}, "x", {"prefixlen": 24}]}]', "[]"),
        (
            '[{"ifname": "eth0", "master": 7, "link": ["x"]}]',
            '[{"dst": "default", "dev": 3, "nexthops": [{"dev": []}, 1]}]',
        ),
        ('{"ifname": "eth0"}', "[]"),
    ],
)
def test_odd_ip_output_from_another_host_is_one_line_or_nothing_never_a_crash(links, routes):
    """Another host's `ip -j` output is untrusted: a shape the checks do not expect reads as no link, address
    or route, or fails with one line; never a TypeError or KeyError."""

    def runner(argv: list[str]) -> str:
        return routes if "route" in argv else links

    net = HostNet(runner)
    try:
        assert net.uses("eth0") == [] and net.default_route_interfaces() == []
    except NiclabError as exc:
        assert "not a list" in str(exc)


def test_a_hand_over_between_lock_and_record_is_not_said_as_a_new_holder():
    """A holder between its record and its unlock (releasing) leaves a lock with no record for a moment: the
    waiter says the holder it saw, not also "a process that has not recorded itself yet"."""
    first = lease_mod.own_record("run-1")
    polls = iter([(None, first), (None, None), ("taken", None)])
    messages: list[str] = []
    taken = lease_mod.take_waiting(
        lambda: next(polls), "card x", lambda h: h.run if h else "unrecorded", True, None, messages.append, 0
    )
    assert taken == "taken" and messages == ["waiting for card x, held by run-1"]


def test_a_lock_left_with_no_record_is_said_from_the_second_poll():
    polls = iter([(None, None), (None, None), (None, None), ("taken", None)])
    messages: list[str] = []
    lease_mod.take_waiting(
        lambda: next(polls), "card x", lambda h: h.run if h else "unrecorded", True, None, messages.append, 0
    )
    assert messages == ["waiting for card x, held by unrecorded"]
