"""Which kernel module drives a PCI device: its modalias matched against modules.alias, as modprobe does.

Where only the PCI ID (and maybe the class) is known, the unknown fields match any pattern, so the answer
holds every module that could bind such a device; modules.builtin.modinfo counts too (docs/lab.md, "The lab
image").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

PCI_FIELDS = ("v", "d", "sv", "sd", "bc", "sc", "i")
_PCI_ALIAS = re.compile(r"pci:v(.*?)d(.*?)sv(.*?)sd(.*?)bc(.*?)sc(.*?)i(.*)")
_HEX8, _HEX2 = "[0-9A-F]{8}", "[0-9A-F]{2}"
PCI_MODALIAS = re.compile(f"pci:v{_HEX8}d{_HEX8}sv{_HEX8}sd{_HEX8}bc{_HEX2}sc{_HEX2}i{_HEX2}")
_PCI_ID = re.compile(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{4})")

NETWORK_CLASS = 0x020000  # an Ethernet controller: what a card named by its PCI ID alone is matched as


@dataclass(frozen=True)
class Alias:
    pattern: str  # the glob, e.g. pci:v00008086d000010FBsv*sd*bc*sc*i*
    module: str  # as modprobe names it (dashes as underscores)
    builtin: bool = False  # built into the kernel, not a loadable module


@dataclass(frozen=True)
class PciDevice:
    """A PCI device as far as it is known: its modalias string, or its IDs with the rest unknown."""

    modalias: str | None = None
    vendor: int | None = None
    device: int | None = None
    pci_class: int | None = None  # 0x020000: base class, subclass, interface

    @classmethod
    def parse(cls, text: str, pci_class: int | None = None) -> PciDevice:
        """A modalias ("pci:v...") or a vendor:device ID ("8086:10fb"), with the PCI class if known."""
        text = text.strip()
        if text.startswith("pci:"):
            if not is_pci_modalias(text):
                raise ValueError(f"{text!r} is not a PCI modalias")
            return cls(modalias=text)
        if (found := _PCI_ID.fullmatch(text)) is None:
            raise ValueError(f"{text!r} is neither a PCI ID (8086:10fb) nor a modalias (pci:v...)")
        return cls(vendor=int(found[1], 16), device=int(found[2], 16), pci_class=pci_class)

    def fields(self) -> dict[str, str | None]:
        """Each field as a modalias writes it (upper-case hex), None where unknown."""
        if self.modalias is not None:
            found = _PCI_ALIAS.fullmatch(self.modalias)
            assert found is not None
            return dict(zip(PCI_FIELDS, found.groups(), strict=True))
        code = self.pci_class
        return {
            "v": None if self.vendor is None else f"{self.vendor:08X}",
            "d": None if self.device is None else f"{self.device:08X}",
            "sv": None,
            "sd": None,
            "bc": None if code is None else f"{code >> 16 & 0xFF:02X}",
            "sc": None if code is None else f"{code >> 8 & 0xFF:02X}",
            "i": None if code is None else f"{code & 0xFF:02X}",
        }


def is_pci_modalias(text: str) -> bool:
    """A device's PCI modalias: pci:v, d, sv, sd of 8 hex digits, bc, sc, i of 2, and nothing else."""
    return PCI_MODALIAS.fullmatch(text) is not None


def parse_aliases(text: str) -> list[Alias]:
    """modules.alias: `alias PATTERN MODULE` lines; comments and other lines are skipped."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "alias":
            out.append(Alias(words[1], words[2].replace("-", "_")))
    return out


def parse_builtin_aliases(modinfo: bytes) -> list[Alias]:
    """modules.builtin.modinfo: NUL-separated `module.key=value`; its `alias` keys."""
    out = []
    for item in modinfo.decode(errors="replace").split("\0"):
        module, dot, rest = item.partition(".")
        if dot and rest.startswith("alias="):
            out.append(Alias(rest[len("alias=") :], module.replace("-", "_"), builtin=True))
    return out


def _matches(device: PciDevice, pattern: str) -> bool:
    if device.modalias is not None:
        return fnmatchcase(device.modalias, pattern)
    found = _PCI_ALIAS.fullmatch(pattern)
    if found is None:
        return False
    wanted = dict(zip(PCI_FIELDS, found.groups(), strict=True))
    if wanted["v"] == wanted["d"] == "*" and device.pci_class is None:
        return False  # an alias by class alone (every USB host controller) says nothing of a device of unknown class
    return all(value is None or fnmatchcase(value, wanted[key]) for key, value in device.fields().items())


def drivers_for(device: PciDevice, aliases: list[Alias]) -> list[Alias]:
    """The modules whose aliases match the device, as modprobe would load them (first match of each, in the
    table's order; a module built in comes first: it has bound the device before any module loads)."""
    chosen: dict[str, Alias] = {}
    for alias in aliases:
        if alias.pattern.startswith("pci:") and alias.module not in chosen and _matches(device, alias.pattern):
            chosen[alias.module] = alias
    return sorted(chosen.values(), key=lambda a: not a.builtin)
