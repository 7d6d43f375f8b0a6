"""The unpacked PVH kernel: found in a bzImage by its setup header, kept only when QEMU can start it."""

from __future__ import annotations

import gzip
import lzma
import struct

from niclab.plumbing.image import pvh


def elf_with_notes(*notes: tuple[bytes, int]) -> bytes:
    """A 64-bit little-endian ELF with one PT_NOTE segment holding these (name, type) notes."""
    body = b""
    for name, kind in notes:
        padded = name + b"\x00" * (4 - len(name) % 4)
        body += struct.pack("<III", len(name) + 1, 4, kind) + padded + b"\x00" * 4
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", header, 0x36, 56, 1)  # e_phentsize, e_phnum
    phdr = struct.pack("<IIQQQQQQ", 4, 0, 64 + 56, 0, 0, len(body), len(body), 4)
    return bytes(header) + phdr + body


def bzimage(compressed: bytes, setup_sects: int = 1, version: int = 0x020F) -> bytes:
    setup = bytearray((setup_sects + 1) * 512)
    setup[pvh.SETUP_SECTS] = setup_sects
    setup[pvh.HEADER_MAGIC : pvh.HEADER_MAGIC + 4] = b"HdrS"
    struct.pack_into("<H", setup, pvh.VERSION, version)
    struct.pack_into("<II", setup, pvh.PAYLOAD_OFFSET, 16, len(compressed))
    return bytes(setup) + b"\x90" * 16 + compressed + b"\x00" * 32  # the decompressor, the payload, padding


PVH = elf_with_notes((b"Xen", 6), (b"Xen", pvh.XEN_ELFNOTE_PHYS32_ENTRY))


def test_an_xz_kernel_with_a_pvh_note_is_unpacked():
    assert pvh.pvh_kernel(bzimage(lzma.compress(PVH, format=lzma.FORMAT_XZ))) == PVH


def test_a_gzip_kernel_is_unpacked_too():
    assert pvh.pvh_kernel(bzimage(gzip.compress(PVH, mtime=0), setup_sects=4)) == PVH


def test_a_kernel_without_the_pvh_entry_stays_a_bzimage():
    no_entry = elf_with_notes((b"Xen", 6), (b"GNU", 18))  # type 18 under another name is not it
    assert pvh.pvh_kernel(bzimage(lzma.compress(no_entry, format=lzma.FORMAT_XZ))) is None


def test_what_is_not_a_bzimage_it_can_read_is_left_alone():
    assert pvh.pvh_kernel(b"not a kernel" * 100) is None
    assert pvh.pvh_kernel(bzimage(lzma.compress(PVH, format=lzma.FORMAT_XZ), version=0x0207)) is None  # too old
    assert pvh.pvh_kernel(bzimage(b"\x28\xb5\x2f\xfd" + b"zstd payload")) is None  # a format it does not read


def test_a_truncated_or_corrupt_payload_leaves_the_bzimage():
    packed = lzma.compress(PVH, format=lzma.FORMAT_XZ)
    assert pvh.pvh_kernel(bzimage(packed[: len(packed) // 2])) is None  # truncated: no partial vmlinux
    assert pvh.pvh_kernel(bzimage(packed[:12] + b"\xff" * 64)) is None  # corrupt: no exception either
