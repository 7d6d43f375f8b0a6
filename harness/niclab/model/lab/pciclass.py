"""PCI class codes in words, and which of them lab mode may pass through.

Network controllers (base class 0x02) only, or the class an inventory model's `allow_class:` names, never one
the host runs on (`NEVER`): docs/architecture.md, "Trust", and docs/lab.md.

    describe(0x010802)  -> "mass storage controller: NVMe"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A PCI function's address, domain:bus:slot.function, as sysfs names devices (lowercase); matched whole.
PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")

NETWORK = 0x02
MASS_STORAGE = 0x01
DISPLAY = 0x03
BRIDGE = 0x06

_BASES = {
    0x00: "unclassified device",
    0x01: "mass storage controller",
    0x02: "network controller",
    0x03: "display controller",
    0x04: "multimedia controller",
    0x05: "memory controller",
    0x06: "bridge",
    0x07: "communication controller",
    0x08: "generic system peripheral",
    0x09: "input device controller",
    0x0A: "docking station",
    0x0B: "processor",
    0x0C: "serial bus controller",
    0x0D: "wireless controller",
    0x0E: "intelligent controller",
    0x0F: "satellite communications controller",
    0x10: "encryption controller",
    0x11: "signal processing controller",
    0x12: "processing accelerator",
    0x13: "non-essential instrumentation",
    0x40: "coprocessor",
    0xFF: "unassigned class",
}

# (base, subclass) -> name; the PCI code and ID assignment specification's common ones.
_SUBCLASSES = {
    (0x00, 0x01): "VGA-compatible",
    (0x01, 0x00): "SCSI",
    (0x01, 0x01): "IDE",
    (0x01, 0x02): "floppy disk",
    (0x01, 0x04): "RAID",
    (0x01, 0x05): "ATA",
    (0x01, 0x06): "SATA",
    (0x01, 0x07): "SAS",
    (0x01, 0x08): "non-volatile memory",
    (0x01, 0x09): "UFS",
    (0x02, 0x00): "Ethernet",
    (0x02, 0x01): "Token Ring",
    (0x02, 0x02): "FDDI",
    (0x02, 0x03): "ATM",
    (0x02, 0x04): "ISDN",
    (0x02, 0x07): "InfiniBand",
    (0x02, 0x08): "fabric",
    (0x03, 0x00): "VGA",
    (0x03, 0x01): "XGA",
    (0x03, 0x02): "3D",
    (0x04, 0x00): "video",
    (0x04, 0x01): "audio",
    (0x04, 0x03): "audio device",
    (0x05, 0x00): "RAM",
    (0x05, 0x01): "flash",
    (0x05, 0x02): "CXL",
    (0x06, 0x00): "host bridge",
    (0x06, 0x01): "ISA bridge",
    (0x06, 0x04): "PCI bridge",
    (0x06, 0x09): "semi-transparent PCI bridge",
    (0x07, 0x00): "serial",
    (0x07, 0x01): "parallel",
    (0x07, 0x03): "modem",
    (0x08, 0x05): "SD host",
    (0x08, 0x06): "IOMMU",
    (0x0C, 0x00): "FireWire",
    (0x0C, 0x03): "USB",
    (0x0C, 0x04): "Fibre Channel",
    (0x0C, 0x05): "SMBus",
    (0x0C, 0x06): "InfiniBand",
    (0x0C, 0x07): "IPMI",
    (0x0C, 0x09): "CAN bus",
    (0x0D, 0x11): "Bluetooth",
    (0x0D, 0x80): "wireless",
}

# (base, subclass, programming interface) -> name, where the interface says what the device is.
_INTERFACES = {
    (0x01, 0x06, 0x01): "SATA (AHCI)",
    (0x01, 0x08, 0x01): "NVMHCI",
    (0x01, 0x08, 0x02): "NVMe",
    (0x0C, 0x03, 0x00): "USB (UHCI)",
    (0x0C, 0x03, 0x10): "USB (OHCI)",
    (0x0C, 0x03, 0x20): "USB (EHCI)",
    (0x0C, 0x03, 0x30): "USB (xHCI)",
}


def base(code: int) -> int:
    return (code >> 16) & 0xFF


def is_network(code: int) -> bool:
    return base(code) == NETWORK


def describe(code: int) -> str:
    """The class in words, as specific as the table knows: "mass storage controller: NVMe"."""
    cls, sub, interface = base(code), (code >> 8) & 0xFF, code & 0xFF
    name = _BASES.get(cls, f"class 0x{cls:02x}")
    detail = _INTERFACES.get((cls, sub, interface)) or _SUBCLASSES.get((cls, sub))
    if detail is None and sub == 0x80:
        detail = "other"
    return f"{name}: {detail}" if detail else name


_ALLOW = re.compile(r"0x([0-9a-fA-F]{2}|[0-9a-fA-F]{4}|[0-9a-fA-F]{6})")


@dataclass(frozen=True)
class AllowedClass:
    """An inventory's `allow_class: 0x12` (a base class), `0x1200` (and subclass) or `0x120000` (exactly)."""

    value: int
    digits: int  # 2, 4 or 6: how much of the class it names

    @classmethod
    def parse(cls, text: str) -> AllowedClass | None:
        """None when the text is not 0x followed by 2, 4 or 6 hex digits."""
        match = _ALLOW.fullmatch(text.strip())
        if match is None:
            return None
        return cls(int(match[1], 16), len(match[1]))

    def matches(self, code: int) -> bool:
        return (code & 0xFFFFFF) >> (4 * (6 - self.digits)) == self.value

    def forbidden(self) -> str | None:
        """The kind of device the host runs on that this allowance would cover (None: none), e.g.
        "mass storage controller" for 0x01, "serial bus controller: USB" for 0x0c."""
        cls = self.value >> (4 * (self.digits - 2))
        sub = (self.value >> (4 * (self.digits - 4))) & 0xFF if self.digits >= 4 else None
        for never_base, never_sub in NEVER:
            if cls == never_base and (never_sub is None or sub in (None, never_sub)):
                name = _BASES.get(never_base, f"class 0x{never_base:02x}")
                return name if never_sub is None else f"{name}: {_SUBCLASSES[(never_base, never_sub)]}"
        return None

    def __str__(self) -> str:
        return f"0x{self.value:0{self.digits}x}"


# What the host itself runs on, never passed through whatever an inventory allows: its disks, display,
# memory, bridges, system peripherals (IOMMU, interrupt and DMA controllers, timers), input devices, and
# USB and SMBus controllers (keyboards, sensors). (base, None) is a whole base class.
NEVER: tuple[tuple[int, int | None], ...] = (
    (MASS_STORAGE, None),
    (DISPLAY, None),
    (0x05, None),
    (BRIDGE, None),
    (0x08, None),
    (0x09, None),
    (0x0C, 0x03),
    (0x0C, 0x05),
    (0x00, 0x01),  # a VGA-compatible device from before class codes
)


NEVER_TEXT = (
    "a host's disks, display, memory, bridges, system peripherals, input devices and USB or SMBus controllers "
    "are never passed through"
)


def never_passed(code: int) -> bool:
    """Whether the class is one the host runs on (NEVER): no allow_class makes it passable."""
    cls, sub = base(code), (code >> 8) & 0xFF
    return any(cls == never_base and never_sub in (None, sub) for never_base, never_sub in NEVER)


def refusal(code: int, allowed: AllowedClass | None = None) -> str | None:
    """Why a device of this class may not be passed through (None: it may): not a network controller,
    and not a class the inventory allows, or one the host runs on whatever is allowed."""
    if is_network(code):
        return None
    if allowed is not None and allowed.matches(code) and not never_passed(code):
        return None
    return f"is a {describe(code)} (class 0x{code:06x}), not a network controller"
