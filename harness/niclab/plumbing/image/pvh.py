"""The kernel as an uncompressed ELF that QEMU starts at its PVH entry: no decompression in the guest.

Under TCG the bzImage's decompressor is the slowest part of a boot (docs/measurements.md, "Boot time"). The
payload is found by the boot protocol's setup header (`payload_offset`, `payload_length`, protocol 2.08 on),
not by a magic number, and kept only with a PVH note (XEN_ELFNOTE_PHYS32_ENTRY: every CONFIG_PVH kernel).
"""

from __future__ import annotations

import lzma
import struct
import zlib

SETUP_SECTS = 0x1F1
HEADER_MAGIC = 0x202  # "HdrS"
VERSION = 0x206
PAYLOAD_OFFSET = 0x248
PAYLOAD_LENGTH = 0x24C
XEN_ELFNOTE_PHYS32_ENTRY = 18


def payload(bzimage: bytes) -> bytes | None:
    """The compressed kernel inside a bzImage, or None if this is not one (or too old to say where)."""
    if len(bzimage) < 0x250 or bzimage[HEADER_MAGIC : HEADER_MAGIC + 4] != b"HdrS":
        return None
    (version,) = struct.unpack_from("<H", bzimage, VERSION)
    if version < 0x0208:
        return None
    setup_sects = bzimage[SETUP_SECTS] or 4
    offset, length = struct.unpack_from("<II", bzimage, PAYLOAD_OFFSET)
    start = (setup_sects + 1) * 512 + offset
    return bzimage[start : start + length]


def decompress(data: bytes) -> bytes | None:
    """xz and gzip payloads (what Debian's kernels use); None for a format this does not read."""
    if data.startswith(b"\xfd7zXZ\x00"):
        xz = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        out = xz.decompress(data)  # stops at the stream's end
        return out if xz.eof else None  # a truncated stream is not a kernel
    if data.startswith(b"\x1f\x8b"):
        gz = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = gz.decompress(data)  # stops at the member's end
        return out if gz.eof else None
    return None


def has_pvh_entry(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF has the Xen note QEMU's PVH boot looks for."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return False
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        kind, _flags, offset, _vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if kind != 4:  # PT_NOTE
            continue
        at, end = offset, offset + filesz
        while at + 12 <= end:
            namesz, descsz, note = struct.unpack_from("<III", elf, at)
            name = elf[at + 12 : at + 12 + namesz].rstrip(b"\x00")
            if name == b"Xen" and note == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def pvh_kernel(bzimage: bytes) -> bytes | None:
    """The uncompressed kernel ELF if QEMU can boot it at a PVH entry; None if not (use the bzImage)."""
    try:
        found = payload(bzimage)
        elf = decompress(found) if found else None
        return elf if elf is not None and has_pvh_entry(elf) else None
    except (lzma.LZMAError, zlib.error, struct.error, IndexError):  # a payload this cannot read: the bzImage boots
        return None
