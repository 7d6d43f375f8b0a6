"""An image recipe: images/<name>/recipe.toml plus the files beside it."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError

#: The build code is an input too: any change to it builds the image anew.
BUILDER_SOURCES = Path(__file__).parent
#: Builder files that only some recipes use: an input of those recipes' images alone, so that the micro image
#: is not built again when code it never runs changes.
FEATURE_SOURCES = {
    "drivers.py": lambda recipe: bool(recipe.module_dirs or recipe.firmware != "none"),
    "layer.py": lambda recipe: recipe.parent is not None,
    "addon.py": lambda recipe: recipe.addon,
    "addons.py": lambda recipe: recipe.addon,
}
FIRMWARE_CHOICES = ("none", "modules")
# How initrd.img holds the userspace and modules archives: "gzip" (as they are kept beside it), or "plain"
# (unpacked: the kernel then copies instead of inflating, which under TCG is most of the initramfs's time).
INITRAMFS_CHOICES = ("gzip", "plain")


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
    # every module under these directories of the kernel's modules (kernel/drivers/net/ethernet), with `modules`
    module_dirs: tuple[str, ...] = ()
    # "modules": the firmware files the image's modules name (modinfo firmware:), from the root's /usr/lib/firmware
    firmware: str = "none"
    initramfs: str = "gzip"  # INITRAMFS_CHOICES; a recipe that `extends` another does not take its parent's
    parent: Recipe | None = None  # the recipe this one `extends`: its files beside it are inputs too
    own_packages: tuple[str, ...] = ()  # the packages its own recipe.toml lists (what a layer on the parent fetches)
    # an add-on (`addon = true`): no kernel, an archive added after any image's initramfs (plumbing/image/addon.py)
    addon: bool = False
    trees: tuple[str, ...] = ()  # whole directories copied into an add-on, their programs' libraries along
    tree_exclude: tuple[str, ...] = ()  # names of directories and files left out of `trees` (test, __pycache__)
    memory_mib: int = 0  # what an add-on's programs take in a guest beside its files (python3 running the tests)

    def _overlay(self, name: str) -> Path:
        own = self.directory / name
        return self.parent._overlay(name) if self.parent is not None and not own.is_dir() else own

    @property
    def rootfs_overlay(self) -> Path:
        """Files copied over the guest root: the initramfs's (micro), or the disk's; the parent's if it has none."""
        return self._overlay("rootfs")

    @property
    def initrd_overlay(self) -> Path:
        """Files copied into the initramfs last (its /init, /etc): rootfs/ for the micro kind, initrd/ beside a disk."""
        return self._overlay("initrd") if self.disk else self.rootfs_overlay

    def builder_sources(self) -> list[Path]:
        """The builder's code this recipe's build runs: every module but the features it does not use."""
        return [
            path
            for path in BUILDER_SOURCES.glob("*.py")
            if path.name not in FEATURE_SOURCES or FEATURE_SOURCES[path.name](self)
        ]

    def input_hash(self) -> str:
        """A hash of every input: the recipe (and the one it extends), the files beside them, the builder's code."""
        digest = hashlib.sha256()
        parents = []
        ancestor = self.parent
        while ancestor is not None:
            parents.append((f"extends:{ancestor.name}", ancestor.directory))
            ancestor = ancestor.parent
        for label, base in (*reversed(parents), ("recipe", self.directory), ("builder", BUILDER_SOURCES)):
            paths = self.builder_sources() if label == "builder" else base.rglob("*")
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


def _extended(parent: Recipe, data: dict) -> dict:
    """The recipe's table over its parent's: its lists after the parent's, its other keys in their place."""
    merged: dict = {
        "suite": parent.suite,
        "components": list(parent.components),
        "packages": list(parent.packages),
        "binaries": list(parent.binaries),
        "files": list(parent.files),
        "modules": list(parent.modules),
        "module_dirs": list(parent.module_dirs),
        "cmdline": parent.cmdline,
        "firmware": parent.firmware,
    }
    for key, value in data.items():
        if key == "build":
            continue
        old = merged.get(key)
        merged[key] = old + [v for v in value if v not in old] if isinstance(old, list) else value
    return merged


def _builds(data: dict) -> tuple[SourceBuild, ...]:
    return tuple(SourceBuild(b["source"], tuple(b.get("needs", ())), b["script"]) for b in data.get("build", ()))


def load_recipe(directory: Path, _seen: tuple[str, ...] = ()) -> Recipe:
    path = directory / "recipe.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise NiclabError(f"{path}: no such recipe") from None
    except tomllib.TOMLDecodeError as exc:
        raise NiclabError(f"{path}: {exc}") from None
    parent = None
    own_packages = tuple(data.get("packages", ()))
    if data.get("addon") is True:
        return _addon(directory, path, data)
    if "extends" in data:
        name = str(data.pop("extends"))
        if name in (*_seen, directory.name) or "/" in name or name.startswith("."):
            raise NiclabError(f"{path}: extends = {name!r}: name another recipe beside this one (images/<name>/)")
        parent = load_recipe(directory.parent / name, (*_seen, directory.name))
        builds = parent.builds + _builds(data)
        data = _extended(parent, data)
    else:
        builds = _builds(data)
    try:
        firmware = str(data.get("firmware", "none"))
        if firmware not in FIRMWARE_CHOICES:
            raise NiclabError(f"{path}: firmware = {firmware!r}: it is one of {', '.join(FIRMWARE_CHOICES)}")
        initramfs = str(data.get("initramfs", "gzip"))
        if initramfs not in INITRAMFS_CHOICES:
            raise NiclabError(f"{path}: initramfs = {initramfs!r}: it is one of {', '.join(INITRAMFS_CHOICES)}")
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
            builds=builds,
            disk=_disk(data["disk"]) if "disk" in data else (parent.disk if parent else None),
            module_dirs=tuple(d.strip("/") for d in data.get("module_dirs", ())),
            firmware=firmware,
            initramfs=initramfs,
            parent=parent,
            own_packages=own_packages,
        )
    except KeyError as exc:
        raise NiclabError(f"{path}: missing key {exc.args[0]!r}") from None


ADDON_KEYS = {"addon", "suite", "components", "packages", "binaries", "files", "trees", "tree_exclude", "memory_mib"}


def _addon(directory: Path, path: Path, data: dict) -> Recipe:
    """An add-on recipe: packages, programs, files and whole trees, with no kernel, modules or disk of its own."""
    unknown = sorted(set(data) - ADDON_KEYS)
    if unknown:
        raise NiclabError(
            f"{path}: an add-on (addon = true) has no {', '.join(map(repr, unknown))}: it takes "
            f"{', '.join(sorted(ADDON_KEYS))}"
        )
    try:
        return Recipe(
            name=directory.name,
            directory=directory,
            suite=data["suite"],
            components=tuple(data.get("components", ("main",))),
            packages=tuple(data["packages"]),
            binaries=tuple(data.get("binaries", ())),
            files=tuple(data.get("files", ())),
            modules=(),
            cmdline="",
            own_packages=tuple(data["packages"]),
            addon=True,
            trees=tuple(data.get("trees", ())),
            tree_exclude=tuple(data.get("tree_exclude", ())),
            memory_mib=int(data.get("memory_mib", 0)),
        )
    except KeyError as exc:
        raise NiclabError(f"{path}: missing key {exc.args[0]!r}") from None
