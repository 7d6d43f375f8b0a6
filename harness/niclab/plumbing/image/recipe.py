"""An image recipe: images/<name>/recipe.toml plus the files beside it."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError

#: The build code is an input too: any change to it builds the image anew.
BUILDER_SOURCES = Path(__file__).parent


@dataclass(frozen=True)
class SourceBuild:
    """A program built from Debian's source in the throw-away root (a [[build]] table)."""

    source: str  # the source package, as `apt-get source` takes it
    needs: tuple[str, ...]  # packages the build needs (fetched like `packages`, never copied)
    script: str  # shell commands run in the unpacked source; they install the program


@dataclass(frozen=True)
class Disk:
    """A [disk] table: the recipe's packages go onto an ext4 disk, and the initramfs only mounts it."""

    size_mib: int  # the file system's size (the qcow2 file holds only what is used)
    inodes: int
    customize: str | None = None  # a script beside the recipe, run in the root as a customize hook


@dataclass(frozen=True)
class Recipe:
    name: str
    directory: Path
    suite: str
    components: tuple[str, ...]
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    files: tuple[str, ...]
    modules: tuple[str, ...]
    cmdline: str
    builds: tuple[SourceBuild, ...] = ()
    disk: Disk | None = None

    @property
    def rootfs_overlay(self) -> Path:
        """Files copied over the guest root: the initramfs's (micro), or the disk's."""
        return self.directory / "rootfs"

    @property
    def initrd_overlay(self) -> Path:
        """Files copied into the initramfs last (its /init, /etc): rootfs/ for the micro kind, initrd/ beside a disk."""
        return self.directory / "initrd" if self.disk else self.rootfs_overlay

    def input_hash(self) -> str:
        """A hash of every input: the recipe, the files beside it, the builder's code."""
        digest = hashlib.sha256()
        for label, base in (("recipe", self.directory), ("builder", BUILDER_SOURCES)):
            paths = base.rglob("*") if label == "recipe" else base.glob("*.py")
            for path in sorted(p for p in paths if p.is_file()):
                rel = path.relative_to(base).as_posix()
                mode = "x" if path.stat().st_mode & 0o111 else "-"
                digest.update(f"{label}:{rel} {mode}\n".encode())
                digest.update(path.read_bytes())
        return digest.hexdigest()[:16]


def _disk(table: dict) -> Disk:
    return Disk(
        size_mib=int(table["size_mib"]), inodes=int(table.get("inodes", 65536)), customize=table.get("customize")
    )


def load_recipe(directory: Path) -> Recipe:
    path = directory / "recipe.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise NiclabError(f"{path}: no such recipe") from None
    except tomllib.TOMLDecodeError as exc:
        raise NiclabError(f"{path}: {exc}") from None
    try:
        return Recipe(
            name=directory.name,
            directory=directory,
            suite=data["suite"],
            components=tuple(data["components"]),
            packages=tuple(data["packages"]),
            binaries=tuple(data.get("binaries", ())),
            files=tuple(data.get("files", ())),
            modules=tuple(data["modules"]),
            cmdline=data["cmdline"],
            builds=tuple(
                SourceBuild(b["source"], tuple(b.get("needs", ())), b["script"]) for b in data.get("build", ())
            ),
            disk=_disk(data["disk"]) if "disk" in data else None,
        )
    except KeyError as exc:
        raise NiclabError(f"{path}: missing key {exc.args[0]!r}") from None
