"""An image that `extends` another, built on the other's built image instead of from scratch.

The parent's initramfs archive and kernel as they are, and one extract-only fetch of the parent's kernel
package at the version its manifest records (byte for byte, or the modules would not be its kernel's) and of
the recipe's own packages. Only a recipe that adds nothing to the archive, keeps its parent's suite and is no
disk image is built so (`layer_obstacle`); docs/architecture.md, "Images and boot".
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.plumbing.image.cpio import read_entries, read_initrd
from niclab.plumbing.image.drivers import FirmwareSet, every_module_under, firmware_set, lab_facts, unpacked_bytes
from niclab.plumbing.image.kernelfiles import ModuleSet, from_root, module_set
from niclab.plumbing.image.manifest import installed_packages
from niclab.plumbing.image.mirror import debian_mirror
from niclab.plumbing.image.recipe import Recipe
from niclab.plumbing.image.rootfs import run_mmdebstrap
from niclab.plumbing.image.tartree import TarTree

OVERLAYS = ("rootfs", "initrd")
# An extracted root records no package as installed: the hook writes what each fetched .deb is, as dpkg's status
# would (read back by manifest.installed_packages).
STATUS_HOOK = (
    'for deb in "$1"/var/cache/apt/archives/*.deb; do '
    "dpkg-deb --show --showformat='Package: ${Package}\\nVersion: ${Version}\\nStatus: install ok installed\\n\\n' "
    '"$deb"; done > "$1"/var/lib/dpkg/status'
)
DROPPED = ("built_at", "build_seconds", "module_dirs", "module_count", "module_firmware", "firmware_files")
DROPPED_TOO = ("firmware_bytes", "unpacked_bytes", "min_memory_mib", "layered_on", "layer_packages")


def layer_obstacle(recipe: Recipe) -> str:
    """Why `recipe` is built whole rather than on its parent's image; "" when it can be layered."""
    parent = recipe.parent
    if parent is None:
        return "it extends no recipe"
    if recipe.suite != parent.suite:
        return f"its suite {recipe.suite} is not {parent.name}'s ({parent.suite})"
    if recipe.disk is not None or parent.disk is not None:
        return "a disk image is built whole"
    own = [
        what
        for what, mine, theirs in (
            ("binaries", recipe.binaries, parent.binaries),
            ("files", recipe.files, parent.files),
            ("[[build]]", recipe.builds, parent.builds),
        )
        if mine != theirs
    ]
    own += [f"{name}/" for name in OVERLAYS if (recipe.directory / name).is_dir()]
    if own:
        return f"it adds to the initramfs archive ({', '.join(own)})"
    return ""


def layer_packages(recipe: Recipe) -> list[str]:
    """The packages a layer fetches beside the kernel: its recipe's own, and those of each parent that is a
    layer too (a parent built whole has its packages in its image already)."""
    own = list(recipe.own_packages)
    parent = recipe.parent
    if parent is not None and parent.parent is not None and not layer_obstacle(parent):
        own += [p for p in layer_packages(parent) if p not in own]
    return own


def kernel_package(parent: dict, parent_id: str) -> str:
    """The parent's kernel package at the version its image was built with (`linux-image-6.1.0-50-amd64=6.1.176-1`)."""
    name = f"linux-image-{parent.get('kernel_version', '?')}"
    version = parent.get("packages", {}).get(name)
    if not version:
        raise NiclabError(
            f"image {parent_id}: its manifest records no version of {name}, so no layer can match its kernel; "
            f"rebuild it (`niclab image build {parent.get('recipe', '')} --force`)"
        )
    return f"{name}={version}"


def layer_command(recipe: Recipe, kernel: str, mirror: str, out: Path) -> list[str]:
    """mmdebstrap: the kernel package and the layer's packages with what they depend on, extracted."""
    return [
        "mmdebstrap",
        "--variant=extract",
        f"--components={','.join(recipe.components)}",
        f"--include={','.join([kernel, *layer_packages(recipe)])}",
        "--dpkgopt=path-exclude=/usr/share/*",
        f"--extract-hook={STATUS_HOOK}",
        recipe.suite,
        str(out),
        f"deb {mirror} {recipe.suite} {' '.join(recipe.components)}",
    ]


@dataclass(frozen=True)
class Layer:
    kernel_version: str
    modules: ModuleSet
    firmware: FirmwareSet | None
    packages: dict[str, str]  # package -> version of what the layer fetched


def fetch_layer(recipe: Recipe, parent_dir: Path, parent: dict, work: Path, progress: Progress) -> Layer:
    """Fetch the parent's kernel package and the layer's packages; the modules and firmware the recipe asks for.
    The kernel fetched is checked against the parent's (vmlinuz and config)."""
    parent_id = parent_dir.name
    kernel = kernel_package(parent, parent_id)
    tar = work / "layer.tar"
    progress(f"fetching {kernel} and {len(layer_packages(recipe))} packages for a layer on image {parent_id}")
    try:
        command = layer_command(recipe, kernel, debian_mirror(recipe.suite), tar)
        run_mmdebstrap(command, work / "mmdebstrap.log", progress)
    except NiclabError as exc:
        raise NiclabError(
            f"{exc}\nIf Debian {recipe.suite} no longer has {kernel} (a point release replaced it), rebuild image "
            f"{parent_id} first (`niclab image build {parent.get('recipe', '')} --force`)"
        ) from None
    origin = f"{recipe.directory}/recipe.toml"
    with TarTree(tar) as root:
        files = from_root(root, origin=parent.get("kernel_origin", ""))
        config = (parent_dir / "config").read_text() if (parent_dir / "config").is_file() else None
        if files.version != parent["kernel_version"] or files.read_kernel() != (parent_dir / "vmlinuz").read_bytes():
            raise NiclabError(f"image build: the fetched {kernel} is not the kernel of image {parent_id} ({origin})")
        if config is not None and files.config != config:
            raise NiclabError(f"image build: the fetched {kernel} has another config than image {parent_id}")
        names = list(recipe.modules)
        if recipe.module_dirs:
            names += [n for n in every_module_under(files, recipe.module_dirs, origin) if n not in names]
        modules = module_set(files, names)
        if modules.missing:
            raise NiclabError(
                f"image build: kernel {files.version} has no module(s) {', '.join(modules.missing)} "
                f"(listed in {origin})"
            )
        firmware = firmware_set(root, modules.firmware) if recipe.firmware == "modules" else None
        packages = installed_packages(root.read("/var/lib/dpkg/status").decode())
    tar.unlink()
    return Layer(files.version, modules, firmware, packages)


def archive_bytes(path: Path) -> int:
    """What a newc archive's regular files take unpacked (the parent's userspace archive); an initrd.img of
    several archives one after the other, gzipped or plain, counts them all."""
    return sum(len(e.data) for e in read_entries(read_initrd(path)) if stat.S_ISREG(e.mode))


def layered_manifest(parent: dict, parent_id: str, recipe: Recipe, layer: Layer, facts: dict) -> dict:
    """The layer's manifest: the parent's (its kernel, programs, sources), with the layer's recipe, modules,
    and the packages of both; `facts` are the build's own (input_hash, built_at, build_seconds, initrd_bytes,
    unpacked_bytes)."""
    if layer.kernel_version != parent["kernel_version"]:
        raise NiclabError(f"image build: a layer of kernel {layer.kernel_version} on image {parent_id} of another")
    modules = layer.modules
    kept = {k: v for k, v in parent.items() if k not in (*DROPPED, *DROPPED_TOO)}
    manifest = {
        **kept,
        "recipe": recipe.name,
        "input_hash": facts["input_hash"],
        "cmdline": recipe.cmdline,
        "built_at": facts["built_at"],
        "build_seconds": facts["build_seconds"],
        "modules": modules.loaded,
        "builtin_modules": modules.builtin,
        "module_params": modules.params,
        "binaries": list(recipe.binaries),
        "initrd_bytes": facts["initrd_bytes"],
        "packages": dict(sorted({**parent.get("packages", {}), **layer.packages}.items())),
        "layered_on": parent_id,
        "layer_packages": layer_packages(recipe),
    }
    order = [*parent, *(k for k in manifest if k not in parent)]
    manifest = {k: manifest[k] for k in order if k in manifest}
    if recipe.module_dirs or layer.firmware is not None:
        unpacked = facts["unpacked_bytes"] + unpacked_bytes(modules.entries)
        unpacked += unpacked_bytes(layer.firmware.entries) if layer.firmware else 0
        manifest.update(lab_facts(recipe.module_dirs, modules, layer.firmware, unpacked, facts["initrd_bytes"]))
    return manifest
