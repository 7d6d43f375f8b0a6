"""Kernel modules and build trees made up for tests: ELF files with only a .modinfo section."""

from __future__ import annotations

import lzma
import struct
from pathlib import Path


def fake_module(name: str, depends: tuple[str, ...] = (), aliases: tuple[str, ...] = (), params: tuple[str, ...] = ()):
    """An ELF64 relocatable file whose .modinfo says what a real module's would."""
    fields = [f"name={name}", f"depends={','.join(depends)}", *(f"alias={a}" for a in aliases)]
    fields += [f"parm={p}:a parameter" for p in params]
    modinfo = b"".join(f.encode() + b"\0" for f in fields)
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    body = modinfo + shstrtab
    shoff = 64 + len(body)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)

    def section(name_at: int, type_: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name_at, type_, 0, 0, offset, size, 0, 0, 1, 0)

    sections = bytes(64) + section(1, 1, 64, len(modinfo)) + section(10, 3, 64 + len(modinfo), len(shstrtab))
    return header + body + sections


MODULES = {  # path in the tree -> (name, depends, aliases)
    "drivers/net/ethernet/intel/e1000/e1000.ko": ("e1000", (), ("pci:v00008086d0000100Esv*sd*bc*sc*i*",)),
    "drivers/net/bonding/bonding.ko": ("bonding", ("tls",), ("rtnl-link-bond",)),
    "net/tls/tls.ko": ("tls", (), ()),
    "net/sched/sch_netem.ko": ("sch_netem", (), ()),
    "drivers/net/ethernet/8390/ne2k-pci.ko": ("ne2k_pci", ("8390",), ()),
    "drivers/net/ethernet/8390/8390.ko": ("8390", (), ()),
}
CONFIG = "CONFIG_E1000=m\nCONFIG_BONDING=m\nCONFIG_NET_SCH_NETEM=m\nCONFIG_NE2K_PCI=m\nCONFIG_VIRTIO_PCI=y\n"


def fake_build_tree(root: Path, modules: dict = MODULES, config: str = CONFIG, builtin: str = "") -> Path:
    """What `make bzImage modules` leaves: bzImage, .config, kernel.release, modules.order and the .ko files."""
    (root / "arch/x86/boot").mkdir(parents=True)
    (root / "arch/x86/boot/bzImage").write_bytes(b"not a real kernel")
    (root / "include/config").mkdir(parents=True)
    (root / "include/config/kernel.release").write_text("6.99.0-test\n")
    (root / ".config").write_text(config)
    (root / "modules.builtin").write_text(builtin)
    for path, (name, depends, aliases) in modules.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(fake_module(name, depends, aliases, params=("debug",)))
    (root / "modules.order").write_text("".join(p[:-3] + ".o\n" for p in modules))  # 6.2+ lists .o
    return root


def xz(data: bytes) -> bytes:
    return lzma.compress(data)
