"""Another lab host's PCI devices as its libvirtd shows them (`virsh -c URI nodedev-dumpxml pci_…`).

`LibvirtPci(conn)` is the doctor's PciReader for such a host: each PCI device's class, IDs, IOMMU group and
driver, and through `<parent>` the interfaces and disks under it, as in sysfs. The XML is another machine's,
read as untrusted: a missing or odd field is unknown, never a crash, and what is unknown is refused (no
class: not a network controller). docs/lab.md, "Reading the doctor".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET

from niclab.base.errors import NiclabError
from niclab.plumbing.lab.hostnet import UnknownNet
from niclab.plumbing.lab.sysfs import PCI_BRIDGE_CLASS
from niclab.plumbing.libvirt_conn import open_uri

#: Opens a libvirt connection to a URI (libvirt_conn.open_uri; tests give libvirt's test driver instead).
Connect = Callable[[str], Any]

MAX_XML = 1 << 20  # one device's description; libvirt's are a few KiB
MAX_DEPTH = 64  # parents followed from a device up to its PCI device
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,63}")  # an interface, disk or node device name
_DRIVER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")  # a module name, as sysfs shows it
_NUMBER = re.compile(r"0x[0-9a-fA-F]{1,8}|[0-9]{1,10}")
_ADDRESS = ("domain", "bus", "slot", "function")


@dataclass(frozen=True)
class NodeDevice:
    """What the doctor needs of one node device; None where the XML does not say (or says something odd)."""

    name: str
    parent: str | None = None
    pci: str | None = None  # "0000:03:00.0", for a device with a pci capability
    pci_class: int | None = None
    vendor: int | None = None
    product: int | None = None
    iommu_group: int | None = None
    group_members: tuple[str, ...] = ()
    driver: str | None = None
    interface: str | None = None  # a net device's interface name
    disk: str | None = None  # a storage device's block device, "nvme0n1"
    scsi_disk: bool = False  # a scsi device of type disk (its storage device, if listed, names the disk)


def parse_device(text: str) -> NodeDevice | None:
    """One `<device>` description, or None when it is not one (too long, not XML, no plain name)."""
    if not isinstance(text, str) or len(text) > MAX_XML or "<!" in text:
        return None  # libvirt writes no DOCTYPE, ENTITY or CDATA; a text that does is not libvirt's
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return None
    name = _plain(root.findtext("name"))
    if root.tag != "device" or name is None:
        return None
    driver = _text(root.findtext("driver/name"))
    fields: dict[str, Any] = {"driver": driver if driver and _DRIVER.fullmatch(driver) else None}
    for cap in root.findall("capability"):
        kind = cap.get("type") or ""
        if kind == "pci":
            fields.update(_pci_fields(cap))
        elif kind == "net":
            fields["interface"] = _plain(cap.findtext("interface"))
        elif kind == "storage":
            block = _text(cap.findtext("block")) or ""
            fields["disk"] = _plain(block.rpartition("/")[2]) or name
        elif kind == "scsi":
            fields["scsi_disk"] = _text(cap.findtext("type")) == "disk"
    return NodeDevice(name, _plain(root.findtext("parent")), **fields)


def _pci_fields(cap: ET.Element) -> dict[str, Any]:
    group = cap.find("iommuGroup")
    members = [] if group is None else group.findall("address")
    return {
        "pci": _address([_number(cap.findtext(part)) for part in _ADDRESS]),
        "pci_class": _number(cap.findtext("class"), 0xFFFFFF),
        "vendor": _id(cap.find("vendor")),
        "product": _id(cap.find("product")),
        "iommu_group": None if group is None else _number(group.get("number")),
        "group_members": tuple(
            address for member in members if (address := _address([_number(member.get(p)) for p in _ADDRESS]))
        ),
    }


def _id(element: ET.Element | None) -> int | None:
    return None if element is None else _number(element.get("id"), 0xFFFF)


def _address(parts: list[int | None]) -> str | None:
    """domain:bus:slot.function as sysfs names the device, or None if a part is missing or out of range."""
    domain, bus, slot, function = parts
    if domain is None or bus is None or slot is None or function is None:
        return None
    if domain > 0xFFFF or bus > 0xFF or slot > 0x1F or function > 7:
        return None
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function}"


def _text(value: str | None) -> str | None:
    return value.strip() if value is not None else None


def _plain(value: str | None) -> str | None:
    text = _text(value)
    return text if text is not None and _PLAIN.fullmatch(text) else None


def _number(value: str | None, limit: int = 0xFFFFFFFF) -> int | None:
    """A decimal or 0x-hex number as libvirt writes them; None when absent, odd or above `limit`."""
    text = _text(value)
    if text is None or not _NUMBER.fullmatch(text):
        return None
    number = int(text, 16) if text[:2].lower() == "0x" else int(text)
    return number if number <= limit else None


def describe_all(conn: Any) -> list[str]:
    """Every node device's XML description on the connection (a device gone meanwhile is left out)."""
    try:
        devices = conn.listAllDevices(0)
    except Exception as exc:  # libvirtError: the connection broke, or the host has no node device driver
        raise NiclabError(f"cannot list its node devices: {error_message(exc)}") from None
    texts = []
    for device in devices:
        try:
            texts.append(device.XMLDesc(0))
        except Exception:  # removed between the listing and now
            continue
    return texts


def error_message(exc: Exception) -> str:
    """A libvirt error's message on one line, printable: the other host wrote it."""
    getter = getattr(exc, "get_error_message", None)
    text = str((getter() if callable(getter) else None) or exc) or type(exc).__name__
    line = " ".join(text.split())
    return "".join(ch if ch.isprintable() else "?" for ch in line)[:500]


class LibvirtPci:
    """A host's PCI devices as its libvirtd's node devices show them: the doctor's PciReader for that host."""

    def __init__(self, conn: Any):
        self._index(parse_device(text) for text in describe_all(conn))

    @classmethod
    def from_xml(cls, texts: Iterable[str]) -> LibvirtPci:
        """From descriptions already read (`virsh nodedev-dumpxml` output, one per device)."""
        reader = cls.__new__(cls)
        reader._index(parse_device(text) for text in texts)
        return reader

    def _index(self, devices: Iterable[NodeDevice | None]) -> None:
        self._by_name: dict[str, NodeDevice] = {}
        self._by_pci: dict[str, NodeDevice] = {}
        for device in devices:
            if device is None or device.name in self._by_name:
                continue  # unreadable, or a second description of one name: the first stands
            self._by_name[device.name] = device
            if device.pci is not None:
                self._by_pci.setdefault(device.pci, device)
        self._above = {name: self._nearest_pci(device) for name, device in self._by_name.items()}
        self._with_storage = {d.parent for d in self._by_name.values() if d.disk is not None and d.parent}

    def _nearest_pci(self, device: NodeDevice) -> str | None:
        """The address of the nearest PCI device above `device` (its parent, its parent's, …); None without."""
        seen = {device.name}
        current = device
        for _ in range(MAX_DEPTH):
            if current.parent is None or current.parent in seen or (up := self._by_name.get(current.parent)) is None:
                return None
            if up.pci is not None:
                return up.pci
            seen.add(up.name)
            current = up
        return None

    def _device(self, pci: str) -> NodeDevice | None:
        return self._by_pci.get(pci.lower())

    def _under(self, pci: str) -> list[NodeDevice]:
        return [device for name, device in self._by_name.items() if self._above[name] == pci.lower()]

    # -- the PciReader protocol ------------------------------------------------

    def exists(self, pci: str) -> bool:
        return self._device(pci) is not None

    def driver(self, pci: str) -> str | None:
        device = self._device(pci)
        return device.driver if device is not None else None

    def driver_override(self, pci: str) -> str | None:
        return None  # not in libvirt's node device XML

    def pci_id(self, pci: str) -> str:
        """vendor:device as lspci -n prints it; 0000 for what libvirt does not say (as sysfs reads a missing file)."""
        device = self._device(pci)
        vendor, product = (device.vendor, device.product) if device is not None else (None, None)
        return f"{vendor or 0:04x}:{product or 0:04x}"

    def modalias(self, pci: str) -> str | None:
        """libvirt's node devices give the IDs, not the modalias: the doctor matches by vendor:device."""
        return None

    def pci_class(self, pci: str) -> int:
        device = self._device(pci)
        return (device.pci_class or 0) if device is not None else 0

    def is_bridge(self, pci: str) -> bool:
        return self.pci_class(pci) >> 8 == PCI_BRIDGE_CLASS

    def iommu_group(self, pci: str) -> int | None:
        device = self._device(pci)
        return device.iommu_group if device is not None else None

    def group_devices(self, group: int) -> list[str]:
        """The group's devices: those that say they are in it, and those each of them lists in it."""
        found: set[str] = set()
        for device in self._by_pci.values():
            if device.iommu_group == group and device.pci is not None:
                found.add(device.pci)
                found.update(device.group_members)
        return sorted(found)

    def netdevs(self, pci: str) -> list[str]:
        return sorted({device.interface for device in self._under(pci) if device.interface is not None})

    def blockdevs(self, pci: str) -> list[str]:
        """Its disks: storage devices under it, and scsi disks under it that have no storage device listed."""
        found = {
            device.disk or device.name
            for device in self._under(pci)
            if device.disk is not None or (device.scsi_disk and device.name not in self._with_storage)
        }
        return sorted(found)

    def netdev_device(self, ifname: str) -> str | None:
        return next((self._above[d.name] for d in self._by_name.values() if d.interface == ifname), None)


def remote_readers(host: str, uri: str, connect: Connect | None = None) -> tuple[LibvirtPci, UnknownNet]:
    """The doctor's readers for lab host `host`, reached at `uri`: its node devices, read now (the connection
    is closed again), and its networking, unknown. A host that does not answer is one NiclabError naming it."""
    try:
        conn = (connect or open_uri)(uri)
    except Exception as exc:  # open_uri's NiclabError, or a libvirtError from another `connect`
        raise NiclabError(f"lab host {host}: {error_message(exc)}") from None
    try:
        return LibvirtPci(conn), UnknownNet(host)
    except NiclabError as exc:
        raise NiclabError(f"lab host {host} ({uri}): {exc}") from None
    finally:
        try:
            conn.close()
        except Exception:  # the connection broke: nothing left to close
            pass
