"""Pack the Debian guest image as a vagrant-libvirt box and add it to Vagrant, locally.

box.img (the qcow2 disk), the kernel and initrd (no bootloader), metadata.json and vagrant/box/Vagrantfile,
added through a one-version catalog file on disk: nothing is fetched, and each image build is its own box
version (docs/vagrant.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.base.paths import SOURCE_ROOT, cache_dir
from niclab.plumbing.image import Image

BOX_NAME = "niclab/debian"
BOX_VAGRANTFILE = SOURCE_ROOT / "vagrant" / "box" / "Vagrantfile"
IMAGE_INFO = "niclab-image.json"


def box_version(image: Image) -> str:
    """A version Vagrant can order: the image's build time, 2026-11-23T06:30:05Z -> 2026.1123.63005."""
    stamp = re.sub(r"\D", "", image.manifest["built_at"])
    return f"{int(stamp[:4])}.{int(stamp[4:8])}.{int(stamp[8:14])}"


def vagrant_home() -> Path:
    return Path(os.environ.get("VAGRANT_HOME") or Path.home() / ".vagrant.d")


def box_dir(version: str) -> Path:
    return vagrant_home() / "boxes" / BOX_NAME.replace("/", "-VAGRANTSLASH-") / version / "libvirt"


def added(image: Image) -> bool:
    """Whether this image's box is already in Vagrant."""
    try:
        info = json.loads((box_dir(box_version(image)) / IMAGE_INFO).read_text())
    except (OSError, ValueError):
        return False
    return info.get("image") == image.id


def metadata(image: Image) -> dict:
    disk = image.disk
    assert disk is not None
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(disk)], capture_output=True, text=True, check=True
        ).stdout
    )
    size_gb = -(-int(info["virtual-size"]) // 2**30)  # vagrant-libvirt wants whole GB
    return {"provider": "libvirt", "format": "qcow2", "virtual_size": size_gb}


def catalog(version: str, box_file: Path) -> dict:
    return {
        "name": BOX_NAME,
        "description": "niclab's Debian guest (built from Debian packages by `niclab image build debian`)",
        "versions": [{"version": version, "providers": [{"name": "libvirt", "url": box_file.resolve().as_uri()}]}],
    }


def pack(image: Image, out: Path) -> None:
    """Write the box (an uncompressed tar: the disk is already compressed qcow2)."""
    if image.disk is None:
        raise NiclabError(f"image {image.id} has no disk; a box needs the debian image")
    info = {"image": image.id, "cmdline": image.cmdline, "kernel_version": image.manifest.get("kernel_version")}
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        (Path(scratch) / "metadata.json").write_text(json.dumps(metadata(image), indent=2) + "\n")
        (Path(scratch) / IMAGE_INFO).write_text(json.dumps(info, indent=2) + "\n")
        with tarfile.open(out, "w") as tar:
            tar.add(Path(scratch) / "metadata.json", "metadata.json")
            tar.add(Path(scratch) / IMAGE_INFO, IMAGE_INFO)
            tar.add(BOX_VAGRANTFILE, "Vagrantfile")
            tar.add(image.kernel, "vmlinuz")
            tar.add(image.initrd, "initrd.img")
            tar.add(image.disk, "box.img")


def unreachable_by_others(path: Path) -> Path | None:
    """The first directory on the way to `path` that other users cannot enter, if any.

    With qemu:///system, libvirt runs QEMU as its own user (libvirt-qemu on Debian),
    which must reach the box's kernel and initrd to boot them."""
    for directory in [*reversed(path.parents), path]:
        try:
            if not directory.stat().st_mode & stat.S_IXOTH:
                return directory
        except OSError:
            return directory
    return None


def vagrant(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run vagrant where no Vagrantfile is (vagrant reads one in its working directory even for `box add`)."""
    if shutil.which("vagrant") is None:
        raise NiclabError("vagrant is not installed: run `make vagrant` (or scripts/setup-host --vagrant)")
    return subprocess.run(["vagrant", *args], cwd=cwd, env={**os.environ, "VAGRANT_CWD": str(cwd)})


def add_box(image: Image, progress: Progress) -> Path:
    """Pack and add the image's box unless it is there already; returns the box's directory."""
    version = box_version(image)
    if added(image):
        progress(f"box {BOX_NAME} {version} (image {image.id}) is already in {vagrant_home()}")
    else:
        work = cache_dir() / "vagrant"
        work.mkdir(parents=True, exist_ok=True)
        box_file = work / f"debian-{version}.box"
        catalog_file = work / f"debian-{version}.json"
        try:
            progress(f"packing {image.disk} as box {BOX_NAME} {version}")
            pack(image, box_file)
            catalog_file.write_text(json.dumps(catalog(version, box_file), indent=2) + "\n")
            progress(f"adding the box to Vagrant ({vagrant_home()})")
            result = vagrant("box", "add", "--force", "--provider", "libvirt", str(catalog_file), cwd=work)
            if result.returncode != 0:
                raise NiclabError(f"`vagrant box add {catalog_file}` failed (exit {result.returncode}); see above")
        finally:
            box_file.unlink(missing_ok=True)
            catalog_file.unlink(missing_ok=True)
    where = box_dir(version)
    if (blocked := unreachable_by_others(where)) is not None:
        progress(
            f"warning: {blocked} cannot be entered by other users, so libvirt's QEMU (qemu:///system runs it as "
            f"its own user) cannot read the box's kernel in {where}; run `chmod o+x {blocked}`, or set "
            "VAGRANT_HOME to a directory others can enter, and run `niclab vagrant box` again"
        )
    return where
