"""Another lab host's PCI devices and host facts, read over ssh in one command and parsed as untrusted.

`SNAPSHOT` (POSIX sh and coreutils) prints, one fact a line, what Sysfs reads here: each PCI device's class,
IDs, driver, IOMMU group, modalias and interfaces, where interfaces and disks lie, the IOMMU units and the
doctor's host facts. `HostSnapshot` answers as Sysfs does from it; a line not checked whole refuses the
snapshot (docs/architecture.md, "Another host's facts are parsed, never rebuilt as files").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from niclab.base.errors import NiclabError
from niclab.model.lab.modalias import PCI_MODALIAS
from niclab.model.lab.pciclass import PCI_ADDRESS
from niclab.plumbing.lab.remote import HostShell
from niclab.plumbing.lab.sysfs import ECAP_IR, PCI_BRIDGE_CLASS, VFIO_PCI
from niclab.plumbing.lab.vfio import MODULE_NAME

FORMAT = "niclab-snapshot 1"
SNAPSHOT_TIMEOUT_S = 60.0
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,63}")  # an interface, disk or IOMMU unit; never "..", no /
_HEX = re.compile(r"0x[0-9a-fA-F]{1,16}")
_NUMBER = re.compile(r"[0-9]{1,10}")
_PATH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+-]{0,127}")
_MODALIAS = PCI_MODALIAS  # exactly what the kernel writes: an odd one would fail the guest-driver lookup
_RELEASE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+~-]{0,127}")
_VERSION = re.compile(r"[0-9][0-9.]{0,31}")
_TEXT_LIMIT = 4096  # the kernel command line, at most

# $1 is the root the host's /sys, /proc and /lib are read under ("" on a real host; a fake tree in tests).
# Every value is printed on its own line; a value with a tab or a newline of its own makes a line the parser
# refuses, which is what such a value deserves.
SNAPSHOT = r"""
r=$1
LC_ALL=C
export LC_ALL
one() { head -c 256 "$1" 2>/dev/null | head -n 1; }
link() { l=$(readlink "$1" 2>/dev/null) && printf '%s' "${l##*/}"; }
where() { [ -L "$1" ] || return 1; p=$(readlink -f "$1" 2>/dev/null) || return 1; printf '%s' "${p#"$r"}"; }
echo 'niclab-snapshot 1'
printf 'release\t%s\n' "$(uname -r)"
for d in "$r"/sys/bus/pci/devices/*; do
  [ -e "$d" ] || continue
  a=${d##*/}
  printf 'pci\t%s\t%s\t%s\t%s\n' "$a" "$(one "$d/class")" "$(one "$d/vendor")" "$(one "$d/device")"
  [ -L "$d/driver" ] && printf 'driver\t%s\t%s\n' "$a" "$(link "$d/driver")"
  [ -f "$d/driver_override" ] && printf 'override\t%s\t%s\n' "$a" "$(one "$d/driver_override")"
  [ -L "$d/iommu_group" ] && printf 'group\t%s\t%s\n' "$a" "$(link "$d/iommu_group")"
  [ -f "$d/modalias" ] && printf 'modalias\t%s\t%s\n' "$a" "$(one "$d/modalias")"
  for n in "$d"/net/*; do [ -e "$n" ] && printf 'net\t%s\t%s\n' "$a" "${n##*/}"; done
done
for g in "$r"/sys/kernel/iommu_groups/*; do
  [ -d "$g" ] || continue
  for m in "$g"/devices/*; do [ -e "$m" ] && printf 'member\t%s\t%s\n' "${g##*/}" "${m##*/}"; done
  printf 'iommugroup\t%s\n' "${g##*/}"
done
for n in "$r"/sys/class/net/*; do
  [ -e "$n" ] || continue
  if p=$(where "$n/device"); then printf 'netdev\t%s\t%s\n' "${n##*/}" "$p"; fi
done
for b in "$r"/sys/class/block/*; do
  [ -e "$b" ] || continue
  if p=$(where "$b/device"); then printf 'blockdev\t%s\t%s\n' "${b##*/}" "$p"; fi
done
for u in "$r"/sys/class/iommu/*; do
  [ -e "$u" ] || continue
  printf 'iommu\t%s\n' "${u##*/}"
  [ -f "$u/intel-iommu/ecap" ] && printf 'ecap\t%s\t0x%s\n' "${u##*/}" "$(one "$u/intel-iommu/ecap")"
done
printf 'unsafe\t%s\n' "$(one "$r/sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts")"
printf 'cmdline\t%s\n' "$(head -c 4096 "$r/proc/cmdline" 2>/dev/null | tr '\t\n' '  ')"
v=$(grep -m 1 '^vendor_id' "$r/proc/cpuinfo" 2>/dev/null | sed 's/.*: *//')
printf 'cpu\t%s\n' "$v"
[ -d "$r/sys/bus/pci/drivers/vfio-pci" ] && printf 'vfio\tloaded\n'
[ -d "$r/sys/module/vfio_pci" ] && printf 'vfio\tmodule\n'
m=$r/lib/modules/$(uname -r)
[ -d "$m" ] && [ -n "$(find "$m" -name 'vfio-pci.ko*' 2>/dev/null | head -n 1)" ] && printf 'vfio\tfile\n'
[ -c "$r/dev/kvm" ] && printf 'kvm\tyes\n'
command -v virsh >/dev/null 2>&1 && printf 'libvirt\t%s\n' "$(virsh --version 2>/dev/null | head -n 1)"
printf 'memlock\t%s\n' "$(ulimit -l 2>/dev/null)"
echo 'end'
"""


@dataclass
class _Device:
    pci_class: int = 0
    vendor: int = 0
    device: int = 0
    driver: str | None = None
    override: str | None = None
    group: int | None = None
    modalias: str | None = None
    net: list[str] = field(default_factory=list)


class SnapshotError(NiclabError):
    pass


class HostSnapshot:
    """A lab host's PCI devices and facts, parsed from `SNAPSHOT`'s output: the doctor's PciReader and host
    facts for that host (the same methods as Sysfs)."""

    def __init__(self, host: str, text: str):
        self.host = host
        self._devices: dict[str, _Device] = {}
        self._groups: dict[int, list[str]] = {}
        self._netdevs: dict[str, str] = {}  # interface -> the path its device link resolves to
        self._blockdevs: dict[str, str] = {}
        self._units: dict[str, None] = {}  # the IOMMU units, in order (a dict: an ecap line finds its unit at once)
        self._ecaps: dict[str, int] = {}
        self._vfio: set[str] = set()
        self.release = ""
        self._cmdline = ""
        self._cpu: str | None = None
        self._unsafe = False
        self.kvm = False
        self.libvirt: str | None = None
        self.memlock_kib: int | None = None  # None: unlimited, or not said
        self._parse(text)

    # -- parsing -----------------------------------------------------------------------------------

    def _parse(self, text: str) -> None:
        lines = text.split("\n")
        if not lines or lines[0] != FORMAT:
            raise self._refused(1, "it does not start with the snapshot's header")
        if "end" not in lines:
            raise self._refused(len(lines), "it ends early (no end line)")
        for number, line in enumerate(lines[1 : lines.index("end")], start=2):
            tag, *values = line.split("\t")
            handler = _HANDLERS.get(tag)
            if handler is None or not handler(self, values):
                raise self._refused(number, f"{_shown(line)} is not a fact niclab reads")

    def _refused(self, number: int, why: str) -> SnapshotError:
        return SnapshotError(
            f"lab host {self.host}: its sysfs snapshot is refused at line {number}: {why}; "
            "a host whose /sys cannot be read plainly is not passed cards from (check the host's kernel and /sys)"
        )

    def _pci(self, values: list[str]) -> bool:
        if len(values) != 4 or not PCI_ADDRESS.fullmatch(values[0]) or values[0] in self._devices:
            return False
        parsed = [_hex(value, limit) for value, limit in zip(values[1:], (0xFFFFFF, 0xFFFF, 0xFFFF), strict=True)]
        if None in parsed:
            return False
        code, vendor, device = (value or 0 for value in parsed)
        self._devices[values[0]] = _Device(code, vendor, device)
        return True

    def _field(self, values: list[str], pattern: re.Pattern[str], name: str) -> bool:
        if len(values) != 2 or (device := self._devices.get(values[0])) is None:
            return False
        if not pattern.fullmatch(values[1]):
            return name == "override" and values[1] == "(null)"  # no override, as the kernel writes it
        setattr(device, name, values[1])
        return True

    def _group(self, values: list[str]) -> bool:
        if len(values) != 2 or (device := self._devices.get(values[0])) is None or not _NUMBER.fullmatch(values[1]):
            return False
        device.group = int(values[1])
        return True

    def _net(self, values: list[str]) -> bool:
        if len(values) != 2 or (device := self._devices.get(values[0])) is None or not _plain(values[1]):
            return False
        device.net.append(values[1])
        return True

    def _member(self, values: list[str]) -> bool:
        if len(values) != 2 or not _NUMBER.fullmatch(values[0]) or not PCI_ADDRESS.fullmatch(values[1]):
            return False
        self._groups.setdefault(int(values[0]), []).append(values[1])
        return True

    def _iommugroup(self, values: list[str]) -> bool:
        if len(values) != 1 or not _NUMBER.fullmatch(values[0]):
            return False
        self._groups.setdefault(int(values[0]), [])
        return True

    def _class_device(self, values: list[str], into: dict[str, str]) -> bool:
        if len(values) != 2 or not _plain(values[0]) or not _device_path(values[1]):
            return False
        into[values[0]] = values[1]
        return True

    def _iommu(self, values: list[str]) -> bool:
        if len(values) != 1 or not _plain(values[0]):
            return False
        self._units[values[0]] = None
        return True

    def _ecap(self, values: list[str]) -> bool:
        if len(values) != 2 or values[0] not in self._units or (value := _hex(values[1], 1 << 64)) is None:
            return False
        self._ecaps[values[0]] = value
        return True

    def _fact(self, tag: str, values: list[str]) -> bool:
        if len(values) != 1:
            return False
        value = values[0]
        if tag == "release" and _RELEASE.fullmatch(value):
            self.release = value
        elif tag == "unsafe" and value in ("", "Y", "N", "1", "0"):
            self._unsafe = value in ("Y", "1")
        elif tag == "cmdline" and len(value) <= _TEXT_LIMIT and value.isprintable():
            self._cmdline = value.strip()
        elif tag == "cpu" and (value == "" or _NAME.fullmatch(value)):
            self._cpu = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(value)
        elif tag == "vfio" and value in ("loaded", "module", "file"):
            self._vfio.add(value)
        elif tag == "kvm" and value == "yes":
            self.kvm = True
        elif tag == "libvirt" and (value == "" or _VERSION.fullmatch(value)):
            self.libvirt = value or None
        elif tag == "memlock" and (value in ("", "unlimited") or _NUMBER.fullmatch(value)):
            self.memlock_kib = int(value) if _NUMBER.fullmatch(value) else None
        else:
            return False
        return True

    # -- the PciReader protocol ----------------------------------------------------------------------

    def exists(self, pci: str) -> bool:
        return pci in self._devices

    def _device(self, pci: str) -> _Device:
        return self._devices.get(pci) or _Device()

    def driver(self, pci: str) -> str | None:
        return self._device(pci).driver

    def driver_override(self, pci: str) -> str | None:
        return self._device(pci).override

    def pci_id(self, pci: str) -> str:
        device = self._device(pci)
        return f"{device.vendor:04x}:{device.device:04x}"

    def pci_class(self, pci: str) -> int:
        return self._device(pci).pci_class

    def is_bridge(self, pci: str) -> bool:
        return self.pci_class(pci) >> 8 == PCI_BRIDGE_CLASS

    def iommu_group(self, pci: str) -> int | None:
        return self._device(pci).group

    def group_devices(self, group: int) -> list[str]:
        return sorted(self._groups.get(group, []))

    def modalias(self, pci: str) -> str | None:
        """The device's modalias ("pci:v00008086d0000100Esv…"): what the guest kernel's modules.alias matches."""
        return self._device(pci).modalias

    def netdevs(self, pci: str) -> list[str]:
        found = dict.fromkeys(self._device(pci).net)  # ordered, and each name looked up at once
        for name, path in sorted(self._netdevs.items()):
            if pci in path.split("/"):
                found.setdefault(name)
        return list(found)

    def blockdevs(self, pci: str) -> list[str]:
        return sorted(name for name, path in self._blockdevs.items() if _nearest_pci(path) == pci)

    def netdev_device(self, ifname: str) -> str | None:
        path = self._netdevs.get(ifname)
        return _nearest_pci(path) if path is not None else None

    # -- the host as a whole (Sysfs's host facts) ----------------------------------------------------

    def iommu_on(self) -> bool:
        return bool(self._groups or self._units)

    def interrupt_remapping(self) -> bool | None:
        if any(name.startswith("ivhd") for name in self._units):
            return True
        values = list(self._ecaps.values())
        return all(value & ECAP_IR for value in values) if values else None

    def unsafe_interrupts_allowed(self) -> bool:
        return self._unsafe

    def cmdline(self) -> str:
        return self._cmdline

    def cpu_vendor(self) -> str | None:
        return self._cpu

    def driver_loaded(self, name: str) -> bool:
        return name == VFIO_PCI and "loaded" in self._vfio

    def vfio_available(self) -> bool:
        return bool(self._vfio)


_FACTS = ("release", "unsafe", "cmdline", "cpu", "vfio", "kvm", "libvirt", "memlock")


def _fact(tag: str, self: HostSnapshot, values: list[str]) -> bool:
    return self._fact(tag, values)


_HANDLERS: dict[str, Callable[[HostSnapshot, list[str]], bool]] = {
    "pci": HostSnapshot._pci,
    "driver": lambda self, values: self._field(values, MODULE_NAME, "driver"),
    "override": lambda self, values: self._field(values, MODULE_NAME, "override"),
    "modalias": lambda self, values: self._field(values, _MODALIAS, "modalias"),
    "group": HostSnapshot._group,
    "net": HostSnapshot._net,
    "member": HostSnapshot._member,
    "iommugroup": HostSnapshot._iommugroup,
    "netdev": lambda self, values: self._class_device(values, self._netdevs),
    "blockdev": lambda self, values: self._class_device(values, self._blockdevs),
    "iommu": HostSnapshot._iommu,
    "ecap": HostSnapshot._ecap,
    **{tag: functools.partial(_fact, tag) for tag in _FACTS},
}


def _hex(text: str, limit: int) -> int | None:
    if not _HEX.fullmatch(text):
        return None
    value = int(text, 16)
    return value if value <= limit else None


def _plain(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and name not in (".", "..")


def _device_path(path: str) -> bool:
    """A resolved device path inside the host's /sys (/sys/devices/… on Linux), of plain components (no ..)."""
    parts = path.split("/")
    return (
        len(path) <= 1024
        and parts[:2] == ["", "sys"]
        and len(parts) > 2
        and all(_PATH_PART.fullmatch(part) and part not in (".", "..") for part in parts[2:])
    )


def _nearest_pci(path: str) -> str | None:
    return next((part for part in reversed(path.split("/")) if PCI_ADDRESS.fullmatch(part)), None)


def _shown(line: str) -> str:
    text = line if line.isprintable() else repr(line)
    return text if len(text) <= 80 else text[:77] + "..."


def read_snapshot(shell: HostShell) -> HostSnapshot:
    """One snapshot of the host `shell` reaches."""
    result = shell.run(SNAPSHOT, shell.root, timeout=SNAPSHOT_TIMEOUT_S, what="reading its sysfs")
    if result.returncode != 0:
        raise NiclabError(
            f"lab host {shell.name}: reading its sysfs failed: {result.stderr or f'status {result.returncode}'}"
        )
    try:
        text = result.stdout.decode()
    except UnicodeDecodeError:
        raise SnapshotError(f"lab host {shell.name}: its sysfs snapshot is not text; refused") from None
    return HostSnapshot(shell.name, text)
