"""Images for other kernels: the micro image's userspace with another kernel and its modules.

A scenario's `kernel:` is a Debian suite (its kernel package is fetched,
unpacked, never installed) or a developer's built tree (`{build: ../linux}`,
read where `make modules_install` would read it). Either way the image is
the recipe's own initramfs archive (the same programs, the same versions)
followed by an archive of that kernel's modules, so only the driver differs.

Layout: <cache>/images/<recipe image id>+<kernel>/ (vmlinuz, vmlinux when the
kernel has a PVH entry, initrd.img, modules.cpio.gz, config, manifest.json).
A suite's image is built once; a build tree's is built again when the tree
was rebuilt (its bzImage, .config or any module changed).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from niclab.errors import NiclabError
from niclab.filelock import locked
from niclab.image.kernelfiles import KernelFiles, from_build_tree, from_root, module_set
from niclab.image.mirror import debian_mirror
from niclab.image.pvh import pvh_kernel
from niclab.image.rootfs import kernel_command, run_mmdebstrap
from niclab.image.store import DEFAULT_RECIPE, Image, Progress, ensure_image, load_image, recipe, write_initrd
from niclab.image.tartree import TarTree
from niclab.kernel_choice import KernelChoice
from niclab.topology import NodeSpec


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
    """Each node's image: `base` (the recipe's, if None) with the node's kernel."""
    base = base or ensure_image(progress=progress)
    return {spec.name: kernel_image(spec.kernel, progress, base) for spec in nodes}


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
    store = base.directory.parent
    target = store / f"{base.id}+{choice.slug}"
    stamp = _tree_stamp(Path(choice.build)) if choice.build else ""
    if choice.build and not Path(choice.build).is_dir():
        raise NiclabError(f"kernel build {choice.build}: no such directory")
    existing = load_image(target)
    if existing is not None and existing.manifest.get("tree_stamp", "") == stamp:
        return existing
    if not os.access(store, os.W_OK):
        raise NiclabError(f"{store} has no image for kernel {choice}, and this user cannot build one there")
    with locked(store / ".lock"):
        existing = load_image(target)
        if existing is not None and existing.manifest.get("tree_stamp", "") == stamp:
            return existing
        return _build(base, choice, target, stamp, progress)


def _build(base: Image, choice: KernelChoice, target: Path, stamp: str, progress: Progress) -> Image:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
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
        if stamp:  # each build of the tree is its own image (a libvirt pool keeps images by id)
            manifest["variant"] = f"{choice.slug}-{stamp[:8]}"
        manifest["build_seconds"] = round(time.monotonic() - started, 1)
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    image = load_image(target)
    assert image is not None
    progress(f"image {image.id} ready in {manifest['build_seconds']:.0f} s (kernel {manifest['kernel_version']})")
    return image


def _write(base: Image, files: KernelFiles, choice: KernelChoice, work: Path) -> dict:
    """Write the kernel, its config and the initramfs into `work`; the manifest's kernel part."""
    modules = module_set(files, list(recipe(DEFAULT_RECIPE).modules))
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
    write_initrd(work, base.userspace, modules.entries)
    return {
        **{k: v for k, v in base.manifest.items() if k not in ("built_at", "build_seconds")},
        "variant": choice.slug,
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
    }
