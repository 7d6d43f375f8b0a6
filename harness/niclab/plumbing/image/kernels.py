"""Images for other kernels: the micro image's userspace with another kernel and its modules.

A Debian suite's kernel package (fetched, unpacked, never installed) or a developer's built tree goes behind
the recipe's own userspace archive, so only the driver differs. A build tree's image, in a folder named after
its build's stamp, is built again when the tree was; a run keeps the build it checked first
(`pin_kernel_image`). docs/scenarios.md, "Kernels: the driver under test".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.model.kernel_choice import KernelChoice
from niclab.model.topology import NodeSpec
from niclab.plumbing.image.addons import with_addons
from niclab.plumbing.image.drivers import modules_under
from niclab.plumbing.image.kernelfiles import KernelFiles, from_build_tree, from_root, module_set
from niclab.plumbing.image.mirror import debian_mirror
from niclab.plumbing.image.pvh import pvh_kernel
from niclab.plumbing.image.rootfs import kernel_command, run_mmdebstrap
from niclab.plumbing.image.store import (
    FIRMWARE_ARCHIVE,
    Image,
    building,
    ensure_image,
    load_image,
    mark_used,
    recipe,
    write_initrd,
)
from niclab.plumbing.image.tartree import TarTree


def _tree_stamp(tree: Path) -> str:
    """What changes when the tree is rebuilt: its bzImage, .config and every module (size and time)."""
    digest = hashlib.sha256()
    for rel in ("arch/x86/boot/bzImage", ".config", "include/config/kernel.release"):
        path = tree / rel
        digest.update(path.read_bytes() if path.is_file() else b"-")
    order = tree / "modules.order"
    if order.is_file():
        for line in order.read_text().split():
            rel = line.removeprefix("kernel/")
            path = tree / (rel[:-2] + ".ko" if rel.endswith(".o") else rel)
            info = path.stat() if path.is_file() else None
            digest.update(f"{rel} {info.st_size if info else '-'} {info.st_mtime_ns if info else '-'}\n".encode())
    return digest.hexdigest()[:16]


def node_images(nodes: Iterable[NodeSpec], base: Image | None, progress: Progress) -> dict[str, Image]:
    """Each node's image: `base` (the recipe's, if None) with the node's kernel and its add-ons (image.addons)."""
    base = base or ensure_image(progress=progress)
    return {spec.name: with_addons(kernel_image(spec.kernel, progress, base), spec.addons, progress) for spec in nodes}


def image_facts(images: dict[str, Image]) -> dict:
    """A rig's image and kernel facts: one value when every node boots the same, else `node: value` each."""

    def one(values: dict[str, str]) -> str:
        distinct = set(values.values())
        return distinct.pop() if len(distinct) == 1 else ", ".join(f"{n}: {v}" for n, v in values.items())

    return {
        "image": one({n: image.id for n, image in images.items()}),
        "kernel": one({n: image.manifest.get("kernel_version", "?") for n, image in images.items()}),
        "kernel_origin": one({n: image.manifest.get("kernel_origin", "?") for n, image in images.items()}),
    }


def kernel_image(choice: KernelChoice | None, progress: Progress = print, base: Image | None = None) -> Image:
    """The micro image (`base`) for `choice` (None: its own kernel), built first if the cache lacks it."""
    base = base or ensure_image(progress=progress)
    if choice is None or choice.suite == base.manifest["suite"]:
        return base
    if not base.userspace.is_file():
        raise NiclabError(
            f"image {base.id} ({base.directory}) was built before images kept their userspace archive apart, "
            "so another kernel cannot reuse it: run `niclab image build --force`"
        )
    if (pinned := _pinned.get((base.id, choice))) is not None:
        mark_used(pinned)
        return pinned
    store = base.directory.parent
    if choice.build and not Path(choice.build).is_dir():
        raise NiclabError(f"kernel build {choice.build}: no such directory")
    stamp = _tree_stamp(Path(choice.build)) if choice.build else ""
    # each build of a tree is an image of its own (a libvirt pool keeps images by id; a rig that booted
    # the last build keeps its files while the next one is built)
    target = store / (f"{base.id}+{choice.slug}" + (f"-{stamp[:8]}" if stamp else ""))
    existing = load_image(target)
    if existing is not None and existing.manifest.get("tree_stamp", "") == stamp:
        return mark_used(existing)
    if not os.access(store, os.W_OK):
        raise NiclabError(f"{store} has no image for kernel {choice}, and this user cannot build one there")
    with locked(store / ".lock"):
        existing = load_image(target)
        if existing is not None and existing.manifest.get("tree_stamp", "") == stamp:
            return existing
        image = _build(base, choice, target, stamp, progress)
        if stamp:
            _prune_builds(store, f"{base.id}+{choice.slug}-", keep=target)
        return image


_pinned: dict[tuple[str, KernelChoice], Image] = {}
KEEP_BUILDS = 3  # images of earlier builds of one tree kept in the cache


def pin_kernel_image(choice: KernelChoice | None, progress: Progress = print, base: Image | None = None) -> Image:
    """kernel_image, and the same image for `choice` for the rest of this process: a run boots the build
    of a tree it checked before it began, even if the tree is rebuilt while it runs."""
    base = base or ensure_image(progress=progress)
    image = kernel_image(choice, progress, base)
    if choice is not None:
        _pinned[(base.id, choice)] = image
    return image


IDLE_SECONDS = 3600  # an image of an earlier build not booted for this long is in no run's way


def _prune_builds(store: Path, prefix: str, keep: Path) -> None:
    """Drop the images of earlier builds of one tree beyond the newest KEEP_BUILDS, and those of any tree
    that is gone, once idle for an hour."""
    builds = sorted((p for p in store.glob(f"{prefix}*") if p.is_dir() and p != keep), key=lambda p: p.stat().st_mtime)
    idle_since = time.time() - IDLE_SECONDS
    old = builds[: max(0, len(builds) - (KEEP_BUILDS - 1))]
    old += [p for p in store.glob("*+build-*") if p.is_dir() and p not in builds and p != keep and _tree_gone(p)]
    for path in old:
        if path.stat().st_mtime < idle_since:
            shutil.rmtree(path, ignore_errors=True)


def _tree_gone(image_dir: Path) -> bool:
    """The build tree an image was taken from is no longer there (a test's, a deleted worktree's)."""
    try:
        choice = json.loads((image_dir / "manifest.json").read_text()).get("kernel_choice", "")
    except (OSError, ValueError):
        return False  # being written, or not an image: not ours to judge
    return choice.startswith("build:") and not Path(choice.removeprefix("build:")).is_dir()


def _build(base: Image, choice: KernelChoice, target: Path, stamp: str, progress: Progress) -> Image:
    started = time.monotonic()
    with building(target) as work:
        if choice.suite:
            progress(f"fetching Debian {choice.suite}'s kernel package for image {target.name}")
            tar = work / "kernel.tar"
            run_mmdebstrap(
                kernel_command(choice.suite, debian_mirror(base.manifest["suite"]), tar),
                work / "mmdebstrap.log",
                progress,
            )
            with TarTree(tar) as root:
                files = from_root(root, origin=f"Debian {choice.suite}")
                manifest = _write(base, files, choice, work)
            tar.unlink()
        else:
            progress(f"taking the kernel and modules of {choice.build} into image {target.name}")
            manifest = _write(base, from_build_tree(Path(choice.build)), choice, work)
        manifest["tree_stamp"] = stamp
        if stamp:
            manifest["variant"] = f"{choice.slug}-{stamp[:8]}"
        manifest["build_seconds"] = round(time.monotonic() - started, 1)
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    image = load_image(target)
    assert image is not None
    progress(f"image {image.id} ready in {manifest['build_seconds']:.0f} s (kernel {manifest['kernel_version']})")
    return image


def _write(base: Image, files: KernelFiles, choice: KernelChoice, work: Path) -> dict:
    """Write the kernel, its config and the initramfs into `work`; the manifest's kernel part."""
    wanted = recipe(base.name)  # the lab image's kernels carry every module of its directories too
    names = list(wanted.modules) + [n for found in modules_under(files, wanted.module_dirs).values() for n in found]
    modules = module_set(files, names)
    if modules.missing and choice.suite:
        raise NiclabError(
            f"Debian {choice.suite}'s kernel {files.version} has no module(s) {', '.join(modules.missing)}"
        )
    kernel = files.read_kernel()
    (work / "vmlinuz").write_bytes(kernel)
    if (unpacked := pvh_kernel(kernel)) is not None:
        (work / "vmlinux").write_bytes(unpacked)
    if files.config is not None:
        (work / "config").write_text(files.config)
    firmware = base.directory / FIRMWARE_ARCHIVE  # the base image's firmware, for this kernel's modules as well
    packing = base.manifest.get("initramfs", "gzip")  # as the base image holds its own archives
    write_initrd(work, base.userspace, modules.entries, firmware if firmware.is_file() else None, packing)
    facts = {}
    if "module_firmware" in base.manifest:
        have = {name for files in base.manifest["module_firmware"].values() for name, ok in files.items() if ok}
        facts = {
            "module_count": len(modules.loaded),
            "module_firmware": {m: {f: f in have for f in names} for m, names in modules.firmware.items()},
        }
    return {
        **{k: v for k, v in base.manifest.items() if k not in ("built_at", "build_seconds")},
        # a Debian suite's kernel is named with its version: the suite's next kernel is another image
        "variant": f"{choice.slug}-{files.version}",
        "kernel_choice": str(choice),
        "base_image": base.id,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel_version": files.version,
        "kernel_origin": files.origin,
        "pvh_kernel": unpacked is not None,
        "modules": modules.loaded,
        "builtin_modules": modules.builtin,
        "module_params": modules.params,
        "missing_modules": modules.missing,
        "initrd_bytes": (work / "initrd.img").stat().st_size,
        **facts,
    }
