"""The image cache: build an image once per recipe hash, find it, describe it.

<cache>/images/<recipe>-<hash>/ holds the kernel (and its PVH vmlinux), initrd.img and the archives it is made
of, modules.alias, the manifest and a disk recipe's disk; images for other kernels, with add-ons or drivers
sit beside it. A build happens in a temporary directory renamed into place, under a lock
(docs/architecture.md, "plumbing": image/).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from niclab.base.atomic import building
from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.base.paths import cache_dir, images_dir
from niclab.plumbing.image.assemble import assemble
from niclab.plumbing.image.cpio import CpioWriter, Entry
from niclab.plumbing.image.disk import make_disk
from niclab.plumbing.image.drivers import every_module_under, firmware_set, lab_facts, unpacked_bytes
from niclab.plumbing.image.kernelfiles import from_root, module_set
from niclab.plumbing.image.layer import archive_bytes, fetch_layer, layer_obstacle, layered_manifest
from niclab.plumbing.image.manifest import installed_packages
from niclab.plumbing.image.pvh import pvh_kernel
from niclab.plumbing.image.recipe import Recipe, load_recipe
from niclab.plumbing.image.rootfs import fetch_root
from niclab.plumbing.image.tartree import TarTree

DEFAULT_RECIPE = "micro"
LAB_RECIPE = "lab"  # what lab runs boot: every Ethernet driver of the kernel and their firmware
ALIAS_FILES = ("modules.alias", "modules.builtin.modinfo")
FIRMWARE_ARCHIVE = "firmware.cpio.gz"


@dataclass(frozen=True)
class Image:
    name: str
    input_hash: str
    directory: Path
    cmdline: str
    manifest: dict
    variant: str = ""  # the kernel, for an image of another kernel than the recipe's (image.kernels)

    @property
    def kernel(self) -> Path:
        return self.directory / "vmlinuz"

    @property
    def boot_kernel(self) -> Path:
        """What QEMU boots: the uncompressed PVH kernel if the image has one (no decompression under TCG)."""
        unpacked = self.directory / "vmlinux"
        return unpacked if unpacked.is_file() else self.kernel

    @property
    def initrd(self) -> Path:
        return self.directory / "initrd.img"

    @property
    def disk(self) -> Path | None:
        """The root disk (qcow2) of a disk image; None for the micro kind, which is all initramfs."""
        return self.directory / "disk.qcow2" if "disk" in self.manifest else None

    @property
    def userspace(self) -> Path:
        """The initramfs without the kernel's modules (its first archive)."""
        return self.directory / "userspace.cpio.gz"

    @property
    def id(self) -> str:
        return f"{self.name}-{self.input_hash}" + (f"+{self.variant}" if self.variant else "")


def store_dir() -> Path:
    return cache_dir() / "images"


def load_image(directory: Path) -> Image | None:
    """The image in `directory`, or None if it is not a whole one."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    needed = ["vmlinuz", "initrd.img"] + (["disk.qcow2"] if "disk" in manifest else [])
    if not all((directory / name).is_file() for name in needed):
        return None
    return Image(
        manifest["recipe"],
        manifest["input_hash"],
        directory,
        manifest["cmdline"],
        manifest,
        manifest.get("variant", ""),
    )


def mark_used(image: Image) -> Image:
    """Mark the image as booted now (its folder's time), so that no pruning takes it from a run
    (image.kernels prunes the images of a build tree's earlier builds)."""
    try:
        os.utime(image.directory)
    except OSError:
        pass  # a cache this user cannot write: nothing is pruned there by this user either
    return image


def write_initrd(
    directory: Path, userspace: Path, modules: list[Entry], firmware: Path | None = None, initramfs: str = "gzip"
) -> None:
    """modules.cpio.gz from the entries, and initrd.img: the userspace archive, then the modules one (both
    unpacked if `initramfs` is "plain"), then the firmware one if the image has one; modules.alias and
    modules.builtin.modinfo copied beside them."""
    write_cpio(directory / "modules.cpio.gz", modules)
    for entry in modules:
        if entry.name.rsplit("/", 1)[-1] in ALIAS_FILES:
            (directory / entry.name.rsplit("/", 1)[-1]).write_bytes(entry.data)
    with open(directory / "initrd.img", "wb") as out:
        for part in (userspace, directory / "modules.cpio.gz"):
            if initramfs == "plain":
                out.write(gzip.decompress(part.read_bytes()))
            else:
                with open(part, "rb") as data:
                    shutil.copyfileobj(data, out)
        if firmware is not None:
            with open(firmware, "rb") as data:
                shutil.copyfileobj(data, out)


def write_cpio(path: Path, entries: list[Entry]) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as packed:
        writer = CpioWriter(packed)
        for entry in entries:
            writer.add(entry)
        writer.close()


def recipe(name: str = DEFAULT_RECIPE) -> Recipe:
    return load_recipe(images_dir() / name)


#: The variable that points at a built image to use instead of the recipe's (tests, a prebuilt image).
OVERRIDES = {DEFAULT_RECIPE: "NICLAB_IMAGE", LAB_RECIPE: "NICLAB_LAB_IMAGE"}


def find_image(name: str = DEFAULT_RECIPE) -> Image | None:
    """The built image for the current recipe, or the one $NICLAB_IMAGE ($NICLAB_LAB_IMAGE for the lab image)
    points at."""
    if name in OVERRIDES and (override := os.environ.get(OVERRIDES[name])):
        image = load_image(Path(override))
        if image is None:
            raise NiclabError(
                f"{OVERRIDES[name]}={override} is not a built niclab image (it needs vmlinuz, initrd.img and "
                "manifest.json)"
            )
        return image
    wanted = recipe(name)
    return load_image(store_dir() / f"{name}-{wanted.input_hash()}")


def build_image(name: str = DEFAULT_RECIPE, progress: Progress = print, force: bool = False) -> Image:
    wanted = recipe(name)
    target = store_dir() / f"{name}-{wanted.input_hash()}"
    if not force and (existing := load_image(target)) is not None:
        return existing
    if store_dir().is_dir() and not os.access(store_dir(), os.W_OK):
        raise NiclabError(
            f"{store_dir()} has no image for the current {name} recipe ({target.name}), and this user cannot build one "
            f"there: the recipe (images/{name}/) or the image builder changed since the cache was filled. Build it "
            "as the cache's owner; for the lab container, `make docker` rebuilds its image"
        )
    # an image that extends another is a layer on the other's image (layer.py), built first, outside the lock
    parent = ensure_image(wanted.parent.name, progress) if wanted.parent and not layer_obstacle(wanted) else None
    with locked(store_dir() / ".lock"):
        if not force and (existing := load_image(target)) is not None:
            return existing
        started = time.monotonic()
        on = f", a layer on image {parent.id}" if parent else ""
        progress(f"building image {target.name} (recipe {wanted.directory}{on})")
        with building(target) as work:
            manifest = _build_layer(wanted, parent, work, progress) if parent else _build_whole(wanted, work, progress)
            manifest["build_seconds"] = round(time.monotonic() - started, 1)
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        image = load_image(target)
        assert image is not None
        disk = f", disk {manifest['disk']['qcow2_bytes'] / 2**20:.0f} MiB" if "disk" in manifest else ""
        progress(
            f"image {image.id} ready in {manifest['build_seconds']:.0f} s "
            f"(initramfs {manifest['initrd_bytes'] / 2**20:.1f} MiB{disk}, kernel {manifest['kernel_version']})"
        )
        return image


def _build_layer(wanted: Recipe, parent: Image, work: Path, progress: Progress) -> dict:
    """The parent image's kernel and userspace archive, with the layer's modules and firmware; the manifest."""
    layer = fetch_layer(wanted, parent.directory, parent.manifest, work, progress)
    progress("assembling the layer's modules and firmware")
    for name in ("vmlinuz", "vmlinux", "config"):
        if (parent.directory / name).is_file():
            shutil.copyfile(parent.directory / name, work / name)
    shutil.copyfile(parent.userspace, work / "userspace.cpio.gz")
    if layer.firmware is not None:
        write_cpio(work / FIRMWARE_ARCHIVE, layer.firmware.entries)
    firmware = work / FIRMWARE_ARCHIVE if layer.firmware else None
    write_initrd(work, work / "userspace.cpio.gz", layer.modules.entries, firmware, wanted.initramfs)
    facts = {
        "input_hash": wanted.input_hash(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": 0.0,
        "initrd_bytes": (work / "initrd.img").stat().st_size,
        "unpacked_bytes": archive_bytes(parent.userspace),
    }
    return {**layered_manifest(parent.manifest, parent.id, wanted, layer, facts), "initramfs": wanted.initramfs}


def _build_whole(wanted: Recipe, work: Path, progress: Progress) -> dict:
    """A Debian root with the recipe's packages, and the image made from it in `work`; the manifest."""
    root_tar = work / "root.tar"
    fetch_root(wanted, root_tar, work / "mmdebstrap.log", progress)
    if wanted.disk is not None:
        make_disk(wanted.disk, root_tar, work / "disk.qcow2", progress)
    progress("assembling the initramfs")
    with TarTree(root_tar) as root:
        userspace = assemble(root, wanted)
        write_cpio(work / "userspace.cpio.gz", userspace)
        kernel_files = from_root(root)
        names = list(wanted.modules)
        if wanted.module_dirs:
            names += every_module_under(kernel_files, wanted.module_dirs, f"{wanted.directory}/recipe.toml")
        modules = module_set(kernel_files, names)
        firmware = firmware_set(root, modules.firmware) if wanted.firmware == "modules" else None
        if firmware is not None:
            write_cpio(work / FIRMWARE_ARCHIVE, firmware.entries)
        if modules.missing:
            raise NiclabError(
                f"image build: kernel {kernel_files.version} has no module(s) {', '.join(modules.missing)} "
                f"(listed in {wanted.directory}/recipe.toml)"
            )
        kernel = kernel_files.read_kernel()
        packages = installed_packages(root.read("/var/lib/dpkg/status").decode())
        unpacked_size = unpacked_bytes(userspace) + unpacked_bytes(modules.entries)
        unpacked_size += unpacked_bytes(firmware.entries) if firmware else 0
        built = {
            b.source: next((d for d in root.listdir("/usr/src") if d.startswith(f"{b.source}-")), "?")
            for b in wanted.builds
        }
    (work / "vmlinuz").write_bytes(kernel)
    if (unpacked := pvh_kernel(kernel)) is not None:
        (work / "vmlinux").write_bytes(unpacked)
    firmware_archive = work / FIRMWARE_ARCHIVE if firmware else None
    write_initrd(work, work / "userspace.cpio.gz", modules.entries, firmware_archive, wanted.initramfs)
    if kernel_files.config is not None:
        (work / "config").write_text(kernel_files.config)
    manifest: dict = {
        "recipe": wanted.name,
        "input_hash": wanted.input_hash(),
        "suite": wanted.suite,
        "cmdline": wanted.cmdline,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": 0.0,
        "kernel_version": kernel_files.version,
        "kernel_origin": f"Debian {wanted.suite} ({packages.get(f'linux-image-{kernel_files.version}', '?')})",
        "pvh_kernel": unpacked is not None,
        "modules": modules.loaded,
        "builtin_modules": modules.builtin,
        "module_params": modules.params,
        "binaries": list(wanted.binaries),
        "initrd_bytes": (work / "initrd.img").stat().st_size,
        "initramfs": wanted.initramfs,
        "packages": packages,
        "built_from_source": built,  # source package -> the unpacked directory (its version)
    }
    if wanted.module_dirs or firmware is not None:
        packed = manifest["initrd_bytes"]
        manifest.update(lab_facts(wanted.module_dirs, modules, firmware, unpacked_size, packed))
    if wanted.disk is not None:
        manifest["disk"] = {
            "size_mib": wanted.disk.size_mib,
            "qcow2_bytes": (work / "disk.qcow2").stat().st_size,
        }
    root_tar.unlink()
    return manifest


def ensure_image(name: str = DEFAULT_RECIPE, progress: Progress = print) -> Image:
    """The image for the current recipe, built first if it is not in the cache."""
    return find_image(name) or build_image(name, progress)
