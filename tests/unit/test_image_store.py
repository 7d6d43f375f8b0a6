"""The image cache read by a user who cannot write it (the lab container's, built with its Docker image)."""

from __future__ import annotations

import json
import os

import pytest

from niclab.base.errors import NiclabError
from niclab.plumbing.image import store


@pytest.fixture
def read_only_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path))
    (tmp_path / "images").mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: False if path == tmp_path / "images" else real_access(path, mode)
    )
    return tmp_path / "images"


def test_a_read_only_cache_without_the_current_image_says_how_to_get_one(read_only_cache):
    with pytest.raises(NiclabError, match=r"has no image for the current micro recipe \(micro-[0-9a-f]{16}\)") as e:
        store.build_image("micro", progress=lambda message: None)
    assert "`make docker` rebuilds its image" in str(e.value)
    assert not (read_only_cache / ".lock").exists()  # not even the lock was taken


def test_a_read_only_cache_with_the_current_image_gives_it(read_only_cache):
    wanted = store.recipe("micro")
    built = read_only_cache / f"micro-{wanted.input_hash()}"
    built.mkdir()
    for name in ("vmlinuz", "initrd.img"):
        (built / name).write_bytes(b"")
    manifest = {"recipe": "micro", "input_hash": wanted.input_hash(), "cmdline": "console=ttyS0"}
    (built / "manifest.json").write_text(json.dumps(manifest))
    assert store.ensure_image("micro").directory == built
    assert store.build_image("micro", progress=lambda message: None).directory == built


@pytest.mark.parametrize("initramfs", ["gzip", "plain"])
def test_initrd_holds_userspace_then_modules_then_firmware_packed_or_plain(tmp_path, initramfs):
    import gzip
    import stat

    from niclab.plumbing.image.cpio import Entry, plain_archives, read_entries
    from niclab.plumbing.image.layer import archive_bytes

    userspace, firmware = tmp_path / "userspace.cpio.gz", tmp_path / "firmware.cpio.gz"
    store.write_cpio(userspace, [Entry("init", stat.S_IFREG | 0o755, b"#!/bin/sh\n")])
    store.write_cpio(firmware, [Entry("usr/lib/firmware/a.bin", stat.S_IFREG | 0o644, b"\1" * 64)])
    modules = [Entry("usr/lib/modules/6.1/e1000.ko", stat.S_IFREG | 0o644, b"\x7fELF" * 64)]
    store.write_initrd(tmp_path, userspace, modules, firmware, initramfs)
    initrd = (tmp_path / "initrd.img").read_bytes()
    assert initrd[:6] == b"070701" if initramfs == "plain" else initrd[:2] == b"\x1f\x8b"
    assert initrd.endswith(firmware.read_bytes())  # the firmware stays packed either way
    names = [e.name for e in read_entries(plain_archives(initrd))]
    assert names == ["init", "usr/lib/modules/6.1/e1000.ko", "usr/lib/firmware/a.bin"]
    assert archive_bytes(tmp_path / "initrd.img") == 10 + 256 + 64
    assert gzip.decompress((tmp_path / "modules.cpio.gz").read_bytes())[:6] == b"070701"  # kept packed beside
