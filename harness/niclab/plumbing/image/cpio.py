"""A reproducible cpio "newc" writer (the initramfs format), with no root needed, and its reader.

Entries are root's with mtime 0 (the same tree gives the same bytes; device nodes are headers). The reader
walks archives one after the other as the kernel does, and `plain_archives` unpacks the gzipped ones.
"""

from __future__ import annotations

import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from niclab.base.errors import NiclabError


@dataclass(frozen=True)
class Entry:
    name: str  # path inside the archive, no leading slash
    mode: int  # full st_mode: type bits and permissions
    data: bytes = b""  # file content, or the target of a symlink
    rdev: tuple[int, int] = (0, 0)  # major, minor for device nodes


def _pad(n: int) -> bytes:
    return b"\0" * ((4 - n % 4) % 4)


class ByteSink(Protocol):
    """Where the archive goes: a binary file, a GzipFile, a BytesIO."""

    def write(self, data: bytes, /) -> object: ...


class CpioWriter:
    def __init__(self, out: ByteSink):
        self._out = out
        self._ino = 0

    def add(self, entry: Entry) -> None:
        self._ino += 1
        name = entry.name.encode() + b"\0"
        fields = (
            self._ino,
            entry.mode,
            0,
            0,
            2 if stat.S_ISDIR(entry.mode) else 1,
            0,
            len(entry.data),
            0,
            0,
            entry.rdev[0],
            entry.rdev[1],
            len(name),
            0,
        )
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._out.write(header + name + _pad(len(header) + len(name)))
        self._out.write(entry.data + _pad(len(entry.data)))

    def close(self) -> None:
        name = b"TRAILER!!!\0"
        header = b"070701" + b"".join(b"%08X" % f for f in (0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, len(name), 0))
        self._out.write(header + name + _pad(len(header) + len(name)))


NEWC_MAGIC = b"070701"
GZIP_MAGIC = b"\x1f\x8b"


def _entry_at(data: bytes, at: int) -> tuple[Entry, int]:
    """The newc entry whose header starts at `at`, and where the next header starts (4-byte aligned)."""
    header = data[at : at + 110]
    mode, size, name_size = int(header[14:22], 16), int(header[54:62], 16), int(header[94:102], 16)
    rdev = (int(header[78:86], 16), int(header[86:94], 16))
    name = data[at + 110 : at + 110 + name_size - 1].decode(errors="replace")
    body = (at + 110 + name_size + 3) & ~3
    return Entry(name, mode, data[body : body + size], rdev), (body + size + 3) & ~3


def read_entries(data: bytes) -> Iterator[Entry]:
    """The entries of newc archives one after the other (an initrd.img's, unpacked), in order: a later entry
    of a path replaces an earlier one when the kernel unpacks them."""
    at = 0
    while at + 110 <= len(data):
        if data[at : at + 6] != NEWC_MAGIC:  # padding after an archive's trailer, before the next archive
            at += 4
            continue
        entry, at = _entry_at(data, at)
        if entry.name != "TRAILER!!!":
            yield entry


def plain_archives(data: bytes) -> bytes:
    """An initramfs's archives one after the other, each gzipped one unpacked, as the kernel reads them: plain
    newc archives as they are, gzip members decompressed, the NUL padding between them skipped."""
    out: list[bytes] = []
    at = 0
    while at < len(data):
        if data.startswith(GZIP_MAGIC, at):
            member = zlib.decompressobj(wbits=31)
            out.append(member.decompress(data[at:]) + member.flush())
            if not member.eof:
                raise ValueError(f"a gzip archive at byte {at} is cut short")
            at = len(data) - len(member.unused_data)
        elif data.startswith(NEWC_MAGIC, at):
            end = archive_end(data, at)
            out.append(data[at:end])
            at = end
        elif data[at] == 0:
            at += 1
        else:
            raise ValueError(f"byte {at} starts neither a newc archive nor a gzip one")
    return b"".join(out)


def read_initrd(path: Path) -> bytes:
    """An initrd.img's (or one archive's) archives, plain; a file that is not one is an error naming it."""
    try:
        return plain_archives(path.read_bytes())
    except (OSError, ValueError, zlib.error) as exc:
        raise NiclabError(
            f"{path}: not an initramfs niclab can read ({exc}): build the image again (niclab image build)"
        ) from None


def archive_end(data: bytes, at: int) -> int:
    """Where the plain newc archive that starts at `at` ends: after its trailer, padded to 4 bytes."""
    while at + 110 <= len(data):
        if data[at : at + 6] != NEWC_MAGIC:
            raise ValueError(f"byte {at}: a newc header was expected")
        entry, at = _entry_at(data, at)
        if entry.name == "TRAILER!!!":
            return min(at, len(data))
    raise ValueError("a newc archive has no trailer")
