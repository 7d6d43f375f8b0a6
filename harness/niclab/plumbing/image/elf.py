"""Read what an ELF file says of itself: an executable's interpreter and DT_NEEDED libraries, a section.

This lets the image build collect shared libraries from the guest root without
running any of its programs on the host, and read a kernel module's sections
(.modinfo, its build ID) without the kernel's tools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 1, 5, 15, 29


@dataclass(frozen=True)
class Dynamic:
    interpreter: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...]


def is_elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


class NoSection(ValueError):
    """The file is a sound ELF64 file without the section asked for."""


SECTION_HEADER = struct.Struct("<IIQQQQ")  # name, type, flags, addr, offset, size (the rest is not read)


def section(data: bytes, wanted: str) -> bytes:
    """The contents of the section named `wanted` of a little-endian ELF64 file; NoSection if it has none,
    ValueError if the file is not one or is cut short or points past its end."""
    if not is_elf(data) or data[4:6] != b"\x02\x01":
        raise ValueError("not a little-endian ELF64 module")
    if len(data) < 0x40:
        raise ValueError("its ELF header is cut short")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shnum == 0:
        raise NoSection(f"no {wanted} section")
    if shentsize < SECTION_HEADER.size or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        raise ValueError("its section headers lie past the end of the file")

    def header(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = SECTION_HEADER.unpack_from(data, shoff + i * shentsize)
        if offset + size > len(data):
            raise ValueError(f"section {i} lies past the end of the file")
        return name, offset, size

    _, names_at, names_size = header(shstrndx)
    names = data[names_at : names_at + names_size]
    for i in range(shnum):
        name, offset, size = header(i)
        end = names.find(b"\0", name)
        if name >= len(names) or end < 0:
            raise ValueError(f"section {i} has its name past the end of the section names")
        if names[name:end] == wanted.encode():
            return data[offset : offset + size]
    raise NoSection(f"no {wanted} section")


NT_GNU_BUILD_ID = 3


def build_id(data: bytes) -> str:
    """The hex of the file's GNU build ID note (what /sys/module/M/notes/.note.gnu.build-id holds), "" if none;
    ValueError if the file or its notes are malformed."""
    try:
        notes = section(data, ".note.gnu.build-id")
    except NoSection:
        return ""
    pos = 0
    while pos + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from("<III", notes, pos)
        name_at = pos + 12
        desc_at = name_at + (namesz + 3) // 4 * 4
        if desc_at + descsz > len(notes):
            raise ValueError("its build ID note runs past the end of its section")
        if kind == NT_GNU_BUILD_ID and notes[name_at : name_at + namesz].rstrip(b"\0") == b"GNU":
            return notes[desc_at : desc_at + descsz].hex()
        pos = desc_at + (descsz + 3) // 4 * 4
    return ""


def read_dynamic(data: bytes) -> Dynamic:
    """Parse a little-endian ELF64 file (x86_64 is all niclab's guests use)."""
    if not is_elf(data) or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []  # vaddr, offset, filesz
    dynamic = interp = None
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
        elif p_type == PT_INTERP:
            interp = data[p_offset : p_offset + p_filesz].rstrip(b"\0").decode()
    if dynamic is None:
        return Dynamic(interp, (), ())

    def file_offset(vaddr: int) -> int:
        for start, offset, size in loads:
            if start <= vaddr < start + size:
                return vaddr - start + offset
        raise ValueError(f"address {vaddr:#x} is in no loaded segment")

    entries = []
    offset, size = dynamic
    for pos in range(offset, offset + size, 16):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == 0:
            break
        entries.append((tag, value))
    strtab = file_offset(next(v for t, v in entries if t == DT_STRTAB))

    def string(index: int) -> str:
        start = strtab + index
        return data[start : data.index(b"\0", start)].decode()

    needed = tuple(string(v) for t, v in entries if t == DT_NEEDED)
    runpath = tuple(part for t, v in entries if t in (DT_RPATH, DT_RUNPATH) for part in string(v).split(":") if part)
    return Dynamic(interp, needed, runpath)
