"""One kernel's files, wherever they come from, and the initramfs part that carries its modules.

A Debian root's kernel and a developer's built tree (read where `make modules_install` would) give the same:
the modules a recipe names with what they depend on, unpacked, and a modules.dep and modules.alias written
from their .modinfo as depmod would (docs/architecture.md, "An image's initramfs is two archives").
"""

from __future__ import annotations

import posixpath
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.plumbing.image import modules as kmod
from niclab.plumbing.image.assemble import Tree
from niclab.plumbing.image.cpio import Entry
from niclab.plumbing.image.modinfo import COMPRESSED, decompress, read_modinfo
from niclab.plumbing.image.tartree import TarTree

EXTRA_FILES = ("modules.builtin", "modules.builtin.modinfo")
MODULE_DIRS = ("/usr/lib/modules", "/lib/modules")  # merged /usr, or a package extracted as it is


@dataclass(frozen=True)
class KernelFiles:
    version: str  # its release (uname -r)
    origin: str  # where it came from, for the manifest and provenance
    read_kernel: Callable[[], bytes]
    config: str | None  # its .config, if it came with one
    modules: dict[str, str]  # module name (e1000, ne2k_pci) -> path in the modules directory
    read_module: Callable[[str], bytes]  # such a path -> the file as it is (maybe compressed)
    builtin: frozenset[str]  # modules built into the kernel image
    extra: dict[str, bytes]  # modules.builtin, modules.builtin.modinfo: copied as they are


MODULE_SUFFIXES = (".ko", *(".ko" + suffix for suffix in COMPRESSED))


def _by_name(paths: list[str]) -> dict[str, str]:
    return {kmod.module_name(path): path for path in paths if path.endswith(MODULE_SUFFIXES)}


def _builtin(text: str) -> frozenset[str]:
    return frozenset(kmod.module_name(line.strip()) for line in text.splitlines() if line.strip())


def from_root(root: TarTree, origin: str = "") -> KernelFiles:
    """The one kernel installed (or extracted) in a Debian root."""
    found = [(d, v) for d in MODULE_DIRS for v in root.listdir(d)]
    versions = sorted({v for _, v in found})
    if len(versions) != 1:
        raise NiclabError(f"image build: expected one kernel in the guest root, found {versions or 'none'}")
    (version,) = versions
    base = next(f"{d}/{version}" for d, v in found if v == version)
    files = root.files_under(base)
    extra: dict[str, bytes] = {name: root.read(f"{base}/{name}") for name in EXTRA_FILES if name in files}
    return KernelFiles(
        version=version,
        origin=origin or f"the guest root's kernel {version}",
        read_kernel=lambda: root.read(f"/boot/vmlinuz-{version}"),
        config=root.read(f"/boot/config-{version}").decode() if root.exists(f"/boot/config-{version}") else None,
        modules=_by_name([f for f in files if f.startswith("kernel/")]),
        read_module=lambda path: root.read(f"{base}/{path}"),
        builtin=_builtin(extra.get("modules.builtin", b"").decode()),
        extra=extra,
    )


def from_build_tree(tree: Path) -> KernelFiles:
    """A built kernel tree (or its O= build directory): what `make bzImage modules` left in it."""
    needed = {
        "arch/x86/boot/bzImage": "make bzImage",
        "include/config/kernel.release": "make",
        ".config": "make defconfig (or olddefconfig)",
    }
    for rel, how in needed.items():
        if not (tree / rel).is_file():
            raise NiclabError(f"kernel build {tree}: no {rel}; is it a built x86 kernel tree? Build it first ({how})")
    order = tree / "modules.order"
    modules: list[str] = []
    if order.is_file():
        for line in order.read_text().split():  # drivers/net/e1000/e1000.o (6.2+), .ko before; kernel/ once prefixed
            rel = line.removeprefix("kernel/")
            rel = rel[:-2] + ".ko" if rel.endswith(".o") else rel
            if not (tree / rel).is_file():
                raise NiclabError(
                    f"kernel build {tree}: modules.order lists {line} but {rel} is not there; run `make modules`"
                )
            modules.append("kernel/" + rel)
    extra = {
        name: (tree / name).read_bytes()
        for name in ("modules.builtin", "modules.builtin.modinfo")
        if (tree / name).is_file()
    }
    return KernelFiles(
        version=(tree / "include/config/kernel.release").read_text().strip(),
        origin=f"kernel build {tree}",
        read_kernel=(tree / "arch/x86/boot/bzImage").read_bytes,
        config=(tree / ".config").read_text(),
        modules=_by_name(modules),
        read_module=lambda path: (tree / path.removeprefix("kernel/")).read_bytes(),
        builtin=_builtin(extra.get("modules.builtin", b"").decode()),
        extra=extra,
    )


@dataclass(frozen=True)
class ModuleSet:
    entries: list[Entry]  # the initramfs files: usr/lib/modules/<version>/...
    loaded: list[str]  # every module in it, sorted
    builtin: list[str]  # modules asked for that the kernel has built in
    missing: list[str]  # modules asked for that it has neither way
    params: dict[str, list[str]]  # module (loaded or built in) -> the parameters it takes
    firmware: dict[str, list[str]] = field(default_factory=dict)  # module -> the firmware files it names


def builtin_params(modinfo: bytes) -> dict[str, list[str]]:
    """module -> parameter names, from modules.builtin.modinfo (NUL-separated `e1000.parm=Name:text`)."""
    params: dict[str, list[str]] = {}
    for item in modinfo.decode(errors="replace").split("\0"):
        module, dot, rest = item.partition(".")
        if dot and rest.startswith("parm="):
            name = rest[len("parm=") :].partition(":")[0]
            if name not in params.setdefault(module.replace("-", "_"), []):
                params[module.replace("-", "_")].append(name)
    return params


def module_set(kernel: KernelFiles, wanted: list[str]) -> ModuleSet:
    """The `wanted` modules and all they depend on, as initramfs entries with their modules.dep and modules.alias."""
    names = [name.replace("-", "_") for name in wanted]
    builtin = [n for n in names if n in kernel.builtin and n not in kernel.modules]
    missing = [n for n in names if n not in kernel.modules and n not in kernel.builtin]
    base = f"usr/lib/modules/{kernel.version}"
    chosen: dict[str, tuple[str, bytes]] = {}  # name -> (path as installed, content unpacked)
    deps: dict[str, tuple[str, ...]] = {}
    aliases: list[str] = []
    firmware: dict[str, list[str]] = {}
    params = {n: p for n, p in builtin_params(kernel.extra.get("modules.builtin.modinfo", b"")).items() if n in builtin}
    todo = [n for n in names if n in kernel.modules]
    while todo:
        name = todo.pop()
        if name in chosen:
            continue
        path = kernel.modules[name]
        suffix = posixpath.splitext(path)[1]
        data = decompress(kernel.read_module(path), suffix) if suffix in COMPRESSED else kernel.read_module(path)
        info = read_modinfo(data)
        installed = path[: -len(suffix)] if suffix in COMPRESSED else path
        chosen[name] = (installed, data)
        deps[name] = tuple(d.replace("-", "_") for d in info.depends)
        for dep in deps[name]:
            if dep not in kernel.modules:
                raise NiclabError(
                    f"image build: {kernel.origin}: module {name} depends on {dep}, which it does not have"
                )
            todo.append(dep)
        aliases += [f"alias {alias} {name}" for alias in info.aliases]
        params[name] = list(info.params)
        if info.firmware:
            firmware[name] = list(info.firmware)

    def closure(name: str) -> list[str]:  # modules.dep lists every module needed first, nearest last
        out: list[str] = []
        for dep in deps[name]:
            for item in [*closure(dep), dep]:
                if item not in out:
                    out.append(item)
        return out

    entries = [Entry(f"{base}/{installed}", stat.S_IFREG | 0o644, data) for installed, data in chosen.values()]
    dep_lines = [
        f"{chosen[n][0]}:{''.join(' ' + chosen[d][0] for d in reversed(closure(n)))}\n" for n in sorted(chosen)
    ]
    entries.append(Entry(f"{base}/modules.dep", stat.S_IFREG | 0o644, "".join(dep_lines).encode()))
    entries.append(
        Entry(f"{base}/modules.alias", stat.S_IFREG | 0o644, "".join(a + "\n" for a in sorted(aliases)).encode())
    )
    entries += [Entry(f"{base}/{name}", stat.S_IFREG | 0o644, data) for name, data in kernel.extra.items()]
    tree = Tree()  # with the directories above each file: the kernel's unpacker makes none itself
    for entry in entries:
        tree.add(entry)
    return ModuleSet(
        tree.sorted_entries(),
        sorted(chosen),
        builtin,
        missing,
        dict(sorted(params.items())),
        dict(sorted(firmware.items())),
    )
