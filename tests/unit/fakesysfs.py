"""Fake sysfs trees for the lab's host code, and a kernel that answers writes to them as Linux does.

FakeSysfs builds root/sys, root/proc and root/lib/modules in a temp dir. What
only the kernel knows (which driver matches a device by its ID table, the
interfaces that driver creates) goes to root/fake-kernel.json, outside sys/, so
a KernelSim made in another process sees the same machine.

KernelSim emulates the three writes niclab makes:
- driver_override: "(null)" after a lone newline, else the name;
- <driver>/unbind: the device leaves the driver, its interfaces disappear;
- drivers_probe: an unbound device binds to its driver_override if set (and
  only then, and only if that driver is loaded), else to its native driver if loaded.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from niclab.plumbing.lab.sysfs import Sysfs

STATE = "fake-kernel.json"
_DRIVER_FILES = ("bind", "unbind", "new_id", "remove_id", "uevent")


class FakeSysfs:
    def __init__(self, root: Path, release: str = "6.1.0-fake"):
        self.root = root
        self.release = release
        self.sys = root / "sys"
        self.pci = self.sys / "bus" / "pci"
        (self.pci / "devices").mkdir(parents=True)
        (self.pci / "drivers").mkdir()
        (self.pci / "drivers_probe").write_text("")
        (root / "proc").mkdir()
        self.set_cmdline("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet")
        self.set_cpu("GenuineIntel")
        self._save({})

    def _load(self) -> dict:
        return json.loads((self.root / STATE).read_text())

    def _save(self, state: dict) -> None:
        (self.root / STATE).write_text(json.dumps(state))

    def add_driver(self, name: str) -> Path:
        """A loaded PCI driver (for vfio-pci: the module is loaded)."""
        path = self.pci / "drivers" / name
        path.mkdir(exist_ok=True)
        for file in _DRIVER_FILES:
            (path / file).touch()
        return path

    def add_device(
        self,
        pci: str,
        vendor: int = 0x8086,
        device: int = 0x100E,
        cls: int = 0x020000,
        driver: str | None = "e1000",
        group: int | None = None,
        netdevs: Sequence[str] = (),
        native: str | None = None,
        override: str | None = None,
        parent: str | None = None,
    ) -> Path:
        """A PCI device, bound to `driver` (None: unbound). `native` is the driver whose ID table
        matches it (default: `driver`, unless that is vfio-pci, which matches nothing by ID). With a
        `parent` (a bridge added before), the device lies under it and /sys/bus/pci/devices links to it,
        as in the kernel's /sys/devices/pci0000:00/<bridge>/<device>."""
        path = self.pci / "devices" / pci
        if parent is not None:
            path = (self.pci / "devices" / parent).resolve() / pci
            (self.pci / "devices" / pci).symlink_to(path)
        path.mkdir()
        (path / "vendor").write_text(f"0x{vendor:04x}\n")
        (path / "device").write_text(f"0x{device:04x}\n")
        (path / "class").write_text(f"0x{cls:06x}\n")
        ids = f"v{vendor:08X}d{device:08X}sv{vendor:08X}sd{0:08X}"
        (path / "modalias").write_text(f"pci:{ids}bc{cls >> 16:02X}sc{cls >> 8 & 0xFF:02X}i{cls & 0xFF:02X}\n")
        (path / "driver_override").write_text(f"{override or '(null)'}\n")
        if native is None and driver != "vfio-pci":
            native = driver
        state = self._load()
        state[pci] = {"native": native, "netdevs": list(netdevs)}
        self._save(state)
        if group is not None:
            group_dir = self.sys / "kernel" / "iommu_groups" / str(group)
            (group_dir / "devices").mkdir(parents=True, exist_ok=True)
            (group_dir / "devices" / pci).symlink_to(path)
            (path / "iommu_group").symlink_to(group_dir)
        if driver is not None:
            self.add_driver(driver)
            bind(self.root, pci, driver)
            if driver == native:
                for name in netdevs:
                    (path / "net" / name).mkdir(parents=True)
        return path

    def add_disk(self, name: str, pci: str | None, under: str = "ata1/host0/target0:0:0/0:0:0:0") -> Path:
        """A block device in /sys/class/block: a disk of the controller at `pci`, whose `device` link points
        at a child of the controller (`under`: a SCSI device on an ATA port; "nvme/nvme0" for NVMe), or,
        when `pci` is None, one without a device (a partition, loop, dm or zram)."""
        entry = self.sys / "class" / "block" / name
        entry.mkdir(parents=True)
        if pci is not None:
            child = self.pci / "devices" / pci / under
            (child / "block" / name).mkdir(parents=True)
            (entry / "device").symlink_to(child)
        return entry

    def add_interface(self, name: str, pci: str | None, under: str = "") -> Path:
        """A network interface in /sys/class/net: of the device at `pci` (through a child of it, such as
        virtio's "virtio0", when `under` names one), or virtual (no device) when `pci` is None."""
        entry = self.sys / "class" / "net" / name
        entry.mkdir(parents=True)
        if pci is not None:
            target = self.pci / "devices" / pci / under  # "": the device itself
            target.mkdir(parents=True, exist_ok=True)
            (entry / "device").symlink_to(target)
        return entry

    def add_iommu(self, name: str = "dmar0", intel_ecap: int | None = None) -> Path:
        """An IOMMU unit: dmarN (Intel, with its ECAP register as the kernel prints it) or ivhdN (AMD)."""
        path = self.sys / "class" / "iommu" / name
        if name.startswith("ivhd"):
            (path / "amd-iommu").mkdir(parents=True)
        else:
            (path / "intel-iommu").mkdir(parents=True)
            (path / "intel-iommu" / "ecap").write_text(f"{intel_ecap or 0:x}\n")
        return path

    def set_cmdline(self, text: str) -> None:
        (self.root / "proc" / "cmdline").write_text(text + "\n")

    def set_cpu(self, vendor_id: str) -> None:
        (self.root / "proc" / "cpuinfo").write_text(
            f"processor\t: 0\nvendor_id\t: {vendor_id}\nmodel name\t: Fake CPU\n"
        )

    def add_module(self, name: str, **parameters: str) -> Path:
        """A loaded module, as /sys/module/<name> with its parameters."""
        path = self.sys / "module" / name
        (path / "parameters").mkdir(parents=True, exist_ok=True)
        for key, value in parameters.items():
            (path / "parameters" / key).write_text(f"{value}\n")
        return path

    def add_module_file(self, relative: str = "kernel/drivers/vfio/pci/vfio-pci.ko.zst") -> Path:
        """A module file of the running kernel (loadable with modprobe)."""
        path = self.root / "lib" / "modules" / self.release / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path

    def sysfs(self) -> Sysfs:
        return Sysfs(self.root, release=self.release)

    def sim(self) -> KernelSim:
        return KernelSim(self.root, release=self.release)


def bind(root: Path, pci: str, driver: str) -> None:
    device = root / "sys" / "bus" / "pci" / "devices" / pci
    target = root / "sys" / "bus" / "pci" / "drivers" / driver
    (device / "driver").symlink_to(target)
    (target / pci).symlink_to(device)


class KernelSim(Sysfs):
    """A Sysfs whose writes the fake kernel acts on. `writes` lists them (path under root, text);
    `before_write`, if set, sees each one before it happens."""

    def __init__(self, root: Path, release: str | None = None):
        super().__init__(root, release=release)
        self.writes: list[tuple[str, str]] = []
        self.before_write: Callable[[Path, str], None] | None = None

    def _write(self, path: Path, text: str) -> None:
        if self.before_write is not None:
            self.before_write(path, text)
        self.writes.append((str(path.relative_to(self.root)), text))
        super()._write(path, text)
        if path.name == "driver_override":
            path.write_text(f"{text.strip() or '(null)'}\n")
        elif path.name == "unbind":
            self._unbind(text.strip(), path.resolve().parent.name)
        elif path.name == "drivers_probe":
            self._probe(text.strip())
        elif path.name == "new_id":
            raise AssertionError("niclab wrote new_id: vfio-pci would take every device of that model")

    def _unbind(self, pci: str, driver: str) -> None:
        if self.driver(pci) != driver:
            raise AssertionError(f"unbind of {pci} from {driver}, but it is on {self.driver(pci)} (ENODEV)")
        (self.sys / "bus" / "pci" / "drivers" / driver / pci).unlink()
        (self.device(pci) / "driver").unlink()
        shutil.rmtree(self.device(pci) / "net", ignore_errors=True)

    def _probe(self, pci: str) -> None:
        if self.driver(pci) is not None:
            return
        known = json.loads((self.root / STATE).read_text())[pci]
        target = self.driver_override(pci) or known["native"]
        if target is None or not self.driver_loaded(target):
            return
        bind(self.root, pci, target)
        if target == known["native"]:
            for name in known["netdevs"]:
                (self.device(pci) / "net" / name).mkdir(parents=True)
