"""The host's PCI devices as the kernel shows them in /sys and /proc, read and changed through one root.

Tests run it on a fake tree (plain opens and writes). Only three writes exist: driver_override, a driver's
unbind and drivers_probe; never new_id, which would make vfio-pci claim the host's own NICs of that model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from niclab.base.errors import NiclabError
from niclab.model.lab.modalias import is_pci_modalias
from niclab.model.lab.pciclass import PCI_ADDRESS

VFIO_PCI = "vfio-pci"
PCI_BRIDGE_CLASS = 0x0604  # class >> 8 of a PCI-to-PCI bridge
ECAP_IR = 1 << 3  # VT-d extended capability register: interrupt remapping supported


class PciReader(Protocol):
    """What the doctor's card checks read of a host's PCI devices: Sysfs on this machine. Another
    host's devices are read the same way by an object with these methods."""

    def exists(self, pci: str) -> bool: ...
    def driver(self, pci: str) -> str | None: ...
    def driver_override(self, pci: str) -> str | None: ...
    def pci_id(self, pci: str) -> str: ...
    def modalias(self, pci: str) -> str | None: ...
    def pci_class(self, pci: str) -> int: ...
    def is_bridge(self, pci: str) -> bool: ...
    def iommu_group(self, pci: str) -> int | None: ...
    def group_devices(self, group: int) -> list[str]: ...
    def netdevs(self, pci: str) -> list[str]: ...
    def blockdevs(self, pci: str) -> list[str]: ...
    def netdev_device(self, ifname: str) -> str | None: ...


class Sysfs:
    """The host's /sys and /proc under `root` ("/" on a real host)."""

    def __init__(self, root: Path = Path("/"), release: str | None = None):
        self.root = root
        self.sys = root / "sys"
        self.proc = root / "proc"
        self.release = release if release is not None else os.uname().release  # for root/lib/modules/<release>

    def writable(self) -> bool:
        """Whether /sys takes writes: not in an unprivileged container, where it is mounted read-only."""
        try:
            return not os.statvfs(self.sys).f_flag & os.ST_RDONLY
        except OSError:
            return False

    # -- reading one device -------------------------------------------------

    def device(self, pci: str) -> Path:
        return self.sys / "bus" / "pci" / "devices" / pci

    def exists(self, pci: str) -> bool:
        return self.device(pci).is_dir()

    def driver(self, pci: str) -> str | None:
        """The driver the device is bound to, or None if it is unbound."""
        return _link_name(self.device(pci) / "driver")

    def driver_override(self, pci: str) -> str | None:
        text = _read(self.device(pci) / "driver_override")
        return None if text in (None, "", "(null)") else text

    def pci_id(self, pci: str) -> str:
        """vendor:device as lspci -n prints it, e.g. "8086:100e"."""
        vendor, device = (int(_read(self.device(pci) / name) or "0", 16) for name in ("vendor", "device"))
        return f"{vendor:04x}:{device:04x}"

    def modalias(self, pci: str) -> str | None:
        """What modprobe matches the device by ("pci:v00008086d000010FBsv...bc02sc00i00"); None if unreadable
        or not of that form."""
        text = _read(self.device(pci) / "modalias")
        return text if text is not None and is_pci_modalias(text) else None

    def pci_class(self, pci: str) -> int:
        """e.g. 0x020000 for an Ethernet controller; class >> 8 == 0x0604 is a PCI bridge."""
        return int(_read(self.device(pci) / "class") or "0", 16)

    def is_bridge(self, pci: str) -> bool:
        return self.pci_class(pci) >> 8 == PCI_BRIDGE_CLASS

    def iommu_group(self, pci: str) -> int | None:
        name = _link_name(self.device(pci) / "iommu_group")
        return int(name) if name is not None else None

    def group_devices(self, group: int) -> list[str]:
        return _names(self.sys / "kernel" / "iommu_groups" / str(group) / "devices")

    def netdevs(self, pci: str) -> list[str]:
        """The network interfaces the device's driver made (none when unbound or on vfio-pci).

        Most drivers put them in the device's net/; some under a child device (virtio's virtioN/net/),
        so /sys/class/net is searched too, for interfaces whose device lies under this one.
        """
        found = _names(self.device(pci) / "net")
        class_net = self.sys / "class" / "net"
        for name in _names(class_net):
            link = class_net / name / "device"
            if not link.is_symlink():
                continue  # a virtual interface: no device
            if pci in Path(os.path.realpath(link)).parts and name not in found:
                found.append(name)
        return found

    def blockdevs(self, pci: str) -> list[str]:
        """The block devices (disks: "sda", "nvme0n1") whose device this one is, whatever its driver.

        A disk's device in /sys/class/block lies under its controller (ata1/host0/…, nvme/nvme0, virtio1);
        the nearest PCI device above it is the controller, so a bridge further up holds no disk of its own.
        Partitions and virtual disks (loop, dm, zram) have no device and are left out.
        """
        class_block = self.sys / "class" / "block"
        return [name for name in _names(class_block) if _nearest_pci(class_block / name / "device") == pci]

    def netdev_device(self, ifname: str) -> str | None:
        """The PCI device an interface belongs to (the nearest one above it), or None for a virtual one."""
        return _nearest_pci(self.sys / "class" / "net" / ifname / "device")

    # -- the host as a whole -----------------------------------------------

    def iommu_on(self) -> bool:
        return bool(_names(self.sys / "kernel" / "iommu_groups") or _names(self.sys / "class" / "iommu"))

    def interrupt_remapping(self) -> bool | None:
        """Whether the IOMMU remaps interrupts; None when it cannot tell (no IOMMU unit listed).

        The kernel enables Intel interrupt remapping only if every DMAR unit supports
        it (ECAP bit 3), so a single unit without it means False. AMD-Vi always has it.
        """
        units = _names(self.sys / "class" / "iommu")
        if any(name.startswith("ivhd") for name in units):
            return True
        ecaps = [_read(self.sys / "class" / "iommu" / name / "intel-iommu" / "ecap") for name in units]
        values = [int(text, 16) for text in ecaps if text]
        return all(value & ECAP_IR for value in values) if values else None

    def unsafe_interrupts_allowed(self) -> bool:
        param = self.sys / "module" / "vfio_iommu_type1" / "parameters" / "allow_unsafe_interrupts"
        return _read(param) in ("Y", "1")

    def cmdline(self) -> str:
        return _read(self.proc / "cmdline") or ""

    def cpu_vendor(self) -> str | None:
        """The CPU vendor from /proc/cpuinfo: "intel", "amd", or None if it does not say."""
        for line in (_read(self.proc / "cpuinfo") or "").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id":
                return {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(value.strip())
        return None

    def driver_loaded(self, name: str) -> bool:
        return (self.sys / "bus" / "pci" / "drivers" / name).is_dir()

    def vfio_module_present(self) -> bool:
        """A vfio-pci module file for the running kernel (loadable with modprobe)."""
        modules = self.root / "lib" / "modules" / self.release
        return modules.is_dir() and any(modules.rglob("vfio-pci.ko*"))

    def vfio_available(self) -> bool:
        return self.driver_loaded(VFIO_PCI) or (self.sys / "module" / "vfio_pci").is_dir() or self.vfio_module_present()

    # -- changing a device ---------------------------------------------------

    def set_driver_override(self, pci: str, driver: str | None) -> None:
        """Make drivers_probe bind the device only to `driver`; None clears it (the kernel takes "\\n")."""
        self._write(self.device(pci) / "driver_override", driver if driver is not None else "\n")

    def unbind(self, pci: str) -> None:
        if self.driver(pci) is not None:
            self._write(self.device(pci) / "driver" / "unbind", pci)

    def drivers_probe(self, pci: str) -> None:
        self._write(self.sys / "bus" / "pci" / "drivers_probe", pci)

    def _write(self, path: Path, text: str) -> None:
        try:
            with open(path, "w") as handle:
                handle.write(text)
        except PermissionError:
            raise NiclabError(
                f"cannot write {text.strip() or 'a newline'!r} to {path}: changing a PCI device's driver "
                "needs root; run niclab lab as root (sudo)"
            ) from None
        except OSError as exc:
            raise NiclabError(
                f"writing {text.strip() or 'a newline'!r} to {path} failed: {exc.strerror} "
                "(this needs root; `dmesg` may say more)"
            ) from None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _link_name(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def _nearest_pci(link: Path) -> str | None:
    """The last PCI address on the path a class device's `device` link resolves to; None without one."""
    if not link.is_symlink():
        return None
    parts = Path(os.path.realpath(link)).parts
    return next((part for part in reversed(parts) if PCI_ADDRESS.fullmatch(part)), None)


def _names(directory: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in directory.iterdir())
    except OSError:
        return []
