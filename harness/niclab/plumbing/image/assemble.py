"""Assemble an image's initramfs from a guest root tarball and the recipe.

An ordered list of cpio entries: a merged-/usr tree with the recipe's programs and their libraries, busybox
applets for the rest, the recipe's overlay. The kernel's modules go into a second archive
(kernelfiles.module_set) that another kernel's replace; a disk recipe's slim initramfs comes from here too.
"""

from __future__ import annotations

import posixpath
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.plumbing.image.cpio import Entry
from niclab.plumbing.image.elf import is_elf, read_dynamic
from niclab.plumbing.image.recipe import Recipe
from niclab.plumbing.image.tartree import TarTree

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib")
BASE_DIRS = (
    "dev",
    "proc",
    "sys",
    "run",
    "tmp",
    "root",
    "etc",
    "var",
    "mnt",
    "usr",
    "usr/bin",
    "usr/sbin",
    "usr/lib",
    "usr/lib64",
)
MERGED_USR = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
DEVICES = {"dev/console": (stat.S_IFCHR | 0o600, (5, 1)), "dev/null": (stat.S_IFCHR | 0o666, (1, 3))}


@dataclass
class Tree:
    """The initramfs being built: path (no leading slash) -> entry."""

    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        parent = posixpath.dirname(entry.name)
        if parent and parent not in self.entries:
            self.add(Entry(parent, stat.S_IFDIR | 0o755))
        self.entries[entry.name] = entry

    def has(self, name: str) -> bool:
        return name in self.entries

    def sorted_entries(self) -> list[Entry]:
        return [self.entries[name] for name in sorted(self.entries)]


def _usr_path(path: str) -> str:
    """Where a guest path lands in the merged-/usr initramfs (no leading slash)."""
    path = path.lstrip("/")
    top, _, rest = path.partition("/")
    return posixpath.join(MERGED_USR[top], rest) if top in MERGED_USR and rest else path


def copy_file(tree: Tree, root: TarTree, path: str) -> bytes:
    data = root.read(path)
    tree.add(Entry(_usr_path(root.resolve(path)), stat.S_IFREG | (root.mode(path) & 0o7777), data))
    resolved = _usr_path(root.resolve(path))
    wanted = _usr_path(path)
    if wanted != resolved and not tree.has(wanted):
        tree.add(Entry(wanted, stat.S_IFLNK | 0o777, ("/" + resolved).encode()))
    return data


def _find_library(root: TarTree, name: str, runpath: tuple[str, ...]) -> str:
    for directory in (*runpath, *LIBRARY_DIRS):
        candidate = posixpath.join(directory, name)
        if root.exists(candidate):
            return candidate
    raise NiclabError(f"image build: shared library {name} not found in the guest root")


def copy_with_libraries(tree: Tree, root: TarTree, path: str) -> None:
    todo, seen = [path], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if not root.exists(current):
            raise NiclabError(f"image build: {current} is not in the guest root; is its package in the recipe?")
        data = copy_file(tree, root, current)
        if is_elf(data):
            dynamic = read_dynamic(data)
            if dynamic.interpreter:
                todo.append(dynamic.interpreter)
            todo.extend(_find_library(root, lib, dynamic.runpath) for lib in dynamic.needed)


def add_programs(tree: Tree, root: TarTree, recipe: Recipe) -> None:
    """The recipe's `binaries` with the shared libraries they need, and its `files` as they are."""
    for path in recipe.binaries:
        copy_with_libraries(tree, root, path)
    for path in recipe.files:
        if not root.exists(path):
            raise NiclabError(f"image build: {path} is not in the guest root; is its package in the recipe?")
        copy_file(tree, root, path)


def copy_tree(tree: Tree, root: TarTree, path: str, exclude: tuple[str, ...] = ()) -> None:
    """Every file and symlink below `path`, but those below a directory (or named) as in `exclude`; the shared
    libraries of its ELF files (Python's extension modules) come along."""
    base = root.resolve(path)
    names = root.names_under(base)
    if not names:
        raise NiclabError(f"image build: {path} is not in the guest root; is its package in the recipe?")
    for rel in names:
        if set(rel.split("/")) & set(exclude):
            continue
        name = posixpath.join(base, rel)
        member = root.member(name)
        if member is not None and member.isfile():  # a dangling symlink, or one to a directory, stays out
            copy_with_libraries(tree, root, name)


def _busybox_applets(busybox: bytes) -> list[str]:
    """Where the guest's static busybox puts its applets ("sbin/modprobe"; run once, --list-full)."""
    with tempfile.TemporaryDirectory(prefix="niclab-busybox-") as scratch:
        program = Path(scratch) / "busybox"
        program.write_bytes(busybox)
        program.chmod(0o755)
        listing = subprocess.run([program, "--list-full"], capture_output=True, text=True, check=True)
    return sorted(set(listing.stdout.split()))


def add_overlay(tree: Tree, overlay: Path) -> None:
    for path in sorted(overlay.rglob("*")):
        name = path.relative_to(overlay).as_posix()
        if path.is_dir():
            tree.add(Entry(name, stat.S_IFDIR | 0o755))
        else:
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            tree.add(Entry(name, stat.S_IFREG | mode, path.read_bytes()))


def assemble(root: TarTree, recipe: Recipe) -> list[Entry]:
    """The initramfs entries of everything but the kernel's modules (kernelfiles.module_set adds those)."""
    tree = Tree()
    for name in BASE_DIRS:
        tree.add(Entry(name, stat.S_IFDIR | 0o755))
    tree.add(Entry("tmp", stat.S_IFDIR | 0o1777))
    for link, target in MERGED_USR.items():
        tree.add(Entry(link, stat.S_IFLNK | 0o777, target.encode()))
    for name, (mode, rdev) in DEVICES.items():
        tree.add(Entry(name, mode, rdev=rdev))

    add_programs(tree, root, recipe)

    busybox = root.read("/usr/bin/busybox")
    tree.add(Entry("usr/bin/busybox", stat.S_IFREG | 0o755, busybox))
    tree.add(Entry("init", stat.S_IFLNK | 0o777, b"/usr/bin/busybox"))
    if tree.has("usr/bin/dash"):  # else busybox is the shell too
        tree.add(Entry("usr/bin/sh", stat.S_IFLNK | 0o777, b"dash"))
    for applet in _busybox_applets(busybox):
        # Real programs win over applets: busybox's `ip` and `tc` are not iproute2's.
        name = posixpath.basename(applet)
        if any(tree.has(f"usr/{d}/{name}") for d in ("bin", "sbin")):
            continue
        target = _usr_path(applet)
        tree.add(
            Entry(
                target, stat.S_IFLNK | 0o777, posixpath.relpath("usr/bin/busybox", posixpath.dirname(target)).encode()
            )
        )

    add_overlay(tree, recipe.initrd_overlay)
    return tree.sorted_entries()
