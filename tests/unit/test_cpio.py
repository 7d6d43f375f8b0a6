import gzip
import io
import stat

import pytest

from niclab.base.errors import NiclabError
from niclab.plumbing.image.cpio import CpioWriter, Entry, archive_end, plain_archives, read_entries, read_initrd


def read_newc(blob: bytes) -> list[tuple[str, int, bytes, tuple[int, int]]]:
    """A minimal reader for the newc format, to check what the writer produced."""
    entries, pos = [], 0
    while True:
        assert blob[pos : pos + 6] == b"070701"
        fields = [int(blob[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        namesize, filesize = fields[11], fields[6]
        name_start = pos + 110
        name = blob[name_start : name_start + namesize - 1].decode()
        data_start = (name_start + namesize + 3) & ~3
        data = blob[data_start : data_start + filesize]
        pos = (data_start + filesize + 3) & ~3
        if name == "TRAILER!!!":
            return entries
        entries.append((name, fields[1], data, (fields[9], fields[10])))


def test_round_trip_files_links_devices():
    out = io.BytesIO()
    writer = CpioWriter(out)
    writer.add(Entry("etc", stat.S_IFDIR | 0o755))
    writer.add(Entry("etc/hosts", stat.S_IFREG | 0o644, b"127.0.0.1 localhost\n"))
    writer.add(Entry("init", stat.S_IFLNK | 0o777, b"/usr/bin/busybox"))
    writer.add(Entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)))
    writer.close()
    entries = read_newc(out.getvalue())
    assert [e[0] for e in entries] == ["etc", "etc/hosts", "init", "dev/console"]
    assert entries[1][2] == b"127.0.0.1 localhost\n"
    assert stat.S_ISLNK(entries[2][1]) and entries[2][2] == b"/usr/bin/busybox"
    assert stat.S_ISCHR(entries[3][1]) and entries[3][3] == (5, 1)


def test_same_entries_give_same_bytes():
    def build() -> bytes:
        out = io.BytesIO()
        writer = CpioWriter(out)
        writer.add(Entry("a", stat.S_IFREG | 0o644, b"x" * 5))
        writer.close()
        return out.getvalue()

    assert build() == build()
    assert len(build()) % 4 == 0


def newc(entries: list[Entry]) -> bytes:
    out = io.BytesIO()
    writer = CpioWriter(out)
    for entry in entries:
        writer.add(entry)
    writer.close()
    return out.getvalue()


def test_an_initrd_of_plain_and_gzipped_archives_reads_as_the_kernel_unpacks_it():
    first = newc([Entry("init", stat.S_IFREG | 0o755, b"#!/bin/sh\n" * 50)])
    second = newc([Entry("lib/a.ko", stat.S_IFREG | 0o644, b"\x7fELF" * 300)])
    third = newc([Entry("init", stat.S_IFREG | 0o755, b"later\n")])
    # plain, plain, gzipped, NUL padding, gzipped: a plain image, then an add-on and a driver layer
    initrd = first + second + gzip.compress(third, mtime=0) + b"\0" * 8 + gzip.compress(third, mtime=0)
    assert plain_archives(initrd) == first + second + third + third
    names = [(e.name, e.data[:6]) for e in read_entries(plain_archives(initrd))]
    assert names == [("init", b"#!/bin"), ("lib/a.ko", b"\x7fELF\x7fE"), ("init", b"later\n"), ("init", b"later\n")]
    assert archive_end(initrd, 0) == len(first)


def test_an_initrd_cut_short_or_of_something_else_is_an_error():
    archive = newc([Entry("init", stat.S_IFREG | 0o755, b"x" * 100)])
    with pytest.raises(ValueError, match="cut short"):
        plain_archives(gzip.compress(archive)[:-20])
    with pytest.raises(ValueError, match="no trailer"):
        plain_archives(archive[:-120])
    with pytest.raises(ValueError, match="neither a newc archive nor a gzip one"):
        plain_archives(archive + b"BZh9")


def test_an_initrd_file_niclab_cannot_read_is_named_with_the_fix(tmp_path):
    (tmp_path / "initrd.img").write_bytes(gzip.compress(newc([Entry("init", stat.S_IFREG | 0o755, b"x")]))[:-9])
    with pytest.raises(NiclabError, match=r"initrd.img: not an initramfs niclab can read .*niclab image build"):
        read_initrd(tmp_path / "initrd.img")
