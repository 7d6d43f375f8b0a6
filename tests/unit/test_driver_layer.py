"""The driver layer: built modules behind a node image's initramfs, with modules.dep and modules.alias rewritten."""

from __future__ import annotations

import gzip
import json
import stat
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.model.driver_choice import DriverChoice
from niclab.model.topology import NodeSpec, Port
from niclab.plumbing.drivers.build import BuiltDriver
from niclab.plumbing.drivers.layer import asked_modules, driver_entries, with_drivers
from niclab.plumbing.drivers.modules import BuiltModule
from niclab.plumbing.image.cpio import Entry, read_entries
from niclab.plumbing.image.store import load_image, write_cpio
from niclab.plumbing.lab.drivers import DriverTable

KVER = "6.1.0-50-amd64"
BASE = f"usr/lib/modules/{KVER}"
DEP = (
    "kernel/drivers/pps/pps_core.ko:\n"
    "kernel/drivers/ptp/ptp.ko: kernel/drivers/pps/pps_core.ko\n"
    "kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko: kernel/drivers/ptp/ptp.ko kernel/drivers/pps/pps_core.ko\n"
    "kernel/drivers/net/ethernet/intel/e1000/e1000.ko:\n"
)
ALIAS = (
    "alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e\n"
    "alias pci:v00008086d000010D4sv*sd*bc*sc*i* e1000e\n"
    "alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000\n"
)
CHOICE = DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e", "e1000e_vendor")


def image(tmp_path: Path, name: str = "micro-abc") -> Path:
    directory = tmp_path / "images" / name
    directory.mkdir(parents=True)
    (directory / "vmlinuz").write_bytes(b"kernel")
    entries = [
        Entry(f"{BASE}/kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko", stat.S_IFREG | 0o644, b"old e1000e"),
        Entry(f"{BASE}/modules.dep", stat.S_IFREG | 0o644, DEP.encode()),
        Entry(f"{BASE}/modules.alias", stat.S_IFREG | 0o644, ALIAS.encode()),
    ]
    write_cpio(directory / "initrd.img", entries)
    (directory / "modules.alias").write_text(ALIAS)  # beside the initramfs, as image builds leave it
    manifest = {"recipe": "micro", "input_hash": "abc", "cmdline": "console=ttyS0", "kernel_version": KVER}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def built(tmp_path: Path, name: str = "e1000e_vendor", depends: tuple[str, ...] = ("ptp",)) -> BuiltDriver:
    ko = tmp_path / f"{name}.ko"
    ko.write_bytes(b"new module " + name.encode())
    module = BuiltModule(
        name, ko, "", "", "ab" * 20, "6.1.0-50-amd64 SMP", ("pci:v00008086d000010D3sv*sd*bc*sc*i*",), depends
    )
    return BuiltDriver(CHOICE, KVER, tmp_path, "cd" * 32, "Debian linux-source-6.1", (module,), name, tmp_path / "log")


def test_the_new_module_takes_the_cards_aliases_and_the_default_loses_them(tmp_path):
    base = load_image(image(tmp_path))
    assert base is not None
    entries, aliases, replaced = driver_entries(base, {"8086:10d3": built(tmp_path)})
    assert replaced == {"8086:10d3": ["e1000e"]}  # the kernel's module for that ID, named for the proof
    files = {e.name: e.data for e in entries if stat.S_ISREG(e.mode)}
    assert files[f"{BASE}/updates/niclab/e1000e_vendor.ko"] == b"new module e1000e_vendor"
    assert aliases.splitlines() == [  # e1000e keeps the cards of other IDs
        "alias pci:v00008086d000010D4sv*sd*bc*sc*i* e1000e",
        "alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000",
        "alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e_vendor",
    ]
    dep = files[f"{BASE}/modules.dep"].decode().splitlines()
    # nearest first, as depmod writes it (busybox modprobe loads from the end); the kernel's own lines stay
    assert "updates/niclab/e1000e_vendor.ko: kernel/drivers/ptp/ptp.ko kernel/drivers/pps/pps_core.ko" in dep
    assert "kernel/drivers/ptp/ptp.ko: kernel/drivers/pps/pps_core.ko" in dep
    assert "kernel/drivers/net/ethernet/intel/e1000/e1000.ko:" in dep
    assert {e.name for e in entries if stat.S_ISDIR(e.mode)} >= {"usr", f"{BASE}/updates/niclab"}


def test_a_module_of_the_defaults_own_name_replaces_its_line(tmp_path):
    base = load_image(image(tmp_path))
    assert base is not None
    entries, aliases, _ = driver_entries(base, {"8086:10d3": built(tmp_path, "e1000e")})
    dep = next(e.data for e in entries if e.name.endswith("modules.dep")).decode().splitlines()
    assert [line for line in dep if "e1000e.ko" in line] == [
        "updates/niclab/e1000e.ko: kernel/drivers/ptp/ptp.ko kernel/drivers/pps/pps_core.ko"
    ]
    assert aliases.count(" e1000e\n") == 1


def test_a_dependency_the_image_lacks_is_named(tmp_path):
    base = load_image(image(tmp_path))
    assert base is not None
    with pytest.raises(NiclabError, match=r"module e1000e_vendor needs mdio, which kernel 6\.1\.0-50-amd64 of image"):
        driver_entries(base, {"8086:10d3": built(tmp_path, depends=("mdio",))})


def test_the_derived_image_boots_the_layer_after_the_initrd_and_says_what_it_carries(tmp_path, monkeypatch):
    base = load_image(image(tmp_path))
    assert base is not None
    derived = with_drivers(base, {"8086:10d3": built(tmp_path)}, lambda line: None)
    assert derived.directory.name.startswith("micro-abc+drv-") and derived.id.startswith("micro-abc+drv-")
    unpacked = list(read_entries(gzip.decompress(derived.initrd.read_bytes())))
    names = [e.name for e in unpacked]
    # the image's own archive first, the layer after it: its modules.alias is the one the kernel keeps
    assert names.index(f"{BASE}/modules.alias") < len(names) - 1 - names[::-1].index(f"{BASE}/modules.alias")
    assert (derived.directory / "vmlinuz").samefile(base.directory / "vmlinuz")
    # a lab run finds the card's driver in the image's alias table: now the new module
    assert DriverTable(derived).resolve("8086:10d3").module == "e1000e_vendor"
    assert DriverTable(base).resolve("8086:10d3").module == "e1000e"
    entry = derived.manifest["drivers"][str(CHOICE)]
    assert entry["module"] == "e1000e_vendor" and entry["build_id"] == "ab" * 20 and entry["source_hash"] == "cd" * 32
    assert entry["pci_ids"] == ["8086:10d3"] and entry["replaces"] == "e1000e"
    assert with_drivers(base, {"8086:10d3": built(tmp_path)}, lambda line: None) == derived  # built once
    assert with_drivers(base, {}, lambda line: None) is base
    port = Port("a", 0, 0, "e1000e", "link0", driver=CHOICE)
    spec = NodeSpec("a", 0, 1, 256, (port, Port("a", 1, 0, "e1000", "link1")), drivers=(("8086:10d3", CHOICE),))
    asked = asked_modules(spec, derived)
    assert list(asked) == [port.key] and asked[port.key].module == "e1000e_vendor"
    assert asked[port.key].replaces == "e1000e" and asked[port.key].choice == str(CHOICE)


def test_a_driver_built_for_another_kernel_is_refused(tmp_path):
    base = load_image(image(tmp_path))
    assert base is not None
    other = built(tmp_path)
    wrong = BuiltDriver(
        other.choice,
        "6.12.57+deb13-amd64",
        *[getattr(other, f) for f in ("directory", "source_hash", "origin", "modules", "driver", "log")],
    )
    with pytest.raises(NiclabError, match=r"was built for kernel 6\.12\.57"):
        with_drivers(base, {"8086:10d3": wrong}, lambda line: None)


def module(tmp_path: Path, name: str, depends: tuple[str, ...] = (), data: bytes = b"") -> BuiltModule:
    tmp_path.mkdir(exist_ok=True)
    ko = tmp_path / f"{name}.ko"
    ko.write_bytes(data or f"module {name}".encode())
    return BuiltModule(name, ko, "", "", "", "", (f"pci:v0000ABCDd0000{len(name):04X}sv*sd*bc*sc*i*",), depends)


def test_a_build_of_several_modules_that_need_each_other_loads_them_in_order(tmp_path):
    base = load_image(image(tmp_path))
    assert base is not None
    # the driver needs a helper built with it, which needs the kernel's ptp (and so pps_core)
    mods = (module(tmp_path, "vdrv", ("vhelper", "pps_core")), module(tmp_path, "vhelper", ("ptp",)))
    driver = BuiltDriver(CHOICE, KVER, tmp_path, "cd" * 32, "a vendor's", mods, "vdrv", tmp_path / "log")
    entries, _, _ = driver_entries(base, {"8086:10d3": driver})
    dep = next(e.data for e in entries if e.name.endswith("modules.dep")).decode().splitlines()
    assert "updates/niclab/vhelper.ko: kernel/drivers/ptp/ptp.ko kernel/drivers/pps/pps_core.ko" in dep
    # pps_core, which the driver needs itself and through the helper, comes last: it loads first
    assert (
        "updates/niclab/vdrv.ko: updates/niclab/vhelper.ko kernel/drivers/ptp/ptp.ko kernel/drivers/pps/pps_core.ko"
        in dep
    )


def test_two_drivers_of_a_node_that_build_different_modules_of_one_name_are_refused(tmp_path):
    base = load_image(image(tmp_path))
    assert base is not None
    one = BuiltDriver(CHOICE, KVER, tmp_path, "", "", (module(tmp_path / "x", "vdrv", data=b"one"),), "vdrv", tmp_path)
    other = DriverChoice("dkms", "vendor-dkms")
    two = BuiltDriver(other, KVER, tmp_path, "", "", (module(tmp_path / "y", "vdrv", data=b"two"),), "vdrv", tmp_path)
    with pytest.raises(NiclabError, match=r"both build a module vdrv, not the same one"):
        driver_entries(base, {"8086:10d3": one, "8086:100e": two})
