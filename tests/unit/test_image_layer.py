"""An image that extends another, built as a layer on the other's built image (plumbing/image/layer.py)."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import stat
import tarfile
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.plumbing.image import store as store_mod
from niclab.plumbing.image.cpio import Entry
from niclab.plumbing.image.drivers import FirmwareSet, firmware_set
from niclab.plumbing.image.kernelfiles import ModuleSet
from niclab.plumbing.image.layer import (
    Layer,
    archive_bytes,
    kernel_package,
    layer_command,
    layer_obstacle,
    layer_packages,
    layered_manifest,
)
from niclab.plumbing.image.recipe import load_recipe
from niclab.plumbing.image.tartree import TarTree

KERNEL = "6.1.0-50-amd64"


@pytest.fixture
def images(repo, tmp_path) -> Path:
    """A copy of the micro and lab recipes, to change."""
    out = tmp_path / "images"
    for name in ("micro", "lab"):
        shutil.copytree(repo / "images" / name, out / name)
    return out


def extend(images: Path, name: str, text: str) -> Path:
    (images / name).mkdir()
    (images / name / "recipe.toml").write_text(text)
    return images / name


# -- the decision ---------------------------------------------------------------


def test_the_lab_image_is_a_layer_on_micro_and_micro_is_built_whole(repo):
    lab, micro = load_recipe(repo / "images" / "lab"), load_recipe(repo / "images" / "micro")
    assert layer_obstacle(lab) == ""
    assert layer_obstacle(micro) == "it extends no recipe"
    # its own packages, as its recipe lists them, micro's firmware-misc-nonfree among them: all a layer fetches
    assert layer_packages(lab)[0] == "firmware-misc-nonfree" and "firmware-realtek" in layer_packages(lab)
    assert "busybox-static" not in layer_packages(lab)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('extends = "micro"\nbinaries = ["/usr/bin/nc"]\n', r"adds to the initramfs archive \(binaries\)"),
        ('extends = "micro"\nfiles = ["/etc/hosts"]\n', r"\(files\)"),
        ('extends = "micro"\n[[build]]\nsource = "nc"\nscript = "make"\n', r"\(\[\[build\]\]\)"),
        ('extends = "micro"\nsuite = "trixie"\n', "its suite trixie is not micro's \\(bookworm\\)"),
        ('extends = "micro"\n[disk]\nsize_mib = 512\n', "a disk image is built whole"),
    ],
)
def test_a_recipe_that_adds_to_the_initramfs_or_changes_its_base_is_built_whole(images, text, reason):
    assert re.search(reason, layer_obstacle(load_recipe(extend(images, "more", text))))


def test_an_overlay_of_its_own_is_an_addition_too(images):
    directory = extend(images, "more", 'extends = "micro"\npackages = ["firmware-realtek"]\n')
    assert layer_obstacle(load_recipe(directory)) == ""
    (directory / "rootfs" / "etc").mkdir(parents=True)
    assert layer_obstacle(load_recipe(directory)) == "it adds to the initramfs archive (rootfs/)"


def test_a_layer_on_a_layer_fetches_both_layers_packages(images):
    directory = extend(images, "more", 'extends = "lab"\npackages = ["firmware-ath9k-htc", "firmware-realtek"]\n')
    more = load_recipe(directory)
    assert layer_obstacle(more) == ""
    packages = layer_packages(more)
    assert packages[:2] == ["firmware-ath9k-htc", "firmware-realtek"] and "firmware-bnx2x" in packages
    assert len(packages) == len(set(packages))


def test_the_layer_fetches_the_parents_kernel_package_at_its_version(repo):
    lab = load_recipe(repo / "images" / "lab")
    parent = {"recipe": "micro", "kernel_version": KERNEL, "packages": {f"linux-image-{KERNEL}": "6.1.176-1"}}
    kernel = kernel_package(parent, "micro-0123")
    assert kernel == f"linux-image-{KERNEL}=6.1.176-1"
    command = layer_command(lab, kernel, "http://deb.example/debian", Path("/tmp/layer.tar"))
    assert command[:2] == ["mmdebstrap", "--variant=extract"]
    include = next(a for a in command if a.startswith("--include=")).removeprefix("--include=").split(",")
    assert include == [kernel, *layer_packages(lab)]
    assert "--components=main,non-free,non-free-firmware" in command
    assert any(a.startswith("--extract-hook=") and "var/lib/dpkg/status" in a for a in command)
    assert command[-1] == "deb http://deb.example/debian bookworm main non-free non-free-firmware"
    with pytest.raises(NiclabError, match=r"image micro-0123: its manifest records no version of linux-image-6\.1"):
        kernel_package({**parent, "packages": {}}, "micro-0123")


# -- the manifest -------------------------------------------------------------------


def parent_manifest() -> dict:
    return {
        "recipe": "micro",
        "input_hash": "8311210e2dea3a35",
        "suite": "bookworm",
        "cmdline": "console=ttyS0",
        "built_at": "2026-01-01T00:00:00Z",
        "build_seconds": 215.4,
        "kernel_version": KERNEL,
        "kernel_origin": "Debian bookworm (6.1.176-1)",
        "pvh_kernel": True,
        "modules": ["e1000"],
        "builtin_modules": [],
        "module_params": {"e1000": ["debug"]},
        "binaries": ["/usr/bin/dash"],
        "initrd_bytes": 100,
        "packages": {f"linux-image-{KERNEL}": "6.1.176-1", "firmware-misc-nonfree": "20230210-5", "dash": "0.5"},
        "built_from_source": {"fio": "fio-3.33"},
    }


def a_layer() -> Layer:
    modules = ModuleSet(
        entries=[
            Entry(f"usr/lib/modules/{KERNEL}/kernel/r8169.ko", stat.S_IFREG | 0o644, b"m" * 40),
            Entry(
                f"usr/lib/modules/{KERNEL}/modules.alias",
                stat.S_IFREG | 0o644,
                b"alias pci:v000010ECd00008168* r8169\n",
            ),
        ],
        loaded=["e1000", "r8169"],
        builtin=[],
        missing=[],
        params={"e1000": ["debug"], "r8169": []},
        firmware={"r8169": ["rtl_nic/rtl8168h-2.fw", "rtl_nic/none.fw"]},
    )
    firmware = FirmwareSet(
        entries=[Entry("usr/lib/firmware/rtl_nic/rtl8168h-2.fw", stat.S_IFREG | 0o644, b"f" * 10)],
        present={"r8169": {"rtl_nic/rtl8168h-2.fw": True, "rtl_nic/none.fw": False}},
        files=1,
        bytes=10,
    )
    packages = {f"linux-image-{KERNEL}": "6.1.176-1", "firmware-realtek": "20230210-5", "kmod": "30+20221128-1"}
    return Layer(KERNEL, modules, firmware, packages)


def test_the_layers_manifest_is_the_parents_with_its_modules_firmware_and_packages(repo):
    lab = load_recipe(repo / "images" / "lab")
    facts = {
        "input_hash": "feedfacefeedface",
        "built_at": "2026-02-02T00:00:00Z",
        "build_seconds": 30.5,
        "initrd_bytes": 3 * 2**20,
        "unpacked_bytes": 2**20,
    }
    m = layered_manifest(parent_manifest(), "micro-8311210e2dea3a35", lab, a_layer(), facts)
    assert (m["recipe"], m["input_hash"], m["build_seconds"], m["initrd_bytes"]) == (
        "lab",
        "feedfacefeedface",
        30.5,
        3 * 2**20,
    )
    # the parent's kernel and programs, as they are
    for key in ("suite", "kernel_version", "kernel_origin", "pvh_kernel", "built_from_source"):
        assert m[key] == parent_manifest()[key]
    assert m["cmdline"] == lab.cmdline and m["binaries"] == list(lab.binaries)
    assert m["modules"] == ["e1000", "r8169"] and m["module_params"]["r8169"] == []
    assert m["packages"]["dash"] == "0.5" and m["packages"]["firmware-realtek"] == "20230210-5"
    assert list(m["packages"]) == sorted(m["packages"])
    assert m["layered_on"] == "micro-8311210e2dea3a35" and m["layer_packages"] == layer_packages(lab)
    # the lab facts, of the whole initramfs: the parent's userspace, the layer's modules and firmware
    assert m["module_count"] == 2 and m["module_firmware"]["r8169"] == a_layer().firmware.present["r8169"]
    assert (m["firmware_files"], m["firmware_bytes"]) == (1, 10)
    assert m["unpacked_bytes"] == 2**20 + 40 + len(a_layer().modules.entries[1].data) + 10
    assert m["min_memory_mib"] == 192  # 1 MiB unpacked + 3 MiB packed + 128, in 64 MiB steps
    assert list(m)[:6] == ["recipe", "input_hash", "suite", "cmdline", "built_at", "build_seconds"]


def test_a_layer_of_another_kernel_is_refused(repo):
    layer = a_layer()
    other = Layer("6.1.0-51-amd64", layer.modules, layer.firmware, layer.packages)
    with pytest.raises(NiclabError, match=r"a layer of kernel 6\.1\.0-51-amd64 on image micro-x of another"):
        layered_manifest(parent_manifest(), "micro-x", load_recipe(repo / "images" / "lab"), other, {})


def test_the_parents_userspace_bytes_are_read_from_its_archive(tmp_path):
    entries = [
        Entry("usr", stat.S_IFDIR | 0o755),
        Entry("usr/bin/a", stat.S_IFREG | 0o755, b"x" * 5),
        Entry("init", stat.S_IFLNK | 0o777, b"/usr/bin/busybox"),
        Entry("usr/bin/b", stat.S_IFREG | 0o644, b"y" * 1001),
    ]
    store_mod.write_cpio(tmp_path / "u.cpio.gz", entries)
    assert archive_bytes(tmp_path / "u.cpio.gz") == 1006


# -- firmware from an extracted root --------------------------------------------------------


def test_firmware_from_a_root_without_merged_usr_lands_under_usr_lib_firmware(tmp_path):
    tar_path = tmp_path / "layer.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name, data in {
            "./lib/firmware/rtl_nic/rtl8168h-2.fw": b"fw",
            "./lib/firmware/tigon/tg3.bin": b"tg",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("./lib/firmware/tg3.bin")
        link.type, link.linkname = tarfile.SYMTYPE, "tigon/tg3.bin"
        tar.addfile(link)
    with TarTree(tar_path) as root:
        found = firmware_set(root, {"r8169": ["rtl_nic/rtl8168h-2.fw"], "tg3": ["tg3.bin"]})
    names = {e.name: e for e in found.entries}
    assert names["usr/lib/firmware/rtl_nic/rtl8168h-2.fw"].data == b"fw"
    assert names["usr/lib/firmware/tigon/tg3.bin"].data == b"tg"
    assert names["usr/lib/firmware/tg3.bin"].data == b"tigon/tg3.bin"
    assert not any(name.startswith("lib/") for name in names)
    assert found.present == {"r8169": {"rtl_nic/rtl8168h-2.fw": True}, "tg3": {"tg3.bin": True}}


# -- the build ------------------------------------------------------------------------


def fake_parent(directory: Path) -> Path:
    directory.mkdir(parents=True)
    for name, data in {"vmlinuz": b"kernel", "vmlinux": b"unpacked kernel", "config": b"CONFIG_E1000=m\n"}.items():
        (directory / name).write_bytes(data)
    store_mod.write_cpio(directory / "userspace.cpio.gz", [Entry("init", stat.S_IFREG | 0o755, b"#!/bin/sh\n")])
    (directory / "initrd.img").write_bytes((directory / "userspace.cpio.gz").read_bytes())
    (directory / "manifest.json").write_text(json.dumps(parent_manifest()))
    return directory


def test_building_a_layer_takes_the_parents_kernel_and_userspace_and_fetches_only_the_layer(
    images, tmp_path, monkeypatch
):
    parent = fake_parent(tmp_path / "micro")
    monkeypatch.setenv("NICLAB_IMAGES_DIR", str(images))
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NICLAB_IMAGE", str(parent))
    fetched = []

    def fetch(recipe, parent_dir, manifest, work, progress):
        fetched.append((recipe.name, parent_dir, manifest["kernel_version"]))
        return a_layer()

    monkeypatch.setattr(store_mod, "fetch_layer", fetch)
    monkeypatch.setattr(store_mod, "fetch_root", lambda *a: pytest.fail("a layer fetches no whole root"))
    lines: list[str] = []
    image = store_mod.build_image("lab", progress=lines.append)
    assert fetched == [("lab", parent, KERNEL)]
    assert "a layer on image micro-8311210e2dea3a35" in lines[0]
    for name in ("vmlinuz", "vmlinux", "config", "userspace.cpio.gz"):
        assert (image.directory / name).read_bytes() == (parent / name).read_bytes()
    parts = [image.directory / n for n in ("userspace.cpio.gz", "modules.cpio.gz", store_mod.FIRMWARE_ARCHIVE)]
    assert image.initrd.read_bytes() == b"".join(p.read_bytes() for p in parts)
    assert (image.directory / "modules.alias").read_text() == "alias pci:v000010ECd00008168* r8169\n"
    m = image.manifest
    assert m["input_hash"] == load_recipe(images / "lab").input_hash() and m["layered_on"] == "micro-8311210e2dea3a35"
    assert m["initrd_bytes"] == image.initrd.stat().st_size and m["firmware_files"] == 1
    assert m["unpacked_bytes"] == len(b"#!/bin/sh\n") + 40 + 36 + 10
    assert gzip.decompress((image.directory / store_mod.FIRMWARE_ARCHIVE).read_bytes()).count(b"rtl8168h-2.fw") == 1
    # built once: the next call finds it; --force builds it again on the same parent
    assert store_mod.build_image("lab", progress=lines.append).directory == image.directory
    assert len(fetched) == 1
    store_mod.build_image("lab", progress=lines.append, force=True)
    assert len(fetched) == 2


def test_a_recipe_that_cannot_be_layered_is_built_whole_without_its_parent(images, tmp_path, monkeypatch):
    extend(images, "more", 'extends = "micro"\nbinaries = ["/usr/bin/nc"]\n')
    monkeypatch.setenv("NICLAB_IMAGES_DIR", str(images))
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(store_mod, "ensure_image", lambda *a, **k: pytest.fail("the parent is not needed"))

    def fetch_root(recipe, out, log, progress):
        raise NiclabError(f"whole root of {recipe.name}")

    monkeypatch.setattr(store_mod, "fetch_root", fetch_root)
    with pytest.raises(NiclabError, match="whole root of more"):
        store_mod.build_image("more", progress=lambda m: None)
    assert not list((tmp_path / "cache" / "images").glob("*more*"))


def test_the_layer_builder_is_an_input_of_extending_recipes_only(images):
    micro, lab = load_recipe(images / "micro"), load_recipe(images / "lab")
    assert "layer.py" in [p.name for p in lab.builder_sources()]
    assert "layer.py" not in [p.name for p in micro.builder_sources()]
