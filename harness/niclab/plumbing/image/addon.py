"""Add-ons: an archive added after the initramfs of any image, for the nodes whose benchmarks ask for it.

An add-on recipe (`addon = true`) builds one gzipped cpio archive and a manifest (versions, sizes, the memory
it adds) and no kernel, so one build serves every image and kernel (image.addons). It is built once per
recipe hash under the store's lock, in <cache>/images/<name>-<hash>/ (docs/architecture.md, "What only some
benchmarks need is an add-on, not a bigger image").
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.plumbing.image.assemble import Tree, add_overlay, add_programs, copy_tree
from niclab.plumbing.image.cpio import Entry
from niclab.plumbing.image.drivers import unpacked_bytes
from niclab.plumbing.image.manifest import installed_packages
from niclab.plumbing.image.recipe import Recipe
from niclab.plumbing.image.rootfs import fetch_root
from niclab.plumbing.image.store import building, recipe, store_dir, write_cpio
from niclab.plumbing.image.tartree import TarTree

ARCHIVE = "addon.cpio.gz"
MIB = 2**20


@dataclass(frozen=True)
class Addon:
    name: str
    input_hash: str
    directory: Path
    manifest: dict

    @property
    def id(self) -> str:
        return f"{self.name}-{self.input_hash}"

    @property
    def archive(self) -> Path:
        return self.directory / ARCHIVE


def addon_recipe(name: str) -> Recipe:
    """The add-on's recipe; a recipe that is not an add-on is refused."""
    wanted = recipe(name)
    if not wanted.addon:
        raise NiclabError(
            f"{wanted.directory}/recipe.toml is an image, not an add-on: a benchmark's GuestNeeds.addons names "
            "recipes with `addon = true`"
        )
    return wanted


def load_addon(directory: Path) -> Addon | None:
    """The add-on in `directory`, or None if it is not a whole one."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not manifest.get("addon") or not (directory / ARCHIVE).is_file():
        return None
    return Addon(manifest["recipe"], manifest["input_hash"], directory, manifest)


def find_addon(name: str) -> Addon | None:
    wanted = addon_recipe(name)
    return load_addon(store_dir() / f"{name}-{wanted.input_hash()}")


def build_addon(name: str, progress: Progress = print, force: bool = False) -> Addon:
    """Build the add-on for the current recipe (once per recipe hash, or again with `force`)."""
    wanted = addon_recipe(name)
    store = store_dir()
    target = store / f"{name}-{wanted.input_hash()}"
    if not force and (existing := load_addon(target)) is not None:
        return existing
    store.mkdir(parents=True, exist_ok=True)
    if not os.access(store, os.W_OK):
        raise NiclabError(
            f"{store} has no add-on for the current {name} recipe ({target.name}), and this user cannot build one "
            "there: build it as the cache's owner (`niclab image build " + name + "`)"
        )
    with locked(store / ".lock"):
        if not force and (existing := load_addon(target)) is not None:
            return existing
        started = time.monotonic()
        progress(f"building add-on {target.name} (recipe {wanted.directory})")
        with building(target) as work:
            manifest = _build(wanted, work, progress)
            manifest["build_seconds"] = round(time.monotonic() - started, 1)
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    addon = load_addon(target)
    assert addon is not None
    progress(
        f"add-on {addon.id} ready in {manifest['build_seconds']:.0f} s (archive {manifest['archive_bytes'] / MIB:.1f}"
        f" MiB, {manifest['unpacked_bytes'] / MIB:.0f} MiB unpacked, {manifest['memory_mib']} MiB more guest memory)"
    )
    return addon


def ensure_addon(name: str, progress: Progress = print) -> Addon:
    """The add-on for the current recipe, built first if the cache lacks it."""
    return find_addon(name) or build_addon(name, progress)


def addon_entries(root: TarTree, wanted: Recipe) -> list[Entry]:
    """The archive's entries: the programs with their libraries, the files, the trees, the overlay."""
    tree = Tree()
    add_programs(tree, root, wanted)
    for path in wanted.trees:
        copy_tree(tree, root, path, wanted.tree_exclude)
    if wanted.rootfs_overlay.is_dir():
        add_overlay(tree, wanted.rootfs_overlay)
    return tree.sorted_entries()


def memory_added(unpacked: int, packed: int, programs_mib: int) -> int:
    """MiB a guest needs more with the add-on: its files unpacked, the packed archive until the kernel has
    unpacked it, and what its programs take running."""
    return -(-(unpacked + packed) // MIB) + programs_mib


def _build(wanted: Recipe, work: Path, progress: Progress) -> dict:
    root_tar = work / "root.tar"
    fetch_root(wanted, root_tar, work / "mmdebstrap.log", progress)
    progress("assembling the add-on's archive")
    with TarTree(root_tar) as root:
        entries = addon_entries(root, wanted)
        packages = installed_packages(root.read("/var/lib/dpkg/status").decode())
    write_cpio(work / ARCHIVE, entries)
    root_tar.unlink()
    packed, unpacked = (work / ARCHIVE).stat().st_size, unpacked_bytes(entries)
    return {
        "recipe": wanted.name,
        "addon": True,
        "input_hash": wanted.input_hash(),
        "suite": wanted.suite,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_seconds": 0.0,
        "binaries": list(wanted.binaries),
        "trees": list(wanted.trees),
        "archive_bytes": packed,
        "unpacked_bytes": unpacked,
        "files": sum(1 for e in entries if stat.S_ISREG(e.mode)),
        "memory_mib": memory_added(unpacked, packed, wanted.memory_mib),
        "programs_memory_mib": wanted.memory_mib,
        # the recipe's packages at the versions fetched, then every package of the root (what the archive's
        # libraries came from)
        "addon_packages": {p: packages.get(p, "?") for p in wanted.packages},
        "packages": packages,
    }
